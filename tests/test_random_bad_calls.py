"""Bad calls (tests/bad_calls.py) in the middle of random programs
(tests/programs.py): each one raises at the call a :class:`jitnn.JitnnError`
(a ValueError or TypeError) that names the op, and leaves nothing behind: the
program around it, with its pending work, still gives the reference's
numbers."""

from __future__ import annotations

import numpy as np
import pytest

import jitnn
from .bad_calls import F32, _ones, bad_calls_2d, bad_calls_4d, expect_error
from .programs import draw_program, run_eager

SEEDS = range(40)


def check_bad_calls(rng, ctx, tensors) -> int:
    """Two bad calls on random live tensors; returns how many were made."""
    for _ in range(2):
        x = tensors[int(rng.choice(sorted(tensors)))]
        calls = bad_calls_4d(x.shape) if x.ndim == 4 else bad_calls_2d(x.shape)
        index = int(rng.integers(len(calls)))
        expect_error(*calls[index], x, f"#{index}")
    return 2


@pytest.mark.parametrize("context", ["blocked", "plain", "eager", "blocked-pending3"])
@pytest.mark.parametrize("seed", SEEDS[:20])
def test_bad_calls_raise_and_leave_the_program_intact(seed, context):
    rng = np.random.default_rng([seed, 1])
    made = []
    run_eager(draw_program(seed), context,
              between_steps=lambda ctx, tensors: made.append(check_bad_calls(rng, ctx, tensors)))
    assert sum(made) > 0


def test_every_bad_call_raises_on_a_tensor_of_each_kind():
    """Each entry of the tables raises as promised: on a computed blocked
    tensor, a pending one and a plain one (C not a block multiple)."""
    ctx = jitnn.Context()
    x = ctx.tensor(np.random.default_rng(0).standard_normal((2, 9, 7, 6)).astype(F32))
    pending = jitnn.relu(jitnn.conv2d(x, _ones(9, 9, 1, 1)))
    blocked = jitnn.sigmoid(x)
    blocked.numpy()
    rows = jitnn.flatten(jitnn.global_average_pool2d(pending))
    for t in (x, pending, blocked):
        for index, (op, bad) in enumerate(bad_calls_4d(t.shape)):
            expect_error(op, bad, t, f"#{index}")
    for index, (op, bad) in enumerate(bad_calls_2d(rows.shape)):
        expect_error(op, bad, rows, f"#{index}")
    np.testing.assert_allclose(
        pending.numpy(),
        np.maximum(np.einsum("nchw->nhw", x.numpy())[:, None].repeat(9, axis=1), 0),
        rtol=1e-5, atol=1e-5)
