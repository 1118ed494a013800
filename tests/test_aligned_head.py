"""Flat elementwise loops start at a cache line (passes/lowering/elementwise.py ``_aligning_head``):
the elements before the output's first 64-byte boundary run in a loop of their own.  Only the
split point moves, so every element is what the interpreter computes, wherever the arrays start
and whatever their length; a threaded function's loops stay whole, for split-parallel to cut."""

import numpy as np
import pytest
from irc.passes.lowering.elementwise import HEAD_MIN_BYTES

import irc

GELU = """
func.func @f(%x: tensor<?xf32>) -> tensor<?xf32> {
  %h = arith.constant 0.5 : f32
  %k = arith.constant 0.7978846 : f32
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %hs = graph.splat %h, %n : f32 to tensor<?xf32>
  %ks = graph.splat %k, %n : f32 to tensor<?xf32>
  %kx = arith.mulf %x, %ks : tensor<?xf32>
  %t = math.tanh %kx : tensor<?xf32>
  %hx = arith.mulf %x, %hs : tensor<?xf32>
  %y = arith.mulf %hx, %t : tensor<?xf32>
  %z = arith.addf %hx, %y : tensor<?xf32>
  func.return %z : tensor<?xf32>
}
"""


SMALLEST = HEAD_MIN_BYTES // 4
"""The fewest f32 elements that get a head (fewer stay in one loop: see HEAD_MIN_BYTES)."""


def at_offset(values: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``values`` whose first element is ``offset`` bytes past a 64-byte boundary."""
    buf = np.empty(values.size + 32, values.dtype)
    skip = (-buf.ctypes.data % 64 + offset) % 64 // values.itemsize
    view = buf[skip:skip + values.size]
    view[:] = values
    assert values.size == 0 or view.ctypes.data % 64 == offset % 64
    return view


def _loops(lowered):
    return [op for f in lowered.functions for op in f.walk() if op.name == "scf.for"]


def test_small_outputs_get_no_head():
    fn = irc.compile(irc.parse(GELU), threads=1, cache=False).f
    small, _ = fn.lower([(SMALLEST - 1,)])
    assert "memref.extract_aligned_pointer_as_index" not in [op.name for f in small.functions for op in f.walk()]
    assert len(_loops(small)) == 1


def test_one_thread_splits_at_the_line_and_threads_do_not():
    one = irc.compile(irc.parse(GELU), threads=1, cache=False).f
    two = irc.compile(irc.parse(GELU), threads=2, cache=False).f
    lowered_one, _ = one.lower([(1 << 16,)])
    lowered_two, _ = two.lower([(1 << 16,)])
    names = [op.name for f in lowered_one.functions for op in f.walk()]
    assert "memref.extract_aligned_pointer_as_index" in names and len(_loops(lowered_one)) == 2
    assert "memref.extract_aligned_pointer_as_index" not in [op.name for f in lowered_two.functions
                                                             for op in f.walk()]


@pytest.mark.parametrize("offset", [0, 16, 60])
def test_every_start_and_length_computes_what_the_interpreter_does(offset):
    fn = irc.compile(irc.parse(GELU), threads=1, cache=False).f
    rng = np.random.default_rng(offset)
    for n in (0, 15, SMALLEST, SMALLEST + 17):
        x = at_offset(rng.standard_normal(n).astype(np.float32), offset)
        out = at_offset(np.full(n, np.nan, np.float32), offset)
        fn(x, out=out)
        lowered, _ = fn.lower([(n,)])
        interpreted = at_offset(np.full(n, np.nan, np.float32), offset)
        irc.interpret(lowered, "f", x, interpreted)
        np.testing.assert_array_equal(out, interpreted)
        ref = 0.5 * x * (1 + np.tanh(0.7978846 * x.astype(np.float64)))
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_an_output_that_does_not_share_the_inputs_misalignment_is_still_right():
    fn = irc.compile(irc.parse(GELU), threads=1, cache=False).f
    x = at_offset(np.linspace(-4, 4, SMALLEST + 999, dtype=np.float32), 12)
    aligned_out = at_offset(np.empty(SMALLEST + 999, np.float32), 0)
    fn(x, out=aligned_out)
    np.testing.assert_array_equal(aligned_out, fn(at_offset(x.copy(), 40)))


def test_a_temporary_whose_address_the_head_reads_stays_in_the_arena():
    """plan-memory places a temporary a flat loop writes in the arena: reading its address for the
    head does not let it escape (it used to leave every such temporary to the heap, per call)."""
    text = """
func.func @f(%x: tensor<16384xf32>, %w: tensor<128x128xf32>) -> tensor<128x128xf32> {
  %e = math.exp %x : tensor<16384xf32>
  %r = graph.reshape %e : tensor<16384xf32> to tensor<128x128xf32>
  %m = graph.matmul %r, %w : (tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>
  func.return %m : tensor<128x128xf32>
}"""
    fn = irc.compile(irc.parse(text), threads=1, cache=False).f
    lowered, _ = fn.lower([(16384,), (128, 128)])
    ops = [op for f in lowered.functions for op in f.walk()]
    assert "memref.extract_aligned_pointer_as_index" in [op.name for op in ops]
    assert not [op for op in ops if op.name == "memref.alloc"]  # every temporary planned
    x = np.linspace(-2, 2, 16384, dtype=np.float32)
    w = np.eye(128, dtype=np.float32)
    np.testing.assert_allclose(fn(x, w), np.exp(x).reshape(128, 128), rtol=1e-6)
