"""Algebraic rewrites of the tensor graph, used by ``canonicalize`` (registers no pass).

The ops of dialects/graph.py list these patterns in ``canonicalization_patterns``
(a local import, so the dialect does not depend on passes/ when it loads); each is
keyed by the name of a tensor op (the op it rewrites or, for an elementwise op, the
broadcast or splat feeding it), so a program without tensors pays nothing for them.  The identities that only forward a value (a transpose by the identity, a
broadcast to the operand's own type...) are the ops' folds, not patterns.

* **Splats pass through data movement**: a transpose, a broadcast, a slice or a
  reshape of a splat (``graph.splat``, or a splat ``dense`` constant too large or
  too dynamic to fold) is a splat of the result type.
* **A broadcast of a broadcast** is one broadcast.
* **A reduction that only combines copies of one value** (of a splat, along the
  axes a broadcast added, or along static size-1 axes) needs no loop: max and min
  are the value itself; an integer sum is ``N * x`` (wrapping, as the sum does); a
  float sum is ``N * x + 0.0`` and a mean ``x + 0.0`` only where that is bit for
  bit what the interpreter computes (see ``exact_float_count``); a product only of
  one copy.
* **An elementwise op of broadcasts** of one shape (or of splats of one shape) is a
  broadcast (a splat) of the op on the smaller operands: less work, same values.
* **A slice of a concat** that stays inside one operand is a slice of that operand;
  a concat drops its (static) empty operands.

Every rule keeps the run-time checks of the program it replaces: it applies only
where the ops it removes could not have failed (a broadcast whose operand dimensions
are 1, static, or sized by the value the result dimension takes; a reshape or slice
of static shapes; a concat of static operands), and an op that can fault (integer
division, shifts, float-to-int casts) is not moved onto a smaller operand when the
tensor it ran on could be empty.
"""

from __future__ import annotations

import math

import numpy as np

from irc.attributes import DenseAttr, FloatAttr, IntegerAttr
from irc.operation import Elementwise
from irc.patterns import RewritePattern, constant_value
from irc.semantics import round_to, value_to_attr
from irc.types import FloatType, TensorType, index

# ---- helpers shared with passes/stabilize.py ------------------------------------------------------


def splat_source(value):
    """The scalar every element of tensor ``value`` equals, when that is known: the operand
    of a ``graph.splat`` (a Value) or the element of a splat ``dense`` constant (an
    Attribute); None otherwise."""
    from irc.dialects.graph import SplatOp

    op = value.defining_op
    if isinstance(op, SplatOp):
        return op.operands[0]
    attr = constant_value(value)
    if isinstance(attr, DenseAttr) and attr.is_splat:
        return value_to_attr(attr.array.flat[0], attr.type.element_type)
    return None


def splat_number(value) -> float | int | None:
    """The number every element of ``value`` (a scalar or a tensor) is known to equal:
    a scalar constant, a splat ``dense`` constant, or a ``graph.splat`` of a constant."""
    attr = constant_value(value)
    if isinstance(attr, (FloatAttr, IntegerAttr)):
        return attr.value
    if isinstance(value.type, TensorType):
        scalar = splat_source(value)
        if scalar is not None and not isinstance(scalar, (FloatAttr, IntegerAttr)):
            scalar = constant_value(scalar)
        if isinstance(scalar, (FloatAttr, IntegerAttr)):
            return scalar.value
    return None


def insert(rewriter, anchor, op):
    """Insert ``op`` before ``anchor``, at its location; return its (single) result."""
    op.loc = anchor.loc
    rewriter.before_op(anchor).insert(op)
    return op.results[0]


def scalar_value(rewriter, anchor, scalar):
    """A Value for ``scalar`` (a Value already, or an attribute to materialise)."""
    from irc.dialects.arith import ConstantOp

    if isinstance(scalar, (FloatAttr, IntegerAttr)):
        return insert(rewriter, anchor, ConstantOp.build(scalar))
    return scalar


def dynamic_sizes(rewriter, anchor, value, dims) -> list:
    """An ``index`` value for each dimension in ``dims`` (each a ``?`` of ``value``'s type),
    for an op inserted before ``anchor``: the size operand that made the dimension when
    ``value`` comes from a splat, broadcast, reshape or iota, else a ``tensor.dim``."""
    from irc.dialects.arith import ConstantOp
    from irc.dialects.tensor import DimOp

    out = []
    for d in dims:
        size = _size_operand(value, d)
        if size is None:
            k = insert(rewriter, anchor, ConstantOp.build(IntegerAttr(d, index)))
            size = insert(rewriter, anchor, DimOp.build(value, k))
        out.append(size)
    return out


