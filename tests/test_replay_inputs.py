"""A replayed step that reads a graph input (jitnn/executor.py
``InputFedBinding``): a first-layer conv reads the caller's plain image in
place, and from the second compute on it runs as one bound kernel call with
that run's array put in its arguments; the answers match float64 for new
input arrays and new contents of the same one, on 1 and 2 threads, and no
caller's array is kept between computes."""

import gc
import weakref

import numpy as np
import pytest

import jitnn
from jitnn.executor import InputFedBinding
from jitnn.ops.conv2d import conv2d_reference
from tests.helpers import random, thread_counts


def _graph(ctx, shape, out_channels):
    b = jitnn.GraphBuilder(ctx)
    w1 = random((out_channels, shape[1], 3, 3), 1, 0.3)
    w2 = random((out_channels, out_channels, 1, 1), 2, 0.3)
    x = b.input("x", shape)
    h = b.clamp(b.conv2d(x, b.constant(w1), strides=2, padding=(1, 1, 1, 1)),
                min_value=0.0, max_value=6.0)
    y = b.conv2d(h, b.constant(w2))
    return b.build({"y": y}), w1, w2


def _want(x, w1, w2):
    h = np.clip(conv2d_reference(x.astype(np.float64), w1, strides=2, padding=1), 0.0, 6.0)
    return conv2d_reference(h, w2)


@pytest.mark.parametrize("threads", thread_counts())
@pytest.mark.parametrize("shape, out_channels", [((1, 3, 17, 13), 16), ((2, 1, 9, 9), 9),
                                                 ((1, 3, 8, 11), 7)])
def test_a_conv_reading_a_graph_input_is_bound(threads, shape, out_channels):
    ctx = jitnn.Context(num_threads=threads)
    graph, w1, w2 = _graph(ctx, shape, out_channels)
    oh, ow = (shape[2] - 1) // 2 + 1, (shape[3] - 1) // 2 + 1
    same = random(shape, 50)                  # one array, new contents at some runs
    for run in range(6):
        if run in (3, 4):
            x = same
            x[...] = random(shape, 60 + run)
        elif run == 5:
            # a strided view: copied by compute, a new array of the bound type
            x = np.ascontiguousarray(np.repeat(random(shape, 70), 2, axis=3))[..., ::2]
        else:
            x = random(shape, run)
        y = np.full((shape[0], out_channels, oh, ow), np.nan, np.float32)
        ctx.compute(graph, {"x": x}, {"y": y})
        np.testing.assert_allclose(y, _want(x, w1, w2), rtol=1e-4, atol=1e-4)
    (program,) = graph._programs
    first = program.bindings.steps[0]
    assert program.steps[0].node.attrs["first_layer"]
    assert isinstance(first, InputFedBinding) and first.args is None
    # every conv bound: the launches of a run are bound calls
    assert all(program.bindings.steps)
    # no caller's array is kept between computes
    x = random(shape, 99)
    ref = weakref.ref(x)
    y = np.empty((shape[0], out_channels, oh, ow), np.float32)
    ctx.compute(graph, {"x": x}, {"y": y})
    np.testing.assert_allclose(y, _want(x, w1, w2), rtol=1e-4, atol=1e-4)
    del x
    gc.collect()
    assert ref() is None


def test_an_input_of_another_type_runs_through_its_op():
    """The bound step checks the new array's type: one it was not compiled
    for (read-only here, made by hand) is not run bound; the op runs it."""
    ctx = jitnn.Context(num_threads=1)
    shape = (1, 3, 9, 9)
    graph, w1, w2 = _graph(ctx, shape, 8)
    y = np.empty((1, 8, 5, 5), np.float32)
    for seed in range(3):
        ctx.compute(graph, {"x": random(shape, seed)}, {"y": y})
    (program,) = graph._programs
    first = program.bindings.steps[0]
    assert isinstance(first, InputFedBinding)
    value = program.inputs[0][1]
    value._data = random(shape, 5)
    value._data.flags.writeable = False
    assert not first.valid(ctx, first.out)
    value._data = random(shape, 5)
    assert first.valid(ctx, first.out) and first.args[0].base is value._data
    first.forget()
    value._data = None


@pytest.mark.parametrize("threads", thread_counts())
def test_bound_steps_after_a_bound_run_are_trusted(threads):
    """After a run of bound calls, a step reading only constants and the
    results of bound steps makes its call without the per-step checks
    (``Bindings.trust``); the first conv, fed the caller's array, is checked
    at every run (an anchor). The answers match float64 on new inputs, each
    step has its time, the launches are counted; an input array of another
    type (read-only: not the first conv's bound type) runs that conv through
    its op, and the trusted step is checked in that run."""
    ctx = jitnn.Context(num_threads=threads)
    shape = (2, 3, 11, 9)
    graph, w1, w2 = _graph(ctx, shape, 9)
    y = np.empty((2, 9, 6, 5), np.float32)
    for run in range(5):
        x = random(shape, 20 + run)
        ctx.reset_stats()
        ctx.compute(graph, {"x": x}, {"y": y})
        np.testing.assert_allclose(y, _want(x, w1, w2), rtol=1e-4, atol=1e-4)
    (program,) = graph._programs
    bindings = program.bindings
    assert bindings.trusted == [False, True] and bindings.anchors == {0}
    assert bindings.trusted_threads == threads
    assert all(c.step.seconds is not None and c.step.seconds >= 0 for c in program.steps)
    assert ctx.stats.launches == len(program.steps)
    graph._programs.clear()
    x = random(shape, 30)
    x.flags.writeable = False
    program.run(ctx, {"x": x}, {"y": y})         # (compute would copy it)
    np.testing.assert_allclose(y, _want(x, w1, w2), rtol=1e-4, atol=1e-4)
    assert bindings.trusted == [False, False]    # the first conv ran through its op
