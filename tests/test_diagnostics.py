"""Diagnostics: every mistake in a program is reported as one ``IRError`` with a
message, a line and a column, rendered as ``file:line:col: error: message``, the
source line and a caret under the column, then ``note:`` lines.

The FileCheck files tests/filecheck/*-invalid.ir cover many more mistakes through
the CLI; these tests check the error objects and their rendering directly.
"""

from __future__ import annotations

import pytest

import irc
from irc.cli import main
from irc.diagnostics import UNKNOWN, IRError, Location, Note, SourceFile
from irc.verifier import verify


def diagnose(text: str) -> IRError:
    """The error that parsing and verifying ``text`` raises."""
    with pytest.raises(IRError) as info:
        verify(irc.parse(text, "prog.ir"))
    return info.value


def fn(body: str, signature: str = "(%x: i64) -> i64") -> str:
    return f"func.func @f{signature} {{\n{body}}}\n"


CASES = [
    # (program, line, column, message)
    (fn("  %y = arith.addi %x, %x i64\n  func.return %y : i64\n"), 2, 26, "unexpected 'i64', expected ':'"),
    (fn("  %y = arith.addi %x, %x : i64 $\n  func.return %y : i64\n"), 2, 32, "unexpected character '$'"),
    ("func.func @f(%x: i64) -> i64 {\n  func.return %x : i64\n", 2, 23, "unexpected end of input, expected"),
    (fn("  %y = arith.mulx %x, %x : i64\n  func.return %y : i64\n"), 2, 8,
     "unknown op 'arith.mulx'; did you mean 'arith.muli'?"),
    (fn("  %y = arith.addi %x, %q : i64\n  func.return %y : i64\n"), 2, 23, "use of undefined value '%q'"),
    (fn("  %x = arith.addi %x, %x : i64\n  func.return %x : i64\n"), 2, 3, "redefinition of value '%x'"),
    (fn("  %y = arith.addi %x, %x : i32\n  func.return %x : i64\n"), 2, 19,
     "use of value '%x' expects type i32, but it has type i64"),
    (fn("  cf.br ^gone\n"), 2, 9, "reference to an undefined block '^gone'"),
    (fn("  cf.br ^b\n^b(%a: i64):\n  func.return %a : i64\n"), 2, 9,
     "branch passes 0 values to '^b', which has 1 argument"),
    (fn("  cf.br ^b(%x : i64)\n^b:\n  func.return %x : i64\n"), 2, 9,
     "branch passes 1 value to '^b', which has 0 arguments"),
    (fn("  %y = arith.addi %x : i64\n  func.return %y : i64\n"), 2, 8,
     "'arith.addi' expects 2 operands (%a, %b) before ': type'"),
    (fn("  func.return %x : i64\n", "(%x: tensor<4xfoo>) -> i64"), 1, 18, "unknown type 'foo'"),
    (fn("  %c = arith.constant 256 : i8\n  func.return %x : i64\n"), 2, 23, "integer literal 256 does not fit in i8"),
    (fn("  %c = arith.constant -129 : i8\n  func.return %x : i64\n"), 2, 23,
     "integer literal -129 does not fit in i8"),
    (fn("^entry:\n  cf.br ^b\n^b:\n  %y = arith.addi %x, %x : i64\n  %p = cf.phi [%y, ^entry] : i64\n"
        "  func.return %p : i64\n"), 6, 8,
     "'cf.phi' op must come before every other op in its block (phis lead their block)"),
    (fn("  %y = arith.addi %x, %x : i64\n"), 2, 8, "'arith.addi' op is not a terminator, but ends its block"),
    (fn("  func.return %x : i64\n  func.return %x : i64\n"), 2, 3,
     "'func.return' op is a terminator, so it must be the last op in its block"),
    (fn("  func.return %x : i64\n", "(%x: i64) -> i32"), 2, 3,
     "'func.return' op returns (i64) but the function @f returns (i32)"),
    (fn("  %r = func.call @nope(%x) : (i64) -> i64\n  func.return %r : i64\n"), 2, 8,
     "'func.call' op calls '@nope', which is not a function in this module"),
    (fn("^entry:\n  cf.br ^entry\n"), 3, 3, "'cf.br' op branches to '^entry', the entry block of its region"),
]


@pytest.mark.parametrize("text,line,column,message", CASES, ids=[c[3][:40] for c in CASES])
def test_error_location_and_message(text, line, column, message):
    err = diagnose(text)
    assert err.message.startswith(message)
    assert (err.location.line, err.location.column) == (line, column)
    head, source, caret = str(err).splitlines()[:3]
    assert head == f"prog.ir:{line}:{column}: error: {err.message}"
    assert source == text.splitlines()[line - 1]
    assert caret == " " * (column - 1) + "^"


def test_notes_point_at_related_places():
    text = ("func.func @f(%c: i1, %x: i64) -> i64 {\n"
            "^entry:\n"
            "  cf.cond_br %c, ^l, ^r\n"
            "^l:\n"
            "  cf.br ^j\n"
            "^r:\n"
            "  cf.br ^j\n"
            "^j:\n"
            "  %p = cf.phi [%x, ^l] : i64\n"
            "  func.return %p : i64\n"
            "}\n")
    err = diagnose(text)
    assert err.message == "'cf.phi' op has no incoming value for predecessor '^r'"
    assert (err.location.line, err.location.column) == (9, 8)
    assert [(n.location.line, n.location.column, n.message) for n in err.notes] == \
        [(7, 3, "the branch from it is here")]
    assert str(err).splitlines() == [
        "prog.ir:9:8: error: 'cf.phi' op has no incoming value for predecessor '^r'",
        "  %p = cf.phi [%x, ^l] : i64",
        "       ^",
        "prog.ir:7:3: note: the branch from it is here",
        "  cf.br ^j",
        "  ^",
    ]


