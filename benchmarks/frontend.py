"""The Python front end on one core: irc.jit + irc.grad beside jax, torch and pytensor.

    python benchmarks/frontend.py                  # all parts, 1,000 training steps
    python benchmarks/frontend.py --steps 100      # a shorter training run
    python benchmarks/frontend.py --only overhead  # parts: first,overhead,loop,train
    python benchmarks/frontend.py --quick          # small sizes (smoke test)

Parts (each contender in a fresh process, so that first calls are first calls):

- ``first``: the first call of the jitted training step of an MLP 784-1024-1024-10 (batch
  256, f32, softmax cross-entropy, SGD) written as plain numpy: trace + grad + compile (the
  library and its backend are imported before the clock starts); shown with the first call
  less a steady step, which is what tracing and compiling cost.  irc is timed cold (an empty
  compile cache), from the disk cache in a new process, and with its GEMM library (compiled
  once per machine) cached but the step itself cold.
  jax.jit; torch eager; torch.compile (with ``--slow``); pytensor.function.
- ``overhead``: the time of a call of a cached jitted function of four small f32 arrays
  (``a * b + c - d`` on 4 elements): irc.jit, the same function written as ``.ir`` and called
  through ``irc.compile`` (``exe.f(...)``, and ``exe.f(..., out=o)`` into a given array), jax.jit
  (numpy arrays in, and arrays already on its device), torch.compile (with ``--slow``).  Medians of 20,000 calls.
- ``loop``: an RNN cell ``h = tanh(h @ w + x)`` (batch 32, width 256, f32) run 100 times
  by ``irc.fori_loop`` (one ``scf.for`` in the compiled code) against the same loop unrolled
  while tracing (a Python ``for``, what ``fori_loop`` over arrays did before): first call
  (trace + compile, cold cache) and a steady call; jax.lax.fori_loop beside them.
- ``train``: N steps of training end to end, the first call (compile) included, in a fresh
  process each: irc (``irc.jit`` of a step that calls ``irc.grad``, parameters donated;
  cold, and with its GEMM library compiled before as it is after irc's first use on a machine),
  jax.jit of value_and_grad plus the update, torch eager, torch.compile (with ``--slow``)
  and pytensor with shared-variable updates.  Every contender's final loss is checked
  against the others'.

The process and its children run on one core (tensor_cpu.py pins it).  Peers that are not
installed are reported as such.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
tc = importlib.import_module("tensor_cpu")  # pins the process and sets the thread variables first

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

DIMS = (784, 1024, 1024, 10)
BATCH = 256
QUICK_DIMS, QUICK_BATCH = (20, 32, 32, 4), 16
LR = 0.1


# ---- the model, in plain numpy (irc traces it), and the data ----------------------------------------------


def loss(params, x, y):
    """Softmax cross-entropy of an MLP with ReLU: plain numpy, so irc.jit can trace it."""
    h = x
    layers = len(params) // 2
    for i in range(layers):
        h = h @ params[f"w{i}"] + params[f"b{i}"]
        if i < layers - 1:
            h = np.maximum(h, 0.0)
    m = np.max(h, axis=1, keepdims=True)
    shifted = h - m
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(y * log_probs, axis=1))


def data(dims, batch, seed=7):
    rng = np.random.default_rng(seed)
    params = {}
    for i, (n_in, n_out) in enumerate(zip(dims[:-1], dims[1:])):
        params[f"w{i}"] = (rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32)
        params[f"b{i}"] = np.zeros(n_out, np.float32)
    x = rng.standard_normal((batch, dims[0])).astype(np.float32)
    y = np.eye(dims[-1], dtype=np.float32)[rng.integers(0, dims[-1], batch)]
    return params, x, y


# ---- contenders: build a step, return (step(params, x, y) -> (params, loss)) ------------------------------


def irc_step():
    import irc.runtime  # noqa: F401 - the backend (llvmlite), imported at the first compile otherwise

    import irc

    def step(params, x, y):
        value, g = irc.value_and_grad(loss)(params, x, y)
        return {k: params[k] - LR * g[k] for k in params}, value

    return irc.jit(step, donate_argnums=0)


def jax_step():
    jax = tc.peer("jax")
    import jax.numpy as jnp

    def jloss(params, x, y):
        h = x
        layers = len(params) // 2
        for i in range(layers):
            h = h @ params[f"w{i}"] + params[f"b{i}"]
            if i < layers - 1:
                h = jnp.maximum(h, 0.0)
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(h, axis=1), axis=1))

    @jax.jit
    def step(params, x, y):
        value, g = jax.value_and_grad(jloss)(params, x, y)
        return {k: params[k] - LR * g[k] for k in params}, value

    def run(params, x, y):
        params, value = step(params, x, y)
        return params, value.block_until_ready()
    return run


def torch_step(compiled: bool):
    torch = tc.peer("torch")
    state = {}

    def tloss(params, x, y):
        h = x
        layers = len(params) // 2
        for i in range(layers):
            h = torch.addmm(params[f"b{i}"], h, params[f"w{i}"])
            if i < layers - 1:
                h = torch.relu(h)
        return -(y * torch.log_softmax(h, dim=1)).sum(dim=1).mean()

    fn = tc.torch_compile(tloss) if compiled else tloss

    def run(params, x, y):
        if not state:
            state["p"] = {k: torch.from_numpy(v.copy()).requires_grad_() for k, v in params.items()}
            state["x"], state["y"] = torch.from_numpy(x), torch.from_numpy(y)
            state["opt"] = torch.optim.SGD(list(state["p"].values()), lr=LR)
        state["opt"].zero_grad(set_to_none=True)
        value = fn(state["p"], state["x"], state["y"])
        value.backward()
        state["opt"].step()
        return state["p"], value.item()
    return run


def pytensor_step():
    try:
        import pytensor
        import pytensor.tensor as pt
    except ImportError:
        raise tc.Missing("pytensor not installed") from None
    built = {}

    def run(params, x, y):
        if not built:
            shared = {k: pytensor.shared(v.copy(), name=k) for k, v in params.items()}
            xs, ys = pt.matrix("x", dtype="float32"), pt.matrix("y", dtype="float32")
            h = xs
            layers = len(shared) // 2
            for i in range(layers):
                h = pt.dot(h, shared[f"w{i}"]) + shared[f"b{i}"]
                if i < layers - 1:
                    h = pt.maximum(h, 0.0)
            m = pt.max(h, axis=1, keepdims=True)
            shifted = h - m
            log_probs = shifted - pt.log(pt.sum(pt.exp(shifted), axis=1, keepdims=True))
            value = -pt.mean(pt.sum(ys * log_probs, axis=1))
            grads = pytensor.grad(value, list(shared.values()))
            updates = [(p, p - np.float32(LR) * g) for p, g in zip(shared.values(), grads)]
            built["f"] = pytensor.function([xs, ys], value, updates=updates)
            built["shared"] = shared
        return built["shared"], float(built["f"](x, y))
    return run


CONTENDERS = {
    "irc.jit + irc.value_and_grad (donated params)": irc_step,
    "jax.jit (value_and_grad + update)": jax_step,
    "torch eager (backward + SGD.step)": lambda: torch_step(False),
    "torch.compile (forward compiled)": lambda: torch_step(True),
    "pytensor.function (updates=)": pytensor_step,
}
SLOW = {"torch.compile (forward compiled)"}
IRC = next(iter(CONTENDERS))


# ---- child processes ----------------------------------------------------------------------------------------


def child_train(name: str, steps: int, quick: bool) -> dict:
    dims, batch = (QUICK_DIMS, QUICK_BATCH) if quick else (DIMS, BATCH)
    params, x, y = data(dims, batch)
    step = CONTENDERS[name]()  # imports the library; compiling waits for the first call
    start = time.perf_counter()
    params, value = step(params, x, y)
    first = time.perf_counter() - start
    times = []
    for _ in range(steps - 1):
        t = time.perf_counter()
        params, value = step(params, x, y)
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    return {"first": first, "total": total, "median": statistics.median(times) if times else None,
            "loss": float(value)}


def child_overhead(name: str) -> dict:
    xs = [np.full(4, 1.5, np.float32) for _ in range(4)]
    expected = xs[0] * xs[1] + xs[2] - xs[3]

    def f(a, b, c, d):
        return a * b + c - d
    if name.startswith("irc.compile"):
        import irc

        t = "tensor<4xf32>"
        fn = irc.compile(irc.parse(
            f"func.func @f(%a: {t}, %b: {t}, %c: {t}, %d: {t}) -> {t} {{\n"
            f"  %p = arith.mulf %a, %b : {t}\n  %s = arith.addf %p, %c : {t}\n"
            f"  %r = arith.subf %s, %d : {t}\n  func.return %r : {t}\n}}\n")).f
        out = np.empty(4, np.float32)
        call = (lambda: fn(*xs, out=out)) if "out=" in name else (lambda: fn(*xs))  # noqa: E731
    elif name.startswith("irc"):
        import irc

        fn = irc.jit(f)
        call = lambda: fn(*xs)  # noqa: E731
    elif name.startswith("jax"):
        jax = tc.peer("jax")
        fn = jax.jit(f)
        args = [jax.device_put(a) for a in xs] if "device" in name else xs
        call = lambda: fn(*args).block_until_ready()  # noqa: E731
    else:
        torch = tc.peer("torch")
        fn = tc.torch_compile(f)
        args = [torch.from_numpy(a) for a in xs]
        call = lambda: fn(*args)  # noqa: E731
    got = np.asarray(call())
    assert np.allclose(got, expected), (got, expected)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        for _ in range(1000):
            call()
        times.append((time.perf_counter() - t) / 1000)
    return {"us": statistics.median(times) * 1e6}


LOOP_STEPS, LOOP_BATCH, LOOP_WIDTH = 100, 32, 256


def child_loop(form: str) -> dict:
    rng = np.random.default_rng(3)
    h0, x = (rng.standard_normal((LOOP_BATCH, LOOP_WIDTH)).astype(np.float32) for _ in range(2))
    w = (rng.standard_normal((LOOP_WIDTH, LOOP_WIDTH)) / LOOP_WIDTH ** 0.5).astype(np.float32)
    expected = h0
    for _ in range(LOOP_STEPS):
        expected = np.tanh(expected @ w + x)
    if form.startswith("jax"):
        jax = tc.peer("jax")
        fn = jax.jit(lambda h, w, x: jax.lax.fori_loop(0, LOOP_STEPS, lambda i, h: jax.numpy.tanh(h @ w + x), h))
        call = lambda: np.asarray(fn(h0, w, x))  # noqa: E731
    else:
        import irc

        if form == "irc fori_loop":
            fn = irc.jit(lambda h, w, x: irc.fori_loop(0, LOOP_STEPS, lambda i, h: np.tanh(h @ w + x), h))
        else:
            def unrolled(h, w, x):
                for _ in range(LOOP_STEPS):
                    h = np.tanh(h @ w + x)
                return h
            fn = irc.jit(unrolled)
        call = lambda: fn(h0, w, x)  # noqa: E731
    start = time.perf_counter()
    got = call()
    first = time.perf_counter() - start
    assert np.allclose(got, expected, rtol=1e-3, atol=1e-4), np.abs(got - expected).max()
    times = []
    for _ in range(20):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return {"first": first, "median": statistics.median(times)}


def run_child(args: list[str], env_extra: dict | None = None, timeout: int = 3600) -> dict:
    env = {**os.environ, **tc.THREAD_ENV, **(env_extra or {})}
    cmd = [sys.executable, __file__, *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {err[:200]}"}
    return json.loads(lines[-1])


# ---- the parts ----------------------------------------------------------------------------------------------


def part_first(quick: bool, slow: bool) -> list[tuple[str, bool | None]]:
    print(f"\n## first call of the jitted training step ({'quick sizes' if quick else 'MLP 784-1024-1024-10, batch 256'})")
    cache = tempfile.mkdtemp(prefix="irc-frontend-cache-")
    library_only = library_only_cache(quick)
    mine = IRC
    rows = []
    for label, name, env in [("irc, cold (empty compile cache)", mine, cache),
                             ("irc, from the disk cache, new process", mine, cache),
                             ("irc, the step cold, irc's GEMM library already compiled", mine, library_only),
                             *[(n, n, None) for n in CONTENDERS if not n.startswith("irc")]]:
        if name in SLOW and not slow:
            rows.append((label, None, None, "not run (--slow)"))
            continue
        r = run_child(["--child-train", name, "--steps", "4"] + (["--quick"] if quick else []),
                      {"IRC_CACHE_DIR": env} if env else None)
        compile_s = r["first"] - r["median"] if "first" in r and r.get("median") else None
        rows.append((label, r.get("first"), compile_s, r.get("error", "ok")))
    print(tc.table(("contender", "first call s", "of which not the step (first - median step) s", "status"),
                   [(label, f"{t:.3f}" if t is not None else "-", f"{c:.3f}" if c is not None else "-", status)
                    for label, t, c, status in rows]))
    cold, warm, library_cached = rows[0][2], rows[1][2], rows[2][2]
    checks = []
    if not quick:
        checks.append((f"first: irc cold, trace + grad + compile <= 0.5 s ({cold:.2f} s)" if cold else "first: irc cold",
                       bool(cold and cold <= 0.5)))
        checks.append((f"first: irc from the disk cache in a new process <= 50 ms ({warm * 1e3:.0f} ms)" if warm
                       else "first: irc warm", bool(warm and warm <= 0.05)))
        checks.append((f"first: irc, the step cold with the GEMM library compiled, <= 0.5 s ({library_cached:.2f} s)"
                       if library_cached else "first: irc library cached", bool(library_cached and library_cached <= 0.5)))
    return checks


def part_overhead(slow: bool) -> list[tuple[str, bool | None]]:
    print("\n## call overhead: a cached jitted function of four 4-element f32 arrays")
    names = ["irc.jit", "irc.compile (the same function as .ir, exe.f)", "irc.compile, out= (exe.f(..., out=o))",
             "jax.jit (numpy arrays in)", "jax.jit (arrays on its device)"] + (["torch.compile"] if slow else [])
    rows = []
    result = {}
    for name in names:
        r = run_child(["--child-overhead", name])
        result[name] = r.get("us")
        rows.append((name, f"{r['us']:.2f}" if "us" in r else "-", r.get("error", "ok")))
    print(tc.table(("contender", "us per call (median)", "status"), rows))
    irc_us = result.get("irc.jit")
    return [(f"overhead: irc.jit <= 5 us ({irc_us:.1f} us)" if irc_us else "overhead: irc.jit", bool(irc_us and irc_us <= 5))]


def library_only_cache(quick: bool) -> str:
    """A fresh cache directory holding irc's GEMM library functions and nothing the large model
    needs: the small model's step compiles the same ones (their blocking depends on the host,
    not on the sizes)."""
    cache = tempfile.mkdtemp(prefix="irc-frontend-cache-")
    run_child(["--child-train", IRC, "--steps", "1", "--quick"], {"IRC_CACHE_DIR": cache})
    return cache


def part_loop() -> list[tuple[str, bool | None]]:
    print(f"\n## {LOOP_STEPS} steps of h = tanh(h @ w + x) (batch {LOOP_BATCH}, width {LOOP_WIDTH}, f32) in a loop")
    results = {}
    for form in ("irc fori_loop", "irc unrolled (Python for)", "jax.lax.fori_loop"):
        env = {"IRC_CACHE_DIR": tempfile.mkdtemp(prefix="irc-frontend-cache-")} if form.startswith("irc") else None
        results[form] = run_child(["--child-loop", form], env)
    rows = [(n, "-", "-", r["error"]) if "error" in r else (n, f"{r['first']:.2f}", f"{r['median'] * 1e3:.2f}", "ok")
            for n, r in results.items()]
    print(tc.table(("form", "first call s (cold)", "steady call ms", "status"), rows))
    loop, unrolled = results["irc fori_loop"], results["irc unrolled (Python for)"]
    if "first" not in loop or "first" not in unrolled:
        return [("loop: both irc forms ran", False)]
    return [(f"loop: fori_loop compiles faster than the unrolled loop ({loop['first']:.2f} s against "
             f"{unrolled['first']:.2f} s)", loop["first"] < unrolled["first"])]


def part_train(steps: int, quick: bool, slow: bool) -> list[tuple[str, bool | None]]:
    title = "quick sizes" if quick else "MLP 784-1024-1024-10, batch 256, f32, SGD lr 0.1"
    print(f"\n## {steps} training steps end to end, first call included ({title})")
    results = {}
    runs = [(f"{IRC}, cold (empty compile cache)", IRC, tempfile.mkdtemp(prefix="irc-frontend-cache-")),
            (f"{IRC}, GEMM library compiled before", IRC, library_only_cache(quick)),
            *[(n, n, None) for n in CONTENDERS if n != IRC]]
    for label, name, cache in runs:
        if name in SLOW and not slow:
            results[label] = {"error": "not run (--slow)"}
            continue
        env = {"IRC_CACHE_DIR": cache} if cache else None
        results[label] = run_child(["--child-train", name, "--steps", str(steps)] + (["--quick"] if quick else []), env)
    losses = [r["loss"] for r in results.values() if "loss" in r]
    ref = statistics.median(losses) if losses else None
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append((name, "-", "-", "-", "-", r["error"]))
            continue
        ok = abs(r["loss"] - ref) <= 1e-2 * max(1.0, abs(ref))
        rows.append((name, f"{r['total']:.2f}", f"{r['first']:.2f}",
                     f"{r['median'] * 1e3:.2f}" if r["median"] else "-", f"{r['loss']:.4f}", "ok" if ok else "wrong loss"))
    print(tc.table(("contender", "total s", "first call s", "median step ms", "final loss", "status"), rows))
    peers = [(n, r["total"]) for n, r in results.items() if "total" in r and not n.startswith("irc")]
    checks = []
    for label, _, _ in runs[:2]:
        mine = results[label]
        if "total" not in mine or not peers:
            checks.append((f"train: {label} ran, and a peer", False if "total" not in mine else None))
            continue
        best_name, best = min(peers, key=lambda p: p[1])
        checks.append((f"train: {label}, end to end faster than every peer ({mine['total']:.2f} s against "
                       f"{best_name} {best:.2f} s)", mine["total"] < best))
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, 20 steps")
    ap.add_argument("--slow", action="store_true", help="also torch.compile (tens of seconds to compile)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default 1000; --quick 20)")
    ap.add_argument("--only", default="first,overhead,loop,train",
                    help="comma-separated parts: first,overhead,loop,train")
    ap.add_argument("--child-train", help=argparse.SUPPRESS)
    ap.add_argument("--child-overhead", help=argparse.SUPPRESS)
    ap.add_argument("--child-loop", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    steps = opts.steps or (20 if opts.quick else 1000)
    if opts.child_train:
        print(json.dumps(child_train(opts.child_train, steps, opts.quick)))
        return 0
    if opts.child_overhead:
        print(json.dumps(child_overhead(opts.child_overhead)))
        return 0
    if opts.child_loop:
        print(json.dumps(child_loop(opts.child_loop)))
        return 0
    info = tc.machine()
    print(f"frontend: one core (pinned to CPU {tc.PINNED_CPU}); {info['cpu']} (LLVM {info['llvm_cpu']}, {info['vector']})")
    print(f"versions: irc {info['irc']}, numpy {info['numpy']}, jax {info['jax']}, torch {info['torch']}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}")
    parts = opts.only.split(",")
    checks = []
    if "first" in parts:
        checks += part_first(opts.quick, opts.slow)
    if "overhead" in parts:
        checks += part_overhead(opts.slow)
    if "loop" in parts:
        checks += part_loop()
    if "train" in parts:
        checks += part_train(steps, opts.quick, opts.slow)
    print()
    for text, ok in checks:
        print(f"{'n/a ' if ok is None else 'PASS' if ok else 'FAIL'}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
