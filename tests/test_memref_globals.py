"""memref.global / get_global, memref.alloca_scope, memref.prefetch and memref.assume_alignment
(issue 15): the interpreter against numpy, compiled code against the interpreter, the verifier's
errors, and the diagnostic for the memref ops irc does not have.

The MLIR spelling of these ops is tested by the corpus file tests/mlir/memref.mlir
(tests/test_mlir_interop.py, through mlir-opt-22 when it is installed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import irc
from irc import IRError
from irc.diagnostics import ExecutionError
from irc.interpreter import Interpreter

CORPUS = Path(__file__).parent / "mlir" / "memref.mlir"

PROGRAM = """
memref.global "private" constant @table : memref<2x3xf32> = dense<[[1.5, 2.5, 4.0], [-1.0, 0.25, 8.0]]>
memref.global @counter : memref<i64>
memref.global @acc : memref<3xf64> = uninitialized

func.func @lookup(%i: index, %j: index) -> f32 {
  %t = memref.get_global @table : memref<2x3xf32>
  memref.prefetch %t[%i, %j], read, locality<3>, data : memref<2x3xf32>
  %x = memref.load %t[%i, %j] : memref<2x3xf32>
  func.return %x : f32
}

func.func @bump() -> i64 {
  %c = memref.get_global @counter : memref<i64>
  %n = memref.load %c[] : memref<i64>
  %one = arith.constant 1 : i64
  %n1 = arith.addi %n, %one : i64
  memref.store %n1, %c[] : memref<i64>
  func.return %n1 : i64
}

func.func @scoped_sum(%m: memref<4xf64>, %n: index) -> f64 {
  %a = memref.assume_alignment %m, 8 : memref<4xf64>
  %r = memref.alloca_scope -> (f64) {
    %tmp = memref.alloca(%n) : memref<?xf64>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %zero = arith.constant 0.0 : f64
    %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f64) {
      %x = memref.load %a[%i] : memref<4xf64>
      %y = arith.mulf %x, %x : f64
      memref.store %y, %tmp[%i] : memref<?xf64>
      memref.prefetch %tmp[%i], write, locality<0>, instr : memref<?xf64>
      %z = memref.load %tmp[%i] : memref<?xf64>
      %acc1 = arith.addf %acc, %z : f64
      scf.yield %acc1 : f64
    }
    memref.alloca_scope.return %s : f64
  }
  func.return %r : f64
}

func.func @aligned(%m: memref<4xf32>) -> f32 {
  %a = memref.assume_alignment %m, 16 : memref<4xf32>
  %c0 = arith.constant 0 : index
  %x = memref.load %a[%c0] : memref<4xf32>
  func.return %x : f32
}

