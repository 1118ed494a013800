"""gpu-map-parallel: run a function's loop nests on the device, as ``gpu.launch`` ops.

At the top level of each function over memrefs (what ``tensor-to-loops`` makes):

* an ``scf.for`` marked ``parallel`` (its iterations write disjoint elements) becomes a launch
  of one thread per iteration, ``block-size`` threads per block: thread ``t`` of block ``b``
  runs iteration ``lb + (b * block-size + t) * step`` when that is below ``ub``;
* a ``parallel`` loop whose body is exactly one more ``parallel`` loop with constant bounds
  (an elementwise nest) maps both loops, flattened, to the threads;
* a matmul nest (``parallel`` loops over the rows and columns of C around one accumulator loop
  of ``a[i, k] * b[k, j]``, either operand possibly transposed) becomes a register-tiled kernel
  in the manner of the classic SGEMM kernels: ``tile`` x ``tile`` threads per block, each
  holding up to ``thread-tile`` x ``thread-tile`` elements of C in registers (fewer while the
  grid would have fewer than ``min-blocks`` blocks); each step of ``k-tile`` stages a tile of
  A and of B in workgroup memory (zeros past the edges, two buffers), the next step's elements
  are loaded into registers during this step's products (``math.fma``), and the kernel asks
  for two blocks per multiprocessor (``nvvm.minctasm``, a register budget);
* a ``parallel`` loop whose body holds inner loops that are reductions (one accumulator, one
  combining op: a sum, max, min...) or ``parallel`` themselves (a row of a softmax, a row
  reduction) runs one block per iteration (``row-block-size`` threads): a ``parallel`` inner
  loop is strided over the block's threads, a reduction is strided too and then combined by a
  tree in workgroup (shared) memory with ``gpu.barrier`` between its levels down to one warp,
  whose lanes finish it with ``gpu.shuffle xor`` (a one-warp block needs only the shuffles);
  stores at the row's top level are made by thread 0, and a barrier follows each phase;
* other ops that read or write buffers (a serial reduction loop, a copy, a single store) run
  as one thread of a one-block launch, grouped so that consecutive ones share a launch;
* allocation, deallocation, constants and index arithmetic stay on the host.

It is device-independent (no device limits beyond the block size), and the result runs on the
interpreter, which simulates the grid.  Run ``gpu-host-copies`` next: the launches still read
host buffers until it gives them device copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from irc.attributes import IntegerAttr, TypeAttr
from irc.builder import Builder
from irc.diagnostics import IRError
from irc.passmanager import Pass
from irc.types import MemRefType, i32, i64

from .gpu_memory import give_device_buffers, restore_tensor_signature

_HOST_OPS = frozenset({"memref.alloc", "memref.dealloc", "memref.dim", "arith.constant", "func.return",
                       "gpu.alloc", "gpu.dealloc", "gpu.memcpy", "gpu.launch", "gpu.launch_func", "gpu.wait",
                       "bufferization.to_memref", "bufferization.to_tensor"})
_ENDS_GROUP = frozenset({"memref.alloc", "memref.dealloc", "func.return", "gpu.alloc", "gpu.dealloc",
                         "gpu.memcpy", "gpu.launch", "gpu.launch_func", "gpu.wait", "func.call"})


def touches_memory(op) -> bool:
    """Whether ``op`` (or an op nested in it) reads or writes a buffer's elements."""
    for inner in op.walk():
        if inner.name in ("memref.load", "memref.store", "memref.copy", "func.call"):
            return True
    return False


def _depends_on(op, members: set) -> bool:
    """Whether ``op`` or an op nested in it uses a result of one of ``members``."""
    return any(v.defining_op in members for inner in op.walk() for v in inner.operands)


def _constant_index(value):
    from irc.patterns import constant_value

    attr = constant_value(value)
    return attr.value if isinstance(attr, IntegerAttr) else None


def _flattenable(loop):
    """The inner loop of a two-deep parallel nest that can share the threads with ``loop``."""
    body = loop.body
    first = body.first_op
    if first is None or first.name != "scf.for" or first.next is not body.terminator:
        return None
    if "parallel" not in first.attributes or first.results:
        return None
    if _constant_index(first.lower_bound) != 0 or _constant_index(first.step) != 1:
        return None
    if any(v.defining_op is not None and loop.is_ancestor_of(v.defining_op) for v in first.operands[:3]):
        return None
    return first


