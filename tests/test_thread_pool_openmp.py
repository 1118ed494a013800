"""Parallel loops on a shared OpenMP team (``pool.share_openmp``; irc.torch shares torch's).

Sharing changes the whole process, so each test runs in a child interpreter: it loads the
system's GNU libgomp (torch's own where torch is installed), shares it, and checks chunked
calls against the interpreter: results over odd ranges, the first fault in range order, calls
from several Python threads, a forked child (which goes back to irc's own workers), and that the
team's threads, not irc's, ran the loop.
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOMP = ctypes.util.find_library("gomp")
needs_gomp = pytest.mark.skipif(GOMP is None, reason="no GNU libgomp on this machine")

PRELUDE = f"""
import ctypes, os, sys, threading
import numpy as np
sys.path.insert(0, {str(Path(__file__).parent)!r})
import irc
from irc.runtime.cpu import pool
from irc.interpreter import interpret
from irc.diagnostics import ExecutionError
from test_thread_pool import _program, _operands


def check(lb, ub, step, chunks, n=1000):
    text = _program(n=n, lb=lb, ub=ub, step=step, chunks=chunks)
    a, b = _operands(n)
    want = np.full(n, -7, np.int32)
    interpret(irc.parse(text), "f", a, b, want)
    exe = irc.compile(irc.parse(text))
    for _ in range(10):
        got = np.full(n, -7, np.int32)
        exe.f(a, b, got)
        np.testing.assert_array_equal(got, want)
"""

SHARE_GOMP = f"""
gomp = ctypes.CDLL({GOMP!r})
assert pool.pool().share_openmp({GOMP!r}), "libgomp was loaded: sharing it must work"
"""


def _run(body: str, threads: int = 3, share: bool = True) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-c", PRELUDE + (SHARE_GOMP if share else "") + textwrap.dedent(body)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@needs_gomp
def test_chunked_calls_on_an_openmp_team_compute_what_the_interpreter_does():
    out = _run("""
        for case in [(0, 1000, 1, 2), (0, 1000, 1, 7), (3, 998, 3, 4), (5, 9, 1, 16), (0, 1000, 7, 3),
                     (999, 1000, 1, 2), (10, 10, 1, 2), (20, 10, 1, 3), (0, 1000, 1, 64)]:
            check(*case)
        # libgomp started its team for these calls (irc started no worker): 3 threads in all
        print(len(os.listdir("/proc/self/task")), pool.pool().workers)
    """)
    threads, workers = map(int, out.split())
    assert workers == 0 and threads >= 3


@needs_gomp
def test_the_first_fault_in_range_order_is_reported_from_the_team():
    _run("""
        text = _program(chunks=4)
        a, b = _operands(1000, 1)
        b[900] = b[300] = 0
        try:
            interpret(irc.parse(text), "f", a, b, np.zeros(1000, np.int32))
        except ExecutionError as e:
            want = str(e)
        exe = irc.compile(irc.parse(text))
        for _ in range(20):
            try:
                exe.f(a, b, np.zeros(1000, np.int32))
                raise SystemExit("no fault")
            except ExecutionError as e:
                assert str(e) == want, (str(e), want)
        assert "divsi" in want
    """)


@needs_gomp
def test_calls_from_several_python_threads_each_get_a_team():
    _run("""
        errors = []
        def caller(seed):
            try:
                check(0, 20000, 1, 3, n=20000)
            except AssertionError:
                errors.append(seed)
        callers = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
        for t in callers: t.start()
        for t in callers: t.join()
        assert not errors, errors
    """)


@needs_gomp
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_runs_its_loops_on_irc_workers():
    """libgomp's team does not survive a fork: the child gives it up and starts irc's workers."""
    _run("""
        check(0, 1000, 1, 4)
        pool.ensure_workers(2)  # threads=2: one worker, in the child (none while sharing)
        pid = os.fork()
        if pid == 0:
            try:
                assert pool.pool().openmp is None and pool.pool().workers == 1
                check(0, 1000, 1, 4)
            except BaseException as e:
                print(repr(e), pool.pool().openmp, pool.pool().workers, file=sys.stderr, flush=True)
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        check(0, 1000, 1, 4)
        pool.pool().stop_sharing()  # and back to irc's workers in this process too
        assert pool.pool().openmp is None and pool.pool().workers == 1
        check(0, 1000, 1, 4)
    """)


def test_sharing_a_library_that_is_not_loaded_changes_nothing():
    _run("""
        assert not pool.pool().share_openmp("libirc-no-such-openmp.so.1")
        assert not pool.pool().share_openmp("libc.so.6")  # loaded, but no GOMP_parallel
        assert pool.pool().openmp is None
    """, share=False)


def test_the_torch_backend_shares_torchs_team_and_computes_eagers_numbers():
    pytest.importorskip("torch")
    out = _run("""
        import torch
        import warnings
        from irc.torch.runtime import share_torch_threads
        torch.manual_seed(0)
        torch.set_num_threads(2)
        net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
        x = torch.randn(64, 256)
        fn = torch.compile(net, backend="irc", options={"threads": 2})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = fn(x)
        torch.testing.assert_close(got, net(x), rtol=1e-5, atol=1e-5)
        print(pool.pool().openmp)
    """, threads=2, share=False)
    assert "libtorch_cpu" in out
