"""The ONNX frontend's transformer patterns (jitnn/onnx/_patterns.py):
attention, the erf GELU, MatMul + bias + activation and the decomposed layer
and RMS norms, written with onnx.helper as ``torch.onnx.export`` (opset 17,
TorchScript) writes them. Each model is checked against a float64 run of
the same model (onnx's reference evaluator on a float64 copy) and for the
fused op in its plan (``jitnn.explain``) or its launch count; the patterns
that must not fuse (an intermediate read twice, or a graph output; constants
that are not the pattern's) still give the right numbers. The small BERT,
GPT-2, Llama and ViT of tests/data/models fire their fusions and match their
stored ONNX Runtime outputs."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, numpy_helper

import jitnn
import jitnn.onnx
from jitnn.onnx import _patterns
from tests.helpers import assert_schedule, nan_guards, random
from tests.onnx_models import evaluate, masked_attention_block
from tests.onnx_nets import Net

DATA = os.path.join(os.path.dirname(__file__), "data", "models")
LOWEST = float(np.finfo(np.float32).min)


# --- building models and their float64 reference ----------------------------------------

def _float64(model):
    """A copy of ``model`` computing in float64 (inputs, constants and Casts)."""
    import onnx
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    for i, tensor in enumerate(graph.initializer):
        if tensor.data_type == TensorProto.FLOAT:
            graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(tensor).astype(np.float64), tensor.name))
    for info in graph.input:
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in graph.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
            if node.op_type == "Constant" and a.name == "value" \
                    and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
    return copy


def reference(model, feed: dict) -> dict:
    """The model's outputs in float64 (onnx's reference evaluator)."""
    from onnx.reference import ReferenceEvaluator
    session = ReferenceEvaluator(_float64(model))
    feed = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feed.items()}
    names = [o.name for o in model.graph.output]
    with np.errstate(invalid="ignore"):          # softmax of a row of -inf: NaN, as ONNX says
        return dict(zip(names, session.run(None, feed)))


def run(model, feed: dict, ctx=None, *, fuse: bool = True):
    """jitnn's outputs and the plan of the first output (``jitnn.explain``)."""
    ctx = ctx or jitnn.Context(num_threads=1)
    saved, _patterns.ENABLED = _patterns.ENABLED, fuse
    try:
        converted = jitnn.onnx.prepare(model, ctx, input_shapes={k: v.shape
                                                                 for k, v in feed.items()})
    finally:
        _patterns.ENABLED = saved
    pending = converted.dispatch(feed)
    plan = jitnn.explain(next(iter(pending.values())))
    return converted.run(feed), plan


def steps(plan: str) -> list[str]:
    """The step labels of a ``jitnn.explain`` text."""
    return [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan,
                                            re.MULTILINE)]


def check(model, feed: dict, tol: float = 2e-5, **kwargs) -> list[str]:
    """jitnn against the float64 reference; returns the plan's step labels."""
    got, plan = run(model, feed, **kwargs)
    want = reference(model, feed)
    for name, value in want.items():
        scale = max(float(np.abs(value).max()), 1e-30)
        assert got[name].shape == value.shape, name
        err = float(np.abs(got[name] - value).max()) / scale
        assert err < tol, f"{name}: max error {err:.2e} of the largest magnitude"
    return steps(plan)


# --- attention ----------------------------------------------------------------------------

def _heads(net: Net, x: str, b: int, s: int, h: int, d: int, perm) -> str:
    """A projection of ``x`` (B, S, E), split into heads and transposed by ``perm``."""
    e = h * d
    w = net.const(net.rng.standard_normal((e, e)) / math.sqrt(e))
    y = net("Add", net.const(net.rng.standard_normal(e) * 0.1), net("MatMul", x, w))
    y = net("Reshape", y, net.const([b, s, h, d], np.int64))
    return net("Transpose", y, perm=perm)