def constant_like(rewriter, anchor, like, number):
    """A value of ``like``'s type whose every element is ``number``: a scalar constant, a
    splat ``dense`` constant, or (for a dynamic shape) a ``graph.splat`` sized like ``like``."""
    from irc.dialects.arith import ConstantOp
    from irc.dialects.graph import SplatOp

    t = like.type
    attr = value_to_attr(number, t.element_type)
    if not isinstance(t, TensorType):
        return insert(rewriter, anchor, ConstantOp.build(attr))
    if t.has_static_shape:
        return insert(rewriter, anchor, ConstantOp.build(DenseAttr(np.asarray(attr.value), t)))
    scalar = insert(rewriter, anchor, ConstantOp.build(attr))
    sizes = dynamic_sizes(rewriter, anchor, like, [i for i, d in enumerate(t.shape) if d is None])
    return insert(rewriter, anchor, SplatOp.build(scalar, t, sizes))


def _size_operand(value, dim: int):
    """The index value that made dimension ``dim`` (a ``?``) of ``value``, when its producer
    takes one per dynamic dimension (splat, broadcast, reshape, iota); else None."""
    from irc.dialects.graph import BroadcastOp, IotaOp, ReshapeOp, SplatOp

    producer = value.defining_op
    if isinstance(producer, (SplatOp, BroadcastOp, ReshapeOp)):
        sized = producer.operands[1:]
    elif isinstance(producer, IotaOp):
        sized = producer.operands
    else:
        return None
    return sized[sum(1 for x in value.type.shape[:dim] if x is None)]


def is_size_of(size, value, dim: int) -> bool:
    """Whether index value ``size`` is known to equal dimension ``dim`` (a ``?``) of ``value``:
    it made that dimension, or it is ``tensor.dim`` of it."""
    from irc.dialects.tensor import DimOp

    if size is _size_operand(value, dim):
        return True
    op = size.defining_op
    if not isinstance(op, DimOp) or op.operands[0] is not value:
        return False
    k = constant_value(op.operands[1])
    return isinstance(k, IntegerAttr) and k.value == dim


def broadcast_is_checked(op) -> bool:
    """Whether broadcast ``op`` cannot fail at run time: each operand dimension is a static 1,
    meets a static result dimension (so the verifier found them equal), or is a ``?`` whose
    size is known to be the one the result dimension takes."""
    source = op.operands[0]
    src, dst = source.type, op.results[0].type
    offset = dst.rank - src.rank
    for j, s in enumerate(src.shape):
        r = dst.shape[offset + j]
        if s == 1 or (s is not None and r is not None):
            continue
        if s is None and r is None:
            size = op.operands[1 + sum(1 for x in dst.shape[:offset + j] if x is None)]
            if is_size_of(size, source, j):
                continue
        return False
    return True


# Elementwise ops that never fault, whatever their operands: float arithmetic and math (a
# float op gives inf or NaN instead) and these integer ops.  Division, remainder, shifts
# and float-to-int casts can fault, so they are not moved onto a broadcast's operand when
# the broadcast tensor they ran on could be empty.
_TOTAL_INT_OPS = frozenset({
    "arith.addi", "arith.subi", "arith.muli", "arith.andi", "arith.ori", "arith.xori", "arith.maxsi",
    "arith.minsi", "arith.maxui", "arith.minui", "arith.cmpi", "arith.cmpf", "arith.select", "arith.extsi",
    "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui", "arith.sitofp", "arith.uitofp",
    "arith.bitcast", "math.absi",
})


def cannot_fault(op) -> bool:
    if op.name in _TOTAL_INT_OPS:
        return True
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    return all(isinstance(t.element_type, FloatType) for t in types)


# ---- splats through data movement ------------------------------------------------------------------


