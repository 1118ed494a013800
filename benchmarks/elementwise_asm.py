#!/usr/bin/env python3
"""The hot loops of tensor_cpu.py's sigmoid, GELU and softmax: irc's assembly next to gcc's.

Where a kernel's time goes is in its innermost loops.  This script compiles the
three workloads of ``benchmarks/tensor_cpu.py`` at their full sizes the way
``irc.compile`` does (the tensor pipeline for this host, then LLVM, as
``irc compile --emit asm`` prints it) and the C reference
(``benchmarks/c/tensor_kernels.c`` with ``gcc -O3 -march=native -ffast-math -S``),
finds every innermost loop (a block that a later branch jumps back to, with no
loop inside), and prints for each: its instructions, how many are vector
loads, stores and calls (gcc's loops call glibc's vector math library, whose
own instructions are not counted: ``objdump -d`` libmvec for those), the most
frequent mnemonics, and instructions per 16 f32 elements, counting the elements an
iteration handles from its packed stores (its packed loads where it stores nothing;
a scalar loop shows "-").

    python benchmarks/elementwise_asm.py            # all three
    python benchmarks/elementwise_asm.py --only softmax --show   # and the loops' text
    python benchmarks/elementwise_asm.py --cpu x86-64-v3         # AVX2 code, irc's and gcc's

docs/benchmarks.md (issue 14's section) reads these counts against the timings.
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

from irc.runtime import aot

import irc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tensor_cpu as T  # noqa: E402 - the workloads' programs and the C source

WORKLOADS = {"sigmoid": (T.SIGMOID_IR, ((1 << 24,),) * 3, "sigmoid_fma"),
             "gelu": (T.GELU_IR, ((1 << 24,),), "gelu_tanh"),
             "softmax": (T.SOFTMAX_IR, ((4096, 1024),), "softmax_rows")}
LANE_BYTES = {"zmm": 64, "ymm": 32, "xmm": 16}
VECTOR_STORE = re.compile(r"^v(movups|movaps|movdqu\d*|movdqa\d*|movntps)\s+%[xyz]mm\d+,\s*[^%]*\(")
PACKED = re.compile(r"^v\w*p[sd]\s|^vmovu|^vmova|^vmovdq|^vp")  # packed: not vmovss/vaddss...


def irc_asm(key: str) -> str:
    text, shapes, _ = WORKLOADS[key]
    exe = irc.compile(irc.parse(text), threads=1, cache=False)
    module, _ = getattr(exe, key).lower(shapes)
    return aot.emit(module, "asm")


def gcc_asm() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kernels.s"
        subprocess.run([gcc, *T.C_FLAGS, "-S", str(T.C_SOURCE), "-o", str(out)], check=True)
        return out.read_text()


def function_text(asm: str, name: str) -> list[str]:
    """The lines of function ``name`` (from its label to its ``.size``, or to the end)."""
    lines = asm.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}:"))
    end = next((i for i in range(start, len(lines)) if lines[i].strip().startswith(f".size\t{name}")), len(lines))
    return lines[start:end]


def instructions(lines: list[str]) -> list[str]:
    return [s for s in (line.split("#")[0].strip() for line in lines)
            if s and not s.startswith(".") and not s.endswith(":")]


def innermost_loops(lines: list[str]) -> list[list[str]]:
    """Each innermost loop's instructions: from a label to the last branch back to it."""
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\.L\w+):", line))}
    spans = []
    for i, line in enumerate(lines):
        m = re.match(r"^\s+j(?!mp)\w+\s+(\.L\w+)", line)  # a conditional branch back
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            spans.append((labels[m.group(1)], i))
    inner = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    return [instructions(lines[a:b + 1]) for a, b in sorted(set(inner))]


def memory_bytes(ins: str) -> int:
    """Bytes a packed instruction moves to or from memory: its vector register's width
    (half of it for the widening vcvtps2pd)."""
    width = LANE_BYTES[re.search(r"%([xyz]mm)", ins).group(1)]
    return width // 2 if ins.startswith("vcvtps2pd") else width


def describe(loop: list[str]) -> str:
    mnemonics = Counter(ins.split()[0] for ins in loop)
    packed = [ins for ins in loop if PACKED.match(ins) and "(" in ins and re.search(r"%[xyz]mm", ins)
              and not re.search(r"%r(ip|sp|bp)\b", ins)]  # data, not constants or spills
    stores = [ins for ins in packed if VECTOR_STORE.match(ins)]
    loads = [ins for ins in packed if not VECTOR_STORE.match(ins)]
    calls = [ins.split()[1] for ins in loop if ins.startswith("call")]
    moved = stores or loads
    lane_bytes = sum(memory_bytes(ins) for ins in moved)
    per16 = f"{len(loop) * 16 / (lane_bytes / 4):5.1f}" if lane_bytes else "    -"
    common = ", ".join(f"{m} {n}" for m, n in mnemonics.most_common(6))
    called = f"; calls {', '.join(calls)}" if calls else ""
    return (f"{len(loop):4d} instructions, {len(loads)} packed loads, {len(stores)} stores; "
            f"{per16} per 16 f32{called}  [{common}]")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--show", action="store_true", help="print each loop's instructions too")
    ap.add_argument("--cpu", choices=sorted(T.CPU_LEVELS),
                    help="irc and gcc for this x86-64 level (tensor_cpu.py's --cpu; read when it is imported)")
    args = ap.parse_args(argv)
    keys = args.only.split(",") if args.only else list(WORKLOADS)
    c_asm = gcc_asm()
    for key in keys:
        print(f"## {key}")
        for who, lines in [("irc", function_text(irc_asm(key), f"{key}.body")),
                           ("gcc", function_text(c_asm, WORKLOADS[key][2]) if c_asm else [])]:
            for loop in innermost_loops(lines):
                print(f"{who}: {describe(loop)}")
                if args.show:
                    print("    " + "\n    ".join(loop))
    return 0


if __name__ == "__main__":
    sys.exit(main())
