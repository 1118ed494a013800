"""The pycuda driver: run a lowered GPU module's host functions on a CUDA device.

UNTESTED ON HARDWARE: it is written against pycuda's documented API (``pycuda.driver``:
``init``, ``Device``, ``module_from_buffer``, ``Stream``, ``Event``, ``memcpy_htod_async``,
``memcpy_dtoh_async``, ``memcpy_dtod_async``, ``pagelocked_empty``, ``Function.prepare`` and
``prepared_async_call``; ``pycuda.tools.DeviceMemoryPool``), but the machines it was written on
have no GPU and no driver.  pycuda is imported lazily, so importing this module never fails;
``unavailable_reason()`` says why no device can be used.  tests/test_gpu_arrays.py runs it over
a stand-in for pycuda that simulates a device (the kernels in the interpreter's grid simulation).

How it runs a program: the host function (after ``GPU_STAGES``) is straight-line code of
``gpu.alloc``/``gpu.memcpy``/``gpu.launch_func``/``gpu.dealloc``, ``bufferization`` casts and
constants.  ``schedule.build_schedule`` reads it once into typed steps, which ``run_schedule``
replays per call: allocations from a memory pool reused across calls, numpy inputs copied in
through page-locked buffers, device inputs (``DeviceArray``, CUDA array interface, DLPack)
used in place, async steps on the streams the schedule chose, ordered by events, launches with
prepared parameter layouts.  A host function the schedule cannot express is walked by the
reference interpreter with this device in place of the simulator (``gpu_device``): every gpu op
then calls ``alloc``/``memcpy``/``run``/``launch`` here.  The kernels are the PTX of
``render_ptx``, loaded once per module with ``module_from_buffer`` (the JIT log of a rejected
module becomes an ``IRError``).
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


def _host_argument(a, t, what: str):
    """A host argument as the interpreter takes it (checked dtype and shape); a memref
    parameter's numpy array itself (a result may be copied into it)."""
    from irc.interpreter import to_runtime
    from irc.semantics import Buffer

    host = to_runtime(a, t, what)
    return host.array if isinstance(host, Buffer) else host


