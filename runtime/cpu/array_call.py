"""A compiled function's call that takes numpy arrays themselves: their addresses read in machine code.

A tensor function's C entry takes each array as its data address and sizes (translate.py's ABI).
From Python, taking an array's address costs 0.7 us (``ctypes.c_char.from_buffer``; ``a.ctypes.data``
1.8 us) and ctypes converts each integer argument for some 0.2 us: an 8x8 matmul's 11 arguments
came to some 4.5 of the 5.4 us its ``irc.jit`` call took (Intel Xeon, session 14).  ctypes passes a
``py_object`` argument as the object's own address for 0.1 us.  So a *trampoline* takes the arrays
as objects, reads each one's data address and flags from numpy's array struct, refuses (returns
``REFUSED``) unless every one is C-contiguous and writeable (what ``from_buffer`` had checked) and
aligned to its element (the compiled code's loads say so; the full call copies such an array),
and calls the function with the sizes from a constant block.  An empty array, which
``from_buffer`` refused, is passed: numpy gives it an address, and the code reads none of it.

The struct's layout (``PyArrayObject_fields``: ``data`` after the object header, ``flags`` after
``nd``, ``dimensions``, ``strides``, ``base`` and ``descr``) is numpy's public ABI; its offsets are
found once by probing arrays whose addresses and flags Python reports (``layout``), and where the
probe does not find them (another Python build) there are no trampolines and the callers take
addresses as before.  The caller must have checked that each object is exactly an ``np.ndarray``
of the right dtype and shape: a trampoline reads the struct of whatever it is given.

One trampoline serves every function whose arguments have one pattern (how many, and which are
arrays' addresses): the function's address and its sizes are in the block, an ``int64`` array
passed as the first object.  They are built with LLVM the first time a pattern is asked for (some
milliseconds) and kept for the process.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

import numpy as np

from irc.diagnostics import IRError

REFUSED = -2
"""What a trampoline returns where an array is not C-contiguous, writeable and aligned (a compiled
function's public entry returns 0 or a fault's number, from 1: translate.py makes its body's
``STACK_EXHAUSTED`` one of those)."""

NPY_ARRAY_C_CONTIGUOUS = 0x0001
NPY_ARRAY_ALIGNED = 0x0100
NPY_ARRAY_WRITEABLE = 0x0400
_REQUIRED = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE

_lock = threading.Lock()
_trampolines: dict[tuple, object] = {}  # (arguments, array positions) -> ctypes function
_libraries: list = []  # the JIT libraries: the machine code outlives every trampoline
_layout: tuple[int, int] | None | bool = False  # (data offset, flags offset), None: not found; False: not probed


def _fresh_lock() -> None:
    """A forked child's lock: the parent's may have been held by a thread that is not there."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock)


def layout() -> tuple[int, int] | None:
    """(offset of ``data``, offset of ``flags``) in an ndarray object, or None where probing
    arrays of different flags and addresses does not find one offset for each in all of them,
    and on Pythons other than CPython (where ``id`` need not be the object's address)."""
    global _layout
    if _layout is False:
        _layout = _probe() if sys.implementation.name == "cpython" else None
    return _layout


def _probe() -> tuple[int, int] | None:
    base = np.arange(24, dtype=np.float32)
    samples = [base, base.reshape(4, 6)[:, ::2], np.zeros((3, 5), np.float64, order="F"), base[3:9]]
    frozen = np.ones(7, np.int8)
    frozen.flags.writeable = False
    samples.append(frozen)
    if len({a.flags.num for a in samples}) < 3:
        return None
    size = type(base).__basicsize__
    data = [off for off in range(8, size - 7, 8)
            if all(ctypes.c_uint64.from_address(id(a) + off).value == a.ctypes.data for a in samples)]
    flags = [off for off in range(8, size - 3, 4)
             if all(ctypes.c_int32.from_address(id(a) + off).value == a.flags.num for a in samples)]
    return (data[0], flags[0]) if len(data) == 1 and len(flags) == 1 else None


