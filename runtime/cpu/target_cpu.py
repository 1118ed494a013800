"""The CPU irc compiles for: the host's own, or an x86-64 microarchitecture level.

By default irc compiles for the host: LLVM's name for its CPU and every feature it has, from
which the tensor pipeline also sizes its vectors and register tiles.  ``IRC_CPU=x86-64-v3``
in the environment, or ``irc run/compile --cpu x86-64-v3``, names an x86-64 psABI level
instead, as ``gcc -march=x86-64-v3`` does: the code uses that level's instructions only,
scheduled for a generic core.  That is for two things:

- an object file (``irc compile --emit obj``) or a compile cache that must run on every CPU of
  the level, not only on the machine that built it;
- running and timing here the code a smaller CPU gets (``benchmarks/tensor_cpu.py --cpu
  x86-64-v3``: an AVX2 host's kernels, against peers held to AVX2 too).

Cache sizes stay the host's: a level says nothing about caches.  The JIT refuses a level with
instructions the host lacks, which would fault at the first of them; ``irc compile`` writes
code for any level.  The setting is process-wide, like numba's ``NUMBA_CPU_NAME`` and XLA's
``--xla_cpu_max_isa``, because everything compiled in a process (the GEMM library, the thread
pool, each specialisation) must agree on it; it is part of every cache key.
"""

from __future__ import annotations

import os
import threading

_V1 = ("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2", "x87")
_V2 = _V1 + ("cx16", "sahf", "popcnt", "sse3", "ssse3", "sse4.1", "sse4.2", "crc32")
_V3 = _V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = _V3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512")

LEVELS: dict[str, tuple[str, ...]] = {"x86-64": _V1, "x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4}
"""Each x86-64 psABI level (and LLVM CPU of the same name) with its LLVM feature names.  Only
those the host's LLVM lists are passed on (LLVM 20 lists ``evex512``, AVX-512's 512-bit
registers, apart from ``avx512f``, and not ``x87``, which every x86-64 CPU name implies)."""

HOST = "host"
CHOICES = (HOST, *LEVELS)
ENVIRONMENT = "IRC_CPU"

_chosen: str | None = None  # set_cpu's choice, or IRC_CPU's once read; None: not yet read
_lock = threading.Lock()

generation = 0
"""Bumped by every ``set_cpu``: a tensor function compiled lazily, shape by shape, drops the
specialisations it made for an earlier choice when it sees a new generation."""


def set_cpu(name: str | None) -> None:
    """Compile for ``name`` (``"host"`` or a key of ``LEVELS``) from now on in this process;
    None reads ``IRC_CPU`` again (at the next compile).  ``irc run/compile --cpu`` call it.
    ``IRC_CPU`` is otherwise read once, at the first compile: changing the environment later
    changes nothing, as for numba's and XLA's settings."""
    global _chosen, generation
    if name is not None:
        _check_name(name, "--cpu")
    with _lock:
        _chosen = name
        generation += 1


def chosen() -> str:
    """The name of the CPU irc compiles for: ``set_cpu``'s, else ``IRC_CPU``'s, else ``"host"``."""
    global _chosen
    name = _chosen
    if name is None:
        name = os.environ.get(ENVIRONMENT, "").strip() or HOST
        _check_name(name, ENVIRONMENT)
        _chosen = name
    return name


def _check_name(name: str, where: str) -> None:
    if name not in CHOICES:
        raise ValueError(f"{where}={name!r} names no CPU irc compiles for; choose one of {', '.join(CHOICES)}")


def resolve(name: str, host_name: str, host_features: str) -> tuple[str, str]:
    """(LLVM CPU name, feature string) for ``name`` on a host with ``host_name`` and
    ``host_features`` (LLVM's ``+feature,-feature,...``).  A level's features are all listed with
    ``+``, so that what irc decides from features (vector width, FMA) and what LLVM emits agree."""
    if name == HOST:
        cpu, features = host_name, host_features
    else:
        known = {entry[1:] for entry in host_features.split(",") if entry}
        if "sse2" not in known:
            raise ValueError(f"the CPU {name} is an x86-64 level, and this host's LLVM target is not x86-64")
        cpu, features = name, ",".join(f"+{feature}" for feature in LEVELS[name] if feature in known)
    if "+avx512f" in features.split(","):
        features += WIDE_VECTORS
    return cpu, features


WIDE_VECTORS = ",-prefer-256-bit"
"""Added to the features of a CPU with AVX-512.  irc's own vector code (the GEMM's tile, the
vector dialect) is sized for the widest registers (tensor_function.target_vectors: 512 bits),
and LLVM's vectoriser should agree: its tuning for Intel's AVX-512 cores (Skylake-SP to Emerald
Rapids) and for the generic x86-64-v4 prefers 256-bit vectors, so every elementwise kernel,
softmax and reduction of a tensor function ran 8 f32 lanes wide there, where Zen 4 and 5 run
16 (`--emit asm` of the tanh-GELU kernel: 207 ymm and no zmm instructions for
``sapphirerapids``/``emeraldrapids``; 207 zmm with this).  The preference dates from
Skylake-SP's lower clock under 512-bit instructions; the polynomial kernels here are bound by
their multiply-adds, which 512-bit vectors halve.  On an Emerald Rapids Xeon (tensor_cpu.py,
docs/benchmarks.md session 11): GELU 15.1 -> 13.0 ms and softmax 3.94 -> 2.64 with it (C: 13.7-14.0
and 3.2-4.0)."""


def missing_on_host(features: str, host_features: str) -> list[str]:
    """The features ``features`` enables that the host does not have (what would fault)."""
    have = {entry[1:] for entry in host_features.split(",") if entry.startswith("+")}
    return [entry[1:] for entry in features.split(",") if entry.startswith("+") and entry[1:] not in have]
