"""sccp: sparse conditional constant propagation (Wegman and Zadeck).

Folding op by op (canonicalize) cannot see that a loop's phi stays constant,
or that a value is constant once an edge that never runs is ignored: both need
the optimistic assumption that a value is constant until proven otherwise.
SCCP makes it, and proves or refutes it for the whole function at once.

Each SSA value has a lattice value: *unknown* (no evidence yet: absent from the
table), a constant attribute, or *overdefined*; values only move down.  Each CFG
edge is executable or not; only the function's entry starts executable.  Two
worklists drive the analysis to a fixpoint:

* a block becoming executable has all its ops evaluated;
* a value whose lattice value drops has its users (in executable blocks)
  evaluated again.

An op's value comes from its own ``fold`` applied to its operands' constants
(a folded ``Value`` means "whatever that value is"), so SCCP knows every fold
canonicalize knows.  A phi meets only the values flowing in along executable
edges, and ``cf.cond_br`` on a constant makes only one edge executable.
Results of ops with side effects and region arguments are overdefined, except
that the structured ops are followed precisely: ``scf.if`` on a constant runs
one region and its results are what that region yields; the iter_args and
results of ``scf.for`` and ``scf.while`` are the meet of the initial and the
yielded values.  Any other op with regions has its regions analysed with
overdefined arguments and overdefined results.

Afterwards every value proven constant is replaced by an ``arith.constant`` at
the top of its function's entry block (ops whose results all became constants
are erased when nothing else needs them, ``scf.if`` included), branches on constants become ``cf.br`` (the dropped edge's phi
entries go), and blocks that became unreachable are removed.  Statistics:
``constants-found``, ``branches-folded``, ``blocks-erased``, ``ops-erased``.
"""

from __future__ import annotations

import numpy as np

from irc.attributes import Attribute, IntegerAttr
from irc.block import Block, Region
from irc.operation import ConstantLike, IsolatedFromAbove, Operation
from irc.passmanager import Pass
from irc.patterns import is_removable, materialize_constant
from irc.values import OpResult, Value

from .cfg_utils import remove_unreachable_blocks_everywhere


class _Overdefined:
    """The bottom of the lattice: more than one value is possible at run time."""

    def __repr__(self) -> str:
        return "overdefined"


OVERDEFINED = _Overdefined()


def meet(a, b):
    """The lattice meet; None is *unknown* (the top), the identity of meet."""
    if a is None:
        return b
    if b is None or a is b:
        return a
    if a is OVERDEFINED or b is OVERDEFINED or a != b:
        return OVERDEFINED
    return a


class SCCP(Pass):
    """Propagate constants through phis and branches, folding branches and removing dead blocks."""

    name = "sccp"

    def run(self, module, stats) -> None:
        for op in list(module.body.ops):
            if op.regions and op.has_trait(IsolatedFromAbove):
                solver = Solver()
                solver.solve(op)
                Rewriter(solver, stats).rewrite(op)


# -- the analysis --------------------------------------------------------------------------------


