"""Gradient rules of the tensor dialect (dialects/tensor.py, dialects/tensor_grad.py).

Each case builds ``@f`` with the public builder, runs the ``vjp`` and ``jvp`` passes and
checks, on the interpreter, in f64:
- the vjp against central finite differences of <u, f(x)> for a random cotangent u,
  element by element;
- the jvp against central differences along a random direction v, and against the
  vjp by the dot-product test <u, J v> == <J^T u, v>;
- where torch is installed, the vjp against torch.autograd.
Shapes include broadcasts, size-1 and size-0 dimensions and ``?`` dimensions.  One case
per op family also runs compiled (irc.compile), which must agree with the interpreter.
"""

from __future__ import annotations

import irc.passes
import numpy as np
import pytest
from irc.dialects.graph import ReshapeOp

import irc
from irc.attributes import FloatAttr
from irc.builder import Builder
from irc.diagnostics import IRError
from irc.types import TensorType, f32, f64

try:
    import torch
except ImportError:  # the torch comparisons skip; everything else runs
    torch = None


EPS = 1e-6
RNG = np.random.default_rng(12)


def T(*shape, elem=f64):
    return TensorType(list(shape), elem)


def build(types, body, elem=f64):
    b = Builder()
    m = b.module()
    with b.function(m, "f", types) as args:
        b.ret(body(b, *args))
    return m


def arg(shape, rng=RNG):
    return rng.standard_normal(shape) if shape is not None else float(rng.standard_normal())


def as_array(v):
    return np.asarray(v, dtype=np.float64)


class Case:
    def __init__(self, name, types, shapes, body, ref=None, args=None):
        self.name, self.types, self.shapes, self.body, self.ref = name, types, shapes, body, ref
        self.args = args

    def make_args(self):
        return self.args() if self.args else [arg(s) for s in self.shapes]


def attr0(value=0.0):
    return FloatAttr(value, f64)


def slice_(x, **kw):
    return x.builder.tensor_op("graph.slice", x, **kw)


def conv(b, x, w, stride, padding):
    return b.tensor_op("graph.conv2d", x, w, stride=stride, padding=padding)


def torch_conv(stride, padding):
    return lambda x, w: torch.nn.functional.conv2d(x, w, stride=stride, padding=padding)


def weight_grad(b, x, g, kernel, stride, padding):
    return b.tensor_op("graph.conv2d_weight_grad", x, g, kernel=kernel, stride=stride, padding=padding)


def torch_weight_grad(shape, stride, padding):
    return lambda x, g: torch.nn.grad.conv2d_weight(x, shape, g, stride=stride, padding=padding)


def torch_slice(offsets, sizes, strides):
    return lambda x: x[tuple(slice(o, o + (n - 1) * s + 1 if n else o, s) for o, n, s in zip(offsets, sizes, strides))]


def torch_pad(low, high, value):
    def f(x):
        pads = [p for lo, hi in reversed(list(zip(low, high))) for p in (lo, hi)]
        return torch.nn.functional.pad(x, pads, value=value)
    return f


def with_zeros(shape, where):
    def make():
        x = RNG.standard_normal(shape)
        x[where] = 0.0
        return [x]
    return make


