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

import pytest

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


# -- trust: the cache directory may come from someone else (issue 11, item 8) ----------------------


def test_entry_with_a_recomputed_checksum_is_not_trusted(tmp_path):
    """Whoever can write the directory can recompute a checksum; only this user's key makes a MAC."""
    import hashlib

    from irc.runtime import cache as cache_mod

    from irc import diskcache

    child(str(tmp_path))
    (entry,) = entries(tmp_path)
    data = entry.read_bytes()
    head = len(cache_mod._MAGIC)
    payload = bytearray(data[head + 40:])
    payload[-20] ^= 0xFF
    for mac in (hashlib.sha256(payload).digest(), diskcache.mac(b"k" * 32, cache_mod._MAGIC,
                                                                  entry.stem.encode(), bytes(payload))):
        entry.write_bytes(data[:head] + mac + data[head + 32:head + 40] + bytes(payload))
        assert child(str(tmp_path)) == {"cache": None, "result": 82}
        assert child(str(tmp_path)) == {"cache": "disk", "result": 82}
        data = entry.read_bytes()


def test_special_files_in_place_of_an_entry_are_replaced(tmp_path):
    """A FIFO (that would block a plain open), a directory, a symlink out of the cache: removed, rebuilt."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    cache = tmp_path / "cache"
    child(str(cache))
    (entry,) = entries(cache)
    for make in (os.mkfifo, os.mkdir, lambda p: (os.mkdir(p), (Path(p) / "x").write_text("x")),
                 lambda p: os.symlink(outside, p)):
        entry.unlink() if not entry.is_dir() or entry.is_symlink() else __import__("shutil").rmtree(entry)
        make(str(entry))
        assert child(str(cache)) == {"cache": None, "result": 82}
        assert entry.is_file() and not entry.is_symlink()
        assert child(str(cache)) == {"cache": "disk", "result": 82}
    assert outside.read_bytes() == b"keep"


def test_a_symlinked_subdirectory_is_not_written_through(tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    child(str(cache))
    (entry,) = entries(cache)
    __import__("shutil").rmtree(entry.parent)
    entry.parent.symlink_to(outside, target_is_directory=True)
    assert child(str(cache)) == {"cache": None, "result": 82}
    assert list(outside.iterdir()) == []
    assert child(str(cache)) == {"cache": "disk", "result": 82}


def test_an_entry_that_does_not_link_is_rebuilt_not_fatal(tmp_path):
    """A MAC-valid entry (this user's key) whose object lacks the function: rebuilt, not an IRError."""
    from irc.runtime import cache as cache_mod

    child(str(tmp_path))
    (entry,) = entries(tmp_path)
    other = irc.compile(irc.parse("func.func @other() {\n  func.return\n}\n"), cache_dir=str(tmp_path / "o"))
    assert other.functions == ["other"]
    (other_entry,) = entries(tmp_path / "o")
    cache_mod.store(entry.stem, cache_mod.load(other_entry.stem, str(tmp_path / "o")), str(tmp_path))
    assert child(str(tmp_path)) == {"cache": None, "result": 82}
    assert child(str(tmp_path)) == {"cache": "disk", "result": 82}


def test_no_usable_key_means_no_disk_cache(tmp_path):
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o644)  # others could read it, so others could sign entries
    env = {"IRC_CACHE_KEY_FILE": str(key)}
    assert child(str(tmp_path / "c"), env=env) == {"cache": None, "result": 82}
    assert child(str(tmp_path / "c"), env=env) == {"cache": None, "result": 82}
    assert not entries(tmp_path / "c")
    made = tmp_path / "fresh" / "key"
    assert child(str(tmp_path / "d"), env={"IRC_CACHE_KEY_FILE": str(made)})["result"] == 82
    assert made.stat().st_mode & 0o777 == 0o600 and len(made.read_bytes()) == 32
    assert child(str(tmp_path / "d"), env={"IRC_CACHE_KEY_FILE": str(made)})["cache"] == "disk"


