#!/usr/bin/env python3
"""Automatic differentiation on one CPU core: an MLP training step in irc beside jax, pytensor and torch.

The speed and memory figures of issue 12, every contender in one run:

=========  ==========================================================  ================================
part       what                                                        irc target
=========  ==========================================================  ================================
step       one SGD training step of an MLP 784-1024-1024-10, batch     no slower than the fastest peer
           256, f32, ReLU, softmax cross-entropy (mean over the        of the same run
           batch, one-hot targets given as f32), lr a constant
memory     the same step for 32 layers (1024 wide, 10 classes out),    with remat: <= 2 sqrt(32) layer
           batch 256: irc's planned peak without and with remat,       activations plus the gradients
           peak RSS of the step in irc, torch eager and jax
grad pass  ``grad`` alone on chains of 1k, 10k, 100k scalar and        linear: ops/s the same at every
           elementwise ops built with irc.builder                      size
=========  ==========================================================  ================================

**irc** builds ``@loss(w0, b0, ..., x, y) -> tensor<f32>`` with ``irc.builder``
(``h = relu(h @ w + b)``, ``-mean(sum(y * log_softmax(logits), 1))``), runs
``grad{func=loss wrt=<the weights and biases>}``, and adds ``@step`` that calls
``@loss_grad`` and returns the loss and every ``p - lr * dp``.  ``irc.compile``
(its default pipeline; inlining, fusion and memory planning included) compiles
it, and ``exe.step(..., out=...)`` is timed writing into preallocated outputs
(the parameters are not overwritten, so every call is the same step).  Rows:
irc's default (its own GEMM library function for large matmuls, compiled once per
host: passes/lowering/gemm_library.py) and its BLAS path (``blas=True``: numpy's
OpenBLAS sgemm, else scipy's).

**Peers**, each only where installed: ``jax.jit`` of ``value_and_grad`` plus the
update (returns new parameters); ``pytensor.function`` with ``updates=`` on
shared variables (default C backend; it says whether it found a BLAS) and, with
numba installed, the same graph in ``mode="NUMBA"``; torch eager (``addmm``,
``F.cross_entropy`` with probability targets, ``backward()``,
``torch.optim.SGD.step()``); ``torch.compile`` of the same forward (AOTAutograd
compiles its backward; the optimizer step stays eager); and numpy, a
hand-written backward in f32 (the baseline a user could write without AD).

**Method** (as ``tensor_cpu.py``, whose helpers this script imports): one
thread everywhere (the thread variables are set before anything is imported;
``torch.set_num_threads(1)``; ``irc.compile(threads=1)``).  Each contender's
first step is checked against a numpy float64 reference of the same step: the
loss, and each parameter's update ``new - old`` (a check of ``new`` alone would
hide a wrong gradient under ``old``) within ``|got - ref| <= rtol |ref| + atol``
with atol a fraction of the largest update of that parameter.  A wrong one is
reported and not timed.  Times are medians of ``--repeat`` steps, the contenders
interleaved round robin; ratios are to the fastest peer and to irc.  Later steps
of torch and pytensor keep training (their parameters are updated in place),
which does not change the work of a step.

**Memory.**  irc's planned figures come from ``benchmarks/remat_memory.py``
(``table``): the step goes through ``irc.compile``'s tensor stages up to
``plan-memory``, without ``remat`` and with it (between the graph rewrites and
fusion, both segment layouts), and the table gives plan-memory's ``peak-bytes``
(the arena) and the outputs (the new parameters and the loss), in units of one
layer activation (batch x width x 4 bytes).  The outputs are memory the step
needs in any case, and plan-memory puts temporaries into output bytes that are
not yet written, so arena plus outputs is the step's planned footprint.  Where
``grad`` cannot differentiate the step yet, that script plans the step with its
backward written by hand, and the row says so; where it or the ``remat`` pass
is missing, the row says "not available".  The measured peak RSS comes from a
fresh process per contender, as in ``tensor_cpu.py``: warm up with two steps,
trim the heap, reset VmHWM, run one step; the figure is the growth of the
resident set during it.  Each allocates what a step produces: irc (no remat:
``irc.compile`` does not run it) and jax new parameters (irc's arena is dropped
before the measured step, so it is counted), torch its gradients (those of the
step before are freed first; it updates the parameters in place).

**Grad pass.**  ``f(x, y) = tanh(... tanh(tanh(x*y + x)*y + x) ...)`` (three ops
a link) on ``f64`` scalars and on ``tensor<64xf64>``; only the pass's ``run``
is timed (no verification, no printing).  Before timing, the 1k-op gradient runs
on the interpreter and is checked against central differences.

    python benchmarks/autodiff.py                   # everything: a few minutes
    python benchmarks/autodiff.py --quick           # smoke test: small sizes
    python benchmarks/autodiff.py --only step --repeat 21 --profile

The exit status is 1 when an irc contender raised or gave a wrong result, 0
otherwise (whether or not the targets are met).
"""

from __future__ import annotations

import importlib

# First: tensor_cpu (a sibling script; its helpers are shared) sets the one-thread variables before numpy loads.
tc = importlib.import_module("tensor_cpu")

import argparse  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import numpy as np  # noqa: E402

import irc  # noqa: E402
from irc.builder import Builder  # noqa: E402
from irc.types import TensorType, f32, f64  # noqa: E402

LR = 0.1


