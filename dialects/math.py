"""The ``math`` dialect: elementary functions on floats (and ``absi`` on integers).

``math.exp %x : f32``.  Every level computes the same bits (constant folding,
the interpreter, compiled code at every -O level): a transcendental function
(exp, exp2, expm1, log, log2, log1p, sin, cos, tanh, erf, powf) is the C
library's f64 function (glibc's, the one compiled code calls and LLVM's
constant folder calls) applied to the argument widened to f64, rounded once
to the type.  numpy's own vectorised exp/log/sin... differ from glibc by an
ulp on a few percent of inputs, so the interpreter uses Python's ``math``
module (a direct call into the same libm) element by element: much slower
than numpy on a large tensor, the price of one answer.  Exact
functions (sqrt, abs, floor, ceil, fma) stay vectorised: every correct
implementation agrees on them; rsqrt is sqrt then a division, each rounded
to the type, as compiled code does it.  ``irc.testing.math_sweep`` checks it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math as pymath
from fractions import Fraction

import numpy as np

from irc.semantics import is_array, round_to, signed, unsigned, widen_to_f64, width, wrap

from .families import ELEMENTWISE, BinaryOp, TernaryOp, UnaryOp


def _libm(scalar_fn, numpy_fn):
    """``scalar_fn`` (a ``math`` function, i.e. glibc's f64 function) over float64 scalars and
    arrays.  Python's ``math`` raises where C returns an infinity or a NaN (overflow, a pole, a
    domain error); those few inputs take numpy's answer, which is the C special value."""

    def one(*xs: float) -> float:
        try:
            return scalar_fn(*xs)
        except (OverflowError, ValueError):
            with np.errstate(all="ignore"):
                return float(numpy_fn(*map(np.float64, xs)))

    def apply(*xs):
        wide = [widen_to_f64(x) for x in xs]
        if not any(is_array(x) for x in xs):
            return np.float64(one(*map(float, wide)))
        arrays = np.broadcast_arrays(*wide)
        columns = [a.ravel().tolist() for a in arrays]
        try:  # the fast path: no element raises
            flat = np.fromiter(map(scalar_fn, *columns), np.float64, arrays[0].size)
        except (OverflowError, ValueError):
            flat = np.fromiter(map(one, *columns), np.float64, arrays[0].size)
        return flat.reshape(arrays[0].shape)

    return apply


def _transcendental(fn):
    """A unary op's compute through glibc's f64 function, rounded once to the type."""

    def compute(a, t):
        return round_to(fn(a), t)

    return staticmethod(compute)


def _exact(fn):
    """A unary op whose result is exact in any precision (or, for sqrt, correctly rounded by
    every implementation): numpy at the type's precision (bf16 through float32, then rounded)."""

    def compute(a, t):
        if t.kind == "bf16":
            return round_to(fn(np.asarray(a, dtype=np.float32)), t)[()] if not is_array(a) else \
                round_to(fn(a.astype(np.float32)), t)
        return round_to(fn(a), t)

    return staticmethod(compute)


def _exact2(fn):
    """A binary op whose result is exact in any precision (copysign): numpy at the type's precision."""

    def compute(a, b, t):
        if t.kind == "bf16":
            return round_to(fn(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)), t)
        return round_to(fn(a, b), t)

    return staticmethod(compute)


_exp = _libm(pymath.exp, np.exp)
_exp2 = _libm(pymath.exp2, np.exp2)
_expm1 = _libm(pymath.expm1, np.expm1)
_log = _libm(pymath.log, np.log)
_log2 = _libm(pymath.log2, np.log2)
_log1p = _libm(pymath.log1p, np.log1p)
_sin = _libm(pymath.sin, np.sin)
_cos = _libm(pymath.cos, np.cos)
_tanh = _libm(pymath.tanh, np.tanh)
_log10 = _libm(pymath.log10, np.log10)
_tan = _libm(pymath.tan, np.tan)
_erf = _libm(pymath.erf, np.vectorize(pymath.erf, otypes=[np.float64]))
@functools.cache
def _libm_pow():
    """libm's own pow, loaded when first needed (finding libm runs ldconfig: not at import)."""
    pow_ = ctypes.CDLL(ctypes.util.find_library("m")).pow
    pow_.restype, pow_.argtypes = ctypes.c_double, [ctypes.c_double, ctypes.c_double]
    return pow_


