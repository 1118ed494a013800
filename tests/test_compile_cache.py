"""The compile cache: in memory, on disk across processes, robust to damage.

Disk behaviour is checked in fresh processes (the in-memory cache would
otherwise answer first); ``exe.stats["cache"]`` says where machine code came
from ('memory' or 'disk'; absent when LLVM ran).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import irc

PROGRAM = textwrap.dedent("""\
    func.func @poly(%x: i64) -> i64 {
      %c3 = arith.constant 3 : i64
      %c7 = arith.constant 7 : i64
      %a = arith.muli %x, %x : i64
      %b = arith.muli %a, %c3 : i64
      %c = arith.addi %b, %c7 : i64
      func.return %c : i64
    }
    """)

CHILD = textwrap.dedent("""\
    import json, sys, irc
    module = irc.parse(sys.argv[1], filename="prog.ir")
    kwargs = {"cache_dir": sys.argv[2]} if sys.argv[2] != "-" else {}
    exe = irc.compile(module, **kwargs)
    print(json.dumps({"cache": exe.stats.get("cache"), "result": exe.poly(5)}))
    """)


def child(cache_dir: str | None, text: str = PROGRAM, env: dict | None = None, wait: bool = True):
    """Compile ``text`` in a new process; return {'cache': where from, 'result': poly(5)}."""
    cmd = [sys.executable, "-c", CHILD, text, cache_dir or "-"]
    full_env = {**os.environ, **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*/*.o"))


def test_second_process_loads_from_disk(tmp_path):
    first = child(str(tmp_path))
    assert first == {"cache": None, "result": 82}
    assert len(entries(tmp_path)) == 1
    second = child(str(tmp_path))
    assert second == {"cache": "disk", "result": 82}


def test_same_process_hits_memory(tmp_path):
    text = PROGRAM.replace("%c7 = arith.constant 7", "%c7 = arith.constant 8")
    a = irc.compile(irc.parse(text), cache_dir=str(tmp_path))
    b = irc.compile(irc.parse(text), cache_dir=str(tmp_path))
    assert "cache" not in a.stats
    assert b.stats["cache"] == "memory"
    assert a.poly(5) == b.poly(5) == 83


def test_different_options_are_different_entries(tmp_path):
    child(str(tmp_path))
    child(str(tmp_path), text=PROGRAM + "\n// a comment changes the source, not the program\n")
    module = irc.parse(PROGRAM.replace("arith.constant 7", "arith.constant 9"))
    irc.compile(module, cache_dir=str(tmp_path), opt_level=0)
    irc.compile(module, cache_dir=str(tmp_path), opt_level=3)
    assert len(entries(tmp_path)) >= 3


def test_truncated_entry_is_rebuilt(tmp_path):
    child(str(tmp_path))
    (entry,) = entries(tmp_path)
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])
    rebuilt = child(str(tmp_path))
    assert rebuilt == {"cache": None, "result": 82}  # detected, compiled again
    assert entry.read_bytes() == data  # and rewritten whole
    assert child(str(tmp_path))["cache"] == "disk"


def test_corrupt_entry_is_rebuilt(tmp_path):
    child(str(tmp_path))
    (entry,) = entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[-20] ^= 0xFF  # inside the machine code: only the checksum can tell
    entry.write_bytes(bytes(data))
    assert child(str(tmp_path)) == {"cache": None, "result": 82}
    assert child(str(tmp_path))["cache"] == "disk"


def test_garbage_entry_is_rebuilt(tmp_path):
    child(str(tmp_path))
    (entry,) = entries(tmp_path)
    entry.write_bytes(b"not a cache entry at all")
    assert child(str(tmp_path)) == {"cache": None, "result": 82}


def test_irc_cache_dir_is_honoured(tmp_path):
    where = tmp_path / "from-env"
    child(None, env={"IRC_CACHE_DIR": str(where)})
    assert len(entries(where)) == 1
    assert child(None, env={"IRC_CACHE_DIR": str(where)})["cache"] == "disk"


def test_explicit_cache_dir_wins_over_env(tmp_path):
    env_dir, arg_dir = tmp_path / "env", tmp_path / "arg"
    child(str(arg_dir), env={"IRC_CACHE_DIR": str(env_dir)})
    assert len(entries(arg_dir)) == 1
    assert not env_dir.exists() or not entries(env_dir)


def test_cache_false_bypasses_memory_and_disk(tmp_path):
    text = PROGRAM.replace("%c3 = arith.constant 3", "%c3 = arith.constant 4")
    module = irc.parse(text)
    first = irc.compile(module, cache=False, cache_dir=str(tmp_path))
    assert first.poly(5) == 107
    assert entries(tmp_path) == []
    again = irc.compile(module, cache=False, cache_dir=str(tmp_path))
    assert "cache" not in again.stats
    assert again.poly(5) == 107


def test_unwritable_cache_dir_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    assert child(str(blocker / "cache")) == {"cache": None, "result": 82}


def test_two_processes_compiling_at_once(tmp_path):
    text = PROGRAM.replace("%c7 = arith.constant 7", "%c7 = arith.constant 10")
    procs = [child(str(tmp_path), text=text, wait=False) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert json.loads(out)["result"] == 85
    assert len(entries(tmp_path)) == 1
    assert not list(tmp_path.glob("*/.tmp-*"))  # no temporary files left behind
    assert child(str(tmp_path), text=text)["cache"] == "disk"


def test_memory_cache_is_bounded(tmp_path):
    """A process compiling many different modules keeps only the most recent in memory."""
    from irc.runtime import executable

    for k in range(executable.MEMORY_CACHE_SIZE + 5):
        module = irc.parse(f"func.func @f(%a: i64) -> i64 {{\n  %c = arith.constant {k} : i64\n"
                           f"  %r = arith.addi %a, %c : i64\n  func.return %r : i64\n}}\n")
        assert irc.compile(module, cache_dir=str(tmp_path)).f(1) == k + 1
    assert len(executable._memory_cache) <= executable.MEMORY_CACHE_SIZE
