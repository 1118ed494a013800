"""The verifier: structural rules, SSA dominance, phis, regions and symbols.

Checks, for every op in a module:
* the op's own rules (``verify_op``: operand and result types, attributes);
* blocks end in exactly one terminator, which comes last; branches stay in
  their region; only a region's entry block has arguments;
* every operand is defined before its use: earlier in the same block, in a
  dominating block, or in an enclosing region (never across an op that is
  isolated from above, such as a function);
* phis lead their block, list exactly one incoming value per predecessor, and
  each incoming value is available at the end of that predecessor;
* symbols: function names are unique; func.call targets exist with the same
  signature.

Uses in blocks unreachable from the entry are exempt from dominance, as in
MLIR.  Every problem found is reported, in source order, up to
``diagnostics.MAX_ERRORS`` (one ``IRError``, or an ``IRErrors`` holding them all);
a region whose blocks are malformed skips the dominance checks, which assume
well-formed blocks.
"""

from __future__ import annotations

from .block import Block, Region
from .diagnostics import MAX_ERRORS, IRError, raise_collected
from .dominance import DominatorTree
from .gcpause import paused_gc
from .operation import IsolatedFromAbove, Operation
from .values import BlockArgument, OpResult


class _TooManyErrors(Exception):
    """Raised by ``Verifier.report`` past the limit: stop verifying."""


