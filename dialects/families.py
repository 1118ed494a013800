"""Op families shared by dialects: one base class per assembly form and type rule.

A concrete op only names itself, its traits and its scalar semantics::

    class AddIOp(IntBinaryOp):
        name = "arith.addi"
        traits = BINARY_COMMUTATIVE
        compute = staticmethod(lambda a, b, t: wrap(a + b, t))

``compute`` takes runtime values (see ``irc.semantics``) - scalars or numpy
arrays alike - plus the element type, and is shared by folding and the
interpreter.  Elementwise ops apply to scalars and to tensors of equal shape.
"""

from __future__ import annotations

import numpy as np

from irc.diagnostics import IRError
from irc.operation import Elementwise, Operation, Pure, SameOperandsAndResultType
from irc.semantics import Fault, attr_to_value, value_to_attr
from irc.types import (
    FloatType,
    IndexType,
    IntegerType,
    MemRefType,
    ShapedType,
    TensorType,
    Type,
    VectorType,
)

ELEMENTWISE = frozenset({Pure, Elementwise, SameOperandsAndResultType})


def element_kind_ok(t: Type, kind: str) -> bool:
    """Whether ``t`` (a scalar or a tensor of scalars) has elements of ``kind``.  A vector has not:
    the few ops that take vectors say so (``ElementwiseOp.takes_vectors``)."""
    if isinstance(t, (MemRefType, VectorType)):
        return False
    e = t.element_type
    if kind == "int":
        return isinstance(e, (IntegerType, IndexType))
    if kind == "float":
        return isinstance(e, FloatType)
    if kind == "bool":
        return isinstance(e, IntegerType) and e.width == 1
    return True


KIND_NAMES = {"int": "signless integer or index", "float": "floating point", "bool": "i1", "any": "scalar"}


def same_shape(a: Type, b: Type) -> bool:
    """Both scalars, or tensors of the same shape (dynamic dims match anything)."""
    if isinstance(a, TensorType) != isinstance(b, TensorType):
        return False
    if not isinstance(a, TensorType):
        return True
    if a.rank != b.rank:
        return False
    return all(x is None or y is None or x == y for x, y in zip(a.shape, b.shape))


def check_same_shapes(op, interp, arrays) -> None:
    """Tensor operands of an elementwise op have one shape at run time too (a ``?``
    dimension matches anything when verifying); numpy would broadcast instead."""
    shapes = {a.shape for a in arrays if isinstance(a, np.ndarray) and a.ndim}
    if len(shapes) > 1:
        listed = " and ".join(str(list(s)) for s in sorted(shapes))
        raise interp.fault(op, f"operands have different shapes at run time: {listed}")


def with_element(t: Type, elem: Type) -> Type:
    """``t``'s shape with element type ``elem`` (a scalar stays a scalar)."""
    return TensorType(t.shape, elem) if isinstance(t, ShapedType) else elem


