"""``irc.jit``: trace a numpy function once per signature, compile it, call machine code.

A *signature* is the structure of the dynamic arguments (an ``irc.pytree`` TreeDef), each
leaf's shape and dtype (and whether it is a weak Python number), and the values of the
static arguments.  The first call with a signature traces the function into a module
(``Traced``) and compiles it with ``irc.compile``; later calls with the same signature go
straight to the compiled function.  ``irc.compile`` keeps machine code on disk keyed by
the lowered program, so a new process that traces the same function again loads machine
code instead of running LLVM.
"""

from __future__ import annotations

import operator
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np

from irc import pytree
from irc.types import TensorType

from .locations import located_message, source_file, user_frame, user_stacklevel
from .tracer import Trace, Tracer, current, dtype_of_type, irc_type, operand

_SHAPE_AND_DTYPE = operator.attrgetter("shape", "dtype")  # an array call's key, without a Python frame


class RetraceWarning(UserWarning):
    """A jitted function was traced again because an argument's shape, dtype or static value
    changed; the message names the argument.  Silence with ``warnings.simplefilter``."""


@dataclass
class Traced:
    """A traced function: ``module`` holds ``entry`` (and the functions it calls);
    ``in_tree`` is the structure of the dynamic arguments as a tuple (static ones left out),
    ``out_tree`` that of the result; ``in_avals`` the (shape, dtype, weak) of each leaf."""

    module: object
    entry: str
    in_tree: pytree.TreeDef
    out_tree: pytree.TreeDef
    in_avals: list = field(default_factory=list)
    static_args: tuple = ()


def aval(leaf, path: str, dynamic_shapes: bool = False) -> tuple:
    """(shape, dtype, weak) of an argument leaf; ``?`` (None) sizes with ``dynamic_shapes``."""
    if isinstance(leaf, Tracer):
        return leaf.shape, leaf.dtype, leaf.weak
    if isinstance(leaf, (np.ndarray, np.generic)):  # before float: np.float64 is a float
        shape = tuple(None for _ in leaf.shape) if dynamic_shapes else leaf.shape
        return shape, leaf.dtype, False
    if isinstance(leaf, bool):
        return (), np.dtype(np.bool_), True
    if isinstance(leaf, int):
        return (), np.dtype(np.int64), True
    if isinstance(leaf, float):
        return (), np.dtype(np.float64), True
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):  # shape and dtype without data (trace only)
        shape = tuple(None for _ in leaf.shape) if dynamic_shapes else tuple(leaf.shape)
        return shape, np.dtype(leaf.dtype), False
    raise TypeError(located_message(f"argument {path} is a {type(leaf).__name__}; irc.jit takes numpy arrays, "
                                    "Python numbers, and dicts, lists and tuples of them (mark other "
                                    "arguments static with static_argnums)"))


def type_of(a) -> object:
    shape, dtype, _ = a
    elem = irc_type(dtype)
    return TensorType(list(shape), elem) if shape else elem


def split_args(args: tuple, static_argnums: tuple) -> tuple[tuple, tuple]:
    static = tuple((i, args[i]) for i in static_argnums if i < len(args))
    dynamic = tuple(a for i, a in enumerate(args) if i not in static_argnums)
    return dynamic, static


def merge_args(dynamic, static: tuple) -> list:
    out = list(dynamic)
    for i, v in static:
        out.insert(i, v)
    return out


def trace_into(module, fn, args: tuple, static_argnums: tuple = (), name: str | None = None,
               parent: Trace | None = None, dynamic_shapes: bool = False) -> tuple[Trace, Traced]:
    """Trace ``fn(*args)`` as a new function of ``module``: one parameter per leaf of the
    dynamic arguments (the static ones are passed to ``fn`` as they are)."""
    dynamic, static = split_args(args, static_argnums)
    leaves, in_tree = pytree.flatten(dynamic)
    paths = pytree.leaf_paths(in_tree)
    avals = [aval(leaf, p, dynamic_shapes) for leaf, p in zip(leaves, paths)]
    trace = Trace(module, name or getattr(fn, "__name__", "f"), parent)
    with trace:
        params = [trace.param(type_of(a), a[2]) for a in avals]
        for param, hint in zip(params, _param_names(fn, args, static_argnums, paths)):
            param.v.value.name_hint = hint  # the printed IR says %params_w1, not %2
        out = fn(*merge_args(in_tree.unflatten(params), static))
        out_leaves, out_tree = pytree.flatten(out)
        results = [operand(trace, leaf) for leaf in out_leaves]
        trace.finish(results)
    return trace, Traced(module, trace.name, in_tree, out_tree, avals, static)


