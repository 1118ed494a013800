"""irc.jit: pytrees in and out, static arguments, one trace per signature, retrace reports,
dynamic shapes, donated buffers, errors at the user's line, and the lower/trace API."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import tracemalloc
import warnings

import numpy as np
import pytest

import irc
from irc import pytree

RNG = np.random.default_rng(1)
THIS_FILE = os.path.basename(__file__)


def test_nested_pytrees_in_and_out():
    params = {"layers": [{"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)},
                         {"w": RNG.standard_normal((4, 2)), "b": RNG.standard_normal(2)}], "scale": 0.5}

    def f(params, x):
        h = x
        for layer in params["layers"]:  # a Python loop over a concrete structure unrolls
            h = np.tanh(h @ layer["w"] + layer["b"])
        return {"out": h * params["scale"], "stats": (h.mean(), [h.max()])}

    x = RNG.standard_normal((5, 3))
    got, want = irc.jit(f)(params, x), f(params, x)
    assert pytree.flatten(got)[1] == pytree.flatten(want)[1]
    for g, w in zip(pytree.flatten(got)[0], pytree.flatten(want)[0]):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_one_trace_per_signature_and_static_arguments():
    traces = []

    def f(x, n, mode):
        if isinstance(x, irc.frontend.Tracer):
            traces.append((n, mode))
        y = x
        for _ in range(n):  # n is static: a Python int
            y = y * 2.0 if mode == "double" else y + 1.0
        return y

    jf = irc.jit(f, static_argnums=(1, 2))
    x = np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", irc.frontend.RetraceWarning)
        np.testing.assert_array_equal(jf(x, 3, "double"), f(x, 3, "double"))
        np.testing.assert_array_equal(jf(x + 1, 3, "double"), f(x + 1, 3, "double"))
        np.testing.assert_array_equal(jf(x, 2, "add"), f(x, 2, "add"))
        jf(np.ones(3), 2, "add")
    assert traces == [(3, "double"), (2, "add")]  # a new x of the same shape does not retrace
    assert jf.trace_count == 2


def test_retrace_names_the_argument_that_changed():
    jf = irc.jit(lambda params, x: params["w"] @ x)
    jf({"w": np.ones((2, 3))}, np.ones(3))
    with pytest.warns(irc.frontend.RetraceWarning, match=r"argument 1: float64\[3\] -> float64\[4\]"):
        jf({"w": np.ones((2, 4))}, np.ones(4))
    assert "argument 0.w: float64[2, 3] -> float64[2, 4]" in jf.last_retrace
    with pytest.warns(irc.frontend.RetraceWarning, match=r"argument 0.w: float64\[2, 4\] -> float32\[2, 4\]"):
        jf({"w": np.ones((2, 4), np.float32)}, np.ones(4, np.float32))


def test_retrace_to_an_argument_that_is_not_an_array_names_it():
    """A second call with a str where an array was: the retrace warning and then the tracer's
    TypeError name the argument (the warning once failed to describe the str)."""
    jf = irc.jit(lambda w, x: w @ x)
    jf(np.ones((2, 3)), np.ones(3))
    with pytest.warns(irc.frontend.RetraceWarning, match=r"argument 1: float64\[3\] -> a str"):
        with pytest.raises(TypeError, match="argument 1 is a str"):
            jf(np.ones((2, 3)), "hello")
    scale = irc.jit(lambda a, s: a * s)
    scale(np.ones(3), 2.0)
    with pytest.warns(irc.frontend.RetraceWarning, match=r"argument 1: weak float\[\] -> weak int\[\]"):
        np.testing.assert_array_equal(scale(np.ones(3), 3), np.full(3, 3.0))


def test_dynamic_shapes_trace_once_for_all_sizes():
    traces = []

    def f(x, b):
        traces.append(isinstance(x, irc.frontend.Tracer))
        return np.tanh(x * 2.0 + b).sum(axis=1)

    jf = irc.jit(f, dynamic_shapes=True)
    assert "tensor<?x?xf64>" in str(jf.lower(np.ones((2, 3)), np.ones(3)))
    for rows, cols in [(2, 3), (5, 7), (1, 1)]:
        x, b = RNG.standard_normal((rows, cols)), RNG.standard_normal(cols)
        np.testing.assert_allclose(jf(x, b), f(x, b), rtol=1e-12)
    assert jf.trace_count == 2  # lower, then one trace for every call


def test_trace_api_for_checkpoints():
    params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    x = np.ones((4, 3), np.float32)
    traced = irc.jit(lambda p, x: {"y": x @ p["w"] + p["b"]}).trace(params, x)
    assert isinstance(traced.module, irc.ModuleOp)
    assert traced.module.lookup(traced.entry) is not None
    assert traced.in_tree == pytree.flatten((params, x))[1]
    assert traced.out_tree == pytree.flatten({"y": 0})[1]
    func = traced.module.lookup(traced.entry)
    assert len(func.function_type.inputs) == traced.in_tree.num_leaves
    text = str(traced.module)
    assert irc.parse(text).print() == traced.module.print()  # what a checkpoint stores reads back


def test_traced_ops_carry_the_users_line():
    def f(x):
        y = np.exp(x)  # the line of the exp
        return y * 2.0

    module = irc.jit(f).lower(np.ones(3))
    line = f.__code__.co_firstlineno + 1
    exps = [op for op in module.walk() if op.name == "math.exp"]
    assert exps and exps[0].loc.line == line and exps[0].loc.filename == __file__


# -- errors ---------------------------------------------------------------------------------------------


def line_of(fn, text: str) -> str:
    import inspect

    lines, first = inspect.getsourcelines(fn)
    k = next(i for i, s in enumerate(lines) if text in s)
    return f"{THIS_FILE}:{first + k}"


def test_python_if_on_a_traced_value_says_to_use_cond():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(TypeError) as e:
        irc.jit(f)(np.ones(3))
    assert "irc.cond" in str(e.value) and line_of(f, "if x.sum()") in str(e.value)
    assert "if x.sum() > 0:" in str(e.value)


def test_unsupported_function_is_named_at_the_users_line():
    def f(x):
        return np.sort(x) + 1.0

    with pytest.raises(TypeError) as e:
        irc.jit(f)(np.ones(3))
    assert "numpy.sort" in str(e.value) and line_of(f, "np.sort") in str(e.value)


def test_unsupported_argument_is_named():
    with pytest.raises(TypeError, match=r"numpy.sum\(\.\.\., out="):
        irc.jit(lambda x: np.sum(x, out=x))(np.ones(3))
    with pytest.raises(TypeError, match="negative step"):
        irc.jit(lambda x: x[::-1])(np.ones(3))


def test_shape_error_while_tracing_shows_the_line():
    def f(x, y):
        return x + y

    with pytest.raises(ValueError) as e:
        irc.jit(f)(np.ones((3, 4)), np.ones(5))
    assert "[3, 4]" in str(e.value) and line_of(f, "return x + y") in str(e.value)


def test_shape_error_at_run_time_shows_the_line():
    def f(x, y):
        return x * y

    jf = irc.jit(f, dynamic_shapes=True)
    jf(np.ones(3), np.ones(3))
    with pytest.raises(ValueError) as e:
        jf(np.ones(3), np.ones(4))
    assert f"{THIS_FILE}:" in str(e.value) and "return x * y" in str(e.value)


def test_bad_argument_and_dtype_errors():
    with pytest.raises(TypeError, match=r"argument 1.k is a str"):
        irc.jit(lambda x, d: x)(np.ones(2), {"k": "text"})
    with pytest.raises(TypeError, match=r"no element type for numpy dtype complex128"):
        irc.jit(lambda x: x * 2)(np.ones(2, complex))
    with pytest.raises(TypeError, match=r"argument 1 has dtype int64; only float arguments"):
        irc.grad(lambda x, n: np.sum(x) * n, argnums=1)(np.ones(3), np.arange(3))


def test_escaped_tracer_is_an_error():
    kept = []

    def f(x):
        kept.append(x)
        return x

    irc.jit(f)(np.ones(2))
    with pytest.raises(TypeError, match="escaped"):
        irc.jit(lambda y: y + kept[0])(np.ones(2))


# -- donation ---------------------------------------------------------------------------------------------


def loss(p, x, y):
    h = np.maximum(x @ p["w1"] + p["b1"], 0.0)
    return np.mean((h @ p["w2"] - y) ** 2)


def sgd(p, x, y):
    g = irc.grad(loss)(p, x, y)
    return {k: p[k] - 0.05 * g[k] for k in p}


def test_donated_parameters_are_updated_in_place_with_flat_memory():
    p = {"w1": RNG.standard_normal((8, 16)).astype(np.float32) * 0.3, "b1": np.zeros(16, np.float32),
         "w2": RNG.standard_normal((16, 2)).astype(np.float32) * 0.3}
    x, y = RNG.standard_normal((32, 8)).astype(np.float32), RNG.standard_normal((32, 2)).astype(np.float32)
    reference = {k: v.copy() for k, v in p.items()}
    step = irc.jit(sgd, donate_argnums=0)
    buffers = {k: v.ctypes.data for k, v in p.items()}
    new = step(p, x, y)
    want = irc.jit(sgd)(reference, x, y)
    for k in p:
        assert new[k] is p[k] and new[k].ctypes.data == buffers[k]  # written into the donated buffer
        np.testing.assert_allclose(new[k], want[k], rtol=1e-6)
    p = new
    tracemalloc.start()
    try:
        for _ in range(200):  # warm up: tracemalloc's first reallocations of buffers made before it
            p = step(p, x, y)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            p = step(p, x, y)
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert all(p[k].ctypes.data == buffers[k] for k in p)
    assert growth < 64 * 1024, growth  # one step's arrays alone are ~1 KiB: 1000 leaked would be ~1 MiB
    assert loss(p, x, y) < loss(reference, x, y)


def test_machine_code_comes_from_the_disk_cache_in_a_new_process(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, irc
        def f(x, w):
            return np.tanh(x @ w).sum(axis=0)
        jf = irc.jit(f, cache_dir=CACHE)
        print(jf(np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)).sum())
        spec = next(iter(jf._cache.values()))
        tf = spec.function
        print(next(iter(tf._specializations.values())).executable.stats.get("cache"))
    """).replace("CACHE", repr(str(tmp_path / "cache"))))
    outputs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout
               for _ in range(2)]
    assert outputs[0].split()[0] == outputs[1].split()[0]
    assert outputs[1].split()[1] == "disk"


