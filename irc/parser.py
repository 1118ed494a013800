"""The parser: lark LALR(1) over ``grammar.lark``, building IR during the parse.

No parse tree is built.  Each grammar rule's callback runs as the rule is
reduced, so ops are created and appended to their block in source order:

* ``region_open`` reduces as soon as ``{`` is seen, before any op inside, and
  pushes a fresh name scope and an entry block (with the arguments the
  enclosing op's header declared: function parameters, loop variables);
* ``block_label`` starts a new block in the current region;
* ``operation`` appends the finished op to the current block and defines its
  results' names;
* ``region`` closes the scope, checking that every referenced block and every
  forward-referenced value got defined.

Names follow MLIR's scoping: a value is visible in nested regions, names may be
reused in sibling regions, and functions are isolated from above.  Uses before
definitions (phis, branches, blocks in any order) go through typed placeholders
that are replaced when the definition appears.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path

from lark import Lark, Transformer, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.grammar import Rule

from . import registry
from .attributes import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    TypeAttr,
    UnitAttr,
    unquote_string,
)
from .block import Block, Region
from .diagnostics import (
    MAX_ERRORS,
    IRError,
    IRErrors,
    Location,
    SourceFile,
    in_source_order,
    raise_collected,
)
from .gcpause import paused_gc
from .module import ModuleOp
from .nesting import MAX_REGION_DEPTH, too_deep_message
from .operation import UnregisteredOp
from .syntax import Literal, UniformSyntax
from .types import FunctionType, Type, VectorType, f64, i1, i64, parse_type
from .values import Value

try:  # The Cython lexer and parser loop are ~3x faster; plain lark works too.
    import lark_cython

    _PLUGINS = lark_cython.plugins
except ImportError:  # pragma: no cover - depends on the environment
    _PLUGINS = None


class ForwardRef(Value):
    """A placeholder for a value used before its definition is parsed."""

    __slots__ = ("name", "loc")

    def __init__(self, type: Type, name: str, loc: Location):
        Value.__init__(self, type, name)
        self.name = name
        self.loc = loc

    @property
    def parent_block(self):
        return None


_SEQ = object()  # what a reduced op sequence leaves on the parser's stack
_NO_ARGS: list = []


class ValueList(list):
    """``%a, %b`` in an op."""


class SuccessorList(list):
    """``[^bb1, ^bb2]`` in the generic form."""


class RegionList(list):
    """``({...}, {...})``."""


class Args(list):
    """The argument items of a uniform op; ``flags`` holds MLIR's ``overflow<...>``-style tokens."""

    flags: list | None = None


class PropDict(dict):
    """MLIR's ``<{...}>`` properties of a generic op (read as attributes)."""


class _RegionState:
    """One open region.  ``phis`` and ``edges`` implement MLIR's block arguments:
    a non-entry block's arguments become phis (``phis[block]``), created by the label
    or by the first branch that passes values to it; ``edges`` lists every
    (successor, number of values passed, location) for the count check at the close."""

    __slots__ = ("region", "current", "blocks", "undefined", "isolated", "phis", "declared", "edges", "forwards")

    def __init__(self, region: Region, isolated: _IsolatedScope | None):
        self.region = region
        self.current: Block | None = None
        self.blocks: dict[str, Block] = {}
        self.undefined: dict[str, Location] = {}
        self.isolated = isolated
        self.phis: dict[Block, list] = {}
        self.declared: set[Block] = set()
        self.edges: list[tuple[Block, int, Location]] = []
        self.forwards: list[Block] = []  # blocks the parser adds (see ParseContext._edge), placed last


class _IsolatedScope:
    """Names inside one function (or the module): visible names and pending forward refs.

    ``visible`` maps every name visible at this point to its definition, whatever
    region defined it, so a lookup is one dict access however deep the nesting
    (walking a list of per-region scopes made parsing quadratic in the depth).
    ``undo`` has one list per open region: what to restore when it closes.
    A definition's site is a Location, or the lark token it starts at (an op's result list,
    the common case: turned into a Location only for a diagnostic, by ``ParseContext._where``).
    """

    __slots__ = ("visible", "undo", "forward")

    def __init__(self):
        self.visible: dict[str, tuple[Value, Location]] = {}
        self.undo: list[list[tuple[str, tuple[Value, Location] | None]]] = [[]]
        self.forward: dict[str, ForwardRef] = {}

    def bind(self, name: str, entry: tuple[Value, Location]) -> None:
        """Make ``name`` denote ``entry`` until the innermost open region closes."""
        self.undo[-1].append((name, self.visible.get(name)))
        self.visible[name] = entry

    def open_region(self) -> None:
        self.undo.append([])

    def close_region(self) -> None:
        visible = self.visible
        for name, previous in reversed(self.undo.pop()):
            if previous is None:
                del visible[name]
            else:
                visible[name] = previous


class _PendingEntry:
    """Entry-block arguments declared by an op header, consumed by the next ``{``."""

    __slots__ = ("args", "isolated")

    def __init__(self, args, isolated: bool):
        self.args = args  # list of (name, Type, Location)
        self.isolated = isolated


