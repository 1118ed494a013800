"""jvp: add ``@F_jvp``, the Jacobian-vector product of ``@F`` (forward mode).

``jvp{func=F}`` adds ``@F_jvp(params..., one tangent per float parameter) ->
(results..., one tangent per float result)``.  Forward mode needs no tape: each
float value gets a tangent computed beside it, through loops and branches: a
tangent carried beside each float carry of ``scf.for``/``scf.while`` and each float
result of ``scf.if`` (the loops stay structured, tensors included), or a tangent
phi beside each float phi in a function of several blocks.  ``jvp`` of a ``_grad``
function gives Hessian-vector products.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.passmanager import Pass, PipelineError

from .autodiff import make_jvp
from .grad import check_name


@dataclass
class JVP(Pass):
    """Add @F_jvp(params, tangents of F's float parameters) -> (F's results, tangents of F's float results)."""

    name = "jvp"
    func: str = ""  # the function to differentiate (required)
    name_: str = ""  # the new function's name (default: F_jvp)

    def __post_init__(self):
        if not self.func:
            raise PipelineError("pass 'jvp' needs func=NAME, the function to differentiate")
        check_name(self.name_, "jvp")

    def run(self, module, stats) -> None:
        make_jvp(module, self.func, self.name_ or None)
        stats.add("functions-differentiated")
