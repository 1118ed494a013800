"""The differential fuzz harness (``irc.testing.fuzz``) and its reducer.

The harness test is seeded from the git commit (printed, so a failure
reproduces with ``python -m irc.testing.fuzz --n 30 --seed SEED``).  Every
reproducer under ``tests/regressions/`` is a defect the harness once found; it
must agree now.
"""

from __future__ import annotations

import gc
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

import irc
from irc.passmanager import PASSES, Pass
from irc.testing import fuzz, random_arguments, random_program
from irc.testing.differential import (
    RESOURCE_LIMIT_KINDS,
    Outcome,
    agrees_within_math_tolerance,
    fault_kind,
)
from irc.testing.generate_faults import FAULT_CLASSES, random_fault_program
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


# -- limits: one runaway configuration must not stop a campaign ----------------------------------

MISBEHAVING = ("fuzz_misbehaving_passes",)  # tests/fuzz_misbehaving_passes.py, imported by the workers only


def test_a_pass_stuck_in_native_code_is_a_timeout_and_the_campaign_goes_on(tmp_path):
    configs = ["pass:test-hang-native", "pass:cse"]
    start = time.monotonic()
    summary = fuzz.run_campaign(2, 0, jobs=1, out=str(tmp_path), configs=configs, imports=MISBEHAVING,
                                config_timeout=1, grace=1)
    assert time.monotonic() - start < 60
    assert summary["programs"] == 2 and summary["timeouts"] == 2, summary
    assert not summary["crashes"] and not summary["disagreements"]
    assert {config for _, config, _, _ in summary["findings"]} == {"pass:test-hang-native"}
    # Each program went on, in a fresh worker, with the configuration after the one that hung.
    alone = fuzz.run_campaign(2, 0, jobs=0, configs=["pass:cse"])
    assert summary["runs"] == 2 * alone["runs"]
    text = (tmp_path / "0-pass-test-hang-native.ir").read_text()
    assert "// kind: timeout" in text and "// cases: [[" in text


def test_a_pass_looping_in_python_is_a_timeout(monkeypatch):
    class Loop(Pass):
        def run(self, module, stats):
            while True:
                pass

    monkeypatch.setattr(Loop, "name", "test-loop", raising=False)
    monkeypatch.setitem(PASSES, "test-loop", Loop)
    report = fuzz.fuzz_program(0, 12, configs=["pass:test-loop", "pass:dce"], config_timeout=0.5)
    assert [(f.config, f.kind) for f in report.findings] == [("pass:test-loop", "timeout")]
    assert report.runs == 2 * (fuzz.TRIALS - report.skipped)  # dce ran after it


def test_an_allocation_past_the_memory_limit_is_a_memory_finding():
    summary = fuzz.run_campaign(1, 0, jobs=1, configs=["pass:test-allocate", "pass:dce"], imports=MISBEHAVING,
                                memory_limit=2000)
    assert summary["memory"] == 1 and not summary["crashes"], summary
    assert summary["findings"][0][1:3] == ("pass:test-allocate", "memory")


def test_a_pass_that_changes_nothing_is_not_interpreted_again(monkeypatch):
    module = irc.parse(random_program(3, 12))
    cases = fuzz.oracle_cases(module, [random_arguments(3, t) for t in range(3)])
    memo = {fuzz.program_key(module): [c.expected for c in cases]}
    calls = []
    original = fuzz.interpreter_outcome
    monkeypatch.setattr(fuzz, "interpreter_outcome", lambda *a, **k: calls.append(1) or original(*a, **k))
    for config in ("pass:fuse-elementwise", "pass:specialize-shapes"):  # no tensors: nothing changes
        assert fuzz.check(module, config, cases, memo=memo) is None
    assert not calls
    assert fuzz.check(module, "preset:O2", cases, memo=memo) is None
    assert len(calls) == len(cases)
    assert fuzz.check(module, "preset:O2", cases, memo=memo) is None  # the same program again
    assert len(calls) == len(cases)


