"""scaled_dot_product_attention against its float64 reference: batch and
head counts, sequence lengths that do not fill a row block or a key block,
Sq != Sk (decoding), head sizes, Dv != D, every mask kind and broadcast,
is_causal (alone and with a mask), rows with nothing to attend to, scale,
both layouts and 3-D operands, pending and blocked operands, a graph
computed twice, thread counts, errors; a PyTorch cross-check when torch is
installed. Large shapes and Sk = 4096 are slow."""

import math

import numpy as np
import pytest

import jitnn
from jitnn.ops.attention import scaled_dot_product_attention_reference as reference
from tests.helpers import assert_close, make, random

OP = "scaled_dot_product_attention"
#: float32 against float64: relative to max |value| (see kernels/attention.py)
TOL = 2e-5


def _qkv(B, H, Sq, Sk, D, Dv=None, seed=0, layout="bhsd"):
    rng = np.random.default_rng(seed)
    Dv = D if Dv is None else Dv
    shapes = [(B, H, Sq, D), (B, H, Sk, D), (B, H, Sk, Dv)]
    if layout == "bshd":
        shapes = [(s[0], s[2], s[1], s[3]) for s in shapes]
    return tuple(random(s, rng) for s in shapes)


def _check(q, k, v, mask=None, tol=TOL, **options):
    got = jitnn.scaled_dot_product_attention(q, k, v, mask, **options)
    want = reference(q, k, v, mask, **options)
    assert got.pending and got.shape == want.shape and got.dtype == np.float32
    assert_close(got.numpy(), want, tol=tol)
    return got


# --- shapes ------------------------------------------------------------------------------

_BH = [(1, 1), (2, 3), (1, 12), (2, 12)]


@pytest.mark.parametrize("S", [1, 7, 64, 77, 128, 197])
@pytest.mark.parametrize("D", [1, 8, 64, 80])
def test_self_attention_shapes(S, D):
    B, H = _BH[(S + D) % len(_BH)]
    if S * H * B > 1000:
        H = 3                                 # keep the float64 reference quick
    _check(*_qkv(B, H, S, S, D, seed=S * D))


@pytest.mark.parametrize("B,H", _BH)
def test_batch_and_heads(B, H):
    _check(*_qkv(B, H, 33, 33, 16, seed=B * H))


@pytest.mark.parametrize("Sq,Sk", [(1, 50), (1, 1), (3, 200), (45, 7), (130, 33), (33, 130)])
def test_query_and_key_lengths_differ(Sq, Sk):
    _check(*_qkv(2, 3, Sq, Sk, 32, seed=Sq + Sk))


@pytest.mark.parametrize("D,Dv", [(64, 32), (8, 80), (80, 1), (1, 17), (33, 64)])
def test_value_head_size_differs(D, Dv):
    _check(*_qkv(1, 3, 19, 71, D, Dv, seed=D + Dv))


@pytest.mark.parametrize("scale", [0.05, 1.0, 2.5, -0.3])
def test_scale_given(scale):
    _check(*_qkv(2, 2, 20, 90, 24), scale=scale)


def test_default_scale_is_one_over_sqrt_d():
    q, k, v = _qkv(1, 2, 9, 9, 48)
    a = jitnn.scaled_dot_product_attention(q, k, v).numpy()
    b = jitnn.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(48)).numpy()
    np.testing.assert_array_equal(a, b)


def test_large_scores_do_not_overflow():
    q, k, v = _qkv(1, 2, 40, 150, 16)
    _check(q * 30, k * 30, v)                     # scores in the thousands


# --- masks -------------------------------------------------------------------------------

B, H, SQ, SK = 2, 3, 21, 75
MASK_SHAPES = [(B, 1, 1, SK), (1, 1, SQ, SK), (B, H, SQ, SK), (SK,), (SQ, SK), (SQ, 1),
               (1, H, 1, SK), (B, 1, SQ, 1), (1,), (B, H, 1, 1), (1, H, SQ, SK)]


@pytest.mark.parametrize("shape", MASK_SHAPES)
def test_additive_masks_broadcast(shape):
    q, k, v = _qkv(B, H, SQ, SK, 16, seed=len(shape))
    mask = random(shape, 7, scale=3.0)
    _check(q, k, v, mask)
    _check(q, k, v, jitnn.tensor(mask), is_causal=True)


