"""Loops for ``graph.dynamic_slice`` and ``graph.dynamic_update_slice`` (dialects/graph_dynamic.py).

A window at run-time offsets is a strided copy whose base is computed from the offsets; each
offset is checked first with ``cf.assert`` (the interpreter's message), as ``graph.gather``'s
indices are: ``offset <= size - window`` compared unsigned, so a negative offset fails too.
``dynamic_update_slice`` copies its operand to the output unless bufferization gave it the
operand's own buffer (the operand dies at it: a loop's tape), and then writes the window.
"""

from __future__ import annotations

from irc.attributes import StringAttr

from . import lowering
from .movement import copy_strided, row_major_strides


def _checked_base(lb, shape, sizes, offsets):
    """The flat position of the window's first element, after asserting that it fits."""
    dims = "[" + ", ".join(str(d) for d in shape) + "]"
    window = "[" + ", ".join(str(s) for s in sizes) + "]"
    base = None
    for n, s, o, stride in zip(shape, sizes, offsets, row_major_strides(shape)):
        o = lb.wrap(o)
        lb.op("cf.assert", lb.compare("ule", o, lb.index(n - s)), result=[],
              msg=StringAttr(f"a window of sizes {window} does not fit in shape {dims} at its offsets"))
        term = o if stride == 1 else o * stride
        base = term if base is None else base + term
    return base if base is not None else 0


@lowering("graph.dynamic_slice")
def lower_dynamic_slice(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    shape, sizes = inputs[0].type.shape, output.type.shape
    base = _checked_base(lb, shape, sizes, inputs[1:])
    copy_strided(lb, lb.flat(inputs[0]), base, row_major_strides(shape), lb.flat(output), 0,
                 row_major_strides(sizes), sizes)


@lowering("graph.dynamic_update_slice")
def lower_dynamic_update_slice(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    shape, sizes = inputs[0].type.shape, inputs[1].type.shape
    base = _checked_base(lb, shape, sizes, inputs[2:])
    dst = lb.flat(output)
    if output is not inputs[0]:  # not in place: the operand first
        strides = row_major_strides(shape)
        copy_strided(lb, lb.flat(inputs[0]), 0, strides, dst, 0, strides, shape)
    copy_strided(lb, lb.flat(inputs[1]), 0, row_major_strides(sizes), dst, base, row_major_strides(shape), sizes)
