"""Loops for the ops that only move data: transpose, slice, concat, pad, reshape, and iota.

Every buffer is contiguous and row-major with static sizes, so each op is an
address computation on flat views: a nest of ``scf.for`` loops over the output
whose innermost loop walks a contiguous run wherever the op has one (a plain
copy loop, which LLVM turns into vector moves or ``memcpy``).  Before building
the nest, dimensions of size 1 are dropped and neighbouring dimensions that are
contiguous in both source and destination are merged, so a transpose of
``[0, 2, 1]`` on 4x8x16 is 4 copies of one 8x16 transpose, and a slice that
keeps whole rows copies runs of whole rows.  A transpose that moves the
innermost dimension is tiled (TILE x TILE blocks), so both sides stay in cache.

Nothing here computes, so every result is bit-exact with the interpreter.  Each
outermost loop writes disjoint elements per iteration and is marked ``parallel``
(for ``split-parallel``).
"""

from __future__ import annotations

import math

from irc.attributes import StringAttr
from irc.builder import Builder
from irc.types import FloatType, IndexType, i64

from . import lowering

TILE = 16
"""Side of the square blocks of a transpose that moves the innermost dimension."""


def row_major_strides(shape) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def linear(lb: Builder, base, ivs, strides):
    """``base + sum(iv * stride)``, with zero and unit strides folded away."""
    total = base
    for iv, s in zip(ivs, strides):
        if s == 0:
            continue
        term = iv if s == 1 else iv * s
        total = term if isinstance(total, int) and total == 0 else total + term
    return lb.index(total)


def copy_strided(lb: Builder, src, src_base, src_strides, dst, dst_base, dst_strides, sizes) -> None:
    """dst[dst_base + i.dst_strides] = src[src_base + i.src_strides] for every i below ``sizes``
    (flat buffers), after merging the dimensions that are contiguous in both."""
    if math.prod(sizes) == 0:
        return
    dims = _simplify(sizes, src_strides, dst_strides)
    if not dims:
        lb.store(lb.load(src, [lb.index(src_base)]), dst, [lb.index(dst_base)])
        return
    sizes = [n for n, _, _ in dims]
    with lb.nest(sizes, parallel=True) as ivs:
        value = lb.load(src, [linear(lb, src_base, ivs, [s for _, s, _ in dims])])
        lb.store(value, dst, [linear(lb, dst_base, ivs, [d for _, _, d in dims])])


def _simplify(sizes, src_strides, dst_strides) -> list[tuple[int, int, int]]:
    """(size, src stride, dst stride) per dimension, without size-1 dimensions, with each
    dimension merged into the one before it when both strides continue it."""
    dims: list[tuple[int, int, int]] = []
    for n, s, d in zip(sizes, src_strides, dst_strides):
        if n == 1:
            continue
        if dims:
            pn, ps, pd = dims[-1]
            if ps == s * n and pd == d * n:
                dims[-1] = (pn * n, s, d)
                continue
        dims.append((n, s, d))
    return dims


# -- transpose ----------------------------------------------------------------------------------------


