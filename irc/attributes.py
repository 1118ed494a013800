"""Attributes: immutable compile-time data attached to operations.

Spelled as MLIR spells them: ``42 : i64``, ``1.5 : f32``, ``true``, ``"text"``,
``unit`` (as a bare name in a dictionary), ``@symbol``, ``[a, b]``, types, and
``dense<...>`` tensor constants backed by a read-only numpy array.

Attributes compare and hash by value so that CSE can key ops on them.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from .types import FloatType, IndexType, Type, i1, numpy_dtype


class Attribute:
    __slots__ = ()

    def _key(self):
        raise NotImplementedError

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self), self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"


class IntegerAttr(Attribute):
    """An integer of a given integer or index type; ``value`` is stored signed, as printed."""

    __slots__ = ("value", "type")

    def __init__(self, value: int, type: Type):
        self.value = int(value)
        self.type = type

    def _key(self):
        return (self.value, self.type)

    def __str__(self) -> str:
        if self.type is i1:
            return "true" if self.value & 1 else "false"
        return f"{self.value} : {self.type}"


class FloatAttr(Attribute):
    """A float of a given float type, stored as a Python float rounded to that type.

    ``bits`` is the exact IEEE bit pattern: a Python float (a C double) cannot hold an f32,
    f16 or bf16 signalling NaN (converting quiets it) nor an f16 NaN's payload, and a constant
    must keep every bit through folding, printing and parsing.  ``value`` is then a quiet NaN.
    ``value`` may be a numpy scalar of the type's dtype (bf16: float32), whose bits are kept.
    """

    __slots__ = ("value", "type", "bits")

    def __init__(self, value, type: FloatType):
        if isinstance(value, np.floating) and np.isnan(value):
            self.bits = numpy_float_bits(value, type)
            self.value = float_from_bits(self.bits, type)
        else:
            self.value = round_float(float(value), type)
            self.bits = float_bits(self.value, type)
        self.type = type

    @classmethod
    def from_bits(cls, bits: int, type: FloatType) -> FloatAttr:
        """The constant whose bit pattern is ``bits`` (``0x7FA00000 : f32``), signalling NaNs kept."""
        attr = cls(float_from_bits(bits, type), type)
        attr.bits = bits & ((1 << type.width) - 1)
        return attr

    def _key(self):
        # Distinguish -0.0 from 0.0 and make NaN equal to itself.
        return (self.bits, self.type)

    def __str__(self) -> str:
        if math.isnan(self.value):
            return f"0x{self.bits:0{self.type.width // 4}X} : {self.type}"
        return f"{format_float(self.value, self.type)} : {self.type}"


def numpy_float_bits(value, type: FloatType) -> int:
    """The bit pattern of a numpy float scalar of ``type`` (read from memory: no conversion, so
    a signalling NaN stays one).  bf16 lives in a float32 whose low half is zero."""
    if type.kind == "bf16":
        return int(np.asarray(value, dtype=np.float32).view(np.uint32)) >> 16
    dtype = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[type.kind]
    return int(np.asarray(value, dtype=dtype).view(f"u{type.width // 8}"))


def numpy_float_from_bits(bits: int, type: FloatType):
    """The numpy scalar with bit pattern ``bits`` (bf16: a float32), signalling NaNs kept."""
    if type.kind == "bf16":
        return np.asarray((bits & 0xFFFF) << 16, dtype=np.uint32).view(np.float32)[()]
    dtype = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[type.kind]
    return np.asarray(bits & ((1 << type.width) - 1), dtype=f"u{type.width // 8}").view(dtype)[()]


class StringAttr(Attribute):
    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def _key(self):
        return self.value

    def __str__(self) -> str:
        return quote_string(self.value)


class UnitAttr(Attribute):
    """The presence of a name in an attribute dictionary, e.g. ``{nonnegative}``."""

    __slots__ = ()

    def _key(self):
        return ()

    def __str__(self) -> str:
        return "unit"


class TypeAttr(Attribute):
    __slots__ = ("type",)

    def __init__(self, type: Type):
        self.type = type

    def _key(self):
        return self.type

    def __str__(self) -> str:
        return str(self.type)


class SymbolRefAttr(Attribute):
    """A reference to a symbol such as a function: ``@name``."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def _key(self):
        return self.name

    def __str__(self) -> str:
        return "@" + self.name


class ArrayAttr(Attribute):
    __slots__ = ("elements",)

    def __init__(self, elements):
        self.elements = tuple(elements)

    def _key(self):
        return self.elements

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.elements)) + "]"


