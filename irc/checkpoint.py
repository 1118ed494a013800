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

from __future__ import annotations

import json
import math
import mmap
import os
import re
import stat
from dataclasses import dataclass
from typing import Any

import numpy as np

from .fileio import DEFAULT_MAX_INPUT
from .pytree import TreeDef, TreeMismatch, check_same, flatten, leaf_paths

FORMAT = "irc.checkpoint"
FORMAT_VERSION = 1
"""Raised when a change makes files that an older irc would misread; readers refuse newer."""

MAX_HEADER = DEFAULT_MAX_INPUT
"""The largest header ``load`` reads unless told otherwise: irc's input limit (fileio.py)."""

MAX_RANK = 32
MAX_ARRAY_BYTES = (1 << 63) - 1  # numpy's limit, for the sizes other than 0 too (shape [0, 2**61])

# safetensors' dtype names for the dtypes irc computes with (irc has no unsigned integers and
# numpy no bf16, so U8..U64, BF16 and the F8 kinds are refused by name).
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "I8": np.dtype("<i1"), "I16": np.dtype("<i2"), "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"), "F16": np.dtype("<f2"), "F32": np.dtype("<f4"), "F64": np.dtype("<f8"),
}
_DTYPE_NAMES = {dt.newbyteorder("="): name for name, dt in DTYPES.items()}

_META_KEYS = ("format", "format_version", "irc_version", "module", "entry", "in_tree", "out_tree",
              "params", "inputs")


class CheckpointError(ValueError):
    """A file that is not an irc checkpoint, or a damaged one; the message names the file and
    what is wrong with it.  Nothing from such a file was executed."""


# -- the signature -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    """One leaf of the example inputs: its name (leaf path in the inputs tuple), dtype, shape."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]


def _dtype_name(dtype: np.dtype) -> str | None:
    return _DTYPE_NAMES.get(np.dtype(dtype).newbyteorder("="))


def _element_dtype(t) -> np.dtype | None:
    """The numpy dtype of a tensor's or scalar's element type (None: bf16, which numpy lacks)."""
    from .types import FloatType, IntegerType, numpy_dtype

    e = t.element_type
    if isinstance(e, IntegerType) and e.width == 1:
        return np.dtype(np.bool_)
    if isinstance(e, FloatType) and e.kind == "bf16":
        return None
    try:
        return numpy_dtype(e)
    except TypeError:
        return None


def _type_accepts(t, dtype: np.dtype, shape: tuple[int, ...]) -> str | None:
    """Why an array of ``dtype`` and ``shape`` cannot be the argument of type ``t`` (None: it can).

    Tensors must match exactly (``?`` takes any size); scalars take 0-d arrays of any number
    dtype (a Python float traced as ``f32`` is stored as a float64 0-d array).
    """
    from .types import FloatType, IndexType, IntegerType, TensorType

    if isinstance(t, TensorType):
        want = _element_dtype(t)
        if want is None or want != dtype.newbyteorder("="):
            return f"has dtype {dtype} but the graph's parameter is {t}"
        if len(shape) != t.rank or any(d is not None and d != n for d, n in zip(t.shape, shape)):
            return f"has shape {list(shape)} but the graph's parameter is {t}"
        return None
    if isinstance(t, (IntegerType, IndexType, FloatType)):
        if shape != ():
            return f"has shape {list(shape)} but the graph's parameter is the scalar {t}"
        return None
    return f"is passed to a parameter of type {t}; a checkpoint's entry takes tensors and scalars only"


