"""Unbounded recursion is an error at the call on every engine, never a crashed process;
also a regression test for the i1 fault sentinel of the fast call path."""

from pathlib import Path

import pytest

import irc
from irc.interpreter import MAX_CALL_DEPTH

PROGRAM = """
func.func @even(%n: i64) -> i1 {
^entry:
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %done = arith.cmpi eq, %n, %zero : i64
  cf.cond_br %done, ^yes, ^no
^yes:
  %t = arith.constant true
  func.return %t : i1
^no:
  %m = arith.subi %n, %one : i64
  %o = func.call @odd(%m) : (i64) -> i1
  func.return %o : i1
}
func.func @odd(%n: i64) -> i1 {
  %e = func.call @even(%n) : (i64) -> i1
  %t = arith.constant true
  %o = arith.xori %e, %t : i1
  func.return %o : i1
}
"""


@pytest.fixture(scope="module")
def module():
    return irc.parse(PROGRAM, "recursion.ir")


def test_interpreter_reports_runaway_recursion(module):
    with pytest.raises(irc.IRError, match=f"call depth exceeds {MAX_CALL_DEPTH}"):
        irc.interpret(module, "even", -5)


@pytest.mark.parametrize("opt_level", [0, 2, 3])
def test_jit_reports_runaway_recursion(module, opt_level, tmp_path: Path):
    exe = irc.compile(module, opt_level=opt_level, cache_dir=str(tmp_path))
    assert exe.even(10) is True and exe.even(7) is False
    with pytest.raises(irc.IRError, match=f"call depth exceeds {MAX_CALL_DEPTH}") as info:
        exe.even(-5)
    assert info.value.location.line in (13, 17)  # one of the two calls


def test_deep_but_bounded_recursion_agrees(module, tmp_path: Path):
    depth = MAX_CALL_DEPTH // 2 - 10
    exe = irc.compile(module, cache_dir=str(tmp_path))
    assert exe.even(depth) == irc.interpret(module, "even", depth)
