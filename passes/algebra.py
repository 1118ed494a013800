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


def per_name(pattern_cls, names) -> list:
    """One instance of a pattern class for each op name it handles: the driver then offers each op
    only the patterns for its name, instead of every op every pattern that matches any name."""
    out = []
    for name in names:
        pattern = pattern_cls()
        pattern.op_name = name
        out.append(pattern)
    return out


EXACT_PATTERNS = [*per_name(AbsorbingConstant, AbsorbingConstant.ABSORBING), *per_name(Reassociate, ASSOCIATIVE),
                  SubtractConstant(), SubtractionIdentities(), *per_name(StrengthReduce, StrengthReduce.NAMES),
                  *per_name(CastOfCast, [*CastOfCast.SAME_KIND, "arith.index_cast", "arith.truncf"]),
                  SelectOfBooleans(), *per_name(UnsignedMinMaxBounds, ["arith.minui", "arith.maxui"]),
                  *(SplatAbsorbingConstant(name) for name in AbsorbingConstant.ABSORBING)]
FAST_MATH_PATTERNS = per_name(FastMathIdentities, ["arith.addf", "arith.mulf", "arith.subf"])


# ---- rules of MLIR's arith canonicalisation (issue 15): scalars and splat tensors alike ------


def elem_type(value):
    """The element type of a scalar or tensor value."""
    return value.type.element_type if value.type.is_shaped else value.type


def int_or_splat(value) -> int | None:
    """The value of an integer constant, scalar or splat tensor (as stored), else None."""
    c = int_const(value)
    if c is not None:
        return c
    attr = constant_value(value)
    if isinstance(attr, DenseAttr) and attr.is_splat and attr.array.size and attr.array.dtype.kind in "iub":
        return int(attr.array.flat[0])
    return None


def is_int_value(value, n: int) -> bool:
    """Whether ``value`` is an integer constant (scalar or splat) equal to ``n`` at its width."""
    c = int_or_splat(value)
    t = elem_type(value)
    return c is not None and isinstance(t, (IntegerType, IndexType)) and wrap(c, t) == wrap(n, t)


def defining(value, *names):
    """The op defining ``value`` if its name is one of ``names``, else None."""
    op = value.defining_op
    return op if op is not None and op.name in names else None


def int_constant_like(rewriter, op, value: int, like):
    """A constant equal to ``value`` of ``like``'s type (a scalar, or a splat tensor)."""
    from irc.dialects.arith import ConstantOp

    from irc.semantics import value_to_attr

    t = like.type
    if not t.is_shaped:
        return make_constant(rewriter, op, value, t)
    import numpy as np

    from irc.types import i1, numpy_dtype

    e = t.element_type
    array = np.full(t.shape, bool(value & 1) if e is i1 else wrap(value, e),
                    dtype=bool if e is i1 else numpy_dtype(e))
    c = ConstantOp.build(value_to_attr(array, t))
    c.loc = op.loc
    rewriter.before_op(op).insert(c)
    return c.results[0]


def insert(rewriter, op, new):
    new.loc = op.loc
    rewriter.before_op(op).insert(new)
    return new.results[0]


SWAPPED = {"eq": "eq", "ne": "ne", "slt": "sgt", "sgt": "slt", "sle": "sge", "sge": "sle",
           "ult": "ugt", "ugt": "ult", "ule": "uge", "uge": "ule"}
NEGATED = {"eq": "ne", "ne": "eq", "slt": "sge", "sge": "slt", "sle": "sgt", "sgt": "sle",
           "ult": "uge", "uge": "ult", "ule": "ugt", "ugt": "ule"}


class CmpIConstantRight(RewritePattern):
    """``cmpi slt, c, x`` -> ``cmpi sgt, x, c``: the constant on the right, predicate mirrored."""

    op_name = "arith.cmpi"

    def match_and_rewrite(self, op, rewriter) -> bool:
        a, b = op.operands
        if constant_value(a) is None or constant_value(b) is not None:
            return False
        return replace_with_op(rewriter, op, type(op).build(SWAPPED[op.predicate], b, a))


