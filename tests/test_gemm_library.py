"""irc's GEMM library function (passes/lowering/gemm_library.py, runtime/cpu/gemm_library.py).

The interpreter runs the library function's IR directly: it is the oracle for the
compiled function (same order of fused steps, so equal bits) and both are checked
against numpy in f64 within the bound of a K-term sum.  Small blockings make every
loop of the nest (several column blocks, K panels, row blocks, edge tiles) run on
small sizes.
"""

import functools
import itertools

import numpy as np
import pytest
from irc.passes.lowering import gemm_library as gl

import irc
from irc.diagnostics import IRError
from irc.types import FloatType

SMALL = gl.Blocking(mr=3, nr=4, mc=6, kc=5, nc=8)  # every loop and edge case on small sizes
GROUPED = gl.Blocking(mr=8, nr=16, mc=16, kc=21, nc=32)
"""Panels of GROUP columns: B^T and A packed through register transposes (blocks of 8 k steps
and a tail of 5 in a 21-deep panel, partial groups past the last column)."""
GROUPED_SHAPES = [(8, 16, 8), (9, 27, 21), (17, 40, 45), (16, 5, 30), (3, 33, 7), (24, 48, 64), (17, 70, 45),
                  (9, 81, 21)]
"""The last two have more than ``A_IN_PLACE_PANELS`` panels of NR columns: A is packed."""
SHAPES = [(1, 1, 1), (3, 4, 5), (7, 9, 11), (6, 8, 10), (13, 17, 4), (2, 3, 0), (0, 3, 4), (4, 0, 2), (20, 5, 23),
          (7, 3, 9), (11, 4, 12), (9, 21, 7), (14, 30, 11)]
"""(7, 3, 9) and (11, 4, 12): one column panel, rows past the tile; the last two, and (13, 17, 4), more
than ``A_IN_PLACE_PANELS`` panels of NR columns (A packed; the others read it in place)."""


