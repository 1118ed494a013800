"""MLIR's ``overflow<nsw/nuw>`` and ``fastmath<contract>`` flags given a meaning (issue 15), and the
canonicalisations they allow.

* the interpreter and compiled code fault where a flagged ``addi``/``subi``/``muli``/``shli``
  overflows, checked against exact Python integers;
* ``divui (muli nuw a, b), a`` -> b (``divsi`` with ``nsw``): on inputs where the original runs
  without error the canonicalized function returns the same values (a fault may disappear,
  never appear);
* ``extf (truncf x contract) contract`` -> x, and the ``*_extended`` ops by 0 and 1, against
  the interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irc
from irc.diagnostics import ExecutionError

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WIDTH = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}


def ints(t: str):
    w = WIDTH[t]
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    return st.one_of(st.sampled_from([0, 1, -1, 2, -2, lo, hi, 3, 7]), st.integers(lo, hi),
                     st.integers(-40, 40))


def run(module, *args):
    """The function's results, or None where it faults."""
    try:
        return irc.interpret(module, "f", *args)
    except ExecutionError:
        return None


def exact_overflows(op: str, flag: str, a: int, b: int, w: int) -> bool:
    """Python's exact integers: does ``a op b`` leave the signed (nsw) or unsigned (nuw) range?"""
    if flag == "nuw":
        a, b = a % (1 << w), b % (1 << w)
        lo, hi = 0, (1 << w) - 1
    else:
        lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    if op == "shli":
        value = a << (b % (1 << w))
    else:
        value = {"addi": a + b, "subi": a - b, "muli": a * b}[op]
    return not lo <= value <= hi


@pytest.mark.parametrize("op", ["addi", "subi", "muli"])
@pytest.mark.parametrize("flag", ["nsw", "nuw"])
@SETTINGS
@given(a=ints("i8"), b=ints("i8"))
def test_a_flagged_op_faults_exactly_when_it_overflows(op, flag, a, b):
    m = irc.parse(f"func.func @f(%a: i8, %b: i8) -> i8 {{\n  %r = arith.{op} %a, %b overflow<{flag}> : i8\n"
                  "  func.return %r : i8\n}\n")
    assert (run(m, a, b) is None) == exact_overflows(op, flag, a, b, 8)


@pytest.mark.parametrize("flag", ["nsw", "nuw"])
@SETTINGS
@given(a=ints("i16"), s=st.integers(0, 15))
def test_a_flagged_shift_faults_exactly_when_bits_are_lost(flag, a, s):
    m = irc.parse(f"func.func @f(%a: i16, %b: i16) -> i16 {{\n  %r = arith.shli %a, %b overflow<{flag}> : i16\n"
                  "  func.return %r : i16\n}\n")
    assert (run(m, a, s) is None) == exact_overflows("shli", flag, a, s, 16)


def test_compiled_code_faults_where_the_interpreter_does():
    pytest.importorskip("llvmlite")
    m = irc.parse("func.func @f(%a: i16, %b: i16) -> (i16, i16, i16) {\n"
                  "  %x = arith.muli %a, %b overflow<nsw> : i16\n  %y = arith.addi %a, %b overflow<nuw> : i16\n"
                  "  %z = arith.shli %a, %b overflow<nsw, nuw> : i16\n  func.return %x, %y, %z : i16, i16, i16\n}\n")
    exe = irc.compile(m)
    rng = np.random.default_rng(3)
    cases = [(3, 4), (300, 300), (-1, 1), (1, 14), (2, 14), (-2, 3), (255, 2)]
    cases += [tuple(int(v) for v in rng.integers(-300, 300, 2)) for _ in range(40)]
    for a, b in cases:
        try:
            expected = irc.interpret(m, "f", a, b)
        except ExecutionError as e:
            with pytest.raises(ExecutionError) as got:
                exe.f(a, b)
            assert str(got.value).splitlines()[0] == str(e).splitlines()[0]
        else:
            assert exe.f(a, b) == expected


