"""CFG helpers shared by passes: reachability and the removal of unreachable blocks."""

from __future__ import annotations

from irc.block import Region
from irc.dominance import reverse_postorder


def remove_unreachable_blocks(region: Region, stats=None) -> bool:
    """Erase blocks that the entry cannot reach, and their phi entries in reachable blocks."""
    entry = region.entry
    if entry is None or entry is region.last_block:
        return False
    reachable = set(reverse_postorder(entry))
    dead = [b for b in region.blocks if b not in reachable]
    if not dead:
        return False
    dead_set = set(dead)
    for block in dead:
        for succ in block.successors:
            if succ in reachable:
                for phi in list(succ.phis()):
                    phi.remove_incoming(block)
    for block in dead:
        for op in block.ops:
            op.drop_all_references()
    for block in dead:
        # Any remaining use of a value defined here is in another dead block.
        for op in block.ops:
            for r in op.results:
                assert all(u.owner.parent in dead_set or u.owner.parent is None for u in r.uses)
        region.remove(block)
    if stats is not None:
        stats.add("blocks-erased", len(dead))
    return True


def remove_unreachable_blocks_everywhere(op, stats=None) -> bool:
    changed = False
    for nested in list(op.walk()):
        for region in nested.regions:
            changed |= remove_unreachable_blocks(region, stats)
    return changed


def function_regions(module):
    """Every region of every function with a body, the function bodies included (a
    list is taken first, so passes may rewrite while iterating)."""
    for func in module.functions:
        if func.is_declaration:
            continue
        for op in list(func.walk()):
            yield from op.regions
