"""mem2reg: promote scalar stack slots to SSA values, placing phis by dominance frontiers.

Imperative-style programs (and front ends) keep variables in one-element stack
buffers: ``%x = memref.alloca() : memref<i64>`` with loads and stores.  Every
other pass sees through SSA values but not through memory, so this pass turns
such slots into values: each load becomes the value last stored on the path to
it, and where paths with different values meet, a ``cf.phi`` merges them.

A slot qualifies when it is a ``memref.alloca`` without operands of type
``memref<T>`` (rank 0) or ``memref<1xT>`` and every use is a ``memref.load`` or
``memref.store`` *of* it (not storing the buffer itself anywhere) in the same
region, with index 0 as a constant: a slot passed to a call or read inside a
nested scf region stays in memory.  Each region is promoted on its own, so a
slot local to an ``scf.for`` body is promoted there.

SSA construction follows Cytron et al.: phis go at the iterated dominance
frontier of the blocks that define the slot (its stores and the alloca
itself), pruned to the blocks where the slot is live on entry, then a walk
over the dominator tree renames each load to the reaching definition.  An
alloca (re)initialises its buffer to zero each time it runs - the
interpreter's ``np.zeros`` - so it defines the slot as zero (``0`` or
``0.0``), and so does a load before any store.
"""

from __future__ import annotations

from irc.dialects.arith import constant
from irc.dialects.cf import PhiOp
from irc.dialects.memref import AllocaOp, LoadOp, StoreOp

from irc.attributes import IntegerAttr
from irc.block import Block, Region
from irc.dominance import DominatorTree
from irc.operation import Operation
from irc.passmanager import Pass
from irc.patterns import constant_value
from irc.types import MemRefType

from .cfg_utils import function_regions, remove_unreachable_blocks


class Mem2Reg(Pass):
    """Promote scalar memref.alloca slots that are only loaded and stored to SSA values and phis."""

    name = "mem2reg"

    def triggers(self):
        return frozenset({"memref.alloca"})

    def run(self, module, stats) -> None:
        for region in list(function_regions(module)):
            promote_region(region, stats)


def promote_region(region: Region, stats) -> None:
    slots = [op for block in region.blocks for op in block.ops if is_promotable(op, region)]
    if not slots:
        return
    entry = region.entry
    if entry.predecessors:
        return  # a phi would be needed in the entry block, which takes arguments instead
    remove_unreachable_blocks(region, stats)
    slots = [s for s in slots if s.parent is not None and s.parent.parent is region]
    dom = DominatorTree(region)
    promoter = _Promoter(region, dom, slots)
    promoter.place_phis()
    promoter.rename()
    inserted = promoter.erase_unused_phis()
    stats.add("slots-promoted", len(slots))
    if inserted:
        stats.add("phis-inserted", inserted)


def is_promotable(op: Operation, region: Region) -> bool:
    """A scalar alloca whose every use is a load or store of it at index 0, in ``region`` itself."""
    if not isinstance(op, AllocaOp) or op.operands:
        return False
    t = op.results[0].type
    if not isinstance(t, MemRefType) or t.shape not in ((), (1,)):
        return False
    slot = op.results[0]
    for use in slot.uses:
        user = use.owner
        if user.parent is None or user.parent.parent is not region:
            return False
        if isinstance(user, LoadOp):
            indices = user.operands[1:]
        elif isinstance(user, StoreOp) and use.index == 1:
            indices = user.operands[2:]
        else:
            return False
        if not all(_is_zero_index(i) for i in indices):
            return False
    return True


def _is_zero_index(value) -> bool:
    attr = constant_value(value)
    return isinstance(attr, IntegerAttr) and attr.value == 0


