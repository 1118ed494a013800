"""Loops for ``graph.softmax`` and ``graph.log_softmax``: three passes over each row.

Along the axis, for each row (``outer`` rows of ``n`` elements, ``inner``
apart):

1. the maximum ``m`` of the row (a NaN in the row makes every output NaN);
2. ``e = exp(x - m)``, written to the output for softmax, and ``s = sum(e)``;
3. softmax: ``out = e * (1 / s)``; log_softmax: ``out = (x - m) - log(s)``.

Subtracting the maximum first means ``exp`` never overflows and the largest
term is 1, so ``s`` is in [1, n].  The sum accumulates in f64 (as the
interpreter does); log_softmax's step 3 computes in f64 and rounds once to the
element type, softmax's multiplies ``e`` by ``1/s`` rounded to the element type
(along a contiguous row: one f32 multiply a lane instead of two conversions and
an f64 multiply; two roundings, at most an ulp more than one); ``x - m`` and
``exp`` are computed in the element type (that is what vectorises), so an f32
result differs from the interpreter's (which does everything in f64) by a few
ulp plus ``|x - m| * 2**-24`` relative.

When the axis is the innermost dimension (``inner == 1``), rows are
independent (the row loop is ``parallel``) and each stays in L1 across its
three passes, so x is read from memory once and the output written once.  The
max keeps ``MAX_UNROLL`` accumulators of ``x > m ? x : m``, x86's own max (see ``_max``:
``maximumf`` costs six instructions a vector there, and the row's outputs cannot tell
the two apart); the exps are a loop of their own, writing the output row (one copy of
``exp``'s polynomial, which LLVM's loop vectoriser widens: unrolled into the sum
loop it was 32 copies, and three quarters of the kernel's compile time); the sum
then reads them back from L1 and keeps ``UNROLL`` independent f64 accumulators
in an unrolled loop, added up in sequence after it (fadd is not associative: the
independent chains are what LLVM's SLP vectoriser puts in vector lanes; a
pairwise tree at the end made it pick 2-lane vectors for the whole loop).
log_softmax then overwrites the exps with its results, computed from ``x``.  Otherwise (``inner > 1``) each pass runs
over whole lines of ``inner`` contiguous elements, with the running max and
sum in scratch rows, which vectorise directly.

``exp`` is ``math.exp``: a libm call until ``math-approx`` rewrites it into
arithmetic, after which the exp pass vectorises too.
"""

from __future__ import annotations

import math

import numpy as np
from irc.dialects.scf import INTERLEAVE

from irc.builder import Builder
from irc.types import MemRefType, f64

from . import lowering

UNROLL = 32
"""Independent f64 accumulators of the sum along a contiguous row: each step is two AVX-512
vectors of f32, two independent chains through the (math-approx) exp.  With cache-resident
data on Zen 5: 8 -> 3.2 ms, 16 -> 2.3, 32 and 64 -> 2.2 (4096x1024 f32)."""


MAX_UNROLL = 16
"""Independent accumulators of the row's maximum: one AVX-512 vector of f32 (two AVX2 ones).
64 ran no faster (4096x1024 f32 on Zen 4: the exps dominate) and LLVM's SLP vectoriser took
0.1 s longer over them, two thirds of the kernel's first call."""


