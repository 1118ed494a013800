"""The Python front end: plain numpy functions traced into irc's graph-level IR.

``irc.jit`` (jit.py) traces a function through the ``Tracer`` (tracer.py) that numpy's
dispatch protocols call (numpy_functions.py), compiles it and caches one specialisation
per signature; ``irc.grad``, ``value_and_grad``, ``jvp`` and ``vjp`` (transforms.py)
apply the grad/vjp/jvp passes to a traced function; ``irc.cond``, ``fori_loop`` and
``while_loop`` (control.py) build scf ops.  Every op carries the user's line
(locations.py).  See docs/frontend.md.
"""

from . import numpy_functions  # noqa: F401 - gives Tracer its operators and methods
from .control import cond, fori_loop, while_loop
from .jit import Jitted, RetraceWarning, Traced, jit
from .symbolic import function, gradients, var
from .tracer import Tracer, TracerError
from .transforms import grad, jvp, value_and_grad, vjp

__all__ = ["Jitted", "RetraceWarning", "Traced", "Tracer", "TracerError", "cond", "fori_loop", "function", "grad",
           "gradients", "jit", "jvp", "value_and_grad", "var", "vjp", "while_loop"]