def operands(m, n, k, dtype, transposed, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    ta, tb = transposed
    return a, b, (np.ascontiguousarray(a.T) if ta else a), (np.ascontiguousarray(b.T) if tb else b)


def within_sum_bound(c, a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    eps = np.finfo(c.dtype).eps
    bound = (a.shape[1] + 1) * eps * (np.abs(a64) @ np.abs(b64))
    return np.all(np.abs(c - a64 @ b64) <= bound)


def no_bias(dtype) -> tuple:
    """The library's last three arguments without a bias: a bias buffer it does not read, and
    add_bias and relu false."""
    return np.zeros(1, dtype), False, False


def scratch(blocking, m, n, k, dtype):
    pa, pb = blocking.scratch_sizes(m, n, k)
    return np.full(pa, np.nan, dtype), np.full(pb, np.nan, dtype)  # NaN: a read of stale scratch shows


@functools.cache
def library(kind, blocking=SMALL):
    """(module, compiled, name) of the library function for ``kind`` at ``blocking``."""
    name = gl.symbol(FloatType(kind), blocking)
    module = gl.build(name)
    return module, irc.compile(module, cache=False), name


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("transposed", list(itertools.product([False, True], repeat=2)))
def test_interpreted_and_compiled_agree_bit_for_bit_and_with_numpy(kind, transposed):
    dtype = np.float32 if kind == "f32" else np.float64
    module, exe, name = library(kind)
    for m, n, k in SHAPES:
        a, b, a_buf, b_buf = operands(m, n, k, dtype, transposed, seed=m * 100 + n * 10 + k)
        interpreted = np.full((m, n), np.nan, dtype)
        irc.interpret(module, name, a_buf, b_buf, interpreted, *scratch(SMALL, m, n, k, dtype), *transposed,
                      interpreted, 1.0, False, 0, n, *no_bias(dtype))
        compiled = np.full((m, n), np.nan, dtype)
        exe[name](a_buf, b_buf, compiled, *scratch(SMALL, m, n, k, dtype), *transposed, compiled, 1.0, False, 0, n, *no_bias(dtype))
        assert within_sum_bound(interpreted, a, b), (m, n, k)
        np.testing.assert_array_equal(compiled, interpreted)


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("transposed", list(itertools.product([False, True], repeat=2)))
def test_register_transposed_packing_agrees_bit_for_bit_and_with_numpy(kind, transposed):
    dtype = np.float32 if kind == "f32" else np.float64
    module, exe, name = library(kind, GROUPED)
    for m, n, k in GROUPED_SHAPES:
        agree_bit_for_bit_and_with_numpy(module, exe, name, GROUPED, (m, n, k), dtype, transposed, m + n + k)


def test_the_kernels_are_private_functions_and_the_packed_one_takes_unroll_steps_a_trip():
    """Four kernel functions (A packed or in place, NR and NR/2 wide), the narrow products' dot
    and column forms and the few rows' form, private and noinline, the kernels each over a number of row panels (its loop of
    tiles); the packed one's k loop takes UNROLL steps
    a trip and a second loop the rest, one a trip: every depth from 1 to 2 * UNROLL + 1 agrees
    bit for bit with the interpreter (the same fused steps in k order) and with numpy."""
    blocking = gl.Blocking(mr=3, nr=8, mc=6, kc=2 * gl.UNROLL + 1, nc=16)
    name = gl.symbol(FloatType("f32"), blocking)
    module = gl.build(name)
    kernels = [f for f in module.functions if f.sym_name != name]
    assert sorted(f.sym_name.rsplit(".", 1)[1] for f in kernels) == ["columns", "dot", "in_place4", "in_place8",
                                                                         "packed4", "packed8", "rows"]
    for f in kernels:
        assert f.attributes["sym_visibility"].value == "private" and "noinline" in f.attributes
    packed = next(f for f in kernels if f.sym_name.endswith("packed8"))
    steps = sorted(getattr(loop.operands[2].defining_op.attributes.get("value"), "value", None)
                   for loop in packed.walk() if loop.name == "scf.for")
    assert steps == [1, 1, gl.UNROLL]  # the tiles, the last k steps, UNROLL k steps a trip
    exe = irc.compile(module, cache=False)
    for k in range(1, 2 * gl.UNROLL + 2):
        for transposed in itertools.product([False, True], repeat=2):
            agree_bit_for_bit_and_with_numpy(module, exe, name, blocking, (7, 19, k), np.float32, transposed, k)


def agree_bit_for_bit_and_with_numpy(module, exe, name, blocking, size, dtype, transposed, seed) -> None:
    """Library function ``name`` of ``module`` (at ``blocking``), compiled in ``exe`` and
    interpreted, gives one C bit for bit, within the sum's bound of the f64 product."""
    m, n, k = size
    a, b, a_buf, b_buf = operands(m, n, k, dtype, transposed, seed=seed)
    runs = []
    for run in (lambda *args: irc.interpret(module, name, *args), exe[name]):
        c = np.full((m, n), np.nan, dtype)
        run(a_buf, b_buf, c, *scratch(blocking, m, n, k, dtype), *transposed, c, 1.0, False, 0, n, *no_bias(dtype))
        runs.append(c)
    assert within_sum_bound(runs[0], a, b), size
    np.testing.assert_array_equal(runs[1], runs[0])


@pytest.mark.parametrize("in_place", [False, True])
def test_the_epilogue_adds_d_and_scales_by_alpha(in_place):
    """C = D + alpha * A @ B (an SGD update), D separate from C or C itself; the interpreter and
    the compiled function agree bit for bit, and both with numpy within the sum's bound."""
    module, exe, name = library("f64")
    for m, n, k in SHAPES:
        a, b, a_buf, b_buf = operands(m, n, k, np.float64, (True, False), seed=k)
        d = np.random.default_rng(m).standard_normal((m, n))
        results = []
        for run in (lambda *args: irc.interpret(module, name, *args), exe[name]):
            c = d.copy() if in_place else np.full((m, n), np.nan)
            run(a_buf, b_buf, c, *scratch(SMALL, m, n, k, np.float64), True, False, c if in_place else d.copy(),
                -0.25, True, 0, n, *no_bias(np.float64))
            results.append(c)
        np.testing.assert_array_equal(results[0], results[1])
        bound = (k + 2) * np.finfo(np.float64).eps * (np.abs(d) + 0.25 * (np.abs(a) @ np.abs(b))) + 1e-300
        assert np.all(np.abs(results[0] - (d - 0.25 * (a @ b))) <= bound), (m, n, k)


@pytest.mark.parametrize("add_bias, relu", [(True, False), (True, True), (False, True)])
def test_the_library_adds_a_bias_and_takes_the_relu_in_its_last_stores(add_bias, relu):
    """C = relu?(A @ B + bias) with several K panels (the bias once, in the last), edge tiles
    (the bias's valid columns through a padded buffer), column windows and an empty K: the
    interpreter and the compiled function agree bit for bit, and with numpy within the sum's
    bound; a bias shorter than C's width faults before C is touched."""
    module, exe, name = library("f32")
    for (m, n, k), (lo, hi) in [((7, 9, 11), (0, 9)), ((13, 23, 6), (8, 20)), ((5, 6, 0), (0, 6))]:
        a, b, a_buf, b_buf = operands(m, n, k, np.float32, (False, True), seed=m + n + k)
        bias = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        runs = []
        for run in (lambda *args: irc.interpret(module, name, *args), exe[name]):
            c = np.full((m, n), np.nan, np.float32)
            run(a_buf, b_buf, c, *scratch(SMALL, m, n, k, np.float32), False, True, c, 1.0, False, lo, hi, bias,
                add_bias, relu)
            runs.append(c)
        np.testing.assert_array_equal(runs[1], runs[0])
        got = runs[0][:, lo:hi]
        want = (a.astype(np.float64) @ b)[:, lo:hi] + (bias[lo:hi] if add_bias else 0)
        want = np.maximum(want, 0) if relu else want
        bound = (k + 2) * np.finfo(np.float32).eps * ((np.abs(a) @ np.abs(b))[:, lo:hi] + np.abs(bias[lo:hi])) + 1e-30
        assert np.all(np.abs(got - want) <= bound), (m, n, k)
        assert np.isnan(np.delete(runs[0], np.s_[lo:hi], axis=1)).all()  # the window's columns only
    a, b, a_buf, b_buf = operands(7, 9, 11, np.float32, (False, False))
    c = np.full((7, 9), 5.0, np.float32)
    short = np.zeros(8, np.float32)
    with pytest.raises(irc.diagnostics.ExecutionError, match="do not agree"):
        exe[name](a_buf, b_buf, c, *scratch(SMALL, 7, 9, 11, np.float32), False, False, c, 1.0, False, 0, 9, short,
                  True, relu)
    assert (c == 5.0).all()


def test_sizes_that_disagree_fault_before_touching_memory():
    module, exe, name = library("f32")
    n = gl.A_IN_PLACE_PANELS * SMALL.nr + 1  # A is packed
    a, b, _, _ = operands(7, n, 11, np.float32, (False, False))
    pa, pb = scratch(SMALL, 7, n, 11, np.float32)
    cases = [(a, b[:10], np.zeros((7, n), np.float32), pa, pb),  # B has 10 rows for A's 11 columns
             (a, b, np.zeros((7, n - 1), np.float32), pa, pb),  # C is too narrow
             (a, b, np.zeros((7, n), np.float32), pa[:3], pb),  # packing scratch too small
             (a, b, np.zeros((7, n), np.float32), pa, pb[:3])]
    for args in cases:
        args = [*(np.ascontiguousarray(x) for x in args), False, False]
        args += [args[2], 1.0, False, 0, n, *no_bias(np.float32)]
        c = args[2]
        c[:] = 5.0
        with pytest.raises(IRError, match="do not agree"):
            irc.interpret(module, name, *args)
        with pytest.raises(irc.diagnostics.ExecutionError, match="do not agree"):
            exe[name](*args)
        assert (c == 5.0).all()


@pytest.mark.parametrize("name", [
    "irc_gemm_f16_3x4_6x5x8",  # no f16 kernel
    "irc_gemm_f32_nn_3x4_6x5x8",
    "irc_gemm_f32_0x4_6x5x8",  # sizes must be positive
    "irc_gemm_f32_3x4_7x5x8",  # MC not a multiple of MR
    "irc_gemm_f32_3x4_6x5x9",  # NC not a multiple of NR
    "irc_gemm_f32_32x32_32x5x32",  # a tile larger than MAX_TILE
    "irc_gemm_f32_3x4_6x5x8_",
    "irc_gemm_f32_3x4_6x5x99999999",
])
def test_names_that_are_not_library_gemms_are_refused(name):
    assert gl.parse_symbol(name) is None
    with pytest.raises(ValueError, match="does not name a library GEMM"):
        gl.build(name)


def test_blocking_for_the_host():
    host = dict(vector_bits=512, vector_registers=32, l1_bytes=32 << 10, l3_bytes=32 << 20)
    wide = gl.Blocking.for_host(FloatType("f32"), host)
    assert (wide.mr, wide.nr) == (8, 32) and wide.kc == gl.KC_MAX and wide.mc % wide.mr == 0
    avx2 = gl.Blocking.for_host(FloatType("f64"), dict(vector_bits=256, vector_registers=16))
    assert (avx2.mr, avx2.nr) == (6, 8)
    for blocking in (wide, avx2):
        assert gl.parse_symbol(gl.symbol(FloatType("f64"), blocking))[1] == blocking


@pytest.mark.parametrize("l1_kib, elem, kc, bits", [(48, "f32", 256, 512), (48, "f64", 256, 512), (64, "f32", 256, 512),
                                                    (32, "f32", 512, 512), (32, "f64", 512, 512), (0, "f32", 512, 512),
                                                    (48, "f32", 256, 256), (32, "f32", 256, 256), (32, "f64", 256, 256)])
def test_k_panel_depth_follows_the_l1_cache(l1_kib, elem, kc, bits):
    """A K panel whose tile working set (MR x KC of A, KC x NR of B) fits in L1 where one at
    least KC_L1_MIN deep does (48 KiB: Intel's Golden Cove cores), at most KC_L1_MAX deep (the
    AVX2 tiles fit at 512 on 48 KiB, and ran slower there); the deepest panel where none does
    (32 KiB beside 8 x 32 f32 tiles: Zen 4) or L1 is unknown."""
    t = FloatType(elem)
    host = dict(vector_bits=bits, vector_registers=32 if bits == 512 else 16, l1_bytes=l1_kib << 10,
                l3_bytes=32 << 20)
    blocking = gl.Blocking.for_host(t, host)
    assert blocking.kc == kc
    if kc != gl.KC_MAX:
        assert (blocking.mr + blocking.nr) * blocking.kc * t.width // 8 <= l1_kib << 10


@pytest.mark.parametrize("l1_kib", [0, 32, 48, 64])
def test_b_is_packed_along_rows_bytes_of_columns_at_a_time(l1_kib):
    """B is packed ALONG_ROWS_BYTES (512 KiB) of columns at a time at the K panel's depth, in
    whole panels of NR columns, whatever the L2 (half of Zen 3's 512 KiB measured slower)."""
    t = FloatType("f32")
    host = dict(vector_bits=256, vector_registers=16, l1_bytes=l1_kib << 10, l3_bytes=32 << 20)
    blocking = gl.Blocking.for_host(t, host)
    columns = gl.ALONG_ROWS_BYTES // (blocking.kc * 4)
    assert blocking.nc == columns - columns % blocking.nr


@pytest.mark.parametrize("shape", [(70, 130, 90), (100, 10, 300), (64, 64, 64), (3, 1, 1), (3, 5, 2), (5, 40, 3)])
def test_tensor_functions_call_the_library_for_large_products(shape):
    """Every 2-D f32 product of three or more rows calls the library (narrow ones run its
    half-width kernel); A is read transposed in place."""
    m, n, k = shape
    src = f"""
func.func @mm(%a: tensor<{k}x{m}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %at = graph.transpose %a {{perm = [1, 0]}} : tensor<{k}x{m}xf32> to tensor<{m}x{k}xf32>
  %c = graph.matmul %at, %b : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
  func.return %c : tensor<{m}x{n}xf32>
}}"""
    exe = irc.compile(irc.parse(src), blas=False)
    lowered, _ = exe.mm.lower(((k, m), (k, n)))
    declared = [f.sym_name for f in lowered.functions if f.is_declaration]
    assert len(declared) == 1 and gl.parse_symbol(declared[0]) is not None
    (call,) = [op for op in lowered.walk() if op.name == "func.call" and op.callee == declared[0]]
    flags = [irc.patterns.constant_value(v) for v in call.operands[5:7]]  # a_transposed, b_transposed
    assert [bool(f.value) for f in flags] == [True, False]  # A read transposed in place
    a, b, a_buf, _ = operands(m, n, k, np.float32, (True, False))
    assert within_sum_bound(exe.mm(a_buf, b), a, b)


EVEN = gl.Blocking(mr=3, nr=8, mc=6, kc=5, nc=16)  # nr/2 = NARROW_MIN_LANES: a half-width kernel too


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("transposed", [(False, False), (True, True)])
def test_narrow_edge_panels_run_the_half_width_kernel_and_agree(kind, transposed):
    """Panels of at most NR/2 columns (n % 8 in 1..4 here, and n < 8) take the half-width
    kernel, the others the full one; interpreted and compiled agree bit for bit, and with numpy."""
    assert EVEN.nr // 2 >= gl.NARROW_MIN_LANES
    dtype = np.float32 if kind == "f32" else np.float64
    name = gl.symbol(FloatType(kind), EVEN)
    module = gl.build(name)
    exe = irc.compile(module, cache=False)
    for m, n, k in [(7, 3, 9), (5, 12, 7), (14, 20, 11), (4, 8, 3), (9, 6, 12)]:
        agree_bit_for_bit_and_with_numpy(module, exe, name, EVEN, (m, n, k), dtype, transposed, m * 100 + n)


WIDE = gl.Blocking(mr=3, nr=16, mc=6, kc=5, nc=32)  # partial B^T panels of GROUP columns and more
NARROW_CASES = {  # (blocking, A given transposed, (m, n, k), columns written, alpha)
    "dot": (EVEN, False, [((7, 3, 45), (0, 3), 1.0), ((9, 4, 8), (1, 3), -0.5), ((5, 1, 23), (0, 1), 2.0),
                          ((6, 6, 29), (0, 6), 1.0), ((3, 5, 9), (1, 5), 0.5), ((15, 5, 37), (1, 5), 1.0)]),
    "columns": (WIDE, True, [((21, 5, 45), (0, 5), 1.0), ((8, 8, 7), (2, 7), -0.5), ((9, 1, 23), (0, 1), 2.0),
                             ((40, 6, 3), (0, 6), 1.0), ((19, 10, 31), (0, 10), 1.0), ((8, 9, 5), (3, 9), 2.0)]),
    "columns, W 4": (EVEN, True, [((9, 5, 29), (0, 5), 1.0), ((6, 3, 7), (1, 3), -0.5), ((4, 4, 23), (0, 4), 2.0)]),
}


@pytest.mark.parametrize("transposed", list(itertools.product([False, True], repeat=2)))
def test_tiles_along_the_rows_in_chunks_of_panels_give_the_same_bits(transposed, monkeypatch):
    """Each row panel's whole tiles go across a chunk of column panels (ALONG_ROWS_BYTES), then
    the edges: chunks of one panel, of two and of all, with edge rows and a partial panel, and
    a bias and ReLU (whose columns follow the tiles), give the same C bit for bit (each tile is
    summed alike whatever the order), the interpreter's, within the sum's bound of numpy's."""
    size, results = GROUPED.kc * GROUPED.nr * 4, []
    for chunk_bytes in (1, 2 * size, gl.ALONG_ROWS_BYTES):
        monkeypatch.setattr(gl, "ALONG_ROWS_BYTES", chunk_bytes)
        name = gl.symbol(FloatType("f32"), GROUPED)
        module = gl.build(name)
        exe = irc.compile(module, cache=False)
        for m, n, k in [(35, 80, 45), (16, 48, 9), (17, 16, 30)]:
            a, b, a_buf, b_buf = operands(m, n, k, np.float32, transposed, seed=m + n + k)
            bias = np.random.default_rng(n).standard_normal(n).astype(np.float32)
            runs = []
            for run in (lambda *args, module=module, name=name: irc.interpret(module, name, *args), exe[name]):
                c = np.full((m, n), np.nan, np.float32)
                run(a_buf, b_buf, c, *scratch(GROUPED, m, n, k, np.float32), *transposed, c, 1.0, False, 0, n, bias,
                    True, True)
                runs.append(c)
            np.testing.assert_array_equal(runs[1], runs[0])
            want = np.maximum(a.astype(np.float64) @ b + bias, 0)
            bound = (k + 2) * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b) + np.abs(bias))
            assert np.all(np.abs(runs[0] - want) <= bound), (m, n, k)
            results.append(runs[0])
    for shape in range(3):
        np.testing.assert_array_equal(results[shape], results[3 + shape])
        np.testing.assert_array_equal(results[shape], results[6 + shape])


