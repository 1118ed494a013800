"""Scatter ops of the graph level: ``graph.scatter_add``, the adjoint of ``graph.gather``.

A gather reads slices of a table at integer indices; its gradient adds the incoming slices
back at the same indices, with repeated indices summing (an embedding's gradient: a token
that occurs twice gets both rows).  Written as ``one_hot(idx)^T @ g`` that costs rows x
indices x width multiply-adds and a one-hot matrix as large; ``graph.scatter_add`` costs
one addition per element of ``g``.

The op is the ``axis`` form of numpy's ``np.add.at``: the updates have the shape a gather
at those indices would return, and the result is the destination with each slice added
at its index.  Additions to one element happen in the order of the indices (row-major),
in the interpreter and in compiled code alike, so both give the same bits.
"""

from __future__ import annotations

import numpy as np

from irc.semantics import Fault
from irc.types import IntegerType, i1

from .graph import NaryOp, ShapeError, _axis, _dims, _int, _tensor


class ScatterAddOp(NaryOp):
    """``graph.scatter_add %dest, %idx, %updates {axis = 0} : (tensor<100x8xf32>, tensor<2x5xi64>,
    tensor<2x5x8xf32>) -> tensor<100x8xf32>``.

    ``%dest`` with each slice of ``%updates`` added at its index along ``axis``: numpy's
    ``np.add.at(dest, (slice(None),) * axis + (idx,), updates)`` on a copy.  ``%updates``
    has the shape ``graph.gather %dest, %idx {axis}`` has (the destination's dimensions
    before ``axis``, the indices', then the destination's after it).  Indices are integers
    in [0, size); one out of range is an error, in the interpreter and in compiled code alike.
    """

    name = "graph.scatter_add"
    summary = "A tensor with slices added at integer indices along one axis (numpy's add.at); gather's adjoint."
    example = ("%r = graph.scatter_add %mat2, %ids, %mat2 {axis = 1} : (tensor<4x5xf32>, tensor<5xi64>, "
               "tensor<4x5xf32>) -> tensor<4x5xf32>")

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if len(types) != 3:
            raise ShapeError(f"takes a destination, indices and updates, got {len(types)} operands")
        dest, idx = _tensor(types[0], "destination"), _tensor(types[1], "indices")
        updates = _tensor(types[2], "updates")
        if not isinstance(idx.element_type, IntegerType) or idx.element_type is i1:
            raise ShapeError(f"indices must be integers (not i1), got {idx}")
        if updates.element_type is not dest.element_type:
            raise ShapeError(f"updates must have the destination's element type, got {updates} for {dest}")
        axis = _axis(_int(attrs, "axis"), dest.rank)
        want = [*dest.shape[:axis], *idx.shape, *dest.shape[axis + 1:]]
        if len(want) != updates.rank or any(a is not None and b is not None and a != b
                                            for a, b in zip(want, updates.shape)):
            raise ShapeError(f"updates must have shape {_dims(want)} (the gather of the destination at the "
                             f"indices), got {updates}")
        return dest

    def compute(self, args):
        dest, idx, updates = args
        axis = _int(self.attributes, "axis")
        n = dest.shape[axis]
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise Fault(f"an index is out of range [0, {n}) for axis {axis} of shape {_dims(dest.shape)}")
        want = (*dest.shape[:axis], *idx.shape, *dest.shape[axis + 1:])
        if updates.shape != want:
            raise Fault(f"updates of shape {_dims(updates.shape)} do not match {_dims(want)}")
        out = np.array(dest, copy=True)
        np.add.at(out, (slice(None),) * axis + (idx.astype(np.int64),), updates)
        return out

    def vjp(self, b, x, y, g):
        axis = _int(self.attributes, "axis")
        return [g[0], None, b.tensor_op("graph.gather", g[0], x[1], axis=axis)]

    def jvp(self, b, x, y, t):
        axis = _int(self.attributes, "axis")
        if t[0] is None and t[2] is None:
            return [None]
        dest = t[0] if t[0] is not None else b.zeros_like(x[0])
        if t[2] is None:
            return [dest]
        return [b.tensor_op(self.name, dest, x[1], t[2], axis=axis)]
