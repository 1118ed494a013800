"""Every dialect irc knows.  Importing this package registers their ops."""

from . import arith, bufferization, cf, func, fused, gpu, graph, math, memref, scf, tensor  # noqa: F401

__all__ = ["arith", "bufferization", "cf", "func", "fused", "gpu", "graph", "math", "memref", "scf", "tensor"]
