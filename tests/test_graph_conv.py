"""``graph.conv2d_weight_grad`` (dialects/graph_conv.py) and the convolution lowerings that use the
GEMM library (lowering/conv.py): the interpreter against torch's weight gradient, compiled code
(library products for f32/f64, the inline GEMM that accumulates over images for integers) against
the interpreter, the verifier's messages; and reductions whose reduced dims end the domain
(batch norm's [0, 2, 3]) compiled against numpy."""

from __future__ import annotations

import irc.passes
import numpy as np
import pytest

import irc
from irc.diagnostics import IRError

try:
    import torch
except ImportError:
    torch = None


def dims(shape) -> str:
    return "x".join(map(str, shape))


def out_size(n, k, s, p) -> int:
    return (n + 2 * p - k) // s + 1


def program(x_shape, o, kernel, stride, padding, elem="f32"):
    n, c, h, w = x_shape
    g_shape = (n, o, out_size(h, kernel[0], stride[0], padding[0]), out_size(w, kernel[1], stride[1], padding[1]))
    x, g, r = (f"tensor<{dims(s)}x{elem}>" for s in (x_shape, g_shape, (o, c, *kernel)))
    text = (f"func.func @f(%x: {x}, %g: {g}) -> {r} {{\n"
            f"  %r = graph.conv2d_weight_grad %x, %g {{kernel = {list(kernel)}, stride = {list(stride)}, "
            f"padding = {list(padding)}}} : ({x}, {g}) -> {r}\n"
            f"  func.return %r : {r}\n}}\n")
    return text, g_shape


