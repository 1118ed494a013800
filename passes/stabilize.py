"""stabilize: numerically stable rewrites, in the tradition of Theano's graph optimiser.

Each rule replaces a formula that loses its accuracy (cancellation) or overflows for
some inputs by one that does not, and agrees with it to a few ulp wherever the
original was finite and accurate.  On scalars and on tensors alike (the constants
may be scalars, splat ``dense`` constants or ``tensor.splat`` of a constant):

| formula | becomes | what it fixes |
|---|---|---|
| ``log(1 + x)``, ``log(1 - x)`` | ``log1p(x)``, ``log1p(-x)`` | 1 + x rounds x away when it is tiny |
| ``exp(x) - 1``, ``exp(x) + (-1)`` | ``expm1(x)`` | cancellation near x = 0 |
| ``log1p(exp(x))`` (so ``log(1 + exp(x))``) | ``softplus(x)`` | exp(x) overflows for large x |
| ``log(1 / (1 + exp(-x)))``, log of a sigmoid | ``-softplus(-x)`` | 0 for x > 37 (f64), -inf for x < -709 |
| ``log(softmax(x))`` | ``log_softmax(x)`` | the softmax underflows to 0, its log to -inf |
| ``exp(x) / broadcast(reduce_sum(exp(x)))`` | ``tensor.softmax`` | exp(x) overflows (inf / inf = NaN) |
| ``x - broadcast(log(reduce_sum(exp(x))))`` | ``tensor.log_softmax`` | the same overflow |
| ``softmax(x - broadcast(reduce_max(x)))`` | ``softmax(x)`` | (the op subtracts the max itself, in f64) |

``softplus(y)`` is written ``maximumf(y, 0) + log1p(exp(-|y|))``, which neither
overflows nor cancels.  The reductions must be along one axis, kept as a size-1
dimension (``keepdims``, or a reshape that inserts it) or, without it, the leading
axis, so that the broadcast lines the sums up with the rows they belong to; and the
broadcast must be to the shape of x itself, so that no run-time shape check is lost.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from irc.passmanager import Pass
from irc.patterns import GreedyDriver, RewritePattern

from .tensor_algebra import insert, is_size_of, splat_number


def _defined_by(value, name: str):
    op = value.defining_op
    return op if op is not None and op.name == name else None


def _is_number(value, number: float) -> bool:
    return splat_number(value) == number


class StabilizePattern(RewritePattern):
    """A rewrite of this pass; ``counter`` names its statistic."""

    counter = ""

    def __init__(self, stats=None):
        self.stats = stats

    def done(self, rewriter, op, value) -> bool:
        rewriter.replace_op(op, [value])
        if self.stats is not None:
            self.stats.add(self.counter)
        return True

    @contextmanager
    def before(self, rewriter, op):
        """The rewriter (an ``irc.builder.Builder``) inserting before ``op``, at its location."""
        with rewriter.at(op), rewriter.located(op.loc):
            yield rewriter

    @staticmethod
    def softplus(b, y):
        """``maximumf(y, 0) + log1p(exp(-|y|))``, built by ``b``."""
        y = b.wrap(y)
        zero = b.full_like(y, 0.0)
        tail = (-y.abs()).exp().log1p()
        return y.maximum(zero) + tail


class LogOfOnePlus(StabilizePattern):
    """``log(1 + x)`` -> ``log1p(x)``; ``log(1 - x)`` -> ``log1p(-x)``."""

    op_name = "math.log"
    counter = "log1p"

    def match_and_rewrite(self, op, rewriter) -> bool:
        arg = op.operands[0]
        add = _defined_by(arg, "arith.addf")
        if add is not None:
            a, b = add.operands
            x = a if _is_number(b, 1.0) else b if _is_number(a, 1.0) else None
            if x is None:
                return False
            with self.before(rewriter, op) as b:
                value = b.wrap(x).log1p()
            return self.done(rewriter, op, value)
        sub = _defined_by(arg, "arith.subf")
        if sub is None or not _is_number(sub.operands[0], 1.0):
            return False
        with self.before(rewriter, op) as b:
            value = (-b.wrap(sub.operands[1])).log1p()
        return self.done(rewriter, op, value)


def _is_nonpositive_form(value) -> bool:
    """``-|y|``: what softplus itself feeds to exp, which cannot overflow."""
    neg = _defined_by(value, "arith.negf")
    return neg is not None and _defined_by(neg.operands[0], "math.absf") is not None


class Log1pOfExp(StabilizePattern):
    """``log1p(exp(x))`` -> ``softplus(x)`` (unless x is already ``-|y|``)."""

    op_name = "math.log1p"
    counter = "softplus"

    def match_and_rewrite(self, op, rewriter) -> bool:
        exp = _defined_by(op.operands[0], "math.exp")
        if exp is None or _is_nonpositive_form(exp.operands[0]):
            return False
        with self.before(rewriter, op) as b:
            value = self.softplus(b, exp.operands[0])
        return self.done(rewriter, op, value)


def _negated(value):
    """x when ``value`` is ``-x`` or ``0 - x``; else None."""
    neg = _defined_by(value, "arith.negf")
    if neg is not None:
        return neg.operands[0]
    sub = _defined_by(value, "arith.subf")
    if sub is not None and _is_number(sub.operands[0], 0.0):
        return sub.operands[1]
    return None


class LogOfSigmoid(StabilizePattern):
    """``log(1 / (1 + exp(-x)))`` -> ``-softplus(-x)``."""

    op_name = "math.log"
    counter = "log-sigmoid"

    def match_and_rewrite(self, op, rewriter) -> bool:
        div = _defined_by(op.operands[0], "arith.divf")
        if div is None or not _is_number(div.operands[0], 1.0):
            return False
        add = _defined_by(div.operands[1], "arith.addf")
        if add is None:
            return False
        a, b = add.operands
        e = a if _is_number(b, 1.0) else b if _is_number(a, 1.0) else None
        exp = _defined_by(e, "math.exp") if e is not None else None
        x = _negated(exp.operands[0]) if exp is not None else None
        if x is None:
            return False
        with self.before(rewriter, op) as b:
            value = -self.softplus(b, -b.wrap(x))
        return self.done(rewriter, op, value)


class ExpMinusOne(StabilizePattern):
    """``exp(x) - 1`` and ``exp(x) + (-1)`` (either order) -> ``expm1(x)``."""

    counter = "expm1"

    def __init__(self, op_name: str, stats=None):
        super().__init__(stats)
        self.op_name = op_name

    def match_and_rewrite(self, op, rewriter) -> bool:
        a, b = op.operands
        if op.name == "arith.subf":
            e = a if _is_number(b, 1.0) else None
        else:
            e = a if _is_number(b, -1.0) else b if _is_number(a, -1.0) else None
        exp = _defined_by(e, "math.exp") if e is not None else None
        if exp is None:
            return False
        with self.before(rewriter, op) as b:
            value = b.wrap(exp.operands[0]).expm1()
        return self.done(rewriter, op, value)


class LogOfSoftmax(StabilizePattern):
    """``log(softmax(x))`` -> ``log_softmax(x)``."""

    op_name = "math.log"
    counter = "log-softmax"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.tensor import LogSoftmaxOp

        softmax = _defined_by(op.operands[0], "tensor.softmax")
        if softmax is None:
            return False
        axis = softmax.attributes["axis"].value
        return self.done(rewriter, op, insert(rewriter, op, LogSoftmaxOp.build(softmax.operands[0], axis)))


# ---- reductions along one axis, broadcast back -----------------------------------------------------


def _same_shape_as(bcast, shaped) -> bool:
    """Whether ``bcast`` (a broadcast to the type of the values in ``shaped``) has their run-time
    shape: its type is static, or each ``?`` takes a size known to be that of one of them."""
    t = bcast.results[0].type
    dynamic = [i for i, d in enumerate(t.shape) if d is None]
    return all(any(is_size_of(size, v, i) for v in shaped) for i, size in zip(dynamic, bcast.operands[1:]))


def _broadcast_reduction(value, like, reduction: str, through: str | None = None, shaped=()):
    """When ``value`` is ``broadcast(reduction(w, axes = [k]))`` lined up with ``like`` (the
    reduced axis kept as size 1, by keepdims or a static reshape, or the leading axis
    dropped) and of ``like``'s run-time shape: ``(w, k)``.  Else None.  ``through`` names a
    unary op that must sit between the reduction and the broadcast (before or after the
    reshape), as the log does in an explicit log-softmax; ``shaped`` are more values of
    ``like``'s run-time shape."""
    bcast = _defined_by(value, "tensor.broadcast")
    if bcast is None or bcast.results[0].type is not like.type:
        return None
    inner = bcast.operands[0]
    reshape = None
    passed = through is None
    for _ in range(2):
        step = inner.defining_op
        if step is not None and step.name == "tensor.reshape" and reshape is None:
            reshape = step
        elif step is not None and step.name == through and not passed:
            passed = True
        else:
            break
        inner = step.operands[0]
    reduce = _defined_by(inner, reduction) if passed else None
    if reduce is None:
        return None
    axes = [e.value for e in reduce.attributes["axes"].elements]
    if len(axes) != 1:
        return None
    k = axes[0]
    keep = "keepdims" in reduce.attributes
    shape = like.type.shape
    if reshape is not None:
        wanted = shape[:k] + (1,) + shape[k + 1:]
        if keep or not (reshape.operands[0].type.has_static_shape and reshape.results[0].type.shape == wanted):
            return None
    elif not keep and k != 0:
        return None
    w = reduce.operands[0]
    return (w, k) if _same_shape_as(bcast, (like, w, *shaped)) else None


