#!/usr/bin/env python3
"""Accuracy and speed of the ``math-approx`` pass, next to libm (numpy).

For each function and f32/f64, the rewritten op runs in irc's reference interpreter
(numpy semantics, so it is exactly what the JIT computes) on a dense sweep of the
domain, and its error is measured in ulp against a more precise reference:

* f32: numpy's float64 functions;
* f64: numpy's long double (x87 extended, 64-bit significand) functions, and for erf a
  long double series, erf(x) = 2/sqrt(pi) exp(-x^2) sum (2x^2)^n x / (1*3*...*(2n+1)),
  whose terms are all positive (no cancellation).

The sweep: evenly spaced bit patterns over all finite floats of both signs (so every
binade, subnormals and values next to the overflow threshold included), random
values in the range where the function is interesting, and hand-picked specials and
thresholds.  The libm column is numpy's own function on the same inputs (``math.erf``
for f64 erf, ``scipy.special.erf`` for f32 when scipy is there).

Then, when the CPU JIT is available, the time of a loop over 2^24 elements
(``scf.for`` with load, op, store on ``memref<?xT>``) compiled with and without
``math-approx`` (the speedup comes from vectorisation; at this size a fast kernel is
bound by memory bandwidth), and of the same loops over 2^16 elements that stay in cache
(compute throughput, in ns per element).

    python benchmarks/math_approx_ulp.py              # 2^22 points per function and type
    python benchmarks/math_approx_ulp.py --quick      # 2^16 points, small loop, one run
    python benchmarks/math_approx_ulp.py --points 24  # 2^24 points

``tests/test_math_approx.py`` imports ``sweep``, ``reference``, ``ulp_error`` and
``approximate`` from here.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import irc.passes
import numpy as np

import irc

FUNCTIONS = ["exp", "exp2", "expm1", "log", "log2", "log1p", "tanh", "erf", "sin", "cos", "sigmoid"]
# The targets asserted by tests/test_math_approx.py (ulp, both types).
TARGETS = {"exp": 2, "log": 2, "tanh": 4, "erf": 4, "sigmoid": 4}
DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
# sin/cos are accurate up to these |x| (see passes/math_approx_kernels.py).
SIN_ACCURATE = {"f32": 2.0 ** 35, "f64": 2.0 ** 30}
# 1 / (1 + exp(-x)) is 0 below -ln(max float), where exp(-x) overflows, though the true
# value is still representable down to -ln(max) - 15 (f32) or -35 (f64): the sigmoid
# figures leave that out, for irc and libm alike.
SIGMOID_MIN = {"f32": -math.log(float(np.finfo(np.float32).max)), "f64": -math.log(float(np.finfo(np.float64).max))}

# ---- programs --------------------------------------------------------------------------------


def _body(fn: str, t: str, x: str = "%x") -> str:
    if fn == "sigmoid":  # 1 / (1 + exp(-x)), as a user would write it
        return (f"%n = arith.negf {x} : {t}\n  %e = math.exp %n : {t}\n"
                f"  %one = arith.constant {'dense<1.0>' if 'tensor' in t else '1.0'} : {t}\n"
                f"  %d = arith.addf %one, %e : {t}\n  %y = arith.divf %one, %d : {t}")
    return f"%y = math.{fn} {x} : {t}"


def tensor_program(fn: str, kind: str, n: int) -> str:
    t = f"tensor<{n}x{kind}>"
    return f"func.func @f(%x: {t}) -> {t} {{\n  {_body(fn, t)}\n  func.return %y : {t}\n}}\n"


def loop_program(fn: str, kind: str) -> str:
    """``b[i] = fn(a[i])`` over ``memref<?xT>``."""
    m = f"memref<?x{kind}>"
    body = _body(fn, kind).replace("\n", "\n    ")
    return (f"func.func @f(%a: {m}, %b: {m}) {{\n"
            f"  %c0 = arith.constant 0 : index\n  %c1 = arith.constant 1 : index\n"
            f"  %len = memref.dim %a, %c0 : {m}\n"
            f"  scf.for %i = %c0 to %len step %c1 {{\n"
            f"    %x = memref.load %a[%i] : {m}\n    {body}\n"
            f"    memref.store %y, %b[%i] : {m}\n  }}\n  func.return\n}}\n")


_MODULES: dict = {}
CHUNK = 1 << 16  # tensor length of the swept program: irc's splat constants are stored in full


def pipeline(fma: bool = False) -> str:
    """The pass as measured: every function, with ``math.fma`` in the f32 kernels or not."""
    return "math-approx{only=all fma=true}" if fma else "math-approx{only=all}"


def approximate(fn: str, kind: str, xs: np.ndarray, fma: bool = False) -> np.ndarray:
    """``fn`` rewritten by math-approx, run by the interpreter on ``xs`` (in chunks of CHUNK,
    the last one padded, so that one program serves every chunk)."""
    xs = np.asarray(xs, dtype=DTYPES[kind])
    key = (fn, kind, fma)
    if key not in _MODULES:
        module = irc.parse(tensor_program(fn, kind, CHUNK))
        irc.passes.run(module, pipeline(fma))
        _MODULES[key] = module
    out = np.empty_like(xs)
    for start in range(0, len(xs), CHUNK):
        part = xs[start:start + CHUNK]
        padded = np.zeros(CHUNK, dtype=xs.dtype)
        padded[:len(part)] = part
        out[start:start + len(part)] = irc.interpret(_MODULES[key], "f", padded)[:len(part)]
    return out


# ---- references and ulp ----------------------------------------------------------------------

TWO_OVER_SQRT_PI = np.longdouble("1.12837916709551257389615890312154517168810125865799771368817")


def erf_reference(x) -> np.ndarray:
    """erf in long double: a series of positive terms for |x| < 6.5, 1 beyond.  Each
    element is summed until its terms fall below 2^-73 of its sum."""
    x = np.asarray(x, dtype=np.longdouble)
    a = np.abs(x)
    result = np.where(a < 6.5, 0, 1).astype(np.longdouble)
    active = np.flatnonzero(a < 6.5)
    term = a[active].copy()
    total = term.copy()
    two_a2 = 2 * term * term
    n = 0
    while active.size:
        n += 1
        term = term * two_a2 / (2 * n + 1)
        total += term
        done = ~(term > total * np.longdouble(1e-22))
        if done.any():
            finished, s, a_done = active[done], total[done], a[active[done]]
            result[finished] = TWO_OVER_SQRT_PI * np.exp(-a_done * a_done) * s
            keep = ~done
            active, term, total, two_a2 = active[keep], term[keep], total[keep], two_a2[keep]
    result = np.where(np.isnan(x), np.nan, result)
    return np.copysign(result, x)


def _exact(kind: str):
    return np.float64 if kind == "f32" else np.longdouble


def reference(fn: str, kind: str, xs: np.ndarray) -> np.ndarray:
    """``fn`` at more than ``kind``'s precision: float64 for f32, long double for f64."""
    with np.errstate(all="ignore"):  # casting a signaling NaN is an 'invalid' operation
        x = np.asarray(xs).astype(_exact(kind))
        if fn == "erf" and kind == "f32":  # libm's double erf is exact enough for f32
            return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)
        if fn == "erf":
            return erf_reference(x)
        if fn == "sigmoid":
            return 1 / (1 + np.exp(-x))
        return getattr(np, fn)(x)


