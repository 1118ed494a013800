"""LLVM IR for a call of a parallel segment with ``chunks`` (split-parallel): the loop on threads.

``func.call @f.seg3(%a, %out, %lo, %hi) {chunks = 2}`` calls ``@f.seg3`` over [%lo, %hi) in
two chunks of whole trips (its ``parallel_range`` gives the step), on irc's thread pool
(runtime/cpu/pool.py), without Python.  The call site packs the segment's other C arguments
into a struct in its frame; a *task* function per segment, ``i32 task(ctx, lo, hi)``, unpacks
them and calls the segment's C entry, which sets up its own call context (stack limit,
allocations) on whichever thread runs it.  ``irc.parallel_for`` returns when every chunk has
finished, with the first faulting chunk's status, which the call returns as a call of the
segment would.

That is the JIT's translation; in an object file (``irc compile --emit obj``, which must
link on its own) the call is a plain call of the whole range.  The attribute is checked in
both (it may come from a file): a call with ``chunks`` must call a
defined segment with a ``parallel_range`` whose step is positive, whose last two parameters
are its range's ``index`` bounds, and ask for 2 to ``MAX_CHUNKS`` chunks.

Imported by translate.py's ``func.call`` handler.
"""

from __future__ import annotations

from irc.passes.split_parallel import MAX_CHUNKS
from llvmlite import ir

from irc.diagnostics import IRError
from irc.types import FloatType, IndexType, IntegerType, MemRefType

from .translate import I8, I16, I32, I64, PTR, _declare_in, _extract

PARALLEL_FOR = "irc.parallel_for"
"""The pool's entry (pool.py): ``i32 (task, ctx, statuses, lb, ub, step, chunks)``."""
POOL_WAKE = "irc.pool_wake"
"""``void ()``: wake sleeping workers (pool.py); a function with parallel calls calls it on entry."""


def wake_pool(module, b) -> None:
    b.call(_declare_in(module, POOL_WAKE, ir.FunctionType(ir.VoidType(), [])), [])


def parallel_call(self, b, op, chunks: int):
    """The call ``op`` as ``chunks`` chunks on the pool (``chunks``: ``checked_chunks``'s)."""
    step = self.tr.parallel_ranges[op.callee][2]
    fn = self.funcs[op.callee]
    args = _c_arguments(self, b, op.operands[:-2])
    packed = ir.LiteralStructType([a.type for a in args])
    task = _task(self.tr, op.callee, fn, packed)
    with b.goto_entry_block():
        ctx = b.alloca(packed)
        statuses = b.alloca(ir.ArrayType(I32, chunks))
    for k, a in enumerate(args):
        b.store(a, b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, k)]))
    run = _declare_in(self.tr.module, PARALLEL_FOR, ir.FunctionType(I32, [PTR, PTR, PTR, I64, I64, I64, I64]))
    lo, hi = (self.value(v) for v in op.operands[-2:])
    status = b.call(run, [b.bitcast(task, PTR), b.bitcast(ctx, PTR), b.bitcast(statuses, PTR), lo, hi,
                          ir.Constant(I64, step), ir.Constant(I64, chunks)])
    fail = self.fn.append_basic_block("parallelfail")
    ok = self.fn.append_basic_block("parallelok")
    b.cbranch(b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), fail, ok)
    with b.goto_block(fail):  # the segment's entry has reported its own stack exhaustion
        b.ret(status)
    b.position_at_end(ok)
    return None


def checked_chunks(self, op) -> int:
    """The call's ``chunks``, or an IRError at the call (in the JIT and object files alike)."""
    chunks = getattr(op.attributes["chunks"], "value", None)
    if not isinstance(chunks, int) or isinstance(chunks, bool) or not 2 <= chunks <= MAX_CHUNKS:
        raise IRError(f"'chunks' of a call must be an integer from 2 to {MAX_CHUNKS}", op.loc)
    rng = self.tr.parallel_ranges.get(op.callee)
    sig = self.tr.signatures.get(op.callee)
    if op.callee not in self.bodies or rng is None or len(rng) != 3 \
            or not all(isinstance(x, int) for x in rng) or rng[2] <= 0:
        raise IRError(f"a call with 'chunks' must call a parallel segment (a function with "
                      f"parallel_range = [lb, ub, step], step > 0): '@{op.callee}' is not one", op.loc)
    if sig.results or len(sig.inputs) < 2 or not all(isinstance(t, IndexType) for t in sig.inputs[-2:]):
        raise IRError(f"a call with 'chunks' must call a function whose last two parameters are the index "
                      f"bounds of its range and that returns nothing: '@{op.callee}' is not one", op.loc)
    return chunks


def _c_arguments(self, b, operands) -> list:
    """The C-ABI values of ``operands`` (as the segment's C entry takes them: translate.py)."""
    args = []
    for v in operands:
        x = self.value(v)
        t = v.type
        if isinstance(t, MemRefType):
            args.append(_extract(b, x, 0))
            args.extend(_extract(b, x, [1, d]) for d in range(t.rank))
        elif isinstance(t, IntegerType) and t.width == 1:
            args.append(b.zext(x, I8))
        elif isinstance(t, FloatType) and t.kind == "f16":
            args.append(b.bitcast(x, I16))
        else:
            args.append(x)
    return args


def _task(tr, name: str, fn, packed: ir.LiteralStructType):
    """``i32 task(ctx, lo, hi)``: ``fn`` on the arguments packed at ``ctx``, over [lo, hi)."""
    task = tr.tasks.get(name)
    if task is not None:
        return task
    task = ir.Function(tr.module, ir.FunctionType(I32, [PTR, I64, I64]), name=tr.module.get_unique_name(f"{fn.name}.task"))
    task.linkage = "internal"
    b = ir.IRBuilder(task.append_basic_block("entry"))
    ctx = b.bitcast(task.args[0], packed.as_pointer())
    fields = [b.load(b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, k)])) for k in range(len(packed.elements))]
    b.ret(b.call(fn, [*fields, task.args[1], task.args[2]]))
    tr.tasks[name] = task
    return task
