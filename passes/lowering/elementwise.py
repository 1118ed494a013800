"""Loops for ``graph.fused`` (elementwise groups and reductions) and tensor constants.

An elementwise group whose tensor operands are all read at the output's own index
becomes one flat loop over every element (buffers are contiguous), the loop LLVM
vectorises best; with broadcast operands it becomes a nest over the domain, the
innermost loop running along the last, contiguous dimension.

A reduction over the trailing dimensions keeps ``UNROLL`` independent
accumulators in the innermost loop, combined at the end: without reassociation
(no fast-math) this is what lets LLVM use vector lanes for a sum.  Float sums,
products and means accumulate in f64, as ``tensor.reduce_*`` is defined; max and
min in the element type.  Any other reduction accumulates into a scratch buffer
of the result's shape while the domain is walked in memory order; the reduced dims
at its end, if any, summed first as a trailing reduction is (batch norm's
statistics over N, H and W: per image and channel a vectorised sum over H x W).
"""

from __future__ import annotations

import numpy as np
from irc.dialects.scf import INTERLEAVE

from irc.attributes import DenseAttr
from irc.builder import Builder
from irc.types import FloatType, MemRefType, f64, i64, index

from ..math_approx_kernels import KERNELS
from . import lowering

UNROLL = 16
"""Independent accumulators in the innermost loop of a trailing reduction."""

_COMBINE = {("sum", True): "arith.addf", ("sum", False): "arith.addi",
            ("mean", True): "arith.addf",
            ("prod", True): "arith.mulf", ("prod", False): "arith.muli",
            ("max", True): "arith.maximumf", ("max", False): "arith.maxsi",
            ("min", True): "arith.minimumf", ("min", False): "arith.minsi"}


def _identity(kind: str, t):
    if kind in ("sum", "mean"):
        return 0
    if kind == "prod":
        return 1
    if isinstance(t, FloatType):
        return -np.inf if kind == "max" else np.inf
    bits = t.width if hasattr(t, "width") else 64
    return -(1 << (bits - 1)) if kind == "max" else (1 << (bits - 1)) - 1


def accumulator_type(kind: str, elem):
    return f64 if isinstance(elem, FloatType) and kind in ("sum", "prod", "mean") else elem


def _body_at(lb: Builder, op, inputs, indices_for) -> object:
    """The body of ``op`` at one point: each operand loaded at ``indices_for(its map)``, then
    the cloned scalar ops; returns the value the body yields."""
    body = op.body
    value_map = {}
    for arg, buf, m in zip(body.args, inputs, op.maps):
        value_map[arg] = lb.load(buf, indices_for(m)).value if isinstance(buf.type, MemRefType) else buf
    for inner in body.ops:
        if inner is body.terminator:
            break
        lb.insert(inner.clone(value_map))
    yielded = body.terminator.operands[0]
    return value_map.get(yielded, yielded)


def _element(lb: Builder, op, inputs, domain_ivs) -> object:
    """The body at the domain point ``domain_ivs`` (broadcast dimensions read index 0)."""
    return _body_at(lb, op, inputs, lambda m: [domain_ivs[d] if d >= 0 else 0 for d in m])


@lowering("graph.fused")
def lower_fused(ctx, op, inputs, output) -> None:
    if op.reduction:
        _lower_reduction(ctx, op, inputs, output)
        return
    lb = ctx.lb
    rank = op.domain_rank
    identity = list(range(rank))
    hints = {INTERLEAVE: 2} if _long_chain(op) else {}
    if all(not isinstance(b.type, MemRefType) or list(m) == identity for b, m in zip(inputs, op.maps)):
        flat = [lb.flat(b) if isinstance(b.type, MemRefType) else b for b in inputs]
        out = lb.flat(output)
        n = lb.dim(out, 0)
        start = 0
        if _aligns(ctx.options) and _streams(out):
            start = _aligning_head(lb, out, n)
            with lb.for_(0, start, parallel=True) as head:
                lb.store(_body_at(lb, op, flat, lambda m: [head.iv]), out, [head.iv])
        with lb.for_(start, n, parallel=True, **hints) as loop:
            lb.store(_body_at(lb, op, flat, lambda m: [loop.iv]), out, [loop.iv])
        return
    with lb.nest([lb.dim(output, d) for d in range(rank)], parallel=True, innermost=hints) as ivs:
        lb.store(_element(lb, op, inputs, ivs), output, ivs)


