"""IR types: immutable, hashable, interned, spelled exactly as MLIR spells them.

Scalars: ``i1 i8 i16 i32 i64`` (signless integers), ``index`` (64-bit here),
``f16 bf16 f32 f64``.  Shaped: ``tensor<4x?xf32>`` (values), ``memref<4x?xf32>``
and ``memref<4xf32, gpu>`` (buffers with a memory space).  ``?`` is a dynamic
dimension, stored as ``None``.  ``vector<16xf32>``: a fixed number of scalars
held in registers (1-D only).  Functions: ``(i64, f32) -> i64``.

Every type is interned, so ``is`` and ``==`` agree and hashing is cheap; the
text of a type parses once and is then looked up in a cache.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np


class Type:
    """Base of all types.  Subclasses are interned through ``_intern``."""

    __slots__ = ("_text", "__weakref__")
    _table: dict = {}

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Type({self._text})"

    def __reduce__(self):
        return (parse_type, (self._text,))

    @property
    def is_integer(self) -> bool:
        return False

    @property
    def is_float(self) -> bool:
        return False

    @property
    def is_index(self) -> bool:
        return False

    @property
    def is_int_or_index(self) -> bool:
        return self.is_integer or self.is_index

    @property
    def is_shaped(self) -> bool:
        return False

    @property
    def element_type(self) -> Type:
        """The scalar type of a shaped type; a scalar type is its own element type."""
        return self


def _intern(cls, key, text):
    table = Type._table
    obj = table.get((cls, key))
    if obj is None:
        obj = object.__new__(cls)
        obj._text = text
        table[(cls, key)] = obj
    return obj


class IntegerType(Type):
    """A signless integer of ``width`` bits; arithmetic wraps modulo 2**width."""

    __slots__ = ("width",)

    def __new__(cls, width: int):
        if not isinstance(width, int) or not 1 <= width <= 128:
            raise ValueError(f"integer width must be in [1, 128], got {width!r}")
        obj = _intern(cls, width, f"i{width}")
        obj.width = width
        return obj

    @property
    def is_integer(self) -> bool:
        return True

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


class IndexType(Type):
    """The target's pointer-sized integer, 64 bits in irc."""

    __slots__ = ()
    width = 64

    def __new__(cls):
        return _intern(cls, None, "index")

    @property
    def is_index(self) -> bool:
        return True

    @property
    def mask(self) -> int:
        return (1 << 64) - 1


class FloatType(Type):
    """An IEEE binary float (``f16``, ``f32``, ``f64``) or ``bf16``."""

    __slots__ = ("width", "kind")
    WIDTHS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}

    def __new__(cls, kind: str):
        if kind not in cls.WIDTHS:
            raise ValueError(f"unknown float type {kind!r}")
        obj = _intern(cls, kind, kind)
        obj.kind = kind
        obj.width = cls.WIDTHS[kind]
        return obj

    @property
    def is_float(self) -> bool:
        return True


class ShapedType(Type):
    """Common base of tensors and memrefs: a shape (``None`` = dynamic) and an element type."""

    __slots__ = ("shape", "element")

    @property
    def is_shaped(self) -> bool:
        return True

    @property
    def element_type(self) -> Type:
        return self.element

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def has_static_shape(self) -> bool:
        return None not in self.shape

    @property
    def num_elements(self) -> int | None:
        if not self.has_static_shape:
            return None
        n = 1
        for d in self.shape:
            n *= d
        return n

    def _shape_text(self) -> str:
        return "".join(("?" if d is None else str(d)) + "x" for d in self.shape)


class TensorType(ShapedType):
    """``tensor<4x?xf32>``: an immutable n-d value."""

    __slots__ = ()

    def __new__(cls, shape, element: Type):
        shape = tuple(None if d is None else int(d) for d in shape)
        _check_shape(shape, element)
        text = f"tensor<{''.join(('?' if d is None else str(d)) + 'x' for d in shape)}{element}>"
        obj = _intern(cls, (shape, element), text)
        obj.shape = shape
        obj.element = element
        return obj

    def with_shape(self, shape) -> TensorType:
        return TensorType(shape, self.element)


