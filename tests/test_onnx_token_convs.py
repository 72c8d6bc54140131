"""Convolutions on token tensors (jitnn/onnx/_token_convs.py): PVT-v2's and
SegFormer's ``Transpose(0, 2, 1)``, ``Reshape(N, C, H, W)``, ``Conv``,
``Reshape(N, C', L')``, ``Transpose(0, 2, 1)`` (and the patch embeds'
``Transpose(0, 3, 1, 2)`` ... ``Transpose(0, 2, 3, 1)`` of an NHWC tensor),
as the exporter writes them, with constant reshape targets or targets
computed from ``Shape``. Each model runs against a float64 run of the same
model (onnx's reference evaluator) and ONNX Runtime when installed; a matched
chain is one channels-last conv2d (``input_layout="nhwc"``) and no transpose,
a chain that does not fit converts node by node, with the same numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

import jitnn
import jitnn.onnx
from tests.helpers import random
from tests.onnx_nets import Net, check


def _ints(net: Net, values) -> str:
    return net.const(np.asarray(values, np.int64), np.int64)


def _dim(net: Net, shape: str, axis: int) -> str:
    """``shape[axis:axis + 1]`` of a ``Shape`` output, as the exporter slices it."""
    return net("Slice", shape, _ints(net, [axis]), _ints(net, [axis + 1]))


def token_conv(net: Net, tokens: str, n: int, c: int, h: int, w: int, out_channels: int,
               conv: dict, *, dynamic: bool = False) -> str:
    """Tokens ``(N, H * W, C)`` through a conv and back to tokens, as PVT-v2
    exports it: the reshape targets constant, or (``dynamic``) computed from
    the ``Shape`` of the tokens and of the conv's result."""
    kernel = conv["kernel_shape"]
    swapped = net("Transpose", tokens, perm=[0, 2, 1])
    if dynamic:
        shape = net("Shape", tokens)
        target = net("Concat", _dim(net, shape, 0), _dim(net, shape, 2), _ints(net, [h, w]),
                     axis=0)
    else:
        target = _ints(net, [n, c, h, w])
    image = net("Reshape", swapped, target)
    groups = conv.get("group", 1)
    filt = net.rng.standard_normal((out_channels, c // groups, *kernel)) / math.sqrt(
        c // groups * math.prod(kernel))
    y = net("Conv", image, net.const(filt), net.const(0.1 * net.rng.standard_normal(out_channels)),
            **conv)
    if dynamic:
        lead = net("Slice", net("Shape", y), _ints(net, [0]), _ints(net, [2]))
        flat = net("Reshape", y, net("Concat", lead, _ints(net, [-1]), axis=0))
    else:
        flat = net("Reshape", y, _ints(net, [0, out_channels, -1]))
    return net("Transpose", flat, perm=[0, 2, 1])


def _norm(net: Net, x: str, c: int) -> str:
    return net("LayerNormalization", x, net.const(1 + 0.1 * net.rng.standard_normal(c)),
               net.const(0.1 * net.rng.standard_normal(c)), axis=-1, epsilon=1e-5)


def _depthwise(c: int) -> dict:
    return {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": c}


def _reduction(k: int) -> dict:
    return {"kernel_shape": [k, k], "strides": [k, k]}


@pytest.mark.parametrize("n,c,h,w", [(1, 3, 5, 7), pytest.param(2, 7, 9, 5, marks=pytest.mark.slow),
                                     pytest.param(1, 9, 11, 6, marks=pytest.mark.slow),
                                     (2, 17, 6, 13)])
def test_depthwise_conv_on_tokens_runs_channels_last(n, c, h, w):
    net = Net(c)
    feed = {"x": random((n, h * w, c), c)}
    y = token_conv(net, net.input("x", (n, h * w, c)), n, c, h, w, c, _depthwise(c))
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nhwc"] and "transpose" not in labels, (labels, layouts)


@pytest.mark.parametrize("n,c,h,w,out", [pytest.param(1, 3, 6, 8, 3, marks=pytest.mark.slow),
                                         (2, 7, 9, 5, 7),
                                         pytest.param(1, 17, 7, 11, 9, marks=pytest.mark.slow)])
def test_spatial_reduction_conv_then_norm(n, c, h, w, out):
    """Attention's k = stride = 2 conv (odd sizes drop their last row and
    column), then the LayerNorm of the reduced tokens."""
    net = Net(out)
    feed = {"x": random((n, h * w, c), out)}
    y = token_conv(net, net.input("x", (n, h * w, c)), n, c, h, w, out, _reduction(2))
    labels, layouts = check(net.model([_norm(net, y, out)]), feed)
    assert layouts == ["nhwc"] and "transpose" not in labels, (labels, layouts)


@pytest.mark.parametrize("conv", [_depthwise(64), _reduction(4)], ids=["depthwise", "sr4"])
def test_pvt_stage_shapes_with_targets_from_shape_ops(conv):
    """PVT-v2-B0's second stage (64 channels on 28 x 28, 2 images; the MLP's
    128 hidden channels are 64 here), its reshape targets computed from
    ``Shape`` (of the tokens, and of the held-back conv's result)."""
    n, c, h, w = 2, 64, 28, 28
    net = Net(1)
    feed = {"x": random((n, h * w, c), 1)}
    y = token_conv(net, net.input("x", (n, h * w, c)), n, c, h, w, c, conv, dynamic=True)
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nhwc"] and "transpose" not in labels, (labels, layouts)


def test_mlp_block_with_gelu_after_the_conv():
    """PVT-v2's MLP: fc1, the depthwise conv on its tokens, GELU (on the
    tokens after the transpose back: the conv's epilogue), fc2, residual."""
    n, c, h, w, hidden = 2, 9, 7, 5, 17
    net = Net(2)
    feed = {"x": random((n, h * w, c), 2)}
    x = net.input("x", (n, h * w, c))
    y = net("Add", net("MatMul", x, net.const(net.rng.standard_normal((c, hidden)) / 3)),
            net.const(0.1 * net.rng.standard_normal(hidden)))
    y = token_conv(net, y, n, hidden, h, w, hidden, _depthwise(hidden), dynamic=True)
    half = net("Mul", y, net.const(0.5))
    y = net("Mul", half, net("Add", net("Erf", net("Div", y, net.const(math.sqrt(2.0)))),
                             net.const(1.0)))
    y = net("Add", net("MatMul", y, net.const(net.rng.standard_normal((hidden, c)) / 4)),
            net.const(0.1 * net.rng.standard_normal(c)))
    labels, layouts = check(net.model([net("Add", y, x)]), feed)
    assert layouts == ["nhwc"] and "transpose" not in labels, (labels, layouts)
    assert not any(label.startswith(("gelu", "erf", "mul")) for label in labels), labels


@pytest.mark.parametrize("op, opset", [("Gelu", 20), ("HardSwish", 17), ("Relu", 17)])
def test_an_activation_after_the_chain_is_the_convs_epilogue(op, opset):
    n, c, h, w = 2, 9, 5, 7
    net = Net(11)
    feed = {"x": random((n, h * w, c), 11)}
    y = token_conv(net, net.input("x", (n, h * w, c)), n, c, h, w, c, _depthwise(c))
    model = net.model([net(op, y)], opset=opset)
    _, layouts = check(model, feed)
    assert layouts == ["nhwc"]
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1),
                                   input_shapes={"x": (n, h * w, c)})
    ops = [r.op for r in converted.graph._ops]
    (conv,) = [r for r in converted.graph._ops if r.op == "conv2d"]
    name = {"Gelu": "gelu", "HardSwish": "hard_swish", "Relu": "relu"}[op]
    assert conv.kwargs["activation"] == name and name not in ops, ops


def test_patch_embed_between_channels_last_tensors():
    """A stage's overlapping patch embed: the previous stage's tokens as (N,
    H, W, C), Transpose(0, 3, 1, 2), a 3x3 stride 2 conv (SAME_UPPER padding,
    dilation 2 here), Transpose(0, 2, 3, 1), LayerNorm."""
    n, c, h, w, out = 2, 7, 9, 11, 17
    net = Net(3)
    feed = {"x": random((n, h, w, c), 3)}
    image = net("Transpose", net.input("x", (n, h, w, c)), perm=[0, 3, 1, 2])
    y = net("Conv", image, net.const(net.rng.standard_normal((out, c, 3, 3)) / 5),
            net.const(0.1 * net.rng.standard_normal(out)), kernel_shape=[3, 3],
            strides=[2, 2], dilations=[2, 2], auto_pad="SAME_UPPER")
    y = _norm(net, net("Transpose", y, perm=[0, 2, 3, 1]), out)
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nhwc"] and "transpose" not in labels, (labels, layouts)


@pytest.mark.parametrize("into,out", [("nhwc", "tokens"), ("tokens", "nhwc")])
def test_either_form_on_either_side(into, out):
    """Hugging Face's SegFormer embeds a stage's patches from ``(N, H, W, C)``
    (``permute(0, 3, 1, 2)``) into tokens (``flatten(2).transpose(1, 2)``);
    the other way round is matched too."""
    n, c, h, w, o = 2, 9, 7, 5, 7
    net = Net(11)
    shape = (n, h, w, c) if into == "nhwc" else (n, h * w, c)
    feed = {"x": random(shape, 11)}
    x = net.input("x", shape)
    image = net("Transpose", x, perm=[0, 3, 1, 2]) if into == "nhwc" else \
        net("Reshape", net("Transpose", x, perm=[0, 2, 1]), _ints(net, [n, c, h, w]))
    y = net("Conv", image, net.const(net.rng.standard_normal((o, c, 3, 3)) / 9),
            net.const(0.1 * net.rng.standard_normal(o)), kernel_shape=[3, 3], strides=[2, 2],
            pads=[1, 1, 1, 1])
    y = net("Transpose", net("Reshape", y, _ints(net, [n, o, -1])), perm=[0, 2, 1]) \
        if out == "tokens" else net("Transpose", y, perm=[0, 2, 3, 1])
    labels, layouts = check(net.model([_norm(net, y, o)]), feed)
    assert layouts == ["nhwc"] and "transpose" not in labels, (labels, layouts)


def test_two_token_convs_in_a_row():
    """The result of one matched conv is the tokens of the next."""
    n, c, h, w = 1, 17, 8, 6
    net = Net(4)
    feed = {"x": random((n, h * w, c), 4)}
    y = token_conv(net, net.input("x", (n, h * w, c)), n, c, h, w, c, _depthwise(c))
    y = token_conv(net, y, n, c, h, w, 9, _reduction(2))
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nhwc", "nhwc"] and "transpose" not in labels, (labels, layouts)


def test_against_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    n, c, h, w = 2, 9, 7, 9
    net = Net(5)
    feed = {"x": random((n, h * w, c), 5)}
    x = net.input("x", (n, h * w, c))
    a = token_conv(net, x, n, c, h, w, c, _depthwise(c), dynamic=True)
    b = token_conv(net, x, n, c, h, w, 17, _reduction(2))
    model = net.model([a, b])
    got = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1)).run(feed)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, want in zip([o.name for o in model.graph.output], session.run(None, feed)):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)


