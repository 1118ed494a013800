"""Every dialect irc knows.  Importing this package registers their ops."""

from . import arith, cf, func, math, memref, scf, tensor  # noqa: F401

__all__ = ["arith", "cf", "func", "math", "memref", "scf", "tensor"]
