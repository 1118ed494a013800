"""Compiled code reaches nothing outside the program unless allowed; user names never shadow the runtime's.

A declared function is a diagnostic at the declaration unless ``extern=`` (``--extern``)
names it; the JIT links no process symbols, only libm/libc/compiler-runtime symbols
irc's generated code needs (runtime/cpu/symbols.py), so machine code that names
anything else (from a cache, say) fails to link.  User functions called like libm or
libc symbols (``@erf``, ``@memset``) compile and compute what the interpreter computes.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from irc.runtime import aot, executable
from irc.runtime.cpu import engine, symbols

import irc
from irc.diagnostics import IRError

FORBIDDEN = {
    "system": "memref<?xi8>", "abort": "", "exit": "i32", "malloc": "i64", "free": "memref<?xi8>",
    "dlopen": "memref<?xi8>, i32", "mprotect": "memref<?xi8>, i64, i32", "execve": "memref<?xi8>",
    "memset": "memref<?xi8>, i32, i64", "getpid": "",
}


def _declaring(name: str, params: str) -> str:
    return textwrap.dedent(f"""\
        func.func @main() -> i32 {{
          %c = arith.constant 0 : i32
          func.return %c : i32
        }}
        func.func private @{name}({params})
        """)


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_declaring_a_libc_function_is_a_diagnostic_at_the_declaration(name):
    text = _declaring(name, FORBIDDEN[name])
    for compile_it in (lambda m: irc.compile(m, cache=False), lambda m: aot.emit(m, "obj")):
        with pytest.raises(IRError) as info:
            compile_it(irc.parse(text, filename="evil.ir"))
        assert (info.value.location.line, info.value.location.column) == (5, 1)
        assert f"@{name}" in info.value.message


def test_the_cli_refuses_system_with_a_location(tmp_path):
    path = tmp_path / "evil.ir"
    marker = tmp_path / "marker"
    path.write_text(textwrap.dedent(f"""\
        func.func private @system(memref<?xi8>)
        func.func @main() -> i32 {{
          %n = arith.constant {len(str(marker)) + 7} : index
          %s = memref.alloc(%n) : memref<?xi8>
          %c = arith.constant 0 : i32
          func.call @system(%s) : (memref<?xi8>) -> ()
          func.return %c : i32
        }}
        """))
    for command in (["run", str(path), "--no-cache"], ["compile", str(path), "-o", str(tmp_path / "x.o")]):
        proc = subprocess.run([sys.executable, "-m", "irc.cli", *command], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith(f"{path}:1:1: error: '@system' is declared but not defined"), proc.stderr
        assert "Traceback" not in proc.stderr


def test_extern_allows_a_declared_function(tmp_path):
    """The dict form binds a ctypes callback (irc's calling convention: status, then results by pointer)."""
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64))

    @proto
    def triple(x, out):
        out[0] = 3 * x
        return 0

    text = textwrap.dedent("""\
        func.func private @triple(i64) -> i64
        func.func @f(%a: i64) -> i64 {
          %r = func.call @triple(%a) : (i64) -> i64
          %one = arith.constant 1 : i64
          %s = arith.addi %r, %one : i64
          func.return %s : i64
        }
        """)
    module = irc.parse(text, filename="p.ir")
    with pytest.raises(IRError, match="extern="):
        irc.compile(module, cache=False)
    assert irc.compile(module, cache=False, extern={"triple": triple}).f(14) == 43
    # A name list looks the symbol up in the process: libc's labs(0) is 0, a success status.
    labs = irc.parse("func.func private @labs(i64)\nfunc.func @g(%a: i64) {\n"
                     "  func.call @labs(%a) : (i64) -> ()\n  func.return\n}\n")
    irc.compile(labs, cache=False, extern=["labs"]).g(0)
    with pytest.raises(IRError) as info:
        irc.compile(module, cache=False, extern=["triple"])  # not in the process
    assert info.value.location.line == 1 and "not in this process" in info.value.message
    assert aot.emit(module, "obj", extern=["triple"])[:4] == b"\x7fELF"


@pytest.mark.parametrize("bad", ["system;rm", "a.b", "", "erf", "memset", 42])
def test_extern_names_are_checked(bad):
    with pytest.raises((ValueError, TypeError)):
        irc.compile(irc.parse("func.func @f() {\n  func.return\n}\n"), extern=[bad])
    with pytest.raises(TypeError):
        irc.compile(irc.parse("func.func @f() {\n  func.return\n}\n"), extern="system")


def test_the_jit_links_no_process_symbol():
    """Machine code that names a libc function irc does not allow fails to link (no add_current_process)."""
    ir_text = textwrap.dedent("""\
        declare i32 @getpid()
        define i32 @probe() {
          %p = call i32 @getpid()
          ret i32 %p
        }
        """)
    tm = engine.target_machine(2)
    obj = tm.emit_object(engine.optimize(ir_text, 2, tm))
    with pytest.raises(IRError, match="cannot link"):
        engine.load(["probe"], object_code=obj)
    assert symbols.process_address("getpid")  # it exists: only the linking refuses it
    assert "getpid" not in symbols.runtime_imports()


