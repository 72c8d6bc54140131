"""The public jitnn.conv_transpose2d op: WebNN vectors, policies, graph, errors."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv_transpose2d import conv_transpose2d_reference
from tests.helpers import assert_schedule, random
from tests.wpt import arguments, float32_cases

WPT = float32_cases("wpt_conv_transpose2d.json")


@pytest.mark.parametrize("case", WPT, ids=[c[0] for c in WPT])
def test_op_matches_webnn_conformance(case):
    _, arrays, operator, want = case
    positional, options = arguments(operator, arrays)
    got = jitnn.conv_transpose2d(*positional, **options).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("policy", jitnn.POLICIES)
@pytest.mark.parametrize("input_layout", ["nchw", "nhwc"])
def test_policies_and_layouts_chain_with_conv2d(policy, input_layout):
    ctx = jitnn.Context(policy=policy)
    shape = (2, 9, 5, 6) if input_layout == "nchw" else (2, 5, 6, 9)
    x, w, b = random(shape, 1), random((9, 3, 3, 3), 2), random((3,), 3)
    up = jitnn.conv_transpose2d(ctx.tensor(x), w, b, strides=2, padding=1, output_padding=1,
                                input_layout=input_layout, activation="relu")
    assert up.shape == ((2, 3, 10, 12) if input_layout == "nchw" else (2, 10, 12, 3))
    y = jitnn.sigmoid(jitnn.conv_transpose2d(up, np.ones((3, 2, 1, 1), np.float32),
                                             input_layout=input_layout)).numpy()
    want = conv_transpose2d_reference(x, w, b, strides=2, padding=1, output_padding=1,
                                      input_layout=input_layout, activation="relu")
    want = conv_transpose2d_reference(want, np.ones((3, 2, 1, 1)), input_layout=input_layout)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-want)), rtol=1e-4, atol=1e-5)


def test_filter_packed_once_and_graph_builder():
    ctx = jitnn.Context()
    w = ctx.tensor(random((4, 2, 2, 2), 4))
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, 4, 3, 3))
    graph = b.build({"y": b.conv_transpose2d(x, b.constant(np.asarray(w)), strides=2)})
    assert graph.outputs == {"y": (1, 2, 6, 6)}
    for seed in range(2):
        xs = random((1, 4, 3, 3), 10 + seed)
        np.testing.assert_allclose(ctx.dispatch(graph, {"x": xs})["y"].numpy(),
                                   conv_transpose2d_reference(xs, np.asarray(w), strides=2),
                                   rtol=1e-4, atol=1e-5)
    assert ctx.stats.filter_packs == 1


def test_each_run_is_one_launch_on_the_context_threads(monkeypatch):
    import numba
    import importlib
    op_module = importlib.import_module("jitnn.ops.conv_transpose2d")   # not the op
    threads_seen = []
    forward = op_module.ct_kernels.conv_transpose2d_forward

    def recording_forward(*args):
        threads_seen.append(numba.get_num_threads())
        return forward(*args)
    monkeypatch.setattr(op_module.ct_kernels, "conv_transpose2d_forward", recording_forward)
    # this thread's numba count left at all threads by another context's work
    everything = jitnn.Context(num_threads=numba.config.NUMBA_NUM_THREADS)
    jitnn.reorder(everything.tensor(random((1, 8, 2, 2), 7)), "nChw8c").numpy()
    ctx = jitnn.Context(num_threads=1)
    x, w = random((1, 4, 3, 3), 5), random((4, 2, 2, 2), 6)
    with assert_schedule(ctx, kernels=2):
        for _ in range(2):
            got = jitnn.conv_transpose2d(ctx.tensor(x), ctx.tensor(w), strides=2).numpy()
    np.testing.assert_allclose(got, conv_transpose2d_reference(x, w, strides=2),
                               rtol=1e-4, atol=1e-5)
    assert threads_seen == [1, 1]


def test_errors_name_the_op():
    with pytest.raises(jitnn.JitnnValueError, match="conv_transpose2d: input has 3 channels"):
        jitnn.conv_transpose2d(np.zeros((1, 3, 4, 4)), np.zeros((4, 2, 3, 3)))
