"""Files and input (issue 11, items 9 and 10): -o never damages a file, inputs are bounded.

Every case runs the real ``irc`` command in a subprocess, in a temporary
directory: special files there are made by the test (a FIFO, symlinks, and, as
root, a character device equal to /dev/null made with ``os.mknod``).  The real
/dev/null is never a target.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

PROGRAM = "func.func @f(%a: i64) -> i64 {\n  func.return %a : i64\n}\n"
IRC = [sys.executable, "-m", "irc.cli"]


def limit_memory() -> None:
    """In the child: at most 4 GiB of address space, so a reader without a cap (a
    regression) fails fast instead of exhausting the machine's memory."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def irc(*args, cwd, stdin=subprocess.DEVNULL, timeout=60, **kwargs):
    if "input" in kwargs:
        stdin = None
    p = subprocess.run(IRC + [str(a) for a in args], cwd=cwd, stdin=stdin, capture_output=True,
                       timeout=timeout, preexec_fn=limit_memory, **kwargs)
    assert "Traceback" not in p.stderr.decode(errors="replace")
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


@pytest.fixture
def d(tmp_path):
    (tmp_path / "x.ir").write_text(PROGRAM)
    return tmp_path


def leftovers(directory) -> list[str]:
    return [n for n in os.listdir(directory) if "tmp" in n]


# -- item 9: -o ---------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device needs root")
@pytest.mark.parametrize("command", [["opt", "x.ir"], ["compile", "x.ir", "--emit", "llvm"],
                                     ["compile", "x.ir", "--emit", "obj"]])
def test_output_to_a_device_writes_through_it(d, command):
    dev = d / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers, in the temp dir
    code, _, err = irc(*command, "-o", dev, cwd=d)
    assert code == 0, err
    st = os.lstat(dev)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert leftovers(d) == []


def test_output_to_a_fifo_writes_through_it(d):
    fifo = d / "pipe"
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo) as f:
            got["text"] = f.read()

    t = threading.Thread(target=reader)
    t.start()
    code, _, err = irc("opt", "x.ir", "-o", fifo, cwd=d)
    t.join(30)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got["text"] == PROGRAM
    assert leftovers(d) == []


def test_output_through_a_symlink_replaces_the_target_and_keeps_the_link(d):
    (d / "real.ir").write_text("old\n")
    os.chmod(d / "real.ir", 0o640)
    os.symlink("real.ir", d / "link.ir")
    code, _, err = irc("opt", "x.ir", "-o", "link.ir", cwd=d)
    assert code == 0, err
    assert os.path.islink(d / "link.ir") and os.readlink(d / "link.ir") == "real.ir"
    assert (d / "real.ir").read_text() == PROGRAM
    assert stat.S_IMODE(os.stat(d / "real.ir").st_mode) == 0o640  # permissions kept
    assert leftovers(d) == []


