"""``torch.compile(model, backend="jitnn")`` against eager PyTorch: real
networks (ResNet, MobileNetV3, ViT, BERT with seeded random weights, small
inputs; the full-size ones under ``-m slow``), each mapped aten op on awkward
shapes, what falls back and why, the build cache, the options, and the
backend found by name in a fresh process."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend needs torch")
F = torch.nn.functional

from jitnn.torch_backend import CompiledGraph, counters, jitnn_backend  # noqa: E402

#: largest |jitnn - eager| over the largest |eager| (Winograd 3x3 convolutions
#: round to about 1e-5 of the output's scale)
RTOL = 1e-4


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo keeps at most 8 compilations per code object: start each test
    without the earlier tests' ones (a forward shared by test modules would
    otherwise fall back to eager silently)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled(model, **options):
    """``model`` compiled with the jitnn backend (fixed shapes), and the list
    of the backend's compiled graphs, one per Dynamo graph, as they are made."""
    graphs = []

    def backend(gm, example_inputs):
        made = jitnn_backend(gm, example_inputs, options=options)
        graphs.append(made)
        return made
    return torch.compile(model, backend=backend, dynamic=False), graphs


def assert_close(got, want, rtol=RTOL):
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(float(want.abs().max()), 1e-6)
    error = float((got - want).abs().max())
    assert error <= rtol * scale, f"max |diff| {error:.3g} vs max |eager| {scale:.3g}"


def run_both(model, *inputs, grad_mode=torch.no_grad, **options):
    """Eager and jitnn outputs of ``model`` on ``inputs`` under ``grad_mode``;
    the last build of the (single) compiled graph."""
    fast, graphs = compiled(model, **options)
    with grad_mode():
        want = model(*inputs)
        got = fast(*inputs)
    assert len(graphs) == 1, f"{len(graphs)} Dynamo graphs"
    return got, want, graphs[0].last_build


def check_on_jitnn(model, *inputs, rtol=RTOL, grad_mode=torch.no_grad):
    """``model`` matches eager with every aten op on jitnn."""
    got, want, build = run_both(model, *inputs, grad_mode=grad_mode)
    assert not build.fell_back, build.report
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert_close(g, w, rtol)
    return build


def seeded(module, seed=0):
    """``module`` in eval mode with reproducible random weights and
    batch-norm statistics away from the identity."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if tensor.dtype != torch.float32:
                continue
            if name.endswith("running_var"):
                tensor.uniform_(0.5, 1.5, generator=generator)
            else:
                tensor.normal_(0.0, 0.5, generator=generator)
    return module.eval()


def image(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Lambda(torch.nn.Module):
    """A module around a function of its input and its own parameters."""

    def __init__(self, function, **children):
        super().__init__()
        self.function = function
        for name, child in children.items():
            setattr(self, name, child)

    def forward(self, *inputs):
        return self.function(self, *inputs)


# --- networks ------------------------------------------------------------------------

def test_resnet18_matches_eager():
    from jitnn.bench import zoo
    tv = zoo.import_torchvision()
    torch.manual_seed(0)
    model = zoo.randomize(tv.models.resnet18(num_classes=10))
    zoo.calibrate_batch_norms(model, np.random.default_rng(2).standard_normal(
        (4, 3, 64, 64)).astype(np.float32))
    build = check_on_jitnn(model, image(1, 3, 64, 64))
    assert "in 1 jitnn graph(s), 0 in PyTorch" in build.report


@pytest.mark.parametrize("name", ["mobilenetv3_large", "vit", "bert"])
def test_zoo_models_match_eager(name):
    """MobileNetV3 (hard-swish, squeeze-excitation), ViT and BERT (attention,
    layer norm, GELU): transformers' small configurations, seeded weights."""
    from jitnn.bench import zoo
    built = zoo.build(name, small=True)
    inputs = [torch.from_numpy(v) for v in built.example.values()]
    got, want, build = run_both(built.module, *inputs)
    assert_close(got, want)
    if name == "bert":
        # the attention mask is made from the int64 attention_mask with bool
        # ops, which stay in PyTorch; every float op runs on jitnn
        assert "in 1 jitnn graph(s)" in build.report
        assert "aten.where.self" in build.report and "no jitnn mapping" in build.report
    else:
        assert not build.fell_back, build.report


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "mobilenetv3_large", "bert"])
def test_full_size_models_match_eager(name):
    from jitnn.bench import zoo
    if name == "resnet50":
        tv = zoo.import_torchvision()
        torch.manual_seed(0)
        model = zoo.randomize(tv.models.resnet50())
        zoo.calibrate_batch_norms(model, np.random.default_rng(2).standard_normal(
            (2, 3, 224, 224)).astype(np.float32))
        inputs = [image(1, 3, 224, 224)]
    else:
        built = zoo.build(name)
        model, inputs = built.module, [torch.from_numpy(v) for v in built.example.values()]
    got, want, _ = run_both(model, *inputs)
    assert_close(got, want)


