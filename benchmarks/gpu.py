#!/usr/bin/env python3
"""GPU workloads (issue 16): irc's own kernels beside torch eager, torch.compile, cupy and jax.

NOT RUN YET: written on machines with no GPU; every figure it prints comes from the run that
prints it, and on a machine without a CUDA device it says so and exits without figures.

* copy       device-to-device copy bandwidth of 2^26 f32 (pycuda memcpy_dtod), the roof the
             memory-bound workloads are measured against;
* sigmoid    sigmoid(a*b + c) over 2^26 f32, one fused kernel;
* gelu       tanh-GELU over 2^26 f32;
* softmax    row softmax of 8192 x 8192 f32;
* matmul     4096^3 f32, irc's own kernel (no cuBLAS);
* overhead   the cost of a call of a compiled function with 4 numpy arrays (copies included)
             and with 4 device arrays (irc.gpu.to_device; the goal of issue 16 is 20 us).

irc's kernel times are the kernels alone: the host function runs once (with its copies) while
the driver records its launches, then the launches are replayed and timed with CUDA events
(``CudaDevice.record``/``replay``), the way the peers are timed on device-resident arrays.
The peers that are not installed are left out, and the run says which.

    python benchmarks/gpu.py            # the full sizes
    python benchmarks/gpu.py --quick    # small sizes, few repeats (a smoke test)
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from irc.runtime import gpu
from irc.runtime.gpu import driver

import irc


def programs(n: int, rows: int, m: int) -> dict[str, tuple[str, list]]:
    v = f"tensor<{n}xf32>"
    r = f"tensor<{rows}x{rows}xf32>"
    mm = f"tensor<{m}x{m}xf32>"
    return {
        "sigmoid": (f"""
func.func @f(%a: {v}, %b: {v}, %c: {v}) -> {v} {{
  %m = arith.mulf %a, %b : {v}
  %s = arith.addf %m, %c : {v}
  %n = arith.negf %s : {v}
  %e = math.exp %n : {v}
  %one = arith.constant dense<1.0> : {v}
  %d = arith.addf %one, %e : {v}
  %y = arith.divf %one, %d : {v}
  func.return %y : {v}
}}""", [(n,)] * 3),
        "gelu": (f"""
func.func @f(%x: {v}) -> {v} {{
  %x2 = arith.mulf %x, %x : {v}
  %x3 = arith.mulf %x2, %x : {v}
  %k = arith.constant dense<0.044715> : {v}
  %kx3 = arith.mulf %k, %x3 : {v}
  %in = arith.addf %x, %kx3 : {v}
  %s = arith.constant dense<0.7978845608> : {v}
  %t = arith.mulf %s, %in : {v}
  %th = math.tanh %t : {v}
  %one = arith.constant dense<1.0> : {v}
  %p = arith.addf %one, %th : {v}
  %half = arith.constant dense<0.5> : {v}
  %hx = arith.mulf %half, %x : {v}
  %y = arith.mulf %hx, %p : {v}
  func.return %y : {v}
}}""", [(n,)]),
        "softmax": (f"""
func.func @f(%x: {r}) -> {r} {{
  %y = graph.softmax %x {{axis = 1}} : {r}
  func.return %y : {r}
}}""", [(rows, rows)]),
        "matmul": (f"""
