"""Random programs differentiated and checked against finite differences.

For a program from ``irc.testing.generate`` (scalar code with CFG loops and phis,
``scf.for``/``scf.if``/``scf.while`` and calls), ``check_program`` runs the ``vjp``
pass on ``@main``, then for random arguments (floats drawn from [-2, 2], so that
the program stays in a smooth region more often than with edge values):

- the gradient function must verify, interpret, and compile, and the interpreter
  and compiled code must agree (equal bits, or both NaN);
- its results must equal ``@main``'s;
- each float parameter's cotangent must match a central difference of
  <cotangent, results> in f64 wherever the function is smooth there.  Programs
  branch on floats, round and convert, so a point counts as smooth only where
  differences at two step sizes agree with each other; the others are skipped
  (and counted), never passed.

``python -m irc.testing.grad_check --seeds 0:500`` runs a campaign and prints
the counts; tests/test_grad_random.py runs a sample.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass, field

import numpy as np

from irc.testing.generate import Features, main_signature, random_arguments, random_program

FEATURES = Features(memref=False)  # float stores have no gradient rule (a diagnostic, tested elsewhere)


@dataclass
class Outcome:
    checked: int = 0  # (parameter, point) pairs compared with finite differences
    not_smooth: int = 0  # skipped: the two step sizes disagree (a branch, a rounding, a cast nearby)
    failures: list = field(default_factory=list)


def _arguments(seed: int, trial: int) -> list:
    rng = random.Random(f"irc-grad-args:{seed}:{trial}")
    args = random_arguments(seed, trial, FEATURES)
    types = main_signature(seed, FEATURES)
    return [np.dtype({"f32": np.float32, "f64": np.float64}[t]).type(rng.uniform(-2, 2)) if t in ("f32", "f64")
            else a for a, t in zip(args, types)]


def _weighted(results, weights) -> float:
    return sum(float(r) * w for r, w in zip(results, weights))


def check_program(seed: int, size: int = 16, trials: int = 2, compiled: bool = True) -> Outcome:
    import irc

    out = Outcome()
    text = random_program(seed, size, FEATURES)
    module = irc.parse(text)
    irc.passes.run(module, "vjp{func=main}")
    fn = module.function("main")
    ft = fn.function_type
    float_results = [i for i, t in enumerate(ft.results) if str(t) in ("f32", "f64")]
    float_params = [i for i, t in enumerate(ft.inputs) if str(t) in ("f32", "f64")]
    exe = irc.compile(module) if compiled else None
    for trial in range(trials):
        args = _arguments(seed, trial)
        rng = random.Random(f"irc-grad-cot:{seed}:{trial}")
        weights = [rng.choice([1.0, -0.5, 2.0]) for _ in float_results]
        cots = [np.dtype(str(ft.results[i]).replace("f", "float")).type(w) for i, w in zip(float_results, weights)]
        full = [*args, *cots]
        interp = irc.interpret(module, "main_vjp", *full)
        primal = irc.interpret(module, "main", *args)
        n = len(ft.results)
        if not _same(interp[:n], primal):
            out.failures.append((seed, trial, "vjp results differ from @main's", interp[:n], primal))
            continue
        if exe is not None:
            jit = exe.main_vjp(*full)
            jit = jit if isinstance(jit, tuple) else (jit,)
            if not _same(jit, interp):
                out.failures.append((seed, trial, "compiled and interpreted gradients differ", jit, interp))
        grads = interp[n:]
        for g, p in zip(grads, float_params):
            fd = _difference(module, args, p, float_results, weights,
                             [np.dtype(str(ft.results[i]).replace("f", "float")) for i in float_results])
            if fd is None:
                out.not_smooth += 1
                continue
            out.checked += 1
            scale = max(1.0, abs(fd))
            tol = 1e-5 if str(ft.inputs[p]) == "f64" and all(str(ft.results[i]) == "f64" for i in float_results) \
                else 2e-2
            if not (abs(float(g) - fd) <= tol * scale):
                out.failures.append((seed, trial, f"d/d(param {p}): gradient {float(g)!r}, differences {fd!r}"))
    return out


def _difference(module, args, p, float_results, weights, dtypes) -> float | None:
    """The central difference of <weights, results> in parameter ``p``, or None where two step
    sizes disagree (the function is not smooth there at the working precision)."""
    import irc

    x = args[p]
    is32 = isinstance(x, np.float32)
    estimates = []
    for h in ((1e-2, 1e-3) if is32 else (1e-5, 1e-6)):
        values = []
        resolution = 0.0  # the smallest change of <weights, results> the results can show
        for sign in (1, -1):
            shifted = list(args)
            shifted[p] = type(x)(float(x) + sign * h)
            try:
                res = irc.interpret(module, "main", *shifted)
            except Exception:  # a fault at the shifted point: not a smooth neighbourhood
                return None
            picked = [res[i] for i in float_results]
            values.append(_weighted(picked, weights))
            resolution = max([resolution, *(float(np.spacing(np.abs(dt.type(r)))) * abs(w)
                                            for r, w, dt in zip(picked, weights, dtypes))])
        if resolution / (2 * h) > 1e-3 * max(1.0, abs(values[0] - values[1]) / (2 * h)):
            return None  # the step is below the results' rounding (an f32 near 5e5 moves by 1/16)
        if not all(math.isfinite(v) for v in values):
            return None
        estimates.append((values[0] - values[1]) / (2 * h))
    a, b = estimates
    if abs(a - b) > (5e-2 if is32 else 1e-4) * max(1.0, abs(a), abs(b)):
        return None
    return b


def _same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind == "f" and np.isnan(x).all() and np.isnan(y).all():
            continue
        if x.dtype != y.dtype or x.tobytes() != y.tobytes():
            return False
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0:200", help="START:STOP")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args(argv)
    start, stop = map(int, args.seeds.split(":"))
    total = Outcome()
    for seed in range(start, stop):
        o = check_program(seed, args.size, compiled=not args.no_compile)
        total.checked += o.checked
        total.not_smooth += o.not_smooth
        total.failures += o.failures
        for f in o.failures:
            print("FAIL", *f, flush=True)
    print(f"programs {stop - start}, gradients checked {total.checked}, skipped as not smooth "
          f"{total.not_smooth}, failures {len(total.failures)}")
    return 1 if total.failures else 0


if __name__ == "__main__":
    sys.exit(main())
