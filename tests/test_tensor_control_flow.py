"""Tensors inside scf.if / scf.for / scf.while compile (bufferize.py + lowering/control_flow.py).

Every program is checked three ways: compiled (``irc.compile``) against the interpreter
running the tensor-level program (the oracle) and against numpy; and the bufferized,
memory-planned module run in the interpreter, which faults on a read of a freed buffer,
so a buffer freed too early or a carried buffer overwritten too soon shows up as a fault
or as wrong numbers."""

from __future__ import annotations

import irc.passes
import numpy as np
import pytest

import irc
from irc.interpreter import interpret

T = "tensor<4x8xf32>"
RNG = np.random.default_rng(7)
X = RNG.uniform(-1, 1, (4, 8)).astype(np.float32)
W = RNG.uniform(-1, 1, (4, 8)).astype(np.float32)


def _close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _loop_level(text: str, name: str, args: list, out_shapes: list):
    """The program after fusion, bufferization and memory planning, run in the interpreter."""
    module = irc.parse(text)
    irc.passes.run(module, "canonicalize,cse,fuse-elementwise,tensor-to-loops,plan-memory,canonicalize,cse,licm")
    outs = [np.zeros(s, np.float32) for s in out_shapes]
    scalars = interpret(module, name, *args, *outs)
    return module, outs, scalars


def check(text: str, name: str, args: list, numpy_result, tol=2e-5, **options):
    """Compiled == interpreter (tensor level) == numpy, and the loop level in the interpreter."""
    want = interpret(irc.parse(text), name, *args)
    want = list(want) if isinstance(want, tuple) else [want]
    ref = list(numpy_result) if isinstance(numpy_result, tuple) else [numpy_result]
    for w, r in zip(want, ref):
        _close(w, r, tol)
    got = irc.compile(irc.parse(text), **options)[name](*args)
    got = list(got) if isinstance(got, tuple) else [got]
    for g, w in zip(got, want):
        _close(g, w, tol)
    tensors = [np.shape(w) for w in want if isinstance(w, np.ndarray)]
    module, outs, _ = _loop_level(text, name, args, tensors)
    for g, w in zip(outs, [w for w in want if isinstance(w, np.ndarray)]):
        _close(g, w, tol)
    return module


def _ops(module, name):
    return sum(1 for op in module.walk() if op.name == name)


# -- scf.if -------------------------------------------------------------------------------------------

IF_RETURNED = f"""
func.func @f(%x: {T}, %p: f32) -> {T} {{
  %zero = arith.constant 0.0 : f32
  %c = arith.cmpf ogt, %p, %zero : f32
  %r = scf.if %c -> ({T}) {{
    %y = math.tanh %x : {T}
    scf.yield %y : {T}
  }} else {{
    %s = arith.mulf %x, %x : {T}
    %one = arith.constant dense<1.0> : {T}
    %y = arith.addf %s, %one : {T}
    scf.yield %y : {T}
  }}
  func.return %r : {T}
}}
"""


@pytest.mark.parametrize("p", [1.0, -1.0])
def test_if_with_a_tensor_result_writes_the_output_in_either_branch(p):
    expected = np.tanh(X) if p > 0 else X * X + 1
    module = check(IF_RETURNED, "f", [X, np.float32(p)], expected)
    assert _ops(module, "scf.if") == 1 and _ops(module, "memref.copy") == 0  # each branch writes %out


IF_USED_FURTHER = f"""
func.func @f(%x: {T}, %w: {T}, %p: f32) -> ({T}, tensor<4xf32>) {{
  %zero = arith.constant 0.0 : f32
  %c = arith.cmpf ogt, %p, %zero : f32
  %r = scf.if %c -> ({T}) {{
    scf.yield %w : {T}
  }} else {{
    %y = arith.mulf %x, %w : {T}
    scf.yield %y : {T}
  }}
  %s = arith.addf %r, %x : {T}
  %t = math.exp %s : {T}
  %sum = graph.reduce_sum %r {{axes = [1]}} : {T} to tensor<4xf32>
  func.return %t, %sum : {T}, tensor<4xf32>
}}
"""


@pytest.mark.parametrize("p", [1.0, -1.0])
def test_if_result_used_further_and_a_parameter_yielded(p):
    r = W if p > 0 else X * W
    check(IF_USED_FURTHER, "f", [X, W, np.float32(p)], (np.exp(r + X), r.sum(1)))


