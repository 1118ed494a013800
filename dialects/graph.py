"""The ``graph`` dialect: the deep-learning graph ops that are not elementwise.

It has a dialect of its own so that none of its ops shares a name with a different op of
MLIR's (MLIR's ``tensor.splat``, ``tensor.pad``... are other ops); the two ops of MLIR's
``tensor`` dialect irc has, ``tensor.extract`` and ``tensor.dim``, are in dialects/tensor.py,
in MLIR's syntax.

Elementwise arithmetic, math, comparisons, select and casts on tensors are the
``arith``/``math`` ops themselves (``arith.addf %a, %b : tensor<?x4xf32>``).
Everything else is here, in four assembly forms:

- one tensor in, shape changed: ``graph.transpose %a {perm = [1, 0]} :
  tensor<3x4xf32> to tensor<4x3xf32>`` (also broadcast, reshape, the reductions,
  slice, pad, and ``graph.splat %x : f32 to tensor<4xf32>``);
- several tensors in: ``graph.matmul %a, %b : (tensor<3x4xf32>,
  tensor<4x5xf32>) -> tensor<3x5xf32>`` (also batch_matmul, concat, conv2d);
- same type in and out: ``graph.softmax %a {axis = 1} : tensor<3x4xf32>``;
- built from sizes: ``graph.iota {axis = 0} : tensor<4xi64>``; dynamic sizes are read
  with ``tensor.dim %a, %i : tensor<?xf32>``.

Both types are always written, so a reader never has to infer a shape; the op
infers the result type from its operands and attributes anyway and the verifier
rejects a signature that disagrees.  A ``?`` dimension matches anything at
verify time and is checked when the op runs.  Where the result shape does not
follow from the operands (broadcast, reshape, splat, iota), each ``?`` of the
result takes one ``index`` operand after the tensor, in order, as
``memref.alloc`` does: ``graph.splat %x, %n : f32 to tensor<4x?xf32>``.

Axes and sizes are non-negative integers (no negative axes as in numpy), so the
IR has one spelling for each op.  The interpreter follows numpy; float
reductions, softmax and mean accumulate in f64 and round once to the element
type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from irc.attributes import ArrayAttr, Attribute, DenseAttr, FloatAttr, IntegerAttr, UnitAttr
from irc.diagnostics import IRError
from irc.operation import Operation, Pure
from irc.patterns import RewritePattern, constant_value
from irc.semantics import Fault, attr_to_value, float_dtype, round_to
from irc.types import (
    FloatType,
    IndexType,
    IntegerType,
    TensorType,
    Type,
    i1,
    i64,
    index,
    numpy_dtype,
)

from . import tensor_grad as grad

# Folding materialises a constant; above this many elements it is cheaper to compute at run time.
MAX_FOLD_ELEMENTS = 1 << 20


class ShapeError(ValueError):
    """An op's operands, attributes or result type disagree; the verifier reports it at the op."""


# ---- small helpers -------------------------------------------------------------------------------


