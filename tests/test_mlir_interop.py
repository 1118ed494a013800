"""MLIR text in and out (issue 15, items 4 and 5).

The corpus in tests/mlir/*.mlir is written as mlir-opt-22 prints MLIR.  Every chunk must parse,
verify, print as MLIR (``irc.print_mlir``) and read back to the same text; with mlir-opt-22
installed, mlir-opt must accept irc's output and print it exactly as it printed the input.
Executable chunks run on the interpreter against Python references, before and after the trip.
"""

from __future__ import annotations

import importlib.util
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import irc
from irc import IRError
from irc.diagnostics import ExecutionError

HERE = Path(__file__).parent
CORPUS = sorted((HERE / "mlir").glob("*.mlir"))
MLIR_OPT = shutil.which("mlir-opt-22")
needs_mlir_opt = pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-22 is not installed")


def _roundtrip_module():
    spec = importlib.util.spec_from_file_location("mlir_roundtrip", HERE.parent / "benchmarks" / "mlir_roundtrip.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


RT = _roundtrip_module()
CHUNKS = [(f"{p.name}:{line}", text) for p in CORPUS for line, text in RT.split_chunks(p.read_text())]


def _function(name: str):
    for where, text in CHUNKS:
        if f"@{name}(" in text or f"sym_name = \"{name}\"" in text:
            return irc.parse(text, where)
    raise KeyError(name)


def _both(name: str):
    """The module holding @name as read from the corpus, and as read back from irc's MLIR."""
    module = _function(name)
    module.verify()
    again = irc.parse(irc.print_mlir(module), "emitted.mlir")
    again.verify()
    return module, again


@pytest.mark.parametrize("where,text", CHUNKS, ids=[w for w, _ in CHUNKS])
def test_corpus_reads_and_prints_back(where, text):
    module = irc.parse(text, where)
    module.verify()
    emitted = irc.print_mlir(module)
    again = irc.parse(emitted, "emitted.mlir")
    again.verify()
    assert irc.print_mlir(again) == emitted
    assert "cf.phi" not in emitted  # phis are block arguments in MLIR
    assert str(irc.parse(str(module))) == str(module)  # irc's own text still a fixpoint


@needs_mlir_opt
@pytest.mark.parametrize("where,text", CHUNKS, ids=[w for w, _ in CHUNKS])
def test_corpus_round_trips_through_mlir_opt(where, text):
    result = RT.round_trip(MLIR_OPT, text, where)
    assert result.status == "ok", result


@needs_mlir_opt
def test_cli_emit_mlir_is_accepted_by_mlir_opt(tmp_path):
    src = tmp_path / "loop.ir"
    src.write_text("func.func @sum_to(%n: i64) -> i64 {\n^entry:\n  %zero = arith.constant 0 : i64\n"
                   "  %one = arith.constant 1 : i64\n  cf.br ^head\n^head:\n"
                   "  %i = cf.phi [%zero, ^entry], [%i1, ^body] : i64\n"
                   "  %acc = cf.phi [%zero, ^entry], [%acc1, ^body] : i64\n"
                   "  %more = arith.cmpi slt, %i, %n : i64\n  cf.cond_br %more, ^body, ^exit\n^body:\n"
                   "  %acc1 = arith.addi %acc, %i : i64\n  %i1 = arith.addi %i, %one : i64\n  cf.br ^head\n"
                   "^exit:\n  func.return %acc : i64\n}\n")
    out = subprocess.run([sys.executable, "-m", "irc.cli", "opt", str(src), "--emit", "mlir"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "^head(%i: i64, %acc: i64):" in out.stdout
    back = subprocess.run([MLIR_OPT, "-"], input=out.stdout, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    # mlir-opt's text reads back into irc and computes the same sums
    module = irc.parse(back.stdout)
    for n in (0, 1, 7):
        assert irc.interpret(module, "sum_to", n) == sum(range(n))


# -- execution: the interpreter against Python, before and after the trip -------------------


def test_block_arguments_run_as_phis():
    for module in _both("count_down"):
        for n in (0, 1, 5, 9):
            assert irc.interpret(module, "count_down", n) == sum(range(1, n + 1))
    for module in _both("swap_loop"):
        for n in range(5):
            assert irc.interpret(module, "swap_loop", 3, 8, n) == (3 if n % 2 == 0 else 8)


def test_switch_picks_the_case_or_the_default():
    for module in _both("pick"):
        for flag in (0, 5, 1, -3):
            expected = {0: 2 * 11, 5: 6 * 6}.get(flag, 7)
            assert irc.interpret(module, "pick", flag, 11, 6) == expected


def _u(x, w):
    return x & ((1 << w) - 1)


def _s(x, w):
    x = _u(x, w)
    return x - (1 << w) if x >> (w - 1) else x


def test_extended_arithmetic_matches_python_integers():
    rng = random.Random(15)
    samples = [0, 1, -1, 2**31 - 1, -2**31] + [rng.randrange(-2**31, 2**31) for _ in range(20)]
    for module in _both("extended"):
        for a in samples[:8]:
            for b in samples[::3]:
                s, carry, lo, hi, slo, shi = irc.interpret(module, "extended", a, b)
                total = _u(a, 32) + _u(b, 32)
                assert (s, carry) == (_s(total, 32), int(total >= 2**32))
                prod = _u(a, 32) * _u(b, 32)
                assert (lo, hi) == (_s(prod, 32), _s(prod >> 32, 32))
                sprod = a * b
                assert (slo, shi) == (_s(sprod, 32), _s(sprod >> 32, 32))


def test_extended_ops_fold_to_what_they_compute():
    module = irc.parse("func.func @f() -> (i8, i1, i8, i8) {\n  %a = arith.constant -1 : i8\n"
                       "  %b = arith.constant 2 : i8\n  %s, %c = arith.addui_extended %a, %b : i8, i1\n"
                       "  %lo, %hi = arith.mulsi_extended %a, %b : i8\n"
                       "  func.return %s, %c, %lo, %hi : i8, i1, i8, i8\n}\n")
    before = irc.interpret(module, "f")
    from irc.passmanager import PassManager

    PassManager.parse("canonicalize").run(module)
    assert "extended" not in str(module)
    assert irc.interpret(module, "f") == before == (1, True, -2, -1)


def test_bit_counts_match_python():
    for module in _both("bits"):
        for x in (0, 1, -1, 8, 0x00F0_0000, -2**31, 12345):
            u = _u(x, 32)
            clz = 32 - u.bit_length()
            ctz = 32 if u == 0 else (u & -u).bit_length() - 1
            assert irc.interpret(module, "bits", x) == (clz, ctz, bin(u).count("1"))


def test_float_ops_match_libm():
    for module in _both("floats"):
        for a, b in ((2.5, -1.0), (1000.0, 0.5), (0.1, 3.0)):
            r = irc.interpret(module, "floats", a, b)
            assert r[0] == math.copysign(a, b)
            assert r[1] == math.log10(a)
            assert r[2] == math.tan(b)
            assert r[3] == a + b


def test_scf_forms_run():
    for module in _both("while_no_values"):
        buf = np.array([3], dtype=np.int64)
        irc.interpret(module, "while_no_values", buf)
        assert buf[0] == 10
    for module in _both("region"):
        assert irc.interpret(module, "region", 1, 9) == 3
        assert irc.interpret(module, "region", 0, 9) == 9
    for module in _both("fill"):
        out = np.zeros((4, 3), dtype=np.int64)
        irc.interpret(module, "fill", out, 4, 3)
        assert (out == np.arange(12).reshape(4, 3)).all()
    for module in _both("loop"):
        assert irc.interpret(module, "loop", 6) == 15
    data = np.array([5, -3, 12, 7, -20], np.int64)
    for module in _both("sum_and_max"):
        for n in (0, 1, 5):
            want = (int(data[:n].sum()), int(data[:n].max()) if n else -2**63)
            assert irc.interpret(module, "sum_and_max", data, n) == want


def test_generic_branches_pass_their_operands_to_phis():
    for module in _both("generic_branches"):
        assert irc.interpret(module, "generic_branches", 1, 11) == 11
        assert irc.interpret(module, "generic_branches", 0, 5) == 5
        assert irc.interpret(module, "generic_branches", 0, 6) == 7


@needs_mlir_opt
@pytest.mark.parametrize("where,text", CHUNKS, ids=[w for w, _ in CHUNKS])
def test_mlir_opts_generic_form_reads_too(where, text):
    generic = subprocess.run([MLIR_OPT, "--mlir-print-op-generic", "-"], input=text, capture_output=True, text=True)
    assert generic.returncode == 0, generic.stderr
    module = irc.parse(generic.stdout, where)
    module.verify()
    custom = subprocess.run([MLIR_OPT, "-"], input=text, capture_output=True, text=True).stdout
    again = subprocess.run([MLIR_OPT, "-"], input=irc.print_mlir(module), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == custom


def test_locations_are_kept():
    module = _function("add")
    func = next(iter(module.body.ops))
    add = func.body.entry.first_op
    assert (add.loc.filename, add.loc.line, add.loc.column) == ("add.mlir", 2, 8)
    assert (func.loc.filename, func.loc.line) == ("add.mlir", 1)


def test_flags_and_weights_are_kept_and_printed_back():
    module = _function("count_down")
    text = str(module)
    assert "overflow<nsw>" in text and "overflow<nsw, nuw>" in text.replace("nsw,nuw", "nsw, nuw")
    assert "weights([90, 10])" in text
    assert "weights([90, 10])" in irc.print_mlir(module)
    assert "fastmath<nnan,ninf>" in irc.print_mlir(_function("floats"))


def test_memory_space_is_written_as_mlir_does():
    module = irc.parse("func.func @f(%m: memref<4xf32, gpu>) {\n  func.return\n}\n")
    assert "memref<4xf32, 1>" in irc.print_mlir(module)


# -- diagnostics ---------------------------------------------------------------------------------


def _error(text: str) -> IRError:
    with pytest.raises(IRError) as info:
        irc.parse(text, "t.mlir").verify()
    return info.value


def test_branch_passing_the_wrong_number_of_values():
    e = _error("func.func @f(%a: i64) -> i64 {\n  cf.br ^bb1\n^bb1(%x: i64):\n  return %x : i64\n}\n")
    assert (e.location.line, e.location.column) == (2, 9)
    assert "branch passes 0 values to '^bb1', which has 1 argument" in e.message
    assert str(e).splitlines()[2] == "        ^"


# -- one block passing two different values to one successor ------------------------------
# A phi takes one value per predecessor, so the parser sends the second edge through a block of
# its own that branches on.  The reference for what the text means is mlir-opt's canonicalizer,
# which turns such branches into arith.select (or one successor), run by irc's interpreter.

_TWO_EDGES = """func.func @two_edges(%arg0: i1, %arg1: i32, %arg2: i32) -> i32 {
  cf.cond_br %arg0, ^bb1(%arg1 : i32), ^bb1(%arg2 : i32)
^bb1(%0: i32):  // 2 preds: ^bb0, ^bb0
  %1 = arith.muli %0, %0 : i32
  return %1 : i32
}

func.func @same_edges(%arg0: i1, %arg1: i32) -> i32 {
  cf.cond_br %arg0, ^bb1(%arg1 : i32), ^bb1(%arg1 : i32)
^bb1(%0: i32):  // 2 preds: ^bb0, ^bb0
  return %0 : i32
}

func.func @switch_edges(%arg0: i32, %arg1: i64, %arg2: i64) -> i64 {
  cf.switch %arg0 : i32, [
    default: ^bb1(%arg1 : i64),
    1: ^bb1(%arg2 : i64),
    2: ^bb1(%arg1 : i64),
    3: ^bb2
  ]
^bb1(%0: i64):  // 4 preds: ^bb0, ^bb0, ^bb0, ^bb2
  return %0 : i64
^bb2:  // pred: ^bb0
  %1 = arith.addi %arg1, %arg2 : i64
  cf.br ^bb1(%1 : i64)
}

func.func @generic_edges(%arg0: i1, %arg1: i32, %arg2: i32) -> i32 {
  "cf.cond_br"(%arg0, %arg2, %arg1)[^bb1, ^bb1] <{operandSegmentSizes = array<i32: 1, 1, 1>}> : (i1, i32, i32) -> ()
^bb1(%0: i32):  // 2 preds: ^bb0, ^bb0
  return %0 : i32
}
"""


def _check_two_edges(module) -> None:
    for c in (0, 1):
        for a, b in ((3, 9), (-5, 7)):
            assert irc.interpret(module, "two_edges", c, a, b) == (a if c else b) ** 2
            assert irc.interpret(module, "generic_edges", c, a, b) == (b if c else a)
        assert irc.interpret(module, "same_edges", c, 4) == 4
    for flag in (0, 1, 2, 3, 4, -1):
        expected = {1: 20, 3: 6 + 20}.get(flag, 6)
        assert irc.interpret(module, "switch_edges", flag, 6, 20) == expected


def test_one_block_passes_two_values_to_one_successor():
    module = irc.parse(_TWO_EDGES, "two_edges.mlir")
    module.verify()
    _check_two_edges(module)
    blocks = {f.sym_name: len(list(f.body.blocks)) for f in module.body.ops}
    # one new block for the cond_br's second edge, none where both edges pass the same value,
    # one for the switch's case 1 (case 2 passes what the default passes)
    assert blocks == {"two_edges": 3, "same_edges": 2, "switch_edges": 4, "generic_edges": 3}
    emitted = irc.print_mlir(module)
    again = irc.parse(emitted, "emitted.mlir")
    again.verify()
    _check_two_edges(again)
    assert irc.print_mlir(again) == emitted
    assert str(irc.parse(str(module))) == str(module)


@needs_mlir_opt
def test_two_values_to_one_successor_mean_what_mlir_opt_says():
    emitted = irc.print_mlir(irc.parse(_TWO_EDGES, "two_edges.mlir"))
    back = subprocess.run([MLIR_OPT, "-"], input=emitted, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    _check_two_edges(irc.parse(back.stdout, "mlir-opt.mlir"))
    # mlir-opt's own reading of the original text, simplified by its canonicalizer
    canon = subprocess.run([MLIR_OPT, "--canonicalize", "-"], input=_TWO_EDGES, capture_output=True, text=True)
    assert canon.returncode == 0, canon.stderr
    assert "arith.select" in canon.stdout
    _check_two_edges(irc.parse(canon.stdout, "canonical.mlir"))


# -- scf.if with an empty 'else' ----------------------------------------------------------------


def test_empty_else_is_kept_as_mlir_keeps_it():
    for module in _both("empty_else"):
        emitted = irc.print_mlir(module)
        assert emitted.count("} else {") == 2  # 'else { }' and the else of an empty 'then'
        assert emitted.count("scf.if") == 3
        for c in (0, 1):
            buf = np.zeros((), dtype=np.int64)
            irc.interpret(module, "empty_else", c, buf, 41)
            assert buf[()] == (41 if c else 42)


def test_block_argument_types_must_match_the_branch():
    e = _error("func.func @f(%a: i32) -> i64 {\n  cf.br ^bb1(%a : i32)\n^bb1(%x: i64):\n  return %x : i64\n}\n")
    assert (e.location.line, e.location.column) == (3, 1)
    assert "takes (i32) but is given (i64)" in e.message


@pytest.mark.parametrize("text,line,column,words", [
    ("func.func @f(%v: vector<4x4xf32>) {\n  return\n}\n", 1, 18, "multi-dimensional and scalable vectors"),
    ("func.func @f(%v: index) -> index {\n  %0 = affine.apply %v : index\n  return %0 : index\n}\n", 2, 8,
     "MLIR's affine dialect"),
    ('func.func @f(%v: index) {\n  "linalg.fill"(%v) : (index) -> ()\n  return\n}\n', 2, 3,
     "MLIR's linalg dialect"),
    ("func.func @f(%t: index) {\n  %0 = tensor.extract_slice %t : index\n  return\n}\n", 2, 8,
     "of MLIR's tensor dialect irc has tensor.extract and tensor.dim"),
])
def test_out_of_scope_mlir_is_named(text, line, column, words):
    e = _error(text)
    assert (e.location.line, e.location.column) == (line, column)
    assert words in e.message


def test_irc_graph_ops_refuse_to_print_as_mlir():
    module = irc.parse("func.func @f(%s: f32) -> tensor<4xf32> {\n  %t = graph.splat %s : f32 to tensor<4xf32>\n"
                       "  func.return %t : tensor<4xf32>\n}\n", "g.ir")
    with pytest.raises(IRError) as info:
        irc.print_mlir(module)
    assert "'graph.splat' op has no MLIR equivalent" in str(info.value)
    assert (info.value.location.line, info.value.location.column) == (2, 8)


@needs_mlir_opt
def test_mlirs_own_tensor_ops_print_as_mlir_and_mlir_opt_reads_them():
    """tensor.extract and tensor.dim are MLIR's ops in MLIR's syntax (irc's graph ops are the
    graph dialect's, so no name means two things): they go out as MLIR and mlir-opt-22 takes them."""
    text = ("func.func @f(%t: tensor<?x4xf32>, %i: index) -> (f32, index) {\n"
            "  %c0 = arith.constant 0 : index\n"
            "  %n = tensor.dim %t, %c0 : tensor<?x4xf32>\n"
            "  %x = tensor.extract %t[%i, %c0] : tensor<?x4xf32>\n"
            "  func.return %x, %n : f32, index\n}\n")
    out = irc.print_mlir(irc.parse(text))
    back = subprocess.run([MLIR_OPT, "-"], input=out, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    assert "tensor.dim" in back.stdout and "tensor.extract" in back.stdout
    np.testing.assert_array_equal(irc.interpret(irc.parse(back.stdout), "f", np.ones((3, 4), np.float32), 2),
                                  irc.interpret(irc.parse(text), "f", np.ones((3, 4), np.float32), 2))


# -- compiled code against the interpreter -------------------------------------------------------


@pytest.mark.parametrize("name,args", [
    ("count_down", [(0,), (6,)]),
    ("pick", [(0, 11, 6), (5, 11, 6), (3, 11, 6)]),
    ("extended", [(-1, -1), (2**31 - 1, 5), (-7, 3), (123456, -98765)]),
    ("bits", [(0,), (1,), (-1,), (0x00F0_0000,)]),
    ("floats", [(2.5, -1.0), (1000.0, 0.5)]),
    ("flags", [(3, 4), (5, 2), (-5, 2)]),  # (-5) * 2 breaks muli's nuw: both engines fault
    ("loop", [(0,), (6,)]),
])
def test_jit_agrees_with_the_interpreter(name, args):
    pytest.importorskip("llvmlite")
    module = _function(name)
    exe = irc.compile(_function(name), cache=False)
    for a in args:
        try:
            expected = irc.interpret(module, name, *a)
        except ExecutionError as e:
            with pytest.raises(ExecutionError) as got:
                getattr(exe, name)(*a)
            assert str(got.value).splitlines()[0] == str(e).splitlines()[0]
            continue
        assert getattr(exe, name)(*a) == expected, a


def test_scf_to_cf_lowers_execute_region_and_parallel_for_the_jit():
    pytest.importorskip("llvmlite")
    for name, args in (("region", [(1, 9), (0, 9)]), ("while_no_values", [(3,), (12,)])):
        module = _function(name)
        exe = irc.compile(_function(name), cache=False)
        for a in args:
            if name == "while_no_values":
                got, want = np.array([a[0]], np.int64), np.array([a[0]], np.int64)
                getattr(exe, name)(got)
                irc.interpret(module, name, want)
                assert got[0] == want[0] == max(a[0], 10)
            else:
                assert getattr(exe, name)(*a) == irc.interpret(module, name, *a)
    exe = irc.compile(_function("sum_and_max"), cache=False)
    data = np.array([5, -3, 12, 7, -20], np.int64)
    for n in (0, 2, 5):
        assert exe.sum_and_max(data, n) == irc.interpret(_function("sum_and_max"), "sum_and_max", data, n)
    exe = irc.compile(_function("fill"), cache=False)
    for rows, cols in ((4, 3), (2, 3), (0, 3)):
        got, want = np.full((4, 3), -1, np.int64), np.full((4, 3), -1, np.int64)
        exe.fill(got, rows, cols)
        irc.interpret(_function("fill"), "fill", want, rows, cols)
        assert (got == want).all()
        assert (got[:rows] == np.arange(rows * cols).reshape(rows, cols)).all()


@needs_mlir_opt
def test_irc_only_attributes_are_left_out():
    module = irc.parse("func.func @f(%x: f32) -> f32 attributes {arena_bytes = 64 : i64} {\n"
                       "  %y = arith.mulf %x, %x {fastmath = \"none\", work = 3 : i64} : f32\n"
                       "  func.return %y : f32\n}\n")
    text = irc.print_mlir(module)
    assert "arena_bytes" not in text and "work" not in text and "fastmath" not in text
    back = subprocess.run([MLIR_OPT, "-"], input=text, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr


def test_views_of_typed_buffers_are_refused():
    module = irc.parse("func.func @f(%m: memref<8x16xf32>, %o: index) -> memref<128xf32> {\n"
                       "  %v = memref.view %m[%o][] : memref<8x16xf32> to memref<128xf32>\n"
                       "  func.return %v : memref<128xf32>\n}\n", "v.ir")
    with pytest.raises(IRError) as info:
        irc.print_mlir(module)
    assert (info.value.location.line, info.value.location.column) == (2, 8)
    assert "MLIR's memref.view takes only a 1-D i8 buffer" in info.value.message


def test_roundtrip_script_without_mlir_opt_says_so(capsys):
    assert RT.main(["--mlir-opt", "no-such-mlir-opt-binary", str(CORPUS[0])]) == 2
    assert "is not installed" in capsys.readouterr().err


@needs_mlir_opt
def test_roundtrip_script_counts_the_corpus(capsys):
    assert RT.main([*map(str, CORPUS)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"in scope: round-trip identical {len(CHUNKS)}/{len(CHUNKS)};")


@pytest.mark.parametrize("text,line,column,words", [
    ("func.func @f(%a: i32) -> i32 {\n  %0 = arith.addi %a, %a overflow<bogus> : i32\n  return %0 : i32\n}\n",
     2, 26, "unknown overflow flag 'bogus'"),
    ("func.func @f(%a: f32) -> f32 {\n  %0 = arith.addf %a, %a fastmath<quick> : f32\n  return %0 : f32\n}\n",
     2, 26, "unknown fastmath flag 'quick'"),
    ("func.func @f(%a: i32) -> i32 {\n  %0 = arith.addi %a, %a : i32 loc(#nope)\n  return %0 : i32\n}\n",
     2, 32, "undefined location alias '#nope'"),
    ("func.func @f(%a: i32) -> i32 {\n  cf.br ^bb1(%a : i32\n^bb1(%x: i32):\n  return %x : i32\n}\n",
     3, 1, "unexpected '^bb1(%x: i32):', expected ',', ')'"),
    ('func.func @f(%c: i1, %a: i32) -> i32 {\n  "cf.cond_br"(%c, %a)[^bb1, ^bb2] <{operandSegmentSizes = '
     'array<i32: 1, 0, 0>}> : (i1, i32) -> ()\n^bb1:\n  return %a : i32\n^bb2:\n  return %a : i32\n}\n',
     2, 3, "needs 'operandSegmentSizes = array<i32: 1, N, M>'"),
    ("func.func @f(%n: index) -> i32 {\n  %c0 = arith.constant 0 : index\n  %z = arith.constant 0 : i32\n"
     "  %r = scf.parallel (%i) = (%c0) to (%n) step (%n) init (%z) -> (i32) {\n    scf.reduce\n  }\n"
     "  return %r : i32\n}\n", 5, 5, "reduces () but the loop's results are (i32)"),
    ("func.func @f(%a: i32) {\n  cf.switch %a : i32, [default: ^bb1, 7: ^bb1, 7: ^bb1]\n^bb1:\n  return\n}\n",
     2, 3, "has a case value twice"),
])
def test_mlir_input_diagnostics(text, line, column, words):
    e = _error(text)
    assert (e.location.line, e.location.column) == (line, column), str(e)
    assert words in e.message


def test_switch_cases_are_canonical_values():
    text = ("func.func @f(%a: i8) -> i8 {\n  %c1 = arith.constant 1 : i8\n"
            "  cf.switch %a : i8, [default: ^bb1(%a : i8), 255: ^bb2]\n^bb2:\n  cf.br ^bb1(%c1 : i8)\n"
            "^bb1(%x: i8):\n  return %x : i8\n}\n")
    module = irc.parse(text)
    assert "-1: ^bb2" in str(module)  # 255 and -1 are the same i8
    assert irc.interpret(module, "f", -1) == 1
    assert irc.interpret(module, "f", 5) == 5
