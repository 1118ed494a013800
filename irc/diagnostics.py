"""Source locations and the one error type users see.

Every diagnostic irc reports about a program is an ``IRError``: a message, a
location, and optional notes at related locations.  Printed, it reads like a
compiler's error::

    prog.ir:12:7: error: use of undefined value '%x'
      %y = arith.addi %x, %c1 : i64
                      ^
    prog.ir:3:3: note: ...

The source text is kept by ``SourceFile`` so that a location can show its line
and caret long after parsing.  Locations are small and created once per op.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class SourceFile:
    """The text of one parsed input, kept so diagnostics can quote it."""

    __slots__ = ("name", "text", "_lines")

    def __init__(self, name: str, text: str):
        self.name = name
        self.text = text
        self._lines: list[str] | None = None

    def line(self, number: int) -> str:
        """The 1-based source line ``number`` without its newline ('' if absent)."""
        if self._lines is None:
            self._lines = self.text.splitlines()
        if 1 <= number <= len(self._lines):
            return self._lines[number - 1]
        return ""


class Location:
    """A 1-based line and column in a source file, or unknown."""

    __slots__ = ("source", "line", "column")

    def __init__(self, source: SourceFile | None, line: int, column: int):
        self.source = source
        self.line = line
        self.column = column

    @property
    def filename(self) -> str:
        return self.source.name if self.source else "<unknown>"

    def __repr__(self) -> str:
        return f"{self.filename}:{self.line}:{self.column}"

    def render(self, severity: str, message: str) -> str:
        """``file:line:col: severity: message``, then the source line and a caret."""
        head = f"{self.filename}:{self.line}:{self.column}: {severity}: {message}"
        if self.source is None:
            return head
        text = self.source.line(self.line)
        if not text:
            return head
        caret = "".join("\t" if ch == "\t" else " " for ch in text[: self.column - 1]) + "^"
        return f"{head}\n{text}\n{caret}"


UNKNOWN = Location(None, 0, 0)


@dataclass
class Note:
    location: Location
    message: str


@dataclass
class IRError(Exception):
    """A user-facing error about a program, pointing into its source.

    Raised by the parser, the verifier, the interpreter and the passes.  The CLI
    prints ``str(error)`` and exits 1; the Python API lets it propagate.
    """

    message: str
    location: Location = UNKNOWN
    notes: list[Note] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def note(self, location: Location, message: str) -> IRError:
        self.notes.append(Note(location, message))
        return self

    def __str__(self) -> str:
        if self.location is UNKNOWN or self.location.source is None and self.location.line == 0:
            parts = [f"error: {self.message}"]
        else:
            parts = [self.location.render("error", self.message)]
        for n in self.notes:
            if n.location.line == 0:
                parts.append(f"note: {n.message}")
            else:
                parts.append(n.location.render("note", n.message))
        return "\n".join(parts)

    def __hash__(self) -> int:
        return id(self)


MAX_ERRORS = 20  # diagnostics reported from one input before stopping, as compilers do


class IRErrors(IRError):
    """Several diagnostics about one input, in source order.

    The first is this error's own message and location (so code that looks at one
    error sees the first problem); ``errors`` holds them all and ``str`` prints
    them all, then says so if more were left unreported.
    """

    def __init__(self, errors: list[IRError], truncated: bool = False):
        first = errors[0]
        super().__init__(first.message, first.location, list(first.notes))
        self.errors = list(errors)
        self.truncated = truncated

    def __str__(self) -> str:
        parts = [IRError.__str__(e) for e in self.errors]
        if self.truncated:
            parts.append(f"irc: error: too many errors; stopped after the first {len(self.errors)}")
        return "\n".join(parts)

    __hash__ = IRError.__hash__


def in_source_order(errors: list[IRError]) -> list[IRError]:
    """``errors`` sorted by file, line and column (errors without a location last), stable."""
    def key(e: IRError):
        loc = e.location
        return (loc.line == 0, loc.filename, loc.line, loc.column)

    return sorted(errors, key=key)


def raise_collected(errors: list[IRError], truncated: bool = False) -> None:
    """Raise the one error, or all of them as ``IRErrors``; nothing if there are none."""
    if not errors:
        return
    errors = in_source_order(errors)
    if len(errors) == 1 and not truncated:
        raise errors[0]
    raise IRErrors(errors, truncated)


class ExecutionError(IRError):
    """A runtime fault of a running program (division by zero, out of bounds...), at the op."""


class InterpreterError(ExecutionError):
    """A runtime fault found by the reference interpreter."""
