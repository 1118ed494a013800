"""An aten FX graph (after aot_autograd's decompositions) as one irc function.

``convert(gm, inputs)`` builds ``func.func @graph`` for the concrete inputs (torch tensors
and Python ints for symbolic sizes): every placeholder tensor is a parameter, every
``call_function`` node one entry of ``CONVERTERS`` that builds irc ops through the
``Builder``; sizes (``sym_size``, ``operator.mul`` on them) are evaluated in Python, so a
graph that dynamo traced with symbolic shapes becomes one function per concrete shape.

A node whose target has no converter, or a form a converter does not take, raises
``Unsupported`` naming the op and why: the caller runs the graph in torch instead.  After
each node the converted value's shape and element type are compared with the node's
``meta['val']`` (the fake tensor aot_autograd traced), so a converter that disagrees with
torch about a shape is an ``Unsupported``, never a wrong answer.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np
import torch

from irc.attributes import FloatAttr
from irc.builder import Builder, Listener, V
from irc.dialects import graph as T
from irc.dialects import tensor_grad as grad
from irc.types import FloatType, IntegerType, TensorType, Type, f32, f64, i1, i8, i16, i32, i64

aten = torch.ops.aten
prims = torch.ops.prims


class Unsupported(Exception):
    """A node irc does not compile: ``op`` is its target's name, ``why`` the reason."""

    def __init__(self, op: str, why: str):
        super().__init__(f"{op}: {why}")
        self.op = op
        self.why = why


TORCH_TYPES = {torch.float32: f32, torch.float64: f64, torch.int64: i64, torch.int32: i32,
               torch.int16: i16, torch.int8: i8, torch.bool: i1}


def irc_type(dtype) -> Type:
    try:
        return TORCH_TYPES[dtype]
    except KeyError:
        raise Unsupported("dtype", f"irc has no element type for {dtype}") from None


class Empty:
    """A tensor with no elements (batch norm's saved statistics in eval): made by torch."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


CONVERTERS: dict = {}
"""aten/prims overload (or Python function) -> ``convert(cx, node, *args, **kwargs)``."""


def converts(*targets) -> Callable:
    def register(fn):
        for t in targets:
            CONVERTERS[t] = fn
        return fn

    return register


def op_name(target) -> str:
    return str(getattr(target, "__name__", target)) if not hasattr(target, "_schema") else str(target)


class Converter:
    """The state of one conversion: the builder and the value of each node."""

    def __init__(self, b: Builder):
        self.b = b
        self.node = None

    def fail(self, why: str):
        raise Unsupported(op_name(self.node.target), why)

    def out_type(self, k: int | None = None) -> Type:
        """The element type torch gives the current node's result (``k``-th for a tuple)."""
        val = self.node.meta.get("val")
        if k is not None:
            val = val[k]
        return irc_type(val.dtype)


def _shape_of(val) -> tuple | None:
    """The static shape of a fake tensor, None where a size is symbolic."""
    shape = tuple(val.shape)
    return shape if all(type(d) is int for d in shape) else None


def check(cx: Converter, value, val) -> None:
    """The converted ``value`` against torch's ``val`` (a fake tensor, or a tuple of them)."""
    if isinstance(val, (list, tuple)):
        if isinstance(value, (list, tuple)):
            for v, t in zip(value, val):
                check(cx, v, t)
        return
    if not isinstance(val, torch.Tensor) or not isinstance(value, V):
        return
    shape = _shape_of(val)
    if shape is not None and value.shape != shape:
        cx.fail(f"irc made shape {list(value.shape)} where torch has {list(shape)} (a converter bug)")
    if value.elem is not irc_type(val.dtype):
        cx.fail(f"irc made {value.elem} where torch has {val.dtype} (a converter bug)")


# ---- helpers ----------------------------------------------------------------------------------------


def is_v(x) -> bool:
    return isinstance(x, V)


def tensor_type(shape, elem: Type) -> TensorType:
    return TensorType(list(shape), elem)


def convert_to(cx: Converter, x, elem: Type):
    """``x`` with element type ``elem`` (Python numbers stay numbers)."""
    if not is_v(x):
        return x
    return cx.b.convert(x, elem)


def common_type(*xs) -> Type:
    """torch's type promotion, for the element types irc has: a float tensor wins, then a
    Python float (default dtype f32), then the widest integer tensor."""
    elems = [x.elem for x in xs if is_v(x)]
    floats = [e for e in elems if isinstance(e, FloatType)]
    if floats:
        return max(floats, key=lambda e: e.width)
    if any(isinstance(x, float) for x in xs):
        return f32
    ints = [e for e in elems if isinstance(e, IntegerType)]
    if any(isinstance(x, int) and not isinstance(x, bool) for x in xs) and all(e is i1 for e in ints):
        return i64
    return max(ints, key=lambda e: e.width)


def as_scalar(x, elem: Type):
    if isinstance(elem, FloatType):
        return float(x)
    if elem is i1:
        return bool(x)
    return int(x)


def broadcast(cx: Converter, x, shape) -> V:
    b = cx.b
    if is_v(x) and x.shape == tuple(shape):
        return x
    return b.broadcast_to(x, tensor_type(shape, x.elem))


def reshape(cx: Converter, x: V, shape) -> V:
    shape = [int(d) for d in shape]
    if x.shape == tuple(shape):
        return x
    return cx.b.reshape(x, shape)


def resolve_shape(shape, numel: int) -> list[int]:
    shape = [int(d) for d in shape]
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return shape


def dims(dim, rank: int) -> list[int]:
    if dim is None:
        return list(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % max(rank, 1) for d in dim}) if rank else []


def const(cx: Converter, array, elem: Type) -> V:
    array = np.asarray(array)
    return cx.b.const(array, tensor_type(array.shape, elem))


# ---- elementwise --------------------------------------------------------------------------------


def binary(cx: Converter, a, b, fn) -> V:
    """``fn(a, b)`` after promotion to the common type, broadcast as torch does."""
    elem = common_type(a, b)
    a, b = convert_to(cx, a, elem), convert_to(cx, b, elem)
    if not is_v(a) and not is_v(b):
        cx.fail("both operands are numbers")
    if not is_v(a):
        a = cx.b.const(as_scalar(a, elem), elem)
    if not is_v(b):
        b = cx.b.const(as_scalar(b, elem), elem)
    return convert_to(cx, fn(a, b), cx.out_type())


@converts(aten.add.Tensor, aten.add.Scalar)
def _add(cx, node, a, b, alpha=1):
    if alpha != 1:
        b = binary(cx, b, alpha, operator.mul) if is_v(b) else b * alpha
    return binary(cx, a, b, operator.add)


@converts(aten.sub.Tensor, aten.sub.Scalar)
def _sub(cx, node, a, b, alpha=1):
    if alpha != 1:
        b = binary(cx, b, alpha, operator.mul) if is_v(b) else b * alpha
    return binary(cx, a, b, operator.sub)