def _c_pow(x: float, y: float) -> float:
    """C's pow: Python's ``math.pow`` answers 1 for pow(NaN, 0) and pow(1, NaN) itself, where glibc
    returns a NaN for a signalling NaN; NaN arguments go to libm (a ctypes double keeps the bits)."""
    if x != x or y != y:
        return _libm_pow()(x, y)
    return pymath.pow(x, y)


_pow = _libm(_c_pow, np.power)


LN2 = pymath.log(2.0)
LN10 = pymath.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / pymath.sqrt(pymath.pi)


def _sech2(x):
    """1 - tanh(x)^2 as 4w / (1 + w)^2 with w = exp(-2|x|): no cancellation, no overflow.  (absf's
    derivative 0 at x = 0 does no harm to higher derivatives: w's derivative there multiplies
    d/dw [4w / (1 + w)^2] = 4(1 - w) / (1 + w)^3, which is 0 at w = 1.)"""
    w = (-2.0 * x.abs()).exp()
    s = w + 1.0
    return 4.0 * w / (s * s)


class FloatUnaryOp(UnaryOp):
    operand_kind = "float"
    traits = ELEMENTWISE


class ExpOp(FloatUnaryOp):
    name = "math.exp"
    summary = "e raised to x."
    example = "%r = math.exp %x : f32"
    compute = _transcendental(_exp)

    partials = staticmethod(lambda b, x, y: [y])


class Exp2Op(FloatUnaryOp):
    name = "math.exp2"
    summary = "2 raised to x."
    example = "%r = math.exp2 %x : f32"
    compute = _transcendental(_exp2)

    partials = staticmethod(lambda b, x, y: [y * LN2])


class ExpM1Op(FloatUnaryOp):
    name = "math.expm1"
    summary = "exp(x) - 1, accurate near zero."
    example = "%r = math.expm1 %x : f32"
    compute = _transcendental(_expm1)

    # exp(x), not y + 1: for x << 0, y + 1 rounds to 0 where the derivative is tiny but not zero.
    partials = staticmethod(lambda b, x, y: [x[0].exp()])


class LogOp(FloatUnaryOp):
    name = "math.log"
    summary = "Natural logarithm (NaN below zero, -inf at zero)."
    example = "%r = math.log %x : f32"
    compute = _transcendental(_log)

    partials = staticmethod(lambda b, x, y: [1.0 / x[0]])


class Log1pOp(FloatUnaryOp):
    name = "math.log1p"
    summary = "log(1 + x), accurate near zero."
    example = "%r = math.log1p %x : f32"
    compute = _transcendental(_log1p)

    partials = staticmethod(lambda b, x, y: [1.0 / (x[0] + 1.0)])


class Log2Op(FloatUnaryOp):
    name = "math.log2"
    summary = "Base-2 logarithm."
    example = "%r = math.log2 %x : f32"
    compute = _transcendental(_log2)

    partials = staticmethod(lambda b, x, y: [1.0 / (x[0] * LN2)])


class TanhOp(FloatUnaryOp):
    name = "math.tanh"
    summary = "Hyperbolic tangent."
    example = "%r = math.tanh %t : tensor<4xf32>"
    compute = _transcendental(_tanh)

    # 1 - tanh(x)^2 rounds to 0 for |x| > 9 in f32; 4w / (1 + w)^2 with w = exp(-2|x|) stays accurate.
    partials = staticmethod(lambda b, x, y: [_sech2(x[0])])