# -- the generated entry of a cached specialisation (runtime/fast_entry.py) ----------------------------


def _entry_of(fn, *args):
    return fn._array_calls[tuple((a.shape, a.dtype) for a in args)]


def test_cached_call_goes_through_a_generated_entry_and_matches_numpy():
    def f(a, b, c, d):
        return a * b + c - d, np.tanh(a @ b.T).sum(axis=0)

    fn, single = irc.jit(f), irc.jit(lambda a, b, c, d: a * b + c - d)
    args = [RNG.standard_normal((6, 5)).astype(np.float32) for _ in range(4)]
    first = fn(*args)
    np.testing.assert_allclose(single(*args), f(*args)[0], rtol=2e-5, atol=2e-5)
    assert "<irc entry for @" in _entry_of(single, *args).__code__.co_filename  # not the generic call
    for _ in range(3):
        args = [RNG.standard_normal((6, 5)).astype(np.float32) for _ in range(4)]
        got, want = fn(*args), f(*args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    assert fn.trace_count == 1 and len(first) == 2


def test_generated_entry_hands_buffers_it_cannot_use_to_the_full_call():
    """Read-only and non-contiguous arrays have the cache key's shape and dtype but cannot be
    passed by address: the entry gives them to the full call, which copies them."""
    def f(a, b):
        return np.exp(a) - b

    fn = irc.jit(f)
    a, b = RNG.standard_normal((4, 8)), RNG.standard_normal((4, 8))
    fn(a, b)
    read_only = a.copy()
    read_only.flags.writeable = False
    strided = RNG.standard_normal((4, 16))[:, ::2]
    assert strided.shape == (4, 8) and not strided.flags.c_contiguous
    for x, y in ((read_only, b), (a, strided), (strided, read_only)):
        np.testing.assert_allclose(fn(x, y), f(x, y), rtol=1e-12)
    assert fn.trace_count == 1


def test_objects_with_the_keys_shape_and_dtype_that_are_not_arrays_take_the_full_call():
    """The cache key is the arguments' shapes and dtypes; the entry passes arrays to machine code
    that reads numpy's array struct (runtime/cpu/array_call.py), so anything that is not exactly
    an ``np.ndarray`` goes to the full call: a subclass is computed on, and an impostor with the
    right ``shape`` and ``dtype`` is refused with a clear error, not read.  The impostor is a
    ``bytes`` whose struct, read as an array's, has all the flags set and its length as the data
    address (a crash if it reached machine code: so it runs in a child process)."""
    class Sub(np.ndarray):
        pass

    def f(a, b):
        return a * 2.0 + b

    fn = irc.jit(f)
    a, b = RNG.standard_normal((4, 8)), RNG.standard_normal((4, 8))
    fn(a, b)
    np.testing.assert_array_equal(fn(a.view(Sub), b), f(a, b))
    child = textwrap.dedent("""
        import numpy as np, irc
        class Impostor(bytes):
            shape, dtype = (4, 8), np.dtype(np.float64)
        fn = irc.jit(lambda a, b: a * 2.0 + b)
        b = np.ones((4, 8))
        fn(b, b)
        try:
            fn(Impostor(b"\\xff" * 200), b)
        except (TypeError, ValueError) as e:
            print("refused:", e)
    """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "refused: " in run.stdout and "parameter" in run.stdout, run.stderr[-2000:]
    assert fn.trace_count == 1


def test_generated_entry_with_an_arena_is_safe_on_threads():
    """A specialisation with temporaries takes an arena per concurrent call from its free list."""
    import concurrent.futures

    def f(x, w1, w2):
        return np.tanh(np.tanh(x @ w1) @ w2).sum(axis=1, keepdims=True) * np.exp(x[:, :1])

    fn = irc.jit(f)
    w1, w2 = RNG.standard_normal((16, 32)), RNG.standard_normal((32, 16))
    xs = [RNG.standard_normal((8, 16)) for _ in range(40)]
    fn(xs[0], w1, w2)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: fn(x, w1, w2), xs))
    for x, g in zip(xs, got):
        np.testing.assert_allclose(g, f(x, w1, w2), rtol=1e-10, atol=1e-12)


