"""Review of session 9's CPU levels (IRC_CPU / --cpu), scf.for's interleave hint and the aligning
head of flat elementwise loops (an adversarial review's tests): what holds, checked against numpy and
the interpreter, and one test for each of the seven bugs it found, all fixed since (docs/benchmarks.md's
session 9 and the commits that name the review)."""

import numpy as np
import pytest
from irc.runtime import specialization_cache
from irc.runtime.cpu import engine
from irc.runtime.cpu import target_cpu as tc
from test_target_cpu import ELEMENTWISE  # the same f(a, b) = tanh(exp(a*b))

import irc
from irc.diagnostics import IRError

X86 = "+sse2" in engine.host_cpu()[1].split(",")
HOST_FMA = "+fma" in engine.host_cpu()[1].split(",")


@pytest.fixture
def host_level():
    """Each test starts and ends compiling for the host."""
    tc.set_cpu(None)
    yield
    tc.set_cpu(None)


def at_offset(values: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``values`` whose first element is ``offset`` bytes past a 64-byte boundary."""
    buf = np.empty(values.size + 128, values.dtype)
    skip = (-buf.ctypes.data % 64 + offset) % 64 // values.itemsize
    view = buf[skip:skip + values.size].reshape(values.shape)
    view[...] = values
    return view


# -- the aligning head: sound ------------------------------------------------------------------------

ARITH = {"f64": ("arith.mulf", "arith.addf", np.float64), "f16": ("arith.mulf", "arith.addf", np.float16),
         "i32": ("arith.muli", "arith.addi", np.int32), "i8": ("arith.muli", "arith.addi", np.int8),
         "i64": ("arith.muli", "arith.addi", np.int64)}


@pytest.mark.parametrize("kind", sorted(ARITH))
def test_head_with_every_element_type_start_and_aliasing_agrees_with_numpy(kind):
    """2-D and empty arrays of each width at every element offset from a line, written to a new
    array, to an ``out=`` elsewhere, and in place over either input."""
    mul, add, dtype = ARITH[kind]
    fn = irc.compile(irc.parse(f"""
func.func @f(%a: tensor<?x?x{kind}>, %b: tensor<?x?x{kind}>) -> tensor<?x?x{kind}> {{
  %p = {mul} %a, %b : tensor<?x?x{kind}>
  %s = {add} %p, %a : tensor<?x?x{kind}>
  func.return %s : tensor<?x?x{kind}>
}}"""), cache=False, threads=1).f
    size = np.dtype(dtype).itemsize
    rng = np.random.default_rng(size)
    for shape in [(0, 3), (1, 1), (3, 7), (5, 33)]:
        for offset in range(0, 64, max(size, 12)):
            a0 = rng.integers(-5, 5, shape).astype(dtype)
            b0 = rng.integers(-5, 5, shape).astype(dtype)
            with np.errstate(all="ignore"):
                expected = a0 * b0 + a0
            for mode in ("new", "out", "out=a", "out=b"):
                a, b = at_offset(a0, offset), at_offset(b0, (offset + 3 * size) % 64)
                if mode == "new":
                    got = fn(a, b)
                else:
                    got = {"out": at_offset(np.zeros(shape, dtype), (offset + 5 * size) % 64),
                           "out=a": a, "out=b": b}[mode]
                    fn(a, b, out=got)
                np.testing.assert_array_equal(got, expected, err_msg=f"{shape} {offset} {mode}")


def test_head_with_partly_overlapping_output_agrees_with_numpy():
    """An output that overlaps an input shifted by a few elements (either way) gets numpy's result
    of the input before the call."""
    fn = irc.compile(irc.parse("""
func.func @f(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
  %p = arith.mulf %a, %b : tensor<?xf32>
  %e = math.exp %p : tensor<?xf32>
  %s = arith.addf %e, %a : tensor<?xf32>
  func.return %s : tensor<?xf32>
}"""), cache=False, threads=1).f
    rng = np.random.default_rng(7)
    for n in (1, 17, 203):
        for shift in (1, 3, 16):
            b = rng.standard_normal(n).astype(np.float32)
            for ahead in (True, False):
                x = rng.standard_normal(n + 20).astype(np.float32)
                a, out = (x[shift:shift + n], x[:n]) if ahead else (x[:n], x[shift:shift + n])
                expected = np.exp(a.astype(np.float64) * b) + a
                fn(a, b, out=out)
                np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_rank0_bool_result_and_f64_math_with_the_head_agree_with_numpy():
    exe = irc.compile(irc.parse("""
func.func @f(%a: tensor<f64>, %b: tensor<f64>) -> tensor<f64> {
  %p = arith.mulf %a, %b : tensor<f64>
  %e = math.exp %p : tensor<f64>
  func.return %e : tensor<f64>
}
func.func @g(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xi1> {
  %e = math.exp %a : tensor<?xf32>
  %c = arith.cmpf olt, %e, %b : tensor<?xf32>
  func.return %c : tensor<?xi1>
}
func.func @h(%a: tensor<?x3xf64>) -> tensor<?x3xf64> {
  %e = math.tanh %a : tensor<?x3xf64>
  func.return %e : tensor<?x3xf64>
}"""), cache=False, threads=1)
    np.testing.assert_allclose(exe.f(np.array(0.5), np.array(2.0)), np.exp(1.0), rtol=1e-14)
    a = np.linspace(-2, 2, 101).astype(np.float32)
    np.testing.assert_array_equal(exe.g(a, np.ones(101, np.float32)), np.exp(a.astype(np.float64)) < 1)
    x = np.linspace(-3, 3, 111).reshape(37, 3)
    for offset in (0, 8, 24, 56):
        xs = at_offset(x, offset)
        np.testing.assert_allclose(exe.h(xs), np.tanh(x), rtol=1e-13)
        exe.h(xs, out=xs)
        np.testing.assert_allclose(xs, np.tanh(x), rtol=1e-13)


# -- the interleave hint: sound ---------------------------------------------------------------------

HINTED = """
func.func @g(%buf: memref<?xf32>, %n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %buf[%i] : memref<?xf32>
    %e = math.exp %x : f32
    memref.store %e, %buf[%i] : memref<?xf32>
  } {interleave = 2 : i64, parallel}
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (f32) {
    %x = memref.load %buf[%i] : memref<?xf32>
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  } {interleave = 4 : i64}
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c1 step %c1 {
      %x = memref.load %buf[%i] : memref<?xf32>
      %e = math.tanh %x : f32
      memref.store %e, %buf[%i] : memref<?xf32>
    } {interleave = 2 : i64}
  } {interleave = 3 : i64}
  func.return %r : f32
}
func.func @main(%buf: memref<?xf32>, %n: index) -> f32 {
  %r = func.call @g(%buf, %n) : (memref<?xf32>, index) -> f32
  func.return %r : f32
}
"""


@pytest.mark.parametrize("pipeline", ["canonicalize,cse,licm", "inline,sccp,dce", "split-parallel{threads=2}",
                                      "scf-to-cf,simplify-cfg,canonicalize,cse",
                                      "outline-loops,scf-to-cf,inline,simplify-cfg"])
def test_hinted_loops_print_parse_and_run_after_other_passes(pipeline):
    data = np.linspace(-2, 2, 37, dtype=np.float32)
    expected = data.copy()
    total = irc.interpret(irc.parse(HINTED), "main", expected, 37)
    text = irc.passes.run(irc.parse(HINTED), pipeline).print()
    assert irc.parse(text).print() == text and "interleave" in text
    got = data.copy()
    np.testing.assert_allclose(irc.compile(irc.parse(text), cache=False).main(got, 37), total, rtol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# -- bugs ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not (X86 and HOST_FMA), reason="needs an x86 host with FMA (whose code differs from x86-64's)")
def test_an_existing_function_follows_a_new_level(host_level):
    src = ELEMENTWISE
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1000)).astype(np.float32)
    fn = irc.compile(irc.parse(src), cache=False, threads=1).f
    fn(a, b)  # specialised for the host (fused multiply-adds)
    tc.set_cpu("x86-64")
    got = fn(a, b)
    lowered, _ = fn.lower([(1000,), (1000,)])  # what x86-64 gets: no fma
    interpreted = np.full(1000, np.nan, np.float32)
    irc.interpret(lowered, "f", a, b, interpreted)
    np.testing.assert_allclose(got, np.tanh(np.exp(a.astype(np.float64) * b)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, interpreted)


TEMPORARY = """
func.func @f(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %p = arith.mulf %a, %b : tensor<64x64xf32>
  %e = math.exp %p : tensor<64x64xf32>
  %m = graph.matmul %e, %b : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %t = math.tanh %m : tensor<64x64xf32>
  %m2 = graph.matmul %t, %e : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %m2 : tensor<64x64xf32>
}"""


def test_temporaries_of_flat_groups_live_in_the_arena_on_one_thread():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((2, 64, 64)) * 0.1).astype(np.float32)
    e = np.exp(a.astype(np.float64) * b)
    expected = np.tanh(e @ b) @ e
    allocs = {}
    for threads in (1, 2):
        fn = irc.compile(irc.parse(TEMPORARY), cache=False, threads=threads).f
        np.testing.assert_allclose(fn(a, b), expected, rtol=1e-4, atol=1e-4)
        lowered, _ = fn.lower([(64, 64), (64, 64)])
        allocs[threads] = sum(op.name == "memref.alloc" for f in lowered.functions for op in f.walk())
    assert allocs[2] == 0  # the reference: without the head every temporary is planned
    assert allocs[1] == allocs[2]


def test_in_place_elementwise_needs_no_copy_on_one_thread():
    src = """
