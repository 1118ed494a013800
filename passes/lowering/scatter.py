"""Loops for ``graph.scatter_add`` (dialects/graph_scatter.py).

The result starts as the destination (its own buffer when the destination is dead after
the op and owned by the function: ``bufferize`` hands it over; a copy otherwise); then, for
each index in row-major order, the slice of updates is added to the row it names, so
repeated indices add up in the interpreter's order.  An index outside [0, size) faults
first with the interpreter's message (``cf.assert``), as ``graph.gather``'s lowering does.
"""

from __future__ import annotations

import math

from irc.attributes import StringAttr

from . import lowering


@lowering("graph.scatter_add")
def lower_scatter_add(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    shape = inputs[0].type.shape
    axis = op.attributes["axis"].value
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    count = math.prod(inputs[1].type.shape)
    out = lb.flat(output)
    if output is not inputs[0]:
        dest = lb.flat(inputs[0])
        with lb.for_(0, math.prod(shape), parallel=True) as loop:
            lb.store(lb.load(dest, [loop.iv]), out, [loop.iv])
    if outer * count * inner == 0:
        return
    idx, updates = lb.flat(inputs[1]), lb.flat(inputs[2])
    dims = "[" + ", ".join(str(d) for d in shape) + "]"
    # Iterations of the outer loop write disjoint rows; those over the indices may repeat one.
    with lb.nest([outer, count], parallel=True) as (o, k):
        row = lb.cast("arith.index_cast", lb.load(idx, [k]), lb.index(0).type)
        lb.op("cf.assert", lb.compare("ult", row, lb.index(n)), result=[],  # a negative one too
              msg=StringAttr(f"an index is out of range [0, {n}) for axis {axis} of shape {dims}"))
        dst = (o * n + row) * inner
        src = (o * count + k) * inner
        with lb.for_(0, inner) as j:
            at = dst + j.iv
            lb.store(lb.load(out, [at]) + lb.load(updates, [src + j.iv]), out, [at])
