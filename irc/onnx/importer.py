"""ONNX graphs as irc functions; see the package docstring."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from irc.attributes import FloatAttr
from irc.builder import Builder, V
from irc.dialects import graph as T
from irc.types import TensorType, f32, f64, i1, i8, i32, i64


class OnnxImportError(ValueError):
    """A model irc cannot import: the message names the file (and the node and operator)."""


# ONNX TensorProto element types irc has
ELEMENT_TYPES = {1: f32, 11: f64, 7: i64, 6: i32, 3: i8, 9: i1}
NUMPY_TYPES = {1: np.float32, 11: np.float64, 7: np.int64, 6: np.int32, 3: np.int8, 9: np.bool_}

OPERATORS: dict[str, Callable] = {}
"""ONNX operator name -> ``convert(cx, node, inputs, attrs)`` returning the outputs."""


def operator(*names: str):
    def register(fn):
        for name in names:
            OPERATORS[name] = fn
        return fn

    return register


class Unsupported(Exception):
    """A form of an operator irc does not take (its message says which)."""


class Context:
    """One import: the builder, and which initializers are function parameters.

    ``weights`` maps ``id(array)`` of each initializer to its name; an initializer that the
    graph reads as an IR value is recorded in ``read``, and is the parameter ``params[name]``
    where one was made for it (a checkpoint's weights) rather than a constant."""

    def __init__(self, b: Builder, weights: dict | None = None, params: dict | None = None):
        self.b = b
        self.weights = weights or {}
        self.params = params or {}
        self.read: set[str] = set()

    def value(self, x, like: V | None = None) -> V:
        """``x`` as an IR value: an initializer's parameter, or a numpy constant materialised."""
        if isinstance(x, V):
            return x
        name = self.weights.get(id(x))
        if name is not None:
            self.read.add(name)
            if name in self.params:
                return self.params[name]
        a = np.asarray(x)
        elem = ELEMENT_FOR_DTYPE.get(a.dtype.type)
        if elem is None:
            raise Unsupported(f"constants of dtype {a.dtype}")
        return self.b.const(a, TensorType(list(a.shape), elem))


ELEMENT_FOR_DTYPE = {np.float32: f32, np.float64: f64, np.int64: i64, np.int32: i32, np.int8: i8, np.bool_: i1}


def known(*xs) -> bool:
    return all(x is None or isinstance(x, np.ndarray) for x in xs)


def shape_of(x) -> tuple:
    return tuple(x.shape)


# ---- elementwise ------------------------------------------------------------------------------------


def _broadcast_pair(cx, a, b):
    a, b = cx.value(a), cx.value(b)
    shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    return _to(cx, a, shape), _to(cx, b, shape)


def _to(cx, v: V, shape) -> V:
    return v if v.shape == tuple(shape) else cx.b.broadcast_to(v, TensorType(list(shape), v.elem))


def _binary(np_fn, ir_fn):
    def convert(cx, node, inputs, attrs):
        a, b = inputs
        if known(a, b):
            return [np.asarray(np_fn(a, b))]
        return [ir_fn(cx, *_broadcast_pair(cx, a, b))]

    return convert


OPERATORS["Add"] = _binary(np.add, lambda cx, a, b: a + b)
OPERATORS["Sub"] = _binary(np.subtract, lambda cx, a, b: a - b)
OPERATORS["Mul"] = _binary(np.multiply, lambda cx, a, b: a * b)
OPERATORS["Div"] = _binary(lambda a, b: a / b if a.dtype.kind == "f" else a // b,
                           lambda cx, a, b: a / b)
OPERATORS["Equal"] = _binary(np.equal, lambda cx, a, b: a.eq(b))
OPERATORS["Less"] = _binary(np.less, lambda cx, a, b: a < b)
OPERATORS["Greater"] = _binary(np.greater, lambda cx, a, b: a > b)
OPERATORS["Max"] = _binary(np.maximum, lambda cx, a, b: a.maximum(b))
OPERATORS["Min"] = _binary(np.minimum, lambda cx, a, b: a.minimum(b))


@operator("Pow")
def _pow(cx, node, inputs, attrs):
    x, e = inputs
    if known(x, e):
        return [np.power(x, e).astype(x.dtype)]
    if isinstance(e, np.ndarray) and e.size == 1 and float(e) == int(e) and 1 <= int(e) <= 4:
        x = cx.value(x)
        r = x
        for _ in range(int(e) - 1):
            r = r * x
        return [r]
    return [_binary(np.power, lambda cx, a, b: a ** b)(cx, node, [x, e], attrs)[0]]


def _unary(method: str):
    def convert(cx, node, inputs, attrs):
        return [getattr(cx.value(inputs[0]), method)()]

    return convert


for _op, _method in (("Sqrt", "sqrt"), ("Exp", "exp"), ("Log", "log"), ("Tanh", "tanh"), ("Erf", "erf"),
                     ("Abs", "abs"), ("Floor", "floor"), ("Ceil", "ceil"), ("Sin", "sin"), ("Cos", "cos")):
    OPERATORS[_op] = _unary(_method)


@operator("Neg")
def _neg(cx, node, inputs, attrs):
    return [-inputs[0] if known(inputs[0]) else -cx.value(inputs[0])]


@operator("Relu")
def _relu(cx, node, inputs, attrs):
    return [cx.value(inputs[0]).maximum(0.0)]


@operator("Sigmoid")
def _sigmoid(cx, node, inputs, attrs):
    x = cx.value(inputs[0])
    return [1.0 / ((-x).exp() + 1.0)]


@operator("Gelu")
def _gelu(cx, node, inputs, attrs):
    x = cx.value(inputs[0])
    if attrs.get("approximate", "none") == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)
        return [x * 0.5 * (inner.tanh() + 1.0)]
    return [x * 0.5 * ((x * (1 / math.sqrt(2))).erf() + 1.0)]


