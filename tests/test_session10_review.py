"""Review of the changes since 90f6fc8: exe.f's generated fast entry, memref.prefetch compiled."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import irc

ADD = """
func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  %r = arith.addf %a, %a : tensor<?xf32>
  func.return %r : tensor<?xf32>
}
"""


@pytest.mark.parametrize("with_out", [False, True])
def test_a_dropped_executable_is_freed_without_a_collection_after_fast_calls(with_out):
    """The specialisation's generated entries must not make cycles with what they call for a
    refusal.  Specialization.entry held its TensorFunction strongly (TensorFunction ->
    specialisation -> entry -> TensorFunction), so an executable dropped after two calls kept
    its machine code (and arenas) until the cyclic collector ran (after one call, through the
    checked path only, it was freed); Specialization.out_entry (``out=``) held its
    specialisation in a default argument of its refusal path (found in session 15's review)."""
    gc.disable()
    try:
        exe = irc.compile(irc.parse(ADD), cache=False)
        x, o = np.ones(3, np.float32), np.empty(3, np.float32)
        for _ in range(3):  # the first call specialises; the later ones go through the entry
            np.testing.assert_array_equal(exe.f(x, out=o) if with_out else exe.f(x), 2 * x)
        spec = next(iter(exe.f._specializations.values()))
        assert (spec.out_entry if with_out else spec.entry) is not None
        function, machine_code = weakref.ref(exe.f), weakref.ref(spec.executable)
        del exe, spec
        assert function() is None and machine_code() is None
    finally:
        gc.enable()


def test_a_function_without_inputs_takes_out():
    """A tensor function of no parameters called with ``out=``: its generated entry had been
    ``def _entry(, out):``, a SyntaxError at the second call (session 15's review)."""
    exe = irc.compile(irc.parse("""
func.func @c() -> tensor<3xf32> {
  %q = arith.constant dense<2.0> : tensor<3xf32>
  func.return %q : tensor<3xf32>
}
"""), cache=False)
    o = np.zeros(3, np.float32)
    for _ in range(3):
        assert exe.c(out=o) is o
        np.testing.assert_array_equal(o, [2, 2, 2])
        o[...] = 0
    np.testing.assert_array_equal(exe.c(out=np.zeros(4, np.float32)[:3]), [2, 2, 2])  # a view: the full way


def test_the_entry_still_hands_refused_buffers_to_the_checked_path():
    exe = irc.compile(irc.parse(ADD), cache=False)
    x = np.arange(8, dtype=np.float32)
    exe.f(x[:4].copy())
    frozen = x[:4].copy()
    frozen.flags.writeable = False
    for a in (x[::2], frozen, x[:4]):
        np.testing.assert_array_equal(exe.f(a), 2 * a)
