"""irc's GEMM library functions, compiled on first use and linked into the modules that call them.

``tensor-to-loops{gemm-library=true}`` lowers large matmuls to calls of
``@irc_gemm_<type>_<transposes>_<tile>_<blocks>`` (passes/lowering/gemm_library.py),
declared in the module.  Here a declared name that parses as one is built with
irc's own pipeline, compiled once per process (its machine code then comes from
the disk cache like any module's) and its C-ABI entry's address imported into
the module being linked, the way runtime shims are (blas.py).  The library's
machine code is kept alive for the process.
"""

from __future__ import annotations

import threading

_compiled: dict[str, object] = {}  # symbol -> the Executable that holds its machine code
_lock = threading.Lock()


def address(name: str) -> int | None:
    """The address of library function ``name``, compiling it the first time; None if ``name``
    is not a library GEMM."""
    from irc.passes.lowering import gemm_library

    if gemm_library.parse_symbol(name) is None:
        return None
    with _lock:
        exe = _compiled.get(name)
        if exe is None:
            from ..executable import compile as compile_module

            exe = _compiled[name] = compile_module(gemm_library.build(name))
    return exe._addresses[name]


def imports(declared) -> dict[str, int]:
    """Addresses for the library GEMMs among the ``declared`` function names."""
    found = {}
    for name in sorted(declared):
        if name.startswith("irc_gemm_"):
            where = address(name)
            if where is not None:
                found[name] = where
    return found
