"""``irc.grad``, ``value_and_grad``, ``jvp``, ``vjp``: the grad/vjp/jvp passes on a traced function.

A transformed function, called while something is being traced, traces the original
function into a function of its own (in a scratch module, where the pass runs on a
complete function), applies the pass, moves the functions into the module being traced
and emits a ``func.call`` of the derivative.  So ``irc.jit(irc.grad(f))`` is one compiled
module in which the entry calls ``f_grad``, and ``irc.grad(irc.grad(f))`` differentiates
a function that calls ``f_grad`` (the pass differentiates calls).  Traced values the
function closes over become extra parameters (tracer.Trace.value) and are constants for
the derivative, as in JAX.

Called on numpy arrays (no trace running), a transformed function is jitted: traced,
compiled and cached per signature like any ``irc.jit`` function.
"""

from __future__ import annotations

import weakref

import numpy as np

import irc.passes
from irc import pytree
from irc.module import ModuleOp
from irc.types import TensorType

from .jit import Jitted, trace_into
from .locations import check_same_tree, located_message
from .tracer import Tracer, as_tensor, convert, current, dtype_of_type, operand


def _argnums(argnums, n: int, what: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -n <= a < n:
            raise TypeError(located_message(f"{what}: argnums {a} is out of range for {n} positional arguments"))
    return tuple(a % n for a in nums)


def _build(fn, args: tuple, pipeline, name: str, suffix: str):
    """Trace ``fn(*args)`` as a function of a scratch module, run the pass that
    ``pipeline(traced, F, NEW)`` names (F: the function's name, NEW: the derivative's), and
    move every function into the module being traced.  Returns (traced, trace, NEW)."""
    parent = current()
    scratch = ModuleOp.new()
    trace, traced = trace_into(scratch, fn, args, name=name, parent=parent)
    new_name = parent.names.fresh(f"{trace.name}_{suffix}")
    irc.passes.run(scratch, pipeline(traced, trace.name, new_name))
    for f in list(scratch.functions):
        scratch.body.remove(f)
        if parent.module.lookup(f.sym_name) is not None:
            raise RuntimeError(f"internal error: function @{f.sym_name} is already in the traced module")
        parent.names.used.add(f.sym_name)
        parent.module.body.append(f)
    return traced, trace, new_name


def _call(callee: str, args: list, result_types: list) -> list[Tracer]:
    """``func.call @callee(args)`` in the current trace; its results as tracers."""
    tr = current()
    params = tr.module.lookup(callee).function_type.inputs
    values = [_fit_scalar(tr, operand(tr, a), t) for a, t in zip(args, params)]
    results = tr.builder.call(callee, *values, results=result_types)
    if not isinstance(results, tuple):
        results = () if not result_types else (results,)
    return [Tracer(tr, r) for r in results]


def _fit_scalar(tr, v, t):
    """``v`` as the 0-d tensor parameter type ``t`` when it is a scalar (a Python number given
    for a scalar result's cotangent); anything else is left to the call's verifier."""
    if isinstance(t, TensorType) and t.rank == 0 and not isinstance(v.type, TensorType):
        return as_tensor(tr.builder, convert(tr.builder, v, dtype_of_type(t.element_type)))
    return v


def _inputs(args: tuple) -> tuple[list, pytree.TreeDef]:
    return pytree.flatten(tuple(args))


def _call_args(trace, leaves: list) -> list:
    """The operands of a call of ``trace``'s function: the argument leaves, then the captured values."""
    return list(leaves) + list(trace.captured)


def _leaf_ranges(in_tree: pytree.TreeDef) -> list[range]:
    """The flat leaf positions of each positional argument."""
    ranges, start = [], 0
    for child in in_tree.children:
        ranges.append(range(start, start + child.num_leaves))
        start += child.num_leaves
    return ranges


def _is_float(a) -> bool:
    return a[1].kind == "f"


class Transformed:
    """A transformed function: traced in line under a trace, jitted on numpy arrays."""

    def __init__(self, build, name: str):
        self._build = build
        self.__name__ = name
        self._jitted: Jitted | None = None

    def __call__(self, *args):
        if current() is not None:
            return self._build(*args)
        if self._jitted is None:
            self._jitted = Jitted(self._build)
            self._jitted.__name__ = self.__name__
        return self._jitted(*args)


_transformed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cached(kind: str, fn, argnums, make) -> Transformed:
    """One Transformed per (function, kind, argnums), so that ``irc.grad(loss)(...)`` written in
    an eager loop traces and compiles once, not on every step."""
    key = (kind, argnums if isinstance(argnums, int) else tuple(argnums))
    try:
        per_fn = _transformed.setdefault(fn, {})
    except TypeError:  # not weakly referenceable (a builtin): no cache
        return make()
    t = per_fn.get(key)
    if t is None:
        t = per_fn[key] = make()
    return t


def value_and_grad(fn, argnums=0) -> Transformed:
    """``fn``'s value and its gradient with respect to the arguments ``argnums`` (an int: one
    gradient with that argument's structure; a tuple: a tuple of them).  ``fn`` must return a
    float scalar (or a one-element float array)."""
    return _cached("value_and_grad", fn, argnums, lambda: _value_and_grad(fn, argnums))


def _value_and_grad(fn, argnums=0) -> Transformed:
    def build(*args):
        nums = _argnums(argnums, len(args), f"irc.grad({_name(fn)})")
        wrt = []

        def pipeline(traced, func, new):
            ranges = _leaf_ranges(traced.in_tree)
            for k in nums:
                for i in ranges[k]:
                    if not _is_float(traced.in_avals[i]):
                        path = pytree.leaf_paths(traced.in_tree)[i]
                        raise TypeError(located_message(
                            f"irc.grad({_name(fn)}): argument {path} has dtype {traced.in_avals[i][1]}; only "
                            "float arguments can be differentiated (leave it out of argnums)"))
                    wrt.append(i)
            _check_scalar_result(traced, fn)
            return f"grad{{func={func} wrt={','.join(map(str, wrt))} name={new}}}"

        traced, trace, new = _build(fn, args, pipeline, _name(fn), "grad")
        leaves, _ = _inputs(args)
        f = current().module.lookup(new)
        outs = _call(new, _call_args(trace, leaves), list(f.function_type.results))
        value = outs[0]
        grads = outs[1:]
        ranges = _leaf_ranges(traced.in_tree)
        trees, it = [], iter(grads)
        for k in nums:
            sub = traced.in_tree.children[k]
            trees.append(sub.unflatten([_weak_like(next(it), leaves[i]) for i in ranges[k]]))
        return value, (trees[0] if isinstance(argnums, int) else tuple(trees))

    return Transformed(build, f"value_and_grad_{_name(fn)}")


def grad(fn, argnums=0) -> Transformed:
    """The gradient of ``fn`` (a float scalar) with respect to the arguments ``argnums``; dict
    parameters give dict gradients (see ``value_and_grad``)."""
    def make():
        vg = value_and_grad(fn, argnums)
        return Transformed(lambda *args: vg._build(*args)[1], f"grad_{_name(fn)}")

    return _cached("grad", fn, argnums, make)


def jvp(fn, primals, tangents):
    """(fn(*primals), the derivative of fn at ``primals`` along ``tangents``): forward mode.
    ``tangents`` has the structure and dtypes of ``primals``; integer leaves carry none."""
    primals, tangents = tuple(primals), tuple(tangents)
    if current() is None:
        return _eager("jvp", fn, lambda p, t: jvp(fn, p, t))(primals, tangents)
    p_leaves, p_tree = _inputs(primals)
    t_leaves, t_tree = _inputs(tangents)
    check_same_tree(p_tree, t_tree, "irc.jvp: tangents")
    traced, trace, new = _build(fn, primals, lambda _, f, n: f"jvp{{func={f} name={n}}}", _name(fn), "jvp")
    func_type = current().module.lookup(new).function_type
    tangent_args = []
    for i, (a, t) in enumerate(zip(traced.in_avals, t_leaves)):
        if not _is_float(a):
            continue
        t_shape, t_dtype = np.shape(t) if not isinstance(t, Tracer) else t.shape, _dtype(t)
        if t_dtype != a[1] or tuple(t_shape) != tuple(a[0]):
            path = pytree.leaf_paths(p_tree)[i]
            raise TypeError(located_message(f"irc.jvp: the tangent of {path} must be {a[1]}{list(a[0])}, got "
                                            f"{t_dtype}{list(t_shape)}"))
        tangent_args.append(t)
    for c in trace.captured:  # closed-over values are constants: zero tangents
        if c.dtype.kind == "f":
            tangent_args.append(np.zeros(c.shape, c.dtype) if c.shape else c.dtype.type(0))
    outs = _call(new, _call_args(trace, p_leaves) + tangent_args, list(func_type.results))
    n = traced.out_tree.num_leaves
    values, tangent_outs = outs[:n], iter(outs[n:])
    t_out = [next(tangent_outs) if v.dtype.kind == "f" else np.zeros(v.shape, v.dtype) for v in values]
    return traced.out_tree.unflatten(values), traced.out_tree.unflatten(t_out)


def vjp(fn, *primals):
    """(fn(*primals), vjp_fn): ``vjp_fn(cotangent)`` (the structure of the result) gives a tuple
    with the cotangent of each primal: reverse mode for any float results."""
    if current() is None:
        out = Jitted(fn)(*primals)
        apply = _eager("vjp", fn, lambda p, c: vjp(fn, *p)[1](c))
        return out, lambda cotangent: apply(primals, cotangent)
    p_leaves, p_tree = _inputs(primals)
    traced, trace, new = _build(fn, primals, lambda _, f, n: f"vjp{{func={f} name={n}}}", _name(fn), "vjp")
    forward = current().module.lookup(trace.name)
    out = traced.out_tree.unflatten(_call(trace.name, _call_args(trace, p_leaves),
                                          list(forward.function_type.results)))
    func_type = current().module.lookup(new).function_type

    def vjp_fn(cotangent):
        c_leaves, c_tree = pytree.flatten(cotangent)
        check_same_tree(traced.out_tree, c_tree, "irc.vjp: the cotangent")
        out_leaves = pytree.flatten(out)[0]
        paths = pytree.leaf_paths(traced.out_tree)
        for path, c, o in zip(paths, c_leaves, out_leaves):
            weak = isinstance(c, (int, float)) or (isinstance(c, Tracer) and c.weak)
            if o.dtype.kind != "f" or (weak and not o.shape):  # a Python number for a scalar
                continue
            c_shape = c.shape if isinstance(c, Tracer) else np.shape(c)
            if _dtype(c) != o.dtype or tuple(c_shape) != tuple(o.shape):
                raise TypeError(located_message(
                    f"irc.vjp: the cotangent of result {path} must be {o.dtype}{list(o.shape)}, got "
                    f"{_dtype(c)}{list(c_shape)}"))
        cts = [c for c, o in zip(c_leaves, out_leaves) if o.dtype.kind == "f"]
        results = _call(new, _call_args(trace, p_leaves) + cts, list(func_type.results))
        grads = iter(results[traced.out_tree.num_leaves:])
        per_leaf = [_weak_like(next(grads), p) if a[1].kind == "f" else np.zeros(a[0], a[1])
                    for a, p in zip(traced.in_avals, p_leaves)]
        return tuple(p_tree.unflatten(per_leaf))

    return out, vjp_fn


# -- helpers -------------------------------------------------------------------------------------------


_eager_cache: dict = {}


def _eager(kind: str, fn, body):
    """A jitted ``body`` for an eager jvp or vjp of ``fn`` (one per function, so its cache lasts)."""
    key = (kind, fn)
    jitted = _eager_cache.get(key)
    if jitted is None:
        jitted = _eager_cache[key] = Jitted(body)
        jitted.__name__ = f"{kind}_{_name(fn)}"
    return jitted


def _check_scalar_result(traced, fn) -> None:
    entry = traced.module.lookup(traced.entry)
    results = entry.function_type.results
    ok = traced.out_tree.kind == "leaf" and len(results) == 1
    if ok:
        t = results[0]
        ok = dtype_of_type(t).kind == "f" and (not isinstance(t, TensorType) or t.num_elements == 1)
    if not ok:
        raise TypeError(located_message(
            f"irc.grad({_name(fn)}): the function must return one float scalar, got "
            + (f"{traced.out_tree}" if traced.out_tree.kind != "leaf" else f"{results[0]}")
            + " (use irc.vjp for other results)"))


def _weak_like(t: Tracer, primal) -> Tracer:
    weak = primal.weak if isinstance(primal, Tracer) else isinstance(primal, (int, float))
    return Tracer(t.trace, t.v, weak)


def _dtype(x) -> np.dtype:
    if isinstance(x, Tracer):
        return x.dtype
    if isinstance(x, float):
        return np.dtype(np.float64)
    if isinstance(x, int):
        return np.dtype(np.int64)
    return np.asarray(x).dtype


def _name(fn) -> str:
    return getattr(fn, "__name__", "f").replace("<lambda>", "lambda")