class CudaDevice:
    """The simulator's interface (dialects/gpu.py ``Simulator``) on a real device."""

    def __init__(self, device: int = 0, sm: int | None = None):
        reason = unavailable_reason()
        if reason is not None:
            raise DeviceUnavailable(reason)
        import pycuda.driver as cuda
        from pycuda.tools import DeviceMemoryPool

        self.device = cuda.Device(device)
        # The device's primary context, the one the CUDA runtime (torch, cupy, JAX) uses: their
        # pointers are then valid in irc's kernels, and irc's in theirs.
        self.context = self.device.retain_primary_context()
        self.context.push()
        major, minor = self.device.compute_capability()
        self._setup(cuda, DeviceMemoryPool(), device, sm if sm is not None else major * 10 + minor)

    @classmethod
    def over(cls, cuda, pool, ordinal: int = 0, sm: int = 90) -> CudaDevice:
        """A device over a given pycuda-like module and memory pool, with no context of its own:
        for the tests' stand-ins for pycuda, which record or simulate what the driver asks for."""
        dev = cls.__new__(cls)
        dev._setup(cuda, pool, ordinal, sm)
        return dev

    def _setup(self, cuda, pool, ordinal: int, sm: int) -> None:
        self.cuda = cuda
        self.ordinal = ordinal
        self.sm = sm
        self.pool = pool
        self.stream = cuda.Stream()
        self.streams = [cuda.Stream() for _ in range(4)]  # for async work without dependencies
        self.next_stream = 0
        self.asynchronous = False
        self.modules: dict = {}
        self.recorded: list | None = None  # with record(): the launches of the calls, for replay()
        self.recorded_memory: list = []  # the allocations those launches use, kept alive
        self.staging: dict = {}  # (schedule, slot) -> a page-locked buffer for that input's copies
        self.prepared: dict = {}  # (module, kernel) -> the pycuda function, prepared for its parameters

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
        if self.recorded is None:
            buf.allocation.free()  # back to the pool
        else:  # recorded launches still use it
            self.recorded_memory.append(buf.allocation)

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
        return self.kernel(interp.module, op.module_name, op.kernel_name, op.loc)

    def kernel(self, lowered, module_name: str, kernel_name: str, loc=None):
        """The pycuda function ``kernel_name`` of a lowered module, its PTX loaded once."""
        key = (id(lowered), module_name)
        module = self.modules.get(key)
        if module is None:
            from . import render_ptx

            ptx = render_ptx(lowered, self.sm)
            try:
                module = self.cuda.module_from_buffer(ptx.encode())
            except self.cuda.Error as e:
                raise IRError(f"the CUDA driver rejected the PTX of '@{module_name}': {e}", loc) from None
            self.modules[key] = module
        return module.get_function(kernel_name)

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
            self.recorded.append((fn, params, grid, block, False))

    # -- device arrays ----------------------------------------------------------------------------

    def stream_handle(self) -> int:
        """The handle of the stream synchronous work goes to (a DLPack producer orders its work before it)."""
        return int(self.stream.handle)

    def synchronize_context(self) -> None:
        self.cuda.Context.synchronize()

    def to_device(self, a):
        """A ``DeviceArray`` holding a copy of numpy array ``a`` (memory from the pool)."""
        from .arrays import DeviceArray

        a = np.ascontiguousarray(a)
        allocation = self._allocate(a.nbytes, "to_device")
        self.cuda.memcpy_htod(int(allocation), a)
        return DeviceArray(allocation, a.shape, a.dtype, self)

    def copy_to_host(self, array) -> np.ndarray:
        """``DeviceArray.get()``: after the work issued so far, a numpy copy."""
        self.wait(None, None)
        out = np.empty(array.shape, array.dtype)
        if out.nbytes:
            self.cuda.memcpy_dtoh(out, array.ptr)
        return out

    def _allocate(self, nbytes: int, what: str):
        try:
            return self.pool.allocate(max(1, nbytes))
        except self.cuda.MemoryError:
            raise MemoryError(f"out of device memory ({nbytes} bytes for {what})") from None

    # -- the schedule of a host function (runtime/gpu/schedule.py), replayed ---------------------

    def run_schedule(self, lowered, sched, args):
        """Call a host function through its schedule: numpy arguments are copied in through
        page-locked buffers (one per input, kept for the next call) and the results copied back
        into new numpy arrays; device arrays (``DeviceArray``, CUDA array interface, DLPack on
        the GPU) are read where they are, and when any argument is one the results stay on
        the device and come back as ``DeviceArray``s."""
        from . import schedule as S
        from .arrays import DeviceArray, device_view

        if len(args) != len(sched.params):
            raise TypeError(f"@{sched.name} takes {len(sched.params)} argument(s), got {len(args)}")
        views, hosts = [None] * len(args), [None] * len(args)
        for i, (a, (pname, t, shape, dtype)) in enumerate(zip(args, sched.params)):
            if type(a) is DeviceArray and a.device is self and a.shape == shape and a.dtype == dtype:
                views[i] = a  # the common case, checked here without device_view's work
                continue
            what = f"argument {i} ('{pname}') of @{sched.name}"
            view = device_view(a, what, shape, dtype, self)
            if view is None:
                hosts[i] = _host_argument(a, t, what)
            else:
                views[i] = view
        on_device = views.count(None) < len(views)
        slots: list = [None] * len(sched.slots)
        owned: dict = {}  # slot -> the pool allocation this call made for it
        borrowed, kept, skipped = set(), set(), set()
        infos = sched.slots
        for s, info in enumerate(infos):
            if info.kind == "arg":
                slots[s] = hosts[info.param] if views[info.param] is None else views[info.param]
        if on_device:
            for r in sched.results:
                d = r.device_slot
                if d >= 0 and d not in kept and not (infos[d].borrowable and views[infos[d].param]):
                    kept.add(d)
                    skipped.add(r.copy_step)
        events: list = [None] * sched.tokens
        needs_event = sched.joins_needing_events
        cuda = self.cuda
        alloc_, view_, copy_, launch_ = S.Alloc, S.View, S.Copy, S.Launch
        for k, step in enumerate(sched.steps):
            kind = type(step)
            if kind is alloc_:
                info = infos[step.slot]
                if info.borrowable and views[info.param] is not None:
                    slots[step.slot] = views[info.param].ptr  # the caller's memory: no copy in
                    borrowed.add(step.slot)
                else:
                    owned[step.slot] = self._allocate(info.nbytes, f"@{sched.name}")
                    slots[step.slot] = int(owned[step.slot])
                continue
            if kind is view_:
                info = infos[step.slot]
                slots[step.slot] = slots[info.base] + info.offset
                continue
            if kind is copy_:
                if k in skipped or (step.direction == "htod" and step.dst in borrowed):
                    continue
                stream = self._schedule_stream(step.stream, step.waits, events)
                src, dst = slots[step.src], slots[step.dst]
                if step.direction == "htod" and isinstance(src, np.ndarray):
                    cuda.memcpy_htod_async(dst, self._staged(sched, step.src, src), stream)
                elif step.direction == "htod":  # a device argument into a buffer a kernel writes
                    cuda.memcpy_dtod_async(dst, src.ptr, infos[step.dst].nbytes, stream)
                elif step.direction == "dtoh" and dst is not None and not isinstance(dst, np.ndarray):
                    cuda.memcpy_dtod_async(dst.ptr, src, infos[step.src].nbytes, stream)  # a device out-parameter
                elif step.direction == "dtoh":
                    if dst is None:
                        info = infos[step.dst]
                        dst = slots[step.dst] = np.empty(info.shape, info.dtype)
                    cuda.memcpy_dtoh_async(dst, src, stream)
                else:
                    cuda.memcpy_dtod_async(dst, src, infos[step.src].nbytes, stream)
            elif kind is launch_:
                stream = self._schedule_stream(step.stream, step.waits, events)
                params = []
                for what, x in step.args:
                    if what == "slot":
                        params.append(slots[x])
                        params.extend(infos[x].shape)
                    else:
                        params.append(x)
                fn = self._prepared(lowered, step)
                fn.prepared_async_call(step.grid, step.block, stream, *params)
                if self.recorded is not None:
                    self.recorded.append((fn, params, step.grid, step.block, True))
            else:  # Join
                stream = self._schedule_stream(step.stream, step.waits, events)
            if step.token in needs_event:
                events[step.token] = self._event(stream)
        self._wait_streams(sched.streams)  # the host reads nothing before this
        for s in sched.frees:
            if s in borrowed or s in kept:
                continue
            if self.recorded is not None:  # recorded launches still use it
                self.recorded_memory.append(owned.pop(s))
            else:
                owned.pop(s).free()
        out = []
        for r in sched.results:
            if r.param >= 0:
                out.append(args[r.param])
            elif r.slot < 0:
                out.append(r.value)
            elif r.device_slot in kept:
                info = infos[r.device_slot]
                out.append(DeviceArray(owned[r.device_slot], info.shape, info.dtype, self))
            else:
                host = slots[r.slot]
                if host is None:  # nothing was copied into it
                    info = infos[r.slot]
                    host = np.empty(info.shape, info.dtype)
                out.append(self.to_device(host) if on_device else host)
        return out[0] if len(out) == 1 else tuple(out) if out else None

    def _wait_streams(self, indices) -> None:
        for i in indices:
            (self.stream if i < 0 else self.streams[i]).synchronize()

    def _schedule_stream(self, index: int, waits, events):
        if index < 0:  # synchronous: after everything issued before it
            self.wait(None, None)
            return self.stream
        stream = self.streams[index]
        for d in waits:
            if events[d] is not None:
                stream.wait_for_event(events[d])
        return stream

    def _event(self, stream):
        event = self.cuda.Event()
        event.record(stream)
        return event

    def _staged(self, sched, slot: int, array: np.ndarray):
        """``array`` copied into the page-locked buffer of this input (made on first use)."""
        key = (id(sched), slot)
        buf = self.staging.get(key)
        if buf is None:
            buf = self.staging[key] = self.cuda.pagelocked_empty(array.shape, array.dtype)
        np.copyto(buf, array)
        return buf

    def _prepared(self, lowered, launch):
        key = (id(lowered), launch.module, launch.kernel)
        fn = self.prepared.get(key)
        if fn is None:
            fn = self.kernel(lowered, launch.module, launch.kernel)
            fn.prepare(launch.signature)
            self.prepared[key] = fn
        return fn

    def record(self) -> None:
        """Keep the launches of the calls that follow (their buffers are kept alive too), so that
        ``replay`` can time the kernels alone, without the copies of the host function."""
        self.recorded = []
        self.recorded_memory = []

    def replay(self, repeats: int = 10) -> float:
        """Run the recorded launches ``repeats`` times; the mean seconds per repeat (CUDA events)."""
        start, end = self.cuda.Event(), self.cuda.Event()
        self.wait(None, None)

        def launch_all():
            for fn, params, grid, block, prepared in self.recorded:
                if prepared:
                    fn.prepared_async_call(grid, block, self.stream, *params)
                else:
                    fn(*params, grid=grid, block=block, stream=self.stream)

        launch_all()  # warm up
        start.record(self.stream)
        for _ in range(repeats):
            launch_all()
        end.record(self.stream)
        end.synchronize()
        return start.time_till(end) / 1e3 / repeats


