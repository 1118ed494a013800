"""Nested Python containers of arrays ("pytrees"): flatten to a list of leaves and back.

The front end (``irc.jit``, ``irc.grad``) takes and returns parameters as nested dicts,
lists and tuples of arrays; compiled functions take flat lists of buffers.  A
``TreeDef`` is the shape of the nesting without the leaves: it is hashable (part
of a compile-cache key), compares equal for equal structures, and has a JSON form
(stored in checkpoints, so nothing is ever unpickled to rebuild it).

The order of leaves is JAX's: dict entries by sorted key, lists and tuples in
order, depth first.  ``None`` is an empty node, not a leaf.  Anything else is a
leaf.  Dict keys must be strings (they become parameter names: ``paths``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class TreeMismatch(ValueError):
    """Two pytrees (or a pytree and a TreeDef) do not have the same structure; the message
    names the path where they part."""


@dataclass(frozen=True)
class TreeDef:
    """The structure of a pytree: ``kind`` is "leaf", "none", "dict", "list" or "tuple";
    ``keys`` the sorted keys of a dict; ``children`` the sub-structures in leaf order."""

    kind: str
    keys: tuple[str, ...] = ()
    children: tuple[TreeDef, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves) -> Any:
        """The pytree of this structure with ``leaves`` in order."""
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise TreeMismatch(f"expected {self.num_leaves} leaves for {self}, got {len(leaves)}")
        it = iter(leaves)
        return self._build(it)

    def _build(self, it) -> Any:
        if self.kind == "leaf":
            return next(it)
        if self.kind == "none":
            return None
        built = [c._build(it) for c in self.children]
        if self.kind == "dict":
            return dict(zip(self.keys, built))
        return built if self.kind == "list" else tuple(built)

    def to_json(self) -> Any:
        """A JSON-serialisable form: ``"*"`` a leaf, ``null`` None, ``{"dict": {...}}``,
        ``{"list": [...]}``, ``{"tuple": [...]}``."""
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return None
        if self.kind == "dict":
            return {"dict": {k: c.to_json() for k, c in zip(self.keys, self.children)}}
        return {self.kind: [c.to_json() for c in self.children]}

    @staticmethod
    def from_json(obj: Any, depth: int = 0) -> TreeDef:
        """The inverse of ``to_json``; anything else raises TreeMismatch (the input may come
        from a file someone else wrote)."""
        if depth > 200:
            raise TreeMismatch("tree structure nested more than 200 levels deep")
        if obj == "*":
            return LEAF
        if obj is None:
            return NONE
        if isinstance(obj, dict) and len(obj) == 1:
            (kind, body), = obj.items()
            if kind == "dict" and isinstance(body, dict) and all(isinstance(k, str) for k in body):
                keys = tuple(sorted(body))
                return TreeDef("dict", keys, tuple(TreeDef.from_json(body[k], depth + 1) for k in keys))
            if kind in ("list", "tuple") and isinstance(body, list):
                return TreeDef(kind, (), tuple(TreeDef.from_json(c, depth + 1) for c in body))
        raise TreeMismatch(f"not a tree structure: {str(obj)[:80]}")

    def __str__(self) -> str:
        return _describe(self)


LEAF = TreeDef("leaf")
NONE = TreeDef("none")


def _describe(t: TreeDef) -> str:
    if t.kind == "leaf":
        return "*"
    if t.kind == "none":
        return "None"
    if t.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_describe(c)}" for k, c in zip(t.keys, t.children)) + "}"
    inner = ", ".join(_describe(c) for c in t.children)
    return f"[{inner}]" if t.kind == "list" else f"({inner}{',' if len(t.children) == 1 else ''})"


def flatten(tree: Any) -> tuple[list, TreeDef]:
    """(leaves, structure) of ``tree``."""
    leaves: list = []
    return leaves, _flatten(tree, leaves, "", 0)


def _flatten(node, leaves: list, path: str, depth: int) -> TreeDef:
    if depth > 200:
        raise TreeMismatch(f"argument{path} nests containers more than 200 levels deep")
    if node is None:
        return NONE
    if isinstance(node, dict):
        for k in node:
            if not isinstance(k, str):
                raise TreeMismatch(f"argument{path} has a dict key {k!r} that is not a string")
        keys = tuple(sorted(node))
        return TreeDef("dict", keys, tuple(_flatten(node[k], leaves, f"{path}[{k!r}]", depth + 1) for k in keys))
    if isinstance(node, (list, tuple)) and type(node) in (list, tuple):
        kind = "list" if isinstance(node, list) else "tuple"
        return TreeDef(kind, (), tuple(_flatten(c, leaves, f"{path}[{i}]", depth + 1) for i, c in enumerate(node)))
    leaves.append(node)
    return LEAF


def leaf_paths(treedef: TreeDef, prefix: str = "") -> list[str]:
    """A readable name for each leaf, in leaf order: dict keys and list positions joined by
    dots (``"layers.0.w"``); the root leaf of a bare array is ``prefix`` or ``"0"``."""
    out: list[str] = []
    _paths(treedef, prefix, out)
    return [p or "0" for p in out]


def _paths(t: TreeDef, prefix: str, out: list[str]) -> None:
    if t.kind == "leaf":
        out.append(prefix)
        return
    names = t.keys if t.kind == "dict" else [str(i) for i in range(len(t.children))]
    for name, c in zip(names, t.children):
        _paths(c, f"{prefix}.{name}" if prefix else name, out)


def check_same(expected: TreeDef, got: TreeDef, what: str) -> None:
    """Raise TreeMismatch naming the first place ``got`` differs from ``expected``."""
    where = _first_difference(expected, got, "")
    if where is not None:
        raise TreeMismatch(f"{what}{where[0]}: expected {where[1]}, got {where[2]}")


def _first_difference(a: TreeDef, b: TreeDef, path: str):
    if a.kind != b.kind or a.keys != b.keys or len(a.children) != len(b.children):
        return path, _describe(a), _describe(b)
    names = a.keys if a.kind == "dict" else range(len(a.children))
    for name, ca, cb in zip(names, a.children, b.children):
        found = _first_difference(ca, cb, f"{path}[{name!r}]")
        if found is not None:
            return found
    return None
