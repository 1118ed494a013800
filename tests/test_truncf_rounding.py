"""``arith.truncf`` with MLIR's rounding modes (issue 15): each mode against an exact reference
built from the two neighbours of x in the narrow format, compared as rationals."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import irc
from irc import IRError

MODES = ["to_nearest_even", "downward", "upward", "toward_zero", "to_nearest_away"]


def _bf16_neighbours(x: float) -> tuple[float, float]:
    """The bf16 values just below and above (or equal to) x, from the float32 bit grid."""
    f = np.float32(x)
    bits = int(np.array(f).view(np.uint32))
    down = np.array(bits & 0xFFFF0000, np.uint32).view(np.float32)[()]
    candidates = sorted({float(down), float(-_next_up_bf16(-down)), float(_next_up_bf16(down))})
    lo = max(c for c in candidates if Fraction(c) <= Fraction(x))
    hi = min(c for c in candidates if Fraction(c) >= Fraction(x))
    return lo, hi


def _next_up_bf16(v) -> np.float32:
    v = np.float32(v)
    if v == 0:
        return np.array(0x00010000, np.uint32).view(np.float32)[()]
    bits = int(np.array(v).view(np.uint32))
    bits = bits + 0x10000 if v > 0 else bits - 0x10000
    return np.array(bits, np.uint32).view(np.float32)[()]


def _neighbours(x: float, kind: str) -> tuple[float, float]:
    if kind == "bf16":
        return _bf16_neighbours(x)
    dt = {"f32": np.float32, "f16": np.float16}[kind]
    with np.errstate(over="ignore"):
        r = dt(x)
    lo = r if Fraction(float(r)) <= Fraction(x) else np.nextafter(r, dt(-np.inf))
    hi = r if Fraction(float(r)) >= Fraction(x) else np.nextafter(r, dt(np.inf))
    return float(lo), float(hi)


def _mantissa_even(v: float, kind: str) -> bool:
    if kind == "f32":
        return int(np.array(np.float32(v)).view(np.uint32)) % 2 == 0
    if kind == "f16":
        return int(np.array(np.float16(v)).view(np.uint16)) % 2 == 0
    return (int(np.array(np.float32(v)).view(np.uint32)) >> 16) % 2 == 0


def _reference(x: float, kind: str, mode: str) -> float:
    lo, hi = _neighbours(x, kind)
    if lo == hi:
        return lo
    if mode == "downward":
        return lo
    if mode == "upward":
        return hi
    if mode == "toward_zero":
        return lo if x >= 0 else hi
    dlo, dhi = Fraction(x) - Fraction(lo), Fraction(hi) - Fraction(x)
    if dlo != dhi:
        return lo if dlo < dhi else hi
    if mode == "to_nearest_away":
        return hi if x >= 0 else lo
    return lo if _mantissa_even(lo, kind) else hi


def _samples(kind: str) -> list[float]:
    rng = np.random.default_rng(7)
    xs = list(rng.normal(0, 10, 200)) + list(rng.uniform(-1e-3, 1e-3, 50)) + [0.0, -0.0, 1.0, -2.5]
    # Exact ties: the midpoint of two neighbours in the narrow format.
    for v in (1.0, -3.0, 1000.5, 0.1):
        lo, hi = _neighbours(v * (1 + 1e-3), kind)
        xs.append(float((Fraction(lo) + Fraction(hi)) / 2))
    return xs


@pytest.mark.parametrize("kind", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("mode", MODES)
def test_rounding_modes_against_an_exact_reference(kind, mode):
    m = irc.parse(f"func.func @f(%x: f64) -> {kind} {{\n  %r = arith.truncf %x {mode} : f64 to {kind}\n"
                  f"  func.return %r : {kind}\n}}\n")
    m.verify()
    for x in _samples(kind):
        got = float(irc.interpret(m, "f", x))
        assert got == _reference(x, kind, mode), (x, mode, kind)


def test_the_mode_prints_back_and_is_kept_by_the_generic_form():
    text = "func.func @f(%x: f64) -> f32 {\n  %r = arith.truncf %x upward : f64 to f32\n  func.return %r : f32\n}\n"
    m = irc.parse(text)
    assert m.print() == text
    assert irc.parse(m.print(generic=True)).print() == text


def test_constant_folding_keeps_the_mode():
    m = irc.parse("func.func @f() -> f32 {\n  %c = arith.constant 0.1 : f64\n"
                  "  %r = arith.truncf %c downward : f64 to f32\n  func.return %r : f32\n}\n")
    before = irc.interpret(m, "f")
    folded = irc.passes.run(m, "canonicalize")
    assert "arith.truncf" not in folded.print()
    assert irc.interpret(folded, "f") == before == np.float32(_reference(0.1, "f32", "downward"))


def test_a_bad_mode_is_an_error():
    with pytest.raises(IRError, match="roundingmode must be"):
        irc.parse('func.func @f(%x: f64) -> f32 {\n  %r = "arith.truncf"(%x) <{roundingmode = 9 : i32}> : '
                  "(f64) -> f32\n  func.return %r : f32\n}\n").verify()
