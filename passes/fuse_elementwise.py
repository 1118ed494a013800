"""fuse-elementwise: group elementwise ops, broadcasts and reductions into ``graph.fused`` ops.

A group is a maximal set of elementwise ops (``arith``/``math`` on tensors,
comparisons, selects, casts), broadcasts, splats and splat constants whose
results are used only inside the group, plus the op that consumes them all: its
*root*, which is an elementwise op, a broadcast, or a reduction
(``tensor.reduce_*``).  The group becomes one ``graph.fused`` op whose body is
the scalar form of its ops, so after lowering it is one loop nest that reads
each input once and writes one output; nothing in between is stored.

The pass walks the ops once, last to first.  An op joins the group of its users
when they all belong to one group and all read it at the same index (the
*map* from its dimensions to the group's loop dimensions, composed through
broadcasts); otherwise it roots a group of its own.  So the pass is linear in
the number of ops (MLIR's linalg elementwise fusion is quadratic along a
chain), and it never computes a value twice.
"""

from __future__ import annotations

from irc.dialects.fused import REDUCTIONS

from irc.attributes import DenseAttr, FloatAttr, IntegerAttr
from irc.block import Block, Region
from irc.operation import Elementwise
from irc.passmanager import Pass
from irc.types import FloatType, TensorType

_CONTROL_FLOW = frozenset({"scf.if", "scf.for", "scf.while"})
"""Ops whose regions hold tensor code of their own: each block is fused on its own."""

REDUCTION_KINDS = {op.name: kind for kind, op in REDUCTIONS.items()}
"""tensor.reduce_* op name -> the ``reduce`` kind of the fused op that takes it over."""


def _is_tensor(v) -> bool:
    return isinstance(v.type, TensorType)


def _splat_constant(op) -> bool:
    return op.name == "arith.constant" and isinstance(op.attributes.get("value"), DenseAttr) \
        and op.attributes["value"].is_splat and _is_tensor(op.results[0])


def _splat(op) -> bool:
    """A tensor of one repeated scalar: copied into every group that reads it, never stored."""
    if op.name == "graph.splat":
        return len(op.operands) == 1 and op.results[0].type.has_static_shape
    return _splat_constant(op)


def _fusible(op) -> bool:
    """Ops that can be computed inside a fused body, one element at a time."""
    if len(op.results) != 1 or not _is_tensor(op.results[0]) or op.regions:
        return False
    if Elementwise in op.traits:
        return True
    if op.name == "graph.broadcast":
        src, dst = op.operands[0].type, op.results[0].type
        return len(op.operands) == 1 and src.has_static_shape and dst.has_static_shape
    return False


def _operand_map(user, operand_index: int, user_map: tuple[int, ...]) -> tuple[int, ...] | None:
    """How ``user``, computed at loop index ``user_map``, reads its operand: its map."""
    if user.name == "graph.broadcast":
        if operand_index != 0:
            return None
        src, dst = user.operands[0].type, user.results[0].type
        offset = dst.rank - src.rank
        return tuple(-1 if s == 1 and dst.shape[offset + i] != 1 else user_map[offset + i]
                     for i, s in enumerate(src.shape))
    if user.name in REDUCTION_KINDS:
        return user_map
    if not _is_tensor(user.operands[operand_index]):
        return ()
    return user_map


class Group:
    __slots__ = ("root", "ops", "maps", "domain_rank")

    def __init__(self, root, domain_rank: int):
        self.root = root
        self.ops = [root]
        self.maps = {}  # op -> the map of its result into the domain
        self.domain_rank = domain_rank


