"""Every dialect irc knows.  Importing this package registers their ops."""

from . import arith, cf, func, fused, math, memref, scf, tensor  # noqa: F401

__all__ = ["arith", "cf", "func", "fused", "math", "memref", "scf", "tensor"]
