"""The ``vector`` dialect (MLIR's, in part): SIMD values and the loads and stores that move them.

``%v = vector.load %m[%i, %j] : memref<4x64xf32>, vector<16xf32>`` reads 16 consecutive
elements of one row, ``vector.store %v, %m[%i, %j] : memref<4x64xf32>, vector<16xf32>``
writes them, ``%b = vector.broadcast %x : f32 to vector<16xf32>`` repeats a scalar and
``%v = vector.from_elements %a, %b : vector<2xf32>`` gathers scalars, and
``%r = vector.shuffle %a, %b [0, 8, 1, 9] : vector<8xf32>, vector<8xf32>`` picks lanes of two
vectors (a register transpose: the GEMM library's packing of a transposed operand).
Arithmetic on vectors is the scalar dialects' own: ``arith.addf``, ``arith.subf``,
``arith.mulf``, ``arith.maximumf`` and ``math.fma`` take ``vector<NxT>`` operands, lane by lane
(``ElementwiseOp.takes_vectors``).

Why irc has vectors at all: a code generator that knows it wants one SIMD operation (the
GEMM micro-kernel: a row of the tile is one register) can say so, instead of writing
hundreds of scalar ops for LLVM's SLP vectoriser to put back together, which was most of
the GEMM library's compile time.  LLVM splits a vector wider than the target's registers.

Memory safety as for ``memref.load``: all ``size`` elements must lie inside the last
dimension of the row the indices name (an access that runs past its row is a fault at
the op, in the interpreter and, with bounds checks, in compiled code).  The rest of
MLIR's vector dialect (transfer ops, masks, contractions, n-D vectors) is not irc's.
"""

from __future__ import annotations

import numpy as np

from irc.attributes import DenseArrayAttr
from irc.diagnostics import IRError
from irc.operation import Operation, Pure
from irc.registry import syntax_rule
from irc.types import FloatType, IndexType, IntegerType, MemRefType, VectorType, i64, index

from .memref import _check_indices, _element_index, storage_dtype

OPS = ("vector.load", "vector.store", "vector.broadcast", "vector.from_elements", "vector.shuffle")
"""The ops of MLIR's vector dialect that irc has (named in the diagnostic for the others)."""


def out_of_row(t: MemRefType, size: int) -> str:
    return f"vector of {size} elements runs past the end of a row of {t}"


def _vector_range(interp, op, buf, idx, size: int):
    """The numpy index of ``size`` elements from ``idx`` along the last dimension, or a fault."""
    first = _element_index(interp, op, buf, idx)  # a freed buffer, or the first lane out of bounds
    if first[-1] + size > buf.array.shape[-1]:
        raise interp.fault(op, out_of_row(buf.type, size))
    return (*first[:-1], slice(first[-1], first[-1] + size))


def _memref_and_vector(syn, what: str) -> tuple[MemRefType, VectorType]:
    types = syn.plain_types("memref<...>, vector<...>")
    if len(types) != 2 or not isinstance(types[0], MemRefType) or not isinstance(types[1], VectorType):
        raise IRError(f"'{syn.name}' expects {what} : memref<...>, vector<NxT>'", syn.loc)
    return types[0], types[1]


def _check_access(op, memref_value, indices, vector_type) -> None:
    _check_indices(op, memref_value, indices)
    t = memref_value.type
    if t.rank == 0:
        raise op.error(f"needs a memref of rank 1 or more, got {t}")
    if vector_type.element_type is not t.element_type:
        raise op.error(f"{vector_type} does not have the element type of {t}")
    if getattr(t.element_type, "width", 0) == 1:
        raise op.error("vectors of i1 are not loaded or stored (a buffer holds an i1 in a byte)")


