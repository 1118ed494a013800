"""The approximations that ``math-approx`` expands math ops into, written with arith ops only.

This module registers no pass; ``math_approx.py`` is the pass.  Each kernel takes a
``KernelValue`` (an ``irc.builder.V`` of f32 or f64 type, scalar or tensor, so that ``x * y + 1.0``
builds ``arith.mulf``/``arith.addf`` ops before the op being replaced, through a ``KernelBuilder``)
and returns one.

Rules every kernel follows, so that LLVM vectorises a loop around it and the JIT
agrees with the interpreter bit for bit:

* only ops that become single LLVM instructions: ``arith`` float and integer ops,
  ``arith.bitcast``, ``arith.select``/``cmpf``, ``math.absf``, ``arith.extf``/``truncf``;
  ``math.fma`` only where the builder is told the target has it (``KernelBuilder.fma``:
  without FMA hardware LLVM calls ``fmaf()``), and only on f32 (the interpreter computes
  an f32 fma exactly and fast, in f64 rounded to odd; an exact f64 one is slow), so
  ``mul_add`` is one fma or a multiply and an add; no ``fptosi``/``sitofp`` (a NaN or huge input would be UB; the
  "magic number" trick below rounds and converts exactly instead), no shifts by a
  variable amount (a runtime check per shift);
* no branches: special cases are computed alongside and picked with ``arith.select``;
* polynomials are evaluated by Horner's rule on a *remainder* whose leading terms are
  exact (``exp(r) = 1 + r + r^2 q(r)``), so rounding errors stay below an ulp.

The coefficient tables are weighted minimax fits made by ``benchmarks/math_approx_fit.py``
(Remez exchange in mpmath at 100 digits), printed there and pasted here; f32 kernels
round them to float32 when they build constants.  The splits of ln 2 and pi/2 into
parts whose products with a small integer are exact (Cody-Waite) are computed below
from 60-digit decimal values.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np

from irc.attributes import StringAttr, float_bits
from irc.builder import Builder, V
from irc.diagnostics import UNKNOWN, Location
from irc.types import FloatType, IntegerType, f32, f64, i32, i64
from irc.values import Value

# ---- formats and exact constants -----------------------------------------------------------


@dataclass(frozen=True)
class Format:
    """An IEEE binary format and its integer twin (for bit manipulation)."""

    float_type: FloatType
    int_type: IntegerType
    precision: int  # significand bits, the implicit one included
    bias: int

    @property
    def mant(self) -> int:
        return self.precision - 1

    @property
    def magic(self) -> float:
        """``t + magic - magic`` rounds ``t`` to an integer, and ``bits(t + magic) -
        bits(magic)`` is that integer, for ``|t| < 2^(mant - 1)``."""
        return 1.5 * 2.0 ** self.mant

    def bits(self, value: float) -> int:
        return float_bits(value, self.float_type)


F32 = Format(f32, i32, 24, 127)
F64 = Format(f64, i64, 53, 1023)
FORMATS = {"f32": F32, "f64": F64}

LN2 = Fraction(Decimal("0.693147180559945309417232121458176568075500134360255254120680"))
PI = Fraction(Decimal("3.14159265358979323846264338327950288419716939937510582097494459"))


def round_bits(q: Fraction, bits: int) -> float:
    """``q`` rounded to nearest with ``bits`` significant bits (an exact float for bits <= 53)."""
    if q == 0:
        return 0.0
    e = abs(q).numerator.bit_length() - abs(q).denominator.bit_length()
    if Fraction(2) ** e > abs(q):
        e -= 1
    scale = Fraction(2) ** (bits - 1 - e)
    return float(Fraction(round(q * scale)) / scale)


def split(q: Fraction, bits: list[int]) -> list[float]:
    """``q`` as a sum of floats with the given numbers of significant bits, largest first."""
    parts = []
    for b in bits:
        parts.append(round_bits(q, b))
        q -= Fraction(parts[-1])
    return parts


# Cody-Waite: |k| < 2^8 (f32) and 2^11 (f64) in exp and log, so k * LN2_HI is exact.
LN2_PARTS = {"f32": split(LN2, [16, 24]), "f64": split(LN2, [42, 53])}
INV_LN2 = {"f32": round_bits(1 / LN2, 24), "f64": round_bits(1 / LN2, 53)}
# log2: f_hi * IVLN2_HI is exact (f_hi keeps precision // 2 bits).
IVLN2_PARTS = {"f32": split(1 / LN2, [12, 24]), "f64": split(1 / LN2, [27, 53])}
# sin/cos (both computed in f64): pi/2 in parts whose products with k are exact while
# |k| < 2^30 (f64 inputs: 23-bit parts) or 2^35 (f32 inputs: 18-bit parts), then a 53-bit tail.
PIO2_PARTS = {"f32": split(PI / 2, [18, 18, 18, 53]), "f64": split(PI / 2, [23, 23, 23, 23, 53])}
TWO_OVER_PI = round_bits(2 / PI, 53)

# ---- coefficient tables (benchmarks/math_approx_fit.py) -----------------------------------------

# Lowest degree first.  f32 kernels round them to float32 when they become constants,
# except sin_s/cos_c, which f32 inputs evaluate in f64.
COEFFS: dict[str, dict[str, tuple[float, ...]]] = {
    # exp(r) = 1 + r + r^2 q(r) for |r| <= ln2/2 (exp, exp2, expm1, tanh; inside erf)
    "exp_q": {
        "f32": (0.5000000027259279, 0.16666576285673096, 0.04166637290837362,
                0.008363294951881541, 0.0013941323118946876),
        "f64": (0.5, 0.1666666666666667, 0.041666666666666685, 0.008333333333326025,
                0.001388888888887418, 0.00019841269875206537, 2.480158734785537e-05,
                2.7557254911880963e-06, 2.7557252416012694e-07, 2.5105419781370196e-08,
                2.092175663897862e-09),
    },
    # log(1 + f) = 2s + s z R(z), s = f / (2 + f), z = s^2 <= 0.0295 (log, log2, log1p)
    "log_r": {
        "f32": (0.6666666655120665, 0.4000012422471626, 0.28550571198633945, 0.23336876928694586),
        "f64": (0.666666666666667, 0.39999999999896, 0.285714286275025, 0.22222210893513744,
                0.18182906234273785, 0.1533116584240058, 0.14623184088049626),
    },
    # erf(a) = a + a E(z), z = a^2, a <= 0.875
    "erf_small": {
        "f32": (0.128379158442087, -0.37612556381786305, 0.11282514745585766,
                -0.026793559212187484, 0.005035206212225328, -0.0006218550519921437),
        "f64": (0.12837916709551256, -0.37612638903183043, 0.11283791670917916,
                -0.02686617063751939, 0.005223977545527151, -0.0008548322122879372,
                0.00012055145255259672, -1.4921016196347748e-05, 1.6388170682254899e-06,
                -1.5623985432449486e-07, 1.0468715678369602e-08),
    },
    # erfc(a) = exp(-a^2) Q(1/a - c), 0.875 <= a <= 4 (f32) or 6 (f64), c = 0.6875 or 0.65625;
    # minimax in the error of erf = 1 - erfc (weight exp(-a^2))
    "erf_q": {
        "f32": (0.32918330968729625, 0.36126676907423727, -0.16374680315173226,
                0.047961928469076695, 0.010964142220334901, -0.03283889729485144,
                0.03265633508144634, -0.02128266790210276, 0.007989757127814013,
                -0.0008076877536767864),
        "f64": (0.31773236199886656, 0.3716399452828186, -0.1681684283642329,
                0.04625156166187571, 0.01658581377664682, -0.039432719076741535,
                0.03787803823714522, -0.024041229205305686, 0.006740094878860856,
                0.008218466171010862, -0.01764453373890737, 0.020493737515544175,
                -0.01735314173948594, 0.00991338551077118, -0.000395466077906368,
                -0.009037642518284811, 0.016387574549367658, -0.019264568091422046,
                0.01580951133168698, -0.008111520224912596, 0.0019292106268330791),
    },
    # sin(r) = r + r z S(z), z = r^2, |r| <= pi/4 (f32 inputs: evaluated in f64 to ~2^-35)
    "sin_s": {
        "f32": (-0.1666666666381575, 0.008333331858811886, -0.000198400779851445,
                2.7248778032417208e-06),
        "f64": (-0.16666666666666666, 0.008333333333330903, -0.0001984126983668849,
                2.755731606610959e-06, -2.505112423856878e-08, 1.5917580859875947e-10),
    },
    # cos(r) = 1 - z/2 + z^2 C(z), z = r^2, |r| <= pi/4
    "cos_c": {
        "f32": (0.04166666666428753, -0.001388888765855177, 2.480059298940901e-05,
                -2.729999211561195e-07),
        "f64": (0.041666666666666664, -0.0013888888888887367, 2.4801587298721674e-05,
                -2.75573172488536e-07, 2.087614149548158e-09, -1.1382288396963609e-11),
    },
}


# ---- values that build ops ---------------------------------------------------------------------


_STRICT_OPS = frozenset({"arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.negf", "math.fma"})


class KernelBuilder(Builder):
    """The public builder as the kernels use it: numbers become constants of the other
    operand's whole type (a dense splat for a tensor, so nothing is ever broadcast), each
    made once (``reuse_constants``), and float arithmetic is marked ``fastmath = "none"``:
    the magic-number rounding and the special-value selects need exact IEEE arithmetic
    even when the program is compiled with fast-math."""

    def __init__(self, loc: Location = UNKNOWN, fma: bool = False):
        super().__init__(loc=loc, reuse_constants=True)
        self.fma = fma  # f32 multiply-adds as math.fma (the target has FMA instructions)

    def insert(self, op):
        if op.name in _STRICT_OPS:
            op.attributes["fastmath"] = StringAttr("none")
        return super().insert(op)

    def lift(self, value, like) -> V:
        if isinstance(value, (V, Value)):
            return self.wrap(value)
        return self.const(value, like.type)


class KernelValue(V):
    """A ``V`` with the bit-level views the kernels need (``bits``, ``float``, ``fmt``)."""

    __slots__ = ()

    @property
    def fmt(self) -> Format:
        return F32 if self.elem.width == 32 else F64

    @property
    def kind(self) -> str:
        """'f32' or 'f64' (for an integer, the float type of its width): the key of tables."""
        return self.fmt.float_type.kind

    def lift(self, other) -> V:
        """``other`` as a value: a number becomes a constant of this value's type."""
        return self.builder.lift(other, self)

    def isnan(self) -> V:
        return self.builder.compare("uno", self, self)

    def bits(self) -> V:
        """The float's bit pattern as a signless integer of its width."""
        return self.builder.cast("arith.bitcast", self, self.fmt.int_type)

    def float(self) -> V:
        """The integer's bits as a float of its width."""
        return self.builder.cast("arith.bitcast", self, self.fmt.float_type)

    def convert(self, fmt: Format) -> V:
        """Widen (exact) or narrow (round to nearest) to ``fmt``'s float type."""
        return self if fmt is self.fmt else self.astype(fmt.float_type)