def test_redefinition_note_and_dominance_note():
    err = diagnose(fn("  %y = arith.addi %x, %x : i64\n  %y = arith.muli %x, %x : i64\n  func.return %y : i64\n"))
    assert [(n.location.line, n.location.column, n.message) for n in err.notes] == \
        [(2, 3, "previous definition here")]
    err = diagnose(fn("  %y = arith.addi %x, %w : i64\n  %w = arith.addi %x, %x : i64\n  func.return %y : i64\n"))
    assert err.message == "'arith.addi' op uses '%w' before its definition"
    assert (err.location.line, err.location.column) == (2, 8)
    assert [(n.location.line, n.location.column, n.message) for n in err.notes] == [(3, 8, "defined here")]


def test_symbol_notes():
    text = ("func.func private @g(i32) -> i64\n"
            "func.func @f(%x: i64) -> i64 {\n"
            "  %r = func.call @g(%x) : (i64) -> i64\n"
            "  func.return %r : i64\n"
            "}\n"
            "func.func @f(%x: i64) -> i64 {\n"
            "  func.return %x : i64\n"
            "}\n")
    errors = diagnose(text).errors  # both problems, in source order: the call's, then the redefinition
    assert [(e.location.line, e.location.column) for e in errors] == [(3, 8), (6, 1)]
    err = errors[1]
    assert err.message == "'func.func' op redefines symbol '@f'"
    assert [(n.location.line, n.message) for n in err.notes] == [(2, "previous definition here")]
    err = diagnose(text.split("func.func @f(%x: i64) -> i64 {\n  func.return")[0])
    assert err.message == "'func.call' op calls '@g' as (i64) -> i64, but it has type (i32) -> i64"
    assert [(n.location.line, n.location.column, n.message) for n in err.notes] == \
        [(1, 1, "the function is defined here")]


def test_caret_keeps_tabs_aligned():
    loc = Location(SourceFile("t.ir", "\tfoo\tbar\n"), 1, 6)
    assert loc.render("error", "here") == "t.ir:1:6: error: here\n\tfoo\tbar\n\t   \t^"


def test_rendering_without_source_or_location():
    assert str(IRError("no place")) == "error: no place"
    assert str(IRError("x", UNKNOWN, [Note(UNKNOWN, "see above")])) == "error: x\nnote: see above"
    beyond = Location(SourceFile("t.ir", "one line\n"), 5, 1)  # a line that does not exist
    assert beyond.render("error", "m") == "t.ir:5:1: error: m"


def test_interpreter_faults_name_the_op():
    module = irc.parse("func.func @f(%i: index) -> i64 {\n"
                       "  %m = memref.alloc() : memref<4xi64>\n"
                       "  %v = memref.load %m[%i] : memref<4xi64>\n"
                       "  func.return %v : i64\n"
                       "}\n", "prog.ir")
    with pytest.raises(IRError) as info:
        irc.interpret(module, "f", 4)
    err = info.value
    assert err.message == "index [4] is out of bounds for a buffer of shape [4]"
    assert (err.location.line, err.location.column) == (3, 8)


def test_cli_prints_the_whole_diagnostic(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.ir").write_text(
        fn("  %y = arith.addi %x, %x : i64\n  %y = arith.muli %x, %x : i64\n  func.return %y : i64\n"))
    assert main(["opt", "prog.ir"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("prog.ir:3:3: error: redefinition of value '%y'\n"
                   "  %y = arith.muli %x, %x : i64\n"
                   "  ^\n"
                   "prog.ir:2:3: note: previous definition here\n"
                   "  %y = arith.addi %x, %x : i64\n"
                   "  ^\n")


def test_split_input_file_reports_every_chunk_with_file_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ok = fn("  func.return %x : i64\n")
    (tmp_path / "many.ir").write_text(
        fn("  %y = arith.addi %x, %z : i64\n  func.return %y : i64\n") + "// -----\n" + ok + "// -----\n"
        + fn("  cf.br ^nowhere\n"))
    assert main(["opt", "many.ir", "--split-input-file"]) == 1
    out, err = capsys.readouterr()
    heads = [line for line in err.splitlines() if ": error: " in line]
    assert heads == ["many.ir:2:23: error: use of undefined value '%z'",
                     "many.ir:11:9: error: reference to an undefined block '^nowhere'"]
    assert out == ok


@pytest.mark.parametrize("operand, column", [("()", 3), ("%b[%b]", 15), ("^bb1", 15)])
def test_an_argument_item_where_a_value_belongs_is_a_diagnostic(operand, column):
    """Found by the parser fuzzer (mutants 2061199 and others of seed 2000000): memref.copy
    read its operands as value tokens without checking, and crashed on '%b[%b]' or '()'."""
    text = f"func.func @f(%b: memref<4xf32>) {{\n  memref.copy {operand}, %b : memref<4xf32> to memref<4xf32>\n}}\n"
    with pytest.raises(IRError) as info:
        irc.parse(text)
    assert (info.value.location.line, info.value.location.column) == (2, column)
    assert "expected a value" in info.value.message


def test_dense_literal_of_an_odd_integer_width_is_a_diagnostic():
    """Found by the parser fuzzer (mutant 3307482): numpy has no dtype for i23."""
    text = "func.func @f() -> tensor<2xi23> {\n  %c = arith.constant dense<1> : tensor<2xi23>\n" \
           "  func.return %c : tensor<2xi23>\n}\n"
    with pytest.raises(IRError) as info:
        irc.parse(text)
    assert info.value.location.line == 2 and "i23" in info.value.message
