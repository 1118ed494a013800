"""What the parser hands an op class that reads its own uniform assembly form.

The grammar parses every uniform op into the same shape: a list of argument
items, an attribute dictionary, regions, and a type signature.  The op class
(usually through its family's base class) decides what those mean and builds
the op, resolving names through the ``ParseContext`` it is given.  This keeps
one grammar for all dialects while each op keeps MLIR's exact spelling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .attributes import (
    Attribute,
    DenseAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    integer_attr,
    numpy_float_from_bits,
)
from .diagnostics import IRError, Location
from .types import FloatType, IndexType, IntegerType, ShapedType, Type, i1


class Literal:
    """A number, boolean, string or dense literal whose type comes from context."""

    __slots__ = ("kind", "value", "loc")

    def __init__(self, kind: str, value: Any, loc: Location):
        self.kind = kind  # 'int' | 'float' | 'hex' | 'bool' | 'str' | 'dense'
        self.value = value
        self.loc = loc

    def to_attr(self, type: Type | None) -> Attribute:
        """The attribute this literal denotes as a value of ``type``."""
        kind = self.kind
        if kind == "str":
            return StringAttr(self.value)
        if type is None:
            if kind == "bool":
                return IntegerAttr(int(self.value), i1)
            raise IRError("a literal here needs a type: add ': TYPE'", self.loc)
        if kind == "dense":
            if not isinstance(type, ShapedType):
                raise IRError(f"dense literal needs a tensor type, not {type}", self.loc)
            return dense_attr(self.value, type, self.loc)
        return scalar_attr(self, type)


def scalar_attr(lit: Literal, type: Type) -> Attribute:
    kind, value = lit.kind, lit.value
    if isinstance(type, FloatType):
        if kind == "hex":
            if value >= 1 << type.width:
                raise IRError(f"hexadecimal literal {value:#x} does not fit in {type} ({type.width} bits)", lit.loc)
            return FloatAttr.from_bits(value, type)
        if kind == "bool":
            raise IRError(f"expected a floating point literal for {type}", lit.loc)
        try:
            attr = FloatAttr(float(value), type)
        except OverflowError:  # an integer literal beyond every float
            raise IRError(f"integer literal does not fit in {type}", lit.loc) from None
        if math.isinf(attr.value):  # decimal literals spell no infinity (its hex bits do)
            raise IRError(f"float literal {value!r} is out of range for {type}", lit.loc)
        return attr
    if isinstance(type, (IntegerType, IndexType)):
        if kind == "float":
            raise IRError(f"expected an integer literal for {type}, got '{value}'", lit.loc)
        if kind == "bool" and type is not i1:
            raise IRError(f"'{'true' if value else 'false'}' is an i1 literal, not {type}", lit.loc)
        value = int(value)
        width = 64 if isinstance(type, IndexType) else type.width
        if kind == "hex":  # a bit pattern of the width (0xFF : i8 is -1), as MLIR reads it
            if value >= 1 << width:
                raise IRError(f"hexadecimal literal {value:#x} does not fit in {type} "
                              f"({width} bit{'' if width == 1 else 's'})", lit.loc)
        elif not -(1 << (width - 1)) - (1 if width == 1 else 0) <= value < (1 << width):
            raise IRError(f"integer literal {value} does not fit in {type}", lit.loc)
        return integer_attr(value, type)
    raise IRError(f"a literal of type {type} is not supported here", lit.loc)


def dense_attr(value, type: ShapedType, loc: Location) -> DenseAttr:
    """Build a dense attribute from a nested list of Literals (or one splat Literal)."""
    elem = type.element_type

    def convert(x):
        if isinstance(x, list):
            return [convert(e) for e in x]
        attr = scalar_attr(x, elem)
        if isinstance(attr, FloatAttr):  # a numpy scalar made from the bits: a signalling NaN stays one
            return numpy_float_from_bits(attr.bits, elem)
        return attr.value & 1 if elem is i1 else attr.value

    data = convert(value)
    if isinstance(value, list):
        shape = _nested_shape(data)
        empty = not data and type.has_static_shape and type.num_elements == 0  # dense<[]>
        if shape != tuple(type.shape) and not empty:
            raise IRError(f"dense literal of shape {list(shape)} does not match {type}", loc)
    if not type.has_static_shape:
        raise IRError(f"dense literal needs a static shape, not {type}", loc)
    if str(elem) == "bf16" or isinstance(elem, FloatType):
        pass
    elif not (isinstance(elem, IndexType) or elem.width == 1):
        # Two's complement wrap for the storage dtype.
        data = _wrap_nested(data, elem.width)
    try:
        return DenseAttr(data, type)
    except TypeError:  # an element type numpy has no dtype for (i23...)
        raise IRError(f"dense literals of {elem} are not supported (integers must be i1, i8, i16, i32, "
                      "i64 or index)", loc) from None


def _nested_shape(data) -> tuple:
    shape = []
    while isinstance(data, list):
        shape.append(len(data))
        if not data:
            break
        data = data[0]
    return tuple(shape)


def _wrap_nested(data, width):
    if isinstance(data, list):
        return [_wrap_nested(x, width) for x in data]
    data &= (1 << width) - 1
    return data - (1 << width) if data >= 1 << (width - 1) else data


@dataclass(slots=True)
class UniformSyntax:
    """A parsed uniform op: ``name args {attrs} (regions) : signature``.

    ``args`` holds items: a value token, or a tuple tagged 'indexed', 'keyword',
    'callee', 'symbol', 'group', 'succ', 'incoming' or 'literal'.  ``sig`` is None,
    ('plain', [types]), ('cast', [types], [types]) or ('fn', FunctionType).
    """

    name: str
    args: list
    attrs: dict
    regions: list
    sig: tuple | None
    loc: Location
    num_results: int = 0
    extra: dict | None = None  # free for an op's parser to use (made per op only if needed)

    def plain_types(self, what: str = "type") -> list[Type]:
        if self.sig is None or self.sig[0] != "plain":
            raise IRError(f"'{self.name}' expects ': {what}' after its operands", self.loc)
        return self.sig[1]

    def single_type(self) -> Type:
        types = self.plain_types()
        if len(types) != 1:
            raise IRError(f"'{self.name}' expects exactly one type, got {len(types)}", self.loc)
        return types[0]