class CmpIOfBool(RewritePattern):
    """On i1: ``cmpi eq, x, true`` and ``cmpi ne, x, false`` are ``x``."""

    op_name = "arith.cmpi"

    def match_and_rewrite(self, op, rewriter) -> bool:
        x, c = op.operands
        if getattr(elem_type(x), "width", 0) != 1 or isinstance(elem_type(x), IndexType):
            return False
        if (op.predicate == "eq" and is_int_value(c, 1)) or (op.predicate == "ne" and is_int_value(c, 0)):
            rewriter.replace_op(op, [x])
            return True
        return False


class CmpIOfExtensions(RewritePattern):
    """Compare before widening: ``cmpi p, ext(a), ext(b)`` -> ``cmpi p, a, b`` and ``cmpi p, ext(a), c``
    -> ``cmpi p, a, c'`` when ``c`` is the extension of a narrower ``c'`` (a constant when ``c`` lies
    beyond every extended value).  Equality holds for both
    extensions; sign extension keeps the signed order, zero extension the unsigned one."""

    op_name = "arith.cmpi"

    def match_and_rewrite(self, op, rewriter) -> bool:
        a, b = op.operands
        ext = defining(a, "arith.extsi", "arith.extui")
        pred = op.predicate
        if ext is None or (pred[0] == "s" and ext.name != "arith.extsi") or \
                (pred[0] == "u" and ext.name != "arith.extui"):
            return False
        src = ext.operands[0]
        other = defining(b, ext.name)
        if other is not None and other.operands[0].type is src.type:
            return replace_with_op(rewriter, op, type(op).build(pred, src, other.operands[0]))
        c = int_or_splat(b)
        if c is None:
            return False
        from irc.semantics import signed, unsigned

        wide, narrow = elem_type(b), elem_type(src)
        value = signed(wrap(c, wide), wide) if ext.name == "arith.extsi" else unsigned(wrap(c, wide), wide)
        lo, hi = (-(1 << (narrow.width - 1)), (1 << (narrow.width - 1)) - 1) \
            if ext.name == "arith.extsi" else (0, (1 << narrow.width) - 1)
        if narrow.width == 1 and ext.name == "arith.extsi":
            lo, hi = -1, 0
        if not lo <= value <= hi:  # every extended value lies on one side of c
            below = value > hi
            truth = {"eq": False, "ne": True}.get(pred, below == (pred[1:] in ("lt", "le")))
            rewriter.replace_op(op, [int_constant_like(rewriter, op, -1 if truth else 0, op.results[0])])
            return True
        return replace_with_op(rewriter, op, type(op).build(pred, src, int_constant_like(rewriter, op, value, src)))


class NotOfCmp(RewritePattern):
    """``xori (cmpi p, a, b), true`` -> ``cmpi !p, a, b`` (the comparison used nowhere else)."""

    op_name = "arith.xori"

    def match_and_rewrite(self, op, rewriter) -> bool:
        cmp, c = op.operands
        inner = defining(cmp, "arith.cmpi")
        if inner is None or not is_int_value(c, 1) or not cmp.has_one_use:
            return False
        return replace_with_op(rewriter, op, type(inner).build(NEGATED[inner.predicate], *inner.operands))


class SelectRules(RewritePattern):
    """``select (not c), a, b`` -> ``select c, b, a``; ``select (a == b), a, b`` -> ``b`` (and ``!=``:
    ``a``); ``select c, (select c, a, b), d`` -> ``select c, a, d`` (and in the false arm);
    ``select c, 1, 0`` -> ``extui c``, ``select c, 0, 1`` -> ``extui (not c)`` and on i1
    ``select c, false, true`` -> ``not c``."""

    op_name = "arith.select"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.arith import ExtUIOp

        c, a, b = op.operands
        not_c = defining(c, "arith.xori")
        if not_c is not None and is_int_value(not_c.operands[1], 1):
            op.set_operands([not_c.operands[0], b, a])
            rewriter.modified(op)
            return True
        cmp = defining(c, "arith.cmpi")
        if cmp is not None and cmp.predicate in ("eq", "ne") and {*cmp.operands} == {a, b} and a is not b:
            rewriter.replace_op(op, [b if cmp.predicate == "eq" else a])
            return True
        for k, arm in ((1, a), (2, b)):
            inner = defining(arm, "arith.select")
            if inner is not None and inner.operands[0] is c:
                op.set_operand(k, inner.operands[k])
                rewriter.modified(op)
                return True
        if not elem_type(a).is_int_or_index or isinstance(elem_type(a), IndexType):
            return False
        if c.type.is_shaped != a.type.is_shaped:
            return False
        one_zero = is_int_value(a, 1) and is_int_value(b, 0)
        zero_one = is_int_value(a, 0) and is_int_value(b, 1)
        if not (one_zero or zero_one):
            return False
        cond = c
        if zero_one:
            cond = insert(rewriter, op, binary("arith.xori", c, int_constant_like(rewriter, op, 1, c)))
        if elem_type(a).width == 1:
            if cond is c:
                return False  # select c, true, false: SelectOfBooleans
            rewriter.replace_op(op, [cond])
            return True
        return replace_with_op(rewriter, op, ExtUIOp.build(cond, elem_type(a)))