CASES = [
    # broadcast: leading axes, size-1 axes, a ? that is 1 or not at run time, to size 0
    Case("broadcast", [T(3, 1)], [(3, 1)], lambda b, x: b.broadcast_to(x, T(2, 3, 4)),
         lambda x: x.expand(2, 3, 4)),
    Case("broadcast-scalar-tensor", [T(1, 1)], [(1, 1)], lambda b, x: b.broadcast_to(x, T(1, 5)),
         lambda x: x.expand(1, 5)),
    Case("broadcast-dyn-is-1", [T(None, 4)], [(1, 4)],
         lambda b, x: b.broadcast_to(x, T(3, 4)), lambda x: x.expand(3, 4)),
    Case("broadcast-dyn-not-1", [T(None, 4)], [(3, 4)],
         lambda b, x: b.broadcast_to(x, T(3, 4)), lambda x: x.expand(3, 4)),
    Case("broadcast-to-dyn", [T(1, None), T(None, None)], [(1, 3), (5, 3)],
         lambda b, x, y: b.broadcast_to(x, T(None, None), like=y) * y, lambda x, y: x * y),
    Case("broadcast-size0", [T(1, 3)], [(1, 3)], lambda b, x: b.broadcast_to(x, T(0, 3)),
         lambda x: x.expand(0, 3)),
    Case("reshape", [T(3, 4)], [(3, 4)], lambda b, x: x.reshape(2, 6), lambda x: x.reshape(2, 6)),
    Case("reshape-dyn", [T(None, 4)], [(3, 4)],
         lambda b, x: b.built(ReshapeOp.build(x.value, T(2, None), [(b.dim(x, 0) * 2).value])),
         lambda x: x.reshape(2, -1)),
    Case("reduce_sum", [T(3, 4, 2)], [(3, 4, 2)], lambda b, x: x.sum([0, 2]), lambda x: x.sum((0, 2))),
    Case("reduce_sum-keep-dyn", [T(None, 4)], [(5, 4)], lambda b, x: x.sum([0], keepdims=True),
         lambda x: x.sum(0, keepdim=True)),
    Case("reduce_sum-size0", [T(0, 4)], [(0, 4)], lambda b, x: x.sum([1]), lambda x: x.sum(1)),
    Case("reduce_mean", [T(3, 4)], [(3, 4)], lambda b, x: x.mean([1]), lambda x: x.mean(1)),
    Case("reduce_mean-dyn", [T(None, None)], [(3, 5)], lambda b, x: x.mean([0, 1]), lambda x: x.mean()),
    Case("reduce_prod", [T(3, 5)], [(3, 5)], lambda b, x: x.prod([1]), lambda x: x.prod(1)),
    Case("reduce_prod-zeros", [T(3, 5)], [(3, 5)], lambda b, x: x.prod([1]), lambda x: x.prod(1),
         args=with_zeros((3, 5), (np.array([0, 1, 1]), np.array([2, 0, 3])))),
    Case("reduce_prod-2axes-keep", [T(2, 3, 4)], [(2, 3, 4)], lambda b, x: x.prod([0, 2], keepdims=True),
         lambda x: x.prod(2, keepdim=True).prod(0, keepdim=True)),
    Case("reduce_prod-dyn-zeros", [T(None, 4)], [(3, 4)], lambda b, x: x.prod([0]), lambda x: x.prod(0),
         args=with_zeros((3, 4), (np.array([0, 1, 2]), np.array([1, 1, 3])))),
    Case("reduce_prod-size1", [T(3, 1)], [(3, 1)], lambda b, x: x.prod([1]), lambda x: x.prod(1)),
    Case("reduce_max", [T(3, 4)], [(3, 4)], lambda b, x: x.max([1]), lambda x: x.amax(1)),
    Case("reduce_min-dyn-keep", [T(None, 4)], [(3, 4)], lambda b, x: x.min([0], keepdims=True),
         lambda x: x.amin(0, keepdim=True)),
    Case("matmul", [T(3, 4), T(4, 2)], [(3, 4), (4, 2)], lambda b, x, y: x @ y, lambda x, y: x @ y),
    Case("matmul-dyn", [T(None, 4), T(4, None)], [(3, 4), (4, 1)], lambda b, x, y: x @ y, lambda x, y: x @ y),
    Case("matmul-size0", [T(3, 0), T(0, 2)], [(3, 0), (0, 2)], lambda b, x, y: x @ y, lambda x, y: x @ y),
    Case("batch_matmul", [T(2, 3, 4), T(2, 4, 5)], [(2, 3, 4), (2, 4, 5)], lambda b, x, y: x @ y,
         lambda x, y: x @ y),
    Case("batch_matmul-rank4", [T(2, 1, 3, 4), T(2, 1, 4, 2)], [(2, 1, 3, 4), (2, 1, 4, 2)],
         lambda b, x, y: b.tensor_op("graph.batch_matmul", x, y), lambda x, y: x @ y),
    Case("transpose", [T(2, 3, 4)], [(2, 3, 4)], lambda b, x: b.transpose(x, [2, 0, 1]),
         lambda x: x.permute(2, 0, 1)),
    Case("slice", [T(5, 7)], [(5, 7)], lambda b, x: slice_(x, offsets=[1, 0], sizes=[2, 3], strides=[2, 3]),
         torch_slice([1, 0], [2, 3], [2, 3])),
    Case("slice-stride-past-end", [T(6, 7)], [(6, 7)],
         lambda b, x: slice_(x, offsets=[0, 1], sizes=[3, 2], strides=[2, 4]), torch_slice([0, 1], [3, 2], [2, 4])),
    Case("slice-dyn", [T(None, 7)], [(5, 7)], lambda b, x: slice_(x, offsets=[1, 2], sizes=[2, 2], strides=[3, 1]),
         torch_slice([1, 2], [2, 2], [3, 1])),
    Case("slice-size0", [T(3, 4)], [(3, 4)], lambda b, x: slice_(x, offsets=[1, 4], sizes=[2, 0], strides=[1, 1]),
         torch_slice([1, 4], [2, 0], [1, 1])),
    Case("concat", [T(2, 3), T(4, 3), T(1, 3)], [(2, 3), (4, 3), (1, 3)],
         lambda b, x, y, z: b.tensor_op("graph.concat", x, y, z, axis=0), lambda x, y, z: torch.cat([x, y, z], 0)),
    Case("concat-dyn", [T(None, 3), T(None, 3)], [(2, 3), (3, 3)],
         lambda b, x, y: b.tensor_op("graph.concat", x, y, axis=0), lambda x, y: torch.cat([x, y], 0)),
    Case("concat-dyn-other-axis", [T(None, 2), T(None, 3)], [(4, 2), (4, 3)],
         lambda b, x, y: b.tensor_op("graph.concat", x, y, axis=1), lambda x, y: torch.cat([x, y], 1)),
    Case("pad", [T(2, 3)], [(2, 3)],
         lambda b, x: b.tensor_op("graph.pad", x, low=[1, 0], high=[0, 2], value=attr0(1.5)),
         torch_pad([1, 0], [0, 2], 1.5)),
    Case("pad-dyn", [T(None, 3)], [(2, 3)],
         lambda b, x: b.tensor_op("graph.pad", x, low=[2, 1], high=[1, 0], value=attr0()),
         torch_pad([2, 1], [1, 0], 0.0)),
    Case("splat", [f64], [None], lambda b, x: b.splat(x, T(2, 3)), lambda x: x.expand(2, 3)),
    Case("splat-dyn", [f64, T(None)], [None, (4,)], lambda b, x, y: x * y, lambda x, y: x * y),
    Case("softmax", [T(2, 5)], [(2, 5)], lambda b, x: x.softmax(1), lambda x: x.softmax(1)),
    Case("softmax-axis0-dyn", [T(None, 3)], [(4, 3)], lambda b, x: x.softmax(0), lambda x: x.softmax(0)),
    Case("log_softmax", [T(3, 4)], [(3, 4)], lambda b, x: x.log_softmax(1), lambda x: x.log_softmax(1)),
    Case("log_softmax-size1", [T(3, 1)], [(3, 1)], lambda b, x: x.log_softmax(1), lambda x: x.log_softmax(1)),
    Case("conv2d", [T(2, 3, 5, 5), T(4, 3, 3, 3)], [(2, 3, 5, 5), (4, 3, 3, 3)],
         lambda b, x, w: conv(b, x, w, [1, 1], [0, 0]), torch_conv(1, 0)),
    Case("conv2d-stride-pad", [T(1, 2, 7, 6), T(3, 2, 3, 2)], [(1, 2, 7, 6), (3, 2, 3, 2)],
         lambda b, x, w: conv(b, x, w, [2, 3], [1, 2]), torch_conv((2, 3), (1, 2))),
    Case("conv2d-big-pad", [T(1, 1, 4, 4), T(2, 1, 2, 2)], [(1, 1, 4, 4), (2, 1, 2, 2)],
         lambda b, x, w: conv(b, x, w, [3, 1], [2, 1]), torch_conv((3, 1), (2, 1))),
    Case("conv2d_weight_grad", [T(2, 3, 5, 5), T(2, 4, 3, 3)], [(2, 3, 5, 5), (2, 4, 3, 3)],
         lambda b, x, g: weight_grad(b, x, g, [3, 3], [1, 1], [0, 0]), torch_weight_grad((4, 3, 3, 3), 1, 0)),
    Case("conv2d_weight_grad-stride-pad", [T(1, 2, 7, 6), T(1, 3, 4, 3)], [(1, 2, 7, 6), (1, 3, 4, 3)],
         lambda b, x, g: weight_grad(b, x, g, [3, 2], [2, 3], [1, 2]), torch_weight_grad((3, 2, 3, 2), (2, 3), (1, 2))),
    Case("conv2d-dyn-batch", [T(None, 2, 5, 4), T(3, 2, 2, 2)], [(2, 2, 5, 4), (3, 2, 2, 2)],
         lambda b, x, w: conv(b, x, w, [2, 1], [1, 0]), torch_conv((2, 1), (1, 0))),
]

