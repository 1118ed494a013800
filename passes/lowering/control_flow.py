"""Bufferization of ``scf.if``, ``scf.for`` and ``scf.while`` with tensors (bufferize.py calls it).

Each region's block is straight-line tensor code, bufferized like a function body
(``Bufferizer.lower_block``), so loops and branches nest to any depth.  Memrefs never
flow through the scf ops: a tensor the op carries or returns lives in one buffer that
the regions read and write, and afterwards the op carries its scalars only.

* ``scf.if``: one buffer per tensor result (the proposed destination of the result,
  an output parameter for instance, when the if may write it; else a new one).  Each
  branch computes its yielded value straight into it where that op may write there, else
  copies it in at the end of the branch.
* ``scf.for``: one *carried* buffer per tensor iter_arg, holding the iter_arg during an
  iteration and the result afterwards.  It is the result's proposed destination (the
  init copied in), or the init's own buffer when nothing reads the init after the loop
  or inside it (no copy), or a new buffer with the init copied in.  The body reads the
  iter_arg there; the op computing the yielded value writes it there directly when no
  tensor still to be read lives in it (the iter_arg's last read comes before, or is at
  the same element of an elementwise op), else the value is copied at the end of the
  body.  So ``h = tanh(h @ w + x)`` runs without copies: the matmul reads ``h`` into a
  temporary, the elementwise op writes ``h``.  Zero trips leave the init as the result.
* ``scf.while``: a carried buffer per ``before`` argument, as for ``scf.for``, and one
  per forwarded value (``after`` argument and result).  A forwarded ``before`` argument
  shares its buffer (the common ``scf.condition(%c) %arg``); other forwarded values
  are written by the ``before`` region, and the ``after`` region's yield writes the
  carried buffers.

The end-of-region copies are a parallel assignment (``yield %b, %a`` swaps): a source
that lives in a buffer an earlier copy writes is first copied to a temporary.  Temporaries
allocated in a region are freed before its terminator, so a loop's memory does not grow
with its trip count, and plan-memory can place them in the arena like any other.
"""

from __future__ import annotations

from irc.builder import Builder
from irc.types import TensorType
from irc.values import OpResult

SCF_OPS = frozenset({"scf.if", "scf.for", "scf.while"})


def _is_tensor(v) -> bool:
    return isinstance(v.type, TensorType)


def lower(bz, op, destination: dict) -> None:
    """Bufferize the scf ``op`` and the tensor code in its regions (``bz``: the Bufferizer)."""
    if op.name == "scf.if":
        _lower_if(bz, op, destination)
    elif op.name == "scf.for":
        _lower_for(bz, op, destination)
    else:
        _lower_while(bz, op, destination)
    if any(_is_tensor(r) for r in op.results) or \
            any(_is_tensor(a) for r in op.regions for b in r.blocks for a in b.args):
        bz.structured.append(op)


def _builder(op) -> Builder:
    return Builder(loc=op.loc, reuse_constants=True).before_op(op)


def _root(bz, buf):
    return bz.roots.get(buf, buf)


def _yield_destinations(values, buffers, block) -> dict:
    """Yielded values computed in ``block`` -> the buffer they go to (first position wins)."""
    found: dict = {}
    for v, buf in zip(values, buffers):
        if buf is not None and isinstance(v, OpResult) and v.op.parent is block and v not in found:
            found[v] = buf
    return found


def _scalars(values, like) -> list:
    """The ``values`` at the positions where ``like`` (results, block arguments) is no tensor
    (a yielded parameter is a memref already)."""
    return [v for v, t in zip(values, like) if not _is_tensor(t)]


def _outside_tensors(op) -> list:
    """Tensor values defined outside ``op`` and read inside its regions (its closure)."""
    found = {}
    for inner in op.walk():
        if inner is op:
            continue
        for v in inner.operands:
            if _is_tensor(v) and v not in found and not _defined_inside(v, op):
                found[v] = None
    return list(found)


def _defined_inside(value, op) -> bool:
    block = value.op.parent if isinstance(value, OpResult) else value.owner
    owner = block.parent_op if block is not None else None
    return owner is not None and (owner is op or op.is_ancestor_of(owner))


