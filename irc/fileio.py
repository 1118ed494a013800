"""Reading inputs and writing outputs safely: the only way irc touches user files.

Inputs (``read_input``) are read with a size cap, so ``/dev/zero`` or an endless
pipe is an error naming the limit instead of exhausting memory; directories and
devices are refused with a message; binary data (a NUL byte, invalid UTF-8) is
a diagnostic at the offending line and column.  Pipes and FIFOs are read to
their end, as every Unix tool does (``irc opt <(gen)`` works).

Outputs (``write_output``) never damage a file that was not asked for:

* a regular file is replaced atomically (a temporary file in the same
  directory, then ``os.replace``), keeping the old file's permission bits; the
  temporary file is removed whatever happens, Ctrl-C included;
* anything else - a character device such as ``/dev/null``, a FIFO, a socket,
  ``/dev/stdout`` - is written *through*, never replaced: replacing
  ``/dev/null`` as root would turn it into a regular file;
* a symbolic link is followed: its target is written (atomically if it is a
  regular file) and the link itself stays a link;
* the input file is never overwritten unless the command allows it
  (``irc opt --in-place``): ``irc opt x.ir -o x.ir`` is almost always a typo.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import tempfile
from collections.abc import Callable
from typing import BinaryIO

from .diagnostics import IRError, Location, SourceFile

DEFAULT_MAX_INPUT = 256 << 20  # bytes; --max-input-size raises it

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class InputError(Exception):
    """An input or output that cannot be used (missing, a directory, too large...): a usage error."""


def parse_size(text: str) -> int:
    """``'64M'`` -> 67108864; plain numbers are bytes; k/M/G are powers of 1024."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    number = t[: len(t) - len(unit)]
    if not number.isdigit():
        raise ValueError(f"not a size: {text!r} (use bytes, or a number with k, M or G)")
    size = int(number) * _UNITS[unit]
    if size <= 0:
        raise ValueError("the size must be positive")
    return size


def format_size(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} bytes"


def _too_large(name: str, limit: int) -> InputError:
    return InputError(f"{name} is larger than {format_size(limit)}, irc's input limit "
                      f"(raise it with --max-input-size)")


def _read_capped(fd: int, name: str, limit: int) -> bytes:
    chunks, total = [], 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _too_large(name, limit)


def read_bytes(path: str, limit: int = DEFAULT_MAX_INPUT, kind: str = "a file") -> bytes:
    """The bytes of the file at ``path``, at most ``limit`` of them; ``InputError`` otherwise.

    ``kind`` names what was expected, for messages ("adir is a directory, not an .ir file").
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not {kind}") from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode  # of what was opened, not of what the name meant a moment ago
        if stat.S_ISDIR(mode):
            raise InputError(f"{path} is a directory, not {kind}")
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise InputError(f"{path} is a device, not {kind} (to read standard input, use '-')")
        if stat.S_ISREG(mode) and os.fstat(fd).st_size > limit:
            raise _too_large(path, limit)
        return _read_capped(fd, path, limit)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    finally:
        os.close(fd)


def read_stdin(limit: int = DEFAULT_MAX_INPUT) -> bytes:
    """All of standard input, at most ``limit`` bytes; a closed stdin is an ``InputError``."""
    stream = sys.stdin
    if stream is None:  # 'irc opt - <&-': Python found no file descriptor 0
        raise InputError("standard input is closed")
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream put in place of stdin (tests, embedding)
        text = stream.read(limit + 1)
        if len(text) > limit:
            raise _too_large("standard input", limit)
        return text.encode("utf-8", "surrogateescape")
    try:
        fd = buffer.fileno()
    except (OSError, ValueError, AttributeError):  # an in-memory buffer
        fd = None
    if fd is None:
        data = buffer.read(limit + 1)
        if len(data) > limit:
            raise _too_large("standard input", limit)
        return data
    try:
        return _read_capped(fd, "standard input", limit)
    except OSError as e:
        raise InputError(f"cannot read standard input: {e.strerror}") from None


def decode_source(data: bytes, name: str) -> str:
    """UTF-8 text without NUL bytes; otherwise an ``IRError`` at the first bad byte's line and column."""
    bad = data.find(b"\0")
    what = "a NUL byte"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if bad < 0 or e.start < bad:
            bad, what = e.start, f"a byte that is not UTF-8 (0x{data[e.start]:02x})"
    else:
        if bad < 0:
            return text
    line = data.count(b"\n", 0, bad) + 1
    start = data.rfind(b"\n", 0, bad) + 1
    column = len(data[start:bad].decode("utf-8", "replace")) + 1
    # No source line under the message: a binary "line" may be megabytes of control characters.
    raise IRError(f"{what}: this is not a text file of irc's language (binary input?)",
                  Location(SourceFile(name, ""), line, column))


