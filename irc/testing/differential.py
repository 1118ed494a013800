"""Differential testing of a backend against the reference interpreter.

The interpreter defines what a program means, so a backend is correct on a call
if it has the same *outcome*: the same results bit for bit (as
``oracle.canonical`` compares them: -0.0 is not 0.0, every NaN equals every
NaN), the same final contents of every array argument (a function may store
into them), or a runtime fault of the same kind at the same op.  Fault messages
are worded by each engine ("index [5] is out of bounds for a buffer of shape
[4]", "index out of bounds for memref<4xi64>"), so faults compare by their
source line and column and by the kind their message names (``fault_kind``).

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


# What a fault's message says happened: the first (words, kind) whose words the message contains,
# in order (so "freed twice" is a double free, not a use after free).  A message that names none of
# these is its own kind: the message, with its numbers and types left out.  "assertion failed: X"
# is X's kind: a lowering turns a check into a ``cf.assert`` that says what it checks.
FAULT_KINDS = (
    ("freed twice", "double free"),
    ("double free", "double free"),
    ("freed buffer", "use after free"),
    ("after free", "use after free"),
    ("was freed", "use after free"),
    ("stack exhausted", "stack exhausted"),
    ("stack overflow", "stack exhausted"),
    ("out of memory", "out of memory"),
    ("unable to allocate", "out of memory"),
    ("dealloc", "invalid dealloc"),
    ("not allocated", "invalid dealloc"),
    ("cannot be freed", "invalid dealloc"),
    ("too big", "size overflow"),
    ("too large", "size overflow"),
    ("maximum allowed dimension", "size overflow"),
    ("cannot allocate", "size overflow"),
    ("negative buffer size", "negative size"),
    ("not a multiple", "misaligned"),
    ("misaligned", "misaligned"),
    ("aligned", "misaligned"),
    ("does not fit", "view out of bounds"),
    ("out of bounds", "out of bounds"),
    ("out of range for shape", "out of bounds"),  # the interpreter's tensor.extract
    ("division by zero", "division by zero"),
    ("overflow in division", "division overflow"),
    ("shift amount", "shift amount"),
    ("cannot hold", "cast out of range"),
    ("call depth", "call depth"),
    ("dimension", "dimension out of range"),
    ("shapes differ", "shape mismatch"),
    ("different shapes", "shape mismatch"),
    ("step limit", "step limit"),
    ("step", "loop step"),
)

# Faults that are limits of a machine rather than of the program: compiled code runs out of native
# stack long before the interpreter runs out of anything, and either may run out of memory where
# the other does not (or LLVM removes an allocation nobody reads).  Where exactly one side reports
# one of these, the difference is allowed: counted as a *limit*, not a disagreement.
RESOURCE_LIMIT_KINDS = ("stack exhausted", "out of memory")


def fault_kind(message: str) -> str:
    """The kind of fault ``message`` reports (see ``FAULT_KINDS``)."""
    import re

    text = message.lower()
    if text.startswith("assertion failed: "):
        text = text[len("assertion failed: "):]
    for words, kind in FAULT_KINDS:
        if words in text:
            return kind
    return re.sub(r"\[[^\]]*\]|<[^>]*>|-?\d+", "_", text).strip()


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
            return self.location == other.location and self.fault_kind == other.fault_kind
        return self.results == other.results and self.arrays == other.arrays

    @property
    def fault_kind(self) -> str:
        return fault_kind(self.message) if self.kind == "error" else ""

    def is_resource_limit(self) -> bool:
        return self.fault_kind in RESOURCE_LIMIT_KINDS

    def describe(self) -> str:
        if self.kind == "error":
            return f"error at {self.location}: {self.message} ({self.fault_kind})"
        return f"results {self.results!r}, arrays {self.arrays!r}"


class StepLimit(Exception):
    """The interpreter gave up: out of steps (the program may not terminate on these arguments),
    or (unless asked to compare it) out of call depth."""


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


def interpreter_outcome(module, entry: str, args, max_steps: int | None = DEFAULT_MAX_STEPS,
                        depth_is_fault: bool = False) -> Outcome:
    """The reference outcome; raises ``StepLimit`` when the interpreter runs out of steps.

    Exceeding the call-depth limit raises ``StepLimit`` too, unless ``depth_is_fault``: then it is a
    fault to compare like any other (compiled code has the same limit; the fuzz harness compares it).
    """
    from irc.diagnostics import InterpreterError
    from irc.interpreter import interpret

    args = _copy_args(args)
    try:
        results = interpret(module, entry, *args, max_steps=max_steps)
    except InterpreterError as e:
        if "step limit" in e.message or ("call depth" in e.message and not depth_is_fault):
            # Compiled code has no step limit.
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
        if got.kind == "error" and got.message.startswith("stack exhausted"):
            # A resource only compiled code has (docs/cpu-backend.md): a limit, not a disagreement.
            raise StepLimit(got.message)
        if not got.same_as(expected):
            raise Mismatch(f"@{entry}{tuple(args)!r} at -O{level}: the interpreter gives "
                           f"{expected.describe()}, the JIT gives {got.describe()}")
    return expected


# -- transcendental functions: compared within a few ulp -----------------------------------------
#
# Compiled code calls the C library's exp, tanh, sin... which may differ from numpy's by the last
# bit or two, and a generated program can amplify one such bit into any result (its digest
# bitcasts floats to integers and hashes them).  So when the JIT disagrees on a program that uses
# inexact math, the interpreter is run again with every inexact math result moved by a few ulp
# up, then down: a result those runs change is *math-sensitive* and is compared within a small ulp
# tolerance (a float) or not at all (an integer or i1 derived from it); every other result, and
# a fault at an op, must still agree exactly.

INEXACT_MATH = ("math.exp", "math.exp2", "math.expm1", "math.log", "math.log1p", "math.log2", "math.tanh",
                "math.sin", "math.cos", "math.erf", "math.powf", "math.rsqrt")
ULP_TOLERANCE = 4


def uses_inexact_math(module) -> bool:
    return any(op.name in INEXACT_MATH for op in module.walk())


def _perturbed(ulps: int):
    """A context manager under which every inexact math op's result moves ``ulps`` ulp (up or down)."""
    from contextlib import ExitStack, contextmanager

    from irc.registry import lookup

    @contextmanager
    def patch():
        with ExitStack() as stack:
            for name in INEXACT_MATH:
                cls = lookup(name)
                original = cls.__dict__["compute"]
                fn = original.__func__ if isinstance(original, staticmethod) else original

                def compute(*args, _fn=fn):
                    r = _fn(*args)
                    toward = np.inf if ulps > 0 else -np.inf
                    for _ in range(abs(ulps)):
                        r = np.nextafter(r, np.asarray(toward, dtype=np.result_type(r)))
                    return r

                cls.compute = staticmethod(compute)
                stack.callback(setattr, cls, "compute", original)
            yield

    return patch()