def _param_names(fn, args: tuple, static_argnums: tuple, paths: list[str]) -> list[str]:
    """A readable name per leaf: the Python parameter's name, then the leaf's dict keys and list
    positions (``params_w1``, ``x``), with anything not a name character made ``_``."""
    import inspect
    import re

    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    dynamic = [i for i in range(len(args)) if i not in static_argnums]
    out = []
    for path in paths:
        head, _, rest = path.partition(".")
        position = dynamic[int(head)] if head.isdigit() and int(head) < len(dynamic) else None
        base = names[position] if position is not None and position < len(names) else f"arg{head}"
        out.append(re.sub(r"\W", "_", f"{base}_{rest}" if rest else base))
    return out


def _describe(a) -> str:
    """A cache key's leaf (``_key_aval``) as the retrace warning shows it: ``float32[4, 3]``."""
    if len(a) == 2:  # not an array: tracing it is the error that follows
        return f"a {a[1].__name__}"
    shape, dtype, weak = a
    if isinstance(shape, int):  # traced with ? sizes: only the rank is in the key
        shape = (None,) * shape
    name = dtype.__name__ if isinstance(dtype, type) else str(dtype)
    return f"{'weak ' if weak else ''}{name}[{', '.join('?' if d is None else str(d) for d in shape)}]"


@dataclass
class Specialization:
    traced: Traced
    function: object  # the compiled entry
    out_types: list
    donate: list  # leaf indices of donated inputs


