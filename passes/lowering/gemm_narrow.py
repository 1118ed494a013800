"""The library GEMM's products of few columns (a classifier's ``h @ W`` with ``W`` 1024 x 10),
and of few rows with B^T given (a small batch's ``x @ W^T``).

The tiles of ``gemm_library.PackedGemm`` hold a vector of C's columns a row: a product of at
most one vector's columns (n <= W, W = NR/2 lanes: 16 f32 on AVX-512) fills 10 of a
half-width kernel's 16 lanes, its MR x 1 vectors of accumulators are too few to hide the
multiply-add's latency, and with A read in place each multiply-add broadcasts A from an
indexed address (two micro-operations on Intel's cores).  Such products ran at 0.5-0.6 of
MKL's speed; in these forms at 1.1-1.5 (a C harness beside MKL; docs/benchmarks.md, session 13).
A product a little wider than W fills little more of the full tiles' NR lanes (20 of 32 on
AVX-512; a classifier's 10 of 16 on AVX2, where W is 8): the forms take those too, up to
``DOT_FILL`` and ``COLUMN_FILL`` of NR, where they were measured faster than the tiles.

**The dot form** (``dot_function``), where A is not transposed: A's rows are contiguous along
k, and so are B^T's, packed for each K panel in blocks of J rows, W k steps of each row after
the other (``copy_column``), so that a step's J vectors sit at constant offsets from one
index; or, where B^T is given and C has few rows (``DOT_IN_PLACE_ROWS``), read in place, J
rows at a time down all of C's rows, whatever the product's columns (a small batch's ``x @
W^T``, which the tiles would pad to MR rows).  An R x J block of C is R * J vectors whose
lanes hold the sums of one residue of k modulo W; a step loads W k steps of R rows of A and of the J rows of B^T and does R * J
multiply-adds on full vectors.  At the end of a K panel a fixed tree of shuffles and adds
(``fold``) adds each vector's lanes, and the last k % W terms follow one at a time in k order.
So each element is a sum of fused steps in another (fixed) order than the tiles'.

**The column form** (``column_function``), where A^T is given: A's columns are contiguous
(A^T's rows), so a block of C is R vectors down W of C's rows each by J columns; a k step
loads R vectors of A^T's row and broadcasts J elements of B's row, packed J a k step, in k
order as the tiles do.  The vectors reach C's elements (a row's columns apart) through a
scratch buffer at the end of a K panel.

Both then compute C's element as the tiles do: ``alpha * sum + base``, with the bias and ReLU
in the last K panel (``finish``).  The sums stay within the same K-term bound, and the
interpreter runs the same operations, so the bits agree with it.  Which products take a form
depends on their sizes only (n, not a thread's window of columns), so a product split across
threads sums in the same order as on one.
"""

from __future__ import annotations

from contextlib import contextmanager

from irc.types import MemRefType, i1, index

from .matmul import multiply_add, private_noinline

K_PANELS = 4
"""A narrow product's K panel is this many of the blocking's KC deep (1024 f32 on the Intel
Xeon): each K panel ends with a fold of R * J vectors (some 60 shuffles and adds at R * J =
20) and R * J updates of C, so deeper panels cost less; R rows of A and J rows of B^T, this
deep, stay in L1 between the column blocks that reuse them."""

DOT_MIN_K = 2
"""Vectors of k steps (W each) below which a narrow product with A not transposed stays with the
tiles."""

COLUMN_MIN_M = 1
"""Vectors of rows (W each) below which a narrow product with A^T given stays with the tiles (the
column form's vectors start at m - W at the latest)."""

COLUMN_BLOCK = 10
"""J, the columns of a column-form block (``column_tile``): a classifier's 10 columns in one (fewer
where the form takes fewer: 5 for AVX2's f64, whose W is 4)."""