def _dims(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _agree(a: int | None, b: int | None) -> bool:
    """Two dimensions that may be equal: a dynamic one matches anything until run time."""
    return a is None or b is None or a == b


def _meet(a: int | None, b: int | None) -> int | None:
    """The dimension two agreeing dimensions must both have (static if either is)."""
    return a if a is not None else b


def _tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise ShapeError(f"{what} must be a tensor, got {t}")
    return t


def _kind_ok(elem: Type, kind: str) -> bool:
    if kind == "float":
        return isinstance(elem, FloatType)
    if kind == "number":  # arithmetic: i1 has none
        return isinstance(elem, (FloatType, IndexType)) or (isinstance(elem, IntegerType) and elem.width > 1)
    if kind == "iota":
        return _kind_ok(elem, "number")
    return True


_KIND_NAMES = {"float": "floating point", "number": "integer (not i1), index or float",
               "iota": "integer (not i1), index or float"}


def _check_element(t: TensorType, kind: str, what: str = "operand") -> None:
    if not _kind_ok(t.element_type, kind):
        raise ShapeError(f"{what} elements must be {_KIND_NAMES[kind]}, got {t}")


def _same_element(types: Sequence[TensorType]) -> None:
    for t in types[1:]:
        if t.element_type is not types[0].element_type:
            raise ShapeError(f"operands must have one element type, got {types[0]} and {t}")


def _int_list(attrs: dict, key: str, length: int | None = None, default: tuple | None = None) -> tuple[int, ...]:
    attr = attrs.get(key)
    if attr is None:
        if default is not None:
            return default
        raise ShapeError(f"requires a '{key}' attribute, a list of integers")
    if not isinstance(attr, ArrayAttr) or not all(isinstance(e, IntegerAttr) and e.type is not i1
                                                  for e in attr.elements):
        raise ShapeError(f"'{key}' must be a list of integers, got {attr}")
    values = tuple(e.value for e in attr.elements)
    if length is not None and len(values) != length:
        raise ShapeError(f"'{key}' needs {length} entries, got {len(values)}")
    return values


def _int(attrs: dict, key: str) -> int:
    attr = attrs.get(key)
    if not isinstance(attr, IntegerAttr) or attr.type is i1:
        raise ShapeError(f"requires an integer '{key}' attribute" + (f", got {attr}" if attr is not None else ""))
    return attr.value


def _axis(value: int, rank: int, what: str = "axis") -> int:
    if not 0 <= value < rank:
        raise ShapeError(f"{what} {value} is out of range for rank {rank}")
    return value


def _array(values) -> ArrayAttr:
    return ArrayAttr(IntegerAttr(int(v), i64) for v in values)


def _sized_shape(result: TensorType, sizes: Sequence[int]) -> tuple[int, ...]:
    """``result``'s shape with each ``?`` replaced by the next run-time size operand."""
    it = iter(sizes)
    shape = tuple(next(it) if d is None else d for d in result.shape)
    if any(d < 0 for d in shape):
        raise Fault(f"negative size in {_dims(shape)}")
    return shape


def _check_sizes(types: Sequence[Type], result: TensorType) -> None:
    """The operands after the first are one ``index`` per ``?`` of the result."""
    dynamic = sum(d is None for d in result.shape)
    if len(types) != dynamic:
        raise ShapeError(f"needs {dynamic} index operand{'s' if dynamic != 1 else ''} after the "
                         f"first for the dynamic sizes of {result}, got {len(types)}")
    for t in types:
        if t is not index:
            raise ShapeError(f"dynamic sizes must be index values, got {t}")


def storage_dtype(elem: Type) -> np.dtype:
    """The numpy dtype that holds elements of ``elem`` at run time (see irc.semantics)."""
    if isinstance(elem, FloatType):
        return np.dtype(float_dtype(elem))
    if isinstance(elem, IntegerType) and elem.width == 1:
        return np.dtype(np.bool_)
    try:
        return numpy_dtype(elem)
    except TypeError:
        raise Fault(f"the interpreter has no storage for tensors of {elem}") from None


def _finish(x, elem: Type) -> np.ndarray:
    """A computed array as the runtime value of a tensor of ``elem``: its dtype, rounded."""
    if isinstance(elem, FloatType):
        return np.asarray(round_to(np.asarray(x), elem))
    return np.asarray(x).astype(storage_dtype(elem), copy=False)


_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*$")


def _attr_text(p, attrs: dict) -> str:
    """The attribute dictionary with integers and integer lists written without ``: i64``
    (the type an untyped integer reads back as), so that ``{axes = [1], keepdims}`` round-trips."""
    items = []
    for key, value in attrs.items():
        if not _BARE_KEY.match(key):
            items.append(p.attr_dict({key: value})[2:-1])
        elif isinstance(value, IntegerAttr) and value.type is i64:
            items.append(f"{key} = {value.value}")
        elif isinstance(value, ArrayAttr) and all(isinstance(e, IntegerAttr) and e.type is i64
                                                  for e in value.elements):
            items.append(f"{key} = [{', '.join(str(e.value) for e in value.elements)}]")
        else:
            items.append(p.attr_dict({key: value})[2:-1])
    return " {" + ", ".join(items) + "}" if items else ""


# ---- the base class: verify by inference, interpret with numpy, fold constants --------------------


class TensorOp(Operation):
    """A pure op with one tensor result whose type follows from its operands and attributes.

    A concrete op declares ``infer_type`` (the result type, or ``ShapeError``) and
    ``compute`` (numpy in, numpy out, ``Fault`` for a run-time shape error); the
    verifier, the interpreter and constant folding are shared.  ``fold_identity``
    returns an existing value the op equals (``transpose`` by the identity...).
    """

    traits = frozenset({Pure})

    @classmethod
    def infer_type(cls, types: Sequence[Type], attrs: dict, declared: Type | None) -> Type:
        """The result type for operands of ``types``; ``declared`` is the written one, which ops
        whose result shape is not a function of the operands (broadcast, reshape...) take."""
        raise NotImplementedError

    def compute(self, args: list):
        raise NotImplementedError

    def fold_identity(self, constants: list) -> list | None:
        return None

    # -- shared behaviour ----------------------------------------------------------------------

    def verify_op(self) -> None:
        if len(self.results) != 1:
            raise self.error(f"has one result, got {len(self.results)}")
        declared = self.results[0].type
        try:
            expected = self.infer_type(self.operand_types, self.attributes, declared)
        except ShapeError as e:
            raise self.error(str(e)) from None
        if expected is not declared:
            raise self.error(f"result type must be {expected} (inferred from the operands), got {declared}")

    def interpret(self, interp, args):
        t = self.results[0].type
        out = self.compute(args)
        if out.ndim != t.rank or any(d is not None and d != n for d, n in zip(t.shape, out.shape)):
            raise Fault(f"result of shape {_dims(out.shape)} does not match {t}")
        return [out]

    def fold(self, constants: list[Attribute | None]):
        if any(c is None for c in constants):
            return self.fold_identity(constants)
        t = self.results[0].type
        # No empty constants: 'dense<[]> : tensor<0x3xf32>' prints but does not parse back (yet).
        if not isinstance(t, TensorType) or not t.has_static_shape or not 0 < t.num_elements <= MAX_FOLD_ELEMENTS:
            return self.fold_identity(constants)
        try:
            out = self.compute([attr_to_value(c) for c in constants])
        except (Fault, ValueError, TypeError):
            return None
        if out.shape != t.shape:
            return None
        return [DenseAttr(out, t)]

    @classmethod
    def build(cls, *operands, type: Type | None = None, **attrs):
        """The op on ``operands`` with its inferred result type; ``attrs`` are Python values
        (ints, lists of ints, ``True`` for a unit attribute, or attributes)."""
        attributes = {k: _to_attr(v) for k, v in attrs.items() if v is not None and v is not False}
        result = cls.infer_type([v.type for v in operands], attributes, type)
        return cls(list(operands), [result], attributes)

    def _same_as_operand(self) -> list | None:
        """The first operand, when the op changes nothing: its type equals the result's and
        is static, or each ``?`` of the result takes its size from ``tensor.dim`` of that
        same dimension of the operand (so the run-time shapes are equal too)."""
        from .tensor import DimOp  # tensor.py builds on this module

        a = self.operands[0]
        t = self.results[0].type
        if a.type is not t:
            return None
        if t.has_static_shape:
            return [a]
        dynamic = [i for i, d in enumerate(t.shape) if d is None]
        sizes = self.operands[1:]
        if len(sizes) != len(dynamic):
            return None
        for i, size in zip(dynamic, sizes):
            dim = size.defining_op
            if not isinstance(dim, DimOp) or dim.operands[0] is not a:
                return None
            k = constant_value(dim.operands[1])
            if not isinstance(k, IntegerAttr) or k.value != i:
                return None
        return [a]


def _to_attr(v) -> Attribute:
    if isinstance(v, Attribute):
        return v
    if v is True:
        return UnitAttr()
    if isinstance(v, int):
        return IntegerAttr(v, i64)
    return _array(v)


class ShapeOp(TensorOp):
    """One tensor (or, for splat, a scalar) in, written ``%a [, %sizes] {attrs} : SOURCE to RESULT``."""

    @classmethod
    def parse_uniform(cls, ctx, syn):
        sig = syn.sig
        if sig is None or sig[0] != "cast" or len(sig[1]) != 1 or len(sig[2]) != 1 \
                or not syn.args or any(type(a) is tuple for a in syn.args):
            raise IRError(f"'{cls.name}' expects '%operand {{attributes}} : SOURCE_TYPE to RESULT_TYPE'", syn.loc)
        operands = [ctx.value(syn.args[0], sig[1][0]), *[ctx.value(a, index) for a in syn.args[1:]]]
        return cls(operands, [sig[2][0]], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.values(self.operands)}{_attr_text(p, self.attributes)} : "
                f"{self.operands[0].type} to {self.results[0].type}")


class NaryOp(TensorOp):
    """Several tensors in, written ``%a, %b {attrs} : (A, B) -> RESULT``."""

    @classmethod
    def parse_uniform(cls, ctx, syn):
        sig = syn.sig
        if sig is None or sig[0] != "fn" or len(sig[1].results) != 1 or not syn.args \
                or any(type(a) is tuple for a in syn.args) or len(syn.args) != len(sig[1].inputs):
            raise IRError(f"'{cls.name}' expects '%a, %b {{attributes}} : (A_TYPE, B_TYPE) -> RESULT_TYPE', "
                          "one type per operand", syn.loc)
        fn = sig[1]
        return cls([ctx.value(a, t) for a, t in zip(syn.args, fn.inputs)], list(fn.results), syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.values(self.operands)}{_attr_text(p, self.attributes)} : "
                f"({p.types(self.operand_types)}) -> {self.results[0].type}")


