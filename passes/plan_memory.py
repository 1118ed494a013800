"""plan-memory: put a function's temporary buffers in one arena, reusing memory by liveness.

Every statically sized ``memref.alloc`` that is freed by a ``memref.dealloc`` in the
same block (as ``tensor-to-loops`` leaves them, in the function body, a loop body or
a branch) and does not escape (it is only loaded from, stored to, viewed, copied, or
passed to a call marked ``nocapture``; never returned or passed to another call) is
live from its alloc to its dealloc, counting positions over every op of the function
in pre-order.  With alloc and dealloc in one block, that interval covers everything
that runs in between, nested loops included: a buffer alive across a loop (allocated
before it, freed after) never shares bytes with a temporary of the loop body, while
the body's temporaries reuse each other's bytes in every iteration.

Buffers whose lives overlap get disjoint byte ranges of one arena; a buffer
allocated after another is freed reuses its bytes.  Offsets are chosen largest
buffer first, each at the lowest offset (aligned to ``ALIGN``) that does not
collide with a buffer live at the same time, the usual greedy heuristic for this
NP-hard packing.  Each alloc becomes
a ``memref.view`` of the arena and its dealloc disappears.

With ``arena=alloc`` (the default) the arena is one ``memref.alloc`` at the top
of the function, freed before each return.  With ``arena=argument`` it becomes a
last parameter ``memref<Nxi8>`` and the function gets ``arena_bytes = N``, so a
caller (``irc.compile``) can keep one arena across calls instead of asking the
system for memory each time.

A bufferized tensor function's output parameters are memory too: nothing reads
an output before the op that computes it writes it, so a temporary that dies
before that op may live in the output's bytes instead of the arena.  In an
n-layer network the layers then alternate between the output and one arena
buffer.  ``outputs=false`` keeps temporaries out of the outputs: for a call whose
outputs are its inputs' own buffers (donated parameters updated in place), where
an output's bytes hold the input until the op that writes the output.

Statistics: ``peak-bytes`` (the arena; summed over the module's functions, and
``peak-bytes @F`` for each function ``F``) against ``unplanned-bytes`` (the sum
of every planned buffer, what the program would hold if nothing were reused),
and ``buffers-in-outputs``.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.attributes import IntegerAttr, TypeAttr
from irc.builder import Builder
from irc.passmanager import Pass, PipelineError
from irc.types import FunctionType, MemRefType, i8, i64, index

ALIGN = 64
"""Byte alignment of every buffer in the arena (a cache line; enough for any vector load)."""

# Users of a buffer that neither keep it nor let it out of the function.  Reading its address
# as an index is one (elementwise.py's aligning head): no op turns an index back into a buffer.
_LOCAL_USERS = frozenset({"memref.load", "memref.store", "memref.view", "memref.copy", "memref.dim",
                          "memref.dealloc", "vector.load", "vector.store",
                          "memref.extract_aligned_pointer_as_index"})


def element_bytes(t: MemRefType) -> int:
    e = t.element_type
    width = getattr(e, "width", None)
    if width is None:
        width = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}.get(str(e), 64)
    return max(1, width // 8)


def byte_size(t: MemRefType) -> int:
    return element_bytes(t) * t.num_elements


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Interval:
    alloc: object
    dealloc: object
    start: int
    end: int
    size: int
    offset: int = 0
    home: OutputSpace | None = None  # None: the arena


@dataclass
class OutputSpace:
    """An output parameter's memory, free for temporaries until the op that first writes it."""

    buffer: object
    capacity: int
    free_before: int


def _lowest_offset(iv: Interval, placed: list[Interval]) -> int:
    busy = sorted((p.offset, p.offset + p.size) for p in placed if p.start <= iv.end and iv.start <= p.end)
    offset = 0
    for lo, hi in busy:
        if offset + iv.size <= lo:
            break
        offset = max(offset, _align(hi))
    return offset


def assign_offsets(intervals: list[Interval], outputs: list[OutputSpace] = ()) -> int:
    """Give each interval a home and an offset; return the arena size.

    Largest first; each goes to the first output space it fits in (dead before that output
    is written, at the lowest free offset below its capacity), else the arena at the lowest
    fitting offset.
    """
    placed: dict = {id(space): [] for space in outputs}
    arena: list[Interval] = []
    peak = 0
    for iv in sorted(intervals, key=lambda i: (-i.size, i.start)):
        for space in outputs:
            if iv.end < space.free_before:
                offset = _lowest_offset(iv, placed[id(space)])
                if offset + iv.size <= space.capacity:
                    iv.offset, iv.home = offset, space
                    placed[id(space)].append(iv)
                    break
        else:
            iv.offset = _lowest_offset(iv, arena)
            arena.append(iv)
            peak = max(peak, iv.offset + iv.size)
    return peak


