"""numpy's functions on tracers: what ``__array_ufunc__`` and ``__array_function__`` dispatch to.

Each entry builds the graph-level ops (``arith``/``math`` on tensors, the ``tensor``
dialect) that compute what numpy computes, with numpy's dtypes: results are checked
against numpy itself in tests/test_frontend_numpy.py.  A function or an argument not
here raises a TypeError that names it and shows the user's line; nothing falls back to
numpy silently (numpy would ask for the values, which do not exist yet).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from irc.attributes import FloatAttr, integer_attr
from irc.builder import broadcast_shape
from irc.types import FloatType, TensorType

from .locations import located_message
from .tracer import Tracer, TracerError, as_tensor, convert, current, irc_type, operand, promote


def _trace(*xs):
    tr = current()
    if tr is None:
        raise TracerError(located_message(
            "a traced value is used outside irc.jit's trace (it escaped the function that made it)"))
    return tr


def _out(tr, v, weak=False) -> Tracer:
    return Tracer(tr, v, weak)


def _unsupported(what: str) -> TypeError:
    return TypeError(located_message(f"irc cannot trace {what}"))


def _check_kwargs(name: str, kwargs: dict, allowed: Sequence[str] = ()) -> None:
    for key, value in kwargs.items():
        if key in allowed:
            continue
        if key in ("dtype", "out", "where", "initial", "casting", "order", "subok") and value is None:
            continue
        if key == "where" and value is True:
            continue
        if key in ("casting", "order", "subok") and value in ("same_kind", "K", True):
            continue
        raise _unsupported(f"numpy.{name}(..., {key}={value!r:.40})")


def _axes(axis, ndim: int, name: str) -> list[int] | None:
    if axis is None:
        return None
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or not -ndim <= a < max(ndim, 1):
            raise np.exceptions.AxisError(located_message(f"{name}: axis {a} is out of bounds for an array "
                                                          f"of dimension {ndim}"))
        out.append(int(a) % max(ndim, 1))
    return out


# -- elementwise ---------------------------------------------------------------------------------


def binary(float_op: str | None, int_op: str | None, a, b, name: str, true_divide: bool = False) -> Tracer:
    tr = _trace(a, b)
    dt, weak = promote(a, b)
    if true_divide and dt.kind in "biu":
        dt = np.dtype(np.float64)
    if dt.kind == "b" and name not in ("maximum", "minimum", "logical_and", "logical_or", "bitwise_and",
                                       "bitwise_or", "bitwise_xor"):
        raise _unsupported(f"numpy.{name} on booleans (convert them with astype first)")
    if dt.kind == "b" and name in ("maximum", "logical_or"):
        int_op = "arith.ori"
    if dt.kind == "b" and name in ("minimum", "logical_and"):
        int_op = "arith.andi"
    if (float_op if dt.kind == "f" else int_op) is None:
        raise _unsupported(f"numpy.{name} on {dt} operands")
    va, vb = operand(tr, a, dt), operand(tr, b, dt)
    return _out(tr, tr.builder.binary(float_op, int_op, va, vb), weak)


def compare(pred: str, a, b) -> Tracer:
    tr = _trace(a, b)
    dt, _ = promote(a, b)
    return _out(tr, tr.builder.compare(pred, operand(tr, a, dt), operand(tr, b, dt)))


def power(a, b) -> Tracer:
    if isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b == 2 and isinstance(a, Tracer):
        return binary("arith.mulf", "arith.muli", a, a, "power")  # x**2: exact, and cheap
    return binary("math.powf", None, a, b, "power")


def unary_math(op: str, name: str):
    def apply(x) -> Tracer:
        tr = _trace(x)
        dt, weak = promote(x)
        if dt.kind != "f":
            dt = np.dtype(np.float64)  # numpy computes transcendental functions of ints in float64
        return _out(tr, tr.builder.unary(op, operand(tr, x, dt)), weak)

    apply.__name__ = name
    return apply


def negative(x) -> Tracer:
    tr = _trace(x)
    dt, weak = promote(x)
    if dt.kind == "b":
        raise _unsupported("numpy.negative on booleans")
    return _out(tr, -operand(tr, x, dt), weak)


def absolute(x) -> Tracer:
    tr = _trace(x)
    dt, weak = promote(x)
    v = operand(tr, x, dt)
    if dt.kind == "f":
        return _out(tr, v.abs(), weak)
    if dt.kind == "b":
        return _out(tr, v, weak)
    return _out(tr, tr.builder.select(v < 0, -v, v), weak)


def square(x) -> Tracer:
    return binary("arith.mulf", "arith.muli", x, x, "square")


def reciprocal(x) -> Tracer:
    return binary("arith.divf", "arith.divsi", 1.0 if promote(x)[0].kind == "f" else 1, x, "reciprocal")


def logical_not(x) -> Tracer:
    tr = _trace(x)
    return _out(tr, operand(tr, x, np.dtype(np.bool_)).eq(False))


def where(cond, x=None, y=None) -> Tracer:
    if x is None or y is None:
        raise _unsupported("numpy.where(cond) with one argument (its result's shape depends on the values)")
    tr = _trace(cond, x, y)
    dt, weak = promote(x, y)
    c = operand(tr, cond, np.dtype(np.bool_))
    vx, vy = operand(tr, x, dt), operand(tr, y, dt)
    b = tr.builder
    shape = broadcast_shape(broadcast_shape(_shape(c), _shape(vx), "np.where"), _shape(vy), "np.where")
    if shape:
        target = TensorType(list(shape), vx.elem)
        vx, vy = b.broadcast_to(vx, target, like=[vx, vy, c]), b.broadcast_to(vy, target, like=[vx, vy, c])
    return _out(tr, b.select(c, vx, vy), weak)


def clip(a, a_min=None, a_max=None, out=None, **kwargs) -> Tracer:
    _check_kwargs("clip", {"out": out, **kwargs})
    if a_min is None and a_max is None:
        raise ValueError(located_message("numpy.clip: one of a_min and a_max must be given"))
    if a_min is not None:
        a = binary("arith.maximumf", "arith.maxsi", a, a_min, "maximum")
    if a_max is not None:
        a = binary("arith.minimumf", "arith.minsi", a, a_max, "minimum")
    return a


def _shape(v) -> tuple:
    return tuple(v.type.shape) if isinstance(v.type, TensorType) else ()


# -- reductions ------------------------------------------------------------------------------------


def reduction(kind: str):
    def apply(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs) -> Tracer:
        _check_kwargs(kind, {"dtype": dtype, "out": out, **kwargs})
        tr = _trace(a)
        dt, weak = promote(a)
        if kind in ("sum", "prod") and dt.kind in "biu" and dt.itemsize < 8:
            dt = np.dtype(np.int64)  # numpy sums small integers (and booleans) as int64
        if kind == "mean" and dt.kind != "f":
            dt = np.dtype(np.float64)
        if kind in ("max", "min") and dt.kind == "b":
            raise _unsupported(f"numpy.{kind} of booleans (use np.any / np.all: not traced yet)")
        v = operand(tr, a, dt)
        ndim = len(_shape(v))
        axes = _axes(axis, ndim, f"numpy.{kind}")
        if ndim == 0:
            return _out(tr, v, weak)
        return _out(tr, tr.builder.reduce(kind, v, axes, bool(keepdims)), weak)

    apply.__name__ = kind
    return apply


# -- shapes ------------------------------------------------------------------------------------------


def reshape(a, *shape, order="C", newshape=None, copy=None) -> Tracer:
    if order != "C":
        raise _unsupported(f"reshape(order={order!r})")
    if newshape is not None:
        shape = (newshape,)
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    elif len(shape) == 1 and isinstance(shape[0], (int, np.integer)):
        shape = (shape[0],)
    tr = _trace(a)
    v = as_tensor(tr.builder, operand(tr, a))
    return _out(tr, _reshape(tr, v, shape), getattr(a, "weak", False))


def _reshape(tr, v, shape) -> object:
    b = tr.builder
    shape = [int(d) if not isinstance(d, Tracer) else d for d in shape]
    if any(isinstance(d, Tracer) for d in shape):
        raise _unsupported("a reshape to a traced size (sizes must be Python ints)")
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ValueError(located_message(f"cannot reshape to {tuple(shape)}"))
    src = _shape(v)
    known = math.prod(d for d in shape if d != -1)
    if None not in src:
        n = math.prod(src)
        if -1 in shape:
            if known == 0 or n % known:
                raise ValueError(located_message(f"cannot reshape array of shape {src} into shape {tuple(shape)}"))
            shape[shape.index(-1)] = n // known
        if math.prod(shape) != n:
            raise ValueError(located_message(f"cannot reshape array of size {n} into shape {tuple(shape)}"))
        return b.reshape(v, shape)
    if -1 not in shape:
        return b.reshape(v, shape)
    total = b.num_elements(v)
    size = total / b.index(known) if known != 1 else total
    return b.reshape(v, [None if d == -1 else d for d in shape], [size])


def transpose(a, axes=None) -> Tracer:
    tr = _trace(a)
    v = operand(tr, a)
    ndim = len(_shape(v))
    if axes is not None:
        axes = _axes(axes, ndim, "numpy.transpose")
        if sorted(axes) != list(range(ndim)):
            raise ValueError(located_message(f"numpy.transpose: axes {axes} are not a permutation"))
    if ndim < 2:
        return _out(tr, v, getattr(a, "weak", False))
    return _out(tr, tr.builder.transpose(v, axes), getattr(a, "weak", False))


def expand_dims(a, axis) -> Tracer:
    shape = list(_tracer_shape(a))
    axes = [axis] if isinstance(axis, int) else list(axis)
    ndim = len(shape) + len(axes)
    for ax in sorted(x % ndim for x in axes):
        shape.insert(ax, 1)
    return reshape(a, [-1 if d is None else d for d in shape])


def squeeze(a, axis=None) -> Tracer:
    shape = _tracer_shape(a)
    axes = _axes(axis, len(shape), "numpy.squeeze") if axis is not None else [i for i, d in enumerate(shape) if d == 1]
    for ax in axes:
        if shape[ax] != 1:
            raise ValueError(located_message(f"numpy.squeeze: axis {ax} has size {shape[ax]}, not 1"))
    return reshape(a, [-1 if d is None else d for i, d in enumerate(shape) if i not in axes])


def ravel(a, order="C") -> Tracer:
    return reshape(a, -1, order=order)


def broadcast_to(a, shape, subok=False) -> Tracer:
    tr = _trace(a)
    v = operand(tr, a)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    broadcast_shape(_shape(v), shape, "numpy.broadcast_to")
    return _out(tr, tr.builder.broadcast_to(v, TensorType(list(shape), v.elem)), getattr(a, "weak", False))


def _tracer_shape(a) -> tuple:
    return a.shape if isinstance(a, Tracer) else np.shape(a)


def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind") -> Tracer:
    _check_kwargs("concatenate", {"out": out, "dtype": dtype, "casting": casting})
    arrays = list(arrays)
    if axis is None:
        arrays, axis = [ravel(a) if isinstance(a, Tracer) else np.ravel(a) for a in arrays], 0
    tr = _trace(*arrays)
    dt, weak = promote(*arrays)
    vs = [as_tensor(tr.builder, operand(tr, a, dt)) for a in arrays]
    ranks = {len(_shape(v)) for v in vs}
    if len(ranks) != 1 or 0 in ranks:
        raise ValueError(located_message("numpy.concatenate needs arrays of one rank, at least 1"))
    axis = _axes(axis, ranks.pop(), "numpy.concatenate")[0]
    return _out(tr, tr.builder.tensor_op("graph.concat", *vs, axis=axis), weak)


def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind") -> Tracer:
    _check_kwargs("stack", {"out": out, "dtype": dtype, "casting": casting})
    arrays = list(arrays)
    shapes = {tuple(_tracer_shape(a)) for a in arrays}
    if len(shapes) != 1:
        raise ValueError(located_message(f"numpy.stack: all input arrays must have the same shape, got "
                                         f"{sorted(shapes)}"))
    ndim = len(shapes.pop()) + 1
    axis = _axes(axis, ndim, "numpy.stack")[0]
    return concatenate([expand_dims(a, axis) if isinstance(a, Tracer) else np.expand_dims(a, axis)
                        for a in arrays], axis=axis)


def pad(array, pad_width, mode="constant", **kwargs) -> Tracer:
    if mode != "constant":
        raise _unsupported(f"numpy.pad(mode={mode!r}) (only mode='constant')")
    value = kwargs.pop("constant_values", 0)
    if kwargs:
        raise _unsupported(f"numpy.pad(..., {next(iter(kwargs))}=...)")
    values = np.unique(np.asarray(value))
    if values.size != 1:
        raise _unsupported("numpy.pad with different constant_values per side")
    tr = _trace(array)
    dt, weak = promote(array)
    v = operand(tr, array, dt)
    ndim = len(_shape(v))
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (ndim, 2))
    if (widths < 0).any():
        raise ValueError(located_message("numpy.pad: pad widths must not be negative"))
    elem = v.elem
    c = values.item()
    attr = FloatAttr(float(c), elem) if isinstance(elem, FloatType) else integer_attr(int(c), elem)
    from irc.dialects.graph import PadOp

    return _out(tr, tr.builder.built(PadOp.build(as_tensor(tr.builder, v).value, widths[:, 0].tolist(),
                                                 widths[:, 1].tolist(), attr)), weak)


# -- products -----------------------------------------------------------------------------------------


def matmul(a, b) -> Tracer:
    tr = _trace(a, b)
    dt, weak = promote(a, b)
    if dt.kind == "b":
        raise _unsupported("numpy.matmul of booleans")
    bld = tr.builder
    va, vb = as_tensor(bld, operand(tr, a, dt)), as_tensor(bld, operand(tr, b, dt))
    sa, sb = _shape(va), _shape(vb)
    if not sa or not sb:
        raise ValueError(located_message("matmul: an operand is 0-d (use * to scale)"))
    if len(sa) == 1 and len(sb) == 1:
        return _out(tr, (va * vb).sum(), weak)
    if len(sa) == 1:
        return _out(tr, _reshape(tr, _matmul(tr, _reshape(tr, va, [1, sa[0]]), vb), [*sb[:-2], sb[-1]]), weak)
    if len(sb) == 1:
        return _out(tr, _reshape(tr, _matmul(tr, va, _reshape(tr, vb, [sb[0], 1])), list(sa[:-1])), weak)
    return _out(tr, _matmul(tr, va, vb), weak)


def _matmul(tr, va, vb):
    sa, sb = _shape(va), _shape(vb)
    if sa[-1] is not None and sb[-2] is not None and sa[-1] != sb[-2]:
        raise ValueError(located_message(f"matmul: shapes {sa} and {sb} do not fit: {sa[-1]} (dim {len(sa) - 1})"
                                         f" != {sb[-2]} (dim {len(sb) - 2})"))
    if len(sa) == 2 and len(sb) == 2:
        return tr.builder.matmul(va, vb)
    batch = broadcast_shape(sa[:-2], sb[:-2], "matmul batch dimensions")
    b = tr.builder
    va = b.broadcast_to(va, TensorType([*batch, *sa[-2:]], va.elem), like=va)
    vb = b.broadcast_to(vb, TensorType([*batch, *sb[-2:]], vb.elem), like=vb)
    return b.tensor_op("graph.batch_matmul", va, vb)


def dot(a, b, out=None) -> Tracer:
    _check_kwargs("dot", {"out": out})
    if len(_tracer_shape(a)) > 2 or len(_tracer_shape(b)) > 2:
        raise _unsupported("numpy.dot of arrays of more than 2 dimensions (use matmul)")
    if not _tracer_shape(a) or not _tracer_shape(b):
        return binary("arith.mulf", "arith.muli", a, b, "multiply")
    return matmul(a, b)


# -- creation like another array ----------------------------------------------------------------------


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, device=None) -> Tracer:
    if shape is not None:
        raise _unsupported("full_like(..., shape=...) (use irc.numpy.full)")
    tr = _trace(a, fill_value)
    dt = np.dtype(dtype) if dtype is not None else promote(a)[0]
    like = operand(tr, a)
    b = tr.builder
    t = TensorType(list(_shape(like)), irc_type(dt)) if _shape(like) else irc_type(dt)
    if isinstance(fill_value, Tracer):
        value = operand(tr, fill_value, dt)
        if not isinstance(t, TensorType):
            return _out(tr, value)
        return _out(tr, b.broadcast_to(value, t, like=like))
    if not isinstance(t, TensorType):
        return _out(tr, b.const(np.asarray(fill_value, dt).item(), t))
    if t.has_static_shape:
        return _out(tr, b.const(np.asarray(fill_value, dt).item(), t))
    return _out(tr, b.splat(b.const(np.asarray(fill_value, dt).item(), t.element_type), t, b.dynamic_sizes(like, t)))


def zeros_like(a, dtype=None, order="K", subok=True, shape=None, device=None) -> Tracer:
    return full_like(a, 0, dtype, order, subok, shape)


def ones_like(a, dtype=None, order="K", subok=True, shape=None, device=None) -> Tracer:
    return full_like(a, 1, dtype, order, subok, shape)


def astype(a, dtype, order="K", casting="unsafe", subok=True, copy=True) -> Tracer:
    tr = _trace(a)
    dt = np.dtype(dtype)
    return _out(tr, convert(tr.builder, operand(tr, a), dt))


# -- indexing ------------------------------------------------------------------------------------------


def getitem(a: Tracer, key) -> Tracer:
    tr = _trace(a)
    v = operand(tr, a)
    shape = list(_shape(v))
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError(located_message("an index can only have a single ellipsis ('...')"))
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(located_message(f"too many indices for an array of {len(shape)} dimensions"))
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - used) + key[at + 1:]
    else:
        key = key + (slice(None),) * (len(shape) - used)
    offsets, sizes, strides, out_shape = [], [], [], []
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        n = shape[dim]
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer, slice)):
            what = "a traced array" if isinstance(k, Tracer) else f"{type(k).__name__}"
            raise _unsupported(f"indexing with {what} (only ints, slices with positive steps, None and ...)")
        if n is None:
            if isinstance(k, slice) and k == slice(None):
                offsets.append(0), sizes.append(None), strides.append(1), out_shape.append(None)
                dim += 1
                continue
            raise _unsupported("indexing a dynamic dimension other than with ':'")
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step < 0:
                raise _unsupported("slicing with a negative step")
            count = len(range(start, stop, step))
            offsets.append(start if count else 0), sizes.append(count), strides.append(step)
            out_shape.append(count)
        else:
            if not -n <= k < n:
                raise IndexError(located_message(f"index {k} is out of bounds for axis {dim} with size {n}"))
            offsets.append(int(k) % n), sizes.append(1), strides.append(1)
        dim += 1
    b = tr.builder
    if any(s is None for s in sizes):
        if any(o or st != 1 or (s is not None and s != n) for o, s, st, n in zip(offsets, sizes, strides, shape)):
            raise _unsupported("slicing an array with a dynamic dimension (trace with static shapes)")
        sliced = v
    elif offsets == [0] * len(shape) and sizes == shape and strides == [1] * len(shape):
        sliced = v
    else:
        from irc.dialects.graph import SliceOp

        sliced = b.built(SliceOp.build(v.value, offsets, sizes, strides))
    if list(out_shape) != list(_shape(sliced)):
        sliced = _reshape(tr, sliced, [-1 if d is None else d for d in out_shape]) if out_shape else \
            _scalar(b, sliced)
    return _out(tr, sliced, a.weak)


def _scalar(b, v):
    """The one element of a tensor as a 0-d tensor (a reshape to rank 0)."""
    return b.reshape(v, [])


# -- dispatch -----------------------------------------------------------------------------------------------


def _shape_fn(a):
    return _tracer_shape(a)


UFUNCS = {
    np.add: lambda a, b: binary("arith.addf", "arith.addi", a, b, "add"),
    np.subtract: lambda a, b: binary("arith.subf", "arith.subi", a, b, "subtract"),
    np.multiply: lambda a, b: binary("arith.mulf", "arith.muli", a, b, "multiply"),
    np.divide: lambda a, b: binary("arith.divf", "arith.divsi", a, b, "divide", true_divide=True),
    np.power: power,
    np.maximum: lambda a, b: binary("arith.maximumf", "arith.maxsi", a, b, "maximum"),
    np.minimum: lambda a, b: binary("arith.minimumf", "arith.minsi", a, b, "minimum"),
    np.logical_and: lambda a, b: binary(None, "arith.andi", _bool(a), _bool(b), "logical_and"),
    np.logical_or: lambda a, b: binary(None, "arith.ori", _bool(a), _bool(b), "logical_or"),
    np.greater: lambda a, b: compare("gt", a, b),
    np.greater_equal: lambda a, b: compare("ge", a, b),
    np.less: lambda a, b: compare("lt", a, b),
    np.less_equal: lambda a, b: compare("le", a, b),
    np.equal: lambda a, b: compare("eq", a, b),
    np.not_equal: lambda a, b: compare("ne", a, b),
    np.negative: negative,
    np.positive: lambda a: a,
    np.absolute: absolute,
    np.square: square,
    np.reciprocal: reciprocal,
    np.logical_not: logical_not,
    np.bitwise_and: lambda a, b: binary(None, "arith.andi", a, b, "bitwise_and"),
    np.bitwise_or: lambda a, b: binary(None, "arith.ori", a, b, "bitwise_or"),
    np.bitwise_xor: lambda a, b: binary(None, "arith.xori", a, b, "bitwise_xor"),
    np.invert: lambda a: logical_not(a) if promote(a)[0].kind == "b" else binary(
        None, "arith.xori", a, -1, "bitwise_xor"),
    np.matmul: matmul,
}
for _name in ("exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sqrt", "sin", "cos", "floor", "ceil"):
    UFUNCS[getattr(np, _name)] = unary_math(f"math.{_name}", _name)
del _name


def _bool(x):
    if isinstance(x, Tracer) and x.dtype != np.bool_:
        return astype(x, np.bool_)
    return x


FUNCTIONS = {
    np.sum: reduction("sum"), np.mean: reduction("mean"), np.prod: reduction("prod"),
    np.max: reduction("max"), np.min: reduction("min"), np.amax: reduction("max"), np.amin: reduction("min"),
    np.where: where, np.clip: clip, np.reshape: reshape, np.transpose: transpose, np.matmul: matmul,
    np.dot: dot, np.concatenate: concatenate, np.stack: stack, np.pad: pad,
    np.zeros_like: zeros_like, np.ones_like: ones_like, np.full_like: full_like,
    np.expand_dims: expand_dims, np.squeeze: squeeze, np.ravel: ravel, np.broadcast_to: broadcast_to,
    np.shape: _shape_fn, np.ndim: lambda a: len(_tracer_shape(a)), np.size: lambda a, axis=None: (
        a.size if axis is None else a.shape[axis]),
}


def _with_location(fn):
    """``fn`` whose shape and type errors (the builder's, the tensor ops' inference) name the
    user's line: numpy's exception types, irc's message, the line and its source text."""
    def located(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError, IndexError) as e:
            if "\n  at " in str(e) or isinstance(e, TracerError):
                raise
            raise type(e)(located_message(str(e))) from None

    located.__name__ = getattr(fn, "__name__", "located")
    located.__doc__ = fn.__doc__
    return located


