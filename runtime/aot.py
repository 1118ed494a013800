"""Ahead-of-time output: optimised LLVM IR, assembly, or an ELF object with the C ABI.

The object's functions follow the convention documented in cpu/translate.py:
``int32_t f(args..., results *out...)``, memrefs as a data pointer followed by
one int64_t size per dimension, 0 returned on success.
"""

from __future__ import annotations

from .cpu import engine, symbols
from .cpu.translate import Options, translate
from .executable import prepare

EMIT_KINDS = ("llvm", "asm", "obj")


def emit(module, kind: str, opt_level: int = 2, checks: bool = True, bounds_checks: bool = False,
         fast_math: bool = False, extern=None) -> str | bytes:
    """The module compiled for the host CPU as ``kind``: 'llvm' and 'asm' give text, 'obj' bytes.

    As for ``irc.compile``, a function the module declares must be named in
    ``extern``; its functions keep their names (the C ABI), so one named like a
    symbol the generated code calls itself (``@erf``, ``@memset``) is an error.
    """
    if kind not in EMIT_KINDS:
        raise ValueError(f"emit must be one of {', '.join(EMIT_KINDS)}, got {kind!r}")
    if opt_level not in (0, 1, 2, 3):
        raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    extern = symbols.normalize_extern(extern)
    symbols.check_declarations(module, extern, define_reserved=False)
    lowered = prepare(module, opt_level)
    tr = translate(lowered, Options(checks, bounds_checks, fast_math))
    tm = engine.target_machine(opt_level, reloc="pic")
    llmod = engine.optimize(str(tr.module), opt_level, tm)
    if kind == "llvm":
        return str(llmod)
    if kind == "asm":
        return tm.emit_assembly(llmod)
    return tm.emit_object(llmod)