@pytest.mark.parametrize("shape", MASK_SHAPES)
def test_boolean_masks_broadcast(shape):
    q, k, v = _qkv(B, H, SQ, SK, 16, seed=len(shape))
    keep = np.random.default_rng(3).random(shape) > 0.4
    _check(q, k, v, keep)                                   # a host bool array
    _check(q, k, v, jitnn.tensor(keep.astype(np.uint8)))    # a uint8 tensor
    _check(q, k, v, keep.astype(np.uint8), is_causal=True)


def test_bert_padding_mask():
    """BERT's extended mask: (1 - mask) * finfo.min, (B, 1, 1, Sk)."""
    q, k, v = _qkv(2, 12, 64, 64, 64)
    ids_mask = np.ones((2, 64), np.float32)
    ids_mask[1, 40:] = 0
    additive = ((1.0 - ids_mask) * np.finfo(np.float32).min)[:, None, None, :]
    got = _check(q, k, v, additive)
    # the padded keys do not count: the same as attending to the first 40 only
    short = jitnn.scaled_dot_product_attention(q[1:], k[1:, :, :40], v[1:, :, :40])
    assert_close(got.numpy()[1], short.numpy()[0], tol=TOL)


def test_causal_mask_as_additive_minus_inf():
    q, k, v = _qkv(1, 2, 50, 50, 32)
    causal = np.triu(np.full((50, 50), -np.inf, np.float32), 1)
    a = _check(q, k, v, causal)
    b = _check(q, k, v, is_causal=True)
    assert_close(a.numpy(), b.numpy(), tol=1e-6)


@pytest.mark.parametrize("Sq,Sk", [(1, 1), (5, 5), (77, 77), (200, 200), (3, 100), (100, 3),
                                   (40, 150)])
def test_is_causal_top_left(Sq, Sk):
    q, k, v = _qkv(2, 3, Sq, Sk, 24, seed=Sq)
    got = _check(q, k, v, is_causal=True)
    # row i attends to keys 0..i only: the first row sees key 0 alone
    np.testing.assert_allclose(got.numpy()[:, :, 0], v[:, :, 0], rtol=1e-6, atol=1e-6)


def test_boolean_row_all_false_averages_value():
    """ONNX Runtime's rule: a dropped key scores float32 lowest, so a row with
    every key dropped weighs them all equally."""
    q, k, v = _qkv(1, 2, 6, 90, 8)
    keep = np.ones((6, 90), bool)
    keep[2] = False
    got = _check(q, k, v, keep).numpy()
    assert_close(got[:, :, 2], v.astype(np.float64).mean(axis=2), tol=1e-5)
    # ... and with is_causal the row averages the keys it may see
    got = _check(q, k, v, keep, is_causal=True).numpy()
    assert_close(got[:, :, 2], v[:, :, :3].astype(np.float64).mean(axis=2), tol=1e-5)


def test_additive_row_all_minus_inf_is_nan():
    q, k, v = _qkv(1, 1, 5, 40, 8)
    mask = np.zeros((5, 40), np.float32)
    mask[3] = -np.inf
    got = jitnn.scaled_dot_product_attention(q, k, v, mask).numpy()
    assert np.isnan(got[0, 0, 3]).all()
    assert not np.isnan(np.delete(got, 3, axis=2)).any()
    assert_close(np.delete(got, 3, axis=2), np.delete(reference(q, k, v, mask), 3, axis=2),
                 tol=TOL)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_nan_to_zero_stores_nan_rows_as_zero(layout, threads):
    """``nan_to_zero``: a row whose every score is -inf, and the rows a NaN in
    K reaches, come out 0 (the exporters' Where(IsNaN(x), 0, x) guard); the
    other rows are the reference's (2 heads, odd sizes, rows past one tile)."""
    ctx = jitnn.Context(num_threads=threads)
    q, k, v = _qkv(2, 2, 37, 45, 8, Dv=5, seed=3, layout=layout)
    k[(1, 0, 4, 2) if layout == "bhsd" else (1, 4, 0, 2)] = np.nan   # batch 1, head 0: NaN
    mask = np.zeros((2, 1, 37, 45), np.float32)
    mask[0, 0, 30] = -np.inf
    got = jitnn.scaled_dot_product_attention(ctx.tensor(q), ctx.tensor(k), ctx.tensor(v),
                                             ctx.tensor(mask), layout=layout,
                                             nan_to_zero=True).numpy()
    want = reference(q, k, v, mask, layout=layout, nan_to_zero=True)
    plain = reference(q, k, v, mask, layout=layout)
    assert np.isnan(plain).any() and not np.isnan(got).any()
    assert (got[np.isnan(plain)] == 0).all()
    assert_close(got, want, tol=TOL)
    with pytest.raises(jitnn.JitnnTypeError, match="nan_to_zero must be a bool"):
        jitnn.scaled_dot_product_attention(q, k, v, nan_to_zero=1)


