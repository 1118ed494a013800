"""``irc.onnx.load`` and ``irc import``: exported torch models against torch, hand-built graphs
against onnx's reference evaluator, and the errors for unknown operators and damaged files."""

from __future__ import annotations

import ast
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import irc  # noqa: E402
import irc.onnx  # noqa: E402
from irc.cli import main  # noqa: E402


def export(model, x, path, dynamic_batch=False):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}} if dynamic_batch else None)
    return str(path)


def test_exported_cnn_runs_for_any_batch(tmp_path):
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, stride=2, groups=2), nn.ReLU(),
                          nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()
    path = export(model, torch.randn(2, 3, 16, 16), tmp_path / "cnn.onnx", dynamic_batch=True)
    imported = irc.onnx.load(path)
    assert imported.inputs == ["x"] and imported.outputs == ["y"]
    for batch in (1, 5):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(imported(x.numpy()), want, rtol=1e-5, atol=1e-5)


def test_exported_mlp_with_gelu_layer_norm_softmax(tmp_path):
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8), nn.Tanh(),
                          nn.Linear(8, 4), nn.Sigmoid(), nn.Softmax(-1)).eval()
    x = torch.randn(3, 16)
    path = export(model, x, tmp_path / "mlp.onnx")
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(irc.onnx.load(path)(x.numpy()), want, rtol=1e-5, atol=1e-6)


