"""The tensor compile path: fusion, bufferization, memory planning, shape specialisation, the API.

Every transformation is checked against the interpreter on the original graph:
the graph before, the loop-level program after (in the interpreter), and the
machine code compiled from it must agree.
"""

from __future__ import annotations

import random

import irc.passes
import numpy as np
import pytest
from irc.runtime import aot
from irc.runtime.cpu import blas as blas_runtime

import irc
from irc.interpreter import interpret

SHAPE = (3, 5)

UNARY = ["math.exp", "math.tanh", "arith.negf", "math.absf"]
BINARY = ["arith.addf", "arith.mulf", "arith.subf", "arith.maximumf"]


def random_graph(seed: int, n_ops: int = 12, elem: str = "f32") -> str:
    """A random graph of elementwise ops, broadcasts, splats and row reductions on SHAPE."""
    rng = random.Random(seed)
    rows, cols = SHAPE
    t = f"tensor<{rows}x{cols}x{elem}>"
    lines = []
    values = ["%x", "%y"]
    for i in range(n_ops):
        kind = rng.random()
        v = f"%v{i}"
        if kind < 0.3:
            lines.append(f"{v} = {rng.choice(UNARY)} {rng.choice(values)} : {t}")
        elif kind < 0.65:
            lines.append(f"{v} = {rng.choice(BINARY)} {rng.choice(values)}, {rng.choice(values)} : {t}")
        elif kind < 0.75:
            lines.append(f"{v}b = graph.broadcast %row : tensor<{cols}x{elem}> to {t}")
            lines.append(f"{v} = arith.addf {rng.choice(values)}, {v}b : {t}")
        elif kind < 0.85:
            red = rng.choice(["reduce_sum", "reduce_max", "reduce_mean", "reduce_min"])
            lines.append(f"{v}r = graph.{red} {rng.choice(values)} {{axes = [1], keepdims}} : "
                         f"{t} to tensor<{rows}x1x{elem}>")
            lines.append(f"{v}b = graph.broadcast {v}r : tensor<{rows}x1x{elem}> to {t}")
            lines.append(f"{v} = arith.subf {rng.choice(values)}, {v}b : {t}")
        elif kind < 0.92:
            lines.append(f"{v}c = arith.constant dense<{rng.choice(['0.5', '2.0', '-1.0'])}> : {t}")
            lines.append(f"{v} = arith.mulf {rng.choice(values)}, {v}c : {t}")
        else:
            lines.append(f"{v}r = graph.reduce_sum {rng.choice(values)} {{axes = [0]}} : {t} to "
                         f"tensor<{cols}x{elem}>")
            lines.append(f"{v}b = graph.broadcast {v}r : tensor<{cols}x{elem}> to {t}")
            lines.append(f"{v} = arith.mulf {rng.choice(values)}, {v}b : {t}")
        values.append(v)
    outs = [values[-1], rng.choice(values[2:])]
    body = "\n  ".join(lines)
    return (f"func.func @f(%x: {t}, %y: {t}, %row: tensor<{cols}x{elem}>) -> ({t}, {t}) {{\n  {body}\n"
            f"  func.return {', '.join(outs)} : {t}, {t}\n}}\n")


def _inputs(seed: int, elem: str = "f32"):
    rng = np.random.default_rng(seed)
    dt = np.float32 if elem == "f32" else np.float64
    return [rng.uniform(-2, 2, SHAPE).astype(dt), rng.uniform(-2, 2, SHAPE).astype(dt),
            rng.uniform(-2, 2, SHAPE[1]).astype(dt)]


def _close(a, b, elem):
    tol = 2e-5 if elem == "f32" else 1e-12
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", range(40))
def test_each_stage_agrees_with_the_graph_in_the_interpreter(seed):
    elem = "f32" if seed % 2 else "f64"
    text = random_graph(seed, elem=elem)
    args = _inputs(seed, elem)
    expected = interpret(irc.parse(text), "f", *args)
    module = irc.parse(text)
    for stage in ["fuse-elementwise", "tensor-to-loops", "plan-memory", "canonicalize,cse,licm"]:
        irc.passes.run(module, stage)
        if stage == "fuse-elementwise":
            got = interpret(module, "f", *args)
        else:
            outs = [np.zeros(SHAPE, args[0].dtype) for _ in range(2)]
            interpret(module, "f", *args, *outs)
            got = outs
        for e, g in zip(expected, got):
            # The fused interpreter runs the same numpy ops; only reduction order may differ.
            _close(g, e, elem)


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_compiled_tensor_graph_agrees_with_the_interpreter(seed):
    elem = "f32" if seed % 2 else "f64"
    text = random_graph(seed, elem=elem)
    args = _inputs(seed, elem)
    expected = interpret(irc.parse(text), "f", *args)
    got = irc.compile(irc.parse(text)).f(*args)
    for e, g in zip(expected, got):
        _close(g, e, elem)


# -- fusion ------------------------------------------------------------------------------------------


def _count(module, name):
    return sum(1 for op in module.walk() if op.name == name)


def test_an_elementwise_chain_with_broadcasts_becomes_one_loop_nest():
    m = irc.parse("""
func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<8xf32>) -> tensor<4x8xf32> {
  %m = arith.mulf %a, %b : tensor<4x8xf32>
  %cb = graph.broadcast %c : tensor<8xf32> to tensor<4x8xf32>
  %s = arith.addf %m, %cb : tensor<4x8xf32>
  %one = arith.constant dense<1.0> : tensor<4x8xf32>
  %n = arith.negf %s : tensor<4x8xf32>
  %e = math.exp %n : tensor<4x8xf32>
  %d = arith.addf %one, %e : tensor<4x8xf32>
  %r = arith.divf %one, %d : tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}""")
    irc.passes.run(m, "fuse-elementwise")
    assert _count(m, "graph.fused") == 1
    irc.passes.run(m, "tensor-to-loops,canonicalize")
    outer = [op for op in m.walk() if op.name == "scf.for" and op.parent_op.name == "func.func"]
    assert len(outer) == 1
    assert _count(m, "memref.alloc") == 0  # writes straight into the output


def test_a_value_used_by_two_groups_is_computed_once_and_stored():
    m = irc.parse("""
func.func @f(%x: tensor<16x100xf32>) -> tensor<16x100xf32> {
  %m = graph.reduce_max %x {axes = [1], keepdims} : tensor<16x100xf32> to tensor<16x1xf32>
  %mb = graph.broadcast %m : tensor<16x1xf32> to tensor<16x100xf32>
  %d = arith.subf %x, %mb : tensor<16x100xf32>
  %e = math.exp %d : tensor<16x100xf32>
  %s = graph.reduce_sum %e {axes = [1], keepdims} : tensor<16x100xf32> to tensor<16x1xf32>
  %sb = graph.broadcast %s : tensor<16x1xf32> to tensor<16x100xf32>
  %r = arith.divf %e, %sb : tensor<16x100xf32>
  func.return %r : tensor<16x100xf32>
}""")
    irc.passes.run(m, "fuse-elementwise")
    fused = [op for op in m.walk() if op.name == "graph.fused"]
    assert [op.reduction for op in fused] == ["max", None, "sum", None]
    assert sum(1 for op in m.walk() if op.name == "math.exp") == 1