IDS = [c.name for c in CASES]


def prepared(case):
    m = build(case.types, case.body)
    m = irc.passes.run(m, "vjp{func=f},jvp{func=f}")
    irc.verify(m)
    return m


def cotangent(m, shape):
    """A random cotangent for @f's result: an array for a tensor (rank 0 too), else a float."""
    u = RNG.standard_normal(shape)
    return u if isinstance(m.lookup("f").function_type.results[0], TensorType) else float(u)


def value(m, args, u):
    """<u, f(args)>."""
    return float(np.sum(as_array(irc.interpret(m, "f", *args)) * u))


def perturbed(args, i, index, delta):
    out = list(args)
    if np.ndim(args[i]) == 0 and not isinstance(args[i], np.ndarray):
        out[i] = args[i] + delta
    else:
        a = args[i].copy()
        a[index] += delta
        out[i] = a
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vjp_jvp_against_differences(case):
    m = prepared(case)
    args = case.make_args()
    y = as_array(irc.interpret(m, "f", *args))
    u = cotangent(m, y.shape)
    out = irc.interpret(m, "f_vjp", *args, u)
    grads = [as_array(g) for g in out[1:]]
    assert len(grads) == len(args)
    for i, (a, g) in enumerate(zip(args, grads)):
        assert g.shape == np.shape(a)
        fd = np.zeros(np.shape(a))
        for index in np.ndindex(*np.shape(a)):
            up = value(m, perturbed(args, i, index, EPS), u)
            down = value(m, perturbed(args, i, index, -EPS), u)
            fd[index] = (up - down) / (2 * EPS)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6, err_msg=f"{case.name}: d/d arg {i}")
    # forward mode: against differences along v, and against the vjp (dot-product test)
    vs = [arg(np.shape(a)) if isinstance(a, np.ndarray) else float(RNG.standard_normal()) for a in args]
    jv = as_array(irc.interpret(m, "f_jvp", *args, *vs)[1])
    plus = as_array(irc.interpret(m, "f", *[a + EPS * v for a, v in zip(args, vs)]))
    minus = as_array(irc.interpret(m, "f", *[a - EPS * v for a, v in zip(args, vs)]))
    np.testing.assert_allclose(jv, (plus - minus) / (2 * EPS), rtol=1e-5, atol=1e-6, err_msg=case.name)
    lhs = float(np.sum(u * jv))
    rhs = sum(float(np.sum(g * as_array(v))) for g, v in zip(grads, vs))
    assert lhs == pytest.approx(rhs, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("case", [c for c in CASES if c.ref is not None], ids=[c.name for c in CASES if c.ref])
def test_vjp_against_torch(case):
    if torch is None:
        pytest.skip("torch is not installed")
    m = prepared(case)
    args = case.make_args()
    y = as_array(irc.interpret(m, "f", *args))
    u = cotangent(m, y.shape)
    grads = irc.interpret(m, "f_vjp", *args, u)[1:]
    ts = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in args]
    ty = case.ref(*ts)
    np.testing.assert_allclose(ty.detach().numpy(), y, rtol=1e-12, atol=1e-12)
    expected = torch.autograd.grad(ty, ts, torch.tensor(u), allow_unused=True)
    for g, e in zip(grads, expected):
        e = np.zeros(np.shape(g)) if e is None else e.numpy()
        np.testing.assert_allclose(as_array(g), e, rtol=1e-10, atol=1e-10, err_msg=case.name)


