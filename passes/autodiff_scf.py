"""Structured derivatives of ``scf.for`` and ``scf.while``, and forward mode of ``scf.if`` too.

The derivative of a loop is loops: the gradient function keeps ``scf`` ops over tensors, so
every graph-level pass, and the compiler, apply to it as to the forward.

**Reverse mode of an ``scf.for`` with a known trip count: a tape.**  The adjoint of
iteration k needs the carry s_k that entered it.  The forward copy of the loop
(``taped_for``, made by ``copy_ops``) also stores each carry in a *tape*, a tensor of N
slices (``graph.dynamic_update_slice`` at the trip's index; a scalar carry as a slice of
one element), and the reverse loop reads s_k back with ``graph.dynamic_slice`` and runs step
k's adjoint (which recomputes the body's intermediates, as ``scf.if``'s adjoint does).
Cost, in runs of the loop body: N for the forward, N for the intermediates and N adjoint
bodies; memory: the tape, N times the carries' bytes (bufferization updates it in place,
one slice per trip).  A loop that only ``run``-style code copies (no adjoint follows) gets
its tape from a taping loop in the adjoint instead.
The tape is used when its bytes are at most ``TAPE_BYTES`` (256 MiB), the carries are
tensors of static shape or scalars (not ``index``) and the trip count is a constant (a
static shape for the tape); otherwise the scheme below.

**Reverse mode otherwise: recompute, with one level of checkpoints that are recomputed too.**
Nothing is stored: the N iterations are cut into S segments of L = ceil(sqrt(N)) steps;
the adjoint walks the segments from the last, recomputes the carry entering the segment by
running the forward body from the loop's initial values, then walks the segment's steps
from the last, recomputing each step's carry from the segment's start, and runs that step's
adjoint.  Cost, counted in runs of the loop body: N for the forward, about N * (S + L) / 2
= N * sqrt(N) to recompute carries, N for the intermediates, and N adjoint bodies; memory: a
fixed number of carries (the segment's start, the current one, their cotangents), whatever
N is.  A loop of 10 steps thus costs about 5 forward bodies per step in reverse, one of
10,000 about 100.  A taped loop over scalars (autodiff_tape) costs 2 forward runs and O(N)
memory: functions of scalars alone keep that path.

Trip counts may be dynamic: an ``scf.for``'s is ceil((ub - lb) / step) computed in the IR
(L by an integer square root loop, or folded where the bounds are constants); an
``scf.while``'s is counted by the forward copy itself (``counted_while`` adds an ``index``
carry), then the while is differentiated as a loop of K steps s -> after(before(s)), and
its last ``before`` (the one that ends the loop and forwards the results) is differentiated
first.  Cotangents of values a body reads from outside the loop accumulate in extra
iter_args of the adjoint loops.  Nested loops and branches recurse: a body's adjoint is made
by the same engine.

**Forward mode** needs no recomputation: each float carry that a tangent can reach (a fixed
point over the body) gets a tangent carried beside it, as an extra iter_arg, ``scf.if``
result or ``scf.while`` value.
"""

from __future__ import annotations

import math

from irc.dialects.func import CallOp
from irc.dialects.scf import ConditionOp, ForOp, IfOp, WhileOp, YieldOp

from irc.attributes import IntegerAttr
from irc.block import Block, Region
from irc.builder import Builder, V, is_float
from irc.operation import Operation
from irc.patterns import constant_value
from irc.types import FloatType, IndexType, IntegerType, TensorType, index
from irc.values import Value

from .autodiff import Adjoints, _free_values, apply_jvp_rule, function

# ---- reverse mode ---------------------------------------------------------------------------------


def counted_while(rev, b: Builder, op: WhileOp, vmap: dict) -> WhileOp:
    """A copy of ``op`` at ``b`` that also counts its trips (a last ``index`` carry, from 0, one
    more per run of the ``do`` region): its last result is the trip count the adjoint needs."""
    zero, one = b.index(0), b.index(1)
    inits = [vmap.get(v, v) for v in op.operands]
    new = WhileOp([*inits, zero.value], [*op.result_types, index], dict(op.attributes),
                  regions=[Region(), Region()], loc=op.loc)
    for source, dest in zip(op.regions, new.regions):
        source.clone_into(dest, vmap, {})
    before, after = new.before.entry, new.after.entry
    n = before.add_argument(index)
    condition = before.terminator
    condition.set_operands([*condition.operands, n])
    m = after.add_argument(index)
    step = after.terminator
    with b.at(step):
        increment = b.op("arith.addi", m, one)
    rev.counter_ops.add(increment.value.defining_op)
    step.set_operands([*step.operands, increment.value])
    b.insert(new)
    for old, r in zip(op.results, new.results):
        vmap[old] = r
    rev.trip_counts[new] = new.results[-1]
    return new