def assert_window_within_bound(c, a, b, d, bias, alpha, add_d, add_bias, relu, window, k, dtype) -> None:
    """C written in the ``window`` of columns only, each element within the sum's bound of
    ``relu?(alpha * A @ B + (D) + (bias))`` in f64 (the library's epilogue)."""
    lo, hi = window
    assert np.isnan(np.delete(c, np.s_[lo:hi], axis=1)).all()  # the window's columns only
    exact = alpha * (a.astype(np.float64) @ b) + (d if add_d else 0) + (bias if add_bias else 0)
    got, want = c[:, lo:hi], (np.maximum(exact, 0) if relu else exact)[:, lo:hi]
    size = abs(alpha) * (np.abs(a) @ np.abs(b)) + np.abs(d) + np.abs(bias)
    assert np.all(np.abs(got - want) <= (k + 3) * np.finfo(dtype).eps * size[:, lo:hi]), (c.shape, k)


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("form", sorted(NARROW_CASES))
def test_products_of_few_columns_take_the_narrow_forms_and_agree(form, kind, tb, monkeypatch):
    """n <= NR/2, and past it up to ``DOT_FILL`` / ``COLUMN_FILL`` of NR (gemm_narrow.py): the dot
    form where A is not transposed (R x J blocks with rows and columns past C's: 7 rows by 2, 3
    and 6 columns by 4; K panels of 4 KC, 45 = 3 x 15: 3 vectors of 4 and a tail of 3), the column
    form where A^T is given (vectors of W rows, the last block's starting at m - W: 21 rows by 16
    for f64, whose 32 registers take R = 2, by 8 for f32; blocks of 10 columns, and of 5 where W
    is 4, as AVX2's f64); a window of columns, D and alpha, the bias and ReLU in the last panel: interpreted and
    compiled agree bit for bit and with numpy.  A library built with DOT_MIN_K and COLUMN_MIN_M
    past these sizes takes the tiles, whose bits differ (another order; panels KC deep, not 4
    KC), so the narrow forms did run."""
    from irc.passes.lowering import gemm_narrow

    blocking, ta, cases = NARROW_CASES[form]
    dtype = np.float32 if kind == "f32" else np.float64
    w = gemm_narrow.lanes(blocking)
    widest = (gemm_narrow.dot_columns if form == "dot" else gemm_narrow.column_columns)(blocking)
    assert w < max(n for (_, n, _), _, _ in cases) == widest  # past W, up to the form's widest
    tile = (gemm_narrow.dot_tile if form == "dot" else gemm_narrow.column_tile)(FloatType(kind), blocking)
    assert tile == {"dot": (2, 4), "columns": (2 if kind == "f64" else 1, 10), "columns, W 4": (1, 5)}[form]
    name = gl.symbol(FloatType(kind), blocking)
    module = gl.build(name)
    exe = irc.compile(module, cache=False)
    monkeypatch.setattr(gemm_narrow, "DOT_MIN_K", 1000)
    monkeypatch.setattr(gemm_narrow, "COLUMN_MIN_M", 1000)
    tiles = irc.compile(gl.build(name), cache=False)[name]
    for (m, n, k), (lo, hi), alpha in cases:
        assert n <= widest and (m >= w if ta else k >= 2 * w)
        a, b, a_buf, b_buf = operands(m, n, k, dtype, (ta, tb), seed=m * 100 + n + k)
        rng = np.random.default_rng(k)
        d, bias = rng.standard_normal((m, n)).astype(dtype), rng.standard_normal(n).astype(dtype)
        for add_d, add_bias, relu in [(False, False, False), (True, True, True), (False, True, False)]:
            runs = []
            for run in (lambda *args: irc.interpret(module, name, *args), exe[name], tiles):
                c = np.full((m, n), np.nan, dtype)
                run(a_buf, b_buf, c, *scratch(blocking, m, n, k, dtype), ta, tb, d, alpha, add_d, lo, hi, bias,
                    add_bias, relu)
                runs.append(c)
            np.testing.assert_array_equal(runs[1], runs[0])
            assert_window_within_bound(runs[0], a, b, d, bias, alpha, add_d, add_bias, relu, (lo, hi), k, dtype)
            if k >= 23:
                assert not np.array_equal(runs[2], runs[0])  # the tiles: in k order, KC-deep panels


