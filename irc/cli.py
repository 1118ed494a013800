"""The ``irc`` command line.

    irc opt FILE|- [-p PIPELINE] [-O N] [-o OUT | --in-place] [--generic | --emit mlir]
                   [--print-after-all] [--print-after-change] [--timing] [--stats] [--no-verify]
    irc run FILE|- [--entry NAME] [--interp] [--] ARGS...
    irc run MODEL.irc [--interp] [--] ARGS...        (a checkpoint written by irc.save)
    irc compile FILE|- --emit llvm|asm|obj -o OUT
    irc passes
    irc import MODEL.onnx [-o OUT.ir|OUT.irc] [--shape NAME=2x3x32x32]...   (needs the onnx package)
    irc repl [FILE]                                  (passes step by step: undo, diff, bisect...)
    irc view FILE [--func F] [--cfg | --dataflow] -o OUT.svg|png|dot
    irc --version

Inputs are capped (--max-input-size, default 256 MiB); -o writes special files
through and never overwrites the input (see irc/fileio.py).

Exit status: 0 on success, 1 when the input program is bad (a diagnostic is
printed as ``file:line:col: error: ...``), 2 on bad usage, 3 on an internal
error.  No Python traceback is ever shown.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """A mistake on the command line (not in the program)."""


def _read_source(path: str, limit: int | None = None) -> tuple[str, str]:
    """The text of an input file (or of standard input for '-') and its name for diagnostics.

    All reading goes through fileio.py: a size cap, no directories or devices, binary
    input reported at its line and column.
    """
    from .fileio import DEFAULT_MAX_INPUT, InputError, read_source

    try:
        return read_source(path, DEFAULT_MAX_INPUT if limit is None else limit)
    except InputError as e:
        raise UsageError(str(e)) from None


def _read_module(path: str, allow_unregistered: bool = False, limit: int | None = None):
    from .parser import parse

    text, name = _read_source(path, limit)
    return parse(text, name, allow_unregistered=allow_unregistered)


def _write_output(data: str | bytes, out: str | None, args=None) -> None:
    """Every command writes its result through here (see fileio.write_output: special files
    are written through, regular files replaced atomically, the input never overwritten
    unless --in-place asks for it)."""
    from .fileio import InputError, write_output

    inputs = (args.file,) if args is not None and getattr(args, "file", None) else ()
    try:
        write_output(data, out, inputs=inputs, allow_overwriting_input=bool(getattr(args, "in_place", False)))
    except InputError as e:
        raise UsageError(str(e)) from None


def _output_of(args) -> str | None:
    """Where 'irc opt' writes: -o, or the input itself with --in-place."""
    if not getattr(args, "in_place", False):
        return args.output
    if args.output is not None:
        raise UsageError("--in-place writes the result back to the input file; it takes no -o")
    if args.file == "-":
        raise UsageError("--in-place needs an input file, not standard input")
    return args.file


# -- irc opt -----------------------------------------------------------------------------


def cmd_opt(args) -> int:
    from .passmanager import PassManager, PipelineError
    from .verifier import verify

    pipeline = args.pipeline or ""
    if args.preset is not None:
        from .passmanager import PRESETS

        preset = PRESETS.get(f"O{args.preset}", PRESETS["O2"])  # -O3: the -O2 pipeline (see --help)
        pipeline = ",".join(p for p in (preset, pipeline) if p)
    after_pass = _picture_writer(args) if args.picture_dir else None
    try:
        pm = PassManager.parse(pipeline, verify_each=not args.no_verify,
                               print_after_all=args.print_after_all,
                               print_after_change=args.print_after_change or after_pass is not None,
                               timing=args.timing, stats=args.stats, after_pass=after_pass)
    except PipelineError as e:
        raise UsageError(str(e)) from None
    output = _output_of(args)
    if args.split_input_file:
        return _opt_split(args, output)
    import time

    start = time.perf_counter()
    module = _read_module(args.file, args.allow_unregistered, args.max_input_size)
    parsed = time.perf_counter()
    if not args.no_verify:
        verify(module)
    verified = time.perf_counter()
    if after_pass is not None:
        after_pass(None, module, 0)
    pm.timing = False  # printed below, together with parse and print times
    pm.run(module)
    printed_start = time.perf_counter()
    text = _print_for(module, args)
    done = time.perf_counter()
    _write_output(text if text.endswith("\n") or not text else text + "\n", output, args)
    if args.timing:
        pm.times[:0] = [("(parse)", parsed - start), ("(verify)", verified - parsed)]
        pm.times.append(("(print)", done - printed_start))
        pm.write_timing(sys.stderr)
    return EXIT_OK


def _print_for(module, args) -> str:
    """The output text of ``irc opt``: irc's own text, its generic form, or MLIR's (--emit mlir)."""
    if args.emit == "mlir":
        if args.generic:
            raise UsageError("--emit mlir prints MLIR's custom form; it does not combine with --generic")
        from .mlir import print_mlir

        return print_mlir(module)
    return module.print(generic=args.generic)


def _picture_writer(args):
    """``irc opt --picture-dir DIR``: the dumps of --print-after-change (or -all) become pictures,
    DIR/00-input.svg, DIR/01-cse.svg, ... (numbered by the pass's place in the pipeline)."""
    from .picture import PictureError, dot_available, module_graph, render_bytes

    directory, fmt = args.picture_dir, args.picture_format
    if args.split_input_file:
        raise UsageError("--picture-dir does not combine with --split-input-file")
    if fmt != "dot" and not dot_available():
        raise UsageError(f"--picture-dir with .{fmt} pictures needs graphviz's 'dot' program, which is "
                         "not installed (apt install graphviz; or --picture-format dot)")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the picture directory {directory}: {e.strerror}") from None

    def write(p, module, index: int) -> None:
        name = "input" if p is None else p.name
        path = os.path.join(directory, f"{index:02d}-{name}.{fmt}")
        title = "the input" if p is None else f"after {p.pipeline_text()}"
        try:
            _write_output(render_bytes(module_graph(module, title=title), fmt), path)
        except PictureError as e:
            raise UsageError(str(e)) from None

    return write


_SPLIT_MARKER = "// -----"


def _opt_split(args, output: str | None) -> int:
    """Process each '// -----'-separated chunk on its own, as mlir-opt does.

    Diagnostics keep the line numbers of the whole file; every chunk's error is
    reported and the exit status is 1 if any chunk failed.
    """
    from .diagnostics import IRError
    from .parser import parse
    from .passmanager import PassManager
    from .verifier import verify

    text, name = _read_source(args.file, args.max_input_size)
    outputs, failed = [], False
    offset = 0
    for chunk in text.split(_SPLIT_MARKER + "\n"):
        padded = "\n" * offset + chunk  # keep line numbers of the whole file
        offset += chunk.count("\n") + 1
        try:
            module = parse(padded, name, allow_unregistered=args.allow_unregistered)
            if not args.no_verify:
                verify(module)
            PassManager.parse(args.pipeline or "", verify_each=not args.no_verify).run(module)
            outputs.append(_print_for(module, args))
        except IRError as e:
            sys.stderr.write(f"{e}\n")
            failed = True
    _write_output((_SPLIT_MARKER + "\n").join(o if o.endswith("\n") or not o else o + "\n" for o in outputs),
                  output, args)
    return EXIT_BAD_INPUT if failed else EXIT_OK


# -- irc run ------------------------------------------------------------------------------


def parse_argument(text: str, t, index: int, limit: int | None = None):
    """A command-line argument for a parameter of type ``t``: a literal or @file.npy.

    A .npy file is read like a program (fileio.read_bytes: size cap, no directories or
    devices) and loaded from memory without pickle, so it can hold numbers only.
    """
    import io

    from .fileio import DEFAULT_MAX_INPUT, InputError, read_bytes
    from .types import FloatType, IndexType, IntegerType, ShapedType

    what = f"argument {index} ('{text}')"
    if text.startswith("@"):
        path = text[1:]
        try:
            data = read_bytes(path, DEFAULT_MAX_INPUT if limit is None else limit, "a .npy file")
        except InputError as e:
            raise UsageError(f"{what}: {e}") from None
        try:
            array = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - numpy raises many kinds for a malformed file
            reason = "it is not a .npy file, or it holds Python objects" if "pickle" in str(e) else str(e)
            raise UsageError(f"{what}: cannot load {path} as a .npy array: {reason}") from None
        if not isinstance(array, np.ndarray):
            if hasattr(array, "close"):
                array.close()
            raise UsageError(f"{what}: {path} is not a .npy file (an .npz archive?): pass one array per file")
        return array
    if isinstance(t, ShapedType):
        raise UsageError(f"{what}: parameter {index} has type {t}; pass an array as @file.npy")
    if isinstance(t, (IntegerType, IndexType)):
        low = text.lower()
        if isinstance(t, IntegerType) and t.width == 1 and low in ("true", "false"):
            return low == "true"
        try:
            return int(text, 0)
        except ValueError:
            raise UsageError(f"{what}: expected an integer for {t}") from None
    if isinstance(t, FloatType):
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"{what}: expected a number for {t}") from None
    raise UsageError(f"{what}: parameters of type {t} cannot be given on the command line")