def taped_for(rev, b: Builder, op: ForOp, vmap: dict) -> ForOp:
    """A copy of ``op`` at ``b`` that also stores the carry entering each trip in a tape (one
    more carry per carry, the tapes its last results), for the adjoint to read
    (``_taped_steps``); its tape writes are counter ops, which copies of its body leave out."""
    m = len(op.inits)
    n = _constant_trips(op)
    inits = [b.wrap(vmap.get(v, v)) for v in op.inits]
    tapes = [_empty_tape(b, v.type, n) for v in inits]
    body = op.body
    new_body = Block([body.args[0].type, *[v.type for v in inits], *[t.type for t in tapes]],
                     arg_names=[*(a.name_hint for a in body.args), *["tape"] * m])
    bounds = [vmap.get(v, v) for v in op.operands[:3]]
    new = b.insert(ForOp([*bounds, *[v.value for v in inits], *[t.value for t in tapes]],
                         [*op.result_types, *[t.type for t in tapes]], dict(op.attributes),
                         regions=[Region([new_body])], loc=op.loc))
    vmap[body.args[0]] = new_body.args[0]
    for a, na in zip(body.args[1:], new_body.args[1:]):
        vmap[a] = na
    with b.at(new_body):
        iv = b.wrap(new_body.args[0])
        k = _trip_index(b, iv, op)
        states = [b.wrap(a) for a in new_body.args[1:1 + m]]
        written = [_tape_write(b, b.wrap(t), s, k) for t, s in zip(new_body.args[1 + m:], states)]
        rev.counter_ops.update(new_body.ops)  # the tape writes (and the trip index): not the body's
        _, outs = rev.copy_ops(b, body, vmap, count=False)
        b.insert(YieldOp([*outs, *[w.value for w in written]], [], loc=op.loc))
    for old, r in zip(op.results, new.results):
        vmap[old] = r
    rev.tapes[new] = m
    return new


def _trip_index(b: Builder, iv: V, op: ForOp) -> V:
    """The trip number of induction variable ``iv`` of ``op`` (constant bounds), as an index."""
    from irc.dialects.scf import signed_value

    lb, step = (signed_value(constant_value(v).value, v.type) for v in (op.lower_bound, op.step))
    k = _to_index(b, iv)
    if lb:
        k = k - lb
    return k if step == 1 else b.op("arith.divsi", k, b.index(step))


def _empty_tape(b: Builder, t, n: int) -> V:
    """Zeros of shape (n, *t's shape) (a scalar's tape is (n,))."""
    elem = t.element_type if isinstance(t, TensorType) else t
    zero = b.const(0.0 if isinstance(elem, FloatType) else 0, elem)
    return b.splat(zero, TensorType([n, *(t.shape if isinstance(t, TensorType) else ())], elem))


def backprop_loop(rev, b: Builder, op: Operation, cots: list, adj: Adjoints) -> None:
    if isinstance(op, ForOp):
        return _backprop_for(rev, b, op, cots, adj)
    return _backprop_while(rev, b, op, cots, adj)


def _to_index(b: Builder, v: V) -> V:
    return v if isinstance(v.type, IndexType) else b.op("arith.index_cast", v, result=index)


