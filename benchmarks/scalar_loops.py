#!/usr/bin/env python3
"""Scalar loop kernels: the irc CPU JIT side by side with numba, gcc -O3 and pure Python.

The kernels are the ``.ir`` files under ``benchmarks/kernels/`` (written the way a
user would: phis and scf loops); the same algorithms are written for numba
(``@njit``), in C (``benchmarks/c/kernels.c``, built at run time with
``gcc -O3 -march=native -ffp-contract=off`` into a shared object in a temp dir
and called through ctypes, like irc's own code) and in pure Python:

* mandelbrot  escape counts of a 512x512 grid, at most 256 iterations, f64
* collatz     total Collatz steps of every n < 10^6, i64
* sieve       primes below 10^7, Eratosthenes over a memref<?xi8>

Every implementation's results are checked against irc's before timing.
Reported, from one run:

* run time: the median of several runs per implementation, interleaved (round
  robin) so that the drift of a shared, noisy machine hits all of them alike;
  the ratios irc/numba and irc/gcc; irc with ``checks=False`` if checks cost;
* pure Python, run at a smaller size and scaled up by the work done (Mandelbrot:
  iterations + pixels, Collatz: steps + numbers, sieve: n), and irc's speedup;
* compile time from text to callable with a cold cache (a fresh ``cache_dir``,
  nothing of the module compiled before in the process), numba's first call
  (compile + a tiny run) for comparison, and with a warm disk cache in a new
  process (a subprocess that parses and compiles with the same cache dir and
  prints its time, imports excluded);
* the per-call overhead of a two-scalar function: irc's Python wrapper, numba,
  and a raw ctypes call of the same machine code (irc's ``c_function``);

then PASS/FAIL lines against the targets of issue 3.

    python benchmarks/scalar_loops.py            # about a minute or two
    python benchmarks/scalar_loops.py --quick    # smoke test: tiny sizes, few runs
    python benchmarks/scalar_loops.py --json out.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import irc

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"
C_SOURCE = HERE / "c" / "kernels.c"

TARGET_VS_NUMBA = 1.1
TARGET_VS_GCC = 1.2
TARGET_VS_PYTHON = 40.0
TARGET_COLD_S = 0.25
TARGET_WARM_S = 0.050
TARGET_CALL_US = 1.0

ADD2_IR = """
func.func @add2(%a: i64, %b: i64) -> i64 {
  %s = arith.addi %a, %b : i64
  func.return %s : i64
}
"""


# ---- the same algorithms in Python (pure, and for numba) --------------------------------------


def mandelbrot_py(counts, h, w, max_iter):
    """counts: a flat row-major h*w buffer (a list, or a numpy array for numba)."""
    dy, dx = 3.0 / h, 3.0 / w
    total = 0
    for i in range(h):
        cy = -1.5 + i * dy
        for j in range(w):
            cx = -2.0 + j * dx
            zr = zi = 0.0
            k = 0
            while zr * zr + zi * zi <= 4.0 and k < max_iter:
                re = zr * zr - zi * zi + cx
                zi = 2.0 * zr * zi + cy
                zr = re
                k += 1
            counts[i * w + j] = k
            total += k
    return total


def collatz_py(limit):
    total = 0
    for n in range(1, limit):
        x = n
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            total += 1
    return total


def sieve_py(flags, n):
    for k in range(n):
        flags[k] = 1
    for k in range(min(n, 2)):
        flags[k] = 0
    p = 2
    while p * p < n:
        if flags[p]:
            for m in range(p * p, n, p):
                flags[m] = 0
        p += 1
    count = 0
    for k in range(n):
        count += flags[k]
    return count


def add2_py(a, b):
    return a + b


# ---- the kernels -----------------------------------------------------------------------------


@dataclass
class Kernel:
    name: str
    full: tuple          # sizes of the timed run
    small: tuple         # sizes of the pure-Python run
    tiny: tuple          # sizes for numba's first call and for --quick
    python: object       # the pure-Python function
    results: dict = field(default_factory=dict)

    def args(self, sizes):
        """Fresh arguments for one call of irc's kernel (numpy arrays are scratch space)."""
        if self.name == "mandelbrot":
            h, w, iters = sizes
            return (np.zeros((h, w), np.int32), iters)
        if self.name == "collatz":
            return (sizes[0],)
        return (np.zeros(sizes[0], np.int8),)

    def python_args(self, args, native: bool):
        """irc's arguments for the Python functions: flat arrays (numba) or lists (pure Python)."""
        if self.name == "mandelbrot":
            counts, iters = args
            h, w = counts.shape
            return (counts.reshape(-1) if native else [0] * (h * w), h, w, iters)
        if self.name == "collatz":
            return args
        return (args[0] if native else bytearray(args[0].shape[0]), args[0].shape[0])

    def c_args(self, args):
        if self.name == "mandelbrot":
            counts, iters = args
            return (counts.ctypes.data, counts.shape[0], counts.shape[1], iters)
        if self.name == "collatz":
            return args
        return (args[0].ctypes.data, args[0].shape[0])

    def work(self, sizes, result) -> float:
        """The work of one run (inner-loop trips), to scale pure Python from small to full size."""
        if self.name == "mandelbrot":  # escape iterations + pixels
            return result + sizes[0] * sizes[1]
        if self.name == "collatz":  # steps + numbers
            return result + sizes[0]
        n = sizes[0]  # two passes over the flags + the stores that cross out multiples
        flags = np.ones(n, np.bool_)
        flags[:2] = False
        p, stores = 2, 0
        while p * p < n:
            if flags[p]:
                flags[p * p::p] = False
                stores += len(range(p * p, n, p))
            p += 1
        return 2 * n + stores


