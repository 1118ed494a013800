#!/usr/bin/env python3
"""irc's canonicalize against ``mlir-opt-22 --canonicalize`` on upstream MLIR's own tests (issue 15).

Reads upstream's canonicalisation tests from a checkout given on the command line (nothing of
them is kept in this repository)::

    python benchmarks/canonicalize_vs_mlir.py --upstream ~/llvm-project
    python benchmarks/canonicalize_vs_mlir.py --upstream DIR --show-all   # every function

where ``DIR/mlir/test/Dialect/{Arith,Math,SCF}/canonicalize.mlir`` exist.  Each file is split
at ``// -----`` as ``--split-input-file`` does; every function with a body is one case, run
together with the chunk's declarations (``func.func private @f(...)``) as one module:

* through ``mlir-opt-22 --pass-pipeline='builtin.module(canonicalize,print-op-stats)'`` on
  the text as upstream wrote it;
* through irc (``irc.parse`` then ``irc.passes.run(m, "canonicalize")``) on the same text with
  the spellings irc does not read yet rewritten (``normalise``: ``return`` and ``call``
  without ``func.``, a quoted predicate, ``vector<...>`` read as ``tensor<...>`` -- both are
  value-semantic shaped types and every op used on them here is elementwise).  The
  ``overflow<...>``/``fastmath<...>`` flags and truncf's rounding modes are read by irc as
  written.

Both sides count the ops left in function bodies, nested regions and terminators
(``scf.yield`` included, implicit ones too), not ``func.func``, the module or ``cf.phi``.

In scope: functions whose ops all belong to func, arith, math, cf and scf's for, if, while
(``scf.parallel``, ``scf.forall``, ``scf.index_switch``, ``scf.execute_region`` are not
irc ops).  Skipped, each with its reason: other dialects (the ``test`` dialect's
placeholder ops, ``ub``, ``vector``, ``tensor``, ``memref``, ``affine``, ``linalg``),
scalable vectors, and functions irc cannot parse (the parse error is
printed: types such as i0 or f80, ops irc lacks).

It prints one line per function where irc leaves more ops (``--show-all``: every function),
the skipped functions with their reasons, and the count of functions where irc leaves more
ops out of the functions compared.  Exit status 1 when that count is not zero.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opt_throughput import irc_op_kinds, parse_op_stats  # noqa: E402 - one way to count ops, as there

FILES = ["mlir/test/Dialect/Arith/canonicalize.mlir", "mlir/test/Dialect/Math/canonicalize.mlir",
         "mlir/test/Dialect/SCF/canonicalize.mlir"]

IN_SCOPE_DIALECTS = {"arith", "math", "func", "cf"}
IN_SCOPE_SCF = {"scf.for", "scf.if", "scf.while", "scf.yield", "scf.condition"}
BARE_OPS = {"return": "func.return", "call": "func.call"}

_OP_AT_LINE_START = re.compile(
    r'^\s*(?:(?:%[\w$.#:-]+\s*,\s*)*%[\w$.#:-]+\s*=\s*)?("?)([A-Za-z_][\w$]*(?:\.[\w$]+)*)\1')


# ---- splitting ------------------------------------------------------------------------------


def strip_comment(line: str) -> str:
    """The line without a ``//`` comment (MLIR has no ``//`` inside strings in these files)."""
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"':
            in_string = not in_string
        elif ch == "/" and not in_string and line.startswith("//", i):
            return line[:i]
    return line


def split_chunks(text: str) -> list[str]:
    """What ``--split-input-file`` hands mlir-opt: the text between ``// -----`` lines."""
    return re.split(r"^// -----.*$", text, flags=re.MULTILINE)


