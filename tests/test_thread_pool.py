"""irc's thread pool (runtime/cpu/pool.py) and the calls that use it (``chunks``, translate_parallel.py).

A call of a parallel segment with ``chunks = k`` runs its range in k chunks on threads, from the
machine code itself.  Checked against the interpreter (which runs the call whole): the results,
which fault is reported when several chunks fault (the first in range order, as one thread
reports it), calls from several Python threads at once, and the errors for a ``chunks`` that
a hand-written file gets wrong.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from irc.runtime.cpu import pool

import irc
from irc.diagnostics import ExecutionError, IRError
from irc.interpreter import interpret

CALLER = """
func.func @f(%a: memref<{n}xi32>, %b: memref<{n}xi32>, %out: memref<{n}xi32>) {{
  %lb = arith.constant {lb} : index
  %ub = arith.constant {ub} : index
  func.call @f.seg0(%a, %b, %out, %lb, %ub) {{chunks = {chunks} : i64}}
      : (memref<{n}xi32>, memref<{n}xi32>, memref<{n}xi32>, index, index) -> ()
  func.return
}}

func.func private @f.seg0(%a: memref<{n}xi32>, %b: memref<{n}xi32>, %out: memref<{n}xi32>, %lo: index, %hi: index)
    attributes {{parallel_range = [{lb} : i64, {ub} : i64, {step} : i64], noinline}} {{
  %step = arith.constant {step} : index
"""
"""``@f`` calling its segment ``@f.seg0(%a, %b, %out)`` over [lb, ub) in ``chunks``, and the
segment's head: its body (loop over ``%lo``..``%hi`` by ``%step``) and end follow."""

SEGMENT = CALLER + """  %half = arith.constant {half} : index
  scf.for %i = %lo to %hi step %step {{
    %x = memref.load %a[%i] : memref<{n}xi32>
    %y = memref.load %b[%i] : memref<{n}xi32>
    %low = arith.cmpi slt, %i, %half : index
    %q = scf.if %low -> (i32) {{
      %d = arith.divsi %x, %y : i32
      scf.yield %d : i32
    }} else {{
      %r = arith.remsi %x, %y : i32
      scf.yield %r : i32
    }}
    memref.store %q, %out[%i] : memref<{n}xi32>
  }} {{parallel}}
  func.return
}}
"""


def _program(n=1000, lb=0, ub=1000, step=1, chunks=2):
    return SEGMENT.format(n=n, lb=lb, ub=ub, step=step, chunks=chunks, half=n // 2)


def _operands(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-10**6, 10**6, n, dtype=np.int32), rng.integers(1, 100, n, dtype=np.int32)


@pytest.mark.parametrize("lb,ub,step,chunks", [(0, 1000, 1, 2), (0, 1000, 1, 7), (3, 998, 3, 4), (5, 9, 1, 16),
                                               (0, 1000, 7, 3), (999, 1000, 1, 2), (10, 10, 1, 2), (20, 10, 1, 3)])
def test_chunked_calls_compute_what_the_interpreter_does(lb, ub, step, chunks):
    text = _program(lb=lb, ub=ub, step=step, chunks=chunks)
    a, b = _operands(1000)
    want = np.full(1000, -7, np.int32)
    interpret(irc.parse(text), "f", a, b, want)
    exe = irc.compile(irc.parse(text))
    pool.ensure_workers(3)
    for _ in range(20):  # the workers spin, sleep and wake between the calls
        got = np.full(1000, -7, np.int32)
        exe.f(a, b, got)
        np.testing.assert_array_equal(got, want)


def test_the_fault_of_the_first_chunk_in_range_order_is_reported():
    """Zeros at 900 (remsi, chunk 3 of 4) and 300 (divsi, chunk 1): one thread faults at the divsi
    first, and so must four, whichever chunk finishes first."""
    text = _program(chunks=4)
    a, b = _operands(1000, 1)
    b[900] = b[300] = 0
    with pytest.raises(ExecutionError) as want:
        interpret(irc.parse(text), "f", a, b, np.zeros(1000, np.int32))
    exe = irc.compile(irc.parse(text))
    pool.ensure_workers(3)
    for _ in range(20):
        with pytest.raises(ExecutionError) as got:
            exe.f(a, b, np.zeros(1000, np.int32))
        assert str(got.value) == str(want.value)
        assert "divsi" in str(got.value) or got.value.location.line == want.value.location.line
    b[300] = 1
    with pytest.raises(ExecutionError) as got:  # now only the remsi's chunk faults
        exe.f(a, b, np.zeros(1000, np.int32))
    assert got.value.location.line != want.value.location.line


def test_calls_from_several_python_threads_at_once_get_their_own_results():
    """One call holds the pool at a time; the others run their loops themselves."""
    exe = irc.compile(irc.parse(_program(n=20000, ub=20000, chunks=3)))
    pool.ensure_workers(2)
    errors = []

    def caller(seed):
        a, b = _operands(20000, seed)
        want = np.full(20000, 0, np.int32)
        interpret(irc.parse(_program(n=20000, ub=20000, chunks=3)), "f", a, b, want)
        for _ in range(50):
            got = np.zeros(20000, np.int32)
            exe.f(a, b, got)
            if not np.array_equal(got, want):
                errors.append(seed)
    callers = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in callers)


@pytest.mark.parametrize("change,message", [
    (lambda t: t.replace("chunks = 2 : i64", "chunks = 1 : i64"), "'chunks' of a call must be an integer from 2"),
    (lambda t: t.replace("chunks = 2 : i64", "chunks = 100000 : i64"), "from 2 to 32768"),
    (lambda t: t.replace("chunks = 2 : i64", 'chunks = "two"'), "'chunks' of a call must be an integer"),
    (lambda t: t.replace("1000 : i64, 1 : i64]", "1000 : i64, 0 : i64]"), "must call a parallel segment"),
    (lambda t: t.replace("parallel_range = [0 : i64, 1000 : i64, 1 : i64], ", ""), "must call a parallel segment"),
])
def test_a_bad_chunks_attribute_is_an_error_at_the_call(change, message):
    text = change(_program())
    with pytest.raises(IRError, match=message) as err:
        irc.compile(irc.parse(text))
    assert err.value.location.line == 5  # the call


def test_a_bad_chunks_attribute_from_the_command_line(tmp_path):
    path = tmp_path / "bad.ir"
    path.write_text(_program().replace("chunks = 2 : i64", "chunks = 0 : i64"))
    out = tmp_path / "bad.ll"
    proc = subprocess.run([sys.executable, "-m", "irc.cli", "compile", str(path), "--emit", "llvm", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and not out.exists()
    assert f"{path}:5:3: error: 'chunks' of a call must be an integer from 2" in proc.stderr
    assert "^" in proc.stderr


def test_split_parallel_refuses_a_bad_thread_count():
    with pytest.raises(ValueError, match="option 'threads' of pass 'split-parallel' expects 1 to 32768"):
        irc.passes.run(irc.parse(_program()), "split-parallel{threads=0}")
