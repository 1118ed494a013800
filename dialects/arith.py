"""The ``arith`` dialect: integer and float arithmetic, comparisons, select, casts, constants.

Spelled exactly as upstream MLIR: ``arith.addi %a, %b : i64``,
``arith.cmpi slt, %a, %b : i64``, ``arith.index_cast %i : index to i64``.
Integers are signless and wrap; signedness is a property of the op (divsi vs
divui).  Every op works on scalars and, elementwise, on tensors.
"""

from __future__ import annotations

import numpy as np

from irc import registry
from irc.attributes import DenseAttr, FloatAttr, IntegerAttr, float_bits
from irc.diagnostics import IRError
from irc.operation import Commutative, ConstantLike, Elementwise, Operation, Pure
from irc.patterns import constant_value
from irc.semantics import (
    Fault,
    attr_to_value,
    check_nonzero,
    float_dtype,
    is_array,
    round_to,
    signed,
    unsigned,
    widen_to_f64,
    width,
    wrap,
)
from irc.types import (
    FloatType,
    IndexType,
    IntegerType,
    ShapedType,
    TensorType,
    i1,
    i64,
    numpy_dtype,
)

from .families import (
    ELEMENTWISE,
    BinaryOp,
    CastOp,
    UnaryOp,
    check_same_shapes,
    element_kind_ok,
    with_element,
)

COMMUTATIVE = ELEMENTWISE | {Commutative}


def _widen(x):
    """Bool arrays (i1 tensors) to int8 so that + and * are arithmetic, not logical."""
    return x.astype(np.int8) if is_array(x) and x.dtype == np.bool_ else x


def _is_const(attr, value) -> bool:
    """Whether a constant attribute (scalar or splat) equals ``value`` everywhere."""
    if isinstance(attr, (IntegerAttr, FloatAttr)):
        return attr.value == value and not (isinstance(attr, FloatAttr) and value == 0 and
                                            float_bits(attr.value, attr.type) != 0)
    if isinstance(attr, DenseAttr) and attr.is_splat and attr.array.size:
        v = attr.array.flat[0]
        if attr.array.dtype.kind == "f":
            return v == value and not (value == 0 and np.signbit(v))
        return v == value
    return False


def _is_int_const(attr, value: int) -> bool:
    if isinstance(attr, IntegerAttr):
        return attr.value == value or (attr.type is i1 and (attr.value & 1) == (value & 1))
    if isinstance(attr, DenseAttr) and attr.array.dtype.kind in "iub" and attr.is_splat and attr.array.size:
        return int(attr.array.flat[0]) == value or (attr.array.dtype == np.bool_ and int(attr.array.flat[0]) == (value & 1))
    return False


def _zero_attr(t):
    from irc.semantics import value_to_attr

    return value_to_attr(np.zeros(t.shape, dtype=bool if t.element_type is i1 else numpy_dtype(t.element_type))
                         if isinstance(t, ShapedType) else 0, t)


# ---- integer arithmetic ---------------------------------------------------------------


def overflow_flags(op) -> frozenset:
    """The op's MLIR overflow flags (``overflow<nsw, nuw>``, kept as ``overflowFlags``)."""
    attr = op.attributes.get("overflowFlags")
    text = getattr(attr, "text", "")
    if "<" not in text:
        return frozenset()
    return frozenset(w.strip() for w in text[text.index("<") + 1:text.rindex(">")].split(",") if w.strip())


def _exact(x):
    """Python integers (an object array for an array): arithmetic on them never wraps."""
    return np.asarray(x).astype(object) if is_array(x) else int(x)


def overflows(name: str, flag: str, a, b, result, t) -> bool:
    """Whether ``a name b`` (canonical values of type ``t``, scalars or arrays) breaks ``flag``:
    the exact result, read signed (nsw) or unsigned (nuw), differs from the wrapped ``result``."""
    read = signed if flag == "nsw" else unsigned
    x, r = _exact(read(a, t)), _exact(read(result, t))
    if name == "arith.shli":
        value = x << _exact(unsigned(b, t))
    else:
        y = _exact(read(b, t))
        value = x + y if name == "arith.addi" else x - y if name == "arith.subi" else x * y
    return bool(np.any(value != r))


class OverflowFlags:
    """MLIR's ``nsw``/``nuw`` flags with a meaning: a result that overflows (signed / unsigned)
    despite them is an error at the op, as division by zero is (MLIR makes it poison).  So a
    program that runs without error computes the exact result, and canonicalize may use the
    flags (``divui (muli nuw a, b), a`` -> b) without changing it."""

    def interpret(self, interp, args):
        out = super().interpret(interp, args)
        flags = overflow_flags(self)
        if flags:
            t = self.operands[0].type.element_type
            for flag in sorted(flags):
                if overflows(self.name, flag, args[0], args[1], out[0], t):
                    raise Fault(f"{self.name} overflow<{flag}>: the result overflows {t}")
        return out


class IntBinaryOp(BinaryOp):
    operand_kind = "int"


class AddIOp(OverflowFlags, IntBinaryOp):
    name = "arith.addi"
    traits = COMMUTATIVE
    summary = "Integer addition, wrapping."
    example = "%r = arith.addi %a, %b : i64"
    compute = staticmethod(lambda a, b, t: wrap(_widen(a) + _widen(b), t))

    def fold_partial(self, c):
        if _is_int_const(c[1], 0):
            return [self.operands[0]]
        return None


class SubIOp(OverflowFlags, IntBinaryOp):
    name = "arith.subi"
    traits = ELEMENTWISE
    summary = "Integer subtraction, wrapping."
    example = "%r = arith.subi %a, %b : i64"
    compute = staticmethod(lambda a, b, t: wrap(_widen(a) - _widen(b), t))

    def fold_partial(self, c):
        if _is_int_const(c[1], 0):
            return [self.operands[0]]
        if self.operands[0] is self.operands[1]:
            return [_zero_attr(self.results[0].type)]
        return None


class MulIOp(OverflowFlags, IntBinaryOp):
    name = "arith.muli"
    traits = COMMUTATIVE
    summary = "Integer multiplication, wrapping."
    example = "%r = arith.muli %a, %b : i64"
    compute = staticmethod(lambda a, b, t: wrap(_widen(a) * _widen(b), t))

    def fold_partial(self, c):
        if _is_int_const(c[1], 1):
            return [self.operands[0]]
        return None


def _trunc_div(a, b):
    """Division rounding toward zero, for exact Python ints or numpy int arrays."""
    if is_array(a) or is_array(b):
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        q = a // b
        r = a - q * b
        return q + ((r != 0) & ((a < 0) != (b < 0)))  # floor rounded a negative quotient down
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _check_signed_overflow(sa, sb, t) -> None:
    lowest = -(1 << (width(t) - 1))
    if is_array(sa) or is_array(sb):
        if np.any((np.asarray(sa) == lowest) & (np.asarray(sb) == -1)):
            raise Fault("signed integer overflow in division")
    elif sa == lowest and sb == -1:
        raise Fault("signed integer overflow in division")


