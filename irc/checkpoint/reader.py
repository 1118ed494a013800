"""Reading a checkpoint: every length, offset, dtype and field is checked against the file
and against each other before anything is mapped, and the IR is parsed and verified.  Each
fault is a CheckpointError that names the file; nothing is unpickled or executed."""

from __future__ import annotations

import json
import math
import mmap
import os
import re
import stat
from dataclasses import dataclass

import numpy as np

from ..pytree import TreeDef, TreeMismatch
from .format import (
    DTYPES,
    FORMAT,
    FORMAT_VERSION,
    MAX_ARRAY_BYTES,
    MAX_RANK,
    InputSpec,
    clip,
    fail,
    one_line,
)

_META_KEYS = ("format", "format_version", "irc_version", "module", "entry", "in_tree", "out_tree",
              "params", "inputs")


@dataclass
class Contents:
    """What a checked file holds; the arrays are views of ``read_only`` and ``private`` maps."""

    metadata: dict[str, str]
    names: list[str]
    params: list[np.ndarray]  # read-only, for model.params
    call_params: list[np.ndarray]  # copy-on-write, aligned: what compiled code is given
    in_tree: TreeDef
    out_tree: TreeDef
    inputs: list[InputSpec]


def read(path: str, max_header_size: int) -> Contents:
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)  # a FIFO never blocks
    fd = os.open(path, flags)  # FileNotFoundError, PermissionError: the caller's OSError
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise fail(path, "is a directory, not a checkpoint")
        if not stat.S_ISREG(st.st_mode):
            raise fail(path, "is not a regular file (a device or a pipe?); a checkpoint is read from a file")
        size = st.st_size
        if size == 0:
            raise fail(path, "is empty, not a checkpoint")
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise fail(path, f"is {size} bytes long, too short for a checkpoint (truncated?)")
        header_len = int.from_bytes(head, "little")
        foreign = _foreign_format(head)
        if header_len + 8 > size or header_len < 2:
            if foreign:
                raise fail(path, f"is {foreign}, not an irc checkpoint; irc never unpickles or imports "
                                 "anything from a file")
            if header_len < 2:
                raise fail(path, f"the header length is {header_len} bytes: not a checkpoint")
            raise fail(path, f"the header length ({header_len} bytes) runs past the end of the file "
                             f"({size} bytes): truncated, or not a checkpoint")
        if header_len > max_header_size:
            raise fail(path, f"the header is {header_len} bytes, more than the limit of {max_header_size}")
        raw = _pread_all(fd, header_len, 8)
        header = _parse_header(path, raw)
        data_start = 8 + header_len
        metadata = _check_metadata(path, header.pop("__metadata__", None))
        tensors = _check_tensors(path, header, size - data_start)
        names = _json_field(path, metadata, "params")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names) \
                or len(set(names)) != len(names):
            raise fail(path, "metadata 'params' is not a list of distinct parameter names")
        if set(names) != set(tensors):
            missing = sorted(set(names) - set(tensors))
            extra = sorted(set(tensors) - set(names))
            raise fail(path, "the parameters and the tensors differ: "
                             + (f"no tensor for {', '.join(map(repr, missing[:5]))}" if missing else
                                f"tensor(s) {', '.join(map(repr, extra[:5]))} belong to no parameter"))
        in_tree = _tree_field(path, metadata, "in_tree")
        out_tree = _tree_field(path, metadata, "out_tree")
        if in_tree.kind != "tuple" or not in_tree.children:
            raise fail(path, "metadata 'in_tree' is not the structure of a tuple (params, *inputs)")
        if in_tree.children[0].num_leaves != len(names):
            raise fail(path, f"metadata 'in_tree' has {in_tree.children[0].num_leaves} parameter leaves, "
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
    return Contents(metadata, names, params, call_params, in_tree, out_tree, inputs)


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
        raise fail(path, f"the header is not UTF-8 text (byte {8 + e.start}): not a checkpoint, or damaged") \
            from None
    if not text.startswith("{"):
        raise fail(path, "the header is not a JSON object: not a checkpoint, or damaged")
    try:
        header = _loads(text)
    except RecursionError:
        raise fail(path, "the header's JSON is nested too deeply") from None
    except ValueError as e:
        raise fail(path, f"the header is not valid JSON ({clip(str(e))}): damaged") from None
    if not isinstance(header, dict):
        raise fail(path, "the header is not a JSON object")
    return header


def _check_metadata(path: str, meta) -> dict[str, str]:
    if meta is None:
        raise fail(path, "has no '__metadata__': a safetensors file of weights only, not an irc checkpoint")
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise fail(path, "'__metadata__' is not a map of strings to strings")
    if meta.get("format") != FORMAT:
        raise fail(path, f"'__metadata__' does not say format '{FORMAT}': a safetensors file, but not an "
                         "irc checkpoint")
    version = meta.get("format_version", "")
    if not re.fullmatch(r"[0-9]{1,9}", version) or int(version) < 1:
        raise fail(path, f"the format version {clip(version)!r} is not a positive integer")
    written_by = meta.get("irc_version", "")
    if not re.fullmatch(r"[0-9A-Za-z.+_-]{1,64}", written_by):
        raise fail(path, f"the irc version {clip(written_by)!r} is not a version")
    if int(version) > FORMAT_VERSION:
        import irc

        raise fail(path, f"was written by irc {written_by} in checkpoint format {version}; this irc "
                         f"({irc.__version__}) reads format {FORMAT_VERSION} and older: upgrade irc")
    missing = [k for k in _META_KEYS if k not in meta]
    if missing:
        raise fail(path, f"'__metadata__' lacks {', '.join(map(repr, missing))}")
    return meta


def _check_tensors(path: str, header: dict, data_size: int) -> dict[str, tuple]:
    """name -> (dtype, shape, begin) for each tensor, once every offset, size and dtype is checked
    against each other and against the file; the tensors must tile the data exactly, as in
    safetensors (no gap, no overlap, nothing after the last)."""
    tensors, spans = {}, []
    for name, info in header.items():
        what = f"tensor {clip(name)!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise fail(path, f"{what} is not {{dtype, shape, data_offsets}}")
        dtype = info["dtype"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            known = "BF16 F8_E4M3 F8_E5M2 U8 U16 U32 U64".split()
            reason = "a dtype irc does not compute with" if dtype in known else "not a dtype"
            raise fail(path, f"{what} has dtype {clip(str(dtype))!r}: {reason} "
                             f"(irc's: {', '.join(DTYPES)})")
        shape = info["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_RANK or \
                not all(type(d) is int and 0 <= d < 1 << 62 for d in shape):
            raise fail(path, f"{what} has shape {clip(str(shape))}: not a list of at most {MAX_RANK} sizes")
        if math.prod(d for d in shape if d) * DTYPES[dtype].itemsize > MAX_ARRAY_BYTES:
            raise fail(path, f"{what} has shape {clip(str(shape))}: larger than any array can be")
        offsets = info["data_offsets"]
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets) \
                or not 0 <= offsets[0] <= offsets[1]:
            raise fail(path, f"{what} has data_offsets {clip(str(offsets))}: not [begin, end] with "
                             "0 <= begin <= end")
        begin, end = offsets
        if end > data_size:
            raise fail(path, f"{what} ends at byte {end} of the data, past its end ({data_size} bytes): "
                             "truncated, or damaged")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if nbytes != end - begin:
            raise fail(path, f"{what}: shape {shape} of {dtype} takes {nbytes} bytes, but its offsets "
                             f"span {end - begin}")
        tensors[name] = (DTYPES[dtype], tuple(shape), begin)
        spans.append((begin, end, name))
    expected = 0
    for begin, end, name in sorted(spans):
        if begin < expected:
            raise fail(path, f"tensor {clip(name)!r} overlaps the one before it (offset {begin} < {expected})")
        if begin > expected:
            raise fail(path, f"there are {begin - expected} unused bytes before tensor {clip(name)!r}")
        expected = end
    if expected != data_size:
        raise fail(path, f"the tensors take {expected} bytes but the file holds {data_size} after the "
                         "header: damaged, or data appended")
    return tensors


def _json_field(path: str, meta: dict, key: str):
    try:
        return _loads(meta[key])
    except RecursionError:
        raise fail(path, f"metadata '{key}' is nested too deeply") from None
    except ValueError as e:
        raise fail(path, f"metadata '{key}' is not valid JSON ({clip(str(e))})") from None


def _tree_field(path: str, meta: dict, key: str) -> TreeDef:
    try:
        return TreeDef.from_json(_json_field(path, meta, key))
    except TreeMismatch as e:
        raise fail(path, f"metadata '{key}': {e}") from None


def _check_inputs(path: str, meta: dict, count: int) -> list[InputSpec]:
    specs = _json_field(path, meta, "inputs")
    if not isinstance(specs, list) or len(specs) != count:
        raise fail(path, f"metadata 'inputs' is not a list of the {count} input(s) 'in_tree' has")
    out = []
    for s in specs:
        if not isinstance(s, dict) or set(s) != {"name", "dtype", "shape"} or not isinstance(s["name"], str) \
                or not isinstance(s["dtype"], str) or s["dtype"] not in DTYPES or not isinstance(s["shape"], list) or len(s["shape"]) > MAX_RANK \
                or not all(type(d) is int and d >= 0 for d in s["shape"]):
            raise fail(path, f"metadata 'inputs' has an entry that is not {{name, dtype, shape}}: {clip(str(s))}")
        out.append(InputSpec(s["name"], DTYPES[s["dtype"]], tuple(s["shape"])))
    return out


def parse_module(path: str, contents: Contents):
    from ..diagnostics import IRError
    from ..parser import parse
    from ..verifier import verify

    meta = contents.metadata
    try:
        module = parse(meta["module"], f"{path} (module)")
    except IRError as e:
        raise fail(path, f"the model's IR does not parse: {one_line(e)}{_newer(meta)}") from None
    try:
        verify(module)
    except IRError as e:
        raise fail(path, f"the model's IR is not valid: {one_line(e)}{_newer(meta)}") from None
    return module


def _newer(meta: dict) -> str:
    import irc

    if _version_tuple(meta["irc_version"]) > _version_tuple(irc.__version__):
        return f" (written by irc {meta['irc_version']}, newer than this irc {irc.__version__}: upgrade irc?)"
    return ""


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", v)[:4])
