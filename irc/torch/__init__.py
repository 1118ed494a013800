"""irc as a ``torch.compile`` backend: ``torch.compile(model, backend="irc")``.

The backend is registered by name through the ``torch_dynamo_backends`` entry point
(pyproject.toml) and is ``irc.torch.backend`` here.  Dynamo hands it an FX graph;
``aot_autograd`` lowers the graph to aten ops (after the decompositions in
``graph.DECOMPOSITIONS``) and, when gradients are needed, splits it into a forward and a
backward graph.  Each of those becomes one irc function (``convert.py``, through
``irc.builder.Builder``), compiled with ``irc.compile`` per input shapes and called on
the torch CPU tensors' memory without copies (``runtime.py``).

A graph irc cannot take (an aten op without a conversion, or a form of one it does not
compile: 3-d convolutions, ``ceil_mode`` pooling...) runs in torch instead, with one
warning line naming the op and why (``IrcFallbackWarning``).

Nothing here imports torch until the backend is called, so ``import irc`` stays free of it.
See docs/torch.md.
"""

from __future__ import annotations

import warnings


class IrcFallbackWarning(UserWarning):
    """A graph (or part of one) that torch runs instead of irc; the message says which op and why."""


def backend(gm, example_inputs, options: dict | None = None, **kwargs):
    """The ``torch.compile`` backend: ``torch.compile(model, backend=irc.torch.backend)`` or
    ``backend="irc"``.  ``options`` (``torch.compile(..., options={...})``) go to
    ``irc.compile`` (``threads``, ``opt_level``...)."""
    from .runtime import make_backend

    return make_backend({**(options or {}), **kwargs})(gm, example_inputs)


def warn_fallback(what: str, why: str) -> None:
    """The one line that says a graph runs in torch, not irc."""
    # warn_explicit at a location without source text: the warning prints as one line
    warnings.warn_explicit(f"{what} runs in torch: {why}", IrcFallbackWarning, "irc.torch", 0,
                           module="irc.torch")


__all__ = ["IrcFallbackWarning", "backend"]