class SqrtOp(FloatUnaryOp):
    name = "math.sqrt"
    summary = "Square root, correctly rounded (NaN below zero)."
    example = "%r = math.sqrt %x : f32"
    compute = _exact(np.sqrt)

    partials = staticmethod(lambda b, x, y: [0.5 / y])


class RsqrtOp(FloatUnaryOp):
    name = "math.rsqrt"
    summary = "1 / sqrt(x)."
    example = "%r = math.rsqrt %x : f32"

    @staticmethod
    def compute(a, t):
        """sqrt, rounded to the type, then 1 / it, rounded to the type: what compiled code does."""
        root = _exact(np.sqrt).__func__(a, t)
        with np.errstate(divide="ignore"):
            return _exact(lambda r: np.true_divide(np.float32(1) if t.kind == "bf16" else r.dtype.type(1), r)
                          ).__func__(root, t)

    partials = staticmethod(lambda b, x, y: [-0.5 * y / x[0]])


class SinOp(FloatUnaryOp):
    name = "math.sin"
    summary = "Sine (radians)."
    example = "%r = math.sin %x : f32"
    compute = _transcendental(_sin)

    partials = staticmethod(lambda b, x, y: [x[0].cos()])


class CosOp(FloatUnaryOp):
    name = "math.cos"
    summary = "Cosine (radians)."
    example = "%r = math.cos %x : f32"
    compute = _transcendental(_cos)

    partials = staticmethod(lambda b, x, y: [-x[0].sin()])


class ErfOp(FloatUnaryOp):
    name = "math.erf"
    summary = "The error function."
    example = "%r = math.erf %x : f32"
    compute = _transcendental(_erf)

    partials = staticmethod(lambda b, x, y: [TWO_OVER_SQRT_PI * (-(x[0] * x[0])).exp()])


class AbsFOp(FloatUnaryOp):
    name = "math.absf"
    summary = "Absolute value of a float (clears the sign bit)."
    example = "%r = math.absf %x : f32"
    compute = _exact(np.abs)

    # The derivative at 0 is taken as 0 (the subgradient in the middle, as JAX and PyTorch do).
    partials = staticmethod(lambda b, x, y: [b.select(x[0] > 0.0, b.ones_like(x[0]), b.select(x[0] < 0.0, b.full_like(x[0], -1.0), b.zeros_like(x[0])))])


class FloorOp(FloatUnaryOp):
    name = "math.floor"
    summary = "Round toward negative infinity."
    example = "%r = math.floor %x : f32"
    compute = _exact(np.floor)

    # Piecewise constant: the derivative is zero wherever it exists.
    partials = staticmethod(lambda b, x, y: [None])


class CeilOp(FloatUnaryOp):
    name = "math.ceil"
    summary = "Round toward positive infinity."
    example = "%r = math.ceil %x : f32"
    compute = _exact(np.ceil)

    partials = staticmethod(lambda b, x, y: [None])


class Log10Op(FloatUnaryOp):
    name = "math.log10"
    summary = "Base-10 logarithm."
    example = "%r = math.log10 %x : f32"
    compute = _transcendental(_log10)

    partials = staticmethod(lambda b, x, y: [1.0 / (x[0] * LN10)])


class TanOp(FloatUnaryOp):
    name = "math.tan"
    summary = "Tangent."
    example = "%r = math.tan %x : f32"
    compute = _transcendental(_tan)

    partials = staticmethod(lambda b, x, y: [1.0 + y * y])


class CopySignOp(BinaryOp):
    name = "math.copysign"
    traits = ELEMENTWISE
    operand_kind = "float"
    summary = "The magnitude of the first operand with the sign of the second."
    example = "%r = math.copysign %x, %y : f32"
    compute = _exact2(np.copysign)


class IntUnaryOp(UnaryOp):
    traits = ELEMENTWISE
    operand_kind = "int"