@lowering("graph.softmax", "graph.log_softmax")
def lower_softmax(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    shape = output.type.shape
    axis = op.attributes["axis"].value
    if math.prod(shape) == 0:
        return
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    log = op.name == "graph.log_softmax"
    x, out = lb.flat(inputs[0]), lb.flat(output)
    if inner == 1:
        with lb.for_(0, outer, parallel=True) as row:  # rows are independent
            _row(lb, x, out, row.iv * n, n, log)
    else:
        elem = output.type.element_type
        top = ctx.temporary(MemRefType([inner], elem))
        total = ctx.temporary(MemRefType([inner], f64))
        with lb.for_(0, outer) as row:
            _strided_rows(lb, x, out, row.iv * (n * inner), n, inner, top, total, log)


class _Math:
    """The scalar steps shared by both layouts, for one element type."""

    def __init__(self, lb: Builder, elem):
        self.lb = lb
        self.elem = elem

    def wide(self, v):
        return v if v.type is f64 else self.lb.op("arith.extf", v, result=f64)

    def narrow(self, v):
        return v if self.elem is f64 else self.lb.op("arith.truncf", v, result=self.elem)

    def exp_shifted(self, x, top):
        return self.lb.op("math.exp", self.lb.op("arith.subf", x, top))

    def finish(self, x, top, e, scale, log: bool):
        """The output element: ``e * scale`` (scale = 1/s) or ``(x - m) - scale`` (scale = log s)."""
        lb = self.lb
        if log:
            return self.narrow(lb.op("arith.subf", lb.op("arith.subf", self.wide(x), self.wide(top)), scale))
        return self.narrow(lb.op("arith.mulf", self.wide(e), scale))

    def scale(self, total, log: bool):
        lb = self.lb
        if log:
            return lb.op("math.log", total)
        return lb.op("arith.divf", lb.const(1.0, f64), total)


def _row(lb: Builder, x, out, base, n: int, log: bool) -> None:
    """One contiguous row x[base:base+n] -> out[base:base+n]."""
    elem = x.type.element_type
    fm = _Math(lb, elem)

    def at(i):
        return base + i

    top = _max(lb, n, lambda i: lb.load(x, [at(i)]), elem)

    # exp in a loop of its own (one copy of its polynomial for LLVM's loop vectoriser), into
    # the output row, which the sum then reads back from L1; log_softmax overwrites it below.
    # Two iterations in flight, as elementwise.py's loops with a math function.
    with lb.for_(0, n, **{INTERLEAVE: 2}) as i:
        lb.store(fm.exp_shifted(lb.load(x, [at(i.iv)]), top), out, [at(i.iv)])
    total = _sum(lb, n, lambda indices: [fm.wide(lb.load(out, [at(i)])) for i in indices])
    scale = fm.scale(total, log)
    if not log:  # 1/s rounded to the element type once per row: the products stay in it
        scale = fm.narrow(scale)
    with lb.for_(0, n) as i:
        where = at(i.iv)
        if log:
            lb.store(fm.finish(lb.load(x, [where]), top, None, scale, True), out, [where])
        else:
            lb.store(lb.op("arith.mulf", lb.load(out, [where]), scale), out, [where])


def _max(lb: Builder, n: int, term, elem):
    """The largest of ``term(i)`` for i below ``n`` (-inf for none), with ``MAX_UNROLL``
    accumulators, each ``x > m ? x : m``: one vmaxps per vector where ``arith.maximumf``
    takes six (x86's max neither propagates a NaN nor orders -0 < +0, and LLVM then has to).

    The result may differ from ``maximumf``'s in two ways that the row's outputs never show:
    a NaN is skipped (but ``exp(NaN - m)`` makes the sum, and so every output, NaN anyway), and
    of +0 and -0 it keeps the first (``x - m`` is then a zero either way, whose exp is 1; for
    log_softmax the output ``(x - m) - log s`` is a zero of either sign only where log s = 0).
    The accumulators are combined in halves (vector operations again), then the tail."""
    def larger(v, m):
        return lb.select(lb.compare("ogt", v, m), v, m)

    main = n - n % MAX_UNROLL
    lowest = lb.const(-np.inf, elem)
    accs = [lowest] * MAX_UNROLL
    if main:
        with lb.for_(0, main, MAX_UNROLL, inits=accs) as loop:
            values = [term(loop.iv + k if k else loop.iv) for k in range(MAX_UNROLL)]
            loop.yield_(*[larger(v, m) for m, v in zip(loop.args, values)])
        accs = list(loop.results)
    top = accs[0]
    for acc in accs[1:]:
        top = larger(acc, top)
    if n % MAX_UNROLL:
        with lb.for_(main, n, inits=[top]) as tail:
            tail.yield_(larger(term(tail.iv), tail.args[0]))
        top = tail.results[0]
    return top


def _sum(lb: Builder, n: int, terms):
    """The f64 sum of ``terms(indices)`` over i below ``n``: UNROLL accumulators, a tail,
    then the accumulators added in order (see the module docstring for why not a tree)."""
    main = n - n % UNROLL
    zero = lb.const(0.0, f64)
    accs = [zero] * UNROLL
    if main:
        with lb.for_(0, main, UNROLL, inits=accs) as loop:
            values = terms([loop.iv + k if k else loop.iv for k in range(UNROLL)])
            loop.yield_(*[lb.op("arith.addf", acc, v) for acc, v in zip(loop.args, values)])
        accs = loop.results
    if n % UNROLL:
        with lb.for_(main, n, inits=[accs[0]]) as tail:
            tail.yield_(lb.op("arith.addf", tail.args[0], terms([tail.iv])[0]))
        accs = [tail.results[0], *accs[1:]]
    total = accs[0]
    for acc in accs[1:]:
        total = lb.op("arith.addf", total, acc)
    return total


def _strided_rows(lb: Builder, x, out, base, n: int, inner: int, top, total, log: bool) -> None:
    """``inner`` interleaved rows (x[base + t*inner + j] for t below n) at once, a whole
    contiguous line of ``inner`` elements per step, with the running max and sum in scratch."""
    elem = x.type.element_type
    fm = _Math(lb, elem)
    lowest, zero = lb.const(-np.inf, elem), lb.const(0.0, f64)
    with lb.for_(0, inner) as j:
        lb.store(lowest, top, [j.iv])
        lb.store(zero, total, [j.iv])
    with lb.for_(0, n) as t:
        line = base + t.iv * inner
        with lb.for_(0, inner) as j:
            m = lb.load(top, [j.iv])
            lb.store(lb.op("arith.maximumf", m, lb.load(x, [line + j.iv])), top, [j.iv])
    with lb.for_(0, n) as t:
        line = base + t.iv * inner
        with lb.for_(0, inner, **{INTERLEAVE: 2}) as j:
            where = line + j.iv
            e = fm.exp_shifted(lb.load(x, [where]), lb.load(top, [j.iv]))
            if not log:
                lb.store(e, out, [where])
            lb.store(lb.op("arith.addf", lb.load(total, [j.iv]), fm.wide(e)), total, [j.iv])
    with lb.for_(0, inner) as j:
        lb.store(fm.scale(lb.load(total, [j.iv]), log), total, [j.iv])
    with lb.for_(0, n) as t:
        line = base + t.iv * inner
        with lb.for_(0, inner) as j:
            where = line + j.iv
            scale = lb.load(total, [j.iv])
            if log:
                value = fm.finish(lb.load(x, [where]), lb.load(top, [j.iv]), None, scale, True)
            else:
                value = fm.finish(None, None, lb.load(out, [where]), scale, False)
            lb.store(value, out, [where])
