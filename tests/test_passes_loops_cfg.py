"""licm, inline, simplify-cfg and mem2reg against the interpreter: a pass may not change any outcome.

Three sources of programs: the random generator of ``irc.testing`` (scf and
CFG code, calls, buffers); a small generator here of imperative programs that
keep variables in scalar stack slots (``memref.alloca() : memref<i64>``) and
branch and loop over them, which is what mem2reg, simplify-cfg and CFG licm
are for; and hand-written programs for the cases those miss (faulting ops in
loops that may not run, recursion, multi-block callees).  Each program runs
before and after the pass, and after ``scf-to-cf`` plus the pass, with results
compared bit for bit (NaN equal to NaN) or as the same runtime error.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from irc.passes import PassManager

import irc
from irc.testing import outcome, random_arguments, random_program
from irc.testing.strategies import cases

PASSES = ("licm", "inline", "simplify-cfg", "mem2reg")
PIPELINES = PASSES + tuple(f"scf-to-cf,{p}" for p in PASSES) + (
    "inline,scf-to-cf,mem2reg,simplify-cfg,licm", "mem2reg,simplify-cfg,licm,simplify-cfg")


def run_pipeline(text: str, pipeline: str):
    """Parse, run ``pipeline`` (verifying after each pass) and return (module, statistics by key)."""
    module = irc.parse(text, "<test>")
    manager = PassManager.parse(pipeline)
    manager.run(module)
    stats: dict[str, int] = {}
    for _, s in manager.statistics:
        for key, n in s.counters.items():
            stats[key] = stats.get(key, 0) + n
    return module, stats


def assert_same_outcomes(text: str, pipeline: str, argument_lists, entry: str = "main") -> dict:
    before = irc.parse(text, "<test>")
    expected = [outcome(before, entry, args) for args in argument_lists]
    after, stats = run_pipeline(text, pipeline)
    got = [outcome(after, entry, args) for args in argument_lists]
    assert got == expected, f"{pipeline} changed the outcome:\n{after}"
    return stats


# -- the irc.testing generator ----------------------------------------------------------------


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("seed", range(6))
def test_generated_programs(pipeline, seed):
    text = random_program(seed, 24)
    assert_same_outcomes(text, pipeline, [random_arguments(seed, t) for t in range(2)])


@settings(max_examples=15, deadline=None)
@given(cases(max_size=24))
def test_generated_programs_any_seed(case):
    for pipeline in ("licm,inline,simplify-cfg,mem2reg", "scf-to-cf,mem2reg,licm,simplify-cfg,inline"):
        assert_same_outcomes(case.text, pipeline, case.arguments)


# -- imperative programs over scalar slots -----------------------------------------------------


class SlotProgram:
    """``@main(%a: i64, %b: i64, %x: f64) -> (i64, i64, f64)`` keeping its variables in stack slots.

    Integer slots are ``memref<i64>``, the float slot ``memref<1xf64>``; the body
    is random stores, diamonds, triangles and counted loops (at most three trips),
    a slot allocated inside a loop (zero again on every trip), an scf.for that
    reads a slot from its region (which keeps that slot in memory), and integer
    division by ``%b`` (which faults when ``%b`` is zero, but only if it runs).
    """

    INT_SLOTS = ("s0", "s1", "s2")

    def __init__(self, seed: int, size: int = 12):
        self.rng = random.Random(f"slots:{seed}")
        self.budget = size
        self.lines: list[str] = []
        self.n = 0
        self.scf_slots: set[str] = set()  # slots used inside an scf.for region: never promoted

    def fresh(self, prefix: str = "v") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def label(self, name: str) -> None:
        self.lines.append(f"^{name}:")

    def text(self) -> str:
        self.label("entry")
        self.emit("%c0 = arith.constant 0 : index")
        self.emit("%c0.step = arith.constant 1 : index")
        self.emit("%one = arith.constant 1 : i64")
        for slot in self.INT_SLOTS:
            self.emit(f"%{slot} = memref.alloca() : memref<i64>")
        self.emit("%f = memref.alloca() : memref<1xf64>")
        if self.rng.random() < 0.7:
            self.emit("memref.store %a, %s0[] : memref<i64>")
        self.statements(depth=0)
        results = [self.load(s) for s in ("s0", "s1")]
        fv = self.fresh()
        self.emit(f"%{fv} = memref.load %f[%c0] : memref<1xf64>")
        body = "\n".join(self.lines)
        return (f"func.func @main(%a: i64, %b: i64, %x: f64) -> (i64, i64, f64) {{\n{body}\n"
                f"  func.return %{results[0]}, %{results[1]}, %{fv} : i64, i64, f64\n}}\n")

    def load(self, slot: str) -> str:
        v = self.fresh()
        self.emit(f"%{v} = memref.load %{slot}[] : memref<i64>")
        return v

    def int_expr(self) -> str:
        kind = self.rng.choice(["slot", "slot", "arg", "invariant", "op"])
        if kind == "slot":
            return self.load(self.rng.choice(self.INT_SLOTS))
        if kind == "arg":
            return self.rng.choice(["a", "b", "one"])
        v = self.fresh()
        if kind == "invariant":  # loop-invariant: only arguments and constants
            self.emit(f"%{v} = arith.muli %a, %b : i64")
            return v
        op = self.rng.choice(["addi", "subi", "muli", "xori", "maxsi", "divsi"])
        lhs = self.load(self.rng.choice(self.INT_SLOTS))
        rhs = "b" if op == "divsi" else self.rng.choice(["a", "one", lhs])
        self.emit(f"%{v} = arith.{op} %{lhs}, %{rhs} : i64")
        return v

    def statements(self, depth: int) -> None:
        for _ in range(self.rng.randint(1, 4)):
            if self.budget <= 0:
                return
            self.budget -= 1
            choice = self.rng.random()
            if choice < 0.35 or depth >= 2:
                self.store()
            elif choice < 0.6:
                self.branch(depth)
            elif choice < 0.85:
                self.loop(depth)
            else:
                self.scf_loop()

    def store(self) -> None:
        if self.rng.random() < 0.25:
            old = self.fresh()
            new = self.fresh()
            self.emit(f"%{old} = memref.load %f[%c0] : memref<1xf64>")
            self.emit(f"%{new} = arith.addf %{old}, %x : f64")
            self.emit(f"memref.store %{new}, %f[%c0] : memref<1xf64>")
            return
        value = self.int_expr()
        self.emit(f"memref.store %{value}, %{self.rng.choice(self.INT_SLOTS)}[] : memref<i64>")

    def branch(self, depth: int) -> None:
        lhs, rhs = self.int_expr(), self.int_expr()
        cond = self.fresh("c")
        self.emit(f"%{cond} = arith.cmpi {self.rng.choice(['slt', 'eq', 'ne', 'sge'])}, %{lhs}, %{rhs} : i64")
        then, other, join = self.fresh("then"), self.fresh("else"), self.fresh("join")
        triangle = self.rng.random() < 0.3
        self.emit(f"cf.cond_br %{cond}, ^{then}, ^{join if triangle else other}")
        self.label(then)
        self.statements(depth + 1)
        self.emit(f"cf.br ^{join}")
        if not triangle:
            self.label(other)
            self.statements(depth + 1)
            self.emit(f"cf.br ^{join}")
        self.label(join)

    def loop(self, depth: int) -> None:
        counter = self.fresh("n")
        self.emit(f"%{counter} = memref.alloca() : memref<i64>")
        trips = self.fresh()
        self.emit(f"%{trips}.m = arith.constant 3 : i64")
        self.emit(f"%{trips} = arith.andi %a, %{trips}.m : i64")
        head, body, exit_ = self.fresh("head"), self.fresh("body"), self.fresh("exit")
        self.emit(f"cf.br ^{head}")
        self.label(head)
        i, more = self.fresh(), self.fresh("c")
        self.emit(f"%{i} = memref.load %{counter}[] : memref<i64>")
        self.emit(f"%{more} = arith.cmpi slt, %{i}, %{trips} : i64")
        self.emit(f"cf.cond_br %{more}, ^{body}, ^{exit_}")
        self.label(body)
        if self.rng.random() < 0.3:  # a slot allocated on every trip starts at zero each time
            local, seen = self.fresh("t"), self.fresh()
            self.emit(f"%{local} = memref.alloca() : memref<i64>")
            self.emit(f"%{seen} = memref.load %{local}[] : memref<i64>")
            self.emit(f"memref.store %a, %{local}[] : memref<i64>")
            self.emit(f"memref.store %{seen}, %{self.rng.choice(self.INT_SLOTS)}[] : memref<i64>")
        self.statements(depth + 1)
        i2, i3 = self.fresh(), self.fresh()
        self.emit(f"%{i2} = memref.load %{counter}[] : memref<i64>")
        self.emit(f"%{i3} = arith.addi %{i2}, %one : i64")
        self.emit(f"memref.store %{i3}, %{counter}[] : memref<i64>")
        self.emit(f"cf.br ^{head}")
        self.label(exit_)

    def scf_loop(self) -> None:
        slot = self.rng.choice(self.INT_SLOTS)
        ub, iv, v, w = self.fresh(), self.fresh("i"), self.fresh(), self.fresh()
        self.emit(f"%{ub} = arith.constant 2 : index")
        self.emit(f"scf.for %{iv} = %c0 to %{ub} step %c0.step {{")
        self.emit(f"  %{v} = memref.load %{slot}[] : memref<i64>")
        self.emit(f"  %{w} = arith.addi %{v}, %a : i64")
        self.emit(f"  memref.store %{w}, %{slot}[] : memref<i64>")
        self.emit("}")
        self.scf_slots.add(slot)


SLOT_ARGUMENTS = [(3, 5, 1.5), (-2, 0, -0.0), (7, -1, float("nan")), (0, 9, float("inf"))]
SLOT_PIPELINES = ("mem2reg", "mem2reg,simplify-cfg", "mem2reg,licm", "licm", "simplify-cfg",
                  "mem2reg,simplify-cfg,licm,simplify-cfg", "scf-to-cf,mem2reg,simplify-cfg")


@pytest.mark.parametrize("seed", range(25))
def test_slot_programs(seed):
    text = SlotProgram(seed).text()
    for pipeline in SLOT_PIPELINES:
        assert_same_outcomes(text, pipeline, SLOT_ARGUMENTS)


def test_slot_programs_exercise_the_passes():
    """The generator above is only a test if the passes actually rewrite its programs."""
    totals: dict[str, int] = {}
    for seed in range(25):
        _, stats = run_pipeline(SlotProgram(seed).text(), "mem2reg,simplify-cfg,licm")
        for key, n in stats.items():
            totals[key] = totals.get(key, 0) + n
    for key in ("slots-promoted", "phis-inserted", "diamonds-to-select", "blocks-merged", "ops-hoisted"):
        assert totals.get(key, 0) > 0, f"no '{key}' in {totals}"


def test_mem2reg_promotes_exactly_the_slots_local_to_the_cfg():
    checked = 0
    for seed in range(25):
        program = SlotProgram(seed)
        module, _ = run_pipeline(program.text(), "mem2reg")
        left = {op.results[0].name_hint for op in module.walk() if op.name == "memref.alloca"}
        assert left == program.scf_slots, seed
        assert not any(op.name in ("memref.load", "memref.store") and op.operands[-1].type is not None
                       and op.parent_op.name == "func.func" and op.operands[0 if op.name == "memref.load" else 1]
                       .name_hint not in program.scf_slots for op in module.walk())
        checked += bool(program.scf_slots)
    assert checked, "no program kept a slot in memory"


@pytest.mark.parametrize("type_", ["i1", "i8", "i16", "i32", "i64", "index", "f16", "bf16", "f32", "f64"])
def test_mem2reg_zero_of_every_element_type(type_):
    """A load before any store reads the alloca's zero, bit for bit (+0.0, not -0.0)."""
    text = f"""
func.func @main(%c: i1, %v: {type_}) -> ({type_}, {type_}) {{
^entry:
  %c0 = arith.constant 0 : index
  %a = memref.alloca() : memref<{type_}>
  %b = memref.alloca() : memref<1x{type_}>
  %first = memref.load %a[] : memref<{type_}>
  cf.cond_br %c, ^set, ^join
^set:
  memref.store %v, %a[] : memref<{type_}>
  memref.store %first, %b[%c0] : memref<1x{type_}>
  cf.br ^join
^join:
  %x = memref.load %a[] : memref<{type_}>
  %y = memref.load %b[%c0] : memref<1x{type_}>
  func.return %x, %y : {type_}, {type_}
}}
"""
    value = 1 if type_ == "i1" else -0.0 if type_.startswith(("f", "bf")) else -3
    stats = assert_same_outcomes(text, "mem2reg", [(0, value), (1, value)])
    assert stats == {"slots-promoted": 2, "phis-inserted": 2}