UFUNCS = {k: _with_location(v) for k, v in UFUNCS.items()}
FUNCTIONS = {k: _with_location(v) for k, v in FUNCTIONS.items()}
for _f in ("getitem", "reshape", "transpose", "astype", "clip", "dot", "ravel", "squeeze", "matmul", "negative",
           "absolute", "logical_not"):
    globals()[_f] = _with_location(globals()[_f])
del _f


def apply_ufunc(ufunc, method: str, inputs, kwargs):
    if method != "__call__":
        raise _unsupported(f"numpy.{ufunc.__name__}.{method}")
    impl = UFUNCS.get(ufunc)
    if impl is None:
        raise _unsupported(f"numpy.{ufunc.__name__}")
    _check_kwargs(ufunc.__name__, kwargs)
    return impl(*inputs)


def apply_function(func, args, kwargs):
    impl = FUNCTIONS.get(func)
    if impl is None:
        module = getattr(func, "__module__", "numpy") or "numpy"
        prefix = "numpy" if module.startswith("numpy") and not module.startswith("numpy.linalg") else module
        raise _unsupported(f"{prefix}.{func.__name__}")
    return impl(*args, **kwargs)


# -- methods and operators of Tracer -------------------------------------------------------------------------


def _reflected(fn):
    return lambda self, other: fn(other, self)