LINE = 64
"""Bytes of a cache line (every x86-64 and current AArch64 core's)."""


def _aligning_head(lb: Builder, out, n):
    """How many elements of ``out`` come before its first cache-line boundary (at most ``n``):
    a flat loop runs those apart, so that the vector loop's stores, and the loads of inputs
    that share the output's misalignment, never straddle two lines.  numpy puts a large array
    16 bytes past a page, where a 64-byte vector split every access in two: at 2^24 f32 the
    sigmoid took 10-18% longer from there than from a line's start (AVX-512 and AVX2;
    docs/benchmarks.md).  Only the split point moves: each element is computed as before."""
    size = _element_bytes(out)
    address = lb.op("memref.extract_aligned_pointer_as_index", out, result=index)
    skew = lb.op("arith.remui", address, lb.index(LINE))
    to_boundary = lb.op("arith.remui", lb.index(LINE) - skew, lb.index(LINE))
    return lb.op("arith.minui", lb.op("arith.divui", to_boundary, lb.index(size)), n)


def _aligns(options: dict) -> bool:
    """Whether flat loops start at a cache line (``_aligning_head``): for a CPU (the host options
    are set), on one thread.  split-parallel cuts only loops of constant bounds into chunks,
    which the head's run-time split point would stop; aligning each chunk is not done yet."""
    return bool(options.get("vector_bits")) and not options.get("gpu") and options.get("threads", 1) <= 1


HEAD_MIN_BYTES = 64 << 10
"""Outputs smaller than this (known at compile time) get no head: they stay in the L1 and L2
caches, where a split line costs little, and a loop of constant bounds stays one that
optsize-small-loops and outline-loops recognise (a head loop of run-time bounds made a small
function beside a GEMM lose ``optsize``, and compile the math function twice)."""


def _streams(out) -> bool:
    """Whether ``out`` is a buffer of bytes-wide elements that may not fit the caches."""
    size = _element_bytes(out)
    t = out.type
    return bool(size) and (not t.has_static_shape or t.num_elements * size >= HEAD_MIN_BYTES)


def _element_bytes(buf) -> int:
    """Bytes of an element of ``buf`` (0 for i1, whose loops are left as they are)."""
    width = getattr(buf.type.element_type, "width", 0)
    return width // 8 if width >= 8 else 0


def _long_chain(op) -> bool:
    """Whether the group's body computes a math function (``math-approx``'s polynomials or a
    libm call): one long dependency chain per element, so its loop should keep two iterations
    in flight (``INTERLEAVE``).  LLVM's vectoriser interleaves by the registers a loop leaves
    free, and a polynomial's dozen constants leave none of AVX2's 16: there it ran one chain
    at a time, the tanh-GELU 1.3x and softmax 1.1x slower than with two
    (``benchmarks/tensor_cpu.py --cpu x86-64-v3``, docs/benchmarks.md).  With AVX-512's 32
    registers it chose two already."""
    return any(inner.name.startswith("math.") and inner.name[5:] in KERNELS for inner in op.body.ops)


def _domain_sizes(lb: Builder, op, inputs, output):
    sizes = []
    declared = op.declared_domain
    for d in range(op.domain_rank):
        source = op.domain_source(d)
        if source is not None:
            sizes.append(lb.dim(inputs[source[0]], source[1]))
        elif declared and declared[d] >= 0:
            sizes.append(lb.index(declared[d]))
        else:
            sizes.append(lb.dim(output, op.result_dim_of(d)))
    return sizes


