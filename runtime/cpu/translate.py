"""Translate CFG-level irc functions to LLVM IR with llvmlite's IR builder.

This is the CPU *renderer*: it knows LLVM, not how to load or call code
(``engine.py`` and ``callconv.py`` do that).

Calling convention of every translated function ``@f`` (also the documented C ABI
of objects written by ``irc compile --emit obj``)::

    int32_t f(ARGS..., RESULT_0 *out0, RESULT_1 *out1, ...)

* a scalar parameter is passed as itself (``index`` as int64_t, ``i1`` as a byte
  holding 0 or 1, ``f16`` as a uint16_t holding its bits);
* a ``memref<d0 x ... x T>`` parameter is passed as ``T *data`` followed by one
  ``int64_t`` size per dimension (row-major, contiguous);
* results are written through the trailing pointers;
* the return value is 0 on success, or ``k + 1`` when the k-th runtime check of
  the module failed (integer division by zero, ``divsi`` overflow, a shift by the
  bit width or more, an out-of-range ``fptosi``, a failed ``cf.assert``, an
  out-of-bounds access when bounds checks are on).  ``Translation.faults[k]``
  holds the message and the op's source location, so the caller can raise.

Semantics are exactly the interpreter's: integers wrap, floats are IEEE at the
type's precision, and fast-math flags are used only when asked for.

Inside a module (not part of the C ABI), each public ``@f`` calls an internal
``@f.body`` that takes, after the C parameters, the call depth (``i32``) and a
pointer to the public call's *context* (``CONTEXT``): the stack limit and the
allocation records of this call.  In a body, a memref is the descriptor
``memref_struct``: data pointer, sizes, then its allocation record (null for an
alloca, an argument or a view) and that record's generation (with ``VIEW_BIT``
set for a view of an allocation).  This is what keeps compiled code memory-safe
where the interpreter reports a fault (see docs/cpu-backend.md):

* sizes: every byte size an op computes (alloc, alloca, view) is checked for a
  negative size and for overflow past ``MAX_BUFFER_BYTES`` with the interpreter's
  message; heap buffers come from ``calloc`` (NULL: "out of memory");
* the stack: the public entry sets the limit ``stack_budget`` bytes below its
  stack pointer; a body that calls or allocas checks the stack pointer against it
  on entry (``STACK_EXHAUSTED`` is then returned to the caller, which reports it
  at the call), and a dynamic alloca checks its size against what is left;
* ``memref.dealloc``: ``memref.alloc`` takes an allocation record (``RECORD``);
  ``dealloc`` frees only a live record's data, once, and bumps its generation so
  that a stale descriptor is detected (with ``bounds_checks``, at every access);
  records are reused within a call and released, with any data still live, when
  the public entry returns (a memref cannot outlive its public call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from irc.dialects import arith as arith_dialect
from irc.dialects import memref as memref_dialect
from irc.dialects import scf as scf_dialect
from irc.dialects import vector as vector_dialect
from llvmlite import ir

from irc.diagnostics import IRError, Location
from irc.dominance import reverse_postorder
from irc.interpreter import MAX_CALL_DEPTH
from irc.types import FloatType, IndexType, IntegerType, MemRefType, Type, VectorType

from .symbols import jit_symbol

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
I16 = ir.IntType(16)  # an f16 parameter travels as its bits (ctypes has no half; see param_types)
PTR = ir.PointerType(I8)

CONTEXT = ir.LiteralStructType([I64, PTR, PTR])
"""One public call's state: the lowest stack address bodies may reach, every allocation
record taken (a list through RECORD's first field), and the records free for reuse."""
RECORD = ir.LiteralStructType([PTR, PTR, PTR, I64])
"""A ``memref.alloc``: next record of the call, next free record, the data (null once freed),
and the generation (bumped by each dealloc, so that a stale descriptor no longer matches)."""
VIEW_BIT = 1 << 63
"""Set in a view's generation: a view shares its source's record but may not be deallocated."""
STACK_EXHAUSTED = 0xFFFFFFFF
"""The status a body returns when its frame would pass the stack limit; its caller reports it."""
DEFAULT_STACK_BUDGET = 512 * 1024
"""Stack a public call may use below its entry in objects (``irc compile --emit obj``), whose
caller's thread is unknown; the JIT derives it from the real stacks (cpu/stack.py)."""


@dataclass
class Options:
    checks: bool = True          # trap integer UB and failed asserts with an error status
    bounds_checks: bool = False  # check every memref access against its sizes (and its liveness)
    fast_math: bool = False      # allow LLVM to reassociate floats ('fast' flags)
    stack_budget: int = DEFAULT_STACK_BUDGET  # bytes of stack a public call may use


@dataclass
class Translation:
    module: ir.Module
    faults: list[tuple[str, Location]] = field(default_factory=list)
    signatures: dict[str, object] = field(default_factory=dict)  # name -> irc FunctionType
    symbols: dict[str, str] = field(default_factory=dict)  # name -> its LLVM symbol (see translate)
    globals: dict[str, object] = field(default_factory=dict)  # memref.global name -> its LLVM global
    parallel_ranges: dict[str, list] = field(default_factory=dict)  # segment name -> its parallel_range
    tasks: dict[str, object] = field(default_factory=dict)  # segment name -> its pool task (translate_parallel)
    pool: bool = False  # calls with ``chunks`` use irc's thread pool (the JIT), else run whole


def llvm_type(t: Type) -> ir.Type:
    if isinstance(t, IntegerType):
        return ir.IntType(t.width)
    if isinstance(t, IndexType):
        return I64
    if isinstance(t, FloatType):
        if t.kind == "f32":
            return ir.FloatType()
        if t.kind == "f64":
            return ir.DoubleType()
        if t.kind == "f16":
            return ir.HalfType()
        raise TypeError("bf16 is not supported by the CPU backend yet")
    if isinstance(t, MemRefType):
        return memref_struct(t)
    if isinstance(t, VectorType):
        return ir.VectorType(llvm_type(t.element_type), t.size)
    raise TypeError(f"type {t} cannot be translated to LLVM: tensor functions are compiled per argument "
                    "shapes by irc.compile and 'irc run'; to compile one ahead of time, lower it first with "
                    "irc opt -p 'specialize-shapes{func=NAME shapes=TYPE;...},fuse-elementwise,"
                    "tensor-to-loops,plan-memory'")


def memref_struct(t: MemRefType) -> ir.LiteralStructType:
    """A memref value: {element pointer, [rank x i64] sizes, allocation record, generation},
    row-major and contiguous (see the module docstring)."""
    return ir.LiteralStructType([ir.PointerType(llvm_type(t.element_type)), ir.ArrayType(I64, max(t.rank, 1)),
                                 PTR, I64])


def param_types(t: Type) -> list[ir.Type]:
    """The C parameters one irc parameter expands to."""
    if isinstance(t, MemRefType):
        return [ir.PointerType(llvm_type(t.element_type))] + [I64] * t.rank
    if isinstance(t, IntegerType) and t.width == 1:
        return [I8]
    if isinstance(t, FloatType) and t.kind == "f16":
        return [I16]  # in an integer register, where ctypes puts a c_uint16 (a half goes in xmm)
    return [llvm_type(t)]


def function_type(ft) -> ir.FunctionType:
    params = [p for t in ft.inputs for p in param_types(t)]
    return ir.FunctionType(I32, params + _result_pointers(ft))


def _result_pointers(ft) -> list[ir.Type]:
    params = []
    for t in ft.results:
        if isinstance(t, MemRefType):
            raise TypeError("functions returning memrefs are not supported by the CPU backend yet; "
                            "pass the output buffer as an argument")
        params.append(ir.PointerType(I8 if isinstance(t, IntegerType) and t.width == 1 else llvm_type(t)))
    return params


def body_param_types(t: Type) -> list[ir.Type]:
    """The parameters one irc parameter expands to in a body: a memref also passes its record and generation."""
    return param_types(t) + ([PTR, I64] if isinstance(t, MemRefType) else [])


def body_function_type(ft) -> ir.FunctionType:
    """``@f.body``: the body parameters, the result pointers, the call depth and the context."""
    params = [p for t in ft.inputs for p in body_param_types(t)]
    return ir.FunctionType(I32, params + _result_pointers(ft) + [I32, ir.PointerType(CONTEXT)])


_MATH_INTRINSICS = {
    "math.exp": "llvm.exp", "math.exp2": "llvm.exp2", "math.log": "llvm.log", "math.log2": "llvm.log2",
    "math.sqrt": "llvm.sqrt", "math.sin": "llvm.sin", "math.cos": "llvm.cos", "math.absf": "llvm.fabs",
    "math.floor": "llvm.floor", "math.ceil": "llvm.ceil", "math.fma": "llvm.fma", "math.powf": "llvm.pow",
    "math.tanh": "llvm.tanh", "math.copysign": "llvm.copysign",
    "arith.maximumf": "llvm.maximum", "arith.minimumf": "llvm.minimum",
}
_LIBM = {"math.expm1": "expm1", "math.log1p": "log1p", "math.erf": "erf", "math.log10": "log10", "math.tan": "tan"}
# Transcendental functions are computed by libm's f64 function and rounded once to the type (f32
# and f16 widened first), which is what the interpreter and constant folding compute: one answer
# whatever the -O level and whether the argument is a constant.  (expf and friends differ from
# the f64 function rounded, and LLVM folds f32 calls in double anyway.)
_IN_F64 = {"math.exp", "math.exp2", "math.log", "math.log2", "math.sin", "math.cos", "math.tanh", "math.powf",
           *_LIBM}
# LLVM folds exp2(c) as pow(2, c) and rewrites pow(2, x) as exp2(x), and glibc's exp2 and pow differ
# in the last bit on about 0.1% of arguments: their arguments are hidden from the optimiser.
_OPAQUE_ARGUMENTS = {"math.exp2", "math.powf"}
_INT_BINARY = {"arith.addi": "add", "arith.subi": "sub", "arith.muli": "mul", "arith.andi": "and_",
               "arith.ori": "or_", "arith.xori": "xor"}
_FLOAT_BINARY = {"arith.addf": "fadd", "arith.subf": "fsub", "arith.mulf": "fmul", "arith.divf": "fdiv",
                 "arith.remf": "frem"}
_ICMP = {"eq": ("==", True), "ne": ("!=", True), "slt": ("<", True), "sle": ("<=", True), "sgt": (">", True),
         "sge": (">=", True), "ult": ("<", False), "ule": ("<=", False), "ugt": (">", False),
         "uge": (">=", False)}
_FCMP = {"eq": "==", "gt": ">", "ge": ">=", "lt": "<", "le": "<=", "ne": "!="}


def internal_only(func) -> bool:
    """Whether ``func`` has no entry callable from outside the module: a private ``noinline``
    function (outline-loops' shared loop nests), which only the module's own functions call
    (through its body).  Its public entry is internal, and irc.compile does not export it."""
    visibility = func.attributes.get("sym_visibility")
    return (not func.is_declaration and "noinline" in func.attributes and visibility is not None
            and visibility.value == "private")


def translate(module, options: Options | None = None, *, mangle: bool = False) -> Translation:
    """Translate every function of a CFG-level module (run scf-to-cf first).

    With ``mangle`` (the JIT) a defined ``@f`` becomes the LLVM symbol
    ``symbols.jit_symbol("f")``, so that no user function can shadow a libm, libc
    or runtime symbol the generated code calls; without it (object files, whose
    C ABI names are documented) the name stays ``f`` and ``symbols.check_declarations``
    refuses a collision first.  ``Translation.symbols`` maps each name to its symbol.
    A call with ``chunks`` runs on irc's thread pool in the JIT only: an object file stays
    self-contained, and such calls run their whole range on the calling thread.
    """
    options = options or Options()
    mod = ir.Module(name="irc")
    tr = Translation(mod, pool=mangle)
    funcs, bodies = {}, {}
    defined = []
    for op in module.body.ops:
        if op.name == "memref.global":
            _global(tr, op)
            continue
        if op.name != "func.func":
            raise IRError(f"the CPU backend cannot translate top-level '{op.name}'", op.loc)
        try:
            fnty = function_type(op.function_type)
        except TypeError as e:
            raise IRError(str(e), op.loc) from None
        symbol = jit_symbol(op.sym_name) if mangle and not op.is_declaration else op.sym_name
        fn = ir.Function(mod, fnty, name=symbol)
        if internal_only(op):  # called from the module alone: LLVM drops the unused entry
            fn.linkage = "internal"
        funcs[op.sym_name] = fn
        tr.symbols[op.sym_name] = symbol
        tr.signatures[op.sym_name] = op.function_type
        rng = op.attributes.get("parallel_range")
        if rng is not None:
            tr.parallel_ranges[op.sym_name] = [getattr(e, "value", None) for e in getattr(rng, "elements", ())]
        if not op.is_declaration:
            defined.append((op, fn))
    # Bodies are named after every public symbol exists, so that '@f.body' cannot clash with f's body.
    for op, fn in defined:
        # The body takes a hidden call depth and context; the public entry starts them.
        body = ir.Function(mod, body_function_type(op.function_type), name=mod.get_unique_name(f"{fn.name}.body"))
        body.linkage = "internal"
        if "noinline" in op.attributes:  # compiled once however often it is called (outline-loops)
            body.attributes.add("noinline")
        if "optsize" in op.attributes:  # its loops do little work (optsize-small-loops)
            body.attributes.add("optsize")
        bodies[op.sym_name] = body
        _public_entry(tr, fn, body, op, options)
    for op, _ in defined:
        FunctionTranslator(tr, funcs, op, options, bodies).run()
    _drop_unused(mod)
    return tr


def _public_entry(tr: Translation, fn, body, func, options: Options) -> None:
    """``@f``: set up the call's context, run the body, release the call's allocations."""
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = b.alloca(CONTEXT)
    sp = b.ptrtoint(b.call(_stacksave(tr.module), []), I64)
    budget = ir.Constant(I64, options.stack_budget)
    # The limit saturates at 0 (never wraps) on a stack smaller than the budget.
    limit = b.select(b.icmp_unsigned("<", sp, budget), ir.Constant(I64, 0), b.sub(sp, budget))
    b.store(limit, b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, 0)]))
    records = b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, 1)])
    b.store(ir.Constant(PTR, None), records)
    b.store(ir.Constant(PTR, None), b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, 2)]))
    args = iter(fn.args)
    call_args = []
    for t in func.function_type.inputs:
        call_args.extend(next(args) for _ in param_types(t))
        if isinstance(t, MemRefType):  # an argument is no allocation of ours
            call_args.extend([ir.Constant(PTR, None), ir.Constant(I64, 0)])
    call_args.extend(args)  # the result pointers
    # Never inlined: the limit must be taken above the body's frame, which may be large.
    status = b.call(body, [*call_args, ir.Constant(I32, 0), ctx], attrs=("noinline",))
    taken = b.load(records)
    with b.if_then(b.icmp_unsigned("!=", taken, ir.Constant(PTR, None))):
        b.call(_release_function(tr.module), [taken])
    code = len(tr.faults) + 1
    tr.faults.append((f"stack exhausted in @{func.sym_name}: its frame needs more than the "
                      f"{_kib(options.stack_budget)} stack budget", func.loc))
    b.ret(b.select(b.icmp_unsigned("==", status, ir.Constant(I32, STACK_EXHAUSTED)), ir.Constant(I32, code), status))


