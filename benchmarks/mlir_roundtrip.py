"""MLIR text through irc and back: how many chunks of MLIR files round-trip.

    python benchmarks/mlir_roundtrip.py FILE.mlir ... [--mlir-opt mlir-opt-22] [--per-function] [-v]
    python benchmarks/mlir_roundtrip.py --upstream ~/llvm-project --per-function   # issue 15's 17 files

Each file is split at ``// -----`` (as ``mlir-opt --split-input-file`` does); with
``--per-function`` each top-level op of a chunk, as mlir-opt prints it, is a unit of its own
(most upstream test files are one chunk of many functions).  Each unit:

1. goes through ``mlir-opt --allow-unregistered-dialect`` (units mlir-opt rejects, such as the
   expected-error cases of upstream's ``*-invalid.mlir`` tests or a function calling another
   one when split per function, are not counted);
2. is in scope if every op of mlir-opt's generic output belongs to a dialect irc reads
   (func, arith, math, cf, scf, memref, builtin) and no type is outside irc's (vector,
   complex, dialect types, affine layouts);
3. in-scope chunks are parsed and verified by irc, printed with ``irc.print_mlir``, fed back to
   ``mlir-opt``, and compared with step 1's output.

It prints one line per failing chunk (with -v, every chunk), the counts per file and in all;
"accepted" counts the units that irc reads and mlir-opt reads back (identical or not).  With
``--upstream DIR`` the files are the 17 upstream tests issue 15 names (``UPSTREAM_FILES``) under
an llvm-project checkout; the ``*invalid.mlir`` ones hold only chunks that mlir-opt rejects.  Upstream MLIR's test
files are not part of this repository: pass their paths (docs/mlir-interop.md says how the
figure there was measured).  The repository's own corpus is tests/mlir/*.mlir.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

IN_SCOPE = {"builtin", "func", "arith", "math", "cf", "scf", "memref"}
_GENERIC_OP = re.compile(r'"([A-Za-z_][\w$]*)\.[\w$.]+"\(')
_SWITCH_CASES = re.compile(r"case_values = dense<[^>]*> : vector<\d+xi\d+>")
_FOREIGN = re.compile(r"vector<|complex<|tuple<|!\w|affine_map|strided<|#map|affine_set|tensor<[^>]*,|<\*x")


UPSTREAM_FILES = [f"mlir/test/Dialect/{d}/{f}.mlir" for d in ("Arith", "SCF", "ControlFlow", "MemRef")
                  for f in ("ops", "canonicalize", "invalid")] + [
    "mlir/test/Dialect/Math/ops.mlir", "mlir/test/Dialect/Math/canonicalize.mlir",
    "mlir/test/Transforms/cse.mlir", "mlir/test/Transforms/sccp.mlir", "mlir/test/Transforms/canonicalize.mlir"]
"""The 17 upstream test files of issue 15, relative to an llvm-project checkout."""


@dataclass
class ChunkResult:
    where: str
    status: str  # 'rejected by mlir-opt', 'out of scope', 'irc error', 'mlir-opt rejects irc', 'differs', 'ok'
    detail: str = ""


def split_chunks(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each '// -----'-separated chunk."""
    chunks, line = [], 1
    for chunk in re.split(r"^// -----\s*$", text, flags=re.M):
        chunks.append((line, chunk))
        line += chunk.count("\n")
    return chunks


def run_mlir_opt(tool: str, text: str, *extra: str) -> tuple[bool, str]:
    proc = subprocess.run([tool, "--allow-unregistered-dialect", *extra, "-"], input=text, capture_output=True,
                          text=True, timeout=60)
    return proc.returncode == 0, proc.stdout if proc.returncode == 0 else proc.stderr


def round_trip(tool: str, text: str, where: str = "<chunk>") -> ChunkResult:
    import irc

    ok, printed = run_mlir_opt(tool, text)
    if not ok:
        return ChunkResult(where, "rejected by mlir-opt")
    ok, generic = run_mlir_opt(tool, text, "--mlir-print-op-generic")
    dialects = set(_GENERIC_OP.findall(generic)) if ok else set()
    # cf.switch keeps its cases as a vector constant: not a vector the program uses.
    generic = _SWITCH_CASES.sub("", generic) if ok else generic
    if not ok or not dialects <= IN_SCOPE or _FOREIGN.search(generic):
        return ChunkResult(where, "out of scope", ", ".join(sorted(dialects - IN_SCOPE)))
    try:
        module = irc.parse(printed, where)
        module.verify()
        emitted = irc.print_mlir(module)
    except irc.IRError as e:
        return ChunkResult(where, "irc error", str(e).splitlines()[0])
    ok, again = run_mlir_opt(tool, emitted)
    if not ok:
        return ChunkResult(where, "mlir-opt rejects irc", again.strip().splitlines()[0] if again.strip() else "")
    if again != printed:
        return ChunkResult(where, "differs")
    return ChunkResult(where, "ok")