func.func @write_constant(%v: f32) {
  %t = memref.get_global @table : memref<2x3xf32>
  %c0 = arith.constant 0 : index
  memref.store %v, %t[%c0, %c0] : memref<2x3xf32>
  func.return
}
"""

TABLE = np.array([[1.5, 2.5, 4.0], [-1.0, 0.25, 8.0]], np.float32)


def _module():
    m = irc.parse(PROGRAM)
    m.verify()
    return m


def test_globals_prefetch_and_scope_on_the_interpreter():
    interp = Interpreter(_module())
    for i in range(2):
        for j in range(3):
            assert interp.run("lookup", i, j) == TABLE[i, j]
    # One buffer per global for the interpreter's lifetime: a write is seen by the next call.
    assert [interp.run("bump") for _ in range(3)] == [1, 2, 3]
    # A fresh interpreter starts from the initial values again.
    assert Interpreter(_module()).run("bump") == 1
    x = np.array([0.5, -2.0, 3.0, 7.0])
    for n in range(5):
        assert interp.run("scoped_sum", x, n) == pytest.approx(float(np.sum(x[:n] ** 2)), rel=0, abs=0)


def test_prefetch_out_of_bounds_is_no_error_but_the_load_is():
    with pytest.raises(ExecutionError, match="out of bounds"):
        irc.interpret(_module(), "lookup", 2, 0)


PREFETCHES = """
func.func @sum(%m: memref<?xf32>, %ahead: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %m, %c0 : memref<?xf32>
  %zero = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %far = arith.addi %i, %ahead : index
    memref.prefetch %m[%far], read, locality<2>, data : memref<?xf32>
    memref.prefetch %m[%far], write, locality<0>, data : memref<?xf32>
    %x = memref.load %m[%i] : memref<?xf32>
    %acc1 = arith.addf %acc, %x : f32
    scf.yield %acc1 : f32
  }
  func.return %s : f32
}
"""


def test_compiled_prefetches_are_instructions_and_never_fault():
    """memref.prefetch compiles to the CPU's prefetch instructions (llvm.prefetch), and an
    address far out of bounds, which the interpreter ignores, is no fault in compiled code
    either, with bounds checks or without: a prefetch reads nothing."""
    pytest.importorskip("llvmlite")
    from irc.runtime import aot

    m = irc.parse(PREFETCHES)
    asm = aot.emit(m, "asm")
    assert "prefetcht1" in asm and ("prefetchw" in asm or "prefetchnta" in asm)
    x = np.arange(1000, dtype=np.float32)
    want = irc.interpret(m, "sum", x, 1 << 40)
    assert want == np.float32(x.sum(dtype=np.float64))
    for bounds_checks in (False, True):
        exe = irc.compile(m, bounds_checks=bounds_checks, cache=False)
        for ahead in (16, 1 << 40, -(1 << 40)):
            assert exe.sum(x, ahead) == want


def test_write_to_a_constant_global_is_a_fault():
    with pytest.raises(ExecutionError, match="write to a constant memref.global") as e:
        irc.interpret(_module(), "write_constant", 1.0)
    assert "memref.store" in str(e.value)


def _misaligned(n: int, alignment: int) -> np.ndarray:
    """A float32 array of ``n`` elements whose address is 4 bytes past a multiple of ``alignment``."""
    base = np.zeros(n + alignment, np.float32)
    skip = ((-base.ctypes.data) % alignment) // 4 + 1
    out = base[skip:skip + n]
    assert out.ctypes.data % alignment == 4
    return out


def test_assume_alignment_is_checked():
    m = _module()
    aligned = np.zeros(4 + 16, np.float32)
    aligned = aligned[((-aligned.ctypes.data) % 16) // 4:][:4]
    aligned[0] = 3.0
    assert irc.interpret(m, "aligned", aligned) == 3.0
    with pytest.raises(ExecutionError, match="not aligned to 16 bytes"):
        irc.interpret(m, "aligned", _misaligned(4, 16))


def test_compiled_code_agrees_with_the_interpreter():
    pytest.importorskip("llvmlite")
    m = _module()
    exe = irc.compile(m, bounds_checks=True)
    for i in range(2):
        for j in range(3):
            assert exe.lookup(i, j) == irc.interpret(m, "lookup", i, j)
    interp = Interpreter(m)
    assert [exe.bump() for _ in range(3)] == [interp.run("bump") for _ in range(3)]
    x = np.array([0.5, -2.0, 3.0, 7.0])
    for n in range(5):
        assert exe.scoped_sum(x, n) == irc.interpret(m, "scoped_sum", x, n)
    with pytest.raises(ExecutionError, match="out of bounds"):
        exe.lookup(2, 0)
    with pytest.raises(ExecutionError, match="not aligned to 16 bytes"):
        exe.aligned(_misaligned(4, 16))


def test_the_corpus_file_runs_the_same_compiled():
    pytest.importorskip("llvmlite")
    m = irc.parse(CORPUS.read_text(), str(CORPUS))
    exe = irc.compile(m)
    interp = Interpreter(m)
    buf = np.arange(8, dtype=np.float32) + 2
    assert [exe.scoped(1, buf) for _ in range(2)] == [interp.run("scoped", 1, buf) for _ in range(2)] == [2.0, 2.0]
    assert exe.lookup(1, 0) == interp.run("lookup", 1, 0) == 3.0


@pytest.mark.parametrize("text, message", [
    ("memref.global @g : memref<?xf32>\n", "static shape"),
    ("memref.global @g : memref<2xf32> = dense<[1.0, 2.0, 3.0]>\n", "dense literal"),
    ("memref.global @g : memref<2xf32> {alignment = 3}\n", "power of two"),
    ("func.func @f() {\n  %g = memref.get_global @nothing : memref<2xf32>\n  func.return\n}\n",
     "'@nothing' is not a memref.global"),
    ("memref.global @g : memref<2xf32>\nfunc.func @f() {\n  %g = memref.get_global @g : memref<3xf32>\n"
     "  func.return\n}\n", "does not match the global's type"),
    ("func.func @f(%m: memref<2xf32>) {\n  %a = memref.assume_alignment %m, 12 : memref<2xf32>\n  func.return\n}\n",
     "power of two"),
    ("func.func @f(%m: memref<2xf32>, %i: index) {\n  memref.prefetch %m[%i], read, data : memref<2xf32>\n"
     "  func.return\n}\n", "expects"),
    ("func.func @f(%m: memref<2xf32>) {\n  memref.dma_wait %m[], %m : memref<2xf32>\n  func.return\n}\n",
     "'memref.dma_wait' is an op of MLIR's memref dialect that irc does not support"),
])
def test_bad_input_is_a_diagnostic(text, message):
    with pytest.raises(IRError, match=message):
        irc.parse(text).verify()


def test_print_parse_fixpoint_and_generic_form():
    m = _module()
    text = m.print()
    assert irc.parse(text).print() == text
    assert irc.parse(m.print(generic=True)).print() == text


CAST = """
func.func @f(%m: memref<?x3xf32>, %i: index) -> f32 {
  %c = memref.cast %m : memref<?x3xf32> to memref<2x3xf32>
  %d = memref.cast %c : memref<2x3xf32> to memref<?x?xf32>
  %c0 = arith.constant 0 : index
  %x = memref.load %d[%i, %c0] : memref<?x?xf32>
  memref.store %x, %c[%c0, %c0] : memref<2x3xf32>
  func.return %x : f32
}

