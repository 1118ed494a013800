"""Writing a checkpoint: check that the graph fits its arguments and reads back, then stream
the header and the parameters into a temporary file that replaces the target atomically."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ..pytree import TreeDef, check_same, flatten, leaf_paths
from .format import (
    DTYPES,
    FORMAT,
    FORMAT_VERSION,
    InputSpec,
    dtype_name,
    one_line,
    signature_problems,
)


def save(path, fn, params, *example_inputs) -> None:
    """Trace ``fn(params, *example_inputs)`` with ``irc.jit`` and write it and ``params`` to ``path``.

    ``fn`` may also be what ``irc.jit(fn).trace(...)`` returned (anything with ``module``,
    ``entry``, ``in_tree`` and ``out_tree``).  See ``write``.
    """
    from ..checks import check_type

    check_type("irc.save", "path", path, (str, os.PathLike))
    if all(hasattr(fn, a) for a in ("module", "entry", "in_tree", "out_tree")):
        traced = fn
    elif callable(fn):
        import irc

        jit = getattr(irc, "jit", None)
        if jit is None:
            try:
                from . import jit as jit  # the front end, where it exists
            except ImportError:
                jit = None
        if jit is not None and not callable(jit):
            jit = getattr(jit, "jit", None)
        if jit is None:
            raise NotImplementedError("irc.save(path, fn, ...) traces fn with irc.jit, which this irc does "
                                      "not have yet; write a traced module with irc.checkpoint.write")
        traced = jit(fn).trace(params, *example_inputs)
    else:
        raise TypeError(f"irc.save: parameter 'fn' must be a function, got {type(fn).__name__}")
    write(path, traced, params, *example_inputs)


def write(path, traced, params, *example_inputs) -> None:
    """Write ``traced`` (``module``, ``entry``, ``in_tree``, ``out_tree``: see the module
    docstring) with ``params`` to ``path``, the example inputs giving the signature.

    The file is replaced atomically (a temporary file in the same directory, flushed to disk,
    then renamed), so an interrupted save leaves an existing file as it was.  Mistakes are
    TypeError or ValueError before anything is written.
    """
    from ..checks import check_module, check_type
    from ..diagnostics import IRError
    from ..fileio import write_file
    from ..parser import parse
    from ..verifier import verify

    check_type("irc.save", "path", path, (str, os.PathLike))
    module, entry = traced.module, traced.entry
    check_module("irc.save", "traced.module", module)
    check_type("irc.save", "traced.entry", entry, str)
    check_type("irc.save", "traced.in_tree", traced.in_tree, TreeDef)
    check_type("irc.save", "traced.out_tree", traced.out_tree, TreeDef)
    leaves, tree = flatten((params, *example_inputs))
    check_same(traced.in_tree, tree, "irc.save: (params, *example_inputs)")
    param_tree = tree.children[0]
    count = param_tree.num_leaves
    names = leaf_paths(param_tree)
    if "__metadata__" in names:
        raise ValueError("irc.save: a parameter may not be named '__metadata__' (the header's own key)")
    clash = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if clash is not None:
        raise ValueError(f"irc.save: two parameters are both named '{clash}' in the checkpoint (dict keys "
                         "with dots collide with nesting); rename one")
    arrays = [_as_array(leaf, f"parameter '{name}'") for name, leaf in zip(names, leaves[:count])]
    input_tree = TreeDef("tuple", (), tree.children[1:])
    inputs = []
    for name, leaf in zip(leaf_paths(input_tree), leaves[count:]):
        a = _as_array(leaf, f"input {name}")
        inputs.append(InputSpec(name, a.dtype, a.shape))
    verify(module)
    problem = signature_problems(module, entry, names, [(a.dtype, a.shape) for a in arrays], inputs,
                                 traced.out_tree.num_leaves)
    if problem:
        raise ValueError(f"irc.save: the traced graph does not fit its arguments: {problem}")
    text = module.print()
    try:  # what is saved must load: a graph of unregistered ops, say, would not
        parse(text, "<saved module>")
    except IRError as e:
        raise ValueError(f"irc.save: the graph does not read back from its text: {one_line(e)}") from None
    import irc

    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "irc_version": irc.__version__,
        "module": text,
        "entry": entry,
        "in_tree": json.dumps(traced.in_tree.to_json()),
        "out_tree": json.dumps(traced.out_tree.to_json()),
        "params": json.dumps(names),
        "inputs": json.dumps([{"name": s.name, "dtype": dtype_name(s.dtype), "shape": list(s.shape)}
                              for s in inputs]),
    }
    header: dict[str, Any] = {"__metadata__": metadata}
    # Widest elements first: every tensor then starts at a multiple of its element size.
    order = sorted(range(count), key=lambda i: (-arrays[i].itemsize, i))
    offset, spans = 0, {}
    for i in order:
        spans[i] = (offset, offset + arrays[i].nbytes)
        offset += arrays[i].nbytes
    for i, (name, a) in enumerate(zip(names, arrays)):
        header[name] = {"dtype": dtype_name(a.dtype), "shape": list(a.shape), "data_offsets": list(spans[i])}
    encoded = json.dumps(header, separators=(",", ":")).encode("ascii")
    encoded += b" " * (-(8 + len(encoded)) % 8)  # the data starts 8-byte aligned, as safetensors pads it

    def write_to(f) -> None:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for i in order:
            _write_tensor(f, arrays[i])

    write_file(os.fspath(path), write_to, sync=True)


def _as_array(leaf, what: str) -> np.ndarray:
    """A C-contiguous little-endian array of one of ``DTYPES``, or a TypeError naming ``what``."""
    a = np.asarray(leaf)
    if dtype_name(a.dtype) is None:
        raise TypeError(f"irc.save: {what} has dtype {a.dtype}; a checkpoint holds arrays of "
                        f"{', '.join(str(d.newbyteorder('=')) for d in DTYPES.values())} only")
    return a.astype(DTYPES[dtype_name(a.dtype)], order="C", copy=False)  # 0-d stays 0-d


def _write_tensor(f, a: np.ndarray) -> None:
    if a.nbytes:
        f.write(a.reshape(-1).view(np.uint8).data)
