"""Math sweep: every float op computes the same bits at every level.

    python -m irc.testing.math_sweep --n 20000 --seed 1 [--ops exp powf] [--types f32 f16]

For each op (the float ops of ``math`` and ``arith``) and float type, a sweep of
inputs (random bit patterns; ±0, ±inf, NaNs with payloads, signalling NaNs,
subnormals, the largest finite values, arguments near exp's overflow, huge
arguments for sin/cos) is computed by

* ``fold``:        irc's constant folding (``inline,canonicalize`` on calls with constant arguments);
* ``interp``:      the interpreter, one scalar at a time (the same constant-argument calls);
* ``interp-tensor``: the interpreter on one tensor of all the inputs (the array path);
* ``jit-O0``, ``jit-O2``: compiled code, one loop over a memref of all the inputs;
* ``llvm-fold``:   compiled code at -O2 of the constant-argument calls (LLVM inlines and folds).

Results are compared as bit patterns; any NaN equals any NaN unless the op is
bit-preserving (negf, absf, bitcast), where every bit counts.  Each
disagreement names the op, the type, the levels and the input bits.  bf16 has
no compiled code yet: its levels are fold and the interpreter.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

UNARY = ["exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tanh", "erf", "sqrt", "rsqrt",
         "absf", "floor", "ceil", "negf", "bitcast", "exttrunc"]
BINARY = ["powf", "addf", "subf", "mulf", "divf", "remf", "maximumf", "minimumf", "maxnumf", "minnumf"]
OPS = UNARY + BINARY
BIT_PRESERVING = {"negf", "absf", "bitcast"}
# extf/truncf are not among them: LLVM may quiet a NaN or not (it folds truncf(extf x) to x,
# even at -O0, while each alone quiets), as its LangRef allows, so only NaN-ness is compared.
EXACT_NAN = BIT_PRESERVING
TYPES = ["f16", "bf16", "f32", "f64"]
JIT_TYPES = {"f16", "f32", "f64"}
WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
CHUNK = 1000  # constant-argument calls per module (parse, fold and LLVM time grow with it)


def op_name(op: str) -> str:
    arith = {"negf", "addf", "subf", "mulf", "divf", "remf", "maximumf", "minimumf", "maxnumf", "minnumf"}
    special = {"bitcast": "arith.bitcast", "exttrunc": "arith.extf+truncf"}
    return special.get(op) or ("arith." if op in arith else "math.") + op


def _int_type(t: str) -> str:
    return f"i{WIDTH[t]}"


def scalar_body(op: str, t: str, args: list[str]) -> list[str]:
    """Lines computing ``%r`` from ``args`` (SSA names of type ``t``)."""
    if op == "bitcast":  # there and back: both directions of the bit-preserving cast
        it = _int_type(t)
        return [f"%bits = arith.bitcast {args[0]} : {t} to {it}",
                f"%r = arith.bitcast %bits : {it} to {t}"]
    if op == "exttrunc":  # extf then truncf (f64: truncf then extf), NaNs included
        if t == "f64":
            return [f"%w = arith.truncf {args[0]} : f64 to f32", "%r = arith.extf %w : f32 to f64"]
        return [f"%w = arith.extf {args[0]} : {t} to f64", f"%r = arith.truncf %w : f64 to {t}"]
    return [f"%r = {op_name(op)} {', '.join(args)} : {t}"]


def loop_module(op: str, t: str, arity: int) -> str:
    """``@f(in0, [in1,] out, n)``: the op over memrefs, for the interpreter-free JIT levels, and
    ``@t(tensors)`` for the interpreter's array path."""
    m = f"memref<?x{t}>"
    ins = ", ".join(f"%a{k}: {m}" for k in range(arity))
    loads = "\n".join(f"    %x{k} = memref.load %a{k}[%i] : {m}" for k in range(arity))
    body = "\n".join("    " + line for line in scalar_body(op, t, [f"%x{k}" for k in range(arity)]))
    tt = f"tensor<?x{t}>"
    tins = ", ".join(f"%a{k}: {tt}" for k in range(arity))
    tensor_fn = ""
    if op == "exttrunc":
        wide = "f32" if t == "f64" else "f64"
        first, second = ("truncf", "extf") if t == "f64" else ("extf", "truncf")
        tensor_fn = f"""
func.func @t(%a0: {tt}) -> {tt} {{
  %w = arith.{first} %a0 : {tt} to tensor<?x{wide}>
  %r = arith.{second} %w : tensor<?x{wide}> to {tt}
  func.return %r : {tt}
}}"""
    elif op != "bitcast":
        tensor_fn = f"""
func.func @t({tins}) -> {tt} {{
  %r = {op_name(op)} {', '.join(f'%a{k}' for k in range(arity))} : {tt}
  func.return %r : {tt}
}}"""
    else:
        it = f"tensor<?x{_int_type(t)}>"
        tensor_fn = f"""
func.func @t(%a0: {tt}) -> {tt} {{
  %b = arith.bitcast %a0 : {tt} to {it}
  %r = arith.bitcast %b : {it} to {tt}
  func.return %r : {tt}
}}"""
    return f"""func.func @f({ins}, %out: {m}, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {{
{loads}
{body}
    memref.store %r, %out[%i] : {m}
  }}
  func.return
}}
{tensor_fn}
"""


