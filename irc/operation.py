"""Operations: the unit of computation, and the traits that describe them.

An op class declares what it is; it does not code how the IR is stored::

    class AddIOp(IntBinaryOp):
        name = "arith.addi"
        traits = frozenset({Pure, Commutative})

        @staticmethod
        def compute(a, b, t):   # semantics shared by fold and the interpreter
            return a + b

Storage is uniform for every op: ``operands`` (a list of values, read-only: use
``set_operand``), ``results``, ``attributes`` (a dict name -> Attribute),
``successors`` (blocks; for ``cf.phi`` the incoming blocks), ``regions``, and a
source location.  Ops live in an intrusive linked list in their block, so
inserting and erasing in the middle of a block is O(1).

Hooks an op class may define (all optional):
  ``verify_op()``         raise ``IRError`` on an ill-formed op (types, attributes)
  ``fold(constants)``     list of Attribute/Value per result, or None
  ``interpret(interp, args)`` list of result values, numpy semantics
  ``canonicalization_patterns()`` rewrite patterns run by ``canonicalize``
  ``print_custom(p)`` / ``parse_custom(...)``  the readable assembly form
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

from .attributes import Attribute
from .diagnostics import UNKNOWN, IRError, Location
from .types import Type
from .values import OpResult, Use, Value

if TYPE_CHECKING:
    from .block import Block, Region


# --- traits ---------------------------------------------------------------


class Trait:
    """A marker describing a property of an op class that passes may rely on."""


class Pure(Trait):
    """No side effects: unused results make the op dead; equal ops may be merged (CSE)."""


class Commutative(Trait):
    """A binary op whose two operands may be swapped."""


class Terminator(Trait):
    """Ends a block; its successors are the block's CFG successors."""


class SameOperandsAndResultType(Trait):
    """All operands and results have one type; the assembly form names it once."""


class Elementwise(Trait):
    """Applies a scalar function elementwise; accepts scalars and tensors alike."""


class IsolatedFromAbove(Trait):
    """Its regions may not use values defined outside (functions, modules)."""


class HasRecursiveEffects(Trait):
    """Side effects are those of the ops in its regions (scf.for, scf.if, ...)."""


class ConstantLike(Trait):
    """Materialises its ``value`` attribute; folds to it."""


class ReturnLike(Trait):
    """A terminator that passes values to the parent op (func.return, scf.yield)."""


# --- operations -------------------------------------------------------------