class Solver:
    """Lattice values of SSA values and the executable blocks and edges of one isolated op."""

    def __init__(self):
        self.lattice: dict[Value, Attribute | _Overdefined] = {}
        self.executable: set[Block] = set()
        self.edges: set[tuple[Block, Block]] = set()
        self.block_work: list[Block] = []
        self.value_work: list[Value] = []
        # Ops whose fold answered with a value that is not one of their operands.
        self.watchers: dict[Value, list[Operation]] = {}

    # -- driving ---------------------------------------------------------------------------------

    def solve(self, root: Operation) -> None:
        self.enter_regions(root, root.regions)
        self.run_worklists()
        # Unknown values in executable code mean an op waited forever; nothing should, but if
        # one did, optimism there would be unsound: give up on those values and go on.
        while self.settle_unknowns(root):
            self.run_worklists()

    def run_worklists(self) -> None:
        while self.block_work or self.value_work:
            while self.value_work:
                value = self.value_work.pop()
                for use in value.uses:
                    self.visit_if_executable(use.owner)
                for op in self.watchers.get(value, ()):
                    self.visit_if_executable(op)
            if self.block_work:
                for op in self.block_work.pop().ops:
                    self.visit(op)

    def visit_if_executable(self, op: Operation) -> None:
        if op.parent in self.executable:
            self.visit(op)

    def settle_unknowns(self, root: Operation) -> bool:
        found = False
        for region in root.regions:
            for block in region.blocks:
                if block not in self.executable:
                    continue
                for op in block.ops:
                    values = list(op.results)
                    for nested in op.regions:
                        if nested.entry is not None and nested.entry in self.executable:
                            values += nested.entry.args
                    for v in values:
                        if v not in self.lattice:
                            self.set(v, OVERDEFINED)
                            found = True
                    found |= self.settle_unknowns(op)
        return found

    # -- lattice and CFG updates ---------------------------------------------------------------------

    def get(self, value: Value):
        return self.lattice.get(value)

    def set(self, value: Value, new) -> None:
        if new is None:
            return
        old = self.lattice.get(value)
        merged = meet(old, new)
        if merged is old:
            return  # no news (equal constants meet to the old one)
        self.lattice[value] = merged
        self.value_work.append(value)

    def mark_edge(self, source: Block, dest: Block) -> None:
        edge = (source, dest)
        if edge in self.edges:
            return
        self.edges.add(edge)
        if dest not in self.executable:
            self.mark_block(dest)
            return
        for phi in dest.phis():  # a new way in: the phis meet one more value
            self.visit_phi(phi)

    def mark_block(self, block: Block) -> None:
        if block not in self.executable:
            self.executable.add(block)
            self.block_work.append(block)

    def enter_regions(self, op: Operation, regions, overdefined_args: bool = True) -> None:
        for region in regions:
            entry = region.entry
            if entry is None:
                continue
            if overdefined_args:
                for arg in entry.args:
                    self.set(arg, OVERDEFINED)
            self.mark_block(entry)

    # -- transfer functions ----------------------------------------------------------------------------

    def visit(self, op: Operation) -> None:
        if op.name == "cf.phi":
            self.visit_phi(op)
        elif op.regions:
            self.visit_region_op(op)
        elif op.is_terminator:
            self.visit_terminator(op)
        else:
            self.visit_simple(op)

    def visit_phi(self, phi: Operation) -> None:
        block = phi.parent
        value = None
        for incoming, pred in zip(phi.operands, phi.successors):
            if (pred, block) in self.edges:
                value = meet(value, self.get(incoming))
        self.set(phi.results[0], value)

    def visit_terminator(self, op: Operation) -> None:
        block = op.parent
        if op.name == "cf.cond_br":
            cond = self.get(op.operands[0])
            if cond is None:
                return
            if isinstance(cond, IntegerAttr):
                self.mark_edge(block, op.successors[0 if cond.value & 1 else 1])
                return
            for succ in op.successors:
                self.mark_edge(block, succ)
            return
        for succ in op.successors:
            self.mark_edge(block, succ)
        parent = op.parent_op
        if parent is not None and parent.name.startswith("scf."):
            self.visit_region_op(parent)  # a yield or condition feeds its loop or if

    def visit_simple(self, op: Operation) -> None:
        results = op.results
        if not results:
            return
        if not op.is_pure or not op.is_registered():
            self.set_all(results, OVERDEFINED)
            return
        if op.has_trait(ConstantLike):
            attr = op.attributes.get("value")
            ok = isinstance(attr, Attribute) and len(results) == 1 and attr.type is results[0].type
            self.set(results[0], attr if ok else OVERDEFINED)
            return
        constants = []
        for v in op.operands:
            state = self.get(v)
            if state is None:
                return  # wait until every operand is known
            constants.append(None if state is OVERDEFINED else state)
        try:
            with np.errstate(all="ignore"):  # the program would compute inf and NaN too
                folded = op.fold(constants)
        except (ArithmeticError, ValueError, TypeError):
            folded = None
        if not folded or len(folded) != len(results):
            self.set_all(results, OVERDEFINED)
            return
        for result, f in zip(results, folded):
            self.set(result, self.folded_state(op, result, f))

    def folded_state(self, op: Operation, result: Value, folded):
        if isinstance(folded, Value):
            if folded is result:
                return OVERDEFINED
            if not any(folded is v for v in op.operands):
                watchers = self.watchers.setdefault(folded, [])
                if op not in watchers:
                    watchers.append(op)
            return self.get(folded)
        if isinstance(folded, Attribute) and getattr(folded, "type", None) is result.type:
            return folded
        return OVERDEFINED

    def set_all(self, values, state) -> None:
        for v in values:
            self.set(v, state)

    # -- structured control flow ------------------------------------------------------------------------

    def visit_region_op(self, op: Operation) -> None:
        name = op.name
        if name == "scf.if":
            self.visit_if(op)
        elif name == "scf.for":
            self.visit_for(op)
        elif name == "scf.while":
            self.visit_while(op)
        else:
            self.enter_regions(op, op.regions)
            self.set_all(op.results, OVERDEFINED)

    def visit_if(self, op: Operation) -> None:
        cond = self.get(op.operands[0])
        if cond is None:
            return
        if isinstance(cond, IntegerAttr):
            taken = [op.regions[0 if cond.value & 1 else 1]]
        else:
            taken = list(op.regions)
        self.enter_regions(op, taken)
        yields = [self.yielded(region) for region in taken]
        for i, result in enumerate(op.results):
            value = None
            for values in yields:
                if values is not None:
                    value = meet(value, self.get(values[i]))
            self.set(result, value)

    def visit_for(self, op: Operation) -> None:
        body = op.regions[0].entry
        self.set(body.args[0], OVERDEFINED)  # the induction variable
        self.enter_regions(op, op.regions, overdefined_args=False)
        yielded = self.yielded(op.regions[0])
        for i, init in enumerate(op.operands[3:]):
            value = self.get(init)
            if yielded is not None:
                value = meet(value, self.get(yielded[i]))
            self.set(body.args[1 + i], value)
            self.set(op.results[i], value)

    def visit_while(self, op: Operation) -> None:
        before, after = op.regions
        self.enter_regions(op, op.regions, overdefined_args=False)
        yielded = self.yielded(after)
        for i, init in enumerate(op.operands):
            value = self.get(init)
            if yielded is not None:
                value = meet(value, self.get(yielded[i]))
            self.set(before.entry.args[i], value)
        forwarded = self.yielded(before)
        if forwarded is None:
            return
        for i, v in enumerate(forwarded[1:]):
            self.set(after.entry.args[i], self.get(v))
            self.set(op.results[i], self.get(v))

    def yielded(self, region: Region) -> list[Value] | None:
        """The operands of the terminator ending a single-block region, once that block runs."""
        block = region.entry
        if block is None or block not in self.executable:
            return None
        term = block.terminator
        return list(term.operands) if term is not None else None


