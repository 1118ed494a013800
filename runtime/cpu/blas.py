"""Optimised BLAS gemm for the JIT: the OpenBLAS numpy itself calls, else scipy's (no new native dependency).

``tensor-to-loops{blas=true}`` lowers a large f32/f64 ``graph.matmul`` to a call of
``@irc_blas_sgemm`` / ``@irc_blas_dgemm`` (declared, not defined, in the module;
see passes/lowering/blas.py).  Here those symbols get a body: a small LLVM IR
shim, linked into the same JIT library, that turns irc's C ABI (row-major
memrefs as pointer and sizes, an i32 status) into the Fortran gemm call.
Row-major C = A B is column-major C^T = B^T A^T, so the shim calls
``gemm('N', 'N', n, m, k, 1, B, n, A, k, 0, C, n)``; the ``_tn``/``_nt``/``_tt``
shims take an operand's transpose's buffer and pass ``'T'`` for it instead.  A call
computes C's columns ``col_begin`` to ``col_end`` only (the shim's last two parameters): the
same gemm on those columns of B and C, their leading dimensions unchanged, so that irc's
threads can each compute a block of columns (passes/lowering/blas.py, ``split-blas``).

Which gemm (``libraries()``, first found wins):

1. Intel's MKL where the ``mkl`` package is installed (``pip install 'irc[mkl]'``) and the CPU is
   Intel's (``intel_cpu``; on another vendor's, after numpy's and scipy's): its one
   dynamic library ``libmkl_rt`` in the environment's ``lib``, 32-bit integers, switched to its
   sequential layer: a product runs on the thread that calls it, so ``threads=1`` means one
   thread, and MKL's own threads never fight irc's pool or torch's OpenMP team for the cores
   (its threaded layers would bring a second OpenMP runtime).  With ``threads`` > 1 irc splits
   each large product by columns across its own threads, a call each
   (``split_across_threads``); numpy's OpenBLAS gets whole products and runs them on its own
   threads instead (``OPENBLAS_NUM_THREADS``), unless it is held to one, when irc splits them
   as for MKL.  On Intel's AVX-512 Xeons MKL's sgemm is the fastest here, 15-30% ahead of
   OpenBLAS's in docs/benchmarks.md (session 11).  On an AMD EPYC Zen 3 (session 17)
   it ran 1024^3 f32 at 69-85 GFLOP/s against numpy's OpenBLAS's 90-92 in the same runs, and
   tensor_cpu.py's MLP on the BLAS path in 1.04x numpy's time against 0.99x with OpenBLAS
   (MKL chooses its kernels by the CPU's vendor as well as its features), so there it comes
   after numpy's and scipy's, for a numpy without a Fortran-ABI BLAS.
2. numpy's own BLAS when it exports a Fortran gemm (numpy's wheels bundle scipy-openblas with
   64-bit integers, ``scipy_sgemm_64_``), looked up through numpy's ``_multiarray_umath``
   (dlsym searches the libraries it links), so that the BLAS path runs the very gemm
   ``x @ w`` runs in numpy.
3. The function pointer scipy exports in ``scipy.linalg.cython_blas.__pyx_capi__`` (scipy's
   own OpenBLAS, 32-bit integers): its wheels may bundle an older OpenBLAS (scipy 1.17.1's
   0.3.30 took 6.05 ms for 256x1024 @ 1024x1024 f32 on one core against 5.80 for numpy
   2.4.6's 0.3.31: docs/benchmarks.md).

Each is imported into the JIT under a private name.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SHIMS = {f"irc_blas_{blas}{suffix}": (blas, elem, suffix)
         for blas, elem in (("sgemm", "float"), ("dgemm", "double")) for suffix in ("", "_tn", "_nt", "_tt")}
"""irc-level symbol -> (BLAS routine, LLVM element type, transposes).  The suffix says
which operand buffers hold the operand's transpose (``_tn``: A's; see passes/lowering/blas.py):
the shim passes gemm's ``'T'`` flag for it and the buffer's row length as its leading dimension."""


@dataclass(frozen=True)
class Gemm:
    """A Fortran-ABI gemm found in this process: its address, the width of its integer
    arguments (64 for an ILP64 build), where it came from (for messages and benchmarks) and
    whether a call runs on the calling thread alone (then irc splits a product across its own
    threads: ``split_across_threads``)."""

    address: int
    int_bits: int
    source: str
    on_calling_thread: bool = False


MKL_THREADING_SEQUENTIAL = 1
"""``MKL_Set_Threading_Layer``'s code for MKL's one-thread layer (mkl_service.h)."""


@cache
def _mkl_runtime() -> tuple[ctypes.CDLL, str] | None:
    """MKL's ``libmkl_rt`` from the ``mkl`` package (in ``sys.prefix``'s ``lib``), loaded and
    set to run sequentially, and its file name; None where it is not installed, or where this
    process has MKL running with its own threads already (they would fight irc's threads for
    the cores)."""
    for directory in dict.fromkeys((Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib")):
        for path in sorted(directory.glob("libmkl_rt.so*")):
            version = path.name[len("libmkl_rt.so"):]
            # libmkl_rt loads these at its first call, and ends the process where one is missing
            if not all((directory / f"libmkl_{part}.so{version}").exists() for part in ("core", "sequential")):
                continue
            try:
                lib = ctypes.CDLL(str(path))
                set_layer = lib.MKL_Set_Threading_Layer
            except (OSError, AttributeError):
                continue
            set_layer.restype, set_layer.argtypes = ctypes.c_int, [ctypes.c_int]
            if set_layer(MKL_THREADING_SEQUENTIAL) != MKL_THREADING_SEQUENTIAL:
                return None
            return lib, path.name
    return None


def _mkl_gemm(name: str) -> Gemm | None:
    """MKL's Fortran gemm ``name`` (its LP64 interface: 32-bit integers), where installed."""
    runtime = _mkl_runtime()
    if runtime is None:
        return None
    lib, file = runtime
    address = _address(lib, f"{name}_")
    return Gemm(address, 32, f"MKL ({file} {name}_)", on_calling_thread=True) if address else None


