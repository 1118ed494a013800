"""The user's line: the innermost Python frame outside irc.

Every op the tracer builds takes this location, so a verifier message, a shape error
while tracing or a fault at run time points at the line of the user's numpy code
that made the op, never at a frame inside irc.  Source files are read once (through
``linecache``, which also knows the text of code typed at a REPL or given to ``exec``
with a registered name).
"""

from __future__ import annotations

import linecache
import os
import sys

from irc.diagnostics import UNKNOWN, Location, SourceFile


def _roots() -> tuple[str, ...]:
    """irc's directories (irc/, and dialects/, passes/, runtime/, which are mapped into the
    irc namespace from elsewhere) and numpy's: no frame in them is the user's line."""
    import numpy

    import irc

    dirs = [os.path.dirname(os.path.abspath(irc.__file__)), os.path.dirname(os.path.abspath(numpy.__file__))]
    for name in ("dialects", "passes", "runtime"):
        spec = __import__("importlib.util").util.find_spec(f"irc.{name}")
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(os.path.abspath(d) for d in spec.submodule_search_locations)
    return tuple(d + os.sep for d in dirs)


_SKIPPED: tuple[str, ...] = ()
_sources: dict[str, SourceFile] = {}


def _is_internal(filename: str) -> bool:
    global _SKIPPED
    if not _SKIPPED:
        _SKIPPED = _roots()
    # "<irc ": the entries irc generates (runtime/fast_entry.py, cpu/callconv.py)
    return filename.startswith(_SKIPPED) or filename.startswith(("<frozen ", "<irc "))


def user_frame():
    """The innermost frame whose code is not irc's or numpy's (None if there is none)."""
    frame = sys._getframe(1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_stacklevel() -> int:
    """``warnings.warn``'s ``stacklevel`` for the user's line, from the function that calls
    ``warnings.warn``: however many of irc's frames (and generated entries) lie between."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def source_file(filename: str) -> SourceFile:
    src = _sources.get(filename)
    if src is None:
        src = _sources[filename] = SourceFile(filename, "".join(linecache.getlines(filename)))
    return src


def user_location() -> Location:
    """The user's current line as an IR location (column 1: Python frames give no column
    before 3.11's positions, and the line is what a reader needs)."""
    frame = user_frame()
    if frame is None:
        return UNKNOWN
    src = source_file(frame.f_code.co_filename)
    line = frame.f_lineno
    text = src.line(line)
    return Location(src, line, len(text) - len(text.lstrip()) + 1 if text else 1)


def where() -> str:
    """``file:line`` and the source text of the user's line, for a Python exception's message."""
    loc = user_location()
    if loc is UNKNOWN:
        return ""
    text = loc.source.line(loc.line).strip()
    return f"\n  at {loc.filename}:{loc.line}: {text}" if text else f"\n  at {loc.filename}:{loc.line}"


def located_message(message: str) -> str:
    return message + where()


def check_same_tree(expected, got, what: str) -> None:
    """``irc.pytree.check_same`` whose TreeMismatch shows the user's line."""
    from irc import pytree

    try:
        pytree.check_same(expected, got, what)
    except pytree.TreeMismatch as e:
        raise pytree.TreeMismatch(located_message(str(e))) from None
