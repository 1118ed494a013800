"""Device-specific code generation and execution.  Only this package imports llvmlite.

    exe = irc.compile(module, target="cpu", opt_level=2)
    exe.gcd(10, 4)          # or exe["gcd"](10, 4)
"""

from __future__ import annotations

from .executable import Executable, compile  # noqa: A004 - irc.compile is the public name

__all__ = ["Executable", "compile"]
