"""Lowering of tensor-level ops to loops over buffers (used by ``tensor-to-loops``).

Loop nests are built with the public ``irc.builder.Builder`` (``for_``, ``nest``, ``load``,
``store``, ``flat`` and ``V`` operators for index arithmetic); ``bufferize.py`` turns a
tensor function into one over memrefs; one module per family of ops says how
that family becomes ``scf.for`` nests of scalar ``arith``/``math`` and
``memref.load``/``memref.store``, registered in ``LOWERINGS`` by op name.
"""

LOWERINGS: dict = {}
"""op name -> ``lower(ctx, op, inputs, output)``; see ``bufferize.LoweringContext``."""


def lowering(*names: str):
    """Register the decorated function as the loop lowering of the ops ``names``."""

    def register(fn):
        for name in names:
            LOWERINGS[name] = fn
        return fn

    return register