def format_result(value, t) -> str:
    """Integers as integers, floats as the shortest text that reads back exactly."""
    from .types import FloatType

    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, np.ndarray):
        return np.array2string(value, separator=", ", threshold=sys.maxsize, max_line_width=sys.maxsize) \
            .replace("\n", "")
    if isinstance(t, FloatType) and isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return repr(value)
        if t.kind in ("f32", "bf16"):
            return repr(float(str(np.float32(value)))) if t.kind == "f32" else repr(value)
        if t.kind == "f16":
            return repr(float(str(np.float16(value))))
        return repr(value)
    return str(value)


def cmd_run(args) -> int:
    from .interpreter import Interpreter

    _select_cpu(args)
    if _is_checkpoint(args.file):
        return _run_checkpoint(args)
    module = _read_module(args.file, limit=args.max_input_size)
    from .verifier import verify

    verify(module)
    names = [f.sym_name for f in module.functions if not f.is_declaration]
    entry = args.entry or ("main" if "main" in names else (names[0] if len(names) == 1 else None))
    if not names:
        raise UsageError(f"{'<stdin>' if args.file == '-' else args.file} defines no function "
                         "with a body to run")
    if entry is None:
        raise UsageError("name the function to run with --entry (functions: "
                         + ", ".join("@" + n for n in names) + ")")
    func = module.lookup(entry)
    if func is None or func.name != "func.func" or func.is_declaration:
        raise UsageError(f"no function '@{entry}' with a body (functions: "
                         + ", ".join("@" + n for n in names) + ")")
    ft = func.function_type
    raw = args.args
    if len(raw) != len(ft.inputs):
        raise UsageError(f"@{entry} takes {len(ft.inputs)} argument(s) ({', '.join(map(str, ft.inputs))}), "
                         f"got {len(raw)}")
    values = [parse_argument(text, t, i, args.max_input_size) for i, (text, t) in enumerate(zip(raw, ft.inputs))]
    try:
        if args.interp:
            result = Interpreter(module).run(entry, *values)
        elif args.target == "gpu":
            result = _run_on_gpu(module, entry, values)
        else:
            import irc

            # Bounds checks too: 'irc run' is where a user meets a wrong index first.
            exe = irc.compile(module, opt_level=args.opt_level, cache=not args.no_cache,
                              checks=not args.no_checks, bounds_checks=not args.no_checks,
                              fast_math=args.fast_math, extern=_extern_names(args))
            start = time.perf_counter()
            result = exe[entry](*values)
            if args.timing:
                _write_timing(exe, entry, time.perf_counter() - start)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None
    results = () if result is None else (result if len(ft.results) > 1 else (result,))
    for value, t in zip(results, ft.results):
        print(format_result(value, t))
    return EXIT_OK