class ParseContext(Transformer):
    """Callbacks for every grammar rule, plus the name resolution ops use."""

    def __init__(self):
        super().__init__()
        self.reset(SourceFile("<input>", ""), False)

    def reset(self, source: SourceFile, allow_unregistered: bool) -> None:
        self.source = source
        self.allow_unregistered = allow_unregistered
        self.pending: list[_PendingEntry] = []
        self.module_region = Region([Block()])
        self.isolated = [_IsolatedScope()]
        state = _RegionState(self.module_region, self.isolated[0])
        state.current = self.module_region.entry
        self.regions = [state]
        self.explicit_modules: list[ModuleOp] = []
        self.op_loc = Location(source, 1, 1)
        self.too_deep: Location | None = None  # the first '{' one level past the limit
        self.loc_aliases: dict[str, str] = {}  # '#loc3' -> the text inside its 'loc(...)'
        self.errors: list[IRError] = []  # reported, parsing went on (unknown ops)
        self._loc_sources: dict[str, SourceFile] = {source.name: source}

    # -- helpers ops use ------------------------------------------------------------

    def loc(self, tok) -> Location:
        return Location(self.source, tok.line, tok.column)

    def _where(self, site) -> Location:
        """A definition site as kept in a name scope: a Location, or the token it starts at."""
        return site if isinstance(site, Location) else self.loc(site)

    def error(self, message: str, tok) -> IRError:
        return IRError(message, tok if isinstance(tok, Location) else self.loc(tok))

    def type_of(self, tok) -> Type:
        if tok.type == "SIG_TYPE":  # ': TYPE' as one token (grammar.lark's colon_type)
            return self._joined_type(tok)
        try:
            return parse_type(tok.value)
        except ValueError as e:
            raise self.error(str(e), tok) from None

    def value(self, tok, type: Type | None = None) -> Value:
        """Resolve a value token (``%a``, ``%r#1``), checking its type if given."""
        if isinstance(tok, tuple):  # an argument item (``%m[%i]``, ``(%a)``...) where a value belongs
            where = _first_token(tok)
            raise self.error("expected a value ('%name') here", where if where is not None else self.op_loc)
        name = tok.value[1:]
        entry = self.isolated[-1].visible.get(name)
        if entry is not None:
            value = entry[0]
            if type is not None and value.type is not type:
                raise self.error(
                    f"use of value '%{name}' expects type {type}, but it has type {value.type}", tok
                ).note(self._where(entry[1]), f"'%{name}' is defined here")
            return value
        forward = self.isolated[-1].forward
        ref = forward.get(name)
        if ref is not None:
            if type is not None and ref.type is not type:
                raise self.error(
                    f"use of value '%{name}' expects type {type}, but an earlier use has type {ref.type}", tok
                ).note(ref.loc, "earlier use here")
            return ref
        if type is None:
            raise self.error(f"use of undefined value '%{name}'", tok)
        ref = forward[name] = ForwardRef(type, name, self.loc(tok))
        return ref

    def values(self, toks, types) -> list[Value]:
        return [self.value(t, ty) for t, ty in zip(toks, types)]

    def define(self, name: str, value: Value, loc: Location) -> None:
        iso = self.isolated[-1]
        prev = iso.visible.get(name)
        if prev is not None:
            raise IRError(f"redefinition of value '%{name}'", loc).note(self._where(prev[1]),
                                                                        "previous definition here")
        ref = iso.forward.pop(name, None)
        if ref is not None:
            if ref.type is not value.type:
                raise IRError(
                    f"value '%{name}' is defined with type {value.type}, but was used as {ref.type}", loc
                ).note(ref.loc, "used here")
            ref.replace_all_uses_with(value)
        iso.bind(name, (value, loc))
        value.name_hint = name

    def block(self, tok) -> Block:
        """Resolve a successor token (``^bb1``), declaring the block if not yet seen."""
        name = tok.value[1:]
        state = self.regions[-1]
        block = state.blocks.get(name)
        if block is None:
            block = state.blocks[name] = Block(label=name, loc=self.loc(tok))
            state.undefined[name] = self.loc(tok)
        return block

    def successor(self, item) -> Block:
        """Resolve a successor item: ``("succ", ^bb)`` or ``("succ", ^bb, values, types)``.

        Values passed along the edge (MLIR's block arguments) become incoming values
        of the successor's phis, from the block the branch is being parsed into.
        """
        tok = item[1]
        state = self.regions[-1]
        if len(item) == 2:
            block = self.block(tok)
            state.edges.append((block, 0, self.loc(tok)))
            return block
        name = tok.value[1:].rstrip("(")
        block = self._block_named(name, tok)
        values_toks, types = item[2], item[3]
        if len(values_toks) != len(types):
            raise self.error(f"'^{name}' is passed {_count(len(values_toks), 'value')} but "
                             f"{_count(len(types), 'type')}", tok)
        return self._edge(block, self.values(values_toks, types), tok)

    def _block_named(self, name: str, tok) -> Block:
        state = self.regions[-1]
        block = state.blocks.get(name)
        if block is None:
            block = state.blocks[name] = Block(label=name, loc=self.loc(tok))
            state.undefined[name] = self.loc(tok)
        return block

    def _phis_for(self, block: Block, types, where) -> list:
        """The phis standing for ``block``'s arguments, created (unnamed) on first need."""
        from irc.dialects.cf import PhiOp

        state = self.regions[-1]
        phis = state.phis.get(block)
        if phis is None:
            phis = state.phis[block] = []
            for t in types:
                phi = PhiOp.build(t)
                phi.loc = self.loc(where) if not isinstance(where, Location) else where
                block.append(phi)
                phis.append(phi)
        elif [p.results[0].type for p in phis] != list(types):
            got = ", ".join(map(str, types))
            want = ", ".join(str(p.results[0].type) for p in phis)
            raise self.error(f"'^{block.label}' takes ({want}) but is given ({got})", where)
        return phis

    def mlir_loc(self, tok) -> Location | None:
        """The location an MLIR ``loc(...)`` names (its first 'file':line:col), or None."""
        text = tok.value[4:-1].strip()
        seen = 0
        while text.startswith("#") and seen < 8:  # an alias, maybe of an alias
            text = self.loc_aliases.get(text)
            if text is None:
                raise self.error(f"undefined location alias '{tok.value[4:-1].strip()}'", tok)
            seen += 1
        match = _FILE_LOC.search(text)
        if match is None:
            return None
        name = unquote_string('"' + match.group(1) + '"')
        source = self._loc_sources.get(name)
        if source is None:
            source = self._loc_sources[name] = SourceFile(name, "")
        return Location(source, int(match.group(2)), int(match.group(3)))

    # -- top level ------------------------------------------------------------------

    def start(self, children):
        if self.explicit_modules:
            module = self.explicit_modules[0]
            if not self.module_region.entry.is_empty:
                raise IRError("a file holds either one 'module { ... }' or top-level ops, not both",
                              module.loc)
            return module
        self._close_isolated(self.isolated[0])
        body = self.module_region.entry
        only = body.first_op
        if only is not None and only is body.last_op and isinstance(only, ModuleOp):
            only.detach()  # a file holding one generic-form module is that module
            return only
        if self.too_deep is not None:
            raise IRError(too_deep_message(), self.too_deep)
        return ModuleOp.new(self.module_region)

    def module_op(self, children):
        loc_tok = children.pop() if getattr(children[-1], "type", None) == "LOC" else None
        region = children[-1]
        if region.is_empty:  # '{ }' parsed as no blocks; a module always has its body block
            region.append(Block())
        module = ModuleOp.new(region, self.loc(children[0]))
        for c in children[1:-1]:
            if isinstance(c, dict):
                module.attributes.update(c)
            else:
                module.attributes["sym_name"] = StringAttr(_symbol_name(c.value))
        if loc_tok is not None:
            module.loc = self.mlir_loc(loc_tok) or module.loc
        self.explicit_modules.append(module)
        return module

    # -- operations -------------------------------------------------------------------

    def finish_op(self, defs, op) -> None:
        """Name ``op``'s results after the ``%a, %b:2 =`` token and append it to the current block."""
        results = op.results
        if defs is not None:
            text = defs.value
            if len(results) == 1 and "," not in text and ":" not in text:
                # The common case, inlined from ``define``: a new name.  Its definition site is
                # kept as the token, made a Location only for a diagnostic (see ``_where``).
                name = text[1:].rstrip("= \t\r\n")
                iso = self.isolated[-1]
                visible = iso.visible
                if name in visible or name in iso.forward:
                    self.define(name, results[0], self.loc(defs))
                else:
                    iso.undo[-1].append((name, None))
                    result = results[0]
                    visible[name] = (result, defs)
                    result.name_hint = name
            else:
                self._define_results(_split_defs(text), results, self.loc(defs), op)
        elif results:
            raise self.error(f"'{op.name}' has {len(results)} result(s) that must be named, as in "
                             f"'%r = {op.name} ...'", op.loc)
        self.regions[-1].current.append(op)

    def _define_results(self, names, results, loc, op) -> None:
        count = sum(n for _, n, _ in names)
        if count != len(results):
            raise IRError(
                f"'{op.name}' defines {len(results)} result{'s' if len(results) != 1 else ''}, "
                f"but {count} name{'s are' if count != 1 else ' is'} given", loc)
        i = 0
        for name, n, grouped in names:
            if not grouped:
                self.define(name, results[i], loc)
            else:
                for k in range(n):
                    self.define(f"{name}#{k}", results[i + k], loc)
                self.isolated[-1].bind(name, (results[i], loc))
            i += n

    def seq_uniform(self, children):
        i = 1 if children[0] is _SEQ else 0
        defs = None
        tok = children[i]
        if tok.type == "DEFS":
            defs = tok
            i += 1
            tok = children[i]
        name = tok.value
        if "." not in name:  # 'return', 'call': func's ops as MLIR prints them inside a function
            name = "func." + name
        args = attrs = regions = sig = loc_tok = None
        for c in children[i + 1:]:
            if type(c) is Args:
                args = c
            elif type(c) is tuple:
                sig = c
            elif type(c) is dict:
                attrs = c
            elif type(c) is RegionList:
                regions = c
            else:
                loc_tok = c
        if args is not None and args.flags:
            attrs = {**_flag_attrs(self, args.flags), **(attrs or {})}
        cls = registry.OPS.get(name)
        loc = Location(self.source, tok.line, tok.column)
        if cls is None:
            if self.allow_unregistered:
                raise IRError(f"unregistered op '{name}' must be written in the generic form "
                              f"'\"{name}\"(...) : (...) -> (...)'", loc)
            self.finish_op(defs, self._stand_in(name, defs, sig, regions, loc))
            return _SEQ
        self.op_loc = loc  # where an item in the wrong place is reported when it has no token
        op = cls.parse_uniform(self, UniformSyntax(name, args or _NO_ARGS, attrs or {}, regions or [], sig, loc))
        op.loc = loc if loc_tok is None else (self.mlir_loc(loc_tok) or loc)
        self.finish_op(defs, op)
        return _SEQ

    def seq_special(self, children):
        i = 1 if children[0] is _SEQ else 0
        loc_tok = children.pop() if getattr(children[-1], "type", None) == "LOC" else None
        defs = children[i] if len(children) - i == 2 else None
        op = children[-1]
        if loc_tok is not None:
            op.loc = self.mlir_loc(loc_tok) or op.loc
        self.finish_op(defs, op)
        return _SEQ

    def generic_op(self, children):
        name_tok = children[0]
        name = self.string(name_tok)
        loc = self.loc(name_tok)
        fn = children[-1]
        operands = successors = regions = attrs = None
        props = {}
        for c in children[1:-1]:
            if isinstance(c, ValueList):
                operands = c
            elif isinstance(c, SuccessorList):
                successors = c
            elif isinstance(c, RegionList):
                regions = c
            elif isinstance(c, PropDict):
                props = c
            else:
                attrs = c
        if props:
            attrs = {**props, **(attrs or {})}
        operands = operands or []
        if len(operands) != len(fn.inputs):
            raise IRError(f"'{name}' has {_count(len(operands), 'operand')} but its type lists "
                          f"{len(fn.inputs)}", loc)
        values = self.values(operands, fn.inputs)
        blocks = [self.block(t) for t in successors or []]
        if name in _GENERIC_BRANCHES and blocks and (len(values) > _GENERIC_BRANCHES[name] or attrs and (
                "operandSegmentSizes" in attrs or "case_operand_segments" in attrs)):
            values, attrs = self._generic_branch_operands(name, values, blocks, dict(attrs or {}), name_tok)
        cls = registry.lookup(name)
        if cls is None:
            if not self.allow_unregistered:
                self.report(IRError(_unknown_op_message(name) + " (use --allow-unregistered to accept unknown ops)",
                                    loc))
            op = UnregisteredOp(values, fn.results, attrs or {}, blocks, regions or [], loc)
            op.name = name
            return op
        return cls(values, fn.results, attrs or {}, blocks, regions or [], loc)

    def _generic_branch_operands(self, name, values, blocks, attrs, where):
        """MLIR's generic ``"cf.br"(%x)[^bb1]`` and ``"cf.cond_br"(%c, %x, %y)[^a, ^b]
        <{operandSegmentSizes = array<i32: 1, 1, 1>}>``: the successor operands become
        incoming values of the successors' phis; the branch keeps its condition only."""
        from .attributes import DenseArrayAttr

        if name == "cf.br":
            blocks[0] = self._edge(blocks[0], values, where)
            return [], attrs
        if name == "cf.switch":
            segments = attrs.pop("operandSegmentSizes", None)
            cases = attrs.pop("case_operand_segments", None)
            if not isinstance(segments, DenseArrayAttr) or not isinstance(cases, DenseArrayAttr) \
                    or len(segments.values) != 3 or sum(segments.values) != len(values) \
                    or len(cases.values) != len(blocks) - 1 or sum(cases.values) != segments.values[2]:
                raise self.error("'cf.switch' with branch operands needs 'operandSegmentSizes' and "
                                 "'case_operand_segments'", where)
            start = 1 + segments.values[1]
            blocks[0] = self._edge(blocks[0], values[1:start], where)
            for k, n in enumerate(cases.values, start=1):
                blocks[k] = self._edge(blocks[k], values[start:start + n], where)
                start += n
            return values[:1], attrs
        segments = attrs.pop("operandSegmentSizes", None)
        if not isinstance(segments, DenseArrayAttr) or len(segments.values) != 3 or segments.values[0] != 1 \
                or sum(segments.values) != len(values) or len(blocks) != 2:
            raise self.error("'cf.cond_br' with branch operands needs 'operandSegmentSizes = array<i32: 1, N, M>'",
                             where)
        n = segments.values[1]
        blocks[0] = self._edge(blocks[0], values[1:1 + n], where)
        blocks[1] = self._edge(blocks[1], values[1 + n:], where)
        return values[:1], attrs

    def _edge(self, block: Block, values, where) -> Block:
        """Values passed along an edge from the current block to ``block`` (see ``successor``).

        Returns the block the branch goes to: ``block``, or, when the current block already
        passes other values to ``block`` along another edge (MLIR's ``cf.cond_br %c,
        ^bb1(%a : i32), ^bb1(%b : i32)``), a new block that only branches on to ``block``:
        a phi takes one value per predecessor, so the second edge gets a predecessor of its own.
        """
        state = self.regions[-1]
        loc = where if isinstance(where, Location) else self.loc(where)
        state.edges.append((block, len(values), loc))
        if not values:
            return block
        phis = self._phis_for(block, [v.type for v in values], where)
        pred = state.current
        known = [phi.value_for(pred) for phi in phis]
        if all(k is None for k in known):
            for phi, value in zip(phis, values):
                phi.add_incoming(value, pred)
            return block
        if all(k is v for k, v in zip(known, values)):
            return block  # the same values along a second edge: one incoming value serves both
        forward = self._forwarding_block(block, loc)
        for phi, value in zip(phis, values):
            phi.add_incoming(value, forward)
        return forward

    def _forwarding_block(self, target: Block, loc: Location) -> Block:
        """A new block of the current region that branches to ``target``.  It goes after the
        region's written blocks (when the region closes), so that they keep their labels."""
        from irc.dialects.cf import BranchOp

        forward = Block(loc=loc)
        branch = BranchOp.build(target)
        branch.loc = loc
        forward.append(branch)
        self.regions[-1].forwards.append(forward)
        return forward

    def report(self, error: IRError) -> None:
        """Record a diagnostic and go on parsing (raised with the others at the end)."""
        self.errors.append(error)
        if len(self.errors) >= MAX_ERRORS:
            raise IRErrors(in_source_order(self.errors), truncated=True)

    def _stand_in(self, name: str, defs, sig, regions, loc: Location):
        """An unknown op written in the uniform form: reported, and replaced by an op with no
        operands whose results take their types from the signature, so that parsing goes on
        and finds the file's other mistakes.  Without types for its results it stops here."""
        error = IRError(_unknown_op_message(name), loc)
        count = sum(n for _, n, _ in _split_defs(defs.value)) if defs is not None else 0
        types: list = []
        if sig is not None:
            types = sig[1].results if sig[0] == "fn" else sig[2] if sig[0] == "cast" else sig[1]
            types = list(types)
        if count and len(types) == 1:
            types = types * count
        if len(types) < count:
            raise error
        self.report(error)
        op = UnregisteredOp([], types[len(types) - count:] if count else [], {}, [], list(regions or []), loc)
        op.name = name
        return op

    # -- uniform-form pieces ----------------------------------------------------------------

    def args_value(self, children):
        return Args(children)

    def args_item(self, children):
        return Args(children)

    def args_more_value(self, children):  # args "," item (the rule keeps its tokens)
        args = children[0]
        args.append(children[2])
        return args

    args_more_item = args_more_value

    def args_values(self, children):  # VALUE_LIST
        return Args(_value_tokens(children[0]))

    def args_more_values(self, children):  # args "," VALUE_LIST
        args = children[0]
        args.extend(_value_tokens(children[2]))
        return args

    def args_flags(self, children):  # args FLAGS
        args = children[0]
        if args.flags is None:
            args.flags = []
        args.flags.append(children[1])
        return args

    def succ_operands_arg(self, children):  # SUCC_ARGS value_list types (":" and ")" filtered)
        return ("succ", children[0], children[1], children[2])

    def prop_dict(self, children):
        return PropDict(children)

    def dense_array_attr(self, children):
        from .attributes import DenseArrayAttr

        element = self.type_of(children[0])
        values = [c.value for c in children[1:] if isinstance(c, Literal)]
        return DenseArrayAttr(element, values)

    def _vector_literal(self, lit, t):
        """``dense<[1, 2]> : vector<2xi32>``: read as a dense array of its integers (only
        cf.switch's generic form needs a vector attribute)."""
        from .attributes import DenseArrayAttr

        element = t.element_type
        data = lit.value if lit.kind == "dense" else lit.value
        flat = []

        def walk(x):
            if isinstance(x, list):
                for y in x:
                    walk(y)
            else:
                flat.append(int(x.value) if isinstance(x, Literal) else int(x))

        walk(data)
        count = t.size
        if len(flat) == 1 and count > 1:
            flat *= count
        return DenseArrayAttr(element, flat)

    def opaque_attr(self, children):
        from .attributes import OpaqueAttr

        return OpaqueAttr(children[0].value)

    def values_first(self, children):
        return ValueList(children)

    def values_more(self, children):  # value_list "," VALUE_ID
        values = children[0]
        values.append(children[2])
        return values

    def values_list(self, children):  # VALUE_LIST
        return ValueList(_value_tokens(children[0]))

    def values_more_list(self, children):  # value_list "," VALUE_LIST
        values = children[0]
        values.extend(_value_tokens(children[2]))
        return values

    def types_one(self, children):
        return [self.type_of(children[0])]

    def types_more(self, children):  # types "," TYPE
        types = children[0]
        types.append(self.type_of(children[2]))
        return types

    # type_sig keeps its tokens: children start with the ':' token.
    def single_sig(self, children):
        return ("plain", [self.type_of(children[1])])

    def multi_sig(self, children):
        return ("plain", [self.type_of(children[1]), *children[3]])

    def indexed_arg(self, children):
        return ("indexed", children[0], children[1] if len(children) > 1 else [])

    def view_arg(self, children):
        return ("view", children[0], children[1], children[2] if len(children) > 2 else [])

    def keyword_arg(self, children):
        return ("keyword", children[0])

    def callee_arg(self, children):
        return ("callee", children[0], children[1] if len(children) > 1 else [])

    def symbol_arg(self, children):
        return ("symbol", children[0])

    def group_arg(self, children):
        return ("group", children[0] if children else [])

    def succ_arg(self, children):
        return ("succ", children[0])

    def incoming_arg(self, children):
        return ("incoming", children[0], children[1])

    def literal_arg(self, children):
        return ("literal", children[0])

    def succ_list(self, children):
        return SuccessorList(children)

    # The same signatures with ': TYPE' as one SIG_TYPE token (see grammar.lark).
    def single_sig_joined(self, children):
        return ("plain", [self._joined_type(children[0])])

    def multi_sig_joined(self, children):
        return ("plain", [self._joined_type(children[0]), *children[2]])

    def cast_sig_joined(self, children):
        return ("cast", [self._joined_type(children[0])], [self.type_of(children[2])])

    def _joined_type(self, tok) -> Type:
        """The type of a SIG_TYPE token (': i64'); a diagnostic points at the type, not the colon."""
        try:
            return parse_type(tok.value[1:])
        except ValueError as e:
            raise IRError(str(e), self._joined_type_loc(tok)) from None

    def _joined_type_loc(self, tok) -> Location:
        text = tok.value
        return Location(self.source, tok.line, tok.column + len(text) - len(text[1:].lstrip(" \t")))

    def cast_sig(self, children):
        return ("cast", [self.type_of(children[1])], [self.type_of(children[3])])

    def function_sig(self, children):
        return ("fn", children[1])

    def function_type(self, children):
        if len(children) == 1:
            return FunctionType([], children[0])
        return FunctionType(children[0], children[1])

    def fn_result(self, children):
        if not children:
            return []
        c = children[0]
        return c if isinstance(c, list) else [self.type_of(c)]

    def paren_types(self, children):
        if not children:
            return []
        c = children[0]
        return c if isinstance(c, list) else [self.type_of(c)]

    # -- custom forms ------------------------------------------------------------------------
    # Rules such as func_header or for_op are handled by callbacks that the dialect
    # defining the op registers with ``registry.syntax_rule``; see dialects/func.py.

    def __default__(self, data, children, meta):
        handler = registry.SYNTAX_RULES.get(data)
        if handler is None:
            if data.startswith("_"):  # lark's helper rules for repetitions: inlined into the parent
                return Tree(data, children)
            raise AssertionError(f"grammar rule '{data}' has no callback")
        return handler(self, children)

    def named_param(self, children):
        attrs = next((c for c in children[2:] if isinstance(c, dict)), None)
        return ("named", children[0], self.type_of(children[1]), attrs)

    def anon_param(self, children):
        attrs = next((c for c in children[1:] if isinstance(c, dict)), None)
        return ("anon", None, self.type_of(children[0]), attrs)

    def func_params(self, children):
        return children

    def single_result(self, children):
        return [self.type_of(children[0])]

    def result_list(self, children):
        return children[0] if children else []

    def iter_args(self, children):
        return (children[:-1], children[-1])

    def iter_arg(self, children):
        return (children[0], children[1])

    def expect_entry_args(self, args, isolated: bool) -> None:
        """Called by a header callback: the next region's entry block gets ``args``.

        ``args`` is a list of (name, Type, Location).
        """
        self.pending.append(_PendingEntry(args, isolated))

    # -- regions and blocks -----------------------------------------------------------------

    def region_open(self, children):
        # ``self.regions`` counts the implicit module's region, which a file holding one
        # explicit module does not have: a region one level deeper than the limit is an
        # error only if the file turns out to be an implicit module (see ``start``).
        depth = len(self.regions)
        if depth > MAX_REGION_DEPTH:  # too deep either way: stop before anything recurses
            raise self.error(too_deep_message(), children[0])
        if depth == MAX_REGION_DEPTH and self.too_deep is None:
            self.too_deep = self.loc(children[0])
        pending = self.pending.pop() if self.pending else None
        region = Region()
        entry = Block()
        region.append(entry)
        if pending is not None and pending.isolated:
            iso = _IsolatedScope()
            self.isolated.append(iso)
        else:
            iso = None
            self.isolated[-1].open_region()
        state = _RegionState(region, iso)
        state.current = entry
        self.regions.append(state)
        if pending is not None:
            for name, type, loc in pending.args:
                arg = entry.add_argument(type)
                self.define(name, arg, loc)
        return None

    def region(self, children):
        state = self.regions.pop()
        for name, loc in state.undefined.items():
            raise IRError(f"reference to an undefined block '^{name}'", loc)
        for forward in state.forwards:
            state.region.append(forward)
        if state.phis or state.declared:
            _check_edges(state)
        region = state.region
        entry = region.entry
        if entry is region.last_block and entry.is_empty and entry.label is None and not entry.args:
            region.remove(entry)  # '{ }' is a region with no blocks, as in MLIR
        if state.isolated is not None:
            self.isolated.pop()
            self._close_isolated(state.isolated)
        else:
            self.isolated[-1].close_region()
        return state.region

    def _close_isolated(self, iso: _IsolatedScope) -> None:
        for name, ref in iso.forward.items():
            raise IRError(f"use of undefined value '%{name}'", ref.loc)

    def region_list(self, children):
        return RegionList(children)

    def labeled_block(self, children):
        return None

    def block_label(self, children):
        tok = children[0]
        text = tok.value
        args = []
        if tok.type == "LABEL_ARGS":
            name, args = self._label_args(tok)
        else:
            name = text[1:].rstrip(": \t\r\n")
        state = self.regions[-1]
        entry = state.region.entry
        if entry is state.current and entry.label is None and entry.is_empty and name not in state.blocks:
            # The first label names the entry block.
            if args and entry.args:
                raise self.error("the entry block's arguments are declared by the op's header", tok)
            entry.label = name
            entry.loc = self.loc(tok)
            state.blocks[name] = entry
            for arg_name, ty, loc in args:
                self.define(arg_name, entry.add_argument(ty), loc)
            return None
        block = state.blocks.get(name)
        if block is None:
            block = state.blocks[name] = Block(label=name, loc=self.loc(tok))
        elif name not in state.undefined:
            raise self.error(f"redefinition of block '^{name}'", tok).note(block.loc, "previous definition here")
        else:
            del state.undefined[name]
            block.loc = self.loc(tok)
        state.region.append(block)
        state.current = block
        if args:  # MLIR's block arguments: one phi each, fed by the branches' operands
            state.declared.add(block)
            phis = self._phis_for(block, [ty for _, ty, _ in args], tok)
            for (arg_name, _, loc), phi in zip(args, phis):
                phi.loc = loc
                self.define(arg_name, phi.results[0], loc)
        return None

    def _label_args(self, tok):
        """``^bb1(%x: i64 loc(...), %y: f32):`` -> ("bb1", [(name, type, location), ...])."""
        text = tok.value
        open_at = text.index("(")
        name = text[1:open_at]
        inner_end = text.rindex(")")
        args = []
        for start, part in _split_top_level(text, open_at + 1, inner_end):
            match = _BLOCK_ARG.match(part)
            where = _offset_loc(self, tok, start + len(part) - len(part.lstrip()))
            if match is None:
                raise IRError("expected a block argument '%name: type'", where)
            loc = where
            if match.group(3):
                loc = self.mlir_loc(_FakeToken(match.group(3), where)) or where
            try:
                ty = parse_type(match.group(2))
            except ValueError as e:
                raise IRError(str(e), where) from None
            args.append((match.group(1), ty, loc))
        return name, args

    # -- attributes -------------------------------------------------------------------------------

    def attr_dict(self, children):
        return dict(children)

    def attr_entry(self, children):
        key = children[0].value
        if key.startswith('"'):
            key = self.string(children[0])
        if len(children) == 1:
            return (key, UnitAttr())
        value = children[1]
        if isinstance(value, Literal):
            value = _untyped_literal_attr(value)
        return (key, value)

    def typed_literal_joined(self, children):  # literal SIG_TYPE
        lit, tok = children
        return self._typed_literal(lit, self._joined_type(tok), self._joined_type_loc(tok))

    def typed_literal(self, children):
        lit, tok = children
        return self._typed_literal(lit, self.type_of(tok), tok)

    def _typed_literal(self, lit, t, tok):
        if isinstance(t, VectorType):
            if not t.element_type.is_int_or_index:
                raise self.error(f"irc reads vector attributes of integers only (cf.switch's case values), "
                                 f"not {t}", tok)
            return self._vector_literal(lit, t)
        return lit.to_attr(t)

    def type_attr(self, children):
        c = children[0]
        return TypeAttr(c if isinstance(c, FunctionType) else self.type_of(c))

    def symbol_attr(self, children):
        return SymbolRefAttr(_symbol_name(children[0].value))

    def array_attr(self, children):
        return ArrayAttr(_untyped_literal_attr(c) if isinstance(c, Literal) else c for c in children)

    def unit_attr(self, children):
        return UnitAttr()

    def int_lit(self, children):
        tok = children[0]
        text = tok.value
        sign = text[0] if text[0] in "+-" else ""
        significant = text[len(sign):].lstrip("0") or "0"
        digits = len(significant)
        if digits > MAX_INT_LITERAL_DIGITS:
            # No irc type holds such a number (f64's largest has 309 digits), and Python
            # refuses to convert decimal strings of more than 4,300 digits anyway.
            raise self.error(f"integer literal of {digits} digits is too large for any type "
                             f"(the largest, f64, holds numbers of up to 309 digits)", tok)
        return Literal("int", int(sign + significant), self.loc(tok))

    def float_lit(self, children):
        tok = children[0]
        value = float(tok.value)
        if math.isinf(value):  # past f64, so past every float type (an infinity is spelled in hex)
            raise self.error(f"float literal {tok.value} is out of range for every float type", tok)
        return Literal("float", value, self.loc(tok))

    def hex_lit(self, children):
        tok = children[0]
        return Literal("hex", int(tok.value, 16), self.loc(tok))

    def true_lit(self, children):
        return Literal("bool", True, self.loc(children[0]))

    def false_lit(self, children):
        return Literal("bool", False, self.loc(children[0]))

    def string_lit(self, children):
        tok = children[0]
        return Literal("str", self.string(tok), self.loc(tok))

    def string(self, tok) -> str:
        try:
            return unquote_string(tok.value)
        except ValueError:
            raise self.error("invalid escape in string: use \\n, \\t, \\\\, \\\" or two hex digits",
                             tok) from None

    def dense_lit(self, children):
        return Literal("dense", children[1], self.loc(children[0]))

    def dense_list(self, children):
        return list(children)