@operator("Identity", "Dropout")
def _identity(cx, node, inputs, attrs):
    return [inputs[0]]


@operator("Where")
def _where(cx, node, inputs, attrs):
    c, a, b = inputs
    if known(c, a, b):
        return [np.where(c, a, b)]
    c, a, b = cx.value(c), cx.value(a), cx.value(b)
    shape = tuple(np.broadcast_shapes(c.shape, a.shape, b.shape))
    return [cx.b.select(_to(cx, c, shape), _to(cx, a, shape), _to(cx, b, shape))]


@operator("Cast")
def _cast(cx, node, inputs, attrs):
    to = attrs["to"]
    if to not in ELEMENT_TYPES:
        raise Unsupported(f"a cast to ONNX element type {to}")
    if known(inputs[0]):
        return [inputs[0].astype(NUMPY_TYPES[to])]
    return [cx.b.convert(inputs[0], ELEMENT_TYPES[to])]


# ---- reductions and normalisation ----------------------------------------------------------------


def _axes(node_inputs, attrs, rank):
    axes = attrs.get("axes")
    if axes is None and len(node_inputs) > 1 and node_inputs[1] is not None:
        axes = [int(a) for a in node_inputs[1]]
    if axes is None:
        return list(range(rank))
    return sorted(a % rank for a in axes)


def _reduce(kind: str):
    def convert(cx, node, inputs, attrs):
        x = inputs[0]
        keep = bool(attrs.get("keepdims", 1))
        axes = _axes(inputs, attrs, len(shape_of(x)))
        if known(x):
            fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind]
            return [np.asarray(fn(x, axis=tuple(axes), keepdims=keep)).astype(x.dtype)]
        return [cx.b.reduce(kind, cx.value(x), axes, keep)]

    return convert


OPERATORS["ReduceSum"] = _reduce("sum")
OPERATORS["ReduceMean"] = _reduce("mean")
OPERATORS["ReduceMax"] = _reduce("max")
OPERATORS["ReduceMin"] = _reduce("min")