def _signature_problems(module, entry: str, param_names: list[str], param_arrays: list[tuple],
                        inputs: list[InputSpec], out_leaves: int) -> str | None:
    """The first way ``module``'s ``entry`` does not fit the parameters and inputs, or None."""
    func = module.lookup(entry)
    if func is None or func.name != "func.func":
        names = ", ".join(f"@{f.sym_name}" for f in module.functions) or "none"
        return f"the entry function '@{entry}' is not in the module (functions: {names})"
    if func.is_declaration:
        return f"the entry function '@{entry}' is a declaration without a body"
    ft = func.function_type
    expected = len(param_arrays) + len(inputs)
    if len(ft.inputs) != expected:
        return (f"'@{entry}' takes {len(ft.inputs)} argument(s), but the signature has {len(param_arrays)} "
                f"parameter(s) and {len(inputs)} input(s)")
    if len(ft.results) != out_leaves:
        return f"'@{entry}' returns {len(ft.results)} value(s), but the result structure has {out_leaves}"
    for name, (dtype, shape), t in zip(param_names, param_arrays, ft.inputs):
        problem = _type_accepts(t, dtype, shape)
        if problem:
            return f"parameter '{name}' {problem}"
    for spec, t in zip(inputs, ft.inputs[len(param_arrays):]):
        problem = _type_accepts(t, spec.dtype, spec.shape)
        if problem:
            return f"input {spec.name} {problem}"
    from .types import FloatType, IndexType, IntegerType, TensorType

    for t in ft.results:
        if not isinstance(t, (TensorType, IntegerType, IndexType, FloatType)) or _element_dtype(t) is None:
            return f"'@{entry}' returns a {t}; a checkpoint's entry returns tensors and scalars numpy can hold"
    return None


# -- writing -------------------------------------------------------------------------------------