# ---- the network ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Net:
    """An MLP: ``dims[0]`` inputs, hidden layers with ReLU, ``dims[-1]`` classes; batch ``batch``."""

    dims: tuple
    batch: int
    lr: float = LR

    @property
    def layers(self) -> int:
        return len(self.dims) - 1

    def title(self) -> str:
        hidden = self.dims[1:-1]
        if len(hidden) > 3 and len(set(hidden)) == 1:  # 32 layers: say so rather than list them
            shape = f"{self.dims[0]}-{hidden[0]} x {len(hidden)} hidden-{self.dims[-1]} ({self.layers} layers)"
        else:
            shape = "-".join(map(str, self.dims))
        return f"MLP {shape}, batch {self.batch}, f32, SGD lr {self.lr}"

    def flops(self) -> float:
        """Multiply-adds x 2 of the step's matmuls: forward, d(weights), d(activations) but the input's."""
        mm = sum(self.batch * a * b for a, b in zip(self.dims, self.dims[1:]))
        first = self.batch * self.dims[0] * self.dims[1]
        return 2.0 * (3 * mm - first)

    def param_shapes(self) -> list[tuple]:
        return [s for a, b in zip(self.dims, self.dims[1:]) for s in ((a, b), (b,))]

    def inputs(self, seed: int = 2024) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """He-initialised parameters, a batch of inputs and one-hot targets, all f32."""
        rng = np.random.default_rng(seed)
        params = []
        for a, b in zip(self.dims, self.dims[1:]):
            params.append(rng.standard_normal((a, b), dtype=np.float32) * np.float32(math.sqrt(2.0 / a)))
            params.append(np.float32(0.1) * rng.standard_normal(b, dtype=np.float32))
        x = rng.standard_normal((self.batch, self.dims[0]), dtype=np.float32)
        y = np.eye(self.dims[-1], dtype=np.float32)[rng.integers(0, self.dims[-1], self.batch)]
        return params, x, y