def _same_where_the_original_runs(text: str, params: list[str], data, gone: set[str]) -> None:
    before = irc.parse(text)
    after = irc.passes.run(irc.parse(text), "canonicalize")
    irc.verify(after)
    assert not gone & {op.name for op in after.walk()}, str(after)
    for _ in range(16):
        args = [data.draw(ints(t)) for t in params]
        expected = run(before, *args)
        if expected is not None:  # where the original faults, the fold may have removed the fault
            assert run(after, *args) == expected, (args, str(after))


@pytest.mark.parametrize("t", ["i8", "i32", "index"])
@pytest.mark.parametrize("div, flag", [("divui", "nuw"), ("divsi", "nsw")])
@pytest.mark.parametrize("by", ["a", "b"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_dividing_a_flagged_product_by_a_factor_gives_the_other(t, div, flag, by, data):
    text = (f"func.func @f(%a: {t}, %b: {t}) -> {t} {{\n  %m = arith.muli %a, %b overflow<{flag}> : {t}\n"
            f"  %r = arith.{div} %m, %{by} : {t}\n  func.return %r : {t}\n}}\n")
    _same_where_the_original_runs(text, [t, t], data, {f"arith.{div}", "arith.muli"})


def test_the_other_flag_does_not_allow_the_fold():
    text = ("func.func @f(%a: i8, %b: i8) -> i8 {\n  %m = arith.muli %a, %b overflow<nsw> : i8\n"
            "  %r = arith.divui %m, %a : i8\n  func.return %r : i8\n}\n")
    after = irc.passes.run(irc.parse(text), "canonicalize")
    assert "arith.divui" in after.print()
    # (-1) * 2 = -2 is no signed overflow, but as unsigned 255 * 2 wraps: 254 / 255 is 0, not 2.
    assert irc.interpret(irc.parse(text), "f", -1, 2) == irc.interpret(after, "f", -1, 2) == 0


@pytest.mark.parametrize("narrow", ["f16", "bf16"])
def test_a_contracted_round_trip_through_a_narrow_float_is_skipped(narrow):
    text = (f"func.func @f(%x: f32) -> f32 {{\n  %t = arith.truncf %x fastmath<contract> : f32 to {narrow}\n"
            f"  %r = arith.extf %t fastmath<contract> : {narrow} to f32\n  func.return %r : f32\n}}\n")
    after = irc.passes.run(irc.parse(text), "canonicalize")
    assert {op.name for op in after.walk()} == {"builtin.module", "func.func", "func.return"}
    for x in [0.1, -3.3, 65520.0, 1e-8]:
        assert irc.interpret(after, "f", np.float32(x)) == np.float32(x)
    # Without the flag on both, the rounding is kept.
    strict = text.replace("%x fastmath<contract>", "%x")
    kept = irc.passes.run(irc.parse(strict), "canonicalize")
    assert "arith.truncf" in kept.print()
    assert irc.interpret(kept, "f", np.float32(0.1)) == irc.interpret(irc.parse(strict), "f", np.float32(0.1))


@pytest.mark.parametrize("op, c, second", [("addui_extended", 0, "i1"), ("mului_extended", 0, "i32"),
                                           ("mulsi_extended", 0, "i32"), ("mului_extended", 1, "i32")])
@pytest.mark.parametrize("side", ["lhs", "rhs"])
@SETTINGS
@given(a=ints("i32"))
def test_extended_ops_by_zero_and_one(op, c, second, side, a):
    operands = "%c, %a" if side == "lhs" else "%a, %c"
    types = "i32, i1" if second == "i1" else "i32"
    text = (f"func.func @f(%a: i32) -> (i32, {second}) {{\n  %c = arith.constant {c} : i32\n"
            f"  %x, %y = arith.{op} {operands} : {types}\n  func.return %x, %y : i32, {second}\n}}\n")
    after = irc.passes.run(irc.parse(text), "canonicalize")
    assert f"arith.{op}" not in after.print()
    assert irc.interpret(after, "f", a) == irc.interpret(irc.parse(text), "f", a)
