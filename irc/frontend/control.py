"""``irc.cond``, ``irc.fori_loop``, ``irc.while_loop``: control flow on traced values (JAX's signatures).

On concrete values they are plain Python (an ``if``, a ``for``, a ``while``), so a
function using them still runs eagerly on numpy arrays.  On traced values they build
``scf.if``, ``scf.for`` and ``scf.while`` over the flattened operands, tensors
included: only the branch taken runs, and a loop is one loop whatever its trip count,
which may be traced (the tensor pipeline bufferizes them: a loop-carried array lives in
one buffer that the body updates, docs/tensor-compilation.md).  A loop-carried 0-d array
is carried as a scalar (``tensor.extract``), which is what the reverse-mode tape records
(docs/autodiff.md: only scalars can be taped).

Under ``irc.grad``/``vjp``/``jvp`` they are the same scf ops, which the autodiff passes
differentiate structurally (passes/autodiff_scf.py): a loop's gradient is loops that
recompute the carries from checkpoints, about N*sqrt(N) runs of the body for N trips and
memory for a few carries whatever N is.  A Python ``for`` unrolls instead: a larger program
to compile, and a gradient that keeps every step's values (linear time, linear memory).
"""

from __future__ import annotations

import numpy as np

from irc import pytree
from irc.block import Block, Region
from irc.types import TensorType, i1, i64, index

from .locations import check_same_tree, located_message
from .tracer import Tracer, TracerError, convert, current, dtype_of_type, operand


def _traced(*trees) -> bool:
    return any(isinstance(x, Tracer) for t in trees for x in pytree.flatten(t)[0])


def _scalar(tr, v):
    """A 0-d tensor as a scalar value (a tensor of more elements is refused)."""
    from irc.dialects.tensor import ExtractOp

    if not isinstance(v.type, TensorType):
        return v
    if v.type.rank:
        raise TypeError(located_message(f"a loop-carried or predicate value must be 0-d here, got {v.type}"))
    return tr.builder.built(ExtractOp.build(v.value, []))


def _has_tensors(blocks) -> bool:
    for block in blocks:
        for op in block.ops:
            for v in (*op.operands, *op.results):
                if isinstance(v.type, TensorType):
                    return True
            if any(_has_tensors(list(r.blocks)) for r in op.regions):
                return True
    return False


def _discard(blocks) -> None:
    for block in blocks:
        for op in list(block.ops_reversed()):
            op.erase()


def _values(tr, leaves, types=None):
    vals = [operand(tr, x) for x in leaves]
    if types is not None:
        vals = [_fit(tr, v, t, x) for v, t, x in zip(vals, types, leaves)]
    return vals


def _fit(tr, v, t, x):
    """``v`` as type ``t`` (a carried value keeps its type): a 0-d tensor becomes a scalar, and
    a float (or a weak Python number) converts to the carry's element type."""
    if isinstance(v.type, TensorType) and not isinstance(t, TensorType):
        v = _scalar(tr, v)
    if v.type is not t and (_weak_of(x) or (v.is_float and dtype_of_type(t).kind == "f")):
        v = convert(tr.builder, v, dtype_of_type(t))
    if v.type is not t:
        raise TypeError(located_message(f"a carried value changed type from {t} to {v.type}: a loop body "
                                        "must return what it was given"))
    return v


def _weak_of(leaf) -> bool:
    return isinstance(leaf, (int, float)) or (isinstance(leaf, Tracer) and leaf.weak)


# -- cond -----------------------------------------------------------------------------------------------