def _mask(net: Net, kind: str, scores: str, b: int, s: int, feed: dict, rng,
          h: int = 1) -> str:
    """The scores with the mask of ``kind`` applied (as the exporters write it;
    ``h``: the heads, for a per-head mask)."""
    keep = rng.random((b, 1, 1, s)) > 0.3
    keep[..., 0] = True
    tri = np.tril(np.ones((s, s), bool))[None, None]
    if kind == "none":
        return scores
    if kind == "add":            # BERT: a run-time (B, 1, 1, S) float mask
        feed["mask"] = np.where(keep, 0.0, LOWEST).astype(np.float32)
        return net("Add", scores, net.input("mask", (b, 1, 1, s)))
    if kind == "add_bool":       # the SDPA export: Where(bool, 0, min) added
        feed["keep"] = keep
        bias = net("Where", net.input("keep", (b, 1, 1, s), TensorProto.BOOL),
                   net.const(0.0), net.const(LOWEST))
        return net("Add", scores, bias)
    if kind == "add_const":      # a constant float mask that is not causal
        m = np.where(rng.random((1, 1, s, s)) > 0.3, 0.0, -1e4) * (1 - np.eye(s))
        return net("Add", net.const(m), scores)
    if kind == "where":          # Where(bool mask, scores, min)
        feed["keep"] = keep
        return net("Where", net.input("keep", (b, 1, 1, s), TensorProto.BOOL), scores,
                   net.const(LOWEST))
    if kind == "where_not":      # masked_fill(mask, -inf): Where(dropped, -inf, scores)
        feed["dropped"] = ~keep
        return net("Where", net.input("dropped", (b, 1, 1, s), TensorProto.BOOL),
                   net.const(-np.inf), scores)
    if kind == "where_const":    # a constant bool mask that is not causal
        m = rng.random((1, 1, s, s)) > 0.3
        m[..., 0] = True
        return net("Where", net.const(m, np.bool_), scores, net.const(LOWEST))
    if kind == "causal_trilu":   # Trilu of ones, Where(tril, scores, -inf)
        ones = net("ConstantOfShape", net.const([s, s], np.int64),
                   value=numpy_helper.from_array(np.ones(1, np.bool_)))
        cond = net("Trilu", net("Cast", ones, to=TensorProto.BOOL), upper=0)
        return net("Where", cond, scores, net.const(-np.inf))
    if kind == "causal_range":   # GPT-2: LessOrEqual of Range outputs, Where(., ., min)
        r = net("Range", net.const(0, np.int64), net.const(s, np.int64),
                net.const(1, np.int64))
        cond = net("LessOrEqual", net("Unsqueeze", r, net.const([0], np.int64)),
                   net("Unsqueeze", r, net.const([1], np.int64)))
        return net("Where", cond, scores, net.const(LOWEST))
    if kind == "causal_add":     # a constant (1, 1, S, S) of 0 and -inf
        return net("Add", scores, net.const(np.where(tri, 0.0, -np.inf)))
    if kind == "add_rows":       # Llama: a run-time (B, 1, S, S) causal + padding mask
        feed["mask"] = np.where(keep & tri, 0.0, LOWEST).astype(np.float32)
        return net("Add", scores, net.input("mask", (b, 1, s, s)))
    if kind == "add_heads":      # a run-time mask of its own for each head
        rows = rng.random((b, h, s, s)) > 0.3
        rows[..., 0] = True
        feed["mask"] = np.where(rows, 0.0, -np.inf).astype(np.float32)
        return net("Add", scores, net.input("mask", (b, h, s, s)))
    if kind == "bias_and_add":   # MPNet, T5: a relative position bias, then the padding mask
        feed["mask"] = np.where(keep, 0.0, LOWEST).astype(np.float32)
        biased = net("Add", scores, net.const(rng.standard_normal((1, h, s, s))))
        return net("Add", biased, net.input("mask", (b, 1, 1, s)))
    if kind == "causal_and_pad":  # a causal Where, then the padding mask added
        feed["mask"] = np.where(keep, 0.0, LOWEST).astype(np.float32)
        causal = net("Where", net.const(tri, np.bool_), scores, net.const(LOWEST))
        return net("Add", causal, net.input("mask", (b, 1, 1, s)))
    raise ValueError(kind)


def bert_attention(mask: str = "add", scale: str = "qk", b: int = 2, s: int = 7, h: int = 3,
                   d: int = 8, guard: bool = True, seed: int = 0):
    """Self-attention as the TorchScript exporter writes transformers' SDPA
    attention: projections, Reshape + Transpose into heads, Q and Kᵀ scaled
    by sqrt(1/sqrt(D)) (``scale="qk"``) or the scores divided by sqrt(D)
    computed from Shape (``"div"``), a mask, Softmax, the IsNaN guard, · V, a
    Reshape to the same shape, the heads merged back."""
    net = Net(seed)
    feed = {"x": random((b, s, h * d), seed)}
    x = net.input("x", (b, s, h * d))
    q = _heads(net, x, b, s, h, d, [0, 2, 1, 3])
    kt = _heads(net, x, b, s, h, d, [0, 2, 3, 1])
    v = _heads(net, x, b, s, h, d, [0, 2, 1, 3])
    if scale == "qk":
        root = net.const(1 / math.sqrt(math.sqrt(d)))
        scores = net("MatMul", net("Mul", q, root), net("Mul", kt, root))
    else:
        depth = net("Cast", net("Slice", net("Shape", q), net.const([-1], np.int64),
                                net.const([2 ** 62], np.int64)), to=TensorProto.FLOAT)
        scores = net("Div", net("MatMul", q, kt), net("Sqrt", depth))
    probs = net("Softmax", _mask(net, mask, scores, b, s, feed, net.rng), axis=-1)
    if guard:
        probs = net("Where", net("IsNaN", probs), net.const(0.0), probs)
    out = net("MatMul", probs, v)
    out = net("Reshape", out, net("Shape", out))
    out = net("Transpose", out, perm=[0, 2, 1, 3])
    out = net("Reshape", out, net.const([b, s, h * d], np.int64))
    return net.model([out]), feed


def llama_attention(mask: str = "add_rows", h: int = 4, kv_heads: int = 2, b: int = 2,
                    s: int = 5, d: int = 8, repeat: str = "Unsqueeze", seed: int = 0):
    """Grouped-query self-attention as transformers' Llama exports it: Q of ``h``
    heads, K and V of ``kv_heads``, each K and V head repeated for its group by
    ``repeat_kv`` (``Unsqueeze`` (or a ``Reshape``) to (B, Hkv, 1, S, D),
    ``Expand`` to (B, Hkv, G, S, D), ``Reshape`` to (B, H, S, D); ``"broadcast"``:
    not repeated, one key-value head that MatMul broadcasts; ``"broadcast_rotated"``:
    the same with a constant added to it, as a rotary embedding), Kᵀ by
    ``Transpose(0, 1, 3, 2)``, the scores scaled, a mask, Softmax, the guard,
    · V, the heads merged back. ``repeat="tile"`` repeats the heads the other
    way round (KV head ``j % Hkv`` for Q head ``j``): no grouped attention."""
    net = Net(seed)
    feed = {"x": random((b, s, h * d), seed)}
    x = net.input("x", (b, s, h * d))
    groups = h // kv_heads

    def heads(count: int) -> str:
        w = net.const(net.rng.standard_normal((h * d, count * d)) / math.sqrt(h * d))
        y = net("Reshape", net("MatMul", x, w), net.const([b, s, count, d], np.int64))
        return net("Transpose", y, perm=[0, 2, 1, 3])

    def repeat_kv(kv: str) -> str:
        if repeat == "broadcast":          # one key-value head, broadcast by MatMul
            return kv
        if repeat == "broadcast_rotated":  # Falcon: the same after its rotary embedding
            return net("Add", kv, net.const(net.rng.standard_normal((s, d))))
        if repeat == "Unsqueeze":
            y = net("Unsqueeze", kv, net.const([2], np.int64))
        elif repeat == "Reshape":
            y = net("Reshape", kv, net.const([b, kv_heads, 1, s, d], np.int64))
        else:
            y = net("Unsqueeze", kv, net.const([1], np.int64))
        grouped = [b, groups, kv_heads, s, d] if repeat == "tile" else [b, kv_heads, groups, s, d]
        y = net("Expand", y, net.const(grouped, np.int64))
        return net("Reshape", y, net.const([b, h, s, d], np.int64))

    q, k, v = heads(h), repeat_kv(heads(kv_heads)), repeat_kv(heads(kv_heads))
    scores = net("Mul", net("MatMul", q, net("Transpose", k, perm=[0, 1, 3, 2])),
                 net.const(1 / math.sqrt(d)))
    probs = net("Softmax", _mask(net, mask, scores, b, s, feed, net.rng, h), axis=-1)
    probs = net("Where", net("IsNaN", probs), net.const(0.0), probs)
    out = net("Transpose", net("MatMul", probs, v), perm=[0, 2, 1, 3])
    return net.model([net("Reshape", out, net.const([b, s, h * d], np.int64))]), feed