KernelBuilder.value_class = KernelValue


def select(cond: V, a, b) -> V:
    """``a`` where ``cond`` holds, else ``b`` (numbers become constants of the other's type)."""
    return cond.builder.select(cond, a, b)


def mul_add(a: V, b, c) -> V:
    """``a * b + c``: one ``math.fma`` (one rounding) for f32 where the builder has FMA, else
    a multiply and an add (numbers become constants of ``a``'s type)."""
    if a.builder.fma and a.kind == "f32":
        return a.builder.op("math.fma", a, a.lift(b), a.lift(c))
    return a * b + c


def minus_mul(c, a: V, b) -> V:
    """``c - a * b``, as ``mul_add`` computes ``a * b + c`` (a number ``b`` is negated when
    it becomes a constant; a value ``a`` by an ``arith.negf``)."""
    if a.builder.fma and a.kind == "f32":
        if isinstance(b, (int, float)):
            return a.builder.op("math.fma", a, a.lift(-b), a.lift(c))
        return a.builder.op("math.fma", -a, a.lift(b), a.lift(c))
    return a.lift(c) - a * b


def horner(x: V, coeffs) -> V:
    """``coeffs[0] + x * (coeffs[1] + x * (...))``."""
    acc = mul_add(x, coeffs[-1], coeffs[-2])
    for c in reversed(coeffs[:-2]):
        acc = mul_add(acc, x, c)
    return acc


