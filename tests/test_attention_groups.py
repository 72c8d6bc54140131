"""Grouped-query attention read without repeating K and V, and the output
written in the head-merged ``(B, S, H, D)`` layout (``groups`` and
``out_layout`` of ``scaled_dot_product_attention``; the kernel's key-value
head ``h // groups``), against float64: odd head counts, several groups,
batch > 1, one query row and odd sequences, every mask kind (padding keys,
per-row, per-head, boolean), causal, 1 and 2 threads. (Llama's ONNX
attention block, which converts to them: tests/test_onnx_qkv.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

import jitnn
from jitnn.errors import JitnnValueError
from jitnn.kernels import attention as attention_kernels
from jitnn.ops.attention import scaled_dot_product_attention as sdpa
from jitnn.ops.attention import scaled_dot_product_attention_reference as sdpa_reference


def _operands(rng, b, h, kv_heads, sq, sk, d, layout):
    def heads(count, s):
        x = rng.standard_normal((b, count, s, d)).astype(np.float32)
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3)) if layout == "bshd" else x
    return heads(h, sq), heads(kv_heads, sk), heads(kv_heads, sk)


def _mask(rng, kind, b, h, sq, sk):
    if kind == "none":
        return None
    if kind == "keys":              # padding: a (B, 1, 1, Sk) mask, the first key kept
        m = np.where(rng.random((b, 1, 1, sk)) < 0.3, -1e9, 0.0).astype(np.float32)
        m[..., 0] = 0.0
        return m
    if kind == "rows":              # a value per batch and row (a computed causal mask)
        return rng.standard_normal((b, 1, sq, sk)).astype(np.float32)
    if kind == "heads":             # a value per head and row
        return rng.standard_normal((1, h, sq, sk)).astype(np.float32)
    assert kind == "bool"
    keep = rng.random((b, 1, sq, sk)) < 0.7
    keep[..., 0] = True
    return keep.astype(np.uint8)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("b, h, kv_heads, sq, sk, d", [
    (1, 8, 4, 33, 33, 16),      # Llama's two query heads a key-value head, odd sequence
    (3, 6, 2, 5, 40, 8),        # three a head, batch 3, more keys than rows
    (2, 3, 1, 1, 9, 5),         # multi-query, odd heads and head size, one query row
    (2, 5, 5, 7, 7, 4),         # no groups: only the output layout differs
])
@pytest.mark.parametrize("layout, out_layout", [("bhsd", "bshd"), ("bshd", "bshd"),
                                                ("bhsd", "bhsd")])
@pytest.mark.parametrize("mask", ["none", "keys", "rows", "heads", "bool"])
def test_grouped_attention_against_float64(threads, b, h, kv_heads, sq, sk, d, layout,
                                           out_layout, mask):
    rng = np.random.default_rng(b * 100 + h * 10 + sq)
    q, k, v = _operands(rng, b, h, kv_heads, sq, sk, d, layout)
    m = _mask(rng, mask, b, h, sq, sk)
    ctx = jitnn.Context(num_threads=threads)
    for causal in (False, True):
        got = sdpa(ctx.tensor(q), k, v, m, is_causal=causal, layout=layout,
                   groups=h // kv_heads, out_layout=out_layout).numpy()
        want = sdpa_reference(q, k, v, m, is_causal=causal, layout=layout,
                              groups=h // kv_heads, out_layout=out_layout)
        assert got.shape == want.shape == ((b, sq, h, d) if out_layout == "bshd"
                                           else (b, h, sq, d))
        # against the repeated heads in float64 (the reference's own repeat checked too)
        kr, vr = (np.repeat(x, h // kv_heads, axis=1 if layout == "bhsd" else 2)
                  for x in (k, v))
        plain = sdpa_reference(q, kr, vr, m, is_causal=causal, layout=layout)
        if out_layout != layout:
            plain = plain.transpose(0, 2, 1, 3)
        np.testing.assert_allclose(want, plain, rtol=0, atol=1e-12)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 2e-5, (causal, err)


def test_grouped_attention_same_bits_as_repeated_heads():
    """The kernel reading key-value head h // G gives the bits of the same
    attention on K and V repeated for every query head."""
    rng = np.random.default_rng(3)
    q, k, v = _operands(rng, 2, 6, 2, 37, 37, 16, "bhsd")
    mask = attention_kernels.row_mask(rng.standard_normal((2, 1, 37, 37)).astype(np.float32),
                                      37, 37)
    grouped, repeated = np.empty_like(q), np.empty_like(q)
    attention_kernels.attention(q, k, v, grouped, mask, scale=0.25, groups=3, threads=1)
    attention_kernels.attention(q, np.repeat(k, 3, 1), np.repeat(v, 3, 1), repeated, mask,
                                scale=0.25, threads=1)
    assert np.array_equal(grouped, repeated)


def test_groups_checked():
    q = np.zeros((1, 4, 3, 8), np.float32)
    k = np.zeros((1, 3, 3, 8), np.float32)
    with pytest.raises(JitnnValueError, match="groups"):
        sdpa(q, k, k, groups=2)
    with pytest.raises(JitnnValueError, match="4-D"):
        sdpa(q[0], k[0], k[0], out_layout="bshd")
    with pytest.raises(ValueError, match="groups"):
        attention_kernels.attention(q, k, k, np.empty_like(q), scale=1.0, groups=3)
