"""grad: add ``@F_grad``, the gradient of one scalar result of ``@F`` (reverse mode).

``grad{func=loss}`` adds ``@loss_grad`` with ``@loss``'s parameters, returning
``@loss``'s results followed by d(result 0)/d(parameter) for each float parameter
in order.  ``result=`` picks another result (a float scalar or a float tensor of
one element), ``wrt=1,3`` lists the parameters (MLIR's list syntax), ``name=``
names the new function.  Applying ``grad`` to a ``_grad`` function with
``result=`` naming one of its gradients gives second derivatives.  How loops are
differentiated (structured loops that recompute the carries where tensors are
involved, else a tape in memref buffers) is described in ``passes/autodiff.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.dialects.func import is_bare_symbol

from irc.passmanager import Pass, PipelineError

from .autodiff import make_grad
from .remat import remat_function


def positions(text: str, option: str, pass_name: str) -> list[int] | None:
    """``"2,3,5"`` -> [2, 3, 5], sorted (gradients come in parameter order); empty -> None (the
    pass's default)."""
    if not text:
        return None
    try:
        values = sorted(int(p) for p in text.replace(" ", "").split(","))
    except ValueError:
        raise PipelineError(f"option '{option}' of pass '{pass_name}' expects parameter positions such as "
                            f"'{option}=0,2', got '{text}'") from None
    if any(v < 0 for v in values) or len(set(values)) != len(values):
        raise PipelineError(f"option '{option}' of pass '{pass_name}' expects distinct non-negative "
                            f"positions, got '{text}'")
    return values


def check_name(text: str, pass_name: str) -> None:
    """A name= option must be a symbol the printer writes bare (and so the parser reads back)."""
    if text and not is_bare_symbol(text):
        raise PipelineError(f"option 'name' of pass '{pass_name}' expects a symbol name such as 'loss_grad' "
                            f"(letters, digits, '_', '$', '.', '-'; no '@'), got '{text}'")


@dataclass
class Grad(Pass):
    """Add @F_grad: F's results, then the gradient of one scalar result with respect to F's float parameters."""

    name = "grad"
    func: str = ""  # the function to differentiate (required)
    result: int = 0  # which result (a float scalar or a one-element float tensor)
    wrt: str = ""  # parameter positions, e.g. 0,2 (default: every float parameter)
    name_: str = ""  # the new function's name (default: F_grad)
    remat: bool = False  # then recompute forward segments in the backward: less memory (the remat pass)

    def __post_init__(self):
        if not self.func:
            raise PipelineError("pass 'grad' needs func=NAME, the function to differentiate")
        if self.result < 0:
            raise PipelineError(f"option 'result' of pass 'grad' expects a result position (0, 1, ...), "
                                f"got {self.result}")
        check_name(self.name_, "grad")
        self.positions = positions(self.wrt, "wrt", "grad")

    def run(self, module, stats) -> None:
        name = make_grad(module, self.func, self.result, self.positions, self.name_ or None)
        if self.remat:
            remat_function(module, name, stats)
        stats.add("functions-differentiated")