def test_leading_keys_all_masked():
    """Left padding: whole key blocks of -inf before the first finite score
    (the running maximum stays -inf over them) give exact zeros weight."""
    q, k, v = _qkv(2, 2, 30, 300, 16)
    mask = np.zeros((2, 1, 1, 300), np.float32)
    mask[0, ..., :250] = -np.inf
    mask[1, ..., :299] = -np.inf
    got = _check(q, k, v, mask).numpy()
    np.testing.assert_allclose(got[1], np.broadcast_to(v[1, :, 299:], got[1].shape),
                               rtol=1e-6, atol=1e-6)


def test_nan_and_inf_inputs():
    q, k, v = _qkv(1, 1, 4, 20, 8)
    q[0, 0, 1, 3] = np.nan
    v[0, 0, 7, 0] = np.inf
    got = jitnn.scaled_dot_product_attention(q, k, v).numpy()
    assert np.isnan(got[0, 0, 1]).all()                    # a NaN score: the row is NaN
    assert np.isinf(got[0, 0, [0, 2, 3], 0]).all()         # inf in V reaches its column


# --- layouts -----------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Sq,Sk,D,Dv", [(7, 7, 64, 64), (77, 77, 8, 8), (1, 50, 64, 64),
                                        (40, 19, 16, 80)])
def test_bshd_layout(Sq, Sk, D, Dv, causal):
    q, k, v = _qkv(2, 12, Sq, Sk, D, Dv, layout="bshd")
    mask = random((2, 1, 1, Sk), 5)
    got = _check(q, k, v, mask, is_causal=causal, layout="bshd")
    assert got.shape == (2, Sq, 12, Dv)
    # the same as transposing around a bhsd call
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))   # noqa: E731
    bhsd = jitnn.scaled_dot_product_attention(t(q), t(k), t(v), mask, is_causal=causal)
    np.testing.assert_array_equal(got.numpy(), t(bhsd.numpy()))


@pytest.mark.parametrize("mask_shape", [None, (1, 1, 75), (6, 21, 75), (21, 75), (75,)])
def test_three_d_operands(mask_shape):
    q, k, v = (x.reshape(-1, *x.shape[2:]) for x in _qkv(2, 3, 21, 75, 16, 24))
    mask = None if mask_shape is None else random(mask_shape, 2)
    got = _check(q, k, v, mask, is_causal=mask_shape == (21, 75))
    assert got.shape == (6, 21, 24)


def test_pending_operands_and_a_chain():
    """Operands computed by ops before it (values the plan holds), and a
    matmul after it: one flush."""
    q, k, v = _qkv(1, 4, 37, 37, 16)
    w = random((16, 16), 9)
    qt = jitnn.mul(jitnn.tensor(q), 0.5)
    kt = jitnn.add(jitnn.tensor(k), 1.0)
    out = jitnn.matmul(jitnn.scaled_dot_product_attention(qt, kt, v, is_causal=True), w)
    want = reference(q * 0.5, k + 1.0, v, is_causal=True) @ w
    assert_close(out.numpy(), want, tol=TOL)


def test_blocked_operands_are_read_back():
    q, k, v = _qkv(1, 9, 12, 12, 10)
    got = _check(make(q, "nChw8c"), make(k, "nChw8c"), v)
    assert got.layout == "nchw"
    want = reference(q, k, v)
    assert_close(got.numpy(), want, tol=TOL)


