"""tensor-to-loops: bufferize tensor functions and lower every tensor op to scf loops.

After it, a function computes with ``memref`` buffers, ``scf.for`` nests and
scalar ``arith``/``math`` only, which the CPU backend compiles.  Tensor
parameters become memref parameters and tensor results become output
parameters written in place (``irc.passes.lowering.bufferize`` explains the
contract and the in-place rule); tensors in ``scf.if``/``scf.for``/``scf.while``
live in buffers the regions read and write (``lowering/control_flow.py``), and the
scf ops carry scalars only.  Elementwise ops must have been grouped into
``graph.fused`` ops by ``fuse-elementwise`` first; shapes must be static (``irc.compile``
specialises them for the arrays it is called with).
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.passmanager import Pass

from .lowering import elementwise, structured  # noqa: F401 - register the lowerings
from .lowering.bufferize import bufferize


@dataclass
class TensorToLoops(Pass):
    """Bufferize tensor functions and lower tensor ops to scf loops over memrefs."""

    name = "tensor-to-loops"
    blas: bool = False  # large f32/f64 matmuls call BLAS gemm (compiled code only; see lowering/blas.py)
    gemm_library: bool = False  # large f32/f64 matmuls call irc's GEMM function (lowering/gemm_library.py)
    vector_bits: int = 0  # the target's vector width, for the GEMM's register tile (0: 512; lowering/matmul.py)
    vector_registers: int = 0  # its number of vector registers (0: 32)
    l1_bytes: int = 0  # the L1 data cache, for the GEMM's panel depth (0: not known)
    l3_bytes: int = 0  # the last-level cache, for the GEMM's packed block of B (0: not known)
    fma: bool = True  # the target fuses multiply-adds: the GEMM library's steps are math.fma (else mul, add)
    threads: int = 1  # threads the code will run on: a large library GEMM becomes that many calls
    split_blas: bool = False  # with blas: BLAS products split across threads too (a BLAS on the calling thread)
    gpu: bool = False  # the GPU target's simple loop forms for gpu-map-parallel (lowering/gpu_rows.py)

    def run(self, module, stats) -> None:
        for func in list(module.functions):
            if not func.is_declaration:
                before = len(func.attributes)
                bufferize(func, {"blas": self.blas, "gemm_library": self.gemm_library, "vector_bits": self.vector_bits,
                                 "vector_registers": self.vector_registers,
                                 "l1_bytes": self.l1_bytes, "l3_bytes": self.l3_bytes,
                                 "fma": self.fma,
                                 "threads": self.threads, "split_blas": self.split_blas,
                                 "gpu": self.gpu})
                if len(func.attributes) != before:
                    stats.add("functions-bufferized")
