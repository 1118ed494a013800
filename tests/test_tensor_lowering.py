"""Loop lowerings of the structured tensor ops (passes/lowering/structured.py and friends).

Each case is a one-op function ``@fN``; the cases of one op share a module, so
LLVM compiles them at once.  Every case runs three ways and is compared:

1. the original graph in the interpreter (the reference: ``compute`` in dialects/graph.py);
2. the module after ``fuse-elementwise,tensor-to-loops`` in the interpreter;
3. the same loops compiled with ``irc.compile``, outputs prefilled with garbage
   (a lowering must write every element).

Data movement (transpose, slice, concat, pad, iota, broadcast...) is bit-exact
everywhere.  Compiled and interpreted loops run the same scalar operations in
the same order, so they agree bit for bit too, except where the interpreter's
numpy and the compiled code's libm may round ``exp``/``log`` differently
(softmax).  Against the reference, sums in another order get a tolerance:
matmul and conv accumulate K products in the element type, so the error
bound is (K + 1) * eps * (|a| @ |b|) elementwise; softmax computes exp in the
element type (a few ulp, times |x - max|).
"""

from __future__ import annotations

import platform
import re

import irc.passes
import numpy as np
import pytest

import irc
from irc.interpreter import interpret

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "i8": np.int8}
rng = np.random.default_rng(20261123)