def read_source(path: str, limit: int = DEFAULT_MAX_INPUT) -> tuple[str, str]:
    """The text of an input (``'-'``: standard input) and its name for diagnostics."""
    if path == "-":
        return decode_source(read_stdin(limit), "<stdin>"), "<stdin>"
    return decode_source(read_bytes(path, limit, "an .ir file"), path), path


# -- output ------------------------------------------------------------------------------------


def same_file(a: str, b: str) -> bool:
    """Whether two paths name the same existing file (hard links and symlinks included; a FIFO
    too: writing the output into the FIFO the input came from would wait for a reader forever)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def write_output(data: str | bytes, out: str | None, *, inputs: tuple[str, ...] = (),
                 allow_overwriting_input: bool = False) -> None:
    """Write ``data`` to ``out`` (None or ``'-'``: standard output); see the module docstring."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if out is None or out == "-":
        stream = sys.stdout
        if stream is None:
            raise InputError("standard output is closed")
        if hasattr(stream, "buffer"):
            stream.flush()
            stream.buffer.write(raw)
            stream.buffer.flush()
        else:  # a text stream put in place of stdout (tests, embedding)
            stream.write(data if isinstance(data, str) else raw.decode("utf-8", "replace"))
        return
    write_file(out, lambda f: f.write(raw), inputs=inputs, allow_overwriting_input=allow_overwriting_input)


def write_file(out: str, write: Callable[[BinaryIO], object], *, inputs: tuple[str, ...] = (),
               allow_overwriting_input: bool = False, sync: bool = False) -> None:
    """Write the file ``out`` by calling ``write`` with a binary file object, with the guarantees of
    the module docstring: a regular file is replaced atomically (``write`` may stream gigabytes, and
    whatever it raises, Ctrl-C included, leaves the old file as it was and no temporary file), a
    special file is written through.  ``sync`` flushes the data to the disk before the rename, so
    that a crash of the machine leaves the old file or the new one, never an empty one
    (checkpoints ask for it)."""
    if not allow_overwriting_input:
        for source in inputs:
            if source != "-" and same_file(source, out):
                raise InputError(f"the output {out} is the input file; irc will not overwrite its input "
                                 f"(use --in-place to do that on purpose)")
    fd = _open_descriptor(out)
    if fd is not None:  # /dev/stdout, /dev/fd/3...: the descriptor this process already has
        _write_fd(fd, write, out)
        return
    try:
        st = os.stat(out)  # follows symlinks: what the name leads to decides
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise InputError(f"cannot write {out}: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"cannot write {out}: it is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_through(write, out)
        return
    if st is not None and not os.access(out, os.W_OK):
        # Replacing would succeed in a writable directory; a read-only file says "don't".
        raise InputError(f"cannot write {out}: Permission denied")
    # A symlink's target is what gets replaced; the link itself stays a link.
    _replace_atomically(write, os.path.realpath(out), out, st, sync)


_FD_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def _open_descriptor(out: str) -> int | None:
    """The file descriptor a path like /dev/stdout or /proc/self/fd/3 names, if it is one."""
    if out in _FD_PATHS:
        return _FD_PATHS[out]
    for prefix in ("/dev/fd/", "/proc/self/fd/", f"/proc/{os.getpid()}/fd/"):
        if out.startswith(prefix) and out[len(prefix):].isdigit():
            return int(out[len(prefix):])
    return None


def _write_fd(fd: int, write: Callable[[BinaryIO], object], out: str) -> None:
    if fd == 1 and sys.stdout is not None:
        sys.stdout.flush()
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            write(f)
    except OSError as e:
        raise InputError(f"cannot write {out}: {e.strerror}") from None


def _write_through(write: Callable[[BinaryIO], object], out: str) -> None:
    """Write into an existing special file (device, FIFO, socket) without replacing it."""
    try:
        fd = os.open(out, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))  # no O_CREAT, no O_TRUNC
    except OSError as e:
        raise InputError(f"cannot write {out}: {e.strerror}") from None
    try:
        _write_fd(fd, write, out)
    finally:
        os.close(fd)


def _replace_atomically(write: Callable[[BinaryIO], object], target: str, out: str, st,
                        sync: bool = False) -> None:
    """Write a temporary file beside ``target`` and rename it over it; remove it on any failure."""
    directory = os.path.dirname(target) or "."
    tmp = None
    # Ctrl-C between creating and renaming must not leave the temporary file behind:
    # hold SIGINT off for the few system calls that matter (the main thread only can).
    old_handler = None
    deferred: list = []
    if _can_defer_sigint():
        old_handler = signal.signal(signal.SIGINT, lambda *a: deferred.append(a))
    try:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".irc-tmp", dir=directory)
        except OSError as e:
            raise InputError(f"cannot write {out}: {e.strerror}") from None
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
                mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
                os.chmod(tmp, mode)
            os.replace(tmp, target)  # atomic: a failed write never clobbers the old file
            tmp = None
        except OSError as e:
            raise InputError(f"cannot write {out}: {e.strerror}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
            if deferred:
                raise KeyboardInterrupt


def _can_defer_sigint() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
