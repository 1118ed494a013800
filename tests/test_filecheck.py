"""Runs the FileCheck tests under tests/filecheck through lit (one per pass, plus
round trip and the *-invalid.ir diagnostics files); fails with lit's report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lit", reason="lit is not installed (pip install -e '.[dev]')")
pytest.importorskip("filecheck", reason="filecheck is not installed (pip install -e '.[dev]')")

FILECHECK_DIR = Path(__file__).parent / "filecheck"
# lit has no ``__main__`` module; this is what its console script runs.
LIT = [sys.executable, "-c", "import sys; from lit.main import main; sys.argv[0] = 'lit'; main()"]


def test_filecheck_directory_has_tests():
    names = {p.name for p in FILECHECK_DIR.glob("*.ir")}
    for required in ("canonicalize.ir", "dce.ir", "roundtrip.ir", "parse-invalid.ir", "verify-invalid.ir"):
        assert required in names


def test_lit_filecheck_suite():
    result = subprocess.run([*LIT, "-v", "--no-progress-bar", str(FILECHECK_DIR)],
                            capture_output=True, text=True, timeout=600)
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"lit failed:\n{report}"
    assert "Passed" in report
