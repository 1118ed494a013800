"""A Pygments lexer for irc's text format (``.ir``), and the helpers that colour text with it.

Registered as the Pygments lexer ``irc-ir`` (also ``ir``; an entry point in pyproject.toml), so
``pygmentize -l irc-ir prog.ir`` (or any ``*.ir`` file) and Markdown renderers that use Pygments colour ``.ir``
text; the REPL and ``ModuleOp._repr_html_`` use it directly.  Pygments is imported
only here, and this module only when something is coloured: ``import irc`` does not pay
for it.

The lexer is regular-expression based and never fails: text irc would reject (a typo in
an op name) is still coloured token by token, as an editor needs.
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Whitespace,
)

_ID = r"[A-Za-z0-9_$.\-]+"
_SHAPED = r"(?:tensor|memref|vector)"


class IrLexer(RegexLexer):
    """irc's SSA text: ``%values``, ``^blocks``, ``@symbols``, ``dialect.op`` names, types."""

    name = "irc"
    aliases = ["irc-ir", "ir"]  # "irc" is Pygments' own lexer of IRC chat logs
    filenames = ["*.ir"]
    mimetypes = ["text/x-irc"]
    url = "https://github.com/irc"  # the project's home; Pygments asks for one

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r'"(?:[^"\\\n]|\\.)*"', String),
            (r'"[^\n]*', String),  # unterminated: irc reports it, an editor colours it
            (r"%" + _ID + r"(?::\d+|#\d+)?", Name.Variable),
            (r"\^" + _ID, Name.Label),
            (r'@"(?:[^"\\]|\\.)*"', Name.Function),
            (r"@" + _ID, Name.Function),
            (r"#" + _ID, Name.Constant),  # attribute aliases, #loc
            (r"(" + _SHAPED + r")(<)", bygroups(Keyword.Type, Punctuation), "shape"),
            (r"(?:i\d+|ui\d+|si\d+|f16|bf16|f32|f64|f80|f128|index|none)\b", Keyword.Type),
            # op names: dialect.op (and the generic form's quoted name is a String above)
            (r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z0-9_.]+", Name.Builtin),
            (r"(dense|array|loc|true|false|unit|to|step|iter_args|module|attributes|private|"
             r"public|fastmath|overflow|weights|ins|outs|do)\b", Keyword),
            (r"[A-Za-z_][A-Za-z0-9_$]*", Name),
            (r"0x[0-9A-Fa-f]+", Number.Hex),
            (r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)", Number.Float),
            (r"[-+]?\d+\.\d*", Number.Float),
            (r"[-+]?\d+", Number.Integer),
            (r"->|=|\*|\+|-|\?", Operator),
            (r"[(){}\[\],:<>!|]", Punctuation),
            (r"\\", Text),
        ],
        "shape": [  # tensor<4x?xf32>, memref<8xf32, gpu>, nested tensor<...<...>>
            (r">", Punctuation, "#pop"),
            (r"(\d+|\?)(x)", bygroups(Number.Integer, Punctuation)),
            (r"(?:i\d+|f16|bf16|f32|f64|index)\b", Keyword.Type),
            (r"(" + _SHAPED + r")(<)", bygroups(Keyword.Type, Punctuation), "#push"),
            (r"[A-Za-z_][A-Za-z0-9_]*", Name.Attribute),
            (r"\d+", Number.Integer),
            (r"[,:=\[\]()\s]+", Punctuation),
            (r"[-+*?]", Operator),
        ],
    }


def highlight_terminal(text: str) -> str:
    """``text`` with ANSI colours for a terminal (256 colours)."""
    from pygments import highlight
    from pygments.formatters import Terminal256Formatter

    return highlight(text, IrLexer(), Terminal256Formatter(style="default"))


def highlight_html(text: str) -> str:
    """``text`` as a self-contained HTML ``<div>`` with inline styles (Jupyter strips classes'
    style sheets, so the colours must travel with the markup)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    return highlight(text, IrLexer(), HtmlFormatter(noclasses=True, nobackground=True))
