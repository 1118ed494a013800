"""irc: a multi-level compiler for tensor programs.

    import irc
    m = irc.parse(text)                       # or irc.parse_file("prog.ir")
    m = irc.passes.run(m, "canonicalize,dce")
    irc.interpret(m, "main", 3, 4)
"""

from __future__ import annotations

from .diagnostics import IRError, Location
from .module import ModuleOp
from .parser import parse, parse_file

__version__ = "0.1.0"
Module = ModuleOp

__all__ = ["IRError", "Location", "Module", "ModuleOp", "parse", "parse_file", "__version__"]