@pytest.mark.parametrize("mask", ["none", "add", "add_rows", "add_heads", "causal_add",
                                  "causal_and_pad", "where"])
@pytest.mark.parametrize("repeat", ["Unsqueeze", "Reshape"])
def test_grouped_query_attention_reads_k_and_v_once(mask, repeat):
    """Llama's grouped-query attention: one attention over the un-repeated K
    and V (query head h reads key-value head h // G), the masks as they are;
    no Expand of K, V or a mask, and the head merge written by the attention."""
    model, feed = llama_attention(mask, repeat=repeat)
    labels = check(model, feed)
    assert labels.count("scaled_dot_product_attention") == 1 and "softmax" not in labels, labels
    assert "expand" not in labels and labels.count("transpose") == 3, labels


@pytest.mark.parametrize("h, kv_heads, s", [(6, 2, 7), (3, 1, 1), (2, 2, 9)])
def test_grouped_query_attention_shapes(h, kv_heads, s):
    """Three groups of two, one key-value head for all (multi-query), one query
    per key-value head (the repeat is a copy)."""
    model, feed = llama_attention("causal_and_pad", h=h, kv_heads=kv_heads, s=s, b=3)
    labels = check(model, feed)
    assert "scaled_dot_product_attention" in labels and "softmax" not in labels, labels


@pytest.mark.parametrize("mask", ["none", "add_rows", "causal_add"])
@pytest.mark.parametrize("repeat", ["broadcast", "broadcast_rotated"])
def test_multi_query_attention_broadcast_by_matmul(mask, repeat):
    """Falcon's multi-query attention: one key-value head that the two MatMuls
    broadcast to every query head: one attention, all query heads one group
    (from the head-split transposes too, where Q's is then run)."""
    model, feed = llama_attention(mask, h=4, kv_heads=1, repeat=repeat)
    labels = check(model, feed)
    assert labels.count("scaled_dot_product_attention") == 1 and "softmax" not in labels, labels


def test_heads_repeated_as_a_tile_are_no_grouped_attention():
    """KV head ``j % Hkv`` for query head ``j`` is not Llama's grouping: the
    pattern leaves it, and the numbers are still the model's."""
    model, feed = llama_attention("add", repeat="tile")
    labels = check(model, feed)
    assert "scaled_dot_product_attention" not in labels, labels


@pytest.mark.parametrize("mask", ["none", "add", "add_bool", "add_const", "where", "where_not",
                                  "where_const", "causal_trilu", "causal_range", "causal_add",
                                  "causal_and_pad", "bias_and_add"])
def test_attention_bshd_fuses_with_each_mask(mask):
    model, feed = bert_attention(mask)
    labels = check(model, feed)
    assert labels.count("scaled_dot_product_attention") == 1, labels
    assert not {"softmax", "transpose"} & set(labels), labels
    # the IsNaN guard stays only where a mask can drop every key of a row with
    # -inf (a run-time -inf Where; a float mask input could hold -inf too), and
    # then in the attention's store: no pass of its own
    assert "is_nan" not in labels, labels
    assert nan_guards(model, feed) == [mask in ("where_not", "add", "causal_and_pad",
                                                "bias_and_add")]


def test_attention_all_masked_rows_as_the_model_gives_them():
    """Every key of batch 0 masked: with a -inf fill its softmax is NaN and
    the exporter's guard makes its output 0; with a float32-lowest fill every
    key weighs the same (the mean of V). Batch 1 is an ordinary row."""
    for kind in ("where_not", "where"):
        model, feed = bert_attention(kind)
        if kind == "where_not":
            feed["dropped"][0] = True
        else:
            feed["keep"][0] = False
        labels = check(model, feed)
        assert "scaled_dot_product_attention" in labels, labels
        got, _ = run(model, feed)
        if kind == "where_not":
            assert not np.any(next(iter(got.values()))[0])


@pytest.mark.parametrize("scale", ["qk", "div"])
def test_attention_scale_from_constants_or_shape(scale):
    model, feed = bert_attention("add", scale=scale, guard=False, h=2, d=16, s=9)
    labels = check(model, feed)
    assert "scaled_dot_product_attention" in labels and "softmax" not in labels, labels


def test_attention_causal_becomes_is_causal():
    """A constant causal mask is no operand: the attention node reads Q, K, V only."""
    model, feed = bert_attention("causal_trilu", guard=False)
    _, plan = run(model, feed)
    line = next(l for l in plan.splitlines() if "scaled_dot_product_attention" in l)
    assert re.search(r"\s(n\w+,){2}n\w+ -> nchw", line), line     # Q, K, V: no mask


