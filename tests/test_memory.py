"""Parsing in a loop must not accumulate memory: the IR is cyclic (ops point at their
blocks and back), so it is freed by the cyclic collector, which irc pauses during bulk
work; resuming it must leave garbage collectible (a gc.freeze()/unfreeze() shortcut once
kept every parsed module alive)."""

import gc
import weakref
from pathlib import Path

import irc

TEXT = (Path(__file__).resolve().parent.parent / "examples" / "sieve.ir").read_text()


def test_parsed_modules_are_freed_without_explicit_collection():
    refs = []
    for _ in range(3000):
        refs.append(weakref.ref(irc.parse(TEXT)))
    alive = sum(r() is not None for r in refs)
    assert alive < 1000, f"{alive} of 3000 dropped modules are still alive"


def test_a_dropped_module_is_freed_by_a_collection():
    ref = weakref.ref(irc.parse(TEXT))
    gc.collect()
    assert ref() is None
