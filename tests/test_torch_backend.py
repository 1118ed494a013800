"""``torch.compile(model, backend="irc")`` on real models, against torch eager.

Random weights, nothing downloaded.  Each test checks that irc (not a fallback) ran the
graphs (``COUNTS``, and fallback warnings turned into errors) and that outputs and
gradients equal eager's: inference within f32 rounding of eager, gradients within a few
times eager-f32's own distance from an f64 reference (the losses here are sums over many
terms, whose f32 gradients are only that good in torch too).
"""

from __future__ import annotations

import copy
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from irc.torch import IrcFallbackWarning  # noqa: E402
from irc.torch.runtime import COUNTS, _array  # noqa: E402

nn = torch.nn


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    COUNTS.clear()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def irc_only():
    """A context in which a fallback is an error (so a test cannot pass on torch's numbers)."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", IrcFallbackWarning)
    return ctx


def infer(model, *inputs):
    """(eager output, irc output) of ``model`` in eval mode without gradients."""
    model.eval()
    compiled = torch.compile(model, backend="irc")
    ctx = irc_only()
    try:
        with torch.no_grad():
            return model(*inputs), compiled(*inputs)
    finally:
        ctx.__exit__(None, None, None)


def first(y):
    return y if isinstance(y, torch.Tensor) else y[0]


def assert_close(got, want, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=atol)


def assert_gradients(model, loss_of, *inputs):
    """Gradients of ``loss_of(model(*inputs))`` through irc against eager f32 and eager f64."""
    model.train()
    eager, reference, mine = model, copy.deepcopy(model).double(), copy.deepcopy(model)
    compiled = torch.compile(mine, backend="irc")
    loss_of(first(eager(*inputs))).backward()
    loss_of(first(reference(*[x.double() if x.is_floating_point() else x for x in inputs]))).backward()
    ctx = irc_only()
    try:
        loss_of(first(compiled(*inputs))).backward()
    finally:
        ctx.__exit__(None, None, None)
    checked = 0
    for (name, p), q, r in zip(eager.named_parameters(), mine.parameters(), reference.parameters()):
        if r.grad is None:
            continue
        scale = r.grad.abs().max().item() + 1e-30
        torch_error = (p.grad.double() - r.grad).abs().max().item()
        irc_error = (q.grad.double() - r.grad).abs().max().item()
        assert irc_error <= 4 * torch_error + 1e-6 * scale, (name, irc_error, torch_error, scale)
        checked += 1
    assert checked and COUNTS["irc"] >= 2 and not COUNTS["torch"]  # forward and backward by irc


def weighted_sum(y):
    """A loss whose gradient is a fixed random tensor (well conditioned, unlike a sum of squares)."""
    g = torch.Generator().manual_seed(1)
    return (y * torch.randn(y.shape, generator=g, dtype=y.dtype)).sum()


# ---- plumbing -------------------------------------------------------------------------------------


def test_import_irc_does_not_import_torch():
    code = "import irc, sys; assert 'torch' not in sys.modules; import irc.torch; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_backend_is_registered_by_name():
    from torch._dynamo.backends.registry import lookup_backend

    import irc.torch

    assert lookup_backend("irc") is irc.torch.backend


def test_inputs_reach_irc_without_copies():
    t = torch.randn(4, 5)
    assert _array(t).ctypes.data == t.data_ptr()
    view = torch.randn(6, 5)[2:]  # contiguous with an offset: still shared
    assert _array(view).ctypes.data == view.data_ptr()


# ---- inference ------------------------------------------------------------------------------------


def test_mlp():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 10),
                          nn.LogSoftmax(-1))
    want, got = infer(model, torch.randn(8, 16))
    assert_close(got, want)
    assert COUNTS == {"irc": 1}


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(3, stride=1, padding=1), nn.AvgPool2d(2, padding=1, count_include_pad=False),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


@pytest.mark.parametrize("batch", [1, 8])
def test_cnn_conv_batchnorm_pooling(batch):
    model = cnn()
    for bn in (model[1], model[5]):  # running statistics that are not the identity
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    want, got = infer(model, torch.randn(batch, 3, 16, 16))
    assert_close(got, want)
    assert COUNTS == {"irc": 1}


def test_conv1d_and_grouped_conv():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv1d(4, 6, 3, stride=2, padding=1)
            self.c2 = nn.Conv2d(6, 6, 3, groups=3, padding=1)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            return self.c2(y.reshape(y.shape[0], 6, 2, -1)).sigmoid()

    want, got = infer(Net(), torch.randn(2, 4, 16))
    assert_close(got, want)


def test_transformer_encoder_layer():
    torch.backends.mha.set_fastpath_enabled(False)  # the fused inference kernel has no decomposition
    try:
        model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation="gelu")
        x = torch.randn(2, 5, 32)
        mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
        want, got = infer(model, x, None, mask)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert_close(got, want)


def gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                     eos_token_id=0)
    return transformers.GPT2Model(config)


def bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                     intermediate_size=64, vocab_size=100, max_position_embeddings=16,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertModel(config)


def test_gpt2():
    ids = torch.randint(0, 100, (2, 7))
    want, got = infer(gpt2(), ids)
    assert_close(got.last_hidden_state, want.last_hidden_state)


def test_bert_with_attention_mask():
    ids = torch.randint(0, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    model = bert()
    model.eval()
    compiled = torch.compile(model, backend="irc")
    ctx = irc_only()
    try:
        with torch.no_grad():
            want, got = model(ids, attention_mask=mask), compiled(ids, attention_mask=mask)
    finally:
        ctx.__exit__(None, None, None)
    assert_close(got.last_hidden_state, want.last_hidden_state)
    assert_close(got.pooler_output, want.pooler_output)


def test_dynamic_shapes_recompile_per_shape():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 10), nn.Softmax(-1))
    model.eval()
    compiled = torch.compile(model, backend="irc")
    ctx = irc_only()
    try:
        with torch.no_grad():
            for n in (2, 3, 5, 3):
                x = torch.randn(n, 16)
                assert_close(compiled(x), model(x))
    finally:
        ctx.__exit__(None, None, None)
    assert COUNTS["irc"] == 3 and not COUNTS["torch"]  # one compilation per shape


# ---- training -------------------------------------------------------------------------------------


def test_cnn_training_loop():
    model = cnn()
    mine = copy.deepcopy(model)
    compiled = torch.compile(mine, backend="irc")
    x, labels = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    opt, my_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(mine.parameters(), lr=0.1)
    ctx = irc_only()
    try:
        for _ in range(3):
            for net, optimiser in ((model, opt), (compiled, my_opt)):
                optimiser.zero_grad()
                nn.functional.cross_entropy(net(x), labels).backward()
                optimiser.step()
    finally:
        ctx.__exit__(None, None, None)
    for p, q in zip(model.parameters(), mine.parameters()):
        assert_close(q, p, rtol=1e-4, atol=1e-5)
    for a, b in zip(model.buffers(), mine.buffers()):  # batch norm's running statistics
        assert_close(b.float(), a.float(), rtol=1e-4, atol=1e-5)
    assert COUNTS["irc"] >= 2 and not COUNTS["torch"]


def test_cnn_gradients():
    assert_gradients(cnn(), weighted_sum, torch.randn(2, 3, 16, 16))


def test_transformer_encoder_layer_gradients():
    model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    assert_gradients(model, weighted_sum, torch.randn(2, 5, 32))


def test_gpt2_gradients():
    assert_gradients(gpt2(), weighted_sum, torch.randint(0, 100, (2, 7)))


# ---- fallback ---------------------------------------------------------------------------------------


def test_unknown_op_falls_back_with_one_line():
    class Cumulative(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1) * 2

    x = torch.randn(3, 4)
    compiled = torch.compile(Cumulative(), backend="irc")
    with pytest.warns(IrcFallbackWarning) as record:
        got = compiled(x)
    assert torch.equal(got, Cumulative()(x))
    messages = [str(w.message) for w in record if w.category is IrcFallbackWarning]
    assert len(messages) == 1 and "aten.cumsum" in messages[0] and "\n" not in messages[0]
    assert COUNTS == {"torch": 1}


def test_unsupported_form_falls_back_with_one_line():
    conv = nn.Conv3d(3, 4, 3)
    x = torch.randn(1, 3, 5, 5, 5)
    compiled = torch.compile(conv, backend="irc")
    with pytest.warns(IrcFallbackWarning, match=r"aten\.convolution.*3-d convolution"):
        with torch.no_grad():
            got = compiled(x)
    with torch.no_grad():
        assert torch.equal(got, conv(x))


def test_graph_is_split_around_an_unknown_op():
    """irc compiles the parts before and after the op torch runs, forward and backward."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)

        def forward(self, x):
            return self.l2(torch.cumsum(torch.relu(self.l1(x)), 1) * 2).tanh()

    model = Net()
    compiled = torch.compile(model, backend="irc")
    x = torch.randn(3, 4, requires_grad=True)
    with pytest.warns(IrcFallbackWarning, match=r"aten\.cumsum.*irc compiles the rest") as record:
        got = compiled(x)
        got.sum().backward()
    assert len([w for w in record if w.category is IrcFallbackWarning]) == 2  # forward, backward
    mine = x.grad.clone()
    x.grad = None
    want = model(x)
    want.sum().backward()
    assert_close(got, want)
    assert_close(mine, x.grad)
    assert COUNTS["irc"] >= 3  # parts of the forward and of the backward graph


