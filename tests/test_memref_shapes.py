"""memref.collapse_shape, memref.expand_shape, memref.memory_space_cast and memref.realloc
(issue 15): the interpreter against numpy, compiled code against the interpreter, MLIR's
spelling through mlir-opt-22 (when installed), and the verifier's diagnostics with their
line and column.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import irc
from irc import IRError
from irc.diagnostics import ExecutionError

HERE = Path(__file__).parent
MLIR_OPT = shutil.which("mlir-opt-22")

PROGRAM = """
func.func @collapse_read(%m: memref<4x5x6xf32>, %i: index, %j: index) -> f32 {
  %c = memref.collapse_shape %m [[0, 1], [2]] : memref<4x5x6xf32> into memref<20x6xf32>
  %x = memref.load %c[%i, %j] : memref<20x6xf32>
  func.return %x : f32
}

func.func @expand_write(%m: memref<?xf32>, %rows: index, %i: index, %j: index, %v: f32) -> index {
  %e = memref.expand_shape %m [[0, 1]] output_shape [%rows, 3] : memref<?xf32> into memref<?x3xf32>
  memref.store %v, %e[%i, %j] : memref<?x3xf32>
  %c0 = arith.constant 0 : index
  %d = memref.dim %e, %c0 : memref<?x3xf32>
  func.return %d : index
}

func.func @split_both(%m: memref<?xi64>, %a: index, %b: index, %i: index, %j: index) -> i64 {
  %e = memref.expand_shape %m [[0, 1]] output_shape [%a, %b] : memref<?xi64> into memref<?x?xi64>
  %x = memref.load %e[%i, %j] : memref<?x?xi64>
  func.return %x : i64
}

func.func @collapse_dynamic(%m: memref<?x?x2xi64>, %k: index) -> i64 {
  %c = memref.collapse_shape %m [[0, 1, 2]] : memref<?x?x2xi64> into memref<?xi64>
  %x = memref.load %c[%k] : memref<?xi64>
  func.return %x : i64
}

func.func @scalar(%m: memref<1x1xf64>) -> f64 {
  %c = memref.collapse_shape %m [] : memref<1x1xf64> into memref<f64>
  %e = memref.expand_shape %c [] output_shape [1, 1, 1] : memref<f64> into memref<1x1x1xf64>
  %c0 = arith.constant 0 : index
  %x = memref.load %e[%c0, %c0, %c0] : memref<1x1x1xf64>
  %y = arith.addf %x, %x : f64
  memref.store %y, %c[] : memref<f64>
  func.return %y : f64
}

func.func @view_of_freed(%n: index) -> index {
  %a = memref.alloc(%n) : memref<?xf32>
  memref.dealloc %a : memref<?xf32>
  %e = memref.expand_shape %a [[0, 1]] output_shape [1, %n] : memref<?xf32> into memref<1x?xf32>
  func.return %n : index
}

func.func @dealloc_a_reshape(%n: index) -> index {
  %a = memref.alloc(%n) : memref<?xf32>
  %e = memref.expand_shape %a [[0, 1]] output_shape [1, %n] : memref<?xf32> into memref<1x?xf32>
  memref.dealloc %e : memref<1x?xf32>
  func.return %n : index
}

func.func @space_round_trip(%m: memref<4xf32>, %i: index) -> f32 {
  %g = memref.memory_space_cast %m : memref<4xf32> to memref<4xf32, gpu>
  %h = memref.memory_space_cast %g : memref<4xf32, gpu> to memref<4xf32>
  %x = memref.load %h[%i] : memref<4xf32>
  func.return %x : f32
}