# -- the latest array call's entry, tried first (irc.jit.__call__) ------------------------------------


def test_the_latest_array_call_is_tried_first_and_hands_everything_else_to_the_lookup():
    """After an array call, the next call goes straight to that call's entry, which checks the
    arguments' types, dtypes and shapes itself: other shapes and dtypes, Python numbers, lists
    (another pytree) and buffers it cannot pass must each get what a fresh jit gives them."""
    def f(a, b):
        return a[0] * b + 1.0  # a list ``a`` is a pytree: its first leaf

    warm, want = irc.jit(f), irc.jit(f)
    a, b = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
    warm(a, b)
    assert warm._latest is not None and "<irc entry for @" in warm._latest.__code__.co_filename
    strided = RNG.standard_normal(12).astype(np.float32)[::2]
    others = [(a, b), (a[:4], b[:4]), (a.astype(np.float64), b.astype(np.float64)), (a, 2.0), (strided, 3),
              ([2.0, a], b), (strided, b), (a.view(np.ndarray).reshape(2, 3), b.reshape(2, 3)), (a, b)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", irc.frontend.RetraceWarning)
        for x, y in others:
            got, expected = warm(x, y), want(x, y)
            assert type(got) is type(expected)
            for g, e in zip(pytree.flatten(got)[0], pytree.flatten(expected)[0]):
                np.testing.assert_array_equal(g, e)
        traces = warm.trace_count
        for x, y in others:  # all cached now: no call traces again, whichever entry was the latest
            warm(x, y)
        assert warm.trace_count == traces
    with pytest.raises(TypeError), warnings.catch_warnings():
        warnings.simplefilter("ignore", irc.frontend.RetraceWarning)
        warm(a)  # another count of arguments: the full path's (the trace's) error, not the entry's


def test_a_jitted_call_inside_a_trace_is_traced_in_line_not_run():
    """The latest entry runs machine code on arrays; inside another function's trace the call
    is traced in line (its Python runs again, its ops join the outer program), with tracers
    or arrays, as the lookup's path does."""
    runs = []

    def product(a, b):
        runs.append(1)
        return a * b

    inner = irc.jit(product)
    a, b = RNG.standard_normal(5), RNG.standard_normal(5)
    inner(a, b)
    for outer, x in ((irc.jit(lambda x: inner(x, b) + 1.0), a), (irc.jit(lambda x: inner(a, b) + x), np.ones(5))):
        before = len(runs)
        np.testing.assert_allclose(outer(x), a * b + 1.0, rtol=1e-13)
        assert len(runs) == before + 1  # traced once, in line


def test_a_retrace_from_the_latest_entry_is_reported_at_the_users_line():
    jf = irc.jit(lambda x: x + 1.0)
    jf(np.ones(3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jf(np.ones(4))  # the latest entry hands it to the lookup, which traces again
    (w,) = [w for w in caught if issubclass(w.category, irc.frontend.RetraceWarning)]
    assert os.path.basename(w.filename) == THIS_FILE


def test_a_dropped_jit_is_freed_without_a_collection():
    """The latest entry refers back to its jit weakly: no cycle keeps its machine code."""
    import weakref

    jf = irc.jit(lambda x: x * 3.0)
    jf(np.ones(8))
    assert jf._latest is not None
    gone = weakref.ref(jf)
    gc.disable()
    try:
        del jf
        assert gone() is None
    finally:
        gc.enable()