# -- hand-written programs ---------------------------------------------------------------------

FAULT_IN_ZERO_TRIP_LOOP = """
func.func @main(%n: i64, %d: i64) -> i64 {
^entry:
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %sixty_four = arith.constant 64 : i64
  cf.br ^head
^head:
  %i = cf.phi [%zero, ^entry], [%i1, ^body] : i64
  %acc = cf.phi [%zero, ^entry], [%acc2, ^body] : i64
  %more = arith.cmpi slt, %i, %n : i64
  cf.cond_br %more, ^body, ^exit
^body:
  %q = arith.divsi %n, %d : i64
  %s = arith.shli %one, %sixty_four : i64
  %inv = arith.muli %n, %d : i64
  %acc1 = arith.addi %acc, %q : i64
  %acc2 = arith.addi %acc1, %inv : i64
  %i1 = arith.addi %i, %one : i64
  cf.br ^head
^exit:
  func.return %acc : i64
}
"""

SCF_FAULT_IN_ZERO_TRIP_LOOP = """
func.func @main(%n: i64, %d: i64) -> i64 {
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %r = scf.for %i = %zero to %n step %one iter_args(%acc = %zero) -> (i64) : i64 {
    %q = arith.remsi %n, %d : i64
    %f = arith.sitofp %d : i64 to f64
    %g = arith.fptosi %f : f64 to i8
    %h = arith.extsi %g : i8 to i64
    %acc1 = arith.addi %acc, %q : i64
    %acc2 = arith.addi %acc1, %h : i64
    scf.yield %acc2 : i64
  }
  func.return %r : i64
}
"""