func.func @regrow(%n: index, %k: index) -> f32 {
  %a = memref.alloc(%n) : memref<?xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %last = scf.for %i = %c0 to %n step %c1 iter_args(%v = %zero) -> (f32) {
    %w = arith.addf %v, %one : f32
    memref.store %w, %a[%i] : memref<?xf32>
    scf.yield %w : f32
  }
  %b = memref.realloc %a(%k) : memref<?xf32> to memref<?xf32>
  %s = scf.for %i = %c0 to %k step %c1 iter_args(%acc = %zero) -> (f32) {
    %x = memref.load %b[%i] : memref<?xf32>
    %i64 = arith.index_cast %i : index to i64
    %f = arith.sitofp %i64 : i64 to f32
    %y = arith.mulf %x, %f : f32
    %acc1 = arith.addf %acc, %y : f32
    scf.yield %acc1 : f32
  }
  memref.dealloc %b : memref<?xf32>
  func.return %s : f32
}

func.func @static_realloc() -> f32 {
  %a = memref.alloc() : memref<2xf32>
  %c1 = arith.constant 1 : index
  %x = arith.constant 2.5 : f32
  memref.store %x, %a[%c1] : memref<2xf32>
  %b = memref.realloc %a : memref<2xf32> to memref<4xf32>
  %y = memref.load %b[%c1] : memref<4xf32>
  %c3 = arith.constant 3 : index
  %z = memref.load %b[%c3] : memref<4xf32>
  %r = arith.addf %y, %z : f32
  func.return %r : f32
}

func.func @old_after_realloc(%n: index) -> f32 {
  %a = memref.alloc(%n) : memref<?xf32>
  %b = memref.realloc %a(%n) : memref<?xf32> to memref<?xf32>
  %c0 = arith.constant 0 : index
  %x = memref.load %a[%c0] : memref<?xf32>
  func.return %x : f32
}

func.func @dealloc_old_after_realloc(%n: index) -> index {
  %a = memref.alloc(%n) : memref<?xf32>
  %b = memref.realloc %a(%n) : memref<?xf32> to memref<?xf32>
  memref.dealloc %a : memref<?xf32>
  func.return %n : index
}

