"""The differential fuzz harness: generated programs through every pass, pipeline and backend.

    python -m irc.testing.fuzz --n 1000 --seed 0 --jobs 2 --out fuzz-out
    python -m irc.testing.fuzz --replay fuzz-out/123-pass:cse.ir

Program ``seed+i`` (``random_program(seed+i, size)``) runs on the reference
interpreter with a few argument lists (``random_arguments``); that is the
oracle.  Then each *configuration* runs it again and must agree:

* ``pass:NAME``  - the program after that one registered pass, on the interpreter (bit-exact;
  the passes in ``APPROXIMATE_PASSES``, which replace math by approximations or by more
  accurate forms, are compared like the JIT);
* ``preset:O1``  - the program after a preset pipeline (``PRESETS``), on the interpreter (bit-exact);
* ``jit:O0``, ``jit:O3`` - compiled for the CPU (``cache=False``, checks and bounds checks on),
  bit-exact except where inexact math (exp, tanh, ...) explains the difference
  (``differential.agrees_within_math_tolerance``).

Outcomes compare as ``irc.testing.differential`` says (NaNs equal, faults by
location).  A configuration that raises anything but an outcome (a pass that
crashes or leaves invalid IR, a compile error) is a *crash*; one that runs past
``--config-timeout`` is a *timeout*, one that allocates past ``--memory-limit``
a *memory* finding.  Every disagreement and crash is reduced
(``irc.testing.reduce``) to a small program that still shows it, written to
``OUT/<seed>-<config>.ir`` with the command that replays it (timeouts and memory
findings are written unreduced).  The exit status is 1 if anything was found.

Programs run in worker processes (``--jobs``, at least one) under the limits of
``irc.testing.limits``; the parent follows each worker's heartbeats, kills a
worker stuck in native code, records the finding and goes on with the rest of
the program in a fresh worker.  A worker that dies of a signal (a segfault, an
abort in ``free``) is a *signal* finding: compiled code must report a fault,
never take the process down.  Workers are replaced every ``--recycle``
programs: LLVM's JIT keeps a little memory for every library it ever linked.

With ``--classes`` (``--classes all``, or some of ``generate_faults.FAULT_CLASSES``)
the programs are ``random_fault_program``s instead: programs built to fault
(sizes that overflow, huge allocas, deep recursion, loops at the type's edge,
bad deallocations, ``out=`` arrays that alias an input), run under
``FAULT_CONFIGS``.  Faults compare by location and kind
(``differential.fault_kind``); where one side reports a resource limit that the
other does not have (``differential.RESOURCE_LIMIT_KINDS``) the difference is a
*limit*: counted, not a failure.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import signal
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .differential import (
    Outcome,
    StepLimit,
    agrees_within_math_tolerance,
    interpreter_outcome,
    jit_outcome,
    perturbed_outcomes,
    uses_inexact_math,
)
from .generate import random_arguments, random_program
from .generate_faults import FAULT_CLASSES, random_fault_program
from .limits import ConfigTimeout, limit_memory, time_limit

MAX_STEPS = 200_000
TRIALS = 3
DEFAULT_SIZE = 24
REDUCE_SECONDS = 120.0
CONFIG_TIMEOUT = 20.0       # seconds per (program, configuration), all argument lists together
MEMORY_LIMIT_MB = 3000      # address space per worker process
RECYCLE = 500               # programs per worker process before a fresh one takes over
REDUCTIONS_PER_KIND = 2     # reduce only the first few findings of each (config, kind, signature, origin)
GRACE = 10.0                # seconds past a limit before the parent kills a worker
MEMO_THRESHOLD = 0.02       # seconds of oracle time above which outcomes are memoised by program

# Passes that change floating-point results on purpose (polynomial approximations, rewrites into
# more accurate forms): compared like the JIT, exactly except where inexact math explains it.
APPROXIMATE_PASSES = ("math-approx", "stabilize")
# Passes that need an option to run at all.  The derivative passes add functions and must leave
# @main as it was (irc.testing.grad_check checks the derivatives themselves); they may refuse a
# program that stores a float to memory, and grad one whose first result is not a float scalar.
PASS_PIPELINES = {"grad": "grad{func=main}", "vjp": "vjp{func=main}", "jvp": "jvp{func=main}"}
DERIVATIVE_REFUSALS = ("cannot be differentiated (it writes a float value", "grad needs a float scalar",
                       "op writes memory: a function differentiated in reverse mode")

# What runs programs of the fault campaign (``--classes``): both JIT levels, the lowering that
# rewrites loops, and the full pipeline (which must keep every fault where it was).  Programs of
# the ``alias`` class name their own configuration (``tensor:out=...``).
FAULT_CONFIGS = ("jit:O0", "jit:O3", "pass:scf-to-cf", "preset:O2")

# Finding kinds that fail a campaign, and the summary's name for each count.
COUNTERS = {"mismatch": "disagreements", "crash": "crashes", "timeout": "timeouts", "memory": "memory",
            "signal": "signals", "limit": "limits"}
ALLOWED = ("limit",)  # counted, but the difference is allowed (see differential.RESOURCE_LIMIT_KINDS)


def configurations() -> list[str]:
    """Every configuration, in the order they run: each pass alone, each preset, the JIT."""
    import irc.passes  # noqa: F401  (registers the passes)
    from irc.passmanager import PASSES, PRESETS

    return ([f"pass:{name}" for name in sorted(PASSES)] + [f"preset:{name}" for name, p in PRESETS.items() if p]
            + ["jit:O0", "jit:O3"])


@dataclass
class Case:
    """One argument list and the interpreter's outcome for it (the oracle)."""

    args: list
    expected: Outcome


