"""specialize-shapes: give a function's tensor parameters concrete shapes, and propagate them.

``specialize-shapes{func=mlp shapes=256x1024xf32;1024x1024xf32}`` (one type per
parameter, separated by ``;``; scalars as their type) replaces the parameter
types, then re-infers every result type in program order: tensor ops from their
``infer_type``, elementwise ops from their operands.  ``tensor.dim`` of a
now-static dimension folds to a constant, and an op whose result shape was
given by size operands (broadcast, reshape, splat, iota) takes a static shape
once those sizes are constants, so a whole graph written with ``?`` ends fully
static: fusion, bufferization and memory planning then know every size.
``irc.compile`` does this for the arrays a tensor function is called with.

Shapes that do not fit together (two ``?`` dimensions an elementwise op needs
equal turn out different) are reported at the op, as the interpreter would.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.attributes import TypeAttr
from irc.diagnostics import IRError
from irc.operation import Elementwise
from irc.passmanager import Pass, PipelineError
from irc.patterns import constant_value
from irc.types import FunctionType, TensorType, Type, parse_type

# op name -> index of its first size operand (one per ? of the result)
SIZED_OPS = {"graph.broadcast": 1, "graph.reshape": 1, "graph.splat": 1, "graph.iota": 0}


def specialize(func, arg_types: list[Type]) -> None:
    """Specialise ``func`` to parameters of ``arg_types`` in place (IRError if they do not fit)."""
    params = func.body.entry.args
    if len(arg_types) != len(params):
        raise IRError(f"'@{func.sym_name}' takes {len(params)} parameters, got {len(arg_types)} types", func.loc)
    for i, (a, t) in enumerate(zip(params, arg_types)):
        if not _fits(a.type, t):
            raise IRError(f"parameter {i} of '@{func.sym_name}' is {a.type}; cannot specialise it to {t}", func.loc)
        a.type = t
    resized = False  # ops lost size operands since the last fold: their constants are dead
    for _ in range(8):  # sizes computed from sizes (a reshape of a broadcast...) take a few rounds
        _propagate(func)
        if not _has_sizes_to_fold(func):  # traced with static shapes (irc.jit): nothing to fold
            break
        _fold(func)
        resized = _static_sizes(func)
        if not resized:
            break
    if resized:
        _fold(func)
    _propagate(func)
    results = [v.type for v in func.body.entry.terminator.operands] if func.body.entry.terminator else []
    func.attributes["function_type"] = TypeAttr(FunctionType([a.type for a in params], results))


def _has_sizes_to_fold(func) -> bool:
    """Whether ``func`` reads sizes (``tensor.dim``), gives sizes as operands (a ``?`` of a
    ``SIZED_OPS`` result) or still has a tensor of unknown shape: what ``_fold`` and
    ``_static_sizes`` work on (a canonicalize of the whole module, the cost of this pass)."""
    for op in func.walk():
        if op.name == "tensor.dim" or len(op.operands) > SIZED_OPS.get(op.name, len(op.operands)):
            return True
        if any(isinstance(r.type, TensorType) and not r.type.has_static_shape for r in op.results):
            return True
    return False


def _fits(declared: Type, given: Type) -> bool:
    if not isinstance(declared, TensorType):
        return declared is given
    if not isinstance(given, TensorType) or given.rank != declared.rank or \
            given.element_type is not declared.element_type:
        return False
    return all(d is None or d == g for d, g in zip(declared.shape, given.shape))


def _propagate(func) -> None:
    for op in _in_order(func):
        if op.name in _CONTROL_FLOW:
            _propagate_control_flow(op)
            continue
        if not op.results or not any(isinstance(r.type, TensorType) for r in op.results):
            continue
        infer = getattr(type(op), "infer_type", None)
        if infer is not None:
            try:
                new = infer(op.operand_types, op.attributes, op.results[0].type)
            except ValueError as e:
                raise op.error(str(e)) from None
            op.results[0].type = new
        elif Elementwise in op.traits:
            shape = None
            for v in op.operands:
                if isinstance(v.type, TensorType):
                    shape = v.type.shape if shape is None else _meet(op, shape, v.type.shape)
            if shape is not None:
                r = op.results[0]
                r.type = TensorType(shape, r.type.element_type)


_CONTROL_FLOW = frozenset({"scf.if", "scf.for", "scf.while"})


def _in_order(func):
    """The ops of ``func`` in program order, its scf ops' regions included: an scf op comes
    after its regions (its results' types come from their yields), and a loop's block
    arguments take their types before (``_enter_region``)."""
    for region in func.regions:
        for block in region.blocks:
            yield from _block_in_order(block)


def _block_in_order(block):
    for op in block.ops:
        if op.name in _CONTROL_FLOW:
            for region in op.regions:
                _enter_region(op, region)
                for inner in region.blocks:
                    yield from _block_in_order(inner)
        else:
            yield from op.walk()
            continue
        yield op


def _enter_region(op, region) -> None:
    """A loop's block arguments have the types of the values they receive first."""
    if region.is_empty:
        return
    args = region.entry.args
    if op.name == "scf.for":
        for a, v in zip(args[1:], op.inits):
            a.type = v.type
    elif op.name == "scf.while" and region is op.before:
        for a, v in zip(args, op.operands):
            a.type = v.type
    elif op.name == "scf.while":
        for a, v in zip(args, op.before.entry.terminator.operands[1:]):
            a.type = v.type


def _propagate_control_flow(op) -> None:
    """Result types from the yields; a loop whose carried tensor changes shape cannot run with
    the static shapes of compiled code."""
    if op.name == "scf.if":
        then, other = op.then_region.entry.terminator, op.else_region.entry
        for k, r in enumerate(op.results):
            if isinstance(r.type, TensorType):
                t = then.operands[k].type
                if other is not None:
                    t = TensorType(_meet(op, t.shape, other.terminator.operands[k].type.shape), t.element_type)
                r.type = t
        return
    if op.name == "scf.for":
        yielded, carried, results = op.body.terminator.operands, op.body.args[1:], op.results
    else:
        yielded, carried = op.after.entry.terminator.operands, op.before.entry.args
        results = op.results
        for r, a in zip(results, op.after.entry.args):
            r.type = a.type
    for v, a in zip(yielded, carried):
        if isinstance(a.type, TensorType) and v.type.has_static_shape and a.type.has_static_shape \
                and v.type.shape != a.type.shape:
            raise op.error(f"a carried tensor changes shape from {list(a.type.shape)} to {list(v.type.shape)}: "
                           "compiled code needs one static shape per loop-carried tensor")
    if op.name == "scf.for":
        for r, a in zip(results, carried):
            r.type = a.type


def _meet(op, a, b):
    """The shape two operands of an elementwise op both have; ``?`` agrees with anything."""
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        show = [str(list(s)).replace("None", "?") for s in (a, b)]
        raise op.error(f"operands have different shapes: {show[0]} and {show[1]}")
    return tuple(x if x is not None else y for x, y in zip(a, b))


def _static_sizes(func) -> bool:
    """Ops whose ``?`` result sizes are now constants get a static result and lose those operands."""
    changed = False
    for op in list(func.walk()):
        first = SIZED_OPS.get(op.name)
        if first is None or len(op.operands) <= first:
            continue
        sizes = [constant_value(v) for v in op.operands[first:]]
        if any(c is None for c in sizes):
            continue
        if any(c.value < 0 for c in sizes):
            raise op.error(f"negative size in {[c.value for c in sizes]}")
        it = iter(c.value for c in sizes)
        t = op.results[0].type
        op.results[0].type = t.with_shape([next(it) if d is None else d for d in t.shape])
        op.set_operands(list(op.operands[:first]))
        changed = True
    return changed


def _fold(func) -> None:
    """Fold what the new shapes make constant (``tensor.dim`` of a static dimension, and the
    size arithmetic that uses it), by canonicalizing the module the function is in."""
    from irc.passmanager import Statistics, make_pass

    module = func.parent_op
    if module is not None:
        make_pass("canonicalize").run(module, Statistics())


def parse_shapes(text: str) -> list[Type]:
    """``4x8xf32;f32`` -> [tensor<4x8xf32>, f32]: one type per parameter; a bare shape is a tensor."""
    types = []
    for item in (t.strip() for t in text.split(";")):
        if not item:
            continue
        try:
            types.append(parse_type(f"tensor<{item}>" if "x" in item and "<" not in item else item))
        except (IRError, ValueError) as e:
            raise PipelineError(f"specialize-shapes: bad type '{item}' in 'shapes': {e}") from None
    return types


@dataclass
class SpecializeShapes(Pass):
    """Specialise a function to concrete parameter shapes and propagate them through the graph."""

    name = "specialize-shapes"
    func: str = ""
    shapes: str = ""

    def __post_init__(self):
        if bool(self.func) != bool(self.shapes):
            raise PipelineError("specialize-shapes needs both func=NAME and shapes=TYPE;TYPE;...")
        self.types = parse_shapes(self.shapes)

    def triggers(self):
        return None if self.func else frozenset()  # without a function to specialise it does nothing

    def run(self, module, stats) -> None:
        if not self.func:  # nothing asked for (as when every pass runs with its defaults)
            return
        target = next((f for f in module.functions if f.sym_name == self.func), None)
        if target is None:
            raise IRError(f"specialize-shapes: no function '@{self.func}' in the module", module.loc)
        specialize(target, self.types)
        stats.add("functions-specialized")
