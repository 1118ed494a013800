"""Symbolic differentiation: the engine behind the ``grad``, ``vjp`` and ``jvp`` passes.

A derivative is more IR.  Every differentiable op class carries two rules beside
``fold`` and ``interpret`` (dialects/)::

    def vjp(self, b, operands, results, cotangents) -> [cotangent of each operand]
    def jvp(self, b, operands, results, tangents) -> [tangent of each result]

``b`` is an ``irc.builder.Builder`` placed where the rule's ops go, ``operands`` and
``results`` are the op's primal values as they are available there (``V``s), and a
``None`` (co)tangent is a symbolic zero.  The engine only walks the IR and calls
the rules, so a new op is differentiable the moment its class says how.  Values of
integer, index or i1 type carry no gradient; an op with a float operand and a
float result but no rule is a diagnostic at that op, never a silent zero.

Reverse mode has three strategies, chosen per function and visible in the output:

- **Straight line** (one block; ``scf.if`` inside is differentiated structurally, by
  an ``scf.if`` on the same condition that recomputes the taken branch and runs
  its adjoint): the forward ops are copied, then the adjoint ops follow in
  reverse order, reading the forward values directly.  Every graph-level
  optimisation then applies to the whole gradient.
- **Structured loops** (one block with ``scf.for``/``scf.while`` and tensor values
  anywhere): as the straight line, and a loop's adjoint is loops (autodiff_scf): they
  run the iterations backwards and recompute the carry each one needs from the
  loop's initial values, in segments of about sqrt(N) steps: O(N sqrt N) runs of
  the body, memory for a fixed number of carries, no tape.  The result is ``scf``
  over tensors again, so it optimises (and differentiates again) like the forward.
- **Taped CFG** (several blocks with phis, or structured loops in a function of
  scalars only, where a tape is cheaper: linear time):
  the function is lowered to a CFG (scf-to-cf), then run twice forward: once to
  count how often each block runs (that sizes the tape), once to record the trace
  of blocks and, per block execution, the values its adjoint needs, in
  ``memref`` buffers indexed by that block's execution number.  The adjoint loop
  then replays the trace backwards, one adjoint block per forward block, with
  the adjoints of values in ``memref<1xT>`` slots (``mem2reg`` promotes them) and
  a phi's adjoint sent to the incoming value of the edge the trace says was
  taken.  Tensor values cannot be taped: a CFG loop over tensors is a diagnostic.

``func.call`` is differentiated by calling the callee's own generated ``_vjp`` /
``_jvp`` function (recursion works: the function is registered before its body is
built).  Forward mode keeps a one-block function structured: a tangent is carried
beside each float carry of ``scf.for``/``scf.while`` and each float result of
``scf.if`` (autodiff_scf.StructuredForward); a function of several blocks carries a
tangent phi beside every float phi (its ``scf`` ops are lowered to a CFG first).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from irc.dialects.cf import PhiOp
from irc.dialects.func import CallOp, FuncOp, ReturnOp
from irc.dialects.scf import ForOp, IfOp, WhileOp

from irc.attributes import UnitAttr
from irc.block import Block, Region
from irc.builder import Builder, V, is_float
from irc.diagnostics import UNKNOWN, IRError
from irc.dominance import reverse_postorder
from irc.operation import Operation
from irc.types import FunctionType, TensorType, Type
from irc.values import Value


def apply_jvp_rule(b, op, ts: list, tangents: dict) -> None:
    """Run ``op``'s forward-mode rule at ``b`` on the operands' tangents ``ts`` and record the
    tangent of each float result in ``tangents`` (shared by the CFG and structured modes)."""
    rule = getattr(op, "jvp", None)
    if rule is None:
        raise no_rule(op, "tangent")
    with b.located(op.loc):
        outs = rule(b, [V(b, v) for v in op.operands], [V(b, r) for r in op.results], ts)
    for r, t in zip(op.results, outs):
        if t is not None and is_float(r.type):
            t = b.wrap(t)
            if t.type is not r.type:
                raise op.error(f"tangent rule produced {t.type} for a result of type {r.type}")
            tangents[r] = t


def no_rule(op: Operation, mode: str = "gradient") -> IRError:
    return op.error(f"has no {mode} rule: '{op.name}' cannot be differentiated (it has float operands "
                    f"and results)")


TAPED = "taped"  # the unit attribute of a reverse-mode function that keeps a tape in memory

WRITES_MEMORY = ("memref.store", "memref.copy", "vector.store")


def check_differentiable(fn: FuncOp, mode: str) -> None:
    """Refuse what the engine cannot follow, rather than give a wrong or zero derivative: a float
    leaving the dataflow through an op with side effects (a store: the derivative does not follow
    values through memory), and in reverse mode any write to memory, since a gradient runs the
    forward again (a called function's ``_vjp`` recomputes it, a taped loop runs twice)."""
    if TAPED in fn.attributes:
        raise IRError(f"@{fn.sym_name} keeps a tape in memory (the function it differentiates has loops): "
                      f"derivatives of it are not supported (second derivatives through loops)", fn.loc)
    for op in fn.walk():
        if op is fn or op.is_pure or op.is_terminator or isinstance(op, (CallOp, ForOp, IfOp, WhileOp)):
            continue
        if any(is_float(v.type) for v in op.operands) and not any(is_float(r.type) for r in op.results):
            raise op.error(f"has no gradient rule: '{op.name}' cannot be differentiated (it writes a float "
                           f"value where the gradient cannot follow it)")
        if mode == "reverse" and op.name in WRITES_MEMORY:
            raise op.error("writes memory: a function differentiated in reverse mode (or called from one) must "
                           "not, since its gradient runs its forward again")


def function(module, name: str, what: str = "function", mode: str = "reverse", at: Operation | None = None) -> FuncOp:
    """The function to differentiate, checked; errors point at ``at`` (a call) when given."""
    fn = module.lookup(name)
    if not isinstance(fn, FuncOp):
        known = ", ".join("@" + f.sym_name for f in module.functions) or "none"
        # At the call; else at the module, or (a parsed module has no location of its own) at its
        # first function, so that the message names the file.
        where = at or (module if module.loc is not UNKNOWN else next(iter(module.functions), module))
        raise IRError(f"no {what} @{name} in the module (functions: {known})", where.loc)
    if fn.is_declaration:
        raise IRError(f"@{name} is a declaration: there is no body to differentiate", (at or fn).loc)
    check_differentiable(fn, mode)
    return fn


def unique_name(module, name: str) -> str:
    if module.lookup(name) is None:
        return name
    k = 1
    while module.lookup(f"{name}.{k}") is not None:
        k += 1
    return f"{name}.{k}"


def new_function(module, after: FuncOp, name: str, type: FunctionType, exact: bool,
                 extra_names: Sequence[str] = ()) -> FuncOp:
    """An empty function ``@name`` of ``type`` placed after ``after``.  A declaration of that name
    and type is replaced (so a program can declare ``@loss_grad`` and call it before the pass
    defines it).  Another function of that name is an error when ``exact`` (a name the user
    chose or expects), else the new one takes a fresh name (``@g_vjp.1``)."""
    existing = module.lookup(name)
    if isinstance(existing, FuncOp) and existing.is_declaration and not exact \
            and str(existing.function_type) != str(type):
        existing = None
        name = unique_name(module, name)  # an unrelated declaration: not ours to define
    if isinstance(existing, FuncOp) and existing.is_declaration:
        if existing.function_type is not type and str(existing.function_type) != str(type):
            raise IRError(f"@{name} is declared as {existing.function_type}, but the derivative of "
                          f"@{after.sym_name} has type {type}", existing.loc)
        if existing.parent is not None:
            existing.parent.remove(existing)
    elif existing is not None:
        if exact:
            raise IRError(f"@{name} already exists: choose another name for the derivative of "
                          f"@{after.sym_name} with name=", existing.loc)
        name = unique_name(module, name)
    names = [a.name_hint for a in after.args] + list(extra_names)
    new = FuncOp.build(name, type, arg_names=names + [None] * (len(type.inputs) - len(names)))
    new.loc = after.loc
    module.body.insert_after(new, after)
    return new


def float_positions(types: Sequence[Type]) -> list[int]:
    return [i for i, t in enumerate(types) if is_float(t)]


# ---- adjoints -----------------------------------------------------------------------------------


class Adjoints:
    """The cotangent accumulated so far for each value (absent: zero)."""

    def __init__(self, b: Builder):
        self.b = b
        self.table: dict[Value, V] = {}

    def add(self, value: Value, cot: V, op: Operation | None = None) -> None:
        if cot is None or not is_float(value.type):
            return
        cot = self.b.wrap(cot)
        if cot.type is not value.type:
            where = op or value.defining_op
            message = f"gradient rule produced a cotangent of type {cot.type} for a value of type {value.type}"
            raise where.error(message) if where is not None else IRError(message)
        old = self.table.get(value)
        self.table[value] = cot if old is None else old + cot

    def pop(self, value: Value) -> V | None:
        return self.table.pop(value, None)



def apply_vjp(b: Builder, op: Operation, operands: list[V], results: list[V], cots: list) -> list:
    rule = getattr(op, "vjp", None)
    if rule is None:
        raise no_rule(op)
    with b.located(op.loc):
        grads = rule(b, operands, results, cots)
    if len(grads) != len(op.operands):
        raise op.error(f"gradient rule returned {len(grads)} cotangents for {len(op.operands)} operands")
    return grads


# ---- reverse mode: straight line ----------------------------------------------------------------


class Reverse:
    """Builds ``_vjp`` functions in one module; remembers them so calls and recursion reuse them."""

    def __init__(self, module):
        self.module = module
        self.made: dict[str, str] = {}
        # The trip count of each scf.while copied with a counter, and the counters' increments.
        self.trip_counts: dict[Operation, Value] = {}
        self.counter_ops: set[Operation] = set()
        # Each scf.for copied with a tape of its carries (autodiff_scf.taped_for): its own carries.
        self.tapes: dict[Operation, int] = {}

    # The function every caller uses: params + one cotangent per float result -> results + one
    # cotangent per float parameter.
    def vjp_function(self, fn: FuncOp, name: str | None = None) -> str:
        key = fn.sym_name
        if name is None and key in self.made:
            return self.made[key]
        ft = fn.function_type
        fres = float_positions(ft.results)
        fpar = float_positions(ft.inputs)
        new_type = FunctionType([*ft.inputs, *[ft.results[i] for i in fres]],
                                [*ft.results, *[ft.inputs[i] for i in fpar]])
        new = new_function(self.module, fn, name or f"{key}_vjp", new_type, exact=name is not None,
                           extra_names=[f"cot{i}" for i in range(len(fres))])
        name = new.sym_name
        self.made.setdefault(key, name)
        b = Builder(loc=fn.loc)
        b.at_end(new.body.entry)
        args = [V(b, a) for a in new.args]
        params = args[:len(ft.inputs)]
        cots = dict(zip(fres, args[len(ft.inputs):]))
        results, grads = self.body(b, fn, params, cots)
        mark_taped(new, fn)
        b.ret(*results, *[grads[i] if grads[i] is not None else b.zeros_like(params[i]) for i in fpar])
        return name

    def body(self, b: Builder, fn: FuncOp, params: list[V], cots: dict[int, V]):
        """Emit ``fn``'s forward and adjoint at ``b``: (its results, the cotangent of each parameter
        or None).  ``b`` ends at the block where both are available."""
        if _is_cfg(fn):
            from .autodiff_tape import taped_body

            return taped_body(self, b, fn, params, cots)
        block = fn.body.entry
        vmap: dict[Value, Value] = {a: p.value for a, p in zip(fn.args, params)}
        results, grads = self.region(b, block, vmap, cots)
        return results, [grads.get(p.value) for p in params]

    def region(self, b: Builder, block: Block, vmap: dict, cots: dict):
        """Copy ``block``'s ops (a one-block region) at ``b`` through ``vmap``, then emit their adjoint.
        ``cots`` maps a position in the terminator's operands to its cotangent.
        Returns (the terminator's operands, mapped; the adjoint table of everything)."""
        ops, outputs = self.copy_ops(b, block, vmap)
        adj = Adjoints(b)
        for i, c in cots.items():
            adj.add(outputs[i], c)
        self.adjoint(b, ops, adj)
        return [V(b, v) for v in outputs], adj.table

    def copy_ops(self, b: Builder, block: Block, vmap: dict, count: bool = True):
        """Copy ``block``'s ops but its terminator at ``b`` through ``vmap`` (which grows); returns
        (the copies, the terminator's operands mapped).  With ``count`` (the copies' adjoint
        follows), each ``scf.while`` with float results is copied with a trip counter, which
        its adjoint reads (autodiff_scf); the counters' own ops are never copied."""
        from .autodiff_scf import _constant_trips, counted_while, taped_for, uses_tape

        ops: list[Operation] = []
        term = block.terminator
        for op in block.ops:
            if op is term:
                break
            if op in self.counter_ops:
                continue
            if count and isinstance(op, WhileOp) and any(is_float(t) for t in op.result_types):
                ops.append(counted_while(self, b, op, vmap))
            elif count and isinstance(op, ForOp) and any(is_float(t) for t in op.result_types) \
                    and uses_tape(op.result_types, _constant_trips(op)):
                ops.append(taped_for(self, b, op, vmap))
            else:
                ops.append(b.insert(op.clone(vmap)))
        return ops, [vmap.get(v, v) for v in term.operands]

    def adjoint(self, b: Builder, ops: list[Operation], adj: Adjoints) -> None:
        """The adjoints of ``ops`` (copies made by ``copy_ops``), in reverse order, into ``adj``."""
        for op in reversed(ops):
            self.backprop(b, op, adj)

    def backprop(self, b: Builder, op: Operation, adj: Adjoints) -> None:
        cots = [adj.pop(r) for r in op.results]
        if all(c is None for c in cots):
            return
        if isinstance(op, IfOp):
            return self.backprop_if(b, op, cots, adj)
        if isinstance(op, (ForOp, WhileOp)):
            from .autodiff_scf import backprop_loop

            return backprop_loop(self, b, op, cots, adj)
        if isinstance(op, CallOp):
            return self.backprop_call(b, op, cots, adj)
        if not any(is_float(v.type) for v in op.operands):
            return
        grads = apply_vjp(b, op, [V(b, v) for v in op.operands], [V(b, r) for r in op.results], cots)
        for v, g in zip(op.operands, grads):
            adj.add(v, g, op)

    def backprop_call(self, b: Builder, op: CallOp, cots: list, adj: Adjoints) -> None:
        grads = self.call_vjp(b, op, list(op.operands), cots)
        for v, g in zip(op.operands, grads):
            adj.add(v, g, op)

    def call_vjp(self, b: Builder, op: CallOp, operands: list, cots: list) -> list:
        """The cotangent of each of the call's operands (None for non-floats), from a call of the
        callee's ``_vjp`` function on ``operands`` (the call's operands as available at ``b``)."""
        callee = function(self.module, op.callee, "callee", at=op)
        vjp_name = self.vjp_function(callee)
        ft = callee.function_type
        seeds = [cots[i] if cots[i] is not None else b.zeros_like(op.results[i])
                 for i in float_positions(ft.results)]
        with b.located(op.loc):
            outs = b.call(vjp_name, *operands, *seeds,
                          results=[*ft.results, *[ft.inputs[i] for i in float_positions(ft.inputs)]])
        outs = outs if isinstance(outs, tuple) else (outs,)
        grads: list = [None] * len(operands)
        for i, g in zip(float_positions(ft.inputs), outs[len(ft.results):]):
            grads[i] = g
        return grads

    def backprop_if(self, b: Builder, op: IfOp, cots: list, adj: Adjoints) -> None:
        """An ``scf.if`` on the same condition; each branch recomputes its forward and returns the
        cotangents of the float values it uses from outside."""
        free = [v for v in _free_values(op) if is_float(v.type)]
        with b.located(op.loc), b.if_(op.operands[0], [v.type for v in free]) as branch:
            for region, enter in ((op.regions[0], branch.then_), (op.regions[1], branch.else_)):
                with enter():
                    if region.entry is None or region.entry.terminator is None:
                        branch.yield_(*[b.zeros_like(v) for v in free])
                        continue
                    seeds = {i: c for i, c in enumerate(cots) if c is not None}
                    _, table = self.region(b, region.entry, {}, seeds)
                    branch.yield_(*[table[v] if v in table else b.zeros_like(v) for v in free])
        for v, g in zip(free, branch.results):
            adj.add(v, g, op)


def _free_values(op: Operation) -> list[Value]:
    """Values used inside ``op``'s regions but defined outside them, in first-use order."""
    inside: set = set()
    for nested in op.walk():
        if nested is op:
            continue
        inside.update(nested.results)
        for region in nested.regions:
            for block in region.blocks:
                inside.update(block.args)
    for region in op.regions:
        for block in region.blocks:
            inside.update(block.args)
    seen: dict[Value, None] = {}
    for nested in op.walk():
        if nested is op:
            continue
        for v in nested.operands:
            if v not in inside:
                seen.setdefault(v, None)
    return list(seen)


def mark_taped(new: FuncOp, source: FuncOp) -> None:
    """Say in the IR that ``new`` keeps a tape (``attributes {taped}``): it cannot be
    differentiated again, and ``check_differentiable`` says so at the function."""
    if _is_cfg(source):
        new.attributes[TAPED] = UnitAttr()


def _is_cfg(fn: FuncOp) -> bool:
    """Whether reverse mode tapes: several blocks (CFG loops and phis), or structured loops in a
    function of scalars only.  Loops in a function with tensors are differentiated structurally
    (autodiff_scf: the adjoint loop recomputes the carries instead of taping them)."""
    if fn.body.first_block is not fn.body.last_block:
        return True
    ops = list(fn.walk())
    if not any(isinstance(op, (ForOp, WhileOp)) for op in ops):
        return False
    return not any(isinstance(v.type, TensorType) for op in ops for v in (*op.operands, *op.results))


# ---- grad and vjp entry points ------------------------------------------------------------------


def all_or_nothing(make):
    """``make(module, ...)`` either succeeds or leaves the module as it was: a rule missing deep in
    a callee is found after functions were added (and a matching declaration replaced)."""

    @functools.wraps(make)
    def run(module, *args, **kwargs):
        saved = list(module.body.ops)
        try:
            return make(module, *args, **kwargs)
        except BaseException:
            keep = set(saved)
            for op in list(module.body.ops):
                module.body.remove(op)
                if op not in keep:
                    op.drop_all_references()
            for op in saved:
                module.body.append(op)
            raise

    return run


@all_or_nothing
def make_vjp(module, func: str, name: str | None) -> str:
    fn = function(module, func)
    return Reverse(module).vjp_function(fn, name or f"{func}_vjp")


@all_or_nothing
def make_grad(module, func: str, result: int, wrt: Sequence[int] | None, name: str | None) -> str:
    """``@name(params) -> (results..., d result / d each wrt parameter)``."""
    fn = function(module, func)
    ft = fn.function_type
    if not 0 <= result < len(ft.results):
        raise IRError(f"@{func} has {len(ft.results)} result(s): there is no result {result}", fn.loc)
    rt = ft.results[result]
    if not is_float(rt) or (isinstance(rt, TensorType) and (not rt.has_static_shape or rt.num_elements != 1)):
        raise IRError(f"result {result} of @{func} is {rt}: grad needs a float scalar or a float tensor of "
                      f"one element (use vjp for other results)", fn.loc)
    if wrt is None:
        wrt = float_positions(ft.inputs)
    for i in wrt:
        if not 0 <= i < len(ft.inputs):
            raise IRError(f"@{func} has {len(ft.inputs)} parameter(s): there is no parameter {i}", fn.loc)
        if not is_float(ft.inputs[i]):
            raise IRError(f"parameter {i} of @{func} is {ft.inputs[i]}: only float parameters have a gradient",
                          fn.loc)
    new = new_function(module, fn, name or f"{func}_grad",
                       FunctionType(list(ft.inputs), [*ft.results, *[ft.inputs[i] for i in wrt]]), exact=True)
    name = new.sym_name
    b = Builder(loc=fn.loc)
    b.at_end(new.body.entry)
    params = [V(b, a) for a in new.args]
    one = b.const(1.0, rt)  # the seed: d result / d result
    results, grads = Reverse(module).body(b, fn, params, {result: one})
    mark_taped(new, fn)
    b.ret(*results, *[grads[i] if grads[i] is not None else b.zeros_like(params[i]) for i in wrt])
    return name


# ---- forward mode -------------------------------------------------------------------------------


class Forward:
    """Builds ``_jvp`` functions: params + one tangent per float parameter -> results + one tangent
    per float result."""

    def __init__(self, module):
        self.module = module
        self.made: dict[str, str] = {}

    def jvp_function(self, fn: FuncOp, name: str | None = None) -> str:
        key = fn.sym_name
        if name is None and key in self.made:
            return self.made[key]
        ft = fn.function_type
        fpar = float_positions(ft.inputs)
        fres = float_positions(ft.results)
        new = new_function(self.module, fn, name or f"{key}_jvp",
                           FunctionType([*ft.inputs, *[ft.inputs[i] for i in fpar]],
                                        [*ft.results, *[ft.results[i] for i in fres]]), exact=name is not None,
                           extra_names=[f"t_{fn.args[i].name_hint or i}" for i in fpar])
        name = new.sym_name
        self.made.setdefault(key, name)
        if fn.body.first_block is fn.body.last_block:
            self.structured(fn, new)
            return name
        source = fn
        if any(isinstance(op, (ForOp, IfOp, WhileOp)) for op in fn.walk()):
            source = _lowered_copy(fn)
        # Copy the body: the new entry block takes the copied entry's ops; the parameters map to the
        # new function's leading arguments.
        entry = new.body.entry
        vmap: dict = {}
        staging = Region()
        source.body.clone_into(staging, vmap, {})
        first = staging.entry
        for old, param in zip(first.args, entry.args):
            old.replace_all_uses_with(param)
        for op in list(first.ops):
            first.remove(op)
            entry.append(op)
        for block in list(staging.blocks)[1:]:
            staging.remove(block)
            new.body.append(block)
        first.replace_all_uses_with(entry)
        tangents: dict[Value, V] = {}
        b = Builder(loc=fn.loc)
        for i, k in enumerate(fpar):
            tangents[entry.args[k]] = V(b, entry.args[len(ft.inputs) + i])
        tangent_phis: list[tuple[PhiOp, PhiOp]] = []
        for block in reverse_postorder(entry):
            for op in list(block.ops):
                if isinstance(op, PhiOp):
                    if is_float(op.results[0].type):
                        b.at_start(block)
                        phi = PhiOp.build(op.results[0].type)
                        phi.loc = op.loc
                        block.insert_after(phi, op)
                        tangent_phis.append((op, phi))
                        tangents[op.results[0]] = V(b, phi.results[0])
                    continue
                if isinstance(op, ReturnOp):
                    b.before_op(op)
                    outs = [tangents.get(op.operands[i]) or b.zeros_like(op.operands[i]) for i in fres]
                    op.set_operands([*op.operands, *[o.value for o in outs]])
                    continue
                if op.is_terminator or isinstance(op, PhiOp):
                    continue
                self.tangent_of(b, op, tangents)
        reached = set(reverse_postorder(entry))
        for block in new.body.blocks:
            term = block.terminator
            if block not in reached and isinstance(term, ReturnOp):  # never runs; must still verify
                b.before_op(term)
                term.set_operands([*term.operands, *[b.zeros_like(term.operands[i]).value for i in fres]])
        for phi, tphi in tangent_phis:
            for value, pred in phi.incoming:
                t = tangents.get(value)
                if t is None:
                    b.before_op(pred.terminator)
                    t = b.zeros_like(value)
                tphi.add_incoming(t.value, pred)
        return name

    def structured(self, fn: FuncOp, new: FuncOp) -> None:
        """The body of ``new`` for a one-block ``fn``: ``scf`` ops stay structured, with tangents
        as extra carries and results (autodiff_scf.StructuredForward)."""
        from .autodiff_scf import StructuredForward

        ft = fn.function_type
        b = Builder(loc=fn.loc)
        b.at_end(new.body.entry)
        emit = StructuredForward(self, b)
        vmap: dict = {a: p for a, p in zip(fn.args, new.args)}
        for i, k in enumerate(float_positions(ft.inputs)):
            emit.tangents[new.args[k]] = V(b, new.args[len(ft.inputs) + i])
        outs = emit.block(fn.body.entry, vmap)
        b.ret(*outs, *[emit.tangent_or_zero(outs[i]) for i in float_positions(ft.results)])

    def tangent_of(self, b: Builder, op: Operation, tangents: dict) -> None:
        ts = [tangents.get(v) for v in op.operands]
        if all(t is None for t in ts) or not any(is_float(r.type) for r in op.results):
            return
        b.after_op(op)
        if isinstance(op, CallOp):
            callee = function(self.module, op.callee, "callee", mode="forward", at=op)
            ft = callee.function_type
            name = self.jvp_function(callee)
            ins = [ts[i] if ts[i] is not None else b.zeros_like(op.operands[i]) for i in float_positions(ft.inputs)]
            with b.located(op.loc):
                outs = b.call(name, *op.operands, *ins,
                              results=[*ft.results, *[ft.results[i] for i in float_positions(ft.results)]])
            outs = outs if isinstance(outs, tuple) else (outs,)
            # The _jvp call computes the results too: it replaces the call.
            for old, new in zip(op.results, outs):
                old.replace_all_uses_with(new.value)
            for i, t in zip(float_positions(ft.results), outs[len(ft.results):]):
                tangents[outs[i].value] = t
            op.erase()
            return
        apply_jvp_rule(b, op, ts, tangents)


def _lowered_copy(fn: FuncOp) -> FuncOp:
    """A detached copy of ``fn`` with its structured control flow lowered to a CFG."""
    from .scf_to_cf import lower

    copy = fn.clone()
    structured = [op for op in copy.walk() if isinstance(op, (ForOp, IfOp, WhileOp))]
    for op in reversed(structured):
        lower(op)
    return copy


@all_or_nothing
def make_jvp(module, func: str, name: str | None) -> str:
    return Forward(module).jvp_function(function(module, func, mode="forward"), name or f"{func}_jvp")

