"""Random programs with tensors in nested scf.if / scf.for / scf.while (carried tensors that
swap, closures, transposes, reductions, reshape views, matmuls): the bufferized and planned
loop level in the interpreter (which faults on a freed buffer), and compiled code, against
the interpreter on the tensor level."""

from __future__ import annotations

import random

import irc.passes
import numpy as np
import pytest

import irc
from irc.interpreter import interpret

T = "tensor<4x8xf32>"


class Gen:
    """A random function @f(%x, %y, %w8, %n, %p) of nested scf ops over 4x8 tensors."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.n = 0
        self.lines = []

    def fresh(self):
        self.n += 1
        return f"%v{self.n}"

    def emit(self, depth, line):
        self.lines.append("  " * (depth + 1) + line)

    def block(self, scope, depth, count):
        scope = list(scope)
        for _ in range(count):
            kind = self.r.choice(["un", "bin", "bin", "tr", "red", "mm", "for", "if", "while", "reshape"]
                                 if depth < 2 else ["un", "bin", "tr", "red", "mm", "reshape"])
            a, b = self.r.choice(scope), self.r.choice(scope)
            v = self.fresh()
            if kind == "un":
                op = self.r.choice(["math.tanh", "math.sin"])
                self.emit(depth, f"{v} = {op} {a} : {T}")
            elif kind == "bin":
                op = self.r.choice(["arith.addf", "arith.mulf", "arith.subf"])
                self.emit(depth, f"{v} = {op} {a}, {b} : {T}")
            elif kind == "tr":
                t = self.fresh()
                self.emit(depth, f"{t} = graph.transpose {a} {{perm = [1, 0]}} : {T} to tensor<8x4xf32>")
                u = self.fresh()
                self.emit(depth, f"{u} = math.sin {t} : tensor<8x4xf32>")
                self.emit(depth, f"{v} = graph.transpose {u} {{perm = [1, 0]}} : tensor<8x4xf32> to {T}")
            elif kind == "reshape":
                t = self.fresh()
                self.emit(depth, f"{t} = graph.reshape {a} : {T} to tensor<8x4xf32>")
                u = self.fresh()
                self.emit(depth, f"{u} = math.tanh {t} : tensor<8x4xf32>")
                self.emit(depth, f"{v} = graph.reshape {u} : tensor<8x4xf32> to {T}")
            elif kind == "red":
                m = self.fresh()
                self.emit(depth, f"{m} = graph.reduce_max {a} {{axes = [1], keepdims}} : {T} to tensor<4x1xf32>")
                e = self.fresh()
                self.emit(depth, f"{e} = graph.broadcast {m} : tensor<4x1xf32> to {T}")
                self.emit(depth, f"{v} = arith.subf {b}, {e} : {T}")
            elif kind == "mm":
                m = self.fresh()
                self.emit(depth, f"{m} = graph.matmul {a}, %w8 : ({T}, tensor<8x8xf32>) -> {T}")
                self.emit(depth, f"{v} = math.tanh {m} : {T}")
            elif kind == "for":
                k = self.r.randint(1, 3)
                inits = [self.r.choice(scope) for _ in range(k)]
                args = [self.fresh() for _ in range(k)]
                i = self.fresh()
                trips = self.r.choice(["%n", "%c0", "%c2"])
                res = [f"{v}#{j}" for j in range(k)] if k > 1 else [v]
                head = f"{v}:{k}" if k > 1 else v
                pairs = ", ".join(f"{a_} = {x}" for a_, x in zip(args, inits))
                self.emit(depth, f"{head} = scf.for {i} = %c0 to {trips} step %c1 iter_args({pairs}) -> ({', '.join([T] * k)}) {{")
                inner = self.block(scope + args, depth + 1, self.r.randint(0, 3))
                ys = [self.r.choice(inner[-3:] + args) for _ in range(k)]
                self.emit(depth + 1, f"scf.yield {', '.join(ys)} : {', '.join([T] * k)}")
                self.emit(depth, "}")
                scope += res
                continue
            elif kind == "if":
                k = self.r.randint(1, 2)
                c = self.fresh()
                self.emit(depth, f"{c} = arith.cmpf ogt, %p, %zero : f32" if self.r.random() < 0.5
                          else f"{c} = arith.cmpf olt, %p, %zero : f32")
                head = f"{v}:{k}" if k > 1 else v
                res = [f"{v}#{j}" for j in range(k)] if k > 1 else [v]
                self.emit(depth, f"{head} = scf.if {c} -> ({', '.join([T] * k)}) {{")
                inner = self.block(scope, depth + 1, self.r.randint(0, 2))
                self.emit(depth + 1, f"scf.yield {', '.join(self.r.choice(inner[-2:]) for _ in range(k))} : {', '.join([T] * k)}")
                self.emit(depth, "} else {")
                inner = self.block(scope, depth + 1, self.r.randint(0, 2))
                self.emit(depth + 1, f"scf.yield {', '.join(self.r.choice(inner[-2:]) for _ in range(k))} : {', '.join([T] * k)}")
                self.emit(depth, "}")
                scope += res
                continue
            elif kind == "while":
                k = self.r.randint(1, 2)
                inits = [self.r.choice(scope) for _ in range(k)]
                bargs = [self.fresh() for _ in range(k)]
                cnt, cnt2, cnt3 = self.fresh(), self.fresh(), self.fresh()
                res_head = f"{v}:{k + 1}"
                pairs = ", ".join(f"{a_} = {x}" for a_, x in zip(bargs, inits))
                self.emit(depth, f"{res_head} = scf.while ({pairs}, {cnt} = %c0) : ({', '.join([T] * k)}, index) -> ({', '.join([T] * k)}, index) {{")
                inner = self.block(scope + bargs, depth + 1, self.r.randint(0, 2))
                more = self.fresh()
                self.emit(depth + 1, f"{more} = arith.cmpi slt, {cnt}, %n : index")
                fwd = [self.r.choice(inner[-2:] + bargs) for _ in range(k)]
                self.emit(depth + 1, f"scf.condition({more}) {', '.join(fwd)}, {cnt} : {', '.join([T] * k)}, index")
                aargs = [self.fresh() for _ in range(k)]
                self.emit(depth, "} do {")
                self.emit(depth, f"^bb0({', '.join(f'{a_}: {T}' for a_ in aargs)}, {cnt2}: index):")
                inner = self.block(scope + aargs, depth + 1, self.r.randint(0, 2))
                self.emit(depth + 1, f"{cnt3} = arith.addi {cnt2}, %c1 : index")
                ys = [self.r.choice(inner[-2:] + aargs) for _ in range(k)]
                self.emit(depth + 1, f"scf.yield {', '.join(ys)}, {cnt3} : {', '.join([T] * k)}, index")
                self.emit(depth, "}")
                scope += [f"{v}#{j}" for j in range(k)]
                continue
            scope.append(v)
        return scope

    def program(self):
        scope = self.block(["%x", "%y"], 0, self.r.randint(2, 6))
        outs = [self.r.choice(scope[-3:]) for _ in range(self.r.randint(1, 3))]
        head = ["func.func @f(%x: " + T + ", %y: " + T + ", %w8: tensor<8x8xf32>, %n: index, %p: f32) -> ("
                + ", ".join([T] * len(outs)) + ") {",
                "  %c0 = arith.constant 0 : index", "  %c1 = arith.constant 1 : index",
                "  %c2 = arith.constant 2 : index", "  %zero = arith.constant 0.0 : f32"]
        return "\n".join(head + self.lines + [f"  func.return {', '.join(outs)} : {', '.join([T] * len(outs))}", "}"]), len(outs)



def _cases(seed: int):
    text, outs = Gen(seed).program()
    rng = np.random.default_rng(seed)
    x, y = (rng.uniform(-1, 1, (4, 8)).astype(np.float32) for _ in range(2))
    w8 = (rng.uniform(-1, 1, (8, 8)) / 3).astype(np.float32)
    return text, outs, [[x, y, w8, n, np.float32(p)] for n in (0, 2) for p in (1.0, -1.0)]


def _expected(text, args):
    want = interpret(irc.parse(text), "f", *args)
    return list(want) if isinstance(want, tuple) else [want]


@pytest.mark.parametrize("seed", range(24))
def test_loop_level_agrees_with_the_tensor_level(seed):
    text, n_out, cases = _cases(seed)
    module = irc.parse(text)
    irc.passes.run(module, "canonicalize,cse,fuse-elementwise,tensor-to-loops,plan-memory,canonicalize,cse,licm")
    for args in cases:
        outs = [np.zeros((4, 8), np.float32) for _ in range(n_out)]
        interpret(module, "f", *args, *outs)
        for got, want in zip(outs, _expected(text, args)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(0, 24, 6))
def test_compiled_agrees_with_the_tensor_level(seed):
    text, _, cases = _cases(seed)
    exe = irc.compile(irc.parse(text))
    for args in cases:
        got = exe.f(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        for g, want in zip(got, _expected(text, args)):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
