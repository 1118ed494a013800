"""memref.atomic_rmw, memref.generic_atomic_rmw / atomic_yield and
memref.extract_aligned_pointer_as_index (issue 15): the interpreter against numpy, compiled code
against the interpreter, MLIR's spelling through mlir-opt-22, and the diagnostics for bad input.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from irc.dialects.memref_atomic import FLOAT_KINDS, INT_KINDS, KINDS

import irc
from irc import IRError
from irc.diagnostics import ExecutionError

MLIR_OPT = shutil.which("mlir-opt-22")
TYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8, "i32": np.int32, "i64": np.int64}

def _ieee_max(a, b, number: bool = False):
    """IEEE 754-2019 maximum (maximumNumber with ``number``): numpy's maximum does not order -0 < +0."""
    if np.isnan(a) or np.isnan(b):
        return b if number and np.isnan(a) else a if number and np.isnan(b) else a + b
    return (a if not np.signbit(a) else b) if a == b else max(a, b)


def _ieee_min(a, b, number: bool = False):
    if np.isnan(a) or np.isnan(b):
        return b if number and np.isnan(a) else a if number and np.isnan(b) else a + b
    return (a if np.signbit(a) else b) if a == b else min(a, b)


# What each kind stores, as numpy computes it (old, value): the reference for the interpreter.
NUMPY = {
    "addf": lambda a, b: a + b, "mulf": lambda a, b: a * b, "addi": lambda a, b: a + b, "muli": lambda a, b: a * b,
    "andi": lambda a, b: a & b, "ori": lambda a, b: a | b, "xori": lambda a, b: a ^ b,
    "maxs": max, "mins": min, "assign": lambda a, b: b,
    "maxu": lambda a, b: a if a.view(f"u{a.itemsize}") >= b.view(f"u{b.itemsize}") else b,
    "minu": lambda a, b: a if a.view(f"u{a.itemsize}") <= b.view(f"u{b.itemsize}") else b,
    "maximumf": _ieee_max, "minimumf": _ieee_min,
    "maxnumf": lambda a, b: _ieee_max(a, b, True), "minnumf": lambda a, b: _ieee_min(a, b, True),
}


def _program(kind: str, t: str) -> str:
    return f"""
func.func @rmw(%m: memref<2x3x{t}>, %v: {t}, %i: index, %j: index) -> {t} {{
  %old = memref.atomic_rmw {kind} %v, %m[%i, %j] : ({t}, memref<2x3x{t}>) -> {t}
  func.return %old : {t}
}}
"""


def _cases():
    for kind in KINDS:
        types = ["f16", "f32", "f64"] if kind in FLOAT_KINDS else ["i32", "i64", "i8"] if kind in INT_KINDS \
            else ["f32", "i64"]
        for t in types:
            yield kind, t


def _values(t: str, rng) -> np.ndarray:
    if t in ("f16", "f32", "f64"):
        pool = [0.0, -0.0, 1.5, -2.25, np.nan, np.inf, 3.0, -7.5]
    else:
        pool = [0, 1, -1, 5, -6, 127, -128, 2**31 - 1, -(2**31), 12345]
        pool = [x for x in pool if np.iinfo(TYPES[t]).min <= x <= np.iinfo(TYPES[t]).max]
    return np.array(rng.choice(pool, 6), TYPES[t]).reshape(2, 3)


def _same(a, b) -> bool:
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) and \
        np.array_equal(np.signbit(np.asarray(a, np.float64)), np.signbit(np.asarray(b, np.float64)))


@pytest.mark.parametrize("kind,t", list(_cases()))
def test_atomic_rmw_interpreter_numpy_and_compiled_agree(kind, t):
    m = irc.parse(_program(kind, t))
    m.verify()
    exe = irc.compile(m, bounds_checks=True) if importlib.util.find_spec("llvmlite") else None
    rng = np.random.default_rng(abs(hash((kind, t))) % 2**32)
    for _ in range(6):
        start = _values(t, rng)
        value = _values(t, rng)[0, 0]
        a, expected = start.copy(), start.copy()
        for i in range(2):
            for j in range(3):
                old = irc.interpret(m, "rmw", a, value, i, j)
                assert _same(old, start[i, j])
                with np.errstate(over="ignore", invalid="ignore"):  # numpy's scalars wrap as irc's integers do
                    expected[i, j] = NUMPY[kind](expected[i, j], value)
                if exe is not None:
                    b = a.copy()
                    b[i, j] = start[i, j]  # undo the interpreter's write; compiled code writes it again
                    assert _same(exe.rmw(b, value, i, j), old)
                    assert _same(b, a), (kind, t, b, a)
        assert _same(a, expected), (kind, t, a, expected)


