"""The pycuda driver: run a lowered GPU module's host functions on a CUDA device.

UNTESTED ON HARDWARE: it is written against pycuda's documented API (``pycuda.driver``:
``init``, ``Device``, ``module_from_buffer``, ``Stream``, ``Event``, ``memcpy_htod_async``,
``memcpy_dtoh_async``, ``memcpy_dtod_async``, ``pagelocked_empty``; ``pycuda.tools.DeviceMemoryPool``),
but the machines it was written on have no GPU and no driver.  pycuda is imported lazily, so
importing this module never fails; ``unavailable_reason()`` says why no device can be used.

How it runs a program: the host function (after ``GPU_STAGES``) is straight-line code of
``gpu.alloc``/``gpu.memcpy``/``gpu.launch_func``/``gpu.dealloc``, ``bufferization`` casts and
index arithmetic.  The reference interpreter walks it with this device in place of the
simulator (``gpu_device``), so every gpu op calls the driver: allocations come from a memory
pool reused across calls, synchronous copies and launches go to one stream (the copy back to the
host waits for it), and async ones (``!gpu.async.token``, as ``gpu-async`` makes them) go to the
stream of their first dependency or to one of four streams of their own, ordered by events.  The kernels are the PTX of ``render_ptx``, loaded once per module with
``module_from_buffer`` (the JIT log of a rejected module becomes an ``IRError``).
"""

from __future__ import annotations

import numpy as np

from irc.diagnostics import IRError
from irc.types import FloatType, IndexType, IntegerType, MemRefType


class DeviceUnavailable(RuntimeError):
    """No CUDA device can be used here (pycuda missing, no driver, or no device)."""


def unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (for skipping tests cleanly)."""
    try:
        import pycuda.driver as cuda
    except ImportError as e:
        return f"pycuda is not installed (pip install 'irc[cuda]'): {e}"
    except Exception as e:  # noqa: BLE001 - pycuda raises what the driver library gives it
        return f"pycuda cannot load the CUDA driver: {e}"
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return "no CUDA device"
    except Exception as e:  # noqa: BLE001
        return f"the CUDA driver reports: {e}"
    return None


class DeviceBuffer:
    """A ``memref<..., gpu>`` at run time: device memory from the pool (or a view of it), its
    shape and type.  ``array`` is a zero-stride stand-in of the shape (no host memory), for the
    host ops that only ask for sizes (``memref.dim``)."""

    __slots__ = ("allocation", "address", "array", "type", "_freed", "heap", "base")

    def __init__(self, allocation, shape, t: MemRefType, address: int | None = None, base=None):
        self.allocation = allocation
        self.address = int(allocation) if address is None else address
        self.array = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=tuple(shape),
                                                     strides=(0,) * len(shape))
        self.type = t
        self._freed = False
        self.heap = base is None
        self.base = base

    @property
    def freed(self) -> bool:
        return self._freed if self.base is None else self.base.freed

    @freed.setter
    def freed(self, value: bool) -> None:
        self._freed = value

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.array.shape, dtype=np.int64)) * _dtype(self.type).itemsize

    @property
    def ptr(self) -> int:
        return self.address

    def view_at(self, interp, op, offset: int, shape, t: MemRefType):
        """``memref.view`` of device memory: the same allocation at a byte offset."""
        if self.freed:
            raise interp.fault(op, "view of a freed buffer")
        view = DeviceBuffer(self.allocation, shape, t, self.address + offset, self.base or self)
        if offset < 0 or offset + view.nbytes > self.nbytes:
            raise interp.fault(op, f"memref.view of {t} does not fit in its source")
        return view


class DeviceToken:
    """A ``!gpu.async.token`` on a device: the stream its work went to and an event after it."""

    __slots__ = ("stream", "event")

    def __init__(self, stream, event):
        self.stream = stream
        self.event = event


def _dtype(t: MemRefType):
    from irc.dialects.memref import storage_dtype

    return np.dtype(storage_dtype(t))


class CudaDevice:
    """The simulator's interface (dialects/gpu.py ``Simulator``) on a real device."""

    def __init__(self, device: int = 0, sm: int | None = None):
        reason = unavailable_reason()
        if reason is not None:
            raise DeviceUnavailable(reason)
        import pycuda.driver as cuda
        from pycuda.tools import DeviceMemoryPool

        self.cuda = cuda
        self.device = cuda.Device(device)
        self.context = self.device.make_context()
        major, minor = self.device.compute_capability()
        self.sm = sm if sm is not None else major * 10 + minor
        self.pool = DeviceMemoryPool()
        self.stream = cuda.Stream()
        self.streams = [cuda.Stream() for _ in range(4)]  # for async work without dependencies
        self.next_stream = 0
        self.asynchronous = False
        self.modules: dict = {}
        self.recorded: list | None = None  # with record(): the launches of the calls, for replay()

    def close(self) -> None:
        self.pool.stop_holding()
        self.context.pop()

    # -- memory ---------------------------------------------------------------------------------

    def alloc(self, interp, op, shape, t):
        n = max(1, int(np.prod(shape, dtype=np.int64)) * _dtype(t).itemsize)
        try:
            return DeviceBuffer(self.pool.allocate(n), shape, t)
        except self.cuda.MemoryError:
            raise interp.fault(op, "out of device memory in gpu.alloc") from None

    def dealloc(self, interp, op, buf) -> None:
        self.wait(interp, op, None)
        if buf.freed:
            raise interp.fault(op, "buffer freed twice")
        buf.freed = True
        if self.recorded is None:  # recorded launches still use it
            buf.allocation.free()  # back to the pool

    def memcpy(self, interp, op, dst, src) -> None:
        cuda = self.cuda
        if isinstance(dst, DeviceBuffer) and isinstance(src, DeviceBuffer):
            cuda.memcpy_dtod_async(dst.ptr, src.ptr, src.nbytes, self.stream)
        elif isinstance(dst, DeviceBuffer):
            cuda.memcpy_htod_async(dst.ptr, np.ascontiguousarray(src.array), self.stream)
        else:
            cuda.memcpy_dtoh_async(dst.array, src.ptr, self.stream)
            if not self.asynchronous:
                self.stream.synchronize()  # the host reads it next

    def run(self, interp, op, deps, work):
        """An op's work: synchronous (after all earlier work) or, for an async op, on the stream
        of its first dependency (waiting for the others' events) or on a stream of its own."""
        if not op.results:
            self.wait(interp, op, None)
            work()
            return []
        if deps:
            stream = deps[0].stream
            for d in deps[1:]:
                stream.wait_for_event(d.event)
        else:
            stream = self.streams[self.next_stream % len(self.streams)]
            self.next_stream += 1
        saved, self.stream, self.asynchronous = self.stream, stream, True
        try:
            work()
        finally:
            self.stream, self.asynchronous = saved, False
        event = self.cuda.Event()
        event.record(stream)
        return [DeviceToken(stream, event)]

    def wait(self, interp, op, tokens=None) -> None:
        if tokens is None:
            for stream in (self.stream, *self.streams):
                stream.synchronize()
        else:
            for token in tokens:
                token.event.synchronize()

    # -- kernels --------------------------------------------------------------------------------

    def function(self, interp, op):
        """The pycuda function of ``op``'s kernel, loading the module's PTX on first use."""
        key = (id(interp.module), op.module_name)
        module = self.modules.get(key)
        if module is None:
            from . import render_ptx

            ptx = render_ptx(interp.module, self.sm)
            try:
                module = self.cuda.module_from_buffer(ptx.encode())
            except self.cuda.Error as e:
                raise IRError(f"the CUDA driver rejected the PTX of '@{op.module_name}': {e}", op.loc) from None
            self.modules[key] = module
        return module.get_function(op.kernel_name)

    def launch(self, interp, op, region, grid, block, kernel_args) -> None:
        if kernel_args is None:
            raise interp.fault(op, "gpu.launch runs on a device only once outlined (run gpu-outline)")
        fn = self.function(interp, op)
        params = []
        for value, arg in zip(op.kernel_args, kernel_args):
            t = value.type
            if isinstance(t, MemRefType):
                params.append(np.uintp(arg.ptr))
                params.extend(np.int64(n) for n in arg.array.shape)
            elif isinstance(t, IndexType):
                params.append(np.int64(arg))
            elif isinstance(t, IntegerType):
                params.append(np.dtype(f"int{max(8, t.width)}").type(arg))
            elif isinstance(t, FloatType):
                params.append(np.dtype({"f16": np.float16, "f32": np.float32, "f64": np.float64}[t.kind]).type(arg))
            else:
                raise interp.fault(op, f"a kernel argument of type {t} is not supported by the pycuda driver")
        fn(*params, grid=grid, block=block, stream=self.stream)
        if self.recorded is not None:
            self.recorded.append((fn, params, grid, block))

    def record(self) -> None:
        """Keep the launches of the calls that follow (their buffers are kept alive too), so that
        ``replay`` can time the kernels alone, without the copies of the host function."""
        self.recorded = []

    def replay(self, repeats: int = 10) -> float:
        """Run the recorded launches ``repeats`` times; the mean seconds per repeat (CUDA events)."""
        start, end = self.cuda.Event(), self.cuda.Event()
        self.wait(None, None)
        for fn, params, grid, block in self.recorded:  # warm up
            fn(*params, grid=grid, block=block, stream=self.stream)
        start.record(self.stream)
        for _ in range(repeats):
            for fn, params, grid, block in self.recorded:
                fn(*params, grid=grid, block=block, stream=self.stream)
        end.record(self.stream)
        end.synchronize()
        return start.time_till(end) / 1e3 / repeats


class GPUExecutable:
    """``exe.f(*numpy arrays)``: the host functions of a lowered module run on a CUDA device.

    Arrays are copied to the device and the results back (the copies the host IR spells out)."""

    def __init__(self, lowered, device: CudaDevice | None = None):
        self.module = lowered
        self.device = device or CudaDevice()

    def __getattr__(self, name: str):
        from irc.interpreter import Interpreter

        self.module.function(name)  # a clear error for a name the module lacks

        def call(*args):
            interp = Interpreter(self.module)
            interp.gpu_device = self.device
            return interp.run(name, *args)

        return call


def compile(module, device: CudaDevice | None = None) -> GPUExecutable:
    """Lower ``module`` with the GPU stages and return its functions, run on a CUDA device."""
    from . import lower

    return GPUExecutable(lower(module), device)