func.func @freed_through_a_cast(%n: index) -> index {
  %a = memref.alloc(%n) : memref<?xi64>
  %c = memref.cast %a : memref<?xi64> to memref<4xi64>
  memref.dealloc %c : memref<4xi64>
  func.return %n : index
}
"""


def test_memref_cast_is_the_buffer_with_its_static_sizes_checked():
    m = irc.parse(CAST)
    m.verify()
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = a.copy()
    assert irc.interpret(m, "f", a, 1) == 4.0 and a[0, 0] == 4.0  # the store went to the buffer itself
    assert irc.interpret(m, "freed_through_a_cast", 4) == 4
    with pytest.raises(ExecutionError, match="memref.cast to memref<2x3xf32>: the buffer's sizes differ"):
        irc.interpret(m, "f", np.zeros((3, 3), np.float32), 0)
    with pytest.raises(ExecutionError, match="memref.cast to memref<4xi64>"):
        irc.interpret(m, "freed_through_a_cast", 5)
    pytest.importorskip("llvmlite")
    exe = irc.compile(m)
    assert exe.f(b, 1) == 4.0 and b[0, 0] == 4.0
    assert exe.freed_through_a_cast(4) == 4
    with pytest.raises(ExecutionError, match="memref.cast to memref<2x3xf32>: the buffer's sizes differ"):
        exe.f(np.zeros((3, 3), np.float32), 0)


def test_a_cast_that_changes_more_than_static_sizes_is_an_error():
    with pytest.raises(IRError, match="only the static or dynamic sizes may differ"):
        irc.parse("func.func @f(%m: memref<4xf32>) {\n  %c = memref.cast %m : memref<4xf32> to memref<5xf32>\n"
                  "  func.return\n}\n").verify()


def test_memref_rank_is_the_number_of_dimensions():
    text = ("func.func @f(%m: memref<2x?x3xf32>) -> index {\n  %r = memref.rank %m : memref<2x?x3xf32>\n"
            "  func.return %r : index\n}\n")
    m = irc.parse(text)
    buf = np.zeros((2, 5, 3), np.float32)
    assert irc.interpret(m, "f", buf) == buf.ndim
    assert "memref.rank" not in irc.passes.run(irc.parse(text), "canonicalize").print()
    pytest.importorskip("llvmlite")
    assert irc.compile(m).f(buf) == buf.ndim
