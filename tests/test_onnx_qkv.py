"""The Q, K and V projections of a fused attention as one GEMM whose output
the attention reads in place (jitnn/onnx/_qkv_patterns.py): three linears
on one input (BERT, ViT) packed at load time, or one GEMM's Split (GPT-2)
read as views; and the cases that must stay three GEMMs or copies. Each
against the float64 reference of the ONNX graph. The gated MLP's two
projections of one input as one GEMM and ``swiglu`` (jitnn/onnx/_gated_mlp.py,
jitnn/ops/gated.py, kernels/gated.py) the same way, and the op against its
float64 reference. Llama's attention block (rotary Q and K, grouped K and V,
the causal and padding mask of ``attention_mask``, the head merge, the output
projection): no transpose or expand step, the output projection bound.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from onnx import TensorProto

import jitnn
import jitnn.onnx
from jitnn.errors import JitnnValueError
from jitnn.kernels import gated as gated_kernels
from jitnn.kernels import matmul as mm
from jitnn.onnx import _gated_mlp, _qkv_patterns
from jitnn.ops.gated import swiglu_reference
from tests.helpers import random
from tests.onnx_nets import ReferenceNet as Net

FUSED = "read in place from one"


def _mask(net: Net, kind: str, scores: str, b: int, s: int, feed: dict) -> str:
    if kind == "none":
        return scores
    if kind == "add":                # BERT: a run-time (B, 1, 1, S) float mask
        feed["mask"] = np.where(net.rng.random((b, 1, 1, s)) < 0.3, -1e4, 0.0).astype(np.float32)
        return net("Add", scores, net.input("mask", (b, 1, 1, s)))
    if kind == "causal_trilu":       # Trilu of ones, Where(tril, scores, -inf)
        tril = net("Cast", net("Trilu", net.const(np.ones((s, s)), np.int64), upper=0),
                   to=TensorProto.BOOL)
        return net("Where", tril, scores, net.const(-np.inf))
    assert kind == "where_not"       # masked_fill(dropped, -inf) on a run-time bool
    feed["dropped"] = net.rng.random((b, 1, 1, s)) < 0.3
    net.inputs.append(("dropped", [b, 1, 1, s], TensorProto.BOOL))
    return net("Where", "dropped", net.const(-np.inf), scores)


def run(model, feed: dict, ctx=None):
    """jitnn's outputs and the plan of the first output (``jitnn.explain``)."""
    ctx = ctx or jitnn.Context(num_threads=1)
    converted = jitnn.onnx.prepare(model, ctx, input_shapes={k: v.shape for k, v in feed.items()})
    plan = jitnn.explain(next(iter(converted.dispatch(feed).values())))
    return converted.run(feed), plan


def reference(net: Net, outputs: list[str], opset: int, feed: dict) -> dict:
    """The graph's outputs in float64 (onnx's reference evaluator)."""
    from onnx.reference import ReferenceEvaluator
    model = net.model(outputs, opset, np.float64)
    feed = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feed.items()}
    return dict(zip(outputs, ReferenceEvaluator(model).run(None, feed)))


def check(built, tol: float = 2e-5, ctx=None) -> tuple[list[str], str]:
    """jitnn against float64: (the plan's step labels, the plan)."""
    net, outputs, opset, feed = built
    got, plan = run(net.model(outputs, opset), feed, ctx)
    for name, value in reference(net, outputs, opset, feed).items():
        assert got[name].shape == value.shape, name
        err = float(np.abs(got[name] - value).max()) / max(float(np.abs(value).max()), 1e-30)
        assert err < tol, f"{name}: max error {err:.2e} of the largest magnitude"
    labels = [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan,
                                              re.MULTILINE)]
    return labels, plan


def _matmuls(labels: list[str]) -> int:
    return sum(label.startswith("matmul") for label in labels)