@pytest.mark.parametrize("text", [FAULT_IN_ZERO_TRIP_LOOP, SCF_FAULT_IN_ZERO_TRIP_LOOP])
@pytest.mark.parametrize("pipeline", ["licm", "scf-to-cf,licm", "licm,simplify-cfg"])
def test_licm_keeps_faulting_ops_in_loops_that_may_not_run(text, pipeline):
    stats = assert_same_outcomes(text, pipeline, [(0, 0), (3, 0), (3, 2), (0, 5), (2, 1000)])
    assert stats.get("ops-hoisted", 0) >= 1  # the muli/sitofp moves; the faulting ops do not
    module, _ = run_pipeline(text, pipeline)
    assert outcome(module, "main", (0, 0)) == ("ok", 0)


INLINE_MODULE = """
func.func private @abs_diff(%a: i64, %b: i64) -> i64 {
^entry:
  %lt = arith.cmpi slt, %a, %b : i64
  cf.cond_br %lt, ^less, ^more
^less:
  %d1 = arith.subi %b, %a : i64
  func.return %d1 : i64
^more:
  %d2 = arith.subi %a, %b : i64
  func.return %d2 : i64
}

func.func private @twice(%x: i64) -> (i64, i64) {
  %y = arith.addi %x, %x : i64
  func.return %y, %x : i64, i64
}

func.func private @sum_to(%n: i64) -> i64 {
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %r = scf.for %i = %zero to %n step %one iter_args(%acc = %zero) -> (i64) : i64 {
    %t:2 = func.call @twice(%i) : (i64) -> (i64, i64)
    %acc1 = arith.addi %acc, %t#0 : i64
    scf.yield %acc1 : i64
  }
  func.return %r : i64
}

func.func private @fact(%n: i64) -> i64 {
^entry:
  %one = arith.constant 1 : i64
  %small = arith.cmpi sle, %n, %one : i64
  cf.cond_br %small, ^base, ^rec
^base:
  func.return %one : i64
^rec:
  %m = arith.subi %n, %one : i64
  %f = func.call @fact(%m) : (i64) -> i64
  %r = arith.muli %n, %f : i64
  func.return %r : i64
}

func.func private @ping(%n: i64) -> i64 {
^entry:
  %zero = arith.constant 0 : i64
  %done = arith.cmpi sle, %n, %zero : i64
  cf.cond_br %done, ^stop, ^go
^stop:
  func.return %zero : i64
^go:
  %r = func.call @pong(%n) : (i64) -> i64
  func.return %r : i64
}

func.func private @pong(%n: i64) -> i64 {
  %one = arith.constant 1 : i64
  %m = arith.subi %n, %one : i64
  %r = func.call @ping(%m) : (i64) -> i64
  %s = arith.addi %r, %one : i64
  func.return %s : i64
}

func.func @main(%a: i64, %b: i64) -> (i64, i64, i64, i64) {
  %d = func.call @abs_diff(%a, %b) : (i64, i64) -> i64
  %e = func.call @abs_diff(%b, %d) : (i64, i64) -> i64
  %s = func.call @sum_to(%e) : (i64) -> i64
  %three = arith.constant 3 : i64
  %k = arith.andi %a, %three : i64
  %f = func.call @fact(%k) : (i64) -> i64
  %p = func.call @ping(%k) : (i64) -> i64
  func.return %e, %s, %f, %p : i64, i64, i64, i64
}
"""


