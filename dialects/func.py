"""The ``func`` dialect: functions, calls and returns.

``func.func @f(%a: i64) -> i64 { ... }`` (a body) or ``func.func private
@g(i64) -> i64`` (a declaration); ``func.return %x : i64``;
``%r = func.call @g(%a) : (i64) -> i64``.  Attributes are MLIR's:
``sym_name``, ``function_type``, ``sym_visibility``.
"""

from __future__ import annotations

from irc.attributes import StringAttr, SymbolRefAttr, TypeAttr
from irc.block import Block, Region
from irc.diagnostics import IRError
from irc.operation import IsolatedFromAbove, Operation, ReturnLike, Terminator
from irc.registry import syntax_rule
from irc.types import FunctionType

_FUNC_ATTRS = ("sym_name", "function_type", "sym_visibility")


class FunctionLike:
    """What every function op (func.func, gpu.func) answers: its name, signature, body and
    parameters, from the ``sym_name`` and ``function_type`` attributes and its one region."""

    @property
    def sym_name(self) -> str:
        return self.attributes["sym_name"].value

    @property
    def function_type(self) -> FunctionType:
        return self.attributes["function_type"].type

    @property
    def body(self) -> Region:
        return self.regions[0]

    @property
    def args(self):
        return self.regions[0].entry.args


class FuncOp(FunctionLike, Operation):
    """A function: attributes ``sym_name`` (string), ``function_type`` (a function type)
    and, optionally, ``sym_visibility`` (``"private"``); one region, empty for a declaration.

    The entry block's arguments are the parameters and must match the signature.
    Isolated from above: the body cannot use values defined outside it.
    """

    name = "func.func"
    traits = frozenset({IsolatedFromAbove})
    summary = "A function: a symbol with a signature and a body region (none for a declaration)."
    example = "func.func @double(%v: i64) -> i64 { %r = arith.addi %v, %v : i64 func.return %r : i64 }"

    @property
    def is_declaration(self) -> bool:
        return self.regions[0].is_empty

    def verify_op(self) -> None:
        if not isinstance(self.attributes.get("sym_name"), StringAttr):
            raise self.error("requires a 'sym_name' string attribute")
        ft = self.attributes.get("function_type")
        if not isinstance(ft, TypeAttr) or not isinstance(ft.type, FunctionType):
            raise self.error("requires a 'function_type' attribute")
        if len(self.regions) != 1:
            raise self.error("has one region")
        if self.is_declaration:
            return
        entry = self.regions[0].entry
        types = [a.type for a in entry.args]
        if types != list(ft.type.inputs):
            raise self.error(f"entry block arguments ({', '.join(map(str, types))}) do not match the "
                             f"signature {ft.type}")

    @classmethod
    def build(cls, name: str, type: FunctionType, arg_names=None, private: bool = False) -> FuncOp:
        """A function with an empty entry block whose arguments match ``type``."""
        attrs = {"sym_name": StringAttr(name), "function_type": TypeAttr(type)}
        if private:
            attrs["sym_visibility"] = StringAttr("private")
        return cls(attributes=attrs, regions=[Region([Block(type.inputs, arg_names=arg_names)])])

    def print_custom(self, p) -> None:
        ft = self.function_type
        vis = self.attributes.get("sym_visibility")
        out = " " + (vis.value + " " if isinstance(vis, StringAttr) else "") + "@" + _symbol(self.sym_name)
        if self.is_declaration:
            out += "(" + ", ".join(map(str, ft.inputs)) + ")"
        else:
            out += "(" + ", ".join(f"{p.value(a)}: {a.type}" for a in self.args) + ")"
        if len(ft.results) == 1:
            out += f" -> {ft.results[0]}"
        elif ft.results:
            out += " -> (" + ", ".join(map(str, ft.results)) + ")"
        extra = p.attr_dict(self.attributes, _FUNC_ATTRS)
        if extra:
            out += " attributes" + extra
        p.write(out)
        if not self.is_declaration:
            p.write(" ")
            p.region(self.body, print_entry_args=False)


def is_bare_symbol(name: str) -> bool:
    """Whether ``@name`` prints without quotes (and so parses back as written)."""
    import re

    return re.fullmatch(r"[A-Za-z0-9_$.\-]+", name) is not None


def _symbol(name: str) -> str:
    return name if is_bare_symbol(name) else '"' + name + '"'


@syntax_rule("func_header")
def _parse_func_header(ctx, children):
    kw = children[0]
    i = 1
    visibility = None
    if children[i].type == "VISIBILITY":
        visibility = children[i].value
        i += 1
    sym_tok = children[i]
    i += 1
    params, results, attrs = [], [], {}
    for c in children[i:]:
        if isinstance(c, dict):
            attrs = c
        elif c and isinstance(c[0], tuple):
            params = c
        elif isinstance(c, list):
            results = c
    named = [p for p in params if p[0] == "named"]
    if named and len(named) != len(params):
        raise ctx.error("function parameters must either all be named ('%a: i64') or none", sym_tok)
    inputs = [p[2] for p in params]
    ftype = FunctionType(inputs, results)
    name = sym_tok.value[1:]
    if name.startswith('"'):
        from irc.attributes import unquote_string

        name = unquote_string(name)
    all_attrs = {"sym_name": StringAttr(name), "function_type": TypeAttr(ftype), **attrs}
    if visibility is not None and visibility != "public":
        all_attrs["sym_visibility"] = StringAttr(visibility)
    entry_args = [(p[1].value[1:], p[2], ctx.loc(p[1])) for p in named]
    ctx.expect_entry_args(entry_args, isolated=True)
    return (all_attrs, ctx.loc(kw))


