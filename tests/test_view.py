"""irc view and irc opt --picture-dir (irc/picture.py): the .dot text is checked structurally
(every block, every branch edge with its true/false label, phis, fused groups as clusters,
shapes on edges), rendering through dot where it is installed, and every failure is one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import irc
from irc.cli import main

pytest.importorskip("graphviz")

ROOT = Path(__file__).resolve().parent.parent
HAS_DOT = shutil.which("dot") is not None

SUM_TO = ROOT / "examples" / "sum_to.ir"
CLASSIFIER = ROOT / "examples" / "classifier.ir"


def view(capsys, *argv):
    status = main(["view", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _edges(dot: str) -> list[tuple[str, str, str | None]]:
    """(from, to, label) of every edge of a .dot text."""
    out = []
    for m in re.finditer(r"^\s*(\w+) -> (\w+)(?: \[([^\]]*)\])?", dot, re.M):
        label = re.search(r'label=("?)([^" ]*)\1', m.group(3) or "")
        out.append((m.group(1), m.group(2), label.group(2) if label else None))
    return out


def _node_ids(dot: str, text: str) -> list[str]:
    """Node ids whose label contains ``text``."""
    return [m.group(1) for m in re.finditer(r"^\s*(\w+) \[label=(.*)$", dot, re.M) if text in m.group(2)]


def test_cfg_structure(capsys, tmp_path):
    out = tmp_path / "sum.dot"
    status, _, err = view(capsys, SUM_TO, "--cfg", "-o", out)
    assert status == 0, err
    dot = out.read_text()
    module = irc.parse_file(str(SUM_TO))
    func = module.function("sum_to")
    labels = [b.label for b in func.regions[0].blocks]
    blocks = {label: _node_ids(dot, f"<B>^{label}</B>") for label in labels}
    assert all(len(ids) == 1 for ids in blocks.values()), blocks
    ids = {label: ids[0] for label, ids in blocks.items()}
    edges = {(a, b): label for a, b, label in _edges(dot)}
    # Every branch of the program is an edge, and only those.
    expected = {}
    for block in func.regions[0].blocks:
        term = block.last_op
        for k, succ in enumerate(term.successors):
            want = ("true" if k == 0 else "false") if term.name == "cf.cond_br" else None
            expected[(ids[block.label], ids[succ.label])] = want
    assert edges == expected
    assert "cf.phi [%zero, ^entry], [%i1, ^body]" in dot.replace("&#x27;", "'")  # phis are shown
    assert "(entry)" in dot and "peripheries=2" in dot  # entry marked, returning block doubled


def test_long_blocks_and_lines_are_abbreviated(capsys, tmp_path):
    body = "\n".join(f"  %v{i} = arith.addi %v{i - 1}, %v{i - 1} : i64" for i in range(1, 60))
    src = tmp_path / "long.ir"
    src.write_text("func.func @very_long_function_name_for_a_test(%v0: i64) -> i64 {\n" + body
                   + "\n  func.return %v59 : i64\n}\n")
    out = tmp_path / "long.dot"
    assert view(capsys, src, "-o", out)[0] == 0
    dot = out.read_text()
    assert "more ops" in dot and "%v1 = arith.addi" in dot and "func.return %v59" in dot
    assert "%v30 = arith.addi" not in dot


def test_dataflow_with_fused_clusters(capsys, tmp_path):
    module = irc.parse_file(str(CLASSIFIER))
    irc.passes.run(module, "fuse-elementwise")
    fused = [op for op in module.walk() if op.name == "graph.fused"]
    assert len(fused) >= 2
    src = tmp_path / "fused.ir"
    src.write_text(module.print())
    out = tmp_path / "fused.dot"
    status, _, err = view(capsys, src, "--func", "classify", "--dataflow", "-o", out)
    assert status == 0, err
    dot = out.read_text()
    assert dot.count("subgraph cluster_") == len(fused)
    assert dot.count('label="graph.fused') == len(fused)
    # Shapes on the edges: every parameter's shape labels an edge leaving it.
    func = module.function("classify")
    for arg in func.regions[0].entry.args:
        shape = "x".join("?" if d is None else str(d) for d in arg.type.shape) + "xf32"
        assert any(label and label.strip('"') == shape for _, _, label in _edges(dot)), shape
    # The scalar bodies of the fused ops are inside their clusters.
    for cluster in re.findall(r"subgraph cluster_\w+ \{(.*?)\n\t\}", dot, re.S):
        assert "arith.addf" in cluster and "yield" in cluster
    assert "graph.matmul" in dot and "return" in dot


def test_default_kind_and_whole_module(capsys, tmp_path):
    out = tmp_path / "all.dot"
    for path in (SUM_TO, CLASSIFIER):
        assert view(capsys, path, "-o", out)[0] == 0
    dot = out.read_text()
    assert "graph.matmul" in dot and "subgraph cluster_f0" in dot  # classifier: dataflow by default


@pytest.mark.skipif(not HAS_DOT, reason="graphviz's dot is not installed")
@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_render(capsys, tmp_path, fmt):
    out = tmp_path / f"sum.{fmt}"
    status, _, err = view(capsys, SUM_TO, "-o", out)
    assert status == 0, err
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data and b"^head" in data


def test_missing_dot_is_one_line(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no dot on it
    base = [sys.executable, "-m", "irc.cli"]
    r = subprocess.run([*base, "view", str(SUM_TO), "-o", str(tmp_path / "x.svg")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "'dot'" in r.stderr and "-o FILE.dot" in r.stderr
    assert not (tmp_path / "x.svg").exists()
    r = subprocess.run([*base, "view", str(SUM_TO), "-o", str(tmp_path / "x.dot")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and (tmp_path / "x.dot").read_text().startswith("digraph")


def test_bad_inputs(capsys, tmp_path):
    bad = tmp_path / "bad.ir"
    bad.write_text("func.func @f() {\n  %x = arith.nope %y : i64\n}\n")
    status, _, err = view(capsys, bad, "-o", tmp_path / "x.dot")
    assert status == 1 and err.startswith(f"{bad}:2:")
    status, _, err = view(capsys, SUM_TO, "-o", tmp_path / "x.txt")
    assert status == 2 and "picture format" in err
    status, _, err = view(capsys, SUM_TO, "--func", "nope", "-o", tmp_path / "x.dot")
    assert status == 1 and err.startswith("irc: error: no function named '@nope'")
    status, _, err = view(capsys, tmp_path / "missing.ir", "-o", tmp_path / "x.dot")
    assert status == 2 and "no such file" in err
    with pytest.raises(SystemExit):
        main(["view", str(SUM_TO), "--cfg", "--dataflow", "-o", str(tmp_path / "x.dot")])
    assert not (tmp_path / "x.dot").exists()


def test_opt_picture_dir(capsys, tmp_path):
    src = tmp_path / "p.ir"
    src.write_text("func.func @f(%a: i64) -> i64 {\n  %x = arith.addi %a, %a : i64\n"
                   "  %y = arith.addi %a, %a : i64\n  %z = arith.muli %x, %y : i64\n"
                   "  func.return %z : i64\n}\n")
    pictures = tmp_path / "pics"
    status = main(["opt", str(src), "-p", "cse,dce,canonicalize", "--print-after-change",
                   "--picture-dir", str(pictures), "--picture-format", "dot"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    names = sorted(p.name for p in pictures.iterdir())
    # cse merges %y into %x; dce finds nothing; canonicalize: x*x stays: only cse changed it
    assert names == ["00-input.dot", "01-cse.dot"]
    assert "%y = arith.addi" in (pictures / "00-input.dot").read_text()
    assert "%y = arith.addi" not in (pictures / "01-cse.dot").read_text()
    assert "after cse" in (pictures / "01-cse.dot").read_text()
    assert "IR Dump" not in captured.err  # the dumps became pictures
    assert "arith.muli %x, %x" in captured.out  # the output is unchanged


@pytest.mark.skipif(not HAS_DOT, reason="graphviz's dot is not installed")
def test_module_repr_svg():
    m = irc.parse_file(str(SUM_TO))
    svg = m._repr_svg_()
    assert svg is not None and "<svg" in svg
    assert irc.Explorer(m)._repr_svg_() == svg


def test_repl_view_command(capsys, monkeypatch, tmp_path):
    import io

    out = tmp_path / "step.dot"
    script = f"apply scf-to-cf\nview {out} @primes_below --cfg\nview {tmp_path / 'x.txt'}\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    status = main(["repl", str(ROOT / "examples" / "sieve.ir")])
    captured = capsys.readouterr()
    assert status == 1 and "picture format" in captured.err  # the second view
    assert f"drew step 1 to {out}" in captured.out
    dot = out.read_text()
    # The picture is of the current step: scf-to-cf made blocks and conditional branches.
    assert dot.count('label=true') >= 2 and dot.count('label=false') >= 2
    assert "cf.phi" in dot and "= scf.for" not in dot and "scf.for %" not in dot


def test_large_modules_are_not_drawn_in_notebooks():
    from irc.picture import MAX_DISPLAY_OPS

    body = "\n".join(f"  %v{i} = arith.addi %v{i - 1}, %v{i - 1} : i64" for i in range(1, MAX_DISPLAY_OPS + 1))
    m = irc.parse("func.func @f(%v0: i64) -> i64 {\n" + body + f"\n  func.return %v{MAX_DISPLAY_OPS} : i64\n}}\n")
    assert m._repr_svg_() is None
    assert "arith.addi" in m._repr_html_()
