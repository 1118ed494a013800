"""Mutations of program text, as real typing mistakes make them: for parser and verifier fuzzing.

Characters and tokens are deleted, duplicated, swapped or replaced, pieces of
the language are spliced in (so mutants get past the lexer and reach deeper
code), and text is truncated.  The mutators take a *chooser* - anything with
``choice(seq)`` and ``integer(lo, hi)`` (inclusive) - so hypothesis
(``tests/test_parser_fuzz.py``) and a plain ``random.Random``
(``irc.testing.parser_fuzz``) drive the same code.
"""

from __future__ import annotations

import random
import re
from typing import Protocol

TOKEN = re.compile(r"%[\w#:]+|\^\w+|@\w+|[\w.]+|\S")
SPLICES = ["%", "^", "@", ":", ",", "(", ")", "{", "}", "[", "]", "<", ">", "=", "->", "x", "?", "0x7FC00000",
           "-1", "0", "1.5", "i1", "i64", "index", "f32", "memref<?xi64>", "tensor<2x?xf32>", "cf.phi",
           "cf.br", "scf.yield", "func.return", "arith.addi", "\"arith.addi\"", "dense<1>", "true", "\n", " ",
           "//", "^bb0(%x: i64):", "%a#1", "%r:2 ="]


class Chooser(Protocol):
    def choice(self, seq): ...

    def integer(self, lo: int, hi: int) -> int: ...


class RandomChooser:
    """A chooser over ``random.Random``."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def choice(self, seq):
        return self.rng.choice(seq)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


def mutate(c: Chooser, text: str) -> str:
    """One to four mutations of ``text``."""
    for _ in range(c.integer(1, 4)):
        text = c.choice([char_mutation, token_mutation, truncation])(c, text)
    return text


def char_mutation(c: Chooser, text: str) -> str:
    if not text:
        return c.choice(SPLICES)
    i = c.integer(0, len(text) - 1)
    kind = c.choice(["delete", "duplicate", "swap", "insert", "replace"])
    if kind == "delete":
        return text[:i] + text[i + 1:]
    if kind == "duplicate":
        return text[:i] + text[i] + text[i:]
    if kind == "swap" and i + 1 < len(text):
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    ch = c.choice(SPLICES + [chr(c.integer(0, 0x10FFFF))])
    return text[:i] + ch + text[i + (kind == "replace"):]


def token_mutation(c: Chooser, text: str) -> str:
    spans = [m.span() for m in TOKEN.finditer(text)]
    if len(spans) < 2:
        return text
    a, b = sorted((c.integer(0, len(spans) - 1), c.integer(0, len(spans) - 1)))
    (s1, e1), (s2, e2) = spans[a], spans[b]
    kind = c.choice(["delete", "duplicate", "swap", "replace", "move"])
    if kind == "delete":
        return text[:s1] + text[e1:]
    if kind == "duplicate":
        return text[:e1] + " " + text[s1:e1] + text[e1:]
    if kind == "swap" and a != b:
        return text[:s1] + text[s2:e2] + text[e1:s2] + text[s1:e1] + text[e2:]
    if kind == "move":
        return text[:s2] + text[s1:e1] + " " + text[s2:]
    return text[:s1] + c.choice(SPLICES) + text[e1:]


def truncation(c: Chooser, text: str) -> str:
    return text[: c.integer(0, len(text))]