def _address(lib: ctypes.CDLL, symbol: str) -> int | None:
    """The address of ``symbol`` in ``lib``, or None where it does not export it."""
    try:
        return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
    except AttributeError:
        return None


def _numpy_gemm(name: str) -> Gemm | None:
    """numpy's BLAS's ``name`` (``sgemm``/``dgemm``) when numpy links a Fortran-ABI BLAS."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy 1.x
        try:
            from numpy.core import _multiarray_umath as umath
        except ImportError:
            return None
    try:
        lib = ctypes.CDLL(umath.__file__)
    except OSError:
        return None
    for symbol, bits in ((f"scipy_{name}_64_", 64), (f"{name}_64_", 64), (f"scipy_{name}_", 32)):
        address = _address(lib, symbol)
        if address:
            return Gemm(address, bits, f"numpy's BLAS ({symbol})", on_calling_thread=_openblas_threads(lib) == 1)
    return None


OPENBLAS_THREADS = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                    "scipy_openblas_get_num_threads", "openblas_get_num_threads")
"""The names OpenBLAS's builds export its thread count under (scipy-openblas's prefix and 64-bit suffix)."""


def _openblas_threads(lib: ctypes.CDLL) -> int | None:
    """The threads OpenBLAS runs a call on (``OPENBLAS_NUM_THREADS``, else the cores), when
    ``lib`` reaches an OpenBLAS.  One thread: a call runs on the thread that makes it, and irc
    splits products across its own threads as it does for MKL (``split_across_threads``);
    more: OpenBLAS's own threads take each whole product.  Read once, when the gemm is bound."""
    for symbol in OPENBLAS_THREADS:
        fn = getattr(lib, symbol, None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
            return fn()
    return None


def _scipy_gemm(name: str) -> Gemm | None:
    """The gemm ``name`` scipy exports to Cython (its own BLAS, 32-bit integers)."""
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capsule = cython_blas.__pyx_capi__.get(name)
    if capsule is None:
        return None
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return Gemm(get_pointer(capsule, get_name(capsule)), 32, "scipy.linalg.cython_blas")


LIBRARIES = (_mkl_gemm, _numpy_gemm, _scipy_gemm)
"""Where a gemm is looked for, in order, on an Intel CPU (``libraries``)."""


@cache
def intel_cpu() -> bool:
    """Whether this machine's CPU is Intel's (``vendor_id`` in Linux's /proc/cpuinfo); True
    where that cannot be read, so that an installed MKL is used as asked."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip() == "GenuineIntel"
    except OSError:
        pass
    return True


def libraries() -> tuple:
    """``LIBRARIES``, MKL's last where the CPU is not Intel's (the module docstring)."""
    if _mkl_gemm in LIBRARIES and not intel_cpu():
        return tuple(f for f in LIBRARIES if f is not _mkl_gemm) + (_mkl_gemm,)
    return LIBRARIES


@cache
def gemm(name: str) -> Gemm | None:
    """The gemm ``name`` (``sgemm``/``dgemm``) the BLAS path calls, or None where no library has it."""
    for find in libraries():
        found = find(name)
        if found is not None:
            return found
    return None


def available() -> bool:
    return all(gemm(blas) is not None for blas, _, _ in SHIMS.values())


def split_across_threads() -> bool:
    """Whether irc's threads should split BLAS products by columns (``tensor-to-loops``'s
    ``split-blas``): where the gemm runs each call on the calling thread (MKL's sequential
    layer, an OpenBLAS held to one thread), not where it has threads of its own (OpenBLAS's,
    ``OPENBLAS_NUM_THREADS``), which a second caller would only contend with."""
    found = [gemm(blas) for blas, _, _ in SHIMS.values()]
    return all(g is not None and g.on_calling_thread for g in found)


def _shim(symbol: str, blas: str, elem: str, suffix: str = "", int_bits: int = 32) -> str:
    target = f"irc.blas.{blas}"
    ta, tb = suffix[1:2] == "t", suffix[2:3] == "t"
    it = f"i{int_bits}"
    # C (m x n) = op(A) op(B), row-major, is column-major C^T = op(B)^T op(A)^T: B goes first.
    # A's buffer is (m x k), or (k x m) when it holds A^T; its rows are lda long.  Likewise B's.
    k_of_a = "%a0" if ta else "%a1"

    def narrow(value: str, name: str) -> str:
        return f"  %{name} = trunc i64 {value} to {it}" if int_bits < 64 else f"  %{name} = add i64 {value}, 0"
    return f"""
