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
