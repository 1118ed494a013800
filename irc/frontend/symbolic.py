"""The symbolic style: ``irc.var``, expressions of vars, ``irc.function``, ``irc.gradients``.

    a = irc.var("a", (10,), "f32")
    b = irc.var("b", (10,), "f32")
    d = np.sum(np.tanh(a) * b)                 # an expression: nothing is computed yet
    da, db = irc.gradients(d, [a, b])           # expressions too
    f = irc.function([d, da, db])               # compiled on first call
    value, ga, gb = f(a=x, b=y)

An expression records what was applied to what (numpy's dispatch protocols and Python's
operators, exactly the calls a tracer takes), nothing more.  ``irc.function`` turns the
recorded graph back into a Python function of the vars and hands it to ``irc.jit``: the
tracer then builds the IR, so vars and expressions take the same numpy functions and
methods as traced arrays, and the same errors.  A gradient expression evaluates through
``irc.grad`` of the function that the loss expression is of its ``wrt`` vars.
"""

from __future__ import annotations

import operator

import numpy as np

from irc import pytree

from .jit import Jitted
from .locations import located_message


class Sym:
    """A var (``op`` is None) or an expression: ``op`` applied to ``args`` and ``kwargs``.

    ``op`` is ("ufunc", ufunc), ("function", f), ("method", name), ("attribute", name) or
    ("grad", k): the k-th gradient of ``args[0]`` with respect to the vars ``args[1]``."""

    __slots__ = ("op", "args", "kwargs", "name", "_aval", "__weakref__")

    def __init__(self, op, args=(), kwargs=None, name: str | None = None, aval=None):
        self.op = op
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.name = name
        self._aval = aval

    def __repr__(self) -> str:
        if self.op is None:
            return f"var({self.name!r}, {self.shape}, {self.dtype})"
        kind, what = self.op
        return f"<irc expression: {getattr(what, '__name__', what)}(...)>"

    # -- shape and dtype, found by tracing the expression -------------------------------------------

    @property
    def aval(self) -> tuple:
        if self._aval is None:
            variables = free_vars([self])
            traced = Jitted(lambda env: evaluate([self], env)[0]).trace(
                {v.name: _ShapeDtype(*v.aval) for v in variables})
            entry = traced.module.lookup(traced.entry)
            from .tracer import dtype_of_type

            t = entry.function_type.results[0]
            self._aval = (tuple(getattr(t, "shape", ())), dtype_of_type(t))
        return self._aval

    @property
    def shape(self) -> tuple:
        return self.aval[0]

    @property
    def dtype(self) -> np.dtype:
        return self.aval[1]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    # -- recording ------------------------------------------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            raise TypeError(located_message(f"irc cannot trace numpy.{ufunc.__name__}.{method}"))
        return Sym(("ufunc", ufunc), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return Sym(("function", func), args, kwargs)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(located_message("a symbolic expression has no values: compile it with irc.function"))

    def __bool__(self):
        raise TypeError(located_message("the truth value of a symbolic expression is not known: use irc.cond "
                                        "or np.where"))

    def __getitem__(self, key):
        return Sym(("method", "__getitem__"), (self, key))

    @property
    def T(self):
        return Sym(("attribute", "T"), (self,))

    __hash__ = object.__hash__


def _method(name: str):
    def record(self, *args, **kwargs):
        return Sym(("method", name), (self, *args), kwargs)

    record.__name__ = name
    return record


for _name in ("sum", "mean", "max", "min", "prod", "reshape", "astype", "transpose", "clip", "dot", "ravel",
              "flatten", "squeeze"):
    setattr(Sym, _name, _method(_name))
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide, "pow": np.power,
           "matmul": np.matmul, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}
for _name, _ufunc in _BINARY.items():
    setattr(Sym, f"__{_name}__", (lambda u: lambda self, other: Sym(("ufunc", u), (self, other)))(_ufunc))
    if _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(Sym, f"__r{_name}__", (lambda u: lambda self, other: Sym(("ufunc", u), (other, self)))(_ufunc))
Sym.__neg__ = lambda self: Sym(("ufunc", np.negative), (self,))
Sym.__abs__ = lambda self: Sym(("ufunc", np.absolute), (self,))
del _name, _ufunc


class _ShapeDtype:
    """Shape and dtype without data: what ``Jitted.trace`` needs of an argument."""

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)