class Operation:
    name: ClassVar[str] = "<abstract>"
    traits: ClassVar[frozenset] = frozenset()
    # Derived from ``traits`` for fast checks on hot paths.
    is_terminator: ClassVar[bool] = False
    is_pure: ClassVar[bool] = False
    is_commutative: ClassVar[bool] = False
    summary: ClassVar[str] = ""

    __slots__ = (
        "operands", "_uses", "results", "attributes", "successors", "_succ_uses",
        "regions", "parent", "prev", "next", "loc", "__weakref__",
    )

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        traits = cls.traits
        cls.is_terminator = Terminator in traits
        cls.is_pure = Pure in traits
        cls.is_commutative = Commutative in traits
        if "name" in cls.__dict__:
            from . import registry

            registry.register(cls)

    def __init__(
        self,
        operands: Sequence[Value] = (),
        result_types: Sequence[Type] = (),
        attributes: dict[str, Attribute] | None = None,
        successors: Sequence[Block] = (),
        regions: Sequence[Region] = (),
        loc: Location = UNKNOWN,
        result_names: Sequence[str | None] | None = None,
    ):
        # Explicit loops rather than comprehensions, and no list for what is empty (most ops
        # have no successors and no regions): this runs once per op of every parsed module.
        self.operands = operands = list(operands)
        uses = []
        i = 0
        for v in operands:
            uses.append(Use(v, self, i))
            i += 1
        self._uses = uses
        results = []
        if result_names is None:
            i = 0
            for t in result_types:
                results.append(OpResult(t, self, i))
                i += 1
        else:
            for i, (t, n) in enumerate(zip(result_types, result_names)):
                results.append(OpResult(t, self, i, n))
        self.results = results
        self.attributes = attributes if attributes is not None else {}
        if successors:
            self.successors = list(successors)
            self._succ_uses = [_block_use(b, self, i) for i, b in enumerate(self.successors)]
        else:
            self.successors = _NONE
            self._succ_uses = _NONE
        if regions:
            self.regions = list(regions)
            for r in self.regions:
                r.parent = self
        else:
            self.regions = _NONE
        self.parent: Block | None = None
        self.prev: Operation | None = None
        self.next: Operation | None = None
        self.loc = loc

    # -- operands and results ------------------------------------------------

    @property
    def result(self) -> OpResult:
        """The single result of a one-result op."""
        if len(self.results) != 1:
            raise ValueError(f"'{self.name}' has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def result_types(self) -> list[Type]:
        return [r.type for r in self.results]

    @property
    def operand_types(self) -> list[Type]:
        return [v.type for v in self.operands]

    def set_operand(self, index: int, value: Value) -> None:
        use = self._uses[index]
        if use.value is value:
            return
        use.unlink()
        self.operands[index] = value
        self._uses[index] = Use(value, self, index)

    def set_operands(self, values: Sequence[Value]) -> None:
        for use in self._uses:
            use.unlink()
        self.operands = list(values)
        self._uses = [Use(v, self, i) for i, v in enumerate(self.operands)]

    def set_successor(self, index: int, block: Block) -> None:
        self._succ_uses[index].unlink()
        self.successors[index] = block
        self._succ_uses[index] = _block_use(block, self, index)

    def set_successors(self, blocks: Sequence[Block]) -> None:
        for use in self._succ_uses:
            use.unlink()
        self.successors = list(blocks)
        self._succ_uses = [_block_use(b, self, i) for i, b in enumerate(self.successors)]

    def drop_all_references(self) -> None:
        """Unlink every operand and successor use (and those of nested ops)."""
        for use in self._uses:
            use.unlink()
        for use in self._succ_uses:
            use.unlink()
        self._uses = []
        self.operands = []
        self._succ_uses = []
        self.successors = []
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    op.drop_all_references()

    # -- traits ---------------------------------------------------------------

    @classmethod
    def has_trait(cls, trait: type[Trait]) -> bool:
        return trait in cls.traits

    def is_registered(self) -> bool:
        return True

    # -- position in the IR ------------------------------------------------------

    @property
    def parent_region(self) -> Region | None:
        return self.parent.parent if self.parent is not None else None

    @property
    def parent_op(self) -> Operation | None:
        region = self.parent_region
        return region.parent if region is not None else None

    def ancestors(self) -> Iterator[Operation]:
        op = self.parent_op
        while op is not None:
            yield op
            op = op.parent_op

    def is_ancestor_of(self, other: Operation) -> bool:
        return any(a is self for a in other.ancestors())

    def walk(self) -> Iterator[Operation]:
        """This op and every op nested in it, pre-order; safe against erasing the current op.

        An explicit stack of iterators rather than nested generators: any depth of
        nesting walks without growing Python's stack (everything builds on walk).
        """
        yield self
        stack = [_nested_ops(self)]
        while stack:
            op = next(stack[-1], None)
            if op is None:
                stack.pop()
                continue
            yield op
            if op.regions:  # looked at after the caller has seen (and maybe erased) op
                stack.append(_nested_ops(op))

    def erase(self) -> None:
        """Remove from the block and drop all references.  Results must be unused."""
        for r in self.results:
            if r.has_uses:
                raise IRError(f"cannot erase '{self.name}': result still has uses", self.loc)
        self.drop_all_references()
        if self.parent is not None:
            self.parent.remove(self)

    def detach(self) -> Operation:
        if self.parent is not None:
            self.parent.remove(self)
        return self

    def move_before(self, other: Operation) -> None:
        self.detach()
        other.parent.insert_before(self, other)

    def move_after(self, other: Operation) -> None:
        self.detach()
        other.parent.insert_after(self, other)

    # -- hooks with defaults -------------------------------------------------

    def verify_op(self) -> None:
        """Op-specific checks beyond the uniform ones; raise IRError."""

    def fold(self, constants: list[Attribute | None]) -> list[Attribute | Value] | None:
        """Fold given the constant value (or None) of each operand."""
        return None

    @classmethod
    def canonicalization_patterns(cls) -> Sequence:
        return ()

    def error(self, message: str) -> IRError:
        return IRError(f"'{self.name}' op {message}", self.loc)

    def clone(self, value_map: dict | None = None, block_map: dict | None = None) -> Operation:
        """A deep copy; operands and successors are remapped through the maps (and extend them)."""
        value_map = {} if value_map is None else value_map
        block_map = {} if block_map is None else block_map
        if not self.regions:
            return self._clone_unpatched(value_map, block_map)
        from .nesting import deep_stack

        with deep_stack():  # the copy recurses once per nested region
            new = self._clone_unpatched(value_map, block_map)
            if new.regions:
                from .block import remap_forward_references

                remap_forward_references(new.walk(), value_map, block_map)
        return new

    def _clone_unpatched(self, value_map: dict, block_map: dict) -> Operation:
        """The copy, with uses of values defined later in the copied regions (phis,
        forward branches) still pointing at the originals: the caller patches them once.

        It fills the slots that ``Operation.__init__`` fills, directly: cloning is the hot path
        of ``Explorer.suggest`` and ``apply`` (a clone per step), and this is ~1.5x faster."""
        new = object.__new__(type(self))
        get = value_map.get
        operands = [get(v, v) for v in self.operands]
        new.operands = operands
        new._uses = [Use(v, new, i) for i, v in enumerate(operands)]
        results = []
        for r in self.results:
            result = OpResult(r.type, new, r.index, r.name_hint)
            value_map[r] = result
            results.append(result)
        new.results = results
        new.attributes = dict(self.attributes)
        if self.successors:
            successors = [block_map.get(b, b) for b in self.successors]
            new.successors = successors
            new._succ_uses = [_block_use(b, new, i) for i, b in enumerate(successors)]
        else:
            new.successors = []
            new._succ_uses = []
        new.regions = []
        new.parent = new.prev = new.next = None
        new.loc = self.loc
        if type(self) is UnregisteredOp:
            new.name = self.name
        if self.regions:
            from .block import Region

            for region in self.regions:
                inner = Region()
                region.clone_blocks_into(inner, value_map, block_map)
                inner.parent = new
                new.regions.append(inner)
        return new

    def __repr__(self) -> str:
        from .printer import print_op

        try:
            return print_op(self)
        except Exception:  # noqa: BLE001 - repr must never fail while debugging
            return f"<{self.name} at {self.loc}>"

    __str__ = __repr__


class UnregisteredOp(Operation):
    """An op of no known dialect, kept as-is (parsed only with ``allow_unregistered``)."""

    __slots__ = ("name",)

    def is_registered(self) -> bool:
        return False


# The successors and regions of the many ops that have none: one shared empty tuple
# rather than two lists per op (fewer objects to allocate and for the garbage collector to
# scan).  Whatever gives an op successors or regions assigns a new list.
_NONE: tuple = ()

# A successor slot is a use of a block, linked into the block's use list exactly
# as an operand is linked into its value's.
_block_use = Use


def _nested_ops(op: Operation) -> Iterator[Operation]:
    """The ops directly inside ``op``'s regions, lazily (so edits during a walk are seen)."""
    for region in op.regions:
        for block in region.blocks:
            yield from block.ops