def kernels(quick: bool) -> list[Kernel]:
    ks = [
        Kernel("mandelbrot", (512, 512, 256), (64, 64, 256), (8, 8, 16), mandelbrot_py),
        Kernel("collatz", (1_000_000,), (30_000,), (100,), collatz_py),
        Kernel("sieve", (10_000_000,), (300_000,), (100,), sieve_py),
    ]
    if quick:
        for k in ks:
            k.full = k.small = k.tiny
    return ks


# ---- the implementations ------------------------------------------------------------------------


def build_c(tmp: Path):
    """The C kernels as a ctypes library, or None without gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None, None
    so = tmp / "kernels.so"
    flags = ["-O3", "-march=native", "-ffp-contract=off", "-shared", "-fPIC"]
    subprocess.run([gcc, *flags, str(C_SOURCE), "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
    for name, argtypes in [("mandelbrot", [ptr, i64, i64, i32]), ("collatz", [i64]), ("sieve", [ptr, i64]),
                           ("add2", [i64, i64])]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, i64
    version = subprocess.run([gcc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return lib, f"{version} ({' '.join(flags[:3])})"


def load_numba():
    try:
        import numba
    except ImportError:
        return None
    return numba


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


WARM_SCRIPT = """
import sys, time
t = time.perf_counter()
import irc
t_irc = time.perf_counter()
import irc.runtime  # llvmlite
t_runtime = time.perf_counter()
text = open(sys.argv[1]).read()
module = irc.parse(text, filename=sys.argv[1])
t_parse = time.perf_counter()
exe = irc.compile(module, cache_dir=sys.argv[2])
fn = exe[sys.argv[3]]
t_done = time.perf_counter()
print(t_done - t_runtime, t_parse - t_runtime, t_done - t_parse, t_irc - t, t_runtime - t_irc,
      exe.stats.get("cache", "none"))