def _backprop_for(rev, b: Builder, op: ForOp, cots: list, adj: Adjoints) -> None:
    body = op.body
    lb, step = b.wrap(op.lower_bound), b.wrap(op.step)
    bound = lb.type
    lbi, ubi, sti = (_to_index(b, b.wrap(v)) for v in (op.lower_bound, op.upper_bound, op.step))
    n = _constant_trips(op)
    if n is None:
        n = b.op("arith.ceildivsi", (ubi - lbi).maximum(b.index(0)), sti)
    else:
        n = b.index(n)

    def iv_at(k: V) -> V:
        k = k if isinstance(bound, IndexType) else b.op("arith.index_cast", k, result=bound)
        return lb + k * step

    def body_map(k: V, states: list) -> dict:
        return {body.args[0]: iv_at(k).value, **{a: _raw(s) for a, s in zip(body.args[1:], states)}}

    def run(states, start, stop):
        with b.for_(start, stop, 1, inits=states) as loop:
            _, outs = rev.copy_ops(b, body, body_map(loop.iv, loop.args), count=False)
            loop.yield_(*outs)
        return loop.results

    floats = _useful_for(op, cots)
    free = [v for v in _free_values(op) if is_float(v.type)]

    def step_adjoint(k, states, cot_next):
        ops, outs = rev.copy_ops(b, body, body_map(k, states))
        a = Adjoints(b)
        for i, c in zip(floats, cot_next):
            a.add(outs[i], c)
        rev.adjoint(b, ops, a)
        return [a.table.get(_raw(states[i])) for i in floats], [a.table.get(v) for v in free]

    def forward_step(k, states):
        return rev.copy_ops(b, body, body_map(k, states), count=False)[1]

    m = rev.tapes.get(op, len(op.inits))  # a taped copy (taped_for): its tapes are its last carries
    inits = [b.wrap(v) for v in op.inits[:m]]
    final = [_or_zeros(b, cots[i], op.results[i]) for i in floats]
    known = _constant_trips(op)
    with b.located(op.loc):
        if op in rev.tapes and floats:
            cot_init, cot_free = _taped_steps(b, known, inits, final, free, floats, forward_step, step_adjoint,
                                              [b.wrap(t) for t in op.results[m:]])
        elif floats and uses_tape(op.result_types, known):
            cot_init, cot_free = _taped_steps(b, known, inits, final, free, floats, forward_step, step_adjoint)
        else:
            cot_init, cot_free = _reverse_steps(b, n, inits, final, free, floats, run, step_adjoint, known)
    for i, c in zip(floats, cot_init):
        adj.add(op.inits[i], c, op)
    for v, c in zip(free, cot_free):
        adj.add(v, c, op)


def _backprop_while(rev, b: Builder, op: WhileOp, cots: list, adj: Adjoints) -> None:
    if op not in rev.trip_counts:  # not copied by copy_ops: count its trips with another run
        op = counted_while(rev, b, op, {})
        cots = [*cots, None]
    trips = b.wrap(rev.trip_counts[op])
    before, after = op.before.entry, op.after.entry
    n_states = len(op.operands) - 1  # the last carry is the counter
    floats = _useful_while(op, cots)
    free = [v for v in _free_values(op) if is_float(v.type)]

    def run_before(states, count: bool = True):
        vmap = {a: _raw(s) for a, s in zip(before.args, states)}
        ops, outs = rev.copy_ops(b, before, vmap, count)
        return ops, outs[1:-1]  # the forwarded values, without the condition and the counter

    def run_after(forwarded, count: bool = True):
        vmap = {a: _raw(f) for a, f in zip(after.args, forwarded)}
        ops, outs = rev.copy_ops(b, after, vmap, count)
        return ops, outs[:-1]

    def run(states, start, stop):
        with b.for_(start, stop, 1, inits=states) as loop:
            _, forwarded = run_before(loop.args, count=False)
            _, nxt = run_after(forwarded, count=False)
            loop.yield_(*nxt)
        return loop.results

    def step_adjoint(k, states, cot_next):
        before_ops, forwarded = run_before(states)
        after_ops, outs = run_after(forwarded)
        a = Adjoints(b)
        for i, c in zip(floats, cot_next):
            a.add(outs[i], c)
        rev.adjoint(b, after_ops, a)  # the cotangents of the forwarded values stay in ``a``
        rev.adjoint(b, before_ops, a)
        return [a.table.get(_raw(states[i])) for i in floats], [a.table.get(v) for v in free]

    inits = [b.wrap(v) for v in op.operands[:n_states]]
    with b.located(op.loc):
        # The last 'before' ran on the state after K trips and forwarded the results.
        last = run(inits, 0, trips)
        before_ops, forwarded = run_before(last)
        a = Adjoints(b)
        for i, c in enumerate(cots[:-1]):
            if c is not None:
                a.add(forwarded[i], c)
        rev.adjoint(b, before_ops, a)
        final = [_or_zeros(b, a.table.get(_raw(last[i])), last[i]) for i in floats]
        last_free = [a.table.get(v) for v in free]
        cot_init, cot_free = _reverse_steps(b, trips, inits, final, free, floats, run, step_adjoint, None)
    for i, c in zip(floats, cot_init):
        adj.add(op.operands[i], c, op)
    for v, c, d in zip(free, cot_free, last_free):
        adj.add(v, c, op)
        adj.add(v, d, op)


