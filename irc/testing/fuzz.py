"""The differential fuzz harness: generated programs through every pass, pipeline and backend.

    python -m irc.testing.fuzz --n 1000 --seed 0 --jobs 2 --out fuzz-out
    python -m irc.testing.fuzz --replay fuzz-out/123-pass:cse.ir

Program ``seed+i`` (``random_program(seed+i, size)``) runs on the reference
interpreter with a few argument lists (``random_arguments``); that is the
oracle.  Then each *configuration* runs it again and must agree:

* ``pass:NAME``  - the program after that one registered pass, on the interpreter (bit-exact);
* ``preset:O1``  - the program after a preset pipeline (``PRESETS``), on the interpreter (bit-exact);
* ``jit:O0``, ``jit:O3`` - compiled for the CPU (``cache=False``, checks and bounds checks on),
  bit-exact except where inexact math (exp, tanh, ...) explains the difference
  (``differential.agrees_within_math_tolerance``).

Outcomes compare as ``irc.testing.differential`` says (NaNs equal, faults by
location).  A configuration that raises anything but an outcome (a pass that
crashes or leaves invalid IR, a compile error) is a *crash*.  Every
disagreement and crash is reduced (``irc.testing.reduce``) to a small program
that still shows it, written to ``OUT/<seed>-<config>.ir`` with the command
that replays it.  The exit status is 1 if anything disagreed or crashed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

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

MAX_STEPS = 200_000
TRIALS = 3
DEFAULT_SIZE = 24
REDUCE_SECONDS = 120.0


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
    """A configuration that disagreed with the oracle (``kind`` 'mismatch') or crashed ('crash')."""

    config: str
    kind: str
    detail: str
    args: list | None = None
    signature: str = ""  # what must persist while reducing: e.g. the exception type of a crash

    def same_as(self, other: Finding | None) -> bool:
        return other is not None and other.kind == self.kind and other.signature == self.signature


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
            cases.append(Case(list(args), interpreter_outcome(module, entry, args, max_steps)))
        except StepLimit:
            continue
    return cases


def _crash(config: str, e: BaseException, args=None) -> Finding:
    from irc.diagnostics import IRError

    if isinstance(e, IRError):
        # A diagnostic from a pass or the compiler on a verified program: a bug in irc all the same.
        return Finding(config, "crash", f"{type(e).__name__}: {e.message}", args,
                       signature=f"IRError:{e.message.split(':')[0][:60]}")
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return Finding(config, "crash", "".join(tb[-6:]).strip(), args, signature=type(e).__name__)


def check(module, config: str, cases: list[Case], entry: str = "main", max_steps: int = MAX_STEPS) -> Finding | None:
    """Run ``cases`` under ``config``; the first disagreement or crash, or None."""
    kind, _, name = config.partition(":")
    if kind in ("pass", "preset"):
        return _check_pipeline(module, config, cases, entry, max_steps)
    if kind == "jit":
        return _check_jit(module, config, int(name.lstrip("O")), cases, entry, max_steps)
    raise ValueError(f"unknown configuration {config!r}")


def _check_pipeline(module, config, cases, entry, max_steps) -> Finding | None:
    import irc.passes  # noqa: F401
    from irc.passmanager import PRESETS
    from irc.passmanager import run as run_pipeline

    kind, _, name = config.partition(":")
    pipeline = PRESETS[name] if kind == "preset" else name
    transformed = module.clone()
    try:
        run_pipeline(transformed, pipeline)
    except Exception as e:  # noqa: BLE001 - any exception from a pass is a finding
        return _crash(config, e)
    for case in cases:
        try:
            got = interpreter_outcome(transformed, entry, case.args, max_steps)
        except StepLimit as e:
            got = Outcome("error", location=("step limit",), message=str(e))
        except Exception as e:  # noqa: BLE001 - the pass left IR the interpreter cannot run
            return _crash(config, e, case.args)
        if not got.same_as(case.expected):
            return Finding(config, "mismatch", f"@{entry}{tuple(case.args)!r}: the interpreter gives "
                           f"{case.expected.describe()}, after {pipeline or '(nothing)'} it gives {got.describe()}",
                           case.args)
    return None


def _check_jit(module, config, level, cases, entry, max_steps) -> Finding | None:
    import irc

    try:
        exe = irc.compile(module, opt_level=level, checks=True, bounds_checks=True, cache=False)
        function = exe[entry]
    except Exception as e:  # noqa: BLE001
        return _crash(config, e)
    inexact = None
    result_types = module.function(entry).function_type.results
    for case in cases:
        try:
            got = jit_outcome(function, case.args)
        except Exception as e:  # noqa: BLE001
            return _crash(config, e, case.args)
        if got.same_as(case.expected):
            continue
        if inexact is None:
            inexact = uses_inexact_math(module)
        if inexact and agrees_within_math_tolerance(got, case.expected,
                                                    perturbed_outcomes(module, entry, case.args, max_steps),
                                                    result_types):
            continue
        return Finding(config, "mismatch", f"@{entry}{tuple(case.args)!r} at -O{level}: the interpreter gives "
                       f"{case.expected.describe()}, the JIT gives {got.describe()}", case.args)
    return None


# -- one program ---------------------------------------------------------------------------------

def fuzz_program(seed: int, size: int = DEFAULT_SIZE, out: str | None = None, trials: int = TRIALS,
                 configs: list[str] | None = None, reduce_seconds: float = REDUCE_SECONDS) -> ProgramReport:
    """Generate program ``seed``, check it under every configuration, reduce and write what disagrees."""
    import irc

    report = ProgramReport(seed)
    text = random_program(seed, size)
    module = irc.parse(text, f"<program {seed}>")
    irc.verify(module)
    cases = oracle_cases(module, [random_arguments(seed, t) for t in range(trials)])
    report.skipped = trials - len(cases)
    if not cases:
        return report
    for config in configs or configurations():
        report.runs += len(cases)
        finding = check(module, config, cases)
        if finding is None:
            continue
        report.findings.append(finding)
        if out is not None:
            report.reproducers.append(str(write_reproducer(seed, text, finding, out, reduce_seconds)))
    return report


def _seed_worker(seed, size, out, trials, reduce_seconds) -> ProgramReport:
    try:
        return fuzz_program(seed, size, out, trials, reduce_seconds=reduce_seconds)
    except Exception as e:  # noqa: BLE001 - the generator or the oracle failed: report, don't stop
        report = ProgramReport(seed)
        report.findings.append(_crash("generate", e))
        return report


# -- reproducers ---------------------------------------------------------------------------------

HEADER = "// irc fuzz reproducer"


def still_disagrees(text: str, finding: Finding, entry: str = "main") -> bool:
    """Whether ``text`` (with ``finding``'s arguments) shows the same disagreement under the same configuration."""
    import irc

    try:
        module = irc.parse(text, "<candidate>")
        irc.verify(module)
    except irc.IRError:
        return False
    cases = oracle_cases(module, [finding.args]) if finding.args is not None else []
    if finding.args is not None and not cases:
        return False
    if finding.kind == "crash" and finding.args is None:
        cases = cases or []
    again = check(module, finding.config, cases, entry)
    return finding.same_as(again)


def write_reproducer(seed: int, text: str, finding: Finding, out: str, reduce_seconds: float = REDUCE_SECONDS) -> Path:
    from .reduce import reduce

    if finding.args is None and finding.kind == "mismatch":
        finding.args = []
    reduced = reduce(text, lambda candidate: still_disagrees(candidate, finding),
                     deadline=time.monotonic() + reduce_seconds,
                     arguments=finding.args)
    path = Path(out) / f"{seed}-{finding.config.replace(':', '-')}.ir"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reproducer_text(seed, reduced, finding, path, original_lines=text.count("\n")))
    return path