def test_a_cached_object_calling_libc_is_rebuilt_not_run(tmp_path):
    """A MAC-valid cache entry (as if this user's irc wrote it) whose code calls getpid: it fails to link,
    is discarded, and the program's own code is compiled and run instead."""
    from irc.runtime import cache as cache_mod

    text = "func.func @main() -> i32 {\n  %c = arith.constant 42 : i32\n  func.return %c : i32\n}\n"
    assert irc.compile(irc.parse(text), cache_dir=str(tmp_path)).main() == 42
    (entry,) = tmp_path.glob("*/*.o")
    ir_text = textwrap.dedent(f"""\
        declare i32 @getpid()
        define i32 @"{symbols.jit_symbol('main')}"(ptr %out) {{
          %p = call i32 @getpid()
          store i32 %p, ptr %out
          ret i32 0
        }}
        define i32 @"irc.fast.main"() {{
          %p = call i32 @getpid()
          ret i32 %p
        }}
        """)
    tm = engine.target_machine(2)
    evil = tm.emit_object(engine.optimize(ir_text, 2, tm))
    cache_mod.store(entry.stem, cache_mod.Entry(evil, []), str(tmp_path))
    assert cache_mod.load(entry.stem, str(tmp_path)).object_code == evil
    executable._memory_cache.clear()
    exe = irc.compile(irc.parse(text), cache_dir=str(tmp_path))
    assert exe.main() == 42
    assert "cache" not in exe.stats  # rebuilt
    assert cache_mod.load(entry.stem, str(tmp_path)).object_code != evil


# -- user symbols never collide with runtime symbols ------------------------------------------------

SHADOWS = ["erf", "expm1", "log1p", "malloc", "free", "memset", "sinf", "exp", "sin", "fmod", "memcpy"]


def _shadowing_program(name: str) -> str:
    return textwrap.dedent(f"""\
        func.func @{name}(%x: f64) -> f64 {{
          %c = arith.constant 2.5 : f64
          %y = arith.mulf %x, %c : f64
          func.return %y : f64
        }}
        func.func @main(%x: f64, %n: index) -> f64 {{
          %a = func.call @{name}(%x) : (f64) -> f64
          %e = math.erf %x : f64
          %m = math.expm1 %x : f64
          %l = math.log1p %x : f64
          %s = math.sin %x : f64
          %p = math.exp %x : f64
          %r = arith.remf %p, %x : f64
          %buf = memref.alloc(%n) : memref<?xf64>
          %i = arith.constant 0 : index
          memref.store %a, %buf[%i] : memref<?xf64>
          %b = memref.load %buf[%i] : memref<?xf64>
          memref.dealloc %buf : memref<?xf64>
          %t0 = arith.addf %b, %e : f64
          %t1 = arith.addf %t0, %m : f64
          %t2 = arith.addf %t1, %l : f64
          %t3 = arith.addf %t2, %s : f64
          %t4 = arith.addf %t3, %p : f64
          %t5 = arith.addf %t4, %r : f64
          func.return %t5 : f64
        }}
        """)


SHADOW_CHILD = """
import json, sys, irc
from irc.runtime import aot
sys.path.insert(0, sys.argv[1])
from test_foreign_code import SHADOWS, _shadowing_program
out = {}
for name in SHADOWS:
    module = irc.parse(_shadowing_program(name), filename="shadow.ir")
    expected = irc.interpret(module, "main", 0.75, 4)
    got = []
    for opt in (0, 3):
        exe = irc.compile(module, cache=False, opt_level=opt)
        got.append([exe.main(0.75, 4) == expected, exe[name](2.0)])
    try:
        aot.emit(module, "obj")
        refused = None
    except irc.IRError as e:
        refused = [e.location.line, e.message]
    out[name] = [got, refused]
print(json.dumps(out))
"""


def test_user_functions_named_like_runtime_symbols():
    """In a child process: shadowing malloc used to crash the JIT outright."""
    proc = subprocess.run([sys.executable, "-c", SHADOW_CHILD, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout)
    for name in SHADOWS:
        got, refused = results[name]
        assert got == [[True, 5.0], [True, 5.0]], name
        assert refused is not None and refused[0] == 1 and f"'@{name}'" in refused[1]  # an object keeps C names


def test_user_functions_named_like_irc_internal_symbols():
    """'@f.body' and '@f.fast' next to '@f' (and '@irc.fn.f') are distinct functions."""
    text = "\n".join(
        f'func.func @"{n}"(%x: i64) -> i64 {{\n  %c = arith.constant {k} : i64\n'
        f'  %y = arith.addi %x, %c : i64\n  func.return %y : i64\n}}'
        for k, n in enumerate(["f", "f.body", "f.fast", "irc.fn.f", "irc.fast.f", "llvm.memset"]))
    module = irc.parse(text)
    exe = irc.compile(module, cache=False)
    assert [exe[n](10) for n in ("f", "f.body", "f.fast", "irc.fn.f", "irc.fast.f", "llvm.memset")] == \
        [10, 11, 12, 13, 14, 15]


def test_tensor_functions_keep_working_without_process_symbols():
    exe = irc.compile(irc.parse(textwrap.dedent("""\
        func.func @g(%a: tensor<?xf32>) -> tensor<?xf32> {
          %e = math.exp %a : tensor<?xf32>
          %t = math.tanh %e : tensor<?xf32>
          func.return %t : tensor<?xf32>
        }
        """)), cache=False)
    x = np.linspace(-2, 2, 100, dtype=np.float32)
    np.testing.assert_allclose(exe.g(x), np.tanh(np.exp(x)), rtol=1e-5)


def test_i128_division_links_the_compiler_runtime():
    """__divti3 comes from libgcc_s explicitly (the process lookup never found it)."""
    module = irc.parse("func.func @d(%a: i64, %b: i64) -> i1 {\n  %x = arith.extsi %a : i64 to i128\n"
                       "  %y = arith.extsi %b : i64 to i128\n  %q = arith.divsi %x, %y : i128\n"
                       "  %c = arith.constant 14 : i128\n  %e = arith.cmpi eq, %q, %c : i128\n"
                       "  func.return %e : i1\n}\n")
    if symbols.runtime_address("__divti3") is None:
        pytest.skip("no libgcc_s in this process")
    assert irc.compile(module, cache=False, opt_level=0).d(100, 7) is True
