"""Fast entry points: one C call per Python call for the commonest functions.

A function whose parameters are all scalars and which has one scalar result gets
a companion ``T f.fast(args...)`` that returns the result itself, or a sentinel
value when ``f`` reports a fault (its status is nonzero).  The Python wrapper
then calls the status-returning ``f`` to learn the fault (or the true result, if
the sentinel was a genuine value).  Re-running is safe precisely because such a
function cannot touch the caller's memory: all it sees are scalars.  This keeps
the common path to a single ctypes call with no result buffer to allocate, and
is thread-safe without thread-local storage (which LLJIT does not support).
"""

from __future__ import annotations

from llvmlite import ir

from irc.types import FloatType, IntegerType, MemRefType

from .translate import I8, I32, function_type, llvm_type, param_types


def has_fast_entry(ft) -> bool:
    return (len(ft.results) == 1 and not isinstance(ft.results[0], MemRefType)
            and not any(isinstance(t, MemRefType) for t in ft.inputs)
            and not (isinstance(ft.results[0], FloatType) and ft.results[0].kind in ("f16", "bf16")))


def sentinel(t):
    """The value a fast entry returns on a fault (checked by the wrapper)."""
    if isinstance(t, FloatType):
        return float("nan")  # compared with r != r
    if isinstance(t, IntegerType) and t.width == 1:
        return 2  # an i1 travels as an unsigned byte holding 0 or 1
    width = getattr(t, "width", 64)
    return -(1 << (width - 1)) + 1


def fast_name(name: str) -> str:
    """The fast entry's symbol for the user's ``@name`` (a prefix of its own: no user symbol has it)."""
    return f"irc.fast.{name}"


def add_fast_entries(llvm_module: ir.Module, signatures: dict, symbols: dict | None = None) -> list[str]:
    """Add ``fast_name(f)`` for every eligible function ``f`` (its entry's symbol: ``symbols[f]``);
    return their names."""
    added = []
    for name, ft in signatures.items():
        fn = llvm_module.globals.get((symbols or {}).get(name, name))
        if fn is None or fn.is_declaration or not has_fast_entry(ft):
            continue
        result_t = ft.results[0]
        ret_t = I8 if isinstance(result_t, IntegerType) and result_t.width == 1 else llvm_type(result_t)
        params = [p for t in ft.inputs for p in param_types(t)]
        fast = ir.Function(llvm_module, ir.FunctionType(ret_t, params), name=fast_name(name))
        assert function_type(ft).args[:-1] == tuple(params)
        b = ir.IRBuilder(fast.append_basic_block("entry"))
        slot = b.alloca(ret_t)
        status = b.call(fn, list(fast.args) + [slot])
        ok = b.icmp_unsigned("==", status, ir.Constant(I32, 0))
        value = b.load(slot)
        bad = sentinel(result_t)
        b.ret(b.select(ok, value, ir.Constant(ret_t, bad)))
        added.append(fast.name)
    return added