def numpy_step(net: Net, params, x, y, dtype=np.float64):
    """One SGD step, forward and backward by hand: the reference (f64) and the numpy contender (f32)."""
    ps = [p.astype(dtype, copy=False) for p in params]
    x, y = x.astype(dtype, copy=False), y.astype(dtype, copy=False)
    hs, zs = [x], []
    for i in range(net.layers):
        z = hs[-1] @ ps[2 * i] + ps[2 * i + 1]
        zs.append(z)
        if i < net.layers - 1:
            hs.append(np.maximum(z, 0))
    logits = zs[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -(y * logp).sum(axis=1).mean()
    dz = (np.exp(logp) * y.sum(axis=1, keepdims=True) - y) / dtype(net.batch)  # softmax minus the target
    lr = dtype(net.lr)
    new = [None] * len(ps)
    for i in reversed(range(net.layers)):
        w, b = ps[2 * i], ps[2 * i + 1]
        new[2 * i] = w - lr * (hs[i].T @ dz)
        new[2 * i + 1] = b - lr * dz.sum(axis=0)
        if i:
            dz = (dz @ w.T) * (zs[i - 1] > 0)
    return loss, new


# ---- irc: @loss by the builder, grad, @step -----------------------------------------------------------


def tensor_t(*shape) -> TensorType:
    return TensorType(list(shape), f32)


def loss_module(net: Net):
    """``@loss(w0, b0, ..., x, y) -> tensor<f32>``: the MLP's mean softmax cross-entropy."""
    b = Builder()
    module = b.module()
    ptypes = [tensor_t(*s) for s in net.param_shapes()]
    names = [n for i in range(net.layers) for n in (f"w{i}", f"b{i}")] + ["x", "y"]
    with b.function(module, "loss", [*ptypes, tensor_t(net.batch, net.dims[0]),
                                     tensor_t(net.batch, net.dims[-1])], arg_names=names) as args:
        *params, x, y = args
        h = x
        for i in range(net.layers):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < net.layers - 1:
                h = h.maximum(0.0)
        b.ret(-((y * h.log_softmax(axis=1)).sum(axes=1).mean()))
    return module


def add_step(module, net: Net, grad_name: str = "loss_grad") -> None:
    """``@step(params..., x, y) -> (loss, new params...)`` calling ``@grad_name`` and applying SGD."""
    loss_fn = next(f for f in module.functions if f.sym_name == "loss")
    inputs = list(loss_fn.function_type.inputs)
    ptypes = inputs[:-2]
    b = Builder()
    with b.function(module, "step", inputs, [tensor_t(), *ptypes],
                    arg_names=[a.name_hint for a in loss_fn.args]) as args:
        loss, *grads = b.call(grad_name, *args, results=[tensor_t(), *ptypes])
        b.ret(loss, *[p - g * net.lr for p, g in zip(args, grads)])


def manual_step_module(net: Net):
    """``@step`` with its backward written by hand in IR: the graph ``grad`` should produce.

    Not a product of the grad pass: a yardstick for what irc's pipeline makes of
    such a graph (transposed matmul operands, fused bias, ReLU, softmax and
    update work), so that the compiled code can be judged apart from the pass.
    """
    b = Builder()
    module = b.module()
    ptypes = [tensor_t(*s) for s in net.param_shapes()]
    names = [n for i in range(net.layers) for n in (f"w{i}", f"b{i}")] + ["x", "y"]
    with b.function(module, "step", [*ptypes, tensor_t(net.batch, net.dims[0]), tensor_t(net.batch, net.dims[-1])],
                    [tensor_t(), *ptypes], arg_names=names) as args:
        *params, x, y = args
        hs, zs = [x], []
        for i in range(net.layers):
            zs.append(hs[-1] @ params[2 * i] + params[2 * i + 1])
            if i < net.layers - 1:
                hs.append(zs[-1].maximum(0.0))
        loss = -((y * zs[-1].log_softmax(axis=1)).sum(axes=1).mean())
        dz = (zs[-1].softmax(axis=1) * y.sum(axes=1, keepdims=True) - y) * (1.0 / net.batch)
        new = [None] * len(params)
        for i in reversed(range(net.layers)):
            w, bias = params[2 * i], params[2 * i + 1]
            new[2 * i] = w - (hs[i].T @ dz) * net.lr
            new[2 * i + 1] = bias - dz.sum(axes=0) * net.lr
            if i:
                dz = b.select(zs[i - 1] > 0.0, dz @ w.T, 0.0)
        b.ret(loss, *new)
    return module


def step_module(net: Net):
    """The module with ``@loss``, ``@loss_grad`` (by the grad pass) and ``@step``."""
    module = loss_module(net)
    wrt = ",".join(str(i) for i in range(2 * net.layers))
    irc.passes.run(module, f"grad{{func=loss wrt={wrt}}}")
    add_step(module, net)
    irc.verify(module)
    return module


@functools.cache
def irc_step(net: Net, blas: bool | None = None, by_hand: bool = False):
    """The compiled ``@step`` (a TensorFunction; machine code made on the first call)."""
    options = {} if blas is None else {"blas": blas}
    module = manual_step_module(net) if by_hand else step_module(net)
    exe = irc.compile(module, cache_dir=tc.IRC_CACHE, **tc.irc_single_thread(), **options)
    return exe.step


# ---- contenders -------------------------------------------------------------------------------------------

# A contender's build(net, params, x, y) returns (run, read): run() does one step and returns what
# it returns; read(that) gives (loss as a float, the new parameters as numpy arrays).


def build_irc(blas: bool | None, by_hand: bool = False):
    def build(net, params, x, y):
        if blas and not blas_available():
            raise tc.Missing("no BLAS gemm (irc's BLAS path calls numpy's OpenBLAS or scipy's)")
        fn = irc_step(net, blas, by_hand=by_hand)
        outs = [np.empty((), np.float32)] + [np.empty_like(p) for p in params]
        args = [*params, x, y]
        return (lambda: fn(*args, out=outs)), (lambda r: (float(r[0]), list(r[1:])))
    return build


def blas_available() -> bool:
    from irc.runtime.cpu import blas

    return blas.available()


def build_numpy(net, params, x, y):
    return (lambda: numpy_step(net, params, x, y, np.float32)), (lambda r: (float(r[0]), r[1]))


def jax_loss(net: Net):
    jax = tc.peer("jax")

    def loss(params, x, y):
        h = x
        for i in range(net.layers):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < net.layers - 1:
                h = jax.nn.relu(h)
        return -(y * jax.nn.log_softmax(h, axis=1)).sum(axis=1).mean()
    return loss


def build_jax(net, params, x, y):
    jax = tc.peer("jax")
    loss_fn, lr = jax_loss(net), np.float32(net.lr)

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return loss, [p - lr * g for p, g in zip(params, grads)]

    ps, xj, yj = [jax.device_put(p) for p in params], jax.device_put(x), jax.device_put(y)
    return (lambda: jax.block_until_ready(step(ps, xj, yj))), \
        (lambda r: (float(r[0]), [np.asarray(p) for p in r[1]]))


@functools.cache
def pytensor_module():
    os.environ.setdefault("PYTENSOR_FLAGS", "floatX=float32")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import pytensor
            import pytensor.tensor as pt
            _ = pytensor.config.blas__ldflags  # the BLAS probe (and its warning) happens here
    except ImportError:
        raise tc.Missing("pytensor not installed") from None
    no_blas = any("could not link to a BLAS" in str(w.message) for w in caught)
    return pytensor, pt, no_blas


def build_pytensor(mode: str | None):
    def build(net, params, x, y):
        pytensor, pt, _ = pytensor_module()
        if mode == "NUMBA":
            tc.peer("numba")
        from pytensor.tensor.special import log_softmax

        shared = [pytensor.shared(p.copy(), name=f"p{i}") for i, p in enumerate(params)]
        xs, ys = pt.matrix("x", dtype="float32"), pt.matrix("y", dtype="float32")
        h = xs
        for i in range(net.layers):
            h = pt.dot(h, shared[2 * i]) + shared[2 * i + 1]
            if i < net.layers - 1:
                h = pt.maximum(h, np.float32(0))
        loss = -(ys * log_softmax(h, axis=1)).sum(axis=1).mean()
        grads = pytensor.grad(loss, shared)
        lr = np.float32(net.lr)
        fn = pytensor.function([xs, ys], loss, updates=[(p, p - lr * g) for p, g in zip(shared, grads)],
                               mode=mode)
        return (lambda: fn(x, y)), \
            (lambda r: (float(r), [s.get_value(borrow=False) for s in shared]))
    return build


def torch_state(net, params, x, y):
    torch = tc.peer("torch")
    ps = [torch.from_numpy(p.copy()).requires_grad_() for p in params]
    opt = torch.optim.SGD(ps, lr=net.lr)
    TORCH_OPTIMIZERS.append(opt)
    return torch, ps, torch.from_numpy(x), torch.from_numpy(y), opt


def torch_loss(net: Net):
    torch = tc.peer("torch")

    def loss(ps, x, y):
        h = x
        for i in range(net.layers):
            h = torch.addmm(ps[2 * i + 1], h, ps[2 * i])  # what nn.Linear does
            if i < net.layers - 1:
                h = torch.relu(h)
        return torch.nn.functional.cross_entropy(h, y)  # probability targets: -mean(sum(y log_softmax))
    return loss


def build_torch(compiled: bool):
    def build(net, params, x, y):
        torch, ps, xt, yt, opt = torch_state(net, params, x, y)
        loss_fn = tc.torch_compile(torch_loss(net)) if compiled else torch_loss(net)

        def run():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ps, xt, yt)
            loss.backward()
            opt.step()
            return loss
        return run, (lambda r: (float(r.detach()), [p.detach().numpy().copy() for p in ps]))
    return build