def test_the_memo_tells_apart_programs_that_print_alike():
    """Faults compare by source location, so the key includes every op's location."""
    text = "func.func @main(%a: i64) -> i64 {\n  %c = arith.constant 0 : i64\n  %q = arith.divsi %a, %c : i64\n" \
           "  func.return %q : i64\n}\n"
    one, two = irc.parse(text), irc.parse("\n" + text)
    assert one.print() == two.print()
    assert fuzz.program_key(one) != fuzz.program_key(two)


def test_jit_libraries_are_freed_with_their_executable():
    """A fuzz worker compiles thousands of programs: dropping an Executable must free its machine code
    (LLVM keeps about 10 KB per library ever linked all the same; workers are recycled for that)."""
    module = irc.parse(random_program(5, 12))
    refs = []
    for level in (0, 3):
        exe = irc.compile(module, opt_level=level, cache=False)
        exe["main"](*random_arguments(5, 0))
        refs.append(weakref.ref(exe._library))
        del exe
    gc.collect()
    assert all(r() is None for r in refs)


def test_powf_of_one_half_is_c_pow_not_sqrt():
    """Regression (powf-negative-infinity-one-half-O0.ir): numpy computes x ** 0.5 as sqrt(x), but
    pow(-inf, 0.5) is +inf and pow(-0.0, 0.5) is +0.0 in C, which the JIT calls; folds agree too."""
    from irc.testing.differential import run_both

    bits = {("f32", "-inf"): "0xFF800000", ("f64", "-inf"): "0xFFF0000000000000"}
    for t in ("f32", "f64"):
        module = irc.parse(f"func.func @f(%x: {t}) -> {t} {{\n  %h = arith.constant 0.5 : {t}\n"
                           f"  %r = math.powf %x, %h : {t}\n  func.return %r : {t}\n}}\n")
        for x, expected in ((float("-inf"), "inf"), (-0.0, "0.0"), (4.0, "2.0")):
            assert str(float(irc.interpret(module, "f", x))) == expected
            run_both(module, "f", [x])  # the JIT (libm) at -O0 and -O3 agrees bit for bit
            literal = bits.get((t, str(x)), str(x))
            constant = irc.parse(f"func.func @g() -> {t} {{\n  %x = arith.constant {literal} : {t}\n"
                                 f"  %h = arith.constant 0.5 : {t}\n  %r = math.powf %x, %h : {t}\n"
                                 f"  func.return %r : {t}\n}}\n")
            irc.passes.run(constant, "canonicalize")
            assert "math.powf" not in str(constant)
            assert str(float(irc.interpret(constant, "g"))) == expected


# -- the fault campaign: programs that fault must fault alike, and never kill the process ---------

FAULT_SAMPLE_SEED = 500  # a fixed sample: python -m irc.testing.fuzz --n 24 --seed 500 --classes all


def test_faulting_programs_fault_alike_and_never_kill_the_process(tmp_path):
    summary = fuzz.run_campaign(24, FAULT_SAMPLE_SEED, jobs=1, out=str(tmp_path), classes=FAULT_CLASSES,
                                config_timeout=5, grace=2, reduce_seconds=0)
    assert summary["programs"] == 24
    assert set(summary["by_class"]) == set(FAULT_CLASSES)
    assert fuzz.failures(summary) == 0, (summary["findings"], summary["reproducers"])


def test_fault_programs_cover_every_class_and_about_half_fault():
    programs = [random_fault_program(seed) for seed in range(1200)]  # rare shapes need many (constant steps)
    assert {p.fault_class for p in programs} == set(FAULT_CLASSES)
    assert 0.35 < sum(p.faulty for p in programs) / len(programs) < 0.65
    for p in programs:
        module = irc.parse(p.text, f"<fault program {p.seed}>")
        irc.verify(module)
        assert p.text.count("\n") < 60  # small: a finding needs little reducing
        assert p.arguments
    only = random_fault_program(7, ("loop",))
    assert only.fault_class == "loop" and "scf.for" in only.text


