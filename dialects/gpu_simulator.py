"""The grid simulator: how the reference interpreter runs the ``gpu`` dialect's device work.

Blocks run one after another; within a block every thread runs, each on its own Python thread
when the kernel synchronises (``gpu.barrier``, ``gpu.shuffle``) so that a barrier really waits
for the whole block, one after another otherwise.  Workgroup buffers are one per block.  A
barrier or shuffle that some threads skip is an error, never a hang.  Asynchronous work
(``!gpu.async.token``) is recorded and run lazily, in the order its tokens allow that is the
furthest from program order (``Simulator.wait``).  ``runtime/gpu/driver.py`` offers the same
interface (``alloc``, ``dealloc``, ``memcpy``, ``run``, ``wait``, ``launch``) on a real device.
"""

from __future__ import annotations

import threading

import numpy as np

from irc.diagnostics import InterpreterError
from irc.semantics import Buffer

WARP_SIZE = 32


def device_of(interp):
    """The device that runs an interpreter's gpu ops: the simulator unless a runtime gave another."""
    device = getattr(interp, "gpu_device", None)
    return device if device is not None else SIMULATOR


def thread_of(interp, op):
    thread = getattr(interp, "gpu_thread", None)
    if thread is None:
        raise interp.fault(op, "device code runs only inside a kernel launch")
    return thread


class AsyncToken:
    """A ``!gpu.async.token`` in the simulator: the work it stands for and what it waits for."""

    __slots__ = ("deps", "work", "order", "done")

    def __init__(self, deps, work, order: int):
        self.deps = deps
        self.work = work
        self.order = order
        self.done = False


class _Abort(Exception):
    """Raised in the other threads of a block when one of them faulted."""


class _Group:
    """A barrier for ``n`` threads that reports, instead of hanging, a thread that finished or
    faulted while others wait (threads that skip a barrier)."""

    def __init__(self, n: int):
        self.n = n
        self.arrived = 0
        self.generation = 0
        self.finished = 0
        self.error: str | None = None
        self.cond = threading.Condition()

    def wait(self) -> None:
        with self.cond:
            if self.error is not None:
                raise _Abort()
            if self.finished:
                self.error = "divergent"
                self.cond.notify_all()
                raise _Abort(self.error)
            gen = self.generation
            self.arrived += 1
            if self.arrived == self.n:
                self.arrived = 0
                self.generation += 1
                self.cond.notify_all()
                return
            while gen == self.generation and self.error is None:
                self.cond.wait()
            if gen == self.generation:
                raise _Abort()

    def finish(self, failed: bool = False) -> None:
        with self.cond:
            self.finished += 1
            if failed and self.error is None:
                self.error = "fault"
            elif self.arrived and self.error is None:
                self.error = "divergent"
            self.cond.notify_all()


class SimThread:
    """One simulated thread: its ids, its block's barrier, workgroup memory and warp."""

    def __init__(self, block_ctx, block_id, thread_id, grid, block):
        self.block_ctx = block_ctx
        self.block_id = block_id
        self.thread_id = thread_id
        self.grid_dim = grid
        self.block_dim = block
        self.linear = thread_id[0] + block[0] * (thread_id[1] + block[1] * thread_id[2])

    def barrier(self, interp, op) -> None:
        ctx = self.block_ctx
        if ctx.sync is None:
            return  # one thread at a time: no other thread is waiting
        try:
            ctx.sync.wait()
        except _Abort as e:
            if str(e) == "divergent":
                raise interp.fault(op, "gpu.barrier is not reached by every thread of the block") from None
            raise

    def shuffle(self, interp, op, value, offset, width):
        ctx = self.block_ctx
        if ctx.sync is None:
            raise interp.fault(op, "gpu.shuffle needs the whole warp (internal: kernel run without threads)")
        lane = self.linear % WARP_SIZE
        warp = self.linear // WARP_SIZE
        slots, group = ctx.warp(warp)
        try:
            slots[lane] = value
            group.wait()
            width, offset = int(width), int(offset)
            src = {"xor": lane ^ offset, "down": lane + offset, "up": lane - offset, "idx": offset}[op.mode]
            valid = 0 <= src < width and src < len(slots)
            result = slots[src] if valid else value
            group.wait()
        except _Abort as e:
            if str(e) == "divergent":
                raise interp.fault(op, "gpu.shuffle is not reached by every lane of the warp") from None
            raise
        return [result, 1 if valid else 0]


class _BlockContext:
    def __init__(self, threads: int, synchronised: bool):
        self.threads = threads
        self.sync = _Group(threads) if synchronised else None
        self.shared: dict = {}
        self.lock = threading.Lock()
        self.warps: list = []
        if synchronised:
            for k in range(0, threads, WARP_SIZE):
                n = min(WARP_SIZE, threads - k)
                self.warps.append(([None] * n, _Group(n)))

    def workgroup_buffer(self, op, make):
        with self.lock:
            buf = self.shared.get(op)
            if buf is None:
                buf = self.shared[op] = make()
            return buf

    def warp(self, k: int):
        return self.warps[k]


