"""Internal errors that must be diagnostics (issue 11, item 15).

* nesting: one limit (``irc.nesting.MAX_REGION_DEPTH``) that the parser and the
  verifier enforce with a location, and that every walk (printer, clone,
  passes, interpreter) handles;
* parsing is linear in the nesting depth (one dict of visible names);
* integer literals too long for Python's int/str limit, and > 1,024 machine
  arguments for the JIT, are diagnostics at the literal / the function.

Deep inputs run in child processes: a regression is then a failed test, not a
crashed pytest.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import irc
from irc.nesting import MAX_REGION_DEPTH

IRC = [sys.executable, "-m", "irc.cli"]


def nested(depth: int, close: bool = True) -> str:
    """A function whose body holds ``depth - 2`` nested scf.if: ``depth`` regions counting the
    module's and the function's."""
    n = depth - 2
    body = "".join(f"scf.if %c {{\n%y{i} = arith.addi %x, %x : i64\n" for i in range(n))
    return ("func.func @f(%c: i1, %x: i64) -> i64 {\n" + body + ("}\n" * n if close else "")
            + ("func.return %x : i64\n}\n" if close else ""))


def child(code: str, timeout: int = 300) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_parser_rejects_nesting_beyond_the_limit_at_the_brace():
    with pytest.raises(irc.IRError) as e:
        irc.parse(nested(MAX_REGION_DEPTH + 1), "deep.ir")
    line = 2 * (MAX_REGION_DEPTH - 1)  # the 'scf.if %c {' that opens region MAX_REGION_DEPTH + 1
    assert str(e.value).startswith(f"deep.ir:{line}:11: error: regions are nested more than "
                                   f"{MAX_REGION_DEPTH} levels deep")


def test_everything_works_at_the_limit():
    """Printer, verifier, clone, passes and interpreter all handle the deepest accepted input
    (they used to stop at ~200 (printer) and ~330 (verifier) levels with no location)."""
    out = child(_inline_nested() + f"""
import irc, irc.passes
from irc.passmanager import PRESETS
m = irc.parse(nested({MAX_REGION_DEPTH}))
irc.verify(m)
text = m.print()
assert irc.parse(text).print() == text
assert irc.parse(m.print(generic=True)).print() == text
copy = m.clone()
irc.passes.run(copy, PRESETS["O2"])
print(irc.interpret(m, "f", True, 21))
""")
    assert out.strip() == "21"


def test_cli_at_the_limit_and_beyond(tmp_path):
    (tmp_path / "ok.ir").write_text(nested(MAX_REGION_DEPTH))
    (tmp_path / "deep.ir").write_text(nested(MAX_REGION_DEPTH + 5))
    p = subprocess.run(IRC + ["opt", "ok.ir", "-O", "2"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run(IRC + ["run", "--interp", "ok.ir", "1", "5"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert (p.returncode, p.stdout) == (0, "5\n"), p.stderr[-2000:]
    p = subprocess.run(IRC + ["opt", "deep.ir"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and p.stderr.startswith("deep.ir:") and "nested more than" in p.stderr


def test_verifier_enforces_the_limit_on_ir_built_through_the_api(monkeypatch):
    import irc.nesting

    m = irc.parse(nested(12), "n.ir")
    monkeypatch.setattr(irc.nesting, "MAX_REGION_DEPTH", 6)
    with pytest.raises(irc.IRError) as e:
        irc.verify(m)
    # the module is level 0: the op at depth 6 is the 5th scf.if, on line 10
    assert str(e.value).startswith("n.ir:10:1: error: 'scf.if': regions are nested more than 6 levels deep")
    with pytest.raises(irc.IRError):
        m.print()


def test_200k_unclosed_braces_are_rejected_quickly(tmp_path):
    """Used to take 593 s (each lookup walked every scope); now the limit stops it at once."""
    (tmp_path / "open.ir").write_text(nested(200_000, close=False))
    p = subprocess.run(IRC + ["opt", "open.ir"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "nested more than" in p.stderr, p.stderr[-2000:]


def _inline_nested() -> str:
    import inspect

    return inspect.getsource(nested)


def test_name_lookup_does_not_walk_the_scopes():
    """Timing-free: the Python calls a parse makes must not grow with depth x uses.

    With one scope dict per region, each use looked through every enclosing scope,
    so 2,000 uses at depth 900 cost 1.8 million dict lookups; with one dict of
    visible names it is one lookup each.  Counted with a profiler hook (C calls too).
    """
    out = child(_inline_nested() + """