@dataclass
class Contender:
    name: str
    build: Callable
    role: str = "peer"  # peer | irc | yardstick (irc without the grad pass) | baseline (numpy)
    quick: bool = True  # False: skipped with --quick (slow to compile)

    @property
    def is_irc(self) -> bool:
        """irc's own rows: an error or a wrong result in them makes the exit status 1."""
        return self.role in ("irc", "yardstick")


CONTENDERS = [
    Contender("irc (the default: irc's GEMM)", build_irc(None), "irc"),
    Contender("irc BLAS path (blas=True)", build_irc(True), "irc"),
    Contender("irc, backward by hand in IR (no grad pass)", build_irc(None, by_hand=True), "yardstick"),
    Contender("irc, backward by hand, BLAS path", build_irc(True, by_hand=True), "yardstick"),
    Contender("jax.jit (value_and_grad + update)", build_jax),
    Contender("pytensor.function (C backend)", build_pytensor(None)),
    Contender("pytensor.function (mode=NUMBA)", build_pytensor("NUMBA"), quick=False),
    Contender("torch eager (backward + SGD.step)", build_torch(False)),
    Contender("torch.compile (forward compiled)", build_torch(True), quick=False),
    Contender("numpy (hand-written backward, f32)", build_numpy, "baseline"),
]


# ---- running and checking -----------------------------------------------------------------------------


@dataclass
class Result:
    contender: Contender
    status: str = "ok"  # ok | not installed | n/a | skipped | error | wrong
    detail: str = ""
    first_call_s: float | None = None
    loss_err: float | None = None
    update_err: float | None = None  # worst |got - ref| / max |ref| over the parameters' updates
    times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None


def check_step(got, ref, params) -> tuple[bool, float, float, str]:
    """The loss within 1e-4 relative; each parameter's update new - old to 2e-3 of its largest element."""
    (loss, new), (ref_loss, ref_new) = got, ref
    loss_err = abs(loss - ref_loss)
    if not loss_err <= 1e-4 * abs(ref_loss) + 1e-6:
        return False, loss_err, float("nan"), f"loss {loss!r}, expected {ref_loss!r}"
    if len(new) != len(ref_new):
        return False, loss_err, float("nan"), f"{len(new)} parameters, expected {len(ref_new)}"
    worst = 0.0
    for k, (g, r, p) in enumerate(zip(new, ref_new, params)):
        delta_ref = r - p.astype(np.float64)
        scale = float(np.abs(delta_ref).max()) if delta_ref.size else 0.0
        ok, err, why = tc.check(np.asarray(g).astype(np.float64) - p, delta_ref, 2e-3, 2e-3 * scale + 1e-12)
        worst = max(worst, err / scale if scale else err)
        if not ok:
            return False, loss_err, worst, f"parameter {k}'s update: {why}"
    return True, loss_err, worst, ""


def run_step(net: Net, repeat: int, quick: bool, only: list[str] | None) -> tuple[list[Result], float]:
    params, x, y = net.inputs()
    ref = numpy_step(net, params, x, y)
    results, live = [], []
    for c in CONTENDERS:
        r = Result(c)
        results.append(r)
        if only and not any(o in c.name for o in only):
            r.status, r.detail = "skipped", "not in --contenders"
            continue
        if quick and not c.quick:
            r.status, r.detail = "skipped", "skipped with --quick (slow to compile)"
            continue
        try:
            run, read = c.build(net, params, x, y)
            t = time.perf_counter()
            got = read(run())
            r.first_call_s = time.perf_counter() - t
            ok, r.loss_err, r.update_err, why = check_step(got, ref, params)
        except tc.Missing as e:
            r.status, r.detail = "not installed", str(e)
            continue
        except tc.NotApplicable as e:
            r.status, r.detail = "n/a", str(e)
            continue
        except Exception as e:  # noqa: BLE001 - one contender's failure must not stop the run
            r.status, r.detail = "error", tc.one_line(e)
            continue
        if not ok:
            r.status, r.detail = "wrong", why
            continue
        run()  # one more warm-up step
        live.append((r, run))
    gc.collect()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(repeat):
        for r, run in live:
            if r.status != "ok":
                continue
            t = time.perf_counter()
            try:
                run()
            except Exception as e:  # noqa: BLE001 - worked once, then failed: report and go on
                r.status, r.detail, r.times = "error", "while timing: " + tc.one_line(e), []
                continue
            r.times.append(time.perf_counter() - t)
    cpu = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    return results, cpu


