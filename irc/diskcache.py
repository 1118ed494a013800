"""irc's caches on disk: where they are, the secret that authenticates them, safe reads and writes.

A cache directory may be shared, copied from another machine, or writable by
someone else; what irc reads from it (the parser's tables, machine code) must
be what this user's irc wrote.  So every cache file carries an HMAC-SHA256 under
a secret key that lives outside the cache, in ``$XDG_CONFIG_HOME/irc/cache-key``
(``~/.config/irc/cache-key``; ``$IRC_CACHE_KEY_FILE`` overrides the path): 32
random bytes, created on first use with mode 0600.  The key is used only if it
is a regular file owned by this user that nobody else can read or write; when
it cannot be created or trusted, ``key()`` is None and irc caches nothing on
disk (it still works, only slower).  Someone who can write the cache directory
can therefore delete or corrupt entries (irc rebuilds them) but cannot make irc
load anything it did not write itself.

Reads and writes never follow a symlink below the cache directory, never block
on a FIFO, and remove whatever is not a regular file where an entry should be;
a write goes to a temporary file that is renamed into place, or removed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shutil
import stat
import threading
from pathlib import Path

KEY_BYTES = 32
MAX_ENTRY_BYTES = 1 << 30
_lock = threading.Lock()
_cached: tuple[str, bytes | None] | None = None


def cache_directory(cache_dir: str | None = None) -> Path:
    """``cache_dir`` if given, else ``$IRC_CACHE_DIR``, else ``$XDG_CACHE_HOME/irc`` or ``~/.cache/irc``."""
    if cache_dir:
        return Path(cache_dir)
    env = os.environ.get("IRC_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "irc"


def key_path() -> Path:
    env = os.environ.get("IRC_CACHE_KEY_FILE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "irc" / "cache-key"


def key() -> bytes | None:
    """This user's cache key (created if missing), or None if there is none to trust."""
    global _cached
    path = str(key_path())
    with _lock:
        if _cached is None or _cached[0] != path:
            _cached = (path, _load_or_create(Path(path)))
        return _cached[1]


def mac(key_bytes: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 of ``parts``, each length-prefixed (so that no two splits of the bytes agree)."""
    h = hmac.new(key_bytes, digestmod=hashlib.sha256)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def read_signed(root: Path, *parts: str, magic: bytes) -> bytes | None:
    """The payload of a signed entry (see ``write_signed``) if this user's irc wrote it; None
    otherwise: no key, no entry, or one that is not ours (which is then removed)."""
    secret = key()
    if secret is None:
        return None
    data = read(root, *parts)
    if data is None:
        return None
    head = len(magic)
    payload = data[head + 32:]
    if data.startswith(magic) and len(data) >= head + 32 and hmac.compare_digest(
            data[head:head + 32], mac(secret, magic, parts[-1].encode(), payload)):
        return payload
    discard(root, *parts)
    return None


def write_signed(root: Path, *parts: str, magic: bytes, payload: bytes) -> bool:
    """Write ``magic``, the MAC of (magic, the entry's file name, payload), then ``payload``: the
    name is signed too, so that no valid entry can stand in for another.  False if not written."""
    secret = key()
    if secret is None:
        return False
    return write(root, *parts, data=magic + mac(secret, magic, parts[-1].encode(), payload) + payload)


def _load_or_create(path: Path) -> bytes | None:
    found = _read_key(path)
    if found is not None or path.exists() or path.is_symlink():
        return found
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".cache-key.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
            try:
                os.link(tmp, path)  # atomic, and never replaces a key another process made first
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    except OSError:
        return None
    return _read_key(path)


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077
                or st.st_size != KEY_BYTES):
            return None
        data = os.read(fd, KEY_BYTES + 1)
        return data if len(data) == KEY_BYTES else None
    finally:
        os.close(fd)


# -- entries -------------------------------------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _open_parent(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of the directory holding ``root/parts...``; below ``root`` no symlink is followed."""
    if create:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError:  # a symlink or a file where a subdirectory should be: not ours, remove it
                _remove(fd, part)
                if not create:
                    raise
                os.mkdir(part, 0o700, dir_fd=fd)
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def read(root: Path, *parts: str) -> bytes | None:
    """The bytes of the entry ``root/parts...``, or None (missing, or not a regular file: then removed)."""
    try:
        parent = _open_parent(root, parts, create=False)
    except OSError:
        return None
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError:  # a symlink (ELOOP) or something else that cannot be read: not ours
            _remove(parent, parts[-1])
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
                _remove(parent, parts[-1])
                return None
            chunks, left = [], st.st_size + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 24))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            return data if len(data) <= MAX_ENTRY_BYTES else None
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        os.close(parent)


def write(root: Path, *parts: str, data: bytes) -> bool:
    """Write an entry atomically (a temporary file renamed over it); False if the cache cannot be written."""
    try:
        parent = _open_parent(root, parts, create=True)
    except OSError:
        return False
    tmp = f".tmp-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            return True
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=parent)
            except OSError:
                pass
            raise
    except OSError:
        return False
    finally:
        os.close(parent)


def discard(root: Path, *parts: str) -> None:
    """Remove the entry, whatever it is (a file, a symlink, a FIFO, a directory tree)."""
    try:
        parent = _open_parent(root, parts, create=False)
    except OSError:
        return
    try:
        _remove(parent, parts[-1])
    finally:
        os.close(parent)


def _remove(parent: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            if shutil.rmtree.avoids_symlink_attacks:
                shutil.rmtree(f"/proc/self/fd/{parent}/{name}", ignore_errors=True)
        else:
            os.unlink(name, dir_fd=parent)
    except OSError:
        pass
