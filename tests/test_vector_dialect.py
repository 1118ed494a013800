"""The vector dialect: 1-D vectors, vector.load/store/broadcast/from_elements/shuffle, float ops lane by lane.

Every program runs on the interpreter (the oracle) and compiled, bit for bit, against a numpy
reference; the text is MLIR's own (mlir-opt-22 reads what irc prints, where installed).
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import irc
from irc import IRError
from irc.diagnostics import ExecutionError

MLIR_OPT = shutil.which("mlir-opt-22")

KERNELS = """
func.func @axpy(%arg0: f32, %arg1: memref<2x32xf32>, %arg2: memref<2x32xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %0 = vector.broadcast %arg0 : f32 to vector<16xf32>
  %1 = vector.load %arg1[%c0, %c16] : memref<2x32xf32>, vector<16xf32>
  %2 = vector.load %arg2[%c0, %c16] : memref<2x32xf32>, vector<16xf32>
  %3 = math.fma %0, %1, %2 : vector<16xf32>
  %4 = arith.mulf %3, %1 : vector<16xf32>
  %5 = arith.subf %4, %2 : vector<16xf32>
  %6 = arith.addf %5, %0 : vector<16xf32>
  vector.store %6, %arg2[%c0, %c0] : memref<2x32xf32>, vector<16xf32>
  return
}
func.func @gather(%arg0: f64, %arg1: f64, %arg2: memref<?xf64>, %arg3: index) {
  %0 = vector.from_elements %arg0, %arg1, %arg0, %arg1 : vector<4xf64>
  vector.store %0, %arg2[%arg3] : memref<?xf64>, vector<4xf64>
  return
}
func.func @column_sums(%arg0: memref<8x16xf32>, %arg1: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %cst = arith.constant 0.000000e+00 : f32
  %0 = vector.broadcast %cst : f32 to vector<16xf32>
  %1 = scf.for %arg2 = %c0 to %c8 step %c1 iter_args(%arg3 = %0) -> (vector<16xf32>) {
    %2 = vector.load %arg0[%arg2, %c0] : memref<8x16xf32>, vector<16xf32>
    %3 = arith.addf %arg3, %2 : vector<16xf32>
    scf.yield %3 : vector<16xf32>
  }
  vector.store %1, %arg1[%c0] : memref<16xf32>, vector<16xf32>
  return
}
func.func @transpose4(%arg0: memref<4x4xi32>, %arg1: memref<4x4xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %0 = vector.load %arg0[%c0, %c0] : memref<4x4xi32>, vector<4xi32>
  %1 = vector.load %arg0[%c1, %c0] : memref<4x4xi32>, vector<4xi32>
  %2 = vector.load %arg0[%c2, %c0] : memref<4x4xi32>, vector<4xi32>
  %3 = vector.load %arg0[%c3, %c0] : memref<4x4xi32>, vector<4xi32>
  %4 = vector.shuffle %0, %1 [0, 4, 1, 5] : vector<4xi32>, vector<4xi32>
  %5 = vector.shuffle %0, %1 [2, 6, 3, 7] : vector<4xi32>, vector<4xi32>
  %6 = vector.shuffle %2, %3 [0, 4, 1, 5] : vector<4xi32>, vector<4xi32>
  %7 = vector.shuffle %2, %3 [2, 6, 3, 7] : vector<4xi32>, vector<4xi32>
  %8 = vector.shuffle %4, %6 [0, 1, 4, 5] : vector<4xi32>, vector<4xi32>
  %9 = vector.shuffle %4, %6 [2, 3, 6, 7] : vector<4xi32>, vector<4xi32>
  %10 = vector.shuffle %5, %7 [0, 1, 4, 5] : vector<4xi32>, vector<4xi32>
  %11 = vector.shuffle %5, %7 [2, 3, 6, 7] : vector<4xi32>, vector<4xi32>
  vector.store %8, %arg1[%c0, %c0] : memref<4x4xi32>, vector<4xi32>
  vector.store %9, %arg1[%c1, %c0] : memref<4x4xi32>, vector<4xi32>
  vector.store %10, %arg1[%c2, %c0] : memref<4x4xi32>, vector<4xi32>
  vector.store %11, %arg1[%c3, %c0] : memref<4x4xi32>, vector<4xi32>
  return
}
func.func @pick(%arg0: memref<8xf64>, %arg1: memref<3xf64>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %0 = vector.load %arg0[%c0] : memref<8xf64>, vector<4xf64>
  %1 = vector.load %arg0[%c4] : memref<8xf64>, vector<4xf64>
  %2 = vector.shuffle %0, %1 [7, 0, 7] {note = "any lane, any number of times"} : vector<4xf64>, vector<4xf64>
  vector.store %2, %arg1[%c0] : memref<3xf64>, vector<3xf64>
  return
}
"""


@pytest.fixture(scope="module")
def module():
    m = irc.parse(KERNELS, "kernels.mlir")
    m.verify()
    return m


@pytest.fixture(scope="module")
def compiled(module):
    return irc.compile(module)


def _both(module, compiled, name, *args):
    """Run ``name`` on the interpreter and compiled, each on its own copies of the arrays."""
    runs = []
    for run in (lambda *a: irc.interpret(module, name, *a), compiled[name]):
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        run(*copies)
        runs.append(copies)
    return runs


def test_lane_arithmetic_matches_numpy_bit_for_bit(module, compiled):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    y = rng.standard_normal((2, 32)).astype(np.float32)
    a = np.float32(1.5)
    want = y.copy()
    xs, ys = x[0, 16:], y[0, 16:]
    fma = (np.float64(a) * xs.astype(np.float64) + ys).astype(np.float32)  # exact product in f64, one rounding
    want[0, :16] = ((fma * xs) - ys) + a
    for _, _, got in _both(module, compiled, "axpy", a, x, y):
        np.testing.assert_array_equal(got, want)


def test_from_elements_and_a_loop_carried_vector(module, compiled):
    for *_, out, _ in _both(module, compiled, "gather", 1.25, -2.5, np.zeros(6), 2):
        np.testing.assert_array_equal(out, [0, 0, 1.25, -2.5, 1.25, -2.5])
    m = np.arange(128, dtype=np.float32).reshape(8, 16) / 7
    want = np.zeros(16, np.float32)
    for row in m:  # in row order, one rounding a step, as the loop adds
        want = want + row
    for _, sums in _both(module, compiled, "column_sums", m, np.zeros(16, np.float32)):
        np.testing.assert_array_equal(sums, want)


def test_shuffles_transpose_and_pick_lanes(module, compiled):
    m = np.arange(16, dtype=np.int32).reshape(4, 4) * 3 - 7
    for _, out in _both(module, compiled, "transpose4", m, np.zeros((4, 4), np.int32)):
        np.testing.assert_array_equal(out, m.T)
    x = np.linspace(-1, 1, 8)
    for _, out in _both(module, compiled, "pick", x, np.zeros(3)):
        np.testing.assert_array_equal(out, [x[7], x[0], x[7]])


def test_a_vector_past_the_end_of_its_row_faults_in_both_engines(module):
    checked = irc.compile(module, bounds_checks=True)
    for run in (lambda *a: irc.interpret(module, "gather", *a), checked.gather):
        with pytest.raises(ExecutionError, match="runs past the end of a row") as info:
            run(1.0, 2.0, np.zeros(6), 3)
        assert "kernels.mlir:" in str(info.value)


def test_printed_text_reads_back_the_same(module):
    text = str(module)
    assert irc.parse(text).__str__() == text
    assert irc.print_mlir(irc.parse(text)) == irc.print_mlir(module)


@pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-22 is not installed")
def test_mlir_opt_reads_what_irc_prints_and_prints_it_back(module):
    emitted = irc.print_mlir(module)
    once = subprocess.run([MLIR_OPT, "-"], input=emitted, capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stderr
    back = irc.parse(once.stdout)
    back.verify()
    again = subprocess.run([MLIR_OPT, "-"], input=irc.print_mlir(back), capture_output=True, text=True, timeout=60)
    assert again.stdout == once.stdout


def _error(text: str) -> str:
    with pytest.raises(IRError) as info:
        irc.parse(text, "t.mlir").verify()
    return str(info.value)


@pytest.mark.parametrize("body,words", [
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf64>", "does not have the element type"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4x4xf32>", "one fixed size"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<[4]xf32>", "scalable vectors are not supported"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf32>\n  %w = arith.divf %v, %v : vector<4xf32>",
     "operands must be floating point values"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf32>\n  %w = math.exp %v : vector<4xf32>",
     "operands must be floating point values"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf32>\n  %w = vector.reduction <add>, %v : vector<4xf32> into f32",
     "of MLIR's vector dialect irc has vector.load"),
    ("%v = vector.from_elements %i, %i : vector<3xindex>", "needs 3 operands"),
    ("%v = vector.broadcast %i : index to vector<4xf32>", "does not have the operand's type"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf32>\n  %w = vector.shuffle %v, %v [0, 8] : "
     "vector<4xf32>, vector<4xf32>", "mask lane 8 is not a lane of two vector<4xf32> (0 to 7)"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf32>\n  %w = vector.shuffle %v, %v [] : "
     "vector<4xf32>, vector<4xf32>", "needs at least one lane"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf32>\n  %u = vector.load %m[%i] : memref<8xf32>, "
     "vector<2xf32>\n  %w = vector.shuffle %v, %u [0, 1] : vector<4xf32>, vector<2xf32>",
     "shuffles two vectors of one type"),
    ("%v = vector.load %m[%i] : memref<8xf32>, vector<4xf32>\n  %w = vector.shuffle %v, %v [0] "
     "{mask = array<i64: 1>} : vector<4xf32>, vector<4xf32>", "takes its mask in brackets"),
    ("%w = vector.shuffle %i, %i [0] : index, index", "shuffles vectors"),
])
def test_bad_vector_code_is_a_diagnostic_at_the_op(body, words):
    message = _error(f"func.func @f(%m: memref<8xf32>, %i: index) {{\n  {body}\n  return\n}}\n")
    assert words in message
    assert message.startswith("t.mlir:")


def test_the_gemm_library_kernel_is_vector_code():
    """The library GEMM's micro-kernel says "one vector FMA per row of the tile" itself (LLVM's
    SLP vectoriser rebuilding it from scalars was most of the library's compile time)."""
    from irc.passes.lowering import gemm_library

    module = gemm_library.build("irc_gemm_f32_8x32_96x512x8192")
    kernels = {f.sym_name.rsplit(".", 1)[1]: str(f) for f in module.functions if "." in f.sym_name}
    assert sorted(kernels) == ["columns", "dot", "in_place16", "in_place32", "packed16", "packed32", "rows"]
    # A row of a kernel: one a k step in its loops, one for alpha * sum + base in each of its two
    # epilogues (with and without the bias and ReLU); kernels of 32 lanes and of 16 for narrow edge
    # panels, each for A packed (UNROLL steps a trip, then one a trip) and for A read in place (one
    # a trip): the scalar kernel had 512.
    packed, in_place = (gemm_library.UNROLL + 1 + 2) * 8, (1 + 2) * 8
    for name, text in kernels.items():
        lanes = {"dot": 16, "columns": 16, "rows": 32}.get(name) or int(name.removeprefix("packed").removeprefix("in_place"))
        assert "math.fma" in text and f": vector<{lanes}xf32>" in text, name
        if name not in ("dot", "columns", "rows"):
            assert text.count("math.fma") == (packed if name.startswith("packed") else in_place), name
    # the narrow products' forms: a 4 x 5 block of vectors a step (dot: B^T read in place, and
    # packed), 2 x 10 (columns)
    for name, blocks in (("dot", 2), ("columns", 1)):
        lines = kernels[name].splitlines()
        assert sum("math.fma" in line and ": vector<16xf32>" in line for line in lines) == 20 * blocks, name