func.func @f(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
  %p = arith.mulf %a, %b : tensor<?xf32>
  %e = math.exp %p : tensor<?xf32>
  func.return %e : tensor<?xf32>
}"""
    rng = np.random.default_rng(2)
    safe = {}
    for threads in (1, 2):
        fn = irc.compile(irc.parse(src), cache=False, threads=threads).f
        a, b = rng.standard_normal((2, 100)).astype(np.float32)
        expected = np.exp(a.astype(np.float64) * b)
        fn(a, b, out=a)
        np.testing.assert_allclose(a, expected, rtol=1e-5)
        safe[threads] = fn.specialization(((100,), (100,)), aliased=True).in_place
    assert (0, 0) in safe[2]  # the reference: one loop, one store
    assert safe[1] == safe[2]


@pytest.mark.parametrize("value", ["[2]", '"two"'])
def test_a_malformed_interleave_hint_is_refused_or_ignored(value):
    src = f"""
func.func @f(%buf: memref<?xf32>, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {{
    %x = memref.load %buf[%i] : memref<?xf32>
    %e = math.exp %x : f32
    memref.store %e, %buf[%i] : memref<?xf32>
  }} {{interleave = {value}}}
  func.return
}}"""
    data = np.linspace(-1, 1, 20, dtype=np.float32)
    expected = data.copy()
    irc.interpret(irc.parse(src), "f", expected, 20)
    try:
        exe = irc.compile(irc.parse(src), cache=False)
    except IRError:
        return  # refused by the verifier, with the op's location: fine
    exe.f(data, 20)
    np.testing.assert_array_equal(data, expected)


@pytest.mark.skipif(not (X86 and HOST_FMA), reason="needs an x86-64-v3 host")
def test_a_host_that_cannot_run_a_cached_level_leaves_its_entry(host_level, monkeypatch, tmp_path):
    src = """
