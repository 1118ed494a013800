"""Every .ir program in the repository round-trips: printing is a fixpoint, and the
generic form parses back to the same program.  Invalid-IR files (``*-invalid.ir``)
are split like ``--split-input-file`` and only their valid chunks are checked."""

from pathlib import Path

import pytest

import irc

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(p for folder in ("examples", "benchmarks", "tests", "docs")
               for p in (ROOT / folder).rglob("*.ir") if "Output" not in p.parts)


def _chunks(path: Path):
    text = path.read_text()
    if "--split-input-file" in text:
        return text.split("// -----\n")
    return [text]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_file_round_trips(path: Path):
    checked = 0
    for chunk in _chunks(path):
        try:
            module = irc.parse(chunk, str(path), allow_unregistered=True)
            irc.verify(module)
        except irc.IRError:
            if path.name.endswith("-invalid.ir"):
                continue  # this chunk is meant to be rejected
            raise
        text = module.print()
        assert irc.parse(text, allow_unregistered=True).print() == text, "print is not a fixpoint"
        generic = module.print(generic=True)
        assert irc.parse(generic, allow_unregistered=True).print() == text, "generic form differs"
        checked += 1
    if checked == 0:
        pytest.skip("no valid chunk in this file")


def test_the_repository_has_ir_files():
    assert len(FILES) >= 10
