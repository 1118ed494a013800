"""canonicalize: fold every op, apply each op's simplification patterns, to a fixpoint.

Folds come from the ops themselves (``fold`` in dialects/): constant folding and
identities such as x + 0, x * 1, x - x, x ^ x, select with equal arms, cmpi of a
value with itself, phis whose incoming values are all one value.  The patterns
here change the IR's shape: constants move to the right of commutative ops,
conditional branches on a constant become plain branches, scf.for loops lose
invariant iter_args and trivial trip counts (loop_rules.py), the CFG is cleaned
between rounds as simplify-cfg does, and the algebraic
rules of algebra.py apply (x * 0, reassociation of constants, x - (x - y),
casts of casts, strength reduction of multiplication and unsigned division by
powers of two; float rules only where exact unless ``fast-math`` is set).  Dead pure ops and
unreachable blocks are removed, and constants are hoisted to the top of their
function and de-duplicated, as MLIR's canonicalizer does.

The rules of MLIR's own arith and scf canonicalisation are here too (issue 15; on scalars and,
with splat constants, on tensors), each exact for every input: integers wrap, i1 is its own
type, signed and unsigned orders are kept apart, NaN and the sign of zero are respected:

* comparisons: the constant moves right (``cmpi slt, c, x`` -> ``cmpi sgt, x, c``); an i1
  compared with true (``eq``) or false (``ne``) is itself; extensions compare narrow
  (``cmpi p, ext a, ext b`` -> ``cmpi p, a, b``, and against a constant that fits the narrow
  type, or a constant result when it lies beyond every extended value); ``not (cmpi p)`` is
  ``cmpi !p``; ``cmpf`` against a NaN constant is false (ordered) or true (unordered); ``cmpf``
  of an exactly converted integer (``uitofp``/``sitofp``) against a constant is a ``cmpi``;
* select: ``select (not c), a, b`` -> ``select c, b, a``; ``select (a == b), a, b`` -> ``b``
  (``!=``: ``a``); a nested select on the same condition takes its arm; ``select c, 1, 0`` ->
  ``extui c``, ``select c, 0, 1`` -> ``extui (not c)``, on i1 ``select c, false, true`` -> ``not c``;
* integers: ``(a - b) + b`` -> ``a``; ``a + x * -1`` -> ``a - x``; ``(c1 - x) + c2``,
  ``c2 - (x + c1)`` and ``c2 - (c1 - x)`` combine their constants; ``x & ~x`` -> 0, ``x | ~x``
  -> -1, ``(a ^ b) ^ b`` -> ``a``, ``a & (a & b)`` -> ``a & b`` (and ``|``); and/or/xor of two
  like extensions is the extension of the narrow op; ``maxsi``/``minsi`` against the type's
  extremes; ``x rem 1`` -> 0;
* casts: ``extsi (extui x)`` -> ``extui x``; ``index_cast (extsi x)`` and ``index_castui (extui
  x)`` drop the extension; ``trunci (ext x)`` is one cast; ``truncf (extf x)`` narrower than x
  is ``truncf x``; ``truncf (sitofp x)`` is one ``sitofp`` when the wide float holds x exactly;
  ``bitcast`` to the same type and ``bitcast (bitcast x)`` fold;
* floats: ``(-x) * (-y)`` and ``(-x) / (-y)`` lose both negations; ``minimumf x, +inf``,
  ``maximumf x, -inf``, ``minnumf x, NaN`` and ``maxnumf x, NaN`` are x;
* scf.if: one whose arms only yield values from outside is one ``arith.select`` per result;
  unused results are dropped.

* flags: ``divui (muli a, b overflow<nuw>), a`` -> b and ``divsi`` with ``nsw`` (an overflow
  despite the flag is an error in irc, so the product is exact); ``extf (truncf x)`` -> x
  when both carry ``fastmath<contract>`` (or ``fast``); the ``*_extended`` ops by 0 (and
  ``mului_extended`` by 1).

``benchmarks/canonicalize_vs_mlir.py`` measures irc against ``mlir-opt-22 --canonicalize`` on
upstream's own tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.passmanager import Pass
from irc.patterns import GreedyDriver, RewritePattern, constant_value

from .algebra import EXACT_PATTERNS, FAST_MATH_PATTERNS
from .loop_rules import PATTERNS as LOOP_PATTERNS


class MoveConstantRight(RewritePattern):
    """``op(c, x)`` -> ``op(x, c)`` for commutative ops, so folds need only look right."""

    op_name = None

    def match_and_rewrite(self, op, rewriter) -> bool:
        if not op.is_commutative or len(op.operands) != 2:
            return False
        a, b = op.operands
        if constant_value(a) is None or constant_value(b) is not None:
            return False
        op.set_operands([b, a])
        rewriter.modified(op)
        return True


class FoldConstantCondBranch(RewritePattern):
    """``cf.cond_br %true, ^a, ^b`` -> ``cf.br ^a`` (and ^b's phis forget this edge)."""

    op_name = "cf.cond_br"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.cf import BranchOp

        cond = constant_value(op.operands[0])
        true_dest, false_dest = op.successors
        if cond is None and true_dest is not false_dest:
            return False
        taken = true_dest if cond is None or cond.value & 1 else false_dest
        dropped = false_dest if taken is true_dest else true_dest
        block = op.parent
        if dropped is not taken:
            for phi in list(dropped.phis()):
                phi.remove_incoming(block)
                rewriter.modified(phi)
        rewriter.before_op(op).insert(BranchOp.build(taken)).loc = op.loc
        rewriter.erase_op(op)
        return True


class EraseTrueAssert(RewritePattern):
    """``cf.assert %true, "..."`` checks nothing."""

    op_name = "cf.assert"

    def match_and_rewrite(self, op, rewriter) -> bool:
        cond = constant_value(op.operands[0])
        if cond is None or not cond.value & 1:
            return False
        rewriter.erase_op(op)
        return True


PATTERNS = [MoveConstantRight(), FoldConstantCondBranch(), EraseTrueAssert(), *EXACT_PATTERNS, *LOOP_PATTERNS]


def simplify_regions(module, stats) -> bool:
    """MLIR's region simplification, between rounds of folding: erase unreachable
    blocks, merge and bypass blocks, fold trivial phis, turn small diamonds into selects
    (the rewrites of simplify-cfg).  Returns whether anything changed."""
    from .simplify_cfg import SimplifyCFG

    before = sum(stats.counters.values())
    SimplifyCFG().run(module, stats)
    return sum(stats.counters.values()) != before


def op_patterns() -> list:
    """Patterns that registered op classes declare with ``canonicalization_patterns()``."""
    from irc import registry

    out = []
    for cls in registry.OPS.values():
        out.extend(cls.canonicalization_patterns())
    return out


@dataclass
class Canonicalize(Pass):
    """Fold constants and simplify ops with local patterns until nothing changes."""

    name = "canonicalize"
    max_iterations: int = 10
    fast_math: bool = False  # also apply float rules that are not exact under IEEE (x + 0.0 -> x, ...)

    def run(self, module, stats) -> None:
        patterns = PATTERNS + op_patterns() + (FAST_MATH_PATTERNS if self.fast_math else [])
        for _ in range(self.max_iterations):
            # CFG cleanup first: unreachable blocks may hold ops that use their own
            # results, which the patterns must never see.
            simplify_regions(module, stats)
            # simplify_regions runs to its own fixpoint, so when the patterns change nothing
            # after it the module is canonical: another round would only walk it again.
            if not GreedyDriver(patterns, fold=True, stats=stats).run(module):
                break