# -- the transformation ---------------------------------------------------------------------------------


class ConstantPool:
    """The constants at the top of one entry block, reused and extended in creation order.

    Replacing ``%w = addi %v, %k`` after ``%v`` materialises a constant for ``%v`` that
    nothing uses once ``%w`` is a constant too; ``discard_unused`` erases such leftovers.
    """

    def __init__(self, entry: Block):
        self.entry = entry
        self.by_key: dict[tuple, Value] = {}
        self.last: Operation | None = None
        self.created: list[Operation] = []
        op = entry.first_op
        while op is not None and op.has_trait(ConstantLike) and len(op.results) == 1:
            attr = op.attributes.get("value")
            if attr is not None:
                self.by_key.setdefault((attr, op.results[0].type), op.results[0])
            self.last = op
            op = op.next

    def get(self, attr: Attribute, loc) -> Value | None:
        key = (attr, attr.type)
        value = self.by_key.get(key)
        if value is not None:
            return value
        op = materialize_constant(attr, loc)
        if op is None or len(op.results) != 1 or op.results[0].type is not attr.type:
            return None
        if self.last is None:
            self.entry.prepend(op)
        else:
            self.entry.insert_after(op, self.last)
        self.last = op
        self.created.append(op)
        value = self.by_key[key] = op.results[0]
        return value

    def discard_unused(self) -> None:
        for op in self.created:
            if not op.results[0].has_uses:
                op.erase()


