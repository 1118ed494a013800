#!/usr/bin/env python3
"""Tensor programs on one CPU core: irc side by side with numpy, numexpr, numba, jax, torch and C.

The speed and memory figures of issues 5 and 14, every contender in one run, each on
the same seeded inputs.  The targets are relative to what runs beside irc in the same run
(``relative_checks``), so that they hold on any host:

=========  ==========================================================  ==============================
workload   what                                                        irc target
=========  ==========================================================  ==============================
sigmoid    ``1 / (1 + exp(-(a*b + c)))``, 2^24 f32 elements (1-D)      <= 1.1x C; 1st call <= 0.15 s
gelu       ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, 2^24   <= 1.1x C; 1st call <= 0.15 s
softmax    row softmax of 4096 x 1024 f32 (``graph.softmax``)        <= 1.1x C; 1st call <= 0.15 s
matmul     1024^3 f32 GFLOP/s                                          native >= 85% of the best peer;
                                                                       BLAS path >= 95% of numpy
mlp        16 layers ``h = relu(h @ W_i + b_i)``, batch 256, width    native and BLAS path faster
           1024                                                        than numpy, jax.jit, torch;
                                                                       1st call <= 0.3 s; planned
                                                                       intermediates <= 2 activations
=========  ==========================================================  ==============================

``--cpu x86-64-v3`` holds irc and every peer to AVX2 (``CPU_LEVELS``): the run an AVX2 host
would give, on this one.

**irc** runs the ``.ir`` programs below through ``irc.compile`` (the tensor
pipeline of runtime/tensor_function.py: shape specialisation, fusion,
tensor-to-loops, memory planning, math-approx when registered), called as
``exe.f(a, b, out=...)`` with preallocated outputs; sigmoid also has the
variant that lets irc allocate its output, and where the ``math-approx`` pass
exists, the variant with libm calls (``math_approx=False``).  Matmul is timed
with irc's own GEMM (``blas=False``) and, where irc has one, its BLAS path
(``blas=True``: MKL's gemm where the ``mkl`` package is installed, else numpy's OpenBLAS, else
scipy's; runtime/cpu/blas.py; the run prints which).  irc's compile cache is a fresh
temporary directory, so its "1st call" column is a cold compile plus one run
(torch.compile's depends on what earlier runs left in inductor's disk cache).

**Peers**, each only where installed (otherwise the row says so): numpy eager
(as a user writes it; its temporaries included), numexpr (``out=``), numba
``@njit`` loops (``fastmath=False`` and ``True``), ``jax.jit``, torch eager and
``torch.compile`` (the compiled function writes into a given output with
``out.copy_(...)``), and C (``benchmarks/c/tensor_kernels.c``, built with
``gcc -O3 -march=native -ffast-math`` so that ``expf``/``tanhf`` go to glibc's
vector libm; called through ctypes).  Everything is single-threaded: the
thread-count variables below are set before numpy (or any peer) is imported,
torch gets ``set_num_threads(1)`` and irc ``irc.compile(threads=1)``.

**Method.**  Every contender's first result is checked against numpy in
float64 (``|got - ref| <= atol + rtol |ref|`` everywhere); a wrong one is
reported as wrong and not timed, and one that raises is reported with its
error, and the rest of the run goes on.  Times are medians of ``--repeat``
calls, the contenders interleaved (round robin) so that the drift of a shared
machine hits them alike; ratios are ``time / irc`` from this same run.  The fastest call
is printed too: what the code does while nothing slows the core.  Each
table prints ``cpu%``: the process's CPU time over wall time during its timed
calls (about 100% when nothing else took the core; more where a peer runs
helper threads).

**Matmul and OpenBLAS.**  The environment may pin OpenBLAS's kernels with
``OPENBLAS_CORETYPE`` (this machine's sets ``Haswell``: AVX2 kernels on an
AVX-512 CPU), which binds numpy's gemm and scipy's, and so irc's BLAS path.
The script keeps the environment as it is, prints which kernels each loaded
OpenBLAS uses, and where the variable is set adds a row timed in a
subprocess without it (OpenBLAS's own choice for this CPU); irc's native GEMM
is then checked against both numpy figures, its BLAS path against the
in-process one (both pinned alike).

**Memory** (mlp).  irc's planned peak of intermediates is the ``arena_bytes``
of the compiled specialisation (passes/plan_memory.py), compared with one
activation (batch x width x 4 bytes).  Buffers that plan-memory leaves out of
the arena (those handed to a call, such as the BLAS path's gemm operands) are
counted from the lowered module (``TensorFunction.lower``) and reported
beside it: they are allocated on the heap in each call, so the target counts
them as unplanned.  The measured peak of one forward call
runs in a fresh subprocess per contender (so that nothing another contender
allocated is in the way): build the inputs, compile and call twice (compile
time, LLVM's memory and one-time library buffers such as OpenBLAS's are thus
outside the measurement), then measure one call two ways:

* **RSS**: the growth of the resident set during the call, VmHWM after the call
  minus VmRSS before it, with the high-water mark reset just before the call
  (``/proc/self/clear_refs`` <- ``5``).  It sees every allocator (numpy,
  torch's, XLA's, irc's arena), at page granularity.  Two things would hide
  memory from it, and are switched off: glibc serves blocks from freed heap
  that is still resident (compiling and warming up leave megabytes of it), so
  ``malloc_trim(0)`` hands those pages back just before the call; and
  glibc's mmap threshold grows with the blocks freed, so that freed blocks
  stay in the heap, so the child runs with ``MALLOC_MMAP_THRESHOLD_=131072``:
  every block of 128 KiB or more is mapped when allocated and unmapped when
  freed, and RSS follows what is live during the call.
* **tracemalloc**: the peak of memory allocated during the call and still
  traced, which numpy reports for its array data (irc's outputs and arena are
  numpy arrays).  Exact to the byte and blind to other allocators: torch and
  jax show "-".

irc keeps its arena between calls (one per specialisation); the child drops it
before the measured call, so the call allocates it again and both figures
include irc's intermediates, as they include numpy's temporaries.  Both
contenders allocate their output (one activation), which both figures count.

    python benchmarks/tensor_cpu.py                 # everything: a few minutes
    python benchmarks/tensor_cpu.py --quick         # smoke test: small sizes, < 30 s
    python benchmarks/tensor_cpu.py --only softmax,matmul --repeat 21
    python benchmarks/tensor_cpu.py --cpu x86-64-v3 # every contender on AVX2 only

The exit status is 1 when an irc contender raised or gave a wrong result, 0
otherwise (whether or not the targets are met).
"""

from __future__ import annotations

import os
import sys

THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMBA_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "NUMEXPR_MAX_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}

CPU_LEVELS = {
    "x86-64-v3": {"IRC_CPU": "x86-64-v3", "OPENBLAS_CORETYPE": "Haswell", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                  "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR", "ATEN_CPU_CAPABILITY": "avx2",
                  "NUMBA_CPU_NAME": "x86-64-v3", "XLA_FLAGS": " --xla_cpu_max_isa=AVX2", "C": "-march=x86-64-v3"},
    "x86-64-v2": {"IRC_CPU": "x86-64-v2", "OPENBLAS_CORETYPE": "Nehalem", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                  "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR", "ATEN_CPU_CAPABILITY": "default",
                  "NUMBA_CPU_NAME": "x86-64-v2", "XLA_FLAGS": " --xla_cpu_max_isa=SSE4_2", "C": "-march=x86-64-v2"},
}
"""``--cpu LEVEL``: every contender held to that x86-64 level's instructions, as on a host that has no
more (an AVX2 machine on this AVX-512 one): irc through ``IRC_CPU`` (runtime/cpu/target_cpu.py),
OpenBLAS through its core type, MKL (irc's BLAS path's where installed, and torch's) through
``MKL_ENABLE_INSTRUCTIONS``, numpy's own loops, torch (eager and inductor's vector ISA), numba,
XLA, and C compiled for the level.  Caches and cores stay this machine's.  Not held: the matrix
products of jax (XLA's library kernels choose by the CPU, ``--xla_cpu_max_isa`` or not: 131
GFLOP/s at x86-64-v3 and 135 at x86-64-v2 on the Intel Xeon, session 15, where torch's MKL held
to AVX2 ran 79 and to SSE4.2 30; ``NOT_HELD``), and at x86-64-v2 torch.compile (inductor has no
SSE vector ISA)."""

