"""irc's own GEMM as a library function: sizes known at run time, both operands packed.

``tensor-to-loops{gemm=library}`` lowers a large f32/f64 ``tensor.matmul`` to a call of
``@irc_gemm_f32`` (``_f64``; ``_tn``/``_nt``/``_tt`` where an operand's buffer holds its
transpose, as for BLAS: blas.py), declared in the module; the CPU runtime compiles
the function below once per host and process (then the disk cache holds its machine
code) and links the call to it (runtime/cpu/gemm_library.py).  So a program with
eight matmuls costs one GEMM's compile, not eight, and each product runs the same
tuned kernel whatever its shape.

The loop nest is Goto/BLIS's (Van Zee & van de Geijn, "BLIS", TOMS 2015)::

    for jc in 0..n step NC:                       columns of B packed at once (L3)
      for pc in 0..k step KC:                     K panels, balanced: ceil(k / ceil(k/KC)) deep
        pack B[pc:pc+kc, jc:jc+nc] into NR-wide panels, k-major, zero-padded
        for ic in 0..m step MC:
          pack A[ic:ic+mc, pc:pc+kc] into MR-tall panels, k-major, zero-padded
          for jr over B's panels:                 a KCxNR panel stays in L1
            for ir over A's panels:               an MCxKC block stays in L2
              MR x NR micro-kernel

Packing A as well as B makes the kernel's loads of A contiguous whatever A's
layout (A^T's rows are m elements apart: reading them in place strides a line a
k step, which at m = 1024 f32 maps every line of a kernel to one L1 set), and
zero padding gives every tile the full MR x NR kernel: an edge tile is computed
into a small buffer and its valid part added to C, so there is no slow path for
sizes that are not multiples of the tile.  The micro-kernel is the one of
matmul.py (MR x NR accumulators as iter_args, one ``math.fma`` a term, LLVM's
SLP vectoriser making NR-lane vectors); the tile and block sizes come from the
same host figures (``vector-bits``, ``vector-registers``, ``l1-bytes``,
``l3-bytes``).  The first K panel of a tile starts its sums from zero, later ones
from C, so every element is a sum of fused steps in k order within a panel.

The function trusts nothing but its buffers' sizes: if A, B and C do not agree, or
the scratch buffers are too small for the blocking (``Blocking.scratch_sizes`` says
what the caller must pass), a ``cf.assert`` faults before any memory is touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from irc.attributes import StringAttr, UnitAttr
from irc.builder import Builder
from irc.types import FloatType, MemRefType

from .matmul import MC, block_sizes, tile_sizes

LIBRARY_MIN_WORK = 64 * 64 * 64
"""Multiply-adds below which a matmul stays in inline loops (matmul.py): packing and the call
cost more than they save on small products, and the tile would be mostly padding."""


def wants_library(op, inputs) -> bool:
    """A 2-D f32/f64 ``tensor.matmul`` of static shape with at least LIBRARY_MIN_WORK multiply-adds."""
    if op.name != "tensor.matmul" or len(inputs) != 2:
        return False
    a, b = (v.type for v in inputs)
    if a.rank != 2 or b.rank != 2 or not (a.has_static_shape and b.has_static_shape):
        return False
    if not isinstance(a.element_type, FloatType) or a.element_type.kind not in ("f32", "f64"):
        return False
    m, k = a.shape
    return m * b.shape[1] * k >= LIBRARY_MIN_WORK


SYMBOL = re.compile(r"irc_gemm_(f32|f64)_([nt])([nt])_(\d{1,3})x(\d{1,3})_(\d{1,4})x(\d{1,4})x(\d{1,6})")
"""The library function's name says everything it is built from: element type, which operand
buffers hold transposes, tile MRxNR and blocks MCxKCxNC (``irc_gemm_f32_nt_8x32_96x256x8192``).
So the caller's scratch sizes and the function's blocking cannot disagree, and the runtime
builds exactly what a module asks for."""

KC_MAX = 512
"""Deepest K panel (deeper ones gained nothing measurable and cost scratch)."""

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

    @staticmethod
    def for_host(elem, options: dict, n: int | None = None) -> Blocking:
        """The sizes for a product with ``n`` columns on the host ``options`` describe: matmul.py's
        register tile (half as wide where ``n`` fits in half of it: a 10-column product padded to
        32 would spend two thirds of its time on zeros), its cache blocks with K panels twice as
        deep (the A and B micro-panels stream from L2 either way, and a deeper panel halves the
        kernel's start and end, which ``benchmarks/gemm.py --blockings`` measured
        at 2-3%: docs/benchmarks.md)."""
        mr, nr = tile_sizes(elem, options.get("vector_bits", 0), options.get("vector_registers", 0))
        if n is not None and 2 * n <= nr and nr % 2 == 0:
            nr //= 2
        kc, nc = block_sizes(elem, nr, options.get("l1_bytes", 0), options.get("l3_bytes", 0))
        kc = min(KC_MAX, 2 * kc)
        return Blocking(mr, nr, max(mr, MC - MC % mr), kc, max(nr, nc - nc % nr))

    def scratch_sizes(self, m: int, n: int, k: int) -> tuple[int, int]:
        """Elements of the packed-A and packed-B buffers a product of these sizes needs."""
        def up(x: int, to: int) -> int:
            return -(-x // to) * to

        kc = min(self.kc, k)
        return max(1, up(min(self.mc, m), self.mr) * kc), max(1, up(min(self.nc, n), self.nr) * kc)


def symbol(elem: FloatType, transposed, blocking: Blocking) -> str:
    ta, tb = transposed
    b = blocking
    return f"irc_gemm_{elem.kind}_{'t' if ta else 'n'}{'t' if tb else 'n'}_{b.mr}x{b.nr}_{b.mc}x{b.kc}x{b.nc}"


def parse_symbol(name: str):
    """(elem, transposed, blocking) of a library GEMM's name, or None if ``name`` is not one
    (or asks for sizes out of range: every size positive, MR*NR at most MAX_TILE, MC a
    multiple of MR, NC of NR)."""
    match = SYMBOL.fullmatch(name)
    if match is None:
        return None
    kind, ta, tb, *sizes = match.groups()
    mr, nr, mc, kc, nc = map(int, sizes)
    if min(mr, nr, mc, kc, nc) < 1 or mr * nr > MAX_TILE or mc % mr or nc % nr:
        return None
    return FloatType(kind), (ta == "t", tb == "t"), Blocking(mr, nr, mc, kc, nc)


def build(name: str):
    """A module with the one public function ``@name`` (a ``symbol``):
    ``(a, b, c: memref<?x?x...>, packed_a, packed_b: memref<?x...>)``, C = op(A) op(B)."""
    parsed = parse_symbol(name)
    if parsed is None:
        raise ValueError(f"'{name}' does not name a library GEMM")
    elem, transposed, blocking = parsed
    lb = Builder()
    module = lb.module()
    mat, vec = MemRefType([None, None], elem), MemRefType([None], elem)
    with lb.function(module, name, [mat, mat, mat, vec, vec], [],
                     arg_names=["a", "b", "c", "packed_a", "packed_b"]) as args:
        PackedGemm(lb, elem, transposed, blocking).emit(*args)
        lb.ret()
    return module


class PackedGemm:
    """Emits the body of the library function (see the module docstring)."""

    def __init__(self, lb: Builder, elem, transposed, blocking: Blocking):
        self.lb = lb
        self.elem = elem
        self.ta, self.tb = transposed
        self.bl = blocking
        self.zero = lb.const(0, elem)

    def _min(self, a, b):
        return self.lb.op("arith.minsi", self.lb.index(a), self.lb.index(b))

    def _ceil_div(self, a, b):
        lb = self.lb
        return lb.op("arith.divui", lb.index(a) + (lb.index(b) - 1), lb.index(b))

    def emit(self, a, b, c, packed_a, packed_b) -> None:
        lb, bl = self.lb, self.bl
        m, n = lb.dim(c, 0), lb.dim(c, 1)
        k = lb.dim(a, 0) if self.ta else lb.dim(a, 1)
        self.m, self.n, self.k = m, n, k
        # The sizes must agree and the scratch fit the blocking, or nothing is touched.
        a_other = lb.dim(a, 1) if self.ta else lb.dim(a, 0)
        b_k, b_n = (lb.dim(b, 1), lb.dim(b, 0)) if self.tb else (lb.dim(b, 0), lb.dim(b, 1))
        kc_max = self._min(bl.kc, k)
        need_a = self._ceil_div(self._min(bl.mc, m), bl.mr) * (bl.mr * kc_max)
        need_b = self._ceil_div(self._min(bl.nc, n), bl.nr) * (bl.nr * kc_max)
        ok = (a_other.eq(m)) & (b_k.eq(k)) & (b_n.eq(n)) \
            & (lb.dim(packed_a, 0) >= need_a) & (lb.dim(packed_b, 0) >= need_b)
        lb.op("cf.assert", ok, result=[], msg=StringAttr("irc_gemm: the sizes of A, B, C and the scratch buffers do not agree"))
        self.a, self.b, self.c = lb.flat(a), lb.flat(b), lb.flat(c)
        self.pa, self.pb = packed_a, packed_b
        self.tile_buf = lb.op("memref.alloca", result=MemRefType([bl.mr * bl.nr], self.elem))
        with lb.if_(k.eq(0)) as empty:
            with empty.then_():  # no products: C is all zeros
                with lb.for_(0, m * n) as i:
                    lb.store(self.zero, self.c, [i.iv])
            with empty.else_():
                self._product()

    def _product(self) -> None:
        lb, bl = self.lb, self.bl
        parts = self._ceil_div(self.k, bl.kc)
        kc_step = self._ceil_div(self.k, parts)  # equal K panels: no thin last panel
        with lb.for_(0, self.n, bl.nc) as jc:
            nc = self._min(bl.nc, self.n - jc.iv)
            with lb.for_(0, self.k, kc_step) as pc:
                kc = self._min(kc_step, self.k - pc.iv)
                first = pc.iv.eq(0)
                self._pack_b(pc.iv, kc, jc.iv, nc)
                with lb.for_(0, self.m, bl.mc) as ic:
                    mc = self._min(bl.mc, self.m - ic.iv)
                    self._pack_a(ic.iv, mc, pc.iv, kc)
                    with lb.for_(0, self._ceil_div(nc, bl.nr)) as jr:
                        cols = self._min(bl.nr, nc - jr.iv * bl.nr)
                        with lb.for_(0, self._ceil_div(mc, bl.mr)) as ir:
                            rows = self._min(bl.mr, mc - ir.iv * bl.mr)
                            self._tile(ic.iv + ir.iv * bl.mr, jc.iv + jr.iv * bl.nr, rows, cols,
                                       ir.iv * (bl.mr * kc), jr.iv * (bl.nr * kc), kc, first)

    # -- packing ------------------------------------------------------------------------------------

    def _pack_b(self, pc, kc, jc, nc) -> None:
        """packed_b[jr*kc*NR + p*NR + j] = B[pc+p, jc + jr*NR + j], zero beyond column nc."""
        lb, nr = self.lb, self.bl.nr
        full = lb.op("arith.divui", nc, lb.index(nr))
        rest = nc - full * nr
        if self.tb:  # B^T's rows are B's columns: GROUP of them at a time, each read along p
            group = GROUP if nr % GROUP == 0 else 1
            with lb.for_(0, full) as jr:
                with lb.for_(0, nr, group) as g:
                    col = jc + jr.iv * nr + g.iv
                    dst = jr.iv * (kc * nr) + g.iv
                    with lb.for_(0, kc) as p:
                        values = [lb.load(self.b, [(col + j) * self.k + pc + p.iv]) for j in range(group)]
                        self._store_all(values, self.pb, dst + p.iv * nr)
        else:
            with lb.for_(0, kc) as p:
                src = (pc + p.iv) * self.n + jc
                with lb.for_(0, full) as jr:
                    at = src + jr.iv * nr
                    values = [lb.load(self.b, [at + j]) for j in range(nr)]
                    self._store_all(values, self.pb, jr.iv * (kc * nr) + p.iv * nr)
        with lb.if_(rest > 0) as partial:
            with partial.then_():
                base = full * (kc * nr)
                with lb.for_(0, kc * nr) as i:
                    lb.store(self.zero, self.pb, [base + i.iv])
                with lb.for_(0, rest) as j:
                    col = jc + full * nr + j.iv
                    if self.tb:
                        self._pack_b_column(col, pc, kc, base + j.iv)
                    else:
                        with lb.for_(0, kc) as p:
                            lb.store(lb.load(self.b, [(pc + p.iv) * self.n + col]), self.pb,
                                     [base + p.iv * nr + j.iv])

    def _store_all(self, values, buf, at) -> None:
        """``buf[at + i] = values[i]``, after every load: the loads and stores of a packing step
        may then become one vector load and store (LLVM cannot tell that the scratch does not
        alias the operand, so stores between the loads would pin them as scalars)."""
        for i, v in enumerate(values):
            self.lb.store(v, buf, [at + i])

    def _pack_b_column(self, col, pc, kc, dst) -> None:
        lb = self.lb
        src = col * self.k + pc
        with lb.for_(0, kc) as p:
            lb.store(lb.load(self.b, [src + p.iv]), self.pb, [dst + p.iv * self.bl.nr])

    def _pack_a(self, ic, mc, pc, kc) -> None:
        """packed_a[ir*kc*MR + p*MR + r] = A[ic + ir*MR + r, pc+p], zero beyond row mc."""
        lb, mr = self.lb, self.bl.mr
        full = lb.op("arith.divui", mc, lb.index(mr))
        rest = mc - full * mr
        with lb.for_(0, full) as ir:
            row = ic + ir.iv * mr
            dst = ir.iv * (kc * mr)
            with lb.for_(0, kc) as p:
                values = [lb.load(self.a, [self._a_index(row + r, pc + p.iv)]) for r in range(mr)]
                self._store_all(values, self.pa, dst + p.iv * mr)
        with lb.if_(rest > 0) as partial:
            with partial.then_():
                base = full * (kc * mr)
                with lb.for_(0, kc * mr) as i:
                    lb.store(self.zero, self.pa, [base + i.iv])
                with lb.for_(0, kc) as p:
                    with lb.for_(0, rest) as r:
                        at = self._a_index(ic + full * mr + r.iv, pc + p.iv)
                        lb.store(lb.load(self.a, [at]), self.pa, [base + p.iv * mr + r.iv])

    def _a_index(self, i, p):
        """The flat index of A[i, p] in A's buffer (which holds A^T with ``ta``)."""
        return p * self.m + i if self.ta else i * self.k + p

    # -- tiles --------------------------------------------------------------------------------------

    def _tile(self, row, col, rows, cols, a_at, b_at, kc, first) -> None:
        """C[row:row+rows, col:col+cols] (+)= the packed panels' product: in place when the tile
        is whole, else through a zeroed MR x NR buffer whose valid part is added to C."""
        lb, mr, nr = self.lb, self.bl.mr, self.bl.nr
        whole = rows.eq(mr) & cols.eq(nr)
        with lb.if_(whole) as tile:
            with tile.then_():
                self._kernel(self.c, row * self.n + col, self.n, first, a_at, b_at, kc)
            with tile.else_():
                buf = self.tile_buf
                self._kernel(buf, lb.index(0), nr, None, a_at, b_at, kc)
                with lb.for_(0, rows) as r:
                    with lb.for_(0, cols) as j:
                        at = (row + r.iv) * self.n + col + j.iv
                        old = lb.select(first, self.zero, lb.load(self.c, [at]))
                        lb.store(old + lb.load(buf, [r.iv * nr + j.iv]), self.c, [at])

    def _kernel(self, c, c_at, ldc, first, a_at, b_at, kc) -> None:
        """MR x NR accumulators from zero where ``first`` holds (None: always) or else from C, over
        kc steps of the panels; stored to ``c`` (rows ``ldc`` apart from ``c_at``) after."""
        lb, mr, nr = self.lb, self.bl.mr, self.bl.nr
        rows = [c_at + r * ldc for r in range(mr)]
        if first is None:
            inits = [self.zero] * (mr * nr)
        else:
            inits = [lb.select(first, self.zero, lb.load(c, [rows[r] + j])) for r in range(mr) for j in range(nr)]
        with lb.for_(0, kc, inits=inits) as loop:
            bs = [lb.load(self.pb, [b_at + loop.iv * nr + j]) for j in range(nr)]
            acc = []
            for r in range(mr):
                x = lb.load(self.pa, [a_at + loop.iv * mr + r])
                acc.extend(lb.op("math.fma", x, bs[j], loop.args[r * nr + j]) for j in range(nr))
            loop.yield_(*acc)
        for r in range(mr):
            for j in range(nr):
                lb.store(loop.results[r * nr + j], c, [rows[r] + j])