def reproducer_text(seed: int, text: str, finding: Finding, path, original_lines: int = 0) -> str:
    lines = [
        f"{HEADER}: program {seed} (random_program({seed}, size)), configuration {finding.config}",
        f"// reproduce: python -m irc.testing.fuzz --replay {path}",
        f"// config: {finding.config}",
        f"// kind: {finding.kind}",
        f"// signature: {finding.signature}",
        f"// args: {json.dumps(finding.args)}",
        f"// reduced from {original_lines} lines to {text.count(chr(10))}",
    ]
    lines += ["// " + line for line in finding.detail.splitlines()]
    return "\n".join(lines) + "\n" + text


def parse_reproducer(text: str) -> tuple[str, Finding]:
    """The program and the finding recorded in a reproducer's header."""
    fields = {}
    for line in text.splitlines():
        if not line.startswith("// "):
            break
        key, sep, value = line[3:].partition(": ")
        if sep and key in ("config", "kind", "signature", "args"):
            fields.setdefault(key, value)
    args = json.loads(fields.get("args", "null"))
    finding = Finding(fields["config"], fields.get("kind", "mismatch"), "", args, fields.get("signature", ""))
    return text, finding


def replay(path: str) -> int:
    """Re-run a reproducer: print what its configuration does now; 1 if it still disagrees."""
    import irc

    text, recorded = parse_reproducer(Path(path).read_text())
    module = irc.parse(text, path)
    irc.verify(module)
    cases = oracle_cases(module, [recorded.args]) if recorded.args is not None else []
    finding = check(module, recorded.config, cases)
    if finding is None:
        print(f"{path}: {recorded.config} agrees with the interpreter now")
        return 0
    print(f"{path}: {finding.config}: {finding.kind}\n{finding.detail}")
    return 1


