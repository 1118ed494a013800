"""The MLP's product on every BLAS library at hand, beside jax.jit and irc's own GEMM (issue 14).

    python benchmarks/blas_libraries.py [--library PATH ...] [--rounds 30]

``blas=True`` sends a product to a BLAS sgemm (runtime/cpu/blas.py: numpy's OpenBLAS, else
scipy's).  Whether that path can beat jax.jit on the MLP forward depends on the library's
sgemm alone: this times one 256x1024 @ 1024x1024 f32 product (a layer of tensor_cpu.py's MLP)
on one core through each library's ``cblas_sgemm`` (row-major, as irc's shim computes it),
the gemm irc's BLAS path calls, ``jax.jit(x @ w)`` and irc's GEMM library, interleaved, and
prints GFLOP/s and each one's ratio to jax.  Libraries: numpy's and scipy's bundled
OpenBLAS where installed, the ``scipy-openblas32``/``scipy-openblas64`` and ``mkl`` wheels
where installed, and any shared library given with ``--library`` (it must export
``cblas_sgemm``, or ``scipy_cblas_sgemm`` / ``scipy_cblas_sgemm64_`` for the scipy-openblas
builds), and BLIS where the ``blis`` wheel (cython-blis, spaCy's) is installed: its extension
exports BLIS's typed ``bli_sgemm``, timed with the kernels BLIS picks for the CPU, or those
``BLIS_ARCH_TYPE`` names (``BLIS_ARCH_TYPE=skx python benchmarks/blas_libraries.py``: BLIS reads
it once per process).  Each result is checked against numpy's in f64.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MKL_THREADING_LAYER", "SEQUENTIAL")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
sys.path.insert(0, str(Path(__file__).resolve().parent))
tc = __import__("tensor_cpu")  # pins the process to one core and sets the thread variables

import numpy as np  # noqa: E402

M, K, N = 256, 1024, 1024
ROW_MAJOR, NO_TRANS = 101, 111


def _wheel_libraries() -> list[tuple[str, str]]:
    """(label, path) of the BLAS shared libraries that installed wheels ship."""
    found = []
    for package, pattern in (("scipy_openblas32", "lib/libscipy_openblas*.so*"),
                             ("scipy_openblas64", "lib/libscipy_openblas*.so*")):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for path in sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], pattern)))[:1]:
                found.append((package, path))
    for path in sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))[:1]:
        found.append(("mkl", path))
    return found


def _cblas(path: str):
    """``cblas_sgemm`` of the library at ``path`` as (function, 64-bit integers), or None."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for name, wide in (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True), ("scipy_cblas_sgemm", False),
                       ("cblas_sgemm", False)):
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        integer = ctypes.c_int64 if wide else ctypes.c_int
        fn.restype = None
        fn.argtypes = [integer] * 6 + [ctypes.c_float, ctypes.c_void_p, integer, ctypes.c_void_p, integer,
                                        ctypes.c_float, ctypes.c_void_p, integer]
        return fn
    return None


def _blis():
    """BLIS's ``bli_sgemm`` from the ``blis`` wheel's extension module, or None."""
    spec = importlib.util.find_spec("blis")
    if spec is None or not spec.submodule_search_locations:
        return None
    for path in sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "cy*.so"))):
        fn = getattr(ctypes.CDLL(path), "bli_sgemm", None)
        if fn is not None:
            fn.restype = None
            # (transa, transb, m, n, k, *alpha, a, rs_a, cs_a, b, rs_b, cs_b, *beta, c, rs_c, cs_c)
            fn.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 2 \
                + [ctypes.c_int64] * 2 + [ctypes.c_void_p] + [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 2 \
                + [ctypes.c_int64] * 2
            return fn
    return None


def contenders(a, b, c, libraries) -> dict:
    """name -> a call computing c = a @ b (f32)."""
    calls = {}
    for label, path in libraries:
        fn = _cblas(path)
        if fn is None:
            print(f"{label}: {path} exports no cblas_sgemm; skipped")
            continue
        calls[f"{label} ({os.path.basename(path)})"] = (
            lambda fn=fn: fn(ROW_MAJOR, NO_TRANS, NO_TRANS, M, N, K, 1.0, a.ctypes.data, K, b.ctypes.data, N,
                             0.0, c.ctypes.data, N))
    calls["numpy.matmul (numpy's OpenBLAS)"] = lambda: np.matmul(a, b, out=c)
    blis = _blis()
    if blis is not None:
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        arch = os.environ.get("BLIS_ARCH_TYPE")
        calls[f"BLIS (blis wheel{', BLIS_ARCH_TYPE=' + arch if arch else ''})"] = (
            lambda: blis(0, 0, M, N, K, ctypes.byref(one), a.ctypes.data, K, 1, b.ctypes.data, N, 1,
                         ctypes.byref(zero), c.ctypes.data, N, 1))
    try:
        import jax

        ja, jb = jax.numpy.asarray(a), jax.numpy.asarray(b)
        product = jax.jit(lambda x, y: x @ y)
        calls["jax.jit"] = lambda: product(ja, jb).block_until_ready()
    except ImportError:
        print("jax is not installed: no jax row")
    import irc
    from irc.testing.tensor_programs import matmul_program

    for blas in (True, False):
        mm = irc.compile(irc.parse(matmul_program(M, N, K)), blas=blas, cache_dir=tc.IRC_CACHE).mm
        calls["irc, blas=True (numpy's gemm)" if blas else "irc, its own GEMM"] = lambda mm=mm: mm(a, b, out=c)
    return calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", action="append", default=[], help="another BLAS shared library to time")
    ap.add_argument("--rounds", type=int, default=30)
    opts = ap.parse_args(argv)
    info = tc.machine()
    print(f"blas_libraries: {info['cpu']}, one core; irc {info['irc']}; {M}x{K} @ {K}x{N} f32")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.empty((M, N), np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    calls = contenders(a, b, c, _wheel_libraries() + [(os.path.basename(p), p) for p in opts.library])
    times: dict = {name: [] for name in calls}
    for name, call in calls.items():
        c.fill(np.nan)
        call()
        if name != "jax.jit" and not np.allclose(c, want, rtol=1e-3, atol=1e-2):
            print(f"{name}: WRONG RESULT")
            return 1
    for _ in range(opts.rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    jax_time = medians.get("jax.jit")
    print("| gemm | ms | GFLOP/s | time / jax.jit |")
    print("|---|---|---|---|")
    for name, t in sorted(medians.items(), key=lambda kv: kv[1]):
        ratio = f"{t / jax_time:.3f}" if jax_time else "-"
        print(f"| {name} | {t * 1e3:.3f} | {2 * M * N * K / t / 1e9:.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
