"""Planned memory of a training step, without and with rematerialisation (issue 12, item 5).

A deep MLP training step (``layers`` dense layers of width 1024 with ReLU, batch 256,
f32, softmax cross-entropy, SGD update) is built with the public builder:
``@loss`` is differentiated by ``grad``, and ``@step`` calls ``@loss_grad`` and
returns the loss and the updated parameters; ``inline`` makes it one straight
line.  It then goes through the tensor pipeline's stages as ``irc.compile`` runs
them (graph rewrites, fusion, bufferization, memory planning; ``remat`` between
the graph rewrites and fusion when asked for), and the table gives what
``plan-memory`` planned for ``@step``: its arena (every temporary: activations,
gradients before the update, matmul panels), the output parameters (the new
parameters and the loss), and the arena in layer activations (batch x width x 4
bytes).  Nothing is run: these are planned bytes, exact for the code irc emits.

``--model chain`` runs the same measurement on a chain of elementwise layers
``h = tanh(h * c_i + d_i)`` (constants ``c_i, d_i``; ``vjp`` of the input only), the
model the remat tests use.

    python benchmarks/remat_memory.py [--layers 32] [--width 1024] [--batch 256] [--model mlp|mlp-hand|chain]
                                      [--no-blas] [--quick]

``table(model, layers, width, batch)`` returns the rows for other scripts (benchmarks/autodiff.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import irc.passes  # noqa: F401 - registers the passes
import numpy as np
from irc.runtime.tensor_function import TensorOptions, tensor_pipeline

from irc.builder import Builder
from irc.diagnostics import IRError
from irc.passmanager import PassManager, parse_pipeline
from irc.types import TensorType, f32

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_model  # noqa: E402


def _mlp_types(layers: int, width: int, batch: int, classes: int):
    """A builder, its module, and the types of the MLP step's inputs, parameters and loss."""
    b = Builder()
    x_t, y_t = TensorType([batch, width], f32), TensorType([batch, classes], f32)
    shapes = [(width, width)] * (layers - 1) + [(width, classes)]
    param_types = [t for k, n in shapes for t in (TensorType([k, n], f32), TensorType([n], f32))]
    return b, b.module(), x_t, y_t, param_types, TensorType([], f32)


def mlp_step(layers: int, width: int = 1024, batch: int = 256, classes: int = 10, lr: float = 0.01):
    """``@loss(x, y, w1, b1, ...)``, ``@loss_grad`` and ``@step`` (SGD on every weight and bias)."""
    b, m, x_t, y_t, param_types, scalar = _mlp_types(layers, width, batch, classes)
    with b.function(m, "loss", [x_t, y_t, *param_types], [scalar]) as args:
        h = args[0]
        for i in range(layers):
            h = h @ args[2 + 2 * i] + args[3 + 2 * i]
            if i < layers - 1:
                h = h.maximum(0.0)
        nll = -(args[1] * h.log_softmax(axis=1)).sum()
        b.ret(nll * (1.0 / batch))
    irc.passes.run(m, f"grad{{func=loss wrt={','.join(str(i) for i in range(2, 2 + 2 * layers))}}}")
    with b.function(m, "step", [x_t, y_t, *param_types], [scalar, *param_types]) as args:
        outs = b.call("loss_grad", *args, results=[scalar, *param_types])
        new = [p - g * lr for p, g in zip(args[2:], outs[1:])]
        b.ret(outs[0], *new)
    irc.passes.run(m, "inline,symbol-dce" if "symbol-dce" in irc.passes.PASSES else "inline")
    return m, "step"


def mlp_step_by_hand(layers: int, width: int = 1024, batch: int = 256, classes: int = 10, lr: float = 0.01):
    """The same ``@step`` with its backward written out by hand (softmax minus target, then per
    layer dW = h^T dz, db = sum(dz), dh = dz W^T, dz = dh where z > 0): what ``grad`` should
    produce, usable before the tensor ops have gradient rules."""
    b, m, x_t, y_t, param_types, scalar = _mlp_types(layers, width, batch, classes)
    with b.function(m, "step", [x_t, y_t, *param_types], [scalar, *param_types]) as args:
        x, y, params = args[0], args[1], args[2:]
        hs, zs = [x], []
        for i in range(layers):
            zs.append(hs[-1] @ params[2 * i] + params[2 * i + 1])
            if i < layers - 1:
                hs.append(zs[-1].maximum(0.0))
        loss = -(y * zs[-1].log_softmax(axis=1)).sum() * (1.0 / batch)
        dz = (zs[-1].softmax(axis=1) - y) * (1.0 / batch)
        new = [None] * len(params)
        for i in reversed(range(layers)):
            w, bias = params[2 * i], params[2 * i + 1]
            new[2 * i] = w - (hs[i].T @ dz) * lr
            new[2 * i + 1] = bias - dz.sum(axes=[0]) * lr
            if i:
                dh = dz @ w.T
                dz = b.select(hs[i] > 0.0, dh, b.zeros_like(dh))
        b.ret(loss, *new)
    return m, "step"


