"""``graph.matmul`` as a call to an optimised BLAS gemm (``tensor-to-loops{blas=true}``).

The call goes to ``@irc_blas_sgemm`` / ``@irc_blas_dgemm``, declared in the module
with the C ABI every irc function has (row-major memrefs in, an i32 status
out); the CPU runtime links a shim that forwards to numpy's OpenBLAS gemm, or scipy's
(runtime/cpu/blas.py).  The interpreter has no body for these symbols, so a
module lowered this way runs only compiled; the native loops are the
reference.  A simple cost model keeps small products in native loops, where a
library call and its argument checks cost more than they save.
"""

from __future__ import annotations

from irc.attributes import StringAttr, TypeAttr, UnitAttr
from irc.block import Region
from irc.types import FloatType, FunctionType, MemRefType

BLAS_MIN_WORK = 32 * 32 * 32
"""Multiply-adds below which a matmul stays native (the call's fixed cost dominates)."""

SYMBOLS = {"f32": "irc_blas_sgemm", "f64": "irc_blas_dgemm"}


def wants_blas(op, inputs) -> bool:
    """Whether the cost model sends this matmul to BLAS: f32/f64, 2-D, big enough, int32 sizes."""
    if op.name != "graph.matmul" or len(inputs) != 2:
        return False
    a, b = (v.type for v in inputs)
    if a.rank != 2 or b.rank != 2 or not (a.has_static_shape and b.has_static_shape):
        return False
    elem = a.element_type
    if not isinstance(elem, FloatType) or elem.kind not in SYMBOLS:
        return False
    m, k = a.shape
    n = b.shape[1]
    return m * n * k >= BLAS_MIN_WORK and max(m, n, k) < 2**31


def transpose_suffix(transposed) -> str:
    """``""``, ``"_tn"``, ``"_nt"`` or ``"_tt"``: which operand buffers hold their operand's transpose
    (the shim passes gemm's transpose flags instead of a copy; runtime/cpu/blas.py)."""
    ta, tb = transposed or (False, False)
    return "" if not (ta or tb) else "_" + ("t" if ta else "n") + ("t" if tb else "n")


def declare(ctx, symbol: str, inputs: list) -> None:
    """A private declaration of ``@symbol(inputs) -> ()`` at the top of the module being lowered
    (once): the runtime links its body."""
    from irc.dialects.func import FuncOp

    module = ctx.bufferizer.func.parent_op
    if not any(f.sym_name == symbol for f in module.functions):
        decl = FuncOp(attributes={"sym_name": StringAttr(symbol), "sym_visibility": StringAttr("private"),
                                  "function_type": TypeAttr(FunctionType(inputs, []))},
                      regions=[Region()])  # a declaration: no body
        module.body.prepend(decl)


def lower_matmul_blas(ctx, op, inputs, output) -> None:
    from irc.dialects.func import CallOp

    lb = ctx.lb
    elem = output.type.element_type
    symbol = SYMBOLS[elem.kind] + transpose_suffix(ctx.transposed)
    dynamic = MemRefType([None, None], elem)
    declare(ctx, symbol, [dynamic] * 3)
    views = [lb.view(buf, 0, dynamic, [lb.dim(buf, 0), lb.dim(buf, 1)]).value for buf in (*inputs, output)]
    call = CallOp.build(symbol, views, [])
    call.attributes["nocapture"] = UnitAttr()  # gemm keeps no pointer: plan-memory may reuse the buffers
    lb.insert(call)
