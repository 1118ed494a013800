"""irc repl and irc.Explorer: scripted sessions through standard input covering every command
and its errors, undo/redo as pointer moves, suggest against what each pass really does, and
bisect finding a deliberately miscompiling pass.  The interpreter is the oracle throughout."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irc
from irc.cli import main
from irc.passmanager import PASSES, Pass

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """\
func.func @f(%a: i64, %b: i64) -> i64 {
  %x = arith.addi %a, %b : i64
  %y = arith.addi %a, %b : i64
  %z = arith.muli %x, %y : i64
  %one = arith.constant 1 : i64
  %w = arith.muli %z, %one : i64
  func.return %w : i64
}

func.func @g(%t: tensor<4xf32>) -> tensor<4xf32> {
  %s = arith.addf %t, %t : tensor<4xf32>
  func.return %s : tensor<4xf32>
}
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "p.ir"
    path.write_text(PROGRAM)
    return path


def repl(capsys, monkeypatch, path, script: str):
    """One scripted session in this process (so test-only passes are visible): (status, out, err)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    status = main(["repl", str(path)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@dataclasses.dataclass
class AddToSub(Pass):
    """Test only: a miscompile (every arith.addi becomes arith.subi)."""

    name = "test-add-to-sub"

    def run(self, module, stats):
        from irc.dialects.arith import SubIOp

        for op in list(module.walk()):
            if op.name == "arith.addi":
                new = SubIOp(list(op.operands), [op.results[0].type])
                op.parent.insert_before(new, op)
                op.results[0].replace_all_uses_with(new.results[0])
                op.erase()
                stats.add("adds-broken")


PASSES.pop(AddToSub.name)  # defining it registered it: only the tests that ask for it see it


@pytest.fixture
def broken_pass():
    PASSES[AddToSub.name] = AddToSub
    yield AddToSub.name
    PASSES.pop(AddToSub.name, None)


def test_help_show_quit(capsys, monkeypatch, program):
    status, out, err = repl(capsys, monkeypatch, program, "help\nshow\nshow @g\nquit\nshow\n")
    assert status == 0 and err == ""
    for command in ("show", "apply", "undo", "redo", "diff", "history", "suggest", "run", "compare",
                    "bisect", "verify", "save", "help", "quit"):
        assert f"  {command}" in out
    assert out.count("func.func @f(") == 1  # the show after quit did not run
    assert "func.func @g(" in out and out.count("func.func @g(") == 2


def test_apply_undo_redo_diff_history(capsys, monkeypatch, program):
    script = "apply cse,canonicalize\nhistory\ndiff\ndiff 0\ndiff 0 1\nundo\nhistory\nredo\nshow\n"
    status, out, err = repl(capsys, monkeypatch, program, script)
    assert status == 0, err
    assert "step 1: cse (changed)" in out and "step 2: canonicalize (changed)" in out
    assert "-p 'cse,canonicalize'" in out
    assert "-  %y = arith.addi %a, %b : i64" in out  # diff 0 and diff 0 1 show cse's work
    assert "-  %w = arith.muli %z, %one : i64" in out  # canonicalize's x*1
    assert "at step 1: cse" in out and "-p 'cse'" in out  # after undo, history stops at cse
    assert "(undone)" in out
    assert "at step 2: canonicalize" in out
    final = out.rsplit("at step 2: canonicalize", 1)[1]
    assert "%y" not in final and "arith.muli %z, %one" not in final


def test_errors_keep_the_state(capsys, monkeypatch, program):
    script = "\n".join([
        "undo",                       # at the start
        "redo",
        "frobnicate",                 # unknown command
        "aply cse",                   # a typo: suggests 'apply'
        "apply nonsense-pass",        # bad pipeline
        "apply cse{bogus=1}",         # unknown option
        "apply canonicalize{max-iterations=x}",
        "apply grad{func=nope}",      # a pass that fails on this module
        "apply",                      # nothing to apply
        "diff",                       # no previous step
        "diff 7",
        "diff x",
        "show @nope",
        "run f 1",                    # too few arguments
        "run f x 2",                  # not an integer
        "run nope 1",
        "run",
        "bisect f 1 2",               # nothing applied yet
        "save /nonexistent/dir/x.ir",
        "undo two",
        "history",
        "run f 3 4",
    ]) + "\n"
    status, out, err = repl(capsys, monkeypatch, program, script)
    assert status == 1  # a scripted session with errors says so
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert "error: nothing to undo: this is the input" in lines
    assert "error: nothing to redo" in lines
    assert any(line.startswith("error: unknown command 'frobnicate'") for line in lines)
    assert any("did you mean 'apply'" in line for line in lines)
    assert any("unknown pass 'nonsense-pass'" in line for line in lines)
    assert any("unknown option 'bogus'" in line for line in lines)
    assert any("expects an integer" in line for line in lines)
    assert any("@nope" in line for line in lines)
    assert any("takes 2 argument(s)" in line for line in lines)
    assert any("expected an integer" in line for line in lines)
    assert any("nothing to bisect" in line for line in lines)
    assert any("cannot write /nonexistent/dir/x.ir" in line for line in lines)
    assert "(no passes applied)" in out  # nothing was recorded by the failures
    assert out.strip().endswith("49")  # and the program still runs: (3+4)*(3+4)


def test_run_and_compare(capsys, monkeypatch, program, tmp_path):
    x = np.array([1.5, -2.0, 0.25, 3.0], dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    script = f"run f 5 -2\ncompare f 5 -2\nrun g @{tmp_path / 'x.npy'}\ncompare g @{tmp_path / 'x.npy'}\n"
    status, out, err = repl(capsys, monkeypatch, program, script)
    assert status == 0, err
    expected = irc.interpret(irc.parse(PROGRAM), "f", 5, -2)
    assert out.splitlines()[0] == str(expected)
    assert f"interpreter: {expected}" in out and f"jit:         {expected}" in out
    assert out.count("same") == 2
    from irc.cli import format_result

    assert f"interpreter: {format_result(x + x, None)}" in out


def test_bisect_names_the_miscompiling_pass(capsys, monkeypatch, program, broken_pass):
    assert broken_pass in PASSES
    script = "apply canonicalize,cse\napply test-add-to-sub\napply dce\nbisect f 3 4\nbisect f 0 0\n"
    status, out, err = repl(capsys, monkeypatch, program, script)
    assert status == 0, err
    assert "step 3 (test-add-to-sub) changes the result:" in out
    assert "before: 49" in out and "after:  1" in out  # (3-4)*(3-4)
    # With both arguments zero the miscompile is invisible: every step agrees.
    assert "every step up to 4 computes what the input computes: 0" in out


def test_bisect_through_the_explorer(broken_pass):
    x = irc.Explorer(irc.parse(PROGRAM))
    x.apply("cse")
    x.apply("test-add-to-sub,canonicalize")
    found = x.bisect("f", 10, 3)
    assert found.step == 2 and found.title == "test-add-to-sub"
    assert found.expected == irc.interpret(irc.parse(PROGRAM), "f", 10, 3) == 169
    assert found.got == 49
    x.undo(2)
    assert x.bisect("f", 10, 3).step is None  # the broken step is undone


def test_suggest_matches_what_passes_do(capsys, monkeypatch, program):
    x = irc.Explorer(irc.parse(PROGRAM))
    names = [s.name for s in x.suggest()]
    # The oracle: apply each pass that needs no options to a fresh copy and compare the text.
    expected = []
    for name in sorted(PASSES):
        try:
            m = irc.parse(PROGRAM)
            before = m.print()
            irc.passes.run(m, name)
        except Exception:  # noqa: BLE001 - passes that need options or fail
            continue
        if m.print() != before:
            expected.append(name)
    assert names == expected and "cse" in names and "canonicalize" in names
    assert x.text == irc.parse(PROGRAM).print()  # suggest changed nothing
    trivial = program.parent / "trivial.ir"
    trivial.write_text("func.func @h(%a: i64) -> i64 {\n  func.return %a : i64\n}\n")
    status, out, err = repl(capsys, monkeypatch, program, f"suggest\nload {trivial}\nsuggest\n")
    assert status == 0, err
    assert out.splitlines()[0].startswith("canonicalize  (")
    assert "fuse-elementwise" in out  # @g's addf
    assert out.split(f"loaded {trivial}")[1].split("\n")[1].startswith("(no pass changes the IR)")


def test_verify_and_save(capsys, monkeypatch, program, tmp_path):
    out_file = tmp_path / "out.ir"
    out_file.write_text("old\n")
    script = f"apply cse\nverify\nsave {out_file}\nsave {tmp_path}\n"
    status, out, err = repl(capsys, monkeypatch, program, script)
    assert "ok" in out.splitlines()
    assert "is a directory" in err and status == 1
    saved = irc.parse(out_file.read_text())
    assert irc.interpret(saved, "f", 6, 1) == irc.interpret(irc.parse(PROGRAM), "f", 6, 1)
    assert "%y" not in out_file.read_text()


def test_save_never_damages_a_file_on_failure(capsys, monkeypatch, program, tmp_path):
    """A failure while writing (the disk full at the rename) leaves the old file and no
    temporary file; the session goes on and a later save works."""
    import errno
    import os

    target = tmp_path / "target.ir"
    target.write_text("precious\n")
    real_replace = os.replace

    def full_disk(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full_disk)
    status, out, err = repl(capsys, monkeypatch, program, f"apply cse\nsave {target}\n")
    assert status == 1 and f"cannot write {target}: No space left on device" in err
    assert target.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.ir", "target.ir"]
    monkeypatch.setattr(os, "replace", real_replace)
    status, out, err = repl(capsys, monkeypatch, program, f"apply cse\nsave {target}\n")
    assert status == 0 and "%y" not in target.read_text()


def test_bad_file_is_a_diagnostic(tmp_path):
    bad = tmp_path / "bad.ir"
    bad.write_text("func.func @f() {\n  %x = arith.addi %a : i64\n}\n")
    r = subprocess.run([sys.executable, "-m", "irc.cli", "repl", str(bad)], input="show\n",
                       capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{bad}:2:")
    r = subprocess.run([sys.executable, "-m", "irc.cli", "repl", str(tmp_path / "missing.ir")],
                       input="", capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("irc: error: no such file")


def test_subprocess_session_and_end_of_input(program):
    """The user's way: commands on stdin of a real 'irc repl' process, ending without quit."""
    r = subprocess.run([sys.executable, "-m", "irc.cli", "repl", str(program)],
                       input="apply cse\nundo\nredo\nhistory\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "-p 'cse'" in r.stdout and "Traceback" not in r.stderr


def test_any_input_line_no_traceback(capsys, monkeypatch, program):
    junk = ["\x00", "apply ,,,", "apply {", "apply cse}", "diff -1 -1", "diff 1 2 3", "undo -3", "redo 0",
            "run @f 1 2 3 4", "run f '1", "compare nope", "bisect", "view", "view x.txt",
            "load /nonexistent.ir", "show @", "save", "apply \u00e9\u00e9", "\u2603 snowman", "   "]
    status, out, err = repl(capsys, monkeypatch, program, "\n".join(junk) + "\nrun f 2 2\n")
    assert "Traceback" not in out + err and "internal error" not in err
    assert out.strip().endswith("16")


def test_completion():
    from irc.repl import completions

    x = irc.Explorer(irc.parse(PROGRAM))
    assert completions(x, "ap") == ["apply"]
    assert "canonicalize" in completions(x, "apply can") and "cse" not in completions(x, "apply can")
    assert completions(x, "apply cse,d") == ["dce"]
    assert completions(x, "apply canonicalize{max") == ["max-iterations="]
    assert completions(x, "apply grad{func=f ") == ["func=", "result=", "wrt=", "name=", "remat="]
    assert completions(x, "show @") == ["@f", "@g"]
    assert completions(x, "run g") == ["@g"]


def test_explorer_api():
    m = irc.parse(PROGRAM)
    x = irc.Explorer(m)
    assert x.history == "" and x.position == 0
    steps = x.apply("cse,canonicalize")
    assert [s.title for s in steps] == ["cse", "canonicalize"]
    assert x.history == "cse,canonicalize"
    assert "-  %y = arith.addi %a, %b : i64" not in x.diff() and "arith.muli" in x.diff()
    assert "-  %y = arith.addi %a, %b : i64" in x.diff(0)
    assert "<span" in x.diff()._repr_html_()
    assert m.print() == irc.parse(PROGRAM).print()  # the input module is left alone
    x.undo()
    assert x.history == "cse"
    x.apply("dce")  # drops the undone canonicalize
    assert x.history == "cse,dce" and len(x.steps) == 3
    with pytest.raises(irc.explorer.ExplorerError):
        x.redo()
    assert "step 2" in x._repr_html_() or "dce" in x._repr_html_()
    assert x.run("f", 2, 3) == 25


def test_a_failing_pipeline_adds_no_step(broken_pass):
    x = irc.Explorer(irc.parse(PROGRAM))
    with pytest.raises(irc.IRError):
        x.apply("cse,grad{func=missing}")
    assert x.position == 0 and len(x.steps) == 1


def _big_module(ops: int = 10_000):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import parse_throughput
    finally:
        sys.path.pop(0)
    return irc.parse(parse_throughput.generate(ops).irc)


def test_suggest_and_undo_on_10k_ops():
    """suggest and undo/redo on 10k ops do what they say; their speed (the issue asks for
    suggest < 2 s and instant undo) is measured in docs/repl.md, never asserted here: the
    suite runs on shared machines."""
    x = irc.Explorer(_big_module())
    found = [s.name for s in x.suggest()]
    assert "canonicalize" in found and "cse" in found
    before = x.module.print()
    x.apply("cse")
    after = x.module.print()
    assert after != before
    for _ in range(3):
        x.undo()
        assert x.module.print() == before
        x.redo()
        assert x.module.print() == after


def test_a_pass_does_nothing_to_a_module_without_its_triggers():
    """``Pass.triggers`` lets suggest skip a pass: on every corpus module that has none of a
    pass's trigger ops, running the pass must leave the module exactly as it was."""
    import irc.passes  # noqa: F401 - registers the passes

    texts = [p.read_text() for p in sorted((ROOT / "examples").glob("*.ir"))]
    texts += [t for p in sorted((ROOT / "tests" / "mlir").glob("*.mlir")) for t in p.read_text().split("// -----")]
    texts.append(_big_module(1_000).print())
    checked = 0
    for name in sorted(PASSES):
        try:
            p = irc.passmanager.make_pass(name)
        except (irc.passmanager.PipelineError, TypeError, ValueError):
            continue  # needs options, as in suggest
        triggers = p.triggers()
        if triggers is None:
            continue
        for text in texts:
            module = irc.parse(text)
            if triggers & {op.name for op in module.walk()}:
                continue
            before = module.print()
            try:
                p.run(module, irc.passmanager.Statistics())
            except irc.IRError:
                continue
            assert module.print() == before, f"{name} changed a module without {sorted(triggers)}"
            checked += 1
    assert checked >= 20
