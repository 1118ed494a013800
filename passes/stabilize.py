"""stabilize: numerically stable rewrites, in the tradition of Theano's graph optimiser.

Each rule replaces a formula that loses its accuracy (cancellation) or overflows for
some inputs by one that does not, and agrees with it to a few ulp wherever the
original was finite and accurate.  On scalars and on tensors alike (the constants
may be scalars, splat ``dense`` constants or ``graph.splat`` of a constant):

| formula | becomes | what it fixes |
|---|---|---|
| ``log(1 + x)``, ``log(1 - x)`` | ``log1p(x)``, ``log1p(-x)`` | 1 + x rounds x away when it is tiny |
| ``exp(x) - 1``, ``exp(x) + (-1)`` | ``expm1(x)`` | cancellation near x = 0 |
| ``log1p(exp(x))`` (so ``log(1 + exp(x))``) | ``softplus(x)`` | exp(x) overflows for large x |
| ``log(1 / (1 + exp(-x)))``, log of a sigmoid | ``-softplus(-x)`` | 0 for x > 37 (f64), -inf for x < -709 |
| ``1 / (1 + exp(-x))`` (unless only logs use it) | ``sigmoid(x)``, stable | its gradient is inf * 0 for x < -88 (f32) |
| ``exp(z) / (1 + exp(z))`` | ``sigmoid(z)``, stable | the same |
| ``exp(z) * (Y / (1 + exp(z)))``, ``exp(z) * Y * (1 / (1 + exp(z)))`` | ``Y * sigmoid(z)`` | what ``grad`` writes for softplus and sigmoid: inf * 0 |
| ``log(softmax(x))`` | ``log_softmax(x)`` | the softmax underflows to 0, its log to -inf |
| ``exp(x) / broadcast(reduce_sum(exp(x)))`` | ``graph.softmax`` | exp(x) overflows (inf / inf = NaN) |
| ``x - broadcast(log(reduce_sum(exp(x))))`` | ``graph.log_softmax`` | the same overflow |
| ``softmax(x - broadcast(reduce_max(x)))`` | ``softmax(x)`` | (the op subtracts the max itself, in f64) |

``softplus(y)`` is written ``select(c, y, 0) + log1p(exp(select(c, -y, y)))`` with ``c = y >= 0``
(that is max(y, 0) + log1p(exp(-|y|)), with softplus's own derivatives at 0), which neither
overflows nor cancels; the stable ``sigmoid(z)`` is ``select(c, r, e * r)`` with ``c = z >= 0``,
``e = exp(select(c, -z, z))``, ``r = 1 / (1 + e)``.  Both forms have stable gradients under the
rules of docs/autodiff.md, so ``stabilize,grad{...}`` gives stable gradients; the product rules
above let ``grad{...},stabilize`` repair the gradient graph of softplus and sigmoid as well (not
of a log-sigmoid: run stabilize first).  The reductions must be along one axis, kept as a size-1
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
        """``select(c, y, 0) + log1p(exp(select(c, -y, y)))`` with ``c = y >= 0``, built by ``b``: the
        exponent is -|y|, so exp never overflows, and written with selects on one condition (not
        ``maximumf(y, 0)`` and ``absf``), so its derivatives at 0 are softplus's own (1/2, then 1/4)
        and no unused branch feeds an infinity into the gradient."""
        y = b.wrap(y)
        zero = b.zeros_like(y)
        nonnegative = y >= zero
        tail = b.select(nonnegative, -y, y).exp().log1p()
        return b.select(nonnegative, y, zero) + tail

    def sigmoid(self, rewriter, op, z):
        """``select(c, r, e * r)`` with ``c = z >= 0``, ``e = exp(select(c, -z, z))`` (= exp(-|z|)) and
        ``r = 1 / (1 + e)``, built before ``op``: exp never overflows, so neither the value nor its
        gradient meets inf * 0.  The exponent is a select on the same condition, not ``-|z|``: at
        z = 0 absf's derivative is 0, which would make the gradient 0 instead of 1/4 (see
        ``_sigmoid_of``, which recognises this form)."""
        with self.before(rewriter, op) as b:
            z = b.wrap(z)
            nonnegative = z >= 0.0
            e = b.select(nonnegative, -z, z).exp()
            r = 1.0 / (1.0 + e)
            return b.select(nonnegative, r, e * r).value


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
    """``-|y|`` (what softplus feeds to exp) or ``select(y >= 0, -y, y)`` (what sigmoid feeds to
    exp): exp of it cannot overflow, so there is nothing to rewrite."""
    neg = _defined_by(value, "arith.negf")
    if neg is not None:
        return _defined_by(neg.operands[0], "math.absf") is not None
    return _nonpositive_select(value) is not None


def _nonpositive_select(value):
    """y when ``value`` is ``select(y >= 0, -y, y)``; else None."""
    select = _defined_by(value, "arith.select")
    cmp = _defined_by(select.operands[0], "arith.cmpf") if select is not None else None
    if cmp is None or cmp.predicate != "oge" or not _is_number(cmp.operands[1], 0.0):
        return None
    y = cmp.operands[0]
    neg = _defined_by(select.operands[1], "arith.negf")
    return y if neg is not None and neg.operands[0] is y and select.operands[2] is y else None


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


def _one_plus(value):
    """e when ``value`` is ``1 + e`` or ``e + 1``; else None."""
    add = _defined_by(value, "arith.addf")
    if add is None:
        return None
    a, b = add.operands
    return a if _is_number(b, 1.0) else b if _is_number(a, 1.0) else None


def _overflowing_exp(value):
    """z when ``value`` is ``exp(z)`` and z is not already ``-|y|`` (whose exp cannot overflow)."""
    z = _exp_of(value)
    return None if z is None or _is_nonpositive_form(z) else z


def _sigmoid_of(value):
    """w when ``value`` is the stable sigmoid this pass builds (``StabilizePattern.sigmoid``)."""
    select = _defined_by(value, "arith.select")
    cmp = _defined_by(select.operands[0], "arith.cmpf") if select is not None else None
    if cmp is None or cmp.predicate != "oge" or not _is_number(cmp.operands[1], 0.0):
        return None
    w = cmp.operands[0]
    r = _defined_by(select.operands[1], "arith.divf")
    e = _one_plus(r.operands[1]) if r is not None and _is_number(r.operands[0], 1.0) else None
    exp = _defined_by(e, "math.exp") if e is not None else None
    return w if exp is not None and _nonpositive_select(exp.operands[0]) is w else None


def _opposite(a, b) -> bool:
    """Whether ``a`` is ``-b`` or ``b`` is ``-a``."""
    return _negated(a) is b or _negated(b) is a


class Sigmoid(StabilizePattern):
    """``1 / (1 + exp(-x))`` -> the stable sigmoid of x.

    The division is exact enough; its gradient is not: for x < -88 (f32) exp(-x) is inf and the
    chain rule multiplies 0 by inf.  The stable form's gradient stays finite and accurate.  A
    sigmoid used only by logs is left to ``LogOfSigmoid``."""

    op_name = "arith.divf"
    counter = "sigmoid"

    def match_and_rewrite(self, op, rewriter) -> bool:
        if not _is_number(op.operands[0], 1.0):
            return False
        e = _one_plus(op.operands[1])
        z = _overflowing_exp(e) if e is not None else None
        x = _negated(z) if z is not None else None
        if x is None:
            return False
        users = [use.owner for use in op.results[0].uses]
        if users and all(u.name == "math.log" for u in users):
            return False
        return self.done(rewriter, op, self.sigmoid(rewriter, op, x))


ONE = object()


def _is_inverse_of_one_plus(value, e) -> bool:
    """Whether ``value`` is ``1 / (1 + e)``, or the stable ``sigmoid(-z)`` for ``e = exp(z)``."""
    inverse = _defined_by(value, "arith.divf")
    if inverse is not None and _is_number(inverse.operands[0], 1.0) and _one_plus(inverse.operands[1]) is e:
        return True
    w = _sigmoid_of(value)
    return w is not None and _opposite(w, _exp_of(e))


def _over_one_plus(value, e):
    """Y when ``value`` is ``Y / (1 + e)`` or ``Y * (1 / (1 + e))`` (either order, ``1 / (1 + e)``
    possibly already the stable ``sigmoid(-z)`` for ``e = exp(z)``); ``ONE`` when ``value`` is
    ``1 / (1 + e)`` itself; else None."""
    if _is_inverse_of_one_plus(value, e):
        return ONE
    div = _defined_by(value, "arith.divf")
    if div is not None and _one_plus(div.operands[1]) is e:
        return div.operands[0]
    mul = _defined_by(value, "arith.mulf")
    if mul is None:
        return None
    for y, factor in (mul.operands, tuple(reversed(mul.operands))):
        if _is_inverse_of_one_plus(factor, e):
            return y
    return None


class ExpOverOnePlusExp(StabilizePattern):
    """``exp(z) * (Y / (1 + exp(z)))`` -> ``Y * sigmoid(z)``; ``exp(z) / (1 + exp(z))`` -> ``sigmoid(z)``.

    The chain rule writes the first: the gradient of ``log(1 + exp(z))`` is ``(g / (1 + exp(z)))
    * exp(z)``, and of ``1 / (1 + exp(-x))`` the same shape, which is inf * 0 = NaN once exp
    overflows.  Rewriting it makes a gradient graph stable after ``grad``, not only before."""

    counter = "sigmoid"

    def __init__(self, op_name: str, stats=None):
        super().__init__(stats)
        self.op_name = op_name

    def match_and_rewrite(self, op, rewriter) -> bool:
        a, b = op.operands
        if op.name == "arith.divf":
            z = _overflowing_exp(a)
            if z is None or _one_plus(b) is not a:
                return False
            return self.done(rewriter, op, self.sigmoid(rewriter, op, z))
        for e, other in ((a, b), (b, a)):
            z = _overflowing_exp(e)
            y = _over_one_plus(other, e) if z is not None else None
            if y is ONE:
                return self.done(rewriter, op, self.sigmoid(rewriter, op, z))
            if y is not None:
                sigmoid = self.sigmoid(rewriter, op, z)
                with self.before(rewriter, op) as b:
                    return self.done(rewriter, op, (b.wrap(y) * sigmoid).value)
        return False


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
        from irc.dialects.graph import LogSoftmaxOp

        softmax = _defined_by(op.operands[0], "graph.softmax")
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
    bcast = _defined_by(value, "graph.broadcast")
    if bcast is None or bcast.results[0].type is not like.type:
        return None
    inner = bcast.operands[0]
    reshape = None
    passed = through is None
    for _ in range(2):
        step = inner.defining_op
        if step is not None and step.name == "graph.reshape" and reshape is None:
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
    """``exp(x) / broadcast(reduce_sum(exp(x)))`` -> ``graph.softmax x``."""

    op_name = "arith.divf"
    counter = "softmax"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.graph import SoftmaxOp

        num, den = op.operands
        x = _exp_of(num)
        found = _broadcast_reduction(den, num, "graph.reduce_sum", shaped=(x,)) if x is not None else None
        if found is None:
            return False
        w, k = found
        if w is not num and _exp_of(w) is not x:
            return False
        return self.done(rewriter, op, insert(rewriter, op, SoftmaxOp.build(x, k)))


class ExplicitLogSoftmax(StabilizePattern):
    """``x - broadcast(log(reduce_sum(exp(x))))`` -> ``graph.log_softmax x``."""

    op_name = "arith.subf"
    counter = "log-softmax"

    def match_and_rewrite(self, op, rewriter) -> bool:
        from irc.dialects.graph import LogSoftmaxOp

        x, den = op.operands
        found = _broadcast_reduction(den, x, "graph.reduce_sum", through="math.log")
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
        found = _broadcast_reduction(shift, x, "graph.reduce_max")
        if found is None or found[0] is not x or found[1] != op.attributes["axis"].value:
            return False
        new = type(op).build(x, found[1])
        return self.done(rewriter, op, insert(rewriter, op, new))


def patterns(stats=None) -> list[RewritePattern]:
    return [LogOfOnePlus(stats), Log1pOfExp(stats), LogOfSigmoid(stats), LogOfSoftmax(stats), Sigmoid(stats),
            ExpOverOnePlusExp("arith.mulf", stats), ExpOverOnePlusExp("arith.divf", stats),
            ExpMinusOne("arith.subf", stats), ExpMinusOne("arith.addf", stats), ExplicitSoftmax(stats),
            ExplicitLogSoftmax(stats), SoftmaxOfShifted("graph.softmax", stats),
            SoftmaxOfShifted("graph.log_softmax", stats)]


@dataclass
class Stabilize(Pass):
    """Rewrite formulas that overflow or cancel into numerically stable ops.

    log(1+x), exp(x)-1, log(1+exp(x)), a sigmoid and the chain rule through one, the log of a
    sigmoid or of a softmax, and an explicit softmax or log-softmax; see the module docstring."""

    name = "stabilize"

    def run(self, module, stats) -> None:
        GreedyDriver(patterns(stats), fold=False).run(module)
