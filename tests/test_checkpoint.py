"""Checkpoints (issue 13, item 8): irc.save / irc.load, what loading refuses, `irc run model.irc`,
and modules through pickle and deepcopy.

The traced graph is written by hand here (a two-layer MLP over nested dict/list parameters)
with a stand-in for what ``irc.jit(fn).trace(...)`` returns; outputs are checked against numpy
and against irc's reference interpreter, the file against the safetensors package where it is
installed.  Every damaged file must give a ``CheckpointError`` naming the file and nothing
else; a planted pickle must never be unpickled (its payload would create a marker file).
"""

from __future__ import annotations

import ast
import copy
import io
import json
import mmap
import os
import pickle
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import irc
from irc.checkpoint import CheckpointError, write
from irc.cli import main as irc_main
from irc.pytree import TreeDef, TreeMismatch, flatten

ROOT = Path(__file__).resolve().parents[1]

MLP = """
func.func @main(%b0: tensor<8xf32>, %w0: tensor<4x8xf32>, %b1: tensor<3xf32>, %w1: tensor<8x3xf32>,
                %x: tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %h = graph.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %bb0 = graph.broadcast %b0 : tensor<8xf32> to tensor<2x8xf32>
  %a = arith.addf %h, %bb0 : tensor<2x8xf32>
  %t = math.tanh %a : tensor<2x8xf32>
  %l = graph.matmul %t, %w1 : (tensor<2x8xf32>, tensor<8x3xf32>) -> tensor<2x3xf32>
  %bb1 = graph.broadcast %b1 : tensor<3xf32> to tensor<2x3xf32>
  %logits = arith.addf %l, %bb1 : tensor<2x3xf32>
  %p = graph.softmax %logits {axis = 1} : tensor<2x3xf32>
  func.return %logits, %p : tensor<2x3xf32>, tensor<2x3xf32>
}
"""


@dataclass
class Traced:
    """What irc.jit(fn).trace(params, *inputs) returns (the contract irc.save codes against)."""

    module: irc.ModuleOp
    entry: str
    in_tree: TreeDef
    out_tree: TreeDef


def make_params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    # leaf order (pytree: sorted keys, lists in order): layers.0.b, layers.0.w, layers.1.b, layers.1.w
    return {"layers": [{"w": f32(4, 8), "b": f32(8)}, {"w": f32(8, 3), "b": f32(3)}]}


def reference(params: dict, x: np.ndarray) -> dict:
    """The MLP in float64 numpy."""
    (l0, l1) = [{k: v.astype(np.float64) for k, v in layer.items()} for layer in params["layers"]]
    logits = np.tanh(x.astype(np.float64) @ l0["w"] + l0["b"]) @ l1["w"] + l1["b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return {"logits": logits, "probs": e / e.sum(axis=1, keepdims=True)}


def traced_mlp(params, x) -> Traced:
    return Traced(irc.parse(MLP, "mlp.ir"), "main", flatten((params, x))[1],
                  flatten({"logits": 0, "probs": 0})[1])


@pytest.fixture(scope="module")
def example():
    params = make_params()
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    return params, x


@pytest.fixture
def saved(tmp_path, example):
    params, x = example
    path = tmp_path / "model.irc"
    write(path, traced_mlp(params, x), params, x)
    return path


def header_of(path) -> tuple[dict, bytes]:
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def rewrite(path, header: dict, data: bytes, pad: bool = True) -> None:
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-(8 + len(text)) % 8)
    Path(path).write_bytes(len(text).to_bytes(8, "little") + text + data)


# -- round trip ------------------------------------------------------------------------------------