class SplatThroughShapeOp(RewritePattern):
    """``transpose/broadcast/slice/reshape(splat x)`` -> ``splat x`` of the result type.

    A broadcast must be one that cannot fail (``broadcast_is_checked``), a slice and a
    reshape must have static shapes on both sides, so that no run-time check
    disappears; a transpose checks nothing."""

    def __init__(self, op_name: str):
        self.op_name = op_name

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.graph import SplatOp

        source = op.operands[0]
        scalar = splat_source(source)
        if scalar is None:
            return False
        src_t, dst_t = source.type, op.results[0].type
        name = op.name
        if name == "graph.transpose":
            perm = [e.value for e in op.attributes["perm"].elements]
            sizes = dynamic_sizes(rewriter, op, source, [perm[i] for i, d in enumerate(dst_t.shape) if d is None])
        elif name == "graph.broadcast":
            if not broadcast_is_checked(op):
                return False
            sizes = list(op.operands[1:])
        elif name == "graph.reshape" or name == "graph.slice":
            if not (src_t.has_static_shape and dst_t.has_static_shape):
                return False
            sizes = []
        else:
            return False
        splat = SplatOp.build(scalar_value(rewriter, op, scalar), dst_t, sizes)
        rewriter.replace_op(op, [insert(rewriter, op, splat)])
        return True


class BroadcastOfBroadcast(RewritePattern):
    """``broadcast(broadcast(x, T1), T2)`` -> ``broadcast(x, T2)`` when neither can fail at run
    time (numpy's rules compose: each dimension of x is 1 or kept throughout)."""

    op_name = "graph.broadcast"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.graph import BroadcastOp

        inner = op.operands[0].defining_op
        if not isinstance(inner, BroadcastOp):
            return False
        if not (broadcast_is_checked(inner) and broadcast_is_checked(op)):
            return False
        rewriter.set_operand(op, 0, inner.operands[0])
        return True


# ---- reductions of splats and broadcasts ------------------------------------------------------------

# Significand bits of each float type (the implicit bit included).
_PRECISION = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}


def exact_float_count(kind: str, elem: FloatType, n: int) -> bool:
    """Whether a float ``sum`` (``mean``) of ``n`` copies of any x, as the interpreter computes
    it (in f64 from +0.0, rounded once to ``elem``), is bit for bit ``x * n + 0.0``
    (``x + 0.0``) computed in ``elem``.

    Every partial sum k*x (k <= n) is exact in f64 when n * 2^p <= 2^53 (p: the significand
    bits of ``elem``), and then so is the final rounding; bf16 is rounded through f32, so
    there n*x must also be exact in f32 (n <= 2^16).  ``x * n`` rounds once too, if n itself
    is exact in ``elem``.  An f64 sum of more than two copies rounds along the way, and an
    f64 mean of two may overflow (2x = inf), so f64 allows n <= 2 (sum) and n == 1 (mean).
    The ``+ 0.0`` turns -0.0 into +0.0, as the sum does (it starts from +0.0)."""
    if n < 1:
        return False
    if elem.kind == "f64":
        return n <= (2 if kind == "sum" else 1)
    p = _PRECISION.get(elem.kind)
    if p is None:
        return False
    limit = 2 ** 16 if elem.kind == "bf16" else 2 ** (53 - p)
    if n > limit:
        return False
    return kind == "mean" or float(round_to(np.float64(n), elem)) == n


def reduced_scalar(rewriter, anchor, name: str, x, n: int):
    """The value of reduction ``name`` over ``n`` copies of ``x`` (a scalar or a tensor Value),
    built before ``anchor``; ``can_reduce`` must have said yes."""
    from irc.dialects.arith import AddFOp, MulFOp, MulIOp

    elem = x.type.element_type
    if name in ("graph.reduce_max", "graph.reduce_min", "graph.reduce_prod"):
        return x  # a product only of one copy (n == 1), which the f64 product keeps exactly
    if not isinstance(elem, FloatType):
        return insert(rewriter, anchor, MulIOp.build(x, constant_like(rewriter, anchor, x, n))) if n != 1 else x
    if name == "graph.reduce_sum" and n != 1:
        x = insert(rewriter, anchor, MulFOp.build(x, constant_like(rewriter, anchor, x, float(n))))
    return insert(rewriter, anchor, AddFOp.build(x, constant_like(rewriter, anchor, x, 0.0)))


def can_reduce(name: str, elem, n: int) -> bool:
    """Whether reduction ``name`` of ``n`` copies of a value has an exact closed form."""
    if n < 1:
        return False  # the reduction of an empty axis is its identity, not the value
    if name in ("graph.reduce_max", "graph.reduce_min"):
        return True
    if name == "graph.reduce_prod":
        return n == 1  # a power otherwise
    if not isinstance(elem, FloatType):
        return name == "graph.reduce_sum"
    return exact_float_count("sum" if name == "graph.reduce_sum" else "mean", elem, n)


