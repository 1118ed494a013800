"""Recycled output memory: a tensor function's large results reuse the pages of earlier ones.

A call that returns a new array gets its memory from ``np.empty``; above glibc's mmap
threshold (at most 32 MiB, and lower until the first frees raise it) that is fresh pages
from the kernel, each zeroed and mapped on its first write, about a microsecond a 4 KiB
page on the 2-core VM of docs/benchmarks.md: a 64 MiB result cost 6 ms of page faults
before the loop that fills it (10 ms).  Caching allocators (torch's, jax's) keep freed
blocks for the next request of the same size; so does this, for results of at least
``MIN_BYTES``:

* ``empty(shape, dtype)`` takes a block of exactly the result's size from the pool, or a new
  one, and returns an ordinary writeable C-contiguous ``np.ndarray`` on it.
* The block returns to the pool when the last array that shows it is gone: the arrays'
  base is a ctypes view of the block, and a ``weakref.finalize`` on that view gives the block
  back (views and slices of the result keep it, as they keep any array's memory).
* At most ``KEEP_PER_SIZE`` blocks a size and ``KEEP_BYTES`` in all are kept; a block beyond
  that is freed as ``np.empty``'s memory would be.

Smaller results come from ``np.empty``: glibc's heap reuses them without page faults, and
the finalizer (a few microseconds) would cost more than it saves.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref

import numpy as np

MIN_BYTES = 128 << 10
"""Smallest result drawn from the pool: glibc's default mmap threshold.  Results from there to
a few MiB come from the heap once frees have raised the threshold, but the heap's top is given
back to the kernel whenever enough of it is free, as it is after a call's results die: a
graph with a dozen 512 KiB results (the CNN's forward pass in docs/torch.md) spent two thirds
of its time in page faults (1.74 ms against 0.62 with the pool, ad hoc)."""

KEEP_PER_SIZE = 16
"""Freed blocks kept of one size: a call with many results of one shape finds one for each."""

KEEP_BYTES = 512 << 20
"""Most memory the pool holds for reuse."""

_free: dict[int, list[np.ndarray]] = {}
_kept = 0
_lock = threading.RLock()  # reentrant: a collection inside _give_back may run another block's finalizer


def _fresh_lock() -> None:
    global _lock
    _lock = threading.RLock()  # a forked child does not have the thread that may hold it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock)


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype``, like ``np.empty``."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    block = _take(nbytes)
    view = (ctypes.c_char * nbytes).from_buffer(block)
    # Not at exit: weakref.finalize would give back the blocks of arrays still alive then, and an
    # exit handler that runs after its own (registered before it) could get one for its result.
    weakref.finalize(view, _give_back, block).atexit = False
    return np.frombuffer(view, dtype).reshape(shape)


def _take(nbytes: int) -> np.ndarray:
    global _kept
    with _lock:
        blocks = _free.get(nbytes)
        if blocks:
            _kept -= nbytes
            return blocks.pop()
    return np.empty(nbytes, np.uint8)


def _give_back(block: np.ndarray) -> None:
    global _kept
    with _lock:
        blocks = _free.setdefault(block.nbytes, [])
        if len(blocks) < KEEP_PER_SIZE and _kept + block.nbytes <= KEEP_BYTES:
            blocks.append(block)
            _kept += block.nbytes


def clear() -> None:
    """Free every kept block (their memory goes back to the C library)."""
    global _kept
    with _lock:
        _free.clear()
        _kept = 0