def _useful_for(op: ForOp, cots: list) -> list[int]:
    """The float carries whose cotangent can be nonzero: those of a result with a cotangent,
    and those the body makes such a carry's next value from.  The others get no adjoint
    carry (besides saving work, a zero cotangent times an infinite partial would be NaN)."""
    body = op.body
    outs = body.terminator.operands
    floats = [i for i, t in enumerate(op.result_types) if is_float(t)]
    useful = {i for i in floats if cots[i] is not None}
    while True:
        targets = {outs[i] for i in useful}
        more = useful | {j for j in floats if targets & _reached(body, {body.args[1 + j]})}
        if more == useful:
            return sorted(useful)
        useful = more


def _useful_while(op: WhileOp, cots: list) -> list[int]:
    """``_useful_for`` for a counted ``scf.while``: the states (before-region arguments) from which
    'before' forwards a value with a cotangent, where the results' cotangents and 'after' (from
    the forwarded values to the next states) say which forwarded values have one."""
    before, after = op.before.entry, op.after.entry
    n = len(op.operands) - 1
    forwarded_values, next_states = before.terminator.operands[1:-1], after.terminator.operands[:-1]
    states = [i for i in range(n) if is_float(before.args[i].type)]
    forwarded = {j for j, c in enumerate(cots[:-1]) if c is not None}
    while True:
        targets = {forwarded_values[j] for j in forwarded}
        useful = {i for i in states if targets & _reached(before, {before.args[i]})}
        targets = {next_states[i] for i in useful}
        more = forwarded | {j for j in range(len(forwarded_values))
                            if is_float(after.args[j].type) and targets & _reached(after, {after.args[j]})}
        if more == forwarded:
            return sorted(useful)
        forwarded = more


