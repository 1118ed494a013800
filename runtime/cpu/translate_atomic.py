"""LLVM IR for dialects/memref_atomic.py's ops: atomic read-modify-writes and a buffer's address.

``memref.atomic_rmw`` becomes one ``atomicrmw seq_cst`` (as MLIR's lowering orders it) where
LLVM's operation computes exactly what the kind's arith op does; the other kinds (mulf, muli,
maximumf, minimumf, maxnumf, minnumf: LLVM's ``fmax`` may return either zero, where irc fixes
the choice) and ``memref.generic_atomic_rmw`` become a ``cmpxchg`` loop that computes the new
value from the current one, compares bits (so a NaN does not loop for ever) and retries
when another thread wrote the element in between.

Imported by translate.py at its end, so that the handlers register with ``_handler``.
"""

from __future__ import annotations

from irc.dialects import memref as memref_dialect
from irc.dialects.memref_atomic import AtomicYieldOp
from llvmlite import ir

from .translate import I1, I64, _check_live, _element_pointer, _extract, _handler

_ATOMICRMW = {"assign": "xchg", "addi": "add", "andi": "and", "ori": "or", "xori": "xor", "maxs": "max",
              "mins": "min", "maxu": "umax", "minu": "umin", "addf": "fadd"}
"""The kinds whose LLVM ``atomicrmw`` operation is the arith op's, bit for bit."""


def _element(self, b, op, mem_value, indices):
    """The element's pointer, refusing the element types whose storage is not their LLVM type."""
    ptr = _element_pointer(self, b, op, mem_value, indices)
    if ptr.type.pointee == I1 or str(mem_value.type.element_type) == "bf16":
        raise TypeError(f"atomics on {mem_value.type.element_type} are not supported")
    return ptr


def _cmpxchg_loop(self, b, ptr, combine):
    """``*ptr = combine(current)`` atomically, retried until no other write came in between;
    the value it replaced.  ``combine`` emits the new value's code at ``b`` (it may add blocks)."""
    ty = ptr.type.pointee
    bits = ir.IntType(ty.width if isinstance(ty, ir.IntType) else {"half": 16, "float": 32, "double": 64}[str(ty)])
    bits_ptr = b.bitcast(ptr, bits.as_pointer())
    first = b.load(bits_ptr)
    before = b.block
    loop = self.fn.append_basic_block("atomic_retry")
    done = self.fn.append_basic_block("atomic_done")
    b.branch(loop)
    b.position_at_end(loop)
    seen = b.phi(bits)
    seen.add_incoming(first, before)
    current = b.bitcast(seen, ty)
    new = b.bitcast(combine(current), bits)
    pair = b.cmpxchg(bits_ptr, seen, new, "seq_cst", "seq_cst")
    seen.add_incoming(b.extract_value(pair, 0), b.block)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
    return current


def _combine(self, b, kind: str, x, y):
    """``x KIND y`` for the kinds without an exact ``atomicrmw``, as their arith handlers compute it."""
    if kind == "mulf":
        return b.fmul(x, y)
    if kind == "muli":
        return b.mul(x, y)
    name = "llvm.maximum" if kind in ("maximumf", "maxnumf") else "llvm.minimum"
    m = b.call(self.intrinsic(name, x.type, 2), [x, y])
    if kind in ("maximumf", "minimumf"):
        return m
    return b.select(b.fcmp_unordered("uno", x, x), y, b.select(b.fcmp_unordered("uno", y, y), x, m))


@_handler("memref.atomic_rmw")
def _atomic_rmw(self, b, op):
    ptr = _element(self, b, op, op.operands[1], op.operands[2:])
    value, kind = self.value(op.operands[0]), op.kind
    if kind in _ATOMICRMW:
        return b.atomic_rmw(_ATOMICRMW[kind], ptr, value, "seq_cst")
    return _cmpxchg_loop(self, b, ptr, lambda current: _combine(self, b, kind, current, value))


@_handler("memref.generic_atomic_rmw")
def _generic_atomic_rmw(self, b, op):
    """The region's one block, translated inside the retry loop with its argument bound to the
    current value; its ``memref.atomic_yield`` gives the value to store."""
    ptr = _element(self, b, op, op.operands[0], op.operands[1:])
    block = op.regions[0].entry

    def combine(current):
        self.values[block.args[0]] = current
        for inner in block.ops:
            if isinstance(inner, AtomicYieldOp):
                return self.value(inner.operands[0])
            self.translate_op(b, inner)
        raise AssertionError("the verifier ensures a memref.atomic_yield")

    return _cmpxchg_loop(self, b, ptr, combine)


@_handler("memref.extract_aligned_pointer_as_index")
def _extract_aligned_pointer(self, b, op):
    mem = self.value(op.operands[0])
    _check_live(self, b, op, mem, memref_dialect.FREED_ACCESS)
    return b.ptrtoint(_extract(b, mem, 0), I64)
