"""ONNX import: ``irc.onnx.load(path)`` is a callable on numpy arrays; ``irc import`` writes the IR.

    model = irc.onnx.load("cnn.onnx")
    logits = model(images)                     # the graph's inputs in order; its outputs back

The graph becomes one irc function per set of input shapes (``func.func @main``, built with
``irc.builder.Builder``; initializers become constants), compiled with ``irc.compile``.
``save_checkpoint(model, shapes, "model.irc")`` (``irc import model.onnx -o model.irc``) writes
it as an irc checkpoint instead: the initializers are the checkpoint's parameters, not
constants in the IR, and ``irc.load`` / ``irc run model.irc`` run it.
Values whose contents are known while importing (initializers, ``Constant``, ``Shape`` of a
static shape and what is computed from them: the shape arithmetic exporters emit before a
``Reshape``) are computed with numpy then and there, so the IR only has the real work.

An operator outside ``OPERATORS`` (or a form of one that irc does not take, such as a
dilated convolution) is an ``OnnxImportError`` naming the file, the node and the operator;
a file that is not a readable ONNX model is one naming the file.  Nothing here imports
onnx until a model is loaded.  See docs/torch.md.
"""

from __future__ import annotations

from .importer import OPERATORS, Model, OnnxImportError, load, save_checkpoint, to_module

__all__ = ["OPERATORS", "Model", "OnnxImportError", "load", "save_checkpoint", "to_module"]