class Jitted:
    """What ``irc.jit(fn)`` returns: call it like ``fn``; ``lower``/``trace`` show the IR.

    ``trace_count`` counts traces; ``last_retrace`` says why the latest retrace happened
    (the argument whose shape, dtype or static value changed), also issued as a
    ``RetraceWarning``."""

    def __init__(self, fn, static_argnums=(), donate_argnums=(), target: str = "cpu",
                 dynamic_shapes: bool = False, **compile_options):
        self.fn = fn
        self.static_argnums = _argnums(static_argnums, "static_argnums")
        self.donate_argnums = _argnums(donate_argnums, "donate_argnums")
        if set(self.static_argnums) & set(self.donate_argnums):
            raise ValueError("an argument cannot be both static and donated")
        self.target = target
        self.dynamic_shapes = dynamic_shapes
        self.compile_options = compile_options
        self._cache: dict = {}
        # Calls whose arguments are all numpy arrays of rank >= 1 (the common case) skip the
        # pytree and key building: their shapes and dtypes map straight to the compiled entry.
        self._array_calls: dict = {}
        self._arrays_only = not self.static_argnums and not self.donate_argnums and not dynamic_shapes
        # The entry of the latest array call that returned a lone array, made to check the
        # arguments' types, dtypes and shapes itself (``TensorFunction.entry``'s ``elsewhere``),
        # per key of ``_array_calls``; ``_latest`` is tried first (no key, no lookup).
        self._latest_entries: dict = {}
        self._latest = None
        self._latest_arity = -1
        self.trace_count = 0
        self.last_retrace: str | None = None
        self.__name__ = getattr(fn, "__name__", "jitted")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<irc.jit of {self.__name__}>"

    # -- tracing ------------------------------------------------------------------------------

    def trace(self, *args) -> Traced:
        """Trace for ``args`` (arrays or anything with shape and dtype) without compiling."""
        import irc
        from irc.module import ModuleOp

        module = ModuleOp.new()
        frame = user_frame()
        if frame is not None:
            module.source = source_file(frame.f_code.co_filename)
        _, traced = trace_into(module, self.fn, args, self.static_argnums, self.__name__,
                               dynamic_shapes=self.dynamic_shapes)
        self.trace_count += 1
        irc.verify(module)
        return traced

    def lower(self, *args):
        """The traced module for ``args`` (graph level: what ``irc.compile`` takes)."""
        return self.trace(*args).module

    # -- calling --------------------------------------------------------------------------------

    def __call__(self, *args):
        # The latest array call's entry first, whatever the arguments: it checks them itself and
        # hands anything else (other shapes or dtypes, not arrays) to ``_lookup``.  Not while a
        # trace runs: a call inside one is traced in line.
        latest = self._latest
        if latest is not None and len(args) == self._latest_arity and current() is None:
            return latest(*args)
        return self._lookup(args)

    def _lookup(self, args):
        """The call found by the arguments' signature: the array call of their shapes and dtypes
        (which becomes the latest, where it has an entry for that), else the pytree's key."""
        if self._arrays_only:
            try:
                key = tuple(map(_SHAPE_AND_DTYPE, args))  # the entry checks their types
            except AttributeError:
                key = None
            call = self._array_calls.get(key)
            if call is not None and current() is None:
                latest = self._latest_entries.get(key)
                if latest is not None:
                    self._latest, self._latest_arity = latest, len(args)
                return call(*args)
        if current() is not None:  # inside another trace: trace fn in line
            return self.fn(*args)
        dynamic, static = split_args(args, self.static_argnums)
        leaves, in_tree = pytree.flatten(dynamic)
        key = (in_tree, tuple(_key_aval(x, self.dynamic_shapes) for x in leaves), _hashable(static))
        spec = self._cache.get(key)
        if spec is None:
            spec = self._specialize(key, args)
            result = self._run(spec, leaves)  # compiles the specialisation the array call uses
            if self._arrays_only and all(type(a) is np.ndarray and a.ndim for a in args) \
                    and all(isinstance(t, TensorType) for t in spec.out_types):
                shapes = tuple(a.shape for a in args)
                key = tuple((a.shape, a.dtype) for a in args)
                self._array_calls[key] = self._array_call(spec, shapes)
                latest = self._latest_entry(spec, shapes)
                if latest is not None:
                    self._latest_entries[key] = latest
                    self._latest, self._latest_arity = latest, len(args)
            return result
        return self._run(spec, leaves)

    @staticmethod
    def _array_call(spec: Specialization, shapes: tuple):
        """The call for array arguments of ``shapes`` (and the dtypes of the cache key): the
        compiled entry (``TensorFunction.entry``), its results put back in the result's structure
        (a lone array returned as it is)."""
        function, out_tree = spec.function, spec.traced.out_tree
        entry = getattr(function, "entry", None)
        if entry is not None:
            function = entry(shapes)
        if len(spec.out_types) == 1 and out_tree.kind == "leaf":
            return function
        if len(spec.out_types) == 1:
            return lambda *args: out_tree.unflatten((function(*args),))
        return lambda *args: out_tree.unflatten(function(*args) or ())

    def _latest_entry(self, spec: Specialization, shapes: tuple):
        """The compiled entry for array arguments of ``shapes`` that checks them itself (their
        types, dtypes and shapes) and hands the calls it refuses to ``_lookup``; None unless the
        result is a lone array (the entry returns it as it is)."""
        entry = getattr(spec.function, "entry", None)
        if entry is None or len(spec.out_types) != 1 or spec.traced.out_tree.kind != "leaf":
            return None
        me = weakref.ref(self)  # the entry lives on this object: no cycle through its closure
        made = entry(shapes, elsewhere=lambda *args: me()._lookup(args))
        return None if made is spec.function else made

    def _specialize(self, key, args) -> Specialization:
        import irc

        if self._cache:
            self._report_retrace(key)
        traced = self.trace(*args)
        exe = irc.compile(traced.module, target=self.target, **self.compile_options)
        func = traced.module.lookup(traced.entry)
        donate = []
        if self.donate_argnums:
            dynamic_positions = [i for i in range(len(args)) if i not in self.static_argnums]
            offset = 0
            for pos, arg in zip(dynamic_positions, split_args(args, self.static_argnums)[0]):
                n = pytree.flatten(arg)[1].num_leaves
                if pos in self.donate_argnums:
                    donate.extend(range(offset, offset + n))
                offset += n
        spec = Specialization(traced, exe[traced.entry], list(func.function_type.results), donate)
        self._cache[key] = spec
        return spec

    def _report_retrace(self, key) -> None:
        in_tree, avals, static = key
        same_tree = [k for k in self._cache if k[0] == in_tree]
        if not same_tree:
            previous = next(reversed(self._cache))[0]
            why = f"the structure of the arguments changed from {previous} to {in_tree}"
        else:
            prev = same_tree[-1]
            paths = pytree.leaf_paths(in_tree)
            changes = [f"argument {p}: {_describe(a)} -> {_describe(b)}"
                       for p, a, b in zip(paths, prev[1], avals) if a != b]
            changes += [f"static argument {i}: {a!r:.40} -> {b!r:.40}"
                        for (i, a), (_, b) in zip(prev[2], static) if a != b]
            why = "; ".join(changes) or "a new signature"
        self.last_retrace = f"irc.jit({self.__name__}) traces again: {why}"
        warnings.warn(self.last_retrace, RetraceWarning, stacklevel=user_stacklevel())

    def _run(self, spec: Specialization, leaves: list):
        flat = [_argument(x) for x in leaves]
        out = None
        if spec.donate:
            out = _donated_outputs(spec, flat)
        results = spec.function(*flat, out=out) if out is not None else spec.function(*flat)
        if len(spec.out_types) == 1:
            results = (results,)
        elif results is None:
            results = ()
        values = [r if isinstance(t, TensorType) else np.asarray(r, dtype_of_type(t))
                  for r, t in zip(results, spec.out_types)]
        return spec.traced.out_tree.unflatten(values)


