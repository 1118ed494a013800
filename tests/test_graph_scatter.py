"""``graph.scatter_add`` (dialects/graph_scatter.py, numpy's add.at along an axis) and the
gather gradient built on it: the interpreter against numpy, compiled code against the
interpreter (bit for bit: the same additions in the same order), faults, the text form,
the verifier's messages, and the vjp/jvp rules against finite differences and torch."""

from __future__ import annotations

import irc.passes
import numpy as np
import pytest

import irc
from irc.builder import Builder
from irc.types import TensorType, f64, i64


def dims(shape) -> str:
    return "x".join(map(str, shape))


def program(dest, idx, axis, elem="f32"):
    upd = [*dest[:axis], *idx, *dest[axis + 1:]]
    d, i, u = (f"tensor<{dims(s)}x{t}>" for s, t in ((dest, elem), (idx, "i64"), (upd, elem)))
    return (f"func.func @f(%d: {d}, %i: {i}, %u: {u}) -> {d} {{\n"
            f"  %r = graph.scatter_add %d, %i, %u {{axis = {axis}}} : ({d}, {i}, {u}) -> {d}\n"
            f"  func.return %r : {d}\n}}\n")


def add_at(dest, idx, upd, axis):
    out = dest.copy()
    np.add.at(out, (slice(None),) * axis + (idx,), upd)
    return out


@pytest.mark.parametrize("dest, idx, axis, elem", [
    ((10, 4), (2, 3), 0, "f32"),  # an embedding's gradient: rows added at token ids
    ((3, 7, 2), (5,), 1, "f64"),
    ((4, 6), (2, 2), 1, "f32"),
    ((5,), (12,), 0, "i64"),
    ((6, 3), (0,), 0, "f32"),  # no index: the destination
])
def test_scatter_add_matches_numpy_add_at_interpreted_and_compiled(dest, idx, axis, elem):
    rng = np.random.default_rng(1)
    dtype = {"f32": np.float32, "f64": np.float64, "i64": np.int64}[elem]
    d = (rng.standard_normal(dest) * 4).astype(dtype)
    i = rng.integers(0, dest[axis], idx).astype(np.int64)
    if i.size > 1:
        i.flat[-1] = i.flat[0]  # a repeated index: its slices add up
    u = (rng.standard_normal([*dest[:axis], *idx, *dest[axis + 1:]]) * 4).astype(dtype)
    module = irc.parse(program(dest, idx, axis, elem))
    want = add_at(d, i, u, axis)
    np.testing.assert_array_equal(irc.interpret(module, "f", d, i, u), want)
    np.testing.assert_array_equal(irc.compile(module).f(d, i, u), want)  # same order of additions


def test_scatter_add_round_trips():
    text = program((10, 4), (2, 3), 0)
    assert irc.parse(irc.parse(text).print()).print() == irc.parse(text).print()


@pytest.mark.parametrize("bad", [4, -1, 2**40])
def test_scatter_add_out_of_range_is_the_same_fault_interpreted_and_compiled(bad):
    module = irc.parse(program((4, 2), (3,), 0))
    dest, idx, upd = np.zeros((4, 2), np.float32), np.array([0, bad, 1]), np.ones((3, 2), np.float32)
    with pytest.raises(Exception, match=r"out of range \[0, 4\) for axis 0") as interpreted:
        irc.interpret(module, "f", dest, idx, upd)
    with pytest.raises(Exception, match=r"out of range \[0, 4\) for axis 0") as compiled:
        irc.compile(module).f(dest, idx, upd)
    assert str(compiled.value.location) == str(interpreted.value.location)


def test_scatter_add_verifier_names_the_wrong_shape():
    bad = program((10, 4), (2, 3), 0).replace("tensor<2x3x4xf32>", "tensor<2x4xf32>")
    with pytest.raises(irc.IRError, match=r"updates must have shape \[2, 3, 4\]") as error:
        irc.verify(irc.parse(bad))
    assert (error.value.location.line, error.value.location.column) == (2, 8)  # the op