def reference(x, g, kernel, stride, padding):
    """The weight gradient from loops over the definition, in f64."""
    n, c, h, w = x.shape
    o, ho, wo = g.shape[1:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    out = np.zeros((o, c, *kernel))
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            taps = xp[:, :, i:i + stride[0] * (ho - 1) + 1:stride[0], j:j + stride[1] * (wo - 1) + 1:stride[1]]
            out[:, :, i, j] = np.einsum("nopq,ncpq->oc", g.astype(np.float64), taps)
    return out


CASES = [
    ((2, 3, 8, 8), 4, (3, 3), (1, 1), (1, 1)),
    ((3, 5, 9, 7), 6, (3, 2), (2, 3), (1, 2)),  # strides that leave input rows unused
    ((1, 2, 6, 6), 3, (1, 1), (1, 1), (0, 0)),
    ((2, 16, 12, 12), 40, (5, 5), (1, 1), (2, 2)),  # more than one column panel of the library's tile
    ((4, 1, 4, 4), 2, (4, 4), (1, 1), (0, 0)),  # one output position
]


@pytest.mark.parametrize("x_shape, o, kernel, stride, padding", CASES)
def test_weight_grad_interpreted_and_compiled(x_shape, o, kernel, stride, padding):
    rng = np.random.default_rng(3)
    for elem, dtype in (("f32", np.float32), ("f64", np.float64)):
        text, g_shape = program(x_shape, o, kernel, stride, padding, elem)
        module = irc.parse(text)
        x = rng.standard_normal(x_shape).astype(dtype)
        g = rng.standard_normal(g_shape).astype(dtype)
        want = reference(x, g, kernel, stride, padding)
        tol = 1e-12 if elem == "f64" else 1e-5
        np.testing.assert_allclose(irc.interpret(module, "f", x, g), want, rtol=tol, atol=tol * 10)
        # a sum of N*Ho*Wo products: the bound of such a sum, relative to the sum of magnitudes
        bound = reference(np.abs(x), np.abs(g), kernel, stride, padding)
        terms = x_shape[0] * g_shape[2] * g_shape[3]
        err = np.abs(irc.compile(module).f(x, g) - want)
        assert np.all(err <= 4 * (terms + 1) * np.finfo(dtype).eps * bound + 1e-30), elem


def test_weight_grad_inline_gemm_for_floats():
    """With ``blas=True`` (no GEMM library) floats take the inline GEMM too, accumulating over images."""
    pytest.importorskip("scipy")
    text, g_shape = program((3, 4, 7, 6), 5, (3, 3), (2, 1), (1, 1), "f64")
    module = irc.parse(text)
    rng = np.random.default_rng(8)
    x, g = rng.standard_normal((3, 4, 7, 6)), rng.standard_normal(g_shape)
    lowered, _ = irc.compile(module, blas=True).f.lower(((3, 4, 7, 6), g_shape))
    assert not any(f.is_declaration for f in lowered.functions)  # no library, no BLAS call
    got = irc.compile(module, blas=True).f(x, g)
    np.testing.assert_allclose(got, reference(x, g, (3, 3), (2, 1), (1, 1)), rtol=1e-12, atol=1e-12)


def test_weight_grad_compiled_integers_are_exact():
    """Integers take the inline GEMM, which accumulates image after image into the result."""
    text, g_shape = program((3, 4, 7, 6), 5, (3, 3), (2, 1), (1, 1), "i32")
    module = irc.parse(text)
    rng = np.random.default_rng(4)
    x = rng.integers(-9, 9, (3, 4, 7, 6)).astype(np.int32)
    g = rng.integers(-9, 9, g_shape).astype(np.int32)
    want = irc.interpret(module, "f", x, g)
    np.testing.assert_array_equal(want, reference(x, g, (3, 3), (2, 1), (1, 1)).astype(np.int32))
    np.testing.assert_array_equal(irc.compile(module).f(x, g), want)


def test_weight_grad_matches_torch():
    if torch is None:
        pytest.skip("torch is not installed")
    text, g_shape = program((2, 3, 9, 8), 4, (3, 2), (2, 1), (1, 0), "f64")
    rng = np.random.default_rng(5)
    x, g = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal(g_shape)
    want = torch.nn.grad.conv2d_weight(torch.tensor(x), (4, 3, 3, 2), torch.tensor(g), stride=(2, 1), padding=(1, 0))
    np.testing.assert_allclose(irc.interpret(irc.parse(text), "f", x, g), want.numpy(), rtol=1e-12, atol=1e-12)


def test_conv2d_gradient_uses_weight_grad_and_the_input_grad_pads_in_the_convolution():
    """The weight's cotangent is one ``graph.conv2d_weight_grad``; with stride 1 the input's is a
    convolution with the padding K-1-p (no padded copy of the cotangent)."""
    text = """func.func @f(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32> {
  %y = graph.conv2d %x, %w {stride = [1, 1], padding = [1, 1]} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
  func.return %y : tensor<2x4x8x8xf32>
}"""
    m = irc.passes.run(irc.parse(text), "vjp{func=f},canonicalize,cse,dce")
    body = str(m.lookup("f_vjp"))
    assert body.count("graph.conv2d_weight_grad") == 1
    assert "graph.pad" not in body
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 3, 8, 8)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    u = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    got = irc.compile(m).f_vjp(x, w, u)
    want = irc.interpret(m, "f_vjp", x, w, u)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x, g, message", [
    ("2x3x8x8", "2x4x7x8", "not the convolution's output sizes"),
    ("2x3x8x8", "3x4x8x8", "different batch sizes"),
    ("2x3x8", "2x4x8x8", "rank-4"),
])
def test_weight_grad_verifier(x, g, message):
    text = (f"func.func @f(%x: tensor<{x}xf32>, %g: tensor<{g}xf32>) {{\n"
            f"  %r = graph.conv2d_weight_grad %x, %g {{kernel = [3, 3], padding = [1, 1]}} : "
            f"(tensor<{x}xf32>, tensor<{g}xf32>) -> tensor<4x3x3x3xf32>\n"
            f"  func.return\n}}\n")
    with pytest.raises(IRError, match=message):
        irc.verify(irc.parse(text))


@pytest.mark.parametrize("shape, axes", [((3, 4, 5, 6), [0, 2, 3]), ((2, 3, 37), [0, 2]), ((4, 5, 3), [1, 2]),
                                         ((3, 4, 5), [0, 1])])
