"""Loops for the GPU target (``tensor-to-loops{gpu=true}``): simple forms the grid mapping reads.

The CPU lowerings are shaped for one core's vector units: unrolled accumulators, packed GEMM
panels, rows kept in L1.  A GPU wants the plain structure back, which ``gpu-map-parallel``
turns into one block per row with a shared-memory tree, or one thread per element:

* an elementwise group with broadcast operands: one flat ``parallel`` loop over the output,
  indices recovered by division (the CPU's nest gives a thread a whole row);
* a reduction (``graph.fused`` with ``reduce``) that keeps some dimensions: a ``parallel``
  nest over the kept elements, each one accumulator carried through loops over the reduced
  axes (where the CPU walks a general reduction in memory order through a scratch buffer, a
  serial loop on a GPU);
* softmax and log_softmax along the last axis: a ``parallel`` row loop holding a max loop, a
  sum loop (one accumulator each) and a ``parallel`` normalising loop;
* a 2-D matmul: ``parallel`` loops over the rows and columns of C around one accumulator loop
  over k (an operand that ``reads_transposed`` is read with its indices swapped).

Everything else takes the CPU's lowering.  Same element types and accumulators as the CPU
lowerings (f64 sums for f32), so results agree within rounding.
"""

from __future__ import annotations

import math

import numpy as np

from irc.types import FloatType, f64

from . import elementwise, matmul, softmax

GPU_LOWERINGS: dict = {}
"""op name -> lowering, consulted before ``LOWERINGS`` when tensor-to-loops has ``gpu``."""


def gpu_lowering(*names: str):
    def register(fn):
        for name in names:
            GPU_LOWERINGS[name] = fn
        return fn

    return register


@gpu_lowering("graph.fused")
def lower_fused_rows(ctx, op, inputs, output) -> None:
    """A reduction: a ``parallel`` nest over the kept dimensions, each element one accumulator
    carried through loops over the reduced dimensions (any of them, in order)."""
    if not op.reduction:
        _lower_elementwise(ctx, op, inputs, output)
        return
    lb = ctx.lb
    kind = op.reduction
    rank = op.domain_rank
    axes = sorted(op.axes)
    elem = op.results[0].type.element_type
    acc_t = elementwise.accumulator_type(kind, elem)
    combine = elementwise._COMBINE[(kind, isinstance(elem, FloatType))]
    sizes = elementwise._domain_sizes(lb, op, inputs, output)
    kept = [d for d in range(rank) if d not in axes]
    if any(getattr(s.value.defining_op, "name", "") != "arith.constant" for s in sizes) or not kept:
        elementwise.lower_fused(ctx, op, inputs, output)  # one output element: the CPU's unrolled loop
        return
    count = 1
    for d in axes:
        count *= sizes[d].value.defining_op.attributes["value"].value

    def accumulate(ivs: dict, remaining: list, acc):
        d = remaining[0]
        with lb.for_(0, sizes[d], inits=[acc]) as loop:
            point = {**ivs, d: loop.iv}
            if len(remaining) > 1:
                loop.yield_(accumulate(point, remaining[1:], loop.args[0]))
            else:
                v = elementwise._element(lb, op, inputs, [point[k] for k in range(rank)])
                v = v if v.type is acc_t else lb.op("arith.extf", v, result=acc_t)
                loop.yield_(lb.op(combine, loop.args[0], v))
        return loop.results[0]

    with lb.nest([sizes[d] for d in kept], parallel=True) as outer:
        ivs = dict(zip(kept, outer))
        acc = accumulate(ivs, axes, lb.const(elementwise._identity(kind, acc_t), acc_t))
        if kind == "mean":
            acc = lb.op("arith.divf", acc, lb.const(float(count), f64))
        if acc.type is not elem:
            acc = lb.op("arith.truncf", acc, result=elem)
        index = [ivs.get(d, 0) for d in range(rank)] if op.keepdims else outer
        lb.store(acc, output, index)


def _lower_elementwise(ctx, op, inputs, output) -> None:
    """An elementwise group with broadcast operands: one ``parallel`` loop over every element
    of the (static) output, its indices recovered by division, so that each thread of the
    grid computes one element and neighbouring threads touch neighbouring memory (the CPU's
    nest would give each thread a whole row)."""
    lb = ctx.lb
    shape = output.type.shape
    identity = list(range(op.domain_rank))
    if None in shape or len(shape) < 2 or op.domain_rank != len(shape) or \
            all(not b.type.is_shaped or list(m) == identity for b, m in zip(inputs, op.maps)):
        elementwise.lower_fused(ctx, op, inputs, output)
        return
    with lb.for_(0, math.prod(shape), parallel=True) as loop:
        rest, index = loop.iv, []
        for n in reversed(shape[1:]):
            index.append(rest - (rest / n) * n)
            rest = rest / n
        index = [rest, *reversed(index)]
        lb.store(elementwise._element(lb, op, inputs, index), output, index)


@gpu_lowering("graph.softmax", "graph.log_softmax")
def lower_softmax_rows(ctx, op, inputs, output) -> None:
    shape = output.type.shape
    axis = op.attributes["axis"].value
    if axis != len(shape) - 1 or math.prod(shape) == 0:
        softmax.lower_softmax(ctx, op, inputs, output)
        return
    lb = ctx.lb
    outer, n = math.prod(shape[:-1]), shape[-1]
    log = op.name == "graph.log_softmax"
    x, out = lb.flat(inputs[0]), lb.flat(output)
    elem = output.type.element_type
    fm = softmax._Math(lb, elem)
    with lb.for_(0, outer, parallel=True) as row:
        base = row.iv * n
        with lb.for_(0, n, inits=[lb.const(-np.inf, elem)]) as loop:
            loop.yield_(lb.op("arith.maximumf", loop.args[0], lb.load(x, [base + loop.iv])))
        top = loop.results[0]
        with lb.for_(0, n, inits=[lb.const(0.0, f64)]) as loop:
            e = fm.exp_shifted(lb.load(x, [base + loop.iv]), top)
            loop.yield_(lb.op("arith.addf", loop.args[0], fm.wide(e)))
        scale = fm.scale(loop.results[0], log)
        with lb.for_(0, n, parallel=True) as j:
            where = base + j.iv
            v = lb.load(x, [where])
            if log:
                value = fm.finish(v, top, None, scale, True)
            else:
                value = fm.finish(None, top, fm.exp_shifted(v, top), scale, False)
            lb.store(value, out, [where])


@gpu_lowering("graph.matmul")
def lower_matmul_rows(ctx, op, inputs, output) -> None:
    a, b = inputs
    if output.type.rank != 2 or a.type.rank != 2 or b.type.rank != 2:
        matmul.lower_matmul(ctx, op, inputs, output)
        return
    lb = ctx.lb
    m, n = output.type.shape
    k = op.operands[0].type.shape[1]
    ta, tb = (tuple(ctx.transposed) + (False, False))[:2]
    elem = output.type.element_type
    with lb.for_(0, m, parallel=True) as i, lb.for_(0, n, parallel=True) as j:
        with lb.for_(0, k, inits=[lb.const(0, elem)]) as loop:
            x = lb.load(a, [loop.iv, i.iv] if ta else [i.iv, loop.iv])
            y = lb.load(b, [j.iv, loop.iv] if tb else [loop.iv, j.iv])
            loop.yield_(lb.op("arith.addf" if isinstance(elem, FloatType) else "arith.addi", loop.args[0],
                              lb.op("arith.mulf" if isinstance(elem, FloatType) else "arith.muli", x, y)))
        lb.store(loop.results[0], output, [i.iv, j.iv])