class DenseArrayAttr(Attribute):
    """MLIR's ``array<i32: 3, 5>``: a flat list of scalars of one type (cond_br's branch weights)."""

    __slots__ = ("element", "values")

    def __init__(self, element: Type, values):
        self.element = element
        self.values = tuple(values)

    def _key(self):
        return (self.element, self.values)

    def __str__(self) -> str:
        if not self.values:
            return f"array<{self.element}>"
        return f"array<{self.element}: " + ", ".join(map(str, self.values)) + ">"


class OpaqueAttr(Attribute):
    """A dialect attribute irc keeps as text, such as ``#arith.overflow<nsw>`` or
    ``#arith.fastmath<fast>``: read, compared and printed back, never interpreted."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def _key(self):
        return self.text

    def __str__(self) -> str:
        return self.text


class DenseAttr(Attribute):
    """A tensor constant: ``dense<0.5> : tensor<4xf32>`` or ``dense<[1, 2]> : tensor<2xi32>``.

    ``array`` is a read-only numpy array of the tensor's shape (``bf16`` is held as
    float32 rounded to bf16; ``i1`` as bool).
    """

    __slots__ = ("array", "type", "_hash")

    def __init__(self, array, type: Type):
        dtype = np.float32 if str(type.element_type) == "bf16" else numpy_dtype(type)
        arr = np.array(array, dtype=dtype)
        shape = tuple(type.shape)
        if arr.shape != shape and arr.size == 0 and 0 in shape:
            arr = np.zeros(shape, dtype=dtype)  # 'dense<[]>' of any empty shape
        elif arr.size == 1 or (arr.size > 1 and arr.shape == shape and _is_splat(arr)):
            # A splat (``dense<0.0> : tensor<1024x1024xf32>``) is one element seen at every
            # position: no megabytes to build, copy, compare or hash for a constant of zeros.
            arr = np.broadcast_to(arr.reshape(-1)[:1].reshape(()), shape)
        elif arr.shape != shape:
            arr = np.broadcast_to(arr, shape).copy()
        arr.setflags(write=False)
        self.array = arr
        self.type = type
        self._hash = None

    @property
    def is_splat(self) -> bool:
        return self.array.size > 0 and _is_splat(self.array)

    def _key(self):
        a = self.array
        if a.size > 1 and not any(a.strides):  # a splat (see __init__)
            return (self.type, "splat", a.reshape(-1)[:1].tobytes())
        return (self.type, a.tobytes())

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((DenseAttr, self._key()))
        return self._hash

    def __str__(self) -> str:
        elem = self.type.element_type
        a = self.array
        if self.is_splat:
            return f"dense<{format_scalar(a.flat[0], elem)}> : {self.type}"
        return f"dense<{_format_nested(a, elem)}> : {self.type}"


def _is_splat(a: np.ndarray) -> bool:
    """All elements equal, bit for bit (so NaN splats and -0.0 are exact)."""
    if not any(a.strides):  # one element seen everywhere (DenseAttr's splats)
        return True
    flat = np.ascontiguousarray(a).reshape(-1)
    if a.dtype.kind == "f":
        flat = flat.view(f"u{a.itemsize}")
    return bool((flat == flat[0]).all())


def _format_nested(a: np.ndarray, elem: Type) -> str:
    if a.ndim == 0:
        return format_scalar(a[()], elem)
    if a.ndim == 1:  # floats as numpy scalars: a NaN's bits are printed as they are
        return "[" + ", ".join(format_scalar(x, elem) for x in (a if a.dtype.kind == "f" else a.tolist())) + "]"
    return "[" + ", ".join(_format_nested(x, elem) for x in a) + "]"


def format_scalar(x, elem: Type) -> str:
    """The literal for one element of ``elem`` type, as in a dense attribute."""
    if isinstance(elem, FloatType):
        if isinstance(x, np.floating) and np.isnan(x):
            return f"0x{numpy_float_bits(x, elem):0{elem.width // 4}X}"
        return format_float(float(x), elem)
    if elem is i1:
        return "true" if x else "false"
    return str(int(x))


_FLOAT_PACK = {"f16": ("<e", "<H"), "f32": ("<f", "<I"), "f64": ("<d", "<Q")}


def float_bits(value: float, type: FloatType) -> int:
    """The IEEE bit pattern of ``value`` in ``type`` (bf16: the top half of f32)."""
    if type.kind == "bf16":
        return struct.unpack("<I", struct.pack("<f", value))[0] >> 16
    f, i = _FLOAT_PACK[type.kind]
    return struct.unpack(i, struct.pack(f, value))[0]


def float_from_bits(bits: int, type: FloatType) -> float:
    if type.kind == "bf16":
        return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]
    f, i = _FLOAT_PACK[type.kind]
    return struct.unpack(f, struct.pack(i, bits & ((1 << type.width) - 1)))[0]


def round_float(value: float, type: FloatType) -> float:
    """Round a Python float to the precision of ``type`` (round to nearest even)."""
    kind = type.kind
    if kind == "f64" or math.isnan(value) or math.isinf(value):
        return value
    with np.errstate(over="ignore"):  # out of range rounds to an infinity, as IEEE says
        if kind == "f32":
            return float(np.float32(value))
        if kind == "f16":
            return float(np.float16(value))
        return bf16_round(value)


def bf16_round(value: float) -> float:
    """``value`` rounded once, to nearest even, to bf16 (a NaN keeps its quiet payload)."""
    return float(bf16_round_array(np.asarray(value, dtype=np.float64)))


def bf16_round_array(a: np.ndarray) -> np.ndarray:
    """Round float32 or float64 values once to bf16, held as float32 with a zero low half.

    From float64, a direct float32 conversion then a bf16 rounding would round twice (wrong on
    ties of the second step); converting to float32 *rounding to odd* first makes the second
    rounding exact (float32 carries 16 more bits than bf16).  A NaN whose low half is set is
    narrowed as hardware and LLVM narrow it: quieted, payload truncated.
    """
    a = np.asarray(a)
    if a.dtype == np.float64:
        with np.errstate(over="ignore", invalid="ignore"):
            f = a.astype(np.float32)
            back = f.astype(np.float64)
            inexact = (back != a) & ~np.isnan(a)
            toward_zero = np.where(inexact & (np.abs(back) > np.abs(a)), np.nextafter(f, np.float32(0)), f)
        bits32 = toward_zero.view(np.uint32) | inexact.astype(np.uint32)
    else:
        bits32 = a.astype(np.float32).view(np.uint32)
    bits = bits32.astype(np.uint64)
    special = (bits & 0x7F800000) == 0x7F800000
    nan_to_narrow = special & ((bits & 0x7FFFFF) != 0) & ((bits & 0xFFFF) != 0)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16) & 0xFFFFFFFF
    out = np.where(special, np.where(nan_to_narrow, (bits | 0x400000) & 0xFFFF0000, bits), rounded)
    return out.astype(np.uint32).view(np.float32)


def format_float(value: float, type: FloatType) -> str:
    """The shortest literal that reads back as exactly ``value`` in ``type``.

    NaN and infinities print as hexadecimal bit patterns, as MLIR prints them.
    Finite values always contain a '.', which MLIR's lexer requires.
    """
    if math.isnan(value) or math.isinf(value):
        digits = type.width // 4
        return "0x" + format(float_bits(value, type), f"0{digits}X")
    if type.kind == "f32" or type.kind == "bf16":
        text = str(np.float32(value))  # numpy prints the shortest round-trip digits
    elif type.kind == "f16":
        text = str(np.float16(value))
    else:
        text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if "." not in mantissa and mantissa not in ("inf", "-inf", "nan"):
        mantissa += ".0"
    return mantissa + (("e" + exponent) if e else "")


def quote_string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):02X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def unquote_string(token: str) -> str:
    """Decode a string literal token including its quotes (MLIR escapes: \\n \\t \\\\ \\" \\XX)."""
    body = token[1:-1]
    if "\\" not in body:
        return body
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in '"\\':
            out.append(nxt)
            i += 2
        elif nxt == "n":
            out.append("\n")
            i += 2
        elif nxt == "t":
            out.append("\t")
            i += 2
        else:
            digits = body[i + 1 : i + 3]
            if len(digits) != 2 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"invalid escape '\\{digits}'")
            out.append(chr(int(digits, 16)))
            i += 3
    return "".join(out)


def integer_attr(value: int, type: Type) -> Attribute:
    """An integer attribute normalised to the signed range of ``type``'s width."""
    width = 64 if isinstance(type, IndexType) else type.width
    value &= (1 << width) - 1
    if type is not i1 and value >= 1 << (width - 1):
        value -= 1 << width
    return IntegerAttr(value, type)


__all__ = [
    "Attribute", "IntegerAttr", "FloatAttr", "StringAttr", "UnitAttr", "TypeAttr",
    "SymbolRefAttr", "ArrayAttr", "DenseAttr", "integer_attr", "format_float",
    "float_bits", "float_from_bits", "round_float", "quote_string", "unquote_string",
    "numpy_float_bits", "numpy_float_from_bits", "bf16_round_array",
]
