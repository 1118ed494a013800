"""irc's GEMM library functions, compiled on first use and linked into the modules that call them.

``tensor-to-loops{gemm-library=true}`` lowers large matmuls to calls of
``@irc_gemm_<type>_<tile>_<blocks>`` (passes/lowering/gemm_library.py), declared in the
module.  Here a declared name that parses as one gets its machine code: from this
process's table, else from the disk cache the calling module was compiled with (its
``cache_dir``; none with ``cache=False``) under a key made of the name, the host, llvmlite's
version and a hash of irc's own source (``cache.compiler_fingerprint``: the name says
everything the function is built from, so nothing needs building to look it up), else built
and compiled once and stored there.  Its C-ABI entry's address is imported into the module being
linked, the way runtime shims are (blas.py); the machine code stays loaded for the process.
"""

from __future__ import annotations

import hashlib
import json
import threading

import llvmlite

from .. import cache as _cache
from . import engine, symbols

_loaded: dict[tuple, tuple] = {}  # (symbol, target_cpu()) -> (JIT library, address)


def _options():
    """How the library is compiled: without LLVM's optimisation pipeline.  The kernel and the
    packing loops are vector code already, and code generation at -O2 (loop strength
    reduction, machine LICM and CSE, register allocation) is all they need: the machine code
    runs as fast as after the full pipeline (measured side by side on every shape of
    benchmarks/gemm.py), which cost about two thirds of the library's build time."""
    from ..executable import CompileOptions

    return CompileOptions(llvm_passes=False)


_lock = threading.Lock()


def _key(name: str, cpu: str, features: str) -> str:
    h = hashlib.sha256()
    for part in ("irc gemm library", name, json.dumps(_options().__dict__, sort_keys=True), cpu, features,
                 llvmlite.__version__, _cache.compiler_fingerprint()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def address(name: str, cache_dir: str | None = None, cache: bool = True) -> int | None:
    """The address of library function ``name``, loading or compiling it the first time; None
    if ``name`` is not a library GEMM.  The disk cache is the one the module that calls it
    was compiled with (``irc.compile``'s ``cache_dir``; none with ``cache=False``): a
    program compiled without a cache writes no library to disk either."""
    from irc.passes.lowering import gemm_library

    if gemm_library.parse_symbol(name) is None:
        return None
    target = engine.target_cpu()  # what it was compiled for (the same name on another level differs)
    with _lock:
        hit = _loaded.get((name, target))
        if hit is None:
            hit = _loaded[name, target] = _load_or_build(name, cache_dir, cache)
    return hit[1]


def _load_or_build(name: str, cache_dir: str | None, cache: bool = True) -> tuple:
    from irc.diagnostics import IRError

    exported = symbols.jit_symbol(name)
    key = _key(name, *engine.target_cpu())
    entry = _cache.load(key, cache_dir) if cache else None
    if entry is not None:
        try:
            library, addresses = engine.load([exported], object_code=entry.object_code)
            return library, addresses[exported]
        except (RuntimeError, IRError):  # not ours after all, or LLVM refuses it: build it again
            _cache.discard(key, cache_dir)
    entry = compile_object(name)
    if cache:
        _cache.store(key, entry, cache_dir)
    library, addresses = engine.load([exported], object_code=entry.object_code)
    return library, addresses[exported]


def compile_object(name: str, timings: dict | None = None):
    """Library function ``name`` built and compiled to unlinked machine code (a cache entry);
    ``timings`` gets the seconds of each stage (benchmarks/gemm.py --compile reports them).
    Built here by irc's builder, the module is lowered in place and skips irc's clean-up
    passes (LLVM's find the same in it)."""
    import time

    from irc.passes.lowering import gemm_library

    from ..executable import object_code

    timings = {} if timings is None else timings
    t = time.perf_counter()
    module = gemm_library.build(name)
    timings["build"] = time.perf_counter() - t
    return object_code(module, _options(), owned=True, simplify=False, timings=timings)


def imports(declared, cache: bool = True, cache_dir: str | None = None) -> dict[str, int]:
    """Addresses for the library GEMMs among the ``declared`` function names (``address``)."""
    found = {}
    for name in sorted(declared):
        if name.startswith("irc_gemm_"):
            where = address(name, cache_dir=cache_dir, cache=cache)
            if where is not None:
                found[name] = where
    return found
