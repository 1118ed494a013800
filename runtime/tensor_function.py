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
loops worth it run as chunks of their range on irc's thread pool, from the compiled code
itself (split-parallel marks their calls, cpu/pool.py runs them), each chunk worth at least
``MIN_WORK_PER_THREAD`` ops: a call is still one C call.
"""

from __future__ import annotations

import ctypes
import dataclasses
import operator
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from irc.checks import check_array
from irc.diagnostics import IRError
from irc.types import FloatType, IntegerType, TensorType, numpy_dtype

from . import output_pool
from .cpu import target_cpu as _target_cpu

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
    split_blas: bool = False  # with blas and threads > 1: BLAS products split by columns across the threads


def target_vectors() -> tuple[int, int]:
    """(bits, registers) of the vector registers of the CPU irc compiles for (the host's, from
    the features LLVM detects, unless ``IRC_CPU`` names a level: cpu/target_cpu.py): what
    ``tensor-to-loops`` sizes the GEMM's register tile by (lowering/matmul.py)."""
    from irc.runtime.cpu.engine import target_cpu

    features = set(target_cpu()[1].split(","))
    if "+avx512f" in features:
        return 512, 32
    if "+avx" in features:
        return 256, 16
    return 128, 32 if "+neon" in features else 16


def target_fma() -> bool:
    """Whether the CPU irc compiles for has fused multiply-add instructions (x86's FMA3; every
    AArch64 core): then ``math-approx{fma=true}`` makes the f32 kernels' multiply-adds one
    instruction each, where without them each would be a call to ``fmaf``."""
    from irc.runtime.cpu.engine import target_cpu

    features = set(target_cpu()[1].split(","))
    return "+fma" in features or "+neon" in features


def host_caches() -> tuple[int, int]:
    """(L1 data, last level) cache sizes in bytes from Linux's sysfs (0 where not known; the
    L2's where it is the last level).  The GEMM's blocking reads no other level (the L2 rule
    it had measured slower on an AMD EPYC Zen 3: gemm_library.ALONG_ROWS_BYTES)."""
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
            pipeline = f"split-parallel{{min-work={MIN_WORK_PER_THREAD} threads={options.threads}}}"
        if name == "approximate math" and not (options.math_approx and "math-approx" in PASSES):
            continue
        if name == "approximate math" and target_fma():
            pipeline = "math-approx{fma=true}"
        if name == "plan memory" and not outputs_for_temporaries:
            pipeline = "plan-memory{arena=argument outputs=false}"
        if name == "bufferize and lower to loops":
            bits, registers = target_vectors()
            l1, l3 = host_caches()
            flags = ["blas=true"] if options.blas else ["gemm-library=true"]
            flags += [f"vector-bits={bits}", f"vector-registers={registers}", f"l1-bytes={l1}", f"l3-bytes={l3}"]
            if not target_fma():
                flags.append("fma=false")
            if options.threads > 1:
                flags.append(f"threads={options.threads}")
                if options.blas and options.split_blas:
                    flags.append("split-blas=true")
            pipeline = f"tensor-to-loops{{{' '.join(flags)}}}"
        stages.append((name, pipeline))
    return stages


MIN_WORK_PER_THREAD = 1 << 16
"""Ops (split-parallel's ``work`` estimate) a chunk of a parallel loop must get for handing it
to another thread to pay off.  cpu/pool.py's hand-off costs about a microsecond while the worker
spins (benchmarks/thread_profile.py), and two chunks of a 9 us loop ran 1.76x as fast as one;
from 2^18 to 2^16 (with gemm_library.THREAD_MIN_WORK 2^21 -> 2^19) took the 2-thread batch-8
calls of benchmarks/torch_backend.py's models down 15-20% (GPT-2 0.48 -> 0.39 ms, the CNN
0.35 -> 0.30: docs/torch.md)."""