def test_fusion_is_linear_in_a_long_chain():
    """A 2,000-op chain fuses into one op (and in one walk: the pass has no inner loop over ops)."""
    n = 2000
    lines = ["%v0 = math.tanh %x : tensor<8xf32>"]
    lines += [f"%v{i} = arith.addf %v{i - 1}, %x : tensor<8xf32>" for i in range(1, n)]
    text = ("func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n  " + "\n  ".join(lines) +
            f"\n  func.return %v{n - 1} : tensor<8xf32>\n}}\n")
    m = irc.parse(text)
    irc.passes.run(m, "fuse-elementwise")
    assert _count(m, "graph.fused") == 1
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    np.testing.assert_allclose(interpret(m, "f", x), interpret(irc.parse(text), "f", x), rtol=1e-6)


# -- memory planning ---------------------------------------------------------------------------------------


def _normalising_net(layers: int, rows: int = 64, cols: int = 256) -> str:
    t = f"tensor<{rows}x{cols}xf32>"
    lines = []
    prev = "%x"
    for i in range(layers):
        lines += [f"%m{i} = graph.reduce_mean {prev} {{axes = [1], keepdims}} : {t} to tensor<{rows}x1xf32>",
                  f"%b{i} = graph.broadcast %m{i} : tensor<{rows}x1xf32> to {t}",
                  f"%d{i} = arith.subf {prev}, %b{i} : {t}",
                  f"%h{i} = math.tanh %d{i} : {t}"]
        prev = f"%h{i}"
    return (f"func.func @net(%x: {t}) -> {t} {{\n  " + "\n  ".join(lines) +
            f"\n  func.return {prev} : {t}\n}}\n")


def test_planned_peak_of_a_deep_network_is_two_activations():
    layers, rows, cols = 16, 64, 256
    m = irc.parse(_normalising_net(layers, rows, cols))
    irc.passes.run(m, "fuse-elementwise,tensor-to-loops,plan-memory")
    activation = rows * cols * 4
    func = m.functions[0]
    arena = [op for op in func.walk() if op.name == "memref.alloc"]
    assert len(arena) == 1
    peak = arena[0].results[0].type.shape[0]
    assert peak <= 2 * activation, (peak, activation)
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros_like(x)
    interpret(m, "net", x, out)
    np.testing.assert_allclose(out, interpret(irc.parse(_normalising_net(layers, rows, cols)), "net", x),
                               rtol=1e-5, atol=1e-6)


def test_plan_memory_reports_peak_against_no_reuse():
    from irc.passmanager import Statistics, make_pass

    m = irc.parse(_normalising_net(8))
    irc.passes.run(m, "fuse-elementwise,tensor-to-loops")
    stats = Statistics()
    make_pass("plan-memory").run(m, stats)
    assert stats.counters["peak-bytes"] < stats.counters["unplanned-bytes"]
    assert stats.counters["buffers-planned"] >= 8


def test_arena_argument_mode_adds_a_parameter():
    m = irc.parse(_normalising_net(3, 8, 16))
    irc.passes.run(m, "fuse-elementwise,tensor-to-loops,plan-memory{arena=argument}")
    func = m.functions[0]
    assert func.args[-1].type.element_type is irc.types.i8
    assert func.attributes["arena_bytes"].value == func.args[-1].type.shape[0]


def test_assign_offsets_never_overlaps_live_buffers():
    from irc.passes.plan_memory import Interval, assign_offsets

    rng = random.Random(5)
    for _ in range(200):
        ivs = []
        for _ in range(rng.randint(1, 12)):
            s = rng.randint(0, 20)
            ivs.append(Interval(None, None, s, s + rng.randint(0, 10), 64 * rng.randint(1, 6)))
        peak = assign_offsets(ivs)
        for a in ivs:
            assert a.offset % 64 == 0 and a.offset + a.size <= peak
            for b in ivs:
                if a is not b and a.start <= b.end and b.start <= a.end:
                    assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset
        assert peak >= max(sum(i.size for i in ivs if i.start <= t <= i.end) for t in range(32))


# -- shape specialisation and the API ---------------------------------------------------------------------

DYNAMIC = """
func.func @f(%a: tensor<?x?xf32>, %c: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?xf32>, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %a, %c0 : tensor<?x?xf32>
  %m = tensor.dim %a, %c1 : tensor<?x?xf32>
  %cb = graph.broadcast %c, %n, %m : tensor<?xf32> to tensor<?x?xf32>
  %s = arith.addf %a, %cb : tensor<?x?xf32>
  %t = math.tanh %s : tensor<?x?xf32>
  %r = graph.reduce_sum %t {axes = [0]} : tensor<?x?xf32> to tensor<?xf32>
  %k = arith.constant 2.0 : f32
  func.return %t, %r, %k : tensor<?x?xf32>, tensor<?xf32>, f32
}
"""


def test_specialize_shapes_makes_every_type_static():
    m = irc.parse(DYNAMIC)
    irc.passes.run(m, "specialize-shapes{func=f shapes=4x8xf32;8xf32}")
    for op in m.walk():
        for r in op.results:
            if isinstance(r.type, irc.types.TensorType):
                assert r.type.has_static_shape, op
    assert str(m.functions[0].function_type) == "(tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, f32)"


def test_specialize_shapes_reports_shapes_that_do_not_fit():
    m = irc.parse(DYNAMIC)
    with pytest.raises(irc.IRError, match="cannot broadcast"):
        irc.passes.run(m, "specialize-shapes{func=f shapes=4x8xf32;5xf32}")
    with pytest.raises(irc.passes.PipelineError, match="bad type"):
        irc.passes.run(m, "specialize-shapes{func=f shapes=4x8xq;5xf32}")


