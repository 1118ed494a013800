"""How deeply regions may nest, and the Python stack that walks of that depth need.

irc's walks over the IR (printer, verifier, dominance, clone, passes) recurse
once or a few times per nested region.  Rather than rewrite every one of them
as an explicit-stack loop, irc fixes one documented limit, ``MAX_REGION_DEPTH``:
the parser rejects deeper input at the ``{`` that goes too deep, the verifier
rejects deeper IR built through the API at the op that holds the region, and
every recursive walk runs under ``deep_stack()``, which gives Python enough
frames for that depth.  So "nested too deeply" is always a diagnostic with a
location, never a ``RecursionError`` from somewhere inside, and the limit is
the same for every part of irc.

1,000 levels is far beyond what real programs use (a few dozen) and keeps the
walks' C stack well inside the 8 MiB a thread gets on Linux: every walk was
checked at 3,000 levels.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

MAX_REGION_DEPTH = 1000

# Python frames a walk may use per nesting level (the deepest walk, a pass that
# recurses through patterns and the rewriter, uses about 20), plus some slack.
_FRAMES_PER_LEVEL = 40
_NEEDED = MAX_REGION_DEPTH * _FRAMES_PER_LEVEL + 2000

_lock = threading.Lock()
_active = 0
_saved = 0


@contextmanager
def deep_stack():
    """Run a recursive walk with room for ``MAX_REGION_DEPTH`` levels of nesting.

    The recursion limit is process-wide, so nested and concurrent users share one
    raise: the first to enter raises it (never lowers it), the last to leave restores it.
    """
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = sys.getrecursionlimit()
            if _saved < _NEEDED:
                sys.setrecursionlimit(_NEEDED)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and sys.getrecursionlimit() == max(_saved, _NEEDED) and _saved < _NEEDED:
                sys.setrecursionlimit(_saved)


def too_deep_message() -> str:
    return (f"regions are nested more than {MAX_REGION_DEPTH} levels deep "
            f"(irc's limit; see docs/reliability.md)")


def check_depth(root) -> None:
    """Raise ``IRError`` at the first op whose regions nest deeper than the limit.

    An explicit-stack walk, so it works at any depth (it runs before the recursive ones).
    """
    from .diagnostics import IRError

    stack = [(root, 0)]
    while stack:
        op, depth = stack.pop()
        if not op.regions:
            continue
        if depth >= MAX_REGION_DEPTH:
            raise IRError(f"'{op.name}': {too_deep_message()}", op.loc)
        for region in op.regions:
            for block in region.blocks:
                nested = block.first_op  # the linked list directly: this visits every op
                while nested is not None:
                    if nested.regions:
                        stack.append((nested, depth + 1))
                    nested = nested.next