def test_bert_gradients():
    """BERT's backward: expanded (stride-0) outputs, the token-type gather, the attention mask."""
    assert_gradients(bert(), weighted_sum, torch.randint(0, 100, (2, 7)))


# ---- scatter-add: embedding gradients and index_put ---------------------------------------------------


def test_embedding_gradient_is_a_scatter_add(monkeypatch):
    """The backward of an embedding (repeated tokens, a vocabulary far wider than the batch) is
    one ``graph.scatter_add``, not a one-hot product; its gradient equals eager's."""
    from irc.torch import runtime

    modules = []
    convert = runtime.convert

    def recording(gm, inputs, *args, **kwargs):
        graph = convert(gm, inputs, *args, **kwargs)
        modules.append(graph.module)
        return graph

    monkeypatch.setattr(runtime, "convert", recording)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.out = nn.Embedding(1000, 16), nn.Linear(16, 4)

        def forward(self, ids):
            return self.out(torch.tanh(self.emb(ids)))

    ids = torch.tensor([[3, 999, 3, 7], [7, 3, 0, 512]])
    assert_gradients(Net(), weighted_sum, ids)
    names = [op.name for m in modules for op in m.walk()]
    assert "graph.scatter_add" in names
    shapes = [r.type.shape for m in modules for op in m.walk() if op.name == "graph.matmul" for r in op.results]
    assert all(1000 not in s for s in shapes)  # no [1000, tokens] one-hot product


