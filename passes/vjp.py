"""vjp: add ``@F_vjp``, the vector-Jacobian product of ``@F`` (reverse mode).

``vjp{func=F}`` adds ``@F_vjp(params..., one cotangent per float result) ->
(results..., one cotangent per float parameter)``: for any number of results of
any shape.  ``grad`` is the special case of one scalar result seeded with 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.passmanager import Pass, PipelineError

from .autodiff import make_vjp
from .grad import check_name


@dataclass
class VJP(Pass):
    """Add @F_vjp(params, cotangents of F's float results) -> (F's results, cotangents of F's float parameters)."""

    name = "vjp"
    func: str = ""  # the function to differentiate (required)
    name_: str = ""  # the new function's name (default: F_vjp)

    def __post_init__(self):
        if not self.func:
            raise PipelineError("pass 'vjp' needs func=NAME, the function to differentiate")
        check_name(self.name_, "vjp")

    def run(self, module, stats) -> None:
        make_vjp(module, self.func, self.name_ or None)
        stats.add("functions-differentiated")