MAX_INT_LITERAL_DIGITS = 400  # beyond every type's range: see int_lit


_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_BLOCK_ARG = re.compile(r"\s*%([A-Za-z0-9_$.\-]+)\s*:\s*(.+?)\s*(loc\(.*\))?\s*$", re.S)
_LOC_ALIAS_DEF = re.compile(r"^(#[A-Za-z0-9_$.\-]+)[ \t]*=[ \t]*loc\((.*)\)[ \t]*$", re.M)


class _ValueToken:
    """One value of a VALUE_LIST token, standing where a VALUE_ID token would."""

    __slots__ = ("value", "line", "column")
    type = "VALUE_ID"

    def __init__(self, value: str, line: int, column: int):
        self.value = value
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return self.value


def _value_tokens(tok) -> list[_ValueToken]:
    """``%a, %b`` (one VALUE_LIST token, on one line) -> a token per value, at its column."""
    line, column = tok.line, tok.column
    text = tok.value
    out = []
    names = text.split(", ")
    if len(names) == text.count(" ") + 1 and "\t" not in text and len(names) == text.count(",") + 1:
        for name in names:  # written as irc and mlir-opt print it: one space after each comma
            out.append(_ValueToken(name, line, column))
            column += len(name) + 2
        return out
    for piece in text.split(","):
        name = piece.strip(" \t")
        out.append(_ValueToken(name, line, column + piece.index("%")))
        column += len(piece) + 1
    return out


