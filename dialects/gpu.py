"""The ``gpu`` dialect: kernels, launches, thread ids, barriers and explicit host <-> device copies.

Op names are MLIR's; where MLIR has a custom syntax irc's one grammar cannot read, the op
uses irc's uniform form with the same operands (docs/gpu.md shows both)::

    gpu.module {sym_name = "kernels"} ({
      gpu.func {sym_name = "k", function_type = (memref<64xf32, gpu>) -> (), kernel} ({
      ^bb0(%a: memref<64xf32, gpu>):
        %t = gpu.thread_id x
        ...
        gpu.return
      })
    })
    gpu.launch_func @k(%gx, %gy, %gz, %bx, %by, %bz, %d) {module = @kernels} : memref<64xf32, gpu>
    gpu.launch %gx, %gy, %gz, %bx, %by, %bz ({
    ^bb0(%bidx: index, %bidy: index, %bidz: index, %tidx: index, %tidy: index, %tidz: index,
         %gdx: index, %gdy: index, %gdz: index, %bdx: index, %bdy: index, %bdz: index):
      ...
      gpu.terminator
    })
    %d = gpu.alloc() : memref<64xf32, gpu>
    gpu.memcpy %d, %h : memref<64xf32, gpu>, memref<64xf32>
    gpu.dealloc %d : memref<64xf32, gpu>

Memory spaces (the memref type's last parameter): ``gpu`` is the device's global memory,
``workgroup`` memory shared by the threads of one block (a ``memref.alloca`` of it inside a
kernel is one buffer per block), ``private`` memory of one thread; no space is host memory.

The exclusive rule (design brief: "a function runs on one device; moving data between host
and GPU is an explicit op, never hidden"): a kernel touches no host memory, host code touches
no device memory, and only ``gpu.memcpy`` moves data between the two.  A program that breaks
it is rejected by the verifier at the op (``check_memory_space``, called by the memref ops).

The interpreter runs kernels by simulating the grid (``gpu_simulator.py``): blocks one after another,
and within a block every thread, each on its own Python thread when the kernel synchronises
(``gpu.barrier``, ``gpu.shuffle``) so that a barrier really waits for the whole block.
"""

from __future__ import annotations

from irc.dialects.func import FunctionLike

from irc.attributes import StringAttr, SymbolRefAttr, TypeAttr, UnitAttr
from irc.block import Block, Region
from irc.diagnostics import IRError
from irc.operation import HasRecursiveEffects, IsolatedFromAbove, Operation, ReturnLike, Terminator
from irc.types import (
    _SCALARS,
    FloatType,
    FunctionType,
    IndexType,
    IntegerType,
    MemRefType,
    Type,
    _intern,
    i1,
    index,
)

DEVICE = "gpu"
WORKGROUP = "workgroup"
PRIVATE = "private"
DEVICE_SPACES = frozenset({DEVICE, WORKGROUP, PRIVATE})
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
WARP_SIZE = 32  # (gpu_simulator.py has the same)

KERNEL_OPS = ("gpu.func", "gpu.launch")


class AsyncTokenType(Type):
    """``!gpu.async.token``: the completion of asynchronous device work (MLIR's type).

    An op with the ``async`` keyword returns one; ops and ``gpu.wait`` take tokens as
    dependencies.  Registered with the type parser when this dialect is imported."""

    __slots__ = ()

    def __new__(cls):
        return _intern(cls, None, "!gpu.async.token")


ASYNC_TOKEN = AsyncTokenType()
_SCALARS["!gpu.async.token"] = ASYNC_TOKEN


def is_token(t) -> bool:
    return t is ASYNC_TOKEN


def _leading_tokens(operands) -> int:
    n = 0
    for v in operands:
        if not is_token(v.type):
            break
        n += 1
    return n


def _check_async(op) -> None:
    n = op.num_deps
    if any(is_token(v.type) for v in op.operands[n:]):
        raise op.error("dependency tokens come first, before the other operands")
    if op.results and (len(op.results) != 1 or not is_token(op.results[0].type)):
        raise op.error("has no results, or one !gpu.async.token with 'async'")


def _async_args(ctx, syn):
    """(is async, token operands, the remaining argument items) of ``async, %t0, %t1, ...``."""
    args = list(syn.args)
    is_async = bool(args) and isinstance(args[0], tuple) and args[0][0] == "keyword" \
        and args[0][1].value == "async"
    if is_async:
        args = args[1:]
    return is_async, args  # the parser checks the result names against the result (one with async)


def _print_async(p, op) -> str:
    if not op.results and not op.num_deps:
        return ""
    items = (["async"] if op.results else []) + [p.value(v) for v in op.operands[:op.num_deps]]
    return " " + ", ".join(items) + ","


