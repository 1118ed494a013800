"""Every dialect irc knows.  Importing this package registers their ops."""

from . import arith, bufferization, cf, func, fused, gpu, math, memref, scf, tensor  # noqa: F401
from . import graph_scatter as graph_scatter  # noqa: F401 - graph ops beside tensor.py's (graph.scatter_add)

__all__ = ["arith", "bufferization", "cf", "func", "fused", "gpu", "graph_scatter", "math", "memref", "scf",
           "tensor"]