func.func @realloc_an_alloca() -> index {
  %a = memref.alloca() : memref<2xf32>
  %b = memref.realloc %a : memref<2xf32> to memref<4xf32>
  %c0 = arith.constant 0 : index
  func.return %c0 : index
}
"""


def _module():
    m = irc.parse(PROGRAM, "shapes.ir")
    m.verify()
    return m


def _engines():
    m = _module()
    yield "interpreter", lambda name, *args: irc.interpret(m, name, *args)
    if importlib.util.find_spec("llvmlite") is not None:
        exe = irc.compile(m, bounds_checks=True)
        yield "compiled", lambda name, *args: getattr(exe, name)(*args)


ENGINES = ["interpreter", "compiled"]


@pytest.fixture(params=ENGINES)
def run(request):
    engines = dict(_engines())
    if request.param not in engines:
        pytest.skip("llvmlite is not installed")
    return engines[request.param]


def test_collapse_reads_the_same_elements_as_numpy(run):
    m = np.random.default_rng(0).standard_normal((4, 5, 6)).astype(np.float32)
    flat = m.reshape(20, 6)
    for i, j in [(0, 0), (7, 3), (19, 5)]:
        assert run("collapse_read", m, i, j) == flat[i, j]
    with pytest.raises(ExecutionError, match="out of bounds"):
        run("collapse_read", m, 20, 0)


def test_expand_is_a_view_that_writes_to_the_source(run):
    m = np.zeros(12, np.float32)
    assert run("expand_write", m, 4, 2, 1, 7.0) == 4
    expected = np.zeros((4, 3), np.float32)
    expected[2, 1] = 7.0
    assert np.array_equal(m, expected.reshape(-1))


@pytest.mark.parametrize("rows", [3, 5, -4, 0])
def test_expand_sizes_that_do_not_match_are_a_fault(run, rows):
    with pytest.raises(ExecutionError, match=r"memref.expand_shape to memref<\?x3xf32>: the output shape does not"):
        run("expand_write", np.zeros(12, np.float32), rows, 0, 0, 1.0)


def test_expand_with_two_dynamic_sizes(run):
    m = np.arange(12, dtype=np.int64)
    for a, b in [(3, 4), (6, 2), (12, 1)]:
        assert run("split_both", m, a, b, a - 1, b - 1) == m.reshape(a, b)[a - 1, b - 1]
    with pytest.raises(ExecutionError, match="output shape does not match"):
        run("split_both", m, 5, 2, 0, 0)
    # a product that wraps 64 bits is no match: 2^32 * 2^32 is not 0
    with pytest.raises(ExecutionError, match="output shape does not match"):
        run("split_both", np.zeros(0, np.int64), 1 << 32, 1 << 32, 0, 0)
    with pytest.raises(ExecutionError, match="out of bounds"):
        run("split_both", np.zeros(0, np.int64), 0, 1 << 40, 0, 0)  # a size of 0 matches an empty source


def test_collapse_of_dynamic_sizes_multiplies_them(run):
    m = np.arange(30, dtype=np.int64).reshape(3, 5, 2)
    for k in (0, 17, 29):
        assert run("collapse_dynamic", m, k) == m.reshape(-1)[k]
    with pytest.raises(ExecutionError, match="out of bounds"):
        run("collapse_dynamic", m, 30)


def test_rank_zero_reshapes(run):
    m = np.array([[1.25]])
    assert run("scalar", m) == 2.5 and m[0, 0] == 2.5


def test_a_reshape_is_a_view(run):
    with pytest.raises(ExecutionError, match="view of a freed buffer"):
        run("view_of_freed", 3)
    with pytest.raises(ExecutionError, match="memref.dealloc of a buffer that memref.alloc did not allocate"):
        run("dealloc_a_reshape", 3)


def test_memory_space_cast_is_the_same_buffer(run):
    m = np.array([1.5, -2.0, 3.0, 4.0], np.float32)
    assert [run("space_round_trip", m, i) for i in range(4)] == list(m)


@pytest.mark.parametrize("n, k", [(3, 5), (5, 3), (4, 4), (0, 2), (2, 0)])
def test_realloc_keeps_the_contents_and_zeroes_the_rest(run, n, k):
    old = np.arange(1, n + 1, dtype=np.float32)
    new = np.zeros(k, np.float32)
    new[:min(n, k)] = old[:min(n, k)]
    assert run("regrow", n, k) == pytest.approx(float(new @ np.arange(k, dtype=np.float32)))
    assert run("static_realloc") == 2.5


def test_realloc_frees_the_old_buffer(run):
    with pytest.raises(ExecutionError, match="access to a freed buffer"):
        run("old_after_realloc", 4)
    with pytest.raises(ExecutionError, match="buffer freed twice"):
        run("dealloc_old_after_realloc", 4)
    with pytest.raises(ExecutionError, match="memref.realloc of a buffer that memref.alloc did not allocate"):
        run("realloc_an_alloca")
    with pytest.raises(ExecutionError, match="negative buffer size"):
        run("regrow", 2, -1)


def test_the_faults_are_at_the_op():
    m = _module()
    with pytest.raises(ExecutionError) as e:
        irc.interpret(m, "expand_write", np.zeros(12, np.float32), 5, 0, 0, 1.0)
    line = 1 + next(i for i, text in enumerate(PROGRAM.splitlines()) if "output_shape [%rows, 3]" in text)
    assert (e.value.location.line, e.value.location.column) == (line, 8)


def test_print_parse_fixpoint_and_generic_form():
    m = _module()
    text = m.print()
    assert irc.parse(text).print() == text
    assert irc.parse(m.print(generic=True)).print() == text


@pytest.mark.parametrize("body, message, column", [
    ("%r = memref.collapse_shape %m [[0], [1, 2]] : memref<4x5x6xf32> into memref<20x6xf32>",
     r"dimension 0 of memref<20x6xf32> must be 4", 8),
    ("%r = memref.collapse_shape %m [[0, 2], [1]] : memref<4x5x6xf32> into memref<24x5xf32>",
     "non-empty groups of consecutive dimensions", 8),
    ("%r = memref.collapse_shape %m [[0, 1]] : memref<4x5x6xf32> into memref<20x6xf32>",
     "needs 2 reassociation group", 8),
    ("%r = memref.collapse_shape %m [[0, 1], [2]] : memref<4x5x6xf32> into memref<20x6xf64>",
     "one element type", 8),
    ("%r = memref.collapse_shape %m [[0, 1], [2]] : memref<4x5x6xf32> into memref<?x6xf32>",
     "must be 20", 8),
    ("%r = memref.expand_shape %m [[0, 1], [2]] output_shape [4, 5, 6] : memref<4x5x6xf32> into memref<4x5x6xf32>",
     "fewer dimensions|needs 3 reassociation", 8),
    ("%r = memref.expand_shape %m [[0], [1], [2, 3]] output_shape [4, 5, 2, 4] : memref<4x5x6xf32> into "
     "memref<4x5x2x4xf32>", "dimension 2 of memref<4x5x6xf32> must be 8", 8),
    ("%r = memref.expand_shape %m [[0], [1], [2, 3]] output_shape [4, 5, 2, 2] : memref<4x5x6xf32> into "
     "memref<4x5x2x3xf32>", "output_shape size 3 must be 3", 8),
    ("%r = memref.expand_shape %m [[0, 1], [2]] : memref<4x5x6xf32> into memref<4x5x6xf32>",
     "expects 'output_shape", 8),
    ("%r = memref.collapse_shape %m [[0, 1], [2]] output_shape [20, 6] : memref<4x5x6xf32> into memref<20x6xf32>",
     "takes no output_shape", 8),
    ("%r = memref.memory_space_cast %m : memref<4x5x6xf32> to memref<4x5x7xf32, gpu>",
     "only the memory space may differ", 8),
    ("%r = memref.realloc %m : memref<4x5x6xf32> to memref<8xf32>", "1-D memrefs", 8),
])
def test_bad_input_is_a_diagnostic_at_the_op(body, message, column):
    text = f"func.func @f(%m: memref<4x5x6xf32>) {{\n  {body}\n  func.return\n}}\n"
    with pytest.raises(IRError, match=message) as e:
        irc.parse(text, "bad.ir").verify()
    assert (e.value.location.filename, e.value.location.line, e.value.location.column) == ("bad.ir", 2, column)


def test_realloc_needs_its_size_operand_exactly_when_dynamic():
    for sig, message in [("%m : memref<?xf32> to memref<?xf32>", "needs 1 dynamic size"),
                         ("%m(%n) : memref<?xf32> to memref<4xf32>", "needs 0 dynamic size")]:
        text = f"func.func @f(%m: memref<?xf32>, %n: index) {{\n  %r = memref.realloc {sig}\n  func.return\n}}\n"
        with pytest.raises(IRError, match=message) as e:
            irc.parse(text).verify()
        assert (e.value.location.line, e.value.location.column) == (2, 8)


def test_realloc_of_device_memory_is_an_error():
    text = ("func.func @f(%m: memref<4xf32, gpu>) {\n  %r = memref.realloc %m : memref<4xf32, gpu> to "
            "memref<8xf32, gpu>\n  func.return\n}\n")
    with pytest.raises(IRError, match="only host memory can be reallocated") as e:
        irc.parse(text).verify()
    assert (e.value.location.line, e.value.location.column) == (2, 8)


@pytest.mark.parametrize("body, message, column", [
    ("%r = memref.collapse_shape %m [[0, 1], [2]] : memref<4x5x6xf32> to memref<20x6xf32>",
     "unexpected 'to', expected 'into'", 67),
    ("%r = memref.collapse_shape %m [0, 1] : memref<4x5x6xf32> into memref<20x6xf32>", "unexpected '0'", 34),
    ("%r = memref.expand_shape %m [[0, 1], [-1]] output_shape [4, 5, 6] : memref<4x5x6xf32> into "
     "memref<4x5x6xf32>", "a reassociation lists dimensions", 8),
    ("%r = memref.expand_shape %m [[0, 1], [2]] output_shape [4, -5, 6] : memref<4x5x6xf32> into "
     "memref<4x5x6xf32>", "a size of output_shape must be from 0", 62),
])
def test_malformed_text_is_a_diagnostic_at_its_place(body, message, column):
    text = f"func.func @f(%m: memref<4x5x6xf32>) {{\n  {body}\n  func.return\n}}\n"
    with pytest.raises(IRError, match=message) as e:
        irc.parse(text, "bad.ir")
    assert (e.value.location.line, e.value.location.column) == (2, column)


# As mlir-opt-22 prints these ops (written for this test, not copied from upstream's files).
MLIR_TEXT = """module {
  func.func @shapes(%arg0: memref<4x5x6xf32>, %arg1: memref<?x6xf32>, %arg2: index, %arg3: memref<4xf32, 1>) {
    %collapse_shape = memref.collapse_shape %arg0 [[0, 1], [2]] : memref<4x5x6xf32> into memref<20x6xf32>
    %expand_shape = memref.expand_shape %collapse_shape [[0, 1], [2]] output_shape [4, 5, 6] : memref<20x6xf32> into memref<4x5x6xf32>
    %expand_shape_0 = memref.expand_shape %arg1 [[0, 1], [2]] output_shape [%arg2, 5, 6] : memref<?x6xf32> into memref<?x5x6xf32>
    %alloc = memref.alloc() : memref<f32>
    %expand_shape_1 = memref.expand_shape %alloc [] output_shape [1, 1] : memref<f32> into memref<1x1xf32>
    %collapse_shape_2 = memref.collapse_shape %expand_shape_1 [] : memref<1x1xf32> into memref<f32>
    %memspacecast = memref.memory_space_cast %arg3 : memref<4xf32, 1> to memref<4xf32>
    return
  }
  func.func @grow(%arg0: index) -> memref<?xf32> {
    %alloc = memref.alloc() : memref<4xf32>
    %0 = memref.realloc %alloc : memref<4xf32> to memref<8xf32>
    %cast = memref.cast %0 : memref<8xf32> to memref<?xf32>
    %1 = memref.realloc %cast(%arg0) : memref<?xf32> to memref<?xf32>
    return %1 : memref<?xf32>
  }
}
"""


def test_mlir_text_reads_and_prints_back():
    module = irc.parse(MLIR_TEXT, "shapes.mlir")
    module.verify()
    emitted = irc.print_mlir(module)
    assert irc.print_mlir(irc.parse(emitted, "emitted.mlir")) == emitted


@pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-22 is not installed")
def test_mlir_opt_accepts_irc_and_prints_it_back():
    spec = importlib.util.spec_from_file_location("mlir_roundtrip", HERE.parent / "benchmarks" / "mlir_roundtrip.py")
    rt = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = rt
    spec.loader.exec_module(rt)
    ok, printed = rt.run_mlir_opt(MLIR_OPT, MLIR_TEXT)
    assert ok and printed.rstrip() == MLIR_TEXT.rstrip()  # the text above is mlir-opt's own
    result = rt.round_trip(MLIR_OPT, MLIR_TEXT, "shapes.mlir")
    assert result.status == "ok", result


@pytest.mark.parametrize("line", [
    "%c = memref.collapse_shape %m [[0, 1]] {note = 1 : i64} : memref<4x6xf32> into memref<24xf32>",
    "%c = memref.expand_shape %f [[0, 1]] output_shape [4, 6] {note} : memref<24xf32> into memref<4x6xf32>",
    "%c = memref.realloc %f {note = 64 : i64} : memref<24xf32> to memref<32xf32>",
    # MLIR's place for this one's attributes is after its types (irc reads them before ':' too)
    "%c = memref.extract_aligned_pointer_as_index %m : memref<4x6xf32> -> index {note = 1 : i64}",
])
def test_an_attribute_dictionary_before_the_types_of_a_custom_form(line):
    """An attribute dictionary before ': TYPE' (where MLIR prints one): the lexer may read
    ': memref<...>' as one token there; once a parse error "unexpected ':', expected ':'"."""
    text = (f"func.func @f(%m: memref<4x6xf32>, %f: memref<24xf32>) {{\n  {line}\n  func.return\n}}\n")
    module = irc.parse(text, "attrs.mlir")
    module.verify()
    assert line in str(module)
