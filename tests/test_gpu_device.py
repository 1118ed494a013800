"""The pycuda driver on a real CUDA device: skipped (with the reason) where there is none.

UNTESTED SO FAR: written on machines without a GPU; these tests have never run unskipped."""

from __future__ import annotations

import numpy as np
import pytest
from irc.runtime.gpu import driver

import irc
from irc.diagnostics import InterpreterError

REASON = driver.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no CUDA device: {REASON}")


@pytest.fixture(scope="module")
def device():
    dev = driver.CudaDevice()
    yield dev
    dev.close()


@pytest.mark.parametrize("name", ["tanh_rowsum", "mlp_softmax", "matmul_transposed_ragged", "row_stats",
                                  "reductions_over_any_axes", "sigmoid_fma_1d"])
def test_device_computes_the_interpreters_results(device, name):
    from test_gpu import TENSOR_PROGRAMS, _arguments, _close

    source = irc.parse(TENSOR_PROGRAMS[name])
    args = _arguments(source.functions[0], seed=11)
    exe = driver.compile(source, device)
    _close(irc.interpret(source, "f", *args), exe.f(*args))
    _close(irc.interpret(source, "f", *args), exe.f(*args))  # the second call reuses the pool and module


def test_launch_the_device_cannot_run_is_a_fault(device):
    from test_gpu import ROWSUM

    text = ROWSUM.replace("%c8 = arith.constant 8 : index\n  %d", "%c8 = arith.constant 2048 : index\n  %d")
    with pytest.raises(InterpreterError, match="outside what a device runs"):
        driver.GPUExecutable(irc.parse(text), device).main(np.zeros((4, 8), np.float32), np.zeros(4, np.float32))


def test_device_arrays_in_and_out(device):
    """irc.gpu.to_device inputs: the result stays on the device (a DeviceArray) and equals the
    interpreter's; torch CUDA tensors and cupy arrays (where installed) are read in place."""
    from test_gpu import TENSOR_PROGRAMS, _arguments, _close

    source = irc.parse(TENSOR_PROGRAMS["mlp_softmax"])
    args = _arguments(source.functions[0], seed=12)
    exe = driver.compile(source, device)
    expected = irc.interpret(source, "f", *args)
    result = exe.f(*[device.to_device(a) for a in args])
    assert result.shape == expected.shape and result.dtype == expected.dtype
    _close(expected, result.get())
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        _close(expected, exe.f(*[torch.from_numpy(a).cuda() for a in args]).get())
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        _close(expected, exe.f(*[cupy.asarray(a) for a in args]).get())
