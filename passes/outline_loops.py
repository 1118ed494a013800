"""outline-loops: loop nests that differ only in the values they take from outside become one function.

A 16-layer MLP lowers to 16 copies of one bias-and-activation loop nest, each over its own
buffers; LLVM optimises and vectorises every copy anew, so compile time grows with the
depth of the network (and ``split-parallel`` copies each parallel loop once more into its
segment).  This pass finds, in each function's entry block, the top-level ``scf.for``
nests without results that are *twins*: the same ops, attributes, types and constants,
differing only in the other values they read from outside (buffers, sizes) and in their
outer bounds.  Each group of twins becomes one private function ``@f.loop<k>`` marked
``noinline`` (the backend keeps it a function, so it is compiled once)::

    func.func private @f.loop0(%lb: index, %ub: index, %x0: memref<256x1024xf32>, ...)
        attributes {noinline} {
      scf.for %i = %lb to %ub step %c1 { ... } {parallel}
      func.return
    }

and each nest becomes ``func.call @f.loop0(%lb, %ub, %buffer, ...)``.  The constants a nest
reads are cloned into the function rather than passed, so it is folded and vectorised as
before.  A call keeps what ``split-parallel`` needs to run it on threads: ``parallel``,
the loop's ``step`` and its ``work`` (the bounds are its first two operands, as a loop's).

A loop nest without a twin is left where it is: a call costs more than nothing, and there
is nothing to share.
"""

from __future__ import annotations

from irc.attributes import IntegerAttr, UnitAttr
from irc.passmanager import Pass
from irc.patterns import constant_value
from irc.types import FunctionType, i64, index


def _nest_operands(loop):
    """The values the nest reads from outside it (its own bounds excluded), in first-use order."""
    inside = set()
    outside: dict = {}
    for op in _preorder(loop):
        for region in op.regions:
            for block in region.blocks:
                inside.update(block.args)
        for k, v in enumerate(op.operands):
            if op is loop and k < 2:
                continue
            if v not in inside and v not in outside:
                outside[v] = None
        inside.update(op.results)
    return list(outside)


def _preorder(op):
    yield op
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield from _preorder(inner)


def _constant(v):
    """The constant op defining ``v`` (cloned into the outlined function), or None."""
    op = getattr(v, "op", None)
    return op if op is not None and op.name == "arith.constant" and not op.operands else None


def _attribute_key(op) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in op.attributes.items()))


def signature(loop) -> tuple:
    """What twins share: every op's name, attributes, result types and operands, where an
    operand is a value of the nest (by position), a constant (by type and value) or the k-th
    other outside value (by type)."""
    outside = _nest_operands(loop)
    ref = {}
    params = 0
    for v in outside:
        c = _constant(v)
        if c is not None:
            ref[v] = ("c", str(v.type), _attribute_key(c))
        else:
            ref[v] = ("x", params, str(v.type))
            params += 1
    parts = []
    for op in _preorder(loop):
        operands = []
        for k, v in enumerate(op.operands):
            if op is loop and k < 2:
                operands.append(("bound", str(v.type)))
            else:
                operands.append(ref[v])
        parts.append((op.name, tuple(operands), tuple(str(r.type) for r in op.results), _attribute_key(op)))
        for region in op.regions:
            for block in region.blocks:
                for a in block.args:
                    ref[a] = ("a", len(ref), str(a.type))
        for r in op.results:
            ref[r] = ("r", len(ref))
    return tuple(parts)


def outline(module, after, loops, name: str):
    """Make ``@name`` (placed after the function ``after``) from the first of the twin ``loops``,
    and call it in place of each."""
    from irc.dialects.func import CallOp, FuncOp, ReturnOp

    first = loops[0]
    outside = _nest_operands(first)
    params = [v for v in outside if _constant(v) is None]
    types = [index, index, *(v.type for v in params)]
    callee = FuncOp.build(name, FunctionType(types, []), arg_names=["lb", "ub", *(f"x{k}" for k in range(len(params)))],
                          private=True)
    callee.attributes["noinline"] = UnitAttr()
    callee.loc = first.loc
    body = callee.body.entry
    value_map = dict(zip(params, body.args[2:]))
    for v in outside:
        c = _constant(v)
        if c is not None:
            value_map[v] = _append_clone(body, c)
    new = first.clone(value_map)
    new.set_operand(0, body.args[0])
    new.set_operand(1, body.args[1])
    body.append(new)
    ret = ReturnOp([])
    ret.loc = first.loc
    body.append(ret)
    module.body.insert_after(callee, after)
    from .split_parallel import estimated_work

    for loop in loops:
        args = [loop.operands[0], loop.operands[1], *(v for v in _nest_operands(loop) if _constant(v) is None)]
        call = CallOp.build(name, args, [])
        call.loc = loop.loc
        if "parallel" in loop.attributes:
            call.attributes["parallel"] = UnitAttr()
        step = constant_value(loop.operands[2])
        if step is not None:
            call.attributes["step"] = IntegerAttr(step.value, i64)
        call.attributes["work"] = IntegerAttr(estimated_work(loop), i64)
        loop.parent.insert_before(call, loop)
        loop.erase()
    return callee


def _append_clone(block, op):
    new = op.clone({})
    block.append(new)
    return new.results[0]


class OutlineLoops(Pass):
    """Replace top-level loop nests that have twins by calls of one shared function each."""

    name = "outline-loops"

    def run(self, module, stats) -> None:
        for func in list(module.functions):
            if func.is_declaration or "noinline" in func.attributes:
                continue
            groups: dict = {}
            for op in func.body.entry.ops:
                if op.name == "scf.for" and not op.results:
                    groups.setdefault(signature(op), []).append(op)
            k, anchor = 0, func
            for loops in groups.values():
                if len(loops) < 2:
                    continue
                while module.lookup(f"{func.sym_name}.loop{k}") is not None:
                    k += 1
                anchor = outline(module, anchor, loops, f"{func.sym_name}.loop{k}")
                k += 1
                stats.add("outlined-functions")
                stats.add("loops-outlined", len(loops))