class BitwiseIdentities(RewritePattern):
    """``x & ~x`` -> 0, ``x | ~x`` -> -1 (``~x`` is ``x ^ -1``); ``(a ^ b) ^ b`` -> ``a`` in every
    operand order; ``a & (a & b)`` -> ``a & b`` and ``a | (a | b)`` -> ``a | b``."""

    op_name = None
    NAMES = ("arith.andi", "arith.ori", "arith.xori")

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name not in self.NAMES:
            return False
        a, b = op.operands
        for x, y in ((a, b), (b, a)):
            inner = defining(y, op.name)
            if op.name != "arith.xori" and (not_x := defining(y, "arith.xori")) is not None:
                p, q = not_x.operands
                if (p is x and is_int_value(q, -1)) or (q is x and is_int_value(p, -1)):
                    value = 0 if op.name == "arith.andi" else -1
                    rewriter.replace_op(op, [int_constant_like(rewriter, op, value, x)])
                    return True
            if inner is None or x not in inner.operands:
                continue
            p, q = inner.operands
            if op.name == "arith.xori":
                rewriter.replace_op(op, [q if p is x else p])
            else:
                rewriter.replace_op(op, [y])
            return True
        return False


class BitwiseOfExtensions(RewritePattern):
    """``op(ext a, ext b)`` -> ``ext(op(a, b))`` for and, or, xor: bitwise ops commute with both
    extensions (the extensions used nowhere else, so the count of ops goes down)."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name not in BitwiseIdentities.NAMES:
            return False
        a, b = op.operands
        ea = defining(a, "arith.extsi", "arith.extui")
        eb = defining(b, "arith.extsi", "arith.extui")
        if ea is None or eb is None or ea.name != eb.name or ea.operands[0].type is not eb.operands[0].type:
            return False
        if not a.has_one_use or not b.has_one_use:
            return False
        narrow = insert(rewriter, op, binary(op.name, ea.operands[0], eb.operands[0]))
        return replace_with_op(rewriter, op, type(ea).build(narrow, elem_type(a)))


class AddSubRules(RewritePattern):
    """``(a - b) + b`` -> ``a``; ``a + x * -1`` -> ``a - x``; with constants c1, c2:
    ``(c1 - x) + c2`` -> ``(c1 + c2) - x``, ``c2 - (x + c1)`` -> ``(c2 - c1) - x``,
    ``c2 - (c1 - x)`` -> ``x + (c2 - c1)``.  All exact in wrapping arithmetic."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name == "arith.addi":
            return self.add(op, rewriter)
        if op.name == "arith.subi":
            return self.sub(op, rewriter)
        return False

    def add(self, op, rewriter) -> bool:
        a, b = op.operands
        da, db = a.defining_op, b.defining_op
        name_a, name_b = da.name if da is not None else None, db.name if db is not None else None
        if name_a not in ("arith.subi", "arith.muli") and name_b not in ("arith.subi", "arith.muli"):
            return False
        for x, y, dx, dy in ((a, b, da, db), (b, a, db, da)):
            if dx is not None and dx.name == "arith.subi" and dx.operands[1] is y:
                rewriter.replace_op(op, [dx.operands[0]])
                return True
            if dy is not None and dy.name == "arith.muli" and is_int_value(dy.operands[1], -1):
                return replace_with_op(rewriter, op, binary("arith.subi", x, dy.operands[0]))
        sub = da if name_a == "arith.subi" else None
        c2 = int_or_splat(b) if sub is not None else None
        if c2 is not None and a.has_one_use and (c1 := int_or_splat(sub.operands[0])) is not None:
            k = int_constant_like(rewriter, op, c1 + c2, a)
            return replace_with_op(rewriter, op, binary("arith.subi", k, sub.operands[1]))
        return False

    def sub(self, op, rewriter) -> bool:
        a, b = op.operands
        c2 = int_or_splat(a)
        if c2 is None or not b.has_one_use:
            return False
        add = defining(b, "arith.addi")
        if add is not None and (c1 := int_or_splat(add.operands[1])) is not None:
            k = int_constant_like(rewriter, op, c2 - c1, b)
            return replace_with_op(rewriter, op, binary("arith.subi", k, add.operands[0]))
        sub = defining(b, "arith.subi")
        if sub is not None and (c1 := int_or_splat(sub.operands[0])) is not None:
            k = int_constant_like(rewriter, op, c2 - c1, b)
            return replace_with_op(rewriter, op, binary("arith.addi", sub.operands[1], k))
        return False