NOT_HELD = {"x86-64-v3": ("jax.jit",), "x86-64-v2": ("jax.jit",)}
"""Peers whose matrix products ignore ``--cpu``'s level: the matmul and MLP checks leave them
out at that level (their rows are printed, marked), since a host of that level would not run
their AVX-512 kernels."""

CPU_LEVEL = next((a.split("=", 1)[1] if "=" in a else (sys.argv[i + 1] if i + 1 < len(sys.argv) else "")
                  for i, a in enumerate(sys.argv) if a == "--cpu" or a.startswith("--cpu=")), None)
if CPU_LEVEL in CPU_LEVELS:  # before numpy or any peer is loaded; argparse rejects other values
    for _name, _value in CPU_LEVELS[CPU_LEVEL].items():
        if _name == "XLA_FLAGS":
            THREAD_ENV[_name] += _value
        elif _name != "C":
            os.environ[_name] = _value
os.environ.update(THREAD_ENV)  # before numpy, BLAS or any peer is loaded

PINNED_CPU = None
"""The one core this process (and the processes it starts) may run on.  jax 0.10's XLA CPU
runtime runs a large dot on a pool of every core the process may use, whatever XLA_FLAGS say:
a 256x1024x1024 f32 jax.jit matmul took 1.95 s of CPU time per second (200 GFLOP/s on the
2-core EPYC of docs/benchmarks.md, 2026-11-24) with the flags above, and 1.00 (105 GFLOP/s)
pinned.  The affinity mask is the one setting every contender obeys."""
if hasattr(os, "sched_setaffinity") and os.environ.get("IRC_BENCH_ALL_CORES") != "1":  # gemm.py --threads
    PINNED_CPU = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {PINNED_CPU})

import argparse  # noqa: E402
import ctypes  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from importlib import metadata  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import irc  # noqa: E402

HERE = Path(__file__).resolve().parent
C_SOURCE = HERE / "c" / "tensor_kernels.c"
C_FLAGS = ["-O3", CPU_LEVELS[CPU_LEVEL]["C"] if CPU_LEVEL in CPU_LEVELS else "-march=native", "-ffast-math"]
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}

GELU_K = 0.7978845608028654  # sqrt(2/pi)
GELU_C = 0.044715

# ---- the irc programs ---------------------------------------------------------------------------

SIGMOID_IR = """
func.func @sigmoid(%a: tensor<?xf32>, %b: tensor<?xf32>, %c: tensor<?xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %one_s = arith.constant 1.0 : f32
  %one = graph.splat %one_s, %n : f32 to tensor<?xf32>
  %ab = arith.mulf %a, %b : tensor<?xf32>
  %x = arith.addf %ab, %c : tensor<?xf32>
  %nx = arith.negf %x : tensor<?xf32>
  %e = math.exp %nx : tensor<?xf32>
  %d = arith.addf %one, %e : tensor<?xf32>
  %r = arith.divf %one, %d : tensor<?xf32>
  func.return %r : tensor<?xf32>
}
"""

GELU_IR = f"""
func.func @gelu(%x: tensor<?xf32>) -> tensor<?xf32> {{
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %half_s = arith.constant 0.5 : f32
  %one_s = arith.constant 1.0 : f32
  %k_s = arith.constant {GELU_K} : f32
  %c_s = arith.constant {GELU_C} : f32
  %half = graph.splat %half_s, %n : f32 to tensor<?xf32>
  %one = graph.splat %one_s, %n : f32 to tensor<?xf32>
  %k = graph.splat %k_s, %n : f32 to tensor<?xf32>
  %c = graph.splat %c_s, %n : f32 to tensor<?xf32>
  %x2 = arith.mulf %x, %x : tensor<?xf32>
  %x3 = arith.mulf %x2, %x : tensor<?xf32>
  %cx3 = arith.mulf %c, %x3 : tensor<?xf32>
  %inner = arith.addf %x, %cx3 : tensor<?xf32>
  %z = arith.mulf %k, %inner : tensor<?xf32>
  %t = math.tanh %z : tensor<?xf32>
  %onet = arith.addf %one, %t : tensor<?xf32>
  %hx = arith.mulf %half, %x : tensor<?xf32>
  %r = arith.mulf %hx, %onet : tensor<?xf32>
  func.return %r : tensor<?xf32>
}}
"""

SOFTMAX_IR = """
func.func @softmax(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %r = graph.softmax %x {axis = 1} : tensor<?x?xf32>
  func.return %r : tensor<?x?xf32>
}
"""

MATMUL_IR = """
func.func @matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c = graph.matmul %a, %b : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %c : tensor<?x?xf32>
}
"""


def mlp_ir(layers: int) -> str:
    """``h = relu(h @ W_i + b_i)``, ``layers`` times; the weights are separate parameters."""
    t2, t1 = "tensor<?x?xf32>", "tensor<?xf32>"
    params = ", ".join(["%x: " + t2] + [f"%w{i}: {t2}, %b{i}: {t1}" for i in range(layers)])
    lines = ["%c0 = arith.constant 0 : index", "%c1 = arith.constant 1 : index",
             "%zero = arith.constant 0.0 : f32", f"%n = tensor.dim %x, %c0 : {t2}"]
    h = "%x"
    for i in range(layers):
        lines += [f"%m{i} = graph.matmul {h}, %w{i} : ({t2}, {t2}) -> {t2}",
                  f"%k{i} = tensor.dim %w{i}, %c1 : {t2}",
                  f"%bb{i} = graph.broadcast %b{i}, %n, %k{i} : {t1} to {t2}",
                  f"%s{i} = arith.addf %m{i}, %bb{i} : {t2}",
                  f"%z{i} = graph.splat %zero, %n, %k{i} : f32 to {t2}",
                  f"%h{i} = arith.maximumf %s{i}, %z{i} : {t2}"]
        h = f"%h{i}"
    body = "\n  ".join(lines)
    return f"func.func @mlp({params}) -> {t2} {{\n  {body}\n  func.return {h} : {t2}\n}}\n"


# ---- peers: loaded on first use, each optional ----------------------------------------------------


class Missing(Exception):
    """A peer that is not installed here."""


class NotApplicable(Exception):
    """The peer has nothing that runs this workload."""


@functools.cache
def peer(name: str):
    try:
        if name == "numexpr":
            import numexpr

            numexpr.set_num_threads(1)
            return numexpr
        if name == "numba":
            import numba

            return numba
        if name == "jax":
            import jax

            return jax
        if name == "torch":
            import torch

            torch.set_num_threads(1)
            try:
                torch.set_num_interop_threads(1)
            except RuntimeError:  # only allowed before torch starts its pool
                pass
            return torch
    except ImportError:
        raise Missing(f"{name} not installed") from None
    raise ValueError(name)


