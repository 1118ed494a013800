#!/usr/bin/env python3
"""Optimisation-pipeline throughput and quality of irc, side by side with mlir-opt (issue 4).

Generates seeded modules of about 1k, 10k and 100k ops with the generator of
``benchmarks/parse_throughput.py`` -- straight-line integer and float arithmetic with
duplicate subexpressions and foldable constants, ``scf.for`` loops, ``cf`` diamonds --
extended with what these pipelines are for:

* every ``scf.for`` body starts with one to three **loop-invariant expressions** (ops on
  values defined outside the loop, some on a constant defined inside it), which the loop
  body then uses;
* every diamond's join receives **the same constant along both edges** in one extra
  ``cf.phi`` (a block argument in MLIR), either one SSA constant defined before the
  branch or a separate, equal ``arith.constant`` in each arm; the join then uses it.

and runs the pipelines ``canonicalize,cse`` and ``sccp,canonicalize,cse,licm``:

* irc in process, ``irc.passes.run(module, pipeline, verify_each=False)`` on a freshly
  parsed module, timing only the passes (median of the repetitions);
* ``mlir-opt-22 --pass-pipeline='builtin.module(canonicalize,cse)'`` (and
  ``builtin.module(sccp,canonicalize,cse,loop-invariant-code-motion)``)
  ``--mlir-disable-threading``, subprocess wall time minus the time of the same command
  on an empty file (start-up), median of paired differences.

It reports ops/s (input ops / seconds; irc's input count includes the phis, mlir-opt's
is the same minus the phis) and the **ops left** afterwards: for mlir-opt from
``print-op-stats`` appended to the pipeline, for irc by walking the module; both count
the ops in function bodies (terminators, ``scf.yield``, ``scf.for`` included), not
``func.func`` or the module, and irc's count leaves out ``cf.phi`` (MLIR spells phis as
block arguments). Where irc leaves more ops than mlir-opt, the difference is broken
down by op kind. Then PASS/FAIL lines for the targets of issue 4: irc leaves no more ops
than mlir-opt on every input; irc canonicalize,cse >= 20,000 ops/s in process at 100k
ops; linear from 10k to 100k (throughput ratio >= 0.8).

    python benchmarks/opt_throughput.py                    # 1k, 10k, 100k (about 2-3 min)
    python benchmarks/opt_throughput.py --quick            # smoke test, a few seconds
    python benchmarks/opt_throughput.py --quick --no-mlir  # without mlir-opt
    python benchmarks/opt_throughput.py --sizes 1000 --dump /tmp/opt   # inputs and outputs
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load_parse_throughput():
    """benchmarks/ is no package: load its sibling script as a module (generator, helpers)."""
    name = "parse_throughput"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "parse_throughput.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


pt = _load_parse_throughput()

TARGET_OPS_PER_S = 20_000
TARGET_LINEARITY = 0.8
DEFAULT_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (300, 1_000)
SEED = 20240604

PIPELINES = {
    # name: (irc pipeline, mlir-opt pass pipeline)
    "canonicalize,cse": ("canonicalize,cse", "builtin.module(canonicalize,cse)"),
    "sccp,canonicalize,cse,licm": (
        "sccp,canonicalize,cse,licm",
        "builtin.module(sccp,canonicalize,cse,loop-invariant-code-motion)",
    ),
}
MAIN_PIPELINE = "canonicalize,cse"
INVARIANT_INT = ("addi", "muli", "xori", "maxsi", "subi")
INVARIANT_FLOAT = ("addf", "mulf", "subf")
JOIN_CONSTANTS = (0, 1, 2, 7, 42, -1)


# ---- the program generator: parse_throughput's, with invariants and constant joins --------


class _OptGen(pt._FunctionGen):
    """parse_throughput's function generator, plus loop invariants and constant joins."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._outer: tuple[int, int] | None = None  # pool sizes outside the loop being built

    def loop(self, indent: int) -> None:
        # Here the pools hold only values defined outside the loop; the base class then
        # pushes the iter_args and calls straight() once for the body.
        self._outer = (len(self.ints), len(self.floats))
        super().loop(indent)
        self._outer = None

    def straight(self, n: int, indent: int) -> None:
        if self._outer is not None and indent > 2:
            outer, self._outer = self._outer, None
            self.invariants(outer, indent)
        super().straight(n, indent)

    def invariants(self, outer: tuple[int, int], indent: int) -> None:
        """One to three ops inside a loop body that depend on nothing the loop defines."""
        rng = self.rng
        ints, floats = self.ints[: outer[0]], self.floats[: outer[1]]
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            if r < 0.45:
                x, y = rng.choice(ints), rng.choice(ints)
                v = self.op(f"arith.{rng.choice(INVARIANT_INT)} {x}, {y} : i64", "i64", indent, memo=False)
                ints = [*ints, v]
            elif r < 0.75:
                x, y = rng.choice(floats), rng.choice(floats)
                v = self.op(f"arith.{rng.choice(INVARIANT_FLOAT)} {x}, {y} : f64", "f64", indent, memo=False)
                floats = [*floats, v]
            else:  # a constant inside the loop and an op on it: both invariant
                c = self.op(f"arith.constant {rng.choice((3, 5, 9, 12))} : i64", "i64", indent, memo=False)
                v = self.op(f"arith.muli {rng.choice(ints)}, {c} : i64", "i64", indent, memo=False)
                ints = [*ints, v]

    def diamond(self, depth: int) -> None:
        """parse_throughput's diamond, plus one join value that is the same constant on both edges."""
        rng = self.rng
        shared = rng.random() < 0.5  # one SSA constant before the branch, or one per arm
        value = rng.choice(JOIN_CONSTANTS)
        const = self.op(f"arith.constant {value} : i64", "i64", 2, memo=False) if shared else None
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
            values.append(const or self.op(f"arith.constant {value} : i64", "i64", 2, memo=False))
            incoming.append((self.label, values))
            self.stmt(f"cf.br {join}", 2)
            self.mlir[-1] = f"  cf.br {join}({', '.join(values)} : {', '.join([*kinds, 'i64'])})"
            self.restore(mark)
        kinds = [*kinds, "i64"]
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
            if i < len(kinds) - 1:
                self.pool(kind).append(phi)
        # Use the constant join at once (a fold once the constant is known), then carry on.
        self.op(f"arith.{rng.choice(('addi', 'muli', 'xori'))} {phis[-1]}, {self.pick('i64')} : i64", "i64", 2)


    def generate(self) -> tuple[str, str]:
        """As the base class, but a quarter of the budget goes into keeping values live.

        Left alone, most random ops are dead and DCE alone decides what remains; here the
        function's results are sums (xors) over most of the values in scope at its end.
        """
        sig = f"func.func @{self.name}(%a: i64, %b: i64, %x: f64, %y: f64) -> (i64, f64) {{"
        self.irc.append(sig)
        self.mlir.append(sig)
        self.body(max(self.budget * 3 // 4, 10), 0)
        acc = {"i64": self.pick("i64"), "f64": self.pick("f64")}
        live = [("i64", v) for v in self.ints[2:]] + [("f64", v) for v in self.floats[2:]]
        self.rng.shuffle(live)
        for kind, v in live[: max(self.budget - self.ops - 1, 0)]:
            op = self.rng.choice(("addi", "xori")) if kind == "i64" else "addf"
            acc[kind] = self.op(f"arith.{op} {acc[kind]}, {v} : {kind}", kind, 2, memo=False)
        self.stmt(f"func.return {acc['i64']}, {acc['f64']} : i64, f64", 2)
        self.irc.append("}")
        self.mlir.append("}")
        return "\n".join(self.irc) + "\n", "\n".join(self.mlir) + "\n"


def generate(size: int, seed: int = SEED):
    """A module of about ``size`` ops (parse_throughput.Program, same chunking into functions)."""
    import random

    rng = random.Random(f"opt:{seed}:{size}")
    irc_parts: list[str] = []
    mlir_parts: list[str] = []
    counts: dict[str, int] = {}
    ops = phis = functions = 0
    while ops < size:
        remaining = size - ops
        budget = min(rng.randint(200, 3000), remaining)
        if remaining - budget < 150:  # no tiny last function
            budget = remaining
        gen = _OptGen(rng, f"f{functions}", max(budget, 20), counts)
        irc_text, mlir_text = gen.generate()
        irc_parts.append(irc_text)
        mlir_parts.append(mlir_text)
        ops += gen.ops
        phis += gen.phis
        functions += 1
    header = f"// opt_throughput: {ops} ops ({phis} phis) in {functions} functions, seed {seed}\n"
    return pt.Program(size, header + "\n".join(irc_parts), header + "\n".join(mlir_parts), ops, phis,
                      functions, counts)


# ---- counting ------------------------------------------------------------------------------


def irc_op_kinds(module) -> Counter:
    """Op kinds in function bodies, nested regions included; no cf.phi, func.func or module."""
    kinds: Counter = Counter()
    stack = [op for func in module.ops for region in func.regions for block in region.blocks
             for op in block.ops]
    while stack:
        op = stack.pop()
        if op.name != "cf.phi":
            kinds[op.name] += 1
        stack.extend(inner for region in op.regions for block in region.blocks for inner in block.ops)
    return kinds


def parse_op_stats(stderr: str) -> Counter:
    """mlir-opt's ``print-op-stats`` table, without builtin.module and func.func."""
    kinds: Counter = Counter()
    for line in stderr.splitlines():
        name, sep, n = line.rpartition(",")
        name = name.strip()
        if sep and n.strip().isdigit() and name not in ("builtin.module", "func.func"):
            kinds[name] += int(n)
    return kinds


# ---- timing --------------------------------------------------------------------------------


def time_irc(prog, pipeline: str, repeat: int, dump: Path | None) -> dict:
    """Median seconds of the passes alone (a fresh parse per repetition, untimed), ops left."""
    import irc.passes  # binds irc too

    times = []
    module = None
    wall = cpu = 0.0
    for _ in range(repeat):
        module = irc.parse(prog.irc, filename=f"gen{prog.size}.ir")
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        irc.passes.run(module, pipeline, verify_each=False)
        times.append(time.perf_counter() - w0)
        wall += times[-1]
        cpu += time.process_time() - c0
    irc.verify(module)  # outside the timings: the pipeline's output is valid IR
    kinds = irc_op_kinds(module)
    if dump:
        (dump / f"irc-{pipeline.replace(',', '-')}-{prog.size}.ir").write_text(str(module))
    return {"seconds": statistics.median(times), "cpu_share": cpu / max(wall, 1e-9),
            "left": sum(kinds.values()), "kinds": dict(kinds)}


def _mlir(exe: str, path: Path, args: list[str], out: str = os.devnull) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([exe, str(path), *args, "-o", out], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{exe} {path} {' '.join(args)} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[:4000]}")
    return elapsed, proc.stderr


def time_mlir(exe: str, path: Path, empty: Path, pipeline: str, repeat: int, size: int,
              dump: Path | None, name: str) -> dict:
    """Median net seconds (paired with runs on an empty file), or None within start-up noise."""
    args = ["--mlir-disable-threading", f"--pass-pipeline={pipeline}"]
    # The counting run, untimed: print-op-stats after the pipeline (it prints to stderr).
    out = str(dump / f"mlir-{name.replace(',', '-')}-{size}.mlir") if dump else os.devnull
    stats_pipeline = pipeline[:-1] + ",print-op-stats)"
    _, stderr = _mlir(exe, path, ["--mlir-disable-threading", f"--pass-pipeline={stats_pipeline}"], out)
    kinds = parse_op_stats(stderr)
    empties, diffs = [], []
    for _ in range(repeat):
        e = _mlir(exe, empty, args)[0]
        diffs.append(_mlir(exe, path, args)[0] - e)
        empties.append(e)
    start = statistics.median(empties)
    spread = statistics.median([abs(e - start) for e in empties])
    noise = max(3 * 1.4826 * spread, 0.002)
    net = statistics.median(diffs)
    return {"seconds": net if net > noise else None, "startup": start,
            "left": sum(kinds.values()), "kinds": dict(kinds)}


def check_inputs(exe: str | None, prog, path: Path) -> None:
    """Both syntaxes parse and verify, with the op count the generator expects."""
    import irc

    module = irc.parse(prog.irc, filename=f"gen{prog.size}.ir")
    irc.verify(module)
    counted = sum(irc_op_kinds(module).values())
    if counted != prog.mlir_ops:
        raise RuntimeError(f"irc counts {counted} non-phi ops in the input, the generator {prog.mlir_ops}")
    if exe:
        _, stderr = _mlir(exe, path, ["--mlir-disable-threading", "--print-op-stats"])
        counted = sum(parse_op_stats(stderr).values())
        if counted != prog.mlir_ops:
            raise RuntimeError(f"mlir-opt counts {counted} ops in the input, the generator {prog.mlir_ops}")


# ---- reporting -----------------------------------------------------------------------------


def _rate(ops: int, seconds: float | None) -> float | None:
    return None if seconds is None else ops / seconds if seconds > 0 else float("inf")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def excess_kinds(irc_kinds: dict, mlir_kinds: dict) -> list[tuple[str, int, int]]:
    """Op kinds irc leaves more of than mlir-opt: (name, irc, mlir), largest difference first."""
    rows = [(k, irc_kinds.get(k, 0), mlir_kinds.get(k, 0)) for k in set(irc_kinds) | set(mlir_kinds)]
    rows = [r for r in rows if r[1] != r[2]]
    return sorted(rows, key=lambda r: (r[2] - r[1], r[0]))


def report(results: list[dict], machine: dict, mlir_info: dict | None, stream=sys.stdout) -> dict:
    w = stream.write
    w(f"machine: {machine['cpu']}, {machine['cores']} cores; {machine['implementation']} "
      f"{machine['python']}; irc {machine['irc']} at {machine['revision']}; load average "
      f"{machine['load'][0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end\n")
    if mlir_info:
        startups = [p["mlir"]["startup"] for r in results for p in r["pipelines"].values() if p.get("mlir")]
        w(f"mlir-opt: {mlir_info['exe']} ({mlir_info['version']}), --mlir-disable-threading; start-up "
          f"(an empty file, subtracted) {min(startups) * 1e3:.1f}-{max(startups) * 1e3:.1f} ms\n")
    w("\nops/s = input ops / seconds of the pipeline (median); left = ops in function bodies after it\n"
      "(no phis, func.func or module; mlir-opt's input is the same program minus the phis)\n")
    w(f"{'pipeline':<27} {'ops':>7} {'reps':>4} {'irc ops/s':>10} {'mlir ops/s':>11} {'ratio':>6} "
      f"{'irc left':>9} {'mlir left':>9} {'cpu%':>5}\n")
    for r in results:
        for name, p in r["pipelines"].items():
            m = p.get("mlir")
            irate = _rate(r["ops"], p["irc"]["seconds"])
            mrate = _rate(r["mlir_ops"], m["seconds"]) if m else None
            ratio = "-" if mrate is None else f"{irate / mrate:.3f}"
            w(f"{name:<27} {r['ops']:>7} {r['repeat']:>4} {_fmt(irate):>10} {_fmt(mrate):>11} {ratio:>6} "
              f"{p['irc']['left']:>9} {m['left'] if m else '-':>9} {100 * p['irc']['cpu_share']:>5.0f}\n")
    w("('-': mlir-opt's time net of start-up is within start-up noise; cpu% < 95: other processes\n"
      " took the CPU from irc during its passes, its figures are pessimistic)\n")

    verdict: dict = {"lines": []}

    def line(ok: bool | None, text: str) -> None:
        tag = "n/a " if ok is None else "PASS" if ok else "FAIL"
        verdict["lines"].append(f"{tag}  {text}")

    # Where irc leaves more, by op kind.
    worse = []
    if mlir_info:
        for r in results:
            for name, p in r["pipelines"].items():
                if p["irc"]["left"] > p["mlir"]["left"]:
                    worse.append(f"{r['ops']} ops, {name}")
                    diff = excess_kinds(p["irc"]["kinds"], p["mlir"]["kinds"])
                    more = [d for d in diff if d[1] > d[2]]
                    fewer = sum(b - a for _, a, b in diff if b > a)
                    w(f"\n{r['ops']} ops, {name}: irc leaves {p['irc']['left']}, mlir-opt {p['mlir']['left']}; "
                      "irc leaves more of (irc vs mlir-opt):\n    "
                      + ", ".join(f"{k} {a} vs {b}" for k, a, b in more)
                      + f"\n    (and {fewer} fewer ops of the other kinds)\n")
        line(not worse, "irc leaves no more ops than mlir-opt on every input"
             + (f" (more on: {'; '.join(worse)})" if worse else ""))
    else:
        line(None, "irc leaves no more ops than mlir-opt on every input (no mlir-opt)")
    by_size = {r["size"]: r for r in results}
    if 100_000 in by_size:
        big = by_size[100_000]
        rate = _rate(big["ops"], big["pipelines"][MAIN_PIPELINE]["irc"]["seconds"])
        line(rate >= TARGET_OPS_PER_S,
             f"irc canonicalize,cse at 100k >= {TARGET_OPS_PER_S:,} ops/s in process ({rate:,.0f} ops/s)")
    else:
        line(None, f"irc canonicalize,cse at 100k >= {TARGET_OPS_PER_S:,} ops/s (needs size 100000)")
    if 10_000 in by_size and 100_000 in by_size:
        lin = {}
        for name in PIPELINES:
            small = _rate(by_size[10_000]["ops"], by_size[10_000]["pipelines"][name]["irc"]["seconds"])
            large = _rate(by_size[100_000]["ops"], by_size[100_000]["pipelines"][name]["irc"]["seconds"])
            lin[name] = large / small
        w("\nlinearity, irc ops/s at 100k / at 10k: "
          + ", ".join(f"{k} {v:.2f}" for k, v in lin.items()) + "\n")
        line(lin[MAIN_PIPELINE] >= TARGET_LINEARITY,
             f"irc canonicalize,cse linear from 10k to 100k, ratio >= {TARGET_LINEARITY} "
             f"({lin[MAIN_PIPELINE]:.2f})")
        verdict["linearity"] = lin
    else:
        line(None, f"linear from 10k to 100k, ratio >= {TARGET_LINEARITY} (needs sizes 10000 and 100000)")
    w("\n" + "\n".join(verdict["lines"]) + "\n")
    return verdict


# ---- main ----------------------------------------------------------------------------------


def _default_repeat(size: int) -> int:
    return 5 if size <= 20_000 else 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=None,
                    help="comma-separated module sizes in ops (default 1000,10000,100000)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="irc repetitions per size and pipeline (default 5, and 3 above 20k ops; "
                         "mlir-opt gets at least 11 up to 20k ops, 5 above)")
    ap.add_argument("--quick", action="store_true", help="small sizes and one repetition: a smoke test")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--mlir-opt", default=None,
                    help="the mlir-opt binary (default: mlir-opt-22 on PATH, then mlir-opt)")
    ap.add_argument("--no-mlir", action="store_true", help="skip mlir-opt")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--dump", type=Path, default=None,
                    help="write the inputs (.ir, .mlir) and both tools' outputs into this directory")
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

    machine = pt.machine_info()
    exe = None
    if not args.no_mlir:
        if args.mlir_opt and not shutil.which(args.mlir_opt):
            ap.error(f"--mlir-opt: {args.mlir_opt} not found")
        exe = args.mlir_opt or shutil.which("mlir-opt-22") or shutil.which("mlir-opt")
        if exe is None:
            print("mlir-opt-22 not found: irc only", file=sys.stderr)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)

    import irc.passes  # binds irc too

    irc.parse("func.func @warm(%a: i64) -> i64 {\n  func.return %a : i64\n}\n")  # builds the parser

    results = []
    mlir_info = None
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="irc-opt-bench-") as tmp:
        workdir = Path(tmp)
        empty = workdir / "empty.mlir"
        empty.write_text("")
        if exe:
            version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
            version = next((ln.strip() for ln in version.splitlines() if "version" in ln.lower()), "?")
            mlir_info = {"exe": exe, "version": version}
        for size in sizes:
            prog = generate(size, args.seed)
            path = workdir / f"gen{size}.mlir"
            path.write_text(prog.mlir)
            if args.dump:
                (args.dump / f"gen{size}.ir").write_text(prog.irc)
                (args.dump / f"gen{size}.mlir").write_text(prog.mlir)
            repeat = args.repeat or (1 if args.quick else _default_repeat(size))
            print(f"[{size}] {prog.ops} ops ({prog.phis} phis, {prog.functions} functions), "
                  f"{repeat} repetitions ...", file=sys.stderr, flush=True)
            try:
                check_inputs(exe, prog, path)
            except (irc.IRError, RuntimeError) as e:
                print(f"a generated program of size {size} was rejected:\n{e}", file=sys.stderr)
                return 1
            entry = {"size": size, "ops": prog.ops, "mlir_ops": prog.mlir_ops, "phis": prog.phis,
                     "functions": prog.functions, "repeat": repeat, "pipelines": {}}
            for name, (irc_pipe, mlir_pipe) in PIPELINES.items():
                try:
                    res = {"irc": time_irc(prog, irc_pipe, repeat, args.dump)}
                except irc.IRError as e:
                    print(f"irc failed on {name} at size {size}:\n{e}", file=sys.stderr)
                    return 1
                if exe:
                    mlir_repeat = max(repeat, 3 if args.quick else 11 if size <= 20_000 else 5)
                    try:
                        res["mlir"] = time_mlir(exe, path, empty, mlir_pipe, mlir_repeat, size,
                                                args.dump, name)
                    except RuntimeError as e:
                        print(f"mlir-opt failed on {name} at size {size}:\n{e}", file=sys.stderr)
                        return 1
                entry["pipelines"][name] = res
            results.append(entry)

    print(f"(wall {time.perf_counter() - t_start:.0f} s)", file=sys.stderr)
    print()
    verdict = report(results, machine, mlir_info)
    if args.json:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": machine,
                                         "mlir_opt": mlir_info, "results": results,
                                         "verdict": verdict}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