func.func @f(%a: {mm}, %b: {mm}) -> {mm} {{
  %c = graph.matmul %a, %b : ({mm}, {mm}) -> {mm}
  func.return %c : {mm}
}}""", [(m, m)] * 2),
    }


def reference(name: str, args):
    if name == "sigmoid":
        return 1 / (1 + np.exp(-(args[0] * args[1] + args[2])))
    if name == "gelu":
        x = args[0]
        return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    if name == "softmax":
        e = np.exp(args[0] - args[0].max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return args[0] @ args[1]


def copy_bandwidth(dev, nbytes: int, repeats: int) -> float:
    cuda = dev.cuda
    a, b = cuda.mem_alloc(nbytes), cuda.mem_alloc(nbytes)
    start, end = cuda.Event(), cuda.Event()
    cuda.memcpy_dtod(b, a, nbytes)
    start.record()
    for _ in range(repeats):
        cuda.memcpy_dtod_async(b, a, nbytes)
    end.record()
    end.synchronize()
    seconds = start.time_till(end) / 1e3 / repeats
    return 2 * nbytes / seconds  # read + write


def peers(name: str, args, repeats: int) -> dict[str, float]:
    """Seconds per call of each installed peer on device-resident arrays."""
    out = {}
    try:
        import torch

        xs = [torch.from_numpy(a).cuda() for a in args]
        fns = {"sigmoid": lambda a, b, c: torch.sigmoid(a * b + c),
               "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
               "softmax": lambda x: torch.softmax(x, dim=1), "matmul": lambda a, b: a @ b}
        for label, fn in (("torch eager", fns[name]), ("torch.compile", torch.compile(fns[name]))):
            fn(*xs)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(repeats):
                fn(*xs)
            torch.cuda.synchronize()
            out[label] = (time.perf_counter() - t) / repeats
    except ImportError:
        print("  (torch is not installed: no torch figures)")
    try:
        import cupy

        xs = [cupy.asarray(a) for a in args]
        fn = {"sigmoid": lambda a, b, c: 1 / (1 + cupy.exp(-(a * b + c))), "matmul": lambda a, b: a @ b}.get(name)
        if fn is not None:
            fn(*xs)
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            for _ in range(repeats):
                fn(*xs)
            cupy.cuda.Device().synchronize()
            out["cupy"] = (time.perf_counter() - t) / repeats
    except ImportError:
        print("  (cupy is not installed: no cupy figures)")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    args = parser.parse_args(argv)
    reason = driver.unavailable_reason()
    if reason is not None:
        print(f"benchmarks/gpu.py: no CUDA device here ({reason}); no figures")
        return 0
    n, rows, m, repeats = (1 << 16, 256, 256, 3) if args.quick else (1 << 26, 8192, 4096, 20)
    dev = driver.CudaDevice()
    print(f"device: {dev.device.name()} (sm_{dev.sm})")
    roof = copy_bandwidth(dev, 4 * n, repeats)
    print(f"copy       {roof / 1e9:8.1f} GB/s (device to device, read + write)")
    rng = np.random.default_rng(0)
    for name, (text, shapes) in programs(n, rows, m).items():
        inputs = [rng.uniform(-2, 2, s).astype(np.float32) for s in shapes]
        exe = driver.GPUExecutable(gpu.lower(irc.parse(text)), dev)
        dev.record()
        got = exe.f(*inputs)
        np.testing.assert_allclose(got, reference(name, inputs), rtol=2e-3, atol=2e-3)
        seconds = dev.replay(repeats)
        dev.recorded = None
        nbytes = sum(a.nbytes for a in inputs) + got.nbytes
        line = f"{name:10s} irc {seconds * 1e3:9.3f} ms"
        if name == "matmul":
            line += f"  {2 * m ** 3 / seconds / 1e12:6.2f} TFLOP/s"
        else:
            line += f"  {nbytes / seconds / 1e9:8.1f} GB/s = {nbytes / seconds / roof:5.1%} of copy"
        print(line)
        for label, t in peers(name, inputs, repeats).items():
            print(f"{'':10s} {label:14s} {t * 1e3:9.3f} ms  (irc / peer time: {seconds / t:5.2f})")
    small = [np.ones(4, np.float32)] * 4
    exe = driver.GPUExecutable(gpu.lower(irc.parse("""
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf32>) -> tensor<4xf32> {
  %x = arith.addf %a, %b : tensor<4xf32>
  %y = arith.addf %c, %d : tensor<4xf32>
  %z = arith.mulf %x, %y : tensor<4xf32>
  func.return %z : tensor<4xf32>
}""")), dev)
    exe.f(*small)
    t = time.perf_counter()
    for _ in range(repeats * 10):
        exe.f(*small)
    per_call = (time.perf_counter() - t) / (repeats * 10)
    print(f"overhead   {per_call * 1e6:9.1f} us per call with 4 numpy arrays (copies in and out included)")
    on_device = [dev.to_device(a) for a in small]
    exe.f(*on_device)
    t = time.perf_counter()
    for _ in range(repeats * 10):
        exe.f(*on_device)
    per_call = (time.perf_counter() - t) / (repeats * 10)
    print(f"overhead   {per_call * 1e6:9.1f} us per call with 4 device arrays (irc.gpu.to_device; result on the device)")
    dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