def _exp_of(value):
    exp = _defined_by(value, "math.exp")
    return exp.operands[0] if exp is not None else None


class ExplicitSoftmax(StabilizePattern):
    """``exp(x) / broadcast(reduce_sum(exp(x)))`` -> ``tensor.softmax x``."""

    op_name = "arith.divf"
    counter = "softmax"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.tensor import SoftmaxOp

        num, den = op.operands
        x = _exp_of(num)
        found = _broadcast_reduction(den, num, "tensor.reduce_sum", shaped=(x,)) if x is not None else None
        if found is None:
            return False
        w, k = found
        if w is not num and _exp_of(w) is not x:
            return False
        return self.done(rewriter, op, insert(rewriter, op, SoftmaxOp.build(x, k)))


class ExplicitLogSoftmax(StabilizePattern):
    """``x - broadcast(log(reduce_sum(exp(x))))`` -> ``tensor.log_softmax x``."""

    op_name = "arith.subf"
    counter = "log-softmax"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.tensor import LogSoftmaxOp

        x, den = op.operands
        found = _broadcast_reduction(den, x, "tensor.reduce_sum", through="math.log")
        if found is None or _exp_of(found[0]) is not x:
            return False
        return self.done(rewriter, op, insert(rewriter, op, LogSoftmaxOp.build(x, found[1])))


