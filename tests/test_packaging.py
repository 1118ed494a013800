"""pyproject.toml lists packages by hand (dialects/, passes/, runtime/ are mapped into
``irc``); this fails when a new subpackage is missing, which a plain ``pip install .``
would otherwise only reveal as a ModuleNotFoundError on a user's machine."""

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"irc": "irc", "dialects": "irc.dialects", "passes": "irc.passes", "runtime": "irc.runtime"}


def test_every_subpackage_is_installed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_grammar_is_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "*.lark" in config["tool"]["setuptools"]["package-data"]["irc"]