class SameTypeOp(TensorOp):
    """One tensor in, one of the same type out, written ``%a {attrs} : T``."""

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.args) != 1 or type(syn.args[0]) is tuple:
            raise IRError(f"'{cls.name}' expects '%operand {{attributes}} : TYPE'", syn.loc)
        t = syn.single_type()
        return cls([ctx.value(syn.args[0], t)], [t], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{_attr_text(p, self.attributes)} : {self.results[0].type}")


def _one(types: Sequence[Type], name: str = "operand") -> TensorType:
    if len(types) != 1:
        raise ShapeError(f"takes one {name}, got {len(types)} operands")
    return _tensor(types[0], name)


# ---- broadcast and reshape: the result type is given, each ? takes a size ----------------------------


def _source_and_result(types, declared):
    """The operand and the declared result of ``op %a [, %sizes] : SRC to DST``, checked:
    one index per dynamic result dimension, one element type."""
    if not types:
        raise ShapeError("takes a tensor and one index per dynamic result dimension")
    src = _tensor(types[0], "operand")
    dst = _tensor(declared, "result")
    _check_sizes(types[1:], dst)
    if dst.element_type is not src.element_type:
        raise ShapeError(f"result element type must be that of the operand, got {src} to {dst}")
    return src, dst


class BroadcastOp(ShapeOp):
    """``graph.broadcast %a [, %sizes] : tensor<4xf32> to tensor<3x4xf32>`` with numpy's rules.

    Dimensions align at the right; each operand dimension is 1 or equals the result's.
    The result type is written, not inferred, because broadcasting is how a graph
    says what shape it wants; each ``?`` of the result takes an index operand.
    """

    name = "graph.broadcast"
    summary = "Broadcast a tensor to a larger shape (numpy's rules); the result type is given."
    example = "%r = graph.broadcast %t : tensor<4xf32> to tensor<3x4xf32>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        src, dst = _source_and_result(types, declared)
        if src.rank > dst.rank:
            raise ShapeError(f"cannot broadcast {src} to the lower rank of {dst}")
        offset = dst.rank - src.rank
        for i, (s, r) in enumerate(zip(src.shape, dst.shape[offset:])):
            if s is not None and s != 1 and r is not None and s != r:
                raise ShapeError(f"cannot broadcast {src} to {dst}: operand dimension {i} is {s}, "
                                 f"which is neither 1 nor {r}")
        return dst

    def compute(self, args):
        a = args[0]
        shape = _sized_shape(self.results[0].type, args[1:])
        aligned = shape[len(shape) - a.ndim:] if a.ndim else ()
        if a.ndim > len(shape) or any(s != 1 and s != r for s, r in zip(a.shape, aligned)):
            raise Fault(f"cannot broadcast shape {_dims(a.shape)} to {_dims(shape)}")
        return np.asarray(np.broadcast_to(a, shape), order="C")

    def fold_identity(self, constants):
        return self._same_as_operand()

    def fold(self, constants):
        """A constant operand is broadcast at compile time only when the result is a splat or
        no larger: a constant copied N times is N times the bytes to keep and to read at run
        time, where the broadcast, which fusion absorbs into the loop that reads it, reads the
        small one (max pooling's backward pass compared 1 MiB of positions that an 8 KiB
        constant holds)."""
        source = constants[0] if constants else None
        t, operand = self.results[0].type, self.operands[0].type
        if isinstance(source, DenseAttr) and not source.is_splat() and operand.has_static_shape \
                and t.has_static_shape and t.num_elements > operand.num_elements:
            return self.fold_identity(constants)
        return super().fold(constants)

    @classmethod
    def canonicalization_patterns(cls):
        from irc.passes import tensor_algebra as rules

        return (rules.SplatThroughShapeOp(cls.name), rules.BroadcastOfBroadcast(),
                rules.ElementwiseOfExpansions(cls.name))

    @classmethod
    def build(cls, operand, type: TensorType, sizes=()):
        return super().build(operand, *sizes, type=type)

    def vjp(self, b, x, y, g):
        return [grad.unbroadcast(b, g[0], x[0]), *[None] * (len(x) - 1)]

    def jvp(self, b, x, y, t):
        return [b.built(BroadcastOp.build(t[0].value, y[0].type, [s.value for s in x[1:]]))]


class ReshapeOp(ShapeOp):
    """``graph.reshape %a [, %sizes] : tensor<2x6xf32> to tensor<3x4xf32>``, row-major.

    The element count must not change; it is checked here when both shapes are
    static and when the op runs otherwise.  Each ``?`` of the result takes an index
    operand (no numpy ``-1``), so the result shape is always known before the data.
    """

    name = "graph.reshape"
    summary = "Reinterpret a tensor's elements, in row-major order, with another shape of the same size."
    example = "%r = graph.reshape %mat : tensor<3x4xf32> to tensor<2x6xf32>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        src, dst = _source_and_result(types, declared)
        if src.has_static_shape:
            n = src.num_elements
            known = math.prod(d for d in dst.shape if d is not None)
            if dst.has_static_shape and known != n:
                raise ShapeError(f"cannot reshape {src} ({n} elements) to {dst} ({known} elements)")
            if not dst.has_static_shape and (n % known if known else n):
                raise ShapeError(f"cannot reshape {src} ({n} elements) to {dst}: {n} is not a multiple of {known}")
        return dst

    def compute(self, args):
        a = args[0]
        shape = _sized_shape(self.results[0].type, args[1:])
        n = math.prod(shape)
        if n != a.size:
            raise Fault(f"cannot reshape shape {_dims(a.shape)} ({a.size} elements) to {_dims(shape)} "
                        f"({n} elements)")
        return np.reshape(a, shape)

    def fold_identity(self, constants):
        return self._same_as_operand()

    @classmethod
    def canonicalization_patterns(cls):
        from irc.passes import tensor_algebra as rules

        return (ReshapeOfReshape(), rules.SplatThroughShapeOp(cls.name))

    @classmethod
    def build(cls, operand, type: TensorType, sizes=()):
        return super().build(operand, *sizes, type=type)

    def vjp(self, b, x, y, g):
        return [grad.reshape(b, g[0], x[0].type.shape, b.dynamic_sizes(x[0])), *[None] * (len(x) - 1)]

    def jvp(self, b, x, y, t):
        return [b.built(ReshapeOp.build(t[0].value, y[0].type, [s.value for s in x[1:]]))]


class ReshapeOfReshape(RewritePattern):
    """reshape(reshape(x)) -> reshape(x) when the inner shape is static (its count check was static)."""

    op_name = "graph.reshape"

    def match_and_rewrite(self, op, rewriter) -> bool:
        inner = op.operands[0].defining_op
        if not isinstance(inner, ReshapeOp) or not inner.results[0].type.has_static_shape:
            return False
        rewriter.set_operand(op, 0, inner.operands[0])
        return True


# ---- reductions ---------------------------------------------------------------------------------------


class ReduceOp(ShapeOp):
    """``tensor.reduce_* %a {axes = [1], keepdims} : tensor<3x4xf32> to tensor<3xf32>``.

    ``axes`` lists distinct dimensions in [0, rank); ``keepdims`` (a unit
    attribute) keeps them with size 1.  Over no axes the op is the identity.
    Float sums, products and means accumulate in f64, at least as precisely as
    numpy, and round once to the element type; integer ones wrap.
    """

    element_kind = "number"

    @staticmethod
    def reduce(a: np.ndarray, axes: tuple, keepdims: bool, elem: Type) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def infer_type(cls, types, attrs, declared):
        src = _one(types)
        _check_element(src, cls.element_kind)
        axes = _int_list(attrs, "axes")
        for a in axes:
            _axis(a, src.rank)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"axes {list(axes)} repeat a dimension")
        keep = "keepdims" in attrs
        if keep and not isinstance(attrs["keepdims"], UnitAttr):
            raise ShapeError("'keepdims' is a unit attribute: write it as a bare name")
        shape = [1 if i in axes else d for i, d in enumerate(src.shape) if keep or i not in axes]
        return src.with_shape(shape)

    def compute(self, args):
        a = args[0]
        axes = _int_list(self.attributes, "axes")
        elem = self.results[0].type.element_type
        return _finish(self.reduce(a, axes, "keepdims" in self.attributes, elem), elem)

    def fold_identity(self, constants):
        return None if _int_list(self.attributes, "axes") else [self.operands[0]]

    @classmethod
    def canonicalization_patterns(cls):
        from irc.passes import tensor_algebra as rules

        return (rules.ReduceOfExpansion(cls.name),)

    @classmethod
    def build(cls, operand, axes, keepdims: bool = False):
        return super().build(operand, axes=list(axes), keepdims=keepdims)

    def reduction(self) -> tuple[list[int], bool]:
        return list(_int_list(self.attributes, "axes")), "keepdims" in self.attributes


