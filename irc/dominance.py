"""Dominator trees of a region's CFG (Cooper, Harvey and Kennedy's iterative algorithm).

Used by the verifier (SSA dominance, phi availability), CSE (scoped walk over
the tree), mem2reg (dominance frontiers) and LICM.  Blocks unreachable from the
entry have no dominator; by convention every block dominates them, as in MLIR.
"""

from __future__ import annotations

from .block import Block, Region


def reverse_postorder(entry: Block) -> list[Block]:
    """Blocks reachable from ``entry`` in reverse postorder (iterative DFS)."""
    order: list[Block] = []
    visited = {entry}
    stack = [(entry, iter(entry.successors))]
    while stack:
        block, it = stack[-1]
        for succ in it:
            if succ not in visited:
                visited.add(succ)
                stack.append((succ, iter(succ.successors)))
                break
        else:
            stack.pop()
            order.append(block)
    order.reverse()
    return order


class DominatorTree:
    def __init__(self, region: Region):
        self.region = region
        entry = region.entry
        self.rpo = reverse_postorder(entry) if entry is not None else []
        self.order = {b: i for i, b in enumerate(self.rpo)}
        self.idom: dict[Block, Block | None] = {}
        self._compute()
        self._children: dict[Block, list[Block]] | None = None
        self._depth: dict[Block, int] | None = None

    def _compute(self) -> None:
        if not self.rpo:
            return
        order = self.order
        entry = self.rpo[0]
        idom: dict[Block, Block] = {entry: entry}
        preds = {b: [p for p in b.predecessors if p in order] for b in self.rpo}
        changed = True
        while changed:
            changed = False
            for b in self.rpo[1:]:
                new = None
                for p in preds[b]:
                    if p not in idom:
                        continue
                    if new is None:
                        new = p
                        continue
                    a, c = p, new
                    while a is not c:
                        while order[a] > order[c]:
                            a = idom[a]
                        while order[c] > order[a]:
                            c = idom[c]
                    new = a
                if new is not None and idom.get(b) is not new:
                    idom[b] = new
                    changed = True
        idom[entry] = None
        self.idom = idom

    def is_reachable(self, block: Block) -> bool:
        return block in self.order

    def dominates(self, a: Block, b: Block) -> bool:
        """Whether ``a`` dominates ``b`` (reflexive)."""
        if a is b or b not in self.order:
            return True
        if a not in self.order:
            return False
        depth = self.depth
        da, db = depth[a], depth[b]
        idom = self.idom
        while db > da:
            b = idom[b]
            db -= 1
        return a is b

    def properly_dominates(self, a: Block, b: Block) -> bool:
        return a is not b and self.dominates(a, b)

    @property
    def depth(self) -> dict[Block, int]:
        if self._depth is None:
            depth = {}
            for b in self.rpo:  # idom comes before b in RPO
                d = self.idom[b]
                depth[b] = 0 if d is None else depth[d] + 1
            self._depth = depth
        return self._depth

    @property
    def children(self) -> dict[Block, list[Block]]:
        """Dominator-tree children of each reachable block, in RPO order."""
        if self._children is None:
            kids: dict[Block, list[Block]] = {b: [] for b in self.rpo}
            for b in self.rpo:
                d = self.idom[b]
                if d is not None:
                    kids[d].append(b)
            self._children = kids
        return self._children

    def frontiers(self) -> dict[Block, set[Block]]:
        """Dominance frontiers of every reachable block."""
        df: dict[Block, set[Block]] = {b: set() for b in self.rpo}
        for b in self.rpo:
            preds = [p for p in b.predecessors if p in self.order]
            if len(preds) < 2:
                continue
            for p in preds:
                runner = p
                while runner is not None and runner is not self.idom[b]:
                    df[runner].add(b)
                    runner = self.idom[runner]
        return df