@operator("Softmax", "LogSoftmax")
def _softmax(cx, node, inputs, attrs):
    x = cx.value(inputs[0])
    axis = attrs.get("axis", -1) % len(x.shape)
    return [x.softmax(axis) if node.op_type == "Softmax" else x.log_softmax(axis)]


@operator("LayerNormalization")
def _layer_norm(cx, node, inputs, attrs):
    x = cx.value(inputs[0])
    rank = len(x.shape)
    axes = list(range(attrs.get("axis", -1) % rank, rank))
    mean = x.mean(axes, keepdims=True)
    d = x - _to(cx, mean, x.shape)
    var = (d * d).mean(axes, keepdims=True)
    y = d * _to(cx, (var + float(attrs.get("epsilon", 1e-5))).rsqrt(), x.shape)
    y = y * _to(cx, cx.value(inputs[1]), x.shape)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + _to(cx, cx.value(inputs[2]), x.shape)
    return [y]


@operator("BatchNormalization")
def _batch_norm(cx, node, inputs, attrs):
    if attrs.get("training_mode", 0):
        raise Unsupported("training_mode (irc imports inference graphs)")
    x, scale, bias, mean, var = inputs[:5]
    x = cx.value(x)
    shape = [1, x.shape[1]] + [1] * (len(x.shape) - 2)

    def per_channel(v):
        return _to(cx, cx.b.reshape(cx.value(v), shape), x.shape)

    eps = float(attrs.get("epsilon", 1e-5))
    y = (x - per_channel(mean)) * per_channel((cx.value(var) + eps).rsqrt())
    return [y * per_channel(scale) + per_channel(bias)]


# ---- matrix products and convolution ---------------------------------------------------------------


@operator("MatMul")
def _matmul(cx, node, inputs, attrs):
    a, b = cx.value(inputs[0]), cx.value(inputs[1])
    if len(a.shape) == 2 and len(b.shape) == 2:
        return [cx.b.matmul(a, b)]
    if len(b.shape) == 2:  # [..., K] @ [K, N]: one matrix product over the flattened rows
        rows = math.prod(a.shape[:-1])
        y = cx.b.matmul(cx.b.reshape(a, [rows, a.shape[-1]]), b)
        return [cx.b.reshape(y, [*a.shape[:-1], b.shape[1]])]
    rank = max(len(a.shape), len(b.shape))
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a = _to(cx, a, (*batch, *a.shape[-2:])) if len(a.shape) == rank and a.shape[:-2] == batch else \
        cx.b.broadcast_to(a, TensorType([*batch, *a.shape[-2:]], a.elem))
    b = cx.b.broadcast_to(b, TensorType([*batch, *b.shape[-2:]], b.elem)) if b.shape[:-2] != batch else b
    return [cx.b.tensor_op("graph.batch_matmul", a, b)]


@operator("Gemm")
def _gemm(cx, node, inputs, attrs):
    a, b = cx.value(inputs[0]), cx.value(inputs[1])
    if attrs.get("transA", 0):
        a = cx.b.transpose(a, [1, 0])
    if attrs.get("transB", 0):
        b = cx.b.transpose(b, [1, 0])
    y = cx.b.matmul(a, b)
    if attrs.get("alpha", 1.0) != 1.0:
        y = y * float(attrs["alpha"])
    if len(inputs) > 2 and inputs[2] is not None:
        c = cx.value(inputs[2])
        if attrs.get("beta", 1.0) != 1.0:
            c = c * float(attrs["beta"])
        y = y + _to(cx, c, y.shape)
    return [y]


def _symmetric_pads(attrs, n: int = 2) -> list[int]:
    pads = list(attrs.get("pads", [0] * 2 * n))
    if pads[:n] != pads[n:]:
        raise Unsupported(f"asymmetric pads {pads}")
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise Unsupported(f"auto_pad {attrs['auto_pad']}")
    return pads[:n]