def save(path, fn, params, *example_inputs) -> None:
    """Trace ``fn(params, *example_inputs)`` with ``irc.jit`` and write it and ``params`` to ``path``.

    ``fn`` may also be what ``irc.jit(fn).trace(...)`` returned (anything with ``module``,
    ``entry``, ``in_tree`` and ``out_tree``).  See ``write``.
    """
    from .checks import check_type

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
    from .checks import check_module, check_type
    from .diagnostics import IRError
    from .fileio import write_file
    from .parser import parse
    from .verifier import verify

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
    problem = _signature_problems(module, entry, names, [(a.dtype, a.shape) for a in arrays], inputs,
                                  traced.out_tree.num_leaves)
    if problem:
        raise ValueError(f"irc.save: the traced graph does not fit its arguments: {problem}")
    text = module.print()
    try:  # what is saved must load: a graph of unregistered ops, say, would not
        parse(text, "<saved module>")
    except IRError as e:
        raise ValueError(f"irc.save: the graph does not read back from its text: {_one_line(e)}") from None
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
        "inputs": json.dumps([{"name": s.name, "dtype": _dtype_name(s.dtype), "shape": list(s.shape)}
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
        header[name] = {"dtype": _dtype_name(a.dtype), "shape": list(a.shape), "data_offsets": list(spans[i])}
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
    if _dtype_name(a.dtype) is None:
        raise TypeError(f"irc.save: {what} has dtype {a.dtype}; a checkpoint holds arrays of "
                        f"{', '.join(str(d.newbyteorder('=')) for d in DTYPES.values())} only")
    return a.astype(DTYPES[_dtype_name(a.dtype)], order="C", copy=False)  # 0-d stays 0-d


def _write_tensor(f, a: np.ndarray) -> None:
    if a.nbytes:
        f.write(a.reshape(-1).view(np.uint8).data)


# -- reading -------------------------------------------------------------------------------------


@dataclass
class _Contents:
    """What a checked file holds; the arrays are views of ``read_only`` and ``private`` maps."""

    metadata: dict[str, str]
    names: list[str]
    params: list[np.ndarray]  # read-only, for model.params
    call_params: list[np.ndarray]  # copy-on-write, aligned: what compiled code is given
    in_tree: TreeDef
    out_tree: TreeDef
    inputs: list[InputSpec]


def _fail(path: str, message: str) -> CheckpointError:
    return CheckpointError(f"{path}: {message}")


def load(path, *, max_header_size: int = MAX_HEADER, **compile_options) -> Model:
    """The model saved at ``path``, compiled with ``irc.compile(module, **compile_options)``.

    A missing file is a FileNotFoundError; anything that is not a sound irc checkpoint is a
    CheckpointError naming the file and the fault.  Nothing in the file is executed: the IR is
    parsed, verified and compiled, and the parameters are mapped, never unpickled.
    """
    from .checks import check_type

    check_type("irc.load", "path", path, (str, os.PathLike))
    check_type("irc.load", "max_header_size", max_header_size, int)
    name = os.fspath(path)
    contents = _read(name, max_header_size)
    module = _parse_module(name, contents)
    meta = contents.metadata
    problem = _signature_problems(module, meta["entry"], contents.names,
                                  [(a.dtype, a.shape) for a in contents.params], contents.inputs,
                                  contents.out_tree.num_leaves)
    if problem:
        raise _fail(name, f"the graph does not fit the checkpoint's signature: {problem}")
    import irc

    from .diagnostics import IRError

    try:
        exe = irc.compile(module, **compile_options)
    except IRError as e:
        raise _fail(name, f"the model cannot be compiled: {_one_line(e)}") from None
    return Model(name, module, meta["entry"], exe[meta["entry"]], contents, meta["irc_version"])


def _read(path: str, max_header_size: int) -> _Contents:
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)  # a FIFO never blocks
    fd = os.open(path, flags)  # FileNotFoundError, PermissionError: the caller's OSError
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _fail(path, "is a directory, not a checkpoint")
        if not stat.S_ISREG(st.st_mode):
            raise _fail(path, "is not a regular file (a device or a pipe?); a checkpoint is read from a file")
        size = st.st_size
        if size == 0:
            raise _fail(path, "is empty, not a checkpoint")
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise _fail(path, f"is {size} bytes long, too short for a checkpoint (truncated?)")
        header_len = int.from_bytes(head, "little")
        foreign = _foreign_format(head)
        if header_len + 8 > size or header_len < 2:
            if foreign:
                raise _fail(path, f"is {foreign}, not an irc checkpoint; irc never unpickles or imports "
                                  "anything from a file")
            if header_len < 2:
                raise _fail(path, f"the header length is {header_len} bytes: not a checkpoint")
            raise _fail(path, f"the header length ({header_len} bytes) runs past the end of the file "
                              f"({size} bytes): truncated, or not a checkpoint")
        if header_len > max_header_size:
            raise _fail(path, f"the header is {header_len} bytes, more than the limit of {max_header_size}")
        raw = _pread_all(fd, header_len, 8)
        header = _parse_header(path, raw)
        data_start = 8 + header_len
        metadata = _check_metadata(path, header.pop("__metadata__", None))
        tensors = _check_tensors(path, header, size - data_start)
        names = _json_field(path, metadata, "params")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names) \
                or len(set(names)) != len(names):
            raise _fail(path, "metadata 'params' is not a list of distinct parameter names")
        if set(names) != set(tensors):
            missing = sorted(set(names) - set(tensors))
            extra = sorted(set(tensors) - set(names))
            raise _fail(path, "the parameters and the tensors differ: "
                              + (f"no tensor for {', '.join(map(repr, missing[:5]))}" if missing else
                                 f"tensor(s) {', '.join(map(repr, extra[:5]))} belong to no parameter"))
        in_tree = _tree_field(path, metadata, "in_tree")
        out_tree = _tree_field(path, metadata, "out_tree")
        if in_tree.kind != "tuple" or not in_tree.children:
            raise _fail(path, "metadata 'in_tree' is not the structure of a tuple (params, *inputs)")
        if in_tree.children[0].num_leaves != len(names):
            raise _fail(path, f"metadata 'in_tree' has {in_tree.children[0].num_leaves} parameter leaves, "
                              f"but there are {len(names)} parameters")
        inputs = _check_inputs(path, metadata, TreeDef("tuple", (), in_tree.children[1:]).num_leaves)
        if size - data_start == 0:
            read_only = private = b""
        else:
            read_only = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            private = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)  # shares pages until written
    finally:
        os.close(fd)
    params, call_params = [], []
    for n in names:
        dtype, shape, begin = tensors[n]
        count = math.prod(shape)
        offset = data_start + begin if count else 0
        a = np.frombuffer(read_only, dtype, count, offset).reshape(shape) if count else np.zeros(shape, dtype)
        if not count:
            a.flags.writeable = False
        params.append(a)
        b = np.frombuffer(private, dtype, count, offset).reshape(shape) if count else np.zeros(shape, dtype)
        call_params.append(b if b.flags.aligned else b.copy())  # another writer's offsets may be odd
    return _Contents(metadata, names, params, call_params, in_tree, out_tree, inputs)