declare void @"{target}"(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)

define i32 @{symbol}(ptr %a, i64 %a0, i64 %a1, ptr %b, i64 %b0, i64 %b1, ptr %c, i64 %m, i64 %n,
                     i64 %col_begin, i64 %col_end) {{
entry:
  %cols = sub i64 %col_end, %col_begin
  %empty = icmp eq i64 %m, 0
  %empty2 = icmp sle i64 %cols, 0
  %none = or i1 %empty, %empty2
  br i1 %none, label %done, label %call
call:
  %transa = alloca i8
  store i8 {84 if ta else 78}, ptr %transa
  %transb = alloca i8
  store i8 {84 if tb else 78}, ptr %transb
  %M = alloca {it}
  %N = alloca {it}
  %K = alloca {it}
  %ldb = alloca {it}
  %lda = alloca {it}
  %ldc = alloca {it}
  %alpha = alloca {elem}
  %beta = alloca {elem}
{narrow("%cols", "cols_")}
{narrow("%n", "n_")}
{narrow("%m", "m_")}
{narrow(k_of_a, "k_")}
{narrow("%a1", "a1_")}
{narrow("%b1", "b1_")}
  ; the columns col_begin.. of B: that element of each of B's rows, or that row of B^T's buffer
{"  %b_first = mul i64 %col_begin, %b1" if tb else ""}
  %b_at = getelementptr {elem}, ptr %b, i64 {"%b_first" if tb else "%col_begin"}
  %c_at = getelementptr {elem}, ptr %c, i64 %col_begin
  store {it} %cols_, ptr %M
  store {it} %m_, ptr %N
  store {it} %k_, ptr %K
  store {it} %n_, ptr %ldc
  %a1_is_0 = icmp eq {it} %a1_, 0
  %lda_v = select i1 %a1_is_0, {it} 1, {it} %a1_
  store {it} %lda_v, ptr %lda
  %b1_is_0 = icmp eq {it} %b1_, 0
  %ldb_v = select i1 %b1_is_0, {it} 1, {it} %b1_
  store {it} %ldb_v, ptr %ldb
  store {elem} 1.0, ptr %alpha
  store {elem} 0.0, ptr %beta
  call void @"{target}"(ptr %transb, ptr %transa, ptr %M, ptr %N, ptr %K, ptr %alpha, ptr %b_at, ptr %ldb,
                        ptr %a, ptr %lda, ptr %beta, ptr %c_at, ptr %ldc)
  br label %done
done:
  ret i32 0
}}
"""


def link_extras(declared: set[str]) -> tuple[list[str], dict[str, int]]:
    """For the BLAS symbols a module declares: the shims' IR and the addresses they import."""
    modules, imports = [], {}
    for symbol in sorted(declared & SHIMS.keys()):
        blas, elem, suffix = SHIMS[symbol]
        found = gemm(blas)
        if found is None:
            continue  # the link then fails with "undefined symbol", naming it
        modules.append(_shim(symbol, blas, elem, suffix, found.int_bits))
        imports[f"irc.blas.{blas}"] = found.address
    return modules, imports