# -- scf.for --------------------------------------------------------------------------------------------

FOR_CLOSURE = f"""
func.func @f(%x: {T}, %w: {T}, %n: index) -> ({T}, {T}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = math.sin %w : {T}
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> ({T}) {{
    %m = arith.mulf %h, %b : {T}
    %a = arith.addf %m, %x : {T}
    %y = math.tanh %a : {T}
    scf.yield %y : {T}
  }}
  %after = arith.mulf %r, %x : {T}
  func.return %r, %after : {T}, {T}
}}
"""


def _for_closure(x, w, n):
    h = x
    for _ in range(n):
        h = np.tanh(h * np.sin(w) + x)
    return h, h * x


@pytest.mark.parametrize("n", [0, 1, 5])
def test_for_with_a_closure_and_the_result_and_init_read_after_the_loop(n):
    module = check(FOR_CLOSURE, "f", [X, W, n], _for_closure(X, W, n))
    (loop,) = [op for op in module.walk() if op.name == "scf.for" and op.operands[1] is module.functions[0].args[2]]
    assert not loop.results  # the carried tensor lives in a buffer, not in iter_args
    body_copies = [op for op in loop.walk() if op.name == "memref.copy"]
    assert body_copies == []  # the tanh writes the carried buffer in place


FOR_SWAP = f"""
func.func @f(%x: {T}, %w: {T}, %n: index) -> ({T}, {T}, f32) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s0 = arith.constant 0.0 : f32
  %half = arith.constant dense<0.5> : {T}
  %r:3 = scf.for %i = %c0 to %n step %c1 iter_args(%a = %x, %b = %w, %s = %s0) -> ({T}, {T}, f32) {{
    %sum = arith.addf %a, %b : {T}
    %next = arith.mulf %sum, %half : {T}
    %red = graph.reduce_sum %a {{axes = [0, 1]}} : {T} to tensor<f32>
    %e = tensor.extract %red[] : tensor<f32>
    %s1 = arith.addf %s, %e : f32
    scf.yield %b, %next, %s1 : {T}, {T}, f32
  }}
  func.return %r#0, %r#1, %r#2 : {T}, {T}, f32
}}
"""


def _swap(x, w, n):
    a, b, s = x.astype(np.float64), w.astype(np.float64), 0.0
    for _ in range(n):
        s += a.sum()
        a, b = b, (a + b) * 0.5
    return a, b, s


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_for_with_several_iter_args_that_swap_and_a_scalar(n):
    a, b, s = _swap(X, W, n)
    want = interpret(irc.parse(FOR_SWAP), "f", X, W, n)
    _close(want[0], a), _close(want[1], b), _close(want[2], s, 1e-4)
    got = irc.compile(irc.parse(FOR_SWAP)).f(X, W, n)
    for g, w in zip(got, want):
        _close(g, w)
    _, outs, scalar = _loop_level(FOR_SWAP, "f", [X, W, n], [(4, 8), (4, 8)])
    _close(outs[0], want[0]), _close(outs[1], want[1]), _close(scalar, want[2])


PURE_SWAP = f"""
func.func @f(%x: {T}, %w: {T}, %n: index) -> ({T}, {T}, {T}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r:3 = scf.for %i = %c0 to %n step %c1 iter_args(%a = %x, %b = %w, %c = %x) -> ({T}, {T}, {T}) {{
    %ab = arith.mulf %a, %b : {T}
    %c2 = arith.addf %c, %ab : {T}
    %s = math.sin %c2 : {T}
    scf.yield %b, %a, %s : {T}, {T}, {T}
  }}
  func.return %r#0, %r#1, %r#2 : {T}, {T}, {T}
}}
"""


@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_yield_that_reads_a_carried_buffer_an_earlier_copy_overwrites(n):
    """``yield %b, %a``: the copy of %b into %a's buffer comes first, so %a is read into a
    temporary before it (the end of the body is a parallel assignment)."""
    a, b, c = X, W, X
    for _ in range(n):
        c = np.sin(c + a * b)
        a, b = b, a
    module = check(PURE_SWAP, "f", [X, W, n], (a, b, c), tol=1e-4)
    assert _ops(module, "memref.copy") >= 3