"""


def warm_compile(path: Path, cache_dir: str, entry: str) -> dict:
    """Text to callable in a new process with a warm disk cache, imports timed apart."""
    out = subprocess.run([sys.executable, "-c", WARM_SCRIPT, str(path), cache_dir, entry],
                         capture_output=True, text=True, check=True).stdout.split()
    total, parse, comp, imp_irc, imp_runtime = map(float, out[:5])
    return {"warm_compile_s": total, "warm_parse_s": parse, "warm_compile_only_s": comp,
            "import_irc_s": imp_irc, "import_runtime_s": imp_runtime, "warm_cache": out[5]}


def cold_compile(path: Path, cache_dir: str, **options):
    t = time.perf_counter()
    module = irc.parse(path.read_text(), filename=str(path))
    exe = irc.compile(module, cache_dir=cache_dir, **options)
    return exe, time.perf_counter() - t


# ---- reporting ------------------------------------------------------------------------------


def machine() -> dict:
    from machine_info import cpu_model

    model = cpu_model()
    import llvmlite
    import llvmlite.binding as llvm
    from irc.runtime.cpu import engine

    cpu, features = engine.host_cpu()
    avx = [f for f in ("avx2", "avx512f") if f"+{f}" in features.split(",")]
    return {"cpu": model, "cores": os.cpu_count(), "llvm_cpu": cpu, "vector": "+".join(avx) or "none",
            "python": platform.python_version(), "irc": irc.__version__, "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)), "numpy": np.__version__,
            "platform": platform.platform()}


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}" if x >= 1e-3 else f"{x * 1e3:.3f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few runs (a smoke test)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per implementation (default 7)")
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args(argv)
    repeat = opts.repeat or (2 if opts.quick else 7)
    info = machine()
    numba = load_numba()
    tmp = Path(tempfile.mkdtemp(prefix="irc-bench-"))
    try:
        lib, gcc_version = build_c(tmp)
        info["numba"] = numba.__version__ if numba else "absent"
        info["gcc"] = gcc_version or "absent"
        print("scalar_loops: irc JIT vs numba vs gcc vs pure Python")
        print(f"machine: {info['cpu']}, {info['cores']} cores (LLVM host CPU {info['llvm_cpu']}, {info['vector']})")
        print(f"versions: Python {info['python']}, irc {info['irc']}, llvmlite {info['llvmlite']} "
              f"(LLVM {info['llvm']}), numpy {info['numpy']}, numba {info['numba']}, gcc: {info['gcc']}")
        print(f"date: {time.strftime('%Y-%m-%d')}; medians of {repeat} interleaved runs; times in ms\n")
        results = run_all(kernels(opts.quick), numba, lib, tmp, repeat)
        print_report(results, info)
        if opts.json:
            Path(opts.json).write_text(json.dumps({"machine": info, "kernels": results}, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def run_all(ks: list[Kernel], numba, lib, tmp: Path, repeat: int) -> dict:
    results: dict = {}
    # Cold compiles first: nothing of these modules has been compiled in this process yet.
    # One throwaway compile first, so that LLVM's one-time start-up (target
    # initialisation, the JIT itself) is not charged to the first kernel.
    irc.compile(irc.parse(ADD2_IR), cache=False)
    exes = {}
    for k in ks:
        cache_dir = str(tmp / f"cache-{k.name}")
        exe, cold = cold_compile(KERNELS / f"{k.name}.ir", cache_dir)
        exe_nochecks, _ = cold_compile(KERNELS / f"{k.name}.ir", cache_dir, checks=False)
        exes[k.name] = (exe, exe_nochecks)  # the Executables own the machine code: keep them
        results[k.name] = {"cold_compile_s": cold, **warm_compile(KERNELS / f"{k.name}.ir", cache_dir, k.name)}
    for k in ks:
        r = results[k.name]
        impls = {"irc": exes[k.name][0][k.name], "irc checks=False": exes[k.name][1][k.name]}
        if numba is not None:
            nfn = numba.njit(k.python)
            r["numba_first_call_s"] = timed(nfn, *k.python_args(k.args(k.tiny), native=True))
            impls["numba"] = lambda *a, _f=nfn, _k=k: _f(*_k.python_args(a, native=True))
        if lib is not None:
            cfn = getattr(lib, k.name)
            impls["gcc -O3"] = lambda *a, _f=cfn, _k=k: _f(*_k.c_args(a))
        expected = None
        for name, fn in impls.items():  # every implementation agrees with irc (and warms up)
            args = k.args(k.full)
            got = int(fn(*args))
            extra = args[0].copy() if isinstance(args[0], np.ndarray) else None
            if expected is None:
                expected, expected_extra = got, extra
            elif got != expected or (extra is not None and not np.array_equal(extra, expected_extra)):
                raise SystemExit(f"{k.name}: {name} disagrees with irc ({got} != {expected})")
        times: dict = {name: [] for name in impls}
        for _ in range(repeat):
            for name, fn in impls.items():
                args = k.args(k.full)
                times[name].append(timed(fn, *args))
        r["run_s"] = {name: statistics.median(ts) for name, ts in times.items()}
        r["result"] = expected
        py_args = k.python_args(k.args(k.small), native=False)
        t = time.perf_counter()
        small_result = k.python(*py_args)
        t_small = time.perf_counter() - t
        scale = k.work(k.full, expected) / k.work(k.small, small_result)
        r["python_small_s"] = t_small
        r["python_scaled_s"] = t_small * scale
    results["call_overhead_us"] = call_overhead(numba, lib)
    return results


def call_overhead(numba, lib) -> dict:
    exe = irc.compile(irc.parse(ADD2_IR), cache=False)
    wrapper = exe.add2
    raw = wrapper.c_function
    out = ctypes.c_int64()
    ref = ctypes.byref(out)
    fns = {"irc wrapper": lambda: wrapper(3, 4), "raw ctypes (same code)": lambda: raw(3, 4, ref)}
    if numba is not None:
        nfn = numba.njit(add2_py)
        nfn(1, 2)
        fns["numba"] = lambda: nfn(3, 4)
    if lib is not None:
        fns["gcc via ctypes"] = lambda: lib.add2(3, 4)
    empty = min(timeit.repeat(lambda: None, number=100_000, repeat=5)) / 100_000
    result = {}
    for name, fn in fns.items():
        per_call = min(timeit.repeat(fn, number=100_000, repeat=5)) / 100_000
        result[name] = (per_call - empty) * 1e6  # without the lambda's own call
    return result


def print_report(results: dict, info: dict) -> None:
    rows = []
    checks: list[tuple[str, bool]] = []
    header = ("kernel", "irc", "irc -checks", "numba", "gcc -O3", "python*", "irc/numba", "irc/gcc", "x python",
              "cold compile", "numba 1st call", "warm cache (parse+compile)")
    for name, r in results.items():
        if name == "call_overhead_us":
            continue
        run = r["run_s"]
        irc_t, numba_t, gcc_t = run["irc"], run.get("numba"), run.get("gcc -O3")
        speedup = r["python_scaled_s"] / irc_t
        rows.append((name, ms(irc_t), ms(run["irc checks=False"]), ms(numba_t), ms(gcc_t),
                     ms(r["python_scaled_s"]), ratio(irc_t, numba_t), ratio(irc_t, gcc_t), f"{speedup:.0f}x",
                     ms(r["cold_compile_s"]), ms(r.get("numba_first_call_s")),
                     f"{ms(r['warm_compile_s'])} ({ms(r['warm_parse_s'])}+{ms(r['warm_compile_only_s'])}, "
                     f"{r['warm_cache']})"))
        if numba_t is not None:
            checks.append((f"{name}: irc within {TARGET_VS_NUMBA}x of numba ({irc_t / numba_t:.2f}x)",
                           irc_t <= TARGET_VS_NUMBA * numba_t))
        if gcc_t is not None:
            checks.append((f"{name}: irc within {TARGET_VS_GCC}x of gcc -O3 ({irc_t / gcc_t:.2f}x)",
                           irc_t <= TARGET_VS_GCC * gcc_t))
        checks.append((f"{name}: >= {TARGET_VS_PYTHON:.0f}x pure Python ({speedup:.0f}x)", speedup >= TARGET_VS_PYTHON))
        checks.append((f"{name}: cold compile <= {TARGET_COLD_S} s ({r['cold_compile_s']:.3f} s)",
                       r["cold_compile_s"] <= TARGET_COLD_S))
        checks.append((f"{name}: warm disk cache, new process < {TARGET_WARM_S * 1e3:.0f} ms "
                       f"({r['warm_compile_s'] * 1e3:.1f} ms, {r['warm_cache']})",
                       r["warm_compile_s"] < TARGET_WARM_S and r["warm_cache"] == "disk"))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"  # noqa: E731
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    print("\n* pure Python at a smaller size, scaled to the full size by the work done")
    any_kernel = next(r for n, r in results.items() if n != "call_overhead_us")
    print("cold compile: text to callable, fresh cache_dir, after one throwaway compile (LLVM and parser set-up)")
    print("warm cache: text to callable in a new process (first parse there builds the lark parser); imports "
          f"not counted: irc {ms(any_kernel['import_irc_s'])} ms, irc.runtime (llvmlite) "
          f"{ms(any_kernel['import_runtime_s'])} ms")
    calls = results["call_overhead_us"]
    print("\nper-call overhead of @add2(i64, i64) -> i64 (us, empty-call time subtracted): "
          + ", ".join(f"{name} {us:.2f}" for name, us in calls.items()))
    checks.append((f"per-call overhead <= {TARGET_CALL_US} us ({calls['irc wrapper']:.2f} us)",
                   calls["irc wrapper"] <= TARGET_CALL_US))
    print()
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")


if __name__ == "__main__":
    sys.exit(main())
