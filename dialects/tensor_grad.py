"""Building blocks of the ``tensor`` ops' gradient rules (the rules sit on the op classes).

Every helper takes an ``irc.builder.Builder`` and ``V`` values and builds ordinary
``tensor``/``arith`` ops, so a gradient is more graph and can be differentiated
again.  Two invariants the rules keep:

- **Exact types.**  A cotangent has exactly its operand's type, a tangent its
  result's, ``?`` dimensions included: ``fit`` renames sizes with a reshape that
  moves nothing, and every ``?`` size is read with ``tensor.dim`` from a primal
  value (``Builder.dynamic_sizes``).
- **No division by data, no 0 * inf.**  Reductions of products use exclusive
  products (``others``), picking elements uses ``arith.select`` (never a multiply
  by a 0/1 mask, which turns an inf elsewhere into NaN).

``graph.slice`` and ``graph.pad`` take static offsets and sizes, so cutting a
piece out of a tensor with a ``?`` dimension (the cotangent of a ``concat`` or a
``pad`` of a dynamic tensor) falls back to ``take``: a select-and-sum against a
one-hot matrix built from ``graph.iota``.  It is exact (one element plus zeros)
but costs the cut axis' length per element; a ``graph.slice`` with dynamic
offsets and sizes would remove it.
"""

from __future__ import annotations

from irc.attributes import FloatAttr
from irc.types import TensorType, i64, index

# ---- shapes -------------------------------------------------------------------------------------


def size(b, v, axis: int):
    """Dimension ``axis`` of ``v``: a Python int when static, else an ``index`` value."""
    d = v.type.shape[axis]
    return d if d is not None else b.dim(v, axis)


def static(n) -> int | None:
    return n if isinstance(n, int) else None


def as_index(b, n):
    return b.index(n)


def product(b, sizes):
    """The product of sizes (ints and index values): an int when all are static."""
    total = 1
    for n in sizes:
        if isinstance(total, int) and isinstance(n, int):
            total *= n
        else:
            total = as_index(b, total) * as_index(b, n)
    return total


def reshape(b, v, shape, sizes):
    """``graph.reshape`` (not ``Builder.reshape``, which passes ``sizes`` where ``build`` wants
    the type when there are any)."""
    from irc.dialects.graph import ReshapeOp

    v = b.wrap(v)
    t = TensorType(list(shape), v.elem)
    if t is v.type and t.has_static_shape:
        return v
    return b.built(ReshapeOp.build(v.value, t, [b.wrap(s).value for s in sizes]))


def with_sizes(b, v, shape):
    """``v`` reshaped to ``shape`` (ints and index values, row-major)."""
    return reshape(b, v, [static(n) for n in shape], [as_index(b, n) for n in shape if not isinstance(n, int)])


def fit(b, v, like):
    """``v`` with exactly ``like``'s type (same run-time shape; only static/``?`` sizes differ)."""
    v, like = b.wrap(v), b.wrap(like)
    if v.type is like.type:
        return v
    return reshape(b, v, list(like.type.shape), b.dynamic_sizes(like))


def zeros(b, like, shape):
    """A zero tensor of ``like``'s element type and ``shape`` (ints and index values)."""
    t = TensorType([static(n) for n in shape], like.elem)
    zero = b.const(0.0, like.elem)
    return b.splat(zero, t, [as_index(b, n) for n in shape if not isinstance(n, int)])


def expand(b, v, shape):
    """``v`` (of ``shape``'s rank, size-1 or equal dimensions) broadcast to ``shape``."""
    t = TensorType([static(n) for n in shape], v.elem)
    if v.type is t:
        return v
    from irc.dialects.graph import BroadcastOp

    return b.built(BroadcastOp.build(v.value, t, [as_index(b, n).value for n in shape if not isinstance(n, int)]))


def unreduce(b, g, x, axes, keepdims: bool):
    """The cotangent ``g`` of a reduction of ``x`` over ``axes``, copied back to ``x``'s shape."""
    shape = [size(b, x, i) for i in range(x.type.rank)]
    if axes and not keepdims:
        g = with_sizes(b, g, [1 if i in axes else n for i, n in enumerate(shape)])
    return b.broadcast_to(g, x.type, like=x)


