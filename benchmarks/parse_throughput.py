#!/usr/bin/env python3
"""Parse / verify / print / canonicalize throughput of irc, side by side with mlir-opt.

Generates seeded modules of about 1k, 10k and 100k ops -- straight-line integer
and float arithmetic with duplicate subexpressions and foldable constants,
``scf.for`` loops with iter_args, and ``cf`` diamonds joined by ``cf.phi`` --
split across functions of a few hundred to a few thousand ops, and reports
in-process ops/s for each stage:

* parse             ``irc.parse(text)``
* verify            ``irc.verify(module)``
* print             ``str(module)``
* parse+verify+print, the three in sequence (each repetition times all three)
* canonicalize,dce  ``irc.passes.run(module, "canonicalize,dce", verify_each=False)``

as medians over several repetitions (fewer for the largest module), the
linearity ratio (throughput at 100k / throughput at 10k) and a pass/fail line
against the targets of issue 2 (parse+verify+print at 100k ops >= 30,000 ops/s,
ratio >= 0.8).

Where ``mlir-opt-22`` (or ``--mlir-opt PATH``) is available, the same programs
are written in upstream MLIR syntax (block arguments instead of phis) and
``mlir-opt FILE -o /dev/null`` (parse+verify+print) and ``mlir-opt FILE
--canonicalize -o /dev/null`` are timed as subprocess wall time minus the time
of mlir-opt on an empty file (process start-up), single-threaded
(``--mlir-disable-threading``) unless ``--mlir-threading`` is given.

Ops are counted the same way in both: every operation inside function bodies
(terminators, ``scf.yield`` and ``scf.for`` included), not ``func.func`` or the
module; ``cf.phi`` ops count in irc (MLIR has no phis, so its count is lower by
the number of phis).

    python benchmarks/parse_throughput.py                 # 1k, 10k, 100k
    python benchmarks/parse_throughput.py --quick         # smoke test, a few seconds
    python benchmarks/parse_throughput.py --sizes 10000 --repeat 7 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

TARGET_OPS_PER_S = 30_000
TARGET_LINEARITY = 0.8
DEFAULT_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (300, 1_000)
SEED = 20240602

INT_BINARY = ("addi", "subi", "muli", "andi", "ori", "xori", "maxsi", "minsi", "maxui", "minui")
FLOAT_BINARY = ("addf", "subf", "mulf", "divf", "maximumf", "minimumf")
MATH_UNARY = ("absf", "sqrt", "exp", "tanh", "floor")
CMPI = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ugt")
CMPF = ("oeq", "one", "olt", "ole", "ogt", "oge", "ult", "ord")
INT_CONSTANTS = (0, 1, 1, 2, 3, 7, 42, -1, 100)
FLOAT_CONSTANTS = ("0.0", "1.0", "1.0", "0.5", "2.0", "-3.25", "1.0e-03")


# ---- the program generator ---------------------------------------------------------------


@dataclass
class Program:
    """One generated module, in irc's syntax and in upstream MLIR's."""

    size: int  # the requested size
    irc: str
    mlir: str
    ops: int  # ops in function bodies, phis included (irc's count)
    phis: int
    functions: int
    counts: dict = field(default_factory=dict)  # op name -> count (irc)

    @property
    def mlir_ops(self) -> int:
        return self.ops - self.phis


class _FunctionGen:
    """Emits one function twice: irc (phis) and MLIR (block arguments)."""

    def __init__(self, rng: random.Random, name: str, budget: int, counts: dict):
        self.rng = rng
        self.name = name
        self.budget = budget
        self.counts = counts
        self.irc: list[str] = []
        self.mlir: list[str] = []
        self.ops = 0
        self.phis = 0
        self.next_value = 0
        self.next_block = 0
        self.indent = 2
        self.label: str | None = None  # the current block's label (None: the entry block)
        self.ints = ["%a", "%b"]
        self.floats = ["%x", "%y"]
        self.bools: list[str] = []
        self.memo: list[tuple[str, str]] = []  # (right-hand side, kind) of earlier ops in scope

    # -- emission helpers
    def both(self, line: str, indent: int) -> None:
        text = " " * indent + line
        self.irc.append(text)
        self.mlir.append(text)

    def count(self, line: str) -> None:
        rhs = line.split(" = ", 1)[-1]
        name = rhs.split(" ", 1)[0]
        self.counts[name] = self.counts.get(name, 0) + 1
        self.ops += 1

    def fresh(self) -> str:
        self.next_value += 1
        return f"%v{self.next_value}"

    def new_label(self) -> str:
        self.next_block += 1
        return f"^bb{self.next_block}"

    def pool(self, kind: str) -> list[str]:
        return {"i64": self.ints, "f64": self.floats, "i1": self.bools}[kind]

    def op(self, rhs: str, kind: str, indent: int, memo: bool = True) -> str:
        name = self.fresh()
        line = f"{name} = {rhs}"
        self.both(line, indent)
        self.count(line)
        self.pool(kind).append(name)
        if memo:
            self.memo.append((rhs, kind))
        return name

    def stmt(self, line: str, indent: int) -> None:
        self.both(line, indent)
        self.count(line)

    def mark(self) -> tuple[int, int, int, int]:
        return len(self.ints), len(self.floats), len(self.bools), len(self.memo)

    def restore(self, mark: tuple[int, int, int, int]) -> None:
        del self.ints[mark[0]:]
        del self.floats[mark[1]:]
        del self.bools[mark[2]:]
        del self.memo[mark[3]:]

    def pick(self, kind: str) -> str:
        """A value of ``kind`` in scope, biased towards recent ones (chains of uses)."""
        pool = self.pool(kind)
        if not pool:
            if kind == "i1":
                return self.cmp(self.indent)
            raise AssertionError(kind)
        if self.rng.random() < 0.7:
            return pool[-1 - min(int(self.rng.expovariate(1 / 6)), len(pool) - 1)]
        return self.rng.choice(pool)

    def cmp(self, indent: int) -> str:
        if self.rng.random() < 0.6:
            pred = self.rng.choice(CMPI)
            return self.op(f"arith.cmpi {pred}, {self.pick('i64')}, {self.pick('i64')} : i64", "i1", indent)
        pred = self.rng.choice(CMPF)
        return self.op(f"arith.cmpf {pred}, {self.pick('f64')}, {self.pick('f64')} : f64", "i1", indent)

    # -- straight-line arithmetic
    def arith(self, indent: int) -> None:
        rng = self.rng
        r = rng.random()
        if r < 0.10 and self.memo:  # a duplicate subexpression, for CSE-like folding
            rhs, kind = rng.choice(self.memo[-40:])
            self.op(rhs, kind, indent, memo=False)
        elif r < 0.20:
            if rng.random() < 0.6:
                self.op(f"arith.constant {rng.choice(INT_CONSTANTS)} : i64", "i64", indent)
            else:
                self.op(f"arith.constant {rng.choice(FLOAT_CONSTANTS)} : f64", "f64", indent)
        elif r < 0.26:  # an identity the canonicalizer removes: x + 0, x * 1, x - x, x ^ x
            x = self.pick("i64")
            kind = rng.randrange(4)
            if kind == 0:
                c = self.op("arith.constant 0 : i64", "i64", indent)
                self.op(f"arith.addi {x}, {c} : i64", "i64", indent)
            elif kind == 1:
                c = self.op("arith.constant 1 : i64", "i64", indent)
                self.op(f"arith.muli {c}, {x} : i64", "i64", indent)
            elif kind == 2:
                self.op(f"arith.subi {x}, {x} : i64", "i64", indent)
            else:
                self.op(f"arith.xori {x}, {x} : i64", "i64", indent)
        elif r < 0.30:  # constant folding: an op of two constants
            c1 = self.op(f"arith.constant {rng.choice(INT_CONSTANTS)} : i64", "i64", indent)
            c2 = self.op(f"arith.constant {rng.choice(INT_CONSTANTS)} : i64", "i64", indent)
            self.op(f"arith.{rng.choice(('addi', 'muli', 'subi'))} {c1}, {c2} : i64", "i64", indent)
        elif r < 0.56:
            op = rng.choice(INT_BINARY)
            self.op(f"arith.{op} {self.pick('i64')}, {self.pick('i64')} : i64", "i64", indent)
        elif r < 0.76:
            op = rng.choice(FLOAT_BINARY)
            self.op(f"arith.{op} {self.pick('f64')}, {self.pick('f64')} : f64", "f64", indent)
        elif r < 0.83:
            self.cmp(indent)
        elif r < 0.89:
            c = self.pick("i1")
            if rng.random() < 0.6:
                self.op(f"arith.select {c}, {self.pick('i64')}, {self.pick('i64')} : i64", "i64", indent)
            else:
                self.op(f"arith.select {c}, {self.pick('f64')}, {self.pick('f64')} : f64", "f64", indent)
        elif r < 0.95:
            if rng.random() < 0.6:
                self.op(f"arith.sitofp {self.pick('i64')} : i64 to f64", "f64", indent)
            else:
                self.op(f"arith.fptosi {self.pick('f64')} : f64 to i64", "i64", indent)
        else:
            self.op(f"math.{rng.choice(MATH_UNARY)} {self.pick('f64')} : f64", "f64", indent)

    def straight(self, n: int, indent: int) -> None:
        self.indent = indent
        start = self.ops
        while self.ops - start < n:
            self.arith(indent)

    # -- scf.for with iter_args
    def loop(self, indent: int) -> None:
        rng = self.rng
        lb = self.op("arith.constant 0 : index", "i64", indent, memo=False)
        self.ints.pop()  # index values are not i64
        if rng.random() < 0.5:
            ub = self.op(f"arith.constant {rng.choice((4, 8, 16, 100))} : index", "i64", indent, memo=False)
        else:
            ub = self.op(f"arith.index_cast {self.pick('i64')} : i64 to index", "i64", indent, memo=False)
        self.ints.pop()
        step = self.op(f"arith.constant {rng.choice((1, 1, 2))} : index", "i64", indent, memo=False)
        self.ints.pop()
        carried = [("i64", self.pick("i64"))]
        if rng.random() < 0.5:
            carried.append(("f64", self.pick("f64")))
        if rng.random() < 0.25:
            carried.append(("i64", self.pick("i64")))
        results = self.fresh()
        iv = self.fresh()
        args = [self.fresh() for _ in carried]
        types = ", ".join(k for k, _ in carried)
        iters = ", ".join(f"{a} = {init}" for a, (_, init) in zip(args, carried, strict=True))
        defs = results if len(carried) == 1 else f"{results}:{len(carried)}"
        header = f"{defs} = scf.for {iv} = {lb} to {ub} step {step} iter_args({iters}) -> ({types}) {{"
        self.both(header, indent)
        self.count(header)
        mark = self.mark()
        for a, (kind, _) in zip(args, carried, strict=True):
            self.pool(kind).append(a)
        self.op(f"arith.index_cast {iv} : index to i64", "i64", indent + 2)
        self.straight(rng.randint(4, 24), indent + 2)
        yielded = [self.pick(kind) for kind, _ in carried]
        self.stmt(f"scf.yield {', '.join(yielded)} : {types}", indent + 2)
        self.restore(mark)
        self.both("}", indent)
        self.indent = indent
        if len(carried) == 1:
            self.ints.append(results)
        else:
            for i, (kind, _) in enumerate(carried):
                self.pool(kind).append(f"{results}#{i}")

    # -- cf diamonds joined by phis (block arguments in MLIR)
    def diamond(self, depth: int) -> None:
        rng = self.rng
        cond = self.pick("i1") if self.bools and rng.random() < 0.5 else self.cmp(2)
        then_label, else_label, join = self.new_label(), self.new_label(), self.new_label()
        self.stmt(f"cf.cond_br {cond}, {then_label}, {else_label}", 2)
        kinds = ["i64"] + (["f64"] if rng.random() < 0.6 else []) + (["i64"] if rng.random() < 0.2 else [])
        incoming = []
        for label in (then_label, else_label):
            self.both(f"{label}:", 0)
            self.label = label
            mark = self.mark()
            self.body(rng.randint(2, 20), depth + 1)
            values = [self.pick(kind) for kind in kinds]
            incoming.append((self.label, values))
            self.stmt(f"cf.br {join}", 2)
            self.mlir[-1] = f"  cf.br {join}({', '.join(values)} : {', '.join(kinds)})"
            self.restore(mark)
        phis = [self.fresh() for _ in kinds]
        self.irc.append(f"{join}:")
        self.mlir.append(f"{join}({', '.join(f'{p}: {k}' for p, k in zip(phis, kinds, strict=True))}):")
        self.label = join
        for i, (phi, kind) in enumerate(zip(phis, kinds, strict=True)):
            ins = ", ".join(f"[{values[i]}, {pred}]" for pred, values in incoming)
            self.irc.append(f"  {phi} = cf.phi {ins} : {kind}")
            self.counts["cf.phi"] = self.counts.get("cf.phi", 0) + 1
            self.ops += 1
            self.phis += 1
            self.pool(kind).append(phi)

    def body(self, n: int, depth: int) -> None:
        start = self.ops
        while self.ops - start < n:
            r = self.rng.random()
            if r < 0.55 or depth >= 2:
                self.straight(self.rng.randint(4, 30), 2)
            elif r < 0.78:
                self.loop(2)
            else:
                self.diamond(depth)

    def generate(self) -> tuple[str, str]:
        sig = f"func.func @{self.name}(%a: i64, %b: i64, %x: f64, %y: f64) -> (i64, f64) {{"
        self.irc.append(sig)
        self.mlir.append(sig)
        self.body(self.budget - 1, 0)
        self.stmt(f"func.return {self.pick('i64')}, {self.pick('f64')} : i64, f64", 2)
        self.irc.append("}")
        self.mlir.append("}")
        return "\n".join(self.irc) + "\n", "\n".join(self.mlir) + "\n"


def generate(size: int, seed: int = SEED) -> Program:
    """A module of about ``size`` ops (a little more: functions end where their chunk ends)."""
    rng = random.Random(f"{seed}:{size}")
    irc_parts: list[str] = []
    mlir_parts: list[str] = []
    counts: dict[str, int] = {}
    ops = phis = functions = 0
    while ops < size:
        remaining = size - ops
        budget = min(rng.randint(200, 3000), remaining)
        if remaining - budget < 150:  # no tiny last function
            budget = remaining
        gen = _FunctionGen(rng, f"f{functions}", max(budget, 20), counts)
        irc_text, mlir_text = gen.generate()
        irc_parts.append(irc_text)
        mlir_parts.append(mlir_text)
        ops += gen.ops
        phis += gen.phis
        functions += 1
    header = f"// parse_throughput: {ops} ops ({phis} phis) in {functions} functions, seed {seed}\n"
    return Program(size, header + "\n".join(irc_parts), header + "\n".join(mlir_parts), ops, phis,
                   functions, counts)


# ---- timing --------------------------------------------------------------------------------


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def count_ops(module) -> int:
    """Every op nested in the module's functions (not the functions themselves)."""
    n = 0
    stack = [op for func in module.ops for region in func.regions for block in region.blocks
             for op in block.ops]
    while stack:
        op = stack.pop()
        n += 1
        stack.extend(inner for region in op.regions for block in region.blocks for inner in block.ops)
    return n


