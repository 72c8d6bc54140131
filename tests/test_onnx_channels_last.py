"""Per-pixel chains on a channels-last view (jitnn/onnx/_channels_last.py):
ConvNeXt's block and its LayerNorm2d, written as ``torch.onnx.export`` writes
them (a Transpose to NHWC, LayerNormalization over the last axis, MatMul +
bias + GELU, MatMul + bias, a Transpose back, the layer-scale Mul, the
residual Add), run on the NCHW tensor as a blocked layer norm and 1x1 convs.
Each model is checked against a float64 run of the same model and for the
steps of its plan: no transpose left, the residual in the last conv."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, numpy_helper

import jitnn
import jitnn.onnx
from tests.helpers import other_blocks_slow, random
from tests.onnx_nets import Net


def _gelu(net: Net, x: str) -> str:
    """Exact GELU as the exporter writes it: x * (1 + erf(x / sqrt 2)) * 0.5."""
    one_plus = net("Add", net("Erf", net("Div", x, net.const(math.sqrt(2.0)))), net.const(1.0))
    return net("Mul", net("Mul", x, one_plus), net.const(0.5))


def _float64(model):
    """A copy of ``model`` computing in float64."""
    import onnx
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for i, tensor in enumerate(copy.graph.initializer):
        copy.graph.initializer[i].CopyFrom(numpy_helper.from_array(
            numpy_helper.to_array(tensor).astype(np.float64), tensor.name))
    for info in copy.graph.input:
        info.type.tensor_type.elem_type = TensorProto.DOUBLE
    return copy


def check(model, feed: dict, ctx=None, tol: float = 2e-5) -> list[str]:
    """jitnn against onnx's reference evaluator in float64; the plan's step labels."""
    from onnx.reference import ReferenceEvaluator
    ctx = ctx or jitnn.Context(num_threads=1)
    converted = jitnn.onnx.prepare(model, ctx, input_shapes={k: v.shape for k, v in feed.items()})
    plan = jitnn.explain(next(iter(converted.dispatch(feed).values())))
    got = converted.run(feed)
    want = ReferenceEvaluator(_float64(model)).run(
        None, {k: v.astype(np.float64) for k, v in feed.items()})
    for name, value in zip([o.name for o in model.graph.output], want):
        err = float(np.abs(got[name] - value).max()) / max(float(np.abs(value).max()), 1e-30)
        assert err < tol, f"{name}: max error {err:.2e} of the largest magnitude"
    return [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan,
                                            re.MULTILINE)]


def convnext_block(n: int, c: int, h: int, w: int, *, activation: str = "gelu",
                   layer_scale: str = "channels", seed: int = 0):
    """A ConvNeXt block: dwconv 7x7, channels-last LayerNorm and MLP, layer
    scale (``"channels"``: (C, 1, 1) after the transpose back, as timm;
    ``"last_axis"``: (C,) before it, as Hugging Face; ``"none"``), residual."""
    net = Net(seed)
    rng = net.rng
    feed = {"x": random((n, c, h, w), seed)}
    x = net.input("x", (n, c, h, w))
    y = net("Conv", x, net.const(rng.standard_normal((c, 1, 7, 7)) / 7),
            net.const(rng.standard_normal(c) * 0.1), group=c, kernel_shape=[7, 7],
            pads=[3, 3, 3, 3])
    y = net("Transpose", y, perm=[0, 2, 3, 1])
    y = net("LayerNormalization", y, net.const(1 + 0.1 * rng.standard_normal(c)),
            net.const(0.1 * rng.standard_normal(c)), axis=-1, epsilon=1e-6)
    hidden = 4 * c
    y = net("MatMul", y, net.const(rng.standard_normal((c, hidden)) / np.sqrt(c)))
    y = net("Add", net.const(rng.standard_normal(hidden) * 0.1), y)
    y = _gelu(net, y) if activation == "gelu" else net(activation, y)
    y = net("MatMul", y, net.const(rng.standard_normal((hidden, c)) / np.sqrt(hidden)))
    y = net("Add", net.const(rng.standard_normal(c) * 0.1), y)
    if layer_scale == "last_axis":
        y = net("Mul", net.const(rng.uniform(0.5, 1.5, c)), y)
    y = net("Transpose", y, perm=[0, 3, 1, 2])
    if layer_scale == "channels":
        y = net("Mul", y, net.const(rng.uniform(0.5, 1.5, (c, 1, 1))))
    return net, net("Add", y, x), feed


@pytest.mark.parametrize("n,c,h,w", [(1, 1, 5, 3), (1, 3, 7, 9), (2, 7, 9, 5),
                                     (1, 9, 11, 6), (1, 17, 6, 13)])
def test_convnext_block_runs_without_transposes(n, c, h, w):
    net, y, feed = convnext_block(n, c, h, w)
    labels = check(net.model([y]), feed)
    assert "transpose" not in labels and "matmul" not in " ".join(labels), labels
    assert [l for l in labels if not l.startswith("reorder")] == [
        "conv2d", "layer_normalization", "conv2d + gelu", "conv2d + add"], labels


@pytest.mark.parametrize("block", other_blocks_slow())
def test_convnext_block_each_block(block):
    net, y, feed = convnext_block(2, 17, 7, 5, seed=block)
    labels = check(net.model([y]), feed, ctx=jitnn.Context(num_threads=1, block=block))
    assert "conv2d + add" in labels and "transpose" not in labels, labels


@pytest.mark.parametrize("activation", ["Relu", "Gelu"])
def test_channels_last_mlp_activation_ops_and_no_layer_scale(activation):
    """An activation op after the first linear; without a layer scale the
    residual add is still the last conv's."""
    net, y, feed = convnext_block(1, 6, 5, 7, activation=activation, layer_scale="none")
    labels = check(net.model([y], opset=20 if activation == "Gelu" else 17), feed)
    act = "conv2d + relu" if activation == "Relu" else "conv2d + gelu"
    assert act in labels and "conv2d + add" in labels and "transpose" not in labels, labels


