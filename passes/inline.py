"""inline: replace ``func.call`` by a copy of the callee's body.

Inlining removes the call overhead and, more importantly, exposes the callee's
code to the caller's constants and to every later pass (sccp, cse, licm).  A
call is inlined when the callee has a body, is not recursive (it calls neither
itself nor anything that leads back to it, so inlining terminates), and either
is small (at most ``max_size`` ops) or has this one call site in the module.

Callees are processed before their callers (bottom up over the call graph), so
a callee is measured with its own calls already inlined.  A callee whose body
is one block is copied in place, which works anywhere, even inside an scf
region.  A callee with several blocks needs a CFG: the caller's block is split
at the call, the callee's blocks go in between with its parameters replaced by
the call's operands, and each ``func.return`` becomes a branch to the
continuation block, whose phis merge the returned values.  Structured ops of the
callee stay structured.  Private functions that no longer have any caller are
erased.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from irc.dialects.cf import BranchOp, PhiOp
from irc.dialects.func import CallOp, FuncOp, ReturnOp

from irc.attributes import SymbolRefAttr
from irc.block import Region
from irc.passmanager import Pass

from .scf_to_cf import split_block_after


@dataclass
class Inline(Pass):
    """Inline calls to small or single-use, non-recursive functions; erase dead private ones."""

    name = "inline"
    max_size: int = 40  # callees with at most this many ops are always inlined

    def run(self, module, stats) -> None:
        functions = {f.sym_name: f for f in module.functions}
        referenced_before = set(symbol_references(module))
        graph = {name: _callees(f) for name, f in functions.items()}
        recursive = _recursive_functions(graph)
        sites = Counter(call.callee for f in functions.values() for call in _calls(f))
        for name in _bottom_up(graph):
            caller = functions[name]
            for call in _calls(caller):
                callee = functions.get(call.callee)
                if callee is None or callee.is_declaration or call.callee in recursive:
                    continue
                if sites[call.callee] != 1 and _size(callee) > self.max_size:
                    continue
                if not _can_inline_at(call, callee):
                    continue
                sites[call.callee] -= 1
                sites.update(c.callee for c in _calls(callee))
                inline_call(call, callee)
                stats.add("calls-inlined")
        erased = erase_unused_private_functions(module, referenced_before)
        if erased:
            stats.add("functions-erased", erased)


def _calls(func) -> list[CallOp]:
    return [op for op in func.walk() if isinstance(op, CallOp)]


def _callees(func) -> set[str]:
    return {call.callee for call in _calls(func)}


def _size(func) -> int:
    return sum(1 for _ in func.body.walk())


def _recursive_functions(graph: dict[str, set[str]]) -> set[str]:
    """Functions that can reach themselves in the call graph."""
    recursive = set()
    for start in graph:
        seen, work = set(), list(graph[start])
        while work:
            name = work.pop()
            if name == start:
                recursive.add(start)
                break
            if name in seen or name not in graph:
                continue
            seen.add(name)
            work.extend(graph[name])
    return recursive


def _bottom_up(graph: dict[str, set[str]]) -> list[str]:
    """Function names, callees before callers (cycles broken arbitrarily)."""
    order: list[str] = []
    state: dict[str, int] = {}
    for root in graph:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(sorted(graph[root])))]
        while stack:
            name, it = stack[-1]
            for callee in it:
                if callee in graph and callee not in state:
                    state[callee] = 1
                    stack.append((callee, iter(sorted(graph[callee]))))
                    break
            else:
                stack.pop()
                order.append(name)
    return order


def _can_inline_at(call: CallOp, callee: FuncOp) -> bool:
    """A one-block callee inlines anywhere; others need the call to sit in a function's CFG."""
    if callee.body.first_block is callee.body.last_block:
        return isinstance(callee.body.entry.terminator, ReturnOp)
    return isinstance(call.parent_op, FuncOp)


def inline_call(call: CallOp, callee: FuncOp) -> None:
    body = callee.body
    if body.first_block is body.last_block:
        _inline_single_block(call, callee)
    else:
        _inline_blocks(call, callee)


def _inline_single_block(call: CallOp, callee: FuncOp) -> None:
    entry = callee.body.entry
    value_map = dict(zip(entry.args, call.operands))
    for op in entry.ops:
        if op.is_terminator:
            results = [value_map.get(v, v) for v in op.operands]
            break
        call.parent.insert_before(op.clone(value_map), call)
    for old, new in zip(call.results, results):
        old.replace_all_uses_with(new)
    call.erase()


def _inline_blocks(call: CallOp, callee: FuncOp) -> None:
    block = call.parent
    cont = split_block_after(call)
    copy = Region()
    callee.body.clone_into(copy, {}, {})
    entry = copy.entry
    for arg, value in zip(entry.args, call.operands):
        arg.replace_all_uses_with(value)
    while entry.args:
        entry.erase_argument(len(entry.args) - 1)
    blocks = list(copy.blocks)
    anchor = block
    for b in blocks:
        copy.remove(b)
        block.parent.insert_after(b, anchor)
        anchor = b
    returns = [b.terminator for b in blocks if isinstance(b.terminator, ReturnOp)]
    results = _merge_returns(returns, cont, call)
    for old, new in zip(call.results, results):
        old.replace_all_uses_with(new)
    branch = BranchOp.build(entry)
    branch.loc = call.loc
    block.insert_before(branch, call)
    call.erase()


def _merge_returns(returns: list[ReturnOp], cont, call: CallOp) -> list:
    """Turn each ``func.return`` into a branch to ``cont``; the values the call returns there."""
    if len(returns) == 1:
        results = list(returns[0].operands)
    else:
        phis = [PhiOp.build(r.type, [(ret.operands[i], ret.parent) for ret in returns])
                for i, r in enumerate(call.results)]
        for phi, r in zip(reversed(phis), reversed(call.results)):
            phi.loc = call.loc
            phi.results[0].name_hint = r.name_hint
            cont.prepend(phi)
        results = [phi.results[0] for phi in phis]
    for ret in returns:
        branch = BranchOp.build(cont)
        branch.loc = ret.loc
        ret.parent.insert_before(branch, ret)
        ret.erase()
    return results


def symbol_references(module) -> Counter:
    """How many times each symbol is named by an op attribute, outside the function it names."""
    counts: Counter = Counter()
    for func in module.functions:
        for op in func.walk():
            for attr in op.attributes.values():
                if isinstance(attr, SymbolRefAttr) and attr.name != func.sym_name:
                    counts[attr.name] += 1
    return counts


def erase_unused_private_functions(module, candidates: set[str]) -> int:
    """Erase the private functions among ``candidates`` that nothing refers to any more."""
    erased = 0
    while True:
        referenced = symbol_references(module)
        dead = [f for f in module.functions
                if f.sym_name in candidates and _is_private(f) and not referenced[f.sym_name]]
        if not dead:
            return erased
        for func in dead:
            func.drop_all_references()
            module.body.remove(func)
            erased += 1


def _is_private(func) -> bool:
    vis = func.attributes.get("sym_visibility")
    return vis is not None and getattr(vis, "value", None) == "private"
