#!/usr/bin/env python3
"""torch.compile(backend="irc") beside torch eager and torch.compile (inductor), one run.

Inference latency of the tested models (tests/test_torch_backend.py: the CNN, the transformer
encoder layer, 2-layer GPT-2 and BERT with random weights) at batch 1 and 8, and a training
step of the CNN, each on the same inputs:

    model  batch   eager ms   inductor ms   irc ms   irc/eager  irc/inductor   compile s (inductor, irc)

The ratio columns are irc's time over the peer's (below 1: irc is faster).  Compile time is
the first call (conversion, irc's pipeline, LLVM) minus a steady-state call; irc's compile
cache is a fresh temporary directory so it is a cold compile, while inductor's depends on
what earlier runs left in its cache.  The peers' calls alternate (one call of each per round,
medians over the rounds), so a change in load on a shared machine reaches them alike.  Threads: one for everyone by default (torch's intra-op
pool and irc's ``threads``), ``--threads N`` for N.  Needs torch; GPT-2 and BERT need
transformers (their rows say so otherwise).

With more than one thread, a call right after another runtime's is slowed by that runtime's
idle threads, which still spin on the other cores: torch's OpenMP workers for milliseconds after
their last parallel region, irc's pool for up to half a millisecond.  ``--settle MS`` makes
each peer run alone for MS milliseconds before each of its timed calls (the calls of that
time are not counted), which is how a program that uses one of them sees it; the default,
0, keeps one call of each per round.

    python benchmarks/torch_backend.py [--models cnn,tel,gpt2,bert] [--threads 1] [--repeat 20] [--settle 0]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
import warnings


def models(names, torch):
    nn = torch.nn
    torch.manual_seed(0)
    if "cnn" in names:
        cnn = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
        yield "cnn", cnn, lambda n: (torch.randn(n, 3, 32, 32),)
    if "tel" in names:
        tel = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
        yield "tel", tel, lambda n: (torch.randn(n, 16, 64),)
    for name in ("gpt2", "bert"):
        if name not in names:
            continue
        try:
            import transformers
        except ImportError:
            yield name, None, None
            continue
        if name == "gpt2":
            model = transformers.GPT2Model(transformers.GPT2Config(
                n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64, resid_pdrop=0.0,
                embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
        else:
            model = transformers.BertModel(transformers.BertConfig(
                num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=256,
                vocab_size=1000, max_position_embeddings=64, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0))
        yield name, model, lambda n: (torch.randint(0, 1000, (n, 16)),)


def first_call(fn) -> float:
    """Seconds of ``fn``'s first call (the compile, for a compiled model)."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


SETTLE_MS = 0.0
"""``--settle``: milliseconds each peer runs, untimed, before each of its timed calls."""


def interleaved(fns: dict, repeat: int) -> dict:
    """Median ms of ``repeat`` calls of each of ``fns``, called in turn (one timed call each per
    round), so that a change in the machine's load (other processes on a shared machine) reaches
    every peer alike instead of the one that happened to run then; each timed call comes after
    ``SETTLE_MS`` of untimed calls of the same peer."""
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            settle = time.perf_counter() + SETTLE_MS / 1e3
            while time.perf_counter() < settle:
                fn()
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn,tel,gpt2,bert")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile's inductor (its compile is slow)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="ms each peer runs untimed before each timed call (other runtimes' threads go idle)")
    args = ap.parse_args(argv)
    global SETTLE_MS
    SETTLE_MS = args.settle
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to compare")
        return 0
    os.environ.setdefault("IRC_CACHE_DIR", tempfile.mkdtemp(prefix="irc-bench-"))
    torch.set_num_threads(args.threads)
    # The transformer layer keeps PyTorch's fused inference fast path: eager at its best, and the
    # fused op is what torch.compile hands irc (irc/torch/convert.py converts it).
    warnings.simplefilter("ignore")
    import irc.torch

    settle = f"; each after {args.settle:g} ms of the same peer's calls" if args.settle else ""
    print(f"threads: {args.threads}; median of {args.repeat} calls{settle}; torch {torch.__version__}")
    header = (f"{'model':6} {'batch':>5} {'eager ms':>9} {'inductor ms':>11} {'irc ms':>8} {'irc/eager':>9} "
              f"{'irc/ind':>8} {'compile s (ind, irc)':>21}")
    print(header)
    names = args.models.split(",")
    for name, model, inputs in models(names, torch):
        if model is None:
            print(f"{name:6} transformers is not installed")
            continue
        model.eval()
        for batch in (1, 8):
            x = inputs(batch)
            row, fns = {}, {"eager": lambda m=model, x=x: m(*x)}
            with torch.no_grad():
                torch._dynamo.reset()
                if not args.no_inductor:
                    ind = torch.compile(copy.deepcopy(model), backend="inductor")
                    fns["inductor"] = lambda m=ind, x=x: m(*x)
                    row["inductor compile"] = first_call(fns["inductor"])
                mine = torch.compile(copy.deepcopy(model), backend=irc.torch.backend,
                                     options={"threads": args.threads})
                fns["irc"] = lambda m=mine, x=x: m(*x)
                row["irc compile"] = first_call(fns["irc"])
                interleaved(fns, 2)  # warm: each peer called after the other's compile
                row.update(interleaved(fns, args.repeat))
            row["irc compile"] -= row["irc"] / 1e3
            if "inductor" in row:
                row["inductor compile"] -= row["inductor"] / 1e3
            ind_ms = row.get("inductor")
            print(f"{name:6} {batch:5d} {row['eager']:9.3f} {ind_ms if ind_ms else float('nan'):11.3f} "
                  f"{row['irc']:8.3f} {row['irc'] / row['eager']:9.2f} "
                  f"{row['irc'] / ind_ms if ind_ms else float('nan'):8.2f} "
                  f"{row.get('inductor compile', float('nan')):10.1f} {row['irc compile']:10.1f}", flush=True)
    if "cnn" in names:
        _training_step(torch, irc, args)
    return 0


def _training_step(torch, irc, args) -> None:
    """One SGD step of the CNN at batch 8: forward, backward, update."""
    name, model, inputs = next(models(["cnn"], torch))
    x, labels = inputs(8)[0], torch.randint(0, 10, (8,))
    steps, compile_s = {}, 0.0
    for backend in ("eager", "irc"):
        net = copy.deepcopy(model).train()
        torch._dynamo.reset()
        fn = net if backend == "eager" else torch.compile(net, backend=irc.torch.backend,
                                                          options={"threads": args.threads})
        opt = torch.optim.SGD(net.parameters(), lr=0.01)

        def step(opt=opt, fn=fn):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(fn(x), labels).backward()
            opt.step()

        first = first_call(step)
        if backend == "irc":
            compile_s = first
        steps[backend] = step
    results = interleaved(steps, args.repeat)
    e, i = results["eager"], results["irc"]
    print(f"cnn training step, batch 8: eager {e:.3f} ms, irc {i:.3f} ms (irc/eager {i / e:.2f}), "
          f"irc compile {compile_s - i / 1e3:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
