"""The symbolic style: irc.var, expressions of vars (numpy functions and methods, as on traced
arrays), irc.function called with keyword arguments, irc.gradients checked against central
differences in f64."""

from __future__ import annotations

import numpy as np
import pytest

import irc

RNG = np.random.default_rng(3)


def test_expressions_of_vars_compile_and_match_numpy():
    a = irc.var("a", (4, 3), "f64")
    b = irc.var("b", (3,), np.float64)
    h = np.tanh(a @ b) + a.sum(axis=1)
    outputs = {"h": h, "total": np.sum(h), "mean": h.mean(), "t": a.T[1:, ::2], "cat": np.concatenate([b, b])}
    f = irc.function(outputs)
    x, y = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
    got = f(a=x, b=y)
    want_h = np.tanh(x @ y) + x.sum(axis=1)
    want = {"h": want_h, "total": want_h.sum(), "mean": want_h.mean(), "t": x.T[1:, ::2],
            "cat": np.concatenate([y, y])}
    assert set(got) == set(want)
    for k in want:
        assert np.shape(got[k]) == np.shape(want[k])
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12)
    assert h.shape == (4,) and h.dtype == np.float64 and a.shape == (4, 3)


def test_gradients_are_expressions_matching_finite_differences():
    a = irc.var("a", (5,), "f64")
    b = irc.var("b", (5,), "f64")
    loss = np.sum(np.sin(a) * b ** 2) + (a * b).mean()
    da, db = irc.gradients(loss, [a, b])
    f = irc.function([loss, da, db * 2.0])  # a gradient is an expression like any other
    x, y = RNG.standard_normal(5), RNG.standard_normal(5)
    value, ga, gb2 = f(a=x, b=y)

    def reference(x, y):
        return np.sum(np.sin(x) * y ** 2) + (x * y).mean()

    eps = 1e-6
    want_a = [(reference(x + eps * e, y) - reference(x - eps * e, y)) / (2 * eps) for e in np.eye(5)]
    want_b = [(reference(x, y + eps * e) - reference(x, y - eps * e)) / (2 * eps) for e in np.eye(5)]
    np.testing.assert_allclose(value, reference(x, y), rtol=1e-12)
    np.testing.assert_allclose(ga, want_a, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gb2, 2 * np.array(want_b), rtol=1e-6, atol=1e-9)


def test_function_checks_its_keyword_arguments():
    a = irc.var("a", (3,), "f32")
    f = irc.function(a * 2.0)
    np.testing.assert_allclose(f(a=np.ones(3, np.float32)), 2 * np.ones(3))
    with pytest.raises(TypeError, match="missing values for a"):
        f()
    with pytest.raises(TypeError, match="no vars named c"):
        f(a=np.ones(3, np.float32), c=1)
    with pytest.raises(TypeError, match=r"var 'a' is float32\[3\], got float64\[3\]"):
        f(a=np.ones(3))
    with pytest.raises(ValueError, match=r"var 'a' has shape \[3\], got \[4\]"):
        f(a=np.ones(4, np.float32))
    with pytest.raises(TypeError, match="irc.cond"):
        bool(a > 0)


def test_var_and_gradients_check_their_arguments():
    with pytest.raises(ValueError, match=r"irc.var\('a'\): sizes must not be negative"):
        irc.var("a", (-1,), "f32")
    with pytest.raises(TypeError, match=r"irc.var\('a'\): the shape must be a tuple of sizes, got \(2.5,\)"):
        irc.var("a", (2.5,), "f32")
    with pytest.raises(TypeError, match=r"irc.var\('a'\): unknown dtype 'f33'"):
        irc.var("a", (3,), "f33")
    b = irc.var("b", (3,), "f32")
    with pytest.raises(TypeError, match=r"irc.gradients: the loss must be a float scalar, got float32\[3\]"):
        irc.gradients(b * 2, [b])
    (gb,) = irc.function(irc.gradients(np.sum(b * b), [b]))(b=np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(gb, 2 * np.arange(3, dtype=np.float32))