def _signed_operands(a, b, t):
    sa, sb = signed(_widen(a), t), signed(_widen(b), t)
    if is_array(sa) or is_array(sb):
        sa, sb = np.asarray(sa, dtype=np.int64), np.asarray(sb, dtype=np.int64)
    check_nonzero(sb)
    _check_signed_overflow(sa, sb, t)
    return sa, sb


def _unsigned_operands(a, b, t):
    ua, ub = unsigned(a, t), unsigned(b, t)
    check_nonzero(ub)
    return ua, ub


def _divsi(a, b, t):
    sa, sb = _signed_operands(a, b, t)
    return wrap(_trunc_div(sa, sb), t)


def _remsi(a, b, t):
    sa, sb = _signed_operands(a, b, t)
    return wrap(sa - sb * _trunc_div(sa, sb), t)


def _floordivsi(a, b, t):
    sa, sb = _signed_operands(a, b, t)
    return wrap(sa // sb, t)


def _ceildivsi(a, b, t):
    sa, sb = _signed_operands(a, b, t)
    return wrap(-((-sa) // sb), t)


def _divui(a, b, t):
    ua, ub = _unsigned_operands(a, b, t)
    return wrap(ua // ub, t)


def _remui(a, b, t):
    ua, ub = _unsigned_operands(a, b, t)
    return wrap(ua % ub, t)


def _ceildivui(a, b, t):
    ua, ub = _unsigned_operands(a, b, t)
    return wrap(ua // ub + (ua % ub != 0), t)


class DivSIOp(IntBinaryOp):
    name = "arith.divsi"
    traits = ELEMENTWISE
    summary = "Signed integer division rounding toward zero; division by zero and MIN / -1 are errors."
    example = "%r = arith.divsi %a, %b : i64"
    compute = staticmethod(_divsi)

    def fold_partial(self, c):
        return [self.operands[0]] if _is_int_const(c[1], 1) else None


class DivUIOp(IntBinaryOp):
    name = "arith.divui"
    traits = ELEMENTWISE
    summary = "Unsigned integer division; division by zero is an error."
    example = "%r = arith.divui %a, %b : i64"
    compute = staticmethod(_divui)

    def fold_partial(self, c):
        return [self.operands[0]] if _is_int_const(c[1], 1) else None


class RemSIOp(IntBinaryOp):
    name = "arith.remsi"
    traits = ELEMENTWISE
    summary = "Signed remainder (sign of the dividend); division by zero and MIN % -1 are errors."
    example = "%r = arith.remsi %a, %b : i64"
    compute = staticmethod(_remsi)


class RemUIOp(IntBinaryOp):
    name = "arith.remui"
    traits = ELEMENTWISE
    summary = "Unsigned remainder; division by zero is an error."
    example = "%r = arith.remui %a, %b : i64"
    compute = staticmethod(_remui)


class FloorDivSIOp(IntBinaryOp):
    name = "arith.floordivsi"
    traits = ELEMENTWISE
    summary = "Signed division rounding toward negative infinity."
    example = "%r = arith.floordivsi %a, %b : i64"
    compute = staticmethod(_floordivsi)


class CeilDivSIOp(IntBinaryOp):
    name = "arith.ceildivsi"
    traits = ELEMENTWISE
    summary = "Signed division rounding toward positive infinity."
    example = "%r = arith.ceildivsi %a, %b : i64"
    compute = staticmethod(_ceildivsi)


class CeilDivUIOp(IntBinaryOp):
    name = "arith.ceildivui"
    traits = ELEMENTWISE
    summary = "Unsigned division rounding toward positive infinity."
    example = "%r = arith.ceildivui %a, %b : i64"
    compute = staticmethod(_ceildivui)


class AndIOp(IntBinaryOp):
    name = "arith.andi"
    traits = COMMUTATIVE
    summary = "Bitwise and."
    example = "%r = arith.andi %a, %b : i64"
    compute = staticmethod(lambda a, b, t: a & b)

    def fold_partial(self, c):
        if _is_int_const(c[1], -1):
            return [self.operands[0]]
        if self.operands[0] is self.operands[1]:
            return [self.operands[0]]
        return None


class OrIOp(IntBinaryOp):
    name = "arith.ori"
    traits = COMMUTATIVE
    summary = "Bitwise or."
    example = "%r = arith.ori %a, %b : i64"
    compute = staticmethod(lambda a, b, t: a | b)

    def fold_partial(self, c):
        if _is_int_const(c[1], 0) or self.operands[0] is self.operands[1]:
            return [self.operands[0]]
        return None


class XOrIOp(IntBinaryOp):
    name = "arith.xori"
    traits = COMMUTATIVE
    summary = "Bitwise exclusive or."
    example = "%r = arith.xori %a, %b : i64"
    compute = staticmethod(lambda a, b, t: a ^ b)

    def fold_partial(self, c):
        if self.operands[0] is self.operands[1]:
            return [_zero_attr(self.results[0].type)]
        return [self.operands[0]] if _is_int_const(c[1], 0) else None


def _shift_amount(b, t):
    ub = unsigned(b, t)
    w = width(t)
    if (np.any(ub >= w) if is_array(ub) else ub >= w):
        raise Fault(f"shift amount is not less than the bit width ({w})")
    return ub


class ShLIOp(OverflowFlags, IntBinaryOp):
    name = "arith.shli"
    traits = ELEMENTWISE
    summary = "Shift left; a shift by the bit width or more is an error."
    example = "%r = arith.shli %a, %b : i64"
    compute = staticmethod(lambda a, b, t: wrap(_widen(a) << _shift_amount(b, t).astype(np.int64) if is_array(b)
                                                else _widen(a) << _shift_amount(b, t), t))

    def fold_partial(self, c):
        return [self.operands[0]] if _is_int_const(c[1], 0) else None


class ShRSIOp(IntBinaryOp):
    name = "arith.shrsi"
    traits = ELEMENTWISE
    summary = "Arithmetic shift right; a shift by the bit width or more is an error."
    example = "%r = arith.shrsi %a, %b : i64"

    @staticmethod
    def compute(a, b, t):
        amount = _shift_amount(b, t)
        sa = signed(_widen(a), t)
        if is_array(amount) or is_array(sa):
            return wrap(np.asarray(sa, dtype=np.int64) >> np.asarray(amount, dtype=np.int64), t)
        return wrap(sa >> amount, t)

    def fold_partial(self, c):
        return [self.operands[0]] if _is_int_const(c[1], 0) else None


class ShRUIOp(IntBinaryOp):
    name = "arith.shrui"
    traits = ELEMENTWISE
    summary = "Logical shift right; a shift by the bit width or more is an error."
    example = "%r = arith.shrui %a, %b : i64"

    @staticmethod
    def compute(a, b, t):
        amount = _shift_amount(b, t)
        ua = unsigned(a, t)
        if is_array(amount) or is_array(ua):
            return wrap(np.asarray(ua, dtype=np.uint64) >> np.asarray(amount, dtype=np.uint64), t)
        return wrap(ua >> amount, t)

    def fold_partial(self, c):
        return [self.operands[0]] if _is_int_const(c[1], 0) else None


def _select_by(cond, a, b):
    return np.where(cond, a, b) if is_array(cond) else (a if cond else b)


def _same_operand_fold(self, c):
    return [self.operands[0]] if self.operands[0] is self.operands[1] else None


class MaxSIOp(IntBinaryOp):
    name = "arith.maxsi"
    traits = COMMUTATIVE
    summary = "Signed maximum."
    example = "%r = arith.maxsi %a, %b : i64"
    compute = staticmethod(lambda a, b, t: _select_by(signed(_widen(a), t) >= signed(_widen(b), t), a, b))
    fold_partial = _same_operand_fold


class MinSIOp(IntBinaryOp):
    name = "arith.minsi"
    traits = COMMUTATIVE
    summary = "Signed minimum."
    example = "%r = arith.minsi %a, %b : i64"
    compute = staticmethod(lambda a, b, t: _select_by(signed(_widen(a), t) <= signed(_widen(b), t), a, b))
    fold_partial = _same_operand_fold


class MaxUIOp(IntBinaryOp):
    name = "arith.maxui"
    traits = COMMUTATIVE
    summary = "Unsigned maximum."
    example = "%r = arith.maxui %a, %b : i64"
    compute = staticmethod(lambda a, b, t: _select_by(unsigned(a, t) >= unsigned(b, t), a, b))
    fold_partial = _same_operand_fold


class MinUIOp(IntBinaryOp):
    name = "arith.minui"
    traits = COMMUTATIVE
    summary = "Unsigned minimum."
    example = "%r = arith.minui %a, %b : i64"
    compute = staticmethod(lambda a, b, t: _select_by(unsigned(a, t) <= unsigned(b, t), a, b))
    fold_partial = _same_operand_fold


# ---- float arithmetic ---------------------------------------------------------------------


class FloatBinaryOp(BinaryOp):
    operand_kind = "float"


class AddFOp(FloatBinaryOp):
    name = "arith.addf"
    traits = COMMUTATIVE
    summary = "Float addition (IEEE, round to nearest even)."
    example = "%r = arith.addf %x, %y : f32"
    takes_vectors = True
    compute = staticmethod(lambda a, b, t: round_to(a + b, t))

    def fold_partial(self, c):
        # x + (-0.0) == x exactly (x + 0.0 is not: -0.0 + 0.0 is +0.0).
        return [self.operands[0]] if _is_negzero(c[1]) else None

    partials = staticmethod(lambda b, x, y: [1, 1])


def _is_negzero(attr) -> bool:
    if isinstance(attr, FloatAttr):
        return attr.value == 0 and np.signbit(attr.value)
    return isinstance(attr, DenseAttr) and attr.is_splat and bool(np.signbit(attr.array.flat[0])) \
        and attr.array.flat[0] == 0


class SubFOp(FloatBinaryOp):
    name = "arith.subf"
    traits = ELEMENTWISE
    summary = "Float subtraction."
    example = "%r = arith.subf %x, %y : f32"
    takes_vectors = True
    compute = staticmethod(lambda a, b, t: round_to(a - b, t))

    def fold_partial(self, c):
        # x - 0.0 == x exactly.
        return [self.operands[0]] if _is_const(c[1], 0.0) and not _is_negzero(c[1]) else None

    partials = staticmethod(lambda b, x, y: [1, -1])


class MulFOp(FloatBinaryOp):
    name = "arith.mulf"
    traits = COMMUTATIVE
    summary = "Float multiplication."
    example = "%r = arith.mulf %t, %u : tensor<4xf32>"
    takes_vectors = True
    compute = staticmethod(lambda a, b, t: round_to(a * b, t))

    def fold_partial(self, c):
        return [self.operands[0]] if _is_const(c[1], 1.0) else None

    partials = staticmethod(lambda b, x, y: [x[1], x[0]])


class DivFOp(FloatBinaryOp):
    name = "arith.divf"
    traits = ELEMENTWISE
    summary = "Float division (x / 0 is an infinity or NaN, as IEEE says)."
    example = "%r = arith.divf %x, %y : f32"
    compute = staticmethod(lambda a, b, t: round_to(np.true_divide(a, b), t))

    def fold_partial(self, c):
        return [self.operands[0]] if _is_const(c[1], 1.0) else None

    def vjp(self, b, x, y, g):
        return [g[0] / x[1], -(g[0] * y[0]) / x[1]]

    def jvp(self, b, x, y, t):
        top = [v for v in (t[0], None if t[1] is None else -(y[0] * t[1])) if v is not None]
        return [(top[0] + top[1] if len(top) == 2 else top[0]) / x[1]]


class RemFOp(FloatBinaryOp):
    name = "arith.remf"
    traits = ELEMENTWISE
    summary = "Float remainder with the sign of the dividend (C fmod)."
    example = "%r = arith.remf %x, %y : f32"
    compute = staticmethod(lambda a, b, t: round_to(np.fmod(a, b), t))

    # remf(a, c) = a - c * trunc(a / c), and trunc(a / c) = (a - y) / c: an integer, computed with
    # rounding errors, so rounded to the nearest integer (floor(q + 1/2); floor has a zero derivative).
    partials = staticmethod(lambda b, x, y: [1, -(((x[0] - y) / x[1]) + 0.5).floor()])


def _maximumf(a, b, t):
    nan = np.isnan(a) | np.isnan(b)
    pick_a = (a > b) | ((a == b) & ~np.signbit(a))
    return round_to(np.where(nan, np.float64("nan"), np.where(pick_a, a, b)) if is_array(nan) or is_array(a)
                    or is_array(b) else (a + b if nan else (a if pick_a else b)), t)


def _minimumf(a, b, t):
    nan = np.isnan(a) | np.isnan(b)
    pick_a = (a < b) | ((a == b) & np.signbit(a))
    return round_to(np.where(nan, np.float64("nan"), np.where(pick_a, a, b)) if is_array(nan) or is_array(a)
                    or is_array(b) else (a + b if nan else (a if pick_a else b)), t)


def _maxnumf(a, b, t):
    """IEEE 754-2019 maximumNumber: a NaN operand is ignored; -0.0 < +0.0 (so it commutes).
    C fmax may return either zero; irc fixes the choice so that every engine agrees."""
    return np.where(np.isnan(a), round_to(b, t), np.where(np.isnan(b), round_to(a, t), _maximumf(a, b, t))) \
        if is_array(a) or is_array(b) else (round_to(b, t) if np.isnan(a) else round_to(a, t) if np.isnan(b)
                                            else _maximumf(a, b, t))


def _minnumf(a, b, t):
    """IEEE 754-2019 minimumNumber: a NaN operand is ignored; -0.0 < +0.0."""
    return np.where(np.isnan(a), round_to(b, t), np.where(np.isnan(b), round_to(a, t), _minimumf(a, b, t))) \
        if is_array(a) or is_array(b) else (round_to(b, t) if np.isnan(a) else round_to(a, t) if np.isnan(b)
                                            else _minimumf(a, b, t))


def tie_split(b, first_wins, x0, x1):
    """The derivatives of max/min with respect to (x0, x1): 1 for the operand chosen, and 1/2 each
    where they are equal (the chosen operand is then arbitrary; the split keeps symmetry)."""
    d0 = b.select(first_wins, b.ones_like(x0), b.select(x0.eq(x1), b.full_like(x0, 0.5), b.zeros_like(x0)))
    return [d0, 1.0 - d0]


def _is_constant(v) -> bool:
    """A constant, or a ``graph.splat`` of one."""
    op = v.value.defining_op
    if op is not None and op.name == "graph.splat":
        return constant_value(op.operands[0]) is not None
    return constant_value(v.value) is not None


def against_constant(b, x, y, strictly_chosen):
    """max/min of a value and a constant (ReLU is ``maximumf(x, 0)``): the value's derivative is 1
    where it is strictly chosen, else 0 (relu'(0) = 0, as PyTorch's relu and jax.nn.relu), read
    from the result and the constant, so the backward keeps the output alive, not the input.
    None when neither operand is a constant (then ``tie_split`` applies)."""
    for k in (0, 1):
        if _is_constant(x[1 - k]) and not _is_constant(x[k]):
            d = b.select(strictly_chosen(y, x[1 - k]), b.ones_like(y), b.zeros_like(y))
            return [d, None] if k == 0 else [None, d]
    return None


def number_wins(b, x0_chosen, x1):
    """maxnumf/minnumf return x0 where x1 is a NaN (and x0 is not): x0 takes the gradient there."""
    return b.op("arith.ori", x0_chosen, b.compare("uno", x1, x1))


class MaximumFOp(FloatBinaryOp):
    name = "arith.maximumf"
    traits = COMMUTATIVE
    summary = "IEEE 754-2019 maximum: NaN if either is NaN; +0.0 > -0.0."
    example = "%r = arith.maximumf %x, %y : f32"
    takes_vectors = True  # the GEMM library's ReLU on a row of a tile (passes/lowering/gemm_library.py)
    compute = staticmethod(_maximumf)
    fold_partial = _same_operand_fold

    # Tie rule (as JAX and PyTorch): where the operands are equal, each gets half the gradient.
    partials = staticmethod(lambda b, x, y: against_constant(b, x, y, lambda r, c: r > c)
                            or tie_split(b, x[0] > x[1], x[0], x[1]))


class MinimumFOp(FloatBinaryOp):
    name = "arith.minimumf"
    traits = COMMUTATIVE
    summary = "IEEE 754-2019 minimum: NaN if either is NaN; -0.0 < +0.0."
    example = "%r = arith.minimumf %x, %y : f32"
    compute = staticmethod(_minimumf)
    fold_partial = _same_operand_fold

    partials = staticmethod(lambda b, x, y: against_constant(b, x, y, lambda r, c: r < c)
                            or tie_split(b, x[0] < x[1], x[0], x[1]))


class MaxNumFOp(FloatBinaryOp):
    name = "arith.maxnumf"
    traits = COMMUTATIVE
    summary = "Maximum that ignores a NaN operand (IEEE 754-2019 maximumNumber: -0.0 < +0.0)."
    example = "%r = arith.maxnumf %x, %y : f32"
    compute = staticmethod(_maxnumf)
    fold_partial = _same_operand_fold

    partials = staticmethod(lambda b, x, y: tie_split(b, number_wins(b, x[0] > x[1], x[1]), x[0], x[1]))


class MinNumFOp(FloatBinaryOp):
    name = "arith.minnumf"
    traits = COMMUTATIVE
    summary = "Minimum that ignores a NaN operand (IEEE 754-2019 minimumNumber: -0.0 < +0.0)."
    example = "%r = arith.minnumf %x, %y : f32"
    compute = staticmethod(_minnumf)
    fold_partial = _same_operand_fold

    partials = staticmethod(lambda b, x, y: tie_split(b, number_wins(b, x[0] < x[1], x[1]), x[0], x[1]))


class NegFOp(UnaryOp):
    name = "arith.negf"
    traits = ELEMENTWISE
    operand_kind = "float"
    summary = "Float negation (flips the sign bit, NaN included)."
    example = "%r = arith.negf %x : f32"
    compute = staticmethod(lambda a, t: round_to(-a, t))

    def fold_partial(self, c):
        inner = self.operands[0].defining_op
        if isinstance(inner, NegFOp):
            return [inner.operands[0]]
        return None

    partials = staticmethod(lambda b, x, y: [-1])


# ---- comparisons ---------------------------------------------------------------------------

CMPI_PREDICATES = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
CMPF_PREDICATES = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
                   "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true"]


# ---- two-result integer arithmetic (MLIR's *_extended ops) -------------------------------


def _per_element(fn, a, b, t):
    """``fn(a, b)`` -> (low, high) on scalars, or elementwise on arrays (Python ints, exact)."""
    if not (is_array(a) or is_array(b)):
        return fn(int(a), int(b))
    pairs = np.frompyfunc(lambda x, y: fn(int(x), int(y)), 2, 2)(a, b)
    return [np.asarray(p.astype(object)).astype(np.asarray(a).dtype) for p in pairs]


class ExtendedOp(Operation):
    """``%low, %high = op %a, %b : T``: an exact result split into two words (two results).

    ``compute(a, b, t)`` returns both results from canonical values; fold and the
    interpreter share it.  Subclasses set ``second`` to the second result's kind.
    """

    traits = frozenset({Pure})
    second = "same"  # 'same' (the high word, type T) or 'i1' (the carry)

    def _second_type(self, t):
        return with_element(t, i1) if self.second == "i1" else t

    def verify_op(self) -> None:
        if len(self.operands) != 2 or len(self.results) != 2:
            raise self.error("expects two operands and two results")
        t = self.operands[0].type
        if self.operands[1].type is not t or self.results[0].type is not t:
            raise self.error(f"requires both operands and the first result to have one type, got "
                             f"{self.operands[1].type}, {self.results[0].type} and {t}")
        if not element_kind_ok(t, "int"):
            raise self.error(f"operands must be integers or tensors of them, got {t}")
        if self.results[1].type is not self._second_type(t):
            raise self.error(f"the second result must be {self._second_type(t)}, got {self.results[1].type}")

    def interpret(self, interp, args):
        t = self.operands[0].type.element_type
        return list(_per_element(lambda a, b: self.compute(a, b, t), args[0], args[1], t))

    def fold(self, constants):
        if constants[0] is None or constants[1] is None:
            return self.fold_partial(constants[1] if constants[1] is not None else constants[0],
                                     self.operands[0] if constants[1] is not None else self.operands[1])
        from irc.semantics import value_to_attr

        low, high = self.interpret(None, [attr_to_value(c) for c in constants])
        return [value_to_attr(low, self.results[0].type), value_to_attr(high, self.results[1].type)]

    def fold_partial(self, c, x):
        """Both results when one operand is the constant ``c`` and the other is ``x`` (both ops
        commute): x + 0 is (x, no carry), x * 0 is (0, 0), x * 1 unsigned is (x, 0)."""
        if c is None:
            return None
        if _is_int_const(c, 0):
            second = _zero_attr(self.results[1].type)
            return [x, second] if self.name == "arith.addui_extended" else [_zero_attr(x.type), second]
        if _is_int_const(c, 1) and self.name == "arith.mului_extended":
            return [x, _zero_attr(self.results[1].type)]
        return None

    @classmethod
    def parse_uniform(cls, ctx, syn):
        types = syn.plain_types("types")
        if len(syn.args) != 2 or any(type(a) is tuple for a in syn.args):
            raise IRError(f"'{cls.name}' expects '%a, %b'", syn.loc)
        t = types[0]
        if len(types) != (2 if cls.second == "i1" else 1):
            form = "T, i1" if cls.second == "i1" else "T"
            raise IRError(f"'{cls.name}' expects ': {form}' after its operands", syn.loc)
        return cls([ctx.value(a, t) for a in syn.args], [t, types[1] if len(types) == 2 else t], syn.attrs)

    def print_custom(self, p) -> None:
        t = self.operands[0].type
        types = f"{t}, {self.results[1].type}" if self.second == "i1" else str(t)
        p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} : {types}")


class AddUIExtendedOp(ExtendedOp):
    name = "arith.addui_extended"
    second = "i1"
    summary = "Unsigned addition with a carry: the wrapped sum and whether it overflowed."
    example = "%sum, %carry = arith.addui_extended %a, %b : i64, i1"

    @staticmethod
    def compute(a, b, t):
        total = unsigned(a, t) + unsigned(b, t)
        return wrap(total, t), int(total >> width(t) != 0)


class MulUIExtendedOp(ExtendedOp):
    name = "arith.mului_extended"
    summary = "Unsigned full multiplication: the low and high words of the double-width product."
    example = "%low, %high = arith.mului_extended %a, %b : i64"

    @staticmethod
    def compute(a, b, t):
        product = unsigned(a, t) * unsigned(b, t)
        return wrap(product, t), wrap(product >> width(t), t)


class MulSIExtendedOp(ExtendedOp):
    name = "arith.mulsi_extended"
    summary = "Signed full multiplication: the low and high words of the double-width product."
    example = "%low, %high = arith.mulsi_extended %a, %b : i64"

    @staticmethod
    def compute(a, b, t):
        product = signed(a, t) * signed(b, t)
        return wrap(product, t), wrap(product >> width(t), t)


class CmpOp(Operation):
    """``op PRED, %a, %b : T``; the predicate is the ``predicate`` attribute (MLIR's numbering)."""

    traits = frozenset({Pure, Elementwise})
    predicates: list[str] = []
    operand_kind = "any"

    @property
    def predicate(self) -> str:
        return self.predicates[self.attributes["predicate"].value]

    def verify_op(self) -> None:
        if len(self.operands) != 2 or len(self.results) != 1:
            raise self.error("expects two operands and one result")
        p = self.attributes.get("predicate")
        if not isinstance(p, IntegerAttr) or not 0 <= p.value < len(self.predicates):
            raise self.error("requires a 'predicate' attribute, one of " + ", ".join(self.predicates))
        a, b = self.operand_types
        if a is not b:
            raise self.error(f"requires both operands to have the same type, got {a} and {b}")
        if not element_kind_ok(a, self.operand_kind):
            raise self.error(f"operands must be {'integers' if self.operand_kind == 'int' else 'floats'}, got {a}")
        expected = with_element(a, i1)
        if self.results[0].type is not expected:
            raise self.error(f"result must be {expected}, got {self.results[0].type}")

    def interpret(self, interp, args):
        check_same_shapes(self, interp, args)
        return [self.compute(self.predicate, args[0], args[1], self.operands[0].type.element_type)]

    def fold(self, constants):
        if None in constants:
            return self.fold_partial()
        try:
            value = self.interpret(None, [attr_to_value(c) for c in constants])[0]
        except Fault:
            return None
        from irc.semantics import value_to_attr

        return [value_to_attr(value, self.results[0].type)]

    def fold_partial(self):
        return None

    @classmethod
    def parse_uniform(cls, ctx, syn):
        args = syn.args
        if len(args) == 3 and isinstance(args[0], tuple) and args[0][0] == "literal" and args[0][1].kind == "bool":
            # cmpf's 'true' and 'false' predicates lex as boolean literals.
            lit = args[0][1]
            if "true" not in cls.predicates:
                raise IRError(f"unknown predicate '{str(lit.value).lower()}' for '{cls.name}'; expected one of "
                              + ", ".join(cls.predicates), syn.loc)
            predicate = "true" if lit.value else "false"
        elif len(args) != 3 or not isinstance(args[0], tuple) or args[0][0] != "keyword":
            raise IRError(f"'{cls.name}' expects 'PREDICATE, %lhs, %rhs : type'", syn.loc)
        else:
            pred_tok = args[0][1]
            predicate = pred_tok.value
            if predicate not in cls.predicates:
                raise ctx.error(f"unknown predicate '{pred_tok.value}' for '{cls.name}'; expected one of "
                                + ", ".join(cls.predicates), pred_tok)
        if isinstance(args[1], tuple) or isinstance(args[2], tuple):
            raise IRError(f"'{cls.name}' expects 'PREDICATE, %lhs, %rhs : type'", syn.loc)
        t = syn.single_type()
        operands = [ctx.value(args[1], t), ctx.value(args[2], t)]
        attrs = {"predicate": IntegerAttr(cls.predicates.index(predicate), i64), **syn.attrs}
        return cls(operands, [with_element(t, i1)], attrs)

    def print_custom(self, p) -> None:
        p.write(f" {self.predicate}, {p.values(self.operands)}{p.attr_dict(self.attributes, ('predicate',))}"
                f" : {self.operands[0].type}")

    @classmethod
    def build(cls, predicate: str, a, b):
        return cls([a, b], [with_element(a.type, i1)],
                   {"predicate": IntegerAttr(cls.predicates.index(predicate), i64)})


def _as_bool(x):
    return x if is_array(x) else int(bool(x))


class CmpIOp(CmpOp):
    name = "arith.cmpi"
    summary = "Integer comparison: eq, ne, slt, sle, sgt, sge, ult, ule, ugt, uge. Result is i1."
    example = "%r = arith.cmpi slt, %a, %b : i64"
    predicates = CMPI_PREDICATES
    operand_kind = "int"

    @staticmethod
    def compute(pred, a, b, t):
        if pred in ("eq", "ne"):
            r = (a == b) if pred == "eq" else (a != b)
        elif pred[0] == "s":
            a, b = signed(_widen(a), t), signed(_widen(b), t)
            r = {"slt": a < b, "sle": a <= b, "sgt": a > b, "sge": a >= b}[pred]
        else:
            a, b = unsigned(a, t), unsigned(b, t)
            r = {"ult": a < b, "ule": a <= b, "ugt": a > b, "uge": a >= b}[pred]
        return _as_bool(r)

    def fold_partial(self):
        if self.operands[0] is self.operands[1]:
            truth = self.predicate in ("eq", "sle", "sge", "ule", "uge")
            t = self.results[0].type
            if isinstance(t, ShapedType):
                return [DenseAttr(truth, t)]
            return [IntegerAttr(int(truth), i1)]
        return None


class CmpFOp(CmpOp):
    name = "arith.cmpf"
    summary = "Float comparison; o* predicates are false and u* true when an operand is NaN."
    example = "%r = arith.cmpf olt, %x, %y : f32"
    predicates = CMPF_PREDICATES
    operand_kind = "float"

    @staticmethod
    def compute(pred, a, b, t):
        if pred in ("false", "true"):
            r = np.full(np.shape(a), pred == "true") if is_array(a) else pred == "true"
            return _as_bool(r)
        unordered = np.isnan(a) | np.isnan(b)
        if pred == "ord":
            return _as_bool(~unordered if is_array(unordered) else not unordered)
        if pred == "uno":
            return _as_bool(unordered)
        base = {"eq": a == b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b, "ne": a != b}[pred[1:]]
        if pred[0] == "o":
            r = base & ~unordered if is_array(base) else bool(base) and not unordered
        else:
            r = base | unordered if is_array(base) else bool(base) or bool(unordered)
        return _as_bool(r)


# ---- select and constants --------------------------------------------------------------------


class SelectOp(Operation):
    """``arith.select %cond, %a, %b : T``; an i1 tensor condition selects elementwise."""

    name = "arith.select"
    traits = frozenset({Pure, Elementwise})
    summary = "Choose between two values by an i1 condition (elementwise for an i1 tensor)."
    example = "%r = arith.select %cond, %a, %b : i64"

    def verify_op(self) -> None:
        if len(self.operands) != 3 or len(self.results) != 1:
            raise self.error("expects three operands and one result")
        c, a, b = self.operand_types
        if a is not b or self.results[0].type is not a:
            raise self.error(f"requires both choices and the result to have one type, got {a}, {b} and "
                             f"{self.results[0].type}")
        if c is not i1 and c is not with_element(a, i1):
            raise self.error(f"condition must be i1 or a tensor of i1 shaped like the result, got {c}")

    def interpret(self, interp, args):
        check_same_shapes(self, interp, args)
        c, a, b = args
        return [np.where(c, a, b) if is_array(c) else (a if c else b)]

    def fold(self, constants):
        cond, a, b = self.operands
        if a is b:
            return [a]
        c = constants[0]
        if isinstance(c, IntegerAttr):
            return [a if c.value & 1 else b]
        if isinstance(c, DenseAttr) and c.is_splat and c.array.size:
            return [a if c.array.flat[0] else b]
        if None not in constants:
            values = [attr_to_value(x) for x in constants]
            from irc.semantics import value_to_attr

            return [value_to_attr(self.interpret(None, values)[0], self.results[0].type)]
        return None

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.args) != 3 or any(isinstance(a, tuple) for a in syn.args):
            raise IRError("'arith.select' expects '%cond, %true_value, %false_value : type'", syn.loc)
        types = syn.plain_types()
        if len(types) == 1:
            cond_t, t = i1, types[0]
        elif len(types) == 2:
            cond_t, t = types
        else:
            raise IRError("'arith.select' expects ': type' or ': condition_type, type'", syn.loc)
        c, a, b = syn.args
        return cls([ctx.value(c, cond_t), ctx.value(a, t), ctx.value(b, t)], [t], syn.attrs)

    def print_custom(self, p) -> None:
        c = self.operands[0].type
        types = str(self.results[0].type) if c is i1 else f"{c}, {self.results[0].type}"
        p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} : {types}")

    @classmethod
    def build(cls, cond, a, b):
        return cls([cond, a, b], [a.type])

    def vjp(self, b, x, y, g):
        if not y[0].is_float:
            return [None, None, None]
        zero = b.zeros_like(y[0])
        return [None, b.select(x[0], g[0], zero), b.select(x[0], zero, g[0])]

    def jvp(self, b, x, y, t):
        if t[1] is None and t[2] is None:
            return [None]
        return [b.select(x[0], t[1] if t[1] is not None else b.zeros_like(y[0]),
                         t[2] if t[2] is not None else b.zeros_like(y[0]))]


class ConstantOp(Operation):
    """``arith.constant 42 : i64``, ``arith.constant true``, ``arith.constant dense<1.0> : tensor<4xf32>``."""

    name = "arith.constant"
    traits = frozenset({Pure, ConstantLike})
    summary = "A compile-time constant scalar or tensor."
    example = "%r = arith.constant 42 : i64"

    @property
    def value(self):
        return self.attributes["value"]

    def verify_op(self) -> None:
        v = self.attributes.get("value")
        if len(self.operands) or len(self.results) != 1:
            raise self.error("takes no operands and has one result")
        t = self.results[0].type
        if not isinstance(v, (IntegerAttr, FloatAttr, DenseAttr)):
            raise self.error("requires a 'value' attribute (integer, float or dense)")
        if v.type is not t:
            raise self.error(f"value of type {v.type} does not match the result type {t}")
        if isinstance(t, ShapedType) and not isinstance(t, TensorType):
            raise self.error(f"result must be a scalar or a tensor, got {t}")

    def interpret(self, interp, args):
        return [attr_to_value(self.attributes["value"])]

    def fold(self, constants):
        return [self.attributes["value"]]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.args) != 1 or not isinstance(syn.args[0], tuple) or syn.args[0][0] != "literal":
            raise IRError("'arith.constant' expects a literal value, as in 'arith.constant 42 : i64'", syn.loc)
        lit = syn.args[0][1]
        if syn.sig is None and lit.kind == "bool":
            t = i1
        else:
            t = syn.single_type()
        attr = lit.to_attr(t)
        if lit.kind == "str":
            raise IRError("'arith.constant' cannot hold a string", syn.loc)
        return cls([], [t], {"value": attr, **syn.attrs})

    def print_custom(self, p) -> None:
        p.write(p.attr_dict(self.attributes, ("value",)) + " " + _constant_text(self.attributes["value"]))

    @classmethod
    def build(cls, attr):
        return cls([], [attr.type], {"value": attr})

    @classmethod
    def materialize(cls, attr):
        if isinstance(attr, (IntegerAttr, FloatAttr, DenseAttr)):
            return cls.build(attr)
        return None


