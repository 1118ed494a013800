"""Loops for the GPU target (``tensor-to-loops{gpu=true}``): simple forms the grid mapping reads.

The CPU lowerings are shaped for one core's vector units: unrolled accumulators, packed GEMM
panels, rows kept in L1.  A GPU wants the plain structure back, which ``gpu-map-parallel``
turns into one block per row with a shared-memory tree, or one thread per element:

* a trailing reduction of one axis (``tensor.fused`` with ``reduce``): a ``parallel`` loop
  over the kept elements, each one accumulator loop over the reduced axis;
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

from irc.types import FloatType, f64, i64

from . import elementwise, matmul, softmax

GPU_LOWERINGS: dict = {}
"""op name -> lowering, consulted before ``LOWERINGS`` when tensor-to-loops has ``gpu``."""


def gpu_lowering(*names: str):
    def register(fn):
        for name in names:
            GPU_LOWERINGS[name] = fn
        return fn

    return register


@gpu_lowering("tensor.fused")
def lower_fused_rows(ctx, op, inputs, output) -> None:
    rank = op.domain_rank
    if not op.reduction or list(op.axes) != [rank - 1]:
        elementwise.lower_fused(ctx, op, inputs, output)
        return
    lb = ctx.lb
    kind = op.reduction
    elem = op.results[0].type.element_type
    acc_t = elementwise.accumulator_type(kind, elem)
    combine = elementwise._COMBINE[(kind, isinstance(elem, FloatType))]
    sizes = elementwise._domain_sizes(lb, op, inputs, output)
    kept = list(range(rank - 1))
    with lb.nest([sizes[d] for d in kept], parallel=True) as outer:
        with lb.for_(0, sizes[-1], inits=[lb.const(elementwise._identity(kind, acc_t), acc_t)]) as loop:
            v = elementwise._element(lb, op, inputs, [*outer, loop.iv])
            v = v if v.type is acc_t else lb.op("arith.extf", v, result=acc_t)
            loop.yield_(lb.op(combine, loop.args[0], v))
        acc = loop.results[0]
        if kind == "mean":
            count = lb.op("arith.uitofp", lb.op("arith.index_cast", sizes[-1], result=i64), result=f64)
            acc = lb.op("arith.divf", acc, count)
        if acc.type is not elem:
            acc = lb.op("arith.truncf", acc, result=elem)
        index = [*outer, 0] if op.keepdims else outer
        lb.store(acc, output, index)


@gpu_lowering("tensor.softmax", "tensor.log_softmax")
def lower_softmax_rows(ctx, op, inputs, output) -> None:
    shape = output.type.shape
    axis = op.attributes["axis"].value
    if axis != len(shape) - 1 or math.prod(shape) == 0:
        softmax.lower_softmax(ctx, op, inputs, output)
        return
    lb = ctx.lb
    outer, n = math.prod(shape[:-1]), shape[-1]
    log = op.name == "tensor.log_softmax"
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


@gpu_lowering("tensor.matmul")
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
