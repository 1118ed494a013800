"""gpu-map-parallel: run a function's loop nests on the device, as ``gpu.launch`` ops.

At the top level of each function over memrefs (what ``tensor-to-loops`` makes):

* an ``scf.for`` marked ``parallel`` (its iterations write disjoint elements) becomes a launch
  of one thread per iteration, ``block-size`` threads per block: thread ``t`` of block ``b``
  runs iteration ``lb + (b * block-size + t) * step`` when that is below ``ub``;
* a ``parallel`` loop whose body is exactly one more ``parallel`` loop with constant bounds
  (an elementwise nest) maps both loops, flattened, to the threads;
* other ops that read or write buffers (a serial reduction loop, a copy, a single store) run
  as one thread of a one-block launch, grouped so that consecutive ones share a launch;
* allocation, deallocation, constants and index arithmetic stay on the host.

It is device-independent (no device limits beyond the block size), and the result runs on the
interpreter, which simulates the grid.  Run ``gpu-host-copies`` next: the launches still read
host buffers until it gives them device copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.builder import Builder
from irc.diagnostics import IRError
from irc.passmanager import Pass
from irc.types import MemRefType

from .gpu_memory import give_device_buffers

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

    def run(self, module, stats) -> None:
        if self.block_size < 1 or self.block_size > 1024:
            raise IRError(f"gpu-map-parallel: block-size must be 1 to 1024, got {self.block_size}")
        for func in list(module.functions):
            if func.is_declaration or not any(isinstance(t, MemRefType) for t in func.function_type.inputs):
                continue
            if func.body.first_block is not func.body.last_block:
                raise IRError("gpu-map-parallel needs a function of one block (structured loops): run it "
                              "before scf-to-cf", func.loc)
            self._map_block(func.body.entry, stats)
            if any(op.name == "gpu.launch" for op in func.body.entry.ops):
                give_device_buffers(func)

    def _map_block(self, block, stats) -> None:
        group: list = []
        for op in list(block.ops):
            if op.name == "scf.for" and "parallel" in op.attributes and not op.results:
                self._flush(group, stats)
                group = []
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
