"""The GPU target without a GPU: the gpu dialect (round trips, the exclusive memory rule), the
interpreter's grid simulation (barriers, shared memory, shuffles) against numpy, the GPU
pipeline run on the interpreter against the source program, PTX assembled by ptxas, the CLI,
and the pycuda driver skipping cleanly where there is no driver."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from irc.runtime import gpu

import irc
from irc.diagnostics import InterpreterError, IRError

PTXAS = shutil.which("ptxas")
EXAMPLES = Path(__file__).parent.parent / "examples"

ROWSUM = """
gpu.module {sym_name = "kernels"} ({
  gpu.func {sym_name = "rowsum", function_type = (memref<4x8xf32, gpu>, memref<4xf32, gpu>) -> (), kernel} ({
  ^bb0(%a: memref<4x8xf32, gpu>, %out: memref<4xf32, gpu>):
    %row = gpu.block_id x
    %t = gpu.thread_id x
    %s = memref.alloca() : memref<8xf32, workgroup>
    %v = memref.load %a[%row, %t] : memref<4x8xf32, gpu>
    memref.store %v, %s[%t] : memref<8xf32, workgroup>
    gpu.barrier
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %is0 = arith.cmpi eq, %t, %c0 : index
    scf.if %is0 {
      %z = arith.constant 0.0 : f32
      %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%acc = %z) -> (f32) {
        %x = memref.load %s[%i] : memref<8xf32, workgroup>
        %acc1 = arith.addf %acc, %x : f32
        scf.yield %acc1 : f32
      }
      memref.store %sum, %out[%row] : memref<4xf32, gpu>
    }
    gpu.return
  })
})

func.func @main(%h: memref<4x8xf32>, %ho: memref<4xf32>) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %d = gpu.alloc() : memref<4x8xf32, gpu>
  %o = gpu.alloc() : memref<4xf32, gpu>
  gpu.memcpy %d, %h : memref<4x8xf32, gpu>, memref<4x8xf32>
  gpu.launch_func @rowsum(%c4, %c1, %c1, %c8, %c1, %c1, %d, %o) {module = @kernels} : memref<4x8xf32, gpu>, memref<4xf32, gpu>
  gpu.memcpy %ho, %o : memref<4xf32>, memref<4xf32, gpu>
  gpu.dealloc %d : memref<4x8xf32, gpu>
  gpu.dealloc %o : memref<4xf32, gpu>
  gpu.wait
  func.return
}
"""

# A warp sum by a butterfly of shuffles: every lane ends with the sum of the 32 values.
WARPSUM = """
gpu.module {sym_name = "kernels"} ({
  gpu.func {sym_name = "warpsum", function_type = (memref<64xf32, gpu>, memref<64xf32, gpu>) -> (), kernel} ({
  ^bb0(%a: memref<64xf32, gpu>, %out: memref<64xf32, gpu>):
    %t = gpu.thread_id x
    %v = memref.load %a[%t] : memref<64xf32, gpu>
    %w = arith.constant 32 : i32
    %o16 = arith.constant 16 : i32
    %o8 = arith.constant 8 : i32
    %o4 = arith.constant 4 : i32
    %o2 = arith.constant 2 : i32
    %o1 = arith.constant 1 : i32
    %s16, %ok16 = gpu.shuffle xor, %v, %o16, %w : f32
    %v16 = arith.addf %v, %s16 : f32
    %s8, %ok8 = gpu.shuffle xor, %v16, %o8, %w : f32
    %v8 = arith.addf %v16, %s8 : f32
    %s4, %ok4 = gpu.shuffle xor, %v8, %o4, %w : f32
    %v4 = arith.addf %v8, %s4 : f32
    %s2, %ok2 = gpu.shuffle xor, %v4, %o2, %w : f32
    %v2 = arith.addf %v4, %s2 : f32
    %s1, %ok1 = gpu.shuffle xor, %v2, %o1, %w : f32
    %v1 = arith.addf %v2, %s1 : f32
    memref.store %v1, %out[%t] : memref<64xf32, gpu>
    gpu.return
  })
})