def _lower_reduction(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    kind = op.reduction
    elem = op.results[0].type.element_type
    acc_t = accumulator_type(kind, elem)
    is_float = isinstance(elem, FloatType)
    combine = _COMBINE[(kind, is_float)]
    rank = op.domain_rank
    axes = sorted(op.axes)
    sizes = _domain_sizes(lb, op, inputs, output)
    kept = [d for d in range(rank) if d not in axes]
    count = 1
    for d in axes:
        count = count * sizes[d] if count != 1 else sizes[d]

    def widen(v):
        return v if v.type is acc_t else lb.op("arith.extf", v, result=acc_t)

    def finish(acc):
        if kind == "mean":
            n = lb.op("arith.uitofp", lb.op("arith.index_cast", count, result=i64), result=f64)
            acc = lb.op("arith.divf", acc, n)
        return acc if acc.type is elem else lb.op("arith.truncf", acc, result=elem)

    if axes == list(range(rank - len(axes), rank)):
        # Trailing reduction: the kept dims outside, U accumulators inside.
        with lb.nest([sizes[d] for d in kept], parallel=True) as outer:
            init = lb.const(_identity(kind, acc_t), acc_t)
            accs = [init] * UNROLL
            ivs = dict(zip(kept, outer))
            accs = _reduce_loops(lb, op, inputs, sizes, axes, ivs, accs, combine, widen)
            total = accs[0]
            for acc in accs[1:]:  # in sequence: a pairwise tree makes LLVM pick 2-lane vectors
                total = lb.op(combine, total, acc)
            accs = [total]
            index = [ivs[d] if d in kept else 0 for d in range(rank)] if op.keepdims else outer
            lb.store(finish(accs[0]), output, index)
        return
    # General reduction: accumulate into a scratch buffer walking the domain in order.
    acc_buf = ctx.temporary(MemRefType([op.results[0].type.shape[op.result_dim_of(d)] for d in kept], acc_t))
    init = lb.const(_identity(kind, acc_t), acc_t)
    with lb.nest([sizes[d] for d in kept], parallel=True) as ivs:
        lb.store(init, acc_buf, ivs)
    trailing = _trailing(axes, rank)
    if trailing:
        # The reduced dims at the end (batch norm's H and W in [0, 2, 3]) are summed like a
        # trailing reduction, U accumulators, once per point of the dims before them; each sum
        # then goes into the scratch.  One scalar chain through the scratch, element by element,
        # is bound by the latency of its additions (4 cycles an element).
        lead = list(range(rank - len(trailing)))
        with lb.nest([sizes[d] for d in lead]) as lead_ivs:
            ivs = dict(zip(lead, lead_ivs))
            accs = _reduce_loops(lb, op, inputs, sizes, trailing, ivs, [init] * UNROLL, combine, widen)
            total = accs[0]
            for acc in accs[1:]:
                total = lb.op(combine, total, acc)
            index = [ivs[d] for d in kept]
            lb.store(lb.op(combine, lb.load(acc_buf, index), total), acc_buf, index)
    else:
        with lb.nest(sizes) as ivs:
            index = [ivs[d] for d in kept]
            v = widen(_element(lb, op, inputs, ivs))
            lb.store(lb.op(combine, lb.load(acc_buf, index), v), acc_buf, index)
    with lb.nest([sizes[d] for d in kept], parallel=True) as ivs:
        full = dict(zip(kept, ivs))
        index = [full[d] if d in kept else 0 for d in range(rank)] if op.keepdims else ivs
        lb.store(finish(lb.load(acc_buf, ivs)), output, index)


def _trailing(axes: list[int], rank: int) -> list[int]:
    """The reduced dims that end the domain (``[2, 3]`` of ``[0, 2, 3]`` in rank 4)."""
    end = rank
    while end - 1 in axes:
        end -= 1
    return list(range(end, rank))


def _reduce_loops(lb, op, inputs, sizes, axes, ivs, accs, combine, widen):
    """Loops over the reduced dims ``axes`` (all trailing), carrying the accumulators ``accs``;
    the innermost is unrolled ``len(accs)`` times with a remainder loop."""
    *outer_axes, last = axes
    if outer_axes:
        d = outer_axes[0]
        with lb.for_(0, sizes[d], inits=accs) as loop:
            ivs = {**ivs, d: loop.iv}
            loop.yield_(*_reduce_loops(lb, op, inputs, sizes, outer_axes[1:] + [last], ivs, loop.args,
                                       combine, widen))
        return loop.results
    n = sizes[last]
    u = len(accs)
    main = lb.op("arith.muli", lb.op("arith.divui", n, lb.index(u)), lb.index(u))
    with lb.for_(0, main, u, inits=accs) as loop:
        new = []
        for k, acc in enumerate(loop.args):
            point = {**ivs, last: loop.iv + k if k else loop.iv}
            v = widen(_element(lb, op, inputs, [point[d] for d in range(op.domain_rank)]))
            new.append(lb.op(combine, acc, v))
        loop.yield_(*new)
    accs = loop.results
    with lb.for_(main, n, inits=[accs[0]]) as tail:
        point = {**ivs, last: tail.iv}
        v = widen(_element(lb, op, inputs, [point[d] for d in range(op.domain_rank)]))
        tail.yield_(lb.op(combine, tail.args[0], v))
    return [tail.results[0], *accs[1:]]


@lowering("arith.constant")
def lower_constant(ctx, op, inputs, output) -> None:
    """A tensor constant: a fill loop for a splat; otherwise loops over the dimensions along
    which it does not change (a broadcast that canonicalize folded), computing an integer
    value that is affine in the indices (an ``arange``, the flat positions of a gather) and
    storing the other values one by one.

    Code grows with the number of values stored one by one, so what is regular is looped:
    a folded ``[14, 100]`` broadcast of ``arange(100)`` was 1,400 stores (and as many lines
    of LLVM IR) and is now one loop nest."""
    lb = ctx.lb
    attr = op.attributes["value"]
    elem = output.type.element_type
    if isinstance(attr, DenseAttr) and attr.is_splat:
        value = lb.const(attr.array.flat[0].item(), elem)
        flat = lb.flat(output)
        with lb.for_(0, lb.dim(flat, 0), parallel=True) as loop:
            lb.store(value, flat, [loop.iv])
        return
    array = np.asarray(attr.array)
    if array.size == 0:
        return
    varying = [d for d in range(array.ndim) if not _constant_along(array, d)]
    core = array[tuple(slice(None) if d in varying else 0 for d in range(array.ndim))]
    affine = _affine(core) if not isinstance(elem, FloatType) and elem.width > 1 else None
    if affine is not None:
        base, steps = affine
        with lb.nest(array.shape, parallel=True) as ivs:
            value = lb.index(base)
            for d, step in zip(varying, steps):
                if step:
                    value = value + ivs[d] * step
            lb.store(lb.convert(value, elem), output, ivs)
        return
    if core.size == array.size:
        flat = lb.flat(output)
        for i, v in enumerate(array.reshape(-1).tolist()):
            lb.store(lb.const(v, elem), flat, [i])
        return
    with lb.nest([array.shape[d] for d in range(array.ndim) if d not in varying], parallel=True) as ivs:
        outer = iter(ivs)
        loop_index = [None if d in varying else next(outer) for d in range(array.ndim)]
        for at, v in zip(np.ndindex(core.shape), core.reshape(-1).tolist()):
            inner = iter(at)
            index = [next(inner) if i is None else i for i in loop_index]
            lb.store(lb.const(v, elem), output, index)


def _constant_along(array: np.ndarray, axis: int) -> bool:
    """Whether ``array`` holds the same values at every index of ``axis`` (NaNs equal)."""
    first = array.take([0], axis=axis)
    if array.dtype.kind == "f":
        return bool(np.all((array == first) | (np.isnan(array) & np.isnan(first))))
    return bool(np.all(array == first))


def _affine(core: np.ndarray) -> tuple[int, list[int]] | None:
    """(base, one step per dimension) with ``core[i] == base + sum(step[d] * i[d])`` exactly, or
    None: integers whose values are a linear function of their indices."""
    if core.ndim == 0 or core.dtype.kind not in "iu":
        return None
    flat_first = core.reshape(-1)[0]
    base = int(flat_first)
    steps = []
    for d in range(core.ndim):
        at = [0] * core.ndim
        if core.shape[d] > 1:
            at[d] = 1
        steps.append(int(core[tuple(at)]) - base if core.shape[d] > 1 else 0)
    grid = np.indices(core.shape).reshape(core.ndim, -1)
    expected = base + np.tensordot(np.asarray(steps, dtype=np.int64), grid, axes=1)
    if not np.array_equal(expected.reshape(core.shape), core.astype(np.int64)):
        return None
    return base, steps
