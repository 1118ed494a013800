"""The ``scf`` dialect: structured control flow with regions.

Spelled as MLIR::

    %r = scf.for %i = %lb to %ub step %s iter_args(%acc = %init) -> (i64) {
      ...
      scf.yield %next : i64
    }
    %x = scf.if %c -> (i64) { scf.yield %a : i64 } else { scf.yield %b : i64 }
    %w = scf.while (%a = %init) : (i64) -> i64 {
      scf.condition(%more) %a : i64
    } do {
    ^bb0(%a2: i64):
      scf.yield %a3 : i64
    }

A region of a result-less ``scf.for``/``scf.if`` may leave out its empty
``scf.yield``; the parser adds it and the printer leaves it out again.
"""

from __future__ import annotations

from irc.block import Block, Region
from irc.diagnostics import IRError
from irc.operation import HasRecursiveEffects, Operation, ReturnLike, Terminator
from irc.registry import syntax_rule
from irc.types import FunctionType, IndexType, i1, index

from .func import _print_typed_values, _typed_values

#: The fault of an ``scf.for`` whose step is not positive: the interpreter reports it, and
#: the ``cf.assert`` that scf-to-cf places before a loop with an unknown step says it too.
STEP_NOT_POSITIVE = "scf.for step must be positive"

INTERLEAVE = "interleave"
"""An ``scf.for`` attribute (an integer), which scf-to-cf keeps on the loop's back edge
``cf.br``: how many iterations a backend should keep in flight at once, where the body is one
long dependency chain that a core could overlap with the next iteration's (the CPU backend
makes it LLVM's ``llvm.loop.interleave.count``).  A hint: it never changes what a loop does."""

MAX_INTERLEAVE = 16


def check_interleave(op) -> None:
    """The ``interleave`` hint of an ``scf.for`` or ``cf.br``, if any, is an integer from 1 to
    ``MAX_INTERLEAVE``."""
    from irc.attributes import IntegerAttr

    hint = op.attributes.get(INTERLEAVE)
    if hint is None:
        return
    if not isinstance(hint, IntegerAttr) or getattr(hint.type, "width", 0) == 1 \
            or not 1 <= hint.value <= MAX_INTERLEAVE:
        raise op.error(f"'{INTERLEAVE}' must be an integer from 1 to {MAX_INTERLEAVE} (iterations in flight)")


def signed_value(value: int, type_) -> int:
    """The signed reading of a canonical scalar of an integer or index type (i1: 1 -> -1)."""
    from irc.semantics import signed, wrap

    return signed(wrap(value, type_), type_)


def constant_step(op) -> int | None:
    """The signed value of a ``scf.for``'s step when it is a constant, else None."""
    from irc.attributes import IntegerAttr
    from irc.patterns import constant_value

    attr = constant_value(op.step)
    return signed_value(attr.value, op.step.type) if isinstance(attr, IntegerAttr) else None


def _ensure_yield(region: Region, loc) -> None:
    """Add the implicit empty ``scf.yield`` to a block that has no terminator."""
    if region.is_empty:
        region.append(Block())
    block = region.entry
    if block.terminator is None:
        block.append(YieldOp([], loc=loc))


def _elides_yield(region: Region) -> bool:
    term = region.entry.terminator if region.entry else None
    return isinstance(term, YieldOp) and not term.operands and not term.attributes


def _print_body(p, region: Region, skip_empty_yield: bool) -> None:
    if skip_empty_yield and _elides_yield(region) and region.first_block is region.last_block:
        term = region.entry.terminator
        block = region.entry
        # Print without the trailing empty yield.
        block.remove(term)
        try:
            p.region(region)
        finally:
            block.append(term)
    else:
        p.region(region)