def test_failed_writes_leave_no_temporary_file(tmp_path):
    from irc import diskcache

    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "entry.o").mkdir()
    (tmp_path / "ab" / "entry.o" / "inner").write_text("a directory where the entry goes")
    assert diskcache.write(tmp_path, "ab", "entry.o", data=b"x") is False
    assert [p.name for p in (tmp_path / "ab").iterdir()] == ["entry.o"]


# -- the parser's tables -------------------------------------------------------------------------------

PARSE_CHILD = "import irc, sys; print(irc.parse(sys.argv[1]).functions[0].sym_name)"


def _parse_in_child(cache: Path, timeout: float = 120):
    proc = subprocess.run([sys.executable, "-c", PARSE_CHILD, "func.func @f() {\n  func.return\n}\n"],
                          capture_output=True, text=True, env={**os.environ, "IRC_CACHE_DIR": str(cache)},
                          timeout=timeout)
    assert proc.returncode == 0 and proc.stdout == "f\n" and "Traceback" not in proc.stderr, proc.stderr
    return sorted(cache.glob("grammar-*"))


def test_grammar_cache_is_json_and_authenticated(tmp_path):
    """A pickle planted where lark kept its cache runs nothing; a tampered table is rebuilt."""
    marker = tmp_path / "pwned"
    (grammar,) = _parse_in_child(tmp_path)
    assert grammar.suffix == ".json"
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    for name in (grammar.name, grammar.name.replace(".json", ".lark-cache")):
        (tmp_path / name).write_bytes(payload)
        _parse_in_child(tmp_path)
    assert not marker.exists()
    data = grammar.read_bytes()
    grammar.write_bytes(data.replace(b'"format":1', b'"format":2'))  # the MAC no longer matches
    _parse_in_child(tmp_path)
    assert grammar.read_bytes() == data or grammar.read_bytes().startswith(b"IRCGRAMMAR1\n")
    grammar.unlink()
    os.mkfifo(grammar)
    _parse_in_child(tmp_path, timeout=60)  # a FIFO does not block the parser
    assert grammar.is_file()


# -- tensor functions: specialisations cached by their input (runtime/specialization_cache.py) -----------

TENSOR_PROGRAM = textwrap.dedent("""\
    func.func @mlp(%x: tensor<?x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<?x16xf32> {
      %z = graph.matmul %x, %w : (tensor<?x8xf32>, tensor<8x16xf32>) -> tensor<?x16xf32>
      %c0 = arith.constant 0 : index
      %n = tensor.dim %z, %c0 : tensor<?x16xf32>
      %bb = graph.broadcast %b, %n : tensor<16xf32> to tensor<?x16xf32>
      %s = arith.addf %z, %bb : tensor<?x16xf32>
      %e = math.tanh %s : tensor<?x16xf32>
      func.return %e : tensor<?x16xf32>
    }
    """)

TENSOR_CHILD = textwrap.dedent("""\
    import json, sys, numpy as np, irc
    exe = irc.compile(irc.parse(sys.argv[1], filename="prog.ir"), cache_dir=sys.argv[2])
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 8), (8, 16), (16,)))
    y = exe.mlp(x, w, b)
    spec = next(iter(exe.mlp._specializations.values()))
    print(json.dumps({"cache": spec.executable.stats.get("cache"), "y": y.tolist(),
                      "ref": np.tanh(x.astype(np.float64) @ w + b).tolist()}))
    """)


