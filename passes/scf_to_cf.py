"""scf-to-cf: lower scf.for, scf.if, scf.while and scf.execute_region to blocks, branches and
phis (scf.parallel first becomes a nest of scf.for, its iterations in order).

After this pass a function is one CFG, which is the only control-flow form the
backends translate.  Each structured op splits its block in two at the op; the
op's regions are moved in between, entry-block arguments become phis (or the
values that flow in directly), ``scf.yield``/``scf.condition`` become branches,
and the op's results become phis in the continuation block::

    %r = scf.for %i = %lb to %ub step %s iter_args(%a = %init) -> (i64) {...}

becomes ``^head: %i = cf.phi [%lb, ^pre], [%i.next, ^latch]`` (and one phi per
iter_arg), ``%c = arith.cmpi slt, %i, %ub``, ``cf.cond_br %c, ^body, ^exit``;
the body ends by adding the step and branching back to the head.  Inner ops are
lowered before outer ones, so a lowered region may already hold many blocks.

The loop must end where the next induction value would pass the type's maximum,
as the interpreter's exact arithmetic does (``scf.for`` in dialects/scf.py), so
the wrapping ``%i + %s`` may only decide the exit where it cannot wrap: when the
step is 1 (``%i < %ub`` leaves room for one more) or constant bounds show it.
Every other loop counts its trips instead: ``%n = (ub - lb - 1) /u s + 1`` when
``lb < ub`` (else 0), computed before the loop without overflow, and the head
compares a counter ``%k = 0, 1, ...`` with ``arith.cmpi ult, %k, %n``; ``%i``
still steps by ``%s`` (its last, unused, value may wrap).
"""

from __future__ import annotations

from irc.dialects.arith import AddIOp, CmpIOp
from irc.dialects.cf import BranchOp, CondBranchOp, PhiOp
from irc.dialects.memref import AllocaScopeOp, AllocaScopeReturnOp
from irc.dialects.scf import (
    INTERLEAVE,
    STEP_NOT_POSITIVE,
    ConditionOp,
    ExecuteRegionOp,
    ForOp,
    IfOp,
    ParallelOp,
    WhileOp,
    YieldOp,
    constant_step,
    signed_value,
)

from irc.block import Block, Region
from irc.operation import Operation
from irc.passmanager import Pass
from irc.types import index


class SCFToCF(Pass):
    """Lower scf.for/if/while/execute_region/parallel to cf branches and phis (the CFG the backends take)."""

    name = "scf-to-cf"

    def run(self, module, stats) -> None:
        kernels = [k for op in module.body.ops if op.name == "gpu.module" for k in op.kernels]
        for func in [*module.functions, *kernels]:
            if func.regions[0].is_empty:
                continue
            for op in [op for op in func.walk() if isinstance(op, ParallelOp)]:
                _parallel_to_for(op)
                stats.add("scf.parallel-lowered")
            # Post-order: inner structured ops first, so each lowering sees CFG regions.
            structured = [op for op in func.walk()
                          if isinstance(op, (ForOp, IfOp, WhileOp, ExecuteRegionOp, AllocaScopeOp))]
            for op in reversed(structured):
                lower(op)
                stats.add(f"{op.name}-lowered")


def lower(op: Operation) -> None:
    if isinstance(op, ForOp):
        _lower_for(op)
    elif isinstance(op, IfOp):
        _lower_if(op)
    elif isinstance(op, AllocaScopeOp):  # in line: its allocas then live until the function returns
        _lower_execute_region(op, AllocaScopeReturnOp)
    elif isinstance(op, ExecuteRegionOp):
        _lower_execute_region(op)
    else:
        _lower_while(op)


def split_block_after(op: Operation) -> Block:
    """Move every op after ``op`` into a new block placed right after ``op``'s block.

    Successors of the moved terminator now branch from the new block, so phis in
    those successors are retargeted to it.
    """
    block = op.parent
    cont = Block(label=None, loc=op.loc)
    block.parent.insert_after(cont, block)
    nxt = op.next
    while nxt is not None:
        after = nxt.next
        nxt.detach()
        cont.append(nxt)
        nxt = after
    term = cont.terminator
    if term is not None:
        for succ in set(term.successors):
            for phi in succ.phis():
                for i, b in enumerate(phi.successors):
                    if b is block:
                        phi.set_successor(i, cont)
    return cont