@pytest.mark.parametrize("where", ["rows", "pairs", "columns"])
def test_index_put_accumulate_adds_repeated_indices(where):
    class Put(nn.Module):
        def forward(self, x, v, i, j):
            if where == "rows":
                return torch.index_put(x, (i,), v, accumulate=True) * 2
            if where == "pairs":
                return torch.index_put(x, (i, j), v, accumulate=True) * 2
            return torch.ops.aten.index_put(x, [None, j], v, True) * 2

    x = torch.randn(6, 5, 3)
    i, j = torch.tensor([[0, 5, 0], [-1, 2, 0]]), torch.tensor([[1, 1, 4], [0, 1, -5]])
    v = {"rows": torch.randn(2, 3, 5, 3), "pairs": torch.randn(3, 3), "columns": torch.randn(6, 2, 3, 3)}[where]
    want, got = infer(Put(), x, v, i, j)
    assert_close(got, want)
    assert COUNTS == {"irc": 1}


# ---- dilated, transposed and grouped convolutions ---------------------------------------------------


CONVOLUTIONS = {
    "dilated": lambda: nn.Conv2d(3, 4, 3, dilation=2, padding=1, stride=2),
    "dilated-1d": lambda: nn.Conv1d(3, 4, 3, dilation=3),
    "dilated-grouped": lambda: nn.Conv2d(4, 6, (3, 2), dilation=(1, 2), groups=2, padding=(1, 0)),
    "transposed": lambda: nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
    "transposed-dilated": lambda: nn.ConvTranspose2d(3, 4, (2, 3), stride=(1, 2), dilation=(2, 1), padding=(2, 0)),
    "transposed-grouped": lambda: nn.ConvTranspose2d(4, 6, 3, stride=3, groups=2, padding=2),
    "transposed-1d": lambda: nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1),
}