NESTED = f"""
func.func @f(%x: {T}, %n: index, %m: index) -> {T} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %half = arith.constant dense<0.5> : {T}
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> ({T}) {{
    %inner = scf.for %j = %c0 to %m step %c1 iter_args(%g = %h) -> ({T}) {{
      %s = arith.mulf %g, %half : {T}
      %y = arith.addf %s, %x : {T}
      scf.yield %y : {T}
    }}
    %t = math.tanh %inner : {T}
    scf.yield %t : {T}
  }}
  func.return %r : {T}
}}
"""


@pytest.mark.parametrize("n,m", [(3, 4), (2, 0), (0, 3)])
def test_nested_loops(n, m):
    h = X
    for _ in range(n):
        g = h
        for _ in range(m):
            g = g * 0.5 + X
        h = np.tanh(g)
    check(NESTED, "f", [X, n, m], h)


IF_IN_LOOP = f"""
func.func @f(%x: {T}, %n: index) -> {T} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %scale = arith.constant dense<0.9> : {T}
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> ({T}) {{
    %k = arith.remui %i, %c2 : index
    %even = arith.cmpi eq, %k, %c0 : index
    %y = scf.if %even -> ({T}) {{
      %t = math.tanh %h : {T}
      scf.yield %t : {T}
    }} else {{
      %t = arith.mulf %h, %scale : {T}
      %u = arith.addf %t, %x : {T}
      scf.yield %u : {T}
    }}
    scf.yield %y : {T}
  }}
  func.return %r : {T}
}}
"""


@pytest.mark.parametrize("n", [0, 1, 6])
def test_if_inside_a_loop(n):
    h = X
    for i in range(n):
        h = np.tanh(h) if i % 2 == 0 else h * np.float32(0.9) + X
    check(IF_IN_LOOP, "f", [X, n], h)


LOOP_IN_IF = f"""
func.func @f(%x: {T}, %w: {T}, %n: index, %p: f32) -> ({T}, {T}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %c = arith.cmpf ogt, %p, %zero : f32
  %r:2 = scf.if %c -> ({T}, {T}) {{
    %l = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> ({T}) {{
      %m = arith.mulf %h, %w : {T}
      %y = math.sin %m : {T}
      scf.yield %y : {T}
    }}
    scf.yield %l, %x : {T}, {T}
  }} else {{
    %e = math.exp %x : {T}
    scf.yield %w, %e : {T}, {T}
  }}
  func.return %r#0, %r#1 : {T}, {T}
}}
"""


@pytest.mark.parametrize("p,n", [(1.0, 3), (1.0, 0), (-1.0, 3)])
def test_loop_inside_if(p, n):
    if p > 0:
        h = X
        for _ in range(n):
            h = np.sin(h * W)
        want = (h, X)
    else:
        want = (W, np.exp(X))
    check(LOOP_IN_IF, "f", [X, W, n, np.float32(p)], want)


# -- scf.while -------------------------------------------------------------------------------------------

WHILE = f"""
func.func @f(%x: {T}, %eps: f32) -> ({T}, index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %half = arith.constant dense<0.5> : {T}
  %r:2 = scf.while (%h = %x, %k = %c0) : ({T}, index) -> ({T}, index) {{
    %sq = arith.mulf %h, %h : {T}
    %n2 = graph.reduce_sum %sq {{axes = [0, 1]}} : {T} to tensor<f32>
    %v = tensor.extract %n2[] : tensor<f32>
    %more = arith.cmpf oge, %v, %eps : f32
    scf.condition(%more) %h, %k : {T}, index
  }} do {{
  ^bb0(%h2: {T}, %k2: index):
    %t = math.sin %h2 : {T}
    %y = arith.mulf %t, %half : {T}
    %k3 = arith.addi %k2, %c1 : index
    scf.yield %y, %k3 : {T}, index
  }}
  func.return %r#0, %r#1 : {T}, index
}}
"""


@pytest.mark.parametrize("eps", [1e-3, 1e-9, 1e6])
def test_while_until_the_norm_is_small(eps):
    h, k = X.astype(np.float64), 0
    while (h * h).sum() >= eps:
        h, k = np.sin(h) * 0.5, k + 1
    want = interpret(irc.parse(WHILE), "f", X, np.float32(eps))
    _close(want[0], h, 1e-5)
    assert want[1] == k
    got = irc.compile(irc.parse(WHILE)).f(X, np.float32(eps))
    _close(got[0], want[0])
    assert got[1] == k
    module, outs, scalar = _loop_level(WHILE, "f", [X, np.float32(eps)], [(4, 8)])
    _close(outs[0], want[0])
    assert scalar == k
    assert _ops(module, "scf.while") == 1


