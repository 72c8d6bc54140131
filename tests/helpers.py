"""What the tests share: random data, closeness against a float64 reference,
the padding-lane invariant of blocked buffers, tensors of each layout kind,
kernel activations as the ops' references, and checks of what a run
launched. Test modules import from here (and from the other non-test modules
of tests/), never from each other; and the slow marks of kernel cases on the
blocks other than the host's."""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import numpy as np
import pytest

import jitnn
from jitnn import layouts, registry
from jitnn.kernels import epilogue

# --- data ------------------------------------------------------------------------------

def random(shape, seed=0, scale: float = 1.0) -> np.ndarray:
    """Standard-normal float32 data (times ``scale``), reproducible by ``seed``:
    an int, or a numpy ``Generator`` to draw from (``default_rng`` passes it through)."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def typed_data(shape, dtype, seed=0) -> np.ndarray:
    """Values of ``dtype``: standard normal floats; integers over the type's
    whole range (int64 beyond 2**53, where a float64 detour would round)."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def uniform(shape, seed=0, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """Float32 data uniform in ``[low, high)``, reproducible by ``seed`` (an int or a Generator)."""
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


# --- references ------------------------------------------------------------------------

def reference(op: str):
    """Op ``op``'s float64 reference (jitnn/registry.py), looked up by name."""
    return registry.reference(op)


_ACTIVATION_NAMES = {code: name for name, code in epilogue.ACTIVATIONS.items()}


def apply_activation(x, activation, param0: float = 0.0, param1: float = 0.0) -> np.ndarray:
    """A kernel's activation (a name of kernels/epilogue.py's ACTIVATIONS or
    its code, with the kernels' two parameters) as the op's reference: ``none``
    the identity, ``clamp`` min(max(x, param0), param1), ``leaky_relu`` alpha
    ``param0``; in float64."""
    if activation in (epilogue.SILU, epilogue.HARD_SIGMOID):     # fusion targets, not ops
        return epilogue.activation_reference(x, activation, param0, param1)
    name = _ACTIVATION_NAMES.get(activation, activation)
    if name == "none":
        return np.asarray(x, np.float64)
    options = {"clamp": {"min_value": param0, "max_value": param1},
               "leaky_relu": {"alpha": param0}}.get(name, {})
    return reference(name)(x, **options)


# --- closeness -------------------------------------------------------------------------