def report_step(net: Net, results: list[Result], cpu: float, repeat: int, quick: bool):
    irc_row = next((r for r in results if r.contender.role == "irc" and r.median), None)
    peers = [r for r in results if r.contender.role == "peer" and r.median]
    fastest = min(peers, key=lambda r: r.median) if peers else None
    flops = net.flops()
    print(f"\n## step: one training step, {net.title()}")
    print(f"{flops / 1e9:.2f} GFLOP of matmuls a step; medians of {repeat} interleaved steps; cpu% {100 * cpu:.0f}; "
          f"fastest peer: {fastest.contender.name if fastest else '-'}")
    if any(r.contender.name.startswith("pytensor") and r.status == "ok" for r in results):
        try:
            if pytensor_module()[2]:
                print("note: pytensor found no BLAS to link (its pip install); its C backend's dot goes "
                      "through numpy")
        except tc.Missing:
            pass
    rows = []
    for r in results:
        med = r.median
        rows.append((r.contender.name, tc.fmt_ms(med),
                     f"{med / fastest.median:.2f}" if med and fastest else "-",
                     f"{med / irc_row.median:.2f}" if med and irc_row else "-",
                     f"{flops / med / 1e9:.1f}" if med else "-",
                     f"{r.first_call_s:.2f}" if r.first_call_s is not None else "-",
                     f"{r.loss_err:.1e}" if r.loss_err is not None else "-",
                     f"{r.update_err:.1e}" if r.update_err is not None and r.update_err == r.update_err else "-",
                     tc.status_text(r)))
    print(tc.table(("contender", "median ms", "/ fastest peer", "/ irc", "GFLOP/s", "1st call s",
                    "loss err", "update err", "status"), rows))
    print("update err: worst |got - ref| of a parameter's update (new - old) over its largest element")
    problems = [(r.contender.is_irc, f"step: {r.contender.name}: {r.status}: {r.detail}")
                for r in results if r.status in ("error", "wrong")]
    for _, text in problems:
        print("  " + text)
    checks = []
    if not quick:
        for r in (r for r in results if r.contender.role == "irc"):
            label = f"step: {r.contender.name} no slower than the fastest peer"
            if r.median is None:
                checks.append((f"{label} (irc: {r.status})", False))
            elif fastest is None:
                checks.append((f"{label}: no peer figure", None))
            else:
                checks.append((f"{label} ({r.median * 1e3:.1f} ms against {fastest.contender.name} "
                               f"{fastest.median * 1e3:.1f} ms: {fastest.median / r.median - 1:+.0%})",
                               r.median <= fastest.median))
    return checks, problems


# ---- profile: where irc's step spends its time ----------------------------------------------------------


def graph_after_fusion(module):
    """``@step`` of ``module`` inlined, shape-specialised, rewritten and fused: stages 1-3 of the tensor pipeline."""
    from irc.passes.specialize_shapes import specialize
    from irc.runtime.tensor_function import TENSOR_STAGES

    irc.passes.run(module, "inline")
    func = next(f for f in module.functions if f.sym_name == "step")
    for other in list(module.functions):
        if other is not func:
            other.erase()
    specialize(func, list(func.function_type.inputs))
    stages = dict(TENSOR_STAGES)
    irc.passes.run(module, f"{stages['graph rewrites']},{stages['fuse']}")
    return func


def describe_graph(func) -> None:
    ops = Counter(op.name for op in func.body.entry.ops)
    print("top-level ops after fusion: " + ", ".join(f"{n} {c}" for n, c in ops.most_common()))
    for op in func.body.entry.ops:
        if op.name == "graph.fused":
            body = Counter(o.name for o in op.walk() if o is not op and o.name != "graph.yield")
            shape = "x".join(map(str, op.results[0].type.shape)) or "scalar"
            reduce = op.attributes.get("reduce")
            print(f"  fused -> {shape}{' reduce ' + str(reduce) if reduce is not None else ''}: "
                  + ", ".join(f"{n.split('.')[1]} {c}" for n, c in sorted(body.items())))
        elif op.name.startswith("graph.") and op.name != "graph.fused":
            shapes = ", ".join("x".join(map(str, v.type.shape)) for v in op.operands if hasattr(v.type, "shape"))
            producers = [v.defining_op.name if v.defining_op is not None else "param" for v in op.operands]
            print(f"  {op.name} {shapes} (operands from {', '.join(producers)})")


def irc_products(pairs, blas: bool | None):
    """A compiled ``@products(a0, b0, a1, b1, ...) -> (a0 @ b0, a1 @ b1, ...)`` for these arrays."""
    b = Builder()
    module = b.module()
    types = [tensor_t(*a.shape) for pair in pairs for a in pair]
    with b.function(module, "products", types) as args:
        b.ret(*[x @ y for x, y in zip(args[0::2], args[1::2])])
    options = {} if blas is None else {"blas": blas}
    return irc.compile(module, cache_dir=tc.IRC_CACHE, **tc.irc_single_thread(), **options).products


