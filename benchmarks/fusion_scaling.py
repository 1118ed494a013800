"""Elementwise fusion time against graph size: irc's fuse-elementwise vs MLIR's linalg fusion.

A chain of N elementwise ops (alternating exp, add, mul, each also reading the
input) fuses into one loop nest.  irc's ``fuse-elementwise`` walks the graph once;
MLIR's ``--linalg-fuse-elementwise-ops`` (after ``--linalg-generalize-named-ops``)
fuses producer into consumer one pair at a time, rebuilding the fused
``linalg.generic`` each time, so its time grows quadratically along a chain.

Only the fusion pass is timed: irc's with ``time.perf_counter`` around the pass
manager running it alone (parsing and verification excluded), MLIR's from ``--mlir-timing`` (the pass's own line).  Both
see the same chain.  mlir-opt-22 comes from ``apt-get install mlir-22-tools``;
without it only irc runs.

    python benchmarks/fusion_scaling.py [--sizes 250,500,1000,2000,4000] [--repeat 3] [--no-mlir]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import irc.passes

import irc
from irc.passmanager import PassManager, make_pass

OPS = ["exp", "add", "mul"]


def irc_chain(n: int, size: int = 1024) -> str:
    t = f"tensor<{size}xf32>"
    lines, prev = [], "%x"
    for i in range(n):
        kind = OPS[i % 3]
        if kind == "exp":
            lines.append(f"%v{i} = math.exp {prev} : {t}")
        else:
            lines.append(f"%v{i} = arith.{kind}f {prev}, %x : {t}")
        prev = f"%v{i}"
    return f"func.func @f(%x: {t}) -> {t} {{\n  " + "\n  ".join(lines) + f"\n  func.return {prev} : {t}\n}}\n"


def mlir_chain(n: int, size: int = 1024) -> str:
    t = f"tensor<{size}xf32>"
    lines, prev = [f"%e = tensor.empty() : {t}"], "%x"
    for i in range(n):
        kind = OPS[i % 3]
        if kind == "exp":
            lines.append(f"%v{i} = linalg.exp ins({prev} : {t}) outs(%e : {t}) -> {t}")
        else:
            lines.append(f"%v{i} = linalg.{kind} ins({prev}, %x : {t}, {t}) outs(%e : {t}) -> {t}")
        prev = f"%v{i}"
    return (f"func.func @f(%x: {t}) -> {t} {{\n  " + "\n  ".join(lines) +
            f"\n  return {prev} : {t}\n}}\n")


def time_irc(n: int, repeat: int) -> tuple[float, int]:
    text = irc_chain(n)
    times, fused = [], 0
    for _ in range(repeat):
        module = irc.parse(text)
        manager = PassManager([make_pass("fuse-elementwise")], verify_each=False)
        start = time.perf_counter()
        manager.run(module)
        times.append(time.perf_counter() - start)
        fused = sum(1 for op in module.walk() if op.name == "graph.fused")
    return statistics.median(times), fused


def time_mlir(mlir_opt: str, n: int, repeat: int) -> tuple[float, int] | None:
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write(mlir_chain(n))
        path = f.name
    times, generics = [], 0
    for _ in range(repeat):
        proc = subprocess.run([mlir_opt, path, "--linalg-generalize-named-ops", "--linalg-fuse-elementwise-ops",
                               "--mlir-timing"], capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[:2000], file=sys.stderr)
            return None
        line = next((ln for ln in proc.stderr.splitlines() if "ElementwiseOpFusion" in ln or "fuse-elementwise" in ln),
                    None)
        if line is None:
            return None
        times.append(float(re.search(r"([\d.]+)", line).group(1)))
        generics = proc.stdout.count("linalg.generic")
    return statistics.median(times), generics


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,500,1000,2000,4000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-mlir", action="store_true", help="time irc only")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    mlir_opt = None if args.no_mlir else shutil.which("mlir-opt-22")
    print(f"chain of N elementwise ops on tensor<1024xf32>; median of {args.repeat}; fusion pass time only")
    print(f"{'N':>6} {'irc (s)':>10} {'irc ns/op':>10} {'loops':>6} {'mlir-opt-22 (s)':>16} {'loops':>6} {'mlir/irc':>9}")
    for n in sizes:
        t_irc, fused = time_irc(n, args.repeat)
        mlir = time_mlir(mlir_opt, n, args.repeat) if mlir_opt else None
        if mlir is None:
            status = "failed" if mlir_opt else "not run"
            print(f"{n:>6} {t_irc:>10.4f} {t_irc / n * 1e9:>10.0f} {fused:>6} {status:>16}")
            continue
        t_mlir, generics = mlir
        print(f"{n:>6} {t_irc:>10.4f} {t_irc / n * 1e9:>10.0f} {fused:>6} {t_mlir:>16.4f} {generics:>6} "
              f"{t_mlir / t_irc:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
