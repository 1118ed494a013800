"""``graph.fused``: a group of elementwise ops, broadcasts and one reduction as one op.

Fusion (``passes/fuse.py``) turns a maximal group of elementwise ops into one
``graph.fused`` whose body computes one element from one element of each
operand, so the group becomes one loop nest and no intermediate tensor is ever
stored::

    %y = graph.fused %a, %b, %c {maps = [[0, 1], [1], []]} ({
    ^bb0(%x: f32, %w: f32, %s: f32):
      %t = arith.mulf %x, %w : f32
      %u = arith.addf %t, %s : f32
      graph.yield %u : f32
    }) : (tensor<4x8xf32>, tensor<8xf32>, f32) -> tensor<4x8xf32>

The op iterates over a *domain* of rank ``D``: the result's shape, or, with a
reduction, the shape before reducing.  ``maps`` gives, for each operand, the
domain dimension that each of its dimensions runs along, in increasing order
(so an operand is read in its own row-major order), or ``-1`` for a dimension
of size 1 that is broadcast.  A domain dimension an operand does not list is
broadcast too; a scalar operand has ``[]`` and is the same for every element.

With ``reduce = "sum" | "prod" | "max" | "min" | "mean"`` and ``axes``, the
body's values are reduced over those domain dimensions exactly as
``tensor.reduce_*`` reduces them (floats accumulate in f64 and round once;
``keepdims`` keeps the axes with size 1).  Every domain dimension is the size
of an operand dimension mapped to it or, if none is, the size the optional
``domain`` attribute gives it (-1: none), or that of the result dimension it
becomes; a reduced dimension needs one of the first two (a sum over a broadcast
dimension: ``domain`` says how many copies are summed).
"""

from __future__ import annotations

import numpy as np

from irc.attributes import ArrayAttr, IntegerAttr, StringAttr, UnitAttr
from irc.block import Block, Region
from irc.diagnostics import IRError
from irc.operation import Operation, Pure, ReturnLike, Terminator
from irc.semantics import Fault
from irc.types import ShapedType, TensorType, Type, i64

from .graph import (
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceMinOp,
    ReduceProdOp,
    ReduceSumOp,
    _attr_text,
    _dims,
    _finish,
)

REDUCTIONS = {"sum": ReduceSumOp, "prod": ReduceProdOp, "max": ReduceMaxOp, "min": ReduceMinOp,
              "mean": ReduceMeanOp}
"""The reductions a fused op can end in, by ``reduce`` name, with the op whose semantics it has."""


def maps_attr(maps) -> ArrayAttr:
    return ArrayAttr(ArrayAttr(IntegerAttr(int(d), i64) for d in m) for m in maps)