def count(b, x, axes):
    """How many elements a reduction over ``axes`` combines, as a scalar of ``x``'s element type."""
    n = product(b, [size(b, x, a) for a in axes])
    if isinstance(n, int):
        return b.const(float(n), x.elem)
    return b.convert(b.convert(n, i64), x.elem)


def axis_sum(b, v, axis: int):
    """Sum over ``axis`` keeping it (size 1), broadcast back to ``v``'s shape."""
    return b.broadcast_to(b.reduce("sum", v, [axis], keepdims=True), v.type, like=v)


# ---- cutting and placing pieces -----------------------------------------------------------------


def take(b, v, axis: int, offset, length):
    """Elements ``offset .. offset+length`` of ``v`` along ``axis`` (ints or index values).

    A ``graph.slice`` when every size is static, else a select-and-sum against a
    one-hot [N, length] mask (exact: each sum adds zeros to one element)."""
    shape = [size(b, v, i) for i in range(v.type.rank)]
    if all(isinstance(n, int) for n in shape) and isinstance(offset, int) and isinstance(length, int):
        offsets = [offset if i == axis else 0 for i in range(len(shape))]
        sizes = [length if i == axis else n for i, n in enumerate(shape)]
        if offsets == [0] * len(shape) and sizes == shape:
            return v
        return b.tensor_op("graph.slice", v, offsets=offsets, sizes=sizes)
    return _select_sum(b, v, axis, shape, length, lambda rows, cols: rows.eq(cols + as_index(b, offset)))


def _select_sum(b, v, axis: int, shape: list, length, hit_of):
    """Element j of the result along ``axis`` is the sum over i of ``v[i]`` where
    ``hit_of(i, j)`` (i along ``axis``, j < ``length``): a gather written as a one-hot
    [N, length] mask, a select and a sum (exact: each sum adds zeros to one element)."""
    n = shape[axis]
    grid = [n, length]
    sizes = [as_index(b, d) for d in grid if not isinstance(d, int)]
    grid_t = TensorType([static(d) for d in grid], index)
    rows = b.tensor_op("graph.iota", *sizes, type=grid_t, axis=0)
    cols = b.tensor_op("graph.iota", *sizes, type=grid_t, axis=1)
    wide = shape[:axis + 1] + [length] + shape[axis + 1:]
    mask_shape = [1] * axis + grid + [1] * (len(shape) - axis - 1)
    hit = expand(b, with_sizes(b, hit_of(rows, cols), mask_shape), wide)
    spread = expand(b, with_sizes(b, v, shape[:axis + 1] + [1] + shape[axis + 1:]), wide)
    return b.reduce("sum", b.select(hit, spread, zeros(b, v, wide)), [axis])


def window(b, v, axis: int, low: int, high: int):
    """``v`` along ``axis`` with ``low``/``high`` zeros added (positive) or elements cut (negative)."""
    if low < 0 or high < 0:
        n = size(b, v, axis)
        keep = n + min(low, 0) + min(high, 0) if isinstance(n, int) else \
            as_index(b, n) - as_index(b, -min(low, 0) - min(high, 0))
        v = take(b, v, axis, -min(low, 0), keep)
    low, high = max(low, 0), max(high, 0)
    if not low and not high:
        return v
    pads = [0] * v.type.rank
    lows, highs = list(pads), list(pads)
    lows[axis], highs[axis] = low, high
    return b.tensor_op("graph.pad", v, low=lows, high=highs, value=FloatAttr(0.0, v.elem))


def place(b, g, like, axis: int, offset: int, length):
    """``g`` along ``axis`` put at ``offset`` in zeros as long as ``like`` along ``axis``."""
    total = size(b, like, axis)
    if isinstance(total, int) and isinstance(length, int):
        return window(b, g, axis, offset, total - offset - length)
    g = window(b, g, axis, offset, 0)
    rest = as_index(b, total) - as_index(b, offset + length if isinstance(length, int) else length)
    shape = [size(b, g, i) for i in range(g.type.rank)]
    shape[axis] = rest
    return b.tensor_op("graph.concat", g, zeros(b, g, shape), axis=axis)