def _dilated_kernel(cx, w, dilations) -> V:
    """A dilated convolution's kernel as an ordinary one, with zeros between its taps (exact for
    finite inputs; an infinite input under a gap makes NaN, as 0 * inf)."""
    from irc.dialects import tensor_grad as grad

    for axis, d in zip((2, 3), dilations):
        if d != 1:
            w = grad.window(cx.b, grad.dilate(cx.b, w, axis, d), axis, 0, -(d - 1))
    return w


@operator("Conv")
def _conv(cx, node, inputs, attrs):
    x, w = cx.value(inputs[0]), cx.value(inputs[1])
    if len(x.shape) != 4:
        raise Unsupported(f"a {len(x.shape) - 2}-d convolution")
    w = _dilated_kernel(cx, w, list(attrs.get("dilations", [1, 1])))
    groups = attrs.get("group", 1)
    stride, pads = list(attrs.get("strides", [1, 1])), _symmetric_pads(attrs)
    if groups == 1:
        y = cx.b.built(T.Conv2DOp.build(x.value, w.value, stride, pads))
    else:
        cin, cout = x.shape[1] // groups, w.shape[0] // groups
        parts = []
        for g in range(groups):
            xs = _slice(cx, x, 1, g * cin, cin)
            ws = _slice(cx, w, 0, g * cout, cout)
            parts.append(cx.b.built(T.Conv2DOp.build(xs.value, ws.value, stride, pads)))
        y = cx.b.tensor_op("graph.concat", *parts, axis=1)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + _to(cx, cx.b.reshape(cx.value(inputs[2]), [1, y.shape[1], 1, 1]), y.shape)
    return [y]


# ---- pooling ----------------------------------------------------------------------------------------


