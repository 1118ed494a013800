"""The op registry: op name -> op class, filled as dialect modules define their ops.

An op class registers itself by defining ``name`` (see ``Operation.__init_subclass__``),
so adding an op is one class in one file.  Custom assembly forms that need their
own grammar rule (``func.func``, ``scf.for``...) register the rule's callback here
with ``@syntax_rule``, next to the op they build.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

OPS: dict[str, type] = {}
SYNTAX_RULES: dict[str, Callable] = {}
# Op classes with a ``materialize(attr)`` classmethod that builds a constant op for an
# attribute (or returns None); folding uses them to turn folded values into ops.
MATERIALIZERS: list[type] = []


def register(cls: type) -> None:
    if not isinstance(cls.__dict__.get("name"), str):
        # UnregisteredOp declares ``name`` as a slot (a descriptor, not an op name).
        return
    existing = OPS.get(cls.name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise ValueError(f"op '{cls.name}' is registered twice: {existing} and {cls}")
    OPS[cls.name] = cls


def lookup(name: str):
    return OPS.get(name)


def suggestion(name: str) -> str:
    close = difflib.get_close_matches(name, OPS.keys(), n=1, cutoff=0.75)
    return f"; did you mean '{close[0]}'?" if close else ""


def syntax_rule(rule: str):
    """Register the parser callback for grammar rule ``rule`` (a custom assembly form)."""

    def wrap(fn: Callable) -> Callable:
        SYNTAX_RULES[rule] = fn
        return fn

    return wrap


def dialects() -> dict[str, list[type]]:
    """Registered ops grouped by dialect, in definition order."""
    out: dict[str, list[type]] = {}
    for name, cls in OPS.items():
        out.setdefault(name.split(".", 1)[0], []).append(cls)
    return out
