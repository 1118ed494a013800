"""Device arrays, zero-copy inputs and the replayed host schedule of the pycuda driver, without a
GPU: a stand-in for pycuda that *simulates* the device (device memory is a numpy heap addressed
by integers, copies move bytes, a launch runs the kernel in the interpreter's grid simulation
on views of that heap), so the driver's results are checked against numpy and the interpreter,
and its calls (copies, page-locked buffers, launches) are recorded.  It checks the driver's own
Python, not CUDA: nothing here has run on a device."""

from __future__ import annotations

import ctypes
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from irc.runtime import gpu
from irc.runtime.gpu import arrays, driver
from irc.runtime.gpu.schedule import NotSchedulable, build_schedule

import irc
from irc.semantics import Buffer
from irc.types import MemRefType

sys.path.insert(0, str(Path(__file__).parent))
from test_gpu import ROWSUM, TENSOR_PROGRAMS, _close  # noqa: E402

BASE = 1 << 32  # device addresses start here (a null or host pointer would be caught)


class FakeCuda:
    """A pycuda stand-in: the calls of ``pycuda.driver`` the driver makes, on a simulated device."""

    class MemoryError(Exception):
        pass

    class Error(Exception):
        pass

    def __init__(self, heap_bytes: int = 1 << 24):
        self.heap = np.zeros(heap_bytes, np.uint8)
        self.top = 0
        self.calls: list = []
        self.lowered = None  # the module whose kernels module_from_buffer "loads"
        fake = self

        class Allocation:
            def __init__(self, n):
                fake.top = -(-fake.top // 256) * 256
                if fake.top + n > len(fake.heap):
                    raise FakeCuda.MemoryError()
                self.address = BASE + fake.top
                fake.top += n
                fake.calls.append(("alloc", n))

            def __int__(self):
                return self.address

            def free(self):
                fake.calls.append(("free",))

        class Stream:
            handle = 7

            def synchronize(self):
                pass

            def wait_for_event(self, event):
                fake.calls.append(("wait_for_event",))

        class Event:
            def record(self, stream=None):
                fake.calls.append(("event",))

            def synchronize(self):
                pass

            def time_till(self, other):
                return 2.0  # milliseconds

        self.Allocation, self.Stream, self.Event = Allocation, Stream, Event
        self.Context = types.SimpleNamespace(synchronize=lambda: fake.calls.append(("context_sync",)))
        self.pool = types.SimpleNamespace(allocate=Allocation)

    def bytes_at(self, address: int, n: int) -> np.ndarray:
        assert address >= BASE and address - BASE + n <= len(self.heap), "a device access out of the heap"
        return self.heap[address - BASE:address - BASE + n]

    def array_at(self, address: int, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.bytes_at(address, n).view(dtype).reshape(shape)

    # -- copies ------------------------------------------------------------------------------
    def memcpy_htod_async(self, dst, src, stream=None):
        self.calls.append(("htod", src.nbytes, getattr(src, "pinned", False)))
        self.bytes_at(int(dst), src.nbytes)[:] = np.ascontiguousarray(src).view(np.uint8).ravel()

    def memcpy_dtoh_async(self, dst, src, stream=None):
        self.calls.append(("dtoh", dst.nbytes))
        dst.reshape(-1).view(np.uint8)[:] = self.bytes_at(int(src), dst.nbytes)

    def memcpy_dtod_async(self, dst, src, n, stream=None):
        self.calls.append(("dtod", n))
        self.bytes_at(int(dst), n)[:] = self.bytes_at(int(src), n).copy()

    def memcpy_htod(self, dst, src):
        self.memcpy_htod_async(dst, src)

    def memcpy_dtoh(self, dst, src):
        self.memcpy_dtoh_async(dst, src)

    def pagelocked_empty(self, shape, dtype):
        self.calls.append(("pagelocked", tuple(shape)))
        return PinnedArray(shape, dtype)

    # -- kernels -----------------------------------------------------------------------------
    def module_from_buffer(self, ptx: bytes):
        self.calls.append(("module",))
        assert ptx.startswith(b"//")  # PTX text, as render_ptx makes it
        kernels = {k.sym_name: k for mod in self.lowered.body.ops if mod.name == "gpu.module"
                   for k in mod.body.ops if k.name == "gpu.func"}
        fake = self
        return types.SimpleNamespace(get_function=lambda name: FakeFunction(fake, kernels[name]))


class PinnedArray(np.ndarray):
    """What pagelocked_empty returns: a numpy array marked as page-locked."""

    def __new__(cls, shape, dtype):
        out = np.empty(shape, dtype).view(cls)
        out.pinned = True
        return out


class FakeFunction:
    """A kernel: its launch runs the kernel in the grid simulation, on views of the heap."""

    def __init__(self, fake: FakeCuda, kernel):
        self.fake, self.kernel, self.signature = fake, kernel, None

    def prepare(self, signature):
        self.signature = signature

    def prepared_async_call(self, grid, block, stream, *params):
        assert self.signature is not None and len(params) == len(self.signature)
        struct.pack(self.signature, *params)  # as pycuda packs them: every parameter fits its format
        self._launch(grid, block, params)

    def __call__(self, *params, grid, block, stream):
        self._launch(grid, block, params)

    def _launch(self, grid, block, params):
        from irc.dialects.gpu_simulator import SIMULATOR
        from irc.dialects.memref import storage_dtype

        from irc.interpreter import Interpreter

        self.fake.calls.append(("launch", self.kernel.sym_name, tuple(grid), tuple(block)))
        args, it = [], iter(params)
        for t in self.kernel.function_type.inputs:
            if isinstance(t, MemRefType):
                address = int(next(it))
                shape = tuple(int(next(it)) for _ in range(t.rank))
                args.append(Buffer(self.fake.array_at(address, shape, storage_dtype(t)), t))
            else:
                value = next(it)
                args.append(value.item() if hasattr(value, "item") else value)
        interp = Interpreter(self.fake.lowered)
        SIMULATOR.launch(interp, self.kernel, self.kernel.body, tuple(grid), tuple(block), args)


def _device(fake: FakeCuda, ordinal: int = 0) -> driver.CudaDevice:
    return driver.CudaDevice.over(fake, fake.pool, ordinal)


def _compile(text: str, fake: FakeCuda, device=None):
    exe = driver.GPUExecutable(gpu.lower(irc.parse(text)), device or _device(fake))
    fake.lowered = exe.module
    return exe


def _inputs(text, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, t.shape).astype(np.float32) for t in irc.parse(text).functions[0].function_type.inputs]


@pytest.fixture
def no_host_interpreter(monkeypatch):
    """The host function must not be interpreted (kernels still are: that is the simulated device)."""
    def refuse(self, name, *args):
        raise AssertionError(f"the host function @{name} was interpreted")

    monkeypatch.setattr(irc.interpreter.Interpreter, "run", refuse)


# -- the schedule --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp_softmax", "row_stats", "matmul_transposed_ragged", "broadcasts_3d"])
def test_schedule_replay_with_numpy_arrays_equals_the_source(name, no_host_interpreter):
    text = TENSOR_PROGRAMS[name]
    args = _inputs(text, seed=1)
    fake = FakeCuda()
    exe = _compile(text, fake)
    assert not isinstance(exe.schedule("f"), str), exe.schedule("f")
    got = exe.f(*args)
    fake.calls.clear()
    again = exe.f(*args)  # the page-locked buffers of the inputs are reused
    _close(got, again)
    kinds = [c[0] for c in fake.calls]
    assert "pagelocked" not in kinds and "module" not in kinds
    htod = [c for c in fake.calls if c[0] == "htod"]
    assert len(htod) == len(args) and all(pinned for _, _, pinned in htod)
    assert kinds.count("alloc") == kinds.count("free")
    results = got if isinstance(got, tuple) else (got,)
    assert all(isinstance(r, np.ndarray) and not isinstance(r, PinnedArray) for r in results)


@pytest.mark.parametrize("name", ["mlp_softmax", "row_stats", "matmul_transposed_ragged", "broadcasts_3d"])
def test_schedule_replay_against_the_interpreter(name):
    text = TENSOR_PROGRAMS[name]
    args = _inputs(text, seed=1)
    fake = FakeCuda()
    _close(irc.interpret(irc.parse(text), "f", *args), _compile(text, fake).f(*args))


def test_synchronous_host_code_with_buffer_arguments():
    """A hand-written host function (memref parameters, synchronous copies and launch): the
    result is copied into the caller's buffer."""
    fake = FakeCuda()
    exe = driver.GPUExecutable(irc.parse(ROWSUM), _device(fake))
    fake.lowered = exe.module
    assert not isinstance(exe.schedule("main"), str)
    a = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    out = np.zeros(4, np.float32)
    exe.main(a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-6)


def test_a_device_out_parameter_receives_the_result_on_the_device():
    fake = FakeCuda()
    exe = driver.GPUExecutable(irc.parse(ROWSUM), _device(fake))
    fake.lowered = exe.module
    a = np.random.default_rng(9).standard_normal((4, 8)).astype(np.float32)
    out = exe.device.to_device(np.zeros(4, np.float32))
    exe.main(exe.device.to_device(a), out)
    np.testing.assert_allclose(out.get(), a.sum(axis=1), rtol=1e-6)


def test_schedule_streams_follow_the_tokens():
    """Each async step runs on the stream of a dependency that was that stream's last work, or
    on another stream after events: the three row kernels of row_stats (all reading the one
    input) go to three streams; every dependency is ordered by its stream or waited for."""
    from irc.runtime.gpu.schedule import Copy, Join, Launch

    lowered = gpu.lower(irc.parse(TENSOR_PROGRAMS["row_stats"]))
    sched = build_schedule(lowered, "f")
    ops = [op for op in lowered.function("f").body.entry.ops if op.results and op.name in
           ("gpu.memcpy", "gpu.launch_func", "gpu.wait")]
    steps = [s for s in sched.steps if isinstance(s, (Copy, Launch, Join))]
    assert len(ops) == len(steps)
    token_of = {op.results[0]: s.token for op, s in zip(ops, steps)}
    stream_of = {s.token: s.stream for s in steps}
    last: dict = {}  # stream -> the last token issued on it
    for op, s in zip(ops, steps):
        for dep in op.operands[:op.num_deps]:
            t = token_of[dep]
            assert t in s.waits or (stream_of[t] == s.stream and last[s.stream] == t)
            if t in s.waits:
                assert t in sched.joins_needing_events
        last[s.stream] = s.token
    launches = [s for s in steps if isinstance(s, Launch)]
    assert len({s.stream for s in launches}) == 3


def test_host_function_that_is_not_a_schedule_runs_in_the_interpreter():
    text = """
func.func @f(%a: tensor<8xf32>, %s: f32) -> tensor<8xf32> {
  %b = graph.splat %s : f32 to tensor<8xf32>
  %c = arith.mulf %a, %b : tensor<8xf32>
  func.return %c : tensor<8xf32>
}"""
    lowered = gpu.lower(irc.parse(text))
    with pytest.raises(NotSchedulable, match="scalar parameter"):
        build_schedule(lowered, "f")
    fake = FakeCuda()
    exe = _compile(text, fake)
    a = np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(exe.f(a, np.float32(3)), a * 3)
    with pytest.raises(TypeError, match="argument 0 of @f is a device array.*interpreter"):
        exe.f(exe.device.to_device(a), np.float32(3))


# -- device arrays -----------------------------------------------------------------------------------


def test_to_device_get_and_device_results(no_host_interpreter):
    text = TENSOR_PROGRAMS["mlp_softmax"]
    args = _inputs(text, seed=3)
    fake = FakeCuda()
    exe = _compile(text, fake)
    expected = exe.f(*args)
    on_device = [exe.device.to_device(a) for a in args]
    assert all(d.shape == a.shape and d.dtype == a.dtype for d, a in zip(on_device, args))
    np.testing.assert_array_equal(on_device[1].get(), args[1])
    fake.calls.clear()
    result = exe.f(*on_device)
    assert isinstance(result, arrays.DeviceArray) and result.shape == (16, 10) and result.dtype == np.float32
    kinds = [c[0] for c in fake.calls]
    assert "htod" not in kinds and "dtod" not in kinds and "dtoh" not in kinds  # no copy in, none out
    assert kinds.count("alloc") == kinds.count("free") + 1  # the result's memory went to the caller
    _close(expected, result.get())
    assert result.__cuda_array_interface__["data"][0] == result.ptr
    second = exe.f(*on_device)
    _close(expected, second.get())
    assert second.ptr != result.ptr  # each call's result is its own memory


def test_irc_gpu_to_device_uses_the_default_device(monkeypatch):
    fake = FakeCuda()
    device = _device(fake)
    monkeypatch.setattr(driver, "_DEFAULT", device)
    x = irc.gpu.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert isinstance(x, irc.gpu.DeviceArray) and x.device is device
    np.testing.assert_array_equal(x.get(), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_device_and_host_arguments_mixed():
    text = TENSOR_PROGRAMS["tanh_rowsum"]
    a, b = _inputs(text, seed=4)
    fake = FakeCuda()
    exe = _compile(text, fake)
    result = exe.f(exe.device.to_device(a), b)
    assert isinstance(result, arrays.DeviceArray)
    _close(irc.interpret(irc.parse(text), "f", a, b), result.get())


class CudaArrayInterfaceArray:
    """A cupy/torch-like object: memory on the simulated device, shown by __cuda_array_interface__."""

    def __init__(self, fake: FakeCuda, a: np.ndarray, strides=None, typestr=None, stream=None):
        self.allocation = fake.Allocation(a.nbytes)
        fake.bytes_at(int(self.allocation), a.nbytes)[:] = a.ravel(order="K").view(np.uint8)  # memory order
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": typestr or a.dtype.str, "strides": strides,
                                         "data": (int(self.allocation), False), "version": 3, "stream": stream}


class DLPackArray:
    """A JAX/torch-like object with a DLPack capsule (built with ctypes) for memory on the device."""

    def __init__(self, fake: FakeCuda, a: np.ndarray, device_type: int = arrays.KDL_CUDA):
        self.device_type = device_type
        if device_type == arrays.KDL_CUDA:
            self.allocation = fake.Allocation(a.nbytes)
            fake.bytes_at(int(self.allocation), a.nbytes)[:] = a.view(np.uint8).ravel()
            data = int(self.allocation)
        else:
            self.host = a
            data = a.ctypes.data
        self.shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        self.managed = arrays.DLManagedTensor()
        t = self.managed.dl_tensor
        t.data, t.ndim, t.shape, t.byte_offset = data, a.ndim, self.shape, 0
        t.device.device_type, t.device.device_id = device_type, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = {"f": 2, "i": 0, "u": 1}[a.dtype.kind], a.dtype.itemsize * 8, 1
        self.streams_asked: list = []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        self.streams_asked.append(stream)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_cuda_array_interface_and_dlpack_inputs_are_not_copied(no_host_interpreter):
    text = TENSOR_PROGRAMS["tanh_rowsum"]
    a, b = _inputs(text, seed=5)
    fake = FakeCuda()
    exe = _compile(text, fake)
    expected = exe.f(a, b)
    dl = DLPackArray(fake, b)
    fake.calls.clear()
    result = exe.f(CudaArrayInterfaceArray(fake, a), dl)
    kinds = [c[0] for c in fake.calls]
    assert "htod" not in kinds and "dtod" not in kinds
    assert dl.streams_asked == [exe.device.stream_handle()]  # the producer orders its work before ours
    _close(expected, result.get())


def test_pending_work_on_a_producer_stream_is_waited_for():
    text = TENSOR_PROGRAMS["tanh_rowsum"]
    a, b = _inputs(text, seed=6)
    fake = FakeCuda()
    exe = _compile(text, fake)
    exe.f(CudaArrayInterfaceArray(fake, a, stream=1234), b)
    assert ("context_sync",) in fake.calls


@pytest.mark.parametrize("make,error,message", [
    (lambda f, a: DLPackArray(f, a, device_type=arrays.KDL_CPU), TypeError, r"'a'.*DLPack tensor on the CPU"),
    (lambda f, a: CudaArrayInterfaceArray(f, a.astype(np.float64)), TypeError, r"'a'.*dtype float32, got float64"),
    (lambda f, a: CudaArrayInterfaceArray(f, a[:2]), ValueError, r"'a'.*shape \[4, 8\], got \[2, 8\]"),
    (lambda f, a: CudaArrayInterfaceArray(f, np.asfortranarray(a), strides=(4, 16)), ValueError,
     r"'a'.*C-contiguous"),
    (lambda f, a: _device(f).to_device(a), ValueError, r"'a'.*another device context"),
])
def test_unusable_device_inputs_are_clear_errors_naming_the_parameter(make, error, message):
    text = TENSOR_PROGRAMS["tanh_rowsum"]
    a, b = _inputs(text, seed=7)
    fake = FakeCuda()
    exe = _compile(text, fake)
    with pytest.raises(error, match=message):
        exe.f(make(fake, a), b)


def test_only_buffers_no_kernel_writes_may_borrow_the_callers_memory():
    sched = build_schedule(irc.parse(ROWSUM), "main")
    device_slots = [s for s in sched.slots if s.kind == "device"]
    assert [s.borrowable for s in device_slots] == [True, False]  # the input is only read; the output written


def test_record_and_replay_time_the_kernels_of_a_scheduled_call():
    """What benchmarks/gpu.py does: record a call's launches (their memory kept), replay them."""
    text = TENSOR_PROGRAMS["mlp_softmax"]
    fake = FakeCuda()
    exe = _compile(text, fake)
    exe.device.record()
    exe.f(*_inputs(text, seed=8))
    kernels = [c[1] for c in fake.calls if c[0] == "launch"]
    assert len(exe.device.recorded) == len(kernels) == 4
    assert ("free",) not in fake.calls  # the recorded launches' buffers stay allocated
    fake.calls.clear()
    assert exe.device.replay(repeats=3) == pytest.approx(2e-3 / 3)
    assert [c[1] for c in fake.calls if c[0] == "launch"] == kernels * 4  # a warm-up, then three repeats


def test_a_launch_the_device_cannot_run_is_reported_at_the_op():
    """The schedule leaves such a launch to the interpreter's path, which names the op."""
    text = ROWSUM.replace("%c8 = arith.constant 8 : index\n  %d", "%c8 = arith.constant 2048 : index\n  %d")
    with pytest.raises(NotSchedulable, match="outside what a device runs"):
        build_schedule(irc.parse(text), "main")
    fake = FakeCuda()
    exe = driver.GPUExecutable(irc.parse(text), _device(fake))
    fake.lowered = exe.module
    with pytest.raises(irc.diagnostics.InterpreterError, match="outside what a device runs"):
        exe.main(np.zeros((4, 8), np.float32), np.zeros(4, np.float32))
    assert not [c for c in fake.calls if c[0] == "launch"]