@pytest.mark.parametrize("kind", CONVOLUTIONS)
def test_dilated_and_transposed_convolutions(kind):
    """Forward (irc, no fallback) against eager, and the gradients of input, weight and bias
    against an f64 reference."""
    conv = CONVOLUTIONS[kind]()
    x = torch.randn(2, conv.in_channels, *((9,) if "1d" in kind else (9, 8)))
    want, got = infer(conv, x)
    assert_close(got, want)
    assert COUNTS == {"irc": 1}
    torch._dynamo.reset()
    COUNTS.clear()

    class WithInputGradient(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.x = conv, nn.Parameter(x.clone())

        def forward(self, scale):
            return self.conv(self.x * scale)

    assert_gradients(WithInputGradient(), weighted_sum, torch.tensor(1.5))


@pytest.mark.parametrize("norm_first, activation, masked", [(False, "relu", False), (False, "gelu", True),
                                                            (True, "gelu", True)])
def test_transformer_encoder_layer_fast_path(norm_first, activation, masked):
    """In eval without gradients PyTorch runs the layer as one fused op
    (``_transformer_encoder_layer_fwd``), which irc compiles as its parts."""
    model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation=activation,
                                       norm_first=norm_first)
    x = torch.randn(2, 5, 32)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2]) if masked else None
    model.eval()
    compiled = torch.compile(model, backend="irc")
    seen = []
    ctx = irc_only()
    try:
        with torch.no_grad():
            want = model(x, src_key_padding_mask=mask)
            from irc.torch import runtime
            convert = runtime.convert

            def recording(gm, inputs, *args, **kwargs):
                seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
                return convert(gm, inputs, *args, **kwargs)

            runtime.convert = recording
            try:
                got = compiled(x, src_key_padding_mask=mask)
            finally:
                runtime.convert = convert
    finally:
        ctx.__exit__(None, None, None)
    assert any("_transformer_encoder_layer_fwd" in t for t in seen)  # the fast path, not its decomposition
    assert_close(got, want)
    assert COUNTS == {"irc": 1}


@pytest.mark.parametrize("kernel, size", [(2, (9, 7)), ((2, 3), (8, 9)), (3, (6, 6))])
def test_max_pool_gradient_with_windows_that_tile_the_input(kernel, size):
    """Stride equal to the kernel, no padding: each input element in at most one window (irc's
    elementwise form of the backward); rows and columns past the last window get no gradient,
    and of equal maxima (rounded inputs tie) the one torch's index names gets it all."""

    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.x = nn.Parameter(torch.round(torch.randn(2, 3, *size) * 2))

        def forward(self, scale):
            return nn.functional.max_pool2d(self.x * scale, kernel)

    model = Pool()
    compiled = torch.compile(copy.deepcopy(model), backend="irc")
    ctx = irc_only()
    try:
        weighted_sum(compiled(torch.tensor(1.5))).backward()
    finally:
        ctx.__exit__(None, None, None)
    weighted_sum(model(torch.tensor(1.5))).backward()
    assert_close(compiled._orig_mod.x.grad, model.x.grad, rtol=0, atol=0)
    assert COUNTS["irc"] >= 2 and not COUNTS["torch"]


@pytest.mark.parametrize("kernel, stride, padding", [(2, 2, 0), (3, 2, 1), ((2, 3), 1, (1, 0))])
@pytest.mark.parametrize("nans", [False, True])
def test_max_pool_values_and_indices_equal_torchs_with_ties(kernel, stride, padding, nans):
    """torch's index is the first maximum of a window (in row order, padding never), or its last
    NaN, whose value the window then has: inputs rounded to a few values tie in most windows,
    -inf fills some, and NaN is sprinkled over others."""

    class Pool(nn.Module):
        def forward(self, x):
            return nn.functional.max_pool2d(x, kernel, stride, padding, return_indices=True)

    x = torch.round(torch.randn(2, 3, 9, 8))
    x[0, 0, :3, :3] = -torch.inf
    if nans:
        x[torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) < 0.15] = torch.nan
    want, got = infer(Pool(), x)
    assert torch.equal(got[0].isnan(), want[0].isnan()) and (not nans or want[0].isnan().any())
    assert_close(got[0].nan_to_num(7.5), want[0].nan_to_num(7.5), rtol=0, atol=0)
    assert torch.equal(got[1], want[1])
    assert COUNTS == {"irc": 1}


def test_parameter_arrays_are_reused_and_follow_their_memory():
    """A parameter's array is made once (``runtime._arrays``); an in-place update is seen through it,
    and a parameter given new memory (``p.data = ...``) gets a new array."""
    model = nn.Sequential(nn.Linear(8, 4), nn.Tanh())
    model.eval()
    compiled = torch.compile(model, backend="irc")
    x = torch.randn(3, 8)
    ctx = irc_only()
    try:
        with torch.no_grad():
            assert_close(compiled(x), model(x))
            model[0].weight.mul_(-2.0)  # same memory
            assert_close(compiled(x), model(x))
            model[0].weight.data = torch.randn(4, 8)  # new memory
            model[0].bias.data = torch.randn(4)
            assert_close(compiled(x), model(x))
    finally:
        ctx.__exit__(None, None, None)
    assert COUNTS["irc"] >= 1 and not COUNTS["torch"]