def trampoline(arguments: int, arrays: tuple[int, ...], disjoint: tuple[tuple[int, int], ...] = ()):
    """The ctypes function ``(block, *array_objects) -> status`` for a C function of ``arguments``
    integer-class arguments, of which those at positions ``arrays`` are arrays' data addresses
    (the rest come from ``block[1:]``, ``block[0]`` being the function's address), that also
    refuses where the arrays of a pair in ``disjoint`` (indices into ``arrays``) overlap, each
    array's bytes being in the block after the arguments (``out=``: an output against the
    inputs and the outputs before it); None where ``layout`` found none, or LLVM could not
    build it."""
    if layout() is None:
        return None
    key = (arguments, tuple(arrays), tuple(disjoint))
    with _lock:
        if key not in _trampolines:
            try:
                _trampolines[key] = _build(arguments, tuple(arrays), tuple(disjoint))
            except (RuntimeError, ValueError, IRError):  # LLVM or the JIT refused: take addresses
                _trampolines[key] = None
        return _trampolines[key]


def block(address: int, arguments: list, sizes: list = ()) -> np.ndarray:
    """The constant block of a call: the function's address, then each argument (an array's
    position holds 0: the trampoline puts its data address there), then each array's bytes
    where the trampoline checks that some do not overlap."""
    return np.array([address, *arguments, *sizes], dtype=np.int64)


def _build(arguments: int, arrays: tuple[int, ...], disjoint: tuple[tuple[int, int], ...]):
    import llvmlite.binding as llvm

    from . import engine

    engine._init()
    data, flags = layout()
    name = f"irc.array_call.{arguments}.{'_'.join(map(str, arrays))}.{'_'.join(f'{p}o{q}' for p, q in disjoint)}"
    params = ", ".join(["ptr %block_object"] + [f"ptr %x{p}" for p in range(len(arrays))])
    lines = [f'define i32 @"{name}"({params}) {{', "entry:",
             f"  %block_at = getelementptr i8, ptr %block_object, i64 {data}",
             "  %block = load ptr, ptr %block_at", "  %fn = load ptr, ptr %block"]
    checks = []
    for p in range(len(arrays)):
        lines += [f"  %flags_at{p} = getelementptr i8, ptr %x{p}, i64 {flags}",
                  f"  %flags{p} = load i32, ptr %flags_at{p}",
                  f"  %masked{p} = and i32 %flags{p}, {_REQUIRED}",
                  f"  %ok{p} = icmp eq i32 %masked{p}, {_REQUIRED}",
                  f"  %data_at{p} = getelementptr i8, ptr %x{p}, i64 {data}",
                  f"  %data{p} = load i64, ptr %data_at{p}"]
        checks.append(f"%ok{p}")
    for p in sorted({p for pair in disjoint for p in pair}):  # [data, data + bytes)
        lines += [f"  %bytes_at{p} = getelementptr i64, ptr %block, i64 {1 + arguments + p}",
                  f"  %bytes{p} = load i64, ptr %bytes_at{p}", f"  %end{p} = add i64 %data{p}, %bytes{p}"]
    for p, q in disjoint:
        lines += [f"  %before{p}_{q} = icmp ult i64 %data{p}, %end{q}", f"  %after{p}_{q} = icmp ult i64 %data{q}, %end{p}",
                  f"  %overlap{p}_{q} = and i1 %before{p}_{q}, %after{p}_{q}",
                  f"  %apart{p}_{q} = xor i1 %overlap{p}_{q}, true"]
        checks.append(f"%apart{p}_{q}")
    ok = checks[0] if checks else "true"
    for p in range(1, len(checks)):
        lines.append(f"  %all{p} = and i1 {ok}, {checks[p]}")
        ok = f"%all{p}"
    lines += [f"  br i1 {ok}, label %call, label %refuse", "refuse:", f"  ret i32 {REFUSED}", "call:"]
    # Every argument as an i64: addresses and sizes are alike integer-class arguments to the
    # C ABIs irc targets (x86-64 System V, AArch64), in registers and then 8-byte stack slots.
    values = []
    position = {at: p for p, at in enumerate(arrays)}
    for i in range(arguments):
        if i in position:
            values.append(f"i64 %data{position[i]}")
            continue
        lines += [f"  %slot{i} = getelementptr i64, ptr %block, i64 {i + 1}", f"  %a{i} = load i64, ptr %slot{i}"]
        values.append(f"i64 %a{i}")
    lines += [f"  %status = call i32 %fn({', '.join(values)})", "  ret i32 %status", "}"]
    module = llvm.parse_assembly("\n".join(lines) + "\n")
    module.verify()
    tm = engine.target_machine(2, *engine.host_cpu(), reloc="pic")  # runs here, whatever the target
    library, addresses = engine.load([name], object_code=tm.emit_object(module))
    _libraries.append(library)
    return ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.py_object] * (1 + len(arrays)))(addresses[name])