def _escapes(value) -> bool:
    for use in value.uses:
        user = use.owner
        if user.name == "func.call" and "nocapture" in user.attributes:
            continue  # the callee uses the buffer during the call only (BLAS gemm)
        if user.name not in _LOCAL_USERS:
            return True
        if user.name == "memref.store" and use.index == 0:  # the buffer itself stored somewhere
            return True
        if user.name == "memref.view" and _escapes(user.results[0]):
            return True
    return False


def plan_function(func, arena: str, stats, use_outputs: bool = True) -> None:
    entry = func.body.entry
    position = {op: i for i, op in enumerate(func.walk())}
    intervals = []
    for op in position:
        if op.name != "memref.alloc" or op.operands or not op.results[0].type.has_static_shape:
            continue
        buf = op.results[0]
        if _escapes(buf):
            continue
        frees = [u.owner for u in buf.uses if u.owner.name == "memref.dealloc"]
        if len(frees) != 1 or frees[0].parent is not op.parent:
            continue
        intervals.append(Interval(op, frees[0], position[op], position[frees[0]], _align(byte_size(buf.type))))
    if not intervals:
        return
    outputs = _output_spaces(func, position) if use_outputs else []
    peak = assign_offsets(intervals, outputs)
    in_outputs = [iv for iv in intervals if iv.home is not None]
    arena_type = MemRefType([peak], i8)
    if arena == "argument":
        base = entry.add_argument(arena_type, "arena")
        ft = func.function_type
        func.attributes["function_type"] = TypeAttr(FunctionType([*ft.inputs, arena_type], ft.results))
        func.attributes["arena_bytes"] = IntegerAttr(peak, i64)
    else:
        from irc.dialects.memref import AllocOp

        alloc = AllocOp.build(arena_type)
        alloc.loc = func.loc
        entry.prepend(alloc)
        base = alloc.results[0]
        for block in func.body.blocks:
            term = block.terminator
            if term is not None and term.name == "func.return":
                _insert_dealloc(base, term)
    from irc.dialects.arith import ConstantOp
    from irc.dialects.memref import ViewOp

    for iv in intervals:
        b = Builder().before_op(iv.alloc)
        offset = b.create(ConstantOp.build(IntegerAttr(iv.offset, index)))
        home = base if iv.home is None else iv.home.buffer
        view = b.insert(ViewOp.build(home, offset, iv.alloc.results[0].type))
        view.loc = iv.alloc.loc
        iv.alloc.results[0].replace_all_uses_with(view.results[0])
        iv.dealloc.erase()
        iv.alloc.erase()
    stats.add("buffers-planned", len(intervals))
    stats.add("peak-bytes", peak)
    stats.add(f"peak-bytes @{func.sym_name}", peak)  # a module's functions each have their own arena
    stats.add("unplanned-bytes", sum(i.size for i in intervals))
    if in_outputs:
        stats.add("buffers-in-outputs", len(in_outputs))


def _output_spaces(func, position: dict) -> list[OutputSpace]:
    """The output parameters of a bufferized tensor function (see tensor_signature), each
    free until the first top-level op that uses it (a loop that writes it in its body holds
    it from its start: its second iteration may read what the first wrote)."""
    sig = func.attributes.get("tensor_signature")
    if sig is None:
        return []
    from irc.types import TensorType

    entry = func.body.entry
    first = len(sig.type.inputs)
    count = sum(isinstance(t, TensorType) for t in sig.type.results)
    spaces = []
    for out in entry.args[first:first + count]:
        if not isinstance(out.type, MemRefType) or not out.type.has_static_shape:
            continue
        uses = []
        for use in out.uses:
            user = use.owner
            while user.parent is not entry:
                user = user.parent_op
            uses.append(position[user])
        if uses:
            spaces.append(OutputSpace(out, byte_size(out.type), min(uses)))
    return spaces


def _insert_dealloc(buf, before) -> None:
    from irc.dialects.memref import DeallocOp

    op = DeallocOp([buf], [])
    op.loc = before.loc
    before.parent.insert_before(op, before)


@dataclass
class PlanMemory(Pass):
    """Assign temporary buffers to one arena by liveness (reuse dead buffers' memory)."""

    name = "plan-memory"
    arena: str = "alloc"
    outputs: bool = True  # temporaries may live in output bytes not yet written (false: arena only)

    def __post_init__(self):
        if self.arena not in ("alloc", "argument"):
            raise PipelineError(f"plan-memory: arena must be 'alloc' or 'argument', got '{self.arena}'")

    def triggers(self):
        return frozenset({"memref.alloc"})

    def run(self, module, stats) -> None:
        for func in module.functions:
            if not func.is_declaration:
                plan_function(func, self.arena, stats, self.outputs)