@functools.cache
def c_library():
    """The C kernels as a ctypes library (built once per run), or Missing without gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise Missing("gcc not found")
    so = Path(tempfile.mkdtemp(prefix="irc-bench-c-")) / "tensor_kernels.so"
    subprocess.run([gcc, *C_FLAGS, "-shared", "-fPIC", str(C_SOURCE), "-o", str(so), "-lm"], check=True)
    lib = ctypes.CDLL(str(so))
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    for name, argtypes in [("sigmoid_fma", [ptr, ptr, ptr, ptr, i64]), ("gelu_tanh", [ptr, ptr, i64]),
                           ("softmax_rows", [ptr, ptr, i64, i64]),
                           ("matmul_ikj", [ptr, ptr, ptr, i64, i64, i64])]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, None
    return lib


def torch_compile(fn):
    torch = peer("torch")
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # no pool of compile workers on a 2-core machine
    if CPU_LEVEL == "x86-64-v3":
        inductor_config.cpp.simdlen = 256  # AVX2 vectors, as ATEN_CPU_CAPABILITY holds eager torch to
    return torch.compile(fn)


IRC_CACHE = tempfile.mkdtemp(prefix="irc-bench-cache-")


@functools.cache
def irc_single_thread() -> dict:
    """``threads=1`` where ``irc.compile`` can run parallel loops (it uses every core by default)."""
    from irc.runtime import executable  # irc.compile forwards its options here

    return {"threads": 1} if "threads" in inspect.signature(executable.compile).parameters else {}


def irc_function(text: str, entry: str, **options):
    """The compiled tensor function ``entry`` of ``text`` (compiled per shapes on first call)."""
    exe = irc.compile(irc.parse(text), cache_dir=IRC_CACHE, **irc_single_thread(), **options)
    return getattr(exe, entry)


def math_approx_registered() -> bool:
    from irc.passmanager import PASSES

    return "math-approx" in PASSES


# numba kernels: plain Python, compiled per variant with numba.njit.  Constants are float32
# globals (numba freezes them with their type), so the arithmetic stays in f32.
F32_ZERO, F32_HALF, F32_ONE = np.float32(0.0), np.float32(0.5), np.float32(1.0)
F32_GELU_K, F32_GELU_C = np.float32(GELU_K), np.float32(GELU_C)


def sigmoid_loop(a, b, c, out):
    for i in range(a.shape[0]):
        out[i] = F32_ONE / (F32_ONE + np.exp(-(a[i] * b[i] + c[i])))


def gelu_loop(x, out):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = F32_HALF * v * (F32_ONE + np.tanh(F32_GELU_K * (v + F32_GELU_C * v * v * v)))


def softmax_loop(x, out):
    rows, cols = x.shape
    for r in range(rows):
        m = x[r, 0]
        for j in range(1, cols):
            m = max(m, x[r, j])
        s = F32_ZERO
        for j in range(cols):
            e = np.exp(x[r, j] - m)
            out[r, j] = e
            s += e
        inv = F32_ONE / s
        for j in range(cols):
            out[r, j] *= inv


def matmul_loop(a, b, c):
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            c[i, j] = F32_ZERO
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                c[i, j] += aip * b[p, j]


def njit(fn, fastmath: bool):
    return peer("numba").njit(fastmath=fastmath)(fn)


# ---- workloads and contenders -----------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    output: str  # how the result is produced: "out=" (into a preallocated array) or "allocates"
    build: Callable  # inputs -> a zero-argument callable that runs once and returns the result
    is_irc: bool = False
    quick: bool = True  # False: skipped with --quick (compiles too slowly for a smoke test)


@dataclass
class Workload:
    key: str
    title: Callable  # sizes -> str
    full: tuple
    quick: tuple
    make: Callable  # (sizes, rng) -> dict of input arrays, in parameter order
    reference: Callable  # inputs -> float64 result
    tolerance: Callable  # reference -> (rtol, atol)
    contenders: list[Contender]
    flops: Callable | None = None  # sizes -> floating-point operations of one call


def _out(inp, like: str) -> np.ndarray:
    """A preallocated f32 output shaped like input ``like``."""
    return np.empty(inp[like].shape, np.float32)


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _torch_inputs(inp):
    torch = peer("torch")
    return {k: torch.from_numpy(v) for k, v in inp.items()}


def _jax_inputs(inp):
    jax = peer("jax")
    return {k: jax.device_put(v) for k, v in inp.items()}


def _irc(text, entry, out=True, **options):
    def build(inp):
        fn = irc_function(text, entry, **options)
        args = list(inp.values())
        if not out:
            return lambda: fn(*args)
        o = np.empty(output_shape(inp, entry), np.float32)
        return lambda: fn(*args, out=o)

    return build


def output_shape(inp, entry):
    if entry in ("sigmoid", "gelu"):
        return next(iter(inp.values())).shape
    if entry == "softmax":
        return inp["x"].shape
    if entry == "matmul":
        return (inp["a"].shape[0], inp["b"].shape[1])
    if entry == "mlp":
        return (inp["x"].shape[0], inp[f"w{(len(inp) - 1) // 2 - 1}"].shape[1])
    raise ValueError(entry)


def irc_rows(text: str, entry: str, *, alloc_variant=False, libm_variant=False) -> list[Contender]:
    rows = [Contender("irc", "out=", _irc(text, entry), is_irc=True)]
    if alloc_variant:
        rows.append(Contender("irc", "allocates", _irc(text, entry, out=False), is_irc=True))
    if libm_variant and math_approx_registered():
        rows.append(Contender("irc, libm calls (math_approx=False)", "out=",
                              _irc(text, entry, math_approx=False), is_irc=True))
    return rows


# sigmoid ---------------------------------------------------------------------------------------------


def sigmoid_workload() -> Workload:
    def make(sizes, rng):
        (n,) = sizes
        return {k: rng.standard_normal(n, dtype=np.float32) for k in "abc"}

    def reference(inp):
        a, b, c = (v.astype(np.float64) for v in inp.values())
        return 1.0 / (1.0 + np.exp(-(a * b + c)))

    def numpy_eager(inp):
        a, b, c = inp.values()
        return lambda: 1 / (1 + np.exp(-(a * b + c)))

    def numexpr(inp):
        ne, o = peer("numexpr"), _out(inp, "a")
        return lambda: ne.evaluate("1 / (1 + exp(-(a * b + c)))", local_dict=inp, out=o)

    def numba(fastmath):
        def build(inp):
            fn, o = njit(sigmoid_loop, fastmath), _out(inp, "a")
            return lambda: (fn(*inp.values(), o), o)[1]
        return build

    def jax_jit(inp):
        jax = peer("jax")
        fn, a, b, c = jax.jit(lambda a, b, c: jax.nn.sigmoid(a * b + c)), *_jax_inputs(inp).values()
        return lambda: fn(a, b, c).block_until_ready()

    def torch_eager(inp):
        torch = peer("torch")
        a, b, c = _torch_inputs(inp).values()
        o = torch.empty_like(a)
        return lambda: torch.sigmoid(a * b + c, out=o)

    def torch_compiled(inp):
        torch = peer("torch")
        a, b, c = _torch_inputs(inp).values()
        o = torch.empty_like(a)

        def sigmoid(a, b, c, out):
            out.copy_(torch.sigmoid(a * b + c))

        fn = torch_compile(sigmoid)
        return lambda: (fn(a, b, c, o), o)[1]

    def c(inp):
        lib, o = c_library(), _out(inp, "a")
        a, b, cc = inp.values()
        return lambda: (lib.sigmoid_fma(_ptr(a), _ptr(b), _ptr(cc), _ptr(o), a.size), o)[1]

    return Workload(
        "sigmoid", lambda s: f"sigmoid(a*b+c), {s[0]:,} f32 elements (1-D)", (1 << 24,), (1 << 16,),
        make, reference, lambda ref: (1e-5, 1e-6),
        [*irc_rows(SIGMOID_IR, "sigmoid", alloc_variant=True, libm_variant=True),
         Contender("numpy", "allocates", numpy_eager), Contender("numexpr", "out=", numexpr),
         Contender("numba @njit", "out=", numba(False)),
         Contender("numba @njit(fastmath=True)", "out=", numba(True)),
         Contender("jax.jit", "allocates", jax_jit), Contender("torch eager", "out=", torch_eager),
         Contender("torch.compile", "out=", torch_compiled, quick=False),
         Contender("C gcc -O3 -ffast-math", "out=", c)])


# gelu ---------------------------------------------------------------------------------------------------


def gelu_workload() -> Workload:
    def make(sizes, rng):
        return {"x": 2 * rng.standard_normal(sizes[0], dtype=np.float32)}

    def reference(inp):
        x = inp["x"].astype(np.float64)
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + GELU_C * x ** 3)))

    def numpy_eager(inp):
        x = inp["x"]
        k = np.float32(GELU_K)
        return lambda: 0.5 * x * (1 + np.tanh(k * (x + np.float32(GELU_C) * (x * x * x))))

    def numexpr(inp):
        ne, o = peer("numexpr"), _out(inp, "x")
        names = dict(x=inp["x"], h=F32_HALF, k=F32_GELU_K, c=F32_GELU_C)  # f32 scalars keep f32
        return lambda: ne.evaluate("h * x * (1 + tanh(k * (x + c * x * x * x)))", local_dict=names, out=o)

    def numba(fastmath):
        def build(inp):
            fn, o = njit(gelu_loop, fastmath), _out(inp, "x")
            return lambda: (fn(inp["x"], o), o)[1]
        return build

    def jax_jit(inp):
        jax = peer("jax")
        fn, x = jax.jit(lambda x: jax.nn.gelu(x, approximate=True)), _jax_inputs(inp)["x"]
        return lambda: fn(x).block_until_ready()

    def torch_eager(inp):
        torch = peer("torch")
        x = _torch_inputs(inp)["x"]
        return lambda: torch.nn.functional.gelu(x, approximate="tanh")

    def torch_compiled(inp):
        torch = peer("torch")
        x = _torch_inputs(inp)["x"]
        o = torch.empty_like(x)

        def gelu(x, out):
            out.copy_(0.5 * x * (1 + torch.tanh(GELU_K * (x + GELU_C * x * x * x))))

        fn = torch_compile(gelu)
        return lambda: (fn(x, o), o)[1]

    def c(inp):
        lib, o, x = c_library(), _out(inp, "x"), inp["x"]
        return lambda: (lib.gelu_tanh(_ptr(x), _ptr(o), x.size), o)[1]

    return Workload(
        "gelu", lambda s: f"tanh-GELU, {s[0]:,} f32 elements (1-D)", (1 << 24,), (1 << 16,),
        make, reference, lambda ref: (1e-5, 1e-5),
        [*irc_rows(GELU_IR, "gelu", libm_variant=True),
         Contender("numpy", "allocates", numpy_eager), Contender("numexpr", "out=", numexpr),
         Contender("numba @njit", "out=", numba(False)),
         Contender("numba @njit(fastmath=True)", "out=", numba(True)),
         Contender("jax.jit (jax.nn.gelu approximate)", "allocates", jax_jit),
         Contender("torch eager (F.gelu tanh)", "allocates", torch_eager),
         Contender("torch.compile", "out=", torch_compiled, quick=False),
         Contender("C gcc -O3 -ffast-math", "out=", c)])


# softmax ----------------------------------------------------------------------------------------------------


def softmax_workload() -> Workload:
    def make(sizes, rng):
        return {"x": 2 * rng.standard_normal(sizes, dtype=np.float32)}

    def reference(inp):
        x = inp["x"].astype(np.float64)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def numpy_eager(inp):
        x = inp["x"]

        def softmax():
            e = np.exp(x - x.max(axis=1, keepdims=True))
            e /= e.sum(axis=1, keepdims=True)
            return e
        return softmax

    def numexpr(inp):  # numexpr has no axis reductions: numpy's max and sum around its exp
        ne, x, o = peer("numexpr"), inp["x"], _out(inp, "x")

        def softmax():
            m = x.max(axis=1, keepdims=True)
            e = ne.evaluate("exp(x - m)", local_dict={"x": x, "m": m})
            s = e.sum(axis=1, keepdims=True)
            return ne.evaluate("e / s", local_dict={"e": e, "s": s}, out=o)
        return softmax

    def numba(fastmath):
        def build(inp):
            fn, o = njit(softmax_loop, fastmath), _out(inp, "x")
            return lambda: (fn(inp["x"], o), o)[1]
        return build

    def jax_jit(inp):
        jax = peer("jax")
        fn, x = jax.jit(lambda x: jax.nn.softmax(x, axis=1)), _jax_inputs(inp)["x"]
        return lambda: fn(x).block_until_ready()

    def torch_eager(inp):
        torch = peer("torch")
        x = _torch_inputs(inp)["x"]
        return lambda: torch.softmax(x, dim=1)

    def torch_compiled(inp):
        torch = peer("torch")
        x = _torch_inputs(inp)["x"]
        o = torch.empty_like(x)

        def softmax(x, out):
            out.copy_(torch.softmax(x, dim=1))

        fn = torch_compile(softmax)
        return lambda: (fn(x, o), o)[1]

    def c(inp):
        lib, o, x = c_library(), _out(inp, "x"), inp["x"]
        return lambda: (lib.softmax_rows(_ptr(x), _ptr(o), *x.shape), o)[1]

    return Workload(
        "softmax", lambda s: f"row softmax, {s[0]}x{s[1]} f32 (axis 1)", (4096, 1024), (64, 256),
        make, reference, lambda ref: (1e-4, 1e-8),
        [*irc_rows(SOFTMAX_IR, "softmax", libm_variant=True),
         Contender("numpy", "allocates", numpy_eager),
         Contender("numexpr (numpy max/sum)", "out=", numexpr),
         Contender("numba @njit", "out=", numba(False)),
         Contender("numba @njit(fastmath=True)", "out=", numba(True)),
         Contender("jax.jit (jax.nn.softmax)", "allocates", jax_jit),
         Contender("torch eager (torch.softmax)", "allocates", torch_eager),
         Contender("torch.compile", "out=", torch_compiled, quick=False),
         Contender("C gcc -O3 -ffast-math", "out=", c)])


# matmul ---------------------------------------------------------------------------------------------------


def matmul_workload() -> Workload:
    def make(sizes, rng):
        m, k, n = sizes
        return {"a": rng.standard_normal((m, k), dtype=np.float32),
                "b": rng.standard_normal((k, n), dtype=np.float32)}

    def reference(inp):
        return inp["a"].astype(np.float64) @ inp["b"].astype(np.float64)

    def numpy_blas(inp):
        a, b = inp.values()
        o = np.empty((a.shape[0], b.shape[1]), np.float32)
        return lambda: np.matmul(a, b, out=o)

    def numba_loop(inp):
        fn, (a, b) = njit(matmul_loop, True), inp.values()
        o = np.empty((a.shape[0], b.shape[1]), np.float32)
        return lambda: (fn(a, b, o), o)[1]

    def jax_jit(inp):
        jax = peer("jax")
        fn, (a, b) = jax.jit(lambda a, b: a @ b), _jax_inputs(inp).values()
        return lambda: fn(a, b).block_until_ready()

    def torch_eager(inp):
        torch = peer("torch")
        a, b = _torch_inputs(inp).values()
        o = torch.empty((a.shape[0], b.shape[1]))
        return lambda: torch.matmul(a, b, out=o)

    def c(inp):
        lib, (a, b) = c_library(), inp.values()
        o = np.empty((a.shape[0], b.shape[1]), np.float32)
        return lambda: (lib.matmul_ikj(_ptr(a), _ptr(b), _ptr(o), a.shape[0], a.shape[1], b.shape[1]), o)[1]

    def irc_blas(inp):
        try:
            return _irc(MATMUL_IR, "matmul", blas=True)(inp)
        except (TypeError, ValueError) as e:  # no such option, or no BLAS to call here
            raise NotApplicable(f"not available ({one_line(e)})") from None

    return Workload(
        "matmul", lambda s: f"matmul {s[0]}x{s[1]} @ {s[1]}x{s[2]}, f32", (1024, 1024, 1024), (128, 128, 128),
        make, reference, lambda ref: (1e-4, 2e-5 * float(np.abs(ref).max())),
        [Contender("irc native (blas=False)", "out=", _irc(MATMUL_IR, "matmul", blas=False), is_irc=True),
         Contender("irc BLAS path (blas=True)", "out=", irc_blas, is_irc=True),
         Contender("numpy (OpenBLAS sgemm)", "out=", numpy_blas),
         Contender("numba @njit(fastmath=True) i-k-j loop", "out=", numba_loop),
         Contender("jax.jit", "allocates", jax_jit), Contender("torch eager", "out=", torch_eager),
         Contender("C gcc -O3 i-k-j loop", "out=", c)],
        flops=lambda s: 2.0 * s[0] * s[1] * s[2])


# mlp (speed here, memory in subprocesses) -------------------------------------------------------------------


def mlp_inputs(sizes, rng=None) -> dict:
    layers, batch, width = sizes
    rng = rng or np.random.default_rng(5)
    inp = {"x": rng.standard_normal((batch, width), dtype=np.float32)}
    scale = np.float32(np.sqrt(2.0 / width))  # He initialisation: activations stay O(1) through the ReLUs
    for i in range(layers):
        inp[f"w{i}"] = rng.standard_normal((width, width), dtype=np.float32) * scale
        inp[f"b{i}"] = 0.1 * rng.standard_normal(width, dtype=np.float32)
    return inp


def _layers(inp):
    n = (len(inp) - 1) // 2
    return [(inp[f"w{i}"], inp[f"b{i}"]) for i in range(n)]


def mlp_numpy(inp):
    x, layers = inp["x"], _layers(inp)

    def forward():
        h = x
        for w, b in layers:
            h = np.maximum(h @ w + b, 0)
        return h
    return forward


def mlp_jax(inp):
    jax = peer("jax")
    x = jax.device_put(inp["x"])
    layers = [tuple(jax.device_put(v) for v in wb) for wb in _layers(inp)]

    @jax.jit
    def forward(x, layers):
        for w, b in layers:
            x = jax.nn.relu(x @ w + b)
        return x
    return lambda: forward(x, layers).block_until_ready()


def mlp_torch(inp):
    torch = peer("torch")
    t = _torch_inputs(inp)
    x, layers = t["x"], [(t[f"w{i}"], t[f"b{i}"]) for i in range((len(t) - 1) // 2)]

    def forward():
        h = x
        for w, b in layers:
            h = torch.relu(h @ w + b)
        return h
    return forward


def mlp_irc(blas: bool):
    def build(inp):
        try:
            fn = irc_function(mlp_ir((len(inp) - 1) // 2), "mlp", blas=blas)
        except (TypeError, ValueError) as e:  # no such option, or no BLAS to call here
            raise NotApplicable(f"not available ({one_line(e)})") from None
        args = list(inp.values())
        return lambda: fn(*args)
    return build


MLP_CONTENDERS = {
    "irc native (blas=False)": Contender("irc native (blas=False)", "allocates", mlp_irc(False), is_irc=True),
    "irc BLAS path (blas=True)": Contender("irc BLAS path (blas=True)", "allocates", mlp_irc(True), is_irc=True),
    "numpy": Contender("numpy", "allocates", mlp_numpy),
    "jax.jit": Contender("jax.jit", "allocates", mlp_jax),
    "torch eager": Contender("torch eager", "allocates", mlp_torch),
}


def mlp_workload() -> Workload:
    def reference(inp):
        h = inp["x"].astype(np.float64)
        for w, b in _layers(inp):
            h = np.maximum(h @ w.astype(np.float64) + b, 0)
        return h

    return Workload(
        "mlp", lambda s: f"MLP forward, {s[0]} layers relu(h @ W + b), batch {s[1]}, width {s[2]}, f32",
        (16, 256, 1024), (4, 32, 128), lambda sizes, rng: mlp_inputs(sizes, rng), reference,
        lambda ref: (1e-3, 1e-4 * float(np.abs(ref).max())), list(MLP_CONTENDERS.values()),
        flops=lambda s: 2.0 * s[0] * s[1] * s[2] * s[2])


WORKLOADS = {"sigmoid": sigmoid_workload, "gelu": gelu_workload, "softmax": softmax_workload,
             "matmul": matmul_workload, "mlp": mlp_workload}


# ---- running ------------------------------------------------------------------------------------------------


@dataclass
class Result:
    contender: Contender
    status: str = "ok"  # ok | not installed | n/a | skipped | error | wrong
    detail: str = ""
    first_call_s: float | None = None
    max_err: float | None = None
    times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def fastest(self) -> float | None:
        """The fastest timed call: what the code does when nothing else slows the core (a shared
        VM's co-tenants can slow its memory traffic for seconds at a time: docs/benchmarks.md)."""
        return min(self.times) if self.times else None


def to_numpy(r) -> np.ndarray:
    if hasattr(r, "detach"):  # a torch tensor
        return r.detach().numpy()
    return np.asarray(r)


def check(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> tuple[bool, float, str]:
    if got.shape != ref.shape:
        return False, float("nan"), f"shape {got.shape}, expected {ref.shape}"
    diff = np.abs(got.astype(np.float64) - ref)
    bad = ~(diff <= atol + rtol * np.abs(ref))  # NaN counts as bad
    max_err = float(np.nanmax(diff)) if diff.size else 0.0
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), ref.shape)
        return False, max_err, (f"{int(bad.sum()):,} elements out of tolerance (rtol {rtol:g}, atol {atol:.3g}); "
                                f"first at {tuple(int(j) for j in i)}: got {got[i]!r}, expected {ref[i]!r}")
    return True, max_err, ""


