"""``vector.shuffle``'s custom form and the custom forms that read an attribute dictionary
before ': TYPE' (grammar.lark's colon_type): irc's text round-trips, mlir-opt-22 reads what irc
prints, and bad shuffles are diagnostics at a line and column from ``irc opt``."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import irc
from irc.cli import main
from irc.printer import print_module

MLIR_OPT = shutil.which("mlir-opt-22")

FORMS = """func.func @f(%m: memref<2x3xf32>, %v: vector<4xf32>, %w: vector<3xi8>, %x: vector<2xindex>) -> index {
  %a = memref.collapse_shape %m [[0, 1]] {foo = "x:y"} : memref<2x3xf32> into memref<6xf32>
  %b = memref.collapse_shape %m [[0, 1]]:memref<2x3xf32> into memref<6xf32>
  %c = memref.expand_shape %a [[0, 1]] output_shape [3, 2] {bar}: memref<6xf32> into memref<3x2xf32>
  %d = memref.alloc() : memref<4xf32>
  %e = memref.realloc %d {k = 1 : i32}: memref<4xf32> to memref<8xf32>
  %p = memref.extract_aligned_pointer_as_index %e : memref<8xf32> -> index {q = 7 : i64}
  %s = vector.shuffle %v, %v [7, 0, 1] {z = 2 : i64}: vector<4xf32>, vector<4xf32>
  %t = vector.shuffle %w,%w[5,0]:vector<3xi8>,vector<3xi8>
  %u = "vector.shuffle"(%x, %x) <{mask = array<i64: 3, 2, 1, 0, 3>}> : (vector<2xindex>, vector<2xindex>) -> vector<5xindex>
  return %p : index
}
"""


def test_custom_forms_round_trip_in_both_spellings():
    first = print_module(irc.parse(FORMS))
    assert print_module(irc.parse(first)) == first
    generic = print_module(irc.parse(FORMS), generic=True)
    assert print_module(irc.parse(generic)) == first


@pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-22 is not installed")
def test_mlir_opt_reads_what_irc_prints():
    """MLIR puts extract_aligned_pointer_as_index's attributes after its types (irc printed them
    before ':', which mlir-opt-22 refused: 'expected ':'')."""
    text = print_module(irc.parse(FORMS))
    done = subprocess.run([MLIR_OPT], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert print_module(irc.parse(done.stdout)).count("vector.shuffle") == 3


def test_the_attributes_before_the_type_are_still_read():
    text = ("func.func @f(%e: memref<8xf32>) -> index {\n"
            "  %p = memref.extract_aligned_pointer_as_index %e {q = 7 : i64} : memref<8xf32> -> index\n"
            "  return %p : index\n}\n")
    assert "-> index {q = 7 : i64}" in print_module(irc.parse(text))


BAD = [
    ("%r = vector.shuffle %a, %b [0, 8] : vector<4xf32>, vector<4xf32>", 8, "mask lane 8"),
    ("%r = vector.shuffle %a, %b [-1, 2] : vector<4xf32>, vector<4xf32>", 31, "from 0 to 2^32 - 1"),
    ("%r = vector.shuffle %a, %b [] : vector<4xf32>, vector<4xf32>", 8, "at least one lane"),
    ("%r = vector.shuffle %a, %b [0, 1] : vector<4xf32>, vector<2xf32>", 27, "expects type vector<2xf32>"),
    ("%r = vector.shuffle %a, %b [1.0] : vector<4xf32>, vector<4xf32>", 32, "unexpected"),
    ("%r = vector.shuffle %a, %b [0, 99999999999999999999] : vector<4xf32>, vector<4xf32>", 34, "2^32 - 1"),
    ('%r = "vector.shuffle"(%a, %b) <{mask = array<i32: 0, 1>}> : (vector<4xf32>, vector<4xf32>) -> vector<2xf32>',
     8, "needs a mask"),
    ('%r = "vector.shuffle"(%a, %b) <{mask = array<i64: 0, 1>}> : (vector<4xf32>, vector<4xf32>) -> vector<3xf32>',
     8, "the result of a 2-lane mask"),
    ('%r = "vector.shuffle"(%x, %x) <{mask = array<i64: 0>}> : (f32, f32) -> vector<1xf32>', 8, "two vectors"),
    ("%r = vector.shuffle %a, %b [0, 1] : vector<4x2xf32>, vector<4x2xf32>", 39, "one fixed size"),
]


@pytest.mark.parametrize("line, column, words", BAD)
def test_bad_shuffles_are_diagnostics_at_a_line_and_column(tmp_path, capsys, line, column, words):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @f(%a: vector<4xf32>, %b: vector<4xf32>, %x: f32) {\n"
                    f"  {line}\n  func.return\n}}\n")
    code = main(["opt", str(path)])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err, err
    assert f"bad.mlir:2:{column}: error:" in err and words in err, err
