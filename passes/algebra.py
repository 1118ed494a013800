"""Algebraic simplification patterns used by ``canonicalize`` (one pattern, one rule).

Integer rules hold for wrapping arithmetic at any width; float rules are
applied only where they are exact under IEEE semantics, unless ``fast_math``
is asked for.  Every rule builds its replacement through the rewriter, so the
greedy driver revisits whatever it touched.

This module defines patterns only; it registers no pass.
"""

from __future__ import annotations

from irc.attributes import DenseAttr, FloatAttr, IntegerAttr, integer_attr
from irc.patterns import RewritePattern, constant_value
from irc.semantics import wrap
from irc.types import IndexType, IntegerType

ASSOCIATIVE = {"arith.addi", "arith.muli", "arith.andi", "arith.ori", "arith.xori"}
COMBINE = {"arith.addi": lambda a, b: a + b, "arith.muli": lambda a, b: a * b,
           "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b,
           "arith.xori": lambda a, b: a ^ b}


def int_const(value) -> int | None:
    """The value of a scalar integer constant (signed, as stored), else None."""
    attr = constant_value(value)
    if isinstance(attr, IntegerAttr) and isinstance(attr.type, (IntegerType, IndexType)):
        return attr.value
    return None


def float_const(value) -> float | None:
    attr = constant_value(value)
    return attr.value if isinstance(attr, FloatAttr) else None


def is_scalar_int(value) -> bool:
    return isinstance(value.type, (IntegerType, IndexType))


def make_constant(rewriter, op, value: int, type):
    from irc.dialects.arith import ConstantOp

    c = ConstantOp.build(integer_attr(wrap(value, type), type))
    c.loc = op.loc
    rewriter.before_op(op).insert(c)
    return c.results[0]


def replace_with_op(rewriter, op, new):
    new.loc = op.loc
    rewriter.before_op(op).insert(new)
    rewriter.replace_op(op, [new.results[0]])
    return True


def binary(name: str, a, b):
    from irc import registry

    return registry.OPS[name]([a, b], [a.type])


class AbsorbingConstant(RewritePattern):
    """``x * 0`` and ``x & 0`` are 0, ``x | -1`` is -1 (integers)."""

    op_name = None
    ABSORBING = {"arith.muli": 0, "arith.andi": 0, "arith.ori": -1}

    def match_and_rewrite(self, op, rewriter) -> bool:
        zero = self.ABSORBING.get(op.name)
        if zero is None or not is_scalar_int(op.results[0]):
            return False
        c = int_const(op.operands[1])
        t = op.results[0].type
        if c is None or wrap(c, t) != wrap(zero, t):
            return False
        rewriter.replace_op(op, [make_constant(rewriter, op, zero, t)])
        return True