def time_irc(prog: Program, repeat: int) -> tuple[dict, float]:
    import irc.passes  # binds irc too

    times: dict[str, list[float]] = {k: [] for k in ("parse", "verify", "print", "pvp", "canon")}
    printed = ""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        module = irc.parse(prog.irc, filename=f"gen{prog.size}.ir")
        t1 = time.perf_counter()
        irc.verify(module)
        t2 = time.perf_counter()
        printed = str(module)
        t3 = time.perf_counter()
        times["parse"].append(t1 - t0)
        times["verify"].append(t2 - t1)
        times["print"].append(t3 - t2)
        times["pvp"].append(t3 - t0)
        gc.collect()
        t0 = time.perf_counter()
        irc.passes.run(module, "canonicalize,dce", verify_each=False)
        times["canon"].append(time.perf_counter() - t0)
        del module
    # Below ~95%, other processes took the CPU from this one: the figures are pessimistic.
    cpu_share = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    # Sanity, outside the timings: the op count, the printed text parses again, and the
    # pipeline's output verifies.
    again = irc.parse(printed)
    counted = count_ops(again)
    if counted != prog.ops:
        raise RuntimeError(f"irc counts {counted} ops in the generated program, the generator {prog.ops}")
    irc.verify(again)
    irc.passes.run(again, "canonicalize,dce", verify_each=True)
    return {k: _median(v) for k, v in times.items()}, cpu_share