WHILE_FORWARD = f"""
func.func @f(%x: {T}, %w: {T}, %limit: f32) -> ({T}, {T}) {{
  %r:2 = scf.while (%a = %x, %b = %w) : ({T}, {T}) -> ({T}, {T}) {{
    %s = arith.addf %a, %b : {T}
    %m = graph.reduce_max %s {{axes = [0, 1]}} : {T} to tensor<f32>
    %v = tensor.extract %m[] : tensor<f32>
    %more = arith.cmpf olt, %v, %limit : f32
    scf.condition(%more) %s, %a : {T}, {T}
  }} do {{
  ^bb0(%s2: {T}, %a2: {T}):
    %e = math.exp %a2 : {T}
    scf.yield %s2, %e : {T}, {T}
  }}
  func.return %r#0, %r#1 : {T}, {T}
}}
"""


@pytest.mark.parametrize("limit", [-10.0, 5.0, 40.0])
def test_while_forwarding_computed_values_in_another_order(limit):
    a, b = X, W
    while True:
        s = a + b
        if not s.max() < limit:
            break
        a, b = s, np.exp(a)
    check(WHILE_FORWARD, "f", [X, W, np.float32(limit)], (s, a), tol=1e-4)


# -- matmuls, threads, memory ------------------------------------------------------------------------------


def _rnn(size: int) -> str:
    t = f"tensor<{size}x{size}xf32>"
    return f"""
func.func @rnn(%h0: {t}, %w: {t}, %x: {t}, %n: index) -> {t} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %h0) -> ({t}) {{
    %m = graph.matmul %h, %w : ({t}, {t}) -> {t}
    %a = arith.addf %m, %x : {t}
    %y = math.tanh %a : {t}
    scf.yield %y : {t}
  }}
  func.return %r : {t}
}}
"""


def _rnn_numpy(h, w, x, n):
    for _ in range(n):
        h = np.tanh(h @ w + x)
    return h


@pytest.mark.parametrize("threads", [1, 2])
def test_a_matmul_in_a_loop_body_calls_the_gemm_library(threads):
    size = 24  # wider than half the register tile (narrower products stay inline); small keeps the interpreter quick
    rng = np.random.default_rng(1)
    h0, x = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    w = (rng.standard_normal((size, size)) / size ** 0.5).astype(np.float32)
    text = _rnn(size)
    check(text, "rnn", [h0, w, x, 5], _rnn_numpy(h0, w, x, 5), tol=1e-4, threads=threads)
    exe = irc.compile(irc.parse(text), threads=threads)
    lowered, _ = exe.rnn.lower(((size, size),) * 3 + (None,))
    assert any(op.name == "func.call" and op.callee.startswith("irc_gemm_") for op in lowered.walk())


def test_a_long_loop_with_temporaries_keeps_one_arena():
    """The body's temporaries are planned into the arena (no allocation left), the same
    bytes in every iteration: the arena does not depend on the trip count, which is data."""
    text = f"""
func.func @f(%x: {T}, %w: {T}, %n: index) -> {T} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> ({T}) {{
    %t = graph.transpose %h {{perm = [1, 0]}} : {T} to tensor<8x4xf32>
    %u = math.sin %t : tensor<8x4xf32>
    %v = graph.transpose %u {{perm = [1, 0]}} : tensor<8x4xf32> to {T}
    %m = graph.reduce_max %v {{axes = [1], keepdims}} : {T} to tensor<4x1xf32>
    %b = graph.broadcast %m : tensor<4x1xf32> to {T}
    %y = arith.subf %v, %b : {T}
    %z = arith.addf %y, %w : {T}
    scf.yield %z : {T}
  }}
  func.return %r : {T}
}}
"""
    h = X
    for _ in range(1000):
        v = np.sin(h.T).T
        h = v - v.max(1, keepdims=True) + W
    check(text, "f", [X, W, 1000], h, tol=1e-4)
    exe = irc.compile(irc.parse(text))
    lowered, func = exe.f.lower(((4, 8), (4, 8), None))
    assert _ops(lowered, "memref.alloc") == 0 and _ops(lowered, "memref.dealloc") == 0
    arena = func.attributes["arena_bytes"].value
    # Temporaries of one iteration only: two 4x8 transposes, the 4x1 row maxima, the result.
    assert 0 < arena <= 4 * 4 * 8 * 4
    spec = exe.f.specialization(((4, 8), (4, 8), None))
    assert spec.arena_bytes == arena


