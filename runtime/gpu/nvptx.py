"""The NVPTX renderer: the kernels of a ``gpu.module`` -> LLVM IR for ``nvptx64-nvidia-cuda`` -> PTX.

It specialises the CPU renderer (``runtime/cpu/translate.py``): arith, math intrinsics, cf
and memref loads and stores are translated by the CPU's handlers; what differs is here:

* **calling convention**: a kernel is ``void @k(params)`` marked as a kernel (the
  ``nvvm.annotations`` metadata); a ``memref<d0 x ... x T, gpu>`` parameter is a
  ``T addrspace(1)*`` (global memory) followed by one ``i64`` per dimension, as the CPU's C ABI
  passes it; ``index`` is ``i64``, ``i1`` travels as ``i8``;
* **address spaces**: global parameters are cast to generic pointers after entry (LLVM's
  NVPTX address-space inference turns the accesses back into ``ld.global``); a workgroup
  ``memref.alloca`` is an ``addrspace(3)`` array (``.shared``), a private one an ``alloca``;
* **intrinsics**: ``gpu.thread_id`` etc. read ``llvm.nvvm.read.ptx.sreg.*``, ``gpu.barrier`` is
  ``llvm.nvvm.barrier0``, ``gpu.shuffle`` is ``llvm.nvvm.shfl.sync.*``;
* **math**: no libdevice.  Run ``math-approx{only=all}`` first (the GPU pipeline does), so that
  exp, log, tanh, erf, sin, cos... are arith polynomials; sqrt, fabs, floor, ceil, fma, min and
  max are LLVM intrinsics NVPTX selects directly.  Transcendental ops left over are an error
  naming the op;
* **faults**: kernels have no fault channel, so runtime checks (division by zero, bounds) are
  not emitted: the interpreter, which simulates the same kernels, is where they are caught.
"""

from __future__ import annotations

from llvmlite import ir

from irc.diagnostics import IRError
from irc.dominance import reverse_postorder
from irc.types import FloatType, IntegerType, MemRefType

from ..cpu import translate as cpu

TRIPLE = "nvptx64-nvidia-cuda"
DATA_LAYOUT = "e-p3:32:32-p4:32:32-p5:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
GLOBAL, SHARED = 1, 3
I8, I32, I64 = cpu.I8, cpu.I32, cpu.I64

# PTX ISA versions: the lowest that each supported architecture needs (CUDA 11.8 / 12.0 drivers).
PTX_VERSION = {80: 70, 86: 71, 89: 78, 90: 78}
SUPPORTED_SM = tuple(PTX_VERSION)


def kernel_param_types(t) -> list[ir.Type]:
    if isinstance(t, MemRefType):
        return [ir.PointerType(cpu.llvm_type(t.element_type), addrspace=GLOBAL)] + [I64] * t.rank
    return cpu.param_types(t)


class KernelTranslator(cpu.FunctionTranslator):
    """One ``gpu.func`` kernel, translated with the CPU's op handlers where they fit."""

    def __init__(self, tr: cpu.Translation, kernel, fn: ir.Function):
        options = cpu.Options(checks=False, bounds_checks=False)
        super().__init__(tr, {}, kernel, options, {kernel.sym_name: fn})
        self.shared_count = 0

    # Kernels have no fault channel, no C stack budget and no libm.
    def fault_if(self, b, cond, op, message: str) -> None:
        return

    def check_stack(self, b, large_bytes: int = 0) -> None:
        return

    def libm(self, name: str, ty):
        raise TypeError(f"'{name}' would need libdevice; run math-approx{{only=all}} before rendering")

    def run(self) -> None:
        fn, func = self.fn, self.func
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = iter(fn.args)
        for arg in func.args:
            t = arg.type
            if isinstance(t, MemRefType):
                ptr = next(args)
                generic = b.addrspacecast(ptr, ir.PointerType(cpu.llvm_type(t.element_type)))
                params = [next(args) for _ in range(t.rank)]
                # A static size is a constant in the kernel (the parameter still travels, for one
                # calling convention): address arithmetic folds and strength-reduces.
                sizes = [p if d is None else ir.Constant(I64, d) for p, d in zip(params, t.shape)]
                self.values[arg] = _descriptor(b, t, generic, sizes)
            elif isinstance(t, IntegerType) and t.width == 1:
                self.values[arg] = b.trunc(next(args), cpu.I1)
            elif isinstance(t, FloatType) and t.kind == "f16":
                self.values[arg] = b.bitcast(next(args), ir.HalfType())
            else:
                self.values[arg] = next(args)
        self.outs = []
        self.large_allocas = set()
        self.frame_block = b.block
        self.translate_blocks(b, reverse_postorder(func.body.entry), "NVPTX")

    def translate_op(self, b, op) -> None:
        if op.name in NEEDS_LIBDEVICE:  # LLVM's NVPTX backend cannot select these (a fatal error)
            raise IRError(f"the NVPTX backend has no '{op.name}' without libdevice: run "
                          "math-approx{only=all} first (the GPU pipeline does)", op.loc)
        handler = _KERNEL_HANDLERS.get(op.name)
        if handler is None:
            if op.name in _HOST_ONLY or op.name not in cpu._HANDLERS:
                hint = "run scf-to-cf first" if op.name.startswith("scf.") else "not supported in kernels"
                raise IRError(f"the NVPTX backend cannot translate '{op.name}' ({hint})", op.loc)
            return super().translate_op(b, op)
        result = handler(self, b, op)
        if op.results and result is not None:
            for r, v in zip(op.results, result if isinstance(result, list) else [result]):
                self.values[r] = v
        if op.is_terminator:
            self.exit_blocks[self.current] = b.block