def _random_vector_program(seed: int) -> tuple[str, str, int, int]:
    """A function over a rows x cols buffer: a chain of vector ops on random in-bounds windows,
    broadcasts of boundary values (NaN, infinities, -0) and gathered scalars among them."""
    import random

    rng = random.Random(seed)
    elem = rng.choice(["f32", "f64"])
    rows, cols = rng.randint(1, 3), rng.randint(1, 40)
    t = f"memref<{rows}x{cols}x{elem}>"
    lines, n = [], 0

    def fresh():
        nonlocal n
        n += 1
        return f"%v{n}"

    def index(k):
        name = fresh()
        lines.append(f"{name} = arith.constant {k} : index")
        return name

    specials = ["0.0", "-0.0", "1.0", "-1.5", "0x7FC00000" if elem == "f32" else "0x7FF8000000000000",
                "0x7F800000" if elem == "f32" else "0x7FF0000000000000", "3.0e+38" if elem == "f32" else "1.0e+308"]
    for _ in range(rng.randint(1, 6)):
        size = rng.randint(1, cols)
        at = [index(rng.randrange(rows)), index(rng.randint(0, cols - size))]
        vt = f"vector<{size}x{elem}>"
        x = fresh()
        lines.append(f"{x} = vector.load %m[{', '.join(at)}] : {t}, {vt}")
        scalars = []
        for _ in range(size if rng.random() < 0.3 else 1):
            c = fresh()
            lines.append(f"{c} = arith.constant {rng.choice(specials)} : {elem}")
            scalars.append(c)
        y = fresh()
        if len(scalars) == size and size > 1:
            lines.append(f"{y} = vector.from_elements {', '.join(scalars)} : {vt}")
        else:
            lines.append(f"{y} = vector.broadcast {scalars[0]} : {elem} to {vt}")
        if rng.random() < 0.4:  # lanes of both, in any order, any number of times
            z = fresh()
            mask = ", ".join(str(rng.randrange(2 * size)) for _ in range(size))
            lines.append(f"{z} = vector.shuffle {x}, {y} [{mask}] : {vt}, {vt}")
            y = z
        r = fresh()
        op = rng.choice(["addf", "subf", "mulf", "fma", "select"])
        if op == "fma":
            lines.append(f"{r} = math.fma {x}, {y}, {x} : {vt}")
        elif op == "select":
            lines.append(f"{r} = arith.select %flag, {x}, {y} : {vt}")
        else:
            lines.append(f"{r} = arith.{op} {x}, {y} : {vt}")
        lines.append(f"vector.store {r}, %m[{', '.join(at)}] : {t}, {vt}")
    body = "\n  ".join(lines)
    return f"func.func @f(%m: {t}, %flag: i1) {{\n  {body}\n  func.return\n}}\n", elem, rows, cols


@pytest.mark.parametrize("seed", range(40))
def test_random_vector_code_computes_the_interpreters_bits(seed):
    text, elem, rows, cols = _random_vector_program(seed)
    module = irc.parse(text, f"random{seed}.ir")
    module.verify()
    exe = irc.compile(module, cache=False)
    dtype = np.float32 if elem == "f32" else np.float64
    start = np.random.default_rng(seed).standard_normal((rows, cols)).astype(dtype)
    for flag in (False, True):
        interpreted, compiled = start.copy(), start.copy()
        irc.interpret(module, "f", interpreted, flag)
        exe.f(compiled, flag)
        # Every bit but a NaN's payload and sign (which operand's NaN propagates is LLVM's choice,
        # as for scalars: irc.testing.oracle makes every NaN one value).
        canonical = [np.where(np.isnan(x), np.nan, x).astype(dtype).tobytes() for x in (interpreted, compiled)]
        assert canonical[0] == canonical[1], text
