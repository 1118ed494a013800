"""licm: loop-invariant code motion, for scf loops and for natural loops in the CFG.

An op inside a loop whose operands are all defined outside it computes the same
value on every trip, so it can run once before the loop.  Only ops that are
safe to *speculate* move: pure, without regions, not a phi or a terminator, and
unable to fault at run time.  A loop may run zero times, so a hoisted op may
execute where it did not before; that is harmless for ``arith.addi`` but not for
integer division by zero, an oversized shift or an ``fptosi`` out of range,
which the interpreter (and the hardware) treat as errors, so those stay put.

* ``scf.for`` / ``scf.while``: the ops of the loop's own regions move to just
  before the loop op.  Inner loops are visited first, so an op can climb out of
  a whole loop nest, and chains (``%a = ...; %b = f(%a)``) move together because
  each hoisted result counts as defined outside.
* CFG loops: a back edge is an edge ``B -> H`` where ``H`` dominates ``B``; the
  loop is ``H`` plus the blocks that reach ``B`` without passing ``H``.  Ops move
  to the end of the loop's preheader: the single outside predecessor of ``H``
  when it branches only to ``H``, otherwise a new block that the outside
  predecessors branch to instead, taking over their entries in ``H``'s phis
  (through new phis when there are several).
"""

from __future__ import annotations

from irc.dialects.cf import BranchOp, PhiOp
from irc.dialects.scf import ForOp, WhileOp

from irc.block import Block, Region
from irc.dominance import DominatorTree
from irc.operation import Operation
from irc.passmanager import Pass
from irc.types import TensorType

# Pure ops that the interpreter reports as errors for some operands (division by
# zero, signed overflow in division, shift amounts >= the width, fptosi of a value
# the target cannot hold): they may not run on a path where they did not run before.
FAULTING_OPS = frozenset({
    "arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi", "arith.ceildivui",
    "arith.floordivsi", "arith.shli", "arith.shrsi", "arith.shrui", "arith.fptosi", "arith.fptoui",
})


def is_speculatable(op: Operation) -> bool:
    """Whether ``op`` may run on a path where it did not: pure, region-free, never faulting.

    Elementwise ops on tensors of dynamic shape may fault on mismatched shapes,
    so they count as faulting too.
    """
    if not op.is_pure or op.regions or op.is_terminator or op.name == "cf.phi" or op.name in FAULTING_OPS:
        return False
    return not any(isinstance(v.type, TensorType) and None in v.type.shape for v in op.operands)


class LICM(Pass):
    """Hoist loop-invariant, side-effect-free ops out of scf loops and CFG loops."""

    name = "licm"

    def run(self, module, stats) -> None:
        for func in module.functions:
            if func.is_declaration:
                continue
            hoisted = hoist_from_scf_loops(func)
            for op in list(func.walk()):
                for region in op.regions:
                    hoisted += hoist_from_cfg_loops(region)
            if hoisted:
                stats.add("ops-hoisted", hoisted)


# -- scf loops ------------------------------------------------------------------------


def hoist_from_scf_loops(func: Operation) -> int:
    loops = [op for op in func.walk() if isinstance(op, (ForOp, WhileOp))]
    # Reversed pre-order visits every loop after all loops nested in it.
    return sum(_hoist_from_scf_loop(loop) for loop in reversed(loops))


def _hoist_from_scf_loop(loop: Operation) -> int:
    inside: set = set()
    for region in loop.regions:
        for block in region.blocks:
            inside.update(block.args)
        for op in region.walk():
            inside.update(op.results)
    hoisted = 0
    for region in loop.regions:
        for block in region.blocks:
            for op in block.ops:
                if is_speculatable(op) and not any(v in inside for v in op.operands):
                    op.move_before(loop)
                    inside.difference_update(op.results)
                    hoisted += 1
    return hoisted


# -- natural loops in the CFG --------------------------------------------------------------


def hoist_from_cfg_loops(region: Region) -> int:
    """Hoist out of every natural loop of ``region``, innermost loops first."""
    if region.first_block is region.last_block:
        return 0
    total = 0
    while True:
        dom = DominatorTree(region)
        restart = False
        for header, body in natural_loops(dom):
            count, created = _hoist_from_cfg_loop(region, dom, header, body)
            total += count
            if created:  # the CFG changed: recompute dominators and loops
                restart = True
                break
        if not restart:
            return total


def natural_loops(dom: DominatorTree) -> list[tuple[Block, set[Block]]]:
    """(header, blocks) of each natural loop, back edges to one header merged, smallest first."""
    latches: dict[Block, list[Block]] = {}
    for block in dom.rpo:
        for succ in block.successors:
            if dom.dominates(succ, block):
                latches.setdefault(succ, []).append(block)
    loops = []
    for header, tails in latches.items():
        body = {header}
        work = [t for t in tails if t is not header]
        body.update(work)
        while work:
            for pred in work.pop().predecessors:
                if pred not in body and dom.is_reachable(pred):
                    body.add(pred)
                    work.append(pred)
        loops.append((header, body))
    loops.sort(key=lambda loop: len(loop[1]))
    return loops


def _hoist_from_cfg_loop(region: Region, dom: DominatorTree, header: Block,
                         body: set[Block]) -> tuple[int, bool]:
    """Hoist what can move out of one loop; (ops hoisted, whether a preheader was created)."""
    if header is region.entry:
        return 0, False  # nothing runs before the entry block to hoist into
    invariant = _invariant_ops(dom, body)
    if not invariant:
        return 0, False
    preheader, created = _preheader(header, body)
    term = preheader.terminator
    for op in invariant:
        op.move_before(term)
    return len(invariant), created


def _invariant_ops(dom: DominatorTree, body: set[Block]) -> list[Operation]:
    """Speculatable ops of the loop whose operands are defined outside it, in dominance order."""
    moved: set = set()
    result = []
    for block in sorted(body, key=dom.order.__getitem__):
        for op in block.ops:
            if not is_speculatable(op):
                continue
            if all(v in moved or v.parent_block not in body for v in op.operands):
                moved.update(op.results)
                result.append(op)
    return result


def _preheader(header: Block, body: set[Block]) -> tuple[Block, bool]:
    """The block that runs just before the loop, made if needed; (block, whether it is new)."""
    order = {b: i for i, b in enumerate(header.parent.blocks)}
    outside = sorted((p for p in header.predecessors if p not in body), key=order.__getitem__)
    if len(outside) == 1 and outside[0].successors == [header]:
        return outside[0], False
    pre = Block(loc=header.loc)
    header.parent.insert_after(pre, header.prev)
    for phi in list(header.phis()):
        entries = [(phi.value_for(p), p) for p in outside]
        if len(entries) == 1:
            value = entries[0][0]
        else:
            merged = PhiOp.build(phi.results[0].type, entries)
            merged.loc = phi.loc
            hint = phi.results[0].name_hint
            merged.results[0].name_hint = f"{hint}.init" if hint else None
            pre.append(merged)
            value = merged.results[0]
        for p in outside:
            phi.remove_incoming(p)
        phi.add_incoming(value, pre)
    for p in outside:
        term = p.terminator
        for i, succ in enumerate(term.successors):
            if succ is header:
                term.set_successor(i, pre)
    branch = BranchOp.build(header)
    branch.loc = header.loc
    pre.append(branch)
    return pre, True
