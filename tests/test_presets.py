"""The default pipelines ``irc opt -O1``/``-O2`` preserve the meaning of programs,
checked on generated programs against the interpreter (the oracle)."""

import irc.passes
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import irc
from irc.passmanager import PRESETS
from irc.testing.generate import random_arguments, random_program
from irc.testing.oracle import outcome


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_name_registered_passes(preset):
    irc.passes.parse_pipeline(PRESETS[preset])  # raises on an unknown pass


@pytest.mark.parametrize("preset", ["O1", "O2"])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), size=st.integers(4, 30))
@example(seed=127, size=13)  # canonicalize once visited ops nested in an erased scf.for
def test_presets_preserve_semantics(preset, seed, size):
    text = random_program(seed, size)
    before = irc.parse(text)
    after = irc.parse(text)
    irc.passes.run(after, PRESETS[preset])
    for trial in range(2):
        args = random_arguments(seed, trial)
        assert outcome(after, "main", args) == outcome(before, "main", args), (
            f"-{preset} changed random_program({seed}, {size}) on {args}")


def test_o2_simplifies():
    """-O2 must actually optimise: a loop with an invariant, foldable body shrinks."""
    text = """
    func.func @f(%n: index, %a: i64) -> i64 {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %z = arith.constant 0 : i64
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%s = %z) -> (i64) {
        %k = arith.muli %a, %a : i64
        %k2 = arith.muli %a, %a : i64
        %t = arith.addi %k, %k2 : i64
        %s1 = arith.addi %s, %t : i64
        scf.yield %s1 : i64
      }
      func.return %r : i64
    }
    """
    module = irc.parse(text)
    irc.passes.run(module, PRESETS["O2"])
    printed = str(module)
    assert printed.count("arith.muli") == 1, printed
    assert irc.interpret(module, "f", 5, 3) == irc.interpret(irc.parse(text), "f", 5, 3) == 90
