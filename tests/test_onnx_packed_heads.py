"""Q, K and V as the three parts of one packed head split (timm's ViT and
Swin: ``Reshape(qkv, (B, S, 3, H, D))``, ``Transpose(2, 0, 3, 1, 4)``, then
``Split`` + ``Squeeze``, ``Slice`` + ``Squeeze`` or ``Gather``), read in
place by the attention (jitnn/onnx/_packed_heads.py): no transposed copy
before it nor after it. Window attention as Swin writes it (relative
position bias, the shifted windows' mask on a view of the scores), against
the float64 reference of the ONNX graph; the cases that must convert as
exported; the zoo's small Swin.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

import jitnn
import jitnn.onnx
from jitnn.onnx import _packed_heads
from tests.onnx_nets import ReferenceNet as Net

FUSED = "Q, K and V read in place from one"


def check(built, ctx=None, tol: float = 2e-5) -> tuple[list[str], str]:
    """jitnn against the graph in float64 (onnx's reference evaluator): (the
    plan's step labels, the plan)."""
    from onnx.reference import ReferenceEvaluator
    net, outputs, opset, feed = built
    model = jitnn.onnx.prepare(net.model(outputs, opset), ctx or jitnn.Context(num_threads=1),
                               input_shapes={k: v.shape for k, v in feed.items()})
    got = model.run(feed)
    plan = jitnn.explain(next(iter(model.dispatch(feed).values())))
    wide = {k: v.astype(np.float64) for k, v in feed.items()}
    for name, value in zip(outputs, ReferenceEvaluator(
            net.model(outputs, opset, np.float64)).run(None, wide)):
        assert got[name].shape == value.shape, name
        err = float(np.abs(got[name] - value).max()) / max(float(np.abs(value).max()), 1e-30)
        assert err < tol, f"{name}: max error {err:.2e} of the largest magnitude"
    labels = [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan,
                                              re.MULTILINE)]
    return labels, plan


def window_attention(parts: str = "split", images: int = 2, windows: int = 3, n: int = 9,
                     h: int = 3, d: int = 4, shifted: bool = True, order=(0, 1, 2),
                     opset: int = 17, elsewhere: str | None = None, seed: int = 0):
    """Swin's window attention on ``(images * windows, n, h * d)`` tokens:
    the qkv linear, its packed head split, the scaled scores plus a relative
    position bias (and, ``shifted``, a per-window mask added to the ``(images,
    windows, H, n, n)`` view), softmax, the heads merged, the proj linear.
    ``order``: which part of axis 0 Q, K and V take; ``elsewhere``: a value
    on the way that is a graph output too."""
    net, feed = Net(seed), {}
    rows, c = images * windows, h * d
    rng = net.rng
    x = net.input("x", (rows, n, c))
    feed["x"] = rng.standard_normal((rows, n, c)).astype(np.float32)
    qkv = net("Add", net("MatMul", x, net.const(rng.standard_normal((c, 3 * c)) / math.sqrt(c))),
              net.const(rng.standard_normal(3 * c) * 0.1))
    split = net("Transpose", net("Reshape", qkv, net.const([rows, n, 3, h, d], np.int64)),
                perm=[2, 0, 3, 1, 4])
    axes0 = net.const([0], np.int64)
    if parts == "split":
        if opset >= 13:
            pieces = net("Split", split, net.const([1, 1, 1], np.int64), axis=0, outputs=3)
            taken = [net("Squeeze", p, axes0) for p in pieces]
        else:
            pieces = net("Split", split, axis=0, split=[1, 1, 1], outputs=3)
            taken = [net("Squeeze", p, axes=[0]) for p in pieces]
    elif parts == "slice":
        taken = [net("Squeeze", net("Slice", split, net.const([i], np.int64),
                                    net.const([i + 1], np.int64), axes0), axes0)
                 for i in range(3)]
    else:
        taken = [net("Gather", split, net.const(i - 3 * (i == 2), np.int64), axis=0)
                 for i in range(3)]
    q, k, v = (taken[i] for i in order)
    scores = net("MatMul", net("Mul", q, net.const(1 / math.sqrt(d))),
                 net("Transpose", k, perm=[0, 1, 3, 2]))
    scores = net("Add", scores, net.const(rng.standard_normal((1, h, n, n))))
    if shifted:
        mask = np.where(rng.random((1, windows, 1, n, n)) < 0.3, -100.0, 0.0)
        view = net("Reshape", scores, net.const([images, windows, h, n, n], np.int64))
        scores = net("Reshape", net("Add", view, net.const(mask)),
                     net.const([rows, h, n, n], np.int64))
    out = net("Transpose", net("MatMul", net("Softmax", scores, axis=-1), v), perm=[0, 2, 1, 3])
    merged = net("Reshape", out, net.const([rows, n, c], np.int64))
    y = net("Add", net("MatMul", merged, net.const(rng.standard_normal((c, c)) / math.sqrt(c))),
            net.const(rng.standard_normal(c) * 0.1))
    outputs = [y] + ({"v": [v], "split": [split]}[elsewhere] if elsewhere else [])
    return net, outputs, opset, feed