def constant_module(op: str, t: str, columns: list[np.ndarray]) -> str:
    """``@k(out)`` stores ``@op(c0, c1...)`` for constant bit patterns into ``out``: inlining
    and folding (irc's or LLVM's) see constant arguments."""
    arity = len(columns)
    digits = WIDTH[t] // 4
    params = ", ".join(f"%x{k}: {t}" for k in range(arity))
    body = "\n".join("  " + line for line in scalar_body(op, t, [f"%x{k}" for k in range(arity)]))
    lines = [f"func.func private @op({params}) -> {t} {{", body, f"  func.return %r : {t}", "}",
             f"func.func @k(%out: memref<{len(columns[0])}x{t}>) {{"]
    for i in range(len(columns[0])):
        for k in range(arity):
            lines.append(f"  %c{k}_{i} = arith.constant 0x{int(columns[k][i]):0{digits}X} : {t}")
        lines.append(f"  %i{i} = arith.constant {i} : index")
        lines.append(f"  %r{i} = func.call @op({', '.join(f'%c{k}_{i}' for k in range(arity))}) : "
                     f"({', '.join([t] * arity)}) -> {t}")
        lines.append(f"  memref.store %r{i}, %out[%i{i}] : memref<{len(columns[0])}x{t}>")
    lines += ["  func.return", "}"]
    return "\n".join(lines) + "\n"


# -- inputs ----------------------------------------------------------------------------------------


def _bits_of(values, t: str) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if t == "f64":
            return a.view(np.uint64)
        if t == "f32":
            return a.astype(np.float32).view(np.uint32)
        if t == "f16":
            return a.astype(np.float16).view(np.uint16)
        return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def special_bits(t: str) -> np.ndarray:
    """±0, ±1, ±inf, quiet and signalling NaNs with payloads, subnormals, extremes, and arguments
    at the edges of exp's range and huge ones for sin/cos."""
    w = WIDTH[t]
    mant = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52}[t]
    sign = 1 << (w - 1)
    exp_all = ((1 << (w - 1 - mant)) - 1) << mant
    quiet = 1 << (mant - 1)
    raw = [0, 1, 2, (1 << mant) - 1, 1 << mant, exp_all - 1, exp_all, exp_all | quiet, exp_all | quiet | 1,
           exp_all | 1, exp_all | (quiet >> 1), exp_all | (quiet - 1), exp_all | ((1 << mant) - 1)]
    values = [0.5, 1.0, 2.0, -1.0, 3.0, 0.1, 1e-7, 709.782712893384, 709.79, 88.72283, 88.7229, 11.0898,
              11.09, -745.1332, -103.97, -17.33, 1e22, 1e300, 3.4e38, 65504.0, 6.2831853, 3.14159265358979,
              1.5707963267948966, 355.0, 1e10, 2.0 ** 1023, 2.0 ** 127, 2.0 ** 15, 0.75, 100.0, -0.5,
              1.0 + 2 ** -52, 1.0 - 2 ** -53, 1e-300, 2.0 ** -1074, 2.0 ** -149, 2.0 ** -24]
    bits = np.concatenate([np.array(raw, dtype=np.uint64), _bits_of(values, t).astype(np.uint64)])
    bits = np.concatenate([bits, bits | sign])
    return np.unique(bits & ((1 << w) - 1)).astype(f"u{w // 8}")