# --- the ops, one at a time on awkward shapes ----------------------------------------------

CONVS = [  # cin, cout, kernel, stride, padding, dilation, groups, bias
    (3, 7, 3, 1, 1, 1, 1, True),
    (1, 9, 3, 2, 0, 1, 1, False),
    (17, 17, 3, 1, 2, 2, 17, True),        # depthwise, dilated
    (9, 6, 1, 1, 0, 1, 3, True),           # grouped 1x1
    (7, 17, 5, 2, 2, 1, 1, True),
    (6, 9, (3, 1), (2, 1), (1, 0), 1, 1, True),
]


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: "-".join(map(str, c)))
def test_convolution(conv):
    cin, cout, kernel, stride, padding, dilation, groups, bias = conv
    layer = seeded(torch.nn.Conv2d(cin, cout, kernel, stride, padding, dilation, groups, bias))
    model = Lambda(lambda m, x: torch.relu(m.conv(x)), conv=layer)
    check_on_jitnn(model, image(2, cin, 11, 9))


def test_transposed_convolution():
    layer = seeded(torch.nn.ConvTranspose2d(7, 5, 3, stride=2, padding=1, output_padding=1))
    check_on_jitnn(Lambda(lambda m, x: torch.sigmoid(m.conv(x)), conv=layer), image(2, 7, 5, 6))


