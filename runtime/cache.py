"""The on-disk compile cache: machine code keyed by everything that determines it.

Directory: ``$IRC_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/irc`` or
``~/.cache/irc``; an explicit ``cache_dir`` argument wins over both.  Each entry
is one file, written atomically by ``irc.diskcache`` (never through a symlink,
never leaving a temporary file) and signed by it: a magic header, then an
HMAC-SHA256 of the entry's name and payload under this user's secret cache key
(``diskcache.write_signed``), then the payload (the fault list's length and
JSON, then the object code: all of it under the MAC).  Machine code is run, so a checksum
would not do: whoever can write the directory could write a valid one.  An
entry that fails any check (missing MAC or a wrong one, a bad header, something
other than a regular file in its place, object code LLVM will not link, a
missing symbol) is removed and rebuilt; nothing about it is fatal or sticky.
Without a usable key nothing is read or written.  Two processes compiling the
same module race harmlessly: both write the same bytes, the last rename wins.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import llvmlite

import irc
from irc import diskcache

_MAGIC = b"IRCCACHE3\n"


@dataclass
class Entry:
    object_code: bytes
    faults: list  # [(message, (line, column))]


@lru_cache(maxsize=1)
def backend_fingerprint() -> str:
    """A hash of the code generator's own source: any change to it invalidates old entries."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of all of irc's own source (the IR core, dialects, passes and backend): the key of
    an entry made from something other than the final IR (a GEMM library function's name:
    cpu/gemm_library.py) must change whenever any code that produced the entry does."""
    import irc.dialects
    import irc.passes

    h = hashlib.sha256()
    for package in (irc, irc.dialects, irc.passes):
        for path in sorted(Path(package.__file__).parent.rglob("*.py")):
            h.update(path.read_bytes())
    h.update(backend_fingerprint().encode())
    return h.hexdigest()


def key(ir_text: str, source_identity: str, options: dict, cpu: str, features: str) -> str:
    h = hashlib.sha256()
    for part in (ir_text, source_identity, json.dumps(options, sort_keys=True), cpu, features,
                 irc.__version__, llvmlite.__version__, backend_fingerprint()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def directory(cache_dir: str | None = None) -> Path:
    return diskcache.cache_directory(cache_dir)


def _parts(k: str) -> tuple[str, str]:
    return k[:2], f"{k}.o"


def load(k: str, cache_dir: str | None = None) -> Entry | None:
    """The entry for key ``k`` if this user's irc wrote it; None otherwise (and a bad one is removed)."""
    root = directory(cache_dir)
    payload = diskcache.read_signed(root, *_parts(k), magic=_MAGIC)
    if payload is None:
        return None
    entry = _decode(payload)
    if entry is None:  # signed by us but unreadable (an older layout): drop it so that it is rewritten
        diskcache.discard(root, *_parts(k))
    return entry


def _decode(payload: bytes) -> Entry | None:
    """An authenticated payload: the fault list's length (8 bytes), the fault list (JSON), the object."""
    header_len = int.from_bytes(payload[:8], "little")
    try:
        meta = json.loads(payload[8:8 + header_len])
        faults = [(m, (line, column)) for m, (line, column) in meta["faults"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if not all(isinstance(m, str) and type(line) is int and type(column) is int for m, (line, column) in faults):
        return None
    return Entry(payload[8 + header_len:], faults)


def store(k: str, entry: Entry, cache_dir: str | None = None) -> None:
    """Write an entry; a cache that cannot be written (or no key) is silently skipped."""
    header = json.dumps({"faults": entry.faults}).encode()
    payload = len(header).to_bytes(8, "little") + header + entry.object_code
    diskcache.write_signed(directory(cache_dir), *_parts(k), magic=_MAGIC, payload=payload)


def discard(k: str, cache_dir: str | None = None) -> None:
    diskcache.discard(directory(cache_dir), *_parts(k))


def clear(cache_dir: str | None = None) -> int:
    """Delete every cache entry; return how many were removed."""
    root = directory(cache_dir)
    count = 0
    for p in root.glob("*/*.o"):
        diskcache.discard(root, p.parent.name, p.name)
        count += 1
    return count
