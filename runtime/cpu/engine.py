"""LLVM for the host CPU: the target machine, LLVM's optimisation pipeline, and the JIT.

Everything that touches llvmlite.binding lives here.  One ORC LLJIT instance
serves the process; each compiled module becomes a JIT library of its own that
lives as long as the ``Executable`` holding it.  A library does not see the
process's symbols: it gets exactly the runtime symbols of ``symbols.py`` and the
addresses its caller imports, so machine code cannot reach ``system`` or
``dlopen`` even if it names them (it fails to link).
"""

from __future__ import annotations

import re
import threading
from functools import cache

import llvmlite.binding as llvm

from irc.diagnostics import IRError

from . import symbols as _symbols
from . import target_cpu as _target_cpu

_lock = threading.Lock()
_initialized = False


def _init() -> None:
    global _initialized
    if not _initialized:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _initialized = True


@cache
def host_cpu() -> tuple[str, str]:
    """The host CPU name and its feature string (e.g. 'rocketlake', '+avx512f,...')."""
    _init()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def target_cpu() -> tuple[str, str]:
    """The CPU name and feature string irc compiles for: the host's, or the x86-64 level that
    ``IRC_CPU`` / ``--cpu`` name (target_cpu.py).  Everything that decides code by the CPU asks
    this, and every cache key holds it."""
    return _target_cpu.resolve(_target_cpu.chosen(), *host_cpu())


def check_runnable() -> None:
    """Raise ValueError if the CPU irc compiles for has instructions this host lacks (a chosen
    level above the host's): the JIT would run code that faults at the first of them."""
    name, features = target_cpu()
    missing = _target_cpu.missing_on_host(features, host_cpu()[1])
    if missing:
        raise ValueError(f"this host ({host_cpu()[0]}) cannot run code for {name}: it lacks "
                         f"{', '.join(missing)} (irc compile --cpu {name} writes it for another machine)")


def target_machine(opt_level: int = 2, cpu: str | None = None, features: str | None = None,
                   triple: str | None = None, reloc: str = "default"):
    """The target machine for the CPU irc compiles for (``target_cpu``, unless ``cpu`` and
    ``features`` say otherwise); ``reloc="pic"`` is for object files: those of ``irc compile
    --emit obj`` and those the JIT links (``executable._machine_code``).

    ``reloc="pic"`` gets the default (small) code model, so that an object links like any
    other instead of landing in ``.ltext``, and a loop reads its constants as RIP-relative
    operands (``vmulps .LCPI0_3(%rip){1to16}``).  The JIT code model (``reloc="default"``,
    what LLJIT compiles IR with) reaches constants through a ``movabsq`` of their address,
    which LLVM rematerialises inside loops when registers run short: 24 of the 93
    instructions of softmax's exp loop on AVX-512.  JITLink lays out one object's
    sections together and reaches the process's symbols through its stubs and GOT, so
    32-bit PC-relative offsets suffice.
    """
    target_name, target_features = target_cpu()
    return _target_machine(opt_level, cpu if cpu is not None else target_name,
                           features if features is not None else target_features, triple, reloc)


@cache
def _target_machine(opt_level: int, cpu: str, features: str, triple: str | None, reloc: str):
    _init()
    triple = triple or llvm.get_process_triple()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt_level, reloc=reloc,
                                        codemodel="jitdefault" if reloc == "default" else "default")


def optimize(ir_text: str, opt_level: int, tm, loop_unrolling: bool = True) -> llvm.ModuleRef:
    """Parse, verify and optimise LLVM IR with LLVM's new pass manager at -O``opt_level``
    (without the loop unroller if ``loop_unrolling`` is false: the vectoriser still interleaves)."""
    _init()
    mod = llvm.parse_assembly(ir_text)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    if opt_level > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        pto.loop_vectorization = opt_level >= 2
        pto.slp_vectorization = opt_level >= 2
        pto.loop_unrolling = loop_unrolling
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    return mod


_jit = None
_library_count = 0


def _get_jit():
    global _jit
    if _jit is None:
        # JITLink, not RuntimeDyld: RuntimeDyld's memory manager maps an object's code and its
        # constants separately, and in a process holding a lot of memory the two drifted more than
        # 2 GiB apart, past a small-code-model RIP-relative reach (an assertion in
        # RuntimeDyldELF's resolveX86_64Relocation, seen with a cold cache in the test suite).
        # JITLink lays out one object's sections together (target_machine's docstring).
        # The host's machine: it compiles only extra_ir's shims, which run here whatever the target.
        _jit = llvm.create_lljit_compiler(target_machine(3, *host_cpu()), use_jit_link=True)
    return _jit


def load(symbols, *, object_code: bytes, extra_ir: list[str] = (), imports: dict[str, int] | None = None):
    """JIT-link object code; return (library, {symbol: address}).

    ``extra_ir`` are LLVM IR modules linked in with it (runtime shims, see blas.py);
    ``imports`` binds the symbols they and the module call (the allowed ``extern``
    functions) to addresses in this process.  The object may need nothing else
    but ``symbols.runtime_imports()``: LLJIT would look anything else up in the
    process, so an object naming another symbol is refused before linking.
    """
    global _library_count
    check_runnable()
    imports = {**_symbols.runtime_imports(), **(imports or {})}
    try:
        needed = _symbols.undefined_symbols(object_code)
    except ValueError as e:
        raise IRError(f"the JIT cannot link the module: {e}") from None
    provided = set(imports) | {name for text in extra_ir for name in _defined_in(text)}
    refused = sorted(needed - provided)
    if refused:
        raise IRError(f"the JIT cannot link the module: it needs {', '.join(refused)}, which irc does not "
                      "allow compiled code to call (allow a function with extern=[...] / --extern)")
    with _lock:
        jit = _get_jit()
        _library_count += 1
        builder = llvm.JITLibraryBuilder()
        builder.add_object_img(object_code)
        for text in extra_ir:
            builder.add_ir(text)
        for name, address in imports.items():
            builder.import_symbol(name, address)
        for name in symbols:
            builder.export_symbol(name)
        try:
            library = builder.link(jit, f"irc{_library_count}")
        except RuntimeError as e:  # e.g. an entry that lacks a symbol
            raise IRError(f"the JIT cannot link the module: {str(e).strip()}") from None
        return library, {name: library[name] for name in symbols}


def _defined_in(ir_text: str) -> list[str]:
    """The functions an IR shim defines (``define ... @name(``)."""
    return re.findall(r'^define [^@]*@"?([^"(\s]+)"?\(', ir_text, re.MULTILINE)