def profile(net: Net, repeat: int) -> None:
    """What the fused graph holds, and the time of the step's parts: forward, gradient, update, GEMM floor."""
    print(f"\n### profile of irc's step ({net.title()})")
    params, x, y = net.inputs()
    args = [*params, x, y]
    parts = {}
    paths = (None, True) if blas_available() else (None,)  # irc's GEMM, and BLAS where one is found
    for label, by_hand in (("grad pass", False), ("backward by hand", True)):
        try:
            describe_graph(graph_after_fusion(manual_step_module(net) if by_hand else step_module(net)))
            print(f"  (the step through the {label}, above)")
            for blas in paths:
                fn = irc_step(net, blas, by_hand=by_hand)
                gemm = "irc's GEMM" if blas is None else "BLAS path"
                parts[f"@step ({label}, {gemm})"] = functools.partial(fn, *args)
        except Exception as e:  # noqa: BLE001
            print(f"the step through the {label}: {tc.one_line(e)}")
    for blas in paths:
        exe = irc.compile(loss_module(net), cache_dir=tc.IRC_CACHE, **tc.irc_single_thread(),
                          **({} if blas is None else {"blas": blas}))
        gemm = "irc's GEMM" if blas is None else "BLAS path"
        parts[f"@loss (forward only, {gemm})"] = functools.partial(exe.loss, *args)
    hidden = [x] + [np.ones((net.batch, d), np.float32) for d in net.dims[1:-1]]
    dz = [np.ones((net.batch, d), np.float32) for d in net.dims[1:]]
    ws = params[0::2]

    def gemms(which):  # the step's matmuls through numpy's sgemm, transposes as BLAS flags: the floor
        def run():
            for i, (h, w) in enumerate(zip(hidden, ws)):
                if "forward" in which:
                    np.matmul(h, w)
                if "backward" in which:
                    np.matmul(h.T, dz[i])
                    if i:
                        np.matmul(dz[i], w.T)
        return run
    parts["numpy sgemm: the forward's matmuls"] = gemms("forward")
    parts["numpy sgemm: the backward's (h.T @ dz, dz @ w.T)"] = gemms("backward")
    parts["numpy sgemm: all the step's matmuls"] = gemms("forward backward")
    # The same products with their transposed operands copied beforehand: GEMM rate alone, per library.
    pairs = [(h, w) for h, w in zip(hidden, ws)] + [(np.ascontiguousarray(h.T), d) for h, d in zip(hidden, dz)] \
        + [(d, np.ascontiguousarray(w.T)) for d, w in zip(dz[1:], ws[1:])]
    flat = [a for pair in pairs for a in pair]
    for blas in paths:
        gemm = "irc's GEMM" if blas is None else "BLAS path"
        parts[f"irc {gemm}: all the step's matmuls, transposes copied before"] = functools.partial(
            irc_products(pairs, blas), *flat)
    try:
        jax = tc.peer("jax")
        products = jax.jit(lambda *ops: [a @ b for a, b in zip(ops[0::2], ops[1::2])])
        on_device = [jax.device_put(a) for a in flat]
        parts["jax.jit: all the step's matmuls, transposes copied before"] = \
            lambda: jax.block_until_ready(products(*on_device))
    except tc.Missing:
        pass
    for fn in parts.values():
        fn()
    times = {k: [] for k in parts}
    for _ in range(repeat):
        for k, fn in parts.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    flops = {"forward": 2.0 * sum(net.batch * a * c for a, c in zip(net.dims, net.dims[1:]))}
    rows = []
    for k, v in times.items():
        med = statistics.median(v)
        work = flops["forward"] if "forward" in k else net.flops() - flops["forward"] if "backward's" in k \
            else net.flops()
        rows.append((k, tc.fmt_ms(med), f"{work / med / 1e9:.1f}"))
    print(tc.table(("part", "median ms", "GFLOP/s of its matmuls"), rows))


# ---- memory: planned peak and RSS of the 32-layer step ---------------------------------------------------


MEMORY_CONTENDERS = ["irc (the default GEMM)", "irc, backward by hand", "torch eager", "jax.jit"]


def release_torch_grads() -> None:
    """``zero_grad(set_to_none=True)`` for every optimizer made here (none outside the torch child)."""
    for opt in TORCH_OPTIMIZERS:
        opt.zero_grad(set_to_none=True)


TORCH_OPTIMIZERS: list = []


def memory_child(name: str, net: Net) -> dict:
    """Runs in a fresh process: two warm-up steps, then the RSS growth of one step."""
    params, x, y = net.inputs()
    owner = None
    if name.startswith("irc"):
        owner = irc_step(net, None, by_hand="by hand" in name)
        args = [*params, x, y]
        run = lambda: owner(*args)  # noqa: E731 - allocates its outputs, as jax does
    elif name == "torch eager":
        run, _ = build_torch(False)(net, params, x, y)
        step = run

        def run():  # the gradients of the step before stay alive until zero_grad: free them first
            release_torch_grads()
            return step()
    else:
        run, _ = build_jax(net, params, x, y)
    run()
    run()
    out: dict = {"name": name}
    if owner is not None:
        tc.drop_irc_arenas(owner)
    release_torch_grads()
    gc.collect()
    tc.release_free_heap()
    rss_before = tc.proc_status_kib("VmRSS")
    try:
        from pathlib import Path

        Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to the current RSS
        r = run()
        out["rss_growth"] = (tc.proc_status_kib("VmHWM") - rss_before) * 1024
        del r
    except OSError as e:
        out["error"] = tc.one_line(e)
    out["rss_before"] = rss_before * 1024
    return out


def measure_rss(net: Net, names: list[str]) -> dict[str, dict]:
    results = {}
    env = {**os.environ, **tc.THREAD_ENV, **tc.MALLOC_ENV}
    for name in names:
        cmd = [sys.executable, __file__, "--memory-child", name, "--net", net_text(net), "--irc-cache", tc.IRC_CACHE]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        except subprocess.TimeoutExpired:
            results[name] = {"error": "timed out after 900 s"}
            continue
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            results[name] = {"error": f"exit {proc.returncode}: "
                                      + (proc.stderr.strip().splitlines() or ["no output"])[-1]}
            continue
        results[name] = json.loads(lines[-1])
    return results


def net_text(net: Net) -> str:
    return ",".join(map(str, net.dims)) + ":" + str(net.batch)