@lowering("graph.transpose")
def lower_transpose(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    src_shape = inputs[0].type.shape
    perm = [e.value for e in op.attributes["perm"].elements]
    src_strides = row_major_strides(src_shape)
    out_shape = [src_shape[p] for p in perm]
    if math.prod(out_shape) == 0:
        return
    sizes_strides = _simplify(out_shape, [src_strides[p] for p in perm], row_major_strides(out_shape))
    src, dst = lb.flat(inputs[0]), lb.flat(output)
    inner = [i for i, (_, s, _) in enumerate(sizes_strides) if s == 1]
    if len(sizes_strides) < 2 or not inner or inner[0] == len(sizes_strides) - 1:
        copy_strided(lb, src, 0, [s for _, s, _ in sizes_strides], dst, 0, [d for _, _, d in sizes_strides],
                     [n for n, _, _ in sizes_strides])
        return
    _tiled_transpose(lb, src, dst, sizes_strides, inner[0])


def _tiled_transpose(lb: Builder, src, dst, dims, q: int) -> None:
    """Copy where output dimension ``q`` is the source's contiguous one and the last output
    dimension is the destination's: tile both so reads and writes each use whole lines."""
    last = len(dims) - 1
    outer = [d for d in range(len(dims)) if d not in (q, last)]
    with lb.nest([dims[d][0] for d in outer], parallel=True) as outer_ivs:
        src_base = linear(lb, 0, outer_ivs, [dims[d][1] for d in outer])
        dst_base = linear(lb, 0, outer_ivs, [dims[d][2] for d in outer])
        nq, nl = dims[q][0], dims[last][0]
        with lb.for_(0, nq, TILE, parallel=not outer) as tq, lb.for_(0, nl, TILE) as tl:
            q_end = lb.op("arith.minsi", tq.iv + TILE, lb.index(nq))
            l_end = lb.op("arith.minsi", tl.iv + TILE, lb.index(nl))
            with lb.for_(tq.iv, q_end) as i, lb.for_(tl.iv, l_end) as j:
                ivs = [i.iv, j.iv]
                value = lb.load(src, [linear(lb, src_base, ivs, [dims[q][1], dims[last][1]])])
                lb.store(value, dst, [linear(lb, dst_base, ivs, [dims[q][2], dims[last][2]])])


# -- slice, concat, pad ------------------------------------------------------------------------------


def _ints(op, key: str, default=None) -> list[int]:
    attr = op.attributes.get(key)
    if attr is None:
        return list(default)
    return [e.value for e in attr.elements]


@lowering("graph.slice")
def lower_slice(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    shape = inputs[0].type.shape
    offsets, sizes = _ints(op, "offsets"), _ints(op, "sizes")
    steps = _ints(op, "strides", [1] * len(shape))
    src_strides = row_major_strides(shape)
    base = sum(o * s for o, s in zip(offsets, src_strides))
    copy_strided(lb, lb.flat(inputs[0]), base, [st * s for st, s in zip(steps, src_strides)],
                 lb.flat(output), 0, row_major_strides(sizes), sizes)


@lowering("graph.concat")
def lower_concat(ctx, op, inputs, output) -> None:
    """Each operand is a run of ``outer`` contiguous chunks; they interleave in the output."""
    lb = ctx.lb
    axis = op.attributes["axis"].value
    out_shape = output.type.shape
    outer = math.prod(out_shape[:axis])
    inner = math.prod(out_shape[axis + 1:])
    out_chunk = out_shape[axis] * inner
    dst = lb.flat(output)
    offset = 0
    for buf in inputs:
        chunk = buf.type.shape[axis] * inner
        copy_strided(lb, lb.flat(buf), 0, [chunk, 1], dst, offset, [out_chunk, 1], [outer, chunk])
        offset += chunk


@lowering("graph.pad")
def lower_pad(ctx, op, inputs, output) -> None:
    """Fill the whole output with the value, then copy the operand into its interior."""
    lb = ctx.lb
    low = _ints(op, "low")
    elem = output.type.element_type
    attr = op.attributes["value"]
    value = lb.const(attr.value, elem)
    dst = lb.flat(output)
    fill(lb, dst, value)
    shape = inputs[0].type.shape
    out_strides = row_major_strides(output.type.shape)
    base = sum(lo * s for lo, s in zip(low, out_strides))
    copy_strided(lb, lb.flat(inputs[0]), 0, row_major_strides(shape), dst, base, out_strides, shape)


def fill(lb: Builder, flat, value) -> None:
    """Every element of the flat buffer ``flat`` becomes ``value``."""
    with lb.for_(0, lb.dim(flat, 0), parallel=True) as loop:
        lb.store(value, flat, [loop.iv])


@lowering("graph.reshape")
def lower_reshape(ctx, op, inputs, output) -> None:
    """A reshape that must land in its own buffer (a returned value): a flat copy."""
    lb = ctx.lb
    src, dst = lb.flat(inputs[0]), lb.flat(output)
    with lb.for_(0, lb.dim(dst, 0), parallel=True) as loop:
        lb.store(lb.load(src, [loop.iv]), dst, [loop.iv])


# -- iota -----------------------------------------------------------------------------------------------


@lowering("graph.iota")
def lower_iota(ctx, op, inputs, output) -> None:
    """Outer x count x inner: the count, converted once, is stored over a contiguous run."""
    lb = ctx.lb
    shape = output.type.shape
    axis = op.attributes["axis"].value
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    elem = output.type.element_type
    dst = lb.flat(output)
    if outer * n * inner == 0:
        return
    with lb.for_(0, outer, parallel=True) as o, lb.for_(0, n) as t:
        value = index_to(lb, t.iv, elem)
        base = (o.iv * n + t.iv) * inner
        with lb.for_(0, inner) as j:
            lb.store(value, dst, [base + j.iv])


def index_to(lb: Builder, value, elem):
    """An index as ``elem``, as numpy's int64 ``astype`` does it: integers wrap, floats round once."""
    if isinstance(elem, IndexType):
        return value
    if isinstance(elem, FloatType):
        return lb.cast("arith.sitofp", lb.cast("arith.index_cast", value, i64), elem)
    return lb.cast("arith.index_cast", value, elem)


# -- gather -----------------------------------------------------------------------------------------------


@lowering("graph.gather")
def lower_gather(ctx, op, inputs, output) -> None:
    """outer x indices x inner: each index picks a contiguous run of ``inner`` elements of the
    table, copied to its place in the output; an index outside [0, size) faults first, with the
    interpreter's message (``cf.assert``), as ``tensor.extract`` does."""
    lb = ctx.lb
    shape = inputs[0].type.shape
    axis = op.attributes["axis"].value
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    count = math.prod(inputs[1].type.shape)
    if outer * count * inner == 0:
        return
    table, idx, dst = lb.flat(inputs[0]), lb.flat(inputs[1]), lb.flat(output)
    with lb.nest([outer, count], parallel=True) as (o, k):
        row = lb.cast("arith.index_cast", lb.load(idx, [k]), lb.index(0).type)
        dims = "[" + ", ".join(str(d) for d in shape) + "]"
        lb.op("cf.assert", lb.compare("ult", row, lb.index(n)), result=[],  # a negative one too
              msg=StringAttr(f"an index is out of range [0, {n}) for axis {axis} of shape {dims}"))
        src = (o * n + row) * inner
        dst_base = (o * count + k) * inner
        with lb.for_(0, inner) as j:
            lb.store(lb.load(table, [src + j.iv]), dst, [dst_base + j.iv])
