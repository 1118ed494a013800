"""Loops for the structured tensor ops, one module per family, registered in ``LOWERINGS``.

- ``matmul.py``: matmul and batch_matmul, a blocked register-tiled GEMM;
- ``conv.py``: conv2d and conv2d_weight_grad as im2col plus the GEMM library (or that GEMM);
- ``softmax.py``: softmax and log_softmax, three passes per row;
- ``movement.py``: transpose, slice, concat, pad, reshape (a copy) and iota;
- here: broadcast, splat and the reductions that ``fuse-elementwise`` left
  alone (it fuses them whenever shapes are static), lowered as the
  ``graph.fused`` op they are equivalent to.
"""

from __future__ import annotations

from irc.block import Block, Region
from irc.types import TensorType

from . import conv, dynamic_slice, lowering, matmul, movement, scatter, softmax  # noqa: F401 - the modules register their lowerings
from .elementwise import lower_fused

REDUCTIONS = {"graph.reduce_sum": "sum", "graph.reduce_prod": "prod", "graph.reduce_max": "max",
              "graph.reduce_min": "min", "graph.reduce_mean": "mean"}


@lowering("graph.broadcast", "graph.splat", *REDUCTIONS)
def lower_as_fused(ctx, op, inputs, output) -> None:
    """Lower ``op`` as a one-op ``graph.fused`` whose body yields its operand's element."""
    from irc.dialects.fused import FusedOp, YieldOp

    source = op.operands[0]
    result = op.results[0].type
    attrs = {}
    if op.name == "graph.splat":
        maps = [()]
    elif op.name == "graph.broadcast":
        offset = result.rank - source.type.rank
        maps = [tuple(-1 if s == 1 and result.shape[offset + i] != 1 else offset + i
                      for i, s in enumerate(source.type.shape))]
    else:
        maps = [tuple(range(source.type.rank))]
        attrs = dict(reduce=REDUCTIONS[op.name], axes=[e.value for e in op.attributes["axes"].elements],
                     keepdims="keepdims" in op.attributes)
    elem = source.type.element_type if isinstance(source.type, TensorType) else source.type
    body = Block([elem])
    body.append(YieldOp([body.args[0]], []))
    fused = FusedOp.build([source], maps, result, Region([body]), **attrs)
    fused.loc = op.loc
    try:
        lower_fused(ctx, fused, inputs[:1], output)
    finally:
        fused.drop_all_references()