def parse_net(text: str) -> Net:
    dims, batch = text.split(":")
    return Net(tuple(int(d) for d in dims.split(",")), int(batch))


def report_memory(net: Net, quick: bool) -> tuple[list, list]:
    width = net.dims[1]
    act = net.batch * width * 4
    grads = sum(4 * math.prod(s) for s in net.param_shapes())
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    print(f"\n## memory: one training step, {net.title()}")
    print(f"one layer activation = {net.batch}x{width}x4 B = {mib(act)} MiB; the gradients (= the parameters) "
          f"{mib(grads)} MiB = {grads / act:.0f} act")
    rows, checks, problems = [], [], []
    try:
        remat_memory = importlib.import_module("remat_memory")  # the planned figures: the remat pass's own script
        planned_rows = remat_memory.table("mlp", net.layers, net.dims[1], net.batch)
    except Exception as e:  # noqa: BLE001 - no remat pass here, or it failed
        planned_rows = []
        rows.append(("irc planned, with remat", "-", "-", "-", "-", f"not available ({tc.one_line(e)})"))
        checks.append((f"memory: with remat <= 2 sqrt({net.layers}) activations + gradients: not available", None))
    for p in planned_rows:
        by = "grad" if p["model"] == "mlp" else "backward by hand"
        label = f"irc planned ({by}), remat: {p['remat']}"
        if p["remat"] != "none":
            label += f" ({p['segments']} segments, {p['recomputed']} ops recomputed)"
        total = p["peak"] + p["outputs"]
        rows.append((label, mib(p["peak"]), mib(p["outputs"]), mib(total),
                     f"{total / act:.1f} ({(total - grads) / act:+.1f} beyond the gradients)", "ok"))
        if p["remat"] == "decreasing":
            bound = 2 * math.sqrt(net.layers) * act + grads
            checks.append((f"memory: {label}: planned {total / act:.1f} act <= 2 sqrt({net.layers}) act + "
                           f"gradients = {bound / act:.1f} act", total <= bound))
    names = MEMORY_CONTENDERS if not quick else MEMORY_CONTENDERS[:2]
    for name, m in measure_rss(net, names).items():
        if "error" in m:
            rows.append((f"{name}: RSS growth in one step", "-", "-", "-", "-", m["error"]))
            if name.startswith("irc"):
                problems.append((True, f"memory: {name}: {m['error']}"))
            continue
        g = m["rss_growth"]
        rows.append((f"{name}: RSS growth in one step", "-", "-", mib(g),
                     f"{g / act:.1f} ({(g - grads) / act:+.1f} beyond the gradients)", "ok"))
    print(tc.table(("what", "arena MiB", "outputs MiB", "total MiB", "in activations", "status"), rows))
    print("planned: plan-memory's peak-bytes (the arena) and the outputs (plan-memory also places temporaries in "
          "output bytes not yet written); RSS: fresh "
          "process, VmHWM growth during one step after two warm-up steps (irc and jax allocate the new "
          "parameters, torch its gradients: those of the step before are freed first)")
    for _, text in problems:
        print("  " + text)
    return checks, problems


# ---- grad pass speed ---------------------------------------------------------------------------------------


def chain_module(links: int, elem_type):
    """``v = tanh(v * y + x)`` ``links`` times from ``v = x``: three float ops a link."""
    b = Builder()
    module = b.module()
    with b.function(module, "f", [elem_type, elem_type], arg_names=["x", "y"]) as (x, y):
        v = x
        for _ in range(links):
            v = (v * y + x).tanh()
        b.ret(v.sum() if isinstance(elem_type, TensorType) else v)
    return module


def count_ops(func) -> int:
    return sum(1 for _ in func.walk())


def check_chain_gradient(elem_type) -> str:
    """The 1k-op chain's gradient on the interpreter against central differences (f64)."""
    module = chain_module(333, elem_type)
    irc.passes.run(module, "grad{func=f}")
    rng = np.random.default_rng(7)
    shape = tuple(elem_type.shape) if isinstance(elem_type, TensorType) else ()
    x, y = (0.5 * rng.standard_normal(shape) for _ in range(2))
    if not shape:
        x, y = float(x), float(y)
    _, gx, gy = irc.interpret(module, "f_grad", x, y)
    h = 1e-6
    for k, (arg, got) in enumerate(((x, gx), (y, gy))):
        flat_ref = []
        for i in range(max(1, int(np.size(arg)))):
            e = np.zeros(shape)
            e.flat[i] = h
            plus = [x + e * (k == 0), y + e * (k == 1)]
            minus = [x - e * (k == 0), y - e * (k == 1)]
            if not shape:
                plus, minus = [float(v) for v in plus], [float(v) for v in minus]
            flat_ref.append((float(np.sum(irc.interpret(module, "f", *plus)))
                             - float(np.sum(irc.interpret(module, "f", *minus)))) / (2 * h))
        ref = np.array(flat_ref).reshape(shape)
        if not np.allclose(np.asarray(got, np.float64), ref, rtol=1e-5, atol=1e-7):
            return f"d f / d {'xy'[k]} = {got!r}, central differences give {ref!r}"
    return ""