class SignedMinMaxBounds(RewritePattern):
    """``maxsi x, MAX`` -> MAX, ``maxsi x, MIN`` -> x, ``minsi x, MIN`` -> MIN, ``minsi x, MAX`` -> x."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name not in ("arith.minsi", "arith.maxsi"):
            return False
        x, c = op.operands
        t = elem_type(x)
        if not isinstance(t, IntegerType) or int_or_splat(c) is None:
            return False
        from irc.semantics import signed

        v = signed(wrap(int_or_splat(c), t), t)
        lo, hi = -(1 << (t.width - 1)), (1 << (t.width - 1)) - 1
        if v not in (lo, hi):
            return False
        keeps_x = (op.name == "arith.maxsi") == (v == lo)
        rewriter.replace_op(op, [x if keeps_x else c])
        return True


class RemainderByOne(RewritePattern):
    """``remui x, 1`` and ``remsi x, 1`` are 0."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        if op.name not in ("arith.remui", "arith.remsi") or not is_int_value(op.operands[1], 1):
            return False
        if getattr(elem_type(op.operands[1]), "width", 64) == 1:
            return False  # i1's 1 is -1 for remsi; leave it
        rewriter.replace_op(op, [int_constant_like(rewriter, op, 0, op.operands[0])])
        return True