def _accumulator(a: np.ndarray):
    return np.float64 if a.dtype.kind == "f" else a.dtype


class ReduceSumOp(ReduceOp):
    """Sum over ``axes``; zero over an empty axis."""

    name = "graph.reduce_sum"
    summary = "Sum over the given axes."
    example = "%r = graph.reduce_sum %mat {axes = [1]} : tensor<3x4xf32> to tensor<3xf32>"
    reduce = staticmethod(lambda a, axes, keep, elem: np.sum(a, axis=axes, dtype=_accumulator(a), keepdims=keep))

    def vjp(self, b, x, y, g):
        return [grad.unreduce(b, g[0], x[0], *self.reduction())]

    def jvp(self, b, x, y, t):
        return [b.reduce("sum", t[0], *self.reduction())]


class ReduceProdOp(ReduceOp):
    """Product over ``axes``; one over an empty axis."""

    name = "graph.reduce_prod"
    summary = "Product over the given axes."
    example = "%r = graph.reduce_prod %t {axes = [0], keepdims} : tensor<4xf32> to tensor<1xf32>"
    reduce = staticmethod(lambda a, axes, keep, elem: np.prod(a, axis=axes, dtype=_accumulator(a), keepdims=keep))

    # d prod / d x_i is the product of the other elements, built without dividing by x_i
    # (exact with zeros): see tensor_grad.others.
    def vjp(self, b, x, y, g):
        axes, keep = self.reduction()
        return [grad.unreduce(b, g[0], x[0], axes, keep) * grad.others(b, x[0], axes)]

    def jvp(self, b, x, y, t):
        axes, keep = self.reduction()
        return [b.reduce("sum", t[0] * grad.others(b, x[0], axes), axes, keep)]


def _lowest(a: np.ndarray):
    return -np.inf if a.dtype.kind == "f" else np.iinfo(a.dtype).min


def _highest(a: np.ndarray):
    return np.inf if a.dtype.kind == "f" else np.iinfo(a.dtype).max


class ExtremeOp(ReduceOp):
    """Max and min: the gradient goes to the elements equal to the result, shared evenly
    among ties (arith.maximumf's rule; JAX's too), see tensor_grad.extreme_weights."""

    def vjp(self, b, x, y, g):
        axes, keep = self.reduction()
        return [grad.unreduce(b, g[0], x[0], axes, keep) * grad.extreme_weights(b, x[0], y[0], axes, keep)]

    def jvp(self, b, x, y, t):
        axes, keep = self.reduction()
        return [b.reduce("sum", t[0] * grad.extreme_weights(b, x[0], y[0], axes, keep), axes, keep)]


class ReduceMaxOp(ExtremeOp):
    """Maximum over ``axes`` (integers signed, NaN propagates); -inf or the lowest integer
    over an empty axis, the identity of max, where numpy raises."""

    name = "graph.reduce_max"
    summary = "Maximum over the given axes."
    example = "%r = graph.reduce_max %mat {axes = [1], keepdims} : tensor<3x4xf32> to tensor<3x1xf32>"
    reduce = staticmethod(lambda a, axes, keep, elem: np.max(a, axis=axes, keepdims=keep, initial=_lowest(a)))


class ReduceMinOp(ExtremeOp):
    """Minimum over ``axes`` (integers signed, NaN propagates); +inf or the highest integer
    over an empty axis."""

    name = "graph.reduce_min"
    summary = "Minimum over the given axes."
    example = "%r = graph.reduce_min %t {axes = [0]} : tensor<4xf32> to tensor<f32>"
    reduce = staticmethod(lambda a, axes, keep, elem: np.min(a, axis=axes, keepdims=keep, initial=_highest(a)))


def _mean(a, axes, keep, elem):
    count = math.prod(a.shape[i] for i in axes)
    return np.sum(a, axis=axes, dtype=np.float64, keepdims=keep) / np.float64(count)


class ReduceMeanOp(ReduceOp):
    """Mean over ``axes`` of a float tensor (NaN over an empty axis, 0/0)."""

    name = "graph.reduce_mean"
    summary = "Arithmetic mean over the given axes (floats only)."
    example = "%r = graph.reduce_mean %mat {axes = [0, 1]} : tensor<3x4xf32> to tensor<f32>"
    element_kind = "float"
    reduce = staticmethod(_mean)

    def vjp(self, b, x, y, g):
        axes, keep = self.reduction()
        return [grad.unreduce(b, g[0], x[0], axes, keep) / grad.count(b, x[0], axes)]

    def jvp(self, b, x, y, t):
        return [b.reduce("mean", t[0], *self.reduction())]


# ---- matmul and conv2d ----------------------------------------------------------------------------------


