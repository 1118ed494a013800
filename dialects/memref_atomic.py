"""memref's atomic read-modify-write ops, and the one op that exposes a buffer's address.

``%old = memref.atomic_rmw addf %v, %m[%i] : (f32, memref<10xf32>) -> f32``,
``%old = memref.generic_atomic_rmw %m[%i] : memref<10xf32> { ^bb0(%cur: f32): ...
memref.atomic_yield %new : f32 }``, ``%p = memref.extract_aligned_pointer_as_index %m :
memref<4xf32> -> index``.

Kept apart from dialects/memref.py because they are a family of their own (one
combining rule per kind) and compiled code lowers them with atomics
(runtime/cpu/translate_atomic.py).  Accesses are checked as ``memref.load`` and
``memref.store`` check them: an index out of bounds, or a freed buffer, is a
fault at the op in the interpreter and in compiled code alike.
"""

from __future__ import annotations

from irc.attributes import IntegerAttr
from irc.block import Region
from irc.diagnostics import IRError
from irc.operation import Operation, ReturnLike, Terminator
from irc.registry import OPS, syntax_rule
from irc.types import FloatType, IndexType, IntegerType, MemRefType, i64, index

from .memref import FREED_ACCESS, WRITE_TO_CONSTANT, _check_indices, _element_index

KINDS = ("addf", "addi", "andi", "assign", "maximumf", "maxnumf", "maxs", "maxu", "minimumf", "minnumf",
         "mins", "minu", "mulf", "muli", "ori", "xori")
"""MLIR 22's ``arith::AtomicRMWKind``, in the order of its enum values (the generic form's ``kind = N : i64``)."""

FLOAT_KINDS = frozenset({"addf", "maximumf", "maxnumf", "minimumf", "minnumf", "mulf"})
INT_KINDS = frozenset({"addi", "andi", "maxs", "maxu", "mins", "minu", "muli", "ori", "xori"})

COMBINE = {"addf": "arith.addf", "addi": "arith.addi", "andi": "arith.andi", "maximumf": "arith.maximumf",
           "maxnumf": "arith.maxnumf", "maxs": "arith.maxsi", "maxu": "arith.maxui", "minimumf": "arith.minimumf",
           "minnumf": "arith.minnumf", "mins": "arith.minsi", "minu": "arith.minui", "mulf": "arith.mulf",
           "muli": "arith.muli", "ori": "arith.ori", "xori": "arith.xori"}
"""The arith op whose ``compute`` combines the stored value with the operand (``assign`` takes the operand)."""


def _store_combined(interp, op, buf, idx, combine):
    """m[idx] = combine(m[idx]); the old value, read as memref.load reads it."""
    at = _element_index(interp, op, buf, idx)
    old = buf.array[at]
    if not isinstance(buf.type.element_type, FloatType):
        old = int(old)
    new = combine(old)
    try:
        buf.array[at] = new
    except ValueError:  # a read-only array: the buffer of a constant memref.global
        raise interp.fault(op, WRITE_TO_CONSTANT) from None
    return old


class AtomicRMWOp(Operation):
    """``%old = memref.atomic_rmw KIND %value, %m[%i, ...] : (T, memref<...xT>) -> T``.

    Atomically ``m[i] = m[i] KIND value``; the result is the value before.  The kinds are
    MLIR's: the float ones (addf, mulf, maximumf, minimumf, maxnumf, minnumf) need a float
    element type, the integer ones (addi, muli, andi, ori, xori, maxs, mins, maxu, minu)
    an integer one (not index: MLIR's rule), and ``assign`` stores the value.  Each kind combines as its
    arith op does (``maxs`` as ``arith.maxsi``, ``maxnumf`` as ``arith.maxnumf``...), so
    the interpreter and compiled code (LLVM ``atomicrmw`` where LLVM's operation is the
    same, a ``cmpxchg`` loop otherwise) store the same bits.
    """

    name = "memref.atomic_rmw"
    summary = "Atomically combine a value into one element of a buffer; the result is the old element."
    example = "%r = memref.atomic_rmw addi %a, %m[%i] : (i64, memref<?xi64>) -> i64"

    @property
    def kind(self) -> str:
        return KINDS[self.attributes["kind"].value]

    def verify_op(self) -> None:
        if len(self.operands) < 2 or len(self.results) != 1:
            raise self.error("takes a value, a memref and indices, and has one result")
        k = self.attributes.get("kind")
        if not isinstance(k, IntegerAttr) or not 0 <= k.value < len(KINDS):
            raise self.error(f"needs a 'kind' attribute, one of {', '.join(KINDS)} (0 to {len(KINDS) - 1})")
        _check_indices(self, self.operands[1], self.operands[2:])
        elem = self.operands[1].type.element_type
        if self.operands[0].type is not elem or self.results[0].type is not elem:
            raise self.error(f"value and result must have the element type of {self.operands[1].type}, got "
                             f"{self.operands[0].type} and {self.results[0].type}")
        if not isinstance(elem, (IntegerType, FloatType)):
            raise self.error(f"the element type must be a signless integer or a float (as MLIR's), got {elem}")
        if self.kind in FLOAT_KINDS and not isinstance(elem, FloatType):
            raise self.error(f"'{self.kind}' needs a float element type, got {elem}")
        if self.kind in INT_KINDS and not isinstance(elem, IntegerType):
            raise self.error(f"'{self.kind}' needs an integer element type, got {elem}")

    def interpret(self, interp, args):
        value, buf = args[0], args[1]
        t = buf.type.element_type
        if self.kind == "assign":
            return [_store_combined(interp, self, buf, args[2:], lambda old: value)]
        compute = OPS[COMBINE[self.kind]].compute
        return [_store_combined(interp, self, buf, args[2:], lambda old: compute(old, value, t))]

    @classmethod
    def build(cls, kind: str, value, memref, indices=()):
        return cls([value, memref, *indices], [memref.type.element_type], {"kind": IntegerAttr(KINDS.index(kind), i64)})

    def print_custom(self, p) -> None:
        v, m = self.operands[:2]
        p.write(f" {self.kind} {p.value(v)}, {p.value(m)}[{p.values(self.operands[2:])}]"
                f"{p.attr_dict(self.attributes, elide=('kind',))} : ({v.type}, {m.type}) -> {self.results[0].type}")


