"""The command line speaks with one voice (issue 15, item 7): --version, each subcommand's own
usage line for its bad options, one set of -O levels, empty pipeline elements refused, and
every message starting 'irc: error:' or 'file:line:col: error:'."""

from __future__ import annotations

import re

import pytest

import irc
from irc.cli import main

PROGRAM = "func.func @main(%a: i64) -> i64 {\n  %r = arith.addi %a, %a : i64\n  func.return %r : i64\n}\n"
MESSAGE_START = re.compile(r"^(irc: error: |irc: internal error: |[^:\n]+:\d+:\d+: error: )")


def cli(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def prog(tmp_path):
    path = tmp_path / "p.ir"
    path.write_text(PROGRAM)
    return path


def test_version(capsys):
    code, out, _ = cli(capsys, "--version")
    assert code == 0 and out.strip() == f"irc {irc.__version__}"


@pytest.mark.parametrize("command", ["opt", "run", "compile", "view"])
def test_bad_option_shows_the_subcommands_usage(capsys, prog, command):
    extra = {"compile": ["-o", "x.o"], "view": ["-o", "x.dot"]}.get(command, [])
    code, _, err = cli(capsys, command, prog, *extra, "--no-such-option")
    assert code == 2
    assert err.startswith(f"usage: irc {command} ")
    assert err.rstrip().splitlines()[-1] == "irc: error: unrecognized arguments: --no-such-option"


@pytest.mark.parametrize("level", ["0", "1", "2", "3"])
def test_every_command_takes_the_same_opt_levels(capsys, prog, tmp_path, level):
    code, out, err = run(capsys, "opt", "-O", level, prog)
    assert code == 0, err
    assert irc.interpret(irc.parse(out), "main", 21) == 42
    code, out, err = run(capsys, "run", "-O", level, "--no-cache", prog, "--entry", "main", "21")
    assert (code, out.strip()) == (0, "42"), err
    code, _, err = run(capsys, "compile", "-O", level, "--emit", "llvm", prog, "-o", tmp_path / "p.ll")
    assert code == 0, err


def test_opt_level_3_runs_the_level_2_pipeline(capsys, prog):
    assert run(capsys, "opt", "-O", "3", prog)[1] == run(capsys, "opt", "-O", "2", prog)[1]


@pytest.mark.parametrize("pipeline", ["cse,,dce", ",cse", "cse,", "cse, ,dce"])
def test_empty_pipeline_element_is_an_error(capsys, prog, pipeline):
    code, _, err = run(capsys, "opt", "-p", pipeline, prog)
    assert code == 2
    assert err.startswith("irc: error: empty pipeline element")


def test_option_lists_keep_their_commas():
    from irc.passmanager import parse_pipeline

    assert [p.name for p in parse_pipeline("cse, canonicalize{max-iterations=3},dce")] == \
        ["cse", "canonicalize", "dce"]


@pytest.mark.parametrize("argv", [
    ["view", "{prog}", "--func", "nope", "-o", "x.dot"],
    ["run", "{prog}", "--entry", "nope", "1"],
    ["run", "{prog}", "--interp", "--entry", "nope", "1"],
    ["opt", "-p", "no-such-pass", "{prog}"],
    ["opt", "{missing}"],
])
def test_every_message_starts_the_same_way(capsys, prog, tmp_path, argv):
    argv = [a.format(prog=prog, missing=tmp_path / "missing.ir") for a in argv]
    code, _, err = run(capsys, *argv)
    assert code in (1, 2)
    assert MESSAGE_START.match(err), err


def test_calling_a_declared_function_is_an_irc_diagnostic(capsys, tmp_path):
    path = tmp_path / "decl.ir"
    path.write_text("func.func private @g(i64) -> i64\nfunc.func @main(%a: i64) -> i64 {\n"
                    "  %r = func.call @g(%a) : (i64) -> i64\n  func.return %r : i64\n}\n")
    for extra in ([], ["--extern", "g"]):
        code, _, err = run(capsys, "run", "--no-cache", *extra, path, "1")
        assert code == 1
        assert err.startswith(f"{path}:1:1: error: ")
        assert "LLVM" not in err and "Symbol" not in err
