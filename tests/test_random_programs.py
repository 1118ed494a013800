"""Generated programs against the whole core: parser, printer, verifier, interpreter, passes.

Each program is valid, terminates and has no undefined behaviour, so the
interpreter is an oracle: a pass that changes any outcome (results bit for bit,
or the runtime error) is wrong.  A failing example prints as
``Case(seed=..., size=...)``; ``irc.testing.random_program(seed, size)``
regenerates it.
"""

from __future__ import annotations

import irc.passes
import pytest
from hypothesis import given, settings

import irc
from irc.testing import Features, outcome, random_arguments, random_program
from irc.testing.differential import (
    agrees_within_math_tolerance,
    interpreter_outcome,
    perturbed_outcomes,
    uses_inexact_math,
)
from irc.testing.fuzz import DERIVATIVE_REFUSALS, PASS_PIPELINES
from irc.testing.strategies import cases, features, programs

FAST = settings(max_examples=40, deadline=None)


def _parse(text: str):
    module = irc.parse(text, "<generated>")
    irc.verify(module)
    return module


@FAST
@given(cases())
def test_generated_programs_verify_and_run_without_faults(case):
    module = _parse(case.text)
    for args in case.arguments:
        result = outcome(module, "main", args)
        assert result[0] == "ok", f"the generator promised no UB, got {result}"


@FAST
@given(programs())
def test_print_parse_round_trip(text):
    module = _parse(text)
    printed = str(module)
    assert str(irc.parse(printed)) == printed
    generic = module.print(generic=True)
    assert str(irc.parse(generic)) == printed


@settings(max_examples=25, deadline=None)
@given(cases(trials=1))
def test_interpretation_is_deterministic(case):
    args = case.arguments[0]
    first = outcome(_parse(case.text), "main", args)
    assert outcome(_parse(case.text), "main", args) == first
    # Printing must not change meaning either.
    assert outcome(_parse(str(_parse(case.text))), "main", args) == first


def test_generator_is_reproducible_and_seed_sensitive():
    assert random_program(7, 20) == random_program(7, 20)
    assert random_arguments(7, 1) == random_arguments(7, 1) or any(x != x for x in random_arguments(7, 1))
    assert len({random_program(seed, 20) for seed in range(10)}) == 10


def test_size_controls_program_length():
    small = sum(random_program(seed, 4).count("\n") for seed in range(20))
    large = sum(random_program(seed, 40).count("\n") for seed in range(20))
    assert large > 3 * small


@pytest.mark.parametrize("construct", [
    "cf.phi", "cf.cond_br", "scf.for", "scf.while", "scf.if", "iter_args", "memref.alloc(", "memref.alloca",
    "memref.dealloc", "memref.load", "memref.store", "memref.dim", "func.call", "arith.fptosi", "arith.fptoui",
    "arith.divsi", "arith.remui", "arith.shrsi", "arith.cmpf", "arith.select", "arith.bitcast", "math.fma",
])
def test_generator_covers_construct(construct):
    assert any(construct in random_program(seed, 30) for seed in range(60))


@settings(max_examples=30, deadline=None)
@given(features(), cases(max_size=20, trials=1))
def test_feature_subsets_give_valid_programs(feature_set: Features, case):
    text = random_program(case.seed, case.size, feature_set)
    module = _parse(text)
    if not feature_set.cfg:
        assert "cf.phi" not in text
    if not feature_set.memref:
        assert "memref" not in text
    if not feature_set.floats:
        assert "f32" not in text and "f64" not in text
    args = random_arguments(case.seed, 0, feature_set)
    assert outcome(module, "main", args)[0] == "ok"


# -- every pass preserves meaning ------------------------------------------------------------

PIPELINES = sorted(PASS_PIPELINES.get(p, p) for p in irc.passes.PASSES) + ["canonicalize,dce", "dce,canonicalize,dce"]
APPROXIMATE_PASSES = ("math-approx", "stabilize")


@pytest.mark.parametrize("pipeline", PIPELINES)
@settings(max_examples=30, deadline=None)
@given(case=cases(trials=2))
def test_pass_preserves_semantics(pipeline, case):
    module = _parse(case.text)
    before = [outcome(module, "main", args) for args in case.arguments]
    original = module.clone()
    try:
        irc.passes.run(module, pipeline)
    except irc.IRError as e:
        if pipeline in PASS_PIPELINES.values() and any(r in str(e) for r in DERIVATIVE_REFUSALS):
            return
        raise
    after = [outcome(module, "main", args) for args in case.arguments]
    if pipeline in APPROXIMATE_PASSES and after != before:
        # These passes replace libm by approximations (or by more accurate forms): they may
        # move a math result by an ulp or two, which only inexact math can explain.
        results = original.function("main").function_type.results
        for args in case.arguments:
            got, expected = interpreter_outcome(module, "main", args), interpreter_outcome(original, "main", args)
            assert uses_inexact_math(original) and agrees_within_math_tolerance(
                got, expected, perturbed_outcomes(original, "main", args), results), \
                f"{pipeline} changed the outcome of {case!r}:\n{module}"
        return
    assert after == before, f"{pipeline} changed the outcome of {case!r}:\n{module}"


@pytest.mark.parametrize("pipeline", ["canonicalize", "canonicalize,dce"])
@settings(max_examples=30, deadline=None)
@given(case=cases(trials=1))
def test_folding_with_arguments_baked_in(pipeline, case):
    """With @main's arguments as constants, folding can evaluate nearly everything: every fold is exercised."""
    args = list(case.arguments[0])
    expected = outcome(_parse(case.text), "main", args)
    baked = _parse(random_program(case.seed, case.size, baked_arguments=args))
    assert outcome(baked, "main", []) == expected
    irc.passes.run(baked, pipeline)
    assert outcome(baked, "main", []) == expected, f"{pipeline} changed {case!r}:\n{baked}"