def copysign_of_positive(t: V, x: V) -> V:
    """``t`` (with a clear sign bit) carrying the sign of ``x`` (so -0.0 stays -0.0)."""
    return (t.bits() | (x.bits() & sign_bit(t.fmt))).float()


def sign_bit(fmt: Format) -> int:
    return 1 << (fmt.float_type.width - 1)


def clamp(x: V, lo: float, hi: float) -> V:
    """``x`` limited to [lo, hi]; NaN stays NaN (both comparisons are false for it)."""
    x = select(x > hi, hi, x)
    return select(x < lo, lo, x)


def pow2(k: V, fmt: Format) -> V:
    """2^k as a float, for an integer ``k`` in the normal exponent range."""
    return ((k + fmt.bias) << fmt.mant).float()


def round_to_int(t: V) -> tuple[V, V]:
    """``t`` rounded to the nearest integer, as a float and as an integer (|t| < 2^(mant-1))."""
    return from_shifted(t + t.fmt.magic)


def round_product_to_int(x: V, factor: float) -> tuple[V, V]:
    """``round_to_int(x * factor)``, the product and the shift in one fma where there is one
    (then the product is not rounded first, so a tie may go the other way: every caller
    takes either neighbour)."""
    return from_shifted(mul_add(x, factor, x.fmt.magic))