registry.MATERIALIZERS.append(ConstantOp)


def _constant_text(attr) -> str:
    if isinstance(attr, IntegerAttr) and attr.type is i1:
        return "true" if attr.value & 1 else "false"
    return str(attr)


def constant(value, type) -> ConstantOp:
    """A constant op of ``type`` holding ``value`` (a Python number or array)."""
    from irc.semantics import value_to_attr

    return ConstantOp.build(value_to_attr(value, type))


# ---- casts ------------------------------------------------------------------------------------


def _int_to_int(x, src, dst, sign: bool):
    return wrap(signed(x, src) if sign else unsigned(x, src), dst) if not is_array(x) else \
        wrap((signed(x, src) if sign else unsigned(x, src)).astype(np.int64 if sign else np.uint64), dst)


class IndexCastOp(CastOp):
    """One side is ``index``, the other an integer type (either may be the wider)."""

    name = "arith.index_cast"
    summary = "Between index and an integer type, sign-extending or truncating."
    example = "%r = arith.index_cast %i : index to i64"
    from_kind = to_kind = "int"
    compute = staticmethod(lambda x, s, d: _int_to_int(x, s, d, True))

    def verify_widths(self, src, dst):
        if isinstance(src, IndexType) == isinstance(dst, IndexType):
            raise self.error(f"casts between index and an integer type, not {src} to {dst}")