NEEDS_LIBDEVICE = frozenset({"math.exp", "math.exp2", "math.log", "math.log2", "math.sin", "math.cos", "math.tanh",
                             "math.powf", "math.expm1", "math.log1p", "math.erf"})
_HOST_ONLY = frozenset({"func.call", "func.return", "memref.alloc", "memref.dealloc", "memref.view"})


def _descriptor(b, t: MemRefType, data, sizes):
    struct = ir.Constant(cpu.memref_struct(t), ir.Undefined)
    struct = b.insert_value(struct, data, 0)
    for d, n in enumerate(sizes):
        struct = b.insert_value(struct, n, [1, d])
    struct = b.insert_value(struct, ir.Constant(cpu.PTR, None), 2)
    return b.insert_value(struct, ir.Constant(I64, 0), 3)


_KERNEL_HANDLERS: dict = {}


def _kernel_handler(*names):
    def wrap(fn):
        for n in names:
            _KERNEL_HANDLERS[n] = fn
        return fn

    return wrap


_SREG = {"gpu.thread_id": "tid", "gpu.block_id": "ctaid", "gpu.block_dim": "ntid", "gpu.grid_dim": "nctaid"}


@_kernel_handler(*_SREG)
def _special_register(self, b, op):
    name = f"llvm.nvvm.read.ptx.sreg.{_SREG[op.name]}.{op.dimension}"
    fn = self._declare(name, ir.FunctionType(I32, []))
    return b.zext(b.call(fn, []), I64)


@_kernel_handler("gpu.barrier")
def _barrier(self, b, op):
    b.call(self._declare("llvm.nvvm.barrier0", ir.FunctionType(ir.VoidType(), [])), [])


@_kernel_handler("gpu.shuffle")
def _shuffle(self, b, op):
    value, offset, width = (self.value(v) for v in op.operands)
    ty = value.type
    kind = {"xor": "bfly", "down": "down", "up": "up", "idx": "idx"}[op.mode]
    # The clamp operand: the segment mask (32 - width) << 8, and for all but 'up' the last lane 31.
    seg = b.shl(b.sub(ir.Constant(I32, 32), width), ir.Constant(I32, 8))
    clamp = seg if kind == "up" else b.or_(seg, ir.Constant(I32, 31))

    def shuffle32(x):
        suffix = "f32" if str(x.type) == "float" else "i32"
        ret = ir.LiteralStructType([x.type, cpu.I1])
        fn = self._declare(f"llvm.nvvm.shfl.sync.{kind}.{suffix}p", ir.FunctionType(ret, [I32, x.type, I32, I32]))
        pair = b.call(fn, [ir.Constant(I32, 0xFFFFFFFF), x, offset, clamp])
        return b.extract_value(pair, 0), b.extract_value(pair, 1)

    if str(ty) in ("float", "i32"):
        got, valid = shuffle32(value)
        return [got, valid]
    if str(ty) not in ("double", "i64"):
        raise TypeError(f"gpu.shuffle of {op.operands[0].type}")
    bits = b.bitcast(value, I64) if str(ty) == "double" else value  # two 32-bit halves
    low, valid = shuffle32(b.trunc(bits, I32))
    high, _ = shuffle32(b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32))
    joined = b.or_(b.zext(low, I64), b.shl(b.zext(high, I64), ir.Constant(I64, 32)))
    return [b.bitcast(joined, ty) if str(ty) == "double" else joined, valid]


@_kernel_handler("gpu.return")
def _return(self, b, op):
    b.ret_void()


