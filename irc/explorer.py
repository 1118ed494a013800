"""The pass explorer: apply passes one step at a time, undo, redo, diff, suggest, bisect.

One engine serves the notebook (``irc.Explorer``) and the terminal (``irc repl``, a thin
shell in repl.py)::

    x = irc.Explorer(irc.parse_file("prog.ir"))
    x.apply("canonicalize,cse")     # one step per pass
    x.diff()                        # against the previous step
    x.undo(); x.redo()
    x.history                       # 'canonicalize,cse': the pipeline so far, for 'irc opt -p'
    x.suggest()                     # the passes that would change the IR now
    x.bisect("f", 3)                # the first step after which @f(3) computes something else

Every step keeps its own module and its printed text, so undo and redo move a pointer
and cost nothing at any size; ``apply`` clones the current module and runs the passes on
the clone, so no step is ever changed after it was made.  Treat ``x.module`` as read-only:
it is the current step's snapshot (``x.module.clone()`` gives a copy to change by hand).
"""

from __future__ import annotations

import difflib
import html
import time
from dataclasses import dataclass, field

import numpy as np

from .diagnostics import IRError
from .gcpause import paused_gc
from .module import ModuleOp


class ExplorerError(Exception):
    """A request the explorer cannot carry out (undo at the first step, an unknown step...)."""


@dataclass
class Step:
    """One state of the module: the pass that made it (None for the input) and its snapshot."""

    pass_text: str | None
    module: ModuleOp
    text: str
    changed: bool = True
    stats: dict = field(default_factory=dict)

    @property
    def title(self) -> str:
        return self.pass_text or "(input)"


class Diff(str):
    """A unified diff: a string that renders coloured in Jupyter."""

    def _repr_html_(self) -> str:
        rows = []
        for line in self.splitlines():
            colour = "#22863a" if line.startswith("+") else "#b31d28" if line.startswith("-") else \
                "#6f42c1" if line.startswith("@@") else None
            text = html.escape(line)
            rows.append(f'<span style="color:{colour}">{text}</span>' if colour else text)
        return "<pre>" + "\n".join(rows) + "</pre>"


@dataclass
class Suggestion:
    """A pass that changes the current module, and what its statistics say it did."""

    name: str
    stats: dict

    def __str__(self) -> str:
        what = ", ".join(f"{k}={v}" for k, v in sorted(self.stats.items(), key=lambda kv: -kv[1])[:3])
        return f"{self.name}" + (f"  ({what})" if what else "")


def _count_ops(module: ModuleOp) -> int:
    return sum(1 for _ in module.walk())


def _changed(module: ModuleOp, before: str, ops_before: int) -> bool:
    """Whether ``module`` prints differently from ``before`` (which had ``ops_before`` ops).
    Most passes that change a module change its number of ops, which a walk tells in a tenth
    of the time of printing; the printer decides the rest (it is irc's fastest whole-module
    walk: a tuple per op built in Python costs several times more)."""
    if _count_ops(module) != ops_before:
        return True
    with paused_gc():
        return module.print() != before


def _clone(module: ModuleOp) -> ModuleOp:
    with paused_gc():  # a clone makes ~3 objects per op; collections during it triple its time
        return module.clone()


@dataclass
class Fault:
    """A run that stopped with an error instead of a result (a result too, for bisect)."""

    message: str

    def __str__(self) -> str:
        return f"fault: {self.message}"


def same_result(a, b, rtol: float = 1e-6) -> bool:
    """Whether two interpreter results agree: integers exactly, floats to ``rtol`` (NaN equals
    NaN), tuples element by element; faults by their message."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and \
            all(same_result(x, y, rtol) for x, y in zip(a, b))
    if isinstance(a, Fault) or isinstance(b, Fault):
        return isinstance(a, Fault) and isinstance(b, Fault) and a.message == b.message
    if a is None or b is None:
        return a is b
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        return False
    if x.dtype.kind in "fc" or y.dtype.kind in "fc":
        return bool(np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=rtol, atol=0.0, equal_nan=True))
    return bool(np.array_equal(x, y))


@dataclass
class BisectResult:
    """The first step whose result differs from the input's, or None if all agree."""

    step: int | None
    title: str | None
    expected: object
    got: object

    def __str__(self) -> str:
        if self.step is None:
            return "every step computes what the input computes"
        return f"step {self.step} ({self.title}) changes the result: {self.expected} -> {self.got}"


