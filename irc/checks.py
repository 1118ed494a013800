"""Argument checks for irc's public entry points.

Every function a user calls (``irc.parse``, ``irc.verify``, ``irc.compile``...)
checks its arguments' types first and raises ``TypeError`` naming the function
and the parameter, so that a wrong argument never reaches C code (the lexer,
ctypes, LLVM), where it could crash the process, and never surfaces as an
``AttributeError`` from deep inside.
"""

from __future__ import annotations


def _names(types) -> str:
    if not isinstance(types, tuple):
        types = (types,)
    names = [getattr(t, "__name__", str(t)) for t in types]
    names = ["path-like" if n == "PathLike" else n for n in names]
    return " or ".join(names)


def check_type(func: str, param: str, value, types) -> None:
    """Raise ``TypeError`` unless ``value`` is an instance of ``types``.

    ``bool`` is not accepted where ``int`` is asked for (``True`` is not a count),
    and ``int`` is not accepted where ``bool`` is (a flag is a flag).
    """
    ok = isinstance(value, types)
    if ok and isinstance(value, bool) and types is int:
        ok = False
    if not ok:
        raise TypeError(f"{func}: parameter '{param}' must be {_a(_names(types))}, "
                        f"got {type(value).__name__}")


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def check_module(func: str, param: str, value) -> None:
    """``value`` must be an irc module (``irc.parse``'s result)."""
    from .module import ModuleOp

    if not isinstance(value, ModuleOp):
        raise TypeError(f"{func}: parameter '{param}' must be an irc module (irc.Module, from irc.parse), "
                        f"got {type(value).__name__}")


def plain_array(what: str, value, t):
    """``value``, an ``np.ndarray`` or a subclass, as a plain ``np.ndarray`` over the same memory
    (a ``np.memmap``, such as ``np.load(..., mmap_mode="r+")`` gives, works as its data; stores
    go to it).  A masked array is refused: its mask says which elements do not count, which a
    compiled function could only ignore.  Anything else comes back unchanged."""
    import numpy as np

    if type(value) is np.ndarray or not isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"{what} is a masked array for {t}: pass its data with the masked elements "
                        f"filled (x.filled(value)), or x.data to ignore the mask")
    return value.view(np.ndarray)


def check_array(what: str, value, t, dtype):
    """``value`` as an array for the tensor type ``t`` (numpy dtype ``dtype``): lists and numbers
    are converted; another dtype, rank or static size is an error naming ``what`` (``parameter
    'x'``, ``input 0``).  The one check of a tensor argument, for compiled functions and
    checkpoints alike."""
    import numpy as np

    value = plain_array(what, value, t)
    if not isinstance(value, np.ndarray):
        if isinstance(value, (list, tuple, bool, int, float, np.generic)):
            value = np.asarray(value, dtype=dtype)
        else:
            raise TypeError(f"{what} must be a numpy array for {t}, got {type(value).__name__}")
    if value.dtype != dtype:
        raise TypeError(f"{what} must have dtype {dtype} for {t}, got {value.dtype}")
    if value.ndim != t.rank or any(d is not None and d != n for d, n in zip(t.shape, value.shape)):
        want = "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
        raise ValueError(f"{what} must have shape {want} for {t}, got {list(value.shape)}")
    return value
