"""The ``math`` dialect: elementary functions on floats (and ``absi`` on integers).

``math.exp %x : f32``.  The interpreter computes with numpy at the type's
precision (bf16 through float32, then rounded); backends may differ from it by
the last few ulp for transcendental functions, never for exact ones (sqrt,
abs, floor, ceil, fma).
"""

from __future__ import annotations

import math as pymath
from fractions import Fraction

import numpy as np

from irc.semantics import is_array, round_to, signed, wrap

from .families import ELEMENTWISE, BinaryOp, TernaryOp, UnaryOp

_erf = np.vectorize(pymath.erf, otypes=[np.float64])


def _unary(fn):
    """A float unary op's compute: apply ``fn`` at the type's precision, then round."""

    def compute(a, t):
        if t.kind in ("bf16", "f16"):
            return round_to(fn(np.asarray(a, dtype=np.float32)), t)[()] if not is_array(a) else \
                round_to(fn(a.astype(np.float32)), t)
        result = round_to(fn(a), t)
        # A scalar stays a numpy scalar: np.vectorize'd functions (erf) return 0-d arrays.
        return result[()] if is_array(result) and not is_array(a) else result

    return staticmethod(compute)


class FloatUnaryOp(UnaryOp):
    operand_kind = "float"
    traits = ELEMENTWISE


class ExpOp(FloatUnaryOp):
    name = "math.exp"
    summary = "e raised to x."
    example = "%r = math.exp %x : f32"
    compute = _unary(np.exp)


class Exp2Op(FloatUnaryOp):
    name = "math.exp2"
    summary = "2 raised to x."
    example = "%r = math.exp2 %x : f32"
    compute = _unary(np.exp2)


class ExpM1Op(FloatUnaryOp):
    name = "math.expm1"
    summary = "exp(x) - 1, accurate near zero."
    example = "%r = math.expm1 %x : f32"
    compute = _unary(np.expm1)


class LogOp(FloatUnaryOp):
    name = "math.log"
    summary = "Natural logarithm (NaN below zero, -inf at zero)."
    example = "%r = math.log %x : f32"
    compute = _unary(np.log)


class Log1pOp(FloatUnaryOp):
    name = "math.log1p"
    summary = "log(1 + x), accurate near zero."
    example = "%r = math.log1p %x : f32"
    compute = _unary(np.log1p)


class Log2Op(FloatUnaryOp):
    name = "math.log2"
    summary = "Base-2 logarithm."
    example = "%r = math.log2 %x : f32"
    compute = _unary(np.log2)


class TanhOp(FloatUnaryOp):
    name = "math.tanh"
    summary = "Hyperbolic tangent."
    example = "%r = math.tanh %t : tensor<4xf32>"
    compute = _unary(np.tanh)


class SqrtOp(FloatUnaryOp):
    name = "math.sqrt"
    summary = "Square root, correctly rounded (NaN below zero)."
    example = "%r = math.sqrt %x : f32"
    compute = _unary(np.sqrt)


class RsqrtOp(FloatUnaryOp):
    name = "math.rsqrt"
    summary = "1 / sqrt(x)."
    example = "%r = math.rsqrt %x : f32"
    compute = _unary(lambda a: np.true_divide(1, np.sqrt(a)).astype(np.result_type(a)))


class SinOp(FloatUnaryOp):
    name = "math.sin"
    summary = "Sine (radians)."
    example = "%r = math.sin %x : f32"
    compute = _unary(np.sin)


class CosOp(FloatUnaryOp):
    name = "math.cos"
    summary = "Cosine (radians)."
    example = "%r = math.cos %x : f32"
    compute = _unary(np.cos)


class ErfOp(FloatUnaryOp):
    name = "math.erf"
    summary = "The error function."
    example = "%r = math.erf %x : f32"
    compute = _unary(_erf)


class AbsFOp(FloatUnaryOp):
    name = "math.absf"
    summary = "Absolute value of a float (clears the sign bit)."
    example = "%r = math.absf %x : f32"
    compute = _unary(np.abs)


class FloorOp(FloatUnaryOp):
    name = "math.floor"
    summary = "Round toward negative infinity."
    example = "%r = math.floor %x : f32"
    compute = _unary(np.floor)


class CeilOp(FloatUnaryOp):
    name = "math.ceil"
    summary = "Round toward positive infinity."
    example = "%r = math.ceil %x : f32"
    compute = _unary(np.ceil)


class AbsIOp(UnaryOp):
    name = "math.absi"
    traits = ELEMENTWISE
    operand_kind = "int"
    summary = "Absolute value of a signed integer; abs(MIN) wraps to MIN."
    example = "%r = math.absi %a : i64"
    compute = staticmethod(lambda a, t: wrap(np.abs(signed(a, t).astype(np.int64)) if is_array(a)
                                             else abs(signed(a, t)), t))


class PowFOp(BinaryOp):
    name = "math.powf"
    traits = ELEMENTWISE
    operand_kind = "float"
    summary = "x raised to the power y (C pow)."
    example = "%r = math.powf %x, %y : f32"

    @staticmethod
    def compute(a, b, t):
        if t.kind in ("bf16", "f16"):
            return round_to(_c_pow(np.float32(a), np.float32(b)), t)
        return round_to(_c_pow(a, b), t)


def _c_pow(a, b):
    """C's pow with numpy: numpy computes ``x ** 0.5`` as ``sqrt(x)``, which differs from pow for
    x = -0.0 and -inf (sqrt gives -0.0 and NaN, pow +0.0 and +inf: |x| for both).  Found by the
    fuzz harness (program 213969: the JIT at -O0 called libm, -O3 folded with numpy)."""
    r = np.power(a, b)
    shortcut = (b == 0.5) & ((a == 0) | np.isneginf(a))
    return np.where(shortcut, np.abs(a), r)[()] if np.any(shortcut) else r


# (mantissa bits including the implicit one, lowest normal exponent, highest exponent) per float kind.
_FORMATS = {"f64": (53, -1022, 1023), "f32": (24, -126, 127), "f16": (11, -14, 15), "bf16": (8, -126, 127)}


def _round_fraction(q: Fraction, kind: str) -> float:
    """``q`` rounded once, to nearest even, to the float format ``kind`` (overflow gives an infinity)."""
    precision, emin, emax = _FORMATS[kind]
    x = abs(q)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    quantum = max(e, emin) - (precision - 1)
    scaled = x / Fraction(2) ** quantum
    n = scaled.numerator // scaled.denominator
    rest = scaled - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n & 1):
        n += 1
    sign = -1.0 if q < 0 else 1.0
    if n and n.bit_length() + quantum > emax + 1:
        return sign * pymath.inf
    return sign * pymath.ldexp(n, quantum)


def _fma_exact(a, b, c, kind: str = "f64"):
    """a * b + c with one rounding to ``kind`` (exact rational arithmetic, then round once)."""
    a, b, c = float(a), float(b), float(c)
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c  # an exact zero: float arithmetic gets its sign right (-0 only for -0 + -0)
    return _round_fraction(exact, kind)


_fma_vec = np.vectorize(_fma_exact, otypes=[np.float64])


class FmaOp(TernaryOp):
    name = "math.fma"
    traits = ELEMENTWISE
    operand_kind = "float"
    summary = "Fused multiply-add a * b + c with a single rounding."
    example = "%r = math.fma %x, %y, %z : f32"

    @staticmethod
    def compute(a, b, c, t):
        if is_array(a) or is_array(b) or is_array(c):
            return round_to(_fma_vec(a, b, c, t.kind), t)
        return round_to(np.float64(_fma_exact(a, b, c, t.kind)), t)