def tensor_child(cache_dir) -> dict:
    proc = subprocess.run([sys.executable, "-c", TENSOR_CHILD, TENSOR_PROGRAM, str(cache_dir)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_tensor_specialisation_is_loaded_whole_in_a_new_process(tmp_path):
    import numpy as np

    first = tensor_child(tmp_path)
    assert first["cache"] != "disk (specialisation)"
    np.testing.assert_allclose(first["y"], first["ref"], rtol=1e-5, atol=1e-6)
    second = tensor_child(tmp_path)
    assert second["cache"] == "disk (specialisation)"  # no tensor pipeline, no LLVM
    assert second["y"] == first["y"]
    specs = sorted(tmp_path.glob("*/*.spec"))
    assert len(specs) == 1
    for damage in (lambda b: b[:len(b) // 2], lambda b: b[:-1] + bytes([b[-1] ^ 1]), lambda b: b"x" * 100):
        spec = sorted(tmp_path.glob("*/*.spec"))[0]
        spec.write_bytes(damage(spec.read_bytes()))
        again = tensor_child(tmp_path)  # a damaged entry is not trusted: compiled again, same answer
        assert again["y"] == first["y"] and again["cache"] != "disk (specialisation)"


def test_a_specialisation_record_is_checked_field_by_field(tmp_path):
    from irc.runtime import cache as object_cache
    from irc.runtime import specialization_cache as sc

    good = {"functions": {"f": {"inputs": [{"memref": [4, None], "element": "f32"}, "index"], "results": []}},
            "out_shapes": [[4]], "arena_bytes": None, "in_place": [[0, 1]],
            "declared": ["irc_gemm_f32_8x32_96x512x8192", "irc.parallel_for"]}
    sc.store("ab" * 32, good, object_cache.Entry(b"\x7fELF", [("m", (1, 2))]), str(tmp_path))
    record, entry = sc.load("ab" * 32, str(tmp_path))
    assert record == good and entry.faults == [("m", (1, 2))]
    decl = sc.declarations(record)["f"]
    assert str(decl.function_type) == "(memref<4x?xf32>, index) -> ()"
    for field, bad in [("out_shapes", [["4"]]), ("in_place", [[0]]),
                       ("declared", [3]), ("arena_bytes", "big"), ("functions", [])]:
        sc.store("cd" * 32, {**good, field: bad}, object_cache.Entry(b"", []), str(tmp_path))
        assert sc.load("cd" * 32, str(tmp_path)) is None  # dropped, never used
    for bad_type in ({"memref": [-1], "element": "f32"}, "f128", {"memref": [2], "element": {"memref": [1]}}, 7):
        with pytest.raises(ValueError):
            sc.declarations({"functions": {"f": {"inputs": [bad_type], "results": []}}})


THREADED_CHILD = textwrap.dedent("""\
    import json, sys, numpy as np, irc
    text = '''
    func.func @f(%x: tensor<256x512xf32>, %w: tensor<512x256xf32>, %b: tensor<256xf32>)
        -> (tensor<256x256xf32>, tensor<256x512xf32>) {
      %z = graph.matmul %x, %w : (tensor<256x512xf32>, tensor<512x256xf32>) -> tensor<256x256xf32>
      %bb = graph.broadcast %b : tensor<256xf32> to tensor<256x256xf32>
      %s = arith.addf %z, %bb : tensor<256x256xf32>
      %e = math.tanh %s : tensor<256x256xf32>
      %h = math.tanh %x : tensor<256x512xf32>
      func.return %e, %h : tensor<256x256xf32>, tensor<256x512xf32>
    }'''
    exe = irc.compile(irc.parse(text), cache_dir=sys.argv[1], threads=2)
    rng = np.random.default_rng(4)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((256, 512), (512, 256), (256,)))
    y = sum(np.abs(r).sum() for r in exe.f(x, w, b))
    spec = next(iter(exe.f._specializations.values()))
    from irc.runtime import specialization_cache as sc
    from irc.runtime.cpu import pool
    record, _ = sc.load(exe.f._disk_key(((256, 512), (512, 256), (256,)), ((), False)), sys.argv[1])
    print(json.dumps({"cache": spec.executable.stats.get("cache"), "y": float(y),
                      "threaded": pool.pool().workers == 1 and "irc.parallel_for" in record["declared"]}))
    """)


def test_a_specialisation_with_parallel_loops_loads_from_disk(tmp_path):
    """Code whose loops run on the thread pool links to it again from the disk entry (the record
    names ``irc.parallel_for``), starts its worker, and gives the same numbers."""
    def child():
        proc = subprocess.run([sys.executable, "-c", THREADED_CHILD, str(tmp_path)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    first, second = child(), child()
    assert first["cache"] != "disk (specialisation)" and second["cache"] == "disk (specialisation)"
    assert first["threaded"] and second["threaded"]
    assert second["y"] == first["y"]