def _write_timing(exe, entry: str, call_seconds: float) -> None:
    """``irc run --timing``: how long each stage of compiling ``@entry`` took, then the call."""
    function = exe[entry]
    rows = list(exe.stats.items())
    for spec in getattr(function, "_specializations", {}).values():  # a tensor function: per shapes
        rows = list(spec.timings.items())
    sys.stderr.write(f"timing of @{entry}:\n")
    for name, seconds in rows:
        if isinstance(seconds, float):
            sys.stderr.write(f"  {name:<32} {seconds * 1e3:9.2f} ms\n")
    sys.stderr.write(f"  {'the call (compiling included)':<32} {call_seconds * 1e3:9.2f} ms\n")


def _run_on_gpu(module, entry: str, values: list):
    """``irc run --target gpu``: the GPU stages, then the host function on a CUDA device."""
    from irc.runtime.gpu import driver

    reason = driver.unavailable_reason()
    if reason is not None:
        raise UsageError(f"--target gpu: {reason}")
    return getattr(driver.compile(module), entry)(*values)


def _is_checkpoint(path: str) -> bool:
    """Whether ``irc run`` reads ``path`` as a checkpoint: its name ends in .irc, or it starts as
    one does (8 bytes of header length, which hold NUL bytes no .ir text has, then '{')."""
    import stat

    if path == "-":
        return False
    if path.endswith(".irc"):
        return True
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False  # never read a FIFO or a device to guess: the program reader reports those
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    return len(head) == 9 and b"\0" in head[:8] and head[8:] == b"{"


