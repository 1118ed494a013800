"""Runtime values and numeric semantics shared by constant folding and the interpreter.

A runtime value mirrors what numpy would hold for the type, so one scalar
formula serves scalars and tensors alike:

* ``iN``/``index`` scalars are Python ints in the signed range of the width
  (``i1`` is 0 or 1, like numpy's bool); integer arithmetic wraps;
* float scalars are numpy scalars of the type's dtype (``bf16`` is a float32
  rounded to bf16 after every op), so every op rounds exactly as IEEE says;
* tensors are numpy arrays of those dtypes; memrefs are ``Buffer`` objects
  around a numpy array.

Faults (integer division by zero, ``divsi`` overflow) raise ``Fault``; the
interpreter turns it into a diagnostic at the op, and folding simply declines.
"""

from __future__ import annotations

import numpy as np

from .attributes import (
    Attribute,
    DenseAttr,
    FloatAttr,
    IntegerAttr,
    bf16_round_array,
    integer_attr,
    numpy_float_from_bits,
)
from .types import FloatType, IndexType, IntegerType, ShapedType, Type, i1, numpy_dtype


class Fault(Exception):
    """Undefined behaviour detected while computing a value (message says which)."""


def width(t: Type) -> int:
    return 64 if isinstance(t, IndexType) else t.width


def is_array(x) -> bool:
    return isinstance(x, np.ndarray)


def wrap(x, t: Type):
    """Reduce an exact integer (or array) to the canonical value of integer type ``t``."""
    if is_array(x) or isinstance(x, np.generic):  # a numpy scalar comes from a rank-0 tensor
        return np.asarray(x).astype(_int_dtype(t), copy=False)
    w = width(t)
    if w == 1:
        return x & 1
    half = 1 << (w - 1)
    return ((x + half) & ((1 << w) - 1)) - half


def signed(x, t: Type):
    """The two's complement reading of a canonical value (only i1 differs: 1 -> -1)."""
    if width(t) == 1:
        return -x.astype(np.int8) if is_array(x) else -x
    return x


def unsigned(x, t: Type):
    """The unsigned reading of a canonical value."""
    w = width(t)
    if is_array(x):
        if w == 1:
            return x.astype(np.uint8)
        return x.view(f"u{w // 8}") if x.dtype.itemsize * 8 == w else x.astype(f"u{w // 8}")
    return x & ((1 << w) - 1)


def _int_dtype(t: Type) -> np.dtype:
    return np.dtype(np.bool_) if width(t) == 1 else numpy_dtype(t)


def float_dtype(t: FloatType):
    return np.float32 if t.kind == "bf16" else numpy_dtype(t).type


def round_to(x, t: FloatType):
    """Round a float result to type ``t``, once (numpy already did, except for bf16).

    bf16 is rounded from the value as given (float32 or float64), never through a second
    rounding, so a transcendental computed in f64 is rounded once like every other type.
    """
    if t.kind == "bf16":
        if is_array(x):
            return bf16_round_array(x if x.dtype in (np.float32, np.float64) else x.astype(np.float64))
        wide = x if isinstance(x, (np.float32, np.float64)) else np.float64(x)
        return bf16_round_array(np.asarray(wide))[()]
    dt = float_dtype(t)
    if t.kind == "f16" and np.asarray(x).dtype != np.float16:
        return _narrow_to_f16(x)
    if is_array(x):
        return x.astype(dt, copy=False)
    return dt(x)


def _narrow_to_f16(x):
    """numpy's software conversion (where it does not use F16C) narrows a NaN without setting the
    quiet bit (0x7FC00001 -> 0x7C01, a signalling NaN; hardware and LLVM give 0x7E00): quiet it."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(x).astype(np.float16)
    nan = np.isnan(out)
    if nan.any():
        out = np.where(nan, (out.view(np.uint16) | np.uint16(0x200)).view(np.float16), out)
    return out if is_array(x) else out[()]


def widen_to_f64(x) -> np.ndarray:
    """``x`` as float64, as ``fpext`` does it: a signalling NaN comes out quiet (numpy's float16
    conversion is done in software and would keep it signalling; float32's goes through hardware)."""
    a = np.asarray(x)
    wide = a.astype(np.float64)
    if a.dtype != np.float64:
        nan = np.isnan(wide)
        if nan.any():
            wide = np.where(nan, (wide.view(np.uint64) | np.uint64(1 << 51)).view(np.float64), wide)
    return wide


def check_nonzero(b, what: str = "integer division by zero") -> None:
    if is_array(b):
        if b.size and not b.all():
            raise Fault(what)
    elif b == 0:
        raise Fault(what)


# -- attributes <-> runtime values --------------------------------------------------------


def attr_to_value(attr: Attribute):
    """The runtime value a constant attribute denotes, or None if it is not a constant."""
    if isinstance(attr, IntegerAttr):
        return attr.value & 1 if attr.type is i1 else attr.value
    if isinstance(attr, FloatAttr):
        return numpy_float_from_bits(attr.bits, attr.type)  # bit-exact: signalling NaNs stay
    if isinstance(attr, DenseAttr):
        return attr.array
    return None


def value_to_attr(value, t: Type) -> Attribute:
    if isinstance(t, ShapedType):
        return DenseAttr(np.asarray(value), t)
    if isinstance(t, FloatType):
        return FloatAttr(value if isinstance(value, np.floating) else float(value), t)
    if isinstance(t, (IntegerType, IndexType)):
        return integer_attr(int(value), t)
    raise TypeError(f"no constant attribute for type {t}")


def zero_of(t: Type):
    elem = t.element_type
    if isinstance(t, ShapedType):
        return np.zeros(t.shape, dtype=np.float32 if str(elem) == "bf16" else numpy_dtype(elem) if width_ok(elem) else None)
    return float_dtype(elem)(0) if isinstance(elem, FloatType) else 0


def width_ok(t: Type) -> bool:
    return isinstance(t, FloatType) or width(t) in (1, 8, 16, 32, 64)


class Buffer:
    """A memref's storage at run time: a numpy array and whether it was freed.

    A view (``memref.view``) shares its base buffer's array memory and its freed
    flag: freeing the base frees every view of it.  ``heap`` is true only for a
    buffer that ``memref.alloc`` made, the only kind ``memref.dealloc`` may free
    (not an alloca, a view or an argument), as in compiled code.
    """

    __slots__ = ("array", "_freed", "type", "base", "heap")

    def __init__(self, array: np.ndarray, type: Type, base: Buffer | None = None, heap: bool = False):
        self.array = array
        self._freed = False
        self.type = type
        self.base = base
        self.heap = heap

    @property
    def freed(self) -> bool:
        return self._freed if self.base is None else self.base.freed

    @freed.setter
    def freed(self, value: bool) -> None:
        if self.base is None:
            self._freed = value
        else:
            self.base.freed = value

    def __repr__(self) -> str:
        return f"Buffer({self.type}, freed={self.freed})"