POOLS = {
    "max": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max_ceil": lambda x: F.max_pool2d(x, 2, 2, ceil_mode=True),
    "max_dilated": lambda x: F.max_pool2d(x, 3, 1, 1, dilation=2),
    "avg_pad": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg_no_pad_count": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "avg_ceil": lambda x: F.avg_pool2d(x, 2, 2, ceil_mode=True),
    "adaptive_1x1": lambda x: F.adaptive_avg_pool2d(x, 1),
    "adaptive_3x2": lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pooling(name):
    pool = POOLS[name]
    check_on_jitnn(Lambda(lambda m, x: pool(torch.relu(x))), image(2, 7, 9, 10 if "3x2" in name
                                                                   else 11))


ACTIVATIONS = {
    "relu": torch.relu, "relu6": F.relu6, "hardtanh": lambda x: F.hardtanh(x, -0.5, 2.0),
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "silu": F.silu,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "elu": F.elu,
    "clamp": lambda x: x.clamp(-1.0, 0.5), "rsqrt_abs": lambda x: torch.rsqrt(x.abs() + 1),
    "exp_log": lambda x: torch.log(torch.exp(x) + 2.0),
    "pow": lambda x: x ** 3, "erf": torch.erf,
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(name):
    activation = ACTIVATIONS[name]
    layer = seeded(torch.nn.Conv2d(3, 7, 3))
    check_on_jitnn(Lambda(lambda m, x: activation(m.conv(x)) * 1.5, conv=layer),
                   image(2, 3, 7, 9, seed=2) * 2)


BINARIES = {
    "tensors": lambda x, y: (x + y) * (x - y) / (y.abs() + 1) + x * x,
    "scalars": lambda x, y: (x * 2.5 - 1.0) / 4.0 + y,
    "scalar_first": lambda x, y: (3.0 - x) + 2.0 / (y.abs() + 1) + y,
    "alpha": lambda x, y: torch.add(x, y, alpha=2.0) - torch.sub(y, x, alpha=0.5),
    "broadcast": lambda x, y: x * y[:, :, :1, :1] + y[:1],
    "max_min": lambda x, y: torch.maximum(x, y) - torch.minimum(x, y * 2),
}


@pytest.mark.parametrize("name", list(BINARIES))
def test_binary(name):
    binary = BINARIES[name]
    check_on_jitnn(Lambda(lambda m, x, y: torch.relu(binary(x, y))),
                   image(2, 9, 5, 3, seed=3), image(2, 9, 5, 3, seed=4))


REDUCTIONS = {
    "mean_hw": lambda x: x.mean((2, 3), keepdim=True),
    "sum_c": lambda x: x.sum(1),
    "mean_last": lambda x: x.mean(-1),
    "amax": lambda x: x.amax((1, 3)),
    "log_softmax": lambda x: F.log_softmax(x, dim=1),
    "softmax_last": lambda x: F.softmax(x, dim=-1),
    "softmax_c": lambda x: F.softmax(x, dim=1),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction(name):
    reduction = REDUCTIONS[name]
    check_on_jitnn(Lambda(lambda m, x: reduction(torch.tanh(x))), image(2, 17, 5, 7))


@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.inference_mode])
def test_batch_and_layer_normalization(grad_mode):
    """(Under inference_mode batch norm traces to another aten op.)"""
    def forward(m, x):
        y = m.bn(torch.relu(x))
        z = m.ln(y.permute(0, 2, 3, 1))
        return m.ln2(torch.sigmoid(z)), y
    model = Lambda(forward, bn=seeded(torch.nn.BatchNorm2d(7)),
                   ln=seeded(torch.nn.LayerNorm(7)), ln2=seeded(torch.nn.LayerNorm((5, 7))))
    check_on_jitnn(model, image(2, 7, 3, 5), grad_mode=grad_mode)


def test_products():
    def forward(m, x, y):
        a = m.fc(x)                                   # 3-D linear: view + addmm
        b = torch.bmm(a, y)                           # (2, 5, 9) x (2, 9, 3)
        c = torch.matmul(b, m.w)                      # broadcast a (3, 4) matrix
        d = torch.mm(x[0], m.fc.weight.t())           # a parameter's transpose
        return torch.relu(c), F.gelu(d)
    model = Lambda(forward, fc=seeded(torch.nn.Linear(7, 9)))
    model.w = torch.nn.Parameter(image(3, 4, seed=5))
    check_on_jitnn(model, image(2, 5, 7), image(2, 9, 3, seed=6))


def test_movement():
    def forward(m, x):
        y = torch.relu(x)
        parts = [y.permute(0, 2, 1, 3), y.transpose(1, 2).contiguous() * 2,
                 y[:, 1:5:2].transpose(1, 2)]
        z = torch.cat(parts, dim=2)                           # (2, 3, 7 + 7 + 2, 5)
        w = z.select(3, 4).unsqueeze(-1).expand(2, 3, 16, 4)
        return torch.sigmoid(torch.cat([z[..., :4], w], 1).squeeze(0).view(2, -1, 4).clone())
    check_on_jitnn(Lambda(forward), image(2, 7, 3, 5))


@pytest.mark.parametrize("case", ["fused", "mask", "causal", "bshd", "math", "math_masked"])
def test_attention(case):
    """PyTorch's CPU flash attention as jitnn's fused attention (also on the
    untransposed (B, S, H, D) tensors); with a value head size other than
    the key's, its math path (matmuls and _safe_softmax, whose rows of -inf
    give 0)."""
    def forward(m, q, k, v, mask):
        if case == "bshd":        # the transformers' (B, S, H, D) -> (B, H, S, D) transposes
            q, k, v = (torch.relu(t).transpose(1, 2) for t in (q, k, v))
            return F.scaled_dot_product_attention(q, k, v).transpose(1, 2) * 2
        q = torch.relu(q)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask if "mask" in case else None, is_causal=case == "causal") * 2
    value = 6 if "math" in case else 5
    shapes = [(2, 7, 3, 5), (2, 9, 3, 5), (2, 9, 3, value)] if case == "bshd" else \
        [(2, 3, 7, 5), (2, 3, 9, 5), (2, 3, 9, value)]
    mask = image(2, 1, 7, 9, seed=7)
    mask[1, 0, 2] = -torch.inf               # a query row with every key masked out
    if case == "mask":
        mask[1, 0, 2, 0] = 0.0               # (the fused kernel gives NaN there, as PyTorch's)
    build = check_on_jitnn(Lambda(forward), *(image(*s, seed=i) for i, s in enumerate(shapes)),
                           mask)
    fused = "scaled_dot_product_attention" in str(build.module.jitnn_0.graph)
    assert fused != ("math" in case)


