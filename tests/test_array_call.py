"""runtime/cpu/array_call.py: calls that pass numpy arrays themselves to machine code, which
reads their data addresses and flags from numpy's array struct."""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from irc.runtime import fast_entry
from irc.runtime.cpu import array_call

import irc
from irc.testing.tensor_programs import matmul_program

RNG = np.random.default_rng(14)


def test_the_probe_finds_numpys_data_and_flags_in_every_array():
    """The offsets the probe found give each of these arrays' address and flags, as numpy
    reports them (arrays the probe did not see: views, read-only, empty, 0-d, other dtypes)."""
    layout = array_call.layout()
    assert layout is not None, "this numpy's array struct was not found: entries take addresses instead"
    data, flags = layout
    frozen = np.arange(6.0)
    frozen.flags.writeable = False
    for a in (np.empty((3, 4), np.float32), np.arange(10)[2:7], np.zeros((5, 2), order="F"), frozen,
              np.empty(0), np.array(3.5), np.ones((2, 3, 4), np.int16)[:, 1]):
        assert ctypes.c_uint64.from_address(id(a) + data).value == a.ctypes.data
        assert ctypes.c_int32.from_address(id(a) + flags).value == a.flags.num


def _f32_bytes(shapes) -> list[int]:
    return [4 * math.prod(shape) for shape in shapes]


