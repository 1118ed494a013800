"""Compiled code is memory-safe where the interpreter reports a fault, and says the same.

Each program here once crashed the JIT or silently corrupted memory (issue 11, items
1-3): a buffer size that wraps, a view past its source, a large or looping alloca,
deep recursion with large frames, ``memref.dealloc`` of something ``memref.alloc``
did not allocate, twice, or a use after free.  The interpreter and the JIT must
report the same message at the same op; the stack is a resource only compiled
code has, so there the interpreter may run to the end.  The JIT runs in a child
process, so that a crash fails the test instead of killing pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import irc
from irc.interpreter import MAX_CALL_DEPTH

_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import irc
    job = json.loads(sys.stdin.read())
    exe = irc.compile(irc.parse(job["text"], "prog.ir"), cache=False, **job["options"])
    out = []
    for args in job["calls"]:
        args = [np.zeros(a["zeros"], dtype=a["dtype"]) if isinstance(a, dict) else a for a in args]
        try:
            result = exe[job["name"]](*args)
            out.append({"kind": "ok", "result": result if isinstance(result, (int, float)) else None})
        except irc.IRError as e:
            out.append({"kind": "error", "message": e.message, "at": [e.location.line, e.location.column]})
    print(json.dumps(out))
""")


def jit(text: str, *calls, name: str = "f", bounds_checks: bool = False, threads: int | None = None,
        opt_level: int = 2) -> list:
    """Run ``@name`` compiled, once per argument tuple in ``calls``, in a child process."""
    options = {"bounds_checks": bounds_checks, "opt_level": opt_level}
    if threads is not None:
        options["threads"] = threads
    job = {"text": text, "name": name, "calls": [list(c) for c in calls], "options": options}
    child = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(job), capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, f"the JIT died (status {child.returncode}): {child.stderr[-2000:]}"
    return json.loads(child.stdout)


def interp(text: str, *args, name: str = "f") -> dict:
    args = [np.zeros(a["zeros"], dtype=a["dtype"]) if isinstance(a, dict) else a for a in args]
    try:
        result = irc.interpret(irc.parse(text, "prog.ir"), name, *args)
        return {"kind": "ok", "result": result if isinstance(result, (int, float)) else None}
    except irc.IRError as e:
        return {"kind": "error", "message": e.message, "at": [e.location.line, e.location.column]}


def agree(text: str, *args, expect: str, at: tuple, bounds_checks: bool = False) -> None:
    """The interpreter and the JIT both fault with message ``expect`` at line:column ``at``."""
    want = {"kind": "error", "message": expect, "at": list(at)}
    assert interp(text, *args) == want
    assert jit(text, args, bounds_checks=bounds_checks) == [want]


# -- 1. size arithmetic -------------------------------------------------------------------------

ALLOC = """\
func.func @f(%n: index) -> i64 {
  %m = memref.alloc(%n) : memref<?xi64>
  %c = arith.constant 5 : index
  %v = arith.constant 7 : i64
  memref.store %v, %m[%c] : memref<?xi64>
  %r = memref.load %m[%c] : memref<?xi64>
  memref.dealloc %m : memref<?xi64>
  func.return %r : i64
}
"""

TOO_BIG = "array is too big: memref<?xi64> of these sizes needs more than 2^63 - 1 bytes"


@pytest.mark.parametrize("bounds_checks", [False, True])
def test_an_alloc_whose_byte_size_wraps_faults(bounds_checks):
    agree(ALLOC, 2**61, expect=TOO_BIG, at=(2, 8), bounds_checks=bounds_checks)  # 2**64 bytes: wrapped to 0


def test_alloc_sizes_at_the_edges():
    agree(ALLOC, 2**60, expect=TOO_BIG, at=(2, 8))  # 2**63 bytes: one past the largest
    agree(ALLOC, -1, expect="negative buffer size", at=(2, 8))
    # Fits in an index but in no memory: NULL from calloc, MemoryError from numpy.
    agree(ALLOC, 2**59, expect="out of memory in memref.alloc", at=(2, 8))
    assert interp(ALLOC, 6) == {"kind": "ok", "result": 7}
    assert jit(ALLOC, (6,)) == [{"kind": "ok", "result": 7}]


def test_a_zero_size_counts_as_one():
    """numpy's rule, which both engines follow: an empty buffer's other sizes must still fit."""
    text = """\
func.func @f(%n: index, %k: index) -> index {
  %m = memref.alloc(%n, %k) : memref<?x?xi64>
  %c0 = arith.constant 0 : index
  %d = memref.dim %m, %c0 : memref<?x?xi64>
  memref.dealloc %m : memref<?x?xi64>
  func.return %d : index
}
"""
    for args in [(2**59, 0), (0, 2**59)]:
        assert interp(text, *args) == {"kind": "ok", "result": args[0]}
    assert jit(text, (2**59, 0), (0, 2**59)) == [{"kind": "ok", "result": 2**59}, {"kind": "ok", "result": 0}]
    too_big = "array is too big: memref<?x?xi64> of these sizes needs more than 2^63 - 1 bytes"
    agree(text, 2**60, 0, expect=too_big, at=(2, 8))
    agree(text, 2**31, 2**31, expect=too_big, at=(2, 8))