def _move_region_blocks(region, before: Block) -> list[Block]:
    """Move a region's blocks into the parent region, just before ``before``."""
    moved = list(region.blocks)
    anchor_region = before.parent
    prev = before.prev
    for b in moved:
        region.remove(b)
        if prev is None:
            # ``before`` is the entry; never happens: the split block precedes it.
            raise AssertionError("cannot insert blocks before a region's entry")
        anchor_region.insert_after(b, prev)
        prev = b
    return moved


def _terminators(blocks, kind) -> list[Operation]:
    return [b.terminator for b in blocks if isinstance(b.terminator, kind)]


def _check_step(op: ForOp, step) -> None:
    """The interpreter rejects a step <= 0 (the loop would never end); so does lowered code,
    with the interpreter's message."""
    from irc.dialects.cf import AssertOp

    from irc.attributes import StringAttr

    known = constant_step(op)
    if known is not None and known > 0:
        return
    positive = CmpIOp.build("sgt", step, _insert_constant(op, 0))
    check = AssertOp([positive.results[0]], [], {"msg": StringAttr(STEP_NOT_POSITIVE)})
    for new in (positive, check):
        new.loc = op.loc
        op.parent.insert_before(new, op)


def _insert_constant(op: ForOp, value: int):
    """An ``arith.constant`` of the loop's induction type, placed before the loop."""
    from irc.dialects.arith import ConstantOp

    from irc.attributes import IntegerAttr

    const = ConstantOp.build(IntegerAttr(value, op.lower_bound.type))
    const.loc = op.loc
    op.parent.insert_before(const, op)
    return const.results[0]


def _insert(op: ForOp, new: Operation):
    new.loc = op.loc
    op.parent.insert_before(new, op)
    return new.results[0]


