"""Loops for ``graph.matmul`` and ``graph.batch_matmul``: a blocked, register-tiled GEMM.

C = A @ B with A: MxK, B: KxN, row-major and contiguous, all sizes static; or
either operand given as the buffer of its transpose (the source of a
``graph.transpose`` that the bufferizer did not copy: ``reads_transposed`` in
bufferize.py), which the packing of B and the kernel's loads of A read with
swapped indices (for A^T the MR values of one k step are adjacent).  The
loop nest is the classic Goto/BLIS one:

    C = 0
    for jc in 0..N step NC:                      (columns that fill an NR panel)
      for pc in 0..K step KC:
        pack B[pc:pc+kc, jc:jc+nc] into NR-wide panels, k-major   (scratch, L2)
        for ic in 0..M step MC:
          for jr over the panels:                (a KCxNR panel, in L1)
            for ir in ic..ic+mc step MR:
              MR x NR micro-kernel on C[ir:ir+MR, jr:jr+NR]
    then the last N % NR columns and the last M % MR rows the same way,
    with micro-kernels of the remaining sizes.

The micro-kernel keeps its MR x NR accumulators in registers as ``iter_args`` of
the k loop: each iteration loads NR consecutive elements of the packed panel and
MR elements of A, and does MR x NR multiply-adds.  For floats a row of the tile
is one ``vector<NRxT>`` (one vector load of the panel, MR broadcasts of A's
elements, MR vector ``math.fma``), which LLVM splits into W-lane registers (W =
16 f32 on AVX-512); integers stay scalar, for LLVM's SLP vectoriser to combine.

Arithmetic: floats accumulate in the element type, in k order, one
``math.fma`` per term (one rounding: ``llvm.fma``, a single instruction on
every x86-64 CPU with FMA3 and on AArch64), starting from zero, exactly what
``for k: c = fma(a, b, c)`` does; so every element is the correctly rounded
sequence of K f32 (or f64) fused steps.  A separate multiply and add keep
the FMA units half busy: ``benchmarks/tensor_cpu.py --only matmul`` (1024^3
f32, 2026-11-24, AMD EPYC that LLVM calls znver4) measured 72.2 GFLOP/s with
them and 96.9 with fma (docs/benchmarks.md, the autodiff section).  The
interpreter's ``np.matmul`` (BLAS: blocked, maybe with FMA) sums in another
order, so the two agree to within the bound of a K-term sum,
(K + 1) * eps * (|A| @ |B|) elementwise (what the tests check), not bit for
bit; the interpreter running these loops (its ``math.fma`` is exact) agrees
with the compiled code exactly.  Integers wrap, so they equal numpy's exactly.
"""

from __future__ import annotations

from irc.attributes import StringAttr, UnitAttr
from irc.builder import Builder
from irc.types import FloatType, MemRefType

from . import lowering

KC = 256
"""Depth of a packed panel where the L1 size is not given: KC x NR elements of B (32 KiB of f32
at NR 32) stay in L1 during a micro-kernel."""

NC = 512
"""Columns of B packed at once where the L3 size is not given (KC x NC elements, 512 KiB of f32)."""

MC = 96
"""Rows of A swept per packed block of B (rounded down to a multiple of MR)."""

VECTOR_BITS = 512
"""Default width of a vector register in bits, where the target does not say (``tensor-to-loops``'s
``vector-bits`` option, which ``irc.compile`` sets from the host CPU's features)."""

VECTOR_REGISTERS = 32
"""Default number of vector registers (``tensor-to-loops``'s ``vector-registers``)."""