def _bits(a, t):
    """The unsigned reading of ``a`` as Python ints (scalar) or an object array."""
    u = unsigned(a, t)
    return u.astype(object) if is_array(u) else int(u)


def _per_int(fn):
    def compute(a, t):
        u = _bits(a, t)
        w = width(t)
        if is_array(u):
            return wrap(np.frompyfunc(lambda x: fn(x, w), 1, 1)(u).astype(np.int64), t)
        return wrap(fn(u, w), t)

    return staticmethod(compute)


class CountLeadingZerosOp(IntUnaryOp):
    name = "math.ctlz"
    summary = "The number of leading zero bits (the bit width for zero)."
    example = "%r = math.ctlz %a : i64"
    compute = _per_int(lambda u, w: w - u.bit_length())


class CountTrailingZerosOp(IntUnaryOp):
    name = "math.cttz"
    summary = "The number of trailing zero bits (the bit width for zero)."
    example = "%r = math.cttz %a : i64"
    compute = _per_int(lambda u, w: w if u == 0 else (u & -u).bit_length() - 1)


class CountOnesOp(IntUnaryOp):
    name = "math.ctpop"
    summary = "The number of one bits."
    example = "%r = math.ctpop %a : i64"
    compute = _per_int(lambda u, w: bin(u).count("1"))


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
        """C's pow in f64 (glibc's, as compiled code calls it), rounded once to the type.  (numpy
        computes ``x ** 0.5`` as ``sqrt(x)``, which differs from pow for x = -0.0 and -inf: found by
        the fuzz harness, program 213969.)"""
        return round_to(_pow(a, b), t)

    # d/dx = p x^(p-1), and exactly 0 where p = 0 (x^0 is constant 1; the formula gives 0 * inf = NaN
    # at x = 0).  d/dp = x^p log x, taken as 0 where x = 0 (the limit for p > 0; PyTorch does the same).
    partials = staticmethod(lambda b, x, y: [
        b.select(x[1].eq(0.0), b.zeros_like(y), x[1] * x[0] ** (x[1] - 1.0)),
        b.select(x[0].eq(0.0), b.zeros_like(y), y * x[0].log())])


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


def _fma_round_to_odd(a, b, c) -> np.ndarray:
    """a * b + c for floats of at most 24 significant bits (f32, f16, bf16), in f64 rounded to
    odd: rounding that once more to the type is the fma's one correct rounding (Boldo and
    Melquiond: round-to-odd with at least two more bits than the target commutes with it).

    The product is exact in f64 (48 bits, exponents within f64's normal range), and so is the
    error of the sum (two-sum; nothing overflows below 2^256); an inexact sum whose last bit is
    even moves one ulp towards the exact value, which makes it odd.  Vectorised: the math-approx
    kernels evaluate their polynomials with fma, over whole sweeps in the interpreter."""
    a, b, c = (widen_to_f64(v) for v in (a, b, c))
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        back = s - p
        err = (p - (s - back)) + (c - back)
        adjust = (err != 0) & np.isfinite(err) & ((s.view(np.uint64) & np.uint64(1)) == 0)
        if adjust.any():
            s = np.where(adjust, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s


class FmaOp(TernaryOp):
    name = "math.fma"
    traits = ELEMENTWISE
    operand_kind = "float"
    summary = "Fused multiply-add a * b + c with a single rounding."
    example = "%r = math.fma %x, %y, %z : f32"
    takes_vectors = True

    @staticmethod
    def compute(a, b, c, t):
        if t.kind != "f64":
            wide = _fma_round_to_odd(a, b, c)
            return round_to(wide if is_array(a) or is_array(b) or is_array(c) else wide[()], t)
        if is_array(a) or is_array(b) or is_array(c):
            return round_to(_fma_vec(a, b, c, t.kind), t)
        return round_to(np.float64(_fma_exact(a, b, c, t.kind)), t)

    partials = staticmethod(lambda b, x, y: [x[1], x[0], 1])


