"""The public builder (irc/builder.py): every program built here is verified and run on the
interpreter, and its results are compared with numpy doing the same computation."""

from __future__ import annotations

import numpy as np
import pytest

import irc
from irc.builder import Builder, Listener, V
from irc.diagnostics import Location
from irc.types import TensorType, f32, f64, i1, i32, i64, index

RNG = np.random.default_rng(0)


def build(inputs, body, name="f"):
    """A module with one function ``name(inputs) -> body(b, *params)``, verified."""
    b = Builder()
    m = b.module()
    with b.function(m, name, inputs) as params:
        out = body(b, *params)
        b.ret(*(out if isinstance(out, tuple) else (out,)))
    irc.verify(m)
    return m


def run(m, *args, name="f"):
    return irc.interpret(m, name, *args)


def close(got, want, dtype=np.float32):
    np.testing.assert_allclose(np.asarray(got), want, rtol=4 * np.finfo(dtype).eps, atol=1e-6)


# -- operators and numpy's broadcasting -------------------------------------------------------


def test_python_numbers_and_scalars_broadcast_over_tensors():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    s = np.float32(1.25)
    m = build([TensorType([3, 4], f32), f32], lambda b, x, s: (x * 2.0 + s) / (1.0 - x * x * 0.25) - s)
    close(run(m, x, s), (x * np.float32(2) + s) / (np.float32(1) - x * x * np.float32(0.25)) - s)