def _attention_net(net: Net, q, k, v, b: int, s: int, h: int, d: int, feed: dict,
                   mask: str = "add", kv_heads: int | None = None) -> str:
    """Q, K, V (B, S, H*D) split into heads (K and V: ``kv_heads``, which the
    MatMuls broadcast), SDPA as the exporter writes it, heads merged."""
    def heads(y, perm, count=h):
        return net("Transpose", net("Reshape", y, net.const([b, s, count, d], np.int64)),
                   perm=perm)
    kv_heads = kv_heads or h
    root = net.const(1 / math.sqrt(math.sqrt(d)))
    scores = net("MatMul", net("Mul", heads(q, [0, 2, 1, 3]), root),
                 net("Mul", heads(k, [0, 2, 3, 1], kv_heads), root))
    probs = net("Softmax", _mask(net, mask, scores, b, s, feed), axis=-1)
    probs = net("Where", net("IsNaN", probs), net.const(0.0), probs)
    out = net("Transpose", net("MatMul", probs, heads(v, [0, 2, 1, 3], kv_heads)),
              perm=[0, 2, 1, 3])
    return net("Reshape", out, net.const([b, s, h * d], np.int64))


def three_projections(mask: str = "add", b: int = 2, s: int = 7, h: int = 3, d: int = 5,
                      biases=(True, True, True), k_input: bool = False,
                      weight_input: bool = False, q_output: bool = False, seed: int = 0,
                      kv_heads: int | None = None):
    """BERT's self-attention: Q, K and V each ``MatMul(x, W) (+ bias)``.
    ``k_input``: K projects another input; ``weight_input``: V's weight is
    a graph input; ``q_output``: Q's projection is a graph output too."""
    net = Net(seed)
    e = h * d
    feed = {"x": random((b, s, e), seed)}
    x = net.input("x", (b, s, e))
    ys = {"q": x, "k": x, "v": x}
    if k_input:
        feed["y"] = random((b, s, e), seed + 1)
        ys["k"] = net.input("y", (b, s, e))
    proj = {}
    for (name, src), bias in zip(ys.items(), biases):
        n = e if name == "q" or kv_heads is None else kv_heads * d
        array = net.rng.standard_normal((e, n)) / math.sqrt(e)
        if weight_input and name == "v":
            feed["w"] = array.astype(np.float32)
            w = net.input("w", (e, n))
        else:
            w = net.const(array)
        y = net("MatMul", src, w)
        proj[name] = net("Add", y, net.const(net.rng.standard_normal(n) * 0.1)) if bias else y
    out = _attention_net(net, proj["q"], proj["k"], proj["v"], b, s, h, d, feed, mask, kv_heads)
    return net, [out] + ([proj["q"]] if q_output else []), 17, feed


def split_projection(mask: str = "causal_trilu", b: int = 2, s: int = 6, h: int = 2,
                     d: int = 7, sizes: str = "input", seed: int = 0):
    """GPT-2's attention: one ``MatMul(x, W) + bias`` of width 3 E split on the
    last axis into Q, K, V (the sizes as an input, an attribute or equal parts)."""
    net = Net(seed)
    e = h * d
    feed = {"x": random((b, s, e), seed)}
    x = net.input("x", (b, s, e))
    w = net.const(net.rng.standard_normal((e, 3 * e)) / math.sqrt(e))
    y = net("Add", net("MatMul", x, w), net.const(net.rng.standard_normal(3 * e) * 0.1))
    if sizes == "input":
        q, k, v = net("Split", y, net.const([e] * 3, np.int64), axis=2, outputs=3)
    elif sizes == "attribute":
        q, k, v = net("Split", y, axis=-1, split=[e] * 3, outputs=3)
    else:
        q, k, v = net("Split", y, axis=2, outputs=3)
    out = _attention_net(net, q, k, v, b, s, h, d, feed, mask)
    return net, [out], 17 if sizes != "attribute" else 12, feed


@pytest.mark.parametrize("mask", ["add", "causal_trilu", "where_not", "none"])
@pytest.mark.parametrize("b,s,h,d", [(2, 7, 3, 5), (1, 9, 2, 16), (3, 4, 1, 3)])
def test_three_projections_are_one_gemm(mask, b, s, h, d):
    labels, plan = check(three_projections(mask, b, s, h, d))
    assert _matmuls(labels) == 1, labels
    assert labels.count("scaled_dot_product_attention") == 1, labels
    assert FUSED in plan, plan


def test_projection_without_bias_packs_a_zero_bias():
    labels, plan = check(three_projections(biases=(True, False, True)))
    assert _matmuls(labels) == 1 and FUSED in plan, labels
    labels, plan = check(three_projections("none", biases=(False, False, False)))
    assert labels.count("matmul") == 1 and FUSED in plan, labels