class Verifier:
    def __init__(self):
        self.domtrees: dict[Region, DominatorTree] = {}
        self.positions: dict[Block, dict[Operation, int]] = {}
        self.errors: list[IRError] = []
        self.calls: list[Operation] = []  # the func.call ops seen, for the symbol checks

    def report(self, error: IRError) -> None:
        self.errors.append(error)
        if len(self.errors) >= MAX_ERRORS:
            raise _TooManyErrors

    def domtree(self, region: Region) -> DominatorTree:
        tree = self.domtrees.get(region)
        if tree is None:
            tree = self.domtrees[region] = DominatorTree(region)
        return tree

    def position(self, op: Operation) -> int:
        block = op.parent
        table = self.positions.get(block)
        if table is None:
            table = self.positions[block] = {o: i for i, o in enumerate(block.ops)}
        return table[op]

    # -- ops -----------------------------------------------------------------------------

    def verify_op(self, op: Operation) -> None:
        if op.name == "func.call":
            self.calls.append(op)
        if op.is_registered():
            try:
                op.verify_op()
            except IRError as e:
                self.report(e)
            except Exception as e:  # a malformed op must not crash the verifier
                self.report(op.error(f"is malformed ({type(e).__name__}: {e})"))
        for region in op.regions:
            self.verify_region(region, op)

    def verify_region(self, region: Region, owner: Operation) -> None:
        needs_terminator = owner.name != "builtin.module" and owner.is_registered()
        for block in region.blocks:
            if block is not region.first_block and block.args:
                self.report(IRError(f"block '^{block.label}' has arguments, but only the entry block of a "
                                    "region may; merge values with cf.phi", block.loc))
            self.verify_block(block, needs_terminator)
        if any(self._block_malformed(b, needs_terminator) for b in region.blocks):
            return  # reported above; dominance needs well-formed blocks
        reachable = self.domtree(region)
        for block in region.blocks:
            self.verify_dominance(block, reachable.is_reachable(block))

    @staticmethod
    def _block_malformed(block: Block, needs_terminator: bool) -> bool:
        last = block.last_op
        if needs_terminator and (last is None or not last.is_terminator and last.is_registered()):
            return True
        region = block.parent
        op = block.first_op  # the linked list directly: this runs once per op of the module
        while op is not None:
            if op.is_terminator and op is not last:
                return True
            for s in op.successors:
                if s.parent is not region:
                    return True
            op = op.next
        return False

    def verify_block(self, block: Block, needs_terminator: bool) -> None:
        try:
            self._verify_block_shape(block, needs_terminator)
        except IRError as e:
            self.report(e)
        leading_phis = True
        for op in block.ops:
            if leading_phis or op.successors or op.is_terminator or op.name == "cf.phi":
                try:
                    leading_phis = self._verify_placement(op, block, leading_phis)
                except IRError as e:
                    self.report(e)
            # else: an ordinary op after the phis, which _verify_placement has nothing to say about
            self.verify_op(op)

    def _verify_block_shape(self, block: Block, needs_terminator: bool) -> None:
        last = block.last_op
        if needs_terminator:
            if last is None:
                what = f"block '^{block.label}'" if block.label else "block"
                raise IRError(f"{what} is empty: it needs a terminator", block.loc if block.loc.line else
                              block.parent.parent.loc)
            if not last.is_terminator and last.is_registered():
                raise last.error("is not a terminator, but ends its block; add a terminator such as "
                                 "'cf.br', 'func.return' or 'scf.yield'")

    @staticmethod
    def _verify_placement(op: Operation, block: Block, leading_phis: bool) -> bool:
        """An op's place in its block and its successors; returns whether phis may still follow."""
        if op.is_terminator and op is not block.last_op:
            raise op.error("is a terminator, so it must be the last op in its block")
        if op.name == "cf.phi":
            if not leading_phis:
                raise op.error("must come before every other op in its block (phis lead their block)")
        else:
            leading_phis = False
        for succ in op.successors:
            if succ.parent is not block.parent:
                raise op.error(f"refers to block '^{succ.label}' of another region")
            if succ is succ.parent.first_block and op.is_terminator:
                raise op.error(f"branches to '^{succ.label}', the entry block of its region, which "
                               "can have no predecessors; branch to a new block instead")
        return leading_phis

    # -- SSA dominance ---------------------------------------------------------------------

    def verify_dominance(self, block: Block, reachable: bool) -> None:
        seen: set[Operation] = set()
        op = block.first_op  # verification does not edit the block: walk its list directly
        while op is not None:
            try:
                if op.name == "cf.phi":
                    self.verify_phi(op, block)
                elif reachable:
                    for value in op.operands:
                        # Most operands are defined earlier in the same block: answered here.
                        kind = type(value)
                        if kind is OpResult:
                            if value.op.parent is block and value.op in seen:
                                continue
                        elif kind is BlockArgument and value.block is block:
                            continue
                        self.check_available(value, op, block, seen)
            except IRError as e:
                self.report(e)
            seen.add(op)
            op = op.next

    def check_available(self, value, user: Operation, block: Block, seen: set) -> None:
        if isinstance(value, OpResult):
            d = value.op
            dblock = d.parent
            if dblock is None:
                raise user.error(f"uses a value defined by an erased '{d.name}' op")
            if dblock is block:
                if d not in seen:
                    raise user.error(f"uses '%{value.name_hint or '?'}' before its definition").note(
                        d.loc, "defined here")
                return
        elif isinstance(value, BlockArgument):
            dblock = value.block
            if dblock is block:
                return
        else:
            raise user.error("uses a value that was never defined")
        self.check_dominates(value, dblock, user, block)

    def check_dominates(self, value, dblock: Block, user: Operation, block: Block) -> None:
        """Whether ``value`` (defined in ``dblock``) is visible at ``user`` in ``block``."""
        region = dblock.parent
        op, b = user, block
        while b.parent is not region:
            owner = b.parent.parent if b.parent is not None else None
            if owner is None or owner.parent is None:
                raise user.error(f"uses '%{value.name_hint or '?'}', which is not defined in an enclosing scope")
            if owner.has_trait(IsolatedFromAbove):
                raise user.error(f"uses '%{value.name_hint or '?'}' from outside '{owner.name}', which is "
                                 "isolated from above")
            op, b = owner, owner.parent
        if b is dblock:
            if isinstance(value, OpResult) and self.position(value.op) >= self.position(op):
                raise user.error(f"uses '%{value.name_hint or '?'}' before its definition").note(
                    value.op.loc, "defined here")
            return
        tree = self.domtree(region)
        if not tree.dominates(dblock, b):
            err = user.error(f"uses '%{value.name_hint or '?'}', whose definition does not dominate this use")
            if isinstance(value, OpResult):
                err.note(value.op.loc, "defined here")
            raise err

    def verify_phi(self, phi: Operation, block: Block) -> None:
        preds = block.predecessors
        if block is block.parent.first_block:
            raise phi.error("cannot be in the entry block of a region (it has no predecessors)")
        incoming = phi.successors
        seen_blocks: set[Block] = set()
        for b in incoming:
            if b in seen_blocks:
                raise phi.error(f"lists predecessor '^{b.label}' more than once")
            seen_blocks.add(b)
        pred_set = set(preds)
        for b in incoming:
            if b not in pred_set:
                raise phi.error(f"lists '^{b.label}', which is not a predecessor of its block")
        for p in preds:
            if p not in seen_blocks:
                raise phi.error(f"has no incoming value for predecessor '^{p.label}'").note(
                    p.terminator.loc if p.terminator is not None else p.loc, "the branch from it is here")
        tree = self.domtree(block.parent)
        for value, pred in zip(phi.operands, incoming):
            if not tree.is_reachable(pred):
                continue
            self.check_available_at_end(value, phi, pred)

    def check_available_at_end(self, value, phi: Operation, pred: Block) -> None:
        if isinstance(value, OpResult):
            d = value.op
            if d.parent is None:
                raise phi.error(f"uses a value defined by an erased '{d.name}' op")
            dblock = d.parent
        elif isinstance(value, BlockArgument):
            dblock = value.block
        else:
            raise phi.error("uses a value that was never defined")
        if dblock is pred:
            return
        region = pred.parent
        if dblock.parent is not region:
            # Defined in an enclosing region: visible if it dominates the owner of this region.
            term = pred.terminator or pred.last_op
            self.check_dominates(value, dblock, phi if term is None else term, pred)
            return
        if not self.domtree(region).dominates(dblock, pred):
            err = phi.error(f"incoming value '%{value.name_hint or '?'}' from '^{pred.label}' is not available "
                            f"at the end of '^{pred.label}'")
            if isinstance(value, OpResult):
                err.note(value.op.loc, "defined here")
            raise err