@syntax_rule("func_op")
def _parse_func_op(ctx, children):
    attrs, loc = children[0]
    if len(children) == 1:  # a declaration: no region consumed the header's entry arguments
        ctx.pending.pop()
        return FuncOp(attributes=attrs, regions=[Region()], loc=loc)
    region = children[1]
    if region.entry is None:  # '{}' - say so here rather than fail on the missing entry block
        raise IRError("a function body needs at least one block (write a declaration without '{}')", loc)
    if not region.entry.args and attrs["function_type"].type.inputs:
        raise IRError("a function with a body must name its parameters, as in '@f(%a: i64)'", loc)
    return FuncOp(attributes=attrs, regions=[region], loc=loc)


class ReturnOp(Operation):
    """``func.return %a, %b : T1, T2``: operands matching the enclosing function's result types."""

    name = "func.return"
    traits = frozenset({Terminator, ReturnLike})
    summary = "Return values from the enclosing function."
    example = "func.return %a : i64"

    def verify_op(self) -> None:
        parent = self.parent_op
        if not isinstance(parent, FuncOp):
            where = f"'{parent.name}'" if parent is not None else "no op"
            raise self.error(f"must end the body of a 'func.func', but its region belongs to {where}")
        expected = list(parent.function_type.results)
        got = self.operand_types
        if got != expected:
            raise self.error(f"returns ({', '.join(map(str, got))}) but the function @{parent.sym_name} "
                             f"returns ({', '.join(map(str, expected))})")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return cls(_typed_values(ctx, syn), [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(_print_typed_values(p, self))

    @classmethod
    def build(cls, *values):
        return cls(list(values))


def _typed_values(ctx, syn):
    """``%a, %b : T1, T2`` (or nothing) as in func.return and scf.yield."""
    if not syn.args:
        if syn.sig is not None:
            raise IRError(f"'{syn.name}' has no operands but lists types", syn.loc)
        return []
    if any(isinstance(a, tuple) for a in syn.args):
        raise IRError(f"'{syn.name}' expects '%a, %b : type, type'", syn.loc)
    types = syn.plain_types("types")
    if len(types) != len(syn.args):
        raise IRError(f"'{syn.name}' has {_count(len(syn.args), 'operand')} but {_count(len(types), 'type')}",
                      syn.loc)
    return [ctx.value(a, t) for a, t in zip(syn.args, types)]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _print_typed_values(p, op) -> str:
    if not op.operands:
        return p.attr_dict(op.attributes)
    return f" {p.values(op.operands)}{p.attr_dict(op.attributes)} : {p.types(op.operand_types)}"


class CallOp(Operation):
    """``%r = func.call @callee(%a) : (T) -> R``: attribute ``callee`` (a symbol reference).

    Operands and results follow the written function type; the verifier checks that
    ``@callee`` exists in the module with that same signature.
    """

    name = "func.call"
    summary = "Call a function by symbol."
    example = "%r = func.call @double(%a) : (i64) -> i64"

    @property
    def callee(self) -> str:
        return self.attributes["callee"].name

    def verify_op(self) -> None:
        if not isinstance(self.attributes.get("callee"), SymbolRefAttr):
            raise self.error("requires a 'callee' symbol attribute")

    def interpret(self, interp, args):
        return interp.call(self.callee, args, self)

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if len(syn.args) != 1 or not isinstance(syn.args[0], tuple) or syn.args[0][0] != "callee":
            raise IRError("'func.call' expects '@callee(%a, ...) : (types) -> types'", syn.loc)
        if syn.sig is None or syn.sig[0] != "fn":
            raise IRError("'func.call' expects a function type ': (T, ...) -> T'", syn.loc)
        _, sym, toks = syn.args[0]
        ft = syn.sig[1]
        if len(toks) != len(ft.inputs):
            raise IRError(f"call passes {len(toks)} arguments but its type lists {len(ft.inputs)}", syn.loc)
        return cls(ctx.values(toks, ft.inputs), ft.results,
                   {"callee": SymbolRefAttr(sym.value[1:]), **syn.attrs})

    def print_custom(self, p) -> None:
        ft = FunctionType(self.operand_types, self.result_types)
        p.write(f" @{_symbol(self.callee)}({p.values(self.operands)})"
                f"{p.attr_dict(self.attributes, ('callee',))} : {ft}")

    @classmethod
    def build(cls, callee: str, args, result_types):
        return cls(list(args), list(result_types), {"callee": SymbolRefAttr(callee)})