def _carry(bz, root, op) -> None:
    """``root`` is carried over ``op``: alive to its end, and nothing from outside is read in it."""
    bz.scopes.setdefault(root, []).append(op)
    bz.root_last[root] = max(bz.root_last.get(root, -1), bz.end[op])


def _copy(lb: Builder, src, dst) -> None:
    from irc.dialects.memref import CopyOp

    lb.insert(CopyOp([src, dst], []))


def _carried_buffer(bz, op, k: int, init, result, destination: dict, taken: set):
    """The buffer carrying the tensor operand ``k`` (``init``) of the loop ``op`` whose final
    value is ``result`` (None where no result holds it); see the module docstring."""
    lb = _builder(op)
    src = bz.buffers[init]
    root = _root(bz, src)
    dest = destination.get(result) if result is not None else None
    if dest is not None and dest not in taken:
        if src is dest and root not in taken and bz.writable(dest, op, (init, op, k)):
            taken.add(dest)
            return dest
        if root is not _root(bz, dest) and bz.writable(dest, op):
            _copy(lb, src, dest)
            taken.add(dest)
            return dest
    if src is root and root not in taken and root in bz.owned and bz.home.get(root) is op.parent \
            and bz.writable(root, op, (init, op, k)):
        taken.add(root)
        return root
    buf = bz.allocate(lb, init, op)
    _copy(lb, src, buf)
    taken.add(buf)
    return buf


def _write_back(bz, block, pairs) -> None:
    """At the end of ``block``: each tensor value of ``pairs`` (value, buffer) into its buffer,
    as one parallel assignment; then free what the block allocated."""
    term = block.terminator
    lb = _builder(term)
    moves = [(bz.buffers[v], dst) for v, dst in pairs if dst is not None and bz.buffers[v] is not dst]
    written: set = set()
    staged = []
    for i, (src, dst) in enumerate(moves):
        if _root(bz, src) in written:  # an earlier copy overwrites it: read it first
            tmp = lb.alloc(src.type).value
            _copy(lb, src, tmp)
            staged.append(tmp)
            moves[i] = (tmp, dst)
        written.add(_root(bz, dst))
    for src, dst in moves:
        _copy(lb, src, dst)
    from .bufferize import _dealloc

    for tmp in staged:
        lb.insert(_dealloc(tmp, term.loc))
    bz.free_block(block, term)


def _free_after(bz, op, buffers) -> None:
    roots = [_root(bz, b) for b in buffers if b is not None]
    roots += [_root(bz, bz.buffers[v]) for v in _outside_tensors(op) if v in bz.buffers]
    roots += [_root(bz, bz.buffers[v]) for v in op.operands if v in bz.buffers]
    bz.free_dead_roots(op, roots)


def _lower_if(bz, op, destination: dict) -> None:
    lb = _builder(op)
    buffers = []
    for r in op.results:
        if not _is_tensor(r):
            buffers.append(None)
            continue
        buf = bz.destination_for(destination, r, op)
        if buf is None or buf in buffers:
            buf = bz.allocate(lb, r, op)
        _carry(bz, _root(bz, buf), op)
        buffers.append(buf)
    for region in op.regions:
        if region.is_empty:
            continue
        _lower_yielding_block(bz, region.entry, buffers, op.results)
    for r, buf in zip(op.results, buffers):
        if buf is not None:
            bz._bind(r, buf)
    _free_after(bz, op, buffers)


def _lower_yielding_block(bz, block, buffers: list, results) -> None:
    """Lower a branch or loop body whose terminator yields into ``buffers`` (None for a scalar):
    the yielded values are computed into them where they can be, copied otherwise, and the
    terminator keeps only the scalars."""
    values = list(block.terminator.operands)
    bz.lower_block(block, _yield_destinations(values, buffers, block))
    values = list(block.terminator.operands)  # scalars may have been replaced (tensor.extract)
    _write_back(bz, block, [(v, b) for v, b in zip(values, buffers) if b is not None])
    block.terminator.set_operands(_scalars(values, results))