def _foreign_format(head: bytes) -> str | None:
    """What a file that is not a checkpoint seems to be, from its first bytes (for the message)."""
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "a zip archive (a PyTorch or .npz file?)"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "a Python pickle"
    if head.startswith(b"\x93NUMPY"):
        return "a .npy array"
    if head.startswith(b"\x89HDF"):
        return "an HDF5 file"
    if all(32 <= c < 127 or c in (9, 10, 13) for c in head):
        return "a text file (an .ir program?)"
    return None


def _pread_all(fd: int, n: int, offset: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, min(n - got, 1 << 24), offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _no_duplicates(pairs: list) -> dict:
    d: dict = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"the key {k[:80]!r} appears twice")
        d[k] = v
    return d


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def _loads(text: str):
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def _parse_header(path: str, raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _fail(path, f"the header is not UTF-8 text (byte {8 + e.start}): not a checkpoint, or damaged") \
            from None
    if not text.startswith("{"):
        raise _fail(path, "the header is not a JSON object: not a checkpoint, or damaged")
    try:
        header = _loads(text)
    except RecursionError:
        raise _fail(path, "the header's JSON is nested too deeply") from None
    except ValueError as e:
        raise _fail(path, f"the header is not valid JSON ({_clip(str(e))}): damaged") from None
    if not isinstance(header, dict):
        raise _fail(path, "the header is not a JSON object")
    return header


def _check_metadata(path: str, meta) -> dict[str, str]:
    if meta is None:
        raise _fail(path, "has no '__metadata__': a safetensors file of weights only, not an irc checkpoint")
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _fail(path, "'__metadata__' is not a map of strings to strings")
    if meta.get("format") != FORMAT:
        raise _fail(path, f"'__metadata__' does not say format '{FORMAT}': a safetensors file, but not an "
                          "irc checkpoint")
    version = meta.get("format_version", "")
    if not re.fullmatch(r"[0-9]{1,9}", version) or int(version) < 1:
        raise _fail(path, f"the format version {_clip(version)!r} is not a positive integer")
    written_by = meta.get("irc_version", "")
    if not re.fullmatch(r"[0-9A-Za-z.+_-]{1,64}", written_by):
        raise _fail(path, f"the irc version {_clip(written_by)!r} is not a version")
    if int(version) > FORMAT_VERSION:
        import irc

        raise _fail(path, f"was written by irc {written_by} in checkpoint format {version}; this irc "
                          f"({irc.__version__}) reads format {FORMAT_VERSION} and older: upgrade irc")
    missing = [k for k in _META_KEYS if k not in meta]
    if missing:
        raise _fail(path, f"'__metadata__' lacks {', '.join(map(repr, missing))}")
    return meta


def _check_tensors(path: str, header: dict, data_size: int) -> dict[str, tuple]:
    """name -> (dtype, shape, begin) for each tensor, once every offset, size and dtype is checked
    against each other and against the file; the tensors must tile the data exactly, as in
    safetensors (no gap, no overlap, nothing after the last)."""
    tensors, spans = {}, []
    for name, info in header.items():
        what = f"tensor {_clip(name)!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise _fail(path, f"{what} is not {{dtype, shape, data_offsets}}")
        dtype = info["dtype"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            known = "BF16 F8_E4M3 F8_E5M2 U8 U16 U32 U64".split()
            reason = "a dtype irc does not compute with" if dtype in known else "not a dtype"
            raise _fail(path, f"{what} has dtype {_clip(str(dtype))!r}: {reason} "
                              f"(irc's: {', '.join(DTYPES)})")
        shape = info["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_RANK or \
                not all(type(d) is int and 0 <= d < 1 << 62 for d in shape):
            raise _fail(path, f"{what} has shape {_clip(str(shape))}: not a list of at most {MAX_RANK} sizes")
        if math.prod(d for d in shape if d) * DTYPES[dtype].itemsize > MAX_ARRAY_BYTES:
            raise _fail(path, f"{what} has shape {_clip(str(shape))}: larger than any array can be")
        offsets = info["data_offsets"]
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets) \
                or not 0 <= offsets[0] <= offsets[1]:
            raise _fail(path, f"{what} has data_offsets {_clip(str(offsets))}: not [begin, end] with "
                              "0 <= begin <= end")
        begin, end = offsets
        if end > data_size:
            raise _fail(path, f"{what} ends at byte {end} of the data, past its end ({data_size} bytes): "
                              "truncated, or damaged")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if nbytes != end - begin:
            raise _fail(path, f"{what}: shape {shape} of {dtype} takes {nbytes} bytes, but its offsets "
                              f"span {end - begin}")
        tensors[name] = (DTYPES[dtype], tuple(shape), begin)
        spans.append((begin, end, name))
    expected = 0
    for begin, end, name in sorted(spans):
        if begin < expected:
            raise _fail(path, f"tensor {_clip(name)!r} overlaps the one before it (offset {begin} < {expected})")
        if begin > expected:
            raise _fail(path, f"there are {begin - expected} unused bytes before tensor {_clip(name)!r}")
        expected = end
    if expected != data_size:
        raise _fail(path, f"the tensors take {expected} bytes but the file holds {data_size} after the "
                          "header: damaged, or data appended")
    return tensors


def _json_field(path: str, meta: dict, key: str):
    try:
        return _loads(meta[key])
    except RecursionError:
        raise _fail(path, f"metadata '{key}' is nested too deeply") from None
    except ValueError as e:
        raise _fail(path, f"metadata '{key}' is not valid JSON ({_clip(str(e))})") from None


def _tree_field(path: str, meta: dict, key: str) -> TreeDef:
    try:
        return TreeDef.from_json(_json_field(path, meta, key))
    except TreeMismatch as e:
        raise _fail(path, f"metadata '{key}': {e}") from None


def _check_inputs(path: str, meta: dict, count: int) -> list[InputSpec]:
    specs = _json_field(path, meta, "inputs")
    if not isinstance(specs, list) or len(specs) != count:
        raise _fail(path, f"metadata 'inputs' is not a list of the {count} input(s) 'in_tree' has")
    out = []
    for s in specs:
        if not isinstance(s, dict) or set(s) != {"name", "dtype", "shape"} or not isinstance(s["name"], str) \
                or not isinstance(s["dtype"], str) or s["dtype"] not in DTYPES or not isinstance(s["shape"], list) or len(s["shape"]) > MAX_RANK \
                or not all(type(d) is int and d >= 0 for d in s["shape"]):
            raise _fail(path, f"metadata 'inputs' has an entry that is not {{name, dtype, shape}}: {_clip(str(s))}")
        out.append(InputSpec(s["name"], DTYPES[s["dtype"]], tuple(s["shape"])))
    return out


def _parse_module(path: str, contents: _Contents):
    from .diagnostics import IRError
    from .parser import parse
    from .verifier import verify

    meta = contents.metadata
    try:
        module = parse(meta["module"], f"{path} (module)")
    except IRError as e:
        raise _fail(path, f"the model's IR does not parse: {_one_line(e)}{_newer(meta)}") from None
    try:
        verify(module)
    except IRError as e:
        raise _fail(path, f"the model's IR is not valid: {_one_line(e)}{_newer(meta)}") from None
    return module


def _newer(meta: dict) -> str:
    import irc

    if _version_tuple(meta["irc_version"]) > _version_tuple(irc.__version__):
        return f" (written by irc {meta['irc_version']}, newer than this irc {irc.__version__}: upgrade irc?)"
    return ""


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", v)[:4])


def _one_line(e) -> str:
    loc = getattr(e, "location", None)
    where = f"line {loc.line}, column {loc.column}: " if loc is not None and getattr(loc, "line", 0) else ""
    return _clip(where + getattr(e, "message", str(e)), 300)


def _clip(text: str, n: int = 80) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[:n] + "..."


# -- the loaded model ----------------------------------------------------------------------------


class Model:
    """A loaded checkpoint: ``model(*inputs)`` is the traced function with its parameters bound.

    ``params`` (the parameters in their tree structure: read-only numpy arrays mapped from the
    file), ``module`` (the graph), ``entry``, ``in_tree``/``out_tree``, ``inputs`` (the example
    inputs' names, dtypes and shapes), ``path`` and ``irc_version`` (of the irc that saved it).
    Compiled code gets copy-on-write maps of the parameters, so nothing it or anyone does to
    them reaches the file or ``params``.
    """

    def __init__(self, path: str, module, entry: str, function, contents: _Contents, irc_version: str):
        self.path = path
        self.module = module
        self.entry = entry
        self.in_tree = contents.in_tree
        self.out_tree = contents.out_tree
        self.inputs = contents.inputs
        self.irc_version = irc_version
        self.param_names = contents.names
        self.params = contents.in_tree.children[0].unflatten(contents.params)
        self._function = function
        self.inputs_tree = TreeDef("tuple", (), contents.in_tree.children[1:])
        types = module.lookup(entry).function_type
        self._param_types = types.inputs[:len(contents.names)]
        self.input_types = types.inputs[len(contents.names):]
        self.result_types = types.results
        self._call_params = [_scalar_or_array(a, t) for a, t in zip(contents.call_params, self._param_types)]

    def __call__(self, *inputs):
        results = self._function(*self._call_params, *self.flat_inputs(*inputs))
        return self._rebuild(results)

    def interpret(self, *inputs):
        """``model(*inputs)`` on irc's reference interpreter (numpy semantics): an oracle."""
        from .interpreter import Interpreter

        results = Interpreter(self.module).run(self.entry, *self._call_params, *self.flat_inputs(*inputs))
        return self._rebuild(results)

    def flat_inputs(self, *inputs) -> list:
        """The inputs as the entry takes them after the parameters: flattened, each checked
        against its parameter type; TypeError (dtype) or ValueError (structure, shape) naming it."""
        leaves, tree = flatten(inputs)
        if tree != self.inputs_tree:
            if len(tree.children) != len(self.inputs_tree.children):
                raise TypeError(f"the model {self.path} takes {len(self.inputs_tree.children)} input(s) "
                                f"({self.describe_inputs()}), got {len(tree.children)}")
            check_same(self.inputs_tree, tree, "the model's inputs")
        return [_check_input(spec.name, leaf, t) for spec, leaf, t in zip(self.inputs, leaves, self.input_types)]

    def describe_inputs(self) -> str:
        return ", ".join(f"input {spec.name}: {t}" for spec, t in zip(self.inputs, self.input_types))

    def _rebuild(self, results):
        if len(self.result_types) == 1:
            results = (results,)
        elif results is None:
            results = ()
        return self.out_tree.unflatten(list(results))

    def __repr__(self) -> str:
        return f"<irc.checkpoint.Model {self.path!r} @{self.entry}({self.describe_inputs()})>"


def _scalar_or_array(a: np.ndarray, t):
    from .types import TensorType

    return a if isinstance(t, TensorType) else a.item()


def _check_input(name: str, leaf, t):
    from .types import TensorType

    dtype = _element_dtype(t)
    if not isinstance(t, TensorType):
        if isinstance(leaf, np.ndarray) and leaf.shape == ():
            leaf = leaf.item()
        if isinstance(leaf, np.generic):
            leaf = leaf.item()
        if not isinstance(leaf, (bool, int, float)):
            raise TypeError(f"input {name} must be a number for {t}, got {type(leaf).__name__}")
        return leaf
    if not isinstance(leaf, np.ndarray):
        if isinstance(leaf, (list, tuple, bool, int, float, np.generic)):
            leaf = np.asarray(leaf, dtype=dtype)
        else:
            raise TypeError(f"input {name} must be a numpy array for {t}, got {type(leaf).__name__}")
    if leaf.dtype != dtype:
        raise TypeError(f"input {name} must have dtype {dtype} for {t}, got {leaf.dtype}")
    if leaf.ndim != t.rank or any(d is not None and d != n for d, n in zip(t.shape, leaf.shape)):
        want = "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
        raise ValueError(f"input {name} must have shape {want} for {t}, got {list(leaf.shape)}")
    return leaf


__all__ = ["CheckpointError", "InputSpec", "Model", "load", "save", "write"]
