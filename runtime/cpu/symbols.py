"""Which symbols outside itself compiled code may reach, and where each one comes from.

The JIT does not link against the process: a module gets only the addresses
named here (resolved once, from libm, libc and libgcc_s) and the ``extern``
symbols its caller allowed (``irc.compile(..., extern=[...])``, ``irc run
--extern``).  A program that declares ``@system`` or ``@dlopen`` is refused at
the declaration (``check_declarations``), and machine code that references any
other symbol, from the compile cache for example, fails to link instead of
reaching it.

``RUNTIME`` is every symbol irc's own generated code may call: the libm
functions the translator calls and those LLVM's code generator turns math
intrinsics into (found by compiling every math op at -O0..-O3, with and without
fast math, and from LLVM's RuntimeLibcalls: ``sincos`` from a sin and a cos of
one value, ``exp10`` from ``pow(10, x)``, ``ldexp`` from ``exp2(sitofp x)``),
the memory functions it lowers ``llvm.memset``/``memmove``, ``memref.alloc`` and ``memref.realloc``
to (and ``calloc``, which LLVM makes of a malloc and a memset), and the
compiler-runtime helpers for i128 and f16 arithmetic.  A program may not
declare these names (their C signatures are not irc's calling convention), and
in an object file written by ``irc compile --emit obj`` may not define them
either; in the JIT user functions are renamed (``jit_symbol``), so they never
collide.  Any new runtime symbol the translator emits must be added here.
"""

from __future__ import annotations

import ctypes
import re
from functools import cache

from irc.diagnostics import IRError

_LIBM_NAMES = ("exp exp2 exp10 expm1 log log2 log10 log1p sin cos tan tanh sinh cosh asin acos atan atan2 "
               "asinh acosh atanh pow erf erfc fmod floor ceil trunc round rint nearbyint fma sqrt cbrt fmin "
               "fmax copysign ldexp hypot").split()
LIBM = frozenset(n + s for n in _LIBM_NAMES for s in ("", "f")) | {"sincos", "sincosf"}
"""libm functions (double and float) that generated code may call."""

LIBC = frozenset({"memset", "memcpy", "memmove", "memcmp", "bcmp", "malloc", "calloc", "realloc", "free"})
"""libc functions that generated code may call (for memref.alloc/realloc/dealloc and LLVM's memory intrinsics)."""

COMPILER_RT = frozenset(
    [f"__{op}ti3" for op in ("div", "udiv", "mod", "umod", "mul", "ashl", "ashr", "lshr")]
    + ["__muloti4", "__powisf2", "__powidf2",
       "__truncsfhf2", "__truncdfhf2", "__extendhfsf2", "__extendhfdf2", "__gnu_h2f_ieee", "__gnu_f2h_ieee"]
    + [f"__fix{u}{t}fti" for u in ("", "uns") for t in ("s", "d", "h")]
    + [f"__float{u}ti{t}f" for u in ("", "un") for t in ("s", "d", "h")])
"""Compiler-runtime helpers LLVM calls for i128 division and conversions and for f16 without F16C."""

RUNTIME = LIBM | LIBC | COMPILER_RT

_PREFIX = "irc.fn."
_C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def jit_symbol(name: str) -> str:
    """The LLVM symbol of the user's function ``@name`` in JIT code.

    No C identifier starts with this prefix, so a user's ``@erf`` or ``@memset``
    never shadows the C library's (which the generated code itself may call).
    """
    return _PREFIX + name


@cache
def _library(name: str):
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


@cache
def runtime_address(name: str) -> int | None:
    """Where ``name`` (one of ``RUNTIME``) is: libm for math, libc for memory, libgcc_s for helpers."""
    library = {**dict.fromkeys(LIBM, "libm.so.6"), **dict.fromkeys(LIBC, "libc.so.6")}.get(name, "libgcc_s.so.1")
    return _lookup(library, name)


def process_address(name: str) -> int | None:
    """An allowed ``extern`` symbol, looked up in the libraries the process has loaded globally."""
    return _lookup(None, name)


def _lookup(library: str | None, name: str) -> int | None:
    lib = _library(library)
    if lib is None:
        return None
    try:
        return ctypes.cast(lib[name], ctypes.c_void_p).value
    except AttributeError:
        return None


