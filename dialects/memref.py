"""The ``memref`` dialect: buffers and the loads and stores that use them.

``%m = memref.alloc(%n) : memref<?xi64>`` (one index operand per ``?``),
``memref.alloca() : memref<4xf32>``, ``memref.dealloc %m : memref<?xi64>``,
``%v = memref.load %m[%i] : memref<?xi64>``, ``memref.store %v, %m[%i] :
memref<?xi64>``, ``%d = memref.dim %m, %c0 : memref<?xi64>``,
``memref.copy %a, %b : memref<4xf32> to memref<4xf32>``.

Buffers are row-major and contiguous.  An access out of bounds, or to a freed
buffer, is an error that the interpreter reports at the op.

Sizes are checked where a buffer comes to be (alloc, alloca, view): a negative
size, or a byte size above ``MAX_BUFFER_BYTES`` (2^63 - 1, what an ``index``
holds), is a fault at the op, never a wrapped size.  The messages below are
shared with compiled code (runtime/cpu/translate.py), so both engines report
the same fault with the same words at the same op.
"""

from __future__ import annotations

import numpy as np

from irc.attributes import (
    ArrayAttr,
    DenseArrayAttr,
    DenseAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    TypeAttr,
    UnitAttr,
)
from irc.diagnostics import IRError
from irc.operation import Operation, Pure, ReturnLike, Terminator
from irc.registry import syntax_rule
from irc.semantics import Buffer, float_dtype
from irc.syntax import Literal
from irc.types import (
    MAX_BUFFER_BYTES,
    FloatType,
    IndexType,
    MemRefType,
    TensorType,
    i1,
    i32,
    i64,
    index,
    numpy_dtype,
)

from .gpu import DEVICE_SPACES, check_memory_space
from .scf import RegionRunOnce

# Fault messages, worded once for the interpreter and compiled code alike.
NEGATIVE_SIZE = "negative buffer size"
FREED_ACCESS = "access to a freed buffer"
FREED_VIEW = "view of a freed buffer"
FREED_TWICE = "buffer freed twice"
NOT_ALLOCATED = "memref.dealloc of a buffer that memref.alloc did not allocate (an alloca, a view or an argument)"


def too_big(t: MemRefType) -> str:
    return f"array is too big: {t} of these sizes needs more than 2^63 - 1 bytes"


def out_of_memory(op_name: str) -> str:
    return f"out of memory in {op_name}"


def view_does_not_fit(t: MemRefType) -> str:
    return f"memref.view of {t} does not fit in its source"


def view_misaligned(t: MemRefType) -> str:
    return f"memref.view of {t}: the byte offset is not a multiple of the element size ({item_bytes(t)})"


def item_bytes(t: MemRefType) -> int:
    """Bytes per element in a buffer of type ``t`` (as stored: the interpreter keeps bf16 in a float32)."""
    return np.dtype(storage_dtype(t)).itemsize


def byte_size(shape, t: MemRefType) -> int:
    """The exact byte size of a buffer of type ``t`` and ``shape`` (Python ints: no wrapping)."""
    n = item_bytes(t)
    for d in shape:
        n *= d
    return n


def is_too_big(shape, t: MemRefType) -> bool:
    """Whether the byte size, counting a size of 0 as 1, passes MAX_BUFFER_BYTES: numpy's rule
    (it cannot make a 2^62 x 0 array either), kept by compiled code and the type verifier."""
    n = item_bytes(t)
    for d in shape:
        n *= d or 1
    return n > MAX_BUFFER_BYTES


def _memref_type(syn) -> MemRefType:
    t = syn.single_type()
    if not isinstance(t, MemRefType):
        raise IRError(f"'{syn.name}' expects a memref type, got {t}", syn.loc)
    return t


def storage_dtype(t: MemRefType):
    e = t.element_type
    if isinstance(e, FloatType):
        return float_dtype(e)
    return np.dtype(np.bool_) if getattr(e, "width", 64) == 1 else numpy_dtype(e)


class AllocOp(Operation):
    """Allocate a buffer on the heap; freed by memref.dealloc."""

    name = "memref.alloc"
    summary = "Allocate a heap buffer; one index operand per dynamic dimension."
    example = "%r = memref.alloc(%n) : memref<?xi64>"

    def verify_op(self) -> None:
        if len(self.results) != 1 or not isinstance(self.results[0].type, MemRefType):
            raise self.error("has one memref result")
        t = self.results[0].type
        dynamic = sum(d is None for d in t.shape)
        if len(self.operands) != dynamic:
            raise self.error(f"needs {dynamic} dynamic size operand(s) for {t}, got {len(self.operands)}")
        for v in self.operands:
            if not isinstance(v.type, IndexType):
                raise self.error(f"sizes must be index values, got {v.type}")

    def interpret(self, interp, args):
        t = self.results[0].type
        sizes = iter(args)
        shape = tuple(next(sizes) if d is None else d for d in t.shape)
        if any(s < 0 for s in shape):
            raise interp.fault(self, NEGATIVE_SIZE)
        if is_too_big(shape, t):
            raise interp.fault(self, too_big(t))
        def make():
            try:
                array = np.zeros(shape, dtype=storage_dtype(t))
            except (MemoryError, ValueError):
                raise interp.fault(self, out_of_memory(self.name)) from None
            return Buffer(array, t, heap=self.name == "memref.alloc")

        if t.memory_space == "workgroup":  # one buffer per block of a kernel, shared by its threads
            from .gpu import workgroup_buffer

            return [workgroup_buffer(interp, self, make)]
        return [make()]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        if len(syn.args) != 1 or not isinstance(syn.args[0], tuple) or syn.args[0][0] != "group":
            raise IRError(f"'{cls.name}' expects '(%sizes...) : memref<...>'", syn.loc)
        sizes = [ctx.value(tok, index) for tok in syn.args[0][1]]
        return cls(sizes, [t], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f"({p.values(self.operands)}){p.attr_dict(self.attributes)} : {self.results[0].type}")

    @classmethod
    def build(cls, type: MemRefType, sizes=()):
        return cls(list(sizes), [type])


class AllocaOp(AllocOp):
    """Like ``memref.alloc``: one index operand per dynamic dimension, one memref result."""

    name = "memref.alloca"
    summary = "Allocate a buffer in the function's stack frame; freed on return."
    # Compiled code checks it against the thread's stack budget ("stack exhausted"), a resource
    # limit the interpreter does not have (docs/cpu-backend.md).
    example = "%r = memref.alloca() : memref<4xf32>"


