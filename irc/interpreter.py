"""The reference interpreter: runs any function of irc's dialects with numpy semantics.

It is the oracle every pass and backend is checked against, so it favours being
obviously right over being fast.  Each op supplies ``interpret(interp, args)``;
the interpreter itself only walks the CFG, evaluates phis as a parallel copy
on entry to a block, and converts values at the call boundary.

Runtime faults (integer division by zero, an out-of-bounds access, a failed
``cf.assert``) raise ``InterpreterError`` at the faulting op's location.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import numpy as np

from .checks import plain_array
from .diagnostics import InterpreterError, IRError
from .operation import Operation
from .semantics import Buffer, Fault, float_dtype, wrap
from .types import FloatType, IndexType, IntegerType, MemRefType, TensorType, Type, numpy_dtype

# The deepest chain of calls a program may make, here and in compiled code alike,
# so that unbounded recursion is an error at the call, never a crashed process.
MAX_CALL_DEPTH = 10_000


@contextmanager
def _python_stack_for(depth: int):
    """Raise Python's recursion limit enough for ``depth`` nested irc calls (about
    six Python frames each), and restore it afterwards."""
    old = sys.getrecursionlimit()
    needed = depth * 8 + 1000
    if needed > old:
        sys.setrecursionlimit(needed)
    try:
        yield
    finally:
        if needed > old:
            sys.setrecursionlimit(old)


class Interpreter:
    """Runs functions of one module.  ``max_steps`` bounds the ops executed (None: no bound)."""

    def __init__(self, module, max_steps: int | None = None, max_depth: int = MAX_CALL_DEPTH):
        from .checks import check_module, check_type

        check_module("Interpreter", "module", module)
        if max_steps is not None:
            check_type("Interpreter", "max_steps", max_steps, int)
        check_type("Interpreter", "max_depth", max_depth, int)
        self.module = module
        self.symbols = module.symbol_table()
        self.max_steps = max_steps
        self.max_depth = max_depth
        self.steps = 0
        self.globals: dict = {}  # memref.global op -> its Buffer, made at the first memref.get_global
        self.depth = 0
        self.env: dict = {}  # values of the function being run; nested regions share it

    # -- entry point ---------------------------------------------------------------------

    def run(self, name: str, *args):
        """Call function ``name`` with Python/numpy arguments; return Python/numpy results."""
        from .checks import check_type

        check_type("Interpreter.run", "name", name, str)
        func = self.module.function(name)
        ft = func.function_type
        if len(args) != len(ft.inputs):
            raise TypeError(f"@{name} takes {len(ft.inputs)} argument(s) ({', '.join(map(str, ft.inputs))}), "
                            f"got {len(args)}")
        with np.errstate(all="ignore"), _python_stack_for(self.max_depth):
            # e.g. 1e300 passed as an f32 becomes inf, as IEEE says
            values = [to_runtime(a, t, f"argument {i} of @{name}") for i, (a, t) in enumerate(zip(args, ft.inputs))]
            results = self.call(name, values)
        out = tuple(from_runtime(v, t) for v, t in zip(results, ft.results))
        if len(out) == 1:
            return out[0]
        return out if out else None

    # -- what ops call ------------------------------------------------------------------------

    def fault(self, op: Operation, message: str) -> InterpreterError:
        return InterpreterError(message, op.loc)

    def call(self, name: str, args: list, call_op: Operation | None = None) -> list:
        func = self.symbols.get(name)
        if func is None or func.name != "func.func":
            raise IRError(f"call to unknown function '@{name}'", call_op.loc if call_op else None)
        if func.is_declaration:
            raise InterpreterError(f"'@{name}' is only declared; the interpreter has no body to run",
                                   (call_op or func).loc)
        self.depth += 1
        if self.depth > self.max_depth:
            self.depth = 0
            raise InterpreterError(f"call depth exceeds {self.max_depth} (unbounded recursion?)",
                                   (call_op or func).loc)
        try:
            env: dict = {}
            _, results = self.run_region(func.body, args, env)
        finally:
            self.depth -= 1
        return results

    def run_region(self, region, args: list, env: dict | None = None):
        """Run a region from its entry block; return (terminator, its operand values).

        Control leaves the region at a terminator without successors (func.return,
        scf.yield, scf.condition).  ``env`` maps Values to runtime values and is
        shared with nested regions, which see the enclosing values.
        """
        outer = self.env
        self.env = env = {} if env is None else env
        try:
            return self._run_blocks(region, args, env)
        finally:
            self.env = outer

    def _run_blocks(self, region, args: list, env: dict):
        block = region.entry
        for a, v in zip(block.args, args):
            env[a] = v
        prev = None
        max_steps = self.max_steps
        while True:
            op = block.first_op
            # Phis read all their incoming values first, then define them (a parallel copy).
            if op is not None and op.name == "cf.phi":
                phis = []
                while op is not None and op.name == "cf.phi":
                    phis.append(op)
                    op = op.next
                incoming = []
                for phi in phis:
                    value = phi.value_for(prev)
                    if value is None:
                        raise self.fault(phi, f"has no incoming value for '^{prev.label if prev else '?'}'")
                    incoming.append(env[value])
                for phi, v in zip(phis, incoming):
                    env[phi.results[0]] = v
            while op is not None:
                if max_steps is not None:
                    self.steps += 1
                    if self.steps > max_steps:
                        raise self.fault(op, f"step limit of {max_steps} ops exceeded (infinite loop?)")
                if op.is_terminator:
                    name = op.name
                    if name == "cf.br":
                        prev, block = block, op.successors[0]
                        break
                    if name == "cf.cond_br":
                        prev = block
                        block = op.successors[0] if env[op.operands[0]] else op.successors[1]
                        break
                    if name == "cf.switch":
                        prev, block = block, op.interpret_successor(env[op.operands[0]])
                        break
                    return op, [env[v] for v in op.operands]
                try:
                    results = op.interpret(self, [env[v] for v in op.operands])
                except Fault as e:
                    raise self.fault(op, str(e)) from None
                except (InterpreterError, IRError):
                    raise
                except AttributeError:
                    if not hasattr(op, "interpret"):
                        raise self.fault(op, f"the interpreter does not know '{op.name}'") from None
                    raise
                for r, v in zip(op.results, results):
                    env[r] = v
                op = op.next
            else:
                raise InterpreterError("block ends without a terminator", block.loc)


def interpret(module, name: str, *args, max_steps: int | None = None):
    """Run ``@name`` of ``module`` on the reference interpreter."""
    from .checks import check_module, check_type

    check_module("irc.interpret", "module", module)
    check_type("irc.interpret", "name", name, str)
    if max_steps is not None:
        check_type("irc.interpret", "max_steps", max_steps, int)
    return Interpreter(module, max_steps=max_steps).run(name, *args)


# -- the call boundary ---------------------------------------------------------------------


def to_runtime(x, t: Type, what: str):
    """A Python or numpy argument as the runtime value of type ``t``; TypeError/ValueError if it is not one."""
    if isinstance(t, (IntegerType, IndexType)):
        if isinstance(x, (bool, np.bool_)):
            x = int(x)
        if not isinstance(x, (int, np.integer)):
            raise TypeError(f"{what} must be an integer for {t}, got {type(x).__name__}")
        x = int(x)
        w = 64 if isinstance(t, IndexType) else t.width
        if not -(1 << (w - 1)) - (w == 1) <= x < (1 << w):
            raise ValueError(f"{what}: {x} does not fit in {t}")
        return wrap(x, t)
    if isinstance(t, FloatType):
        if not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, bool):
            raise TypeError(f"{what} must be a number for {t}, got {type(x).__name__}")
        from .semantics import round_to

        return round_to(np.float64(x), t)
    if isinstance(t, (MemRefType, TensorType)):
        x = plain_array(what, x, t)
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{what} must be a numpy array for {t}, got {type(x).__name__}")
        elem = t.element_type
        expected = np.dtype(np.bool_) if getattr(elem, "width", 0) == 1 and not isinstance(elem, FloatType) \
            else np.dtype(float_dtype(elem)) if isinstance(elem, FloatType) else numpy_dtype(elem)
        if x.dtype != expected:
            raise TypeError(f"{what} must have dtype {expected} for {t}, got {x.dtype}")
        if x.ndim != t.rank or any(d is not None and d != n for d, n in zip(t.shape, x.shape)):
            raise ValueError(f"{what} must have shape {_shape_text(t)}, got {list(x.shape)}")
        if isinstance(t, MemRefType):
            if not x.flags.c_contiguous:
                raise ValueError(f"{what} must be C-contiguous for {t}")
            return Buffer(x, t)
        return x
    raise TypeError(f"{what}: arguments of type {t} are not supported")


def _shape_text(t) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"


def from_runtime(v, t: Type):
    if isinstance(t, IntegerType) and t.width == 1:
        return bool(v)
    if isinstance(t, (IntegerType, IndexType)):
        return int(v)
    if isinstance(t, FloatType):
        return float(v)
    if isinstance(v, Buffer):
        return v.array
    return v
