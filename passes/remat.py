"""remat: trade compute for memory by recomputing forward values late (Chen et al. 2016).

A reverse-mode gradient keeps every forward value its backward reads alive from
the forward until the backward: for an n-layer network, n activations at the
turn from forward to backward.  Chen, Xu, Zhang and Guestrin ("Training Deep
Nets with Sublinear Memory Cost", 2016) cut the forward into k segments, keep
only the values at segment boundaries (the checkpoints) and, just before the
backward of a segment needs its values, run that segment's forward again from
its checkpoint.  With k = sqrt(n) equal segments, at most about 2*sqrt(n)
activations are alive at once, for the price of one extra forward pass.

The pass needs no knowledge of how the function was made (``grad``, ``vjp``, a
hand-written backward, an inlined training step): it looks only at the straight
line of ops in a function's entry block.

1. The *turn* is the point between two ops across which the most tensor bytes
   are alive (values defined before it and used after it; parameters, scalars
   and uses by the return, whose values live in the caller's memory, do not
   count).  Ops up to the turn are the forward, the ops after it the
   backward.  In a gradient the live set grows through the forward and shrinks
   through the backward, so this is where one ends and the other begins.
2. The *crossing* values are the forward's tensor values used after the turn.
   The forward is cut into ``segments`` runs of ops, each ending just after a
   crossing value is defined.
3. A value of one segment used by the forward ops of a later segment is a
   *checkpoint* and stays.  Every other crossing value of a segment (but the
   last segment's, whose backward starts right at the turn) is recomputed: the
   segment's ops it depends on are copied, in order, just before the first
   backward op that reads one of them, and the backward reads the copies.  The
   originals then die inside the forward.

Segment sizes (``layout``): while the backward of segment s runs, the
checkpoints of the s segments before it and the values of segment s are alive.
Chen et al.'s equal segments (``layout=uniform``, k = round(sqrt(n))) give a
peak of about k + n/k = 2*sqrt(n).  Sizes that decrease by one value per segment
(``layout=decreasing``, the default: k, k-1, ..., 1 with k(k+1)/2 >= n) make
s + size(s) the same for every segment, about sqrt(2n): 8 values instead of 11
for n = 32, for the same single extra forward pass (the idea of Griewank's
binomial checkpointing, restricted to one recomputation).

Only ops without side effects are copied (pure ops, or ops with regions whose
contents are pure); anything else, a value the function returns, and scalars
stay as they are.  Copies compute exactly what the originals computed, so the
function's results are bit for bit the same.  The copies carry the unit
attribute ``remat``: it shows in the printed IR which ops are recomputations,
and ``cse`` does not merge them back into the originals (it merges only ops with
equal attributes).  Run ``remat`` after the graph rewrites and ``cse``, before
``fuse-elementwise`` and memory planning: the tensor pipeline's order.

Statistics: ``segments`` (with recomputation), ``checkpoints``,
``values-recomputed`` and ``ops-recomputed`` (the extra forward).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from irc.attributes import UnitAttr
from irc.diagnostics import IRError
from irc.operation import Operation
from irc.passmanager import Pass, PipelineError
from irc.patterns import is_removable
from irc.types import TensorType

MARK = "remat"
"""The unit attribute on recomputed ops."""


def value_bytes(v) -> int:
    """Bytes of a tensor value (a dynamic dimension counts as 1); 0 for anything else.

    A tensor made from no tensor (a constant, a splat of a scalar) counts 0 too: constants
    live in the program, not in the arena, and fusion copies a splat into each loop that
    reads it, so keeping one alive costs nothing and recomputing it gains nothing."""
    t = v.type
    if not isinstance(t, TensorType):
        return 0
    op = v.defining_op
    if op is not None and not op.regions and not any(isinstance(o.type, TensorType) for o in op.operands):
        return 0
    width = getattr(t.element_type, "width", None) or 64
    n = 1
    for d in t.shape:
        n *= d if d is not None and d >= 0 else 1
    return n * max(1, width // 8)


def copyable(op: Operation) -> bool:
    """May ``op`` be run a second time?  Free of side effects (pure, or only pure ops inside)."""
    return not op.is_terminator and is_removable(op)


@dataclass
class Plan:
    """How one function is rematerialised."""

    segment_of: dict  # forward op -> its segment
    segments: int
    checkpoints: set
    recomputed: dict  # segment -> crossing values to recompute, in forward order


def top_level_user(use, block):
    """The op of ``block`` that contains the user of ``use`` (None if outside the block)."""
    op = use.owner
    while op is not None and op.parent is not block:
        op = op.parent_op
    return op


def boundaries(total: int, k: int, layout: str) -> list[float]:
    """Where (in crossing bytes from the start) each of ``k`` segments ends."""
    weights = [1] * k if layout == "uniform" else list(range(k, 0, -1))
    ends, acc = [], 0
    for w in weights:
        acc += w
        ends.append(total * acc / sum(weights))
    return ends


def default_segments(n: int, layout: str) -> int:
    """uniform: round(sqrt(n)), so k + n/k is least; decreasing: the least k with
    k(k+1)/2 >= n, so that s + size(s) <= k for every segment s."""
    if layout == "uniform":
        return max(1, round(math.sqrt(n)))
    return max(1, math.ceil((math.sqrt(8 * n + 1) - 1) / 2))


def plan(block, segments: int | None, layout: str = "decreasing") -> Plan | None:
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    term = block.terminator
    returned = set(term.operands) if term is not None else set()
    # A use inside a nested region counts at the position of the top-level op holding it.  The
    # terminator's uses do not count: results live in the caller's memory (the output parameters
    # of a bufferized function), not among the temporaries.
    position_of_uses = {}
    for op in ops:
        for r in op.results:
            users = (top_level_user(u, block) for u in r.uses)
            position_of_uses[r] = sorted(position[u] for u in users if u is not None and u is not term)
    t = turn(ops, position_of_uses)
    if t < 0:
        return None
    forward = ops[:t + 1]
    crossing = [r for op in forward for r in op.results
                if value_bytes(r) and position_of_uses[r] and position_of_uses[r][-1] > t]
    if len(crossing) < 2:
        return None
    k = min(segments if segments is not None else default_segments(len(crossing), layout), len(crossing))
    total = sum(value_bytes(r) for r in crossing)
    ends = boundaries(total, k, layout)
    crossing_set = set(crossing)
    segment_of = {}
    before = 0  # crossing bytes defined by earlier ops
    for op in forward:
        segment_of[op] = min(k - 1, bisect.bisect_right(ends, before))
        before += sum(value_bytes(r) for r in op.results if r in crossing_set)
    checkpoints = set()
    for op in forward:
        for nested in op.walk():  # the op itself, then any ops nested in it
            for v in nested.operands:
                d = v.defining_op
                if d in segment_of and segment_of[d] < segment_of[op] and value_bytes(v):
                    checkpoints.add(v)
    last = segment_of[forward[-1]]
    recomputed: dict = {}
    for r in crossing:
        op = r.defining_op
        s = segment_of[op]
        if s == last or r in checkpoints or r in returned or not copyable(op):
            continue
        recomputed.setdefault(s, []).append(r)
    return Plan(segment_of, k, checkpoints, recomputed)


def turn(ops, position_of_uses) -> int:
    """The index t such that the most tensor bytes are alive between ops[t] and ops[t + 1]."""
    delta = [0] * (len(ops) + 1)
    for i, op in enumerate(ops):
        for r in op.results:
            size = value_bytes(r)
            uses = position_of_uses[r]
            if size and uses and uses[-1] > i:
                delta[i] += size
                delta[uses[-1]] -= size
    best, best_at, live = 0, -1, 0
    for i in range(len(ops)):
        live += delta[i]
        if live > best:
            best, best_at = live, i
    return best_at


def rematerialize(func, segments: int | None, stats, layout: str = "decreasing") -> None:
    block = func.body.entry
    if block is None:
        return
    p = plan(block, segments, layout)
    if p is None or not p.recomputed:
        return
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    t = max(position[op] for op in p.segment_of)
    copies = 0
    for s, values in sorted(p.recomputed.items()):
        late = [top_level_user(u, block) for v in values for u in v.uses]
        late = [op for op in late if op is not None and position.get(op, -1) > t]
        if not late:
            continue
        anchor = min(late, key=position.__getitem__)
        needed = _closure(values, s, p)
        vmap: dict = {}
        for op in sorted(needed, key=position.__getitem__):
            new = op.clone(vmap)
            new.attributes[MARK] = UnitAttr()
            block.insert_before(new, anchor)
            copies += 1
        for v in values:
            for use in list(v.uses):
                user = top_level_user(use, block)
                if user is not None and position.get(user, -1) > t:
                    use.owner.set_operand(use.index, vmap[v])
        stats.add("values-recomputed", len(values))
    stats.add("ops-recomputed", copies)
    stats.add("segments", p.segments)
    stats.add("checkpoints", len(p.checkpoints))


def remat_function(module, name: str, stats, segments: int | None = None) -> None:
    """Rematerialise ``@name`` (what ``grad{remat=true}`` runs on the function it made)."""
    rematerialize(module.lookup(name), segments, stats)


def _closure(values, segment: int, p: Plan) -> set:
    """The ops of ``segment`` that recomputing ``values`` runs: their defining ops and, through
    their tensor operands, every copyable non-checkpoint op of the same segment they read."""
    needed: set = set()
    stack = [v.defining_op for v in values]
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        for nested in op.walk():
            for v in nested.operands:
                d = v.defining_op
                if (d is not None and p.segment_of.get(d) == segment and v not in p.checkpoints
                        and value_bytes(v) and copyable(d)):
                    stack.append(d)
    return needed


@dataclass
class Remat(Pass):
    """Recompute forward segments just before the backward needs them (Chen et al. 2016)."""

    name = "remat"
    func: str = ""  # functions to rewrite, e.g. f_grad,g_grad (default: every function)
    segments: int = 0  # checkpoint segments (default: about sqrt(2n), or sqrt(n) if uniform; n values cross the turn)
    layout: str = "decreasing"  # segment sizes: decreasing (k, k-1, ..., 1) or uniform (Chen et al.'s)

    def __post_init__(self):
        if self.segments < 0:
            raise PipelineError(f"option 'segments' of pass 'remat' expects a positive count, got {self.segments}")
        if self.layout not in ("decreasing", "uniform"):
            raise PipelineError(f"option 'layout' of pass 'remat' expects 'decreasing' or 'uniform', got '{self.layout}'")
        self.names = [n for n in self.func.replace(" ", "").split(",") if n]

    def run(self, module, stats) -> None:
        funcs = [f for f in module.functions if not f.is_declaration]
        if self.names:
            by_name = {f.sym_name: f for f in funcs}
            for n in self.names:
                if n not in by_name:
                    known = ", ".join("@" + f.sym_name for f in funcs) or "none"
                    raise IRError(f"remat: no function @{n} in the module (functions: {known})", module.loc)
            funcs = [by_name[n] for n in self.names]
        for f in funcs:
            rematerialize(f, self.segments or None, stats, self.layout)