# --- graphs, threads, contexts -------------------------------------------------------------

def test_graph_builder_computed_twice():
    ctx = jitnn.default_context()
    b = jitnn.GraphBuilder(ctx)
    q = b.input("q", (2, 12, 33, 64))
    k = b.input("k", (2, 12, 50, 64))
    v = b.input("v", (2, 12, 50, 32))
    mask = b.input("mask", (2, 1, 1, 50), dtype="uint8")
    g = b.build({"y": b.scaled_dot_product_attention(q, k, v, mask, is_causal=True,
                                                     scale=0.2)})
    out = np.empty((2, 12, 33, 32), np.float32)
    for seed in (1, 2):
        qa, ka, va = _qkv(2, 12, 33, 50, 64, 32, seed=seed)
        keep = (np.random.default_rng(seed).random((2, 1, 1, 50)) > 0.3).astype(np.uint8)
        ctx.compute(g, {"q": qa, "k": ka, "v": va, "mask": keep}, {"y": out})
        assert_close(out, reference(qa, ka, va, keep, is_causal=True, scale=0.2), tol=TOL)


def test_graph_with_bshd_and_constant_mask():
    b = jitnn.GraphBuilder()
    q = b.input("q", (1, 20, 4, 8))
    mask = b.constant(random((20, 20), 4))
    g = b.build({"y": b.scaled_dot_product_attention(q, q, q, mask, layout="bshd")})
    qa = random((1, 20, 4, 8), 3)
    out = np.empty((1, 20, 4, 8), np.float32)
    for _ in range(2):
        jitnn.default_context().compute(g, {"q": qa}, {"y": out})
        assert_close(out, reference(qa, qa, qa, random((20, 20), 4), layout="bshd"), tol=TOL)


def test_per_row_masks_computed_and_given_across_runs():
    """Per-row masks (read by the kernel as row blocks made once per Value):
    a constant one (Swin's bias and shift mask, 49 tokens per window, batch
    of windows > 1) kept over runs, one given at each run and one computed
    in the graph from it (new values every run: never a stale copy), and a
    boolean one."""
    ctx = jitnn.default_context()
    b = jitnn.GraphBuilder(ctx)
    q = b.input("q", (4, 3, 49, 32))
    given = b.input("mask", (4, 1, 49, 49))
    bits = b.input("bits", (49, 49), dtype="uint8")
    fixed = random((4, 3, 49, 49), 8, scale=2.0)
    y1 = b.scaled_dot_product_attention(q, q, q, b.constant(fixed))
    y2 = b.scaled_dot_product_attention(q, q, q, b.add(given, b.constant(fixed[:1, :1])))
    y3 = b.scaled_dot_product_attention(q, q, q, bits)
    g = b.build({"y1": y1, "y2": y2, "y3": y3})
    outs = {name: np.empty((4, 3, 49, 32), np.float32) for name in ("y1", "y2", "y3")}
    for seed in (1, 2, 3):
        qa = random((4, 3, 49, 32), seed)
        ma = random((4, 1, 49, 49), seed + 10, scale=2.0)
        keep = (np.random.default_rng(seed).random((49, 49)) > 0.4).astype(np.uint8)
        ctx.compute(g, {"q": qa, "mask": ma, "bits": keep}, outs)
        assert_close(outs["y1"], reference(qa, qa, qa, fixed), tol=TOL)
        assert_close(outs["y2"], reference(qa, qa, qa, ma + fixed[:1, :1]), tol=TOL)
        assert_close(outs["y3"], reference(qa, qa, qa, keep), tol=TOL)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_give_the_same_bits(threads):
    q, k, v = _qkv(1, 3, 70, 130, 24)
    ctx = jitnn.Context(num_threads=threads)
    got = jitnn.scaled_dot_product_attention(ctx.tensor(q), k, v, is_causal=True).numpy()
    base = jitnn.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
    np.testing.assert_array_equal(got, base)


def test_empty_outputs():
    q, k, v = _qkv(1, 2, 0, 5, 8)
    assert jitnn.scaled_dot_product_attention(q, k, v).numpy().shape == (1, 2, 0, 8)
    q, k, v = _qkv(0, 2, 3, 5, 8)
    assert jitnn.scaled_dot_product_attention(q, k, v).numpy().shape == (0, 2, 3, 8)