def test_attention_bhsd_operands_and_k_already_transposed():
    """Q, K, V given as (B, H, S, D) (Kᵀ a Transpose(0, 1, 3, 2) of K, or a
    (B, H, D, S) input), a scale on the scores, no transposes around."""
    b, h, s, d = 2, 3, 5, 4
    for k_given_transposed in (False, True):
        net = Net()
        q = net.input("q", (b, h, s, d))
        v = net.input("v", (b, h, s, 6))
        if k_given_transposed:
            kt = net.input("kt", (b, h, d, s))
            feed = {"kt": random((b, h, d, s), 2)}
        else:
            kt = net("Transpose", net.input("k", (b, h, s, d)), perm=[0, 1, 3, 2])
            feed = {"k": random((b, h, s, d), 2)}
        feed.update(q=random((b, h, s, d), 1), v=random((b, h, s, 6), 3))
        scores = net("Mul", net("MatMul", q, kt), net.const(0.5))
        out = net("MatMul", net("Softmax", scores, axis=3), v)
        labels = check(net.model([out]), feed)
        assert "scaled_dot_product_attention" in labels and "softmax" not in labels, labels


@pytest.mark.parametrize("window_mask", ["constant", "run_time"])
def test_attention_with_a_window_mask_on_a_view_of_the_scores(window_mask):
    """Swin's shifted windows: scores + a relative position bias (1, H, N, N),
    viewed as (images, windows, H, N, N) for the per-window mask (1, windows,
    1, N, N), viewed back, softmax: one attention with the two masks as one
    constant (the view's mask on the scores' own shape). A mask from an input
    on the view is left to the op-by-op conversion."""
    images, windows, h, n, d = 2, 4, 3, 5, 4
    b = images * windows
    net = Net(6)
    q, k, v = (net.input(name, (b, h, n, d)) for name in "qkv")
    feed = {name: random((b, h, n, d), seed) for seed, name in enumerate("qkv")}
    scores = net("MatMul", net("Mul", q, net.const(0.5)), net("Transpose", k, perm=[0, 1, 3, 2]))
    scores = net("Add", scores, net.const(net.rng.standard_normal((1, h, n, n))))
    view = net("Reshape", scores, net.const([-1, windows, h, n, n], np.int64))
    mask = np.where(net.rng.random((1, windows, 1, n, n)) > 0.3, 0.0, -100.0)
    if window_mask == "constant":
        view = net("Add", view, net.const(mask))
    else:
        view = net("Add", net.input("mask", mask.shape), view)
        feed["mask"] = mask.astype(np.float32)
    scores = net("Reshape", view, net.const([-1, h, n, n], np.int64))
    out = net("MatMul", net("Softmax", scores, axis=-1), v)
    labels = check(net.model([out]), feed)
    fused = window_mask == "constant"
    assert ("scaled_dot_product_attention" in labels) == fused, labels
    assert ("softmax" in labels) != fused, labels
    # the bias and the window mask add up at load time: no add runs
    assert not fused or "add" not in labels, labels


def test_attention_3d_heads_from_onnx_models():
    """tests/onnx_models.py's BERT-style block: (N, S, D) attention, a
    (1, 1, S) additive mask built from the int64 mask input."""
    model = masked_attention_block(seq=7)
    rng = np.random.default_rng(1)
    feed = {"input_ids": rng.integers(0, 50, (1, 7)), "attention_mask":
            np.array([[1, 1, 1, 1, 1, 0, 0]])}
    got, plan = run(model, feed)
    want = evaluate(model, feed)
    np.testing.assert_allclose(got[model.graph.output[0].name],
                               want[model.graph.output[0].name], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[model.graph.output[1].name],
                                  want[model.graph.output[1].name])
    assert "scaled_dot_product_attention" in steps(plan), plan


def test_attention_not_fused_when_an_intermediate_is_read_twice():
    """The scores also go to an output, or the probabilities do: nothing
    fuses (the attention op never writes them), the numbers stay right."""
    for exposed in ("scores", "probs"):
        net = Net()
        feed = {"x": random((2, 3, 5, 4))}
        x = net.input("x", (2, 3, 5, 4))
        scores = net("MatMul", x, net("Transpose", x, perm=[0, 1, 3, 2]))
        scaled = net("Mul", scores, net.const(0.5))
        probs = net("Softmax", scaled, axis=-1)
        out = net("MatMul", probs, x)
        second = net("ReduceSum", scaled if exposed == "scores" else probs,
                     net.const([-1], np.int64))
        labels = check(net.model([out, second]), feed)
        assert "softmax" in labels and "scaled_dot_product_attention" not in labels, labels


def test_attention_left_alone_when_a_constant_does_not_fit():
    """A per-head scale (not one number) and a mask fill of -100 (a Where
    that replaces scores, not one that drops keys): converted op by op."""
    b, h, s, d = 1, 2, 4, 4
    for variant in ("per_head_scale", "weak_fill"):
        net = Net()
        feed = {"q": random((b, h, s, d), 1)}
        q = net.input("q", (b, h, s, d))
        scores = net("MatMul", q, net("Transpose", q, perm=[0, 1, 3, 2]))
        if variant == "per_head_scale":
            scores = net("Mul", scores, net.const([[[[0.5]], [[0.25]]]]))
        else:
            m = np.tril(np.ones((s, s), bool)) ^ np.eye(s, k=-1, dtype=bool)
            scores = net("Where", net.const(m, np.bool_), scores, net.const(-100.0))
        out = net("MatMul", net("Softmax", scores, axis=-1), q)
        labels = check(net.model([out]), feed)
        assert "softmax" in labels and "scaled_dot_product_attention" not in labels, labels