class LoadOp(Operation):
    """``%v = vector.load %m[%i, ...] : memref<...>, vector<NxT>``: N consecutive elements."""

    name = "vector.load"
    summary = "Read consecutive elements of a buffer's row into a vector."
    example = "%r = vector.load %buf[%i] : memref<?xf32>, vector<16xf32>"

    def verify_op(self) -> None:
        if not self.operands or len(self.results) != 1 or not isinstance(self.results[0].type, VectorType):
            raise self.error("takes a memref and indices, and has one vector result")
        _check_access(self, self.operands[0], self.operands[1:], self.results[0].type)

    def interpret(self, interp, args):
        buf = args[0]
        where = _vector_range(interp, self, buf, args[1:], self.results[0].type.size)
        values = buf.array[where].copy()
        return [values if isinstance(buf.type.element_type, FloatType) else values.astype(np.int64)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t, v = _memref_and_vector(syn, "'%buffer[%i, ...]")
        if len(syn.args) != 1 or not isinstance(syn.args[0], tuple) or syn.args[0][0] != "indexed":
            raise IRError("'vector.load' expects '%buffer[%i, ...] : memref<...>, vector<NxT>'", syn.loc)
        _, mem, idx = syn.args[0]
        return cls([ctx.value(mem, t), *[ctx.value(i, index) for i in idx]], [v], syn.attrs)

    def print_custom(self, p) -> None:
        m = self.operands[0]
        p.write(f" {p.value(m)}[{p.values(self.operands[1:])}]{p.attr_dict(self.attributes)} : "
                f"{m.type}, {self.results[0].type}")

    @classmethod
    def build(cls, memref, indices, size: int):
        return cls([memref, *indices], [VectorType(size, memref.type.element_type)])


class StoreOp(Operation):
    """``vector.store %v, %m[%i, ...] : memref<...>, vector<NxT>``: N consecutive elements."""

    name = "vector.store"
    summary = "Write a vector into consecutive elements of a buffer's row."
    example = "vector.store %vec, %buf[%i] : memref<?xf32>, vector<16xf32>"

    def verify_op(self) -> None:
        if len(self.operands) < 2 or self.results or not isinstance(self.operands[0].type, VectorType):
            raise self.error("takes a vector, a memref and indices")
        _check_access(self, self.operands[1], self.operands[2:], self.operands[0].type)

    def interpret(self, interp, args):
        value, buf = args[0], args[1]
        where = _vector_range(interp, self, buf, args[2:], self.operands[0].type.size)
        buf.array[where] = np.asarray(value).astype(storage_dtype(buf.type), copy=False)
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t, v = _memref_and_vector(syn, "'%value, %buffer[%i, ...]")
        args = syn.args
        if len(args) != 2 or isinstance(args[0], tuple) or not isinstance(args[1], tuple) \
                or args[1][0] != "indexed":
            raise IRError("'vector.store' expects '%value, %buffer[%i, ...] : memref<...>, vector<NxT>'", syn.loc)
        _, mem, idx = args[1]
        return cls([ctx.value(args[0], v), ctx.value(mem, t), *[ctx.value(i, index) for i in idx]], [], syn.attrs)

    def print_custom(self, p) -> None:
        v, m = self.operands[:2]
        p.write(f" {p.value(v)}, {p.value(m)}[{p.values(self.operands[2:])}]{p.attr_dict(self.attributes)}"
                f" : {m.type}, {v.type}")

    @classmethod
    def build(cls, value, memref, indices):
        return cls([value, memref, *indices])


class BroadcastOp(Operation):
    """``%v = vector.broadcast %x : f32 to vector<16xf32>``: every lane is ``%x``."""

    name = "vector.broadcast"
    traits = frozenset({Pure})
    summary = "A vector whose every element is the scalar operand."
    example = "%r = vector.broadcast %x : f32 to vector<16xf32>"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("takes one scalar and has one vector result")
        src, dst = self.operands[0].type, self.results[0].type
        if not isinstance(dst, VectorType) or not isinstance(src, (IntegerType, IndexType, FloatType)):
            raise self.error(f"broadcasts a scalar to a vector, got {src} to {dst}")
        if dst.element_type is not src:
            raise self.error(f"{dst} does not have the operand's type {src} as its element type")

    def interpret(self, interp, args):
        t = self.results[0].type
        return [np.full(t.size, args[0], dtype=np.asarray(args[0]).dtype)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        sig = syn.sig
        if sig is None or sig[0] != "cast" or len(sig[1]) != 1 or len(sig[2]) != 1 or len(syn.args) != 1 \
                or isinstance(syn.args[0], tuple):
            raise IRError("'vector.broadcast' expects '%scalar : T to vector<NxT>'", syn.loc)
        return cls([ctx.value(syn.args[0], sig[1][0])], [sig[2][0]], syn.attrs)

    def print_custom(self, p) -> None:
        x = self.operands[0]
        p.write(f" {p.value(x)}{p.attr_dict(self.attributes)} : {x.type} to {self.results[0].type}")

    @classmethod
    def build(cls, scalar, size: int):
        return cls([scalar], [VectorType(size, scalar.type)])


class FromElementsOp(Operation):
    """``%v = vector.from_elements %a, %b, ... : vector<NxT>``: lane i is the i-th operand."""

    name = "vector.from_elements"
    traits = frozenset({Pure})
    summary = "A vector of its scalar operands, in order."
    example = "%r = vector.from_elements %x, %y : vector<2xf32>"

    def verify_op(self) -> None:
        if len(self.results) != 1 or not isinstance(self.results[0].type, VectorType):
            raise self.error("has one vector result")
        t = self.results[0].type
        if len(self.operands) != t.size:
            raise self.error(f"needs {t.size} operands for {t}, got {len(self.operands)}")
        for v in self.operands:
            if v.type is not t.element_type:
                raise self.error(f"operands must be of {t}'s element type {t.element_type}, got {v.type}")

    def interpret(self, interp, args):
        return [np.array(args, dtype=np.asarray(args[0]).dtype)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = syn.single_type()
        if not isinstance(t, VectorType) or any(isinstance(a, tuple) for a in syn.args):
            raise IRError("'vector.from_elements' expects '%a, %b, ... : vector<NxT>'", syn.loc)
        return cls([ctx.value(a, t.element_type) for a in syn.args], [t], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} : {self.results[0].type}")

    @classmethod
    def build(cls, elements):
        return cls(list(elements), [VectorType(len(elements), elements[0].type)])


class ShuffleOp(Operation):
    """``%r = vector.shuffle %a, %b [0, 8, 1, 9] : vector<8xf32>, vector<8xf32>``: lane i of the
    result is lane ``mask[i]`` of ``%a`` and ``%b`` laid end to end (MLIR's op and spelling; its
    generic form holds the mask as ``{mask = array<i64: ...>}``).

    irc's form is MLIR's for two 1-D vectors of one type; MLIR's 0-D vectors, operands of
    different lengths and poison lanes (-1) are not irc's.  With two operands of one type it is
    exactly LLVM's ``shufflevector``."""

    name = "vector.shuffle"
    traits = frozenset({Pure})
    summary = "A vector of lanes picked from two vectors by a constant mask."
    example = "%r = vector.shuffle %vec, %vec2 [0, 16, 1, 17] : vector<16xf32>, vector<16xf32>"

    @property
    def mask(self) -> tuple:
        attr = self.attributes.get("mask")
        return attr.values if isinstance(attr, DenseArrayAttr) else ()

    def verify_op(self) -> None:
        if len(self.operands) != 2 or len(self.results) != 1:
            raise self.error("takes two vectors and has one vector result")
        a, b = self.operands[0].type, self.operands[1].type
        if not isinstance(a, VectorType) or a is not b:
            raise self.error(f"shuffles two vectors of one type, got {a} and {b}")
        attr = self.attributes.get("mask")
        if not isinstance(attr, DenseArrayAttr) or attr.element is not i64 or not attr.values:
            raise self.error("needs a mask of lanes: 'mask = array<i64: ...>', at least one")
        bad = [m for m in attr.values if not 0 <= m < 2 * a.size]
        if bad:
            raise self.error(f"mask lane {bad[0]} is not a lane of two {a} (0 to {2 * a.size - 1})")
        want = VectorType(len(attr.values), a.element_type)
        if self.results[0].type is not want:
            raise self.error(f"the result of a {len(attr.values)}-lane mask is {want}, not {self.results[0].type}")

    def interpret(self, interp, args):
        return [np.concatenate([np.asarray(args[0]), np.asarray(args[1])])[list(self.mask)]]

    def print_custom(self, p) -> None:
        a, b = self.operands
        p.write(f" {p.value(a)}, {p.value(b)} [{', '.join(map(str, self.mask))}]"
                f"{p.attr_dict(self.attributes, elide=('mask',))} : {a.type}, {b.type}")

    @classmethod
    def build(cls, a, b, mask):
        mask = [int(m) for m in mask]
        return cls([a, b], [VectorType(len(mask), a.type.element_type)], {"mask": DenseArrayAttr(i64, mask)})


@syntax_rule("shuffle_op")
def _parse_shuffle(ctx, children):
    kw, a, b, *rest = children
    a_t, b_t = ctx.type_of(rest[-2]), ctx.type_of(rest[-1])
    rest = rest[:-2]
    attrs = dict(rest.pop()) if rest and isinstance(rest[-1], dict) else {}
    if "mask" in attrs:
        raise IRError("'vector.shuffle' takes its mask in brackets after the operands, not as an attribute",
                      ctx.loc(kw))
    if not isinstance(a_t, VectorType) or not isinstance(b_t, VectorType):
        raise IRError(f"'vector.shuffle' shuffles vectors, got {a_t} and {b_t}", ctx.loc(kw))
    mask = []
    for tok in rest:
        lane = int(tok.value)
        if not 0 <= lane < 1 << 32:
            raise IRError(f"a mask lane must be from 0 to 2^32 - 1, got {lane}", ctx.loc(tok))
        mask.append(lane)
    if not mask:
        raise IRError("'vector.shuffle' needs at least one lane in its mask", ctx.loc(kw))
    result = VectorType(len(mask), a_t.element_type) if len(mask) <= VectorType.MAX_SIZE else None
    if result is None:
        raise IRError(f"a mask of {len(mask)} lanes is wider than a vector may be ({VectorType.MAX_SIZE})",
                      ctx.loc(kw))
    return ShuffleOp([ctx.value(a, a_t), ctx.value(b, b_t)], [result],
                     {"mask": DenseArrayAttr(i64, mask), **attrs}, loc=ctx.loc(kw))