def test_reduce_max_ties_share_the_gradient():
    """Equal maxima split the cotangent evenly (arith.maximumf's rule; torch.amax's and JAX's)."""
    m = prepared(Case("max", [T(3, 4)], None, lambda b, x: x.max([1])))
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, 5.0, 0.0, 1.0]])
    u = RNG.standard_normal(3)
    g = irc.interpret(m, "f_vjp", x, u)[1]
    top = x == x.max(axis=1, keepdims=True)
    np.testing.assert_allclose(g, np.where(top, u[:, None] / top.sum(axis=1, keepdims=True), 0.0))
    if torch is not None:
        t = torch.tensor(x, requires_grad=True)
        np.testing.assert_allclose(g, torch.autograd.grad(t.amax(1), t, torch.tensor(u))[0].numpy())


def test_log_softmax_gradient_is_stable_in_f32():
    """Huge logits: the backward is g - softmax(x) * sum(g), finite and accurate in f32."""
    m = build([T(2, 4, elem=f32)], lambda b, x: x.log_softmax(1))
    m = irc.passes.run(m, "vjp{func=f}")
    x = np.array([[1e4, -1e4, 0.0, 30.0], [-3e4, -3e4 + 1.0, -3e4 + 2.0, -3e4]], dtype=np.float32)
    u = RNG.standard_normal((2, 4)).astype(np.float32)
    g = irc.interpret(m, "f_vjp", x, u)[1]
    x64 = x.astype(np.float64)
    sm = np.exp(x64 - x64.max(1, keepdims=True))
    sm /= sm.sum(1, keepdims=True)
    expected = u - sm * u.sum(1, keepdims=True)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, expected, rtol=1e-5, atol=1e-5)