@pytest.mark.parametrize("pipeline", ["inline", "inline{max-size=0}", "inline,scf-to-cf,simplify-cfg",
                                      "scf-to-cf,inline,mem2reg,simplify-cfg,licm"])
def test_inline_semantics(pipeline):
    stats = assert_same_outcomes(INLINE_MODULE, pipeline, [(3, 5), (5, 3), (-4, 2), (7, 7), (2, -9)])
    assert stats.get("calls-inlined", 0) >= 2


def test_inline_never_inlines_recursion_and_erases_dead_private_functions():
    module, stats = run_pipeline(INLINE_MODULE, "inline")
    names = {f.sym_name for f in module.functions}
    assert names == {"fact", "ping", "pong", "main"}, names
    assert stats["functions-erased"] == 3
    calls = [op.callee for op in module.walk() if op.name == "func.call"]
    assert sorted(calls) == ["fact", "fact", "ping", "ping", "pong"]


def test_inline_size_limit_keeps_shared_large_callees():
    module, stats = run_pipeline(INLINE_MODULE, "inline{max-size=3}")
    names = {f.sym_name for f in module.functions}
    assert "abs_diff" in names  # 7 ops, two call sites: too big to copy twice
    assert "sum_to" not in names  # one call site: inlined whatever its size
    assert stats.get("calls-inlined") == 2  # @sum_to into @main, then @twice (3 ops) into it


