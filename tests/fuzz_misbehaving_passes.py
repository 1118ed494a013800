"""Test-only passes that misbehave the ways a fuzz campaign must survive.

Imported only by the fuzz worker processes that ``tests/test_fuzz.py`` starts
(``run_campaign(imports=...)``), never by the test process itself, so the passes
stay out of the registry every other test sees.
"""

import numpy as np

import irc
from irc.passmanager import Pass

SPIN = "func.func @spin() {\n^entry:\n  cf.br ^loop\n^loop:\n  cf.br ^loop\n}\n"


class HangInNativeCode(Pass):
    """Test only: run a JIT-compiled infinite loop, which no Python-level alarm interrupts."""

    name = "test-hang-native"

    def run(self, module, stats):
        irc.compile(irc.parse(SPIN), opt_level=0, cache=False).spin()


class AllocateTooMuch(Pass):
    """Test only: allocate 8 GiB (past any sensible --memory-limit)."""

    name = "test-allocate"

    def run(self, module, stats):
        np.ones(2**33, dtype=np.uint8)


class Segfault(Pass):
    """Test only: read address 0, which kills the process with SIGSEGV (as broken compiled code would)."""

    name = "test-segfault"

    def run(self, module, stats):
        import ctypes

        ctypes.string_at(0)
