"""A loaded checkpoint, callable like the function it was traced from."""

from __future__ import annotations

import os

import numpy as np

from ..pytree import TreeDef, check_same, flatten
from .format import MAX_HEADER, element_dtype, fail, one_line, signature_problems
from .reader import Contents, parse_module, read


def load(path, *, max_header_size: int = MAX_HEADER, **compile_options) -> Model:
    """The model saved at ``path``, compiled with ``irc.compile(module, **compile_options)``;
    ``bounds_checks`` defaults to True, as docs/reliability.md advises for code someone else
    wrote (pass ``bounds_checks=False`` for a model you trust and want faster).

    A missing file is a FileNotFoundError; anything that is not a sound irc checkpoint is a
    CheckpointError naming the file and the fault.  Nothing in the file is executed: the IR is
    parsed, verified and compiled, and the parameters are mapped, never unpickled.
    """
    from ..checks import check_type

    check_type("irc.load", "path", path, (str, os.PathLike))
    check_type("irc.load", "max_header_size", max_header_size, int)
    name = os.fspath(path)
    contents = read(name, max_header_size)
    module = parse_module(name, contents)
    meta = contents.metadata
    problem = signature_problems(module, meta["entry"], contents.names,
                                 [(a.dtype, a.shape) for a in contents.params], contents.inputs,
                                 contents.out_tree.num_leaves)
    if problem:
        raise fail(name, f"the graph does not fit the checkpoint's signature: {problem}")
    import irc

    from ..diagnostics import IRError

    try:
        exe = irc.compile(module, **{"bounds_checks": True, **compile_options})
    except IRError as e:
        raise fail(name, f"the model cannot be compiled: {one_line(e)}") from None
    return Model(name, module, meta["entry"], exe[meta["entry"]], contents, meta["irc_version"])


class Model:
    """A loaded checkpoint: ``model(*inputs)`` is the traced function with its parameters bound.

    ``params`` (the parameters in their tree structure: read-only numpy arrays mapped from the
    file), ``module`` (the graph), ``entry``, ``in_tree``/``out_tree``, ``inputs`` (the example
    inputs' names, dtypes and shapes), ``path`` and ``irc_version`` (of the irc that saved it).
    Compiled code gets copy-on-write maps of the parameters, so nothing it or anyone does to
    them reaches the file or ``params``.
    """

    def __init__(self, path: str, module, entry: str, function, contents: Contents, irc_version: str):
        self.path = path
        self.module = module
        self.entry = entry
        self.in_tree = contents.in_tree
        self.out_tree = contents.out_tree
        self.inputs = contents.inputs
        self.irc_version = irc_version
        self.param_names = contents.names
        self.params = contents.in_tree.children[0].unflatten(contents.params)
        self._function = function
        self.inputs_tree = TreeDef("tuple", (), contents.in_tree.children[1:])
        types = module.lookup(entry).function_type
        self._param_types = types.inputs[:len(contents.names)]
        self.input_types = types.inputs[len(contents.names):]
        self.result_types = types.results
        self._call_params = [_scalar_or_array(a, t) for a, t in zip(contents.call_params, self._param_types)]

    def __call__(self, *inputs):
        results = self._function(*self._call_params, *self.flat_inputs(*inputs))
        return self._rebuild(results)

    def interpret(self, *inputs):
        """``model(*inputs)`` on irc's reference interpreter (numpy semantics): an oracle."""
        from ..interpreter import Interpreter

        results = Interpreter(self.module).run(self.entry, *self._call_params, *self.flat_inputs(*inputs))
        return self._rebuild(results)

    def flat_inputs(self, *inputs) -> list:
        """The inputs as the entry takes them after the parameters: flattened, each checked
        against its parameter type; TypeError (dtype) or ValueError (structure, shape) naming it."""
        leaves, tree = flatten(inputs)
        if tree != self.inputs_tree:
            if len(tree.children) != len(self.inputs_tree.children):
                raise TypeError(f"the model {self.path} takes {len(self.inputs_tree.children)} input(s) "
                                f"({self.describe_inputs()}), got {len(tree.children)}")
            check_same(self.inputs_tree, tree, "the model's inputs")
        return [_check_input(spec.name, leaf, t) for spec, leaf, t in zip(self.inputs, leaves, self.input_types)]

    def describe_inputs(self) -> str:
        return ", ".join(f"input {spec.name}: {t}" for spec, t in zip(self.inputs, self.input_types))

    def _rebuild(self, results):
        if len(self.result_types) == 1:
            results = (results,)
        elif results is None:
            results = ()
        return self.out_tree.unflatten(list(results))

    def __repr__(self) -> str:
        return f"<irc.checkpoint.Model {self.path!r} @{self.entry}({self.describe_inputs()})>"


def _scalar_or_array(a: np.ndarray, t):
    from ..types import TensorType

    return a if isinstance(t, TensorType) else a.item()


def _check_input(name: str, leaf, t):
    from ..types import TensorType

    dtype = element_dtype(t)
    if not isinstance(t, TensorType):
        if isinstance(leaf, np.ndarray) and leaf.shape == ():
            leaf = leaf.item()
        if isinstance(leaf, np.generic):
            leaf = leaf.item()
        if not isinstance(leaf, (bool, int, float)):
            raise TypeError(f"input {name} must be a number for {t}, got {type(leaf).__name__}")
        return leaf
    from ..checks import check_array

    return check_array(f"input {name}", leaf, t, dtype)
