"""Every level computes the same thing: the interpreter on the program as written, the
interpreter after lowering (scf-to-cf), and the JIT at -O0 and -O3 give the same results
bit for bit, or the same fault (same message, same op) - at the edges of the types too.
"""

from __future__ import annotations

import itertools

import irc.passes
import numpy as np
import pytest

import irc
from irc.diagnostics import ExecutionError, InterpreterError, IRError


class Levels:
    """One program prepared at every level: parsed, lowered by scf-to-cf, compiled at -O0 and -O3."""

    def __init__(self, text: str, **options):
        self.module = irc.parse(text, filename="prog.ir")
        self.lowered = irc.parse(text, filename="prog.ir")
        irc.passes.run(self.lowered, "scf-to-cf")
        self.exes = [irc.compile(irc.parse(text, filename="prog.ir"), opt_level=level, cache=False, **options)
                     for level in (0, 3)]

    def outcomes(self, entry: str, args) -> list:
        """The outcome (results, or ('fault', message, line, column)) at every level."""
        runs = [lambda m=m: irc.interpret(m, entry, *args, max_steps=10**6) for m in (self.module, self.lowered)]
        runs += [lambda e=e: e[entry](*args) for e in self.exes]
        return [_outcome(run) for run in runs]

    def agree(self, entry: str, args):
        """The common outcome; fails naming every level's when they differ."""
        outcomes = self.outcomes(entry, args)
        assert all(o == outcomes[0] for o in outcomes), f"@{entry}{tuple(args)}: {outcomes}"
        return outcomes[0]


def _outcome(run):
    try:
        r = run()
    except (InterpreterError, ExecutionError) as e:
        return ("fault", e.message, e.location.line, e.location.column)
    return tuple(_plain(x) for x in (r if isinstance(r, tuple) else (r,)))


def _plain(x):
    """A result as comparable data: floats by their hex spelling (-0.0 is not 0.0, nan is nan)."""
    x = np.asarray(x).tolist()
    return x.hex() if isinstance(x, float) else x


def assert_levels_agree(text: str, entry: str, args):
    return Levels(text).agree(entry, args)


# -- scf.for at the type's edge (issue 11, item 4) -------------------------------------------------

COUNT_LOOP = """
func.func @count(%lb: {t}, %ub: {t}, %s: {t}) -> (i64, {t}) {{
  %z = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %r, %last = scf.for %i = %lb to %ub step %s iter_args(%n = %z, %l = %lb) -> (i64, {t}){suffix} {{
    %n1 = arith.addi %n, %one : i64
    scf.yield %n1, %i : i64, {t}
  }}
  func.return %r, %last : i64, {t}
}}
"""


def _count_loop(t: str) -> str:
    return COUNT_LOOP.format(t=t, suffix="" if t == "index" else f" : {t}")