def functions(chunk: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The chunk's function declarations (no body) and its functions with bodies, (name, text).

    A ``module {...}`` wrapper is looked through; braces are matched on comment-free text."""
    lines = [strip_comment(x) for x in chunk.splitlines()]
    decls: list[str] = []
    bodies: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        m = re.match(r"\s*func\.func\s+(?:private\s+|public\s+|nested\s+)?@([\w$.-]+)", lines[i])
        if not m:
            i += 1
            continue
        name, depth, j, seen_brace = m.group(1), 0, i, False
        while j < len(lines):
            if not seen_brace and j > i and re.match(r"\s*(func\.func|module\b|}|$)", lines[j]):
                j -= 1  # a declaration: the header ended on the line before
                break
            depth += lines[j].count("{") - lines[j].count("}")
            seen_brace |= "{" in lines[j]
            if seen_brace and depth <= 0:
                break
            j += 1
        text = "\n".join(lines[i:j + 1])
        (bodies if seen_brace else decls).append((name, text) if seen_brace else text)
        i = j + 1
    return decls, bodies


# ---- scope ----------------------------------------------------------------------------------


def op_names(func_text: str) -> list[str]:
    """The op names used in a function's body (one op per line, as these files are written)."""
    names = []
    lines = func_text.splitlines()
    start = next((k for k, line in enumerate(lines) if "{" in line), 0)  # after a long signature
    for line in lines[start + 1:]:
        m = _OP_AT_LINE_START.match(line)
        if m and not line.strip().startswith(("^", "}")) and ("." in m.group(2) or m.group(2) in BARE_OPS):
            names.append(m.group(2))  # (a line that continues a type list names no op)
    return names


def out_of_scope(func_text: str) -> str | None:
    """Why a function is out of scope, or None."""
    for name in op_names(func_text):
        name = BARE_OPS.get(name, name)
        dialect = name.split(".")[0]
        if name.startswith("scf."):
            if name not in IN_SCOPE_SCF:
                return f"uses {name}"
        elif dialect not in IN_SCOPE_DIALECTS or "." not in name:
            return f"uses the {dialect} dialect ({name})"
    if re.search(r"vector<\[", func_text):
        return "scalable vector type"
    return None


def normalise(text: str) -> str:
    """Rewrite the spellings irc does not read yet (see the module docstring)."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"^(\s*(?:%[\w$.#:-]+(?:\s*,\s*%[\w$.#:-]+)*\s*=\s*)?)(return|call)\b",
                      lambda m: m.group(1) + BARE_OPS[m.group(2)], line)
        line = re.sub(r"(arith\.cmp[if])\s+\"(\w+)\"", r"\1 \2", line)
        line = line.replace("vector<", "tensor<")
        out.append(line)
    return "\n".join(out)


# ---- counting -------------------------------------------------------------------------------


def run_mlir(exe: str, text: str) -> Counter | str:
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write(text)
    try:
        proc = subprocess.run([exe, "--pass-pipeline=builtin.module(canonicalize,print-op-stats)",
                               "--mlir-disable-threading", "-o", "/dev/null", f.name],
                              capture_output=True, text=True, timeout=60)
    finally:
        Path(f.name).unlink()
    if proc.returncode != 0:
        return proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else f"exit {proc.returncode}"
    return parse_op_stats(proc.stderr)


def run_irc(text: str) -> Counter | str:
    import irc.passes

    import irc

    try:
        module = irc.parse(normalise(text))
        irc.passes.run(module, "canonicalize")
    except Exception as e:  # noqa: BLE001 - any failure is reported as the reason for a skip
        first = str(e).strip().splitlines()
        return f"{type(e).__name__}: {first[0] if first else ''}"
    return irc_op_kinds(module)


# ---- the comparison -------------------------------------------------------------------------


def cases(upstream: Path, files: list[str]):
    """(file, function name, module text, skip reason or None) for every function with a body."""
    for rel in files:
        text = (upstream / rel).read_text()
        for chunk in split_chunks(text):
            decls, bodies = functions(chunk)
            for name, body in bodies:
                yield rel, name, "\n".join([*decls, body]) + "\n", out_of_scope(body)


def compare(upstream: Path, exe: str, files: list[str] = FILES) -> list[dict]:
    rows = []
    for rel, name, text, skip in cases(upstream, files):
        row = {"file": rel, "func": name, "skip": skip}
        if skip is None:
            mlir = run_mlir(exe, text)
            ours = run_irc(text)
            if isinstance(mlir, str):
                row["skip"] = f"mlir-opt failed: {mlir}"
            elif isinstance(ours, str):
                row["skip"] = f"irc cannot parse or run it: {ours}"
            else:
                row.update(mlir=sum(mlir.values()), irc=sum(ours.values()),
                           extra=sorted((ours - mlir).elements()))
        rows.append(row)
    return rows


def report(rows: list[dict], show_all: bool, stream=sys.stdout) -> int:
    compared = [r for r in rows if r["skip"] is None]
    worse = [r for r in compared if r["irc"] > r["mlir"]]
    better = [r for r in compared if r["irc"] < r["mlir"]]
    print(f"{'file':<10} {'function':<44} {'mlir':>5} {'irc':>5}  irc's extra ops", file=stream)
    for r in compared:
        if show_all or r["irc"] > r["mlir"]:
            short = r["file"].split("/")[-2]
            extra = ", ".join(f"{k} x{n}" for k, n in Counter(r["extra"]).items())
            print(f"{short:<10} {r['func']:<44} {r['mlir']:>5} {r['irc']:>5}  {extra}", file=stream)
    skipped = [r for r in rows if r["skip"] is not None]
    if skipped:
        print(f"\nskipped ({len(skipped)}):", file=stream)
        for r in skipped:
            print(f"  {r['file'].split('/')[-2]:<6} {r['func']:<44} {r['skip']}", file=stream)
    print(f"\nfunctions compared: {len(compared)} (of {len(rows)}); irc leaves more ops on {len(worse)}, "
          f"fewer on {len(better)}, as many on {len(compared) - len(worse) - len(better)}", file=stream)
    return len(worse)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", type=Path, required=True,
                    help="an llvm-project checkout (holding mlir/test/Dialect/...)")
    ap.add_argument("--mlir-opt", default="mlir-opt-22")
    ap.add_argument("--show-all", action="store_true", help="print every compared function")
    args = ap.parse_args(argv)
    exe = shutil.which(args.mlir_opt)
    if exe is None:
        print(f"error: {args.mlir_opt} not found", file=sys.stderr)
        return 2
    missing = [f for f in FILES if not (args.upstream / f).is_file()]
    if missing:
        print(f"error: {args.upstream} lacks {', '.join(missing)}", file=sys.stderr)
        return 2
    return 1 if report(compare(args.upstream, exe), args.show_all) else 0


if __name__ == "__main__":
    sys.exit(main())
