"""Every error in one run (issue 15, item 7): the verifier reports all of a file's problems in
source order, up to diagnostics.MAX_ERRORS; an unknown op is reported and parsing goes on."""

from __future__ import annotations

import pytest

import irc
from irc.cli import main
from irc.diagnostics import MAX_ERRORS, IRError, IRErrors


def errors_of(text: str) -> list[IRError]:
    with pytest.raises(IRError) as info:
        irc.parse(text, "bad.ir").verify()
    e = info.value
    return e.errors if isinstance(e, IRErrors) else [e]


THREE_FUNCTIONS = """\
func.func @a(%x: i64) -> i64 {
  %y = arith.addi %x, %x : i64
  func.return %y : i32
}
func.func @b(%x: i64) -> i64 {
  %c = arith.constant true
  %y = arith.select %c, %x, %x : i64
}
func.func @c(%x: i64) -> i64 {
  %r = func.call @nowhere(%x) : (i64) -> i64
  func.return %r : i64
}
"""


def test_verifier_reports_every_problem_in_source_order():
    errors = errors_of(THREE_FUNCTIONS.replace("func.return %y : i32", "func.return %x, %x : i64, i64"))
    where = [(e.location.line, e.location.column) for e in errors]
    assert where == sorted(where)
    assert [line for line, _ in where] == [3, 7]  # the call is checked once the structure is sound
    assert "returns (i64, i64)" in errors[0].message
    assert "terminator" in errors[1].message


def test_symbol_errors_are_all_reported_too():
    text = ("func.func @f(%x: i64) -> i64 {\n  %r = func.call @nowhere(%x) : (i64) -> i64\n"
            "  %s = func.call @f(%r, %r) : (i64, i64) -> i64\n  func.return %s : i64\n}\n")
    errors = errors_of(text)
    assert [(e.location.line, e.location.column) for e in errors] == [(2, 8), (3, 8)]
    assert "not a function in this module" in errors[0].message
    assert "calls '@f' as (i64, i64) -> i64" in errors[1].message


def test_errors_stop_at_the_limit():
    text = "".join(f"func.func @f{i}(%x: i64) -> i64 {{\n  func.return %x, %x : i64, i64\n}}\n"
                   for i in range(MAX_ERRORS + 5))
    with pytest.raises(IRErrors) as info:
        irc.parse(text, "bad.ir").verify()
    assert len(info.value.errors) == MAX_ERRORS and info.value.truncated
    assert [e.location.line for e in info.value.errors] == [2 + 3 * i for i in range(MAX_ERRORS)]
    assert str(info.value).endswith(f"irc: error: too many errors; stopped after the first {MAX_ERRORS}")


UNKNOWN_OPS = """\
func.func @f(%a: i64) -> i64 {
  %x = arith.bogus %a, %a : i64
  %y = arith.addi %x, %a : i64
  %z = math.frob %y : i64
  %w = arith.addi %z, %q : i64
  func.return %w : i64
}
"""


def test_unknown_ops_are_reported_and_parsing_goes_on():
    errors = errors_of(UNKNOWN_OPS)
    assert [(e.location.line, e.location.column) for e in errors] == [(2, 8), (4, 8), (5, 23)]
    assert errors[0].message == "unknown op 'arith.bogus'"
    assert errors[1].message.startswith("unknown op 'math.frob'")
    assert errors[2].message == "use of undefined value '%q'"


def test_unknown_op_without_result_types_stops_there():
    errors = errors_of("func.func @f(%a: i64) -> i64 {\n  %x = arith.bogus %a\n  %y = arith.nope %x : i64\n"
                       "  func.return %y : i64\n}\n")
    assert [(e.location.line, e.location.column) for e in errors] == [(2, 8)]


def test_the_cli_prints_every_error_with_its_caret(tmp_path, capsys):
    path = tmp_path / "bad.ir"
    path.write_text(UNKNOWN_OPS)
    assert main(["opt", str(path)]) == 1
    err = capsys.readouterr().err
    lines = err.splitlines()
    heads = [line for line in lines if ": error: " in line]
    assert heads == [f"{path}:2:8: error: unknown op 'arith.bogus'",
                     f"{path}:4:8: error: unknown op 'math.frob'",
                     f"{path}:5:23: error: use of undefined value '%q'"]
    assert lines[lines.index(heads[2]) + 2] == " " * 22 + "^"


def test_an_unknown_op_with_its_own_syntax_is_named():
    errors = errors_of("func.func @f(%m: memref<?xf32>) {\n  %t = memref.transpose %m (i) -> (i) : "
                       "memref<?xf32> to memref<?xf32>\n  func.return\n}\n")
    assert [(e.location.line, e.location.column) for e in errors] == [(2, 8)]
    assert errors[0].message.startswith("'memref.transpose' is an op of MLIR's memref dialect that irc does not")
