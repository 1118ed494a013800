"""dce: dead code elimination by marking what is live (so dead cycles of phis go too).

Live roots are the ops with side effects and the terminators of live regions;
an op is live if a live op uses one of its results, contains a live op, or is
the region owner of a live terminator.  Everything else - pure ops, phis,
side-effect-free loops whose results are unused - is erased, after blocks
unreachable from their region's entry are removed.
"""

from __future__ import annotations

from irc.passmanager import Pass
from irc.patterns import is_removable
from irc.values import BlockArgument, OpResult

from .cfg_utils import remove_unreachable_blocks_everywhere


class DCE(Pass):
    """Remove unreachable blocks, unused pure ops and unused phis (cycles included)."""

    name = "dce"

    def run(self, module, stats) -> None:
        remove_unreachable_blocks_everywhere(module, stats)
        for func in list(module.body.ops):
            if func.regions:
                erase_dead_ops(func, stats)


def erase_dead_ops(func, stats=None) -> int:
    live: set = set()
    worklist: list = []

    def mark(op) -> None:
        if op is not None and op is not func and op not in live:
            live.add(op)
            worklist.append(op)

    for op in func.walk():
        if op is func:
            continue
        if op.is_terminator:
            if op.parent_op is func:
                mark(op)
        elif not is_removable(op):
            mark(op)
    while worklist:
        op = worklist.pop()
        for v in op.operands:
            if type(v) is OpResult:
                mark(v.op)
            elif isinstance(v, BlockArgument):
                mark(v.block.parent_op)
        mark(op.parent_op)
        for region in op.regions:
            for block in region.blocks:
                mark(block.terminator)
        # A live op in a block makes the branches that reach that block live.
        block = op.parent
        if block is not None and block.parent is not None:
            for use in block.uses:
                if use.owner.is_terminator:
                    mark(use.owner)
    dead = [op for op in func.walk() if op is not func and op not in live]
    for op in dead:
        op.drop_all_references()
    for op in dead:
        if op.parent is not None:
            op.parent.remove(op)
    if stats is not None and dead:
        stats.add("ops-erased", len(dead))
    return len(dead)