def test_compiled_tensor_function_specialises_per_shape_and_checks_arguments():
    exe = irc.compile(irc.parse(DYNAMIC))
    rng = np.random.default_rng(1)
    for shape in [(4, 8), (1, 3), (4, 8), (7, 1)]:
        a = rng.standard_normal(shape).astype(np.float32)
        c = rng.standard_normal(shape[1]).astype(np.float32)
        t, r, k = exe.f(a, c)
        np.testing.assert_allclose(t, np.tanh(a + c), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(r, np.tanh(a + c).sum(0), rtol=1e-5, atol=1e-5)
        assert k == 2.0
    assert len(exe.f._specializations) == 3
    a = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="parameter 'c' must have dtype float32"):
        exe.f(a, np.ones(3))
    with pytest.raises(ValueError, match="parameter 'a' must have shape"):
        exe.f(np.ones(3, np.float32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="cannot run on arguments of shapes"):
        exe.f(a, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        exe.f(a)


def test_out_arrays_are_written_in_place():
    exe = irc.compile(irc.parse(DYNAMIC))
    a = np.full((2, 3), 0.5, np.float32)
    c = np.zeros(3, np.float32)
    t, r = np.empty((2, 3), np.float32), np.empty(3, np.float32)
    got = exe.f(a, c, out=(t, r))
    assert got[0] is t and got[1] is r
    np.testing.assert_allclose(t, np.tanh(a))
    with pytest.raises(ValueError, match=r"out\[1\] must be"):
        exe.f(a, c, out=(t, np.empty(4, np.float32)))


def test_read_only_and_strided_inputs_are_accepted():
    exe = irc.compile(irc.parse(DYNAMIC))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    c = np.ones(2, np.float32)
    c.setflags(write=False)
    t, _, _ = exe.f(a, c)
    np.testing.assert_allclose(t, np.tanh(a + 1), rtol=1e-6)


# -- the BLAS path -------------------------------------------------------------------------------------

MATMUL = """
func.func @mm(%a: tensor<?x?x{t}>, %b: tensor<?x?x{t}>) -> tensor<?x?x{t}> {{
  %c = graph.matmul %a, %b : (tensor<?x?x{t}>, tensor<?x?x{t}>) -> tensor<?x?x{t}>
  func.return %c : tensor<?x?x{t}>
}}
"""


@pytest.mark.parametrize("elem", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(64, 33, 40), (1, 70, 500), (128, 2, 129)])
def test_blas_matmul_agrees_with_numpy(elem, shape):
    if not blas_runtime.available():
        pytest.skip("no BLAS gemm here (numpy's or scipy's)")
    m, k, n = shape
    dt = np.float32 if elem == "f32" else np.float64
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    exe = irc.compile(irc.parse(MATMUL.format(t=elem)), blas=True)
    module, _ = exe.mm.lower(((m, k), (k, n)))
    uses_blas = any(op.name == "func.call" for op in module.walk())
    assert uses_blas == (m * n * k >= 32 ** 3)
    tol = 1e-4 * max(k, 1) if elem == "f32" else 1e-12 * max(k, 1)
    np.testing.assert_allclose(exe.mm(a, b), a @ b, rtol=tol, atol=tol)


def test_blas_lowering_declares_the_gemm_once():
    m = irc.parse(MATMUL.format(t="f32"))
    irc.passes.run(m, "specialize-shapes{func=mm shapes=64x64xf32;64x64xf32},tensor-to-loops{blas=true}")
    decls = [f for f in m.functions if f.is_declaration]
    assert [f.sym_name for f in decls] == ["irc_blas_sgemm"]


# -- vectorisation -------------------------------------------------------------------------------------------


@pytest.mark.skipif(__import__("platform").machine().lower() not in ("x86_64", "amd64"),
                    reason="checks x86-64 vector instructions")
def test_fused_elementwise_loops_and_reductions_use_vector_instructions():
    import re

    from irc.runtime import aot

    exe = irc.compile(irc.parse("""
func.func @axpy(%a: tensor<?xf32>, %b: tensor<?xf32>, %c: tensor<?xf32>) -> tensor<?xf32> {
  %m = arith.mulf %a, %b : tensor<?xf32>
  %s = arith.addf %m, %c : tensor<?xf32>
  %r = arith.maximumf %s, %c : tensor<?xf32>
  func.return %r : tensor<?xf32>
}
func.func @rowmax(%a: tensor<?x?xf32>) -> tensor<?xf32> {
  %r = graph.reduce_max %a {axes = [1]} : tensor<?x?xf32> to tensor<?xf32>
  func.return %r : tensor<?xf32>
}
func.func @rowsum(%a: tensor<?x?xf32>) -> tensor<?xf32> {
  %r = graph.reduce_sum %a {axes = [1]} : tensor<?x?xf32> to tensor<?xf32>
  func.return %r : tensor<?xf32>
}"""))
    packed = r"\bv?{op}ps\s[^\n]*%[xyz]mm"  # packed single precision on a vector register
    module, _ = exe.axpy.lower(((4096,), (4096,), (4096,)))
    asm = aot.emit(module, "asm")
    assert re.search(packed.format(op="mul"), asm) and re.search(packed.format(op="max"), asm)
    module, _ = exe.rowmax.lower(((64, 1024),))
    assert re.search(packed.format(op="max"), aot.emit(module, "asm"))
    module, _ = exe.rowsum.lower(((64, 1024),))  # f32 summed in f64: packed double adds
    assert re.search(r"\bv?addpd\s[^\n]*%[xyz]mm", aot.emit(module, "asm"))


# -- threads ---------------------------------------------------------------------------------------------------


def _segments_in_interpreter(module, name, args, chunks: int, rng):
    """Run @name's segments (from split-parallel) in order, each parallel one as shuffled chunks."""
    func = next(f for f in module.functions if f.sym_name == name)
    for seg_name in (s.value for s in func.attributes["segments"].elements):
        seg = next(f for f in module.functions if f.sym_name == seg_name)
        bounds = seg.attributes.get("parallel_range")
        taken = [args[k.value] for k in seg.attributes["params"].elements]  # what the segment reads
        if bounds is None:
            interpret(module, seg_name, *taken)
            continue
        lb, ub, step = (e.value for e in bounds.elements)
        trips = -(-(ub - lb) // step)
        cuts = sorted({lb + step * (trips * i // chunks) for i in range(chunks)} | {ub})
        pieces = list(zip(cuts, cuts[1:]))
        rng.shuffle(pieces)
        for lo, hi in pieces:
            interpret(module, seg_name, *taken, lo, hi)


@pytest.mark.parametrize("seed", range(0, 40, 4))
def test_segments_run_in_any_chunk_order_equal_the_function(seed):
    elem = "f32" if seed % 2 else "f64"
    text = random_graph(seed, elem=elem)
    args = _inputs(seed, elem)
    module = irc.parse(text)
    irc.passes.run(module, "fuse-elementwise,tensor-to-loops,plan-memory{arena=argument},canonicalize,cse,"
                           "split-parallel")
    func = module.functions[0]
    assert "segments" in func.attributes
    arena = np.zeros(func.attributes["arena_bytes"].value if "arena_bytes" in func.attributes else 0, np.int8)
    extra = [arena] if "arena_bytes" in func.attributes else []
    expected = [np.zeros(SHAPE, args[0].dtype) for _ in range(2)]
    interpret(module, "f", *args, *expected, *extra)
    got = [np.zeros(SHAPE, args[0].dtype) for _ in range(2)]
    _segments_in_interpreter(module, "f", [*args, *got, *extra], 3, random.Random(seed))
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)


def _parallel_calls(function, shapes) -> list:
    """The calls of ``function``'s specialisation for ``shapes`` that run on threads (``chunks``)."""
    module, _ = function.lower(shapes)
    return [op.attributes["chunks"].value for f in module.functions if not f.is_declaration for op in f.walk()
            if op.name == "func.call" and "chunks" in op.attributes]


def test_threads_split_parallel_loops_and_agree_with_one_thread():
    text = _normalising_net(4, 512, 256)
    x = np.random.default_rng(3).standard_normal((512, 256)).astype(np.float32)
    one = irc.compile(irc.parse(text), threads=1).net(x)
    exe = irc.compile(irc.parse(text), threads=3)
    np.testing.assert_array_equal(exe.net(x), one)
    assert _parallel_calls(exe.net, ((512, 256),))
    assert "irc.parallel_for" not in aot.emit(exe.net.lower(((512, 256),))[0], "llvm")  # objects: self-contained
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        irc.compile(irc.parse(text), threads=0)


def test_a_fault_in_a_worker_s_chunk_raises_in_the_caller_and_the_threads_go_on():
    """A parallel loop's chunks run on irc's thread pool (cpu/pool.py): a fault in a chunk the
    caller did not run raises what one thread raises, and the next calls, from several Python
    threads at once (one gets the pool, the others run their loops themselves), still get
    their own results."""
    import threading

    text = """
func.func @div(%a: tensor<512x256xi32>, %b: tensor<512x256xi32>) -> tensor<512x256xi32> {
  %q = arith.divsi %a, %b : tensor<512x256xi32>
  func.return %q : tensor<512x256xi32>
}"""
    rng = np.random.default_rng(8)
    a = rng.integers(-1000, 1000, (512, 256), dtype=np.int32)
    b = rng.integers(1, 50, (512, 256), dtype=np.int32)
    one, three = irc.compile(irc.parse(text), threads=1), irc.compile(irc.parse(text), threads=3)
    np.testing.assert_array_equal(three.div(a, b), one.div(a, b))
    assert _parallel_calls(three.div, ((512, 256), (512, 256)))
    zero = b.copy()
    zero[-1, -1] = 0  # in the last chunk: a worker's
    with pytest.raises(Exception) as want:
        one.div(a, zero)
    with pytest.raises(type(want.value)) as got:
        three.div(a, zero)
    assert str(got.value) == str(want.value)
    results = {}

    def call(k):
        bk = b + k
        results[k] = (three.div(a, bk), one.div(a, bk))
    callers = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    for got_k, want_k in results.values():
        np.testing.assert_array_equal(got_k, want_k)
    assert len(results) == 4


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_child_starts_its_own_workers():
    """The child of a fork has none of irc's worker threads: its threaded calls start new ones
    rather than wait for the parent's forever."""
    import os

    text = """
func.func @add(%a: tensor<512x256xf32>, %b: tensor<512x256xf32>) -> tensor<512x256xf32> {
  %s = arith.addf %a, %b : tensor<512x256xf32>
  func.return %s : tensor<512x256xf32>
}"""
    exe = irc.compile(irc.parse(text), threads=2)
    a = np.random.default_rng(9).standard_normal((512, 256)).astype(np.float32)
    for _ in range(2):  # the first call specialises; the second runs on irc's workers
        np.testing.assert_array_equal(exe.add(a, a), a + a)
    pid = os.fork()
    if pid == 0:
        import signal

        signal.signal(signal.SIGALRM, lambda *_: os._exit(4))  # waiting for a worker that is not there
        signal.alarm(30)
        os._exit(0 if np.array_equal(exe.add(a, 2 * a), a + 2 * a) else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _mlp(layers: int, batch: int, width: int) -> str:
    t, w = f"tensor<{batch}x{width}xf32>", f"tensor<{width}x{width}xf32>"
    params = ", ".join(f"%w{i}: {w}, %b{i}: tensor<{width}xf32>" for i in range(layers))
    lines, h = [], "%x"
    for i in range(layers):
        lines += [f"%m{i} = graph.matmul {h}, %w{i} : ({t}, {w}) -> {t}",
                  f"%bb{i} = graph.broadcast %b{i} : tensor<{width}xf32> to {t}",
                  f"%s{i} = arith.addf %m{i}, %bb{i} : {t}",
                  f"%z{i} = arith.constant dense<0.0> : {t}",
                  f"%h{i} = arith.maximumf %s{i}, %z{i} : {t}"]
        h = f"%h{i}"
    return f"func.func @mlp(%x: {t}, {params}) -> {t} {{\n  " + "\n  ".join(lines) + f"\n  func.return {h} : {t}\n}}\n"


def test_mlp_forward_plans_two_buffers_with_blas():
    """MXNet's observation: an n-layer forward pass needs 2 buffers, not n."""
    if not blas_runtime.available():
        pytest.skip("no BLAS gemm here (numpy's or scipy's)")
    layers, batch, width = 6, 32, 64
    exe = irc.compile(irc.parse(_mlp(layers, batch, width)), blas=True, threads=1)
    _, func = exe.mlp.lower(((batch, width),) + ((width, width), (width,)) * layers)
    # Two buffers in all: the layers alternate between one arena activation and the output,
    # which is free until the last layer writes it.
    assert func.attributes["arena_bytes"].value <= batch * width * 4
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((batch, width)).astype(np.float32)]
    for _ in range(layers):
        args += [(rng.standard_normal((width, width)) / 8).astype(np.float32),
                 rng.standard_normal(width).astype(np.float32)]
    h = args[0]
    for i in range(layers):
        h = np.maximum(h @ args[1 + 2 * i] + args[2 + 2 * i], 0)
    np.testing.assert_allclose(exe.mlp(*args), h, rtol=1e-4, atol=1e-4)


def test_math_approx_stays_exact_under_fast_math():
    """The approximations' rounding steps carry fastmath = "none", so LLVM cannot fold them."""
    if "math-approx" not in irc.passes.PASSES:
        pytest.skip("math-approx is not registered")
    src = """
func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  %e = math.exp %a : tensor<?xf32>
  func.return %e : tensor<?xf32>
}"""
    x = np.linspace(-80, 80, 20001).astype(np.float32)
    ref = np.exp(x.astype(np.float64))
    for fast in (False, True):
        got = irc.compile(irc.parse(src), fast_math=fast, cache=False).f(x).astype(np.float64)
        ulps = np.abs(got - ref) / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        assert ulps.max() <= 2, (fast, ulps.max())


def test_a_reduction_over_a_fused_broadcast_knows_how_many_copies_it_sums():
    """Found by irc.testing.tensor_programs (program 101378): the broadcast dimension a
    fused reduction sums over has no operand, so the fused op records its size."""
    text = """
func.func @f(%z: tensor<f64>) -> tensor<1xf64> {
  %s = math.sin %z : tensor<f64>
  %b = graph.broadcast %s : tensor<f64> to tensor<8xf64>
  %r = graph.reduce_sum %b {axes = [0], keepdims} : tensor<8xf64> to tensor<1xf64>
  func.return %r : tensor<1xf64>
}"""
    z = np.array(1.25)
    expected = interpret(irc.parse(text), "f", z)
    m = irc.parse(text)
    irc.passes.run(m, "fuse-elementwise")
    fused = next(op for op in m.walk() if op.name == "graph.fused")
    assert fused.declared_domain == (8,)
    np.testing.assert_allclose(interpret(m, "f", z), expected)
    np.testing.assert_allclose(irc.compile(irc.parse(text)).f(z), expected)
    np.testing.assert_allclose(expected, [8 * np.sin(1.25)])


def test_no_in_place_write_over_memory_the_op_also_reads_elsewhere():
    """%r reads %t's memory at the element it writes and, through views (reshapes share their
    operand's buffer) and a transpose, at others: the result must be %t + %t^T exactly."""
    text = """
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %t = math.tanh %x : tensor<4x4xf32>
  %v = graph.reshape %t : tensor<4x4xf32> to tensor<16xf32>
  %w = graph.reshape %v : tensor<16xf32> to tensor<4x4xf32>
  %tt = graph.transpose %w {perm = [1, 0]} : tensor<4x4xf32> to tensor<4x4xf32>
  %r = arith.addf %t, %tt : tensor<4x4xf32>
  func.return %r : tensor<4x4xf32>
}"""
    x = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    expected = np.tanh(x) + np.tanh(x).T
    np.testing.assert_allclose(irc.compile(irc.parse(text)).f(x), expected, rtol=1e-6)


# -- out= that shares memory with an input (issue 11, item 5) ---------------------------------------

ALIASING = """
func.func @tr(%x: tensor<?x?xf64>) -> tensor<?x?xf64> {
  %t = graph.transpose %x {perm = [1, 0]} : tensor<?x?xf64> to tensor<?x?xf64>
  func.return %t : tensor<?x?xf64>
}
func.func @mm(%a: tensor<?x?xf64>, %b: tensor<?x?xf64>) -> tensor<?x?xf64> {
  %c = graph.matmul %a, %b : (tensor<?x?xf64>, tensor<?x?xf64>) -> tensor<?x?xf64>
  func.return %c : tensor<?x?xf64>
}
func.func @ew(%x: tensor<?xf64>, %y: tensor<?xf64>) -> tensor<?xf64> {
  %e = math.exp %x : tensor<?xf64>
  %m = arith.mulf %e, %y : tensor<?xf64>
  %s = arith.addf %m, %x : tensor<?xf64>
  func.return %s : tensor<?xf64>
}
func.func @centre(%x: tensor<1000xf64>) -> tensor<1000xf64> {
  %m = graph.reduce_mean %x {axes = [0], keepdims} : tensor<1000xf64> to tensor<1xf64>
  %b = graph.broadcast %m : tensor<1xf64> to tensor<1000xf64>
  %d = arith.subf %x, %b : tensor<1000xf64>
  func.return %d : tensor<1000xf64>
}
func.func @two(%x: tensor<?xf64>) -> (tensor<?xf64>, tensor<?xf64>) {
  %n = arith.negf %x : tensor<?xf64>
  func.return %n, %x : tensor<?xf64>, tensor<?xf64>
}
"""


@pytest.fixture(scope="module")
def aliasing():
    return irc.compile(irc.parse(ALIASING), cache=False)


def test_out_aliasing_an_input_gives_numpys_answer(aliasing):
    exe = aliasing
    x = np.arange(12.0).reshape(3, 4)[:, :3].copy()  # square
    want = x.T.copy()
    assert exe.tr(x, out=x) is x and np.array_equal(x, want)
    a, b = np.arange(16.0).reshape(4, 4), np.arange(16.0).reshape(4, 4)[::-1].copy() + 1
    want = a @ b
    exe.mm(a, b, out=a)
    assert np.array_equal(a, want)
    a = np.arange(16.0).reshape(4, 4) + 1
    want = b @ a
    exe.mm(b, a, out=a)  # the second operand
    assert np.array_equal(a, want)
    a = np.arange(16.0).reshape(4, 4) + 1
    want = a @ a
    exe.mm(a, a, out=a)  # both operands
    assert np.array_equal(a, want)
    x = np.linspace(-1, 1, 1000)
    want = x - x.mean()
    exe.centre(x, out=x)  # a reduction, then an elementwise pass
    assert np.allclose(x, want)


def test_out_partially_overlapping_an_input(aliasing):
    base = np.linspace(0, 1, 1010)
    x, out = base[10:], base[:1000]  # out starts 10 elements before x
    want = aliasing.ew(x.copy(), x.copy())
    aliasing.ew(x, x, out=out)
    assert np.array_equal(out, want)
    base = np.linspace(0, 1, 1010)
    x, out = base[:1000], base[10:]  # out starts 10 elements after x
    want = aliasing.ew(x.copy(), x.copy())
    aliasing.ew(x, x, out=out)
    assert np.array_equal(out, want)


def test_elementwise_in_place_stays_zero_copy(aliasing):
    """``f(x, out=x)`` for an elementwise f reads x[i] just before writing out[i]: no copy needed."""
    from irc.runtime.out_aliasing import separate

    x, y = np.linspace(0, 1, 1000), np.linspace(1, 2, 1000)
    want = aliasing.ew(x.copy(), y)  # the same machine code without aliasing
    got = aliasing.ew(x, y, out=x)
    assert got is x and np.array_equal(x, want)
    spec = next(iter(aliasing.ew._specializations.values()))
    assert (0, 0) in spec.in_place and (0, 1) in spec.in_place
    values = separate("ew", [x, y], [x], spec.in_place)
    assert values[0] is x and values[1] is y
    # The transpose and the matmul are not safe in place: they read an input from a copy.
    for f in (aliasing.tr, aliasing.mm):
        assert all(not s.in_place for s in f._specializations.values())


def test_outputs_sharing_memory_are_refused(aliasing):
    x = np.ones(8)
    with pytest.raises(ValueError, match="share memory"):
        aliasing.two(x, out=(x, x))


def test_the_fast_call_path_gives_the_checked_paths_answers():
    """A call with arrays of shapes already specialised for goes through ``_fast_call`` (addresses
    and one C call); the aliasing cases above, read-only and strided arrays, other dtypes and
    outputs that overlap each other must come out as the full path would have them."""
    from irc.runtime import tensor_function as tf

    exe = irc.compile(irc.parse(ALIASING), cache=False)
    a, b = np.arange(16.0).reshape(4, 4) + 1, np.arange(16.0).reshape(4, 4)[::-1].copy() + 1
    exe.mm(a.copy(), b.copy())
    exe.ew(np.ones(1000), np.ones(1000))
    exe.two(np.ones(8))
    assert tf._SLOW is not exe.mm._fast_call((a, b), None)  # specialised: the fast path runs it
    assert exe.mm._fast_call((a.tolist(), b), None) is tf._SLOW  # a list: no shape to look up
    for out in (None, np.empty((4, 4))):  # f32: the generated calls hand it to the checks
        with pytest.raises(TypeError, match="dtype float64"):
            exe.mm._fast_call((a.astype(np.float32), b), out)
    frozen = a.copy()
    frozen.flags.writeable = False
    for args in [(a[:, ::-1], b), (frozen, b)]:  # buffers the addresses refuse: strided, read-only
        # the specialisation's generated calls, with out= and without, hand them to the full checks
        given = np.full((4, 4), np.nan)
        assert exe.mm._fast_call(args, given) is given
        np.testing.assert_array_equal(given, args[0] @ b)
        np.testing.assert_array_equal(exe.mm._fast_call(args, None), args[0] @ b)
        np.testing.assert_array_equal(exe.mm(*args), args[0] @ b)  # the full path copies them
    for out_is in ("first", "second", "both"):
        x, y = a.copy(), b.copy()
        want = x @ y if out_is != "both" else x @ x
        exe.mm(x, x if out_is == "both" else y, out=y if out_is == "second" else x)
        np.testing.assert_array_equal(y if out_is == "second" else x, want)
    x, y = np.linspace(0, 1, 1000), np.linspace(1, 2, 1000)
    want = exe.ew(x.copy(), y)
    assert exe.ew(x, y, out=x) is x and np.array_equal(x, want)  # in place, zero copy
    base = np.linspace(0, 1, 1010)
    x, out = base[10:], base[:1000]
    want = exe.ew(x.copy(), x.copy())
    exe.ew(x, x, out=out)
    np.testing.assert_array_equal(out, want)
    x = np.ones(8)
    with pytest.raises(ValueError, match="share memory"):
        exe.two(x, out=(x, x))
    with pytest.raises(TypeError, match="dtype float64"):
        exe.mm(a.astype(np.float32), b)
    for wrong in (np.empty((4, 4), np.float32), np.empty((4, 5)), np.empty((4, 4))[:, ::-1], [np.empty((4, 4))] * 2):
        with pytest.raises((ValueError, TypeError), match="out"):
            exe.mm(a, b, out=wrong)  # the generated out= call refuses, the checks explain
    pair = (np.empty(8), np.empty(8))
    for wrong in (np.zeros((2, 8)), np.array([np.zeros(8), np.zeros(8)], dtype=object)):
        with pytest.raises(TypeError, match="must give 2 arrays"):  # one array is not two outputs
            exe.two(np.ones(8), out=wrong)
    for given in (pair, list(pair)):  # a tuple or a list: the same arrays back, filled
        got = exe.two(np.full(8, 2.0), out=given)
        assert type(got) is tuple and all(g is p for g, p in zip(got, pair))
        assert (pair[0] == -2).all() and (pair[1] == 2).all()


# -- result shapes given by scalar parameters (issue 11, item 14f) ----------------------------------

SIZED_BY_SCALARS = """
func.func @splat(%x: f32, %n: index) -> tensor<?xf32> {
  %t = graph.splat %x, %n : f32 to tensor<?xf32>
  func.return %t : tensor<?xf32>
}
func.func @iota(%n: index) -> tensor<?xi64> {
  %two = arith.constant 2 : index
  %m = arith.muli %n, %two : index
  %t = graph.iota %m {axis = 0} : tensor<?xi64>
  func.return %t : tensor<?xi64>
}
func.func @reshape(%x: tensor<?xf32>, %r: index, %c: index) -> tensor<?x?xf32> {
  %t = graph.reshape %x, %r, %c : tensor<?xf32> to tensor<?x?xf32>
  %y = math.exp %t : tensor<?x?xf32>
  func.return %y : tensor<?x?xf32>
}
"""


def test_result_shapes_from_scalar_parameters():
    module = irc.parse(SIZED_BY_SCALARS)
    exe = irc.compile(module, cache=False)
    x = np.arange(6, dtype=np.float32)
    for name, args in [("splat", (1.5, 3)), ("splat", (2.0, 0)), ("iota", (4,)), ("iota", (1,)),
                       ("reshape", (x, 2, 3)), ("reshape", (x, 3, 2)), ("reshape", (x, 6, 1))]:
        got, want = getattr(exe, name)(*args), interpret(module, name, *args)
        assert got.shape == want.shape and got.dtype == want.dtype, (name, args)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert exe.splat.size_params == [1] and exe.reshape.size_params == [1, 2]
    out = np.empty((3, 2), np.float32)
    assert exe.reshape(x, 3, 2, out=out) is out
    with pytest.raises(ValueError, match="negative size"):
        exe.splat(1.0, -1)
    with pytest.raises(ValueError, match=r"shapes \[\[6\], 4, 3\].*cannot reshape"):
        exe.reshape(x, 4, 3)


def test_the_fast_call_path_takes_a_zero_byte_arena():
    """A zero-size slice leaves a specialisation an arena of 0 bytes; the fast path took its
    address with ctypes.c_char.from_buffer, which needs one byte (fuzz program 509)."""
    text = """
func.func @main(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>, %z: tensor<8xf32>) -> (tensor<1x1xf32>, tensor<8xf32>, tensor<2x8xf32>) {
  %v0 = graph.log_softmax %z {axis = 0} : tensor<8xf32>
  %v1 = math.tanh %v0 : tensor<8xf32>
  %v2 = graph.slice %y {offsets = [0, 0], sizes = [0, 1], strides = [1, 1]} : tensor<2x8xf32> to tensor<0x1xf32>
  %v3 = arith.subf %y, %x : tensor<2x8xf32>
  %v5 = graph.reduce_max %x {axes = [0, 1], keepdims} : tensor<2x8xf32> to tensor<1x1xf32>
  func.return %v5, %v1, %v3 : tensor<1x1xf32>, tensor<8xf32>, tensor<2x8xf32>
}"""
    module = irc.parse(text)
    exe = irc.compile(module)
    x, y = np.arange(16, dtype=np.float32).reshape(2, 8), np.ones((2, 8), np.float32)
    z = np.linspace(-1, 1, 8, dtype=np.float32)
    want = irc.interpret(module, "main", x, y, z)
    for _ in range(2):  # the second call takes the fast path
        outs = (np.empty((1, 1), np.float32), np.empty(8, np.float32), np.empty((2, 8), np.float32))
        got = exe.main(x, y, z, out=outs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    assert [s.arena_bytes for s in exe.main._specializations.values()] == [0]


def test_outputs_that_are_the_inputs_buffers_get_code_planned_for_it():
    """A call whose out= are its inputs' own buffers (donated parameters) is compiled a second
    time with no temporaries in the outputs, when that saves copying inputs first; the
    answers are those of separate buffers."""
    text = """
func.func @step(%w1: tensor<64x64xf32>, %w2: tensor<64x64xf32>, %x: tensor<32x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %h = graph.matmul %x, %w1 : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
  %t = math.tanh %h : tensor<32x64xf32>
  %xt = graph.transpose %x {perm = [1, 0]} : tensor<32x64xf32> to tensor<64x32xf32>
  %g1 = graph.matmul %xt, %t : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
  %n1 = arith.subf %w1, %g1 : tensor<64x64xf32>
  %ht = graph.transpose %t {perm = [1, 0]} : tensor<32x64xf32> to tensor<64x32xf32>
  %g2 = graph.matmul %ht, %h : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
  %n2 = arith.subf %w2, %g2 : tensor<64x64xf32>
  func.return %n1, %n2 : tensor<64x64xf32>, tensor<64x64xf32>
}"""
    from irc.runtime import out_aliasing

    module = irc.parse(text)
    exe = irc.compile(module)
    rng = np.random.default_rng(4)
    w1, w2 = (rng.standard_normal((64, 64)).astype(np.float32) * 0.1 for _ in range(2))
    x = rng.standard_normal((32, 64)).astype(np.float32)
    for _ in range(3):
        want = irc.interpret(module, "step", w1, w2, x)
        separate = exe.step(w1.copy(), w2.copy(), x)
        got = exe.step(w1, w2, x, out=(w1, w2))
        assert got[0] is w1 and got[1] is w2
        for g, s, w in zip(got, separate, want):
            np.testing.assert_array_equal(g, s)
            # The weights grow to thousands by the third step, so an element of w - g can be a
            # cancellation of terms that large: float32 rounding of those, not a relative error.
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6 * np.abs(w).max())
    specs = exe.step._specializations
    aliased = [s for key, s in specs.items() if isinstance(key, tuple) and "aliased" in key]
    assert aliased and not out_aliasing.to_copy([w1, w2, x], [w1, w2], aliased[0].in_place)


# -- outline-loops in the pipeline --------------------------------------------------------------------

TWIN_LAYERS = """
func.func @layers(%x: tensor<64x32xf32>, %w0: tensor<32x32xf32>, %b0: tensor<32xf32>,
                  %w1: tensor<32x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x32xf32>,
                  %b2: tensor<32xf32>) -> tensor<64x32xf32> {
  %m0 = graph.matmul %x, %w0 : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
  %s0 = graph.broadcast %b0 : tensor<32xf32> to tensor<64x32xf32>
  %a0 = arith.addf %m0, %s0 : tensor<64x32xf32>
  %h0 = math.tanh %a0 : tensor<64x32xf32>
  %m1 = graph.matmul %h0, %w1 : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
  %s1 = graph.broadcast %b1 : tensor<32xf32> to tensor<64x32xf32>
  %a1 = arith.addf %m1, %s1 : tensor<64x32xf32>
  %h1 = math.tanh %a1 : tensor<64x32xf32>
  %m2 = graph.matmul %h1, %w2 : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
  %s2 = graph.broadcast %b2 : tensor<32xf32> to tensor<64x32xf32>
  %a2 = arith.addf %m2, %s2 : tensor<64x32xf32>
  %h2 = math.tanh %a2 : tensor<64x32xf32>
  func.return %h2 : tensor<64x32xf32>
}

func.func @twins(%x: tensor<1000xf64>, %y: tensor<1000xf64>) -> (tensor<1000xf64>, tensor<1000xf64>) {
  %a = math.exp %x : tensor<1000xf64>
  %b = math.exp %y : tensor<1000xf64>
  func.return %a, %b : tensor<1000xf64>, tensor<1000xf64>
}
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_layers_that_differ_only_in_buffers_share_one_compiled_loop_nest(threads):
    """The layers' bias-and-tanh nests become calls of one function (outline-loops), on one
    thread and split over two; the result is the interpreter's."""
    module = irc.parse(TWIN_LAYERS)
    exe = irc.compile(module, threads=threads)
    rng = np.random.default_rng(7)
    args = [rng.standard_normal((64, 32)).astype(np.float32)]
    for _ in range(3):
        args += [(rng.standard_normal((32, 32)) * 0.3).astype(np.float32), rng.standard_normal(32).astype(np.float32)]
    lowered, _ = exe.layers.lower(tuple(a.shape for a in args))
    text = lowered.print()
    assert text.count("func.call @layers.loop0(") >= 2 and "attributes {noinline}" in text
    want = irc.interpret(module, "layers", *args)
    np.testing.assert_allclose(exe.layers(*args), want, rtol=2e-5, atol=2e-6)


def test_outputs_written_by_shared_nests_are_still_written_in_place():
    """The in-place analysis reads the function before its nests become calls: ``out=`` the
    inputs stays zero-copy."""
    exe = irc.compile(irc.parse(TWIN_LAYERS))
    x, y = np.linspace(0, 1, 1000), np.linspace(1, 2, 1000)
    want = (np.exp(x), np.exp(y))
    assert "func.call @twins.loop0(" in exe.twins.lower(((1000,), (1000,)))[0].print()
    spec = exe.twins.specialization(((1000,), (1000,)), (), aliased=True)
    assert {(0, 0), (1, 1)} <= spec.in_place
    a, b = exe.twins(x, y, out=(x, y))
    assert a is x and b is y
    np.testing.assert_allclose(x, want[0], rtol=1e-6)
    np.testing.assert_allclose(y, want[1], rtol=1e-6)


EARLY_READS = """
func.func @update(%b: tensor<256xf32>, %x: tensor<64x256xf32>) -> (tensor<256xf32>, tensor<64x256xf32>) {
  %s = graph.broadcast %b : tensor<256xf32> to tensor<64x256xf32>
  %h = arith.addf %x, %s : tensor<64x256xf32>
  %t = math.tanh %h : tensor<64x256xf32>
  %g = graph.reduce_sum %t {axes = [0]} : tensor<64x256xf32> to tensor<256xf32>
  %c = arith.constant 0.1 : f32
  %lr = graph.splat %c : f32 to tensor<256xf32>
  %d = arith.mulf %g, %lr : tensor<256xf32>
  %nb = arith.subf %b, %d : tensor<256xf32>
  func.return %nb, %t : tensor<256xf32>, tensor<64x256xf32>
}
"""


def test_an_input_read_by_earlier_loops_is_updated_in_place():
    """A bias read by the forward pass and overwritten by its update at the end: the update's
    loop is the output's only writer, so the earlier reads see the old values and ``out=``
    the bias needs no copy; the result is what it is without the overlap."""
    exe = irc.compile(irc.parse(EARLY_READS))
    rng = np.random.default_rng(3)
    b, x = rng.standard_normal(256).astype(np.float32), rng.standard_normal((64, 256)).astype(np.float32)
    want_b, want_t = exe.update(b.copy(), x)
    spec = exe.update.specialization(((256,), (64, 256)), (), aliased=True)
    assert (0, 0) in spec.in_place
    t = np.empty((64, 256), np.float32)
    got_b, got_t = exe.update(b, x, out=(b, t))
    assert got_b is b
    np.testing.assert_array_equal(b, want_b)
    np.testing.assert_array_equal(t, want_t)


def test_optsize_functions_reach_llvm_as_optsize_and_compute_the_same():
    """optsize-small-loops marks a function; the CPU backend gives its body LLVM's optsize,
    and the code computes what the interpreter does."""
    import re

    from irc.runtime.cpu.translate import translate
    from irc.runtime.executable import prepare

    text = """
func.func @f(%a: memref<64xf32>) attributes {optsize} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %r = scf.for %i = %c0 to %c64 step %c1 iter_args(%acc = %c0) -> (index) {
    %x = memref.load %a[%i] : memref<64xf32>
    %y = arith.mulf %x, %x : f32
    memref.store %y, %a[%i] : memref<64xf32>
    %n = arith.addi %acc, %c1 : index
    scf.yield %n : index
  }
  func.return
}
func.func @g(%a: memref<64xf32>) {
  func.return
}"""
    llvm_ir = str(translate(prepare(irc.parse(text), 2)).module)
    assert re.search(r'^define internal [^\n]*"f\.body"\([^\n]*\) [^\n]*optsize', llvm_ir, re.M)
    assert not re.search(r'^define internal [^\n]*"g\.body"\([^\n]*\) [^\n]*optsize', llvm_ir, re.M)
    a = np.linspace(-2, 2, 64).astype(np.float32)
    expected = a.copy()
    interpret(irc.parse(text), "f", expected)
    irc.compile(irc.parse(text)).f(a)
    np.testing.assert_array_equal(a, expected)


def test_a_call_that_finds_the_pool_busy_runs_its_loops_itself():
    """While another Python thread holds irc's thread pool and its only worker (a job whose
    chunks wait), a threaded call does not wait for either: it runs its parallel loops itself,
    by the Python wrappers' path and by the fast path of C arguments alike."""
    import ctypes
    import threading

    from irc.runtime.cpu import pool

    src = """
func.func @f(%x: tensor<400000xf32>) -> tensor<400000xf32> {
  %two = arith.constant dense<2.0> : tensor<400000xf32>
  %y = arith.mulf %x, %two : tensor<400000xf32>
  %z = math.sqrt %y : tensor<400000xf32>
  func.return %z : tensor<400000xf32>
}"""
    f = irc.compile(irc.parse(src), threads=2).f
    x = np.random.default_rng(0).random(400000).astype(np.float32)
    want = np.sqrt(x * np.float32(2))
    np.testing.assert_allclose(f(x), want, rtol=1e-6)
    assert _parallel_calls(f, ((400000,),)) == [2]
    started, release = threading.Semaphore(0), threading.Event()

    @ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    def block(ctx, lo, hi):
        started.release()
        release.wait(30)
        return 0

    run = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 3, *[ctypes.c_int64] * 4)(pool.address())
    statuses = (ctypes.c_int32 * 2)()
    holder = threading.Thread(target=run, args=(ctypes.cast(block, ctypes.c_void_p), None, statuses, 0, 2, 1, 2))
    holder.start()
    try:
        for _ in range(2):  # the holder's chunk and the worker's
            assert started.acquire(timeout=30)
        np.testing.assert_allclose(f(x), want, rtol=1e-6)  # the wrappers' path (a new array)
        out = np.empty_like(x)
        np.testing.assert_allclose(f(x, out=out), want, rtol=1e-6)
        assert not release.is_set()  # the calls did not wait for the pool
    finally:
        release.set()
        holder.join(30)
    assert not holder.is_alive()


def test_small_functions_stay_on_one_thread_whatever_the_threads():
    """Loops whose work would not repay a hand-off (MIN_WORK_PER_THREAD a chunk) get no chunks."""
    src = """
func.func @f(%x: tensor<3000xf32>) -> tensor<3000xf32> {
  %y = math.sqrt %x : tensor<3000xf32>
  %z = arith.mulf %y, %x : tensor<3000xf32>
  func.return %z : tensor<3000xf32>
}"""
    f = irc.compile(irc.parse(src), threads=2).f
    x = np.random.default_rng(1).random(3000).astype(np.float32)
    np.testing.assert_allclose(f(x), np.sqrt(x) * x, rtol=1e-6)
    assert _parallel_calls(f, ((3000,),)) == []


# -- numpy subclasses ----------------------------------------------------------------------------

SUBCLASSES = """
func.func @twice(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = arith.addf %a, %a : tensor<4xf32>
  func.return %r : tensor<4xf32>
}
func.func @double_first(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %v = memref.load %m[%c0] : memref<4xf32>
  %w = arith.addf %v, %v : f32
  memref.store %w, %m[%c0] : memref<4xf32>
  func.return
}
"""


def test_a_memmap_works_as_its_data_and_a_masked_array_is_refused(tmp_path):
    """``np.load(..., mmap_mode=...)`` gives a ``np.memmap``, an ndarray subclass: compiled
    functions and the interpreter take it as its memory (stores reach the file), for tensors,
    memrefs and ``out=``.  A masked array's mask cannot be honoured, so it is an error that says
    what to pass instead."""
    module = irc.parse(SUBCLASSES)
    exe = irc.compile(module, cache=False)
    m = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="w+", shape=(4,))
    m[:] = [1, 2, 3, 4]
    np.testing.assert_array_equal(exe.twice(m), [2, 4, 6, 8])
    np.testing.assert_array_equal(irc.interpret(module, "twice", m), [2, 4, 6, 8])
    out = np.memmap(tmp_path / "out.bin", dtype=np.float32, mode="w+", shape=(4,))
    assert exe.twice(m, out=out) is out
    out.flush()
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", np.float32), [2, 4, 6, 8])
    exe.double_first(m)
    irc.interpret(module, "double_first", m)
    m.flush()
    np.testing.assert_array_equal(np.fromfile(tmp_path / "m.bin", np.float32), [4, 2, 3, 4])
    read_only = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="r", shape=(4,))
    np.testing.assert_array_equal(exe.twice(read_only), [8, 4, 6, 8])
    with pytest.raises(ValueError, match="parameter 'm' must be writeable"):
        exe.double_first(read_only)
    masked = np.ma.array([1, 2, 3, 4], dtype=np.float32, mask=[0, 1, 0, 0])
    for call in (lambda: exe.twice(masked), lambda: exe.double_first(masked),
                 lambda: irc.interpret(module, "twice", masked)):
        with pytest.raises(TypeError, match=r"is a masked array .*x\.filled"):
            call()