@dataclass
class GPUMapParallel(Pass):
    """Map parallel loop nests to gpu.launch grids, and other buffer work to one-thread launches."""

    name = "gpu-map-parallel"
    block_size: int = 256  # threads per block of a parallel loop's launch
    row_block_size: int = 256  # threads per block of a block-per-row launch (a power of two)
    tile: int = 16  # a matmul nest's block: tile x tile threads; 0: no tiled kernel
    thread_tile: int = 8  # at most thread-tile x thread-tile outputs of C per thread (registers)
    k_tile: int = 8  # the depth of A's and B's tiles staged in workgroup memory per step
    min_blocks: int = 128  # smaller per-thread tiles while a matmul's grid has fewer blocks (0: off)

    def run(self, module, stats) -> None:
        if self.block_size < 1 or self.block_size > 1024:
            raise IRError(f"gpu-map-parallel: block-size must be 1 to 1024, got {self.block_size}")
        if self.tile < 0 or self.tile * self.tile > 1024:
            raise IRError(f"gpu-map-parallel: tile must be 0 to 32, got {self.tile}")
        if not 1 <= self.thread_tile <= 16 or not 1 <= self.k_tile <= 64:
            raise IRError(f"gpu-map-parallel: thread-tile must be 1 to 16 and k-tile 1 to 64, got "
                          f"{self.thread_tile} and {self.k_tile}")
        if not 1 <= self.row_block_size <= 1024 or self.row_block_size & (self.row_block_size - 1):
            raise IRError(f"gpu-map-parallel: row-block-size must be a power of two up to 1024, got "
                          f"{self.row_block_size}")
        for func in list(module.functions):
            if func.is_declaration or not any(isinstance(t, MemRefType) for t in func.function_type.inputs):
                continue
            if func.body.first_block is not func.body.last_block:
                raise IRError("gpu-map-parallel needs a function of one block (structured loops): run it "
                              "before scf-to-cf", func.loc)
            self._map_block(func.body.entry, stats)
            if any(op.name == "gpu.launch" for op in func.body.entry.ops):
                give_device_buffers(func)
            elif isinstance(func.attributes.get("tensor_signature"), TypeAttr):  # no work for the device
                restore_tensor_signature(func, func.attributes["tensor_signature"].type)

    def _map_block(self, block, stats) -> None:
        group: list = []
        for op in list(block.ops):
            if group and op.name not in _ENDS_GROUP and _depends_on(op, set(group)):
                group.append(op)  # it reads what the group computes: it runs in the group's thread
            elif op.name == "scf.for" and "parallel" in op.attributes and not op.results:
                self._flush(group, stats)
                group = []
                nest = _matmul_nest(op) if self.tile else None
                if nest is not None:
                    _map_matmul(op, nest, self.tile, self.thread_tile, self.k_tile, self.min_blocks)
                    stats.add("matmuls-tiled")
                elif _row_mappable(op):
                    _map_rows(op, self.row_block_size)
                    stats.add("loops-mapped-block-per-row")
                else:
                    self._map_loop(op)
                    stats.add("loops-mapped")
            elif op.name in _ENDS_GROUP:
                self._flush(group, stats)
                group = []
            elif op.name not in _HOST_OPS and (touches_memory(op) or any(
                    v.defining_op in group for v in op.operands)):
                group.append(op)
        self._flush(group, stats)

    def _flush(self, group: list, stats) -> None:
        """Move the ops of ``group`` into one single-thread launch at the last one's place."""
        if not group:
            return
        members = set(group)
        for op in group:
            for r in op.results:
                for use in r.uses:
                    user = use.owner
                    top = user
                    while top.parent is not group[-1].parent:
                        top = top.parent_op
                    if top not in members:
                        raise IRError(f"gpu-map-parallel: the result of '{op.name}' is used on the host "
                                      f"('{user.name}'); the GPU pipeline keeps host code to allocation and "
                                      "copies (return tensors rather than scalars computed from buffers)",
                                      user.loc)
        b = Builder(loc=group[-1].loc)
        b.before_op(group[-1])
        one = b.index(1)
        launch = _launch(b, [one, one, one], [one, one, one])
        body = launch.body.entry
        anchor = body.terminator
        for op in group:
            op.detach()
            body.insert_before(op, anchor)
        stats.add("serial-launches")

    def _map_loop(self, loop) -> None:
        b = Builder(loc=loop.loc, reuse_constants=True)
        b.before_op(loop)
        inner = _flattenable(loop)
        lb, ub, step = (b.wrap(v) for v in loop.operands[:3])
        count = (ub - lb + step - 1) / step if _constant_index(loop.step) != 1 else ub - lb
        if inner is not None:
            inner_n = b.wrap(inner.upper_bound)
            total = count * inner_n
        else:
            total = count
        size = b.index(self.block_size)
        one = b.index(1)
        grid = b.op("arith.maxsi", (total + size - 1) / size, one)  # an empty loop still launches one block
        launch = _launch(b, [grid, one, one], [size, one, one])
        body = launch.body.entry
        bid, tid = body.args[0], body.args[3]
        with b.at(body.terminator):
            k = b.wrap(bid) * size + b.wrap(tid)
            with b.if_(k < total) as branch, branch.then_():
                if inner is not None:
                    i = k / inner_n
                    j = k - i * inner_n
                    iv = lb + i * step
                    inner.induction_var.replace_all_uses_with(j.value)
                    source = inner.body
                else:
                    iv = lb + k * step
                    source = loop.body
                loop.induction_var.replace_all_uses_with(iv.value)
                then_block = branch.op.regions[0].entry  # its scf.yield comes when the 'with' ends
                for op in list(source.ops):
                    if op.is_terminator:
                        continue
                    op.detach()
                    then_block.append(op)
        loop.erase()


