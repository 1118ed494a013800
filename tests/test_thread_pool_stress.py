"""Adversarial checks of irc's thread pool (runtime/cpu/pool.py) and of calls with ``chunks``.

Every result is checked against the interpreter (which runs a call with ``chunks`` whole) or
numpy: ranges with negative bounds and steps, one trip, no trip, more chunks than trips; calls
after the workers went to sleep; several Python threads calling different functions and
faulting in different chunks at once; a parallel segment whose body calls another function
with chunks (the pool is busy: the inner call must run by itself, not wait); a fork while
other threads are inside threaded calls (the child must finish).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from irc.runtime.cpu import pool
from test_thread_pool import CALLER

import irc
from irc.diagnostics import ExecutionError
from irc.interpreter import interpret

# out[i - lb] = a[i - lb] / b[i - lb] for i in [lb, ub) by step: a zero in b faults in its chunk.
SHIFTED = CALLER + """
  %base = arith.constant {lb} : index
  scf.for %i = %lo to %hi step %step {{
    %k = arith.subi %i, %base : index
    %x = memref.load %a[%k] : memref<{n}xi32>
    %y = memref.load %b[%k] : memref<{n}xi32>
    %q = arith.divsi %x, %y : i32
    memref.store %q, %out[%k] : memref<{n}xi32>
  }} {{parallel}}
  func.return
}}
"""

# A parallel segment over rows whose body calls @row, itself a function with a chunked call over
# the row's columns: out[i, j] = a[i, j] * 3 + i.
NESTED = """
func.func @f(%a: memref<{r}x{c}xi64>, %out: memref<{r}x{c}xi64>) {{
  %lb = arith.constant 0 : index
  %ub = arith.constant {r} : index
  func.call @f.seg0(%a, %out, %lb, %ub) {{chunks = {chunks} : i64}}
      : (memref<{r}x{c}xi64>, memref<{r}x{c}xi64>, index, index) -> ()
  func.return
}}

func.func private @f.seg0(%a: memref<{r}x{c}xi64>, %out: memref<{r}x{c}xi64>, %lo: index, %hi: index)
    attributes {{parallel_range = [0 : i64, {r} : i64, 1 : i64], noinline}} {{
  %one = arith.constant 1 : index
  scf.for %i = %lo to %hi step %one {{
    func.call @row(%a, %out, %i) : (memref<{r}x{c}xi64>, memref<{r}x{c}xi64>, index) -> ()
  }} {{parallel}}
  func.return
}}

func.func @row(%a: memref<{r}x{c}xi64>, %out: memref<{r}x{c}xi64>, %i: index) {{
  %lb = arith.constant 0 : index
  %ub = arith.constant {c} : index
  func.call @row.seg0(%a, %out, %i, %lb, %ub) {{chunks = {chunks} : i64}}
      : (memref<{r}x{c}xi64>, memref<{r}x{c}xi64>, index, index, index) -> ()
  func.return
}}

func.func private @row.seg0(%a: memref<{r}x{c}xi64>, %out: memref<{r}x{c}xi64>, %i: index, %lo: index, %hi: index)
    attributes {{parallel_range = [0 : i64, {c} : i64, 1 : i64], noinline}} {{
  %one = arith.constant 1 : index
  %three = arith.constant 3 : i64
  %ii = arith.index_cast %i : index to i64
  scf.for %j = %lo to %hi step %one {{
    %x = memref.load %a[%i, %j] : memref<{r}x{c}xi64>
    %y = arith.muli %x, %three : i64
    %z = arith.addi %y, %ii : i64
    memref.store %z, %out[%i, %j] : memref<{r}x{c}xi64>
  }} {{parallel}}
  func.return
}}
"""


def _shifted(lb, ub, step, chunks):
    n = max(ub - lb, 1)
    return SHIFTED.format(n=n, lb=lb, ub=ub, step=step, chunks=chunks), n


def _operands(n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-10**6, 10**6, n, dtype=np.int32), rng.integers(1, 100, n, dtype=np.int32)


def _want(text, name, *args, out):
    interpret(irc.parse(text), name, *args, out)
    return out


RANGES = [(-1000, -3, 1, 2), (-500, 500, 3, 5), (-7, 9, 5, 4), (-3, -2, 1, 2), (4, 4, 1, 2), (-4, -9, 1, 3),
          (-100, 100, 1000, 8), (-10, 10, 1, 32768), (0, 3, 1, 32768), (-2**40, -2**40 + 999, 7, 6)]


@pytest.mark.parametrize("lb,ub,step,chunks", RANGES)
def test_ranges_with_negative_bounds_steps_and_more_chunks_than_trips(lb, ub, step, chunks):
    text, n = _shifted(lb, ub, step, chunks)  # the memref index is i - lb: any base keeps it small
    a, b = _operands(n, 5)
    want = _want(text, "f", a, b, out=np.full(n, -7, np.int32))
    exe = irc.compile(irc.parse(text))
    pool.ensure_workers(2)
    for _ in range(10):
        got = np.full(n, -7, np.int32)
        exe.f(a, b, got)
        np.testing.assert_array_equal(got, want)


# out[(i - lb) / step] = i over a range whose span needs all 64 bits: the chunk arithmetic must not wrap.
WIDE = """
func.func @f(%out: memref<{n}xi64>) {{
  %lb = arith.constant {lb} : index
  %ub = arith.constant {ub} : index
  func.call @f.seg0(%out, %lb, %ub) {{chunks = {chunks} : i64}} : (memref<{n}xi64>, index, index) -> ()
  func.return
}}