def from_shifted(shifted: V) -> tuple[V, V]:
    fmt = shifted.fmt
    return shifted - fmt.magic, shifted.bits() - fmt.bits(fmt.magic)


def int_to_float(k: V, fmt: Format) -> V:
    """An integer |k| < 2^(mant-1) as a float, exactly."""
    return (k + fmt.bits(fmt.magic)).float() - fmt.magic


def scale(v: V, k: V) -> V:
    """``v * 2^k``, rounded once, for k up to twice the normal exponent range: two factors,
    each a normal power of two, so results that overflow or are subnormal come out right."""
    k1 = k >> 1
    return v * pow2(k1, v.fmt) * pow2(k - k1, v.fmt)


def two_sum(a: V, b: V) -> tuple[V, V]:
    """``s + e == a + b`` exactly, ``s = fl(a + b)`` (Knuth; no ordering of |a|, |b| needed)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def coeffs(name: str, x: V) -> tuple[float, ...]:
    """The coefficient table ``name`` for ``x``'s type."""
    return COEFFS[name][x.kind]


# ---- exp, exp2, expm1 ------------------------------------------------------------------------

# exp(x) rounds to 0 below the first bound (less than half the smallest subnormal) and
# overflows above the second; inputs are clamped there, so k stays in scale()'s range.
EXP_RANGE = {"f32": (-104.0, 89.0), "f64": (-746.0, 710.0)}
EXP2_RANGE = {"f32": (-151.0, 129.0), "f64": (-1076.0, 1025.0)}
EXPM1_MIN = {"f32": -18.0, "f64": -38.0}  # expm1 rounds to -1 below


def exp_reduce(x: V) -> tuple[V, V]:
    """``k`` (an integer) and ``y`` with ``exp(x) = 2^k (1 + y)``, for clamped ``x``.

    k = round(x / ln2); r = x - k ln2 in two steps (k * LN2_HI is exact and so is the
    subtraction, by Sterbenz), |r| <= ln2/2; y = expm1(r) = r + r^2 q(r)."""
    ln2_hi, ln2_lo = LN2_PARTS[x.kind]
    kf, k = round_product_to_int(x, INV_LN2[x.kind])
    r = minus_mul(minus_mul(x, kf, ln2_hi), kf, ln2_lo)  # the inner one is exact either way
    return k, expm1_reduced(r)


def expm1_reduced(r: V) -> V:
    """expm1(r) for |r| <= ln2/2 (a little more is fine)."""
    return mul_add(r * r, horner(r, coeffs("exp_q", r)), r)