def test_two_threads_and_the_unpacked_conversion_agree():
    built = three_projections("add", 2, 7, 3, 5)
    _, plan = check(built, ctx=jitnn.Context(num_threads=2))
    assert FUSED in plan
    saved, _qkv_patterns.ENABLED = _qkv_patterns.ENABLED, False
    try:
        labels, plan = check(built)
    finally:
        _qkv_patterns.ENABLED = saved
    assert FUSED not in plan and _matmuls(labels) == 3, labels


@pytest.mark.parametrize("case", ["k_input", "weight_input", "q_output"])
def test_projections_that_stay_apart(case):
    """Another input for K, a weight given at run time, Q's projection read
    outside the attention: three products, the same numbers."""
    labels, plan = check(three_projections(**{case: True}))
    assert FUSED not in plan, plan
    assert _matmuls(labels) == 3, labels


@pytest.mark.parametrize("sizes", ["input", "attribute", "equal"])
@pytest.mark.parametrize("mask", ["causal_trilu", "add"])
def test_split_parts_are_views_of_the_product(sizes, mask):
    labels, plan = check(split_projection(mask, sizes=sizes))
    assert not {"split", "slice"} & set(labels), labels
    assert _matmuls(labels) == 1 and FUSED in plan, labels
    saved, _qkv_patterns.ENABLED = _qkv_patterns.ENABLED, False
    try:
        labels, plan = check(split_projection(mask, sizes=sizes))
    finally:
        _qkv_patterns.ENABLED = saved
    assert FUSED not in plan and "split" in labels, labels


@pytest.mark.parametrize("mask", ["add", "causal_trilu"])
def test_one_key_value_head_runs_the_projections_apart(mask):
    """Multi-query attention (K and V of one head, broadcast by the MatMuls):
    the attention runs its grouped layout, which reads Q, K and V as they are;
    the three projections stay apart and give the same numbers."""
    labels, plan = check(three_projections(mask, 2, 6, 4, 5, kv_heads=1))
    assert "scaled_dot_product_attention" in labels and FUSED not in plan, labels
    assert _matmuls(labels) == 3, labels



