"""The printer: IR back to text, in the readable form or MLIR's generic form.

Names come from the source where possible (``%acc`` stays ``%acc``), so that a
user can follow their program through passes; values without a name, and
clashes, get numbers.  Names are unique within a function, so the output
always reads back to the same program: ``print(parse(text))`` is a fixpoint.
"""

from __future__ import annotations

import re

from .attributes import Attribute, OpaqueAttr, UnitAttr
from .block import Block, Region
from .gcpause import paused_gc
from .operation import IsolatedFromAbove, Operation
from .values import Value

_VALID_NAME = re.compile(r"[A-Za-z0-9_$.\-]+$")
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*$")
_GROUP_HINT = re.compile(r"(.+)#(\d+)$")
_AUTO_LABEL = re.compile(r"bb\d+$")
_FLAG_ATTRS = {"overflowFlags": "#arith.overflow<", "fastmath": "#arith.fastmath<"}


class Printer:
    # Whether this printer writes upstream MLIR's text (irc.mlir.MlirPrinter): ops whose forms
    # differ only in what may be left out (an empty 'else') ask it.
    mlir_syntax = False

    def __init__(self, generic: bool = False):
        self.generic = generic
        self.out: list[str] = []
        self.indent = ""
        self.names: dict[Value, str] = {}
        self.groups: dict[Operation, str] = {}
        self.labels: dict[Block, str] = {}
        self._used: set[str] = set()
        self._used_labels: set[str] = set()
        self._counter = 0
        self._block_counter = 0

    # -- naming ------------------------------------------------------------------------

    def _fresh(self, hint: str | None) -> str:
        used = self._used
        if hint and _VALID_NAME.match(hint) and not hint.isdigit():
            if hint not in used:
                used.add(hint)
                return hint
            k = 1
            while f"{hint}_{k}" in used:
                k += 1
            name = f"{hint}_{k}"
            used.add(name)
            return name
        while str(self._counter) in used:
            self._counter += 1
        name = str(self._counter)
        used.add(name)
        self._counter += 1
        return name

    def _name_op_results(self, op: Operation) -> None:
        results = op.results
        if len(results) == 1:
            hint = results[0].name_hint
            if hint is not None and hint.endswith("#0"):  # written as '%r:1 = ...'
                hint = hint[:-2]
            self.names[results[0]] = self._fresh(hint)
            return
        if not results:
            return
        bases = set()
        for r in results:
            m = _GROUP_HINT.match(r.name_hint or "")
            bases.add(m.group(1) if m else None)
        if len(bases) == 1 and None not in bases or all(r.name_hint is None for r in results):
            base = self._fresh(bases.pop() if None not in bases else None)
            self.groups[op] = base
            for i, r in enumerate(results):
                self.names[r] = f"{base}#{i}"
        else:
            for r in results:
                self.names[r] = self._fresh(r.name_hint)

    def _fresh_label(self, hint: str | None) -> str:
        if hint and _VALID_NAME.match(hint) and hint not in self._used_labels:
            label = hint
        else:
            while f"bb{self._block_counter}" in self._used_labels:
                self._block_counter += 1
            label = f"bb{self._block_counter}"
        self._used_labels.add(label)
        return label

    def _name_region(self, region: Region) -> None:
        for block in region.blocks:
            # An unlabelled entry block needs a label only if a phi names it.
            if block.label is not None or block is not region.first_block or block.first_use is not None:
                self.labels[block] = self._fresh_label(block.label)
            for arg in block.args:
                self.names[arg] = self._fresh(arg.name_hint)
            for op in block.ops:
                self._name_op_results(op)
                if op.regions and not op.has_trait(IsolatedFromAbove):
                    for r in op.regions:
                        self._name_region(r)

    def name_scope(self, op: Operation) -> None:
        """Assign names for everything inside isolated op ``op`` (a function)."""
        self.names = {}
        self.groups = {}
        self.labels = {}
        self._used = set()
        self._used_labels = set()
        self._counter = 0
        self._block_counter = 0
        for region in op.regions:
            self._name_region(region)

    # -- output helpers ops use --------------------------------------------------------------

    def write(self, text: str) -> None:
        self.out.append(text)

    def value(self, v: Value) -> str:
        name = self.names.get(v)
        if name is None:  # value outside the printed scope (printing a lone op)
            name = self.names[v] = self._fresh(v.name_hint)
        return "%" + name

    def values(self, vs) -> str:
        names = self.names
        parts = []
        for v in vs:
            name = names.get(v)
            parts.append("%" + name if name is not None else self.value(v))
        return ", ".join(parts)

    def block(self, b: Block) -> str:
        label = self.labels.get(b)
        if label is None:
            label = self.labels[b] = self._fresh_label(b.label)
        return "^" + label

    def successor(self, b: Block, branch: Operation) -> str:
        """A branch's successor; the MLIR printer adds the values the branch passes."""
        return self.block(b)

    def attr_dict(self, attrs: dict[str, Attribute], elide=(), flags: bool = True) -> str:
        """`` {key = value, ...}``, led by MLIR's op flags (`` overflow<nsw>``, `` fastmath<fast>``),
        which ops print where MLIR does: after the operands, before the attribute dictionary."""
        if not attrs:
            return ""
        items = []
        lead = ""
        for k, v in attrs.items():
            if k in elide:
                continue
            if flags and k in _FLAG_ATTRS and isinstance(v, OpaqueAttr) and v.text.startswith(_FLAG_ATTRS[k]):
                lead += " " + v.text[len("#arith."):]
                continue
            key = k if _BARE_KEY.match(k) else '"' + k + '"'
            items.append(key if isinstance(v, UnitAttr) else f"{key} = {v}")
        return lead + (" {" + ", ".join(items) + "}" if items else "")

    def types(self, ts) -> str:
        return ", ".join([str(t) for t in ts])

    # -- ops, blocks and regions ---------------------------------------------------------------

    def print_op(self, op: Operation) -> None:
        if op.regions and op.has_trait(IsolatedFromAbove) and op.results == []:
            saved = (self.names, self.groups, self.labels, self._used, self._used_labels,
                     self._counter, self._block_counter)
            self.name_scope(op)
            self._print_op(op)
            (self.names, self.groups, self.labels, self._used, self._used_labels,
             self._counter, self._block_counter) = saved
        else:
            self._print_op(op)

    def _print_op(self, op: Operation) -> None:
        out = self.out
        results = op.results
        if len(results) == 1:  # the common case (only multi-result ops form groups)
            name = self.names.get(results[0])
            out.append(f"{self.indent}%{name} = " if name is not None else
                       f"{self.indent}{self.value(results[0])} = ")
        else:
            out.append(self.indent)
            if results:
                group = self.groups.get(op)
                if group is not None:
                    out.append(f"%{group}:{len(results)} = ")
                else:
                    out.append(self.values(results) + " = ")
        if self.generic or not _has_custom_form(type(op)):
            self.print_generic(op)
        else:
            out.append(op.name)
            op.print_custom(self)
        out.append("\n")

    def print_generic(self, op: Operation) -> None:
        out = self.out
        out.append('"' + op.name + '"(' + self.values(op.operands) + ")")
        if op.successors:
            out.append("[" + ", ".join(self.block(b) for b in op.successors) + "]")
        if op.regions:
            out.append(" (")
            for i, r in enumerate(op.regions):
                if i:
                    out.append(", ")
                self.region(r, print_entry_args=True)
            out.append(")")
        out.append(self.attr_dict(op.attributes, flags=False))
        results = op.result_types
        res = str(results[0]) if len(results) == 1 else "(" + self.types(results) + ")"
        out.append(f" : ({self.types(op.operand_types)}) -> {res}")

    def region(self, region: Region, print_entry_args: bool = False, print_entry_label: bool | None = None) -> None:
        """Print ``{ ... }``; the caller has written everything before the brace."""
        out = self.out
        out.append("{\n")
        outer = self.indent
        self.indent = outer + "  "
        for i, block in enumerate(region.blocks):
            entry = i == 0
            # An entry block's label is cosmetic (nothing can branch to it); the
            # generic form's automatic '^bbN' labels are not worth keeping.
            named_entry = (block.label is not None and not _AUTO_LABEL.match(block.label)) \
                or block.first_use is not None
            show_label = not entry or named_entry or (print_entry_args and bool(block.args))
            if self.generic and entry and block.args:
                show_label = True
            if print_entry_label is not None and entry:
                show_label = print_entry_label or (print_entry_args and bool(block.args))
            if show_label:
                out.append(outer + self.block(block))
                if block.args and (print_entry_args or not entry):
                    out.append("(" + ", ".join(f"{self.value(a)}: {a.type}" for a in block.args) + ")")
                out.append(":\n")
            op = block.first_op  # printing does not edit the block: its list, walked directly
            while op is not None:
                self.print_op(op)
                op = op.next
        self.indent = outer
        out.append(outer + "}")

    def text(self) -> str:
        return "".join(self.out)


