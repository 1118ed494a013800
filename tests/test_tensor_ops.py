"""The tensor dialect against numpy.

Every op runs on random shapes (static, dynamic ``?`` and zero-size dims; f32,
f64 and integers) through the reference interpreter and is compared with a
numpy formula written independently of dialects/graph.py.  Then: the shape
errors the verifier reports (with line and column) and those found at run time,
round trips of the custom and generic forms, constant folding through
``canonicalize``, and the identity folds.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from irc.dialects import graph

import irc
from irc import registry
from irc.attributes import DenseAttr, FloatAttr
from irc.diagnostics import InterpreterError
from irc.printer import print_module
from irc.types import TensorType, f32, parse_type

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
FLOATS = ["f32", "f64"]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ty(shape, elem: str, dynamic=()) -> str:
    """``tensor<...>`` text for ``shape``, with the dims whose positions are in ``dynamic`` as ``?``."""
    return "tensor<" + "".join(("?" if i in dynamic else str(d)) + "x" for i, d in enumerate(shape)) + elem + ">"


def program(op: str, params: list[tuple[str, str]], result: str) -> str:
    """A function ``@f`` whose body is ``op`` (defining ``%r``), returning ``%r``."""
    args = ", ".join(f"%{n}: {t}" for n, t in params)
    return f"func.func @f({args}) -> {result} {{\n  {op}\n  func.return %r : {result}\n}}\n"


def run(op: str, params: list[tuple[str, str]], result: str, *values):
    module = irc.parse(program(op, params, result))
    irc.verify(module)
    return irc.interpret(module, "f", *values)


def random_array(rng, shape, elem: str) -> np.ndarray:
    if elem in FLOATS:
        return rng.standard_normal(shape).astype(DTYPES[elem])
    return rng.integers(-20, 20, size=shape).astype(DTYPES[elem])


def assert_matches(got, expected, elem: str) -> None:
    assert isinstance(got, np.ndarray) and got.dtype == DTYPES[elem], (type(got), getattr(got, "dtype", None))
    assert got.shape == expected.shape
    if elem in FLOATS:
        rtol = 2e-6 if elem == "f32" else 1e-12
        np.testing.assert_allclose(got, expected.astype(np.float64), rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


def sizes_of(shape, dynamic) -> tuple[str, list[tuple[str, str]], list[int]]:
    """Index operands for the dynamic dims of a result: their text, parameters and values."""
    dims = sorted(dynamic)
    return ("".join(f", %n{i}" for i in dims), [(f"n{i}", "index") for i in dims], [shape[i] for i in dims])


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4)
nonempty_rank = st.lists(st.integers(0, 4), min_size=1, max_size=4)
seeds = st.integers(0, 2**32 - 1)


def subset(data, n: int) -> set[int]:
    return data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n)) if n else set()


# ---- every op against numpy ---------------------------------------------------------------------


@SETTINGS
@given(st.data(), shapes, st.sampled_from(list(DTYPES)), seeds)
def test_broadcast(data, out_shape, elem, seed):
    rank = data.draw(st.integers(0, len(out_shape)))
    src_shape = [data.draw(st.sampled_from([1, d])) for d in out_shape[len(out_shape) - rank:]]
    dyn_src, dyn_out = subset(data, len(src_shape)), subset(data, len(out_shape))
    sizes, size_params, size_values = sizes_of(out_shape, dyn_out)
    a = random_array(np.random.default_rng(seed), src_shape, elem)
    got = run(f"%r = graph.broadcast %a{sizes} : {ty(src_shape, elem, dyn_src)} to {ty(out_shape, elem, dyn_out)}",
              [("a", ty(src_shape, elem, dyn_src)), *size_params], ty(out_shape, elem, dyn_out), a, *size_values)
    assert_matches(got, np.broadcast_to(a, out_shape), elem)


def _reduce_reference(name, a, axes, keepdims):
    shape = [1 if i in axes else d for i, d in enumerate(a.shape) if keepdims or i not in axes]
    count = int(np.prod([a.shape[i] for i in axes])) if axes else 1
    floating = a.dtype.kind == "f"
    wide = a.astype(np.float64) if floating else a
    if name in ("max", "min") and count == 0:
        identity = (-np.inf if name == "max" else np.inf) if floating else \
            (np.iinfo(a.dtype).min if name == "max" else np.iinfo(a.dtype).max)
        return np.full(shape, identity, dtype=a.dtype)
    with np.errstate(all="ignore"):
        if name == "sum":
            out = np.sum(wide, axis=axes, dtype=wide.dtype)
        elif name == "prod":
            out = np.prod(wide, axis=axes, dtype=wide.dtype)
        elif name == "mean":
            out = np.sum(wide, axis=axes) / np.float64(count)
        else:
            out = getattr(np, name)(a, axis=axes)
    return np.asarray(out).reshape(shape).astype(a.dtype)


@SETTINGS
@given(st.data(), st.sampled_from(["sum", "prod", "max", "min", "mean"]), nonempty_rank, st.booleans(), seeds)
def test_reductions(data, name, shape, keepdims, seed):
    elem = data.draw(st.sampled_from(FLOATS if name == "mean" else list(DTYPES)))
    axes = tuple(sorted(subset(data, len(shape))))
    dyn = subset(data, len(shape))
    out_shape = [1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes]
    out_dyn = {j for j, i in enumerate(i for i in range(len(shape)) if keepdims or i not in axes)
               if i in dyn and i not in axes}
    attrs = f"{{axes = [{', '.join(map(str, axes))}]{', keepdims' if keepdims else ''}}}"
    a = random_array(np.random.default_rng(seed), shape, elem)
    src, dst = ty(shape, elem, dyn), ty(out_shape, elem, out_dyn)
    got = run(f"%r = graph.reduce_{name} %a {attrs} : {src} to {dst}", [("a", src)], dst, a)
    assert_matches(got, _reduce_reference(name, a, axes, keepdims), elem)


def test_f32_sums_accumulate_more_precisely_than_naive_f32():
    # Summing down a column is a strided reduction, which numpy does in f32, one add at a time.
    a = np.full((1 << 17, 2), 0.1, dtype=np.float32)
    exact = np.float64(np.float32(0.1)) * a.shape[0]
    got = run("%r = graph.reduce_sum %a {axes = [0]} : tensor<131072x2xf32> to tensor<2xf32>",
              [("a", "tensor<131072x2xf32>")], "tensor<2xf32>", a)
    assert got.dtype == np.float32
    assert np.all(np.abs(got - exact) <= np.abs(np.sum(a, axis=0) - exact))
    assert np.all(got == np.float32(exact))


@SETTINGS
@given(st.data(), st.sampled_from(list(DTYPES)), st.integers(0, 4), st.integers(0, 4), st.integers(0, 4), seeds)
def test_matmul(data, elem, m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = random_array(rng, (m, k), elem), random_array(rng, (k, n), elem)
    da, db = subset(data, 2), subset(data, 2)
    result = ty((m, n), elem, {i for i, d in ((0, 0 in da), (1, 1 in db)) if d})
    got = run(f"%r = graph.matmul %a, %b : ({ty(a.shape, elem, da)}, {ty(b.shape, elem, db)}) -> {result}",
              [("a", ty(a.shape, elem, da)), ("b", ty(b.shape, elem, db))], result, a, b)
    wide = np.float64 if elem in FLOATS else DTYPES[elem]
    assert_matches(got, a.astype(wide) @ b.astype(wide), elem)


@SETTINGS
@given(st.data(), st.sampled_from(list(DTYPES)), st.lists(st.integers(0, 3), min_size=1, max_size=2),
       st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), seeds)
def test_batch_matmul(data, elem, batch, m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = random_array(rng, (*batch, m, k), elem), random_array(rng, (*batch, k, n), elem)
    da, db = subset(data, a.ndim), subset(data, b.ndim)
    nb = len(batch)
    out_dyn = {i for i in range(nb) if i in da and i in db} | ({nb} if nb in da else set()) | \
        ({nb + 1} if nb + 1 in db else set())
    result = ty((*batch, m, n), elem, out_dyn)
    got = run(f"%r = graph.batch_matmul %a, %b : ({ty(a.shape, elem, da)}, {ty(b.shape, elem, db)}) -> {result}",
              [("a", ty(a.shape, elem, da)), ("b", ty(b.shape, elem, db))], result, a, b)
    wide = np.float64 if elem in FLOATS else DTYPES[elem]
    assert_matches(got, np.matmul(a.astype(wide), b.astype(wide)), elem)


@SETTINGS
@given(st.data(), shapes, st.sampled_from([*DTYPES, "i1"]), seeds)
def test_transpose(data, shape, elem, seed):
    perm = data.draw(st.permutations(range(len(shape))))
    dyn = subset(data, len(shape))
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, size=shape).astype(bool) if elem == "i1" else random_array(rng, shape, elem)
    src, dst = ty(shape, elem, dyn), ty([shape[p] for p in perm], elem, {i for i, p in enumerate(perm) if p in dyn})
    got = run(f"%r = graph.transpose %a {{perm = [{', '.join(map(str, perm))}]}} : {src} to {dst}",
              [("a", src)], dst, a)
    if elem == "i1":
        assert got.dtype == np.bool_ and np.array_equal(got, a.transpose(perm))
    else:
        assert_matches(got, a.transpose(perm), elem)


def _grouping(data, factors):
    """Consecutive products of ``factors``, split at random places: one shape with that many elements."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    bounds = [0, *cuts, len(factors)]
    return [int(np.prod(factors[lo:hi])) for lo, hi in zip(bounds, bounds[1:])]