@_kernel_handler("memref.load")
def _load(self, b, op):
    """The CPU's load, with the ``alignment`` (bytes) a pass may promise for the address: four
    adjacent loads whose first is 16-byte aligned become one ``ld.v4`` (LLVM's load-store
    vectoriser), which it cannot prove through the generic pointers of a kernel's buffers."""
    value = cpu._HANDLERS["memref.load"](self, b, op)
    align = op.attributes.get("alignment")
    if align is not None and isinstance(value, ir.LoadInstr):
        value.align = int(align.value)
    return value


@_kernel_handler("memref.alloca")
def _alloca(self, b, op):
    from irc.dialects.gpu import PRIVATE, WORKGROUP

    t = op.results[0].type
    if not t.has_static_shape:
        raise TypeError(f"a kernel's memref.alloca needs a static shape, not {t}")
    n = 1
    for d in t.shape:
        n *= d
    elem = cpu.llvm_type(t.element_type)
    array = ir.ArrayType(elem, max(n, 1))
    if t.memory_space == WORKGROUP:
        self.shared_count += 1
        g = ir.GlobalVariable(self.tr.module, array, name=f"{self.fn.name}.shared{self.shared_count}",
                              addrspace=SHARED)
        g.linkage = "internal"
        g.align = 16
        g.initializer = ir.Constant(array, ir.Undefined)
        first = b.gep(g, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)
        data = b.addrspacecast(first, ir.PointerType(elem))
    elif t.memory_space in (PRIVATE, None):
        with b.goto_block(self.frame_block):
            b.position_at_start(self.frame_block)
            slot = b.alloca(array)
        data = b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)
    else:
        raise TypeError(f"memref.alloca of {t} in a kernel")
    return _descriptor(b, t, data, [ir.Constant(I64, d) for d in t.shape])


def launch_bounds(kernel) -> list[tuple[str, int]]:
    """NVVM's launch-bound annotations of a kernel: ``maxntid{x,y,z}`` from MLIR's
    ``known_block_size`` (PTX ``.maxntid``), ``minctasm`` from ``nvvm.minctasm`` (PTX
    ``.minnctapersm``: blocks that must fit on one multiprocessor at once, which caps the
    registers ptxas gives a thread)."""
    out = []
    known = kernel.attributes.get("known_block_size")
    if known is not None:
        out += [(f"maxntid{d}", int(v.value)) for d, v in zip("xyz", known.elements)]
    blocks = kernel.attributes.get("nvvm.minctasm")
    if blocks is not None:
        out.append(("minctasm", int(blocks.value)))
    return out


def translate_kernels(gpu_module) -> ir.Module:
    """LLVM IR (an llvmlite module) for every kernel of ``gpu_module`` (CFG level: scf-to-cf first)."""
    mod = ir.Module(name=gpu_module.sym_name)
    mod.triple = TRIPLE
    mod.data_layout = DATA_LAYOUT
    tr = cpu.Translation(mod)
    annotations = mod.add_named_metadata("nvvm.annotations")
    for kernel in gpu_module.kernels:
        params = [p for t in kernel.function_type.inputs for p in kernel_param_types(t)]
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), params), name=kernel.sym_name)
        KernelTranslator(tr, kernel, fn).run()
        annotations.add(mod.add_metadata([fn, ir.MetaDataString(mod, "kernel"), ir.Constant(I32, 1)]))
        for key, value in launch_bounds(kernel):
            annotations.add(mod.add_metadata([fn, ir.MetaDataString(mod, key), ir.Constant(I32, value)]))
    return mod


def _init():
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


def target_machine(sm: int = 90, opt_level: int = 3):
    if sm not in PTX_VERSION:
        raise ValueError(f"sm_{sm} is not a supported GPU architecture (supported: "
                         f"{', '.join(f'sm_{s}' for s in SUPPORTED_SM)})")
    llvm = _init()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=f"sm_{sm}", features=f"+ptx{PTX_VERSION[sm]}", opt=opt_level)


def optimized_llvm(llvm_ir: str, sm: int = 90, opt_level: int = 3):
    """Parse, verify and optimise kernel LLVM IR for ``sm_<sm>`` (a ``llvmlite.binding`` module)."""
    llvm = _init()
    tm = target_machine(sm, opt_level)
    mod = llvm.parse_assembly(llvm_ir)
    mod.triple = TRIPLE
    mod.data_layout = str(tm.target_data)
    mod.verify()
    if opt_level > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    return mod


def emit_ptx(llvm_ir: str, sm: int = 90, opt_level: int = 3) -> str:
    """PTX text for kernel LLVM IR, for ``sm_<sm>``."""
    mod = optimized_llvm(llvm_ir, sm, opt_level)
    return target_machine(sm, opt_level).emit_assembly(mod)
