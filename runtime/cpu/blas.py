"""Optimised BLAS gemm for the JIT, bound from scipy's ``cython_blas`` (no new native dependency).

``tensor-to-loops{blas=true}`` lowers a large f32/f64 ``graph.matmul`` to a call of
``@irc_blas_sgemm`` / ``@irc_blas_dgemm`` (declared, not defined, in the module;
see passes/lowering/blas.py).  Here those symbols get a body: a small LLVM IR
shim, linked into the same JIT library, that turns irc's C ABI (row-major
memrefs as pointer and sizes, an i32 status) into the Fortran gemm call.
Row-major C = A B is column-major C^T = B^T A^T, so the shim calls
``gemm('N', 'N', n, m, k, 1, B, n, A, k, 0, C, n)``; the ``_tn``/``_nt``/``_tt``
shims take an operand's transpose's buffer and pass ``'T'`` for it instead.  The gemm itself is the
function pointer scipy exports in ``scipy.linalg.cython_blas.__pyx_capi__``
(OpenBLAS in scipy's wheels), imported into the JIT under a private name.
"""

from __future__ import annotations

import ctypes
from functools import cache

SHIMS = {f"irc_blas_{blas}{suffix}": (blas, elem, suffix)
         for blas, elem in (("sgemm", "float"), ("dgemm", "double")) for suffix in ("", "_tn", "_nt", "_tt")}
"""irc-level symbol -> (scipy cython_blas name, LLVM element type, transposes).  The suffix says
which operand buffers hold the operand's transpose (``_tn``: A's; see passes/lowering/blas.py):
the shim passes gemm's ``'T'`` flag for it and the buffer's row length as its leading dimension."""


@cache
def gemm_address(name: str) -> int | None:
    """The address of scipy's ``name`` (``sgemm``/``dgemm``), or None without scipy."""
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
    return get_pointer(capsule, get_name(capsule))


def available() -> bool:
    return all(gemm_address(blas) is not None for blas, _, _ in SHIMS.values())


def _shim(symbol: str, blas: str, elem: str, suffix: str = "") -> str:
    target = f"irc.scipy.{blas}"
    ta, tb = suffix[1:2] == "t", suffix[2:3] == "t"
    # C (m x n) = op(A) op(B), row-major, is column-major C^T = op(B)^T op(A)^T: B goes first.
    # A's buffer is (m x k), or (k x m) when it holds A^T; its rows are lda long.  Likewise B's.
    k_of_a = "%a0" if ta else "%a1"
    return f"""
declare void @"{target}"(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)

define i32 @{symbol}(ptr %a, i64 %a0, i64 %a1, ptr %b, i64 %b0, i64 %b1, ptr %c, i64 %m, i64 %n) {{
entry:
  %empty = icmp eq i64 %m, 0
  %empty2 = icmp eq i64 %n, 0
  %none = or i1 %empty, %empty2
  br i1 %none, label %done, label %call
call:
  %transa = alloca i8
  store i8 {84 if ta else 78}, ptr %transa
  %transb = alloca i8
  store i8 {84 if tb else 78}, ptr %transb
  %M = alloca i32
  %N = alloca i32
  %K = alloca i32
  %ldb = alloca i32
  %lda = alloca i32
  %ldc = alloca i32
  %alpha = alloca {elem}
  %beta = alloca {elem}
  %n32 = trunc i64 %n to i32
  %m32 = trunc i64 %m to i32
  %k32 = trunc i64 {k_of_a} to i32
  %a1_32 = trunc i64 %a1 to i32
  %b1_32 = trunc i64 %b1 to i32
  store i32 %n32, ptr %M
  store i32 %m32, ptr %N
  store i32 %k32, ptr %K
  store i32 %n32, ptr %ldc
  %a1_is_0 = icmp eq i32 %a1_32, 0
  %lda_v = select i1 %a1_is_0, i32 1, i32 %a1_32
  store i32 %lda_v, ptr %lda
  %b1_is_0 = icmp eq i32 %b1_32, 0
  %ldb_v = select i1 %b1_is_0, i32 1, i32 %b1_32
  store i32 %ldb_v, ptr %ldb
  store {elem} 1.0, ptr %alpha
  store {elem} 0.0, ptr %beta
  call void @"{target}"(ptr %transb, ptr %transa, ptr %M, ptr %N, ptr %K, ptr %alpha, ptr %b, ptr %ldb,
                        ptr %a, ptr %lda, ptr %beta, ptr %c, ptr %ldc)
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
        address = gemm_address(blas)
        if address is None:
            continue  # the link then fails with "undefined symbol", naming it
        modules.append(_shim(symbol, blas, elem, suffix))
        imports[f"irc.scipy.{blas}"] = address
    return modules, imports