class IndexCastUIOp(IndexCastOp):
    name = "arith.index_castui"
    summary = "Between index and an integer type, zero-extending or truncating."
    example = "%r = arith.index_castui %a : i64 to index"
    compute = staticmethod(lambda x, s, d: _int_to_int(x, s, d, False))


class ExtSIOp(CastOp):
    """Both sides are integer types, not ``index``; the result is strictly wider."""

    name = "arith.extsi"
    summary = "Sign-extend an integer to a wider integer type."
    example = "%r = arith.extsi %w : i32 to i64"
    from_kind = to_kind = "int"
    compute = staticmethod(lambda x, s, d: _int_to_int(x, s, d, True))

    def verify_widths(self, src, dst):
        if not isinstance(src, IntegerType) or not isinstance(dst, IntegerType) or dst.width <= src.width:
            raise self.error(f"result must be a wider integer type than the operand, got {src} to {dst}")


class ExtUIOp(ExtSIOp):
    name = "arith.extui"
    summary = "Zero-extend an integer to a wider integer type."
    example = "%r = arith.extui %w : i32 to i64"
    compute = staticmethod(lambda x, s, d: _int_to_int(x, s, d, False))


class TruncIOp(CastOp):
    """Both sides are integer types, not ``index``; the result is strictly narrower."""

    name = "arith.trunci"
    summary = "Truncate an integer to a narrower integer type (keeps the low bits)."
    example = "%r = arith.trunci %a : i64 to i32"
    from_kind = to_kind = "int"
    compute = staticmethod(lambda x, s, d: _int_to_int(x, s, d, True))

    def verify_widths(self, src, dst):
        if not isinstance(src, IntegerType) or not isinstance(dst, IntegerType) or dst.width >= src.width:
            raise self.error(f"result must be a narrower integer type than the operand, got {src} to {dst}")


