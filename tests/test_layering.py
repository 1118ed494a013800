"""The architecture's one hard rule: only runtime/ knows a device exists.

Nothing under irc/, dialects/ or passes/ may import llvmlite or pycuda, not
even lazily inside a function; the scan reads the source with ``ast`` so that
imports in any scope, ``importlib.import_module("...")`` and ``__import__``
calls are all seen.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["irc", "dialects", "passes"]
FORBIDDEN = {"llvmlite", "pycuda"}


def device_imports(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, module) for every import of a forbidden package in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if callee in ("import_module", "__import__"):
                names = [node.args[0].value]
        found += [(node.lineno, n) for n in names if n.split(".")[0] in FORBIDDEN]
    return found


def _sources():
    for layer in LAYERS:
        yield from sorted((ROOT / layer).rglob("*.py"))


def test_layers_exist():
    assert all((ROOT / layer).is_dir() for layer in LAYERS)
    assert len(list(_sources())) > 10


@pytest.mark.parametrize("path", list(_sources()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_device_imports_outside_runtime(path):
    offenders = device_imports(path.read_text(), str(path))
    assert not offenders, f"{path.relative_to(ROOT)} imports a device package: {offenders}"


@pytest.mark.parametrize("source", [
    "import llvmlite.binding as llvm",
    "from pycuda import driver",
    "def f():\n    import pycuda.autoinit",
    "import importlib\nimportlib.import_module('llvmlite.ir')",
    "__import__('pycuda.driver')",
])
def test_the_scan_sees_every_import_form(source):
    assert device_imports(source)


def test_the_scan_ignores_lookalikes():
    assert not device_imports("import llvmlite_helpers\nfrom .pycuda import x\nname = 'llvmlite'")
