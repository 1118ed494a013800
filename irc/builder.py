"""The builder: the one way Python code makes IR.

A ``Builder`` has an insertion point (before an op, or at the end of a block) and
a source location that every op it inserts takes.  Its methods insert one op
each and return ``V``: an SSA value with numpy-style operators that insert more
ops through the same builder, with numpy's broadcasting rules::

    b = Builder()
    m = b.module()
    with b.function(m, "mlp", [tensor("256x784xf32"), tensor("784x10xf32"), tensor("10xf32")],
                    ) as (x, w, bias):
        y = (x @ w + bias).maximum(0.0)       # matmul, broadcast, addf, maximumf
        b.ret(y.log_softmax(axis=1))

Regions are built inside ``with`` blocks (``for_``, ``if_``, ``while_``,
``function``), CFG blocks with ``new_block``/``br``/``cond_br``/``phi``/``add_incoming``.  Every change
goes through ``insert``, which tells a ``Listener`` (the pattern driver keeps its
worklist right that way; ``irc.rewriter.Rewriter`` adds replace and erase).
Ops take the builder's ``loc`` unless they carry one already, so code made from
an op (a lowering, a gradient) points at that op in diagnostics: set it with
``with b.located(op.loc):``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack, contextmanager

import numpy as np

from .attributes import DenseAttr, FloatAttr, IntegerAttr
from .block import Block, Region
from .diagnostics import UNKNOWN, Location
from .operation import Operation
from .types import (
    FloatType,
    FunctionType,
    IndexType,
    IntegerType,
    MemRefType,
    TensorType,
    Type,
    i1,
    index,
)
from .values import Value


class Listener:
    """Hooks called after each change; the default does nothing."""

    def op_inserted(self, op: Operation) -> None:
        pass

    def op_erased(self, op: Operation) -> None:
        pass

    def op_modified(self, op: Operation) -> None:
        pass

    def op_replaced(self, op: Operation, new_values: Sequence[Value]) -> None:
        pass


def _registry_op(name: str):
    from . import registry

    return registry.lookup(name)


def element_type(t: Type) -> Type:
    return t.element_type if isinstance(t, TensorType) else t


def is_float(t: Type) -> bool:
    return isinstance(element_type(t), FloatType)


def broadcast_shape(a: Sequence, b: Sequence, what: str = "operands") -> tuple:
    """numpy's broadcast of two shapes (``None`` is a dynamic size, which matches anything)."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        else:
            raise ValueError(f"{what} of shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(out)


class Builder:
    """Inserts ops at an insertion point, each with the builder's location.

    ``reuse_constants``: ``const`` (and so ``index`` and the numbers that operators lift)
    returns the constant this builder already made for the same attribute where it is still
    visible: made at this insertion point or in a region enclosing it.  Constants made inside
    a ``for_``/``if_``/``while_`` body are forgotten when the body is left, and moving the
    insertion point (``at_end``, ``before_op``, ``at``...) forgets them all, so a reused
    constant always dominates its new uses.  Lowerings that make many loop bounds and
    offsets turn it on; by default every ``const`` is a new op.

    Subclasses may set ``value_class`` to a subclass of ``V`` with more methods (the
    math-approx kernels do), and override ``insert`` to decorate every op they make.
    """

    value_class: type = None  # V, set below its definition

    def __init__(self, listener: Listener | None = None, loc: Location = UNKNOWN, reuse_constants: bool = False):
        self.listener = listener or Listener()
        self.block: Block | None = None
        self.before: Operation | None = None
        self.loc = loc
        self.reuse_constants = reuse_constants
        self._constants: dict = {}

    # -- insertion points --------------------------------------------------------------------

    def at_end(self, block: Block) -> Builder:
        self.block, self.before = block, None
        self._constants = {}
        return self

    def at_start(self, block: Block) -> Builder:
        self.block, self.before = block, block.first_op
        self._constants = {}
        return self

    def before_op(self, op: Operation) -> Builder:
        self.block, self.before = op.parent, op
        self._constants = {}
        return self

    def after_op(self, op: Operation) -> Builder:
        self.block, self.before = op.parent, op.next
        self._constants = {}
        return self

    @contextmanager
    def at(self, where: Block | Operation, before: bool = True):
        """Insert at the end of a block, or before (``before=False``: after) an op, for the
        ``with`` body; the previous insertion point comes back afterwards."""
        saved = (self.block, self.before, self._constants)
        if isinstance(where, Block):
            self.at_end(where)
        elif before:
            self.before_op(where)
        else:
            self.after_op(where)
        try:
            yield self
        finally:
            self.block, self.before, self._constants = saved

    @contextmanager
    def _inside(self, block: Block):
        """Insert at the end of ``block``, a region body nested at the insertion point: the
        constants reused so far stay visible in it, those it makes are forgotten afterwards."""
        saved = (self.block, self.before, self._constants)
        self.block, self.before, self._constants = block, None, dict(self._constants)
        try:
            yield self
        finally:
            self.block, self.before, self._constants = saved

    def _v(self, value: Value) -> V:
        return self.value_class(self, value)

    @contextmanager
    def located(self, loc: Location):
        """Ops inserted in the ``with`` body take ``loc``."""
        saved, self.loc = self.loc, loc
        try:
            yield self
        finally:
            self.loc = saved

    # -- inserting ---------------------------------------------------------------------------

    def insert(self, op: Operation) -> Operation:
        if self.block is None:
            raise ValueError("builder has no insertion point")
        if op.loc is UNKNOWN:
            op.loc = self.loc
        if self.before is None:
            self.block.append(op)
        else:
            self.block.insert_before(op, self.before)
        self.listener.op_inserted(op)
        return op

    def create(self, op: Operation) -> Value | Operation:
        """Insert ``op``; return its result if it has exactly one, else the op."""
        self.insert(op)
        return op.results[0] if len(op.results) == 1 else op

    def wrap(self, value) -> V:
        return value if isinstance(value, V) and value.builder is self else self._v(_raw(value))

    def op(self, name: str | type, *operands, result: Type | Sequence[Type] | None = None,
           regions: Sequence[Region] = (), successors: Sequence[Block] = (), **attrs) -> V | tuple | Operation:
        """The generic create: op ``name`` (or class) on ``operands``.  The result type is the
        first operand's unless ``result`` gives one (or a list, for several or none).  Returns
        the one result as a ``V``, a tuple of several, or the op when it has none."""
        cls = _registry_op(name) if isinstance(name, str) else name
        if result is None:
            types = [_raw(operands[0]).type] if operands else []
        elif isinstance(result, Type):
            types = [result]
        else:
            types = list(result)
        op = self.insert(cls([_raw(v) for v in operands], types, _attributes(attrs),
                             successors=list(successors), regions=list(regions)))
        return self._results(op)

    def built(self, op: Operation) -> V | tuple | Operation:
        """Insert an op made by a class's ``build`` and return its results as ``op`` does."""
        return self._results(self.insert(op))

    def _results(self, op: Operation):
        if len(op.results) == 1:
            return self._v(op.results[0])
        if not op.results:
            return op
        return tuple(self._v(r) for r in op.results)

    # -- constants ---------------------------------------------------------------------------

    def const(self, value, type: Type) -> V:
        """``arith.constant``: a scalar, or a tensor (a splat when ``value`` is a number).
        Integers wrap to the type's width, floats round to it.  A tensor type with dynamic
        sizes has no constant: use ``full_like``."""
        from irc.dialects.arith import ConstantOp

        from .attributes import integer_attr

        if isinstance(type, TensorType):
            if not type.has_static_shape:
                if np.ndim(value):
                    raise ValueError(f"a constant of {type} must be one number")
                raise ValueError(f"a constant of the dynamic type {type} needs sizes: use full_like")
            elem = type.element_type
            if isinstance(elem, IntegerType) and elem.width > 1:
                value = np.vectorize(lambda x: integer_attr(int(x), elem).value, otypes=[object])(value)
            attr = DenseAttr(np.asarray(value), type)
        elif isinstance(type, FloatType):
            attr = FloatAttr(float(value), type)
        elif isinstance(type, IntegerType):
            attr = integer_attr(int(value), type)
        elif isinstance(type, IndexType):
            attr = IntegerAttr(int(value), type)
        else:
            raise ValueError(f"no constant of type {type}")
        if not self.reuse_constants:
            return self.built(ConstantOp.build(attr))
        known = self._constants.get(attr)
        if known is None:
            known = self._constants[attr] = self.built(ConstantOp.build(attr))
        return known

    def index(self, value) -> V:
        """An ``index`` constant, or ``value`` itself when it is already a value."""
        return self.wrap(value) if isinstance(value, (V, Value)) else self.const(value, index)

    def full_like(self, like, value) -> V:
        """A value of ``like``'s type (and run-time shape) whose elements are all ``value``."""
        t = _raw(like).type
        if isinstance(t, TensorType) and not t.has_static_shape:
            scalar = self.const(value, t.element_type)
            return self.splat(scalar, t, self.dynamic_sizes(like, t))
        return self.const(value, t)

    def zeros_like(self, like) -> V:
        return self.full_like(like, 0)

    def ones_like(self, like) -> V:
        return self.full_like(like, 1)

    def dynamic_sizes(self, like, t: TensorType | None = None) -> list[V]:
        """The run-time size of each ``?`` of ``t`` (default: ``like``'s type), read with
        ``tensor.dim`` from ``like``: a value, or a list of values (numpy's operands), aligned at
        the right; each ``?`` comes from a value whose dimension there is ``?`` too (not a 1)."""
        sources = [_raw(v) for v in (like if isinstance(like, (list, tuple)) else [like])]
        t = t or sources[0].type
        sizes = []
        for i, d in enumerate(t.shape):
            if d is not None:
                continue
            fitting = [src for src in sources
                       if 0 <= i - (t.rank - src.type.rank) < src.type.rank]
            dynamic = [src for src in fitting if src.type.shape[i - (t.rank - src.type.rank)] is None]
            src = (dynamic or fitting or sources)[0]
            sizes.append(self.dim(src, i - (t.rank - src.type.rank)))
        return sizes

    def dim(self, shaped, axis: int) -> V:
        """The size of dimension ``axis`` of a tensor (``tensor.dim``) or a buffer
        (``memref.dim``): an ``index`` constant when it is static."""
        t = _raw(shaped).type
        if t.shape[axis] is not None:
            return self.index(t.shape[axis])
        name = "memref.dim" if isinstance(t, MemRefType) else "tensor.dim"
        return self.op(name, shaped, self.index(axis), result=index)

    # -- elementwise and casts ---------------------------------------------------------------

    def lift(self, value, like) -> V:
        """A Python number as a constant of ``like``'s element type (a value stays itself)."""
        if isinstance(value, (V, Value)):
            return self.wrap(value)
        return self.const(value, element_type(_raw(like).type))

    def coerce(self, *values) -> list[V]:
        """Operands made one type as numpy would: Python numbers take the others' element type,
        scalars become tensors (``graph.splat``), shapes broadcast (``graph.broadcast``)."""
        typed = [v for v in values if isinstance(v, (V, Value))]
        if not typed:
            raise ValueError("at least one operand must be an IR value")
        vals = [self.lift(v, typed[0]) for v in values]
        elems = {element_type(v.type) for v in vals}
        if len(elems) > 1:
            raise TypeError("operands have different element types: " + ", ".join(sorted(map(str, elems))))
        shapes = [v.type.shape if isinstance(v.type, TensorType) else None for v in vals]
        if all(s is None for s in shapes):
            return vals
        shape: tuple = ()
        for s in shapes:
            if s is not None:
                shape = broadcast_shape(shape, s)
        target = TensorType(list(shape), elems.pop())
        tensors = [v for v, s in zip(vals, shapes) if s is not None]
        return [self.broadcast_to(v, target, like=tensors) for v in vals]

    def broadcast_to(self, value, t: TensorType, like=None) -> V:
        """``value`` (a scalar or a tensor) with type ``t``, by numpy's rules; ``like`` (a tensor or
        a list of them, see ``dynamic_sizes``) gives the run-time sizes of ``t``'s ``?`` dimensions."""
        v = self.wrap(value)
        if v.type is t:
            return v
        sizes = self.dynamic_sizes(like if like is not None else v, t) if not t.has_static_shape else []
        if not isinstance(v.type, TensorType):
            return self.splat(v, t, sizes)
        from irc.dialects.graph import BroadcastOp

        return self.built(BroadcastOp.build(v.value, t, [s.value for s in sizes]))

    def splat(self, scalar, t: TensorType, sizes: Sequence = ()) -> V:
        from irc.dialects.graph import SplatOp

        return self.built(SplatOp.build(_raw(scalar), t, [_raw(s) for s in sizes]))

    def binary(self, float_op: str | None, int_op: str | None, a, b) -> V:
        """``float_op`` or ``int_op`` (by the element type) on ``a`` and ``b`` after ``coerce``;
        ``None`` for a kind that has no such op (a ``TypeError`` when asked)."""
        a, b = self.coerce(a, b)
        name = float_op if is_float(a.type) else int_op
        if name is None:
            wanted = "integer" if float_op is None else "float"
            raise TypeError(f"'{float_op or int_op}' needs {wanted} operands, got {a.type}")
        return self.op(name, a, b)

    def unary(self, name: str, a) -> V:
        return self.op(name, self.wrap(a))

    def compare(self, predicate: str, a, b) -> V:
        """``arith.cmpf`` (ordered predicates: ``olt``...) or ``arith.cmpi`` (``slt``...) after
        coercion; ``predicate`` is the float spelling or a bare ``lt``/``le``/``eq``/...."""
        from irc.dialects.arith import CmpFOp, CmpIOp

        a, b = self.coerce(a, b)
        if is_float(a.type):
            pred = predicate if predicate in CmpFOp.predicates else {"ne": "une"}.get(predicate, "o" + predicate)
            return self.built(CmpFOp.build(pred, a.value, b.value))
        pred = predicate if predicate in CmpIOp.predicates else {"eq": "eq", "ne": "ne"}.get(predicate, "s" + predicate)
        return self.built(CmpIOp.build(pred, a.value, b.value))

    def select(self, cond, a, b) -> V:
        """``arith.select``; a scalar condition picks whole values, a tensor one elementwise."""
        from irc.dialects.arith import SelectOp

        a, b = self.coerce(a, b)
        c = self.wrap(cond)
        if isinstance(a.type, TensorType) and isinstance(c.type, TensorType) and c.type.shape != a.type.shape:
            c = self.broadcast_to(c, TensorType(a.type.shape, i1), like=a)
        return self.built(SelectOp.build(c.value, a.value, b.value))

    def cast(self, name: str, value, to: Type) -> V:
        """A cast op (``arith.extf``, ``arith.sitofp``...) to ``to`` (an element type or a type)."""
        cls = _registry_op(name)
        return self.built(cls.build(_raw(value), to))

    def convert(self, value, to: Type) -> V:
        """``value`` converted to element type ``to`` by the one fitting cast (none if equal)."""
        v = self.wrap(value)
        src = element_type(v.type)
        if src is to:
            return v
        if isinstance(src, FloatType) and isinstance(to, FloatType):
            return self.cast("arith.extf" if to.width > src.width else "arith.truncf", v, to)
        if src is i1:  # numpy's bool: True is 1, not -1
            if isinstance(to, FloatType):
                return self.cast("arith.uitofp", v, to)
            return self.cast("arith.index_castui" if isinstance(to, IndexType) else "arith.extui", v, to)
        if isinstance(to, FloatType):
            return self.cast("arith.sitofp", v, to)
        if isinstance(src, FloatType):
            return self.cast("arith.fptosi", v, to)
        if isinstance(src, IndexType) or isinstance(to, IndexType):
            return self.cast("arith.index_cast", v, to)
        return self.cast("arith.extsi" if to.width > src.width else "arith.trunci", v, to)

    # -- tensor (graph) ops ------------------------------------------------------------------

    def tensor_op(self, name: str, *operands, type: Type | None = None, **attrs) -> V:
        """A ``tensor`` dialect op, its result type inferred (``type`` where it is given)."""
        from irc.dialects.graph import TensorOp

        # TensorOp's generic build (subclasses' own builds take friendlier arguments).
        return self.built(TensorOp.build.__func__(_registry_op(name), *[_raw(v) for v in operands],
                                                  type=type, **attrs))

    def reduce(self, kind: str, value, axes: Sequence[int] | None = None, keepdims: bool = False) -> V:
        """``tensor.reduce_<kind>`` over ``axes`` (default: all)."""
        v = self.wrap(value)
        axes = list(range(v.type.rank)) if axes is None else sorted(a % v.type.rank for a in axes)
        cls = _registry_op(f"graph.reduce_{kind}")
        return self.built(cls.build(v.value, axes, keepdims))

    def reshape(self, value, shape: Sequence[int | None], sizes: Sequence = ()) -> V:
        from irc.dialects.graph import ReshapeOp

        v = self.wrap(value)
        t = TensorType(list(shape), element_type(v.type))
        return self.built(ReshapeOp.build(v.value, t, [_raw(s) for s in sizes]))

    def transpose(self, value, perm: Sequence[int] | None = None) -> V:
        v = self.wrap(value)
        perm = list(reversed(range(v.type.rank))) if perm is None else list(perm)
        return self.tensor_op("graph.transpose", v, perm=perm)

    def matmul(self, a, b) -> V:
        """``graph.matmul`` for two matrices, ``graph.batch_matmul`` for two rank-3 tensors."""
        a, b = self.wrap(a), self.wrap(b)
        name = "graph.batch_matmul" if a.type.rank == 3 else "graph.matmul"
        return self.tensor_op(name, a, b)

    def softmax(self, value, axis: int) -> V:
        return self.tensor_op("graph.softmax", value, axis=axis)

    def log_softmax(self, value, axis: int) -> V:
        return self.tensor_op("graph.log_softmax", value, axis=axis)

    # -- buffers (memref) ---------------------------------------------------------------------

    def load(self, mem, indices: Sequence) -> V:
        """``memref.load`` of ``mem`` at ``indices`` (numbers become ``index`` constants)."""
        from irc.dialects.memref import LoadOp

        return self.built(LoadOp.build(_raw(mem), [_raw(self.index(i)) for i in indices]))

    def store(self, value, mem, indices: Sequence) -> Operation:
        from irc.dialects.memref import StoreOp

        return self.insert(StoreOp.build(_raw(value), _raw(mem), [_raw(self.index(i)) for i in indices]))

    def vector_load(self, mem, indices: Sequence, size: int) -> V:
        """``vector.load``: ``size`` consecutive elements of ``mem``'s row from ``indices``."""
        from irc.dialects.vector import LoadOp

        return self.built(LoadOp.build(_raw(mem), [_raw(self.index(i)) for i in indices], size))

    def vector_store(self, value, mem, indices: Sequence) -> Operation:
        from irc.dialects.vector import StoreOp

        return self.insert(StoreOp.build(_raw(value), _raw(mem), [_raw(self.index(i)) for i in indices]))

    def splat_vector(self, scalar, size: int) -> V:
        """``vector.broadcast``: a vector of ``size`` copies of ``scalar``."""
        from irc.dialects.vector import BroadcastOp

        return self.built(BroadcastOp.build(_raw(scalar), size))

    def vector_of(self, elements: Sequence) -> V:
        """``vector.from_elements``: a vector of the scalars ``elements``, in order."""
        from irc.dialects.vector import FromElementsOp

        return self.built(FromElementsOp.build([_raw(e) for e in elements]))

    def shuffle(self, a, b, mask: Sequence[int]) -> V:
        """``vector.shuffle``: lane i is lane ``mask[i]`` of ``a`` and ``b`` laid end to end."""
        from irc.dialects.vector import ShuffleOp

        return self.built(ShuffleOp.build(_raw(a), _raw(b), mask))

    def alloc(self, type: MemRefType, sizes: Sequence = ()) -> V:
        """``memref.alloc``; ``sizes`` are the run-time sizes of ``type``'s ``?`` dimensions."""
        from irc.dialects.memref import AllocOp

        return self.built(AllocOp.build(type, [_raw(s) for s in sizes]))

    def view(self, source, byte_offset, type: MemRefType, sizes: Sequence = ()) -> V:
        """``memref.view``: ``source``'s memory from ``byte_offset`` seen as ``type``."""
        from irc.dialects.memref import ViewOp

        return self.built(ViewOp.build(_raw(source), _raw(self.index(byte_offset)), type, [_raw(s) for s in sizes]))

    def flat(self, mem) -> V:
        """``mem`` seen as one dimension (buffers are contiguous, so this is a free view)."""
        t = _raw(mem).type
        if t.rank == 1:
            return self.wrap(mem)
        flat_t = MemRefType([t.num_elements if t.has_static_shape else None], t.element_type)
        sizes = [] if t.has_static_shape else [self.num_elements(mem)]
        return self.view(mem, 0, flat_t, sizes)

    def num_elements(self, shaped) -> V:
        """The product of ``shaped``'s sizes, as an ``index`` value."""
        rank = _raw(shaped).type.rank
        if rank == 0:
            return self.index(1)
        n = self.dim(shaped, 0)
        for d in range(1, rank):
            n = n * self.dim(shaped, d)
        return n

    # -- modules, functions, blocks, control flow --------------------------------------------

    def module(self):
        from .module import ModuleOp

        return ModuleOp.new(loc=self.loc)

    @contextmanager
    def function(self, module, name: str, inputs: Sequence[Type], results: Sequence[Type] | None = None,
                 arg_names: Sequence[str] | None = None):
        """A ``func.func @name`` appended to ``module``; the ``with`` body builds its entry block
        and gets the parameters.  ``results`` default to the types given to ``ret``."""
        from irc.dialects.func import FuncOp

        fn = FuncOp.build(name, FunctionType(list(inputs), list(results or [])), arg_names=arg_names)
        fn.loc = self.loc
        module.body.append(fn)
        self.function_op = fn
        with self.at(fn.body.entry):
            yield tuple(self._v(a) for a in fn.args)
        if results is None:
            last = fn.body.last_block.terminator
            if last is not None:
                from .attributes import TypeAttr

                fn.attributes["function_type"] = TypeAttr(FunctionType(list(inputs), last.operand_types))

    def ret(self, *values) -> Operation:
        from irc.dialects.func import ReturnOp

        return self.insert(ReturnOp.build(*[_raw(v) for v in values]))

    def call(self, callee: str, *args, results: Sequence[Type]) -> V | tuple | Operation:
        from .attributes import SymbolRefAttr

        return self.op("func.call", *args, result=list(results), callee=SymbolRefAttr(callee))

    def new_block(self, region: Region, after: Block | None = None, label: str | None = None) -> Block:
        """A new block in ``region`` (after ``after``, else at the end); insertion does not move."""
        block = Block(label=label)
        if after is None:
            region.append(block)
        else:
            region.insert_after(block, after)
        return block

    def br(self, dest: Block) -> Operation:
        from irc.dialects.cf import BranchOp

        return self.insert(BranchOp.build(dest))

    def cond_br(self, cond, true_dest: Block, false_dest: Block) -> Operation:
        from irc.dialects.cf import CondBranchOp

        return self.insert(CondBranchOp.build(_raw(cond), true_dest, false_dest))

    def phi(self, type: Type, incoming: Sequence[tuple] = ()) -> V:
        """``cf.phi``, placed first in the insertion block; ``incoming`` is (value, block) pairs
        (add more with ``add_incoming``)."""
        from irc.dialects.cf import PhiOp

        op = PhiOp.build(type, [(_raw(v), blk) for v, blk in incoming])
        if op.loc is UNKNOWN:
            op.loc = self.loc
        first = self.block.first_op
        while first is not None and first.name == "cf.phi":
            first = first.next
        if first is None:
            self.block.append(op)
        else:
            self.block.insert_before(op, first)
        self.listener.op_inserted(op)
        return self._v(op.results[0])

    def add_incoming(self, phi, value, block: Block) -> None:
        """One more incoming ``value`` of ``phi``, from the predecessor ``block`` (for a loop's
        back edge, known only once the body is built)."""
        _raw(phi).defining_op.add_incoming(_raw(value), block)
        self.listener.op_modified(_raw(phi).defining_op)

    @contextmanager
    def for_(self, lower, upper, step=1, inits: Sequence = (), parallel: bool = False, **attrs):
        """``scf.for`` from ``lower`` to ``upper`` (numbers become ``index`` constants); the
        ``with`` body gets a ``Loop`` (``iv``, ``args``) and must end with ``loop.yield_(...)``
        when there are iter_args (``inits``); ``loop.results`` afterwards.  ``parallel``
        promises that iterations touch disjoint memory (each writes its own elements and reads
        nothing another writes), so they may run in any order or at once: the loop gets the
        ``parallel`` attribute that ``split-parallel`` looks for."""
        from irc.dialects.scf import ForOp

        bounds = [self.index(lower), self.index(upper), self.index(step)]
        inits = [self.wrap(v) for v in inits]
        body = Block([bounds[0].type, *[v.type for v in inits]])
        op = self.insert(ForOp([*[v.value for v in bounds], *[v.value for v in inits]], [v.type for v in inits],
                               _attributes({"parallel": parallel, **attrs}), regions=[Region([body])]))
        loop = Loop(self, op, list(op.body.args[1:]), body.args[0])
        with self._inside(body):
            yield loop
            self._yield(loop)

    @contextmanager
    def nest(self, uppers: Sequence, parallel: bool = False, innermost: dict | None = None):
        """``scf.for`` loops from 0 to each of ``uppers``, outermost first; the ``with`` body
        is the innermost and gets the induction variables.  ``parallel``: the outermost
        loop's iterations are independent (see ``for_``); ``innermost``: attributes of the
        innermost loop (``interleave``: dialects/scf.py)."""
        last = len(uppers) - 1
        with ExitStack() as stack:
            ivs = [stack.enter_context(self.for_(0, u, parallel=parallel and k == 0,
                                                 **((innermost or {}) if k == last else {}))).iv
                   for k, u in enumerate(uppers)]
            yield ivs

    @contextmanager
    def if_(self, cond, results: Sequence[Type] = ()):
        """``scf.if``: ``with b.if_(c, [f32]) as branch:`` then ``with branch.then_(): ...
        branch.yield_(x)`` and ``with branch.else_(): ...``; ``branch.results`` afterwards."""
        from irc.dialects.scf import IfOp

        then_block, else_block = Block(), Block()
        op = self.insert(IfOp([_raw(cond)], list(results), {}, regions=[Region([then_block]), Region([else_block])]))
        branch = IfBranch(self, op)
        yield branch
        for block in (then_block, else_block):
            if block.terminator is None:
                with self._inside(block):
                    if results:
                        raise ValueError("scf.if with results needs a yield_ in both branches")
                    self._yield_values([])

    @contextmanager
    def while_(self, inits: Sequence, after_types: Sequence[Type] | None = None):
        """``scf.while``: the ``with`` body gets a ``WhileLoop``; build the condition under
        ``with w.before() as args: w.condition(c, *forwarded)`` and the body under
        ``with w.after() as args: w.yield_(*next)``; ``w.results`` afterwards."""
        from irc.dialects.scf import WhileOp

        inits = [self.wrap(v) for v in inits]
        after_types = list(after_types) if after_types is not None else [v.type for v in inits]
        before = Block([v.type for v in inits])
        after = Block(after_types)
        op = self.insert(WhileOp([v.value for v in inits], after_types, {},
                                 regions=[Region([before]), Region([after])]))
        yield WhileLoop(self, op)

    def _yield(self, loop: Loop) -> None:
        if loop.next is None and loop.args:
            raise ValueError("a loop with iter_args needs loop.yield_(...)")
        self._yield_values(loop.next or [])

    def _yield_values(self, values) -> None:
        from irc.dialects.scf import YieldOp

        self.insert(YieldOp([_raw(v) for v in values], []))


class Loop:
    """An ``scf.for`` being built: its induction variable, its iter_args, then its results."""

    def __init__(self, builder: Builder, op: Operation, args, iv):
        self.op = op
        self.iv = builder._v(iv)
        self.args = [builder._v(a) for a in args]
        self.next: list | None = None

    def yield_(self, *values) -> None:
        """The iter_args' values for the next iteration (the loop's results after the last)."""
        self.next = list(values)

    @property
    def results(self) -> list[V]:
        return [self.iv.builder._v(r) for r in self.op.results]


class IfBranch:
    def __init__(self, builder: Builder, op: Operation):
        self.builder = builder
        self.op = op

    @contextmanager
    def then_(self):
        with self.builder._inside(self.op.regions[0].entry):
            yield

    @contextmanager
    def else_(self):
        with self.builder._inside(self.op.regions[1].entry):
            yield

    def yield_(self, *values) -> None:
        self.builder._yield_values(values)

    @property
    def results(self) -> list[V]:
        return [self.builder._v(r) for r in self.op.results]


class WhileLoop:
    def __init__(self, builder: Builder, op: Operation):
        self.builder = builder
        self.op = op

    @contextmanager
    def before(self):
        block = self.op.regions[0].entry
        with self.builder._inside(block):
            yield [self.builder._v(a) for a in block.args]

    @contextmanager
    def after(self):
        block = self.op.regions[1].entry
        with self.builder._inside(block):
            yield [self.builder._v(a) for a in block.args]

    def condition(self, cond, *forwarded) -> None:
        from irc.dialects.scf import ConditionOp

        self.builder.insert(ConditionOp([_raw(cond), *[_raw(v) for v in forwarded]], []))

    def yield_(self, *values) -> None:
        self.builder._yield_values(values)

    @property
    def results(self) -> list[V]:
        return [self.builder._v(r) for r in self.op.results]


def _raw(value) -> Value:
    if isinstance(value, V):
        return value.value
    if isinstance(value, Value):
        return value
    raise TypeError(f"expected an IR value, got {type(value).__name__} {value!r}")


def _attributes(attrs: dict) -> dict:
    from irc.dialects.graph import _to_attr

    return {k: _to_attr(v) for k, v in attrs.items() if v is not None and v is not False}


class V:
    """An SSA value that builds: ``a + b``, ``a * 2.0``, ``a @ w``, ``-a``, ``a < b`` insert arith
    and tensor ops through the builder that made ``a``, broadcasting as numpy does."""

    __slots__ = ("builder", "value")
    __array_ufunc__ = None  # numpy scalars on the left defer to V's reflected operators

    def __init__(self, builder: Builder, value: Value):
        self.builder = builder
        self.value = value

    def __repr__(self) -> str:
        return f"V({self.value!r})"

    @property
    def type(self) -> Type:
        return self.value.type

    @property
    def shape(self) -> tuple:
        return tuple(self.type.shape) if isinstance(self.type, TensorType) else ()

    @property
    def elem(self) -> Type:
        return element_type(self.type)

    @property
    def is_float(self) -> bool:
        return isinstance(self.elem, FloatType)

    def _bin(self, float_op, int_op, other, reverse=False) -> V:
        a, b = (other, self) if reverse else (self, other)
        return self.builder.binary(float_op, int_op, a, b)

    def __add__(self, o):
        return self._bin("arith.addf", "arith.addi", o)

    def __radd__(self, o):
        return self._bin("arith.addf", "arith.addi", o, True)

    def __sub__(self, o):
        return self._bin("arith.subf", "arith.subi", o)

    def __rsub__(self, o):
        return self._bin("arith.subf", "arith.subi", o, True)

    def __mul__(self, o):
        return self._bin("arith.mulf", "arith.muli", o)

    def __rmul__(self, o):
        return self._bin("arith.mulf", "arith.muli", o, True)

    def __truediv__(self, o):
        return self._bin("arith.divf", "arith.divsi", o)

    def __rtruediv__(self, o):
        return self._bin("arith.divf", "arith.divsi", o, True)

    def __pow__(self, o):
        return self._bin("math.powf", None, o)

    def __rpow__(self, o):
        return self._bin("math.powf", None, o, True)

    def __matmul__(self, o):
        return self.builder.matmul(self, o)

    def __rmatmul__(self, o):
        return self.builder.matmul(o, self)

    def __and__(self, o):
        return self._bin(None, "arith.andi", o)

    def __rand__(self, o):
        return self._bin(None, "arith.andi", o, True)

    def __or__(self, o):
        return self._bin(None, "arith.ori", o)

    def __ror__(self, o):
        return self._bin(None, "arith.ori", o, True)

    def __xor__(self, o):
        return self._bin(None, "arith.xori", o)

    def __rxor__(self, o):
        return self._bin(None, "arith.xori", o, True)

    def __lshift__(self, o):
        return self._bin(None, "arith.shli", o)

    def __rshift__(self, o):
        """Arithmetic (sign-filling) shift, as numpy's ``>>`` on signed integers."""
        return self._bin(None, "arith.shrsi", o)

    def __neg__(self):
        if self.is_float:
            return self.builder.unary("arith.negf", self)
        return self.builder.binary("arith.subf", "arith.subi", 0, self)

    def __lt__(self, o):
        return self.builder.compare("lt", self, o)

    def __le__(self, o):
        return self.builder.compare("le", self, o)

    def __gt__(self, o):
        return self.builder.compare("gt", self, o)

    def __ge__(self, o):
        return self.builder.compare("ge", self, o)

    def eq(self, o) -> V:
        """``==`` stays Python's identity (values are dict keys); this is the IR comparison."""
        return self.builder.compare("eq", self, o)

    def ne(self, o) -> V:
        return self.builder.compare("ne", self, o)

    __hash__ = object.__hash__

    # -- methods in numpy's spelling ---------------------------------------------------------

    def maximum(self, o) -> V:
        return self.builder.binary("arith.maximumf", "arith.maxsi", self, o)

    def minimum(self, o) -> V:
        return self.builder.binary("arith.minimumf", "arith.minsi", self, o)

    def sum(self, axes=None, keepdims: bool = False) -> V:
        return self.builder.reduce("sum", self, _axes(axes), keepdims)

    def mean(self, axes=None, keepdims: bool = False) -> V:
        return self.builder.reduce("mean", self, _axes(axes), keepdims)

    def max(self, axes=None, keepdims: bool = False) -> V:
        return self.builder.reduce("max", self, _axes(axes), keepdims)

    def min(self, axes=None, keepdims: bool = False) -> V:
        return self.builder.reduce("min", self, _axes(axes), keepdims)

    def prod(self, axes=None, keepdims: bool = False) -> V:
        return self.builder.reduce("prod", self, _axes(axes), keepdims)

    @property
    def T(self) -> V:
        return self.builder.transpose(self)

    def reshape(self, *shape) -> V:
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape
        return self.builder.reshape(self, shape)

    def broadcast_to(self, t: TensorType, like=None) -> V:
        return self.builder.broadcast_to(self, t, like)

    def astype(self, t: Type) -> V:
        return self.builder.convert(self, t)

    def softmax(self, axis: int = -1) -> V:
        return self.builder.softmax(self, axis % max(self.type.rank, 1))

    def log_softmax(self, axis: int = -1) -> V:
        return self.builder.log_softmax(self, axis % max(self.type.rank, 1))


Builder.value_class = V


def _axes(axes) -> list[int] | None:
    if axes is None:
        return None
    return [axes] if isinstance(axes, int) else list(axes)


def _unary_method(op_name: str):
    def method(self: V) -> V:
        return self.builder.unary(op_name, self)

    method.__name__ = op_name.split(".")[1]
    method.__doc__ = f"``{op_name}``"
    return method


for _name in ("exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sqrt", "rsqrt", "sin", "cos", "erf",
              "floor", "ceil"):
    setattr(V, _name, _unary_method(f"math.{_name}"))
V.abs = _unary_method("math.absf")
del _name