class _FakeToken:
    """A token-like (value, line, column) for text split out of a larger token."""

    __slots__ = ("value", "line", "column")

    def __init__(self, value: str, loc: Location):
        self.value = value
        self.line = loc.line
        self.column = loc.column


def _split_top_level(text: str, start: int, end: int):
    """(offset, piece) for each comma-separated piece of ``text[start:end]`` outside (), <> and quotes."""
    depth, quoted, piece_start = 0, False, start
    i = start
    while i < end:
        ch = text[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif ch == "," and depth == 0:
            yield piece_start, text[piece_start:i]
            piece_start = i + 1
        i += 1
    if text[piece_start:end].strip():
        yield piece_start, text[piece_start:end]


def _offset_loc(ctx, tok, offset: int) -> Location:
    before = tok.value[:offset]
    newlines = before.count("\n")
    if newlines:
        return Location(ctx.source, tok.line + newlines, offset - before.rindex("\n"))
    return Location(ctx.source, tok.line, tok.column + offset)


def _check_edges(state: _RegionState) -> None:
    """Every branch passes as many values as its successor has arguments (phis made from them)."""
    for block, n, loc in state.edges:
        phis = state.phis.get(block, ()) if block in state.declared else ()
        if n != len(phis):
            raise IRError(f"branch passes {_count(n, 'value')} to '^{block.label}', which has "
                          f"{_count(len(phis), 'argument')}", loc)


_OVERFLOW_FLAGS = {"nsw", "nuw", "none"}
_FASTMATH_FLAGS = {"none", "reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "fast"}


_ROUNDING_MODES = ("to_nearest_even", "downward", "upward", "toward_zero", "to_nearest_away")


def _flag_attrs(ctx, flags) -> dict:
    """``overflow<nsw>``, ``fastmath<fast>``, ``weights([3, 5])`` as the attributes MLIR stores them in."""
    from .attributes import DenseArrayAttr, OpaqueAttr
    from .types import i32

    attrs = {}
    for tok in flags:
        text = tok.value
        if text in _ROUNDING_MODES:  # arith.truncf's, as MLIR's roundingmode property
            from .attributes import IntegerAttr

            attrs["roundingmode"] = IntegerAttr(_ROUNDING_MODES.index(text), i32)
            continue
        if not text.startswith("weights("):
            kind, words = text[:-1].split("<", 1)
            known = _OVERFLOW_FLAGS if kind == "overflow" else _FASTMATH_FLAGS
            for word in (w.strip() for w in words.split(",")):
                if word not in known:
                    raise ctx.error(f"unknown {kind} flag '{word}' (one of {', '.join(sorted(known))})", tok)
        if text.startswith("overflow<"):
            attrs["overflowFlags"] = OpaqueAttr("#arith." + text.replace(" ", ""))
        elif text.startswith("fastmath<"):
            attrs["fastmath"] = OpaqueAttr("#arith." + text.replace(" ", ""))
        else:
            inner = text[len("weights(["):-2]
            try:
                weights = [int(w) for w in inner.split(",") if w.strip()]
            except ValueError:
                raise ctx.error("branch weights are integers, as in 'weights([3, 5])'", tok) from None
            attrs["branch_weights"] = DenseArrayAttr(i32, weights)
    return attrs


def _location_aliases(text: str) -> dict[str, str]:
    """MLIR's ``#loc3 = loc(...)`` lines, which may follow their uses (read before the parse)."""
    if "#" not in text or "= loc(" not in text:
        return {}
    return {m.group(1): m.group(2) for m in _LOC_ALIAS_DEF.finditer(text)}


# Upstream MLIR dialects irc does not read: an op of one is named as such, not as a typo.
OUT_OF_SCOPE_DIALECTS = {
    "affine": "affine", "linalg": "linalg", "tosa": "TOSA", "gpu": "GPU", "llvm": "LLVM",
    "nvvm": "NVVM", "bufferization": "bufferization", "sparse_tensor": "sparse tensor", "complex": "complex",
    "index": "index", "shape": "shape", "async": "async", "omp": "OpenMP", "spirv": "SPIR-V",
    "emitc": "EmitC", "transform": "transform", "test": "test", "ml_program": "ML program", "quant": "quant",
}
_SCOPE = "irc reads MLIR's func, arith, math, cf, scf and memref dialects"
# Upstream memref ops irc lacks: named as out of scope rather than as a typo of another op.
MLIR_MEMREF_OPS_NOT_IN_IRC = frozenset(f"memref.{n}" for n in (
    "dma_start", "dma_wait", "extract_strided_metadata", "reinterpret_cast", "reshape", "subview",
    "transpose", "distinct_objects"))


def _unknown_op_message(name: str) -> str:
    dialect = name.split(".", 1)[0]
    if dialect in OUT_OF_SCOPE_DIALECTS:
        return (f"'{name}' belongs to MLIR's {OUT_OF_SCOPE_DIALECTS[dialect]} dialect, which irc does not "
                f"support ({_SCOPE})")
    if dialect == "vector":
        return (f"unknown op '{name}': of MLIR's vector dialect irc has vector.load, vector.store, "
                f"vector.broadcast and vector.from_elements, and arith.addf, arith.subf, arith.mulf and math.fma "
                f"take 1-D vectors ({_SCOPE})")
    if name in MLIR_MEMREF_OPS_NOT_IN_IRC:
        return (f"'{name}' is an op of MLIR's memref dialect that irc does not support (of memref, irc has "
                f"{', '.join(sorted(n[len('memref.'):] for n in registry.OPS if n.startswith('memref.')))})")
    if dialect == "tensor":
        return (f"unknown op '{name}': of MLIR's tensor dialect irc has tensor.extract and tensor.dim; its own "
                f"graph ops are the graph dialect's ({_SCOPE})" + registry.suggestion(name))
    return f"unknown op '{name}'" + registry.suggestion(name)


_FOREIGN_TYPES = re.compile(r"(complex|tuple|memref<[^>]*(?:strided|affine_map|#))|!|#map|affine_map|affine_set")


# Branches whose generic form may carry successor operands, and how many operands they keep.
_GENERIC_BRANCHES = {"cf.br": 0, "cf.cond_br": 1, "cf.switch": 1}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _untyped_literal_attr(lit: Literal):
    """An attribute value written without a type: integers are i64, floats f64 (as MLIR)."""
    if lit.kind in ("int", "hex"):
        return IntegerAttr(lit.value, i64)
    if lit.kind == "float":
        return FloatAttr(lit.value, f64)
    if lit.kind == "bool":
        return IntegerAttr(int(lit.value), i1)
    return lit.to_attr(None)


def _symbol_name(text: str) -> str:
    return unquote_string(text[1:]) if text.startswith('@"') else text[1:]


def _split_defs(text: str) -> tuple[tuple[str, int, bool], ...]:
    """``"%a, %b:2 ="`` -> (("a", 1, False), ("b", 2, True)): name, count, written as a group."""
    out = []
    for part in text.rstrip("= \t\r\n").split(","):
        part = part.strip()[1:]
        name, colon, count = part.partition(":")
        out.append((name, int(count) if colon else 1, bool(colon)))
    return tuple(out)


# -- the parser object ---------------------------------------------------------------------

_GRAMMAR = Path(__file__).with_name("grammar.lark")
_lock = threading.Lock()
_parser: tuple[Lark, ParseContext] | None = None


class _IdentityRule(Rule):
    """A grammar rule compared by identity: the parse table and the callback table
    hold the same rule objects, so lark's structural ``Rule.__eq__`` and its Python-level
    ``__hash__`` (both called on every reduction) are wasted work."""

    __slots__ = ()
    __eq__ = object.__eq__
    __hash__ = object.__hash__


def _speed_up_rule_lookups(lark: Lark) -> None:
    """Make the per-reduction table lookups of *this* parser cheap (about 7% of a parse).

    Only our own Lark instance's rule objects are touched; if lark's internals ever
    differ from what this expects, the parser simply keeps its default behaviour.
    """
    try:
        conf = lark.parser.parser_conf
        callbacks = conf.callbacks
        for rule in list(callbacks):
            if type(rule) is Rule:
                rule.__class__ = _IdentityRule
                rule.origin.name = str(rule.origin.name)
        items = list(callbacks.items())
        callbacks.clear()
        callbacks.update(items)
    except (AttributeError, TypeError):  # pragma: no cover - a future lark
        pass


_GRAMMAR_CACHE_MAGIC = b"IRCGRAMMAR1\n"


def _grammar_cache_name(grammar: str) -> str:
    """The cache file of the analysed grammar: one per grammar, lark version and lexer plugin."""
    import hashlib

    import lark

    digest = hashlib.sha256(f"{grammar}\0{lark.__version__}\0{_PLUGINS is not None}".encode()).hexdigest()[:16]
    return f"grammar-{digest}.json"


def _to_json(x):
    """lark's serialised parser (dicts with int keys, tuples) as JSON, tagging what JSON lacks."""
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in x):
            return {k: _to_json(v) for k, v in x.items()}
        return {"$dict": [[_to_json(k), _to_json(v)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"$tuple": [_to_json(v) for v in x]}
    if isinstance(x, list):
        return [_to_json(v) for v in x]
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    raise TypeError(f"cannot cache a {type(x).__name__} of lark's parser")


def _from_json(obj: dict):
    if len(obj) == 1 and "$tuple" in obj:
        return tuple(obj["$tuple"])
    if len(obj) == 1 and "$dict" in obj:
        return {k: v for k, v in obj["$dict"]}
    return obj


def _grammar_cache_identity(grammar: str) -> dict:
    import hashlib

    import lark

    return {"format": 1, "grammar": hashlib.sha256(grammar.encode()).hexdigest(), "lark": lark.__version__,
            "cython": _PLUGINS is not None}


def _load_cached_parser(grammar: str, options: dict) -> Lark | None:
    """The parser from irc's grammar cache, if this user's irc wrote it for this grammar and lark.

    No pickle: the tables are JSON, authenticated with this user's cache key
    (irc/diskcache.py) and checked against the grammar and lark version before
    lark rebuilds its objects from them.  Anything wrong removes the file.
    """
    import json

    from . import diskcache

    root, name = diskcache.cache_directory(), _grammar_cache_name(grammar)
    payload = diskcache.read_signed(root, name, magic=_GRAMMAR_CACHE_MAGIC)
    if payload is None:
        return None
    try:
        stored = json.loads(payload, object_hook=_from_json)
        if stored["identity"] != _grammar_cache_identity(grammar):
            raise ValueError("another grammar or lark")
        kwargs = {k: options[k] for k in ("transformer", "propagate_positions", "_plugins") if k in options}
        return Lark._load_from_dict(stored["data"], stored["memo"], **kwargs)
    except Exception:  # noqa: BLE001 - whatever is wrong with it, the parser is rebuilt
        diskcache.discard(root, name)
        return None


def _store_parser(lark: Lark, grammar: str) -> None:
    import json

    from lark.grammar import Rule
    from lark.lark import _LOAD_ALLOWED_OPTIONS
    from lark.lexer import TerminalDef

    from . import diskcache

    if diskcache.key() is None:
        return
    try:
        data, memo = lark.memo_serialize([TerminalDef, Rule])
        data["options"] = {k: v for k, v in data["options"].items() if k not in _LOAD_ALLOWED_OPTIONS}
        payload = json.dumps(_to_json({"identity": _grammar_cache_identity(grammar), "data": data, "memo": memo}),
                             separators=(",", ":")).encode()
    except (TypeError, ValueError, AttributeError, KeyError):  # pragma: no cover - a future lark
        return
    diskcache.write_signed(diskcache.cache_directory(), _grammar_cache_name(grammar), magic=_GRAMMAR_CACHE_MAGIC,
                           payload=payload)


def _get_parser() -> tuple[Lark, ParseContext]:
    global _parser
    if _parser is None:
        ctx = ParseContext()
        kwargs = {"_plugins": _PLUGINS} if _PLUGINS is not None else {}
        grammar = _GRAMMAR.read_text()
        options = dict(parser="lalr", lexer="contextual", transformer=ctx, maybe_placeholders=False,
                       propagate_positions=False, **kwargs)
        # Building the LALR tables takes ~110 ms; loading them from the cache ~12 ms.
        lark = _load_cached_parser(grammar, options)
        if lark is None:
            lark = Lark(grammar, **options)
            _store_parser(lark, grammar)
        _speed_up_rule_lookups(lark)
        _parser = (lark, ctx)
    return _parser


def parse(text: str, filename: str = "<input>", allow_unregistered: bool = False) -> ModuleOp:
    """Parse a module from text.  Raises ``IRError`` pointing at the first problem.

    Arguments of the wrong type are a ``TypeError`` naming the parameter: the lexer
    runs in C and must never see anything but a str.  A NUL character is an
    ``IRError`` at its position (text with one is binary data, not a program).
    """
    import irc.dialects  # noqa: F401 - registers every dialect's ops

    from .checks import check_type

    if isinstance(text, (bytes, bytearray, memoryview)):
        raise TypeError("irc.parse: parameter 'text' must be a str, got bytes (decode it first, "
                        "or use irc.parse_file)")
    check_type("irc.parse", "text", text, str)
    check_type("irc.parse", "filename", filename, str)
    check_type("irc.parse", "allow_unregistered", allow_unregistered, bool)
    if "\0" in text:
        from .fileio import decode_source

        decode_source(text.encode("utf-8", "surrogatepass"), filename)  # raises at the NUL
    source = SourceFile(filename, text)
    lark, ctx = _get_parser()
    with _lock, paused_gc():
        ctx.reset(source, allow_unregistered)
        ctx.loc_aliases = _location_aliases(text)
        # Unknown ops are reported and parsing goes on (ctx.errors); the first other problem
        # stops it.  All are raised together, in source order.
        try:
            module = lark.parse(text)
            errors = list(ctx.errors)
        except UnexpectedInput as e:
            errors = [*ctx.errors, _syntax_error(e, source)]
        except IRErrors:
            raise
        except IRError as e:
            errors = [*ctx.errors, e]
        except RecursionError:
            raise IRError("input is nested too deeply", Location(source, 1, 1)) from None
        finally:
            ctx.reset(SourceFile("<input>", ""), False)
    raise_collected(errors)
    module.source = source
    return module


def parse_file(path, allow_unregistered: bool = False, max_size: int | None = None) -> ModuleOp:
    """Parse the file at ``path`` (a str or path-like).

    The file is read as the CLI reads it (fileio.read_bytes): at most ``max_size``
    bytes (default ``fileio.DEFAULT_MAX_INPUT``), never a directory or a device;
    those are a ``ValueError``, a missing file ``FileNotFoundError``, binary
    content an ``IRError`` at the bad byte.
    """
    import os

    from .checks import check_type
    from .fileio import DEFAULT_MAX_INPUT, InputError, decode_source, read_bytes

    check_type("irc.parse_file", "path", path, (str, os.PathLike))
    check_type("irc.parse_file", "allow_unregistered", allow_unregistered, bool)
    if max_size is not None:
        check_type("irc.parse_file", "max_size", max_size, int)
        if max_size <= 0:
            raise ValueError(f"irc.parse_file: parameter 'max_size' must be positive, got {max_size}")
    name = os.fspath(path)
    if not isinstance(name, str):
        raise TypeError("irc.parse_file: parameter 'path' must be a str or a path-like of str, got bytes")
    try:
        data = read_bytes(name, DEFAULT_MAX_INPUT if max_size is None else max_size)
    except InputError as e:
        if str(e).startswith("no such file"):
            raise FileNotFoundError(str(e)) from None
        raise ValueError(f"irc.parse_file: {e}") from None
    return parse(decode_source(data, name), name, allow_unregistered)


_TERMINAL_NAMES = {
    "DEFS": "a result list ('%r =')", "VALUE_ID": "a value ('%name')", "VALUE_LIST": "a value ('%name')", "LABEL": "a block label ('^bb:')",
    "LABEL_ARGS": "a block label with arguments", "SUCC_ID": "a block ('^bb')", "SYMBOL": "a symbol ('@name')",
    "OP_NAME": "an op name ('dialect.op')", "TYPE": "a type", "BARE_ID": "a keyword", "STRING": "a string",
    "HEX": "a hexadecimal literal", "FLOAT": "a float literal", "INT": "an integer literal",
    "VISIBILITY": "a visibility ('private')", "$END": "end of input",
    "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COMMA": "','", "COLON": "':'", "SIG_TYPE": "':'", "EQUAL": "'='", "MORETHAN": "'>'", "LESSTHAN": "'<'",
    "__ANON_0": "'->'", "DENSE": "'dense<'",
    # The dotted keywords are regexes in the grammar (see there); named here as the words they are.
    **{f"{kw}_KW": f"'{text}'" for kw, text in (
        ("BUILTIN_MODULE", "builtin.module"), ("FUNC", "func.func"), ("FOR", "scf.for"), ("IF", "scf.if"),
        ("WHILE", "scf.while"), ("SWITCH", "cf.switch"), ("EXECUTE", "scf.execute_region"),
        ("ALLOCA_SCOPE", "memref.alloca_scope"), ("GLOBAL", "memref.global"), ("PARALLEL", "scf.parallel"),
        ("RESHAPE", "memref.collapse_shape' or 'memref.expand_shape"), ("REALLOC", "memref.realloc"),
        ("REDUCE", "scf.reduce"), ("CONDITION", "scf.condition"), ("ATOMIC_RMW", "memref.atomic_rmw"),
        ("GENERIC_ATOMIC_RMW", "memref.generic_atomic_rmw"), ("SHUFFLE", "vector.shuffle"),
        ("EXTRACT_POINTER", "memref.extract_aligned_pointer_as_index"))},
}


_PUNCTUATION = {"RBRACE", "RPAR", "RSQB", "COMMA", "COLON", "EQUAL", "MORETHAN"}


def _describe_expected(expected, keywords: bool = True) -> str:
    """``keywords=False``: leave out the custom forms' dotted keywords where an op name may come
    (an unexpected token lists them so; they were folded into OP_NAME by lark before they were
    terminals of their own, see grammar.lark)."""
    names = []
    if not keywords and "OP_NAME" in expected:
        expected = [t for t in expected if not t.endswith("_KW") or t == "MODULE_KW"]
    # Punctuation first: "expected '}'" is the most useful thing to say about a truncated file.
    for term in sorted(expected, key=lambda t: (t not in _PUNCTUATION, t)):
        text = _TERMINAL_NAMES.get(term)
        if text is None:
            lark, _ = _get_parser()
            try:
                pattern = lark.get_terminal(term).pattern
                text = f"'{pattern.value}'" if pattern.type == "str" else term.lower()
            except KeyError:
                text = term.lower()
        if text not in names:
            names.append(text)
    if len(names) > 6:
        names = names[:6] + ["..."]
    return ", ".join(names)


def _syntax_error(e: UnexpectedInput, source: SourceFile) -> IRError:
    line = getattr(e, "line", 1) or 1
    column = getattr(e, "column", 1) or 1
    loc = Location(source, line, column)
    pos = getattr(e, "pos_in_stream", None)
    if pos is None and isinstance(e, UnexpectedToken):
        pos = getattr(e.token, "start_pos", None)
    foreign = _FOREIGN_TYPES.match(source.text, pos) if isinstance(pos, int) else None
    if foreign is not None:
        what = foreign.group(0).rstrip("<")
        return IRError(f"'{what}' is MLIR syntax that irc does not support (complex and tuple types, "
                       f"dialect types '!...', affine maps and strided layouts; {_SCOPE})", loc)
    unknown = _unknown_op_before(source, line, column)
    if unknown is not None:
        return unknown
    if isinstance(e, UnexpectedCharacters):
        ch = source.text[e.pos_in_stream] if e.pos_in_stream < len(source.text) else "?"
        if ch == '"':
            return IRError("unterminated string (strings end on the same line with '\"')", loc)
        return IRError(f"unexpected character '{ch}'", loc)
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        lines = source.text.rstrip().splitlines() or [""]
        end = Location(source, len(lines), len(lines[-1]) + 1)
        return IRError(f"unexpected end of input, expected {_describe_expected(e.expected)}", end)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        text = str(tok.value)
        if tok.type == "DEFS":
            text = text.rstrip(" \t")  # the token takes the blanks after its '='
        elif tok.type == "SIG_TYPE":
            text = ":"  # the signature's ': TYPE' is one token; the colon is what came unexpected
        return IRError(f"unexpected '{text}', expected {_describe_expected(e.expected, keywords=False)}", loc)
    return IRError(str(e).splitlines()[0], loc)


_OP_AT_LINE_START = re.compile(r"\s*(?:%[^=]*=\s*)?([A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z0-9_$.]+)")


def _unknown_op_before(source: SourceFile, line: int, column: int) -> IRError | None:
    """A syntax error inside an op whose name irc does not know is reported as the unknown op:
    its custom syntax ('memref.global @g : ...') is what irc could not read."""
    text = source.line(line)
    match = _OP_AT_LINE_START.match(text)
    if match is None or match.end(1) >= column:
        return None
    name = match.group(1)
    if registry.OPS.get(name) is not None or name in ("func.func", "scf.for", "scf.if", "scf.while",
                                                     "scf.condition", "cf.switch", "scf.execute_region",
                                                     "scf.parallel", "builtin.module"):
        return None
    return IRError(_unknown_op_message(name), Location(source, line, match.start(1) + 1))


def _first_token(item):
    """The first lark token inside a parsed argument item (for the error's location)."""
    if isinstance(item, (tuple, list)):
        for part in item:
            tok = _first_token(part)
            if tok is not None:
                return tok
        return None
    return item if hasattr(item, "line") else None