def test_model_computes_what_numpy_and_the_interpreter_compute(saved, example):
    params, x = example
    model = irc.load(saved)
    out = model(x)
    assert set(out) == {"logits", "probs"}
    want = reference(params, x)
    for k in out:
        assert out[k].dtype == np.float32
        np.testing.assert_allclose(out[k], want[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[k], model.interpret(x)[k], rtol=1e-6, atol=1e-7)
    assert model.module.print() == irc.parse(MLP).print()
    for got, expected in zip(flatten(model.params)[0], flatten(params)[0]):
        np.testing.assert_array_equal(got, expected)
    assert flatten(model.params)[1] == flatten(params)[1]


def test_a_new_process_loads_the_same_model(saved, example, tmp_path):
    params, x = example
    np.save(tmp_path / "x.npy", x)
    script = ("import sys, numpy as np, irc\n"
              "m = irc.load(sys.argv[1]); r = m(np.load(sys.argv[2]))\n"
              "np.save(sys.argv[3], r['probs']); np.save(sys.argv[4], r['logits'])\n")
    subprocess.run([sys.executable, "-c", script, str(saved), str(tmp_path / "x.npy"), str(tmp_path / "p.npy"),
                    str(tmp_path / "l.npy")], check=True, timeout=120)
    here = irc.load(saved)(x)
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), here["probs"], rtol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "l.npy"), here["logits"], rtol=1e-6)
    np.testing.assert_allclose(here["probs"], reference(params, x)["probs"], rtol=1e-5)


