"""The Pygments lexer for .ir text (irc/highlight.py): it tokenises every example and every
FileCheck file (invalid ones included) without an Error token, is found by Pygments through
its entry point, and colours what matters (values, blocks, symbols, op names, types)."""

from pathlib import Path

import pytest

pygments = pytest.importorskip("pygments")
from pygments.token import Error, Keyword, Name  # noqa: E402

from irc.highlight import IrLexer, highlight_html, highlight_terminal  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([*ROOT.glob("examples/*.ir"), *ROOT.glob("tests/filecheck/*.ir")])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_error_tokens(path):
    text = path.read_text()
    tokens = list(IrLexer().get_tokens_unprocessed(text))
    errors = [(text.count("\n", 0, pos) + 1, value) for pos, kind, value in tokens if kind is Error]
    assert not errors, f"{path.name}: error tokens at (line, text) {errors[:5]}"
    assert "".join(value for _, _, value in tokens) == text  # nothing lost or invented


def test_an_error_token_would_be_seen():
    """The check above can fail: a character irc's language does not have is an Error token."""
    assert any(kind is Error for _, kind, _ in IrLexer().get_tokens_unprocessed("%x = ` ;"))


def test_token_kinds():
    text = ("func.func @f(%a: tensor<4x?xf32>) -> i64 {\n^entry:\n"
            "  %i = cf.phi [%z, ^entry] : i64  // a comment\n}\n")
    kinds = {value: kind for _, kind, value in IrLexer().get_tokens_unprocessed(text)}
    assert kinds["%a"] is Name.Variable and kinds["%i"] is Name.Variable
    assert kinds["^entry"] is Name.Label
    assert kinds["@f"] is Name.Function
    assert kinds["cf.phi"] is Name.Builtin and kinds["func.func"] is Name.Builtin
    assert kinds["tensor"] is Keyword.Type and kinds["f32"] is Keyword.Type and kinds["i64"] is Keyword.Type
    assert kinds["// a comment"] in pygments.token.Comment


def test_registered_as_an_entry_point():
    from pygments.lexers import get_lexer_by_name, get_lexer_for_filename

    assert isinstance(get_lexer_by_name("irc-ir"), IrLexer)
    assert isinstance(get_lexer_for_filename("prog.ir"), IrLexer)


def test_html_and_terminal_output():
    text = "%x = arith.addi %a, %b : i64"
    html = highlight_html(text)
    assert "style=" in html and "arith.addi" in html and "<span" in html
    assert "\x1b[" in highlight_terminal(text)


def test_import_irc_does_not_import_pygments_or_prompt_toolkit():
    import subprocess
    import sys

    code = ("import sys, irc; m = irc.parse('func.func @f() { func.return }'); "
            "print([n for n in ('pygments', 'prompt_toolkit', 'graphviz') if n in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_module_repr_html():
    import irc

    m = irc.parse("func.func @f(%a: i64) -> i64 {\n  func.return %a : i64\n}\n")
    html = m._repr_html_()
    assert "func.return" in html and "<span" in html


def test_module_repr_html_without_pygments(monkeypatch):
    import sys

    import irc

    monkeypatch.setitem(sys.modules, "irc.highlight", None)  # import fails as if Pygments were absent
    m = irc.parse("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                  "  func.return %a : tensor<4xf32>\n}\n")
    html = m._repr_html_()
    assert html.startswith("<pre>") and "tensor&lt;4xf32&gt;" in html
