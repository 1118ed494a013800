"""Running a program on the reference interpreter as an oracle: outcomes that compare exactly.

A pass is correct on a program if the program's *outcome* is unchanged: the
same results, bit for bit (-0.0 differs from 0.0, and since IEEE leaves NaN
payloads unspecified, every NaN equals every NaN), or the same runtime error.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from irc.diagnostics import InterpreterError

DEFAULT_MAX_STEPS = 1_000_000


def canonical(value):
    """A hashable, exactly comparable form of one interpreter result."""
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return ("nan",)
        return ("float", struct.pack("<d", float(value)).hex())
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            bits = np.where(np.isnan(value), np.nan, value).astype(value.dtype).tobytes()
            return ("array", str(value.dtype), value.shape, bits)
        return ("array", str(value.dtype), value.shape, value.tobytes())
    return value


def outcome(module, entry: str, args, max_steps: int = DEFAULT_MAX_STEPS) -> tuple:
    """``("ok", results...)`` or ``("error", message)`` for ``@entry(*args)`` of ``module``."""
    from irc.interpreter import interpret

    try:
        results = interpret(module, entry, *args, max_steps=max_steps)
    except InterpreterError as e:
        return ("error", e.message)
    if not isinstance(results, tuple):
        results = () if results is None else (results,)
    return ("ok", *map(canonical, results))