def _run_checkpoint(args) -> int:
    """``irc run model.irc ARGS``: the checkpoint's inputs from the command line, its results
    printed one leaf per line as ``irc run`` prints a function's results."""
    from .checkpoint import load
    from .fileio import DEFAULT_MAX_INPUT
    from .pytree import flatten

    if args.entry:
        raise UsageError(f"{args.file} is a checkpoint: it runs the function it was saved with; "
                         "--entry is for .ir files")
    try:
        model = load(args.file, max_header_size=args.max_input_size or DEFAULT_MAX_INPUT,
                     opt_level=args.opt_level, cache=not args.no_cache, checks=not args.no_checks,
                     bounds_checks=not args.no_checks, fast_math=args.fast_math, extern=_extern_names(args))
    except FileNotFoundError:
        raise UsageError(f"no such file: {args.file}") from None
    except OSError as e:
        raise UsageError(f"cannot read {args.file}: {e.strerror or e}") from None
    raw = args.args
    if len(raw) != len(model.inputs):
        raise UsageError(f"{args.file} takes {len(model.inputs)} input(s) ({model.describe_inputs()}), "
                         f"got {len(raw)}")
    values = [parse_argument(text, t, i, args.max_input_size) for i, (text, t) in enumerate(zip(raw, model.input_types))]
    inputs = model.inputs_tree.unflatten(values)
    try:
        result = model.interpret(*inputs) if args.interp else model(*inputs)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None
    for value, t in zip(flatten(result)[0], model.result_types):
        print(format_result(value, t))
    return EXIT_OK


def _extern_names(args) -> list[str]:
    """The --extern options: repeated, or comma-separated."""
    return [name for value in args.extern or () for name in value.split(",") if name]


_EXTERN_HELP = ("allow the program to declare and call the C function NAME of this process (repeat, or "
                "separate names by commas); without it a declared function is an error, so that a program "
                "reaches nothing outside itself but libm and irc's runtime")


# -- irc compile ------------------------------------------------------------------------------


def cmd_compile(args) -> int:
    from irc.runtime.aot import emit

    _select_cpu(args)
    if args.target == "gpu" or args.print_pipeline:
        return _compile_gpu(args) if args.target == "gpu" else _print_cpu_pipeline()
    if args.output is None:
        raise UsageError("irc compile needs -o OUT")
    if args.sm is not None or args.pipeline:
        raise UsageError("--sm and -p are options of --target gpu")
    module = _read_module(args.file, limit=args.max_input_size)
    try:
        out = emit(module, args.emit, args.opt_level, checks=not args.no_checks,
                   bounds_checks=args.bounds_checks, fast_math=args.fast_math, extern=_extern_names(args))
    except ValueError as e:
        raise UsageError(str(e)) from None
    _write_output(out, args.output, args)
    return EXIT_OK


