"""The gradient rules of arith and math float ops (issue 12, items 2, 3 and 8).

Each rule is checked against references it does not share code with:

- central finite differences in f64 of the op's own semantics (the interpreter runs the op at
  x + h and x - h), on scalars and on tensors of random shapes with size-1 and size-0 dimensions;
  an elementwise op's Jacobian is diagonal, so one perturbation of a whole operand gives every
  element's partial derivative at once, and ``vjp`` must equal cotangent * partial and ``jvp`` the
  sum of tangent * partial over the operands;
- torch.autograd in f64, where torch is installed (the tie rules included where torch has the
  same convention);
- second derivatives (``grad`` of the ``_grad`` function, ``result=`` picking a gradient) against
  differences of first derivatives, and Hessian-vector products (``jvp`` of ``_grad``) against
  differences of the gradient along the vector;
- every generated function run by the interpreter and compiled (``irc.compile``): the same bits.
  The rules emit no reassociation and compiled code contracts no multiply-add, so equality is
  exact; NaNs compare equal to NaNs.  (Compiled with ``math_approx=False``: the default replaces
  libm by polynomials in tensor code, which differ from libm by an ulp or two.)
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys
import zlib
from pathlib import Path

import irc.passes
import numpy as np
import pytest

import irc
from irc.builder import Builder
from irc.types import TensorType, bf16, f16, f32, f64, i1

try:
    import torch
except ImportError:  # the torch comparisons skip; everything else runs
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

# ---- the ops and where their derivatives exist ----------------------------------------------------

UNARY = {
    "arith.negf": "any", "math.exp": "any", "math.exp2": "any", "math.expm1": "any", "math.log": "pos",
    "math.log1p": "gt-1", "math.log2": "pos", "math.tanh": "any", "math.sqrt": "pos", "math.rsqrt": "pos",
    "math.sin": "any", "math.cos": "any", "math.erf": "any", "math.absf": "away0", "math.floor": "nonint",
    "math.ceil": "nonint",
}
BINARY = {
    "arith.addf": ("any", "any"), "arith.subf": ("any", "any"), "arith.mulf": ("any", "any"),
    "arith.divf": ("any", "away0"), "arith.remf": "rem", "arith.maximumf": "distinct",
    "arith.minimumf": "distinct", "arith.maxnumf": "distinct", "arith.minnumf": "distinct",
    "math.powf": ("pos", "any"),
}
TERNARY = {"math.fma": ("any", "any", "any")}
ALL_OPS = [*UNARY, *BINARY, *TERNARY, "arith.select"]

SHAPES = [None, (1,), (4,), (2, 1, 3), (1, 1), (0,), (3, 0, 2)]


def sample(kind: str, rng, shape):
    size = () if shape is None else shape
    if kind == "any":
        x = rng.uniform(-2.0, 2.0, size)
    elif kind == "pos":
        x = rng.uniform(0.2, 3.0, size)
    elif kind == "gt-1":
        x = rng.uniform(-0.8, 3.0, size)
    elif kind == "away0":
        x = rng.choice([-1.0, 1.0], size) * rng.uniform(0.3, 2.0, size)
    elif kind == "nonint":
        x = rng.integers(-3, 4, size) + rng.uniform(0.1, 0.9, size)
    else:
        raise ValueError(kind)
    return np.float64(x) if shape is None else np.asarray(x, np.float64)


def operands_for(op: str, rng, shape) -> list:
    """Float operands of ``op`` where its derivative exists (no kink, tie or pole nearby)."""
    if op in UNARY:
        return [sample(UNARY[op], rng, shape)]
    if op in TERNARY:
        return [sample(k, rng, shape) for k in TERNARY[op]]
    if op == "arith.select":
        return [sample("any", rng, shape), sample("any", rng, shape)]
    kinds = BINARY[op]
    if kinds == "rem":  # x / y at least 0.15 away from an integer: fmod is smooth there
        y = sample("away0", rng, shape)
        q = rng.integers(-3, 4, () if shape is None else shape) + rng.uniform(0.15, 0.85, () if shape is None else shape)
        return [y * q, y]
    if kinds == "distinct":
        x = sample("any", rng, shape)
        return [x, x + sample("away0", rng, shape)]
    return [sample(k, rng, shape) for k in kinds]


def rng_for(*key):
    """A generator seeded by ``key`` (not ``hash``: string hashes change from run to run)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def ttype(shape, elem=f64):
    return elem if shape is None else TensorType(list(shape), elem)