def _moves(labels: list[str]) -> list[str]:
    return [label for label in labels if label.split(" + ")[0] in
            ("transpose", "split", "slice", "gather", "squeeze")]


@pytest.mark.parametrize("parts,images,windows,n,h,d,shifted", [
    ("split", 2, 3, 9, 3, 4, True),
    ("split", 1, 5, 49, 2, 8, False),
    ("slice", 3, 1, 16, 1, 5, False),
    ("slice", 2, 3, 7, 4, 3, True),
    ("gather", 2, 3, 9, 3, 4, True),
    ("gather", 1, 1, 1, 2, 4, False),
])
def test_packed_heads_are_read_in_place(parts, images, windows, n, h, d, shifted):
    labels, plan = check(window_attention(parts, images, windows, n, h, d, shifted))
    assert FUSED in plan and not _moves(labels), plan
    assert labels.count("scaled_dot_product_attention") == 1


@pytest.mark.parametrize("order", [(2, 0, 1), (1, 2, 0)])
def test_parts_in_another_order_are_their_columns(order):
    labels, plan = check(window_attention("gather", order=order))
    assert FUSED in plan and not _moves(labels), plan


def test_opset_11_split_and_squeeze_attributes():
    labels, plan = check(window_attention("split", opset=11))
    assert FUSED in plan and not _moves(labels), plan


def test_two_threads_and_the_exported_form_agree(monkeypatch):
    built = window_attention("split", images=3, windows=3, n=25, h=3, d=8)
    got = {}
    for enabled, threads in ((True, 2), (True, 1), (False, 1)):
        monkeypatch.setattr(_packed_heads, "ENABLED", enabled)
        labels, plan = check(built, ctx=jitnn.Context(num_threads=threads))
        assert (FUSED in plan) == enabled and bool(_moves(labels)) != enabled, plan
        net, outputs, opset, feed = built
        model = jitnn.onnx.prepare(net.model(outputs, opset), jitnn.Context(num_threads=threads),
                                   input_shapes={"x": feed["x"].shape})
        got[(enabled, threads)] = model.run(feed)[outputs[0]]
    assert np.array_equal(got[(True, 1)], got[(True, 2)])
    np.testing.assert_allclose(got[(True, 1)], got[(False, 1)], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("elsewhere", ["v", "split"])
def test_a_part_read_elsewhere_converts_as_exported(elsewhere):
    labels, plan = check(window_attention("split", elsewhere=elsewhere))
    assert FUSED not in plan and _moves(labels), plan


def test_zoo_small_swin_reads_its_heads_in_place():
    path = os.path.join(os.path.dirname(__file__), "data", "models", "swin.onnx")
    with np.load(path[:-5] + ".npz") as data:
        feed = {key.split(".", 2)[2]: data[key] for key in data.files if key.startswith("0.in.")}
        stored = {key.split(".", 2)[2]: data[key] for key in data.files
                  if key.startswith("0.out.")}
    # (one program: explain shows the plan of the last one)
    model = jitnn.onnx.prepare(path, jitnn.Context(num_threads=1, max_pending_ops=100000),
                               input_shapes={k: v.shape for k, v in feed.items()})
    out = model.run(feed)
    plan = jitnn.explain(next(iter(model.dispatch(feed).values())))
    assert plan.count(FUSED) == plan.count("scaled_dot_product_attention") > 0
    assert " split " not in plan
    for name, expected in stored.items():
        scale = float(np.abs(expected).max())
        np.testing.assert_allclose(out[name], expected, rtol=1e-3, atol=1e-4 * scale)
