"""graph.dynamic_slice / graph.dynamic_update_slice (dialects/graph_dynamic.py): the interpreter
against numpy, compiled code against the interpreter (faults included), in-place updates of a
loop-carried tape, and the gradient of a loop that tapes its carries against jax."""

from __future__ import annotations

import numpy as np
import pytest

import irc
from irc.diagnostics import IRError
from irc.interpreter import interpret

TEXT = """
func.func @f(%a: tensor<5x3xf32>, %u: tensor<2x2xf32>, %i: index, %j: index) -> (tensor<2x2xf32>, tensor<5x3xf32>) {
  %s = graph.dynamic_slice %a, %i, %j : tensor<5x3xf32> to tensor<2x2xf32>
  %r = graph.dynamic_update_slice %a, %u, %i, %j : (tensor<5x3xf32>, tensor<2x2xf32>, index, index) -> tensor<5x3xf32>
  func.return %s, %r : tensor<2x2xf32>, tensor<5x3xf32>
}

func.func @tape(%x: tensor<3xf32>) -> tensor<6x3xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %z = arith.constant dense<0.0> : tensor<6x3xf32>
  %r:2 = scf.for %k = %c0 to %c6 step %c1 iter_args(%t = %z, %h = %x) -> (tensor<6x3xf32>, tensor<3xf32>) {
    %row = graph.reshape %h : tensor<3xf32> to tensor<1x3xf32>
    %t1 = graph.dynamic_update_slice %t, %row, %k, %c0 : (tensor<6x3xf32>, tensor<1x3xf32>, index, index) -> tensor<6x3xf32>
    %h1 = math.tanh %h : tensor<3xf32>
    scf.yield %t1, %h1 : tensor<6x3xf32>, tensor<3xf32>
  }
  func.return %r#0 : tensor<6x3xf32>
}
"""

RNG = np.random.default_rng(11)
A = RNG.standard_normal((5, 3)).astype(np.float32)
U = RNG.standard_normal((2, 2)).astype(np.float32)


@pytest.mark.parametrize("i,j", [(0, 0), (3, 1), (2, 0), (1, 1)])
def test_interpreter_is_numpy_and_compiled_code_is_the_interpreter(i, j):
    s, r = interpret(irc.parse(TEXT), "f", A, U, i, j)
    np.testing.assert_array_equal(s, A[i:i + 2, j:j + 2])
    expected = A.copy()
    expected[i:i + 2, j:j + 2] = U
    np.testing.assert_array_equal(r, expected)
    cs, cr = irc.compile(irc.parse(TEXT)).f(A, U, i, j)
    np.testing.assert_array_equal(cs, s)
    np.testing.assert_array_equal(cr, r)


@pytest.mark.parametrize("i,j", [(4, 0), (0, 2), (-1, 0), (0, -1), (7, 7)])
def test_a_window_that_does_not_fit_is_an_error_in_both(i, j):
    with pytest.raises(IRError, match="does not fit"):
        interpret(irc.parse(TEXT), "f", A, U, i, j)
    with pytest.raises(IRError, match="does not fit") as e:
        irc.compile(irc.parse(TEXT)).f(A, U, i, j)
    assert e.value.location.line == 3  # the dynamic_slice's line: it runs first


def test_static_shapes_are_checked_when_verifying():
    bad = TEXT.replace("to tensor<2x2xf32>", "to tensor<6x2xf32>").replace("-> (tensor<2x2xf32>", "-> (tensor<6x2xf32>") \
        .replace("func.return %s, %r : tensor<2x2xf32>", "func.return %s, %r : tensor<6x2xf32>")
    with pytest.raises(IRError, match="does not fit"):
        irc.verify(irc.parse(bad))


def test_a_loop_carried_tape_is_updated_in_place():
    """The update writes one row a trip into the tape's own buffer: no copy of the tape in the loop."""
    exe = irc.compile(irc.parse(TEXT))
    x = np.linspace(-1, 1, 3).astype(np.float32)
    np.testing.assert_allclose(exe.tape(x), interpret(irc.parse(TEXT), "tape", x), rtol=1e-6)
    module, _ = exe.tape.lower(((3,),))
    loops = [op for op in module.walk() if op.name == "scf.for" and op.attributes.get("parallel") is None
             and any(inner.name == "cf.assert" for inner in op.walk())]
    assert loops, "the trip loop"
    for loop in loops:
        assert not any(op.name == "memref.copy" for op in loop.walk())
        stored = sum(1 for op in loop.walk() if op.name == "memref.store")
        assert stored <= 2  # the row into the tape, the next carry


def test_gradient_of_a_taped_rnn_matches_jax():
    """irc.grad of a fori_loop with constant bounds (the adjoint tapes the carries), compiled,
    against jax.grad of the same function."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(2)
    h0, x = rng.standard_normal((4, 8)), rng.standard_normal((4, 8))
    w = rng.standard_normal((8, 8)) / 3

    def loss(w, h, x):
        h = irc.fori_loop(0, 30, lambda i, h: np.tanh(h @ w + x), h)
        return np.sum(h * h)

    def jloss(w, h, x):
        h = jax.lax.fori_loop(0, 30, lambda i, h: jnp.tanh(h @ w + x), h)
        return jnp.sum(h * h)

    grad = irc.jit(irc.grad(loss))
    module = grad.lower(w, h0, x)
    assert any(op.name == "graph.dynamic_update_slice" for op in module.walk())
    got = grad(w, h0, x)
    expected = np.asarray(jax.grad(jloss)(w, h0, x))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-11)