class SoftmaxOfShifted(StabilizePattern):
    """``softmax(x - broadcast(reduce_max(x)))`` -> ``softmax(x)`` (and log_softmax): the op
    subtracts the maximum itself, in f64, so the explicit shift only adds a rounding."""

    counter = "softmax-shift"

    def __init__(self, op_name: str, stats=None):
        super().__init__(stats)
        self.op_name = op_name

    def match_and_rewrite(self, op, rewriter) -> bool:
        sub = _defined_by(op.operands[0], "arith.subf")
        if sub is None:
            return False
        x, shift = sub.operands
        found = _broadcast_reduction(shift, x, "tensor.reduce_max")
        if found is None or found[0] is not x or found[1] != op.attributes["axis"].value:
            return False
        new = type(op).build(x, found[1])
        return self.done(rewriter, op, insert(rewriter, op, new))


def patterns(stats=None) -> list[RewritePattern]:
    return [LogOfOnePlus(stats), Log1pOfExp(stats), LogOfSigmoid(stats), LogOfSoftmax(stats),
            ExpMinusOne("arith.subf", stats), ExpMinusOne("arith.addf", stats), ExplicitSoftmax(stats),
            ExplicitLogSoftmax(stats), SoftmaxOfShifted("tensor.softmax", stats),
            SoftmaxOfShifted("tensor.log_softmax", stats)]


@dataclass
class Stabilize(Pass):
    """Rewrite formulas that overflow or cancel into numerically stable ops.

    log(1+x), exp(x)-1, log(1+exp(x)), the log of a sigmoid or of a softmax, and an explicit
    softmax or log-softmax; see the module docstring for the table."""

    name = "stabilize"

    def run(self, module, stats) -> None:
        GreedyDriver(patterns(stats), fold=False).run(module)