def dilate(b, v, axis: int, stride: int):
    """``stride - 1`` zeros after each element along ``axis`` (length n * stride)."""
    if stride == 1:
        return v
    shape = [size(b, v, i) for i in range(v.type.rank)]
    split = with_sizes(b, v, shape[:axis + 1] + [1] + shape[axis + 1:])
    lows = [0] * (v.type.rank + 1)
    highs = list(lows)
    highs[axis + 1] = stride - 1
    spread = b.tensor_op("graph.pad", split, low=lows, high=highs, value=FloatAttr(0.0, v.elem))
    n = shape[axis]
    shape[axis] = n * stride if isinstance(n, int) else as_index(b, n) * as_index(b, stride)
    return with_sizes(b, spread, shape)


def reverse(b, v, axis: int):
    """``v`` reversed along ``axis`` (no reverse op: a select-and-sum with the anti-diagonal)."""
    shape = [size(b, v, i) for i in range(v.type.rank)]
    n = shape[axis]
    return _select_sum(b, v, axis, shape, n, lambda rows, cols: (rows + cols).eq(as_index(b, n) - as_index(b, 1)))


# ---- products of all the other elements ---------------------------------------------------------


def others(b, x, axes):
    """For each element of ``x``, the product of the other elements of its reduction group
    (``axes``), without dividing by ``x`` (exact when ``x`` holds zeros).

    The reduced axes are moved last and flattened to ``[M, K]``.  With static sizes, the
    exclusive prefix and suffix products come from a log-depth scan (Hillis-Steele:
    ``p *= p shifted by 1, 2, 4...`` with ``graph.pad`` of ones and ``graph.slice``),
    O(M K log K); the answer is prefix * suffix.  With a ``?`` size (slice needs static
    sizes) it is ``reduce_prod`` over ``[M, K, K]`` with the diagonal replaced by ones,
    O(M K^2)."""
    rank = x.type.rank
    rest = [i for i in range(rank) if i not in axes]
    perm = rest + list(axes)
    moved = b.transpose(x, perm) if perm != list(range(rank)) else x
    shape = [size(b, x, i) for i in perm]
    m = product(b, shape[:len(rest)])
    k = product(b, shape[len(rest):])
    flat = with_sizes(b, moved, [m, k])
    if isinstance(m, int) and isinstance(k, int):
        out = _scan_others(b, flat, m, k)
    else:
        cube = [m, k, k]
        sizes = [as_index(b, d) for d in cube if not isinstance(d, int)]
        cube_t = TensorType([static(d) for d in cube], index)
        diagonal = b.tensor_op("graph.iota", *sizes, type=cube_t, axis=1).eq(
            b.tensor_op("graph.iota", *sizes, type=cube_t, axis=2))
        spread = expand(b, with_sizes(b, flat, [m, 1, k]), cube)
        out = b.reduce("prod", b.select(diagonal, b.full_like(spread, 1.0), spread), [2])
    out = fit(b, with_sizes(b, out, shape), moved)
    if moved is x:
        return out
    inverse = [perm.index(i) for i in range(rank)]
    return b.transpose(out, inverse)


def _scan_others(b, flat, m: int, k: int):
    one = FloatAttr(1.0, flat.elem)

    def shift(p, s: int, forward: bool):
        # p moved s places along axis 1 (towards the end when forward), ones coming in
        padded = b.tensor_op("graph.pad", p, low=[0, s if forward else 0], high=[0, 0 if forward else s], value=one)
        return b.tensor_op("graph.slice", padded, offsets=[0, 0 if forward else s], sizes=[m, k])

    prefix, suffix, s = flat, flat, 1
    while s < k:
        prefix = prefix * shift(prefix, s, True)
        suffix = suffix * shift(suffix, s, False)
        s *= 2
    return shift(prefix, 1, True) * shift(suffix, 1, False)


# ---- max and min --------------------------------------------------------------------------------


def extreme_weights(b, x, y, axes, keepdims: bool):
    """The derivative of a max/min ``y`` of ``x`` over ``axes`` with respect to each element:
    1/c at the c elements equal to the extreme, 0 elsewhere (the tie rule of arith.maximumf:
    equal maxima share the gradient evenly, as in JAX).  Compared with ``ueq``, so a group
    whose result is NaN spreads it evenly too instead of making 0/0."""
    extreme = unreduce(b, y, x, axes, keepdims)
    hit = b.compare("ueq", x, extreme)
    mask = b.select(hit, b.ones_like(x), b.zeros_like(x))
    counts = b.broadcast_to(b.reduce("sum", mask, list(axes), keepdims=True), x.type, like=x)
    return mask / counts