DOT_FILL = (3, 4)
"""A product of more than W but at most this share of NR columns takes the dot form (A not
transposed), where the tiles would fill at most that share of their lanes (n = 17-24 of 32 on
AVX-512, 9-12 of 16 on AVX2).  The dot form itself runs at some 0.55-0.65 of the multiply-add
peak whatever n (its fold and its gathered packing of B's columns), the tiles at about their
lanes' fill times 0.95 of MKL.  Measured on the Intel Xeon (session 14, a C harness beside MKL,
ratios to MKL in the same rounds): 256 x n x 1024 at n = 17, 20, 24, 28, 32: dot 1.11, 1.17-1.18,
0.84-0.91, 0.81, 0.55-0.59 against the tiles' 0.69, 0.78-0.79, 0.70-0.75, 0.74, 0.91; B^T given,
n = 20: 1.45 against 0.95.  AVX2 code (``IRC_CPU=x86-64-v3``): n = 10 and 12 at 48 and 60
GFLOP/s against 44 and 53, n = 16 (the tiles' full width) 61 against 85."""

COLUMN_FILL = (5, 8)
"""As ``DOT_FILL`` for the column form (A^T given): its blocks are J = 10 columns, and A^T's rows
are read in place, a row of A^T apart a k step, so it stops sooner: n = 20 of 32 on AVX-512, 10
of 16 on AVX2.  Measured as ``DOT_FILL``: 1024 x n x 256 at n = 20, 24, 32: 0.80, 0.62, 0.47 of
MKL against the tiles' 0.70, 0.73, 0.79; AVX2 n = 10 and 12: 41 and 21 GFLOP/s against 33 and 31."""

DOT_IN_PLACE_ROWS = 12
"""Rows of C up to which a product with B^T given takes the dot form whatever its columns, B^T's
rows read in place (``in_place``): the tiles pad so few rows to MR (8 on AVX-512) and pack all of
B^T for them.  Measured on the Intel Xeon (session 16, a C harness beside MKL, operands 16 bytes
past a cache line as numpy's are), GFLOP/s of the tiles against the dot form: AVX-512 5x1024x1024
19 against 43 (MKL 34), 8x1024x1024 32 against 62 (36), 8x64x1024 48 against 74 (75),
12x512x512 54 against 85 (78), 12x27x1024 56 against 70 (75).  With C's rows outer (the first
version: B^T read again for each R rows), 16x1024x1024 ran 52 against 51 and 16x256x256 74
against 68; AVX2 (``IRC_CPU=x86-64-v3``) 5x1024x1024 20 against 25, 6x256x256 27 against 44,
8x64x1024 22 against 44, 12x512x512 43 against 46, 16x256x256 41 against 42.  Products of more rows pack B^T for the
dot form (a block of it is read by every R rows of C), which read in place ran 256x20x1024 at 110
GFLOP/s against 102 with aligned operands but 58 against 74 with numpy's offsets (its 9 rows a
step then each cross cache lines)."""


def in_place(lb, tb, m):
    """Whether the dot form reads B^T's rows in place (``DOT_IN_PLACE_ROWS``): an ``i1``."""
    return tb & (m <= lb.index(DOT_IN_PLACE_ROWS))


PARAMS = ["a", "b", "c", "d", "packed_b", "m", "n", "k", "b_transposed", "alpha", "add_d", "col_begin", "col_end",
          "bias", "add_bias", "relu"]


def lanes(blocking) -> int:
    """W: the lanes of one vector, half the tile's width (the tile's row is two vectors)."""
    return blocking.nr // 2


def registers(elem, blocking) -> int:
    """The host's vector registers, as x86-64 has them: 32 with 512-bit vectors (AVX-512), else
    16.  The library's name says the vector width (NR), not the register count (MR stops at 8)."""
    return 32 if lanes(blocking) * elem.width >= 512 else 16