@converts(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(cx, node, a, b, alpha=1):
    return _sub(cx, node, b, a, alpha)


@converts(aten.mul.Tensor, aten.mul.Scalar)
def _mul(cx, node, a, b):
    if cx.out_type() is i1:
        return binary(cx, a, b, operator.and_)
    return binary(cx, a, b, operator.mul)


@converts(aten.div.Tensor, aten.div.Scalar, prims.div.default)
def _div(cx, node, a, b):
    out = cx.out_type()
    if not isinstance(out, FloatType):
        cx.fail("integer division (irc's divsi truncates; torch's true division gives floats)")
    return binary(cx, convert_to(cx, a, out), convert_to(cx, b, out), operator.truediv)


@converts(aten.maximum.default)
def _maximum(cx, node, a, b):
    return binary(cx, a, b, lambda x, y: x.maximum(y))


@converts(aten.minimum.default)
def _minimum(cx, node, a, b):
    return binary(cx, a, b, lambda x, y: x.minimum(y))


def _compare(predicate: str):
    def convert(cx, node, a, b):
        elem = common_type(a, b)
        a, b = convert_to(cx, a, elem), convert_to(cx, b, elem)
        if not is_v(a):
            a, b, flipped = b, a, True
        else:
            flipped = False
        pred = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}.get(predicate, predicate) if flipped else predicate
        if not is_v(b):
            b = as_scalar(b, elem)
        return cx.b.compare(pred, a, b)

    return convert


for _pred in ("eq", "ne", "lt", "le", "gt", "ge"):
    converts(getattr(aten, _pred).Tensor, getattr(aten, _pred).Scalar)(_compare(_pred))


def _float_unary(method: str):
    def convert(cx, node, x):
        out = cx.out_type()
        if not isinstance(out, FloatType):
            cx.fail(f"{method} of a {out} tensor")
        return getattr(convert_to(cx, x, out), method)()

    return convert


for _target, _method in ((aten.exp, "exp"), (aten.log, "log"), (aten.sqrt, "sqrt"), (aten.rsqrt, "rsqrt"),
                         (aten.tanh, "tanh"), (aten.erf, "erf"), (aten.sin, "sin"), (aten.cos, "cos"),
                         (aten.log1p, "log1p"), (aten.expm1, "expm1"), (aten.floor, "floor"),
                         (aten.ceil, "ceil"), (aten.exp2, "exp2"), (aten.log2, "log2")):
    converts(_target.default)(_float_unary(_method))


@converts(aten.abs.default)
def _abs(cx, node, x):
    return x.abs() if x.is_float else x.maximum(-x)


@converts(aten.neg.default)
def _neg(cx, node, x):
    return -x


@converts(aten.sigmoid.default)
def _sigmoid(cx, node, x):
    return 1.0 / ((-x).exp() + 1.0)


@converts(aten.reciprocal.default)
def _reciprocal(cx, node, x):
    return 1.0 / convert_to(cx, x, cx.out_type())


@converts(aten.relu.default)
def _relu(cx, node, x):
    return x.maximum(0.0 if x.is_float else 0)


@converts(aten.pow.Tensor_Scalar)
def _pow(cx, node, x, e):
    """Small integer powers as products (exact, and right for negative bases, which a
    ``powf`` through exp/log is not); others as ``math.powf``."""
    x = convert_to(cx, x, cx.out_type())
    if float(e) == int(e) and 0 <= abs(int(e)) <= 4:
        n = abs(int(e))
        if n == 0:
            return cx.b.ones_like(x)
        r = x
        for _ in range(n - 1):
            r = r * x
        return r if e > 0 else 1.0 / r
    if float(e) == 0.5:
        return x.sqrt()
    return x ** float(e)


@converts(aten.pow.Tensor_Tensor)
def _pow_tensors(cx, node, x, e):
    return binary(cx, x, e, operator.pow)


