"""``irc.compile``: from a module to callable machine code, through named stages.

The CPU pipeline, printed by ``irc compile --print-pipeline``::

    1. lower structured control flow   scf-to-cf            (irc pass)
    2. simplify                        canonicalize,dce     (irc passes, at -O1 and above)
    3. translate to LLVM IR            runtime.cpu.translate
    4. optimise with LLVM              LLVM's -O<N> pipeline for the host CPU
    5. JIT-link                        ORC LLJIT

Compiled code is cached in memory and on disk (see cache.py), keyed by the
program, its source, the target, the CPU, the options and the versions of irc
and LLVM, so a second process loads machine code instead of running LLVM.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass

from irc.diagnostics import IRError, Location, SourceFile

from . import cache as _cache
from . import tensor_function
from .cpu import blas as blas_runtime
from .cpu import callconv, engine, fastcall, gemm_library, pool, stack, symbols
from .cpu.translate import Options, internal_only, translate
from .cpu.translate_parallel import PARALLEL_FOR

CPU_STAGES = [
    ("lower structured control flow", "scf-to-cf"),
    ("simplify", "canonicalize,dce"),
    ("translate to LLVM IR", "runtime.cpu.translate"),
    ("optimise with LLVM", "LLVM -O<N> for the host CPU"),
    ("JIT-link", "ORC LLJIT"),
]


@dataclass(frozen=True)
class CompileOptions:
    target: str = "cpu"
    opt_level: int = 2
    checks: bool = True
    bounds_checks: bool = False
    fast_math: bool = False
    loop_unrolling: bool = True  # LLVM's unroller; tensor specialisations run without it (tensor_function.py)
    llvm_passes: bool = True  # LLVM's optimisation pipeline; code generation runs at opt_level either way

    def validate(self) -> None:
        if self.target not in ("cpu", "gpu"):
            raise ValueError(f"target must be 'cpu' or 'gpu', got {self.target!r}")
        if self.opt_level not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")


class Executable:
    """Compiled functions of one module: ``exe.name(...)`` or ``exe["name"](...)``."""

    def __init__(self, functions: dict, library, llvm_ir: str | None, stats: dict):
        self._functions = functions
        self._library = library  # keeps the machine code alive
        self.cache_entry = None
        self.llvm_ir = llvm_ir
        self.stats = stats
        for name, function in list(functions.items()):
            publish(self, name, function)

    def __getattr__(self, name: str):
        functions = self.__dict__.get("_functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"no compiled function '{name}' (functions: {', '.join(functions) or 'none'})")

    def __getitem__(self, name: str):
        if not isinstance(name, str):
            raise TypeError(f"Executable[name]: 'name' must be a str, got {type(name).__name__}")
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"no compiled function '{name}' (functions: {', '.join(self._functions)})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._functions

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._functions))

    @property
    def functions(self) -> list[str]:
        return list(self._functions)


def publish(exe: Executable, name: str, function) -> None:
    """``function`` as ``exe[name]`` and, as an instance attribute, ``exe.name``: reaching
    ``__getattr__`` costs a failed lookup and a Python call first (0.5-1 us of a small call).
    A name the class or the instance already has keeps that meaning there (``exe["name"]``
    reaches such a function), as it did when ``__getattr__`` found every function."""
    exe._functions[name] = function
    if name not in exe.__dict__ and not hasattr(type(exe), name):
        exe.__dict__[name] = function


# The in-memory cache keeps the most recently used compilations (machine code and
# all); older ones are dropped, so a long-running process compiling many different
# modules does not keep every one of them alive.  The disk cache still has them.
MEMORY_CACHE_SIZE = 128
_memory_cache: OrderedDict[str, tuple] = OrderedDict()


def prepare(module, opt_level: int, owned: bool = False, simplify: bool = True):
    """Stages 1-2 on a copy of ``module``: the CFG-level module the translator takes.  The input
    and the output are verified; the passes in between are not verified one by one (``irc opt``
    does that, and the tests run every pass that way): at a few thousand ops a verification
    costs as much as a pass.  ``owned``: ``module`` is the caller's own copy, made by irc's
    passes from verified IR (the tensor pipeline's), so it is lowered in place and checked
    once, at the output.  ``simplify=False`` skips the clean-up stage (for IR that irc's own
    builder made in canonical form, where LLVM's clean-up finds the same)."""
    import irc.passes

    from irc.verifier import verify

    if owned:
        lowered = module
    else:
        verify(module)
        lowered = module.clone()
    pipeline = "scf-to-cf" + (",canonicalize,dce" if opt_level >= 1 and simplify else "")
    irc.passes.run(lowered, pipeline, verify_each=False)
    verify(lowered)
    return lowered


def compile(module, target: str = "cpu", opt_level: int = 2, checks: bool = True,  # noqa: A001
            bounds_checks: bool = False, fast_math: bool = False, cache: bool = True,
            cache_dir: str | None = None, blas: bool | None = None, math_approx: bool = True,
            threads: int | None = None, extern=None) -> Executable:
    """Compile every function of ``module`` for ``target``; see the module docstring.

    Functions over tensors compile per argument shapes when first called (see
    tensor_function.py); for them ``blas=True`` sends large f32/f64 matmuls to a
    BLAS gemm (numpy's OpenBLAS, else scipy's: cpu/blas.py) instead of irc's own (the default, None or False: passes/lowering/gemm_library.py),
    ``math_approx`` replaces libm
    calls by vectorisable polynomial approximations, and ``threads`` (None: the
    cores this process may use) runs parallel loops on that many threads.

    ``extern`` allows the program to call functions outside itself: a list of
    the C symbols it may declare (looked up in the libraries this process has
    loaded globally), or a dict of names to addresses (ints or ctypes functions).
    A program that declares any other function is refused at the declaration:
    compiled code reaches nothing but its own functions, these, and the libm,
    libc and compiler-runtime symbols irc's generated code needs (cpu/symbols.py).
    """
    _check_compile_arguments(module, target, opt_level, checks, bounds_checks, fast_math, cache, cache_dir,
                             blas, math_approx, threads)
    if target == "gpu":  # the GPU stages, then host functions that launch on a CUDA device (docs/gpu.md)
        from .gpu import driver

        return driver.compile(module)
    options = CompileOptions(target, opt_level, checks, bounds_checks, fast_math)
    options.validate()
    extern = symbols.normalize_extern(extern)
    symbols.check_declarations(module, extern)
    return _compile(module, options, cache, cache_dir, blas, math_approx, threads, extern)


def _compile(module, options: CompileOptions, cache: bool, cache_dir, blas, math_approx, threads,
             extern: dict, owned: bool = False, runtime_cache: bool | None = None) -> Executable:
    """``compile`` after its checks; irc's tensor pipeline calls it on the modules it lowers
    (which may declare irc's own runtime functions, see cpu/blas.py), with ``owned`` (see
    ``prepare``) and without this cache (its specialisation cache keys them already, by the
    program before lowering: printing the lowered module for a second key costs more than
    the hits it would find), but with the user's for the GEMM library they call
    (``runtime_cache``; None: as ``cache``)."""
    tensor_funcs = [f for f in module.functions if not f.is_declaration and tensor_function.has_tensors(f)]
    if tensor_funcs:
        if blas is None:
            blas = False  # irc's own GEMM (cpu/gemm_library.py): as fast as BLAS here, see docs/benchmarks.md
        elif blas and not blas_runtime.available():
            raise ValueError("blas=True needs a BLAS gemm (numpy's OpenBLAS or scipy's cython_blas) and found "
                             "none; install scipy or pass blas=False")
        if threads is None:
            threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        # irc's threads split BLAS products too where the gemm runs on the calling thread (MKL's)
        split_blas = bool(blas) and threads > 1 and blas_runtime.split_across_threads()
        tensor_options = tensor_function.TensorOptions(blas=bool(blas), math_approx=bool(math_approx),
                                                       threads=threads, split_blas=split_blas)
        return _compile_with_tensor_functions(module, tensor_funcs, tensor_options, dict(
            options=options, cache=cache, cache_dir=cache_dir, blas=None, math_approx=True, threads=None,
            extern=extern))
    timings: dict[str, float] = {}
    start = time.perf_counter()
    lowered = prepare(module, options.opt_level, owned)
    timings["irc passes"] = time.perf_counter() - start
    funcs = [f for f in lowered.functions if not f.is_declaration and not internal_only(f)]
    names = [symbols.jit_symbol(f.sym_name) for f in funcs]
    exports = names + [fastcall.fast_name(f.sym_name) for f in funcs if fastcall.has_fast_entry(f.function_type)]
    link_extras = _link_extras(lowered, extern, cache if runtime_cache is None else runtime_cache, cache_dir)
    cpu, features = engine.target_cpu()
    budget = stack.stack_budget()
    key = memory_key = None
    if cache:
        key = _cache.key(lowered.print(), _source_identity(module), {**asdict(options), "stack_budget": budget},
                         cpu, features)
        # Machine code in memory is linked to its externs' addresses; the disk holds it unlinked.
        memory_key = key + repr(sorted(link_extras["imports"].items()))
    hit = _memory_cache.get(memory_key) if cache else None
    if hit is not None:
        _memory_cache.move_to_end(memory_key)
    if hit is None and cache:
        entry = _cache.load(key, cache_dir)
        if entry is not None:
            t = time.perf_counter()
            try:
                library, addresses = engine.load(exports, object_code=entry.object_code, **link_extras)
            except (RuntimeError, IRError):  # LLVM rejects it, it lacks a symbol, it calls one not allowed
                _cache.discard(key, cache_dir)
            else:
                timings["load cached machine code"] = time.perf_counter() - t
                hit = (library, addresses, _faults_from(entry.faults, module), None, entry)
                timings["cache"] = "disk"
    elif hit is not None:
        timings["cache"] = "memory"
    if hit is None:
        hit = _build(lowered, names, options, budget, timings, key if cache else None, cache_dir, module,
                     link_extras)
    library, addresses, faults, llvm_ir, entry = hit
    if cache:
        _memory_cache[memory_key] = hit
        while len(_memory_cache) > MEMORY_CACHE_SIZE:
            _memory_cache.popitem(last=False)
    functions = {f.sym_name: callconv.make_wrapper(f, addresses[symbols.jit_symbol(f.sym_name)], faults,
                                                   addresses.get(fastcall.fast_name(f.sym_name)), library)
                 for f in funcs}
    timings["total"] = time.perf_counter() - start
    exe = Executable(functions, library, llvm_ir, timings)
    exe.cache_entry = entry  # the unlinked machine code (tensor_function.py caches specialisations with it)
    return exe


def _check_compile_arguments(module, target, opt_level, checks, bounds_checks, fast_math, cache, cache_dir,
                             blas, math_approx, threads) -> None:
    """TypeError naming the parameter, before anything reaches LLVM or ctypes."""
    from irc.checks import check_module, check_type

    check_module("irc.compile", "module", module)
    check_type("irc.compile", "target", target, str)
    check_type("irc.compile", "opt_level", opt_level, int)
    for name, value in (("checks", checks), ("bounds_checks", bounds_checks), ("fast_math", fast_math),
                        ("cache", cache), ("math_approx", math_approx)):
        check_type("irc.compile", name, value, bool)
    if cache_dir is not None:
        check_type("irc.compile", "cache_dir", cache_dir, (str, os.PathLike))
    if blas is not None:
        check_type("irc.compile", "blas", blas, bool)
    if threads is not None:
        check_type("irc.compile", "threads", threads, int)


def _compile_with_tensor_functions(module, tensor_funcs, tensor_options, options: dict) -> Executable:
    """Scalar functions compile now; each tensor function compiles per argument shapes when called."""
    from irc.verifier import verify

    verify(module)
    scalar_module = module.clone()
    tensor_names = {f.sym_name for f in tensor_funcs}
    for f in list(scalar_module.functions):
        if f.sym_name in tensor_names:
            f.erase()
    if any(not f.is_declaration for f in scalar_module.functions):
        exe = _compile(scalar_module, **options)
    else:
        exe = Executable({}, None, None, {})
    for f in tensor_funcs:
        publish(exe, f.sym_name, tensor_function.TensorFunction(module, f, tensor_options, options))
    return exe


def _build(lowered, names, options: CompileOptions, stack_budget: int, timings, key, cache_dir, module,
           link_extras):
    text, tr, entry, extra_names = _machine_code(lowered, options, stack_budget, timings, fast_entries=True)
    t = time.perf_counter()
    library, addresses = engine.load(names + extra_names, object_code=entry.object_code, **link_extras)
    timings["JIT-link"] = time.perf_counter() - t
    if key is not None:
        _cache.store(key, entry, cache_dir)
    return library, addresses, tr.faults, text, entry


def _machine_code(lowered, options: CompileOptions, stack_budget: int, timings: dict, fast_entries: bool):
    """Translate, optimise and emit ``lowered``: (LLVM IR text, the translation, the cache entry
    of its unlinked object code and fault table, the fast entries' names it added)."""
    t = time.perf_counter()
    tr = translate(lowered, Options(options.checks, options.bounds_checks, options.fast_math, stack_budget),
                   mangle=True)
    extra_names = fastcall.add_fast_entries(tr.module, tr.signatures, tr.symbols) if fast_entries else []
    text = str(tr.module)
    timings["translate"] = time.perf_counter() - t
    t = time.perf_counter()
    tm = engine.target_machine(options.opt_level, reloc="pic")  # constants RIP-relative: see there
    try:
        llmod = engine.optimize(text, options.opt_level if options.llvm_passes else 0, tm, options.loop_unrolling)
    except RuntimeError as e:  # LLVM rejected our IR: a bug in irc
        raise IRError(f"internal error: LLVM rejected the translated module: {e}") from None
    timings["LLVM optimise"] = time.perf_counter() - t
    t = time.perf_counter()
    code = tm.emit_object(llmod)
    timings["code generation"] = time.perf_counter() - t
    return text, tr, _cache.Entry(code, [(m, _loc_tuple(loc)) for m, loc in tr.faults]), extra_names


def object_code(module, options: CompileOptions = CompileOptions(), owned: bool = False,
                simplify: bool = True, timings: dict | None = None) -> _cache.Entry:
    """``module`` compiled to relocatable machine code and its fault table, not linked: for
    runtime pieces that are cached under a key of their own (cpu/gemm_library.py).  ``owned``
    and ``simplify``: as ``prepare`` takes them; ``timings`` gets the seconds of each stage."""
    timings = {} if timings is None else timings
    t = time.perf_counter()
    lowered = prepare(module, options.opt_level, owned=owned, simplify=simplify)
    timings["irc passes"] = time.perf_counter() - t
    return _machine_code(lowered, options, stack.stack_budget(), timings, fast_entries=False)[2]


def runtime_links(declared, cache: bool = True, cache_dir: str | None = None) -> dict:
    """What irc's own runtime declarations among the names ``declared`` link to: BLAS shims
    (cpu/blas.py), GEMM library functions (cpu/gemm_library.py: built once, kept in the disk
    cache ``cache`` and ``cache_dir`` say) and the thread pool (cpu/pool.py), as
    ``engine.load``'s ``extra_ir`` and ``imports``."""
    extra_ir, imports = blas_runtime.link_extras(set(declared))
    imports.update(gemm_library.imports(set(declared), cache, cache_dir))
    if PARALLEL_FOR in declared:
        imports.update(pool.addresses())
    return {"extra_ir": extra_ir, "imports": imports}


def runtime_names(lowered) -> list[str]:
    """The names ``runtime_links`` needs for a lowered module: its declarations, and the thread
    pool's entry where a call runs in ``chunks`` (cpu/translate_parallel.py declares it)."""
    names = {f.sym_name for f in lowered.functions if f.is_declaration}
    if any(op.name == "func.call" and "chunks" in op.attributes
           for f in lowered.functions if not f.is_declaration for op in f.walk()):
        names.add(PARALLEL_FOR)
    return sorted(names)


def _link_extras(lowered, extern: dict, cache: bool = True, cache_dir: str | None = None) -> dict:
    """What the module's declarations link to: runtime shims (BLAS gemm: see cpu/blas.py), GEMM
    library functions (kept in the module's disk cache) and the addresses of the ``extern``
    functions it declares (an IRError at a declaration not found)."""
    declared = {f.sym_name: f for f in lowered.functions if f.is_declaration}
    links = runtime_links(set(runtime_names(lowered)) - extern.keys(), cache, cache_dir)
    extra_ir, imports = links["extra_ir"], links["imports"]
    for name in sorted(declared.keys() & extern.keys()):
        address = extern[name] or symbols.process_address(name)
        if address is None:
            raise IRError(f"extern function '@{name}' is not in this process: load its library first "
                          "(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)) or pass its address "
                          f"(extern={{'{name}': address}})", declared[name].loc)
        imports[name] = address
    return {"extra_ir": extra_ir, "imports": imports}


def _source_identity(module) -> str:
    src = getattr(module, "source", None)
    return f"{src.name}\0{src.text}" if src is not None else ""


def _loc_tuple(loc: Location):
    return (loc.line, loc.column)


def _faults_from(stored, module):
    source = getattr(module, "source", None) or SourceFile("<unknown>", "")
    return [(message, Location(source, line, column)) for message, (line, column) in stored]
