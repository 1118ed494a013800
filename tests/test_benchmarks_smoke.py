"""The benchmarks run.  Only that: no timing assertions in tests, ever."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_parse_throughput_quick_runs(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "parse_throughput.py"), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "parse+verify+print" in proc.stdout
    assert out.exists()


def test_opt_throughput_quick_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "opt_throughput.py"), "--quick", "--no-mlir"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_tensor_kernels_quick_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tensor_kernels.py"), "--quick"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matmul" in proc.stdout


def test_fusion_scaling_quick_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fusion_scaling.py"), "--sizes", "50,100", "--repeat", "1",
         "--no-mlir"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "irc ns/op" in proc.stdout


def test_tensor_cpu_quick_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tensor_cpu.py"), "--quick", "--only", "sigmoid,softmax,mlp"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sigmoid" in proc.stdout and "irc" in proc.stdout


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="reads x86-64 assembly")
def test_elementwise_asm_runs(tmp_path):
    """The loop census of the tensor_cpu kernels: irc's sigmoid has a packed loop it can count."""
    pytest.importorskip("llvmlite")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "elementwise_asm.py"), "--only", "sigmoid"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^irc: .* \d+\.\d per 16 f32", proc.stdout, re.MULTILINE), proc.stdout


def test_autodiff_quick_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "autodiff.py"), "--quick"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    if proc.returncode == 1 and "op has no gradient rule" in proc.stdout:
        pytest.skip("grad cannot differentiate the MLP step yet (a tensor op has no gradient rule)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "## step" in proc.stdout and "## grad pass speed" in proc.stdout


def test_remat_memory_quick_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "remat_memory.py"), "--quick", "--model", "mlp-hand"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| decreasing |" in proc.stdout


def test_thread_profile_quick_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "thread_profile.py"), "--quick", "--rounds", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hand-off: 64 calls" in proc.stdout and "same bits on 2 threads: True" in proc.stdout


@pytest.mark.parametrize("flags", [["--quick"], ["--quick", "--blockings"]])
def test_gemm_quick_runs(tmp_path, flags):
    """gemm.py's table, and its other blockings, which call the library function directly (its
    whole signature: a change of it must reach them)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gemm.py"), *flags],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("host blocking" if "--blockings" in flags else "irc / best peer") in proc.stdout