class MemRefType(ShapedType):
    """``memref<4x?xf32>`` or ``memref<4xf32, gpu>``: a mutable, row-major buffer."""

    __slots__ = ("memory_space",)

    def __new__(cls, shape, element: Type, memory_space: str | None = None):
        shape = tuple(None if d is None else int(d) for d in shape)
        _check_shape(shape, element)
        dims = "".join(("?" if d is None else str(d)) + "x" for d in shape)
        space = f", {memory_space}" if memory_space else ""
        obj = _intern(cls, (shape, element, memory_space), f"memref<{dims}{element}{space}>")
        obj.shape = shape
        obj.element = element
        obj.memory_space = memory_space
        return obj


class VectorType(Type):
    """``vector<16xf32>``: ``size`` scalars of one type, a value held in (vector) registers.

    MLIR's vector type, 1-D and of fixed size only: what code generators write to say
    "one SIMD operation" directly instead of leaving it to LLVM's SLP vectoriser to
    rediscover from hundreds of scalar ops (which cost most of the GEMM library's compile
    time).  Not a shaped type: it lives in registers, not memory, and has no dynamic size.
    A size that is not the target's register width is split or padded by LLVM."""

    __slots__ = ("size", "element")

    MAX_SIZE = 1024
    """Largest size irc accepts (LLVM's own limit is far higher; a wider vector only costs
    compile time and registers)."""

    def __new__(cls, size: int, element: Type):
        size = int(size)
        if not isinstance(element, (IntegerType, IndexType, FloatType)):
            raise ValueError(f"vector element type must be an integer, index or float type, got {element}")
        if not 1 <= size <= cls.MAX_SIZE:
            raise ValueError(f"vector size must be between 1 and {cls.MAX_SIZE}, got {size}")
        obj = _intern(cls, (size, element), f"vector<{size}x{element}>")
        obj.size = size
        obj.element = element
        return obj

    @property
    def element_type(self) -> Type:
        return self.element

    @property
    def shape(self) -> tuple:
        return (self.size,)

    @property
    def is_float(self) -> bool:
        return self.element.is_float


class FunctionType(Type):
    """``(i64, f32) -> i64``: the signature of a function or a generic op."""

    __slots__ = ("inputs", "results")

    def __new__(cls, inputs, results):
        inputs, results = tuple(inputs), tuple(results)
        ins = ", ".join(map(str, inputs))
        if len(results) == 1 and not isinstance(results[0], FunctionType):
            outs = str(results[0])
        else:
            outs = "(" + ", ".join(map(str, results)) + ")"
        obj = _intern(cls, (inputs, results), f"({ins}) -> {outs}")
        obj.inputs = inputs
        obj.results = results
        return obj

    def __reduce__(self):  # parse_type reads no function types
        return (FunctionType, (self.inputs, self.results))


MAX_BUFFER_BYTES = (1 << 63) - 1
"""The largest byte size of a tensor or buffer: it must fit in an ``index`` (int64), as in C
(PTRDIFF_MAX) and numpy.  Types whose static sizes exceed it are rejected; at run time the
interpreter and compiled code fault with one message ("array is too big") at the op that
asks for more (see dialects/memref.py)."""