def _launch(b: Builder, grid, block):
    from irc.dialects.gpu import LaunchOp, TerminatorOp

    launch = LaunchOp.build([v.value if hasattr(v, "value") else v for v in grid],
                            [v.value if hasattr(v, "value") else v for v in block])
    launch.body.entry.append(TerminatorOp())
    b.insert(launch)
    return launch


# -- one block per row --------------------------------------------------------------------------

_IDENTITY = {"arith.addf": 0.0, "arith.mulf": 1.0, "arith.maximumf": -np.inf, "arith.minimumf": np.inf,
             "arith.maxnumf": -np.inf, "arith.minnumf": np.inf, "arith.addi": 0, "arith.muli": 1,
             "arith.ori": 0, "arith.xori": 0, "arith.andi": -1}


def _combiner(loop):
    """The combining op of a reduction loop (one accumulator, used once, by the value yielded),
    or None if ``loop`` is not one."""
    if len(loop.results) != 1:
        return None
    body = loop.body
    acc = body.args[1]
    yielded = body.terminator.operands[0]
    combine = yielded.defining_op
    if combine is None or combine.parent is not body or combine.name not in _IDENTITY:
        return None
    if acc.first_use is None or len(list(acc.uses)) != 1 or acc not in combine.operands:
        return None
    if combine.name == "arith.maxsi" or any(op.name in ("memref.store", "memref.copy", "func.call", "gpu.barrier")
                                          for op in loop.walk()):
        return None
    return combine


def _row_mappable(loop) -> bool:
    """Whether ``loop`` can run one block per iteration (see the module docstring)."""
    bounds = [_constant_index(v) for v in loop.operands[:3]]
    if None in bounds or bounds[1] <= bounds[0]:
        return False
    inner = 0
    for op in loop.body.ops:
        if op.is_terminator:
            continue
        if op.name == "scf.for":
            if _combiner(op) is None and ("parallel" not in op.attributes or op.results):
                return False
            inner += 1
        elif op.regions or op.name in ("func.call", "memref.copy", "memref.alloc", "memref.alloca", "memref.dealloc"):
            return False
    return inner > 0


def _warp_reduce(b: Builder, value, combine: str):
    """A butterfly of ``gpu.shuffle xor`` over a full warp: every lane ends with the total."""
    from irc.dialects.gpu import WARP_SIZE, ShuffleOp

    from irc.types import i32

    width = b.const(WARP_SIZE, i32)
    offset = WARP_SIZE // 2
    while offset:
        other, _valid = b.built(ShuffleOp.build("xor", b.wrap(value).value, b.const(offset, i32).value,
                                                width.value))
        value = b.op(combine, value, other)
        offset //= 2
    return value


