"""The register-tiled matmul kernel of gpu-map-parallel, without a GPU: the grid simulation in
the interpreter against numpy on shapes that are and are not multiples of the tiles (both
operands possibly transposed), the tile each thread computes, and ptxas's verdict on the PTX
for sm_80 and sm_90 (registers within the launch bounds, no spills)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from irc.passes.gpu_map_parallel import matmul_tiles
from irc.runtime import gpu

import irc
from irc.testing.tensor_programs import matmul_program

PTXAS = shutil.which("ptxas")


def _program(m: int, k: int, n: int, ta: bool = False, tb: bool = False, dtype: str = "f32") -> str:
    """C = A @ B (m x k times k x n) as @f; ``ta``/``tb``: the operand arrives transposed."""
    return matmul_program(m, n, k, ta, tb, dtype, name="f")


def _lower(text: str, options: str = ""):
    """The GPU stages with gpu-map-parallel's matmul options replaced (small tiles keep the
    Python simulation of every thread quick)."""
    pipeline = gpu.gpu_pipeline()
    if options:
        pipeline = pipeline.replace("gpu-map-parallel", f"gpu-map-parallel{{{options}}}")
    module = irc.parse(text)
    irc.passes.run(module, pipeline)
    return module


def _launch_sizes(lowered) -> list[int]:
    launch = next(op for op in lowered.function("f").walk() if op.name == "gpu.launch_func")
    return [v.defining_op.attributes["value"].value for v in launch.sizes]


def _inputs(text: str, seed: int):
    rng = np.random.default_rng(seed)
    func = irc.parse(text).functions[0]
    return [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in func.function_type.inputs]


def _reference(m, k, n, ta, tb, a, b):
    a64 = (a.T if ta else a).astype(np.float64)
    b64 = (b.T if tb else b).astype(np.float64)
    return a64 @ b64


SMALL = "tile=4 thread-tile=4 k-tile=4 min-blocks=0"  # 16 threads per block, up to 16 x 16 outputs per block

# (m, k, n, A transposed, B transposed): multiples of the 16 x 16 x 4 tiles, ragged in each
# size and in all of them, k below one step, one row, one column, transposed operands.
SHAPES = [
    (32, 16, 32, False, False),
    (33, 16, 32, False, False),
    (32, 17, 32, False, False),
    (32, 16, 31, False, False),
    (37, 21, 45, False, False),
    (20, 3, 19, False, False),
    (1, 9, 40, False, False),
    (40, 9, 1, False, False),
    (37, 21, 45, True, False),
    (37, 21, 45, False, True),
    (30, 12, 18, True, True),
]


@pytest.mark.parametrize("m,k,n,ta,tb", SHAPES)
def test_register_tiled_matmul_against_numpy(m, k, n, ta, tb):
    text = _program(m, k, n, ta, tb)
    lowered = _lower(text, SMALL)
    a, b = _inputs(text, seed=m * 7 + k * 3 + n)
    got = irc.interpret(lowered, "f", a, b)
    np.testing.assert_allclose(got, _reference(m, k, n, ta, tb, a, b), rtol=1e-5, atol=1e-5)
    if min(m, n) == 1:
        return  # a matrix-vector product: tensor-to-loops gives it a plain loop, not a matmul nest
    tm, tn, _ = matmul_tiles(m, n, 4, 4, 4)
    assert _launch_sizes(lowered) == [-(-n // (4 * tn)), -(-m // (4 * tm)), 1, 4, 4, 1]


def test_default_tiles_each_thread_computes_a_block_of_c():
    """The default tiles (16 x 16 threads, up to 8 x 8 outputs each, k-tile 8; min-blocks off)
    on a ragged shape small enough to simulate: 4 x 4 outputs per thread here (40 rows on 16
    threads)."""
    m, k, n = 40, 13, 36
    text = _program(m, k, n, tb=True)
    lowered = _lower(text, "min-blocks=0")
    a, b = _inputs(text, seed=11)
    np.testing.assert_allclose(irc.interpret(lowered, "f", a, b), _reference(m, k, n, False, True, a, b),
                               rtol=1e-5, atol=1e-5)
    assert _launch_sizes(lowered) == [1, 1, 1, 16, 16, 1]
    kernel = next(op for mod in lowered.body.ops if mod.name == "gpu.module" for op in mod.body.ops
                  if op.name == "gpu.func")
    assert sum(op.name == "math.fma" for op in kernel.walk()) == 4 * 4 * 8  # the unrolled k-tile of one step
    assert [v.value for v in kernel.attributes["known_block_size"].elements] == [16, 16, 1]


def test_default_tiles_with_eight_rows_per_thread():
    """Eight rows per thread (two runs of four, 64 apart) over a ragged 130 rows: two blocks of
    128 rows, the second mostly past the edge."""
    m, k, n = 130, 9, 20
    text = _program(m, k, n, ta=True)
    lowered = _lower(text, "min-blocks=0")
    assert matmul_tiles(m, n, 16, 8, 8) == (8, 2, 8)
    assert _launch_sizes(lowered) == [1, 2, 1, 16, 16, 1]
    a, b = _inputs(text, seed=13)
    np.testing.assert_allclose(irc.interpret(lowered, "f", a, b), _reference(m, k, n, True, False, a, b),
                               rtol=1e-5, atol=1e-5)


def test_tiles_shrink_for_a_small_c_and_grow_to_the_option():
    assert matmul_tiles(4096, 4096, 16, 8, 8) == (8, 8, 8)
    assert matmul_tiles(20, 17, 16, 8, 8) == (2, 2, 8)
    assert matmul_tiles(16, 4096, 16, 8, 8) == (1, 8, 16)  # a 16-row tile is staged 16 deep
    assert matmul_tiles(16, 16, 16, 8, 8) == (1, 1, 16)  # 16 x 16 tiles: every thread stages one element
    # Enough blocks for a device's multiprocessors: 1024² gets 64 x 128 tiles (128 blocks), not 64 of 128².
    assert matmul_tiles(4096, 4096, 16, 8, 8, 128) == (8, 8, 8)
    assert matmul_tiles(1024, 1024, 16, 8, 8, 128) == (4, 8, 8)
    assert matmul_tiles(512, 512, 16, 8, 8, 128) == (2, 4, 8)
    assert matmul_tiles(256, 128, 16, 8, 8, 128) == (1, 1, 16)  # 128 blocks of 16 x 16 at most


def test_a_small_matmul_gets_more_blocks():
    m, k, n = 64, 5, 48
    text = _program(m, k, n)
    lowered = gpu.lower(irc.parse(text))
    assert _launch_sizes(lowered) == [3, 4, 1, 16, 16, 1]  # one output per thread: 12 blocks, not 1
    a, b = _inputs(text, seed=14)
    np.testing.assert_allclose(irc.interpret(lowered, "f", a, b), _reference(m, k, n, False, False, a, b),
                               rtol=1e-5, atol=1e-5)


def test_integer_matmul_multiplies_and_adds():
    m, k, n = 9, 7, 10
    text = _program(m, k, n, dtype="i32")
    lowered = _lower(text, SMALL)
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (m, k)).astype(np.int32)
    b = rng.integers(-50, 50, (k, n)).astype(np.int32)
    np.testing.assert_array_equal(irc.interpret(lowered, "f", a, b), a @ b)
    kinds = {op.name for mod in lowered.body.ops if mod.name == "gpu.module" for op in mod.walk()}
    assert "arith.muli" in kinds and "math.fma" not in kinds


def test_thread_tile_one_is_the_one_element_kernel():
    m, k, n = 19, 23, 21
    text = _program(m, k, n)
    lowered = _lower(text, "thread-tile=1")
    a, b = _inputs(text, seed=5)
    np.testing.assert_allclose(irc.interpret(lowered, "f", a, b), _reference(m, k, n, False, False, a, b),
                               rtol=1e-5, atol=1e-5)
    assert _launch_sizes(lowered) == [2, 2, 1, 16, 16, 1]


def test_bad_tile_options_are_diagnostics():
    with pytest.raises(irc.diagnostics.IRError, match="thread-tile"):
        _lower(_program(8, 8, 8), "thread-tile=0")


def _ptxas(tmp_path, ptx: str, sm: int) -> str:
    path = tmp_path / f"k{sm}.ptx"
    path.write_text(ptx)
    r = subprocess.run([PTXAS, "-v", "--gpu-name", f"sm_{sm}", str(path), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stderr


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on the PATH")
@pytest.mark.parametrize("m,k,n,ta,tb", [(4096, 4096, 4096, False, False), (1000, 999, 1001, True, False)])
def test_large_matmul_ptx_fits_the_launch_bounds(tmp_path, m, k, n, ta, tb):
    """The kernel the benchmark's 4096^3 matmul gets (and a ragged one): ptxas accepts it for
    sm_80 and sm_90 within 128 registers (two blocks of 256 threads per multiprocessor) without
    spills; the k loop is 512 fmas and 32 shared loads of 16 bytes."""
    lowered = gpu.lower(irc.parse(_program(m, k, n, ta, tb)))
    tm, tn, _ = matmul_tiles(m, n, 16, 8, 8, 128)
    assert (tm, tn) == ((8, 8) if m == 4096 else (4, 8))  # 1000²: 128 blocks of 64 x 128
    assert _launch_sizes(lowered) == [-(-n // (16 * tn)), -(-m // (16 * tm)), 1, 16, 16, 1]
    for sm in (80, 90):
        ptx = gpu.render_ptx(lowered, sm)
        assert ".maxntid 16, 16, 1" in ptx and ".minnctapersm 2" in ptx
        report = _ptxas(tmp_path, ptx, sm)
        registers = int(re.search(r"Used (\d+) registers", report).group(1))
        assert registers <= 128, report
        assert "0 bytes spill stores, 0 bytes spill loads" in report, report
        if (m, k, n) == (4096, 4096, 4096):
            loop = max(re.split(r"\n\$L__BB", ptx), key=lambda block: block.count("fma.rn.f32"))
            assert loop.count("fma.rn.f32") == 512
            assert loop.count("ld.shared.v4") == 32 and loop.count("ld.shared") == 32  # 16 bytes each
            assert loop.count("bar.sync") == 1 and loop.count("ld.global") == 8  # double buffered