class FusedOp(Operation):
    """One loop nest's worth of elementwise work, optionally ending in a reduction."""

    name = "graph.fused"
    traits = frozenset({Pure})
    summary = "A fused group of elementwise ops (with broadcasts and one optional reduction) with a scalar body."
    example = ("%r = graph.fused %t, %x {maps = [[0], []]} ({ ^bb0(%p: f32, %q: f32): "
               "%s = arith.addf %p, %q : f32 graph.yield %s : f32 }) : (tensor<4xf32>, f32) -> tensor<4xf32>")

    # -- structure -----------------------------------------------------------------------------

    @property
    def body(self) -> Block:
        return self.regions[0].entry

    @property
    def maps(self) -> list[tuple[int, ...]]:
        return [tuple(e.value for e in m.elements) for m in self.attributes["maps"].elements]

    @property
    def reduction(self) -> str | None:
        attr = self.attributes.get("reduce")
        return attr.value if attr is not None else None

    @property
    def axes(self) -> tuple[int, ...]:
        attr = self.attributes.get("axes")
        return tuple(e.value for e in attr.elements) if attr is not None else ()

    @property
    def keepdims(self) -> bool:
        return "keepdims" in self.attributes

    @property
    def domain_rank(self) -> int:
        rank = self.results[0].type.rank
        return rank if self.keepdims or not self.reduction else rank + len(self.axes)

    def result_dim_of(self, d: int) -> int | None:
        """The result dimension that domain dimension ``d`` becomes (None if it is reduced away)."""
        axes = self.axes if self.reduction else ()
        if d in axes:
            return d if self.keepdims else None
        return d if self.keepdims else d - sum(1 for a in axes if a < d)

    def domain_shape(self) -> list[int | None]:
        """Static domain sizes (None where dynamic), from the operands and the result."""
        shape: list[int | None] = [None] * self.domain_rank
        for v, m in zip(self.operands, self.maps):
            if isinstance(v.type, TensorType):
                for size, d in zip(v.type.shape, m):
                    if d >= 0 and size is not None:
                        shape[d] = size
        result = self.results[0].type
        declared = self.declared_domain
        for d in range(self.domain_rank):
            r = self.result_dim_of(d)
            if shape[d] is None and declared and declared[d] >= 0:
                shape[d] = declared[d]
            elif shape[d] is None and r is not None and not (self.reduction and d in self.axes):
                shape[d] = result.shape[r]
        return shape

    @property
    def declared_domain(self) -> tuple[int, ...] | None:
        """The ``domain`` attribute: static sizes of the loop dimensions (-1: dynamic), given
        when an operand does not carry one (a reduction over a broadcast dimension)."""
        attr = self.attributes.get("domain")
        return tuple(e.value for e in attr.elements) if attr is not None else None

    def domain_source(self, d: int) -> tuple[int, int] | None:
        """(operand index, operand dim) that gives domain dimension ``d``'s size, if any operand does."""
        for i, (v, m) in enumerate(zip(self.operands, self.maps)):
            if isinstance(v.type, ShapedType) and d in m:  # a memref, once bufferized
                return i, m.index(d)
        return None

    # -- verification ----------------------------------------------------------------------------

    def verify_op(self) -> None:
        if len(self.results) != 1 or not isinstance(self.results[0].type, TensorType):
            raise self.error("has one tensor result")
        if len(self.regions) != 1 or self.regions[0].is_empty:
            raise self.error("needs a body region")
        maps = self.attributes.get("maps")
        if not isinstance(maps, ArrayAttr) or len(maps.elements) != len(self.operands) or not all(
                isinstance(m, ArrayAttr) and all(isinstance(e, IntegerAttr) for e in m.elements)
                for m in maps.elements):
            raise self.error("needs 'maps', one list of domain dimensions per operand")
        reduction = self.reduction
        if "reduce" in self.attributes:
            if not isinstance(self.attributes["reduce"], StringAttr) or reduction not in REDUCTIONS:
                raise self.error(f"'reduce' must be one of {', '.join(map(repr, REDUCTIONS))}")
            axes = self.axes
            if not axes or len(set(axes)) != len(axes) or not all(0 <= a < self.domain_rank for a in axes):
                raise self.error(f"'axes' must list distinct domain dimensions, got {list(axes)}")
        elif "axes" in self.attributes or "keepdims" in self.attributes:
            raise self.error("'axes' and 'keepdims' go with 'reduce'")
        if "keepdims" in self.attributes and not isinstance(self.attributes["keepdims"], UnitAttr):
            raise self.error("'keepdims' is a unit attribute")
        rank = self.domain_rank
        result = self.results[0].type
        domain = self.attributes.get("domain")
        if domain is not None and (not isinstance(domain, ArrayAttr) or len(domain.elements) != rank or not all(
                isinstance(e, IntegerAttr) and e.value >= -1 for e in domain.elements)):
            raise self.error(f"'domain' must list {rank} sizes (-1 for a dynamic one)")
        sizes: list[int | None] = [None] * rank
        for i, (v, m) in enumerate(zip(self.operands, self.maps)):
            t = v.type
            if not isinstance(t, TensorType):
                if m:
                    raise self.error(f"operand {i} is a scalar, so its map must be [], got {list(m)}")
                continue
            if len(m) != t.rank:
                raise self.error(f"operand {i} has rank {t.rank} but its map has {len(m)} entries")
            mapped = [d for d in m if d >= 0]
            if mapped != sorted(set(mapped)) or not all(d < rank for d in mapped):
                raise self.error(f"operand {i}'s map {list(m)} must list increasing domain dimensions "
                                 f"below {rank}")
            for size, d in zip(t.shape, m):
                if d < 0:
                    if size is not None and size != 1:
                        raise self.error(f"operand {i} broadcasts a dimension of size {size} (only 1 can be)")
                elif size is not None:
                    if sizes[d] is not None and sizes[d] != size:
                        raise self.error(f"operands disagree on domain dimension {d}: {sizes[d]} and {size}")
                    sizes[d] = size
        for d in range(rank):
            r = self.result_dim_of(d)
            declared = self.declared_domain[d] if self.declared_domain else -1
            if declared >= 0 and sizes[d] is not None and sizes[d] != declared:
                raise self.error(f"'domain' says dimension {d} is {declared}, but an operand has {sizes[d]}")
            if self.reduction and d in self.axes and self.domain_source(d) is None and declared < 0:
                raise self.error(f"reduced dimension {d} needs an operand dimension or a static 'domain' size")
            if r is None:
                continue
            want = 1 if self.reduction and d in self.axes else sizes[d]
            got = result.shape[r]
            if want is not None and got is not None and want != got:
                raise self.error(f"result dimension {r} must be {want}, got {got} ({result})")
        body = self.body
        if [a.type for a in body.args] != [getattr(v.type, "element_type", v.type) for v in self.operands]:
            raise self.error("body arguments must be the element types of the operands")
        term = body.terminator
        if not isinstance(term, YieldOp) or len(term.operands) != 1 \
                or term.operands[0].type is not result.element_type:
            raise self.error(f"body must end in 'graph.yield' of one {result.element_type}")

    # -- semantics: run the body once over whole arrays --------------------------------------------

    # -- derivatives: none; the ops a gradient is made of are gone inside the body -----------

    def vjp(self, b, operands, results, cotangents):
        raise self.cannot_differentiate()

    def jvp(self, b, operands, results, tangents):
        raise self.cannot_differentiate()

    def cannot_differentiate(self) -> IRError:
        return self.error("cannot be differentiated: differentiate before 'fuse-elementwise' "
                          "(run grad, vjp or jvp on the unfused graph, then fuse the result)")

    def interpret(self, interp, args):
        shape = self._runtime_domain(args)
        arrays = [self._expand(a, m, shape) if isinstance(v.type, TensorType) else a
                  for a, v, m in zip(args, self.operands, self.maps)]
        _, (value,) = interp.run_region(self.regions[0], arrays, dict(interp.env))
        elem = self.results[0].type.element_type
        value = np.broadcast_to(np.asarray(value), shape)
        if self.reduction:
            value = REDUCTIONS[self.reduction].reduce(value, self.axes, self.keepdims, elem)
        return [_finish(np.array(value, order="C"), elem)]

    def _runtime_domain(self, args) -> tuple[int, ...]:
        shape: list[int | None] = [None] * self.domain_rank
        for i, (a, v, m) in enumerate(zip(args, self.operands, self.maps)):
            if not isinstance(v.type, TensorType):
                continue
            for size, d in zip(a.shape, m):
                if d < 0:
                    if size != 1:
                        raise Fault(f"operand {i} has size {size} in a dimension broadcast from 1")
                elif shape[d] is None:
                    shape[d] = size
                elif shape[d] != size:
                    raise Fault(f"operands have different shapes at run time: {_dims(a.shape)} "
                                f"does not match domain size {shape[d]} in dimension {d}")
        result = self.results[0].type
        declared = self.declared_domain
        for d in range(self.domain_rank):
            if shape[d] is None and declared and declared[d] >= 0:
                shape[d] = declared[d]
            if shape[d] is None:
                r = self.result_dim_of(d)
                size = None if r is None or (self.reduction and d in self.axes) else result.shape[r]
                if size is None:
                    raise Fault(f"domain dimension {d} has no size at run time")
                shape[d] = size
        return tuple(shape)

    @staticmethod
    def _expand(a: np.ndarray, m, shape) -> np.ndarray:
        kept = [i for i, d in enumerate(m) if d >= 0]
        a = a.reshape([a.shape[i] for i in kept])
        full = [1] * len(shape)
        for i, d in zip(kept, (m[i] for i in kept)):
            full[d] = a.shape[kept.index(i)]
        return np.broadcast_to(a.reshape(full), shape)

    # -- assembly: %a, %b {attrs} ({body}) : (A, B) -> R ---------------------------------------------

    @classmethod
    def parse_uniform(cls, ctx, syn):
        sig = syn.sig
        if sig is None or sig[0] != "fn" or len(sig[1].results) != 1 or len(syn.regions) != 1 \
                or any(type(a) is tuple for a in syn.args) or len(syn.args) != len(sig[1].inputs):
            raise IRError(f"'{cls.name}' expects '%a, %b {{maps = ...}} ({{body}}) : (A, B) -> RESULT', "
                          "one type per operand", syn.loc)
        fn = sig[1]
        return cls([ctx.value(a, t) for a, t in zip(syn.args, fn.inputs)], list(fn.results), syn.attrs,
                   regions=list(syn.regions))

    def print_custom(self, p) -> None:
        rest = _attr_text(p, {k: v for k, v in self.attributes.items() if k != "maps"})
        maps = ", ".join("[" + ", ".join(map(str, m)) + "]" for m in self.maps)
        p.write(f" {p.values(self.operands)} {{maps = [{maps}]{', ' + rest[2:-1] if rest else ''}}} (")
        p.region(self.regions[0], print_entry_args=True)
        p.write(f") : ({p.types(self.operand_types)}) -> {self.results[0].type}")

    @classmethod
    def build(cls, operands, maps, result_type: Type, body: Region, reduce: str | None = None,
              axes=(), keepdims: bool = False, domain=None) -> FusedOp:
        attrs = {"maps": maps_attr(maps)}
        if domain is not None:
            attrs["domain"] = ArrayAttr(IntegerAttr(-1 if d is None else d, i64) for d in domain)
        if reduce:
            attrs["reduce"] = StringAttr(reduce)
            attrs["axes"] = ArrayAttr(IntegerAttr(a, i64) for a in axes)
            if keepdims:
                attrs["keepdims"] = UnitAttr()
        return cls(list(operands), [result_type], attrs, regions=[body])


class YieldOp(Operation):
    """``graph.yield %v : T``: the element a ``graph.fused`` body computes."""

    name = "graph.yield"
    traits = frozenset({Terminator, ReturnLike})
    summary = "End a graph.fused body with the element it computes."
    example = "graph.yield %x : f32"

    def verify_op(self) -> None:
        if not isinstance(self.parent_op, FusedOp):
            raise self.error("must end the body of 'graph.fused'")

    @classmethod
    def parse_uniform(cls, ctx, syn):
        t = syn.single_type()
        if len(syn.args) != 1 or type(syn.args[0]) is tuple:
            raise IRError("'graph.yield' expects '%value : TYPE'", syn.loc)
        return cls([ctx.value(syn.args[0], t)], [], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : {self.operands[0].type}")
