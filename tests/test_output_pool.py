"""Recycled output memory (runtime/output_pool.py): large results reuse freed blocks, and a
block is reused only once no array shows it."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from irc.runtime import output_pool

import irc

BIG = (output_pool.MIN_BYTES // 4 + 256,)  # f32 elements: just over the pool's threshold


@pytest.fixture(autouse=True)
def empty_pool():
    output_pool.clear()
    yield
    output_pool.clear()


def test_a_freed_result_is_the_next_ones_memory():
    a = output_pool.empty(BIG, np.float32)
    where = a.ctypes.data
    assert a.flags.c_contiguous and a.flags.writeable and a.shape == BIG and a.dtype == np.float32
    del a
    b = output_pool.empty(BIG, np.float32)
    assert b.ctypes.data == where


def test_a_view_keeps_its_block_from_reuse():
    a = output_pool.empty(BIG, np.float32)
    a[:] = 7.0
    tail = a[-3:]
    del a
    gc.collect()
    b = output_pool.empty(BIG, np.float32)  # must not be a's block: tail still shows it
    b[:] = -1.0
    assert np.all(tail == 7.0)
    del tail
    c = output_pool.empty(BIG, np.float32)
    assert c.ctypes.data != b.ctypes.data


def test_small_results_and_other_sizes_are_plain_arrays():
    small = output_pool.empty((4, 4), np.float64)
    assert small.base is None
    a = output_pool.empty(BIG, np.float32)
    del a
    other = output_pool.empty((BIG[0] + 1,), np.float32)
    assert other.nbytes == (BIG[0] + 1) * 4


def test_the_pool_keeps_a_bounded_number_of_blocks(monkeypatch):
    monkeypatch.setattr(output_pool, "KEEP_PER_SIZE", 2)
    arrays = [output_pool.empty(BIG, np.float32) for _ in range(5)]
    del arrays
    assert len(output_pool._free[BIG[0] * 4]) == 2
    monkeypatch.setattr(output_pool, "KEEP_BYTES", 0)
    output_pool.clear()
    a = output_pool.empty(BIG, np.float32)
    del a
    assert not output_pool._free.get(BIG[0] * 4)


def test_threads_allocating_and_freeing_at_once_never_share_a_block():
    errors = []

    def work(k):
        for i in range(50):
            a = output_pool.empty(BIG, np.float32)
            a.fill(k * 1000 + i)
            if not np.all(a == k * 1000 + i):
                errors.append(k)
            del a

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_tensor_functions_large_results_come_from_the_pool():
    n = BIG[0]
    text = (f"func.func @f(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n"
            f"  %y = arith.addf %x, %x : tensor<{n}xf32>\n  func.return %y : tensor<{n}xf32>\n}}\n")
    f = irc.compile(irc.parse(text)).f
    x = np.arange(n, dtype=np.float32)
    first = f(x)
    where = first.ctypes.data
    np.testing.assert_array_equal(first, 2 * x)
    del first
    again = f(x)  # the fast path's result, on the first one's block
    assert again.ctypes.data == where
    np.testing.assert_array_equal(again, 2 * x)
