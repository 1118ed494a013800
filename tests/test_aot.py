"""Ahead-of-time output: ``irc compile --emit llvm|asm|obj``.

The ``.ll`` passes LLVM's own verifier, the assembly is assembly, and the object
links with gcc into a C program that calls it through the documented C ABI
(``int32_t f(args..., results *out...)``, a memref as a data pointer and one
int64_t size per dimension, 0 on success, k + 1 for the k-th failed check).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""\
    // Scale a matrix in place and return its sum and the quotient a / b.
    func.func @scale_sum(%m: memref<?x?xi64>, %k: i64) -> i64 {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %zero = arith.constant 0 : i64
      %rows = memref.dim %m, %c0 : memref<?x?xi64>
      %cols = memref.dim %m, %c1 : memref<?x?xi64>
      %sum = scf.for %i = %c0 to %rows step %c1 iter_args(%acc = %zero) -> (i64) {
        %row = scf.for %j = %c0 to %cols step %c1 iter_args(%racc = %acc) -> (i64) {
          %x = memref.load %m[%i, %j] : memref<?x?xi64>
          %y = arith.muli %x, %k : i64
          memref.store %y, %m[%i, %j] : memref<?x?xi64>
          %s = arith.addi %racc, %y : i64
          scf.yield %s : i64
        }
        scf.yield %row : i64
      }
      func.return %sum : i64
    }
    func.func @divide(%a: i64, %b: i64) -> (i64, f64) {
      %q = arith.divsi %a, %b : i64
      %f = arith.sitofp %q : i64 to f64
      %h = arith.constant 0.5 : f64
      %g = arith.mulf %f, %h : f64
      func.return %q, %g : i64, f64
    }
    """)

C_MAIN = textwrap.dedent("""\
    #include <stdint.h>
    #include <stdio.h>

    int32_t scale_sum(int64_t *data, int64_t rows, int64_t cols, int64_t k, int64_t *out0);
    int32_t divide(int64_t a, int64_t b, int64_t *q, double *half);

    int main(void) {
        int64_t m[2][3] = {{1, 2, 3}, {4, 5, 6}};
        int64_t sum = 0, q = 0;
        double half = 0;
        if (scale_sum(&m[0][0], 2, 3, 10, &sum) != 0) return 10;
        if (sum != 210 || m[1][2] != 60) return 11;
        if (divide(-7, 2, &q, &half) != 0) return 12;
        if (q != -3 || half != -1.5) return 13;
        int32_t status = divide(1, 0, &q, &half);
        printf("status %d\\n", status);
        return status > 0 ? 0 : 14;
    }
    """)


IRC = [sys.executable, "-c", "import sys; from irc.cli import main; sys.exit(main())"]


def run_irc(*args, check=True):
    """The ``irc`` command line, in a fresh process (as a user runs it)."""
    return subprocess.run([*IRC, *args], capture_output=True, text=True, check=check)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.ir"
    path.write_text(PROGRAM)
    return path


@pytest.mark.parametrize("level", ["0", "2", "3"])
def test_llvm_output_passes_llvm_verifier(program, tmp_path, level):
    out = tmp_path / "prog.ll"
    run_irc("compile", str(program), "--target", "cpu", "--emit", "llvm", "-O", level, "-o", str(out))
    text = out.read_text()
    assert "define" in text and "@scale_sum" in text and "@divide" in text
    opt = shutil.which("opt-22")  # an unsuffixed 'opt' may be an LLVM too old for opaque pointers
    if opt is None:
        import llvmlite.binding as llvm  # the LLVM irc itself uses (22): its verifier instead

        llvm.parse_assembly(text).verify()
        return
    proc = subprocess.run([opt, "-passes=verify", "-disable-output", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_asm_output_is_assembly(program, tmp_path):
    out = tmp_path / "prog.s"
    run_irc("compile", str(program), "--emit", "asm", "-o", str(out))
    text = out.read_text()
    assert "scale_sum:" in text and "divide:" in text
    assert ".text" in text


def test_llvm_to_stdout(program):
    proc = run_irc("compile", str(program), "--emit", "llvm", "-o", "-")
    assert "define" in proc.stdout


@pytest.mark.parametrize("level", ["0", "3"])
def test_object_links_into_a_c_program(program, tmp_path, level):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    obj = tmp_path / "prog.o"
    run_irc("compile", str(program), "--emit", "obj", "-O", level, "-o", str(obj))
    assert obj.read_bytes()[:4] == b"\x7fELF"
    main_c = tmp_path / "main.c"
    main_c.write_text(C_MAIN)
    exe = tmp_path / "main"
    subprocess.run([gcc, str(main_c), str(obj), "-o", str(exe)], check=True, capture_output=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith("status ")


def test_bad_emit_kind_is_an_error(program):
    proc = run_irc("compile", str(program), "--emit", "exe", "-o", "-", check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr


def test_emitting_a_tensor_function_says_how_to_lower_it(tmp_path):
    prog = tmp_path / "t.ir"
    prog.write_text("func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
                    "  %e = math.exp %a : tensor<?xf32>\n  func.return %e : tensor<?xf32>\n}\n")
    proc = run_irc("compile", str(prog), "--emit", "llvm", "-o", str(tmp_path / "t.ll"), check=False)
    assert proc.returncode == 1
    assert f"{prog}:1:1: error:" in proc.stderr and "specialize-shapes" in proc.stderr
    assert "Traceback" not in proc.stderr
