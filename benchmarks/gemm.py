"""GEMM on one core: irc's GEMM library function beside numpy (OpenBLAS), jax.jit and torch.

    python benchmarks/gemm.py                 # the shapes below, f32 (and 1024^3 f64)
    python benchmarks/gemm.py --blockings     # irc's library at other tile/block sizes, for tuning
    python benchmarks/gemm.py --quick         # small sizes, few runs (smoke test)
    python benchmarks/gemm.py --threads 2     # irc on 1 and on 2 threads, every core allowed
    python benchmarks/gemm.py --threads 2 --blas  # the same for irc's BLAS path (blas=True)
    python benchmarks/gemm.py --compile       # what building the library functions costs, per stage
    python benchmarks/gemm.py --cpu x86-64-v3 # AVX2 code, against peers held to AVX2 (tensor_cpu.py)
    python benchmarks/gemm.py --untargeted    # only the products without a target (CNN's, 17-24 columns, small batches)

Shapes: square 256, 1024 and 2048, the products of the MLP training step of
benchmarks/autodiff.py (784-1024-1024-10, batch 256), with the transposed
operands its backward pass reads in place (``A^T`` given as the buffer of A,
``B^T`` as that of B: irc's library packs them; numpy, jax and torch get the same
transposed views), and (without a target) the convolutions' products of
torch_backend.py's CNN, per image, products of 17-24 columns (gemm_narrow.py's wider forms), and a
small batch's layers (4-12 rows: gemm_rows.py's rows form where B is as given, gemm_narrow.py's
``DOT_IN_PLACE_ROWS`` where B^T is).  Each product runs through ``irc.compile`` of a one-matmul
tensor function (what a user's program calls), after its first call.  Every
contender's result is checked against a float64 product.  Medians of 7 rounds of
5 calls, the contenders interleaved round by round; GFLOP/s = 2*M*N*K / time.  irc's
GFLOP/s is also shown as a share of this core's multiply-add peak, measured in the same run
(``multiply_add_peak``: benchmarks/c/fma_peak.c, built with tensor_cpu.py's C flags, so
``--cpu`` holds it to the level too).  The last column compares the fastest calls (irc's
against the best peer's): on a VM whose co-tenants slow a core's memory traffic for seconds
at a time, it says what each code does on an undisturbed core (docs/benchmarks.md).

``--blockings`` calls the library function itself at explicit sizes
(``irc_gemm_f32_nn_8x32_96x512x8192``: tile MRxNR, blocks MCxKCxNC) on the MLP's
shapes, the evidence behind ``Blocking.for_host`` (passes/lowering/gemm_library.py).

The process is pinned to one core (tensor_cpu.py: jax would otherwise use every core),
except with ``--threads N``, which times irc's product with ``threads=1`` and ``threads=N``
side by side on every core the process may use (the peers are not run then); with ``--blas``,
irc's BLAS path's products (which irc splits across its threads where the BLAS runs on the
calling thread, MKL's: runtime/cpu/blas.py).  A BLAS may block a product differently for
different widths, so there each thread count's result is checked against float64 instead of
bit for bit against one thread's.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

if "--threads" in sys.argv:
    os.environ["IRC_BENCH_ALL_CORES"] = "1"  # before tensor_cpu pins the process to one core

sys.path.insert(0, str(Path(__file__).resolve().parent))
tc = importlib.import_module("tensor_cpu")  # pins the process and sets the thread variables first

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from irc.runtime.cpu import blas as blas_runtime  # noqa: E402

import irc  # noqa: E402
from irc.testing.tensor_programs import matmul_program  # noqa: E402

SHAPES = [  # (label, m, n, k, A given transposed, B given transposed)
    ("square 256", 256, 256, 256, False, False),
    ("square 1024", 1024, 1024, 1024, False, False),
    ("square 2048", 2048, 2048, 2048, False, False),
    ("MLP x @ W1", 256, 1024, 784, False, False),
    ("MLP h @ W2", 256, 1024, 1024, False, False),
    ("MLP h @ W3 (10 columns)", 256, 10, 1024, False, False),
    ("MLP h^T @ dz (dW2)", 1024, 1024, 256, True, False),
    ("MLP x^T @ dz (dW1)", 784, 1024, 256, True, False),
    ("MLP h^T @ dz3 (dW3)", 1024, 10, 256, True, False),
    ("MLP dz @ W2^T", 256, 1024, 1024, False, True),
    ("MLP dz3 @ W3^T (K 10)", 256, 1024, 10, False, True),
]
CNN_SHAPES = [  # benchmarks/torch_backend.py's CNN at batch 8: its convolutions' products, per image
    ("CNN conv1 (K 27)", 16, 1024, 27, False, False),
    ("CNN conv1 dW", 16, 27, 1024, False, True),
    ("CNN conv2", 32, 256, 144, False, False),
    ("CNN conv2 dW", 32, 144, 256, False, True),
    ("CNN conv2 dX", 16, 256, 288, False, False),
]
"""Printed without a target (issue 14's are the square and MLP shapes): small products where
packing and edges, not the kernel, decide the speed."""
NARROW_SHAPES = [  # a little wider than one vector: gemm_narrow.py's DOT_FILL and COLUMN_FILL
    ("17 columns", 256, 17, 1024, False, False),
    ("20 columns", 256, 20, 1024, False, False),
    ("24 columns", 256, 24, 1024, False, False),
    ("20 columns, B^T", 256, 20, 1024, False, True),
    ("20 columns, A^T", 1024, 20, 256, True, False),
]
"""Also without a target: products of 17-24 columns, which fill few of the full tiles' lanes."""
SMALL_BATCH_SHAPES = [  # a few rows: gemm_rows.py (B as given, up to max_rows), gemm_narrow.py's DOT_IN_PLACE_ROWS (B^T)
    ("batch 4, x @ W", 4, 1024, 1024, False, False),
    ("batch 8, x @ W", 8, 1024, 1024, False, False),
    ("batch 12, x @ W", 12, 1024, 1024, False, False),
    ("batch 4, 27 columns", 4, 27, 1024, False, False),
    ("batch 8, x @ W^T", 8, 1024, 1024, False, True),
    ("batch 12, x @ W^T", 12, 512, 512, False, True),
    ("batch 6, x @ W^T, 256", 6, 256, 256, False, True),
]
"""Also without a target: a small batch's layers (inference), which the tiles would pad to MR rows."""
QUICK_SHAPES = [("square 128", 128, 128, 128, False, False), ("A^T 96x80x64", 96, 80, 64, True, False),
                ("B^T 64x96x80", 64, 96, 80, False, True)]


def matmul_ir(m, n, k, ta, tb, elem="f32") -> str:
    return matmul_program(m, n, k, ta, tb, elem)


def operands(m, n, k, ta, tb, dtype):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    return a, b, (np.ascontiguousarray(a.T) if ta else a), (np.ascontiguousarray(b.T) if tb else b)


def contenders(m, n, k, ta, tb, dtype):
    """(name, callable returning the product) for each contender available here."""
    a, b, a_buf, b_buf = operands(m, n, k, ta, tb, dtype)
    elem = "f32" if dtype == np.float32 else "f64"
    exe = irc.compile(irc.parse(matmul_ir(m, n, k, ta, tb, elem)), cache_dir=tc.IRC_CACHE, **tc.irc_single_thread())
    out = np.empty((m, n), dtype)
    rows = [("irc (GEMM library)", lambda: exe.mm(a_buf, b_buf, out=out))]
    a_view = a_buf.T if ta else a_buf
    b_view = b_buf.T if tb else b_buf
    rows.append(("numpy (OpenBLAS)", lambda: np.matmul(a_view, b_view, out=out)))
    try:
        jax = tc.peer("jax")
        fn = jax.jit(lambda x, y: (x.T if ta else x) @ (y.T if tb else y))
        xa, ya = jax.device_put(a_buf), jax.device_put(b_buf)
        rows.append(("jax.jit", lambda: jax.block_until_ready(fn(xa, ya))))
    except tc.Missing:
        pass
    try:
        torch = tc.peer("torch")
        ta_, tb_ = torch.from_numpy(a_buf), torch.from_numpy(b_buf)
        tout = torch.from_numpy(out)
        rows.append(("torch", lambda: torch.matmul(ta_.T if ta else ta_, tb_.T if tb else tb_, out=tout)))
    except tc.Missing:
        pass
    return rows, a.astype(np.float64) @ b.astype(np.float64)


def multiply_add_peak() -> float | None:
    """This core's f32 multiply-add peak in GFLOP/s: benchmarks/c/fma_peak.c (independent
    multiply-add chains in registers, the widest vectors the C flags allow) built with
    tensor_cpu.py's C flags, the best of five runs of about 0.2 s.  None without gcc."""
    import ctypes
    import shutil
    import subprocess
    import tempfile

    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    so = Path(tempfile.mkdtemp(prefix="irc-bench-peak-")) / "fma_peak.so"
    subprocess.run([gcc, *tc.C_FLAGS, "-shared", "-fPIC", str(Path(__file__).parent / "c" / "fma_peak.c"),
                    "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.fma_chains.argtypes, lib.fma_chains.restype = [ctypes.c_int64], ctypes.c_float
    flops_a_step = 2 * lib.fma_lanes() * lib.fma_chains_count()
    steps = 1 << 20
    while True:  # steps for about 0.2 s
        t = time.perf_counter()
        lib.fma_chains(steps)
        if time.perf_counter() - t > 0.05:
            break
        steps *= 2
    steps *= 4
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        lib.fma_chains(steps)
        best = min(best, time.perf_counter() - t)
    return flops_a_step * steps / best / 1e9


def timed(calls: list, rounds: int, per_round: int) -> list[float]:
    """Median seconds per call of each callable, interleaved round by round."""
    return [median for median, _ in timed_spread(calls, rounds, per_round)]


def timed_spread(calls: list, rounds: int, per_round: int) -> list[tuple[float, float]]:
    """(median, fastest) seconds per call of each callable, interleaved round by round.  The
    fastest call is what the code does on an undisturbed core: on a shared VM a co-tenant can
    slow one core's memory traffic for seconds at a time (docs/benchmarks.md, session 11)."""
    times = [[] for _ in calls]
    for _ in range(rounds):
        for i, fn in enumerate(calls):
            for _ in range(per_round):
                t = time.perf_counter()
                fn()
                times[i].append(time.perf_counter() - t)
    return [(statistics.median(t), min(t)) for t in times]


def check(got, ref, k, dtype) -> bool:
    got = np.asarray(got, dtype=np.float64)
    scale = np.sqrt(k) * np.abs(ref).max() + 1
    return bool(np.abs(got - ref).max() <= 16 * np.finfo(dtype).eps * scale)


def shapes_part(shapes, rounds, per_round, untargeted=(), peak=None) -> list[tuple[str, bool]]:
    """The table: GFLOP/s of irc and each peer per product, irc over the best peer, and (with
    ``peak``, this core's f32 multiply-add peak) irc's share of the peak (f64's is half)."""
    checks = []
    if tc.NOT_HELD.get(tc.CPU_LEVEL):
        print(f"best peer: of those held to {tc.CPU_LEVEL} ({', '.join(tc.NOT_HELD[tc.CPU_LEVEL])}'s matrix kernels "
              "ignore the level: shown, left out)")
    print("| product (M x N x K) | dtype | irc GFLOP/s | numpy | jax.jit | torch | irc / best peer | irc / peak "
          "| fastest calls: irc / best peer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, m, n, k, ta, tb in [*shapes, *untargeted]:
        for dtype in ([np.float32, np.float64] if label == "square 1024" else [np.float32]):
            rows, ref = contenders(m, n, k, ta, tb, dtype)
            names = [name for name, _ in rows]
            ok = {name: check(fn(), ref, k, dtype) for name, fn in rows}
            spread = timed_spread([fn for _, fn in rows], rounds, per_round)
            rate = {name: 2 * m * n * k / t / 1e9 for name, (t, _) in zip(names, spread)}
            fastest = {name: 2 * m * n * k / t / 1e9 for name, (_, t) in zip(names, spread)}
            unheld = tc.NOT_HELD.get(tc.CPU_LEVEL, ())  # --cpu: jax's kernels ignore the level
            peers = [r for name, r in rate.items() if not name.startswith("irc") and ok[name] and name not in unheld]
            best = max(peers) if peers else None
            irc_rate = rate[names[0]]

            def cell(name, rate=rate, ok=ok):
                if name not in rate:
                    return "-"
                return f"{rate[name]:.1f}" + ("" if ok[name] else " (wrong)")
            ratio = f"{irc_rate / best:.2f}" if best else "-"
            best_fast = max((fastest[name] for name in fastest
                             if not name.startswith("irc") and ok[name] and name not in unheld), default=None)
            fast_ratio = f"{fastest[names[0]] / best_fast:.2f}" if best_fast else "-"
            of_peak = f"{irc_rate / (peak * (4 / np.dtype(dtype).itemsize)):.0%}" if peak else "-"
            shape = f"{m}x{n}x{k}" + (" A^T" if ta else "") + (" B^T" if tb else "")
            print(f"| {label}: {shape} | {np.dtype(dtype).name} | {cell(names[0])} | {cell('numpy (OpenBLAS)')} "
                  f"| {cell('jax.jit')} | {cell('torch')} | {ratio} | {of_peak} | {fast_ratio} |", flush=True)
            if not ok[names[0]]:
                checks.append((f"{label} {np.dtype(dtype).name}: irc's product is wrong", False))
            elif best and (label, m, n, k, ta, tb) not in untargeted:
                checks.append((f"{label} {np.dtype(dtype).name}: irc >= 85% of the best peer ({ratio})",
                               irc_rate >= 0.85 * best))
    return checks


def threads_part(threads: int, rounds, per_round, blas: bool = False) -> list[tuple[str, bool]]:
    """irc's products on one thread and on ``threads``, interleaved; the speedup of each."""
    checks = []
    agree = "agree with float64" if blas else "give the same bits"
    print(f"| product (M x N x K) | irc{' BLAS path' if blas else ''} 1 thread GFLOP/s | {threads} threads GFLOP/s "
          f"| speedup | {'within float32 rounding' if blas else 'same bits'} |")
    print("|---|---|---|---|---|")
    for label, m, n, k, ta, tb in SHAPES:
        a, b, a_buf, b_buf = operands(m, n, k, ta, tb, np.float32)
        module = irc.parse(matmul_ir(m, n, k, ta, tb))
        fns = [irc.compile(module, cache_dir=tc.IRC_CACHE, threads=t, blas=blas).mm for t in (1, threads)]
        outs = [fn(a_buf, b_buf) for fn in fns]
        medians = timed([lambda fn=fn, x=a_buf, y=b_buf: fn(x, y) for fn in fns], rounds, per_round)
        rates = [2 * m * n * k / t / 1e9 for t in medians]
        if blas:
            ref = a.astype(np.float64) @ b.astype(np.float64)
            same = all(check(out, ref, k, np.float32) for out in outs)
        else:
            same = bool(np.array_equal(outs[0], outs[1]))
        speedup = medians[0] / medians[1]
        shape = f"{m}x{n}x{k}" + (" A^T" if ta else "") + (" B^T" if tb else "")
        print(f"| {label}: {shape} | {rates[0]:.1f} | {rates[1]:.1f} | {speedup:.2f} | {same} |", flush=True)
        checks.append((f"{label}: {threads} threads {agree}", same))
        if min(m, n, k) >= 256:
            checks.append((f"{label}: {threads} threads >= 1.8x one ({speedup:.2f})", speedup >= 1.8))
    checks += mlp_threads(threads, rounds, per_round, blas)
    return checks


def mlp_threads(threads: int, rounds, per_round, blas: bool = False) -> list[tuple[str, bool]]:
    """tensor_cpu.py's MLP forward (16 layers relu(h @ W + b), batch 256, width 1024) on one
    thread and on ``threads``: its matmuls and its bias-and-ReLU loops both split."""
    layers, batch, width = (4, 64, 256) if per_round < 5 else (16, 256, 1024)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((batch, width)).astype(np.float32)]
    for _ in range(layers):
        args += [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                 rng.standard_normal(width).astype(np.float32)]
    module = irc.parse(tc.mlp_ir(layers))
    fns = [irc.compile(module, cache_dir=tc.IRC_CACHE, threads=t, blas=blas).mlp for t in (1, threads)]
    outs = [fn(*args) for fn in fns]
    medians = timed([lambda fn=fn: fn(*args) for fn in fns], rounds, per_round)
    agree = "agree with one thread's within 1e-4" if blas else "give the same bits"
    same = bool(np.allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4) if blas else np.array_equal(outs[0], outs[1]))
    speedup = medians[0] / medians[1]
    print(f"| MLP forward {layers} x {width}, batch {batch} | {medians[0] * 1e3:.1f} ms | "
          f"{medians[1] * 1e3:.1f} ms | {speedup:.2f} | {same} |", flush=True)
    return [(f"MLP forward: {threads} threads {agree}", same),
            (f"MLP forward: {threads} threads >= 1.8x one ({speedup:.2f})", speedup >= 1.8)]


def blockings_part(rounds, per_round) -> None:
    """The library function called directly at the host's blocking and its neighbours: K panels
    half and twice as deep, A blocks half and twice as tall, B packed half and twice as many
    columns at a time, and tiles with more rows (packing
    A makes its rows contiguous, so a tall tile's rows no longer share L1 sets) as far as the
    registers hold MR x 2 accumulators, 2 panel vectors and a broadcast."""
    from irc.passes.lowering import gemm_library as gl
    from irc.runtime.executable import compile as compile_module

    from irc.types import FloatType

    f32 = FloatType("f32")
    options = _host_options()
    host = gl.Blocking.for_host(f32, options)
    print(f"host blocking: tile {host.mr}x{host.nr}, MC {host.mc}, KC {host.kc}, NC {host.nc} "
          f"({options['vector_bits']}-bit vectors x {options['vector_registers']}, "
          f"L1 {options['l1_bytes'] >> 10} KiB, L3 {options['l3_bytes'] >> 20} MiB)")
    variants = {(host.mr, host.nr, host.mc, kc, host.nc) for kc in (host.kc // 2, host.kc, 2 * host.kc)}
    variants |= {(host.mr, host.nr, mc, host.kc, host.nc) for mc in (host.mc // 2, 2 * host.mc)}
    variants |= {(host.mr, host.nr, host.mc, host.kc, nc) for nc in (host.nc // 2, 2 * host.nc)}
    for mr in range(host.mr + 2, (options["vector_registers"] - 3) // 2 + 1, 2):
        if mr * host.nr <= gl.MAX_TILE:
            variants.add((mr, host.nr, host.mc - host.mc % mr or mr, host.kc, host.nc))
    variants = sorted(variants)
    print("| product | " + " | ".join("x".join(map(str, v)) for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    for label, m, n, k, ta, tb in [s for s in SHAPES if s[0] == "square 1024"] + SHAPES[3:]:
        a, b, a_buf, b_buf = operands(m, n, k, ta, tb, np.float32)
        calls = []
        for v in variants:
            blocking = gl.Blocking(*v)
            name = gl.symbol(f32, blocking)
            fn = compile_module(gl.build(name), cache_dir=tc.IRC_CACHE)[name]
            pa, pb = blocking.scratch_sizes(m, n, k)
            c = np.empty((m, n), np.float32)
            args = (a_buf, b_buf, c, np.empty(pa, np.float32), np.empty(pb, np.float32), ta, tb, c,
                    np.float32(1), False, 0, n, np.zeros(1, np.float32), False, False)  # no bias, no ReLU
            calls.append(lambda fn=fn, args=args: fn(*args))
        spread = timed_spread(calls, rounds, per_round)
        print(f"| {label} | " + " | ".join(f"{2 * m * n * k / t / 1e9:.0f} / {2 * m * n * k / fast / 1e9:.0f}"
                                          for t, fast in spread) + " |", flush=True)
    print("(GFLOP/s, median / fastest call; columns: MR x NR x MC x KC x NC)")


def compile_part(rounds: int) -> None:
    """Seconds to build the library function the f32 products of this host call, from its name,
    with no cache, as the runtime builds it (runtime/cpu/gemm_library.compile_object): irc's
    build and passes, translation to LLVM IR, LLVM's optimisation and code generation (the
    median of ``rounds`` builds; the total also as CPU time, which other load moves less).
    This is what the cold first call of an irc.jit function with a matmul pays once per host."""
    from irc.passes.lowering import gemm_library as gl
    from irc.runtime.cpu import gemm_library as runtime_library

    from irc.types import f32

    names = [gl.symbol(f32, gl.Blocking.for_host(f32, _host_options()))]
    stages = ("build", "irc passes", "translate", "LLVM optimise", "code generation")
    print("| library function | " + " | ".join(f"{s} s" for s in stages) + " | total CPU s |")
    print("|---|" + "---|" * (len(stages) + 1))
    for name in names:
        runs, cpu = [], []
        for _ in range(rounds):
            timings: dict = {}
            t = time.process_time()
            runtime_library.compile_object(name, timings)
            cpu.append(time.process_time() - t)
            runs.append(timings)
        print(f"| {name} | " + " | ".join(f"{statistics.median(r[s] for r in runs):.3f}" for s in stages)
              + f" | {statistics.median(cpu):.3f} |")


def _host_options() -> dict:
    """tensor-to-loops' host options, as the tensor pipeline sets them for this CPU."""
    from irc.runtime.tensor_function import host_caches, target_vectors

    (bits, registers), (l1, l3) = target_vectors(), host_caches()
    return {"vector_bits": bits, "vector_registers": registers, "l1_bytes": l1, "l3_bytes": l3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few runs")
    ap.add_argument("--blockings", action="store_true", help="irc's library at other blockings (tuning)")
    ap.add_argument("--threads", type=int, default=0, help="irc on 1 and on N threads (every core allowed)")
    ap.add_argument("--blas", action="store_true", help="with --threads: irc's BLAS path (blas=True)")
    ap.add_argument("--compile", action="store_true", help="CPU time to build the library functions, per stage")
    ap.add_argument("--untargeted", action="store_true",
                    help="only the products without a target (CNN, narrow, small batches)")
    ap.add_argument("--cpu", choices=sorted(tc.CPU_LEVELS),
                    help="irc and the peers held to this x86-64 level (tensor_cpu.py's --cpu; read when it is imported)")
    opts = ap.parse_args(argv)
    if opts.blas and not opts.threads:
        ap.error("--blas times the BLAS path on threads: give --threads N too")
    info = tc.machine()
    where = f"cores {sorted(os.sched_getaffinity(0))}" if opts.threads else f"one core (pinned to CPU {tc.PINNED_CPU})"
    print(f"gemm: {where}; {info['cpu']} (LLVM {info['llvm_cpu']}, {info['vector']})")
    print(f"versions: irc {info['irc']}, numpy {info['numpy']}, jax {info['jax']}, torch {info['torch']}, "
          f"llvmlite {info['llvmlite']} (LLVM {info['llvm']})")
    if opts.cpu:
        print(f"instructions: {opts.cpu} for irc and every peer (tensor_cpu.CPU_LEVELS)")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}\n")
    rounds, per_round = (2, 2) if opts.quick else (7, 5)
    if opts.blockings:
        blockings_part(rounds, per_round)
        return 0
    if opts.compile:
        compile_part(3 if opts.quick else 7)
        return 0
    if opts.threads:
        if opts.blas:
            print(f"irc's BLAS path: {blas_runtime.gemm('sgemm').source}; split across irc's threads: "
                  f"{blas_runtime.split_across_threads()}\n")
        checks = threads_part(opts.threads, rounds, per_round, opts.blas)
        print()
        for text, ok in checks:
            print(f"{'PASS' if ok else 'FAIL'}  {text}")
        return 1 if any(("same bits" in text or "agree" in text) for text, ok in checks if not ok) else 0
    peak = multiply_add_peak()
    print(f"f32 multiply-add peak of this core: {peak:.1f} GFLOP/s (benchmarks/c/fma_peak.c, gcc "
          f"{' '.join(tc.C_FLAGS)})\n" if peak else "f32 multiply-add peak: not measured (no gcc)\n")
    targeted = () if opts.untargeted else QUICK_SHAPES if opts.quick else SHAPES
    checks = shapes_part(targeted, rounds, per_round, () if opts.quick else CNN_SHAPES + NARROW_SHAPES + SMALL_BATCH_SHAPES,
                         peak)
    print()
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 1 if any("wrong" in text for text, ok in checks if not ok) else 0


if __name__ == "__main__":
    sys.exit(main())