def rows_form(kind: str, blocking):
    """(module, compiled function) of gemm_rows.py's rows form alone, made public to be called."""
    from irc.passes.lowering import gemm_rows

    from irc.builder import Builder

    lb = Builder()
    module = lb.module()
    name = gemm_rows.rows_function(lb, module, "rows", FloatType(kind), blocking)
    fn = next(f for f in module.functions if f.sym_name == name)
    del fn.attributes["sym_visibility"]
    return module, irc.compile(module, cache=False)[name]


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("blocking", [EVEN, gl.Blocking(mr=8, nr=32, mc=96, kc=64, nc=512)], ids=["even", "avx512"])
def test_the_rows_form_computes_the_tiles_bits(kind, blocking):
    """gemm_rows.py's rows form (a small batch's x @ W): for 1 to max_rows rows, A or A^T, columns
    past the vectors (a quarter vector, single columns), several K panels and blocks of columns
    (as wide as the rows allow: ``block_columns``),
    a window, D, alpha, the bias and the ReLU: the interpreter's bits, the tiles' bits (the same
    fused steps and additions, so the library's choice of form changes no result), and numpy's
    within the sum's bound."""
    from irc.passes.lowering import gemm_rows

    dtype = np.float32 if kind == "f32" else np.float64
    module, rows = rows_form(kind, blocking)
    name = gl.symbol(FloatType(kind), blocking)
    tiles = irc.compile(gl.build(name), cache=False)[name]
    cases = [(1, 37, 9, False, (0, 37)), (3, 300, 140, False, (5, 290)), (gemm_rows.ROWS, 70, 200, True, (0, 70)),
             (5, 11, 129, True, (2, 11)), (4, 64, 1, False, (0, 64)),
             (gemm_rows.max_rows(blocking), 45, 70, False, (3, 45)),
             (3, 1100, 6, False, (30, 1090)), (gemm_rows.max_rows(blocking), 600, 5, True, (0, 600))]  # blocks
    for m, n, k, ta, (lo, hi) in cases:
        a, b, a_buf, b_buf = operands(m, n, k, dtype, (ta, False), seed=m * 1000 + n + k)
        rng = np.random.default_rng(n)
        d, bias = rng.standard_normal((m, n)).astype(dtype), rng.standard_normal(n).astype(dtype)
        for add_d, alpha, add_bias, relu in [(False, 1.0, False, False), (True, -0.5, True, True)]:
            runs = []
            for call in (lambda *args: irc.interpret(module, "rows", *args), rows):
                c = np.full((m, n), np.nan, dtype)
                call(a_buf.ravel(), b_buf.ravel(), c.reshape(-1), d.ravel(), np.zeros(1, dtype), m, n, k, ta, alpha,
                     add_d, lo, hi, bias, add_bias, relu)
                runs.append(c)
            c = np.full((m, n), np.nan, dtype)
            tiles(a_buf, b_buf, c, *scratch(blocking, m, n, k, dtype), ta, False, d, alpha, add_d, lo, hi, bias,
                  add_bias, relu)
            np.testing.assert_array_equal(runs[1], runs[0])
            np.testing.assert_array_equal(runs[1], c)
            assert_window_within_bound(runs[0], a, b, d, bias, alpha, add_d, add_bias, relu, (lo, hi), k, dtype)


@pytest.mark.parametrize("blocking", [SMALL, gl.Blocking(mr=6, nr=12, mc=12, kc=5, nc=24)], ids=["small", "mr6"])
def test_the_library_takes_the_rows_form_for_few_rows_of_b_as_given(blocking):
    """Up to max_rows rows with B as given (ROWS, or 2 MR - 1: 11 where MR is 6) the library runs
    the rows form, which packs nothing (the scratch buffers keep their NaN); one row more, or
    B^T, packs A for the tiles."""
    from irc.passes.lowering import gemm_rows

    name = gl.symbol(FloatType("f32"), blocking)
    fn = irc.compile(gl.build(name), cache=False)[name]
    most = gemm_rows.max_rows(blocking)
    assert most == max(gemm_rows.ROWS, 2 * blocking.mr - 1)
    n, k = gl.A_IN_PLACE_PANELS * blocking.nr + 4, 13  # wide enough for the tiles to pack A
    for m, tb, packs in [(most, False, False), (3, False, False), (most + 1, False, True), (3, True, True)]:
        assert packs_a(fn, blocking, (m, n, k), (False, tb), scratch_n=n) == packs, (m, tb)


def packs_a(fn, blocking, shape, transposed, scratch_n) -> bool:
    """Whether the library function ``fn`` wrote its packed-A scratch (sized for ``scratch_n``
    columns, NaN before the call) for an f32 product of ``shape``, which is within the sum's
    bound."""
    m, n, k = shape
    a, b, a_buf, b_buf = operands(m, n, k, np.float32, transposed, seed=m * 100 + n)
    pa, pb = scratch(blocking, m, scratch_n, k, np.float32)
    c = np.full((m, n), np.nan, np.float32)
    fn(a_buf, b_buf, c, pa, pb, *transposed, c, 1.0, False, 0, n, *no_bias(np.float32))
    assert within_sum_bound(c, a, b), shape
    return not np.isnan(pa).all()


@pytest.mark.parametrize("ta", [False, True])
def test_a_is_read_in_place_for_a_window_of_few_column_panels(ta):
    """A window of at most A_IN_PLACE_PANELS panels of NR columns reads A (or A^T) in place:
    the packed-A scratch keeps its NaN; one column more packs it.  Both within the sum's bound."""
    from irc.passes.lowering import gemm_rows

    name = gl.symbol(FloatType("f32"), SMALL)
    fn = irc.compile(gl.build(name), cache=False)[name]
    widest = gl.A_IN_PLACE_PANELS * SMALL.nr
    m, k = gemm_rows.ROWS + 5, 13  # more rows than the rows form takes
    for n, packs in [(widest, False), (widest + 1, True), (widest - 3, False)]:
        assert packs_a(fn, SMALL, (m, n, k), (ta, False), scratch_n=widest + 1) == packs, n
    assert SMALL.scratch_sizes(m, widest, k)[0] == 1 and SMALL.scratch_sizes(m, widest + 1, k)[0] > 1