def is_device(t) -> bool:
    return isinstance(t, MemRefType) and t.memory_space in DEVICE_SPACES


def is_host(t) -> bool:
    return isinstance(t, MemRefType) and t.memory_space is None


def enclosing_kernel(op) -> Operation | None:
    """The ``gpu.func`` or ``gpu.launch`` that ``op`` is inside, if any."""
    for parent in op.ancestors():
        name = parent.name
        if name in KERNEL_OPS:
            return parent
        if name == "func.func":  # a host function (a gpu.launch inside one was seen on the way)
            return None
    return None


def check_memory_space(op, memref_value) -> None:
    """The exclusive rule for an op that reads or writes the buffer ``memref_value``.

    Called by the verifiers of the memref ops: inside a kernel only device memory, outside only
    host memory.  A mistake is an error at the op, never a silent transfer."""
    t = memref_value.type
    if not isinstance(t, MemRefType):
        return
    space = t.memory_space
    if space is not None and space not in DEVICE_SPACES:
        raise op.error(f"unknown memory space '{space}' (known: gpu, workgroup, private, or none for host)")
    in_kernel = enclosing_kernel(op) is not None
    if in_kernel and space is None:
        raise op.error(f"a kernel touches host memory ({t}): copy it to the device with gpu.memcpy first")
    if not in_kernel and space is not None:
        raise op.error(f"host code touches device memory ({t}) outside a kernel: copy it to the host "
                       "with gpu.memcpy first")


DIMENSIONS = ("x", "y", "z")


def _keyword(syn, k: int, allowed) -> str:
    if len(syn.args) <= k or not isinstance(syn.args[k], tuple) or syn.args[k][0] != "keyword":
        raise IRError(f"'{syn.name}' expects one of {', '.join(allowed)} here", syn.loc)
    word = syn.args[k][1].value
    if word not in allowed:
        raise IRError(f"'{syn.name}' expects one of {', '.join(allowed)}, got '{word}'", syn.loc)
    return word


def _value_args(ctx, syn, types) -> list:
    toks = [a for a in syn.args if not isinstance(a, tuple)]
    if len(toks) != len(types):
        raise IRError(f"'{syn.name}' expects {len(types)} operands, got {len(toks)}", syn.loc)
    return [ctx.value(tok, t) for tok, t in zip(toks, types)]


# -- kernels and modules -----------------------------------------------------------------


class ModuleEndOp(Operation):
    """Ends a ``gpu.module``'s block; the printer leaves it out and the parser adds it."""

    name = "gpu.module_end"
    traits = frozenset({Terminator})
    summary = "End the body of a gpu.module (implicit in the text)."
    example = "gpu.module_end"

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return cls()

    def print_custom(self, p) -> None:
        pass


class GPUModuleOp(Operation):
    """``gpu.module {sym_name = "kernels"} ({ gpu.func ... })``: the kernels of a program, one
    symbol table apart from the host functions (what the NVPTX renderer turns into one PTX module)."""

    name = "gpu.module"
    traits = frozenset({IsolatedFromAbove})
    summary = "A module of device code: the kernels one PTX module holds."
    example = 'gpu.module {sym_name = "kernels"} ({ })'

    @property
    def sym_name(self) -> str:
        return self.attributes["sym_name"].value

    @property
    def body(self) -> Block:
        return self.regions[0].entry

    def lookup(self, name: str):
        from irc.module import symbol_in

        return symbol_in(self.body, name)

    @property
    def kernels(self) -> list:
        return [op for op in self.body.ops if op.name == "gpu.func"]

    def verify_op(self) -> None:
        if not isinstance(self.attributes.get("sym_name"), StringAttr):
            raise self.error("needs a sym_name")
        if len(self.regions) != 1 or self.regions[0].first_block is not self.regions[0].last_block:
            raise self.error("has one region of one block")
        if self.parent_op is None or self.parent_op.name != "builtin.module":
            raise self.error("must be at the top level of a module")
        for op in self.body.ops:
            if op.name not in ("gpu.func", "gpu.module_end"):
                raise op.error("a gpu.module holds gpu.func ops only")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.regions) != 1 or syn.args:
            raise IRError("'gpu.module' expects '{sym_name = \"NAME\"} ({ ... })'", syn.loc)
        region = syn.regions[0]
        if region.is_empty:
            region.append(Block())
        if region.entry.terminator is None:
            region.entry.append(ModuleEndOp(loc=syn.loc))
        return cls(attributes=syn.attrs, regions=[region])

    def print_custom(self, p) -> None:
        p.write(p.attr_dict(self.attributes) + " (")
        end = self.body.terminator
        if isinstance(end, ModuleEndOp) and not end.attributes:
            self.body.remove(end)  # implicit in the text, as MLIR leaves it out
            try:
                p.region(self.regions[0])
            finally:
                self.body.append(end)
        else:
            p.region(self.regions[0])
        p.write(")")

    @classmethod
    def build(cls, name: str) -> GPUModuleOp:
        block = Block()
        block.append(ModuleEndOp())
        return cls(attributes={"sym_name": StringAttr(name)}, regions=[Region([block])])