def _print_cpu_pipeline() -> int:
    """The stages a tensor function goes through on this host, as ``irc.compile``'s defaults run
    them (the same lists: tensor_function.tensor_stages, executable.CPU_STAGES)."""
    from irc.runtime.executable import CPU_STAGES
    from irc.runtime.tensor_function import TENSOR_STAGES, TensorOptions, tensor_stages

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    rows = [TENSOR_STAGES[0], *tensor_stages(TensorOptions(threads=threads)), *CPU_STAGES]
    width = max(len(n) for n, _ in rows)
    print("\n".join(f"{i:2d}. {n.ljust(width)}  {p}" for i, (n, p) in enumerate(rows, 1)))
    return EXIT_OK


def _compile_gpu(args) -> int:
    """``irc compile --target gpu``: the GPU stages (runtime/gpu), then the host and kernel IR,
    the kernels' LLVM IR for nvptx64, or their PTX."""
    from irc.runtime import gpu

    if args.print_pipeline:
        print(gpu.describe_pipeline())
        return EXIT_OK
    if args.output is None:
        raise UsageError("irc compile needs -o OUT")
    emit = args.emit if args.emit != "obj" else "ptx"
    if emit not in ("ir", "llvm", "ptx"):
        raise UsageError(f"--target gpu emits ir, llvm or ptx, not {emit}")
    sm = 90 if args.sm is None else args.sm
    from irc.runtime.gpu.nvptx import SUPPORTED_SM

    if sm not in SUPPORTED_SM:
        raise UsageError(f"--sm {sm}: supported architectures are {', '.join(map(str, SUPPORTED_SM))}")
    module = _read_module(args.file, limit=args.max_input_size)
    from .verifier import verify

    verify(module)
    if args.pipeline:
        from .passmanager import PassManager, PipelineError

        try:
            PassManager.parse(args.pipeline).run(module)
        except PipelineError as e:
            raise UsageError(str(e)) from None
    lowered = gpu.lower(module)
    if emit == "ir":
        out = lowered.print()
    elif emit == "llvm":
        out = gpu.render_llvm(lowered)
    else:
        out = gpu.render_ptx(lowered, sm)
    _write_output(out, args.output, args)


# -- irc import ---------------------------------------------------------------------------