# --- errors ------------------------------------------------------------------------------

def _raises(error, match, *args, **kwargs):
    with pytest.raises(error, match=match) as info:
        jitnn.scaled_dot_product_attention(*args, **kwargs)
    assert str(info.value).startswith(OP + ":"), str(info.value)


def test_integer_operands_refused():
    q, k, v = _qkv(1, 1, 4, 4, 8)
    ints = jitnn.tensor(np.ones((1, 1, 4, 8), np.int32))
    _raises(jitnn.JitnnTypeError, "query must have dtype float32, got a int32 tensor", ints, k, v)
    _raises(jitnn.JitnnTypeError, "value must have dtype float32", q, k,
            jitnn.tensor(np.ones((1, 1, 4, 8), np.int64)))
    _raises(jitnn.JitnnTypeError, "mask must have dtype float32 or uint8, got int64",
            q, k, v, np.ones((4, 4), np.int64))
    _raises(jitnn.JitnnTypeError, "mask must have dtype float32 or uint8, got a int32 tensor",
            q, k, v, jitnn.tensor(np.ones((4, 4), np.int32)))


def test_shape_mismatches_refused():
    q, k, v = _qkv(2, 3, 4, 6, 8)
    _raises(jitnn.JitnnValueError, r"key \(2, 3, 6, 7\) must have query's batch, heads and "
            "head size", q, k[..., :7], v)
    _raises(jitnn.JitnnValueError, "key .* must have query's batch", q, k[:1], v[:1])
    _raises(jitnn.JitnnValueError, "key .* must have query's batch", q, k[:, :2], v[:, :2])
    _raises(jitnn.JitnnValueError, r"value \(2, 3, 5, 8\) must have key's batch, heads and "
            "sequence length", q, k, v[:, :, :5])
    _raises(jitnn.JitnnValueError, "must be all 4-D .* or all 3-D", q, k[0], v)
    _raises(jitnn.JitnnValueError, "must be all 4-D .* or all 3-D", q[0, 0], k[0, 0], v[0, 0])
    _raises(jitnn.JitnnValueError, "all 4-D \\(B, S, H, D\\) with layout='bshd'",
            q[0], k[0], v[0], layout="bshd")
    _raises(jitnn.JitnnValueError, r"mask \(3, 6\) does not broadcast to the scores "
            r"\(2, 3, 4, 6\)", q, k, v, np.zeros((3, 6), np.float32))
    _raises(jitnn.JitnnValueError, "does not broadcast", q, k, v, np.zeros((1, 2, 3, 4, 6)))
    _raises(jitnn.JitnnValueError, "does not broadcast", q[0], k[0], v[0],
            np.zeros((1, 3, 4, 6)))
    _raises(jitnn.JitnnValueError, "at least one element", q, k[:, :, :0], v[:, :, :0])
    _raises(jitnn.JitnnValueError, "at least one element", q[..., :0], k[..., :0], v)


def test_bad_options_refused():
    q, k, v = _qkv(1, 1, 4, 4, 8)
    _raises(jitnn.JitnnValueError, "layout must be 'bhsd' or 'bshd', got 'nchw'",
            q, k, v, layout="nchw")
    _raises(jitnn.JitnnTypeError, "is_causal must be a bool, got 1", q, k, v, is_causal=1)
    _raises(jitnn.JitnnTypeError, "scale must be a number or None", q, k, v, scale="0.1")
    _raises(jitnn.JitnnValueError, "scale", q, k, v, scale=float("nan"))
    _raises(jitnn.JitnnValueError, "scale", q, k, v, scale=float("inf"))


def test_builder_refuses_at_the_call():
    b = jitnn.GraphBuilder()
    q = b.input("q", (1, 2, 4, 8))
    k = b.input("k", (1, 2, 4, 7))
    with pytest.raises(jitnn.JitnnValueError, match=OP):
        b.scaled_dot_product_attention(q, k, k)


# --- PyTorch -----------------------------------------------------------------------------

