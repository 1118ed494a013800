"""simplify-cfg: fewer blocks and branches, to a fixpoint.

Lowering (scf-to-cf, inline) and other passes leave many blocks that only
pass control on; every branch is a cost to the backends and an obstacle to
block-local optimisations.  Each sweep over a region applies:

* unreachable blocks are erased (with their entries in reachable phis);
* a phi whose incoming values are all one value (or the phi itself) is that value;
* ``cf.cond_br %c, ^a, ^a`` becomes ``cf.br ^a``;
* a block whose single predecessor branches only to it is merged into that
  predecessor (never the entry block);
* an empty forwarding block (no phis, only ``cf.br ^s``) is bypassed: its
  predecessors branch to ``^s`` directly, taking over its entries in ``^s``'s
  phis.  A predecessor that already branches to ``^s`` is redirected only when
  the phis agree on both edges, since a phi has one entry per predecessor;
* a small diamond ``cf.cond_br %c, ^a, ^b`` whose arms hold at most
  ``max_arm_ops`` speculatable ops and branch to one join (or a triangle, where
  one arm is the join itself) becomes straight-line code in the predecessor,
  the join's phis becoming ``arith.select %c, %from_a, %from_b``.  Arms may run
  ops that did not run before, so only ops that cannot fault qualify (see licm).

The sweeps repeat until nothing changes.  Statistics count each kind of rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.dialects.arith import SelectOp
from irc.dialects.cf import BranchOp, CondBranchOp

from irc.block import Block, Region
from irc.passmanager import Pass

from .cfg_utils import function_regions, remove_unreachable_blocks
from .licm import is_speculatable


@dataclass
class SimplifyCFG(Pass):
    """Merge, bypass and erase blocks, fold trivial phis, turn small diamonds into selects."""

    name = "simplify-cfg"
    max_arm_ops: int = 4  # ops (besides the branch) an arm of a diamond may hold to become a select

    def run(self, module, stats) -> None:
        for region in list(function_regions(module)):
            if region.first_block is not region.last_block:
                self.simplify_region(region, stats)

    def simplify_region(self, region: Region, stats) -> None:
        changed = True
        while changed:
            changed = remove_unreachable_blocks(region, stats)
            for block in list(region.blocks):
                if block.parent is not region:
                    continue  # merged or erased earlier in this sweep
                changed |= self.simplify_block(region, block, stats)

    def simplify_block(self, region: Region, block: Block, stats) -> bool:
        changed = False
        for phi in list(block.phis()):
            if fold_trivial_phi(phi):
                stats.add("phis-folded")
                changed = True
        if fold_same_target_branch(block):
            stats.add("branches-folded")
            changed = True
        if block is not region.entry and merge_into_predecessor(block):
            stats.add("blocks-merged")
            return True
        if block is not region.entry and bypass_forwarding_block(block):
            stats.add("forwarders-removed")
            return True
        if diamond_to_select(block, self.max_arm_ops):
            stats.add("diamonds-to-select")
            changed = True
        return changed


def fold_trivial_phi(phi) -> bool:
    """Replace a phi whose incoming values are one value (besides itself) by that value
    (the phi's own fold says which)."""
    folded = phi.fold([])
    if not folded:
        return False
    phi.results[0].replace_all_uses_with(folded[0])
    phi.erase()
    return True


def fold_same_target_branch(block: Block) -> bool:
    term = block.terminator
    if not isinstance(term, CondBranchOp) or term.successors[0] is not term.successors[1]:
        return False
    _replace_terminator(block, BranchOp.build(term.successors[0]))
    return True


def merge_into_predecessor(block: Block) -> bool:
    """Append ``block`` to its only predecessor when that predecessor branches only to it."""
    preds = block.predecessors
    if len(preds) != 1 or preds[0] is block:
        return False
    pred = preds[0]
    if not isinstance(pred.terminator, BranchOp):
        return False
    for phi in list(block.phis()):
        phi.results[0].replace_all_uses_with(phi.operands[0])
        phi.erase()
    pred.terminator.erase()
    for op in block.ops:
        op.detach()
        pred.append(op)
    block.replace_all_uses_with(pred)  # phis of the successors now name ``pred``
    block.parent.remove(block)
    return True


def bypass_forwarding_block(block: Block) -> bool:
    """Redirect the predecessors of an empty ``cf.br ^s`` block to ``^s``; erase it once unused."""
    term = block.first_op
    if not isinstance(term, BranchOp) or term is not block.last_op:
        return False
    succ = term.successors[0]
    if succ is block:
        return False
    phis = list(succ.phis())
    succ_preds = set(succ.predecessors)
    changed = False
    for pred in block.predecessors:
        if pred in succ_preds and any(phi.value_for(pred) is not phi.value_for(block) for phi in phis):
            continue  # the phis would need two different entries for ``pred``
        if pred not in succ_preds:
            for phi in phis:
                phi.add_incoming(phi.value_for(block), pred)
        pred_term = pred.terminator
        for i, s in enumerate(pred_term.successors):
            if s is block:
                pred_term.set_successor(i, succ)
        succ_preds.add(pred)
        changed = True
    if block.predecessors:
        return changed
    for phi in phis:
        phi.remove_incoming(block)
    block.erase()
    return True


def diamond_to_select(block: Block, max_arm_ops: int) -> bool:
    """``cond_br %c, ^a, ^b`` with small arms meeting at one join -> ops and selects in ``block``."""
    term = block.terminator
    if not isinstance(term, CondBranchOp):
        return False
    true_dest, false_dest = term.successors
    join = _join_of(block, true_dest, false_dest, max_arm_ops)
    if join is None:
        return False
    # The edge into the join from each side: the arm block, or ``block`` itself for a direct edge.
    true_edge = block if true_dest is join else true_dest
    false_edge = block if false_dest is join else false_dest
    for arm in (true_dest, false_dest):
        if arm is not join:
            for op in list(arm.ops)[:-1]:
                op.move_before(term)
    cond = term.operands[0]
    for phi in list(join.phis()):
        a, b = phi.value_for(true_edge), phi.value_for(false_edge)
        value = a
        if a is not b:
            select = SelectOp.build(cond, a, b)
            select.loc = phi.loc
            select.results[0].name_hint = phi.results[0].name_hint
            block.insert_before(select, term)
            value = select.results[0]
        for edge in {true_edge, false_edge}:
            phi.remove_incoming(edge)
        phi.add_incoming(value, block)
    _replace_terminator(block, BranchOp.build(join))
    for arm in (true_dest, false_dest):
        if arm is not join and arm.parent is not None:
            arm.erase()
    return True


def _join_of(block: Block, true_dest: Block, false_dest: Block, max_arm_ops: int) -> Block | None:
    """The join of a diamond or triangle rooted at ``block``, if its arms are small and safe."""
    if true_dest is false_dest:
        return None
    true_join = _arm_target(block, true_dest, max_arm_ops)
    false_join = _arm_target(block, false_dest, max_arm_ops)
    if true_join is not None and true_join is false_join:
        join = true_join  # diamond
    elif true_join is false_dest:
        join = false_dest  # triangle: the false edge goes straight to the join
    elif false_join is true_dest:
        join = true_dest
    else:
        return None
    if join is block:
        return None
    return join


def _arm_target(block: Block, arm: Block, max_arm_ops: int) -> Block | None:
    """Where ``arm`` branches, if it is a small speculatable block reached only from ``block``."""
    if arm is block or arm.predecessors != [block]:
        return None
    term = arm.terminator
    if not isinstance(term, BranchOp) or term.dest is arm:
        return None
    ops = list(arm.ops)[:-1]
    if len(ops) > max_arm_ops or not all(is_speculatable(op) for op in ops):
        return None
    return term.dest


def _replace_terminator(block: Block, new) -> None:
    old = block.terminator
    new.loc = old.loc
    block.insert_before(new, old)
    old.erase()