def test_second_derivative_of_softmax_sum():
    """Rules emit differentiable ops: grad of a grad, against differences of the first."""
    m = build([T(3)], lambda b, x: (x.softmax(0) * x).sum())
    m = irc.passes.run(m, "grad{func=f}")
    m = build([T(3)], lambda b, x: (x.softmax(0) * x).sum())
    m = irc.passes.run(m, "grad{func=f},jvp{func=f_grad}")
    x, v = RNG.standard_normal(3), RNG.standard_normal(3)
    hv = as_array(irc.interpret(m, "f_grad_jvp", x, v)[-1])
    plus = as_array(irc.interpret(m, "f_grad", x + EPS * v)[1])
    minus = as_array(irc.interpret(m, "f_grad", x - EPS * v)[1])
    np.testing.assert_allclose(hv, (plus - minus) / (2 * EPS), rtol=1e-5, atol=1e-6)


def test_fused_op_asks_to_differentiate_before_fusion():
    m = build([T(4), T(4)], lambda b, x, y: (x * y).exp() + y)
    m = irc.passes.run(m, "fuse-elementwise")
    with pytest.raises(IRError, match="differentiate before 'fuse-elementwise'"):
        irc.passes.run(m, "vjp{func=f}")


def test_extract_round_trips_and_differentiates():
    text = """
func.func @f(%t: tensor<2x3xf64>, %i: index, %j: index) -> f64 {
  %x = tensor.extract %t[%i, %j] : tensor<2x3xf64>
  %y = arith.mulf %x, %x : f64
  func.return %y : f64
}
"""
    m = irc.parse(text)
    assert irc.parse(str(m)).__str__() == str(m)
    m = irc.passes.run(m, "grad{func=f}")
    t = RNG.standard_normal((2, 3))
    g = irc.interpret(m, "f_grad", t, 1, 2)[1]
    expected = np.zeros((2, 3))
    expected[1, 2] = 2 * t[1, 2]
    np.testing.assert_allclose(g, expected)


# One compiled run per family: the gradient functions compile and agree with the interpreter.
COMPILED = ["broadcast-dyn-not-1", "reshape", "reduce_sum-keep-dyn", "reduce_prod-zeros", "reduce_max",
            "reduce_mean-dyn", "matmul", "batch_matmul", "transpose", "slice", "concat-dyn", "pad", "splat",
            "softmax", "log_softmax", "conv2d-stride-pad", "conv2d_weight_grad-stride-pad"]


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_gradients_match_the_interpreter(name):
    pytest.importorskip("llvmlite")
    case = next(c for c in CASES if c.name == name)
    m = prepared(case)
    args = case.make_args()
    y = as_array(irc.interpret(m, "f", *args))
    u = cotangent(m, y.shape)
    vs = [arg(np.shape(a)) if isinstance(a, np.ndarray) else float(RNG.standard_normal()) for a in args]
    exe = irc.compile(m)
    for fn, inputs in (("f_vjp", [*args, u]), ("f_jvp", [*args, *vs])):
        want = irc.interpret(m, fn, *inputs)
        got = getattr(exe, fn)(*inputs)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(as_array(g), as_array(w), rtol=1e-10, atol=1e-12, err_msg=f"{name} {fn}")