@dataclass
class Finding:
    """A configuration that disagreed with the oracle (``kind`` 'mismatch'), crashed ('crash'), ran
    past its time limit ('timeout') or its memory limit ('memory'), killed its worker with a signal
    ('signal'), or differed only by a resource limit of one side ('limit', allowed)."""

    config: str
    kind: str
    detail: str
    args: list | None = None
    signature: str = ""  # what must persist while reducing: e.g. the exception type of a crash
    origin: str = ""     # where a crash was raised (file:function), to tell crashes apart
    cases: list | None = None  # every argument list the configuration ran (timeouts, memory)

    def same_as(self, other: Finding | None) -> bool:
        return other is not None and other.kind == self.kind and other.signature == self.signature

    @property
    def key(self) -> tuple:
        """Findings with the same key are most likely the same defect (reduced only a few times)."""
        return (self.config, self.kind, self.signature, self.origin)


@dataclass
class ProgramReport:
    seed: int
    runs: int = 0
    skipped: int = 0  # argument lists on which the interpreter hit its step limit
    findings: list[Finding] = field(default_factory=list)
    reproducers: list[str] = field(default_factory=list)


# -- checking one configuration ------------------------------------------------------------------

def oracle_cases(module, arguments, entry: str = "main", max_steps: int = MAX_STEPS) -> list[Case]:
    cases = []
    for args in arguments:
        try:
            expected = interpreter_outcome(module, entry, args, max_steps, depth_is_fault=True)
            cases.append(Case(list(args), expected))
        except StepLimit:
            continue
    return cases


