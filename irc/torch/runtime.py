"""The backend's calling side: aot_autograd's graphs compiled by irc, called on torch tensors.

``make_backend`` wraps ``aot_autograd`` with ``compile_graph`` as the forward, backward and
inference compiler.  ``compile_graph`` checks the graph's ops at once (a graph with an op
irc has no conversion for runs in torch from the start) and returns an ``IrcGraph``,
which converts and compiles the graph per input signature (shapes, dtypes, and the values
of symbolic sizes) when first called with it.

Inputs reach irc without copies: ``tensor.numpy()`` shares a contiguous CPU tensor's memory
(a non-contiguous one is made contiguous first); outputs, arrays irc allocated, become
tensors with ``torch.from_numpy``, which shares them too.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import torch

from . import warn_fallback
from .convert import Unsupported, convert, unsupported_ops

aten = torch.ops.aten

COUNTS: Counter = Counter()
"""How many graph signatures irc compiled ("irc") and torch ran instead ("torch"): what the
tests read to know that irc, not a fallback, computed a model."""


def decompositions() -> dict:
    """torch's core aten decompositions, and those of the few composite ops irc would
    rather see as their parts (batch norm in training, layer norm, GELU, embedding...)."""
    from torch._decomp import core_aten_decompositions, get_decompositions

    table = dict(core_aten_decompositions())
    table.update(get_decompositions([
        aten._native_batch_norm_legit_functional, aten.native_layer_norm, aten.gelu, aten.addmm,
        aten.expand, aten._adaptive_avg_pool2d, aten.embedding, aten.linear, aten.matmul,
    ]))
    # irc converts flash attention and its backward itself: torch's decomposition of the forward
    # is not what the (undecomposed) backward expects, which gives wrong gradients
    table.pop(aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return table


def make_backend(options: dict):
    from torch._dynamo.backends.common import aot_autograd

    def compiler(gm, example_inputs):
        return compile_graph(gm, example_inputs, options)

    if options.get("threads", 1) > 1:
        share_torch_threads()

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler, inference_compiler=compiler,
                        decompositions=decompositions())


def share_torch_threads() -> bool:
    """Run irc's parallel loops on torch's own OpenMP team rather than on irc's workers.

    torch's intra-op threads (ATen's ``parallel_for``, an OpenMP team where torch is built with
    OpenMP, as its Linux wheels are) spin for a while after each parallel op; so do irc's.  In a
    model irc compiles part of, or a training step whose loss and optimiser run in torch, the
    two sets of threads would take turns on the same cores, each spinning while the other has
    work.  On torch's team, irc's loops are taken up by the threads torch just left spinning,
    as inductor's generated code's are.  False where torch has no OpenMP team to share."""
    import glob
    import os

    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return False
    from irc.runtime.cpu import pool

    for library in sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.*"))):
        if pool.pool().share_openmp(library):
            return True
    return False


def compile_graph(gm, example_inputs, options: dict | None = None):
    """A boxed callable (aot_autograd's convention: one list of arguments) running ``gm``."""
    missing = unsupported_ops(gm)
    if missing:
        split = _split(gm, options or {})
        if split is None:
            warn_fallback("a graph", f"irc has no conversion for {', '.join(missing)}")
        else:
            warn_fallback(", ".join(missing), "irc has no conversion for it; irc compiles the rest of the graph")
        COUNTS["torch"] += 1
        return _boxed(_torch_runner(split if split is not None else gm))
    return _boxed(IrcGraph(gm, options or {}, static=_static(example_inputs)))


def _static(example_inputs) -> bool:
    """Whether every input has a static shape (no symbolic size, no symbolic scalar): then
    dynamo's guards give every call of the graph its first call's shapes and dtypes."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            if any(not isinstance(d, int) for d in x.shape):
                return False
        elif not isinstance(x, (int, float, bool)):  # torch.SymInt and SymFloat are neither
            return False
    return True


def _split(gm, options: dict):
    """``gm`` with its convertible parts fused into submodules that irc runs (``IrcModule``),
    the rest left to torch; None when no part is worth compiling."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    from .convert import CONVERTERS

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and node.target in CONVERTERS

    try:
        partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=False)
        partitions = partitioner.propose_partitions()
        if not partitions:
            return None
        fused = partitioner.fuse_partitions(partitions)
    except Exception:  # noqa: BLE001 - a graph the partitioner cannot split runs whole in torch
        return None
    for name, child in list(fused.named_children()):
        if name.startswith("fused_"):
            setattr(fused, name, IrcModule(child, options))
    fused.recompile()
    return fused


class IrcModule(torch.nn.Module):
    """A fused part of a split graph, run by irc (``IrcGraph``) with the part's own outputs."""

    def __init__(self, gm, options: dict):
        super().__init__()
        self.graph_module = gm
        self.irc_graph = IrcGraph(gm, options)
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        self.single = not isinstance(out, (list, tuple))

    def forward(self, *args):
        result = self.irc_graph(list(args))
        return result[0] if self.single else tuple(result)


def _boxed(fn):
    def run(args):
        return fn(args)

    run._boxed_call = True
    run.irc_graph = fn if isinstance(fn, IrcGraph) else None
    return run