def libm(fn: str, kind: str, xs: np.ndarray) -> np.ndarray | None:
    """numpy's own function at the type's precision (None where numpy has none)."""
    x = np.asarray(xs, dtype=DTYPES[kind])
    with np.errstate(all="ignore"):
        if fn == "sigmoid":
            one = x.dtype.type(1)
            return one / (one + np.exp(-x))
        if fn != "erf":
            return getattr(np, fn)(x)
        if kind == "f64":
            return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)
        try:
            from scipy.special import erf
        except ImportError:
            return None
        return erf(x).astype(np.float32)


FORMAT = {"f16": (11, -14), "bf16": (8, -126), "f32": (24, -126), "f64": (53, -1022)}  # precision, emin


def round_to_kind(ref: np.ndarray, kind: str) -> np.ndarray:
    """``ref`` rounded to ``kind`` (bf16 held in float32, as irc's interpreter holds it)."""
    if kind == "bf16":
        from irc.semantics import round_to
        from irc.types import bf16

        with np.errstate(over="ignore"):
            return round_to(np.asarray(ref).astype(np.float32), bf16)
    with np.errstate(over="ignore"):
        return np.asarray(ref).astype(np.float16 if kind == "f16" else DTYPES[kind])


def ulp_error(y: np.ndarray, ref: np.ndarray, kind: str) -> np.ndarray:
    """|y - ref| in units of the ulp of ``ref`` in ``kind`` (subnormal spacing below the
    normal range).  Where ``ref`` rounds to an infinity or is NaN, 0 if ``y`` is exactly
    that and inf otherwise."""
    precision, emin = FORMAT[kind]
    ref = np.asarray(ref)
    y = np.asarray(y).astype(ref.dtype)
    with np.errstate(all="ignore"):
        expected = round_to_kind(ref, kind)
        _, e = np.frexp(ref)
        ulp = np.ldexp(np.ones_like(ref), np.maximum(e - 1, emin) - (precision - 1))
        err = np.abs(y - ref) / ulp
    special = ~np.isfinite(expected)
    same = (np.isnan(expected) & np.isnan(y)) | (expected == y)
    err = np.where(special, np.where(same, 0, np.inf), err)
    err = np.where(np.isnan(err), np.inf, err)  # y is NaN where it should not be
    return err.astype(np.float64)


