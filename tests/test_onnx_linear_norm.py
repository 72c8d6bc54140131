"""A linear layer's batch normalization folded into its weights
(jitnn/onnx/_linear_norm.py): LeViT's ``MatMul``, ``Flatten`` (or a
``Reshape``) to 2-D, ``BatchNormalization`` over the product's columns and a
``Reshape`` back run as one GEMM with a bias (and the activation after it in
the epilogue). Each model runs against a float64 run of the same model
(onnx's reference evaluator); a normalization over other channels than the
product's columns, or read elsewhere, converts node by node, with the same
numbers."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

import jitnn
import jitnn.onnx
from tests.onnx_nets import Net, check


def _norm(net: Net, x: str, c: int) -> str:
    rng = net.rng
    gamma, beta = net.const(rng.uniform(0.5, 1.5, c)), net.const(rng.standard_normal(c))
    mean, var = net.const(rng.standard_normal(c)), net.const(rng.uniform(0.5, 2.0, c))
    return net("BatchNormalization", x, gamma, beta, mean, var, epsilon=1e-3)


def _linear_norm(shape: tuple[int, ...], columns: int, flatten: str = "flatten",
                 bias: bool = False, activation: str | None = None, seed: int = 0):
    """``x @ W [+ b]``, to 2-D by ``flatten`` ("flatten", "reshape" or
    "none": x is 2-D), the batch normalization, back to the product's shape,
    then ``activation``."""
    net = Net(seed=seed)
    x = net.input("x", shape)
    product = net("MatMul", x, net.const(net.rng.standard_normal((shape[-1], columns)) * 0.3))
    if bias:
        product = net("Add", product, net.const(net.rng.standard_normal(columns)))
    if flatten == "flatten":
        flat = net("Flatten", product, axis=len(shape) - 1)
    elif flatten == "reshape":
        flat = net("Reshape", product, net.const(np.array([-1, columns]), np.int64))
    else:
        flat = product
    y = _norm(net, flat, columns)
    if flatten != "none":
        y = net("Reshape", y, net("Shape", product))
    if activation is not None:
        y = net(activation, y)
    feed = {"x": net.rng.standard_normal(shape).astype(np.float32)}
    return net.model([y]), feed


def _graph_ops(model, feed: dict) -> list[str]:
    """The ops of the jitnn graph the model converted to."""
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1),
                                   input_shapes={k: v.shape for k, v in feed.items()})
    return [record.op for record in converted.graph._ops]


def _folded(labels: list[str]) -> bool:
    return not any("batch_normalization" in label for label in labels) and \
        sum(label.startswith(("matmul", "gemm")) for label in labels) == 1


@pytest.mark.parametrize("shape, columns, flatten, bias, activation", [
    ((2, 7, 9), 17, "flatten", False, "HardSwish"),        # LeViT's, N > 1
    ((1, 5, 3), 7, "flatten", True, None),                 # with the linear's bias
    ((3, 9), 1, "none", False, "Relu"),                     # 2-D x: no flatten
    ((2, 3, 4, 9), 9, "reshape", True, "Sigmoid"),          # a reshape to (-1, C), rank 4
    pytest.param((1, 196, 128), 256, "flatten", False, "HardSwish",
                 marks=pytest.mark.slow)])                  # LeViT-128S's MLP
def test_a_linear_layers_batch_norm_folds_into_its_gemm(shape, columns, flatten, bias,
                                                        activation):
    model, feed = _linear_norm(shape, columns, flatten, bias, activation)
    labels, _ = check(model, feed)
    assert _folded(labels), labels
    assert "batch_normalization" not in _graph_ops(model, feed)
    assert not any(label.startswith(("hard_swish", "relu", "sigmoid")) for label in labels), \
        labels                                              # the GEMM's epilogue


def test_a_normalization_over_other_channels_converts_node_by_node():
    # Flatten(axis=1) of (B, N, C) is (B, N * C): the normalization is over N * C
    net = Net(seed=4)
    x = net.input("x", (2, 3, 5))
    product = net("MatMul", x, net.const(net.rng.standard_normal((5, 7)) * 0.3))
    flat = net("Flatten", product, axis=1)
    y = _norm(net, flat, 21)
    model, feed = net.model([y]), {"x": net.rng.standard_normal((2, 3, 5)).astype(np.float32)}
    check(model, feed)
    assert "batch_normalization" in _graph_ops(model, feed)


def _product_and_rows(seed: int, read: str):
    """LeViT's linear layer whose ``read`` value ("product" or "rows": the
    normalized rows) is a graph output too; the model and its feed."""
    net = Net(seed=seed)
    x = net.input("x", (2, 4, 6))
    product = net("MatMul", x, net.const(net.rng.standard_normal((6, 9)) * 0.3))
    normed = _norm(net, net("Flatten", product, axis=2), 9)
    y = net("Reshape", normed, net("Shape", product))
    model = net.model([y, product if read == "product" else normed])
    return model, {"x": net.rng.standard_normal((2, 4, 6)).astype(np.float32)}


def test_a_product_read_elsewhere_converts_node_by_node():
    model, feed = _product_and_rows(5, "product")
    check(model, feed)
    assert "batch_normalization" in _graph_ops(model, feed)


def test_the_normalized_rows_read_as_they_are_are_the_folded_gemms():
    # the 2-D normalization's output is a graph output too: the fold's own result
    model, feed = _product_and_rows(6, "rows")
    check(model, feed)
    assert "batch_normalization" not in _graph_ops(model, feed)
