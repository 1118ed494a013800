"""The numpy calling convention: Python callables around JIT-compiled functions.

Each compiled function gets a small generated Python wrapper with the
function's own parameter names, so a wrong argument count reads like any Python
call (``gcd() missing 1 required positional argument: 'b'``) and costs nothing
on the happy path.  Scalars are Python numbers; memrefs are numpy arrays passed
zero-copy (dtype, rank, static sizes and C-contiguity are checked first, so a
bad array is a ``TypeError``/``ValueError`` naming the parameter, never a
segfault).  A failed runtime check returns a status that becomes an
``ExecutionError`` at the faulting op's source location.
"""

from __future__ import annotations

import ctypes
import keyword
import re

import numpy as np

from irc.checks import plain_array
from irc.diagnostics import ExecutionError, IRError
from irc.types import FloatType, IndexType, IntegerType, MemRefType, numpy_dtype

_CTYPES = {"i1": ctypes.c_uint8, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
           "i64": ctypes.c_int64, "index": ctypes.c_int64, "f16": ctypes.c_uint16, "f32": ctypes.c_float,
           "f64": ctypes.c_double}


def _ctype(t):
    c = _CTYPES.get(str(t))
    if c is None:
        raise TypeError(f"type {t} cannot cross the Python call boundary yet")
    return c


def c_signature(ft) -> list:
    """ctypes argument types of the C ABI described in translate.py."""
    args = []
    for t in ft.inputs:
        if isinstance(t, MemRefType):
            args.append(ctypes.c_void_p)
            args.extend([ctypes.c_int64] * t.rank)
        else:
            args.append(_ctype(t))
    args.extend(ctypes.POINTER(_ctype(t)) for t in ft.results)
    return args


# ctypes refuses foreign functions with more arguments than this (CTYPES_MAX_ARGCOUNT).
MAX_C_ARGUMENTS = 1024


def _param_names(func) -> list[str]:
    """The Python wrapper's parameter names: the IR's where they are usable (a declaration has
    none: specialization_cache.py makes wrappers from declarations), else ``arg<i>``."""
    names, seen = [], set()
    hints = [None] * len(func.function_type.inputs) if func.is_declaration else [a.name_hint for a in func.args]
    for i, hint in enumerate(hints):
        name = re.sub(r"\W", "_", hint or "") or f"arg{i}"
        if name[0].isdigit() or keyword.iskeyword(name) or name in seen or name.startswith("_"):
            name = f"arg{i}"
        seen.add(name)
        names.append(name)
    return names


def _memref_checker(name: str, t: MemRefType):
    elem = t.element_type
    dtype = np.dtype(np.bool_) if isinstance(elem, IntegerType) and elem.width == 1 else numpy_dtype(elem)
    shape = t.shape

    def check(a):
        a = plain_array(f"parameter '{name}'", a, t)
        if type(a) is not np.ndarray:
            raise TypeError(f"parameter '{name}' must be a numpy array for {t}, got {type(a).__name__}")
        if a.dtype != dtype:
            raise TypeError(f"parameter '{name}' must have dtype {dtype} for {t}, got {a.dtype}")
        if a.ndim != len(shape) or any(d is not None and d != n for d, n in zip(shape, a.shape)):
            expected = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
            raise ValueError(f"parameter '{name}' must have shape {expected} for {t}, got {list(a.shape)}")
        if not a.flags.c_contiguous:
            raise ValueError(f"parameter '{name}' must be C-contiguous (use np.ascontiguousarray)")
        if not a.flags.writeable:
            raise ValueError(f"parameter '{name}' must be writeable: the function may store into it")
        return data_address(a)

    return check


