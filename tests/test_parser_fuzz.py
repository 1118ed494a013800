"""Mutated real inputs never make the parser or verifier raise anything but ``irc.IRError``.

Inputs are every ``.ir`` file in the repository plus generated programs; the
mutations are the ones that real typing mistakes make: characters and tokens
deleted, duplicated, swapped or replaced, and truncation.  Every error must
point inside the input (a line and column that exist), since the CLI shows
that line with a caret.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irc
from irc.testing import random_program
from irc.testing.mutate import SPLICES, mutate
from irc.testing.parser_fuzz import check

ROOT = Path(__file__).resolve().parent.parent
REPO_INPUTS = sorted(p.read_text() for p in ROOT.rglob("*.ir") if ".git" not in p.parts)
GENERATED = [random_program(seed, 12) for seed in range(8)]
INPUTS = REPO_INPUTS + GENERATED


class _Draw:
    """A mutation chooser (``irc.testing.mutate``) over hypothesis's ``draw``, so examples shrink."""

    def __init__(self, draw):
        self.draw = draw

    def choice(self, seq):
        return self.draw(st.sampled_from(seq))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))


@st.composite
def mutants(draw) -> str:
    return mutate(_Draw(draw), draw(st.sampled_from(INPUTS)))


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
    # found by the parser campaign (python -m irc.testing.parser_fuzz, mutant 246472)
    "assert_value_as_message": "func.func @f(%b: i1, %c: i64) {\n  cf.assert %b, %c\n  func.return\n}\n",
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


def test_function_with_empty_body_is_a_diagnostic():
    """Found by the parser campaign (mutant 377321): ``func.func @f() {}`` raised AttributeError."""
    try:
        irc.verify(irc.parse("func.func @step() {}\n"))
    except irc.IRError as e:
        assert (e.location.line, e.location.column) == (1, 1)
        assert "at least one block" in e.message
    else:
        raise AssertionError("an empty function body should not parse")
