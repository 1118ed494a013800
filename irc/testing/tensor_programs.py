"""Random tensor graphs, and a differential check of the tensor compile path against the interpreter.

``random_tensor_program(seed, size)`` writes a function over tensors of random
shapes (sizes 0, 1 and small odd ones included, f32 or f64) built from
elementwise math, broadcasts (numpy's rules, size-1 dimensions too), reductions
over random axes with and without keepdims, transposes, matmuls, softmaxes,
slices, concats, pads and reshapes; values stay bounded (no overflow to inf) so
that results compare with a tolerance.  ``check_tensor_program`` runs it in the
interpreter, then after each stage of the tensor pipeline in the interpreter,
then compiled (one thread and several, with and without BLAS), and reports
every disagreement.

    python -m irc.testing.tensor_programs --n 500 --seed 0
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field

import numpy as np

UNARY = ["math.tanh", "math.sin", "math.cos", "math.absf", "arith.negf"]
BINARY = ["arith.addf", "arith.subf", "arith.mulf", "arith.maximumf", "arith.minimumf"]
REDUCTIONS = ["reduce_sum", "reduce_max", "reduce_min", "reduce_mean"]
SIZES = [1, 2, 3, 5, 8, 0]


def _t(shape, elem) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


@dataclass
class TensorProgram:
    text: str
    params: list[tuple[tuple[int, ...], str]]  # (shape, element type) per parameter
    seed: int
    results: list[tuple[int, ...]] = field(default_factory=list)  # the shape of each result

    def arguments(self, seed: int | None = None) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed if seed is None else seed)
        return [rng.uniform(-2, 2, shape).astype(np.float32 if elem == "f32" else np.float64)
                for shape, elem in self.params]


@dataclass
class _Builder:
    rng: random.Random
    elem: str
    lines: list[str] = field(default_factory=list)
    values: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    count: int = 0

    def new(self, op: str, shape: tuple[int, ...]) -> str:
        name = f"%v{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {op}")
        self.values.append((name, shape))
        return name

    def pick(self, shape=None, rank=None):
        options = [(v, s) for v, s in self.values
                   if (shape is None or s == shape) and (rank is None or len(s) == rank)]
        return self.rng.choice(options) if options else None


def matmul_program(m: int, n: int, k: int, ta: bool = False, tb: bool = False, elem: str = "f32",
                   name: str = "mm") -> str:
    """``@name(a, b) = a @ b`` (m x k times k x n) as tensor-level irc text; with ``ta``/``tb``
    an operand arrives transposed (k x m, n x k) and a ``graph.transpose`` puts it back, the
    form the GEMM lowering reads in place."""
    a_shape, b_shape = (f"{k}x{m}" if ta else f"{m}x{k}"), (f"{n}x{k}" if tb else f"{k}x{n}")
    lines, a, b = [], "%a", "%b"
    if ta:
        lines.append(f"%at = graph.transpose %a {{perm = [1, 0]}} : tensor<{a_shape}x{elem}> to tensor<{m}x{k}x{elem}>")
        a = "%at"
    if tb:
        lines.append(f"%bt = graph.transpose %b {{perm = [1, 0]}} : tensor<{b_shape}x{elem}> to tensor<{k}x{n}x{elem}>")
        b = "%bt"
    lines.append(f"%c = graph.matmul {a}, {b} : (tensor<{m}x{k}x{elem}>, tensor<{k}x{n}x{elem}>) "
                 f"-> tensor<{m}x{n}x{elem}>")
    body = "\n  ".join(lines)
    return (f"func.func @{name}(%a: tensor<{a_shape}x{elem}>, %b: tensor<{b_shape}x{elem}>) -> "
            f"tensor<{m}x{n}x{elem}> {{\n  {body}\n  func.return %c : tensor<{m}x{n}x{elem}>\n}}\n")


def random_tensor_program(seed: int, size: int = 10) -> TensorProgram:
    rng = random.Random(seed)
    elem = rng.choice(["f32", "f64"])
    rank = rng.choice([1, 2, 2, 3])
    zero_ok = rng.random() < 0.15
    shape = tuple(rng.choice(SIZES if zero_ok else SIZES[:-1]) for _ in range(rank))
    b = _Builder(rng, elem)
    params = [("%x", shape), ("%y", shape)]
    # A lower-rank operand for broadcasts, with some dimensions of size 1.
    low = tuple(1 if rng.random() < 0.3 else d for d in shape[1:])
    params.append(("%z", low))
    b.values.extend(params)
    for _ in range(size):
        kind = rng.random()
        v, s = b.pick()
        t = _t(s, elem)
        if kind < 0.2:
            b.new(f"{rng.choice(UNARY)} {v} : {t}", s)
        elif kind < 0.42:
            w, _ = b.pick(shape=s)
            b.new(f"{rng.choice(BINARY)} {v}, {w} : {t}", s)
        elif kind < 0.5:
            # broadcast something smaller to s (numpy's rules), then use it
            small = [(n, sh) for n, sh in b.values if len(sh) <= len(s) and all(
                a in (1, c) for a, c in zip(sh, s[len(s) - len(sh):]))]
            n, sh = rng.choice(small)
            bc = b.new(f"graph.broadcast {n} : {_t(sh, elem)} to {t}", s)
            b.new(f"arith.addf {v}, {bc} : {t}", s)
        elif kind < 0.65 and s:
            axes = sorted(rng.sample(range(len(s)), rng.randint(1, len(s))))
            keep = rng.random() < 0.5
            out = tuple(1 if i in axes else d for i, d in enumerate(s) if keep or i not in axes)
            red = rng.choice(REDUCTIONS)
            if red in ("reduce_max", "reduce_min") and any(s[a] == 0 for a in axes):
                red = "reduce_sum"  # max of nothing is -inf; keep values finite
            attrs = f"{{axes = [{', '.join(map(str, axes))}]{', keepdims' if keep else ''}}}"
            b.new(f"graph.{red} {v} {attrs} : {t} to {_t(out, elem)}", out)
        elif kind < 0.72 and len(s) >= 2:
            perm = list(range(len(s)))
            rng.shuffle(perm)
            out = tuple(s[p] for p in perm)
            b.new(f"graph.transpose {v} {{perm = [{', '.join(map(str, perm))}]}} : {t} to {_t(out, elem)}", out)
        elif kind < 0.8 and len(s) == 2:
            k = s[1]
            n = rng.choice(SIZES[:-1])
            wname = f"%w{len(params)}"
            params.append((wname, (k, n)))
            b.values.append((wname, (k, n)))
            # tanh keeps the product's magnitude near 1 whatever the depth
            mm = b.new(f"graph.matmul {v}, {wname} : ({t}, {_t((k, n), elem)}) -> {_t((s[0], n), elem)}",
                       (s[0], n))
            b.new(f"math.tanh {mm} : {_t((s[0], n), elem)}", (s[0], n))
        elif kind < 0.86 and s:
            axis = rng.randrange(len(s))
            op = rng.choice(["softmax", "log_softmax"]) if all(d > 0 for d in s) else "softmax"
            sm = b.new(f"graph.{op} {v} {{axis = {axis}}} : {t}", s)
            if op == "log_softmax":
                b.new(f"math.tanh {sm} : {t}", s)
        elif kind < 0.92 and s:
            offsets = [rng.randint(0, d // 2) for d in s]
            sizes = [rng.randint(0, d - o) for d, o in zip(s, offsets)]
            out = tuple(sizes)
            b.new(f"graph.slice {v} {{offsets = [{', '.join(map(str, offsets))}], sizes = "
                  f"[{', '.join(map(str, sizes))}], strides = [{', '.join('1' for _ in s)}]}} : {t} to "
                  f"{_t(out, elem)}", out)
        elif kind < 0.96 and s:
            axis = rng.randrange(len(s))
            w, _ = b.pick(shape=s)
            out = tuple(d * 2 if i == axis else d for i, d in enumerate(s))
            b.new(f"graph.concat {v}, {w} {{axis = {axis}}} : ({t}, {t}) -> {_t(out, elem)}", out)
        elif s:
            low_pad = [rng.randint(0, 2) for _ in s]
            high_pad = [rng.randint(0, 2) for _ in s]
            out = tuple(d + lo + hi for d, lo, hi in zip(s, low_pad, high_pad))
            b.new(f"graph.pad {v} {{low = [{', '.join(map(str, low_pad))}], high = "
                  f"[{', '.join(map(str, high_pad))}], value = 0.5 : {elem}}} : {t} to {_t(out, elem)}", out)
        else:
            b.new(f"math.sin {v} : {t}", s)
    made = b.values[len(params):] or b.values
    results = [b.values[-1], *rng.sample(made, min(2, len(made)))]
    header = ", ".join(f"{n}: {_t(s, elem)}" for n, s in params)
    types = ", ".join(_t(s, elem) for _, s in results)
    text = (f"func.func @f({header}) -> ({types}) {{\n  " + "\n  ".join(b.lines) +
            f"\n  func.return {', '.join(n for n, _ in results)} : {types}\n}}\n")
    return TensorProgram(text, [(s, elem) for _, s in params], seed, [s for _, s in results])


def result_shapes(program: TensorProgram) -> list[tuple[int, ...]]:
    return list(program.results)


STAGES = ["canonicalize,cse", "fuse-elementwise", "tensor-to-loops", "plan-memory", "canonicalize,cse,licm",
          "math-approx"]
COMPILED = {"jit:threads=1": dict(threads=1, blas=False), "jit:threads=2": dict(threads=2, blas=False),
            "jit:blas": dict(threads=1, blas=True)}


def _agree(expected, got, elem: str) -> bool:
    tol = 3e-4 if elem == "f32" else 1e-9
    expected, got = np.asarray(expected), np.asarray(got)
    return expected.shape == got.shape and bool(np.allclose(got, expected, rtol=tol, atol=tol, equal_nan=True))


def check_tensor_program(program: TensorProgram, configs=None) -> list[str]:
    """Every configuration's results against the interpreter's; a list of what disagreed."""
    import irc
    import irc.passes
    from irc.interpreter import interpret
    from irc.passmanager import PASSES
    from irc.runtime.cpu import blas as blas_runtime

    args = program.arguments()
    elem = program.params[0][1]
    expected = interpret(irc.parse(program.text), "f", *args)
    problems = []
    module = irc.parse(program.text)
    outputs = [np.zeros(r.shape, r.dtype) for r in expected]
    for stage in STAGES:
        if stage == "math-approx" and stage not in PASSES:
            continue
        try:
            irc.passes.run(module, stage)
            if "tensor_signature" in module.functions[0].attributes:
                got = [np.full(r.shape, np.nan, r.dtype) for r in expected]
                interpret(module, "f", *args, *got)
            else:
                got = interpret(module, "f", *args)
        except Exception as e:  # noqa: BLE001 - every failure is a finding
            problems.append(f"stage {stage}: {type(e).__name__}: {e}")
            return problems
        for k, (e, g) in enumerate(zip(expected, got)):
            if not _agree(e, g, elem):
                problems.append(f"stage {stage}: result {k} differs (max error "
                                f"{np.nanmax(np.abs(np.asarray(e) - np.asarray(g))) if e.size else 0})")
    del outputs
    for name, options in (configs or COMPILED).items():
        if options.get("blas") and not blas_runtime.available():
            continue
        try:
            got = irc.compile(irc.parse(program.text), cache=False, **options).f(*args)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name}: {type(e).__name__}: {e}")
            continue
        for k, (e, g) in enumerate(zip(expected, got)):
            if not _agree(e, g, elem):
                problems.append(f"{name}: result {k} differs")
    return problems


# -- out= arrays that overlap the inputs ---------------------------------------------------------------
#
# A compiled tensor function writes its results into the arrays given as ``out=``.  When one of them
# shares memory with an input (``f(x, y, out=x)``, a transpose into its own input, a matmul into an
# operand), the results must still be what the interpreter computes from the inputs as they were -
# or the call must refuse the arrays, with a message that says why (one of ``OVERLAP_REFUSALS``).

OVERLAP_REFUSALS = ("overlap", "alias", "share")


def out_arrays(args: list, spec: str, result_types) -> list:
    """The ``out=`` arrays named by ``spec``: one comma-separated item per tensor result, ``new`` (a
    fresh array) or ``xI+B`` (the bytes of argument I from byte B on, seen with the result's shape)."""
    from irc.types import numpy_dtype

    outs = []
    for item, t in zip(spec.split(","), [t for t in result_types if hasattr(t, "shape")], strict=True):
        dtype, shape = np.dtype(numpy_dtype(t.element_type)), tuple(t.shape)
        if item == "new":
            outs.append(np.full(shape, np.nan, dtype))
            continue
        index, _, offset = item[1:].partition("+")
        raw = args[int(index)].reshape(-1).view(np.uint8)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        start = int(offset or 0)
        if start + size > raw.size:
            raise ValueError(f"out= item {item!r} needs {size} bytes, argument {index} has {raw.size - start}")
        outs.append(raw[start:start + size].view(dtype).reshape(shape))
    return outs


def refuses_overlap(e: BaseException) -> bool:
    """Whether ``e`` is a compiled function refusing ``out=`` arrays that overlap its inputs."""
    from irc.diagnostics import IRError

    return isinstance(e, (ValueError, TypeError, IRError)) and any(w in str(e).lower() for w in OVERLAP_REFUSALS)


def array_of(canon) -> np.ndarray:
    """The array an ``oracle.canonical`` form stands for (a scalar result: a 0-d array)."""
    if canon[0] == "array":
        _, dtype, shape, bits = canon
        return np.frombuffer(bits, dtype=np.dtype(dtype)).reshape(shape)
    from .differential import _float_of

    return np.asarray(_float_of(canon) if canon[0] in ("float", "nan") else canon)


def agree(expected: np.ndarray, got, elem: str) -> bool:
    return _agree(expected, got, elem)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Differential testing of the tensor compile path.")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=10)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    failures = 0
    for i in range(args.n):
        program = random_tensor_program(args.seed + i, args.size)
        problems = check_tensor_program(program)
        if problems:
            failures += 1
            print(f"program {args.seed + i} (random_tensor_program({args.seed + i}, {args.size})):")
            for p in problems:
                print(f"  {p}")
    print(f"tensor programs: {args.n}, disagreements: {failures}, time: {time.perf_counter() - start:.0f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