def grad_speed(sizes: list[int], repeat: int) -> tuple[list, list]:
    from irc.passmanager import PassManager, parse_pipeline

    print("\n## grad pass speed: grad{func=f} alone on chains of tanh(v * y + x), three ops a link")
    rows, problems, rates = [], [], {}
    for name, t in (("f64 scalars", f64), ("tensor<64xf64>", TensorType([64], f64))):
        try:
            why = check_chain_gradient(t)
        except Exception as e:  # noqa: BLE001
            why = tc.one_line(e)
        if why:
            rows.append((name, "-", "-", "-", "-", "-", "-", f"error: {why}"))
            problems.append((True, f"grad speed: {name}: {why}"))
            continue
        for n in sizes:
            times, out_ops = [], 0
            for _ in range(repeat):
                module = chain_module(max(1, n // 3), t)
                ops = count_ops(module.functions[0])
                # As `irc opt -p grad{func=f}` and irc.passes.run run it (the pass manager pauses
                # Python's cyclic GC around each pass), without the verifier.
                manager = PassManager(parse_pipeline("grad{func=f}"), verify_each=False)
                gc.collect()
                start = time.perf_counter()
                manager.run(module)
                times.append(time.perf_counter() - start)
                out_ops = count_ops(next(f for f in module.functions if f.sym_name == "f_grad"))
                del module
            med = statistics.median(times)
            rates[(name, n)] = ops / med
            rows.append((name, f"{ops:,}", f"{out_ops:,}", f"{med * 1e3:.1f}", f"{ops / med:,.0f}",
                         f"{rates[(name, n)] / rates[(name, sizes[0])]:.2f}", "ok (gradient checked at 1k ops)"))
    print(f"medians of {repeat} runs of the pass alone (through the pass manager, no verifier)")
    print(tc.table(("values", "ops in @f", "ops in @f_grad", "grad ms", "ops/s", f"/ ops/s at {sizes[0]:,}",
                    "status"), rows))
    checks = []
    for name in ("f64 scalars", "tensor<64xf64>"):
        if (name, sizes[-1]) in rates:
            ratio = rates[(name, sizes[-1])] / rates[(name, sizes[0])]
            checks.append((f"grad speed: {name}: linear (ops/s at {sizes[-1]:,} ops = {ratio:.2f} x that at "
                           f"{sizes[0]:,}; >= 0.8)", ratio >= 0.8))
    return checks, problems


# ---- main --------------------------------------------------------------------------------------------------

FULL = {"step": Net((784, 1024, 1024, 10), 256), "memory": Net((1024,) * 32 + (10,), 256),
        "grad": [1_000, 10_000, 100_000]}
QUICK = {"step": Net((64, 32, 32, 10), 16), "memory": Net((64,) * 4 + (10,), 16), "grad": [300, 3_000]}
PARTS = ("step", "memory", "grad")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few runs, no torch.compile (smoke test)")
    parser.add_argument("--only", help="comma-separated parts: " + ",".join(PARTS))
    parser.add_argument("--contenders", help="comma-separated substrings of the step's contender names")
    parser.add_argument("--repeat", type=int, help="timed steps per contender (default 11, --quick 3)")
    parser.add_argument("--profile", action="store_true", help="also break irc's step down (graph and parts)")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--net", help=argparse.SUPPRESS)
    parser.add_argument("--irc-cache", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.irc_cache:
        tc.IRC_CACHE = opts.irc_cache
    if opts.memory_child:
        print(json.dumps(memory_child(opts.memory_child, parse_net(opts.net))))
        return 0
    parts = [p.strip() for p in opts.only.split(",")] if opts.only else list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    sizes = QUICK if opts.quick else FULL
    repeat = opts.repeat or (3 if opts.quick else 11)
    info = tc.machine()
    load0 = os.getloadavg()
    start = time.perf_counter()
    print("autodiff: an MLP training step in irc against jax, pytensor and torch; memory; grad pass speed; one core")
    print(f"machine: {info['cpu']}, {info['cores']} cores (LLVM host CPU {info['llvm_cpu']}, {info['vector']}); "
          f"load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    print(f"versions: Python {info['python']}, irc {info['irc']}, llvmlite {info['llvmlite']} (LLVM {info['llvm']}), "
          f"numpy {info['numpy']}, scipy {info['scipy']}, jax {info['jax']} (jaxlib {info['jaxlib']}), "
          f"torch {info['torch']}, pytensor {version('pytensor')}, numba {info['numba']}")
    print(f"threads: pinned to CPU {tc.PINNED_CPU}; "
          f"{' '.join(f'{k}={v!r}' if ' ' in v else f'{k}={v}' for k, v in tc.THREAD_ENV.items())}; "
          f"torch.set_num_threads(1); irc.compile({'threads=1' if tc.irc_single_thread() else 'no threads option'})")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}{'; --quick: small sizes' if opts.quick else ''}")
    checks, problems = [], []
    if "step" in parts:
        only = [s.strip() for s in opts.contenders.split(",")] if opts.contenders else None
        results, cpu = run_step(sizes["step"], repeat, opts.quick, only)
        c, p = report_step(sizes["step"], results, cpu, repeat, opts.quick)
        checks += c
        problems += p
        del results
        gc.collect()
        if opts.profile:
            profile(sizes["step"], repeat)
    if "memory" in parts:
        c, p = report_memory(sizes["memory"], opts.quick)
        checks += c
        problems += p
    if "grad" in parts:
        c, p = grad_speed(sizes["grad"], 3)
        checks += c
        problems += p
    load1 = os.getloadavg()
    print(f"\nwall {time.perf_counter() - start:.0f} s; load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if checks:
        print()
        for text, ok in checks:
            print(f"{'n/a ' if ok is None else 'PASS' if ok else 'FAIL'}  {text}")
    return 1 if any(is_irc for is_irc, _ in problems) else 0


def version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())
