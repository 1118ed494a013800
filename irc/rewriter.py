"""The rewriter: every change a pass makes to existing IR goes through here.

A ``Rewriter`` is the public ``irc.builder.Builder`` (which inserts new ops at an
insertion point) plus the mutations: replace, erase, modify in place.  It reports
each change to its ``Listener``, which is how the greedy pattern driver keeps its
worklist right without rescanning the IR.  ``Builder`` and ``Listener`` are
re-exported here for the code that imports them from this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from .builder import Builder, Listener, _raw
from .operation import Operation
from .values import Value

__all__ = ["Builder", "Listener", "Rewriter"]


class Rewriter(Builder):
    """A ``Builder`` that also replaces, erases and modifies ops, telling its listener."""

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        old, new = _raw(old), _raw(new)
        users = {u.owner for u in old.uses}
        old.replace_all_uses_with(new)
        for user in users:
            self.listener.op_modified(user)

    def replace_op(self, op: Operation, new_values: Sequence[Value]) -> None:
        """Replace every use of ``op``'s results by ``new_values``, then erase ``op``."""
        new_values = [_raw(v) for v in new_values]  # a builder's V values or plain Values
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
        op.set_operand(index, _raw(value))
        self.listener.op_modified(op)

    def modified(self, op: Operation) -> None:
        """Report an in-place change made directly to ``op``."""
        self.listener.op_modified(op)