def test_matches_pytorch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    q, k, v = _qkv(2, 12, 33, 57, 64, 40)
    keep = np.random.default_rng(1).random((2, 1, 33, 57)) > 0.3
    keep[..., 0] = True                      # no row fully masked (PyTorch gives NaN)
    additive = random((2, 12, 33, 57), 2)
    T = torch.from_numpy
    cases = [({}, {}), ({"attn_mask": T(keep)}, {"mask": keep}),
             ({"attn_mask": T(additive)}, {"mask": additive}),
             ({"is_causal": True}, {"is_causal": True}), ({"scale": 0.3}, {"scale": 0.3})]
    for theirs, ours in cases:
        want = F.scaled_dot_product_attention(T(q), T(k), T(v), **theirs).numpy()
        mask = ours.pop("mask", None)
        got = jitnn.scaled_dot_product_attention(q, k, v, mask, **ours).numpy()
        assert_close(got, want, tol=TOL)


# --- slow ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_long_keys_error_against_float64(causal):
    """Sk = 4096: the float32 sums over keys stay within the documented bound."""
    q, k, v = _qkv(1, 2, 64, 4096, 64, seed=11)
    got = jitnn.scaled_dot_product_attention(q, k, v, is_causal=causal).numpy()
    want = reference(q, k, v, is_causal=causal)
    error = np.abs(got - want).max() / np.abs(v).max()
    assert error < TOL, error


@pytest.mark.slow
@pytest.mark.parametrize("S", [384, 512])
def test_bert_base_shapes(S):
    q, k, v = _qkv(2, 12, S, S, 64, seed=S)
    mask = np.zeros((2, 1, 1, S), np.float32)
    mask[1, ..., S - 100:] = np.finfo(np.float32).min
    _check(q, k, v, mask)
    _check(q, k, v, is_causal=True)


@pytest.mark.parametrize("threads", [1, 2])
def test_views_of_one_packed_projection(threads):
    """``views``: Q, K, V as column ranges of one (B, S, N) tensor (padding
    columns before and between them), or of three, read in place; against
    float64 and against the same attention on copies of the views."""
    ctx = jitnn.Context(num_threads=threads)
    b, s, h, d, dv = 2, 9, 3, 5, 4
    packed = random((b, s, 2 + 2 * h * d + 1 + h * dv), 3)
    views = ((2, h, d), (2 + h * d, h, d), (3 + 2 * h * d, h, dv))
    t = jitnn.tensor(packed, ctx=ctx)
    mask = random((b, 1, 1, s), 4)
    got = jitnn.scaled_dot_product_attention(t, t, t, jitnn.tensor(mask, ctx=ctx),
                                             layout="bshd", views=views).numpy()
    want = reference(packed, packed, packed, mask, layout="bshd", views=views)
    assert got.shape == (b, s, h, dv)
    assert_close(got, want, tol=2e-6)
    parts = [np.ascontiguousarray(packed[:, :, c:c + n * m].reshape(b, s, n, m))
             for c, n, m in views]
    copied = jitnn.scaled_dot_product_attention(*(jitnn.tensor(p, ctx=ctx) for p in parts),
                                                jitnn.tensor(mask, ctx=ctx), layout="bshd")
    np.testing.assert_array_equal(got, copied.numpy())
    three = [jitnn.tensor(random((b, s, 7 + h * d), i), ctx=ctx) for i in range(3)]
    views3 = ((7, h, d), (0, h, d), (3, h, d))
    got = jitnn.scaled_dot_product_attention(*three, is_causal=True, layout="bshd",
                                             views=views3).numpy()
    want = reference(*(x.numpy() for x in three), is_causal=True, layout="bshd", views=views3)
    assert_close(got, want, tol=2e-6)


def test_views_refused():
    t = jitnn.tensor(random((1, 4, 12), 0))
    with pytest.raises(jitnn.JitnnValueError, match="bshd"):
        jitnn.scaled_dot_product_attention(t, t, t, views=((0, 2, 2),) * 3)
    with pytest.raises(jitnn.JitnnValueError, match="last axis"):
        jitnn.scaled_dot_product_attention(t, t, t, layout="bshd",
                                           views=((0, 2, 2), (4, 2, 2), (9, 2, 2)))
    with pytest.raises(jitnn.JitnnTypeError, match="triples"):
        jitnn.scaled_dot_product_attention(t, t, t, layout="bshd", views=((0, 2),) * 3)
