#!/usr/bin/env python3
"""The pass explorer's speed (issue 15): ``suggest``, ``undo``/``redo`` and ``apply`` on a
10k-op module, the engine behind ``irc repl`` and ``irc.Explorer``.

The module is ``parse_throughput.generate(10_000)`` (scalar arithmetic, ``scf.for`` loops
and ``cf`` diamonds with phis in 9 functions), parsed once.  Reported as medians of
``--repeat`` runs, each on a fresh ``irc.Explorer``:

* ``suggest`` on the module as generated (most passes change it) and after ``apply
  canonicalize,cse`` (few do): every registered pass without options tried on a copy;
* ``undo`` and ``redo`` after that apply (the explorer keeps every step, so they only move);
* ``apply canonicalize,cse``: a clone, the passes, the verifier and a print per pass.

No peer does this (mlir-opt has no interactive mode), so the figures stand against the
targets of issue 15: ``suggest`` on a 10k-op module within 2 s, ``undo`` instant (here:
under a millisecond).

    python benchmarks/repl.py               # 10k ops, 5 repetitions
    python benchmarks/repl.py --quick       # 1k ops, 2 repetitions (smoke test)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import parse_throughput  # noqa: E402
from machine_info import cpu_model  # noqa: E402

import irc  # noqa: E402

SUGGEST_TARGET_S = 2.0
UNDO_TARGET_S = 1e-3


def measure(module, repeat: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    times: dict[str, list[float]] = {k: [] for k in
                                     ("suggest, as generated", "apply canonicalize,cse",
                                      "suggest, after canonicalize,cse", "undo", "redo")}
    counts = {}
    for _ in range(repeat):
        x = irc.Explorer(module)
        t = time.perf_counter()
        counts["as generated"] = len(x.suggest())
        times["suggest, as generated"].append(time.perf_counter() - t)
        t = time.perf_counter()
        x.apply("canonicalize,cse")
        times["apply canonicalize,cse"].append(time.perf_counter() - t)
        t = time.perf_counter()
        counts["after canonicalize,cse"] = len(x.suggest())
        times["suggest, after canonicalize,cse"].append(time.perf_counter() - t)
        for what in ("undo", "redo"):
            t = time.perf_counter()
            getattr(x, what)()
            times[what].append(time.perf_counter() - t)
    return times, counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=10_000, help="size of the generated module")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1k ops, 2 repetitions")
    opts = ap.parse_args(argv)
    size, repeat = (1_000, 2) if opts.quick else (opts.ops, opts.repeat)
    program = parse_throughput.generate(size)
    module = irc.parse(program.irc)
    ops = parse_throughput.count_ops(module)
    print(f"repl: {cpu_model()}, Python {platform.python_version()}, irc at {parse_throughput._revision()}, load {os.getloadavg()[0]:.1f}")
    print(f"module: parse_throughput.generate({size}) = {ops:,} ops; medians of {repeat}\n")
    times, counts = measure(module, repeat)
    print("| step | median s | min s | max s |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.6f} | {min(ts):.6f} | {max(ts):.6f} |")
    print(f"\npasses suggested: {counts['as generated']} as generated, "
          f"{counts['after canonicalize,cse']} after canonicalize,cse")
    suggest = statistics.median(times["suggest, as generated"])
    undo = max(statistics.median(times["undo"]), statistics.median(times["redo"]))
    checks = [(f"suggest on {ops:,} ops <= {SUGGEST_TARGET_S:.0f} s ({suggest:.2f} s)", suggest <= SUGGEST_TARGET_S),
              (f"undo/redo <= 1 ms ({undo * 1e6:.1f} us)", undo <= UNDO_TARGET_S)]
    if opts.quick:
        print("\n(--quick: the targets are for 10k ops; not checked)")
        return 0
    print()
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
