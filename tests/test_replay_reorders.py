"""Layout conversions between plain ops and blocked kernels in a replayed
program (jitnn/executor.py ``Bindings``): the planned reorder of a plain
value into the blocked layout, and the planned readback of a blocked value
for an op that reads plain values, write into the same array at every run,
so the kernels reading them are bound calls too. Every run gets new inputs
and matches the float64 reference; each reorder runs once per run, in the
axes its reader takes (NHWC tokens read by a conv with ``input_layout``
"nhwc": one reorder from NHWC, not one that misreads the tokens as NCHW and
another one inside the conv)."""

import numpy as np
import pytest

import jitnn
from jitnn import registry
from tests.helpers import random


def _bound(graph) -> dict[str, list]:
    (program,) = graph._programs
    found: dict[str, list] = {}
    for captured, binding in zip(program.steps, program.bindings.steps):
        if captured.step.kind == "op":
            found.setdefault(captured.step.label.split(" ")[0], []).append(bool(binding))
    return found


def _reorder_labels(graph) -> list[str]:
    (program,) = graph._programs
    return [c.step.label for c in program.steps if c.step.kind == "reorder"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("channels", [3, 9, 17])
def test_a_conv_between_plain_ops_is_bound_with_its_reorders(threads, channels):
    """plain transpose -> conv (its input reordered to blocked) -> a plain
    op reading the conv's result back: the conv and both plain ops bound,
    one reorder each way a run (fewer channels than a block: the first-layer
    conv reads its input plain, only the readback), right at every run."""
    ctx = jitnn.Context(num_threads=threads)
    w, bias = random((channels, channels, 3, 3), 1, 0.3), random((channels,), 2)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 7, 5, channels))                               # NHWC
    nchw = b.transpose(b.relu(x), (0, 3, 1, 2))
    y = b.conv2d(nchw, b.constant(w), b.constant(bias), padding=1)
    graph = b.build({"y": b.transpose(y, (0, 2, 3, 1))})               # read back plain
    reorders = 1 if channels < ctx.block else 2
    for seed in range(3):
        xs = random((2, 7, 5, channels), 10 + seed)
        out = np.empty((2, 7, 5, channels), np.float32)
        ctx.reset_stats()
        ctx.compute(graph, {"x": xs}, {"y": out})
        want = registry.reference("conv2d")(
            np.maximum(xs, 0).transpose(0, 3, 1, 2), w, bias, padding=1).transpose(0, 2, 3, 1)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        assert ctx.stats.reorders == reorders, ctx.stats
    bound = _bound(graph)
    assert all(bound["conv2d"]) and all(bound["transpose"]), bound
    assert len(_reorder_labels(graph)) == reorders, _reorder_labels(graph)


@pytest.mark.parametrize("channels", [7, 16])
def test_tokens_read_by_an_nhwc_conv_are_reordered_once_from_nhwc(channels):
    ctx = jitnn.Context(num_threads=1)
    w = random((channels, 1, 3, 3), 3)
    b = jitnn.GraphBuilder(ctx)
    tokens = b.relu(b.input("t", (2, 9 * 5, channels)))                 # (N, H * W, C)
    nhwc = b.reshape(tokens, (2, 9, 5, channels))
    y = b.conv2d(nhwc, b.constant(w), padding=1, groups=channels, input_layout="nhwc")
    graph = b.build({"y": b.reshape(y, (2, 45, channels))})
    for seed in range(3):
        ts = random((2, 45, channels), 20 + seed)
        out = np.empty((2, 45, channels), np.float32)
        ctx.reset_stats()
        ctx.compute(graph, {"t": ts}, {"y": out})
        want = registry.reference("conv2d")(np.maximum(ts, 0).reshape(2, 9, 5, channels), w,
                                            padding=1, groups=channels, input_layout="nhwc")
        np.testing.assert_allclose(out, want.reshape(2, 45, channels), rtol=1e-5, atol=1e-5)
        assert ctx.stats.reorders == 2, ctx.stats          # in from NHWC, back to NHWC
    labels = _reorder_labels(graph)
    assert labels[0].startswith("reorder nhwc ->"), labels
    assert all(_bound(graph)["conv2d"])
