"""The ``cf`` dialect: unstructured control flow with phi nodes.

``cf.br ^bb``, ``cf.cond_br %c, ^then, ^else``, ``cf.assert %c, "message"``,
and irc's own ``%x = cf.phi [%a, ^pred1], [%b, ^pred2] : i64``.  Blocks other
than a region's entry take no arguments: values merge through phis, which
lead their block and list one incoming value per predecessor.
"""

from __future__ import annotations

from irc.attributes import DenseArrayAttr, StringAttr
from irc.diagnostics import IRError
from irc.operation import Operation, Pure, Terminator
from irc.registry import syntax_rule
from irc.semantics import wrap
from irc.types import IntegerType, i1

from .scf import check_interleave


def _args_of(syn, kinds, form: str):
    if len(syn.args) != len(kinds) or any(
        (k == "value") != (not isinstance(a, tuple)) or (k != "value" and a[0] != k)
        for a, k in zip(syn.args, kinds)
    ):
        raise IRError(f"'{syn.name}' expects '{form}'", syn.loc)
    return syn.args


class BranchOp(Operation):
    """``cf.br ^dest``: no operands, one successor.

    irc passes no values along edges: the destination merges what it needs with
    ``cf.phi``.
    """

    name = "cf.br"
    traits = frozenset({Terminator})
    summary = "Jump to a block."
    example = "cf.br ^head"

    @property
    def dest(self):
        return self.successors[0]

    def verify_op(self) -> None:
        if self.operands or len(self.successors) != 1 or self.results:
            raise self.error("takes exactly one successor and no operands (irc passes values with cf.phi)")
        check_interleave(self)  # a loop's back edge keeps its scf.for's hint (scf-to-cf)

    @classmethod
    def parse_uniform(cls, ctx, syn):
        (succ,) = _args_of(syn, ["succ"], "cf.br ^dest")
        return cls(successors=[ctx.successor(succ)], attributes=syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.successor(self.dest, self)}{p.attr_dict(self.attributes)}")

    @classmethod
    def build(cls, dest):
        return cls(successors=[dest])


class CondBranchOp(Operation):
    """``cf.cond_br %cond, ^true_dest, ^false_dest``: one i1 operand, two successors.

    ``canonicalize`` turns a branch on a constant (or to one block twice) into ``cf.br``.
    """

    name = "cf.cond_br"
    traits = frozenset({Terminator})
    summary = "Jump to the first block if the i1 condition holds, else to the second."
    example = "cf.cond_br %cond, ^body, ^exit"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.successors) != 2 or self.results:
            raise self.error("takes one i1 condition and two successors")
        if self.operands[0].type is not i1:
            raise self.error(f"condition must be i1, got {self.operands[0].type}")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        cond, t, f = _args_of(syn, ["value", "succ", "succ"], "cf.cond_br %cond, ^true_dest, ^false_dest")
        return cls([ctx.value(cond, i1)], successors=[ctx.successor(t), ctx.successor(f)], attributes=syn.attrs)

    def print_custom(self, p) -> None:
        t, f = self.successors
        weights = self.attributes.get("branch_weights")
        shown = f" weights([{', '.join(map(str, weights.values))}])" if isinstance(weights, DenseArrayAttr) else ""
        p.write(f" {p.value(self.operands[0])}{shown}, {p.successor(t, self)}, {p.successor(f, self)}"
                f"{p.attr_dict(self.attributes, ('branch_weights',) if shown else ())}")

    @classmethod
    def build(cls, cond, true_dest, false_dest):
        return cls([cond], successors=[true_dest, false_dest])


class PhiOp(Operation):
    """``%x = cf.phi [%a, ^bb0], [%b, ^bb1] : T``: operand i flows in from ``successors[i]``.

    On entry to the block all of its phis read their incoming values at once (a
    parallel copy), so ``%a = phi [%b, ^l]`` and ``%b = phi [%a, ^l]`` swap.
    """

    name = "cf.phi"
    traits = frozenset({Pure})
    summary = "Merge one value per predecessor where control flow joins."
    example = "%r = cf.phi [%a, ^entry], [%b, ^body] : i64"

    def fold(self, constants):
        """A phi whose incoming values are all one value (or the phi itself) is that value."""
        result = self.results[0]
        only = None
        for v in self.operands:
            if v is result or v is only:
                continue
            if only is not None:
                return None
            only = v
        return [only] if only is not None else None

    @property
    def incoming(self):
        return list(zip(self.operands, self.successors))

    def value_for(self, pred):
        for v, b in zip(self.operands, self.successors):
            if b is pred:
                return v
        return None

    def verify_op(self) -> None:
        if len(self.results) != 1:
            raise self.error("has exactly one result")
        if len(self.operands) != len(self.successors):
            raise self.error("needs one block per incoming value")
        t = self.results[0].type
        for v in self.operands:
            if v.type is not t:
                raise self.error(f"incoming value of type {v.type} does not match the result type {t}")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if not syn.args or any(not isinstance(a, tuple) or a[0] != "incoming" for a in syn.args):
            raise IRError("'cf.phi' expects '[%value, ^pred], ... : type'", syn.loc)
        t = syn.single_type()
        values = [ctx.value(a[1], t) for a in syn.args]
        blocks = [ctx.block(a[2]) for a in syn.args]
        return cls(values, [t], syn.attrs, blocks)

    def print_custom(self, p) -> None:
        incoming = ", ".join(f"[{p.value(v)}, {p.block(b)}]" for v, b in zip(self.operands, self.successors))
        p.write(f" {incoming}{p.attr_dict(self.attributes)} : {self.results[0].type}")

    @classmethod
    def build(cls, type, incoming=()):
        incoming = list(incoming)
        return cls([v for v, _ in incoming], [type], {}, [b for _, b in incoming])

    def add_incoming(self, value, block) -> None:
        self.set_operands(list(self.operands) + [value])
        self.set_successors(list(self.successors) + [block])

    def remove_incoming(self, block) -> None:
        keep = [(v, b) for v, b in zip(self.operands, self.successors) if b is not block]
        self.set_operands([v for v, _ in keep])
        self.set_successors([b for _, b in keep])