class CastChains(RewritePattern):
    """Casts of casts that ``CastOfCast`` leaves, on scalars and tensors: ``extsi(extui x)`` ->
    ``extui x`` (its top bit is 0); ``index_cast(extsi x)`` -> ``index_cast x`` and
    ``index_castui(extui x)`` -> ``index_castui x`` (to index); ``trunci(ext x)`` -> ``ext x`` or
    ``trunci x`` by the widths; ``truncf(extf x)`` -> ``truncf x`` when narrower than x (extf is
    exact); ``truncf(sitofp x)`` -> ``sitofp x`` when the wide float holds every value of x
    exactly (one rounding instead of two, the same result); ``bitcast(bitcast x)`` -> one
    bitcast (or x)."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.types import FloatType

        if op.name == "arith.bitcast" and op.operands[0].type is op.results[0].type:
            rewriter.replace_op(op, [op.operands[0]])
            return True
        inner = op.operands[0].defining_op if op.operands else None
        if inner is None or not inner.operands or op.name not in (
                "arith.extsi", "arith.index_cast", "arith.index_castui", "arith.trunci", "arith.truncf",
                "arith.bitcast"):
            return False
        x = inner.operands[0]
        src, out = elem_type(x), elem_type(op.results[0])
        name, iname = op.name, inner.name
        if name == "arith.extsi" and iname == "arith.extui":
            return replace_with_op(rewriter, op, type(inner).build(x, out))
        if (name, iname) in (("arith.index_cast", "arith.extsi"), ("arith.index_castui", "arith.extui")) \
                and isinstance(out, IndexType):
            return replace_with_op(rewriter, op, type(op).build(x, out))
        if name == "arith.trunci" and iname in ("arith.extsi", "arith.extui") and isinstance(src, IntegerType):
            if src is out:
                rewriter.replace_op(op, [x])
                return True
            return replace_with_op(rewriter, op, (type(inner) if src.width < out.width else type(op)).build(x, out))
        if name == "arith.truncf" and iname == "arith.extf" and isinstance(src, FloatType) \
                and src.width > out.width:
            return replace_with_op(rewriter, op, type(op).build(x, out))
        if name == "arith.truncf" and iname in ("arith.sitofp", "arith.uitofp") and isinstance(src, IntegerType):
            mantissa = {"f64": 53, "f32": 24, "f16": 11, "bf16": 8}.get(elem_type(inner.results[0]).kind, 0)
            if src.width <= mantissa:
                return replace_with_op(rewriter, op, type(inner).build(x, out))
            return False
        if name == "arith.bitcast" and iname == "arith.bitcast":
            if x.type is op.results[0].type:
                rewriter.replace_op(op, [x])
                return True
            return replace_with_op(rewriter, op, type(op).build(x, out))
        return False


class FloatSignRules(RewritePattern):
    """Exact float rules: ``(-x) * (-y)`` -> ``x * y`` and ``(-x) / (-y)`` -> ``x / y``;
    ``minimumf x, +inf`` and ``maximumf x, -inf`` -> x; ``minnumf x, NaN`` and ``maxnumf x, NaN``
    -> x; ``cmpf`` against a NaN constant: false for ordered predicates, true for unordered."""

    op_name = None
    NEUTRAL = {"arith.minimumf": lambda v: v == float("inf"), "arith.maximumf": lambda v: v == float("-inf"),
               "arith.minnumf": lambda v: v != v, "arith.maxnumf": lambda v: v != v}

    def match_and_rewrite(self, op, rewriter) -> bool:
        name = op.name
        if name in ("arith.mulf", "arith.divf"):
            na, nb = (defining(v, "arith.negf") for v in op.operands)
            if na is None or nb is None:
                return False
            return replace_with_op(rewriter, op, type(op)([na.operands[0], nb.operands[0]], [op.results[0].type],
                                                          dict(op.attributes)))
        if name in self.NEUTRAL:
            c = float_const(op.operands[1])
            if c is not None and self.NEUTRAL[name](c):
                rewriter.replace_op(op, [op.operands[0]])
                return True
            return False
        if name == "arith.cmpf" and op.predicate not in ("true", "false"):
            if not any((v := float_const(x)) is not None and v != v for x in op.operands):
                return False
            truth = op.predicate[0] == "u"
            rewriter.replace_op(op, [int_constant_like(rewriter, op, -1 if truth else 0, op.results[0])])
            return True
        return False


class CmpFOfIntToFloat(RewritePattern):
    """``cmpf p, (uitofp x), c`` -> ``cmpi`` on x (``sitofp``: signed), when the float type holds
    every value of x exactly and c is not NaN: the converted value is an integer and never NaN,
    so ordered and unordered predicates agree, and ``x < c`` is ``x < ceil(c)``, ``x <= c`` is
    ``x <= floor(c)``; a c outside x's range gives a constant."""

    op_name = "arith.cmpf"
    MANTISSA = {"f64": 53, "f32": 24, "f16": 11, "bf16": 8}

    def match_and_rewrite(self, op, rewriter) -> bool:
        import math

        from irc.dialects.arith import CmpIOp

        conv = defining(op.operands[0], "arith.uitofp", "arith.sitofp")
        c = float_const(op.operands[1])
        pred = op.predicate[1:] if op.predicate not in ("true", "false", "ord", "uno") else None
        if conv is None or c is None or c != c or pred is None or op.operands[0].type.is_shaped:
            return False
        x = conv.operands[0]
        t = x.type
        if not isinstance(t, IntegerType) or t.width > self.MANTISSA.get(op.operands[0].type.kind, 0):
            return False
        sign = conv.name == "arith.sitofp"
        lo, hi = (-(1 << (t.width - 1)), (1 << (t.width - 1)) - 1) if sign else (0, (1 << t.width) - 1)
        if t.width == 1 and sign:
            lo, hi = -1, 0
        if pred in ("eq", "ne"):
            if math.isinf(c) or c != math.floor(c) or not lo <= c <= hi:
                return self.constant(op, rewriter, pred == "ne")
            k, p = int(c), pred
        elif pred in ("lt", "ge"):  # x < c  <=>  x < ceil(c)
            if math.isinf(c) or not lo < math.ceil(c) <= hi:
                return self.constant(op, rewriter, (c > hi) == (pred == "lt"))
            k, p = math.ceil(c), pred
        else:  # le, gt: x <= c  <=>  x <= floor(c)
            if math.isinf(c) or not lo <= math.floor(c) < hi:
                return self.constant(op, rewriter, (c >= hi) == (pred == "le"))
            k, p = math.floor(c), pred
        if p not in ("eq", "ne"):
            p = ("s" if sign else "u") + p
        return replace_with_op(rewriter, op, CmpIOp.build(p, x, make_constant(rewriter, op, k, t)))

    @staticmethod
    def constant(op, rewriter, truth: bool) -> bool:
        rewriter.replace_op(op, [int_constant_like(rewriter, op, -1 if truth else 0, op.results[0])])
        return True