@converts(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(cx, node, c, a, b):
    shape = _shape_of(node.meta["val"])
    elem = cx.out_type()
    a, b = convert_to(cx, a, elem), convert_to(cx, b, elem)
    a = a if is_v(a) else cx.b.const(as_scalar(a, elem), elem)
    b = b if is_v(b) else cx.b.const(as_scalar(b, elem), elem)
    if shape is None:
        shape = np.broadcast_shapes(c.shape, a.shape if is_v(a) else (), b.shape if is_v(b) else ())
    return cx.b.select(broadcast(cx, c, shape), broadcast(cx, a, shape), broadcast(cx, b, shape))


@converts(aten.logical_not.default, aten.bitwise_not.default)
def _not(cx, node, x):
    if x.elem is not i1:
        x = x.ne(0)
    return cx.b.binary(None, "arith.xori", x, True)


def _logical(op_name_: str):
    def convert(cx, node, a, b):
        a = a if a.elem is i1 else a.ne(0)
        b = b if b.elem is i1 else b.ne(0)
        return binary(cx, a, b, lambda x, y: cx.b.binary(None, op_name_, x, y))

    return convert


converts(aten.logical_and.default, aten.bitwise_and.Tensor)(_logical("arith.andi"))
converts(aten.logical_or.default, aten.bitwise_or.Tensor)(_logical("arith.ori"))


@converts(aten._to_copy.default, prims.convert_element_type.default)
def _to_copy(cx, node, x, dtype=None, **kwargs):
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        cx.fail(f"a copy to {device}")
    return convert_to(cx, x, cx.out_type())


@converts(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
          aten.contiguous.default, aten._assert_tensor_metadata.default)
def _identity(cx, node, x, *args, **kwargs):
    return x


# ---- reductions -------------------------------------------------------------------------------------


def _reduction(kind: str):
    def convert(cx, node, x, dim=None, keepdim=False, *, dtype=None):
        axes = dims(dim if dim != [] else None, len(x.shape))
        out = cx.out_type()
        if kind != "max" and kind != "min":
            x = convert_to(cx, x, out)
        elif x.elem is i1:
            return convert_to(cx, cx.b.reduce(kind, x.astype(i8), axes, keepdim), i1)
        return cx.b.reduce(kind, x, axes, keepdim)

    return convert


converts(aten.sum.dim_IntList, aten.sum.default)(_reduction("sum"))
converts(aten.mean.dim, aten.mean.default)(_reduction("mean"))
converts(aten.amax.default)(_reduction("max"))
converts(aten.amin.default)(_reduction("min"))
converts(aten.prod.dim_int)(_reduction("prod"))


@converts(prims.sum.default)
def _prims_sum(cx, node, x, dims_, output_dtype=None):
    return _reduction("sum")(cx, node, x, list(dims_))


@converts(aten.any.dim, aten.any.dims, aten.any.default)
def _any(cx, node, x, dim=None, keepdim=False):
    x = x if x.elem is i1 else x.ne(0)
    axes = dims(dim, len(x.shape))
    return cx.b.reduce("max", x.astype(i8), axes, keepdim).ne(0)


@converts(aten.var_mean.correction, aten.var.correction)
def _var_mean(cx, node, x, dim=None, *, correction=None, keepdim=False):
    axes = dims(dim, len(x.shape))
    mean = cx.b.reduce("mean", x, axes, True)
    d = x - mean
    count = math.prod(x.shape[a] for a in axes)
    c = 1 if correction is None else correction
    var = cx.b.reduce("sum", d * d, axes, keepdim) / float(max(count - c, 0))
    if node.target is aten.var.correction:
        return var
    return var, (mean if keepdim else reshape(cx, mean, var.shape))


@converts(prims.var.default)
def _prims_var(cx, node, x, dims_, correction=1, output_dtype=None):
    return _var_only(cx, x, list(dims_), correction)


def _var_only(cx, x, axes, correction):
    mean = cx.b.reduce("mean", x, axes, True)
    d = x - mean
    count = math.prod(x.shape[a] for a in axes)
    return cx.b.reduce("sum", d * d, axes, False) / float(max(count - correction, 0))


@converts(aten._softmax.default)
def _softmax(cx, node, x, dim, half_to_float=False):
    return x.softmax(dim % len(x.shape))


@converts(aten._log_softmax.default)
def _log_softmax(cx, node, x, dim, half_to_float=False):
    return x.log_softmax(dim % len(x.shape))


# ---- matrix products --------------------------------------------------------------------------------


@converts(aten.mm.default, aten.bmm.default)
def _mm(cx, node, a, b):
    return cx.b.matmul(a, b)


@converts(aten.addmm.default)
def _addmm(cx, node, bias, a, b, *, beta=1, alpha=1):
    prod = cx.b.matmul(a, b)
    if alpha != 1:
        prod = prod * float(alpha)
    if beta != 1:
        bias = bias * float(beta)
    return prod + bias


# ---- shapes and data movement ------------------------------------------------------------------


@converts(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(cx, node, x, shape):
    return reshape(cx, x, resolve_shape(shape, math.prod(x.shape)))


@converts(aten.permute.default)
def _permute(cx, node, x, perm):
    rank = len(x.shape)
    return cx.b.transpose(x, [p % rank for p in perm])


@converts(aten.t.default)
def _t(cx, node, x):
    return cx.b.transpose(x, list(reversed(range(len(x.shape)))))


@converts(aten.transpose.int)
def _transpose(cx, node, x, d0, d1):
    rank = len(x.shape)
    perm = list(range(rank))
    perm[d0 % rank], perm[d1 % rank] = perm[d1 % rank], perm[d0 % rank]
    return cx.b.transpose(x, perm)


@converts(aten.unsqueeze.default)
def _unsqueeze(cx, node, x, dim):
    shape = list(x.shape)
    shape.insert(dim % (len(shape) + 1), 1)
    return reshape(cx, x, shape)


@converts(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, prims.squeeze.default)
def _squeeze(cx, node, x, dim=None):
    drop = dims(dim, len(x.shape))
    return reshape(cx, x, [d for i, d in enumerate(x.shape) if not (i in drop and d == 1)])


@converts(aten.expand.default)
def _expand(cx, node, x, sizes, *, implicit=False):
    offset = len(sizes) - len(x.shape)
    shape = [x.shape[i - offset] if s == -1 else int(s) for i, s in enumerate(sizes)]
    return broadcast(cx, x, shape)


@converts(prims.broadcast_in_dim.default)
def _broadcast_in_dim(cx, node, x, shape, broadcast_dimensions):
    shape = [int(s) for s in shape]
    placed = [1] * len(shape)
    for d, k in zip(x.shape, broadcast_dimensions):
        placed[k] = d
    return broadcast(cx, reshape(cx, x, placed), shape)


@converts(aten.cat.default)
def _cat(cx, node, tensors, dim=0):
    tensors = [t for t in tensors if not (len(t.shape) == 1 and t.shape[0] == 0)]
    rank = len(tensors[0].shape)
    elem = cx.out_type()
    tensors = [convert_to(cx, t, elem) for t in tensors if t.shape[dim % rank] != 0] or tensors[:1]
    if len(tensors) == 1:
        return tensors[0]
    return cx.b.tensor_op("graph.concat", *tensors, axis=dim % rank)


def _slice(cx, x, dim, start, end, step=1) -> V:
    rank = len(x.shape)
    dim %= rank
    n = x.shape[dim]
    start, end, step = slice(start, end, step).indices(n)
    size = max(0, -(-(end - start) // step))
    offsets = [0] * rank
    offsets[dim] = start if size else 0
    sizes = list(x.shape)
    sizes[dim] = size
    strides = [1] * rank
    strides[dim] = step
    if size == n and step == 1:
        return x
    return cx.b.built(T.SliceOp.build(x.value, offsets, sizes, strides))


@converts(aten.slice.Tensor)
def _slice_tensor(cx, node, x, dim=0, start=None, end=None, step=1):
    if step < 1:
        cx.fail(f"step {step}")
    return _slice(cx, x, dim, start, end, step)


@converts(aten.select.int)
def _select(cx, node, x, dim, index):
    dim %= len(x.shape)
    index %= x.shape[dim]
    piece = _slice(cx, x, dim, index, index + 1)
    return reshape(cx, piece, [d for i, d in enumerate(x.shape) if i != dim])


@converts(aten.split_with_sizes.default)
def _split_with_sizes(cx, node, x, sizes, dim=0):
    out, offset = [], 0
    for s in sizes:
        out.append(_slice(cx, x, dim, offset, offset + s))
        offset += s
    return tuple(out)


@converts(aten.split.Tensor)
def _split(cx, node, x, size, dim=0):
    n = x.shape[dim % len(x.shape)]
    return _split_with_sizes(cx, node, x, [min(size, n - k) for k in range(0, n, size)], dim)


@converts(aten.index.Tensor)
def _index(cx, node, x, indices):
    """``x[..., i, j, ...]`` with integer index tensors on adjacent dimensions (an embedding
    lookup is one on dimension 0): one ``graph.gather`` along the indexed dimensions taken
    as one, at the flat position the broadcast indices give (negative ones count from the end)."""
    used = [k for k, i in enumerate(indices) if i is not None]
    if not used or used != list(range(used[0], used[-1] + 1)) or any(indices[k].elem is i1 for k in used):
        cx.fail("only integer index tensors on adjacent dimensions (no masks)")
    first, last = used[0], used[-1] + 1
    shape = list(x.shape)
    block = shape[first:last]
    bshape = list(np.broadcast_shapes(*[indices[k].shape for k in used]))
    flat_index = None
    for k in used:
        idx = convert_to(cx, indices[k], i64)
        n = shape[k]
        idx = cx.b.select(idx < 0, idx + n, idx)
        term = broadcast(cx, idx * math.prod(shape[k + 1:last]), bshape)
        flat_index = term if flat_index is None else flat_index + term
    table = reshape(cx, x, [*shape[:first], math.prod(block), *shape[last:]])
    return cx.b.tensor_op("graph.gather", table, flat_index, axis=first)


@converts(aten.gather.default)
def _torch_gather(cx, node, x, dim, index, sparse_grad=False):
    """torch.gather (``out[i][j] = x[i][index[i][j]]`` for dim 1) as one ``graph.gather`` of the
    flattened ``x`` at flat positions: ``index`` times the stride of ``dim``, plus each other
    dimension's position times its stride."""
    rank = len(x.shape)
    dim %= max(rank, 1)
    strides = [math.prod(x.shape[d + 1:]) for d in range(rank)]
    offsets = np.zeros(index.shape, np.int64)
    for d in range(rank):
        if d != dim:
            shape = [1] * rank
            shape[d] = index.shape[d]
            offsets = offsets + np.arange(index.shape[d]).reshape(shape) * strides[d]
    flat_index = convert_to(cx, index, i64) * strides[dim] + const(cx, offsets, i64)
    flat = reshape(cx, x, [math.prod(x.shape)])
    return cx.b.tensor_op("graph.gather", flat, flat_index, axis=0)


@converts(aten.index_put.default)
def _index_put(cx, node, x, indices, values, accumulate=False):
    """``x.index_put_(indices, v, accumulate=True)`` (the gradient of an embedding lookup or
    of ``x[i]``) with integer index tensors on adjacent dimensions: one ``graph.scatter_add``
    along the indexed dimensions taken as one, at the flat positions ``_index`` gathers from
    (repeated indices add up, in index order)."""
    if not accumulate:
        cx.fail("index_put without accumulate (its result depends on which duplicate index wins)")
    used = [k for k, i in enumerate(indices) if i is not None]
    if not used or used != list(range(used[0], used[-1] + 1)) or any(indices[k].elem is i1 for k in used):
        cx.fail("only integer index tensors on adjacent dimensions (no masks)")
    first, last = used[0], used[-1] + 1
    shape = list(x.shape)
    bshape = list(np.broadcast_shapes(*[indices[k].shape for k in used]))
    flat_index = None
    for k in used:
        idx = convert_to(cx, indices[k], i64)
        idx = cx.b.select(idx < 0, idx + shape[k], idx)
        term = broadcast(cx, idx * math.prod(shape[k + 1:last]), bshape)
        flat_index = term if flat_index is None else flat_index + term
    table = reshape(cx, x, [*shape[:first], math.prod(shape[first:last]), *shape[last:]])
    updates = broadcast(cx, convert_to(cx, values, x.elem), [*shape[:first], *bshape, *shape[last:]])
    total = cx.b.tensor_op("graph.scatter_add", table, flat_index, updates, axis=first)
    return reshape(cx, total, shape)


@converts(aten.clamp.default, aten.clamp.Tensor)
def _clamp(cx, node, x, min=None, max=None):  # noqa: A002 - torch's names
    if min is not None:
        x = binary(cx, x, min, lambda a, b: a.maximum(b))
    if max is not None:
        x = binary(cx, x, max, lambda a, b: a.minimum(b))
    return x


@converts(aten.embedding.default)
def _embedding(cx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return cx.b.tensor_op("graph.gather", weight, convert_to(cx, indices, i64), axis=0)


@converts(aten.index_select.default)
def _index_select(cx, node, x, dim, index):
    return cx.b.tensor_op("graph.gather", x, convert_to(cx, index, i64), axis=dim % len(x.shape))


@converts(aten.constant_pad_nd.default)
def _pad(cx, node, x, pad, value=0):
    rank = len(x.shape)
    low, high = [0] * rank, [0] * rank
    for k in range(len(pad) // 2):
        low[rank - 1 - k], high[rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if min(low + high) < 0:
        cx.fail("negative padding")
    attr = FloatAttr(float(value), x.elem) if x.is_float else None
    if attr is None:
        cx.fail("padding of an integer tensor")
    return cx.b.built(T.PadOp.build(x.value, low, high, attr))


# ---- tensors made from nothing ----------------------------------------------------------------------


def _full(cx, shape, value) -> V:
    elem = cx.out_type()
    return cx.b.const(as_scalar(value, elem), tensor_type([int(s) for s in shape], elem))


@converts(aten.full.default)
def _full_default(cx, node, size, value, **kwargs):
    return _full(cx, size, value)


@converts(aten.zeros.default, aten.new_zeros.default, aten.empty.memory_format, aten.new_empty.default,
          aten.empty_strided.default)
def _zeros(cx, node, *args, **kwargs):
    shape = _shape_of(node.meta["val"])
    if shape is None:
        cx.fail("symbolic size")
    if math.prod(shape) == 0:
        return Empty(shape, node.meta["val"].dtype)
    return _full(cx, shape, 0)


@converts(aten.ones.default, aten.new_ones.default)
def _ones(cx, node, *args, **kwargs):
    return _full(cx, _shape_of(node.meta["val"]), 1)


@converts(aten.full_like.default)
def _full_like(cx, node, x, value, **kwargs):
    return _full(cx, x.shape, value)


@converts(aten.zeros_like.default)
def _zeros_like(cx, node, x, **kwargs):
    return _full(cx, x.shape, 0)


@converts(aten.ones_like.default)
def _ones_like(cx, node, x, **kwargs):
    return _full(cx, x.shape, 1)


@converts(aten.scalar_tensor.default)
def _scalar_tensor(cx, node, value, **kwargs):
    return _full(cx, [], value)


@converts(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(cx, node, *args, **kwargs):
    start, end, step = 0, None, 1
    if len(args) == 1:
        end = args[0]
    else:
        start, end = args[0], args[1]
        step = args[2] if len(args) > 2 else 1
    dtype = node.meta["val"].dtype
    return const(cx, torch.arange(start, end, step, dtype=dtype).numpy(), cx.out_type())


# ---- convolution ---------------------------------------------------------------------------------


def _conv_form(cx, x, w, stride, padding, dilation, output_padding):
    """The convolution's operands and window as 2-d ones: a 1-d convolution gets a height of 1."""
    if len(x.shape) == 3:
        x = reshape(cx, x, [x.shape[0], x.shape[1], 1, x.shape[2]])
        w = reshape(cx, w, [w.shape[0], w.shape[1], 1, w.shape[2]])
        return x, w, [1, stride[0]], [0, padding[0]], [1, dilation[0]], [0, output_padding[0]]
    if len(x.shape) != 4:
        cx.fail(f"{len(x.shape) - 2}-d convolution")
    return x, w, list(stride), list(padding), list(dilation), list(output_padding)


def _spread(cx, v, axis: int, step: int) -> V:
    """``step - 1`` zeros between neighbours along ``axis`` (length (n - 1) * step + 1)."""
    if step == 1:
        return v
    return grad.window(cx.b, grad.dilate(cx.b, v, axis, step), axis, 0, -(step - 1))


def _dilated_kernel(cx, w, dilation) -> V:
    """The kernel of a dilated convolution as an ordinary one: zeros between its taps.

    Exact for finite inputs (the zeros add exact zeros); an infinite input under a gap tap
    makes NaN where torch, which skips the gaps, does not."""
    return _spread(cx, _spread(cx, w, 2, dilation[0]), 3, dilation[1])


def _conv2d(cx, x, w, stride, padding, dilation, transposed, output_padding, groups) -> V:
    """A torch convolution (NCHW input; OIHW weight, or IOHW when ``transposed``) built from
    ``graph.conv2d``: one per group, joined along the channels.  A transposed convolution is
    the ordinary one over the input spread by the stride (zeros between its pixels) and padded
    by ``dilation * (k - 1) - padding`` (plus ``output_padding`` at the end), with the kernel's
    channels swapped and its taps flipped."""
    b = cx.b
    cin = x.shape[1] // groups
    cout = w.shape[0] // groups if not transposed else w.shape[1]
    parts = []
    for g in range(groups):
        xg = _slice(cx, x, 1, g * cin, (g + 1) * cin) if groups > 1 else x
        if not transposed:
            wg = _slice(cx, w, 0, g * cout, (g + 1) * cout) if groups > 1 else w
            parts.append(b.built(T.Conv2DOp.build(xg.value, _dilated_kernel(cx, wg, dilation).value, stride,
                                                  padding)))
            continue
        wg = _slice(cx, w, 0, g * cin, (g + 1) * cin) if groups > 1 else w
        kernel = grad.reverse(b, grad.reverse(b, b.transpose(wg, [1, 0, 2, 3]), 2), 3)
        for axis in (2, 3):
            k, d, p = w.shape[axis], dilation[axis - 2], padding[axis - 2]
            xg = _spread(cx, xg, axis, stride[axis - 2])
            xg = grad.window(b, xg, axis, d * (k - 1) - p, d * (k - 1) - p + output_padding[axis - 2])
        parts.append(b.built(T.Conv2DOp.build(xg.value, _dilated_kernel(cx, kernel, dilation).value, [1, 1],
                                              [0, 0])))
    return parts[0] if len(parts) == 1 else b.tensor_op("graph.concat", *parts, axis=1)


@converts(aten.convolution.default)
def _convolution(cx, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    rank = len(x.shape)
    x4, w4, stride, padding, dilation, output_padding = _conv_form(cx, x, w, stride, padding, dilation,
                                                                   output_padding)
    y = _conv2d(cx, x4, w4, stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        y = y + broadcast(cx, reshape(cx, bias, [1, bias.shape[0], 1, 1]), y.shape)
    if rank == 3:
        y = reshape(cx, y, [y.shape[0], y.shape[1], y.shape[3]])
    return y


class _Recorder(Listener):
    """The ops a builder inserts, in order (``_vjp_of``)."""

    def __init__(self):
        self.ops = []

    def op_inserted(self, op) -> None:
        self.ops.append(op)


def _vjp_of(cx, build, inputs: list, g) -> list:
    """The cotangents of ``inputs`` for ``y = build(*inputs)`` and ``y``'s cotangent ``g``: the
    ops ``build`` makes, differentiated by their own gradient rules in reverse order (the
    forward ops left behind are dead, and go)."""
    from irc.passes.autodiff import apply_vjp

    b = cx.b
    saved, recorder = b.listener, _Recorder()
    b.listener = recorder
    try:
        y = build(*inputs)
    finally:
        b.listener = saved
    cots = {y.value: g}
    for op in reversed(recorder.ops):
        outs = [cots.get(r) for r in op.results]
        if all(c is None for c in outs) or not op.operands:  # a constant: nothing to pass back to
            continue
        grads = apply_vjp(b, op, [V(b, v) for v in op.operands], [V(b, r) for r in op.results], outs)
        for v, d in zip(op.operands, grads):
            if d is not None:
                d = b.wrap(d)
                cots[v] = cots[v] + d if v in cots else d
    return [cots.get(v.value) if cots.get(v.value) is not None else b.zeros_like(v) for v in inputs]


@converts(aten.convolution_backward.default)
def _convolution_backward(cx, node, g, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    """The gradient rules of the ops the forward convolution is built from (``_conv2d``), in reverse."""
    rank = len(x.shape)
    x4, w4, stride, padding, dilation, output_padding = _conv_form(cx, x, w, stride, padding, dilation,
                                                                   output_padding)
    g4 = reshape(cx, g, [g.shape[0], g.shape[1], 1, g.shape[2]]) if rank == 3 else g

    def forward(xv, wv):
        return _conv2d(cx, xv, wv, stride, padding, dilation, transposed, output_padding, groups)

    dx, dw = _vjp_of(cx, forward, [x4, w4], g4)
    dx = reshape(cx, dx, x.shape) if output_mask[0] else None
    dw = reshape(cx, dw, w.shape) if output_mask[1] else None
    db = cx.b.reduce("sum", g, [0, *range(2, rank)]) if output_mask[2] else None
    return dx, dw, db


# ---- attention ----------------------------------------------------------------------------------------


def _bmm(cx, a, b) -> V:
    return cx.b.tensor_op("graph.batch_matmul", a, b)


def _swap(cx, v) -> V:
    rank = len(v.shape)
    return cx.b.transpose(v, [*range(rank - 2), rank - 1, rank - 2])


def _attention_scores(cx, q, k, is_causal, attn_mask, scale) -> V:
    """``q k^T * scale`` plus the mask (additive, or -inf where a boolean mask is false)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = _bmm(cx, q, _swap(cx, k)) * scale
    if attn_mask is not None:
        if attn_mask.elem is i1:
            attn_mask = cx.b.select(broadcast(cx, attn_mask, scores.shape), cx.b.zeros_like(scores),
                            cx.b.full_like(scores, -math.inf))
        scores = scores + broadcast(cx, attn_mask, scores.shape)
    if is_causal:
        l, s = scores.shape[-2:]
        allowed = np.tril(np.ones((l, s), bool))
        scores = scores + broadcast(cx, const(cx, np.where(allowed, 0.0, -np.inf), scores.elem), scores.shape)
    return scores


@converts(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _flash_attention(cx, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    """softmax(q k^T * scale + mask) v, and the log-sum-exp of each row (what the backward reads)."""
    if dropout_p:
        cx.fail(f"dropout {dropout_p}")
    scores = _attention_scores(cx, q, k, is_causal, attn_mask, scale)
    top = scores.max(-1, keepdims=True)
    lse = (scores - top).exp().sum(-1, keepdims=True).log() + top
    probs = (scores - lse).exp()
    return _bmm(cx, probs, v), reshape(cx, lse, lse.shape[:-1])


@converts(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _flash_attention_backward(cx, node, g, q, k, v, out, lse, dropout_p, is_causal, *, attn_mask=None,
                              scale=None):
    """P = exp(scores - lse); dV = P^T dO; dS = P (dO V^T - rowsum(dO * O)); dQ = dS K s; dK = dS^T Q s."""
    if dropout_p:
        cx.fail(f"dropout {dropout_p}")
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = _attention_scores(cx, q, k, is_causal, attn_mask, scale)
    probs = (scores - broadcast(cx, reshape(cx, lse, [*lse.shape, 1]), scores.shape)).exp()
    dv = _bmm(cx, _swap(cx, probs), g)
    dp = _bmm(cx, g, _swap(cx, v))
    row = (g * out).sum(-1, keepdims=True)
    ds = probs * (dp - row)
    return _bmm(cx, ds, k) * s, _bmm(cx, _swap(cx, ds), q) * s, dv


def _linear(cx, x, weight, bias) -> V:
    """``x @ weight^T + bias`` over the last dimension of ``x`` (any leading dimensions)."""
    lead = list(x.shape[:-1])
    flat = reshape(cx, x, [math.prod(lead), x.shape[-1]])
    y = cx.b.matmul(flat, cx.b.transpose(weight, [1, 0]))
    y = y + broadcast(cx, reshape(cx, bias, [1, bias.shape[0]]), y.shape)
    return reshape(cx, y, [*lead, weight.shape[0]])


def _layer_norm(cx, x, weight, bias, eps) -> V:
    """Layer norm over the last dimension (biased variance, as torch)."""
    mean = cx.b.reduce("mean", x, [len(x.shape) - 1], True)
    d = x - broadcast(cx, mean, x.shape)
    var = cx.b.reduce("mean", d * d, [len(x.shape) - 1], True)
    y = d * broadcast(cx, (var + float(eps)).rsqrt(), x.shape)
    row = [1] * (len(x.shape) - 1) + [x.shape[-1]]
    return y * broadcast(cx, reshape(cx, weight, row), x.shape) + broadcast(cx, reshape(cx, bias, row), x.shape)


def _multi_head_attention(cx, x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type):
    """torch's fused self-attention (``_native_multi_head_attention`` on x, x, x): one
    projection to q, k and v, softmax(q k^T / sqrt(d)) v per head with ``mask`` (true: not
    attended; ``mask_type`` 0: [L, S], 1: a key padding mask [B, S], 2: [B, H, L, S]; a row
    with every key masked gives zeros, as torch's masked softmax), then the output projection."""
    n, length, width = x.shape
    head = width // num_heads
    qkv = _linear(cx, x, qkv_weight, qkv_bias)  # [B, L, 3E]

    def heads(k):
        part = _slice(cx, qkv, 2, k * width, (k + 1) * width)
        return cx.b.transpose(reshape(cx, part, [n, length, num_heads, head]), [0, 2, 1, 3])  # [B, H, L, D]

    q, k, v = heads(0), heads(1), heads(2)
    scores = _bmm(cx, q, _swap(cx, k)) * (1.0 / math.sqrt(head))  # [B, H, L, L]
    allowed = None
    if mask is not None:
        if mask_type == 1 or (mask_type is None and list(mask.shape) == [n, length]):
            mask = reshape(cx, mask, [n, 1, 1, length])
        elif len(mask.shape) == 2:
            mask = reshape(cx, mask, [1, 1, *mask.shape])
        mask = broadcast(cx, mask, scores.shape)
        if mask.elem is i1:
            allowed = cx.b.reduce("max", cx.b.select(mask, cx.b.zeros_like(scores), cx.b.ones_like(scores)),
                                  [3], True)
            mask = cx.b.select(mask, cx.b.full_like(scores, -math.inf), cx.b.zeros_like(scores))
        scores = scores + convert_to(cx, mask, scores.elem)
    probs = scores.softmax(3)
    if allowed is not None:  # rows with no key left: zeros, not 0/0
        keep = broadcast(cx, allowed, probs.shape) > 0.0
        probs = cx.b.select(keep, probs, cx.b.zeros_like(probs))
    out = cx.b.transpose(_bmm(cx, probs, v), [0, 2, 1, 3])  # [B, L, H, D]
    return _linear(cx, reshape(cx, out, [n, length, width]), proj_weight, proj_bias)


@converts(aten._transformer_encoder_layer_fwd.default)
def _transformer_encoder_layer(cx, node, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                               use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                               ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """``nn.TransformerEncoderLayer``'s fused inference path (PyTorch's fast path), as its parts:
    self-attention, residual, layer norm, feed-forward (erf GELU or ReLU), residual, layer norm
    (the norms first with ``norm_first``)."""
    if len(src.shape) != 3:
        cx.fail(f"a rank-{len(src.shape)} input (irc takes a batch-first [B, L, E] one)")
    x = _layer_norm(cx, src, norm_weight_1, norm_bias_1, eps) if norm_first else src
    x = _multi_head_attention(cx, x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type)
    x = x + src
    if not norm_first:
        x = _layer_norm(cx, x, norm_weight_1, norm_bias_1, eps)
    residual = x
    if norm_first:
        x = _layer_norm(cx, x, norm_weight_2, norm_bias_2, eps)
    h = _linear(cx, x, ffn_weight_1, ffn_bias_1)
    h = h * 0.5 * ((h * (1 / math.sqrt(2))).erf() + 1.0) if use_gelu else h.maximum(0.0)
    x = _linear(cx, h, ffn_weight_2, ffn_bias_2) + residual
    return x if norm_first else _layer_norm(cx, x, norm_weight_2, norm_bias_2, eps)


# ---- normalisation ---------------------------------------------------------------------------------


@converts(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_eval(cx, node, x, weight, bias, mean, var, momentum, eps):
    shape = [1, x.shape[1]] + [1] * (len(x.shape) - 2)

    def per_channel(v):
        return broadcast(cx, reshape(cx, v, shape), x.shape)

    y = (x - per_channel(mean)) * per_channel((var + float(eps)).rsqrt())
    if weight is not None:
        y = y * per_channel(weight)
    if bias is not None:
        y = y + per_channel(bias)
    empty = Empty((0,), node.meta["val"][1].dtype)
    return y, empty, empty


# ---- pooling ----------------------------------------------------------------------------------------


def _pool_window(cx, x, kernel, stride, padding, dilation=(1, 1), ceil_mode=False):
    kernel = [int(k) for k in kernel] * (2 // len(kernel))
    stride = [int(s) for s in stride] * (2 // len(stride)) if stride else kernel
    padding = [int(p) for p in padding] * (2 // len(padding))
    if any(d != 1 for d in dilation):
        cx.fail(f"dilation {list(dilation)}")
    if len(x.shape) != 4:
        cx.fail(f"rank-{len(x.shape)} input (irc pools NCHW)")
    h, w = x.shape[2:]
    out = [(n + 2 * p - k) // s + 1 for n, k, s, p in zip((h, w), kernel, stride, padding)]
    if ceil_mode:
        ceil = [-(-(n + 2 * p - k) // s) + 1 for n, k, s, p in zip((h, w), kernel, stride, padding)]
        ceil = [c - 1 if (c - 1) * s >= n + p else c for c, s, n, p in zip(ceil, stride, (h, w), padding)]
        if ceil != out:
            cx.fail("ceil_mode that adds a partial window")
    return kernel, stride, padding, out


def _windows(kernel):
    return [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]


def _padded(cx, x, padding, value: float) -> V:
    if not any(padding):
        return x
    low = [0, 0, padding[0], padding[1]]
    return cx.b.built(T.PadOp.build(x.value, low, low, FloatAttr(value, x.elem)))


def _tap(cx, xp, i, j, stride, out) -> V:
    """The input element each output position sees at kernel offset (i, j)."""
    n, c = xp.shape[:2]
    return cx.b.built(T.SliceOp.build(xp.value, [0, 0, i, j], [n, c, *out], [1, 1, *stride]))


def _untap(cx, g, xp, i, j, stride, out) -> V:
    """``g`` put back where ``_tap`` took it from, zeros elsewhere (the slice's gradient rule)."""
    n, c = xp.shape[:2]
    sl = T.SliceOp.build(xp.value, [0, 0, i, j], [n, c, *out], [1, 1, *stride])
    return sl.vjp(cx.b, [xp], None, [g])[0]


def _unpad(cx, v, padding, shape) -> V:
    if not any(padding):
        return v
    return cx.b.built(T.SliceOp.build(v.value, [0, 0, *padding], list(shape)))


def _positions(i, j, stride, padding, out, width) -> np.ndarray:
    """The flat index (row * width + column) in the unpadded input of tap (i, j) per output."""
    rows = np.arange(out[0]) * stride[0] - padding[0] + i
    cols = np.arange(out[1]) * stride[1] - padding[1] + j
    return rows[:, None] * width + cols[None, :]


@converts(aten.max_pool2d_with_indices.default)
def _max_pool(cx, node, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    """torch's max pooling: scanning a window's taps in order, a tap wins if it is greater than
    the running maximum or is NaN; the value and index are the last winner's (the first of
    equal maxima; the last NaN where there is one).  Built as two chains of one result each,
    so that fusion makes each one loop: the value's, and the index's, which is the last NaN
    tap where the maximum is NaN and else the first tap inside the input equal to it.  (A
    running index beside the running maximum would share each comparison between two chains,
    and fusion would store the comparisons and both running values between the taps.)"""
    kernel, stride, padding, out = _pool_window(cx, x, kernel, stride, padding, dilation * 2, ceil_mode)
    xp = _padded(cx, x, padding, -math.inf)
    width = x.shape[3]
    shape = [*x.shape[:2], *out]
    taps = []
    for i, j in _windows(kernel):
        at = _positions(i, j, stride, padding, out, width)
        rows = np.arange(out[0])[:, None] * stride[0] - padding[0] + i + np.zeros_like(at)
        inside = (rows >= 0) & (rows < x.shape[2]) & (at - rows * width >= 0) & (at - rows * width < width)
        taps.append((_tap(cx, xp, i, j, stride, out), broadcast(cx, const(cx, at, i64), shape),
                     None if inside.all() else broadcast(cx, const(cx, inside, i1), shape)))
    best = taps[0][0]
    for v, _, _ in taps[1:]:
        # isnan as 'uno' here and 'une' in the index's chain: CSE would make one op of two
        # identical comparisons, shared by both chains, and fusion would store it
        best = cx.b.select((v > best) | cx.b.compare("uno", v, v), v, best)
    index = taps[-1][1]  # every tap inside the input that holds the maximum, the first kept last
    for v, pos, inside in reversed(taps):
        hit = v.eq(best) if inside is None else v.eq(best) & inside
        index = cx.b.select(hit, pos, index)
    if len(taps) > 1:  # a NaN maximum: the last NaN tap (padding is -inf, never NaN)
        last_nan = taps[0][1]
        for v, pos, _ in taps[1:]:
            last_nan = cx.b.select(v.ne(v), pos, last_nan)
        index = cx.b.select(best.ne(best), last_nan, index)
    return best, index


@converts(aten.max_pool2d_with_indices_backward.default)
def _max_pool_backward(cx, node, g, x, kernel, stride, padding, dilation, ceil_mode, indices):
    kernel, stride, padding, out = _pool_window(cx, x, kernel, stride, padding, dilation * 2, ceil_mode)
    if list(stride) == list(kernel) and not any(padding):
        return _tiled_max_pool_backward(cx, g, indices, kernel, out, x.shape)
    xp = _padded(cx, x, padding, 0.0)
    width = x.shape[3]
    total = None
    zero = cx.b.zeros_like(g)
    for i, j in _windows(kernel):
        pos = broadcast(cx, const(cx, _positions(i, j, stride, padding, out, width), i64), g.shape)
        part = _untap(cx, cx.b.select(indices.eq(pos), g, zero), xp, i, j, stride, out)
        total = part if total is None else total + part
    return _unpad(cx, total, padding, x.shape)


def _tiled_max_pool_backward(cx, g, indices, kernel, out, shape) -> V:
    """Max pooling's gradient where the windows tile the input (stride = kernel, no padding):
    each input element lies in at most one window, so it gets its window's gradient where torch's
    index names it and zero elsewhere.  One elementwise loop over the input's shape (the window's
    gradient and index broadcast over its taps), where the general form builds one padded
    and sliced copy of the input's size per tap."""
    n, c, h, w = shape
    (kh, kw), (oh, ow) = kernel, out
    full = [n, c, oh, kh, ow, kw]
    spread = [n, c, oh, 1, ow, 1]
    rows = np.arange(oh * kh).reshape(oh, kh)
    cols = np.arange(ow * kw).reshape(ow, kw)
    positions = const(cx, rows[:, :, None, None] * w + cols[None, None, :, :], i64)
    hit = broadcast(cx, reshape(cx, indices, spread), full).eq(broadcast(cx, positions, full))
    gs = broadcast(cx, reshape(cx, g, spread), full)
    grads = reshape(cx, cx.b.select(hit, gs, cx.b.zeros_like(gs)), [n, c, oh * kh, ow * kw])
    if (oh * kh, ow * kw) == (h, w):
        return grads
    return cx.b.built(T.PadOp.build(grads.value, [0, 0, 0, 0], [0, 0, h - oh * kh, w - ow * kw],
                                    FloatAttr(0.0, g.elem)))


def _avg_divisor(cx, x, kernel, stride, padding, out, count_include_pad, divisor_override):
    if divisor_override:
        return float(divisor_override)
    if count_include_pad or not any(padding):
        return float(kernel[0] * kernel[1])
    h, w = x.shape[2:]
    rows = np.arange(out[0]) * stride[0] - padding[0]
    cols = np.arange(out[1]) * stride[1] - padding[1]
    nr = np.minimum(rows + kernel[0], h) - np.maximum(rows, 0)
    nc = np.minimum(cols + kernel[1], w) - np.maximum(cols, 0)
    counts = (nr[:, None] * nc[None, :]).astype(np.float32)
    return broadcast(cx, const(cx, counts, x.elem), [*x.shape[:2], *out])


@converts(aten.avg_pool2d.default)
def _avg_pool(cx, node, x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    kernel, stride, padding, out = _pool_window(cx, x, kernel, stride, padding, (1, 1), ceil_mode)
    xp = _padded(cx, x, padding, 0.0)
    total = None
    for i, j in _windows(kernel):
        v = _tap(cx, xp, i, j, stride, out)
        total = v if total is None else total + v
    return total / _avg_divisor(cx, x, kernel, stride, padding, out, count_include_pad, divisor_override)


@converts(aten.avg_pool2d_backward.default)
def _avg_pool_backward(cx, node, g, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    kernel, stride, padding, out = _pool_window(cx, x, kernel, stride, padding, (1, 1), ceil_mode)
    xp = _padded(cx, x, padding, 0.0)
    g = g / _avg_divisor(cx, x, kernel, stride, padding, out, count_include_pad, divisor_override)
    total = None
    for i, j in _windows(kernel):
        part = _untap(cx, g, xp, i, j, stride, out)
        total = part if total is None else total + part
    return _unpad(cx, total, padding, x.shape)


# ---- sizes, evaluated in Python ---------------------------------------------------------------------


@converts(aten.sym_size.int)
def _sym_size(cx, node, x, dim):
    return x.shape[dim]


@converts(aten.sym_numel.default)
def _sym_numel(cx, node, x):
    return math.prod(x.shape)


for _fn in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
            operator.neg, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
            math.ceil, math.floor, torch.sym_max, torch.sym_min, torch.sym_float, torch.sym_int):
    CONVERTERS[_fn] = (lambda f: lambda cx, node, *args: f(*args))(_fn)


@converts(operator.getitem)
def _getitem(cx, node, seq, k):
    return seq[k]


# ---- the graph -------------------------------------------------------------------------------------


def unsupported_ops(gm) -> list[str]:
    """The targets of ``gm``'s nodes that have no converter (before building anything)."""
    missing = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target not in CONVERTERS:
            name = op_name(node.target)
            if name not in missing:
                missing.append(name)
        elif node.op in ("call_module", "call_method"):
            missing.append(f"{node.op} {node.target}")
    return missing


class Graph:
    """An FX graph converted for one set of concrete inputs: the irc module (one function,
    ``graph``, whose parameters are the input tensors) and how to assemble its outputs."""

    def __init__(self, module, params: list[int], outputs: list):
        self.module = module
        self.params = params  # positions of the graph inputs that are the function's parameters
        # per graph output: ("result", k, layout) (see _layout), ("input", i), ("value", v) or ("empty", Empty)
        self.outputs = outputs


def convert(gm, inputs, name: str = "graph") -> Graph:
    """``gm`` (an aten FX graph) for ``inputs`` (tensors and ints): see the module docstring."""
    import torch.fx

    b = Builder()
    module = b.module()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    params = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    types = [tensor_type(inputs[i].shape, irc_type(inputs[i].dtype)) for i in params]
    cx = Converter(b)
    env: dict = {}
    with b.function(module, name, types) as args:
        it = iter(args)
        for node, x in zip(placeholders, inputs):
            env[node] = next(it) if isinstance(x, torch.Tensor) else x
        output = None
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                output = node
                break
            if node.op == "get_attr":
                env[node] = _constant(cx, getattr(gm, node.target))
                continue
            if node.op != "call_function":
                raise Unsupported(f"{node.op} {node.target}", "only aten calls are converted")
            fn = CONVERTERS.get(node.target)
            cx.node = node
            if fn is None:
                cx.fail("irc has no conversion for it")
            args_ = torch.fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = dict(torch.fx.node.map_arg(node.kwargs, lambda n: env[n]))
            kwargs.pop("layout", None), kwargs.pop("pin_memory", None)
            try:
                value = fn(cx, node, *args_, **kwargs)
            except Unsupported:
                raise
            except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError) as e:
                cx.fail(f"{type(e).__name__}: {e}")
            if "val" in node.meta:
                check(cx, value, node.meta["val"])
            env[node] = value
        results, outputs = [], []
        flat = output.args[0]
        for item in (flat if isinstance(flat, (list, tuple)) else [flat]):
            v = env[item] if isinstance(item, torch.fx.Node) else item
            if isinstance(v, V):
                if v.value in [a.value for a in args]:
                    outputs.append(("input", params[[a.value for a in args].index(v.value)]))
                    continue
                layout = _layout(item.meta.get("val")) if isinstance(item, torch.fx.Node) else None
                if isinstance(layout, list):  # computed in the order of torch's layout, viewed back
                    v = cx.b.transpose(v, layout)
                outputs.append(("result", len(results), layout))
                results.append(v)
            elif isinstance(v, Empty):
                outputs.append(("empty", v))
            else:
                outputs.append(("value", v))
        b.ret(*results)
    return Graph(module, params, outputs)


def _layout(val):
    """How torch lays out the output ``val`` (its strides matter to the kernels that read it, as
    flash attention's backward reads the forward's saved tensors): None for row-major; the
    permutation ``p`` when it is row-major in the order of ``p`` (irc computes the transpose by
    ``p`` and the caller views it back without a copy); the strides otherwise (a copy)."""
    if not isinstance(val, torch.Tensor):
        return None
    shape, stride = tuple(val.shape), tuple(val.stride())
    if not all(type(d) is int for d in shape + stride) or val.is_contiguous():
        return None
    order = sorted(range(len(shape)), key=lambda d: -stride[d])
    step = 1
    for d in reversed(order):
        if shape[d] != 1 and stride[d] != step:
            return ("strided", shape, stride)
        step *= shape[d]
    return order


def _constant(cx, value):
    if isinstance(value, torch.Tensor):
        return const(cx, value.detach().numpy(), irc_type(value.dtype))
    return value