func.func @f(%a: tensor<64xf32>) -> tensor<64xf32> {
  %e = math.exp %a : tensor<64xf32>
  func.return %e : tensor<64xf32>
}"""
    cache = str(tmp_path)
    a = np.linspace(-1, 1, 64, dtype=np.float32)
    monkeypatch.setenv(tc.ENVIRONMENT, "x86-64-v3")
    fn = irc.compile(irc.parse(src), cache_dir=cache, threads=1).f
    np.testing.assert_allclose(fn(a), np.exp(a.astype(np.float64)), rtol=1e-6)
    key = fn._disk_key(((64,),), ((), False))
    assert specialization_cache.load(key, cache) is not None
    real = engine.host_cpu()
    lacking = ("avx", "avx2", "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe", "xsave")
    old = ",".join("-" + f[1:] if f[1:] in lacking or f[1:].startswith("avx512") else f for f in real[1].split(","))
    monkeypatch.setattr(engine, "host_cpu", lambda: ("oldcore", old))  # an SSE4.2 machine sharing the cache
    other = irc.compile(irc.parse(src), cache_dir=cache, threads=1).f
    with pytest.raises(ValueError, match="cannot run code for x86-64-v3"):
        other(a)
    monkeypatch.setattr(engine, "host_cpu", lambda: real)
    assert specialization_cache.load(key, cache) is not None  # still there for the machines that run it


@pytest.mark.skipif(not X86, reason="the levels are x86-64's")
def test_native_matmul_kernels_multiply_then_add_without_fma(host_level):
    src = """
