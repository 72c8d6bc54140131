"""Forms that torch's ``torch.export``-based ONNX exporter (``dynamo=True``,
opset 18, torch's default) writes where the TorchScript one wrote others,
built with onnx.helper and checked against a float64 run of the same model
(onnx's reference evaluator), and for the fused ops in jitnn's plan."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, numpy_helper  # noqa: E402

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from tests.helpers import random  # noqa: E402
from tests.onnx_nets import Net  # noqa: E402


def check(model, feed: dict, tol: float = 2e-5) -> list[str]:
    """jitnn (1 thread) against onnx's reference evaluator on a float64 copy of
    ``model``; returns the step labels of the plan (``jitnn.explain``)."""
    from onnx.reference import ReferenceEvaluator
    wide = type(model)()
    wide.CopyFrom(model)
    for i, tensor in enumerate(wide.graph.initializer):
        if tensor.data_type == TensorProto.FLOAT:
            wide.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(tensor).astype(np.float64), tensor.name))
    for info in wide.graph.input:
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = TensorProto.DOUBLE
    with np.errstate(invalid="ignore"):
        want = ReferenceEvaluator(wide).run(None, {k: v.astype(np.float64) if v.dtype == np.float32
                                                   else v for k, v in feed.items()})
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1),
                                   input_shapes={k: v.shape for k, v in feed.items()})
    plan = jitnn.explain(next(iter(converted.dispatch(feed).values())))
    got = next(iter(converted.run(feed).values()))
    assert got.shape == want[0].shape
    err = float(np.abs(got - want[0]).max()) / float(np.abs(want[0]).max())
    assert err < tol, f"max error {err:.2e} of the largest magnitude"
    return [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan,
                                            re.MULTILINE)]


def _heads(net: Net, x: str, b: int, s: int, h: int, d: int) -> str:
    """A projection of ``x`` (B, S, E) split into (B, H, S, D) heads."""
    e = h * d
    w = net.const(net.rng.standard_normal((e, e)) / math.sqrt(e))
    y = net("Add", net.const(net.rng.standard_normal(e) * 0.1), net("MatMul", x, w))
    return net("Transpose", net("Reshape", y, net.const([b, s, h, d], np.int64)),
               perm=[0, 2, 1, 3])


def _shape_dims(net: Net, x: str, *axes: int) -> list[str]:
    """``Shape(x)[axis]`` for each axis, as 1-D int64 values (the exporter's
    symbolic sizes)."""
    shape = net("Shape", x)
    return [net("Slice", shape, net.const([a], np.int64), net.const([a + 1], np.int64))
            for a in axes]


def _dynamo_kt(net: Net, k: str, b: int, h: int, s: int, d: int, targets: str) -> str:
    """Kᵀ of a (B, H, S, D) ``k`` as the dynamo exporter writes ``k.transpose(-2, -1)``
    in SDPA's decomposition: a Reshape to (B·H, S, D), Transpose(0, 2, 1), a Reshape to
    (B, H, D, S); ``targets``: "shape" (sizes from ``Shape(k)``, as exported), "const",
    or "wrong" (a first view of (B·H, D, S): no swap, the same sizes)."""
    if targets == "shape":
        bd, hd, sd, dd = _shape_dims(net, k, 0, 1, 2, 3)
        first = net("Concat", net.const([-1], np.int64), sd, dd, axis=0)
        second = net("Concat", bd, hd, dd, sd, axis=0)
    else:
        first = net.const([-1, d, s] if targets == "wrong" else [-1, s, d], np.int64)
        second = net.const([b, h, d, s], np.int64)
    flat = net("Reshape", k, first)
    return net("Reshape", net("Transpose", flat, perm=[0, 2, 1]), second)


def dynamo_attention(targets: str = "shape", heads_in: str = "bshd", b: int = 2, s: int = 6,
                     h: int = 2, d: int = 8, seed: int = 0):
    """Self-attention as the dynamo exporter writes transformers' SDPA (BERT,
    GPT-2): Q, K, V projections split into heads, Q and the swapped K each scaled
    by D^-1/4, a boolean padding mask as a Where of 0 and -inf added, Softmax, the
    IsNaN guard, · V, the heads merged back. ``heads_in="bhsd"``: Q, K and V are
    (B, H, S, D) inputs and the result stays (B, H, S, D)."""
    net = Net(seed)
    rng = np.random.default_rng(seed + 1)
    keep = rng.random((b, 1, 1, s)) > 0.3
    keep[..., 0] = True
    feed: dict = {"keep": keep}
    if heads_in == "bshd":
        feed["x"] = random((b, s, h * d), seed)
        x = net.input("x", (b, s, h * d))
        q, k, v = (_heads(net, x, b, s, h, d) for _ in range(3))
    else:
        q, k, v = (net.input(n, (b, h, s, d)) for n in "qkv")
        feed.update({n: random((b, h, s, d), seed + i) for i, n in enumerate("qkv")})
    root = net.const(1 / math.sqrt(math.sqrt(d)))
    scores = net("MatMul", net("Mul", q, root),
                 net("Mul", _dynamo_kt(net, k, b, h, s, d, targets), root))
    bias = net("Where", net.input("keep", (b, 1, 1, s), TensorProto.BOOL), net.const(0.0),
               net.const(-np.inf))
    probs = net("Softmax", net("Add", scores, bias), axis=-1)
    probs = net("Where", net("IsNaN", probs), net.const(0.0), probs)
    out = net("MatMul", probs, v)
    if heads_in == "bshd":
        out = net("Reshape", net("Transpose", out, perm=[0, 2, 1, 3]),
                  net.const([b, s, h * d], np.int64))
    return net.model([out], opset=18), feed


@pytest.mark.parametrize("targets", ["shape", "const"])
@pytest.mark.parametrize("heads_in", ["bshd", "bhsd"])
def test_dynamo_swapped_k_is_one_attention(targets, heads_in):
    """The Reshape-Transpose-Reshape Kᵀ fuses like a Transpose: one attention, no
    transposes left, no reshapes but the output's; from (B, S, H, D) heads the three
    projections are one GEMM that the attention reads in place (the TorchScript
    export's plan)."""
    labels = check(*dynamo_attention(targets, heads_in))
    assert labels.count("scaled_dot_product_attention") == 1, labels
    assert "softmax" not in labels and "transpose" not in labels, labels
    assert labels.count("reshape") <= 1, labels
    if heads_in == "bshd":
        assert [label for label in labels if label.startswith("matmul")] == ["matmul + add"]


def test_dynamo_views_that_do_not_swap_run_as_they_are():
    """A first view of (B·H, D, S), the same sizes as the swap's: not Kᵀ, the
    nodes convert one by one and give the model's numbers."""
    labels = check(*dynamo_attention("wrong"))
    assert "softmax" in labels or "transpose" in labels, labels


def multihead_attention(targets: str = "const", b: int = 2, s: int = 6, h: int = 2,
                        d: int = 8, seed: int = 0):
    """``nn.MultiheadAttention`` as the dynamo exporter writes it: its heads split
    as 3-D (B·H, S, D) tensors (here inputs), Q and V viewed as (B, H, S, D) for
    SDPA, K's swap (:func:`_dynamo_kt`) starting from the 3-D K (its first
    Reshape a view of the same shape), the heads merged by Transpose(2, 0, 1, 3).
    ``targets="wrong"``: a first view of (B·H, D, S), no swap."""
    net = Net(seed)
    q3, k3, v3 = (net.input(n, (b * h, s, d)) for n in "qkv")
    feed = {n: random((b * h, s, d), seed + i) for i, n in enumerate("qkv")}
    heads = net.const([-1, h, s, d], np.int64)
    q, v = net("Reshape", q3, heads), net("Reshape", v3, heads)
    kt = net("Reshape", net("Transpose", net("Reshape", k3, net.const(
        [b * h, d, s] if targets == "wrong" else [b * h, s, d], np.int64)), perm=[0, 2, 1]),
        net.const([b, h, d, s], np.int64))
    root = net.const(1 / math.sqrt(math.sqrt(d)))
    probs = net("Softmax", net("MatMul", net("Mul", q, root), net("Mul", kt, root)), axis=-1)
    out = net("Transpose", net("MatMul", probs, v), perm=[2, 0, 1, 3])
    return net.model([net("Reshape", out, net.const([-1, h * d], np.int64))], opset=18), feed


def test_multihead_attention_heads_split_3d_are_one_attention():
    """K swapped from its 3-D (B·H, S, D) heads (``nn.MultiheadAttention``; torchvision's
    ViT exported by dynamo: 68 -> 58 launches) is read as their (B, H, S, D) view: one
    attention, no softmax and no transpose but the head merge's."""
    labels = check(*multihead_attention())
    assert labels.count("scaled_dot_product_attention") == 1, labels
    assert "softmax" not in labels and labels.count("transpose") <= 1, labels


def test_multihead_attention_views_that_do_not_swap_run_as_they_are():
    labels = check(*multihead_attention("wrong"))
    assert "softmax" in labels, labels


def strided_head(indices: str, c: int = 8, seed: int = 0):
    """timm's classifier head as the dynamo exporter writes it: the pooled
    (B, C, 1, 1) features flattened, their ``as_strided`` view a Gather of
    constant indices of shape (1, C, 1, 1), a view as (1, C), a linear layer.
    ``indices``: "arange" (as exported), "negative" (the same, counted from the
    end), "permuted" (not a view: a gather)."""
    net = Net(seed)
    x = net.input("x", (1, c, 3, 3))
    pooled = net("ReduceMean", x, net.const([-1, -2], np.int64), keepdims=1)
    order = {"arange": np.arange(c), "negative": np.arange(c) - c,
             "permuted": np.random.default_rng(seed).permutation(c)}[indices]
    picked = net("Gather", net("Reshape", pooled, net.const([-1], np.int64)),
                 net.const(order.reshape(1, c, 1, 1), np.int64), axis=0)
    flat = net("Reshape", picked, net.const([1, c], np.int64))
    out = net("MatMul", flat, net.const(net.rng.standard_normal((c, 5))))
    return net.model([out], opset=18), {"x": random((1, c, 3, 3), seed)}


@pytest.mark.parametrize("indices", ["arange", "negative", "permuted"])
def test_gather_of_every_index_in_order_is_a_view(indices):
    """A Gather of every index of its axis in order (torch.export's ``as_strided``)
    copies nothing: no gather in the plan; other constant indices still gather."""
    labels = check(*strided_head(indices))
    assert ("gather" in labels) == (indices == "permuted"), labels