_MANTISSA_BITS = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}


def _wide_int_to_float(value: int, dst):
    """A Python int too wide for numpy's int64/uint64 as ``dst``, rounded once to nearest, ties
    to even (as LLVM's conversion of i128 and wider does): the significand rounded here is
    exact in every float format, so converting it does not round again; inf past the range."""
    p = _MANTISSA_BITS[dst.kind]
    magnitude = abs(value)
    shift = magnitude.bit_length() - p
    q, r = magnitude >> shift, magnitude & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    try:
        out = float(q) * 2.0 ** shift
    except OverflowError:
        out = float("inf")
    result = round_to(np.asarray(-out if value < 0 else out, dtype=np.float64), dst)
    return result[()]


def _int_to_float(x, src, dst, sign: bool):
    value = signed(_widen(x), src) if sign else unsigned(x, src)
    if not is_array(x) and not (-(1 << 63) <= value < (1 << 63) if sign else value < (1 << 64)):
        return _wide_int_to_float(value, dst)  # i65 and wider (arrays of them have no numpy dtype)
    arr = np.asarray(value, dtype=np.int64 if sign else np.uint64)
    out = round_to(arr.astype(float_dtype(dst) if dst.kind != "bf16" else np.float64), dst)
    return out if is_array(x) else out[()]