def test_layer_scale_on_the_last_axis_before_the_transpose_back():
    """Hugging Face's ConvNeXt scales the NHWC result, then transposes."""
    net, y, feed = convnext_block(2, 9, 6, 5, layer_scale="last_axis", seed=5)
    labels = check(net.model([y]), feed)
    assert [l for l in labels if not l.startswith("reorder")] == [
        "conv2d", "layer_normalization", "conv2d + gelu", "conv2d + add"], labels


def test_layer_norm_2d_is_a_channel_layer_norm():
    """timm's LayerNorm2d: Transpose, LayerNormalization(-1), Transpose back."""
    net = Net(3)
    feed = {"x": random((2, 11, 4, 6), 3)}
    y = net("Transpose", net.input("x", (2, 11, 4, 6)), perm=[0, 2, 3, 1])
    y = net("LayerNormalization", y, net.const(net.rng.standard_normal(11)),
            net.const(net.rng.standard_normal(11)), axis=-1, epsilon=1e-6)
    y = net("Transpose", y, perm=[0, 3, 1, 2])
    assert check(net.model([y]), feed) == ["layer_normalization"]


def test_chain_read_elsewhere_converts_node_by_node():
    """A value inside the chain that is also a graph output keeps the nodes
    as they are (transposes and all), with the same numbers."""
    net, y, feed = convnext_block(1, 5, 6, 4)
    ln = next(node.output[0] for node in net.nodes if node.op_type == "LayerNormalization")
    labels = check(net.model([y, ln]), feed)
    assert "transpose" in labels, labels


def test_other_transposes_are_left_alone():
    """A Transpose(0, 2, 3, 1) followed by something else, or a chain that
    does not transpose back, is no channels-last chain."""
    net = Net(4)
    feed = {"x": random((1, 5, 3, 4), 4)}
    y = net("Transpose", net.input("x", (1, 5, 3, 4)), perm=[0, 2, 3, 1])
    y = net("LayerNormalization", y, net.const(np.ones(5)), net.const(np.zeros(5)), axis=-1)
    y = net("MatMul", y, net.const(net.rng.standard_normal((5, 6))))
    y = net("Add", y, net.const(net.rng.standard_normal(6)))
    labels = check(net.model([y]), feed)
    assert "transpose" in labels, labels