def lower_matmul_library(ctx, op, inputs, output) -> None:
    """The matmul as a call of the library GEMM for the host's blocking (declared in the module),
    with packing scratch the size ``Blocking.scratch_sizes`` gives, planned like any temporary."""
    from irc.dialects.func import CallOp

    from .blas import declare

    lb = ctx.lb
    elem = output.type.element_type
    transposed = ctx.transposed or (False, False)
    m, k = op.operands[0].type.shape
    n = op.operands[1].type.shape[1]
    blocking = Blocking.for_host(elem, ctx.options, n)
    name = symbol(elem, transposed, blocking)
    mat, vec = MemRefType([None, None], elem), MemRefType([None], elem)
    declare(ctx, name, [mat, mat, mat, vec, vec])
    views = [lb.view(buf, 0, mat, [lb.dim(buf, 0), lb.dim(buf, 1)]).value for buf in (*inputs, output)]
    scratch = [ctx.temporary(MemRefType([size], elem)) for size in blocking.scratch_sizes(m, n, k)]
    views += [lb.view(buf, 0, vec, [lb.dim(buf, 0)]).value for buf in scratch]
    call = CallOp.build(name, views, [])
    call.attributes["nocapture"] = UnitAttr()  # keeps no pointer: plan-memory may reuse the buffers
    lb.insert(call)