SIMPLIFY_LOOPS = """
func.func @main(%n: i64, %x: f64) -> (i64, f64) {
^entry:
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %fz = arith.constant 0.0 : f64
  cf.br ^fwd
^fwd:
  cf.br ^head
^head:
  %i = cf.phi [%zero, ^fwd], [%i1, ^latch] : i64
  %acc = cf.phi [%fz, ^fwd], [%acc1, ^latch] : f64
  %more = arith.cmpi slt, %i, %n : i64
  cf.cond_br %more, ^body, ^exit
^body:
  %odd = arith.andi %i, %one : i64
  %is_odd = arith.cmpi ne, %odd, %zero : i64
  cf.cond_br %is_odd, ^add, ^sub
^add:
  %p = arith.addf %acc, %x : f64
  cf.br ^latch
^sub:
  %m = arith.subf %acc, %x : f64
  cf.br ^latch
^latch:
  %acc1 = cf.phi [%p, ^add], [%m, ^sub] : f64
  %i1 = arith.addi %i, %one : i64
  cf.br ^head
^exit:
  func.return %i, %acc : i64, f64
}
"""


def test_simplify_cfg_semantics_and_shape():
    stats = assert_same_outcomes(SIMPLIFY_LOOPS, "simplify-cfg",
                                 [(0, 1.0), (5, 0.1), (4, float("nan")), (3, -0.0), (1, float("inf"))])
    assert stats["diamonds-to-select"] == 1
    assert stats.get("forwarders-removed", 0) + stats.get("blocks-merged", 0) >= 2
    module, _ = run_pipeline(SIMPLIFY_LOOPS, "simplify-cfg")
    func = module.function("main")
    assert len(list(func.body.blocks)) == 4  # entry, head, body+latch, exit