def _kib(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n}-byte"


def _declare_in(module: ir.Module, name: str, fnty: ir.FunctionType):
    fn = module.globals.get(name)
    return fn if fn is not None else ir.Function(module, fnty, name=name)


def _stacksave(module: ir.Module):
    return _declare_in(module, "llvm.stacksave.p0", ir.FunctionType(PTR, []))


def _release_function(module: ir.Module):
    """``void irc.release(RECORD *first)``: free every record of a call and the data still live."""
    name = "irc.release_allocations"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    free = _declare_in(module, "free", ir.FunctionType(ir.VoidType(), [PTR]))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=name)
    fn.linkage = "internal"
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    raw = b.phi(PTR)
    raw.add_incoming(fn.args[0], entry)
    rec = b.bitcast(raw, ir.PointerType(RECORD))
    b.call(free, [b.load(_field(b, rec, 2))])  # free(NULL) for a freed record
    following = b.load(_field(b, rec, 0))
    b.call(free, [raw])
    raw.add_incoming(following, loop)
    b.cbranch(b.icmp_unsigned("==", following, ir.Constant(PTR, None)), done, loop)
    b.position_at_end(done)
    b.ret_void()
    return fn


class FoldingBuilder(ir.IRBuilder):
    """An IR builder whose ``extract_value`` of a field that an ``insert_value`` chain set
    returns that value instead of emitting an extract.

    A memref is a descriptor struct (``memref_struct``) built by inserts and read by
    extracts; a function with many memref parameters (a segment of ``split-parallel``
    takes all of its function's) passes each one field by field.  Without the fold, the
    extracts and inserts were most of the LLVM IR of a transformer's graph (nine in ten
    instructions), and of the time to print, parse and optimise it."""

    def extract_value(self, agg, idx, name=""):
        want = list(idx) if isinstance(idx, (tuple, list)) else [idx]
        v = agg
        while isinstance(v, ir.InsertValue):
            have = list(v.indices)
            if have == want:
                return v.value
            if have[:len(want)] == want or want[:len(have)] == have:  # overlapping fields: not a plain read
                break
            v = v.aggregate
        return super().extract_value(agg, idx, name)


def _field(b: ir.IRBuilder, struct_ptr, k: int):
    return b.gep(struct_ptr, [ir.Constant(I32, 0), ir.Constant(I32, k)])