GENERIC = """
func.func @poly(%m: memref<?xf64>, %x: f64, %i: index) -> f64 {
  %one = arith.constant 1.0 : f64
  %old = memref.generic_atomic_rmw %m[%i] : memref<?xf64> {
  ^bb0(%cur: f64):
    %t = arith.mulf %cur, %x : f64
    %n = arith.addf %t, %one : f64
    memref.atomic_yield %n : f64
  }
  func.return %old : f64
}

func.func @clamp_add(%m: memref<4xi32>, %v: i32, %hi: i32) -> i32 {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %s = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (i32) {
    %old = memref.generic_atomic_rmw %m[%i] : memref<4xi32> {
    ^bb0(%cur: i32):
      %sum = arith.addi %cur, %v : i32
      %n = arith.minsi %sum, %hi : i32
      memref.atomic_yield %n : i32
    }
    %acc1 = arith.addi %acc, %old : i32
    scf.yield %acc1 : i32
  }
  func.return %s : i32
}

func.func @address(%m: memref<4xf32>) -> index {
  %p = memref.extract_aligned_pointer_as_index %m : memref<4xf32> -> index
  func.return %p : index
}

func.func @fresh_alignment(%n: index) -> index {
  %a = memref.alloc(%n) : memref<?xf64>
  %p = memref.extract_aligned_pointer_as_index %a : memref<?xf64> -> index
  %c8 = arith.constant 8 : index
  %r = arith.remui %p, %c8 : index
  memref.dealloc %a : memref<?xf64>
  func.return %r : index
}

func.func @freed(%n: index) -> index {
  %a = memref.alloc(%n) : memref<?xf64>
  memref.dealloc %a : memref<?xf64>
  %p = memref.extract_aligned_pointer_as_index %a : memref<?xf64> -> index
  func.return %p : index
}

func.func @rmw_freed(%n: index, %v: i64) -> i64 {
  %a = memref.alloc(%n) : memref<?xi64>
  memref.dealloc %a : memref<?xi64>
  %c0 = arith.constant 0 : index
  %old = memref.atomic_rmw addi %v, %a[%c0] : (i64, memref<?xi64>) -> i64
  func.return %old : i64
}
"""


def _generic():
    m = irc.parse(GENERIC)
    m.verify()
    return m


def test_generic_atomic_rmw_runs_its_region_against_numpy():
    m = _generic()
    a = np.array([2.0, -0.5, np.nan, 4.0])
    for i in range(4):
        before = a[i]
        assert _same(irc.interpret(m, "poly", a, 3.0, i), before)
        assert _same(a[i], before * 3.0 + 1.0)
    b = np.array([1, 7, -3, 9], np.int32)
    expected = np.minimum(b + 4, 8)
    assert irc.interpret(m, "clamp_add", b, 4, 8) == np.array([1, 7, -3, 9]).sum()
    assert np.array_equal(b, expected)


def test_generic_atomic_rmw_compiled_agrees_with_the_interpreter():
    pytest.importorskip("llvmlite")
    m = _generic()
    exe = irc.compile(m, bounds_checks=True)
    a = np.array([2.0, -0.5, np.nan, 4.0])
    b = a.copy()
    for i in range(4):
        assert _same(exe.poly(b, 0.75, i), irc.interpret(m, "poly", a, 0.75, i))
    assert _same(a, b)
    x = np.array([1, 7, -3, 2**31 - 2], np.int32)
    y = x.copy()
    assert exe.clamp_add(y, 5, 6) == irc.interpret(m, "clamp_add", x, 5, 6)
    assert np.array_equal(x, y)
    with pytest.raises(ExecutionError, match="out of bounds") as e:
        exe.poly(b, 1.0, 4)
    assert "memref.generic_atomic_rmw" in str(e.value)
    with pytest.raises(ExecutionError, match="out of bounds"):
        irc.interpret(m, "poly", a, 1.0, 4)


