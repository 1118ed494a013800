"""How much stack JIT-compiled code may use: the budget behind "stack exhausted".

Compiled code keeps a public call's stack use (frames of recursive calls, allocas)
within ``stack_budget`` bytes below the stack pointer at its entry, so that deep
recursion or a large alloca is an error at the op instead of a segfault past the
guard page (see translate.py).  The budget must fit in every thread that calls
compiled code in this process: the main thread (``RLIMIT_STACK``) and the threads
that Python starts, ``irc.compile(threads=N)``'s pool among them (``threading``'s
stack size, else the C library's default thread stack).  Of the smallest of these
a quarter, at least ``RESERVE`` bytes, is left for what runs above the entry (the
Python interpreter) and below the limit (a leaf's frame, libc, libm, BLAS).

A thread started with a smaller stack (``threading.stack_size()`` lowered after
compiling, or a foreign thread) is not covered; objects written by
``irc compile --emit obj`` use translate's fixed DEFAULT_STACK_BUDGET instead.
"""

from __future__ import annotations

import ctypes
import threading

RESERVE = 256 * 1024
MAIN_STACK_IF_UNLIMITED = 8 << 20
"""An unlimited RLIMIT_STACK: count the usual 8 MiB (the main stack can grow further)."""
MIN_BUDGET = 64 * 1024


def stack_budget() -> int:
    """The bytes of stack a JIT-compiled public call may use in this process (see the module doc)."""
    smallest = min(_main_stack_size(), _thread_stack_size(), _openmp_stack_size())
    return max(MIN_BUDGET, smallest - max(smallest // 4, RESERVE))


def _main_stack_size() -> int:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    except (ImportError, OSError, ValueError):
        return MAIN_STACK_IF_UNLIMITED
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAIN_STACK_IF_UNLIMITED
    return soft


def _openmp_stack_size() -> int:
    """The stack of an OpenMP team's threads where ``OMP_STACKSIZE`` sets it (irc's loops may run
    on torch's team: cpu/pool.py's ``share_openmp``), or GNU libgomp's ``GOMP_STACKSIZE`` where
    that is not set (libgomp reads it then), else no limit of its own."""
    import os
    import re

    for name in ("OMP_STACKSIZE", "GOMP_STACKSIZE"):
        found = re.fullmatch(r"\s*(\d+)\s*([bkmgBKMG]?)\s*", os.environ.get(name, ""))
        if found:
            break
    else:
        return MAIN_STACK_IF_UNLIMITED << 8
    unit = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[(found.group(2) or "k").lower()]
    return max(1, int(found.group(1)) * unit)


def _thread_stack_size() -> int:
    """The stack of a thread Python starts now: threading's setting, else pthread's default."""
    size = threading.stack_size()
    if size:
        return size
    default = _pthread_default_stack_size()
    return default if default else MAIN_STACK_IF_UNLIMITED


def _pthread_default_stack_size() -> int | None:
    """glibc's default thread stack size (pthread_getattr_default_np), or None where unknown."""
    try:
        libc = ctypes.CDLL(None)  # the process's symbols, libc's among them
        get_default, get_size = libc.pthread_getattr_default_np, libc.pthread_attr_getstacksize
        destroy = libc.pthread_attr_destroy
    except (OSError, AttributeError):
        return None
    attr = ctypes.create_string_buffer(128)  # pthread_attr_t is 56 bytes on 64-bit glibc
    if get_default(attr) != 0:
        return None
    size = ctypes.c_size_t()
    ok = get_size(attr, ctypes.byref(size)) == 0
    destroy(attr)
    return size.value if ok and size.value else None
