"""Device buffers and explicit copies for a function whose buffer work runs in gpu.launch ops
(the second half of ``gpu-map-parallel``; not a pass of its own, because between the two
halves the program breaks the exclusive rule and would not verify).

* each memref parameter the launches use gets a device copy: ``gpu.alloc`` and a ``gpu.memcpy``
  in at the entry (not for a bufferized function's output parameters, which are only written),
  a ``gpu.memcpy`` back before each return when a launch writes it, and ``gpu.dealloc``;
* a ``memref.alloc``/``memref.dealloc`` pair becomes ``gpu.alloc``/``gpu.dealloc``;
* a bufferized tensor function (``tensor_signature``) gets its tensor signature back: the
  host function takes and returns tensors (``bufferization.to_memref`` / ``to_tensor``), so it
  keeps the name and signature the program calls it by.
"""

from __future__ import annotations

from irc.attributes import TypeAttr
from irc.block import Block
from irc.builder import Builder
from irc.diagnostics import IRError
from irc.types import FunctionType, MemRefType, TensorType


def _device_type(t: MemRefType) -> MemRefType:
    from irc.dialects.gpu import DEVICE

    return MemRefType(t.shape, t.element_type, DEVICE)


def _in_launch(op) -> bool:
    return any(a.name == "gpu.launch" for a in op.ancestors())


def _written(value) -> bool:
    for use in value.uses:
        op = use.owner
        if op.name == "memref.store" and use.index == 1 or op.name == "memref.copy" and use.index == 1:
            return True
    return False


_HOST_SIDE = frozenset({"memref.dim", "memref.view", "gpu.alloc", "gpu.dealloc", "gpu.memcpy", "gpu.launch",
                        "gpu.launch_func", "gpu.wait"})


def _retype_view(op) -> None:
    """A view of a device buffer is a device buffer (the view only computes an address)."""
    src = op.operands[0].type
    r = op.results[0]
    if src.memory_space is not None and r.type.memory_space != src.memory_space:
        r.type = MemRefType(r.type.shape, r.type.element_type, src.memory_space)


def _written_through_views(value) -> bool:
    if _written(value):
        return True
    return any(u.owner.name == "memref.view" and u.index == 0 and _written_through_views(u.owner.results[0])
               for u in value.uses)


def _dims(b: Builder, value, t: MemRefType) -> list:
    return [b.dim(value, d).value for d, n in enumerate(t.shape) if n is None]


def give_device_buffers(func) -> None:
    """Make ``func``'s launches use device memory only, with explicit copies (see the module doc)."""
    from irc.dialects import gpu

    entry = func.body.entry
    outputs = set()
    sig = func.attributes.get("tensor_signature")
    if isinstance(sig, TypeAttr):
        n_out = sum(isinstance(t, TensorType) for t in sig.type.results)
        outputs = set(range(len(func.args) - n_out, len(func.args)))
    returns = [op for op in func.walk() if op.name == "func.return"]
    b = Builder(loc=func.loc)
    for k, arg in enumerate(func.args):
        t = arg.type
        if not isinstance(t, MemRefType) or arg.first_use is None:
            continue
        b.at_start(entry)
        dev = b.built(gpu.AllocOp.build(_device_type(t), _dims(b, arg, t))).value
        arg.replace_all_uses_with(dev)  # host code only sizes it (memref.dim) or views it (memref.view)
        if k not in outputs:
            b.insert(gpu.MemcpyOp([dev, arg]))
        written = _written_through_views(dev)
        for ret in returns:
            b.before_op(ret)
            if written:
                b.insert(gpu.MemcpyOp([arg, dev]))
            b.insert(gpu.DeallocOp([dev]))
    for op in list(func.walk()):
        if op.name == "memref.alloc" and not _in_launch(op):
            new = gpu.AllocOp([*op.operands], [_device_type(op.results[0].type)], loc=op.loc)
            op.parent.insert_before(new, op)
            op.results[0].replace_all_uses_with(new.results[0])
            op.erase()
        elif op.name == "memref.dealloc" and op.operands[0].type.memory_space == gpu.DEVICE:
            op.parent.insert_before(gpu.DeallocOp([op.operands[0]], loc=op.loc), op)
            op.erase()
        elif op.name == "memref.view" and not _in_launch(op):
            _retype_view(op)
    for op in func.walk():
        if not _in_launch(op) and op.name not in _HOST_SIDE:
            for v in op.operands:
                if gpu.is_device(v.type):
                    raise IRError(f"'{op.name}' on the host uses a buffer the device computes: the GPU "
                                  "pipeline cannot run this function on the device", op.loc)
    if isinstance(sig, TypeAttr):
        restore_tensor_signature(func, sig.type)


def restore_tensor_signature(func, sig: FunctionType) -> None:
    """Give a bufferized function its tensor signature back (``to_memref`` of the inputs, a host
    output buffer per tensor result returned as ``to_tensor``)."""
    from irc.dialects.bufferization import ToMemrefOp, ToTensorOp

    old_args = list(func.args)
    entry = func.body.entry
    new_entry = Block(list(sig.inputs), arg_names=[a.name_hint for a in old_args[:len(sig.inputs)]])
    func.body.append(new_entry)  # the entry once the old one is gone
    b = Builder(loc=func.loc)
    b.at_end(new_entry)
    n_in = len(sig.inputs)
    for old, new, t in zip(old_args[:n_in], new_entry.args, sig.inputs):
        if isinstance(t, TensorType):
            old.replace_all_uses_with(b.built(ToMemrefOp.build(new)).value)
        else:
            old.replace_all_uses_with(new)
    outs = []
    for old in old_args[n_in:]:
        t = old.type
        host = b.alloc(t, []).value if t.has_static_shape else None
        if host is None:
            raise IRError("the GPU pipeline needs static output shapes", func.loc)
        old.replace_all_uses_with(host)
        outs.append(host)
    for op in list(entry.ops):
        op.detach()
        new_entry.append(op)
    func.body.remove(entry)
    ret = new_entry.terminator
    b.before_op(ret)
    scalars = iter(ret.operands)
    out_iter = iter(outs)
    results = []
    for t in sig.results:
        results.append(b.built(ToTensorOp.build(next(out_iter))).value if isinstance(t, TensorType) else next(scalars))
    for host in outs:
        b.op("memref.dealloc", host, result=[])
    ret.set_operands(results)
    func.attributes["function_type"] = TypeAttr(sig)
    del func.attributes["tensor_signature"]
