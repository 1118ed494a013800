"""Mutated real inputs never make the parser or verifier raise anything but ``irc.IRError``.

Inputs are every ``.ir`` file in the repository plus generated programs; the
mutations are the ones that real typing mistakes make: characters and tokens
deleted, duplicated, swapped or replaced, and truncation.  Every error must
point inside the input (a line and column that exist), since the CLI shows
that line with a caret.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irc
from irc.testing import random_program

ROOT = Path(__file__).resolve().parent.parent
REPO_INPUTS = sorted(p.read_text() for p in ROOT.rglob("*.ir") if ".git" not in p.parts)
GENERATED = [random_program(seed, 12) for seed in range(8)]
INPUTS = REPO_INPUTS + GENERATED
TOKEN = re.compile(r"%[\w#:]+|\^\w+|@\w+|[\w.]+|\S")
# Pieces of the language a mutation may splice in, so mutants get past the lexer and reach deeper code.
SPLICES = ["%", "^", "@", ":", ",", "(", ")", "{", "}", "[", "]", "<", ">", "=", "->", "x", "?", "0x7FC00000",
           "-1", "0", "1.5", "i1", "i64", "index", "f32", "memref<?xi64>", "tensor<2x?xf32>", "cf.phi",
           "cf.br", "scf.yield", "func.return", "arith.addi", "\"arith.addi\"", "dense<1>", "true", "\n", " ",
           "//", "^bb0(%x: i64):", "%a#1", "%r:2 ="]


@st.composite
def mutants(draw) -> str:
    text = draw(st.sampled_from(INPUTS))
    for _ in range(draw(st.integers(1, 4))):
        text = draw(st.sampled_from([_char_mutation, _token_mutation, _truncation]))(draw, text)
    return text


def _char_mutation(draw, text: str) -> str:
    if not text:
        return draw(st.sampled_from(SPLICES))
    i = draw(st.integers(0, len(text) - 1))
    kind = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "replace"]))
    if kind == "delete":
        return text[:i] + text[i + 1:]
    if kind == "duplicate":
        return text[:i] + text[i] + text[i:]
    if kind == "swap" and i + 1 < len(text):
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    ch = draw(st.sampled_from(SPLICES + [chr(draw(st.integers(0, 0x10FFFF)).__index__())]))
    return text[:i] + ch + text[i + (kind == "replace"):]


def _token_mutation(draw, text: str) -> str:
    spans = [m.span() for m in TOKEN.finditer(text)]
    if len(spans) < 2:
        return text
    a, b = sorted(draw(st.lists(st.integers(0, len(spans) - 1), min_size=2, max_size=2)))
    (s1, e1), (s2, e2) = spans[a], spans[b]
    kind = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "move"]))
    if kind == "delete":
        return text[:s1] + text[e1:]
    if kind == "duplicate":
        return text[:e1] + " " + text[s1:e1] + text[e1:]
    if kind == "swap" and a != b:
        return text[:s1] + text[s2:e2] + text[e1:s2] + text[s1:e1] + text[e2:]
    if kind == "move":
        return text[:s2] + text[s1:e1] + " " + text[s2:]
    return text[:s1] + draw(st.sampled_from(SPLICES)) + text[e1:]


def _truncation(draw, text: str) -> str:
    return text[: draw(st.integers(0, len(text)))]


def check(text: str) -> None:
    try:
        module = irc.parse(text, "fuzz.ir")
        irc.verify(module)
        str(module)  # whatever verifies must print
    except irc.IRError as e:
        loc = e.location
        if loc.line == 0:
            return  # an error about the whole input, with no position
        lines = text.splitlines() or [""]
        assert 1 <= loc.line <= len(lines) + 1, (loc.line, len(lines), str(e))
        line = lines[loc.line - 1] if loc.line <= len(lines) else ""
        assert 1 <= loc.column <= len(line) + 1, (loc.line, loc.column, line, str(e))
        str(e)  # rendering the diagnostic (the caret line) must not fail either


def test_unmutated_inputs():
    assert REPO_INPUTS, "no .ir files found"
    for text in INPUTS:
        check(text)  # test inputs include invalid IR on purpose
    for path in sorted((ROOT / "examples").glob("*.ir")):
        irc.verify(irc.parse(path.read_text()))
    for text in GENERATED:
        irc.verify(irc.parse(text))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutants())
def test_mutated_inputs_raise_only_diagnostics(text):
    check(text)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(SPLICES), max_size=40))
def test_token_soup_raises_only_diagnostics(pieces):
    check(" ".join(pieces))


# -- regressions: inputs that once crashed the parser with a Python exception ------------------

CRASHERS = {
    "cmpi_literal_operand": "func.func @f(%a: i64) -> i1 {\n  %r = arith.cmpi slt, %a, 5 : i64\n"
                            "  func.return %r : i1\n}\n",
    "cmpf_bool_predicate_bad_operand": "func.func @f(%a: f32) -> i1 {\n  %r = arith.cmpf true, %a, [%a, ^bb] : f32\n"
                                       "  func.return %r : i1\n}\n",
    "while_empty_do_region": "func.func @f(%a: i64) -> i64 {\n  %r = scf.while (%x = %a) : (i64) -> (i64) {\n"
                             "    %c = arith.constant true\n    scf.condition(%c) %x : i64\n  } do {\n  }\n"
                             "  func.return %r : i64\n}\n",
}


def test_crashers_raise_diagnostics():
    for name, text in CRASHERS.items():
        try:
            irc.verify(irc.parse(text))
        except irc.IRError as e:
            assert e.location.line == 2, (name, str(e))
        else:
            raise AssertionError(f"{name} should not parse")


def test_cmpf_true_and_false_predicates_parse():
    """``true``/``false`` lex as boolean literals; they are cmpf predicates all the same."""
    for pred, expected in (("true", True), ("false", False)):
        text = f"func.func @f(%a: f32) -> i1 {{\n  %r = arith.cmpf {pred}, %a, %a : f32\n  func.return %r : i1\n}}\n"
        module = irc.parse(text)
        assert str(irc.parse(str(module))) == str(module)
        assert f"arith.cmpf {pred}," in str(module)
        assert irc.interpret(module, "f", float("nan")) is expected