@SETTINGS
@given(st.data(), st.lists(st.integers(0, 4), max_size=5), st.sampled_from(list(DTYPES)), seeds)
def test_reshape(data, factors, elem, seed):
    src_shape, dst_shape = _grouping(data, factors), _grouping(data, factors)
    dyn_src, dyn_dst = subset(data, len(src_shape)), subset(data, len(dst_shape))
    sizes, size_params, size_values = sizes_of(dst_shape, dyn_dst)
    a = random_array(np.random.default_rng(seed), src_shape, elem)
    src, dst = ty(src_shape, elem, dyn_src), ty(dst_shape, elem, dyn_dst)
    got = run(f"%r = graph.reshape %a{sizes} : {src} to {dst}", [("a", src), *size_params], dst, a, *size_values)
    assert_matches(got, a.reshape(dst_shape), elem)


@SETTINGS
@given(st.data(), nonempty_rank, st.sampled_from(list(DTYPES)), seeds)
def test_slice(data, shape, elem, seed):
    offsets, sizes, strides = [], [], []
    for d in shape:
        stride = data.draw(st.integers(1, 3))
        size = data.draw(st.integers(0, (d - 1) // stride + 1 if d else 0))
        last = d if size == 0 else d - 1 - (size - 1) * stride
        offsets.append(data.draw(st.integers(0, last)))
        sizes.append(size)
        strides.append(stride)
    dyn = subset(data, len(shape))
    a = random_array(np.random.default_rng(seed), shape, elem)
    attrs = f"{{offsets = {offsets}, sizes = {sizes}, strides = {strides}}}"
    src, dst = ty(shape, elem, dyn), ty(sizes, elem)
    got = run(f"%r = graph.slice %a {attrs} : {src} to {dst}", [("a", src)], dst, a)
    expected = a[tuple(slice(o, o + (s - 1) * st_ + 1 if s else o, st_) for o, s, st_ in zip(offsets, sizes, strides))]
    assert_matches(got, expected, elem)


@SETTINGS
@given(st.data(), nonempty_rank, st.integers(1, 3), st.sampled_from(list(DTYPES)), seeds)
def test_concat(data, shape, count, elem, seed):
    axis = data.draw(st.integers(0, len(shape) - 1))
    rng = np.random.default_rng(seed)
    arrays, types, dyns = [], [], []
    for _ in range(count):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        dyn = subset(data, len(s))
        arrays.append(random_array(rng, s, elem))
        types.append(ty(s, elem, dyn))
        dyns.append(dyn)
    # The rule under test: the axis is static when every operand's is; another dim when any operand's is.
    out_dyn = {i for i in range(len(shape))
               if (any(i in d for d in dyns) if i == axis else all(i in d for d in dyns))}
    expected = np.concatenate(arrays, axis=axis)
    result = ty(expected.shape, elem, out_dyn)
    names = [f"a{i}" for i in range(count)]
    got = run(f"%r = graph.concat {', '.join('%' + n for n in names)} {{axis = {axis}}} : "
              f"({', '.join(types)}) -> {result}", list(zip(names, types)), result, *arrays)
    assert_matches(got, expected, elem)


@SETTINGS
@given(st.data(), shapes, st.sampled_from(list(DTYPES)), seeds)
def test_pad(data, shape, elem, seed):
    low = [data.draw(st.integers(0, 2)) for _ in shape]
    high = [data.draw(st.integers(0, 2)) for _ in shape]
    dyn = subset(data, len(shape))
    value = "2.5" if elem in FLOATS else "-7"
    a = random_array(np.random.default_rng(seed), shape, elem)
    expected = np.pad(a, list(zip(low, high)), constant_values=float(value)) if shape else a
    src, dst = ty(shape, elem, dyn), ty(expected.shape, elem, dyn)
    got = run(f"%r = graph.pad %a {{low = {low}, high = {high}, value = {value} : {elem}}} : {src} to {dst}",
              [("a", src)], dst, a)
    assert_matches(got, expected, elem)


@SETTINGS
@given(st.data(), shapes, st.sampled_from(list(DTYPES)))
def test_splat(data, shape, elem):
    dyn = subset(data, len(shape))
    sizes, size_params, size_values = sizes_of(shape, dyn)
    x = 1.25 if elem in FLOATS else -3
    got = run(f"%r = graph.splat %x{sizes} : {elem} to {ty(shape, elem, dyn)}",
              [("x", elem), *size_params], ty(shape, elem, dyn), x, *size_values)
    assert_matches(got, np.full(shape, x, dtype=DTYPES[elem]), elem)


@SETTINGS
@given(st.data(), nonempty_rank, st.sampled_from([*DTYPES, "index"]))
def test_iota(data, shape, elem):
    axis = data.draw(st.integers(0, len(shape) - 1))
    dyn = subset(data, len(shape))
    sizes, size_params, size_values = sizes_of(shape, dyn)
    got = run(f"%r = graph.iota {sizes[2:]} {{axis = {axis}}} : {ty(shape, elem, dyn)}", size_params,
              ty(shape, elem, dyn), *size_values)
    expected = np.indices(shape)[axis] if shape else np.zeros(())
    assert got.shape == tuple(shape) and np.array_equal(got, expected)
    assert got.dtype == np.dtype(DTYPES.get(elem, np.int64))


@SETTINGS
@given(st.data(), st.sampled_from(["softmax", "log_softmax"]), nonempty_rank, st.sampled_from(FLOATS), seeds)
def test_softmax(data, name, shape, elem, seed):
    axis = data.draw(st.integers(0, len(shape) - 1))
    dyn = subset(data, len(shape))
    a = random_array(np.random.default_rng(seed), shape, elem) * 30  # large enough to overflow a naive exp
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True)) if x.size else x
    soft = e / e.sum(axis=axis, keepdims=True) if x.size else x
    expected = soft if name == "softmax" else (np.log(soft) if x.size else x)
    t = ty(shape, elem, dyn)
    got = run(f"%r = graph.{name} %a {{axis = {axis}}} : {t}", [("a", t)], t, a)
    if name == "log_softmax":  # log(softmax) underflows to -inf where log_softmax must not
        assert np.isfinite(got).all()
        expected = np.where(np.isfinite(expected), expected, got)
    assert_matches(got, expected, elem)