@syntax_rule("atomic_rmw_op")
def _parse_atomic_rmw(ctx, children):
    kw, kind, value, mem, *rest = children
    idx = next((c for c in rest if isinstance(c, list)), [])
    attrs = dict(next((c for c in rest if isinstance(c, dict)), {}))
    ft = rest[-1]
    if kind.value not in KINDS:
        raise ctx.error(f"unknown atomic_rmw kind '{kind.value}': expected one of {', '.join(KINDS)}", kind)
    if len(ft.inputs) != 2 or len(ft.results) != 1 or not isinstance(ft.inputs[1], MemRefType):
        raise IRError("'memref.atomic_rmw' expects ': (T, memref<...>) -> T'", ctx.loc(kw))
    operands = [ctx.value(value, ft.inputs[0]), ctx.value(mem, ft.inputs[1]), *[ctx.value(i, index) for i in idx]]
    attrs["kind"] = IntegerAttr(KINDS.index(kind.value), i64)
    return AtomicRMWOp(operands, list(ft.results), attrs, loc=ctx.loc(kw))


class GenericAtomicRMWOp(Operation):
    """``%old = memref.generic_atomic_rmw %m[%i, ...] : memref<...xT> { ^bb0(%current: T): ...
    memref.atomic_yield %new : T }``.

    Atomically replaces ``m[i]`` with what its one-block region computes from the current
    value (the block's argument); the result is the value before.  Compiled code runs the
    region in a ``cmpxchg`` loop, so the region may run more than once when other threads
    write the element meanwhile: it must have no side effects (MLIR's rule too).  The region
    is one block, as in MLIR: an ``scf.for`` inside it runs in the interpreter, but lowered
    to blocks by ``scf-to-cf`` it is an error, so compiled code cannot loop inside the region.
    """

    name = "memref.generic_atomic_rmw"
    summary = "Atomically replace one element of a buffer by what a region computes from it."
    example = ("%r = memref.generic_atomic_rmw %m[%i] : memref<?xi64> { ^bb0(%cur: i64): "
               "%s = arith.muli %cur, %a : i64 memref.atomic_yield %s : i64 }")

    def verify_op(self) -> None:
        if not self.operands or len(self.results) != 1 or len(self.regions) != 1:
            raise self.error("takes a memref and indices, has one result and one region")
        _check_indices(self, self.operands[0], self.operands[1:])
        elem = self.operands[0].type.element_type
        if not isinstance(elem, (IntegerType, FloatType)):
            raise self.error(f"the element type must be a signless integer or a float (as MLIR's), got {elem}")
        if self.results[0].type is not elem:
            raise self.error(f"result type {self.results[0].type} is not the element type of {self.operands[0].type}")
        region = self.regions[0]
        if region.is_empty or region.first_block is not region.last_block:
            raise self.error("its region must be one block (so a loop inside it runs in the interpreter, "
                             "but scf-to-cf's blocks cannot be compiled)")
        if [a.type for a in region.entry.args] != [elem]:
            raise self.error(f"its region takes one {elem} argument (the current value: '^bb0(%current: {elem}):')")
        for op in region.entry.ops:
            if op.name in ("memref.store", "memref.atomic_rmw", "memref.generic_atomic_rmw", "memref.alloc",
                           "memref.dealloc", "memref.copy", "func.call"):
                raise op.error("has side effects, which are not allowed in the body of memref.generic_atomic_rmw")

    def interpret(self, interp, args):
        buf = args[0]

        def combine(old):
            _, values = interp.run_region(self.regions[0], [old], interp.env)
            return values[0]

        return [_store_combined(interp, self, buf, args[1:], combine)]

    def print_custom(self, p) -> None:
        m = self.operands[0]
        p.write(f" {p.value(m)}[{p.values(self.operands[1:])}] : {m.type} ")
        p.region(self.regions[0], print_entry_args=True, print_entry_label=True)
        p.write(p.attr_dict(self.attributes))


