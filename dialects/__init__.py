"""Every dialect irc knows.  Importing this package registers their ops."""

from . import (  # noqa: F401
    arith,
    bufferization,
    cf,
    func,
    fused,
    gpu,
    graph,
    graph_conv,
    graph_dynamic,
    graph_scatter,
    math,
    memref,
    memref_atomic,
    scf,
    tensor,
    vector,
)

__all__ = ["arith", "bufferization", "cf", "func", "fused", "gpu", "graph", "graph_conv", "graph_dynamic", "graph_scatter", "math",
           "memref", "memref_atomic", "scf", "tensor", "vector"]