def _conv_reference(x, w, stride, padding):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            patch = x[:, :, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w.astype(np.float64))
    return out


@SETTINGS
@given(st.data(), st.sampled_from(["f32", "f64", "i32"]), seeds)
def test_conv2d(data, elem, seed):
    n, c, o = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    stride = [data.draw(st.integers(1, 2)) for _ in range(2)]
    padding = [data.draw(st.integers(0, 1)) for _ in range(2)]
    h, wd = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    kh, kw = data.draw(st.integers(1, h + 2 * padding[0])), data.draw(st.integers(1, wd + 2 * padding[1]))
    rng = np.random.default_rng(seed)
    x, w = random_array(rng, (n, c, h, wd), elem), random_array(rng, (o, c, kh, kw), elem)
    expected = _conv_reference(x, w, stride, padding)
    dx = subset(data, 4)
    out_dyn = {0} & dx | ({2} if 2 in dx else set()) | ({3} if 3 in dx else set())
    result = ty(expected.shape, elem, out_dyn)
    got = run(f"%r = graph.conv2d %x, %w {{stride = {stride}, padding = {padding}}} : "
              f"({ty(x.shape, elem, dx)}, {ty(w.shape, elem)}) -> {result}",
              [("x", ty(x.shape, elem, dx)), ("w", ty(w.shape, elem))], result, x, w)
    assert_matches(got, expected.astype(DTYPES[elem]) if elem == "i32" else expected, elem)


def test_dim():
    a = np.zeros((3, 0, 5), dtype=np.float32)
    for d in range(3):
        assert run("%r = tensor.dim %a, %i : tensor<?x?x5xf32>", [("a", "tensor<?x?x5xf32>"), ("i", "index")],
                   "index", a, d) == a.shape[d]


@pytest.mark.parametrize("shape", [(0, 3), (2, 3), (4, 0)])
def test_elementwise_arith_on_dynamic_and_empty_tensors(shape):
    """The arith ops are the tensor dialect's elementwise ops: casts, select, compare."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    i = rng.integers(-9, 9, size=shape).astype(np.int32)
    t, ti, tb, t64 = "tensor<?x?xf32>", "tensor<?x?xi32>", "tensor<?x?xi1>", "tensor<?x?xf64>"
    src = f"""
