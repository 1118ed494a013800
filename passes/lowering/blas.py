"""``graph.matmul`` as a call to an optimised BLAS gemm (``tensor-to-loops{blas=true}``).

The call goes to ``@irc_blas_sgemm`` / ``@irc_blas_dgemm``, declared in the module
with the C ABI every irc function has (row-major memrefs in, an i32 status
out); the CPU runtime links a shim that forwards to a BLAS gemm: MKL's, numpy's OpenBLAS or
scipy's (runtime/cpu/blas.py).  The interpreter has no body for these symbols, so a
module lowered this way runs only compiled; the native loops are the
reference.  A simple cost model keeps small products in native loops, where a
library call and its argument checks cost more than they save.

Besides A, B and C the call takes a range of C's columns, ``col_begin`` to ``col_end``, the
only ones it computes.  With ``split-blas`` (for a BLAS that runs each call on the calling
thread: MKL's sequential layer) a large product with ``threads`` > 1 is a ``parallel`` loop of
calls on blocks of columns, as the library GEMM's is (gemm_library.split_columns), which
split-parallel runs on irc's threads; an elementwise op after it (a bias and ReLU) runs on
each block right after its call (gemm_library.column_consumer).  Without it a BLAS that
has threads of its own (OpenBLAS) gets the whole product.
"""

from __future__ import annotations

from irc.attributes import IntegerAttr, StringAttr, TypeAttr, UnitAttr
from irc.block import Region
from irc.types import FloatType, FunctionType, MemRefType, i64, index

BLAS_MIN_WORK = 32 * 32 * 32
"""Multiply-adds below which a matmul stays native (the call's fixed cost dominates)."""

SYMBOLS = {"f32": "irc_blas_sgemm", "f64": "irc_blas_dgemm"}

PANEL_BYTES = 64
"""Threads split a product's columns into blocks of whole cache lines of C's rows (16 f32
columns), so that no two threads write one line."""


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


def thread_parts(options: dict, op) -> int:
    """How many blocks of columns (one a thread) the BLAS product ``op`` is split into: one
    without ``split_blas``, else ``gemm_library.thread_parts`` in panels of ``PANEL_BYTES``."""
    from .gemm_library import thread_parts as parts

    if not options.get("split_blas"):
        return 1
    m, k = op.operands[0].type.shape
    n = op.operands[1].type.shape[1]
    return parts(options, _panel(op.results[0].type.element_type), m, n, k)


def _panel(elem) -> int:
    return max(1, PANEL_BYTES // (elem.width // 8))


def lower_matmul_blas(ctx, op, inputs, output, consumer=None) -> None:
    """The matmul as BLAS calls: one, or one a block of columns (``thread_parts``), each
    followed by ``consumer(col_begin, col_end)`` where given (``gemm_library.column_consumer``)."""
    from irc.dialects.func import CallOp

    from .gemm_library import split_columns

    lb = ctx.lb
    elem = output.type.element_type
    symbol = SYMBOLS[elem.kind] + transpose_suffix(ctx.transposed)
    dynamic = MemRefType([None, None], elem)
    declare(ctx, symbol, [dynamic] * 3 + [index, index])
    views = [lb.view(buf, 0, dynamic, [lb.dim(buf, 0), lb.dim(buf, 1)]).value for buf in (*inputs, output)]
    m, k = op.operands[0].type.shape
    n = op.operands[1].type.shape[1]
    parts = thread_parts(ctx.options, op)

    def part(_, first, last) -> None:
        call = CallOp.build(symbol, views + [lb.index(first).value, lb.index(last).value], [])
        call.attributes["nocapture"] = UnitAttr()  # gemm keeps no pointer: plan-memory may reuse the buffers
        call.attributes["work"] = IntegerAttr(max(1, m * n * k // parts), i64)  # split-parallel's estimate
        lb.insert(call)
        if consumer is not None:
            consumer(lb.index(first), lb.index(last))

    split_columns(lb, _panel(elem), n, parts, part)
