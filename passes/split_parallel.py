"""split-parallel: cut a function into segments so that a runtime can run parallel loops on threads.

A loop nest lowered from a tensor op often has an outermost ``scf.for`` whose
iterations are independent (the ``parallel`` attribute: each iteration writes its
own output elements).  For a function whose body is a straight sequence of such
loops, other loops and side-effect-free scalar ops, this pass adds *segment*
functions ``@f.seg0``, ``@f.seg1``, ...: each takes the parameters of ``@f`` that it
reads (``params``: their positions in ``@f``'s, in order) and runs one part of it - a
parallel loop, over a sub-range given by two extra ``index`` parameters ``%lo``, ``%hi``
(which must be a multiple of the step apart from the loop's lower bound), or a run of
serial loops.  Each segment
recomputes the constants, views and sizes it uses.  Running the segments in
order, every parallel one over any partition of its range, is ``@f``; ``@f``
itself becomes exactly that, calls of its segments in order over their whole ranges (what a
single thread and the interpreter run), so each loop is compiled once, in its segment.
Other top-level ops without results (copies, stores, serial loops) run in the
serial segments, in order.

A segment takes only what it reads because a lowered graph has one parameter per weight,
input, output and arena, and one segment per loop nest: a 2-layer GPT-2's backward graph
has about 100 segments and 80 parameters, and segments that took them all were most of
its LLVM IR and of its compile time.

``@f`` gets ``segments = ["f.seg0", ...]``; every segment gets ``params``; a parallel
segment gets ``parallel_range = [lb, ub, step]`` and ``work``, the number of ops it executes
(an estimate: what starting threads must be worth).  Segments are private: only ``@f`` calls
them.  With ``threads`` > 1, the call of a parallel segment whose work is worth more than one
thread (``min-work`` ops each) gets ``chunks = k`` (at most ``threads``, at most its trips):
the CPU backend runs such a call as ``k`` chunks of its range on irc's thread pool
(runtime/cpu/pool.py); the interpreter, which ignores the attribute, runs it whole.

A function that allocates at its top level or returns values is left alone, and so is one
where a value made once (a load, a loop's or a call's result: it belongs to the serial
segment that makes it) is read by another segment.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.attributes import ArrayAttr, IntegerAttr, StringAttr, UnitAttr
from irc.passmanager import Pass
from irc.patterns import constant_value
from irc.types import FunctionType, i64, index

MAX_CHUNKS = 1 << 15
"""The most chunks a call may run in (what the CPU backend's thread pool can count)."""

# Side-effect-free ops a segment may recompute (views and sizes may fault, never write).
_CLONABLE = frozenset({"memref.view", "memref.dim"})


def _clonable(op) -> bool:
    return not op.regions and (op.is_pure or op.name in _CLONABLE)


def _parallel_bounds(loop):
    """[lb, ub, step] of a parallel ``scf.for``, or of a call of a loop nest that outline-loops
    made (its bounds are its first two operands, its step an attribute); else None."""
    if "parallel" not in loop.attributes or loop.results:
        return None
    if loop.name == "func.call":
        if "step" not in loop.attributes:
            return None
        bounds = [constant_value(v) for v in loop.operands[:2]]
        if any(b is None for b in bounds) or loop.attributes["step"].value <= 0:
            return None
        return [bounds[0].value, bounds[1].value, loop.attributes["step"].value]
    bounds = [constant_value(v) for v in loop.operands[:3]]
    if any(b is None for b in bounds) or bounds[2].value <= 0:
        return None
    return [b.value for b in bounds]


def plan_segments(func, min_work: int = 0) -> list[tuple[list, list | None]] | None:
    """[(top-level ops, parallel range or None)] for ``func``, or None if it cannot be split.

    A parallel loop estimated to do less than ``min_work`` ops runs serially, in a serial
    segment with its neighbours: a runtime would not start threads for it anyway.

    An op that makes a value once (a load, a loop's result, a call's result) and the pure
    ops computing from it are *local* to the serial segment they fall in: each segment is a
    function of its own, so such a value must not be read by another segment (the loss of a
    training step: loaded, negated and stored back, all in one serial segment).  An
    allocation is never local: its buffer outlives the segment."""
    entry = func.body.entry
    if func.body.first_block is not func.body.last_block:
        return None
    segments: list[tuple[list, list | None]] = []
    serial: list = []
    local: dict = {}  # value -> index of the segment (in 'segments', once closed) that defines it
    for op in entry.ops:
        if op is entry.terminator:
            if op.name != "func.return" or op.operands:
                return None
            break
        reads_local = _reads(op, local)
        if _clonable(op) and not reads_local:
            continue
        if op.name in ("memref.alloc", "memref.alloca"):
            return None
        bounds = _parallel_bounds(op) if op.name in ("scf.for", "func.call") else None
        if bounds is not None and min_work and estimated_work(op) < min_work:
            bounds = None
        if bounds is None:
            if any(k != len(segments) for k in reads_local):  # a value of an earlier segment
                return None
            serial.append(op)
            local.update((r, len(segments)) for r in op.results)
            continue
        if reads_local:
            return None
        if serial:
            segments.append((serial, None))
            serial = []
        segments.append(([op], bounds))
    if serial:
        segments.append((serial, None))
    if not any(bounds for _, bounds in segments):
        return None
    return segments


def _reads(op, local: dict) -> set:
    """The segments whose local values ``op`` (or an op nested in it) reads."""
    found = set()
    for inner in ([op] if not op.regions else op.walk()):
        for v in inner.operands:
            k = local.get(v)
            if k is not None:
                found.add(k)
    return found


def estimated_work(loop) -> int:
    """Ops a loop executes, counting nested loops with constant bounds by their trip counts
    (one trip where unknown): what a runtime weighs against the cost of starting threads.
    A loop or a call of an outlined loop nest (outline-loops) may say its own (``work``)."""
    if "work" in loop.attributes:
        return loop.attributes["work"].value
    if loop.name == "func.call":
        return 1
    bounds = [constant_value(v) for v in loop.operands[:3]]
    trips = 1
    if all(b is not None for b in bounds) and bounds[2].value > 0:
        trips = _trips(*(b.value for b in bounds))
    per_trip = 0
    for op in loop.regions[0].entry.ops:
        if op.name == "scf.for":
            per_trip += estimated_work(op)
        else:  # an op may say what it costs (a GEMM library call: its multiply-adds), else one
            per_trip += op.attributes["work"].value if "work" in op.attributes else 1
    return trips * per_trip


def _needed_prologue(loops, entry, position: dict) -> list:
    """The top-level clonable ops the loops use, transitively, in program order (``position``:
    each top-level op's index; not the segment's own ops: a pure op on a local value is one of them)."""
    needed: set = set()
    own = set(loops)
    stack = [v for loop in loops for op in loop.walk() for v in op.operands]
    while stack:
        v = stack.pop()
        op = getattr(v, "op", None)
        if op is not None and op.parent is entry and op not in needed and op not in own and _clonable(op):
            needed.add(op)
            stack.extend(op.operands)
    return sorted(needed, key=position.__getitem__)


def _params_read(func, ops) -> list[int]:
    """The positions of ``func``'s parameters that ``ops`` (and the ops nested in them) read."""
    position = {a: k for k, a in enumerate(func.args)}
    read = {position[v] for op in ops for inner in op.walk() for v in inner.operands if v in position}
    return sorted(read)


def build_segment(func, name: str, loops, bounds, position: dict):
    from irc.dialects.func import FuncOp, ReturnOp

    entry = func.body.entry
    prologue = _needed_prologue(loops, entry, position)
    params = _params_read(func, [*prologue, *loops])
    inputs = [func.args[k] for k in params]
    extra = [index, index] if bounds else []
    seg = FuncOp.build(name, FunctionType([*(a.type for a in inputs), *extra], []),
                       arg_names=[a.name_hint for a in inputs] + (["lo", "hi"] if bounds else []))
    seg.attributes["params"] = ArrayAttr(IntegerAttr(k, i64) for k in params)
    body = seg.body.entry
    value_map = dict(zip(inputs, body.args))
    for op in prologue:
        body.append(op.clone(value_map))
    for loop in loops:
        new = loop.clone(value_map)
        if bounds:
            new.set_operand(0, body.args[len(inputs)])
            new.set_operand(1, body.args[len(inputs) + 1])
            seg.attributes["parallel_range"] = ArrayAttr(IntegerAttr(b, i64) for b in bounds)
            seg.attributes["work"] = IntegerAttr(estimated_work(loop), i64)
        body.append(new)
    ret = ReturnOp([])
    ret.loc = func.loc
    body.append(ret)
    for op in list(body.ops_reversed()):  # the replaced bounds, if nothing else reads them
        if op.is_pure and not op.regions and all(r.first_use is None for r in op.results):
            op.erase()
    seg.loc = func.loc
    return seg


@dataclass
class SplitParallel(Pass):
    """Add segment functions that run a function's parallel loops over sub-ranges (for threads)."""

    name = "split-parallel"
    min_work: int = 0  # a parallel loop of fewer ops (its ``work``) joins a serial segment
    threads: int = 1  # threads a parallel call may use (``chunks``); 1: none are marked

    def __post_init__(self):
        from irc.passmanager import PipelineError

        if self.min_work < 0:
            raise PipelineError(f"option 'min-work' of pass 'split-parallel' expects a count >= 0, got {self.min_work}")
        if not 1 <= self.threads <= MAX_CHUNKS:
            raise PipelineError(f"option 'threads' of pass 'split-parallel' expects 1 to {MAX_CHUNKS}, "
                                f"got {self.threads}")

    def run(self, module, stats) -> None:
        for func in list(module.functions):
            if func.is_declaration or "segments" in func.attributes or "parallel_range" in func.attributes \
                    or "segment_of" in func.attributes:
                continue
            plan = plan_segments(func, self.min_work)
            if plan is None:
                continue
            names = []
            anchor = func
            position = {op: k for k, op in enumerate(func.body.entry.ops)}
            for k, (loops, bounds) in enumerate(plan):
                name = f"{func.sym_name}.seg{k}"
                seg = build_segment(func, name, loops, bounds, position)
                seg.attributes["segment_of"] = StringAttr(func.sym_name)
                module.body.insert_after(seg, anchor)
                anchor = seg
                names.append(name)
                stats.add("parallel-segments" if bounds else "serial-segments")
            func.attributes["segments"] = ArrayAttr(StringAttr(n) for n in names)
            _call_segments(func, plan, names, self.threads, self.min_work)


def chunk_count(bounds: list, work: int, threads: int, min_work: int) -> int:
    """How many chunks a parallel segment's call runs in: one per thread, each of at least
    ``min_work`` ops and one trip."""
    return max(1, min(threads, _trips(*bounds), work // max(1, min_work)))


def _trips(lb: int, ub: int, step: int) -> int:
    """Iterations of a loop from ``lb`` to ``ub`` by ``step`` (> 0)."""
    return max(0, -(-(ub - lb) // step))


def _call_segments(func, plan, names, threads: int, min_work: int) -> None:
    """``@f``'s body becomes calls of its segments in order (each parallel one over its whole
    range, in ``chunks`` where worth it), so that every loop is compiled once, in its segment;
    segments are private and ``noinline`` for the same reason."""
    from irc.dialects.func import CallOp

    from irc.builder import Builder

    module_ops = {op.attributes["sym_name"].value: op for op in func.parent.ops if "sym_name" in op.attributes}
    ret = func.body.entry.terminator
    b = Builder(loc=func.loc, reuse_constants=True).before_op(ret)
    for (ops, bounds), name in zip(plan, names):
        seg = module_ops[name]
        seg.attributes["noinline"] = UnitAttr()
        seg.attributes["sym_visibility"] = StringAttr("private")
        args = [func.args[k.value] for k in seg.attributes["params"].elements]
        if bounds:
            args += [b.index(bounds[0]).value, b.index(bounds[1]).value]
        call = CallOp.build(name, args, [])
        call.loc = ops[0].loc
        if bounds and threads > 1:
            chunks = chunk_count(bounds, seg.attributes["work"].value, threads, min_work)
            if chunks > 1:
                call.attributes["chunks"] = IntegerAttr(chunks, i64)
        ret.parent.insert_before(call, ret)
        for op in reversed(ops):
            op.erase()
    for op in list(func.body.entry.ops_reversed()):  # what only the segments read now
        if op is not ret and op.is_pure and not op.regions and all(r.first_use is None for r in op.results):
            op.erase()
