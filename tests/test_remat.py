"""remat (passes/remat.py): recomputed gradients equal the plain ones bit for bit on the
interpreter, the planned peak falls to O(sqrt(n)) activations, the op count grows by about
one forward pass, and nothing with side effects is ever copied."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from irc.runtime.tensor_function import TensorOptions, tensor_pipeline

import irc
from irc.builder import Builder
from irc.cli import main as cli_main
from irc.passmanager import PassManager, parse_pipeline
from irc.testing.tensor_programs import random_tensor_program
from irc.types import TensorType, f32

_spec = importlib.util.spec_from_file_location(
    "remat_memory", Path(__file__).resolve().parents[1] / "benchmarks" / "remat_memory.py")
remat_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(remat_memory)


def chain(layers: int, shape=(4, 8), constant_weights: bool = False, seed: int = 0):
    """``@loss``: ``layers`` times h = tanh(h * w + b), w and b parameters (or constants)."""
    rng = np.random.default_rng(seed)
    t = TensorType(list(shape), f32)
    b = Builder()
    m = b.module()
    n_params = 1 if constant_weights else 1 + 2 * layers
    with b.function(m, "loss", [t] * n_params) as args:
        h = args[0]
        for i in range(layers):
            if constant_weights:
                w = b.const(np.float32(rng.uniform(0.5, 1.5)), t)
                c = b.const(np.float32(rng.uniform(-0.5, 0.5)), t)
            else:
                w, c = args[1 + 2 * i], args[2 + 2 * i]
            h = (h * w + c).tanh()
        b.ret(h)
    return m


def arguments(module, name: str, seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    fn = module.lookup(name)
    return [rng.standard_normal(t.shape).astype(np.float32) for t in fn.function_type.inputs]


def ops_of(module, name: str) -> list:
    return [op for op in module.lookup(name).walk() if op is not module.lookup(name)]


def remat_copy(module, pipeline: str):
    """The module after ``pipeline``, printed and parsed again (the ``remat`` marks round trip)."""
    copy = irc.parse(module.print())
    irc.passes.run(copy, pipeline)
    return irc.parse(copy.print())


@pytest.mark.parametrize("segments", [0, 2, 3, 5, 9])
def test_vjp_of_a_chain_is_bit_for_bit_the_same(segments):
    m = chain(9)
    irc.passes.run(m, "vjp{func=loss},canonicalize,cse")
    r = remat_copy(m, f"remat{{func=loss_vjp segments={segments}}}")
    if segments != 1:
        assert any("remat" in op.attributes for op in ops_of(r, "loss_vjp"))
    args = arguments(m, "loss_vjp")
    expected = irc.interpret(m, "loss_vjp", *args)
    got = irc.interpret(r, "loss_vjp", *args)
    assert len(expected) == len(got) == 20
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and np.array_equal(e, g)


def test_grad_option_remat_gives_the_same_gradient():
    m = chain(8, shape=(1,))  # a one-element result: grad needs no reduction rule
    plain = irc.parse(m.print())
    irc.passes.run(plain, "grad{func=loss}")
    irc.passes.run(m, "grad{func=loss remat=true}")
    assert any("remat" in op.attributes for op in ops_of(m, "loss_grad"))
    assert not any("remat" in op.attributes for op in ops_of(plain, "loss_grad"))
    args = arguments(m, "loss_grad")
    for e, g in zip(irc.interpret(plain, "loss_grad", *args), irc.interpret(m, "loss_grad", *args)):
        assert np.array_equal(e, g)


def test_recomputed_ops_come_before_their_backward_use_and_after_the_forward():
    m = chain(16, constant_weights=True)
    irc.passes.run(m, "vjp{func=loss},canonicalize,cse,remat{func=loss_vjp}")
    ops = [op for op in m.lookup("loss_vjp").body.entry.ops]
    position = {op: i for i, op in enumerate(ops)}
    copies = [op for op in ops if "remat" in op.attributes]
    originals = [op for op in ops if op.name == "math.tanh" and "remat" not in op.attributes]
    assert copies and len(originals) == 16
    last_forward = max(position[op] for op in originals)
    for op in copies:
        assert position[op] > last_forward
        assert all(position[u] > position[op] for r in op.results for u in r.users)


def planned_peak(module, func: str, remat: str | None) -> int:
    """The arena plan-memory gives ``func`` in irc.compile's tensor stages (remat before fusion)."""
    stats = {}
    for p in parse_pipeline(tensor_pipeline(TensorOptions(blas=False, math_approx=False))):
        if p.name == "fuse-elementwise" and remat is not None:
            PassManager(parse_pipeline(remat)).run(module)
        pm = PassManager([p])
        pm.run(module)
        stats.update(pm.statistics[0][1].counters)
        if p.name == "plan-memory":
            return stats[f"peak-bytes @{func}"]
    raise AssertionError("no plan-memory stage")


