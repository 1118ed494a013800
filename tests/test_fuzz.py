"""The differential fuzz harness (``irc.testing.fuzz``) and its reducer.

The harness test is seeded from the git commit (printed, so a failure
reproduces with ``python -m irc.testing.fuzz --n 30 --seed SEED``).  Every
reproducer under ``tests/regressions/`` is a defect the harness once found; it
must agree now.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import irc
from irc.passmanager import PASSES, Pass
from irc.testing import fuzz, random_arguments, random_program
from irc.testing.differential import Outcome, agrees_within_math_tolerance
from irc.testing.reduce import size
from irc.types import f32, i64

REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.ir"))


def test_generated_programs_agree_everywhere(tmp_path):
    seed = fuzz.default_seed()
    print(f"fuzz seed {seed}: python -m irc.testing.fuzz --n 30 --seed {seed}")
    summary = fuzz.run_campaign(30, seed, out=str(tmp_path))
    assert summary["programs"] == 30
    assert summary["runs"] >= 30 * len(fuzz.configurations())
    assert not summary["findings"], (seed, summary["findings"], summary["reproducers"])


class _SwapSubtraction(Pass):
    """Test only: a miscompiling pass that turns ``a - b`` into ``b - a``."""

    def run(self, module, stats):
        for op in module.walk():
            if op.name == "arith.subi" and op.operands[0] is not op.operands[1]:
                op.set_operands([op.operands[1], op.operands[0]])


@pytest.fixture
def broken_pass(monkeypatch):
    monkeypatch.setattr(_SwapSubtraction, "name", "test-swap-subi", raising=False)
    monkeypatch.setitem(PASSES, "test-swap-subi", _SwapSubtraction)
    return "pass:test-swap-subi"


def test_reducer_shrinks_a_miscompilation(tmp_path, broken_pass):
    report = None
    for seed in range(40):
        report = fuzz.fuzz_program(seed, 24, out=str(tmp_path), configs=[broken_pass], reduce_seconds=20)
        if report.findings:
            break
    assert report is not None and report.findings, "the broken pass went unnoticed"
    finding = report.findings[0]
    assert finding.config == broken_pass and finding.kind == "mismatch"
    path = Path(report.reproducers[0])
    assert path.name == f"{report.seed}-pass-test-swap-subi.ir"
    text = path.read_text()
    assert f"python -m irc.testing.fuzz --replay {path}" in text
    original = size(random_program(report.seed, 24))
    reduced = size(text)
    assert reduced * 5 <= original, (reduced, original, text)
    irc.verify(irc.parse(text))
    assert "arith.subi" in text
    assert fuzz.replay(str(path)) == 1  # still disagrees
    assert fuzz.main(["--replay", str(path)]) == 1


def test_a_crashing_pass_is_reported_and_reduced(tmp_path, monkeypatch):
    class Crash(Pass):
        def run(self, module, stats):
            if any(op.name == "arith.muli" for op in module.walk()):
                raise ZeroDivisionError("test")

    monkeypatch.setattr(Crash, "name", "test-crash", raising=False)
    monkeypatch.setitem(PASSES, "test-crash", Crash)
    for seed in range(40):
        report = fuzz.fuzz_program(seed, 12, out=str(tmp_path), configs=["pass:test-crash"], reduce_seconds=20)
        if report.findings:
            break
    finding = report.findings[0]
    assert finding.kind == "crash" and finding.signature == "ZeroDivisionError"
    text = Path(report.reproducers[0]).read_text()
    assert "arith.muli" in text and size(text) <= 8, text  # little more than the multiplication is left


def test_math_tolerance():
    ok = Outcome("ok", (("float", "0000000000000040"), 7))  # 2.0
    near = Outcome("ok", (("float", "0100000000000040"), 7))  # 2.0 + 1 ulp (f64)
    far = Outcome("ok", (("float", "0000000000000840"), 7))  # 3.0
    moved = [Outcome("ok", (("float", "0100000000000040"), 7))]
    types = [irc.types.f64, i64]
    assert agrees_within_math_tolerance(near, ok, moved, types)
    assert not agrees_within_math_tolerance(far, ok, moved, types)
    # A result that moving the math does not move must agree exactly.
    assert not agrees_within_math_tolerance(near, ok, [ok], types)
    # An integer result derived from inexact math is not compared; an exact one is.
    digest_moved = [Outcome("ok", (("float", "0000000000000040"), 8))]
    assert agrees_within_math_tolerance(Outcome("ok", (("float", "0000000000000040"), 9)), ok, digest_moved,
                                        [f32, i64])
    assert not agrees_within_math_tolerance(Outcome("ok", (("float", "0000000000000040"), 9)), ok, [ok],
                                            [f32, i64])


def test_digest_canonicalises_nans_after_the_bitcast():
    """LLVM may fold select(isnan(x), NaN, x) to x; the digest must replace NaNs on the integer side
    (found by the harness: program 1197 at -O3 with a NaN argument)."""
    text = random_program(1197, 24)
    assert "arith.select" in text
    for line in text.splitlines():
        if "arith.bitcast" in line and " to i" in line:
            assert "arith.select" not in line
    report = fuzz.fuzz_program(1197, 24, configs=["jit:O3"])
    assert not report.findings, report.findings
    assert random_arguments(1197, 0)


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression_reproducers_agree(path):
    assert fuzz.replay(str(path)) == 0


def test_maxnumf_and_minnumf_order_signed_zeros():
    """Regression (maxnumf-signed-zero-*.ir): the result must not depend on the operand order."""
    module = irc.parse("func.func @f(%a: f64, %b: f64) -> (f64, f64) {\n"
                       "  %x = arith.maxnumf %a, %b : f64\n  %y = arith.minnumf %a, %b : f64\n"
                       "  func.return %x, %y : f64, f64\n}\n")
    for a, b in ((-0.0, 0.0), (0.0, -0.0)):
        big, small = irc.interpret(module, "f", a, b)
        assert str(big) == "0.0" and str(small) == "-0.0"
