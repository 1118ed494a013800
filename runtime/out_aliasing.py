"""``out=`` arrays that share memory with an input: computed as numpy would, as if the
inputs were read before anything is written.

Compiled tensor code reads its inputs while it writes its outputs (a transpose
writes ``out[j, i]`` long before it reads ``x[j, i]``; a matmul reads a row of ``a``
many times after writing into it; plan-memory may park an intermediate in an
output), so an output that overlaps an input would silently give wrong numbers.
The call therefore copies such an input first - except for the one pattern that
is provably safe in place, which a user writing ``f(x, out=x)`` for an
elementwise ``f`` expects to be zero-copy: the loop-level function stores into
the output exactly once, and every read of the input is in that store's block,
before it, at the very same indices (so iteration ``I`` reads ``x[I]`` and then
writes ``out[I]``, and no iteration reads an element another one wrote), or in a top-level
op that runs before that store's loop (the forward pass reading a bias that the update at
the end of a training step overwrites).
Outputs that overlap each other are refused, as they have no meaning.

The second safe pattern is the GEMM epilogue (passes/lowering/gemm_library.py): an
output written only by one library GEMM as its C, whose D is the input, may be that
input's buffer when every other read of the input comes before the call (the GEMM
reads each element of D just before it writes the same element of C, and D never
after).  This is the SGD update ``w - lr * dw`` of a training step whose parameters
are donated: updated in place instead of copied first.
"""

from __future__ import annotations

import numpy as np


def in_place_safe(func, n_inputs: int, n_outputs: int) -> frozenset:
    """The pairs ``(k, j)`` for which output ``k`` may be input ``j``'s very buffer.

    ``func`` is the loop-level function (after the tensor pipeline): its parameters
    are the inputs, then the outputs."""
    args = func.body.entry.args
    pairs = set()
    for k in range(n_outputs):
        out = args[n_inputs + k]
        stores = _element_stores(out, func.body.entry)
        if stores is None:
            call = _gemm_writing(out)
            if call is not None:
                pairs |= {(k, j) for j in range(n_inputs) if args[j].type == out.type
                          and _only_epilogue_input(args[j], call, func.body.entry)}
            continue
        for j in range(n_inputs):
            if args[j].type == out.type and _reads_only_before(args[j], stores, func.body.entry):
                pairs.add((k, j))
    return frozenset(pairs)


# The operands of a library GEMM call (gemm_library.signature): C, then D and add_d.
_GEMM_C, _GEMM_D, _GEMM_ADD_D = 2, 7, 9


def _uses_through_views(value):
    """The uses of ``value`` and of the views of it (transitively), views themselves left out."""
    stack, found = [value], []
    while stack:
        v = stack.pop()
        for use in v.uses:
            if use.owner.name == "memref.view" and use.index == 0:
                stack.append(use.owner.results[0])
            else:
                found.append(use)
    return found


def _gemm_writing(out):
    """The library GEMM call that is the only writer and reader of ``out`` (as its C, through
    views), or None."""
    calls = set()
    for use in _uses_through_views(out):
        op = use.owner
        if op.name == "memref.dim":
            continue
        if op.name != "func.call" or not op.callee.startswith("irc_gemm_") or use.index not in (_GEMM_C, _GEMM_D):
            return None
        calls.add(op)
    if len(calls) != 1:
        return None
    (call,) = calls
    return call if _views_of(call.operands[_GEMM_C]) is out else None


def _views_of(value):
    """The buffer ``value`` is a view of (following views), or ``value`` itself."""
    while value.defining_op is not None and value.defining_op.name == "memref.view":
        value = value.defining_op.operands[0]
    return value


def _only_epilogue_input(value, call, block) -> bool:
    """Whether ``value`` is ``call``'s D, added (add_d a true constant), not its A or B, and
    every other use of it is in an op of ``block`` before the call."""
    from irc.patterns import constant_value

    add_d = constant_value(call.operands[_GEMM_ADD_D])
    if _views_of(call.operands[_GEMM_D]) is not value or add_d is None or not add_d.value \
            or any(_views_of(v) is value for v in call.operands[:_GEMM_C]):
        return False
    def top_level(op):
        while op.parent is not block:
            op = op.parent_op
        return op

    at = top_level(call)  # the call itself, or the parallel loop of calls of a threaded product
    if not _runs_once(call, block):
        return False
    for use in _uses_through_views(value):
        if use.owner is call:
            if use.index != _GEMM_D:
                return False
            continue
        top = top_level(use.owner)
        if top is at or not _before(top, at):
            return False
    return True