# ---- sweeps ------------------------------------------------------------------------------------

# Where each function is interesting, for the random part of the sweep.
RANGES = {
    "exp": {"f32": (-104, 89), "f64": (-746, 710)},
    "exp2": {"f32": (-151, 129), "f64": (-1076, 1025)},
    "expm1": {"f32": (-20, 89), "f64": (-40, 710)},
    "log": {"f32": (0, 4), "f64": (0, 4)},
    "log2": {"f32": (0, 4), "f64": (0, 4)},
    "log1p": {"f32": (-1, 4), "f64": (-1, 4)},
    "tanh": {"f32": (-10, 10), "f64": (-20, 20)},
    "erf": {"f32": (-4.5, 4.5), "f64": (-6.5, 6.5)},
    "sin": {"f32": (-10, 10), "f64": (-10, 10)},
    "cos": {"f32": (-10, 10), "f64": (-10, 10)},
    "sigmoid": {"f32": (-104, 89), "f64": (-746, 710)},
}


def thresholds(fn: str, kind: str) -> list[float]:
    """Points where special handling changes, to test with their neighbours."""
    dt = DTYPES[kind]
    fi = np.finfo(dt)
    out = [0.0, 1.0, 0.5, 2.0, float(fi.tiny), float(fi.smallest_subnormal), float(fi.max)]
    if fn in ("exp", "expm1", "sigmoid"):
        out += [math.log(float(fi.max)), math.log(float(fi.tiny)), math.log(float(fi.smallest_subnormal)),
                math.log(float(fi.smallest_subnormal)) - math.log(2), -math.log(float(fi.max))]
    if fn == "exp2":
        out += [float(fi.maxexp), float(fi.minexp), float(fi.minexp - fi.nmant - 1)]
    if fn in ("erf", "tanh"):
        out += [0.875, 1.0, 4.0, 6.0, 9.5, 19.5]
    if fn in ("sin", "cos"):
        out += [math.pi / 4 * k for k in range(1, 64)]
    if fn == "log1p":
        out += [-1.0]
    return out