def _block_reduce(b: Builder, partial, combine: str, tid, size: int):
    """The combination of every thread's ``partial`` (``size`` threads, a power of two, at least
    a warp), seen by all of them: a tree in workgroup memory with a barrier per level down to
    one warp, then shuffles within the warp; a block of one warp needs only the shuffles."""
    from irc.dialects.gpu import WARP_SIZE, WORKGROUP, BarrierOp

    if size == WARP_SIZE:
        return _warp_reduce(b, partial, combine)
    shared = b.op("memref.alloca", result=MemRefType([size], b.wrap(partial).type, WORKGROUP)).value
    b.store(partial, shared, [tid])
    b.insert(BarrierOp())
    half = size // 2
    while half >= WARP_SIZE:
        with b.if_(tid < half) as branch, branch.then_():
            b.store(b.op(combine, b.load(shared, [tid]), b.load(shared, [tid + half])), shared, [tid])
        b.insert(BarrierOp())
        half //= 2
    with b.if_(tid < WARP_SIZE) as branch, branch.then_():  # the last warp: no barriers needed
        total = _warp_reduce(b, b.load(shared, [tid]), combine)
        with b.if_(b.compare("eq", tid, 0)) as first, first.then_():
            b.store(total, shared, [b.index(0)])
    b.insert(BarrierOp())
    return b.load(shared, [b.index(0)])