@pytest.mark.parametrize("kind", ["sum", "max", "mean"])
def test_reductions_ending_in_reduced_dims_compiled(shape, axes, kind):
    """The reduced dims at the end summed as a trailing reduction per point of the others."""
    elem = "f32"
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    kept = [d for d in range(len(shape)) if d not in axes]
    out = [shape[d] for d in kept]
    text = (f"func.func @f(%x: tensor<{dims(shape)}x{elem}>) -> tensor<{dims(out)}x{elem}> {{\n"
            f"  %r = graph.reduce_{kind} %x {{axes = {axes}}} : tensor<{dims(shape)}x{elem}> to "
            f"tensor<{dims(out)}x{elem}>\n"
            f"  func.return %r : tensor<{dims(out)}x{elem}>\n}}\n")
    want = getattr(np, {"sum": "sum", "max": "max", "mean": "mean"}[kind])(x.astype(np.float64), axis=tuple(axes))
    np.testing.assert_allclose(irc.compile(irc.parse(text)).f(x), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("threads", [2, 3])
def test_convolutions_split_images_across_threads(threads):
    """With threads the forward convolution's images are split into parts, each with its own
    scratch (a parallel loop that split-parallel runs on threads): the bits of one thread.  The
    weight gradient splits its columns instead (every part sums the images in one order)."""
    src = """
func.func @f(%x: tensor<6x16x24x24xf32>, %w: tensor<32x16x3x3xf32>, %g: tensor<6x32x24x24xf32>)
    -> (tensor<6x32x24x24xf32>, tensor<32x16x3x3xf32>) {
  %y = graph.conv2d %x, %w {stride = [1, 1], padding = [1, 1]} : (tensor<6x16x24x24xf32>, tensor<32x16x3x3xf32>) -> tensor<6x32x24x24xf32>
  %d = graph.conv2d_weight_grad %x, %g {kernel = [3, 3], stride = [1, 1], padding = [1, 1]} : (tensor<6x16x24x24xf32>, tensor<6x32x24x24xf32>) -> tensor<32x16x3x3xf32>
  func.return %y, %d : tensor<6x32x24x24xf32>, tensor<32x16x3x3xf32>
}"""
    module = irc.parse(src)
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((6, 16, 24, 24), (32, 16, 3, 3), (6, 32, 24, 24))]
    many = irc.compile(module, threads=threads).f
    lowered, _ = many.lower(tuple(a.shape for a in args))
    assert any(op.name == "scf.for" and "parallel" in op.attributes and any(
        inner.name == "func.call" for inner in op.walk()) for op in lowered.walk())
    y1, d1 = irc.compile(module, threads=1).f(*args)
    y, d = many(*args)
    np.testing.assert_array_equal(y, y1)
    np.testing.assert_array_equal(d, d1)
    np.testing.assert_allclose(d, reference(args[0], args[2], (3, 3), (1, 1), (1, 1)), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("x_shape, o, kernel, stride, padding",
                         [CASES[3], ((4, 8, 20, 18), 64, (3, 3), (2, 2), (1, 0)), ((3, 7, 10, 10), 100, (3, 3), (1, 1), (1, 1))])
@pytest.mark.parametrize("threads", [2, 3])
def test_weight_grad_splits_its_taps_across_threads(x_shape, o, kernel, stride, padding, threads):
    """On threads the weight gradient is a parallel loop over blocks of whole column panels of dW
    (blocks of taps): each part writes its taps' rows of the im2col matrix and sums every image
    in order into its columns, so the bits are one thread's, whatever the threads."""
    text, g_shape = program(x_shape, o, kernel, stride, padding)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(np.float32)
    g = rng.standard_normal(g_shape).astype(np.float32)
    many = irc.compile(irc.parse(text), threads=threads).f
    lowered, _ = many.lower((x_shape, g_shape))
    chunked = [op for op in lowered.walk() if op.name == "func.call" and "chunks" in op.attributes]
    assert chunked, "the weight gradient did not split"
    got = many(x, g)
    np.testing.assert_array_equal(got, irc.compile(irc.parse(text), threads=1).f(x, g))
    np.testing.assert_allclose(got, reference(x, g, kernel, stride, padding), rtol=1e-4, atol=1e-4)