class FunctionTranslator:
    def __init__(self, tr: Translation, funcs: dict, func, options: Options, bodies: dict):
        self.tr = tr
        self.funcs = funcs
        self.bodies = bodies
        self.func = func
        self.fn = bodies[func.sym_name]
        self.options = options
        self.values: dict = {}
        self.unbuilt_params: dict = {}  # memref parameter -> its LLVM arguments, until used (_build_param)
        self.blocks: dict = {}
        self.phis: list = []
        self.exit_blocks: dict = {}  # irc block -> the LLVM block its terminator ends up in
        self.accesses: dict = {}  # (LLVM block, buffer, ...) -> what _element_pointer reuses there
        self.fmf = ("fast",) if options.fast_math else ()

    # -- helpers -----------------------------------------------------------------------------

    def intrinsic(self, name: str, ty: ir.Type, nargs: int):
        return self._declare(f"{name}.{_intrinsic_suffix(ty)}", ir.FunctionType(ty, [ty] * nargs))

    def libm(self, name: str, ty: ir.Type):
        suffix = {"float": "f", "double": "", "half": None}[str(ty)]
        if suffix is None:
            raise TypeError(f"'{name}' on f16 is not supported by the CPU backend yet")
        full = name + suffix
        fn = self._declare(full, ir.FunctionType(ty, [ty]))
        if fn.function_type != ir.FunctionType(ty, [ty]):  # symbols.check_declarations prevents this
            raise IRError(f"the program's '@{full}' clashes with the C library's {full}, which "
                          f"'{name}' calls: rename the function", self.func.loc)
        return fn

    def fault_if(self, b: ir.IRBuilder, cond, op, message: str) -> None:
        """Branch to an error return when ``cond`` (i1) holds."""
        code = len(self.tr.faults) + 1
        self.tr.faults.append((f"{message}", op.loc))
        fail = self.fn.append_basic_block(f"fault{code}")
        ok = self.fn.append_basic_block(f"ok{code}")
        b.cbranch(cond, fail, ok)
        with b.goto_block(fail):
            b.ret(ir.Constant(I32, code))
        b.position_at_end(ok)

    # -- the function --------------------------------------------------------------------------

    def run(self) -> None:
        fn, func = self.fn, self.func
        entry_ir = fn.append_basic_block("entry")
        b = FoldingBuilder(entry_ir)
        args = iter(fn.args)
        for arg in func.args:
            t = arg.type
            if isinstance(t, MemRefType):  # data, sizes, allocation record and its generation
                self.unbuilt_params[arg] = [next(args) for _ in range(t.rank + 3)]
            elif isinstance(t, IntegerType) and t.width == 1:
                self.values[arg] = b.trunc(next(args), I1)
            elif isinstance(t, FloatType) and t.kind == "f16":
                self.values[arg] = b.bitcast(next(args), ir.HalfType())
            else:
                self.values[arg] = next(args)
        *self.outs, self.depth, self.ctx = args  # the result pointers, then the hidden depth and context
        region = func.body
        order = reverse_postorder(region.entry)
        self.large_allocas = _large_static_allocas(order)
        if any(op.name in ("func.call", "memref.alloca") for block in order for op in block.ops):
            self.check_stack(b, sum(_aligned16(_static_bytes(op.results[0].type)) for op in self.large_allocas))
        self.frame_block = b.block  # after the check: large static allocas live here, not in the frame
        if self.tr.pool and any("chunks" in op.attributes for block in order for op in block.ops
                                if op.name == "func.call"):
            from .translate_parallel import wake_pool

            wake_pool(self.tr.module, b)  # workers asleep are up by the first parallel loop
        self.translate_blocks(b, order, "CPU")

    def translate_blocks(self, b: ir.IRBuilder, order: list, backend: str) -> None:
        """The function's reachable blocks (``order``, the entry first) after the prologue at
        ``b``, then the phis' incoming values (every backend that renders through this class)."""
        fn = self.fn
        for block in order:
            self.blocks[block] = fn.append_basic_block(block.label or "bb")
        b.branch(self.blocks[order[0]])
        for block in order:
            b.position_at_end(self.blocks[block])
            self.current = block
            for op in block.ops:
                try:
                    self.translate_op(b, op)
                except IRError:
                    raise
                except (TypeError, KeyError, NotImplementedError) as e:
                    raise IRError(f"the {backend} backend cannot translate '{op.name}': {e}", op.loc) from None
        for phi_ir, op in self.phis:
            for value, pred in zip(op.operands, op.successors):
                if pred not in self.blocks:
                    continue  # an unreachable predecessor has no LLVM block
                edges = sum(1 for s in pred.terminator.successors if s is op.parent)
                for _ in range(edges):
                    phi_ir.add_incoming(self.value(value), self.exit_blocks[pred])
        # Unreachable blocks are never emitted; their phi entries were skipped above.

    def value(self, v):
        try:
            return self.values[v]
        except KeyError:
            if v not in self.unbuilt_params:
                raise
        return self._build_param(v)

    def _build_param(self, arg):
        """A memref parameter's descriptor, built at the end of the prologue when first used.

        Built lazily because a function may take many memrefs and read few (a segment of
        ``split-parallel`` takes every parameter of its function): an unused parameter then
        costs no instruction, and a read of a field folds to the parameter (FoldingBuilder)."""
        ptr, *rest = self.unbuilt_params.pop(arg)
        b = FoldingBuilder(self.frame_block)
        if self.frame_block.is_terminated:
            b.position_before(self.frame_block.terminator)
        struct = b.insert_value(ir.Constant(memref_struct(arg.type), ir.Undefined), ptr, 0)
        for d in range(arg.type.rank):
            struct = b.insert_value(struct, rest[d], [1, d])
        struct = b.insert_value(struct, rest[-2], 2)  # the allocation record
        struct = b.insert_value(struct, rest[-1], 3)  # and its generation
        self.values[arg] = struct
        return struct

    def check_stack(self, b: ir.IRBuilder, large_bytes: int = 0) -> None:
        """On entry, with the frame in place: return STACK_EXHAUSTED if it, and the large static
        allocas to come (``large_bytes``), would reach below the limit.

        Only functions that call or alloca check: a leaf's frame is small and lies within
        the reserve the budget leaves below the limit (cpu/stack.py)."""
        sp = b.ptrtoint(b.call(_stacksave(self.tr.module), []), I64)
        limit = b.load(_field(b, self.ctx, 0))
        if large_bytes:
            # sp - large_bytes < limit, without wrapping below address 0
            below = b.icmp_unsigned("<", sp, b.add(limit, ir.Constant(I64, large_bytes)))
        else:
            below = b.icmp_unsigned("<", sp, limit)
        with b.if_then(below, likely=False):
            b.ret(ir.Constant(I32, STACK_EXHAUSTED))

    def stack_left(self, b: ir.IRBuilder):
        """Bytes between the stack pointer and the limit (the entry check keeps it non-negative)."""
        sp = b.ptrtoint(b.call(_stacksave(self.tr.module), []), I64)
        return b.sub(sp, b.load(_field(b, self.ctx, 0)))

    def intrinsic_memset(self):
        return self._declare("llvm.memset.p0.i64", ir.FunctionType(ir.VoidType(), [PTR, I8, I64, I1]))

    def intrinsic_memmove(self):
        return self._declare("llvm.memmove.p0.p0.i64", ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I1]))

    def _declare(self, name: str, fnty: ir.FunctionType):
        return _declare_in(self.tr.module, name, fnty)

    # -- ops -----------------------------------------------------------------------------------------

    def translate_op(self, b: ir.IRBuilder, op) -> None:
        name = op.name
        handler = _HANDLERS.get(name)
        if handler is None:
            hint = {"scf.for": "run scf-to-cf first", "scf.if": "run scf-to-cf first",
                    "scf.while": "run scf-to-cf first"}.get(name, "no lowering for it reaches the CPU backend")
            raise IRError(f"the CPU backend cannot translate '{name}' ({hint})", op.loc)
        result = handler(self, b, op)
        if op.results:
            self.values[op.results[0]] = result
        if op.is_terminator:
            self.exit_blocks[self.current] = b.block


def _intrinsic_suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_intrinsic_suffix(ty.element)}"
    return {"float": "f32", "double": "f64", "half": "f16"}.get(str(ty), str(ty))


def _handler(*names):
    def wrap(fn):
        for n in names:
            _HANDLERS[n] = fn
        return fn

    return wrap


_HANDLERS: dict = {}


@_handler("arith.constant")
def _constant(self, b, op):
    from irc.attributes import FloatAttr, IntegerAttr

    attr = op.attributes["value"]
    t = llvm_type(op.results[0].type)
    if isinstance(attr, IntegerAttr):
        return ir.Constant(t, attr.value & ((1 << t.width) - 1))
    if isinstance(attr, FloatAttr):
        if attr.value != attr.value:  # a NaN by its bits: through a double, a payload or sNaN is lost
            return ir.Constant(ir.IntType(op.results[0].type.width), attr.bits).bitcast(t)
        return ir.Constant(t, attr.value)
    raise TypeError("tensor constants must be bufferized before the CPU backend")