class AssertOp(Operation):
    """``cf.assert %cond, "message"``: one i1 operand, a ``msg`` string attribute, no results.

    Not pure, so it is never removed as dead; the interpreter reports a false
    condition as an error at the op, quoting the message.
    """

    name = "cf.assert"
    summary = "Abort with a message when the i1 condition is false."
    example = 'cf.assert %cond, "n must be positive"'

    def verify_op(self) -> None:
        if len(self.operands) != 1 or self.operands[0].type is not i1:
            raise self.error("takes one i1 condition")
        if not isinstance(self.attributes.get("msg"), StringAttr):
            raise self.error("requires a 'msg' string attribute")

    def interpret(self, interp, args):
        if not args[0]:
            raise interp.fault(self, f"assertion failed: {self.attributes['msg'].value}")
        return []

    def fold(self, constants):
        return None

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.args) != 2 or isinstance(syn.args[0], tuple) or not isinstance(syn.args[1], tuple) \
                or syn.args[1][0] != "literal" \
                or syn.args[1][1].kind != "str":
            raise IRError("'cf.assert' expects '%cond, \"message\"'", syn.loc)
        return cls([ctx.value(syn.args[0], i1)], [], {"msg": StringAttr(syn.args[1][1].value), **syn.attrs})

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}, {self.attributes['msg']}{p.attr_dict(self.attributes, ('msg',))}")


class SwitchOp(Operation):
    """``cf.switch %flag : i32, [default: ^bb0, 42: ^bb1, ...]``: jump to the block whose case
    equals the flag, else to the default (``successors[0]``); ``case_values`` lists the cases
    in the order of ``successors[1:]``.  As with cf.br, values merge in the targets' phis.
    """

    name = "cf.switch"
    traits = frozenset({Terminator})
    summary = "Jump to the block of the case equal to an integer flag, or to the default block."
    example = "cf.switch %w : i32, [default: ^other, 0: ^zero, 1: ^one]"

    @property
    def cases(self) -> list[int]:
        return [int(v) for v in self.attributes["case_values"].values]

    def verify_op(self) -> None:
        if len(self.operands) != 1 or self.results or not self.successors:
            raise self.error("takes one integer flag, a default block and its cases")
        t = self.operands[0].type
        if not isinstance(t, IntegerType):
            raise self.error(f"the flag must be an integer, got {t}")
        values = self.attributes.get("case_values")
        if not isinstance(values, DenseArrayAttr) or len(values.values) != len(self.successors) - 1:
            raise self.error("needs one case value per case block ('case_values')")
        if len(set(values.values)) != len(values.values):
            raise self.error("has a case value twice")

    def interpret_successor(self, value):
        """The successor taken for the flag's canonical value."""
        for case, block in zip(self.cases, self.successors[1:]):
            if case == value:
                return block
        return self.successors[0]

    def print_custom(self, p) -> None:
        t = self.operands[0].type
        lines = [f"default: {p.successor(self.successors[0], self)}"]
        lines += [f"{v}: {p.successor(b, self)}" for v, b in zip(self.cases, self.successors[1:])]
        inner = p.indent + "  "
        body = (",\n" + inner).join(lines)
        p.write(f" {p.value(self.operands[0])} : {t}, [\n{inner}{body}\n{p.indent}]"
                f"{p.attr_dict(self.attributes, ('case_values',))}")


@syntax_rule("switch_op")
def _parse_switch(ctx, children):
    kw, flag, type_tok = children[0], children[1], children[2]
    t = ctx.type_of(type_tok)
    if not isinstance(t, IntegerType):
        raise ctx.error(f"the flag of cf.switch must be an integer, got {t}", type_tok)
    attrs = children[-1] if isinstance(children[-1], dict) else {}
    cases = [c for c in children[3:] if isinstance(c, tuple)]
    defaults = [c for c in cases if c[0] is None]
    if len(defaults) != 1 or cases[0][0] is not None:
        raise ctx.error("cf.switch lists 'default: ^block' first, then its cases", kw)
    values = [wrap(c[0], t) for c in cases[1:]]  # canonical values: 255 and -1 are one i8 case
    blocks = [c[1] for c in cases]
    return SwitchOp([ctx.value(flag, t)], [], {**attrs, "case_values": DenseArrayAttr(t, values)}, blocks,
                    loc=ctx.loc(kw))


@syntax_rule("switch_default")
def _parse_switch_default(ctx, children):
    word, succ = children
    if word.value != "default":
        raise ctx.error(f"expected 'default' or an integer case, got '{word.value}'", word)
    return (None, ctx.successor(succ))


@syntax_rule("switch_value")
def _parse_switch_value(ctx, children):
    value, succ = children
    return (int(value.value), ctx.successor(succ))
