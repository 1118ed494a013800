"""Tensor-function specialisations on disk, keyed by what goes in rather than what comes out.

The compile cache (cache.py) is keyed by the final loop-level IR, so a new process must
run the whole tensor pipeline (specialise, fuse, lower, plan memory, ...) before it can
look anything up: 0.1-0.5 s for a training step.  Here the key is the tensor-level
module as the user gave it, the function, its argument shapes, the options, the host and
a hash of irc's own source (``cache.compiler_fingerprint``); the entry holds the machine
code, its fault table, and the little that calling it needs (the entry's signature, its
output shapes, arena size, in-place pairs, the runtime symbols it links to).  A hit is a file read, a JIT link and a wrapper: milliseconds.

Entries are written and read through ``diskcache``'s signed files (a cache directory may
come from someone else: an entry this user's irc did not write is ignored), and the record
is JSON whose every field is checked before use; a bad one is dropped and rebuilt.
"""

from __future__ import annotations

import hashlib
import json

from irc import diskcache

from . import cache as _cache

_MAGIC = b"irc-specialisation-1\n"


def key(module_text: str, name: str, shapes: tuple, sizes: tuple, tensor_options, compile_options: dict,
        cpu: str, features: str) -> str:
    options = {k: v for k, v in compile_options.items() if k not in ("cache", "cache_dir", "extern")}
    h = hashlib.sha256()
    for part in ("irc tensor specialisation", module_text, name, repr(shapes), repr(sizes), repr(tensor_options),
                 json.dumps(options, sort_keys=True, default=repr), cpu, features, _cache.compiler_fingerprint()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _parts(k: str) -> tuple[str, str]:
    return k[:2], f"{k}.spec"


def store(k: str, record: dict, entry: _cache.Entry, cache_dir: str | None) -> None:
    header = json.dumps({"record": record, "faults": entry.faults}).encode()
    payload = len(header).to_bytes(8, "little") + header + entry.object_code
    diskcache.write_signed(_cache.directory(cache_dir), *_parts(k), magic=_MAGIC, payload=payload)


def load(k: str, cache_dir: str | None):
    """(record, Entry) for key ``k``, or None (missing, not ours, or not well formed: dropped)."""
    root = _cache.directory(cache_dir)
    payload = diskcache.read_signed(root, *_parts(k), magic=_MAGIC)
    if payload is None:
        return None
    try:
        size = int.from_bytes(payload[:8], "little")
        if not 0 < size <= len(payload) - 8:
            raise ValueError("header size")
        header = json.loads(payload[8:8 + size])
        record, faults = header["record"], header["faults"]
        _check_record(record)
        stored = [(str(m), (int(line), int(col))) for m, (line, col) in faults]
        return record, _cache.Entry(payload[8 + size:], stored)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        discard(k, cache_dir)
        return None


def discard(k: str, cache_dir: str | None) -> None:
    diskcache.discard(_cache.directory(cache_dir), *_parts(k))


def _check_record(r) -> None:
    """Raise ValueError unless ``r`` has the fields and types ``record`` makes."""
    def ints(xs):
        return isinstance(xs, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in xs)
    ok = (isinstance(r, dict) and isinstance(r.get("functions"), dict)
          and isinstance(r.get("out_shapes"), list) and all(ints(s) for s in r["out_shapes"])
          and (r.get("arena_bytes") is None or ints([r["arena_bytes"]]))
          and isinstance(r.get("in_place"), list) and all(ints(p) and len(p) == 2 for p in r["in_place"])
          and isinstance(r.get("declared"), list) and all(isinstance(d, str) for d in r["declared"]))
    if not ok:
        raise ValueError("not a specialisation record")


def record(module, name: str, out_shapes: list, arena_bytes, in_place) -> dict:
    """What calling the specialisation needs, from its lowered ``module``: the signature of
    its entry (the one function Python calls), and the runtime symbols it links to."""
    from .executable import runtime_names

    return {"functions": {f.sym_name: {"inputs": [_type_json(t) for t in f.function_type.inputs],
                                       "results": [_type_json(t) for t in f.function_type.results]}
                          for f in module.functions if f.sym_name == name},
            "out_shapes": [list(s) for s in out_shapes], "arena_bytes": arena_bytes,
            "in_place": sorted([list(p) for p in in_place]),
            "declared": runtime_names(module)}


def declarations(record: dict) -> dict:
    """``{name: FuncOp declaration}`` for the record's functions (ValueError if malformed)."""
    from irc.dialects.func import FuncOp

    from irc.attributes import StringAttr, TypeAttr
    from irc.block import Region
    from irc.types import FunctionType

    out = {}
    for name, sig in record["functions"].items():
        if not isinstance(sig, dict) or not isinstance(sig.get("inputs"), list) or not isinstance(sig.get("results"), list):
            raise ValueError("not a signature")
        ft = FunctionType([_type_from(t) for t in sig["inputs"]], [_type_from(t) for t in sig["results"]])
        out[name] = FuncOp(attributes={"sym_name": StringAttr(name), "sym_visibility": StringAttr("private"),
                                       "function_type": TypeAttr(ft)}, regions=[Region()])
    return out


def _type_json(t):
    from irc.types import MemRefType

    if isinstance(t, MemRefType):
        return {"memref": list(t.shape), "element": str(t.element)}
    return str(t)


def _type_from(j):
    """The type ``_type_json`` wrote: a scalar's name or a memref's shape and element."""
    from irc.types import FloatType, IntegerType, MemRefType, index

    if isinstance(j, dict):
        shape = j.get("memref")
        if not isinstance(shape, list) or not all(d is None or isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError("bad memref shape")
        return MemRefType(shape, _type_from(j.get("element")))
    if j == "index":
        return index
    if isinstance(j, str) and j in FloatType.WIDTHS:
        return FloatType(j)
    if isinstance(j, str) and j[:1] == "i" and j[1:].isdigit():
        return IntegerType(int(j[1:]))
    raise ValueError(f"not a type: {str(j)[:40]}")
