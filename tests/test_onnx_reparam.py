"""Re-parameterizable multi-branch blocks (jitnn/onnx/_reparam.py): RepVGG's
and MobileOne's trees of ``Add`` over convs of one input (3x3 and 1x1, k
copies), a batch normalization of it (the identity branch), the input
itself and a constant, exported before re-parameterization, run as one
conv2d. Each model runs against a float64 run of the same model (onnx's
reference evaluator); a tree that does not fit (kernels that do not line
up, strides or groups that differ, a branch read elsewhere, convs of
different inputs) converts node by node, with the same numbers."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from tests.onnx_nets import Net, check


def _conv(net: Net, x: str, c: int, o: int, k: int, groups: int = 1, stride: int = 1,
          pad: int | None = None, bias: bool = True) -> str:
    rng = net.rng
    w = net.const(rng.standard_normal((o, c // groups, k, k)) * 0.3)
    inputs = [x, w] + ([net.const(rng.standard_normal(o))] if bias else [])
    half = (k - 1) // 2 if pad is None else pad
    return net("Conv", *inputs, kernel_shape=[k, k], pads=[half] * 4, strides=[stride] * 2,
               group=groups)


def _norm(net: Net, x: str, c: int) -> str:
    rng = net.rng
    gamma, beta = net.const(rng.uniform(0.5, 1.5, c)), net.const(rng.standard_normal(c))
    mean, var = net.const(rng.standard_normal(c)), net.const(rng.uniform(0.5, 2.0, c))
    return net("BatchNormalization", x, gamma, beta, mean, var, epsilon=1e-3)


def _block(c: int, o: int, groups: int, stride: int, identity: bool, n: int, h: int, w: int,
           copies: int = 2):
    """MobileOne's block: a 1x1 conv, ``copies`` 3x3 convs, the identity
    batch normalization (when it fits), a constant bias, then ReLU."""
    net = Net(seed=c * 100 + o + groups)
    x = net.input("x", (n, c, h, w))
    total = _conv(net, x, c, o, 1, groups, stride)
    for _ in range(copies):
        total = net("Add", total, _conv(net, x, c, o, 3, groups, stride))
    if identity:
        total = net("Add", total, _norm(net, x, c))
    total = net("Add", total, net.const(net.rng.standard_normal((1, o, 1, 1))))
    return net.model([net("Relu", total)]), {"x": net.rng.standard_normal(
        (n, c, h, w)).astype(np.float32)}


@pytest.mark.parametrize("c, groups, stride, identity", [
    (7, 1, 1, True), (9, 1, 1, True),                          # dense, with the identity
    pytest.param(17, 1, 1, True, marks=pytest.mark.slow),
    (9, 9, 1, True),                                           # depthwise
    pytest.param(17, 17, 2, False, marks=pytest.mark.slow),
    pytest.param(16, 1, 2, False, marks=pytest.mark.slow),     # strided
    (18, 3, 1, True)])                                         # grouped
def test_a_multi_branch_block_is_one_conv(c, groups, stride, identity):
    model, feed = _block(c, c, groups, stride, identity, 2, 9, 7)
    labels, layouts = check(model, feed)
    assert [label.split(" ")[0] for label in labels].count("conv2d") == 1, labels
    assert len(layouts) == 1, layouts                  # the converted graph holds one conv


def test_typical_network_shapes_and_the_input_added_as_it_is():
    # MobileOne's 64 -> 64 at 56 x 56 with four 3x3 copies, and a residual
    # `x + conv(x)`: one conv each
    model, feed = _block(64, 64, 1, 1, True, 1, 28, 28, copies=4)
    labels, _ = check(model, feed)
    assert [label.split(" ")[0] for label in labels].count("conv2d") == 1, labels
    net = Net(seed=3)
    x = net.input("x", (2, 9, 5, 7))
    y = net("Add", x, _conv(net, x, 9, 9, 3, bias=False))
    labels, layouts = check(net.model([y]), {"x": net.rng.standard_normal(
        (2, 9, 5, 7)).astype(np.float32)})
    assert len(layouts) == 1 and not any(label.startswith("add") for label in labels), labels


def _tree(net: Net, x: str, branches: list[str]) -> str:
    total = branches[0]
    for branch in branches[1:]:
        total = net("Add", total, branch)
    return total


@pytest.mark.parametrize("case", ["uncentred", "dilations", "groups", "read elsewhere",
                                  "other input", "even kernel"])
def test_trees_that_do_not_fit_convert_node_by_node(case):
    net = Net(seed=7)
    x = net.input("x", (2, 8, 9, 7))
    first = _conv(net, x, 8, 8, 3)
    rng = net.rng
    outputs, feed = [], {"x": rng.standard_normal((2, 8, 9, 7)).astype(np.float32)}
    if case == "uncentred":          # the same output size, the window shifted
        w = net.const(rng.standard_normal((8, 8, 3, 3)) * 0.3)
        second = net("Conv", x, w, kernel_shape=[3, 3], pads=[0, 0, 2, 2])
    elif case == "dilations":
        w = net.const(rng.standard_normal((8, 8, 3, 3)) * 0.3)
        second = net("Conv", x, w, kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2])
    elif case == "groups":
        second = _conv(net, x, 8, 8, 3, groups=2)
    elif case == "read elsewhere":
        second = _conv(net, x, 8, 8, 1)
        outputs.append(second)
    elif case == "other input":
        other = net.input("z", (2, 8, 9, 7))
        feed["z"] = rng.standard_normal((2, 8, 9, 7)).astype(np.float32)
        second = _conv(net, other, 8, 8, 1)
    else:
        w = net.const(rng.standard_normal((8, 8, 2, 2)) * 0.3)
        second = net("Conv", x, w, kernel_shape=[2, 2], pads=[1, 1, 0, 0])
    y = _tree(net, x, [first, second])
    _, layouts = check(net.model([y] + outputs), feed)
    assert len(layouts) == 2, (case, layouts)              # both convs stay