def one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")
    return text if len(text) <= 2000 else text[:2000] + " ..."


def run_workload(w: Workload, sizes: tuple, repeat: int, quick: bool) -> tuple[list[Result], float]:
    inp = w.make(sizes, np.random.default_rng(2024))
    ref = w.reference(inp)
    rtol, atol = w.tolerance(ref)
    results, live = [], {}
    for c in w.contenders:
        r = Result(c)
        results.append(r)
        if quick and not c.quick:
            r.status, r.detail = "skipped", "skipped with --quick (slow to compile)"
            continue
        try:
            fn = c.build(inp)
            t = time.perf_counter()
            got = fn()
            r.first_call_s = time.perf_counter() - t
            ok, r.max_err, why = check(to_numpy(got), ref, rtol, atol)
        except Missing as e:
            r.status, r.detail = "not installed", str(e)
            continue
        except NotApplicable as e:
            r.status, r.detail = "n/a", str(e)
            continue
        except Exception as e:  # noqa: BLE001 - one contender's failure must not stop the run
            r.status, r.detail = "error", one_line(e)
            continue
        if not ok:
            r.status, r.detail = "wrong", why
            continue
        fn()  # one more warm-up call
        live[id(r)] = (r, fn)
        del got
    gc.collect()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(repeat):
        for key, (r, fn) in list(live.items()):
            t = time.perf_counter()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - worked once, then failed: report, drop, go on
                r.status, r.detail, r.times = "error", "while timing: " + one_line(e), []
                del live[key]
                continue
            r.times.append(time.perf_counter() - t)
    cpu = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    return results, cpu