def data_address(a: np.ndarray) -> int:
    """The address of ``a``'s first element: through ``ctypes.c_char.from_buffer`` where it
    takes the array (writeable, C-contiguous, not empty), else ``ndarray.ctypes``; never
    ``__array_interface__``, which leaks about 10 bytes a call in numpy 2.4 (a donated training
    step grew by 2 KiB a step through it)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def _scalar_checker(name: str, t):
    if isinstance(t, FloatType):
        def check_float(x):
            if isinstance(x, (float, int, np.floating, np.integer)) and not isinstance(x, (bool, np.bool_)):
                return x
            raise TypeError(f"parameter '{name}' must be a number for {t}, got {type(x).__name__}")

        if t.kind == "f16":  # ctypes has no half: it travels as its bits, rounded as the interpreter rounds
            def check_f16(x):
                return _f16_bits(check_float(x))
            return check_f16
        return check_float
    width = 64 if isinstance(t, IndexType) else t.width
    low, high = -(1 << (width - 1)) - (width == 1), 1 << width

    def check_int(x):
        if isinstance(x, (int, np.integer)):
            x = int(x)
            if low <= x < high:
                if width == 1:
                    return x & 1
                if x >= high >> 1:  # an unsigned spelling: wrap to the signed C value
                    return x - high
                return x
            raise ValueError(f"parameter '{name}': {x} does not fit in {t}")
        raise TypeError(f"parameter '{name}' must be an integer for {t}, got {type(x).__name__}")

    return check_int


def make_wrapper(func, address: int, faults, fast_address: int | None = None, owner=None):
    """A Python function that calls the compiled ``func`` at ``address``.

    With ``fast_address`` (see fastcall.py) the common path is one ctypes call
    returning the result itself.  ``owner`` (the JIT library) is kept alive by the
    wrapper: the machine code must outlive every callable that jumps into it.
    """
    ft = func.function_type
    try:
        signature = c_signature(ft)
    except TypeError as e:  # a vector, say: the function is called from IR (an outlined loop nest) only
        message = f"@{func.sym_name} cannot be called from Python: {e}"

        def unreachable(*args, **kwargs):
            raise TypeError(message)

        unreachable.owner = owner
        return unreachable
    if len(signature) > MAX_C_ARGUMENTS:
        raise IRError(f"@{func.sym_name} takes {len(signature)} machine-level arguments (a memref counts "
                      f"1 + its rank, a result 1), but a compiled function can be called from Python with "
                      f"at most {MAX_C_ARGUMENTS}; pass the values in a memref instead", func.loc)
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, *signature)
    cfunc = proto(address)
    names = _param_names(func)
    if fast_address is not None:
        wrapper = _make_fast_wrapper(func, names, cfunc, fast_address, faults)
        wrapper.owner = owner
        return wrapper
    env = {"_cfunc": cfunc, "_fault": _fault_raiser(func.sym_name, faults), "_byref": ctypes.byref}
    lines = []
    call_args = []
    for i, (name, t) in enumerate(zip(names, ft.inputs)):
        if isinstance(t, MemRefType):
            env[f"_check{i}"] = _memref_checker(name, t)
            env[f"_arr{i}"] = None
            lines.append(f"    _p{i} = _check{i}({name})")
            call_args.append(f"_p{i}")
            call_args.extend(f"{name}.shape[{d}]" for d in range(t.rank))
        else:
            env[f"_check{i}"] = _scalar_checker(name, t)
            lines.append(f"    {name} = _check{i}({name})")
            call_args.append(name)
    for k, t in enumerate(ft.results):
        env[f"_R{k}"] = _ctype(t)
        lines.append(f"    _r{k} = _R{k}()")
        call_args.append(f"_byref(_r{k})")
    lines.append(f"    _status = _cfunc({', '.join(call_args)})")
    lines.append("    if _status:")
    lines.append("        _fault(_status)")
    outs = [_result_expr(k, t) for k, t in enumerate(ft.results)]
    if not outs:
        lines.append("    return None")
    elif len(outs) == 1:
        lines.append(f"    return {outs[0]}")
    else:
        lines.append(f"    return ({', '.join(outs)},)")
    env["_f16"] = _f16_from_bits
    source = f"def {_python_name(func.sym_name)}({', '.join(names)}):\n" + "\n".join(lines) + "\n"
    exec(compile(source, f"<irc wrapper for @{func.sym_name}>", "exec"), env)  # noqa: S102 - generated above
    wrapper = env[_python_name(func.sym_name)]
    wrapper.__doc__ = f"@{func.sym_name} : {ft} (compiled for the CPU)"
    wrapper.c_function = cfunc
    wrapper.raise_fault = env["_fault"]
    wrapper.owner = owner
    return wrapper


def _inline_check(name: str, t, i: int) -> str:
    """A one-line fast path for a scalar argument; the full check runs only when it fails."""
    if isinstance(t, FloatType) and t.kind == "f16":
        return f"    {name} = _check{i}({name})"
    if isinstance(t, FloatType):
        return f"    if type({name}) is not float: {name} = _check{i}({name})"
    width = 64 if isinstance(t, IndexType) else t.width
    low, high = (0, 2) if width == 1 else (-(1 << (width - 1)), 1 << (width - 1))
    return f"    if type({name}) is not int or not {low} <= {name} < {high}: {name} = _check{i}({name})"


def _make_fast_wrapper(func, names, cfunc, fast_address: int, faults):
    from .fastcall import sentinel

    ft = func.function_type
    result_t = ft.results[0]
    fast_proto = ctypes.CFUNCTYPE(_ctype(result_t), *c_signature(ft)[: -1])
    env = {"_cfunc": cfunc, "_fast": fast_proto(fast_address), "_fault": _fault_raiser(func.sym_name, faults),
           "_byref": ctypes.byref, "_R": _ctype(result_t), "_S": sentinel(result_t)}
    lines = []
    for i, (name, t) in enumerate(zip(names, ft.inputs)):
        env[f"_check{i}"] = _scalar_checker(name, t)
        lines.append(_inline_check(name, t, i))
    args = ", ".join(names)
    is_float = isinstance(result_t, FloatType)
    is_bool = isinstance(result_t, IntegerType) and result_t.width == 1
    lines.append(f"    _v = _fast({args})")
    lines.append("    if _v != _v:" if is_float else "    if _v == _S:")
    # The sentinel may be a genuine result: ask the status-returning entry.
    lines.append("        _r = _R()")
    lines.append(f"        _status = _cfunc({args}{', ' if args else ''}_byref(_r))")
    lines.append("        if _status:")
    lines.append("            _fault(_status)")
    lines.append("        _v = _r.value")
    lines.append("    return bool(_v)" if is_bool else "    return _v")
    fname = _python_name(func.sym_name)
    source = f"def {fname}({args}):\n" + "\n".join(lines) + "\n"
    exec(compile(source, f"<irc wrapper for @{func.sym_name}>", "exec"), env)  # noqa: S102 - generated above
    wrapper = env[fname]
    wrapper.__doc__ = f"@{func.sym_name} : {ft} (compiled for the CPU)"
    wrapper.c_function = cfunc
    return wrapper


def _python_name(name: str) -> str:
    n = re.sub(r"\W", "_", name)
    return n if n and not n[0].isdigit() and not keyword.iskeyword(n) else f"f_{n}"


def _result_expr(k: int, t) -> str:
    if isinstance(t, IntegerType) and t.width == 1:
        return f"bool(_r{k}.value)"
    if isinstance(t, FloatType) and t.kind == "f16":
        return f"_f16(_r{k}.value)"
    return f"_r{k}.value"


def _f16_from_bits(bits: int) -> float:
    return float(np.array(bits, dtype=np.uint16).view(np.float16))


def _f16_bits(x) -> int:
    """The bits of the f16 nearest ``x`` (the interpreter's ``to_runtime`` rounding)."""
    from irc.semantics import round_to
    from irc.types import f16

    with np.errstate(over="ignore"):
        return int(np.array(round_to(np.float64(x), f16), dtype=np.float16).view(np.uint16))


def _fault_raiser(name: str, faults):
    def fault(status: int):
        if 1 <= status <= len(faults):
            message, loc = faults[status - 1]
            raise ExecutionError(message, loc)
        raise ExecutionError(f"@{name} returned the unknown status {status}")

    return fault