VIEW = """\
func.func @f(%off: index, %n: index) -> i64 {
  %m = memref.alloc() : memref<16xi8>
  %v = memref.view %m[%off][%n] : memref<16xi8> to memref<?xi64>
  %c = arith.constant 1 : index
  %x = arith.constant 7 : i64
  memref.store %x, %v[%c] : memref<?xi64>
  memref.dealloc %m : memref<16xi8>
  func.return %x : i64
}
"""


@pytest.mark.parametrize("offset, n", [(8, 2**61), (0, 2**62), (8, 2), (-8, 1), (0, -1), (2**62, 2**60)])
def test_a_view_that_does_not_fit_faults(offset, n):
    agree(VIEW, offset, n, expect="memref.view of memref<?xi64> does not fit in its source", at=(3, 8))


def test_a_misaligned_view_faults_in_both_engines():
    agree(VIEW, 3, 1, expect="memref.view of memref<?xi64>: the byte offset is not a multiple of the element "
                             "size (8)", at=(3, 8))


def test_a_view_in_bounds_runs():
    assert interp(VIEW, 0, 2) == {"kind": "ok", "result": 7}
    assert jit(VIEW, (0, 2)) == [{"kind": "ok", "result": 7}]


# -- 2. the stack ---------------------------------------------------------------------------------

ALLOCA = """\
func.func @f(%n: index) -> i64 {
  %m = memref.alloca(%n) : memref<?xi64>
  %c0 = arith.constant 0 : index
  %r = memref.load %m[%c0] : memref<?xi64>
  func.return %r : i64
}
"""

ALLOCA_LOOP = """\
func.func @f(%n: index) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k = arith.constant 4096 : index
  %z = arith.constant 0 : i64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (i64) {
    %m = memref.alloca(%k) : memref<?xi64>
    %j = arith.remui %i, %k : index
    %ii = arith.index_cast %i : index to i64
    memref.store %ii, %m[%j] : memref<?xi64>
    %h0 = arith.muli %j, %j : index
    %h = arith.remui %h0, %k : index
    %v = memref.load %m[%h] : memref<?xi64>
    %a = arith.addi %acc, %v : i64
    scf.yield %a : i64
  }
  func.return %r : i64
}
"""

# @g keeps 1 KiB in its frame across the recursive call.
RECURSION = """\
func.func @g(%n: index) -> i64 {
  %m = memref.alloca() : memref<128xi64>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c127 = arith.constant 127 : index
  %z = arith.constant 0 : i64
  %j = arith.remui %n, %c127 : index
  %done = arith.cmpi eq, %n, %c0 : index
  %r = scf.if %done -> (i64) {
    scf.yield %z : i64
  } else {
    %n1 = arith.subi %n, %c1 : index
    %nn = arith.index_cast %n : index to i64
    memref.store %nn, %m[%j] : memref<128xi64>
    %s = func.call @g(%n1) : (index) -> i64
    %j2 = arith.muli %j, %j : index
    %j3 = arith.remui %j2, %c127 : index
    %v = memref.load %m[%j3] : memref<128xi64>
    %t = arith.addi %s, %v : i64
    scf.yield %t : i64
  }
  func.return %r : i64
}
func.func @f(%n: index) -> i64 {
  %r = func.call @g(%n) : (index) -> i64
  func.return %r : i64
}
"""


def _stack_exhausted(outcome: dict, at: tuple) -> bool:
    return outcome["kind"] == "error" and outcome["message"].startswith("stack exhausted") \
        and outcome["at"] == list(at)


def test_a_large_dynamic_alloca_is_an_error_not_a_crash():
    small, large, wrapped = jit(ALLOCA, (1000,), (2**30,), (2**61,))
    assert small == {"kind": "ok", "result": 0}
    assert _stack_exhausted(large, (2, 8)), large
    assert wrapped == {"kind": "error", "message": TOO_BIG, "at": [2, 8]}
    assert interp(ALLOCA, 2**61)["message"] == TOO_BIG