def test_embedding():
    model = Lambda(lambda m, ids: torch.tanh(m.fc(m.embed(ids))),
                   embed=seeded(torch.nn.Embedding(11, 6)), fc=seeded(torch.nn.Linear(6, 3)))
    ids = torch.tensor([[0, 3, 10, 5, 5], [1, 2, 9, 0, 7]])
    check_on_jitnn(model, ids)


# --- fallback, cache, options -------------------------------------------------------

def test_an_op_jitnn_lacks_falls_back_and_still_matches(caplog):
    def forward(m, x):
        y = torch.cumsum(torch.relu(m.conv(x)), dim=1)      # no jitnn mapping
        return m.fc(torch.sigmoid(y).mean((2, 3)))
    model = Lambda(forward, conv=seeded(torch.nn.Conv2d(3, 9, 3, padding=1)),
                   fc=seeded(torch.nn.Linear(9, 4)))
    with caplog.at_level(logging.WARNING, logger="jitnn.torch_backend"):
        got, want, build = run_both(model, image(2, 3, 7, 5))
    assert_close(got, want)
    assert build.fell_back
    assert "in 2 jitnn graph(s), 1 in PyTorch" in build.report
    assert "aten.cumsum.default x1: no jitnn mapping" in build.report
    assert build.report in caplog.text                  # logged once, with the reason


def test_a_dtype_jitnn_lacks_stays_in_pytorch():
    model = Lambda(lambda m, x: torch.relu(m.conv(x.double()).float()),
                   conv=seeded(torch.nn.Conv2d(3, 4, 3)).double())
    got, want, build = run_both(model, image(1, 3, 6, 6))
    assert_close(got, want)
    assert "aten.convolution.default x1: a torch.float64 tensor" in build.report


def test_a_graph_that_fails_to_build_runs_in_eager_pytorch(monkeypatch, caplog):
    from jitnn.torch_backend import _compile

    def fail(gm, args):
        raise RuntimeError("cannot trace this")
    monkeypatch.setattr(_compile, "trace_aten", fail)
    model = Lambda(lambda m, x: torch.relu(m.conv(x)), conv=seeded(torch.nn.Conv2d(3, 5, 3)))
    with caplog.at_level(logging.WARNING, logger="jitnn.torch_backend"):
        got, want, build = run_both(model, image(1, 3, 6, 6))
    assert_close(got, want)
    assert build.fell_back and "RuntimeError: cannot trace this" in build.report
    assert build.report in caplog.text


def test_a_partition_jitnn_fails_to_run_runs_in_pytorch(monkeypatch, caplog):
    import jitnn

    def fail(self, graph, inputs, outputs):
        raise jitnn.JitnnExecutionError("conv2d: the kernel failed")
    monkeypatch.setattr(jitnn.Context, "compute", fail)
    model = Lambda(lambda m, x: torch.relu(m.conv(x)), conv=seeded(torch.nn.Conv2d(3, 6, 3)))
    before = counters["fallbacks"]
    with caplog.at_level(logging.WARNING, logger="jitnn.torch_backend"):
        got, want, _ = run_both(model, image(1, 3, 6, 6))
    assert_close(got, want)
    assert counters["fallbacks"] == before + 1
    assert "runs in PyTorch from now on: conv2d: the kernel failed" in caplog.text


