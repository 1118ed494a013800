"""``graph.broadcast``'s fold (a non-splat constant is no longer copied into a larger
constant): canonicalize still reaches a fixpoint on programs where broadcast constants meet the
graph ops that fold constants, and computes what the interpreter computes before it."""

from __future__ import annotations

import numpy as np
import pytest

import irc
from irc.printer import print_module

C4 = "%a = arith.constant dense<[1.0, -2.0, 3.0, 4.5]> : tensor<4xf32>"
C3 = "%c = arith.constant dense<[[0.5], [2.0], [-1.0]]> : tensor<3x1xf32>"
B = "%b = graph.broadcast %a : tensor<4xf32> to tensor<3x4xf32>"
BODIES = {
    "add two broadcasts": [C4, C3, B, "%d = graph.broadcast %c : tensor<3x1xf32> to tensor<3x4xf32>",
                           "%s = arith.addf %b, %d : tensor<3x4xf32>", "%r = arith.mulf %s, %x : tensor<3x4xf32>"],
    "broadcast of broadcast": [C4, "%e = graph.broadcast %a : tensor<4xf32> to tensor<2x4xf32>",
                               "%b = graph.broadcast %e : tensor<2x4xf32> to tensor<3x2x4xf32>",
                               "%t = graph.reduce_sum %b {axes = [1]} : tensor<3x2x4xf32> to tensor<3x4xf32>",
                               "%r = arith.addf %t, %x : tensor<3x4xf32>"],
    "transpose twice": [C4, B, "%t = graph.transpose %b {perm = [1, 0]} : tensor<3x4xf32> to tensor<4x3xf32>",
                        "%u = graph.transpose %t {perm = [1, 0]} : tensor<4x3xf32> to tensor<3x4xf32>",
                        "%r = arith.subf %x, %u : tensor<3x4xf32>"],
    "reshape and slice": [C4, B, "%t = graph.reshape %b : tensor<3x4xf32> to tensor<12xf32>",
                          "%u = graph.reshape %t : tensor<12xf32> to tensor<3x4xf32>",
                          "%v = graph.slice %u {offsets = [0, 0], sizes = [3, 4], strides = [1, 1]} "
                          ": tensor<3x4xf32> to tensor<3x4xf32>", "%r = arith.maximumf %x, %v : tensor<3x4xf32>"],
    "times zero and one": [C4, B, "%z = arith.constant dense<0.0> : tensor<3x4xf32>",
                           "%o = arith.constant dense<1.0> : tensor<3x4xf32>",
                           "%p = arith.mulf %b, %o : tensor<3x4xf32>", "%q = arith.addf %p, %z : tensor<3x4xf32>",
                           "%w = arith.addf %q, %b : tensor<3x4xf32>", "%r = arith.divf %w, %x : tensor<3x4xf32>"],
    "same broadcast twice": [C4, B, "%b2 = graph.broadcast %a : tensor<4xf32> to tensor<3x4xf32>",
                             "%s = arith.subf %b, %b2 : tensor<3x4xf32>", "%r = arith.addf %s, %x : tensor<3x4xf32>"],
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_canonicalize_reaches_a_fixpoint_and_keeps_the_values(case):
    body = "\n  ".join(BODIES[case])
    text = (f"func.func @f(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {{\n  {body}\n"
            f"  func.return %r : tensor<3x4xf32>\n}}\n")
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 3
    want = irc.interpret(irc.parse(text), "f", x)
    once = irc.passes.run(irc.parse(text), "canonicalize,cse")
    twice = irc.passes.run(irc.parse(print_module(once)), "canonicalize,cse")
    assert print_module(twice) == print_module(once)
    np.testing.assert_array_equal(irc.interpret(once, "f", x), want)
    np.testing.assert_array_equal(irc.compile(once).f(x), want)