def random_bits(rng: np.random.Generator, t: str, n: int) -> np.ndarray:
    """Half uniform bit patterns, half moderate values (|x| in 2^-8..2^12) where most results
    are finite and the last bit is hard."""
    w = WIDTH[t]
    raw = rng.integers(0, 1 << w, size=n - n // 2, dtype=np.uint64 if w == 64 else np.int64)
    moderate = _bits_of(np.ldexp(rng.uniform(1, 2, n // 2) * rng.choice([-1, 1], n // 2),
                                 rng.integers(-8, 13, n // 2)), t)
    return np.concatenate([raw.astype(np.uint64), moderate.astype(np.uint64)]).astype(f"u{w // 8}")


def inputs(rng: np.random.Generator, op: str, t: str, n: int) -> list[np.ndarray]:
    """Columns of input bit patterns, ``n`` random rows plus the specials (pairs of specials for
    binary ops: the full cross product)."""
    arity = 2 if op in BINARY else 1
    special = special_bits(t)
    if arity == 1:
        return [np.concatenate([special, random_bits(rng, t, n)])]
    sa, sb = np.meshgrid(special, special)
    if n < sa.size:  # a small sweep takes a sample of the special pairs
        keep = np.sort(rng.choice(sa.size, n, replace=False))
        sa, sb = sa.ravel()[keep], sb.ravel()[keep]
    mixed_a = np.concatenate([special, random_bits(rng, t, len(special))])
    mixed_b = np.concatenate([random_bits(rng, t, len(special)), special])
    return [np.concatenate([sa.ravel(), mixed_a, random_bits(rng, t, n)]),
            np.concatenate([sb.ravel(), mixed_b, random_bits(rng, t, n)])]


# -- levels ----------------------------------------------------------------------------------------


def _as_values(bits: np.ndarray, t: str) -> np.ndarray:
    if t == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view({"f16": np.float16, "f32": np.float32, "f64": np.float64}[t])


def _as_bits(values: np.ndarray, t: str) -> np.ndarray:
    values = np.ascontiguousarray(values)
    if t == "bf16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.view(f"u{WIDTH[t] // 8}")


def run_levels(op: str, t: str, columns: list[np.ndarray], jit: bool = True,
               fold_n: int | None = None) -> dict[str, np.ndarray]:
    """The result bits of every level for the input columns; the constant-argument levels (fold,
    interp, llvm-fold: one op per input in the IR) take the first ``fold_n`` inputs only."""
    import irc
    from irc.passes import run as run_passes

    results: dict[str, np.ndarray] = {}
    arity = len(columns)
    n = len(columns[0])
    values = [_as_values(c, t) for c in columns]
    loops = irc.parse(loop_module(op, t, arity), filename=f"sweep-{op}-{t}.ir")
    results["interp-tensor"] = _as_bits(irc.interpret(loops, "t", *[v.copy() for v in values]), t)
    if jit and t in JIT_TYPES:
        for level in (0, 2):
            out = np.zeros(n, dtype=values[0].dtype)
            irc.compile(loops, opt_level=level, cache=False).f(*values, out, n)
            results[f"jit-O{level}"] = _as_bits(out, t)
    parts: dict[str, list[np.ndarray]] = {"interp": [], "fold": [], "llvm-fold": []}
    for start in range(0, n if fold_n is None else min(n, fold_n), CHUNK):
        chunk = [c[start:start + CHUNK] for c in columns]
        size = len(chunk[0])
        dtype = values[0].dtype
        text = constant_module(op, t, chunk)
        module = irc.parse(text, filename=f"sweep-{op}-{t}-constants.ir")
        out = np.zeros(size, dtype=dtype)
        irc.interpret(module, "k", out)
        parts["interp"].append(_as_bits(out, t))
        folded = run_passes(irc.parse(text), "inline,canonicalize,dce")
        out = np.zeros(size, dtype=dtype)
        irc.interpret(folded, "k", out)
        # A fold that declines leaves the op to the interpreter: still compared, just not folded.
        parts["fold"].append(_as_bits(out, t))
        if jit and t in JIT_TYPES:
            out = np.zeros(size, dtype=dtype)
            irc.compile(module, opt_level=2, cache=False).k(out)
            parts["llvm-fold"].append(_as_bits(out, t))
    for name, chunks in parts.items():
        if chunks:
            results[name] = np.concatenate(chunks)
    return results


# -- comparison ------------------------------------------------------------------------------------


@dataclass
class Disagreement:
    op: str
    type: str
    inputs: tuple[int, ...]
    results: dict[str, int]

    def __str__(self) -> str:
        digits = WIDTH[self.type] // 4
        ins = ", ".join(f"0x{b:0{digits}X}" for b in self.inputs)
        outs = ", ".join(f"{k}=0x{v:0{digits}X}" for k, v in self.results.items())
        return f"{op_name(self.op)} : {self.type} ({ins}): {outs}"


@dataclass
class Report:
    checked: int = 0
    folded: int = 0  # inputs that also went through the constant-argument levels
    disagreements: list[Disagreement] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)


def _is_nan(bits: np.ndarray, t: str) -> np.ndarray:
    v = _as_values(bits, t)
    return np.isnan(v)


def compare(op: str, t: str, columns: list[np.ndarray], results: dict[str, np.ndarray]) -> list[Disagreement]:
    names = list(results)
    n = min(len(r) for r in results.values())
    results = {k: v[:n] for k, v in results.items()}  # the constant levels may cover a prefix only
    columns = [c[:n] for c in columns]
    reference = results[names[0]].astype(np.uint64)
    bad = np.zeros(len(reference), dtype=bool)
    ref_nan = _is_nan(results[names[0]], t)
    for name in names[1:]:
        other = results[name].astype(np.uint64)
        differ = other != reference
        if op not in EXACT_NAN:
            differ &= ~(ref_nan & _is_nan(results[name], t))
        bad |= differ
    return [Disagreement(op, t, tuple(int(c[i]) for c in columns), {k: int(v[i]) for k, v in results.items()})
            for i in np.flatnonzero(bad)]


def sweep(n: int, seed: int, ops=None, types=None, jit: bool = True, log=None, fold_n: int | None = None) -> Report:
    report = Report()
    for op in ops or OPS:
        for t in types or TYPES:
            rng = np.random.default_rng([seed, OPS.index(op), TYPES.index(t)])
            columns = inputs(rng, op, t, n)
            started = time.perf_counter()
            results = run_levels(op, t, columns, jit=jit, fold_n=fold_n)
            report.checked += len(columns[0])
            report.folded += min(len(columns[0]), fold_n if fold_n is not None else len(columns[0]))
            # The array levels cover every input; the constant levels a prefix (compared twice).
            found = compare(op, t, columns, {k: v for k, v in results.items() if len(v) == len(columns[0])})
            if fold_n is not None and fold_n < len(columns[0]):
                found += compare(op, t, columns, results)
            report.counts[(op, t)] = len(found)
            report.disagreements += found
            if log:
                log(f"{op_name(op):16} {t:5} {len(columns[0]):8} inputs  {len(found):6} disagreements  "
                    f"{time.perf_counter() - started:6.1f} s")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m irc.testing.math_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="random inputs per op and type")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ops", nargs="*", choices=OPS, default=None)
    parser.add_argument("--types", nargs="*", choices=TYPES, default=None)
    parser.add_argument("--no-jit", action="store_true", help="fold and interpreter only")
    parser.add_argument("--fold-n", type=int, default=None,
                        help="inputs per op and type that also go through the constant-argument levels "
                             "(fold, interp, llvm-fold), which cost one op per input; default: all")
    parser.add_argument("--show", type=int, default=20, help="disagreements to print")
    args = parser.parse_args(argv)
    report = sweep(args.n, args.seed, args.ops, args.types, jit=not args.no_jit, log=print, fold_n=args.fold_n)
    for d in report.disagreements[:args.show]:
        print(d)
    print(f"{report.checked} inputs ({report.folded} also folded), {len(report.disagreements)} disagreements")
    return 1 if report.disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
