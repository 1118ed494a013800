"""Reverse and forward mode through loops, branches, phis and calls, against finite differences.

Each program in tests/autodiff/ is also written in Python below (the reference), so the
gradient is checked against central differences of an independent implementation, on the
interpreter and compiled, and the compiled gradient must equal the interpreted one bit for bit.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import irc
from irc.testing.grad_check import check_program

HERE = Path(__file__).parent / "autodiff"


def cfg_loop(x, n):
    a = 1.0
    for _ in range(n):
        a = a * x
        a = a + math.sin(a)
    return a


def scf_loops(x, y, n):
    a = x
    for _ in range(n):
        t = a * y
        a = math.cos(t) if t > 0.5 else t * t + y
    v = a
    while v < 10:
        v = v * 2 + x
    return v


def recursive(x, n):
    return x if n == 0 else math.sin(recursive(x, n - 1)) * x


def central(f, args, i, h=1e-6):
    hi, lo = list(args), list(args)
    hi[i] += h
    lo[i] -= h
    return (f(*hi) - f(*lo)) / (2 * h)


CASES = [
    ("cfg_loop", "pow_loop", cfg_loop, [(0.9, 3), (0.3, 0), (-1.2, 7)], [0]),
    ("scf_loops", "f", scf_loops, [(0.6, 0.8, 5), (0.1, 0.2, 3), (1.5, -0.7, 0)], [0, 1]),
    ("recursive", "r", recursive, [(1.1, 4), (0.4, 0), (-0.8, 6)], [0]),
]


@pytest.mark.parametrize("file,func,reference,points,float_params", CASES, ids=[c[0] for c in CASES])
def test_reverse_mode_matches_differences(file, func, reference, points, float_params):
    module = irc.parse_file(str(HERE / f"{file}.ir"))
    irc.passes.run(module, f"grad{{func={func}}}")
    exe = irc.compile(module)
    for point in points:
        interp = irc.interpret(module, f"{func}_grad", *point)
        compiled = getattr(exe, f"{func}_grad")(*point)
        assert [np.float64(v).tobytes() for v in interp] == [np.float64(v).tobytes() for v in compiled]
        assert interp[0] == pytest.approx(reference(*point), rel=1e-12)
        for g, i in zip(interp[1:], float_params):
            assert g == pytest.approx(central(reference, point, i), rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("file,func,reference,points,float_params", CASES, ids=[c[0] for c in CASES])
def test_forward_mode_matches_reverse(file, func, reference, points, float_params):
    module = irc.parse_file(str(HERE / f"{file}.ir"))
    irc.passes.run(module, f"grad{{func={func}}},jvp{{func={func}}}")
    for point in points:
        grads = irc.interpret(module, f"{func}_grad", *point)[1:]
        for k in range(len(float_params)):
            direction = [1.0 if j == k else 0.0 for j in range(len(float_params))]
            tangent = irc.interpret(module, f"{func}_jvp", *point, *direction)[-1]
            assert tangent == pytest.approx(grads[k], rel=1e-12, abs=1e-15)


def test_the_tape_is_explicit_ir():
    """The counting run, the tape buffers and the adjoint loop are ordinary ops in the output."""
    module = irc.parse_file(str(HERE / "scf_loops.ir"))
    irc.passes.run(module, "grad{func=f}")
    text = str(module)
    grad = text[text.index("@f_grad"):]
    assert grad.count("memref.alloc(") >= 2  # the trace and at least one value tape
    assert "memref.dealloc" in grad
    assert "scf." not in grad.split("func.func")[0]  # the taped function is a CFG
    assert "func.call @sq_vjp" in text


def test_second_derivative_through_a_call():
    text = """
    func.func @g(%x: f64) -> f64 {
      %s = math.sin %x : f64
      %y = arith.mulf %s, %x : f64
      func.return %y : f64
    }
    func.func @f(%x: f64) -> f64 {
      %y = func.call @g(%x) : (f64) -> f64
      %z = math.exp %y : f64
      func.return %z : f64
    }
    """
    module = irc.parse(text)
    irc.passes.run(module, "grad{func=f},grad{func=f_grad result=1 name=f_hess}")

    def f(x):
        return math.exp(math.sin(x) * x)

    def df(x):
        return central(f, [x], 0, 1e-6)

    for x in (0.3, -1.1, 2.0):
        _, d1, d2 = irc.interpret(module, "f_hess", x)
        assert d1 == pytest.approx(df(x), rel=1e-7)
        assert d2 == pytest.approx(central(df, [x], 0, 1e-4), rel=1e-5)


@pytest.mark.parametrize("seed", range(0, 400, 40))
def test_random_programs(seed):
    """Random CFG/scf/call programs: the gradient verifies, runs on both engines alike and
    matches finite differences where the program is smooth."""
    outcome = check_program(seed, compiled=seed % 80 == 0)
    assert not outcome.failures, outcome.failures


def test_a_float_store_is_a_diagnostic_not_a_zero():
    text = """
    func.func @f(%x: f64, %m: memref<1xf64>) -> f64 {
      %c0 = arith.constant 0 : index
      memref.store %x, %m[%c0] : memref<1xf64>
      %y = memref.load %m[%c0] : memref<1xf64>
      func.return %y : f64
    }
    """
    module = irc.parse(text, "store.ir")
    with pytest.raises(irc.IRError) as info:
        irc.passes.run(module, "grad{func=f}")
    assert "memref.store" in str(info.value)
    assert (info.value.location.line, info.value.location.column) == (4, 7)


def test_a_tensor_in_a_cfg_loop_is_a_diagnostic():
    """The tape holds scalars; tensors in scf loops are differentiated structurally instead
    (tests/test_autodiff_tensor_control_flow.py), tensors through cf phis not at all."""
    text = """
    func.func @f(%x: tensor<4xf64>, %n: index) -> tensor<4xf64> {
    ^entry:
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      cf.br ^head
    ^head:
      %i = cf.phi [%c0, ^entry], [%i1, ^body] : index
      %a = cf.phi [%x, ^entry], [%b, ^body] : tensor<4xf64>
      %more = arith.cmpi slt, %i, %n : index
      cf.cond_br %more, ^body, ^exit
    ^body:
      %b = arith.mulf %a, %a : tensor<4xf64>
      %i1 = arith.addi %i, %c1 : index
      cf.br ^head
    ^exit:
      func.return %a : tensor<4xf64>
    }
    """
    module = irc.parse(text)
    with pytest.raises(irc.IRError, match="hold scalars only"):
        irc.passes.run(module, "vjp{func=f}")


def test_taped_gradient_round_trips_and_refuses_a_second_derivative():
    module = irc.parse_file(str(HERE / "scf_loops.ir"))
    irc.passes.run(module, "grad{func=f}")
    again = irc.parse(str(module))
    point = (0.6, 0.8, 5)
    assert irc.interpret(again, "f_grad", *point) == irc.interpret(module, "f_grad", *point)
    with pytest.raises(irc.IRError, match="keeps a tape in memory"):
        irc.passes.run(again, "grad{func=f_grad result=1}")


def test_reverse_mode_refuses_a_function_that_writes_memory():
    """Its gradient runs the forward again (a taped loop twice, a callee's _vjp once more)."""
    text = """
    func.func @g(%x: f64, %m: memref<1xi64>) -> f64 {
      %c0 = arith.constant 0 : index
      %k = memref.load %m[%c0] : memref<1xi64>
      %c1 = arith.constant 1 : i64
      %k1 = arith.addi %k, %c1 : i64
      memref.store %k1, %m[%c0] : memref<1xi64>
      %y = math.sin %x : f64
      func.return %y : f64
    }
    func.func @f(%x: f64, %m: memref<1xi64>) -> f64 {
      %y = func.call @g(%x, %m) : (f64, memref<1xi64>) -> f64
      func.return %y : f64
    }
    """
    module = irc.parse(text)
    before = str(module)
    with pytest.raises(irc.IRError, match="writes memory"):
        irc.passes.run(module, "grad{func=f}")
    assert str(module) == before  # a refused request adds nothing (here: no half-built @f_grad)
    irc.passes.run(module, "jvp{func=f}")  # forward mode runs the forward once: fine
