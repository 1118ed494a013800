"""cse and sccp against the interpreter, plus the properties FileCheck cannot state.

Random programs (``irc.testing.random_program``) are run before and after each
pipeline; any change of outcome - results bit for bit, NaN equal to NaN, or the
runtime error - is a bug.  With ``@main``'s arguments baked in as constants,
SCCP can evaluate nearly every branch and loop, which exercises its edges and
phis far harder than programs with unknown arguments do.
"""

from __future__ import annotations

import time

import irc.passes
import pytest
from hypothesis import given, settings

import irc
from irc.passmanager import PassManager, Statistics
from irc.testing import outcome, random_arguments, random_program
from irc.testing.strategies import cases

PIPELINES = ["cse", "sccp", "sccp,canonicalize,cse", "canonicalize,cse,sccp,cse"]


def _parse(text: str):
    module = irc.parse(text, "<test>")
    irc.verify(module)
    return module


def _run(module, pipeline: str) -> Statistics:
    manager = PassManager.parse(pipeline)  # verifies after every pass
    manager.run(module)
    irc.verify(module)
    total = Statistics()
    for _, stats in manager.statistics:
        for key, n in stats.counters.items():
            total.add(key, n)
    return total


def _op_count(module) -> int:
    return sum(1 for op in module.walk() if op.name not in ("builtin.module", "cf.phi"))


# -- semantics on generated programs ------------------------------------------------------------


@pytest.mark.parametrize("pipeline", PIPELINES)
@settings(max_examples=25, deadline=None)
@given(case=cases(max_size=30, trials=2))
def test_pipeline_preserves_outcome(pipeline, case):
    module = _parse(case.text)
    before = [outcome(module, "main", args) for args in case.arguments]
    _run(module, pipeline)
    after = [outcome(module, "main", args) for args in case.arguments]
    assert after == before, f"{pipeline} changed {case!r}:\n{module}"


@pytest.mark.parametrize("pipeline", ["sccp", "sccp,canonicalize,cse"])
@pytest.mark.parametrize("seed", range(12))
def test_sccp_with_arguments_baked_in(pipeline, seed):
    """Constant arguments make most conditions constant: branches fold, loops run out at compile time."""
    args = random_arguments(seed, 0)
    expected = outcome(_parse(random_program(seed, 30)), "main", args)
    baked = _parse(random_program(seed, 30, baked_arguments=args))
    _run(baked, pipeline)
    assert outcome(baked, "main", []) == expected, f"{pipeline} changed seed {seed}:\n{baked}"


def test_sccp_finds_constants_on_generated_programs():
    """Guards against a pass that is 'correct' because it does nothing."""
    found = Statistics()
    for seed in range(6):
        args = random_arguments(seed, 0)
        stats = _run(_parse(random_program(seed, 30, baked_arguments=args)), "sccp")
        for key, n in stats.counters.items():
            found.add(key, n)
    assert found.counters["constants-found"] > 50
    assert found.counters["branches-folded"] > 0


# -- cse ------------------------------------------------------------------------------------------

DIAMOND = """
func.func @main(%a: i64, %b: i64, %c: i1) -> (i64, i64) {
^entry:
  cf.cond_br %c, ^left, ^right
^left:
  %x = arith.addi %a, %b : i64
  cf.br ^join
^right:
  %y = arith.addi %b, %a : i64
  cf.br ^join
^join:
  %p = cf.phi [%x, ^left], [%y, ^right] : i64
  %z = arith.addi %a, %b : i64
  func.return %p, %z : i64, i64
}
"""


def test_cse_keeps_sibling_arms_apart():
    module = _parse(DIAMOND)
    stats = _run(module, "cse")
    assert not stats.counters.get("ops-erased")
    for args in [(1, 2, True), (1, 2, False), (-5, 9, True)]:
        assert outcome(module, "main", args) == outcome(_parse(DIAMOND), "main", args)