def _rotate(net: Net, t: str, cos: str, sin: str, d: int, last: str) -> str:
    """Rotary embedding as exporters write it: t * cos + rotate_half(t) * sin."""
    low = net("Slice", t, net.const([0], np.int64), net.const([d // 2], np.int64), last)
    high = net("Slice", t, net.const([d // 2], np.int64), net.const([2 ** 62], np.int64), last)
    rotated = net("Concat", net("Neg", high), low, axis=-1)
    return net("Add", net("Mul", t, cos), net("Mul", rotated, sin))


def _repeat(net: Net, kv: str, b: int, h: int, kv_heads: int, s: int, d: int) -> str:
    """Grouped-query K or V repeated to every query head (repeat_kv's export)."""
    if h == kv_heads:
        return kv
    y = net("Unsqueeze", kv, net.const([2], np.int64))
    y = net("Expand", y, net.const([b, kv_heads, h // kv_heads, s, d], np.int64))
    return net("Reshape", y, net.const([b, h, s, d], np.int64))


def rotary_attention(mask: str = "causal_trilu", b: int = 2, s: int = 7, h: int = 4,
                     kv_heads: int = 2, d: int = 6, biases: bool = False, tables: int = 2,
                     v_output: bool = False, seed: int = 0):
    """Llama's (Qwen2's with ``biases``) self-attention as exported: Q of ``h``
    heads, K and V of ``kv_heads``, each a ``MatMul(x, W)`` split into heads
    and transposed; Q and K through the rotary embedding (``Slice``, ``Neg``,
    ``Concat``, ``Mul``, ``Mul``, ``Add``; constant ``(S, D)`` tables, or
    ``(1, 1, S, D)`` with ``tables=4``); K and V repeated for the groups by
    ``Unsqueeze``, ``Expand``, ``Reshape`` when ``h > kv_heads``; the SDPA as
    exported. ``v_output``: V's projection is a graph output too."""
    net = Net(seed)
    e = h * d
    feed = {"x": random((b, s, e), seed)}
    x = net.input("x", (b, s, e))
    angle = net.rng.uniform(-3, 3, (s, d // 2))
    table_shape = (s, d) if tables == 2 else (1, 1, s, d)
    cos = net.const(np.cos(np.concatenate([angle, angle], 1)).reshape(table_shape))
    sin = net.const(np.sin(np.concatenate([angle, angle], 1)).reshape(table_shape))
    last = net.const([-1], np.int64)
    projections = []

    def heads(count: int) -> str:
        y = net("MatMul", x, net.const(net.rng.standard_normal((e, count * d)) / math.sqrt(e)))
        if biases:
            y = net("Add", y, net.const(net.rng.standard_normal(count * d) * 0.1))
        projections.append(y)
        y = net("Reshape", y, net.const([b, s, count, d], np.int64))
        return net("Transpose", y, perm=[0, 2, 1, 3])

    q = _rotate(net, heads(h), cos, sin, d, last)
    k = _repeat(net, _rotate(net, heads(kv_heads), cos, sin, d, last), b, h, kv_heads, s, d)
    v = _repeat(net, heads(kv_heads), b, h, kv_heads, s, d)
    scores = net("Mul", net("MatMul", q, net("Transpose", k, perm=[0, 1, 3, 2])),
                 net.const(1 / math.sqrt(d)))
    probs = net("Softmax", _mask(net, mask, scores, b, s, feed), axis=-1)
    probs = net("Where", net("IsNaN", probs), net.const(0.0), probs)
    out = net("Transpose", net("MatMul", probs, v), perm=[0, 2, 1, 3])
    out = net("Reshape", out, net.const([b, s, e], np.int64))
    return net, [out] + ([projections[2]] if v_output else []), 17, feed


ROTARY_CASES = [  # b, s, h, kv_heads, d
    (2, 7, 4, 2, 6),       # grouped-query: two query heads a key-value head
    (1, 1, 3, 3, 4),       # one token, odd heads, no groups
    (3, 33, 6, 3, 8),      # odd sequence, three key-value heads of two
    (1, 5, 4, 1, 4),       # multi-query, repeated by the export
]


@pytest.mark.parametrize("mask", ["causal_trilu", "add", "none"])
@pytest.mark.parametrize("b,s,h,kv_heads,d", ROTARY_CASES)
def test_rotary_projections_are_one_gemm(mask, b, s, h, kv_heads, d):
    """Q and K through rotary embeddings, V transposed: one GEMM whose rows
    the embeddings read in place and split_heads copies V's heads from."""
    labels, _ = check(rotary_attention(mask, b, s, h, kv_heads, d))
    assert _matmuls(labels) == 1, labels
    assert labels.count("rotary_embedding") == 2 and labels.count("split_heads") == 1, labels
    assert labels.count("scaled_dot_product_attention") == 1, labels
    assert not {"slice", "neg", "concat", "expand"} & set(labels), labels


@pytest.mark.parametrize("tables", [2, 4])
def test_rotary_projections_with_biases_and_two_threads(tables):
    built = rotary_attention("add", 2, 9, 4, 2, 8, biases=True, tables=tables)
    labels, _ = check(built, ctx=jitnn.Context(num_threads=2))
    assert _matmuls(labels) == 1 and labels.count("rotary_embedding") == 2, labels
    saved, _qkv_patterns.ENABLED = _qkv_patterns.ENABLED, False
    try:
        labels, _ = check(built)
    finally:
        _qkv_patterns.ENABLED = saved
    assert _matmuls(labels) == 3 and "split_heads" not in labels, labels


def test_rotary_projections_read_elsewhere_stay_apart():
    labels, _ = check(rotary_attention("causal_trilu", v_output=True))
    assert _matmuls(labels) == 3 and "split_heads" not in labels, labels
    assert labels.count("scaled_dot_product_attention") == 1, labels


@pytest.mark.parametrize("threads", [1, 2])
def test_rotary_and_split_heads_read_columns_in_place(threads):
    """The ops on a wider (B, S, N) product: rotary_embedding(columns=) and
    split_heads against float64 (odd sequence, heads from an inner column)."""
    from jitnn.ops.rotary import rotary_embedding_reference, split_heads_reference
    rng = np.random.default_rng(threads)
    ctx = jitnn.Context(num_threads=threads)
    for b, s, n, start, h, d in [(2, 7, 40, 8, 3, 4), (1, 1, 24, 0, 2, 6), (3, 33, 136, 64, 4, 16)]:
        x = rng.standard_normal((b, s, n)).astype(np.float32)
        angle = rng.uniform(-3, 3, (s, d))
        cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
        got = jitnn.rotary_embedding(ctx.tensor(x), ctx.tensor(cos), ctx.tensor(sin),
                                     layout="bshd", columns=(start, h)).numpy()
        part = x[:, :, start:start + h * d].reshape(b, s, h, d)
        want = rotary_embedding_reference(part, cos, sin, layout="bshd")
        assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
        got = jitnn.split_heads(ctx.tensor(x), h, d, start).numpy()
        assert np.array_equal(got, split_heads_reference(x, h, d, start))
    with pytest.raises(JitnnValueError, match="column"):
        jitnn.split_heads(np.zeros((1, 2, 8), np.float32), 2, 4, 2)
    with pytest.raises(JitnnValueError, match="column"):
        jitnn.rotary_embedding(np.zeros((1, 2, 8), np.float32), np.zeros((2, 4), np.float32),
                               np.zeros((2, 4), np.float32), layout="bshd", columns=(6, 1))


@pytest.mark.parametrize("threads", [1, 2])
def test_replayed_rotary_split_heads_and_swiglu_are_bound(threads):
    """After a GEMM, as in a Llama layer: the embeddings on columns of its
    rows, split_heads and swiglu each write the plan's buffer and, replayed,
    run as one bound call, with float64's numbers for new inputs every run."""
    from jitnn.ops.rotary import rotary_embedding_reference, split_heads_reference
    ctx = jitnn.Context(num_threads=threads)
    (b, s, k), h, d = (2, 9, 16), 2, 8
    w = random((k, 4 * h * d), 90, 0.3)
    angle = np.random.default_rng(91).uniform(-3, 3, (s, d))
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    g = jitnn.GraphBuilder(ctx)
    y = g.reshape(g.matmul(g.reshape(g.input("x", (b, s, k)), (b * s, k)), g.constant(w)),
                  (b, s, 4 * h * d))
    q = g.rotary_embedding(y, g.constant(cos), g.constant(sin), layout="bshd", columns=(8, h))
    v = g.split_heads(y, h, d, 3 * h * d)
    graph = g.build({"q": g.relu(q), "v": g.relu(v), "m": g.relu(g.swiglu(y))})
    outs = {"q": np.empty((b, h, s, d), np.float32), "v": np.empty((b, h, s, d), np.float32),
            "m": np.empty((b, s, 2 * h * d), np.float32)}
    for seed in range(3):
        x = random((b, s, k), 92 + seed)
        ctx.compute(graph, {"x": x}, outs)
        yd = x.astype(np.float64) @ w
        part = yd[:, :, 8:8 + h * d].reshape(b, s, h, d)
        for name, want in (("q", rotary_embedding_reference(part, cos, sin, layout="bshd")),
                           ("v", split_heads_reference(yd, h, d, 3 * h * d)),
                           ("m", swiglu_reference(yd))):
            want = np.maximum(want, 0.0)
            assert np.abs(outs[name] - want).max() <= 2e-6 * np.abs(want).max(), name
    (program,) = graph._programs
    kinds = {(c.node.kind, bool(bound)) for c, bound in
             zip(program.steps, program.bindings.steps) if c.step.kind == "op"}
    assert {("rotary_rows", True), ("split_heads", True), ("swiglu_rows", True)} <= kinds, kinds

# --- the gated MLP (SwiGLU) ------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 2), (3, 5, 74), (128, 2752), (2, 1, 7, 18), (0, 6)])
@pytest.mark.parametrize("threads", [1, 2])
def test_swiglu_matches_the_reference(shape, threads):
    x = random(shape, 3) * 6                      # sigmoid's both tails
    ctx = jitnn.Context(num_threads=threads)
    got = jitnn.swiglu(ctx.tensor(x)).numpy()
    want = swiglu_reference(x)
    assert got.shape == shape[:-1] + (shape[-1] // 2,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(want).max(
        initial=0.0)))


def test_swiglu_refuses_odd_widths_and_overlaps():
    with pytest.raises(JitnnValueError, match="even"):
        jitnn.swiglu(np.zeros((2, 5), np.float32))
    y = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        gated_kernels.swiglu_rows(y, y.reshape(-1)[:16].reshape(4, 4))
    with pytest.raises(ValueError, match="twice"):
        gated_kernels.swiglu_rows(y, np.zeros((4, 3), np.float32))


def gated_mlp(b: int = 2, s: int = 7, e: int = 12, n: int = 20, seed: int = 0,
              swap: bool = False, gate_output: bool = False, up_input: bool = False,
              weight_input: bool = False, residual: bool = True):
    """``down(silu(x Wg) * (x Wu)) [+ x]`` as Llama's export writes it (``swap``:
    each Mul's inputs the other way round). ``gate_output``: the gate's product
    is a graph output too; ``up_input``: up projects another input;
    ``weight_input``: the up weight is a graph input."""
    net = Net(seed)
    feed = {"x": random((b, s, e), seed)}
    x = net.input("x", (b, s, e))
    gate = net("MatMul", x, net.const(net.rng.standard_normal((e, n)) / math.sqrt(e)))
    up_src = x
    if up_input:
        feed["y"] = random((b, s, e), seed + 1)
        up_src = net.input("y", (b, s, e))
    w_up = net.rng.standard_normal((e, n)) / math.sqrt(e)
    if weight_input:
        feed["w"] = w_up.astype(np.float32)
        w = net.input("w", (e, n))
    else:
        w = net.const(w_up)
    up = net("MatMul", up_src, w)
    sig = net("Sigmoid", gate)
    silu = net("Mul", sig, gate) if swap else net("Mul", gate, sig)
    act = net("Mul", up, silu) if swap else net("Mul", silu, up)
    out = net("MatMul", act, net.const(net.rng.standard_normal((n, e)) / math.sqrt(n)))
    if residual:
        out = net("Add", x, out)
    return net, [out] + ([gate] if gate_output else []), 17, feed


@pytest.mark.parametrize("b,s,e,n", [(2, 7, 12, 20), (1, 1, 8, 6), (3, 33, 16, 43)])
@pytest.mark.parametrize("swap", [False, True])
def test_gated_mlp_is_one_gemm_and_swiglu(b, s, e, n, swap):
    labels, _ = check(gated_mlp(b, s, e, n, swap=swap))
    assert labels.count("swiglu") == 1, labels
    assert _matmuls(labels) == 2, labels          # gate and up as one, and down
    assert not {"sigmoid", "mul"} & {label.split(" ")[0] for label in labels}, labels


def test_two_threads_and_the_exported_form_agree():
    built = gated_mlp(2, 9, 16, 24)
    labels, _ = check(built, ctx=jitnn.Context(num_threads=2))
    assert "swiglu" in labels
    saved, _gated_mlp.ENABLED = _gated_mlp.ENABLED, False
    try:
        labels, _ = check(built)
    finally:
        _gated_mlp.ENABLED = saved
    assert "swiglu" not in labels and _matmuls(labels) == 3, labels


@pytest.mark.parametrize("case", ["gate_output", "up_input", "weight_input"])
def test_gated_mlps_that_stay_apart(case):
    """The gate read outside the MLP, up of another input, a weight given at
    run time: the products apart, the same numbers."""
    labels, _ = check(gated_mlp(**{case: True}))
    assert "swiglu" not in labels and _matmuls(labels) == 3, labels


def llama_block(b: int, s: int, h: int, kv_heads: int, d: int, pad: bool, seed: int = 0):
    """Llama's self-attention as transformers exports it, with its output
    projection (and a bias): rotary Q and K, K and V repeated by
    ``Unsqueeze``, ``Expand``, ``Reshape``, the causal mask and the padding of
    ``attention_mask`` combined by ``And`` into ``Where(., 0, lowest)``
    added to the scores, the head-merge transpose and ``o_proj``."""
    net = Net(seed)
    e = h * d
    feed = {"x": np.random.default_rng(seed).standard_normal((b, s, e)).astype(np.float32)}
    x = net.input("x", (b, s, e))
    keep = np.ones((b, s), np.int64)
    if pad:
        keep[-1, :s // 3] = 0                     # left padding of the last sequence
    feed["attention_mask"] = keep
    net.inputs.append(("attention_mask", [b, s], TensorProto.INT64))
    angle = net.rng.uniform(-3, 3, (s, d // 2))
    cos = net.const(np.cos(np.concatenate([angle, angle], 1)))
    sin = net.const(np.sin(np.concatenate([angle, angle], 1)))
    last = net.const([-1], np.int64)

    def heads(count: int) -> str:
        y = net("MatMul", x, net.const(net.rng.standard_normal((e, count * d)) / math.sqrt(e)))
        y = net("Reshape", y, net.const([b, s, count, d], np.int64))
        return net("Transpose", y, perm=[0, 2, 1, 3])

    q = _rotate(net, heads(h), cos, sin, d, last)
    k = _repeat(net, _rotate(net, heads(kv_heads), cos, sin, d, last), b, h, kv_heads, s, d)
    v = _repeat(net, heads(kv_heads), b, h, kv_heads, s, d)
    # the mask: causal (a constant) and the keys attention_mask keeps, as a float mask
    causal = net.const(np.tri(s, s, dtype=bool).reshape(1, 1, s, s), np.bool_)
    padding = net("Cast", net("Reshape", "attention_mask", net.const([b, 1, 1, s], np.int64)),
                  to=TensorProto.BOOL)
    lowest = float(np.finfo(np.float32).min)
    mask = net("Where", net("And", causal, padding), net.const(0.0), net.const(lowest))
    scores = net("Mul", net("MatMul", q, net("Transpose", k, perm=[0, 1, 3, 2])),
                 net.const(1 / math.sqrt(d)))
    probs = net("Softmax", net("Add", scores, mask), axis=-1)
    out = net("Transpose", net("MatMul", probs, v), perm=[0, 2, 1, 3])
    out = net("Reshape", out, net.const([b, s, e], np.int64))
    y = net("MatMul", out, net.const(net.rng.standard_normal((e, e)) / math.sqrt(e)))
    return net, [net("Add", y, net.const(net.rng.standard_normal(e) * 0.1))], 17, feed


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("b, s, h, kv_heads, d, pad", [
    (1, 33, 8, 4, 16, False),   # Llama: two query heads a key-value head
    (3, 9, 6, 2, 6, True),      # batch 3, three a head, the last sequence padded
    (2, 1, 3, 1, 4, True),      # one token, odd heads, multi-query
    (2, 7, 3, 3, 4, True),      # no groups
])
def test_llama_attention_writes_the_projection_input(threads, b, s, h, kv_heads, d, pad):
    net, outputs, opset, feed = llama_block(b, s, h, kv_heads, d, pad)
    ctx = jitnn.Context(num_threads=threads)
    model = jitnn.onnx.prepare(net.model(outputs, opset), ctx,
                               input_shapes={k: v.shape for k, v in feed.items()})
    plan = jitnn.explain(next(iter(model.dispatch(feed).values())))
    assert "scaled_dot_product_attention" in plan
    for op in ("transpose", "expand", "softmax"):
        assert f" {op} " not in plan, plan
    graph = model.graph
    outs = {k: np.empty(shape, graph.output_dtypes[k]) for k, shape in graph.outputs.items()}
    rng = np.random.default_rng(1)
    for run in range(3):       # new inputs at every run, from the second one bound
        x = rng.standard_normal(feed["x"].shape).astype(np.float32)
        keep = feed["attention_mask"].copy()
        if pad and run:
            keep[0, :run] = 0
        inputs = {"x": x, "attention_mask": keep}
        ctx.compute(graph, inputs, outs)
        want = reference(net, outputs, opset, inputs)[outputs[0]]
        err = np.abs(outs[outputs[0]] - want).max() / np.abs(want).max()
        assert err < 2e-5, (run, err)
    program = graph._programs[0]
    labels = [(c.step.label, bool(binding)) for c, binding in
              zip(program.steps, program.bindings.steps) if c.step.kind == "op"]
    # the output projection reads the attention's buffer in place: bound (a product
    # of the kernel's direct path, below mm.DIRECT_MAX_MACS, never is)
    # (the Q, K and V product reads the graph's input, a new array at every run)
    products = [bound for label, bound in labels if label.startswith("matmul")]
    if b * s * (h * d) ** 2 > mm.DIRECT_MAX_MACS:
        assert len(products) == 2 and products[-1], labels
    assert not any(label.startswith("transpose") for label, _ in labels), labels