# ---- numpy's matmul with OpenBLAS's own kernel choice, in a subprocess ---------------------------------------

OWN_KERNEL = "numpy, OpenBLAS's own kernel choice (separate process)"


def openblas_cores() -> dict[str, str]:
    """The kernel set (``Haswell``, ``SkylakeX``, ...) of each OpenBLAS loaded in this process."""
    cores: dict[str, str] = {}
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1] if "/" in line else ""
        name = Path(path).name
        if "openblas" not in name.lower() or name in cores:
            continue
        lib = ctypes.CDLL(path)
        for symbol in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                       "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                cores[name] = fn().decode()
                break
    return cores


def blas_child(sizes: tuple, repeat: int) -> dict:
    """numpy's matmul of the matmul workload, checked and timed; run with OPENBLAS_CORETYPE unset."""
    w = matmul_workload()
    inp = w.make(sizes, np.random.default_rng(2024))
    a, b = inp.values()
    o = np.empty((a.shape[0], b.shape[1]), np.float32)
    np.matmul(a, b, out=o)
    ok, max_err, why = check(o, w.reference(inp), *w.tolerance(w.reference(inp)))
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        np.matmul(a, b, out=o)
        times.append(time.perf_counter() - t)
    return {"ok": ok, "max_err": max_err, "why": why, "times": times, "cores": openblas_cores()}


