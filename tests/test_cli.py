"""The ``irc`` command line: exit codes, no tracebacks, options of ``irc opt``,
``irc passes`` and the argument and result formats of ``irc run``.

Most cases call ``irc.cli.main`` in-process (fast); a few run the real process to
check what a user sees, exit status included.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from irc.cli import main
from irc.passmanager import PASSES  # importing irc registers every pass

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SUM_TO = str(EXAMPLES / "sum_to.ir")

FOLDABLE = """\
func.func @f(%x: i64) -> i64 {
  %c0 = arith.constant 0 : i64
  %y = arith.addi %x, %c0 : i64
  func.return %y : i64
}
"""


def run_cli(capsys, *argv, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def run_process(*argv, stdin: str | bytes | None = None, cwd=None):
    result = subprocess.run([sys.executable, "-m", "irc.cli", *map(str, argv)], input=stdin,
                            capture_output=True, text=not isinstance(stdin, bytes), cwd=cwd, timeout=120)
    err = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    assert "Traceback" not in err
    return result.returncode, result.stdout, err


@pytest.fixture
def files(tmp_path):
    """Bad inputs of every kind, as files."""
    (tmp_path / "ok.ir").write_text(FOLDABLE)
    (tmp_path / "empty.ir").write_text("")
    (tmp_path / "binary.ir").write_bytes(b"\xff\xfe\x00\x01func.func")
    (tmp_path / "latin1.ir").write_bytes("// caf\xe9\n".encode("latin-1"))
    (tmp_path / "adir").mkdir()
    (tmp_path / "bad.ir").write_text("func.func @f( {\n")
    (tmp_path / "notnpy.npy").write_text("not an array")
    np.save(tmp_path / "a.npy", np.arange(4.0))
    np.save(tmp_path / "b.npy", np.full(4, 0.5))
    np.save(tmp_path / "ints.npy", np.arange(4, dtype=np.int32))
    np.save(tmp_path / "matrix.npy", np.zeros((2, 2)))
    return tmp_path


# -- exit codes and no tracebacks -------------------------------------------------------------

BAD = [
    # (argv, exit code, text in stderr); paths relative to the ``files`` fixture
    (["opt", "missing.ir"], 2, "irc: error: no such file: missing.ir"),
    (["opt", "adir"], 2, "irc: error: adir is a directory, not an .ir file"),
    (["opt", "binary.ir"], 1, "binary.ir:1:1: error: a byte that is not UTF-8 (0xff)"),
    (["opt", "latin1.ir"], 1, "latin1.ir:1:7: error: a byte that is not UTF-8 (0xe9)"),
    (["opt", "binary.ir", "--split-input-file"], 1, "not UTF-8"),
    (["opt", "adir", "--split-input-file"], 2, "adir is a directory"),
    (["opt", "missing.ir", "--split-input-file"], 2, "no such file: missing.ir"),
    (["opt", "bad.ir"], 1, "bad.ir:1:15: error: unexpected '{'"),
    (["opt", "ok.ir", "-p", "canonicalise"], 2, "unknown pass 'canonicalise'; did you mean 'canonicalize'?"),
    (["opt", "ok.ir", "-p", "canonicalize{"], 2, "unclosed '{' in pipeline after 'canonicalize'"),
    (["opt", "ok.ir", "-p", "canonicalize{bogus=1}"], 2, "unknown option 'bogus' for pass 'canonicalize'"),
    (["opt", "ok.ir", "-p", "canonicalize{max-iterations=many}"], 2, "got 'many'"),
    (["opt", "ok.ir", "-p", "dce{x=1}"], 2, "unknown option 'x' for pass 'dce' (options: none)"),
    (["opt", "ok.ir", "-o", "nodir/out.ir"], 2, "cannot write nodir/out.ir"),
    (["opt", "ok.ir", "--no-such-flag"], 2, "unrecognized arguments: --no-such-flag"),
    (["opt"], 2, "the following arguments are required: file"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
    ([], 2, "usage: irc"),
    (["run", "ok.ir", "--interp"], 2, "irc: error: @f takes 1 argument(s) (i64), got 0"),
    (["run", "ok.ir", "--interp", "1", "2"], 2, "irc: error: @f takes 1 argument(s) (i64), got 2"),
    (["run", "ok.ir", "--interp", "abc"], 2, "argument 0 ('abc'): expected an integer for i64"),
    (["run", "ok.ir", "--interp", "1.5"], 2, "argument 0 ('1.5'): expected an integer for i64"),
    (["run", "ok.ir", "--interp", "99999999999999999999"], 2, "99999999999999999999 does not fit in i64"),
    (["run", "ok.ir", "--interp", "--entry", "g", "1"], 2, "no function '@g' with a body (functions: @f)"),
    (["run", "ok.ir", "--interp", "--bogus", "1"], 2, "unrecognized arguments: --bogus"),
    (["run", "ok.ir", "--interp", "@a.npy"], 2, "argument 0 of @f must be an integer for i64"),
    (["run", "empty.ir", "--interp"], 2, "irc: error: empty.ir defines no function with a body to run"),
    (["run", "binary.ir", "--interp"], 1, "not UTF-8"),
    (["run", "bad.ir", "--interp"], 1, "bad.ir:1:15: error: unexpected '{'"),
    (["run", EXAMPLES / "dot.ir", "--interp", "1", "2"], 2,
     "argument 0 ('1'): parameter 0 has type memref<?xf64>; pass an array as @file.npy"),
    (["run", EXAMPLES / "dot.ir", "--interp", "@missing.npy", "@b.npy"], 2,
     "argument 0 ('@missing.npy'): no such file: missing.npy"),
    (["run", EXAMPLES / "dot.ir", "--interp", "@notnpy.npy", "@b.npy"], 2,
     "cannot load notnpy.npy as a .npy array: it is not a .npy file"),
    (["run", EXAMPLES / "dot.ir", "--interp", "@adir", "@b.npy"], 2, "adir is a directory, not a .npy file"),
    (["run", EXAMPLES / "dot.ir", "--interp", "@ints.npy", "@b.npy"], 2,
     "argument 0 of @dot must have dtype float64 for memref<?xf64>, got int32"),
    (["run", EXAMPLES / "dot.ir", "--interp", "@matrix.npy", "@b.npy"], 2,
     "argument 0 of @dot must have shape [?], got [2, 2]"),
    (["run", EXAMPLES / "dot.ir", "--interp", "@a.npy", "@b.npy", "@b.npy"], 2, "takes 2 argument(s)"),
]


@pytest.mark.parametrize("argv,code,message", BAD, ids=[" ".join(map(str, b[0])) or "(none)" for b in BAD])
def test_bad_input_and_usage(files, capsys, monkeypatch, argv, code, message):
    monkeypatch.chdir(files)
    try:
        got = main([str(a) for a in argv])
    except SystemExit as e:  # argparse usage errors exit 2 from inside the parser
        got = e.code
    out, err = capsys.readouterr()
    assert got == code, err
    assert message in err
    assert "Traceback" not in err


def test_empty_file_is_an_empty_module(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    assert run_cli(capsys, "opt", "empty.ir") == (0, "", "")


def test_stdin_input(capsys, monkeypatch):
    code, out, err = run_cli(capsys, "opt", "-", "-p", "canonicalize", stdin=FOLDABLE, monkeypatch=monkeypatch)
    assert code == 0 and err == ""
    assert "func.return %x : i64" in out and "arith.addi" not in out


def test_stdin_errors_name_stdin(capsys, monkeypatch):
    code, _, err = run_cli(capsys, "opt", "-", stdin="func.func @f() {\n  %x = arith.nope\n}\n",
                           monkeypatch=monkeypatch)
    assert code == 1
    assert err.startswith("<stdin>:2:8: error: unknown op 'arith.nope'")


def test_process_exit_codes_and_stderr(files):
    """The real process: exit status, and nothing on stderr but the diagnostic."""
    assert run_process("opt", "ok.ir", cwd=files)[0] == 0
    code, out, err = run_process("opt", "bad.ir", cwd=files)
    assert (code, out) == (1, "")
    head, source, caret = err.splitlines()
    assert head.startswith("bad.ir:1:15: error: unexpected '{', expected ")
    assert (source, caret) == ("func.func @f( {", "              ^")
    code, out, err = run_process("opt", "missing.ir", cwd=files)
    assert (code, err) == (2, "irc: error: no such file: missing.ir\n")
    code, _, err = run_process("opt", "-", stdin=b"\xff\xfe", cwd=files)
    assert (code, err) == (1, "<stdin>:1:1: error: a byte that is not UTF-8 (0xff): this is not a text file "
                              "of irc's language (binary input?)\n")


def test_process_negative_arguments_and_stdin():
    code, out, err = run_process("run", "-", "--interp", "--entry", "neg", "--", "-5", "-7",
                                 stdin="func.func @neg(%a: i64, %b: i32) -> (i64, i32) {\n"
                                       "  func.return %a, %b : i64, i32\n}\n")
    assert (code, out, err) == (0, "-5\n-7\n", "")


# -- irc opt options ---------------------------------------------------------------------------------


def test_output_file_is_written_atomically(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    out_path = files / "out.ir"
    out_path.write_text("old contents\n")
    assert run_cli(capsys, "opt", "ok.ir", "-p", "canonicalize", "-o", "out.ir") == (0, "", "")
    assert "func.return %x : i64" in out_path.read_text()
    # A failing run leaves the previous output alone and no temporary files behind.
    before = out_path.read_text()
    code, _, err = run_cli(capsys, "opt", "bad.ir", "-o", "out.ir")
    assert code == 1 and "bad.ir:1:15" in err
    assert out_path.read_text() == before
    assert sorted(p.name for p in files.iterdir() if p.name.startswith("out.ir")) == ["out.ir"]
    # '-o -' is standard output.
    code, out, _ = run_cli(capsys, "opt", "ok.ir", "-o", "-")
    assert code == 0 and out.startswith("func.func @f(%x: i64) -> i64 {")


def test_output_write_replaces_with_os_replace(files, capsys, monkeypatch):
    """The output appears in one step: written to a temporary name, then renamed."""
    monkeypatch.chdir(files)
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((Path(src).name, Path(dst).name, Path(src).read_text()))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    assert run_cli(capsys, "opt", "ok.ir", "-o", "res.ir")[0] == 0
    assert len(calls) == 1
    tmp, dst, text = calls[0]
    assert dst == "res.ir" and tmp != "res.ir" and text == (files / "res.ir").read_text()


def test_print_after_all(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    code, out, err = run_cli(capsys, "opt", "ok.ir", "-p", "dce,canonicalize", "--print-after-all")
    assert code == 0
    dumps = [line for line in err.splitlines() if "IR Dump After" in line]
    assert dumps == ["// -----// IR Dump After dce //----- //", "// -----// IR Dump After canonicalize //----- //"]
    after_dce, after_canon = err.split("// -----// IR Dump After canonicalize //----- //")
    assert "arith.addi %x, %c0" in after_dce
    assert "arith.addi" not in after_canon and "func.return %x : i64" in after_canon
    assert "arith.addi" not in out


def test_print_after_change(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    code, _, err = run_cli(capsys, "opt", "ok.ir", "-p", "dce,canonicalize,dce{},canonicalize",
                           "--print-after-change")
    assert code == 0
    dumps = [line for line in err.splitlines() if "IR Dump After" in line]
    # dce finds nothing dead at first; canonicalize changes the IR; then nothing changes.
    assert dumps == ["// -----// IR Dump After canonicalize //----- //"]


def test_timing(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    code, out, err = run_cli(capsys, "opt", "ok.ir", "-p", "canonicalize,dce", "--timing")
    assert code == 0 and out.startswith("func.func @f")
    assert "Pass execution timing report" in err
    rows = [line.split()[-1] for line in err.splitlines() if "%" in line and "wall" not in line]
    for name in ("(parse)", "(verify)", "canonicalize", "dce", "(print)"):
        assert name in rows


def test_stats(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    code, _, err = run_cli(capsys, "opt", "ok.ir", "-p", "canonicalize,dce", "--stats")
    assert code == 0
    assert "Pass statistics" in err
    canon = err.split("canonicalize\n", 1)[1].split("\ndce\n", 1)[0]
    assert "ops-folded" in canon
    assert err.rstrip().endswith("(no changes)")  # nothing is left for dce


def test_generic_and_split_input_file(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    (files / "two.ir").write_text(FOLDABLE + "// -----\n" + FOLDABLE.replace("@f", "@g"))
    code, out, err = run_cli(capsys, "opt", "two.ir", "--split-input-file", "--generic")
    assert (code, err) == (0, "")
    first, second = out.split("// -----\n")
    assert '"arith.addi"(%x, %c0) : (i64, i64) -> i64' in first and 'sym_name = "f"' in first
    assert 'sym_name = "g"' in second


# -- irc passes -------------------------------------------------------------------------------------


def test_passes_lists_every_registered_pass(capsys):
    code, out, _ = run_cli(capsys, "passes")
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines() if line and not line[0].isspace()
              and not line.startswith("-")}
    assert listed == set(PASSES)
    for name, cls in PASSES.items():
        assert f"{name}" in out and cls.summary and cls.summary in out
    assert "max-iterations=10 (int)" in out


# -- irc run ------------------------------------------------------------------------------------------

RESULTS = """\
func.func @ints(%a: i64, %b: i8) -> (i64, i8, index) {
  %c = arith.constant 1 : index
  func.return %a, %b, %c : i64, i8, index
}
func.func @floats(%a: f64, %b: f32) -> (f64, f32, f32, f64) {
  %third = arith.constant 0.1 : f32
  %big = arith.constant 1.0e300 : f64
  func.return %a, %b, %third, %big : f64, f32, f32, f64
}
func.func @flag(%x: i64) -> i1 {
  %zero = arith.constant 0 : i64
  %r = arith.cmpi sgt, %x, %zero : i64
  func.return %r : i1
}
func.func @nothing() {
  func.return
}
"""


@pytest.mark.parametrize("argv,expected", [
    (["--entry", "ints", "--", "-3", "-128"], "-3\n-128\n1\n"),
    (["--entry", "ints", "0x10", "127"], "16\n127\n1\n"),
    (["--entry", "ints", "9223372036854775807", "255"], "9223372036854775807\n-1\n1\n"),
    (["--entry", "floats", "--", "-2.5", "0.1"], "-2.5\n0.1\n0.1\n1e+300\n"),
    (["--entry", "floats", "1e-3", "3"], "0.001\n3.0\n0.1\n1e+300\n"),
    (["--entry", "floats", "inf", "nan"], "inf\nnan\n0.1\n1e+300\n"),
    (["--entry", "flag", "5"], "1\n"),
    (["--entry", "flag", "--", "-5"], "0\n"),
    (["--entry", "nothing"], ""),
])
def test_run_output_formats(tmp_path, capsys, monkeypatch, argv, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.ir").write_text(RESULTS)
    assert run_cli(capsys, "run", "results.ir", "--interp", *argv) == (0, expected, "")


def test_run_picks_the_only_function_or_main(capsys):
    assert run_cli(capsys, "run", SUM_TO, "--interp", "10") == (0, "45\n", "")


def test_run_runtime_fault_is_a_diagnostic(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "div.ir").write_text("func.func @d(%a: i64, %b: i64) -> i64 {\n"
                                     "  %q = arith.divsi %a, %b : i64\n  func.return %q : i64\n}\n")
    code, out, err = run_cli(capsys, "run", "div.ir", "--interp", "1", "0")
    assert (code, out) == (1, "")
    assert err == "div.ir:2:8: error: integer division by zero\n  %q = arith.divsi %a, %b : i64\n       ^\n"


# -- the examples ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("example,args,expected", [
    ("sum_to.ir", ["100"], "4950\n"),
    ("fib.ir", ["10"], "55\n"),
    ("fib.ir", ["0"], "0\n"),
    ("fib.ir", ["90"], "2880067194370816120\n"),
    ("sieve.ir", ["100"], "25\n97\n"),
    ("sieve.ir", ["2"], "0\n0\n"),
    ("dot.ir", ["@a.npy", "@b.npy"], "3.0\n"),
])
def test_examples_run_on_the_interpreter(files, capsys, monkeypatch, example, args, expected):
    monkeypatch.chdir(files)
    assert run_cli(capsys, "run", EXAMPLES / example, "--interp", "--", *args) == (0, expected, "")


@pytest.mark.parametrize("example", ["sum_to.ir", "fib.ir", "sieve.ir", "dot.ir"])
def test_examples_survive_canonicalize_and_dce(files, capsys, monkeypatch, example):
    """Cleaning an example with ``irc opt`` keeps its results."""
    monkeypatch.chdir(files)
    args = {"sum_to.ir": ["100"], "fib.ir": ["20"], "sieve.ir": ["1000"], "dot.ir": ["@a.npy", "@b.npy"]}[example]
    code, _, _ = run_cli(capsys, "opt", EXAMPLES / example, "-p", "canonicalize,dce", "-o", "clean.ir")
    assert code == 0
    before = run_cli(capsys, "run", EXAMPLES / example, "--interp", "--", *args)
    after = run_cli(capsys, "run", "clean.ir", "--interp", "--", *args)
    assert before == after and before[0] == 0


def test_run_timing_reports_every_stage_of_the_compile(tmp_path, capsys, monkeypatch):
    """``irc run --timing``: the tensor pipeline's stages (as tensor_stages names them), the CPU
    stages, then the call, on standard error; the results on standard output are unchanged."""
    from irc.runtime.tensor_function import TENSOR_STAGES

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.ir").write_text("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                                   "  %e = math.exp %a : tensor<4xf32>\n  func.return %e : tensor<4xf32>\n}\n")
    np.save(tmp_path / "a.npy", np.zeros(4, np.float32))
    code, out, err = run_cli(capsys, "run", "t.ir", "@a.npy", "--timing", "--no-cache")
    assert code == 0 and out == run_cli(capsys, "run", "t.ir", "@a.npy")[1]
    lines = err.splitlines()
    assert lines[0] == "timing of @f:"
    names = [line[:34].strip() for line in lines[1:]]
    for stage, _ in TENSOR_STAGES[:5]:
        assert stage in names
    assert {"translate", "LLVM optimise", "the call (compiling included)"} <= set(names)
    assert all(float(line.split()[-2]) >= 0 for line in lines[1:])