class GPUFuncOp(FunctionLike, Operation):
    """``gpu.func {sym_name, function_type, kernel} ({ ^bb0(params): ... gpu.return })``.

    A kernel (the ``kernel`` unit attribute) returns nothing and takes device memrefs and
    scalars; its body runs once per thread of the launch grid."""

    name = "gpu.func"
    traits = frozenset({IsolatedFromAbove})
    summary = "A device function; with the 'kernel' attribute, an entry point gpu.launch_func runs."
    example = ('gpu.module {sym_name = "kernels"} ({ gpu.func {sym_name = "k", function_type = '
               '(memref<4xf32, gpu>) -> (), kernel} ({ ^bb0(%a: memref<4xf32, gpu>): gpu.return }) })')


    def verify_op(self) -> None:
        if not isinstance(self.attributes.get("sym_name"), StringAttr):
            raise self.error("needs a sym_name")
        ft = self.attributes.get("function_type")
        if not isinstance(ft, TypeAttr) or not isinstance(ft.type, FunctionType):
            raise self.error("needs a function_type")
        if self.parent_op is None or self.parent_op.name != "gpu.module":
            raise self.error("must be inside a gpu.module")
        if len(self.regions) != 1 or self.regions[0].is_empty:
            raise self.error("needs a body")
        types = [a.type for a in self.regions[0].entry.args]
        if types != list(ft.type.inputs):
            raise self.error(f"entry block arguments do not match the signature {ft.type}")
        if "kernel" in self.attributes and ft.type.results:
            raise self.error("a kernel returns nothing")
        for t in ft.type.inputs:
            if is_host(t):
                raise self.error(f"a kernel touches host memory: parameter of type {t}; pass a gpu.alloc buffer "
                                 f"(memref<..., gpu>)")
            if isinstance(t, MemRefType) and t.memory_space != DEVICE:
                raise self.error(f"kernel parameters are global device memory (memref<..., gpu>), not {t}")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.regions) != 1 or syn.args:
            raise IRError("'gpu.func' expects '{sym_name = ..., function_type = ...} ({ ^bb0(...): ... })'",
                          syn.loc)
        return cls(attributes=syn.attrs, regions=[syn.regions[0]])

    def print_custom(self, p) -> None:
        p.write(p.attr_dict(self.attributes) + " (")
        p.region(self.regions[0], print_entry_args=True)
        p.write(")")

    @classmethod
    def build(cls, name: str, type: FunctionType, kernel: bool = True) -> GPUFuncOp:
        attrs = {"sym_name": StringAttr(name), "function_type": TypeAttr(type)}
        if kernel:
            attrs["kernel"] = UnitAttr()
        return cls(attributes=attrs, regions=[Region([Block(type.inputs)])])


class ReturnOp(Operation):
    """``gpu.return``: ends a ``gpu.func`` (a kernel returns no values)."""

    name = "gpu.return"
    traits = frozenset({Terminator, ReturnLike})
    summary = "Return from a gpu.func."
    example = "gpu.return"

    def verify_op(self) -> None:
        if not isinstance(self.parent_op, GPUFuncOp):
            raise self.error("must end a gpu.func")
        if self.operand_types != list(self.parent_op.function_type.results):
            raise self.error("returns values the gpu.func does not declare")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if syn.args:
            raise IRError("'gpu.return' of values is not supported (kernels return nothing)", syn.loc)
        return cls()

    def print_custom(self, p) -> None:
        pass


class TerminatorOp(Operation):
    """``gpu.terminator``: ends the region of a ``gpu.launch``."""

    name = "gpu.terminator"
    traits = frozenset({Terminator, ReturnLike})
    summary = "End the body of a gpu.launch."
    example = "gpu.terminator"

    def verify_op(self) -> None:
        if not isinstance(self.parent_op, LaunchOp):
            raise self.error("must end the region of a gpu.launch")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return cls()

    def print_custom(self, p) -> None:
        pass


