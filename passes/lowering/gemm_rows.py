"""The library GEMM's products of a few rows with B as given: a small batch's ``x @ W``.

The tiles (``gemm_library.PackedGemm``) pad such a product to MR rows (8 f32 on AVX-512, 6 on
AVX2) and read B in place a row apart a k step, every tile an edge tile where C has fewer rows
than MR.  Measured on the Intel Xeon (session 16, beside numpy and torch in one process:
docs/benchmarks.md), that took 1.3-1.6x the best peer's time on 3-6 rows of a large B (4 x 1024
@ 1024 x 1024) and 3-8x on narrow products (4 x 1024 @ 1024 x 27).

**The rows form** (``rows_function``) streams B's rows in order instead, as matmul.py's
``RowStream`` does for one or two rows (inline code, compiled per shape; here the library
carries it, compiled once per host): C's window of columns goes in blocks (``SUMS_BYTES`` of
sums over the rows); for each block and K panel (the tiles' panels, so the same bits: below),
the panel's sums start from zero in a scratch block on the stack, ``k_steps`` k steps at a
time: for each vector of the block's columns (``width`` lanes, then a quarter of that, then
one) the ``k_steps`` vectors of B's rows are loaded once, then each row of C, a trip of a loop (the rows
are a run-time count), broadcasts its ``k_steps`` elements of A, loads its vector of sums, adds
the fused steps and stores it.  At the end of the panel every element is finished as the tiles
finish theirs (``gemm_narrow.finish``, a vector at a time: alpha *
sum + base, then the bias and the ReLU in the last panel).  So each element is the tiles'
sequence: fused steps from zero in k order within a panel, panels as deep, the same
additions: the rows form and the tiles give the same bits, and the choice between them
(``max_rows``, on the product's size) changes no result.
"""

from __future__ import annotations

from irc.types import MemRefType

from .gemm_narrow import (
    PARAMS,
    _form,
    _k_panels,
    _smaller,
    finish,
    load_lanes,
    splat_lanes,
    store_lanes,
)
from .matmul import multiply_add, private_noinline

ROWS_PARAMS = [("a_transposed" if p == "b_transposed" else p) for p in PARAMS]
"""The rows form's parameters: the narrow forms', but whether A's buffer holds A^T where they
say whether B's holds B^T (the rows form is for B as given)."""

ROWS = 5
"""Rows of C up to which a product with B as given takes the rows form whatever the tile
(``max_rows``; products of one or two rows are matmul.py's ``RowStream``, inline, before they
reach the library).  Measured on the
Intel Xeon (session 16, a C harness beside MKL, operands 16 bytes past a cache line as numpy's
are; GFLOP/s of the tiles against the rows form): AVX-512 (MR 8) 3x1024x1024 14 against 20
(MKL 26), 4x1024x1024 22 against 30 (39), 5x1024x1024 27 against 35 (46), 4x64x1024 20 against
42 (77), 4x27x1024 4 against 11 (65), but 6x1024x1024 46 against 46, 7x1024x1024 52 against 50
and 8x1024x1024 47 against 48 (8x4096x1024 63 against 50): the tiles lose little once most of
a tile's rows are C's.  AVX2 (MR 6): 3-5 x 1024 x 1024 14-21 against 21-28 (MKL 19-26),
4x64x1024 15 against 31, but 6x1024x1024 30 against 29."""


def max_rows(blocking) -> int:
    """Rows of C up to which a product with B as given takes the rows form: ``ROWS``, or short
    of two row panels of tiles (2 MR - 1), where the tiles would compute a second, partial panel
    of MR rows, whichever is more.  The rule was MR + 2 (session 17), then MR + MR/2 (session
    18, before ``k_steps``: the first measurements below); with ``k_steps`` the rows form won up
    to 2 MR - 1 rows with AVX-512's tile and AVX2's (the last ones).

    Measured with the library beside numpy's OpenBLAS (GFLOP/s of the tiles against the rows
    form, or paired ratios of time to numpy's).  AMD EPYC Zen 3 (AVX2, MR 6; session 17):
    7x1024x1024 18 against 31 (numpy 20), 8x1024x1024 21 against 30 (32), 8x512x512 22 against
    30 (33), 8x4096x1024 14 against 23 (26); at 6 rows 28 against 28, at 9 and 10 rows 25 and 28
    against 30 (a slower stretch), at 12 and 16 the same.  AMD EPYC Zen 5 (AVX-512, MR 8; session
    18, numpy's OpenBLAS on its Haswell kernels, 30-40 paired rounds), time / numpy's, tiles
    against the rows form: 9x1024x1024 0.69 against 0.48, 10x 0.87 against 0.44, 11x 0.55-0.65
    against 0.35-0.39, 12x 0.85-0.96 against 0.65-0.68, 11x4096x1024 0.91 against 0.60,
    12x2048x512 0.88 against 0.59, 12x1024x4096 0.90 against 0.57 (12x256x288 0.66 against
    0.70); at 13 rows alike (0.72 against 0.68), at 14 and 16 the tiles ahead (0.59 against 0.64,
    0.58 against 0.87), and at MR rows mixed (8x1024x1024 0.47 against 0.52, 8x4096x1024 0.71
    against 0.53).  Held to AVX2 there (``IRC_CPU=x86-64-v3``, MR 6, the rows form with
    ``k_steps``), 9 rows in the rows form against the tiles: 9x1024x1024 0.54 against 1.26,
    9x4096x1024 0.53 against 1.10, 9x512x512 0.42 against 0.65, 9x256x288 0.52 against 0.71.
    With ``k_steps``, on the Zen 5, rows form against tiles: AVX-512 13x1024x1024 0.49 against
    0.72, 14x1024x1024 0.49 against 0.56, 14x4096x1024 0.44 against 0.66, 14x256x288 0.46
    against 0.48, 15x1024x1024 0.41 against 0.47, 15x4096x1024 0.38 against 0.55, 15x256x288
    0.31 against 0.39, 15x2048x2048 0.35 against 0.63, but at 16 rows (two whole panels)
    16x1024x1024 0.61 against 0.60 and 16x256x288 0.58 against 0.43; AVX2 10x1024x1024 0.56
    against 1.16, 11x1024x1024 0.47 against 0.88, 11x256x288 0.46 against 0.54, 10x4096x1024
    0.52 against 1.12 (and at 12 rows, two whole panels, 12x1024x1024 0.87 against 1.36: one
    measurement, not taken).
    The Intel Xeon's 6-8 rows (AVX-512) ran alike in both forms (session 16)."""
    return max(ROWS, 2 * blocking.mr - 1)