class GPUExecutable:
    """``exe.f(*arrays)``: the host functions of a lowered module run on a CUDA device.

    A host function that is straight-line code over static shapes (what the GPU stages make)
    runs from its schedule (``runtime/gpu/schedule.py``: no interpreter per call), taking numpy
    arrays (copied in through page-locked buffers, results copied back into new arrays) or
    device arrays (read in place; the results then stay on the device as ``DeviceArray``s).
    Any other host function is run by the interpreter with this device behind its gpu ops, on
    numpy arrays only."""

    def __init__(self, lowered, device: CudaDevice | None = None):
        self.module = lowered
        self.device = device or default_device()
        self.schedules: dict = {}  # name -> Schedule, or the NotSchedulable reason

    def schedule(self, name: str):
        """The schedule of host function ``name``, or why it has none (a string)."""
        from .schedule import NotSchedulable, build_schedule

        if name not in self.schedules:
            try:
                self.schedules[name] = build_schedule(self.module, name)
            except NotSchedulable as e:
                self.schedules[name] = str(e)
        return self.schedules[name]

    def __getattr__(self, name: str):
        from irc.interpreter import Interpreter

        if name.startswith("__"):
            raise AttributeError(name)
        self.module.function(name)  # a clear error for a name the module lacks
        sched = self.schedule(name)
        if not isinstance(sched, str):
            return lambda *args: self.device.run_schedule(self.module, sched, args)

        def call(*args):
            from .arrays import device_view

            for i, (a, t) in enumerate(zip(args, self.module.function(name).function_type.inputs)):
                if getattr(t, "shape", None) is not None and device_view(
                        a, f"argument {i} of @{name}", tuple(t.shape), _dtype(t), self.device) is not None:
                    raise TypeError(f"argument {i} of @{name} is a device array, but @{name} runs in the "
                                    f"interpreter ({sched}): pass numpy arrays")
            interp = Interpreter(self.module)
            interp.gpu_device = self.device
            return interp.run(name, *args)

        return call


_DEFAULT: CudaDevice | None = None


def default_device() -> CudaDevice:
    """The process's device (device 0, one context), made on first use: what ``irc.compile(m,
    target="gpu")`` and ``irc.gpu.to_device`` share, so that their arrays meet."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = CudaDevice()
    return _DEFAULT


def to_device(a):
    """``irc.gpu.to_device``: a copy of numpy array ``a`` on the default device."""
    return default_device().to_device(a)


def compile(module, device: CudaDevice | None = None) -> GPUExecutable:
    """Lower ``module`` with the GPU stages and return its functions, run on a CUDA device."""
    from . import lower

    return GPUExecutable(lower(module), device)