TEMPORARIES = f"""
func.func @f(%x: {T}, %w: {T}, %n: index) -> ({T}, {T}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = math.cos %w : {T}
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> ({T}) {{
    %t = graph.transpose %h {{perm = [1, 0]}} : {T} to tensor<8x4xf32>
    %u = math.sin %t : tensor<8x4xf32>
    %v = graph.transpose %u {{perm = [1, 0]}} : tensor<8x4xf32> to {T}
    %m = graph.reduce_max %v {{axes = [1], keepdims}} : {T} to tensor<4x1xf32>
    %e = graph.broadcast %m : tensor<4x1xf32> to {T}
    %y = arith.subf %v, %e : {T}
    %z = arith.addf %y, %b : {T}
    scf.yield %z : {T}
  }}
  %after = arith.addf %r, %x : {T}
  %twice = arith.mulf %after, %r : {T}
  func.return %twice, %b : {T}, {T}
}}
"""


def _temporaries(x, w, n):
    h = x
    for _ in range(n):
        v = np.sin(h.T).T
        h = v - v.max(1, keepdims=True) + np.cos(w)
    return (h + x) * h, np.cos(w)


def _arena_ranges(module):
    """(view op, first byte, end byte) of each buffer plan-memory placed in the arena."""
    from irc.passes.plan_memory import byte_size

    from irc.patterns import constant_value

    func = module.functions[0]
    arena = func.body.entry.args[-1]
    found = []
    for op in func.walk():
        if op.name == "memref.view" and op.operands[0] is arena:
            start = constant_value(op.operands[1]).value
            found.append((op, start, start + byte_size(op.results[0].type)))
    return found


def test_plan_memory_keeps_loop_temporaries_apart_from_buffers_live_across_the_loop():
    module = irc.parse(TEMPORARIES)
    irc.passes.run(module, "fuse-elementwise,tensor-to-loops,plan-memory{arena=argument outputs=false}")
    n = module.functions[0].args[2]
    (loop,) = [op for op in module.walk() if op.name == "scf.for" and op.operands[1] is n]
    ranges = _arena_ranges(module)
    inside = [(s, e) for op, s, e in ranges if loop.is_ancestor_of(op)]
    across = [(s, e) for op, s, e in ranges if not loop.is_ancestor_of(op)
              and any(loop.is_ancestor_of(u.owner) for u in op.results[0].uses)]
    assert len(inside) >= 3 and len(across) == 1  # the body's temporaries; the carried buffer
    for s, e in inside:
        for s2, e2 in across:
            assert e <= s2 or e2 <= s, "a temporary of the loop body shares bytes with a buffer live across it"
    arena = module.functions[0].attributes["arena_bytes"].value
    outs = [np.zeros((4, 8), np.float32) for _ in range(2)]
    for n in (0, 1, 4):
        interpret(module, "f", X, W, n, *outs, np.zeros(arena, np.int8))
        for g, w in zip(outs, _temporaries(X, W, n)):
            _close(g, w, 1e-5)
    # With temporaries in the outputs too: %out1 holds cos(w), read in every iteration.
    check(TEMPORARIES, "f", [X, W, 4], _temporaries(X, W, 4), tol=1e-5)


