"""Shrinking a program while a property (a disagreement) persists.

``reduce(text, interesting)`` parses ``text``, tries one small change at a
time through irc's IR API, prints the result and keeps it if it still parses,
verifies and is ``interesting``; it repeats until no change is kept (or the
deadline passes).  The changes, smallest effect first:

* delete a function that nothing calls (other than the entry);
* simplify a branch: ``cf.cond_br`` -> ``cf.br`` to one side, dropping this
  block's phi entries in the other, then delete the blocks no longer reachable;
* delete an op whose results are unused (stores and loops included);
* replace an op's result by one of its operands of the same type, or by a
  constant of its type (0, 1; for a function parameter, also the argument the
  disagreement was seen with), then delete the op;
* run a clean-up pass over the whole program (``CLEANUPS``).

Every candidate is a fresh parse of the current text, so a failed candidate
leaves nothing behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from irc.attributes import FloatAttr, IntegerAttr
from irc.types import FloatType, IndexType, IntegerType


def _parse(text: str):
    import irc

    module = irc.parse(text, "<reduce>")
    irc.verify(module)
    return module


def _functions(module, entry: str):
    return [f for f in module.functions if not f.is_declaration]


def _constant(value, t):
    from irc.dialects.arith import ConstantOp

    if isinstance(t, FloatType):
        return ConstantOp.build(FloatAttr(float(value), t))
    if isinstance(t, IntegerType) and t.width == 1:
        return ConstantOp.build(IntegerAttr(int(bool(value)), t))
    return ConstantOp.build(IntegerAttr(int(value), t))


def _scalar(t) -> bool:
    return isinstance(t, (FloatType, IntegerType, IndexType))


# -- candidate changes: each yields one closure per site; a closure changes the module in place ---

def _erase_functions(module, entry: str) -> Iterator[Callable]:
    called = {op.callee for op in module.walk() if op.name == "func.call"}
    for f in _functions(module, entry):
        if f.sym_name != entry and f.sym_name not in called:
            yield f.erase


def _simplify_branches(module, entry: str) -> Iterator[Callable]:
    from irc.dialects.cf import BranchOp
    from irc.passes.cfg_utils import remove_unreachable_blocks

    for op in list(module.walk()):
        if op.name != "cf.cond_br":
            continue
        for keep in (0, 1):
            def change(op=op, keep=keep):
                block = op.parent
                kept, dropped = op.successors[keep], op.successors[1 - keep]
                if dropped is not kept:
                    for phi in list(dropped.phis()):
                        phi.remove_incoming(block)
                block.insert_before(BranchOp(successors=[kept]), op)
                op.erase()
                remove_unreachable_blocks(block.parent)
            yield change


def _erase_dead_ops(module, entry: str) -> Iterator[Callable]:
    for op in list(module.walk()):
        if op.name in ("builtin.module", "func.func") or op.has_trait(_terminator()) or op.parent is None:
            continue
        if any(r.has_uses for r in op.results):
            continue
        yield op.erase


def _terminator():
    from irc.operation import Terminator

    return Terminator


def _replace_values(module, entry: str, arguments) -> Iterator[Callable]:
    for f in _functions(module, entry):
        params = list(f.regions[0].entry.args) if f.regions and f.regions[0].entry is not None else []
        for i, p in enumerate(params):
            if not p.has_uses or not _scalar(p.type):
                continue
            choices = [0, 1]
            if f.sym_name == entry and arguments is not None and i < len(arguments):
                choices.insert(0, arguments[i])
            for value in choices:
                yield _by_constant(p, value, f.regions[0].entry, None)
    for op in list(module.walk()):
        if op.name in ("builtin.module", "func.func", "arith.constant") or op.parent is None or not op.results:
            continue
        for r in op.results:
            if not r.has_uses:
                continue
            for operand in op.operands:
                if operand.type is r.type:
                    yield _by_value(op, r, operand)
            if _scalar(r.type):
                for value in (0, 1):
                    yield _by_constant(r, value, None, op)


def _by_value(op, result, operand) -> Callable:
    def change():
        result.replace_all_uses_with(operand)
        if not any(r.has_uses for r in op.results):
            op.erase()
    return change


def _by_constant(value, literal, block, op) -> Callable:
    def change():
        const = _constant(literal, value.type)
        if op is None:
            block.prepend(const)
        else:
            anchor = op
            if op.name == "cf.phi":  # phis lead their block: the constant goes after them
                anchor = next(o for o in op.parent.ops if o.name != "cf.phi")
            op.parent.insert_before(const, anchor)
        value.replace_all_uses_with(const.results[0])
        if op is not None and not any(r.has_uses for r in op.results):
            op.erase()
    return change


# Whole-program clean-ups tried as one change each: they shrink what the changes above leave
# (constant branches, scf.if on a constant, chains of cf.br).  Like any change they are kept only
# if the disagreement persists, so a bug in one of these passes does not hide itself.
CLEANUPS = ("canonicalize", "simplify-cfg", "scf-to-cf", "dce")
CHANGES = ("functions", "branches", "dead", "values", "cleanups")


def _cleanups(module) -> Iterator[Callable]:
    import irc.passes

    for pipeline in CLEANUPS:
        yield lambda pipeline=pipeline: irc.passes.run(module, pipeline)


def _sites(module, kind: str, entry: str, arguments) -> list[Callable]:
    if kind == "functions":
        return list(_erase_functions(module, entry))
    if kind == "branches":
        return list(_simplify_branches(module, entry))
    if kind == "dead":
        return list(_erase_dead_ops(module, entry))
    if kind == "cleanups":
        return list(_cleanups(module))
    return list(_replace_values(module, entry, arguments))


def candidate(text: str, kind: str, index: int, entry: str = "main", arguments=None) -> str | None:
    """``text`` with change ``index`` of ``kind`` applied: the new text, '' if the result is invalid,
    None if there is no such change."""
    import irc

    module = _parse(text)
    sites = _sites(module, kind, entry, arguments)
    if index >= len(sites):
        return None
    try:
        sites[index]()
        printed = module.print()
        irc.verify(irc.parse(printed, "<candidate>"))
    except Exception:  # noqa: BLE001 - an invalid candidate, whatever went wrong
        return ""
    return printed


def size(text: str) -> int:
    """Ops in the program (what the reducer minimises)."""
    return sum(1 for _ in _parse(text).walk())


def reduce(text: str, interesting: Callable[[str], bool], deadline: float | None = None, entry: str = "main",
           arguments=None) -> str:
    """The smallest variant of ``text`` found that is still ``interesting`` (see the module docstring)."""
    text = _parse(text).print()
    changed = True
    while changed:
        changed = False
        for kind in CHANGES:
            index = 0
            while deadline is None or time.monotonic() < deadline:
                new = candidate(text, kind, index, entry, arguments)
                if new is None:
                    break
                if new and new != text and interesting(new):
                    text, changed = new, True  # the same index now names the next site
                else:
                    index += 1
            if deadline is not None and time.monotonic() >= deadline:
                return text
    return text
