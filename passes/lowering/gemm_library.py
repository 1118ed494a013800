"""irc's own GEMM as a library function: sizes known at run time, operands packed where it pays.

``tensor-to-loops{gemm-library=true}`` lowers a large f32/f64 ``graph.matmul`` to a call of
``@irc_gemm_f32_<tile>_<blocks>`` (``SYMBOL``; two ``i1`` arguments say whether an operand's
buffer holds its transpose, as BLAS's flags do), declared in the module; the CPU runtime compiles
the function below once per host and process (then the disk cache holds its machine
code) and links the call to it (runtime/cpu/gemm_library.py).  So a program with
eight matmuls costs one GEMM's compile, not eight, and each product runs the same
tuned kernel whatever its shape.

The loop nest is Goto/BLIS's (Van Zee & van de Geijn, "BLIS", TOMS 2015)::

    for jc in 0..n step NC:                       columns of B packed at once (Blocking.columns)
      for pc in 0..k step KC:                     K panels, balanced: ceil(k / ceil(k/KC)) deep
        pack B[pc:pc+kc, jc:jc+nc] into NR-wide panels, k-major, zero-padded
        for ic in 0..m step MC:
          pack A[ic:ic+mc, pc:pc+kc] into MR-tall panels, k-major, zero-padded
          for a chunk of B's panels:              ALONG_ROWS_BYTES of them stay in L2
            for ir over A's panels:               an MRxKC panel stays in L1
              for jr over the chunk's panels:     along C's rows
                MR x NR micro-kernel

(Edge tiles, and products of at most ``A_IN_PLACE_PANELS`` column panels, go down the panels
instead: ``_panels``.)

Packing A as well as B makes the kernel's loads of A contiguous whatever A's
layout (A^T's rows are m elements apart: reading them in place strides a line a
k step, which at m = 1024 f32 maps every line of a kernel to one L1 set), and
zero padding gives every tile the full MR x NR kernel: an edge tile is computed
in a small buffer that C's valid part is copied into and out of, so there is no
slow path for sizes that are not multiples of the tile (the same kernel code runs
on C or on that buffer, chosen by an ``scf.if`` that yields the memref: one kernel
to call).  Packing pays only for reuse: a block of A that at most ``A_IN_PLACE_PANELS``
column panels use, and B (not B^T) when at most ``B_IN_PLACE_ROWS`` rows of tiles
use its panels, are read in place, by the kernel that reads A in place and by the
packed one reading B from its own rows.  The micro-kernels are private functions of
the module (``kernel_function``: A packed or in place, NR and NR/2 wide), called once for
a row panel's whole tiles across a chunk of column panels and once for each edge tile, so
that LLVM allocates their registers apart from the loops around them.  Each is vector
code: MR accumulators of type ``vector<NRxT>`` as iter_args, each k step one vector load of
B's panel row, MR broadcasts of A's elements and MR vector ``math.fma``, ``UNROLL`` steps a
trip where A is packed; the tile comes from matmul.py's host figures (``vector-bits``,
``vector-registers``), the K panel's depth from ``l1-bytes`` (``l1_depth``), the columns packed
at once ``ALONG_ROWS_BYTES``.  Products of few columns (NR/2, or up to 3/4
of NR) have forms of their own (gemm_narrow.py).  Every K panel of a tile sums from zero, and its sum
is added to the base (D or zero in the first panel, C after) with one more fused
step, ``alpha * sum + base``, so every element is a sum of fused steps in k order
within a panel.  A layer's bias and ReLU after the product (``bias_epilogue``) are
computed in the last K panel's stores, while the tile is in registers: + bias[j], then
maximumf with 0, as the loop after the product would (the same bits), without reading C
back.

The function trusts nothing but its buffers' sizes: if A, B and C do not agree, or
the scratch buffers are too small for the blocking (``Blocking.scratch_sizes`` says
what the caller must pass), a ``cf.assert`` faults before any memory is touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from irc.attributes import IntegerAttr, StringAttr, UnitAttr
from irc.builder import Builder
from irc.types import FloatType, MemRefType, i1, i64, index

from . import gemm_narrow, gemm_rows
from .matmul import MC, block_sizes, multiply_add, private_noinline, tile_sizes


def wants_library(op, inputs, transposed=None) -> bool:
    """A 2-D f32/f64 ``graph.matmul`` of static shape, unless matmul.py's ``RowStream`` takes it
    (one or two rows, B not transposed: a matrix-vector product that reads B once in order).

    The library is compiled once (and cached on disk), while inline loops with a full register
    tile cost LLVM about 0.05 s per product to compile (8 products of a small MLP's training
    step came to 10,000 ops of IR); the call and the packing of a small product cost
    microseconds.  A narrow product (a classifier's 10 columns) runs the library's dot or column
    form (gemm_narrow.py).  ``transposed``: which operand buffers hold a transpose."""
    if op.name != "graph.matmul" or len(inputs) != 2:
        return False
    a, b = (v.type for v in inputs)
    if a.rank != 2 or b.rank != 2 or not (a.has_static_shape and b.has_static_shape):
        return False
    if not (isinstance(a.element_type, FloatType) and a.element_type.kind in ("f32", "f64")):
        return False
    from .matmul import streams_rows

    return not streams_rows(a.element_type, op.operands[0].type.shape[0], transposed)


SYMBOL = re.compile(r"irc_gemm_(f32|f64)_(\d{1,3})x(\d{1,3})_(\d{1,4})x(\d{1,4})x(\d{1,6})(_mul_add)?")
"""The library function's name says everything it is built from: element type, tile MRxNR,
blocks MCxKCxNC (``irc_gemm_f32_8x32_96x512x8192``) and, for a CPU without fused multiply-add,
``_mul_add`` (``Blocking.fma``).  So the caller's scratch sizes and the
function's blocking cannot disagree, and the runtime builds exactly what a module asks for.
Whether A's or B's buffer holds its transpose is an argument: only the packing differs, so
one function (one compile) serves all four cases."""

KC_MAX = 512
"""Deepest K panel (deeper ones gained nothing measurable and cost scratch)."""

KC_L1_MAX = 256
"""Deepest K panel ``l1_depth`` takes where the working set fits in L1 at that depth and more.
Measured on the Intel Xeon (L1 48 KiB; session 15, a C harness beside MKL held to AVX2, 300
rounds) with the AVX2 tile (6 x 16 f32), whose working set fits at 512: 256 deep ran
256x1024x1024 at 0.97-1.00 of MKL against 512's 0.94-0.96 (320: 0.97, 384: 0.96, 192: 0.99),
1024^3 1.00-1.01 against 0.99, 256x1024x784 0.99 against 0.96; with the AVX-512 tile, 256
against 384 and 512 (which do not fit there): sessions 11 and 13.  So a deeper panel gains
nothing once it fits: the start and end of a tile it saves are a few percent of a 256-deep
one (``KC_L1_MIN``), and its B panel streams through more of L1 beside A's.  Not measured
with a 64 KiB L1 or on f64."""

KC_L1_MIN = 256
"""Shallowest K panel worth keeping in L1 (``Blocking.for_host``): a tile's start and end
(zeroing the sums; reading, scaling and writing C) cost about as much as 8 of its k steps
by a count of their instructions, some 3% of a 256-deep panel and twice that of a 128-deep
one (an estimate, not a measurement)."""

GROUP = 8
"""Columns of B^T (rows of its buffer) packed together: one short vector store a k step, from
GROUP streams, few enough that rows a power of two apart (which share an L1 set) stay cached."""

MAX_TILE = 512
"""Largest MR*NR the runtime builds (a declaration in someone's module could ask for any)."""


@dataclass(frozen=True)
class Blocking:
    """The tile (MR, NR) and block (MC, KC, NC) sizes of one library GEMM."""

    mr: int
    nr: int
    mc: int
    kc: int
    nc: int
    fma: bool = True
    """Whether each k step is one fused multiply-add (one rounding) or, on a CPU without them
    (x86-64 before Haswell, ``IRC_CPU=x86-64-v2``), a multiply and an add: LLVM makes a fused
    one there a libm ``fmaf`` call per lane, which took a 256^3 product from 70 to 1.4 GFLOP/s."""

    @staticmethod
    def for_host(elem, options: dict) -> Blocking:
        """The sizes on the host ``options`` describe: matmul.py's register tile, the K panel's
        depth chosen by the L1 data cache (``l1_depth``), and B packed ``ALONG_ROWS_BYTES`` at a
        time (the columns a row panel of tiles goes across: ``_tiles``), whatever the L2."""
        mr, nr = tile_sizes(elem, options.get("vector_bits", 0), options.get("vector_registers", 0))
        kc, _ = block_sizes(elem, nr, options.get("l1_bytes", 0), options.get("l3_bytes", 0))
        kc = l1_depth(elem, mr, nr, options.get("l1_bytes", 0)) or min(KC_MAX, 2 * kc)
        nc = ALONG_ROWS_BYTES // (kc * max(1, getattr(elem, "width", 64) // 8))
        return Blocking(mr, nr, max(mr, MC - MC % mr), kc, max(nr, nc - nc % nr), options.get("fma", True))

    def columns(self, depth: int) -> int:
        """The columns of B packed at once for K panels ``depth`` deep: NC, or as many more as
        NC x KC elements hold for shallower panels (a 10-deep product's row panels then go
        across all of a 1024-column B, as along the rows of ``ALONG_ROWS_BYTES``), in NR's."""
        return max(self.nc, self.nc * self.kc // max(1, depth) // self.nr * self.nr)

    def scratch_sizes(self, m: int, n: int, k: int) -> tuple[int, int]:
        """Elements of the packed-A and packed-B buffers a product of these sizes needs (none for
        A when the product has at most ``A_IN_PLACE_PANELS`` panels of NR columns: A is then
        read in place).

        Packed B holds a K panel of B's columns up to ``columns(depth)`` (NC, more for shallow
        panels), NC being what ``for_host`` makes the columns a row panel of tiles goes across
        (``ALONG_ROWS_BYTES``): for an MLP layer (256 x 1024 @ 1024 x 1024, KC 256) 512
        columns, 0.5 MiB, half the result (tensor_cpu.py's MLP arena: 2.00 activations, 2.09
        with all 1024 columns).  Each block of columns packs A again.
        Measured beside MKL in a C harness on the Intel Xeon (session 13), NC 512 against all
        of B's columns: 256x1024x1024 0.92 of MKL against 0.90, 1024^3 0.88 against 0.88, 2048^3
        0.83 against 0.84.  Before the tiles went along the rows (session 6, AMD EPYC Zen 4,
        tiles down each column panel), packing 256 columns at a time had cost 5% of that MLP's
        forward pass, each block packing A again; not measured on Zen 4 since.
        """

        def up(x: int, to: int) -> int:
            return -(-x // to) * to

        kc = min(self.kc, k)
        a = 1 if n <= A_IN_PLACE_PANELS * self.nr else max(1, up(min(self.mc, m), self.mr) * kc)
        depth = -(-k // -(-k // self.kc)) if k else 0  # the K panels' (balanced) depth
        b = up(min(self.columns(depth), n), self.nr) * depth
        if n <= gemm_narrow.max_columns(self):  # a narrow product's deeper K panels of B^T
            b = max(b, gemm_narrow.scratch_elements(self, n, k))
        return a, max(1, b)


def l1_depth(elem, mr: int, nr: int, l1_bytes: int) -> int:
    """The K panel's depth where the L1 data cache holds a tile's whole working set, else 0.

    Between two tiles along a row of C (``_tiles``) the kernel reads the same MR x KC panel of
    A again and a new KC x NR panel of B (down a column panel, the order before session 13, the
    same B and a new A).  When both fit in L1, the panel read again comes from L1: the deepest
    such panel, in steps of 64, if it is at least ``KC_L1_MIN`` deep.  Where L1 is too small for
    that (32 KiB beside an 8 x 32 f32 tile: Zen 4 and 5), the panels stream from L2 at any depth
    (measured down the column panels, when B's was the one read again), and the
    deepest panel (``KC_MAX``) halves the kernel's start and end instead, which measured 2-3%
    faster than 256 there (session 6); 0 then, and for an unknown L1.

    Measured on the Intel Xeon (Emerald Rapids, L1 48 KiB: 256 deep, where 512 was chosen
    before): the speed is the same within what this VM's co-tenants move it by (20-40% for
    seconds at a time; docs/benchmarks.md, session 11), and the packed panel of B is half
    the size (tensor_cpu.py's MLP arena: 3.19 -> 2.09 activations).  Along the rows (session 13)
    512 was slower again in a C harness beside MKL: 1024^3 at 0.93 of MKL against 1.00, 256 x
    1024 x 1024 0.91 against 0.94.  At most ``KC_L1_MAX`` deep (256): the AVX2 tiles (6 x 16 f32)
    took 512 on a 48 KiB L1, and ran 2-4% slower than at 256.  On a 32 KiB L1 with the AVX2
    tiles (AMD EPYC Zen 3, L2 512 KiB; session 17, beside numpy's OpenBLAS) 384-deep panels
    (342 for K 1024) ran 1-4% faster than 256 with 512 columns packed (256x1024x1024 1.03
    against 1.07 of OpenBLAS's time, 2048^3 1.08 against 1.09) and tensor_cpu.py's MLP 1-2%
    (0.92 against 0.93-0.94 of numpy's), but with the columns ``ALONG_ROWS_BYTES`` makes of
    them (336) no faster than 256: not adopted."""
    if l1_bytes <= 0:
        return 0
    size = max(1, getattr(elem, "width", 64) // 8)
    depth = min(KC_L1_MAX, l1_bytes // ((mr + nr) * size)) // 64 * 64
    return depth if depth >= KC_L1_MIN else 0


def symbol(elem: FloatType, blocking: Blocking) -> str:
    b = blocking
    return f"irc_gemm_{elem.kind}_{b.mr}x{b.nr}_{b.mc}x{b.kc}x{b.nc}{'' if b.fma else '_mul_add'}"


def parse_symbol(name: str):
    """(elem, blocking) of a library GEMM's name, or None if ``name`` is not one (or asks for
    sizes out of range: every size positive, MR*NR at most MAX_TILE, MC a multiple of MR, NC
    of NR)."""
    match = SYMBOL.fullmatch(name)
    if match is None:
        return None
    kind, *sizes, mul_add = match.groups()
    mr, nr, mc, kc, nc = map(int, sizes)
    if min(mr, nr, mc, kc, nc) < 1 or mr * nr > MAX_TILE or mc % mr or nc % nr:
        return None
    return FloatType(kind), Blocking(mr, nr, mc, kc, nc, mul_add is None)


def signature(elem: FloatType) -> list:
    """The library function's parameter types: ``(a, b, c: memref<?x?x...>, packed_a, packed_b:
    memref<?x...>, a_transposed, b_transposed: i1, d: memref<?x?x...>, alpha: elem, add_d: i1,
    col_begin, col_end: index, bias: memref<?x...>, add_bias, relu: i1)``; C = (add_d ? D : 0) +
    alpha * op(A) op(B) (BLAS's gemm with beta 1 and a separate D, which may be C itself; without
    add_d D is not read and may be any matrix, C for instance), for C's columns
    col_begin..col_end only (so that threads can split a product by columns, each with its own
    scratch); then, with add_bias, + bias[j] in column j (bias has n elements at least; without
    it bias is not read), and with relu, maximumf(., 0): a layer's bias and ReLU in the GEMM's
    last stores (``bias_epilogue``)."""
    mat, vec = MemRefType([None, None], elem), MemRefType([None], elem)
    return [mat, mat, mat, vec, vec, i1, i1, mat, elem, i1, index, index, vec, i1, i1]


def build(name: str):
    """A module with the one public function ``@name`` (a ``symbol``) of ``signature``."""
    parsed = parse_symbol(name)
    if parsed is None:
        raise ValueError(f"'{name}' does not name a library GEMM")
    elem, blocking = parsed
    lb = Builder()
    module = lb.module()
    kernels = {(width, packed): kernel_function(lb, module, f"{name}.{'packed' if packed else 'in_place'}{width}",
                                                elem, blocking, width, packed)
               for width in kernel_widths(blocking.nr) for packed in (True, False)}
    kernels["rows"] = gemm_rows.rows_function(lb, module, f"{name}.rows", elem, blocking)
    if narrow_forms(blocking):
        kernels["dot"] = gemm_narrow.dot_function(lb, module, f"{name}.dot", elem, blocking)
        kernels["columns"] = gemm_narrow.column_function(lb, module, f"{name}.columns", elem, blocking)
    with lb.function(module, name, signature(elem), [],
                     arg_names=["a", "b", "c", "packed_a", "packed_b", "a_transposed", "b_transposed", "d", "alpha",
                                "add_d", "col_begin", "col_end", "bias", "add_bias", "relu"]) as args:
        PackedGemm(lb, elem, blocking, kernels).emit(*args)
        lb.ret()
    # Compiled for size: the kernel is vector code already and gains nothing from LLVM's
    # unrolling and vectorising of the thirty loops around it (packing, edges).  The runtime
    # skips LLVM's optimisation pipeline for it altogether (runtime/cpu/gemm_library.py).
    for f in module.functions:
        f.attributes["optsize"] = UnitAttr()
    return module


def narrow_forms(blocking: Blocking) -> bool:
    """Whether the library carries the dot and column forms for products of few columns
    (gemm_narrow.py: at most W, or a share of NR): where W is a power of two (the dot form's
    ``fold`` halves it) and at least ``NARROW_MIN_LANES``."""
    w = gemm_narrow.lanes(blocking)
    return w >= NARROW_MIN_LANES and w & (w - 1) == 0


def kernel_widths(nr: int) -> list[int]:
    """The kernel widths a library function carries: NR, and NR/2 for a narrow last panel (a
    10-column product's) where that is at least ``NARROW_MIN_LANES``."""
    half = nr // 2
    return [nr] if nr % 2 or half < NARROW_MIN_LANES else [nr, half]


KERNEL_PARAMS = ["a", "a_start", "a_step", "a_row_step", "a_rows", "a_tile", "b", "b_start", "b_step", "b_tile", "kc",
                 "c", "c_at", "ldc", "c_tile", "d", "first", "alpha", "add_d", "tiles", "bias", "bias_at", "bias_tile",
                 "add_bias", "relu"]

UNROLL = 4
"""k steps a trip of the packed kernel's loop (then one a trip for the rest).

Measured with the kernel in a function of its own (``kernel_function``), on the Intel Xeon of
docs/benchmarks.md (session 12), interleaved with MKL over 500 rounds a shape: 1024^3 at 150
GFLOP/s against 130 for the previous library (the kernel inline, one step a trip; MKL 180), 2
steps 145, 8 steps 148; 256x1024x1024 at 139 against 122 (MKL 168).  Inline in the library's
body, two or four steps a trip had been no faster.  A kernel that reads A in place
takes one step a trip: its rows' starts are values, and a trip's later steps would need more
registers than x86-64 has."""


def kernel_function(lb: Builder, module, name: str, elem, blocking: Blocking, width: int, packed: bool) -> str:
    """``@name``, private: the micro-kernel of ``width`` columns (``PackedGemm._kernel`` says what
    it computes) on ``tiles`` tiles, each one's A, B, C and bias ``a_tile``, ``b_tile``,
    ``c_tile`` and ``bias_tile`` elements on from the one before (along a row of tiles: B's
    next panel, C's next NR columns; down a column panel: A's next row panel, C's next MR
    rows), on A packed (``packed``: MR elements a k step, ``a_step`` apart from ``a_start``;
    ``UNROLL`` k steps a trip) or read in place (rows ``a_row_step`` apart from ``a_start``,
    ``a_rows`` of them valid, the last repeated; k steps ``a_step`` apart), with the
    parameters ``KERNEL_PARAMS``.

    A function of its own, called once for a row panel's whole tiles across a chunk of column
    panels (or a column panel's whole tiles) and once for each edge tile (a call costs some 20
    instructions: a 10-deep product's tiles, 2560 multiply-adds each, lost a third of their
    speed at a call a tile), so that LLVM allocates its registers alone: inline in the
    library's body, among the hundred values the loops around it keep, the kernel's pointers
    were reloaded from the stack every k step.  Packed A's step is a parameter, not the
    constant MR, so that LLVM advances one pointer by it each trip and reads A's elements at
    constant displacements from it; from the loop counter times a constant it addresses them
    as base + index, which costs a wider tile's broadcasts folded into its multiply-adds
    (AVX-512's ``{1to16}``) a second micro-operation each on Intel's cores (docs/benchmarks.md,
    session 12).  ``noinline`` keeps it so where LLVM's inliner runs."""
    vec = MemRefType([None], elem)
    types = [vec, index, index, index, index, index, vec, index, index, index, index, vec, index, index, index, vec, i1,
             elem, i1, index, vec, index, index, i1, i1]
    mr = blocking.mr
    with lb.function(module, name, types, [], arg_names=KERNEL_PARAMS) as args:
        a, a_start, a_step, row_step, valid, a_tile, b, b_start, b_step, b_tile, kc, c, c_at, ldc, c_tile, d, first, \
            alpha, add_d, tiles, bias, bias_at, bias_tile, add_bias, relu = args
        gemm = PackedGemm(lb, elem, blocking, {})
        gemm.alpha, gemm.add_d = alpha, add_d
        with lb.for_(0, tiles) as t:
            gemm.finish = (bias, bias_at + t.iv * bias_tile, add_bias, relu)
            start = a_start + t.iv * a_tile
            if packed:
                a_source = (a, start, list(range(mr)), a_step)
            else:
                last = valid - 1
                a_source = (a, lb.index(0), [start + gemm._min(r, last) * row_step for r in range(mr)], a_step)
            b_source = (b, b_start + t.iv * b_tile, b_step)
            gemm._kernel(c, d, c_at + t.iv * c_tile, ldc, first, a_source, b_source, kc, width, UNROLL if packed else 1)
        lb.ret()
    return private_noinline(module, name)


class PackedGemm:
    """Emits the body of the library function (see the module docstring)."""

    def __init__(self, lb: Builder, elem, blocking: Blocking, kernels: dict):
        self.lb = lb
        self.elem = elem
        self.bl = blocking
        self.kernels = kernels  # (width, A packed) -> the name of its kernel_function
        self.zero = lb.const(0, elem)

    def _min(self, a, b):
        return self.lb.op("arith.minsi", self.lb.index(a), self.lb.index(b))

    def _columns(self, depth):
        """``Blocking.columns`` of ``depth``, a value."""
        lb, bl = self.lb, self.bl
        more = lb.op("arith.divui", lb.index(bl.nc * bl.kc), lb.op("arith.maxsi", depth, lb.index(1)))
        return lb.op("arith.maxsi", lb.index(bl.nc), lb.op("arith.divui", more, lb.index(bl.nr)) * bl.nr)

    def _ceil_div(self, a, b):
        lb = self.lb
        return lb.op("arith.divui", lb.index(a) + (lb.index(b) - 1), lb.index(b))

    def _pick(self, cond, if_true, if_false):
        return self.lb.select(cond, self.lb.index(if_true), self.lb.index(if_false))

    def emit(self, a, b, c, packed_a, packed_b, ta, tb, d, alpha, add_d, col_begin, col_end, bias, add_bias,
             relu) -> None:
        lb, bl = self.lb, self.bl
        self.ta, self.tb = ta, tb
        self.alpha, self.add_d = alpha, add_d
        self.bias, self.add_bias, self.relu = bias, add_bias, relu
        m, n = lb.dim(c, 0), lb.dim(c, 1)
        k = self._pick(ta, lb.dim(a, 0), lb.dim(a, 1))
        self.m, self.n, self.k = m, n, k
        # The sizes must agree and the scratch fit the blocking, or nothing is touched.
        a_other = self._pick(ta, lb.dim(a, 1), lb.dim(a, 0))
        b_k, b_n = self._pick(tb, lb.dim(b, 1), lb.dim(b, 0)), self._pick(tb, lb.dim(b, 0), lb.dim(b, 1))
        kc_max = self._min(bl.kc, k)
        # A is read in place where the window has few panels (and by any block of one: _product).
        self.a_in_place = (col_end - col_begin) <= A_IN_PLACE_PANELS * bl.nr
        need_a = self._pick(self.a_in_place, 0, self._ceil_div(self._min(bl.mc, m), bl.mr) * (bl.mr * kc_max))
        panels = lb.op("arith.maxsi", self._ceil_div(k, bl.kc), lb.index(1))  # k may be 0 here
        depth = self._ceil_div(k, panels)  # the K panels' (Blocking.scratch_sizes)
        need_b = self._ceil_div(self._min(self._columns(depth), n), bl.nr) * (bl.nr * depth)
        w = gemm_narrow.lanes(bl)
        narrow_depth = self._ceil_div(self._min(gemm_narrow.panel_depth(bl), k), w) * w
        narrow_b = self._pick(n <= gemm_narrow.max_columns(bl), (n + max(w, gemm_narrow.COLUMN_BLOCK)) * narrow_depth,
                              0)  # gemm_narrow.scratch_elements
        need_b = lb.op("arith.maxsi", need_b, narrow_b)
        window = (col_begin <= col_end) & (col_end <= n)
        d_agrees = (lb.dim(d, 0).eq(m) & lb.dim(d, 1).eq(n)) | lb.compare("eq", add_d, lb.const(0, i1))
        bias_fits = (lb.dim(bias, 0) >= n) | lb.compare("eq", add_bias, lb.const(0, i1))
        ok = (a_other.eq(m)) & (b_k.eq(k)) & (b_n.eq(n)) & d_agrees & window & bias_fits \
            & (lb.dim(packed_a, 0) >= need_a) & (lb.dim(packed_b, 0) >= need_b)
        lb.op("cf.assert", ok, result=[],
              msg=StringAttr("irc_gemm: the sizes of A, B, C and the scratch buffers do not agree"))
        self.a, self.b, self.c, self.d = lb.flat(a), lb.flat(b), lb.flat(c), lb.flat(d)
        self.pa, self.pb = packed_a, packed_b
        tile = bl.mr * bl.nr
        self.tile = lb.op("memref.alloca", result=MemRefType([tile], self.elem))
        self.tile_view = lb.view(self.tile, 0, MemRefType([None], self.elem), [lb.index(tile)])
        self.tile_bias = lb.view(lb.op("memref.alloca", result=MemRefType([bl.nr], self.elem)), 0,
                                 MemRefType([None], self.elem), [lb.index(bl.nr)])
        self.col_begin, self.col_end = col_begin, col_end
        # B (not B^T) is read in place when few rows of tiles use each of its panels: packing it
        # would copy all of B for as few passes over it (an RNN cell's 32 x 256 @ 256 x 256).
        self.b_in_place = lb.compare("eq", tb, lb.const(0, i1)) & (m <= B_IN_PLACE_ROWS * bl.mr)
        with lb.if_(k.eq(0)) as empty:
            with empty.then_():  # no products: C is D or zeros
                with lb.for_(0, m) as i:
                    with lb.for_(col_begin, col_end) as j:
                        at = i.iv * n + j.iv
                        value = lb.select(add_d, lb.load(self.d, [at]), self.zero)
                        with lb.if_(add_bias, [value.type]) as biased:
                            with biased.then_():
                                biased.yield_(lb.op("arith.addf", value, lb.load(bias, [j.iv])))
                            with biased.else_():
                                biased.yield_(value)
                        with lb.if_(relu, [value.type]) as rectified:
                            with rectified.then_():
                                rectified.yield_(lb.op("arith.maximumf", biased.results[0], self.zero))
                            with rectified.else_():
                                rectified.yield_(biased.results[0])
                        lb.store(rectified.results[0], self.c, [at])
            with empty.else_():
                if "dot" in self.kernels:
                    self._narrow_or_product(packed_b)
                else:
                    self._rows_or_product(packed_b)

    def _narrow_or_product(self, packed_b) -> None:
        """A product of few columns in gemm_narrow.py's dot form (A not transposed, at most
        ``dot_columns``, or of few rows with B^T given: ``DOT_IN_PLACE_ROWS``; k at least
        DOT_MIN_K vectors) or column form (A^T given, at most ``column_columns``, m at least
        COLUMN_MIN_M vectors), any other by ``_rows_or_product``."""
        lb, w = self.lb, gemm_narrow.lanes(self.bl)
        not_ta = lb.compare("eq", self.ta, lb.const(0, i1))
        dot = ((self.n <= gemm_narrow.dot_columns(self.bl)) | gemm_narrow.in_place(lb, self.tb, self.m)) & not_ta \
            & (self.k >= gemm_narrow.DOT_MIN_K * w)
        columns = (self.n <= gemm_narrow.column_columns(self.bl)) & self.ta & (self.m >= gemm_narrow.COLUMN_MIN_M * w)
        args = (self.a, self.b, self.c, self.d, packed_b, self.m, self.n, self.k, self.tb, self.alpha, self.add_d,
                self.col_begin, self.col_end, self.bias, self.add_bias, self.relu)
        with lb.if_(dot) as form:
            with form.then_():
                lb.call(self.kernels["dot"], *args, results=[])
            with form.else_():
                with lb.if_(columns) as column_form:
                    with column_form.then_():
                        lb.call(self.kernels["columns"], *args, results=[])
                    with column_form.else_():
                        self._rows_or_product(packed_b)

    def _rows_or_product(self, packed_b) -> None:
        """A product of few rows with B as given (a small batch's ``x @ W``, at most
        ``gemm_rows.max_rows``) in gemm_rows.py's rows form, any other by ``_product``."""
        lb = self.lb
        rows = (self.m <= gemm_rows.max_rows(self.bl)) & lb.compare("eq", self.tb, lb.const(0, i1))
        with lb.if_(rows) as form:
            with form.then_():
                lb.call(self.kernels["rows"], self.a, self.b, self.c, self.d, packed_b, self.m, self.n, self.k,
                        self.ta, self.alpha, self.add_d, self.col_begin, self.col_end, self.bias, self.add_bias,
                        self.relu, results=[])
            with form.else_():
                self._product()

    def _product(self) -> None:
        lb, bl = self.lb, self.bl
        parts = self._ceil_div(self.k, bl.kc)
        kc_step = self._ceil_div(self.k, parts)  # equal K panels: no thin last panel
        nc_step = self._columns(kc_step)
        with lb.for_(self.col_begin, self.col_end, nc_step) as jc:
            nc = self._min(nc_step, self.col_end - jc.iv)
            panels = self._ceil_div(nc, bl.nr)
            # A block that one column panel uses, or A where the whole window has few, is read in
            # place: packing it would copy all of A for one or a few passes of the kernel over it
            # (the 10-column products of an MLP's last layer; A_IN_PLACE_PANELS).
            pack_a = (panels > 1) & lb.compare("eq", self.a_in_place, lb.const(0, i1))
            with lb.for_(0, self.k, kc_step) as pc:
                kc = self._min(kc_step, self.k - pc.iv)
                first = pc.iv.eq(0)
                last = (pc.iv + kc).eq(self.k)  # the bias and ReLU go into this K panel's stores
                self.finish_now = (self.add_bias & last, self.relu & last)
                self._pack_b(pc.iv, kc, jc.iv, nc, self.b_in_place)
                with lb.for_(0, self.m, bl.mc) as ic:
                    mc = self._min(bl.mc, self.m - ic.iv)
                    with lb.if_(pack_a) as packing:
                        with packing.then_():
                            self._pack_a(ic.iv, mc, pc.iv, kc)
                            self._tiles(ic.iv, mc, jc.iv, nc, pc.iv, kc, first, packed_a=True)
                        with packing.else_():
                            self._tiles(ic.iv, mc, jc.iv, nc, pc.iv, kc, first, packed_a=False)

    def _tiles(self, ic, mc, jc, nc, pc, kc, first, packed_a: bool) -> None:
        """The tiles of rows ic..ic+mc by the ``nc`` columns from jc, K panel pc..pc+kc: along C's
        rows, each whole row panel of A across a chunk of B's whole column panels (as many as
        ``ALONG_ROWS_BYTES`` hold) in one call, then the edge tiles (``_panels``); with one whole
        column panel or none, down it (``_panels``: a call a row panel would cost a shallow
        product's tiles a third of their speed).  Emitted for A packed and for A read in
        place (A's rows anywhere: only where the product has ``A_IN_PLACE_PANELS`` or fewer)."""
        lb, bl = self.lb, self.bl
        whole_rows = lb.op("arith.divui", mc, lb.index(bl.mr))
        whole_panels = lb.op("arith.divui", nc, lb.index(bl.nr))
        if not packed_a:  # A is read in place only for a few column panels: down them
            self._panels(ic, mc, jc, nc, pc, kc, first, packed_a, lb.index(0), whole_rows)
            return
        along = whole_panels > 1
        with lb.if_(along) as order:
            with order.then_():
                size = self.elem.width // 8
                chunk = lb.op("arith.maxsi", lb.op("arith.divui", lb.index(ALONG_ROWS_BYTES), kc * (bl.nr * size)),
                              lb.index(1))
                b_tile = self._pick(self.b_in_place, bl.nr, kc * bl.nr)
                with lb.for_(0, whole_panels, chunk) as jr:
                    panels = self._min(chunk, whole_panels - jr.iv)
                    col = jc + jr.iv * bl.nr
                    b = self._b_source(self.b_in_place, col, pc, jr.iv * (bl.nr * kc))
                    with lb.for_(0, whole_rows) as ir:
                        row = ic + ir.iv * bl.mr
                        a = self._a_source(packed_a, row, lb.index(bl.mr), pc, ir.iv * (bl.mr * kc))
                        self._kernel_for(self.c, self.d, row * self.n + col, self.n, first, a, b, kc, bl.nr,
                                         (self.bias, col), panels, b_tile)
        self._panels(ic, mc, jc, nc, pc, kc, first, packed_a, lb.select(along, whole_panels, lb.index(0)), whole_rows)

    def _panels(self, ic, mc, jc, nc, pc, kc, first, packed_a, done_panels, done_rows) -> None:
        """The tiles of ``_tiles`` down A's row panels within each column panel of B, but for the
        first ``done_rows`` row panels of the first ``done_panels`` column panels (done along
        the rows): a whole panel's whole tiles in one call, the edges a call each."""
        lb, bl = self.lb, self.bl
        with lb.for_(0, self._ceil_div(nc, bl.nr)) as jr:
            cols = self._min(bl.nr, nc - jr.iv * bl.nr)
            col = jc + jr.iv * bl.nr
            b = self._b_source(self.b_in_place & cols.eq(bl.nr), col, pc, jr.iv * (bl.nr * kc))
            whole = lb.select(cols.eq(bl.nr), lb.op("arith.divui", mc, lb.index(bl.mr)), lb.index(0))
            start = lb.select(jr.iv < done_panels, done_rows, lb.index(0))
            with lb.if_(whole > start) as any_whole:
                with any_whole.then_():
                    row = ic + start * bl.mr
                    a = self._a_source(packed_a, row, lb.index(bl.mr), pc, start * (bl.mr * kc))
                    self._kernel_for(self.c, self.d, row * self.n + col, self.n, first, a, b, kc, bl.nr,
                                     (self.bias, col), whole - start)
            with lb.for_(lb.op("arith.maxsi", whole, start), self._ceil_div(mc, bl.mr)) as ir:
                rows = self._min(bl.mr, mc - ir.iv * bl.mr)
                row = ic + ir.iv * bl.mr
                a = self._a_source(packed_a, row, rows, pc, ir.iv * (bl.mr * kc))
                self._tile(row, col, rows, cols, a, b, kc, first)

    def _b_source(self, in_place, col, pc, b_at):
        """Where the kernel reads B's panel of columns col..col+NR from k step pc on: (buffer,
        start, the distance between k steps): the packed panel at ``b_at``, or B's own rows."""
        lb, nr = self.lb, self.bl.nr
        idx = lb.index(0).type
        with lb.if_(in_place, [self.pb.type, idx, idx]) as source:
            with source.then_():
                source.yield_(self.b, pc * self.n + col, self.n)
            with source.else_():
                source.yield_(self.pb, b_at, lb.index(nr))
        return source.results

    def _a_source(self, packed: bool, row, rows, pc, a_at):
        """Where the kernel reads A's rows row..row+MR from k step pc on: (buffer, the first row's
        first element, where the rows are, the distance between k steps).  Packed: its MR x kc
        panel at ``a_at`` (zero rows past the edge), rows 1 apart (their offsets, constants) and
        k steps MR apart.  In place: A's (or A^T's) buffer, rows ``row_step`` apart and ``rows``
        of them valid (``(row_step, rows)``), rows past those repeating the last valid row (their
        sums land in the edge buffer's unused rows)."""
        lb, mr = self.lb, self.bl.mr
        if packed:
            return self.pa, a_at, list(range(mr)), lb.index(mr)
        row_step = self._pick(self.ta, 1, self.k)
        k_step = self._pick(self.ta, self.m, 1)
        return self.a, row * row_step + pc * k_step, (row_step, rows), k_step

    # -- packing ------------------------------------------------------------------------------------

    def _pack_b(self, pc, kc, jc, nc, in_place) -> None:
        """packed_b[jr*kc*NR + p*NR + j] = B[pc+p, jc + jr*NR + j], zero beyond column nc; with
        ``in_place`` only the partial panel (the kernel reads the whole ones from B itself)."""
        lb, nr = self.lb, self.bl.nr
        full = lb.op("arith.divui", nc, lb.index(nr))
        rest = nc - full * nr
        group = GROUP if nr % GROUP == 0 else 1
        with lb.if_(self.tb) as layout:
            with layout.then_():  # B^T's rows are B's columns: GROUP of them at a time, each along p
                with lb.for_(0, full) as jr:
                    with lb.for_(0, nr, group) as g:
                        col = jc + jr.iv * nr + g.iv
                        starts = [(col + j) * self.k + pc for j in range(group)]
                        self._pack_transposed(self.b, starts, None, kc, self.pb, jr.iv * (kc * nr) + g.iv, nr)
            with layout.else_():
                self._pack_rows(pc, kc, jc, self._pick(in_place, 0, full))
        with lb.if_(rest > 0) as partial:
            with partial.then_():
                base = full * (kc * nr)
                first = jc + full * nr
                with lb.if_(self.tb) as layout:
                    with layout.then_():  # as the whole panels; past the last column a group reads
                        # that column again and stores zeros instead, and the groups past the
                        # last column's are zeros (a 27-column panel: none)
                        last = first + rest - 1
                        groups = self._ceil_div(rest, group)
                        with lb.for_(0, groups) as g:
                            col = first + g.iv * group
                            starts = [self._min(col + j, last) * self.k + pc for j in range(group)]
                            valid = [(col + j) <= last for j in range(group)]
                            self._pack_transposed(self.b, starts, valid, kc, self.pb, base + g.iv * group, nr)
                        zeros = lb.splat_vector(self.zero, group)
                        with lb.for_(groups, nr // group) as g:
                            with lb.for_(0, kc) as p:
                                lb.vector_store(zeros, self.pb, [base + p.iv * nr + g.iv * group])
                    with layout.else_():  # B's rows: the partial panel's columns are contiguous
                        self._zero_fill(self.pb, base, kc, nr)
                        with lb.for_(0, kc) as p:
                            src = (pc + p.iv) * self.n + first
                            with lb.for_(0, rest) as j:
                                lb.store(lb.load(self.b, [src + j.iv]), self.pb, [base + p.iv * nr + j.iv])

    def _pack_rows(self, pc, kc, jc, panels) -> None:
        """The first ``panels`` whole panels of B as given (its rows along the columns):
        ``PACK_ROWS`` k steps of one panel, then the same steps of the next, each k step a vector
        of B's row."""
        lb, nr = self.lb, self.bl.nr
        whole = lb.op("arith.divui", kc, lb.index(PACK_ROWS)) * PACK_ROWS

        def copy(p, jr):
            row = lb.vector_load(self.b, [(pc + p) * self.n + jc + jr * nr], nr)
            lb.vector_store(row, self.pb, [jr * (kc * nr) + p * nr])

        with lb.for_(0, whole, PACK_ROWS) as p0:
            with lb.for_(0, panels) as jr:
                for r in range(PACK_ROWS):
                    copy(p0.iv + r, jr.iv)
        with lb.for_(0, panels) as jr:
            with lb.for_(whole, kc) as p:
                copy(p.iv, jr.iv)

    def _pack_transposed(self, src, starts, valid, kc, dst, at, step, width: int | None = None) -> None:
        """``dst[at + p*step + r] = src[starts[r] + p]`` for p < kc and r < ``width`` (all the
        rows by default), zero for a row whose ``valid`` is false: rows of the source, each
        contiguous along k, become the lanes of a packed panel's k steps (B^T's columns, A's
        rows).  Blocks of as many k steps as there are rows go through a register transpose
        (a vector load a row, shuffles, a vector store a k step) instead of a scalar load an
        element: at 27 columns of B^T, packing was most of a conv weight gradient's product."""
        lb = self.lb
        w = len(starts)
        width = w if width is None else width

        def chosen(values, zero):
            return values if valid is None else [lb.select(ok, v, zero) for v, ok in zip(values, valid)]

        blocked = lb.index(0)
        if w > 1 and w & (w - 1) == 0:
            zeros = lb.splat_vector(self.zero, w)
            blocked = kc - lb.op("arith.remui", kc, lb.index(w))
            with lb.for_(0, blocked, w) as p:
                rows = chosen([lb.vector_load(src, [s + p.iv], w) for s in starts], zeros)
                for q, lanes in enumerate(self._transposed(rows)):
                    if width < w:
                        lanes = lb.shuffle(lanes, lanes, range(width))
                    lb.vector_store(lanes, dst, [at + (p.iv + q) * step])
        with lb.for_(blocked, kc) as p:  # the last kc % W steps (all of them for one row)
            values = chosen([lb.load(src, [s + p.iv]) for s in starts], self.zero)[:width]
            self._store_all(values, dst, at + p.iv * step)

    def _transposed(self, rows: list) -> list:
        """The square block whose rows are ``rows`` (W vectors of W lanes, W a power of two),
        transposed: log2(W) rounds that interleave row k with row k + W/2 (a perfect shuffle)."""
        w = len(rows)
        low = [x for i in range(w // 2) for x in (i, w + i)]
        high = [x for i in range(w // 2, w) for x in (i, w + i)]
        for _ in range(w.bit_length() - 1):
            rows = [lanes for k in range(w // 2)
                    for lanes in (self.lb.shuffle(rows[k], rows[k + w // 2], low),
                                  self.lb.shuffle(rows[k], rows[k + w // 2], high))]
        return rows

    def _zero_fill(self, buf, start, rows, width: int) -> None:
        """``rows`` x ``width`` zeros from ``start``: the padding of a partial panel, which the
        kernel reads as zeros, a vector store a row (the library is compiled without LLVM's
        loop vectoriser: a scalar loop here cost more than the kernel on a 27-column panel)."""
        zeros = self.lb.splat_vector(self.zero, width)
        with self.lb.for_(0, rows) as i:
            self.lb.vector_store(zeros, buf, [start + i.iv * width])

    def _store_all(self, values, buf, at) -> None:
        """``buf[at + i] = values[i]``: one vector store of the values loaded before it."""
        self.lb.vector_store(self.lb.vector_of(values), buf, [at])

    def _pack_a(self, ic, mc, pc, kc) -> None:
        """packed_a[ir*kc*MR + p*MR + r] = A[ic + ir*MR + r, pc+p], zero beyond row mc."""
        lb, mr = self.lb, self.bl.mr
        full = lb.op("arith.divui", mc, lb.index(mr))
        rest = mc - full * mr
        # A's rows, along k, become MR lanes a k step: GROUP rows a block (the last repeated up
        # to GROUP, the lanes past MR dropped)
        rows = GROUP if mr <= GROUP else mr
        with lb.if_(self.ta) as layout:
            with layout.then_():  # A^T's rows hold A's columns: MR of A's rows, contiguous
                with lb.for_(0, full) as ir:
                    with lb.for_(0, kc) as p:
                        lanes = lb.vector_load(self.a, [(pc + p.iv) * self.m + ic + ir.iv * mr], mr)
                        lb.vector_store(lanes, self.pa, [ir.iv * (kc * mr) + p.iv * mr])
            with layout.else_():
                with lb.for_(0, full) as ir:
                    row = ic + ir.iv * mr
                    starts = [(row + min(r, mr - 1)) * self.k + pc for r in range(rows)]
                    self._pack_transposed(self.a, starts, None, kc, self.pa, ir.iv * (kc * mr), mr, width=mr)
        with lb.if_(rest > 0) as partial:
            with partial.then_():
                base = full * (kc * mr)
                self._zero_fill(self.pa, base, kc, mr)
                with lb.for_(0, kc) as p:
                    with lb.for_(0, rest) as r:
                        i, q = ic + full * mr + r.iv, pc + p.iv
                        at = self._pick(self.ta, self._a_index(i, q, True), self._a_index(i, q, False))
                        lb.store(lb.load(self.a, [at]), self.pa, [base + p.iv * mr + r.iv])

    def _a_index(self, i, p, transposed: bool):
        """The flat index of A[i, p] in A's buffer (which holds A^T when ``transposed``)."""
        return p * self.m + i if transposed else i * self.k + p

    # -- tiles --------------------------------------------------------------------------------------

    def _tile(self, row, col, rows, cols, a, b, kc, first) -> None:
        """C[row:row+rows, col:col+cols] = base + alpha * the packed panels' product, where base is
        D (or zero) in the first K panel and C after: in place when the tile is whole, else in an
        MR x NR buffer that the valid part of the base is copied into and the result out of (the
        same kernel either way: one copy of it to compile)."""
        lb, mr, nr = self.lb, self.bl.mr, self.bl.nr
        whole = rows.eq(mr) & cols.eq(nr)
        edge = lb.compare("eq", whole, lb.const(0, i1))
        with lb.if_(edge) as copy_in:
            with copy_in.then_():
                self._zero_fill(self.tile, 0, mr, nr)
                later_panel = lb.compare("eq", first, lb.const(0, i1))
                with lb.if_(later_panel | self.add_d) as has_base:
                    with has_base.then_():
                        with lb.if_(first, [self.c.type]) as base:  # D in the first panel, then C
                            with base.then_():
                                base.yield_(self.d)
                            with base.else_():
                                base.yield_(self.c)
                        self._copy_edge(rows, cols, row, col, base.results[0], to_tile=True)
        at = row * self.n + col
        memref, idx = self.tile_view.type, at.type
        with lb.if_(whole, [memref, idx, idx, memref, memref, idx]) as target:
            with target.then_():
                target.yield_(self.c, at, self.n, self.d, self.bias, col)
            with target.else_():  # the base is in the buffer already: D is not read there; the
                # bias's valid columns go to a buffer of NR (the kernel reads NR)
                with lb.if_(self.finish_now[0]) as copy_bias:
                    with copy_bias.then_():
                        self._zero_fill(self.tile_bias, 0, 1, nr)
                        with lb.for_(0, cols) as j:
                            lb.store(lb.load(self.bias, [col + j.iv]), self.tile_bias, [j.iv])
                target.yield_(self.tile_view, lb.index(0), lb.index(nr), self.tile_view, self.tile_bias, lb.index(0))
        buf, c_at, ldc, d, bias, bias_at = target.results
        widths = kernel_widths(nr)
        if len(widths) == 1:
            self._kernel_for(buf, d, c_at, ldc, first & whole, a, b, kc, nr, (bias, bias_at))
        else:  # an edge panel of at most NR/2 columns takes half the lanes
            with lb.if_(cols <= widths[1]) as narrow:
                with narrow.then_():
                    self._kernel_for(buf, d, c_at, ldc, first & whole, a, b, kc, widths[1], (bias, bias_at))
                with narrow.else_():
                    self._kernel_for(buf, d, c_at, ldc, first & whole, a, b, kc, nr, (bias, bias_at))
        with lb.if_(edge) as copy_out:
            with copy_out.then_():
                self._copy_edge(rows, cols, row, col, self.c, to_tile=False)

    def _copy_edge(self, rows, cols, row, col, matrix, to_tile: bool) -> None:
        """The valid ``rows`` x ``cols`` of an edge tile between ``matrix`` (from ``row``, ``col``)
        and the tile buffer: GROUP elements a vector, then one at a time (the library is compiled
        without LLVM's vectoriser, and a 27-column product's every tile is an edge tile)."""
        lb, nr = self.lb, self.bl.nr
        chunk = GROUP if nr % GROUP == 0 else 1
        vectors = lb.op("arith.divui", cols, lb.index(chunk)) * chunk
        with lb.for_(0, rows) as r:
            start, t_start = (row + r.iv) * self.n + col, r.iv * nr
            for begin, end, width in ((0, vectors, chunk), (vectors, cols, 1)):
                with lb.for_(begin, end, width) as j:
                    at, t = start + j.iv, t_start + j.iv
                    if to_tile:
                        lb.vector_store(lb.vector_load(matrix, [at], width), self.tile, [t])
                    else:
                        lb.vector_store(lb.vector_load(self.tile, [t], width), matrix, [at])

    def _kernel_for(self, c, d, c_at, ldc, first, a, b, kc, width: int, bias, tiles=1, b_tile=None) -> None:
        """A call of the kernel function of ``width`` columns for A packed or in place (``a``:
        ``_a_source``, its first row panel's), on ``tiles`` tiles from there: down A's row panels
        (B's panel the same), or with ``b_tile`` (the distance between B's panels) along B's
        column panels (A's the same); ``bias``: (buffer, the tile's first column in it) for the
        last K panel's bias."""
        lb, mr = self.lb, self.bl.mr
        a_buf, a_start, rows, a_step = a
        packed = isinstance(rows, list)
        row_step, valid = (lb.index(1), lb.index(mr)) if packed else rows
        b_buf, b_start, b_step = b
        zero = lb.index(0)
        if b_tile is None:  # the next row panel's A: packed, or A's rows; C's MR rows on
            strides = (kc * mr if packed else row_step * mr, zero, ldc * mr, zero)
        else:  # the next column panel's B; C's and the bias's NR columns on
            strides = (zero, b_tile, lb.index(self.bl.nr), lb.index(self.bl.nr))
        a_tile, b_tile, c_tile, bias_tile = strides
        lb.call(self.kernels[width, packed], a_buf, a_start, a_step, row_step, valid, a_tile, b_buf, b_start, b_step,
                b_tile, kc, c, c_at, ldc, c_tile, d, first, self.alpha, self.add_d, lb.index(tiles), *bias, bias_tile,
                *self.finish_now, results=[])

    def _kernel(self, c, d, c_at, ldc, first, a, b, kc, width: int, unroll: int = 1) -> None:
        """MR x ``width`` sums over kc steps of A's rows and the first ``width`` columns of B's
        panel, from zero; then each element of ``c`` (rows ``ldc`` apart from ``c_at``) becomes
        base + alpha * sum, one fused multiply-add, the base being ``d``'s element (zero without
        add_d) where ``first`` holds and ``c``'s own after.  ``a``: (buffer, start, each row's
        offset from the start: constants where A is packed, else values, k step); ``b``:
        (buffer, start, k step) (``kernel_function``).

        A row of the tile is one ``vector<NRxT>`` (LLVM splits it into the host's registers):
        each k step loads the panel's row once and does MR vector fused multiply-adds with A's
        elements broadcast, the same sums, in the same order, as scalar code would do, written
        so that LLVM need not vectorise anything (compile time: docs/benchmarks.md).  ``unroll``
        k steps a trip, then one a trip for the last kc % unroll; where A's rows are constant
        offsets (packed), a trip's later steps read A at constant offsets from its first."""
        lb, mr, nr = self.lb, self.bl.mr, width
        rows = [c_at + r * ldc for r in range(mr)]
        zeros = lb.splat_vector(self.zero, nr)
        a_buf, a_start, a_rows, a_step = a
        b_buf, b_start, b_step = b
        packed = all(isinstance(r, int) for r in a_rows)

        def steps(first_step, sums, count: int) -> list:
            """``count`` k steps from ``first_step`` on the sums ``sums``."""
            trip = a_start + first_step * a_step if packed else None
            for u in range(count):
                k = first_step + u if u else first_step
                panel_row = lb.vector_load(b_buf, [b_start + k * b_step], nr)
                if packed:  # A's elements at constant offsets from the trip's first step's
                    at = trip + u * mr if u else trip
                    addresses = [at + r if r else at for r in a_rows]
                else:  # each row's start (loop-invariant) + the step's
                    step = k * a_step
                    addresses = [r + step for r in a_rows]
                sums = [self._multiply_add(lb.splat_vector(lb.load(a_buf, [at]), nr), panel_row, s)
                        for at, s in zip(addresses, sums)]
            return sums

        whole = lb.op("arith.divui", kc, lb.index(unroll)) * unroll if unroll > 1 else kc
        with lb.for_(0, whole, unroll, inits=[zeros] * mr) as loop:
            loop.yield_(*steps(loop.iv, list(loop.args), unroll))
        sums = loop.results
        if unroll > 1:
            with lb.for_(whole, kc, 1, inits=list(sums)) as rest:
                rest.yield_(*steps(rest.iv, list(rest.args), 1))
            sums = rest.results
        # A row's base is read just before the row is written.  D may be C itself, where an
        # element's base is the element, so only the order within a row matters.  Reading the
        # whole tile's bases first held 2 x MR vectors at once besides the sums, one more than
        # AVX-512's 32 registers: a spill and reload through the stack in every tile, which
        # stalled a quarter of a K = 10 product's time on the store's forwarding.
        with lb.if_(first, [c.type]) as source:
            with source.then_():
                source.yield_(d)
            with source.else_():
                source.yield_(c)
        has_base = (first & self.add_d) | lb.compare("eq", first, lb.const(0, i1))
        alpha = lb.splat_vector(self.alpha, nr)
        bias, bias_at, add_bias, relu = self.finish

        def store_rows(finish) -> None:
            for i, acc in zip(rows, sums):
                with lb.if_(has_base, [zeros.type]) as base:
                    with base.then_():
                        base.yield_(lb.vector_load(source.results[0], [i], nr))
                    with base.else_():
                        base.yield_(zeros)
                lb.vector_store(finish(self._multiply_add(alpha, acc, base.results[0])), c, [i])

        # The bias and ReLU in the last K panel's stores, as the elementwise op after the product
        # computes them (the sum rounded, + bias, then maximumf with 0): the same bits.
        with lb.if_(add_bias | relu) as finishing:
            with finishing.then_():
                with lb.if_(add_bias, [zeros.type]) as row:
                    with row.then_():
                        row.yield_(lb.vector_load(bias, [bias_at], nr))
                    with row.else_():
                        row.yield_(zeros)

                def finish(v):
                    with lb.if_(add_bias, [zeros.type]) as biased:
                        with biased.then_():
                            biased.yield_(lb.op("arith.addf", v, row.results[0]))
                        with biased.else_():
                            biased.yield_(v)
                    with lb.if_(relu, [zeros.type]) as rectified:
                        with rectified.then_():
                            rectified.yield_(lb.op("arith.maximumf", biased.results[0], zeros))
                        with rectified.else_():
                            rectified.yield_(biased.results[0])
                    return rectified.results[0]

                store_rows(finish)
            with finishing.else_():
                store_rows(lambda v: v)

    def _multiply_add(self, x, y, z):
        """``x * y + z``: fused where the CPU has it (``Blocking.fma``)."""
        return multiply_add(self.lb, self.bl.fma, x, y, z)


NARROW_MIN_LANES = 4
"""Smallest half tile width for which the library carries a second, half-width kernel for
narrow edge panels (a panel of 10 columns runs 16 lanes, not 32: twice as fast), and the dot
and column forms of products of at most that many columns (gemm_narrow.py)."""

A_IN_PLACE_PANELS = 4
"""Column panels (NR columns each) of a product's window up to which the kernel reads A (or A^T)
in place rather than packed (as it does in any block of columns that is one panel wide).
Packing copies A once per block of columns, and the kernel then reads it once per column
panel; with few panels the copy costs more than the packed layout saves.  Measured on
the AMD EPYC Zen 3 (AVX2, NR 16; session 17, the library beside numpy's OpenBLAS, paired
ratios of 30 rounds), packing A only for more than one panel against more than four:
256x17x1024 1.58 -> 1.21 of OpenBLAS's time, 256x24x1024 1.44 -> 1.12, 256x20x1024 B^T 1.42 ->
1.09, 1024x20x256 A^T 1.56 -> 1.17, 256x48x1024 1.16 -> 0.97, 256x64x1024 1.12 -> 1.00,
2048x32x1024 1.14 -> 0.89, 256x32x4096 1.18 -> 0.91; at 96-256 columns in place was 2-6%
faster still, at 1024 the same (noise), so the count stays where the gain was clear.  On
the AMD EPYC Zen 5 (AVX-512, NR 32: up to 128 columns; session 18, through ``irc.compile``,
beside numpy's OpenBLAS on its Haswell kernels, 30 paired rounds, time / numpy's at 1, 2, 4
and 8 panels): 256x48x1024 0.66 0.58 0.58 0.58, 256x64x1024 0.57 0.49 0.50 0.49, 256x96x1024
0.55 0.56 0.50 0.50, 1024x64x256 A^T 0.65 0.50 0.50 0.50, 256x96x1024 B^T 0.56 0.58 0.51 0.51,
2048x64x1024 0.56 0.46 0.46 0.47; at 160 and 256 columns 8 panels against 4 gained 1-4%, within
the rounds' spread."""

PACK_ROWS = 8
"""K steps of B (as given) that packing copies into one panel before going on to the next
(``_pack_rows``).  A k step at a time, the panels' stores land KC x NR elements apart (16-32
KiB: the same L1 set for every panel, as many write streams as panels); 8 at a time, each panel
gets 8 consecutive rows (0.5-1 KiB) between jumps and each of B's rows is read in 8 nearby runs.
Measured on the AMD EPYC Zen 5 (session 18): packing a 1024x1024 B as the library does (KC 256,
NC 512) in a C harness, a k step at a time took 0.29 ms (NR 16) and 0.14 ms (NR 32), panel by
panel (a panel's k steps in turn) 0.16 and 0.10, 8 k steps at a time 0.074 and 0.077 (4 at a
time 0.090, 16 0.091; memcpy of B 0.066).  In the library, time / numpy's (OpenBLAS on its
Haswell kernels), a k step at a time against 8: AVX2 (IRC_CPU=x86-64-v3) 256x1024x1024 1.06
against 1.01, 40x1024x1024 1.41 against 1.05, 64x1024x1024 1.21 against 1.01, 100x1024x1024
1.13 against 1.02, 1024^3 1.02 against 1.00; AVX-512 256x1024x1024 0.55 against 0.53, 1024^3
0.53 against 0.53."""

B_IN_PLACE_ROWS = 4
"""Rows of tiles (MR rows each) up to which B is read in place rather than packed."""

ALONG_ROWS_BYTES = 512 << 10
"""The packed columns of B that a row panel of A's tiles go across before the next row panel
(``_tiles``): half the smallest L2 of current x86-64 server cores (AMD Zen 4 and 5: 1 MiB; Intel
Xeon: 2 MiB), so that they stay there while A's MR x KC panel stays in L1.  Where the L2 is
smaller (AMD Zen 2 and 3: 512 KiB) they stream from L3, and half the L2 was slower still (below).

Along C's rows, each tile's C rows continue the previous tile's, and C streams through the
caches in order; down a column panel (the order before session 13) a tile writes 128-byte
pieces of rows 4 KiB apart (256 x 1024 f32 stored tile by tile, nothing computed: 47 us down
the panels, 22 us along the rows).  In a C harness on the Intel Xeon of docs/benchmarks.md
(session 13; MKL alongside): 256x1024x10 0.76 -> 0.97 of MKL, 1024^3 0.94 -> 0.97,
256x1024x1024 0.92 -> 0.96; all of B's columns at once (2 MiB of packed B at 2048 columns)
took 2048^3 from 0.87 to 0.66, a chunk of 512 KiB to 0.89 (1 MiB: 0.90).  ``Blocking.for_host``
packs B this much at a time (NC), so a chunk is all of a block of NC columns there; a library of
a larger NC (a name that a program or an older cache asks for) goes across chunks of it.

On the AMD EPYC Zen 3 of docs/benchmarks.md (AVX2, L1 32 KiB, L2 512 KiB; session 17,
``benchmarks/gemm.py``'s library called beside numpy's OpenBLAS, paired ratios of 20-30
rounds), half the L2 (256 KiB, 256 columns at KC 256, the rule until then) against 512 KiB:
256x1024x1024 1.09 -> 1.07 of OpenBLAS's time, 1024^3 1.10 -> 1.05, 2048^3 1.13 -> 1.09, and
the 16-layer MLP of tensor_cpu.py 0.97 -> 0.93 of numpy's, its arena the same 2.00
activations.  All of B's columns (1024) ran the products faster still (1.05, 1.02, 1.05), and
384-deep panels another 1-3% (with 1024 columns 1.03, 1.01, 1.03), but the MLP's arena grew to
2.09 and 3.34 activations: the packed panel is scratch in it."""

THREAD_MIN_WORK = 1 << 19
"""Multiply-adds below which a product stays on one thread (each part packs all of A): with the
parallel loop's chunks handed off from machine code (runtime/cpu/pool.py), products from about
50 us of work gain from a second thread (runtime/tensor_function.MIN_WORK_PER_THREAD)."""


def thread_parts(ctx_options: dict, panel: int, m: int, n: int, k: int) -> int:
    """How many blocks of whole column panels of ``panel`` columns (one a thread) a product of
    m x n x k is split into: ``threads`` (tensor-to-loops' option), as many as there are
    panels, and each block worth ``THREAD_MIN_WORK`` multiply-adds."""
    panels = -(-n // panel)
    return max(1, min(ctx_options.get("threads", 1), panels, m * n * k // THREAD_MIN_WORK))


class LibraryGemm:
    """Calls of the library GEMM for the host's blocking on products of one shape (m x k by
    k x n): the declaration, and packing scratch the size ``Blocking.scratch_sizes`` gives for
    ``parts`` calls at once (planned like any temporary), made where this object is made (before
    a loop whose iterations call it); ``call`` emits one call on 2-D views."""

    def __init__(self, ctx, elem, m: int, n: int, k: int, parts: int = 1):
        from .blas import declare

        self.lb, self.elem = ctx.lb, elem
        self.blocking = Blocking.for_host(elem, ctx.options)
        self.name = symbol(elem, self.blocking)
        declare(ctx, self.name, signature(elem))
        self.work = max(1, m * n * k // parts)
        self.sizes = self.blocking.scratch_sizes(m, n, k)
        self.scratch = [ctx.temporary(MemRefType([size * parts], elem)) for size in self.sizes]

    def matrix(self, buf, rows, cols, element_offset=0):
        """``buf``'s memory from element ``element_offset`` on as a ``rows`` x ``cols`` matrix view."""
        lb = self.lb
        byte = lb.index(element_offset) * (self.elem.width // 8)
        return lb.view(buf, byte, MemRefType([None, None], self.elem), [lb.index(rows), lb.index(cols)]).value

    def call(self, a, b, c, transposed=(False, False), d=None, alpha=1.0, add_d=False, part=0, cols=None,
             bias=None, relu=False) -> None:
        """``c = (add_d ? d : 0) + alpha * op(a) op(b)`` on the matrix views (``d`` defaults to ``c``;
        ``add_d`` a bool or an ``i1`` value), for C's columns ``cols`` (all: None), with scratch
        ``part``; then + ``bias`` (a 1-D view of C's width, or None) and ReLU where ``relu``."""
        from irc.dialects.func import CallOp

        lb, elem = self.lb, self.elem
        vec = MemRefType([None], elem)
        own = [lb.view(buf, lb.index(part) * (size * elem.width // 8), vec, [lb.index(size)]).value
               for buf, size in zip(self.scratch, self.sizes)]
        flags = [lb.const(int(t), i1).value for t in transposed]
        add = lb.const(int(add_d), i1).value if isinstance(add_d, bool) else lb.wrap(add_d).value
        begin, end = cols if cols is not None else (0, lb.dim(c, 1))
        tail = [d if d is not None else c, lb.const(alpha, elem).value, add, lb.index(begin).value,
                lb.index(end).value, bias if bias is not None else own[1], lb.const(int(bias is not None), i1).value,
                lb.const(int(relu), i1).value]
        op = CallOp.build(self.name, [a, b, c, *own, *flags, *tail], [])
        op.attributes["nocapture"] = UnitAttr()  # keeps no pointer: plan-memory may reuse the buffers
        op.attributes["work"] = IntegerAttr(self.work, i64)  # split-parallel's estimate
        lb.insert(op)


def lower_matmul_library(ctx, op, inputs, output, epilogue=None, consumer=None, bias=None) -> None:
    """The matmul as a call of the library GEMM (``LibraryGemm``); ``epilogue`` = (D's buffer,
    alpha) computes ``D + alpha * (A @ B)`` instead (``epilogue``), ``bias`` = (bias's buffer,
    relu) ``relu?(A @ B + bias)`` (``bias_epilogue``).  With ``threads`` > 1
    (tensor-to-loops' option) a large product is a ``parallel`` loop of one call per block of
    whole column panels, each with its own scratch, which split-parallel runs on threads (each
    part packs all of A and its own columns of B).  ``consumer(col_begin, col_end)``, when
    given, builds the loops of an elementwise op after the product over those columns of C:
    each part runs it on its own columns right after its call (``column_consumer``)."""
    lb = ctx.lb
    elem = output.type.element_type
    transposed = ctx.transposed or (False, False)
    m, k = op.operands[0].type.shape
    n = op.operands[1].type.shape[1]
    blocking = Blocking.for_host(elem, ctx.options)
    mat = MemRefType([None, None], elem)
    views = [lb.view(buf, 0, mat, [lb.dim(buf, 0), lb.dim(buf, 1)]).value for buf in (*inputs, output)]
    parts = thread_parts(ctx.options, blocking.nr, m, n, k)
    gemm = LibraryGemm(ctx, elem, m, n, k, parts)
    d, alpha = epilogue if epilogue is not None else (None, 1.0)
    d_view = lb.view(d, 0, mat, [lb.dim(d, 0), lb.dim(d, 1)]).value if d is not None else None
    bias_view, relu = (None, False) if bias is None else \
        (lb.view(bias[0], 0, MemRefType([None], elem), [lb.dim(bias[0], 0)]).value, bias[1])

    def part(t, first, last) -> None:
        gemm.call(*views, transposed, d_view, alpha, d is not None, t, (first, last), bias_view, relu)
        if consumer is not None:
            consumer(lb.index(first), lb.index(last))

    split_columns(lb, blocking.nr, n, parts, part)


def split_columns(lb, panel: int, n: int, parts: int, part) -> None:
    """``part(t, first, last)`` for ``parts`` blocks of whole column panels (``panel`` columns
    each) of C's ``n`` columns (block t: panels t*P/parts .. (t+1)*P/parts): one call, or the
    iterations of a ``parallel`` loop (split-parallel runs them on threads); each block writes
    its own columns only."""
    if parts == 1:
        part(0, 0, n)
        return
    panels = -(-n // panel)
    with lb.for_(0, parts, parallel=True) as t:
        first = lb.op("arith.divui", t.iv * panels, lb.index(parts)) * panel
        last = lb.op("arith.minsi", lb.op("arith.divui", (t.iv + 1) * panels, lb.index(parts)) * panel,
                     lb.index(n))
        part(t.iv, first, last)


def library_parts(options: dict, op) -> int:
    """``thread_parts`` of the library GEMM that computes the matmul ``op``."""
    m, k = op.operands[0].type.shape
    n = op.operands[1].type.shape[1]
    return thread_parts(options, Blocking.for_host(op.results[0].type.element_type, options).nr, m, n, k)


def column_consumer(op, position: dict, transposed: set, parts: int):
    """The elementwise ``graph.fused`` that is the matmul ``op``'s one use, when the product is
    split across threads (``parts`` > 1: ``library_parts``, ``blas.thread_parts``) and that op
    can run on each part's columns right after the part's GEMM call, in the same parallel
    iteration: a bias and ReLU after ``x @ W``.  Then a layer is one parallel loop, not two:
    the threads start once a layer, not twice, and each applies the op to its block of C
    while the block is in its own cache
    (the MLP forward's 16 bias-and-ReLU loops were each too short to be worth waking the
    second thread for; docs/benchmarks.md).  The op's result must have the product's shape
    and read the product at its own index (so it may overwrite C in place); its other
    operands must exist before ``op`` and not be read transposed.  None otherwise."""
    from irc.values import BlockArgument

    result = op.results[0]
    uses = list(result.uses)
    if len(uses) != 1 or uses[0].owner.name != "graph.fused":
        return None
    fused = uses[0].owner
    if fused.reduction or len(fused.results) != 1 or fused.parent is not op.parent:
        return None
    out_type = fused.results[0].type
    if getattr(out_type, "shape", None) != result.type.shape or out_type.element_type is not result.type.element_type:
        return None
    if fused.domain_rank != 2 or fused.operands.count(result) != 1:
        return None
    if list(fused.maps[fused.operands.index(result)]) != [0, 1]:
        return None
    for v in fused.operands:
        if v is result:
            continue
        if v in transposed or not (isinstance(v, BlockArgument) or position.get(v.defining_op, 1 << 60) < position[op]):
            return None
    return fused if parts > 1 else None


def _sole_fused_use(op):
    """``(fused, m_at, other)``: the matmul ``op``'s one use, where it is an elementwise
    ``graph.fused`` of the product (operand ``m_at``) and one ``other`` operand, in the same
    block, with the product's type; None otherwise."""
    result = op.results[0]
    uses = list(result.uses)
    if len(uses) != 1 or uses[0].owner.name != "graph.fused":
        return None
    fused = uses[0].owner
    if fused.reduction or len(fused.results) != 1 or fused.results[0].type is not result.type \
            or fused.parent is not op.parent or len(fused.operands) != 2 or fused.operands.count(result) != 1:
        return None
    m_at = fused.operands.index(result)
    return fused, m_at, fused.operands[1 - m_at]


def _body(fused, m_at: int) -> tuple:
    """``(arg_m, arg_other, ops, top)`` of a ``_sole_fused_use`` op's body: its block arguments
    for the product and the other operand, its ops but the yield, and the op that makes the
    yielded value (None for an argument)."""
    body = fused.body
    (y,) = body.terminator.operands
    return body.args[m_at], body.args[1 - m_at], [o for o in body.ops if o.name != "graph.yield"], y.defining_op


def _defined_before(value, op, position: dict) -> bool:
    """Whether ``value`` exists before ``op`` runs (a parameter, or made by an earlier op)."""
    from irc.values import BlockArgument

    return isinstance(value, BlockArgument) or position.get(value.defining_op, 1 << 60) < position[op]


def bias_epilogue(op, position: dict, transposed: set):
    """``(fused, bias, relu)`` where the matmul ``op``'s one use is an elementwise ``graph.fused``
    that computes ``op + bias`` or ``maximumf(op + bias, 0.0)`` with ``bias`` a vector along the
    product's columns (``maps = [[1], [0, 1]]``, in either order), defined before ``op``: a
    layer's bias and ReLU, which the library computes in its last K panel's stores, while the
    tile is in registers, instead of a loop that reads C back (in the same order: the same
    bits).  None otherwise."""
    from irc.patterns import constant_value

    found = _sole_fused_use(op)
    if found is None:
        return None
    fused, m_at, bias = found
    result = op.results[0]
    n = result.type.shape[1]
    if list(fused.maps[m_at]) != [0, 1] or list(fused.maps[1 - m_at]) != [1] or bias in transposed:
        return None
    if list(getattr(bias.type, "shape", ())) != [n] or getattr(bias.type, "element_type", None) \
            is not result.type.element_type:
        return None
    if not _defined_before(bias, op, position):
        return None
    arg_m, arg_b, ops, top = _body(fused, m_at)
    relu = top is not None and top.name == "arith.maximumf"
    total = top.operands[0].defining_op if relu else top
    if total is None or total.name != "arith.addf" or set(total.operands) != {arg_m, arg_b} \
            or len(set(total.operands)) != 2:
        return None
    used = {total}
    if relu:
        zero = top.operands[1].defining_op
        value = constant_value(top.operands[1])
        if zero is None or value is None or getattr(value, "value", None) != 0.0 \
                or str(value.value).startswith("-"):
            return None
        used |= {top, zero}
    if set(ops) != used:
        return None
    return fused, bias, relu


def epilogue(op, position: dict):
    """``(fused, d, alpha)`` where the matmul ``op``'s one use is an elementwise ``graph.fused``
    that computes ``d - c * op``, ``d + c * op``, ``d - op`` or ``d + op`` (c a constant) with
    ``d`` of the result's type, defined before ``op``: the library computes it as
    ``d + alpha * (A @ B)`` in the GEMM's own stores (the SGD update ``w - lr * dw`` of a
    training step, without writing ``dw`` and reading it back).  None otherwise."""
    from irc.patterns import constant_value

    found = _sole_fused_use(op)
    if found is None:
        return None
    fused, m_at, d = found
    result = op.results[0]
    identity = (0, 1)
    if any(tuple(m) != identity for m in fused.maps):
        return None
    # d's type is the result's, except that a parameter may already be its buffer (a memref)
    if getattr(d.type, "shape", None) != result.type.shape or getattr(d.type, "element_type", None) \
            is not result.type.element_type:
        return None
    if not _defined_before(d, op, position):
        return None
    arg_m, arg_d, ops, top = _body(fused, m_at)
    scale = 1.0
    if top is None or top.name not in ("arith.subf", "arith.addf") or len(top.operands) != 2:
        return None
    x, t = top.operands
    if top.name == "arith.addf" and x is not arg_d:
        x, t = t, x
    if x is not arg_d:
        return None
    sign = -1.0 if top.name == "arith.subf" else 1.0
    used = {top}
    if t is not arg_m:
        product = t.defining_op
        if product is None or product.name != "arith.mulf":
            return None
        p, q = product.operands
        if q is arg_m:
            p, q = q, p
        constant = constant_value(q) if p is arg_m else None
        if constant is None or not hasattr(constant, "value"):
            return None
        scale = float(constant.value)
        used |= {product, q.defining_op}
    if set(ops) != used:  # nothing else in the body
        return None
    return fused, d, sign * scale