class ReduceOfExpansion(RewritePattern):
    """A reduction that only combines copies of one value, computed on that value: a reduction
    of a splat, of a broadcast along axes the broadcast added (new leading dimensions and
    stretched size-1 ones), or of any tensor along static size-1 axes.  max/min (and prod of
    one copy) -> the value; integer sum -> ``N * x``; float sum and mean where exact (see
    ``exact_float_count``).  Every reduced dimension must be static and N at least 1."""

    def __init__(self, op_name: str):
        self.op_name = op_name

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.graph import BroadcastOp, SplatOp

        source = op.operands[0]
        src_t, result_t = source.type, op.results[0].type
        axes = [e.value for e in op.attributes["axes"].elements]
        if not axes:
            return False
        keep = "keepdims" in op.attributes
        scalar = splat_source(source)
        producer = source.defining_op
        small, offset = source, 0  # the value whose copies are reduced, and its alignment
        if scalar is None and isinstance(producer, BroadcastOp):
            small = producer.operands[0]
            offset = src_t.rank - small.type.rank
        if scalar is None and any(i >= offset and small.type.shape[i - offset] != 1 for i in axes):
            return False
        counts = [src_t.shape[i] for i in axes]
        if None in counts or not can_reduce(op.name, result_t.element_type, math.prod(counts)):
            return False
        n = math.prod(counts)
        kept = [i for i in range(src_t.rank) if keep or i not in axes]  # source dim of each result dim
        if scalar is not None:
            value = reduced_scalar(rewriter, op, op.name, scalar_value(rewriter, op, scalar), n)
            sizes = dynamic_sizes(rewriter, op, source, [kept[j] for j, d in enumerate(result_t.shape) if d is None])
            rewriter.replace_op(op, [insert(rewriter, op, SplatOp.build(value, result_t, sizes))])
            return True
        value = reduced_scalar(rewriter, op, op.name, small, n)
        rewriter.replace_op(op, [self._reshape_and_broadcast(rewriter, op, value, small, source, axes, keep,
                                                             offset, kept)])
        return True

    @staticmethod
    def _reshape_and_broadcast(rewriter, op, value, small, source, axes, keep, offset, kept):
        """``value`` (shaped like ``small``) as the result: drop the reduced size-1 dimensions
        (without keepdims), then broadcast to the result type if it is still smaller."""
        from irc.dialects.graph import BroadcastOp, ReshapeOp

        result_t = op.results[0].type
        small_t = small.type
        kept_small = [j for j in range(small_t.rank) if keep or j + offset not in axes]
        if len(kept_small) != small_t.rank:
            shape = [small_t.shape[j] for j in kept_small]
            sizes = dynamic_sizes(rewriter, op, small, [j for j in kept_small if small_t.shape[j] is None])
            value = insert(rewriter, op, ReshapeOp.build(value, TensorType(shape, value.type.element_type), sizes))
        if value.type is result_t:
            return value
        sizes = dynamic_sizes(rewriter, op, source, [kept[j] for j, d in enumerate(result_t.shape) if d is None])
        return insert(rewriter, op, BroadcastOp.build(value, result_t, sizes))


# ---- elementwise ops of broadcasts and splats ----------------------------------------------------------


