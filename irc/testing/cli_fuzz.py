"""CLI fuzzing: the ``irc`` command over hostile files, inputs and output targets.

    python -m irc.testing.cli_fuzz --n 200 --seed 0 [--timeout SECONDS] [--keep DIR]

Each case runs ``irc opt``, ``irc compile`` or ``irc run --interp`` in a child
process, inside a fresh temporary directory holding the case's files, with an
input drawn from: a valid program, a truncated or byte-mutated one, random
binary data, a file over a small ``--max-input-size``, a directory, a FIFO fed
by a writer, a symlink (dangling or not), ``/dev/zero``, a device made with
``os.mknod`` (as root), standard input that is closed, empty, a program, or
``/dev/zero``; and an ``-o`` target drawn from: none, a new file, an existing
file with unusual permissions, a symlink, a FIFO with a reader, a device (as
root; a copy of /dev/null's numbers in the temporary directory, never the real
one), a directory, a missing directory, the input itself, ``/dev/stdout``.

Every case must: exit 0, 1 or 2 (never 3, never a signal); print no Python
traceback and no "internal error"; finish within ``--timeout``; leave no
temporary file behind; leave every file but the requested output unchanged
(content, type, permissions, link target); and keep special files special.
A failing case is printed with its seed, so ``--seed S --n 1`` reproduces it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

PROGRAM = """func.func @f(%a: i64, %b: i64) -> i64 {
  %c = arith.addi %a, %b : i64
  %d = arith.muli %c, %a : i64
  func.return %d : i64
}
"""

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@dataclass
class Case:
    seed: int
    argv: list[str] = field(default_factory=list)
    stdin: str = "devnull"  # devnull | closed | program | zero | empty
    output: str | None = None  # the -o target, relative to the case's directory
    fifo_in: str | None = None  # a FIFO to feed with a program
    fifo_out: str | None = None  # a FIFO to drain
    notes: list[str] = field(default_factory=list)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(4)
        pos = rng.randrange(len(data) + 1)
        if kind == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:
            data[pos:pos] = rng.choice([b"\0", b"\xff", b"{", b"}" * 3, b"9" * 5000, b"\xc3", b"%", b"\n"])
        elif kind == 2:
            del data[pos:pos + rng.randint(1, 20)]
        else:
            data[pos:pos] = b"scf.if %a {\n" * rng.randint(1, 1500)
    return bytes(data)


def build(seed: int, d: Path) -> Case:
    """Create the case's files in ``d`` and choose its command line."""
    rng = random.Random(seed)
    case = Case(seed)
    (d / "prog.ir").write_text(PROGRAM)
    inp = rng.choice(["prog", "truncated", "mutated", "binary", "huge", "dir", "fifo", "symlink", "dangling",
                      "dev_zero", "device", "stdin"])
    name = "input.ir"
    if inp == "prog":
        (d / name).write_text(PROGRAM)
    elif inp == "truncated":
        (d / name).write_text(PROGRAM[: rng.randrange(len(PROGRAM))])
    elif inp == "mutated":
        (d / name).write_bytes(_mutate(PROGRAM.encode(), rng))
    elif inp == "binary":
        (d / name).write_bytes(rng.randbytes(rng.randint(1, 4096)))
    elif inp == "huge":
        (d / name).write_text("// padding\n" * 1000 + PROGRAM)
        case.argv += ["--max-input-size", "4k"]
    elif inp == "dir":
        (d / name).mkdir()
    elif inp == "fifo":
        os.mkfifo(d / name)
        case.fifo_in = name
    elif inp == "symlink":
        os.symlink("prog.ir", d / name)
    elif inp == "dangling":
        os.symlink("nowhere.ir", d / name)
    elif inp == "dev_zero":
        name = "/dev/zero"
    elif inp == "device":
        if IS_ROOT:
            os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's numbers
        else:
            name = "/dev/urandom"
    else:
        name = "-"
        case.stdin = rng.choice(["closed", "empty", "program", "zero"])
        if case.stdin == "zero":
            case.argv += ["--max-input-size", "1M"]
    command = rng.choice(["opt", "opt", "compile", "run"])
    if command == "opt":
        argv = ["opt", name] + rng.choice([[], ["-p", "canonicalize,cse"], ["--generic"], ["-O", "2"]])
    elif command == "compile":
        argv = ["compile", name, "--emit", rng.choice(["llvm", "asm", "obj"])]
    else:
        argv = ["run", name, "--interp", str(rng.randint(-5, 5)), str(rng.randint(-5, 5))]
    out = rng.choice(["none", "new", "existing", "symlink", "fifo", "device", "dir", "missing_dir", "input",
                      "stdout", "dash"]) if command != "run" else "none"
    if command == "compile" and out == "none":
        out = "new"
    if out == "new":
        case.output = "out.txt"
    elif out == "existing":
        (d / "out.txt").write_text("old contents\n")
        os.chmod(d / "out.txt", rng.choice([0o600, 0o640, 0o755]))
        case.output = "out.txt"
    elif out == "symlink":
        (d / "target.txt").write_text("old contents\n")
        os.symlink("target.txt", d / "out.txt")
        case.output = "out.txt"
    elif out == "fifo":
        os.mkfifo(d / "out.fifo")
        case.output = case.fifo_out = "out.fifo"
    elif out == "device" and IS_ROOT:
        os.mknod(d / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
        case.output = "null"
    elif out == "dir":
        (d / "outdir").mkdir()
        case.output = "outdir"
    elif out == "missing_dir":
        case.output = "missing/out.txt"
    elif out == "input":
        case.output = name
    elif out == "stdout":
        case.output = "/dev/stdout"
    elif out == "dash":
        case.output = "-"
    if case.output is not None:
        argv += ["-o", case.output]
    case.argv = argv + case.argv
    case.notes.append(f"input={inp} output={out}")
    return case


def snapshot(d: Path) -> dict[str, tuple]:
    """Type, permissions, link target and content hash of everything in ``d`` (FIFOs and devices unread)."""
    state = {}
    for root, dirs, files in os.walk(d, followlinks=False):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                state[os.path.relpath(p, d)] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                state[os.path.relpath(p, d)] = ("file", stat.S_IMODE(st.st_mode), digest)
            else:
                state[os.path.relpath(p, d)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_rdev)
    return state


def _feed(path: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)  # blocks until irc opens it
        os.write(fd, PROGRAM.encode())
        os.close(fd)
    except OSError:
        pass


def _drain(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            f.read()
    except OSError:
        pass


def _unblock(path: Path, write: bool) -> None:
    """Open the other end of a FIFO that irc never opened, so the helper thread ends."""
    try:
        fd = os.open(path, (os.O_WRONLY if write else os.O_RDONLY) | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


def run_case(seed: int, timeout: float, keep: Path | None = None) -> list[str]:
    """Run one case; the list of what went wrong (empty: fine)."""
    d = Path(tempfile.mkdtemp(prefix=f"irc-cli-fuzz-{seed}-"))
    try:
        case = build(seed, d)
        before = snapshot(d)
        threads = []
        if case.fifo_in:
            threads.append(threading.Thread(target=_feed, args=(d / case.fifo_in,), daemon=True))
        if case.fifo_out:
            threads.append(threading.Thread(target=_drain, args=(d / case.fifo_out,), daemon=True))
        for t in threads:
            t.start()
        stdin_data = None
        stdin = subprocess.DEVNULL
        if case.stdin == "program":
            stdin, stdin_data = subprocess.PIPE, PROGRAM.encode()
        elif case.stdin == "empty":
            stdin, stdin_data = subprocess.PIPE, b""
        elif case.stdin == "zero":
            stdin = open("/dev/zero", "rb")  # noqa: SIM115 - closed below
        cmd = [sys.executable, "-m", "irc.cli", *case.argv]
        problems = []
        try:
            p = subprocess.Popen(cmd, cwd=d, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 close_fds=True, pass_fds=(),
                                 preexec_fn=_close_stdin if case.stdin == "closed" else _limit_memory)
            try:
                _, err = p.communicate(stdin_data, timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                problems.append(f"no answer within {timeout} s")
                err = b""
        finally:
            if stdin not in (subprocess.DEVNULL, subprocess.PIPE):
                stdin.close()
        if case.fifo_in:
            _unblock(d / case.fifo_in, write=False)
        if case.fifo_out:
            _unblock(d / case.fifo_out, write=True)
        for t in threads:
            t.join(5)
        text = err.decode("utf-8", "replace")
        if not problems:
            if p.returncode < 0:
                problems.append(f"killed by signal {-p.returncode}")
            elif p.returncode not in (0, 1, 2):
                problems.append(f"exit status {p.returncode}")
        if "Traceback" in text:
            problems.append("a Python traceback on stderr")
        if "internal error" in text:
            problems.append("an internal error")
        after = snapshot(d)
        allowed = set()
        if case.output and not case.output.startswith("/") and case.output != "-":
            allowed.add(case.output)
            real = os.path.realpath(d / case.output)
            allowed.add(os.path.relpath(real, os.path.realpath(d)))
        for name in sorted(set(before) | set(after)):
            if "tmp" in name:
                problems.append(f"left a temporary file: {name}")
            elif before.get(name) != after.get(name):
                was, now = before.get(name), after.get(name)
                if name in allowed and (was is None or now is not None and was[0] == now[0]):
                    continue  # the requested output: new, or rewritten keeping its kind
                problems.append(f"changed {name}: {was} -> {now}")
        if problems:
            problems = [f"seed {seed}: {' '.join(case.argv)} ({'; '.join(case.notes)}, stdin={case.stdin}): {x}"
                        for x in problems]
            if text:
                problems.append("  stderr: " + text.strip().replace("\n", "\n  ")[:800])
            if keep is not None:
                dest = keep / f"case-{seed}"
                dest.mkdir(exist_ok=True)
                for n in os.listdir(d):
                    if os.path.isfile(d / n) and not os.path.islink(d / n):
                        shutil.copy(d / n, dest / n)
        return problems
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _limit_memory() -> None:
    """At most 4 GiB of address space: an unbounded read fails fast instead of hurting the machine."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    except (ImportError, ValueError, OSError):
        pass


def _close_stdin() -> None:
    _limit_memory()
    os.close(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m irc.testing.cli_fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="number of cases")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first case (cases use seed, seed+1, ...)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds each irc run may take")
    ap.add_argument("--keep", type=Path, help="copy the regular files of failing cases here")
    args = ap.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    failures = 0
    for seed in range(args.seed, args.seed + args.n):
        problems = run_case(seed, args.timeout, args.keep)
        if problems:
            failures += 1
            print("\n".join(problems), flush=True)
    print(f"cli_fuzz: {args.n} cases, {failures} failing")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