@pytest.mark.parametrize("kind", ["f32", "f64"])
def test_products_of_few_rows_with_b_transposed_take_the_dot_form_reading_b_in_place(kind, monkeypatch):
    """B^T given and at most DOT_IN_PLACE_ROWS rows (a small batch's ``x @ W^T``): the dot form
    whatever the columns, B^T's rows read in place (every column block down the few rows; K
    panels of 4 KC: 45 deep is three), with a window, D, alpha, the bias and ReLU: interpreted and
    compiled agree bit for bit, within the sum's bound of numpy's, and differ from the tiles'
    bits (another order).  One row more takes the tiles."""
    from irc.passes.lowering import gemm_narrow

    dtype = np.float32 if kind == "f32" else np.float64
    rows = gemm_narrow.DOT_IN_PLACE_ROWS
    name = gl.symbol(FloatType(kind), EVEN)
    module = gl.build(name)
    exe = irc.compile(module, cache=False)
    monkeypatch.setattr(gemm_narrow, "DOT_IN_PLACE_ROWS", 0)
    tiles = irc.compile(gl.build(name), cache=False)[name]
    for (m, n, k), (lo, hi), alpha in [((rows, 37, 45), (0, 37), 1.0), ((5, 21, 23), (3, 19), -0.5),
                                       ((1, 40, 64), (0, 40), 2.0), ((rows + 1, 37, 45), (0, 37), 1.0)]:
        assert n > gemm_narrow.dot_columns(EVEN)  # wider than the narrow forms take
        a, b, a_buf, b_buf = operands(m, n, k, dtype, (False, True), seed=m * 100 + n + k)
        rng = np.random.default_rng(k)
        d, bias = rng.standard_normal((m, n)).astype(dtype), rng.standard_normal(n).astype(dtype)
        for add_d, add_bias, relu in [(False, False, False), (True, True, True)]:
            runs = []
            for run in (lambda *args: irc.interpret(module, name, *args), exe[name], tiles):
                c = np.full((m, n), np.nan, dtype)
                run(a_buf, b_buf, c, *scratch(EVEN, m, n, k, dtype), False, True, d, alpha, add_d, lo, hi, bias,
                    add_bias, relu)
                runs.append(c)
            np.testing.assert_array_equal(runs[1], runs[0])
            assert_window_within_bound(runs[0], a, b, d, bias, alpha, add_d, add_bias, relu, (lo, hi), k, dtype)
            if m <= rows:
                assert not np.array_equal(runs[2], runs[0])  # the dot form ran, not the tiles
            else:
                np.testing.assert_array_equal(runs[2], runs[0])  # one row more: the tiles


@pytest.mark.parametrize("form", sorted(NARROW_CASES))
def test_products_wider_than_a_form_takes_run_the_tiles(form, monkeypatch):
    """One column past ``dot_columns`` / ``column_columns``, the library runs the tiles: the same
    bits as a library built with the forms' minimum sizes out of reach."""
    from irc.passes.lowering import gemm_narrow

    blocking, ta, _ = NARROW_CASES[form]
    widest = (gemm_narrow.dot_columns if form == "dot" else gemm_narrow.column_columns)(blocking)
    m, n, k = 2 * gemm_narrow.lanes(blocking) + 3, widest + 1, 4 * blocking.kc + 3
    name = gl.symbol(FloatType("f32"), blocking)
    exe = irc.compile(gl.build(name), cache=False)[name]
    monkeypatch.setattr(gemm_narrow, "DOT_MIN_K", 1000)
    monkeypatch.setattr(gemm_narrow, "COLUMN_MIN_M", 1000)
    tiles = irc.compile(gl.build(name), cache=False)[name]
    a, b, a_buf, b_buf = operands(m, n, k, np.float32, (ta, False), seed=n)
    runs = []
    for run in (exe, tiles):
        c = np.full((m, n), np.nan, np.float32)
        run(a_buf, b_buf, c, *scratch(blocking, m, n, k, np.float32), ta, False, c, 1.0, False, 0, n,
            np.zeros(n, np.float32), False, False)
        runs.append(c)
    np.testing.assert_array_equal(runs[0], runs[1])
    bound = (k + 2) * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(runs[0] - a.astype(np.float64) @ b) <= bound)


def test_a_blocking_whose_half_tile_is_not_a_power_of_two_has_no_narrow_forms():
    """The dot form's fold halves W lanes until one is left: with NR/2 = 6 (a 384-bit vector
    option, or a name someone wrote) the library leaves narrow products to the tiles, which
    agree with numpy (the fold had dropped every third lane)."""
    blocking = gl.Blocking(mr=2, nr=12, mc=4, kc=8, nc=24)
    assert not gl.narrow_forms(blocking)
    name = gl.symbol(FloatType("f32"), blocking)
    module = gl.build(name)
    assert not any(f.sym_name.endswith((".dot", ".columns")) for f in module.functions)
    exe = irc.compile(module, cache=False)
    for m, n, k, transposed in [(3, 3, 20, (False, False)), (9, 5, 30, (True, False)), (4, 6, 13, (False, True))]:
        agree_bit_for_bit_and_with_numpy(module, exe, name, blocking, (m, n, k), np.float32, transposed, k)




@pytest.mark.parametrize("transposed", [(False, True), (True, True), (False, False)])
def test_partial_panels_of_b_transposed_pack_in_groups_and_agree(transposed):
    """A partial panel of B^T packs GROUP columns a k step and the rest one by one (n % 16 of 8..15
    and below 8 here); interpreted and compiled agree bit for bit, and with numpy."""
    name = gl.symbol(FloatType("f32"), WIDE)
    module = gl.build(name)
    exe = irc.compile(module, cache=False)
    for m, n, k in [(5, 27, 9), (7, 13, 6), (4, 44, 11), (2, 9, 3)]:
        a, b, a_buf, b_buf = operands(m, n, k, np.float32, transposed, seed=m * 100 + n)
        runs = []
        for run in (lambda *args: irc.interpret(module, name, *args), exe[name]):
            c = np.full((m, n), np.nan, np.float32)
            run(a_buf, b_buf, c, *scratch(WIDE, m, n, k, np.float32), *transposed, c, 1.0, False, 0, n, *no_bias(np.float32))
            runs.append(c)
        assert within_sum_bound(runs[0], a, b), (m, n, k)
        np.testing.assert_array_equal(runs[1], runs[0])


def test_integer_and_batched_products_stay_inline():
    src = """
func.func @mm(%a: tensor<20x30xi32>, %b: tensor<30x40xi32>) -> tensor<20x40xi32> {
  %c = graph.matmul %a, %b : (tensor<20x30xi32>, tensor<30x40xi32>) -> tensor<20x40xi32>
  func.return %c : tensor<20x40xi32>
}
func.func @bmm(%a: tensor<2x20x30xf32>, %b: tensor<2x30x40xf32>) -> tensor<2x20x40xf32> {
  %c = graph.batch_matmul %a, %b : (tensor<2x20x30xf32>, tensor<2x30x40xf32>) -> tensor<2x20x40xf32>
  func.return %c : tensor<2x20x40xf32>
}"""
    exe = irc.compile(irc.parse(src), blas=False)
    for lowered, _ in (exe.mm.lower(((20, 30), (30, 40))), exe.bmm.lower(((2, 20, 30), (2, 30, 40)))):
        assert not any(f.is_declaration for f in lowered.functions)
    a = np.arange(600, dtype=np.int32).reshape(20, 30) % 7
    b = np.arange(1200, dtype=np.int32).reshape(30, 40) % 5
    np.testing.assert_array_equal(exe.mm(a, b), a @ b)


def test_a_program_cannot_declare_the_library_itself():
    src = """
func.func private @irc_gemm_f32_3x4_6x5x8(memref<?x?xf32>, memref<?x?xf32>, memref<?x?xf32>, memref<?xf32>, memref<?xf32>, i1, i1)
func.func @f() { func.return }"""
    with pytest.raises(IRError, match="declared but not defined"):
        irc.compile(irc.parse(src))