class ElementwiseOp(Operation):
    """Applies ``compute`` elementwise; folds when every operand is constant."""

    operand_kind = "any"
    arity = 0
    takes_vectors = False
    """Whether operands may be ``vector<NxT>`` values (lane by lane, as MLIR allows for every
    arith and math op): only where every engine handles them - the interpreter (numpy arrays),
    folding (there are no vector constants) and the LLVM translation."""

    @staticmethod
    def compute(*args):
        raise NotImplementedError

    def compute_results(self, args):
        return [self.compute(*args, self.operands[0].type.element_type)]

    def interpret(self, interp, args):
        check_same_shapes(self, interp, args)
        return self.compute_results(args)

    def fold(self, constants):
        if any(c is None for c in constants):
            return self.fold_partial(constants)
        try:
            values = self.compute_results([attr_to_value(c) for c in constants])
        except (Fault, ZeroDivisionError, OverflowError, ValueError):
            return None
        return [value_to_attr(v, r.type) for v, r in zip(values, self.results)]

    def fold_partial(self, constants):
        """Folds with some operands unknown (identities such as x + 0); None if none apply."""
        return None

    def verify_op(self) -> None:
        if len(self.operands) != self.arity:
            raise self.error(f"expects {self.arity} operands, got {len(self.operands)}")
        if len(self.results) != 1:
            raise self.error(f"expects one result, got {len(self.results)}")
        self.verify_types()

    def verify_types(self) -> None:
        t = self.operands[0].type
        for v in self.operands:
            if v.type is not t:
                raise self.error(f"requires all operands to have the same type, got {v.type} and {t}")
        if self.results[0].type is not t:
            raise self.error(f"requires the result type to match the operands, got {self.results[0].type} and {t}")
        if isinstance(t, VectorType) and self.takes_vectors:
            t = t.element_type
        if not element_kind_ok(t, self.operand_kind):
            raise self.error(f"operands must be {KIND_NAMES[self.operand_kind]} values "
                             f"or tensors of them, got {t}")

    # -- assembly: %a, %b {attrs} : T ----------------------------------------------------

    @classmethod
    def parse_uniform(cls, ctx, syn):
        sig = syn.sig
        if sig is None or sig[0] != "plain" or len(sig[1]) != 1:
            t = syn.single_type()  # raises the right diagnostic
        t = sig[1][0]
        operands = []
        for a in syn.args:
            if type(a) is tuple:
                break
            operands.append(ctx.value(a, t))
        if len(operands) != cls.arity or len(syn.args) != cls.arity:
            raise IRError(f"'{cls.name}' expects {cls.arity} operand{'s' if cls.arity != 1 else ''} "
                          f"(%a{', %b' * (cls.arity - 1)}) before ': type'", syn.loc)
        return cls(operands, [t], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.values(self.operands)}{p.attr_dict(self.attributes)} : {self.results[0].type}")

    @classmethod
    def build(cls, *operands, **attrs):
        return cls(list(operands), [operands[0].type], dict(attrs))

    # -- derivatives: one declaration gives both modes ---------------------------------------

    partials = None
    """``partials(b, operands, result)``: the derivative of the result with respect to each operand,
    elementwise (a ``V``, the numbers 1 or -1, or None for zero); None: the op has no rule."""

    def vjp(self, b, operands, results, cotangents):
        if self.partials is None:
            raise no_gradient_rule(self)
        g = cotangents[0]
        return [scaled(g, d) for d in self.partials(b, operands, results[0])]

    def jvp(self, b, operands, results, tangents):
        if self.partials is None:
            raise no_gradient_rule(self, "tangent")
        terms = [scaled(t, d) for t, d in zip(tangents, self.partials(b, operands, results[0])) if t is not None]
        terms = [t for t in terms if t is not None]
        return [sum(terms[1:], terms[0]) if terms else None]


def scaled(g, d):
    """``g * d`` where ``d`` may be a symbolic 1, -1 or zero (None)."""
    if g is None or d is None:
        return None
    if isinstance(d, int) and d in (1, -1):
        return g if d == 1 else -g
    return g * d


def no_gradient_rule(op, mode: str = "gradient") -> IRError:
    return op.error(f"has no {mode} rule: '{op.name}' cannot be differentiated")


class UnaryOp(ElementwiseOp):
    arity = 1


class BinaryOp(ElementwiseOp):
    arity = 2


class TernaryOp(ElementwiseOp):
    arity = 3


class CastOp(Operation):
    """``%y = op %x : T1 to T2``; elementwise over tensors of the same shape."""

    traits = frozenset({Pure, Elementwise})
    from_kind = "any"
    to_kind = "any"

    @staticmethod
    def compute(x, from_type: Type, to_type: Type):
        raise NotImplementedError

    def interpret(self, interp, args):
        return [self.compute(args[0], self.operands[0].type.element_type, self.results[0].type.element_type)]

    def fold(self, constants):
        if constants[0] is None:
            return None
        try:
            (value,) = self.interpret(None, [attr_to_value(constants[0])])
        except (Fault, ValueError, OverflowError):
            return None
        return [value_to_attr(value, self.results[0].type)]

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("expects one operand and one result")
        src, dst = self.operands[0].type, self.results[0].type
        if not same_shape(src, dst):
            raise self.error(f"operand and result must have the same shape, got {src} and {dst}")
        if not element_kind_ok(src, self.from_kind):
            raise self.error(f"operand must be {KIND_NAMES[self.from_kind]}, got {src}")
        if not element_kind_ok(dst, self.to_kind):
            raise self.error(f"result must be {KIND_NAMES[self.to_kind]}, got {dst}")
        self.verify_widths(src.element_type, dst.element_type)

    def verify_widths(self, src: Type, dst: Type) -> None:
        """Extensions must widen, truncations narrow; overridden per op."""

    @classmethod
    def parse_uniform(cls, ctx, syn):
        if syn.sig is None or syn.sig[0] != "cast" or len(syn.sig[1]) != 1 or len(syn.sig[2]) != 1:
            raise IRError(f"'{cls.name}' expects ': SOURCE_TYPE to RESULT_TYPE'", syn.loc)
        if len(syn.args) != 1 or isinstance(syn.args[0], tuple):
            raise IRError(f"'{cls.name}' expects one operand", syn.loc)
        src, dst = syn.sig[1][0], syn.sig[2][0]
        return cls([ctx.value(syn.args[0], src)], [dst], syn.attrs)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : "
                f"{self.operands[0].type} to {self.results[0].type}")

    @classmethod
    def build(cls, value, to_type: Type):
        return cls([value], [with_element(value.type, to_type) if not to_type.is_shaped else to_type])