# ---- modules, cached: one per (op, shape, element type) -------------------------------------------


def op_module(op: str, shape, elem=f64):
    """``@f(operands) -> op(operands)``; select takes its i1 condition first."""
    b = Builder()
    m = b.module()
    t = ttype(shape, elem)
    if op == "arith.select":
        with b.function(m, "f", [ttype(shape, i1), t, t]) as (c, x, y):
            b.ret(b.select(c, x, y))
        return m
    arity = 1 if op in UNARY else 3 if op in TERNARY else 2
    with b.function(m, "f", [t] * arity) as params:
        b.ret(b.op(op, *params))
    return m


@functools.cache
def differentiated(op: str, shape, elem=f64):
    """(module with @f, @f_vjp, @f_jvp, and for one-element results @f_grad; its compiled form)."""
    m = op_module(op, shape, elem)
    pipeline = "vjp{func=f},jvp{func=f}"
    if shape is None or math.prod(shape) == 1:
        pipeline += ",grad{func=f}"
    irc.passes.run(m, pipeline)
    irc.verify(m)
    return m, irc.compile(m, cache=False, math_approx=False)


def outs(r) -> tuple:
    return r if isinstance(r, tuple) else (r,)


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def run_both(module, exe, name: str, *args) -> tuple:
    """Interpret and run compiled (``exe`` None: the CPU backend has no bf16 yet, so interpret only);
    the results must have the same bits.  Returns the interpreter's."""
    expected = outs(irc.interpret(module, name, *args))
    if exe is None:
        return expected
    got = outs(exe[name](*args))
    assert len(got) == len(expected)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert same_bits(np.asarray(e, np.asarray(g).dtype), g) or same_bits(e, g), \
            f"@{name} result {i}: interpreter {e!r}, compiled {g!r}"
    return expected


def random_like(rng, x):
    return np.float64(rng.standard_normal()) if np.ndim(x) == 0 else rng.standard_normal(np.shape(x))


def condition(rng, shape):
    return bool(rng.integers(2)) if shape is None else rng.integers(0, 2, shape).astype(bool)


def partials_by_differences(op: str, args: list, cond=None) -> list:
    """d op / d operand k, elementwise, by central differences in f64 of the interpreted op."""
    m = op_module(op, None if np.ndim(args[0]) == 0 else np.shape(args[0]))
    lead = [] if cond is None else [cond]
    result = []
    for k, x in enumerate(args):
        h = 1e-6 * (1.0 + np.abs(x))
        up = [a + h if i == k else a for i, a in enumerate(args)]
        down = [a - h if i == k else a for i, a in enumerate(args)]
        fu = np.asarray(irc.interpret(m, "f", *lead, *up), np.float64)
        fd = np.asarray(irc.interpret(m, "f", *lead, *down), np.float64)
        result.append((fu - fd) / (2 * h))
    return result


def close(got, want, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)


# ---- first derivatives: vjp, jvp and grad against central differences ------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "scalar" if s is None else "x".join(map(str, s)) or "0d")
@pytest.mark.parametrize("op", ALL_OPS)
def test_first_derivatives_match_finite_differences(op, shape):
    rng = rng_for((op, shape))
    m, exe = differentiated(op, shape)
    args = operands_for(op, rng, shape)
    cond = condition(rng, shape) if op == "arith.select" else None
    lead = [] if cond is None else [cond]
    partials = partials_by_differences(op, args, cond)

    value = run_both(m, exe, "f", *lead, *args)[0]
    ct = random_like(rng, value)
    got = run_both(m, exe, "f_vjp", *lead, *args, ct)
    close(got[0], value, rtol=0, atol=0)
    for k, d in enumerate(partials):
        close(got[1 + k], ct * d)

    tangents = [random_like(rng, x) for x in args]
    got = run_both(m, exe, "f_jvp", *lead, *args, *tangents)
    close(got[0], value, rtol=0, atol=0)
    close(got[1], sum(t * d for t, d in zip(tangents, partials)))

    if shape is None or math.prod(shape) == 1:
        got = run_both(m, exe, "f_grad", *lead, *args)
        for k, d in enumerate(partials):
            close(got[1 + k], d)


# ---- against torch.autograd --------------------------------------------------------------------