_OPERATORS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide, "pow": np.power,
    "matmul": np.matmul, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}
for _op, _ufunc in _OPERATORS.items():
    setattr(Tracer, f"__{_op}__", (lambda f: lambda self, other: f(self, other))(UFUNCS[_ufunc]))
    if _op not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(Tracer, f"__r{_op}__", _reflected(UFUNCS[_ufunc]))
del _op, _ufunc
Tracer.__neg__ = lambda self: negative(self)
Tracer.__pos__ = lambda self: self
Tracer.__abs__ = lambda self: absolute(self)
Tracer.__invert__ = lambda self: UFUNCS[np.invert](self)
Tracer.__getitem__ = getitem
Tracer.T = property(lambda self: transpose(self))
Tracer.mT = property(lambda self: transpose(self, [*range(self.ndim - 2), self.ndim - 1, self.ndim - 2]))
Tracer.sum = lambda self, axis=None, dtype=None, out=None, keepdims=False: FUNCTIONS[np.sum](
    self, axis, dtype, out, keepdims)
Tracer.mean = lambda self, axis=None, dtype=None, out=None, keepdims=False: FUNCTIONS[np.mean](
    self, axis, dtype, out, keepdims)
Tracer.prod = lambda self, axis=None, dtype=None, out=None, keepdims=False: FUNCTIONS[np.prod](
    self, axis, dtype, out, keepdims)
Tracer.max = lambda self, axis=None, out=None, keepdims=False: FUNCTIONS[np.max](self, axis, None, out, keepdims)
Tracer.min = lambda self, axis=None, out=None, keepdims=False: FUNCTIONS[np.min](self, axis, None, out, keepdims)
Tracer.reshape = reshape
Tracer.transpose = lambda self, *axes: transpose(
    self, None if not axes else axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes)
Tracer.astype = astype
Tracer.clip = clip
Tracer.dot = dot
Tracer.ravel = ravel
Tracer.flatten = ravel
Tracer.squeeze = squeeze
Tracer.copy = lambda self: self
Tracer.__matmul__ = lambda self, other: matmul(self, other)
Tracer.__rmatmul__ = lambda self, other: matmul(other, self)