def _dtype(t):
    e = t.element_type
    if isinstance(e, IntegerType) and e.width == 1:
        return np.dtype(np.bool_)
    if isinstance(e, FloatType) and e.kind == "bf16":
        raise TypeError("bf16 tensors cannot cross the Python call boundary yet")
    return np.dtype(numpy_dtype(e))


def _take_arena(spec) -> np.ndarray:
    """An arena from ``spec``'s free list, else a new one (a test for an empty list, then a pop,
    would race with another thread taking the last)."""
    try:
        return spec.arenas.pop()
    except IndexError:
        return _aligned_arena(spec.arena_bytes)


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


class Specialization:
    """Machine code for one tuple of argument shapes, and what calling it needs."""

    def __init__(self, executable, name: str, out_shapes: list, arena_bytes: int | None,
                 in_place: frozenset = frozenset()):
        self.executable = executable  # keeps the machine code alive
        self.in_place = in_place  # (output, input) pairs that may share one buffer (out_aliasing.py)
        self.wrapper = executable[name]
        self.c_function = self.wrapper.c_function  # the C entry: addresses and sizes (_fast_call)
        self.out_shapes = out_shapes
        self.arena_bytes = arena_bytes  # None: the function takes no arena
        self.arenas: list[np.ndarray] = []  # a free list: one arena per concurrent call
        self.arena_pairs: list[tuple] = []  # the generated entries' own: (arena, its address)
        self.timings: dict[str, float] = {}  # seconds per stage of making it (--timing)
        self.entry = None  # its generated call without out= (fast_entry.py), made at its first such call
        self.out_entry = None  # and with out=


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
        self._target_generation = _target_cpu.generation
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
        # The entries of the latest fast calls (``__call__``), without and with out=; None until one.
        self._last_entry = self._last_out_entry = None
        self._arity = len(ft.inputs)
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
            if not a.flags.c_contiguous or not a.flags.writeable or not a.flags.aligned:
                a = np.array(a, order="C")  # compiled code reads C order, aligned (and may write buffers)
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
        self._follow_the_target()
        spec = self._specializations.get(key)
        if spec is None:
            with self._lock:
                spec = self._specializations.get(key)
                if spec is None:
                    from irc.gcpause import paused_gc

                    with paused_gc():  # lowering and translating build many small objects (gcpause.py)
                        spec = self._specialize(shapes, sizes, aliased)
                    if self.tensor_options.threads > 1:  # its parallel calls run on the pool's workers
                        from .cpu import pool

                        pool.ensure_workers(self.tensor_options.threads)
                    self._specializations[key] = spec
        return spec

    def _follow_the_target(self) -> None:
        """Drop the specialisations made for another CPU (``set_cpu`` since: cpu/target_cpu.py)."""
        if self._target_generation != _target_cpu.generation:
            with self._lock:
                self._specializations.clear()
                self._last_entry = self._last_out_entry = None
                self._target_generation = _target_cpu.generation

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
        from .cpu import engine
        from .executable import _compile as compile_module
        from .out_aliasing import in_place_safe

        engine.check_runnable()  # before the disk: an entry this host cannot run is not a bad one
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
        # LLVM's unroller grows the vectorised loops of tensor code (which the vectoriser has
        # interleaved already) for no measured gain: ~15% of LLVM's time on a training step.
        options = dataclasses.replace(self.compile_options["options"], loop_unrolling=False)
        exe = compile_module(module, **{**self.compile_options, "cache": False, "options": options}, owned=True,
                             runtime_cache=self.compile_options.get("cache", True))
        arena_bytes = arena.value if arena is not None else None
        if disk_key is not None and exe.cache_entry is not None:
            from . import specialization_cache

            record = specialization_cache.record(module, self.name, outs, arena_bytes, in_place)
            specialization_cache.store(disk_key, record, exe.cache_entry, self.compile_options.get("cache_dir"))
        spec = Specialization(exe, self.name, outs, arena_bytes, in_place)
        spec.timings = {**timings, **{k: v for k, v in exe.stats.items() if isinstance(v, float) and k != "total"}}
        return spec

    def _disk_key(self, shapes: tuple, sizes: tuple) -> str | None:
        """The specialisation cache's key (specialization_cache.py), or None where it does not
        apply: caching off, or ``extern`` functions (their addresses belong to this process)."""
        options = self.compile_options
        if not options.get("cache", True) or options.get("extern"):
            return None
        from . import specialization_cache
        from .cpu.engine import target_cpu

        if self._module_text is None:
            self._module_text = self.module.print()
        return specialization_cache.key(self._module_text, self.name, shapes, sizes, self.tensor_options,
                                        {k: repr(v) for k, v in options.items()}, *target_cpu())

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
            if self.name not in funcs:
                raise ValueError("the entry is missing")
            links = runtime_links(record["declared"], cache_dir=cache_dir)
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
                              frozenset(tuple(p) for p in record["in_place"]))

    # -- the call ----------------------------------------------------------------------------------------

    def __call__(self, *args, out=None):
        # The entry of the latest fast call first, whatever the shapes: it checks them itself
        # and hands other shapes to ``_dispatch`` (fast_entry.py's ``elsewhere``), so a call of
        # the shapes before costs no key and no lookup in Python (0.3-0.5 us of a small call).
        entry = self._last_entry if out is None else self._last_out_entry
        if entry is not None and len(args) == self._arity:
            return entry(*args) if out is None else entry(*args, out)
        return self._dispatch(args, out)

    def _dispatch(self, args, out):
        """The call looked up by the arguments' shapes: the specialisation's generated entry
        where there is one (``_fast_call`` makes it), which becomes the latest; else the full
        checks."""
        if self._fast_dtypes is not None:
            try:
                spec = self._specializations.get(tuple(map(_SHAPE, args)))
            except (AttributeError, TypeError):  # not arrays (no shape, or one no key holds): the checks
                spec = None
            if spec is not None and self._target_generation == _target_cpu.generation:
                if out is None:
                    if spec.entry is not None:
                        self._last_entry = spec.entry
                        return spec.entry(*args)
                elif spec.out_entry is not None:
                    self._last_out_entry = spec.out_entry
                    return spec.out_entry(*args, out)
            result = self._fast_call(args, out)
            if result is not _SLOW:
                return result
        return self._checked_call(args, out)

    def _checked_call(self, args, out):
        """The call that checks everything, and copies or explains what the fast paths refuse."""
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
            arena = _take_arena(spec)
            call.append(arena)
        try:
            scalars = spec.wrapper(*call)
        finally:
            if arena is not None:
                spec.arenas.append(arena)
        return self._results(outputs, scalars)

    def entry(self, shapes: tuple, elsewhere=None):
        """The call for arguments of exactly ``shapes`` and the signature's dtypes (irc.jit's
        cache key has matched), specialised and generated (``fast_entry.py``: it checks that each
        is exactly an ``np.ndarray``); ``self`` where there is no such call (not specialised yet,
        sizes from scalars).  With ``elsewhere`` the call checks the dtypes and shapes too, and
        hands anything else it would refuse to ``elsewhere`` (irc.jit's latest call: its lookup)."""
        from .fast_entry import make_entry

        self._follow_the_target()
        spec = self._specializations.get(tuple(shapes))
        if spec is None:
            return self
        entry = make_entry(self, spec, tuple(shapes), self.name, typed=elsewhere is None, refused=elsewhere,
                           elsewhere=elsewhere)
        return entry or self

    def _fast_call(self, args, out):
        """The call for arrays that need nothing done to them: exact numpy arrays of the
        signature's dtypes, C-contiguous, aligned and writeable (checked by the trampoline of
        cpu/array_call.py; ``c_char.from_buffer``, where there is none, checks all but alignment), of shapes
        already specialised for, outputs not overlapping inputs other than as ``in_place``
        allows: the specialisation's generated calls (fast_entry.py), which check the types and
        dtypes.  Anything else returns ``_SLOW``, or goes from those calls to
        the full checks, which raise the right error or make the copies."""
        if any(type(a) is not np.ndarray for a in args):  # the entries are made from exact arrays'
            return _SLOW  # shapes (plain ints: an entry compares them with other arrays' shapes)
        shapes = tuple(map(_SHAPE, args))  # no specialisation has another count of them
        spec = self._specializations.get(shapes)
        if spec is None or self._target_generation != _target_cpu.generation:
            return _SLOW  # not specialised yet; or specialization() drops what was made for the old target
        if out is None:  # the specialisation's generated call (fast_entry.py): a quarter less time
            if spec.entry is None:
                from .fast_entry import make_entry

                # A weak reference: the entry lives on the specialisation, which this function
                # holds, and a strong one would keep a dropped executable until a collection.
                me = weakref.ref(self)
                spec.entry = make_entry(self, spec, shapes, self.name,
                                        refused=lambda *arrays: me()._checked_call(arrays, None),
                                        elsewhere=lambda *arrays: me()._dispatch(arrays, None))
            self._last_entry = spec.entry
            return spec.entry(*args)
        if not spec.out_shapes:
            return _SLOW  # out= for a function without outputs: the checks explain
        if spec.out_entry is None:
            from .fast_entry import make_entry

            # Weak references: the entry lives on the specialisation (a strong one would make a
            # cycle that kept a dropped executable's machine code until a collection).
            me, made_for = weakref.ref(self), weakref.ref(spec)

            def refused(arrays, given):  # overlaps (an in-place pair?), odd arrays: the checks
                function, spec = me(), made_for()
                if spec is None or any(type(a) is not np.ndarray for a in arrays):  # dropped (set_cpu
                    return function._checked_call(arrays, given)  # since), or not arrays: the checks
                if tuple(map(_SHAPE, arrays)) != shapes:  # arrays of other shapes: their own entry, if any
                    return function._dispatch(arrays, given)
                result = function._fast_out(spec, arrays, given)
                return function._checked_call(arrays, given) if result is _SLOW else result

            spec.out_entry = make_entry(self, spec, shapes, self.name, refused=refused, given_outputs=True,
                                        elsewhere=lambda arrays, given: me()._dispatch(arrays, given))
        self._last_out_entry = spec.out_entry
        return spec.out_entry(*args, out)

    def _fast_out(self, spec: Specialization, args, out):
        """``out=``'s call where the generated entry refused (``fast_entry.make_entry``): outputs
        that overlap an input as ``in_place`` allows run here; anything else (an argument of
        another type or dtype among them) returns ``_SLOW``."""
        for a, dt in zip(args, self._fast_dtypes):
            if type(a) is not np.ndarray or a.dtype is not dt:
                return _SLOW
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
        if _overlap([(p, p + a.nbytes) for p, a in zip(addresses, arrays)], arrays, len(args), spec.in_place):
            return _SLOW
        call = [v for p, a in zip(addresses, arrays) for v in (p, *a.shape)]
        arena = None
        if spec.arena_bytes is not None:
            arena = _take_arena(spec)
            call.append(_address(_from_buffer(arena)) if arena.nbytes else arena.ctypes.data)  # from_buffer: >= 1 byte
            call.append(arena.shape[0])
        try:
            status = spec.c_function(*call)
            if status:
                spec.wrapper.raise_fault(status)
        finally:
            if arena is not None:
                spec.arenas.append(arena)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _outputs(self, spec: Specialization, out) -> list[np.ndarray]:
        types = [t for t in self.signature.results if isinstance(t, TensorType)]
        if out is None:
            return [output_pool.empty(shape, _dtype(t)) for shape, t in zip(spec.out_shapes, types)]
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

_SHAPE = operator.attrgetter("shape")
"""A call's shapes key: ``tuple(map(_SHAPE, args))`` makes no frame where a list comprehension does."""


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