def perturbed_outcomes(module, entry: str, args, max_steps: int | None = DEFAULT_MAX_STEPS) -> list[Outcome]:
    """The interpreter's outcomes with inexact math moved by +-1 and +-2 ulp (see above)."""
    outcomes = []
    for ulps in (1, -1, 2, -2):
        with _perturbed(ulps):
            try:
                outcomes.append(interpreter_outcome(module, entry, args, max_steps))
            except StepLimit:
                outcomes.append(Outcome("error", location=("step limit",)))
    return outcomes


def _ulp_distance(a: float, b: float, bits: int) -> float:
    if bits == 32:
        ia, ib = (int(np.float32(x).view(np.int32)) for x in (a, b))
    else:
        ia, ib = (int(np.float64(x).view(np.int64)) for x in (a, b))
    # Map the sign-magnitude bit patterns onto a line where adjacent floats are adjacent integers.
    ia, ib = (x if x >= 0 else -(x & ((1 << (bits - 1)) - 1)) for x in (ia, ib))
    return abs(ia - ib)


def _float_of(canon):
    import struct

    if canon == ("nan",):
        return float("nan")
    return struct.unpack("<d", bytes.fromhex(canon[1]))[0]


def agrees_within_math_tolerance(got: Outcome, expected: Outcome, perturbed: list[Outcome],
                                 result_types) -> bool:
    """Whether ``got`` differs from ``expected`` only where inexact math can explain it."""
    if got.same_as(expected):
        return True
    if got.kind != expected.kind or got.kind == "error":
        # A different fault (or a fault instead of results) is explained only if moving math moves it too.
        return any(not p.same_as(expected) for p in perturbed)
    if len(got.results) != len(expected.results) or got.arrays != expected.arrays:
        return False
    for i, (g, e) in enumerate(zip(got.results, expected.results, strict=True)):
        if g == e:
            continue
        alternatives = [p.results[i] for p in perturbed if p.kind == "ok" and len(p.results) > i]
        if all(a == e for a in alternatives):
            return False  # not math-sensitive: must agree exactly
        t = str(result_types[i]) if i < len(result_types) else ""
        if t not in ("f32", "f64"):
            continue  # an integer derived from inexact math: not compared
        if g == ("nan",) or any(a == ("nan",) for a in (e, *alternatives)) or g[0] != "float":
            if g == ("nan",) and any(a == ("nan",) for a in (e, *alternatives)):
                continue
            return False
        gv = _float_of(g)
        candidates = [_float_of(a) for a in (e, *alternatives) if a != ("nan",)]
        bits = 32 if t == "f32" else 64
        if min(candidates) <= gv <= max(candidates):
            continue
        if min(_ulp_distance(gv, c, bits) for c in candidates) <= ULP_TOLERANCE:
            continue
        return False
    return True
