"""Group normalization from ONNX: the GroupNormalization op of opsets 18
(scale and bias per group) and 21 (per channel), and GroupNorm as
``torch.onnx.export`` writes it before opset 18 (``Reshape(N, G, -1)``,
``InstanceNormalization``, ``Reshape`` back, ``Mul``, ``Add``), against
float64 numpy and ONNX Runtime; the pattern converts to one
group_normalization between blocked convs, and a pattern whose constants
do not fit converts node by node with the right values."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from tests.helpers import assert_close, random, reference  # noqa: E402
from tests.onnx_nets import Net  # noqa: E402


def _run(model, feed: dict, threads: int = 1):
    """jitnn's outputs and the step labels of the first output's plan."""
    ctx = jitnn.Context(num_threads=threads)
    converted = jitnn.onnx.prepare(model, ctx)
    pending = converted.dispatch(feed)
    plan = jitnn.explain(next(iter(pending.values())))
    labels = [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan,
                                              re.MULTILINE)]
    return converted.run(feed), labels, plan


def _ort(model, feed: dict) -> dict:
    ort = pytest.importorskip("onnxruntime", reason="compared with ONNX Runtime, a peer in "
                              "the bench extra (pip install -e \".[bench]\")")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


# --- the GroupNormalization op -------------------------------------------------------------

def group_norm_node(shape, groups: int, opset: int, epsilon: float = 1e-5, seed: int = 0):
    """One GroupNormalization node on input x of ``shape``: (model, feed,
    the float64 reference of its output)."""
    net = Net(seed)
    channels = shape[1]
    size = channels if opset >= 21 else groups
    scale, bias = net.rng.uniform(0.5, 1.5, size), net.rng.standard_normal(size)
    y = net("GroupNormalization", net.input("x", shape), net.const(scale), net.const(bias),
            num_groups=groups, epsilon=epsilon)
    feed = {"x": random(shape, seed, scale=2.0) + 1}
    if opset < 21:                       # each group's value over its channels
        scale, bias = (np.repeat(v, channels // groups) for v in (scale, bias))
    want = reference("group_normalization")(feed["x"], groups,
                                            scale.astype(np.float32), bias.astype(np.float32),
                                            epsilon=epsilon)
    return net.model([y], opset), feed, y, want


CASES = [((2, 1, 5, 7), 1), ((2, 3, 5, 7), 3), ((1, 7, 9, 5), 7), ((2, 9, 5, 3), 3),
         ((1, 17, 3, 5), 17), ((2, 18, 7, 5), 3), ((2, 18, 7, 5), 6), ((2, 18, 7, 5), 9),
         ((1, 64, 9, 11), 32), ((1, 64, 9, 11), 1), ((2, 6, 13), 2), ((1, 8, 3, 4, 5), 4)]


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("shape,groups", CASES)
def test_group_normalization_op(shape, groups, opset):
    model, feed, y, want = group_norm_node(shape, groups, opset, epsilon=1e-4)
    got, labels, _ = _run(model, feed)
    assert_close(got[y], want, tol=4e-6)
    assert labels == ["group_normalization"], labels


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("shape,groups", [((2, 18, 7, 5), 6), ((1, 64, 9, 11), 32),
                                          ((2, 9, 5, 3), 1)])
def test_group_normalization_op_against_onnx_runtime(shape, groups, opset):
    model, feed, y, want = group_norm_node(shape, groups, opset)
    theirs = _ort(model, feed)[y]
    assert_close(theirs, want, tol=2e-5)              # the same reading of the opset
    got, _, _ = _run(model, feed, threads=2)
    assert_close(got[y], theirs, tol=2e-5)


def test_group_normalization_per_group_parameters_as_inputs():
    """Opset 18's scale and bias as graph inputs: repeated over each group's channels."""
    net = Net(1)
    y = net("GroupNormalization", net.input("x", (2, 6, 5, 5)), net.input("s", (3,)),
            net.input("b", (3,)), num_groups=3)
    feed = {"x": random((2, 6, 5, 5), 1), "s": random((3,), 2), "b": random((3,), 3)}
    got, _, _ = _run(net.model([y], 18), feed)
    want = reference("group_normalization")(feed["x"], 3, np.repeat(feed["s"], 2),
                                            np.repeat(feed["b"], 2))
    assert_close(got[y], want, tol=4e-6)


@pytest.mark.parametrize("opset,groups,size,why", [
    (21, 4, 6, r"num_groups 4 does not divide the 6 channels of input \(2, 6, 5, 5\)"),
    (21, 3, 3, r"scale must have shape \(6,\) \(one per channel\), got \(3,\)"),
    (18, 3, 6, r"scale must have shape \(3,\) \(one per group, opset < 21\), got \(6,\)")])
def test_group_normalization_bad_models(opset, groups, size, why):
    net = Net(2)
    y = net("GroupNormalization", net.input("x", (2, 6, 5, 5)), net.const(np.ones(size)),
            net.const(np.zeros(size)), num_groups=groups)
    with pytest.raises(jitnn.JitnnValueError, match=r"onnx: node .*GroupNormalization.*" + why):
        jitnn.onnx.prepare(net.model([y], opset), jitnn.Context(num_threads=1))


# --- the exported pattern ------------------------------------------------------------------

def exported_group_norm(channels: int = 18, groups: int = 6, size=(7, 9), batch: int = 2,
                        ones: float = 1.0, scale_shape=None, affine: bool = True,
                        seed: int = 3):
    """conv 1x1, GroupNorm(groups, channels) as torch.onnx.export writes it
    at opset 17 (the shape of the second Reshape from a Shape node), then
    PoolFormer's token mixer ``AveragePool(x) - x``, a layer scale and the
    residual, and a conv 1x1: (model, feed, output, float64 reference)."""
    net = Net(seed)
    h, w = size
    x = net.input("x", (batch, 3, h, w))     # fewer than a block (4, 8, 16): no reorder
    w1 = net.rng.standard_normal((channels, 3, 1, 1)) * 0.5
    w2 = net.rng.standard_normal((4, channels, 1, 1)) * 0.5
    a = net("Conv", x, net.const(w1))
    t = net("Reshape", a, net.const([0, groups, -1], np.int64))
    t = net("InstanceNormalization", t, net.const(np.full(groups, ones)),
            net.const(np.zeros(groups)), epsilon=1e-5)
    t = net("Reshape", t, net("Shape", a))
    scale = net.rng.uniform(0.5, 1.5, scale_shape or (channels, 1, 1))
    bias = net.rng.standard_normal((channels, 1, 1))
    if affine:
        t = net("Add", net("Mul", t, net.const(scale)), net.const(bias))
    pooled = net("AveragePool", t, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1],
                 count_include_pad=0)
    layer_scale = net.rng.uniform(0.5, 1.5, (channels, 1, 1))
    r = net("Add", a, net("Mul", net("Sub", pooled, t), net.const(layer_scale)))
    y = net("Conv", r, net.const(w2))
    feed = {"x": random((batch, 3, h, w), seed)}

    def conv(v, weight):
        return np.einsum("nchw,oc->nohw", v, weight[:, :, 0, 0])
    a64 = conv(feed["x"].astype(np.float64), w1.astype(np.float32).astype(np.float64))
    grouped = a64.reshape(batch, groups, -1)
    normed = ((grouped - grouped.mean(-1, keepdims=True))
              / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5) * ones).reshape(a64.shape)
    f32 = np.float32
    if affine:
        normed = normed * scale.astype(f32) + bias.astype(f32)
    pooled64 = reference("average_pool2d")(normed, (3, 3), padding=(1, 1, 1, 1))
    r64 = a64 + (pooled64 - normed) * layer_scale.astype(f32)
    return net.model([y], 17), feed, y, conv(r64, w2.astype(f32).astype(np.float64))


@pytest.mark.parametrize("channels,groups,affine", [
    (18, 6, True), pytest.param(18, 1, True, marks=pytest.mark.slow),
    (7, 7, True), pytest.param(64, 32, True, marks=pytest.mark.slow), (9, 3, False)])
def test_exported_group_norm_is_one_op_between_blocked_ops(channels, groups, affine):
    model, feed, y, want = exported_group_norm(channels, groups, affine=affine)
    got, labels, plan = _run(model, feed)
    assert_close(got[y], want, tol=2e-5)
    assert labels.count("group_normalization") == 1, labels
    assert not {"instance_normalization", "reshape"} & set(labels), labels
    assert "0 reorder(s) planned" in plan, plan


@pytest.mark.parametrize("case", ["scale_not_one", "scale_along_width"])
def test_exported_group_norm_with_other_constants_runs_its_nodes(case):
    """An InstanceNormalization scale of 2, or a Mul constant that varies
    along W: no group norm, the nodes as they are, the same values."""
    options = {"scale_not_one": {"ones": 2.0},
               "scale_along_width": {"scale_shape": (18, 1, 9)}}[case]
    model, feed, y, want = exported_group_norm(**options)
    got, labels, _ = _run(model, feed)
    assert_close(got[y], want, tol=2e-5)
    assert "group_normalization" not in labels, labels
    assert "instance_normalization" in labels, labels


def test_exported_group_norm_against_onnx_runtime():
    model, feed, y, want = exported_group_norm(64, 1, size=(14, 14), batch=1)
    theirs = _ort(model, feed)[y]
    got, _, _ = _run(model, feed, threads=2)
    assert_close(got[y], theirs, tol=5e-5)
    assert_close(got[y], want, tol=2e-5)