def _owning_buffer(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def test_params_are_read_only_maps_of_the_file(saved):
    model = irc.load(saved)
    for leaf in flatten(model.params)[0]:
        assert isinstance(_owning_buffer(leaf), mmap.mmap)
        assert not leaf.flags.writeable
        with pytest.raises(ValueError):
            leaf[...] = 0
        with pytest.raises(ValueError):
            leaf.setflags(write=True)  # the map itself is read-only: not even on purpose


def test_the_file_is_safetensors_with_irc_metadata(saved, example):
    params, x = example
    raw = saved.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0  # the data is 8-byte aligned
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    assert meta["format"] == "irc.checkpoint" and meta["irc_version"] == irc.__version__
    assert irc.parse(meta["module"]).print() == irc.parse(MLP).print()
    assert json.loads(meta["params"]) == ["layers.0.b", "layers.0.w", "layers.1.b", "layers.1.w"]
    assert TreeDef.from_json(json.loads(meta["in_tree"])) == flatten((params, x))[1]
    assert json.loads(meta["inputs"]) == [{"name": "0", "dtype": "F32", "shape": [2, 4]}]
    assert header["layers.0.w"]["shape"] == [4, 8] and header["layers.0.w"]["dtype"] == "F32"
    st = pytest.importorskip("safetensors.numpy")
    for name, array in st.load_file(str(saved)).items():
        _, i, key = name.split(".")
        np.testing.assert_array_equal(array, params["layers"][int(i)][key])


def test_a_file_written_by_safetensors_loads(saved, example, tmp_path):
    """The reader follows the format, not only irc's writer: safetensors orders and pads its own way."""
    st = pytest.importorskip("safetensors.numpy")
    params, x = example
    meta = header_of(saved)[0]["__metadata__"]
    other = tmp_path / "other.irc"
    st.save_file({f"layers.{i}.{k}": v for i, layer in enumerate(params["layers"]) for k, v in layer.items()},
                 str(other), metadata=meta)
    np.testing.assert_allclose(irc.load(other)(x)["probs"], irc.load(saved)(x)["probs"], rtol=1e-6)


def test_scalar_and_bool_leaves_and_no_params(tmp_path):
    text = """
    func.func @f(%m: tensor<3xi1>, %s: f64, %x: tensor<3xf64>) -> tensor<3xf64> {
      %y = arith.mulf %x, %x : tensor<3xf64>
      %z = arith.select %m, %y, %x : tensor<3xi1>, tensor<3xf64>
      func.return %z : tensor<3xf64>
    }"""
    params = {"scale": 2.5, "mask": np.array([True, False, True])}
    x = np.array([1.0, 2.0, 3.0])
    path = tmp_path / "s.irc"
    try:
        module = irc.parse(text)
        irc.verify(module)
    except irc.IRError:
        pytest.skip("arith.select on tensors is not in this irc")
    write(path, Traced(module, "f", flatten((params, x))[1], flatten(x)[1]), params, x)
    model = irc.load(path)
    np.testing.assert_array_equal(model(x), np.where(params["mask"], x * x, x))
    assert model.params["scale"].shape == () and model.params["scale"] == 2.5
    assert model.params["mask"].dtype == np.bool_


def test_a_loaded_graph_is_bounds_checked(tmp_path):
    """A checkpoint is code someone else wrote: irc.load compiles it with bounds checks unless
    told otherwise, so an input index out of range faults at the op instead of reading memory."""
    module = irc.parse("func.func @f(%t: tensor<4xf32>, %i: index) -> f32 {\n"
                       "  %x = tensor.extract %t[%i] : tensor<4xf32>\n  func.return %x : f32\n}\n")
    table = np.arange(4, dtype=np.float32) * 1.5
    path = tmp_path / "e.irc"
    write(path, Traced(module, "f", flatten((table, 1))[1], flatten(0.0)[1]), table, 1)
    model = irc.load(path)
    assert model(3) == 4.5
    with pytest.raises(irc.IRError, match="index out of bounds") as e:
        model(10 ** 6)
    assert str(e.value).startswith(f"{path} (module):2:")


def test_save_replaces_a_file_atomically(saved, example, monkeypatch):
    params, x = example
    before = saved.read_bytes()
    import irc.checkpoint.writer as ck

    calls = []

    def interrupted(f, a):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt
        f.write(a.reshape(-1).view(np.uint8).data)

    monkeypatch.setattr(ck, "_write_tensor", interrupted)
    other = make_params(seed=5)
    with pytest.raises(KeyboardInterrupt):
        write(saved, traced_mlp(other, x), other, x)
    assert saved.read_bytes() == before
    assert sorted(os.listdir(saved.parent)) == ["model.irc"]  # no temporary file left
    monkeypatch.undo()
    write(saved, traced_mlp(other, x), other, x)
    np.testing.assert_array_equal(irc.load(saved).params["layers"][1]["w"], other["layers"][1]["w"])


def test_save_checks_its_arguments(tmp_path, example):
    params, x = example
    path = tmp_path / "m.irc"
    traced = traced_mlp(params, x)
    with pytest.raises(TreeMismatch, match=r"\(params, \*example_inputs\)"):
        write(path, traced, {"layers": params["layers"][:1]}, x)
    wrong = copy.deepcopy(params)
    wrong["layers"][0]["w"] = wrong["layers"][0]["w"].astype(np.float64)
    with pytest.raises(ValueError, match="parameter 'layers.0.w' has dtype float64"):
        write(path, traced_mlp(wrong, x), wrong, x)
    objects = copy.deepcopy(params)
    objects["layers"][0]["b"] = np.array([object()] * 8)
    with pytest.raises(TypeError, match="'layers.0.b' has dtype object"):
        write(path, traced_mlp(objects, x), objects, x)
    clash = {"a.b": np.zeros(1, np.float32), "a": {"b": np.zeros(1, np.float32)}}
    with pytest.raises(ValueError, match="both named 'a.b'"):
        write(path, Traced(traced.module, "main", flatten((clash, x))[1], traced.out_tree), clash, x)
    unregistered = irc.parse(MLP.replace("math.tanh %a : tensor<2x8xf32>",
                                         '"my.tanh"(%a) : (tensor<2x8xf32>) -> tensor<2x8xf32>'),
                             allow_unregistered=True)
    with pytest.raises(ValueError, match="does not read back from its text.*my.tanh"):
        write(path, Traced(unregistered, "main", traced.in_tree, traced.out_tree), params, x)
    with pytest.raises(ValueError, match="'@nope' is not in the module"):
        write(path, Traced(traced.module, "nope", traced.in_tree, traced.out_tree), params, x)
    assert not path.exists()


def test_irc_save_takes_a_traced_object_and_traces_a_function(tmp_path, example):
    params, x = example
    irc.save(tmp_path / "a.irc", traced_mlp(params, x), params, x)
    assert irc.load(tmp_path / "a.irc")(x)["probs"].shape == (2, 3)
    if getattr(irc, "jit", None) is None:
        with pytest.raises(NotImplementedError, match="irc.jit"):
            irc.save(tmp_path / "b.irc", lambda p, x: x, params, x)
    with pytest.raises(TypeError, match="'fn'"):
        irc.save(tmp_path / "c.irc", 3, params, x)


def test_irc_save_traces_with_irc_jit(tmp_path, example, monkeypatch):
    """The contract with the front end: irc.jit(fn).trace(params, *inputs) gives the traced graph."""
    params, x = example
    calls = []

    class FakeJit:
        def __init__(self, fn):
            self.fn = fn

        def trace(self, *args):
            calls.append((self.fn, args))
            return traced_mlp(*args)

    def forward(p, x):
        raise AssertionError("irc.save traces; it does not call fn eagerly")

    monkeypatch.setattr(irc, "jit", FakeJit, raising=False)
    irc.save(tmp_path / "m.irc", forward, params, x)
    assert calls == [(forward, (params, x))]
    np.testing.assert_allclose(irc.load(tmp_path / "m.irc")(x)["probs"], reference(params, x)["probs"], rtol=1e-5)


def test_inputs_are_checked_against_the_signature(saved, example):
    params, x = example
    model = irc.load(saved)
    with pytest.raises(TypeError, match="input 0 must have dtype float32.*got float64"):
        model(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"input 0 must have shape \[2, 4\].*got \[3, 4\]"):
        model(np.zeros((3, 4), np.float32))
    with pytest.raises(TypeError, match="takes 1 input"):
        model(x, x)
    with pytest.raises(TypeError, match="numpy array"):
        model("x")
    with pytest.raises(ValueError, match="inputs"):
        model({"x": x})


# -- what loading refuses ----------------------------------------------------------------------------


def _set_meta(key, value):
    def mutate(h):
        h["__metadata__"][key] = value
    return mutate


def _set_tensor(name, key, value):
    def mutate(h):
        h[name][key] = value
    return mutate


def _module_text(old, new):
    def mutate(h):
        h["__metadata__"]["module"] = h["__metadata__"]["module"].replace(old, new)
    return mutate


def _add_empty_param(shape):
    """A consistent extra parameter 'z' holding no bytes: only its shape can be wrong."""
    def mutate(h):
        meta = h["__metadata__"]
        h["z"] = {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
        meta["params"] = json.dumps(json.loads(meta["params"]) + ["z"])
        tree = json.loads(meta["in_tree"])
        tree["tuple"][0]["dict"]["z"] = "*"
        meta["in_tree"] = json.dumps(tree)
    return mutate


BAD_HEADERS = [
    (_set_tensor("layers.0.w", "dtype", "F33"), "'F33': not a dtype"),
    (_set_tensor("layers.0.w", "dtype", "O"), "'O': not a dtype"),
    (_set_tensor("layers.0.w", "dtype", "BF16"), "a dtype irc does not compute with"),
    (_set_tensor("layers.0.w", "shape", [4, 9]), "takes 144 bytes, but its offsets span 128"),
    (_set_tensor("layers.0.w", "shape", [4, -8]), "not a list of at most"),
    (_set_tensor("layers.0.w", "shape", [1] * 40), "not a list of at most"),
    (_set_tensor("layers.0.w", "data_offsets", [0, 10 ** 30]), "past its end"),
    (_set_tensor("layers.0.w", "data_offsets", [8, 4]), "0 <= begin <= end"),
    (_set_tensor("layers.0.w", "data_offsets", "0-128"), "not \\[begin, end\\]"),
    (lambda h: h["layers.1.b"].update(data_offsets=[h["layers.0.b"]["data_offsets"][0],
                                                    h["layers.0.b"]["data_offsets"][0] + 12]), "overlaps"),
    (lambda h: h.pop("layers.1.b"), "unused bytes before tensor"),
    (_set_meta("params", '["layers.0.b", "layers.0.w", "layers.1.b", "layers.1.x"]'), "no tensor for 'layers.1.x'"),
    (lambda h: h.update(extra={"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}), "belong to no parameter"),
    (_add_empty_param([0, 2 ** 61]), "larger than any array can be"),
    (_add_empty_param([0, 5]), r"'@main' takes 5 argument\(s\), but the signature has 5 parameter"),
    (lambda h: h.pop("__metadata__"), "weights only, not an irc checkpoint"),
    (_set_meta("format", "pytorch"), "not an irc checkpoint"),
    (_set_meta("format_version", "2"), "checkpoint format 2; this irc .* reads format 1"),
    (_set_meta("format_version", "one"), "not a positive integer"),
    (_set_meta("irc_version", "0.1; rm -rf /"), "not a version"),
    (_set_meta("module", 42), "map of strings to strings"),
    (lambda h: h["__metadata__"].pop("entry"), "lacks 'entry'"),
    (_set_meta("entry", "forward"), "'@forward' is not in the module"),
    (_set_meta("in_tree", "{"), "'in_tree' is not valid JSON"),
    (_set_meta("in_tree", '{"set": []}'), "'in_tree': not a tree structure"),
    (_set_meta("in_tree", '{"tuple": [{"list": []}, "*"]}'), "0 parameter leaves"),
    (_set_meta("out_tree", '{"tuple": ["*"]}'), "returns 2 value\\(s\\), but the result structure has 1"),
    (_set_meta("params", '["a", "a"]'), "distinct parameter names"),
    (_set_meta("inputs", "[]"), "'inputs' is not a list of the 1 input"),
    (_set_meta("inputs", '[{"name": "0", "dtype": "F32", "shape": [2, 5]}]'),
     r"input 0 has shape \[2, 5\] but the graph's parameter is tensor<2x4xf32>"),
    (_set_meta("in_tree", "[" * 100000 + "]" * 100000), "nested too deeply|not a tree"),
    (_module_text("func.return", "func.retrun"), "does not parse: line \\d+, column \\d+"),
    (_module_text("{axis = 1}", "{axis = 7}"), "IR is not valid"),
    (_module_text("math.tanh %a", "math.tanh %nope"), "IR (does not parse|is not valid)"),
    (_set_tensor("layers.0.b", "shape", [2, 4]), r"'layers.0.b' has shape \[2, 4\] but the graph's parameter is tensor<8xf32>"),
    (_module_text("func.func @main", "func.func private @system(i64) -> i64\nfunc.func @main"),
     "cannot be compiled.*@system"),
]


@pytest.mark.parametrize("mutate,message", BAD_HEADERS, ids=[m for _, m in BAD_HEADERS])
def test_a_damaged_header_is_refused(saved, mutate, message):
    header, data = header_of(saved)
    mutate(header)
    rewrite(saved, header, data)
    with pytest.raises(CheckpointError, match=message) as e:
        irc.load(saved)
    assert str(e.value).startswith(f"{saved}: ") and "\n" not in str(e.value)


def test_a_newer_irc_is_named_when_its_graph_is_not_understood(saved, example):
    header, data = header_of(saved)
    meta = header["__metadata__"]
    meta["irc_version"] = "99.0.0"
    rewrite(saved, header, data)
    irc.load(saved)(example[1])  # the same format: a newer irc's file loads if this irc reads its graph
    meta["module"] = meta["module"].replace("math.tanh", "math.tanh_v2")
    rewrite(saved, header, data)
    with pytest.raises(CheckpointError, match="written by irc 99.0.0, newer than this irc .*: upgrade irc"):
        irc.load(saved)


def _retext(raw: bytes, old: bytes, new: bytes) -> bytes:
    """The file with ``old`` replaced by ``new`` in its header text, the length kept right."""
    n = int.from_bytes(raw[:8], "little")
    text = raw[8:8 + n].replace(old, new, 1)
    assert text != raw[8:8 + n]
    return len(text).to_bytes(8, "little") + text + raw[8 + n:]


BAD_BYTES = [
    (lambda raw: b"", "is empty"),
    (lambda raw: raw[:5], "too short"),
    (lambda raw: raw[:100], "runs past the end of the file"),
    (lambda raw: raw[:-1], "past its end|the tensors take"),
    (lambda raw: raw + b"\0" * 8, "data appended"),
    (lambda raw: (1 << 63).to_bytes(8, "little") + raw[8:], "runs past the end"),
    (lambda raw: (1).to_bytes(8, "little") + raw[8:], "header length is 1 bytes"),
    (lambda raw: raw[:8] + b"\xff" + raw[9:], "not UTF-8"),
    (lambda raw: raw[:8] + b"[" + raw[9:], "not a JSON object"),
    (lambda raw: raw[:9] + b"\x01" + raw[10:], "not valid JSON"),
    (lambda raw: _retext(raw, b'"format":', b'"entry":'), "appears twice"),
    (lambda raw: _retext(raw, b'"data_offsets":[0,', b'"data_offsets":[NaN,'), "NaN is not JSON"),
    (lambda raw: b"func.func @f() {\n  func.return\n}\n", "a text file"),
]


@pytest.mark.parametrize("mutate,message", BAD_BYTES, ids=[m for _, m in BAD_BYTES])
def test_damaged_bytes_are_refused(saved, mutate, message):
    saved.write_bytes(mutate(saved.read_bytes()))
    with pytest.raises(CheckpointError, match=message) as e:
        irc.load(saved)
    assert str(e.value).startswith(f"{saved}: ")


def test_a_header_over_the_limit_is_refused_before_it_is_read(saved):
    n = int.from_bytes(saved.read_bytes()[:8], "little")
    with pytest.raises(CheckpointError, match=f"header is {n} bytes, more than the limit of 1000"):
        irc.load(saved, max_header_size=1000)


def test_a_huge_claimed_header_is_not_allocated(tmp_path):
    """A sparse 1 TiB file claiming a 1 TiB header: refused by the limit, nothing read or allocated."""
    path = tmp_path / "sparse.irc"
    with open(path, "wb") as f:
        f.write(((1 << 40) - 8).to_bytes(8, "little") + b"{")
        try:
            f.truncate(1 << 40)
        except OSError:
            pytest.skip("no sparse files here")
    with pytest.raises(CheckpointError, match="more than the limit"):
        irc.load(path)


def test_not_a_file(tmp_path):
    with pytest.raises(CheckpointError, match="is a directory"):
        irc.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        irc.load(tmp_path / "missing.irc")
    fifo = tmp_path / "fifo.irc"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="not a regular file"):
        irc.load(fifo)  # and does not block waiting for a writer


JUNK = [None, True, -1, 0, 1.5, 2 ** 70, "", "F32", "*", [], {}, [0, 2 ** 64], [0, 0], ["*"], {"dict": {}},
        '{"tuple": [], "list": []}', "[[[[", "\u0000"]


def _replace_somewhere(value, rng):
    """``value`` (a JSON value) with one node somewhere inside it replaced by junk."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = list(value)[rng.integers(len(value))]
        return {**value, key: _replace_somewhere(value[key], rng)}
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = int(rng.integers(len(value)))
        return value[:i] + [_replace_somewhere(value[i], rng)] + value[i + 1:]
    return JUNK[rng.integers(len(JUNK))]


def test_fuzzed_files_give_checkpoint_errors_only(saved):
    """Hundreds of random corruptions (bit flips, truncations, insertions and deletions in the
    header, junk in a header field or in a metadata string's JSON, flips in the data): each
    loads or is a CheckpointError naming the file; no other exception, crash or hang."""
    rng = np.random.default_rng(13)
    valid = saved.read_bytes()
    n = int.from_bytes(valid[:8], "little")
    header, data = header_of(saved)
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(500):
        raw = bytearray(valid)
        kind = rng.integers(6)
        if kind == 0:
            for _ in range(rng.integers(1, 4)):
                at = rng.integers(8 + n) if rng.random() < 0.85 else rng.integers(len(raw))
                raw[at] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            raw = raw[:rng.integers(len(raw))]
        elif kind == 2:
            at = int(rng.integers(8, 8 + n))
            raw[at:at] = bytes([int(rng.integers(256))])
        elif kind == 3:
            at = int(rng.integers(8, 8 + n))
            raw[at:at + 1] = b""
        elif kind == 4:  # a field of the header, or of the JSON inside a metadata string
            h = json.loads(json.dumps(header))
            key = ["in_tree", "out_tree", "params", "inputs"][rng.integers(4)]
            if rng.random() < 0.5:
                h["__metadata__"][key] = json.dumps(_replace_somewhere(json.loads(h["__metadata__"][key]), rng))
            else:
                h = _replace_somewhere(h, rng)
            rewrite(saved, h, data, pad=bool(rng.integers(2)))
            raw = bytearray(saved.read_bytes())
        else:  # the weights: still a checkpoint, other numbers
            raw[8 + n + int(rng.integers(len(raw) - 8 - n))] ^= 0xFF
        saved.write_bytes(bytes(raw))
        try:
            irc.load(saved)
            outcomes["loaded"] += 1
        except CheckpointError as e:
            assert str(e).startswith(f"{saved}: ")
            outcomes["refused"] += 1
    assert outcomes["refused"] > 300 and outcomes["loaded"] > 50, outcomes


# -- nothing is unpickled --------------------------------------------------------------------------


class Payload:
    """Unpickling this creates the file ``marker``: the proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_pickles_are_refused_and_never_run(saved, tmp_path, example):
    params, x = example
    marker = tmp_path / "PWNED"
    blob = pickle.dumps(Payload(marker))
    pickle_file = tmp_path / "evil.irc"
    pickle_file.write_bytes(blob)
    with pytest.raises(CheckpointError, match="a Python pickle, not an irc checkpoint"):
        irc.load(pickle_file)
    torch_like = tmp_path / "torch.irc"
    with zipfile.ZipFile(torch_like, "w") as z:
        z.writestr("archive/data.pkl", blob)
    with pytest.raises(CheckpointError, match="a zip archive"):
        irc.load(torch_like)
    npy = tmp_path / "evil.npy"
    np.save(npy, np.array([Payload(marker)], dtype=object), allow_pickle=True)
    with pytest.raises(CheckpointError, match="a .npy array"):
        irc.load(npy)
    # a pickled blob inside the header: as the module text it does not parse; as an extra
    # metadata string (which irc ignores) or as a tensor's bytes with dtype "O", it is inert
    header, data = header_of(saved)
    for mutate in (_set_meta("module", blob.decode("latin-1")), _set_tensor("layers.0.w", "dtype", "O")):
        h = json.loads(json.dumps(header))
        mutate(h)
        rewrite(tmp_path / "h.irc", h, data)
        with pytest.raises(CheckpointError):
            irc.load(tmp_path / "h.irc")
    h = json.loads(json.dumps(header))
    h["__metadata__"]["pickle"] = blob.decode("latin-1")
    rewrite(tmp_path / "extra.irc", h, data)
    irc.load(tmp_path / "extra.irc")(x)
    code, _, err = run_cli(["run", str(saved), f"@{npy}"])
    assert code == 2 and "holds Python objects" in err
    assert not marker.exists()


def test_loading_never_calls_an_unpickler(saved, example, monkeypatch):
    params, x = example

    def forbidden(*args, **kwargs):
        raise AssertionError("irc.load unpickled something")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(np, "load", forbidden)
    model = irc.load(saved)
    np.testing.assert_allclose(model(x)["logits"], reference(params, x)["logits"], rtol=1e-5, atol=1e-6)


# -- irc run model.irc ------------------------------------------------------------------------------


def run_cli(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved_streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = irc_main(argv)
    finally:
        sys.stdout, sys.stderr = saved_streams
    return code, out.getvalue(), err.getvalue()


def test_irc_run_runs_a_checkpoint(saved, example, tmp_path):
    params, x = example
    np.save(tmp_path / "x.npy", x)
    p = subprocess.run([sys.executable, "-m", "irc.cli", "run", str(saved), f"@{tmp_path / 'x.npy'}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    want = irc.load(saved)(x)
    for line, key in zip(lines, ["logits", "probs"]):  # results in leaf order: dict keys sorted
        np.testing.assert_allclose(np.array(ast.literal_eval(line), np.float32), want[key], rtol=1e-5, atol=1e-7)
    code, out, _ = run_cli(["run", str(saved), "--interp", f"@{tmp_path / 'x.npy'}"])
    assert code == 0
    np.testing.assert_allclose(np.array(ast.literal_eval(out.splitlines()[1])), reference(params, x)["probs"],
                               rtol=1e-5)


def test_irc_run_reports_checkpoint_errors_in_one_line(saved, tmp_path):
    np.save(tmp_path / "wrong.npy", np.zeros((3, 4), np.float32))
    np.save(tmp_path / "x.npy", np.zeros((2, 4), np.float32))
    cases = [
        (["run", str(tmp_path / "missing.irc"), "@x.npy"], 2, "no such file"),
        (["run", str(saved), f"@{tmp_path / 'wrong.npy'}"], 2, r"input 0 must have shape \[2, 4\]"),
        (["run", str(saved)], 2, "takes 1 input"),
        (["run", str(saved), "--entry", "main", f"@{tmp_path / 'x.npy'}"], 2, "--entry is for .ir files"),
    ]
    damaged = tmp_path / "damaged.irc"
    damaged.write_bytes(saved.read_bytes()[:200])
    cases.append((["run", str(damaged), f"@{tmp_path / 'x.npy'}"], 1, "runs past the end"))
    sniffed = tmp_path / "model.bin"  # no .irc suffix: recognised by its first bytes
    sniffed.write_bytes(saved.read_bytes()[:-4])
    cases.append((["run", str(sniffed), f"@{tmp_path / 'x.npy'}"], 1, "past its end|the tensors take"))
    import re

    for argv, code, message in cases:
        got, out, err = run_cli(argv)
        assert got == code, (argv, err)
        assert err.startswith("irc: error: ") and err.count("\n") == 1 and re.search(message, err), err
        assert "Traceback" not in err and out == ""


# -- modules pickle and deepcopy through their text ------------------------------------------------


def _parseable_examples() -> list[Path]:
    paths = sorted(ROOT.glob("examples/*.ir")) + sorted((ROOT / "tests" / "filecheck").glob("*.ir"))
    good = []
    for p in paths:
        if "invalid" in p.name:
            continue
        try:
            irc.parse(p.read_text(), str(p))
        except irc.IRError:
            continue  # a file of several '// -----' chunks
        good.append(p)
    return good


@pytest.mark.parametrize("path", _parseable_examples(), ids=lambda p: p.name)
def test_modules_pickle_and_deepcopy(path):
    module = irc.parse(path.read_text(), str(path))
    text = module.print()
    for copied in (pickle.loads(pickle.dumps(module)), copy.deepcopy(module)):
        assert copied.print() == text
        assert copied is not module and copied.body is not module.body
        for f in list(copied.functions):
            f.erase()  # the copy is independent of the original
        assert module.print() == text


def test_an_unpickled_module_computes_the_same():
    module = irc.parse((ROOT / "examples" / "fib.ir").read_text())
    again = pickle.loads(pickle.dumps(module))
    assert irc.interpret(again, "fib", 15) == irc.interpret(module, "fib", 15) == 610