def _float_to_int(x, src, dst, sign: bool):
    w = width(dst)
    lo, hi = (-(1 << (w - 1)), 1 << (w - 1)) if sign else (0, 1 << w)
    if w == 1 and sign:
        lo, hi = -1, 1
    xs = np.asarray(x, dtype=np.float64)
    t = np.trunc(xs)
    if np.any(np.isnan(xs)) or np.any(t < lo) or np.any(t >= hi):
        raise Fault(f"{'fptosi' if sign else 'fptoui'} of a value that {dst} cannot hold")
    if is_array(x):
        return wrap(t.astype(np.int64 if sign else np.uint64), dst)
    return wrap(int(t), dst)


class SIToFPOp(CastOp):
    name = "arith.sitofp"
    summary = "Signed integer to float, rounding to nearest."
    example = "%r = arith.sitofp %a : i64 to f32"
    from_kind, to_kind = "int", "float"
    compute = staticmethod(lambda x, s, d: _int_to_float(x, s, d, True))


class UIToFPOp(CastOp):
    name = "arith.uitofp"
    summary = "Unsigned integer to float, rounding to nearest."
    example = "%r = arith.uitofp %a : i64 to f32"
    from_kind, to_kind = "int", "float"
    compute = staticmethod(lambda x, s, d: _int_to_float(x, s, d, False))