def _matmul_shape(a: TensorType, b: TensorType) -> list:
    """The shape of a @ b for operands of equal rank >= 2 whose leading (batch) dims agree."""
    for i, (x, y) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
        if not _agree(x, y):
            raise ShapeError(f"batch dimension {i} differs: {a} and {b} ({x} != {y})")
    k1, k2 = a.shape[-1], b.shape[-2]
    if not _agree(k1, k2):
        raise ShapeError(f"inner dimensions differ: {a} and {b} ({k1} != {k2})")
    return [_meet(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2])] + [a.shape[-2], b.shape[-1]]


def _matmul(a: np.ndarray, b: np.ndarray, elem: Type) -> np.ndarray:
    if a.shape[:-2] != b.shape[:-2]:
        raise Fault(f"batch dimensions differ: {_dims(a.shape)} and {_dims(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise Fault(f"inner dimensions differ: {_dims(a.shape)} and {_dims(b.shape)}")
    return _finish(np.matmul(a, b), elem)


class ProductRules:
    """The derivatives of matmul and batch_matmul (the last two dimensions are the matrix)."""

    # d(A B) = dA B + A dB;  A-bar = G B^T,  B-bar = A^T G.
    def vjp(self, b, x, y, g):
        return [grad.fit(b, self.product(b, g[0], self.swap(b, x[1])), x[0]),
                grad.fit(b, self.product(b, self.swap(b, x[0]), g[0]), x[1])]

    def jvp(self, b, x, y, t):
        terms = [self.product(b, t[0], x[1]) if t[0] is not None else None,
                 self.product(b, x[0], t[1]) if t[1] is not None else None]
        terms = [grad.fit(b, term, y[0]) for term in terms if term is not None]
        return [terms[0] + terms[1] if len(terms) == 2 else terms[0]]

    def product(self, b, a, c):
        return b.tensor_op(self.name, a, c)

    @staticmethod
    def swap(b, v):
        """The last two dimensions exchanged."""
        rank = v.type.rank
        return b.transpose(v, [*range(rank - 2), rank - 1, rank - 2])


class MatmulOp(ProductRules, NaryOp):
    """``graph.matmul %a, %b : (tensor<MxKxT>, tensor<KxNxT>) -> tensor<MxNxT>``.

    Both operands are matrices of one numeric element type; no vector or
    broadcasting forms, so that lowering has one loop nest to emit.  f32 stays f32
    (numpy's accumulation); integers wrap.
    """

    name = "graph.matmul"
    summary = "Matrix product of two rank-2 tensors."
    example = "%r = graph.matmul %mat, %mat2 : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>"


    @classmethod
    def infer_type(cls, types, attrs, declared):
        if len(types) != 2:
            raise ShapeError(f"takes two operands, got {len(types)}")
        a, b = _tensor(types[0], "lhs"), _tensor(types[1], "rhs")
        if a.rank != 2 or b.rank != 2:
            raise ShapeError(f"operands must be rank-2 tensors, got {a} and {b}")
        _same_element([a, b])
        _check_element(a, "number")
        return a.with_shape(_matmul_shape(a, b))

    def compute(self, args):
        return _matmul(args[0], args[1], self.results[0].type.element_type)


class BatchMatmulOp(ProductRules, NaryOp):
    """``graph.batch_matmul %a, %b : (tensor<BxMxKxT>, tensor<BxKxNxT>) -> tensor<BxMxNxT>``.

    One matmul per index of the leading batch dimensions, which must be equal
    (no broadcasting between them); any number of batch dimensions, at least one.
    """

    name = "graph.batch_matmul"
    summary = "Matrix products over equal leading batch dimensions."
    example = ("%r = graph.batch_matmul %batch, %batch2 : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) "
               "-> tensor<2x3x5xf32>")

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if len(types) != 2:
            raise ShapeError(f"takes two operands, got {len(types)}")
        a, b = _tensor(types[0], "lhs"), _tensor(types[1], "rhs")
        if a.rank < 3 or a.rank != b.rank:
            raise ShapeError(f"operands must have one rank of at least 3, got {a} and {b}")
        _same_element([a, b])
        _check_element(a, "number")
        return a.with_shape(_matmul_shape(a, b))

    def compute(self, args):
        return _matmul(args[0], args[1], self.results[0].type.element_type)


def _conv_out(size: int | None, kernel: int | None, stride: int, pad: int, what: str) -> int | None:
    if size is None or kernel is None:
        return None
    if size + 2 * pad < kernel:
        raise ShapeError(f"the kernel {what} ({kernel}) exceeds the padded input {what} ({size} + 2*{pad})")
    return (size + 2 * pad - kernel) // stride + 1


class Conv2DOp(NaryOp):
    """``graph.conv2d %x, %w {stride = [1, 1], padding = [0, 0]} : (NCHW, OIHW) -> NOHW``.

    Cross-correlation, as in deep-learning frameworks: input NxCxHxW, weight
    OxCxKHxKW, zero ``padding`` on both sides of H and W, ``stride`` >= 1;
    output height (H + 2*pad - KH) // stride + 1.  Both attributes default to
    those shown.  No groups or dilation yet.
    """

    name = "graph.conv2d"
    summary = "2-D convolution (cross-correlation) of an NCHW input with an OIHW weight."
    example = ("%r = graph.conv2d %img, %kernel {stride = [1, 1], padding = [1, 1]} : "
               "(tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>")

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if len(types) != 2:
            raise ShapeError(f"takes an input and a weight, got {len(types)} operands")
        x, w = _tensor(types[0], "input"), _tensor(types[1], "weight")
        if x.rank != 4 or w.rank != 4:
            raise ShapeError(f"input (NCHW) and weight (OIHW) must be rank-4 tensors, got {x} and {w}")
        _same_element([x, w])
        _check_element(x, "number")
        stride, padding = cls.window(attrs)
        if not _agree(x.shape[1], w.shape[1]):
            raise ShapeError(f"input channels ({x.shape[1]}) differ from the weight's ({w.shape[1]}): {x} and {w}")
        h = _conv_out(x.shape[2], w.shape[2], stride[0], padding[0], "height")
        wd = _conv_out(x.shape[3], w.shape[3], stride[1], padding[1], "width")
        return x.with_shape([x.shape[0], w.shape[0], h, wd])

    @staticmethod
    def window(attrs) -> tuple[tuple[int, ...], tuple[int, ...]]:
        stride = _int_list(attrs, "stride", 2, default=(1, 1))
        padding = _int_list(attrs, "padding", 2, default=(0, 0))
        if min(stride) < 1:
            raise ShapeError(f"stride must be at least 1, got {list(stride)}")
        if min(padding) < 0:
            raise ShapeError(f"padding must not be negative, got {list(padding)}")
        return stride, padding

    def compute(self, args):
        x, w = args
        (sh, sw), (ph, pw) = self.window(self.attributes)
        if x.shape[1] != w.shape[1]:
            raise Fault(f"input channels ({x.shape[1]}) differ from the weight's ({w.shape[1]})")
        kh, kw = w.shape[2:]
        if x.shape[2] + 2 * ph < kh or x.shape[3] + 2 * pw < kw:
            raise Fault(f"the kernel {_dims(w.shape[2:])} exceeds the padded input {_dims(x.shape[2:])}")
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        out = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # N, Ho, Wo, O
        return _finish(np.asarray(out.transpose(0, 3, 1, 2), order="C"), self.results[0].type.element_type)

    @classmethod
    def build(cls, x, w, stride=(1, 1), padding=(0, 0)):
        return super().build(x, w, stride=list(stride), padding=list(padding))

    def vjp(self, b, x, y, g):
        return grad.conv2d_vjp(b, self, x[0], x[1], g[0])

    def jvp(self, b, x, y, t):
        stride, padding = self.window(self.attributes)
        terms = [b.built(Conv2DOp.build(t[0].value, x[1].value, stride, padding)) if t[0] is not None else None,
                 b.built(Conv2DOp.build(x[0].value, t[1].value, stride, padding)) if t[1] is not None else None]
        terms = [grad.fit(b, term, y[0]) for term in terms if term is not None]
        return [terms[0] + terms[1] if len(terms) == 2 else terms[0]]


# ---- data movement ------------------------------------------------------------------------------------


class TransposeOp(ShapeOp):
    """``graph.transpose %a {perm = [1, 0]} : tensor<3x4xf32> to tensor<4x3xf32>``.

    Result dimension i is operand dimension ``perm[i]`` (numpy's ``transpose``).
    Two transposes compose into one; the identity permutation folds away.
    """

    name = "graph.transpose"
    summary = "Permute the dimensions of a tensor."
    example = "%r = graph.transpose %mat {perm = [1, 0]} : tensor<3x4xf32> to tensor<4x3xf32>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        src = _one(types)
        perm = _int_list(attrs, "perm", src.rank)
        if sorted(perm) != list(range(src.rank)):
            raise ShapeError(f"perm {list(perm)} is not a permutation of 0..{src.rank - 1}")
        return src.with_shape([src.shape[p] for p in perm])

    def compute(self, args):
        return np.asarray(np.transpose(args[0], _int_list(self.attributes, "perm")), order="C")

    def fold_identity(self, constants):
        perm = _int_list(self.attributes, "perm")
        if list(perm) == sorted(perm):
            return [self.operands[0]]
        inner = self.operands[0].defining_op
        if isinstance(inner, TransposeOp):
            first = _int_list(inner.attributes, "perm")
            if all(first[p] == i for i, p in enumerate(perm)):
                return [inner.operands[0]]
        return None

    @classmethod
    def canonicalization_patterns(cls):
        from irc.passes import tensor_algebra as rules

        return (ComposeTransposes(), rules.SplatThroughShapeOp(cls.name))

    @classmethod
    def build(cls, operand, perm):
        return super().build(operand, perm=list(perm))

    def vjp(self, b, x, y, g):
        perm = _int_list(self.attributes, "perm")
        return [b.transpose(g[0], [perm.index(i) for i in range(len(perm))])]

    def jvp(self, b, x, y, t):
        return [b.transpose(t[0], _int_list(self.attributes, "perm"))]


class ComposeTransposes(RewritePattern):
    """transpose(transpose(x, p), q) -> transpose(x, [p[q[i]] for i])."""

    op_name = "graph.transpose"

    def match_and_rewrite(self, op, rewriter) -> bool:
        inner = op.operands[0].defining_op
        if not isinstance(inner, TransposeOp):
            return False
        first, second = _int_list(inner.attributes, "perm"), _int_list(op.attributes, "perm")
        rewriter.set_operand(op, 0, inner.operands[0])
        op.attributes["perm"] = _array(first[p] for p in second)
        rewriter.modified(op)
        return True


class SliceOp(ShapeOp):
    """``graph.slice %a {offsets = [0, 1], sizes = [2, 2], strides = [1, 2]} : T to tensor<2x2xT>``.

    Result dimension i holds operand elements ``offsets[i] + k * strides[i]`` for k
    below ``sizes[i]``; all three are static (``strides`` defaults to ones) and
    must stay inside the operand, checked here or, for a ``?`` dimension, at run time.
    """

    name = "graph.slice"
    summary = "A strided rectangular piece of a tensor, with static offsets, sizes and strides."
    example = ("%r = graph.slice %mat {offsets = [0, 1], sizes = [2, 2], strides = [1, 2]} : "
               "tensor<3x4xf32> to tensor<2x2xf32>")

    @classmethod
    def infer_type(cls, types, attrs, declared):
        src = _one(types)
        offsets, sizes, strides = cls.window(attrs, src.rank)
        for i, (d, o, s, st) in enumerate(zip(src.shape, offsets, sizes, strides)):
            if d is not None and not _slice_fits(d, o, s, st):
                raise ShapeError(f"slice of dimension {i} (offset {o}, size {s}, stride {st}) is out of "
                                 f"bounds for {src}")
        return src.with_shape(sizes)

    @staticmethod
    def window(attrs, rank):
        offsets = _int_list(attrs, "offsets", rank)
        sizes = _int_list(attrs, "sizes", rank)
        strides = _int_list(attrs, "strides", rank, default=(1,) * rank)
        if min(offsets, default=0) < 0 or min(sizes, default=0) < 0:
            raise ShapeError(f"offsets and sizes must not be negative, got {list(offsets)} and {list(sizes)}")
        if min(strides, default=1) < 1:
            raise ShapeError(f"strides must be at least 1, got {list(strides)}")
        return offsets, sizes, strides

    def compute(self, args):
        a = args[0]
        offsets, sizes, strides = self.window(self.attributes, a.ndim)
        if not all(_slice_fits(*x) for x in zip(a.shape, offsets, sizes, strides)):
            raise Fault(f"slice (offsets {list(offsets)}, sizes {list(sizes)}, strides {list(strides)}) "
                        f"is out of bounds for shape {_dims(a.shape)}")
        index_ = tuple(slice(o, o + (s - 1) * st + 1 if s else o, st) for o, s, st in zip(offsets, sizes, strides))
        return np.asarray(a[index_], order="C")

    def fold_identity(self, constants):
        offsets = _int_list(self.attributes, "offsets")
        strides = _int_list(self.attributes, "strides", default=(1,) * len(offsets))
        if any(offsets) or any(s != 1 for s in strides):
            return None
        return self._same_as_operand()

    @classmethod
    def canonicalization_patterns(cls):
        from irc.passes import tensor_algebra as rules

        return (rules.SplatThroughShapeOp(cls.name), rules.SliceOfConcat())

    @classmethod
    def build(cls, operand, offsets, sizes, strides=None):
        return super().build(operand, offsets=list(offsets), sizes=list(sizes),
                             strides=list(strides) if strides is not None else None)

    def vjp(self, b, x, y, g):
        """The cotangent is put back where the slice took it, zeros elsewhere: dilated by the
        strides (reshape, pad, slice: no interior-padding op), then padded (or, along a ``?``
        dimension of the operand, concatenated with zeros of the size left)."""
        windows = list(zip(*self.window(self.attributes, x[0].type.rank)))
        cot = g[0]
        for axis, (_, n, stride) in enumerate(windows):
            if stride > 1 and n > 1:  # drop the zeros after the last element
                cot = grad.window(b, grad.dilate(b, cot, axis, stride), axis, 0, 1 - stride)
        for axis, (offset, n, stride) in enumerate(windows):
            cot = grad.place(b, cot, x[0], axis, offset, (n - 1) * stride + 1 if n else 0)
        return [grad.fit(b, cot, x[0])]

    def jvp(self, b, x, y, t):
        offsets, sizes, strides = self.window(self.attributes, x[0].type.rank)
        return [b.built(SliceOp.build(t[0].value, offsets, sizes, strides))]


def _slice_fits(dim: int, offset: int, size: int, stride: int) -> bool:
    return offset <= dim if size == 0 else offset + (size - 1) * stride < dim


class ConcatOp(NaryOp):
    """``graph.concat %a, %b {axis = 0} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<5x4xf32>``.

    One or more tensors of one rank and element type, equal except along ``axis``.
    """

    name = "graph.concat"
    summary = "Join tensors along an axis."
    example = "%r = graph.concat %mat, %mat {axis = 0} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<6x4xf32>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if not types:
            raise ShapeError("takes at least one operand")
        ts = [_tensor(t, "operand") for t in types]
        first = ts[0]
        for t in ts[1:]:
            if t.rank != first.rank:
                raise ShapeError(f"operands must have one rank, got {first} and {t}")
        _same_element(ts)
        axis = _axis(_int(attrs, "axis"), first.rank)
        shape = list(first.shape)
        for t in ts[1:]:
            for i, (x, y) in enumerate(zip(shape, t.shape)):
                if i != axis and not _agree(x, y):
                    raise ShapeError(f"operands differ in dimension {i}, which is not the axis {axis}: "
                                     f"{first} and {t}")
                shape[i] = (None if x is None or y is None else x + y) if i == axis else _meet(x, y)
        return first.with_shape(shape)

    def compute(self, args):
        axis = _int(self.attributes, "axis")
        first = args[0]
        for a in args[1:]:
            if any(i != axis and x != y for i, (x, y) in enumerate(zip(first.shape, a.shape))):
                raise Fault(f"operands of shape {_dims(first.shape)} and {_dims(a.shape)} differ off the "
                            f"axis {axis}")
        return np.concatenate(args, axis=axis)

    def fold_identity(self, constants):
        return [self.operands[0]] if len(self.operands) == 1 else None

    @classmethod
    def canonicalization_patterns(cls):
        from irc.passes import tensor_algebra as rules

        return (rules.ConcatDropEmpty(),)

    @classmethod
    def build(cls, operands, axis: int):
        return super().build(*operands, axis=axis)

    def vjp(self, b, x, y, g):
        axis = _int(self.attributes, "axis")
        out, offset = [], 0
        for v in x:
            n = grad.size(b, v, axis)
            out.append(grad.fit(b, grad.take(b, g[0], axis, offset, n), v))
            offset = offset + n
        return out

    def jvp(self, b, x, y, t):
        ts = [tv if tv is not None else b.zeros_like(v) for v, tv in zip(x, t)]
        return [b.tensor_op(self.name, *ts, axis=_int(self.attributes, "axis"))]


class PadOp(ShapeOp):
    """``graph.pad %a {low = [1, 0], high = [0, 2], value = 0.0 : f32} : tensor<3x4xf32> to tensor<4x6xf32>``.

    Adds ``low[i]`` elements before and ``high[i]`` after dimension i, all equal to
    ``value`` (an attribute of the element type).  Padding is never negative: use
    ``graph.slice`` to cut.
    """

    name = "graph.pad"
    summary = "Surround a tensor with a constant value."
    example = ("%r = graph.pad %mat {low = [1, 0], high = [0, 2], value = 0.0 : f32} : "
               "tensor<3x4xf32> to tensor<4x6xf32>")

    @classmethod
    def infer_type(cls, types, attrs, declared):
        src = _one(types)
        low, high = _int_list(attrs, "low", src.rank), _int_list(attrs, "high", src.rank)
        if min(low + high, default=0) < 0:
            raise ShapeError(f"padding must not be negative, got low {list(low)} and high {list(high)}")
        value = attrs.get("value")
        if not isinstance(value, (IntegerAttr, FloatAttr)) or value.type is not src.element_type:
            raise ShapeError(f"requires a 'value' attribute of the element type {src.element_type}"
                             + (f", got {value}" if value is not None else ""))
        return src.with_shape([None if d is None else d + lo + hi for d, lo, hi in zip(src.shape, low, high)])

    def compute(self, args):
        a = args[0]
        low, high = _int_list(self.attributes, "low"), _int_list(self.attributes, "high")
        if a.ndim == 0:  # np.pad refuses a scalar
            return a.copy()
        return np.pad(a, list(zip(low, high)), constant_values=attr_to_value(self.attributes["value"]))

    def fold_identity(self, constants):
        if any(_int_list(self.attributes, "low")) or any(_int_list(self.attributes, "high")):
            return None
        return [self.operands[0]]

    @classmethod
    def build(cls, operand, low, high, value: Attribute):
        return super().build(operand, low=list(low), high=list(high), value=value)

    def vjp(self, b, x, y, g):
        cot = g[0]
        for axis, (lo, hi) in enumerate(zip(_int_list(self.attributes, "low"), _int_list(self.attributes, "high"))):
            if lo or hi:
                cot = grad.take(b, cot, axis, lo, grad.size(b, x[0], axis))
        return [grad.fit(b, cot, x[0])]

    def jvp(self, b, x, y, t):
        # the padding value is a constant: its tangent is zero
        zero = FloatAttr(0.0, x[0].elem)
        return [b.built(PadOp.build(t[0].value, _int_list(self.attributes, "low"),
                                    _int_list(self.attributes, "high"), zero))]


# ---- tensors made from scalars and sizes ---------------------------------------------------------------


class SplatOp(ShapeOp):
    """``graph.splat %x [, %sizes] : f32 to tensor<4x?xf32>``: every element is ``%x``.

    The scalar's type is written too, so that the form is the same as broadcast's
    and the operand's type is visible; each ``?`` takes an index operand.
    """

    name = "graph.splat"
    summary = "A tensor whose elements all equal one scalar."
    example = "%r = graph.splat %x, %n : f32 to tensor<4x?xf32>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if not types:
            raise ShapeError("takes a scalar and one index per dynamic result dimension")
        dst = _tensor(declared, "result")
        if types[0] is not dst.element_type:
            raise ShapeError(f"operand must be a scalar of the element type of {dst}, got {types[0]}")
        _check_sizes(types[1:], dst)
        return dst

    def compute(self, args):
        t = self.results[0].type
        return np.full(_sized_shape(t, args[1:]), args[0], dtype=storage_dtype(t.element_type))

    @classmethod
    def canonicalization_patterns(cls):
        from irc.passes import tensor_algebra as rules

        return (rules.ElementwiseOfExpansions(cls.name),)

    @classmethod
    def build(cls, scalar, type: TensorType, sizes=()):
        return super().build(scalar, *sizes, type=type)

    def vjp(self, b, x, y, g):
        return [grad.sum_all(b, g[0]), *[None] * (len(x) - 1)]

    def jvp(self, b, x, y, t):
        return [b.splat(t[0], y[0].type, x[1:])]


class IotaOp(TensorOp):
    """``graph.iota [%sizes] {axis = 0} : tensor<4x3xi64>``: each element is its index along ``axis``.

    Written like ``memref.alloc`` without the parentheses: only index operands, one
    per ``?`` of the result.  Integer results wrap at their width.
    """

    name = "graph.iota"
    summary = "A tensor counting 0, 1, 2... along one axis."
    example = "%r = graph.iota %n {axis = 0} : tensor<?xi64>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        dst = _tensor(declared, "result")
        _check_sizes(types, dst)
        _check_element(dst, "iota", "result")
        _axis(_int(attrs, "axis"), dst.rank)
        return dst

    def compute(self, args):
        t = self.results[0].type
        shape = _sized_shape(t, args)
        axis = _int(self.attributes, "axis")
        counts = np.arange(shape[axis], dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(len(shape))])
        return _finish(np.asarray(np.broadcast_to(counts, shape), order="C"), t.element_type)

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if any(type(a) is tuple for a in syn.args):
            raise IRError(f"'{cls.name}' expects '[%sizes] {{axis = N}} : tensor<...>'", syn.loc)
        return cls([ctx.value(a, index) for a in syn.args], [syn.single_type()], syn.attrs)

    def print_custom(self, p) -> None:
        sizes = " " + p.values(self.operands) if self.operands else ""
        p.write(f"{sizes}{_attr_text(p, self.attributes)} : {self.results[0].type}")

    @classmethod
    def build(cls, type: TensorType, axis: int, sizes=()):
        return super().build(*sizes, type=type, axis=axis)