def _row_threads(loop, most: int) -> int:
    """Threads per block for a row: enough for the longest inner loop (a power of two, at least a
    warp), at most ``most``: a 32-element row gets one warp, not 256 threads that idle."""
    longest = 0
    for op in loop.body.ops:
        if op.name == "scf.for":
            bounds = [_constant_index(v) for v in op.operands[:3]]
            if None in bounds:
                return most
            longest = max(longest, -(-(bounds[1] - bounds[0]) // bounds[2]))
    size = 32
    while size < longest and size < most:
        size *= 2
    return min(size, most)


def _map_rows(loop, most_threads: int) -> None:
    """One block per iteration of ``loop`` (see the module docstring)."""
    from irc.dialects.gpu import BarrierOp

    size = _row_threads(loop, most_threads)
    lb_c, ub_c, step_c = (_constant_index(v) for v in loop.operands[:3])
    count = (ub_c - lb_c + step_c - 1) // step_c
    b = Builder(loc=loop.loc, reuse_constants=True)
    b.before_op(loop)
    one = b.index(1)
    launch = _launch(b, [b.index(count), one, one], [b.index(size), one, one])
    body = launch.body.entry
    bid, tid = body.args[0], body.args[3]
    end = body.terminator
    with b.at(end):
        iv = b.index(lb_c) + b.wrap(bid) * step_c if lb_c or step_c != 1 else b.wrap(bid)
    loop.induction_var.replace_all_uses_with(iv.value)
    for op in list(loop.body.ops):
        if op.is_terminator:
            continue
        op.detach()
        body.insert_before(op, end)
    loop.erase()
    tid_v = b.wrap(tid)

    def barrier_after(op):
        body.insert_after(BarrierOp(loc=op.loc), op)

    for op in list(body.ops):
        if op is end or op.parent is not body:
            continue
        if op.name == "scf.for":
            combine = _combiner(op)
            with b.at(op):
                lower, step = b.wrap(op.operands[0]), b.wrap(op.operands[2])
                op.set_operand(0, (lower + tid_v * step).value)
                op.set_operand(2, (step * size).value)
                if combine is not None:
                    init = op.operands[3]
                    op.set_operand(3, b.const(_IDENTITY[combine.name], init.type).value)
            if combine is None:
                barrier_after(op)
                continue
            result = op.results[0]
            uses = list(result.uses)
            with b.at(op, before=False):
                total = b.op(combine.name, init, _block_reduce(b, result, combine.name, tid_v, size))
            for use in uses:
                use.owner.set_operand(use.index, total.value)
        elif op.name == "memref.store":
            with b.at(op), b.if_(b.compare("eq", tid_v, 0)) as branch:
                pass
            then_block = branch.op.regions[0].entry
            op.detach()
            then_block.insert_before(op, then_block.terminator)
            barrier_after(branch.op)



# -- a matmul nest as a shared-memory tiled kernel ------------------------------------------------


def _loop_bounds(loop):
    bounds = [_constant_index(v) for v in loop.operands[:3]]
    return bounds[1] if bounds[0] == 0 and bounds[2] == 1 and bounds[1] is not None else None


def _body_ops(loop) -> list:
    return [op for op in loop.body.ops if not op.is_terminator]


def _matmul_nest(loop):
    """(a, b, c, a transposed, b transposed, m, n, k, element type) when ``loop`` is the nest that
    ``tensor-to-loops{gpu=true}`` makes for a 2-D matmul, else None."""
    m = _loop_bounds(loop)
    ops = _body_ops(loop)
    if m is None or len(ops) != 1 or ops[0].name != "scf.for" or "parallel" not in ops[0].attributes:
        return None
    jloop = ops[0]
    n = _loop_bounds(jloop)
    ops = _body_ops(jloop)
    if n is None or len(ops) != 2 or ops[0].name != "scf.for" or ops[1].name != "memref.store":
        return None
    kloop, store = ops
    k = _loop_bounds(kloop)
    i, j = loop.induction_var, jloop.induction_var
    if k is None or len(kloop.results) != 1 or store.operands[0] is not kloop.results[0] \
            or list(store.operands[2:]) != [i, j]:
        return None
    zero = _constant_index(kloop.operands[3]) if kloop.operands[3].type.is_int_or_index else None
    from irc.attributes import FloatAttr
    from irc.patterns import constant_value

    init = constant_value(kloop.operands[3])
    if not (isinstance(init, FloatAttr) and init.value == 0.0 or zero == 0):
        return None
    ops = _body_ops(kloop)
    loads = [op for op in ops if op.name == "memref.load"]
    if len(ops) != 4 or len(loads) != 2:
        return None
    add = kloop.body.terminator.operands[0].defining_op
    mul = next((op for op in ops if op.name in ("arith.mulf", "arith.muli")), None)
    if add is None or add.name not in ("arith.addf", "arith.addi") or mul is None \
            or set(add.operands) != {kloop.body.args[1], mul.results[0]}:
        return None
    kk = kloop.induction_var
    a = b = None
    for load in loads:
        idx = list(load.operands[1:])
        if load.results[0] not in mul.operands:
            return None
        if idx in ([i, kk], [kk, i]) and a is None:
            a = (load.operands[0], idx == [kk, i])
        elif idx in ([kk, j], [j, kk]):
            b = (load.operands[0], idx == [j, kk])
        else:
            return None
    if a is None or b is None:
        return None
    return a[0], b[0], store.operands[1], a[1], b[1], m, n, k, store.operands[0].type, add.name, mul.name


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def matmul_tiles(m: int, n: int, t: int, thread_tile: int, k_tile: int,
                 min_blocks: int = 0) -> tuple[int, int, int]:
    """(rows, columns) of C that each of the ``t`` x ``t`` threads computes, and the depth of a
    step: at most ``thread_tile`` x ``thread_tile`` outputs per thread, fewer for a small C (no
    block should be mostly past the edge), halved (the larger side first) while the grid would
    have fewer than ``min_blocks`` blocks (a device's multiprocessors should all have work:
    a 1024² C in 128² tiles is 64 blocks), and a depth at which every thread stages at least
    one element of the smaller tile."""
    tm = min(thread_tile, _pow2_at_least(-(-m // t)))
    tn = min(thread_tile, _pow2_at_least(-(-n // t)))
    while tm * tn > 1 and -(-m // (t * tm)) * -(-n // (t * tn)) < min_blocks:
        if tm >= tn:
            tm //= 2
        else:
            tn //= 2
    bk = max(k_tile, t * t // (t * min(tm, tn)))
    return tm, tn, bk


def _register_layout(tid, count: int, threads: int, run: int):
    """The offsets in the block tile of a thread's ``count`` rows (or columns) and the base they
    are added to: runs of ``run`` adjacent elements, the runs of neighbouring threads side by
    side, the next run ``threads * run`` further."""
    run = min(run, count)
    return [(i // run) * threads * run + i % run for i in range(count)], tid * run


def _map_matmul(loop, nest, t: int, thread_tile: int, k_tile: int, min_blocks: int) -> None:
    """The register-tiled kernel for a matmul nest (``_matmul_nest``'s description of it).

    ``t`` x ``t`` threads per block; each thread keeps a ``tm`` x ``tn`` block of C in registers
    (SSA values carried by the loop over K), so the block computes a ``t*tm`` x ``t*tn`` tile.
    Each step of ``bk`` stages A's tile (transposed: ``As[k][row]``) and B's (``Bs[k][col]``) in
    workgroup memory, every thread loading a few elements with consecutive threads on
    consecutive addresses of the operand; the next step's elements are loaded into registers
    before the products of this one (their latency hides behind ``bk * tm * tn`` fmas) and
    stored into the other of two buffers, then one barrier.  A thread's rows and columns come in runs of four whose first load carries
    ``alignment = 16`` (the renderer's cue for one 16-byte shared load per run).  Guards (zeros
    past the edges of A and B, no stores past those of C) are emitted only where a size is not
    a multiple of its tile."""
    from irc.dialects.gpu import WORKGROUP, BarrierOp

    a, bmat, c, ta, tb, m, n, k, elem, add, mul = nest
    threads = t * t
    tm, tn, bk = matmul_tiles(m, n, t, thread_tile, k_tile, min_blocks)
    bm, bn = t * tm, t * tn
    steps = -(-k // bk)
    fused = add == "arith.addf" and mul == "arith.mulf"
    b = Builder(loc=loop.loc, reuse_constants=True)
    b.before_op(loop)
    one = b.index(1)
    launch = _launch(b, [b.index(-(-n // bn)), b.index(-(-m // bm)), one], [b.index(t), b.index(t), one])
    if threads >= 128:  # two blocks per multiprocessor: ptxas keeps a thread within 128 registers
        launch.attributes["nvvm.minctasm"] = IntegerAttr(2, i32)
    body = launch.body.entry
    bx, by, tx, ty = (b.wrap(body.args[i]) for i in (0, 1, 3, 4))

    def udiv(x, d: int):
        return x if d == 1 else b.op("arith.divui", x, b.index(d))

    def urem(x, d: int):
        return b.index(0) if d == 1 else b.op("arith.remui", x, b.index(d))

    with b.at(body.terminator):
        zero = b.const(0, elem)
        lin = ty * t + tx
        row0, col0 = by * bm, bx * bn
        # A tile staged from an operand contiguous along k is written down its columns: four
        # words of padding per row put the eight k of a row in eight different banks.
        # Two of each (double buffering): a step reads one while the next step's tile is stored
        # into the other, so one barrier per step suffices.
        tile_a = b.op("memref.alloca", result=MemRefType([2, bk, bm + (0 if ta else 4)], elem, WORKGROUP))
        tile_b = b.op("memref.alloca", result=MemRefType([2, bk, bn + (4 if tb else 0)], elem, WORKGROUP))

        def staging(rows: int, along_rows: bool):
            """For each element a thread stages of a ``bk`` x ``rows`` tile: its (k, row) in the
            tile and the condition that it exists (None: always).  ``along_rows``: the operand
            is contiguous along the rows (else along k), so consecutive threads take
            consecutive rows (else consecutive k): loads from global memory coalesce."""
            width = rows if along_rows else bk
            total = rows * bk
            out = []
            for r in range(-(-total // threads)):
                if threads % width == 0:
                    major, minor = udiv(lin, width) + r * (threads // width), urem(lin, width)
                else:
                    e = lin + r * threads
                    major, minor = udiv(e, width), urem(e, width)
                exists = lin + r * threads < total if (r + 1) * threads > total else None
                out.append(((major, minor) if along_rows else (minor, major), exists))
            return out

        stage_a = staging(bm, ta)
        stage_b = staging(bn, not tb)

        def clamped(x, limit: int, ragged: bool):
            """``x`` kept inside ``[0, limit)`` where the tile can run past the edge: the load
            stays valid and branch-free, and its value is then replaced by zero."""
            return b.op("arith.minui", x, b.index(limit - 1)) if ragged else x

        def both(x, y):
            return y if x is None else x if y is None else x & y

        def load_step(k0):
            """The elements this thread stages for the step at depth ``k0`` (zero past the edges)."""
            values = []
            for (kl, xl), exists, buf, size, block, trans in \
                    [(*s, a, m, bm, ta) for s in stage_a] + [(*s, bmat, n, bn, not tb) for s in stage_b]:
                x, kk = (row0 if buf is a else col0) + xl, k0 + kl
                ragged_x, ragged_k = size % block != 0 or exists is not None, k % bk != 0 or exists is not None
                cx, ck = clamped(x, size, ragged_x), clamped(kk, k, ragged_k)
                v = b.load(buf, [ck, cx] if trans else [cx, ck])
                cond = both(x < size if ragged_x else None, kk < k if ragged_k else None)
                values.append(v if cond is None else b.op("arith.select", cond, v, zero, result=elem))
            return values

        def store_step(values, buffer):
            for k_index, ((kl, xl), exists) in enumerate(stage_a + stage_b):
                target = tile_a if k_index < len(stage_a) else tile_b
                if exists is None:
                    b.store(values[k_index], target, [buffer, kl, xl])
                else:
                    with b.if_(exists) as branch, branch.then_():
                        b.store(values[k_index], target, [buffer, kl, xl])

        # A thread's rows in runs of four (16 bytes: room for vector loads); its columns one
        # apart (a warp's 16 neighbouring lanes read 16 consecutive words of Bs, one per bank,
        # the other half-warp the same ones, and store 64 contiguous bytes of C).
        row_offsets, row_base = _register_layout(ty, tm, t, 4)
        col_offsets, col_base = _register_layout(tx, tn, t, 4)

        def aligned_load(tile, buffer, kk, base, offset, run):
            """A load of a thread's run of four that starts at a multiple of four elements of
            a row whose length is one too: the 16 bytes are aligned, promised to the renderer."""
            v = b.load(tile, [buffer, kk, base + offset])
            width = tile.type.shape[-1]
            if run == 4 and offset % 4 == 0 and width % 4 == 0:
                v.value.defining_op.attributes["alignment"] = IntegerAttr(16, i64)
            return v

        def products(accs, buffer):
            accs = list(accs)
            for kk in range(bk):
                av = [aligned_load(tile_a, buffer, kk, row_base, o, min(4, tm)) for o in row_offsets]
                bv = [aligned_load(tile_b, buffer, kk, col_base, o, min(4, tn)) for o in col_offsets]
                for i in range(tm):
                    for j in range(tn):
                        acc = accs[i * tn + j]
                        accs[i * tn + j] = b.op("math.fma", av[i], bv[j], acc) if fused \
                            else b.op(add, acc, b.op(mul, av[i], bv[j]))
            return accs

        accs = [zero] * (tm * tn)
        if steps:
            store_step(load_step(b.index(0)), b.index(0))
            b.insert(BarrierOp())
            with b.for_(0, steps, inits=accs) as step:
                # The next step's elements (the last step loads its own again: no branch, and
                # the products stay in the loop, where LLVM cannot sink them into the guarded
                # stores of C below and stretch their registers' lives).
                following = b.op("arith.minui", step.iv + 1, b.index(steps - 1))
                staged = load_step(following * bk)
                current = b.op("arith.andi", step.iv, b.index(1))
                after = products(step.args, current)
                # The other buffer was last read in the previous step, before its barrier.
                store_step(staged, b.op("arith.xori", current, b.index(1)))
                b.insert(BarrierOp())
                step.yield_(*after)
            accs = step.results
        rows = [row0 + row_base + o for o in row_offsets]
        cols = [col0 + col_base + o for o in col_offsets]
        row_ok = [r < m if m % bm else None for r in rows]
        col_ok = [cc < n if n % bn else None for cc in cols]
        for i in range(tm):
            for j in range(tn):
                cond = both(row_ok[i], col_ok[j])
                if cond is None:
                    b.store(accs[i * tn + j], c, [rows[i], cols[j]])
                else:
                    with b.if_(cond) as branch, branch.then_():
                        b.store(accs[i * tn + j], c, [rows[i], cols[j]])
    loop.erase()
