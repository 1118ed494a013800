"""Builders and rewriters: every change a pass makes to the IR goes through here.

A ``Builder`` inserts new ops at an insertion point.  A ``Rewriter`` adds the
mutations (replace, erase, modify in place) and reports each one to a
``Listener``, which is how the greedy pattern driver keeps its worklist right
without rescanning the IR.
"""

from __future__ import annotations

from collections.abc import Sequence

from .block import Block
from .operation import Operation
from .values import Value


class Listener:
    """Hooks called after each change; the default does nothing."""

    def op_inserted(self, op: Operation) -> None:
        pass

    def op_erased(self, op: Operation) -> None:
        pass

    def op_modified(self, op: Operation) -> None:
        pass

    def op_replaced(self, op: Operation, new_values: Sequence[Value]) -> None:
        pass


class Builder:
    """Inserts ops before a given op, or at the end of a block."""

    def __init__(self, listener: Listener | None = None):
        self.listener = listener or Listener()
        self.block: Block | None = None
        self.before: Operation | None = None

    def at_end(self, block: Block) -> Builder:
        self.block, self.before = block, None
        return self

    def at_start(self, block: Block) -> Builder:
        self.block, self.before = block, block.first_op
        return self

    def before_op(self, op: Operation) -> Builder:
        self.block, self.before = op.parent, op
        return self

    def after_op(self, op: Operation) -> Builder:
        self.block, self.before = op.parent, op.next
        return self

    def insert(self, op: Operation) -> Operation:
        if self.block is None:
            raise ValueError("builder has no insertion point")
        if self.before is None:
            self.block.append(op)
        else:
            self.block.insert_before(op, self.before)
        self.listener.op_inserted(op)
        return op

    def create(self, op: Operation) -> Value | Operation:
        """Insert ``op``; return its result if it has exactly one, else the op."""
        self.insert(op)
        return op.results[0] if len(op.results) == 1 else op


class Rewriter(Builder):
    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        users = {u.owner for u in old.uses}
        old.replace_all_uses_with(new)
        for user in users:
            self.listener.op_modified(user)

    def replace_op(self, op: Operation, new_values: Sequence[Value]) -> None:
        """Replace every use of ``op``'s results by ``new_values``, then erase ``op``."""
        assert len(new_values) == len(op.results), "replacement must give one value per result"
        self.listener.op_replaced(op, new_values)
        for old, new in zip(op.results, new_values):
            self.replace_all_uses_with(old, new)
        self.erase_op(op)

    def erase_op(self, op: Operation) -> None:
        for nested in list(op.walk())[1:]:
            self.listener.op_erased(nested)
        self.listener.op_erased(op)
        op.erase()

    def set_operand(self, op: Operation, index: int, value: Value) -> None:
        op.set_operand(index, value)
        self.listener.op_modified(op)

    def modified(self, op: Operation) -> None:
        """Report an in-place change made directly to ``op``."""
        self.listener.op_modified(op)