def assert_close(got, want, rtol: float = 2e-6, atol: float = 1e-6, *,
                 tol: float | None = None) -> None:
    """``got`` has ``want``'s shape and matches it within ``rtol`` and ``atol``
    (numpy's assert_allclose). With ``tol`` instead: within ``tol`` relative
    to the larger of 1 and ``want``'s largest magnitude (float32 results of
    long float64 sums)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    if tol is not None:
        rtol, atol = tol, tol * max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def gemm_reference_with_bound(a, b, a_t=False, b_t=False, alpha=1.0, beta=1.0, c=None,
                              bias=None, residual=None, act=epilogue.NONE, p0=0.0, p1=0.0):
    """``act(alpha * A @ B + beta * c + bias + residual)`` in float64 and an
    elementwise error bound for the float32 kernels: ``(2K + 8) eps`` times
    the sum of the terms' magnitudes, plus the activation's roundings."""
    eps = float(np.finfo(np.float32).eps)
    A = np.asarray(a.T if a_t else a, np.float64)
    B = np.asarray(b.T if b_t else b, np.float64)
    value = alpha * (A @ B)
    size = abs(alpha) * (np.abs(A) @ np.abs(B))
    for term, weight in ((c, beta), (bias, 1.0), (residual, 1.0)):
        if term is not None:
            term = np.asarray(term, np.float64)
            value = value + weight * term
            size = size + abs(weight) * np.abs(term)
    bound = (2 * A.shape[1] + 8) * eps * size
    if act != epilogue.NONE:
        value = epilogue.activation_reference(value, act, p0, p1)
        # activations change errors by at most their slope (<= 1.5 for hard_swish)
        # and add a few roundings of their own
        bound = 1.5 * bound + 8 * eps * (1 + np.abs(value))
    return value, bound + 1e-30


def assert_within_bound(got, want, bound, what: str = "") -> None:
    """Every element finite and within its bound of the reference."""
    assert np.all(np.isfinite(got)), f"{what}: non-finite output (unwritten elements?)"
    error = np.abs(got - want)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (
        f"{what}: error {error[worst]:.3g} > bound {bound[worst]:.3g} at {worst} "
        f"(got {got[worst]}, want {want[worst]})")


# --- blocked tensors and their padding lanes -------------------------------------------

#: the layouts the op tests run on: plain, and blocked by 8 (the default
#: context's nChw8c), 4 and 16
KINDS = ["plain", "nChw8c", "block4", "block16"]


@functools.cache
def _blocked_context(block: int) -> jitnn.Context:
    return jitnn.Context(block=block)


def make(x, kind: str, axes: str = "nchw") -> jitnn.Tensor:
    """A Tensor of ``x`` of layout kind ``kind`` (:data:`KINDS`): plain, or
    blocked by a reorder on the default context (nChw8c) or on a block-4 /
    block-16 context."""
    if kind == "plain":
        return jitnn.tensor(x)
    if kind == "nChw8c":
        return jitnn.reorder(jitnn.tensor(x), "nChw8c", axes=axes)
    block = {"block4": 4, "block16": 16}[kind]
    return jitnn.reorder(_blocked_context(block).tensor(x), f"nChw{block}c", axes=axes)


def expected_layout(kind: str, ndim: int = 4) -> str:
    """The layout an op keeps on an input made by :func:`make` with ``kind``."""
    if kind == "plain":
        return layouts.plain_tag(ndim)
    return {"nChw8c": "nChw8c", "block4": "nChw4c", "block16": "nChw16c"}[kind]


def assert_padding_lanes_zero(blocked, channels: int | None = None) -> None:
    """Every lane past the real channels of a blocked buffer is exactly zero
    (oneDNN's invariant: an op with f(0) != 0 must re-zero them). ``blocked``:
    a blocked ``(N, C/block, H, W, block)`` array with ``channels`` real ones,
    or a blocked Tensor (its buffer and channel count are read from it)."""
    if isinstance(blocked, jitnn.Tensor):
        assert layouts.block_of(blocked.layout) is not None, blocked.layout
        channels = blocked.shape[1] if blocked._axes == "nchw" else blocked.shape[3]
        blocked = blocked._materialize()
    n, chunks, h, w, block = blocked.shape
    lanes = blocked.transpose(0, 1, 4, 2, 3).reshape(n, chunks * block, h, w)[:, channels:]
    assert not lanes.any(), f"padding lanes past channel {channels} are not zero"


# --- what a block of code ran ----------------------------------------------------------

@contextlib.contextmanager
def assert_schedule(ctx: jitnn.Context, *, kernels: int | None = None,
                    reorders: int | None = None, fused: int | None = None) -> Iterator[None]:
    """``with assert_schedule(ctx, kernels=3, reorders=2): ...``: the block
    launched that many op kernels, ran that many reorders and fused that many
    ops away (each checked only when given)."""
    before = ctx.stats
    yield
    after = ctx.stats
    got = {"kernels": after.launches - before.launches,
           "reorders": after.reorders - before.reorders,
           "fused": after.fused_ops - before.fused_ops}
    want = {"kernels": kernels, "reorders": reorders, "fused": fused}
    wrong = {k: (got[k], v) for k, v in want.items() if v is not None and got[k] != v}
    assert not wrong, "schedule: " + ", ".join(f"{k} {g} (expected {w})"
                                               for k, (g, w) in wrong.items())


def pending_nodes(tensors) -> list:
    """The recorded nodes of the pending DAG behind ``tensors`` (each once)."""
    todo, seen, nodes = [t._v for t in tensors], set(), []
    while todo:
        v = todo.pop()
        if id(v) in seen or v._node is None:
            continue
        seen.add(id(v))
        nodes.append(v._node)
        todo.extend(v._node.inputs)
    return nodes


def nan_guards(model, feed: dict) -> list[bool]:
    """Each attention's ``nan_to_zero`` (an ONNX exporter's IsNaN guard, kept in
    the kernel's store) in ``model`` prepared for ``feed``."""
    import jitnn.onnx
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1),
                                   input_shapes={k: v.shape for k, v in feed.items()})
    return [n.attrs["nan_to_zero"] for n in pending_nodes(converted.dispatch(feed).values())
            if n.op == "scaled_dot_product_attention"]


