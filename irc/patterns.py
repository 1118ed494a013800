"""Rewrite patterns and the greedy driver that applies them to a fixpoint.

A pattern matches one op name and changes the IR only through the rewriter::

    class MoveConstantRight(RewritePattern):
        op_name = None                  # any op (checked in match_and_rewrite)
        def match_and_rewrite(self, op, rewriter) -> bool: ...

The driver keeps a worklist of ops.  For each op it (1) erases it if it is
dead, (2) hoists and de-duplicates constants, (3) folds it, and (4) tries the
patterns for its name.  The rewriter's listener puts every op that a change
could affect back on the worklist, so each op is revisited only when something
it depends on changed: the work is linear in the size of the IR times the
number of changes, never a rescan of the whole function per change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np

from . import registry
from .attributes import Attribute
from .block import Block
from .builder import Listener
from .operation import ConstantLike, HasRecursiveEffects, IsolatedFromAbove, Operation
from .rewriter import Rewriter
from .values import OpResult, Value


class RewritePattern:
    """Matches ops named ``op_name`` (or any op when None) and rewrites them."""

    op_name: ClassVar[str | None] = None

    def match_and_rewrite(self, op: Operation, rewriter: Rewriter) -> bool:
        raise NotImplementedError


def is_removable(op: Operation) -> bool:
    """An op that may be deleted when its results are unused (no side effects)."""
    if op.is_pure:
        return True
    if not op.has_trait(HasRecursiveEffects):
        return False
    # One walk with an explicit stack: asking the same question of every nested op
    # (each of which walks its own contents again) is exponential in the nesting depth.
    regions = list(op.regions)
    while regions:
        for block in regions.pop().blocks:
            for nested in block.ops:
                if nested.is_terminator or nested.is_pure:
                    continue
                if not nested.has_trait(HasRecursiveEffects):
                    return False
                regions.extend(nested.regions)
    return True


def is_dead(op: Operation) -> bool:
    for r in op.results:
        if r.first_use is not None:
            return False
    return not op.is_terminator and is_removable(op)


def constant_value(value: Value) -> Attribute | None:
    """The attribute a value is known to equal, if it comes from a constant op."""
    if type(value) is OpResult:
        op = value.op
        if op.has_trait(ConstantLike):
            return op.attributes.get("value")
    return None


def materialize_constant(attr: Attribute, loc) -> Operation | None:
    for cls in registry.MATERIALIZERS:
        op = cls.materialize(attr)
        if op is not None:
            op.loc = loc
            return op
    return None


class _Worklist(Listener):
    def __init__(self, driver: GreedyDriver):
        self.driver = driver

    def op_inserted(self, op: Operation) -> None:
        self.driver.push(op)

    def op_modified(self, op: Operation) -> None:
        self.driver.push(op)

    def op_replaced(self, op: Operation, new_values: Sequence[Value]) -> None:
        for r in op.results:
            for use in r.uses:
                self.driver.push(use.owner)

    def op_erased(self, op: Operation) -> None:
        d = self.driver
        d.in_list.discard(op)
        if op.has_trait(ConstantLike):
            d.forget_constant(op)
            d.hoisted.discard(op)
            for scope, end in list(d.prefix_end.items()):
                if end is op:
                    prev = op.prev
                    if prev is not None and prev in d.hoisted:
                        d.prefix_end[scope] = prev
                    else:
                        del d.prefix_end[scope]
        for v in op.operands:
            if type(v) is OpResult and v.op.parent is not None:
                d.push(v.op)


class GreedyDriver:
    """Applies folds and patterns to every op under ``root`` until nothing changes."""

    def __init__(self, patterns: Iterable[RewritePattern], fold: bool = True, stats=None,
                 max_rewrites: int | None = None):
        self.by_name: dict[str | None, list[RewritePattern]] = {}
        for p in patterns:
            self.by_name.setdefault(p.op_name, []).append(p)
        self.generic = self.by_name.get(None, [])
        self.fold = fold
        self.stats = stats
        self.stack: list[Operation] = []
        self.in_list: set[Operation] = set()
        self.rewriter = Rewriter(_Worklist(self))
        self.constants: dict[tuple, Operation] = {}
        self.constant_keys: dict[Operation, tuple] = {}
        self.max_rewrites = max_rewrites
        self.changed = False
        # The run of constants at the top of each function's entry block.
        self.hoisted: set[Operation] = set()
        self.prefix_end: dict[Block, Operation] = {}

    def push(self, op: Operation) -> None:
        if op not in self.in_list and op.parent is not None:
            self.in_list.add(op)
            self.stack.append(op)

    def count(self, name: str, n: int = 1) -> None:
        self.changed = True
        if self.stats is not None:
            self.stats.add(name, n)

    # -- constants: hoisted to the entry of the enclosing function and de-duplicated ---------

    def scope_block(self, op: Operation) -> Block | None:
        region_owner = op.parent_op
        while region_owner is not None and not region_owner.has_trait(IsolatedFromAbove):
            region_owner = region_owner.parent_op
        if region_owner is None or region_owner.name == "builtin.module" or not region_owner.regions:
            return None
        return region_owner.regions[0].entry

    def forget_constant(self, op: Operation) -> None:
        key = self.constant_keys.pop(op, None)
        if key is not None and self.constants.get(key) is op:
            del self.constants[key]

    def get_constant(self, attr: Attribute, scope: Block, loc) -> Value | None:
        key = (scope, attr, attr.type)
        existing = self.constants.get(key)
        if existing is not None and existing.parent is not None:
            return existing.results[0]
        op = materialize_constant(attr, loc)
        if op is None:
            return None
        self._insert_constant(op, scope)
        self.constants[key] = op
        self.constant_keys[op] = key
        self.count("constants-materialized")
        return op.results[0]

    def _insert_constant(self, op: Operation, scope: Block) -> None:
        """Append ``op`` to the run of constants that opens ``scope`` (kept in creation order)."""
        end = self.prefix_end.get(scope)
        if end is not None and end.parent is scope:
            scope.insert_after(op, end)
        else:
            scope.prepend(op)
        self.prefix_end[scope] = op
        self.hoisted.add(op)

    def visit_constant(self, op: Operation) -> bool:
        """Hoist ``op`` to the entry of its function, or merge it with an equal constant."""
        scope = self.scope_block(op)
        attr = op.attributes.get("value")
        if scope is None or attr is None:
            return False
        key = (scope, attr, attr.type)
        existing = self.constants.get(key)
        if existing is op:
            return False
        if existing is not None and existing.parent is not None:
            self.rewriter.replace_op(op, [existing.results[0]])
            self.count("constants-deduplicated")
            return True
        self.constants[key] = op
        self.constant_keys[op] = key
        if op in self.hoisted:
            return False
        op.detach()
        self._insert_constant(op, scope)
        self.count("constants-hoisted")
        return True

    # -- the loop -------------------------------------------------------------------------------

    def run(self, root: Operation) -> bool:
        ops = [op for op in root.walk() if op is not root]
        for op in ops:
            if op.has_trait(IsolatedFromAbove) and op.regions and op.regions[0].entry is not None:
                entry = op.regions[0].entry
                first = entry.first_op
                while first is not None and first.has_trait(ConstantLike):
                    self.hoisted.add(first)
                    self.prefix_end[entry] = first
                    first = first.next
        for op in reversed(ops):
            self.push(op)
        rewrites = 0
        limit = self.max_rewrites if self.max_rewrites is not None else 10 * len(ops) + 10_000
        while self.stack:
            op = self.stack.pop()
            if op not in self.in_list:
                continue
            self.in_list.discard(op)
            if not self._attached(op, root):
                continue
            if self.process(op):
                rewrites += 1
                if rewrites > limit:
                    raise RuntimeError(f"pattern application did not converge after {limit} rewrites")
        return self.changed

    @staticmethod
    def _attached(op: Operation, root: Operation) -> bool:
        """Whether ``op`` is still in the IR under ``root``.  An op nested in an erased
        op keeps its parent block, so checking ``op.parent`` alone is not enough."""
        while op is not root:
            block = op.parent
            if block is None or block.parent is None or block.parent.parent is None:
                return False
            op = block.parent.parent
        return True

    def process(self, op: Operation) -> bool:
        for v in op.operands:
            if type(v) is OpResult and v.op is op:
                return False  # only in unreachable code; rewriting it need not terminate
        if is_dead(op):
            self.rewriter.erase_op(op)
            self.count("ops-erased")
            return True
        if op.has_trait(ConstantLike):
            return self.visit_constant(op)
        if self.fold and self.try_fold(op):
            return True
        for pattern in self.by_name.get(op.name, ()):
            if pattern.match_and_rewrite(op, self.rewriter):
                self.count("patterns-applied")
                return True
        for pattern in self.generic:
            if pattern.match_and_rewrite(op, self.rewriter):
                self.count("patterns-applied")
                return True
        return False

    def try_fold(self, op: Operation) -> bool:
        if not op.results or not op.is_registered():
            return False
        constants = [constant_value(v) for v in op.operands]
        try:
            with np.errstate(all="ignore"):  # folding computes what the program would: inf and NaN included
                folded = op.fold(constants)
        except (ArithmeticError, ValueError, TypeError):
            return False
        if not folded:
            return False
        scope = None
        replacements: list[Value] = []
        for result, f in zip(op.results, folded):
            if isinstance(f, Value):
                if f is result:
                    return False
                replacements.append(f)
                continue
            if scope is None:
                scope = self.scope_block(op)
                if scope is None:
                    return False
            value = self.get_constant(f, scope, op.loc)
            if value is None or value.type is not result.type:
                return False
            replacements.append(value)
        self.rewriter.replace_op(op, replacements)
        self.count("ops-folded")
        return True


def apply_patterns_greedily(root: Operation, patterns: Iterable[RewritePattern], fold: bool = True,
                            stats=None) -> bool:
    """Fold and rewrite everything under ``root`` to a fixpoint; return whether anything changed."""
    return GreedyDriver(patterns, fold, stats).run(root)