def test_dead_destination_is_updated_in_place():
    """A destination that dies at the op (the zeros of a gather's gradient) is the result's buffer."""
    text = """
func.func @f(%i: tensor<6xi64>, %u: tensor<6x4xf32>) -> tensor<10x4xf32> {
  %z = arith.constant dense<0.0> : tensor<10x4xf32>
  %s = arith.addf %z, %z : tensor<10x4xf32>
  %r = graph.scatter_add %s, %i, %u {axis = 0} : (tensor<10x4xf32>, tensor<6xi64>, tensor<6x4xf32>) -> tensor<10x4xf32>
  %t = arith.mulf %r, %r : tensor<10x4xf32>
  func.return %t : tensor<10x4xf32>
}"""
    lowered = irc.parse(text)
    irc.passes.run(lowered, "fuse-elementwise,tensor-to-loops")
    assert sum(op.name == "memref.alloc" for op in lowered.walk()) == 1  # the zeros, added to in place
    i = np.array([1, 3, 1, 9, 0, 3])
    u = np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32)
    want = add_at(np.zeros((10, 4), np.float32), i, u, 0) ** 2
    out = np.zeros((10, 4), np.float32)
    irc.interpret(lowered, "f", i, u, out)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(irc.compile(irc.parse(text)).f(i, u), want)


# ---- gradients ------------------------------------------------------------------------------------

IDX = np.array([[2, 0, 2], [4, 2, 1]])  # repeated indices


def gather_module():
    """f(t, w) = gather(t, IDX, axis 1) * w: the gradient with respect to t is a scatter_add."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [TensorType([3, 5, 2], f64), TensorType([3, 2, 3, 2], f64)]) as (t, w):
        idx = b.const(IDX, TensorType([2, 3], i64))
        b.ret(b.tensor_op("graph.gather", t, idx, axis=1) * w)
    return m


def scatter_module():
    """f(d, u) = scatter_add(d * d, IDX, u, axis 1)."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [TensorType([3, 5, 2], f64), TensorType([3, 2, 3, 2], f64)]) as (d, u):
        idx = b.const(IDX, TensorType([2, 3], i64))
        b.ret(b.tensor_op("graph.scatter_add", d * d, idx, u, axis=1))
    return m


def finite_differences(m, args, u, eps=1e-6):
    grads = []
    for k, a in enumerate(args):
        fd = np.zeros_like(a)
        for at in np.ndindex(*a.shape):
            hi, lo = [x.copy() for x in args], [x.copy() for x in args]
            hi[k][at] += eps
            lo[k][at] -= eps
            fd[at] = np.sum((irc.interpret(m, "f", *hi) - irc.interpret(m, "f", *lo)) * u) / (2 * eps)
        grads.append(fd)
    return grads


@pytest.mark.parametrize("make", [gather_module, scatter_module])
def test_vjp_and_jvp_against_differences(make):
    m = irc.passes.run(make(), "vjp{func=f},jvp{func=f}")
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((3, 5, 2)), rng.standard_normal((3, 2, 3, 2))]
    y = irc.interpret(m, "f", *args)
    u = rng.standard_normal(y.shape)
    grads = irc.interpret(m, "f_vjp", *args, u)[1:]
    for g, fd in zip(grads, finite_differences(m, args, u)):
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)
    vs = [rng.standard_normal(a.shape) for a in args]
    jv = irc.interpret(m, "f_jvp", *args, *vs)[1]
    eps = 1e-6
    plus = irc.interpret(m, "f", *[a + eps * v for a, v in zip(args, vs)])
    minus = irc.interpret(m, "f", *[a - eps * v for a, v in zip(args, vs)])
    np.testing.assert_allclose(jv, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_gather_gradient_is_a_scatter_add_and_equals_torch():
    torch = pytest.importorskip("torch")
    m = irc.passes.run(gather_module(), "vjp{func=f}")
    assert any(op.name == "graph.scatter_add" for op in m.walk())
    rng = np.random.default_rng(4)
    t, w = rng.standard_normal((3, 5, 2)), rng.standard_normal((3, 2, 3, 2))
    u = rng.standard_normal((3, 2, 3, 2))
    dt, dw = irc.interpret(m, "f_vjp", t, w, u)[1:]
    tt, tw = torch.tensor(t, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = torch.index_select(tt, 1, torch.tensor(IDX.reshape(-1))).reshape(3, 2, 3, 2) * tw
    y.backward(torch.tensor(u))
    np.testing.assert_allclose(dt, tt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-12, atol=1e-12)
    compiled = irc.compile(m)  # the compiled gradient, against the interpreter
    np.testing.assert_allclose(compiled.f_vjp(t, w, u)[1], dt, rtol=1e-12, atol=1e-12)
