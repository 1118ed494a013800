"""``LoopBuilder``: emit scalar code and ``scf.for`` nests with one call per op.

Lowerings read like the loops they produce::

    with lb.loop(0, n) as i:
        x = lb.load(a, [i])
        lb.store(lb.op("arith.mulf", x, x), out, [i])

Every op is inserted at the builder's insertion point with the location of the
op being lowered, so a fault in lowered code points at the source op.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

from irc import registry
from irc.attributes import FloatAttr, IntegerAttr, UnitAttr
from irc.block import Block, Region
from irc.rewriter import Builder
from irc.types import FloatType, IntegerType, MemRefType, Type, index
from irc.values import Value


class Loop:
    """An ``scf.for`` being built: its induction variable, its iter_args, then its results."""

    def __init__(self, op):
        self.op = op
        self.iv: Value = op.body.args[0]
        self.args: list[Value] = list(op.body.args[1:])
        self.next: list[Value] | None = None

    def yield_(self, *values: Value) -> None:
        """The iter_args' values for the next iteration (the loop's results after the last)."""
        self.next = list(values)

    @property
    def results(self) -> list[Value]:
        return list(self.op.results)


class LoopBuilder:
    def __init__(self, builder: Builder, loc=None):
        self.builder = builder
        self.loc = loc
        self._index_constants: dict[int, Value] = {}

    # -- plain ops -------------------------------------------------------------------------

    def insert(self, op):
        op.loc = self.loc
        self.builder.insert(op)
        return op

    def op(self, name: str, *operands: Value, result: Type | None = None, **attrs) -> Value:
        """``name`` on ``operands``; the result type is the first operand's unless given."""
        cls = registry.lookup(name)
        return self.insert(cls(list(operands), [result or operands[0].type], dict(attrs))).results[0]

    def const(self, value, type: Type) -> Value:
        from irc.dialects.arith import ConstantOp

        if isinstance(type, FloatType):
            attr = FloatAttr(float(value), type)
        else:
            attr = IntegerAttr(int(value), type)
        return self.insert(ConstantOp.build(attr)).results[0]

    def index(self, value: int | Value) -> Value:
        """An index constant (one per value per builder), or ``value`` itself if it is a Value."""
        if isinstance(value, Value):
            return value
        if value not in self._index_constants:
            self._index_constants[value] = self.const(value, index)
        return self._index_constants[value]

    def add(self, a, b) -> Value:
        return self.op("arith.addi", self.index(a), self.index(b))

    def mul(self, a, b) -> Value:
        return self.op("arith.muli", self.index(a), self.index(b))

    def cast(self, name: str, value: Value, to: Type) -> Value:
        return self.op(name, value, result=to)

    # -- memory ----------------------------------------------------------------------------

    def load(self, mem: Value, indices: Sequence) -> Value:
        from irc.dialects.memref import LoadOp

        return self.insert(LoadOp.build(mem, [self.index(i) for i in indices])).results[0]

    def store(self, value: Value, mem: Value, indices: Sequence) -> None:
        from irc.dialects.memref import StoreOp

        self.insert(StoreOp.build(value, mem, [self.index(i) for i in indices]))

    def dim(self, mem: Value, d: int) -> Value:
        """The size of dimension ``d`` of ``mem`` (a constant when static)."""
        from irc.dialects.memref import DimOp

        size = mem.type.shape[d]
        if size is not None:
            return self.index(size)
        return self.insert(DimOp([mem, self.index(d)], [index])).results[0]

    def alloc(self, type: MemRefType, sizes: Sequence[Value] = ()) -> Value:
        from irc.dialects.memref import AllocOp

        return self.insert(AllocOp.build(type, list(sizes))).results[0]

    def view(self, source: Value, byte_offset, type: MemRefType, sizes: Sequence[Value] = ()) -> Value:
        from irc.dialects.memref import ViewOp

        return self.insert(ViewOp.build(source, self.index(byte_offset), type, list(sizes))).results[0]

    def flat(self, mem: Value) -> Value:
        """``mem`` seen as one dimension (buffers are contiguous, so this is free)."""
        t = mem.type
        if t.rank == 1:
            return mem
        flat_t = MemRefType([t.num_elements if t.has_static_shape else None], t.element_type)
        sizes = [] if t.has_static_shape else [self.num_elements(mem)]
        return self.view(mem, 0, flat_t, sizes)

    def num_elements(self, mem: Value) -> Value:
        n = self.index(1)
        for d in range(mem.type.rank):
            n = self.mul(n, self.dim(mem, d)) if n is not self.index(1) else self.dim(mem, d)
        return n

    # -- loops -----------------------------------------------------------------------------

    @contextmanager
    def loop(self, lower, upper, step=1, inits: Sequence[Value] = (), parallel: bool = False):
        """An ``scf.for`` from ``lower`` to ``upper``; the body is built inside the ``with``.

        With ``inits``, call ``loop.yield_(...)`` in the body; ``loop.results`` are the
        final values.  ``parallel`` promises that iterations touch disjoint memory (each
        writes its own elements, and reads nothing another writes), so they may run
        in any order or at once: the loop gets the ``parallel`` attribute that
        ``split-parallel`` looks for.
        """
        from irc.dialects.scf import ForOp, YieldOp

        body = Block([index, *[v.type for v in inits]])
        op = ForOp([self.index(lower), self.index(upper), self.index(step), *inits],
                   [v.type for v in inits], {"parallel": UnitAttr()} if parallel else {},
                   regions=[Region([body])])
        self.insert(op)
        loop = Loop(op)
        saved = (self.builder.block, self.builder.before, self._index_constants)
        self.builder.at_end(body)
        self._index_constants = dict(self._index_constants)  # constants defined outside stay visible
        try:
            yield loop
            if inits and loop.next is None:
                raise ValueError("a loop with iter_args needs loop.yield_(...)")
            self.insert(YieldOp(loop.next or [], []))
        finally:
            self.builder.block, self.builder.before, self._index_constants = saved

    @contextmanager
    def nest(self, uppers: Sequence, parallel: bool = False):
        """Loops from 0 to each of ``uppers``, outermost first; yields the induction variables.
        ``parallel``: the outermost loop's iterations are independent (see ``loop``)."""
        ivs: list[Value] = []
        stack = []
        try:
            for k, u in enumerate(uppers):
                cm = self.loop(0, u, parallel=parallel and k == 0)
                stack.append(cm)
                ivs.append(cm.__enter__().iv)
            yield ivs
        finally:
            for cm in reversed(stack):
                cm.__exit__(None, None, None)


def is_float(t: Type) -> bool:
    return isinstance(t, FloatType)


def is_int(t: Type) -> bool:
    return isinstance(t, IntegerType)
