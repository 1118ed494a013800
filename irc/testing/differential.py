"""Differential testing of a backend against the reference interpreter.

The interpreter defines what a program means, so a backend is correct on a call
if it has the same *outcome*: the same results bit for bit (as
``oracle.canonical`` compares them: -0.0 is not 0.0, every NaN equals every
NaN), the same final contents of every array argument (a function may store
into them), or a runtime fault at the same op.  Fault messages are worded by
each engine, so faults compare by their source line and column.

    from irc.testing.differential import run_both
    run_both(module, "main", [3, np.arange(4)])           # -O0 and -O3, checks on

Arrays in ``args`` are never modified: every run gets its own copy.
Everything that touches a backend is imported lazily, so this module loads
without llvmlite (nothing under irc/ may import it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .oracle import DEFAULT_MAX_STEPS, canonical


class Mismatch(AssertionError):
    """The backend's outcome differs from the interpreter's."""


@dataclass(frozen=True)
class Outcome:
    """What one call did: ``kind`` is 'ok' or 'error'."""

    kind: str
    results: tuple = ()        # canonical results ('ok')
    arrays: tuple = ()         # canonical final contents of the array arguments
    location: tuple = ()       # (line, column) of the faulting op ('error')
    message: str = ""

    def same_as(self, other: Outcome) -> bool:
        if self.kind != other.kind:
            return False
        if self.kind == "error":
            return self.location == other.location
        return self.results == other.results and self.arrays == other.arrays

    def describe(self) -> str:
        if self.kind == "error":
            return f"error at {self.location}: {self.message}"
        return f"results {self.results!r}, arrays {self.arrays!r}"


class StepLimit(Exception):
    """The interpreter gave up: out of steps (the program may not terminate on these
    arguments) or out of call depth (unbounded recursion)."""


def _copy_args(args) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _ok(results, args) -> Outcome:
    if not isinstance(results, tuple):
        results = () if results is None else (results,)
    arrays = tuple(canonical(a) for a in args if isinstance(a, np.ndarray))
    return Outcome("ok", tuple(canonical(_plain(r)) for r in results), arrays)


def _plain(value):
    """Interpreter and JIT may return a bool, np.bool_, an int or np.int64 for the same value."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def interpreter_outcome(module, entry: str, args, max_steps: int | None = DEFAULT_MAX_STEPS) -> Outcome:
    """The reference outcome; raises ``StepLimit`` when the interpreter runs out of steps."""
    from irc.diagnostics import InterpreterError
    from irc.interpreter import interpret

    args = _copy_args(args)
    try:
        results = interpret(module, entry, *args, max_steps=max_steps)
    except InterpreterError as e:
        if "step limit" in e.message or "call depth" in e.message:
            # Compiled code has no call-depth limit yet: unbounded recursion would
            # overflow the native stack (a crash, not a comparable outcome).
            raise StepLimit(e.message) from None
        return Outcome("error", location=(e.location.line, e.location.column), message=e.message)
    return _ok(results, args)


def jit_outcome(function, args) -> Outcome:
    """The outcome of calling a compiled function (``exe[name]``)."""
    from irc.diagnostics import ExecutionError

    args = _copy_args(args)
    try:
        results = function(*args)
    except ExecutionError as e:
        return Outcome("error", location=(e.location.line, e.location.column), message=e.message)
    return _ok(results, args)


def run_both(module, entry: str, args, opt_levels=(0, 3), checks: bool = True, bounds_checks: bool = True,
             max_steps: int | None = DEFAULT_MAX_STEPS, cache: bool = False, **options) -> Outcome:
    """Run ``@entry(*args)`` on the interpreter and compiled at each of ``opt_levels``.

    Raises ``Mismatch`` naming the level and both outcomes when they differ, and
    ``StepLimit`` when the interpreter gives up.  Returns the common outcome.
    With ``checks=False`` a program that faults on the interpreter is not
    compared (its compiled behaviour is then undefined).  ``bounds_checks`` is on
    by default so that an out-of-bounds access is a fault in both engines, not
    undefined behaviour; ``options`` go to ``irc.compile``.
    """
    import irc

    expected = interpreter_outcome(module, entry, args, max_steps)
    if expected.kind == "error" and not checks:
        return expected
    for level in opt_levels:
        exe = irc.compile(module, opt_level=level, checks=checks, bounds_checks=bounds_checks, cache=cache,
                          **options)
        got = jit_outcome(exe[entry], args)
        if not got.same_as(expected):
            raise Mismatch(f"@{entry}{tuple(args)!r} at -O{level}: the interpreter gives "
                           f"{expected.describe()}, the JIT gives {got.describe()}")
    return expected