class GatherOp(NaryOp):
    """``graph.gather %table, %idx {axis = 0} : (tensor<100x8xf32>, tensor<2x5xi64>) -> tensor<2x5x8xf32>``.

    numpy's ``take(table, idx, axis)``: the result's dimensions are the table's before
    ``axis``, the indices', then the table's after ``axis``; each index picks one slice of
    the table along ``axis`` (an embedding lookup is axis 0).  Indices are integers in
    [0, size); one out of range is an error, in the interpreter and in compiled code alike.
    """

    name = "graph.gather"
    summary = "Slices of a tensor picked along one axis by a tensor of integer indices (numpy's take)."
    example = ("%r = graph.gather %mat, %ids {axis = 0} : (tensor<3x4xf32>, tensor<5xi64>) "
               "-> tensor<5x4xf32>")

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if len(types) != 2:
            raise ShapeError(f"takes a table and indices, got {len(types)} operands")
        table, idx = _tensor(types[0], "table"), _tensor(types[1], "indices")
        if not isinstance(idx.element_type, IntegerType) or idx.element_type is i1:
            raise ShapeError(f"indices must be integers (not i1), got {idx}")
        axis = _axis(_int(attrs, "axis"), table.rank)
        return table.with_shape([*table.shape[:axis], *idx.shape, *table.shape[axis + 1:]])

    def compute(self, args):
        table, idx = args
        axis = _int(self.attributes, "axis")
        n = table.shape[axis]
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise Fault(f"an index is out of range [0, {n}) for axis {axis} of shape {_dims(table.shape)}")
        return np.take(table, idx.astype(np.int64), axis=axis)

    def jvp(self, b, x, y, t):
        return [b.tensor_op(self.name, t[0], x[1], axis=_int(self.attributes, "axis"))]

    def vjp(self, b, x, y, g):
        """``g``'s slices added back where they were read: ``graph.scatter_add`` (graph_scatter.py)."""
        zeros = b.zeros_like(x[0])
        return [b.tensor_op("graph.scatter_add", zeros, x[1], g[0], axis=_int(self.attributes, "axis")), None]