def verify_symbols(module, report=None, calls=None) -> None:
    """Symbol rules; each problem goes to ``report`` (default: raise the first).
    ``calls``: the module's func.call ops, when the caller has them (else found by a walk)."""
    from .attributes import StringAttr

    if report is None:
        def report(error):
            raise error

    table: dict[str, Operation] = {}
    for op in module.body.ops:
        sym = op.attributes.get("sym_name")
        if isinstance(sym, StringAttr):
            prev = table.get(sym.value)
            if prev is not None:
                report(op.error(f"redefines symbol '@{sym.value}'").note(prev.loc, "previous definition here"))
                continue
            table[sym.value] = op
    for op in module.walk() if calls is None else calls:
        if op.name != "func.call":
            continue
        target = table.get(op.callee)
        if target is None or target.name != "func.func":
            report(op.error(f"calls '@{op.callee}', which is not a function in this module"))
            continue
        ft = target.function_type
        if list(ft.inputs) != op.operand_types or list(ft.results) != op.result_types:
            from .types import FunctionType

            report(op.error(f"calls '@{op.callee}' as {FunctionType(op.operand_types, op.result_types)}, "
                            f"but it has type {ft}").note(target.loc, "the function is defined here"))


def verify(module) -> None:
    """Verify a module; raise ``IRError`` at the problem, or ``IRErrors`` with every problem
    in source order (at most ``diagnostics.MAX_ERRORS``).

    Regions nested deeper than ``nesting.MAX_REGION_DEPTH`` are the first problem
    looked for (by a walk that works at any depth), so the recursive checks below,
    and every walk after a successful verify, stay within the stack that
    ``deep_stack`` provides.
    """
    from .checks import check_module
    from .nesting import check_depth, deep_stack

    check_module("irc.verify", "module", module)
    check_depth(module)
    with paused_gc(), deep_stack():
        v = Verifier()
        truncated = False
        try:
            v.verify_op(module)
            if not v.errors:  # symbol checks read ops' attributes, which must be well-formed
                verify_symbols(module, v.report, v.calls)
        except _TooManyErrors:
            truncated = True
        raise_collected(v.errors, truncated)
