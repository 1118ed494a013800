"""Reverse mode through loops and branches: a tape that is explicit IR.

``taped_body`` emits, into the function being built, for a source function whose
control flow is a CFG (after scf-to-cf):

1. **count** - a copy of the forward that only counts how often each block runs
   (``%counts : memref<Bxindex>``; the trip counts of ``scf.while`` loops are
   unknown until then), ending in
2. **alloc** - the tape: ``%trace : memref<?xindex>`` (the sequence of blocks run)
   and, per block, one ``memref<?xT>`` per value its adjoint reads, as long as
   that block's execution count;
3. **record** - a second copy of the forward that stores the block trace and, at
   the end of each block, the values its adjoint needs at index k = how many
   times the block ran before; its returns branch, with the results, to
4. **adjoint** - a loop over the trace from its end: each step loads the block id,
   dispatches to that block's adjoint (its ops in reverse, reading operands from
   the tape and adjoints from ``memref<1xT>`` slots that it zeroes when a value's
   definition is reached), and a phi's adjoint goes to the incoming value of the
   edge the trace shows was taken (``arith.select`` on the previous block id).

Counting first doubles the forward's cost but sizes the tape exactly and keeps
every buffer's size known before it is written; ``mem2reg`` turns the slots into
SSA values.  Values held on the tape must be scalars: a tensor value in a
function of several blocks is a diagnostic (one-block functions with tensors in
``scf`` loops take the structured path, autodiff_scf, instead).
"""

from __future__ import annotations

from irc.dialects.cf import PhiOp
from irc.dialects.func import CallOp, ReturnOp
from irc.dialects.memref import AllocaOp, AllocOp, DeallocOp, LoadOp, StoreOp
from irc.dialects.scf import ForOp, IfOp, WhileOp

from irc.block import Block, Region
from irc.builder import Builder, V, is_float
from irc.diagnostics import IRError
from irc.dominance import reverse_postorder
from irc.patterns import constant_value
from irc.types import MemRefType, TensorType, index

from .autodiff import _lowered_copy, apply_vjp


def _active(op) -> bool:
    """Ops whose adjoint does work: a float operand and a float result."""
    if op.is_terminator or isinstance(op, PhiOp):
        return False
    return any(is_float(v.type) for v in op.operands) and any(is_float(r.type) for r in op.results)


