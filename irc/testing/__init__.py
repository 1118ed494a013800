"""Testing support: random valid programs for differential testing and fuzzing.

``random_program(seed, size)`` returns the text of a module whose ``@main``
terminates without undefined behaviour on every argument list that
``random_arguments(seed, trial)`` returns, so any change in its results after a
pass is a bug in the pass (or in a fold), never in the program.
``irc.testing.strategies`` wraps the generator for hypothesis.
"""

from __future__ import annotations

from .generate import ALL_FEATURES, Features, main_signature, random_arguments, random_program
from .oracle import canonical, outcome

__all__ = ["ALL_FEATURES", "Features", "canonical", "main_signature", "outcome", "random_arguments",
           "random_program"]