FORWARDERS = """
func.func @main(%c: i1, %d: i1, %a: i64, %b: i64) -> (i64, i64) {
^entry:
  cf.cond_br %c, ^m1, ^m2
^m1:
  %x = arith.divsi %a, %b : i64
  cf.cond_br %d, ^fwd, ^join
^m2:
  %y = arith.divsi %b, %a : i64
  cf.cond_br %d, ^join, ^fwd
^fwd:
  cf.br ^join
^join:
  %r = cf.phi [%a, ^fwd], [%x, ^m1], [%y, ^m2] : i64
  cf.cond_br %c, ^fwd2, ^join2
^fwd2:
  cf.br ^join2
^join2:
  %s = cf.phi [%r, ^fwd2], [%b, ^join] : i64
  cf.cond_br %d, ^join3, ^fwd3
^fwd3:
  cf.br ^join3
^join3:
  %t = cf.phi [%s, ^join2], [%s, ^fwd3] : i64
  func.return %r, %t : i64, i64
}
"""


@pytest.mark.parametrize("pipeline", ["simplify-cfg", "licm,simplify-cfg", "mem2reg,simplify-cfg"])
def test_simplify_cfg_forwarders_keep_phi_entries_apart(pipeline):
    arguments = [(c, d, 6, -4) for c in (0, 1) for d in (0, 1)]
    stats = assert_same_outcomes(FORWARDERS, pipeline, arguments)
    assert stats.get("forwarders-removed", 0) + stats.get("diamonds-to-select", 0) >= 1


def test_passes_are_idempotent_on_their_output():
    for seed in range(8):
        text = SlotProgram(seed).text()
        for pipeline in ("mem2reg,simplify-cfg,licm", "simplify-cfg", "licm"):
            once, _ = run_pipeline(text, pipeline)
            twice, stats = run_pipeline(str(once), pipeline)
            assert str(twice) == str(once), pipeline
            assert not any(stats.values()), (pipeline, stats)