def var(name: str, shape=(), dtype="f32") -> Sym:
    """A named input of a symbolic program, of static ``shape`` and ``dtype`` (an irc element
    type name such as "f32", or a numpy dtype)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"irc.var: the name must be a non-empty string, got {name!r}")
    try:
        shape = (operator.index(shape),) if isinstance(shape, (int, np.integer)) \
            else tuple(operator.index(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError(f"irc.var({name!r}): the shape must be a tuple of sizes, got {shape!r}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"irc.var({name!r}): sizes must not be negative, got shape {shape}")
    try:
        dtype = _dtype(dtype)
    except TypeError:
        raise TypeError(f"irc.var({name!r}): unknown dtype {dtype!r} (an irc element type such as 'f32', "
                        "or a numpy dtype)") from None
    return Sym(None, name=name, aval=(shape, dtype))


def _dtype(dtype) -> np.dtype:
    if isinstance(dtype, str):
        from irc.types import numpy_dtype, parse_type

        try:
            return np.dtype(numpy_dtype(parse_type(dtype)))
        except Exception:  # noqa: BLE001 - not an irc type name: let numpy read it
            pass
    return np.dtype(dtype)


def gradients(loss: Sym, wrt) -> list[Sym]:
    """Symbolic gradients of the scalar expression ``loss`` with respect to each var of ``wrt``."""
    wrt = list(wrt)
    for v in wrt:
        if not isinstance(v, Sym) or v.op is not None:
            raise TypeError(located_message(f"irc.gradients: wrt must list vars, got {v!r}"))
    if not isinstance(loss, Sym):
        raise TypeError(located_message(f"irc.gradients: the loss must be an expression of vars, got {loss!r}"))
    if loss.shape != () or loss.dtype.kind != "f":  # said here, not when the gradient is first compiled
        raise TypeError(located_message(f"irc.gradients: the loss must be a float scalar, got "
                                        f"{loss.dtype}[{', '.join(map(str, loss.shape))}]"))
    return [Sym(("grad", k), (loss, tuple(wrt))) for k in range(len(wrt))]


def free_vars(outputs) -> list[Sym]:
    """The vars the expressions depend on, by name (two vars of one name are an error)."""
    found: dict[str, Sym] = {}
    for node in _postorder(outputs):
        if node.op is None:
            other = found.setdefault(node.name, node)
            if other is not node:
                raise ValueError(f"two different vars are named {node.name!r}")
    return [found[k] for k in sorted(found)]


def _children(node: Sym) -> list[Sym]:
    leaves = pytree.flatten((list(node.args), node.kwargs))[0] if node.op is not None else []
    return [x for x in leaves if isinstance(x, Sym)]


def _postorder(outputs) -> list[Sym]:
    """Every expression reachable from ``outputs``, operands first (iterative: deep graphs)."""
    order, seen = [], set()
    stack = [(x, False) for x in outputs if isinstance(x, Sym)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in seen)
    return order


def evaluate(outputs, env: dict) -> list:
    """The values of ``outputs`` with each var bound to ``env[name]`` (arrays, or tracers)."""
    values: dict[int, object] = {}

    def value(x):
        return values[id(x)] if isinstance(x, Sym) else x

    for node in _postorder(outputs):
        if node.op is None:
            values[id(node)] = env[node.name]
            continue
        kind, what = node.op
        leaves, tree = pytree.flatten((list(node.args), node.kwargs))
        args, kwargs = tree.unflatten([value(a) for a in leaves])
        if kind == "ufunc" or kind == "function":
            values[id(node)] = what(*args, **kwargs)
        elif kind == "method":
            values[id(node)] = getattr(args[0], what)(*args[1:], **kwargs)
        elif kind == "attribute":
            values[id(node)] = getattr(args[0], what)
        else:
            values[id(node)] = _gradient(node, what, env, values)
    return [value(x) for x in outputs]


def _gradient(node: Sym, k: int, env: dict, values: dict):
    loss, wrt = node.args
    key = ("grad", id(loss), tuple(id(v) for v in wrt))
    grads = values.get(key)
    if grads is None:
        from .transforms import grad

        def loss_of(*bound):
            return evaluate([loss], {**env, **{v.name: b for v, b in zip(wrt, bound)}})[0]

        loss_of.__name__ = "loss"
        grads = values[key] = grad(loss_of, argnums=tuple(range(len(wrt))))(*[env[v.name] for v in wrt])
    return grads[k]


class Function:
    """``irc.function(outputs)``: call with the vars as keyword arguments (``f(a=x, b=y)``);
    returns the outputs' values in the structure given (one expression, a list, a dict)."""

    def __init__(self, outputs):
        self.outputs = outputs
        leaves, self._tree = pytree.flatten(outputs)
        self._leaves = leaves
        self.vars = free_vars(leaves)
        tree, nodes = self._tree, leaves
        self._jitted = Jitted(lambda env: tree.unflatten(evaluate(nodes, env)))
        self._jitted.__name__ = "function"

    def __repr__(self) -> str:
        return f"<irc.function of {', '.join(v.name for v in self.vars)}>"

    def __call__(self, **inputs):
        names = {v.name for v in self.vars}
        missing = sorted(names - inputs.keys())
        extra = sorted(inputs.keys() - names)
        if missing or extra:
            raise TypeError(located_message(
                "irc.function: " + "; ".join(([f"missing values for {', '.join(missing)}"] if missing else [])
                                             + ([f"no vars named {', '.join(extra)}"] if extra else []))))
        env = {}
        for v in self.vars:
            x = inputs[v.name]
            a = np.asarray(x)
            shape, dtype = v.aval
            if a.dtype != dtype:
                raise TypeError(located_message(f"irc.function: var {v.name!r} is {dtype}{list(shape)}, got "
                                                f"{a.dtype}{list(a.shape)}"))
            if a.shape != shape:
                raise ValueError(located_message(f"irc.function: var {v.name!r} has shape {list(shape)}, got "
                                                 f"{list(a.shape)}"))
            env[v.name] = x if isinstance(x, np.ndarray) else a
        return self._jitted(env)

    def lower(self):
        """The module these outputs compile to (the vars are the entry's parameters, sorted by name)."""
        return self._jitted.lower({v.name: _ShapeDtype(*v.aval) for v in self.vars})


def function(outputs) -> Function:
    """A compiled function of the vars that ``outputs`` (an expression, or a list, tuple or dict
    of them) depend on; see the module docstring."""
    return Function(outputs)