class DivOfFlaggedMul(RewritePattern):
    """``divui (muli a, b overflow<nuw>), a`` -> b (and ``, b`` -> a); ``divsi`` likewise with
    ``nsw``.  The flag makes the product exact (arith.OverflowFlags: an overflow is an error),
    so dividing it by a factor gives the other factor back; a zero divisor was an error that
    the fold removes, as folding may (it never adds one)."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.arith import overflow_flags

        mul = defining(op.operands[0], "arith.muli")
        flag = "nuw" if op.name == "arith.divui" else "nsw"
        if mul is None or flag not in overflow_flags(mul) or getattr(elem_type(op.operands[1]), "width", 64) == 1:
            return False
        a, b = mul.operands
        divisor = op.operands[1]
        if divisor is not a and divisor is not b:
            return False
        rewriter.replace_op(op, [b if divisor is a else a])
        return True


def _contracts(op) -> bool:
    """Whether the op's ``fastmath`` flags allow contraction (``contract``, or ``fast``)."""
    text = getattr(op.attributes.get("fastmath"), "text", "")
    return "<" in text and bool({"contract", "fast"} & {w.strip() for w in text[text.index("<") + 1:-1].split(",")})


class ExtfOfTruncfContract(RewritePattern):
    """``extf (truncf x fastmath<contract>) fastmath<contract>`` back to x's type is x: with
    both flags the program allows the narrowing round trip to be skipped (MLIR's rule; the
    result is then x itself, more precise than the round trip)."""

    op_name = "arith.extf"

    def match_and_rewrite(self, op, rewriter) -> bool:
        trunc = defining(op.operands[0], "arith.truncf")
        if trunc is None or not (_contracts(op) and _contracts(trunc)) or "roundingmode" in trunc.attributes:
            return False
        x = trunc.operands[0]
        if x.type is not op.results[0].type:
            return False
        rewriter.replace_op(op, [x])
        return True


CAST_CHAIN_NAMES = ["arith.extsi", "arith.index_cast", "arith.index_castui", "arith.trunci", "arith.truncf",
                    "arith.bitcast"]
MLIR_ARITH_PATTERNS = [CmpFOfIntToFloat(), CmpIConstantRight(), CmpIOfBool(), CmpIOfExtensions(), NotOfCmp(),
                       SelectRules(), *per_name(BitwiseIdentities, BitwiseIdentities.NAMES),
                       *per_name(BitwiseOfExtensions, BitwiseIdentities.NAMES),
                       *per_name(AddSubRules, ["arith.addi", "arith.subi"]),
                       *per_name(SignedMinMaxBounds, ["arith.minsi", "arith.maxsi"]),
                       *per_name(RemainderByOne, ["arith.remui", "arith.remsi"]),
                       *per_name(CastChains, CAST_CHAIN_NAMES),
                       *per_name(DivOfFlaggedMul, ["arith.divui", "arith.divsi"]), ExtfOfTruncfContract(),
                       *per_name(FloatSignRules, ["arith.mulf", "arith.divf", *FloatSignRules.NEUTRAL, "arith.cmpf"])]
EXACT_PATTERNS += MLIR_ARITH_PATTERNS