def exp(x: V) -> V:
    """Relative error below 1 ulp before the final scaling; NaN propagates through."""
    k, y = exp_reduce(clamp(x, *EXP_RANGE[x.kind]))
    return scale(1.0 + y, k)


def exp2(x: V) -> V:
    x = clamp(x, *EXP2_RANGE[x.kind])
    kf, k = round_to_int(x)
    f = x - kf  # exact, |f| <= 1/2
    ln2_hi, ln2_lo = LN2_PARTS[x.kind]
    return scale(1.0 + expm1_reduced(f * ln2_hi + f * ln2_lo), k)


def expm1_nonnegative_k(k: V, y: V) -> V:
    """``2^k (1 + y) - 1`` for k >= 0, rounded once: ``(y + (1 - 2^-k)) 2^k``.
    1 - 2^-k is exact for k <= precision and rounds to 1 beyond (k is clamped there)."""
    fmt = y.fmt
    tail = 1.0 - pow2(0 - k.maximum(0).minimum(fmt.precision + 2), fmt)
    return scale(y + tail, k)


def expm1(x: V) -> V:
    fmt, kind = x.fmt, x.kind
    k, y = exp_reduce(clamp(x, EXPM1_MIN[kind], EXP_RANGE[kind][1]))
    t = pow2(k.minimum(0), fmt)  # k >= -(precision + 3) after the clamp: a normal 2^k
    below = t * y + (t - 1.0)  # k < 0: exact product, exact t - 1, one rounding
    result = select(k < 0, below, expm1_nonnegative_k(k, y))
    return select(x.eq(0.0), x, result)  # expm1(-0.0) is -0.0


# ---- tanh and erf ----------------------------------------------------------------------------

TANH_MAX = {"f32": 9.5, "f64": 19.5}  # tanh rounds to 1 beyond


def tanh(x: V) -> V:
    """tanh|x| = (1 - w) / (1 + w) with w = exp(-2|x|) = 2^k (1 + y), k <= 0; then the sign of x.

    One range reduction and one division, and no second formula to select from (a
    polynomial for small |x| next to expm1 costs twice as much).  The numerator
    (1 - 2^k) - 2^k y is -expm1(-2|x|) rounded once (2^k y is exact, and so is 1 - 2^k for
    k >= -precision), so it keeps its relative precision for small |x| (k = 0: r = -2|x|
    is exact and y = r + r^2 q(r)) as well as large; the denominator 1 + w lies in [1, 2].
    Tiny |x| give (2|x|) / 2 = |x| exactly; where tanh rounds to 1 (|x| > 9.01 in f32,
    19.06 in f64) w is far below an ulp of 1 and the result is exactly 1 (a little earlier
    too, within the error bound).  At most 2.3 ulp (f32) and 2.5 ulp (f64), the worst for
    k = -1 (|x| in 0.17..0.52), where 1 - 2^k and 2^k y partly cancel."""
    kind = x.kind
    a = x.abs()
    a = select(a > TANH_MAX[kind], TANH_MAX[kind], a)
    k, y = exp_reduce(-2.0 * a)
    t = pow2(k, x.fmt)  # k >= -28 (f32) / -57 (f64) after the clamp: a normal 2^k
    ty = t * y
    return copysign_of_positive(((1.0 - t) - ty) / (1.0 + (ty + t)), x)


ERF_SPLIT = 0.875
ERF_MAX = {"f32": 4.0, "f64": 6.0}  # erf rounds to 1 beyond
ERF_Q_SHIFT = {"f32": 0.6875, "f64": 0.65625}


def erf(x: V) -> V:
    """erf|x| = |x| + |x| E(x^2) below 0.875; above, 1 - exp(-x^2) Q(1/|x| - c), where Q
    (erfc scaled by exp(x^2)) is smooth in 1/|x|.  Both are computed; a select picks one."""
    fmt, kind = x.fmt, x.kind
    a = x.abs()
    a = select(a > ERF_MAX[kind], ERF_MAX[kind], a)
    z = a * a
    small = mul_add(a, horner(z, coeffs("erf_small", x)), a)
    k, y = exp_reduce(-z)
    gauss = (1.0 + y) * pow2(k, fmt)  # exp(-x^2) >= exp(-36): k is a normal exponent
    large = minus_mul(1.0, gauss, horner(1.0 / a - ERF_Q_SHIFT[kind], coeffs("erf_q", x)))
    return copysign_of_positive(select(a < ERF_SPLIT, small, large), x)