def _check_grid(op, operands) -> None:
    for v in operands[:6]:
        if not isinstance(v.type, IndexType):
            raise op.error(f"grid and block sizes are index values, got {v.type}")


def _launch_sizes(interp, op, args) -> tuple[tuple, tuple]:
    grid, block = tuple(int(a) for a in args[:3]), tuple(int(a) for a in args[3:6])
    for what, sizes, limits in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        for d, (n, limit) in enumerate(zip(sizes, limits)):
            if not 1 <= n <= limit:
                raise interp.fault(op, f"{what} size {DIMENSIONS[d]} = {n} is outside what a device runs "
                                       f"(1 to {limit})")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise interp.fault(op, f"a block of {threads} threads is more than a device runs "
                               f"({MAX_THREADS_PER_BLOCK})")
    return grid, block


class LaunchFuncOp(Operation):
    """``gpu.launch_func @k(%gx, %gy, %gz, %bx, %by, %bz, ARGS) {module = @kernels} : ARG TYPES``.

    Runs kernel ``@k`` of ``gpu.module @kernels`` on a grid of gx*gy*gz blocks of bx*by*bz
    threads.  Memref arguments must be device memory (the exclusive rule).  With
    ``async, %t0, ...`` first (``%t = gpu.launch_func async, %t0, @k(...)``) it waits for the
    tokens ``%t0...``, returns a token and does not wait for the kernel to finish."""

    name = "gpu.launch_func"
    summary = "Launch a kernel of a gpu.module on a grid of blocks of threads."
    example = "gpu.launch_func @k(%n, %n, %n, %n, %n, %n, %x) {module = @kernels} : f32"

    @property
    def num_deps(self) -> int:
        return _leading_tokens(self.operands)

    @property
    def kernel_name(self) -> str:
        return self.attributes["kernel"].name

    @property
    def module_name(self) -> str:
        return self.attributes["module"].name

    @property
    def sizes(self):
        n = self.num_deps
        return self.operands[n:n + 6]

    @property
    def kernel_args(self):
        return self.operands[self.num_deps + 6:]

    def kernel(self, symbols):
        mod = symbols.get(self.module_name)
        return mod.lookup(self.kernel_name) if isinstance(mod, GPUModuleOp) else None

    def verify_op(self) -> None:
        _check_async(self)
        if len(self.operands) - self.num_deps < 6:
            raise self.error("needs grid sizes (3), block sizes (3), then the kernel's arguments")
        _check_grid(self, self.sizes)
        for k in ("kernel", "module"):
            if not isinstance(self.attributes.get(k), SymbolRefAttr):
                raise self.error(f"needs the symbol attribute '{k}'")
        for v in self.kernel_args:
            if is_host(v.type):
                raise self.error(f"passes host memory ({v.type}) to a kernel: copy it with gpu.memcpy to a "
                                 "gpu.alloc buffer")
        if enclosing_kernel(self) is not None:
            raise self.error("launches a kernel from device code")
        module = self.parent_op
        while module is not None and module.name != "builtin.module":
            module = module.parent_op
        if module is None or module.lookup(self.module_name) is None:
            return  # a module without the gpu.module yet (an op being built, an example): checked at run time
        kernel = self.kernel(module.symbol_table())
        if kernel is None:
            raise self.error(f"launches '@{self.module_name}::@{self.kernel_name}', which is not a gpu.func")
        if "kernel" not in kernel.attributes:
            raise self.error(f"'@{self.kernel_name}' is not a kernel")
        if list(kernel.function_type.inputs) != [v.type for v in self.kernel_args]:
            raise self.error(f"passes ({', '.join(str(v.type) for v in self.kernel_args)}) to '@{self.kernel_name}' "
                             f"of type {kernel.function_type}")

    def interpret(self, interp, args):
        kernel = self.kernel(interp.symbols)
        if kernel is None:
            raise interp.fault(self, f"no kernel '@{self.module_name}::@{self.kernel_name}' in the module")
        n = self.num_deps
        grid, block = _launch_sizes(interp, self, args[n:n + 6])
        kernel_args = list(args[n + 6:])
        return device_of(interp).run(interp, self, args[:n], lambda: device_of(interp).launch(
            interp, self, kernel.body, grid, block, kernel_args))

    @classmethod
    def parse_uniform(cls, ctx, syn):
        is_async, args = _async_args(ctx, syn)
        if not args or not isinstance(args[-1], tuple) or args[-1][0] != "callee":
            raise IRError("'gpu.launch_func' expects '[async, %tokens...,] @kernel(%gx, %gy, %gz, %bx, %by, %bz, "
                          "args...) {module = @m} : arg types'", syn.loc)
        deps = [ctx.value(tok, ASYNC_TOKEN) for tok in args[:-1]]
        _, sym, toks = args[-1]
        types = syn.plain_types("argument types") if syn.sig is not None else []
        if len(toks) != 6 + len(types):
            raise IRError(f"'gpu.launch_func' has {len(toks) - 6} kernel arguments but lists {len(types)} types",
                          syn.loc)
        operands = deps + [ctx.value(t, index) for t in toks[:6]] + ctx.values(toks[6:], types)
        attrs = dict(syn.attrs)
        attrs["kernel"] = SymbolRefAttr(sym.value[1:])
        return cls(operands, [ASYNC_TOKEN] if is_async else [], attrs)

    def print_custom(self, p) -> None:
        attrs = {k: v for k, v in self.attributes.items() if k != "kernel"}
        n = self.num_deps
        p.write(f"{_print_async(p, self)} @{self.kernel_name}({p.values(self.operands[n:])}){p.attr_dict(attrs)}")
        if self.kernel_args:
            p.write(f" : {p.types(v.type for v in self.kernel_args)}")

    @classmethod
    def build(cls, module: str, kernel: str, grid, block, args, deps=None):
        """``deps``: None for a synchronous launch, else the tokens an async launch waits for."""
        return cls([*(deps or []), *grid, *block, *args], [] if deps is None else [ASYNC_TOKEN],
                   {"kernel": SymbolRefAttr(kernel), "module": SymbolRefAttr(module)})