def _exact_trips(lb: int, ub: int, step: int) -> int:
    return max(0, -(-(ub - lb) // step))


@pytest.mark.parametrize("t,bits", [("i8", 8), ("i16", 16)])
def test_scf_for_stops_where_the_next_value_would_pass_the_maximum(t, bits):
    top, bottom = (1 << bits - 1) - 1, -(1 << bits - 1)
    edges = [bottom, bottom + 1, -1, 0, 1, top - 7, top - 2, top - 1, top]
    steps = [1, 2, 3, 5, top // 2, top]
    levels = Levels(_count_loop(t))
    for lb, ub, step in itertools.product(edges, edges, steps):
        trips = _exact_trips(lb, ub, step)
        if trips > 2000:
            continue
        last = lb + (trips - 1) * step if trips else lb
        assert levels.agree("count", [lb, ub, step]) == (trips, last), (lb, ub, step)


@pytest.mark.parametrize("t,bits", [("index", 64), ("i64", 64), ("i32", 32)])
def test_scf_for_near_the_maximum_of_wide_types_ends(t, bits):
    top = (1 << bits - 1) - 1
    levels = Levels(_count_loop(t))
    for lb, ub, step in [(top - 5, top, 4), (top - 1, top, 1), (top - 3, top, top), (0, top, top // 2 + 1),
                         (-top - 1, top, top), (top - 10, top, 3)]:
        trips = _exact_trips(lb, ub, step)
        assert levels.agree("count", [lb, ub, step]) == (trips, lb + (trips - 1) * step)


def test_scf_for_with_constant_bounds_at_the_edge():
    """Constant bounds go through canonicalize's trip-count reasoning and scf-to-cf's
    no-wrap shortcut; both must keep the exact semantics."""
    for lb, ub, step in [(120, 127, 5), (100, 127, 30), (-128, 127, 127), (126, 127, 1), (0, 127, 64),
                         (125, 127, 2), (-128, 127, 100)]:
        text = f"""
func.func @f() -> (i64, i8) {{
  %lb = arith.constant {lb} : i8
  %ub = arith.constant {ub} : i8
  %s = arith.constant {step} : i8
  %z = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %r, %last = scf.for %i = %lb to %ub step %s iter_args(%n = %z, %l = %lb) -> (i64, i8) : i8 {{
    %n1 = arith.addi %n, %one : i64
    scf.yield %n1, %i : i64, i8
  }}
  func.return %r, %last : i64, i8
}}
"""
        trips = _exact_trips(lb, ub, step)
        assert assert_levels_agree(text, "f", []) == (trips, lb + (trips - 1) * step)


def test_scf_for_dynamic_step_not_positive_faults_alike_everywhere():
    levels = Levels(_count_loop("i8"))
    for step in (0, -1, -128):
        got = levels.agree("count", [0, 5, step])
        assert got == ("fault", "assertion failed: scf.for step must be positive", 5, 15)
    # i1: the step "true" reads as -1, so no i1 loop has a positive step.
    got = assert_levels_agree(_count_loop("i1"), "count", [0, 1, 1])
    assert got[:2] == ("fault", "assertion failed: scf.for step must be positive")


@pytest.mark.parametrize("step", ["0", "-2"])
def test_scf_for_constant_step_not_positive_is_a_verifier_error(step):
    text = f"""func.func @f() {{
  %c0 = arith.constant 0 : index
  %s = arith.constant {step} : index
  scf.for %i = %c0 to %c0 step %s {{
  }}
  func.return
}}
"""
    with pytest.raises(IRError) as info:
        irc.verify(irc.parse(text, filename="prog.ir"))
    assert f"constant step must be positive, got {step}" in info.value.message
    assert (info.value.location.line, info.value.location.column) == (4, 3)


# -- f16 scalars cross the call boundary (issue 11, item 14a) ----------------------------------------

F16 = """
func.func @add(%x: f16, %y: f16) -> f16 {
  %s = arith.addf %x, %y : f16
  func.return %s : f16
}
func.func @wide(%x: f16, %n: i32) -> (f32, i32, f16) {
  %w = arith.extf %x : f16 to f32
  %h = func.call @add(%x, %x) : (f16, f16) -> f16
  func.return %w, %n, %h : f32, i32, f16
}
"""


def test_f16_scalar_parameters_and_results():
    levels = Levels(F16)
    for x, y in [(1.5, 2.25), (np.float16(0.1), 0.2), (1e-8, 65504.0), (70000.0, 1.0), (-0.0, -0.0), (3, 4),
                 (float("inf"), 1.0), (float("nan"), 0.0)]:
        levels.agree("add", [x, y])
        levels.agree("wide", [x, 7])
    assert levels.agree("add", [0.1, 0.2]) == (float(np.float16(0.1) + np.float16(0.2)).hex(),)
    assert levels.agree("wide", [70000.0, -3]) == ("inf", -3, "inf")


# -- the call-depth limit is the same call everywhere (issue 11, item 14e) ---------------------------

RECURSION = """
func.func @r(%n: i64) -> i64 {
  %z = arith.constant 0 : i64
  %done = arith.cmpi sle, %n, %z : i64
  %v = scf.if %done -> (i64) {
    scf.yield %z : i64
  } else {
    %one = arith.constant 1 : i64
    %m = arith.subi %n, %one : i64
    %x = func.call @r(%m) : (i64) -> i64
    %y = arith.addi %x, %one : i64
    scf.yield %y : i64
  }
  func.return %v : i64
}
"""


def test_call_depth_limit_is_the_same_call_at_every_level():
    from irc.interpreter import MAX_CALL_DEPTH

    levels = Levels(RECURSION)
    # r(n) runs n + 1 frames: MAX_CALL_DEPTH frames are allowed, one more is the fault.
    assert levels.agree("r", [MAX_CALL_DEPTH - 1]) == (MAX_CALL_DEPTH - 1,)
    fault = ("fault", f"call depth exceeds {MAX_CALL_DEPTH} (unbounded recursion?)", 10, 10)
    assert levels.agree("r", [MAX_CALL_DEPTH]) == fault


# -- bool arrays whose bytes are not 0 or 1 read as numpy reads them (issue 11, item 14d) -------------

BOOLS = """
func.func @flip(%m: memref<4xi1>, %n: memref<4xi1>) -> i8 {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0 : i8
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %z) -> (i8) {
    %v = memref.load %m[%i] : memref<4xi1>
    %w = memref.load %n[%i] : memref<4xi1>
    %e = arith.xori %v, %w : i1
    memref.store %e, %n[%i] : memref<4xi1>
    %x = arith.extui %v : i1 to i8
    %a = arith.addi %acc, %x : i8
    scf.yield %a : i8
  }
  func.return %r : i8
}
func.func @mix(%x: tensor<4xi1>, %y: tensor<4xi1>, %a: tensor<4xf32>) -> (tensor<4xi1>, tensor<4xi1>, tensor<4xf32>) {
  %e = arith.xori %x, %y : tensor<4xi1>
  %n = arith.andi %x, %y : tensor<4xi1>
  %z = arith.constant dense<0.0> : tensor<4xf32>
  %s = arith.select %x, %a, %z : tensor<4xi1>, tensor<4xf32>
  func.return %e, %n, %s : tensor<4xi1>, tensor<4xi1>, tensor<4xf32>
}
"""


def _odd_bools(*data):
    return np.array(data, np.uint8).view(np.bool_)


def test_bool_bytes_other_than_0_and_1_are_true_everywhere():
    module = irc.parse(BOOLS)
    exe = irc.compile(module, cache=False)
    x, y = _odd_bools(2, 0, 254, 1), _odd_bools(1, 1, 2, 0)
    want = np.logical_xor(x, y)
    for run in (lambda *a: irc.interpret(module, "flip", *a), exe.flip):
        n = y.copy()
        assert run(x.copy(), n) == 3
        assert np.array_equal(n.view(np.uint8), want.view(np.uint8))
    f = np.arange(1, 5, dtype=np.float32)
    expected = (want, np.logical_and(x, y), np.where(x, f, 0).astype(np.float32))
    for got in (irc.interpret(module, "mix", x, y, f), exe.mix(x, y, f)):
        for g, w in zip(got, expected):
            assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (g, w)