def test_fusions_off_give_the_same_numbers():
    model, feed = bert_attention("add")
    fused, _ = run(model, feed)
    plain, plan = run(model, feed, fuse=False)
    assert "softmax" in steps(plan)
    for name in fused:
        np.testing.assert_allclose(fused[name], plain[name], rtol=1e-5, atol=1e-6)


# --- GELU, linear + activation --------------------------------------------------------

def _gelu(net: Net, x: str, order: str) -> str:
    """Exact GELU as exporters write it, in ``order``."""
    if order.startswith("mul"):
        inner = net("Mul", net.const(math.sqrt(0.5)), x)
    else:
        inner = net("Div", x, net.const(math.sqrt(2.0)))
    one_plus = net("Add", net.const(1.0), net("Erf", inner))
    if order.endswith("x_first"):       # BERT: x * (1 + erf) then * 0.5
        return net("Mul", net("Mul", x, one_plus), net.const(0.5))
    if order.endswith("half_first"):    # (x * 0.5) * (1 + erf)
        return net("Mul", net("Mul", x, net.const(0.5)), one_plus)
    return net("Mul", x, net("Mul", one_plus, net.const(0.5)))   # x * ((1 + erf) * 0.5)


def linear_net(activation: str, rows=(2, 9), k: int = 12, n: int = 20, seed: int = 0):
    """``act(x @ W + b)`` on a (..., K) input, the bias added first as the exporter writes it."""
    net = Net(seed)
    shape = tuple(rows) + (k,)
    feed = {"x": random(shape, seed)}
    y = net("MatMul", net.input("x", shape), net.const(net.rng.standard_normal((k, n)) / 3))
    y = net("Add", net.const(net.rng.standard_normal(n)), y)
    if activation in ("div_x_first", "mul_x_first", "div_half_first", "div_half_last"):
        y = _gelu(net, y, activation)
    elif activation == "LeakyRelu":
        y = net(activation, y, alpha=0.2)
    elif activation != "none":
        y = net(activation, y)
    return net.model([y]), feed


@pytest.mark.parametrize("order", ["div_x_first", "mul_x_first", "div_half_first",
                                   "div_half_last"])
@pytest.mark.parametrize("in_epilogue", [False, True])
def test_gelu_after_linear(order, in_epilogue, monkeypatch):
    """GELU after MatMul + bias: all in one launch with ``GELU_IN_EPILOGUE``
    (the default), else the GEMM with the bias in its epilogue, then the
    vectorized gelu pass."""
    monkeypatch.setattr(_patterns, "GELU_IN_EPILOGUE", in_epilogue)
    model, feed = linear_net(order)
    labels = check(model, feed)
    want = ["matmul + add + gelu"] if in_epilogue else ["matmul + add", "gelu"]
    assert [l for l in labels if l != "reshape"] == want, labels
    ctx = jitnn.Context(num_threads=1)
    converted = jitnn.onnx.prepare(model, ctx)
    converted.run(feed)                                  # compile, pack
    with assert_schedule(ctx, kernels=1 if in_epilogue else 2, fused=2 if in_epilogue else 1):
        converted.run(feed)


@pytest.mark.parametrize("activation", ["none", "Relu", "Sigmoid", "Tanh", "LeakyRelu",
                                        "HardSwish"])
def test_linear_bias_activation_fuse_on_3d_input(activation):
    model, feed = linear_net(activation, rows=(3, 5))
    labels = check(model, feed)
    name = {"none": "", "Relu": " + relu", "Sigmoid": " + sigmoid", "Tanh": " + tanh",
            "LeakyRelu": " + leaky_relu", "HardSwish": " + hard_swish"}[activation]
    assert f"matmul + add{name}" in labels, labels


def test_gelu_alone_and_with_a_wrong_constant():
    """GELU on a run-time input is one gelu; a Div by 1.5 is no GELU and
    converts op by op (and still matches)."""
    net = Net()
    feed = {"x": random((2, 7, 9))}
    y = _gelu(net, net.input("x", (2, 7, 9)), "div_x_first")
    labels = check(net.model([y]), feed)
    assert labels == ["gelu"], labels
    model = net.model([y])
    for init in model.graph.initializer:
        if abs(numpy_helper.to_array(init).reshape(-1)[0] - math.sqrt(2)) < 1e-6:
            init.CopyFrom(numpy_helper.from_array(np.array(1.5, np.float32), init.name))
    labels = check(model, feed)
    assert "gelu" not in labels and "erf" in " ".join(labels), labels


def _gelu_tanh(net: Net, x: str, order: str, cube: str = "pow", cube_constant=0.044715) -> str:
    """The tanh GELU as exporters write it: ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x +
    0.044715 * x^3)))``, x^3 as ``Pow(x, 3)`` or ``x * (x * x)``, or BLOOM's ``sqrt(2 / pi)
    * x * (1 + 0.044715 * x * x)`` (``cube="bloom"``), the products in ``order``."""
    if cube == "bloom":
        square = net("Mul", net("Mul", x, net.const(cube_constant)), x)
        t = net("Tanh", net("Mul", net("Mul", x, net.const(0.79788456)),
                            net("Add", square, net.const(1.0))))
    else:
        x3 = net("Pow", x, net.const(3.0)) if cube == "pow" else net("Mul", x, net("Mul", x, x))
        inner = net("Add", x, net("Mul", net.const(cube_constant), x3))
        t = net("Tanh", net("Mul", inner, net.const(math.sqrt(2 / math.pi))))
    one_plus = net("Add", t, net.const(1.0))
    if order == "half_first":            # GPT-2's gelu_new: (0.5 * x) * (1 + tanh)
        return net("Mul", net("Mul", net.const(0.5), x), one_plus)
    return net("Mul", net("Mul", x, one_plus), net.const(0.5))


@pytest.mark.parametrize("order, cube", [("half_first", "pow"), ("x_first", "pow"),
                                         ("half_first", "mul"), ("x_first", "bloom")])