def test_faults_compare_by_kind_and_location():
    """Each engine words its faults; the kind their message names, and the op, must agree."""
    interp = Outcome("error", location=(3, 8), message="index [5] is out of bounds for a buffer of shape [4]")
    jit = Outcome("error", location=(3, 8), message="index out of bounds for memref<4xi64>")
    assert fault_kind(interp.message) == fault_kind(jit.message) == "out of bounds"
    assert interp.same_as(jit)
    assert not interp.same_as(Outcome("error", location=(3, 8), message="buffer freed twice"))
    assert not interp.same_as(Outcome("error", location=(4, 8), message="index out of bounds for memref<4xi64>"))
    assert fault_kind("cannot allocate a buffer of shape [2305843009213693952]: array is too big") == "size overflow"
    assert fault_kind("something new at [3] for memref<4xi8>") == fault_kind("something new at [7] for memref<?xi8>")


def test_a_resource_limit_of_one_side_is_allowed_and_counted_apart():
    case = fuzz.Case([1], Outcome("ok", (1,)))
    stack = Outcome("error", location=(2, 3), message="stack exhausted in memref.alloca")
    assert "stack exhausted" in RESOURCE_LIMIT_KINDS
    limit = fuzz._limit("jit:O0", case, stack, "@main")
    assert limit is not None and limit.kind == "limit" and limit.kind in fuzz.ALLOWED
    assert fuzz._limit("jit:O0", case, Outcome("error", location=(2, 3), message="buffer freed twice"), "") is None
    summary = {name: 0 for name in fuzz.COUNTERS.values()} | {"limits": 5}
    assert fuzz.failures(summary) == 0
    assert fuzz.failures(summary | {"signals": 1}) == 1


def test_a_worker_killed_by_a_signal_is_a_signal_finding_and_the_campaign_goes_on(tmp_path):
    summary = fuzz.run_campaign(2, 0, jobs=1, out=str(tmp_path), configs=["pass:test-segfault", "pass:cse"],
                                imports=MISBEHAVING)
    assert summary["programs"] == 2 and summary["signals"] == 2, summary
    assert not summary["crashes"] and not summary["memory"] and not summary["disagreements"]
    assert {(config, kind) for _, config, kind, _ in summary["findings"]} == {("pass:test-segfault", "signal")}
    alone = fuzz.run_campaign(2, 0, jobs=0, configs=["pass:cse"])
    assert summary["runs"] == 2 * alone["runs"]  # each program went on, in a fresh worker
    text = (tmp_path / "0-pass-test-segfault.ir").read_text()
    assert "// kind: signal" in text and "// signature: SIGSEGV" in text and "func.func @main" in text


def test_a_signal_finding_is_reduced_in_forked_children(tmp_path, monkeypatch):
    class SegfaultOnMuli(Pass):
        def run(self, module, stats):
            import ctypes

            if any(op.name == "arith.muli" for op in module.walk()):
                ctypes.string_at(0)

    monkeypatch.setattr(SegfaultOnMuli, "name", "test-segv-muli", raising=False)
    monkeypatch.setitem(PASSES, "test-segv-muli", SegfaultOnMuli)
    seed = next(s for s in range(40) if "arith.muli" in random_program(s, 12))
    text = random_program(seed, 12)
    finding = fuzz.Finding("pass:test-segv-muli", "signal", "test", random_arguments(seed, 0), "SIGSEGV")
    assert fuzz.dies_of_signal(text, finding)
    assert not fuzz.dies_of_signal(text.replace("arith.muli", "arith.addi"), finding)
    path = fuzz.write_reproducer(seed, text, finding, str(tmp_path), reduce_seconds=30)
    reduced = path.read_text()
    assert "arith.muli" in reduced and size(reduced) * 3 <= size(text), reduced


def test_out_arrays_that_alias_an_input(tmp_path):
    """``tensor:out=x0+0`` writes the result over the first input; ``new`` into a fresh array."""
    text = ("func.func @main(%x: tensor<3x3xf64>, %y: tensor<3x3xf64>) -> tensor<3x3xf64> {\n"
            "  %r = arith.addf %x, %y : tensor<3x3xf64>\n  func.return %r : tensor<3x3xf64>\n}\n")
    module = irc.parse(text)
    args = [np.arange(9.0).reshape(3, 3), np.ones((3, 3))]
    cases = fuzz.oracle_cases(module, [args])
    for config in ("tensor:out=new", "tensor:out=x0+0", "tensor:out=x1+0"):
        assert fuzz.check(module, config, cases) is None, config
    assert args[0][0, 1] == 1.0  # the oracle and every check ran on copies