def k_steps(blocking) -> int:
    """k steps a vector of sums takes between its load and its store: as many as the tile has
    rows (MR), so that B's vectors of those steps take the registers the tile's sums take (MR
    vectors of NR lanes; the rows form keeps one vector of sums and a broadcast beside them, as
    the tile keeps B's vector and a broadcast).  More steps a load and store of the sums: the
    rows form's loads and stores, not its multiply-adds, were what bound it.  Measured on the
    AMD EPYC Zen 5 (session 18, through ``irc.compile``, time / numpy's (OpenBLAS on its Haswell
    kernels), 30 paired rounds), 4 steps (before) against MR: AVX-512 (MR 8) 3x1024x1024 0.25
    against 0.22, 4x1024x1024 0.52 against 0.44, 8x1024x1024 0.54 against 0.45, 12x1024x1024
    0.69 against 0.59, 12x4096x1024 0.67 against 0.50, 6x256x256 0.32 against 0.24 (6 steps:
    0.24, 0.49, 0.50, 0.69, 0.59, 0.28); AVX2 (MR 6) 6x1024x1024 0.50 against 0.49, 9x4096x1024
    0.56 against 0.51, 6x256x256 0.41 against 0.37, and 8 steps (past the 16 registers) 0.65,
    0.59 and 0.48."""
    return max(1, blocking.mr)

SUMS_BYTES = 12 << 10
"""Bytes of the sums of C's block of columns, all its rows together: a block of a row is
``SUMS_BYTES`` / rows (``block_columns``), from ``BLOCK_MIN_BYTES`` to ``BLOCK_MAX_BYTES``, so
that the sums stay in L1 beside ``k_steps`` rows of B's block while few rows read B in longer
runs.  Measured on the AMD EPYC Zen 5 (AVX-512, L1 48 KiB; session 18, through ``irc.compile``,
time / numpy's (OpenBLAS on its Haswell kernels), median of 30 paired rounds), against blocks
of 1 KiB a row whatever the rows (before; the same scratch block): 3x1024x1024 0.24 against
0.30, 4x1024x1024 0.55 against 0.60, 4x4096x1024 0.54 against 0.60, 5x1024x1024 0.33 against
0.37, 6x1024x1024 0.40 against 0.38, 8x1024x1024 0.52 against 0.58, 12x1024x1024 0.67 against
0.67; held to AVX2 (``IRC_CPU=x86-64-v3``, max_rows 9): 3x1024x1024 0.27 against 0.35,
4x1024x1024 0.65 against 0.74, 6x1024x1024 0.49 against 0.53, 8x1024x1024 0.78 against 0.84,
9x1024x1024 0.58 against 0.64.  With the scratch block sized for 4 KiB rows of every row (64
KiB), every fixed block from 1 to 4 KiB a row was slower than this rule (4x4096x1024 0.50-0.60
against 0.46, 6x1024x1024 0.39-0.45 against 0.31, 8x1024x1024 0.55-0.73 against 0.44): the
scratch block stays small."""

BLOCK_MIN_BYTES = 1 << 10
"""Bytes of a row of C's block at least (``SUMS_BYTES``)."""

BLOCK_MAX_BYTES = 4 << 10
"""Bytes of a row of C's block at most (``SUMS_BYTES``)."""