def test_gelu_tanh_approximation_is_one_gelu(order, cube):
    """GPT-2's gelu_new, BLOOM's and PyTorch's gelu(approximate="tanh") as exported: one
    gelu(approximate="tanh") pass; a constant that is not the approximation's
    (0.05 for 0.044715) leaves the chain op by op, with the same numbers as
    the float64 model either way."""
    net = Net()
    feed = {"x": random((3, 11), seed=1) * 3}
    y = _gelu_tanh(net, net.input("x", (3, 11)), order, cube)
    assert check(net.model([y]), feed) == ["gelu"]
    net = Net()
    y = _gelu_tanh(net, net.input("x", (3, 11)), order, cube, cube_constant=0.05)
    labels = check(net.model([y]), feed)
    assert "gelu" not in labels and any("tanh" in label for label in labels), labels


@pytest.mark.parametrize("form", ["pattern", "Gelu"])
def test_gelu_tanh_after_linear(form):
    """MatMul + bias + the tanh GELU (the pattern, or opset 20's Gelu with
    approximate="tanh"): the GEMM with its bias, then one gelu pass (the tanh
    GELU is no epilogue activation)."""
    net = Net(seed=3)
    feed = {"x": random((2, 5, 12), seed=3)}
    y = net("MatMul", net.input("x", (2, 5, 12)), net.const(net.rng.standard_normal((12, 9))))
    y = net("Add", y, net.const(net.rng.standard_normal(9)))
    y = _gelu_tanh(net, y, "half_first") if form == "pattern" else \
        net("Gelu", y, approximate="tanh")
    labels = check(net.model([y], opset=20), feed)
    assert [label for label in labels if label != "reshape"] == ["matmul + add", "gelu"], labels


# --- layer normalization -----------------------------------------------------------------

def layer_norm_net(square: str = "pow", divide: str = "div", affine: bool = True,
                   axes=(-1,), shape=(2, 5, 12), opset: int = 17, eps: float = 1e-5):
    net = Net(3)
    feed = {"x": random(shape, 3, scale=2.0) + 1.0}
    x = net.input("x", shape)

    def mean(v):
        if opset >= 18:
            return net("ReduceMean", v, net.const(list(axes), np.int64))
        return net("ReduceMean", v, axes=list(axes))
    centered = net("Sub", x, mean(x))
    sq = net("Pow", centered, net.const(2.0)) if square == "pow" else \
        net("Mul", centered, centered)
    std = net("Sqrt", net("Add", mean(sq), net.const(eps)))
    y = net("Div", centered, std) if divide == "div" else \
        net("Mul", centered, net("Reciprocal", std))
    if affine:
        ax = [a % len(shape) for a in axes]
        dims = [shape[i] if i in ax else 1 for i in range(min(ax), len(shape))]
        y = net("Mul", y, net.const(net.rng.uniform(0.5, 1.5, dims)))
        y = net("Add", net.const(net.rng.standard_normal(dims)), y)
    return net.model([y], opset), feed


@pytest.mark.parametrize("square,divide,affine", [("pow", "div", True), ("mul", "div", True),
                                                  ("pow", "reciprocal", True),
                                                  ("pow", "div", False)])
def test_decomposed_layer_norm_is_one_op(square, divide, affine):
    model, feed = layer_norm_net(square, divide, affine)
    labels = check(model, feed)
    assert labels == ["layer_normalization"], labels


def test_decomposed_layer_norm_trailing_axes_opset18_and_not_trailing():
    model, feed = layer_norm_net(axes=(-2, -1), opset=18)
    assert check(model, feed) == ["layer_normalization"]
    model, feed = layer_norm_net(axes=(1,), shape=(2, 5, 12))
    labels = check(model, feed)
    assert "layer_normalization" not in labels and "reduce_mean" in labels, labels


def rms_norm_net(square: str = "pow", divide: str = "one_div", scale: str = "after",
                 cast: bool = False, axes=(-1,), shape=(2, 6, 16), opset: int = 17,
                 two: float = 2.0, one: float = 1.0):
    """x * rsqrt(mean(x^2) + eps) * w as the exporters write it (Llama's
    LlamaRMSNorm: Pow, ReduceMean, Add, Sqrt, Div(1, .), Mul by x, Cast, Mul by
    the weight); x is also read by a residual Add, as in a decoder layer."""
    net = Net(4)
    feed = {"x": random(shape, 4, scale=2.0) + 0.5}
    x = net.input("x", shape)
    sq = net("Pow", x, net.const(two)) if square == "pow" else net("Mul", x, x)
    ms = net("ReduceMean", sq, net.const(list(axes), np.int64)) if opset >= 18 else \
        net("ReduceMean", sq, axes=list(axes))
    std = net("Sqrt", net("Add", ms, net.const(1e-6)))
    if divide == "div_x":
        y = net("Div", x, std)
    elif divide == "reciprocal":
        y = net("Mul", net("Reciprocal", std), x)
    else:
        y = net("Mul", x, net("Div", net.const(one), std))
    if cast:
        y = net("Cast", y, to=TensorProto.FLOAT)
    ax = [a % len(shape) for a in axes]
    dims = [shape[i] for i in range(min(ax), len(shape))]
    weight = net.const(net.rng.uniform(0.5, 1.5, dims))
    if scale == "after":
        y = net("Mul", y, weight)
    elif scale == "before":
        y = net("Mul", weight, y)
    return net.model([y, net("Add", x, y)], opset), feed


@pytest.mark.parametrize("square,divide,scale,cast,opset", [
    ("pow", "one_div", "before", True, 17),      # Llama's export
    ("mul", "one_div", "after", False, 17),
    ("pow", "div_x", "after", False, 18),
    ("pow", "reciprocal", "none", True, 17),
    ("mul", "reciprocal", "after", False, 18)])
