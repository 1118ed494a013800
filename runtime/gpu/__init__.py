"""The GPU target: its pipeline (one list of named stages), the NVPTX renderer and the pycuda driver.

``GPU_STAGES`` is what runs (``lower``) and what ``irc compile --target gpu --print-pipeline``
prints.  After it a module holds host functions (the program's names and signatures, with
``gpu.alloc``/``gpu.memcpy``/``gpu.launch_func``) and one ``gpu.module @kernels``; the
interpreter runs it as it stands (simulating the grid), ``render_ptx`` turns the kernels into
PTX, and ``runtime/gpu/driver.py`` runs the host functions on a device with pycuda.
"""

from __future__ import annotations

GPU_STAGES = [
    ("inline calls (one host function per entry)", "inline{max-size=1000000}"),
    ("graph rewrites", "canonicalize,stabilize,cse"),
    ("fuse", "fuse-elementwise"),
    ("bufferize and lower to loops (simple forms)", "tensor-to-loops{gpu=true}"),
    ("clean up loops", "canonicalize,cse,licm"),
    ("map loops to the grid; device buffers and explicit copies", "gpu-map-parallel"),
    ("outline kernels", "gpu-outline"),
    ("async copies and launches, ordered by their buffers", "gpu-async"),
    ("approximate math (no libdevice)", "math-approx{only=all}"),
    ("clean up", "canonicalize,cse"),
]
"""The GPU target's stages; the kernels are then rendered by ``RENDER_STAGES``."""

RENDER_STAGES = [
    ("structured control flow to branches (kernels)", "scf-to-cf"),
    ("kernels to LLVM IR for nvptx64", "nvptx.translate_kernels"),
    ("LLVM -O3 and PTX for sm_XX", "nvptx.emit_ptx"),
]


def gpu_pipeline() -> str:
    return ",".join(p for _, p in GPU_STAGES)


def describe_pipeline() -> str:
    """The stage list as ``irc compile --target gpu --print-pipeline`` prints it."""
    rows = [*GPU_STAGES, *RENDER_STAGES]
    width = max(len(n) for n, _ in rows)
    return "\n".join(f"{i:2d}. {n.ljust(width)}  {p}" for i, (n, p) in enumerate(rows, 1))


def lower(module):
    """A copy of ``module`` after ``GPU_STAGES`` (host functions plus ``gpu.module @kernels``)."""
    import irc

    out = module.clone()
    irc.passes.run(out, gpu_pipeline())
    return out


def kernel_module(lowered):
    """The ``gpu.module`` of a lowered module, its kernels at CFG level (a copy)."""
    import irc
    from irc.diagnostics import IRError

    cfg = lowered.clone()
    irc.passes.run(cfg, "scf-to-cf")
    mods = [op for op in cfg.body.ops if op.name == "gpu.module"]
    if not mods:
        raise IRError("the program has no kernels: nothing in it runs on the device (does it compute with "
                      "tensors or buffers?)")
    return mods[0]


def render_llvm(lowered) -> str:
    """LLVM IR text of the kernels of a lowered module."""
    from .nvptx import translate_kernels

    return str(translate_kernels(kernel_module(lowered)))


def render_ptx(lowered, sm: int = 90) -> str:
    """PTX for the kernels of a lowered module, for ``sm_<sm>``."""
    from .nvptx import emit_ptx

    return emit_ptx(render_llvm(lowered), sm)