def tensor(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def graph_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_hand_built_graph_against_the_reference_evaluator(tmp_path):
    """Batch norm, an embedding Gather, shape arithmetic feeding a Reshape, Slice, Where, Cast,
    reductions, Pow/Sqrt/Div, Transpose, Unsqueeze/Squeeze, Concat, Erf and Softmax."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    inits = [
        tensor("table", rng.standard_normal((10, 4)).astype(np.float32)),
        tensor("scale", rng.uniform(0.5, 2, 4).astype(np.float32)),
        tensor("bias", rng.standard_normal(4).astype(np.float32)),
        tensor("mean", rng.standard_normal(4).astype(np.float32)),
        tensor("var", rng.uniform(0.5, 2, 4).astype(np.float32)),
        tensor("zero", np.array(0, np.int64)), tensor("one", np.array(1, np.int64)),
        tensor("minus1", np.array([-1], np.int64)), tensor("two", np.array(2.0, np.float32)),
        tensor("starts", np.array([1], np.int64)), tensor("ends", np.array([3], np.int64)),
        tensor("axes1", np.array([1], np.int64)),
    ]
    N = helper.make_node
    nodes = [
        N("Gather", ["table", "ids"], ["emb"], name="embed"),                       # [2, 3, 4]
        N("Transpose", ["emb"], ["embT"], perm=[0, 2, 1]),                           # [2, 4, 3]
        N("Unsqueeze", ["embT", "minus1"], ["e4"]),                                  # [2, 4, 3, 1]
        N("BatchNormalization", ["e4", "scale", "bias", "mean", "var"], ["bn"], epsilon=1e-3),
        N("Shape", ["bn"], ["shape"]),
        N("Gather", ["shape", "zero"], ["batch"]),
        N("Unsqueeze", ["batch", "zero"], ["batch1"]),
        N("Concat", ["batch1", "minus1"], ["flat_shape"], axis=0),
        N("Reshape", ["bn", "flat_shape"], ["flat"]),                                # [2, 12]
        N("Slice", ["flat", "starts", "ends", "axes1"], ["piece"]),                  # [2, 2]
        N("Pow", ["piece", "two"], ["sq"]),
        N("ReduceMean", ["sq"], ["ms"], axes=[1], keepdims=1),
        N("Sqrt", ["ms"], ["rms"]),
        N("Div", ["piece", "rms"], ["normed"]),
        N("Greater", ["normed", "x"], ["gt"]),
        N("Where", ["gt", "normed", "x"], ["picked"]),
        N("Erf", ["picked"], ["erf"]),
        N("Cast", ["gt"], ["gtf"], to=f),
        N("Add", ["erf", "gtf"], ["sum"]),
        N("Softmax", ["sum"], ["soft"], axis=-1),
        N("ReduceMax", ["soft"], ["top"], axes=[1], keepdims=0),
        N("Squeeze", ["ms", "axes1"], ["ms1"]),
        N("Sub", ["top", "ms1"], ["out"]),
    ]
    model = graph_model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3]),
                                helper.make_tensor_value_info("x", f, [2, 2])],
                        [helper.make_tensor_value_info("soft", f, [2, 2]),
                         helper.make_tensor_value_info("out", f, [2])], inits)
    onnx.checker.check_model(model)
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    ids = rng.integers(0, 10, (2, 3)).astype(np.int64)
    x = rng.standard_normal((2, 2)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"ids": ids, "x": x})
    got = irc.onnx.load(path)(ids, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_unknown_operator_is_an_error_naming_file_node_and_operator(tmp_path):
    f = TensorProto.FLOAT
    model = graph_model([helper.make_node("Relu", ["x"], ["r"], name="ok"),
                         helper.make_node("Hardmax", ["r"], ["y"], name="the_node")],
                        [helper.make_tensor_value_info("x", f, [2, 3])],
                        [helper.make_tensor_value_info("y", f, [2, 3])])
    path = tmp_path / "unknown.onnx"
    onnx.save(model, str(path))
    with pytest.raises(irc.onnx.OnnxImportError, match=r"unknown\.onnx: node 'the_node'.*'Hardmax'"):
        irc.onnx.load(path)


def test_unsupported_form_is_an_error_naming_the_node(tmp_path):
    f = TensorProto.FLOAT
    w = np.ones((2, 1, 3, 3), np.float32)
    model = graph_model([helper.make_node("Conv", ["x", "w"], ["y"], name="lopsided", pads=[0, 0, 1, 1])],
                        [helper.make_tensor_value_info("x", f, [1, 1, 8, 8])],
                        [helper.make_tensor_value_info("y", f, [1, 2, 7, 7])], [tensor("w", w)])
    path = tmp_path / "lopsided.onnx"
    onnx.save(model, str(path))
    with pytest.raises(irc.onnx.OnnxImportError, match=r"lopsided\.onnx: node 'lopsided' \(Conv\).*asymmetric pads"):
        irc.onnx.load(path)(np.zeros((1, 1, 8, 8), np.float32))


def test_dilated_conv_against_the_reference_evaluator(tmp_path):
    f = TensorProto.FLOAT
    rng = np.random.default_rng(6)
    w = rng.standard_normal((4, 2, 3, 2)).astype(np.float32)
    model = graph_model([helper.make_node("Conv", ["x", "w"], ["y"], dilations=[2, 3], strides=[1, 2],
                                          pads=[1, 1, 1, 1], group=1)],
                        [helper.make_tensor_value_info("x", f, [2, 2, 9, 10])],
                        [helper.make_tensor_value_info("y", f, [2, 4, 7, 5])], [tensor("w", w)])
    onnx.checker.check_model(model)
    path = tmp_path / "dilated.onnx"
    onnx.save(model, str(path))
    x = rng.standard_normal((2, 2, 9, 10)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(irc.onnx.load(path)(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("content", [b"", b"not a model at all \x00\xff\x17", b"\x08\x07\x12"])
def test_damaged_file_is_an_error_naming_the_file(tmp_path, content):
    path = tmp_path / "damaged.onnx"
    path.write_bytes(content)
    with pytest.raises(irc.onnx.OnnxImportError, match=r"damaged\.onnx: not a readable ONNX model"):
        irc.onnx.load(path)


def test_cli_import_writes_ir_that_runs(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 5)).eval()
    path = export(model, torch.randn(1, 3, 8, 8), tmp_path / "m.onnx", dynamic_batch=True)
    out = tmp_path / "m.ir"
    assert main(["import", path, "-o", str(out)]) == 2  # the batch is symbolic: needs --shape
    assert "--shape x=" in capsys.readouterr().err
    assert main(["import", path, "-o", str(out), "--shape", "x=2x3x8x8"]) == 0
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        want = model(x).numpy()
    got = irc.compile(irc.parse(out.read_text())).main(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    damaged = tmp_path / "bad.onnx"
    damaged.write_bytes(b"\x00garbage")
    assert main(["import", str(damaged)]) == 1
    assert "bad.onnx: not a readable ONNX model" in capsys.readouterr().err


def test_cli_import_to_a_checkpoint_holds_the_weights_as_parameters(tmp_path, capsys):
    """``irc import m.onnx -o m.irc``: the initializers are the checkpoint's parameters (the
    IR has no weight constants); irc.load and ``irc run m.irc @x.npy`` give torch's numbers."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5)).eval()
    model[1].running_mean.uniform_(-1, 1)
    path = export(model, torch.randn(1, 3, 8, 8), tmp_path / "m.onnx", dynamic_batch=True)
    out = tmp_path / "m.irc"
    assert main(["import", path, "-o", str(out), "--shape", "x=2x3x8x8"]) == 0
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    loaded = irc.load(out)
    assert set(loaded.params) and set(loaded.params) <= set(weights)
    for name, value in loaded.params.items():
        np.testing.assert_array_equal(value, weights[name])  # the file's bytes, not a copy in the IR
    big = [t for t in weights.values() if t.size > 16]
    text = loaded.module.print()
    assert big and "dense<[" not in text.replace("dense<[]>", "")  # no weight written as a constant
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(loaded(x.numpy()), want, rtol=1e-5, atol=1e-5)
    np.save(tmp_path / "x.npy", x.numpy())
    capsys.readouterr()
    assert main(["run", str(out), f"@{tmp_path / 'x.npy'}"]) == 0
    printed = np.array(ast.literal_eval(capsys.readouterr().out.strip()), np.float32)  # one line per result
    np.testing.assert_allclose(printed, want, rtol=1e-5, atol=1e-5)


