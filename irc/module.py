"""The module: the top-level op holding functions, with a symbol table."""

from __future__ import annotations

from collections.abc import Iterator

from .attributes import StringAttr
from .block import Block, Region
from .diagnostics import UNKNOWN, IRError, Location
from .operation import IsolatedFromAbove, Operation


class ModuleOp(Operation):
    """``builtin.module``: one region, one block of symbol-defining ops (functions).

    A file of top-level ops parses into an implicit module; the printer leaves
    the ``module { }`` wrapper out unless the module has a name or attributes.
    """

    name = "builtin.module"
    traits = frozenset({IsolatedFromAbove})
    summary = "A container of functions and other symbols."
    example = "module @m { func.func private @g(i64) -> i64 }"

    source = None  # the SourceFile it was parsed from, if any

    @classmethod
    def new(cls, region: Region | None = None, loc: Location = UNKNOWN) -> ModuleOp:
        """An empty module, or one wrapping ``region``."""
        return cls(regions=[region or Region([Block()])], loc=loc)

    @property
    def body(self) -> Block:
        return self.regions[0].entry

    @property
    def ops(self) -> Iterator[Operation]:
        return self.body.ops

    def symbol_table(self) -> dict[str, Operation]:
        table: dict[str, Operation] = {}
        for op in self.body.ops:
            sym = op.attributes.get("sym_name")
            if isinstance(sym, StringAttr):
                table[sym.value] = op
        return table

    def lookup(self, name: str) -> Operation | None:
        from .checks import check_type

        check_type("irc.Module.lookup", "name", name, str)
        return symbol_in(self.body, name)

    @property
    def functions(self) -> list[Operation]:
        return [op for op in self.body.ops if op.name == "func.func"]

    def function(self, name: str) -> Operation:
        from .checks import check_type

        check_type("irc.Module.function", "name", name, str)
        op = self.lookup(name)
        if op is None or op.name != "func.func":
            names = ", ".join(f"@{f.sym_name}" for f in self.functions) or "none"
            raise IRError(f"no function named '@{name}' in the module (functions: {names})")
        return op

    def verify_op(self) -> None:
        if len(self.regions) != 1 or self.regions[0].first_block is not self.regions[0].last_block:
            raise self.error("must have one region with one block")

    def print(self, generic: bool = False) -> str:
        from .printer import print_module

        return print_module(self, generic=generic)

    def to_mlir(self) -> str:
        """The module as MLIR text for mlir-opt (block arguments for phis): see irc/mlir.py."""
        from .mlir import print_mlir

        return print_mlir(self)

    def verify(self) -> ModuleOp:
        from .verifier import verify

        verify(self)
        return self

    def __str__(self) -> str:
        return self.print()

    __repr__ = Operation.__repr__

    def clone(self, value_map=None, block_map=None) -> ModuleOp:
        new = Operation.clone(self, value_map, block_map)
        new.source = self.source
        return new

    def _repr_html_(self) -> str:
        """Jupyter shows a module as highlighted text (plain escaped text without Pygments)."""
        return module_html(self.print())

    def _repr_svg_(self) -> str | None:
        """Jupyter shows the picture of irc.picture too, where graphviz's ``dot`` is installed
        and the module is small enough for dot to lay it out at once (None otherwise: the
        notebook falls back to the HTML).  ``irc view`` draws larger ones on request."""
        from itertools import islice

        from .picture import MAX_DISPLAY_OPS, PictureError, module_graph, render_svg

        if sum(1 for _ in islice(self.walk(), MAX_DISPLAY_OPS + 2)) > MAX_DISPLAY_OPS + 1:  # + the module
            return None
        try:
            return render_svg(module_graph(self))
        except PictureError:
            return None

    def __reduce__(self):
        """A module pickles as its text and unpickles by parsing it: the text is the one stable,
        versioned form of a module (its Python objects hold use lists, interned types and
        parser state), and it is what a reader can inspect.  Unpickling is the user's own
        choice; checkpoints never pickle (irc/checkpoint/).  Locations refer to the printed
        text, named after the module's source."""
        name = self.source.name if self.source is not None else "<module>"
        return (_module_from_text, (self.print(), f"{name} (unpickled)"))

    def __deepcopy__(self, memo) -> ModuleOp:
        """A copy by ``clone``: it prints as the original does, and keeps its locations."""
        return self.clone()


def _module_from_text(text: str, filename: str) -> ModuleOp:
    """The unpickler of ``ModuleOp.__reduce__`` (printed modules may hold unregistered ops)."""
    from .parser import parse

    return parse(text, filename, allow_unregistered=True)


def module_html(text: str) -> str:
    """``text`` as HTML: coloured by irc.highlight when Pygments is installed, else escaped."""
    try:
        from .highlight import highlight_html
    except ImportError:
        import html

        return "<pre>" + html.escape(text) + "</pre>"
    return highlight_html(text)


def symbol_in(block, name: str):
    """The op of ``block`` whose ``sym_name`` is ``name`` (a module's or a gpu.module's symbol
    table), or None."""
    for op in block.ops:
        sym = op.attributes.get("sym_name")
        if isinstance(sym, StringAttr) and sym.value == name:
            return op
    return None