def test_output_to_dev_stdout_is_this_process_stdout(d):
    with open(d / "captured", "ab") as out:
        out.write(b"kept\n")
        out.flush()
        p = subprocess.run(IRC + ["opt", "x.ir", "-o", "/dev/stdout"], cwd=d, stdout=out,
                           stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (d / "captured").read_text() == "kept\n" + PROGRAM  # appended, not replaced or truncated
    p = subprocess.run(IRC + ["opt", "x.ir", "-o", "/dev/stdout"], cwd=d, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout.decode() == PROGRAM, p.stderr


def test_output_never_overwrites_the_input_unless_in_place(d):
    code, _, err = irc("opt", "x.ir", "-o", "x.ir", "-p", "canonicalize", cwd=d)
    assert code == 2 and "is the input file" in err and "--in-place" in err
    os.link(d / "x.ir", d / "hard.ir")
    code, _, err = irc("opt", "x.ir", "-o", "hard.ir", cwd=d)
    assert code == 2 and "is the input file" in err
    code, _, err = irc("compile", "x.ir", "-o", "x.ir", cwd=d)
    assert code == 2 and "is the input file" in err
    assert (d / "x.ir").read_text() == PROGRAM
    (d / "y.ir").write_text(PROGRAM.replace("%a", "%b"))
    code, out, err = irc("opt", "--in-place", "y.ir", cwd=d)
    assert code == 0 and out == "", err
    assert (d / "y.ir").read_text() == PROGRAM.replace("%a", "%b")
    code, _, err = irc("opt", "--in-place", "y.ir", "-o", "z.ir", cwd=d)
    assert code == 2 and "takes no -o" in err
    assert leftovers(d) == []


def test_failed_write_leaves_no_temporary_file(d):
    os.mkdir(d / "ro")
    (d / "ro" / "out.ir").write_text("old\n")
    code, _, err = irc("opt", "x.ir", "-o", d / "out-dir-missing" / "o.ir", cwd=d)
    assert code == 2 and "cannot write" in err
    code, _, err = irc("opt", "x.ir", "-o", d, cwd=d)
    assert code == 2 and "directory" in err
    assert leftovers(d) == [] and leftovers(d / "ro") == []


def test_interrupted_write_leaves_no_temporary_file(d, monkeypatch):
    """Ctrl-C arriving while the temporary file exists: it is removed, the target untouched."""
    from irc import fileio

    # Python's own handler, also where the suite was started with SIGINT ignored (a background job)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupted_write(d, monkeypatch, fileio)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_write(d, monkeypatch, fileio) -> None:
    target = d / "out.ir"
    target.write_text("old\n")
    real_replace = os.replace

    def interrupted(src, dst):
        os.kill(os.getpid(), signal.SIGINT)  # deferred until the file is handled
        return real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_output(PROGRAM, str(target))
    assert leftovers(d) == []

    def failing(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "replace", failing)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_output("new\n", str(target))
    assert leftovers(d) == []
    assert target.read_text() == PROGRAM


# -- item 10: input -------------------------------------------------------------------------------


def test_devices_and_directories_are_refused(d):
    code, _, err = irc("opt", "/dev/zero", cwd=d, timeout=30)
    assert code == 2 and "/dev/zero is a device" in err
    code, _, err = irc("opt", "/dev/urandom", cwd=d, timeout=30)
    assert code == 2 and "is a device" in err
    code, _, err = irc("opt", d, cwd=d)
    assert code == 2 and "is a directory" in err


def test_input_size_is_capped(d):
    with open("/dev/zero", "rb") as zero:
        code, _, err = irc("opt", "-", "--max-input-size", "1M", cwd=d, stdin=zero, timeout=30)
    assert code == 2 and "larger than 1 MiB" in err and "--max-input-size" in err
    (d / "big.ir").write_text("// " + "x" * 5000 + "\n" + PROGRAM)
    code, _, err = irc("opt", "big.ir", "--max-input-size", "4k", cwd=d)
    assert code == 2 and "big.ir is larger than 4 KiB" in err
    code, out, err = irc("opt", "big.ir", "--max-input-size", "1M", cwd=d)
    assert code == 0, err
    code, _, err = irc("opt", "big.ir", "--max-input-size", "lots", cwd=d)
    assert code == 2 and "not a size" in err


def test_a_fifo_that_ends_is_read(d):
    fifo = d / "in.fifo"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "w") as f:
            f.write(PROGRAM)

    t = threading.Thread(target=writer)
    t.start()
    code, out, err = irc("opt", fifo, cwd=d)
    t.join(30)
    assert code == 0 and out == PROGRAM, err


def test_binary_input_is_a_diagnostic_with_a_location(d):
    (d / "nul.ir").write_bytes(b"func.func @f() {\n  func.return\0\n}\n")
    code, _, err = irc("opt", "nul.ir", cwd=d)
    assert code == 1 and err.startswith("nul.ir:2:14: error: a NUL byte"), err
    (d / "latin.ir").write_bytes(b"// ok\n// caf\xe9\n")
    code, _, err = irc("opt", "latin.ir", cwd=d)
    assert code == 1 and err.startswith("latin.ir:2:7: error: a byte that is not UTF-8 (0xe9)"), err
    code, _, err = irc("opt", "-", cwd=d, input=b"\x00\x01\x02")
    assert code == 1 and err.startswith("<stdin>:1:1: error: a NUL byte"), err


def test_closed_and_empty_stdin(d):
    p = subprocess.run(IRC + ["opt", "-"], cwd=d, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b""
    p = subprocess.run(" ".join(IRC) + " opt - <&-", shell=True, cwd=d, capture_output=True, timeout=60)
    assert p.returncode == 2 and b"standard input is closed" in p.stderr, p.stderr


def test_npy_arguments_are_bounded_and_safe(d):
    (d / "sum.ir").write_text(
        "func.func @f(%m: memref<?xf64>) -> index {\n  %c0 = arith.constant 0 : index\n"
        "  %n = memref.dim %m, %c0 : memref<?xf64>\n  func.return %n : index\n}\n")
    np.save(d / "a.npy", np.arange(2000.0))
    code, out, err = irc("run", "sum.ir", "--interp", "@a.npy", cwd=d)
    assert (code, out) == (0, "2000\n"), err
    code, _, err = irc("run", "sum.ir", "--interp", "@a.npy", "--max-input-size", "1k", cwd=d)
    assert code == 2 and "larger than 1 KiB" in err
    code, _, err = irc("run", "sum.ir", "--interp", "@/dev/zero", cwd=d, timeout=30)
    assert code == 2 and "is a device" in err
    np.save(d / "obj.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    code, _, err = irc("run", "sum.ir", "--interp", "@obj.npy", cwd=d)
    assert code == 2 and "cannot load obj.npy" in err
    np.savez(d / "z.npz", a=np.zeros(3))
    code, _, err = irc("run", "sum.ir", "--interp", "@z.npz", cwd=d)
    assert code == 2 and "not a .npy file" in err
    (d / "trunc.npy").write_bytes((d / "a.npy").read_bytes()[:200])
    code, _, err = irc("run", "sum.ir", "--interp", "@trunc.npy", cwd=d)
    assert code == 2 and "cannot load trunc.npy" in err


def test_output_into_the_fifo_the_input_came_from_is_refused(d):
    """Found by the CLI fuzzer (seed 1225): it used to wait forever for a reader."""
    fifo = d / "io.fifo"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "w") as f:
            f.write(PROGRAM)

    t = threading.Thread(target=writer)
    t.start()
    code, _, err = irc("opt", fifo, "-o", fifo, cwd=d, timeout=60)
    t.join(30)
    assert code == 2 and "is the input file" in err