@pytest.mark.parametrize("layout", ["decreasing", "uniform"])
@pytest.mark.parametrize("layers", [16, 32])
def test_planned_peak_falls_to_about_two_sqrt_n_activations(layers, layout):
    shape = (32, 64)
    activation = 32 * 64 * 4
    plain, rematted = chain(layers, shape, constant_weights=True), chain(layers, shape, constant_weights=True)
    irc.passes.run(plain, "vjp{func=loss}")
    irc.passes.run(rematted, "vjp{func=loss}")
    without = planned_peak(plain, "loss_vjp", None)
    with_remat = planned_peak(rematted, "loss_vjp", f"remat{{func=loss_vjp layout={layout}}}")
    assert without >= (layers - 1) * activation  # every pre-activation waits for the backward
    assert with_remat < without
    bound = math.sqrt(2 * layers) + 1 if layout == "decreasing" else 2 * math.sqrt(layers)
    assert with_remat <= bound * activation


def test_op_count_grows_by_about_one_forward():
    layers = 25
    m = chain(layers, constant_weights=True)
    irc.passes.run(m, "vjp{func=loss},canonicalize,cse")
    forward = sum(1 for op in ops_of(m, "loss") if op.operands and op.name != "func.return")  # not constants
    assert forward == 3 * layers
    before = len(ops_of(m, "loss_vjp"))
    pm = PassManager(parse_pipeline("remat{func=loss_vjp}"))
    pm.run(m)
    added = len(ops_of(m, "loss_vjp")) - before
    assert added == pm.statistics[0][1].counters["ops-recomputed"]
    segments = pm.statistics[0][1].counters["segments"]
    assert segments == 7  # the least k with k(k+1)/2 >= 25 pre-activations alive across the turn
    # Every segment but the last (the smallest) runs again, less the layer that makes its
    # checkpoint (kept): forward - 3 * (segments - 1) - the last segment, never more.
    last_segment = math.ceil(layers / (segments * (segments + 1) // 2))  # layers in it
    assert forward - 3 * (segments - 1) - 3 * last_segment <= added <= forward - 3 * (segments - 1)


def test_ops_with_side_effects_are_never_copied():
    """A call is not pure: its result is kept, not recomputed, and the call runs once."""
    t = TensorType([4, 8], f32)
    b = Builder()
    m = b.module()
    with b.function(m, "layer", [t, t]) as (h, w):
        b.ret((h * w).tanh())
    with b.function(m, "loss", [t] * 10) as args:
        h = args[0]
        for i in range(9):
            h = b.call("layer", h, args[1 + i], results=[t]) if i % 3 == 1 else (h * args[1 + i]).tanh()
        b.ret(h)
    irc.passes.run(m, "vjp{func=loss}")
    calls = sum(op.name == "func.call" for op in ops_of(m, "loss_vjp"))
    r = remat_copy(m, "remat{func=loss_vjp segments=3}")
    assert any("remat" in op.attributes for op in ops_of(r, "loss_vjp"))
    assert sum(op.name == "func.call" for op in ops_of(r, "loss_vjp")) == calls
    args = arguments(m, "loss_vjp")
    for e, g in zip(irc.interpret(m, "loss_vjp", *args), irc.interpret(r, "loss_vjp", *args)):
        assert np.array_equal(e, g)


@pytest.mark.parametrize("seed", range(12))
def test_any_function_keeps_its_results(seed):
    """remat is a plain IR-to-IR pass: random tensor graphs (matmuls, reductions, softmax...)
    give the same results bit for bit, whatever it decides to recompute."""
    program = random_tensor_program(seed, 16)
    m = irc.parse(program.text)
    args = program.arguments()
    for segments in (0, 2, 4):
        r = remat_copy(m, f"remat{{segments={segments}}}")
        for e, g in zip(irc.interpret(m, "f", *args), irc.interpret(r, "f", *args)):
            assert np.array_equal(e, g, equal_nan=True)


def test_cse_does_not_merge_the_copies_back():
    m = chain(9)
    irc.passes.run(m, "vjp{func=loss},canonicalize,cse,remat{func=loss_vjp}")
    copies = sum("remat" in op.attributes for op in ops_of(m, "loss_vjp"))
    irc.passes.run(m, "cse")
    assert copies and sum("remat" in op.attributes for op in ops_of(m, "loss_vjp")) == copies


def test_bad_options_are_usage_errors_and_unknown_functions_diagnostics(tmp_path, capsys):
    path = tmp_path / "f.ir"
    path.write_text(chain(2).print())
    assert cli_main(["opt", str(path), "-p", "remat{segments=-1}"]) == 2
    assert "segments" in capsys.readouterr().err
    assert cli_main(["opt", str(path), "-p", "remat{func=nope}"]) == 1
    assert "@nope" in capsys.readouterr().err
    assert cli_main(["opt", str(path), "-p", "remat{func=loss}", "-o", str(tmp_path / "out.ir")]) == 0


def test_random_graphs_do_get_recomputed():
    """The test above is not vacuous: most random graphs have something to recompute."""
    changed = 0
    for seed in range(12):
        r = remat_copy(irc.parse(random_tensor_program(seed, 16).text), "remat")
        changed += any("remat" in op.attributes for op in ops_of(r, "f"))
    assert changed >= 8


def test_compiled_remat_gradient_matches_the_interpreter():
    m = chain(12, shape=(8, 16))
    irc.passes.run(m, "vjp{func=loss},canonicalize,cse,remat{func=loss_vjp}")
    args = arguments(m, "loss_vjp")
    expected = irc.interpret(m, "loss_vjp", *args)
    got = irc.compile(m, threads=1).loss_vjp(*args)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)


def test_mlp_training_step_keeps_its_bits():
    """A training step with matmuls, broadcasts, softmax and reductions (backward by hand)."""
    m, name = remat_memory.mlp_step_by_hand(9, width=8, batch=6, classes=3)
    r = remat_copy(m, f"canonicalize,cse,remat{{func={name}}}")
    assert sum("remat" in op.attributes for op in ops_of(r, name)) >= 9
    assert any(op.name == "graph.matmul" and "remat" in op.attributes for op in ops_of(r, name))
    args = arguments(m, name)
    for e, g in zip(irc.interpret(m, name, *args), irc.interpret(r, name, *args)):
        assert np.array_equal(e, g)


def test_mlp_peak_falls_when_activations_outgrow_the_parameters():
    """With the batch much larger than the width, the new parameters (outputs) cannot hold the
    activations: remat must cut the arena to about 2*sqrt(layers) activations."""
    layers, width, batch = 16, 16, 512
    activation = width * batch * 4
    plain = remat_memory.planned(lambda: remat_memory.mlp_step_by_hand(layers, width, batch), None, blas=False)
    cut = remat_memory.planned(lambda: remat_memory.mlp_step_by_hand(layers, width, batch), "", blas=False)
    assert plain["peak"] >= (layers - 2) * activation
    assert cut["peak"] <= 2 * math.sqrt(layers) * activation < plain["peak"]