def dot_tile(elem, blocking) -> tuple[int, int]:
    """(R, J): rows of A by rows of B^T a dot-form block.  R * J accumulators and the R + J
    vectors a step loads fit in the registers with one to spare; J = 5 makes a 10-column
    product two blocks with no lanes wasted (columns past the product's are zeros in packed B,
    rows past C's repeat its last row; neither is stored)."""
    return (4, 5) if registers(elem, blocking) >= 32 else (2, 4)


def dot_columns(blocking) -> int:
    """The widest product the dot form takes: W, or ``DOT_FILL`` of the tile's NR lanes."""
    return max(lanes(blocking), blocking.nr * DOT_FILL[0] // DOT_FILL[1])


def column_columns(blocking) -> int:
    """The widest product the column form takes: W, or ``COLUMN_FILL`` of the tile's NR lanes."""
    return max(lanes(blocking), blocking.nr * COLUMN_FILL[0] // COLUMN_FILL[1])


def max_columns(blocking) -> int:
    """The widest product either form takes (the scratch that packed B needs for one)."""
    return max(dot_columns(blocking), column_columns(blocking))


def panel_depth(blocking) -> int:
    """The narrow forms' K panel: ``K_PANELS`` of the blocking's."""
    return K_PANELS * blocking.kc


def scratch_elements(blocking, n: int, k: int) -> int:
    """Elements of packed B a narrow product's K panel needs: blocks of J of its n columns (J is
    at most ``COLUMN_BLOCK``: fewer than n + max(W, J) columns in all), each the panel's depth
    rounded up to a multiple of W (the dot form's zero padding)."""
    w = lanes(blocking)
    return (n + max(w, COLUMN_BLOCK)) * -(-min(k, panel_depth(blocking)) // w) * w


def dot_function(lb, module, name: str, elem, blocking) -> str:
    """``@name``, private: C's columns col_begin..col_end of a product of n <= ``dot_columns``
    columns with A not transposed, in the dot form (the module docstring), with the library's parameters
    (``PARAMS``: A, B, C, D flat; B^T's rows read from B's buffer where ``b_transposed`` and C
    has at most ``DOT_IN_PLACE_ROWS`` rows, else packed into ``packed_b``)."""
    w, (rows, cols), depth = lanes(blocking), dot_tile(elem, blocking), panel_depth(blocking)
    fused = blocking.fma
    with _form(lb, module, name, elem) as args:
        a, b, c, d, packed_b, m, n, k, tb, alpha, add_d, j0, j1, bias, add_bias, relu = args
        zero = lb.const(0, elem)
        width = j1 - j0
        folded = lb.op("memref.alloca", result=MemRefType([w * -(-rows * cols // w)], elem))

        with _k_panels(lb, elem, k, depth, (c, d), (alpha, add_d, add_bias, relu)) as (pc, kc, stores):
            steps = _ceil_div(lb, kc, w)
            blocks = _ceil_div(lb, width, cols)
            block_size = steps * (cols * w)
            sweep = (lb, elem, (rows, cols), w, fused, (a, b, c, packed_b, bias), (m, n, k, j0, width),
                     (pc, kc, stores, blocks, block_size), folded)
            with lb.if_(in_place(lb, tb, m)) as layout:
                with layout.then_():  # B^T's rows are contiguous along k, as A's are: read in place
                    _dot_blocks(*sweep, in_place=True)
                with layout.else_():
                    # B's columns (B^T's rows, for more rows of C) packed for this panel: blocks of
                    # J columns, each W k steps at a time as J vectors (zeros past the window's
                    # columns and past kc), so that a step's J vectors are at constant offsets
                    # from one index
                    with lb.for_(0, blocks * block_size, w) as at:
                        lb.vector_store(lb.splat_vector(zero, w), packed_b, [at.iv])
                    with lb.for_(0, width) as j:
                        to = lb.op("arith.divui", j.iv, lb.index(cols)) * block_size \
                            + lb.op("arith.remui", j.iv, lb.index(cols)) * w
                        # B^T's row is contiguous along k; B's column is a row apart a k step
                        source = lb.select(tb, (j0 + j.iv) * k + pc, pc * n + j0 + j.iv)
                        copy_column(lb, b, source, lb.select(tb, lb.index(1), n), packed_b, to, kc, w, cols)
                    _dot_blocks(*sweep, in_place=False)
    return private_noinline(module, name)


def _dot_blocks(lb, elem, tile, w: int, fused, buffers, sizes, panel, folded, in_place: bool) -> None:
    """The dot form's R x J blocks of C over one K panel (``dot_function``).  From the packed
    panel (J vectors at constant offsets from one index), each R rows of A across all the
    blocks of columns (A's rows stay in L1, the packed panel streams from L2).  With B^T
    ``in_place`` (J rows of its buffer, each at its own index; past the window's last column
    the last is read again, and not stored), each J rows of B^T down all of C's few rows (B^T's
    rows stay in L1, and B^T is read once: A's few rows are what is read again)."""
    rows, m, blocks = tile[0], sizes[0], panel[3]
    block = (lb, elem, tile, w, fused, buffers, sizes, panel, folded, in_place)
    if in_place:
        with lb.for_(0, blocks) as col_block:
            with lb.for_(0, m, rows) as row_block:
                _dot_block(*block, row_block.iv, col_block.iv)
    else:
        with lb.for_(0, m, rows) as row_block:
            with lb.for_(0, blocks) as col_block:
                _dot_block(*block, row_block.iv, col_block.iv)


def _dot_block(lb, elem, tile, w: int, fused, buffers, sizes, panel, folded, in_place: bool, i0, block) -> None:
    """One R x J block of C (rows from ``i0``, the ``block``-th J columns) over one K panel."""
    (rows, cols), (a, b, c, packed_b, bias), (m, n, k, j0, width) = tile, buffers, sizes
    pc, kc, stores, _, block_size = panel
    zero = lb.const(0, elem)
    vectors_end = kc - lb.op("arith.remui", kc, lb.index(w))
    a_rows = [_smaller(lb, i0 + r, m - 1) * k + pc for r in range(rows)]
    jb = block * cols
    zeros = lb.splat_vector(zero, w)
    if in_place:
        b_rows = [(j0 + _smaller(lb, jb + j, width - 1)) * k + pc for j in range(cols)]
    else:
        b_rows = [block * block_size]
    with lb.for_(0, vectors_end, w, inits=[zeros] * (rows * cols) + a_rows + b_rows) as kv:
        a_at, b_at = kv.args[rows * cols:rows * cols + rows], kv.args[rows * cols + rows:]
        xs = [lb.vector_load(a, [at], w) for at in a_at]
        if in_place:
            ys = [lb.vector_load(b, [at], w) for at in b_at]
            b_next = [at + w for at in b_at]
        else:
            ys = [lb.vector_load(packed_b, [b_at[0] + j * w if j else b_at[0]], w) for j in range(cols)]
            b_next = [b_at[0] + cols * w]
        kv.yield_(*[multiply_add(lb, fused, x, y, kv.args[r * cols + j])
                    for r, x in enumerate(xs) for j, y in enumerate(ys)],
                  *[at + w for at in a_at], *b_next)
    sums = fold(lb, kv.results[:rows * cols], folded, w)
    with lb.for_(vectors_end, kc, inits=sums) as tail:  # the last kc % W steps: in k order
        xs = [lb.load(a, [at + tail.iv]) for at in a_rows]
        if in_place:
            ys = [lb.load(b, [at + tail.iv]) for at in b_rows]
        else:
            lane = tail.iv - vectors_end
            ys = [lb.load(packed_b, [kv.results[-1] + j * w + lane]) for j in range(cols)]
        tail.yield_(*[multiply_add(lb, fused, x, y, tail.args[r * cols + j])
                      for r, x in enumerate(xs) for j, y in enumerate(ys)])
    for q, total in enumerate(tail.results):  # then C's elements, one loop of stores
        lb.store(total, folded, [lb.index(q)])
    with lb.for_(0, _smaller(lb, rows, m - i0)) as r:
        with lb.for_(0, _smaller(lb, cols, width - jb)) as j:
            column = j0 + jb + j.iv
            total = lb.load(folded, [r.iv * cols + j.iv])
            finish(lb, elem, total, c, (i0 + r.iv) * n + column, bias, column, stores, fused)


def column_tile(elem, blocking) -> tuple[int, int]:
    """(R, J): vectors of W rows by columns of B a column-form block: R * J accumulators, R
    vectors of A^T and a broadcast of B fit in the registers; J = 10 is a classifier's 10
    columns in one block."""
    cols = min(COLUMN_BLOCK, column_columns(blocking))
    return (2, cols) if registers(elem, blocking) >= 32 else (1, cols)


def column_function(lb, module, name: str, elem, blocking) -> str:
    """``@name``, private: C's columns col_begin..col_end of a product of n <= ``column_columns``
    columns with A given as A^T (``PARAMS``; ``a`` is A^T's buffer, k x m), in the column form: a block of C is R
    vectors down W of C's rows each by J columns, and each k step loads R vectors of A^T's row
    (A's column: its rows are contiguous there) and broadcasts J elements of B's row (B in place,
    B^T packed k-major), one multiply-add a vector and column, in k order as the tiles do.  The
    last block's vectors start at m - W at the latest (m >= W), so no load passes A^T's row; the
    rows a vector holds that another did already are not stored again.  At the end of a K panel
    the vectors go through a scratch buffer to C's elements, which are a row's J columns apart."""
    w, (rows, cols), depth = lanes(blocking), column_tile(elem, blocking), panel_depth(blocking)
    fused = blocking.fma
    with _form(lb, module, name, elem) as args:
        a, b, c, d, packed_b, m, n, k, tb, alpha, add_d, j0, j1, bias, add_bias, relu = args
        zero = lb.const(0, elem)
        width = j1 - j0
        block = lb.op("memref.alloca", result=MemRefType([rows * cols * w], elem))

        with _k_panels(lb, elem, k, depth, (c, d), (alpha, add_d, add_bias, relu)) as (pc, kc, stores):
            # B's panel packed J columns a k step, in blocks of J columns (zeros past the window's),
            # so that a step's J elements are at constant offsets from one index
            blocks = _ceil_div(lb, width, cols)
            with lb.for_(0, blocks) as blk:
                with lb.for_(0, cols) as j:
                    column = blk.iv * cols + j.iv
                    inside = column < width
                    at = blk.iv * (kc * cols) + j.iv
                    with lb.if_(inside) as copy:
                        with copy.then_():
                            with lb.if_(tb) as layout:
                                with layout.then_():  # B^T's row: contiguous along k
                                    with lb.for_(0, kc) as p:
                                        value = lb.load(b, [(j0 + column) * k + pc + p.iv])
                                        lb.store(value, packed_b, [at + p.iv * cols])
                                with layout.else_():
                                    with lb.for_(0, kc) as p:
                                        value = lb.load(b, [(pc + p.iv) * n + j0 + column])
                                        lb.store(value, packed_b, [at + p.iv * cols])
                        with copy.else_():
                            with lb.for_(0, kc) as p:
                                lb.store(zero, packed_b, [at + p.iv * cols])
            with lb.for_(0, m, rows * w) as row_block:
                i0 = row_block.iv
                starts = [_smaller(lb, i0 + v * w, m - w) for v in range(rows)]
                with lb.for_(0, blocks) as col_block:
                    jb = col_block.iv * cols
                    zeros = lb.splat_vector(zero, w)
                    inits = [zeros] * (rows * cols) + [pc * m + start for start in starts] + [jb * kc]
                    with lb.for_(0, kc, inits=inits) as kv:
                        sums, a_at, b_at = (kv.args[:rows * cols], kv.args[rows * cols:rows * cols + rows],
                                            kv.args[-1])
                        xs = [lb.vector_load(a, [at], w) for at in a_at]
                        sums = list(sums)
                        for j in range(cols):  # a broadcast lives for its R multiply-adds only
                            y = lb.splat_vector(lb.load(packed_b, [b_at + j]), w)
                            for v, x in enumerate(xs):
                                sums[v * cols + j] = multiply_add(lb, fused, x, y, sums[v * cols + j])
                        kv.yield_(*sums, *[at + m for at in a_at], b_at + cols)
                    for q in range(rows * cols):
                        lb.vector_store(kv.results[q], block, [lb.index(q * w)])
                    for v, start in enumerate(starts):
                        # the rows this vector adds: from i0 + v W, below m and the next vector's
                        first_row = i0 + v * w
                        end_row = _smaller(lb, first_row + w, m)
                        with lb.for_(0, _smaller(lb, cols, width - jb)) as j:
                            column = j0 + jb + j.iv
                            with lb.for_(first_row - start, end_row - start) as lane:
                                total = lb.load(block, [(v * cols + j.iv) * w + lane.iv])
                                finish(lb, elem, total, c, (start + lane.iv) * n + column, bias, column, stores, fused)
    return private_noinline(module, name)


@contextmanager
def _form(lb, module, name: str, elem, names=PARAMS):
    """``@name`` of ``module`` with the narrow forms' parameters (``PARAMS``, or their types
    under other ``names``); the ``with`` body builds it and gets the arguments."""
    vec = MemRefType([None], elem)
    types = [vec, vec, vec, vec, vec, index, index, index, i1, elem, i1, index, index, vec, i1, i1]
    with lb.function(module, name, types, [], arg_names=names) as args:
        yield args
        lb.ret()


@contextmanager
def _k_panels(lb, elem, k, depth: int, c_and_d, flags):
    """A loop over equal K panels at most ``depth`` deep; the ``with`` body is a panel's and gets
    (its first k step, its depth, its stores' ``panel_flags``)."""
    step = _ceil_div(lb, k, _ceil_div(lb, k, depth))
    with lb.for_(0, k, step) as panel:
        kc = _smaller(lb, step, k - panel.iv)
        yield panel.iv, kc, panel_flags(lb, elem, *c_and_d, panel.iv.eq(0), (panel.iv + kc).eq(k), flags)


def _smaller(lb, x, y):
    return lb.op("arith.minsi", lb.index(x), lb.index(y))


def _ceil_div(lb, x, y):
    return lb.op("arith.divui", x + (lb.index(y) - 1), lb.index(y))


def copy_column(lb, source, start, stride, packed, to, kc, w: int, cols: int) -> None:
    """B^T's row (B's column) from ``start``, ``stride`` apart (1: a vector load a step), kc
    elements, into the dot form's packed layout from ``to``: W elements, then the next W after the
    block's other J - 1 rows."""
    whole = lb.op("arith.divui", kc, lb.index(w))
    contiguous = stride.eq(1)
    with lb.for_(0, whole) as s:
        first = start + s.iv * w * stride
        with lb.if_(contiguous, [lb.splat_vector(lb.const(0, packed.type.element_type), w).type]) as row:
            with row.then_():
                row.yield_(lb.vector_load(source, [first], w))
            with row.else_():
                row.yield_(lb.vector_of([lb.load(source, [first + t * stride if t else first]) for t in range(w)]))
        lb.vector_store(row.results[0], packed, [to + s.iv * (cols * w)])
    with lb.for_(whole * w, kc) as p:
        lb.store(lb.load(source, [start + p.iv * stride]), packed, [to + whole * (cols * w) + (p.iv - whole * w)])


def fold(lb, vectors, scratch, w: int) -> list:
    """The sum of each vector's ``w`` lanes (``w`` a power of two: ``gemm_library.narrow_forms``),
    by a fixed tree: two vectors at a time become one holding each one's lanes added in halves
    (two shuffles and an add), until each lane holds one vector's sum (a vector left over pairs
    with itself); those go through ``scratch`` into scalars.  Some 3 operations a vector,
    against 2 log2(w) for each vector alone."""
    items = [(v, [i]) for i, v in enumerate(vectors)]
    span = w
    while span > 1:
        half, paired = span // 2, []
        for q in range(0, len(items), 2):
            (x, x_ids), (y, y_ids) = items[q], items[min(q + 1, len(items) - 1)]
            parts = len(x_ids)
            low = [o + p * span + lane for o in (0, w) for p in range(parts) for lane in range(half)]
            high = [o + half for o in low]
            paired.append((lb.op("arith.addf", lb.shuffle(x, y, low), lb.shuffle(x, y, high)),
                           x_ids + (y_ids if q + 1 < len(items) else [None] * parts)))
        items, span = paired, half
    sums = [None] * len(vectors)
    for f, (v, ids) in enumerate(items):
        lb.vector_store(v, scratch, [lb.index(f * w)])
        for lane, i in enumerate(ids):
            if i is not None:
                sums[i] = lb.load(scratch, [lb.index(f * w + lane)])
    return sums


def panel_flags(lb, elem, c, d, first, last, flags) -> tuple:
    """What a K panel's stores need, decided once a block: (the base's buffer: D in the first
    panel, C after; whether it has one: D where add_d, C after the first panel; whether to add
    the bias, and take the ReLU: in the last panel only), then ``alpha``."""
    alpha, add_d, add_bias, relu = flags
    vec = MemRefType([None], elem)
    with lb.if_(first, [vec]) as base:
        with base.then_():
            base.yield_(d)
        with base.else_():
            base.yield_(c)
    has_base = (first & add_d) | lb.compare("eq", first, lb.const(0, i1))
    return base.results[0], has_base, add_bias & last, relu & last, alpha


def load_lanes(lb, buf, at, lanes: int):
    """``lanes`` elements of ``buf`` from ``at``: a vector, or the element itself where one."""
    return lb.vector_load(buf, [at], lanes) if lanes > 1 else lb.load(buf, [at])


def store_lanes(lb, value, buf, at, lanes: int) -> None:
    """``load_lanes``'s store."""
    (lb.vector_store if lanes > 1 else lb.store)(value, buf, [at])


def splat_lanes(lb, x, lanes: int):
    """``x`` in each of ``lanes`` lanes: a vector, or ``x`` itself where one."""
    return lb.splat_vector(x, lanes) if lanes > 1 else x


def finish(lb, elem, total, c, at, bias, column, stores, fused, lanes: int = 1) -> None:
    """C[at] = alpha * total + base, then + bias[column] and the ReLU where ``stores``
    (``panel_flags``) say: the tiles' stores, one element (or a vector of ``lanes``: C's
    elements from ``at``, the bias's from ``column``)."""
    base_buffer, has_base, add_bias, relu, alpha = stores
    zero = splat_lanes(lb, lb.const(0, elem), lanes)
    kind = zero.type
    with lb.if_(has_base, [kind]) as base:
        with base.then_():
            base.yield_(load_lanes(lb, base_buffer, at, lanes))
        with base.else_():
            base.yield_(zero)
    value = multiply_add(lb, fused, splat_lanes(lb, alpha, lanes), total, base.results[0])
    with lb.if_(add_bias, [kind]) as biased:
        with biased.then_():
            biased.yield_(lb.op("arith.addf", value, load_lanes(lb, bias, column, lanes)))
        with biased.else_():
            biased.yield_(value)
    with lb.if_(relu, [kind]) as rectified:
        with rectified.then_():
            rectified.yield_(lb.op("arith.maximumf", biased.results[0], zero))
        with rectified.else_():
            rectified.yield_(biased.results[0])
    store_lanes(lb, rectified.results[0], c, at, lanes)