def tile_sizes(elem, vector_bits: int = 0, vector_registers: int = 0) -> tuple[int, int]:
    """(MR, NR): rows and columns of the micro-kernel for elements of ``elem`` on a target
    with ``vector_registers`` registers of ``vector_bits`` bits (0: the defaults above).

    NR is two vectors (V = 2 registers a row of C), so that each k step loads two
    vectors of the packed panel and broadcasts MR elements of A.  MR is as large as
    the registers allow, MR * V accumulators + V panel vectors + 1 broadcast, up to
    8: more accumulators hide the FMA latency (4 cycles, 2 a cycle on current x86
    and AArch64 cores: at least 8 in flight) and amortise the panel's loads over more
    rows.  At 1024^3 f32 on AVX-512 (32 registers: MR 8) the step from MR 4 to 8 took
    the native GEMM from about 88 to 100 GFLOP/s (numpy's OpenBLAS: 99); MR 12 was
    slower again (85: the 12 rows of A, 4 KiB apart, collide in L1's sets).  On
    AVX2 (16 registers) MR is 6, on 16-byte vectors (SSE, NEON) with 16 registers 6."""
    bits = vector_bits or VECTOR_BITS
    registers = vector_registers or VECTOR_REGISTERS
    width = getattr(elem, "width", 64)
    lanes = max(1, bits // max(8, width))
    mr = max(1, min(8, (registers - 3) // 2))
    return mr, 2 * lanes


def block_sizes(elem, nr: int, l1_bytes: int = 0, l3_bytes: int = 0) -> tuple[int, int]:
    """(KC, NC): the depth of a packed panel of B and the columns packed at once.

    KC fills the L1 data cache with one KC x NR panel (the A elements of a k step
    come from L2 and are broadcast); NC makes the packed KC x NC block of B a
    quarter of the L3 (the cores share it; A and C pass through it too), so that
    A's rows are swept once per KC panel rather than once per NC columns.  On the
    AMD EPYC of docs/benchmarks.md (L1 32 KiB, L3 32 MiB: KC 256, NC 8192) NC
    from 512 to 1024 or more took the step's 8 matmuls from 26.3 to 25.3-25.9 ms;
    KC half the L1 was slower (27.1)."""
    size = max(1, getattr(elem, "width", 64) // 8)
    kc = KC if not l1_bytes else max(16, min(1024, l1_bytes // (nr * size)))
    nc = NC if not l3_bytes else max(nr, (l3_bytes // 4) // (kc * size))
    return kc, nc - nc % nr


def private_noinline(module, name: str) -> str:
    """Makes ``@name`` of ``module`` private and ``noinline`` (a GEMM's kernel function: LLVM
    allocates its registers apart from the loops around its calls); returns the name."""
    fn = next(f for f in module.functions if f.sym_name == name)
    fn.attributes["sym_visibility"] = StringAttr("private")
    fn.attributes["noinline"] = UnitAttr()
    return name


def multiply_add(lb: Builder, fused: bool, x, y, acc):
    """``x * y + acc`` for floats: one ``math.fma`` (one rounding) where the target fuses them
    (tensor-to-loops' ``fma``, the default), else a multiply and an add: without FMA hardware
    LLVM makes ``math.fma`` a libm ``fmaf`` call per lane (a batch of 32^3 products: 36 -> 1.5
    GFLOP/s at ``IRC_CPU=x86-64``)."""
    if fused:
        return lb.op("math.fma", x, y, acc)
    return lb.op("arith.addf", lb.op("arith.mulf", x, y), acc)


class Gemm:
    """Emits one C = A @ B over flat buffers (element offsets ``*_off``), sizes static; with
    ``accumulate``, C += A @ B (C holds a partial sum already: a sum of products over a loop)."""

    def __init__(self, ctx, elem, m: int, n: int, k: int, transposed=(False, False), accumulate: bool = False):
        self.ctx = ctx
        self.fused = ctx.options.get("fma", True)
        self.accumulate = accumulate
        self.ta, self.tb = transposed  # A's (B's) buffer holds A^T (B^T): read with swapped indices
        self.lb: Builder = ctx.lb
        self.elem = elem
        self.m, self.n, self.k = m, n, k
        options = ctx.options
        self.mr, self.nr = tile_sizes(elem, options.get("vector_bits", 0), options.get("vector_registers", 0))
        self.mc = max(self.mr, MC - MC % self.mr)
        kc, nc_max = block_sizes(elem, self.nr, options.get("l1_bytes", 0), options.get("l3_bytes", 0))
        self.kc = min(kc, k)
        is_float = self.is_float = isinstance(elem, FloatType)
        self.mul = "arith.mulf" if is_float else "arith.muli"
        self.add = "arith.addf" if is_float else "arith.addi"
        self.zero = self.lb.const(0, elem)
        nc = min(nc_max, max(self.nr, n - n % self.nr))
        self.nc = nc - nc % self.nr or self.nr
        self.packed = ctx.temporary(MemRefType([self.kc * max(self.nc, n % self.nr)], elem)) if k else None

    # -- index arithmetic on Values or ints -----------------------------------------------------

    def _sub(self, a, b):
        return self.lb.op("arith.subi", self.lb.index(a), self.lb.index(b))

    def _min(self, a, b):
        return self.lb.op("arith.minsi", self.lb.index(a), self.lb.index(b))

    # -- the whole product ------------------------------------------------------------------------

    def emit(self, a, a_off, b, b_off, c, c_off) -> None:
        lb = self.lb
        self.a, self.b, self.c = a, b, c
        self.a_off, self.b_off, self.c_off = a_off, b_off, c_off
        m, n, k = self.m, self.n, self.k
        if k == 0:  # otherwise the first K panel's kernels start from zero instead of reading C
            if self.accumulate:
                return
            with lb.for_(0, m * n) as loop:
                lb.store(self.zero, c, [c_off + loop.iv])
            return
        n_main = n - n % self.nr
        if n_main:
            with lb.for_(0, n_main, self.nc) as jc:
                nc = self._min(self.nc, self._sub(n_main, jc.iv))
                self._column_block(jc.iv, nc, self.nr)
        if n % self.nr:
            self._column_block(lb.index(n_main), lb.index(n % self.nr), n % self.nr)

    def _column_block(self, jc, nc, nr: int) -> None:
        """Columns jc..jc+nc of C (a multiple of ``nr``) over all of K and M."""
        lb = self.lb
        m_main = self.m - self.m % self.mr
        with lb.for_(0, self.k, self.kc) as pc:
            kc = self._min(self.kc, self._sub(self.k, pc.iv))
            self._pack(pc.iv, kc, jc, nc, nr)
            panels = lb.op("arith.divui", nc, lb.index(nr))
            if m_main:
                with lb.for_(0, m_main, self.mc) as ic:
                    mc = self._min(self.mc, self._sub(m_main, ic.iv))
                    with lb.for_(0, panels) as jr:
                        with lb.for_(0, mc, self.mr) as ir:
                            self._kernel(ic.iv + ir.iv, jc, jr.iv, pc.iv, kc, self.mr, nr)
            if self.m % self.mr:
                with lb.for_(0, panels) as jr:
                    self._kernel(lb.index(m_main), jc, jr.iv, pc.iv, kc, self.m % self.mr, nr)

    def _pack(self, pc, kc, jc, nc, nr: int) -> None:
        """packed[jr*kc*nr + p*nr + j] = B[pc+p, jc + jr*nr + j]: each panel contiguous, k-major."""
        lb = self.lb
        panels = lb.op("arith.divui", nc, lb.index(nr))
        if self.tb:  # the buffer is B^T (n x k): B[p, j] = buf[j * k + p]
            # One column of B (a row of the buffer) at a time, contiguous along p: reading
            # the NR columns of a k step together would touch NR lines k*size bytes apart,
            # which for k a multiple of 1024 f32 all fall into one L1 set.
            with lb.for_(0, panels) as jr:
                with lb.for_(0, nr) as j:
                    src = self.b_off + ((jc + jr.iv * nr + j.iv) * self.k + pc)
                    dst = jr.iv * kc * nr + j.iv
                    with lb.for_(0, kc) as p:
                        lb.store(lb.load(self.b, [src + p.iv]), self.packed, [dst + p.iv * nr])
            return
        with lb.for_(0, kc) as p:
            src_row = self.b_off + ((pc + p.iv) * self.n + jc)
            with lb.for_(0, panels) as jr:
                src = src_row + jr.iv * nr
                dst = jr.iv * kc * nr + p.iv * nr
                if getattr(self.elem, "width", 64) > 1:  # a buffer holds an i1 in a byte: no i1 vectors
                    lb.vector_store(lb.vector_load(self.b, [src], nr), self.packed, [dst])
                else:
                    for j in range(nr):
                        lb.store(lb.load(self.b, [src + j]), self.packed, [dst + j])

    def _kernel(self, row, jc, jr, pc, kc, mr: int, nr: int) -> None:
        """C[row:row+mr, col:col+nr] += A[row:row+mr, pc:pc+kc] @ panel jr, in registers."""
        lb = self.lb
        col = jc + jr * nr
        c_rows = [self.c_off + ((row + r) * self.n + col) for r in range(mr)]
        if self.ta:  # the buffer is A^T (k x m): A[i, p] = buf[p * m + i]; the MR values of a k step adjacent
            a_col = self.a_off + (pc * self.m + row)
        else:
            a_rows = [self.a_off + ((row + r) * self.k + pc) for r in range(mr)]

        def a_at(kl, r):
            return lb.load(self.a, [a_col + (kl.iv * self.m + r)] if self.ta else [a_rows[r] + kl.iv])

        panel = jr * kc * nr
        starts = lb.compare("eq", lb.index(pc), lb.index(0))  # the first K panel starts from zero
        if self.accumulate:
            starts = lb.const(0, starts.type)
        if self.is_float:  # a row of the tile is one vector (see gemm_library.PackedGemm._kernel)
            zeros = lb.splat_vector(self.zero, nr)
            with lb.if_(starts, [zeros.type] * mr) as first:
                with first.then_():
                    first.yield_(*[zeros] * mr)
                with first.else_():
                    first.yield_(*[lb.vector_load(self.c, [at], nr) for at in c_rows])
            with lb.for_(0, kc, inits=first.results) as kl:
                panel_row = lb.vector_load(self.packed, [panel + kl.iv * nr], nr)
                kl.yield_(*[multiply_add(lb, self.fused, lb.splat_vector(a_at(kl, r), nr), panel_row, kl.args[r])
                            for r in range(mr)])
            for at, acc in zip(c_rows, kl.results):
                lb.vector_store(acc, self.c, [at])
            return
        # The first K panel starts from zero (C is not cleared beforehand: one pass over C
        # less, and C is read once less); the others continue C's partial sums.
        with lb.if_(starts, [self.elem] * (mr * nr)) as first:
            with first.then_():
                first.yield_(*[self.zero] * (mr * nr))
            with first.else_():
                first.yield_(*[lb.load(self.c, [c_rows[r] + j]) for r in range(mr) for j in range(nr)])
        inits = first.results
        with lb.for_(0, kc, inits=inits) as kl:
            at = panel + kl.iv * nr
            bs = [lb.load(self.packed, [at + j]) for j in range(nr)]
            new = []
            for r in range(mr):
                a = a_at(kl, r)
                for j in range(nr):
                    new.append(self._multiply_add(a, bs[j], kl.args[r * nr + j]))
            kl.yield_(*new)
        for r in range(mr):
            for j in range(nr):
                lb.store(kl.results[r * nr + j], self.c, [c_rows[r] + j])

    def _multiply_add(self, a, b, acc):
        """``acc + a * b``: one fused multiply-add for floats (one rounding), wrapping ops for integers."""
        if self.is_float:
            return multiply_add(self.lb, self.fused, a, b, acc)
        return self.lb.op(self.add, acc, self.lb.op(self.mul, a, b))


K_STEPS = 4
"""k steps a ``RowStream`` applies to a vector of C between its load and its store."""

ROW_STREAM_ROWS = 2
"""Rows of C up to which a float product whose B is not transposed streams B's rows instead
of running the blocked GEMM (a matrix-vector product: B is read once, in order, and nothing
is packed or padded)."""


class RowStream:
    """C[i, :] = sum over k of A[i, k] * B[k, :], for the few rows i of C: for each k, each
    row of C (in L1) takes one vector fused multiply-add per ``width`` columns of B's row k.
    Every element is the sequence of K fused steps from zero, in k order: the bits of the
    library's kernel where K fits in one of its K panels (it adds the panels' sums)."""

    def __init__(self, ctx, elem, m: int, n: int, k: int, a_transposed: bool):
        self.lb, self.elem = ctx.lb, elem
        self.fused = ctx.options.get("fma", True)
        self.m, self.n, self.k, self.ta = m, n, k, a_transposed
        # A step is as wide as a row of the GEMM's register tile (two vector registers).
        self.width = tile_sizes(elem, ctx.options.get("vector_bits", 0), ctx.options.get("vector_registers", 0))[1]
        self.zero = self.lb.const(0, elem)

    def emit(self, a, a_off, b, b_off, c, c_off) -> None:
        lb, m, n = self.lb, self.m, self.n
        with lb.for_(0, m * n) as i:
            lb.store(self.zero, c, [c_off + i.iv])
        k_main = self.k - self.k % K_STEPS
        if k_main:
            with lb.for_(0, k_main, K_STEPS) as p:
                self._steps(p.iv, K_STEPS, a, a_off, b, b_off, c, c_off)
        if self.k % K_STEPS:
            with lb.for_(k_main, self.k) as p:
                self._steps(p.iv, 1, a, a_off, b, b_off, c, c_off)

    def _steps(self, p, steps: int, a, a_off, b, b_off, c, c_off) -> None:
        """k steps p .. p+steps-1 on every element of C's rows, in k order: each vector of C is
        loaded and stored once for ``steps`` fused multiply-adds."""
        lb, m, n, w = self.lb, self.m, self.n, self.width
        main = n - n % w
        xs = [[lb.load(a, [a_off + ((p + u) * m + r if self.ta else r * self.k + p + u)]) for r in range(m)]
              for u in range(steps)]
        rows = [b_off + (p + u) * n for u in range(steps)]
        if main:
            splats = [[lb.splat_vector(x, w) for x in step] for step in xs]
            with lb.for_(0, main, w) as j:
                bvs = [lb.vector_load(b, [row + j.iv], w) for row in rows]
                for r in range(m):
                    at = c_off + (r * n + j.iv)
                    acc = lb.vector_load(c, [at], w)
                    for u in range(steps):
                        acc = multiply_add(lb, self.fused, splats[u][r], bvs[u], acc)
                    lb.vector_store(acc, c, [at])
        if n % w:
            with lb.for_(main, n) as j:
                bs = [lb.load(b, [row + j.iv]) for row in rows]
                for r in range(m):
                    at = c_off + (r * n + j.iv)
                    acc = lb.load(c, [at])
                    for u in range(steps):
                        acc = multiply_add(lb, self.fused, xs[u][r], bs[u], acc)
                    lb.store(acc, c, [at])


DOT_ROWS = 4
"""Rows of C up to which a float product whose B is given as B^T (a torch ``Linear``'s ``x @ W^T``)
takes each element as a dot product of rows (``DotRows``) instead of the blocked GEMM, which
packs all of B^T (a strided gather) for those few rows and pads them to its register tile."""


class DotRows:
    """C[i, j] = dot(A[i, :], B^T[j, :]) for the few rows i of C, B given as B^T (n x k): both
    operands are read in place along k, contiguous, and B^T once.  A register block of the
    rows of C by ``JB`` columns keeps one vector accumulator per element (a lane per k residue);
    each k step loads a vector of each row of A and of B^T and does one fused multiply-add per
    element, then each accumulator's lanes are added (through a small scratch) and the last
    k % width terms follow in k order.  So each element is a sum of fused steps in another
    order than the GEMM's (within the same K-term bound)."""

    def __init__(self, ctx, elem, m: int, n: int, k: int):
        self.lb, self.elem = ctx.lb, elem
        self.fused = ctx.options.get("fma", True)
        self.m, self.n, self.k = m, n, k
        bits = ctx.options.get("vector_bits", 0) or VECTOR_BITS
        registers = ctx.options.get("vector_registers", 0) or VECTOR_REGISTERS
        self.width = max(1, bits // getattr(elem, "width", 64))
        # accumulators m * JB, plus the m + JB vectors a k step loads, fit in the registers
        self.jb = max(1, min(8, (registers - m) // (m + 1)))
        self.zero = self.lb.const(0, elem)
        self.lanes = ctx.temporary(MemRefType([self.width], elem))

    def emit(self, a, a_off, b, b_off, c, c_off) -> None:
        lb, n, jb = self.lb, self.n, self.jb
        main = n - n % jb
        if main:
            with lb.for_(0, main, jb) as j:
                self._block(j.iv, jb, a, a_off, b, b_off, c, c_off)
        for j in range(main, n):
            self._block(lb.index(j), 1, a, a_off, b, b_off, c, c_off)

    def _block(self, j0, cols: int, a, a_off, b, b_off, c, c_off) -> None:
        lb, m, k, w = self.lb, self.m, self.k, self.width
        k_main = k - k % w
        a_rows = [a_off + i * k for i in range(m)]
        b_rows = [b_off + (j0 + jj) * k for jj in range(cols)]
        sums = [[self.zero] * cols for _ in range(m)]
        if k_main:
            zeros = lb.splat_vector(self.zero, w)
            with lb.for_(0, k_main, w, inits=[zeros] * (m * cols)) as step:
                avs = [lb.vector_load(a, [row + step.iv], w) for row in a_rows]
                bvs = [lb.vector_load(b, [row + step.iv], w) for row in b_rows]
                step.yield_(*[multiply_add(lb, self.fused, avs[i], bvs[jj], step.args[i * cols + jj])
                              for i in range(m) for jj in range(cols)])
            for i in range(m):
                for jj in range(cols):
                    lb.vector_store(step.results[i * cols + jj], self.lanes, [lb.index(0)])
                    total = lb.load(self.lanes, [lb.index(0)])
                    for lane in range(1, w):
                        total = lb.op("arith.addf", total, lb.load(self.lanes, [lb.index(lane)]))
                    sums[i][jj] = total
        if k % w:
            flat = [sums[i][jj] for i in range(m) for jj in range(cols)]
            with lb.for_(k_main, k, inits=flat) as p:
                xs = [lb.load(a, [row + p.iv]) for row in a_rows]
                ys = [lb.load(b, [row + p.iv]) for row in b_rows]
                p.yield_(*[multiply_add(lb, self.fused, xs[i], ys[jj], p.args[i * cols + jj])
                           for i in range(m) for jj in range(cols)])
            sums = [[p.results[i * cols + jj] for jj in range(cols)] for i in range(m)]
        for i in range(m):
            for jj in range(cols):
                lb.store(sums[i][jj], c, [c_off + (i * self.n + j0 + jj)])


def dots_rows(elem, m: int, transposed) -> bool:
    """Whether a product of ``m`` rows of C is a ``DotRows`` (see DOT_ROWS): B given as B^T, A not."""
    ta, tb = transposed or (False, False)
    return isinstance(elem, FloatType) and 0 < m <= DOT_ROWS and tb and not ta


def streams_rows(elem, m: int, transposed) -> bool:
    """Whether a product of ``m`` rows of C is a ``RowStream`` (see ROW_STREAM_ROWS) or a ``DotRows``."""
    if dots_rows(elem, m, transposed):
        return True
    return isinstance(elem, FloatType) and 0 < m <= ROW_STREAM_ROWS and not (transposed or (False, False))[1]


@lowering("graph.matmul", "graph.batch_matmul")
def lower_matmul(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    a, b = inputs
    *batch, m, k = op.operands[0].type.shape  # the operand's shape: its buffer may hold its transpose
    n = op.operands[1].type.shape[-1]
    elem = output.type.element_type
    if dots_rows(elem, m, ctx.transposed):
        gemm = DotRows(ctx, elem, m, n, k)
    elif streams_rows(elem, m, ctx.transposed):
        gemm = RowStream(ctx, elem, m, n, k, (ctx.transposed or (False, False))[0])
    else:
        gemm = Gemm(ctx, elem, m, n, k, ctx.transposed or (False, False))
    fa, fb, fc = lb.flat(a), lb.flat(b), lb.flat(output)
    if not batch:
        gemm.emit(fa, lb.index(0), fb, lb.index(0), fc, lb.index(0))
        return
    count = 1
    for d in batch:
        count *= d
    with lb.for_(0, count) as loop:
        gemm.emit(fa, loop.iv * (m * k), fb, loop.iv * (k * n), fc, loop.iv * (m * n))
