"""The ``interleave`` hint of ``scf.for`` (dialects/scf.py): set by the lowering of elementwise
groups that compute a math function and of softmax's exp loop, kept on the back edge by scf-to-cf,
and emitted by the CPU backend as LLVM's ``llvm.loop.interleave.count``."""

import subprocess
import sys

import numpy as np

import irc

TWO_LOOPS = """
func.func @two(%buf: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %buf[%i] : memref<?xf32>
    %e = math.exp %x : f32
    memref.store %e, %buf[%i] : memref<?xf32>
  } {interleave = 2 : i64}
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %buf[%i] : memref<?xf32>
    %e = math.tanh %x : f32
    memref.store %e, %buf[%i] : memref<?xf32>
  } {interleave = 2 : i64}
  func.return
}
"""


def test_each_hinted_loop_gets_its_own_llvm_loop_node(tmp_path):
    source = tmp_path / "two.ir"
    source.write_text(TWO_LOOPS)
    out = tmp_path / "two.ll"
    # -O0: LLVM's vectoriser, which reads the hint, consumes it (as it should) at -O2.
    subprocess.run([sys.executable, "-m", "irc.cli", "compile", str(source), "-O0", "--emit", "llvm", "-o", str(out)],
                   check=True)
    text = out.read_text()
    loops = [line.split("!llvm.loop ")[1].split()[0].rstrip(",") for line in text.splitlines() if "!llvm.loop " in line]
    assert len(loops) == 2 and loops[0] != loops[1], text
    assert '!"llvm.loop.interleave.count", i32 2' in text
    for node in loops:  # LLVM finds a loop's hints only in a node whose first operand is itself
        assert any(line.startswith(f"{node} = ") and f"!{{{node}, " in line.replace("distinct ", "")
                   for line in text.splitlines()), text


def test_the_hinted_loops_compute_what_the_interpreter_does():
    module = irc.parse(TWO_LOOPS)
    data = np.linspace(-3, 3, 37, dtype=np.float32)
    expected = data.copy()
    irc.interpret(module, "two", expected, 37)
    got = data.copy()
    irc.compile(module, cache=False).two(got, 37)
    np.testing.assert_array_equal(got, expected)


def _loops(text: str, shapes: str):
    lowered = irc.passes.run(irc.parse(text), f"specialize-shapes{{func=f shapes={shapes}}},fuse-elementwise,"
                                              "tensor-to-loops")
    return [op for f in lowered.functions for op in f.walk() if op.name == "scf.for"]


def test_only_loops_of_a_math_function_ask_for_it():
    math_loop = _loops("""
func.func @f(%a: tensor<64xf32>) -> tensor<64xf32> {
  %e = math.exp %a : tensor<64xf32>
  %s = arith.addf %e, %a : tensor<64xf32>
  func.return %s : tensor<64xf32>
}""", "tensor<64xf32>")
    plain_loop = _loops("""
func.func @f(%a: tensor<64xf32>) -> tensor<64xf32> {
  %s = arith.addf %a, %a : tensor<64xf32>
  func.return %s : tensor<64xf32>
}""", "tensor<64xf32>")
    broadcast_nest = _loops("""
func.func @f(%a: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<8x16xf32> {
  %bb = graph.broadcast %b : tensor<16xf32> to tensor<8x16xf32>
  %s = arith.addf %a, %bb : tensor<8x16xf32>
  %t = math.tanh %s : tensor<8x16xf32>
  func.return %t : tensor<8x16xf32>
}""", "tensor<8x16xf32>;tensor<16xf32>")
    assert [int(op.attributes["interleave"].value) for op in math_loop] == [2]
    assert ["interleave" in op.attributes for op in plain_loop] == [False]
    assert ["interleave" in op.attributes for op in broadcast_nest] == [False, True]  # the innermost only
