"""Random valid, terminating, UB-free irc programs, as text.

Differential testing (run a program before and after a pass, compare) only
finds bugs if the program's meaning is fixed: so every generated program

* parses and verifies (SSA dominance, phis with one incoming value per
  predecessor, single-block scf regions, calls that match their callee);
* terminates quickly: every loop (CFG loops with phis, ``scf.for``,
  ``scf.while``) is bounded by a counter with at most a handful of trips, loops
  nest at most twice, and calls go only to functions defined earlier (no
  recursion) and only outside loops;
* has no undefined behaviour for *any* arguments: divisors are forced nonzero
  (and away from -1 for signed division), shift amounts are masked below the
  bit width, floats are clamped into range before ``fptosi``/``fptoui``,
  memref indices are reduced modulo the dimension (``arith.remui``) or are
  constants below it, and every buffer is fully initialised before it is read.

The generator is seeded and size-controlled: ``random_program(seed, size)`` is
a pure function of its arguments, and ``size`` bounds the number of generated
items (single ops, or compound constructs whose bodies share the budget) in
``@main``.  ``main_signature(seed)`` and ``random_arguments(seed, trial)``
give ``@main``'s parameter types and argument lists drawn for them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np

from irc.attributes import format_float
from irc.types import f32, f64

INT_TYPES = ("i1", "i8", "i16", "i32", "i64", "index")
FLOAT_TYPES = ("f32", "f64")
WIDTH = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64, "f32": 32, "f64": 64}
_FLOAT_TYPE = {"f32": f32, "f64": f64}
_NP_FLOAT = {"f32": np.float32, "f64": np.float64}

INT_BINARY = ("addi", "subi", "muli", "andi", "ori", "xori", "maxsi", "minsi", "maxui", "minui")
SIGNED_DIV = ("divsi", "remsi", "floordivsi", "ceildivsi")
UNSIGNED_DIV = ("divui", "remui", "ceildivui")
SHIFTS = ("shli", "shrsi", "shrui")
FLOAT_BINARY = ("addf", "subf", "mulf", "divf", "remf", "maximumf", "minimumf", "maxnumf", "minnumf")
MATH_UNARY = ("exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sqrt", "rsqrt", "sin", "cos", "erf",
              "absf", "floor", "ceil")
CMPI_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
CMPF_PREDICATES = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
                   "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true")

MAX_LOOP_DEPTH = 2
MAX_TRIPS = 4


@dataclass(frozen=True)
class Features:
    """Which constructs the generator may use (all on by default).

    Turning features off narrows a failing case down, or keeps a program
    within what a backend supports.
    """

    floats: bool = True
    math: bool = True
    casts: bool = True
    cfg: bool = True
    scf: bool = True
    memref: bool = True
    calls: bool = True


ALL_FEATURES = Features()


def random_program(seed: int, size: int = 24, features: Features = ALL_FEATURES,
                   baked_arguments: list | None = None) -> str:
    """The text of a module with helper functions and ``@main(main_signature(seed))``.

    With ``baked_arguments``, ``@main`` takes no parameters and instead defines
    them as constants with those values: the same program, but one that
    constant folding can evaluate completely - a harder test for folds.
    """
    rng = random.Random(f"irc-program:{seed}:{size}")
    scalar_types = _scalar_types(features)
    functions: list[_Signature] = []
    texts: list[str] = []
    n_helpers = rng.randint(0, 2) if features.calls else 0
    for k in range(n_helpers):
        params = [rng.choice(scalar_types) for _ in range(rng.randint(1, 3))]
        results = [rng.choice(scalar_types) for _ in range(rng.randint(1, 2))]
        sig = _Signature(f"f{k}", params, results)
        texts.append(_FunctionWriter(rng, features, sig, list(functions), max(4, size // 2)).write())
        functions.append(sig)
    main_results = [rng.choice(scalar_types) for _ in range(rng.randint(1, 3))] + ["i64"]  # the last: a digest
    main = _Signature("main", main_signature(seed, features), main_results)
    texts.append(_FunctionWriter(rng, features, main, functions, size, baked_arguments).write())
    return "\n".join(texts)


def main_signature(seed: int, features: Features = ALL_FEATURES) -> list[str]:
    """The parameter types of ``@main`` in ``random_program(seed, ...)`` (any size)."""
    rng = random.Random(f"irc-signature:{seed}")
    types = _scalar_types(features)
    return [rng.choice(types) for _ in range(rng.randint(1, 4))]


def random_arguments(seed: int, trial: int = 0, features: Features = ALL_FEATURES) -> list:
    """Arguments for ``@main`` of program ``seed``: edge values (0, -1, MIN, MAX, NaN, inf...) and random ones."""
    rng = random.Random(f"irc-arguments:{seed}:{trial}")
    return [_random_scalar(rng, t) for t in main_signature(seed, features)]


def _scalar_types(features: Features) -> list[str]:
    return list(INT_TYPES) + (list(FLOAT_TYPES) if features.floats else [])


def _random_scalar(rng: random.Random, t: str):
    if t == "i1":
        return rng.random() < 0.5
    if t in FLOAT_TYPES:
        special = [0.0, -0.0, 1.0, -1.0, 0.5, float("inf"), float("-inf"), float("nan"), 1e-40, 3.5e38, 1e300]
        if rng.random() < 0.3:
            return rng.choice(special)
        return float(_NP_FLOAT[t](rng.uniform(-1e3, 1e3) * 10.0 ** rng.randint(-3, 3)))
    return _random_int(rng, WIDTH[t])


def _literal(value, t: str) -> str:
    """``value`` as the operand text of ``arith.constant`` of type ``t`` (exact, NaN and inf as hex)."""
    if t == "i1":
        return "true" if value else "false"
    if t in FLOAT_TYPES:
        with np.errstate(over="ignore"):  # 1e300 as an f32 is inf, as intended
            value = float(_NP_FLOAT[t](value))
        return f"{format_float(value, _FLOAT_TYPE[t])} : {t}"
    return f"{int(value)} : {t}"


def _fit(value: int, t: str):
    """``value`` as a constant of type ``t``: i1 takes booleans, other widths wrap."""
    if t == "i1":
        return bool(value & 1)
    w = WIDTH[t]
    value &= (1 << w) - 1
    return value - (1 << w) if value >> (w - 1) else value


def _random_int(rng: random.Random, w: int) -> int:
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    r = rng.random()
    if r < 0.35:
        return rng.choice([0, 1, -1, 2, lo, hi, lo + 1, hi - 1])
    if r < 0.7:
        return max(lo, min(hi, rng.randint(-20, 20)))
    return rng.randint(lo, hi)


@dataclass
class _Signature:
    name: str
    params: list[str]
    results: list[str]

    @property
    def type_text(self) -> str:
        return f"({', '.join(self.params)}) -> ({', '.join(self.results)})"


@dataclass
class _Buffer:
    """A memref in scope: its SSA name, element type and dims (an int, or the SSA name of a dynamic size)."""

    name: str
    element: str
    dims: list = field(default_factory=list)

    @property
    def type(self) -> str:
        shape = "x".join("?" if isinstance(d, str) else str(d) for d in self.dims)
        return f"memref<{shape}x{self.element}>"


class _FunctionWriter:
    """Writes one function, keeping track of what is in scope where.

    ``scopes`` mirrors dominance: a value defined in a diamond's arm, a loop body
    or an scf region is popped with it; what survives the construct is its
    results (phis in the join or loop header, scf results).  Blocks are only
    created in the function's own region, since scf regions must stay single blocks.
    """

    def __init__(self, rng: random.Random, features: Features, sig: _Signature, callees: list[_Signature],
                 size: int, baked_arguments: list | None = None):
        self.rng = rng
        self.baked = baked_arguments
        self.features = features
        self.sig = sig
        self.callees = callees
        self.size = size
        self.lines: list[str] = []
        self.indent = 1
        self.counter = 0
        self.scopes: list[dict[str, list[str]]] = []
        self.buffers: list[list[_Buffer]] = []
        self.heap: list[_Buffer] = []  # memref.alloc'ed at the top level, freed before the return
        self.block = "^entry"
        self.region_depth = 0  # > 0 inside an scf region: no new blocks there
        self.loop_depth = 0
        self.types = _scalar_types(features)

    # -- text and names ----------------------------------------------------------------------

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def label(self) -> str:
        self.counter += 1
        return f"^bb{self.counter}"

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def start_block(self, label: str) -> None:
        self.lines.append("  " * (self.indent - 1) + label + ":")
        self.block = label

    # -- scopes ------------------------------------------------------------------------------

    def push(self) -> None:
        self.scopes.append({})
        self.buffers.append([])

    def pop(self) -> None:
        self.scopes.pop()
        self.buffers.pop()

    def define(self, t: str, name: str) -> str:
        self.scopes[-1].setdefault(t, []).append(name)
        return name

    def visible(self, t: str) -> list[str]:
        return [v for scope in self.scopes for v in scope.get(t, ())]

    def visible_buffers(self) -> list[_Buffer]:
        return [b for scope in self.buffers for b in scope]

    def some_type(self, choices=None) -> str:
        """A type, biased toward types that already have values (so ops chain instead of folding)."""
        choices = list(choices or self.types)
        live = [t for t in choices if self.visible(t)]
        if live and self.rng.random() < 0.75:
            return self.rng.choice(live)
        return self.rng.choice(choices)

    def pick(self, t: str) -> str:
        """A visible value of type ``t`` (usually), or a new constant."""
        values = self.visible(t)
        if values and self.rng.random() < 0.85:
            # Prefer recent values: longer dependency chains.
            return values[-1 - min(int(self.rng.expovariate(0.5)), len(values) - 1)]
        return self.constant(t)

    # -- constants ---------------------------------------------------------------------------

    def constant(self, t: str, value=None) -> str:
        name = self.fresh("c")
        if value is None:
            value = self.rng.random() < 0.5 if t == "i1" else _random_scalar(self.rng, t)
        self.emit(f"{name} = arith.constant {_literal(value, t)}")
        return self.define(t, name)

    # -- the body ----------------------------------------------------------------------------

    def write(self) -> str:
        sig = self.sig
        params = [f"%a{i}: {t}" for i, t in enumerate(sig.params)] if self.baked is None else []
        results = sig.results[0] if len(sig.results) == 1 else f"({', '.join(sig.results)})"
        self.lines.append(f"func.func @{sig.name}({', '.join(params)}) -> {results} {{")
        self.lines.append("^entry:")
        self.push()
        for i, t in enumerate(sig.params):
            if self.baked is not None:
                self.emit(f"%a{i} = arith.constant {_literal(self.baked[i], t)}")
            self.define(t, f"%a{i}")
        self.items(self.size)
        if sig.name == "main":
            returned = [self.pick(t) for t in sig.results[:-1]] + [self.digest()]
        else:
            returned = [self.pick(t) for t in sig.results]
        for buf in self.heap:
            self.emit(f"memref.dealloc {buf.name} : {buf.type}")
        self.emit(f"func.return {', '.join(returned)} : {', '.join(sig.results)}")
        self.pop()
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def items(self, budget: int) -> None:
        while budget > 0:
            budget -= self.item(budget)

    def item(self, budget: int) -> int:
        """Emit one item; return the budget it used (at least 1)."""
        f, rng = self.features, self.rng
        kinds = [("scalar", 10)]
        compound = budget >= 3
        if f.cfg and compound and self.region_depth == 0:
            kinds.append(("diamond", 2))
            if self.loop_depth < MAX_LOOP_DEPTH:
                kinds.append(("cfg_loop", 1.5))
        if f.scf and compound:
            kinds.append(("scf_if", 1.5))
            if self.loop_depth < MAX_LOOP_DEPTH:
                kinds += [("scf_for", 1.5), ("scf_while", 1)]
        if f.memref:
            kinds.append(("memref", 2 if self.visible_buffers() else 1))
        if f.calls and self.callees and self.loop_depth == 0:
            kinds.append(("call", 1))
        kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        if kind == "scalar":
            self.scalar()
            return 1
        inner = rng.randint(1, max(1, budget // 2))
        getattr(self, kind)(inner)
        return inner + 1

    # -- scalar ops --------------------------------------------------------------------------

    def scalar(self) -> str:
        f = self.features
        kinds = [("int_binary", 6), ("int_div", 2), ("shift", 2), ("cmpi", 2), ("select", 2), ("absi", 0.5)]
        if f.floats:
            kinds += [("float_binary", 5), ("negf", 0.5), ("cmpf", 2)]
            if f.math:
                kinds += [("math_unary", 2), ("powf", 0.5), ("fma", 0.5)]
        if f.casts:
            kinds.append(("cast", 3))
        kind = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        return getattr(self, "op_" + kind)()

    def special_operand(self, t: str) -> str:
        """Often an identity, absorbing or boundary constant (0, 1, -1, MIN, NaN...): what folds look for."""
        if self.rng.random() >= 0.3:
            return self.pick(t)
        if t in FLOAT_TYPES:
            return self.constant(t, self.rng.choice([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, math.inf, -math.inf, math.nan]))
        w = WIDTH[t]
        return self.constant(t, _fit(self.rng.choice([0, 1, -1, 2, 4, 3, -(1 << (w - 1)), (1 << (w - 1)) - 1]), t))

    def op_int_binary(self) -> str:
        t = self.some_type(INT_TYPES)
        op = self.rng.choice(INT_BINARY)
        a, b = self.pick(t), self.special_operand(t)
        if self.rng.random() < 0.2:
            a, b = b, a
        return self.binary(op, a, b, t)

    def binary(self, op: str, a: str, b: str, t: str, dialect: str = "arith") -> str:
        name = self.fresh()
        self.emit(f"{name} = {dialect}.{op} {a}, {b} : {t}")
        return self.define(t, name)

    def op_int_div(self) -> str:
        t = self.some_type(INT_TYPES)
        signed = t != "i1" and self.rng.random() < 0.5
        op = self.rng.choice(SIGNED_DIV if signed else UNSIGNED_DIV)
        a, b = self.pick(t), self.special_operand(t)
        return self.binary(op, a, self.safe_divisor(b, t, signed), t)

    def safe_divisor(self, b: str, t: str, signed: bool) -> str:
        """``b`` made nonzero (and, for signed division, never -1, so MIN / -1 cannot occur)."""
        if not signed and self.rng.random() < 0.5:
            return self.binary("ori", b, self.constant(t, True if t == "i1" else 1), t)
        zero = self.fresh()
        self.emit(f"{zero} = arith.cmpi eq, {b}, {self.constant(t, False if t == 'i1' else 0)} : {t}")
        one = self.constant(t, True if t == "i1" else 1)
        divisor = self.fresh()
        self.emit(f"{divisor} = arith.select {zero}, {one}, {b} : {t}")
        if not signed:
            return divisor
        minus_one = self.fresh()
        self.emit(f"{minus_one} = arith.cmpi eq, {divisor}, {self.constant(t, -1)} : {t}")
        safe = self.fresh()
        self.emit(f"{safe} = arith.select {minus_one}, {self.constant(t, 7)}, {divisor} : {t}")
        return safe

    def op_shift(self) -> str:
        t = self.some_type(INT_TYPES)
        a, b = self.pick(t), self.pick(t)
        if self.rng.random() < 0.7:
            mask = WIDTH[t] - 1
            amount = self.binary("andi", b, self.constant(t, bool(mask) if t == "i1" else mask), t)
        else:
            amount = self.binary("remui", b, self.constant(t, True if t == "i1" else WIDTH[t]), t)
        return self.binary(self.rng.choice(SHIFTS), a, amount, t)

    def op_cmpi(self) -> str:
        t = self.some_type(INT_TYPES)
        name = self.fresh()
        self.emit(f"{name} = arith.cmpi {self.rng.choice(CMPI_PREDICATES)}, {self.pick(t)}, {self.pick(t)} : {t}")
        return self.define("i1", name)

    def op_cmpf(self) -> str:
        t = self.some_type(FLOAT_TYPES)
        name = self.fresh()
        self.emit(f"{name} = arith.cmpf {self.rng.choice(CMPF_PREDICATES)}, {self.pick(t)}, {self.pick(t)} : {t}")
        return self.define("i1", name)

    def op_select(self) -> str:
        t = self.some_type()
        cond = self.pick("i1")
        name = self.fresh()
        self.emit(f"{name} = arith.select {cond}, {self.pick(t)}, {self.pick(t)} : {t}")
        return self.define(t, name)

    def op_absi(self) -> str:
        t = self.some_type(INT_TYPES)
        name = self.fresh()
        self.emit(f"{name} = math.absi {self.pick(t)} : {t}")
        return self.define(t, name)

    def op_float_binary(self) -> str:
        t = self.some_type(FLOAT_TYPES)
        a, b = self.pick(t), self.special_operand(t)
        if self.rng.random() < 0.2:
            a, b = b, a
        return self.binary(self.rng.choice(FLOAT_BINARY), a, b, t)

    def op_negf(self) -> str:
        t = self.some_type(FLOAT_TYPES)
        name = self.fresh()
        self.emit(f"{name} = arith.negf {self.pick(t)} : {t}")
        return self.define(t, name)

    def op_math_unary(self) -> str:
        t = self.some_type(FLOAT_TYPES)
        name = self.fresh()
        self.emit(f"{name} = math.{self.rng.choice(MATH_UNARY)} {self.pick(t)} : {t}")
        return self.define(t, name)

    def op_powf(self) -> str:
        t = self.some_type(FLOAT_TYPES)
        return self.binary("powf", self.pick(t), self.pick(t), t, dialect="math")

    def op_fma(self) -> str:
        t = self.some_type(FLOAT_TYPES)
        name = self.fresh()
        self.emit(f"{name} = math.fma {self.pick(t)}, {self.pick(t)}, {self.pick(t)} : {t}")
        return self.define(t, name)

    def op_cast(self) -> str:
        rng = self.rng
        ints = [t for t in INT_TYPES if t not in ("i1", "index")]
        options = ["ext", "trunc", "index_cast"]
        if self.features.floats:
            options += ["to_float", "to_float", "from_float", "from_float", "float_width", "bitcast"]
        kind = rng.choice(options)
        if kind in ("ext", "trunc"):
            src, dst = sorted(rng.sample(["i1", *ints], 2), key=lambda t: WIDTH[t])
            if kind == "trunc":
                src, dst = dst, src
            op = rng.choice(["extsi", "extui"]) if kind == "ext" else "trunci"
        elif kind == "index_cast":
            src, dst = rng.choice(INT_TYPES[:-1]), "index"
            if rng.random() < 0.5:
                src, dst = dst, src
            op = rng.choice(["index_cast", "index_castui"])
        elif kind == "to_float":
            src, dst = self.some_type(INT_TYPES), rng.choice(FLOAT_TYPES)
            op = rng.choice(["sitofp", "uitofp"])
        elif kind == "from_float":
            return self.float_to_int(self.some_type(FLOAT_TYPES), rng.choice(INT_TYPES[1:]))
        elif kind == "float_width":
            src, dst = rng.choice([("f32", "f64", "extf"), ("f64", "f32", "truncf")])[:2]
            op = "extf" if src == "f32" else "truncf"
        else:
            # int -> float only: float -> int would expose NaN payloads, which IEEE leaves unspecified.
            src, dst = rng.choice([("i32", "f32"), ("i64", "f64")])
            op = "bitcast"
        name = self.fresh()
        self.emit(f"{name} = arith.{op} {self.pick(src)} : {src} to {dst}")
        return self.define(dst, name)

    def float_to_int(self, src: str, dst: str) -> str:
        """``fptosi``/``fptoui`` of a value first clamped into the target's range (NaN goes to the low end)."""
        signed = self.rng.random() < 0.5
        w = WIDTH[dst]
        lo, limit = (-(2.0 ** (w - 1)), 2.0 ** (w - 1)) if signed else (0.0, 2.0 ** w)
        ftype = _NP_FLOAT[src]
        hi = float(np.nextafter(ftype(limit), ftype(0)))
        x = self.pick(src)
        low = self.binary("maxnumf", x, self.constant(src, lo), src)
        clamped = self.binary("minnumf", low, self.constant(src, hi), src)
        name = self.fresh()
        self.emit(f"{name} = arith.{'fptosi' if signed else 'fptoui'} {clamped} : {src} to {dst}")
        return self.define(dst, name)

    def digest(self, limit: int = 24) -> str:
        """An i64 hash of the function's top-level values, so that a wrong value anywhere shows in a result.

        Floats enter by their bits, with every NaN first replaced by one NaN (IEEE leaves payloads open).
        """
        values = [(t, v) for t in self.types for v in self.scopes[0].get(t, ())]
        values.sort(key=lambda tv: int("".join(ch for ch in tv[1] if ch.isdigit()) or 0))
        h = self.constant("i64", 0)
        prime = self.constant("i64", 1000003)
        for t, v in values[-limit:]:
            if t in FLOAT_TYPES:
                # The NaN is replaced after the bitcast: a float select(isnan(x), NaN, x) may
                # legally become x (any NaN will do), and then x's own payload shows in the bits.
                nan = self.fresh()
                self.emit(f"{nan} = arith.cmpf uno, {v}, {v} : {t}")
                it = "i32" if t == "f32" else "i64"
                bits = self.fresh()
                self.emit(f"{bits} = arith.bitcast {v} : {t} to {it}")
                quiet = 0x7FC00000 if t == "f32" else 0x7FF8000000000000
                canonical = self.fresh()
                self.emit(f"{canonical} = arith.select {nan}, {self.constant(it, quiet)}, {bits} : {it}")
                v, t = canonical, it
            if t != "i64":
                wide = self.fresh()
                cast = "index_castui" if t == "index" else "extui"
                self.emit(f"{wide} = arith.{cast} {v} : {t} to i64")
                v = wide
            h = self.binary("xori", self.binary("muli", h, prime, "i64"), v, "i64")
        return h

    # -- control flow: CFG -------------------------------------------------------------------

    def merge_types(self) -> list[str]:
        return [self.some_type() for _ in range(self.rng.randint(1, 3))]

    def arm(self, budget: int, types: list[str]) -> tuple[str, list[str]]:
        """Emit items in a fresh scope; return the block it ends in and one value per type."""
        self.push()
        self.items(budget)
        values = [self.pick(t) for t in types]
        self.pop()
        return self.block, values

    def diamond(self, budget: int) -> None:
        """``cond_br`` to two arms (or one: a triangle) that join with phis."""
        cond = self.pick("i1")
        types = self.merge_types()
        then_label, join = self.label(), self.label()
        triangle = self.rng.random() < 0.3
        else_label = join if triangle else self.label()
        entry_values = [self.pick(t) for t in types] if triangle else []
        entry_block = self.block
        self.emit(f"cf.cond_br {cond}, {then_label}, {else_label}")
        self.start_block(then_label)
        incoming = [self.arm(budget // 2 if not triangle else budget, types)]
        self.emit(f"cf.br {join}")
        if triangle:
            incoming.append((entry_block, entry_values))
        else:
            self.start_block(else_label)
            incoming.append(self.arm(budget - budget // 2, types))
            self.emit(f"cf.br {join}")
        self.start_block(join)
        for i, t in enumerate(types):
            name = self.fresh("p")
            edges = ", ".join(f"[{values[i]}, {block}]" for block, values in incoming)
            self.emit(f"{name} = cf.phi {edges} : {t}")
            self.define(t, name)

    def trip_bound(self, t: str) -> str:
        """A loop bound in [0, MAX_TRIPS]: a constant, or a value masked down to it."""
        if self.rng.random() < 0.4:
            return self.constant(t, self.rng.randint(0, MAX_TRIPS))
        return self.binary("andi", self.pick(t), self.constant(t, MAX_TRIPS - 1), t)

    def cfg_loop(self, budget: int) -> None:
        """A natural loop: header phis for a counter and carried values, a body, a latch back to the header."""
        t = self.rng.choice(["i32", "i64", "index"])
        bound = self.trip_bound(t)
        zero, one = self.constant(t, 0), self.constant(t, 1)
        carried = self.merge_types()
        inits = [self.pick(c) for c in carried]
        head, body, exit_ = self.label(), self.label(), self.label()
        pre = self.block
        self.emit(f"cf.br {head}")
        self.start_block(head)
        counter = self.fresh("i")
        phis = [self.fresh("p") for _ in carried]
        header_at = len(self.lines)
        self.lines.extend([""] * (1 + len(carried)))  # the phis, filled in once the latch is known
        more = self.fresh()
        self.emit(f"{more} = arith.cmpi slt, {counter}, {bound} : {t}")
        self.emit(f"cf.cond_br {more}, {body}, {exit_}")
        self.start_block(body)
        self.loop_depth += 1
        self.push()
        self.define(t, counter)
        for c, p in zip(carried, phis, strict=True):
            self.define(c, p)
        self.items(budget)
        nexts = [self.pick(c) for c in carried]
        step = self.binary("addi", counter, one, t)
        self.pop()
        self.loop_depth -= 1
        latch = self.block
        self.emit(f"cf.br {head}")
        pad = "  " * self.indent
        self.lines[header_at] = f"{pad}{counter} = cf.phi [{zero}, {pre}], [{step}, {latch}] : {t}"
        for k, (c, p, init, nxt) in enumerate(zip(carried, phis, inits, nexts, strict=True)):
            self.lines[header_at + 1 + k] = f"{pad}{p} = cf.phi [{init}, {pre}], [{nxt}, {latch}] : {c}"
        self.start_block(exit_)
        self.define(t, counter)
        for c, p in zip(carried, phis, strict=True):
            self.define(c, p)

    # -- control flow: scf -------------------------------------------------------------------

    def results_prefix(self, types: list[str]) -> tuple[str, list[str]]:
        """``%r:2 = `` and the names of the results (``%r#0``...)."""
        if not types:
            return "", []
        name = self.fresh("r")
        if len(types) == 1:
            return f"{name} = ", [name]
        return f"{name}:{len(types)} = ", [f"{name}#{i}" for i in range(len(types))]

    def region(self, budget: int, args: list[tuple[str, str]], yield_types: list[str], terminator: str = "scf.yield",
               head: str = "") -> list[str]:
        """Emit a single-block region body; return the values it yields."""
        self.indent += 1
        self.region_depth += 1
        self.push()
        for name, t in args:
            self.define(t, name)
        if head:
            self.emit(head)
        self.items(budget)
        values = [self.pick(t) for t in yield_types]
        self.pop()
        self.region_depth -= 1
        if terminator == "scf.yield" and not values:
            self.indent -= 1
            return values
        self.emit(f"{terminator} {', '.join(values)} : {', '.join(yield_types)}" if values else terminator)
        self.indent -= 1
        return values

    def scf_if(self, budget: int) -> None:
        types = self.merge_types() if self.rng.random() < 0.8 else []
        cond = self.pick("i1")
        prefix, results = self.results_prefix(types)
        arrow = f" -> ({', '.join(types)})" if types else ""
        self.emit(f"{prefix}scf.if {cond}{arrow} {{")
        self.region(budget // 2, [], types)
        if types or self.rng.random() < 0.5:
            self.emit("} else {")
            self.region(budget - budget // 2, [], types)
        self.emit("}")
        for t, r in zip(types, results, strict=True):
            self.define(t, r)

    def scf_for(self, budget: int) -> None:
        t = self.rng.choice(["index", "index", "i32", "i64"])
        lb = self.constant(t, self.rng.randint(0, 1))
        ub = self.trip_bound(t)
        step = self.constant(t, self.rng.randint(1, 2))
        carried = self.merge_types() if self.rng.random() < 0.8 else []
        inits = [self.pick(c) for c in carried]
        prefix, results = self.results_prefix(carried)
        iv = self.fresh("iv")
        args = [(self.fresh("acc"), c) for c in carried]
        text = f"{prefix}scf.for {iv} = {lb} to {ub} step {step}"
        if carried:
            pairs = ", ".join(f"{a} = {v}" for (a, _), v in zip(args, inits, strict=True))
            text += f" iter_args({pairs}) -> ({', '.join(carried)})"
        if t != "index":
            text += f" : {t}"
        self.emit(text + " {")
        self.loop_depth += 1
        self.region(budget, [(iv, t), *args], carried)
        self.loop_depth -= 1
        self.emit("}")
        for c, r in zip(carried, results, strict=True):
            self.define(c, r)

    def scf_while(self, budget: int) -> None:
        """A while loop whose first carried value counts the trips up to a bound."""
        t = self.rng.choice(["index", "i32", "i64"])
        bound = self.trip_bound(t)
        one = self.constant(t, 1)
        carried = [t, *self.merge_types()]
        inits = [self.constant(t, 0), *[self.pick(c) for c in carried[1:]]]
        prefix, results = self.results_prefix(carried)
        before = [(self.fresh("w"), c) for c in carried]
        after = [(self.fresh("w"), c) for c in carried]
        pairs = ", ".join(f"{a} = {v}" for (a, _), v in zip(before, inits, strict=True))
        types = ", ".join(carried)
        self.emit(f"{prefix}scf.while ({pairs}) : ({types}) -> ({types}) {{")
        self.loop_depth += 1
        more = self.fresh()
        # The before region forwards its counter unchanged and may compute the other values anew.
        self.indent += 1
        self.region_depth += 1
        self.push()
        for name, c in before:
            self.define(c, name)
        self.emit(f"{more} = arith.cmpi slt, {before[0][0]}, {bound} : {t}")
        self.items(budget // 3)
        forwarded = [before[0][0], *[self.pick(c) for c in carried[1:]]]
        self.pop()
        self.region_depth -= 1
        self.emit(f"scf.condition({more}) {', '.join(forwarded)} : {types}")
        self.indent -= 1
        self.emit("} do {")
        self.emit(f"^bb0({', '.join(f'{a}: {c}' for a, c in after)}):")
        self.indent += 1
        self.region_depth += 1
        self.push()
        for name, c in after:
            self.define(c, name)
        self.items(budget - budget // 3)
        nexts = [self.binary("addi", after[0][0], one, t), *[self.pick(c) for c in carried[1:]]]
        self.pop()
        self.region_depth -= 1
        self.emit(f"scf.yield {', '.join(nexts)} : {types}")
        self.indent -= 1
        self.loop_depth -= 1
        self.emit("}")
        for c, r in zip(carried, results, strict=True):
            self.define(c, r)

    # -- memrefs -----------------------------------------------------------------------------

    def memref(self, budget: int) -> None:
        buffers = self.visible_buffers()
        r = self.rng.random()
        if not buffers or r < 0.25:
            self.alloc()
        elif r < 0.6:
            self.load(self.rng.choice(buffers))
        elif r < 0.9:
            self.store(self.rng.choice(buffers))
        elif any(self.vectorisable(b) for b in buffers) and self.rng.random() < 0.6:
            self.vector_update(self.rng.choice([b for b in buffers if self.vectorisable(b)]))
        else:
            self.dim_or_copy(buffers)

    @staticmethod
    def vectorisable(buf: _Buffer) -> bool:
        """A float buffer whose rows have a static length: a vector of its row stays in bounds."""
        return buf.element in FLOAT_TYPES and isinstance(buf.dims[-1], int)

    def vector_update(self, buf: _Buffer) -> None:
        """A run of a row through vector ops (vector.load, broadcast or from_elements, sometimes a
        vector.shuffle of the two, lane-wise addf/subf/mulf/fma, vector.store): the interpreter's
        numpy lanes against LLVM's vectors."""
        rng, elem = self.rng, buf.element
        row = buf.dims[-1]
        size = rng.randint(1, row)
        idx = self.indices(buf)[:-1] + [self.constant("index", rng.randint(0, row - size))]
        vt = f"vector<{size}x{elem}>"
        loaded = self.fresh()
        self.emit(f"{loaded} = vector.load {buf.name}[{', '.join(idx)}] : {buf.type}, {vt}")
        other = self.fresh()
        if rng.random() < 0.7:
            self.emit(f"{other} = vector.broadcast {self.special_operand(elem)} : {elem} to {vt}")
        else:
            self.emit(f"{other} = vector.from_elements {', '.join(self.pick(elem) for _ in range(size))} : {vt}")
        if rng.random() < 0.3:  # lanes of both, in any order, any number of times
            shuffled = self.fresh()
            mask = ", ".join(str(rng.randrange(2 * size)) for _ in range(size))
            self.emit(f"{shuffled} = vector.shuffle {loaded}, {other} [{mask}] : {vt}, {vt}")
            other = shuffled
        result = self.fresh()
        op = rng.choice(["addf", "subf", "mulf", "fma"])
        if op == "fma":
            self.emit(f"{result} = math.fma {other}, {loaded}, {other} : {vt}")
        else:
            self.emit(f"{result} = arith.{op} {loaded}, {other} : {vt}")
        self.emit(f"vector.store {result}, {buf.name}[{', '.join(idx)}] : {buf.type}, {vt}")

    def size_value(self) -> str:
        """A dynamic size in [1, 8]."""
        x = self.index_value()
        masked = self.binary("andi", x, self.constant("index", 7), "index")
        return self.binary("addi", masked, self.constant("index", 1), "index")

    def index_value(self) -> str:
        """Some index value: an index in scope, or an integer cast to index."""
        if self.visible("index") and self.rng.random() < 0.6:
            return self.pick("index")
        src = self.some_type(INT_TYPES[:-1])
        name = self.fresh()
        self.emit(f"{name} = arith.{self.rng.choice(['index_cast', 'index_castui'])} {self.pick(src)} : "
                  f"{src} to index")
        return self.define("index", name)

    def alloc(self) -> None:
        element = self.some_type()
        rank = self.rng.choice([1, 1, 2])
        dynamic = self.features.scf and self.rng.random() < 0.4
        dims: list = [self.rng.randint(1, 4) for _ in range(rank)]
        if dynamic:
            dims[self.rng.randrange(rank)] = self.size_value()
        buf = _Buffer(self.fresh("m"), element, dims)
        top_level = len(self.scopes) == 1
        op = "alloc" if top_level and self.rng.random() < 0.6 else "alloca"
        sizes = ", ".join(d for d in dims if isinstance(d, str))
        self.emit(f"{buf.name} = memref.{op}({sizes}) : {buf.type}")
        if op == "alloc":
            self.heap.append(buf)
        self.initialise(buf)
        self.buffers[-1].append(buf)

    def initialise(self, buf: _Buffer) -> None:
        """Store to every element, so no load ever reads memory that was never written."""
        value = self.pick(buf.element)
        if all(isinstance(d, int) for d in buf.dims):
            for flat in range(int(np.prod(buf.dims))):
                idx = np.unravel_index(flat, buf.dims)
                indices = [self.constant("index", int(i)) for i in idx]
                if self.rng.random() < 0.5:
                    value = self.pick(buf.element)
                self.emit(f"memref.store {value}, {buf.name}[{', '.join(indices)}] : {buf.type}")
            return
        zero, one = self.constant("index", 0), self.constant("index", 1)
        ivs = [self.fresh("iv") for _ in buf.dims]
        ubs = [d if isinstance(d, str) else self.constant("index", d) for d in buf.dims]
        for iv, ub in zip(ivs, ubs, strict=True):
            self.emit(f"scf.for {iv} = {zero} to {ub} step {one} {{")
            self.indent += 1
        self.emit(f"memref.store {value}, {buf.name}[{', '.join(ivs)}] : {buf.type}")
        for _ in buf.dims:
            self.indent -= 1
            self.emit("}")

    def indices(self, buf: _Buffer) -> list[str]:
        out = []
        for d in buf.dims:
            if self.rng.random() < 0.3:
                k = self.rng.randrange(d) if isinstance(d, int) else 0
                out.append(self.constant("index", k))
                continue
            size = d if isinstance(d, str) else self.constant("index", d)
            out.append(self.binary("remui", self.index_value(), size, "index"))
        return out

    def load(self, buf: _Buffer) -> None:
        idx = self.indices(buf)
        name = self.fresh()
        self.emit(f"{name} = memref.load {buf.name}[{', '.join(idx)}] : {buf.type}")
        self.define(buf.element, name)

    def store(self, buf: _Buffer) -> None:
        value = self.pick(buf.element)
        idx = self.indices(buf)
        self.emit(f"memref.store {value}, {buf.name}[{', '.join(idx)}] : {buf.type}")

    def dim_or_copy(self, buffers: list[_Buffer]) -> None:
        buf = self.rng.choice(buffers)
        same = [b for b in buffers if b is not buf and b.type == buf.type and all(isinstance(d, int) for d in b.dims)]
        if same:
            self.emit(f"memref.copy {self.rng.choice(same).name}, {buf.name} : {buf.type} to {buf.type}")
            return
        name = self.fresh()
        self.emit(f"{name} = memref.dim {buf.name}, {self.constant('index', self.rng.randrange(len(buf.dims)))} : "
                  f"{buf.type}")
        self.define("index", name)

    # -- calls -------------------------------------------------------------------------------

    def call(self, budget: int) -> None:
        callee = self.rng.choice(self.callees)
        args = [self.pick(t) for t in callee.params]
        prefix, results = self.results_prefix(callee.results)
        self.emit(f"{prefix}func.call @{callee.name}({', '.join(args)}) : {callee.type_text}")
        for t, r in zip(callee.results, results, strict=True):
            self.define(t, r)