class Rewriter:
    """Applies what a solver proved to the IR of one isolated op."""

    def __init__(self, solver: Solver, stats):
        self.solver = solver
        self.stats = stats

    def rewrite(self, root: Operation) -> None:
        entry = root.regions[0].entry
        if entry is None:
            return
        # Branches first: a condition that only a folded branch used needs no constant op.
        for block in self.executable_blocks(root):
            term = block.terminator
            if term is not None and term.name == "cf.cond_br":
                self.fold_branch(term)
        pool = ConstantPool(entry)
        self.replace_in_regions(root, pool)
        pool.discard_unused()
        remove_unreachable_blocks_everywhere(root, self.stats)

    def executable_blocks(self, op: Operation):
        for region in op.regions:
            for block in region.blocks:
                if block in self.solver.executable:
                    yield block
                    for nested in block.ops:
                        if nested.regions:
                            yield from self.executable_blocks(nested)

    def replace_in_regions(self, op: Operation, pool: ConstantPool) -> None:
        for region in op.regions:
            for block in region.blocks:
                if block in self.solver.executable:
                    self.replace_in_block(block, pool)

    def replace_in_block(self, block: Block, pool: ConstantPool) -> None:
        for arg in block.args:
            self.replace_if_constant(arg, pool)
        for op in block.ops:
            if op.regions:
                if op.has_trait(IsolatedFromAbove) and op.regions[0].entry is not None:
                    nested_pool = ConstantPool(op.regions[0].entry)
                    self.replace_in_regions(op, nested_pool)
                    nested_pool.discard_unused()
                else:
                    self.replace_in_regions(op, pool)
            if op.has_trait(ConstantLike) or not op.results:
                continue
            replaced = [self.replace_if_constant(r, pool) for r in op.results]
            # As MLIR does: an op all of whose results became constants goes if nothing else needs it.
            if all(replaced) and not op.is_terminator and not any(r.has_uses for r in op.results) \
                    and is_removable(op):
                op.erase()
                self.stats.add("ops-erased")

    def replace_if_constant(self, value: Value, pool: ConstantPool) -> bool:
        """Replace ``value`` by a constant if it is one; whether it is (now) a constant."""
        state = self.solver.get(value)
        if not isinstance(state, Attribute):
            return False
        if not value.has_uses:
            return True
        loc = value.op.loc if isinstance(value, OpResult) else value.block.loc
        constant = pool.get(state, loc)
        if constant is None or constant.type is not value.type:
            return False
        value.replace_all_uses_with(constant)
        self.stats.add("constants-found")
        return True

    def fold_branch(self, op: Operation) -> None:
        from irc.dialects.cf import BranchOp

        cond = self.solver.get(op.operands[0])
        if not isinstance(cond, IntegerAttr):
            return
        block = op.parent
        true_dest, false_dest = op.successors
        taken, dropped = (true_dest, false_dest) if cond.value & 1 else (false_dest, true_dest)
        if dropped is not taken:
            for phi in list(dropped.phis()):
                phi.remove_incoming(block)
        branch = BranchOp.build(taken)
        branch.loc = op.loc
        block.insert_before(branch, op)
        op.erase()
        self.stats.add("branches-folded")