@pytest.mark.parametrize("a_shape, b_shape", [((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((2, 1, 4), (3, 1)),
                                              ((1,), (5,)), ((), (2, 2))])
def test_size_one_dims_broadcast_as_numpy(a_shape, b_shape):
    a = RNG.standard_normal(a_shape) if a_shape else float(RNG.standard_normal())
    c = RNG.standard_normal(b_shape)
    ta = TensorType(list(a_shape), f64) if a_shape else f64
    m = build([ta, TensorType(list(b_shape), f64)], lambda b, x, y: x * y + x)
    close(run(m, a, c), a * c + a, np.float64)


def test_dynamic_dims_take_their_sizes_at_run_time():
    m = build([TensorType([None, 3], f32), TensorType([3], f32)], lambda b, x, y: (x - y) * 0.5)
    for rows in (1, 4, 0):
        x = RNG.standard_normal((rows, 3)).astype(np.float32)
        y = RNG.standard_normal(3).astype(np.float32)
        close(run(m, x, y), (x - y) * np.float32(0.5))


def test_mismatched_shapes_raise_naming_the_shapes():
    b = Builder()
    m = b.module()
    with b.function(m, "f", [TensorType([3, 4], f32), TensorType([5], f32)]) as (x, y):
        with pytest.raises(ValueError, match=r"\[3, 4\].*\[1, 5\]"):
            x + y


def test_pow_of_integers_is_a_type_error():
    b = Builder()
    m = b.module()
    with b.function(m, "f", [i64]) as (n,):
        with pytest.raises(TypeError, match="math.powf"):
            n ** 2
        with pytest.raises(TypeError, match="different element types"):
            n + b.const(1.0, f32)


def test_unary_methods_reductions_matmul_softmax():
    x = RNG.standard_normal((4, 3))
    w = RNG.standard_normal((3, 5))

    def body(b, x, w):
        h = (x @ w).tanh()
        return h.sum(axes=1), h.max(), (x.abs() + 1.0).log().mean(axes=0, keepdims=True), h.softmax(axis=1), x.T

    sums, top, mean, soft, xt = run(build([TensorType([4, 3], f64), TensorType([3, 5], f64)], body), x, w)
    h = np.tanh(x @ w)
    close(sums, h.sum(axis=1), np.float64)
    close(top, h.max(), np.float64)
    close(mean, np.log(np.abs(x) + 1).mean(axis=0, keepdims=True), np.float64)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    close(soft, e / e.sum(axis=1, keepdims=True), np.float64)
    close(xt, x.T, np.float64)


def test_integer_operators_match_numpy():
    a = RNG.integers(-1000, 1000, 16).astype(np.int32)
    c = RNG.integers(1, 1000, 16).astype(np.int32)
    t = TensorType([16], i32)

    def body(b, x, y):
        return (x & y) | (x ^ 7), (x << 3) >> 2, x * y - y, (-x).maximum(y), x / y

    got = run(build([t, t], body), a, c)
    want = [(a & c) | (a ^ 7), (a << 3) >> 2, a * c - c, np.maximum(-a, c),
            np.trunc(a / c).astype(np.int32)]  # arith.divsi rounds toward zero
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# -- comparisons, select, casts ------------------------------------------------------------------


def test_comparisons_and_select():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    y = RNG.standard_normal(5).astype(np.float32)
    t = TensorType([2, 5], f32)

    def body(b, x, y):
        return (b.select(x < y, x, y), b.select(x >= 0.0, x, 0.0), (x > y).astype(i32), x.eq(x), x.ne(y))

    low, relu, gt, eq, ne = run(build([t, TensorType([5], f32)], body), x, y)
    np.testing.assert_array_equal(low, np.where(x < y, x, y))
    np.testing.assert_array_equal(relu, np.where(x >= 0, x, 0))
    np.testing.assert_array_equal(gt, (x > y).astype(np.int32))
    np.testing.assert_array_equal(eq, x == x)
    np.testing.assert_array_equal(ne, x != y)


def test_scalar_condition_selects_whole_values():
    m = build([i64, TensorType([3], f64), TensorType([3], f64)], lambda b, n, x, y: b.select(n < 0, x, y))
    x, y = RNG.standard_normal(3), RNG.standard_normal(3)
    np.testing.assert_array_equal(run(m, -1, x, y), x)
    np.testing.assert_array_equal(run(m, 1, x, y), y)


def test_convert_picks_the_cast():
    def body(b, n, x):
        return b.convert(n, f32), b.convert(x, f64), b.convert(b.convert(x, f64), f32), b.convert(x, i32), \
            b.convert(b.convert(n, index), i32), b.convert(n, i64)

    m = build([i64, f32], body)
    text = str(m)
    for cast in ("arith.sitofp", "arith.extf", "arith.truncf", "arith.fptosi", "arith.index_cast"):
        assert cast in text
    got = run(m, 7, np.float32(-2.75))
    assert got[0] == np.float32(7) and got[1] == -2.75 and got[2] == np.float32(-2.75)
    assert got[3] == -2 and got[4] == 7 and got[5] == 7


# -- structured control flow ---------------------------------------------------------------------


def test_for_with_iter_args_sums_squares():
    def body(b, n):
        with b.for_(0, b.convert(n, index), inits=[b.const(0, i64)]) as loop:
            i = b.convert(loop.iv, i64)
            loop.yield_(loop.args[0] + i * i)
        return loop.results[0]

    m = build([i64], body)
    for n in (0, 1, 10):
        assert run(m, n) == sum(i * i for i in range(n))


def test_if_with_results():
    def body(b, x):
        with b.if_(x < 0.0, [f64]) as branch:
            with branch.then_():
                branch.yield_(-x * 2.0)
            with branch.else_():
                branch.yield_(x.sqrt())
        return branch.results[0]

    m = build([f64], body)
    assert run(m, -3.0) == 6.0
    assert run(m, 2.0) == np.sqrt(2.0)


def test_while_runs_a_trip_count_known_at_run_time():
    """Collatz steps: a loop whose trip count only the data decides."""

    def body(b, n):
        with b.while_([n, b.const(0, i64)]) as w:
            with w.before() as (x, steps):
                w.condition(x > 1, x, steps)
            with w.after() as (x, steps):
                even = (x & 1).eq(0)
                w.yield_(b.select(even, x / 2, x * 3 + 1), steps + 1)
        return w.results[1]

    m = build([i64], body)

    def collatz(n):
        steps = 0
        while n > 1:
            n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
        return steps

    for n in (1, 6, 27):
        assert run(m, n) == collatz(n)


def test_cfg_loop_with_phis():
    """sum_to(n) as blocks and phis, as in the language reference."""
    b = Builder()
    m = b.module()
    with b.function(m, "sum_to", [i64], [i64]) as (n,):
        region = b.function_op.body
        entry = b.block
        zero, one = b.const(0, i64), b.const(1, i64)
        head, body, exit_ = b.new_block(region), b.new_block(region), b.new_block(region)
        b.br(head)
        with b.at(head):
            i = b.phi(i64, [(zero, entry)])
            acc = b.phi(i64, [(zero, entry)])
            b.cond_br(i < n, body, exit_)
        with b.at(body):
            acc1, i1 = acc + i, i + one
            b.br(head)
        b.add_incoming(i, i1, body)
        b.add_incoming(acc, acc1, body)
        with b.at(exit_):
            b.ret(acc)
    irc.verify(m)
    for n in (0, 1, 100):
        assert run(m, n, name="sum_to") == n * (n - 1) // 2


def test_reused_constants_stay_inside_their_loop():
    """With reuse_constants, a constant first made in a loop body is not reused after it."""
    b = Builder(reuse_constants=True)
    m = b.module()
    with b.function(m, "f", [i64]) as (n,):
        with b.for_(0, 4, inits=[n]) as loop:
            loop.yield_(loop.args[0] + 5)
        out = loop.results[0] * 5 + b.const(5, i64)
        b.ret(out)
    irc.verify(m)  # the 5 of the body does not dominate the uses after the loop
    assert run(m, 1) == (1 + 20) * 5 + 5
    assert str(m).count("arith.constant 5 : i64") == 2  # one in the body, one after it, reused there


# -- locations, listeners, the rewriter ----------------------------------------------------------


def test_ops_take_the_builder_location():
    where = Location(None, 12, 7)
    b = Builder()
    m = b.module()
    with b.function(m, "f", [f32]) as (x,):
        y = x * 2.0
        with b.located(where):
            z = (y + 1.0).exp()
        b.ret(z)
    assert y.value.defining_op.loc is not where
    ops = [z.value.defining_op, z.value.defining_op.operands[0].defining_op]
    assert all(op.loc is where for op in ops)


def test_listener_sees_every_insert_and_rewriter_is_a_builder():
    from irc import rewriter

    class Count(Listener):
        def __init__(self):
            self.names = []

        def op_inserted(self, op):
            self.names.append(op.name)

    seen = Count()
    b = Builder(seen)
    m = b.module()
    with b.function(m, "f", [f32]) as (x,):
        b.ret(x + 1.0)
    assert seen.names == ["arith.constant", "arith.addf", "func.return"]
    assert rewriter.Builder is Builder and rewriter.Listener is Listener
    assert issubclass(rewriter.Rewriter, Builder)


def test_v_keeps_identity_semantics_for_dicts():
    b = Builder()
    m = b.module()
    with b.function(m, "f", [f32]) as (x,):
        assert isinstance(x, V) and {x: 1}[x] == 1 and x.eq(x).type is i1
        b.ret(x)


# -- end to end: the example of docs/builder.md ----------------------------------------------------


def test_compiled_function_matches_the_interpreter():
    pytest.importorskip("llvmlite")

    def body(b, x, w, bias):
        return ((x @ w + bias).maximum(0.0)).log_softmax(axis=1)

    m = build([TensorType([8, 5], f32), TensorType([5, 3], f32), TensorType([3], f32)], body, name="mlp")
    x, w = RNG.standard_normal((8, 5)).astype(np.float32), RNG.standard_normal((5, 3)).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32)
    expected = run(m, x, w, bias, name="mlp")
    h = np.maximum(x @ w + bias, 0)
    close(expected, h - h.max(axis=1, keepdims=True)
          - np.log(np.exp(h - h.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)))
    got = irc.compile(m).mlp(x, w, bias)
    close(got, expected)


def test_the_examples_of_docs_builder_md_run():
    """docs/builder.md's programs, run as written and checked against plain Python."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "builder.md").read_text()
    programs = [c for c in re.findall(r"```python\n(.*?)```", text, re.S)
                if "match_and_rewrite" not in c and "b.at_end(block)" not in c]  # fragments
    control_flow, cfg, end_to_end = programs
    ns: dict = {}
    exec(control_flow, ns)  # noqa: S102 - the documentation's own examples
    exec(cfg, ns)  # noqa: S102
    m = ns["m"]
    irc.verify(m)
    assert [run(m, n, name="sum_squares") for n in (0, 3, 10)] == [0, 5, 285]
    assert run(m, -2.0, name="safe_sqrt") == 0.0 and run(m, 9.0, name="safe_sqrt") == 3.0
    assert run(m, 27, name="collatz_steps") == 111
    assert run(m, 10, name="sum_to") == 45
    pytest.importorskip("llvmlite")
    exec(end_to_end, {})  # noqa: S102 - it asserts compiled == interpreted itself


def test_dynamic_sizes_come_from_an_operand_that_has_them():
    """x: tensor<1x?> + y: tensor<?x?>: the first '?' of the result is y's, not x's 1."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [TensorType([1, None], f64), TensorType([None, None], f64)]) as (x, y):
        b.ret(x + y)
    m.verify()
    a, c = np.arange(3.0).reshape(1, 3), np.ones((4, 3))
    out = irc.interpret(m, "f", a, c)
    np.testing.assert_array_equal(out, a + c)


def test_reshape_with_dynamic_sizes():
    b = Builder()
    m = b.module()
    with b.function(m, "f", [TensorType([None], f64)]) as (x,):
        n = b.dim(x, 0)
        b.ret(b.reshape(x, [None, 1], [n]))
    m.verify()
    out = irc.interpret(m, "f", np.arange(5.0))
    np.testing.assert_array_equal(out, np.arange(5.0).reshape(5, 1))
