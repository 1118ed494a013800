"""SSA values and their use lists.

A value is defined exactly once: by an operation result or as an argument of a
region's entry block.  Every operand slot that reads a value is a ``Use``
linked into the value's intrusive, doubly linked use list, so adding and
removing a use is O(1) and ``replace_all_uses_with`` touches only the uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .types import Type

if TYPE_CHECKING:
    from .block import Block
    from .operation import Operation


class Use:
    """Operand ``index`` of ``owner`` reads ``value``."""

    __slots__ = ("value", "owner", "index", "prev", "next")

    def __init__(self, value: Value, owner: Operation, index: int):
        self.value = value
        self.owner = owner
        self.index = index
        self.prev: Use | None = None
        head = value.first_use
        self.next = head
        if head is not None:
            head.prev = self
        value.first_use = self

    def unlink(self) -> None:
        if self.prev is None:
            self.value.first_use = self.next
        else:
            self.prev.next = self.next
        if self.next is not None:
            self.next.prev = self.prev
        self.prev = self.next = None


class Value:
    """An SSA value of a given type.  ``name_hint`` is the name it had in the source."""

    __slots__ = ("type", "first_use", "name_hint")

    def __init__(self, type: Type, name_hint: str | None = None):
        self.type = type
        self.first_use: Use | None = None
        self.name_hint = name_hint

    @property
    def uses(self) -> Iterator[Use]:
        use = self.first_use
        while use is not None:
            nxt = use.next
            yield use
            use = nxt

    @property
    def users(self) -> Iterator[Operation]:
        for use in self.uses:
            yield use.owner

    @property
    def has_uses(self) -> bool:
        return self.first_use is not None

    @property
    def has_one_use(self) -> bool:
        return self.first_use is not None and self.first_use.next is None

    def num_uses(self) -> int:
        n, use = 0, self.first_use
        while use is not None:
            n, use = n + 1, use.next
        return n

    def replace_all_uses_with(self, new: Value) -> None:
        if new is self:
            return
        use = self.first_use
        while use is not None:
            nxt = use.next
            use.owner.set_operand(use.index, new)
            use = nxt

    @property
    def owner(self) -> Operation | Block:
        raise NotImplementedError

    @property
    def defining_op(self) -> Operation | None:
        return None

    @property
    def parent_block(self) -> Block | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} %{self.name_hint or '?'} : {self.type}>"


class OpResult(Value):
    """Result ``index`` of operation ``op``."""

    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: Operation, index: int, name_hint: str | None = None):
        self.type = type  # Value.__init__, inlined: one result per op of every parsed module
        self.first_use = None
        self.name_hint = name_hint
        self.op = op
        self.index = index

    @property
    def owner(self) -> Operation:
        return self.op

    @property
    def defining_op(self) -> Operation:
        return self.op

    @property
    def parent_block(self) -> Block | None:
        return self.op.parent


class BlockArgument(Value):
    """Argument ``index`` of a region's entry ``block``: function parameters, loop variables."""

    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: Block, index: int, name_hint: str | None = None):
        Value.__init__(self, type, name_hint)
        self.block = block
        self.index = index

    @property
    def owner(self) -> Block:
        return self.block

    @property
    def parent_block(self) -> Block:
        return self.block