class FPToSIOp(CastOp):
    name = "arith.fptosi"
    summary = "Float to signed integer, rounding toward zero; NaN or out of range is an error."
    example = "%r = arith.fptosi %x : f32 to i64"
    from_kind, to_kind = "float", "int"
    compute = staticmethod(lambda x, s, d: _float_to_int(x, s, d, True))


class FPToUIOp(CastOp):
    name = "arith.fptoui"
    summary = "Float to unsigned integer, rounding toward zero; NaN or out of range is an error."
    example = "%r = arith.fptoui %x : f32 to i64"
    from_kind, to_kind = "float", "int"
    compute = staticmethod(lambda x, s, d: _float_to_int(x, s, d, False))


class ExtFOp(CastOp):
    """The result is a strictly wider float type."""

    name = "arith.extf"
    summary = "Widen a float (exact)."
    example = "%r = arith.extf %x : f32 to f64"
    from_kind = to_kind = "float"
    compute = staticmethod(lambda x, s, d: round_to(widen_to_f64(x) if is_array(x) else widen_to_f64(x)[()], d))

    def verify_widths(self, src, dst):
        if dst.width <= src.width:
            raise self.error(f"result must be a wider float type than the operand, got {src} to {dst}")

    def vjp(self, b, x, y, g):
        return [b.convert(g[0], x[0].elem)]

    def jvp(self, b, x, y, t):
        return [b.convert(t[0], y[0].elem)]