func.func @main(%h: memref<64xf32>, %ho: memref<64xf32>) {
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %d = gpu.alloc() : memref<64xf32, gpu>
  %o = gpu.alloc() : memref<64xf32, gpu>
  gpu.memcpy %d, %h : memref<64xf32, gpu>, memref<64xf32>
  gpu.launch_func @warpsum(%c1, %c1, %c1, %c64, %c1, %c1, %d, %o) {module = @kernels} : memref<64xf32, gpu>, memref<64xf32, gpu>
  gpu.memcpy %ho, %o : memref<64xf32>, memref<64xf32, gpu>
  gpu.dealloc %d : memref<64xf32, gpu>
  gpu.dealloc %o : memref<64xf32, gpu>
  func.return
}
"""

TENSOR_PROGRAMS = {
    "tanh_rowsum": """
func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4xf32> {
  %m = arith.mulf %a, %b : tensor<4x8xf32>
  %t = math.tanh %m : tensor<4x8xf32>
  %s = graph.reduce_sum %t {axes = [1]} : tensor<4x8xf32> to tensor<4xf32>
  func.return %s : tensor<4xf32>
}""",
    "mlp_softmax": """
func.func @f(%x: tensor<16x32xf32>, %w1: tensor<32x64xf32>, %b1: tensor<64xf32>, %w2: tensor<64x10xf32>)
    -> tensor<16x10xf32> {
  %h = graph.matmul %x, %w1 : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  %bias = graph.broadcast %b1 : tensor<64xf32> to tensor<16x64xf32>
  %pre = arith.addf %h, %bias : tensor<16x64xf32>
  %g = math.erf %pre : tensor<16x64xf32>
  %logits = graph.matmul %g, %w2 : (tensor<16x64xf32>, tensor<64x10xf32>) -> tensor<16x10xf32>
  %p = graph.softmax %logits {axis = 1} : tensor<16x10xf32>
  func.return %p : tensor<16x10xf32>
}""",
    "sigmoid_fma_1d": """
func.func @f(%a: tensor<1000xf32>, %b: tensor<1000xf32>, %c: tensor<1000xf32>) -> tensor<1000xf32> {
  %m = arith.mulf %a, %b : tensor<1000xf32>
  %s = arith.addf %m, %c : tensor<1000xf32>
  %n = arith.negf %s : tensor<1000xf32>
  %e = math.exp %n : tensor<1000xf32>
  %one = arith.constant dense<1.0> : tensor<1000xf32>
  %d = arith.addf %one, %e : tensor<1000xf32>
  %r = arith.divf %one, %d : tensor<1000xf32>
  func.return %r : tensor<1000xf32>
}""",
    "matmul_transposed_ragged": """
func.func @f(%a: tensor<20x33xf32>, %b: tensor<17x33xf32>) -> tensor<20x17xf32> {
  %bt = graph.transpose %b {perm = [1, 0]} : tensor<17x33xf32> to tensor<33x17xf32>
  %c = graph.matmul %a, %bt : (tensor<20x33xf32>, tensor<33x17xf32>) -> tensor<20x17xf32>
  func.return %c : tensor<20x17xf32>
}""",
    "row_stats": """
func.func @f(%x: tensor<6x100xf32>) -> (tensor<6xf32>, tensor<6xf32>, tensor<6x100xf32>) {
  %mean = graph.reduce_mean %x {axes = [1]} : tensor<6x100xf32> to tensor<6xf32>
  %top = graph.reduce_max %x {axes = [1]} : tensor<6x100xf32> to tensor<6xf32>
  %p = graph.log_softmax %x {axis = 1} : tensor<6x100xf32>
  func.return %mean, %top, %p : tensor<6xf32>, tensor<6xf32>, tensor<6x100xf32>
}""",
    "reductions_over_any_axes": """
func.func @f(%x: tensor<6x5x7xf32>) -> (tensor<5xf32>, tensor<6x1x7xf32>, tensor<7xf32>) {
  %a = graph.reduce_sum %x {axes = [0, 2]} : tensor<6x5x7xf32> to tensor<5xf32>
  %b = graph.reduce_max %x {axes = [1], keepdims} : tensor<6x5x7xf32> to tensor<6x1x7xf32>
  %c = graph.reduce_mean %x {axes = [0, 1]} : tensor<6x5x7xf32> to tensor<7xf32>
  func.return %a, %b, %c : tensor<5xf32>, tensor<6x1x7xf32>, tensor<7xf32>
}""",
    "broadcasts_3d": """