def child_json(args: list[str], env: dict) -> tuple[dict | None, str]:
    """This script run in a new process with ``args`` (one of its hidden child modes): the JSON
    of its last line of output, or None and why (its last line of errors, or the time out)."""
    try:
        proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "timed out after 600 s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return None, f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}"
    return json.loads(lines[-1]), ""


def library_cached_child(sizes: tuple) -> dict:
    """The first call of a new program that multiplies as the matmul workload does (its function
    renamed: nothing of it is cached), in a new process whose disk cache (``IRC_CACHE``) holds
    the GEMM library the run built: irc's first call of a matmul after its first use on a machine."""
    w = matmul_workload()
    inp = w.make(sizes, np.random.default_rng(2024))
    a, b = inp.values()
    fn = irc_function(MATMUL_IR.replace("@matmul", "@matmul_again"), "matmul_again", blas=False)
    o = np.empty((a.shape[0], b.shape[1]), np.float32)
    t = time.perf_counter()
    fn(a, b, out=o)
    first = time.perf_counter() - t
    ok, _, why = check(o, w.reference(inp), *w.tolerance(w.reference(inp)))
    return {"first_call_s": first, "ok": ok, "why": why}


def library_cached_first_call(sizes: tuple) -> tuple[float | None, str]:
    """``library_cached_child``'s first call in seconds (None and why where it failed)."""
    got, why = child_json(["--library-cached-child", ",".join(map(str, sizes)), "--irc-cache", IRC_CACHE],
                          {**os.environ, **THREAD_ENV})
    if got is None:
        return None, why
    return (got["first_call_s"], "") if got["ok"] else (None, got["why"])


def own_kernel_result(sizes: tuple, repeat: int) -> Result:
    """numpy's matmul where the environment does not pin OpenBLAS's kernels (see the matmul notes)."""
    r = Result(Contender(OWN_KERNEL, "out=", None))
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    got, why = child_json(["--blas-child", ",".join(map(str, (*sizes, repeat)))], env)
    if got is None:
        r.status, r.detail = "error", why
        return r
    r.max_err = got["max_err"]
    if not got["ok"]:
        r.status, r.detail = "wrong", got["why"]
        return r
    r.times = got["times"]
    r.detail = ", ".join(f"{k}: {v}" for k, v in got["cores"].items())
    return r


# ---- memory of the MLP forward call, one subprocess per contender --------------------------------------------


def proc_status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise KeyError(field_name)


def release_free_heap() -> None:
    """Give the pages of free heap blocks back to the kernel (glibc's ``malloc_trim``).

    Compiling (LLVM) and warming up leave megabytes of freed, still resident
    heap; a block the measured call takes from there would not grow the RSS.
    Once trimmed, every page the call touches is a fresh page fault and shows.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the figure may then miss reused heap
        pass


def drop_irc_arenas(fn_owner) -> bool:
    """Forget the arenas irc keeps between calls, so that the next call allocates its own."""
    specs = getattr(fn_owner, "_specializations", None)
    if specs is None:
        return False
    for spec in specs.values():
        spec.arenas.clear()
        spec.arena_pairs.clear()
    return True


def memory_child(name: str, sizes: tuple) -> dict:
    """Runs in a fresh process: warm up one contender, then measure one forward call."""
    inp = mlp_inputs(sizes)
    c = MLP_CONTENDERS[name]
    owner = None
    if c.is_irc:  # the TensorFunction itself, to drop its arena and read the planned size
        owner = irc_function(mlp_ir(sizes[0]), "mlp", blas="BLAS" in name)
        fn = functools.partial(owner, *inp.values())
    else:
        fn = c.build(inp)
    fn()
    fn()
    out: dict = {"name": name}
    if owner is not None:
        spec = owner.specialization(tuple(a.shape for a in inp.values()))
        out["arena_bytes"] = spec.arena_bytes
        out["arena_dropped"] = drop_irc_arenas(owner)
    gc.collect()
    release_free_heap()
    try:
        rss_before = proc_status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        r = fn()
        out["rss_peak_growth"] = (proc_status_kib("VmHWM") - rss_before) * 1024
        del r
    except OSError as e:
        out["rss_error"] = one_line(e)
    if owner is not None:
        drop_irc_arenas(owner)
    gc.collect()
    release_free_heap()
    tracemalloc.start()
    r = fn()
    out["traced_peak"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del r
    if owner is not None:  # after the measurements: buffers the plan left on the heap (allocated per call)
        out["unplanned_allocs"], out["unplanned_bytes"] = unplanned_buffers(owner, inp)
    return out


def unplanned_buffers(fn, inp: dict) -> tuple[int, int]:
    """The ``memref.alloc``s that plan-memory left outside the arena (e.g. buffers handed to a call)."""
    from irc.passes.plan_memory import byte_size

    _, func = fn.lower(tuple(a.shape for a in inp.values()))
    allocs = [op for op in func.walk() if op.name == "memref.alloc"]
    return len(allocs), sum(byte_size(op.results[0].type) for op in allocs)


def measure_memory(sizes: tuple, names: list[str]) -> dict[str, dict]:
    results = {}
    env = {**os.environ, **THREAD_ENV, **MALLOC_ENV}
    for name in names:
        got, why = child_json(["--memory-child", name, "--mlp-sizes", ",".join(map(str, sizes)),
                               "--irc-cache", IRC_CACHE], env)  # the machine code compiled here: no second cold compile
        results[name] = got if got is not None else {"error": why}
    return results


# ---- reporting ---------------------------------------------------------------------------------------------


def machine() -> dict:
    from machine_info import cpu_model

    model = cpu_model()
    import llvmlite
    import llvmlite.binding as llvm
    from irc.runtime.cpu import engine

    cpu, features = engine.host_cpu()
    vector = "+".join(f for f in ("avx2", "avx512f") if f"+{f}" in features.split(",")) or "none"

    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]
        numpy_blas = f"{blas.get('name')} {blas.get('version')}"
    except (AttributeError, KeyError, TypeError):
        numpy_blas = "?"
    gcc = shutil.which("gcc")
    gcc_version = (subprocess.run([gcc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
                   if gcc else "not installed")
    try:
        commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", str(HERE.parent), "status", "--porcelain", "--", "irc", "dialects",
                                "passes", "runtime"], capture_output=True, text=True).stdout.strip()
        commit += " (with uncommitted changes to the compiler)" if dirty else ""
    except OSError:
        commit = "?"
    return {"cpu": model, "cores": os.cpu_count(), "llvm_cpu": cpu, "vector": vector,
            "python": platform.python_version(), "irc": f"{irc.__version__} at {commit}",
            "llvmlite": llvmlite.__version__, "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "numpy": f"{np.__version__} ({numpy_blas})", "numexpr": version("numexpr"), "numba": version("numba"),
            "jax": version("jax"), "jaxlib": version("jaxlib"), "torch": version("torch"),
            "scipy": version("scipy"), "gcc": gcc_version}


def fmt_ms(s: float | None) -> str:
    if s is None:
        return "-"
    ms = s * 1e3
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 0.1 else f"{ms:.4f}"


def table(header: tuple, rows: list[tuple]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def status_text(r: Result) -> str:
    if r.status == "ok":
        return "ok"
    if r.status in ("error", "wrong"):
        return r.status + " (below)"
    return r.detail or r.status


def report_workload(w: Workload, sizes: tuple, results: list[Result], cpu: float, repeat: int,
                    quick: bool) -> tuple[list[tuple[str, bool]], list[tuple[bool, str]]]:
    """Print one workload's table; return its target lines and its problems."""
    irc_ref = next((r for r in results if r.contender.is_irc and r.median is not None), None)
    base = irc_ref.median if irc_ref else None
    numpy_row = next((r for r in results if r.contender.name.startswith("numpy") and r.median), None)
    flops = w.flops(sizes) if w.flops else None
    header = ["contender", "output", "median ms", "time / irc", "fastest ms"]
    if flops and w.key == "matmul":
        header += ["GFLOP/s", "% of numpy"]
    header += ["1st call s", "max abs err", "status"]
    rows = []
    for r in results:
        med = r.median
        row = [r.contender.name, r.contender.output, fmt_ms(med),
               f"{med / base:.2f}" if med is not None and base else "-", fmt_ms(r.fastest)]
        if flops and w.key == "matmul":
            row += [f"{flops / med / 1e9:.1f}" if med else "-",
                    f"{100 * numpy_row.median / med:.0f}%" if med and numpy_row else "-"]
        row += [f"{r.first_call_s:.2f}" if r.first_call_s is not None else "-",
                f"{r.max_err:.1e}" if r.max_err is not None else "-", status_text(r)]
        rows.append(tuple(row))
    print(f"\n## {w.key}: {w.title(sizes)}")
    print(f"medians of {repeat} interleaved runs; cpu% {100 * cpu:.0f}; time / irc against "
          f"'{irc_ref.contender.name} ({irc_ref.contender.output})'" if irc_ref else
          f"medians of {repeat} interleaved runs; cpu% {100 * cpu:.0f}; no irc figure")
    print(table(tuple(header), rows))
    problems = [(r.contender.is_irc, f"{w.key}: {r.contender.name} ({r.contender.output}): {r.status}: {r.detail}")
                for r in results if r.status in ("error", "wrong")]
    for _, text in problems:
        print("  " + text)
    checks = [] if quick else relative_checks(w, results)  # the targets are for the full sizes
    if w.key == "matmul":
        print_blas_notes(results)
        r = next(r for r in results if r.contender.name == "irc BLAS path (blas=True)")
        # The BLAS path calls MKL or numpy's OpenBLAS (pinned as numpy is): it is compared with numpy in process.
        label = "matmul: irc BLAS path (blas=True) >= 95% of numpy's GFLOP/s"
        if r.status == "n/a":
            checks.append((f"{label}: {r.detail}", None))
        elif numpy_row is None or r.median is None:
            checks.append((f"{label} ({'no numpy figure' if numpy_row is None else 'irc: ' + r.status})", False))
        else:
            got = numpy_row.median / r.median
            checks.append((f"{label} ({got:.0%}: {flops / r.median / 1e9:.1f} vs "
                           f"{flops / numpy_row.median / 1e9:.1f} GFLOP/s)", got >= 0.95))
    return checks, problems


