"""The public conv2d op: WebNN semantics, validation, blocked chains, filter reuse.

The kernels themselves are tested exhaustively in test_conv2d_kernels.py and the
other test_conv2d_*_kernels.py files (one per kernel family); this file tests
the op around them against the float64 reference in jitnn.ops.conv2d.
"""

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference
from tests.helpers import assert_schedule, random
from tests.wpt import arguments, float32_cases


def _check(got, want, k_sum):
    tol = 1e-5 * max(1.0, np.sqrt(k_sum))
    np.testing.assert_allclose(got, want, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("case", float32_cases("wpt_conv2d.json"), ids=lambda c: c[0])
def test_webnn_conformance(case):
    _, arrays, operator, want = case
    (x, w), options = arguments(operator, arrays)
    got = jitnn.conv2d(x, w, **options).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("filter_layout,to_layout", [
    ("oihw", (0, 1, 2, 3)), ("hwio", (2, 3, 1, 0)), ("ohwi", (0, 2, 3, 1)), ("ihwo", (1, 2, 3, 0))])
@pytest.mark.parametrize("input_layout", ["nchw", "nhwc"])
def test_every_layout_combination(input_layout, filter_layout, to_layout):
    x = random((2, 9, 7, 11), 1)
    groups = 3 if filter_layout != "ihwo" else 9
    w = random((18, 9 // groups, 3, 2), 2)
    b = random((18,), 3)
    xin = x if input_layout == "nchw" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    win = np.ascontiguousarray(w.transpose(to_layout))
    got = jitnn.conv2d(xin, win, b, strides=(2, 1), padding=(1, 0, 2, 1), dilations=(1, 2),
                       groups=groups, input_layout=input_layout, filter_layout=filter_layout,
                       activation="relu6").numpy()
    want = conv2d_reference(x, w, b, strides=(2, 1), padding=(1, 0, 2, 1), dilations=(1, 2),
                            groups=groups, activation="relu6")
    if input_layout == "nhwc":
        want = want.transpose(0, 2, 3, 1)
    assert got.shape == want.shape
    _check(got, want, 9 // groups * 6)


@pytest.mark.parametrize("activation", [None, "relu", "relu6", ("clamp", -0.5, 0.25),
                                        ("leaky_relu", 0.2), "leaky_relu", "sigmoid", "tanh",
                                        "hard_swish", "gelu"])
def test_activations_through_the_op(activation):
    x, w, b = random((1, 9, 6, 5), 4), random((7, 9, 3, 3), 5), random((7,), 6)
    got = jitnn.conv2d(x, w, b, padding=1, activation=activation).numpy()
    _check(got, conv2d_reference(x, w, b, padding=1, activation=activation), 81)


PATH_CASES = [
    (3, 16, 7, 2, 1),      # first layer: reads nchw directly
    (17, 9, 3, 1, 1), (16, 16, 3, 1, 16), (8, 16, 3, 2, 8), (64, 17, 1, 1, 1), (12, 6, 3, 1, 3)]


def _path_and_block_cases():
    """Every path on the host's block; on the other of 8 and 16 only the 1x1
    in the default run, and block 4 (tests/portable_check.py's) only in the
    slow run: each other path compiles a driver of its own there (~60 s of
    the default run on a cold cache)."""
    for block in (4, 8, 16):
        for case in PATH_CASES:
            slow = block != jitnn.host_block() and (block == 4 or case != (64, 17, 1, 1, 1))
            yield pytest.param(block, *case, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("block,c_in,c_out,kernel,stride,groups", list(_path_and_block_cases()))
def test_paths_and_block_sizes(block, c_in, c_out, kernel, stride, groups):
    ctx = jitnn.Context(block=block)
    x, w = random((3, c_in, 9, 11), 7), random((c_out, c_in // groups, kernel, kernel), 8)
    got = jitnn.conv2d(ctx.tensor(x), ctx.tensor(w), strides=stride, padding=kernel // 2,
                       groups=groups).numpy()
    _check(got, conv2d_reference(x, w, strides=stride, padding=kernel // 2, groups=groups),
           c_in // groups * kernel * kernel)


def test_output_stays_blocked_and_a_chain_reorders_once_each_way():
    ctx = jitnn.Context()
    x = ctx.tensor(random((1, 16, 12, 12), 9))
    ws = [ctx.tensor(random((16, 16, 3, 3), 10 + i)) for i in range(3)]
    ctx.reset_stats()
    c = jitnn.conv2d(x, ws[0], padding=1, activation="relu")
    e = jitnn.conv2d(c, ws[1], padding=1, activation="relu")
    h = jitnn.conv2d(e, ws[2], padding=1, activation="relu")
    assert h.layout == f"nChw{ctx.block}c" and h.pending
    assert ctx.stats == jitnn.Stats()  # nothing ran yet, not even filter packing
    with assert_schedule(ctx, kernels=3, reorders=2):  # one reorder in, one out
        out = h.numpy()
    assert ctx.stats.filter_packs == 3 and ctx.stats.flushes == 1
    want = np.asarray(x)
    for w in ws:
        want = conv2d_reference(want, np.asarray(w), padding=1, activation="relu")
    _check(out, want, 16 * 9 * 3)


def test_a_filter_tensor_is_packed_once():
    ctx = jitnn.Context()
    w = ctx.tensor(random((8, 8, 3, 3), 11))
    ctx.reset_stats()
    for seed in range(3):
        jitnn.conv2d(ctx.tensor(random((1, 8, 5, 5), seed)), w, padding=1).numpy()
    assert ctx.stats.filter_packs == 1


def test_a_plain_input_shared_by_two_convs_is_reordered_once():
    ctx = jitnn.Context()
    x = ctx.tensor(random((1, 16, 6, 6), 12))
    w1, w2 = ctx.tensor(random((8, 16, 1, 1), 13)), ctx.tensor(random((8, 16, 3, 3), 14))
    with assert_schedule(ctx, reorders=1 + 2):
        jitnn.read_all([jitnn.conv2d(x, w1), jitnn.conv2d(x, w2, padding=1)])


def test_numpy_inputs_are_copied_at_the_call(monkeypatch):
    import importlib
    modules = [importlib.import_module(name) for name in ("jitnn.ops._common", "jitnn.tensor")]
    copied = []
    copy = modules[1].as_float32_copy
    for module in modules:
        monkeypatch.setattr(module, "as_float32_copy",
                            lambda data, op="tensor": copied.append(data) or copy(data, op))
    x, w = random((1, 8, 5, 5), 15), random((8, 8, 3, 3), 16)
    y = jitnn.conv2d(x, w, padding=1)
    assert len(copied) == 2 and copied[0] is x and copied[1] is w      # once each
    want = conv2d_reference(x, w, padding=1)
    x[...] = 0
    w[...] = 0
    _check(y.numpy(), want, 72)


@pytest.mark.parametrize("kwargs,error,message", [
    ({"w": (4, 4, 3, 3)}, ValueError,
     r"conv2d: input has 3 channels but the filter expects 4 \(x \(1, 3, 8, 8\) nchw, w \(4, 4, 3, 3\) oihw, groups 1\)"),
    ({"groups": 2, "w": (4, 1, 3, 3), "x": (1, 3, 8, 8)}, ValueError, "input has 3 channels but the filter expects 2"),
    ({"groups": 2, "w": (3, 2, 3, 3), "x": (1, 4, 8, 8)}, ValueError, "3 output channels do not divide into 2 groups"),
    ({"groups": 0}, ValueError, "groups must be an int >= 1, got 0"),
    ({"strides": 0}, ValueError, "strides must be >= 1, got 0"),
    ({"strides": (1, 2, 3)}, TypeError, "strides must be an int or a pair"),
    ({"dilations": "2"}, TypeError, "dilations must be an int or a pair"),
    ({"padding": -1}, ValueError, "padding must be >= 0"),
    ({"padding": (1, 2, 3)}, TypeError, r"padding must be an int, an \(h, w\) pair or \[top, bottom, left, right\]"),
    ({"w": (4, 3, 9, 9)}, ValueError, r"the output would be 0x0: input 8x8, kernel 9x9"),
    ({"x": (3, 8, 8)}, ValueError, r"input x must be 4-D, got shape \(3, 8, 8\)"),
    ({"w": (4, 3, 3)}, ValueError, "filter w must be 4-D"),
    ({"bias": (5,)}, ValueError, r"bias must have shape \(4,\) for 4 output channels, got \(5,\)"),
    ({"input_layout": "nChw8c"}, ValueError, "input_layout must be 'nchw' or 'nhwc'"),
    ({"filter_layout": "iohw"}, ValueError, "filter_layout must be one of"),
    ({"activation": "softmax"}, ValueError, "activation must be None, one of"),
    ({"activation": ("clamp", 1.0)}, ValueError, "activation 'clamp' takes 2 number"),
    ({"activation": ("clamp", 6.0, 0.0)}, ValueError, "clamp needs min <= max"),
])
def test_bad_arguments_name_the_option_and_shapes(kwargs, error, message):
    x = random(kwargs.pop("x", (1, 3, 8, 8)))
    w = random(kwargs.pop("w", (4, 3, 3, 3)), 1)
    if "bias" in kwargs:
        kwargs["bias"] = random(kwargs["bias"], 2)
    with assert_schedule(jitnn.default_context(), kernels=0):   # nothing ran
        with pytest.raises(error, match=message) as info:
            jitnn.conv2d(x, w, **kwargs)
    assert isinstance(info.value, jitnn.JitnnError)


def test_complex_input_is_a_type_error():
    with pytest.raises(TypeError, match="conv2d: x: expected real numbers"):
        jitnn.conv2d(np.ones((1, 1, 3, 3), complex), np.ones((1, 1, 1, 1)))


def test_tensors_from_two_contexts_are_rejected():
    a, b = jitnn.Context(), jitnn.Context()
    with pytest.raises(ValueError, match="different contexts"):
        jitnn.conv2d(a.tensor(random((1, 3, 4, 4))), b.tensor(random((3, 3, 1, 1))))


def _pytorch_conv_cases():
    pytest.importorskip("onnx", reason="onnx provides the PyTorch-generated cases (test extra)")
    from tests.onnx_cases import pytorch_converted
    return pytorch_converted("test_Conv2d")


@pytest.mark.parametrize("case", _pytorch_conv_cases(), ids=lambda c: c[0])
def test_pytorch_generated_conv2d_cases_from_onnx(case):
    from tests.onnx_cases import attributes, initializers
    _, model, inputs, outputs = case
    (node,) = model.graph.node
    attrs = attributes(node)
    weights = {**initializers(model), **dict(zip([i.name for i in model.graph.input], inputs))}
    x, w = weights[node.input[0]], weights[node.input[1]]
    bias = weights[node.input[2]] if len(node.input) > 2 else None
    top, left, bottom, right = attrs.get("pads", [0, 0, 0, 0])  # ONNX: begins, then ends
    got = jitnn.conv2d(x, w, bias, strides=tuple(attrs["strides"]),
                       dilations=tuple(attrs["dilations"]), padding=(top, bottom, left, right),
                       groups=attrs.get("group", 1)).numpy()
    np.testing.assert_allclose(got, outputs[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("c,kernel", [(1, 1), (3, 3), (7, 1), (9, 3), (17, 1)])
def test_a_following_gelu_is_the_convs_epilogue(c, kernel):
    """conv2d then gelu runs as one kernel (the epilogue's vectorized erf
    GELU) on odd channel counts and sizes, two images, pre-activations
    spread over about -10..10 so that both tails of erf are reached."""
    ctx = jitnn.Context()
    x, w, b = random((2, c, 7, 5), 20 + c, 4.0), random((2 * c + 1, c, kernel, kernel), 21), \
        random((2 * c + 1,), 22)
    y = jitnn.gelu(jitnn.conv2d(ctx.tensor(x), ctx.tensor(w), b, padding=kernel // 2))
    assert "conv2d + gelu" in jitnn.explain(y)
    with assert_schedule(ctx, kernels=1):
        got = y.numpy()
    want = conv2d_reference(x, w, b, padding=kernel // 2, activation="gelu")
    assert np.abs(want).max() > 3 and want.min() < -0.1
    _check(got, want, c * kernel * kernel)