class ElementwiseOfExpansions(RewritePattern):
    """``op(broadcast(a, T), broadcast(b, T))`` -> ``broadcast(op(a, b), T)`` where a and b
    have one static shape and the broadcasts the same size operands; likewise
    ``op(splat(x), splat(y))`` -> ``splat(op(x, y))`` on scalars.  Splat operands of either
    kind (constants included) are rebuilt at the smaller shape.  At least one operand must
    be a broadcast or splat of a non-constant (all-constant ops fold instead).

    The pattern is keyed by the broadcast (or splat) and rewrites an elementwise user of
    it, so that scalar arithmetic, by far the most common, never pays for it."""

    def __init__(self, op_name: str):
        self.op_name = op_name

    def match_and_rewrite(self, op, rewriter) -> bool:
        for use in op.results[0].uses:
            user = use.owner
            if user.has_trait(Elementwise) and user.name.startswith(("arith.", "math.")) \
                    and self.rewrite_user(user, rewriter):
                return True
        return False

    def rewrite_user(self, op, rewriter) -> bool:
        from irc.dialects.graph import BroadcastOp, SplatOp

        result_t = op.results[0].type
        if type(result_t) is not TensorType or len(op.results) != 1 or op.regions:
            return False
        small_shape = None  # the broadcasts' operand shape; None while only splats were seen
        sizes = None
        parts = []  # per operand: ("keep" | "small" | "scalar", value or attribute)
        for v in op.operands:
            if type(v.type) is not TensorType:  # arith.select's scalar condition
                parts.append(("keep", v))
                continue
            producer = v.defining_op
            if isinstance(producer, BroadcastOp):
                shape = producer.operands[0].type.shape
                if None in shape or (small_shape is not None and shape != small_shape):
                    return False
                small_shape = shape
                part = ("small", producer.operands[0])
                operand_sizes = tuple(producer.operands[1:])
            elif isinstance(producer, SplatOp):
                part = ("scalar", producer.operands[0])
                operand_sizes = tuple(producer.operands[1:])
            else:
                scalar = splat_source(v)
                if scalar is None:
                    return False
                parts.append(("scalar", scalar))
                continue
            if sizes is not None and operand_sizes != sizes:
                return False
            sizes = operand_sizes
            parts.append(part)
        if sizes is None:
            return False  # only constants: folding's business
        dynamic = sum(d is None for d in result_t.shape)
        if dynamic == 0:
            sizes = ()  # specialize-shapes made the result static; the expansions' sizes are moot
        elif len(sizes) != dynamic:
            return False
        if not ((result_t.has_static_shape and result_t.num_elements) or cannot_fault(op)):
            return False
        new_operands = []
        for kind, v in parts:
            if kind == "scalar" and small_shape is not None:
                small_t = TensorType(small_shape, v.type)
                if isinstance(v, (FloatAttr, IntegerAttr)):
                    v = insert(rewriter, op, _dense_constant(v, small_t))
                else:
                    v = insert(rewriter, op, SplatOp.build(v, small_t))
            elif kind == "scalar":
                v = scalar_value(rewriter, op, v)
            new_operands.append(v)
        elem = result_t.element_type
        small_result = TensorType(small_shape, elem) if small_shape is not None else elem
        small_op = insert(rewriter, op, type(op)(new_operands, [small_result], dict(op.attributes)))
        expand = (BroadcastOp.build(small_op, result_t, list(sizes)) if small_shape is not None
                  else SplatOp.build(small_op, result_t, list(sizes)))
        rewriter.replace_op(op, [insert(rewriter, op, expand)])
        return True


def _dense_constant(scalar_attr, t: TensorType):
    from irc.dialects.arith import ConstantOp

    return ConstantOp.build(DenseAttr(np.asarray(scalar_attr.value), t))


# ---- concats ------------------------------------------------------------------------------------------------


class ConcatDropEmpty(RewritePattern):
    """``concat(a, empty, b)`` -> ``concat(a, b)`` for operands of static size 0 along the
    axis (a concat of one operand then folds to it).  All operands must have static
    shapes, so that the concat had no run-time check to lose."""

    op_name = "graph.concat"

    def match_and_rewrite(self, op, rewriter) -> bool:
        if not all(v.type.has_static_shape for v in op.operands):
            return False
        axis = op.attributes["axis"].value
        kept = [v for v in op.operands if v.type.shape[axis] != 0]
        if len(kept) == len(op.operands) or not kept:
            return False
        op.set_operands(kept)
        rewriter.modified(op)
        return True


# ---- slices of concats ------------------------------------------------------------------------------------


class SliceOfConcat(RewritePattern):
    """``slice(concat(a, b, c))`` that stays inside one operand -> a slice of that operand
    (which folds away when it is the whole operand).  The operands must have static
    shapes, so that the concat had no run-time check to lose."""

    op_name = "graph.slice"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.graph import ConcatOp, SliceOp

        concat = op.operands[0].defining_op
        if not isinstance(concat, ConcatOp) or not all(v.type.has_static_shape for v in concat.operands):
            return False
        axis = concat.attributes["axis"].value
        offsets, sizes, strides = SliceOp.window(op.attributes, op.operands[0].type.rank)
        first, count, step = offsets[axis], sizes[axis], strides[axis]
        if count == 0:
            return False
        last = first + (count - 1) * step
        start = 0
        for v in concat.operands:
            end = start + v.type.shape[axis]
            if start <= first and last < end:
                shifted = list(offsets)
                shifted[axis] = first - start
                piece = SliceOp.build(v, shifted, sizes, strides if "strides" in op.attributes else None)
                rewriter.replace_op(op, [insert(rewriter, op, piece)])
                return True
            start = end
        return False