def sweep(fn: str, kind: str, n: int, seed: int = 0) -> np.ndarray:
    """About ``n`` inputs: half evenly spaced bit patterns of all finite values (both signs),
    half uniform in RANGES, plus thresholds with their neighbours and the specials."""
    dt = DTYPES[kind]
    it = np.uint32 if kind == "f32" else np.uint64
    rng = np.random.default_rng(seed)
    top = int(np.array(np.inf, dtype=dt).view(it))  # the bits of +inf
    bits = np.linspace(0, top - 1, n // 4, dtype=np.float64).astype(it) if kind == "f32" else \
        rng.integers(0, top, n // 4, dtype=it)
    mags = bits.view(dt)
    lo, hi = RANGES[fn][kind]
    uniform = rng.uniform(lo, hi, n - 2 * len(mags)).astype(dt)
    points = np.array(thresholds(fn, kind), dtype=dt)
    near = np.concatenate([points, -points])
    with np.errstate(over="ignore"):
        for _ in range(4):
            near = np.concatenate([near, np.nextafter(near, dt(np.inf)), np.nextafter(near, dt(-np.inf))])
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], dtype=dt)
    xs = np.concatenate([mags, -mags, uniform, near, specials])
    if fn in ("sin", "cos"):
        # The documented range only; beyond it, see far_sin_cos().
        xs = xs[~(np.abs(xs) > SIN_ACCURATE[kind])]
        xs = np.concatenate([xs, rng.uniform(-SIN_ACCURATE[kind], SIN_ACCURATE[kind], n // 8).astype(dt)])
    return xs


# ---- measuring ---------------------------------------------------------------------------------


def worst(err: np.ndarray, xs: np.ndarray) -> tuple[float, float]:
    i = int(np.argmax(err))
    return float(err[i]), float(xs[i])


def measure(fn: str, kind: str, n: int, fma: bool = False) -> dict:
    xs = sweep(fn, kind, n)
    if fn == "sigmoid":  # exp(-x) overflows below: 1/(1+inf) = 0, whoever computes exp
        xs = xs[~(xs.astype(np.float64) < SIGMOID_MIN[kind])]
    ref = reference(fn, kind, xs)
    err = ulp_error(approximate(fn, kind, xs, fma), ref, kind)
    row = {"fn": fn, "kind": kind, "points": len(xs)}
    row["ulp"], row["at"] = worst(err, xs)
    base = libm(fn, kind, xs)
    if base is not None:
        row["libm_ulp"], row["libm_at"] = worst(ulp_error(base, ref, kind), xs)
    return row


def far_sin_cos(kind: str, n: int = 1 << 14) -> list[tuple[str, float]]:
    """Max absolute error of sin beyond its accurate range, per span of |x| (in ulp it is
    meaningless there: results near zero have tiny ulps)."""
    rng = np.random.default_rng(1)
    rows = []
    for lo_exp in range(30, 50, 5):
        lo = 2.0 ** lo_exp
        if lo < SIN_ACCURATE[kind]:
            continue
        xs = (lo * 2.0 ** rng.uniform(0, 5, n)).astype(DTYPES[kind])
        err = np.abs(approximate("sin", kind, xs).astype(np.longdouble) - reference("sin", kind, xs))
        rows.append((f"2^{lo_exp}..2^{lo_exp + 5}", float(np.max(err))))
    return rows


# ---- timing ------------------------------------------------------------------------------------


def compiled_loop(fn: str, kind: str, approx: bool, fma: bool = False):
    module = irc.parse(loop_program(fn, kind))
    if approx:
        irc.passes.run(module, pipeline(fma))
    return irc.compile(module, cache=False).f


def loop_input(fn: str, kind: str, size: int) -> np.ndarray:
    lo, hi = RANGES[fn][kind]
    a = np.random.default_rng(2).uniform(max(lo, -50), min(hi, 50), size).astype(DTYPES[kind])
    return np.abs(a) + 1e-3 if fn in ("log", "log2") else a


def time_loops(fn: str, kind: str, size: int, runs: int, repeat: int = 1, fma: bool = False) -> tuple[float, float]:
    """Best seconds per call of the libm loop and the math-approx loop over ``size``
    elements, ``repeat`` calls per sample, the two interleaved so that a busy machine
    slows both alike."""
    loops = [compiled_loop(fn, kind, False), compiled_loop(fn, kind, True, fma)]
    a = loop_input(fn, kind, size)
    b = np.empty_like(a)
    best = [math.inf, math.inf]
    for _ in range(runs):
        for i, f in enumerate(loops):
            f(a, b)
            t = time.perf_counter()
            for _ in range(repeat):
                f(a, b)
            best[i] = min(best[i], (time.perf_counter() - t) / repeat)
    return best[0], best[1]


def jit_available() -> bool:
    try:
        import llvmlite.binding  # noqa: F401
    except ImportError:
        return False
    return True


# ---- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sweeps and loops (a smoke test)")
    ap.add_argument("--points", type=int, default=22, help="log2 of the sweep size per function and type")
    ap.add_argument("--no-jit", action="store_true", help="skip the timing of compiled loops")
    ap.add_argument("--functions", default=",".join(FUNCTIONS))
    ap.add_argument("--fma", action="store_true", help="math-approx{fma=true}: f32 kernels with math.fma "
                    "(what irc.compile's tensor pipeline runs on a host with FMA)")
    args = ap.parse_args(argv)
    n = 1 << (16 if args.quick else args.points)
    functions = [f for f in args.functions.split(",") if f]

    print(f"max error in ulp over about {n} points per function and type "
          f"(irc: {pipeline(args.fma)} in the interpreter; libm: numpy)")
    print(f"{'function':9} {'type':4} {'target':>6} {'irc ulp':>8} {'at x':>24} {'libm ulp':>9} {'at x':>24}")
    for fn in functions:
        for kind in ("f32", "f64"):
            r = measure(fn, kind, n, args.fma)
            target = TARGETS.get(fn)
            flag = "" if target is None or r["ulp"] <= target else "  OVER TARGET"
            libm_text = f"{r['libm_ulp']:9.3f} {r['libm_at']:24.17g}" if "libm_ulp" in r else f"{'-':>9}"
            print(f"{fn:9} {kind:4} {target if target else '-':>6} {r['ulp']:8.3f} {r['at']:24.17g} "
                  f"{libm_text}{flag}", flush=True)
    if "sin" in functions:
        for kind in ("f32", "f64"):
            far = ", ".join(f"{span}: {e:.3g}" for span, e in far_sin_cos(kind, 1 << (10 if args.quick else 14)))
            print(f"sin {kind} beyond |x| = 2^{int(math.log2(SIN_ACCURATE[kind]))} (max absolute error): {far}; "
                  "NaN from 2^50")

    if args.no_jit or not jit_available():
        print("\n(no timing: the CPU JIT is not available)" if not args.no_jit else "")
        return 0
    size = 1 << (16 if args.quick else 24)
    small, repeat = 1 << 16, (4 if args.quick else 256)
    runs = 1 if args.quick else 7
    print(f"\ncompiled loop b[i] = f(a[i]): {size} elements (ms per call), and {small} elements "
          f"in cache (ns per element); best of {runs}, libm and math-approx interleaved")
    print(f"{'function':9} {'type':4} {'libm':>8} {'approx':>8} {'speedup':>8}   "
          f"{'libm':>7} {'approx':>7} {'speedup':>8}")
    for fn in functions:
        for kind in ("f32", "f64"):
            base, fast = time_loops(fn, kind, size, runs, fma=args.fma)
            base_c, fast_c = time_loops(fn, kind, small, runs, repeat, fma=args.fma)
            print(f"{fn:9} {kind:4} {base * 1e3:8.2f} {fast * 1e3:8.2f} {base / fast:7.1f}x   "
                  f"{base_c / small * 1e9:7.2f} {fast_c / small * 1e9:7.2f} {base_c / fast_c:7.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
