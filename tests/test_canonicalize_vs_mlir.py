"""irc's canonicalize leaves no more ops than ``mlir-opt-22 --canonicalize`` (issue 15), on cases
written for this test in the style of upstream's canonicalize tests, run through
``benchmarks/canonicalize_vs_mlir.py`` itself (split at ``// -----``, declarations, the
normaliser for ``return``, the skip of out-of-scope dialects).  Skipped when mlir-opt-22 is not
installed; ``benchmarks/canonicalize_vs_mlir.py --upstream DIR`` measures upstream's own files.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MLIR_OPT = shutil.which("mlir-opt-22")
pytestmark = pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-22 is not installed")

ARITH = """
func.func @bool_compares(%b: i1, %x: i16) -> (i1, i1, i1) {
  %t = arith.constant true
  %f = arith.constant false
  %0 = arith.cmpi eq, %t, %b : i1
  %1 = arith.cmpi ne, %b, %f : i1
  %e = arith.extui %b : i1 to i16
  %z = arith.constant 0 : i16
  %2 = arith.cmpi ne, %e, %z : i16
  return %0, %1, %2 : i1, i1, i1
}

func.func @narrow_compares(%x: i16, %y: i16) -> (i1, i1) {
  %a = arith.extsi %x : i16 to i64
  %b = arith.extsi %y : i16 to i64
  %0 = arith.cmpi ne, %a, %b : i64
  %c = arith.extui %x : i16 to i32
  %d = arith.extui %y : i16 to i32
  %1 = arith.cmpi eq, %c, %d : i32
  return %0, %1 : i1, i1
}

// -----

func.func @negated_compares(%x: i32, %y: i32) -> (i1, i1) {
  %t = arith.constant true
  %0 = arith.cmpi sge, %x, %y : i32
  %1 = arith.xori %0, %t : i1
  %2 = arith.cmpi ugt, %y, %x : i32
  %3 = arith.xori %t, %2 : i1
  return %1, %3 : i1, i1
}

func.func @selects(%c: i1, %p: i64, %q: i64, %r: i64) -> (i64, i64, i64, i64, i1) {
  %t = arith.constant true
  %f = arith.constant false
  %one = arith.constant 1 : i64
  %zero = arith.constant 0 : i64
  %n = arith.xori %t, %c : i1
  %0 = arith.select %n, %p, %q : i64
  %ne = arith.cmpi ne, %p, %q : i64
  %1 = arith.select %ne, %p, %q : i64
  %in = arith.select %c, %p, %q : i64
  %2 = arith.select %c, %r, %in : i64
  %3 = arith.select %c, %zero, %one : i64
  %4 = arith.select %c, %f, %t : i1
  return %0, %1, %2, %3, %4 : i64, i64, i64, i64, i1
}

// -----

func.func @sums(%x: index, %y: index) -> (index, index, index, index) {
  %c9 = arith.constant 9 : index
  %c4 = arith.constant 4 : index
  %m = arith.constant -1 : index
  %0 = arith.subi %c9, %x : index
  %1 = arith.addi %0, %c4 : index
  %2 = arith.addi %x, %c9 : index
  %3 = arith.subi %c4, %2 : index
  %d = arith.subi %y, %x : index
  %4 = arith.addi %d, %x : index
  %n = arith.muli %x, %m : index
  %5 = arith.addi %n, %y : index
  return %1, %3, %4, %5 : index, index, index, index
}

func.func @bits(%x: i32, %y: i32, %s: i8, %u: i8) -> (i32, i32, i32, i32, i32) {
  %m = arith.constant -1 : i32
  %nx = arith.xori %m, %x : i32
  %0 = arith.ori %nx, %x : i32
  %1 = arith.andi %x, %nx : i32
  %xy = arith.xori %y, %x : i32
  %2 = arith.xori %xy, %y : i32
  %a = arith.andi %x, %y : i32
  %3 = arith.andi %y, %a : i32
  %es = arith.extui %s : i8 to i32
  %eu = arith.extui %u : i8 to i32
  %4 = arith.xori %es, %eu : i32
  return %0, %1, %2, %3, %4 : i32, i32, i32, i32, i32
}