def element_bytes(element: Type) -> int:
    """Bytes one element occupies in a buffer (``i1`` takes a byte, ``index`` eight)."""
    width = 64 if isinstance(element, IndexType) else element.width
    return max(1, (width + 7) // 8)


def _check_shape(shape, element) -> None:
    if not isinstance(element, (IntegerType, IndexType, FloatType)):
        raise ValueError(f"element type must be an integer, index or float type, got {element}")
    for d in shape:
        if d is not None and d < 0:
            raise ValueError(f"dimension sizes must be non-negative, got {d}")
    # A '?' may be 1, and a size of 0 counts as 1 (numpy's rule: it cannot make a 2^62 x 0 array
    # either), so the static sizes alone must fit.
    nbytes = element_bytes(element)
    for d in shape:
        nbytes *= d or 1
    if nbytes > MAX_BUFFER_BYTES:
        dims = "x".join("?" if d is None else str(d) for d in shape)
        raise ValueError(f"a {dims} shape of {element} needs {nbytes} bytes, more than the largest "
                         f"possible size (2^63 - 1 bytes)")


i1 = IntegerType(1)
i8 = IntegerType(8)
i16 = IntegerType(16)
i32 = IntegerType(32)
i64 = IntegerType(64)
index = IndexType()
f16 = FloatType("f16")
bf16 = FloatType("bf16")
f32 = FloatType("f32")
f64 = FloatType("f64")

_SCALARS = {"index": index, "f16": f16, "bf16": bf16, "f32": f32, "f64": f64}
_SHAPED_RE = re.compile(r"(tensor|memref)<((?:(?:\d+|\?)x)*)(\w+)(?:,\s*(\w+))?>$")
_VECTOR_RE = re.compile(r"vector<(\d+)x([a-z]\w*)>$")


@lru_cache(maxsize=4096)
def parse_type(text: str) -> Type:
    """Parse the text of a scalar or shaped type (not a function type).

    Raises ValueError with a message suitable for a diagnostic.
    """
    text = text.strip()
    scalar = _SCALARS.get(text)
    if scalar is not None:
        return scalar
    if text[:1] == "i" and text[1:].isdigit():
        return IntegerType(int(text[1:]))
    m = _SHAPED_RE.match(text)
    if m is None:
        if text.startswith("vector<"):
            return _parse_vector(text)
        raise ValueError(f"unknown type '{text}'")
    kind, dims, elem, space = m.groups()
    element = parse_type(elem)
    if element.is_shaped:
        raise ValueError(f"element type of '{text}' must be a scalar type")
    shape = [None if d == "?" else int(d) for d in dims.split("x")[:-1]]
    if kind == "tensor":
        if space:
            raise ValueError(f"tensor types have no memory space: '{text}'")
        return TensorType(shape, element)
    return MemRefType(shape, element, _NUMBERED_SPACES.get(space, space))


def _parse_vector(text: str) -> VectorType:
    m = _VECTOR_RE.match(text)
    if m is None:
        raise ValueError(f"irc's vector types have one fixed size, as in 'vector<16xf32>': got '{text}' "
                         "(multi-dimensional and scalable vectors are not supported)")
    element = parse_type(m.group(2))
    return VectorType(int(m.group(1)), element)


_NUMBERED_SPACES = {"1": "gpu", "3": "workgroup", "5": "private"}
"""MLIR's numbered memory spaces (NVVM's address spaces: global, shared, local), as irc names
them: what ``irc opt --emit mlir`` writes them as (irc/mlir.py) reads back the same."""


_NUMPY_DTYPES = {
    "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "index": np.int64, "f16": np.float16, "f32": np.float32, "f64": np.float64,
}


def numpy_dtype(t: Type) -> np.dtype:
    """The numpy dtype that holds values of scalar type ``t`` (``bf16`` has none)."""
    dt = _NUMPY_DTYPES.get(str(t.element_type))
    if dt is None:
        raise TypeError(f"type {t} has no numpy dtype")
    return np.dtype(dt)


def type_of_dtype(dtype) -> Type:
    """The irc scalar type for a numpy dtype."""
    dtype = np.dtype(dtype)
    for name, dt in _NUMPY_DTYPES.items():
        if name != "index" and np.dtype(dt) == dtype:
            return parse_type(name)
    raise TypeError(f"numpy dtype {dtype} has no irc type")