def test_cse_output_is_deterministic():
    """Commutative operands are ordered by walk order, not id(): equal inputs give equal outputs."""
    text = random_program(3, 40)
    outputs = set()
    for _ in range(3):
        module = _parse(text)
        _run(module, "cse")
        outputs.add(str(module))
    assert len(outputs) == 1


def _chain_of_blocks(n: int) -> str:
    """A function of n blocks in a line, each repeating the entry's expression."""
    lines = ["func.func @main(%a: i64, %b: i64) -> i64 {", "^entry:", "  %e = arith.muli %a, %b : i64",
             "  cf.br ^b0"]
    for i in range(n):
        nxt = f"^b{i + 1}" if i + 1 < n else "^exit"
        lines += [f"^b{i}:", f"  %x{i} = arith.muli %b, %a : i64", f"  %s{i} = arith.addi %x{i}, %e : i64",
                  f"  cf.br {nxt}"]
    lines += ["^exit:", f"  func.return %s{n - 1} : i64", "}"]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def long_chain():
    """A 4000-block chain, parsed once; tests run on clones (cloning is ten times faster)."""
    return _parse(_chain_of_blocks(4000))


def test_cse_walks_deep_dominator_trees_without_recursion(long_chain):
    module = long_chain.clone()
    stats = _run(module, "cse")
    # Every block's muli is the entry's; every addi after the first repeats the one before.
    assert stats.counters["ops-erased"] == 4000 + 3999
    assert outcome(module, "main", [3, 4]) == ("ok", 24)


def test_cse_time_grows_linearly(long_chain):
    def seconds(make) -> float:
        best = float("inf")
        for _ in range(3):
            module = make()
            start = time.perf_counter()
            irc.passes.run(module, "cse", verify_each=False)
            best = min(best, time.perf_counter() - start)
        return best

    small = seconds(lambda: _parse(_chain_of_blocks(500)))
    large = seconds(long_chain.clone)
    # 8x the blocks; a quadratic walk would take about 64x as long.
    assert large < 24 * small, f"500 blocks: {small:.4f}s, 4000 blocks: {large:.4f}s"


# -- sccp -----------------------------------------------------------------------------------------

WEGMAN_ZADECK = """
func.func @main(%n: i64) -> i64 {
^entry:
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  cf.br ^head
^head:
  %i = cf.phi [%zero, ^entry], [%i1, ^latch] : i64
  %x = cf.phi [%one, ^entry], [%x2, ^latch] : i64
  %more = arith.cmpi slt, %i, %n : i64
  cf.cond_br %more, ^body, ^exit
^body:
  %changed = arith.cmpi ne, %x, %one : i64
  cf.cond_br %changed, ^bump, ^latch
^bump:
  %x1 = arith.addi %x, %one : i64
  cf.br ^latch
^latch:
  %x2 = cf.phi [%x, ^body], [%x1, ^bump] : i64
  %i1 = arith.addi %i, %one : i64
  cf.br ^head
^exit:
  func.return %x : i64
}
"""


def test_sccp_beats_canonicalize_on_optimistic_loops():
    canonical = _parse(WEGMAN_ZADECK)
    _run(canonical, "canonicalize,cse")
    optimised = _parse(WEGMAN_ZADECK)
    stats = _run(optimised, "sccp,canonicalize,cse")
    assert stats.counters["blocks-erased"] >= 1 and stats.counters["branches-folded"] >= 1
    # Canonicalize alone cannot prove %x constant (it only turns the ^bump diamond into a
    # select); SCCP's optimistic assumption about the loop can.
    assert "%x = cf.phi" in str(canonical) and "cf.phi" in str(optimised)
    assert "%x = cf.phi" not in str(optimised) and "func.return %one" in str(optimised)
    assert _op_count(optimised) < _op_count(canonical)
    for n in (-1, 0, 5):
        assert outcome(optimised, "main", [n]) == outcome(_parse(WEGMAN_ZADECK), "main", [n]) == ("ok", 1)