def torch_fn(op: str):
    t = torch
    return {
        "arith.negf": t.neg, "math.exp": t.exp, "math.exp2": t.exp2, "math.expm1": t.expm1, "math.log": t.log,
        "math.log1p": t.log1p, "math.log2": t.log2, "math.tanh": t.tanh, "math.sqrt": t.sqrt,
        "math.rsqrt": t.rsqrt, "math.sin": t.sin, "math.cos": t.cos, "math.erf": t.erf, "math.absf": t.abs,
        "math.floor": t.floor, "math.ceil": t.ceil, "arith.addf": t.add, "arith.subf": t.sub,
        "arith.mulf": t.mul, "arith.divf": t.div, "arith.remf": t.fmod, "arith.maximumf": t.maximum,
        "arith.minimumf": t.minimum, "arith.maxnumf": t.fmax, "arith.minnumf": t.fmin, "math.powf": t.pow,
        "math.fma": lambda a, b, c: a * b + c, "arith.select": t.where,
    }[op]


def torch_vjp(op: str, args: list, ct, cond=None) -> list:
    leaves = [torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in args]
    lead = [] if cond is None else [torch.tensor(np.asarray(cond))]
    out = torch_fn(op)(*lead, *leaves)
    grads = torch.autograd.grad(out, leaves, torch.tensor(np.asarray(ct, np.float64)), allow_unused=True)
    return [np.zeros(np.shape(a)) if g is None else g.numpy() for a, g in zip(args, grads)]


@needs_torch
@pytest.mark.parametrize("shape", [None, (3,), (2, 1, 4), (0, 3)], ids=str)
@pytest.mark.parametrize("op", ALL_OPS)
def test_vjp_matches_torch(op, shape):
    rng = rng_for((op, shape, "torch"))
    m, exe = differentiated(op, shape)
    args = operands_for(op, rng, shape)
    cond = condition(rng, shape) if op == "arith.select" else None
    lead = [] if cond is None else [cond]
    ct = random_like(rng, args[0])
    got = run_both(m, exe, "f_vjp", *lead, *args, ct)
    for mine, theirs in zip(got[1:], torch_vjp(op, args, ct, cond)):
        close(mine, theirs, rtol=1e-12, atol=1e-14)


# The conventions at points where the derivative does not exist (docs/autodiff.md).
SPECIAL_POINTS = [
    ("arith.maximumf", [1.5, -0.0, 2.0], [1.5, 0.0, 1.0]),  # ties (and -0 = +0) split the gradient in half
    ("arith.minimumf", [1.5, -0.0, 2.0], [1.5, 0.0, 1.0]),
    ("math.absf", [0.0, -0.0, 2.0], None),  # 0 at 0
    ("math.floor", [1.0, -2.0, 0.5], None),  # 0 everywhere, integers included
    ("math.ceil", [1.0, -2.0, 0.5], None),
    ("math.powf", [0.0, 0.0, 0.0, 0.0, 2.0], [0.0, 1.0, 2.0, 3.0, 0.0]),  # x = 0: d/dp = 0, d/dx = p 0^(p-1)
]


@needs_torch
@pytest.mark.parametrize("op,x,y", SPECIAL_POINTS, ids=[p[0] for p in SPECIAL_POINTS])
def test_conventions_at_kinks_agree_with_torch(op, x, y):
    args = [np.array(x)] + ([] if y is None else [np.array(y)])
    m, exe = differentiated(op, (len(x),))
    ct = np.linspace(1.0, 2.0, len(x))
    got = run_both(m, exe, "f_vjp", *args, ct)
    for mine, theirs in zip(got[1:], torch_vjp(op, args, ct)):
        close(mine, theirs, rtol=0, atol=0)


def test_tie_and_nan_rules_of_the_number_variants():
    """maxnumf/minnumf split ties in half like maximumf (torch's fmax gives a tie wholly to its
    first operand: not compared), and return the other operand where one is NaN, so that operand
    takes the whole gradient."""
    nan = np.nan
    x, y = np.array([1.0, nan, 2.0, 3.0]), np.array([1.0, 4.0, nan, 0.0])
    for op, want_x in (("arith.maxnumf", [0.5, 0.0, 1.0, 1.0]), ("arith.minnumf", [0.5, 0.0, 1.0, 0.0])):
        m, exe = differentiated(op, (4,))
        got = run_both(m, exe, "f_vjp", x, y, np.ones(4))
        close(got[1], want_x, rtol=0, atol=0)
        close(got[2], 1.0 - np.array(want_x), rtol=0, atol=0)


