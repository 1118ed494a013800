"""merge-matmul: matmuls that share an operand become one wider matmul, ``[Y|Y'] = x[W|W']``.

``x @ W1`` and ``x @ W2`` in one block (same ``x``; the W's with equal K) become
``graph.matmul x, concat(W1, W2, axis = 1)`` and a ``graph.slice`` of its columns
for each old result; matmuls sharing their right operand, ``x1 @ W`` and ``x2 @ W``,
become one matmul of ``concat(x1, x2, axis = 0)`` sliced by rows.  One large matrix
product uses the hardware better than several thin ones, and ``x`` is read once.
Matmuls with the same pair of operands share one slot and one slice.

The slices have static sizes, so the dimension that the results keep (M for a
shared left operand, N for a shared right one) and each merged operand's own
dimension must be static; K may be dynamic (the concat and the matmul check it at
run time, where the matmuls did).

**Where the merged ops go.**  They must come after the definitions of all the
operands they read and before the first use of any result they replace.  For each
matmul, the block positions of its other operand's definition (d) and of the first
op that uses its result (u, counting an op whose nested regions use it) bound an
interval (d, u]; a group can be merged at any position inside all its members'
intervals.  The members sharing an operand are split into groups by the greedy
interval-stabbing sweep (sorted by u), which needs the fewest groups, and each
group is inserted just after the latest definition it reads.  Work is one pass
over each block plus a sort: O(n log n).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

from irc.operation import Operation
from irc.passmanager import Pass
from irc.rewriter import Rewriter
from irc.types import TensorType


def _top_level(op: Operation, block) -> Operation | None:
    """``op`` or its ancestor that sits directly in ``block``; None if it is not nested in it."""
    while op is not None and op.parent is not block:
        op = op.parent_op
    return op


class _Block:
    """The ops of one block and their positions, which order them as the block does: the
    original ops are numbered, and each new op is put halfway between the ops around it
    (exact fractions, so any number of insertions keeps the order)."""

    def __init__(self, block):
        self.block = block
        self.position: dict[Operation, Fraction | int] = {}
        self.phi_end = 0  # ops before this position are the leading phis
        for i, op in enumerate(block.ops):
            self.position[op] = i
            if op.name == "cf.phi" and self.phi_end == i:
                self.phi_end = i + 1

    def defined_at(self, value) -> Fraction | int:
        """Position of ``value``'s definition in this block (-1: before the block's first op)."""
        op = value.defining_op
        if op is None or op.parent is not self.block:
            return -1
        return self.position[op]

    def first_use(self, value) -> Fraction | float:
        first = math.inf
        for use in value.uses:
            top = _top_level(use.owner, self.block)
            if top is not None:
                first = min(first, self.position[top])
        return first

    def insert_after(self, anchor: Operation | None, ops: list) -> None:
        """Insert ``ops`` in order right after ``anchor`` (None: after the leading phis)."""
        if anchor is None:
            nxt = self.block.first_op
            while nxt.name == "cf.phi":
                anchor, nxt = nxt, nxt.next
        else:
            nxt = anchor.next
        rewriter = Rewriter()
        rewriter.before_op(nxt)  # a block ends in its terminator, so there is always a next op
        low = self.position[anchor] if anchor is not None else -1
        for op in ops:
            low = (Fraction(low) + self.position[nxt]) / 2
            rewriter.insert(op)
            self.position[op] = low


@dataclass
class MergeMatmul(Pass):
    """Merge matmuls that share an operand into one wider matmul and slices of its result."""

    name = "merge-matmul"

    def triggers(self):
        return frozenset({"graph.matmul"})

    def run(self, module, stats) -> None:
        blocks = [block for op in module.walk() for region in op.regions for block in region.blocks]
        for block in blocks:
            for shared in (0, 1):  # a shared left operand (x @ [W1|W2]), then a shared right one
                matmuls = [op for op in block.ops if op.name == "graph.matmul"]
                if len(matmuls) < 2:
                    break
                self.merge(_Block(block), matmuls, shared, stats)

    def merge(self, where: _Block, matmuls: list, shared: int, stats) -> None:
        candidates = defaultdict(list)
        for op in matmuls:
            key = self.key(op, shared)
            if key is not None:
                candidates[key].append(op)
        for members in candidates.values():
            if len({m.operands[1 - shared] for m in members}) < 2:
                continue  # one product repeated: cse's business
            for group in self.groups(where, members, shared):
                if len({m.operands[1 - shared] for m in group}) >= 2:
                    self.rewrite(where, group, shared, stats)

    @staticmethod
    def key(op, shared: int):
        """What members of one group have in common: the shared value and the size of the
        concatenated operands along the axis they are not joined on (K); None if the op
        cannot take part (a slice size would be dynamic)."""
        a, b = op.operands
        if not (isinstance(a.type, TensorType) and isinstance(b.type, TensorType)):
            return None
        if shared == 0:  # x @ W: slices are M x N_i
            if a.type.shape[0] is None or b.type.shape[1] is None:
                return None
            return (a, b.type.shape[0])
        if a.type.shape[0] is None or b.type.shape[1] is None:  # X_i @ W: slices are M_i x N
            return None
        return (b, a.type.shape[1])

    @staticmethod
    def groups(where: _Block, members: list, shared: int) -> list[list]:
        """Split ``members`` into groups that each have a legal insertion point (fewest groups)."""
        high = {op: where.first_use(op.results[0]) for op in members}
        intervals = []
        for op in members:
            low = max(where.defined_at(op.operands[1 - shared]), where.defined_at(op.operands[shared]),
                      where.phi_end - 1)
            producer = op.operands[1 - shared].defining_op
            if producer in high:
                # x @ (x @ W): the operand is replaced by a slice placed no later than its first use.
                low = max(low, high[producer])
            intervals.append((high[op], low, op))
        intervals.sort(key=lambda t: (t[0], where.position[t[2]]))
        groups: list[list] = []
        point = None
        for high, low, op in intervals:
            if point is not None and low < point:
                groups[-1].append(op)
            elif low < high:  # else no position suits it (its result feeds a phi of the block)
                point = high
                groups.append([op])
        return groups

    def rewrite(self, where: _Block, group: list, shared: int, stats) -> None:
        group.sort(key=lambda op: where.position[op])
        common = group[0].operands[shared]
        parts = list(dict.fromkeys(op.operands[1 - shared] for op in group))  # distinct, in order
        # Just after the latest definition the new ops read (after the leading phis).
        anchor, at = None, where.phi_end - 1
        for v in [common, *parts]:
            p = where.defined_at(v)
            if p > at:
                anchor, at = v.defining_op, p
        new_ops = self.build(common, parts, shared)
        for op in new_ops:
            op.loc = group[0].loc
        where.insert_after(anchor, new_ops)
        rewriter = Rewriter()
        slices = dict(zip(parts, new_ops[2:]))
        for op in group:
            rewriter.replace_op(op, [slices[op.operands[1 - shared]].results[0]])
        stats.add("matmuls-merged", len(group))
        stats.add("merged-matmuls-created")

    @staticmethod
    def build(common, parts: list, shared: int) -> list:
        """``[concat, matmul, slice per part]``."""
        from irc.dialects.graph import ConcatOp, MatmulOp, SliceOp

        axis = 1 - shared  # W's side by side (axis 1), or X's stacked (axis 0)
        concat = ConcatOp.build(parts, axis=axis)
        product = MatmulOp.build(common, concat.results[0]) if shared == 0 else \
            MatmulOp.build(concat.results[0], common)
        out = [concat, product]
        start = 0
        rows, cols = product.results[0].type.shape
        for v in parts:
            size = v.type.shape[axis]
            if shared == 0:
                out.append(SliceOp.build(product.results[0], [0, start], [rows, size]))
            else:
                out.append(SliceOp.build(product.results[0], [start, 0], [size, cols]))
            start += size
        return out