# ---- log, log2, log1p ------------------------------------------------------------------------

SQRT_HALF_VALUE = {"f32": float(np.float32(np.sqrt(0.5))), "f64": float(np.sqrt(0.5))}


def log_reduce(x: V) -> tuple[V, V]:
    """``e`` (an integer) and ``f`` with ``x = 2^e (1 + f)``, sqrt(1/2) <= 1 + f < sqrt(2),
    for a positive normal ``x``: adding 1 - sqrt(1/2) to the bits carries into the exponent
    exactly when the significand is at least sqrt(2)."""
    fmt = x.fmt
    sqrt_half = fmt.bits(SQRT_HALF_VALUE[x.kind])
    bits = x.bits() + (fmt.bits(1.0) - sqrt_half)
    e = (bits >> fmt.mant) - fmt.bias
    f = ((bits & ((1 << fmt.mant) - 1)) + sqrt_half).float() - 1.0
    return e, f


def log1p_reduced(f: V) -> tuple[V, V]:
    """``hfsq`` and ``c`` with ``log(1 + f) = f - hfsq + c``: s = f / (2 + f),
    log(1 + f) = 2 atanh(s) = 2s + s R(s^2), and 2s = f - hfsq + s hfsq."""
    s = f / (2.0 + f)
    z = s * s
    hfsq = 0.5 * f * f
    return hfsq, s * mul_add(z, horner(z, coeffs("log_r", f)), hfsq)


def log_specials(x: V, result: V, at_zero: float, below: float, low=0.0) -> V:
    result = select(x.eq(low), at_zero, result)
    result = select(x < low, below, result)
    result = select(x.eq(float("inf")), x, result)
    return select(x.isnan(), x, result)


def log_scaled_input(x: V) -> tuple[V, V]:
    """``e`` and ``f`` of log_reduce, subnormals scaled by 2^precision first."""
    fmt = x.fmt
    tiny = x < float(np.finfo(np.float32 if fmt is F32 else np.float64).tiny)
    e, f = log_reduce(select(tiny, x * 2.0 ** fmt.precision, x))
    return e - select(tiny, e.lift(fmt.precision), 0), f


def log(x: V) -> V:
    fmt = x.fmt
    ln2_hi, ln2_lo = LN2_PARTS[x.kind]
    e, f = log_scaled_input(x)
    ef = int_to_float(e, fmt)
    hfsq, c = log1p_reduced(f)
    result = ef * ln2_hi - ((hfsq - (c + ef * ln2_lo)) - f)
    return log_specials(x, result, float("-inf"), float("nan"))


