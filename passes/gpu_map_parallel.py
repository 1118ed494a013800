"""gpu-map-parallel: run a function's loop nests on the device, as ``gpu.launch`` ops.

At the top level of each function over memrefs (what ``tensor-to-loops`` makes):

* an ``scf.for`` marked ``parallel`` (its iterations write disjoint elements) becomes a launch
  of one thread per iteration, ``block-size`` threads per block: thread ``t`` of block ``b``
  runs iteration ``lb + (b * block-size + t) * step`` when that is below ``ub``;
* a ``parallel`` loop whose body is exactly one more ``parallel`` loop with constant bounds
  (an elementwise nest) maps both loops, flattened, to the threads;
* a matmul nest (``parallel`` loops over the rows and columns of C around one accumulator loop
  of ``a[i, k] * b[k, j]``, either operand possibly transposed) becomes the classic tiled kernel:
  ``tile`` x ``tile`` threads per block, each step copying a tile of A and of B into workgroup
  memory (zeros past the edges), a barrier, the tile's products, a barrier;
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

from irc.attributes import TypeAttr
from irc.builder import Builder
from irc.diagnostics import IRError
from irc.passmanager import Pass
from irc.types import MemRefType

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
    from irc.attributes import IntegerAttr
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
    tile: int = 16  # the tile of a matmul nest in shared memory (tile x tile threads); 0: no tiling

    def run(self, module, stats) -> None:
        if self.block_size < 1 or self.block_size > 1024:
            raise IRError(f"gpu-map-parallel: block-size must be 1 to 1024, got {self.block_size}")
        if self.tile < 0 or self.tile * self.tile > 1024:
            raise IRError(f"gpu-map-parallel: tile must be 0 to 32, got {self.tile}")
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
                    _map_matmul(op, nest, self.tile)
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


def _map_matmul(loop, nest, t: int) -> None:
    """The tiled kernel for a matmul nest (``_matmul_nest``'s description of it)."""
    from irc.dialects.gpu import WORKGROUP, BarrierOp

    a, bmat, c, ta, tb, m, n, k, elem, add, mul = nest
    b = Builder(loc=loop.loc, reuse_constants=True)
    b.before_op(loop)
    one = b.index(1)
    launch = _launch(b, [b.index(-(-n // t)), b.index(-(-m // t)), one], [b.index(t), b.index(t), one])
    body = launch.body.entry
    bx, by, tx, ty = (b.wrap(body.args[i]) for i in (0, 1, 3, 4))
    with b.at(body.terminator):
        zero = b.const(0, elem)
        row, col = by * t + ty, bx * t + tx
        tile_a = b.op("memref.alloca", result=MemRefType([t, t], elem, WORKGROUP))
        tile_b = b.op("memref.alloca", result=MemRefType([t, t], elem, WORKGROUP))

        def guarded_load(cond, buf, index):
            with b.if_(cond, [elem]) as branch:
                with branch.then_():
                    branch.yield_(b.load(buf, index))
                with branch.else_():
                    branch.yield_(zero)
            return branch.results[0]

        with b.for_(0, -(-k // t), inits=[zero]) as step:
            ka = step.iv * t + tx
            va = guarded_load((row < m) & (ka < k), a, [ka, row] if ta else [row, ka])
            b.store(va, tile_a, [ty, tx])
            kb = step.iv * t + ty
            vb = guarded_load((kb < k) & (col < n), bmat, [col, kb] if tb else [kb, col])
            b.store(vb, tile_b, [ty, tx])
            b.insert(BarrierOp())
            with b.for_(0, t, inits=[step.args[0]]) as inner:
                product = b.op(mul, b.load(tile_a, [ty, inner.iv]), b.load(tile_b, [inner.iv, tx]))
                inner.yield_(b.op(add, inner.args[0], product))
            b.insert(BarrierOp())
            step.yield_(inner.results[0])
        with b.if_((row < m) & (col < n)) as branch, branch.then_():
            b.store(step.results[0], c, [row, col])
    loop.erase()

