"""A compiled function's call that takes numpy arrays themselves: their addresses read in machine code.

A tensor function's C entry takes each array as its data address and sizes (translate.py's ABI).
From Python, taking an array's address costs 0.7 us (``ctypes.c_char.from_buffer``; ``a.ctypes.data``
1.8 us) and ctypes converts each integer argument for some 0.2 us: an 8x8 matmul's 11 arguments
came to some 4.5 of the 5.4 us its ``irc.jit`` call took (Intel Xeon, session 14).  So a
*trampoline* takes the arrays as objects, reads each one's data address and flags from numpy's
array struct, refuses (returns ``REFUSED``) unless every one is C-contiguous and writeable (what
``from_buffer`` had checked) and aligned to its element (the compiled code's loads say so; the
full call copies such an array), and calls the function with the sizes from a constant block.
An empty array, which ``from_buffer`` refused, is passed: numpy gives it an address, and the
code reads none of it.

A trampoline is a builtin function object of CPython's ``METH_FASTCALL`` convention
(``_builtin``): the interpreter hands it the argument objects as a C array, with no ctypes
conversion or call frame between (0.28 us a call of an 8x8 matmul's trampoline, against 1.4
through ctypes ``py_object`` arguments; session 15).  It lets the GIL go around the compiled
call (``PyEval_SaveThread``), as ctypes did, and returns the status as a Python int.

The struct's layout (``PyArrayObject_fields``: ``data`` after the object header, ``flags`` after
``nd``, ``dimensions``, ``strides``, ``base`` and ``descr``) is numpy's public ABI; its offsets are
found once by probing arrays whose addresses and flags Python reports (``layout``), and where the
probe does not find them (another Python build) there are no trampolines and the callers take
addresses as before.  The caller must have checked that each object is exactly an ``np.ndarray``
of the right dtype and shape: a trampoline reads the struct of whatever it is given (its
argument count it checks itself).

One trampoline serves every function whose arguments have one pattern (how many, and which are
arrays' addresses): the function's address and its sizes are in the block, an ``int64`` array
passed as the first object.  They are built with LLVM the first time a pattern is asked for (some
milliseconds) and kept for the process (the addresses of the C API functions they call are
constants in their code, so they are never written to the disk cache).
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
_trampolines: dict[tuple, object] = {}  # (arguments, array positions, disjoint pairs) -> builtin function
_libraries: list = []  # the JIT libraries and method definitions: they outlive every trampoline
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
    """The builtin function ``(block, *array_objects) -> status`` for a C function of ``arguments``
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


METH_FASTCALL = 0x0080
"""CPython's calling convention of a builtin that takes its arguments as a C array:
``PyObject *f(PyObject *self, PyObject *const *args, Py_ssize_t nargs)``."""


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``: what a builtin function object is made from (it must outlive
    the function: ``_libraries`` keeps each one)."""

    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


def _python_api() -> dict[str, int]:
    """The addresses of the C API functions a trampoline calls, in this process's Python."""
    return {name: ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
            for name in ("PyLong_FromLong", "PyEval_SaveThread", "PyEval_RestoreThread")}


def _builtin(name: str, address: int):
    """A builtin function object (like ``len``) whose C function is the machine code at
    ``address``, of the ``METH_FASTCALL`` convention: Python calls it directly, where a ctypes
    function converted each argument and built a call frame (1.4 us of an 8x8 matmul's 2.0 in its
    entry, session 15).  Bound to no object (``self`` NULL), as a module's functions are."""
    definition = _MethodDef(name.encode(), address, METH_FASTCALL, None)
    _libraries.append(definition)
    return _new_builtin(ctypes.addressof(definition), None, None)


# PyCFunction_NewEx(PyMethodDef *, PyObject *self, PyObject *module), a prototype of our own
# (setting argtypes on ``ctypes.pythonapi``'s would change them for every user of it).
_new_builtin = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCFunction_NewEx", ctypes.pythonapi))


def _build(arguments: int, arrays: tuple[int, ...], disjoint: tuple[tuple[int, int], ...]):
    import llvmlite.binding as llvm

    from . import engine

    engine._init()
    data, flags = layout()
    name = f"irc.array_call.{arguments}.{'_'.join(map(str, arrays))}.{'_'.join(f'{p}o{q}' for p, q in disjoint)}"
    lines = [f'define ptr @"{name}"(ptr %self, ptr %args, i64 %nargs) {{', "entry:",
             f"  %counted = icmp eq i64 %nargs, {1 + len(arrays)}",
             "  br i1 %counted, label %read, label %refuse", "read:",
             "  %block_object = load ptr, ptr %args"]
    for p in range(len(arrays)):
        lines += [f"  %x{p}_at = getelementptr ptr, ptr %args, i64 {1 + p}", f"  %x{p} = load ptr, ptr %x{p}_at"]
    lines += [f"  %block_at = getelementptr i8, ptr %block_object, i64 {data}",
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
    api = _python_api()
    lines += [f"  br i1 {ok}, label %call, label %refuse", "refuse:",
              f"  %refused = call ptr inttoptr (i64 {api['PyLong_FromLong']} to ptr)(i64 {REFUSED})",
              "  ret ptr %refused", "call:"]
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
    # The GIL is let go for the call, as ctypes let it go: a long kernel does not hold up the
    # process's other Python threads.
    lines += [f"  %thread = call ptr inttoptr (i64 {api['PyEval_SaveThread']} to ptr)()",
              f"  %status = call i32 %fn({', '.join(values)})",
              f"  call void inttoptr (i64 {api['PyEval_RestoreThread']} to ptr)(ptr %thread)",
              "  %wide = sext i32 %status to i64",  # a C long: 64 bits on the ABIs irc targets
              f"  %result = call ptr inttoptr (i64 {api['PyLong_FromLong']} to ptr)(i64 %wide)",
              "  ret ptr %result", "}"]
    module = llvm.parse_assembly("\n".join(lines) + "\n")
    module.verify()
    tm = engine.target_machine(2, *engine.host_cpu(), reloc="pic")  # runs here, whatever the target
    library, addresses = engine.load([name], object_code=tm.emit_object(module))
    _libraries.append(library)
    return _builtin(name, addresses[name])
