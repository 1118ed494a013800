"""The GEMM library's register-transposed packing at the host blockings the tests did
not use: MR=6 (AVX2's 6x16), NR=8, f64; k below and not a multiple of GROUP, m or n below GROUP,
partial panels, and column windows (a threaded call's split)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from irc.passes.lowering import gemm_library as gl
from test_gemm_library import (
    agree_bit_for_bit_and_with_numpy,
    no_bias,
    operands,
    scratch,
    within_sum_bound,
)

import irc
from irc.types import FloatType

AVX2 = gl.Blocking(mr=6, nr=16, mc=12, kc=19, nc=32)
NARROW = gl.Blocking(mr=6, nr=8, mc=12, kc=11, nc=16)
SHAPES = [(6, 16, 8), (5, 7, 3), (13, 21, 19), (7, 33, 27), (12, 9, 41),
          (40, 50, 27)]  # B packed (more than B_IN_PLACE_ROWS rows of tiles): PACK_ROWS k steps and the rest


@pytest.mark.parametrize("kind, blocking", [("f32", AVX2), ("f64", NARROW)])
@pytest.mark.parametrize("transposed", list(itertools.product([False, True], repeat=2)))
def test_mr6_blockings_agree_bit_for_bit_and_with_numpy(kind, blocking, transposed):
    dtype = np.float32 if kind == "f32" else np.float64
    name = gl.symbol(FloatType(kind), blocking)
    module = gl.build(name)
    exe = irc.compile(module, cache=False)
    for m, n, k in SHAPES:
        agree_bit_for_bit_and_with_numpy(module, exe, name, blocking, (m, n, k), dtype, transposed, m * 7 + n + k)


def test_column_windows_at_mr6_write_only_their_columns():
    name = gl.symbol(FloatType("f32"), AVX2)
    exe = irc.compile(gl.build(name), cache=False)
    m, n, k = 13, 40, 21
    a, b, a_buf, b_buf = operands(m, n, k, np.float32, (True, True), seed=3)
    whole = np.full((m, n), np.nan, np.float32)
    exe[name](a_buf, b_buf, whole, *scratch(AVX2, m, n, k, np.float32), True, True, whole, 1.0, False, 0, n, *no_bias(np.float32))
    c = np.full((m, n), np.nan, np.float32)
    for lo, hi in ((16, 32), (32, 40), (0, 16)):
        before = c.copy()
        exe[name](a_buf, b_buf, c, *scratch(AVX2, m, n, k, np.float32), True, True, c, 1.0, False, lo, hi, *no_bias(np.float32))
        np.testing.assert_array_equal(np.delete(c, np.s_[lo:hi], axis=1), np.delete(before, np.s_[lo:hi], axis=1))
    np.testing.assert_array_equal(c, whole)


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("m, n, k", [(30, 200, 301), (50, 130, 403)])
def test_transposed_products_split_across_threads_equal_one_thread_bit_for_bit(kind, m, n, k):
    """B^T and A^T read in place (the packing's register transposes) in column parts on two
    threads: each part sums in one thread's order."""
    t = kind
    src = f"""
func.func @mm(%a: tensor<{k}x{m}x{t}>, %b: tensor<{n}x{k}x{t}>) -> tensor<{m}x{n}x{t}> {{
  %at = graph.transpose %a {{perm = [1, 0]}} : tensor<{k}x{m}x{t}> to tensor<{m}x{k}x{t}>
  %bt = graph.transpose %b {{perm = [1, 0]}} : tensor<{n}x{k}x{t}> to tensor<{k}x{n}x{t}>
  %c = graph.matmul %at, %bt : (tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>) -> tensor<{m}x{n}x{t}>
  func.return %c : tensor<{m}x{n}x{t}>
}}"""
    module = irc.parse(src)
    one, two = irc.compile(module, threads=1, blas=False), irc.compile(module, threads=2, blas=False)
    dtype = np.float32 if kind == "f32" else np.float64
    a, b, a_buf, b_buf = operands(m, n, k, dtype, (True, True), seed=m + n)
    lowered, _ = two.mm.lower(((k, m), (n, k)))
    assert [op.attributes["chunks"].value for op in lowered.walk() if "chunks" in op.attributes] == [2]
    got = two.mm(a_buf, b_buf)
    np.testing.assert_array_equal(got, one.mm(a_buf, b_buf))
    assert within_sum_bound(got, a, b)
