"""Parallel loops on a shared OpenMP team (pool.share_openmp): a team of one
(OMP_NUM_THREADS=1), sharing given up while idle and taken again, and OMP_STACKSIZE's bound."""

from __future__ import annotations

import pytest
from irc.runtime.cpu import stack
from test_thread_pool_openmp import _run, needs_gomp


@needs_gomp
def test_a_team_of_one_runs_every_chunk():
    out = _run("""
        for case in [(0, 1000, 1, 2), (3, 998, 3, 64), (5, 9, 1, 16), (0, 1000, 7, 3)]:
            check(*case)
        print(pool.pool().workers)
    """, threads=1)
    assert int(out) == 0


@needs_gomp
def test_sharing_stopped_while_idle_and_taken_again_keeps_the_results():
    _run("""
        import ctypes.util
        check(0, 1000, 1, 4)
        pool.ensure_workers(2)
        for _ in range(3):
            pool.pool().stop_sharing()
            assert pool.pool().openmp is None and pool.pool().workers == 1
            check(0, 1000, 1, 4)
            check(3, 998, 3, 5)
            assert pool.pool().share_openmp(ctypes.util.find_library("gomp"))
            check(0, 1000, 1, 4)
            check(5, 9, 1, 16)
    """, threads=2)


@pytest.mark.parametrize("setting, size", [("64k", 64 << 10), ("1M", 1 << 20), ("512", 512 << 10),
                                           (" 2 m ", 2 << 20), ("4096B", 4096), ("1g", 1 << 30)])
def test_omp_stacksize_is_read_as_libgomp_reads_it(monkeypatch, setting, size):
    monkeypatch.setenv("OMP_STACKSIZE", setting)
    assert stack._openmp_stack_size() == size
    assert stack.stack_budget() <= max(stack.MIN_BUDGET, size)


def test_gomp_stacksize_bounds_the_budget_where_omp_stacksize_is_not_set(monkeypatch):
    """GNU libgomp (torch's) sizes its team's stacks by GOMP_STACKSIZE when OMP_STACKSIZE is unset."""
    monkeypatch.delenv("OMP_STACKSIZE", raising=False)
    monkeypatch.setenv("GOMP_STACKSIZE", "96")
    assert stack._openmp_stack_size() == 96 << 10
    assert stack.stack_budget() == stack.MIN_BUDGET
    monkeypatch.setenv("OMP_STACKSIZE", "3m")  # OMP_STACKSIZE first, as libgomp reads them
    assert stack._openmp_stack_size() == 3 << 20


@needs_gomp
@pytest.mark.parametrize("share, threads", [(True, "2"), (False, "2"), (True, "2,2")])
def test_a_chunk_that_calls_a_chunked_function_computes_what_the_interpreter_does(share, threads):
    """Nested chunked calls: on the team, the inner call is OpenMP's nested region (a team of
    one by default, two nested teams with OMP_NUM_THREADS=2,2); on irc's workers the busy pool runs it serially."""
    _run("""
        from test_thread_pool import SEGMENT, CALLER
        n = 1000
        inner = SEGMENT.format(n=n, lb=0, ub=n, step=1, chunks=3, half=n // 2).replace("@f", "@g")
        outer = CALLER.format(n=n, lb=0, ub=4, step=1, chunks=2) + (
            "  func.call @g(%a, %b, %out) : (memref<1000xi32>, memref<1000xi32>, memref<1000xi32>) -> ()\\n"
            "  func.return\\n}\\n")
        text = outer + inner
        pool.ensure_workers(2)
        a, b = _operands(n)
        want = np.full(n, -7, np.int32)
        interpret(irc.parse(text), "f", a, b, want)
        exe = irc.compile(irc.parse(text))
        for _ in range(20):
            got = np.full(n, -7, np.int32)
            exe.f(a, b, got)
            np.testing.assert_array_equal(got, want)
        b[10] = 0  # a fault in the inner call, inside an outer chunk
        try:
            exe.f(a, b, np.zeros(n, np.int32))
            raise SystemExit("no fault")
        except ExecutionError as e:
            assert "divsi" in str(e), str(e)
    """, threads=threads, share=share)