@syntax_rule("generic_atomic_rmw_op")
def _parse_generic_atomic_rmw(ctx, children):
    kw, mem, *rest = children
    idx = next((c for c in rest if isinstance(c, list)), [])
    attrs = next((c for c in rest if isinstance(c, dict)), {})
    region = next(c for c in rest if isinstance(c, Region))
    t = ctx.type_of(next(c for c in rest if not isinstance(c, (list, dict, Region))))
    if not isinstance(t, MemRefType):
        raise IRError(f"'memref.generic_atomic_rmw' expects a memref type, got {t}", ctx.loc(kw))
    operands = [ctx.value(mem, t), *[ctx.value(i, index) for i in idx]]
    return GenericAtomicRMWOp(operands, [t.element_type], attrs, regions=[region], loc=ctx.loc(kw))


class AtomicYieldOp(Operation):
    """``memref.atomic_yield %new : T``: ends the region of ``memref.generic_atomic_rmw``
    with the value to store."""

    name = "memref.atomic_yield"
    traits = frozenset({Terminator, ReturnLike})
    summary = "Give the value memref.generic_atomic_rmw stores."
    example = "memref.atomic_yield %a : i64"

    def verify_op(self) -> None:
        parent = self.parent_op
        if not isinstance(parent, GenericAtomicRMWOp):
            raise self.error("must end the region of memref.generic_atomic_rmw")
        if len(self.operands) != 1 or self.operands[0].type is not parent.results[0].type:
            raise self.error(f"yields ({', '.join(str(t) for t in self.operand_types)}) but "
                             f"'{parent.name}' stores a {parent.results[0].type}")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = syn.single_type()
        if len(syn.args) != 1 or isinstance(syn.args[0], tuple):
            raise IRError("'memref.atomic_yield' expects '%value : T'", syn.loc)
        return cls([ctx.value(syn.args[0], t)], [], syn.attrs)

    def print_custom(self, p) -> None:
        v = self.operands[0]
        p.write(f" {p.value(v)}{p.attr_dict(self.attributes)} : {v.type}")


class ExtractAlignedPointerAsIndexOp(Operation):
    """``%p = memref.extract_aligned_pointer_as_index %m : memref<...> -> index``: the address
    of the buffer's first element, as an index.

    The interpreter gives the address of the numpy array that holds the buffer, compiled code
    the address of the memory it works on.  They are different buffers wherever an engine
    makes its own (``memref.alloc``, ``memref.alloca``, a copied argument), so the two engines
    give different numbers for the same program; only arithmetic on the address (alignment,
    distances within one buffer) means the same in both.  (An array argument the JIT takes in
    place has one address in both.)  A freed buffer is a fault, as for a load.
    """

    name = "memref.extract_aligned_pointer_as_index"
    summary = "The address of a buffer's first element, as an index (engine-dependent)."
    example = "%r = memref.extract_aligned_pointer_as_index %m : memref<?xi64> -> index"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("takes one memref and has one result")
        if not isinstance(self.operands[0].type, MemRefType) or not isinstance(self.results[0].type, IndexType):
            raise self.error(f"takes a memref and gives an index, got {self.operands[0].type} -> "
                             f"{self.results[0].type}")

    def interpret(self, interp, args):
        buf = args[0]
        if hasattr(buf, "view_at"):
            raise interp.fault(self, "the address of device memory is not readable here")
        if buf.freed:
            raise interp.fault(self, FREED_ACCESS)
        return [int(buf.array.ctypes.data)]

    def print_custom(self, p) -> None:
        m = self.operands[0]
        p.write(f" {p.value(m)} : {m.type} -> {self.results[0].type}{p.attr_dict(self.attributes)}")


@syntax_rule("extract_pointer_op")
def _parse_extract_pointer(ctx, children):
    kw, mem, *rest = children
    attrs = {k: v for c in rest if isinstance(c, dict) for k, v in dict(c).items()}
    src, result = (ctx.type_of(c) for c in rest if not isinstance(c, dict))
    return ExtractAlignedPointerAsIndexOp([ctx.value(mem, src)], [result], attrs, loc=ctx.loc(kw))
