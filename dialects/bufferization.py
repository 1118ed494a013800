"""The ``bufferization`` dialect: where a tensor function's values meet buffers.

``%m = bufferization.to_memref %t : tensor<4xf32> to memref<4xf32>`` and
``%t = bufferization.to_tensor %m : memref<4xf32> to tensor<4xf32>``, spelled as MLIR's.

The GPU pipeline keeps a tensor function's name and signature (so that ``irc run --interp``
calls it as it called the source): the host function takes the tensors, makes host buffers of
them with ``to_memref``, copies them to the device explicitly, and returns ``to_tensor`` of the
host buffers the results were copied back into.  Both ops copy: a tensor is a value and the
buffer may be written afterwards.
"""

from __future__ import annotations

from irc.diagnostics import IRError
from irc.operation import Operation
from irc.semantics import Buffer
from irc.types import MemRefType, TensorType


def _same_shape(op, tensor, memref) -> None:
    if not isinstance(tensor, TensorType) or not isinstance(memref, MemRefType):
        raise op.error(f"converts between a tensor and a memref, not {tensor} and {memref}")
    if tensor.shape != memref.shape or tensor.element_type is not memref.element_type:
        raise op.error(f"{tensor} and {memref} differ in shape or element type")
    if memref.memory_space is not None:
        raise op.error(f"a tensor's buffer is host memory, not {memref}: copy it with gpu.memcpy")


def _parse_cast(cls, ctx, syn):
    if syn.sig is None or syn.sig[0] != "cast" or len(syn.args) != 1 or isinstance(syn.args[0], tuple):
        raise IRError(f"'{cls.name}' expects '%value : SOURCE to RESULT'", syn.loc)
    (src,), (dst,) = syn.sig[1], syn.sig[2]
    return cls([ctx.value(syn.args[0], src)], [dst], syn.attrs)


class ToMemrefOp(Operation):
    """A host buffer holding a copy of a tensor."""

    name = "bufferization.to_memref"
    summary = "A host buffer holding a copy of a tensor's elements."
    example = "%r = bufferization.to_memref %t : tensor<4xf32> to memref<4xf32>"

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("takes a tensor and has one memref result")
        _same_shape(self, self.operands[0].type, self.results[0].type)

    def interpret(self, interp, args):
        return [Buffer(args[0].copy(), self.results[0].type)]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return _parse_cast(cls, ctx, syn)

    def print_custom(self, p) -> None:
        p.write(f" {p.value(self.operands[0])}{p.attr_dict(self.attributes)} : "
                f"{self.operands[0].type} to {self.results[0].type}")

    @classmethod
    def build(cls, tensor):
        t = tensor.type
        return cls([tensor], [MemRefType(t.shape, t.element_type)])


class ToTensorOp(Operation):
    """A tensor holding a copy of a host buffer's elements (as they are at this op)."""

    name = "bufferization.to_tensor"
    traits = frozenset()
    summary = "A tensor holding a copy of a host buffer's elements."
    example = ("%h = bufferization.to_memref %t : tensor<4xf32> to memref<4xf32> "
               "%r = bufferization.to_tensor %h : memref<4xf32> to tensor<4xf32>")

    def verify_op(self) -> None:
        if len(self.operands) != 1 or len(self.results) != 1:
            raise self.error("takes a memref and has one tensor result")
        _same_shape(self, self.results[0].type, self.operands[0].type)

    def interpret(self, interp, args):
        if args[0].freed:
            raise interp.fault(self, "access to a freed buffer")
        return [args[0].array.copy()]

    @classmethod
    def parse_uniform(cls, ctx, syn):
        return _parse_cast(cls, ctx, syn)

    print_custom = ToMemrefOp.print_custom

    @classmethod
    def build(cls, memref):
        t = memref.type
        return cls([memref], [TensorType(t.shape, t.element_type)])


