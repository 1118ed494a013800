"""gpu-outline: kernel outlining, MLIR's ``gpu-kernel-outlining``.

Each ``gpu.launch`` becomes a kernel ``gpu.func`` in the module's ``gpu.module @kernels`` (made
when missing) and a ``gpu.launch_func`` of it.  The values the launch body uses from the host
function become the kernel's parameters (device memrefs and scalars), except constants, which
are cloned into the kernel; the body's twelve id arguments become ``gpu.block_id``,
``gpu.thread_id``, ``gpu.grid_dim`` and ``gpu.block_dim`` ops.  Kernels are named
``F_kernelN`` after their host function ``@F``.

A launch whose block sizes are constants gives its kernel MLIR's ``known_block_size``
attribute, and the launch's ``nvvm.*`` attributes (``nvvm.minctasm``) go with its body: the
NVPTX renderer turns both into launch bounds, so that ptxas knows how many registers a
thread may take.
"""

from __future__ import annotations

from dataclasses import dataclass

from irc.attributes import ArrayAttr, IntegerAttr
from irc.diagnostics import IRError
from irc.passmanager import Pass
from irc.types import FunctionType, i32


def _constant(value):
    from irc.patterns import constant_value

    attr = constant_value(value)
    return attr.value if isinstance(attr, IntegerAttr) else None


def _defined_inside(v, launch) -> bool:
    d = v.defining_op
    if d is None:  # a block argument: of the launch body or of a region nested in it
        owner = v.block.parent.parent
        return owner is launch or launch.is_ancestor_of(owner)
    return launch.is_ancestor_of(d)


def _captured(launch) -> list:
    """Values used inside ``launch``'s body but defined outside it, in order of first use."""
    seen, out = set(), []
    for op in launch.body.entry.ops:
        for inner in op.walk():
            for v in inner.operands:
                if v not in seen and not _defined_inside(v, launch):
                    seen.add(v)
                    out.append(v)
    return out


@dataclass
class GPUOutline(Pass):
    """Outline gpu.launch bodies into gpu.func kernels launched by gpu.launch_func."""

    name = "gpu-outline"
    module_name: str = "kernels"  # the gpu.module that receives the kernels

    def triggers(self):
        return frozenset({"gpu.launch"})

    def run(self, module, stats) -> None:
        from irc.dialects import gpu

        kernels = None
        for func in list(module.functions):
            launches = [op for op in func.walk() if op.name == "gpu.launch"]
            for k, launch in enumerate(launches):
                if kernels is None:
                    kernels = module.lookup(self.module_name)
                    if kernels is None:
                        kernels = gpu.GPUModuleOp.build(self.module_name)
                        module.body.append(kernels)
                    elif kernels.name != "gpu.module":
                        raise IRError(f"gpu-outline: '@{self.module_name}' is not a gpu.module", kernels.loc)
                name = f"{func.sym_name}_kernel{k}"
                while kernels.lookup(name) is not None:
                    name += "_"
                self._outline(launch, kernels, name, func)
                stats.add("kernels-outlined")

    @staticmethod
    def _outline(launch, kernels, name: str, func) -> None:
        from irc.dialects import gpu

        if launch.body.first_block is not launch.body.last_block:
            raise IRError("gpu-outline: a launch body of several blocks is not supported", launch.loc)
        captured = _captured(launch)
        constants = [v for v in captured if v.defining_op is not None and v.defining_op.name == "arith.constant"]
        params = [v for v in captured if v not in constants]
        kernel = gpu.GPUFuncOp.build(name, FunctionType([v.type for v in params], []))
        sizes = [_constant(v) for v in launch.operands[3:6]]
        if None not in sizes:
            kernel.attributes["known_block_size"] = ArrayAttr([IntegerAttr(n, i32) for n in sizes])
        for key, attr in launch.attributes.items():
            if key.startswith("nvvm."):
                kernel.attributes[key] = attr
        body = kernel.body.entry
        for v, p in zip(params, body.args):
            p.name_hint = v.name_hint
        mapping = {}
        for c in constants:
            clone = c.defining_op.clone()
            body.append(clone)
            mapping[c] = clone.results[0]
        ids = []
        for cls in (gpu.BlockIdOp, gpu.ThreadIdOp, gpu.GridDimOp, gpu.BlockDimOp):
            for dim in gpu.DIMENSIONS:
                op = cls.build(dim)
                body.append(op)
                ids.append(op.results[0])
        entry = launch.body.entry
        for arg, v in zip(entry.args, ids):
            arg.replace_all_uses_with(v)
        for op in list(entry.ops):
            op.detach()
            if op.name == "gpu.terminator":
                op.drop_all_references()
                body.append(gpu.ReturnOp(loc=op.loc))
            else:
                body.append(op)
        for old, new in [*mapping.items(), *zip(params, body.args)]:
            for use in list(old.uses):
                if kernel.is_ancestor_of(use.owner):
                    use.owner.set_operand(use.index, new)
        for op in list(body.ops):  # the ids no one reads
            if op.name in ("gpu.block_id", "gpu.thread_id", "gpu.grid_dim", "gpu.block_dim") and \
                    op.results[0].first_use is None:
                op.erase()
        kernels.body.insert_before(kernel, kernels.body.terminator)
        call = gpu.LaunchFuncOp.build(kernels.sym_name, name, launch.operands[:3], launch.operands[3:6], params)
        call.loc = launch.loc
        launch.parent.insert_before(call, launch)
        launch.erase()
