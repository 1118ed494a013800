"""Where the second thread waits: the MLP forward of tensor_cpu.py on one thread and on N.

    python benchmarks/thread_profile.py [--threads 2] [--rounds 10] [--quick]

Wall times need every core free; on a shared machine they say little.  So the script also
times what does not depend on that, per call of the N-thread forward pass: for each
parallel segment the largest of its chunks' thread CPU times (``time.thread_time`` around
each chunk's C call, on whichever thread ran it), and the calling thread's CPU outside its
own chunks (the hand-offs between segments, which the other threads wait through).  Their
sum is the call's critical path in CPU time; the one-thread call's CPU time over it bounds
the speedup that N free cores would give (it still counts other jobs' cache traffic).
Each chunk runs as ``runtime/tensor_function._run_plan`` runs it; only its C function is
wrapped for the timing.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

os.environ["IRC_BENCH_ALL_CORES"] = "1"  # before tensor_cpu pins the process to one core
sys.path.insert(0, str(Path(__file__).resolve().parent))
tc = importlib.import_module("tensor_cpu")  # sets the thread variables first

import argparse  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from irc.runtime import tensor_function as tf  # noqa: E402

import irc  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="4 layers, width 256")
    opts = ap.parse_args(argv)
    layers, batch, width = (4, 64, 256) if opts.quick else (16, 256, 1024)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((batch, width)).astype(np.float32)]
    for _ in range(layers):
        args += [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                 rng.standard_normal(width).astype(np.float32)]
    text = tc.mlp_ir(layers)
    one = irc.compile(irc.parse(text), threads=1, cache=False).mlp
    many = irc.compile(irc.parse(text), threads=opts.threads, cache=False).mlp
    same = bool(np.array_equal(one(*args), many(*args)))

    chunks: list = []  # (thread id, CPU seconds) of each chunk, in the order they finished
    ends: list = []  # len(chunks) after each segment

    def timed(c_function):
        def run(*a):
            start = time.thread_time()
            status = c_function(*a)
            chunks.append((threading.get_ident(), time.thread_time() - start))
            return status
        return run

    plan, run_plan = tf._plan, tf._run_plan
    tf._plan = lambda spec, threads: [(timed(c), fault, at, parts) for c, fault, at, parts in plan(spec, threads)]

    def each_segment(steps, call, threads):
        for step in steps:
            run_plan([step], call, threads)
            ends.append(len(chunks))
    tf._run_plan = each_segment
    walls: dict = {1: [], opts.threads: []}
    cpu_one, critical, handoffs = [], [], []
    for _ in range(opts.rounds):
        start, cpu = time.perf_counter(), time.thread_time()
        one(*args)
        walls[1].append(time.perf_counter() - start)
        cpu_one.append(time.thread_time() - cpu)
        chunks.clear()
        ends.clear()
        start, cpu = time.perf_counter(), time.thread_time()
        many(*args)
        walls[opts.threads].append(time.perf_counter() - start)
        caller = time.thread_time() - cpu
        mine = sum(t for who, t in chunks if who == threading.get_ident())
        groups = [chunks[a:b] for a, b in zip([0, *ends], ends)]
        critical.append(sum(max(t for _, t in g) for g in groups if g) + caller - mine)
        handoffs.append(caller - mine)
    tf._plan, tf._run_plan = plan, run_plan
    info = tc.machine()
    segments = len(next(iter(many._specializations.values())).segments)
    print(f"thread_profile: {info['cpu']}, cores {sorted(os.sched_getaffinity(0))}, irc {info['irc']}; "
          f"load {os.getloadavg()[0]:.2f}; MLP forward {layers} x {width}, batch {batch}; {segments} segments")
    t1 = statistics.median(cpu_one)
    cp = statistics.median(critical)
    print(f"1 thread: CPU {t1 * 1e3:.1f} ms a call; {opts.threads} threads: critical path {cp * 1e3:.1f} ms, "
          f"of it the caller's hand-offs {statistics.median(handoffs) * 1e3:.2f} ms; speedup bound {t1 / cp:.3f}")
    w1, wn = (sorted(walls[t]) for t in (1, opts.threads))
    for label, k in (("median", len(w1) // 2), ("best", 0)):
        print(f"wall, {label}: 1 thread {w1[k] * 1e3:.1f} ms, {opts.threads} threads {wn[k] * 1e3:.1f} ms "
              f"({w1[k] / wn[k]:.2f}x)")
    print(f"same bits on {opts.threads} threads: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