func.func @bmm(%a: tensor<?x?x?xf32>, %b: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
  %c = graph.batch_matmul %a, %b : (tensor<?x?x?xf32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  func.return %c : tensor<?x?x?xf32>
}
func.func @gemv(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c = graph.matmul %a, %b : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %c : tensor<?x?xf32>
}"""
    tc.set_cpu("x86-64")
    exe = irc.compile(irc.parse(src), cache=False, threads=1)
    rng = np.random.default_rng(3)
    fused = {}
    for fn, shapes in ((exe.bmm, [(4, 8, 16), (4, 16, 8)]), (exe.gemv, [(1, 256), (256, 64)])):
        a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
        np.testing.assert_allclose(fn(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        lowered, _ = fn.lower(shapes)
        fused[fn.name] = sum(op.name == "math.fma" for f in lowered.functions for op in f.walk())
    assert fused == {"bmm": 0, "gemv": 0}  # as the GEMM library's _mul_add kernels at this level


def test_a_tiny_elementwise_beside_a_gemm_stays_optsize_on_one_thread(monkeypatch):
    from irc.passes.lowering import elementwise

    src = """
func.func @f(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>, %c: tensor<16xf32>)
    -> (tensor<512x512xf32>, tensor<16xf32>) {
  %m = graph.matmul %a, %b : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
  %e = math.exp %c : tensor<16xf32>
  %s = arith.addf %e, %c : tensor<16xf32>
  func.return %m, %s : tensor<512x512xf32>, tensor<16xf32>
}"""
    shapes = [(512, 512), (512, 512), (16,)]

    def optsize():
        fn = irc.compile(irc.parse(src), cache=False, threads=1).f
        c = np.linspace(-1, 1, 16, dtype=np.float32)
        a = np.eye(512, dtype=np.float32)
        m, s = fn(a, a, c)
        np.testing.assert_array_equal(m, a)
        np.testing.assert_allclose(s, np.exp(c.astype(np.float64)) + c, rtol=1e-6)
        lowered, _ = fn.lower(shapes)
        return "optsize" in next(f for f in lowered.functions if f.sym_name == "f").attributes

    with_head = optsize()
    monkeypatch.setattr(elementwise, "_aligns", lambda options: False)
    assert optsize()  # the reference: the same function without the head is compiled for size
    assert with_head
