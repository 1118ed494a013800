"""MLIR text out: a module as upstream ``mlir-opt`` reads it.

irc's text differs from MLIR's in few places, and this printer bridges them:

* irc merges values with ``cf.phi``; MLIR passes them as block arguments.  A
  block's leading phis print as its arguments, ``^bb1(%x: i64):``, and each
  branch passes the phis' incoming values from its own block,
  ``cf.br ^bb1(%a : i64)``.
* irc's own bookkeeping attributes (``IRC_ONLY_ATTRIBUTES``, and math-approx's
  ``fastmath = "none"``, which is MLIR's default) are left out;
* entry blocks print without a label (MLIR forbids a label on a function's
  entry block, whose arguments the header names);
* memory spaces print as MLIR's address-space numbers (``gpu``, ``workgroup``, ``private`` are NVPTX's
  global, shared and local spaces 1, 3, 5, which irc reads back as those names);
* ops of irc's own graph dialect (``graph.*``) have no MLIR equivalent: printing one
  is an ``IRError`` asking to lower it first (``tensor.extract`` and ``tensor.dim`` are
  MLIR's and print as they are).

Everything else (op spellings, attributes, ``overflow<...>`` and
``fastmath<...>`` flags, branch weights) is already MLIR's.  ``parse`` reads
this output back, and so does ``mlir-opt-22``.
"""

from __future__ import annotations

import re

from .attributes import StringAttr
from .block import Block, Region
from .operation import Operation
from .printer import Printer

# Dialects whose ops irc spells exactly as upstream MLIR does (of MLIR's tensor dialect irc has
# tensor.extract and tensor.dim, in MLIR's syntax; its own graph ops are the graph dialect's).
MLIR_DIALECTS = frozenset({"builtin", "func", "arith", "math", "cf", "scf", "memref", "tensor", "vector"})
# Attributes irc's passes leave for its own later stages (the runtime, plan-memory,
# split-parallel): meaningless to MLIR, so not written.
IRC_ONLY_ATTRIBUTES = frozenset({"nocapture", "work", "tensor_signature", "arena_bytes", "parallel_range",
                                 "segment_of", "segments"})
_MEMORY_SPACES = {"gpu": "1", "workgroup": "3", "private": "5"}  # read back by irc.types.parse_type
_SPACE_IN_TYPE = re.compile(r"(memref<[^<>]*?), (gpu|workgroup|private)>")


def _phis(block: Block) -> list[Operation]:
    phis = []
    op = block.first_op
    while op is not None and op.name == "cf.phi":
        phis.append(op)
        op = op.next
    return phis


class MlirPrinter(Printer):
    """The readable printer with MLIR's block arguments in place of irc's phis."""

    mlir_syntax = True

    def __init__(self):
        super().__init__(generic=False)

    def successor(self, b: Block, branch: Operation) -> str:
        phis = _phis(b)
        label = self.block(b)
        if not phis:
            return label
        pred = branch.parent
        values = []
        for phi in phis:
            value = phi.value_for(pred)
            if value is None:
                raise branch.error(f"'^{b.label}' has a phi with no incoming value from this block")
            values.append(value)
        return f"{label}({self.values(values)} : {self.types(v.type for v in values)})"

    def attr_dict(self, attrs, elide=(), flags: bool = True) -> str:
        kept = {k: v for k, v in attrs.items()
                if k not in IRC_ONLY_ATTRIBUTES and not (k == "fastmath" and isinstance(v, StringAttr))}
        return super().attr_dict(kept, elide, flags)

    def print_op(self, op: Operation) -> None:
        if op.name == "cf.phi":
            return  # printed as its block's argument
        _check_printable(op)
        super().print_op(op)

    def region(self, region: Region, print_entry_args: bool = False, print_entry_label: bool | None = None) -> None:
        out = self.out
        out.append("{\n")
        outer = self.indent
        self.indent = outer + "  "
        for i, block in enumerate(region.blocks):
            phis = _phis(block)
            if i == 0:
                if print_entry_args and block.args:
                    args = ", ".join(f"{self.value(a)}: {a.type}" for a in block.args)
                    out.append(f"{outer}{self.block(block)}({args}):\n")
            else:
                out.append(outer + self.block(block))
                if phis:
                    out.append("(" + ", ".join(f"{self.value(p.results[0])}: {p.results[0].type}"
                                               for p in phis) + ")")
                out.append(":\n")
            for op in block.ops:
                self.print_op(op)
        self.indent = outer
        out.append(outer + "}")


def _check_printable(op: Operation) -> None:
    name = op.name
    dialect = name.split(".", 1)[0]
    if dialect not in MLIR_DIALECTS and op.is_registered():
        raise op.error("has no MLIR equivalent; lower it first, e.g. with -p tensor-to-loops")
    if name == "memref.view":
        source = op.operands[0].type
        if source.rank != 1 or str(source.element_type) != "i8":
            raise op.error(f"views a {source}: MLIR's memref.view takes only a 1-D i8 buffer, so this view "
                           "(irc's, of a typed buffer, as tensor-to-loops makes) has no MLIR equivalent")


def print_mlir(module) -> str:
    """``module`` as MLIR text that ``mlir-opt`` accepts (see the module docstring).

    Raises ``IRError`` at the first op that has no MLIR spelling.
    """
    from .checks import check_module
    from .gcpause import paused_gc
    from .nesting import check_depth, deep_stack
    from .printer import _print_named_module

    check_module("irc.print_mlir", "module", module)
    check_depth(module)
    with paused_gc(), deep_stack():
        p = MlirPrinter()
        _print_named_module(p, module)  # always the explicit 'module { ... }' MLIR prints
        text = p.text()
    return _SPACE_IN_TYPE.sub(lambda m: f"{m.group(1)}, {_MEMORY_SPACES[m.group(2)]}>", text)