class LaunchOp(Operation):
    """``gpu.launch %gx, %gy, %gz, %bx, %by, %bz ({ ^bb0(12 index ids): ... gpu.terminator })``.

    MLIR's launch with its region inline: the entry block's twelve arguments are the block
    ids, thread ids, grid sizes and block sizes (x, y, z each).  The body may use values of
    the enclosing function (scalars and device memrefs); kernel outlining (``gpu-outline``)
    makes them kernel parameters."""

    name = "gpu.launch"
    traits = frozenset({HasRecursiveEffects})
    summary = "Run a region on a grid of blocks of threads (outlined into a kernel by gpu-outline)."
    example = 'gpu.launch %n, %n, %n, %n, %n, %n ({ ^bb0(%bx: index, %by: index, %bz: index, %tx: index, %ty: index, %tz: index, %gx: index, %gy: index, %gz: index, %sx: index, %sy: index, %sz: index):  gpu.terminator })'

    @property
    def body(self) -> Region:
        return self.regions[0]

    def verify_op(self) -> None:
        if len(self.operands) != 6 or len(self.regions) != 1 or self.regions[0].is_empty:
            raise self.error("needs grid sizes (3), block sizes (3) and a body")
        _check_grid(self, self.operands)
        args = self.regions[0].entry.args
        if len(args) != 12 or any(not isinstance(a.type, IndexType) for a in args):
            raise self.error("its body takes twelve index arguments (block ids, thread ids, grid and block sizes)")
        if enclosing_kernel(self) is not None:
            raise self.error("launches a kernel from device code")

    def interpret(self, interp, args):
        grid, block = _launch_sizes(interp, self, args)
        device_of(interp).launch(interp, self, self.body, grid, block, None)
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.regions) != 1:
            raise IRError("'gpu.launch' expects six sizes and a region", syn.loc)
        operands = _value_args(ctx, syn, [index] * 6)
        return cls(operands, [], syn.attrs, regions=[syn.regions[0]])

    def print_custom(self, p) -> None:
        p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} (")
        p.region(self.regions[0], print_entry_args=True)
        p.write(")")

    @classmethod
    def build(cls, grid, block) -> LaunchOp:
        return cls([*grid, *block], [], regions=[Region([Block([index] * 12)])])


# -- ids, barriers, shuffles ------------------------------------------------------------------


class _IdOp(Operation):
    """``%i = gpu.thread_id x``: one dimension keyword, one index result."""

    traits = frozenset()
    kind = ""

    @property
    def dimension(self) -> str:
        return self.attributes["dimension"].value

    def verify_op(self) -> None:
        if self.attributes.get("dimension") not in [StringAttr(d) for d in DIMENSIONS]:
            raise self.error("needs a dimension x, y or z")
        if len(self.results) != 1 or not isinstance(self.results[0].type, IndexType):
            raise self.error("has one index result")
        if enclosing_kernel(self) is None:
            raise self.error("is device code: it must be inside a gpu.func or gpu.launch")

    def interpret(self, interp, args):
        return [getattr(thread_of(interp, self), self.kind)[DIMENSIONS.index(self.dimension)]]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        dim = _keyword(syn, 0, DIMENSIONS)
        return cls([], [index], {**syn.attrs, "dimension": StringAttr(dim)})

    def print_custom(self, p) -> None:
        attrs = {k: v for k, v in self.attributes.items() if k != "dimension"}
        p.write(f" {self.dimension}{p.attr_dict(attrs)}")

    @classmethod
    def build(cls, dimension: str = "x"):
        return cls([], [index], {"dimension": StringAttr(dimension)})


class ThreadIdOp(_IdOp):
    name = "gpu.thread_id"
    kind = "thread_id"
    summary = "The thread's index in its block along x, y or z."
    example = 'gpu.launch %n, %n, %n, %n, %n, %n ({ ^bb0(%bx: index, %by: index, %bz: index, %tx: index, %ty: index, %tz: index, %gx: index, %gy: index, %gz: index, %sx: index, %sy: index, %sz: index): %r = gpu.thread_id x gpu.terminator })'


class BlockIdOp(_IdOp):
    name = "gpu.block_id"
    kind = "block_id"
    summary = "The block's index in the grid along x, y or z."
    example = 'gpu.launch %n, %n, %n, %n, %n, %n ({ ^bb0(%bx: index, %by: index, %bz: index, %tx: index, %ty: index, %tz: index, %gx: index, %gy: index, %gz: index, %sx: index, %sy: index, %sz: index): %r = gpu.block_id x gpu.terminator })'


class BlockDimOp(_IdOp):
    name = "gpu.block_dim"
    kind = "block_dim"
    summary = "The number of threads of a block along x, y or z."
    example = 'gpu.launch %n, %n, %n, %n, %n, %n ({ ^bb0(%bx: index, %by: index, %bz: index, %tx: index, %ty: index, %tz: index, %gx: index, %gy: index, %gz: index, %sx: index, %sy: index, %sz: index): %r = gpu.block_dim y gpu.terminator })'


class GridDimOp(_IdOp):
    name = "gpu.grid_dim"
    kind = "grid_dim"
    summary = "The number of blocks of the grid along x, y or z."
    example = 'gpu.launch %n, %n, %n, %n, %n, %n ({ ^bb0(%bx: index, %by: index, %bz: index, %tx: index, %ty: index, %tz: index, %gx: index, %gy: index, %gz: index, %sx: index, %sy: index, %sz: index): %r = gpu.grid_dim z gpu.terminator })'


class BarrierOp(Operation):
    """``gpu.barrier``: every thread of the block waits until all have reached it; their
    workgroup memory writes before it are seen by all after it.  A barrier that some threads
    of a block skip is an error (the simulator reports it; hardware would hang or misbehave)."""

    name = "gpu.barrier"
    summary = "Wait for every thread of the block (and make workgroup memory writes visible)."
    example = 'gpu.launch %n, %n, %n, %n, %n, %n ({ ^bb0(%bx: index, %by: index, %bz: index, %tx: index, %ty: index, %tz: index, %gx: index, %gy: index, %gz: index, %sx: index, %sy: index, %sz: index): gpu.barrier gpu.terminator })'

    def verify_op(self) -> None:
        if enclosing_kernel(self) is None:
            raise self.error("is device code: it must be inside a gpu.func or gpu.launch")

    def interpret(self, interp, args):
        thread_of(interp, self).barrier(interp, self)
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return cls([], [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(p.attr_dict(self.attributes))


SHUFFLE_MODES = ("xor", "down", "up", "idx")


class ShuffleOp(Operation):
    """``%r, %valid = gpu.shuffle xor, %value, %offset, %width : f32`` (MLIR writes no comma
    after the mode; irc's uniform form needs it, as in ``arith.cmpi slt, %a, %b``).

    Threads of a warp (32 consecutive threads of the block) exchange values: lane ``l`` reads
    the value of lane ``l ^ offset`` (xor), ``l + offset`` (down), ``l - offset`` (up) or
    ``offset`` (idx); where that lane is outside ``[0, width)`` it keeps its own value and
    ``%valid`` is false.  ``offset`` and ``width`` are i32, as in MLIR; every lane of the warp
    must take part."""

    name = "gpu.shuffle"
    summary = "Exchange a value between the lanes of a warp (xor, down, up or idx)."
    example = 'gpu.launch %n, %n, %n, %n, %n, %n ({ ^bb0(%bx: index, %by: index, %bz: index, %tx: index, %ty: index, %tz: index, %gx: index, %gy: index, %gz: index, %sx: index, %sy: index, %sz: index): %r, %ok = gpu.shuffle xor, %x, %w, %w : f32 gpu.terminator })'

    @property
    def mode(self) -> str:
        return self.attributes["mode"].value

    def verify_op(self) -> None:
        if self.attributes.get("mode") not in [StringAttr(m) for m in SHUFFLE_MODES]:
            raise self.error("needs a mode: xor, down, up or idx")
        if len(self.operands) != 3 or len(self.results) != 2:
            raise self.error("takes a value, an offset and a width; has two results")
        t = self.operands[0].type
        if not isinstance(t, (FloatType, IntegerType)) or t.width not in (32, 64):
            raise self.error(f"shuffles 32- or 64-bit integers and floats, not {t}")
        if [v.type for v in self.operands[1:]] != [IntegerType(32)] * 2:
            raise self.error("offset and width are i32")
        if self.result_types != [t, i1]:
            raise self.error(f"results are the value ({t}) and i1")
        if enclosing_kernel(self) is None:
            raise self.error("is device code: it must be inside a gpu.func or gpu.launch")

    def interpret(self, interp, args):
        return thread_of(interp, self).shuffle(interp, self, *args)

    @classmethod
    def parse_uniform(cls, ctx, syn):
        mode = _keyword(syn, 0, SHUFFLE_MODES)
        t = syn.single_type()
        i32 = IntegerType(32)
        operands = _value_args(ctx, syn, [t, i32, i32])
        return cls(operands, [t, i1], {**syn.attrs, "mode": StringAttr(mode)})

    def print_custom(self, p) -> None:
        attrs = {k: v for k, v in self.attributes.items() if k != "mode"}
        p.write(f" {self.mode}, {p.values(self.operands)}{p.attr_dict(attrs)} : {self.operands[0].type}")

    @classmethod
    def build(cls, mode: str, value, offset, width):
        return cls([value, offset, width], [value.type, i1], {"mode": StringAttr(mode)})


# -- device memory -----------------------------------------------------------------------------


class AllocOp(Operation):
    """``%d = gpu.alloc(%n) : memref<?xf32, gpu>``: device memory, one index per ``?``; host code."""

    name = "gpu.alloc"
    summary = "Allocate global device memory (host code); freed by gpu.dealloc."
    example = "%r = gpu.alloc(%n) : memref<?xf32, gpu>"

    def verify_op(self) -> None:
        if len(self.results) != 1 or not isinstance(self.results[0].type, MemRefType):
            raise self.error("has one memref result")
        t = self.results[0].type
        if t.memory_space != DEVICE:
            raise self.error(f"allocates global device memory (memref<..., gpu>), not {t}")
        dynamic = sum(d is None for d in t.shape)
        if len(self.operands) != dynamic or any(not isinstance(v.type, IndexType) for v in self.operands):
            raise self.error(f"needs {dynamic} index size operand(s) for {t}")
        if enclosing_kernel(self) is not None:
            raise self.error("is host code: it cannot run inside a kernel")

    def interpret(self, interp, args):
        t = self.results[0].type
        sizes = iter(args)
        shape = tuple(int(next(sizes)) if d is None else d for d in t.shape)
        if any(s < 0 for s in shape):
            raise interp.fault(self, "negative buffer size")
        return [device_of(interp).alloc(interp, self, shape, t)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        from . import memref

        return memref.AllocOp.parse_uniform.__func__(cls, ctx, syn)

    def print_custom(self, p) -> None:
        p.write(f"({p.values(self.operands)}){p.attr_dict(self.attributes)} : {self.results[0].type}")

    @classmethod
    def build(cls, type: MemRefType, sizes=()):
        return cls(list(sizes), [type])


class DeallocOp(Operation):
    """``gpu.dealloc %d : memref<..., gpu>``: free device memory from gpu.alloc (host code)."""

    name = "gpu.dealloc"
    summary = "Free device memory that gpu.alloc allocated."
    example = "%d = gpu.alloc() : memref<4xf32, gpu> gpu.dealloc %d : memref<4xf32, gpu>"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or not isinstance(self.operands[0].type, MemRefType) \
                or self.operands[0].type.memory_space != DEVICE:
            raise self.error("takes one global device memref")
        if enclosing_kernel(self) is not None:
            raise self.error("is host code: it cannot run inside a kernel")

    def interpret(self, interp, args):
        device_of(interp).dealloc(interp, self, args[0])
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = syn.single_type()
        return cls(_value_args(ctx, syn, [t]), [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : {self.operands[0].type}")


class MemcpyOp(Operation):
    """``gpu.memcpy %dst, %src : memref<..., gpu>, memref<...>``: the one way data crosses
    between host and device (either direction, or device to device); same shape and element
    type.  Host code only.  ``%t = gpu.memcpy async, %t0, %dst, %src : ...`` waits for the
    tokens, returns one and does not wait for the copy."""

    name = "gpu.memcpy"
    summary = "Copy a buffer between host and device memory (the only op that crosses)."
    example = "%d = gpu.alloc(%n) : memref<?xi64, gpu> gpu.memcpy %d, %m : memref<?xi64, gpu>, memref<?xi64>"

    @property
    def num_deps(self) -> int:
        return _leading_tokens(self.operands)

    @property
    def target(self):
        return self.operands[-2]

    @property
    def source(self):
        return self.operands[-1]

    def verify_op(self) -> None:
        _check_async(self)
        if len(self.operands) - self.num_deps != 2:
            raise self.error("takes a destination and a source")
        dst, src = self.target.type, self.source.type
        if not isinstance(dst, MemRefType) or not isinstance(src, MemRefType):
            raise self.error("copies memrefs")
        if dst.shape != src.shape or dst.element_type is not src.element_type:
            raise self.error(f"copies between buffers of one shape and element type, not {src} to {dst}")
        if dst.memory_space != DEVICE and src.memory_space != DEVICE:
            raise self.error("copies host to host: use memref.copy")
        for t in (dst, src):
            if t.memory_space not in (None, DEVICE):
                raise self.error(f"copies global device memory, not {t}")
        if enclosing_kernel(self) is not None:
            raise self.error("is host code: it cannot run inside a kernel")

    def interpret(self, interp, args):
        dst, src = args[-2:]

        def copy():
            if dst.freed or src.freed:
                raise interp.fault(self, "access to a freed buffer")
            if dst.array.shape != src.array.shape:
                raise interp.fault(self, f"copies a buffer of shape {list(src.array.shape)} to one of shape "
                                         f"{list(dst.array.shape)}")
            device_of(interp).memcpy(interp, self, dst, src)

        return device_of(interp).run(interp, self, args[:self.num_deps], copy)

    @classmethod
    def parse_uniform(cls, ctx, syn):
        is_async, args = _async_args(ctx, syn)
        types = syn.plain_types("destination and source types")
        if len(types) != 2 or len(args) < 2 or any(isinstance(a, tuple) for a in args):
            raise IRError("'gpu.memcpy' expects '[async, %tokens...,] %dst, %src : DST TYPE, SRC TYPE'", syn.loc)
        deps = [ctx.value(tok, ASYNC_TOKEN) for tok in args[:-2]]
        return cls(deps + ctx.values(args[-2:], types), [ASYNC_TOKEN] if is_async else [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f"{_print_async(p, self)} {p.values(self.operands[self.num_deps:])}{p.attr_dict(self.attributes)} : "
                f"{p.types(v.type for v in self.operands[self.num_deps:])}")

    @classmethod
    def build(cls, dst, src, deps=None):
        return cls([*(deps or []), dst, src], [] if deps is None else [ASYNC_TOKEN])


class WaitOp(Operation):
    """``gpu.wait`` waits for all device work; ``gpu.wait %t0, %t1`` for those tokens' work;
    ``%t = gpu.wait async, %t0, %t1`` waits for nothing itself and returns a token that
    completes when they all have (a join, as MLIR's ``gpu.wait async [...]``)."""

    name = "gpu.wait"
    summary = "Wait for device work: all of it, or that of the given tokens (async: join them)."
    example = "gpu.wait"

    @property
    def num_deps(self) -> int:
        return len(self.operands)

    def verify_op(self) -> None:
        _check_async(self)
        if enclosing_kernel(self) is not None:
            raise self.error("is host code: it cannot run inside a kernel")

    def interpret(self, interp, args):
        device = device_of(interp)
        if self.results:
            return device.run(interp, self, args, lambda: None)
        device.wait(interp, self, args if args else None)
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        is_async, args = _async_args(ctx, syn)
        if any(isinstance(a, tuple) for a in args):
            raise IRError("'gpu.wait' expects '[async,] %tokens...'", syn.loc)
        return cls([ctx.value(tok, ASYNC_TOKEN) for tok in args], [ASYNC_TOKEN] if is_async else [], syn.attrs)

    def print_custom(self, p) -> None:
        items = (["async"] if self.results else []) + [p.value(v) for v in self.operands]
        p.write((" " + ", ".join(items) if items else "") + p.attr_dict(self.attributes))


# The interpreter's side of the ops above lives in gpu_simulator.py.
from .gpu_simulator import (  # noqa: E402, F401 - after the ops; re-exported for the ops and memref
    SIMULATOR,
    AsyncToken,
    Simulator,
    device_of,
    thread_of,
    workgroup_buffer,
)