def tensor(shape, elem: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{elem}>"


class Case:
    """One function: ``params`` (shapes) -> ``result`` (a type string), ``body`` the op's text
    with the operands ``%p0, %p1...`` and the result ``%r``."""

    def __init__(self, body: str, params: list, elem: str, result: str, pipeline: str = "fuse-elementwise,"
                 "tensor-to-loops"):
        self.body, self.params, self.elem, self.result, self.pipeline = body, params, elem, result, pipeline
        dtype = DTYPES[elem]
        if dtype().dtype.kind == "f":
            self.args = [(rng.standard_normal(s) * 2).astype(dtype) for s in params]
        else:
            self.args = [rng.integers(-100, 100, s).astype(dtype) for s in params]

    def function(self, name: str) -> str:
        ps = ", ".join(f"%p{i}: {tensor(s, self.elem)}" for i, s in enumerate(self.params))
        return f"func.func @{name}({ps}) -> {self.result} {{\n  %r = {self.body}\n  func.return %r : {self.result}\n}}\n"


def run_cases(cases: list[Case]):
    """(reference, lowered-interpreted, compiled) outputs of each case."""
    text = "".join(c.function(f"f{i}") for i, c in enumerate(cases))
    reference = [interpret(irc.parse(text), f"f{i}", *c.args) for i, c in enumerate(cases)]
    (pipeline,) = {c.pipeline for c in cases}
    lowered = irc.parse(text)
    irc.passes.run(lowered, pipeline)
    exe = irc.compile(lowered)
    results = []
    for i, (c, ref) in enumerate(zip(cases, reference)):
        ref = ref[0] if isinstance(ref, (list, tuple)) else ref
        out = np.zeros_like(ref)
        interpret(lowered, f"f{i}", *c.args, out)
        compiled = np.full_like(ref, 7)
        getattr(exe, f"f{i}")(*c.args, compiled)
        results.append((ref, out, compiled))
    return results


def assert_exact(cases):
    for c, (ref, interpreted, compiled) in zip(cases, run_cases(cases)):
        np.testing.assert_array_equal(interpreted, ref, err_msg=c.body)
        np.testing.assert_array_equal(compiled, ref, err_msg=c.body)


# -- data movement: bit-exact ---------------------------------------------------------------------------------


def test_transpose():
    cases = []
    for shape, perm, elem in [((3, 5), (1, 0), "f32"), ((37, 21), (1, 0), "f64"), ((1, 7), (1, 0), "i32"),
                              ((2, 3, 4), (2, 0, 1), "f32"), ((4, 1, 5), (0, 2, 1), "i64"),
                              ((3, 5, 7, 2), (3, 1, 2, 0), "f32"), ((3, 0, 2), (2, 1, 0), "f32"),
                              ((5, 6), (0, 1), "i8"), ((33, 17, 3), (1, 0, 2), "f32")]:
        out = tensor([shape[p] for p in perm], elem)
        cases.append(Case(f"graph.transpose %p0 {{perm = {list(perm)}}} : {tensor(shape, elem)} to {out}",
                          [shape], elem, out))
    assert_exact(cases)


def test_slice():
    cases = []
    for shape, offsets, sizes, strides, elem in [
            ((7, 9), (1, 2), (3, 2), (2, 3), "f32"), ((10,), (0,), (10,), (1,), "f64"),
            ((4, 5, 6), (1, 0, 2), (2, 5, 3), (1, 1, 1), "i32"), ((5, 5), (4, 0), (1, 5), (1, 1), "i64"),
            ((6, 4), (2, 1), (0, 3), (1, 1), "f32"), ((9, 1, 8), (0, 0, 7), (3, 1, 1), (4, 1, 1), "f32")]:
        out = tensor(sizes, elem)
        attrs = f"offsets = {list(offsets)}, sizes = {list(sizes)}, strides = {list(strides)}"
        cases.append(Case(f"graph.slice %p0 {{{attrs}}} : {tensor(shape, elem)} to {out}", [shape], elem, out))
    assert_exact(cases)


def test_concat():
    cases = []
    for shapes, axis, elem in [([(3, 2), (3, 4)], 1, "f32"), ([(2, 5), (1, 5), (4, 5)], 0, "f64"),
                               ([(2, 3, 1), (2, 3, 2)], 2, "i32"), ([(7,)], 0, "i64"),
                               ([(2, 0, 3), (2, 4, 3)], 1, "f32"), ([(1, 1), (1, 1)], 0, "i8")]:
        total = list(shapes[0])
        total[axis] = sum(s[axis] for s in shapes)
        out = tensor(total, elem)
        operands = ", ".join(f"%p{i}" for i in range(len(shapes)))
        types = ", ".join(tensor(s, elem) for s in shapes)
        cases.append(Case(f"graph.concat {operands} {{axis = {axis}}} : ({types}) -> {out}", shapes, elem, out))
    assert_exact(cases)


def test_pad():
    cases = []
    for shape, low, high, elem, value in [((3, 4), (1, 0), (2, 3), "f32", "1.5"), ((5,), (0,), (0,), "f64", "0.0"),
                                          ((2, 3, 1), (0, 2, 1), (1, 0, 3), "i32", "-7"), ((1, 1), (2, 2), (2, 2), "i64", "9"),
                                          ((0, 3), (1, 1), (1, 0), "f32", "-2.25")]:
        out = tensor([d + lo + hi for d, lo, hi in zip(shape, low, high)], elem)
        attrs = f"low = {list(low)}, high = {list(high)}, value = {value} : {elem}"
        cases.append(Case(f"graph.pad %p0 {{{attrs}}} : {tensor(shape, elem)} to {out}", [shape], elem, out))
    assert_exact(cases)


def test_iota():
    cases = []
    for shape, axis, elem in [((4, 3), 0, "i64"), ((4, 3), 1, "f32"), ((2, 300), 1, "i8"), ((5,), 0, "f64"),
                              ((2, 3, 4), 1, "i32"), ((3, 0), 0, "i32")]:
        out = tensor(shape, elem)
        cases.append(Case(f"graph.iota {{axis = {axis}}} : {out}", [], elem, out))
    assert_exact(cases)


@pytest.mark.parametrize("array, stores", [
    (np.broadcast_to(np.arange(100, dtype=np.int64), (14, 100)), 1),  # a folded broadcast of arange: affine
    (np.arange(24, dtype=np.int32).reshape(2, 3, 4) * 3 - 5, 1),  # affine in every index
    (np.array([[1, 5, 2], [1, 5, 2]], dtype=np.int64), 3),  # constant along axis 0, irregular along 1
    (np.broadcast_to(np.tril(np.ones((3, 3))).astype(np.float32), (2, 4, 3, 3)), 9),  # a broadcast causal mask
    (np.broadcast_to(np.array([True, False, True])[:, None], (3, 5)), 3),
    (np.broadcast_to(np.array([np.nan, 1.0], np.float64), (3, 2)), 2),  # NaNs equal along the broadcast
    (rng.standard_normal((3, 4)), 12),  # nothing regular: one store per element
])
def test_constants_loop_what_is_regular(array, stores):
    """A non-splat constant: loops along the axes it is constant on, an affine integer computed,
    the rest stored one value at a time; the same values as numpy, interpreted and compiled."""
    from irc.builder import Builder
    from irc.types import TensorType, f32, f64, i1, i32, i64

    elem = {np.dtype(np.int64): i64, np.dtype(np.int32): i32, np.dtype(np.float32): f32,
            np.dtype(np.float64): f64, np.dtype(np.bool_): i1}[array.dtype]
    b = Builder()
    module = b.module()
    with b.function(module, "f", []):
        b.ret(b.const(np.ascontiguousarray(array), TensorType(array.shape, elem)))
    lowered = module.clone()
    irc.passes.run(lowered, "tensor-to-loops")
    assert sum(op.name == "memref.store" for op in lowered.walk()) == stores
    out = np.zeros(array.shape, array.dtype)
    interpret(lowered, "f", out)
    np.testing.assert_array_equal(out, array)
    np.testing.assert_array_equal(irc.compile(module).f(), array)


def test_broadcast_splat_and_reductions_left_unfused():
    """Without fuse-elementwise these are lowered as the one-op graph.fused they equal."""
    cases = []
    for src, dst, elem in [((3, 1), (2, 3, 4), "f32"), ((4,), (3, 4), "i32"), ((1,), (5,), "f64")]:
        cases.append(Case(f"graph.broadcast %p0 : {tensor(src, elem)} to {tensor(dst, elem)}", [src], elem,
                          tensor(dst, elem), "tensor-to-loops"))
    for shape, axes, keep, elem, op in [((3, 40), [1], True, "i32", "sum"), ((5, 4), [0], False, "i64", "max"),
                                        ((2, 3, 4), [0, 2], False, "i32", "min"), ((6, 3), [1], False, "i64", "prod")]:
        out = [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]
        attrs = f"axes = {axes}" + (", keepdims" if keep else "")
        cases.append(Case(f"graph.reduce_{op} %p0 {{{attrs}}} : {tensor(shape, elem)} to {tensor(out, elem)}",
                          [shape], elem, tensor(out, elem), "tensor-to-loops"))
    assert_exact(cases)
    # Float sums: f64 accumulation in another order than numpy's pairwise sum.
    float_cases = [Case(f"graph.reduce_{op} %p0 {{axes = [1]}} : tensor<4x37x{elem}> to tensor<4x{elem}>",
                        [(4, 37)], elem, f"tensor<4x{elem}>", "tensor-to-loops")
                   for op, elem in [("sum", "f32"), ("mean", "f64"), ("max", "f32")]]
    for c, (ref, interpreted, compiled) in zip(float_cases, run_cases(float_cases)):
        np.testing.assert_array_equal(compiled, interpreted)
        np.testing.assert_allclose(compiled, ref, rtol=1e-6 if c.elem == "f32" else 1e-13)


def test_splat_left_unfused():
    text = """func.func @f(%x: f32) -> tensor<3x5xf32> {
  %r = graph.splat %x : f32 to tensor<3x5xf32>
  func.return %r : tensor<3x5xf32>
}"""
    m = irc.parse(text)
    irc.passes.run(m, "tensor-to-loops")
    out = np.zeros((3, 5), np.float32)
    irc.compile(m).f(np.float32(2.5), out)
    np.testing.assert_array_equal(out, np.full((3, 5), 2.5, np.float32))


# -- matmul and conv: K-term sums ----------------------------------------------------------------------------------


def _assert_product(cases, k_of):
    """Integers exactly; floats within the bound of a K-term sum, compiled == interpreted loops."""
    for c, (ref, interpreted, compiled) in zip(cases, run_cases(cases)):
        np.testing.assert_array_equal(compiled, interpreted, err_msg=c.body)
        if np.dtype(DTYPES[c.elem]).kind != "f":
            np.testing.assert_array_equal(compiled, ref, err_msg=c.body)
            continue
        exact, magnitude = c.exact(), c.magnitude()
        eps = np.finfo(DTYPES[c.elem]).eps
        bound = (k_of(c) + 1) * eps * magnitude + np.finfo(DTYPES[c.elem]).tiny
        for got in (compiled, ref):
            assert np.all(np.abs(got.astype(np.float64) - exact) <= bound), c.body


class MatmulCase(Case):
    def exact(self):
        a, b = (x.astype(np.float64) for x in self.args)
        return a @ b

    def magnitude(self):
        a, b = (np.abs(x.astype(np.float64)) for x in self.args)
        return a @ b


def _matmul(m, k, n, elem, batch=()):
    a, b, c = (*batch, m, k), (*batch, k, n), (*batch, m, n)
    name = "batch_matmul" if batch else "matmul"
    return MatmulCase(f"graph.{name} %p0, %p1 : ({tensor(a, elem)}, {tensor(b, elem)}) -> {tensor(c, elem)}",
                      [a, b], elem, tensor(c, elem))


def test_matmul():
    cases = [_matmul(*s) for s in [(1, 1, 1, "f32"), (13, 37, 45, "f32"), (4, 64, 32, "f32"), (9, 300, 7, "f32"),
                                   (5, 17, 35, "f64"), (8, 3, 16, "f64"), (6, 11, 33, "i32"), (3, 5, 2, "i64"),
                                   (0, 4, 3, "f32"), (3, 0, 4, "f32"), (2, 3, 0, "i32")]]
    _assert_product(cases, lambda c: c.params[0][-1])


def test_batch_matmul():
    cases = [_matmul(5, 7, 4, "f32", (2, 3)), _matmul(3, 9, 33, "f64", (2,)), _matmul(4, 4, 4, "i32", (3,)),
             _matmul(2, 3, 5, "f32", (0,))]
    _assert_product(cases, lambda c: c.params[0][-1])


class TransposedMatmulCase(MatmulCase):
    """``op(A) @ op(B)``, op a ``graph.transpose`` for the flagged operands: tensor-to-loops
    reads the transpose's source with swapped indices instead of copying it."""

    def __init__(self, m, k, n, ta, tb, elem, pipeline="fuse-elementwise,tensor-to-loops"):
        shapes = [(k, m) if ta else (m, k), (n, k) if tb else (k, n)]
        super().__init__("", shapes, elem, tensor((m, n), elem), pipeline)
        self.k, self.flags = k, (ta, tb)
        operands, lines = [], []
        for i, (flag, shape) in enumerate(zip(self.flags, shapes)):
            if flag:
                lines.append(f"%t{i} = graph.transpose %p{i} {{perm = [1, 0]}} : {tensor(shape, elem)} to "
                             f"{tensor(shape[::-1], elem)}")
            operands.append(f"%t{i}" if flag else f"%p{i}")
        logical = [s[::-1] if f else s for f, s in zip(self.flags, shapes)]
        lines.append(f"%r = graph.matmul {', '.join(operands)} : ({tensor(logical[0], elem)}, "
                     f"{tensor(logical[1], elem)}) -> {self.result}")
        self.body = "; ".join(lines)
        self.lines = lines

    def function(self, name: str) -> str:
        ps = ", ".join(f"%p{i}: {tensor(s, self.elem)}" for i, s in enumerate(self.params))
        body = "".join(f"  {line}\n" for line in self.lines)
        return f"func.func @{name}({ps}) -> {self.result} {{\n{body}  func.return %r : {self.result}\n}}\n"

    def _logical(self, f):
        return [f(x.T if flag else x) for x, flag in zip(self.args, self.flags)]

    def exact(self):
        a, b = self._logical(lambda x: x.astype(np.float64))
        return a @ b

    def magnitude(self):
        a, b = self._logical(lambda x: np.abs(x.astype(np.float64)))
        return a @ b


TRANSPOSED_SIZES = [(13, 37, 45), (9, 300, 70), (16, 5, 64), (1, 1, 1), (0, 4, 3), (3, 0, 4), (33, 7, 31)]


@pytest.mark.parametrize("flags", [(True, False), (False, True), (True, True)], ids=["tn", "nt", "tt"])
def test_matmul_reads_transposed_operands(flags):
    """Odd sizes (remainder rows and columns, K over two packed panels, empty products), f32, f64
    and i32: the same bound as a plain matmul; compiled loops equal interpreted ones exactly."""
    cases = [TransposedMatmulCase(*s, *flags, "f32") for s in TRANSPOSED_SIZES]
    cases += [TransposedMatmulCase(5, 17, 35, *flags, "f64"), TransposedMatmulCase(6, 11, 33, *flags, "i32")]
    _assert_product(cases, lambda c: c.k)


def test_transposed_matmul_operands_are_not_copied():
    """The transposes become views: the only buffer the lowered function allocates is the GEMM's packing
    scratch; a transpose that is also used elsewhere is still materialised (and right)."""
    case = TransposedMatmulCase(13, 37, 45, True, True, "f32")
    module = irc.parse(case.function("f"))
    irc.passes.run(module, case.pipeline)
    text = module.print()
    assert text.count("memref.alloc") == 1, text
    shared = irc.parse("""
func.func @g(%a: tensor<5x4xf32>, %b: tensor<5x3xf32>) -> (tensor<4x3xf32>, tensor<4x5xf32>) {
  %at = graph.transpose %a {perm = [1, 0]} : tensor<5x4xf32> to tensor<4x5xf32>
  %c = graph.matmul %at, %b : (tensor<4x5xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  func.return %c, %at : tensor<4x3xf32>, tensor<4x5xf32>
}""")
    a, b = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    c, at = irc.compile(shared).g(a, b)
    np.testing.assert_array_equal(at, a.T)
    np.testing.assert_allclose(c, a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["nn", "tn", "nt", "tt"])
def test_blas_matmul_with_transposed_operands(flags):
    """``?`` dimensions, specialised per call; BLAS gets transpose flags and the source buffers."""
    from irc.runtime.cpu import blas as blas_runtime

    if not blas_runtime.available():
        pytest.skip("no BLAS gemm here (numpy's or scipy's)")
    ta, tb = flags
    dyn = "tensor<?x?xf32>"
    lines = [f"%t0 = graph.transpose %a {{perm = [1, 0]}} : {dyn} to {dyn}" if ta else "",
             f"%t1 = graph.transpose %b {{perm = [1, 0]}} : {dyn} to {dyn}" if tb else ""]
    text = (f"func.func @mm(%a: {dyn}, %b: {dyn}) -> {dyn} {{\n" + "\n".join(f"  {x}" for x in lines if x)
            + f"\n  %c = graph.matmul {'%t0' if ta else '%a'}, {'%t1' if tb else '%b'} : ({dyn}, {dyn}) -> {dyn}"
            f"\n  func.return %c : {dyn}\n}}")
    exe = irc.compile(irc.parse(text), blas=True)
    for m, k, n in [(70, 90, 50), (33, 129, 65), (257, 1, 130)]:  # each over BLAS_MIN_WORK
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        la, lb = (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64)
        got = exe.mm(a, b)
        bound = (k + 1) * np.finfo(np.float32).eps * (np.abs(la) @ np.abs(lb))
        assert got.shape == (m, n) and np.all(np.abs(got - la @ lb) <= bound)
        module, _ = exe.mm.lower((a.shape, b.shape))
        suffix = "" if not (ta or tb) else "_" + "nt"[ta] + "nt"[tb]
        assert f"@irc_blas_sgemm{suffix}(" in module.print()


@pytest.mark.parametrize("bits,registers,tile", [(512, 32, (8, 32)), (256, 16, (6, 16)), (128, 16, (6, 8)),
                                                 (128, 32, (8, 8))])
def test_gemm_register_tile_follows_the_target(bits, registers, tile):
    """MR x NR from tensor-to-loops' vector options (irc.compile sets them from the host's features);
    every tile gives right products, with remainders and M over one MC block."""
    from irc.passes.lowering.matmul import tile_sizes

    from irc.types import f32

    assert tile_sizes(f32, bits, registers) == tile
    pipeline = f"fuse-elementwise,tensor-to-loops{{vector-bits={bits} vector-registers={registers}}}"
    cases = [TransposedMatmulCase(*s, ta, tb, "f32", pipeline) for s in [(13, 37, 45), (101, 20, 19)]
             for ta, tb in [(False, False), (True, True)]]
    _assert_product(cases, lambda c: c.k)


class ConvCase(Case):
    def __init__(self, x, w, stride, padding, elem):
        n, c, h, wd = x
        o, _, kh, kw = w
        ho, wo = (h + 2 * padding[0] - kh) // stride[0] + 1, (wd + 2 * padding[1] - kw) // stride[1] + 1
        out = tensor((n, o, ho, wo), elem)
        super().__init__(f"graph.conv2d %p0, %p1 {{stride = {list(stride)}, padding = {list(padding)}}} : "
                         f"({tensor(x, elem)}, {tensor(w, elem)}) -> {out}", [x, w], elem, out)
        self.stride, self.padding = stride, padding

    def _conv(self, x, w):
        (sh, sw), (ph, pw) = self.stride, self.padding
        kh, kw = w.shape[2:]
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return np.einsum("nchwij,ocij->nohw", windows, w)

    def exact(self):
        return self._conv(*(a.astype(np.float64) for a in self.args))

    def magnitude(self):
        return self._conv(*(np.abs(a.astype(np.float64)) for a in self.args))


def test_conv2d():
    cases = [ConvCase((2, 3, 7, 8), (4, 3, 3, 2), (2, 1), (1, 2), "f32"),
             ConvCase((1, 2, 5, 5), (3, 2, 3, 3), (1, 1), (1, 1), "f64"),
             ConvCase((2, 3, 6, 5), (4, 3, 1, 1), (1, 1), (0, 0), "f32"),
             ConvCase((1, 1, 4, 4), (2, 1, 4, 4), (1, 1), (0, 0), "i32"),
             ConvCase((1, 2, 9, 7), (3, 2, 2, 3), (3, 2), (0, 1), "i64"),
             ConvCase((3, 1, 1, 1), (1, 1, 3, 3), (1, 1), (1, 1), "f32")]
    _assert_product(cases, lambda c: int(np.prod(c.params[1][1:])))


# -- softmax -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op):
    cases = []
    for shape, axis, elem in [((5, 37), 1, "f32"), ((3, 100), 1, "f64"), ((1, 1), 1, "f32"), ((4, 6, 3), 1, "f32"),
                              ((7, 5), 0, "f64"), ((2, 3, 65), 2, "f32"), ((0, 4), 1, "f32"), ((3, 70), 1, "f32")]:
        cases.append(Case(f"graph.{op} %p0 {{axis = {axis}}} : {tensor(shape, elem)}", [shape], elem,
                          tensor(shape, elem)))
    cases[-1].args[0][1, 5] = np.float32(1e30)  # exp(x) would overflow without the max
    cases[-1].args[0][2, :] = -np.float32(1e30)
    for c, (ref, interpreted, compiled) in zip(cases, run_cases(cases)):
        tol = dict(rtol=2e-6, atol=2e-7) if c.elem == "f32" else dict(rtol=1e-13, atol=1e-15)
        if op == "log_softmax":  # x - max - log(sum): the absolute error scales with |x - max|
            tol["atol"] *= 1e2 if c.elem == "f32" else 10
        assert np.all(np.isfinite(compiled)), c.body
        np.testing.assert_allclose(compiled, interpreted, **tol, err_msg=c.body)
        np.testing.assert_allclose(compiled, ref, **tol, err_msg=c.body)


def test_softmax_propagates_nan_and_handles_infinities():
    x = np.array([[0.0, np.nan, 1.0], [-np.inf, 0.0, 1.0], [np.inf, 0.0, 1.0]], np.float32)
    text = """func.func @f(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %r = graph.softmax %a {axis = 1} : tensor<3x3xf32>
  func.return %r : tensor<3x3xf32>
}"""
    expected = interpret(irc.parse(text), "f", x)
    expected = expected[0] if isinstance(expected, (list, tuple)) else expected
    m = irc.parse(text)
    irc.passes.run(m, "fuse-elementwise,tensor-to-loops")
    out = np.zeros_like(x)
    irc.compile(m).f(x, out)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_rows_longer_than_the_unrolled_max(op):
    """Rows of two unrolled steps of the max and a tail: a NaN, +inf, -inf and zeros of
    both signs at the maximum in either part give what the interpreter gives."""
    from irc.passes.lowering.softmax import MAX_UNROLL

    n = 2 * MAX_UNROLL + 22
    second = MAX_UNROLL + 5  # in the second unrolled step
    x = np.random.default_rng(3).standard_normal((9, n)).astype(np.float32)
    x[0, 5], x[1, n - 3], x[2, second] = np.nan, np.nan, np.inf
    x[3, :] = -np.inf
    x[4, :] = -1.0
    x[4, 3], x[4, second] = -0.0, 0.0
    x[5, :] = -1.0
    x[5, 3], x[5, n - 1] = 0.0, -0.0
    x[6, second] = 88.0  # the maximum in the unrolled part, far above the rest
    x[7, n - 1] = 88.0  # and in the tail
    text = f"""func.func @f(%a: tensor<9x{n}xf32>) -> tensor<9x{n}xf32> {{
  %r = graph.{op} %a {{axis = 1}} : tensor<9x{n}xf32>
  func.return %r : tensor<9x{n}xf32>
}}"""
    expected = interpret(irc.parse(text), "f", x)
    expected = expected[0] if isinstance(expected, (list, tuple)) else expected
    got = irc.compile(irc.parse(text)).f(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-5 if op == "log_softmax" else 1e-7)


# -- through irc.compile's tensor pipeline ---------------------------------------------------------------------------


def test_tensor_functions_reuse_their_arena_across_calls():
    """The whole pipeline (plan-memory puts the matmul's packed panel and conv's im2col
    matrix in an arena reused, uncleared, across calls)."""
    exe = irc.compile(irc.parse("""
func.func @mm(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c = graph.matmul %a, %b : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  %t = graph.transpose %c {perm = [1, 0]} : tensor<?x?xf32> to tensor<?x?xf32>
  %s = graph.softmax %t {axis = 1} : tensor<?x?xf32>
  func.return %s : tensor<?x?xf32>
}
func.func @conv(%x: tensor<?x?x?x?xf64>, %w: tensor<?x?x?x?xf64>) -> tensor<?x?x?x?xf64> {
  %y = graph.conv2d %x, %w {stride = [1, 1], padding = [1, 1]} : (tensor<?x?x?x?xf64>, tensor<?x?x?x?xf64>) -> tensor<?x?x?x?xf64>
  func.return %y : tensor<?x?x?x?xf64>
}"""), blas=False)
    for seed in range(2):
        r = np.random.default_rng(seed)
        a, b = r.standard_normal((20, 33)).astype(np.float32), r.standard_normal((33, 40)).astype(np.float32)
        t = (a.astype(np.float64) @ b).T
        e = np.exp(t - t.max(1, keepdims=True))
        np.testing.assert_allclose(exe.mm(a, b), e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)
        x, w = r.standard_normal((2, 3, 6, 6)), r.standard_normal((4, 3, 3, 3))
        expected = ConvCase((2, 3, 6, 6), (4, 3, 3, 3), (1, 1), (1, 1), "f64")._conv(x, w)
        np.testing.assert_allclose(exe.conv(x, w), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="checks x86-64 vector instructions")
def test_matmul_kernel_and_softmax_use_vector_instructions():
    from irc.passes.lowering import gemm_library
    from irc.runtime import aot

    exe = irc.compile(irc.parse("""
func.func @mm(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c = graph.matmul %a, %b : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %c : tensor<?x?xf32>
}
func.func @sm(%a: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %s = graph.softmax %a {axis = 1} : tensor<?x?xf32>
  func.return %s : tensor<?x?xf32>
}
func.func @bmm(%a: tensor<?x?x?xf32>, %b: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
  %c = graph.batch_matmul %a, %b : (tensor<?x?x?xf32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  func.return %c : tensor<?x?x?xf32>
}"""), blas=False)
    packed = r"\bv?{op}p{t}\s[^\n]*%[xyz]mm"  # packed single/double precision on a vector register
    fma = r"\bvfmadd\d{3}ps\s[^\n]*%[xyz]mm"  # the kernel's math.fma, on packed registers
    module, _ = exe.bmm.lower(((2, 48, 48), (2, 48, 48)))  # batched: inline loops (lowering/matmul.py)
    assert re.search(fma, aot.emit(module, "asm"))
    module, _ = exe.mm.lower(((64, 64), (64, 64)))  # 2-D: a call of the GEMM library function
    (name,) = [f.sym_name for f in module.functions if f.is_declaration]
    assert re.search(fma, aot.emit(gemm_library.build(name), "asm"))
    module, _ = exe.sm.lower(((8, 1024),))
    asm = aot.emit(module, "asm")
    # The max and the scaling passes (exp vectorises only once math-approx makes it arithmetic).
    assert re.search(packed.format(op="max", t="s"), asm) and re.search(packed.format(op="mul", t="s"), asm)
