"""math-approx: rewrite transcendental math ops into branch-free polynomial approximations.

The CPU backend turns ``math.exp`` and friends into calls to libm (``expf``, ``erf``, ...)
or into LLVM intrinsics that LLVM itself lowers to libm calls, and a loop that calls a
function is a loop LLVM cannot vectorise.  This pass replaces each op by an inline
approximation made only of ``arith`` ops (plus ``math.absf``): range reduction by
exponent manipulation (``arith.bitcast`` and integer shifts, Cody-Waite splits of ln 2
and pi/2), a minimax polynomial, and ``arith.select`` for special values instead of
branches.  The loop around it then vectorises: a loop of f32 ``exp`` over 2^24 elements
runs 6x faster, of ``tanh``, ``erf``, ``expm1`` or ``log1p`` 25-45x, of ``sin``/``cos``
13x (benchmarks/math_approx_ulp.py measures it; docs/math-approx.md has the tables).

Rewritten: ``math.exp``, ``exp2``, ``expm1``, ``log``, ``log2``, ``log1p``, ``tanh``,
``erf``, ``sin``, ``cos`` on f32 and f64 (f16 and bf16 through the f32 code, rounded once
at the end), scalars and statically shaped tensors (the constants are then ``dense<...>``
splats; dynamically shaped tensors are left alone).  Max error measured over 2^22-point
sweeps of the whole domain (every binade, subnormals, thresholds), in ulp, against numpy
in float64 for f32 and long double for f64; numpy's own functions for comparison:

    ========  ======  ======  ======  ======      ========  ======  ======  ======  ======
    function  f32     (numpy) f64     (numpy)     function  f32     (numpy) f64     (numpy)
    ========  ======  ======  ======  ======      ========  ======  ======  ======  ======
    exp       1.01    2.42    0.94    0.70        log       0.83    3.49    0.79    0.60
    exp2      1.13    2.75    1.09    0.75        log2      0.80    1.98    0.78    0.52
    expm1     1.70    2.60    1.84    0.52        log1p     0.81    1.88    0.84    0.60
    tanh      1.41    1.37    1.36    1.17        erf       1.17    0.50    1.11    1.06
    sin       0.50    1.40    0.84    0.52        cos       0.50    1.41    0.83    0.56
    ========  ======  ======  ======  ======      ========  ======  ======  ======  ======

and 1 / (1 + exp(-x)) built on the rewritten exp: 2.39 (f32) and 2.11 (f64), libm 3.10
and 2.11.  Special values behave as in libm: exp(+inf) = inf, exp(-inf) = 0, overflow to
inf and underflow through the subnormals to 0 at the right thresholds, log(0) = -inf,
log(x < 0) = NaN, subnormal inputs as accurate as normal ones, tanh(+-inf) = +-1, erf(+-inf) =
+-1, NaN gives NaN, and the sign of a zero is kept where libm keeps it.  sin/cos hold
their accuracy for |x| < 2^35 (f32) and 2^30 (f64); beyond, the absolute error grows
like |x| 2^-53 (6e-5 at 2^40), and from 2^50 they return NaN.  f32 sin/cos compute in
f64.

The kernels assume IEEE arithmetic: compiled with ``fast_math=True``, LLVM may fold
``(x + 1.5*2^23) - 1.5*2^23`` to ``x`` and break the range reductions.

Option ``fma``: the f32 kernels (and so f16 and bf16) evaluate their polynomials and
exp's range reduction with ``math.fma``, one rounding per multiply-add.  It is for
targets with FMA instructions (``irc.compile``'s tensor pipeline sets it where the host
has them; elsewhere LLVM would call ``fmaf``): on Zen 4 it cuts the f32 exp from about 30
vector instructions to 22.  The interpreter computes an f32 fma exactly (in f64, rounded
to odd), so the JIT still agrees with it bit for bit; the errors barely move (same
sweeps, f32: exp 1.04, exp2 1.16, expm1 1.53, log 0.82, log1p 0.82, tanh 2.25, erf 1.04,
sigmoid 2.39 ulp; the rest as above).  f64 kernels never use it (an exact f64 fma in the
interpreter is slow).

Option ``only``: the functions to rewrite, separated by ``+`` (the pipeline syntax
splits options on commas), e.g. ``math-approx{only=exp+tanh}``, or ``all``; empty
means all but sin and cos, which a default pipeline must not turn into NaN for a
huge argument (the fuzz harness found 1e300 in f64 programs): ask for them with
``only=all`` or ``only=sin+cos`` where arguments are known to be moderate.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.block import Block
from irc.passmanager import Pass, PipelineError
from irc.types import FloatType, TensorType

from .math_approx_kernels import KERNELS, KernelBuilder, apply

DEFAULT = [name for name in KERNELS if name not in ("sin", "cos")]
"""What the pass rewrites unless told otherwise: sin and cos only when asked for, because
past 2^50 (2^30 for full accuracy) they lose the argument, where libm does not."""


def approximable(t) -> bool:
    """Float scalars and statically shaped tensors of them (splat constants need a shape)."""
    if isinstance(t, TensorType):
        return t.has_static_shape and approximable(t.element_type)
    return isinstance(t, FloatType)


@dataclass
class MathApprox(Pass):
    """Replace exp, log, tanh, erf, sin, cos, ... by branch-free arith approximations that vectorise."""

    name = "math-approx"
    only: str = ""  # functions to rewrite, '+'-separated (e.g. exp+tanh); empty: all but sin, cos; 'all'
    fma: bool = False  # f32 kernels multiply-add with math.fma (for targets with FMA instructions)

    def __post_init__(self) -> None:
        self.selected()  # an unknown name is a usage error when the pipeline is parsed

    def selected(self) -> dict:
        """op name -> kernel, for the functions ``only`` names (DEFAULT if empty, every one for 'all')."""
        names = [n.strip() for n in self.only.split("+") if n.strip()] or list(DEFAULT)
        if names == ["all"]:
            names = list(KERNELS)
        unknown = [n for n in names if n not in KERNELS]
        if unknown:
            raise PipelineError(f"math-approx: unknown function '{unknown[0]}' in only= "
                                f"(known: {', '.join(KERNELS)}; separate several with '+')")
        return {f"math.{n}": KERNELS[n] for n in names}

    def run(self, module, stats) -> None:
        kernels = self.selected()
        templates: dict = {}
        for op in list(module.walk()):
            kernel = kernels.get(op.name)
            if kernel is None or not approximable(op.results[0].type):
                continue
            key = (op.name, op.operands[0].type)
            template = templates.get(key)
            if template is None:
                template = templates[key] = self._template(kernel, op.operands[0].type)
            block, result = template
            value_map = {block.args[0]: op.operands[0]}
            for t in block.ops:
                new = t.clone(value_map)
                new.loc = op.loc
                op.parent.insert_before(new, op)
            op.results[0].replace_all_uses_with(value_map.get(result, result))
            op.erase()
            stats.add(f"{op.name.removeprefix('math.')}-approximated")

    def _template(self, kernel, operand_type) -> tuple[Block, object]:
        """The kernel's ops for one operand type, built once in a detached block (its argument
        stands for the operand) and cloned at each op: building the 40-80 ops of a kernel
        through the builder costs about ten times what copying them does."""
        block = Block([operand_type])
        b = KernelBuilder(fma=self.fma).at_end(block)
        return block, apply(kernel, b.wrap(block.args[0])).value
