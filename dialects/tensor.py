"""The two ops of MLIR's ``tensor`` dialect irc has, in MLIR's syntax: ``tensor.dim`` (a size)
and ``tensor.extract`` (one element).  The deep-learning graph ops are the ``graph`` dialect
(dialects/graph.py): MLIR's tensor dialect has ops of the same names and other meanings.
"""

from __future__ import annotations

from irc.attributes import DenseAttr, FloatAttr, IntegerAttr
from irc.diagnostics import IRError
from irc.operation import Operation, Pure
from irc.semantics import Fault, attr_to_value
from irc.types import FloatType, TensorType, index

# The graph ops lived here before they had a dialect file of their own: code that imports them
# from here (other branches, user code) keeps working.
from .graph import (  # noqa: F401
    MAX_FOLD_ELEMENTS,
    BatchMatmulOp,
    BroadcastOp,
    ConcatOp,
    Conv2DOp,
    GatherOp,
    IotaOp,
    LogSoftmaxOp,
    MatmulOp,
    NaryOp,
    PadOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceMinOp,
    ReduceOp,
    ReduceProdOp,
    ReduceSumOp,
    ReshapeOp,
    SameTypeOp,
    ShapeError,
    ShapeOp,
    SliceOp,
    SoftmaxOp,
    SplatOp,
    TensorOp,
    TransposeOp,
    _attr_text,
    _dims,
    storage_dtype,
)


class DimOp(Operation):
    """``%d = tensor.dim %a, %i : tensor<?xf32>``: the size of dimension ``%i``, as memref.dim.

    Dynamic sizes come from here (to splat, broadcast or reshape to a shape read
    off another tensor); it folds to a constant for a static dimension.
    """

    name = "tensor.dim"
    traits = frozenset({Pure})
    summary = "The size of one dimension of a tensor (an index); an index out of range is an error."
    example = "%r = tensor.dim %t, %i : tensor<4xf32>"

    def verify_op(self) -> None:
        if len(self.operands) != 2 or len(self.results) != 1:
            raise self.error("takes a tensor and a dimension index, and has one result")
        t, i = self.operand_types
        if not isinstance(t, TensorType) or i is not index or self.results[0].type is not index:
            raise self.error(f"takes a tensor and an index and gives an index, got {t}, {i} -> "
                             f"{self.results[0].type}")

    def interpret(self, interp, args):
        a, d = args
        if not 0 <= d < a.ndim:
            raise Fault(f"dimension {d} is out of range for a rank-{a.ndim} tensor")
        return [a.shape[d]]

    def fold(self, constants):
        c = constants[1]
        t = self.operands[0].type
        if isinstance(c, IntegerAttr) and 0 <= c.value < t.rank and t.shape[c.value] is not None:
            return [IntegerAttr(t.shape[c.value], index)]
        return None

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.args) != 2 or any(type(a) is tuple for a in syn.args):
            raise IRError("'tensor.dim' expects '%tensor, %dim : tensor<...>'", syn.loc)
        t = syn.single_type()
        return cls([ctx.value(syn.args[0], t), ctx.value(syn.args[1], index)], [index], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.values(self.operands)}{_attr_text(p, self.attributes)} : {self.operands[0].type}")

    @classmethod
    def build(cls, tensor, dim):
        return cls([tensor, dim], [index])



class ExtractOp(Operation):
    """``%x = tensor.extract %t[%i, %j] : tensor<4x?xf32>``: one element, as MLIR's tensor.extract.

    One index per dimension (none for a rank-0 tensor: ``%t[]``); an index out of
    range is an error when the op runs.  The gradient of ``graph.splat`` (a sum,
    which is a rank-0 tensor) becomes its scalar operand's type through it.
    """

    name = "tensor.extract"
    traits = frozenset({Pure})
    summary = "One element of a tensor, as a scalar; an index out of range is an error."
    example = "%r = tensor.extract %mat[%i, %n] : tensor<3x4xf32>"

    def verify_op(self) -> None:
        if not self.operands or len(self.results) != 1:
            raise self.error("takes a tensor and one index per dimension, and has one result")
        t = self.operands[0].type
        if not isinstance(t, TensorType):
            raise self.error(f"takes a tensor, got {t}")
        if len(self.operands) != t.rank + 1 or any(v.type is not index for v in self.operands[1:]):
            raise self.error(f"needs {t.rank} index operand{'s' if t.rank != 1 else ''} for {t}")
        if self.results[0].type is not t.element_type:
            raise self.error(f"result type must be {t.element_type}, the element type of {t}, "
                             f"got {self.results[0].type}")

    def interpret(self, interp, args):
        a, at = args[0], tuple(args[1:])
        if any(not 0 <= i < n for i, n in zip(at, a.shape)):
            raise Fault(f"index {list(at)} is out of range for shape {_dims(a.shape)}")
        value = a[at]
        return [value if isinstance(self.results[0].type, FloatType) else int(value)]

    def fold(self, constants):
        if any(c is None for c in constants) or not isinstance(constants[0], DenseAttr):
            return None
        a = attr_to_value(constants[0])
        at = tuple(c.value for c in constants[1:])
        if any(not 0 <= i < n for i, n in zip(at, a.shape)):
            return None
        elem = self.results[0].type
        value = a[at]
        return [FloatAttr(float(value), elem) if isinstance(elem, FloatType) else IntegerAttr(int(value), elem)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = syn.single_type()
        if len(syn.args) != 1 or not isinstance(syn.args[0], tuple) or syn.args[0][0] != "indexed":
            raise IRError("'tensor.extract' expects '%tensor[%i, ...] : tensor<...>'", syn.loc)
        if not isinstance(t, TensorType):
            raise IRError(f"'tensor.extract' takes a tensor, got {t}", syn.loc)
        _, tensor, idx = syn.args[0]
        return cls([ctx.value(tensor, t), *[ctx.value(i, index) for i in idx]], [t.element_type], syn.attrs)

    def print_custom(self, p) -> None:
        t = self.operands[0]
        p.write(f" {p.value(t)}[{p.values(self.operands[1:])}]{_attr_text(p, self.attributes)} : {t.type}")

    @classmethod
    def build(cls, tensor, indices=()):
        return cls([tensor, *indices], [tensor.type.element_type])

    def vjp(self, b, x, y, g):
        t = x[0]
        spread = b.splat(g[0], t.type, b.dynamic_sizes(t))
        if not x[1:]:
            return [spread]
        shape_sizes = b.dynamic_sizes(t)
        grid = TensorType(t.type.shape, index)
        hit = None
        for axis, i in enumerate(x[1:]):
            at = b.built(IotaOp.build(grid, axis, [s.value for s in shape_sizes])).eq(i)
            hit = at if hit is None else b.op("arith.andi", hit, at)
        return [b.select(hit, spread, b.zeros_like(t)), *[None] * (len(x) - 1)]

    def jvp(self, b, x, y, t):
        return [b.built(ExtractOp.build(t[0].value, [i.value for i in x[1:]]))]