# ---- softmax --------------------------------------------------------------------------------------------


class SoftmaxFamily(SameTypeOp):
    """exp(x - max) normalised along ``axis``, computed in f64 with the max subtracted
    (so it never overflows) and rounded once to the element type."""

    @staticmethod
    def normalise(x: np.ndarray, shifted: np.ndarray, total: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def infer_type(cls, types, attrs, declared):
        t = _one(types)
        _check_element(t, "float")
        _axis(_int(attrs, "axis"), t.rank)
        return t

    def compute(self, args):
        axis = _int(self.attributes, "axis")
        x = args[0].astype(np.float64)
        shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
        total = np.sum(np.exp(shifted), axis=axis, keepdims=True)
        return _finish(self.normalise(x, shifted, total), self.results[0].type.element_type)

    @classmethod
    def build(cls, operand, axis: int):
        return super().build(operand, axis=axis)


class SoftmaxOp(SoftmaxFamily):
    """``graph.softmax %a {axis = 1} : tensor<3x4xf32>``: exp(x) / sum(exp(x)) along ``axis``."""

    name = "graph.softmax"
    summary = "Softmax along an axis (numerically stable)."
    example = "%r = graph.softmax %mat {axis = 1} : tensor<3x4xf32>"
    normalise = staticmethod(lambda x, shifted, total: np.exp(shifted) / total)

    # J = diag(y) - y y^T along the axis, symmetric: both modes are y * (v - sum(v * y)).
    def vjp(self, b, x, y, g):
        return [y[0] * (g[0] - grad.axis_sum(b, g[0] * y[0], _int(self.attributes, "axis")))]

    jvp = vjp


class LogSoftmaxOp(SoftmaxFamily):
    """``graph.log_softmax %a {axis = 1} : tensor<3x4xf32>``: x - log(sum(exp(x))) along
    ``axis``, without forming the softmax (whose log underflows to -inf)."""

    name = "graph.log_softmax"
    summary = "The logarithm of the softmax along an axis (numerically stable)."
    example = "%r = graph.log_softmax %mat {axis = 1} : tensor<3x4xf32>"
    normalise = staticmethod(lambda x, shifted, total: shifted - np.log(total))

    # J = I - softmax(x) 1^T along the axis: no log and no division, only the softmax.
    def vjp(self, b, x, y, g):
        axis = _int(self.attributes, "axis")
        return [g[0] - b.softmax(x[0], axis) * grad.axis_sum(b, g[0], axis)]

    def jvp(self, b, x, y, t):
        axis = _int(self.attributes, "axis")
        return [t[0] - grad.axis_sum(b, b.softmax(x[0], axis) * t[0], axis)]