def _step_cannot_wrap(op: ForOp) -> bool:
    """Whether ``%i + step`` stays below the type's maximum whenever ``%i < ub`` (so the
    head's ``%i < ub`` test alone ends the loop as the exact arithmetic does)."""
    from .algebra import int_const

    step = constant_step(op)
    if step is None or step <= 0:
        return False
    if step == 1:
        return True
    ty = op.lower_bound.type
    top = (1 << (64 if ty.is_index else ty.width) - 1) - 1
    ub, lb = int_const(op.upper_bound), int_const(op.lower_bound)
    if ub is None:
        return False
    ub = signed_value(ub, ty)
    if ub - 1 + step <= top:
        return True
    if lb is None:
        return False
    lb = signed_value(lb, ty)
    trips = max(0, -(-(ub - lb) // step))
    return lb + trips * step <= top


def _trip_count(op: ForOp):
    """``lb < ub ? (ub - lb - 1) /u step + 1 : 0``, inserted before the loop.

    ``ub - lb`` wraps to the exact distance read as unsigned (it is below 2**width
    when lb < ub), and the step is positive, so nothing here overflows."""
    from irc.dialects.arith import DivUIOp, SelectOp, SubIOp

    lb, ub, step = op.operands[:3]
    zero, one = _insert_constant(op, 0), _insert_constant(op, 1)
    span = _insert(op, SubIOp.build(ub, lb))
    last = _insert(op, DivUIOp.build(_insert(op, SubIOp.build(span, one)), step))
    trips = _insert(op, AddIOp.build(last, one))
    nonempty = _insert(op, CmpIOp.build("slt", lb, ub))
    return zero, one, _insert(op, SelectOp.build(nonempty, trips, zero))


def _lower_for(op: ForOp) -> None:
    _check_step(op, op.operands[2])
    counted = None if _step_cannot_wrap(op) else _trip_count(op)
    pre = op.parent
    cont = split_block_after(op)
    lb, ub, step = op.operands[:3]
    inits = list(op.operands[3:])
    body_region = op.regions[0]
    body_entry = body_region.entry
    head = Block(loc=op.loc)
    pre.parent.insert_after(head, pre)
    # Header phis: the induction variable and the loop-carried values.
    iv_phi = PhiOp.build(lb.type, [(lb, pre)])
    iv_phi.loc = op.loc
    head.append(iv_phi)
    carried = []
    for init in inits:
        phi = PhiOp.build(init.type, [(init, pre)])
        phi.loc = op.loc
        head.append(phi)
        carried.append(phi)
    for arg, new in zip(body_entry.args, [iv_phi, *carried]):
        new.results[0].name_hint = arg.name_hint
        arg.replace_all_uses_with(new.results[0])
    if counted is None:
        cmp = CmpIOp.build("slt", iv_phi.results[0], ub)
    else:
        zero, one, trips = counted
        count_phi = PhiOp.build(lb.type, [(zero, pre)])
        count_phi.loc = op.loc
        count_phi.results[0].name_hint = "trip"
        head.append(count_phi)
        cmp = CmpIOp.build("ult", count_phi.results[0], trips)
    cmp.loc = op.loc
    head.append(cmp)
    blocks = _move_region_blocks(body_region, cont)
    cond = CondBranchOp.build(cmp.results[0], blocks[0], cont)
    cond.loc = op.loc
    head.append(cond)
    for y in _terminators(blocks, YieldOp):
        latch = y.parent
        nxt = AddIOp.build(iv_phi.results[0], step)
        nxt.loc = y.loc
        nxt.results[0].name_hint = f"{iv_phi.results[0].name_hint or 'iv'}.next"
        latch.insert_before(nxt, y)
        iv_phi.add_incoming(nxt.results[0], latch)
        if counted is not None:
            count = AddIOp.build(count_phi.results[0], counted[1])
            count.loc = y.loc
            latch.insert_before(count, y)
            count_phi.add_incoming(count.results[0], latch)
        for phi, v in zip(carried, y.operands):
            phi.add_incoming(v, latch)
        br = BranchOp.build(head)
        br.loc = y.loc
        if INTERLEAVE in op.attributes:  # the back edge is where LLVM looks for a loop's hints
            br.attributes[INTERLEAVE] = op.attributes[INTERLEAVE]
        latch.insert_before(br, y)
        y.erase()
    for r, phi in zip(op.results, carried):
        r.replace_all_uses_with(phi.results[0])
    _replace_with_branch(op, head)
    for b in blocks:  # the body's entry arguments are gone (all uses replaced)
        while b.args:
            b.erase_argument(len(b.args) - 1)


def _yields_to_branches(blocks, phis, dest: Block, terminator: type = YieldOp) -> None:
    """Each ``scf.yield`` (``terminator``) among ``blocks`` becomes a branch to ``dest`` whose
    yielded values flow into ``phis`` (one per value) along the new edge."""
    for y in _terminators(blocks, terminator):
        for phi, v in zip(phis, y.operands):
            phi.add_incoming(v, y.parent)
        br = BranchOp.build(dest)
        br.loc = y.loc
        y.parent.insert_before(br, y)
        y.erase()


def _replace_with_branch(op: Operation, dest: Block) -> None:
    br = BranchOp.build(dest)
    br.loc = op.loc
    op.parent.insert_before(br, op)
    op.drop_all_references()
    op.parent.remove(op)


def _lower_if(op: IfOp) -> None:
    pre = op.parent
    cont = split_block_after(op)
    result_phis = [PhiOp.build(r.type) for r in op.results]
    for phi in reversed(result_phis):
        phi.loc = op.loc
        cont.prepend(phi)
    targets = []
    for region in op.regions:
        if region.is_empty:
            targets.append(cont)
            continue
        blocks = _move_region_blocks(region, cont)
        targets.append(blocks[0])
        _yields_to_branches(blocks, result_phis, cont)
    for r, phi in zip(op.results, result_phis):
        phi.results[0].name_hint = r.name_hint
        r.replace_all_uses_with(phi.results[0])
    cond = CondBranchOp.build(op.operands[0], targets[0], targets[1])
    cond.loc = op.loc
    op.parent.insert_before(cond, op)
    op.drop_all_references()
    pre.remove(op)


def _lower_while(op: WhileOp) -> None:
    pre = op.parent
    cont = split_block_after(op)
    before_blocks = _move_region_blocks(op.before, cont)
    after_blocks = _move_region_blocks(op.after, cont)
    head = before_blocks[0]
    arg_phis = []
    for init in op.operands:
        phi = PhiOp.build(init.type, [(init, pre)])
        phi.loc = op.loc
        arg_phis.append(phi)
    for phi in reversed(arg_phis):
        head.prepend(phi)
    for arg, phi in zip(head.args, arg_phis):
        phi.results[0].name_hint = arg.name_hint
        arg.replace_all_uses_with(phi.results[0])
    conditions = _terminators(before_blocks, ConditionOp)
    # Values forwarded by scf.condition feed the 'after' region's arguments and the
    # loop results; with several condition ops they merge through phis.
    after_entry = after_blocks[0]
    if len(conditions) == 1:
        forwarded = list(conditions[0].operands[1:])
        for arg, v in zip(after_entry.args, forwarded):
            arg.replace_all_uses_with(v)
        for r, v in zip(op.results, forwarded):
            r.replace_all_uses_with(v)
    else:
        after_phis = [PhiOp.build(a.type) for a in after_entry.args]
        exit_phis = [PhiOp.build(r.type) for r in op.results]
        for phi in reversed(after_phis):
            after_entry.prepend(phi)
        for phi in reversed(exit_phis):
            cont.prepend(phi)
        for c in conditions:
            for phi, v in zip(after_phis, c.operands[1:]):
                phi.add_incoming(v, c.parent)
            for phi, v in zip(exit_phis, c.operands[1:]):
                phi.add_incoming(v, c.parent)
        for arg, phi in zip(after_entry.args, after_phis):
            arg.replace_all_uses_with(phi.results[0])
        for r, phi in zip(op.results, exit_phis):
            r.replace_all_uses_with(phi.results[0])
    for c in conditions:
        br = CondBranchOp.build(c.operands[0], after_entry, cont)
        br.loc = c.loc
        c.parent.insert_before(br, c)
        c.erase()
    _yields_to_branches(after_blocks, arg_phis, head)
    _replace_with_branch(op, head)
    for b in before_blocks + after_blocks:
        while b.args:
            b.erase_argument(len(b.args) - 1)


def _lower_execute_region(op: Operation, terminator: type = YieldOp) -> None:
    """The region's blocks go between the op's block and its continuation; each scf.yield
    (``terminator``) branches to the continuation, whose phis become the op's results."""
    cont = split_block_after(op)
    result_phis = [PhiOp.build(r.type) for r in op.results]
    for phi in reversed(result_phis):
        phi.loc = op.loc
        cont.prepend(phi)
    blocks = _move_region_blocks(op.regions[0], cont)
    _yields_to_branches(blocks, result_phis, cont, terminator)
    for r, phi in zip(op.results, result_phis):
        phi.results[0].name_hint = r.name_hint
        r.replace_all_uses_with(phi.results[0])
    _replace_with_branch(op, blocks[0])


def _parallel_to_for(op: ParallelOp) -> None:
    """``scf.parallel`` as a nest of ``scf.for``, one per dimension, iterations in order (which
    the op allows), lowered afterwards like any scf.for.  Reductions become iter_args: the
    innermost body combines each ``scf.reduce`` value into its accumulator with a copy of the
    reduction region, and each loop yields its inner loop's results."""
    r = op.rank
    lbs, ubs, steps = op.operands[:r], op.operands[r:2 * r], op.operands[2 * r:3 * r]
    types = list(op.result_types)
    body = op.regions[0].entry
    reduce = body.terminator
    loops = []
    carried = list(op.inits)
    for d in range(r):
        loop = ForOp([lbs[d], ubs[d], steps[d], *carried], types, {}, regions=[Region([Block([index, *types])])],
                     loc=op.loc)
        loop.body.args[0].name_hint = body.args[d].name_hint
        if loops:
            loops[-1].body.append(loop)
            loops[-1].body.append(YieldOp(list(loop.results), loc=op.loc))
        else:
            op.parent.insert_before(loop, op)
        loops.append(loop)
        carried = list(loop.body.args[1:])
    for d in range(r):
        body.args[d].replace_all_uses_with(loops[d].induction_var)
    inner = loops[-1].body
    for inner_op in list(body.ops):
        if inner_op is reduce:
            continue
        inner_op.detach()
        inner.append(inner_op)
    combined = []
    for acc, value, region in zip(carried, reduce.operands, reduce.regions):
        if region.first_block is not region.last_block:
            raise reduce.error("has a reduction region of several blocks, which scf-to-cf does not lower")
        lhs, rhs = region.entry.args
        value_map = {lhs: acc, rhs: value}
        for region_op in region.entry.ops:
            if region_op.name == "scf.reduce.return":
                combined.append(value_map.get(region_op.operands[0], region_op.operands[0]))
                break
            inner.append(region_op.clone(value_map))
    inner.append(YieldOp(combined, loc=op.loc))
    for result, new in zip(op.results, loops[0].results):
        new.name_hint = result.name_hint
        result.replace_all_uses_with(new)
    reduce.drop_all_references()
    op.drop_all_references()
    op.parent.remove(op)