@pytest.mark.parametrize("opt_level", [0, 2])
def test_a_frame_larger_than_the_stack_is_an_error_not_a_crash(opt_level):
    """A large static alloca is allocated after the check on entry, which counts it (the public
    entry never inlines the body, so the limit is taken above that frame).  In the frame itself,
    -O0's argument spills at its bottom segfaulted before any check ran (fuzz program 523)."""
    text = """\
func.func @big(%i: index) -> i64 {
  %m = memref.alloca() : memref<100000000xi64>
  %v = arith.constant 5 : i64
  memref.store %v, %m[%i] : memref<100000000xi64>
  %c0 = arith.constant 0 : index
  %r = memref.load %m[%c0] : memref<100000000xi64>
  func.return %r : i64
}
func.func @f(%i: index) -> i64 {
  %r = func.call @big(%i) : (index) -> i64
  func.return %r : i64
}
"""
    assert interp(text, 3) == {"kind": "ok", "result": 0}
    [direct] = jit(text, (3,), name="big", opt_level=opt_level)
    assert _stack_exhausted(direct, (1, 1)), direct
    [called] = jit(text, (3,), opt_level=opt_level)  # at the call, or at @f when LLVM inlined @big's frame into it
    assert any(_stack_exhausted(called, at) for at in [(10, 8), (9, 1)]), called


def test_a_dynamic_alloca_in_a_loop_is_an_error_not_a_crash():
    few, many = jit(ALLOCA_LOOP, (10,), (1_000_000,))
    assert few == interp(ALLOCA_LOOP, 10)
    assert _stack_exhausted(many, (7, 10)), many


def test_deep_recursion_with_large_frames_is_an_error_not_a_crash():
    assert 9000 < MAX_CALL_DEPTH
    shallow, deep = jit(RECURSION, (100,), (9000,))
    assert shallow == interp(RECURSION, 100)
    assert _stack_exhausted(deep, (15, 10)), deep
    assert interp(RECURSION, 9000)["kind"] == "ok"  # the interpreter has no stack to exhaust