def _pool(cx, node, attrs, x: V, kind: str) -> V:
    if len(x.shape) != 4:
        raise Unsupported(f"rank-{len(x.shape)} pooling (irc pools NCHW)")
    if attrs.get("ceil_mode", 0):
        raise Unsupported("ceil_mode")
    if any(d != 1 for d in attrs.get("dilations", [1, 1])):
        raise Unsupported(f"dilations {attrs['dilations']}")
    kernel = list(attrs["kernel_shape"])
    stride = list(attrs.get("strides", [1, 1]))
    pads = _symmetric_pads(attrs)
    h, w = x.shape[2:]
    out = [(n + 2 * p - k) // s + 1 for n, k, s, p in zip((h, w), kernel, stride, pads)]
    if any(pads):
        value = -math.inf if kind == "max" else 0.0
        low = [0, 0, *pads]
        x = cx.b.built(T.PadOp.build(x.value, low, low, FloatAttr(value, x.elem)))
    total = None
    n, c = x.shape[:2]
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            tap = cx.b.built(T.SliceOp.build(x.value, [0, 0, i, j], [n, c, *out], [1, 1, *stride]))
            total = tap if total is None else (total.maximum(tap) if kind == "max" else total + tap)
    if kind == "max":
        return total
    if attrs.get("count_include_pad", 0) or not any(pads):
        return total / float(kernel[0] * kernel[1])
    rows = np.arange(out[0]) * stride[0] - pads[0]
    cols = np.arange(out[1]) * stride[1] - pads[1]
    nr = np.minimum(rows + kernel[0], h) - np.maximum(rows, 0)
    nc = np.minimum(cols + kernel[1], w) - np.maximum(cols, 0)
    counts = cx.value((nr[:, None] * nc[None, :]).astype(np.float32))
    return total / _to(cx, counts, total.shape)


@operator("MaxPool")
def _max_pool(cx, node, inputs, attrs):
    if len(node.output) > 1 and node.output[1]:
        raise Unsupported("the indices output")
    return [_pool(cx, node, attrs, cx.value(inputs[0]), "max")]


@operator("AveragePool")
def _avg_pool(cx, node, inputs, attrs):
    return [_pool(cx, node, attrs, cx.value(inputs[0]), "avg")]


@operator("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx, node, inputs, attrs):
    x = cx.value(inputs[0])
    axes = list(range(2, len(x.shape)))
    return [x.mean(axes, keepdims=True) if node.op_type == "GlobalAveragePool" else x.max(axes, keepdims=True)]


# ---- shapes -----------------------------------------------------------------------------------------


def _reshape_any(cx, x, shape):
    shape = [int(d) for d in shape]
    if known(x):
        return x.reshape(shape)
    x = cx.value(x)
    return x if x.shape == tuple(shape) else cx.b.reshape(x, shape)


@operator("Flatten")
def _flatten(cx, node, inputs, attrs):
    x = inputs[0]
    shape = shape_of(x)
    axis = attrs.get("axis", 1) % (len(shape) + 1) if shape else 0
    return [_reshape_any(cx, x, [math.prod(shape[:axis]), math.prod(shape[axis:])])]


@operator("Reshape")
def _reshape(cx, node, inputs, attrs):
    x, shape = inputs
    if not known(shape):
        raise Unsupported("a shape computed at run time")
    size = math.prod(shape_of(x))
    dims = [shape_of(x)[i] if d == 0 and not attrs.get("allowzero", 0) else int(d) for i, d in enumerate(shape)]
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = size // rest if rest else 0
    return [_reshape_any(cx, x, dims)]


@operator("Shape")
def _shape(cx, node, inputs, attrs):
    shape = np.array(shape_of(inputs[0]), np.int64)
    return [shape[attrs.get("start", 0):attrs.get("end", len(shape))]]


@operator("Size")
def _size(cx, node, inputs, attrs):
    return [np.array(math.prod(shape_of(inputs[0])), np.int64)]


@operator("Transpose")
def _transpose(cx, node, inputs, attrs):
    x = inputs[0]
    perm = attrs.get("perm", list(reversed(range(len(shape_of(x))))))
    if known(x):
        return [np.transpose(x, perm)]
    return [cx.b.transpose(x, list(perm))]


@operator("Unsqueeze")
def _unsqueeze(cx, node, inputs, attrs):
    x = inputs[0]
    axes = attrs.get("axes", None)
    axes = [int(a) for a in np.atleast_1d(inputs[1] if axes is None else axes)]
    shape = list(shape_of(x))
    rank = len(shape) + len(axes)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    return [_reshape_any(cx, x, shape)]


@operator("Squeeze")
def _squeeze(cx, node, inputs, attrs):
    x = inputs[0]
    shape = shape_of(x)
    axes = attrs.get("axes", None)
    if axes is None and len(inputs) > 1 and inputs[1] is not None:
        axes = [int(a) for a in np.atleast_1d(inputs[1])]
    drop = {a % len(shape) for a in axes} if axes is not None else {i for i, d in enumerate(shape) if d == 1}
    return [_reshape_any(cx, x, [d for i, d in enumerate(shape) if i not in drop])]


@operator("Concat")
def _concat(cx, node, inputs, attrs):
    axis = attrs["axis"] % len(shape_of(inputs[0]))
    if known(*inputs):
        return [np.concatenate(inputs, axis=axis)]
    parts = [cx.value(x) for x in inputs if shape_of(x)[axis] != 0]
    return [parts[0] if len(parts) == 1 else cx.b.tensor_op("graph.concat", *parts, axis=axis)]


def _slice(cx, x: V, axis: int, start: int, size: int, step: int = 1) -> V:
    rank = len(x.shape)
    offsets, sizes, strides = [0] * rank, list(x.shape), [1] * rank
    offsets[axis], sizes[axis], strides[axis] = start, size, step
    return cx.b.built(T.SliceOp.build(x.value, offsets, sizes, strides))


@operator("Split")
def _split(cx, node, inputs, attrs):
    """Pieces along ``axis``: the sizes given as the second input, or ``num_outputs`` (the
    outputs' count) pieces as equal as ONNX makes them (the last one smaller)."""
    x = inputs[0]
    shape = shape_of(x)
    axis = int(attrs.get("axis", 0)) % len(shape)
    if len(inputs) > 1 and inputs[1] is not None:
        if not known(inputs[1]):
            raise Unsupported("split sizes computed at run time")
        sizes = [int(n) for n in inputs[1]]
    else:
        count = int(attrs.get("num_outputs", len(node.output)))
        piece = -(-shape[axis] // count)
        sizes = [min(piece, shape[axis] - k * piece) for k in range(count)]
    starts = np.cumsum([0, *sizes[:-1]])
    if known(x):
        return [np.take(x, np.arange(st, st + n), axis=axis) for st, n in zip(starts, sizes)]
    return [_slice(cx, cx.value(x), axis, int(st), n) for st, n in zip(starts, sizes)]


@operator("Not")
def _not(cx, node, inputs, attrs):
    if known(inputs[0]):
        return [np.logical_not(inputs[0])]
    return [cx.b.binary(None, "arith.xori", cx.value(inputs[0]), True)]


@operator("IsNaN")
def _is_nan(cx, node, inputs, attrs):
    """NaN is the one value unordered with itself (the exporters' guard around softmax)."""
    if known(inputs[0]):
        return [np.isnan(inputs[0])]
    x = cx.value(inputs[0])
    return [cx.b.compare("uno", x, x)]


@operator("Trilu")
def _trilu(cx, node, inputs, attrs):
    """The upper (``upper=1``) or lower triangle of the last two dimensions, from diagonal ``k``."""
    x = inputs[0]
    k = int(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else 0
    upper = bool(attrs.get("upper", 1))
    if known(x):
        return [np.triu(x, k) if upper else np.tril(x, k)]
    x = cx.value(x)
    rows, cols = x.shape[-2:]
    keep = np.triu(np.ones((rows, cols), bool), k) if upper else np.tril(np.ones((rows, cols), bool), k)
    mask = _to(cx, cx.value(np.broadcast_to(keep, x.shape).copy()), x.shape)
    return [cx.b.select(mask, x, cx.b.zeros_like(x))]


@operator("Slice")
def _slice_op(cx, node, inputs, attrs):
    x = inputs[0]
    if not known(*inputs[1:]):
        raise Unsupported("slice bounds computed at run time")
    shape = shape_of(x)
    starts, ends = [int(s) for s in inputs[1]], [int(e) for e in inputs[2]]
    axes = [int(a) % len(shape) for a in inputs[3]] if len(inputs) > 3 and inputs[3] is not None \
        else list(range(len(starts)))
    steps = [int(s) for s in inputs[4]] if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    index = [slice(None)] * len(shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st < 1:
            raise Unsupported(f"step {st}")
        index[a] = slice(*slice(s, e, st).indices(shape[a]))
    if known(x):
        return [x[tuple(index)]]
    v = cx.value(x)
    for a in axes:
        start, stop, step = index[a].start, index[a].stop, index[a].step
        size = max(0, -(-(stop - start) // step))
        if (start, size, step) != (0, shape[a], 1):
            v = _slice(cx, v, a, start if size else 0, size, step)
    return [v]


@operator("Gather")
def _gather(cx, node, inputs, attrs):
    x, idx = inputs
    axis = attrs.get("axis", 0) % len(shape_of(x))
    n = shape_of(x)[axis]
    if known(x, idx):
        return [np.take(x, np.where(idx < 0, idx + n, idx), axis=axis)]
    if known(idx):
        idx = np.where(idx < 0, idx + n, idx).astype(np.int64)
        return [cx.b.tensor_op("graph.gather", cx.value(x), cx.value(idx), axis=axis)]
    idx = cx.b.convert(idx, i64)
    idx = cx.b.select(idx < 0, idx + n, idx)
    return [cx.b.tensor_op("graph.gather", cx.value(x), idx, axis=axis)]


@operator("Expand")
def _expand(cx, node, inputs, attrs):
    x, shape = inputs
    if not known(shape):
        raise Unsupported("a shape computed at run time")
    out = tuple(np.broadcast_shapes(shape_of(x), tuple(int(d) for d in shape)))
    if known(x):
        return [np.broadcast_to(x, out).copy()]
    return [_to(cx, cx.value(x), out)]


@operator("Constant")
def _constant(cx, node, inputs, attrs):
    if "value" not in attrs:
        raise Unsupported("a Constant without a 'value' tensor")
    return [attrs["value"]]


@operator("ConstantOfShape")
def _constant_of_shape(cx, node, inputs, attrs):
    value = attrs.get("value", np.zeros(1, np.float32))
    return [np.full([int(d) for d in inputs[0]], value.reshape(-1)[0], value.dtype)]


@operator("Range")
def _range(cx, node, inputs, attrs):
    if not known(*inputs):
        raise Unsupported("bounds computed at run time")
    start, limit, delta = inputs
    return [np.arange(start, limit, delta).astype(start.dtype)]


# ---- the model -------------------------------------------------------------------------------------


def _read(path):
    import onnx

    name = os.fspath(path)
    try:
        model = onnx.load(name)
    except FileNotFoundError:
        raise OnnxImportError(f"{name}: no such file") from None
    except Exception as e:  # noqa: BLE001 - protobuf's decode errors have no common public base
        raise OnnxImportError(f"{name}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    if not model.graph.node or not model.graph.output:
        raise OnnxImportError(f"{name}: not a readable ONNX model (no graph nodes or outputs)")
    return model


def _attributes(node) -> dict:
    from onnx import helper, numpy_helper

    out = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.type == a.TENSOR:
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        out[a.name] = value
    return out


class Model:
    """An imported ONNX model: ``model(*arrays)`` runs it (compiled once per input shapes);
    ``model.inputs`` and ``model.outputs`` are the graph's names, ``model.module(*shapes)``
    the irc module for those input shapes."""

    def __init__(self, path, **compile_options):
        self.path = os.fspath(path)
        self.proto = _read(path)
        from onnx import numpy_helper

        graph = self.proto.graph
        self.weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.inputs = [i.name for i in graph.input if i.name not in self.weights]
        self.outputs = [o.name for o in graph.output]
        self.compile_options = compile_options
        self._compiled: dict = {}
        missing = sorted({n.op_type for n in graph.node if n.op_type not in OPERATORS})
        if missing:
            node = next(n for n in graph.node if n.op_type == missing[0])
            raise OnnxImportError(f"{self.path}: node '{node.name or '?'}': unsupported operator '{node.op_type}'"
                                  + (f" (also: {', '.join(missing[1:])})" if len(missing) > 1 else ""))

    def input_types(self) -> list:
        """The graph's declared input types: (element type, shape with None for symbolic sizes)."""
        out = []
        for i in self.proto.graph.input:
            if i.name in self.weights:
                continue
            t = i.type.tensor_type
            elem = ELEMENT_TYPES.get(t.elem_type)
            shape = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            out.append((elem, shape, i.name))
        return out

    def module(self, *shapes):
        return to_module(self, [tuple(s) for s in shapes])

    def __call__(self, *arrays):
        import irc

        if len(arrays) != len(self.inputs):
            raise TypeError(f"{self.path}: the model takes {len(self.inputs)} inputs "
                            f"({', '.join(self.inputs)}), got {len(arrays)}")
        arrays = [np.ascontiguousarray(a) for a in arrays]
        key = tuple((a.shape, a.dtype.str) for a in arrays)
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compiled[key] = irc.compile(self.module(*[a.shape for a in arrays]),
                                                   **self.compile_options)["main"]
        return fn(*arrays)


def to_module(model: Model, shapes: list[tuple], params: list[str] = ()):
    """The irc module (``func.func @main``) of ``model`` for inputs of ``shapes``; the
    initializers named in ``params`` are its first parameters (in that order), the others
    constants in the IR."""
    return _build(model, shapes, params)[0]


def _build(model: Model, shapes: list[tuple], params) -> tuple:
    """``to_module``'s module, and the names of the initializers the graph reads as values."""
    b = Builder()
    module = b.module()
    types = []
    for (elem, declared, name), shape in zip(model.input_types(), shapes):
        if elem is None:
            raise OnnxImportError(f"{model.path}: input '{name}' has an element type irc does not have")
        if len(declared) != len(shape) or any(d is not None and d != s for d, s in zip(declared, shape)):
            raise OnnxImportError(f"{model.path}: input '{name}' has shape {list(shape)}, the model "
                                  f"declares {['?' if d is None else d for d in declared]}")
        types.append(TensorType(list(shape), elem))
    weight_types = [TensorType(list(model.weights[n].shape), ELEMENT_FOR_DTYPE[model.weights[n].dtype.type])
                    for n in params]
    names = [_ident(n) for n in params] + [_ident(n) for n in model.inputs]
    with b.function(module, "main", weight_types + types, arg_names=names) as args:
        cx = Context(b, {id(a): n for n, a in model.weights.items()}, dict(zip(params, args)))
        env: dict = dict(model.weights)
        env.update(zip(model.inputs, args[len(params):]))
        env[""] = None
        for node in model.proto.graph.node:
            try:
                outs = OPERATORS[node.op_type](cx, node, [env[n] for n in node.input], _attributes(node))
            except Unsupported as e:
                raise OnnxImportError(f"{model.path}: node '{node.name or '?'}' ({node.op_type}): "
                                      f"irc does not support {e}") from None
            except (ValueError, TypeError, KeyError, IndexError) as e:
                raise OnnxImportError(f"{model.path}: node '{node.name or '?'}' ({node.op_type}): "
                                      f"{type(e).__name__}: {e}") from None
            env.update(zip(node.output, [np.asarray(o) if isinstance(o, np.generic) else o for o in outs]))
        b.ret(*[cx.value(env[o]) for o in model.outputs])
    return module, cx.read


def save_checkpoint(model: Model, shapes: list[tuple], path) -> None:
    """Write ``model`` for inputs of ``shapes`` as an irc checkpoint (``irc.load`` reads it):
    the initializers the graph computes with become the checkpoint's parameters, named as in
    the ONNX file, and ``@main`` takes them first; initializers only used while importing (the
    shapes of a ``Reshape``) and values computed from initializers stay in the IR."""
    from irc.checkpoint import DTYPES, write
    from irc.pytree import flatten

    read = _build(model, shapes, ())[1]
    storable = {dt.newbyteorder("=") for dt in DTYPES.values()}
    names = sorted(n for n in read if model.weights[n].dtype.newbyteorder("=") in storable
                   and model.weights[n].dtype.type in ELEMENT_FOR_DTYPE)  # sorted: a dict's leaf order
    module = to_module(model, shapes, names)
    params = {n: model.weights[n] for n in names}
    examples = [np.zeros(shape, NUMPY_TYPES[model.proto.graph.input[k].type.tensor_type.elem_type])
                for k, shape in zip(_input_positions(model), shapes)]

    class Traced:  # what irc.checkpoint.write takes (irc.jit's trace has the same fields)
        entry = "main"

    traced = Traced()
    traced.module = module
    traced.in_tree = flatten((params, *examples))[1]
    traced.out_tree = flatten(tuple(model.outputs) if len(model.outputs) > 1 else model.outputs[0])[1]
    write(path, traced, params, *examples)


def _input_positions(model: Model) -> list[int]:
    return [k for k, i in enumerate(model.proto.graph.input) if i.name not in model.weights]


def _ident(name: str) -> str:
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return clean if clean and not clean[0].isdigit() else "in_" + clean


def load(path, **compile_options) -> Model:
    """The ONNX model at ``path`` as a callable (numpy in, numpy out); ``compile_options`` go to
    ``irc.compile``.  An ``OnnxImportError`` names the file (and node) when it cannot be imported."""
    return Model(path, **compile_options)