C_FACTOR, KERNEL_FIRST_CALL_S, MLP_FIRST_CALL_S, GEMM_SHARE = 1.1, 0.15, 0.3, 0.85
"""Issue 14's targets, each relative to what runs beside irc in the same run (C, the best peer) or a
compile time, so that they hold on any host: the elementwise kernels and softmax within 1.1x
of C, native matmul at 85% of the best peer's GFLOP/s, the MLP forward (native and BLAS path) faster
than numpy, jax.jit and torch, and first calls in tenths of a second."""


def relative_checks(w: Workload, results: list[Result]) -> list[tuple[str, bool | None]]:
    """Issue 14's target lines for workload ``w`` (``C_FACTOR`` ...)."""
    ok = [r for r in results if r.median is not None and r.status == "ok"]
    irc_rows = [r for r in results if r.contender.is_irc]
    checks: list[tuple[str, bool | None]] = []
    unheld = NOT_HELD.get(CPU_LEVEL, ())
    aside = f" ({', '.join(unheld)} not held to {CPU_LEVEL}: left out)" if unheld else ""

    def against(label: str, mine: Result, ref: Result | None, what: str, detail, passed) -> None:
        """One target line: irc's row ``mine`` against ``ref`` (``what`` names it when absent)."""
        if mine.median is None:
            checks.append((f"{label} (irc: {mine.status}{': ' + mine.detail if mine.detail else ''})",
                           None if mine.status == "n/a" else False))
        elif ref is None:
            checks.append((f"{label}: no {what} figure", None))
        else:
            checks.append((f"{label} ({detail(mine, ref)})", passed(mine, ref)))

    if w.key in ("sigmoid", "gelu", "softmax"):
        mine = irc_rows[0]  # writing into out=, as C does
        c_row = next((r for r in ok if r.contender.name.startswith("C ")), None)
        against(f"{w.key}: irc ({mine.contender.output}) <= {C_FACTOR}x C", mine, c_row, "C",
                lambda m, c: f"{m.median / c.median:.2f}x: {m.median * 1e3:.2f} vs {c.median * 1e3:.2f} ms",
                lambda m, c: m.median <= C_FACTOR * c.median)
        if mine.first_call_s is not None:
            checks.append((f"{w.key}: irc's first call <= {KERNEL_FIRST_CALL_S} s ({mine.first_call_s:.2f} s)",
                           mine.first_call_s <= KERNEL_FIRST_CALL_S))
    elif w.key == "matmul":
        flops = w.flops(w.full)
        best = min((r for r in ok if not r.contender.is_irc and r.contender.name not in unheld),
                   key=lambda r: r.median, default=None)
        against(f"matmul: irc native (blas=False) >= {GEMM_SHARE:.0%} of the best peer's GFLOP/s{aside}",
                next(r for r in irc_rows if "native" in r.contender.name), best, "peer",
                lambda m, b: f"{b.median / m.median:.0%}: {flops / m.median / 1e9:.1f} vs "
                             f"{b.contender.name} {flops / b.median / 1e9:.1f}",
                lambda m, b: b.median / m.median >= GEMM_SHARE)
    elif w.key == "mlp":
        peers = [r for r in ok if r.contender.name in ("numpy", "jax.jit", "torch eager")
                 and r.contender.name not in unheld]
        closest = min(peers, key=lambda p: p.median, default=None)
        for mine in irc_rows:
            against(f"mlp: {mine.contender.name} faster than numpy, jax.jit and torch eager{aside}", mine, closest,
                    "peer",
                    lambda m, c: f"{m.median * 1e3:.1f} ms; the fastest peer, {c.contender.name}, "
                                 f"{c.median * 1e3:.1f}: {m.median / c.median:.2f}x its time",
                    lambda m, c: m.median < c.median)
        native = irc_rows[0]
        if native.first_call_s is not None:
            checks.append((f"mlp: {native.contender.name}'s first call <= {MLP_FIRST_CALL_S} s "
                           f"({native.first_call_s:.2f} s)", native.first_call_s <= MLP_FIRST_CALL_S))
    return checks


def matmul_first_calls(results: list[Result], sizes: tuple) -> list[tuple[str, bool | None]]:
    """Issue 14's first-call target for the matmul, twice: in this run, which builds irc's GEMM
    library (its disk cache is the run's own, so the build is in every run), and in a new process
    once the library is on disk (``library_cached_child``), as after irc's first use on a machine."""
    native = next(r for r in results if r.contender.name.startswith("irc native"))
    if native.first_call_s is None:
        return []
    checks = [(f"matmul: irc native's first call <= {KERNEL_FIRST_CALL_S} s, building the GEMM library "
               f"({native.first_call_s:.2f} s)", native.first_call_s <= KERNEL_FIRST_CALL_S)]
    cached, why = library_cached_first_call(sizes)
    checks.append((f"matmul: irc native's first call <= {KERNEL_FIRST_CALL_S} s, a new program in a new process, "
                   "the GEMM library in the disk cache "
                   + (f"({cached:.2f} s)" if cached is not None else f"(failed: {why})"),
                   None if cached is None else cached <= KERNEL_FIRST_CALL_S))
    print("matmul: irc native's first call in a new process with the GEMM library in the disk cache: "
          + (f"{cached:.2f} s" if cached is not None else f"failed: {why}"))
    return checks