def _runs_once(op, block) -> bool:
    """Whether ``op`` runs once per element it writes: it is a top-level op of ``block``, or in
    a loop nest whose outermost loop is a top-level ``parallel`` scf.for (a tensor op's own
    loops), not in a loop or branch of the program's (an scf.for over tensors runs its body's
    stores again on the same elements, reading what the last iteration wrote)."""
    while op.parent is not block:
        op = op.parent_op
        if op.name not in ("scf.for",):
            return False
    return op.name != "scf.for" or "parallel" in op.attributes


def _element_stores(out, block):
    """The ``memref.store``s that write ``out`` once per element, when they (and ``memref.dim``,
    and reading its address) are all it is used by: one store that runs once per element
    (``_runs_once``), or two at the induction variables of two top-level parallel loops of which
    the second starts where the first ends (elementwise.py's aligning head and its main loop:
    disjoint ranges).  Else None."""
    stores = []
    for use in out.uses:
        op = use.owner
        if op.name == "memref.store" and use.index == 1:
            stores.append(op)
        elif op.name not in ("memref.dim", "memref.extract_aligned_pointer_as_index"):
            return None
    if not stores or len(stores) > 2 or not all(_runs_once(st, block) for st in stores):
        return None
    if len(stores) == 2:
        loops = [_top_level(st, block) for st in stores]
        if not all(lp.name == "scf.for" and list(st.operands[2:]) == [lp.body.args[0]]
                   for lp, st in zip(loops, stores)):
            return None
        first, second = loops if _before(loops[0], loops[1]) else loops[::-1]
        if second.operands[0] is not first.operands[1]:
            return None
    return stores


def _reads_only_before(value, stores, block=None) -> bool:
    """Whether every use of ``value`` is a ``memref.dim``, reading its address, a ``memref.load``
    in the block of one of ``stores`` before it and at its indices, or in a top-level op of
    ``block`` that runs before the first op holding a store (the stores are the output's only
    writers, so nothing is written there yet: the forward pass of a training step reads a bias
    long before its update)."""
    tops = [_top_level(st, block) for st in stores] if block is not None else []
    first = tops[-1] if len(tops) == 2 and _before(tops[1], tops[0]) else (tops[0] if tops else None)
    for use in value.uses:
        op = use.owner
        if op.name in ("memref.dim", "memref.extract_aligned_pointer_as_index"):
            continue
        if first is not None and (top := _top_level(op, block)) not in tops and _before(top, first):
            continue
        if op.name != "memref.load":
            return False
        if not any(op.parent is st.parent and list(op.operands[1:]) == list(st.operands[2:]) and _before(op, st)
                   for st in stores):
            return False
    return True


def _top_level(op, block):
    while op.parent is not block:
        op = op.parent_op
    return op


def _before(a, b) -> bool:
    op = a.next
    while op is not None:
        if op is b:
            return True
        op = op.next
    return False


def separate(name: str, inputs: list, outputs: list, safe: frozenset) -> list:
    """``inputs`` with every array that overlaps an output replaced by a copy, unless the
    overlap is the exact in-place pattern of ``safe``; outputs that overlap each other
    raise ValueError."""
    for k, out in enumerate(outputs):
        for k2 in range(k):
            if np.may_share_memory(out, outputs[k2]):
                raise ValueError(f"out[{k2}] and out[{k}] of @{name} share memory")
    result = list(inputs)
    for j in to_copy(inputs, outputs, safe):
        result[j] = inputs[j].copy()
    return result


def to_copy(inputs: list, outputs: list, safe: frozenset) -> list[int]:
    """The positions of the inputs that overlap an output other than as ``safe`` allows."""
    found = []
    for j, a in enumerate(inputs):
        if not isinstance(a, np.ndarray):
            continue
        # Both sides are C-contiguous (the call made them so): overlapping bounds is sharing memory.
        sharing = [k for k, out in enumerate(outputs) if np.may_share_memory(a, out)]
        if not sharing:
            continue
        exact = len(sharing) == 1 and _same_buffer(a, outputs[sharing[0]])
        if not (exact and (sharing[0], j) in safe and _only_alias(a, j, inputs)):
            found.append(j)
    return found


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    from .cpu.callconv import data_address

    return data_address(a) == data_address(b) and a.shape == b.shape and a.dtype == b.dtype


def _only_alias(a: np.ndarray, j: int, inputs: list) -> bool:
    """No other input shares ``a``'s memory (it would be read after the in-place writes)."""
    return not any(isinstance(b, np.ndarray) and i != j and np.may_share_memory(a, b) for i, b in enumerate(inputs))
