"""Blocks and regions.

A block is a labelled, ordered list of ops ending in a terminator, held as an
intrusive doubly linked list so that insertion and removal anywhere are O(1).
Terminators (and ``cf.phi``) refer to blocks through ``Use`` records linked
into the block's own use list, so a block's predecessors are read off its
uses instead of being recomputed from the whole CFG.

Only the entry block of a region has arguments (function parameters, loop
variables); every other join point merges values with ``cf.phi``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .diagnostics import UNKNOWN, Location
from .types import Type
from .values import BlockArgument, Use

if TYPE_CHECKING:
    from .operation import Operation


class Block:
    __slots__ = (
        "args", "first_op", "last_op", "parent", "prev", "next", "first_use", "label", "loc",
        "__weakref__",
    )

    def __init__(self, arg_types: Sequence[Type] = (), label: str | None = None,
                 loc: Location = UNKNOWN, arg_names: Sequence[str | None] | None = None):
        names = arg_names or [None] * len(arg_types)
        self.args = [BlockArgument(t, self, i, n) for i, (t, n) in enumerate(zip(arg_types, names))]
        self.first_op: Operation | None = None
        self.last_op: Operation | None = None
        self.parent: Region | None = None
        self.prev: Block | None = None
        self.next: Block | None = None
        self.first_use: Use | None = None
        self.label = label
        self.loc = loc

    # -- ops -------------------------------------------------------------------

    @property
    def ops(self) -> Iterator[Operation]:
        """The ops in order; the current op may be erased or moved while iterating."""
        op = self.first_op
        while op is not None:
            nxt = op.next
            yield op
            op = nxt

    def ops_reversed(self) -> Iterator[Operation]:
        op = self.last_op
        while op is not None:
            prv = op.prev
            yield op
            op = prv

    @property
    def is_empty(self) -> bool:
        return self.first_op is None

    def __len__(self) -> int:
        n, op = 0, self.first_op
        while op is not None:
            n, op = n + 1, op.next
        return n

    @property
    def terminator(self) -> Operation | None:
        last = self.last_op
        return last if last is not None and last.is_terminator else None

    def append(self, op: Operation) -> Operation:
        assert op.parent is None, "op is already in a block"
        op.parent = self
        op.prev = self.last_op
        op.next = None
        if self.last_op is None:
            self.first_op = op
        else:
            self.last_op.next = op
        self.last_op = op
        return op

    def prepend(self, op: Operation) -> Operation:
        if self.first_op is None:
            return self.append(op)
        return self.insert_before(op, self.first_op)

    def insert_before(self, op: Operation, anchor: Operation) -> Operation:
        assert op.parent is None and anchor.parent is self
        op.parent = self
        op.next = anchor
        op.prev = anchor.prev
        if anchor.prev is None:
            self.first_op = op
        else:
            anchor.prev.next = op
        anchor.prev = op
        return op

    def insert_after(self, op: Operation, anchor: Operation) -> Operation:
        if anchor.next is None:
            return self.append(op)
        return self.insert_before(op, anchor.next)

    def remove(self, op: Operation) -> None:
        assert op.parent is self
        if op.prev is None:
            self.first_op = op.next
        else:
            op.prev.next = op.next
        if op.next is None:
            self.last_op = op.prev
        else:
            op.next.prev = op.prev
        op.parent = op.prev = op.next = None

    # -- arguments ---------------------------------------------------------------

    def add_argument(self, type: Type, name: str | None = None) -> BlockArgument:
        arg = BlockArgument(type, self, len(self.args), name)
        self.args.append(arg)
        return arg

    def erase_argument(self, index: int) -> None:
        arg = self.args.pop(index)
        assert not arg.has_uses, "erasing a block argument that is still used"
        for i, a in enumerate(self.args):
            a.index = i

    # -- CFG -----------------------------------------------------------------------

    @property
    def uses(self) -> Iterator[Use]:
        use = self.first_use
        while use is not None:
            nxt = use.next
            yield use
            use = nxt

    @property
    def predecessors(self) -> list[Block]:
        """Distinct predecessor blocks, in a deterministic order (by use order)."""
        seen: dict[Block, None] = {}
        use = self.first_use
        while use is not None:
            owner = use.owner
            if owner.is_terminator and owner.parent is not None:
                seen[owner.parent] = None
            use = use.next
        return list(seen)

    @property
    def successors(self) -> list[Block]:
        term = self.terminator
        return list(term.successors) if term is not None else []

    def phis(self) -> Iterator[Operation]:
        """The ``cf.phi`` ops that lead this block."""
        op = self.first_op
        while op is not None and op.name == "cf.phi":
            yield op
            op = op.next

    def replace_all_uses_with(self, new: Block) -> None:
        """Redirect every branch and phi that names this block to ``new``."""
        use = self.first_use
        while use is not None:
            nxt = use.next
            use.owner.set_successor(use.index, new)
            use = nxt

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.parent if self.parent is not None else None

    def erase(self) -> None:
        """Remove from the region, dropping all references of its ops."""
        for op in self.ops:
            op.drop_all_references()
        if self.parent is not None:
            self.parent.remove(self)

    def __repr__(self) -> str:
        return f"<Block ^{self.label or '?'}>"


class Region:
    """An ordered list of blocks owned by an op; the first is the entry block."""

    __slots__ = ("first_block", "last_block", "parent", "__weakref__")

    def __init__(self, blocks: Sequence[Block] = ()):
        self.first_block: Block | None = None
        self.last_block: Block | None = None
        self.parent: Operation | None = None
        for b in blocks:
            self.append(b)

    @property
    def blocks(self) -> Iterator[Block]:
        b = self.first_block
        while b is not None:
            nxt = b.next
            yield b
            b = nxt

    @property
    def entry(self) -> Block | None:
        return self.first_block

    @property
    def is_empty(self) -> bool:
        return self.first_block is None

    def append(self, block: Block) -> Block:
        assert block.parent is None, "block is already in a region"
        block.parent = self
        block.prev = self.last_block
        block.next = None
        if self.last_block is None:
            self.first_block = block
        else:
            self.last_block.next = block
        self.last_block = block
        return block

    def insert_after(self, block: Block, anchor: Block) -> Block:
        assert block.parent is None and anchor.parent is self
        if anchor.next is None:
            return self.append(block)
        block.parent = self
        block.prev = anchor
        block.next = anchor.next
        anchor.next.prev = block
        anchor.next = block
        return block

    def remove(self, block: Block) -> None:
        assert block.parent is self
        if block.prev is None:
            self.first_block = block.next
        else:
            block.prev.next = block.next
        if block.next is None:
            self.last_block = block.prev
        else:
            block.next.prev = block.prev
        block.parent = block.prev = block.next = None

    def walk(self) -> Iterator[Operation]:
        for block in self.blocks:
            for op in block.ops:
                yield from op.walk()  # iterative below this level: see Operation.walk

    def clone_into(self, dest: Region, value_map: dict, block_map: dict) -> None:
        """Append copies of this region's blocks to ``dest``, remapping values and blocks."""
        first_new = dest.last_block
        self.clone_blocks_into(dest, value_map, block_map)
        block = first_new.next if first_new is not None else dest.first_block
        ops = (op for b in _blocks_from(block) for top in b.ops for op in top.walk())
        remap_forward_references(ops, value_map, block_map)

    def clone_blocks_into(self, dest: Region, value_map: dict, block_map: dict) -> None:
        """``clone_into`` without the final remapping of forward references."""
        new_blocks = []
        for block in self.blocks:
            nb = Block([a.type for a in block.args], block.label, block.loc,
                       [a.name_hint for a in block.args])
            for old, new in zip(block.args, nb.args):
                value_map[old] = new
            block_map[block] = nb
            new_blocks.append((block, nb))
            dest.append(nb)
        # Clone ops after all blocks exist, so forward branches remap.
        for block, nb in new_blocks:
            for op in block.ops:
                nb.append(op._clone_unpatched(value_map, block_map))


def _blocks_from(block: Block | None):
    while block is not None:
        yield block
        block = block.next


def remap_forward_references(ops, value_map: dict, block_map: dict) -> None:
    """Point operands and successors of cloned ``ops`` at the clones of values and
    blocks that were copied after their use (phis, forward branches): one pass over
    the copy, however deeply its regions nest."""
    for op in ops:
        for i, v in enumerate(op.operands):
            mapped = value_map.get(v)
            if mapped is not None and mapped is not v:
                op.set_operand(i, mapped)
        for i, b in enumerate(op.successors):
            mapped = block_map.get(b)
            if mapped is not None and mapped is not b:
                op.set_successor(i, mapped)