def test_checkpoint_of_a_hand_built_graph_against_the_reference_evaluator(tmp_path):
    """Initializers read as values become parameters; one read only as a Reshape's shape (known
    while importing) is not one; two outputs come back as a tuple."""
    rng = np.random.default_rng(5)
    f = TensorProto.FLOAT
    w = rng.standard_normal((6, 4)).astype(np.float32)
    table = rng.standard_normal((10, 6)).astype(np.float32)
    N = helper.make_node
    model = graph_model([N("Gather", ["table", "ids"], ["emb"]),             # [2, 3, 6]
                         N("Reshape", ["emb", "shape"], ["flat"]),           # [6, 6]
                         N("MatMul", ["flat", "w"], ["h"]),                  # [6, 4]
                         N("Tanh", ["h"], ["y"]), N("ReduceSum", ["y"], ["s"], keepdims=0)],
                        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                        [helper.make_tensor_value_info("y", f, [6, 4]), helper.make_tensor_value_info("s", f, [])],
                        [tensor("table", table), tensor("w", w), tensor("shape", np.array([6, 6], np.int64))])
    onnx.checker.check_model(model)
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "g.irc"
    irc.onnx.save_checkpoint(irc.onnx.load(path), [(2, 3)], out)
    loaded = irc.load(out)
    assert sorted(loaded.params) == ["table", "w"]  # "shape" was used while importing only
    ids = rng.integers(0, 10, (2, 3)).astype(np.int64)
    want = ReferenceEvaluator(model).run(None, {"ids": ids})
    got = loaded(ids)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loaded.interpret(ids)[0], want[0], rtol=1e-5, atol=1e-5)


def test_exported_transformer_blocks_with_a_causal_mask(tmp_path):
    """Two pre-norm transformer blocks (fused qkv projection split in three, causal mask from
    Trilu and Not, LayerNormalization, Gelu), exported with symbolic batch and length."""
    torch = pytest.importorskip("torch")
    import math

    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d=32, h=4):
            super().__init__()
            self.h, self.qkv, self.proj = h, nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.reshape(b, n, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.h)
            causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
            att = att.masked_fill(~causal, float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, d))
            return x + self.ff(self.ln2(x))

    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block()).eval()
    path = str(tmp_path / "blocks.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 7, 32),), path, dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch", 1: "length"}})
    imported = irc.onnx.load(path)
    for shape in ((2, 7, 32), (1, 4, 32)):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(imported(x.numpy()), want, rtol=1e-5, atol=1e-5)


def test_is_nan_against_the_reference_evaluator(tmp_path):
    """IsNaN, which torch's dynamo exporter puts around every attention softmax."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]),
             helper.make_node("Where", ["nan", "zero", "x"], ["y"])]
    model = graph_model(nodes, [helper.make_tensor_value_info("x", f, [2, 3])],
                        [helper.make_tensor_value_info("nan", TensorProto.BOOL, [2, 3]),
                         helper.make_tensor_value_info("y", f, [2, 3])],
                        [tensor("zero", np.array(0.0, np.float32))])
    onnx.checker.check_model(model)
    onnx.save(model, str(tmp_path / "nan.onnx"))
    x = np.array([[1.0, np.nan, -np.inf], [np.nan, 0.0, 2.5]], np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = irc.onnx.load(tmp_path / "nan.onnx")(x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("name", ["gpt2", "bert", "encoder_layer"])
def test_transformers_through_torchs_dynamo_exporter(tmp_path, name):
    """GPT-2 and BERT (2 layers, from ``transformers``) and ``nn.TransformerEncoderLayer``,
    exported by ``torch.onnx.export(dynamo=True)`` (which needs onnxscript), equal torch eager."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    if name == "encoder_layer":
        model = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
        args = (torch.randn(2, 16, 64),)
    else:
        transformers = pytest.importorskip("transformers")
        if name == "gpt2":
            config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                                             use_cache=False)
            model = transformers.GPT2Model(config).eval()
        else:
            config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                             intermediate_size=128, vocab_size=100, max_position_embeddings=32)
            model = transformers.BertModel(config).eval()
        args = (torch.randint(0, 100, (2, 16)),)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), dynamo=True, verbose=False)
    with torch.no_grad():
        want = model(*args)
    want = want if isinstance(want, torch.Tensor) else want[0]
    got = irc.onnx.load(path)(*[a.numpy() for a in args])
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
