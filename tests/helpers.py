"""What the tests share: random data, closeness against a float64 reference,
the padding-lane invariant of blocked buffers, and checks of what a run
launched. Test modules import from here, never from each other."""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

import jitnn
from jitnn import registry


def random(shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    """Standard-normal float32 data (times ``scale``), reproducible by ``seed``."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def reference(op: str):
    """Op ``op``'s float64 reference (jitnn/registry.py), looked up by name."""
    return registry.reference(op)


def assert_close(got, want, tol: float = 1e-4) -> None:
    """``got`` matches ``want`` within ``tol``, relative to the larger of 1
    and ``want``'s largest magnitude (float32 results of float64 references)."""
    want = np.asarray(want)
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def assert_padding_lanes_zero(blocked: np.ndarray, channels: int) -> None:
    """The blocked buffer's channels past ``channels`` are all zero (oneDNN's
    invariant: an op with f(0) != 0 must re-zero them)."""
    n, chunks, h, w, block = blocked.shape
    lanes = blocked.transpose(0, 1, 4, 2, 3).reshape(n, chunks * block, h, w)[:, channels:]
    assert not lanes.any(), f"padding lanes past channel {channels} are not zero"


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