class FuseElementwise(Pass):
    """Fuse elementwise ops, broadcasts and reductions into graph.fused ops (linear time)."""

    name = "fuse-elementwise"

    def run(self, module, stats) -> None:
        for func in module.functions:
            blocks = [b for region in func.regions for b in region.blocks]
            while blocks:  # the function's blocks, and those of the scf ops in them (loop bodies...)
                block = blocks.pop()
                blocks.extend(b for op in block.ops if op.name in _CONTROL_FLOW for r in op.regions
                              for b in r.blocks)
                position = {op: i for i, op in enumerate(block.ops)}
                for group in self._groups(block):
                    if self._build(group, position.__getitem__):
                        stats.add("groups")
                        stats.add("ops-fused", len(group.ops))

    # -- grouping --------------------------------------------------------------------------------

    def _groups(self, block) -> list[Group]:
        group_of: dict = {}
        groups: list[Group] = []
        for op in reversed(list(block.ops)):
            reduction = op.name in REDUCTION_KINDS and not op.regions
            if not (_fusible(op) or reduction):
                continue
            result = op.results[0]
            joined = None if reduction else self._join(op, result, group_of)
            if joined is not None:
                group, result_map = joined
                group.ops.append(op)
                group.maps[op] = result_map
                group_of[op] = group
                continue
            rank = op.operands[0].type.rank if reduction else result.type.rank
            group = Group(op, rank)
            group.maps[op] = tuple(range(rank))
            group_of[op] = group
            groups.append(group)
        return groups

    @staticmethod
    def _join(op, result, group_of):
        """The group every user of ``result`` is in, and the one map they read it with, if any."""
        group = None
        result_map = None
        for use in result.uses:
            user = use.owner
            g = group_of.get(user)
            if g is None or (group is not None and g is not group) or user.parent is not op.parent:
                return None
            group = g
            m = _operand_map(user, use.index, g.maps[user])
            if m is None or (result_map is not None and m != result_map):
                return None
            result_map = m
        if group is None or len(result_map) != result.type.rank:
            return None
        return group, result_map

    # -- building the fused op -----------------------------------------------------------------

    def _build(self, group: Group, order) -> bool:
        """Replace the group by one graph.fused op; False if it has to stay as it is."""
        from irc.dialects.fused import FusedOp, YieldOp

        members = set(group.ops)
        ordered = sorted(group.ops, key=order)
        operands, maps = [], []
        arg_of: dict = {}  # (outer value, map) -> body argument
        splats: set = set()
        body = Block()
        value_map: dict = {}

        def body_value(v, m):
            if _defining(v) in members:
                return value_map[v]
            producer = _defining(v)
            if producer is not None and _splat(producer):
                splats.add(producer)
                if producer.name == "graph.splat":
                    return body_value(producer.operands[0], ())
                if v not in value_map:
                    value_map[v] = _scalar_constant(body, producer)
                return value_map[v]
            key = (v, m)
            if key not in arg_of:
                arg_of[key] = body.add_argument(v.type.element_type if _is_tensor(v) else v.type)
                operands.append(v)
                maps.append(m)
            return arg_of[key]

        for op in ordered:
            result = op.results[0]
            m = group.maps[op]
            if op.name in REDUCTION_KINDS:
                value_map[result] = body_value(op.operands[0], m)
                continue
            if op.name == "graph.broadcast":
                value_map[result] = body_value(op.operands[0], _operand_map(op, 0, m))
                continue
            new_operands = [body_value(v, _operand_map(op, i, m)) for i, v in enumerate(op.operands)]
            scalar = type(op)(new_operands, [result.type.element_type], dict(op.attributes))
            scalar.loc = op.loc
            scalar.results[0].name_hint = result.name_hint
            body.append(scalar)
            value_map[result] = scalar.results[0]
        root = group.root
        body.append(YieldOp([value_map[root.results[0]]], []))
        attrs = {}
        if root.name in REDUCTION_KINDS:
            axes = [a.value for a in root.attributes["axes"].elements]
            attrs = dict(reduce=REDUCTION_KINDS[root.name], axes=axes, keepdims="keepdims" in root.attributes)
            covered = {d for v, m in zip(operands, maps) if _is_tensor(v) for d in m}
            uncovered = [a for a in axes if a not in covered]  # summing copies a fused broadcast made
            if uncovered:
                shape = root.operands[0].type.shape
                if any(shape[a] is None for a in uncovered):
                    # How many copies are summed is known only at run time: leave the group unfused.
                    for op in list(body.ops_reversed()):
                        op.erase()
                    return False
                attrs["domain"] = shape
        fused = FusedOp.build(operands, maps, root.results[0].type, Region([body]), **attrs)
        fused.loc = root.loc
        root.parent.insert_before(fused, root)
        root.results[0].replace_all_uses_with(fused.results[0])
        for op in reversed(ordered):
            op.erase()
        for producer in splats:  # a splat read only through fused bodies is dead now
            if producer.parent is not None and all(r.first_use is None for r in producer.results):
                producer.erase()
        return True


def _defining(v):
    return getattr(v, "op", None)


def _scalar_constant(body: Block, op):
    """The element of a splat ``arith.constant`` as a scalar constant in ``body``."""
    from irc.dialects.arith import ConstantOp

    attr = op.attributes["value"]
    elem = attr.type.element_type
    scalar = attr.array.flat[0].item()
    new = ConstantOp.build(FloatAttr(float(scalar), elem) if isinstance(elem, FloatType)
                           else IntegerAttr(int(scalar), elem))
    new.loc = op.loc
    body.append(new)
    return new.results[0]
