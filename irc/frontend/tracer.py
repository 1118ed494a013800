"""Tracing: a ``Tracer`` stands for an array while a function is turned into IR.

A ``Trace`` is one function being built: its builder, its parameters, and the values
it captured from an enclosing trace (a closure over a traced value inside
``irc.grad(lambda p: loss(p, x))`` becomes an extra parameter of the inner function,
and the outer one passes the captured value in its call).  Traces nest: the
innermost one on ``_stack`` builds the ops of every operation on tracers.

A ``Tracer`` wraps a builder value ``V`` (a tensor, or a scalar standing for a 0-d
array) and implements numpy's dispatch protocols and Python's operators, so that a
function written with ``import numpy as np`` runs unchanged on it.  Element types
follow numpy 2's promotion (NEP 50): a Python number is *weak* and takes the other
operand's type; ``int / int`` is float64.  Anything a tracer cannot do (``bool()``,
``float()``, ``np.asarray``) raises a TypeError that shows the user's line.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from irc.attributes import TypeAttr
from irc.builder import Builder, V
from irc.diagnostics import UNKNOWN
from irc.types import FunctionType, IntegerType, TensorType, Type, numpy_dtype, type_of_dtype

from .locations import located_message, user_location


class TracerError(TypeError):
    """A traced value was used where a concrete one is needed, or escaped its trace."""


class TracingBuilder(Builder):
    """A builder whose every op takes the user's line as its location."""

    def insert(self, op):
        if op.loc is UNKNOWN:
            op.loc = user_location()
        return super().insert(op)


_stack: list[Trace] = []


def current() -> Trace | None:
    return _stack[-1] if _stack else None


class Names:
    """Fresh function names for one root trace (deterministic, so the same program prints
    the same IR in every process and the disk cache finds its machine code)."""

    def __init__(self):
        self.used: set[str] = set()

    def fresh(self, base: str) -> str:
        base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in base) or "f"
        if not (base[0].isalpha() or base[0] == "_"):
            base = "f_" + base
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name


class Trace:
    """One function under construction; ``with trace:`` makes it the current one."""

    def __init__(self, module, name: str, parent: Trace | None = None):
        from irc.dialects.func import FuncOp

        self.module = module
        self.parent = parent
        self.names = parent.names if parent is not None else Names()
        self.name = self.names.fresh(name)
        self.builder = TracingBuilder()
        self.func = FuncOp.build(self.name, FunctionType([], []))
        self.func.loc = user_location()
        module.body.append(self.func)
        self.builder.at_end(self.func.body.entry)
        self.captured: list[Tracer] = []  # outer tracers passed as the trailing parameters
        self._captures: dict[int, Tracer] = {}
        self.active = True

    def __enter__(self) -> Trace:
        _stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack.pop()
        if exc[0] is not None:
            self.active = False

    def param(self, type: Type, weak: bool = False) -> Tracer:
        arg = self.func.body.entry.add_argument(type)
        return Tracer(self, self.builder._v(arg), weak)

    def encloses(self, other: Trace) -> bool:
        t = self.parent
        while t is not None:
            if t is other:
                return True
            t = t.parent
        return False

    def value(self, x: Tracer) -> V:
        """``x``'s value in this function: itself, or a parameter that captures it."""
        if x.trace is self:
            return x.v
        if not (x.trace.active and self.encloses(x.trace)):
            raise TracerError(located_message(
                "a traced value escaped the function it was traced in (kept in a global, or "
                "returned from a function the trace has left): pass it as an argument instead"))
        known = self._captures.get(id(x.v.value))
        if known is None:
            known = self._captures[id(x.v.value)] = self.param(x.v.type, x.weak)
            self.captured.append(x)
        return known.v

    def finish(self, results: Sequence[V]) -> None:
        self.builder.ret(*results)
        entry = self.func.body.entry
        self.func.attributes["function_type"] = TypeAttr(
            FunctionType([a.type for a in entry.args], [r.type for r in results]))
        self.active = False


# -- element types -------------------------------------------------------------------------------


def dtype_of_type(t: Type) -> np.dtype:
    return np.dtype(numpy_dtype(t.element_type if isinstance(t, TensorType) else t))


def irc_type(dtype) -> Type:
    try:
        return type_of_dtype(dtype)
    except TypeError:
        raise TypeError(located_message(f"irc has no element type for numpy dtype {np.dtype(dtype)}")) from None


_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2}


