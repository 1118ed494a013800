"""The BLAS path's gemm, from each library the runtime can bind (runtime/cpu/blas.py).

MKL (32-bit integers) where the ``mkl`` package is installed, then numpy's OpenBLAS (64-bit
integers), then scipy's cython_blas gemm (32-bit): each is bound in turn here, and every
transpose shim's products are checked against numpy in float64.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from irc.runtime.cpu import blas as blas_runtime

import irc

DYN = "tensor<?x?x{t}>"


def _program(ta: bool, tb: bool, elem: str) -> str:
    dyn = DYN.format(t=elem)
    lines = [f"%t0 = graph.transpose %a {{perm = [1, 0]}} : {dyn} to {dyn}" if ta else "",
             f"%t1 = graph.transpose %b {{perm = [1, 0]}} : {dyn} to {dyn}" if tb else ""]
    return (f"func.func @mm(%a: {dyn}, %b: {dyn}) -> {dyn} {{\n" + "\n".join(f"  {x}" for x in lines if x)
            + f"\n  %c = graph.matmul {'%t0' if ta else '%a'}, {'%t1' if tb else '%b'} : ({dyn}, {dyn}) -> {dyn}"
            f"\n  func.return %c : {dyn}\n}}")


def _operands(rng, m, k, n, ta, tb, dtype):
    """A and B's buffers (each its operand's transpose where ``ta``/``tb``) and the operands in float64."""
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    return a, b, (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64)


def _within_sum_bound(got, la, lb, k, dtype) -> bool:
    """``got`` is A @ B within k + 1 roundings of the float64 product, and of its shape."""
    bound = (k + 1) * np.finfo(dtype).eps * (np.abs(la) @ np.abs(lb))
    return got.shape == (la.shape[0], lb.shape[1]) and bool(np.all(np.abs(got - la @ lb) <= bound))


@pytest.fixture(params=["mkl", "numpy", "scipy"])
def library(request, monkeypatch):
    """Bind only one library's gemm for the test (the lookup's cache cleared around it)."""
    find = {"mkl": blas_runtime._mkl_gemm, "numpy": blas_runtime._numpy_gemm,
            "scipy": blas_runtime._scipy_gemm}[request.param]
    if find("sgemm") is None:
        pytest.skip(f"{request.param} has no Fortran gemm here")
    monkeypatch.setattr(blas_runtime, "LIBRARIES", (find,))
    blas_runtime.gemm.cache_clear()
    yield request.param
    blas_runtime.gemm.cache_clear()


@pytest.mark.parametrize("elem", ["f32", "f64"])
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["nn", "tn", "nt", "tt"])
def test_each_library_computes_every_transpose(library, elem, flags):
    ta, tb = flags
    dt = np.float32 if elem == "f32" else np.float64
    rng = np.random.default_rng(7)
    exe = irc.compile(irc.parse(_program(ta, tb, elem)), blas=True, threads=1, cache=False)
    for m, k, n in [(70, 90, 50), (33, 129, 65), (257, 1, 130)]:
        a, b, la, lb = _operands(rng, m, k, n, ta, tb, dt)
        assert _within_sum_bound(exe.mm(a, b), la, lb, k, dt)
        module, _ = exe.mm.lower((a.shape, b.shape))
        assert "@irc_blas_" in module.print()  # the product went to BLAS, not to native loops


@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["nn", "tn", "nt", "tt"])
def test_threads_split_each_product_by_columns(library, flags, monkeypatch):
    """With ``split-blas`` every part computes its own block of C's columns through the shim's
    column range (forced here for every library; the runtime asks for it where the gemm runs on
    the calling thread, MKL's): each transpose, three parts, widths that are not multiples
    of the 16-column panels."""
    ta, tb = flags
    monkeypatch.setattr(blas_runtime, "split_across_threads", lambda: True)
    rng = np.random.default_rng(11)
    exe = irc.compile(irc.parse(_program(ta, tb, "f32")), blas=True, threads=3, cache=False)
    for m, k, n in [(130, 300, 70), (64, 600, 200)]:
        a, b, la, lb = _operands(rng, m, k, n, ta, tb, np.float32)
        assert _within_sum_bound(exe.mm(a, b), la, lb, k, np.float32)
        text = exe.mm.lower((a.shape, b.shape))[0].print()
        assert text.count("func.call @irc_blas_") == 1 and "chunks = 3" in text  # one call a part, on 3 threads


def test_a_split_product_applies_the_next_op_to_each_block(library, monkeypatch):
    """An MLP layer ``relu(x @ w + bias)`` on the split BLAS path: each part applies the bias
    and ReLU to its own columns right after its call, in the same parallel loop."""
    monkeypatch.setattr(blas_runtime, "split_across_threads", lambda: True)
    t = "tensor<96x200xf32>"
    src = f"""func.func @layer(%x: tensor<96x150xf32>, %w: tensor<150x200xf32>, %bias: tensor<200xf32>) -> {t} {{
  %zero = arith.constant 0.0 : f32
  %h = graph.matmul %x, %w : (tensor<96x150xf32>, tensor<150x200xf32>) -> {t}
  %bb = graph.broadcast %bias : tensor<200xf32> to {t}
  %s = arith.addf %h, %bb : {t}
  %z = graph.splat %zero : f32 to {t}
  %r = arith.maximumf %s, %z : {t}
  func.return %r : {t}
}}"""
    rng = np.random.default_rng(3)
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((96, 150), (150, 200), (200,)))
    exe = irc.compile(irc.parse(src), blas=True, threads=2, cache=False)
    want = np.maximum(x.astype(np.float64) @ w + bias, 0)
    got = exe.layer(x, w, bias)
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4)
    text = exe.layer.lower((x.shape, w.shape, bias.shape))[0].print()
    assert text.count("segment_of") == 1  # the product and the bias-and-ReLU: one parallel loop


@pytest.mark.parametrize("intel", [True, False])
def test_mkl_then_numpy_is_bound_first_on_intel_and_numpy_first_elsewhere(intel, monkeypatch):
    """On an Intel CPU MKL where installed, else numpy's own gemm; on another vendor's (where
    MKL measured slower than OpenBLAS) numpy's, then scipy's, then MKL."""
    monkeypatch.setattr(blas_runtime, "intel_cpu", lambda: intel)
    blas_runtime.gemm.cache_clear()
    try:
        found = blas_runtime.gemm("sgemm")
    finally:
        blas_runtime.gemm.cache_clear()
    mkl, numpy_ = blas_runtime._mkl_gemm("sgemm"), blas_runtime._numpy_gemm("sgemm")
    first = (mkl or numpy_) if intel else (numpy_ or blas_runtime._scipy_gemm("sgemm") or mkl)
    if first is None:
        pytest.skip("neither MKL nor numpy's Fortran-ABI gemm is here")
    assert found == first
    order = [f.__name__ for f in blas_runtime.libraries()]
    assert order == (["_mkl_gemm", "_numpy_gemm", "_scipy_gemm"] if intel else
                     ["_numpy_gemm", "_scipy_gemm", "_mkl_gemm"])


def test_numpy_s_openblas_is_split_across_irc_s_threads_only_when_held_to_one_thread():
    """numpy's OpenBLAS runs a call on the calling thread when it is held to one thread
    (``OPENBLAS_NUM_THREADS=1``): irc then splits products across its own threads, as for
    MKL; with threads of its own it takes whole products.  Checked in fresh processes."""
    import subprocess
    import sys

    probe = ("from irc.runtime.cpu import blas; g = blas._numpy_gemm('sgemm'); "
             "print('none' if g is None else g.on_calling_thread)")
    found = {}
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads}
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        found[threads] = out.stdout.strip()
    if found["1"] == "none":
        pytest.skip("numpy has no Fortran-ABI gemm here")
    assert found == {"1": "True", "2": "False"}


def test_the_cpu_vendor_is_read_from_proc_cpuinfo():
    """``intel_cpu`` reads Linux's vendor_id (where there is none, MKL keeps its place)."""
    import pathlib

    info = pathlib.Path("/proc/cpuinfo")
    if not info.exists():
        assert blas_runtime.intel_cpu()
        return
    vendors = {line.split(":", 1)[1].strip() for line in info.read_text().splitlines() if line.startswith("vendor_id")}
    assert blas_runtime.intel_cpu() == (vendors == {"GenuineIntel"} if vendors else True)


def test_mkl_runs_on_the_calling_thread_only():
    """MKL is switched to its sequential layer: its own threads would fight irc's pool (and a
    ``threads=1`` function's promise) for the cores."""
    runtime = blas_runtime._mkl_runtime()
    if runtime is None:
        pytest.skip("the mkl package is not installed")
    lib, _ = runtime
    set_layer = lib.MKL_Set_Threading_Layer
    assert set_layer(blas_runtime.MKL_THREADING_SEQUENTIAL) == blas_runtime.MKL_THREADING_SEQUENTIAL
    assert lib.MKL_Get_Max_Threads() == 1


def test_no_library_means_no_blas_path(monkeypatch):
    monkeypatch.setattr(blas_runtime, "LIBRARIES", ())
    blas_runtime.gemm.cache_clear()
    try:
        assert not blas_runtime.available()
        with pytest.raises(ValueError, match="blas=True needs a BLAS gemm"):
            irc.compile(irc.parse(_program(False, False, "f32")), blas=True)
    finally:
        blas_runtime.gemm.cache_clear()


@pytest.mark.parametrize("files", [["libmkl_rt.so.3"], ["libmkl_rt.so.3", "libmkl_core.so.3", "libmkl_sequential.so.3"]],
                         ids=["incomplete install", "not a library"])
def test_a_broken_mkl_install_is_passed_over(tmp_path, monkeypatch, files):
    """libmkl_rt ends the process at its first call when a library it loads then is missing:
    an install without its core and sequential layer is not used, and neither is a file that
    does not load (the next library in ``LIBRARIES`` is then bound)."""
    (tmp_path / "lib").mkdir()
    for name in files:
        (tmp_path / "lib" / name).write_bytes(b"not an ELF file")
    monkeypatch.setattr(blas_runtime.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(blas_runtime.sys, "base_prefix", str(tmp_path))
    blas_runtime._mkl_runtime.cache_clear()
    try:
        assert blas_runtime._mkl_runtime() is None
        assert blas_runtime._mkl_gemm("sgemm") is None
    finally:
        blas_runtime._mkl_runtime.cache_clear()
