"""Pausing Python's cyclic garbage collector around bulk IR work.

A large module holds about ten Python objects per op.  The parser, verifier,
printer and passes allocate many small objects, and every so often the
collector would scan all of those live objects looking for cycles; on a
100k-op module that doubles the time these stages take (and makes a pass that
builds one object per op look quadratic).  Ops erased by a pass leave cycles
behind; the collector frees them once it runs again, after the pass.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def paused_gc():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # Not gc.freeze()/unfreeze() to skip the young-generation scan of what was
            # just built: objects moved that way never count towards CPython's trigger
            # for a full collection, so a loop of many parses never frees its garbage.
            gc.enable()