def test_dynamic_shapes_specialise_through_loops():
    text = """
func.func @f(%x: tensor<?x?xf32>, %n: index) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (tensor<?x?xf32>) {
    %y = math.tanh %h : tensor<?x?xf32>
    %z = arith.addf %y, %x : tensor<?x?xf32>
    scf.yield %z : tensor<?x?xf32>
  }
  func.return %r : tensor<?x?xf32>
}
"""
    exe = irc.compile(irc.parse(text))
    for shape in [(3, 5), (16, 2)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        h = x
        for _ in range(3):
            h = np.tanh(h) + x
        _close(exe.f(x, 3), h)


def test_dynamic_shapes_specialise_through_if_and_while():
    text = """
func.func @f(%x: tensor<?xf32>, %p: f32) -> tensor<?xf32> {
  %split = arith.constant 0.4 : f32
  %c = arith.cmpf ogt, %p, %split : f32
  %s = scf.if %c -> (tensor<?xf32>) {
    %e = math.exp %x : tensor<?xf32>
    scf.yield %e : tensor<?xf32>
  } else {
    scf.yield %x : tensor<?xf32>
  }
  %r = scf.while (%h = %s) : (tensor<?xf32>) -> tensor<?xf32> {
    %m = graph.reduce_max %h {axes = [0]} : tensor<?xf32> to tensor<f32>
    %v = tensor.extract %m[] : tensor<f32>
    %more = arith.cmpf ogt, %v, %p : f32
    scf.condition(%more) %h : tensor<?xf32>
  } do {
  ^bb0(%h2: tensor<?xf32>):
    %half = arith.mulf %h2, %h2 : tensor<?xf32>
    %q = math.sqrt %half : tensor<?xf32>
    %y = math.sin %q : tensor<?xf32>
    scf.yield %y : tensor<?xf32>
  }
  func.return %r : tensor<?xf32>
}
"""
    exe = irc.compile(irc.parse(text))
    for n, p in [(5, 0.5), (9, 0.3), (3, 0.9)]:  # sin(|h|) falls below any p > 0
        x = RNG.uniform(-1, 1, n).astype(np.float32)
        h = np.exp(x) if p > 0.4 else x
        while h.max() > p:
            h = np.sin(np.abs(h))
        _close(exe.f(x, np.float32(p)), h)
        _close(interpret(irc.parse(text), "f", x, np.float32(p)), h)


def test_a_carried_tensor_that_changes_shape_is_an_error_at_the_loop():
    text = """
func.func @f(%x: tensor<?xf32>, %n: index) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%h = %x) -> (tensor<?xf32>) {
    %y = graph.concat %h, %h {axis = 0} : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
    scf.yield %y : tensor<?xf32>
  }
  func.return %r : tensor<?xf32>
}
"""
    exe = irc.compile(irc.parse(text))
    with pytest.raises(ValueError, match="carried tensor changes shape from \\[4\\] to \\[8\\]"):
        exe.f(np.zeros(4, np.float32), 2)


WRITTEN_EACH_TRIP = """
func.func @f(%x: tensor<32xf32>, %n: index) -> tensor<32xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant dense<0.5> : tensor<32xf32>
  %r:3 = scf.while (%a = %z, %k = %c0) : (tensor<32xf32>, index) -> (tensor<32xf32>, tensor<32xf32>, index) {
    %s = arith.addf %a, %x : tensor<32xf32>
    %more = arith.cmpi slt, %k, %n : index
    scf.condition(%more) %s, %a, %k : tensor<32xf32>, tensor<32xf32>, index
  } do {
  ^bb0(%s2: tensor<32xf32>, %a2: tensor<32xf32>, %k2: index):
    %t = math.tanh %a2 : tensor<32xf32>
    %k3 = arith.addi %k2, %c1 : index
    scf.yield %t, %k3 : tensor<32xf32>, index
  }
  func.return %r#0 : tensor<32xf32>
}
"""


def test_out_equal_to_an_input_is_not_in_place_when_a_loop_writes_the_output():
    """The before region stores ``a + x`` into the output once per trip, reading ``x`` at the
    same element: in place (``out=x``) the second trip would read what the first wrote, so
    out_aliasing must not call the pair safe (the store is in a loop of the program)."""
    from irc.runtime.out_aliasing import in_place_safe

    x = RNG.uniform(-1, 1, 32).astype(np.float32)
    a = np.full(32, 0.5, np.float32)
    for _ in range(3):
        a = np.tanh(a)
    exe = irc.compile(irc.parse(WRITTEN_EACH_TRIP))
    _, func = exe.f.lower(((32,), None))
    assert in_place_safe(func, 2, 1) == frozenset()
    shared = x.copy()
    _close(exe.f(shared, 3, out=shared), a + x)
    _close(interpret(irc.parse(WRITTEN_EACH_TRIP), "f", x, 3), a + x)