# -- the campaign --------------------------------------------------------------------------------

def run_campaign(n: int, seed: int, jobs: int = 1, size: int = DEFAULT_SIZE, out: str | None = None,
                 time_limit: float | None = None, trials: int = TRIALS, reduce_seconds: float = REDUCE_SECONDS,
                 progress=None) -> dict:
    """Fuzz programs ``seed .. seed+n-1`` (fewer if ``time_limit`` runs out); a summary dict."""
    start = time.monotonic()
    summary = {"programs": 0, "runs": 0, "skipped": 0, "disagreements": 0, "crashes": 0, "findings": [],
               "reproducers": []}

    def add(report: ProgramReport) -> None:
        summary["programs"] += 1
        summary["runs"] += report.runs
        summary["skipped"] += report.skipped
        for f in report.findings:
            summary["disagreements" if f.kind == "mismatch" else "crashes"] += 1
            summary["findings"].append((report.seed, f.config, f.kind, f.detail.splitlines()[0][:300]))
        summary["reproducers"] += report.reproducers
        if progress is not None:
            progress(report, summary, time.monotonic() - start)

    def out_of_time() -> bool:
        return time_limit is not None and time.monotonic() - start > time_limit

    seeds = list(range(seed, seed + n))
    if jobs <= 1:
        for s in seeds:
            if out_of_time():
                break
            add(_seed_worker(s, size, out, trials, reduce_seconds))
    else:
        pending = iter(seeds)
        while True:
            in_flight = {}
            try:
                with ProcessPoolExecutor(jobs) as pool:
                    for s in pending:
                        in_flight[pool.submit(_seed_worker, s, size, out, trials, reduce_seconds)] = s
                        if len(in_flight) >= 2 * jobs:
                            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                            for fut in done:
                                in_flight.pop(fut)
                                add(fut.result())
                            if out_of_time():
                                break
                    for fut in list(in_flight):
                        add(fut.result())
                        in_flight.pop(fut)
                break
            except BrokenProcessPool:
                # A worker died (the JIT crashed the process): every program in flight is suspect.
                for s in in_flight.values():
                    report = ProgramReport(s)
                    report.findings.append(Finding("process", "crash", "a worker process died"))
                    add(report)
                if out_of_time():
                    break
    summary["time"] = time.monotonic() - start
    return summary


def summary_line(summary: dict) -> str:
    return (f"programs: {summary['programs']}, runs: {summary['runs']}, disagreements: {summary['disagreements']}, "
            f"crashes: {summary['crashes']}, time: {summary['time']:.1f}s")


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
    parser.add_argument("--jobs", type=int, default=1, help="parallel worker processes")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="program size (items in @main)")
    parser.add_argument("--trials", type=int, default=TRIALS, help="argument lists per program")
    parser.add_argument("--out", default="fuzz-out", help="where reduced reproducers go")
    parser.add_argument("--time-limit", type=float, default=None, help="stop starting programs after SECONDS")
    parser.add_argument("--reduce-seconds", type=float, default=REDUCE_SECONDS, help="time budget per reduction")
    parser.add_argument("--progress", type=int, default=0, help="print a progress line every N programs")
    parser.add_argument("--replay", metavar="FILE", help="re-run a reproducer written by an earlier run")
    ns = parser.parse_args(argv)
    if ns.replay:
        return replay(ns.replay)
    seed = default_seed() if ns.seed is None else ns.seed
    print(f"fuzz: seed {seed}, {ns.n} programs, size {ns.size}, {ns.jobs} job(s)", flush=True)

    def progress(report, summary, elapsed):
        for f in report.findings:
            print(f"  program {report.seed}: {f.config}: {f.kind}: {f.detail.splitlines()[0][:300]}", flush=True)
        for r in report.reproducers:
            print(f"  reproducer: {r}", flush=True)
        if ns.progress and summary["programs"] % ns.progress == 0:
            print(f"  ... {summary['programs']} programs, {summary['runs']} runs, {summary['disagreements']} "
                  f"disagreements, {summary['crashes']} crashes, {elapsed:.0f}s", flush=True)

    summary = run_campaign(ns.n, seed, ns.jobs, ns.size, ns.out, ns.time_limit, ns.trials, ns.reduce_seconds,
                           progress)
    print(summary_line(summary), flush=True)
    return 1 if summary["disagreements"] or summary["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