func.func @f(%a: {t}, %b: {t}, %i: {ti}) -> ({t}, {t64}, {t}) {{
  %c = arith.cmpf olt, %a, %b : {t}
  %s = arith.select %c, %a, %b : {tb}, {t}
  %e = arith.extf %s : {t} to {t64}
  %f = arith.sitofp %i : {ti} to {t}
  %m = arith.mulf %f, %a : {t}
  func.return %s, %e, %m : {t}, {t64}, {t}
}}"""
    module = irc.parse(src)
    irc.verify(module)
    s, e, m = irc.interpret(module, "f", a, b, i)
    assert s.dtype == np.float32 and np.array_equal(s, np.minimum(a, b))
    assert e.dtype == np.float64 and np.array_equal(e, np.minimum(a, b).astype(np.float64))
    assert m.dtype == np.float32 and np.array_equal(m, i.astype(np.float32) * a)


def test_elementwise_arith_checks_dynamic_dims_at_run_time():
    with pytest.raises(InterpreterError):
        run("%r = arith.addf %a, %b : tensor<?xf32>", [("a", "tensor<?xf32>"), ("b", "tensor<?xf32>")],
            "tensor<?xf32>", np.ones(1, np.float32), np.ones(3, np.float32))


# ---- shape errors: at verify time with a line and column, at run time for ? dims -----------------

VERIFY_ERRORS = [
    ("%r = graph.matmul %a, %b : (tensor<3x4xf32>, tensor<5x6xf32>) -> tensor<3x6xf32>",
     ["tensor<3x4xf32>", "tensor<5x6xf32>"], "tensor<3x6xf32>", "inner dimensions differ: tensor<3x4xf32> and "
     "tensor<5x6xf32> (4 != 5)"),
    ("%r = graph.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x6xf32>",
     ["tensor<3x4xf32>", "tensor<4x5xf32>"], "tensor<3x6xf32>",
     "result type must be tensor<3x5xf32> (inferred from the operands), got tensor<3x6xf32>"),
    ("%r = graph.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf64>) -> tensor<3x5xf32>",
     ["tensor<3x4xf32>", "tensor<4x5xf64>"], "tensor<3x5xf32>", "operands must have one element type"),
    ("%r = graph.matmul %a, %b : (tensor<3x4xi1>, tensor<4x5xi1>) -> tensor<3x5xi1>",
     ["tensor<3x4xi1>", "tensor<4x5xi1>"], "tensor<3x5xi1>", "operand elements must be integer (not i1)"),
    ("%r = graph.batch_matmul %a, %b : (tensor<2x3x4xf32>, tensor<3x4x5xf32>) -> tensor<2x3x5xf32>",
     ["tensor<2x3x4xf32>", "tensor<3x4x5xf32>"], "tensor<2x3x5xf32>", "batch dimension 0 differs"),
    ("%r = graph.reshape %a : tensor<2x6xf32> to tensor<3x5xf32>", ["tensor<2x6xf32>"], "tensor<3x5xf32>",
     "cannot reshape tensor<2x6xf32> (12 elements) to tensor<3x5xf32> (15 elements)"),
    ("%r = graph.reshape %a, %n : tensor<2x6xf32> to tensor<?x5xf32>", ["tensor<2x6xf32>", "index"],
     "tensor<?x5xf32>", "12 is not a multiple of 5"),
    ("%r = graph.reshape %a : tensor<2x6xf32> to tensor<?x4xf32>", ["tensor<2x6xf32>"], "tensor<?x4xf32>",
     "needs 1 index operand after the first for the dynamic sizes of tensor<?x4xf32>, got 0"),
    ("%r = graph.reduce_sum %a {axes = [2]} : tensor<3x4xf32> to tensor<3x4xf32>", ["tensor<3x4xf32>"],
     "tensor<3x4xf32>", "axis 2 is out of range for rank 2"),
    ("%r = graph.reduce_sum %a {axes = [1, 1]} : tensor<3x4xf32> to tensor<3xf32>", ["tensor<3x4xf32>"],
     "tensor<3xf32>", "axes [1, 1] repeat a dimension"),
    ("%r = graph.reduce_sum %a {axes = [1]} : tensor<3x4xf32> to tensor<4xf32>", ["tensor<3x4xf32>"],
     "tensor<4xf32>", "result type must be tensor<3xf32>"),
    ("%r = graph.reduce_mean %a {axes = [0]} : tensor<3xi32> to tensor<i32>", ["tensor<3xi32>"], "tensor<i32>",
     "operand elements must be floating point"),
    ("%r = graph.reduce_max %a : tensor<3xf32> to tensor<f32>", ["tensor<3xf32>"], "tensor<f32>",
     "requires a 'axes' attribute"),
    ("%r = graph.concat %a, %b {axis = 0} : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<7x4xf32>",
     ["tensor<3x4xf32>", "tensor<4xf32>"], "tensor<7x4xf32>", "operands must have one rank"),
    ("%r = graph.concat %a, %b {axis = 0} : (tensor<3x4xf32>, tensor<3x5xf32>) -> tensor<6x4xf32>",
     ["tensor<3x4xf32>", "tensor<3x5xf32>"], "tensor<6x4xf32>", "operands differ in dimension 1"),
    ("%r = graph.concat %a {axis = -1} : (tensor<3xf32>) -> tensor<3xf32>", ["tensor<3xf32>"], "tensor<3xf32>",
     "axis -1 is out of range for rank 1"),
    ("%r = graph.broadcast %a : tensor<3xf32> to tensor<2x4xf32>", ["tensor<3xf32>"], "tensor<2x4xf32>",
     "operand dimension 0 is 3, which is neither 1 nor 4"),
    ("%r = graph.broadcast %a : tensor<2x3xf32> to tensor<3xf32>", ["tensor<2x3xf32>"], "tensor<3xf32>",
     "cannot broadcast tensor<2x3xf32> to the lower rank of tensor<3xf32>"),
    ("%r = graph.transpose %a {perm = [0, 0]} : tensor<3x4xf32> to tensor<3x3xf32>", ["tensor<3x4xf32>"],
     "tensor<3x3xf32>", "perm [0, 0] is not a permutation of 0..1"),
    ("%r = graph.transpose %a {perm = [1, 0]} : tensor<3x4xf32> to tensor<3x4xf32>", ["tensor<3x4xf32>"],
     "tensor<3x4xf32>", "result type must be tensor<4x3xf32>"),
    ("%r = graph.slice %a {offsets = [2], sizes = [2], strides = [1]} : tensor<3xf32> to tensor<2xf32>",
     ["tensor<3xf32>"], "tensor<2xf32>", "slice of dimension 0 (offset 2, size 2, stride 1) is out of bounds"),
    ("%r = graph.slice %a {offsets = [0], sizes = [2], strides = [0]} : tensor<3xf32> to tensor<2xf32>",
     ["tensor<3xf32>"], "tensor<2xf32>", "strides must be at least 1"),
    ("%r = graph.pad %a {low = [1], high = [1], value = 0 : i32} : tensor<3xf32> to tensor<5xf32>",
     ["tensor<3xf32>"], "tensor<5xf32>", "requires a 'value' attribute of the element type f32"),
    ("%r = graph.pad %a {low = [1, 0], high = [1], value = 0.0 : f32} : tensor<3xf32> to tensor<5xf32>",
     ["tensor<3xf32>"], "tensor<5xf32>", "'low' needs 1 entries, got 2"),
    ("%r = graph.splat %x : f64 to tensor<4xf32>", ["f64"], "tensor<4xf32>",
     "operand must be a scalar of the element type of tensor<4xf32>, got f64"),
    ("%r = graph.iota {axis = 1} : tensor<4xi32>", [], "tensor<4xi32>", "axis 1 is out of range for rank 1"),
    ("%r = graph.softmax %a {axis = 0} : tensor<4xi32>", ["tensor<4xi32>"], "tensor<4xi32>",
     "operand elements must be floating point"),
    ("%r = graph.conv2d %x, %w : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>",
     ["tensor<1x3x8x8xf32>", "tensor<4x2x3x3xf32>"], "tensor<1x4x6x6xf32>", "input channels (3) differ from the "
     "weight's (2)"),
    ("%r = graph.conv2d %x, %w : (tensor<1x3x2x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x0x6xf32>",
     ["tensor<1x3x2x8xf32>", "tensor<4x3x3x3xf32>"], "tensor<1x4x0x6xf32>",
     "the kernel height (3) exceeds the padded input height (2 + 2*0)"),
    ("%r = graph.conv2d %x, %w {stride = [0, 1]} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> "
     "tensor<1x4x6x6xf32>", ["tensor<1x3x8x8xf32>", "tensor<4x3x3x3xf32>"], "tensor<1x4x6x6xf32>",
     "stride must be at least 1"),
]


@pytest.mark.parametrize("op, params, result, message", VERIFY_ERRORS)
def test_verifier_reports_shape_errors_at_the_op(op, params, result, message):
    names = re.findall(r"%(\w+)", op.split(" : ")[0])[1:]
    text = program(op, list(zip(names, params)), result)
    with pytest.raises(irc.IRError) as info:
        irc.verify(irc.parse(text, "shapes.ir"))
    name = op.split()[2]
    assert f"shapes.ir:2:8: error: '{name}' op " in str(info.value)
    assert message in str(info.value)


RUNTIME_ERRORS = [
    ("%r = graph.matmul %a, %b : (tensor<3x?xf32>, tensor<?x5xf32>) -> tensor<3x5xf32>",
     [("a", "tensor<3x?xf32>"), ("b", "tensor<?x5xf32>")], "tensor<3x5xf32>",
     [np.zeros((3, 4), np.float32), np.zeros((6, 5), np.float32)], "inner dimensions differ: [3, 4] and [6, 5]"),
    ("%r = graph.batch_matmul %a, %b : (tensor<?x3x4xf32>, tensor<?x4x5xf32>) -> tensor<?x3x5xf32>",
     [("a", "tensor<?x3x4xf32>"), ("b", "tensor<?x4x5xf32>")], "tensor<?x3x5xf32>",
     [np.zeros((1, 3, 4), np.float32), np.zeros((2, 4, 5), np.float32)], "batch dimensions differ"),
    ("%r = graph.reshape %a, %n : tensor<?xf32> to tensor<?x4xf32>", [("a", "tensor<?xf32>"), ("n", "index")],
     "tensor<?x4xf32>", [np.zeros(10, np.float32), 2], "cannot reshape shape [10] (10 elements) to [2, 4] (8 elements)"),
    ("%r = graph.broadcast %a : tensor<?xf32> to tensor<3x4xf32>", [("a", "tensor<?xf32>")], "tensor<3x4xf32>",
     [np.zeros(3, np.float32)], "cannot broadcast shape [3] to [3, 4]"),
    ("%r = graph.concat %a, %b {axis = 0} : (tensor<2x?xf32>, tensor<2x?xf32>) -> tensor<4x?xf32>",
     [("a", "tensor<2x?xf32>"), ("b", "tensor<2x?xf32>")], "tensor<4x?xf32>",
     [np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)], "differ off the axis 0"),
    ("%r = graph.slice %a {offsets = [1], sizes = [3]} : tensor<?xf32> to tensor<3xf32>", [("a", "tensor<?xf32>")],
     "tensor<3xf32>", [np.zeros(3, np.float32)], "is out of bounds for shape [3]"),
    ("%r = graph.splat %x, %n : f32 to tensor<?xf32>", [("x", "f32"), ("n", "index")], "tensor<?xf32>",
     [1.0, -2], "negative size in [-2]"),
    ("%r = graph.conv2d %x, %w : (tensor<1x?x4x4xf32>, tensor<1x2x3x3xf32>) -> tensor<1x1x2x2xf32>",
     [("x", "tensor<1x?x4x4xf32>"), ("w", "tensor<1x2x3x3xf32>")], "tensor<1x1x2x2xf32>",
     [np.zeros((1, 3, 4, 4), np.float32), np.zeros((1, 2, 3, 3), np.float32)], "input channels (3) differ"),
    ("%r = tensor.dim %a, %i : tensor<?xf32>", [("a", "tensor<?xf32>"), ("i", "index")], "index",
     [np.zeros(3, np.float32), 1], "dimension 1 is out of range for a rank-1 tensor"),
]


@pytest.mark.parametrize("op, params, result, values, message", RUNTIME_ERRORS)
def test_dynamic_dims_are_checked_at_run_time(op, params, result, values, message):
    module = irc.parse(program(op, params, result), "dyn.ir")
    irc.verify(module)
    with pytest.raises(InterpreterError) as info:
        irc.interpret(module, "f", *values)
    assert str(info.value).startswith("dyn.ir:2:8: error: ")
    assert message in str(info.value)


# ---- round trips ------------------------------------------------------------------------------------

ROUND_TRIP = """
func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<?x3x4xf32>, %d: tensor<?x4x5xf32>,
             %img: tensor<?x3x8x8xf32>, %k: tensor<4x3x3x3xf32>, %x: f32, %n: index) -> tensor<3x5xf32> {
  %0 = graph.broadcast %a, %n : tensor<3x4xf32> to tensor<?x3x4xf32>
  %1 = graph.reshape %a, %n : tensor<3x4xf32> to tensor<?x6xf32>
  %2 = graph.reduce_sum %a {axes = [1], keepdims} : tensor<3x4xf32> to tensor<3x1xf32>
  %3 = graph.reduce_prod %a {axes = [0, 1]} : tensor<3x4xf32> to tensor<f32>
  %4 = graph.reduce_max %c {axes = [0]} : tensor<?x3x4xf32> to tensor<3x4xf32>
  %5 = graph.reduce_min %c {axes = [1]} : tensor<?x3x4xf32> to tensor<?x4xf32>
  %6 = graph.reduce_mean %a {axes = []} : tensor<3x4xf32> to tensor<3x4xf32>
  %7 = graph.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %8 = graph.batch_matmul %c, %d : (tensor<?x3x4xf32>, tensor<?x4x5xf32>) -> tensor<?x3x5xf32>
  %9 = graph.conv2d %img, %k {stride = [2, 1], padding = [1, 0]} : (tensor<?x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x4x6xf32>
  %10 = graph.conv2d %img, %k : (tensor<?x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x6x6xf32>
  %11 = graph.transpose %c {perm = [2, 0, 1]} : tensor<?x3x4xf32> to tensor<4x?x3xf32>
  %12 = graph.slice %a {offsets = [0, 1], sizes = [2, 2], strides = [1, 2]} : tensor<3x4xf32> to tensor<2x2xf32>
  %13 = graph.concat %a, %a, %a {axis = 1} : (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x12xf32>
  %14 = graph.pad %c {low = [0, 1, 0], high = [2, 0, 0], value = -1.5 : f32} : tensor<?x3x4xf32> to tensor<?x4x4xf32>
  %15 = graph.splat %x, %n : f32 to tensor<4x?xf32>
  %16 = graph.iota %n, %n {axis = 1} : tensor<?x?xi32>
  %17 = graph.iota {axis = 0} : tensor<4xf64>
  %18 = graph.softmax %a {axis = 1} : tensor<3x4xf32>
  %19 = graph.log_softmax %c {axis = 0} : tensor<?x3x4xf32>
  %20 = tensor.dim %c, %n : tensor<?x3x4xf32>
  %21 = graph.fused %a, %c, %x {maps = [[1, 2], [0, 1, 2], []], reduce = "max", axes = [0], keepdims} ({
  ^bb0(%p: f32, %q: f32, %s: f32):
    %t = arith.mulf %p, %q : f32
    %u = arith.addf %t, %s : f32
    graph.yield %u : f32
  }) : (tensor<3x4xf32>, tensor<?x3x4xf32>, f32) -> tensor<1x3x4xf32>
  %22 = tensor.extract %c[%n, %n, %n] : tensor<?x3x4xf32>
  %23 = tensor.extract %3[] : tensor<f32>
  %24 = graph.gather %a, %16 {axis = 1} : (tensor<3x4xf32>, tensor<?x?xi32>) -> tensor<3x?x?xf32>
  %25 = graph.dynamic_slice %a, %n, %n : tensor<3x4xf32> to tensor<2x4xf32>
  %26 = graph.dynamic_update_slice %a, %25, %n, %n : (tensor<3x4xf32>, tensor<2x4xf32>, index, index) -> tensor<3x4xf32>
  %27 = graph.scatter_add %a, %16, %24 {axis = 1} : (tensor<3x4xf32>, tensor<?x?xi32>, tensor<3x?x?xf32>) -> tensor<3x4xf32>
  %28 = graph.conv2d_weight_grad %img, %9 {kernel = [3, 3], stride = [2, 1], padding = [1, 0]} : (tensor<?x3x8x8xf32>, tensor<?x4x4x6xf32>) -> tensor<4x3x3x3xf32>
  func.return %7 : tensor<3x5xf32>
}
"""


def test_round_trip_custom_and_generic():
    module = irc.parse(ROUND_TRIP)
    irc.verify(module)
    text = print_module(module)
    assert text == print_module(irc.parse(text))
    generic = print_module(module, generic=True)
    assert '"graph.matmul"(%a, %b)' in generic
    reparsed = irc.parse(generic)
    irc.verify(reparsed)
    assert print_module(reparsed) == text
    assert print_module(reparsed, generic=True) == generic
    # The text is the one written, modulo the parameter list's line break.
    body = ROUND_TRIP.split("{\n", 1)[1]
    assert body in text


def test_round_trip_covers_every_tensor_op():
    names = {op.name for op in irc.parse(ROUND_TRIP).walk()}
    registered = {name for name in registry.OPS if name.startswith(("graph.", "tensor."))}
    assert registered <= names, f"add to ROUND_TRIP: {sorted(registered - names)}"


# ---- folding -------------------------------------------------------------------------------------------


def _const(name: str, value, type_text: str) -> str:
    t = parse_type(type_text)
    if isinstance(t, TensorType):
        return f"%{name} = arith.constant {DenseAttr(value, t)}"
    return f"%{name} = arith.constant {value} : {type_text}"


R = np.random.default_rng(7)
M34, M45 = R.standard_normal((3, 4)).astype(np.float32), R.standard_normal((4, 5)).astype(np.float32)
B234, B245 = R.standard_normal((2, 3, 4)), R.standard_normal((2, 4, 5))
IMG, KER = R.standard_normal((1, 2, 5, 5)).astype(np.float32), R.standard_normal((3, 2, 3, 3)).astype(np.float32)
I34 = R.integers(-9, 9, (3, 4)).astype(np.int32)

# (op, operands: [(name, type, value)], result type, numpy's result)
FOLDS = [
    ("%r = graph.broadcast %a : tensor<1xf32> to tensor<3x4xf32>", [("a", "tensor<1xf32>", M34[0, :1])],
     "tensor<3x4xf32>", np.broadcast_to(M34[0, :1], (3, 4))),  # a splat: folded
    ("%r = graph.broadcast %a, %n : tensor<4xf32> to tensor<?x4xf32>",
     [("a", "tensor<4xf32>", M34[0]), ("n", "index", 2)], "tensor<?x4xf32>", None),  # dynamic: not folded
    ("%r = graph.reshape %a : tensor<3x4xi32> to tensor<2x6xi32>", [("a", "tensor<3x4xi32>", I34)],
     "tensor<2x6xi32>", I34.reshape(2, 6)),
    ("%r = graph.reduce_sum %a {axes = [1]} : tensor<3x4xf32> to tensor<3xf32>", [("a", "tensor<3x4xf32>", M34)],
     "tensor<3xf32>", M34.astype(np.float64).sum(1).astype(np.float32)),
    ("%r = graph.reduce_prod %a {axes = [0], keepdims} : tensor<3x4xi32> to tensor<1x4xi32>",
     [("a", "tensor<3x4xi32>", I34)], "tensor<1x4xi32>", I34.prod(0, keepdims=True, dtype=np.int32)),
    ("%r = graph.reduce_max %a {axes = [0, 1]} : tensor<3x4xf32> to tensor<f32>", [("a", "tensor<3x4xf32>", M34)],
     "tensor<f32>", np.array(M34.max())),
    ("%r = graph.reduce_min %a {axes = [1]} : tensor<3x4xi32> to tensor<3xi32>", [("a", "tensor<3x4xi32>", I34)],
     "tensor<3xi32>", I34.min(1)),
    ("%r = graph.reduce_mean %a {axes = [0]} : tensor<3x4xf32> to tensor<4xf32>", [("a", "tensor<3x4xf32>", M34)],
     "tensor<4xf32>", M34.astype(np.float64).mean(0).astype(np.float32)),
    ("%r = graph.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>",
     [("a", "tensor<3x4xf32>", M34), ("b", "tensor<4x5xf32>", M45)], "tensor<3x5xf32>", M34 @ M45),
    ("%r = graph.batch_matmul %a, %b : (tensor<2x3x4xf64>, tensor<2x4x5xf64>) -> tensor<2x3x5xf64>",
     [("a", "tensor<2x3x4xf64>", B234), ("b", "tensor<2x4x5xf64>", B245)], "tensor<2x3x5xf64>", B234 @ B245),
    ("%r = graph.conv2d %a, %b {stride = [2, 1], padding = [1, 1]} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> "
     "tensor<1x3x3x5xf32>", [("a", "tensor<1x2x5x5xf32>", IMG), ("b", "tensor<3x2x3x3xf32>", KER)],
     "tensor<1x3x3x5xf32>", _conv_reference(IMG, KER, (2, 1), (1, 1)).astype(np.float32)),
    ("%r = graph.transpose %a {perm = [1, 0]} : tensor<3x4xf32> to tensor<4x3xf32>",
     [("a", "tensor<3x4xf32>", M34)], "tensor<4x3xf32>", M34.T),
    ("%r = graph.slice %a {offsets = [1, 0], sizes = [2, 2], strides = [1, 3]} : tensor<3x4xf32> to tensor<2x2xf32>",
     [("a", "tensor<3x4xf32>", M34)], "tensor<2x2xf32>", M34[1:3, 0:4:3]),
    ("%r = graph.concat %a, %b {axis = 0} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<6x4xf32>",
     [("a", "tensor<3x4xf32>", M34), ("b", "tensor<3x4xf32>", M34 * 2)], "tensor<6x4xf32>",
     np.concatenate([M34, M34 * 2])),
    ("%r = graph.pad %a {low = [0, 1], high = [1, 0], value = 7 : i32} : tensor<3x4xi32> to tensor<4x5xi32>",
     [("a", "tensor<3x4xi32>", I34)], "tensor<4x5xi32>", np.pad(I34, ((0, 1), (1, 0)), constant_values=7)),
    ("%r = graph.splat %a : f32 to tensor<2x3xf32>", [("a", "f32", 0.5)], "tensor<2x3xf32>",
     np.full((2, 3), 0.5, np.float32)),
    ("%r = graph.iota {axis = 1} : tensor<2x3xi64>", [], "tensor<2x3xi64>", np.indices((2, 3))[1]),
    ("%r = graph.softmax %a {axis = 1} : tensor<3x4xf32>", [("a", "tensor<3x4xf32>", M34)], "tensor<3x4xf32>",
     (np.exp(M34.astype(np.float64)) / np.exp(M34.astype(np.float64)).sum(1, keepdims=True)).astype(np.float32)),
    ("%r = graph.log_softmax %a {axis = 0} : tensor<3x4xf32>", [("a", "tensor<3x4xf32>", M34)], "tensor<3x4xf32>",
     (M34 - np.log(np.exp(M34.astype(np.float64)).sum(0, keepdims=True))).astype(np.float32)),
    ("%r = tensor.dim %a, %b : tensor<3x4xf32>", [("a", "tensor<3x4xf32>", M34), ("b", "index", 1)], "index", 4),
]


@pytest.mark.parametrize("op, operands, result, expected", FOLDS)
def test_constant_operands_fold_to_numpys_result(op, operands, result, expected):
    lines = [_const(name, value, t) for name, t, value in operands]
    text = "func.func @f() -> {r} {{\n  {body}\n  {op}\n  func.return %r : {r}\n}}\n".format(
        r=result, body="\n  ".join(lines), op=op)
    before = irc.interpret(irc.parse(text), "f")
    module = irc.passes.run(irc.parse(text), "canonicalize")
    ops = [o.name for o in module.walk() if o.name.startswith(("graph.", "tensor."))]
    if expected is None:
        assert ops, "a result with a dynamic shape cannot become a constant"
        return
    assert not ops, print_module(module)
    after = irc.interpret(module, "f")
    if isinstance(expected, int):
        assert before == after == expected
        return
    assert after.dtype == expected.dtype and np.array_equal(after, before)
    rtol = 1e-6 if expected.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(after, expected, rtol=rtol, atol=rtol)


def test_a_broadcast_that_would_copy_a_constant_is_left_to_fusion():
    """Folding would store the 4 values 3 times; the broadcast reads them where they are used."""
    text = ("func.func @f(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {\n"
            "  %a = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>\n"
            "  %b = graph.broadcast %a : tensor<4xf32> to tensor<3x4xf32>\n"
            "  %r = arith.addf %x, %b : tensor<3x4xf32>\n  func.return %r : tensor<3x4xf32>\n}\n")
    module = irc.passes.run(irc.parse(text), "canonicalize")
    assert "graph.broadcast" in print_module(module)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(irc.compile(module).f(x), x + np.float32([1, 2, 3, 4]))


IDENTITIES = [
    # (ops, operand type, result type): each folds to the operand %a
    ["%r = graph.transpose %a {perm = [0, 1, 2]} : tensor<2x?x4xf32> to tensor<2x?x4xf32>"],
    ["%t = graph.transpose %a {perm = [1, 2, 0]} : tensor<2x?x4xf32> to tensor<?x4x2xf32>",
     "%r = graph.transpose %t {perm = [2, 0, 1]} : tensor<?x4x2xf32> to tensor<2x?x4xf32>"],
    ["%r = graph.reduce_sum %a {axes = []} : tensor<2x?x4xf32> to tensor<2x?x4xf32>"],
    ["%r = graph.concat %a {axis = 1} : (tensor<2x?x4xf32>) -> tensor<2x?x4xf32>"],
    ["%r = graph.pad %a {low = [0, 0, 0], high = [0, 0, 0], value = 0.0 : f32} : tensor<2x?x4xf32> to "
     "tensor<2x?x4xf32>"],
]
STATIC_IDENTITIES = [
    ["%r = graph.broadcast %a : tensor<2x3x4xf32> to tensor<2x3x4xf32>"],
    ["%r = graph.reshape %a : tensor<2x3x4xf32> to tensor<2x3x4xf32>"],
    ["%t = graph.reshape %a : tensor<2x3x4xf32> to tensor<6x4xf32>",
     "%r = graph.reshape %t : tensor<6x4xf32> to tensor<2x3x4xf32>"],
    ["%r = graph.slice %a {offsets = [0, 0, 0], sizes = [2, 3, 4]} : tensor<2x3x4xf32> to tensor<2x3x4xf32>"],
]


@pytest.mark.parametrize("ops, t", [(o, "tensor<2x?x4xf32>") for o in IDENTITIES] +
                         [(o, "tensor<2x3x4xf32>") for o in STATIC_IDENTITIES])
def test_identities_fold_to_the_operand(ops, t):
    text = f"func.func @f(%a: {t}) -> {t} {{\n  " + "\n  ".join(ops) + f"\n  func.return %r : {t}\n}}\n"
    module = irc.passes.run(irc.parse(text), "canonicalize")
    assert print_module(module) == f"func.func @f(%a: {t}) -> {t} {{\n  func.return %a : {t}\n}}\n"


def test_transposes_and_reshapes_compose():
    text = """
func.func @f(%a: tensor<2x3x4xf32>) -> (tensor<3x4x2xf32>, tensor<4x6xf32>) {
  %t = graph.transpose %a {perm = [1, 0, 2]} : tensor<2x3x4xf32> to tensor<3x2x4xf32>
  %u = graph.transpose %t {perm = [0, 2, 1]} : tensor<3x2x4xf32> to tensor<3x4x2xf32>
  %s = graph.reshape %a : tensor<2x3x4xf32> to tensor<24xf32>
  %r = graph.reshape %s : tensor<24xf32> to tensor<4x6xf32>
  func.return %u, %r : tensor<3x4x2xf32>, tensor<4x6xf32>
}
"""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    module = irc.passes.run(irc.parse(text), "canonicalize")
    ops = [op for op in module.walk() if op.name.startswith("graph.")]
    assert [op.name for op in ops] == ["graph.transpose", "graph.reshape"]
    assert all(op.operands[0].name_hint == "a" for op in ops)
    u, r = irc.interpret(module, "f", a)
    assert np.array_equal(u, a.transpose(1, 2, 0)) and np.array_equal(r, a.reshape(4, 6))


def test_dim_of_a_static_dimension_folds():
    text = program("%r = tensor.dim %a, %i : tensor<?x5xf32>", [("a", "tensor<?x5xf32>")], "index")
    text = text.replace("{\n", "{\n  %i = arith.constant 1 : index\n", 1)
    module = irc.passes.run(irc.parse(text), "canonicalize")
    assert "tensor.dim" not in print_module(module)
    assert irc.interpret(module, "f", np.zeros((2, 5), np.float32)) == 5


# ---- the Python builders ---------------------------------------------------------------------------


def test_builders_infer_result_types():
    module = irc.parse("func.func @f(%a: tensor<?x4xf32>, %b: tensor<4x5xf32>) {\n  func.return\n}\n")
    a, b = module.function("f").body.entry.args
    assert graph.MatmulOp.build(a, b).results[0].type is parse_type("tensor<?x5xf32>")
    assert graph.TransposeOp.build(a, [1, 0]).results[0].type is parse_type("tensor<4x?xf32>")
    assert graph.ReduceSumOp.build(a, [1], keepdims=True).results[0].type is parse_type("tensor<?x1xf32>")
    assert graph.ConcatOp.build([b, b], axis=1).results[0].type is parse_type("tensor<4x10xf32>")
    assert graph.SliceOp.build(b, [0, 1], [2, 2], [2, 2]).results[0].type is parse_type("tensor<2x2xf32>")
    assert graph.SoftmaxOp.build(b, 1).results[0].type is b.type
    assert graph.BroadcastOp.build(b, parse_type("tensor<2x4x5xf32>")).results[0].type.shape == (2, 4, 5)
    assert graph.PadOp.build(b, [1, 0], [0, 1], FloatAttr(0.0, f32)).results[0].type.shape == (5, 6)
    with pytest.raises(graph.ShapeError, match="inner dimensions differ"):
        graph.MatmulOp.build(b, b)


def test_tensor_functions_compile_to_loops():
    pytest.importorskip("llvmlite")
    module = irc.parse(program("%e = math.exp %a : tensor<4xf32>\n"
                               "  %r = graph.reduce_sum %e {axes = [0]} : tensor<4xf32> to tensor<f32>",
                               [("a", "tensor<4xf32>")], "tensor<f32>"))
    a = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(irc.compile(module).f(a), np.exp(a).sum(), rtol=1e-6)
