"""Canonicalization patterns for ``scf.for`` and ``scf.if`` (used by ``canonicalize``; registers no pass).

* ``FoldInvariantIterArgs``: an iter_arg that the body yields back unchanged, or
  that is yielded its own initial value, holds its initial value throughout; it
  is replaced by that value and dropped from the loop.
* ``SimplifyTrivialLoop``: with constant bounds, a loop that runs zero times is
  its initial values, one that runs once is its body inlined, and one whose body
  only yields values from outside (and runs at least once) is those values.

* ``IfToSelect``: an ``scf.if`` whose arms only yield values defined outside it
  is one ``arith.select`` per result (MLIR's rule).
* ``DropUnusedIfResults``: results of an ``scf.if`` nothing uses leave it and its yields.

A loop or if left with no results and a body free of side effects is then dead, and
the greedy driver erases it.
"""

from __future__ import annotations

from irc.patterns import RewritePattern

from .algebra import int_const


def _drop_iter_args(op, drop: set[int], rewriter):
    """Rebuild ``op`` without the iter_args (and results) whose indices are in ``drop``."""
    from irc.dialects.scf import ForOp

    keep = [k for k in range(len(op.results)) if k not in drop]
    body = op.regions[0].entry
    yield_op = body.terminator
    new_yield_values = [yield_op.operands[k] for k in keep]
    yield_op.set_operands(new_yield_values)
    for k in sorted(drop, reverse=True):
        body.erase_argument(k + 1)
    region = op.regions[0]
    op.regions = []
    operands = list(op.operands[:3]) + [op.operands[3 + k] for k in keep]
    new = ForOp(operands, [op.results[k].type for k in keep], dict(op.attributes), regions=[region], loc=op.loc,
                result_names=[op.results[k].name_hint for k in keep])
    rewriter.before_op(op).insert(new)
    for i, k in enumerate(keep):
        rewriter.replace_all_uses_with(op.results[k], new.results[i])
    rewriter.erase_op(op)
    return new


class FoldInvariantIterArgs(RewritePattern):
    op_name = "scf.for"

    def match_and_rewrite(self, op, rewriter) -> bool:
        body = op.regions[0].entry
        yield_op = body.terminator
        if yield_op is None or yield_op.name != "scf.yield":
            return False
        drop = set()
        for k, (arg, init, yielded) in enumerate(zip(body.args[1:], op.operands[3:], yield_op.operands)):
            if yielded is arg or yielded is init:
                rewriter.replace_all_uses_with(arg, init)
                rewriter.replace_all_uses_with(op.results[k], init)
                drop.add(k)
        if not drop:
            return False
        _drop_iter_args(op, drop, rewriter)
        return True


class SimplifyTrivialLoop(RewritePattern):
    op_name = "scf.for"

    def match_and_rewrite(self, op, rewriter) -> bool:
        lb, ub, step = (int_const(v) for v in op.operands[:3])
        if lb is None or ub is None or step is None or step <= 0:
            return False
        trips = max(0, -(-(ub - lb) // step))
        body = op.regions[0].entry
        inits = list(op.operands[3:])
        if trips == 0:
            rewriter.replace_op(op, inits)
            return True
        yield_op = body.terminator
        if trips == 1:
            rewriter.replace_all_uses_with(body.args[0], op.operands[0])
            for arg, init in zip(body.args[1:], inits):
                rewriter.replace_all_uses_with(arg, init)
            results = list(yield_op.operands)
            for nested in list(body.ops):
                if nested is yield_op:
                    break
                nested.detach()
                rewriter.before_op(op).insert(nested)
            rewriter.replace_op(op, results)
            return True
        if body.first_op is yield_op and all(v.parent_block is not body for v in yield_op.operands):
            rewriter.replace_op(op, list(yield_op.operands))
            return True
        return False


PATTERNS = [FoldInvariantIterArgs(), SimplifyTrivialLoop()]


def _rebuild_if(op, keep: list[int], rewriter):
    """``op`` (an scf.if) without the results not in ``keep``; the regions move to the new op."""
    from irc.dialects.scf import IfOp

    for region in op.regions:
        term = region.entry.terminator
        term.set_operands([term.operands[k] for k in keep])
    regions = op.regions
    op.regions = []
    new = IfOp([op.operands[0]], [op.results[k].type for k in keep], dict(op.attributes), regions=regions,
               loc=op.loc, result_names=[op.results[k].name_hint for k in keep])
    rewriter.before_op(op).insert(new)
    for i, k in enumerate(keep):
        rewriter.replace_all_uses_with(op.results[k], new.results[i])
    rewriter.erase_op(op)
    return new


class IfToSelect(RewritePattern):
    """An scf.if whose arms only yield values defined outside it is one ``arith.select`` per
    result (none where both arms yield the same value), as MLIR's canonicalizer does."""

    op_name = "scf.if"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.arith import SelectOp

        if not op.results or any(r.entry is None or r.entry.first_op is not r.entry.terminator
                                 for r in op.regions):
            return False
        then_values = op.regions[0].entry.terminator.operands
        else_values = op.regions[1].entry.terminator.operands
        cond = op.operands[0]
        results = []
        for a, b in zip(then_values, else_values):
            if a is b:
                results.append(a)
                continue
            select = SelectOp.build(cond, a, b)
            select.loc = op.loc
            rewriter.before_op(op).insert(select)
            results.append(select.results[0])
        rewriter.replace_op(op, results)
        return True


class DropUnusedIfResults(RewritePattern):
    """Results of an scf.if that nothing uses are dropped from it and from its yields."""

    op_name = "scf.if"

    def match_and_rewrite(self, op, rewriter) -> bool:
        keep = [k for k, r in enumerate(op.results) if r.first_use is not None]
        if len(keep) == len(op.results) or any(r.entry is None for r in op.regions):
            return False
        _rebuild_if(op, keep, rewriter)
        return True


PATTERNS += [IfToSelect(), DropUnusedIfResults()]