func.func @f(%x: tensor<6x5x7xf32>, %b: tensor<7xf32>, %c: tensor<6x1x7xf32>) -> tensor<6x5x7xf32> {
  %bb = graph.broadcast %b : tensor<7xf32> to tensor<6x5x7xf32>
  %cb = graph.broadcast %c : tensor<6x1x7xf32> to tensor<6x5x7xf32>
  %s = arith.addf %x, %bb : tensor<6x5x7xf32>
  %t = arith.mulf %s, %cb : tensor<6x5x7xf32>
  func.return %t : tensor<6x5x7xf32>
}""",
}

_EMITTED_PTX: list[tuple[str, str, int]] = []  # (what, PTX, sm): every kernel this suite renders


def _ptx(what: str, lowered, sm: int = 90) -> str:
    ptx = gpu.render_ptx(lowered, sm)
    _EMITTED_PTX.append((what, ptx, sm))
    return ptx


def _arguments(func, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, t.shape).astype(np.float32) for t in func.function_type.inputs]


def _close(expected, got):
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=3e-4, atol=3e-5)


# -- the dialect -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [ROWSUM, WARPSUM])
def test_round_trip_readable_and_generic(text):
    m = irc.parse(text)
    m.verify()
    printed = m.print()
    assert irc.parse(printed).print() == printed
    generic = m.print(generic=True)
    assert irc.parse(generic).print() == printed


def test_lowered_programs_round_trip():
    for text in TENSOR_PROGRAMS.values():
        printed = gpu.lower(irc.parse(text)).print()
        assert irc.parse(printed).print() == printed


_LAUNCH_READING_HOST = """gpu.launch %c1, %c1, %c1, %c1, %c1, %c1 ({
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index, %i4: index, %i5: index, %i6: index, %i7: index,
       %i8: index, %i9: index, %i10: index, %i11: index):
    %x = memref.load %h[%c1, %c1] : memref<4x8xf32>
    gpu.terminator
  })
  gpu.wait"""

INVALID = [
    # (text in ROWSUM, its replacement, the expected message, text on the line it is reported at)
    ("gpu.wait", _LAUNCH_READING_HOST, "a kernel touches host memory", "%x = memref.load %h"),
    ("gpu.memcpy %d, %h : memref<4x8xf32, gpu>, memref<4x8xf32>",
     "gpu.memcpy %d, %h : memref<4x8xf32, gpu>, memref<4x8xf32>\n  %peek = memref.load %d[%c1, %c1] : "
     "memref<4x8xf32, gpu>", "host code touches device memory", "%peek ="),
    ("%d, %o) {module = @kernels} : memref<4x8xf32, gpu>", "%h, %o) {module = @kernels} : memref<4x8xf32>",
     "passes host memory", "gpu.launch_func"),
    ("gpu.memcpy %ho, %o : memref<4xf32>, memref<4xf32, gpu>", "gpu.memcpy %ho, %ho : memref<4xf32>, memref<4xf32>",
     "copies host to host", "gpu.memcpy %ho, %ho"),
    ("gpu.barrier", "gpu.barrier\n    gpu.dealloc %a : memref<4x8xf32, gpu>", "is host code", "gpu.dealloc %a"),
    ("%c1 = arith.constant 1 : index\n  %c4", "%c1 = arith.constant 1 : index\n  %bad = gpu.thread_id x\n  %c4",
     "is device code", "%bad ="),
    ("workgroup>", "shared>", "unknown memory space", "memref.store %v, %s"),
]


@pytest.mark.parametrize("old,new,message,marker", INVALID)
def test_exclusive_rule_is_a_diagnostic_at_the_op(old, new, message, marker):
    assert old in ROWSUM
    text = ROWSUM.replace(old, new)
    with pytest.raises(IRError) as info:
        irc.parse(text).verify()
    assert message in str(info.value)
    assert marker in text.splitlines()[info.value.location.line - 1]


# -- the interpreter simulates the grid --------------------------------------------------------


def test_shared_memory_and_barrier_per_block():
    a = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    out = np.zeros(4, np.float32)
    irc.interpret(irc.parse(ROWSUM), "main", a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-6)


def test_shuffle_butterfly_sums_each_warp():
    a = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    irc.interpret(irc.parse(WARPSUM), "main", a, out)
    expected = np.repeat([a[:32].sum(), a[32:].sum()], 32)
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_barrier_skipped_by_some_threads_is_reported():
    text = ROWSUM.replace("""    gpu.barrier