class Reassociate(RewritePattern):
    """Bring constants together: ``(x op c1) op c2`` -> ``x op (c1 op c2)``, and
    ``(x op c) op y`` and ``x op (y op c)`` -> ``(x op y) op c``, so constants bubble outward."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name not in ASSOCIATIVE or not is_scalar_int(op.results[0]):
            return False
        lhs, rhs = op.operands
        inner = lhs.defining_op
        if inner is None or inner.name != op.name or int_const(inner.operands[1]) is None:
            # x op (y op c) -> (x op y) op c, when the left side holds no constant to combine.
            inner_r = rhs.defining_op
            if inner_r is None or inner_r.name != op.name or int_const(lhs) is not None:
                return False
            if int_const(inner_r.operands[1]) is None or not inner_r.results[0].has_one_use:
                return False
            new_inner = binary(op.name, lhs, inner_r.operands[0])
            new_inner.loc = inner_r.loc
            rewriter.before_op(op).insert(new_inner)
            return replace_with_op(rewriter, op, binary(op.name, new_inner.results[0], inner_r.operands[1]))
        c1 = int_const(inner.operands[1])
        t = op.results[0].type
        c2 = int_const(rhs)
        if c2 is not None:
            folded = make_constant(rewriter, op, COMBINE[op.name](c1, c2), t)
            return replace_with_op(rewriter, op, binary(op.name, inner.operands[0], folded))
        if not inner.results[0].has_one_use:
            return False
        new_inner = binary(op.name, inner.operands[0], rhs)
        new_inner.loc = inner.loc
        rewriter.before_op(op).insert(new_inner)
        return replace_with_op(rewriter, op, binary(op.name, new_inner.results[0], inner.operands[1]))


class SubtractConstant(RewritePattern):
    """``x - c`` -> ``x + (-c)``: one canonical form, so additions reassociate."""

    op_name = "arith.subi"

    def match_and_rewrite(self, op, rewriter) -> bool:
        c = int_const(op.operands[1])
        if c is None or c == 0 or not is_scalar_int(op.results[0]):
            return False
        neg = make_constant(rewriter, op, -c, op.results[0].type)
        return replace_with_op(rewriter, op, binary("arith.addi", op.operands[0], neg))


class SubtractionIdentities(RewritePattern):
    """``x - (x - y)`` -> ``y``; ``(x + y) - x`` -> ``y``; ``(x + y) - y`` -> ``x``."""

    op_name = "arith.subi"

    def match_and_rewrite(self, op, rewriter) -> bool:
        a, b = op.operands
        inner_b = b.defining_op
        if inner_b is not None and inner_b.name == "arith.subi" and inner_b.operands[0] is a:
            rewriter.replace_op(op, [inner_b.operands[1]])
            return True
        inner_a = a.defining_op
        if inner_a is not None and inner_a.name == "arith.addi":
            x, y = inner_a.operands
            if x is b:
                rewriter.replace_op(op, [y])
                return True
            if y is b:
                rewriter.replace_op(op, [x])
                return True
        return False


class StrengthReduce(RewritePattern):
    """``x * 2^k`` -> ``x << k``; ``x /u 2^k`` -> ``x >>u k``; ``x %u 2^k`` -> ``x & (2^k - 1)``."""

    op_name = None
    NAMES = {"arith.muli": "arith.shli", "arith.divui": "arith.shrui", "arith.remui": "arith.andi"}

    def match_and_rewrite(self, op, rewriter) -> bool:
        target = self.NAMES.get(op.name)
        if target is None or not is_scalar_int(op.results[0]):
            return False
        t = op.results[0].type
        width = 64 if isinstance(t, IndexType) else t.width
        c = int_const(op.operands[1])
        if c is None:
            return False
        u = c & ((1 << width) - 1)
        if u < 2 or u & (u - 1):
            return False
        k = u.bit_length() - 1
        if op.name == "arith.muli" and k >= width - 1 and width > 1:
            return False  # keep x * MIN as it is: a shift by width-1 is fine, but be conservative
        amount = make_constant(rewriter, op, u - 1 if target == "arith.andi" else k, t)
        return replace_with_op(rewriter, op, binary(target, op.operands[0], amount))


class CastOfCast(RewritePattern):
    """Collapse chains of integer and float casts that compose to one cast (or none)."""

    op_name = None
    SAME_KIND = {"arith.extsi", "arith.extui", "arith.trunci", "arith.extf"}

    def match_and_rewrite(self, op, rewriter) -> bool:
        name = op.name
        if name not in self.SAME_KIND and name not in ("arith.index_cast", "arith.truncf"):
            return False
        inner = op.operands[0].defining_op
        if inner is None:
            return False
        src = inner.operands[0] if inner.operands else None
        if src is None:
            return False
        out_t = op.results[0].type
        if name == inner.name and name in self.SAME_KIND:
            return replace_with_op(rewriter, op, type(op)([src], [out_t], dict(op.attributes)))
        if name == "arith.trunci" and inner.name in ("arith.extsi", "arith.extui"):
            if src.type is out_t:
                rewriter.replace_op(op, [src])
                return True
            if isinstance(src.type, IntegerType) and isinstance(out_t, IntegerType) and out_t.width < src.type.width:
                return replace_with_op(rewriter, op, type(op)([src], [out_t]))
            return False
        if name == "arith.index_cast" and inner.name == "arith.index_cast" and src.type is out_t:
            width = src.type.width if isinstance(src.type, IntegerType) else 64
            mid = inner.results[0].type
            mid_width = mid.width if isinstance(mid, IntegerType) else 64
            if mid_width >= width:  # widening then narrowing back is the identity
                rewriter.replace_op(op, [src])
                return True
        if name == "arith.truncf" and inner.name == "arith.extf" and src.type is out_t:
            rewriter.replace_op(op, [src])
            return True
        return False


class UnsignedMinMaxBounds(RewritePattern):
    """``minui x, 0`` -> 0, ``minui x, -1`` -> x, ``maxui x, 0`` -> x, ``maxui x, -1`` -> -1."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name not in ("arith.minui", "arith.maxui") or not is_scalar_int(op.results[0]):
            return False
        c = int_const(op.operands[1])
        if c is None:
            return False
        t = op.results[0].type
        is_zero, is_ones = wrap(c, t) == 0, wrap(c, t) == wrap(-1, t)
        if not (is_zero or is_ones):
            return False
        keeps_x = (op.name == "arith.minui") == is_ones
        rewriter.replace_op(op, [op.operands[0] if keeps_x else op.operands[1]])
        return True