class Explorer:
    """Steps of a module through passes; see the module docstring."""

    def __init__(self, module: ModuleOp, name: str | None = None):
        from .checks import check_module

        check_module("irc.Explorer", "module", module)
        self.name = name or (module.source.name if module.source is not None else "<module>")
        start = _clone(module)
        self.steps: list[Step] = [Step(None, start, start.print())]
        self.position = 0

    # -- state -------------------------------------------------------------------------------

    @property
    def current(self) -> Step:
        return self.steps[self.position]

    @property
    def module(self) -> ModuleOp:
        """The current step's module (a snapshot: read it, don't change it)."""
        return self.current.module

    @property
    def text(self) -> str:
        return self.current.text

    @property
    def history(self) -> str:
        """The passes applied so far, as one pipeline string for ``irc opt -p``."""
        return ",".join(s.pass_text for s in self.steps[1:self.position + 1])

    # -- changing the state ----------------------------------------------------------------------

    def apply(self, pipeline: str) -> list[Step]:
        """Run ``pipeline`` on a copy of the current module, one new step per pass.

        All or nothing: if a pass fails (or leaves invalid IR) no step is added and the
        error is raised.  Steps after the current one (undone ones) are dropped."""
        from .passmanager import PassManager, PipelineError, parse_pipeline
        from .verifier import verify

        passes = parse_pipeline(pipeline)
        if not passes:
            raise PipelineError("the pipeline names no pass")
        module = _clone(self.module)
        previous = self.text
        new: list[Step] = []
        for p in passes:
            pm = PassManager([p], verify_each=False)
            pm.run(module)
            try:
                verify(module)
            except IRError as e:
                raise IRError(f"the IR is invalid after pass '{p.name}' (a bug in the pass): {e.message}",
                              e.location, e.notes) from None
            text = module.print()
            new.append(Step(p.pipeline_text(), module, text, text != previous,
                            dict(pm.statistics[0][1].counters) if pm.statistics else {}))
            previous = text
            if p is not passes[-1]:
                module = _clone(module)
        del self.steps[self.position + 1:]
        self.steps.extend(new)
        self.position = len(self.steps) - 1
        return new

    def undo(self, n: int = 1) -> Step:
        if n < 1:
            raise ExplorerError("undo takes a positive number of steps")
        if self.position == 0:
            raise ExplorerError("nothing to undo: this is the input")
        self.position = max(0, self.position - n)
        return self.current

    def redo(self, n: int = 1) -> Step:
        if n < 1:
            raise ExplorerError("redo takes a positive number of steps")
        if self.position == len(self.steps) - 1:
            raise ExplorerError("nothing to redo")
        self.position = min(len(self.steps) - 1, self.position + n)
        return self.current

    def reset(self, module: ModuleOp, name: str | None = None) -> None:
        """Start over from ``module`` (the REPL's ``load``)."""
        self.__init__(module, name)

    # -- looking -------------------------------------------------------------------------------

    def step_index(self, step: int) -> int:
        """A step number as the user writes it; negative numbers count back from the current."""
        index = self.position + step if step < 0 else step
        if not 0 <= index < len(self.steps):
            raise ExplorerError(f"no step {step} (steps 0 to {len(self.steps) - 1})")
        return index

    def diff(self, a: int | None = None, b: int | None = None, context: int = 3) -> Diff:
        """The unified diff from step ``a`` to step ``b``: by default from the previous step to
        the current one; with one step, from it to the current one."""
        if a is None:
            if self.position == 0:
                raise ExplorerError("no previous step to compare with: apply a pass first")
            a = self.position - 1
        first = self.step_index(a)
        second = self.position if b is None else self.step_index(b)
        old, new = self.steps[first], self.steps[second]
        lines = difflib.unified_diff(old.text.splitlines(keepends=True), new.text.splitlines(keepends=True),
                                     f"step {first}: {old.title}", f"step {second}: {new.title}", n=context)
        return Diff("".join(line if line.endswith("\n") else line + "\n" for line in lines))

    def function_text(self, name: str) -> str:
        """The text of one function of the current module (names as in the whole module)."""
        from .printer import Printer

        func = self.module.function(name.lstrip("@"))
        p = Printer()
        p.print_op(func)
        return p.text()

    def suggest(self, budget_s: float | None = None) -> list[Suggestion]:
        """The registered passes that would change the current module, each found by running it
        on a copy.  Passes that need options (``grad{func=...}``) are skipped, as are passes
        that fail on this module.  A copy a pass left unchanged is reused for the next pass,
        so a module costs one clone per changing pass."""
        with paused_gc():  # the copies are garbage as soon as they changed: collect once, later
            return self._suggest(budget_s)

    def _suggest(self, budget_s: float | None) -> list[Suggestion]:
        import irc.passes  # noqa: F401 - registers the passes

        from .passmanager import PASSES, PipelineError, Statistics, make_pass

        found: list[Suggestion] = []
        copy = None
        present = {op.name for op in self.module.walk()}
        ops = _count_ops(self.module)
        start = time.perf_counter()
        for name in sorted(PASSES):
            if budget_s is not None and time.perf_counter() - start > budget_s:
                break
            try:
                p = make_pass(name)
            except (PipelineError, TypeError, ValueError):
                continue  # needs options
            triggers = p.triggers()
            if triggers is not None and not triggers & present:
                continue  # it cannot change a module without any of the ops it acts on
            if copy is None:
                copy = _clone(self.module)
            stats = Statistics()
            try:
                p.run(copy, stats)
            except Exception:  # noqa: BLE001 - a pass that fails here is not a suggestion
                copy = None
                continue
            if _changed(copy, self.text, ops):
                found.append(Suggestion(name, dict(stats.counters)))
                copy = None
        return found

    # -- running -------------------------------------------------------------------------------

    def _function(self, step: int, name: str):
        return self.steps[step].module.function(name.lstrip("@"))

    def run(self, func: str, *args, step: int | None = None, max_steps: int | None = None):
        """``@func(*args)`` of the current step (or of ``step``) on the reference interpreter."""
        from .interpreter import Interpreter

        index = self.position if step is None else self.step_index(step)
        return Interpreter(self.steps[index].module, max_steps=max_steps).run(func.lstrip("@"), *args)

    def _outcome(self, step: int, func: str, args, max_steps: int | None):
        try:
            return self.run(func, *[_copy_arg(a) for a in args], step=step, max_steps=max_steps)
        except IRError as e:
            return Fault(e.message)

    def compare(self, func: str, *args, **compile_options):
        """``(interpreter result, JIT result)`` of ``@func(*args)`` on the current module."""
        import irc

        expected = self._outcome(self.position, func, args, None)
        try:
            exe = irc.compile(self.module, **compile_options)
            got = exe[func.lstrip("@")](*[_copy_arg(a) for a in args])
        except IRError as e:
            got = Fault(e.message)
        return expected, got

    def bisect(self, func: str, *args, rtol: float = 1e-6, max_steps: int | None = 10_000_000) -> BisectResult:
        """The first step of the history (up to the current one) after which ``@func(*args)``
        computes something else than on the input: a miscompile, found pass by pass.
        Results agree when integers are equal and floats are within ``rtol``; a fault is a
        result too (a pass that makes a program fault is found as well)."""
        self._function(0, func)  # an unknown function is an error, not "every step agrees"
        expected = self._outcome(0, func, args, max_steps)
        for index in range(1, self.position + 1):
            if not self.steps[index].changed:
                continue
            got = self._outcome(index, func, args, max_steps)
            if not same_result(expected, got, rtol):
                return BisectResult(index, self.steps[index].title, expected, got)
        return BisectResult(None, None, expected, expected)

    # -- notebooks -----------------------------------------------------------------------------

    def _repr_html_(self) -> str:
        from .module import module_html

        rows = "".join(
            f"<li>{'<b>' if i == self.position else ''}{i}: {html.escape(s.title)}"
            f"{'' if s.changed else ' (no change)'}{'</b>' if i == self.position else ''}</li>"
            for i, s in enumerate(self.steps))
        return f"<div><ol start='0' style='list-style:none'>{rows}</ol>{module_html(self.text)}</div>"

    def _repr_svg_(self) -> str | None:
        return self.module._repr_svg_()

    def __repr__(self) -> str:
        return f"<irc.Explorer of {self.name}: step {self.position} of {len(self.steps) - 1}, " \
               f"history '{self.history}'>"


def _copy_arg(a):
    """Each run gets its own copy of array arguments: a miscompiled step must not change the
    arguments the next step runs on."""
    return a.copy() if isinstance(a, np.ndarray) else a