@_handler(*_INT_BINARY)
def _int_binary(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    result = getattr(b, _INT_BINARY[op.name])(x, y)
    _check_overflow_flags(self, b, op, x, y, result)
    return result


def _fast_math_flags(self, op) -> tuple:
    """The op's own ``fastmath = "none" | "fast"`` if it has one (as MLIR's arith ops do), else
    the compile option: code that relies on exact IEEE steps (math-approx) says "none"."""
    attr = op.attributes.get("fastmath")
    if attr is None:
        return self.fmf
    return ("fast",) if getattr(attr, "value", None) == "fast" else ()


@_handler(*_FLOAT_BINARY)
def _float_binary(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    return getattr(b, _FLOAT_BINARY[op.name])(x, y, flags=_fast_math_flags(self, op))


@_handler("arith.negf")
def _negf(self, b, op):
    x = self.value(op.operands[0])
    if op.results[0].type.width == 16:
        # A sign-bit flip, as IEEE 754 negation is: some LLVM versions (20) lower a half fneg at
        # -O0 through float, which quiets a signalling NaN (the math sweep's f16 0x7C01).
        bits = b.xor(b.bitcast(x, ir.IntType(16)), ir.Constant(ir.IntType(16), 0x8000))
        return b.bitcast(bits, x.type)
    return b.fneg(x, flags=_fast_math_flags(self, op))


def _check_division(self, b, op, x, y, signed: bool):
    if not self.options.checks:
        return
    zero = ir.Constant(y.type, 0)
    self.fault_if(b, b.icmp_unsigned("==", y, zero), op, "integer division by zero")
    if signed and y.type.width > 1:
        lowest = ir.Constant(x.type, 1 << (x.type.width - 1))
        minus1 = ir.Constant(y.type, (1 << y.type.width) - 1)
        overflow = b.and_(b.icmp_unsigned("==", x, lowest), b.icmp_unsigned("==", y, minus1))
        self.fault_if(b, overflow, op, "signed integer overflow in division")
    elif signed:  # i1: -1 / -1 overflows
        self.fault_if(b, b.and_(x, y), op, "signed integer overflow in division")


def _power_of_two_shift(y) -> int | None:
    """k if ``y`` is the constant 2**k with 1 <= k < width - 1 (positive as a signed value), else None."""
    if not isinstance(y, ir.Constant) or not isinstance(y.constant, int):
        return None
    v = y.constant
    if v < 2 or v & (v - 1) or v >= 1 << (y.type.width - 1):
        return None
    return v.bit_length() - 1


@_handler("arith.divsi", "arith.remsi", "arith.floordivsi", "arith.ceildivsi")
def _signed_division(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    k = _power_of_two_shift(y) if op.name in ("arith.floordivsi", "arith.ceildivsi") else None
    if k is not None:
        # Rounding division by a constant 2**k is a shift: LLVM cannot see through the
        # generic sdiv/srem/select form below (x // 2 was 3x slower than a shift).
        # floor(x / 2**k) = x >> k; ceil adds 1 when x is not a multiple of 2**k.
        q = b.ashr(x, ir.Constant(x.type, k))
        if op.name == "arith.floordivsi":
            return q
        inexact = b.icmp_unsigned("!=", b.and_(x, ir.Constant(x.type, (1 << k) - 1)), ir.Constant(x.type, 0))
        return b.add(q, b.zext(inexact, x.type))
    _check_division(self, b, op, x, y, True)
    if op.name == "arith.remsi":
        return b.srem(x, y)
    q = b.sdiv(x, y)
    if op.name == "arith.divsi":
        return q
    r = b.srem(x, y)
    zero = ir.Constant(x.type, 0)
    nonzero = b.icmp_signed("!=", r, zero)
    signs_differ = b.icmp_signed("<", b.xor(r, y), zero)  # r has x's sign when nonzero
    one = ir.Constant(x.type, 1)
    if op.name == "arith.floordivsi":
        return b.select(b.and_(nonzero, signs_differ), b.sub(q, one), q)
    return b.select(b.and_(nonzero, b.not_(signs_differ)), b.add(q, one), q)


@_handler("arith.divui", "arith.remui", "arith.ceildivui")
def _unsigned_division(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    _check_division(self, b, op, x, y, False)
    if op.name == "arith.remui":
        return b.urem(x, y)
    q = b.udiv(x, y)
    if op.name == "arith.divui":
        return q
    r = b.urem(x, y)
    return b.add(q, b.zext(b.icmp_unsigned("!=", r, ir.Constant(x.type, 0)), x.type))


@_handler("arith.shli", "arith.shrsi", "arith.shrui")
def _shift(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    if self.options.checks:
        too_far = b.icmp_unsigned(">=", y, ir.Constant(y.type, x.type.width))
        self.fault_if(b, too_far, op, f"shift amount is not less than the bit width ({x.type.width})")
    fn = {"arith.shli": b.shl, "arith.shrsi": b.ashr, "arith.shrui": b.lshr}[op.name]
    result = fn(x, y)
    if op.name == "arith.shli":
        _check_overflow_flags(self, b, op, x, y, result)
    return result


def _check_overflow_flags(self, b, op, x, y, result) -> None:
    """With checks, a result that breaks the op's ``nsw``/``nuw`` flag is a fault, as in the
    interpreter (arith.OverflowFlags): the flags let canonicalize assume it never happens."""
    flags = arith_dialect.overflow_flags(op)
    if not flags or not self.options.checks:
        return
    t = op.operands[0].type
    for flag in sorted(flags):
        signed = flag == "nsw"
        if op.name == "arith.shli":
            back = b.ashr(result, y) if signed else b.lshr(result, y)
            broke = b.icmp_unsigned("!=", back, x)
        else:
            kind = {"arith.addi": "add", "arith.subi": "sub", "arith.muli": "mul"}[op.name]
            pair = getattr(b, f"{'s' if signed else 'u'}{kind}_with_overflow")(x, y)
            broke = b.extract_value(pair, 1)
        self.fault_if(b, broke, op, f"{op.name} overflow<{flag}>: the result overflows {t}")


@_handler("arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui")
def _int_minmax(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    signed = op.name[-2] == "s"
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    pick_x = cmp(">=" if "max" in op.name else "<=", x, y)
    return b.select(pick_x, x, y)


@_handler("arith.cmpi")
def _cmpi(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    sym, signed = _ICMP[op.predicate]
    return (b.icmp_signed if signed else b.icmp_unsigned)(sym, x, y)


@_handler("arith.cmpf")
def _cmpf(self, b, op):
    x, y = (self.value(v) for v in op.operands)
    pred = op.predicate
    if pred in ("false", "true"):
        return ir.Constant(I1, int(pred == "true"))
    if pred in ("ord", "uno"):
        return (b.fcmp_ordered if pred == "ord" else b.fcmp_unordered)(pred, x, y)
    fn = b.fcmp_ordered if pred[0] == "o" else b.fcmp_unordered
    return fn(_FCMP[pred[1:]], x, y)


@_handler("arith.select")
def _select(self, b, op):
    c, x, y = (self.value(v) for v in op.operands)
    return b.select(c, x, y)


@_handler("arith.index_cast", "arith.extsi", "arith.trunci", "arith.index_castui", "arith.extui")
def _int_cast(self, b, op):
    x = self.value(op.operands[0])
    to = llvm_type(op.results[0].type)
    if to.width == x.type.width:
        return x
    if to.width < x.type.width:
        return b.trunc(x, to)
    return b.sext(x, to) if op.name in ("arith.index_cast", "arith.extsi") else b.zext(x, to)


@_handler("arith.sitofp", "arith.uitofp")
def _int_to_float(self, b, op):
    x = self.value(op.operands[0])
    to = llvm_type(op.results[0].type)
    return b.sitofp(x, to) if op.name == "arith.sitofp" else b.uitofp(x, to)


@_handler("arith.fptosi", "arith.fptoui")
def _float_to_int(self, b, op):
    x = self.value(op.operands[0])
    to = llvm_type(op.results[0].type)
    signed = op.name == "arith.fptosi"
    if self.options.checks:
        w = to.width
        lo, hi = (-(2.0 ** (w - 1)), 2.0 ** (w - 1)) if signed else (0.0, 2.0 ** w)
        if w == 1 and signed:
            lo, hi = -1.0, 1.0
        # In range iff lo - 1 < x < hi (after truncation toward zero), NaN excluded.  The bounds
        # are compared in double (exact for every narrower float): in x's own type lo - 1 may round
        # to lo and wrongly reject x == lo.  Where lo - 1 is not a double (i64), the double below
        # lo is at most lo - 2, so x > lo - 1 is x >= lo.
        wide = x if isinstance(x.type, ir.DoubleType) else b.fpext(x, ir.DoubleType())
        if int(lo - 1.0) == int(lo) - 1:
            above = b.fcmp_ordered(">", wide, ir.Constant(ir.DoubleType(), lo - 1.0))
        else:
            above = b.fcmp_ordered(">=", wide, ir.Constant(ir.DoubleType(), lo))
        below = b.fcmp_ordered("<", wide, ir.Constant(ir.DoubleType(), hi))
        bad = b.not_(b.and_(above, below))
        self.fault_if(b, bad, op, f"{op.name.split('.')[1]} of a value that {op.results[0].type} cannot hold")
    return b.fptosi(x, to) if signed else b.fptoui(x, to)


@_handler("arith.extf", "arith.truncf")
def _float_cast(self, b, op):
    x = self.value(op.operands[0])
    to = llvm_type(op.results[0].type)
    if op.name == "arith.extf":
        return b.fpext(x, to)
    mode = op.attributes.get("roundingmode")
    if mode is not None and mode.value != 0:
        raise IRError(f"the CPU backend cannot translate arith.truncf with rounding mode "
                      f"'{arith_dialect.ROUNDING_MODES[mode.value]}' (only to_nearest_even)", op.loc)
    if isinstance(x.type, ir.DoubleType) and isinstance(to, ir.HalfType):
        return _f64_to_f16(self, b, x, to)  # LLVM would call __truncdfhf2, which the JIT cannot link
    return b.fptrunc(x, to)


@_handler("arith.bitcast")
def _bitcast(self, b, op):
    return b.bitcast(self.value(op.operands[0]), llvm_type(op.results[0].type))


@_handler(*_MATH_INTRINSICS)
def _math_intrinsic(self, b, op):
    args = [self.value(v) for v in op.operands]
    if op.name in _IN_F64:
        return _in_f64(self, b, op, args, lambda wide: self.intrinsic(_MATH_INTRINSICS[op.name], wide[0].type,
                                                                     len(wide)))
    fn = self.intrinsic(_MATH_INTRINSICS[op.name], args[0].type, len(args))
    return b.call(fn, args, fastmath=_fast_math_flags(self, op))  # math-approx's fma says "none"


def _in_f64(self, b, op, args, callee):
    """``callee`` (a function of the f64 arguments) called on the arguments widened to f64, the
    result rounded once to their type."""
    ty = args[0].type
    f64 = ir.DoubleType()
    wide = [a if isinstance(ty, ir.DoubleType) else b.fpext(a, f64) for a in args]
    if op.name in _OPAQUE_ARGUMENTS and not self.options.fast_math:
        wide = [_opaque(b, a) for a in wide]
    result = b.call(callee(wide), wide, fastmath=self.fmf)
    if isinstance(ty, ir.DoubleType):
        return result
    return b.fptrunc(result, ty) if isinstance(ty, ir.FloatType) else _f64_to_f16(self, b, result, ty)


def _f64_to_f16(self, b, x, ty):
    """f64 -> f16 rounded once, without __truncdfhf2 (not in the process): to f32 rounding to odd,
    then to f16 (f32 keeps 13 more bits than f16, so the second rounding is the only one)."""
    f = b.fptrunc(x, ir.FloatType())
    back = b.fpext(f, x.type)
    inexact = b.fcmp_ordered("!=", back, x)  # false for a NaN
    fabs = self.intrinsic("llvm.fabs", x.type, 1)
    overshoot = b.and_(inexact, b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [x])))
    bits = b.sub(b.bitcast(f, I32), b.zext(overshoot, I32))  # one step toward zero: truncated
    bits = b.or_(bits, b.zext(inexact, I32))                  # the sticky bit: rounded to odd
    return b.fptrunc(b.bitcast(bits, ir.FloatType()), ty)


def _opaque(b, x):
    """``x`` unchanged, through an empty inline asm the optimiser cannot see into."""
    bits = b.bitcast(x, I64)
    bits = b.asm(ir.FunctionType(I64, [I64]), "", "=r,0", [bits], side_effect=False)
    return b.bitcast(bits, x.type)


@_handler("arith.maxnumf", "arith.minnumf")
def _maxnum_minnum(self, b, op):
    """IEEE 754-2019 maximumNumber/minimumNumber, as the interpreter computes them: a NaN operand
    is ignored and -0.0 < +0.0.  (llvm.maxnum may return either zero, differently at each -O
    level, so it is built from llvm.maximum/minimum, which order the zeros, and two selects.)"""
    x, y = (self.value(v) for v in op.operands)
    name = "llvm.maximum" if op.name == "arith.maxnumf" else "llvm.minimum"
    m = b.call(self.intrinsic(name, x.type, 2), [x, y], fastmath=self.fmf)
    return b.select(b.fcmp_unordered("uno", x, x), y, b.select(b.fcmp_unordered("uno", y, y), x, m))


@_handler(*_LIBM)
def _libm_call(self, b, op):
    x = self.value(op.operands[0])
    return _in_f64(self, b, op, [x], lambda wide: self.libm(_LIBM[op.name], wide[0].type))


@_handler("math.rsqrt")
def _rsqrt(self, b, op):
    x = self.value(op.operands[0])
    root = b.call(self.intrinsic("llvm.sqrt", x.type, 1), [x], fastmath=self.fmf)
    return b.fdiv(ir.Constant(x.type, 1.0), root, flags=self.fmf)


@_handler("math.ctlz", "math.cttz")
def _count_zeros(self, b, op):
    x = self.value(op.operands[0])
    name = f"llvm.{op.name[5:]}.{x.type}"
    fn = self._declare(name, ir.FunctionType(x.type, [x.type, I1]))
    return b.call(fn, [x, ir.Constant(I1, 0)])  # 0: the bit width for a zero operand, as MLIR


@_handler("math.ctpop")
def _ctpop(self, b, op):
    x = self.value(op.operands[0])
    return b.call(self._declare(f"llvm.ctpop.{x.type}", ir.FunctionType(x.type, [x.type])), [x])


@_handler("math.absi")
def _absi(self, b, op):
    x = self.value(op.operands[0])
    neg = b.icmp_signed("<", x, ir.Constant(x.type, 0))
    return b.select(neg, b.neg(x), x)


# -- control flow -------------------------------------------------------------------------------


@_handler("cf.br")
def _br(self, b, op):
    br = b.branch(self.blocks[op.successors[0]])
    count = op.attributes.get(scf_dialect.INTERLEAVE)
    if count is not None:
        br.set_metadata("llvm.loop", _loop_hints(self.tr.module, int(count.value)))


def _loop_hints(module: ir.Module, interleave: int) -> ir.MDValue:
    """A loop's own ``!llvm.loop`` node, ``!{self, !{"llvm.loop.interleave.count", i32 N}}``: LLVM
    finds a loop's hints on its back edge, in a node whose first operand is the node itself
    (which ``add_metadata``'s sharing of equal nodes would otherwise merge between loops)."""
    count = module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"), ir.IntType(32)(interleave)])
    node = module.add_metadata([ir.MetaDataString(module, f"irc.loop.{len(module.metadata)}"), count])
    node.operands = (node, count)
    return node


@_handler("cf.cond_br")
def _cond_br(self, b, op):
    t, f = op.successors
    b.cbranch(self.value(op.operands[0]), self.blocks[t], self.blocks[f])


@_handler("cf.switch")
def _switch(self, b, op):
    flag = self.value(op.operands[0])
    switch = b.switch(flag, self.blocks[op.successors[0]])
    for case, block in zip(op.cases, op.successors[1:]):
        switch.add_case(ir.Constant(flag.type, case), self.blocks[block])


@_handler("arith.addui_extended", "arith.mului_extended", "arith.mulsi_extended")
def _extended(self, b, op):
    """Both words of the exact result: a double-width add or multiply, split (the second result
    is stored here; translate_op stores the first)."""
    x, y = (self.value(v) for v in op.operands)
    w = x.type.width
    wide = ir.IntType(2 * w)
    extend = b.sext if op.name == "arith.mulsi_extended" else b.zext
    xw, yw = extend(x, wide), extend(y, wide)
    full = b.add(xw, yw) if op.name == "arith.addui_extended" else b.mul(xw, yw)
    high = b.trunc(b.lshr(full, ir.Constant(wide, w)), x.type)
    if op.name == "arith.addui_extended":
        high = b.trunc(high, I1)
    self.values[op.results[1]] = high
    return b.trunc(full, x.type)


@_handler("cf.phi")
def _phi(self, b, op):
    phi = b.phi(llvm_type(op.results[0].type))
    self.phis.append((phi, op))
    return phi


@_handler("cf.assert")
def _assert(self, b, op):
    if self.options.checks:
        failed = b.not_(self.value(op.operands[0]))
        self.fault_if(b, failed, op, f"assertion failed: {op.attributes['msg'].value}")


@_handler("func.return")
def _return(self, b, op):
    for v, out in zip(op.operands, self.outs):
        x = self.value(v)
        if x.type == I1:
            x = b.zext(x, I8)
        b.store(x, out)
    b.ret(ir.Constant(I32, 0))


@_handler("func.call")
def _call(self, b, op):
    if "chunks" in op.attributes:  # split-parallel's call of a parallel segment, run on threads
        from .translate_parallel import checked_chunks, parallel_call

        chunks = checked_chunks(self, op)
        if self.tr.pool:
            # On the pool only from a public call's own body (depth 0, a tensor function called
            # from Python): each chunk enters the segment afresh (depth 0, its own stack limit),
            # so a chunked call reached through calls would make recursion unbounded.
            top = b.icmp_unsigned("==", self.depth, ir.Constant(I32, 0))
            pooled, whole = self.fn.append_basic_block("pooled"), self.fn.append_basic_block("whole")
            after = self.fn.append_basic_block("aftercall")
            b.cbranch(top, pooled, whole)
            b.position_at_end(pooled)
            parallel_call(self, b, op, chunks)
            b.branch(after)
            b.position_at_end(whole)
            _plain_call(self, b, op)
            b.branch(after)
            b.position_at_end(after)
            return None
    return _plain_call(self, b, op)


def _plain_call(self, b, op):
    callee = self.bodies.get(op.callee) or self.funcs.get(op.callee)
    if callee is None:
        raise IRError(f"call to unknown function '@{op.callee}'", op.loc)
    depth = []
    if op.callee in self.bodies:
        # Unbounded recursion is an error at the call, never a stack overflow.
        if self.options.checks:
            # The interpreter counts frames, the entry's included: the call that would make
            # frame MAX_CALL_DEPTH + 1 faults.  Here the entry is depth 0, so a caller at
            # depth d has d + 1 frames and its call would make d + 2.
            too_deep = b.icmp_unsigned(">=", self.depth, ir.Constant(I32, MAX_CALL_DEPTH - 1))
            self.fault_if(b, too_deep, op, f"call depth exceeds {MAX_CALL_DEPTH} (unbounded recursion?)")
        depth = [b.add(self.depth, ir.Constant(I32, 1))]
    args = []
    for v in op.operands:
        x = self.value(v)
        t = v.type
        if isinstance(t, MemRefType):
            args.append(_extract(b, x, 0))
            args.extend(_extract(b, x, [1, d]) for d in range(t.rank))
            if depth:  # a body also takes the allocation record, so that the callee may free it
                args.extend([_extract(b, x, 2), _extract(b, x, 3)])
        elif x.type == I1:
            args.append(b.zext(x, I8))
        elif isinstance(x.type, ir.HalfType):
            args.append(b.bitcast(x, I16))
        else:
            args.append(x)
    slots = []
    with b.goto_entry_block():
        for t in op.result_types:
            slots.append(b.alloca(I8 if isinstance(t, IntegerType) and t.width == 1 else llvm_type(t)))
    status = b.call(callee, args + slots + depth + ([self.ctx] if depth else []))
    # A fault in the callee propagates unchanged to the caller's caller; a callee whose frame
    # would pass the stack limit is reported here, at the call.
    fail = self.fn.append_basic_block("callfail")
    ok = self.fn.append_basic_block("callok")
    b.cbranch(b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), fail, ok)
    with b.goto_block(fail):
        if depth:
            code = len(self.tr.faults) + 1
            self.tr.faults.append((f"stack exhausted at a call to @{op.callee}: the calls in progress need more "
                                   f"than the {_kib(self.options.stack_budget)} stack budget "
                                   "(recursion too deep, or frames too large)", op.loc))
            status = b.select(b.icmp_unsigned("==", status, ir.Constant(I32, STACK_EXHAUSTED)),
                              ir.Constant(I32, code), status)
        b.ret(status)
    b.position_at_end(ok)
    results = []
    for slot, t in zip(slots, op.result_types):
        x = b.load(slot)
        if isinstance(t, IntegerType) and t.width == 1:
            x = b.trunc(x, I1)
        results.append(x)
    for r, x in zip(op.results[1:], results[1:]):
        self.values[r] = x
    return results[0] if results else None


# -- memrefs -------------------------------------------------------------------------------------


def _sizes(b, mem, rank):
    return [_extract(b, mem, [1, d]) for d in range(rank)]


def _check_live(self, b, op, mem, message: str) -> None:
    """With bounds checks: fault if ``mem`` is a buffer (or a view of one) that memref.dealloc freed.

    A descriptor is live while its generation matches its record's; a freed record's
    generation has moved on, and a reused record's belongs to the new buffer."""
    if not self.options.bounds_checks:
        return
    record = _extract(b, mem, 2)
    generation = b.and_(_extract(b, mem, 3), ir.Constant(I64, VIEW_BIT - 1))
    with b.if_then(b.icmp_unsigned("!=", record, ir.Constant(PTR, None))):
        current = b.load(_field(b, b.bitcast(record, ir.PointerType(RECORD)), 3))
        self.fault_if(b, b.icmp_unsigned("!=", current, generation), op, message)


def _element_pointer(self, b, op, mem_value, indices):
    """The address of ``mem[indices]``: base + ((i0 * n1 + i1) * n2 + ...).

    The descriptor's fields and the row offset (all but the last index) are made once per
    LLVM block and buffer and reused by the block's later accesses (``self.accesses``): an
    unrolled kernel reads a few rows many times (the GEMM micro-kernel: 256 accesses to 8
    rows), and LLVM's own clean-up of thousands of repeated extracts and multiplies was most
    of its time on such code."""
    t = mem_value.type
    mem = self.value(mem_value)
    idx = [self.value(v) for v in indices]
    _check_live(self, b, op, mem, memref_dialect.FREED_ACCESS)
    block = b.block
    fields = self.accesses.get((block, id(mem)))
    if fields is None or fields[0] is not mem:
        fields = self.accesses[(block, id(mem))] = (mem, _extract(b, mem, 0), _sizes(b, mem, t.rank))
    _, base, sizes = fields
    if self.options.bounds_checks and idx:
        bad = None
        for i, n in zip(idx, sizes):
            out = b.icmp_unsigned(">=", i, n)  # also catches negative indices
            bad = out if bad is None else b.or_(bad, out)
        self.fault_if(b, bad, op, f"index out of bounds for {t}")
        if b.block is not block:  # the fault branch ended the block: the fields stay where they are
            block = b.block
            self.accesses[(block, id(mem))] = fields
    if not idx:
        return b.gep(base, [ir.Constant(I64, 0)], inbounds=True)
    if len(idx) == 1:
        return b.gep(base, [idx[0]], inbounds=True)
    key = (block, id(mem), *map(id, idx[:-1]))
    row = self.accesses.get(key)
    if row is None or row[0] is not mem or any(x is not y for x, y in zip(row[1], idx[:-1])):
        linear = idx[0]
        for i, n in zip(idx[1:-1], sizes[1:-1]):
            linear = b.add(b.mul(linear, n), i)
        row = self.accesses[key] = (mem, idx[:-1], b.mul(linear, sizes[-1]))
    return b.gep(base, [b.add(row[2], idx[-1])], inbounds=True)


@_handler("memref.load")
def _load(self, b, op):
    ptr = _element_pointer(self, b, op, op.operands[0], op.operands[1:])
    if ptr.type.pointee == I1:
        # An i1 lives in a byte that numpy (np.bool_) reads as true when nonzero; a byte
        # other than 0 or 1 (from a view or a cast) must read as numpy and the interpreter
        # read it, not as LLVM's i1 of whatever bit 0 holds.  One compare per load is
        # cheaper than normalising (copying) every bool array at the call boundary.
        return b.icmp_unsigned("!=", b.load(b.bitcast(ptr, ir.PointerType(I8))), ir.Constant(I8, 0))
    return b.load(ptr)


@_handler("memref.store")
def _store(self, b, op):
    b.store(self.value(op.operands[0]), _element_pointer(self, b, op, op.operands[1], op.operands[2:]))


@_handler("vector.load")
def _vector_load(self, b, op):
    t = op.results[0].type
    ptr = _vector_pointer(self, b, op, op.operands[0], op.operands[1:], t)
    return b.load(ptr, align=_item_bytes(op.operands[0].type))


@_handler("vector.store")
def _vector_store(self, b, op):
    t = op.operands[0].type
    ptr = _vector_pointer(self, b, op, op.operands[1], op.operands[2:], t)
    b.store(self.value(op.operands[0]), ptr, align=_item_bytes(op.operands[1].type))


def _vector_pointer(self, b, op, mem_value, indices, t: VectorType):
    """The address of ``mem[indices]`` as a pointer to ``t``; with bounds checks, a vector that
    runs past the end of its row faults (the element checks cover its first lane)."""
    if self.options.bounds_checks:
        mem = self.value(mem_value)
        last = b.extract_value(mem, [1, mem_value.type.rank - 1])
        end = b.add(self.value(indices[-1]), ir.Constant(I64, t.size))
        self.fault_if(b, b.icmp_unsigned(">", end, last), op, vector_dialect.out_of_row(mem_value.type, t.size))
    ptr = _element_pointer(self, b, op, mem_value, indices)
    return b.bitcast(ptr, ir.PointerType(llvm_type(t)))


@_handler("vector.broadcast")
def _broadcast(self, b, op):
    t = llvm_type(op.results[0].type)
    one = b.insert_element(ir.Constant(t, ir.Undefined), self.value(op.operands[0]), ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(t, ir.Undefined), ir.Constant(ir.VectorType(I32, t.count), [0] * t.count))


@_handler("vector.from_elements")
def _from_elements(self, b, op):
    v = ir.Constant(llvm_type(op.results[0].type), ir.Undefined)
    for lane, x in enumerate(op.operands):
        v = b.insert_element(v, self.value(x), ir.Constant(I32, lane))
    return v


@_handler("vector.shuffle")
def _shuffle(self, b, op):
    mask = ir.Constant(ir.VectorType(I32, len(op.mask)), list(op.mask))
    return b.shuffle_vector(self.value(op.operands[0]), self.value(op.operands[1]), mask)


@_handler("memref.dim")
def _dim(self, b, op):
    mem = self.value(op.operands[0])
    rank = op.operands[0].type.rank
    d = self.value(op.operands[1])
    sizes = _sizes(b, mem, rank)
    if self.options.checks:
        self.fault_if(b, b.icmp_unsigned(">=", d, ir.Constant(I64, rank)), op,
                      f"dimension index out of range for a rank-{rank} memref")
    out = ir.Constant(I64, 0)
    for k, n in enumerate(sizes):
        out = b.select(b.icmp_unsigned("==", d, ir.Constant(I64, k)), n, out)
    return out


def _item_bytes(t: MemRefType) -> int:
    elem = llvm_type(t.element_type)
    width = elem.width if isinstance(elem, ir.IntType) else {"float": 32, "double": 64, "half": 16}[str(elem)]
    return max(width // 8, 1)


def _byte_size(b, t: MemRefType, sizes):
    """The byte size of a buffer that exists (its size was checked when it was made)."""
    n = ir.Constant(I64, _item_bytes(t))
    for s in sizes:
        n = b.mul(n, s)
    return n


def _checked_byte_size(self, b, t: MemRefType, sizes):
    """(byte size, negative, too big) of a new buffer of type ``t``, by the interpreter's rule
    (memref.is_too_big): the product with each size 0 counted as 1 must not pass
    MAX_BUFFER_BYTES; the size is exact unless ``too big`` (i1) holds.  Static sizes were
    checked by the type."""
    static, empty = _item_bytes(t), False
    for d in t.shape:
        static *= d or 1
        empty = empty or d == 0
    dynamic = [s for d, s in zip(t.shape, sizes) if d is None]
    zero64, false = ir.Constant(I64, 0), ir.Constant(I1, 0)
    n, negative, overflow, zero = ir.Constant(I64, static), false, false, ir.Constant(I1, int(empty))
    for s in dynamic:
        negative = b.or_(negative, b.icmp_signed("<", s, zero64))
        is_zero = b.icmp_unsigned("==", s, zero64)
        zero = b.or_(zero, is_zero)
        product = b.umul_with_overflow(n, b.select(is_zero, ir.Constant(I64, 1), s))
        n = _extract(b, product, 0)
        overflow = b.or_(overflow, _extract(b, product, 1))
    too_big = b.or_(overflow, b.icmp_signed("<", n, zero64))  # wrapped, or past 2**63 - 1
    if empty:
        return zero64, negative, too_big
    return (b.select(zero, zero64, n) if dynamic else n), negative, too_big



def _extract(b, aggregate, index):
    """``b.extract_value(aggregate, index)``, but a field that an ``insertvalue`` of the chain
    that built ``aggregate`` put there is used as it is: a view's or a parameter's descriptor
    is read field by field, and LLVM would otherwise parse, combine and discard thousands of
    such pairs (``_drop_unused`` then removes the inserts no one reads)."""
    want = tuple(index) if isinstance(index, (list, tuple)) else (index,)
    while isinstance(aggregate, ir.InsertValue):
        have = tuple(aggregate.indices)
        if have == want:
            return aggregate.value
        if have[:len(want)] == want or want[:len(have)] == have:  # overlapping: a part or a whole
            break
        aggregate = aggregate.aggregate
    return b.extract_value(aggregate, index)


_DROPPABLE = (ir.InsertValue, ir.ExtractValue, ir.CastInstr, ir.GEPInstr)
_PURE_INTEGER_OPS = frozenset({"add", "sub", "mul", "and", "or", "xor", "shl", "lshr", "ashr"})


def _droppable(inst) -> bool:
    return isinstance(inst, _DROPPABLE) or (type(inst) is ir.Instruction and inst.opname in _PURE_INTEGER_OPS)


def _drop_unused(module) -> None:
    """Remove side-effect-free instructions of the kinds ``_extract`` leaves unread (inserts,
    extracts, casts, address and integer arithmetic) that nothing uses, transitively."""
    for fn in module.functions:
        if fn.is_declaration:
            continue
        uses: dict[int, int] = {}
        for block in fn.blocks:
            for inst in block.instructions:
                values = [v for v, _ in inst.incomings] if isinstance(inst, ir.PhiInstr) else inst.operands
                for v in values:
                    if isinstance(v, ir.Instruction):
                        uses[id(v)] = uses.get(id(v), 0) + 1
        dead = [inst for block in fn.blocks for inst in block.instructions
                if _droppable(inst) and not uses.get(id(inst))]
        removed = set()
        while dead:
            inst = dead.pop()
            if id(inst) in removed:
                continue
            removed.add(id(inst))
            for v in inst.operands:
                if isinstance(v, ir.Instruction):
                    uses[id(v)] -= 1
                    if not uses[id(v)] and _droppable(v):
                        dead.append(v)
        if removed:
            for block in fn.blocks:
                block.instructions = [inst for inst in block.instructions if id(inst) not in removed]

def _descriptor(b, t: MemRefType, data, sizes, record=None, generation=None):
    struct_t = memref_struct(t)
    struct = ir.Constant(struct_t, ir.Undefined)
    struct = b.insert_value(struct, b.bitcast(data, struct_t.elements[0]), 0)
    for d, s in enumerate(sizes):
        struct = b.insert_value(struct, s, [1, d])
    struct = b.insert_value(struct, record if record is not None else ir.Constant(PTR, None), 2)
    return b.insert_value(struct, generation if generation is not None else ir.Constant(I64, 0), 3)


@_handler("memref.alloc", "memref.alloca")
def _alloc(self, b, op):
    t = op.results[0].type
    dyn = iter(self.value(v) for v in op.operands)
    sizes = [next(dyn) if d is None else ir.Constant(I64, d) for d in t.shape]
    # Size faults are checked even without 'checks': a wrapped size corrupts memory for a
    # program whose every access is in bounds.
    nbytes, negative, too_big = _checked_byte_size(self, b, t, sizes)
    if not t.has_static_shape:
        self.fault_if(b, negative, op, memref_dialect.NEGATIVE_SIZE)
        self.fault_if(b, too_big, op, memref_dialect.too_big(t))
    if op.name == "memref.alloca":
        if t.has_static_shape:
            # In the frame, which the entry check holds to the stack budget; a large one just after
            # that check (a frame past the guard page would fault in the prologue, before any check).
            with b.goto_block(self.frame_block) if op in self.large_allocas else b.goto_entry_block():
                raw = b.alloca(I8, size=ir.Constant(I64, max(1, _static_bytes(t))))
        else:
            self.fault_if(b, b.icmp_unsigned(">", nbytes, self.stack_left(b)), op,
                          f"stack exhausted by memref.alloca of {t}: it needs more than the rest of the "
                          f"{_kib(self.options.stack_budget)} stack budget (use memref.alloc for large buffers)")
            raw = b.alloca(I8, size=nbytes)
        raw.align = 16
        # A fresh, zeroed buffer each time the op runs, as in the interpreter (a static
        # alloca's stack slot is reused, so it is cleared here, not in the entry block).
        b.call(self.intrinsic_memset(), [raw, ir.Constant(I8, 0), nbytes, ir.Constant(I1, 0)])
        return _descriptor(b, t, raw, sizes)
    record = _take_record(self, b, op)
    calloc = self._declare("calloc", ir.FunctionType(PTR, [I64, I64]))
    # Not LLVM's builtin: it would elide an allocation it sees freed, and with it the fault that the
    # interpreter reports when the memory does not exist.
    calloc.attributes.add("nobuiltin")
    # calloc, as numpy's zeros: untouched pages of a huge buffer cost nothing in either engine.
    data = b.call(calloc, [b.select(b.icmp_unsigned("==", nbytes, ir.Constant(I64, 0)), ir.Constant(I64, 1), nbytes),
                           ir.Constant(I64, 1)])
    self.fault_if(b, b.icmp_unsigned("==", data, ir.Constant(PTR, None)), op, memref_dialect.out_of_memory(op.name))
    b.store(data, _field(b, record, 2))
    generation = b.load(_field(b, record, 3))
    return _descriptor(b, t, data, sizes, b.bitcast(record, PTR), generation)


def _take_record(self, b, op):
    """A RECORD for a new allocation: one freed earlier in this call, or a new one on the call's list."""
    record_ptr = ir.PointerType(RECORD)
    free_head = _field(b, self.ctx, 2)
    reusable = b.load(free_head)
    reuse_block, new_block = self.fn.append_basic_block("reuse_record"), self.fn.append_basic_block("new_record")
    join = self.fn.append_basic_block("have_record")
    b.cbranch(b.icmp_unsigned("!=", reusable, ir.Constant(PTR, None)), reuse_block, new_block)
    b.position_at_end(reuse_block)
    reused = b.bitcast(reusable, record_ptr)
    b.store(b.load(_field(b, reused, 1)), free_head)
    b.branch(join)
    b.position_at_end(new_block)
    malloc = self._declare("malloc", ir.FunctionType(PTR, [I64]))
    raw = b.call(malloc, [ir.Constant(I64, 32)])  # sizeof(RECORD)
    self.fault_if(b, b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), op, memref_dialect.out_of_memory(op.name))
    fresh = b.bitcast(raw, record_ptr)
    records = _field(b, self.ctx, 1)
    b.store(b.load(records), _field(b, fresh, 0))
    b.store(raw, records)
    b.store(ir.Constant(PTR, None), _field(b, fresh, 2))
    b.store(ir.Constant(I64, 0), _field(b, fresh, 3))
    fresh_end = b.block
    b.branch(join)
    b.position_at_end(join)
    record = b.phi(record_ptr)
    record.add_incoming(reused, reuse_block)
    record.add_incoming(fresh, fresh_end)
    return record


SMALL_ALLOCA_BYTES = 4096
SMALL_FRAME_BYTES = 64 * 1024
"""Static allocas up to SMALL_ALLOCA_BYTES each, SMALL_FRAME_BYTES in all, live in a function's
frame (where LLVM can promote them to registers); larger ones are allocated after the entry's stack
check, which counts them, so that no frame reaches past the reserve below the stack limit."""


def _large_static_allocas(blocks) -> set:
    large, total = set(), 0
    for block in blocks:
        for op in block.ops:
            if op.name == "memref.alloca" and op.results[0].type.has_static_shape:
                size = _aligned16(_static_bytes(op.results[0].type))
                if size > SMALL_ALLOCA_BYTES or total + size > SMALL_FRAME_BYTES:
                    large.add(op)
                else:
                    total += size
    return large


def _aligned16(n: int) -> int:
    return max(16, (n + 15) // 16 * 16)


def _static_bytes(t: MemRefType) -> int:
    return _item_bytes(t) * (t.num_elements or 0)


def _live_record(self, b, op, mem, not_allocated: str, freed: str):
    """The allocation record of ``mem`` (as the descriptor holds it, and as a pointer to a
    ``RECORD``) and its generation, faulting unless ``mem`` is a live
    buffer of memref.alloc (``not_allocated``: a view, a global, an alloca; ``freed``: freed
    already): what dealloc and realloc may free."""
    record, generation = _extract(b, mem, 2), _extract(b, mem, 3)
    not_ours = b.or_(b.icmp_unsigned("==", record, ir.Constant(PTR, None)),
                     b.icmp_signed("<", generation, ir.Constant(I64, 0)))  # VIEW_BIT
    self.fault_if(b, not_ours, op, not_allocated)
    rec = b.bitcast(record, ir.PointerType(RECORD))
    self.fault_if(b, b.icmp_unsigned("!=", b.load(_field(b, rec, 3)), generation), op, freed)
    return record, rec, generation


@_handler("memref.dealloc")
def _dealloc(self, b, op):
    """Free a live buffer of memref.alloc, once; anything else is the interpreter's fault, never free()."""
    mem = self.value(op.operands[0])
    record, rec, generation = _live_record(self, b, op, mem, memref_dialect.NOT_ALLOCATED, memref_dialect.FREED_TWICE)
    free = self._declare("free", ir.FunctionType(ir.VoidType(), [PTR]))
    b.call(free, [b.load(_field(b, rec, 2))])
    b.store(ir.Constant(PTR, None), _field(b, rec, 2))
    b.store(b.add(generation, ir.Constant(I64, 1)), _field(b, rec, 3))
    free_head = _field(b, self.ctx, 2)
    b.store(b.load(free_head), _field(b, rec, 1))
    b.store(record, free_head)


@_handler("memref.copy")
def _copy(self, b, op):
    src_v, dst_v = op.operands
    src, dst = self.value(src_v), self.value(dst_v)
    _check_live(self, b, op, src, memref_dialect.FREED_ACCESS)
    _check_live(self, b, op, dst, memref_dialect.FREED_ACCESS)
    nbytes = _byte_size(b, src_v.type, _sizes(b, src, src_v.type.rank))
    if self.options.checks:
        bad = None
        for s, d in zip(_sizes(b, src, src_v.type.rank), _sizes(b, dst, dst_v.type.rank)):
            ne = b.icmp_unsigned("!=", s, d)
            bad = ne if bad is None else b.or_(bad, ne)
        if bad is not None:
            self.fault_if(b, bad, op, "memref.copy between buffers of different shapes")
    b.call(self.intrinsic_memmove(), [b.bitcast(_extract(b, dst, 0), PTR),
                                     b.bitcast(_extract(b, src, 0), PTR), nbytes, ir.Constant(I1, 0)])


@_handler("memref.view")
def _view(self, b, op):
    """A view inside its source, at an offset aligned to its element (checked in the interpreter's order);
    it shares the source's record, marked with VIEW_BIT so that it cannot be deallocated."""
    src_v, offset_v, *size_vs = op.operands
    t = op.results[0].type
    src = self.value(src_v)
    dyn = iter(self.value(v) for v in size_vs)
    sizes = [next(dyn) if d is None else ir.Constant(I64, d) for d in t.shape]
    offset = self.value(offset_v)
    _check_live(self, b, op, src, memref_dialect.FREED_VIEW)
    if not _view_fits_statically(t, src_v.type, offset, sizes):
        _check_view(self, b, op, t, src_v, src, offset, sizes)
    base = b.bitcast(_extract(b, src, 0), PTR)
    generation = b.or_(_extract(b, src, 3), ir.Constant(I64, VIEW_BIT))
    return _descriptor(b, t, b.gep(base, [offset], inbounds=True), sizes, _extract(b, src, 2), generation)


def _view_fits_statically(t: MemRefType, src_t: MemRefType, offset, sizes) -> bool:
    """Whether a view's offset and sizes are constants that fit its static source, aligned: then
    it needs no run-time check (most views are: bufferization's slots in the arena, reshapes)."""
    known = [x.constant for x in (offset, *sizes) if isinstance(x, ir.Constant) and isinstance(x.constant, int)]
    if len(known) != 1 + len(sizes) or not src_t.has_static_shape:
        return False
    start, *dims = known
    if start < 0 or any(d < 0 for d in dims):
        return False
    nbytes = _item_bytes(t)
    for d in dims:
        nbytes *= d
    src_bytes = _item_bytes(src_t)
    for d in src_t.shape:
        src_bytes *= d
    return start + nbytes <= src_bytes and start % _item_bytes(t) == 0


def _check_view(self, b, op, t, src_v, src, offset, sizes) -> None:
    """Fault unless the view lies inside its source, aligned to its element (the interpreter's order).
    Checked even without 'checks', as alloc's sizes are: a view past its source writes anywhere."""
    nbytes, negative, too_big = _checked_byte_size(self, b, t, sizes)
    end = b.add(offset, nbytes)  # no wrap: both are below 2**63 when the first two tests pass
    bad = b.or_(b.or_(negative, too_big), b.icmp_signed("<", offset, ir.Constant(I64, 0)))
    bad = b.or_(bad, b.icmp_unsigned(">", end, _byte_size(b, src_v.type, _sizes(b, src, src_v.type.rank))))
    self.fault_if(b, bad, op, memref_dialect.view_does_not_fit(t))
    misaligned = b.and_(offset, ir.Constant(I64, _item_bytes(t) - 1))
    self.fault_if(b, b.icmp_unsigned("!=", misaligned, ir.Constant(I64, 0)), op, memref_dialect.view_misaligned(t))


# ---- memref.global and the hints -------------------------------------------------------------------


def _global(tr: Translation, op) -> None:
    """A memref.global as an internal LLVM global of its bytes (read-only when ``constant``)."""
    t = op.type
    elem = llvm_type(t.element_type)
    n = max(1, t.num_elements or 0)
    array_t = ir.ArrayType(elem, n)
    g = ir.GlobalVariable(tr.module, array_t, name=tr.module.get_unique_name(f"irc.global.{op.sym_name}"))
    g.linkage = "internal"
    g.global_constant = op.is_constant
    align = op.attributes.get("alignment")
    g.align = max(16, align.value if align is not None else 16)
    init = op.initial_value
    if init is None:
        g.initializer = ir.Constant(array_t, None)
    else:
        values = np.broadcast_to(init.array, t.shape).reshape(-1) if t.shape else init.array.reshape(-1)
        if isinstance(elem, ir.IntType):
            items = [ir.Constant(elem, int(v)) for v in values]
        else:
            items = [ir.Constant(elem, float(v)) for v in values]
        g.initializer = ir.Constant(array_t, items or [ir.Constant(elem, 0)])
    tr.globals[op.sym_name] = g


@_handler("memref.get_global")
def _get_global(self, b, op):
    t = op.results[0].type
    data = b.bitcast(self.tr.globals[op.global_name], PTR)
    return _descriptor(b, t, data, [ir.Constant(I64, d) for d in t.shape])


@_handler("memref.cast")
def _memref_cast(self, b, op):
    """The same descriptor; a size the cast makes static is checked against the buffer's."""
    mem = self.value(op.operands[0])
    src, t = op.operands[0].type, op.results[0].type
    sizes = _sizes(b, mem, t.rank)
    for d, (was, now) in enumerate(zip(src.shape, t.shape)):
        if was is None and now is not None:
            self.fault_if(b, b.icmp_unsigned("!=", sizes[d], ir.Constant(I64, now)), op,
                          memref_dialect.cast_mismatch(t))
    return mem


@_handler("memref.rank")
def _memref_rank(self, b, op):
    return ir.Constant(I64, op.operands[0].type.rank)


@_handler("memref.prefetch")
def _prefetch(self, b, op):
    """``llvm.prefetch`` of the element's address.  A prefetch never faults, so an index out of
    bounds (or a buffer already freed) is no error here either, as in the interpreter: the
    address is computed without bounds checks and without ``inbounds``, and nothing is read.
    As with C's ``__builtin_prefetch``, a hint in a loop's body keeps LLVM from vectorising
    the loop (a call it cannot widen): an explicit hint is honoured, not second-guessed, so it
    belongs in loops whose memory, not arithmetic, is the cost."""
    t = op.operands[0].type
    mem = self.value(op.operands[0])
    linear = ir.Constant(I64, 0)
    for i, n in zip((self.value(v) for v in op.operands[1:]), _sizes(b, mem, t.rank)):
        linear = b.add(b.mul(linear, n), i)
    address = b.gep(_extract(b, mem, 0), [linear])
    flag = {key: op.attributes[key].value for key in ("isWrite", "localityHint", "isDataCache")}
    prefetch = self._declare("llvm.prefetch.p0", ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]))
    b.call(prefetch, [b.bitcast(address, PTR), *(ir.Constant(I32, int(flag[key]))
                                                   for key in ("isWrite", "localityHint", "isDataCache"))])


@_handler("memref.assume_alignment")
def _assume_alignment(self, b, op):
    mem = self.value(op.operands[0])
    address = b.ptrtoint(b.extract_value(mem, 0), I64)
    low_bits = b.and_(address, ir.Constant(I64, op.alignment - 1))
    self.fault_if(b, b.icmp_unsigned("!=", low_bits, ir.Constant(I64, 0)), op, memref_dialect.misaligned(op.alignment))
    return mem


# ---- reshapes, memory space casts and realloc --------------------------------------------------------


@_handler("memref.collapse_shape", "memref.expand_shape")
def _reshape(self, b, op):
    """A view of the source with new sizes (the data are contiguous, so no address changes): a
    collapsed size is its group's product; an expanded group's sizes must multiply to the source
    size (checked, exactly: a product that overflows 64 bits is a mismatch, unless a size is 0)."""
    src_v = op.operands[0]
    t = op.results[0].type
    src = self.value(src_v)
    _check_live(self, b, op, src, memref_dialect.FREED_VIEW)
    src_sizes = _sizes(b, src, src_v.type.rank)
    groups = memref_dialect.reassociation(op)
    if op.name == "memref.collapse_shape":
        sizes = []
        for g in groups:
            n = src_sizes[g[0]]
            for k in g[1:]:
                n = b.mul(n, src_sizes[k])
            sizes.append(n)
    else:
        dyn = iter(self.value(v) for v in op.operands[1:])
        sizes = [next(dyn) if d is None else ir.Constant(I64, d) for d in t.shape]
        zero64, false = ir.Constant(I64, 0), ir.Constant(I1, 0)
        for i, g in enumerate(groups):
            if src_v.type.shape[i] is not None and all(t.shape[k] is not None for k in g):
                continue  # static: checked by the verifier
            product, overflow, negative, zero = ir.Constant(I64, 1), false, false, false
            for k in g:
                negative = b.or_(negative, b.icmp_signed("<", sizes[k], zero64))
                zero = b.or_(zero, b.icmp_unsigned("==", sizes[k], zero64))
                step = b.umul_with_overflow(product, sizes[k])
                product, overflow = _extract(b, step, 0), b.or_(overflow, _extract(b, step, 1))
            differ = b.select(zero, b.icmp_unsigned("!=", src_sizes[i], zero64),
                              b.or_(overflow, b.icmp_unsigned("!=", product, src_sizes[i])))
            self.fault_if(b, b.or_(negative, differ), op, memref_dialect.reshape_mismatch(op.name, t))
    generation = b.or_(_extract(b, src, 3), ir.Constant(I64, VIEW_BIT))
    return _descriptor(b, t, _extract(b, src, 0), sizes, _extract(b, src, 2), generation)


@_handler("memref.memory_space_cast")
def _memory_space_cast(self, b, op):
    """The same descriptor: a memory space changes nothing in host code."""
    return self.value(op.operands[0])


@_handler("memref.realloc")
def _realloc(self, b, op):
    """C's realloc of a live buffer of memref.alloc, the new tail zeroed (memref.alloc's calloc
    zeroes); the record stays, its generation moves on, so the old descriptor reads as freed."""
    src_v = op.operands[0]
    t = op.results[0].type
    src = self.value(src_v)
    size = self.value(op.operands[1]) if len(op.operands) == 2 else ir.Constant(I64, t.shape[0])
    record, rec, generation = _live_record(self, b, op, src, memref_dialect.REALLOC_NOT_ALLOCATED,
                                           memref_dialect.REALLOC_FREED)
    nbytes, negative, too_big = _checked_byte_size(self, b, t, [size])
    if t.shape[0] is None:
        self.fault_if(b, negative, op, memref_dialect.NEGATIVE_SIZE)
        self.fault_if(b, too_big, op, memref_dialect.too_big(t))
    old_bytes = _byte_size(b, src_v.type, _sizes(b, src, 1))
    realloc = self._declare("realloc", ir.FunctionType(PTR, [PTR, I64]))
    realloc.attributes.add("nobuiltin")
    one = ir.Constant(I64, 1)
    data = b.call(realloc, [b.load(_field(b, rec, 2)),
                            b.select(b.icmp_unsigned("==", nbytes, ir.Constant(I64, 0)), one, nbytes)])
    self.fault_if(b, b.icmp_unsigned("==", data, ir.Constant(PTR, None)), op, memref_dialect.out_of_memory(op.name))
    with b.if_then(b.icmp_unsigned(">", nbytes, old_bytes)):
        b.call(self.intrinsic_memset(), [b.gep(data, [old_bytes]), ir.Constant(I8, 0), b.sub(nbytes, old_bytes),
                                         ir.Constant(I1, 0)])
    b.store(data, _field(b, rec, 2))
    generation = b.add(generation, one)
    b.store(generation, _field(b, rec, 3))
    return _descriptor(b, t, data, [size], record, generation)


from . import translate_atomic  # noqa: E402, F401  (registers the handlers of memref's atomic ops)