def test_a_new_process_loads_the_library_from_the_disk_cache_without_building_it(tmp_path):
    """The disk-cache key is the function's name, the host and irc's source hash: a second
    process links the cached machine code and never builds the IR (build raises there)."""
    import os
    import subprocess
    import sys

    name = gl.symbol(FloatType("f32"), SMALL)
    script = f"""
import sys, numpy as np
from irc.passes.lowering import gemm_library as gl
from irc.runtime.cpu import gemm_library as runtime
if sys.argv[1] == "second":
    def refuse(name):
        raise AssertionError("built again")
    gl.build = refuse
print(runtime.address({name!r}) > 0)
"""
    env = {**os.environ, "IRC_CACHE_DIR": str(tmp_path)}
    for which in ("first", "second"):
        out = subprocess.run([sys.executable, "-c", script, which], env=env, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]
    for entry in tmp_path.rglob("*.o"):  # a damaged entry is dropped and rebuilt, not trusted
        entry.write_bytes(entry.read_bytes()[:100])
    out = subprocess.run([sys.executable, "-c", script, "first"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]


def test_the_library_is_kept_in_the_programs_cache_and_nowhere_with_cache_false(tmp_path):
    """A program compiled with ``cache_dir`` keeps the GEMM library it calls there, not in the
    default directory; with ``cache=False`` nothing is written anywhere (a new process each:
    the library is built once per process)."""
    import os
    import subprocess
    import sys

    script = """
import sys, numpy as np, irc
from irc.runtime import cache
from irc.runtime.cpu import engine, gemm_library as runtime
src = '''func.func @mm(%a: tensor<64x48xf32>, %b: tensor<48x40xf32>) -> tensor<64x40xf32> {
  %c = graph.matmul %a, %b : (tensor<64x48xf32>, tensor<48x40xf32>) -> tensor<64x40xf32>
  func.return %c : tensor<64x40xf32>
}'''
options = {"cache": False} if sys.argv[1] == "off" else {"cache_dir": sys.argv[1]}
exe = irc.compile(irc.parse(src), threads=1, **options)
a, b = np.ones((64, 48), np.float32), np.ones((48, 40), np.float32)
assert (exe.mm(a, b) == 48).all()
names = [name for (name, _) in runtime._loaded]
assert len(names) == 1, names
print(cache.load(runtime._key(names[0], *engine.target_cpu()), sys.argv[2]) is not None)
"""
    default, mine = tmp_path / "default", tmp_path / "mine"
    env = {**os.environ, "IRC_CACHE_DIR": str(default)}
    out = subprocess.run([sys.executable, "-c", script, str(mine), str(mine)], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]
    assert not list(default.rglob("*.o"))
    out = subprocess.run([sys.executable, "-c", script, "off", str(default)], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
    assert not list(default.rglob("*.o"))


def test_a_d_of_the_wrong_size_faults_when_added():
    module, exe, name = library("f32")
    a, b, _, _ = operands(7, 9, 11, np.float32, (False, False))
    pa, pb = scratch(SMALL, 7, 9, 11, np.float32)
    c = np.full((7, 9), 5.0, np.float32)
    with pytest.raises(irc.diagnostics.ExecutionError, match="do not agree"):
        exe[name](a, b, c, pa, pb, False, False, np.zeros((7, 8), np.float32), 1.0, True, 0, 9, *no_bias(np.float32))
    exe[name](a, b, c, pa, pb, False, False, np.zeros((1, 1), np.float32), 1.0, False, 0, 9, *no_bias(np.float32))  # not read
    assert within_sum_bound(c, a, b)


EPILOGUES = {  # body of the elementwise op after the matmul -> whether the GEMM computes it in its stores
    "sub_scaled": ("%s = arith.mulf %k, %m : T\n  %r = arith.subf %d, %s : T", True),
    "sub_scaled_right": ("%s = arith.mulf %m, %k : T\n  %r = arith.subf %d, %s : T", True),
    "add_scaled": ("%s = arith.mulf %m, %k : T\n  %r = arith.addf %s, %d : T", True),
    "add": ("%r = arith.addf %d, %m : T", True),
    "sub": ("%r = arith.subf %d, %m : T", True),
    "reversed_sub": ("%r = arith.subf %m, %d : T", False),  # m - d is not d + alpha*m
    "scaled_by_data": ("%s = arith.mulf %m, %d : T\n  %r = arith.subf %d, %s : T", False),
    "also_tanh": ("%s = math.tanh %m : T\n  %r = arith.addf %d, %s : T", False),
}


@pytest.mark.parametrize("case", sorted(EPILOGUES))
def test_an_update_after_a_matmul_is_computed_in_the_gemms_stores(case):
    body, fused = EPILOGUES[case]
    t = "tensor<24x40xf64>"
    src = f"""
func.func @f(%d: {t}, %a: tensor<32x24xf64>, %b: tensor<32x40xf64>) -> {t} {{
  %at = graph.transpose %a {{perm = [1, 0]}} : tensor<32x24xf64> to tensor<24x32xf64>
  %m = graph.matmul %at, %b : (tensor<24x32xf64>, tensor<32x40xf64>) -> {t}
  %c = arith.constant 0.125 : f64
  %k = graph.splat %c : f64 to {t}
  {body.replace("T", t)}
  func.return %r : {t}
}}"""
    module = irc.parse(src)
    exe = irc.compile(module, blas=False)
    lowered, _ = exe.f.lower(((24, 40), (32, 24), (32, 40)))
    loops = [op for op in lowered.walk() if op.name == "scf.for"]
    assert (not loops) == fused, case  # the elementwise loop is gone exactly where it should be
    rng = np.random.default_rng(5)
    d, a, b = rng.standard_normal((24, 40)), rng.standard_normal((32, 24)), rng.standard_normal((32, 40))
    want = irc.interpret(module, "f", d, a, b)
    np.testing.assert_allclose(exe.f(d, a, b), want, rtol=1e-12, atol=1e-12)
    got = exe.f(d, a, b, out=d)  # the update in place, as a donated parameter is
    assert got is d
    np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-12)


def test_no_epilogue_when_the_product_has_another_use_or_d_comes_later():
    t = "tensor<16x16xf32>"
    src = f"""
func.func @two_uses(%d: {t}, %a: {t}, %b: {t}) -> ({t}, {t}) {{
  %m = graph.matmul %a, %b : ({t}, {t}) -> {t}
  %r = arith.subf %d, %m : {t}
  func.return %r, %m : {t}, {t}
}}
func.func @d_after(%a: {t}, %b: {t}) -> {t} {{
  %m = graph.matmul %a, %b : ({t}, {t}) -> {t}
  %d = math.exp %a : {t}
  %r = arith.addf %d, %m : {t}
  func.return %r : {t}
}}"""
    module = irc.parse(src)
    exe = irc.compile(module, blas=False)
    rng = np.random.default_rng(1)
    d, a, b = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(3))
    for got, want in ((exe.two_uses(d, a, b), irc.interpret(module, "two_uses", d, a, b)),
                      ((exe.d_after(a, b),), (irc.interpret(module, "d_after", a, b),))):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_an_epilogue_update_runs_in_place_only_when_no_later_read_needs_d():
    """out= the parameter itself (a donated weight): the GEMM reads each element of D just
    before writing it, so the call needs no copy of D, unless D is read after the GEMM."""
    t, a_t = "tensor<32x24xf64>", "tensor<32x16xf64>"
    src = f"""
func.func @update(%w: {t}, %a: {a_t}, %g: tensor<16x24xf64>) -> {t} {{
  %m = graph.matmul %a, %g : ({a_t}, tensor<16x24xf64>) -> {t}
  %r = arith.subf %w, %m : {t}
  func.return %r : {t}
}}
func.func @read_after(%w: {t}, %a: {a_t}, %g: tensor<16x24xf64>) -> ({t}, tensor<24x24xf64>) {{
  %m = graph.matmul %a, %g : ({a_t}, tensor<16x24xf64>) -> {t}
  %r = arith.subf %w, %m : {t}
  %wt = graph.transpose %w {{perm = [1, 0]}} : {t} to tensor<24x32xf64>
  %later = graph.matmul %wt, %w : (tensor<24x32xf64>, {t}) -> tensor<24x24xf64>
  func.return %r, %later : {t}, tensor<24x24xf64>
}}"""
    module = irc.parse(src)
    exe = irc.compile(module)
    rng = np.random.default_rng(2)
    w, a, g = rng.standard_normal((32, 24)), rng.standard_normal((32, 16)), rng.standard_normal((16, 24))
    want = irc.interpret(module, "update", w, a, g)
    got = exe.update(w, a, g, out=w)
    assert got is w
    np.testing.assert_allclose(w, want, rtol=1e-12, atol=1e-12)
    assert all((0, 0) in spec.in_place for spec in exe.update._specializations.values())  # over w directly
    w = rng.standard_normal((32, 24))
    want = irc.interpret(module, "read_after", w, a, g)
    got = exe.read_after(w, a, g, out=(w, np.empty((24, 24))))
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)
    assert all((0, 0) not in spec.in_place for spec in exe.read_after._specializations.values())  # read after