""", "").replace("""      memref.store %sum, %out[%row] : memref<4xf32, gpu>""", """      memref.store %sum, %out[%row] : memref<4xf32, gpu>
      gpu.barrier""")
    with pytest.raises(InterpreterError, match="barrier"):
        irc.interpret(irc.parse(text), "main", np.zeros((4, 8), np.float32), np.zeros(4, np.float32))


def test_launch_the_device_cannot_run_is_a_fault():
    text = ROWSUM.replace("%c8 = arith.constant 8 : index\n  %d", "%c8 = arith.constant 2048 : index\n  %d")
    with pytest.raises(InterpreterError, match="outside what a device runs"):
        irc.interpret(irc.parse(text), "main", np.zeros((4, 8), np.float32), np.zeros(4, np.float32))


def test_fault_in_a_kernel_thread_is_reported_at_the_op():
    text = ROWSUM.replace("%v = memref.load %a[%row, %t]", "%t9 = arith.addi %t, %c1k : index\n"
                          "    %v = memref.load %a[%row, %t9]").replace(
        "%t = gpu.thread_id x", "%t = gpu.thread_id x\n    %c1k = arith.constant 1 : index")
    with pytest.raises(InterpreterError, match="out of bounds"):
        irc.interpret(irc.parse(text), "main", np.zeros((4, 8), np.float32), np.zeros(4, np.float32))


# -- the GPU pipeline on the interpreter equals the source program ------------------------------


@pytest.mark.parametrize("name", sorted(TENSOR_PROGRAMS))
def test_gpu_lowered_program_computes_the_source_results(name):
    source = irc.parse(TENSOR_PROGRAMS[name])
    lowered = gpu.lower(source)
    f = source.functions[0]
    args = _arguments(f)
    _close(irc.interpret(source, "f", *args), irc.interpret(lowered, "f", *args))
    lowered_f = lowered.function("f")
    assert lowered_f.function_type == f.function_type  # the host function keeps its name and signature
    kinds = {op.name for op in lowered_f.walk()}
    assert "gpu.launch_func" in kinds and "gpu.memcpy" in kinds
    assert not kinds & {"memref.load", "memref.store", "scf.for"}  # every buffer access is in a kernel
    _ptx(name, lowered)


def _kernel_ops(lowered) -> set:
    return {op.name if op.name != "memref.alloca" else str(op.results[0].type).split(", ")[-1]
            for mod in lowered.body.ops if mod.name == "gpu.module" for op in mod.walk()}


def test_softmax_and_reductions_run_one_block_per_row_with_a_shared_tree():
    lowered = gpu.lower(irc.parse(TENSOR_PROGRAMS["row_stats"]))
    ops = _kernel_ops(lowered)
    assert {"gpu.barrier", "workgroup>", "gpu.shuffle"} <= ops  # shared-memory levels, then one warp's shuffles
    launches = [op for op in lowered.function("f").walk() if op.name == "gpu.launch_func"]
    grids = {tuple(v.defining_op.attributes["value"].value for v in op.sizes) for op in launches}
    assert (6, 1, 1, 128, 1, 1) in grids  # six rows of 100: one block each, 128 threads


def test_matmul_is_a_shared_memory_tiled_kernel():
    lowered = gpu.lower(irc.parse(TENSOR_PROGRAMS["matmul_transposed_ragged"]))
    launch = next(op for op in lowered.function("f").walk() if op.name == "gpu.launch_func")
    grid = [v.defining_op.attributes["value"].value for v in launch.sizes]
    assert grid == [2, 2, 1, 16, 16, 1]  # 20 x 17: one output per thread for more blocks (tests/test_gpu_matmul.py)
    assert {"gpu.barrier", "workgroup>"} <= _kernel_ops(lowered)


def test_gpu_lowered_program_equals_compiled_cpu():
    source = irc.parse(TENSOR_PROGRAMS["mlp_softmax"])
    args = _arguments(source.functions[0], seed=3)
    cpu = irc.compile(irc.parse(TENSOR_PROGRAMS["mlp_softmax"]), cache=False).f(*args)
    _close(cpu, irc.interpret(gpu.lower(source), "f", *args))


def test_example_classifier_specialised():
    text = (EXAMPLES / "classifier.ir").read_text()
    source = irc.parse(text)
    irc.passes.run(source, "specialize-shapes{func=classify shapes=8x64xf32;64x128xf32;128xf32;128x10xf32;10xf32}")
    lowered = gpu.lower(source)
    args = _arguments(source.function("classify"), seed=4)
    _close(irc.interpret(irc.parse(text), "classify", *args), irc.interpret(lowered, "classify", *args))
    _ptx("classifier", lowered)


def test_example_mlp_training_step():
    """examples/mlp_train.ir with a batch of 16 (the simulator runs every thread in Python):
    grad, then the GPU stages (the call to @loss_grad inlined), against the source program."""
    text = (EXAMPLES / "mlp_train.ir").read_text().replace("256x", "16x")
    source = irc.parse(text)
    irc.passes.run(source, "grad{func=loss wrt=0,1,2,3}")
    lowered = gpu.lower(source)
    args = _arguments(source.function("step"), seed=6)
    _close(irc.interpret(source, "step", *args), irc.interpret(lowered, "step", *args))
    _ptx("mlp_train step", lowered)


def test_scalar_programs_have_no_kernels():
    lowered = gpu.lower(irc.parse((EXAMPLES / "fib.ir").read_text()))
    assert irc.interpret(lowered, "fib", 10) == 55
    with pytest.raises(IRError, match="no kernels"):
        gpu.render_ptx(lowered)


@pytest.mark.parametrize("seed", range(12))
def test_random_tensor_graphs(seed):
    from irc.testing.tensor_programs import agree, random_tensor_program

    program = random_tensor_program(seed, 6)
    args = program.arguments()
    expected = irc.interpret(irc.parse(program.text), "f", *args)
    lowered = gpu.lower(irc.parse(program.text))
    got = irc.interpret(lowered, "f", *args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected, got):
        assert agree(e, g, program.params[0][1]), program.text
    if any(op.name == "gpu.module" for op in lowered.body.ops):
        _ptx(f"random {seed}", lowered)


def test_scalar_result_read_from_device_memory_is_refused():
    with pytest.raises(IRError, match="used on the host"):
        gpu.lower(irc.parse((EXAMPLES / "dot.ir").read_text()))


# -- PTX ----------------------------------------------------------------------------------------


def test_kernels_use_nvvm_registers_shared_memory_and_shuffles():
    ptx = _ptx("rowsum", irc.parse(ROWSUM))
    assert ".visible .entry rowsum(" in ptx
    assert "%ctaid.x" in ptx and "%tid.x" in ptx and "bar.sync" in ptx
    assert ".shared" in ptx and "ld.global" in ptx
    ptx = _ptx("warpsum", irc.parse(WARPSUM), sm=80)
    assert "shfl.sync.bfly" in ptx and ".target sm_80" in ptx


def test_unsupported_architecture_is_a_clear_error():
    with pytest.raises(ValueError, match="sm_75"):
        gpu.render_ptx(irc.parse(ROWSUM), 75)


def test_math_left_for_libdevice_is_an_error_naming_the_op():
    text = WARPSUM.replace("%v1 = arith.addf %v2, %s1 : f32", "%v0 = arith.addf %v2, %s1 : f32\n"
                           "    %v1 = math.exp %v0 : f32")
    with pytest.raises(IRError, match="math.exp"):
        gpu.render_llvm(irc.parse(text))


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on the PATH")
def test_every_emitted_kernel_assembles_with_ptxas(tmp_path):
    """Runs last in this file (pytest keeps definition order): every PTX module the tests above
    rendered goes through ptxas for its architecture."""
    if len(_EMITTED_PTX) < 10:  # run on its own (-k): render the programs here
        _ptx("rowsum", irc.parse(ROWSUM))
        _ptx("warpsum", irc.parse(WARPSUM), sm=80)
        for name, text in TENSOR_PROGRAMS.items():
            for sm in (80, 90):
                _ptx(name, gpu.lower(irc.parse(text)), sm)
    for k, (what, ptx, sm) in enumerate(_EMITTED_PTX):
        path = tmp_path / f"k{k}.ptx"
        path.write_text(ptx)
        result = subprocess.run([PTXAS, "--gpu-name", f"sm_{sm}", str(path), "-o", str(tmp_path / f"k{k}.cubin")],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{what}: ptxas rejected the PTX:\n{result.stderr}"


# -- the CLI ---------------------------------------------------------------------------------------


def _irc(*args, **kw):
    import sys

    return subprocess.run([sys.executable, "-m", "irc.cli", *args], capture_output=True, text=True, timeout=300, **kw)


def test_cli_emit_ir_runs_on_the_interpreter_like_the_source(tmp_path):
    src = tmp_path / "p.ir"
    src.write_text(TENSOR_PROGRAMS["tanh_rowsum"])
    rng = np.random.default_rng(5)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal((4, 8)).astype(np.float32))
    out = tmp_path / "gpu.ir"
    r = _irc("compile", str(src), "--target", "gpu", "--emit", "ir", "-o", str(out))
    assert r.returncode == 0, r.stderr
    args = ["--entry", "f", f"@{tmp_path / 'a.npy'}", f"@{tmp_path / 'b.npy'}"]
    on_gpu_ir = _irc("run", str(out), "--interp", *args)
    on_cpu = _irc("run", str(src), *args)
    assert on_gpu_ir.returncode == 0 and on_cpu.returncode == 0, on_gpu_ir.stderr + on_cpu.stderr
    got = np.array([float(x) for x in on_gpu_ir.stdout.strip("[] \n").split(",")])
    want = np.array([float(x) for x in on_cpu.stdout.strip("[] \n").split(",")])
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("emit", ["ptx", "llvm"])
def test_cli_emit_ptx_and_llvm(tmp_path, emit):
    src = tmp_path / "p.ir"
    src.write_text(TENSOR_PROGRAMS["sigmoid_fma_1d"])
    out = tmp_path / f"out.{emit}"
    r = _irc("compile", str(src), "--target", "gpu", "--emit", emit, "--sm", "80", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    if emit == "ptx":
        assert ".target sm_80" in text
        if PTXAS:
            check = subprocess.run([PTXAS, "--gpu-name", "sm_80", str(out), "-o", str(tmp_path / "o.cubin")],
                                   capture_output=True, text=True)
            assert check.returncode == 0, check.stderr
    else:
        assert 'target triple = "nvptx64-nvidia-cuda"' in text and "nvvm.annotations" in text


def test_cli_compiles_the_classifier_example_with_its_shapes(tmp_path):
    out = tmp_path / "classifier.ptx"
    shapes = "specialize-shapes{func=classify shapes=32x64xf32;64x128xf32;128xf32;128x10xf32;10xf32}"
    r = _irc("compile", str(EXAMPLES / "classifier.ir"), "--target", "gpu", "-p", shapes, "-o", str(out))
    assert r.returncode == 0, r.stderr
    if PTXAS:
        check = subprocess.run([PTXAS, "--gpu-name", "sm_90", str(out), "-o", str(tmp_path / "o.cubin")],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    unspecialised = _irc("compile", str(EXAMPLES / "classifier.ir"), "--target", "gpu", "-o", str(out))
    assert unspecialised.returncode == 1 and "specialise shapes first" in unspecialised.stderr


def test_cli_print_pipeline_is_the_stage_list_that_runs():
    r = _irc("compile", "-", "--target", "gpu", "--print-pipeline", input="")
    assert r.returncode == 0, r.stderr
    for _, passes in gpu.GPU_STAGES:
        assert passes in r.stdout
    assert gpu.gpu_pipeline() == ",".join(p for _, p in gpu.GPU_STAGES)


def test_cli_bad_architecture_is_a_usage_error(tmp_path):
    src = tmp_path / "p.ir"
    src.write_text(TENSOR_PROGRAMS["tanh_rowsum"])
    r = _irc("compile", str(src), "--target", "gpu", "--sm", "75", "-o", str(tmp_path / "x"))
    assert r.returncode == 2 and "--sm 75" in r.stderr


# -- the pycuda driver -------------------------------------------------------------------------------


def test_pycuda_driver_skips_cleanly_without_a_device():
    from irc.runtime.gpu import driver

    reason = driver.unavailable_reason()
    if reason is None:
        pytest.skip("a CUDA device is present: tests/test_gpu_device.py runs on it")
    assert isinstance(reason, str) and reason
    with pytest.raises(driver.DeviceUnavailable, match="pycuda|CUDA|device"):
        driver.CudaDevice()


def test_cli_run_on_gpu_without_a_device_is_a_clear_usage_error(tmp_path):
    from irc.runtime.gpu import driver

    if driver.unavailable_reason() is None:
        pytest.skip("a CUDA device is present")
    src = tmp_path / "p.ir"
    src.write_text(TENSOR_PROGRAMS["tanh_rowsum"])
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", np.ones((4, 8), np.float32))
    r = _irc("run", str(src), "--target", "gpu", "--entry", "f", f"@{tmp_path / 'a.npy'}", f"@{tmp_path / 'b.npy'}")
    assert r.returncode == 2 and "--target gpu:" in r.stderr and "Traceback" not in r.stderr


# -- async tokens: gpu-async, checked by the adversarial simulator ---------------------------------

ASYNC = """
func.func @main(%h: memref<4x8xf32>, %ho: memref<4xf32>) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %t0 = gpu.wait async
  %d = gpu.alloc() : memref<4x8xf32, gpu>
  %o = gpu.alloc() : memref<4xf32, gpu>
  %t1 = gpu.memcpy async, %t0, %d, %h : memref<4x8xf32, gpu>, memref<4x8xf32>
  %t2 = gpu.launch_func async, %t1, @rowsum(%c4, %c1, %c1, %c8, %c1, %c1, %d, %o) {module = @kernels} : memref<4x8xf32, gpu>, memref<4xf32, gpu>
  %t3 = gpu.memcpy async, %t2, %ho, %o : memref<4xf32>, memref<4xf32, gpu>
  %t4 = gpu.wait async, %t2, %t3
  gpu.wait %t4
  gpu.dealloc %d : memref<4x8xf32, gpu>
  gpu.dealloc %o : memref<4xf32, gpu>
  func.return
}
"""


def _rowsum_with(host: str) -> str:
    return ROWSUM[:ROWSUM.index("func.func @main")] + host


def test_async_forms_round_trip_and_run():
    m = irc.parse(_rowsum_with(ASYNC))
    m.verify()
    printed = m.print()
    assert "%t2 = gpu.launch_func async, %t1, @rowsum(" in printed and "gpu.wait async, %t2, %t3" in printed
    assert irc.parse(printed).print() == printed
    assert irc.parse(m.print(generic=True)).print() == printed
    a = np.random.default_rng(7).standard_normal((4, 8)).astype(np.float32)
    out = np.zeros(4, np.float32)
    irc.interpret(m, "main", a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-6)


def test_simulator_exposes_a_missing_dependency():
    """Async work runs lazily, latest first where tokens allow: without the launch's dependency
    on the copy, the kernel reads the device buffer before the input arrives."""
    text = _rowsum_with(ASYNC).replace("%t2 = gpu.launch_func async, %t1,", "%t2 = gpu.launch_func async,")
    a = np.random.default_rng(8).standard_normal((4, 8)).astype(np.float32) + 3
    out = np.zeros(4, np.float32)
    irc.interpret(irc.parse(text), "main", a, out)
    assert not np.allclose(out, a.sum(axis=1))


def test_simulator_exposes_a_missing_wait():
    """The gpu.wait that gpu-async puts before the host reads a result: without it, the host
    reads its buffer before the copy back has run."""
    source = irc.parse(TENSOR_PROGRAMS["tanh_rowsum"])
    lowered = gpu.lower(source)
    args = _arguments(source.functions[0], seed=9)
    read = next(op for op in lowered.function("f").walk() if op.name == "bufferization.to_tensor")
    assert read.prev.name == "gpu.wait" and read.prev.operands
    _close(irc.interpret(source, "f", *args), irc.interpret(lowered, "f", *args))
    read.prev.erase()
    try:  # a stale read, or the late copy writing a buffer the host has freed since
        stale = irc.interpret(lowered, "f", *args)
    except InterpreterError as e:
        assert "freed" in str(e)
    else:
        assert not np.allclose(stale, irc.interpret(source, "f", *args))


def test_gpu_async_orders_work_by_buffers_only():
    lowered = gpu.lower(irc.parse(TENSOR_PROGRAMS["row_stats"]))
    host = lowered.function("f")
    launches = [op for op in host.walk() if op.name == "gpu.launch_func"]
    assert len(launches) >= 3 and all(op.results for op in launches)
    tokens = {op.results[0] for op in launches}
    for op in launches:  # the three row kernels read the input and write their own outputs
        assert not set(op.operands[:op.num_deps]) & tokens
        assert [d.defining_op.name for d in op.operands[:op.num_deps]] == ["gpu.memcpy"]
    copies_back = [op for op in host.walk() if op.name == "gpu.memcpy" and op.target.type.memory_space is None]
    assert all(op.operands[0] in tokens for op in copies_back)


def test_driver_plumbing_with_a_stand_in_for_pycuda():
    """Not a device test: the driver's own Python (pool, views, copies, module loading, launch
    parameters, streams and events for async tokens) run against a stand-in for pycuda that
    only records the calls, so that its plain errors show here without a GPU."""
    import types

    from irc.runtime.gpu import driver

    calls = []

    class Allocation:
        def __init__(self, n):
            calls.append(("alloc", n))

        def __int__(self):
            return 4096

        def free(self):
            calls.append(("free",))

    class Stream:
        def synchronize(self):
            pass

        def wait_for_event(self, event):
            calls.append(("wait_for_event",))

    class Event:
        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

    class Module:
        def get_function(self, name):
            def launch(*params, grid, block, stream):
                calls.append(("launch", name, grid, block, len(params)))

            def prepared_async_call(grid, block, stream, *params):
                assert len(params) == len(launch.signature)
                launch(*params, grid=grid, block=block, stream=stream)

            launch.prepare = lambda signature: setattr(launch, "signature", signature)
            launch.prepared_async_call = prepared_async_call
            return launch

    cuda = types.SimpleNamespace(
        Stream=Stream, Event=Event, MemoryError=MemoryError, Error=RuntimeError,
        memcpy_htod_async=lambda dst, a, s: calls.append(("htod", a.nbytes)),
        memcpy_dtoh_async=lambda a, src, s: calls.append(("dtoh", a.nbytes)),
        memcpy_dtod_async=lambda dst, src, n, s: calls.append(("dtod", n)),
        pagelocked_empty=lambda shape, dtype: calls.append(("pagelocked",)) or np.empty(shape, dtype),
        module_from_buffer=lambda ptx: calls.append(("module", ptx.startswith(b"//"))) or Module())
    dev = driver.CudaDevice.over(cuda, types.SimpleNamespace(allocate=Allocation))  # no context, no driver
    lowered = gpu.lower(irc.parse(TENSOR_PROGRAMS["mlp_softmax"]))
    launches = [op for op in lowered.function("f").walk() if op.name == "gpu.launch_func"]
    args = _arguments(irc.parse(TENSOR_PROGRAMS["mlp_softmax"]).functions[0])
    exe = driver.GPUExecutable(lowered, dev)
    for run in ("schedule", "interpreter"):  # the replayed schedule, then the host function interpreted
        calls.clear()
        if run == "schedule":
            result = exe.f(*args)
        else:
            interp = irc.interpreter.Interpreter(lowered)
            interp.gpu_device = dev
            result = interp.run("f", *args)
        assert result.shape == (16, 10)  # the host buffer (nothing computed it: no device)
        kinds = [c[0] for c in calls]
        assert kinds.count("module") == (run == "schedule") and all(c[1] for c in calls if c[0] == "module")
        assert kinds.count("htod") == 4 and kinds.count("dtoh") == 1
        assert kinds.count("pagelocked") == (4 if run == "schedule" else 0)  # the inputs' staging buffers
        assert kinds.count("alloc") == kinds.count("free")
        launched = [c for c in calls if c[0] == "launch"]
        assert [c[1] for c in launched] == [op.kernel_name for op in launches]
        for c, op in zip(launched, launches):
            sizes = [v.defining_op.attributes["value"].value for v in op.sizes]
            assert c[2] == tuple(sizes[:3]) and c[3] == tuple(sizes[3:])
            assert c[4] == sum(1 + v.type.rank if v.type.is_shaped else 1 for v in op.kernel_args)


def test_irc_compile_for_the_gpu_says_why_it_cannot_run_here():
    """``irc.compile(m, target="gpu")`` is the GPU driver's compile; without pycuda or a device
    it is a DeviceUnavailable that says which, never a crash or a CPU fallback."""
    from irc.runtime.gpu import driver

    module = irc.parse("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                       "  %e = math.exp %a : tensor<4xf32>\n  func.return %e : tensor<4xf32>\n}\n")
    reason = driver.unavailable_reason()
    if reason is None:
        pytest.skip("a CUDA device is here: tests/test_gpu_device.py runs it")
    with pytest.raises(driver.DeviceUnavailable, match="pycuda|CUDA|device"):
        irc.compile(module, target="gpu")
    with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
        irc.compile(module, target="tpu")