class DeallocOp(Operation):
    """``memref.dealloc %m : memref<...>``: one memref operand.

    Only a buffer made by ``memref.alloc`` may be freed, once: freeing an alloca, a
    view or an argument, or freeing twice, is an error at the op (checked in that
    order, here and in compiled code)."""

    name = "memref.dealloc"
    summary = "Free a buffer made by memref.alloc."
    example = "memref.dealloc %m : memref<?xi64>"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or not isinstance(self.operands[0].type, MemRefType):
            raise self.error("takes one memref")

    def interpret(self, interp, args):
        buf = args[0]
        if not buf.heap:
            raise interp.fault(self, NOT_ALLOCATED)
        if buf.freed:
            raise interp.fault(self, FREED_TWICE)
        buf.freed = True
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        if len(syn.args) != 1 or isinstance(syn.args[0], tuple):
            raise IRError("'memref.dealloc' expects '%buffer : memref<...>'", syn.loc)
        return cls([ctx.value(syn.args[0], t)], [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : {self.operands[0].type}")


def _check_indices(op, memref_value, indices) -> None:
    t = memref_value.type
    if not isinstance(t, MemRefType):
        raise op.error(f"expects a memref, got {t}")
    block = op.parent
    if t.memory_space is not None or block is None or block.parent is None or block.parent.parent is None \
            or block.parent.parent.name != "func.func":  # (host memory directly in a function: fine)
        check_memory_space(op, memref_value)  # host or device memory: dialects/gpu.py's exclusive rule
    if len(indices) != t.rank:
        raise op.error(f"needs {t.rank} {'index' if t.rank == 1 else 'indices'} for {t}, got {len(indices)}")
    for v in indices:
        if not isinstance(v.type, IndexType):
            raise op.error(f"indices must be index values, got {v.type}")


def _element_index(interp, op, buf: Buffer, idx):
    if buf.freed:
        raise interp.fault(op, FREED_ACCESS)
    shape = buf.array.shape
    for i, n in zip(idx, shape):
        if not 0 <= i < n:
            raise interp.fault(op, f"index {list(idx)} is out of bounds for a buffer of shape {list(shape)}")
    return tuple(idx)


class LoadOp(Operation):
    """``%v = memref.load %m[%i, ...] : memref<...>``: a memref, one index per dimension.

    The result has the memref's element type.  An index out of bounds, or a load
    from a freed buffer, is an error at the op.
    """

    name = "memref.load"
    summary = "Read one element of a buffer."
    example = "%r = memref.load %m[%i] : memref<?xi64>"

    def verify_op(self) -> None:
        if not self.operands or len(self.results) != 1:
            raise self.error("takes a memref and indices, and has one result")
        _check_indices(self, self.operands[0], self.operands[1:])
        if self.results[0].type is not self.operands[0].type.element_type:
            raise self.error(f"result type {self.results[0].type} is not the element type of "
                             f"{self.operands[0].type}")

    def interpret(self, interp, args):
        buf = args[0]
        value = buf.array[_element_index(interp, self, buf, args[1:])]
        elem = buf.type.element_type
        return [value if isinstance(elem, FloatType) else int(value)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        if len(syn.args) != 1 or not isinstance(syn.args[0], tuple) or syn.args[0][0] != "indexed":
            raise IRError("'memref.load' expects '%buffer[%i, ...] : memref<...>'", syn.loc)
        _, mem, idx = syn.args[0]
        return cls([ctx.value(mem, t), *[ctx.value(i, index) for i in idx]], [t.element_type], syn.attrs)

    def print_custom(self, p) -> None:
        m = self.operands[0]
        p.write(f" {p.value(m)}[{p.values(self.operands[1:])}]{p.attr_dict(self.attributes)} : {m.type}")

    @classmethod
    def build(cls, memref, indices=()):
        return cls([memref, *indices], [memref.type.element_type])


class StoreOp(Operation):
    """``memref.store %v, %m[%i, ...] : memref<...>``: the value (of the element type),
    the memref, and one index per dimension; no results.

    An index out of bounds, or a store to a freed buffer, is an error at the op.
    """

    name = "memref.store"
    summary = "Write one element of a buffer."
    example = "memref.store %a, %m[%i] : memref<?xi64>"

    def verify_op(self) -> None:
        if len(self.operands) < 2 or self.results:
            raise self.error("takes a value, a memref and indices")
        _check_indices(self, self.operands[1], self.operands[2:])
        if self.operands[0].type is not self.operands[1].type.element_type:
            raise self.error(f"value of type {self.operands[0].type} does not match the element type of "
                             f"{self.operands[1].type}")

    def interpret(self, interp, args):
        value, buf = args[0], args[1]
        at = _element_index(interp, self, buf, args[2:])
        try:
            buf.array[at] = value
        except ValueError:  # a read-only array: the buffer of a constant memref.global
            raise interp.fault(self, WRITE_TO_CONSTANT) from None
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        args = syn.args
        if len(args) != 2 or isinstance(args[0], tuple) or not isinstance(args[1], tuple) \
                or args[1][0] != "indexed":
            raise IRError("'memref.store' expects '%value, %buffer[%i, ...] : memref<...>'", syn.loc)
        _, mem, idx = args[1]
        operands = [ctx.value(args[0], t.element_type), ctx.value(mem, t), *[ctx.value(i, index) for i in idx]]
        return cls(operands, [], syn.attrs)

    def print_custom(self, p) -> None:
        v, m = self.operands[:2]
        p.write(f" {p.value(v)}, {p.value(m)}[{p.values(self.operands[2:])}]{p.attr_dict(self.attributes)}"
                f" : {m.type}")

    @classmethod
    def build(cls, value, memref, indices=()):
        return cls([value, memref, *indices])


class DimOp(Operation):
    """``%d = memref.dim %m, %k : memref<...>``: a memref and an index; the result is an index."""

    name = "memref.dim"
    summary = "The size of one dimension of a buffer (an index); an index out of range is an error."
    example = "%r = memref.dim %m, %i : memref<?xi64>"

    def verify_op(self) -> None:
        if len(self.operands) != 2 or len(self.results) != 1:
            raise self.error("takes a memref and a dimension index")
        if not isinstance(self.operands[0].type, MemRefType) or not isinstance(self.operands[1].type, IndexType):
            raise self.error("takes a memref and an index")
        if not isinstance(self.results[0].type, IndexType):
            raise self.error("result is an index")

    def interpret(self, interp, args):
        buf, d = args
        if not 0 <= d < buf.array.ndim:
            raise interp.fault(self, f"dimension {d} is out of range for a rank-{buf.array.ndim} buffer")
        return [buf.array.shape[d]]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        if len(syn.args) != 2 or any(isinstance(a, tuple) for a in syn.args):
            raise IRError("'memref.dim' expects '%buffer, %dim : memref<...>'", syn.loc)
        return cls([ctx.value(syn.args[0], t), ctx.value(syn.args[1], index)], [index], syn.attrs)

    def print_custom(self, p) -> None:
        m = self.operands[0]
        p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} : {m.type}")


class CopyOp(Operation):
    """``memref.copy %src, %dst : memref<...> to memref<...>``: two memrefs of one element
    type and rank; no results.  Copying between buffers of different shapes is an error at run time.
    """

    name = "memref.copy"
    summary = "Copy every element of one buffer into another of the same shape."
    example = "memref.copy %m, %m2 : memref<?xi64> to memref<?xi64>"

    def verify_op(self) -> None:
        if len(self.operands) != 2 or self.results:
            raise self.error("takes a source and a target memref")
        a, b = self.operand_types
        if not isinstance(a, MemRefType) or not isinstance(b, MemRefType) or a.element_type is not b.element_type \
                or a.rank != b.rank:
            raise self.error(f"source and target must be memrefs of one element type and rank, got {a} and {b}")
        if a.memory_space is not None or b.memory_space is not None:
            check_memory_space(self, self.operands[0])
            check_memory_space(self, self.operands[1])

    def interpret(self, interp, args):
        src, dst = args
        if src.freed or dst.freed:
            raise interp.fault(self, FREED_ACCESS)
        if src.array.shape != dst.array.shape:
            raise interp.fault(self, f"shapes differ: {list(src.array.shape)} and {list(dst.array.shape)}")
        if not dst.array.flags.writeable:
            raise interp.fault(self, WRITE_TO_CONSTANT)
        dst.array[...] = src.array
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if syn.sig is None or syn.sig[0] != "cast" or len(syn.args) != 2:
            raise IRError("'memref.copy' expects '%source, %target : memref<...> to memref<...>'", syn.loc)
        (a,), (b,) = syn.sig[1], syn.sig[2]
        return cls([ctx.value(syn.args[0], a), ctx.value(syn.args[1], b)], [], syn.attrs)

    def print_custom(self, p) -> None:
        a, b = self.operands
        p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} : {a.type} to {b.type}")


class ViewOp(Operation):
    """``%v = memref.view %src[%byte_offset][%sizes...] : memref<...> to memref<...>``.

    A buffer of the result type over the source's memory, starting ``byte_offset``
    bytes in; one index operand per ``?`` of the result.  It is how memory planning
    carves every intermediate buffer out of one arena, and how a contiguous buffer
    is seen with another shape (a flat view of a matrix).  The view must lie inside
    the source, and its offset must be a multiple of its element size (a fault
    otherwise, checked in that order here and in compiled code: an element at a
    misaligned address is undefined behaviour in LLVM, as MLIR lowers loads); it
    shares the source's lifetime (freeing the source frees the view), and it is
    not itself freed by ``memref.dealloc``.
    """

    name = "memref.view"
    summary = "A buffer of another shape and element type over a source buffer's memory, at a byte offset."
    example = "%v = memref.view %m[%i][] : memref<?xi64> to memref<2xf32>"

    def verify_op(self) -> None:
        if len(self.operands) < 2 or len(self.results) != 1:
            raise self.error("takes a source memref, a byte offset and the dynamic sizes")
        src, offset = self.operand_types[:2]
        t = self.results[0].type
        if not isinstance(src, MemRefType) or not isinstance(t, MemRefType):
            raise self.error(f"source and result must be memrefs, got {src} and {t}")
        if not isinstance(offset, IndexType):
            raise self.error(f"the byte offset must be an index, got {offset}")
        dynamic = sum(d is None for d in t.shape)
        if len(self.operands) - 2 != dynamic:
            raise self.error(f"needs {dynamic} dynamic size operand(s) for {t}, got {len(self.operands) - 2}")
        for v in self.operands[2:]:
            if not isinstance(v.type, IndexType):
                raise self.error(f"sizes must be index values, got {v.type}")

    def interpret(self, interp, args):
        src, offset = args[:2]
        t = self.results[0].type
        if src.freed:
            raise interp.fault(self, FREED_VIEW)
        sizes = iter(args[2:])
        shape = tuple(next(sizes) if d is None else d for d in t.shape)
        if hasattr(src, "view_at"):  # device memory of a runtime (runtime/gpu/driver.py): no host array
            return [src.view_at(interp, self, offset, shape, t)]
        dtype = np.dtype(storage_dtype(t))
        raw = src.array.reshape(-1).view(np.uint8)
        if any(s < 0 for s in shape) or is_too_big(shape, t) or offset < 0 or offset + byte_size(shape, t) > raw.size:
            raise interp.fault(self, view_does_not_fit(t))
        nbytes = byte_size(shape, t)
        if offset % item_bytes(t):
            raise interp.fault(self, view_misaligned(t))
        array = raw[offset:offset + nbytes].view(dtype).reshape(shape)
        return [Buffer(array, t, base=src.base or src)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if syn.sig is None or syn.sig[0] != "cast" or len(syn.args) != 1 or not isinstance(syn.args[0], tuple) \
                or syn.args[0][0] != "view" or len(syn.args[0][2]) != 1:
            raise IRError("'memref.view' expects '%source[%byte_offset][%sizes...] : memref<...> to memref<...>'",
                          syn.loc)
        (src_t,), (t,) = syn.sig[1], syn.sig[2]
        _, src, (offset,), sizes = syn.args[0]
        operands = [ctx.value(src, src_t), ctx.value(offset, index), *[ctx.value(s, index) for s in sizes]]
        return cls(operands, [t], syn.attrs)

    def print_custom(self, p) -> None:
        src, offset, *sizes = self.operands
        p.write(f" {p.value(src)}[{p.value(offset)}][{p.values(sizes)}]{p.attr_dict(self.attributes)} : "
                f"{src.type} to {self.results[0].type}")

    @classmethod
    def build(cls, source, byte_offset, type: MemRefType, sizes=()):
        return cls([source, byte_offset, *sizes], [type])


# ---- globals, alloca scopes and hints: the rest of the memref ops upstream tests use -------------


WRITE_TO_CONSTANT = "write to a constant memref.global"


def _symbol_name(op) -> str:
    sym = op.attributes.get("sym_name")
    return sym.value if isinstance(sym, StringAttr) else ""


class GlobalOp(Operation):
    """``memref.global ["private"] [constant] @g : memref<2xf32> [= dense<...> | = uninitialized]``.

    A module-level buffer of static shape, named by its symbol and read with
    ``memref.get_global``.  Without an initial value (or ``uninitialized``) it starts
    zeroed, as every irc buffer does.  Attributes as MLIR's properties: ``sym_name``,
    ``type``, ``initial_value`` (a dense constant of the buffer's shape, or the unit
    ``uninitialized``), ``constant``, ``sym_visibility``, ``alignment``.  Writing to a
    ``constant`` global is a fault in the interpreter (undefined in compiled code, where
    the buffer lies in read-only memory, as MLIR's).
    """

    name = "memref.global"
    summary = "A module-level buffer of static shape, optionally initialised and constant."
    example = 'memref.global "private" constant @table : memref<2xf32> = dense<[1.0, 2.0]>'
    example_is_module = True

    @property
    def sym_name(self) -> str:
        return _symbol_name(self)

    @property
    def type(self) -> MemRefType:
        return self.attributes["type"].type

    @property
    def initial_value(self):
        """The DenseAttr the buffer starts as, or None (zeroed)."""
        v = self.attributes.get("initial_value")
        return v if isinstance(v, DenseAttr) else None

    @property
    def is_constant(self) -> bool:
        return "constant" in self.attributes

    def verify_op(self) -> None:
        if self.operands or self.results or self.regions:
            raise self.error("takes no operands, results or regions")
        parent = self.parent_op
        if parent is None or parent.name != "builtin.module":
            raise self.error("must be at the top level of a module")
        if not self.sym_name:
            raise self.error("needs a symbol name")
        t = self.attributes.get("type")
        if not isinstance(t, TypeAttr) or not isinstance(t.type, MemRefType) or not t.type.has_static_shape:
            raise self.error(f"needs a memref type of static shape, got {t}")
        init = self.attributes.get("initial_value")
        if init is not None and not isinstance(init, (DenseAttr, UnitAttr)):
            raise self.error(f"initial value must be a dense constant or 'uninitialized', got {init}")
        if isinstance(init, DenseAttr) and (init.type.shape != t.type.shape
                                            or init.type.element_type is not t.type.element_type):
            raise self.error(f"initial value of type {init.type} does not match {t.type}")
        align = self.attributes.get("alignment")
        if align is not None and not (isinstance(align, IntegerAttr) and _power_of_two(align.value)):
            raise self.error(f"alignment must be a power of two, got {align}")

    def print_custom(self, p) -> None:
        vis = self.attributes.get("sym_visibility")
        out = f' "{vis.value}"' if isinstance(vis, StringAttr) else ""
        out += " constant" if self.is_constant else ""
        out += f" @{self.sym_name} : {self.type}"
        init = self.attributes.get("initial_value")
        if isinstance(init, DenseAttr):
            out += f" = {_dense_text(init)}"
        elif isinstance(init, UnitAttr):
            out += " = uninitialized"
        p.write(out + p.attr_dict(self.attributes, elide=("sym_name", "type", "initial_value", "constant",
                                                          "sym_visibility")))

    def buffer(self) -> Buffer:
        """A fresh run-time buffer holding the initial value (read-only for a constant)."""
        t = self.type
        array = np.zeros(t.shape, dtype=storage_dtype(t))
        if self.initial_value is not None:
            array[...] = self.initial_value.array
        if self.is_constant:
            array.flags.writeable = False
        return Buffer(array, t)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _dense_text(attr: DenseAttr) -> str:
    """``dense<...>`` without its ``: tensor<...>`` (the global's type says it)."""
    text = str(attr)
    return text[:text.rindex(" : ")] if " : " in text else text


@syntax_rule("global_op")
def _parse_global(ctx, children):
    kw, *rest = children
    attrs: dict = {}
    if rest and isinstance(rest[-1], dict):
        attrs = dict(rest.pop())
    it = iter(rest)
    tok = next(it)
    if tok.type == "STRING":
        attrs["sym_visibility"] = StringAttr(tok.value[1:-1])
        tok = next(it)
    if tok.type == "BARE_ID":
        if tok.value != "constant":
            raise IRError(f"'memref.global' expects 'constant' or a symbol here, got '{tok.value}'", ctx.loc(tok))
        attrs["constant"] = UnitAttr()
        tok = next(it)
    attrs["sym_name"] = StringAttr(tok.value[1:].strip('"'))
    t = ctx.type_of(next(it))
    if not isinstance(t, MemRefType):
        raise IRError(f"'memref.global' needs a memref type, got {t}", ctx.loc(kw))
    attrs["type"] = TypeAttr(t)
    init = next(it, None)
    if init is not None:
        if isinstance(init, Literal):
            if init.kind != "dense":
                raise IRError("the initial value of 'memref.global' must be dense<...>", init.loc)
            attrs["initial_value"] = init.to_attr(TensorType(list(t.shape), t.element_type))
        elif init.value == "uninitialized":
            attrs["initial_value"] = UnitAttr()
        else:
            raise IRError(f"expected dense<...> or 'uninitialized', got '{init.value}'", ctx.loc(init))
    return GlobalOp([], [], attrs, loc=ctx.loc(kw))


def _global_of(op, name: str):
    from irc.module import symbol_in

    scope = op.parent_op
    while scope is not None and scope.name != "builtin.module":
        scope = scope.parent_op
    found = symbol_in(scope.regions[0].entry, name) if scope is not None else None
    return found if isinstance(found, GlobalOp) else None


class GetGlobalOp(Operation):
    """``%m = memref.get_global @g : memref<2xf32>``: the buffer of a ``memref.global``.

    Every run of a function sees the same buffer for the same global within one
    interpreter (or one compiled module), so a write is seen by later reads.
    """

    name = "memref.get_global"
    summary = "The buffer of a memref.global, by symbol."
    example = ("module { memref.global @table : memref<2xf32> func.func @f() { "
               "%g = memref.get_global @table : memref<2xf32> func.return } }")
    example_is_module = True

    @property
    def global_name(self) -> str:
        return self.attributes["name"].name

    def verify_op(self) -> None:
        name = self.attributes.get("name")
        if self.operands or len(self.results) != 1 or not isinstance(name, SymbolRefAttr):
            raise self.error("takes a symbol and has one memref result")
        g = _global_of(self, name.name)
        if g is None:
            raise self.error(f"'@{name.name}' is not a memref.global of the module")
        if g.type is not self.results[0].type:
            raise self.error(f"result type {self.results[0].type} does not match the global's type {g.type}")

    def interpret(self, interp, args):
        buffers = interp.globals
        g = _global_of(self, self.global_name)
        buf = buffers.get(g)
        if buf is None:
            buf = buffers[g] = g.buffer()
        return [buf]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        if len(syn.args) != 1 or not isinstance(syn.args[0], tuple) or syn.args[0][0] != "symbol":
            raise IRError("'memref.get_global' expects '@name : memref<...>'", syn.loc)
        attrs = {"name": SymbolRefAttr(syn.args[0][1].value[1:].strip('"')), **syn.attrs}
        return cls([], [t], attrs)

    def print_custom(self, p) -> None:
        p.write(f" @{self.global_name}{p.attr_dict(self.attributes, elide=('name',))} : {self.results[0].type}")


class AllocaScopeOp(RegionRunOnce):
    """``%r = memref.alloca_scope -> (f32) { ... memref.alloca_scope.return %x : f32 }``.

    Runs its region once, as ``scf.execute_region`` does (whose verifier and interpreter it
    shares); the buffers ``memref.alloca`` makes inside live until the scope ends (in
    compiled code, until the function returns: scf-to-cf puts the region in line).
    """

    name = "memref.alloca_scope"
    summary = "Run a region once; allocas made in it end with it."
    example = ("%r = memref.alloca_scope -> (i64) { %k = arith.constant 1 : i64 "
               "memref.alloca_scope.return %k : i64 }")

    def print_custom(self, p) -> None:
        if self.results:
            p.write(f" -> ({p.types(self.result_types)})")
        p.write(" ")
        p.region(self.regions[0])
        p.write(p.attr_dict(self.attributes))


class AllocaScopeReturnOp(Operation):
    """``memref.alloca_scope.return %a : T``: ends a ``memref.alloca_scope``, giving its results."""

    name = "memref.alloca_scope.return"
    traits = frozenset({Terminator, ReturnLike})
    summary = "End a memref.alloca_scope region, giving the scope's results."
    example = "memref.alloca_scope.return %a : i64"

    def verify_op(self) -> None:
        parent = self.parent_op
        if not isinstance(parent, AllocaScopeOp):
            raise self.error("must end the region of memref.alloca_scope")
        if self.operand_types != parent.result_types:
            raise self.error(f"returns ({', '.join(map(str, self.operand_types))}) but the scope's results are "
                             f"({', '.join(map(str, parent.result_types))})")

    def interpret(self, interp, args):
        return list(args)

    @classmethod
    def parse_uniform(cls, ctx, syn):
        types = syn.plain_types() if syn.args else []
        if len(types) != len(syn.args) or any(isinstance(a, tuple) for a in syn.args):
            raise IRError("'memref.alloca_scope.return' expects '%a, %b : T1, T2'", syn.loc)
        return cls([ctx.value(a, t) for a, t in zip(syn.args, types)], [], syn.attrs)

    def print_custom(self, p) -> None:
        if self.operands:
            p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} : {p.types(self.operand_types)}")
        else:
            p.write(p.attr_dict(self.attributes))


class PrefetchOp(Operation):
    """``memref.prefetch %m[%i, %j], read|write, locality<0-3>, data|instr : memref<...>``.

    A hint that the element will soon be read or written; it changes nothing, and an
    index out of bounds is no error (no element is accessed).  Attributes as MLIR's
    properties: ``isWrite``, ``localityHint`` (i32, 0 to 3), ``isDataCache``.
    """

    name = "memref.prefetch"
    summary = "A cache hint for one element of a buffer; no effect on the program's values."
    example = "memref.prefetch %m[%i], read, locality<3>, data : memref<?xi64>"

    def verify_op(self) -> None:
        if not self.operands or self.results:
            raise self.error("takes a memref and indices, and has no results")
        _check_indices(self, self.operands[0], self.operands[1:])
        hint = self.attributes.get("localityHint")
        if not isinstance(hint, IntegerAttr) or not 0 <= hint.value <= 3:
            raise self.error(f"needs a locality hint from 0 to 3, got {hint}")
        for key in ("isWrite", "isDataCache"):
            v = self.attributes.get(key)
            if not (isinstance(v, IntegerAttr) and v.type.width == 1):
                raise self.error(f"needs a boolean '{key}', got {v}")

    def interpret(self, interp, args):
        return []

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        args = syn.args
        usage = "'memref.prefetch' expects '%buffer[%i, ...], read|write, locality<N>, data|instr : memref<...>'"
        if len(args) != 4 or not isinstance(args[0], tuple) or args[0][0] != "indexed" \
                or any(not isinstance(a, tuple) or a[0] != "keyword" for a in args[1:]):
            raise IRError(usage, syn.loc)
        rw, locality, cache = (a[1].value for a in args[1:])
        if rw not in ("read", "write") or not locality.startswith("locality<") or cache not in ("data", "instr"):
            raise IRError(usage, syn.loc)
        _, mem, idx = args[0]
        attrs = {"isDataCache": IntegerAttr(int(cache == "data"), i1), "isWrite": IntegerAttr(int(rw == "write"), i1),
                 "localityHint": IntegerAttr(int(locality[len("locality<"):-1]), i32), **syn.attrs}
        return cls([ctx.value(mem, t), *[ctx.value(i, index) for i in idx]], [], attrs)

    def print_custom(self, p) -> None:
        m = self.operands[0]
        a = self.attributes
        rw = "write" if a["isWrite"].value else "read"
        cache = "data" if a["isDataCache"].value else "instr"
        rest = p.attr_dict(a, elide=("isWrite", "isDataCache", "localityHint"))
        p.write(f" {p.value(m)}[{p.values(self.operands[1:])}], {rw}, locality<{a['localityHint'].value}>, "
                f"{cache}{rest} : {m.type}")


def misaligned(alignment: int) -> str:
    return f"memref.assume_alignment: the buffer is not aligned to {alignment} bytes"


class AssumeAlignmentOp(Operation):
    """``%a = memref.assume_alignment %m, 16 : memref<4x4xf16>``: ``%m``, promised to start at
    a multiple of 16 bytes (a power of two).

    MLIR makes a broken promise undefined; irc checks it, in the interpreter and in
    compiled code alike, and a misaligned buffer is a fault at the op.
    """

    name = "memref.assume_alignment"
    summary = "The same buffer, promised to be aligned to a power-of-two number of bytes (checked)."
    example = "%aligned = memref.assume_alignment %m, 16 : memref<?xi64>"

    @property
    def alignment(self) -> int:
        return self.attributes["alignment"].value

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("takes one memref and has one result")
        t = self.operands[0].type
        if not isinstance(t, MemRefType) or self.results[0].type is not t:
            raise self.error(f"takes a memref and gives it back, got {t} -> {self.results[0].type}")
        align = self.attributes.get("alignment")
        if not isinstance(align, IntegerAttr) or not _power_of_two(align.value):
            raise self.error(f"alignment must be a power of two, got {align}")

    def interpret(self, interp, args):
        buf = args[0]
        if not hasattr(buf, "view_at") and buf.array.ctypes.data % self.alignment:
            raise interp.fault(self, misaligned(self.alignment))
        return [buf]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        args = syn.args
        if len(args) != 2 or isinstance(args[0], tuple) or not isinstance(args[1], tuple) or args[1][0] != "literal" \
                or args[1][1].kind != "int":
            raise IRError("'memref.assume_alignment' expects '%buffer, ALIGNMENT : memref<...>'", syn.loc)
        attrs = {"alignment": IntegerAttr(int(args[1][1].value), i32), **syn.attrs}
        return cls([ctx.value(args[0], t)], [t], attrs)

    def print_custom(self, p) -> None:
        m = self.operands[0]
        p.write(f" {p.value(m)}, {self.alignment}{p.attr_dict(self.attributes, elide=('alignment',))} : {m.type}")


def cast_mismatch(t: MemRefType) -> str:
    return f"memref.cast to {t}: the buffer's sizes differ"


class CastOp(Operation):
    """``%c = memref.cast %m : memref<4xf32> to memref<?xf32>``: the same buffer with a type
    that differs only in which sizes are static (same rank, element type and memory space).

    A size made static must be the buffer's: a mismatch is a fault at the op, in the
    interpreter and in compiled code (MLIR leaves it undefined).  The cast is the buffer
    itself, so freeing it frees the buffer.  Unranked memrefs (``memref<*xf32>``) are not
    irc types.
    """

    name = "memref.cast"
    summary = "The same buffer with some sizes made static or dynamic (a static size is checked)."
    example = "%fixed = memref.cast %m : memref<?xi64> to memref<4xi64>"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("takes one memref and has one result")
        a, b = self.operands[0].type, self.results[0].type
        if not isinstance(a, MemRefType) or not isinstance(b, MemRefType) or a.rank != b.rank \
                or a.element_type is not b.element_type or a.memory_space != b.memory_space \
                or any(x is not None and y is not None and x != y for x, y in zip(a.shape, b.shape)):
            raise self.error(f"cannot cast {a} to {b}: only the static or dynamic sizes may differ")

    def interpret(self, interp, args):
        buf = args[0]
        t = self.results[0].type
        shape = buf.array.shape if not hasattr(buf, "view_at") else None
        if shape is not None and any(d is not None and d != n for d, n in zip(t.shape, shape)):
            raise interp.fault(self, cast_mismatch(t))
        return [buf]

    def fold(self, constants):
        return [self.operands[0]] if self.operands[0].type is self.results[0].type else None

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if syn.sig is None or syn.sig[0] != "cast" or len(syn.args) != 1 or isinstance(syn.args[0], tuple):
            raise IRError("'memref.cast' expects '%buffer : memref<...> to memref<...>'", syn.loc)
        (a,), (b,) = syn.sig[1], syn.sig[2]
        return cls([ctx.value(syn.args[0], a)], [b], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : {self.operands[0].type} to "
                f"{self.results[0].type}")


class RankOp(Operation):
    """``%r = memref.rank %m : memref<4x?xf32>``: the number of dimensions (an index).  irc's
    memrefs are all ranked, so it is a constant and folds to one."""

    name = "memref.rank"
    traits = frozenset({Pure})
    summary = "The rank of a memref, as an index (a constant: irc has no unranked memrefs)."
    example = "%r = memref.rank %m : memref<?xi64>"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1 or not isinstance(self.operands[0].type, MemRefType) \
                or self.results[0].type is not index:
            raise self.error("takes one memref and gives an index")

    def interpret(self, interp, args):
        return [self.operands[0].type.rank]

    def fold(self, constants):
        return [IntegerAttr(self.operands[0].type.rank, index)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = _memref_type(syn)
        if len(syn.args) != 1 or isinstance(syn.args[0], tuple):
            raise IRError("'memref.rank' expects '%buffer : memref<...>'", syn.loc)
        return cls([ctx.value(syn.args[0], t)], [index], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : {self.operands[0].type}")


# ---- reshapes, memory space casts and realloc ---------------------------------------------------

DYNAMIC = -(1 << 63)  # MLIR's ShapedType::kDynamic in static_output_shape


def reshape_mismatch(op_name: str, t: MemRefType) -> str:
    return f"{op_name} to {t}: the output shape does not match the source's sizes"


def reassociation(op) -> list[list[int]]:
    attr = op.attributes.get("reassociation")
    if not isinstance(attr, ArrayAttr) or not all(
            isinstance(g, ArrayAttr) and all(isinstance(k, IntegerAttr) for k in g.elements) for g in attr.elements):
        raise op.error("needs a 'reassociation' attribute, a list of lists of dimensions")
    return [[k.value for k in g.elements] for g in attr.elements]


class ReshapeOp(Operation):
    """The shared part of ``memref.collapse_shape`` and ``memref.expand_shape``: the buffer seen
    with dimensions merged or split, by a reassociation that lists, for each dimension of the
    collapsed type, the consecutive dimensions of the expanded type it stands for.

    irc's buffers are contiguous and row-major, so every such reshape is valid and the result
    is a view of the source (as ``memref.view`` is: it shares the source's lifetime, and
    ``memref.dealloc`` of it is an error).  A group with a dynamic size has a dynamic size on
    both sides; a static one is the product of its group's sizes.  Not ``Pure``: a reshape of
    a freed buffer, or an expand_shape whose sizes do not match, is a fault, kept by DCE."""

    collapsing: bool

    def expanded_collapsed(self) -> tuple[MemRefType, MemRefType]:
        """(the expanded type, the collapsed type)."""
        a, b = self.operands[0].type, self.results[0].type
        return (a, b) if self.collapsing else (b, a)

    def verify_op(self) -> None:
        if not self.operands or len(self.results) != 1:
            raise self.error("takes a memref and has one result")
        a, b = self.operands[0].type, self.results[0].type
        if not isinstance(a, MemRefType) or not isinstance(b, MemRefType) or a.element_type is not b.element_type \
                or a.memory_space != b.memory_space:
            raise self.error(f"source and result must be memrefs of one element type and memory space, got {a} and {b}")
        big, small = self.expanded_collapsed()
        groups = reassociation(self)
        if big.rank < small.rank:
            raise self.error(f"{big} has fewer dimensions than {small}")
        if len(groups) != small.rank:
            raise self.error(f"needs {small.rank} reassociation group(s) for {small}, got {len(groups)}")
        flat = [k for g in groups for k in g]
        if any(not g for g in groups) or (groups and flat != list(range(big.rank))):
            raise self.error(f"reassociation {groups} must split dimensions 0 to {big.rank - 1} of {big} into "
                             "non-empty groups of consecutive dimensions, in order")
        if not groups and any(d != 1 for d in big.shape):
            raise self.error(f"only sizes of 1 may be reshaped to or from rank 0, got {big}")
        for i, g in enumerate(groups):
            sizes = [big.shape[k] for k in g]
            if None in sizes:
                if small.shape[i] is not None:
                    raise self.error(f"dimension {i} of {small} must be dynamic: its group {g} has a dynamic size")
                continue
            product = int(np.prod(sizes, dtype=object)) if sizes else 1
            if small.shape[i] != product:
                raise self.error(f"dimension {i} of {small} must be {product}, the product of the sizes {sizes} "
                                 f"of its group {g} in {big}")

    def print_custom(self, p) -> None:
        groups = ", ".join("[" + ", ".join(map(str, g)) + "]" for g in reassociation(self))
        p.write(f" {p.value(self.operands[0])} [{groups}]{self._output_shape(p)}"
                f"{p.attr_dict(self.attributes, elide=('reassociation', 'static_output_shape'))} : "
                f"{self.operands[0].type} into {self.results[0].type}")

    def _output_shape(self, p) -> str:
        return ""


class CollapseShapeOp(ReshapeOp):
    """``%r = memref.collapse_shape %m [[0, 1], [2]] : memref<4x5x6xf32> into memref<20x6xf32>``."""

    name = "memref.collapse_shape"
    collapsing = True
    summary = "The same buffer with groups of consecutive dimensions merged into one (a view)."
    example = ("module { func.func @f(%m: memref<2x?xi64>) { "
               "%r = memref.collapse_shape %m [[0, 1]] : memref<2x?xi64> into memref<?xi64> func.return } }")
    example_is_module = True

    def verify_op(self) -> None:
        super().verify_op()
        if len(self.operands) != 1 or "static_output_shape" in self.attributes:
            raise self.error("takes one memref and no output shape")

    def interpret(self, interp, args):
        src = args[0]
        if src.freed:
            raise interp.fault(self, FREED_VIEW)
        shape = [int(np.prod([src.array.shape[k] for k in g], dtype=np.int64)) for g in reassociation(self)]
        if hasattr(src, "view_at"):  # device memory of a runtime (runtime/gpu/driver.py): no host memory
            return [src.view_at(interp, self, 0, shape, self.results[0].type)]
        return [Buffer(src.array.reshape(shape), self.results[0].type, base=src.base or src)]

    @classmethod
    def build(cls, source, reassociation, type: MemRefType):
        return cls([source], [type], {"reassociation": _reassociation_attr(reassociation)})


class ExpandShapeOp(ReshapeOp):
    """``%e = memref.expand_shape %m [[0, 1], [2]] output_shape [%n, 5, 6] : memref<?x6xf32> into
    memref<?x5x6xf32>``: one ``output_shape`` entry per result dimension, an index operand where
    the result's size is dynamic.

    The sizes of a group must multiply to its source size: MLIR leaves a mismatch undefined,
    irc checks it at run time (a fault at the op, in the interpreter and compiled code), as
    it does a negative size."""

    name = "memref.expand_shape"
    collapsing = False
    summary = "The same buffer with dimensions split into groups of consecutive ones (a view)."
    example = "%e = memref.expand_shape %m [[0, 1]] output_shape [2, %n] : memref<?xi64> into memref<2x?xi64>"

    def static_output_shape(self) -> list[int]:
        attr = self.attributes.get("static_output_shape")
        if not isinstance(attr, DenseArrayAttr):
            raise self.error("needs a 'static_output_shape' attribute (array<i64: ...>)")
        return list(attr.values)

    def verify_op(self) -> None:
        super().verify_op()
        t = self.results[0].type
        shape = self.static_output_shape()
        if len(shape) != t.rank:
            raise self.error(f"output_shape has {len(shape)} size(s), but {t} has {t.rank}")
        for i, (s, d) in enumerate(zip(shape, t.shape)):
            if (s == DYNAMIC) != (d is None) or (d is not None and s != d):
                raise self.error(f"output_shape size {i} must be {'an index value' if d is None else d} for {t}")
        dynamic = sum(d is None for d in t.shape)
        if len(self.operands) - 1 != dynamic:
            raise self.error(f"needs {dynamic} dynamic size operand(s) for {t}, got {len(self.operands) - 1}")
        for v in self.operands[1:]:
            if not isinstance(v.type, IndexType):
                raise self.error(f"sizes must be index values, got {v.type}")

    def interpret(self, interp, args):
        src, *dyn = args
        t = self.results[0].type
        if src.freed:
            raise interp.fault(self, FREED_VIEW)
        sizes = iter(dyn)
        shape = [next(sizes) if d is None else d for d in t.shape]
        if any(s < 0 for s in shape) or any(
                int(np.prod([shape[k] for k in g], dtype=object)) != n
                for g, n in zip(reassociation(self), src.array.shape)):
            raise interp.fault(self, reshape_mismatch(self.name, t))
        if hasattr(src, "view_at"):  # device memory of a runtime (runtime/gpu/driver.py): no host memory
            return [src.view_at(interp, self, 0, shape, t)]
        return [Buffer(src.array.reshape(shape), t, base=src.base or src)]

    def _output_shape(self, p) -> str:
        dyn = iter(self.operands[1:])
        return " output_shape [" + ", ".join(p.value(next(dyn)) if s == DYNAMIC else str(s)
                                             for s in self.static_output_shape()) + "]"

    @classmethod
    def build(cls, source, reassociation, type: MemRefType, sizes=()):
        attrs = {"reassociation": _reassociation_attr(reassociation),
                 "static_output_shape": DenseArrayAttr(i64, [DYNAMIC if d is None else d for d in type.shape])}
        return cls([source, *sizes], [type], attrs)


def _reassociation_attr(groups) -> ArrayAttr:
    return ArrayAttr(ArrayAttr(IntegerAttr(k, i64) for k in g) for g in groups)


@syntax_rule("reassociation_group")
def _parse_group(ctx, children):
    return [int(tok.value) for tok in children]


@syntax_rule("output_shape")
def _parse_output_shape(ctx, children):
    from irc.parser import _value_tokens

    items = []
    for tok in children:
        items.extend(_value_tokens(tok) if tok.type == "VALUE_LIST" else [tok])
    return ("output_shape", items)


@syntax_rule("reshape_op")
def _parse_reshape(ctx, children):
    kw, src, *rest = children
    name = kw.value
    cls = ExpandShapeOp if name == "memref.expand_shape" else CollapseShapeOp
    *rest, into = rest
    src_t, t = ctx.type_of(rest.pop()), ctx.type_of(into)
    attrs = dict(rest.pop()) if rest and isinstance(rest[-1], dict) else {}
    shape = rest.pop()[1] if rest and isinstance(rest[-1], tuple) else None
    if shape is None and cls is ExpandShapeOp:
        raise IRError("'memref.expand_shape' expects 'output_shape [...]' after its reassociation", ctx.loc(kw))
    if shape is not None and cls is CollapseShapeOp:
        raise IRError("'memref.collapse_shape' takes no output_shape", ctx.loc(kw))
    if any(k < 0 or k >= 1 << 63 for g in rest for k in g):
        raise IRError("a reassociation lists dimensions (from 0)", ctx.loc(kw))
    attrs = {"reassociation": _reassociation_attr(rest), **attrs}
    operands = [ctx.value(src, src_t)]
    if shape is not None:
        static = []
        for tok in shape:
            if tok.type == "INT":
                n = int(tok.value)
                if not 0 <= n < 1 << 63:
                    raise IRError(f"a size of output_shape must be from 0 to 2^63 - 1, got {n}", ctx.loc(tok))
                static.append(n)
            else:
                static.append(DYNAMIC)
                operands.append(ctx.value(tok, index))
        attrs["static_output_shape"] = DenseArrayAttr(i64, static)
    return cls(operands, [t], attrs, loc=ctx.loc(kw))


class MemorySpaceCastOp(Operation):
    """``%c = memref.memory_space_cast %m : memref<4xf32, 1> to memref<4xf32>``: the same buffer
    with another memory space (same shape and element type).

    It changes no memory and moves no data: the buffer is the source itself (freeing one
    frees the other).  irc's spaces are none (host), ``gpu``, ``workgroup`` and ``private``
    (MLIR's 1, 3 and 5)."""

    name = "memref.memory_space_cast"
    traits = frozenset({Pure})
    summary = "The same buffer in another memory space (no data moves)."
    example = "%g = memref.memory_space_cast %m : memref<?xi64> to memref<?xi64, gpu>"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("takes one memref and has one result")
        a, b = self.operands[0].type, self.results[0].type
        if not isinstance(a, MemRefType) or not isinstance(b, MemRefType) or a.shape != b.shape \
                or a.element_type is not b.element_type:
            raise self.error(f"cannot cast {a} to {b}: only the memory space may differ")
        for t in (a, b):
            if t.memory_space is not None and t.memory_space not in DEVICE_SPACES:
                raise self.error(f"unknown memory space '{t.memory_space}' (known: gpu, workgroup, private, "
                                 "or none for host)")

    def interpret(self, interp, args):
        return [args[0]]

    def fold(self, constants):
        return [self.operands[0]] if self.operands[0].type is self.results[0].type else None

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if syn.sig is None or syn.sig[0] != "cast" or len(syn.args) != 1 or isinstance(syn.args[0], tuple):
            raise IRError("'memref.memory_space_cast' expects '%buffer : memref<...> to memref<...>'", syn.loc)
        (a,), (b,) = syn.sig[1], syn.sig[2]
        return cls([ctx.value(syn.args[0], a)], [b], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : {self.operands[0].type} to "
                f"{self.results[0].type}")


REALLOC_FREED = "memref.realloc of a freed buffer"
REALLOC_NOT_ALLOCATED = "memref.realloc of a buffer that memref.alloc did not allocate (an alloca, a view or an argument)"


class ReallocOp(Operation):
    """``%n = memref.realloc %m(%size) : memref<?xf32> to memref<?xf32>``: a 1-D buffer of the
    new size holding the old one's elements (as many as fit; the rest zero, as memref.alloc's),
    the old one freed; the size operand is there when the result's size is dynamic.

    As for memref.dealloc, the source must be a live buffer of memref.alloc (a fault
    otherwise), and a later use of it is a use of a freed buffer: a fault wherever irc
    detects one (the interpreter; compiled code with bounds checks)."""

    name = "memref.realloc"
    summary = "Resize a buffer of memref.alloc: a new buffer with the old contents, the old one freed."
    example = "%r = memref.realloc %m(%n) : memref<?xi64> to memref<?xi64>"

    def verify_op(self) -> None:
        if not 1 <= len(self.operands) <= 2 or len(self.results) != 1:
            raise self.error("takes a memref and an optional size, and has one result")
        a, b = self.operands[0].type, self.results[0].type
        if not isinstance(a, MemRefType) or not isinstance(b, MemRefType) or a.rank != 1 or b.rank != 1 \
                or a.element_type is not b.element_type or a.memory_space != b.memory_space:
            raise self.error(f"source and result must be 1-D memrefs of one element type and memory space, "
                             f"got {a} and {b}")
        if a.memory_space is not None:
            raise self.error(f"only host memory can be reallocated, got {a}")
        dynamic = int(b.shape[0] is None)
        if len(self.operands) - 1 != dynamic:
            raise self.error(f"needs {dynamic} dynamic size operand(s) for {b}, got {len(self.operands) - 1}")
        if dynamic and not isinstance(self.operands[1].type, IndexType):
            raise self.error(f"the size must be an index value, got {self.operands[1].type}")

    def interpret(self, interp, args):
        src = args[0]
        t = self.results[0].type
        if not src.heap:
            raise interp.fault(self, REALLOC_NOT_ALLOCATED)
        if src.freed:
            raise interp.fault(self, REALLOC_FREED)
        n = args[1] if len(args) == 2 else t.shape[0]
        if n < 0:
            raise interp.fault(self, NEGATIVE_SIZE)
        if is_too_big((n,), t):
            raise interp.fault(self, too_big(t))
        try:
            array = np.zeros((n,), dtype=storage_dtype(t))
        except (MemoryError, ValueError):
            raise interp.fault(self, out_of_memory(self.name)) from None
        keep = min(n, src.array.shape[0])
        array[:keep] = src.array[:keep]
        src.freed = True
        return [Buffer(array, t, heap=True)]

    @classmethod
    def build(cls, source, type: MemRefType, size=None):
        return cls([source] if size is None else [source, size], [type])

    def print_custom(self, p) -> None:
        size = f"({p.value(self.operands[1])})" if len(self.operands) == 2 else ""
        p.write(f" {p.value(self.operands[0])}{size}{p.attr_dict(self.attributes)} : {self.operands[0].type} to "
                f"{self.results[0].type}")


@syntax_rule("realloc_op")
def _parse_realloc(ctx, children):
    kw, src, *rest = children
    src_t, t = ctx.type_of(rest[-2]), ctx.type_of(rest[-1])
    rest = rest[:-2]
    attrs = dict(rest.pop()) if rest and isinstance(rest[-1], dict) else {}
    operands = [ctx.value(src, src_t), *[ctx.value(tok, index) for tok in rest]]
    return ReallocOp(operands, [t], attrs, loc=ctx.loc(kw))