class _Tape:
    def __init__(self, rev, b: Builder, fn, cots):
        self.rev = rev
        self.b = b
        source = _lowered_copy(fn) if any(isinstance(op, (ForOp, IfOp, WhileOp)) for op in fn.walk()) else fn
        self.source = source
        self.blocks = reverse_postorder(source.body.entry)
        self.ids = {blk: i for i, blk in enumerate(self.blocks)}
        self.useful = self.useful_values(cots)
        # The values each block's adjoint reads: constants are copied and parameters read
        # directly instead of taped (both are the same in every iteration).
        arguments = set(source.args)
        self.needed: dict[Block, list] = {}
        for blk in self.blocks:
            seen: dict = {}
            for op in blk.ops:
                if self.has_adjoint(op):
                    for v in (*op.operands, *op.results):
                        if not _is_constant(v) and v not in arguments:
                            seen.setdefault(v, None)
            self.needed[blk] = list(seen)
        for v in [*self.useful, *(v for values in self.needed.values() for v in values)]:
            if isinstance(v.type, TensorType):
                op = v.defining_op
                message = (f"a gradient through loops keeps {v.type} values in memory slots and on the tape, "
                           f"which hold scalars only (tensors through loops are not supported yet)")
                raise op.error(message) if op is not None else IRError(message, fn.loc)
        self.entry_block = b.block
        self.slots: dict = {}

    def useful_values(self, cots) -> set:
        """Activity analysis: the float values whose adjoint can be nonzero, i.e. those the seeded
        results depend on.  Only their ops get adjoint code: besides saving work, an op whose
        adjoint is zero must not run, since 0 times an infinite partial is a NaN."""
        useful: set = set()
        work = [op.operands[i] for blk in self.blocks for op in [blk.terminator]
                if isinstance(op, ReturnOp) for i in cots]
        while work:
            v = work.pop()
            if v in useful or not is_float(v.type) or _is_constant(v):
                continue
            useful.add(v)
            op = v.defining_op
            if isinstance(op, PhiOp):
                work.extend(op.operands)
            elif op is not None and _active(op):
                work.extend(op.operands)
        return useful

    def has_adjoint(self, op) -> bool:
        return _active(op) and any(r in self.useful for r in op.results)

    # -- helpers --------------------------------------------------------------------------------

    def at_entry(self):
        """Allocas and their initial stores go at the very start of the new function."""
        return self.b.at(self.entry_anchor)

    def slot(self, value):
        """The ``memref<1xT>`` accumulating ``value``'s adjoint (made zero at the start)."""
        s = self.slots.get(value)
        if s is None:
            with self.at_entry():
                s = self.b.built(AllocaOp.build(MemRefType([1], value.type)))
                self.b.insert(StoreOp.build(self.b.zeros_like(value).value, s.value, [self.b.index(0).value]))
            self.slots[value] = s
        return s

    def load(self, mem, i):
        return self.b.built(LoadOp.build(mem.value, [self.b.index(i).value]))

    def store(self, value, mem, i) -> None:
        self.b.insert(StoreOp.build(self.b.wrap(value).value, mem.value, [self.b.index(i).value]))

    def accumulate(self, value, cot) -> None:
        if cot is None or not is_float(value.type) or _is_constant(value):
            return
        s = self.slot(value)
        self.store(self.load(s, 0) + cot, s, 0)

    def take(self, value):
        """Read ``value``'s adjoint and reset it (the next one read belongs to an earlier run)."""
        s = self.slot(value)
        cot = self.load(s, 0)
        self.store(self.b.zeros_like(value), s, 0)
        return cot

    def copy_forward(self, region: Region, params) -> dict:
        """The source's blocks copied into ``region``; returns the block map (values map through
        ``self.vmap``).  The copied entry block's arguments become the function's parameters."""
        vmap: dict = {}
        bmap: dict = {}
        staging = Region()
        self.source.body.clone_into(staging, vmap, bmap)
        entry = bmap[self.source.body.entry]
        for arg, p in zip(list(entry.args), params):
            arg.replace_all_uses_with(p.value)
        while entry.args:
            entry.erase_argument(len(entry.args) - 1)
        for blk in list(staging.blocks):
            staging.remove(blk)
            region.append(blk)
        for blk in self.source.body.blocks:
            if blk not in self.ids:  # unreachable: no trace can name it
                bmap[blk].erase()
        self.vmap = vmap
        for a, p in zip(self.source.args, params):
            vmap[a] = p.value
        return bmap

    def after_phis(self, blk: Block):
        op = blk.first_op
        while op is not None and isinstance(op, PhiOp):
            op = op.next
        return self.b.at(op) if op is not None else self.b.at(blk)

    # -- the four parts -------------------------------------------------------------------------

    def emit(self, params, cots):
        b = self.b
        self.arguments = {a: p for a, p in zip(self.source.args, params)}
        region = self.entry_block.parent
        m = len(self.blocks)
        # Counters, made in the entry; the anchor keeps allocas above the first branch.
        zero_index = b.index(0)
        self.entry_anchor = zero_index.value.defining_op
        counts = b.built(AllocaOp.build(MemRefType([m], index)))
        total = b.built(AllocaOp.build(MemRefType([1], index)))

        def reset():
            for i in range(m):
                self.store(zero_index, counts, i)
            self.store(zero_index, total, 0)

        reset()
        # 1. count
        count_map = self.copy_forward(region, params)
        b.br(count_map[self.source.body.entry])
        alloc = b.new_block(region)
        for blk in self.blocks:
            nb = count_map[blk]
            with self.after_phis(nb):
                i = self.ids[blk]
                self.store(self.load(counts, i) + 1, counts, i)
                self.store(self.load(total, 0) + 1, total, 0)
            term = nb.terminator
            if isinstance(term, ReturnOp):
                with b.at(term):
                    b.br(alloc)
                term.erase()
        # 2. alloc
        b.at_end(alloc)
        n_total = self.load(total, 0)
        trace = b.built(AllocOp.build(MemRefType([None], index), [n_total.value]))
        tapes: dict = {}
        buffers = [trace]
        for blk in self.blocks:
            n = self.load(counts, self.ids[blk])
            for v in self.needed[blk]:
                t = b.built(AllocOp.build(MemRefType([None], v.type), [n.value]))
                tapes[(blk, v)] = t
                buffers.append(t)
        reset()
        # 3. record
        record_map = self.copy_forward(region, params)
        b.br(record_map[self.source.body.entry])
        backward = b.new_block(region)
        ft = self.source.function_type
        result_phis = [PhiOp.build(t) for t in ft.results]
        for phi in result_phis:
            backward.append(phi)
        for blk in self.blocks:
            nb = record_map[blk]
            with self.after_phis(nb):
                i = self.ids[blk]
                pos = self.load(total, 0)
                self.store(b.index(i), trace, pos)
                self.store(pos + 1, total, 0)
                k = self.load(counts, i)
                self.store(k + 1, counts, i)
            term = nb.terminator
            with b.at(term):
                for v in self.needed[blk]:
                    self.store(self.vmap[v], tapes[(blk, v)], k)
                if isinstance(term, ReturnOp):
                    for phi, value in zip(result_phis, term.operands):
                        phi.add_incoming(value, nb)
                    b.br(backward)
            if isinstance(term, ReturnOp):
                term.erase()
        # 4. adjoint
        b.at_end(backward)
        start = self.load(total, 0) - 1
        head = b.new_block(region)
        exit_block = b.new_block(region)
        b.br(head)
        b.at_end(head)
        p = b.phi(index, [(start, backward)])
        dispatch = b.new_block(region, after=head)
        b.cond_br(p >= 0, dispatch, exit_block)
        adjoint_blocks = [b.new_block(region) for _ in self.blocks]
        b.at_end(dispatch)
        block_id = self.load(trace, p)
        for i, target in enumerate(adjoint_blocks):
            if i == m - 1:
                b.br(target)
                break
            nxt = b.new_block(region, after=b.block)
            b.cond_br(block_id.eq(b.index(i)), target, nxt)
            b.at_end(nxt)
        for blk, adj_block in zip(self.blocks, adjoint_blocks):
            b.at_end(adj_block)
            self.adjoint_of(blk, tapes, counts, trace, p, cots)
            p.value.defining_op.add_incoming((p - 1).value, adj_block)
            b.br(head)
        b.at_end(exit_block)
        grads = []
        for a in self.source.args:
            grads.append(self.load(self.slots[a], 0) if a in self.slots else None)
        for buf in buffers:
            b.insert(DeallocOp([buf.value], []))
        return [V(b, phi.results[0]) for phi in result_phis], grads

    def adjoint_of(self, blk: Block, tapes, counts, trace, p, cots) -> None:
        b = self.b
        i = self.ids[blk]
        k = self.load(counts, i) - 1
        self.store(k, counts, i)
        primal: dict = {}
        for v in self.needed[blk]:
            primal[v] = self.load(tapes[(blk, v)], k)

        def value(v):
            if v in primal:
                return primal[v]
            if v in self.arguments:
                return self.arguments[v]
            if _is_constant(v):
                primal[v] = b.built(v.defining_op.clone({}))
                return primal[v]
            raise AssertionError(f"value {v} is not on the tape")

        term = blk.terminator
        if isinstance(term, ReturnOp):
            for r, cot in cots.items():
                if term.operands[r] in self.useful:
                    self.accumulate(term.operands[r], cot)
        for op in reversed([op for op in blk.ops if self.has_adjoint(op)]):
            with b.located(op.loc):
                out_cots = [self.take(r) if r in self.useful else None for r in op.results]
                operands = [value(v) for v in op.operands]
                if isinstance(op, CallOp):
                    grads = self.rev.call_vjp(b, op, operands, out_cots)
                else:
                    grads = apply_vjp(b, op, operands, [value(r) for r in op.results], out_cots)
                for v, g in zip(op.operands, grads):
                    if v in self.useful:
                        self.accumulate(v, g)
        phis = [op for op in blk.ops if isinstance(op, PhiOp) and op.results[0] in self.useful]
        if phis:
            previous = self.load(trace, p - 1)
            # Phis read their incoming values at once (a parallel copy: '%a = phi [%b]' and
            # '%b = phi [%a]' swap), so every phi's adjoint is taken before any is passed on.
            taken = []
            for phi in phis:
                with b.located(phi.loc):
                    taken.append(self.take(phi.results[0]))
            for phi, cot in zip(phis, taken):
                with b.located(phi.loc):
                    zero = b.zeros_like(phi.results[0])
                    for v, pred in phi.incoming:
                        if pred in self.ids and v in self.useful:
                            self.accumulate(v, b.select(previous.eq(b.index(self.ids[pred])), cot, zero))


def _is_constant(v) -> bool:
    return constant_value(v) is not None


def taped_body(rev, b: Builder, fn, params, cots):
    tape = _Tape(rev, b, fn, cots)
    results, grads = tape.emit(params, cots)
    return results, grads
