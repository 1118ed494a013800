"""cse: common-subexpression elimination, scoped by dominance.

Two pure ops with the same name, operands, result types, attributes and
successors compute the same values, so the later one can reuse the earlier
one's results wherever the earlier one dominates it.  The pass walks each
region's dominator tree in pre-order with a scoped hash table: a block sees
the entries of the blocks that dominate it, and an op's nested regions see
the entries of the enclosing blocks (a value defined outside an ``scf.for``
may be reused inside it), but an ``IsolatedFromAbove`` op (a function) starts
from an empty table.  Everything added in a scope is forgotten when the walk
leaves it, so entries never leak into blocks they do not dominate (the two
arms of a diamond).

Only pure ops without regions are candidates, never terminators.  As in MLIR,
an op that is unused and free of side effects when the walk reaches it is
erased instead (a dead ``scf.if`` included).  The two
operands of a commutative op are ordered by a number given to each value in
walk order (stable from run to run, unlike ``id()``), so ``addi %a, %b`` and
``addi %b, %a`` meet.  A ``cf.phi`` meets only a phi of the same block with the
same incoming (value, block) pairs.  Blocks unreachable from their region's
entry are left alone: dominance says nothing there.

One walk, O(1) expected work per op (plus the dominator tree of each
multi-block region).
"""

from __future__ import annotations

from irc.block import Block, Region
from irc.dominance import DominatorTree
from irc.operation import IsolatedFromAbove, Operation
from irc.passmanager import Pass
from irc.patterns import is_removable
from irc.values import Value

_MISSING = object()


class ScopedTable:
    """A hash table whose insertions are undone when the scope that made them closes."""

    def __init__(self):
        self.entries: dict[tuple, Operation] = {}
        self.undo: list[list[tuple]] = []

    def push(self) -> None:
        self.undo.append([])

    def pop(self) -> None:
        entries = self.entries
        for key, old in reversed(self.undo.pop()):
            if old is _MISSING:
                del entries[key]
            else:
                entries[key] = old

    def get(self, key: tuple) -> Operation | None:
        return self.entries.get(key)

    def insert(self, key: tuple, op: Operation) -> None:
        self.undo[-1].append((key, self.entries.get(key, _MISSING)))
        self.entries[key] = op


class CSE(Pass):
    """Merge pure ops that repeat a dominating op (scoped by the dominator tree)."""

    name = "cse"

    def run(self, module, stats) -> None:
        Eliminator(stats).process_op_regions(module, ScopedTable())


class Eliminator:
    """One walk over a module, erasing the duplicates it finds."""

    def __init__(self, stats):
        self.stats = stats
        self.numbers: dict[Value, int] = {}

    def number(self, value: Value) -> int:
        """The value's position in walk order, assigned on first sight (stable across runs)."""
        n = self.numbers.get(value)
        if n is None:
            n = self.numbers[value] = len(self.numbers)
        return n

    # -- the walk --------------------------------------------------------------------------------

    def process_op_regions(self, op: Operation, table: ScopedTable) -> None:
        if op.has_trait(IsolatedFromAbove):
            table = ScopedTable()
        for region in op.regions:
            self.process_region(region, table)

    def process_region(self, region: Region, table: ScopedTable) -> None:
        entry = region.entry
        if entry is None:
            return
        if entry is region.last_block:
            table.push()
            self.process_block(entry, table)
            table.pop()
            return
        tree = DominatorTree(region)
        children = tree.children
        # Iterative pre-order walk: a scope is open exactly while its block's subtree is walked.
        table.push()
        self.process_block(entry, table)
        stack = [iter(children[entry])]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
                table.pop()
                continue
            table.push()
            self.process_block(child, table)
            stack.append(iter(children[child]))

    def process_block(self, block: Block, table: ScopedTable) -> None:
        for arg in block.args:
            self.number(arg)
        for op in block.ops:
            if is_trivially_dead(op):
                op.erase()
                self.stats.add("ops-erased")
                continue
            if op.regions:
                self.process_op_regions(op, table)
                self.number_results(op)
                continue
            key = self.key(op)
            if key is None:
                self.number_results(op)
                continue
            existing = table.get(key)
            if existing is None:
                table.insert(key, op)
                self.number_results(op)
                continue
            for old, new in zip(op.results, existing.results):
                old.replace_all_uses_with(new)
            op.erase()
            self.stats.add("ops-erased")

    def number_results(self, op: Operation) -> None:
        for r in op.results:
            self.number(r)

    # -- keys ----------------------------------------------------------------------------------------

    def key(self, op: Operation) -> tuple | None:
        """What makes two ops interchangeable, or None if ``op`` may not be merged."""
        if not op.is_pure or op.is_terminator:
            return None
        if op.name == "cf.phi":
            return phi_key(op)
        operands = tuple(op.operands)
        if op.is_commutative and len(operands) == 2:
            a, b = operands
            if self.number(a) > self.number(b):
                operands = (b, a)
        attrs = op.attributes
        return (
            op.name,
            operands,
            tuple(r.type for r in op.results),
            tuple(sorted(attrs.items())) if attrs else (),
            tuple(op.successors),
        )


def is_trivially_dead(op: Operation) -> bool:
    """Unused and free of side effects when visited: MLIR's CSE erases these too."""
    return (not op.is_terminator and bool(op.results) and not any(r.has_uses for r in op.results)
            and is_removable(op))


def phi_key(phi: Operation) -> tuple:
    """Phis are interchangeable only within one block and with the same incoming pairs."""
    attrs = phi.attributes
    return (
        "cf.phi",
        phi.parent,
        phi.results[0].type,
        frozenset(zip(phi.operands, phi.successors)),
        tuple(sorted(attrs.items())) if attrs else (),
    )
