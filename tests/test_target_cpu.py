"""The CPU irc compiles for (runtime/cpu/target_cpu.py): ``IRC_CPU`` and ``--cpu`` name an x86-64
level; the code uses that level's instructions, computes what the interpreter computes, and the JIT
refuses a level the host cannot run."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from irc.passes.lowering import gemm_library as gl
from irc.runtime.cpu import engine
from irc.runtime.cpu import target_cpu as tc

import irc
from irc.types import FloatType

X86 = "+sse2" in engine.host_cpu()[1].split(",")
needs_x86 = pytest.mark.skipif(not X86, reason="the levels are x86-64's")
HOST_LEVELS = [name for name, features in tc.LEVELS.items()
               if X86 and not tc.missing_on_host(tc.resolve(name, *engine.host_cpu())[1], engine.host_cpu()[1])]

ELEMENTWISE = """
func.func @f(%a: tensor<1000xf32>, %b: tensor<1000xf32>) -> tensor<1000xf32> {
  %p = arith.mulf %a, %b : tensor<1000xf32>
  %e = math.exp %p : tensor<1000xf32>
  %t = math.tanh %e : tensor<1000xf32>
  func.return %t : tensor<1000xf32>
}
"""

MATMUL = """
func.func @mm(%a: tensor<67x45xf32>, %b: tensor<45x70xf32>) -> tensor<67x70xf32> {
  %c = graph.matmul %a, %b : (tensor<67x45xf32>, tensor<45x70xf32>) -> tensor<67x70xf32>
  func.return %c : tensor<67x70xf32>
}
"""


@pytest.fixture
def level(monkeypatch):
    """Set ``IRC_CPU`` for one test (and leave ``set_cpu``'s choice unset)."""
    tc.set_cpu(None)

    def choose(name):
        monkeypatch.setenv(tc.ENVIRONMENT, name)
        tc.set_cpu(None)  # IRC_CPU is read once; this reads it again
    yield choose
    tc.set_cpu(None)


def test_a_cpu_with_avx512_is_told_to_use_its_wide_vectors():
    host = "+sse2,+avx2,+fma,+avx,+avx512f,+evex512"
    assert tc.resolve("host", "sapphirerapids", host)[1].endswith(tc.WIDE_VECTORS)
    assert tc.resolve("x86-64-v4", "znver4", host)[1].endswith(tc.WIDE_VECTORS)
    assert tc.WIDE_VECTORS not in tc.resolve("x86-64-v3", "sapphirerapids", host)[1]
    assert tc.WIDE_VECTORS not in tc.resolve("host", "haswell", "+sse2,+avx2,+fma,+avx,-avx512f")[1]
    assert not tc.missing_on_host(tc.resolve("host", "sapphirerapids", host)[1], host)


def test_a_level_lists_its_features_and_no_more():
    host_name, host_features = "znver4", "+sse2,+avx2,+avx512f,-amx-tile,+fma,+avx,+evex512,+bmi,+cx16,+sse4.2"
    name, features = tc.resolve("x86-64-v3", host_name, host_features)
    listed = features.split(",")
    assert name == "x86-64-v3"
    assert {"+avx2", "+fma", "+avx", "+sse2", "+bmi", "+cx16", "+sse4.2"} <= set(listed)
    assert not any(f.startswith(("+avx512", "+evex512", "-")) for f in listed)
    assert all(f[1:] in {e[1:] for e in host_features.split(",")} for f in listed)  # LLVM knows each
    assert "+evex512" in tc.resolve("x86-64-v4", host_name, host_features)[1].split(",")
    assert "evex512" not in tc.resolve("x86-64-v4", host_name, host_features.replace(",+evex512", ""))[1]
    assert tc.resolve("host", host_name, host_features) == (host_name, host_features + tc.WIDE_VECTORS)
    known = {e[1:] for e in host_features.split(",")}
    assert tc.missing_on_host(tc.resolve("x86-64-v4", host_name, host_features)[1], "+sse2,+avx2") \
        == [f for f in tc.LEVELS["x86-64-v4"] if f in known and f not in ("sse2", "avx2")]


def test_a_level_needs_an_x86_host():
    with pytest.raises(ValueError, match="not x86-64"):
        tc.resolve("x86-64-v3", "neoverse-v2", "+neon,+sve")


def test_unknown_names_are_refused_with_the_choices(level):
    level("skylake")
    with pytest.raises(ValueError, match=r"IRC_CPU='skylake' names no CPU .*x86-64-v3"):
        engine.target_cpu()
    with pytest.raises(ValueError, match=r"--cpu='zen9'"):
        tc.set_cpu("zen9")


def test_the_cli_offers_the_same_choices():
    from irc import cli

    assert cli._CPU_CHOICES == tc.CHOICES


@needs_x86
@pytest.mark.parametrize("name", ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_code_for_a_level_uses_its_registers_only(name, tmp_path):
    """The assembly ``irc compile --cpu`` writes for a lowered tensor function: SSE registers only
    below v3, AVX's 256-bit ones at v3, AVX-512's at v4 (whose generic tuning would prefer 256-bit
    vectors: ``target_cpu.WIDE_VECTORS``), and fused multiply-adds only where the level has them."""
    lowered = tmp_path / "f.ir"
    run = [sys.executable, "-m", "irc.cli"]
    subprocess.run([*run, "opt", "-", "-p", "specialize-shapes{func=f shapes=tensor<1000xf32>;tensor<1000xf32>},"
                    "fuse-elementwise,tensor-to-loops,plan-memory,math-approx{fma=true}", "-o", str(lowered)],
                   input=ELEMENTWISE, text=True, check=True)
    out = tmp_path / "f.s"
    subprocess.run([*run, "compile", str(lowered), "--cpu", name, "--emit", "asm", "-o", str(out)], check=True)
    asm = out.read_text()
    assert ("%zmm" in asm) == (name == "x86-64-v4")
    if name == "x86-64-v4":
        assert asm.count("%zmm") > asm.count("%ymm")  # the loop runs 16 lanes wide
    else:
        assert ("%ymm" in asm) == (name == "x86-64-v3")
    assert ("vfmadd" in asm) == (name in ("x86-64-v3", "x86-64-v4"))  # below, math.fma calls fmaf
    assert "%xmm" in asm


@needs_x86
def test_cli_run_refuses_a_level_above_the_host(monkeypatch):
    """``irc run --cpu`` for instructions the host lacks is a clear error, not SIGILL."""
    monkeypatch.setattr(engine, "host_cpu", lambda: ("oldcore", "+sse2,+cx16,+sse4.2,-avx,-avx2,-fma"))
    tc.set_cpu("x86-64-v3")
    try:
        with pytest.raises(ValueError, match=r"cannot run code for x86-64-v3: it lacks avx, avx2"):
            irc.compile(irc.parse(ELEMENTWISE), cache=False).f(np.ones(1000, np.float32), np.ones(1000, np.float32))
    finally:
        tc.set_cpu(None)


@needs_x86
def test_cli_run_with_a_bad_cpu_value_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "irc.cli", "run", "-", "--cpu", "pentium"], input="", text=True,
                          capture_output=True)
    assert proc.returncode == 2 and "invalid choice: 'pentium'" in proc.stderr and "Traceback" not in proc.stderr
    env = {**os.environ, "IRC_CPU": "pentium"}
    proc = subprocess.run([sys.executable, "-m", "irc.cli", "run", "-", "2", "3"], text=True, capture_output=True,
                          input="func.func @main(%a: i64, %b: i64) -> i64 {\n  %c = arith.addi %a, %b : i64\n"
                                "  func.return %c : i64\n}\n", env=env)
    assert "IRC_CPU='pentium' names no CPU" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode != 0