// -----

func.func @bounds_and_remainders(%x: i16) -> (i16, i16, i16) {
  %lo = arith.constant -32768 : i16
  %one = arith.constant 1 : i16
  %0 = arith.minsi %lo, %x : i16
  %1 = arith.maxsi %x, %lo : i16
  %2 = arith.remui %x, %one : i16
  return %0, %1, %2 : i16, i16, i16
}

func.func @casts(%x: i8, %h: i16, %f: f32) -> (index, i16, f16, f32, i16) {
  %a = arith.extsi %x : i8 to i32
  %0 = arith.index_cast %a : i32 to index
  %b = arith.extui %x : i8 to i64
  %1 = arith.trunci %b : i64 to i16
  %c = arith.extf %f : f32 to f64
  %2 = arith.truncf %c : f64 to f16
  %d = arith.sitofp %h : i16 to f64
  %3 = arith.truncf %d : f64 to f32
  %g = arith.bitcast %h : i16 to f16
  %4 = arith.bitcast %g : f16 to i16
  return %0, %1, %2, %3, %4 : index, i16, f16, f32, i16
}

// -----

func.func @floats(%f: f64, %g: f64, %u: i16) -> (f64, f64, f64, i1, i1, i1) {
  %nf = arith.negf %f : f64
  %ng = arith.negf %g : f64
  %0 = arith.divf %nf, %ng : f64
  %ninf = arith.constant 0xFFF0000000000000 : f64
  %1 = arith.maximumf %ninf, %f : f64
  %nan = arith.constant 0x7FF8000000000000 : f64
  %2 = arith.maxnumf %f, %nan : f64
  %3 = arith.cmpf ugt, %f, %nan : f64
  %uf = arith.uitofp %u : i16 to f64
  %c = arith.constant -0.5 : f64
  %4 = arith.cmpf olt, %uf, %c : f64
  %k = arith.constant 7.25 : f64
  %5 = arith.cmpf ule, %uf, %k : f64
  return %0, %1, %2, %3, %4, %5 : f64, f64, f64, i1, i1, i1
}

func.func @placeholder(%x: i32) -> i32 {
  %0 = "test.opaque"(%x) : (i32) -> i32
  return %0 : i32
}
"""

SCF = """
func.func @if_picks(%c: i1, %a: i32, %b: i32) -> (i32, i32) {
  %k = arith.constant 3 : i32
  %0:2 = scf.if %c -> (i32, i32) {
    scf.yield %a, %k : i32, i32
  } else {
    scf.yield %b, %k : i32, i32
  }
  return %0#0, %0#1 : i32, i32
}

// -----

func.func private @work() -> i32

func.func @if_unused_result(%c: i1) -> i32 {
  %0:2 = scf.if %c -> (i32, i32) {
    %w = func.call @work() : () -> i32
    %one = arith.constant 1 : i32
    scf.yield %w, %one : i32, i32
  } else {
    %two = arith.constant 2 : i32
    scf.yield %two, %two : i32, i32
  }
  return %0#0 : i32
}
"""

MATH = """
func.func @math_folds() -> (f32, f32) {
  %c = arith.constant 16.0 : f32
  %0 = math.sqrt %c : f32
  %1 = math.floor %0 : f32
  return %0, %1 : f32, f32
}
"""


def load_script():
    spec = importlib.util.spec_from_file_location("canonicalize_vs_mlir", ROOT / "benchmarks" / "canonicalize_vs_mlir.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_irc_leaves_no_more_ops_than_mlir_opt(tmp_path):
    script = load_script()
    for rel, text in zip(script.FILES, (ARITH, MATH, SCF)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    rows = script.compare(tmp_path, MLIR_OPT)
    by_name = {r["func"]: r for r in rows}
    assert by_name["placeholder"]["skip"] == "uses the test dialect (test.opaque)"
    compared = [r for r in rows if r["skip"] is None]
    assert {r["func"] for r in compared} == set(by_name) - {"placeholder"}, [r for r in rows if r["skip"]]
    worse = [(r["func"], r["mlir"], r["irc"], r["extra"]) for r in compared if r["irc"] > r["mlir"]]
    assert not worse