def _run_mlir(exe: str, path: Path, extra: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([exe, str(path), *extra, "-o", os.devnull], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{exe} {path} {' '.join(extra)} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[:4000]}")
    return elapsed, proc.stderr


def mlir_op_count(exe: str, path: Path) -> int:
    """Ops in function bodies as mlir-opt counts them (``--print-op-stats``)."""
    _, stats = _run_mlir(exe, path, ["--print-op-stats"])
    total = 0
    for line in stats.splitlines():
        name, sep, n = line.rpartition(",")
        if sep and n.strip().isdigit() and name.strip() not in ("builtin.module", "func.func"):
            total += int(n)
    return total


def time_mlir(exe: str, prog: Program, repeat: int, workdir: Path, flags: list[str]) -> dict:
    """Median net seconds per mode (minus start-up), or None where lost in start-up noise.

    Runs on the program alternate with runs on an empty file, and the net time is the median
    of the paired differences, so that drift in a shared machine's load cancels out.
    """
    path = workdir / f"gen{prog.size}.mlir"
    path.write_text(prog.mlir)
    empty = workdir / "empty.mlir"
    empty.write_text("")
    counted = mlir_op_count(exe, path)  # also checks that mlir-opt accepts the text
    if counted != prog.mlir_ops:
        raise RuntimeError(f"mlir-opt counts {counted} ops in the generated program, the generator "
                           f"{prog.mlir_ops}")
    out = {}
    for key, extra in (("pvp", []), ("canon", ["--canonicalize"])):
        _run_mlir(exe, path, flags + extra)  # warms the page cache
        empties, diffs = [], []
        for _ in range(repeat):
            e = _run_mlir(exe, empty, flags + extra)[0]
            diffs.append(_run_mlir(exe, path, flags + extra)[0] - e)
            empties.append(e)
        start = _median(empties)
        spread = _median([abs(e - start) for e in empties])  # median absolute deviation
        noise = max(3 * 1.4826 * spread, 0.002)
        net = _median(diffs)
        out[key] = net if net > noise else None
        out[key + "_startup"] = start
    return out


# ---- reporting -----------------------------------------------------------------------------


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "implementation": platform.python_implementation(), "lark": version("lark"),
            "lark-cython": version("lark-cython"), "irc": version("irc"), "revision": _revision(),
            "load": os.getloadavg(),
            "platform": platform.platform()}