def test_decomposed_rms_norm_is_one_op(square, divide, scale, cast, opset):
    model, feed = rms_norm_net(square, divide, scale, cast, opset=opset)
    labels = check(model, feed)
    assert labels.count("rms_normalization") == 1, labels
    assert not {"pow", "reduce_mean", "sqrt", "div"} & set(" ".join(labels).split()), labels
    _, plan = run(model, feed)
    assert "0 reorder(s) planned" in plan, plan


@pytest.mark.parametrize("case", ["two_axes", "middle_axis", "fourth_power", "one_is_two"])
def test_rms_norm_other_axes_and_constants(case):
    """Two trailing axes fuse; a middle axis, x^4 or 2 / sqrt(...) are no RMS
    norm and run as their ops, with the right numbers."""
    options = {"two_axes": {"axes": (-2, -1)}, "middle_axis": {"axes": (1,)},
               "fourth_power": {"two": 4.0}, "one_is_two": {"one": 2.0}}[case]
    model, feed = rms_norm_net(scale="none" if case == "middle_axis" else "after", **options)
    labels = check(model, feed)
    assert ("rms_normalization" in labels) == (case == "two_axes"), labels


def test_rms_normalization_op_of_opset_23():
    net = Net(5)
    feed = {"x": random((2, 3, 5, 8), 5)}
    y = net("RMSNormalization", net.input("x", (2, 3, 5, 8)),
            net.const(net.rng.uniform(0.5, 1.5, (5, 8))), axis=-2, epsilon=1e-3)
    model = net.model([y], opset=23)
    got, plan = run(model, feed)
    x = feed["x"].astype(np.float64)
    want = x / np.sqrt((x * x).mean(axis=(2, 3), keepdims=True) + 1e-3) * \
        numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(got[y], want, rtol=2e-6, atol=2e-6)
    assert steps(plan) == ["rms_normalization"], plan


def test_a_bigger_block_context():
    model, feed = bert_attention("causal_and_pad")
    labels = check(model, feed, ctx=jitnn.Context(num_threads=1, block=16))
    assert "scaled_dot_product_attention" in labels


# --- a BERT-base encoder layer ------------------------------------------------------------

def encoder_layer(seq: int = 128, hidden: int = 768, heads: int = 12, batch: int = 1,
                  seed: int = 0, fill: float = -np.inf):
    """One BERT encoder layer (post-norm) as the TorchScript exporter writes
    transformers' BertLayer at opset 17: Q, K, V projections, the SDPA
    attention pattern of :func:`bert_attention` with BERT's mask (the int64
    ``attention_mask`` input as ``Where(bool, 0, fill)`` of shape ``(B, 1, 1,
    S)``, added to the scores; transformers' export has ``fill = -inf``),
    the IsNaN guard, the output projection, residual add and
    LayerNormalization, the 4x intermediate with the erf GELU, the second
    residual and LayerNormalization. Returns (model, inputs)."""
    net = Net(seed)
    d = hidden // heads
    feed = {"x": random((batch, seq, hidden), seed),
            "attention_mask": np.ones((batch, seq), np.int64)}
    feed["attention_mask"][:, seq - seq // 8:] = 0        # the last eighth is padding
    x = net.input("x", (batch, seq, hidden))
    keep = net("Unsqueeze", net("Cast", net.input("attention_mask", (batch, seq),
                                                 TensorProto.INT64), to=TensorProto.BOOL),
               net.const([1, 2], np.int64))
    mask = net("Where", keep, net.const(0.0), net.const(fill))

    def linear(v: str, k: int, n: int) -> str:
        w = net.const(net.rng.standard_normal((k, n)) / math.sqrt(k))
        return net("Add", net.const(net.rng.standard_normal(n) * 0.1), net("MatMul", v, w))

    def split(v: str, perm) -> str:
        return net("Transpose", net("Reshape", v, net.const([batch, seq, heads, d], np.int64)),
                   perm=perm)

    def norm(v: str) -> str:
        return net("LayerNormalization", v, net.const(net.rng.uniform(0.8, 1.2, hidden)),
                   net.const(net.rng.standard_normal(hidden) * 0.1), axis=-1, epsilon=1e-12)
    root = net.const(1 / math.sqrt(math.sqrt(d)))
    q = net("Mul", split(linear(x, hidden, hidden), [0, 2, 1, 3]), root)
    kt = net("Mul", split(linear(x, hidden, hidden), [0, 2, 3, 1]), root)
    v = split(linear(x, hidden, hidden), [0, 2, 1, 3])
    probs = net("Softmax", net("Add", net("MatMul", q, kt), mask), axis=-1)
    probs = net("Where", net("IsNaN", probs), net.const(0.0), probs)
    context = net("Transpose", net("MatMul", probs, v), perm=[0, 2, 1, 3])
    context = net("Reshape", context, net.const([batch, seq, hidden], np.int64))
    h = norm(net("Add", linear(context, hidden, hidden), x))
    inter = _gelu(net, linear(h, hidden, 4 * hidden), "div_x_first")
    out = norm(net("Add", linear(inter, 4 * hidden, hidden), h))
    return net.model([out]), feed


def _assert_encoder_projections(labels):
    """An encoder layer's four GEMMs: QKV with its bias, the output projection and FFN
    down with bias and residual, FFN up with its bias and GELU (in its epilogue, or a
    pass after it without ``GELU_IN_EPILOGUE``)."""
    fused = _patterns.GELU_IN_EPILOGUE
    assert labels.count("matmul + add + add") == 2, labels
    assert labels.count("matmul + add") == (1 if fused else 2), labels
    assert labels.count("matmul + add + gelu") == (1 if fused else 0), labels
    assert labels.count("gelu") == (0 if fused else 1), labels


@pytest.mark.slow
def test_bert_base_encoder_layer():
    model, feed = encoder_layer(seq=128)
    labels = check(model, feed, tol=1e-4)
    # the two residual adds in the epilogues of the projections before them
    _assert_encoder_projections(labels)
    assert labels.count("scaled_dot_product_attention") == 1, labels


@pytest.mark.parametrize("fill", [-np.inf, LOWEST])
def test_small_encoder_layer(fill):
    """Q, K, V one GEMM, every projection one with its bias, attention one op (the IsNaN
    guard only with the -inf mask, which can drop every key of a row), GELU
    in the epilogue of the projection before it; a row of batch 1 all padding."""
    model, feed = encoder_layer(seq=9, hidden=32, heads=4, batch=2, fill=fill)
    feed["attention_mask"][1] = 0
    labels = check(model, feed, tol=1e-5)
    assert not {"softmax", "transpose", "matmul", "mul"} & set(labels), labels
    assert "is_nan" not in labels and nan_guards(model, feed) == [fill == -np.inf], labels
    _assert_encoder_projections(labels)
    assert "add" not in labels and labels.count("scaled_dot_product_attention") == 1, labels


# --- the model zoo's transformers -------------------------------------------------------------

def _stored(name: str):
    with np.load(os.path.join(DATA, f"{name}.npz")) as data:
        arrays = {key: data[key] for key in data.files}
    count = len({key.split(".")[0] for key in arrays})
    return [({k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"{i}.in.")},
             {k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"{i}.out.")})
            for i in range(count)]


