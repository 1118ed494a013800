"""Slices at offsets known only at run time: ``graph.dynamic_slice`` and ``graph.dynamic_update_slice``.

``graph.slice`` takes its offsets as attributes; these two take them as ``index`` operands,
one per dimension, as StableHLO's ``dynamic_slice`` / ``dynamic_update_slice`` and MLIR's
``tensor.extract_slice`` / ``tensor.insert_slice`` with dynamic offsets do.  The sizes stay
static (the result's or the update's type), so the shapes of compiled code stay static.
Unlike StableHLO, an offset is not clamped: a window that does not fit is an error, in the
interpreter and in compiled code (``cf.assert``, as ``graph.gather``'s index is).

What they are for: a loop's gradient stores the carry of each trip in a *tape*, a tensor
with one slice per trip, written with ``dynamic_update_slice`` at the trip's index and read
back with ``dynamic_slice`` in the reverse loop (passes/autodiff_scf.py).  Bufferization
lets ``dynamic_update_slice`` write in place over its destination when that dies at it
(passes/lowering/bufferize.py), so a tape costs one slice per trip, not a copy of the tape.
"""

from __future__ import annotations

import numpy as np

from irc.semantics import Fault
from irc.types import TensorType, index

from .graph import NaryOp, ShapeError, ShapeOp, _dims, _tensor


def _offsets(types, rank: int, what: str) -> None:
    if len(types) != rank or any(t is not index for t in types):
        raise ShapeError(f"takes one index offset per dimension of the {what} ({rank}), "
                         f"got {', '.join(str(t) for t in types) or 'none'}")


def _window(offsets, sizes, shape) -> tuple:
    """The numpy index of the window, or ``Fault`` when it does not fit in ``shape``."""
    offsets = [int(o) for o in offsets]
    if any(o < 0 or o + s > n for o, s, n in zip(offsets, sizes, shape)):
        raise Fault(f"a window of sizes {_dims(sizes)} at offsets {_dims(offsets)} does not fit "
                    f"in shape {_dims(shape)}")
    return tuple(slice(o, o + s) for o, s in zip(offsets, sizes))


def _fits_statically(sizes, shape, what: str) -> None:
    for i, (s, n) in enumerate(zip(sizes, shape)):
        if s is None:
            raise ShapeError(f"the {what} must have a static shape, got a ? in dimension {i}")
        if n is not None and s > n:
            raise ShapeError(f"a window of size {s} in dimension {i} does not fit in {n}")


class DynamicSliceOp(ShapeOp):
    """``graph.dynamic_slice %a, %i, %j : tensor<8x4xf32> to tensor<1x4xf32>``.

    The window of the result's (static) shape at offsets ``%i, %j`` (``index``, one per
    dimension): result[k, l] = a[i + k, j + l].  A window that does not fit is an error."""

    name = "graph.dynamic_slice"
    summary = "A window of static sizes at offsets given as index operands; one that does not fit is an error."
    example = "%r = graph.dynamic_slice %mat, %i, %n : tensor<3x4xf32> to tensor<1x4xf32>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if not types:
            raise ShapeError("takes a tensor and one index offset per dimension")
        src = _tensor(types[0], "operand")
        _offsets(types[1:], src.rank, "operand")
        dst = _tensor(declared, "result")
        if dst.rank != src.rank or dst.element_type is not src.element_type:
            raise ShapeError(f"result must have the operand's rank and element type, got {src} to {dst}")
        _fits_statically(dst.shape, src.shape, "result")
        return dst

    def compute(self, args):
        a = args[0]
        return np.array(a[_window(args[1:], self.results[0].type.shape, a.shape)], order="C")

    @classmethod
    def build(cls, operand, offsets, shape):
        """The window of ``shape`` (a list of ints) of ``operand`` at ``offsets`` (index values)."""
        return cls([operand, *offsets], [TensorType(list(shape), operand.type.element_type)], {})

    def vjp(self, b, x, y, g):
        """The cotangent goes back into a zero tensor at the window."""
        zeros = b.zeros_like(x[0])
        placed = b.built(DynamicUpdateSliceOp.build(zeros.value, g[0].value, [i.value for i in x[1:]]))
        return [placed, *[None] * (len(x) - 1)]

    def jvp(self, b, x, y, t):
        return [b.built(DynamicSliceOp.build(t[0].value, [i.value for i in x[1:]], y[0].type.shape))]


class DynamicUpdateSliceOp(NaryOp):
    """``graph.dynamic_update_slice %a, %u, %i, %j : (tensor<8x4xf32>, tensor<1x4xf32>, index, index) -> tensor<8x4xf32>``.

    ``%a`` with the window at offsets ``%i, %j`` replaced by ``%u`` (whose static shape is
    the window's).  A window that does not fit is an error."""

    name = "graph.dynamic_update_slice"
    summary = "A tensor with the window at offsets given as index operands replaced by another tensor."
    example = "%r = graph.dynamic_update_slice %t, %u, %i : (tensor<4xf32>, tensor<4xf32>, index) -> tensor<4xf32>"

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if len(types) < 2:
            raise ShapeError("takes a tensor, an update and one index offset per dimension")
        dst, update = _tensor(types[0], "operand"), _tensor(types[1], "update")
        if update.rank != dst.rank or update.element_type is not dst.element_type:
            raise ShapeError(f"the update must have the operand's rank and element type, got {update} for {dst}")
        _offsets(types[2:], dst.rank, "operand")
        _fits_statically(update.shape, dst.shape, "update")
        return dst

    def compute(self, args):
        a, u = args[0], args[1]
        out = np.array(a, order="C")
        out[_window(args[2:], u.shape, a.shape)] = u
        return out

    @classmethod
    def build(cls, operand, update, offsets):
        return cls([operand, update, *offsets], [operand.type], {})

    def vjp(self, b, x, y, g):
        """The window's cotangent goes to the update, the rest to the operand."""
        offsets = [i.value for i in x[2:]]
        zeros = b.zeros_like(x[1])
        rest = b.built(DynamicUpdateSliceOp.build(g[0].value, zeros.value, offsets))
        window = b.built(DynamicSliceOp.build(g[0].value, offsets, x[1].type.shape))
        return [rest, window, *[None] * len(offsets)]

    def jvp(self, b, x, y, t):
        offsets = [i.value for i in x[2:]]
        ta = t[0] if t[0] is not None else b.zeros_like(x[0])
        tu = t[1] if t[1] is not None else b.zeros_like(x[1])
        return [b.built(DynamicUpdateSliceOp.build(ta.value, tu.value, offsets))]
