"""What threads cost and give: the hand-off of irc's thread pool, and the MLP forward on 1 and N threads.

    python benchmarks/thread_profile.py [--threads 2] [--rounds 10] [--quick]

Two measurements, in one process:

* **hand-off**: a function of 64 calls of a tiny parallel loop (two trips), each call marked
  ``chunks = 2`` (runtime/cpu/pool.py runs it on two threads), against the same calls unmarked
  (one thread, a plain call).  The difference per loop is what publishing a loop to the pool
  and waiting for its chunks costs while the worker spins for work (the case between the
  loops of one model call; with chunks this small the caller often takes both).  Also timed:
  the first call after a pause longer than the spin, when the worker sleeps and must be woken.
* **MLP**: tensor_cpu.py's MLP forward on one thread and on ``--threads N``, interleaved;
  wall medians and bests (which need every core free: on a shared machine they say little)
  and whether the bits agree.
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
import time  # noqa: E402

import numpy as np  # noqa: E402
from irc.runtime.cpu import pool  # noqa: E402

import irc  # noqa: E402

CALLS = 64


def handoff_program(chunked: bool) -> str:
    """``@f``: CALLS calls of a two-trip parallel segment, with ``chunks = 2`` or without."""
    mark = " {chunks = 2 : i64}" if chunked else ""
    calls = "\n".join(f"  func.call @f.seg(%a, %c0, %c2){mark} : (memref<2xf32>, index, index) -> ()"
                      for _ in range(CALLS))
    return f"""
func.func @f(%a: memref<2xf32>) {{
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
{calls}
  func.return
}}

func.func private @f.seg(%a: memref<2xf32>, %lo: index, %hi: index)
    attributes {{parallel_range = [0 : i64, 2 : i64, 1 : i64], noinline}} {{
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  scf.for %i = %lo to %hi step %c1 {{
    %x = memref.load %a[%i] : memref<2xf32>
    %y = arith.addf %x, %one : f32
    memref.store %y, %a[%i] : memref<2xf32>
  }} {{parallel}}
  func.return
}}
"""


def handoff(rounds: int, threads: int) -> None:
    plain = irc.compile(irc.parse(handoff_program(False)), cache=False).f
    split = irc.compile(irc.parse(handoff_program(True)), cache=False).f
    pool.ensure_workers(threads)
    a = np.zeros(2, np.float32)
    times: dict = {"plain": [], "spinning": [], "asleep": []}
    for _ in range(rounds * 20):
        for name, f in (("plain", plain), ("spinning", split)):
            start = time.perf_counter()
            f(a)
            times[name].append(time.perf_counter() - start)
    times["idle plain"] = []
    for _ in range(rounds):
        for name, f in (("idle plain", plain), ("asleep", split)):
            time.sleep(0.01)  # past the workers' spin: they sleep (and this thread's core idles)
            start = time.perf_counter()
            f(a)
            times[name].append(time.perf_counter() - start)
    assert a[0] == a[1] == CALLS * (rounds * 20 * 2 + rounds * 2)
    base = statistics.median(times["plain"])
    print(f"hand-off: {CALLS} calls of a 2-trip loop: one thread {base * 1e6:.1f} us a function call; "
          f"chunked, worker polling {statistics.median(times['spinning']) * 1e6:.1f} us "
          f"({(statistics.median(times['spinning']) - base) / CALLS * 1e6:.2f} us more a loop); "
          f"after 10 ms idle: one thread {statistics.median(times['idle plain']) * 1e6:.1f} us, "
          f"chunked (the worker asleep) {statistics.median(times['asleep']) * 1e6:.1f} us")


def mlp(rounds: int, threads: int, quick: bool) -> bool:
    layers, batch, width = (4, 64, 256) if quick else (16, 256, 1024)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((batch, width)).astype(np.float32)]
    for _ in range(layers):
        args += [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                 rng.standard_normal(width).astype(np.float32)]
    text = tc.mlp_ir(layers)
    one = irc.compile(irc.parse(text), threads=1, cache=False).mlp
    many = irc.compile(irc.parse(text), threads=threads, cache=False).mlp
    same = bool(np.array_equal(one(*args), many(*args)))
    module, _ = many.lower(tuple(a.shape for a in args))
    chunked = sum(1 for f in module.functions if not f.is_declaration for op in f.walk()
                  if op.name == "func.call" and "chunks" in op.attributes)
    walls: dict = {1: [], threads: []}
    for _ in range(rounds):
        for n, f in ((1, one), (threads, many)):
            start = time.perf_counter()
            f(*args)
            walls[n].append(time.perf_counter() - start)
    print(f"MLP forward {layers} x {width}, batch {batch}: {chunked} parallel calls")
    w1, wn = (sorted(walls[t]) for t in (1, threads))
    for label, k in (("median", len(w1) // 2), ("best", 0)):
        print(f"wall, {label}: 1 thread {w1[k] * 1e3:.1f} ms, {threads} threads {wn[k] * 1e3:.1f} ms "
              f"({w1[k] / wn[k]:.2f}x)")
    print(f"same bits on {threads} threads: {same}")
    return same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="4 layers, width 256")
    opts = ap.parse_args(argv)
    info = tc.machine()
    print(f"thread_profile: {info['cpu']}, cores {sorted(os.sched_getaffinity(0))}, irc {info['irc']}; "
          f"load {os.getloadavg()[0]:.2f}")
    handoff(opts.rounds, opts.threads)
    return 0 if mlp(opts.rounds, opts.threads, opts.quick) else 1


if __name__ == "__main__":
    sys.exit(main())