def cmd_import(args) -> int:
    """An ONNX model as irc text (``func.func @main``, its weights as constants), or with
    ``-o NAME.irc`` as a checkpoint whose parameters are the weights (``irc run NAME.irc``)."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise UsageError("irc import needs the onnx package (pip install onnx)") from None
    from irc.onnx import OnnxImportError, load, save_checkpoint

    given = {}
    for item in args.shape or []:
        name, _, dims = item.rpartition("=")
        try:
            given[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            raise UsageError(f"--shape takes NAME=2x3x32x32, got {item!r}") from None
    try:
        model = load(args.file)
        shapes = []
        for _elem, declared, name in model.input_types():
            shape = given.pop(name, None)
            if shape is None:
                if None in declared:
                    raise UsageError(f"input '{name}' has symbolic sizes {['?' if d is None else d for d in declared]}: "
                                     f"give them with --shape {name}=...")
                shape = tuple(declared)
            shapes.append(shape)
        if given:
            raise UsageError(f"--shape names no input of the model: {', '.join(given)} "
                             f"(inputs: {', '.join(model.inputs)})")
        if args.output and args.output.endswith(".irc"):
            save_checkpoint(model, shapes, args.output)
            return EXIT_OK
        text = model.module(*shapes).print()
    except OnnxImportError as e:
        sys.stderr.write(f"irc: error: {e}\n")
        return EXIT_BAD_INPUT
    _write_output(text if text.endswith("\n") else text + "\n", args.output, args)
    return EXIT_OK


# -- irc passes ---------------------------------------------------------------------------


def cmd_passes(args) -> int:
    import irc.passes  # noqa: F401 - registers the passes

    from .passmanager import PASSES, PRESETS, option_name

    width = max((len(n) for n in PASSES), default=0)
    for name in sorted(PASSES):
        cls = PASSES[name]
        print(f"{name:<{width}}  {cls.summary}")
        for f in cls.options():
            print(f"{'':<{width}}    {option_name(f)}={f.default!s} ({f.type if isinstance(f.type, str) else f.type.__name__})")
    print()
    for name, pipeline in PRESETS.items():
        print(f"-{name}: {pipeline or '(no passes)'}")
    return EXIT_OK


# -- irc repl, irc view ---------------------------------------------------------------------------


def cmd_repl(args) -> int:
    from .repl import CommandError, main

    if args.file == "-":
        raise UsageError("irc repl reads its commands from standard input; give the program as a file")
    try:
        return main(args.file)
    except CommandError as e:
        raise UsageError(str(e)) from None


def cmd_view(args) -> int:
    from .picture import PictureError, format_of, function_graph, module_graph, render_bytes

    try:
        fmt = format_of(args.output)
    except PictureError as e:
        raise UsageError(str(e)) from None
    module = _read_module(args.file, limit=args.max_input_size)
    from .verifier import verify

    verify(module)
    kind = "cfg" if args.cfg else "dataflow" if args.dataflow else "auto"
    try:
        graph = function_graph(module.function(args.function), kind) if args.function \
            else module_graph(module, kind)
        data = render_bytes(graph, fmt)
    except PictureError as e:
        raise UsageError(str(e)) from None
    _write_output(data, args.output, args)
    return EXIT_OK


# -- main -------------------------------------------------------------------------------------


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, exit 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"irc: error: {message}\n")
        sys.exit(EXIT_USAGE)


def _size(text: str) -> int:
    from .fileio import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_CPU_CHOICES = ("host", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")  # runtime/cpu/target_cpu.CHOICES


def _add_cpu_option(cmd, verb: str) -> None:
    cmd.add_argument("--cpu", choices=_CPU_CHOICES, default=None,
                     help=f"{verb} code for this CPU: the host's (the default, or the IRC_CPU environment "
                          "variable's) or an x86-64 level, as gcc's -march=x86-64-v3")


def _select_cpu(args) -> None:
    """``--cpu``: what every compile in this process targets (cpu/target_cpu.py)."""
    if args.cpu is not None:
        from irc.runtime.cpu.target_cpu import set_cpu

        set_cpu(args.cpu)


def _add_input_options(cmd) -> None:
    from .fileio import DEFAULT_MAX_INPUT, format_size

    cmd.add_argument("--max-input-size", type=_size, default=None, metavar="SIZE",
                     help=f"refuse inputs (programs, .npy files) larger than this, e.g. 1G "
                          f"(default {format_size(DEFAULT_MAX_INPUT)})")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="irc", description="irc: a multi-level compiler for tensor programs")
    parser.add_argument("--version", action="version", version=f"irc {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    parser.subcommands = sub.choices  # each subcommand reports its own bad options with its own usage

    opt = sub.add_parser("opt", help="parse, verify, transform and print a program")
    opt.add_argument("file", help="an .ir file, or - for standard input")
    opt.add_argument("-p", "--pipeline", default="", help="passes to run, e.g. canonicalize,dce")
    opt.add_argument("-o", "--output", help="write the result here instead of standard output "
                                            "(never the input file: see --in-place)")
    opt.add_argument("--in-place", action="store_true", help="write the result back to the input file")
    opt.add_argument("-O", dest="preset", type=int, choices=range(4), metavar="N",
                     help="run the default pipeline -O0, -O1 or -O2 (before any -p passes; -O3, accepted "
                          "as by run and compile, is -O2's, LLVM's -O3 differing only in code generation); "
                          "'irc passes' prints them")
    opt.add_argument("--generic", action="store_true", help="print every op in the generic form")
    opt.add_argument("--emit", choices=["irc", "mlir"], default="irc",
                     help="the output language: irc's text (default) or MLIR's, which mlir-opt reads "
                          "(phis become block arguments; irc's graph ops must be lowered first)")
    opt.add_argument("--print-after-all", action="store_true", help="print the IR after every pass")
    opt.add_argument("--print-after-change", action="store_true",
                     help="print the IR after every pass that changed it")
    opt.add_argument("--picture-dir", metavar="DIR",
                     help="draw the IR into DIR (one picture per pass that changed it, or after every pass "
                          "with --print-after-all) instead of printing it; 00-input is the input")
    opt.add_argument("--picture-format", choices=["svg", "png", "pdf", "dot"], default="svg",
                     help="the format of --picture-dir pictures (default svg)")
    opt.add_argument("--timing", action="store_true", help="report the time each pass took")
    opt.add_argument("--stats", action="store_true", help="report what each pass did")
    opt.add_argument("--no-verify", action="store_true", help="do not verify after each pass")
    opt.add_argument("--allow-unregistered", action="store_true", help="accept ops of unknown dialects")
    opt.add_argument("--split-input-file", action="store_true",
                     help="treat each '// -----'-separated chunk as its own module (errors keep their lines)")
    _add_input_options(opt)
    opt.set_defaults(func=cmd_opt)

    run = sub.add_parser("run", help="run a function, or a saved model, and print its results",
                         description="Run a function of an .ir file, or a model saved by irc.save (a .irc\n"
                                     "checkpoint: its inputs are the arguments, its parameters come from the\n"
                                     "file), and print each result on a line.",
                         epilog="examples:  irc run examples/fib.ir --entry fib 10\n"
                                "           irc run model.irc @x.npy")
    run.formatter_class = argparse.RawDescriptionHelpFormatter
    run.add_argument("file", help="an .ir file, a checkpoint written by irc.save (.irc), or - for standard input")
    run.add_argument("--entry", help="the function to run (default: @main; not for checkpoints)")
    run.add_argument("--timing", action="store_true",
                     help="report the time each stage of compiling the function took (standard error)")
    run.add_argument("--target", default="cpu", choices=["cpu", "gpu"],
                     help="where to run it (default cpu); gpu needs pycuda and a CUDA device")
    run.add_argument("--interp", action="store_true",
                     help="run on the reference interpreter instead of the CPU JIT")
    run.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=2, metavar="N",
                     help="optimisation level 0-3 for the JIT (default 2)")
    run.add_argument("--no-cache", action="store_true", help="do not use the compile cache")
    run.add_argument("--no-checks", action="store_true",
                     help="JIT without runtime checks (division by zero, overflow, bounds, asserts) "
                          "for speed")
    run.add_argument("--fast-math", action="store_true", help="let LLVM reassociate floating point")
    _add_cpu_option(run, "run")
    run.add_argument("--extern", action="append", metavar="NAME", help=_EXTERN_HELP)
    run.add_argument("args", nargs="*", metavar="ARG",
                     help="arguments: literals (negative numbers too), or @file.npy for arrays")
    _add_input_options(run)
    run.set_defaults(func=cmd_run)

    comp = sub.add_parser("compile", help="compile ahead of time to LLVM IR, assembly or an object file")
    comp.add_argument("file", help="an .ir file, or - for standard input")
    comp.add_argument("--target", default="cpu", choices=["cpu", "gpu"], help="the target (default cpu)")
    comp.add_argument("--emit", default="obj", choices=["llvm", "asm", "obj", "ptx", "ir"],
                      help="what to write: cpu: llvm, asm, obj; gpu: ptx (default), llvm (the kernels), "
                           "ir (host and kernel IR after the GPU stages)")
    comp.add_argument("--sm", type=int, default=None, metavar="N",
                      help="--target gpu: the GPU architecture sm_N (80 or 90; default 90)")
    comp.add_argument("-p", "--pipeline", default="", metavar="PASSES",
                      help="--target gpu: passes to run before the target's stages, e.g. "
                           "'specialize-shapes{func=F shapes=8x64xf32;...}' for a program with ? sizes")
    comp.add_argument("--print-pipeline", action="store_true",
                      help="print the target's stages (what runs) and exit")
    comp.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=2, metavar="N",
                      help="optimisation level 0-3 (default 2)")
    comp.add_argument("--no-checks", action="store_true",
                      help="omit the runtime checks (division by zero, overflow, asserts) for speed")
    comp.add_argument("--bounds-checks", action="store_true", help="check every memref access")
    comp.add_argument("--fast-math", action="store_true", help="let LLVM reassociate floating point")
    _add_cpu_option(comp, "write")
    comp.add_argument("--extern", action="append", metavar="NAME", help=_EXTERN_HELP)
    comp.add_argument("-o", "--output", help="the output file (- for standard output)")
    _add_input_options(comp)
    comp.set_defaults(func=cmd_compile)

    repl = sub.add_parser("repl", help="apply passes step by step: show, diff, undo, suggest, bisect",
                          description="An interactive pass explorer ('help' inside lists the commands). "
                                      "Without a terminal it reads one command per line from standard input.")
    repl.add_argument("file", nargs="?", help="an .ir file to start from (default: an empty module)")
    repl.set_defaults(func=cmd_repl)

    view = sub.add_parser("view", help="draw a function's control-flow or dataflow graph (graphviz)")
    view.add_argument("file", help="an .ir file, or - for standard input")
    view.add_argument("--func", dest="function", metavar="F", help="draw only this function (default: all, each in a frame)")
    kinds = view.add_mutually_exclusive_group()
    kinds.add_argument("--cfg", action="store_true", help="the control-flow graph: blocks, phis, branches")
    kinds.add_argument("--dataflow", action="store_true",
                       help="the dataflow graph: ops, shapes on edges, fused groups as frames "
                            "(default: this for one-block tensor functions, --cfg otherwise)")
    view.add_argument("-o", "--output", required=True, help="OUT.svg, OUT.png, OUT.pdf or OUT.dot "
                                                            "(.dot needs no graphviz program)")
    _add_input_options(view)
    view.set_defaults(func=cmd_view)

    passes = sub.add_parser("passes", help="list every pass with its one-line description")
    passes.set_defaults(func=cmd_passes)

    imp = sub.add_parser("import", help="import an ONNX model as irc IR (weights as constants) or as a "
                                        "checkpoint (-o NAME.irc: weights as its parameters)")
    imp.add_argument("file", help="an .onnx file")
    imp.add_argument("-o", "--output", help="write the IR here instead of standard output; a name ending in .irc "
                                            "gets a checkpoint (irc run NAME.irc, irc.load)")
    imp.add_argument("--shape", action="append", metavar="NAME=DIMS",
                     help="the shape of an input with symbolic sizes, e.g. input=8x3x32x32 (repeatable)")
    imp.set_defaults(func=cmd_import)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .checkpoint import CheckpointError
    from .diagnostics import IRError

    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if args.command == "run":
        # Arguments may follow the options ('irc run f.ir --entry f 1 -2'); argparse
        # leaves those it did not place in ``extras``.
        if "--" in extras:
            cut = extras.index("--")
            extras = extras[:cut] + extras[cut + 1:]
        unknown = [a for a in extras if a.startswith("-") and not _is_number(a)]
        if unknown:
            parser.subcommands["run"].error(f"unrecognized arguments: {' '.join(unknown)}")
        args.args = [a for a in args.args if a != "--"] + extras
    elif extras:
        command = parser.subcommands.get(args.command) if args.command else None
        (command or parser).error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except IRError as e:
        text = str(e)
        # Every message starts as the others do: 'file:line:col: error:' or 'irc: error:'.
        sys.stderr.write(f"{'irc: ' if text.startswith('error: ') else ''}{text}\n")
        return EXIT_BAD_INPUT
    except UsageError as e:
        sys.stderr.write(f"irc: error: {e}\n")
        return EXIT_USAGE
    except CheckpointError as e:  # a damaged or foreign model file: bad input, like a bad program
        sys.stderr.write(f"irc: error: {e}\n")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("irc: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except OSError as e:  # the system refused a read or write (disk full, I/O error): not a bug
        sys.stderr.write(f"irc: error: {e.strerror or e}\n")
        return EXIT_USAGE
    except RecursionError:
        sys.stderr.write("irc: error: the program is nested too deeply for irc to process\n")
        return EXIT_BAD_INPUT
    except MemoryError:
        sys.stderr.write("irc: error: out of memory\n")
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001 - never show a traceback; report the bug instead
        sys.stderr.write(f"irc: internal error: {type(e).__name__}: {e}\n"
                         "irc: this is a bug in irc; please report it with the input that caused it\n")
        if os.environ.get("IRC_DEBUG"):
            raise
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