def _origin(e: BaseException) -> str:
    """The innermost frame of ``e``'s traceback in irc's own code, as 'dir/file.py:function'."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/irc/testing/" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"{'/'.join(Path(f.filename).parts[-2:])}:{f.name}"


def _crash(config: str, e: BaseException, args=None) -> Finding:
    from irc.diagnostics import IRError

    if isinstance(e, MemoryError):
        return Finding(config, "memory", f"MemoryError: {e}", args, signature="MemoryError", origin=_origin(e))
    if isinstance(e, IRError):
        # A diagnostic from a pass or the compiler on a verified program: a bug in irc all the same.
        return Finding(config, "crash", f"{type(e).__name__}: {e.message}", args,
                       signature=f"IRError:{e.message.split(':')[0][:60]}", origin=_origin(e))
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return Finding(config, "crash", "".join(tb[-6:]).strip(), args, signature=type(e).__name__, origin=_origin(e))


def program_key(module) -> tuple:
    """What the interpreter's outcome depends on: the program's text and every op's source location
    (faults compare by location, and a pass may replace an op by one that prints the same)."""
    return module.print(), tuple((op.loc.line, op.loc.column) for op in module.walk())


def check(module, config: str, cases: list[Case], entry: str = "main", max_steps: int = MAX_STEPS,
          memo: dict | None = None, on_case=None) -> Finding | None:
    """Run ``cases`` under ``config``; the first disagreement or crash, or None.

    ``memo`` maps ``program_key``s to the interpreter's outcomes on ``cases``: a pass whose
    result is a program already run (the input itself, most often) is not interpreted again.
    ``on_case(args)`` hears each argument list before compiled code runs it (so that the parent
    knows which one killed a worker).
    """
    kind, _, name = config.partition(":")
    if kind in ("pass", "preset"):
        return _check_pipeline(module, config, cases, entry, max_steps, memo)
    if kind == "jit":
        return _check_jit(module, config, int(name.lstrip("O")), cases, entry, max_steps, on_case)
    if kind == "tensor" and name.startswith("out="):
        return _check_tensor_out(module, config, name[len("out="):], cases, entry, on_case)
    raise ValueError(f"unknown configuration {config!r}")


def _limit(config: str, case: Case, got: Outcome, where: str) -> Finding | None:
    """A 'limit' finding if ``got`` and the oracle differ only by a resource limit of one side."""
    if got.kind == case.expected.kind == "error" and got.fault_kind == case.expected.fault_kind:
        return None  # the same limit at different ops: a disagreement
    if not (got.is_resource_limit() or case.expected.is_resource_limit()):
        return None
    return Finding(config, "limit", f"{where}: the interpreter gives {case.expected.describe()}, "
                   f"{config} gives {got.describe()}", case.args,
                   signature=(got if got.is_resource_limit() else case.expected).fault_kind)


def _explained_by_math(module, entry: str, case: Case, got: Outcome, max_steps: int) -> bool:
    if not uses_inexact_math(module):
        return False
    result_types = module.function(entry).function_type.results
    return agrees_within_math_tolerance(got, case.expected, perturbed_outcomes(module, entry, case.args, max_steps),
                                        result_types)


def _check_pipeline(module, config, cases, entry, max_steps, memo=None) -> Finding | None:
    import irc.passes  # noqa: F401
    from irc.diagnostics import IRError
    from irc.passmanager import PRESETS
    from irc.passmanager import run as run_pipeline

    kind, _, name = config.partition(":")
    pipeline = PRESETS[name] if kind == "preset" else PASS_PIPELINES.get(name, name)
    approximate = kind == "pass" and name in APPROXIMATE_PASSES
    try:
        transformed = module.clone()
        run_pipeline(transformed, pipeline)
        key = program_key(transformed) if memo is not None else None
    except IRError as e:
        if name in PASS_PIPELINES and any(r in str(e) for r in DERIVATIVE_REFUSALS):
            return None
        return _crash(config, e)
    except Exception as e:  # noqa: BLE001 - any exception from a pass is a finding
        return _crash(config, e)
    known = memo.get(key) if memo is not None else None
    outcomes = []
    for i, case in enumerate(cases):
        if known is not None:
            got = known[i]
        else:
            try:
                got = interpreter_outcome(transformed, entry, case.args, max_steps, depth_is_fault=True)
            except StepLimit as e:
                got = Outcome("error", location=("step limit",), message=str(e))
            except Exception as e:  # noqa: BLE001 - the pass left IR the interpreter cannot run
                return _crash(config, e, case.args)
        outcomes.append(got)
        if got.same_as(case.expected):
            continue
        if approximate and _explained_by_math(module, entry, case, got, max_steps):
            continue
        limit = _limit(config, case, got, f"@{entry}{tuple(case.args)!r}")
        if limit is not None:
            return limit
        return Finding(config, "mismatch", f"@{entry}{tuple(case.args)!r}: the interpreter gives "
                       f"{case.expected.describe()}, after {pipeline or '(nothing)'} it gives {got.describe()}",
                       case.args)
    if memo is not None and known is None:
        memo[key] = outcomes
    return None


def _check_jit(module, config, level, cases, entry, max_steps, on_case=None) -> Finding | None:
    import irc

    try:
        exe = irc.compile(module, opt_level=level, checks=True, bounds_checks=True, cache=False)
        function = exe[entry]
    except Exception as e:  # noqa: BLE001
        return _crash(config, e)
    for case in cases:
        if on_case is not None:
            on_case(case.args)
        try:
            got = jit_outcome(function, case.args)
        except Exception as e:  # noqa: BLE001
            return _crash(config, e, case.args)
        if got.same_as(case.expected) or _explained_by_math(module, entry, case, got, max_steps):
            continue
        limit = _limit(config, case, got, f"@{entry}{tuple(case.args)!r} at -O{level}")
        if limit is not None:
            return limit
        return Finding(config, "mismatch", f"@{entry}{tuple(case.args)!r} at -O{level}: the interpreter gives "
                       f"{case.expected.describe()}, the JIT gives {got.describe()}", case.args)
    return None


def _check_tensor_out(module, config, spec, cases, entry, on_case=None) -> Finding | None:
    """A compiled tensor function called with the ``out=`` arrays ``spec`` names (see
    ``tensor_programs.out_arrays``): overlapping an input must not change the results."""
    import irc

    from . import tensor_programs as tp
    from .differential import _copy_args

    function_type = module.function(entry).function_type
    elem = str(getattr(function_type.inputs[0], "element_type", "f64"))
    try:
        function = irc.compile(module, cache=False)[entry]
    except Exception as e:  # noqa: BLE001
        return _crash(config, e)
    for case in cases:
        if on_case is not None:
            on_case(case.args)
        args = _copy_args(case.args)
        try:
            outs = tp.out_arrays(args, spec, function_type.results)
            results = function(*args, out=outs)
        except Exception as e:  # noqa: BLE001
            if tp.refuses_overlap(e):
                continue  # refusing overlapping arrays is allowed
            return _crash(config, e, case.args)
        results = results if isinstance(results, tuple) else (results,)
        expected = case.expected
        if expected.kind == "error":
            return Finding(config, "mismatch", f"@{entry} with out={spec}: the interpreter gives "
                           f"{expected.describe()}, compiled code gives results", case.args)
        for k, (want, got) in enumerate(zip(expected.results, results, strict=True)):
            if not tp.agree(tp.array_of(want), got, elem):
                return Finding(config, "mismatch", f"@{entry} with out={spec}: result {k} differs from the "
                               f"interpreter's (max error {float(np.nanmax(np.abs(tp.array_of(want) - got))):.3g})",
                               case.args)
    return None


# -- one program ---------------------------------------------------------------------------------

def program_source(seed: int, size: int = DEFAULT_SIZE, trials: int = TRIALS, classes=None):
    """Program ``seed``: its text, its argument lists, its own configurations (None: the campaign's)
    and how to generate it again (for a reproducer's header)."""
    if classes:
        fp = random_fault_program(seed, tuple(classes))
        return (fp.text, fp.arguments[:trials], fp.configs,
                f"random_fault_program({seed}, {tuple(classes)!r}): {fp.fault_class}")
    return (random_program(seed, size), [random_arguments(seed, t) for t in range(trials)], None,
            f"random_program({seed}, size)")

def fuzz_program(seed: int, size: int = DEFAULT_SIZE, out: str | None = None, trials: int = TRIALS,
                 configs: list[str] | None = None, reduce_seconds: float = REDUCE_SECONDS,
                 config_timeout: float | None = None, first_config: int = 0, on_event=None,
                 reduction_counts: dict | None = None,
                 reductions_per_kind: int = REDUCTIONS_PER_KIND, classes=None) -> ProgramReport:
    """Generate program ``seed``, check it under every configuration, reduce and write what was found.

    ``config_timeout`` bounds each configuration (Python code only; see ``irc.testing.limits``);
    ``first_config`` skips the configurations before it (a program resumed in a fresh worker).
    ``on_event(kind, ...)`` hears ('stage', seed, index, config, runs) before each stage,
    ('finding', seed, finding) and ('reproducer', seed, path).  With ``reduction_counts`` (a dict
    kept across programs) only the first ``reductions_per_kind`` findings of each ``Finding.key``
    are reduced; the rest are written as they are.  With ``classes``, the program is
    ``random_fault_program(seed, classes)`` (see ``program_source``), run under ``FAULT_CONFIGS``
    (or ``configs``) or the configurations it names itself; ('case', seed, args) is heard before
    compiled code runs each argument list.
    """
    import irc

    def event(*message):
        if on_event is not None:
            on_event(*message)

    report = ProgramReport(seed)
    text, arguments, own_configs, source = program_source(seed, size, trials, classes)
    module = irc.parse(text, f"<program {seed}>")
    irc.verify(module)
    event("stage", seed, -1, "oracle", 0)
    started = time.perf_counter()
    try:
        with time_limit(config_timeout):
            cases = oracle_cases(module, arguments)
    except ConfigTimeout as e:
        cases, finding = [], Finding("oracle", "timeout", f"the interpreter: {e}", signature="timeout",
                                     cases=arguments)
        _found(report, seed, text, finding, out, 0, config_timeout, event, source)
    report.skipped = len(arguments) - len(cases)
    if not cases:
        return report
    # Printing a program for its key costs about as much as interpreting a typical one: only a
    # program that is slow to interpret gains from not interpreting unchanged configurations again.
    slow = time.perf_counter() - started > MEMO_THRESHOLD
    memo = {program_key(module): [case.expected for case in cases]} if slow else None
    configs = own_configs or configs or (list(FAULT_CONFIGS) if classes else configurations())
    for index in range(first_config, len(configs)):
        config = configs[index]
        report.runs += len(cases)
        event("stage", seed, index, config, report.runs)
        try:
            with time_limit(config_timeout):
                finding = check(module, config, cases, memo=memo, on_case=lambda args: event("case", seed, args))
        except ConfigTimeout as e:
            finding = Finding(config, "timeout", f"{config}: {e}", signature="timeout",
                              cases=[case.args for case in cases])
        except Exception as e:  # noqa: BLE001 - MemoryError, mostly: a finding, not the end of the program
            finding = _crash(config, e)
        if finding is None:
            continue
        if finding.kind in ALLOWED:
            report.findings.append(finding)
            event("finding", seed, finding)
            continue
        reduce_it = finding.kind in ("mismatch", "crash")
        if reduce_it and reduction_counts is not None:
            seen = reduction_counts.get(finding.key, 0)
            reduction_counts[finding.key] = seen + 1
            reduce_it = seen < reductions_per_kind
        event("stage", seed, index, f"reduce {config}", report.runs)
        _found(report, seed, text, finding, out, reduce_seconds if reduce_it else 0, config_timeout, event, source)
    return report


def _found(report: ProgramReport, seed: int, text: str, finding: Finding, out, reduce_seconds, config_timeout,
           event, source: str = "") -> None:
    report.findings.append(finding)
    event("finding", seed, finding)
    if out is None:
        return
    path = write_reproducer(seed, text, finding, out, reduce_seconds, config_timeout, source)
    report.reproducers.append(str(path))
    event("reproducer", seed, str(path))


# -- reproducers ---------------------------------------------------------------------------------

HEADER = "// irc fuzz reproducer"


def still_disagrees(text: str, finding: Finding, entry: str = "main", config_timeout: float | None = None) -> bool:
    """Whether ``text`` (with ``finding``'s arguments) shows the same disagreement under the same configuration."""
    import irc

    if finding.kind == "signal":
        return dies_of_signal(text, finding, entry, config_timeout)

    try:
        module = irc.parse(text, "<candidate>")
        irc.verify(module)
    except irc.IRError:
        return False
    try:
        with time_limit(config_timeout):
            cases = oracle_cases(module, [finding.args]) if finding.args is not None else []
            if finding.args is not None and not cases:
                return False
            again = check(module, finding.config, cases, entry)
    except (ConfigTimeout, MemoryError):
        return False  # a candidate that hangs or blows up shows something else
    return finding.same_as(again)


def dies_of_signal(text: str, finding: Finding, entry: str = "main", config_timeout: float | None = None) -> bool:
    """Whether checking ``text`` under ``finding``'s configuration and arguments kills the process with
    the same signal: run in a forked child, so that this process survives it."""
    import signal as signals

    wanted = getattr(signals, finding.signature, None)
    if wanted is None or not hasattr(os, "fork"):
        return False
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            import faulthandler

            import irc

            faulthandler.disable()  # no traceback dump (pytest's, or -X faulthandler) per candidate
            quiet = os.open(os.devnull, os.O_WRONLY)  # nor glibc's "double free detected"
            os.dup2(quiet, 2)

            signals.alarm(int(config_timeout or CONFIG_TIMEOUT) + 1)  # SIGALRM ends a child that hangs
            module = irc.parse(text, "<candidate>")
            irc.verify(module)
            cases = oracle_cases(module, [finding.args] if finding.args is not None else [])
            if cases:
                check(module, finding.config, cases, entry)
        except BaseException:  # noqa: BLE001 - anything but the signal: not the finding
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == wanted


def write_reproducer(seed: int, text: str, finding: Finding, out: str, reduce_seconds: float = REDUCE_SECONDS,
                     config_timeout: float | None = None, source: str = "") -> Path:
    """Write ``OUT/<seed>-<config>.ir``: first as generated, then (``reduce_seconds`` > 0) reduced."""
    from .reduce import reduce

    if finding.args is None and finding.kind == "mismatch":
        finding.args = []
    path = Path(out) / f"{seed}-{finding.config.replace(':', '-').replace(' ', '-').replace(',', '-')}.ir"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = text.count("\n")
    path.write_text(reproducer_text(seed, text, finding, path, original_lines=lines, source=source))
    reducible = finding.kind in ("mismatch", "crash") or (finding.kind == "signal" and finding.args is not None)
    if reduce_seconds > 0 and reducible:
        reduced = reduce(text, lambda candidate: still_disagrees(candidate, finding, config_timeout=config_timeout),
                         deadline=time.monotonic() + reduce_seconds, arguments=finding.args)
        path.write_text(reproducer_text(seed, reduced, finding, path, original_lines=lines, source=source))
    return path


def _to_json(value):
    """Arguments as JSON: arrays as {"array": dtype, "shape": [...], "data": [...]}."""
    if isinstance(value, np.ndarray):
        return {"array": str(value.dtype), "shape": list(value.shape), "data": value.reshape(-1).tolist()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_json(value):
    if isinstance(value, dict) and "array" in value:
        return np.array(value["data"], dtype=value["array"]).reshape(value["shape"])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def reproducer_text(seed: int, text: str, finding: Finding, path, original_lines: int = 0, source: str = "") -> str:
    lines = [
        f"{HEADER}: program {seed} ({source or f'random_program({seed}, size)'}), configuration {finding.config}",
        f"// reproduce: python -m irc.testing.fuzz --replay {path}",
        f"// config: {finding.config}",
        f"// kind: {finding.kind}",
        f"// signature: {finding.signature}",
        f"// args: {json.dumps(_to_json(finding.args))}",
    ]
    if finding.cases is not None:
        lines.append(f"// cases: {json.dumps(_to_json(finding.cases))}")
    lines.append(f"// reduced from {original_lines} lines to {text.count(chr(10))}")
    lines += ["// " + line for line in finding.detail.splitlines()]
    return "\n".join(lines) + "\n" + text


def parse_reproducer(text: str) -> tuple[str, Finding]:
    """The program and the finding recorded in a reproducer's header."""
    fields = {}
    for line in text.splitlines():
        if not line.startswith("// "):
            break
        key, sep, value = line[3:].partition(": ")
        if sep and key in ("config", "kind", "signature", "args", "cases"):
            fields.setdefault(key, value)
    args = _from_json(json.loads(fields.get("args", "null")))
    cases = _from_json(json.loads(fields["cases"])) if "cases" in fields else None
    finding = Finding(fields["config"], fields.get("kind", "mismatch"), "", args, fields.get("signature", ""),
                      cases=cases)
    return text, finding


def replay(path: str, config_timeout: float | None = CONFIG_TIMEOUT, imports: tuple[str, ...] = ()) -> int:
    """Re-run a reproducer: print what its configuration does now; 1 if it still disagrees.

    A timeout, memory or signal finding replays in a child process under the campaign's limits,
    since what hung may have hung in native code, out of reach of the alarm, and what killed a
    worker would kill this process.
    """
    _, recorded = parse_reproducer(Path(path).read_text())
    if recorded.kind not in ("timeout", "memory", "signal"):
        return _replay_here(path, config_timeout)
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_replay_child, args=(path, config_timeout, MEMORY_LIMIT_MB, imports))
    child.start()
    child.join(None if config_timeout is None else config_timeout + GRACE)
    if child.is_alive():
        child.kill()
        child.join()
        print(f"{path}: {recorded.config}: timeout\nno result after {config_timeout + GRACE:g} s (killed)")
        return 1
    if child.exitcode is not None and child.exitcode < 0:
        print(f"{path}: {recorded.config}: signal\nthe process died of {_signal_name(-child.exitcode)}")
    return 0 if child.exitcode == 0 else 1


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _replay_child(path: str, config_timeout: float | None, memory_limit: int | None, imports) -> None:
    limit_memory(memory_limit)
    for name in imports:
        importlib.import_module(name)
    sys.exit(_replay_here(path, config_timeout))


def _replay_here(path: str, config_timeout: float | None) -> int:
    import irc

    text, recorded = parse_reproducer(Path(path).read_text())
    module = irc.parse(text, path)
    irc.verify(module)
    arguments = recorded.cases if recorded.cases is not None else [recorded.args]
    try:
        with time_limit(config_timeout):
            cases = oracle_cases(module, arguments) if recorded.args is not None or recorded.cases else []
            # An 'oracle' finding is the interpreter's own (it hung): running it again is the check.
            finding = None if recorded.config == "oracle" else check(module, recorded.config, cases)
    except ConfigTimeout as e:
        finding = Finding(recorded.config, "timeout", str(e))
    except MemoryError as e:
        finding = _crash(recorded.config, e)
    if finding is None:
        print(f"{path}: {recorded.config} agrees with the interpreter now")
        return 0
    print(f"{path}: {finding.config}: {finding.kind}\n{finding.detail}")
    return 1


# -- the campaign --------------------------------------------------------------------------------

@dataclass
class Settings:
    """What every worker needs to know (picklable: it goes to each worker process)."""

    size: int = DEFAULT_SIZE
    out: str | None = None
    trials: int = TRIALS
    reduce_seconds: float = REDUCE_SECONDS
    config_timeout: float | None = CONFIG_TIMEOUT
    memory_limit: int | None = MEMORY_LIMIT_MB
    recycle: int = RECYCLE
    reductions_per_kind: int = REDUCTIONS_PER_KIND
    configs: list[str] | None = None
    imports: tuple[str, ...] = ()  # modules each worker imports first (extra passes to fuzz)
    grace: float = GRACE
    classes: tuple[str, ...] | None = None  # fault classes: the fault campaign (random_fault_program)


def _worker_main(conn, settings: Settings) -> None:
    """A worker process: programs in, heartbeats and findings out, until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the parent's to handle
    limit_memory(settings.memory_limit)
    for name in settings.imports:
        importlib.import_module(name)
    configs = settings.configs or (list(FAULT_CONFIGS) if settings.classes else configurations())
    # Everything alive now (modules, grammar tables, registries) lives as long as the worker:
    # keep the cyclic collector from scanning it again and again (about 7% faster).
    gc.collect()
    gc.freeze()
    try:
        _serve(conn, settings, configs)
    except (BrokenPipeError, EOFError):
        return  # the parent is gone


def _serve(conn, settings: Settings, configs: list[str]) -> None:
    while True:
        task = conn.recv()
        if task is None:
            return
        seed, first_config, counts, pending = task
        if pending is not None:
            # A finding whose worker died (a signal): reduce it here, each candidate in a forked child.
            conn.send(("stage", seed, first_config - 1, f"reduce {pending.config}", 0))
            text, _, _, source = program_source(seed, settings.size, settings.trials, settings.classes)
            write_reproducer(seed, text, pending, settings.out, settings.reduce_seconds, settings.config_timeout,
                             source)  # the same file as the unreduced one, already listed
        try:
            report = fuzz_program(seed, settings.size, settings.out, settings.trials, configs,
                                  settings.reduce_seconds, settings.config_timeout, first_config,
                                  lambda *message: conn.send(message), counts, settings.reductions_per_kind,
                                  settings.classes)
        except Exception as e:  # noqa: BLE001 - the generator or the parser failed: report, don't stop
            report = ProgramReport(seed)
            conn.send(("finding", seed, _crash("generate", e)))
        conn.send(("done", seed, report.runs, report.skipped))


class _Worker:
    """One worker process, and what it is doing now (from its heartbeats)."""

    def __init__(self, context, settings: Settings):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, settings), daemon=True)
        self.process.start()
        child.close()
        self.report: ProgramReport | None = None  # the program in hand
        self.base_runs = 0     # runs of this program done by earlier workers
        self.stage = (-1, "start")
        self.stage_runs = 0
        self.deadline: float | None = None
        self.programs = 0
        self.case = None  # the argument list compiled code is running now
        self.tainted = False  # compiled code disagreed here: it may have damaged the heap

    def assign(self, report: ProgramReport, first_config: int, counts: dict, settings: Settings,
               pending: Finding | None = None) -> None:
        self.report, self.base_runs, self.stage, self.stage_runs = report, report.runs, (-1, "start"), 0
        self.case = None
        # Starting up (imports), and reducing a finding the last worker left, if any.
        self.deadline = time.monotonic() + 120 + (settings.config_timeout or 0) \
            + (settings.reduce_seconds if pending is not None else 0)
        self.conn.send((report.seed, first_config, counts, pending))

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(5)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def run_campaign(n: int, seed: int, jobs: int = 1, size: int = DEFAULT_SIZE, out: str | None = None,
                 time_limit: float | None = None, trials: int = TRIALS, reduce_seconds: float = REDUCE_SECONDS,
                 progress=None, config_timeout: float | None = CONFIG_TIMEOUT,
                 memory_limit: int | None = MEMORY_LIMIT_MB, recycle: int = RECYCLE,
                 reductions_per_kind: int = REDUCTIONS_PER_KIND, configs: list[str] | None = None,
                 imports: tuple[str, ...] = (), grace: float = GRACE, classes=None) -> dict:
    """Fuzz programs ``seed .. seed+n-1`` (fewer if ``time_limit`` runs out); a summary dict.

    ``jobs`` worker processes (``jobs=0``: in this process, with the Python-level time limit
    only and no memory limit).  Each worker imports ``imports`` first: modules that register
    extra passes to fuzz (this process does not; name their configurations in ``configs``).
    ``classes`` (fault classes, see ``generate_faults``): the fault campaign.  Findings of an
    allowed kind (``limit``) are counted and listed in ``summary["limit_findings"]``, not in
    ``summary["findings"]``.
    """
    start = time.monotonic()
    summary = {"programs": 0, "runs": 0, "skipped": 0, **{name: 0 for name in COUNTERS.values()},
               "findings": [], "limit_findings": [], "reproducers": [], "by_class": {}}

    def add(report: ProgramReport) -> None:
        summary["programs"] += 1
        summary["runs"] += report.runs
        summary["skipped"] += report.skipped
        if classes:
            from .generate_faults import fault_class

            tally = summary["by_class"].setdefault(fault_class(report.seed, tuple(classes)), {})
            tally["programs"] = tally.get("programs", 0) + 1
            for f in report.findings:
                tally[COUNTERS[f.kind]] = tally.get(COUNTERS[f.kind], 0) + 1
        for f in report.findings:
            summary[COUNTERS[f.kind]] += 1
            where = "limit_findings" if f.kind in ALLOWED else "findings"
            summary[where].append((report.seed, f.config, f.kind, f.detail.splitlines()[0][:300]))
        summary["reproducers"] += report.reproducers
        if progress is not None:
            progress(report, summary, time.monotonic() - start)

    def out_of_time() -> bool:
        return time_limit is not None and time.monotonic() - start > time_limit

    settings = Settings(size, out, trials, reduce_seconds, config_timeout, memory_limit, recycle,
                        reductions_per_kind, configs, tuple(imports), grace, tuple(classes) if classes else None)
    try:
        if jobs <= 0:
            counts: dict = {}
            for s in range(seed, seed + n):
                if out_of_time():
                    break
                try:
                    add(fuzz_program(s, size, out, trials, configs, reduce_seconds, config_timeout,
                                     reduction_counts=counts, reductions_per_kind=reductions_per_kind,
                                     classes=settings.classes))
                except Exception as e:  # noqa: BLE001
                    report = ProgramReport(s)
                    report.findings.append(_crash("generate", e))
                    add(report)
        else:
            _run_workers(range(seed, seed + n), jobs, settings, add, out_of_time)
    except KeyboardInterrupt:  # ^C, or SIGTERM (see main): the summary of what finished
        summary["interrupted"] = True
    summary["time"] = time.monotonic() - start
    return summary


def _run_workers(seeds, jobs: int, settings: Settings, add, out_of_time) -> None:
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no LLVM state inherited
    fresh = iter(seeds)
    resumed: deque = deque()  # (report, first_config): programs whose worker was killed
    counts: dict = {}         # Finding.key -> how many seen (the first few are reduced)
    workers = [_Worker(context, settings) for _ in range(jobs)]

    def budget(stage: str) -> float | None:
        if settings.config_timeout is None:
            return None
        extra = settings.reduce_seconds if stage.startswith("reduce") else 0.0
        return settings.config_timeout + extra + settings.grace

    def lost(w: _Worker, kind: str, detail: str, signature: str = "") -> None:
        """``w`` was killed or died: record it and resume the program after the stage it was in."""
        report, (index, stage) = w.report, w.stage
        report.runs = w.base_runs + w.stage_runs
        pending = None
        if stage.startswith("reduce ") and report.findings:
            # The finding is recorded and written (unreduced); a candidate program hung the reducer.
            report.findings[-1].detail += f"\n(not reduced: {detail} while reducing)"
        else:
            text, arguments, _, source = program_source(report.seed, settings.size, settings.trials, settings.classes)
            if stage == "start":
                detail += " before the program started (damage left by the worker's previous program?)"
            finding = Finding(stage, kind, f"{stage}: {detail}", w.case, signature=signature or kind,
                              cases=arguments)
            report.findings.append(finding)
            seen = counts.get(finding.key, 0)
            counts[finding.key] = seen + 1
            if settings.out is not None:
                path = write_reproducer(report.seed, text, finding, settings.out, 0, source=source)
                report.reproducers.append(str(path))
                if kind == "signal" and w.case is not None and index >= 0 and seen < settings.reductions_per_kind:
                    pending = finding  # the next worker reduces it (into the same file)
        if index >= 0:
            resumed.append((report, index + 1, pending))
        else:
            add(report)
        w.report = None

    def replace(w: _Worker) -> _Worker:
        new = _Worker(context, settings)
        workers[workers.index(w)] = new
        return new

    try:
        while True:
            for w in workers:
                if w.report is not None:
                    continue
                # In the fault campaign, compiled code that disagreed may have damaged the heap
                # silently (a double free that did not abort): the next program gets a fresh worker,
                # so that a later crash is not blamed on it.
                if w.programs >= settings.recycle or (settings.classes and w.tainted):
                    w.stop()
                    w = replace(w)
                if resumed:
                    report, first, pending = resumed.popleft()
                    w.assign(report, first, dict(counts), settings, pending)
                    continue
                s = None if out_of_time() else next(fresh, None)
                if s is not None:
                    w.assign(ProgramReport(s), 0, dict(counts), settings)
            busy = [w for w in workers if w.report is not None]
            if not busy:
                break
            deadlines = [w.deadline for w in busy if w.deadline is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout)
            now = time.monotonic()
            for w in busy:
                if w.conn in ready or w.process.sentinel in ready:
                    _drain(w, now, budget, counts, add)
                if w.report is None:
                    continue
                if not w.process.is_alive():
                    _drain(w, now, budget, counts, add)
                    if w.report is None:
                        continue
                    code = w.process.exitcode
                    w.kill()
                    # Killed by someone else (the kernel's OOM killer): out of memory.  Any other signal
                    # (SIGSEGV, SIGABRT from free, SIGBUS...) is compiled code taking the process down.
                    if code == -signal.SIGKILL:
                        lost(w, "memory", f"the worker process died (exit code {code})")
                    elif code is not None and code < 0:
                        name = _signal_name(-code)
                        lost(w, "signal", f"the worker process died of {name}"
                                          + (f" running {_to_json(w.case)!r}" if w.case is not None else ""), name)
                    else:
                        lost(w, "crash", f"the worker process died (exit code {code})")
                    replace(w)
                elif w.deadline is not None and now > w.deadline:
                    w.kill()
                    lost(w, "timeout", f"no result after {now - w.deadline + (budget(w.stage[1]) or 0):.0f} s "
                                       "(the worker was killed)")
                    replace(w)
    finally:
        for w in workers:
            w.stop()


def _drain(w: _Worker, now: float, budget, counts: dict, add) -> None:
    """Read every message ``w`` has sent."""
    while w.report is not None:
        try:
            if not w.conn.poll():
                return
            message = w.conn.recv()
        except (EOFError, OSError):
            return
        kind, seed = message[0], message[1]
        report = w.report
        if seed != report.seed:
            continue
        if kind == "stage":
            _, _, index, stage, runs = message
            w.stage, w.stage_runs, w.case = (index, stage), runs, None
            limit = budget(stage)
            w.deadline = None if limit is None else now + limit
        elif kind == "case":
            w.case = message[2]
        elif kind == "finding":
            finding = message[2]
            report.findings.append(finding)
            if finding.kind not in ALLOWED:
                counts[finding.key] = counts.get(finding.key, 0) + 1
                w.tainted = True
        elif kind == "reproducer":
            report.reproducers.append(message[2])
        elif kind == "done":
            report.runs = w.base_runs + message[2]
            report.skipped = message[3]
            w.report = None
            w.programs += 1
            add(report)


def summary_line(summary: dict) -> str:
    return (f"programs: {summary['programs']}, runs: {summary['runs']}, disagreements: {summary['disagreements']}, "
            f"crashes: {summary['crashes']}, timeouts: {summary['timeouts']}, memory: {summary['memory']}, "
            f"signals: {summary['signals']}, limits: {summary['limits']} (allowed), "
            f"time: {summary['time']:.1f}s" + (" (interrupted)" if summary.get("interrupted") else ""))


def failures(summary: dict) -> int:
    """How many findings fail the campaign (every kind but the allowed ones)."""
    return sum(summary[name] for kind, name in COUNTERS.items() if kind not in ALLOWED)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def default_seed() -> int:
    """The current git commit's hash as a seed (so CI failures reproduce), else 0."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
        return int(head[:8], 16) if head else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m irc.testing.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="number of programs")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: from the git commit)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes (0: run in this process, without the memory limit)")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="program size (items in @main)")
    parser.add_argument("--trials", type=int, default=TRIALS, help="argument lists per program")
    parser.add_argument("--out", default="fuzz-out", help="where reproducers go")
    parser.add_argument("--time-limit", type=float, default=None, help="stop starting programs after SECONDS")
    parser.add_argument("--config-timeout", type=float, default=CONFIG_TIMEOUT,
                        help="time limit per (program, configuration) in seconds; 0: none")
    parser.add_argument("--memory-limit", type=int, default=MEMORY_LIMIT_MB,
                        help="address-space limit per worker process in MiB; 0: none")
    parser.add_argument("--recycle", type=int, default=RECYCLE, help="programs per worker process")
    parser.add_argument("--reduce-seconds", type=float, default=REDUCE_SECONDS, help="time budget per reduction")
    parser.add_argument("--reductions", type=int, default=REDUCTIONS_PER_KIND,
                        help="reduce only the first N findings of each kind (per configuration and signature)")
    parser.add_argument("--configs", default=None,
                        help="comma-separated configurations to run (default: all; see configurations())")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE first, in every worker (a module that registers extra passes)")
    parser.add_argument("--classes", default=None,
                        help="the fault campaign: comma-separated fault classes, or 'all' "
                             f"({', '.join(FAULT_CLASSES)})")
    parser.add_argument("--grace", type=float, default=GRACE,
                        help="seconds past a configuration's limit before its worker is killed")
    parser.add_argument("--progress", type=int, default=0, help="print a progress line every N programs")
    parser.add_argument("--replay", metavar="FILE", help="re-run a reproducer written by an earlier run")
    ns = parser.parse_args(argv)
    for name in ns.imports:
        importlib.import_module(name)
    if ns.replay:
        return replay(ns.replay, ns.config_timeout or None, tuple(ns.imports))
    seed = default_seed() if ns.seed is None else ns.seed
    configs = ns.configs.split(",") if ns.configs else None
    unknown = sorted(set(configs or ()) - set(configurations()))
    if unknown:
        parser.error(f"unknown configurations: {', '.join(unknown)}")
    classes = None
    if ns.classes:
        classes = FAULT_CLASSES if ns.classes == "all" else tuple(ns.classes.split(","))
        wrong = sorted(set(classes) - set(FAULT_CLASSES))
        if wrong:
            parser.error(f"unknown fault classes: {', '.join(wrong)} (known: {', '.join(FAULT_CLASSES)})")
    default_configs = list(FAULT_CONFIGS) if classes else configurations()
    print(f"fuzz: seed {seed}, {ns.n} programs, "
          + (f"fault classes {','.join(classes)}" if classes else f"size {ns.size}") + f", {ns.jobs} job(s), "
          f"{len(configs or default_configs)} configurations, limits {ns.config_timeout:g} s per configuration, "
          f"{ns.memory_limit} MiB per worker", flush=True)

    def progress(report, summary, elapsed):
        for f in report.findings:
            if f.kind in ALLOWED:
                continue
            print(f"  program {report.seed}: {f.config}: {f.kind}: {f.detail.splitlines()[0][:300]}", flush=True)
        for r in report.reproducers:
            print(f"  reproducer: {r}", flush=True)
        if ns.progress and summary["programs"] % ns.progress == 0:
            print(f"  ... {summary['programs']} programs, {summary['runs']} runs, {summary['disagreements']} "
                  f"disagreements, {summary['crashes']} crashes, {summary['timeouts']} timeouts, "
                  f"{summary['memory']} memory, {summary['signals']} signals, {summary['limits']} limits, "
                  f"{elapsed:.0f}s", flush=True)

    signal.signal(signal.SIGTERM, _interrupt)  # kill PID: stop the workers, print the summary
    summary = run_campaign(ns.n, seed, ns.jobs, ns.size, ns.out, ns.time_limit, ns.trials, ns.reduce_seconds,
                           progress, ns.config_timeout or None, ns.memory_limit or None, max(1, ns.recycle),
                           ns.reductions, configs, tuple(ns.imports), ns.grace, classes)
    for name, tally in sorted(summary["by_class"].items()):
        print(f"  class {name}: " + ", ".join(f"{k} {v}" for k, v in tally.items()), flush=True)
    print(summary_line(summary), flush=True)
    return 1 if failures(summary) else 0


if __name__ == "__main__":
    sys.exit(main())
