"""Small random programs that fault, or come close: the inputs on which compiled code used to crash.

``random_program`` only writes programs without undefined behaviour, so it can never show what
compiled code does where the interpreter reports a fault.  This generator writes the opposite:
programs built around one *fault class* each, whose arguments put them at (or just short of) the
point where they fault:

* ``size``      - buffer sizes and view offsets whose byte counts overflow 64 bits or cannot be
  allocated (``memref.alloc(%n)`` with n = 2^61, 2-D sizes whose product wraps, views that wrap);
* ``stack``     - huge static and dynamic ``memref.alloca``, and allocas inside loops;
* ``recursion`` - recursion to depths around the call-depth limit, with stack frames of up to 4 KiB;
* ``loop``      - ``scf.for`` whose induction variable would step past its type's maximum;
* ``dealloc``   - freeing twice, freeing an alloca, a view or an argument, use after free;
* ``alias``     - tensor functions called with ``out=`` arrays that share memory with an input.

``random_fault_program(seed, classes)`` is a pure function of its arguments.  The class is
``classes[seed % len(classes)]`` (so every class gets its share of a campaign); about half the
programs are *faulty* (most of their argument lists reach the fault), the rest run the same kind
of code on arguments that stay just inside the limits.  Programs are a few dozen lines: a fault
shows at a known op, and a reproducer needs little reducing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

FAULT_CLASSES = ("size", "stack", "recursion", "loop", "dealloc", "alias")
TRIALS = 3          # argument lists per program
FAULTY = 0.5        # the share of programs that are built to fault
MAX_DEPTH = 10_000  # the call-depth limit (``irc.interpreter.MAX_CALL_DEPTH``): depths are drawn around it

# Element types and their sizes in bytes (i1 is stored as a byte).
ELEMENTS = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f32": 4, "f64": 8}
INT_MAX = {"i8": 2**7 - 1, "i16": 2**15 - 1, "i32": 2**31 - 1, "i64": 2**63 - 1, "index": 2**63 - 1}
I64_MAX = 2**63 - 1

# The interpreter has no native stack to exhaust and is slow at depth 10,000 (about 0.6 s a run):
# stack and recursion programs run only compiled, not again after each pipeline.
JIT_CONFIGS = ["jit:O0", "jit:O3"]


@dataclass
class FaultProgram:
    """A program of one fault class, the argument lists to run it with, and (for ``alias``) the
    configurations that check it (None: the campaign's fault configurations)."""

    seed: int
    fault_class: str
    faulty: bool
    text: str
    arguments: list[list] = field(default_factory=list)
    configs: list[str] | None = None


def fault_class(seed: int, classes=FAULT_CLASSES) -> str:
    return classes[seed % len(classes)]


def random_fault_program(seed: int, classes=FAULT_CLASSES) -> FaultProgram:
    """Program ``seed`` of the fault campaign (see the module docstring)."""
    cls = fault_class(seed, tuple(classes))
    if cls not in _CLASSES:
        raise ValueError(f"unknown fault class {cls!r} (known: {', '.join(FAULT_CLASSES)})")
    rng = random.Random(f"irc-fault:{seed}:{cls}")
    faulty = rng.random() < FAULTY
    text, arguments, configs = _CLASSES[cls](_Writer(rng), faulty)
    if cls in ("stack", "recursion"):
        configs = list(JIT_CONFIGS)
    return FaultProgram(seed, cls, faulty, text, arguments, configs)


class _Writer:
    """Text and fresh names for one program."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.lines: list[str] = []
        self.counter = 0
        self.indent = 1

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def raw(self, line: str) -> None:
        self.lines.append(line)

    def const(self, value, t: str) -> str:
        name = self.fresh("c")
        if t == "i1":
            literal = "true" if value else "false"
        elif t in ("f32", "f64"):
            literal = repr(float(value))
        else:
            literal = str(int(value))
        self.emit(f"{name} = arith.constant {literal} : {t}")
        return name

    def value(self, t: str) -> str:
        """A small nonzero constant of element type ``t`` (what programs store)."""
        return self.const(True if t == "i1" else self.rng.randint(1, 100), t)

    def to_i64(self, v: str, t: str) -> str:
        """``v`` as an i64 (for a function's digest result)."""
        name = self.fresh()
        if t == "i64":
            return v
        if t == "index":
            self.emit(f"{name} = arith.index_cast {v} : index to i64")
        elif t in ("f32", "f64"):
            self.emit(f"{name} = arith.fptosi {v} : {t} to i64")
        else:
            self.emit(f"{name} = arith.extui {v} : {t} to i64")
        return name

    def begin_if(self, flag: str, results: str = "") -> None:
        self.emit(f"{results}scf.if {flag} {{" if not results else f"{results}")
        self.indent += 1

    def end(self, text: str = "}") -> None:
        self.indent -= 1
        self.emit(text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _memref(shape, element: str) -> str:
    return "memref<" + "".join(("?" if d is None else str(d)) + "x" for d in shape) + element + ">"


def _flags(rng: random.Random, faulty: bool, n: int = 1) -> list[bool]:
    """Flags that select the faulting path: mostly on in a faulty program, off in the others."""
    return [faulty and rng.random() < 0.75 for _ in range(n)]


# -- size: byte counts that overflow, or cannot exist --------------------------------------------

def _wrapping_counts(elem_bytes: int, rank: int) -> list[tuple[int, ...]]:
    """Sizes whose byte count is 2^64 + small: 0 or a few bytes once wrapped to 64 bits."""
    out = []
    for extra in (0, elem_bytes, 8 * elem_bytes):
        total = 2**64 + extra
        if rank == 1:
            if total % elem_bytes == 0 and total // elem_bytes <= I64_MAX:
                out.append((total // elem_bytes,))
        else:
            out.append((2**32, (2**32 + extra // elem_bytes) // elem_bytes or 1))
    if rank == 2:
        out.append((2**31, 2**33 // elem_bytes))
    return out or [(2**62,) if rank == 1 else (2**40, 2**40)]


def _huge_sizes(rng: random.Random, elem_bytes: int, rank: int) -> tuple[int, ...]:
    r = rng.random()
    if r < 0.55:
        return rng.choice(_wrapping_counts(elem_bytes, rank))
    if r < 0.7:
        return (I64_MAX,) * rank if rank == 1 else (I64_MAX, 2)
    if r < 0.8:
        return (-1,) * rank if rank == 1 else (3, -1)            # negative sizes
    if r < 0.9:
        return (2**62,) if rank == 1 else (2**31, 2**31)          # too big, no exact wrap
    return (2**36 // elem_bytes,) if rank == 1 else (2**18, 2**18 // elem_bytes)  # only out of memory


def _size_program(w: _Writer, faulty: bool):
    rng = w.rng
    variant = rng.choices(["alloc", "view", "static"], [6, 3, 1])[0]
    element = rng.choice(list(ELEMENTS))
    e = ELEMENTS[element]
    if variant == "view":
        return _view_program(w, faulty, element, e)
    if variant == "static":
        return _static_size_program(w, faulty, element)
    rank = rng.choice([1, 1, 2])
    op = "alloca" if rng.random() < 0.25 else "alloc"
    shape = [None] * rank
    t = _memref(shape, element)
    params = [f"%n{d}: index" for d in range(rank)] + [f"%k{d}: index" for d in range(rank)]
    w.raw(f"func.func @main({', '.join(params)}) -> i64 {{")
    m = w.fresh("m")
    w.emit(f"{m} = memref.{op}({', '.join(f'%n{d}' for d in range(rank))}) : {t}")
    v = w.value(element)
    idx = ", ".join(f"%k{d}" for d in range(rank))
    w.emit(f"memref.store {v}, {m}[{idx}] : {t}")
    r = w.fresh()
    w.emit(f"{r} = memref.load {m}[{idx}] : {t}")
    if op == "alloc":
        w.emit(f"memref.dealloc {m} : {t}")
    w.emit(f"func.return {w.to_i64(r, element)} : i64")
    w.raw("}")
    arguments = []
    for _ in range(TRIALS):
        if faulty and rng.random() < 0.8:
            sizes = _huge_sizes(rng, e, rank)
            last = rng.random() < 0.5
            ks = [max(0, s - 1) if last else rng.choice([0, 1, 4096]) for s in sizes]
        else:
            sizes = tuple(rng.randint(0, 16) for _ in range(rank))
            ks = [rng.choice([0, max(0, s - 1)]) if rng.random() < 0.9 else s for s in sizes]  # s: a bounds fault
        arguments.append([*sizes, *ks])
    return w.text(), arguments, None


def _view_program(w: _Writer, faulty: bool, element: str, e: int):
    rng = w.rng
    source_bytes = rng.choice([8, 16, 64])
    src_t = _memref([source_bytes], "i8")
    t = _memref([None], element)
    w.raw("func.func @main(%off: index, %n: index, %k: index) -> i64 {")
    src = w.fresh("m")
    op = rng.choice(["alloc", "alloca"])
    w.emit(f"{src} = memref.{op}() : {src_t}")
    v = w.fresh("view")
    w.emit(f"{v} = memref.view {src}[%off][%n] : {src_t} to {t}")
    x = w.value(element)
    w.emit(f"memref.store {x}, {v}[%k] : {t}")
    r = w.fresh()
    w.emit(f"{r} = memref.load {v}[%k] : {t}")
    if op == "alloc":
        w.emit(f"memref.dealloc {src} : {src_t}")
    w.emit(f"func.return {w.to_i64(r, element)} : i64")
    w.raw("}")
    arguments = []
    for _ in range(TRIALS):
        if faulty and rng.random() < 0.8:
            choice = rng.random()
            if choice < 0.5:   # the view's byte count wraps to (almost) nothing
                n = rng.choice(_wrapping_counts(e, 1))[0]
                off, k = rng.choice([0, e, source_bytes]), rng.choice([0, 1, 1000, n - 1])
            elif choice < 0.75:  # the offset plus the size wraps
                n, off, k = 1, I64_MAX - rng.choice([0, e, 7]), 0
            else:               # a misaligned offset, or one past the end
                n, off, k = 1, rng.choice([1, source_bytes - e + 1, source_bytes]), 0
        else:
            n = rng.randint(1, source_bytes // e)
            off = e * rng.randint(0, (source_bytes - n * e) // e)
            k = rng.choice([0, n - 1]) if rng.random() < 0.9 else n
        arguments.append([off, n, k])
    return w.text(), arguments, None


def _static_size_program(w: _Writer, faulty: bool, element: str):
    """A static shape at the edge of the largest byte size a type may have (2^63 - 1: one past it is a
    verifier error, tests/filecheck/parse-invalid.ir), allocated on one branch: no machine has it."""
    rng = w.rng
    elem_bytes = ELEMENTS[element]
    largest = ((1 << 63) - 1) // elem_bytes
    shape = rng.choice([(largest,), (largest // 2**31, 2**31), (2**20, largest // 2**40, 2**20)])
    t = _memref(shape, element)
    w.raw("func.func @main(%f: i1) -> i64 {")
    zero = w.const(0, "i64")
    r = w.fresh()
    w.emit(f"{r} = scf.if %f -> (i64) {{")
    w.indent += 1
    m = w.fresh("m")
    w.emit(f"{m} = memref.{rng.choice(['alloc', 'alloca'])}() : {t}")
    i = w.const(rng.choice([0, 1, 1000]), "index")
    w.emit(f"memref.store {w.value(element)}, {m}[{', '.join([i] * len(shape))}] : {t}")
    w.emit(f"scf.yield {w.const(1, 'i64')} : i64")
    w.end("} else {")
    w.indent += 1
    w.emit(f"scf.yield {zero} : i64")
    w.end()
    w.emit(f"func.return {r} : i64")
    w.raw("}")
    return w.text(), [[f] for f in _flags(rng, faulty, TRIALS)], None


# -- stack: allocas too big for any stack ---------------------------------------------------------

def _stack_program(w: _Writer, faulty: bool):
    rng = w.rng
    variant = rng.choice(["static", "dynamic", "loop", "cfg-loop"])
    element = rng.choice(["i8", "i32", "i64", "f64"])
    e = ELEMENTS[element]
    if variant == "static":
        count = (rng.choice([2**24, 2**26, 2**28]) if faulty else rng.choice([16, 1024, 8192])) // e
        t = _memref([count], element)
        w.raw("func.func @big(%k: index) -> i64 {")
        m = w.fresh("m")
        w.emit(f"{m} = memref.alloca() : {t}")
        w.emit(f"memref.store {w.value(element)}, {m}[%k] : {t}")
        r = w.fresh()
        w.emit(f"{r} = memref.load {m}[%k] : {t}")
        w.emit(f"func.return {w.to_i64(r, element)} : i64")
        w.raw("}")
        w.raw("func.func @main(%f: i1, %k: index) -> i64 {")
        zero = w.const(0, "i64")
        out = w.fresh()
        w.emit(f"{out} = scf.if %f -> (i64) {{")
        w.indent += 1
        c = w.fresh()
        w.emit(f"{c} = func.call @big(%k) : (index) -> i64")
        w.emit(f"scf.yield {c} : i64")
        w.end("} else {")
        w.indent += 1
        w.emit(f"scf.yield {zero} : i64")
        w.end()
        w.emit(f"func.return {out} : i64")
        w.raw("}")
        arguments = [[f, rng.choice([0, count - 1])] for f in _flags(rng, faulty, TRIALS)]
        if not faulty:
            arguments = [[rng.random() < 0.7, rng.choice([0, count - 1])] for _ in range(TRIALS)]
        return w.text(), arguments, None
    if variant == "dynamic":
        t = _memref([None], element)
        w.raw("func.func @main(%n: index, %k: index) -> i64 {")
        m = w.fresh("m")
        w.emit(f"{m} = memref.alloca(%n) : {t}")
        w.emit(f"memref.store {w.value(element)}, {m}[%k] : {t}")
        r = w.fresh()
        w.emit(f"{r} = memref.load {m}[%k] : {t}")
        w.emit(f"func.return {w.to_i64(r, element)} : i64")
        w.raw("}")
        arguments = []
        for _ in range(TRIALS):
            if faulty and rng.random() < 0.8:
                n = rng.choice([2**24, 2**27, 2**30, 2**33]) // e
            else:
                n = rng.choice([1, 16, 4096 // e])
            arguments.append([n, rng.choice([0, n - 1])])
        return w.text(), arguments, None
    # An alloca in a loop body: a fresh buffer each trip, the stack freed only at the return.
    dynamic = rng.random() < 0.5
    count = rng.choice([1024, 8192]) // e
    t = _memref([None] if dynamic else [count], element)
    w.raw("func.func @main(%trips: index, %n: index) -> i64 {")
    zero, one = w.const(0, "index"), w.const(0, "i64")
    step = w.const(1, "index")
    acc = w.fresh("acc")
    res = w.fresh("r")
    size = "%n" if dynamic else ""
    if variant == "loop":
        w.emit(f"{res} = scf.for %i = {zero} to %trips step {step} iter_args({acc} = {one}) -> (i64) {{")
        w.indent += 1
        m = w.fresh("m")
        w.emit(f"{m} = memref.alloca({size}) : {t}")
        w.emit(f"memref.store {w.value(element)}, {m}[{zero}] : {t}")
        x = w.fresh()
        w.emit(f"{x} = memref.load {m}[{zero}] : {t}")
        s = w.fresh()
        w.emit(f"{s} = arith.addi {acc}, {w.to_i64(x, element)} : i64")
        w.emit(f"scf.yield {s} : i64")
        w.end()
        w.emit(f"func.return {res} : i64")
    else:
        i, nxt, more = w.fresh("i"), w.fresh(), w.fresh()
        w.emit("cf.br ^head")
        w.raw("^head:")
        w.emit(f"{i} = cf.phi [{zero}, ^entry], [{nxt}, ^body] : index")
        w.emit(f"{acc} = cf.phi [{one}, ^entry], [{res}, ^body] : i64")
        w.emit(f"{more} = arith.cmpi ult, {i}, %trips : index")
        w.emit(f"cf.cond_br {more}, ^body, ^exit")
        w.raw("^body:")
        m = w.fresh("m")
        w.emit(f"{m} = memref.alloca({size}) : {t}")
        w.emit(f"memref.store {w.value(element)}, {m}[{zero}] : {t}")
        x = w.fresh()
        w.emit(f"{x} = memref.load {m}[{zero}] : {t}")
        w.emit(f"{res} = arith.addi {acc}, {w.to_i64(x, element)} : i64")
        w.emit(f"{nxt} = arith.addi {i}, {step} : index")
        w.emit("cf.br ^head")
        w.raw("^exit:")
        w.emit(f"func.return {acc} : i64")
    w.raw("}")
    w.lines.insert(1, "^entry:")
    arguments = []
    for _ in range(TRIALS):
        if faulty and rng.random() < 0.8:
            trips = rng.choice([1500, 3000]) if count * e >= 8192 else rng.choice([10000, 12000])
        else:
            trips = rng.choice([0, 1, 3, 50])
        arguments.append([trips, count])
    return w.text(), arguments, None


# -- recursion: around the call-depth limit, with frames of up to 4 KiB --------------------------

def _recursion_program(w: _Writer, faulty: bool):
    rng = w.rng
    frame = rng.choice([0, 64, 1024, 4096])
    mutual = rng.random() < 0.3
    branch = rng.choice(["scf", "cfg"])
    names = ["@even", "@odd"] if mutual else ["@rec", "@rec"]
    for k, (name, callee) in enumerate(zip(names, reversed(names))):
        if mutual is False and k == 1:
            break
        w.raw(f"func.func {name}(%d: i64) -> i64 {{")
        w.raw("^entry:")
        zero, one = w.const(0, "i64"), w.const(1, "i64")
        if frame:
            t = _memref([frame // 8], "i64")
            m = w.fresh("frame")
            w.emit(f"{m} = memref.alloca() : {t}")
            mask = w.const(frame // 8 - 1, "i64")
            low, last = w.fresh(), w.fresh()
            w.emit(f"{low} = arith.andi %d, {mask} : i64")
            w.emit(f"{last} = arith.index_cast {low} : i64 to index")
            w.emit(f"memref.store %d, {m}[{last}] : {t}")
        done = w.fresh()
        w.emit(f"{done} = arith.cmpi sle, %d, {zero} : i64")
        below = w.fresh()
        if branch == "scf":
            r = w.fresh()
            w.emit(f"{r} = scf.if {done} -> (i64) {{")
            w.indent += 1
            w.emit(f"scf.yield {zero} : i64")
            w.end("} else {")
            w.indent += 1
            w.emit(f"{below} = arith.subi %d, {one} : i64")
            c = w.fresh()
            w.emit(f"{c} = func.call {callee}({below}) : (i64) -> i64")
            s = w.fresh()
            w.emit(f"{s} = arith.addi {c}, {one} : i64")
            w.emit(f"scf.yield {s} : i64")
            w.end()
            result = r
        else:
            w.emit(f"cf.cond_br {done}, ^base, ^step")
            w.raw("^step:")
            w.emit(f"{below} = arith.subi %d, {one} : i64")
            c = w.fresh()
            w.emit(f"{c} = func.call {callee}({below}) : (i64) -> i64")
            s = w.fresh()
            w.emit(f"{s} = arith.addi {c}, {one} : i64")
            w.emit("cf.br ^join")
            w.raw("^base:")
            w.emit("cf.br ^join")
            w.raw("^join:")
            result = w.fresh("p")
            w.emit(f"{result} = cf.phi [{s}, ^step], [{zero}, ^base] : i64")
        if frame:
            x = w.fresh()
            w.emit(f"{x} = memref.load {m}[{last}] : {t}")
            y = w.fresh()
            w.emit(f"{y} = arith.xori {result}, {x} : i64")
            result = y
        w.emit(f"func.return {result} : i64")
        w.raw("}")
    w.raw("func.func @main(%d: i64) -> i64 {")
    r = w.fresh()
    w.emit(f"{r} = func.call {names[0]}(%d) : (i64) -> i64")
    w.emit(f"func.return {r} : i64")
    w.raw("}")
    arguments = []
    for t in range(TRIALS):
        if faulty and t == 0:
            # At the limit (the depth counts @main and the base case), or far past it for small frames.
            d = MAX_DEPTH + rng.choice([-4, -3, -2, -1, 0, 1]) if rng.random() < 0.6 else \
                rng.choice([MAX_DEPTH * 2, 9000, 5000])
        else:
            d = rng.choice([0, 1, 3, 30, 300])
        arguments.append([d])
    return w.text(), arguments, None


# -- loop: scf.for at the edge of its type --------------------------------------------------------

def _loop_program(w: _Writer, faulty: bool):
    rng = w.rng
    t = rng.choice(["i8", "i16", "i32", "i64", "index"])
    top = INT_MAX[t]
    w.raw(f"func.func @main(%lb: {t}, %ub: {t}, %step: {t}) -> (i64, {t}) {{")
    # Bounds from the arguments, or constants (which folds and the lowering see), or a constant step.
    mode = rng.choices(["arguments", "constants", "step"], [6, 2.5, 1.5])[0]
    zero, one = w.const(0, "i64"), w.const(1, "i64")
    init = w.const(rng.randint(0, 9), t)
    lb0, ub0, st0 = _loop_bounds(rng, top, faulty and rng.random() < 0.8)
    operands = ["%lb", "%ub", "%step"]
    if mode == "constants":
        operands[:2] = [w.const(v, t) for v in (lb0, ub0)]
    if mode != "arguments" and st0 > 0:  # a constant step <= 0 is a verifier error: pass it instead
        operands[2] = w.const(st0, t)
    r = w.fresh("r")
    ty = "" if t == "index" else f" : {t}"
    w.emit(f"{r}:2 = scf.for %i = {operands[0]} to {operands[1]} step {operands[2]} "
           f"iter_args(%n = {zero}, %s = {init}) -> (i64, {t}){ty} {{")
    w.indent += 1
    n2, s2 = w.fresh(), w.fresh()
    w.emit(f"{n2} = arith.addi %n, {one} : i64")
    w.emit(f"{s2} = arith.{rng.choice(['addi', 'xori'])} %s, %i : {t}")
    w.emit(f"scf.yield {n2}, {s2} : i64, {t}")
    w.end()
    w.emit(f"func.return {r}#0, {r}#1 : i64, {t}")
    w.raw("}")
    if mode == "constants":
        return w.text(), [[lb0, ub0, st0]], None
    arguments = []
    for _ in range(TRIALS):
        at_edge = faulty and rng.random() < 0.8
        arguments.append(list(_loop_bounds(rng, top, at_edge, st0 if mode == "step" else None)))
    return w.text(), arguments, None


def _loop_bounds(rng: random.Random, top: int, at_edge: bool, step: int | None = None) -> tuple[int, int, int]:
    """(lb, ub, step) for a handful of trips: near the type's maximum, so that the step past the
    last trip overflows, or (not ``at_edge``) in the middle of the range.  Rarely a step <= 0."""
    if step is not None and step <= 0:
        return 0, 4, step
    if step is None and at_edge and rng.random() < 0.1:
        return 0, 4, rng.choice([0, -1])
    if step is None:
        step = rng.choice([1, 2, 3, 7, 100, top // 3, top // 2, top]) if at_edge else rng.choice([1, 2, 3])
    trips = rng.randint(1, 4)
    ub = top - rng.choice([0, 0, 1, 2]) if at_edge else rng.randint(-20, 20)
    lb = max(-top - 1, ub - step * trips + rng.randint(0, step - 1))
    return lb, ub, step


# -- dealloc: what only memref.alloc made may be freed, once ----------------------------------------

DEALLOC_PATTERNS = ("double", "alloca", "view", "argument", "use", "view-use", "callee", "loop")


def _dealloc_program(w: _Writer, faulty: bool):
    rng = w.rng
    pattern = rng.choice(DEALLOC_PATTERNS)
    n = rng.choice([1, 4, 8])
    dynamic = rng.random() < 0.3
    t = _memref([None] if dynamic else [n], "i64")
    arg_t = _memref([None], "i64")
    sizes = "%size" if dynamic else ""
    if pattern == "callee":
        w.raw(f"func.func @release(%b: {t}) {{")
        w.emit(f"memref.dealloc %b : {t}")
        w.emit("func.return")
        w.raw("}")
    w.raw(f"func.func @main(%f: i1, %k: index, %size: index, %x: {arg_t}) -> i64 {{")
    m = w.fresh("m")
    kind = "alloca" if pattern == "alloca" else "alloc"
    w.emit(f"{m} = memref.{kind}({sizes}) : {t}")
    zero = w.const(0, "index")
    w.emit(f"memref.store {w.value('i64')}, {m}[{zero}] : {t}")
    first = w.fresh()
    w.emit(f"{first} = memref.load {m}[{zero}] : {t}")
    result = first
    if pattern == "double":
        w.emit(f"memref.dealloc {m} : {t}")
        w.begin_if("%f")
        w.emit(f"memref.dealloc {m} : {t}")
        w.end()
    elif pattern == "alloca":
        w.begin_if("%f")
        w.emit(f"memref.dealloc {m} : {t}")
        w.end()
    elif pattern == "view":
        raw_t = _memref([64], "i8")
        src = w.fresh("m")
        w.emit(f"{src} = memref.alloc() : {raw_t}")
        v = w.fresh("view")
        off = w.const(rng.choice([0, 8]), "index")
        w.emit(f"{v} = memref.view {src}[{off}][] : {raw_t} to {_memref([4], 'i64')}")
        w.begin_if("%f")
        w.emit(f"memref.dealloc {v} : {_memref([4], 'i64')}")
        w.end()
        w.emit(f"memref.dealloc {src} : {raw_t}")
        w.emit(f"memref.dealloc {m} : {t}")
    elif pattern == "argument":
        w.begin_if("%f")
        w.emit(f"memref.dealloc %x : {arg_t}")
        w.end()
        w.emit(f"memref.dealloc {m} : {t}")
    elif pattern in ("use", "callee"):
        if pattern == "callee":
            w.emit(f"func.call @release({m}) : ({t}) -> ()")
        else:
            w.emit(f"memref.dealloc {m} : {t}")
        result = w.fresh()
        w.emit(f"{result} = scf.if %f -> (i64) {{")
        w.indent += 1
        use = rng.choice(["load", "store", "copy", "view"])
        if use == "load":
            x = w.fresh()
            w.emit(f"{x} = memref.load {m}[%k] : {t}")
        elif use == "store":
            w.emit(f"memref.store {w.value('i64')}, {m}[%k] : {t}")
            x = w.const(1, "i64")
        elif use == "copy":
            other = w.fresh("m")
            w.emit(f"{other} = memref.alloca({sizes}) : {t}")
            w.emit(f"memref.copy {m}, {other} : {t} to {t}")
            x = w.fresh()
            w.emit(f"{x} = memref.load {other}[%k] : {t}")
        else:
            v = w.fresh("view")
            w.emit(f"{v} = memref.view {m}[{zero}][] : {t} to {_memref([1], 'i64')}")
            x = w.fresh()
            w.emit(f"{x} = memref.load {v}[{zero}] : {_memref([1], 'i64')}")
        w.emit(f"scf.yield {x} : i64")
        w.end("} else {")
        w.indent += 1
        w.emit(f"scf.yield {first} : i64")
        w.end()
    elif pattern == "view-use":
        v = w.fresh("view")
        w.emit(f"{v} = memref.view {m}[{zero}][] : {t} to {_memref([1], 'i64')}")
        w.emit(f"memref.dealloc {m} : {t}")
        result = w.fresh()
        w.emit(f"{result} = scf.if %f -> (i64) {{")
        w.indent += 1
        x = w.fresh()
        w.emit(f"{x} = memref.load {v}[{zero}] : {_memref([1], 'i64')}")
        w.emit(f"scf.yield {x} : i64")
        w.end("} else {")
        w.indent += 1
        w.emit(f"scf.yield {first} : i64")
        w.end()
    else:  # loop: a buffer made and freed each trip, and (on the flag) the outer one freed in the loop
        one, trips = w.const(1, "index"), w.const(rng.randint(2, 4), "index")
        w.emit(f"scf.for %i = {zero} to {trips} step {one} {{")
        w.indent += 1
        inner = w.fresh("m")
        w.emit(f"{inner} = memref.alloc({sizes}) : {t}")
        w.emit(f"memref.store {w.value('i64')}, {inner}[{zero}] : {t}")
        w.emit(f"memref.dealloc {inner} : {t}")
        w.begin_if("%f")
        w.emit(f"memref.dealloc {m} : {t}")
        w.end()
        w.end()
        keep = w.fresh()
        w.emit(f"{keep} = arith.xori %f, {w.const(True, 'i1')} : i1")
        w.begin_if(keep)
        w.emit(f"memref.dealloc {m} : {t}")
        w.end()
    w.emit(f"func.return {result} : i64")
    w.raw("}")
    arguments = []
    for f in _flags(rng, faulty, TRIALS):
        k = rng.choice([0, n - 1]) if not dynamic else 0
        arguments.append([f, k, n, np.arange(rng.randint(1, 6), dtype=np.int64)])
    return w.text(), arguments, None


# -- alias: out= arrays that share memory with an input -------------------------------------------

def _alias_program(w: _Writer, faulty: bool):
    """A random tensor graph (``tensor_programs``), checked with each result written into an array
    that overlaps an input (faulty) or into fresh arrays; the spec is in the configuration name."""
    from .tensor_programs import random_tensor_program

    rng = w.rng
    program = random_tensor_program(rng.randrange(2**31), rng.choice([3, 5, 8]))
    text = program.text.replace("func.func @f(", "func.func @main(", 1)
    arguments = [program.arguments(rng.randrange(2**31)) for _ in range(TRIALS)]
    return text, arguments, [alias_config(program, rng, faulty)]


def alias_config(program, rng: random.Random, faulty: bool) -> str:
    """``tensor:out=...``: for each tensor result, ``new`` (a fresh array) or ``xI+B`` (the bytes of
    input I from byte B on, when the result fits there)."""
    from .tensor_programs import result_shapes

    nbytes = [int(np.prod(shape)) * (4 if elem == "f32" else 8) for shape, elem in program.params]
    item = 4 if program.params[0][1] == "f32" else 8
    specs = []
    for shape in result_shapes(program):
        size = int(np.prod(shape)) * item
        fits = [i for i, b in enumerate(nbytes) if b >= size]
        if faulty and fits and size and rng.random() < 0.8:
            i = rng.choice(fits)
            offset = item * rng.randint(0, (nbytes[i] - size) // item) if rng.random() < 0.3 else 0
            specs.append(f"x{i}+{offset}")
        else:
            specs.append("new")
    return "tensor:out=" + ",".join(specs)


_CLASSES = {"size": _size_program, "stack": _stack_program, "recursion": _recursion_program,
            "loop": _loop_program, "dealloc": _dealloc_program, "alias": _alias_program}