def print_blas_notes(results: list[Result]) -> None:
    cores = ", ".join(f"{k} {v}" for k, v in openblas_cores().items()) or "none found"
    from irc.runtime.cpu import blas

    bound = blas.gemm("sgemm")
    print(f"OpenBLAS kernels loaded in this process: {cores}; irc's BLAS path calls "
          f"{bound.source if bound else 'no gemm'}")
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    if pinned:
        own = next((r for r in results if r.contender.name == OWN_KERNEL), None)
        print(f"note: the environment sets OPENBLAS_CORETYPE={pinned}, which pins OpenBLAS (numpy's and "
              "scipy's) to that kernel set; the last row ran numpy in a subprocess without it"
              + (f" ({own.detail})" if own and own.detail and own.status == "ok" else ""))


def report_memory(sizes: tuple, mem: dict[str, dict]) -> list[tuple[str, bool]]:
    layers, batch, width = sizes
    act = batch * width * 4
    mib = lambda b: f"{b / 2**20:.2f}"  # noqa: E731
    times = lambda b: f"{b / act:.2f}"  # noqa: E731
    print(f"\n### mlp memory: one forward call, {layers} layers, batch {batch}, width {width}; "
          f"one activation = {batch}x{width}x4 B = {mib(act)} MiB")
    print("(fresh subprocess per contender, after two warm-up calls; see the docstring for the method; "
          "output allocated by the call and counted)")
    header = ("contender", "planned arena MiB", "arena / act", "unplanned heap buffers", "RSS growth MiB",
              "RSS / act", "tracemalloc peak MiB", "traced / act", "status")
    rows, checks = [], []
    for name, m in mem.items():
        if "error" in m:
            rows.append((name, "-", "-", "-", "-", "-", "-", "-", m["error"]))
            if MLP_CONTENDERS[name].is_irc:
                checks.append((f"mlp: {name}: planned intermediates <= 2 activations ({m['error']})", False))
            continue
        arena = m.get("arena_bytes")
        rss, traced = m.get("rss_peak_growth"), m.get("traced_peak")
        heap_n, heap = m.get("unplanned_allocs"), m.get("unplanned_bytes")
        foreign = name in ("jax.jit", "torch eager")  # allocators tracemalloc does not see
        note = "ok" if m.get("arena_dropped", True) else "ok (irc arena kept: not in the call's figures)"
        rows.append((name, mib(arena) if arena is not None else "-", times(arena) if arena is not None else "-",
                     f"{heap_n}, {times(heap)} act" if heap_n is not None else "-",
                     mib(rss) if rss is not None else m.get("rss_error", "-"), times(rss) if rss is not None else "-",
                     "-" if foreign else mib(traced), "-" if foreign else times(traced), note))
        if arena is not None:
            total = arena + (heap or 0)
            extra = (f"; {heap_n} buffers, {heap / act:.2f} act in all, left outside the plan and allocated "
                     "per call" if heap_n else "")
            checks.append((f"mlp: {name}: planned intermediates <= 2 activations (arena {arena / act:.2f} act{extra})",
                           total <= 2 * act))
    print(table(header, rows))
    print("planned arena: the arena_bytes of irc's specialisation; unplanned heap buffers: memref.allocs the plan "
          "left out (each allocated and freed per call), count and total size; act = one activation")
    return checks


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive integers (the child modes' sizes), for argparse."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few runs, no torch.compile (smoke test)")
    parser.add_argument("--only", help="comma-separated workloads: " + ",".join(WORKLOADS))
    parser.add_argument("--repeat", type=int, help="timed runs per contender (default 11, --quick 3)")
    parser.add_argument("--no-memory", action="store_true", help="skip the MLP memory subprocesses")
    parser.add_argument("--cpu", choices=sorted(CPU_LEVELS),
                        help="hold irc and every peer to this x86-64 level's instructions (CPU_LEVELS)")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--mlp-sizes", type=positive_ints, help=argparse.SUPPRESS)
    parser.add_argument("--blas-child", type=positive_ints, help=argparse.SUPPRESS)
    parser.add_argument("--irc-cache", help=argparse.SUPPRESS)
    parser.add_argument("--library-cached-child", type=positive_ints, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)

    if opts.irc_cache:
        global IRC_CACHE
        IRC_CACHE = opts.irc_cache

    if opts.blas_child:
        *sizes, repeat = opts.blas_child
        print(json.dumps(blas_child(tuple(sizes), repeat)))
        return 0

    if opts.library_cached_child:
        print(json.dumps(library_cached_child(opts.library_cached_child)))
        return 0

    if opts.memory_child:
        sizes = opts.mlp_sizes
        print(json.dumps(memory_child(opts.memory_child, sizes)))
        return 0

    keys = list(WORKLOADS) if not opts.only else [k.strip() for k in opts.only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    repeat = opts.repeat or (3 if opts.quick else 11)
    info = machine()
    load0 = os.getloadavg()
    start = time.perf_counter()
    print("tensor_cpu: irc against numpy, numexpr, numba, jax, torch and C on tensor programs, one core")
    print(f"machine: {info['cpu']}, {info['cores']} cores (LLVM host CPU {info['llvm_cpu']}, {info['vector']}); "
          f"load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    print(f"versions: Python {info['python']}, irc {info['irc']}, llvmlite {info['llvmlite']} (LLVM {info['llvm']}), "
          f"numpy {info['numpy']}, scipy {info['scipy']}, numexpr {info['numexpr']}, numba {info['numba']}, "
          f"jax {info['jax']} (jaxlib {info['jaxlib']}), torch {info['torch']}, gcc: {info['gcc']} "
          f"({' '.join(C_FLAGS)})")
    print(f"threads: pinned to CPU {PINNED_CPU}; "
          f"{' '.join(f'{k}={v!r}' if ' ' in v else f'{k}={v}' for k, v in THREAD_ENV.items())}; "
          f"torch.set_num_threads(1); irc.compile({'threads=1' if irc_single_thread() else 'has no threads option'})")
    if opts.cpu:
        print(f"instructions: {opts.cpu} for every contender: "
              + " ".join(f"{k}={v.strip()!r}" if " " in v.strip() else f"{k}={v.strip()}"
                         for k, v in CPU_LEVELS[opts.cpu].items() if k not in ("C", "XLA_FLAGS"))
              + f", XLA's {CPU_LEVELS[opts.cpu]['XLA_FLAGS'].strip()}, C {CPU_LEVELS[opts.cpu]['C']}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}; {'--quick: small sizes; ' if opts.quick else ''}"
          "outputs: 'out=' writes into a preallocated array, 'allocates' returns a new one")

    checks: list[tuple[str, bool | None]] = []  # None: cannot be measured here
    problems: list[tuple[bool, str]] = []
    for key in keys:
        w = WORKLOADS[key]()
        sizes = w.quick if opts.quick else w.full
        results, cpu = run_workload(w, sizes, repeat, opts.quick)
        if key == "matmul" and "OPENBLAS_CORETYPE" in os.environ and not opts.cpu:
            results.append(own_kernel_result(sizes, repeat))
        c, p = report_workload(w, sizes, results, cpu, repeat, opts.quick)
        checks += c
        problems += p
        if key == "matmul":
            checks += matmul_first_calls(results, sizes)
        if key == "mlp" and not opts.no_memory:
            names = [r.contender.name for r in results
                     if r.status == "ok" or (r.contender.is_irc and r.status != "n/a")]
            if opts.quick:  # the smoke test: irc and numpy only (jax and torch take seconds to import)
                names = [n for n in names if MLP_CONTENDERS[n].is_irc or n == "numpy"]
            checks += report_memory(sizes, measure_memory(sizes, names))
        del results
        gc.collect()

    load1 = os.getloadavg()
    print(f"\nwall {time.perf_counter() - start:.0f} s; load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if checks:
        print()
        for text, ok in checks:
            print(f"{'n/a ' if ok is None else 'PASS' if ok else 'FAIL'}  {text}")
    return 1 if any(is_irc for is_irc, _ in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