# --- chains that do not fit convert node by node --------------------------------------

def test_reshape_that_mixes_images_and_rows_is_not_channels_last():
    """(2, 3, 4) viewed as (1, 3, 2, 4): H * W = 8 is not L = 4, and the
    "image" holds both images' rows: only the literal transposes are right."""
    net = Net(6)
    feed = {"x": random((2, 4, 3), 6)}
    swapped = net("Transpose", net.input("x", (2, 4, 3)), perm=[0, 2, 1])
    image = net("Reshape", swapped, _ints(net, [1, 3, 2, 4]))
    y = net("Conv", image, net.const(net.rng.standard_normal((3, 1, 3, 3))),
            net.const(net.rng.standard_normal(3)), kernel_shape=[3, 3], pads=[1, 1, 1, 1],
            group=3)
    y = net("Transpose", net("Reshape", y, _ints(net, [0, 3, -1])), perm=[0, 2, 1])
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nchw"] and "transpose" in labels, (labels, layouts)


def test_reshape_that_regroups_channels_is_not_channels_last():
    """(1, 4, 9) viewed as (1, 2, 6, 3): the channels of the conv are not the tokens'."""
    net = Net(7)
    feed = {"x": random((1, 9, 4), 7)}
    swapped = net("Transpose", net.input("x", (1, 9, 4)), perm=[0, 2, 1])
    image = net("Reshape", swapped, _ints(net, [1, 2, 6, 3]))
    y = net("Conv", image, net.const(net.rng.standard_normal((5, 2, 3, 3))),
            net.const(net.rng.standard_normal(5)), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = net("Transpose", net("Reshape", y, _ints(net, [0, 5, -1])), perm=[0, 2, 1])
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nchw"] and "transpose" in labels, (labels, layouts)


def test_other_permutation_is_not_matched():
    """Tokens given as (L, N, C), moved to (N, C, L) by Transpose(1, 2, 0)."""
    n, c, h, w = 2, 7, 5, 3
    net = Net(8)
    feed = {"x": random((h * w, n, c), 8)}
    swapped = net("Transpose", net.input("x", (h * w, n, c)), perm=[1, 2, 0])
    y = net("Conv", net("Reshape", swapped, _ints(net, [n, c, h, w])),
            net.const(net.rng.standard_normal((c, 1, 3, 3))), kernel_shape=[3, 3],
            pads=[1, 1, 1, 1], group=c)
    y = net("Transpose", net("Reshape", y, _ints(net, [n, c, -1])), perm=[0, 2, 1])
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nchw"] and "transpose" in labels, (labels, layouts)


@pytest.mark.parametrize("read", ["swapped", "image", "conv", "flat"])
def test_intermediate_read_elsewhere_converts_node_by_node(read):
    """A value inside the chain that is also a graph output keeps the nodes as they are."""
    n, c, h, w = 2, 3, 5, 7
    net = Net(9)
    feed = {"x": random((n, h * w, c), 9)}
    y = token_conv(net, net.input("x", (n, h * w, c)), n, c, h, w, c, _depthwise(c))
    name = {"swapped": "transpose", "image": "reshape", "conv": "conv", "flat": "reshape"}[read]
    found = [node.output[0] for node in net.nodes if node.op_type.lower() == name]
    extra = found[-1] if read == "flat" else found[0]
    labels, layouts = check(net.model([y, extra]), feed)
    assert layouts == ["nchw"] and "transpose" in labels, (labels, layouts)


def test_activation_between_conv_and_reshape_back_is_not_matched():
    """A Relu on the NCHW result before the reshape back: the chain ends at
    the conv, and the nodes convert as they are."""
    n, c, h, w = 1, 9, 7, 5
    net = Net(10)
    feed = {"x": random((n, h * w, c), 10)}
    swapped = net("Transpose", net.input("x", (n, h * w, c)), perm=[0, 2, 1])
    y = net("Conv", net("Reshape", swapped, _ints(net, [n, c, h, w])),
            net.const(net.rng.standard_normal((c, 1, 3, 3))), kernel_shape=[3, 3],
            pads=[1, 1, 1, 1], group=c)
    y = net("Transpose", net("Reshape", net("Relu", y), _ints(net, [0, c, -1])), perm=[0, 2, 1])
    labels, layouts = check(net.model([y]), feed)
    assert layouts == ["nchw"], (labels, layouts)