func.func private @f.seg0(%out: memref<{n}xi64>, %lo: index, %hi: index)
    attributes {{parallel_range = [{lb} : i64, {ub} : i64, {step} : i64], noinline}} {{
  %step = arith.constant {step} : index
  %base = arith.constant {lb} : index
  scf.for %i = %lo to %hi step %step {{
    %d = arith.subi %i, %base : index
    %k = arith.divui %d, %step : index
    %v = arith.index_cast %i : index to i64
    memref.store %v, %out[%k] : memref<{n}xi64>
  }} {{parallel}}
  func.return
}}
"""


@pytest.mark.parametrize("lb,ub,step,chunks", [(-2**62, 2**62, 2**59, 3), (-2**63, 2**63 - 2**61, 2**61, 5),
                                               (2**63 - 10, 2**63 - 1, 3, 2), (-2**63, -2**63 + 5, 1, 4),
                                               (-2**63 + 1, 2**63 - 2**62, 2**62 - 1, 7),
                                               (-2**63, 2**63 - 2**62, 2**60, 3)])
def test_ranges_spanning_most_of_int64(lb, ub, step, chunks):
    trips = (ub - lb + step - 1) // step
    text = WIDE.format(n=trips, lb=lb, ub=ub, step=step, chunks=chunks)
    want = _want(text, "f", out=np.zeros(trips, np.int64))
    np.testing.assert_array_equal(want, np.arange(trips, dtype=object) * step + lb)
    exe = irc.compile(irc.parse(text))
    pool.ensure_workers(2)
    for _ in range(10):
        got = np.zeros(trips, np.int64)
        exe.f(got)
        np.testing.assert_array_equal(got, want)


def test_calls_after_the_workers_went_to_sleep():
    """Between calls the workers spin, poll, then sleep on the condition variable; each call
    must still finish (woken or not) with the right result."""
    text, n = _shifted(-300, 2000, 3, 4)
    a, b = _operands(n, 6)
    want = _want(text, "f", a, b, out=np.zeros(n, np.int32))
    exe = irc.compile(irc.parse(text))
    pool.ensure_workers(2)
    for pause in (0.0, 0.01, 0.0, 0.02, 0.0, 0.01, 0.001, 0.01):
        time.sleep(pause)
        got = np.zeros(n, np.int32)
        exe.f(a, b, got)
        np.testing.assert_array_equal(got, want)


def test_a_nested_chunked_call_runs_by_itself_and_does_not_deadlock():
    text = NESTED.format(r=37, c=501, chunks=3)
    a = np.random.default_rng(7).integers(-10**9, 10**9, (37, 501), dtype=np.int64)
    np.testing.assert_array_equal(_want(text, "f", a, out=np.zeros((37, 501), np.int64)),
                                  a * 3 + np.arange(37)[:, None])
    exe = irc.compile(irc.parse(text))
    pool.ensure_workers(2)
    done = []

    def run():
        for _ in range(30):
            got = np.zeros((37, 501), np.int64)
            exe.f(a, got)
            done.append(np.array_equal(got, a * 3 + np.arange(37)[:, None]))
            exe.row(a, got, 5)  # the inner function alone takes the pool
    callers = [threading.Thread(target=run, daemon=True) for _ in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(60)
    assert not any(t.is_alive() for t in callers), "a nested parallel call hung"
    assert len(done) == 90 and all(done)


def test_faults_in_random_chunks_from_several_threads_report_what_one_thread_reports():
    """Four Python threads call four functions (different ranges and chunk counts) whose zero
    divisors sit in random chunks; each error must be the interpreter's (the first zero in range
    order), whichever thread holds the pool and whichever chunk finishes first."""
    cases = [(-800, 800, 1, 3), (0, 1600, 3, 7), (-50, 3000, 2, 2), (-1, 1200, 5, 16)]
    compiled = [(irc.compile(irc.parse(_shifted(*c)[0])), *_shifted(*c)) for c in cases]
    pool.ensure_workers(2)
    failures = []

    def caller(k):
        exe, text, n = compiled[k]
        lb, ub, step, _ = cases[k]
        rng = np.random.default_rng(100 + k)
        for _ in range(12):
            a, b = _operands(n, int(rng.integers(1 << 30)))
            visited = np.arange(0, ub - lb, step)
            for z in rng.choice(visited, int(rng.integers(0, 4)), replace=False):
                b[z] = 0
            want = np.zeros(n, np.int32)
            try:
                interpret(irc.parse(text), "f", a, b, want)
                wanted = None
            except ExecutionError as err:
                wanted = str(err)
            got = np.zeros(n, np.int32)
            try:
                exe.f(a, b, got)
                found = None
            except ExecutionError as err:
                found = str(err)
            if found != wanted or (wanted is None and not np.array_equal(got, want)):
                failures.append((k, wanted, found))
    callers = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(120)
    assert not any(t.is_alive() for t in callers)
    assert not failures, failures[:3]


TENSOR = """
func.func @g(%x: tensor<{r}x{c}xf32>, %y: tensor<{r}x{c}xf32>) -> tensor<{r}x{c}xf32> {{
  %s = arith.mulf %x, %y : tensor<{r}x{c}xf32>
  %t = math.tanh %s : tensor<{r}x{c}xf32>
  %u = arith.addf %t, %x : tensor<{r}x{c}xf32>
  func.return %u : tensor<{r}x{c}xf32>
}}
"""


def _chunked_calls(function, shapes) -> list:
    """The calls with ``chunks`` in ``function``'s specialisation for ``shapes`` (so that a test
    of the pool cannot pass by running on one thread)."""
    module, _ = function.lower(shapes)
    return [op for f in module.functions if not f.is_declaration for op in f.walk()
            if op.name == "func.call" and "chunks" in op.attributes]


def test_many_python_threads_calling_different_threaded_functions():
    shapes = [(512, 256), (300, 333), (1024, 64)]
    exes = [irc.compile(irc.parse(TENSOR.format(r=r, c=c)), threads=2) for r, c in shapes]
    ones = [irc.compile(irc.parse(TENSOR.format(r=r, c=c)), threads=1) for r, c in shapes]
    assert all(_chunked_calls(exe.g, (shape, shape)) for exe, shape in zip(exes, shapes))
    failures = []

    def caller(k):
        rng = np.random.default_rng(k)
        shape = shapes[k % 3]
        x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        want = ones[k % 3].g(x, y)
        np.testing.assert_allclose(want, np.tanh(x * y) + x, rtol=1e-5, atol=1e-5)
        for _ in range(40):
            if not np.array_equal(exes[k % 3].g(x, y), want):
                failures.append(k)
    callers = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(6)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(120)
    assert not any(t.is_alive() for t in callers)
    assert not failures


FORK = """
import os, signal, sys, threading
import numpy as np
import irc
from irc.interpreter import interpret
sys.path.insert(0, {tests!r})
from test_thread_pool_stress import _shifted, _operands