class YieldOp(Operation):
    """``scf.yield %a : T``: ends a region of ``scf.for``, ``scf.if`` or ``scf.while``.

    Its operands are the region's results: the loop-carried values of ``scf.for``
    (the op's result types), the results of ``scf.if``, or, in the ``do`` region of
    ``scf.while``, the values of the next iteration (the types of the initial values).
    """

    name = "scf.yield"
    traits = frozenset({Terminator, ReturnLike})
    summary = "Pass values out of an scf region (loop-carried values, if results)."
    example = "scf.yield %a : i64"

    def verify_op(self) -> None:
        parent = self.parent_op
        if not isinstance(parent, (ForOp, IfOp, WhileOp, ExecuteRegionOp)):
            raise self.error("must end a region of scf.for, scf.if, scf.while or scf.execute_region")
        expected = parent.yield_types(self.parent_region)
        if self.operand_types != expected:
            raise self.error(f"yields ({', '.join(map(str, self.operand_types))}) but '{parent.name}' "
                             f"expects ({', '.join(map(str, expected))})")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return cls(_typed_values(ctx, syn), [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(_print_typed_values(p, self))


class ConditionOp(Operation):
    """``scf.condition(%cond) %a, %b : T1, T2``: ends the ``before`` region of ``scf.while``.

    The first operand is the i1 condition; the rest, of the loop's result types, go
    to the ``do`` region when it holds and become the loop's results when it does not.
    """

    name = "scf.condition"
    traits = frozenset({Terminator})
    summary = "End the 'before' region of scf.while: continue with the values if the condition holds."
    example = "scf.condition(%cond) %a : i64"

    def verify_op(self) -> None:
        parent = self.parent_op
        if not isinstance(parent, WhileOp) or self.parent_region is not parent.regions[0]:
            raise self.error("must end the 'before' region of scf.while")
        if not self.operands or self.operands[0].type is not i1:
            raise self.error("needs an i1 condition")
        expected = parent.result_types
        if self.operand_types[1:] != expected:
            raise self.error(f"forwards ({', '.join(map(str, self.operand_types[1:]))}) but the loop "
                             f"results are ({', '.join(map(str, expected))})")

    def print_custom(self, p) -> None:
        p.write(f"({p.value(self.operands[0])})")
        if len(self.operands) > 1:
            p.write(f" {p.values(self.operands[1:])} : {p.types(self.operand_types[1:])}")
        p.write(p.attr_dict(self.attributes))


@syntax_rule("condition_op")
def _parse_condition(ctx, children):
    kw = children[0]
    cond = ctx.value(children[1], i1)
    values = []
    if len(children) == 4:
        toks, types = children[2], children[3]
        if len(toks) != len(types):
            raise ctx.error(f"'scf.condition' forwards {len(toks)} values but lists {len(types)} types", toks[0])
        values = ctx.values(toks, types)
    return ConditionOp([cond, *values], loc=ctx.loc(kw))


class ForOp(Operation):
    """``scf.for %iv = %lb to %ub step %step [iter_args(%acc = %init) -> (T)] [: I] { ... }``.

    Operands: lower bound, upper bound and step (one integer or index type ``I``,
    ``index`` unless written after the header), then the initial values of the
    iter_args.  Attributes: ``parallel`` (iterations independent: split-parallel) and
    ``interleave = N`` (a hint: ``INTERLEAVE``).  The body is one block whose arguments are the
    induction variable and the iter_args; its ``scf.yield`` gives the next values, and the op's
    results are the last ones.

    Semantics (MLIR's): ``%iv`` takes the values lb, lb + step, lb + 2*step, ... that
    are below ub, comparing as signed integers and computing each next value exactly,
    without wrapping: a loop whose next value would pass the type's maximum ends there
    (``scf.for %i = 120 to 127 step 5 : i8`` runs twice, never with a wrapped -126).
    The step must be positive: a constant one that is not is a verifier error, a
    dynamic one a fault (``STEP_NOT_POSITIVE``) before the first iteration, at every
    level (interpreter, scf-to-cf, JIT).
    """

    name = "scf.for"
    traits = frozenset({HasRecursiveEffects})
    summary = "Counted loop from lb (inclusive) to ub (exclusive) by step, carrying iter_args."
    example = "%r = scf.for %iv = %lb to %ub step %step iter_args(%acc = %a) -> (i64) { %acc1 = arith.addi %acc, %b : i64 scf.yield %acc1 : i64 }"

    @property
    def lower_bound(self):
        return self.operands[0]

    @property
    def upper_bound(self):
        return self.operands[1]

    @property
    def step(self):
        return self.operands[2]

    @property
    def inits(self):
        return self.operands[3:]

    @property
    def body(self) -> Block:
        return self.regions[0].entry

    @property
    def induction_var(self):
        return self.body.args[0]

    def yield_types(self, region):
        return self.result_types

    def interpret(self, interp, args):
        t = self.lower_bound.type
        lb, ub, step = (signed_value(v, t) for v in args[:3])  # i1's "true" is -1 here
        values = list(args[3:])
        if step <= 0:
            raise interp.fault(self, f"assertion failed: {STEP_NOT_POSITIVE}")
        region, env = self.regions[0], interp.env
        iv = lb
        while iv < ub:  # Python integers: the next value never wraps
            _, values = interp.run_region(region, [iv, *values], env)
            iv += step
        return values

    def verify_op(self) -> None:
        if len(self.operands) < 3 or len(self.regions) != 1 or self.regions[0].is_empty:
            raise self.error("needs lb, ub, step and a body")
        check_interleave(self)
        lb, ub, st = self.operand_types[:3]
        if not (lb is ub is st) or not lb.is_int_or_index:
            raise self.error(f"bounds and step must have one integer or index type, got {lb}, {ub}, {st}")
        inits = [v.type for v in self.inits]
        if inits != self.result_types:
            raise self.error("iter_args initial values must match the result types")
        args = [a.type for a in self.body.args]
        if args != [lb, *inits]:
            raise self.error("body arguments must be the induction variable and the iter_args")
        if self.regions[0].first_block is not self.regions[0].last_block:
            raise self.error("body must be a single block")
        step = constant_step(self)
        if step is not None and step <= 0:
            raise self.error(f"constant step must be positive, got {step}")

    def print_custom(self, p) -> None:
        iv = self.induction_var
        out = (f" {p.value(iv)} = {p.value(self.lower_bound)} to {p.value(self.upper_bound)} "
               f"step {p.value(self.step)}")
        if self.inits:
            pairs = ", ".join(f"{p.value(a)} = {p.value(v)}" for a, v in zip(self.body.args[1:], self.inits))
            out += f" iter_args({pairs}) -> ({p.types(self.result_types)})"
        if not isinstance(iv.type, IndexType):
            out += f" : {iv.type}"
        p.write(out + " ")
        _print_body(p, self.regions[0], not self.results)
        p.write(p.attr_dict(self.attributes))  # after the body, as MLIR prints it


@syntax_rule("for_header")
def _parse_for_header(ctx, children):
    kw, defs, lb_tok, ub_tok, step_tok = children[:5]
    iter_args, iv_type = None, None
    for c in children[5:]:
        if isinstance(c, tuple):
            iter_args = c
        else:
            iv_type = ctx.type_of(c)
    iv_type = iv_type or index
    operands = [ctx.value(t, iv_type) for t in (lb_tok, ub_tok, step_tok)]
    entry = [(defs.value.rstrip("= \t\n")[1:], iv_type, ctx.loc(defs))]
    result_types = []
    if iter_args is not None:
        pairs, result_types = iter_args
        if len(pairs) != len(result_types):
            raise ctx.error(f"iter_args has {len(pairs)} values but {len(result_types)} types", defs)
        for (d, v), t in zip(pairs, result_types):
            operands.append(ctx.value(v, t))
            entry.append((d.value.rstrip("= \t\n")[1:], t, ctx.loc(d)))
    ctx.expect_entry_args(entry, isolated=False)
    return (operands, result_types, ctx.loc(kw))


@syntax_rule("for_op")
def _parse_for(ctx, children):
    (operands, result_types, loc), region, *attrs = children
    if not result_types:
        _ensure_yield(region, loc)
    return ForOp(operands, result_types, attrs[0] if attrs else {}, regions=[region], loc=loc)


class IfOp(Operation):
    """``%r = scf.if %cond -> (T) { ... } else { ... }``: one i1 operand, two regions.

    The ``else`` region may be left out when the op has no results.  Each region
    ends in ``scf.yield`` with the op's result types.
    """

    name = "scf.if"
    traits = frozenset({HasRecursiveEffects})
    summary = "Run the 'then' or the 'else' region by an i1 condition; results come from scf.yield."
    example = "%r = scf.if %cond -> (i64) { scf.yield %a : i64 } else { scf.yield %b : i64 }"

    @property
    def then_region(self) -> Region:
        return self.regions[0]

    @property
    def else_region(self) -> Region:
        return self.regions[1]

    def yield_types(self, region):
        return self.result_types

    def interpret(self, interp, args):
        region = self.then_region if args[0] else self.else_region
        if region.is_empty:
            return []
        return interp.run_region(region, [], interp.env)[1]

    def verify_op(self) -> None:
        if len(self.operands) != 1 or self.operands[0].type is not i1:
            raise self.error("needs one i1 condition")
        if len(self.regions) != 2 or self.then_region.is_empty:
            raise self.error("needs a 'then' region and an 'else' region (which may be empty)")
        if self.results and self.else_region.is_empty:
            raise self.error("with results needs an 'else' region")

    def print_custom(self, p) -> None:
        out = f" {p.value(self.operands[0])}"
        if self.results:
            out += f" -> ({p.types(self.result_types)})"
        p.write(out + p.attr_dict(self.attributes) + " ")
        _print_body(p, self.then_region, not self.results)
        # MLIR prints 'else' whenever the region has a block ('else { }' is one holding only
        # the implicit yield; no 'else' is no block).  irc's own form leaves out an else that
        # does nothing, whichever it is.
        elided = not self.results and _elides_yield(self.else_region) and len(self.else_region.entry) == 1
        if not self.else_region.is_empty and (p.mlir_syntax or not elided):
            p.write(" else ")
            _print_body(p, self.else_region, not self.results)


@syntax_rule("if_header")
def _parse_if_header(ctx, children):
    kw = children[0]
    cond = ctx.value(children[1], i1)
    result_types = children[2] if len(children) > 2 else []
    ctx.expect_entry_args([], isolated=False)
    return (cond, result_types, ctx.loc(kw))


@syntax_rule("if_op")
def _parse_if(ctx, children):
    (cond, result_types, loc), then_region = children[:2]
    else_region = children[2] if len(children) > 2 else None
    if not result_types:
        _ensure_yield(then_region, loc)
        if else_region is not None:  # 'else { }': a block holding the implicit yield, as in MLIR
            _ensure_yield(else_region, loc)
    if else_region is None:  # no 'else': a region with no block, as in MLIR
        else_region = Region()
    return IfOp([cond], result_types, regions=[then_region, else_region], loc=loc)


class WhileOp(Operation):
    """``%r = scf.while (%v = %init) : (T) -> R { before } do { ^bb0(%x: R): after }``.

    Operands are the initial values.  The ``before`` region receives them (or the
    ``after`` region's yield) and ends in ``scf.condition``; while the condition
    holds, the forwarded values go to ``after``, whose ``scf.yield`` starts the next
    iteration; otherwise they are the op's results.
    """

    name = "scf.while"
    traits = frozenset({HasRecursiveEffects})
    summary = "General loop: 'before' computes a condition and forwards values; 'do' computes the next iteration."
    example = "%r = scf.while (%v = %a) : (i64) -> i64 { %more = arith.cmpi slt, %v, %b : i64 scf.condition(%more) %v : i64 } do { ^bb0(%v1: i64): %v2 = arith.addi %v1, %c : i64 scf.yield %v2 : i64 }"

    @property
    def before(self) -> Region:
        return self.regions[0]

    @property
    def after(self) -> Region:
        return self.regions[1]

    def yield_types(self, region):
        return [v.type for v in self.operands]

    def interpret(self, interp, args):
        values, env = list(args), interp.env
        while True:
            _, forwarded = interp.run_region(self.before, values, env)
            if not forwarded[0]:
                return forwarded[1:]
            _, values = interp.run_region(self.after, forwarded[1:], env)

    def verify_op(self) -> None:
        if len(self.regions) != 2 or self.before.is_empty or self.after.is_empty:
            raise self.error("needs a 'before' and an 'after' region")
        inits = [v.type for v in self.operands]
        if [a.type for a in self.before.entry.args] != inits:
            raise self.error("'before' region arguments must match the initial values")
        if [a.type for a in self.after.entry.args] != self.result_types:
            raise self.error("'after' region arguments must match the result types")

    def print_custom(self, p) -> None:
        pairs = ", ".join(f"{p.value(a)} = {p.value(v)}" for a, v in zip(self.before.entry.args, self.operands))
        ft = FunctionType([v.type for v in self.operands], self.result_types)
        p.write(f"{' (' + pairs + ')' if pairs else ''} : {ft}{p.attr_dict(self.attributes)} ")
        p.region(self.before)
        p.write(" do ")
        p.region(self.after, print_entry_args=True, print_entry_label=bool(self.after.entry.args))


@syntax_rule("while_header")
def _parse_while_header(ctx, children):
    kw, pairs, ft = children[0], children[1:-1], children[-1]
    if len(pairs) != len(ft.inputs):
        raise ctx.error(f"scf.while has {len(pairs)} initial values but its type lists {len(ft.inputs)}", kw)
    operands, entry = [], []
    for (d, v), t in zip(pairs, ft.inputs):
        operands.append(ctx.value(v, t))
        entry.append((d.value.rstrip("= \t\n")[1:], t, ctx.loc(d)))
    ctx.expect_entry_args(entry, isolated=False)
    return (operands, list(ft.results), ctx.loc(kw))


@syntax_rule("while_op")
def _parse_while(ctx, children):
    (operands, result_types, loc), before, after = children
    if after.is_empty or [a.type for a in after.entry.args] != result_types:
        raise IRError("the 'do' region of scf.while must start with '^bb0(...):' naming one argument "
                      "per loop result", loc)
    return WhileOp(operands, result_types, regions=[before, after], loc=loc)



class RegionRunOnce(Operation):
    """An op without operands that runs its one region once, whose terminator gives its results
    (``scf.execute_region``, ``memref.alloca_scope``)."""

    traits = frozenset({HasRecursiveEffects})

    def yield_types(self, region):
        return self.result_types

    def verify_op(self) -> None:
        if len(self.regions) != 1 or self.regions[0].is_empty or self.operands:
            raise self.error("takes no operands and has one region with at least one block")
        if self.regions[0].entry.args:
            raise self.error("its region's entry block takes no arguments")

    def interpret(self, interp, args):
        _, values = interp.run_region(self.regions[0], [], interp.env)
        return values


class ExecuteRegionOp(RegionRunOnce):
    """``%r = scf.execute_region -> (T) { ... }``: run a region once, which may hold
    several blocks (and so unstructured control flow); its ``scf.yield`` gives the results."""

    name = "scf.execute_region"
    summary = "Run a region of any number of blocks once; scf.yield gives its results."
    example = "%r = scf.execute_region -> i64 { %k = arith.constant 1 : i64 scf.yield %k : i64 }"

    def print_custom(self, p) -> None:
        if self.results:
            types = p.types(self.result_types)
            p.write(f" -> {types if len(self.results) == 1 else '(' + types + ')'}")
        p.write(" ")
        p.region(self.regions[0])
        p.write(p.attr_dict(self.attributes))


@syntax_rule("execute_op")
def _parse_execute(ctx, children):
    kw = children[0]
    types, region, attrs = [], None, {}
    for c in children[1:]:
        if isinstance(c, Region):
            region = c
        elif isinstance(c, dict):
            attrs = c
        else:
            types = c
    if kw.type == "ALLOCA_SCOPE_KW":  # memref.alloca_scope is written as execute_region is
        from .memref import AllocaScopeOp, AllocaScopeReturnOp

        if region.is_empty:
            region.append(Block())
        block = region.entry
        if not types and block.terminator is None:  # the implicit empty return, as MLIR elides it
            block.append(AllocaScopeReturnOp([], [], loc=ctx.loc(kw)))
        return AllocaScopeOp([], types, attrs, regions=[region], loc=ctx.loc(kw))
    return ExecuteRegionOp([], types, attrs, regions=[region], loc=ctx.loc(kw))


class ReduceOp(Operation):
    """``scf.reduce(%a, %b : T1, T2) {...}, {...}``: ends the body of ``scf.parallel``,
    contributing one value per reduction; region i combines two values of type Ti
    (``^bb0(%lhs: Ti, %rhs: Ti)``) into one with ``scf.reduce.return``."""

    name = "scf.reduce"
    traits = frozenset({Terminator, ReturnLike})
    summary = "End the body of an scf.parallel loop, giving one value per reduction."
    example = "scf.reduce"

    def verify_op(self) -> None:
        parent = self.parent_op
        if not isinstance(parent, ParallelOp):
            raise self.error("must end the body of scf.parallel")
        if self.operand_types != parent.result_types or len(self.regions) != len(self.operands):
            raise self.error(f"reduces ({', '.join(map(str, self.operand_types))}) but the loop's results are "
                             f"({', '.join(map(str, parent.result_types))}), with one region each")
        for value, region in zip(self.operands, self.regions):
            t = value.type
            if region.is_empty or [a.type for a in region.entry.args] != [t, t]:
                raise self.error(f"each reduction region takes two {t} arguments ('^bb0(%lhs: {t}, %rhs: {t}):')")

    def print_custom(self, p) -> None:
        if self.operands:
            p.write(f"({p.values(self.operands)} : {p.types(self.operand_types)}) ")
            for i, region in enumerate(self.regions):
                if i:
                    p.write(", ")
                p.region(region, print_entry_args=True, print_entry_label=True)
        p.write(p.attr_dict(self.attributes))


@syntax_rule("reduce_op")
def _parse_reduce(ctx, children):
    kw = children[0]
    if len(children) == 1:
        return ReduceOp([], [], loc=ctx.loc(kw))
    values, types, regions = children[1], children[2], children[3:]
    if len(values) != len(types) or len(regions) != len(values):
        raise ctx.error("scf.reduce needs one type and one region per value", kw)
    return ReduceOp(ctx.values(values, types), [], regions=list(regions), loc=ctx.loc(kw))


class ReduceReturnOp(Operation):
    """``scf.reduce.return %x : T``: the combined value of a reduction region of scf.reduce."""

    name = "scf.reduce.return"
    traits = frozenset({Terminator, ReturnLike})
    summary = "Give the combined value of an scf.reduce region."
    example = "scf.reduce.return %a : i64"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or not isinstance(self.parent_op, ReduceOp):
            raise self.error("returns one value from a region of scf.reduce")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return cls(_typed_values(ctx, syn), [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(_print_typed_values(p, self))


class ParallelOp(Operation):
    """``scf.parallel (%i, %j) = (%l0, %l1) to (%u0, %u1) step (%s0, %s1) { ... }``: a loop nest
    whose iterations may run in any order.  Operands: the lower bounds, the upper bounds, the
    steps, then the initial values (``operandSegmentSizes`` as in MLIR); the body's arguments are the induction
    variables; with ``init (...) -> (...)`` the results are reductions, combined by the
    regions of the body's ``scf.reduce`` starting from the initial values.  The interpreter
    (and scf-to-cf) run the iterations in order, as a nest of loops."""

    name = "scf.parallel"
    traits = frozenset({HasRecursiveEffects})
    summary = "A loop nest whose iterations are independent, with optional reductions (scf.reduce)."
    example = "scf.parallel (%iv) = (%lb) to (%ub) step (%step) { scf.reduce }"

    @property
    def rank(self) -> int:
        return (len(self.operands) - len(self.results)) // 3

    @property
    def inits(self):
        return self.operands[3 * self.rank:]

    def verify_op(self) -> None:
        n = len(self.operands) - len(self.results)
        if n <= 0 or n % 3 or len(self.regions) != 1 or self.regions[0].is_empty:
            raise self.error("needs equal numbers of lower bounds, upper bounds and steps, and a body")
        if any(t is not index for t in self.operand_types[:n]):
            raise self.error("bounds and steps must be index values")
        if [v.type for v in self.inits] != self.result_types:
            raise self.error("needs one initial value per result, of its type")
        if [a.type for a in self.regions[0].entry.args] != [index] * self.rank:
            raise self.error("the body's arguments are one index induction variable per dimension")

    def interpret(self, interp, args):
        r = self.rank
        lbs, ubs, steps, accs = args[:r], args[r:2 * r], args[2 * r:3 * r], list(args[3 * r:])
        if any(s <= 0 for s in steps):
            raise interp.fault(self, "a step of scf.parallel is not positive")
        region, env = self.regions[0], interp.env

        def nest(d, ivs):
            if d == r:
                reduce, values = interp.run_region(region, ivs, env)
                for i, value in enumerate(values):  # combine in iteration order
                    _, (accs[i],) = interp.run_region(reduce.regions[i], [accs[i], value], env)
                return
            iv = lbs[d]
            while iv < ubs[d]:
                nest(d + 1, [*ivs, iv])
                iv += steps[d]

        nest(0, [])
        return accs

    def print_custom(self, p) -> None:
        r = self.rank
        ivs = p.values(self.regions[0].entry.args)
        ops = self.operands
        p.write(f" ({ivs}) = ({p.values(ops[:r])}) to ({p.values(ops[r:2 * r])}) step ({p.values(ops[2 * r:3 * r])}) ")
        if self.results:
            p.write(f"init ({p.values(self.inits)}) -> ({p.types(self.result_types)}) ")
        p.region(self.regions[0])
        p.write(p.attr_dict(self.attributes, ("operandSegmentSizes",)))


@syntax_rule("parallel_header")
def _parse_parallel_header(ctx, children):
    kw, ivs, lbs, ubs, steps = children[:5]
    inits, types = (children[5], children[6]) if len(children) > 5 else ([], [])
    if not (len(ivs) == len(lbs) == len(ubs) == len(steps)):
        raise ctx.error("scf.parallel needs one lower bound, upper bound and step per induction variable", kw)
    if len(inits) != len(types):
        raise ctx.error(f"scf.parallel has {len(inits)} initial values but {len(types)} result types", kw)
    operands = [ctx.value(t, index) for t in (*lbs, *ubs, *steps)] + ctx.values(inits, types)
    ctx.expect_entry_args([(t.value[1:], index, ctx.loc(t)) for t in ivs], isolated=False)
    return (operands, list(types), ctx.loc(kw))


@syntax_rule("parallel_op")
def _parse_parallel(ctx, children):
    (operands, types, loc), region, *attrs = children
    if region.is_empty:
        region.append(Block())
    body = region.entry
    if body.terminator is None and not types:
        body.append(ReduceOp([], [], loc=loc))  # MLIR elides an empty scf.reduce
    return ParallelOp(operands, types, attrs[0] if attrs else {}, regions=[region], loc=loc)
