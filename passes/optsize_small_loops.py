"""optsize-small-loops: functions whose loops do little work are compiled for size, not speed.

LLVM's -O2 vectorises, interleaves and unrolls every loop it can, and much of the time a
compile of a tensor function spends in LLVM goes to the copies it makes of small loops: a
training step's loss, its softmax over ten classes and its last layer's bias gradient are
loop nests of a few thousand ops each, beside GEMMs of hundreds of millions.  Vectorising
such a nest saves microseconds a call and costs LLVM milliseconds, once per
specialisation.  LLVM's ``optsize`` function attribute keeps the cheap optimisations
(SSA, instcombine, LICM, GVN...) and drops the code-growing ones (unrolling, interleaving,
vectorising where it needs a scalar epilogue).

A function gets the unit attribute ``optsize`` (the CPU backend passes it to LLVM) when its
loop nests do less than 1/``share`` of the work of the calls it makes (a training step's
GEMMs, and the loop nests outline-loops shared out, which LLVM compiles apart at full
speed); a function outline-loops made (a nest over a range its caller gives) gets it when
each call of it is that small beside the other calls of its caller.  Work is counted in
ops: ``split-parallel.estimated_work`` for an ``scf.for`` nest whose bounds are constants
(a loop with a bound known only at run time is taken as large), the ``work`` attribute of
a call.  A GEMM does ~30 multiply-adds a cycle where scalar code does ~1 op, so with the
default share of 1,024 the scalar loops cost at most a few percent of the call.  The rule
is relative on purpose: a function that is nothing but a small loop (an axpy on 4,096
elements, called a million times) keeps every cycle LLVM can win for it.  A function with
``scf.while`` or more than one block (loops that are branches) is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.attributes import UnitAttr
from irc.passmanager import Pass
from irc.patterns import constant_value

from .split_parallel import estimated_work


def _bounded(loop) -> bool:
    """Whether every ``scf.for`` of the nest has constant bounds and step."""
    return all(constant_value(v) is not None
               for op in loop.walk() if op.name == "scf.for" for v in op.operands[:3])


def _call_work(func) -> int:
    """The ops of the calls ``func`` makes outside loops, as their ``work`` attributes say."""
    return sum(op.attributes["work"].value for op in func.body.entry.ops
               if op.name == "func.call" and "work" in op.attributes)


def _outer_loops(func):
    """The ``scf.for`` ops of ``func`` not inside another loop; None where it has other loops."""
    found = []
    stack = [func.body]
    while stack:
        region = stack.pop()
        if region.first_block is not region.last_block:
            return None
        for op in region.entry.ops if region.entry is not None else ():
            if op.name == "scf.while":
                return None
            if op.name == "scf.for":
                found.append(op)
            else:
                stack.extend(op.regions)
    return found


@dataclass
class OptsizeSmallLoops(Pass):
    """Mark functions whose loops do little beside their calls ``optsize`` (LLVM compiles them for size)."""

    name = "optsize-small-loops"
    share: int = 1024

    def run(self, module, stats) -> None:
        funcs = [f for f in module.functions if not f.is_declaration]
        call_work = {f.sym_name: _call_work(f) for f in funcs}
        sites: dict[str, list] = {}  # callee -> [(work of the call or None, its caller's call work)]
        for func in funcs:
            for op in func.walk():
                if op.name == "func.call":
                    work = op.attributes.get("work")
                    sites.setdefault(op.callee, []).append((work.value if work is not None else None,
                                                            call_work[func.sym_name]))
        for func in funcs:
            if "optsize" not in func.attributes and self._small(func, call_work[func.sym_name],
                                                                 sites.get(func.sym_name, [])):
                func.attributes["optsize"] = UnitAttr()
                stats.add("functions-marked")

    def _small(self, func, call_work: int, sites: list) -> bool:
        loops = _outer_loops(func)
        if not loops:
            return False
        if all(_bounded(loop) for loop in loops):
            return sum(estimated_work(loop) for loop in loops) * self.share < call_work
        # A nest over a range the caller gives (outline-loops): weighed at each call.
        visibility = func.attributes.get("sym_visibility")
        if visibility is None or visibility.value != "private" or not sites:
            return False
        return all(work is not None and work * self.share < caller_work - work for work, caller_work in sites)
