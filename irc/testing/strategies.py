"""Hypothesis strategies over the random program generator.

The generator is driven by a seed rather than by hypothesis's own choices, so a
failing example shrinks to a smaller ``size`` and seed and reproduces outside
hypothesis with ``random_program(seed, size)`` - the seed and size are what a
bug report needs.  Later test suites (backends, new passes) reuse these.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from .generate import ALL_FEATURES, Features, random_arguments, random_program

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


@dataclass(frozen=True)
class Case:
    """A generated program, how to regenerate it, and argument lists for its ``@main``."""

    seed: int
    size: int
    text: str
    arguments: tuple[tuple, ...]

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return f"Case(seed={self.seed}, size={self.size})  # irc.testing.random_program({self.seed}, {self.size})"


def programs(min_size: int = 1, max_size: int = 30, features: Features = ALL_FEATURES) -> st.SearchStrategy[str]:
    """Texts of random valid programs."""
    return st.builds(lambda seed, size: random_program(seed, size, features), SEEDS,
                     st.integers(min_value=min_size, max_value=max_size))


def cases(min_size: int = 1, max_size: int = 30, trials: int = 2,
          features: Features = ALL_FEATURES) -> st.SearchStrategy[Case]:
    """Programs with ``trials`` argument lists each (edge values and random ones)."""

    def build(seed: int, size: int) -> Case:
        args = tuple(tuple(random_arguments(seed, t, features)) for t in range(trials))
        return Case(seed, size, random_program(seed, size, features), args)

    return st.builds(build, SEEDS, st.integers(min_value=min_size, max_value=max_size))


def features() -> st.SearchStrategy[Features]:
    """Feature subsets, for narrowing a failure down to the constructs involved."""
    return st.builds(Features, floats=st.booleans(), math=st.booleans(), casts=st.booleans(), cfg=st.booleans(),
                     scf=st.booleans(), memref=st.booleans(), calls=st.booleans())