def test_extract_aligned_pointer_as_index():
    m = _generic()
    a = np.zeros(4, np.float32)
    assert irc.interpret(m, "address", a) == a.ctypes.data
    assert irc.interpret(m, "fresh_alignment", 3) == 0
    with pytest.raises(ExecutionError, match="access to a freed buffer"):
        irc.interpret(m, "freed", 3)
    with pytest.raises(ExecutionError, match="access to a freed buffer"):
        irc.interpret(m, "rmw_freed", 3, 1)
    if importlib.util.find_spec("llvmlite") is None:
        return
    exe = irc.compile(m, bounds_checks=True)
    assert exe.address(a) == a.ctypes.data  # an argument is passed in place: the same address here
    assert exe.fresh_alignment(3) == 0
    with pytest.raises(ExecutionError, match="access to a freed buffer"):
        exe.freed(3)
    with pytest.raises(ExecutionError, match="access to a freed buffer"):
        exe.rmw_freed(3, 1)


def test_irc_text_and_generic_form_round_trip():
    for text in (GENERIC, _program("maxu", "i32"), _program("minnumf", "f64")):
        m = irc.parse(text)
        printed = m.print()
        assert irc.parse(printed).print() == printed
        assert irc.parse(m.print(generic=True)).print() == printed
        emitted = irc.print_mlir(m)
        assert irc.print_mlir(irc.parse(emitted)) == emitted