# ---- conv2d -------------------------------------------------------------------------------------


def conv2d_vjp(b, op, x, w, g):
    """Cotangents of ``y = conv2d(x, w, stride s, padding p)`` (cross-correlation, NCHW/OIHW):
    ``conv2d_input_grad`` and ``graph.conv2d_weight_grad``.  Spatial sizes must be static."""
    stride, padding = op.window(op.attributes)
    if None in (*x.type.shape[2:], *w.type.shape[2:]):
        raise op.error("gradient of 'graph.conv2d' needs static spatial sizes (H, W, KH, KW); "
                       "specialise shapes before differentiating")
    dx = conv2d_input_grad(b, stride, padding, x, w, g)
    dw = b.tensor_op("graph.conv2d_weight_grad", x, g, stride=list(stride), padding=list(padding),
                     kernel=list(w.type.shape[2:]))
    return [dx, fit(b, dw, w)]


def conv2d_input_grad(b, stride, padding, x, w, g):
    """The cotangent of ``x`` in ``y = conv2d(x, w, stride, padding)`` for ``y``'s cotangent ``g``.

    Per spatial axis, with ``gd`` = g dilated by s (s-1 zeros after each element, length
    Ho*s): dx = conv2d(window(gd, low K-1-p, high H+p-Ho*s), w flipped in KH/KW and with O
    and C swapped), stride 1, no padding - the "full" correlation cut to H.  With stride 1
    the two window amounts are both K-1-p: while not negative they are the convolution's own
    padding (no padded copy of ``g``)."""
    (sh, sw), (ph, pw) = stride, padding
    h, wd = x.type.shape[2:]
    kh, kw = w.type.shape[2:]
    ho, wo = g.type.shape[2:]
    flipped = b.transpose(reverse(b, reverse(b, w, 2), 3), [1, 0, 2, 3])
    if (sh, sw) == (1, 1) and kh - 1 - ph >= 0 and kw - 1 - pw >= 0:
        full = [kh - 1 - ph, kw - 1 - pw]
        return fit(b, b.tensor_op("graph.conv2d", g, flipped, stride=[1, 1], padding=full), x)
    gd = dilate(b, dilate(b, g, 2, sh), 3, sw)
    gx = window(b, gd, 2, kh - 1 - ph, h + ph - ho * sh)
    gx = window(b, gx, 3, kw - 1 - pw, wd + pw - wo * sw)
    return fit(b, b.tensor_op("graph.conv2d", gx, flipped, stride=[1, 1], padding=[0, 0]), x)


def sum_all(b, g):
    """All of ``g`` summed, as a scalar (for a value splat to every element)."""
    total = b.reduce("sum", g)
    return b.op("tensor.extract", total, result=g.elem)


def unbroadcast(b, g, x):
    """The cotangent of ``broadcast(x)``: ``g`` summed over the dimensions the broadcast made,
    the leading ones and those of size 1 in ``x``.  A ``?`` dimension of ``x`` that may be 1
    or not at run time is summed by a reshape to ``[s, n / max(s, 1)]`` and a sum over the
    second (``s`` its run-time size: s = 1 sums everything, s = n nothing)."""
    src, dst = x.type, g.type
    lead = dst.rank - src.rank
    if lead:
        g = b.reduce("sum", g, list(range(lead)))
    pairs = list(zip(src.shape, dst.shape[lead:]))
    ones = [i for i, (s, d) in enumerate(pairs) if s == 1 and d != 1]
    if ones:
        g = b.reduce("sum", g, ones, keepdims=True)
    unsure = [i for i, (s, d) in enumerate(pairs) if s is None and d != 1]
    if unsure:
        shape = []
        for i in range(src.rank):
            n = size(b, g, i)
            if i in unsure:
                s = b.dim(x, i)
                shape += [s, as_index(b, n) / s.maximum(b.index(1))]
            else:
                shape.append(n)
        g = b.reduce("sum", with_sizes(b, g, shape), [i + k + 1 for k, i in enumerate(unsure)])
    return fit(b, g, x)