ROUNDING_MODES = ("to_nearest_even", "downward", "upward", "toward_zero", "to_nearest_away")
"""MLIR's rounding modes, in the order of its ``roundingmode`` property's values."""


def _bf16_next_up(r: np.ndarray) -> np.ndarray:
    """The least bf16 above each bf16 value ``r`` (kept in float32)."""
    bits = np.nextafter(r, np.float32(np.inf)).astype(np.float32).view(np.uint32)
    negative = (bits >> 31).astype(bool)
    out = np.where(negative, bits & np.uint32(0xFFFF0000), (bits + np.uint32(0xFFFF)) & np.uint32(0xFFFF0000))
    return out.astype(np.uint32).view(np.float32)


def _next_toward(r: np.ndarray, dst: FloatType, up: bool) -> np.ndarray:
    if dst.kind == "bf16":
        return _bf16_next_up(r) if up else -_bf16_next_up(-r)
    return np.nextafter(r, np.array(np.inf if up else -np.inf, dtype=r.dtype))


def round_directed(x, dst: FloatType, mode: int):
    """``x`` (a wider float) rounded to ``dst`` by MLIR rounding mode ``mode`` (an index of
    ROUNDING_MODES): the nearest value first, then its neighbour where the mode asks for the
    other side of ``x``.  NaNs stay NaN; overflow goes to infinity or the largest finite value
    as the direction says."""
    wide = np.asarray(x, dtype=np.float64)
    nearest = np.asarray(round_to(wide, dst))
    if mode == 0:
        return nearest if is_array(x) else nearest[()]
    near = nearest.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        lo = np.where(near > wide, _next_toward(nearest, dst, up=False), nearest)
        hi = np.where(near < wide, _next_toward(nearest, dst, up=True), nearest)
        if mode == 1:
            out = lo
        elif mode == 2:
            out = hi
        elif mode == 3:
            out = np.where(wide >= 0, lo, hi)
        else:
            lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
            tie = (lo64 != hi64) & (wide - lo64 == hi64 - wide)
            out = np.where(tie, np.where(wide >= 0, hi, lo), nearest)
    out = np.where(np.isnan(wide), nearest, out).astype(nearest.dtype)
    return out if is_array(x) else out[()]


class TruncFOp(CastOp):
    """The result is a strictly narrower float type.  An optional rounding mode follows the
    operand, as in MLIR (``arith.truncf %x downward : f64 to f32``, kept as the ``roundingmode``
    attribute, 0 to 4 in ROUNDING_MODES' order); without one it rounds to nearest even."""

    name = "arith.truncf"
    summary = "Narrow a float, rounding to nearest even (or by the rounding mode given)."
    example = "%r = arith.truncf %x : f32 to f16"
    from_kind = to_kind = "float"
    compute = staticmethod(lambda x, s, d: round_to(x, d))

    @property
    def rounding_mode(self) -> int:
        mode = self.attributes.get("roundingmode")
        return mode.value if isinstance(mode, IntegerAttr) else 0

    def verify_widths(self, src, dst):
        if dst.width >= src.width:
            raise self.error(f"result must be a narrower float type than the operand, got {src} to {dst}")
        mode = self.attributes.get("roundingmode")
        if mode is not None and not (isinstance(mode, IntegerAttr) and 0 <= mode.value < len(ROUNDING_MODES)):
            raise self.error(f"roundingmode must be an integer from 0 to {len(ROUNDING_MODES) - 1}, got {mode}")

    def interpret(self, interp, args):
        if not self.rounding_mode:
            return super().interpret(interp, args)
        return [round_directed(args[0], self.results[0].type.element_type, self.rounding_mode)]

    def print_custom(self, p) -> None:
        mode = f" {ROUNDING_MODES[self.rounding_mode]}" if "roundingmode" in self.attributes else ""
        p.write(f" {p.value(self.operands[0])}{mode}{p.attr_dict(self.attributes, elide=('roundingmode',))} : "
                f"{self.operands[0].type} to {self.results[0].type}")

    def vjp(self, b, x, y, g):
        return [b.convert(g[0], x[0].elem)]

    def jvp(self, b, x, y, t):
        return [b.convert(t[0], y[0].elem)]


class BitcastOp(CastOp):
    """Both sides have the same bit width; ``index`` is not allowed (its width is the target's)."""

    name = "arith.bitcast"
    summary = "Reinterpret the bits of a value as another type of the same width."
    example = "%r = arith.bitcast %x : f32 to i32"
    compute = None

    def verify_widths(self, src, dst):
        if width(src) != width(dst) or isinstance(src, IndexType) or isinstance(dst, IndexType):
            raise self.error(f"operand and result must have the same bit width, got {src} and {dst}")

    def interpret(self, interp, args):
        """Through numpy views of the bits, never through a Python float or a float operation:
        converting a signalling NaN quiets it (x86 does so even in a float32 -> float64 move),
        and a bitcast must keep every bit.  bf16 values are float32 with a zero low half."""
        x = args[0]
        src, dst = self.operands[0].type.element_type, self.results[0].type.element_type
        w = width(src)
        if isinstance(src, FloatType) and src.kind == "bf16":
            bits = (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        elif isinstance(src, FloatType):
            bits = np.asarray(x, dtype=float_dtype(src)).view(f"u{w // 8}")
        else:
            bits = np.asarray(unsigned(x, src), dtype=np.uint8 if w == 1 else f"u{w // 8}")
        if isinstance(dst, FloatType) and dst.kind == "bf16":
            out = (bits.astype(np.uint32) << 16).view(np.float32)
        elif isinstance(dst, FloatType):
            out = bits.view(float_dtype(dst))
        elif is_array(x):
            return [wrap(bits.view(np.bool_ if w == 1 else f"i{w // 8}"), dst)]
        else:
            return [wrap(int(bits), dst)]
        return [out if is_array(x) else out[()]]