def _matmul_entry(m, n, k, threads=None):
    exe = irc.compile(irc.parse(matmul_program(m, n, k)), cache=False, threads=threads)
    a, b = (RNG.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    first = exe.mm(a, b)
    (spec,) = exe.mm._specializations.values()
    return exe, spec, a, b, first


def test_a_trampoline_calls_with_the_arrays_addresses_and_refuses_what_from_buffer_refused():
    """The trampoline of a matmul (11 C arguments: three arrays and the arena) computes what the
    address-taking call computes, and returns REFUSED, touching nothing, for an array that is not
    C-contiguous or not writeable (an output among them)."""
    exe, spec, a, b, want = _matmul_entry(9, 7, 5)
    trampoline, block = fast_entry._trampoline(spec, [a.shape, b.shape, (9, 7)], _f32_bytes([a.shape, b.shape, (9, 7)]))
    arena = np.empty(spec.arena_bytes, np.int8)
    c = np.full((9, 7), np.nan, np.float32)
    assert trampoline(block, a, b, c, arena) == 0
    np.testing.assert_array_equal(c, want)
    frozen = c.copy()
    frozen.flags.writeable = False
    for args in ((np.asfortranarray(a), b, c), (a, np.asfortranarray(b), c), (a, b, frozen)):
        before = [x.copy() for x in args]
        assert trampoline(block, *args, arena) == array_call.REFUSED
        for x, y in zip(args, before):
            np.testing.assert_array_equal(x, y)


def test_entries_give_the_same_bits_with_and_without_trampolines(monkeypatch):
    """An entry with a trampoline and one taking addresses (where the probe finds no struct) give
    the same bits, for a function with an arena and two outputs, and for arrays they refuse
    (Fortran order, read-only: the full call copies)."""
    program = """
func.func @f(%a: tensor<6x5xf32>, %b: tensor<5x4xf32>) -> (tensor<6x4xf32>, tensor<6xf32>) {
  %p = graph.matmul %a, %b : (tensor<6x5xf32>, tensor<5x4xf32>) -> tensor<6x4xf32>
  %t = math.tanh %p : tensor<6x4xf32>
  %s = graph.reduce_sum %t {axes = [1]} : tensor<6x4xf32> to tensor<6xf32>
  func.return %t, %s : tensor<6x4xf32>, tensor<6xf32>
}
"""
    a, b = RNG.standard_normal((6, 5)).astype(np.float32), RNG.standard_normal((5, 4)).astype(np.float32)
    frozen = a.copy()
    frozen.flags.writeable = False
    cases = [(a, b), (np.asfortranarray(a), b), (frozen, b)]
    results = []
    for found in (True, False):
        if not found:
            monkeypatch.setattr(array_call, "_layout", None)
        f = irc.compile(irc.parse(program), cache=False).f
        f(a, b)
        (spec,) = f._specializations.values()
        results.append([f(x, y) for x, y in cases])
        assert (fast_entry._trampoline(spec, [(6, 5), (5, 4), (6, 4), (6,)], _f32_bytes([(6, 5), (5, 4), (6, 4), (6,)])) is not None) == found
    for with_trampoline, without in zip(*results):
        for x, y in zip(with_trampoline, without):
            np.testing.assert_array_equal(x, y)
    want = np.tanh(a.astype(np.float64) @ b)
    np.testing.assert_allclose(results[0][0][0], want, rtol=1e-5, atol=1e-6)


def test_out_calls_refuse_overlapping_arrays_in_machine_code():
    """With ``out=`` the trampoline also refuses an output that overlaps an input or an earlier
    output (by the arrays' addresses and bytes); the call then goes the full way, which reads
    the input from a copy, so the result is the product of the values before the call."""
    exe, spec, a, b, want = _matmul_entry(8, 8, 8)
    shapes = [a.shape, b.shape, (8, 8)]
    trampoline, block = fast_entry._trampoline(spec, shapes, _f32_bytes(shapes), [(2, 0), (2, 1)])
    arena = np.empty(spec.arena_bytes, np.int8)
    c = np.zeros((8, 8), np.float32)
    assert trampoline(block, a, b, c, arena) == 0
    np.testing.assert_array_equal(c, want)
    for out in (a, b):  # the output is an input
        before = out.copy()
        assert trampoline(block, a, b, out, arena) == array_call.REFUSED
        np.testing.assert_array_equal(out, before)
    big = np.zeros(128, np.float32)
    halves = big[:64].reshape(8, 8), big[32:96].reshape(8, 8)  # overlap by half
    halves[0][...] = a
    assert trampoline(block, halves[0], b, halves[1], arena) == array_call.REFUSED
    assert trampoline(block, big[:64].reshape(8, 8), b, big[64:].reshape(8, 8), arena) == 0  # adjacent: apart
    exe.mm(a, b, out=c)
    assert spec.out_entry.__globals__["_t"] is not None  # the out= entry calls a trampoline
    x = a.copy()
    np.testing.assert_array_equal(exe.mm(x, b, out=x), want)  # in place: the full way
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("arrays", [0, 1, 5])
def test_trampolines_are_made_once_per_pattern(arrays):
    """One trampoline serves every function with the same pattern of arguments."""
    positions = tuple(range(0, 2 * arrays, 2))
    first = array_call.trampoline(2 * arrays + 1, positions)
    assert array_call.trampoline(2 * arrays + 1, positions) is first


def test_a_misaligned_array_is_refused_and_the_full_call_copies_it():
    """An array whose elements are not aligned to their size (a view into bytes at an odd
    offset) is refused by the trampoline: the compiled code's loads assume alignment."""
    exe, spec, a, b, want = _matmul_entry(6, 4, 5)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    odd = raw[1:].view(np.float32).reshape(a.shape)
    odd[...] = a
    assert not odd.flags.aligned and odd.flags.c_contiguous and odd.flags.writeable
    trampoline, block = fast_entry._trampoline(spec, [a.shape, b.shape, (6, 4)], _f32_bytes([a.shape, b.shape, (6, 4)]))
    c = np.zeros((6, 4), np.float32)
    assert trampoline(block, odd, b, c, np.empty(spec.arena_bytes, np.int8)) == array_call.REFUSED
    exe.mm(a, b)  # the entry is made at the second call
    np.testing.assert_array_equal(exe.mm(odd, b), want)


def test_entries_made_for_an_earlier_target_refuse_and_keep_their_code(tmp_path):
    """``set_cpu`` makes tensor functions specialise again; an irc.jit entry made before it
    holds its specialisation (its machine code) and hands calls to the full path, which
    specialises for the new target.  It had kept only the code's address: once the full path
    dropped the old specialisation and the JIT freed it, the next call crashed (a child
    process, so that a crash fails the test)."""
    child = textwrap.dedent("""
        import gc
        import numpy as np
        import irc
        from irc.runtime.cpu import target_cpu
        fn = irc.jit(lambda a, b: a * 2.0 + b)
        a, b = np.ones((4, 8)), np.full((4, 8), 0.5)
        fn(a, b); fn(a, b)
        target_cpu.set_cpu("host")
        fn(np.asfortranarray(a), b)
        gc.collect()
        for k in range(3):
            irc.jit(lambda x, k=k: x * k - 1.0)(np.ones(16 + k))
        print(float(fn(a, b).sum()))
    """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "IRC_CACHE_DIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[-1]) == 4 * 8 * 2.5


def test_a_trampoline_is_a_builtin_that_refuses_a_wrong_count_of_arguments():
    """A trampoline is a builtin function object (CPython calls it with the arguments as a C
    array, no ctypes conversion); called with more or fewer arguments than its pattern has it
    returns REFUSED, reading none of them, where a C array read past its end would crash."""
    exe, spec, a, b, want = _matmul_entry(5, 6, 7)
    trampoline, block = fast_entry._trampoline(spec, [a.shape, b.shape, (5, 6)], _f32_bytes([a.shape, b.shape, (5, 6)]))
    assert type(trampoline) is type(len)
    arena = np.empty(spec.arena_bytes, np.int8)
    c = np.full((5, 6), np.nan, np.float32)
    for args in ((), (block,), (block, a, b, c), (block, a, b, c, arena, arena)):
        assert trampoline(*args) == array_call.REFUSED
    assert np.isnan(c).all()
    assert trampoline(block, a, b, c, arena) == 0
    np.testing.assert_array_equal(c, want)


def test_a_trampoline_lets_other_python_threads_run_during_its_call():
    """The trampoline lets the GIL go around the compiled call, as a ctypes call did: a thread
    counting in Python counts while a product runs.  The switch interval is made longer than
    the call, so that a thread holding the GIL all through it (the trampoline not letting go)
    would keep the counter still from before the call to after it (so it did, with the calls
    that let it go made calls that do not: a test run by hand, session 15).  The product runs on
    one thread, so that the counting thread has a core of its own: on two threads a 5 ms product
    kept both cores of a 2-core AMD EPYC Zen 5 busy, and the counter missed one call in three."""
    import threading
    import time

    exe, spec, a, b, want = _matmul_entry(1024, 1024, 1024, threads=1)  # some 10 ms: a waiting thread wakes
    shapes = [a.shape, b.shape, (1024, 1024)]
    trampoline, block = fast_entry._trampoline(spec, shapes, _f32_bytes(shapes))
    arena = np.empty(spec.arena_bytes, np.int8)
    c = np.empty((1024, 1024), np.float32)
    counts, running = [0], threading.Event()

    def count():
        running.set()
        while running.is_set():
            counts[0] += 1

    interval = sys.getswitchinterval()
    longest = 0.0
    for _ in range(2):  # alone: a call as long as the interval would let the counter run anyway
        start = time.perf_counter()
        assert trampoline(block, a, b, c, arena) == 0
        longest = max(longest, time.perf_counter() - start)
    if longest > 0.05:
        pytest.skip(f"a 1024^3 product took {longest:.3f} s here: too slow for the switch interval's margin")
    sys.setswitchinterval(0.25)
    worker = threading.Thread(target=count)
    worker.start()
    running.wait()
    try:
        during = []
        for _ in range(3):
            before = counts[0]
            status = trampoline(block, a, b, c, arena)
            during.append(counts[0] - before)
            assert status == 0
    finally:
        running.clear()
        worker.join()
        sys.setswitchinterval(interval)
    np.testing.assert_array_equal(c, want)
    assert min(during) > 0, during


def test_calls_of_other_shapes_reach_their_own_entries_without_the_checks(monkeypatch):
    """``exe.f(...)`` tries the entry of its latest fast call first; that entry hands arrays of
    other shapes back to the lookup (``elsewhere``), so calls that alternate between shapes,
    with and without ``out=``, each run their own specialisation's entry and none reaches the
    full checks; each result is right."""
    program = """
func.func @f(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
  %p = arith.mulf %a, %b : tensor<?xf32>
  %r = arith.addf %p, %a : tensor<?xf32>
  func.return %r : tensor<?xf32>
}
"""
    f = irc.compile(irc.parse(program), cache=False).f
    arrays = {n: (RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32),
                  np.empty(n, np.float32)) for n in (3, 5, 8)}
    for a, b, o in arrays.values():  # specialise each shape, and make its entries
        for _ in range(2):
            f(a, b), f(a, b, out=o)
    checked = []
    monkeypatch.setattr(f, "_checked_call", lambda *args: checked.append(args))
    for _ in range(3):
        for n, (a, b, o) in arrays.items():
            np.testing.assert_array_equal(f(a, b), a * b + a)
            o[...] = np.nan
            assert f(a, b, out=o) is o
            np.testing.assert_array_equal(o, a * b + a)
            assert f._last_entry is f._specializations[((n,), (n,))].entry
    assert not checked


def test_what_the_latest_entry_refuses_gets_the_answers_of_the_full_checks():
    """Through the latest entry, a call of the wrong count, of non-arrays, of another dtype or
    of an output of the wrong shape gets what the full checks give a function never called
    fast (the same error, or the same result)."""
    program = """
func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  %r = arith.addf %a, %a : tensor<?xf32>
  func.return %r : tensor<?xf32>
}
"""
    warm = irc.compile(irc.parse(program), cache=False).f
    x = np.arange(4, dtype=np.float32)
    for _ in range(2):
        warm(x), warm(x, out=np.empty(4, np.float32))
    assert warm._last_entry is not None and warm._last_out_entry is not None

    def outcome(f, *args, **kwargs):
        try:
            return ("result", np.asarray(f(*args, **kwargs)).tolist())
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            return (type(e).__name__, str(e))

    cases = [((x, x), {}), (([1.0, 2.0],), {}), ((x.astype(np.float64),), {}), ((x[::2],), {}),
             ((x,), {"out": np.empty(5, np.float32)}), ((x,), {"out": np.empty(4, np.float64)}),
             ((np.arange(6, dtype=np.float32),), {"out": np.empty(6, np.float32)})]
    for args, kwargs in cases:
        cold = irc.compile(irc.parse(program), cache=False).f
        assert outcome(warm, *args, **kwargs) == outcome(cold, *args, **kwargs), (args, kwargs)


def test_an_entry_is_made_from_real_arrays_shapes_only():
    """An object whose ``.shape`` holds ints that compare equal to anything reaches a
    specialisation by its key; the entries must not be made from those shapes, or the latest
    entry's shape check would pass any array and run code compiled for 8 elements on 2 (found in
    session 15's review: 6 elements read past the input; a segfault at 50M)."""
    program = """
func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  %r = arith.addf %a, %a : tensor<?xf32>
  func.return %r : tensor<?xf32>
}
"""

    class Liar(int):
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        __hash__ = int.__hash__

    class Fake:
        shape = (Liar(8),)
        dtype = np.dtype(np.float32)

    for out in (None, np.empty(8, np.float32)):
        f = irc.compile(irc.parse(program), cache=False).f
        f(np.ones(8, np.float32))
        with pytest.raises(TypeError, match="'a' must be a numpy array"):
            f(Fake()) if out is None else f(Fake(), out=out)
        two = np.ones(2, np.float32)
        if out is None:
            np.testing.assert_array_equal(f(two), [2, 2])
        else:
            with pytest.raises(ValueError, match="of shape \\[2\\]"):
                f(two, out=out)


def test_an_out_generator_is_read_once_when_the_shapes_move():
    """``out=`` may be any iterable of arrays (a generator): the entry of the latest call reads
    it once, and hands what it read on with arrays of other shapes (it had handed on the spent
    generator: "out= must give 2 arrays, got 0")."""
    program = """
func.func @g(%a: tensor<?xf32>, %b: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
  %s = arith.addf %a, %b : tensor<?xf32>
  %p = arith.mulf %a, %b : tensor<?xf32>
  func.return %s, %p : tensor<?xf32>, tensor<?xf32>
}
"""
    g = irc.compile(irc.parse(program), cache=False).g
    for n in (5, 4, 4):
        a = np.full(n, 1.5, np.float32)
        g(a, a, out=(np.empty(n, np.float32) for _ in range(2)))
    a = np.full(5, 1.5, np.float32)
    s, p = g(a, a, out=(np.empty(5, np.float32) for _ in range(2)))
    np.testing.assert_array_equal(s, 3.0)
    np.testing.assert_array_equal(p, 2.25)