def _lower_for(bz, op, destination: dict) -> None:
    body = op.body
    carried = []
    taken: set = set()
    for k, (init, arg, r) in enumerate(zip(op.inits, body.args[1:], op.results)):
        if not _is_tensor(arg):  # (a parameter init is a memref already)
            carried.append(None)
            continue
        buf = _carried_buffer(bz, op, 3 + k, init, r, destination, taken)
        _carry(bz, _root(bz, buf), op)
        bz._bind(arg, buf)
        carried.append(buf)
    _lower_yielding_block(bz, body, carried, op.results)
    for r, buf in zip(op.results, carried):
        if buf is not None:
            bz._bind(r, buf)
    _free_after(bz, op, carried)


def _lower_while(bz, op, destination: dict) -> None:
    before, after = op.before.entry, op.after.entry
    condition, yield_ = before.terminator, after.terminator
    forwarded = list(condition.operands[1:])
    # A forwarded before-argument shares its buffer with the after-argument and result.
    shares: dict = {}  # forwarded position -> before-argument position
    for j, f in enumerate(forwarded):
        if _is_tensor(f) and not isinstance(f, OpResult) and f.owner is before and f.index not in shares.values():
            shares[j] = f.index
    result_of = {i: op.results[j] for j, i in shares.items()}
    taken: set = set()
    carried = []
    for i, (init, arg) in enumerate(zip(op.operands, before.args)):
        if not _is_tensor(arg):
            carried.append(None)
            continue
        buf = _carried_buffer(bz, op, i, init, result_of.get(i), destination, taken)
        _carry(bz, _root(bz, buf), op)
        bz._bind(arg, buf)
        carried.append(buf)
    lb = _builder(op)
    outs = []
    for j, (arg, r) in enumerate(zip(after.args, op.results)):
        if not _is_tensor(r):
            outs.append(None)
            continue
        if j in shares:
            buf = carried[shares[j]]
        else:
            buf = bz.destination_for(destination, r, op)
            if buf is None or buf in taken:
                buf = bz.allocate(lb, r, op)
            taken.add(buf)
            _carry(bz, _root(bz, buf), op)
        bz._bind(arg, buf)
        outs.append(buf)
    bz.lower_block(before, _yield_destinations(forwarded, outs, before))
    forwarded = list(condition.operands[1:])
    _write_back(bz, before, [(v, b) for v, b in zip(forwarded, outs) if b is not None])
    condition.set_operands([condition.operands[0], *_scalars(forwarded, op.results)])
    values = list(yield_.operands)
    bz.lower_block(after, _yield_destinations(values, carried, after))
    values = list(yield_.operands)
    _write_back(bz, after, [(v, b) for v, b in zip(values, carried) if b is not None])
    yield_.set_operands(_scalars(values, before.args))
    for r, buf in zip(op.results, outs):
        if buf is not None:
            bz._bind(r, buf)
    _free_after(bz, op, [*carried, *outs])


def drop_tensor_operands(ops) -> None:
    """Drop the tensor operands of the bufferized scf ``ops`` (before the ops computing them
    are erased)."""
    for op in ops:
        if op.name == "scf.for":
            kept = [*op.operands[:3], *(v for v, a in zip(op.inits, op.body.args[1:]) if not _is_tensor(a))]
        elif op.name == "scf.while":
            kept = [v for v, a in zip(op.operands, op.before.entry.args) if not _is_tensor(a)]
        else:
            kept = list(op.operands)
        op.set_operands(kept)


def strip(ops) -> None:
    """Rebuild each bufferized scf op without its tensor results and block arguments (once
    nothing uses them: the lowered ops are erased)."""
    for op in ops:
        keep = [r for r in op.results if not _is_tensor(r)]
        regions = op.regions
        op.regions = []
        new = type(op)(list(op.operands), [r.type for r in keep], dict(op.attributes), regions=regions,
                       loc=op.loc, result_names=[r.name_hint for r in keep])
        op.parent.insert_before(new, op)
        for old, r in zip(keep, new.results):
            old.replace_all_uses_with(r)
        op.erase()
        for region in regions:
            for block in region.blocks:
                for a in [a for a in block.args if _is_tensor(a)][::-1]:
                    block.erase_argument(a.index)