class SelectOfBooleans(RewritePattern):
    """``select %c, true, false`` -> ``%c``."""

    op_name = "arith.select"

    def match_and_rewrite(self, op, rewriter) -> bool:
        c, a, b = op.operands
        if op.results[0].type is not c.type:
            return False
        if int_const(a) in (1, -1) and int_const(b) == 0:
            rewriter.replace_op(op, [c])
            return True
        return False


class FastMathIdentities(RewritePattern):
    """Under fast-math only: ``x + 0.0`` -> x, ``x * 0.0`` -> 0.0, ``x - x`` -> 0.0."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.arith import ConstantOp

        name = op.name
        if name not in ("arith.addf", "arith.mulf", "arith.subf"):
            return False
        a, b = op.operands
        t = op.results[0].type
        if not hasattr(t, "kind"):
            return False
        c = float_const(b)
        if name == "arith.addf" and c == 0.0:
            rewriter.replace_op(op, [a])
            return True
        if (name == "arith.mulf" and c == 0.0) or (name == "arith.subf" and a is b):
            zero = ConstantOp.build(FloatAttr(0.0, t))
            return replace_with_op(rewriter, op, zero)
        return False


def splat_int_const(value) -> int | None:
    """The element of a splat integer ``dense`` constant (signed, as stored), else None."""
    attr = constant_value(value)
    if isinstance(attr, DenseAttr) and attr.is_splat and attr.array.dtype.kind in "iu":
        return int(attr.array.flat[0])
    return None


class SplatAbsorbingConstant(RewritePattern):
    """``AbsorbingConstant`` on integer tensors: ``x * dense<0>`` and ``x & dense<0>`` are
    ``dense<0>``, ``x | dense<-1>`` is ``dense<-1>`` (the constant operand itself)."""

    def __init__(self, op_name: str):
        self.op_name = op_name

    def match_and_rewrite(self, op, rewriter) -> bool:
        c = splat_int_const(op.operands[1])
        if c is None:
            return False
        t = op.results[0].type
        if wrap(c, t.element_type) != wrap(AbsorbingConstant.ABSORBING[op.name], t.element_type):
            return False
        rewriter.replace_op(op, [op.operands[1]])
        return True


EXACT_PATTERNS = [AbsorbingConstant(), Reassociate(), SubtractConstant(), SubtractionIdentities(),
                  StrengthReduce(), CastOfCast(), SelectOfBooleans(), UnsignedMinMaxBounds(),
                  *(SplatAbsorbingConstant(name) for name in AbsorbingConstant.ABSORBING)]
FAST_MATH_PATTERNS = [FastMathIdentities()]