def _revision() -> str:
    """The checkout's commit, "+dirty" when irc's sources differ from it (read-only git calls)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "irc", "dialects", "passes"],
                               cwd=root, capture_output=True, timeout=10).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _rate(ops: int, seconds: float) -> float:
    return ops / seconds if seconds > 0 else float("inf")


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _fmt_ratio(a: float, b: float | None) -> str:
    return "-" if b is None else f"{a / b:.3f}"


def report(results: list[dict], machine: dict, mlir: dict | None, stream=sys.stdout) -> dict:
    w = stream.write
    w(f"machine: {machine['cpu']}, {machine['cores']} cores; {machine['implementation']} "
      f"{machine['python']}; lark {machine['lark']}, lark-cython {machine['lark-cython']}; "
      f"irc {machine['irc']} at {machine['revision']}; load average {machine['load'][0]:.2f}\n")
    if mlir:
        startups = [r["mlir_seconds"]["pvp_startup"] for r in results]
        w(f"mlir-opt: {mlir['exe']} ({mlir['version']}), flags {' '.join(mlir['flags']) or '(none)'}; "
          f"start-up (an empty file, subtracted) {min(startups) * 1e3:.1f}-{max(startups) * 1e3:.1f} ms\n")
    w("\nirc, in process, ops/s (median of the repetitions):\n")
    cols = ("parse", "verify", "print", "pvp", "canon")
    heads = ("parse", "verify", "print", "parse+verify+print", "canonicalize,dce")
    w(f"{'ops':>8} {'funcs':>5} {'reps':>4} " + " ".join(f"{h:>18}" for h in heads) + f" {'cpu%':>5}\n")
    for r in results:
        w(f"{r['ops']:>8} {r['functions']:>5} {r['repeat']:>4} "
          + " ".join(f"{_fmt_rate(r['irc_rate'][c]):>18}" for c in cols)
          + f" {100 * r['cpu_share']:>5.0f}\n")
    busy = [r["ops"] for r in results if r["cpu_share"] < 0.95]
    if busy:
        w(f"warning: other processes took the CPU during the runs at {', '.join(map(str, busy))} ops "
          f"(cpu% < 95; load average {machine['load'][0]:.2f} at the start, {os.getloadavg()[0]:.2f} now): "
          "those figures are pessimistic, rerun on a quieter machine\n")
    if mlir:
        w("\nside by side with mlir-opt (ops/s; ratio = irc / mlir-opt):\n")
        w(f"{'ops':>8} {'irc p+v+p':>12} {'mlir-opt':>12} {'ratio':>7}   "
          f"{'irc canon,dce':>13} {'mlir canon':>12} {'ratio':>7}\n")
        for r in results:
            m = r["mlir_rate"]
            w(f"{r['ops']:>8} {_fmt_rate(r['irc_rate']['pvp']):>12} {_fmt_rate(m['pvp']):>12} "
              f"{_fmt_ratio(r['irc_rate']['pvp'], m['pvp']):>7}   {_fmt_rate(r['irc_rate']['canon']):>13} "
              f"{_fmt_rate(m['canon']):>12} {_fmt_ratio(r['irc_rate']['canon'], m['canon']):>7}\n")
        w("(mlir-opt's ops are the same minus the phis, which are block arguments there; '-': the\n"
          " time net of start-up is within start-up noise, too small to measure this way)\n")

    by_size = {r["size"]: r for r in results}
    verdict: dict = {}
    w("\n")
    if 10_000 in by_size and 100_000 in by_size:
        small, big = by_size[10_000], by_size[100_000]
        lin = {c: big["irc_rate"][c] / small["irc_rate"][c] for c in cols}
        w("linearity, throughput at 100k / at 10k: "
          + ", ".join(f"{h} {lin[c]:.2f}" for c, h in zip(cols, heads, strict=True)) + "\n")
        rate = big["irc_rate"]["pvp"]
        ok_rate = rate >= TARGET_OPS_PER_S
        ok_lin = lin["pvp"] >= TARGET_LINEARITY
        w(f"target parse+verify+print at 100k >= {TARGET_OPS_PER_S:,} ops/s: {rate:,.0f} ops/s "
          f"-> {'PASS' if ok_rate else 'FAIL'}\n")
        w(f"target linear from 10k to 100k, ratio >= {TARGET_LINEARITY}: {lin['pvp']:.2f} "
          f"-> {'PASS' if ok_lin else 'FAIL'}\n")
        w(f"overall: {'PASS' if ok_rate and ok_lin else 'FAIL'}\n")
        verdict = {"linearity": lin, "rate_ok": ok_rate, "linear_ok": ok_lin}
    else:
        w("targets (parse+verify+print at 100k >= 30,000 ops/s; ratio 100k/10k >= 0.8): "
          "n/a, needs sizes 10000 and 100000\n")
    return verdict


# ---- main ----------------------------------------------------------------------------------


def _default_repeat(size: int) -> int:
    return 7 if size <= 20_000 else 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=None,
                    help="comma-separated module sizes in ops (default 1000,10000,100000)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="repetitions per size (default 7, and 3 above 20k ops; mlir-opt gets at "
                         "least 15 up to 2k ops, 9 up to 20k, 5 above: its runs are cheap)")
    ap.add_argument("--quick", action="store_true", help="small sizes and one repetition: a smoke test")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--mlir-opt", default=None,
                    help="the mlir-opt binary (default: mlir-opt-22 on PATH, then mlir-opt)")
    ap.add_argument("--no-mlir", action="store_true", help="skip the mlir-opt comparison")
    ap.add_argument("--mlir-threading", action="store_true",
                    help="let mlir-opt use its thread pool (default --mlir-disable-threading)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--dump", type=Path, default=None,
                    help="write the generated programs (.ir and .mlir) into this directory")
    args = ap.parse_args(argv)

    if args.sizes:
        try:
            sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
        except ValueError:
            ap.error(f"--sizes: expected comma-separated integers, got {args.sizes!r}")
        if not sizes or min(sizes) < 20:
            ap.error("--sizes: each size must be at least 20")
    else:
        sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.repeat is not None and args.repeat < 1:
        ap.error("--repeat must be at least 1")

    machine = machine_info()
    exe = None
    if not args.no_mlir:
        exe = args.mlir_opt or shutil.which("mlir-opt-22") or shutil.which("mlir-opt")
        if args.mlir_opt and not shutil.which(args.mlir_opt):
            ap.error(f"--mlir-opt: {args.mlir_opt} not found")

    import irc

    irc.parse("func.func @warm(%a: i64) -> i64 {\n  func.return %a : i64\n}\n")  # builds the parser

    results = []
    mlir_info = None
    with tempfile.TemporaryDirectory(prefix="irc-bench-") as tmp:
        workdir = Path(tmp)
        flags = [] if args.mlir_threading else ["--mlir-disable-threading"]
        if exe:
            version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
            version = next((ln.strip() for ln in version.splitlines() if "version" in ln.lower()), "?")
            mlir_info = {"exe": exe, "version": version, "flags": flags}
        for size in sizes:
            prog = generate(size, args.seed)
            if args.dump:
                args.dump.mkdir(parents=True, exist_ok=True)
                (args.dump / f"gen{size}.ir").write_text(prog.irc)
                (args.dump / f"gen{size}.mlir").write_text(prog.mlir)
            repeat = args.repeat or (1 if args.quick else _default_repeat(size))
            print(f"[{size}] {prog.ops} ops ({prog.phis} phis, {prog.functions} functions), "
                  f"{repeat} repetitions ...", file=sys.stderr, flush=True)
            try:
                secs, cpu_share = time_irc(prog, repeat)
            except (irc.IRError, RuntimeError) as e:
                print(f"irc rejected the generated program of size {size}:\n{e}", file=sys.stderr)
                return 1
            entry = {"size": size, "ops": prog.ops, "phis": prog.phis, "functions": prog.functions,
                     "repeat": repeat, "irc_seconds": secs, "cpu_share": cpu_share,
                     "irc_rate": {k: _rate(prog.ops, v) for k, v in secs.items()}}
            if exe:
                try:
                    mlir_repeat = max(repeat, 3 if args.quick else 15 if size <= 2_000 else 9 if size <= 20_000 else 5)
                    msecs = time_mlir(exe, prog, mlir_repeat, workdir, flags)
                except RuntimeError as e:
                    print(f"mlir-opt rejected the generated program:\n{e}", file=sys.stderr)
                    return 1
                entry["mlir_seconds"] = msecs
                entry["mlir_rate"] = {k: None if msecs[k] is None else _rate(prog.mlir_ops, msecs[k])
                                      for k in ("pvp", "canon")}
            results.append(entry)

    print()
    verdict = report(results, machine, mlir_info)
    if args.json:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": machine,
                                         "mlir_opt": mlir_info, "results": results, "verdict": verdict},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