text, n = _shifted(-1000, 30000, 1, 2)
exe = irc.compile(irc.parse(text))
a, b = _operands(n, 1)
want = np.zeros(n, np.int32)
interpret(irc.parse(text), "f", a, b, want)
exe.f(a, b, np.zeros(n, np.int32))
stop = False

def busy():
    while not stop:
        got = np.zeros(n, np.int32)
        exe.f(a, b, got)
        assert np.array_equal(got, want)

others = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
for t in others:
    t.start()
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        ok = True
        for _ in range(20):
            got = np.zeros(n, np.int32)
            exe.f(a, b, got)
            ok = ok and np.array_equal(got, want)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        print("child status", status)
        sys.exit(1)
stop = True
for t in others:
    t.join()
print("ok")
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork")
def test_fork_while_other_threads_run_threaded_calls():
    import os

    script = FORK.format(tests=os.path.dirname(__file__))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


FIRST_USE = """
import threading
from irc.runtime.cpu import pool
got = []
barrier = threading.Barrier(4)

def first_use():
    barrier.wait()
    got.append(pool.pool())

threads = [threading.Thread(target=first_use) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len({id(p) for p in got}))
"""


def test_threads_that_first_use_the_pool_at_once_get_one_pool():
    """Two pools would each have their own job slot: a module linked against one that is not
    the cached pool would never get a worker (ensure_workers starts the cached pool's)."""
    import os

    proc = subprocess.run([sys.executable, "-c", FIRST_USE], capture_output=True, text=True, timeout=60,
                          env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"


def test_wake_ups_racing_with_jobs_from_several_threads():
    """Each call of a threaded function wakes sleeping workers on entry (irc.pool_wake) while
    other threads publish jobs; pauses long enough for the workers to fall asleep between some
    calls. No call may hang or get another's result."""
    text = TENSOR.format(r=256, c=512)
    exe = irc.compile(irc.parse(text), threads=2)
    one = irc.compile(irc.parse(text), threads=1)
    assert _chunked_calls(exe.g, ((256, 512), (256, 512)))
    failures = []

    def caller(k):
        rng = np.random.default_rng(50 + k)
        x, y = (rng.standard_normal((256, 512)).astype(np.float32) for _ in range(2))
        want = one.g(x, y)
        for pause in rng.choice([0.0, 0.0005, 0.002, 0.01], 25):
            time.sleep(pause)
            if not np.array_equal(exe.g(x, y), want):
                failures.append(k)
    callers = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(60)
    assert not any(t.is_alive() for t in callers), "a call hung"
    assert not failures


# @r recurses through a call with chunks: its segment's body calls @r again.
RECURSIVE = """
func.func @r(%out: memref<2xi64>, %n: index) {
  %zero = arith.constant 0 : index
  %more = arith.cmpi sgt, %n, %zero : index
  scf.if %more {
    %lb = arith.constant 0 : index
    %ub = arith.constant 2 : index
    func.call @r.seg0(%out, %n, %lb, %ub) {chunks = 2 : i64} : (memref<2xi64>, index, index, index) -> ()
  }
  func.return
}

func.func private @r.seg0(%out: memref<2xi64>, %n: index, %lo: index, %hi: index)
    attributes {parallel_range = [0 : i64, 2 : i64, 1 : i64], noinline} {
  %one = arith.constant 1 : index
  %zero0 = arith.constant 0 : index
  scf.for %i = %lo to %hi step %one {
    %m = arith.subi %n, %one : index
    %x = memref.load %out[%i] : memref<2xi64>
    %c1 = arith.constant 1 : i64
    %y = arith.addi %x, %c1 : i64
    memref.store %y, %out[%i] : memref<2xi64>
    %is0 = arith.cmpi eq, %i, %zero0 : index
    scf.if %is0 {
      func.call @r(%out, %m) : (memref<2xi64>, index) -> ()
    }
  } {parallel}
  func.return
}
"""

RECURSE = """
import sys
import numpy as np
import irc
sys.path.insert(0, {tests!r})
from test_thread_pool_stress import RECURSIVE
exe = irc.compile(irc.parse(RECURSIVE.replace("{{chunks = 2 : i64}}", {chunks!r})))
try:
    exe.r(np.zeros(2, np.int64), 10**6)
except irc.diagnostics.ExecutionError as err:
    print(str(err).splitlines()[0])
"""


@pytest.mark.parametrize("chunks", [
    "",
    "{chunks = 2 : i64}",  # was a segfault: each chunk enters its segment at depth 0
])
def test_recursion_through_a_chunked_call_is_an_error_not_a_crash(chunks):
    import os

    a, out = np.zeros(2, np.int64), np.zeros(2, np.int64)
    interpret(irc.parse(RECURSIVE), "r", a, 10)
    irc.compile(irc.parse(RECURSIVE)).r(out, 10)
    np.testing.assert_array_equal(out, a)
    script = RECURSE.format(tests=os.path.dirname(__file__), chunks=chunks)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "call depth exceeds" in proc.stdout, (proc.returncode, proc.stdout)