# ---- f32, and f16 / bf16 through extf and truncf ---------------------------------------------------


@pytest.mark.parametrize("op", [o for o in UNARY if o not in ("math.floor", "math.ceil")] + ["arith.mulf"])
def test_f32_vjp_matches_f64_derivative(op):
    rng = rng_for((op, "f32"))
    m, exe = differentiated(op, (5,), f32)
    args = [np.float32(a) for a in operands_for(op, rng, (5,))]
    ct = np.ones(5, np.float32)
    got = run_both(m, exe, "f_vjp", *args, ct)
    want = partials_by_differences(op, [a.astype(np.float64) for a in args])
    for g, w in zip(got[1:], want):
        assert g.dtype == np.float32
        close(g, w, rtol=2e-6, atol=1e-6)


@functools.cache
def narrow_module(op: str, narrow):
    """``@f(x: tensor<6xf32>) -> tensor<6xf32>``: x truncated to ``narrow``, ``op`` applied there
    (and ``op(x, x)`` for a binary op), widened back."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [TensorType([6], f32)]) as (x,):
        t = b.convert(x, narrow)
        y = b.op(op, t) if op in UNARY else b.op(op, t, t)
        b.ret(b.convert(y, f32))
    irc.passes.run(m, "vjp{func=f},jvp{func=f}")
    irc.verify(m)
    return m, None if narrow is bf16 else irc.compile(m, cache=False, math_approx=False)


@pytest.mark.parametrize("narrow", [f16, bf16], ids=str)
@pytest.mark.parametrize("op", ["math.exp", "math.sin", "math.tanh", "math.sqrt", "math.log", "arith.mulf"])
def test_half_precision_through_extf_truncf(op, narrow):
    """The gradient passes truncf and extf unchanged (converted to each side's type) and the op's
    rule runs in the narrow type: compare with the f64 derivative at the rounded point, within the
    narrow type's precision."""
    rng = rng_for((op, str(narrow)))
    m, exe = narrow_module(op, narrow)
    x = rng.uniform(0.3, 2.0, 6).astype(np.float32)
    xr = _round_to(x, narrow)
    derivative = {"math.exp": np.exp(xr), "math.sin": np.cos(xr), "math.tanh": 1 - np.tanh(xr) ** 2,
                  "math.sqrt": 0.5 / np.sqrt(xr), "math.log": 1 / xr, "arith.mulf": 2 * xr}[op]
    eps = 2.0 ** -10 if narrow is f16 else 2.0 ** -7
    ct = np.ones(6, np.float32)
    got = run_both(m, exe, "f_vjp", x, ct)
    assert got[1].dtype == np.float32
    close(got[1], derivative, rtol=8 * eps, atol=0)
    t = rng.standard_normal(6).astype(np.float32)
    got = run_both(m, exe, "f_jvp", x, t)
    close(got[1], _round_to(t, narrow) * derivative, rtol=8 * eps, atol=0)


def _round_to(x, narrow) -> np.ndarray:
    if narrow is f16:
        return x.astype(np.float16).astype(np.float64)
    bits = np.asarray(x, np.float32).view(np.uint32)  # round to nearest even on the top 16 bits
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("src,dst", [(f32, f64), (f16, f32), (f16, f64), (bf16, f32)], ids=str)
def test_extf_truncf_pass_gradients_through(src, dst):
    """extf's cotangent is truncated back, truncf's extended: d cast / dx is 1 (the derivative of the
    real function both round)."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [f32]) as (x,):
        narrow = b.convert(x, src)
        wide = b.convert(narrow, dst)  # extf
        back = b.convert(b.convert(wide * wide, src), f32)  # truncf (or nothing), extf
        b.ret(back)
    irc.passes.run(m, "grad{func=f},jvp{func=f}")
    exe = None if src is bf16 else irc.compile(m, cache=False, math_approx=False)
    for x in (np.float32(0.75), np.float32(1.5)):
        got = run_both(m, exe, "f_grad", x)
        close(got[1], 2 * float(_round_to(np.float32(x), src) if src is not f32 else x), rtol=2 ** -7, atol=0)
        got = run_both(m, exe, "f_jvp", x, np.float32(1.0))
        close(got[1], 2 * float(x), rtol=2 ** -7, atol=0)


# ---- second derivatives and Hessian-vector products -----------------------------------------------


def scalar_module(op: str):
    """``@f(x, y) -> op applied to a smooth combination of x and y`` (f64 scalars): every operand
    depends on both parameters, so mixed second derivatives are exercised."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [f64, f64]) as (x, y):
        u, v, w = x * 0.75 + y * 0.25, x - y * 0.5, x * y
        if op in UNARY:
            r = b.op(op, u)
        elif op in TERNARY:
            r = b.op(op, u, v, w)
        elif op == "arith.select":
            r = b.select(x < y, u * v, v * w)
        else:
            r = b.op(op, u, v)
        b.ret(r)
    return m


# Points where each op is smooth, and the mixed operands u, v, w above stay in its domain.
POINTS = {"math.log": (1.5, 0.5), "math.log1p": (1.5, 0.5), "math.log2": (1.5, 0.5), "math.sqrt": (1.5, 0.5),
          "math.rsqrt": (1.5, 0.5), "math.powf": (1.5, 0.5), "math.floor": (1.3, 0.3),
          "math.ceil": (1.3, 0.3), "math.absf": (0.8, 0.4), "arith.remf": (2.3, 0.7)}


@functools.cache
def second_order(op: str):
    m = scalar_module(op)
    irc.passes.run(m, "grad{func=f},grad{func=f_grad result=1 name=hx},grad{func=f_grad result=2 name=hy},"
                      "jvp{func=f_grad}")
    irc.verify(m)
    return m, irc.compile(m, cache=False, math_approx=False)


@pytest.mark.parametrize("op", ALL_OPS)
def test_second_derivatives_and_hvp_match_differences_of_gradients(op):
    m, exe = second_order(op)
    x, y = POINTS.get(op, (0.6, -0.3))
    h = 1e-5

    def gradient(a, c):
        return np.array(run_both(m, exe, "f_grad", a, c)[1:], np.float64)

    hessian = np.stack([(gradient(x + h, y) - gradient(x - h, y)) / (2 * h),
                        (gradient(x, y + h) - gradient(x, y - h)) / (2 * h)])  # hessian[j][i] = d2f/dj di
    hx = run_both(m, exe, "hx", x, y)
    hy = run_both(m, exe, "hy", x, y)
    # hx = (f, fx, fy, d fx/dx, d fx/dy)
    close(hx[3:], hessian[:, 0], rtol=1e-6, atol=1e-7)
    close(hy[3:], hessian[:, 1], rtol=1e-6, atol=1e-7)
    vx, vy = 0.3, -1.1
    hvp = run_both(m, exe, "f_grad_jvp", x, y, vx, vy)
    # (f, fx, fy, tangent of f, tangents of fx and fy) ; H v by differences of the gradient along v
    along = (gradient(x + h * vx, y + h * vy) - gradient(x - h * vx, y - h * vy)) / (2 * h)
    close(hvp[4:], along, rtol=1e-6, atol=1e-7)
    close(hvp[3], np.dot(gradient(x, y), [vx, vy]), rtol=1e-12, atol=1e-14)


# ---- impossible requests: exit statuses of irc opt (the messages: tests/filecheck/grad-invalid.ir) -


INVALID = Path(__file__).parent / "filecheck" / "grad-invalid.ir"


@pytest.mark.parametrize("pipeline,status", [
    ("grad{func=vector}", 1), ("grad{func=mixed}", 1), ("grad{func=mixed result=1 wrt=0}", 1),
    ("grad{func=missing}", 1), ("vjp{func=missing}", 1), ("jvp{func=unregistered}", 1),
    ("grad{func=store}", 1), ("grad{func=unregistered}", 1),
    ("grad{func=mixed bogus=1}", 2), ("grad{func=mixed wrt=x}", 2), ("grad{func=mixed wrt=1,1}", 2), ("grad", 2),
    ("vjp", 2), ("jvp{func=f result=0}", 2),
])
def test_cli_exit_status_of_impossible_requests(pipeline, status):
    run = subprocess.run([sys.executable, "-m", "irc.cli", "opt", str(INVALID), "--allow-unregistered", "-p", pipeline],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == status, run.stderr
    assert "error:" in run.stderr and "Traceback" not in run.stderr
