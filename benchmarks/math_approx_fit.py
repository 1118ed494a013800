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
TANH_SPLIT = mp.mpf("0.5625")  # tanh: odd polynomial below, expm1 above
ERF_SPLIT = mp.mpf("0.875")    # erf: odd polynomial below, 1 - exp(-a^2) Q(a) above
ERF_MAX = {"f32": 4, "f64": 6}  # erf rounds to 1 beyond
ERF_Q_SHIFT = {"f32": mp.mpf("0.6875"), "f64": mp.mpf("0.65625")}  # the middle of [1/erf_max, 1/0.875], dyadic


def fits() -> list[Fit]:
    out = []
    for kind, deg_exp, deg_log, deg_sin, deg_cos, deg_tanh, deg_erf, deg_q in (
            ("f32", 4, 3, 3, 3, 4, 5, 9), ("f64", 10, 6, 5, 5, 10, 10, 20)):
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
            Fit(f"tanh_t_{kind}", lambda z: (mp.tanh(mp.sqrt(_nz(z))) / mp.sqrt(_nz(z)) - 1) / _nz(z),
                0, TANH_SPLIT ** 2 * mp.mpf("1.002"), deg_tanh, doc="tanh(a) = a + a z T(z), z = a^2, a <= 0.5625"),
            Fit(f"erf_small_{kind}", lambda z: mp.erf(mp.sqrt(_nz(z))) / mp.sqrt(_nz(z)) - 1,
                0, ERF_SPLIT ** 2 * mp.mpf("1.002"), deg_erf, doc="erf(a) = a + a E(a^2), a <= 0.875"),
            Fit(f"erf_q_{kind}", lambda t, c=ERF_Q_SHIFT[kind]: _erfc_scaled(1 / (t + c)),
                mp.mpf(1) / ERF_MAX[kind] - ERF_Q_SHIFT[kind], 1 / ERF_SPLIT - ERF_Q_SHIFT[kind], deg_q,
                weight=lambda t, c=ERF_Q_SHIFT[kind]: mp.exp(-1 / (t + c) ** 2),
                doc=f"erfc(a) = exp(-a^2) Q(1/a - {ERF_Q_SHIFT[kind]}), 0.875 <= a <= {ERF_MAX[kind]}; "
                    "minimax in the error of erf"),
        ]
    return out


def main(argv: list[str]) -> None:
    wanted = set(argv)
    for fit in fits():
        if wanted and not any(fit.name.startswith(w) for w in wanted):
            continue
        coeffs, err = remez(fit)
        print(f"# {fit.name}: {fit.doc}; degree {fit.degree}, max weighted error {mp.nstr(err, 3)}")
        print(f"{fit.name.upper()} = (" + ", ".join(repr(float(c)) for c in coeffs) + ")")


if __name__ == "__main__":
    main(sys.argv[1:])