@pytest.mark.parametrize("name", HOST_LEVELS)
def test_each_level_the_host_runs_computes_what_the_interpreter_does(level, name):
    """Elementwise math (math-approx fused only where the level has FMA) and a GEMM through the
    library (a 6x16 tile at v3, SSE's 6x8 and multiply-then-add below): the interpreter runs the same
    lowered IR and gets the same bits; the product agrees with numpy."""
    level(name)
    rng = np.random.default_rng(len(name))
    a, b = rng.standard_normal((2, 1000)).astype(np.float32)
    exe = irc.compile(irc.parse(ELEMENTWISE), cache=False, threads=1)
    lowered, _ = exe.f.lower([(1000,), (1000,)])
    interpreted = np.full(1000, np.nan, np.float32)
    irc.interpret(lowered, "f", a, b, interpreted)  # the lowered function writes its result into a buffer
    np.testing.assert_array_equal(exe.f(a, b), interpreted)
    np.testing.assert_allclose(exe.f(a, b), np.tanh(np.exp(a * b)), rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((67, 45)).astype(np.float32)
    w = rng.standard_normal((45, 70)).astype(np.float32)
    mm = irc.compile(irc.parse(MATMUL), cache=False, threads=1).mm
    lowered, _ = mm.lower([x.shape, w.shape])
    got = mm(x, w)
    library = [f.sym_name for f in lowered.functions if gl.parse_symbol(f.sym_name)]  # through the library
    assert len(library) == 1 and library[0].endswith("_mul_add") == ("fma" not in tc.LEVELS[name])
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["f32", "f64"])
def test_the_multiply_then_add_library_agrees_with_the_interpreter(kind):
    """The library for a CPU without FMA (``_mul_add``): two roundings a step, the interpreter's too."""
    from test_gemm_library import GROUPED, SHAPES, agree_bit_for_bit_and_with_numpy

    blocking = gl.Blocking(GROUPED.mr, GROUPED.nr, GROUPED.mc, GROUPED.kc, GROUPED.nc, fma=False)
    name = gl.symbol(FloatType(kind), blocking)
    assert name.endswith("_mul_add") and gl.parse_symbol(name) == (FloatType(kind), blocking)
    module = gl.build(name)
    assert not any(op.name == "math.fma" for f in module.functions for op in f.walk())
    exe = irc.compile(module, cache=False)
    dtype = np.float32 if kind == "f32" else np.float64
    for m, n, k in SHAPES + [(17, 40, 45), (24, 48, 64)]:
        agree_bit_for_bit_and_with_numpy(module, exe, name, blocking, (m, n, k), dtype, (False, True), m + n + k)


def test_the_target_is_part_of_every_cache_key(level, tmp_path):
    """A disk cache written for one level is not what another level's process loads."""
    cache = str(tmp_path / "cache")
    a = np.ones(1000, np.float32)
    level("host")
    host_key = engine.target_cpu()
    irc.compile(irc.parse(ELEMENTWISE), cache_dir=cache, threads=1).f(a, a)
    if not HOST_LEVELS:
        pytest.skip("no x86-64 level runs here")
    level(HOST_LEVELS[0])
    assert engine.target_cpu() != host_key
    def entries():
        return {str(path) for path in Path(cache).rglob("*") if path.is_file()}
    before = entries()
    irc.compile(irc.parse(ELEMENTWISE), cache_dir=cache, threads=1).f(a, a)
    assert entries() > before  # compiled anew, and stored beside the host's entry