def top_level_units(tool: str, text: str) -> list[str]:
    """Each top-level op of ``text`` as mlir-opt prints it, as a module of its own."""
    ok, printed = run_mlir_opt(tool, text)
    if not ok:  # one bad function spoils the chunk: split the source at unindented functions instead
        pieces = re.split(r"^(?=func\.func)", text, flags=re.M)
        return [p for p in pieces if "func.func" in p] or [text]
    lines = printed.rstrip("\n").splitlines()
    aliases = [line for line in lines if line.startswith("#")]  # '#map = ...': kept with every unit
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines or not lines[0].startswith("module") or lines[-1] != "}":
        return [printed]
    units, current = [], []
    for line in lines[1:-1]:
        if line.startswith("  ") and not line.startswith("   ") and line[2:3] not in ("}", "^") and current:
            units.append(current)
            current = []
        current.append(line)
    if current:
        units.append(current)
    # Declarations ('func.func private @f(i32)') go with every unit, so that calls still verify.
    declarations = [u for u in units if len(u) == 1 and u[0].startswith("  func.func") and not u[0].endswith("{")]
    out = []
    for u in units:
        if u in declarations:
            continue
        own = "\n".join(u)
        called = [d for d in declarations if re.search(r"@" + re.escape(d[0].split("@", 1)[1].split("(", 1)[0]) + r"\b", own)]
        body = "\n".join(sum(called, []) + u)
        used = [a for a in aliases if re.search(re.escape(a.split("=", 1)[0].strip()) + r"\b", body)]
        out.append("".join(a + "\n" for a in used) + lines[0] + "\n" + body + "\n}\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--upstream", metavar="DIR", help="an llvm-project checkout: measure UPSTREAM_FILES in it")
    ap.add_argument("--mlir-opt", default="mlir-opt-22")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--per-function", action="store_true", help="count each top-level op of a chunk on its own")
    args = ap.parse_args(argv)
    if shutil.which(args.mlir_opt) is None:
        print(f"{args.mlir_opt} is not installed; nothing to measure", file=sys.stderr)
        return 2
    files = list(args.files)
    if args.upstream:
        import os

        files += [os.path.join(args.upstream, f) for f in UPSTREAM_FILES]
    if not files:
        ap.error("give FILE.mlir arguments or --upstream DIR")
    results = []
    per_file = {}
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            print(f"{path}: cannot read ({e.strerror})")
            continue
        start = len(results)
        for line, chunk in split_chunks(text):
            units = top_level_units(args.mlir_opt, chunk) if args.per_function else [chunk]
            for k, unit in enumerate(units):
                where = f"{path}:{line}" + (f"#{k + 1}" if args.per_function else "")
                r = round_trip(args.mlir_opt, unit, where)
                results.append(r)
                if args.verbose or r.status not in ("ok", "rejected by mlir-opt", "out of scope"):
                    print(f"{r.where}: {r.status}{': ' + r.detail if r.detail else ''}")
        per_file[path] = results[start:]
    for path, rs in per_file.items():
        scope = [r for r in rs if r.status not in ("rejected by mlir-opt", "out of scope")]
        accepted = sum(r.status in ("ok", "differs") for r in scope)
        print(f"{path}: {len(rs)} units, {len(scope)} in scope, accepted {accepted}/{len(scope)}, "
              f"identical {sum(r.status == 'ok' for r in scope)}/{len(scope)}")
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    in_scope = sum(n for s, n in counts.items() if s not in ("rejected by mlir-opt", "out of scope"))
    print(f"{'top-level ops' if args.per_function else 'chunks'}: {len(results)}; rejected by mlir-opt: {counts.get('rejected by mlir-opt', 0)}; "
          f"out of scope: {counts.get('out of scope', 0)}; in scope: {in_scope}")
    print(f"in scope: round-trip identical {counts.get('ok', 0)}/{in_scope}; irc error "
          f"{counts.get('irc error', 0)}; mlir-opt rejects irc's output {counts.get('mlir-opt rejects irc', 0)}; "
          f"accepted but printed differently {counts.get('differs', 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