def elementwise_chain(layers: int, shape=(256, 1024), seed: int = 0):
    """``@loss(x) = tanh(... tanh(x * c_1 + d_1) ...)`` and its ``@loss_vjp`` (the gradient of x)."""
    rng = np.random.default_rng(seed)
    t = TensorType(list(shape), f32)
    b = Builder()
    m = b.module()
    with b.function(m, "loss", [t]) as (x,):
        h = x
        for _ in range(layers):
            h = (h * b.const(np.float32(rng.uniform(0.5, 1.5)), t) + b.const(np.float32(rng.uniform(-0.5, 0.5)), t)).tanh()
        b.ret(h)
    irc.passes.run(m, "vjp{func=loss}")
    return m, "loss_vjp"


def memory_pipeline(func: str, remat: str | None, blas: bool = True) -> tuple[list, list]:
    """irc.compile's tensor stages up to ``plan-memory``, cut before fusion: (graph stages, with
    ``remat{func=F <remat>}`` last unless ``remat`` is None; the rest)."""
    graph, lowering = [], []
    for p in parse_pipeline(tensor_pipeline(TensorOptions(blas=blas, math_approx=False))):
        (lowering if lowering or p.name == "fuse-elementwise" else graph).append(p)
        if p.name == "plan-memory":
            break
    if remat is not None:
        graph.extend(parse_pipeline(f"remat{{func={func} {remat}}}"))
    return graph, lowering


def count_ops(module, func: str) -> int:
    return sum(1 for _ in module.lookup(func).walk()) - 1


def planned(make, remat: str | None, blas: bool = True) -> dict:
    """Plan the memory of ``make()``'s function; ``remat``: None, or remat's options ("" for its defaults)."""
    module, func = make()
    graph, lowering = memory_pipeline(func, remat, blas)
    counters: dict = {}
    for passes in (graph, lowering):
        pm = PassManager(passes)
        pm.run(module)
        for _, stats in pm.statistics:
            counters.update(stats.counters)
        if passes is graph:
            ops = count_ops(module, func)
    sig = module.lookup(func).attributes.get("tensor_signature")
    outputs = sum(t.num_elements * 4 for t in sig.type.results if isinstance(t, TensorType)) if sig else 0
    return {"peak": counters.get(f"peak-bytes @{func}", 0), "outputs": outputs, "ops": ops,
            "recomputed": counters.get("ops-recomputed", 0), "segments": counters.get("segments", 1),
            "in_outputs": counters.get("buffers-in-outputs", 0), "planned": counters.get("buffers-planned", 0)}


def table(model: str, layers: int, width: int, batch: int, blas: bool = True) -> list[dict]:
    """Rows without and with ``remat`` (both layouts) for ``model``: mlp (backward by ``grad``;
    the hand-written one, with ``model`` saying so in each row, while ``grad`` cannot
    differentiate the step), mlp-hand (backward written out) or chain."""
    makers = {"mlp": lambda: mlp_step(layers, width, batch),
              "mlp-hand": lambda: mlp_step_by_hand(layers, width, batch),
              "chain": lambda: elementwise_chain(layers, (batch, width))}
    if model == "mlp":
        try:
            mlp_step(2, 8, 4)
        except IRError as e:
            print(f"# grad cannot differentiate the step ({e.message}); backward written by hand instead")
            model = "mlp-hand"
    rows = []
    for label, options in (("none", None), ("decreasing", ""), ("uniform", "layout=uniform")):
        r = planned(makers[model], options, blas)
        r["remat"], r["model"] = label, model
        rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--model", choices=("mlp", "mlp-hand", "chain"), default="mlp")
    ap.add_argument("--quick", action="store_true", help="8 layers of width 64, batch 16 (a smoke test)")
    ap.add_argument("--no-blas", action="store_true", help="irc's own matmul loops (their packing buffer is in the arena)")
    args = ap.parse_args(argv)
    if args.quick:
        args.layers, args.width, args.batch = 8, 64, 16
    activation = args.batch * args.width * 4
    rows = table(args.model, args.layers, args.width, args.batch, not args.no_blas)
    print(f"# {rows[0]['model']}: {args.layers} layers, width {args.width}, batch {args.batch}, f32; "
          f"one activation = {activation / 2**20:.2f} MiB; CPU: {cpu_model()}")
    print(f"# target with remat: arena <= 2*sqrt({args.layers}) = {2 * math.sqrt(args.layers):.1f} activations")
    print("| remat layout | segments | graph ops | ops recomputed | arena (MiB) | arena (activations) | outputs (MiB) | temporaries in outputs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['remat']} | {r['segments'] if r['remat'] != 'none' else '-'} | {r['ops']} | {r['recomputed']} | "
              f"{r['peak'] / 2**20:.1f} | {r['peak'] / activation:.1f} | {r['outputs'] / 2**20:.1f} | "
              f"{r['in_outputs']} of {r['planned']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