def _block_bounds(elem, width: int) -> tuple[int, int]:
    """The fewest and most columns of a block (``BLOCK_MIN_BYTES``, ``BLOCK_MAX_BYTES``), in ``width``'s."""
    size = max(1, elem.width // 8)
    return tuple(max(width, b // size // width * width) for b in (BLOCK_MIN_BYTES, BLOCK_MAX_BYTES))


def block_columns(lb, elem, width: int, rows):
    """Columns of C's block for a product of ``rows`` rows (a run-time value): ``SUMS_BYTES`` of
    sums over the rows, within ``_block_bounds``, a multiple of ``width``."""
    least, most = _block_bounds(elem, width)
    per_rows = lb.op("arith.divui", lb.index(SUMS_BYTES // max(1, elem.width // 8)),
                     lb.op("arith.maxui", rows, lb.index(1)))
    columns = lb.op("arith.minui", lb.op("arith.maxui", per_rows, lb.index(least)), lb.index(most))
    return lb.op("arith.divui", columns, lb.index(width)) * width


def sums_elements(elem, blocking) -> int:
    """Elements of the scratch block of sums: ``block_columns`` of up to ``max_rows`` rows hold
    at most ``SUMS_BYTES``, or the fewest columns a row where that is more."""
    least, _ = _block_bounds(elem, blocking.nr)
    return max(max_rows(blocking) * least, SUMS_BYTES // max(1, elem.width // 8))


def rows_function(lb, module, name: str, elem, blocking) -> str:
    """``@name``, private: C's columns col_begin..col_end of a product of at most ``max_rows`` rows
    with B as given (``ROWS_PARAMS``: A, or A^T where ``a_transposed``), in the rows form (the
    module docstring)."""
    width = blocking.nr
    fused = blocking.fma
    with _form(lb, module, name, elem, ROWS_PARAMS) as args:
        a, b, c, d, _, m, n, k, ta, alpha, add_d, j0, j1, bias, add_bias, relu = args
        block = block_columns(lb, elem, width, m)
        sums = lb.op("memref.alloca", result=MemRefType([sums_elements(elem, blocking)], elem))
        with lb.for_(j0, j1, block) as blk:
            c0 = blk.iv
            c1 = _smaller(lb, c0 + block, j1)
            with _k_panels(lb, elem, k, blocking.kc, (c, d), (alpha, add_d, add_bias, relu)) as (pc, kc, stores):
                def at(r, j):  # row r's sum of column j (j from c0)
                    return r * block - c0 + j

                zero = lb.const(0, elem)
                with lb.for_(0, m) as r:
                    _columns(lb, c0, c1, width, lambda j, lanes: store_lanes(lb, splat_lanes(lb, zero, lanes), sums,
                                                                               at(r.iv, j), lanes))
                steps = k_steps(blocking)
                grouped = pc + lb.op("arith.divui", kc, lb.index(steps)) * steps
                with lb.for_(pc, grouped, steps) as p:
                    _steps(lb, (a, b, sums), (m, n, k, ta), p.iv, steps, c0, c1, width, at, fused)
                with lb.for_(grouped, pc + kc) as p:
                    _steps(lb, (a, b, sums), (m, n, k, ta), p.iv, 1, c0, c1, width, at, fused)
                with lb.for_(0, m) as r:
                    _columns(lb, c0, c1, width, lambda j, lanes: finish(
                        lb, elem, load_lanes(lb, sums, at(r.iv, j), lanes), c, r.iv * n + j, bias, j, stores, fused, lanes))
    return private_noinline(module, name)


def _steps(lb, buffers, sizes, p, steps: int, c0, c1, width: int, at, fused) -> None:
    """k steps p .. p+steps-1 on the block's columns c0..c1 of every row, in k order: for each
    vector of columns, B's ``steps`` row vectors loaded once (registers), then a row a trip, its
    elements of A broadcast, its vector of sums loaded and stored once."""
    a, b, sums = buffers
    m, n, k, ta = sizes
    b_rows = [(p + u) * n for u in range(steps)]  # made once: the library skips LLVM's loop passes
    a_at = [lb.select(ta, (p + u) * m, p + u) for u in range(steps)]  # row r's element: a_at + r * a_row
    a_row = lb.select(ta, lb.index(1), k)

    def body(j, lanes):
        ys = [load_lanes(lb, b, row + j, lanes) for row in b_rows]
        with lb.for_(0, m) as r:
            xs = [lb.load(a, [start + r.iv * a_row]) for start in a_at]
            where = at(r.iv, j)
            acc = load_lanes(lb, sums, where, lanes)
            for x, y in zip(xs, ys):
                acc = multiply_add(lb, fused, splat_lanes(lb, x, lanes), y, acc)
            store_lanes(lb, acc, sums, where, lanes)

    _columns(lb, c0, c1, width, body)


def _columns(lb, c0, c1, width: int, body) -> None:
    """``body(j, lanes)`` for j from c0 to c1: ``width`` columns at a time, then a quarter of that
    (a 27-column product is mostly vectors too), then one at a time."""
    start = c0
    for lanes in dict.fromkeys((width, max(1, width // 4), 1)):
        end = c1 if lanes == 1 else start + lb.op("arith.divui", c1 - start, lb.index(lanes)) * lanes
        with lb.for_(start, end, lanes) as j:
            body(j.iv, lanes)
        start = end
