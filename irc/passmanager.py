"""Passes, pipelines and the pass manager.

A pass is a small class whose ``name`` is its pipeline token and whose
dataclass fields are its options::

    @dataclass
    class Inline(Pass):
        '''Inline calls to small functions.'''
        name = "inline"
        max_size: int = 50
        def run(self, module, stats): ...

Defining the class registers it, so ``irc passes`` and pipeline parsing both
read the registry; there is no list to keep by hand.  A pipeline string is
``a,b{opt=1,flag=true},c``.  The manager verifies after every pass (by
default), and can print the IR after each pass (or only after those that
changed it), time each pass and collect per-pass statistics.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import time
from collections import defaultdict
from typing import ClassVar, TextIO

from .diagnostics import IRError
from .gcpause import paused_gc

PASSES: dict[str, type[Pass]] = {}

# Named default pipelines, as ``irc opt -O1`` / ``-O2`` run them: readable lists of
# stages.  A preset may name only registered passes (checked when it is used).
PRESETS: dict[str, str] = {
    "O0": "",
    "O1": "canonicalize,cse,dce",
    "O2": "inline,mem2reg,sccp,canonicalize,cse,licm,simplify-cfg,canonicalize,cse,dce",
}


class PipelineError(ValueError):
    """A malformed pipeline string or an unknown pass or option (a usage error)."""


class Statistics:
    """Named counters a pass increments: ``stats.add("ops-folded")``."""

    def __init__(self):
        self.counters: dict[str, int] = defaultdict(int)

    def add(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    def __bool__(self) -> bool:
        return any(self.counters.values())


class Pass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and cls.name:
            if not cls.__dict__.get("summary"):
                cls.summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            PASSES[cls.name] = cls

    def run(self, module, stats: Statistics) -> None:
        raise NotImplementedError

    def triggers(self) -> frozenset[str] | None:
        """Op names at least one of which a module must contain for this pass to change it, or
        None when the pass does not say (it may change any module).  ``Explorer.suggest`` does
        not run a pass on a module that has none of its triggers."""
        return None

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else []

    def pipeline_text(self) -> str:
        opts = [f"{option_name(f)}={_format_option(getattr(self, f.name))}"
                for f in self.options() if getattr(self, f.name) != f.default]
        return self.name + ("{" + ",".join(opts) + "}" if opts else "")


def option_name(field: dataclasses.Field) -> str:
    """The spelling of an option in a pipeline: the field's name with '-' for '_'.  A field named
    ``name_`` is option ``name`` (``name`` itself is the pass's pipeline token)."""
    return field.name.rstrip("_").replace("_", "-")


def _format_option(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _convert_option(cls: type[Pass], field: dataclasses.Field, text: str):
    kind = field.type if isinstance(field.type, type) else {"int": int, "bool": bool, "float": float,
                                                             "str": str}.get(str(field.type), str)
    try:
        if kind is bool:
            if text.lower() in ("1", "true", "on", "yes"):
                return True
            if text.lower() in ("0", "false", "off", "no"):
                return False
            raise ValueError
        return kind(text)
    except ValueError:
        what = {"int": "an integer", "float": "a number", "bool": "true or false"}.get(kind.__name__, "a string")
        raise PipelineError(f"option '{option_name(field)}' of pass '{cls.name}' expects {what}, "
                            f"got '{text}'") from None


def parse_pipeline(text: str) -> list[Pass]:
    """``"canonicalize,cse{x=1}"`` -> pass instances; PipelineError if malformed."""
    passes: list[Pass] = []
    if text.strip() and any(not item.strip() for item in _top_level_items(text)):
        raise PipelineError(f"empty pipeline element in '{text}' (two commas, or a comma at an end)")
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        j = i
        while j < n and text[j] not in ",{":
            j += 1
        name = text[i:j].strip()
        options: dict[str, str] = {}
        if j < n and text[j] == "{":
            close = text.find("}", j)
            if close < 0:
                raise PipelineError(f"unclosed '{{' in pipeline after '{name}'")
            key = None
            for item in text[j + 1:close].replace(" ", ",").split(","):
                if not item:
                    continue
                if "=" not in item and key is not None and not item[0].isalpha():
                    options[key] += "," + item  # a list option: 'wrt=0,2,5' (MLIR's syntax)
                    continue
                key, eq, value = item.partition("=")
                key = key.strip()
                options[key] = value.strip() if eq else "true"
            j = close + 1
        passes.append(make_pass(name, options))
        i = j
    return passes


def _top_level_items(text: str) -> list[str]:
    """``text`` split at the commas outside ``{...}`` (option lists have commas of their own)."""
    items, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            items.append(text[start:k])
            start = k + 1
    items.append(text[start:])
    return items


def make_pass(name: str, options: dict[str, str] | None = None) -> Pass:
    cls = PASSES.get(name)
    if cls is None:
        close = difflib.get_close_matches(name, PASSES.keys(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise PipelineError(f"unknown pass '{name}'{hint} ('irc passes' lists them)")
    fields = {option_name(f): f for f in cls.options()}
    kwargs = {}
    for key, value in (options or {}).items():
        field = fields.get(key.replace("_", "-"))
        if field is None:
            known = ", ".join(fields) or "none"
            raise PipelineError(f"unknown option '{key}' for pass '{name}' (options: {known})")
        kwargs[field.name] = _convert_option(cls, field, value)
    return cls(**kwargs)


class PassManager:
    def __init__(self, passes: list[Pass], verify_each: bool = True, print_after_all: bool = False,
                 print_after_change: bool = False, timing: bool = False, stats: bool = False,
                 out: TextIO | None = None, after_pass=None):
        self.passes = passes
        self.verify_each = verify_each
        self.print_after_all = print_after_all
        self.print_after_change = print_after_change
        self.timing = timing
        self.collect_stats = stats
        self.out = out
        # Called as after_pass(pass, module, index) after each pass that the print options select
        # (all, or those that changed the IR) instead of printing it: irc opt --picture-dir.
        self.after_pass = after_pass
        self.times: list[tuple[str, float]] = []
        self.statistics: list[tuple[str, Statistics]] = []

    @classmethod
    def parse(cls, pipeline: str, **kwargs) -> PassManager:
        return cls(parse_pipeline(pipeline), **kwargs)

    def run(self, module):
        from .checks import check_module
        from .nesting import deep_stack

        check_module("irc.passes.run", "module", module)
        with deep_stack():  # passes recurse per nested region; verify bounds the depth
            return self._run(module)

    def _run(self, module):
        from .verifier import verify

        out = self.out or sys.stderr
        for p in self.passes:
            stats = Statistics()
            before = module.print() if self.print_after_change else None
            start = time.perf_counter()
            try:
                with paused_gc():  # a pass builds many small objects; see gcpause.py
                    p.run(module, stats)
            except IRError:
                raise
            except RecursionError:
                raise IRError(f"pass '{p.name}' ran out of stack on this input") from None
            self.times.append((p.name, time.perf_counter() - start))
            self.statistics.append((p.pipeline_text(), stats))
            if self.verify_each:
                start = time.perf_counter()
                try:
                    verify(module)
                except IRError as e:
                    raise IRError(f"the IR is invalid after pass '{p.name}' (a bug in irc; please report it): "
                                  f"{e.message}", e.location, e.notes) from None
                self.times.append(("(verify)", time.perf_counter() - start))
            if self.print_after_all or (self.print_after_change and module.print() != before):
                if self.after_pass is not None:
                    self.after_pass(p, module, len(self.statistics))
                    continue
                out.write(f"// -----// IR Dump After {p.pipeline_text()} //----- //\n{module.print()}\n")
        if self.timing:
            self.write_timing(out)
        if self.collect_stats:
            self.write_stats(out)
        return module

    def write_timing(self, out: TextIO) -> None:
        total = sum(t for _, t in self.times) or 1e-12
        out.write("===" + "-" * 60 + "===\n")
        out.write("  Pass execution timing report\n")
        out.write(f"  Total: {total * 1e3:.3f} ms\n")
        out.write("===" + "-" * 60 + "===\n")
        out.write(f"  {'wall (ms)':>10}  {'%':>6}  name\n")
        for name, t in self.times:
            out.write(f"  {t * 1e3:10.3f}  {100 * t / total:5.1f}%  {name}\n")

    def write_stats(self, out: TextIO) -> None:
        out.write("===" + "-" * 60 + "===\n  Pass statistics\n" + "===" + "-" * 60 + "===\n")
        for name, stats in self.statistics:
            out.write(f"{name}\n")
            if not stats:
                out.write("  (no changes)\n")
            for key, value in sorted(stats.counters.items()):
                out.write(f"  {value:8d} {key}\n")


def run(module, pipeline: str, verify_each: bool = True, **kwargs):
    """Run a pipeline on ``module`` in place and return it."""
    from .checks import check_module, check_type

    check_module("irc.passes.run", "module", module)
    check_type("irc.passes.run", "pipeline", pipeline, str)
    check_type("irc.passes.run", "verify_each", verify_each, bool)
    return PassManager.parse(pipeline, verify_each=verify_each, **kwargs).run(module)