@pytest.mark.parametrize("kind", ["f32", "f64"])
def test_column_windows_write_only_their_columns_and_together_the_product(kind):
    """The split a multithreaded call makes: windows of whole column panels, each computing its
    columns of C (and of the epilogue) and touching no other column."""
    dtype = np.float32 if kind == "f32" else np.float64
    module, exe, name = library(kind)
    m, n, k = 13, 23, 11
    a, b, a_buf, b_buf = operands(m, n, k, dtype, (False, True))
    d = np.random.default_rng(9).standard_normal((m, n)).astype(dtype)
    for run in (lambda *args: irc.interpret(module, name, *args), exe[name]):
        c = np.full((m, n), np.nan, dtype)
        for lo, hi in ((8, 20), (0, 8), (20, 23)):  # windows of whole 4-column panels, any order
            before = c.copy()
            run(a_buf, b_buf, c, *scratch(SMALL, m, n, k, dtype), False, True, d, 2.0, True, lo, hi, *no_bias(dtype))
            outside = np.ones(n, bool)
            outside[lo:hi] = False
            np.testing.assert_array_equal(c[:, outside], before[:, outside])
        want = d.astype(np.float64) + 2.0 * (a.astype(np.float64) @ b)
        bound = (k + 2) * np.finfo(dtype).eps * (np.abs(d) + 2.0 * (np.abs(a) @ np.abs(b)))
        assert np.all(np.abs(c - want) <= bound)
    with pytest.raises(irc.diagnostics.ExecutionError, match="do not agree"):  # a window past C
        exe[name](a_buf, b_buf, c, *scratch(SMALL, m, n, k, dtype), False, True, d, 1.0, False, 20, 24, *no_bias(dtype))


def test_a_large_product_is_split_across_threads_and_agrees():
    """With threads, a product is one GEMM call per block of column panels in a parallel loop
    that split-parallel runs on threads; each call sums in the same order, so the bits agree."""
    src = """
func.func @mm(%a: tensor<96x300xf32>, %b: tensor<300x200xf32>) -> tensor<96x200xf32> {
  %c = graph.matmul %a, %b : (tensor<96x300xf32>, tensor<300x200xf32>) -> tensor<96x200xf32>
  func.return %c : tensor<96x200xf32>
}"""
    module = irc.parse(src)
    one, two = irc.compile(module, threads=1), irc.compile(module, threads=2)
    lowered, func = two.mm.lower(((96, 300), (300, 200)))
    calls = [op for op in lowered.walk() if op.name == "func.call" and op.callee.startswith("irc_gemm_")]
    assert calls and all("parallel" in op.parent_op.attributes for op in calls)  # one call per part
    assert func.attributes.get("segments") is not None  # split-parallel made it a thread segment
    a, b, _, _ = operands(96, 200, 300, np.float32, (False, False))
    np.testing.assert_array_equal(two.mm(a, b), one.mm(a, b))
    assert within_sum_bound(two.mm(a, b), a, b)
    chunked = [op for op in lowered.walk() if op.name == "func.call" and "chunks" in op.attributes]
    assert [op.attributes["chunks"].value for op in chunked] == [2]  # the product, in two parts


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("m,n,k,ta", [(1, 70, 9, False), (2, 33, 5, True), (1, 1, 1, False), (2, 100, 64, False)])
def test_products_of_one_or_two_rows_stream_b_and_equal_the_library_bit_for_bit(kind, m, n, k, ta):
    """A matrix-vector product (B not transposed) is matmul.py's RowStream, not a library call:
    the same fused steps in k order from zero, so the same bits as the library's kernel where
    K fits in one of its K panels (the library adds panels' sums)."""
    dtype = np.float32 if kind == "f32" else np.float64
    a_shape = f"{k}x{m}" if ta else f"{m}x{k}"
    transpose = (f"%at = graph.transpose %a {{perm = [1, 0]}} : tensor<{a_shape}x{kind}> to tensor<{m}x{k}x{kind}>\n  "
                 if ta else "")
    src = f"""
func.func @mm(%a: tensor<{a_shape}x{kind}>, %b: tensor<{k}x{n}x{kind}>) -> tensor<{m}x{n}x{kind}> {{
  {transpose}%c = graph.matmul {'%at' if ta else '%a'}, %b : (tensor<{m}x{k}x{kind}>, tensor<{k}x{n}x{kind}>) -> tensor<{m}x{n}x{kind}>
  func.return %c : tensor<{m}x{n}x{kind}>
}}"""
    exe = irc.compile(irc.parse(src), blas=False)
    lowered, _ = exe.mm.lower(((k, m) if ta else (m, k), (k, n)))
    assert not any(f.is_declaration for f in lowered.functions)
    a, b, a_buf, b_buf = operands(m, n, k, dtype, (ta, False), seed=m + n + k)
    got = exe.mm(a_buf, b_buf)
    assert within_sum_bound(got, a, b)
    deep = gl.Blocking(mr=3, nr=4, mc=6, kc=128, nc=8)
    name = gl.symbol(FloatType(kind), deep)
    lib = irc.compile(gl.build(name), cache=False)
    want = np.full((m, n), np.nan, dtype)
    lib[name](a_buf, b_buf, want, *scratch(deep, m, n, k, dtype), ta, False, want, 1.0, False, 0, n, *no_bias(dtype))
    np.testing.assert_array_equal(got, want)


def test_a_batch_of_one_row_products_streams_b():
    src = """
func.func @bmm(%a: tensor<3x1x40xf32>, %b: tensor<3x40x50xf32>) -> tensor<3x1x50xf32> {
  %c = graph.batch_matmul %a, %b : (tensor<3x1x40xf32>, tensor<3x40x50xf32>) -> tensor<3x1x50xf32>
  func.return %c : tensor<3x1x50xf32>
}"""
    exe = irc.compile(irc.parse(src))
    lowered, _ = exe.bmm.lower(((3, 1, 40), (3, 40, 50)))
    assert any(op.name == "vector.load" for op in lowered.walk())
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 1, 40)).astype(np.float32), rng.standard_normal((3, 40, 50)).astype(np.float32)
    got = exe.bmm(a, b)
    for i in range(3):
        assert within_sum_bound(got[i], a[i], b[i])


LAYER = """
func.func @layer(%x: tensor<70x300xf32>, %w: tensor<300x200xf32>, %b: tensor<200xf32>) -> tensor<70x200xf32> {
  %zero = arith.constant 0.0 : f32
  %m = graph.matmul %x, %w : (tensor<70x300xf32>, tensor<300x200xf32>) -> tensor<70x200xf32>
  %bb = graph.broadcast %b : tensor<200xf32> to tensor<70x200xf32>
  %s = arith.addf %m, %bb : tensor<70x200xf32>
  %z = graph.splat %zero : f32 to tensor<70x200xf32>
  %h = arith.maximumf %s, %z : tensor<70x200xf32>
  func.return %h : tensor<70x200xf32>
}"""