_CUSTOM_FORM: dict[type, bool] = {}


def _has_custom_form(cls: type) -> bool:
    """Whether ops of ``cls`` print in a readable form of their own (asked once per class;
    unregistered ops, whose ``is_registered()`` is False, always print generically)."""
    known = _CUSTOM_FORM.get(cls)
    if known is None:
        from .operation import UnregisteredOp

        known = _CUSTOM_FORM[cls] = hasattr(cls, "print_custom") and not issubclass(cls, UnregisteredOp)
    return known


def print_module(module, generic: bool = False) -> str:
    """The text of ``module``.  The printer recurses per nested region: deeper than
    ``nesting.MAX_REGION_DEPTH`` is an ``IRError`` at the op, as in the parser and verifier."""
    from .checks import check_module
    from .nesting import check_depth, deep_stack

    check_module("irc.Module.print", "module", module)
    if not isinstance(generic, bool):
        raise TypeError(f"irc.Module.print: parameter 'generic' must be a bool, got {type(generic).__name__}")
    check_depth(module)
    with paused_gc(), deep_stack():
        return _print_module(module, generic)


def _print_module(module, generic: bool) -> str:
    p = Printer(generic)
    implicit = not generic and not module.attributes
    if implicit:
        first = True
        for op in module.body.ops:
            if not first:
                p.write("\n")
            first = False
            p.print_op(op)
        return p.text()
    p.print_op(module) if generic else _print_named_module(p, module)
    return p.text()


def _print_named_module(p: Printer, module) -> None:
    from .attributes import StringAttr

    name = module.attributes.get("sym_name")
    header = "module"
    if isinstance(name, StringAttr):
        header += " @" + name.value
    others = {k: v for k, v in module.attributes.items() if k != "sym_name"}
    if others:
        header += " attributes" + p.attr_dict(others)
    p.write(header + " {\n")
    p.indent = "  "
    for op in module.body.ops:
        p.print_op(op)
    p.indent = ""
    p.write("}\n")


def print_op(op: Operation, generic: bool = False) -> str:
    """Print a single op (with names local to it); used by repr and diagnostics."""
    p = Printer(generic)
    if not op.has_trait(IsolatedFromAbove):
        for r in op.regions:
            p._name_region(r)
        p._name_op_results(op)
    p.print_op(op)
    return p.text().rstrip("\n")
