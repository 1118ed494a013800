"""The output pool through compiled functions: a block is never handed out while an
array (a view, a buffer export, a torch tensor, a list element, a tuple result) still shows it."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from irc.runtime import output_pool

import irc

N = output_pool.MIN_BYTES // 4 + 64  # f32 elements: just over the pool's threshold


@pytest.fixture(autouse=True)
def empty_pool():
    output_pool.clear()
    yield
    output_pool.clear()


def _two_outputs():
    t = f"tensor<{N}xf32>"
    text = (f"func.func @f(%x: {t}, %y: {t}) -> ({t}, {t}) {{\n"
            f"  %s = arith.addf %x, %y : {t}\n  %p = arith.mulf %x, %y : {t}\n"
            f"  func.return %s, %p : {t}, {t}\n}}\n")
    return irc.compile(irc.parse(text)).f


def _fresh(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)


@pytest.mark.parametrize("keep", ["slice", "asarray", "memoryview", "data", "frombuffer", "list", "tuple",
                                  "pickle5"])
def test_a_result_shown_any_way_keeps_its_block(keep):
    f = _two_outputs()
    x, y = _fresh(0)
    s, p = f(x, y)
    want_s, want_p = x + y, x * y
    np.testing.assert_array_equal(s, want_s)
    shown = {
        "slice": lambda a: a[1::3],
        "asarray": np.asarray,
        "memoryview": memoryview,
        "data": lambda a: a.data,
        "frombuffer": lambda a: np.frombuffer(a, np.float32),
        "list": lambda a: [a],
        "tuple": lambda a: (a,),
        "pickle5": lambda a: pickle.PickleBuffer(a),
    }[keep]
    kept_s, kept_p = shown(s), shown(p)
    del s, p
    gc.collect()
    for seed in range(1, 6):  # many calls, each with results of the same size, all dropped or kept
        a, b = _fresh(seed)
        r = f(a, b)
        np.testing.assert_array_equal(r[0], a + b)
        np.testing.assert_array_equal(r[1], a * b)
    as_array = {"list": lambda v: v[0], "tuple": lambda v: v[0]}.get(keep, lambda v: np.asarray(v))
    got_s, got_p = as_array(kept_s), as_array(kept_p)
    if keep == "slice":
        want_s, want_p = want_s[1::3], want_p[1::3]
    np.testing.assert_array_equal(np.frombuffer(got_s, np.float32) if keep == "data" else got_s, want_s)
    np.testing.assert_array_equal(np.frombuffer(got_p, np.float32) if keep == "data" else got_p, want_p)


def test_a_torch_tensor_on_a_result_keeps_its_block():
    torch = pytest.importorskip("torch")
    f = _two_outputs()
    x, y = _fresh(0)
    s, _ = f(x, y)
    t = torch.from_numpy(s)
    del s, _
    gc.collect()
    for seed in range(1, 5):
        a, b = _fresh(seed)
        f(a, b)
    np.testing.assert_array_equal(t.numpy(), x + y)


def test_threads_calling_one_function_get_their_own_results():
    f = _two_outputs()
    errors = []

    def work(k):
        for i in range(8):
            a, b = _fresh(100 * k + i)
            s, p = f(a, b)
            if not (np.array_equal(s, a + b) and np.array_equal(p, a * b)):
                errors.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_an_exit_handler_never_gets_a_block_that_a_live_array_shows():
    """weakref.finalize calls its finalizers at exit (``atexit``); the pool's gave the blocks of
    still-live arrays back then, and a later exit handler's result could be one of them."""
    script = textwrap.dedent("""
        import atexit
        import numpy as np
        kept = []
        def late():
            a = kept[0]
            want = a.copy()
            from irc.runtime import output_pool
            b = output_pool.empty(a.shape, a.dtype)
            b[:] = -1
            print(b.ctypes.data != a.ctypes.data, np.array_equal(a, want))
        atexit.register(late)  # before the pool's first finalizer: it runs after weakref's
        from irc.runtime import output_pool
        kept.append(output_pool.empty((output_pool.MIN_BYTES // 4,), np.float32))
        kept[0][:] = 3
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_child_forked_while_another_thread_holds_the_pools_lock_can_allocate():
    script = textwrap.dedent("""
        import os, threading, time
        import numpy as np
        from irc.runtime import output_pool
        held, release = threading.Event(), threading.Event()
        def hold():
            with output_pool._lock:  # as a thread inside _take or _give_back at the fork
                held.set()
                release.wait()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            a = output_pool.empty((output_pool.MIN_BYTES // 4,), np.float32)
            del a
            os._exit(0)
        release.set()
        for _ in range(400):  # 20 s, then the hung child is killed rather than left behind
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status = "hung"
        print(status)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["0"], done.stderr


def test_the_pool_never_holds_more_than_its_caps(monkeypatch):
    monkeypatch.setattr(output_pool, "KEEP_BYTES", 5 * output_pool.MIN_BYTES)
    sizes = [output_pool.MIN_BYTES // 4 + d for d in (0, 16, 32)]
    arrays = [output_pool.empty((n,), np.float32) for n in sizes for _ in range(6)]
    del arrays
    gc.collect()
    held = sum(b.nbytes for blocks in output_pool._free.values() for b in blocks)
    assert held == output_pool._kept <= output_pool.KEEP_BYTES
    assert all(len(blocks) <= output_pool.KEEP_PER_SIZE for blocks in output_pool._free.values())
    again = [output_pool.empty((n,), np.float32) for n in sizes for _ in range(6)]  # takes them back
    assert output_pool._kept == 0 and len({a.ctypes.data for a in again}) == len(again)