@pytest.mark.parametrize("name,fused", [
    # the text models' masks are Where(bool, 0, -inf): a row of padding is all -inf,
    # so the exporter's IsNaN guard stays, in the attention's store (no is_nan pass);
    # a residual add after a projection is in its GEMM's epilogue; Q, K, V are one GEMM;
    # the erf GELU is in its GEMM's epilogue (GPT-2's tanh form: a pass)
    ("bert", {"scaled_dot_product_attention": 2, "gelu": 0, "matmul + add": 2,
              "matmul + add + gelu": 2, "matmul + add + add": 4, "is_nan": 0}),
    ("gpt2", {"scaled_dot_product_attention": 2, "is_nan": 0, "gelu": 2, "split": 0}),
    ("llama", {"scaled_dot_product_attention": 2, "is_nan": 0, "swiglu": 2, "sigmoid": 0}),
    ("vit", {"scaled_dot_product_attention": 2, "gelu": 0, "matmul + add": 2,
             "matmul + add + gelu": 2, "matmul + add + add": 4})])
def test_zoo_transformers_fuse_and_match_onnxruntime(name, fused):
    path = os.path.join(DATA, f"{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not there")
    sets = _stored(name)
    ctx = jitnn.Context(num_threads=1)
    model = jitnn.onnx.prepare(path, ctx, input_shapes={k: v.shape for k, v in sets[0][0].items()})
    for feed, stored in sets:
        got = model.run(feed)
        for key, want in stored.items():
            scale = float(np.abs(want).max())
            np.testing.assert_allclose(got[key], want, rtol=1e-3, atol=1e-3 * scale)
    labels = steps(jitnn.explain(next(iter(model.dispatch(sets[0][0]).values()))))
    for label, count in fused.items():
        assert labels.count(label) == count, (label, labels)
    assert "softmax" not in labels and "erf" not in " ".join(labels)


# --- timing (python -m tests.test_onnx_patterns; not a test) ----------------------------------

def bench(seqs=(128, 512), threads=(1, 2), rounds: int = 12) -> list[dict]:
    """The BERT-base encoder layer (batch 1) through jitnn with the patterns,
    without them, and with GELU in the GEMM's epilogue, and through ONNX
    Runtime (all optimizations): median ms of ``rounds`` interleaved rounds
    (each runs every variant once, then sleeps 50 ms so that a runtime's
    spinning worker threads do not slow the next), after 3 warm-up runs."""
    import statistics
    import time

    import onnxruntime as ort
    rows = []
    for seq in seqs:
        model, feed = encoder_layer(seq=seq)
        for count in threads:
            runs = {}
            for name, fuse, epilogue in (("fused", True, False), ("unfused", False, False),
                                         ("gelu in epilogue", True, True)):
                ctx = jitnn.Context(num_threads=count)
                saved = _patterns.ENABLED, _patterns.GELU_IN_EPILOGUE
                _patterns.ENABLED, _patterns.GELU_IN_EPILOGUE = fuse, epilogue
                try:
                    graph = jitnn.onnx.prepare(model, ctx, input_shapes={
                        k: v.shape for k, v in feed.items()}).graph
                finally:
                    _patterns.ENABLED, _patterns.GELU_IN_EPILOGUE = saved
                out = {n: np.empty(s, np.float32) for n, s in graph.outputs.items()}
                runs[name] = lambda c=ctx, g=graph, o=out, f=feed: c.compute(g, f, o)
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = count, 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session = ort.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
            runs["onnxruntime"] = lambda s=session, f=feed: s.run(None, f)
            times = {name: [] for name in runs}
            for run_once in runs.values():
                for _ in range(3):
                    run_once()
            for _ in range(rounds):
                for name, run_once in runs.items():
                    started = time.perf_counter()
                    run_once()
                    times[name].append(time.perf_counter() - started)
                    time.sleep(0.05)
            rows.append({"seq": seq, "threads": count,
                         **{n: 1e3 * statistics.median(t) for n, t in times.items()}})
    return rows


if __name__ == "__main__":
    for row in bench():
        print(f"seq {row['seq']}, {row['threads']} thread(s): jitnn {row['fused']:.1f} ms, "
              f"without the patterns {row['unfused']:.1f} ms, GELU in the epilogue "
              f"{row['gelu in epilogue']:.1f} ms, ONNX Runtime {row['onnxruntime']:.1f} ms")