def test_deep_recursion_with_large_frames_on_a_pool_thread():
    """Threads of irc's pool (irc.compile(threads=N)) get the same budget: it fits their stacks."""
    child = textwrap.dedent(f"""
        from concurrent.futures import ThreadPoolExecutor
        import irc
        exe = irc.compile(irc.parse({RECURSION!r}), cache=False)
        def run(n):
            try:
                return exe.f(n)
            except irc.IRError as e:
                return e.message[:15]
        with ThreadPoolExecutor(2) as pool:
            print(list(pool.map(run, [100, 9000, 3000])))
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    small, deep, medium = eval(out.stdout)  # noqa: S307 - our own child's repr
    assert deep == "stack exhausted"
    assert small == interp(RECURSION, 100)["result"] and medium == interp(RECURSION, 3000)["result"]


SMALL_RECURSION = """\
func.func @f(%n: i64) -> i64 {
  %z = arith.constant 0 : i64
  %done = arith.cmpi eq, %n, %z : i64
  %r = scf.if %done -> (i64) {
    scf.yield %z : i64
  } else {
    %one = arith.constant 1 : i64
    %n1 = arith.subi %n, %one : i64
    %s = func.call @f(%n1) : (i64) -> i64
    %t = arith.addi %s, %n : i64
    scf.yield %t : i64
  }
  func.return %r : i64
}
"""


def test_recursion_to_the_depth_limit_with_small_frames_still_runs():
    depth = MAX_CALL_DEPTH - 10
    assert jit(SMALL_RECURSION, (depth,)) == [{"kind": "ok", "result": depth * (depth + 1) // 2}]


# -- 3. memref.dealloc ----------------------------------------------------------------------------

NOT_ALLOCATED = "memref.dealloc of a buffer that memref.alloc did not allocate (an alloca, a view or an argument)"


@pytest.mark.parametrize("bounds_checks", [False, True])
@pytest.mark.parametrize("make", [
    "%m = memref.alloca(%n) : memref<?xi64>",
    "%m = memref.alloca() : memref<4xi64>",
])
def test_dealloc_of_an_alloca_faults(make, bounds_checks):
    t = make.rsplit(": ", 1)[1]
    text = f"func.func @f(%n: index) -> i64 {{\n  {make}\n  memref.dealloc %m : {t}\n" \
           "  %z = arith.constant 0 : i64\n  func.return %z : i64\n}\n"
    agree(text, 4, expect=NOT_ALLOCATED, at=(3, 3), bounds_checks=bounds_checks)


def test_dealloc_of_a_view_faults():
    text = """\
func.func @f(%n: index) -> i64 {
  %m = memref.alloc(%n) : memref<?xi64>
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  %v = memref.view %m[%c8][%c1] : memref<?xi64> to memref<?xi64>
  memref.dealloc %v : memref<?xi64>
  %z = arith.constant 0 : i64
  func.return %z : i64
}
"""
    agree(text, 4, expect=NOT_ALLOCATED, at=(6, 3))


def test_dealloc_of_an_argument_faults():
    text = """\
func.func @f(%m: memref<?xi64>) -> i64 {
  memref.dealloc %m : memref<?xi64>
  %z = arith.constant 0 : i64
  func.return %z : i64
}
"""
    agree(text, {"zeros": 4, "dtype": "int64"}, expect=NOT_ALLOCATED, at=(2, 3))


def test_a_second_dealloc_faults_even_in_a_callee():
    text = """\
func.func @release(%m: memref<?xi64>) {
  memref.dealloc %m : memref<?xi64>
  func.return
}
func.func @f(%n: index) -> i64 {
  %m = memref.alloc(%n) : memref<?xi64>
  func.call @release(%m) : (memref<?xi64>) -> ()
  memref.dealloc %m : memref<?xi64>
  %z = arith.constant 0 : i64
  func.return %z : i64
}
"""
    agree(text, 4, expect="buffer freed twice", at=(8, 3))


def test_a_stale_buffer_is_detected_after_its_record_is_reused():
    """A dealloc of a buffer whose record now belongs to a newer allocation still faults."""
    text = """\
func.func @f(%n: index) -> i64 {
  %a = memref.alloc(%n) : memref<?xi64>
  memref.dealloc %a : memref<?xi64>
  %b = memref.alloc(%n) : memref<?xi64>
  memref.dealloc %a : memref<?xi64>
  %z = arith.constant 0 : i64
  func.return %z : i64
}
"""
    agree(text, 4, expect="buffer freed twice", at=(5, 3))


USE_AFTER_FREE = {
    "load": ("%v = memref.load %m[%c0] : memref<?xi64>", "access to a freed buffer"),
    "store": ("memref.store %z, %m[%c0] : memref<?xi64>", "access to a freed buffer"),
    "copy": ("memref.copy %m, %m : memref<?xi64> to memref<?xi64>", "access to a freed buffer"),
    "view": ("%v = memref.view %m[%c0][] : memref<?xi64> to memref<1xi64>", "view of a freed buffer"),
}


@pytest.mark.parametrize("use", sorted(USE_AFTER_FREE))
def test_use_after_free_faults_with_bounds_checks(use):
    line, message = USE_AFTER_FREE[use]
    text = f"""\
func.func @f(%n: index) -> i64 {{
  %m = memref.alloc(%n) : memref<?xi64>
  %c0 = arith.constant 0 : index
  %z = arith.constant 0 : i64
  memref.dealloc %m : memref<?xi64>
  {line}
  func.return %z : i64
}}
"""
    column = 8 if line.startswith("%") else 3
    agree(text, 4, expect=message, at=(6, column), bounds_checks=True)


def test_alloc_and_dealloc_in_a_loop_reuse_memory():
    """Records of freed buffers are reused: a loop of allocations holds one at a time."""
    text = """\
func.func @f(%n: index) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k = arith.constant 1024 : index
  %z = arith.constant 0 : i64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (i64) {
    %m = memref.alloc(%k) : memref<?xi64>
    %ii = arith.index_cast %i : index to i64
    memref.store %ii, %m[%c1] : memref<?xi64>
    %v = memref.load %m[%c1] : memref<?xi64>
    memref.dealloc %m : memref<?xi64>
    %a = arith.addi %acc, %v : i64
    scf.yield %a : i64
  }
  func.return %r : i64
}
"""
    n = 200_000
    assert jit(text, (n,), bounds_checks=True) == [{"kind": "ok", "result": n * (n - 1) // 2}]


# -- tensor functions: an index that is data -----------------------------------------------------

EXTRACT = """\
func.func @f(%t: tensor<?x3xf32>, %i: index, %j: index) -> f32 {
  %x = tensor.extract %t[%i, %j] : tensor<?x3xf32>
  func.return %x : f32
}
"""


@pytest.mark.parametrize("bounds_checks", [False, True])
def test_tensor_extract_out_of_range_faults_in_compiled_code(bounds_checks):
    """The index is data: without bounds checks the compiled read must still fault at the op
    (tensor-to-loops asserts the range), as the interpreter does, and never read outside."""
    table = {"zeros": [5, 3], "dtype": "float32"}
    calls = [(table, 4, 2), (table, 5, 0), (table, 0, 3), (table, -1, 0), (table, 10 ** 12, 1)]
    got = jit(EXTRACT, *calls, bounds_checks=bounds_checks)
    assert got[0] == {"kind": "ok", "result": 0.0}
    for (_, i, j), outcome in zip(calls[1:], got[1:]):
        assert outcome["kind"] == "error" and outcome["at"] == [2, 8], (i, j, outcome)
        assert "out of bounds in dimension " + ("0" if not 0 <= i < 5 else "1") in outcome["message"]
        assert interp(EXTRACT, table, i, j)["at"] == [2, 8]