def _synchronises(region) -> bool:
    for block in region.blocks:
        for op in block.ops:
            for inner in op.walk():
                if inner.name in ("gpu.barrier", "gpu.shuffle"):
                    return True
    return False


class Simulator:
    """Runs gpu ops in the interpreter: device memory is host memory, a launch runs every
    thread of every block.  ``irc.runtime.gpu`` offers the same interface on a real device."""

    def alloc(self, interp, op, shape, t):
        from .memref import storage_dtype

        return Buffer(np.zeros(shape, dtype=storage_dtype(t)), t, heap=True)

    def dealloc(self, interp, op, buf) -> None:
        self.wait(interp, op, None)  # as a synchronous op, after all the work issued before it
        if buf.freed:
            raise interp.fault(op, "buffer freed twice")
        buf.freed = True

    def memcpy(self, interp, op, dst, src) -> None:
        dst.array[...] = src.array

    # Asynchronous work is simulated lazily and adversarially: an async op only records what it
    # will do; the work runs when a gpu.wait (or a synchronous gpu op) needs it, in the order
    # that respects the declared dependencies and otherwise runs the latest-issued work first.
    # A missing dependency or a missing wait then shows as a wrong result, as it may on a device.

    def run(self, interp, op, deps, work):
        pending = interp.__dict__.setdefault("gpu_pending", [])
        if not op.results:  # synchronous: the work issued before it completes first
            self.wait(interp, op, None)
            work()
            return []
        token = AsyncToken(list(deps), work, len(pending))
        pending.append(token)
        return [token]

    def wait(self, interp, op, tokens=None) -> None:
        pending = interp.__dict__.get("gpu_pending")
        if not pending:
            return
        targets = pending if tokens is None else tokens
        needed, stack = set(), [t for t in targets if not t.done]
        while stack:
            t = stack.pop()
            if t not in needed:
                needed.add(t)
                stack.extend(d for d in t.deps if not d.done)
        while needed:
            ready = [t for t in needed if all(d.done for d in t.deps)]
            t = max(ready, key=lambda t: t.order)
            t.work()
            t.done = True
            needed.discard(t)
        if tokens is None:
            pending.clear()

    def launch(self, interp, op, region, grid, block, kernel_args) -> None:
        from irc.interpreter import Interpreter

        synchronised = _synchronises(region)
        nthreads = block[0] * block[1] * block[2]
        outer_env = interp.env if kernel_args is None else {}
        for bz in range(grid[2]):
            for by in range(grid[1]):
                for bx in range(grid[0]):
                    ctx = _BlockContext(nthreads, synchronised)
                    threads = [SimThread(ctx, (bx, by, bz), (tx, ty, tz), grid, block)
                               for tz in range(block[2]) for ty in range(block[1]) for tx in range(block[0])]

                    def run(thread, ctx=ctx):
                        sub = Interpreter.__new__(Interpreter)
                        sub.__dict__.update(interp.__dict__)
                        sub.steps, sub.max_steps, sub.depth = 0, None, interp.depth
                        sub.gpu_thread = thread
                        env = dict(outer_env)
                        if kernel_args is None:
                            args = [*thread.block_id, *thread.thread_id, *grid, *block]
                        else:
                            args = kernel_args
                        sub.run_region(region, args, env)

                    if not synchronised:
                        for t in threads:
                            run(t)
                        continue
                    self._run_threads(interp, op, ctx, threads, run)

    @staticmethod
    def _run_threads(interp, op, ctx, threads, run) -> None:
        errors: list = []

        def body(t):
            try:
                run(t)
            except _Abort:
                failed = True
            except BaseException as e:  # noqa: BLE001 - re-raised below in the launching thread
                errors.append(e)
                failed = True
            else:
                failed = False
            ctx.sync.finish(failed)
            if failed:
                for _, group in ctx.warps:
                    group.finish(failed=True)
            else:
                ctx.warps[t.linear // WARP_SIZE][1].finish()

        workers = [threading.Thread(target=body, args=(t,), daemon=True) for t in threads]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            first = next((e for e in errors if not isinstance(e, InterpreterError)), None) or errors[0]
            raise first
        if ctx.sync.error == "divergent":
            raise interp.fault(op, "a thread of the block left the kernel while others wait at gpu.barrier")


SIMULATOR = Simulator()


def workgroup_buffer(interp, op, make):
    """The per-block buffer of a workgroup ``memref.alloca`` (one for all threads of the block)."""
    thread = getattr(interp, "gpu_thread", None)
    if thread is None:
        return make()
    return thread.block_ctx.workgroup_buffer(op, make)
