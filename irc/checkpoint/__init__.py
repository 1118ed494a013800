"""Checkpoints: a traced model and its parameters in one file that loading never executes.

``irc.save(path, fn, params, *example_inputs)`` traces ``fn(params, *inputs)`` with ``irc.jit``
and writes one file; ``irc.load(path)`` gives a ``Model``: ``model(*inputs)`` runs the compiled
graph with the parameters bound, ``model.params`` are the parameters (read-only numpy arrays
mapped from the file), ``model.module`` the graph.

The file is in the safetensors layout, so any safetensors reader sees the parameters::

    bytes 0..7      N: the header's length, unsigned 64-bit little-endian
    bytes 8..8+N    the header: a JSON object (UTF-8), padded with spaces to a multiple of 8
    the rest        the parameters' bytes, little-endian, C order, back to back

The header maps each parameter's name to ``{"dtype", "shape", "data_offsets"}`` and holds
irc's part in ``"__metadata__"``, a map of strings: the module as irc text (readable, and the
only code in the file), the entry function, irc's version and the format's, and the signature
(the argument and result tree structures, parameter names, input dtypes and shapes).

Why not pickle, as ``torch.save`` does: unpickling runs whatever code the file names.  Here the
file is data: the reader checks every length and offset against the file's size before it maps
or allocates anything, parses the IR with irc's parser (which builds ops, never runs Python
from the text) and verifies it, and refuses anything else with a ``CheckpointError`` that
names the file and what is wrong.  docs/checkpoints.md has the byte-level layout and the
threat model.
"""

from .format import DTYPES, FORMAT, FORMAT_VERSION, MAX_HEADER, CheckpointError, InputSpec
from .model import Model, load
from .writer import save, write

__all__ = ["DTYPES", "FORMAT", "FORMAT_VERSION", "MAX_HEADER", "CheckpointError", "InputSpec", "Model", "load",
           "save", "write"]