import sys, irc

def program(depth, uses):
    src = nested(depth, close=False)
    src += "".join(f"%u{i} = arith.addi %x, %x : i64\\n" for i in range(uses))
    return src + "}\\n" * (depth - 2) + "func.return %x : i64\\n}\\n"

def calls(text):
    n = [0]
    def hook(frame, event, arg):
        if event in ("call", "c_call"):
            n[0] += 1
    irc.parse(program(10, 10))  # warm up: grammar, imports
    sys.setprofile(hook)
    try:
        irc.parse(text)
    finally:
        sys.setprofile(None)
    return n[0]

shallow = calls(program(20, 2000)) - calls(program(20, 0))
deep = calls(program(900, 2000)) - calls(program(900, 0))
print(shallow, deep)
""")
    shallow, deep = map(int, out.split())
    assert deep < 1.5 * shallow, (shallow, deep)


def test_dce_is_not_exponential_in_nesting_depth():
    """is_removable asked every nested op the same question again: 2^depth work."""
    out = child(_inline_nested() + """
import irc, irc.passes
m = irc.parse(nested(60))
irc.passes.run(m, "dce,canonicalize")
print("ok")
""", timeout=120)
    assert out.strip() == "ok"


# -- integer literals ------------------------------------------------------------------------------


def test_integer_literal_beyond_pythons_digit_limit_is_a_diagnostic(tmp_path):
    src = "func.func @f() -> i64 {\n  %c = arith.constant " + "9" * 5000 + " : i64\n  func.return %c : i64\n}\n"
    with pytest.raises(irc.IRError) as e:
        irc.parse(src, "lit.ir")
    assert str(e.value).startswith("lit.ir:2:23: error: integer literal of 5000 digits is too large for any type")
    (tmp_path / "lit.ir").write_text(src)
    p = subprocess.run(IRC + ["opt", "lit.ir"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "lit.ir:2:23" in p.stderr
    # leading zeros do not count: this is 7
    m = irc.parse("func.func @f() -> i64 {\n  %c = arith.constant " + "0" * 5000 + "7 : i64\n"
                  "  func.return %c : i64\n}\n")
    assert irc.interpret(m, "f") == 7


def test_integer_literal_beyond_every_float_is_a_diagnostic():
    src = "func.func @f() -> f64 {\n  %c = arith.constant " + "9" * 350 + " : f64\n  func.return %c : f64\n}\n"
    with pytest.raises(irc.IRError) as e:
        irc.parse(src, "f.ir")
    assert str(e.value).startswith("f.ir:2:23: error: integer literal does not fit in f64")


# -- parameters ------------------------------------------------------------------------------------


def test_more_parameters_than_ctypes_can_pass_is_a_diagnostic_at_the_function(tmp_path):
    n = 1100
    params = ", ".join(f"%a{i}: i64" for i in range(n))
    (tmp_path / "p.ir").write_text(f"func.func @f({params}) -> i64 {{\n  func.return %a{n - 1} : i64\n}}\n")
    args = [str(i) for i in range(n)]
    p = subprocess.run(IRC + ["run", "p.ir", "--no-cache", *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 1 and p.stderr.startswith("p.ir:1:1: error: @f takes 1101 machine-level arguments"), \
        p.stderr[-2000:]
    p = subprocess.run(IRC + ["run", "p.ir", "--interp", *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert (p.returncode, p.stdout) == (0, f"{n - 1}\n"), p.stderr[-2000:]
    p = subprocess.run(IRC + ["compile", "p.ir", "-o", "p.o"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
