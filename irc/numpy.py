"""What numpy's dispatch protocols cannot intercept: arrays made from a shape alone.

``np.zeros((3, 4))`` has no array argument, so numpy never asks a tracer: under
``irc.jit`` it is a constant (fine, and what these functions give too).  These
versions build a splat (one scalar, not a stored array) while tracing and call numpy
otherwise, so the same code runs eagerly::

    import irc.numpy as inp
    h = inp.zeros((x.shape[0], 16), np.float32)
"""

from __future__ import annotations

import numpy as _np

from .frontend.tracer import Tracer as _Tracer
from .frontend.tracer import current as _current
from .frontend.tracer import irc_type as _irc_type


def _shape(shape) -> tuple:
    return (int(shape),) if isinstance(shape, (int, _np.integer)) else tuple(int(d) for d in shape)


def full(shape, fill_value, dtype=None):
    """An array of ``shape`` whose elements are all ``fill_value`` (a number or a traced 0-d value)."""
    trace = _current()
    if trace is None and not isinstance(fill_value, _Tracer):
        return _np.full(shape, fill_value, dtype)
    from .types import TensorType

    shape = _shape(shape)
    b = trace.builder
    if isinstance(fill_value, _Tracer):
        dt = _np.dtype(dtype) if dtype is not None else fill_value.dtype
        from .frontend.tracer import convert, operand

        v = convert(b, operand(trace, fill_value), dt)
        if isinstance(v.type, TensorType):
            v = b.reshape(v, []) if v.type.rank else v
            from .dialects.tensor import ExtractOp

            v = b.built(ExtractOp.build(v.value, []))
        return _Tracer(trace, b.splat(v, TensorType(list(shape), v.type)) if shape else v)
    dt = _np.dtype(dtype) if dtype is not None else _np.asarray(fill_value).dtype
    elem = _irc_type(dt)
    value = _np.asarray(fill_value, dt).item()
    return _Tracer(trace, b.const(value, TensorType(list(shape), elem)) if shape else b.const(value, elem))


def zeros(shape, dtype=float):
    return full(shape, 0, dtype)


def ones(shape, dtype=float):
    return full(shape, 1, dtype)


def eye(n: int, m: int | None = None, k: int = 0, dtype=float):
    """The identity (or ones on diagonal ``k``): a constant, its shape static."""
    return _constant(_np.eye(n, m, k, dtype=dtype))


def arange(start, stop=None, step=1, dtype=None):
    """``np.arange`` for Python-number bounds: a constant under a trace (``graph.iota`` is what
    irc uses for a counting tensor of a traced size; not offered here yet)."""
    return _constant(_np.arange(start, stop, step, dtype=dtype) if stop is not None
                     else _np.arange(start, dtype=dtype))


def _constant(a):
    trace = _current()
    if trace is None:
        return a
    from .frontend.tracer import operand

    return _Tracer(trace, operand(trace, a))


__all__ = ["arange", "eye", "full", "ones", "zeros"]
