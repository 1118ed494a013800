"""The checkpoint format's constants and the checks that tie a graph to its parameters.

Shared by the writer (which refuses to write what would not load) and the reader (which
refuses what does not fit); see irc/checkpoint/__init__.py and docs/checkpoints.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..fileio import DEFAULT_MAX_INPUT

FORMAT = "irc.checkpoint"
FORMAT_VERSION = 1
"""Incremented when a change makes files that an older irc would misread; readers refuse newer."""

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


def dtype_name(dtype: np.dtype) -> str | None:
    return _DTYPE_NAMES.get(np.dtype(dtype).newbyteorder("="))


def element_dtype(t) -> np.dtype | None:
    """The numpy dtype of a tensor's or scalar's element type (None: bf16, which numpy lacks)."""
    from ..types import FloatType, IntegerType, numpy_dtype

    e = t.element_type
    if isinstance(e, IntegerType) and e.width == 1:
        return np.dtype(np.bool_)
    if isinstance(e, FloatType) and e.kind == "bf16":
        return None
    try:
        return numpy_dtype(e)
    except TypeError:
        return None


def type_accepts(t, dtype: np.dtype, shape: tuple[int, ...]) -> str | None:
    """Why an array of ``dtype`` and ``shape`` cannot be the argument of type ``t`` (None: it can).

    Tensors must match exactly (``?`` takes any size); scalars take 0-d arrays of any number
    dtype (a Python float traced as ``f32`` is stored as a float64 0-d array).
    """
    from ..types import FloatType, IndexType, IntegerType, TensorType

    if isinstance(t, TensorType):
        want = element_dtype(t)
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


def signature_problems(module, entry: str, param_names: list[str], param_arrays: list[tuple],
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
        problem = type_accepts(t, dtype, shape)
        if problem:
            return f"parameter '{name}' {problem}"
    for spec, t in zip(inputs, ft.inputs[len(param_arrays):]):
        problem = type_accepts(t, spec.dtype, spec.shape)
        if problem:
            return f"input {spec.name} {problem}"
    from ..types import FloatType, IndexType, IntegerType, TensorType

    for t in ft.results:
        if not isinstance(t, (TensorType, IntegerType, IndexType, FloatType)) or element_dtype(t) is None:
            return f"'@{entry}' returns a {t}; a checkpoint's entry returns tensors and scalars numpy can hold"
    return None


def fail(path: str, message: str) -> CheckpointError:
    return CheckpointError(f"{path}: {message}")


def one_line(e) -> str:
    loc = getattr(e, "location", None)
    where = f"line {loc.line}, column {loc.column}: " if loc is not None and getattr(loc, "line", 0) else ""
    return clip(where + getattr(e, "message", str(e)), 300)


def clip(text: str, n: int = 80) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[:n] + "..."
