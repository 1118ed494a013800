"""The cache fuzzer: damage irc's cache files every way we can think of; the next run must not care.

    python -m irc.testing.cache_fuzz --n 200 --seed 1

Each case starts from a warm cache (the parser's tables and one compiled entry),
damages one file -- flipped bits, truncation, garbage, the payload changed with
the MAC recomputed under another key (an attacker without this user's key),
structural damage re-signed with the real key (irc's own bug, or a future
format), an object that calls ``getpid``, a FIFO, a directory, a symlink to a
file outside the cache, the entry's subdirectory replaced by a symlink, a huge
sparse file, an untrusted key file -- and runs irc twice in fresh processes.
Both runs must print the right answer with exit status 0 and no traceback
within the time limit (a FIFO that blocks would hang); the second must load
from disk again unless the key was made untrustworthy (nothing is sticky); no
``.tmp`` file may be left behind and nothing outside the cache may change.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

PROGRAM = textwrap.dedent("""\
    func.func @poly(%x: f64) -> f64 {
      %c3 = arith.constant 3.0 : f64
      %a = arith.mulf %x, %x : f64
      %b = arith.mulf %a, %c3 : f64
      %e = math.erf %x : f64
      %c = arith.addf %b, %e : f64
      func.return %c : f64
    }
    """)

CHILD = textwrap.dedent("""\
    import json, sys, irc
    module = irc.parse(sys.argv[1], filename="prog.ir")
    exe = irc.compile(module)
    print(json.dumps({"cache": exe.stats.get("cache"), "result": exe.poly(1.5)}))
    """)

TIMEOUT_S = 120


@dataclass
class Finding:
    case: str
    problem: str


class Sandbox:
    """A cache directory, a key file and a file outside both that nothing may touch."""

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "cache"
        self.key = root / "config" / "cache-key"
        self.outside = root / "outside"
        self.outside.mkdir()
        self.secret_file = self.outside / "precious"
        self.secret_file.write_bytes(b"nothing may write here\n")
        self.env = {**os.environ, "IRC_CACHE_DIR": str(self.cache), "IRC_CACHE_KEY_FILE": str(self.key)}
        self.expected: float | None = None

    def run(self) -> tuple[dict | None, str]:
        """One fresh irc process: (its JSON answer or None, what went wrong)."""
        try:
            proc = subprocess.run([sys.executable, "-c", CHILD, PROGRAM], capture_output=True, text=True,
                                  env=self.env, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"hung for {TIMEOUT_S} s"
        if proc.returncode != 0:
            return None, f"exit status {proc.returncode}: {proc.stderr.strip()[-500:]}"
        if "Traceback" in proc.stderr:
            return None, f"traceback: {proc.stderr.strip()[-500:]}"
        try:
            return json.loads(proc.stdout), ""
        except ValueError:
            return None, f"bad output: {proc.stdout[-200:]!r}"

    def grammar_file(self) -> Path | None:
        found = sorted(self.cache.glob("grammar-*.json"))
        return found[0] if found else None

    def entry_file(self) -> Path | None:
        found = sorted(self.cache.glob("*/*.o"))
        return found[0] if found else None

    def leftovers(self) -> list[str]:
        return [str(p) for p in self.cache.rglob(".tmp*")] + [str(p) for p in self.key.parent.glob(".cache-key.*")]


# -- mutations ------------------------------------------------------------------------------------


def _flip(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def _sign(sandbox: Sandbox, path: Path, payload_of, key: bytes | None = None) -> None:
    """Rewrite a cache file with a MAC computed over a new payload (with the real key unless ``key``)."""
    from irc import diskcache
    from irc.parser import _GRAMMAR_CACHE_MAGIC
    from irc.runtime.cache import _MAGIC

    data = path.read_bytes()
    secret = key or sandbox.key.read_bytes()
    magic = _MAGIC if path.suffix == ".o" else _GRAMMAR_CACHE_MAGIC
    payload = data[len(magic) + 32:]
    if path.suffix == ".o":  # the fault list's length, the fault list, the object
        header_len = int.from_bytes(payload[:8], "little")
        header, obj = payload_of(payload[8:8 + header_len], payload[8 + header_len:])
        payload = len(header).to_bytes(8, "little") + header + obj
    else:
        payload, _ = payload_of(payload, None)
    path.write_bytes(magic + diskcache.mac(secret, magic, path.name.encode(), payload) + payload)


def _foreign_object() -> bytes:
    """A valid object whose entry points call getpid (not allowed to compiled code)."""
    from irc.runtime.cpu import engine, symbols

    text = (f'declare i32 @getpid()\ndefine i32 @"{symbols.jit_symbol("poly")}"(double %x, ptr %out) {{\n'
            "  %p = call i32 @getpid()\n  %f = sitofp i32 %p to double\n  store double %f, ptr %out\n"
            "  ret i32 0\n}\n")
    tm = engine.target_machine(2)
    return tm.emit_object(engine.optimize(text, 2, tm))


def _json_garbage(rng: random.Random) -> bytes:
    return rng.choice([b"[]", b"{}", b'{"faults": 7}', b'{"faults": [[1, 2]]}', b'{"faults": [["m", [1]]]}',
                       b'{"faults": [["m", ["a", 2]]]}', b"[" * 100000, b"\xff\xfe", b"null",
                       b'{"identity": {}, "data": {}, "memo": {}}', b'{"identity": 1}'])


def mutate(sandbox: Sandbox, rng: random.Random) -> str:
    """Damage one cache file (or the key); return a description of what was done."""
    kind = rng.choice(["grammar", "entry", "entry", "subdir", "key"])
    if kind == "key":
        how = rng.choice(["chmod", "truncate", "symlink"])
        if how == "chmod":
            sandbox.key.chmod(0o644)
        elif how == "truncate":
            sandbox.key.write_bytes(sandbox.key.read_bytes()[:7])
        else:
            sandbox.key.unlink()
            sandbox.key.symlink_to(sandbox.secret_file)
        return f"key:{how}"
    if kind == "subdir":
        entry = sandbox.entry_file()
        if entry is None:
            return "subdir:none"
        shutil.rmtree(entry.parent)
        entry.parent.symlink_to(sandbox.outside, target_is_directory=True)
        return "subdir:symlink-outside"
    path = sandbox.grammar_file() if kind == "grammar" else sandbox.entry_file()
    if path is None:
        return f"{kind}:none"
    data = path.read_bytes()
    how = rng.choice(["flip", "truncate", "extend", "garbage", "empty", "attacker-mac", "signed-json",
                      "signed-code", "fifo", "dir", "dir-full", "symlink-out", "symlink-dangling", "sparse"])
    if how == "flip":
        path.write_bytes(_flip(data, rng))
    elif how == "truncate":
        path.write_bytes(data[:rng.randrange(len(data) + 1)])
    elif how == "extend":
        path.write_bytes(data + rng.randbytes(rng.randint(1, 64)))
    elif how == "garbage":
        path.write_bytes(rng.randbytes(rng.randint(0, 4096)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "attacker-mac":  # changed, and signed under a key that is not this user's
        _sign(sandbox, path, lambda h, o: (_flip(h, rng), o), key=rng.randbytes(32))
    elif how == "signed-json":  # well signed, badly formed: irc's own bug, or another format
        _sign(sandbox, path, lambda h, o: (_json_garbage(rng), o))
    elif how == "signed-code":
        if kind == "grammar":
            _sign(sandbox, path, lambda h, o: (h.replace(b'"format":1', b'"format":99'), o))
        else:
            choice = rng.choice(["getpid", "not-elf", "elf-header", "empty"])
            obj = {"getpid": _foreign_object(), "not-elf": rng.randbytes(200),
                   "elf-header": b"\x7fELF\x02\x01\x01" + bytes(57), "empty": b""}[choice]
            _sign(sandbox, path, lambda h, o: (h, obj))
            how += f":{choice}"
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif how in ("dir", "dir-full"):
        path.unlink()
        path.mkdir()
        if how == "dir-full":
            (path / "inner").write_bytes(b"x")
    elif how == "symlink-out":
        path.unlink()
        path.symlink_to(sandbox.secret_file)
    elif how == "symlink-dangling":
        path.unlink()
        path.symlink_to(sandbox.outside / "nothing-here")
    elif how == "sparse":
        with open(path, "r+b") as f:
            f.truncate((1 << 30) + 1)
    return f"{kind}:{how}"


# -- the campaign ---------------------------------------------------------------------------------


def run_case(seed: int, base: Path) -> tuple[str, list[Finding]]:
    """Warm a fresh cache, damage it (the damage chosen by ``seed``), run irc twice; (damage, findings)."""
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix=f"case{seed}-", dir=base))
    try:
        sandbox = Sandbox(root)
        first, problem = sandbox.run()
        if first is None:
            return "warm-up", [Finding(f"seed {seed}: warm-up", problem)]
        expected = first["result"]
        case = mutate(sandbox, rng)
        name = f"seed {seed}: {case}"
        findings = []
        untrusted_key = case.startswith("key:")
        for attempt in ("rebuild", "reload"):
            out, problem = sandbox.run()
            if out is None:
                findings.append(Finding(name, f"{attempt}: {problem}"))
                break
            if out["result"] != expected:
                findings.append(Finding(name, f"{attempt}: result {out['result']!r}, expected {expected!r}"))
            if attempt == "reload" and not untrusted_key and out["cache"] != "disk":
                findings.append(Finding(name, "sticky: the second run after the damage did not load from disk"))
        if sandbox.secret_file.read_bytes() != b"nothing may write here\n" or \
                sorted(p.name for p in sandbox.outside.iterdir()) != ["precious"]:
            findings.append(Finding(name, "a file outside the cache directory changed"))
        if sandbox.leftovers():
            findings.append(Finding(name, f"temporary files left behind: {sandbox.leftovers()}"))
        return case, findings
    finally:
        shutil.rmtree(root, ignore_errors=True)


def campaign(n: int, seed: int, verbose: bool = False) -> list[Finding]:
    findings: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="irc-cache-fuzz-") as base:
        for k in range(n):
            case, found = run_case(seed + k, Path(base))
            if verbose:
                print(f"seed {seed + k}: {case}: {'ok' if not found else found}", flush=True)
            findings.extend(found)
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m irc.testing.cache_fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=50, help="how many damaged caches to try")
    parser.add_argument("--seed", type=int, default=0, help="the first case's seed")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    findings = campaign(args.n, args.seed, args.verbose)
    for f in findings:
        print(f"FINDING {f.case}: {f.problem}")
    print(f"{args.n} damaged caches, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