def test_a_second_call_at_the_same_shapes_does_not_build():
    model = Lambda(lambda m, x: torch.relu(m.conv(x)), conv=seeded(torch.nn.Conv2d(3, 8, 3)))
    fast, graphs = compiled(model)
    x = image(2, 3, 9, 9)
    with torch.no_grad():
        before = counters["builds"]
        first = fast(x)
        second = fast(x + 1)
        assert counters["builds"] == before + 1
        assert_close(second, model(x + 1))
        assert_close(first, model(x))
        # a parameter changed in place: its packed copy is stale, so it builds again
        model.conv.weight.mul_(-2.0)
        assert_close(fast(x), model(x))
        assert counters["builds"] == before + 2
    assert len(graphs) == 1


def test_tensors_cross_without_copies(monkeypatch):
    """A contiguous float32 input is read in place by jitnn; the output is
    the array jitnn computed into."""
    import jitnn
    seen = {}
    compute = jitnn.Context.compute

    def spy(self, graph, inputs, outputs):
        seen.update(inputs=dict(inputs), outputs=dict(outputs))
        return compute(self, graph, inputs, outputs)
    monkeypatch.setattr(jitnn.Context, "compute", spy)
    model = Lambda(lambda m, x: torch.relu(m.conv(x)), conv=seeded(torch.nn.Conv2d(3, 8, 3)))
    fast, _ = compiled(model)
    x = image(1, 3, 9, 9)
    with torch.no_grad():
        y = fast(x)
    (given,), (computed,) = seen["inputs"].values(), seen["outputs"].values()
    assert np.shares_memory(given, x.numpy()) and np.shares_memory(computed, y.numpy())
    with torch.no_grad():
        assert_close(y, model(x))


def test_options_explain_threads_and_policy(capsys):
    model = Lambda(lambda m, x: torch.relu(m.conv(x)), conv=seeded(torch.nn.Conv2d(3, 9, 3)))
    got, want, build = run_both(model, image(1, 3, 7, 7), explain=True)
    assert_close(got, want)
    printed = capsys.readouterr().out
    assert build.report in printed                         # what runs where
    assert "plan that computed" in printed and "conv2d + relu" in printed   # jitnn's plan
    fast, graphs = compiled(model, num_threads=1, policy="eager")
    with torch.no_grad():
        fast(image(1, 3, 7, 7))
    assert graphs[0].ctx.num_threads == 1 and graphs[0].ctx.policy == "eager"


def test_an_unknown_option_is_refused():
    fast, _ = compiled(torch.nn.ReLU(), threads=2)
    with pytest.raises(Exception, match="unknown option.*threads"):
        fast(image(2, 3))


def test_gradients_run_in_eager_pytorch(caplog):
    model = seeded(torch.nn.Linear(5, 3))
    fast, graphs = compiled(model)
    x = image(4, 5)
    with caplog.at_level(logging.WARNING, logger="jitnn.torch_backend"):
        y = fast(x)
    assert y.requires_grad
    assert not isinstance(graphs[0], CompiledGraph)  # Dynamo's own graph, handed back
    y.sum().backward()
    assert model.weight.grad is not None
    assert "runs inference only" in caplog.text


def test_the_backend_is_found_by_name_without_importing_jitnn(tmp_path):
    code = textwrap.dedent("""
        import sys, torch
        assert "jitnn" in torch._dynamo.list_backends()
        assert "jitnn" not in sys.modules
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.ReLU()).eval()
        x = torch.randn(1, 3, 8, 8)
        with torch.no_grad():
            y = torch.compile(model, backend="jitnn")(x)
            print(float((y - model(x)).abs().max()), "jitnn.torch_backend" in sys.modules)
    """)
    # run elsewhere than the source tree, whose build metadata may be stale
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    error, loaded = done.stdout.split()
    assert float(error) < 1e-4 and loaded == "True"