def _argnums(value, what: str) -> tuple:
    if isinstance(value, int):
        return (value,)
    try:
        return tuple(int(v) for v in value)
    except TypeError:
        raise TypeError(f"irc.jit: {what} must be an int or a tuple of ints, got {value!r}") from None


def _key_aval(x, dynamic_shapes: bool):
    if isinstance(x, np.ndarray):
        return (len(x.shape) if dynamic_shapes else x.shape, x.dtype, False)
    if isinstance(x, np.generic):
        return ((), x.dtype, False)
    if isinstance(x, (bool, int, float)):
        return ((), type(x), True)
    return ("not an array", type(x))  # tracing names the argument (aval)


def _hashable(static: tuple) -> tuple:
    try:
        hash(static)
    except TypeError:
        raise TypeError(located_message("irc.jit: static arguments must be hashable (they key the cache), got "
                                        + ", ".join(type(v).__name__ for _, v in static))) from None
    return static


def _argument(x):
    if isinstance(x, np.generic) or (isinstance(x, np.ndarray) and x.ndim == 0):
        return x.item()
    return x


def _donated_outputs(spec: Specialization, flat: list):
    """The output buffers of a call: a donated input of the same shape and dtype where there is
    one (each used once), a new array elsewhere."""
    free = [i for i in spec.donate if isinstance(flat[i], np.ndarray) and flat[i].flags.c_contiguous
            and flat[i].flags.writeable]
    outs = []
    for t in spec.out_types:
        if not isinstance(t, TensorType):
            continue
        if not t.has_static_shape:
            return None
        shape, dtype = tuple(t.shape), dtype_of_type(t)
        hit = next((i for i in free if flat[i].shape == shape and flat[i].dtype == dtype), None)
        if hit is None:
            outs.append(np.empty(shape, dtype))
        else:
            free.remove(hit)
            outs.append(flat[hit])
    return outs or None


def jit(fn=None, *, static_argnums=(), donate_argnums=(), target: str = "cpu", dynamic_shapes: bool = False,
        **compile_options):
    """Trace ``fn`` into the tensor-level IR, compile it, and cache one specialisation per
    signature (see the module docstring and docs/frontend.md); usable as ``@irc.jit`` or
    ``@irc.jit(static_argnums=1)``."""
    if fn is None:
        return lambda f: Jitted(f, static_argnums, donate_argnums, target, dynamic_shapes, **compile_options)
    return Jitted(fn, static_argnums, donate_argnums, target, dynamic_shapes, **compile_options)