def _parallel_loops_with_gemm(lowered):
    return [op for op in lowered.walk() if op.name == "scf.for" and "parallel" in op.attributes
            and any(o.name == "func.call" and o.callee.startswith("irc_gemm_") for o in op.walk())]


def test_a_layer_s_bias_and_relu_are_computed_in_the_gemm_s_stores(monkeypatch):
    """relu(x @ w + b): the library adds the bias and takes the ReLU in its last K panel's stores
    (``bias_epilogue``), so no loop reads the product back, on one thread or two (there each part's
    call does its own columns); the bits are those of the product followed by the loop."""
    module = irc.parse(LAYER)
    one, two = irc.compile(module, threads=1, cache=False), irc.compile(module, threads=2, cache=False)
    shapes = ((70, 300), (300, 200), (200,))
    lowered_two, func = two.layer.lower(shapes)
    assert len(_parallel_loops_with_gemm(lowered_two)) == 1 and len(func.attributes["segments"].elements) == 1
    lowered_one, _ = one.layer.lower(shapes)
    for lowered in (lowered_two, lowered_one):
        assert not any(op.name == "arith.maximumf" for op in lowered.walk())  # the ReLU is the library's
    assert not any(op.name == "scf.for" for op in lowered_one.walk())  # one thread: the call alone
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((70, 300), dtype=np.float32), rng.standard_normal((300, 200), dtype=np.float32)
    b = rng.standard_normal(200, dtype=np.float32)
    got = two.layer(x, w, b)
    np.testing.assert_array_equal(got, one.layer(x, w, b))
    monkeypatch.setattr(gl, "bias_epilogue", lambda *args: None)  # the product, then the loop
    apart = irc.compile(module, threads=1, cache=False)
    assert any(op.name == "arith.maximumf" for op in apart.layer.lower(shapes)[0].walk())
    np.testing.assert_array_equal(got, apart.layer(x, w, b))
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    bound = (300 + 2) * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w) + np.abs(b))
    assert np.all(np.abs(got - want) <= bound)


def test_other_elementwise_ops_run_in_the_product_s_thread_parts():
    """With threads, an elementwise op after a split product that is not a bias and ReLU (a
    scale by column here) runs in the same parallel loop, each part on its own columns after
    its GEMM call: one thread start a layer, not two."""
    module = irc.parse(LAYER.replace("%s = arith.addf %m, %bb", "%s = arith.mulf %m, %bb"))
    one, two = irc.compile(module, threads=1), irc.compile(module, threads=2)
    lowered, func = two.layer.lower(((70, 300), (300, 200), (200,)))
    (loop,) = _parallel_loops_with_gemm(lowered)
    assert any(o.name == "arith.maximumf" for o in loop.walk())  # the op is inside the part loop
    assert len(func.attributes["segments"].elements) == 1  # one segment: the layer
    lowered_one, _ = one.layer.lower(((70, 300), (300, 200), (200,)))
    assert not _parallel_loops_with_gemm(lowered_one)  # one thread: one call, then the loop nest
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((70, 300), dtype=np.float32), rng.standard_normal((300, 200), dtype=np.float32)
    b = rng.standard_normal(200, dtype=np.float32)
    got = two.layer(x, w, b)
    np.testing.assert_array_equal(got, one.layer(x, w, b))
    want = np.maximum((x.astype(np.float64) @ w) * b, 0)
    bound = (300 + 2) * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w)) * np.abs(b)
    assert np.all(np.abs(got - want) <= bound)


def test_an_elementwise_op_that_cannot_run_per_part_stays_after_the_product():
    """The sum of two products: the first product's consumer reads the second, made after it,
    so it stays a loop of its own; the second's may run in its parts.  A consumer that reads
    the product transposed is never moved.  Both agree with one thread, bit for bit."""
    src = """
func.func @f(%x: tensor<70x300xf32>, %w: tensor<300x200xf32>, %y: tensor<70x300xf32>, %v: tensor<300x200xf32>,
             %s: f32) -> (tensor<70x200xf32>, tensor<200x70xf32>) {
  %p = graph.matmul %x, %w : (tensor<70x300xf32>, tensor<300x200xf32>) -> tensor<70x200xf32>
  %q = graph.matmul %y, %v : (tensor<70x300xf32>, tensor<300x200xf32>) -> tensor<70x200xf32>
  %ss = graph.splat %s : f32 to tensor<70x200xf32>
  %pq = arith.addf %p, %q : tensor<70x200xf32>
  %r = arith.mulf %pq, %ss : tensor<70x200xf32>
  %t = graph.matmul %x, %v : (tensor<70x300xf32>, tensor<300x200xf32>) -> tensor<70x200xf32>
  %tt = graph.transpose %t {perm = [1, 0]} : tensor<70x200xf32> to tensor<200x70xf32>
  %s2 = graph.splat %s : f32 to tensor<200x70xf32>
  %u = arith.addf %tt, %s2 : tensor<200x70xf32>
  func.return %r, %u : tensor<70x200xf32>, tensor<200x70xf32>
}"""
    module = irc.parse(src)
    one, two = irc.compile(module, threads=1), irc.compile(module, threads=2)
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((70, 300), dtype=np.float32) for _ in range(2))
    w, v = (rng.standard_normal((300, 200), dtype=np.float32) for _ in range(2))
    got, want = two.f(x, w, y, v, np.float32(0.5)), one.f(x, w, y, v, np.float32(0.5))
    for g, o in zip(got, want):
        np.testing.assert_array_equal(g, o)
    ref = (x.astype(np.float64) @ w + y.astype(np.float64) @ v) * 0.5
    bound = 2 * (300 + 2) * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w) + np.abs(y) @ np.abs(v))
    assert np.all(np.abs(got[0] - ref) <= bound)
    np.testing.assert_allclose(got[1], (x.astype(np.float64) @ v).T + 0.5, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kind", ["f32", "f64"])
@pytest.mark.parametrize("m,n,k", [(1, 70, 40), (2, 9, 33), (3, 1, 5), (4, 130, 64), (1, 768, 96), (4, 7, 17)])
def test_products_of_few_rows_with_b_transposed_are_dot_products_of_rows(kind, m, n, k):
    """x @ W^T for up to DOT_ROWS rows (a torch Linear at batch 1): matmul.py's DotRows reads x and
    W's rows in place, no library call (which would pack all of W for those rows); every element
    within the K-term sum's bound of the exact product, as the interpreter's (numpy's) is."""
    from irc.passes.lowering.matmul import DOT_ROWS

    assert m <= DOT_ROWS
    dtype = np.float32 if kind == "f32" else np.float64
    src = f"""
func.func @mm(%a: tensor<{m}x{k}x{kind}>, %w: tensor<{n}x{k}x{kind}>) -> tensor<{m}x{n}x{kind}> {{
  %wt = graph.transpose %w {{perm = [1, 0]}} : tensor<{n}x{k}x{kind}> to tensor<{k}x{n}x{kind}>
  %c = graph.matmul %a, %wt : (tensor<{m}x{k}x{kind}>, tensor<{k}x{n}x{kind}>) -> tensor<{m}x{n}x{kind}>
  func.return %c : tensor<{m}x{n}x{kind}>
}}"""
    module = irc.parse(src)
    exe = irc.compile(module, blas=False)
    lowered, _ = exe.mm.lower(((m, k), (n, k)))
    assert not any(f.is_declaration for f in lowered.functions)  # no library GEMM
    a, b, _, w = operands(m, n, k, dtype, (False, True), seed=m * n + k)
    got = exe.mm(a, w)
    assert within_sum_bound(got, a, b)
    assert within_sum_bound(np.asarray(irc.interpret(module, "mm", a, w)), a, b)