class _Promoter:
    """Phi placement and renaming for all promotable slots of one region at once."""

    def __init__(self, region: Region, dom: DominatorTree, slots: list[Operation]):
        self.region = region
        self.dom = dom
        self.slots = slots
        self.slot_of = {s.results[0]: s for s in slots}
        self.phis: dict[Block, dict[Operation, PhiOp]] = {}  # block -> slot -> phi
        self.placed: list[PhiOp] = []
        self.zeros: dict[Operation, object] = {}

    # -- phi placement ---------------------------------------------------------------

    def place_phis(self) -> None:
        frontiers = self.dom.frontiers()
        for slot in self.slots:
            defs = {slot.parent} | {u.owner.parent for u in slot.results[0].uses if isinstance(u.owner, StoreOp)}
            live = self._live_in_blocks(slot)
            work, seen = list(defs), set()
            while work:
                for join in frontiers.get(work.pop(), ()):
                    if join in seen:
                        continue
                    seen.add(join)
                    work.append(join)
                    if join in live:
                        self._add_phi(join, slot)

    def _add_phi(self, block: Block, slot: Operation) -> None:
        phi = PhiOp.build(slot.results[0].type.element_type)
        phi.loc = slot.loc
        hint = slot.results[0].name_hint
        phi.results[0].name_hint = f"{hint}.phi" if hint else None
        here = self.phis.setdefault(block, {})
        if here:
            block.insert_after(phi, list(here.values())[-1])
        else:
            block.prepend(phi)
        here[slot] = phi
        self.placed.append(phi)

    def _live_in_blocks(self, slot: Operation) -> set[Block]:
        """Blocks on entry to which the slot's value may still be read (before being redefined)."""
        value = slot.results[0]
        first_access: dict[Block, str] = {}  # "use" if the block reads before it defines, else "def"
        for block in self.dom.rpo:
            for op in block.ops:
                if op is slot or (isinstance(op, StoreOp) and op.operands[1] is value):
                    first_access[block] = "def"
                    break
                if isinstance(op, LoadOp) and op.operands[0] is value:
                    first_access[block] = "use"
                    break
        live = {b for b, kind in first_access.items() if kind == "use"}
        work = list(live)
        while work:
            for pred in work.pop().predecessors:
                if pred not in live and first_access.get(pred) != "def" and self.dom.is_reachable(pred):
                    live.add(pred)
                    work.append(pred)
        return live

    # -- renaming ---------------------------------------------------------------------

    def rename(self) -> None:
        """Walk the dominator tree, carrying each slot's reaching definition (None: not yet allocated)."""
        children = self.dom.children
        stack: list[tuple[Block, dict]] = [(self.region.entry, {})]
        while stack:
            block, current = stack.pop()
            current = dict(current)
            current.update(self.phis.get(block, {}))
            for op in block.ops:
                self._rename_op(op, current)
            for succ in dict.fromkeys(block.successors):
                for slot, phi in self.phis.get(succ, {}).items():
                    phi.add_incoming(self._value(current.get(slot), slot), block)
            for child in reversed(children[block]):
                stack.append((child, current))
        for slot in self.slots:
            slot.erase()
        order = {b: i for i, b in enumerate(self.region.blocks)}
        for phi in self.placed:  # list the incoming values in block order, for readability
            incoming = sorted(phi.incoming, key=lambda entry: order[entry[1]])
            phi.set_operands([v for v, _ in incoming])
            phi.set_successors([b for _, b in incoming])

    def _rename_op(self, op: Operation, current: dict) -> None:
        if op.results and op.results[0] in self.slot_of:
            current[op] = "zero"
        elif isinstance(op, LoadOp) and op.operands[0] in self.slot_of:
            slot = self.slot_of[op.operands[0]]
            op.results[0].replace_all_uses_with(self._value(current.get(slot), slot))
            op.erase()
        elif isinstance(op, StoreOp) and op.operands[1] in self.slot_of:
            current[self.slot_of[op.operands[1]]] = op.operands[0]
            op.erase()

    def _value(self, definition, slot: Operation):
        """The SSA value for a reaching definition: a value, a phi, or the slot's zero."""
        if isinstance(definition, PhiOp):
            return definition.results[0]
        if definition is None or isinstance(definition, str):
            return self._zero(slot)
        return definition

    def _zero(self, slot: Operation):
        """The slot's initial contents, as a constant at the top of the region (dominating every use)."""
        zero = self.zeros.get(slot)
        if zero is None:
            t = slot.results[0].type.element_type
            op = constant(0.0 if t.is_float else 0, t)
            op.loc = slot.loc
            hint = slot.results[0].name_hint
            op.results[0].name_hint = f"{hint}.init" if hint else None
            self.region.entry.prepend(op)
            zero = self.zeros[slot] = op.results[0]
        return zero

    def erase_unused_phis(self) -> int:
        """Erase placed phis that no load ended up reading; the number kept."""
        alive = set(self.placed)
        changed = True
        while changed:
            changed = False
            for phi in list(alive):
                if not any(u.owner is not phi for u in phi.results[0].uses):
                    phi.drop_all_references()
                    phi.parent.remove(phi)
                    alive.discard(phi)
                    changed = True
        return len(alive)
