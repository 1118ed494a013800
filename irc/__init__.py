"""irc: a multi-level compiler for tensor programs.

    import irc
    m = irc.parse(text)                       # or irc.parse_file("prog.ir")
    m = irc.passes.run(m, "canonicalize,dce")
    irc.interpret(m, "main", 3, 4)
"""

from __future__ import annotations

from . import gpu  # noqa: F401 - irc.gpu.to_device (forwards to irc.runtime.gpu when called)
from . import passes as _passes_pkg  # noqa: F401 - irc.passes is the pass registry
from .diagnostics import IRError, Location
from .explorer import Explorer
from .frontend import (
    cond,
    fori_loop,
    function,
    grad,
    gradients,
    jit,
    jvp,
    value_and_grad,
    var,
    vjp,
    while_loop,
)
from .interpreter import interpret
from .mlir import print_mlir
from .module import ModuleOp
from .parser import parse, parse_file
from .verifier import verify

__version__ = "0.1.0"
Module = ModuleOp


def compile(module, target: str = "cpu", **options):  # noqa: A001 - the natural name
    """Compile ``module`` to machine code; see ``irc.runtime.compile`` for the options.

    The device code lives in ``irc.runtime`` and is imported only when asked for.
    """
    from .checks import check_module

    check_module("irc.compile", "module", module)  # before importing the runtime
    from irc.runtime import compile as compile_for_target

    return compile_for_target(module, target=target, **options)


def save(path, fn, params, *example_inputs) -> None:
    """Trace ``fn(params, *example_inputs)`` and write it with ``params`` to one file at ``path``
    (IR text and safetensors weights: see irc/checkpoint/ and docs/checkpoints.md)."""
    from .checkpoint import save as save_checkpoint

    save_checkpoint(path, fn, params, *example_inputs)


def load(path, **options):
    """The model saved by ``irc.save``: ``model(*inputs)``, ``model.params``, ``model.module``.
    Nothing in the file is executed; a damaged file is an ``irc.checkpoint.CheckpointError``."""
    from .checkpoint import load as load_checkpoint

    return load_checkpoint(path, **options)


__all__ = ["Explorer", "IRError", "Location", "Module", "ModuleOp", "compile", "cond", "fori_loop", "function",
           "grad", "gradients", "interpret", "jit", "jvp", "load", "parse", "parse_file", "print_mlir", "save",
           "value_and_grad", "var", "verify", "vjp", "while_loop", "__version__"]
