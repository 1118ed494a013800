"""The on-disk compile cache: machine code keyed by everything that determines it.

Directory: ``$IRC_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/irc`` or
``~/.cache/irc``; an explicit ``cache_dir`` argument wins over both.  Each entry
is one file written atomically (a temporary file, then ``os.replace``), with a
magic header and a SHA-256 of its payload, so a truncated or corrupt entry is
detected, deleted and rebuilt instead of being loaded.  Two processes compiling
the same module race harmlessly: both write the same bytes, the last rename wins.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import llvmlite

import irc

_MAGIC = b"IRCCACHE1\n"


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


def key(ir_text: str, source_identity: str, options: dict, cpu: str, features: str) -> str:
    h = hashlib.sha256()
    for part in (ir_text, source_identity, json.dumps(options, sort_keys=True), cpu, features,
                 irc.__version__, llvmlite.__version__, backend_fingerprint()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def directory(cache_dir: str | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir)
    env = os.environ.get("IRC_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "irc"


def _path(k: str, cache_dir: str | None) -> Path:
    return directory(cache_dir) / k[:2] / f"{k}.o"


def load(k: str, cache_dir: str | None = None) -> Entry | None:
    path = _path(k, cache_dir)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        if not data.startswith(_MAGIC):
            raise ValueError("bad magic")
        rest = data[len(_MAGIC):]
        digest, header_len = rest[:32], int.from_bytes(rest[32:40], "little")
        payload = rest[40:]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        meta = json.loads(payload[:header_len])
        return Entry(payload[header_len:], [(m, tuple(loc)) for m, loc in meta["faults"]])
    except (ValueError, KeyError, json.JSONDecodeError, UnicodeDecodeError):
        try:  # corrupt: drop it so that the next compile rewrites it
            path.unlink()
        except OSError:
            pass
        return None


def store(k: str, entry: Entry, cache_dir: str | None = None) -> None:
    """Write an entry atomically; a cache that cannot be written is silently skipped."""
    path = _path(k, cache_dir)
    header = json.dumps({"faults": entry.faults}).encode()
    payload = header + entry.object_code
    data = _MAGIC + hashlib.sha256(payload).digest() + len(header).to_bytes(8, "little") + payload
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


def discard(k: str, cache_dir: str | None = None) -> None:
    try:
        _path(k, cache_dir).unlink()
    except OSError:
        pass


def clear(cache_dir: str | None = None) -> int:
    """Delete every cache entry; return how many were removed."""
    root = directory(cache_dir)
    count = 0
    for p in root.glob("*/*.o"):
        try:
            p.unlink()
            count += 1
        except OSError:
            pass
    return count