def _constant_trips(op: ForOp) -> int | None:
    bounds = [constant_value(v) for v in (op.lower_bound, op.upper_bound, op.step)]
    if not all(isinstance(c, IntegerAttr) for c in bounds):
        return None
    from irc.dialects.scf import signed_value

    lb, ub, step = (signed_value(c.value, v.type) for c, v in zip(bounds, op.operands[:3]))
    return max(0, -(-(ub - lb) // step)) if step > 0 else None


TAPE_BYTES = 1 << 28
"""The most bytes a loop's tape of carries may take (the adjoint recomputes carries beyond)."""


def _tape_bytes(t) -> int | None:
    """Bytes of one trip's slice of the tape for a carry of type ``t``; None where the carry
    cannot be taped (``index``, a tensor of unknown shape)."""
    elem = t.element_type if isinstance(t, TensorType) else t
    if not isinstance(elem, (FloatType, IntegerType)):
        return None
    if isinstance(t, TensorType) and not t.has_static_shape:
        return None
    count = math.prod(t.shape) if isinstance(t, TensorType) else 1
    return count * max(1, elem.width // 8)


def uses_tape(carry_types, trips: int | None) -> bool:
    """Whether the adjoint of a loop of ``trips`` trips (None: not a constant) carrying
    ``carry_types`` stores its carries in a tape (see the module docstring)."""
    if trips is None:
        return False
    sizes = [_tape_bytes(t) for t in carry_types]
    return None not in sizes and trips * sum(sizes) <= TAPE_BYTES


def _tape_write(b: Builder, tape: V, state: V, k: V) -> V:
    """``tape`` with slice ``k`` set to ``state``."""
    from irc.dialects.graph_dynamic import DynamicUpdateSliceOp

    t = state.type
    if isinstance(t, TensorType):
        row = b.reshape(state, [1, *t.shape])
    else:
        row = b.splat(state, TensorType([1], t))
    zero = b.index(0)
    return b.built(DynamicUpdateSliceOp.build(tape.value, row.value, [k.value, *[zero.value] * (tape.type.rank - 1)]))


def _tape_read(b: Builder, tape: V, k: V, t) -> V:
    """Slice ``k`` of ``tape``, as a value of the carry's type ``t``."""
    from irc.dialects.graph_dynamic import DynamicSliceOp
    from irc.dialects.tensor import ExtractOp

    if not isinstance(t, TensorType):
        return b.built(ExtractOp.build(tape.value, [k.value]))
    zero = b.index(0)
    window = b.built(DynamicSliceOp.build(tape.value, [k.value, *[zero.value] * t.rank], [1, *t.shape]))
    return b.reshape(window, list(t.shape))


def _taped_steps(b: Builder, n: int, inits: list, final: list, free: list, floats: list, step, step_adjoint,
                 tapes: list | None = None):
    """``_reverse_steps`` with a tape: the forward copy wrote ``tapes`` (``taped_for``), or here a
    forward loop stores s_k (k < n) in one tape per carry, ``step(k, s_k)`` giving s_{k+1}; the
    reverse loop reads s_k back for ``step_adjoint``."""
    m, nf = len(inits), len(floats)
    if tapes is None:
        with b.for_(0, n, 1, inits=[*inits, *[_empty_tape(b, v.type, n) for v in inits]]) as record:
            record.iv.value.name_hint = "trip"
            states = record.args[:m]
            written = [_tape_write(b, tape, s, record.iv) for tape, s in zip(record.args[m:], states)]
            record.yield_(*step(record.iv, states), *written)
        tapes = record.results[m:]
    with b.for_(0, n, 1, inits=[*final, *[b.zeros_like(v) for v in free]]) as back:
        _name(back, "back", nf)
        k = b.index(n - 1) - back.iv
        states = [_tape_read(b, tape, k, v.type) for tape, v in zip(tapes, inits)]
        cot_state, cot_free = step_adjoint(k, states, back.args[:nf])
        nxt = [_or_zeros(b, c, old) for c, old in zip(cot_state, back.args[:nf])]
        acc = [old if c is None else old + c for c, old in zip(cot_free, back.args[nf:])]
        back.yield_(*nxt, *acc)
    results = back.results
    return results[:nf], results[nf:]


def _segment_length(b: Builder, n: V, known: int | None) -> V:
    """ceil(sqrt(n)), at least 1: the steps per segment (a constant when n is one)."""
    if known is not None:
        return b.index(math.isqrt(known - 1) + 1 if known > 1 else 1)
    with b.while_([b.index(1)]) as w:
        with w.before() as (length,):
            w.condition(length * length < n, length)
        with w.after() as (length,):
            w.yield_(length + 1)
    return w.results[0]


def _reverse_steps(b: Builder, n: V, inits: list, final: list, free: list, floats: list, run, step_adjoint,
                   known: int | None):
    """The adjoint of n steps s_{k+1} = step_k(s_k) from s_0 = ``inits``.

    ``final``: the cotangent of s_n (its float entries, ``floats`` positions); ``free``: the
    float values the steps read from outside, whose cotangents are summed over the steps.
    ``run(states, start, stop)`` recomputes s_stop from s_start; ``step_adjoint(k, s_k,
    cot of s_{k+1})`` gives (cot of s_k, cot of each free value, None for zero).
    Returns (cot of s_0, cot of each free value)."""
    if not floats:  # no step passes a cotangent on: the steps add nothing
        return [], [None] * len(free)
    length = _segment_length(b, n, known)
    segments = b.op("arith.ceildivsi", n, length)
    nf = len(floats)
    carried = [*final, *[b.zeros_like(v) for v in free]]
    with b.for_(0, segments, 1, inits=carried) as outer:
        _name(outer, "seg", nf)
        start = (segments - 1 - outer.iv) * length
        stop = (start + length).minimum(n)
        entering = run(inits, 0, start)
        with b.for_(0, stop - start, 1, inits=outer.args) as inner:
            _name(inner, "back", nf)
            k = stop - 1 - inner.iv
            cot_state, cot_free = step_adjoint(k, run(entering, start, k), inner.args[:nf])
            nxt = [_or_zeros(b, c, old) for c, old in zip(cot_state, inner.args[:nf])]
            acc = [old if c is None else old + c for c, old in zip(cot_free, inner.args[nf:])]
            inner.yield_(*nxt, *acc)
        outer.yield_(*inner.results)
    results = outer.results
    return results[:nf], results[nf:]


def _name(loop, iv: str, n_cots: int) -> None:
    """Names for an adjoint loop's arguments, so that the printed gradient reads as one."""
    loop.iv.value.name_hint = iv
    for k, a in enumerate(loop.args):
        a.value.name_hint = "cot" if k < n_cots else "acc"


def _or_zeros(b: Builder, cot, like) -> V:
    return cot if cot is not None else b.zeros_like(like)


def _raw(v) -> Value:
    return v.value if isinstance(v, V) else v


# ---- forward mode ---------------------------------------------------------------------------------


def _reached(block: Block, active: set) -> set:
    """The values of ``block`` (and ``active`` itself) that depend on a value in ``active``; an op
    with regions counts as depending on everything it reads, inside its regions too."""
    active = set(active)
    for op in block.ops:
        reads = list(op.operands)
        if op.regions:
            reads += _free_values(op)
        if any(v in active for v in reads):
            active.update(op.results)
    return active


def _names(args, tangent_positions) -> list:
    """Block argument names: the source's, then ``t_NAME`` for each tangent."""
    names = [a.name_hint for a in args]
    return [*names, *[f"t_{names[i]}" if names[i] else None for i in tangent_positions]]


class StructuredForward:
    """Emits a forward copy of a one-block function with a tangent beside each float value that
    one can reach; ``scf`` ops become ``scf`` ops with the tangents as extra carries and
    results.  ``tangents`` maps values of the copy to their tangent (absent: zero)."""

    def __init__(self, fwd, b: Builder):
        self.fwd = fwd
        self.b = b
        self.tangents: dict[Value, V] = {}

    def tangent(self, v) -> V | None:
        return self.tangents.get(_raw(v))

    def tangent_or_zero(self, v) -> V:
        t = self.tangent(v)
        return t if t is not None else self.b.zeros_like(v)

    def block(self, block: Block, vmap: dict) -> list[Value]:
        """Copy ``block`` but its terminator with tangents; returns the terminator's operands mapped."""
        term = block.terminator
        for op in block.ops:
            if op is term:
                break
            self.op(op, vmap)
        return [vmap.get(v, v) for v in term.operands]

    def active_free(self, op: Operation, vmap: dict) -> set:
        return {v for v in _free_values(op) if self.tangent(vmap.get(v, v)) is not None}

    def op(self, op: Operation, vmap: dict) -> None:
        b = self.b
        operands = [vmap.get(v, v) for v in op.operands]
        has_tangent = any(self.tangent(v) is not None for v in operands)
        if op.regions and (has_tangent or self.active_free(op, vmap)):
            if isinstance(op, ForOp):
                return self.for_(op, vmap)
            if isinstance(op, WhileOp):
                return self.while_(op, vmap)
            if isinstance(op, IfOp):
                return self.if_(op, vmap)
        if not has_tangent or not any(is_float(r.type) for r in op.results):
            b.insert(op.clone(vmap))
            return
        ts = [self.tangent(v) for v in operands]
        if isinstance(op, CallOp):
            return self.call(op, operands, ts, vmap)
        apply_jvp_rule(b, b.insert(op.clone(vmap)), ts, self.tangents)

    def call(self, op: CallOp, operands: list, ts: list, vmap: dict) -> None:
        b = self.b
        callee = function(self.fwd.module, op.callee, "callee", mode="forward", at=op)
        ft = callee.function_type
        name = self.fwd.jvp_function(callee)
        floats_in = [i for i, t in enumerate(ft.inputs) if is_float(t)]
        floats_out = [i for i, t in enumerate(ft.results) if is_float(t)]
        ins = [ts[i] if ts[i] is not None else b.zeros_like(operands[i]) for i in floats_in]
        with b.located(op.loc):
            outs = b.call(name, *operands, *ins, results=[*ft.results, *[ft.results[i] for i in floats_out]])
        outs = outs if isinstance(outs, tuple) else (outs,)
        for old, new in zip(op.results, outs):
            vmap[old] = new.value
        for i, t in zip(floats_out, outs[len(ft.results):]):
            self.tangents[outs[i].value] = t

    def _map_results(self, op: Operation, new: Operation, active: list, vmap: dict) -> None:
        n = len(op.results)
        for old, r in zip(op.results, new.results):
            vmap[old] = r
        for i, t in zip(active, new.results[n:]):
            self.tangents[new.results[i]] = V(self.b, t)

    def for_(self, op: ForOp, vmap: dict) -> None:
        b = self.b
        body = op.body
        inits = [vmap.get(v, v) for v in op.inits]
        free = self.active_free(op, vmap)
        active = {i for i, v in enumerate(inits) if is_float(v.type) and self.tangent(v) is not None}
        while True:  # a carry is active when its initial value or the body gives it a tangent
            reached = _reached(body, free | {body.args[1 + i] for i in active})
            more = active | {i for i, v in enumerate(body.terminator.operands)
                             if is_float(v.type) and v in reached}
            if more == active:
                break
            active = more
        active = sorted(active)
        t_inits = [self.tangent_or_zero(inits[i]).value for i in active]
        bounds = [vmap.get(v, v) for v in op.operands[:3]]
        types = [*op.result_types, *[op.result_types[i] for i in active]]
        new_body = Block([body.args[0].type, *types], arg_names=_names(body.args, [1 + i for i in active]))
        new = b.insert(ForOp([*bounds, *inits, *t_inits], types, dict(op.attributes),
                             regions=[Region([new_body])], loc=op.loc))
        n = len(inits)
        vmap[body.args[0]] = new_body.args[0]
        for a, na in zip(body.args[1:], new_body.args[1:]):
            vmap[a] = na
        for i, t in zip(active, new_body.args[1 + n:]):
            self.tangents[new_body.args[1 + i]] = V(b, t)
        with b.at(new_body):
            outs = self.block(body, vmap)
            b.insert(YieldOp([*outs, *[self.tangent_or_zero(outs[i]).value for i in active]], [], loc=op.loc))
        self._map_results(op, new, active, vmap)

    def while_(self, op: WhileOp, vmap: dict) -> None:
        b = self.b
        before, after = op.before.entry, op.after.entry
        inits = [vmap.get(v, v) for v in op.operands]
        free = self.active_free(op, vmap)
        states = {i for i, v in enumerate(inits) if is_float(v.type) and self.tangent(v) is not None}
        while True:
            reached = _reached(before, free | {before.args[i] for i in states})
            forwarded = {j for j, v in enumerate(before.terminator.operands[1:])
                         if is_float(v.type) and v in reached}
            reached = _reached(after, free | {after.args[j] for j in forwarded})
            more = states | {i for i, v in enumerate(after.terminator.operands) if is_float(v.type) and v in reached}
            if more == states:
                break
            states = more
        states, forwarded = sorted(states), sorted(forwarded)
        state_types = [v.type for v in inits]
        result_types = list(op.result_types)
        new_before = Block([*state_types, *[state_types[i] for i in states]], arg_names=_names(before.args, states))
        new_after = Block([*result_types, *[result_types[j] for j in forwarded]],
                          arg_names=_names(after.args, forwarded))
        t_inits = [self.tangent_or_zero(inits[i]).value for i in states]
        new = b.insert(WhileOp([*inits, *t_inits], [*result_types, *[result_types[j] for j in forwarded]],
                               dict(op.attributes), regions=[Region([new_before]), Region([new_after])],
                               loc=op.loc))
        for block, new_block, active in ((before, new_before, states), (after, new_after, forwarded)):
            n = len(block.args)
            for a, na in zip(block.args, new_block.args):
                vmap[a] = na
            for i, t in zip(active, new_block.args[n:]):
                self.tangents[new_block.args[i]] = V(b, t)
        with b.at(new_before):
            outs = self.block(before, vmap)
            values = outs[1:]
            b.insert(ConditionOp([outs[0], *values, *[self.tangent_or_zero(values[j]).value for j in forwarded]],
                                 [], loc=before.terminator.loc))
        with b.at(new_after):
            outs = self.block(after, vmap)
            b.insert(YieldOp([*outs, *[self.tangent_or_zero(outs[i]).value for i in states]], [], loc=op.loc))
        self._map_results(op, new, forwarded, vmap)

    def if_(self, op: IfOp, vmap: dict) -> None:
        b = self.b
        free = self.active_free(op, vmap)
        active = set()
        for region in op.regions:
            if region.is_empty:
                continue
            reached = _reached(region.entry, free)
            active |= {i for i, v in enumerate(region.entry.terminator.operands) if is_float(v.type) and v in reached}
        active = sorted(active)
        types = [*op.result_types, *[op.result_types[i] for i in active]]
        with b.located(op.loc), b.if_(vmap.get(op.operands[0], op.operands[0]), types) as branch:
            for region, enter in ((op.regions[0], branch.then_), (op.regions[1], branch.else_)):
                with enter():
                    if region.is_empty:
                        branch.yield_()
                        continue
                    outs = self.block(region.entry, vmap)
                    branch.yield_(*outs, *[self.tangent_or_zero(outs[i]) for i in active])
        self._map_results(op, branch.op, active, vmap)