def cond(pred, true_fn, false_fn, *operands):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``; both must return the
    same structure and types.  On a traced ``pred``: scf.if (under differentiation, a
    branch over tensors: both branches and a select, see the module docstring)."""
    if not isinstance(pred, Tracer):
        return true_fn(*operands) if pred else false_fn(*operands)
    tr = current()
    b = tr.builder
    c = _scalar(tr, operand(tr, pred))
    if c.elem is not i1:
        c = c.ne(0)
    blocks, outs = [], []
    for fn in (true_fn, false_fn):
        block = Block()
        with b._inside(block):
            leaves, tree = pytree.flatten(fn(*operands))
            outs.append((leaves, tree, [operand(tr, x) for x in leaves]))
        blocks.append(block)
    (lt, tt, vt), (lf, tf, vf) = outs
    check_same_tree(tt, tf, "irc.cond: false_fn's result")
    for k, (x, y) in enumerate(zip(vt, vf)):  # a 0-d array and a number: both scalars
        if x.type is not y.type and _scalar_like(x) and _scalar_like(y):
            for block, vals in zip(blocks, (vt, vf)):
                with b._inside(block):
                    vals[k] = _scalar(tr, vals[k])
    types = []
    for k, (x, y) in enumerate(zip(vt, vf)):
        if x.type is not y.type:
            raise TypeError(located_message(f"irc.cond: result {k} is {x.type} in true_fn but {y.type} in false_fn"))
        types.append(x.type)
    from irc.dialects.scf import IfOp, YieldOp

    for block, vals in zip(blocks, (vt, vf)):
        block.append(YieldOp([v.value for v in vals], []))
    op = b.insert(IfOp([c.value], types, {}, regions=[Region([blocks[0]]), Region([blocks[1]])]))
    results = [Tracer(tr, b._v(r), _weak_of(x) and _weak_of(y)) for r, x, y in zip(op.results, lt, lf)]
    return tt.unflatten(results)


def _scalar_like(v) -> bool:
    return not isinstance(v.type, TensorType) or v.type.rank == 0


# -- loops ----------------------------------------------------------------------------------------------


def fori_loop(lower, upper, body_fun, init_val):
    """``val = body_fun(i, val)`` for i in [lower, upper): scf.for on traced values."""
    for name, bound in (("lower", lower), ("upper", upper)):
        _check_integer_bound(name, bound)
    if not _traced(lower, upper, init_val) and current() is None:
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val
    tr = current()
    if tr is None:
        raise TracerError(located_message("irc.fori_loop on a traced value outside its trace"))
    b = tr.builder
    leaves, tree = pytree.flatten(init_val)
    inits = [_scalar(tr, v) if isinstance(v.type, TensorType) and not v.type.rank else v
             for v in (operand(tr, x) for x in leaves)]
    bounds = [convert(b, _scalar(tr, operand(tr, x)), np.dtype(np.int64)) if isinstance(x, Tracer) else int(x)
              for x in (lower, upper)]
    bounds = [b.convert(v, index) if not isinstance(v, int) else v for v in bounds]
    with b.for_(bounds[0], bounds[1], inits=inits) as loop:
        i = Tracer(tr, b.convert(loop.iv, i64), weak=True)
        carried = tree.unflatten([Tracer(tr, a, _weak_of(x)) for a, x in zip(loop.args, leaves)])
        new_leaves, new_tree = pytree.flatten(body_fun(i, carried))
        check_same_tree(tree, new_tree, "irc.fori_loop: body_fun's result")
        loop.yield_(*_values(tr, new_leaves, [v.type for v in inits]))
    return tree.unflatten([Tracer(tr, r, _weak_of(x)) for r, x in zip(loop.results, leaves)])


def _check_integer_bound(name: str, bound) -> None:
    """A loop bound must be an integer, as ``range`` wants: a float would be truncated."""
    dtype = getattr(bound, "dtype", None)  # a traced value or a numpy one
    if not (dtype.kind in "iu" if dtype is not None else isinstance(bound, int) and not isinstance(bound, bool)):
        what = dtype if dtype is not None else type(bound).__name__
        raise TypeError(located_message(f"irc.fori_loop: {name} must be an integer, got {what}"))


def while_loop(cond_fun, body_fun, init_val):
    """``while cond_fun(val): val = body_fun(val)``: scf.while on traced values."""
    if not _traced(init_val) and current() is None:
        val = init_val
        while cond_fun(val):
            val = body_fun(val)
        return val
    tr = current()
    b = tr.builder
    leaves, tree = pytree.flatten(init_val)
    inits = [operand(tr, x) for x in leaves]
    inits = [_scalar(tr, v) if isinstance(v.type, TensorType) and not v.type.rank else v for v in inits]
    types = [v.type for v in inits]
    with b.while_(inits) as w:
        with w.before() as args:
            c = cond_fun(tree.unflatten([Tracer(tr, a, _weak_of(x)) for a, x in zip(args, leaves)]))
            cv = _scalar(tr, operand(tr, c))
            if cv.elem is not i1:
                cv = cv.ne(0)
            w.condition(cv, *args)
        with w.after() as args:
            new_leaves, new_tree = pytree.flatten(body_fun(
                tree.unflatten([Tracer(tr, a, _weak_of(x)) for a, x in zip(args, leaves)])))
            check_same_tree(tree, new_tree, "irc.while_loop: body_fun's result")
            w.yield_(*_values(tr, new_leaves, types))
    return tree.unflatten([Tracer(tr, r, _weak_of(x)) for r, x in zip(w.results, leaves)])