def test_sccp_does_not_trust_side_effects_or_arguments():
    text = """
    func.func @main(%m: memref<2xi64>, %a: i64) -> (i64, i64) {
      %c0 = arith.constant 0 : index
      %k = arith.constant 4 : i64
      memref.store %k, %m[%c0] : memref<2xi64>
      %l = memref.load %m[%c0] : memref<2xi64>
      %s = arith.addi %l, %a : i64
      %t = arith.muli %k, %k : i64
      func.return %s, %t : i64, i64
    }
    """
    module = _parse(text)
    stats = _run(module, "sccp")
    printed = str(module)
    assert "memref.load" in printed and "arith.addi %l, %a" in printed
    assert "arith.constant 16 : i64" in printed and "arith.muli" not in printed
    assert stats.counters["constants-found"] == 1


def test_sccp_unknown_condition_keeps_both_arms():
    text = """
    func.func @main(%c: i1) -> i64 {
    ^entry:
      %one = arith.constant 1 : i64
      %two = arith.constant 2 : i64
      cf.cond_br %c, ^a, ^b
    ^a:
      cf.br ^join
    ^b:
      cf.br ^join
    ^join:
      %p = cf.phi [%one, ^a], [%two, ^b] : i64
      func.return %p : i64
    }
    """
    module = _parse(text)
    stats = _run(module, "sccp")
    assert "cf.phi" in str(module) and "cf.cond_br" in str(module)
    assert not stats
    assert outcome(module, "main", [True]) == ("ok", 1)
    assert outcome(module, "main", [False]) == ("ok", 2)


def test_sccp_folds_float_nan_exactly():
    """NaN folds to NaN and meets itself: a phi of two NaN computations is NaN, not overdefined."""
    text = """
    func.func @main(%c: i1) -> f64 {
    ^entry:
      %zero = arith.constant 0.0 : f64
      cf.cond_br %c, ^a, ^b
    ^a:
      %n1 = arith.divf %zero, %zero : f64
      cf.br ^join
    ^b:
      %n2 = arith.subf %zero, %zero : f64
      %n3 = arith.divf %n2, %zero : f64
      cf.br ^join
    ^join:
      %p = cf.phi [%n1, ^a], [%n3, ^b] : f64
      func.return %p : f64
    }
    """
    module = _parse(text)
    before = [outcome(module, "main", [c]) for c in (True, False)]
    _run(module, "sccp")
    assert "cf.phi" not in str(module)
    assert [outcome(module, "main", [c]) for c in (True, False)] == before


def test_sccp_loop_carried_values_meet_the_yield():
    """An iter_arg that starts constant but changes is not that constant inside the body."""
    text = """
    func.func @main(%n: index) -> (i64, i64) {
      %zero = arith.constant 0 : index
      %one = arith.constant 1 : index
      %c0 = arith.constant 0 : i64
      %c1 = arith.constant 1 : i64
      %r:2 = scf.for %i = %zero to %n step %one iter_args(%acc = %c0, %same = %c1) -> (i64, i64) {
        %next = arith.addi %acc, %c1 : i64
        %keep = arith.muli %same, %c1 : i64
        scf.yield %next, %keep : i64, i64
      }
      %w:2 = scf.while (%a = %c0, %b = %c1) : (i64, i64) -> (i64, i64) {
        %more = arith.cmpi slt, %a, %r#0 : i64
        scf.condition(%more) %a, %b : i64, i64
      } do {
      ^bb0(%a2: i64, %b2: i64):
        %a3 = arith.addi %a2, %b2 : i64
        scf.yield %a3, %b2 : i64, i64
      }
      %s = arith.addi %w#0, %r#1 : i64
      %t = arith.addi %w#1, %r#1 : i64
      func.return %s, %t : i64, i64
    }
    """
    module = _parse(text)
    _run(module, "sccp")
    printed = str(module)
    assert "arith.addi %acc, %c1" in printed and "arith.addi %a2, %c1" in printed
    assert "arith.constant 2 : i64" in printed  # %t = 1 + 1: the unchanged values are known
    for n in (0, 1, 4):
        assert outcome(module, "main", [n]) == outcome(_parse(text), "main", [n])