def dtype_and_weak(x) -> tuple[np.dtype, bool]:
    """numpy 2's view of an operand: its dtype, and whether it is a weak Python number."""
    if isinstance(x, Tracer):
        return x.dtype, x.weak
    if isinstance(x, (np.ndarray, np.generic)):  # before float: np.float64 is a float
        return x.dtype, False
    if isinstance(x, bool):
        return np.dtype(np.bool_), True
    if isinstance(x, int):
        return np.dtype(np.int64), True
    if isinstance(x, float):
        return np.dtype(np.float64), True
    raise TypeError(located_message(f"irc cannot trace an operand of type {type(x).__name__}: {x!r:.60}"))


def promote(*xs) -> tuple[np.dtype, bool]:
    """The dtype numpy 2 gives an operation on ``xs`` (NEP 50), and whether it is weak."""
    pairs = [dtype_and_weak(x) for x in xs]
    strong = [d for d, w in pairs if not w]
    weak = [d for d, w in pairs if w]
    if not strong:
        return np.result_type(*weak), True
    dt = np.result_type(*strong)
    for w in weak:  # a weak number of a higher kind (a float with ints) takes its default type
        if _KIND_RANK.get(w.kind, 0) > _KIND_RANK.get(dt.kind, 0):
            dt = np.promote_types(dt, w)
    return dt, False


def operand(trace: Trace, x, dtype: np.dtype | None = None) -> V:
    """``x`` (a tracer, an array, a number) as a value of ``trace``, converted to ``dtype``."""
    b = trace.builder
    if isinstance(x, Tracer):
        v = trace.value(x)
        return convert(b, v, dtype) if dtype is not None else v
    if dtype is None:
        dtype = dtype_and_weak(x)[0]
    elem = irc_type(dtype)
    a = np.asarray(x, dtype=dtype)
    if a.ndim == 0:
        return b.const(a.item(), elem)
    return b.const(a, TensorType(list(a.shape), elem))


def convert(b: Builder, v: V, dtype) -> V:
    """``v`` as elements of ``dtype`` (to bool: ``!= 0``, as numpy's astype)."""
    to = irc_type(dtype)
    if v.elem is to:
        return v
    if isinstance(to, IntegerType) and to.width == 1:
        return v.ne(0)
    return b.convert(v, to)


def as_tensor(b: Builder, v: V) -> V:
    """A scalar value as a 0-d tensor (the tensor ops take tensors only)."""
    if isinstance(v.type, TensorType):
        return v
    return b.splat(v, TensorType([], v.type))


# -- the tracer ----------------------------------------------------------------------------------


class Tracer:
    """An array being traced: numpy's protocols and Python's operators build IR."""

    __slots__ = ("trace", "v", "weak")
    __array_priority__ = 1000

    def __init__(self, trace: Trace, v: V, weak: bool = False):
        self.trace = trace
        self.v = v
        self.weak = weak

    def __repr__(self) -> str:
        shape = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"Tracer<{shape}{'x' if shape else ''}{self.dtype}>"

    # -- what numpy asks of an array -----------------------------------------------------------

    @property
    def shape(self) -> tuple:
        return tuple(self.v.type.shape) if isinstance(self.v.type, TensorType) else ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            if d is None:
                return None
            n *= d
        return n

    @property
    def dtype(self) -> np.dtype:
        return dtype_of_type(self.v.type)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(located_message("len() of a 0-d traced array"))
        if self.shape[0] is None:
            raise TracerError(located_message("len() of a traced array whose first dimension is dynamic"))
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from . import numpy_functions

        return numpy_functions.apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from . import numpy_functions

        return numpy_functions.apply_function(func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        raise TracerError(located_message(
            "a traced array cannot become a numpy array (np.asarray, or a numpy function irc does not "
            "trace, asked for its values): its values exist only when the compiled function runs"))

    def __bool__(self):
        raise TracerError(located_message(
            "the truth value of a traced array is not known while tracing: a Python 'if' or 'while' "
            "on it cannot be compiled; use irc.cond(pred, true_fn, false_fn, *operands) or "
            "irc.while_loop, or np.where for elementwise choices (or mark the argument static)"))

    def _concrete(self, what: str):
        raise TracerError(located_message(
            f"{what}() of a traced array: its value is not known while tracing (mark the argument "
            "static with static_argnums if it must be a Python number)"))

    def __float__(self):
        self._concrete("float")

    def __int__(self):
        self._concrete("int")

    def __index__(self):
        self._concrete("index")

    def __complex__(self):
        self._concrete("complex")

    def item(self):
        self._concrete("item")

    def tolist(self):
        self._concrete("tolist")

    def __setitem__(self, key, value):
        raise TracerError(located_message(
            "traced arrays are immutable: build the new array with np.where, np.concatenate or "
            "np.pad instead of assigning into it"))

    __hash__ = object.__hash__