@cache
def runtime_imports() -> dict[str, int]:
    """Every ``RUNTIME`` symbol this process has, with its address (what a JIT library may import)."""
    found = {name: runtime_address(name) for name in sorted(RUNTIME)}
    return {name: address for name, address in found.items() if address}


def normalize_extern(extern) -> dict[str, int | None]:
    """``extern=`` as given (names, or a mapping of names to addresses) -> {name: address or None}.

    Names must be C identifiers and not runtime symbols; None means "look it up in
    the process when linking".  Raises ValueError/TypeError for a malformed list.
    """
    if extern is None:
        return {}
    if isinstance(extern, str):
        raise TypeError("extern must be a list of symbol names (or a dict of names to addresses), not a string")
    items = extern.items() if isinstance(extern, dict) else ((name, None) for name in extern)
    out: dict[str, int | None] = {}
    for name, address in items:
        if not isinstance(name, str) or not _C_NAME.match(name):
            raise ValueError(f"extern names must be C identifiers, got {name!r}")
        if name in RUNTIME:
            raise ValueError(f"extern symbol '{name}' is a symbol irc's generated code uses itself; "
                             "a program cannot call it with irc's calling convention")
        if address is not None:
            if isinstance(address, ctypes._CFuncPtr):
                address = ctypes.cast(address, ctypes.c_void_p).value
            if not isinstance(address, int) or isinstance(address, bool) or address <= 0:
                raise TypeError(f"extern address of '{name}' must be a positive int or a ctypes function, "
                                f"got {address!r}")
        out[name] = address
    return out


def check_declarations(module, extern: dict, runtime_shims=frozenset(), define_reserved: bool = True) -> None:
    """Every function the module declares must be allowed; raise IRError at the first that is not.

    ``runtime_shims`` are irc's own runtime entry points (BLAS gemm) that irc's
    lowering declares; ``define_reserved=False`` (object files, whose symbols keep
    their names) also refuses definitions named like a runtime symbol.
    """
    for func in module.functions:
        name = func.sym_name
        if func.is_declaration:
            if name in RUNTIME:
                raise IRError(f"'@{name}' is a C library function that irc's generated code calls itself; "
                              "a program cannot declare it (irc's calling convention is not C's): "
                              "use the math dialect, or define a function of another name", func.loc)
            if name not in extern and name not in runtime_shims:
                raise IRError(f"'@{name}' is declared but not defined, and calling code outside the program "
                              f"must be allowed explicitly: pass extern=['{name}'] to irc.compile "
                              f"(--extern {name} on the command line) if you trust it", func.loc)
        elif not define_reserved and name in RUNTIME:
            raise IRError(f"'@{name}' is a C library function that the compiled code calls itself; "
                          "an object file cannot define it too: rename the function", func.loc)


def undefined_symbols(object_code: bytes) -> set[str]:
    """The symbols an ELF64 little-endian object file needs from outside (its undefined symbols).

    LLJIT resolves every JIT library against the process too, whatever the library
    asks for, so this list is what ``engine.load`` checks before linking.  Raises
    ValueError for anything that is not a well-formed relocatable object.
    """
    import struct

    data = memoryview(object_code)
    if len(data) < 64 or bytes(data[:4]) != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF object")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shentsize != 64 or shoff + shnum * 64 > len(data):
        raise ValueError("bad section header table")
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]

    def section_bytes(index: int) -> memoryview:
        if not 0 <= index < shnum:
            raise ValueError("bad section index")
        offset, size = sections[index][4], sections[index][5]
        if sections[index][1] == 8 or offset + size > len(data):  # SHT_NOBITS has no bytes
            raise ValueError("bad section")
        return data[offset:offset + size]

    names = set()
    for index, (_, sh_type, _, _, _, _, link, _, _, entsize) in enumerate(sections):
        if sh_type not in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            continue
        table, strings = section_bytes(index), section_bytes(link)
        if entsize != 24 or len(table) % 24:
            raise ValueError("bad symbol table")
        for k in range(1, len(table) // 24):
            st_name, _st_info, _other, st_shndx = struct.unpack_from("<IBBH", table, 24 * k)
            if st_shndx != 0 or st_name == 0:  # SHN_UNDEF only; the null symbol has no name
                continue
            end = bytes(strings[st_name:]).find(b"\0")
            if st_name >= len(strings) or end < 0:
                raise ValueError("bad symbol name")
            names.add(bytes(strings[st_name:st_name + end]).decode("utf-8", "replace"))
    return names