# --- cases on the blocks other than the host's -----------------------------------------

def per_block(cases, ids, keep, blocks=(4, 8, 16), unpack: bool = False) -> list:
    """Every case on each of ``blocks`` as pytest params ``case, block``
    (``*case, block`` with ``unpack``), named ``<ids(case)>-<block>`` as a
    parametrize of the cases under one of the blocks names them. On the
    host's block (``jitnn.host_block()``, which the rest of the suite
    compiles its kernels for) every case runs by default; on another block
    only the cases numbered in ``keep`` (each kernel family's cover there)
    do and the others are slow: each compiles that block's kernels for a
    geometry of its own (10-25 s a case in the cold default run). Block 4,
    unless it is the host's, is slow throughout: tests/portable_check.py
    (in the default run) checks every conv path on it."""
    host = jitnn.host_block()
    return [pytest.param(*(case if unpack else (case,)), block, id=f"{ids(case)}-{block}",
                         marks=pytest.mark.slow if block != host and (
                             index not in keep or block == 4) else ())
            for index, case in enumerate(cases) for block in blocks]


def other_blocks_slow(blocks=(4, 8, 16)) -> list:
    """``blocks`` as pytest params, those other than the host's slow (the
    case's kernels for another block are covered by the kernel tests'
    :func:`per_block` cases; each block costs a cold run its own compiles)."""
    return [pytest.param(block, marks=pytest.mark.slow if block != jitnn.host_block() else ())
            for block in blocks]


def thread_counts(counts=(1, 2)) -> list:
    """``counts`` as pytest params for a ``jitnn.Context(num_threads=...)``,
    those above numba's thread count skipped with the reason (a machine or
    ``NUMBA_NUM_THREADS`` that gives this process fewer threads)."""
    import numba
    available = numba.config.NUMBA_NUM_THREADS
    return [pytest.param(count, marks=pytest.mark.skipif(
        count > available, reason=f"needs {count} threads; numba has {available} here "
                                  "(NUMBA_NUM_THREADS or the CPUs this process may use)"))
            for count in counts]


def per_block_and_threads(blocks=(4, 8, 16), threads=(1, 2)) -> list:
    """``block, threads`` pytest params, named ``<block>-<threads>`` as a
    parametrize of the thread counts over one of the blocks names them; the
    host's block on every thread count by default, the others slow. (For the
    runtime's tests around a kernel: binding, replay. On another block the
    case compiles that block's kernels for its own geometry, 10-25 s cold,
    and those kernels are covered by the kernel tests' :func:`per_block`
    cases.)"""
    host = jitnn.host_block()
    return [pytest.param(block, count, id=f"{block}-{count}",
                         marks=pytest.mark.slow if block != host else ())
            for count in threads for block in blocks]


def portable_block_slow(blocks=(4, 8, 16)) -> list:
    """``blocks`` as pytest params, block 4 slow unless it is the host's:
    tests/portable_check.py (run by the default suite) checks every conv2d
    path on block 4, and a block-4 case here compiles kernels of its own."""
    return [pytest.param(block, marks=pytest.mark.slow
                         if block == 4 and block != jitnn.host_block() else ())
            for block in blocks]