def log2(x: V) -> V:
    """log2 = e + log(1 + f) / ln2, with f - hfsq split so that its high part times
    1/ln2's high part is exact."""
    fmt = x.fmt
    ivln2_hi, ivln2_lo = IVLN2_PARTS[x.kind]
    e, f = log_scaled_input(x)
    hfsq, c = log1p_reduced(f)
    keep = ~((1 << (fmt.mant - fmt.precision // 2 + 1)) - 1)
    hi = ((f - hfsq).bits() & keep).float()
    lo = ((f - hi) - hfsq) + c
    val_hi = hi * ivln2_hi
    val_lo = (lo + hi) * ivln2_lo + lo * ivln2_hi
    ef = int_to_float(e, fmt)
    w = ef + val_hi
    val_lo = val_lo + ((ef - w) + val_hi)
    return log_specials(x, w + val_lo, float("-inf"), float("nan"))


def log1p(x: V) -> V:
    """log(u) + (x - (u - 1)) / u for u = fl(1 + x): the second term corrects u's rounding."""
    fmt = x.fmt
    ln2_hi, ln2_lo = LN2_PARTS[x.kind]
    u = 1.0 + x
    correction = (x - (u - 1.0)) / u
    e, f = log_reduce(u)
    ef = int_to_float(e, fmt)
    hfsq, c = log1p_reduced(f)
    result = ef * ln2_hi - ((hfsq - (c + (ef * ln2_lo + correction))) - f)
    result = select(x.eq(0.0), x, result)  # log1p(-0.0) is -0.0
    return log_specials(x, result, float("-inf"), float("nan"), low=-1.0)


# ---- sin and cos -----------------------------------------------------------------------------

# Beyond this |x| the reduction cannot place x within a period (x * 2/pi is past 2^51);
# the result is NaN.  Results are accurate to SIN_ACCURATE, where k * pi/2's parts stop
# being exact; between the two the absolute error grows like |x| * 2^-53.
SIN_LIMIT = 2.0 ** 50
SIN_ACCURATE = {"f32": 2.0 ** 35, "f64": 2.0 ** 30}


def reduce_pio2(x: V, kind: str) -> tuple[V, V, V | None]:
    """``q`` (an i64) and ``r_hi + r_lo = x - q pi/2`` with |r| <= pi/4, ``x`` an f64.

    Cody-Waite with pi/2 in parts whose products with q are exact while |q| is below
    2^30 (f64) or 2^35 (f32 inputs).  x - q*P1 is exact (Sterbenz); for f64 the later
    differences are accumulated exactly (two_sum), so r keeps its full relative precision
    even next to a multiple of pi/2, where it is as small as 2^-60; an f32 needs r to
    about 2^-30 relative only, and plain f64 steps give that."""
    parts = PIO2_PARTS[kind]
    kf, k = round_to_int(x * TWO_OVER_PI)
    if kind == "f32":
        r = x
        for p in parts:
            r = r - kf * p
        return k, r, None
    s, err = x - kf * parts[0], None
    for p in parts[1:-1]:
        s, e = two_sum(s, kf * -p)
        err = e if err is None else err + e
    tail = err - kf * parts[-1]
    r_hi = s + tail
    return k, r_hi, (s - r_hi) + tail


def sin_reduced(r: V, r_lo: V | None, kind: str) -> V:
    """sin(r + r_lo) = r + r^3 S(r^2) + r_lo cos(r)."""
    z = r * r
    poly = (z * r) * horner(z, COEFFS["sin_s"][kind])
    if r_lo is not None:
        poly = poly + r_lo * (1.0 - 0.5 * z)
    return r + poly


def cos_reduced(r: V, r_lo: V | None, kind: str) -> V:
    """cos(r + r_lo) = 1 - r^2/2 + r^4 C(r^2) - r r_lo, with 1 - r^2/2 compensated."""
    z = r * r
    hz = 0.5 * z
    w = 1.0 - hz
    tail = (z * z) * horner(z, COEFFS["cos_c"][kind])
    if r_lo is not None:
        tail = tail - r * r_lo
    return w + (((1.0 - w) - hz) + tail)


def sin_cos(x: V, quadrant_offset: int) -> V:
    """sin (offset 0) or cos (offset 1) of an f32 or f64 ``x``, computed in f64."""
    kind = x.kind
    xd = x.convert(F64)
    q, r, r_lo = reduce_pio2(xd, kind)
    if quadrant_offset:
        q = q + quadrant_offset
    result = select((q & 1).eq(0), sin_reduced(r, r_lo, kind), cos_reduced(r, r_lo, kind))
    result = (result.bits() ^ ((q & 2) << 62)).float()  # quadrants 2 and 3: negate
    result = select(xd.abs() > SIN_LIMIT, float("nan"), result)
    return result.convert(x.fmt)


def sin(x: V) -> V:
    return select(x.eq(0.0), x, sin_cos(x, 0))  # sin(-0.0) is -0.0


def cos(x: V) -> V:
    return sin_cos(x, 1)


def apply(kernel, x: V) -> V:
    """``kernel(x)``; f16 and bf16 are computed in f32 and rounded once at the end."""
    if x.elem.kind in ("f32", "f64"):
        return kernel(x)
    return kernel(x.astype(f32)).astype(x.elem)


KERNELS = {"exp": exp, "exp2": exp2, "expm1": expm1, "log": log, "log2": log2, "log1p": log1p,
           "tanh": tanh, "erf": erf, "sin": sin, "cos": cos}