def _roundtrip_module():
    path = Path(__file__).parent.parent / "benchmarks" / "mlir_roundtrip.py"
    spec = importlib.util.spec_from_file_location("mlir_roundtrip", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-22 is not installed")
@pytest.mark.parametrize("text", [GENERIC, *(_program(k, t) for k, t in _cases())])
def test_mlir_opt_accepts_and_prints_back_the_same(text):
    rt = _roundtrip_module()
    ok, printed = rt.run_mlir_opt(MLIR_OPT, text)
    assert ok, printed
    result = rt.round_trip(MLIR_OPT, printed, "atomic")
    assert result.status == "ok", result


@pytest.mark.parametrize("body, message, line, col", [
    ("%x = memref.atomic_rmw addx %v, %m[%i] : (f32, memref<4xf32>) -> f32",
     "unknown atomic_rmw kind 'addx': expected one of addf, addi", 2, 26),
    ("%x = memref.atomic_rmw addi %v, %m[%i] : (f32, memref<4xf32>) -> f32",
     "'addi' needs an integer element type, got f32", 2, 8),
    ("%x = memref.atomic_rmw addf %v, %m[%i] : (f32, memref<4xf32>) -> f64",
     "value and result must have the element type of memref<4xf32>", 2, 8),
    ("%x = memref.atomic_rmw addf %v, %m[%i] : (f64, memref<4xf32>) -> f32",
     "use of value '%v' expects type f64, but it has type f32", 2, 31),
    ("%x = memref.generic_atomic_rmw %m[%i] : memref<4xf32> {\n  ^bb0(%c: f32):\n"
     "    %d = arith.addf %c, %v : f32\n    memref.atomic_yield %i : index\n  }",
     r"yields \(index\) but 'memref.generic_atomic_rmw' stores a f32", 5, 5),
    ("%x = memref.generic_atomic_rmw %m[%i] : memref<4xf32> {\n  ^bb0(%c: f64):\n"
     "    memref.atomic_yield %v : f32\n  }",
     "its region takes one f32 argument", 2, 8),
    ("%x = memref.generic_atomic_rmw %m[%i] : memref<4xf32> {\n  ^bb0(%c: f32):\n"
     "    memref.store %c, %m[%i] : memref<4xf32>\n    memref.atomic_yield %c : f32\n  }",
     "has side effects", 4, 5),
    ("%x = memref.atomic_rmw assign %i, %n[%i] : (index, memref<4xindex>) -> index",
     "must be a signless integer or a float", 2, 8),
    ("%x = memref.generic_atomic_rmw %i, %n[%i] : memref<4xindex> {\n  ^bb0(%c: index):\n"
     "    memref.atomic_yield %c : index\n  }", "unexpected ',', expected '\\['", 2, 36),
    ("%x = memref.generic_atomic_rmw %n[%i] : memref<4xindex> {\n  ^bb0(%c: index):\n"
     "    memref.atomic_yield %c : index\n  }", "must be a signless integer or a float", 2, 8),
    ("%p = memref.extract_aligned_pointer_as_index %m : memref<4xf32> -> f32",
     "takes a memref and gives an index", 2, 8),
])
def test_bad_input_is_a_diagnostic_at_the_op(body, message, line, col):
    text = f"func.func @f(%m: memref<4xf32>, %v: f32, %i: index, %n: memref<4xindex>) {{\n  {body}\n  func.return\n}}\n"
    with pytest.raises(IRError, match=message) as e:
        irc.parse(text, "bad.mlir").verify()
    assert f"bad.mlir:{line}:{col}:" in str(e.value)


@pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-22 is not installed")
def test_cli_emit_mlir_through_mlir_opt_computes_the_same(tmp_path):
    import subprocess

    src = tmp_path / "atomic.ir"
    src.write_text(GENERIC + _program("mulf", "f32"))
    out = subprocess.run([sys.executable, "-m", "irc.cli", "opt", str(src), "--emit", "mlir"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    back = subprocess.run([MLIR_OPT, "-"], input=out.stdout, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    again = subprocess.run([MLIR_OPT, "-"], input=irc.print_mlir(irc.parse(back.stdout)), capture_output=True,
                           text=True)
    assert again.stdout == back.stdout
    module, original = irc.parse(back.stdout), _generic()
    a, b = np.array([2.0, -0.5, 3.0, 4.0]), np.array([2.0, -0.5, 3.0, 4.0])
    for i in range(4):
        assert irc.interpret(module, "poly", a, 1.25, i) == irc.interpret(original, "poly", b, 1.25, i)
    assert np.array_equal(a, b)


UPSTREAM_STYLE = """
func.func @with_attributes(%m: memref<1x2xf32>, %i: index, %j: index) -> f32 {
  %x = memref.generic_atomic_rmw %m[%i, %j] : memref<1x2xf32> {
    ^bb0(%old : f32):
      %c1 = arith.constant 1.0 : f32
      %out = arith.addf %c1, %old : f32
      memref.atomic_yield %out : f32
  } { tag = 8 : index }
  %y = memref.atomic_rmw assign %x, %m[%j, %i] {tag = 3 : i32} : (f32, memref<1x2xf32>) -> f32
  return %y : f32
}
"""


def test_attributes_after_the_region_and_before_the_type():
    m = irc.parse(UPSTREAM_STYLE)
    m.verify()
    emitted = irc.print_mlir(m)
    assert "} {tag = 8 : index}" in emitted and "{tag = 3 : i32} : (f32" in emitted
    assert irc.print_mlir(irc.parse(emitted)) == emitted
    a = np.array([[1.5, -2.0]], np.float32)
    assert irc.interpret(m, "with_attributes", a, 0, 0) == 2.5
    assert np.array_equal(a, [[1.5, -2.0]])  # +1 by the region, then the old value assigned back
    if MLIR_OPT is not None:
        rt = _roundtrip_module()
        ok, printed = rt.run_mlir_opt(MLIR_OPT, UPSTREAM_STYLE)
        assert ok, printed
        assert rt.round_trip(MLIR_OPT, printed, "attrs").status == "ok"


def test_a_loop_inside_the_region_runs_on_the_interpreter_and_is_a_diagnostic_compiled():
    text = """func.func @f(%m: memref<2xf32>, %i: index, %n: index) -> f32 {
  %x = memref.generic_atomic_rmw %m[%i] : memref<2xf32> {
  ^bb0(%cur: f32):
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %r = scf.for %k = %c0 to %n step %c1 iter_args(%acc = %cur) -> (f32) {
      %t = arith.addf %acc, %cur : f32
      scf.yield %t : f32
    }
    memref.atomic_yield %r : f32
  }
  func.return %x : f32
}
"""
    m = irc.parse(text)
    m.verify()
    a = np.array([1.5, 2.0], np.float32)
    assert irc.interpret(m, "f", a, 1, 3) == 2.0
    assert a[1] == 2.0 * 4
    pytest.importorskip("llvmlite")
    with pytest.raises(IRError, match="must be one block") as e:
        irc.compile(m)
    assert "<input>:2:8:" in str(e.value) or ":2:8:" in str(e.value)