def _torch_runner(gm):
    def run(args):
        return gm(*args)

    return run


def _key(args) -> tuple:
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else ("value", a) for a in args)


class IrcGraph:
    """One FX graph, compiled by irc once per input signature (or run by torch for those
    where a node's form is not supported, with one warning naming it)."""

    def __init__(self, gm, options: dict, static: bool = False):
        self.gm = gm
        self.options = options
        self.compiled: dict = {}
        self.compile_seconds = 0.0
        self.static = static  # inputs of static shapes (compile_graph): one signature, no key to build
        self.only = None  # then its compiled entry, after the first call

    def __call__(self, args):
        if self.only is not None:
            return self._run(args, *self.only)
        key = _key(args)
        entry = self.compiled.get(key)
        first = entry is None
        if first:
            entry = self.compiled[key] = self._compile(args)
        if entry == "torch":
            return self.gm(*args)
        if not first:
            return self._run(args, *entry)
        graph, fn, views = entry
        arrays = _arrays(args, graph.params, views)
        start = time.perf_counter()  # irc compiles the function for these shapes now: a failure falls back
        try:
            results = fn(*arrays) if fn is not None else ()
        except Exception as e:  # noqa: BLE001 - any failure of irc's pipeline is a fallback
            warn_fallback("a graph", f"irc failed to compile it ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})")
            self.compiled[key] = "torch"
            COUNTS["torch"] += 1
            return self.gm(*args)
        self.compile_seconds += time.perf_counter() - start
        COUNTS["irc"] += 1
        if hasattr(fn, "entry") and all(type(a) is np.ndarray for a in arrays):
            fn = fn.entry(tuple(a.shape for a in arrays))  # these shapes' call from now on (fast_entry.py)
            self.compiled[key] = entry = (graph, fn, views)
        if self.static:
            self.only = entry
        return self._outputs(args, graph, results)

    def _run(self, args, graph, fn, views):
        """A call of a signature compiled already."""
        results = fn(*_arrays(args, graph.params, views)) if fn is not None else ()
        return self._outputs(args, graph, results)

    @staticmethod
    def _outputs(args, graph, results) -> list:
        if not isinstance(results, tuple):
            results = (results,)
        out = []
        for kind, v, *layout in graph.outputs:
            if kind == "result":
                out.append(_tensor(results[v], layout[0]))
            elif kind == "input":
                out.append(args[v])
            elif kind == "empty":
                out.append(torch.empty(v.shape, dtype=v.dtype))
            else:
                out.append(v)
        args.clear()  # boxed: the caller's list lets inputs be freed as early as possible
        return out

    def _compile(self, args):
        from irc.gcpause import paused_gc

        with paused_gc():  # bulk IR work in a process holding torch's many objects: see TensorFunction._specialize
            return self._convert_and_compile(args)

    def _convert_and_compile(self, args):
        import irc

        start = time.perf_counter()
        try:
            graph = convert(self.gm, list(args))
        except Unsupported as e:
            warn_fallback(f"a graph with {e.op}", e.why)
            COUNTS["torch"] += 1
            return "torch"
        fn = None
        if graph.module.functions[0].function_type.results:
            try:
                fn = irc.compile(graph.module, **self.options)["graph"]
            except Exception as e:  # noqa: BLE001 - bad options or a verifier error: torch runs it
                warn_fallback("a graph", f"irc.compile refused it ({type(e).__name__}: {str(e).splitlines()[0]})")
                COUNTS["torch"] += 1
                return "torch"
        self.compile_seconds += time.perf_counter() - start
        return graph, fn, {}


def _arrays(args, params, views: dict) -> list:
    """The arrays of ``args`` at ``params``.  A parameter (``nn.Parameter``: the same object call
    after call) has its array made once per signature and kept in ``views`` while its memory stays
    where it was and contiguous (an optimiser's in-place update changes neither): a model's
    weights are most of a small graph's arguments, and ``_array`` costs about a microsecond each."""
    arrays = []
    for i in params:
        t = args[i]
        seen = views.get(i)
        if seen is not None and seen[0] is t and seen[1] == t.data_ptr() and t.is_contiguous():
            arrays.append(seen[2])
            continue
        a = _array(t)
        if isinstance(t, torch.nn.Parameter):
            views[i] = (t, t.data_ptr(), a)
        arrays.append(a)
    return arrays


def _array(t: torch.Tensor):
    """The tensor's memory as a numpy array (no copy for a contiguous CPU tensor)."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def _tensor(array, layout):
    """irc's result array as the tensor torch expects, with torch's strides (see convert._layout)."""
    t = torch.from_numpy(array)
    if layout is None:
        return t
    if isinstance(layout, list):
        return t.permute([layout.index(d) for d in range(len(layout))])
    _, shape, stride = layout
    if any(st == 0 and n > 1 for n, st in zip(shape, stride)):  # an expanded view: one element, many places
        return t
    try:
        return torch.empty_strided(shape, stride, dtype=t.dtype).copy_(t)
    except RuntimeError:  # overlapping strides: torch cannot write them; the values are what matter
        return t
