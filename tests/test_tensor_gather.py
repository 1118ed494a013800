"""``graph.gather`` (numpy's take): the interpreter against numpy, compiled code against the
interpreter, the text form round trip, and the verifier's messages."""

from __future__ import annotations

import numpy as np
import pytest

import irc

PROGRAM = """
func.func @f(%t: tensor<{table}xf32>, %i: tensor<{idx}xi64>) -> tensor<{out}xf32> {{
  %r = graph.gather %t, %i {{axis = {axis}}} : (tensor<{table}xf32>, tensor<{idx}xi64>) -> tensor<{out}xf32>
  func.return %r : tensor<{out}xf32>
}}
"""


def program(table, idx, axis):
    out = [*table[:axis], *idx, *table[axis + 1:]]
    return PROGRAM.format(table="x".join(map(str, table)), idx="x".join(map(str, idx)),
                          out="x".join(map(str, out)), axis=axis)


@pytest.mark.parametrize("table, idx, axis", [((10, 4), (2, 3), 0), ((3, 7, 2), (5,), 1), ((4, 6), (2, 2), 1)])
def test_gather_matches_numpy_take_interpreted_and_compiled(table, idx, axis):
    rng = np.random.default_rng(0)
    t = rng.standard_normal(table).astype(np.float32)
    i = rng.integers(0, table[axis], idx).astype(np.int64)
    module = irc.parse(program(table, idx, axis))
    want = np.take(t, i, axis=axis)
    np.testing.assert_array_equal(irc.interpret(module, "f", t, i), want)
    np.testing.assert_array_equal(irc.compile(module).f(t, i), want)


def test_gather_round_trips():
    text = program((10, 4), (2, 3), 0)
    assert irc.parse(irc.parse(text).print()).print() == irc.parse(text).print()


@pytest.mark.parametrize("bad", [4, -1, 2**40])
def test_gather_out_of_range_is_the_same_fault_interpreted_and_compiled(bad):
    """Compiled code faults where the interpreter does, with its message, rather than read
    outside the table (or clamp, which would give an answer the interpreter does not)."""
    module = irc.parse(program((4, 2), (3,), 0))
    table, idx = np.zeros((4, 2), np.float32), np.array([0, bad, 1])
    with pytest.raises(Exception, match=r"out of range \[0, 4\) for axis 0") as interpreted:
        irc.interpret(module, "f", table, idx)
    with pytest.raises(Exception, match=r"out of range \[0, 4\) for axis 0") as compiled:
        irc.compile(module).f(table, idx)
    assert str(compiled.value.location) == str(interpreted.value.location)  # the gather's own line


def test_gather_verifier_names_the_wrong_shape():
    bad = program((10, 4), (2, 3), 0).replace("xi64>) -> tensor<2x3x4xf32>", "xi64>) -> tensor<2x4xf32>")
    with pytest.raises(irc.IRError, match="tensor<2x3x4xf32>"):
        irc.parse(bad)
