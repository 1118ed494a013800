"""Tensor-level functions called with numpy arrays: specialised per shape, compiled, cached.

``irc.compile`` hands every function whose signature has tensors to a
``TensorFunction``.  A call checks its arguments against the signature, then
looks up the machine code for their shapes; the first call with new shapes
runs the tensor pipeline on a copy of the module::

    1. specialise shapes       specialize-shapes          every ? becomes the argument's size
    2. graph rewrites          canonicalize,stabilize,cse
    3. fuse                    fuse-elementwise           one graph.fused op per loop nest
    4. bufferize, lower        tensor-to-loops            scf loops over memrefs
    5. plan memory             plan-memory{arena=argument}
    6. approximate math        math-approx                (when the pass is registered; fma=true
                                                          where the host has FMA instructions)
    7. clean up                canonicalize,cse,licm
    8. share loop nests        outline-loops              twin loop nests: one function
    9. split for threads       split-parallel             (with threads > 1; loops worth a thread)
   10. small code for size     optsize-small-loops        LLVM skips vectorising small loops

and then compiles the result like any scalar module (``executable.CPU_STAGES``).
irc computes the output shapes and allocates the outputs (or writes into the
arrays given as ``out=``); intermediates live in one arena per specialisation,
allocated once and reused across calls.  With ``threads > 1`` the parallel
loops run as chunks of their range on irc's worker threads (the calls into machine
code release the GIL), each chunk worth at least ``MIN_WORK_PER_THREAD`` ops.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from irc.checks import check_array
from irc.diagnostics import IRError
from irc.types import FloatType, IntegerType, TensorType, index, numpy_dtype

TENSOR_STAGES = [
    ("specialise shapes", "specialize-shapes"),
    ("graph rewrites", "canonicalize,stabilize,cse"),
    ("fuse", "fuse-elementwise"),
    ("bufferize and lower to loops", "tensor-to-loops"),
    ("plan memory", "plan-memory{arena=argument}"),
    ("approximate math", "math-approx"),
    ("clean up", "canonicalize,cse,licm"),
    ("share loop nests", "outline-loops"),
]


def has_tensors(func) -> bool:
    """Whether ``func`` takes, returns or computes tensors (and so needs the tensor pipeline)."""
    ft = func.function_type
    if any(isinstance(t, TensorType) for t in (*ft.inputs, *ft.results)):
        return True
    return any(isinstance(r.type, TensorType) for op in func.walk() for r in op.results)


@dataclass(frozen=True)
class TensorOptions:
    """How tensor functions are lowered (the rest of ``irc.compile``'s options apply after)."""

    blas: bool = False  # large f32/f64 matmuls call a BLAS gemm (cpu/blas.py), not irc's GEMM library function
    math_approx: bool = True  # exp, tanh... as vectorisable polynomials instead of libm calls
    threads: int = 1  # parallel loops split across this many threads (the caller's included)


def host_vectors() -> tuple[int, int]:
    """(bits, registers) of the host CPU's vector registers, from the features LLVM detects:
    what ``tensor-to-loops`` sizes the GEMM's register tile by (lowering/matmul.py)."""
    from irc.runtime.cpu.engine import host_cpu

    features = set(host_cpu()[1].split(","))
    if "+avx512f" in features:
        return 512, 32
    if "+avx" in features:
        return 256, 16
    return 128, 32 if "+neon" in features else 16


def host_fma() -> bool:
    """Whether the host CPU has fused multiply-add instructions (x86's FMA3; every AArch64
    core): then ``math-approx{fma=true}`` makes the f32 kernels' multiply-adds one
    instruction each, where without them each would be a call to ``fmaf``."""
    from irc.runtime.cpu.engine import host_cpu

    features = set(host_cpu()[1].split(","))
    return "+fma" in features or "+neon" in features


def host_caches() -> tuple[int, int]:
    """(L1 data, last level) cache sizes in bytes from Linux's sysfs (0 where not known)."""
    from pathlib import Path

    sizes = {}
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            kind, level, size = ((entry / f).read_text().strip() for f in ("type", "level", "size"))
            value = int(size.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            sizes[int(level)] = value
    return sizes.get(1, 0), sizes[max(sizes)] if sizes and max(sizes) > 1 else 0


FINISHING_STAGES = ("share loop nests", "split for threads", "small code for size")
"""The stages that only rearrange the function into calls (``TensorFunction._specialize`` reads
what the function does, e.g. ``out_aliasing.in_place_safe``, before them)."""


def tensor_pipeline(options: TensorOptions = TensorOptions(), outputs_for_temporaries: bool = True,
                    part: str = "all") -> str:
    """Stages 2-10 of the module docstring as a pipeline string, for ``options``;
    ``outputs_for_temporaries=False`` keeps plan-memory from placing temporaries in the outputs
    (for calls whose outputs are their inputs' buffers: ``TensorFunction.__call__``); ``part``:
    ``"all"``, ``"body"`` (all but ``FINISHING_STAGES``) or ``"finish"`` (those)."""
    return ",".join(pipeline for _, pipeline in tensor_stages(options, outputs_for_temporaries, part))


def tensor_stages(options: TensorOptions = TensorOptions(), outputs_for_temporaries: bool = True,
                  part: str = "all") -> list[tuple[str, str]]:
    """``tensor_pipeline`` as (stage name, pipeline) pairs: what runs, one stage at a time."""
    from irc.passmanager import PASSES

    stages = []
    for name, pipeline in TENSOR_STAGES[1:] + [("split for threads", "split-parallel"),
                                               ("small code for size", "optsize-small-loops")]:
        if (part == "body" and name in FINISHING_STAGES) or (part == "finish" and name not in FINISHING_STAGES):
            continue
        if name == "split for threads":
            if options.threads <= 1:
                continue
            pipeline = f"split-parallel{{min-work={MIN_WORK_PER_THREAD}}}"  # what _invoke would split
        if name == "approximate math" and not (options.math_approx and "math-approx" in PASSES):
            continue
        if name == "approximate math" and host_fma():
            pipeline = "math-approx{fma=true}"
        if name == "plan memory" and not outputs_for_temporaries:
            pipeline = "plan-memory{arena=argument outputs=false}"
        if name == "bufferize and lower to loops":
            bits, registers = host_vectors()
            l1, l3 = host_caches()
            flags = ["blas=true"] if options.blas else ["gemm-library=true"]
            flags += [f"vector-bits={bits}", f"vector-registers={registers}", f"l1-bytes={l1}", f"l3-bytes={l3}"]
            if options.threads > 1:
                flags.append(f"threads={options.threads}")
            pipeline = f"tensor-to-loops{{{' '.join(flags)}}}"
        stages.append((name, pipeline))
    return stages


MIN_WORK_PER_THREAD = 1 << 18
"""Ops (split-parallel's ``work`` estimate) a thread must get for starting it to pay off.  A chunk
handed to a worker costs some 10-20 us (the pool's queue, a wake-up, the GIL; more on a busy
machine), and these ops are vectorised, ~0.1 ns each on the machine of docs/benchmarks.md: at 2^15
(~3 us a chunk) the 2-layer GPT-2 of benchmarks/torch_backend.py ran 3x slower on two threads
than on one (70 segments)."""

SEGMENT_COST = 1 << 19
"""Ops of split work a segment must bring for a call to run its segments one by one from Python
(``Specialization.threaded``) rather than the whole function in one C call: each segment costs a
Python-level call and the split ones a handoff, which the work done on the second thread must
repay."""

def _dtype(t):
    e = t.element_type
    if isinstance(e, IntegerType) and e.width == 1:
        return np.dtype(np.bool_)
    if isinstance(e, FloatType) and e.kind == "bf16":
        raise TypeError("bf16 tensors cannot cross the Python call boundary yet")
    return np.dtype(numpy_dtype(e))


def _aligned_arena(nbytes: int) -> np.ndarray:
    """``nbytes`` of scratch starting on a plan-memory ALIGN boundary (numpy promises 16)."""
    from irc.passes.plan_memory import ALIGN

    raw = np.empty(nbytes + ALIGN, np.int8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes]


def size_params(func) -> list[int]:
    """The integer parameters whose values give the size of a tensor (through the size
    operands of a splat, iota, reshape or broadcast): a result's shape may depend on
    them, so a call is specialised on their values as on its arrays' shapes."""
    from irc.passes.specialize_shapes import SIZED_OPS

    params = {a: i for i, a in enumerate(func.args) if a.type.is_int_or_index}
    stack = [v for op in func.walk() if op.name in SIZED_OPS for v in op.operands[SIZED_OPS[op.name]:]]
    found, seen = set(), set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v in params:
            found.add(params[v])
        elif v.defining_op is not None:
            stack.extend(v.defining_op.operands)
    return sorted(found)


def _bind_constants(func, values: dict) -> None:
    """Replace the uses of parameters (by index) with constants of their values."""
    from irc.dialects.arith import ConstantOp

    from irc.attributes import IntegerAttr

    entry = func.body.entry
    for i, value in values.items():
        arg = func.args[i]
        const = ConstantOp.build(IntegerAttr(value, arg.type))
        const.loc = func.loc
        entry.prepend(const)
        arg.replace_all_uses_with(const.results[0])


@dataclass(frozen=True)
class Segment:
    """One segment of ``split-parallel`` as the runtime calls it: ``wrapper`` on the entry's
    arguments at ``params`` (or its C function on the entry's C arguments at ``c_params``:
    addresses and sizes), then, for a parallel segment, a sub-range of ``range`` (lb, ub, step)."""

    wrapper: object
    range: tuple | None
    work: int
    params: tuple
    c_params: tuple


def c_positions(inputs, params) -> tuple:
    """The positions in a call's C arguments of the parameters at ``params``, for a function
    taking ``inputs``: a memref is its address and one size per dimension, a scalar itself."""
    from irc.types import MemRefType

    starts, at = [], 0
    for t in inputs:
        starts.append(at)
        at += 1 + t.rank if isinstance(t, MemRefType) else 1
    return tuple(starts[k] + j for k in params
                 for j in range(1 + inputs[k].rank if isinstance(inputs[k], MemRefType) else 1))


class Specialization:
    """Machine code for one tuple of argument shapes, and what calling it needs."""

    def __init__(self, executable, name: str, out_shapes: list, arena_bytes: int | None, segments: list,
                 in_place: frozenset = frozenset(), inputs: list = ()):
        self.executable = executable  # keeps the machine code alive
        self.in_place = in_place  # (output, input) pairs that may share one buffer (out_aliasing.py)
        self.wrapper = executable[name]
        self.c_function = self.wrapper.c_function  # the C entry: addresses and sizes (_fast_call)
        self.out_shapes = out_shapes
        self.arena_bytes = arena_bytes  # None: the function takes no arena
        self.arenas: list[np.ndarray] = []  # a free list: one arena per concurrent call
        # what runs the function on threads: from (name, (lb, ub, step) or None, work, params), and
        # the entry's parameter types ``inputs``
        self.segments = [Segment(executable[seg], rng, work, tuple(params), c_positions(inputs, params))
                         for seg, rng, work, params in segments]
        # Whether threads pay for a call: the work of the segments that split (worth two chunks)
        # against the cost of running segment by segment (SEGMENT_COST each); otherwise the whole
        # function runs as one C call on the calling thread, as with one thread.
        split = sum(seg.work for seg in self.segments if seg.range is not None and seg.work >= 2 * MIN_WORK_PER_THREAD)
        self.threaded = bool(self.segments) and split >= SEGMENT_COST * len(self.segments)
        self.timings: dict[str, float] = {}  # seconds per stage of making it (--timing)
        self.plans: dict[int, list] = {}  # threads -> how _invoke runs the segments (_plan)


class TensorFunction:
    """``exe.f(a, b)``: numpy arrays in, numpy arrays out; see the module docstring."""

    def __init__(self, module, func, tensor_options: TensorOptions, compile_options: dict):
        self.module = module
        self.tensor_options = tensor_options
        self.name = func.sym_name
        self.signature = func.function_type
        self.param_names = [a.name_hint or f"arg{i}" for i, a in enumerate(func.args)]
        self.compile_options = compile_options
        self.size_params = size_params(func)  # scalars that size a tensor: specialised on their values
        self._specializations: dict = {}
        self._module_text: str | None = None  # the key of the disk cache of specialisations
        # The fast path of a call (``_fast_call``): every parameter and result a tensor, no
        # sizes from scalars; then a call is its arrays' shapes, one dict lookup and one C call.
        ft = self.signature
        self._fast_dtypes = None
        if self.size_params == [] and all(isinstance(t, TensorType) for t in (*ft.inputs, *ft.results)):
            try:
                self._fast_dtypes = tuple(_dtype(t) for t in ft.inputs)
                self._out_dtypes = tuple(_dtype(t) for t in ft.results)
            except TypeError:  # bf16: the slow path says why
                self._fast_dtypes = None
        self._lock = threading.Lock()
        self.__doc__ = f"@{self.name} : {self.signature} (compiled for the CPU per argument shapes)"

    def __repr__(self) -> str:
        return f"<irc tensor function @{self.name} : {self.signature}>"

    # -- arguments -----------------------------------------------------------------------------

    def _check(self, args) -> tuple[list, tuple]:
        inputs = self.signature.inputs
        if len(args) != len(inputs):
            raise TypeError(f"@{self.name}() takes {len(inputs)} argument{'s' if len(inputs) != 1 else ''} "
                            f"({', '.join(self.param_names)}), got {len(args)}")
        values, shapes = [], []
        for name, t, a in zip(self.param_names, inputs, args):
            if not isinstance(t, TensorType):
                values.append(a)
                shapes.append(None)
                continue
            a = check_array(f"parameter '{name}'", a, t, _dtype(t))
            if not a.flags.c_contiguous or not a.flags.writeable:
                a = np.array(a, order="C")  # compiled code reads C order (and takes buffers it may write)
            values.append(a)
            shapes.append(a.shape)
        return values, tuple(shapes)

    # -- specialisation -----------------------------------------------------------------------------

    def specialization(self, shapes: tuple, sizes: tuple = (), aliased: bool = False) -> Specialization:
        """The machine code for arguments of ``shapes`` (and, for ``size_params``, of the
        values ``sizes``); ``aliased``: compiled for outputs that are their inputs' buffers
        (no temporaries planned into the outputs, so more pairs are safe in place)."""
        key = (shapes, sizes) if sizes else shapes
        if aliased:
            key = (key, "aliased")
        spec = self._specializations.get(key)
        if spec is None:
            with self._lock:
                spec = self._specializations.get(key)
                if spec is None:
                    from irc.gcpause import paused_gc

                    with paused_gc():  # lowering and translating build many small objects (gcpause.py)
                        spec = self._specializations[key] = self._specialize(shapes, sizes, aliased)
        return spec

    def lower(self, shapes: tuple, sizes: tuple = (), aliased: bool = False, part: str = "all",
              timings: dict | None = None):
        """The loop-level module this function becomes for arguments of ``shapes``, the
        parameters ``size_params`` being the constants ``sizes`` (``aliased``: see
        ``specialization``; ``part``: see ``tensor_pipeline``); ``timings``, if given, gets
        the seconds each stage took."""
        import irc.passes
        from irc.passes.specialize_shapes import specialize

        module = self.module.clone()
        func = next(f for f in module.functions if f.sym_name == self.name)
        bound = dict(zip(self.size_params, sizes))
        _bind_constants(func, bound)
        # Only this function and the tensor functions it calls are compiled; the callees are
        # inlined (a tensor function is one graph), then dropped.
        called = _called_from(module, func)
        self._drop_tensor_functions(module, func, keep=called)
        types = [TensorType(s, t.element_type) if s is not None else t
                 for s, t in zip(shapes, self.signature.inputs)]
        if called:
            irc.passes.run(module, "inline")
            self._drop_tensor_functions(module, func, keep=_called_from(module, func))
        timings = {} if timings is None else timings
        start = time.perf_counter()
        try:
            specialize(func, types)
        except IRError as e:
            shown = [list(s) if s is not None else bound.get(i, "scalar") for i, s in enumerate(shapes)]
            # str(e) shows the op's source line where it has one (a traced op: the user's line)
            detail = e.message if e.location.line == 0 else str(e).removeprefix("error: ")
            raise ValueError(f"@{self.name} cannot run on arguments of shapes {shown}: {detail}") from None
        timings[TENSOR_STAGES[0][0]] = time.perf_counter() - start
        # Verified once, by the compile that takes it (executable.prepare), not after each stage.
        for name, pipeline in tensor_stages(self.tensor_options, outputs_for_temporaries=not aliased, part=part):
            start = time.perf_counter()
            irc.passes.run(module, pipeline, verify_each=False)
            timings[name] = time.perf_counter() - start
        return module, func

    @staticmethod
    def _drop_tensor_functions(module, func, keep: set[str]) -> None:
        for other in list(module.functions):
            if other is not func and other.sym_name not in keep and has_tensors(other) \
                    and not other.is_declaration:
                other.erase()

    def _specialize(self, shapes: tuple, sizes: tuple = (), aliased: bool = False) -> Specialization:
        """``specialization``'s work, with Python's cyclic collector paused (irc.gcpause): lowering
        a graph builds and drops hundreds of thousands of objects, and in a process that holds
        many (torch and a model: ~800k) each full collection scans them all - a quarter of the
        time of a 2-layer GPT-2's first call went to the collector."""
        from irc.gcpause import paused_gc

        with paused_gc():
            return self._specialize_now(shapes, sizes, aliased)

    def _specialize_now(self, shapes: tuple, sizes: tuple, aliased: bool) -> Specialization:
        from .executable import _compile as compile_module
        from .out_aliasing import in_place_safe

        disk_key = self._disk_key(shapes, (sizes, aliased))
        if disk_key is not None:
            start = time.perf_counter()
            spec = self._from_disk(disk_key)
            if spec is not None:
                spec.timings = {"load from the disk cache": time.perf_counter() - start}
                return spec
        import irc.passes

        timings: dict = {}
        module, func = self.lower(shapes, sizes, aliased, part="body", timings=timings)
        sig = func.attributes["tensor_signature"].type
        outs = [tuple(t.shape) for t in sig.results if isinstance(t, TensorType)]
        for k, shape in enumerate(outs):
            if None in shape:
                raise ValueError(f"@{self.name}: the shape of tensor result {k} depends on values only known "
                                 f"while it runs ({list(shape)}); compute it from parameters")
        in_place = in_place_safe(func, len(self.signature.inputs), len(outs))  # before its loops are calls
        for name, pipeline in tensor_stages(self.tensor_options, part="finish"):
            start = time.perf_counter()
            irc.passes.run(module, pipeline, verify_each=False)
            timings[name] = time.perf_counter() - start
        arena = func.attributes.get("arena_bytes")
        segments = []
        names = func.attributes.get("segments")
        for name in (names.elements if names is not None else ()):
            seg = next(f for f in module.functions if f.sym_name == name.value)
            rng = seg.attributes.get("parallel_range")
            work = seg.attributes.get("work")
            segments.append((name.value, tuple(e.value for e in rng.elements) if rng is not None else None,
                             work.value if work is not None else 0,
                             [e.value for e in seg.attributes["params"].elements]))
        # LLVM's unroller grows the vectorised loops of tensor code (which the vectoriser has
        # interleaved already) for no measured gain: ~15% of LLVM's time on a training step.
        options = dataclasses.replace(self.compile_options["options"], loop_unrolling=False)
        exe = compile_module(module, **{**self.compile_options, "cache": False, "options": options}, owned=True)
        arena_bytes = arena.value if arena is not None else None
        if disk_key is not None and exe.cache_entry is not None:
            from . import specialization_cache

            record = specialization_cache.record(module, self.name, outs, arena_bytes, segments, in_place)
            specialization_cache.store(disk_key, record, exe.cache_entry, self.compile_options.get("cache_dir"))
        spec = Specialization(exe, self.name, outs, arena_bytes, segments, in_place, func.function_type.inputs)
        spec.timings = {**timings, **{k: v for k, v in exe.stats.items() if isinstance(v, float) and k != "total"}}
        return spec

    def _disk_key(self, shapes: tuple, sizes: tuple) -> str | None:
        """The specialisation cache's key (specialization_cache.py), or None where it does not
        apply: caching off, or ``extern`` functions (their addresses belong to this process)."""
        options = self.compile_options
        if not options.get("cache", True) or options.get("extern"):
            return None
        from . import specialization_cache
        from .cpu.engine import host_cpu

        if self._module_text is None:
            self._module_text = self.module.print()
        return specialization_cache.key(self._module_text, self.name, shapes, sizes, self.tensor_options,
                                        {k: repr(v) for k, v in options.items()}, *host_cpu())

    def _from_disk(self, disk_key: str) -> Specialization | None:
        """The specialisation from its disk entry, or None (no entry, or one that does not link)."""
        from irc.diagnostics import IRError

        from . import specialization_cache
        from .cpu import callconv, engine, symbols
        from .executable import Executable, _faults_from, runtime_links

        cache_dir = self.compile_options.get("cache_dir")
        hit = specialization_cache.load(disk_key, cache_dir)
        if hit is None:
            return None
        record, entry = hit
        try:
            funcs = specialization_cache.declarations(record)
            segments = [(name, tuple(rng) if rng is not None else None, work, params)
                        for name, rng, work, params in record["segments"]]
            if self.name not in funcs or any(name not in funcs for name, *_ in segments):
                raise ValueError("the entry or a segment is missing")
            inputs = funcs[self.name].function_type.inputs
            for name, rng, _, params in segments:  # a segment takes the entry's parameters it names
                if any(not 0 <= k < len(inputs) for k in params) or list(funcs[name].function_type.inputs) != \
                        [inputs[k] for k in params] + ([index, index] if rng is not None else []):
                    raise ValueError(f"segment {name} does not take the entry's parameters it names")
            links = runtime_links(record["declared"])
            library, addresses = engine.load([symbols.jit_symbol(n) for n in funcs], object_code=entry.object_code,
                                             **links)
        except (IRError, RuntimeError, ValueError):  # not what we wrote, or it needs what is not here
            specialization_cache.discard(disk_key, cache_dir)
            return None
        faults = _faults_from(entry.faults, self.module)
        functions = {n: callconv.make_wrapper(f, addresses[symbols.jit_symbol(n)], faults, None, library)
                     for n, f in funcs.items()}
        exe = Executable(functions, library, None, {"cache": "disk (specialisation)"})
        return Specialization(exe, self.name, [tuple(s) for s in record["out_shapes"]], record["arena_bytes"],
                              segments, frozenset(tuple(p) for p in record["in_place"]), inputs)

    # -- the call ----------------------------------------------------------------------------------------

    def __call__(self, *args, out=None):
        if self._fast_dtypes is not None:
            result = self._fast_call(args, out)
            if result is not _SLOW:
                return result
        values, shapes = self._check(args)
        sizes = tuple(values[i] for i in self.size_params)
        # Outputs that are inputs' buffers (donated parameters): code planned without temporaries
        # in the outputs, which more often needs no copy of an input first.
        spec = self.specialization(shapes, sizes, aliased=out is not None and _shares_memory(values, out))
        outputs = self._outputs(spec, out)
        if out is not None:  # an input that shares memory with an output is read from a copy
            from .out_aliasing import separate

            values = separate(self.name, values, outputs, spec.in_place)
        call = list(values) + outputs
        arena = None
        if spec.arena_bytes is not None:
            arena = spec.arenas.pop() if spec.arenas else _aligned_arena(spec.arena_bytes)
            call.append(arena)
        try:
            scalars = self._invoke(spec, call)
        finally:
            if arena is not None:
                spec.arenas.append(arena)
        return self._results(outputs, scalars)

    def entry(self, shapes: tuple):
        """The call for arguments already known to be ``np.ndarray``s of exactly ``shapes`` and
        the signature's dtypes, specialised and generated (``fast_entry.py``); ``self`` where
        there is no such call (not specialised yet, threads, sizes from scalars).  irc.jit uses it
        once its cache key has matched."""
        from .fast_entry import make_entry

        spec = self._specializations.get(tuple(shapes))
        entry = make_entry(self, spec, tuple(shapes), self.name) if spec is not None else None
        return entry or self

    def _fast_call(self, args, out):
        """The call for arrays that need nothing done to them: exact numpy arrays of the
        signature's dtypes, C-contiguous and writeable (``c_char.from_buffer`` insists on both,
        and gives the address without numpy's slower ``ctypes``/``__array_interface__``), of
        shapes already specialised for, on one thread, outputs not overlapping inputs other
        than as ``in_place`` allows.  Anything else returns ``_SLOW``: the full checks then
        raise the right error or make the copies."""
        dtypes = self._fast_dtypes
        if len(args) != len(dtypes):
            return _SLOW
        try:
            shapes = tuple(a.shape for a in args)
        except AttributeError:
            return _SLOW
        spec = self._specializations.get(shapes)
        if spec is None:
            return _SLOW
        for a, dt in zip(args, dtypes):
            if type(a) is not np.ndarray or a.dtype is not dt:
                return _SLOW
        if out is None:
            outputs = [np.empty(shape, dt) for shape, dt in zip(spec.out_shapes, self._out_dtypes)]
        else:
            outputs = [out] if type(out) is np.ndarray else list(out)
            if len(outputs) != len(spec.out_shapes):
                return _SLOW
            for o, shape, dt in zip(outputs, spec.out_shapes, self._out_dtypes):
                if type(o) is not np.ndarray or o.dtype is not dt or o.shape != shape:
                    return _SLOW
        arrays = (*args, *outputs)
        try:
            addresses = [_address(_from_buffer(a)) for a in arrays]
        except (TypeError, ValueError, BufferError):  # read-only or not C-contiguous
            return _SLOW
        if out is not None and _overlap([(p, p + a.nbytes) for p, a in zip(addresses, arrays)], arrays,
                                        len(args), spec.in_place):
            return _SLOW
        call = [v for p, a in zip(addresses, arrays) for v in (p, *a.shape)]
        arena = None
        if spec.arena_bytes is not None:
            arena = spec.arenas.pop() if spec.arenas else _aligned_arena(spec.arena_bytes)
            call.append(_address(_from_buffer(arena)) if arena.nbytes else arena.ctypes.data)  # from_buffer: >= 1 byte
            call.append(arena.shape[0])
        try:
            if spec.threaded and self.tensor_options.threads > 1:
                self._invoke(spec, call, raw=True)
            else:
                status = spec.c_function(*call)
                if status:
                    spec.wrapper.raise_fault(status)
        finally:
            if arena is not None:
                spec.arenas.append(arena)
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _outputs(self, spec: Specialization, out) -> list[np.ndarray]:
        types = [t for t in self.signature.results if isinstance(t, TensorType)]
        if out is None:
            return [np.empty(shape, _dtype(t)) for shape, t in zip(spec.out_shapes, types)]
        given = [out] if isinstance(out, np.ndarray) else list(out)
        if len(given) != len(types):
            raise TypeError(f"out= must give {len(types)} array{'s' if len(types) != 1 else ''} for "
                            f"@{self.name}, got {len(given)}")
        for k, (a, shape, t) in enumerate(zip(given, spec.out_shapes, types)):
            if not isinstance(a, np.ndarray) or a.dtype != _dtype(t) or a.shape != shape \
                    or not a.flags.c_contiguous or not a.flags.writeable:
                raise ValueError(f"out[{k}] must be a writeable C-contiguous {_dtype(t)} array of shape "
                                 f"{list(shape)}")
        return given

    def _invoke(self, spec: Specialization, call: list, raw: bool = False):
        """Run the specialisation on ``call`` (its Python wrappers' arguments, or with ``raw`` the
        C arguments ``_fast_call`` made: addresses and sizes), on threads where it has segments."""
        threads = self.tensor_options.threads
        if threads <= 1 or not spec.threaded:
            return _checked(spec.wrapper)(*call) if raw else spec.wrapper(*call)
        plan = _plan(spec, threads)
        if raw:
            return _run_plan(plan, call, threads)
        for seg, (_, _, _, chunks) in zip(spec.segments, plan):  # the Python wrappers, on the plan's chunks
            args = [call[k] for k in seg.params]
            if chunks is None:
                seg.wrapper(*args)
            elif len(chunks) == 1:
                seg.wrapper(*args, *chunks[0])
            else:
                _run_chunks(seg.wrapper, args, chunks, threads)
        return None

    def _results(self, outputs: list, scalars):
        if not isinstance(scalars, tuple):
            scalars = () if scalars is None else (scalars,)
        tensors, values = iter(outputs), iter(scalars)
        results = [next(tensors) if isinstance(t, TensorType) else next(values) for t in self.signature.results]
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)


def _shares_memory(values: list, out) -> bool:
    """Whether an ``out=`` array shares memory with an argument array."""
    given = [out] if isinstance(out, np.ndarray) else list(out) if isinstance(out, (list, tuple)) else []
    return any(isinstance(o, np.ndarray) and isinstance(v, np.ndarray) and np.may_share_memory(o, v)
               for o in given for v in values)


_SLOW = object()
"""What ``_fast_call`` returns for a call it leaves to the full path."""


def _plan(spec: Specialization, threads: int) -> list:
    """How ``_invoke`` runs ``spec``'s segments on ``threads``, worked out on its first call and
    kept: per segment ``(c_function, raise_fault, positions of the C arguments it takes,
    chunks)``, ``chunks`` being ``None`` for a serial segment, else the (lo, hi) of each
    thread's chunk of whole trips, each worth ``MIN_WORK_PER_THREAD`` ops.  Calls from C
    arguments use all of it (``_run_plan``); calls through the Python wrappers the chunks.
    A call then does no arithmetic for it: what is left between two segments' chunks is the
    hand-off (``_run_plan``), which the other threads wait through."""
    plan = spec.plans.get(threads)
    if plan is None:
        plan = []
        for seg in spec.segments:
            chunks = None
            if seg.range is not None:
                lb, ub, step = seg.range
                trips = max(0, -(-(ub - lb) // step))
                n = min(threads, trips, max(1, seg.work // MIN_WORK_PER_THREAD))
                cuts = [lb + step * (trips * i // n) for i in range(n)] + [ub]
                chunks = tuple(zip(cuts, cuts[1:])) if n > 1 else ((lb, ub),)
            plan.append((seg.wrapper.c_function, seg.wrapper.raise_fault, seg.c_params, chunks))
        spec.plans[threads] = plan
    return plan


def _run_plan(plan: list, call: list, threads: int) -> None:
    """``plan`` on the C arguments ``call``: the calling thread runs each parallel segment's
    first chunk, irc's workers the others (``_run_chunks``); a fault raises after every chunk of
    the segment has finished."""
    for c_function, raise_fault, positions, chunks in plan:
        args = [call[k] for k in positions]
        if chunks is None:
            status = c_function(*args)
        elif len(chunks) == 1:
            status = c_function(*args, *chunks[0])
        else:
            status = _run_chunks(c_function, args, chunks, threads)
        if status:
            raise_fault(status)


_job_queues: dict[int, object] = {}


def _workers(threads: int):
    """The job queue of the process's ``threads - 1`` irc worker threads, started on first use
    (daemons: a job is one chunk of a parallel loop, run by one C call that drops the GIL).
    Lighter than a ``ThreadPoolExecutor``: no ``Future`` and no condition variable per chunk;
    a job names the queue its status goes back to, so that concurrent callers get their own."""
    jobs = _job_queues.get(threads)
    if jobs is None:
        with _workers_lock:
            jobs = _job_queues.get(threads)
            if jobs is None:
                jobs = queue.SimpleQueue()
                for k in range(threads - 1):
                    threading.Thread(target=_work, args=(jobs,), name=f"irc-{threads}-{k}", daemon=True).start()
                _job_queues[threads] = jobs
    return jobs


_workers_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it starts its own
    os.register_at_fork(after_in_child=_job_queues.clear)


def _run_chunks(fn, args: list, chunks: tuple, threads: int):
    """``fn(*args, lo, hi)`` for each ``(lo, hi)`` of ``chunks``: the first on the calling thread
    (a C call drops the GIL), the others queued for irc's workers.  While its chunks are out,
    the calling thread runs any job still queued (its own or another caller's) instead of
    waiting: on a machine whose other cores are busy a worker may not run for a scheduler's
    time slice (milliseconds).  Every chunk has finished when this returns or raises (they
    write the outputs and the arena the next call may get); it raises the first exception,
    else returns the first non-zero status (a C entry's fault; a Python wrapper returns None)."""
    jobs = _workers(threads)
    reply = queue.SimpleQueue()  # this call's: nothing left over can reach another call
    for lo_hi in chunks[1:]:
        jobs.put((fn, args, lo_hi, reply))
    results = [_call_chunk(fn, args, chunks[0])]
    while len(results) < len(chunks):
        try:
            results.append(reply.get_nowait())
            continue
        except queue.Empty:
            pass
        try:
            job = jobs.get_nowait()
        except queue.Empty:  # every chunk is running: wait for one
            results.append(reply.get())
            continue
        _do(job)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return next((r for r in results if r), None)


def _call_chunk(fn, args: list, lo_hi: tuple):
    """``fn(*args, lo, hi)``'s result, or the exception it raised (the caller raises it)."""
    try:
        return fn(*args, *lo_hi)
    except BaseException as e:  # noqa: BLE001 - raised by _run_chunks once every chunk has finished
        return e


def _do(job) -> None:
    fn, args, lo_hi, reply = job
    reply.put(_call_chunk(fn, args, lo_hi))


def _work(jobs) -> None:
    while True:
        _do(jobs.get())


def _checked(wrapper):
    """A compiled function's C entry that raises its fault for a non-zero status."""
    def call(*args):
        status = wrapper.c_function(*args)
        if status:
            wrapper.raise_fault(status)
    return call


_from_buffer = ctypes.c_char.from_buffer
_address = ctypes.addressof


def _overlap(ranges: list, arrays: tuple, inputs: int, in_place: frozenset) -> bool:
    """Whether output memory (``ranges[inputs:]``, as ``[start, end)``, of ``arrays[inputs:]``)
    overlaps another output, or an input other than in an ``in_place`` (output, input) pair
    whose buffers are the same (start, size, shape and dtype) and that no other input overlaps
    (out_aliasing.separate's rule, on addresses)."""
    outs = ranges[inputs:]
    for k, (s, e) in enumerate(outs):
        for s2, e2 in outs[:k]:
            if s < e2 and s2 < e:
                return True
        for j, (s2, e2) in enumerate(ranges[:inputs]):
            if s < e2 and s2 < e:
                a, o = arrays[j], arrays[inputs + k]
                if (k, j) not in in_place or (s, e) != (s2, e2) or a.shape != o.shape or a.dtype != o.dtype:
                    return True
                if any(s < e3 and s3 < e for i, (s3, e3) in enumerate(ranges[:inputs]) if i != j):
                    return True
    return False


def _called_from(module, func) -> set[str]:
    """The names of the functions ``func`` calls, directly or through others."""
    seen: set[str] = set()
    work = [func]
    while work:
        f = work.pop()
        for op in f.walk():
            if op.name == "func.call" and op.callee not in seen:
                seen.add(op.callee)
                callee = module.lookup(op.callee)
                if callee is not None and not callee.is_declaration:
                    work.append(callee)
    return seen
