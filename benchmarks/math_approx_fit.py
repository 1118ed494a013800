#!/usr/bin/env python3
"""Derive the polynomial coefficients that ``passes/math_approx_kernels.py`` embeds.

Each kernel approximates a smooth, slowly varying *remainder* function ``g`` on a
small interval (after range reduction), written so that the leading terms are
exact in floating point (``exp(r) = 1 + r + r^2 q(r)``: only ``q`` is fitted).
This script finds the weighted minimax polynomial for every ``g`` with the Remez
exchange algorithm in mpmath at 100 digits, then prints the coefficients rounded
to float64 (f32 kernels round them to float32 when they build the IR), with the
fitted error, so the tables in the kernels module can be checked or regenerated:

    python benchmarks/math_approx_fit.py            # every table
    python benchmarks/math_approx_fit.py exp_q      # one of them
    python benchmarks/math_approx_fit.py tanh_rational  # the rational tanh, and why it is not used

tanh has no table of its own: it is (1 - w) / (1 + w) with w = exp(-2|x|) from exp_q.
``tanh_rational`` records the alternative that was tried first, tanh(a) = a P(a^2) / Q(a^2)
on [0, 9.02] (P(0) = Q(0) = 1, relative minimax by a rational Remez exchange): the degree
(4, 4) fit is within 2.2e-8 (0.4 ulp), but evaluated in float32 without fma (as the
kernels must be) it is 6.2 ulp off, because P, Q, their quotient and the product with a
each round with a relative error up to 2^-24, a whole ulp of a result near 1.

Needs mpmath (``pip install mpmath``); the compiler itself does not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

try:
    import mpmath as mp
except ImportError:  # pragma: no cover - a development tool
    sys.exit("math_approx_fit.py needs mpmath: pip install mpmath")

mp.mp.dps = 100
TINY = mp.mpf("1e-30")  # stands in for 0 where g has a removable singularity


def _nz(t):
    return t if abs(t) > TINY else TINY


@dataclass
class Fit:
    name: str
    g: Callable          # the function to approximate, of the polynomial's variable
    lo: float
    hi: float
    degree: int
    weight: Callable = lambda t: mp.mpf(1)  # minimise max |weight * (g - P)|
    doc: str = ""


def remez(fit: Fit, iterations: int = 30, grid: int = 3000):
    """Weighted minimax polynomial of ``fit.degree``: coefficients (lowest first), max error."""
    n = fit.degree
    a, b = mp.mpf(fit.lo), mp.mpf(fit.hi)
    nodes = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * i / (n + 1)) for i in range(n + 2)]
    xs = [a + (b - a) * i / grid for i in range(grid + 1)]
    gx = [fit.g(x) for x in xs]
    wx = [fit.weight(x) for x in xs]
    coeffs, best = None, None
    for _ in range(iterations):
        rows = [[x ** j for j in range(n + 1)] + [(-1) ** i / fit.weight(x)] for i, x in enumerate(nodes)]
        sol = mp.lu_solve(mp.matrix(rows), mp.matrix([fit.g(x) for x in nodes]))
        coeffs = [sol[j] for j in range(n + 1)]
        err = [w * (g - mp.polyval(coeffs[::-1], x)) for x, g, w in zip(xs, gx, wx)]
        # One extremum per run of equal sign, then keep n + 2 alternating ones.
        extrema, start = [], 0
        for i in range(1, len(err) + 1):
            if i == len(err) or mp.sign(err[i]) != mp.sign(err[start]):
                j = max(range(start, i), key=lambda k: abs(err[k]))
                extrema.append(j)
                start = i
        while len(extrema) > n + 2:  # drop the smallest end
            if abs(err[extrema[0]]) < abs(err[extrema[-1]]):
                extrema.pop(0)
            else:
                extrema.pop()
        best = max(abs(e) for e in err)
        if len(extrema) < n + 2:
            break
        nodes = [xs[j] for j in extrema]
    return coeffs, best


def _erfc_scaled(a):
    return mp.erfc(a) * mp.exp(a * a)


LN2_HALF = mp.log(2) / 2 * mp.mpf("1.002")  # a little slack: k may round the other way near a tie
S_MAX = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1) * mp.mpf("1.002")  # |s| for f in [sqrt(1/2) - 1, sqrt(2) - 1]
QUARTER_PI = mp.pi / 4 * mp.mpf("1.002")
ERF_SPLIT = mp.mpf("0.875")    # erf: odd polynomial below, 1 - exp(-a^2) Q(a) above
ERF_MAX = {"f32": 4, "f64": 6}  # erf rounds to 1 beyond
ERF_Q_SHIFT = {"f32": mp.mpf("0.6875"), "f64": mp.mpf("0.65625")}  # the middle of [1/erf_max, 1/0.875], dyadic


def fits() -> list[Fit]:
    out = []
    for kind, deg_exp, deg_log, deg_sin, deg_cos, deg_erf, deg_q in (
            ("f32", 4, 3, 3, 3, 5, 9), ("f64", 10, 6, 5, 5, 10, 20)):
        out += [
            Fit(f"exp_q_{kind}", lambda r: (mp.exp(_nz(r)) - 1 - _nz(r)) / _nz(r) ** 2,
                -LN2_HALF, LN2_HALF, deg_exp, doc="exp(r) = 1 + r + r^2 q(r), |r| <= ln2/2"),
            Fit(f"log_r_{kind}", lambda z: 2 * mp.atanh(mp.sqrt(_nz(z))) / mp.sqrt(_nz(z)) / _nz(z) - 2 / _nz(z),
                0, S_MAX ** 2, deg_log,
                doc="log1p(f) = 2 atanh(s) = 2s + s z R(z), s = f/(2+f), z = s^2"),
            Fit(f"sin_s_{kind}", lambda z: (mp.sin(mp.sqrt(_nz(z))) - mp.sqrt(_nz(z))) / mp.sqrt(_nz(z)) ** 3,
                0, QUARTER_PI ** 2, deg_sin, doc="sin(r) = r + r z S(z), z = r^2"),
            Fit(f"cos_c_{kind}", lambda z: (mp.cos(mp.sqrt(_nz(z))) - 1 + _nz(z) / 2) / _nz(z) ** 2,
                0, QUARTER_PI ** 2, deg_cos, doc="cos(r) = 1 - z/2 + z^2 C(z), z = r^2"),
            Fit(f"erf_small_{kind}", lambda z: mp.erf(mp.sqrt(_nz(z))) / mp.sqrt(_nz(z)) - 1,
                0, ERF_SPLIT ** 2 * mp.mpf("1.002"), deg_erf, doc="erf(a) = a + a E(a^2), a <= 0.875"),
            Fit(f"erf_q_{kind}", lambda t, c=ERF_Q_SHIFT[kind]: _erfc_scaled(1 / (t + c)),
                mp.mpf(1) / ERF_MAX[kind] - ERF_Q_SHIFT[kind], 1 / ERF_SPLIT - ERF_Q_SHIFT[kind], deg_q,
                weight=lambda t, c=ERF_Q_SHIFT[kind]: mp.exp(-1 / (t + c) ** 2),
                doc=f"erfc(a) = exp(-a^2) Q(1/a - {ERF_Q_SHIFT[kind]}), 0.875 <= a <= {ERF_MAX[kind]}; "
                    "minimax in the error of erf"),
        ]
    return out


def rational_remez(g: Callable, m: int, n: int, hi, iterations: int = 30, grid: int = 3000):
    """Relative minimax ``(1 + z p(z)) / (1 + z q(z))`` of degrees (m, n) for ``g`` on [0, hi],
    g(0) = 1: Remez exchange on m + n + 1 points, each step linearised in the error E
    (E times the previous denominator), then the extrema of the error as the new points."""
    hi = mp.mpf(hi)
    xs = [hi * (1 - mp.cos(mp.pi * i / grid)) / 2 for i in range(1, grid + 1)]
    gx = [g(x) for x in xs]
    count = m + n + 1
    nodes = [hi * (1 - mp.cos(mp.pi * (i + 1) / (count + mp.mpf(0.5)))) / 2 for i in range(count)]
    p, q = [mp.mpf(1)], [mp.mpf(1)]
    best = None
    for _ in range(iterations):
        gn = [g(z) for z in nodes]
        for _ in range(6):
            rows = [[z ** j for j in range(1, m + 1)] + [-gi * z ** j for j in range(1, n + 1)]
                    + [-(-1) ** i * gi * mp.polyval(q[::-1], z)] for i, (z, gi) in enumerate(zip(nodes, gn))]
            sol = mp.lu_solve(mp.matrix(rows), mp.matrix([gi - 1 for gi in gn]))
            p = [mp.mpf(1)] + [sol[j] for j in range(m)]
            q = [mp.mpf(1)] + [sol[m + j] for j in range(n)]
        err = [mp.polyval(p[::-1], x) / mp.polyval(q[::-1], x) / gv - 1 for x, gv in zip(xs, gx)]
        extrema, start = [], 0
        for i in range(1, len(err) + 1):
            if i == len(err) or mp.sign(err[i]) != mp.sign(err[start]):
                extrema.append(max(range(start, i), key=lambda k: abs(err[k])))
                start = i
        while len(extrema) > count:
            extrema.pop(0 if abs(err[extrema[0]]) < abs(err[extrema[-1]]) else -1)
        best = max(abs(e) for e in err)
        if len(extrema) < count:
            break
        nodes = [xs[j] for j in extrema]
    return p, q, best


def tanh_rational(m: int = 4, n: int = 4, hi: float = 9.02) -> None:
    """The rational tanh fit, and its error evaluated in float32 (numpy's float32 operations
    round as the kernels' do) over every 16th float in [0, hi]."""
    import numpy as np

    p, q, err = rational_remez(lambda z: mp.tanh(mp.sqrt(z)) / mp.sqrt(z) if z else mp.mpf(1), m, n, mp.mpf(hi) ** 2)
    print(f"# tanh(a) = a P(a^2) / Q(a^2), degrees ({m}, {n}), |a| <= {hi}: max relative error {mp.nstr(err, 3)}")
    print("TANH_P = (" + ", ".join(repr(float(c)) for c in p) + ")")
    print("TANH_Q = (" + ", ".join(repr(float(c)) for c in q) + ")")
    top = int(np.array(hi, np.float32).view(np.uint32))
    a = np.arange(0, top, 16, dtype=np.uint32).view(np.float32)
    z = a * a

    def horner(cs):  # the kernels' order: c[-1] z + c[-2], then acc z + c
        acc = z * np.float32(float(cs[-1])) + np.float32(float(cs[-2]))
        for c in reversed(cs[:-2]):
            acc = acc * z + np.float32(float(c))
        return acc

    ref = np.tanh(a.astype(np.float64))
    y = np.where(ref.astype(np.float32) == 1, np.float32(1), a * (horner(p) / horner(q)))
    ulp = np.ldexp(1.0, np.maximum(np.frexp(ref)[1] - 1, -126) - 23)
    ulps = np.abs(y - ref) / ulp
    print(f"# evaluated in float32: max {ulps.max():.2f} ulp at a = {a[np.argmax(ulps)]!r}")


def main(argv: list[str]) -> None:
    wanted = set(argv)
    if "tanh_rational" in wanted:
        tanh_rational()
        wanted.discard("tanh_rational")
        if not wanted:
            return
    for fit in fits():
        if wanted and not any(fit.name.startswith(w) for w in wanted):
            continue
        coeffs, err = remez(fit)
        print(f"# {fit.name}: {fit.doc}; degree {fit.degree}, max weighted error {mp.nstr(err, 3)}")
        print(f"{fit.name.upper()} = (" + ", ".join(repr(float(c)) for c in coeffs) + ")")


if __name__ == "__main__":
    main(sys.argv[1:])
