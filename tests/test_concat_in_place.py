"""A channel concat whose inputs' kernels write straight into its buffer.

The buffer planner (jitnn/passes.py, ``plan_buffers``) gives each input of a
blocked batch-1 channel concat its slice of the concat's buffer when every
input is made by a kernel of the plan, read last by the concat, not kept and
each but the last a whole number of blocks (SqueezeNet's fire modules,
Inception's branches): the concat then copies nothing. Otherwise it copies,
as before. Either way the numbers are the float64 reference's, on new inputs
at every replay.
"""

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference
from tests.helpers import random


def _relu(x):
    return np.maximum(x, 0)


def _fire(ctx, batch, squeeze, left, right, *, extra=None, keep_concat=False, twice=False):
    """x -> squeeze 1x1 -> (left 1x1, right 3x3) -> concat -> 1x1; ``extra``:
    also output a pool of the left branch (read after or before the concat);
    ``keep_concat``: the concat is a graph output; ``twice``: the left branch
    twice in the concat. Returns the graph and its float64 reference."""
    rng = np.random.default_rng(3)
    c_in, c_out = 9, 7
    weights = [(rng.standard_normal(shape) * 0.3).astype(np.float32) for shape in (
        (squeeze, c_in, 1, 1), (left, squeeze, 1, 1), (right, squeeze, 3, 3))]
    joined = left * (3 if twice else 2) if twice else left + right
    weights.append((rng.standard_normal((c_out, joined, 1, 1)) * 0.3).astype(np.float32))
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (batch, c_in, 11, 13))
    s = b.relu(b.conv2d(x, b.constant(weights[0])))
    e1 = b.relu(b.conv2d(s, b.constant(weights[1])))
    e3 = b.relu(b.conv2d(s, b.constant(weights[2]), padding=1))
    parts = [e1, e1, e1] if twice else [e1, e3]
    cat = b.concat(parts, axis=1)
    outputs = {"y": b.conv2d(cat, b.constant(weights[3]))}
    if extra:
        outputs["pooled"] = b.max_pool2d(e1, 3, strides=2)
    if keep_concat:
        outputs["cat"] = cat

    def reference(xs):
        x64 = xs.astype(np.float64)
        s64 = _relu(conv2d_reference(x64, weights[0].astype(np.float64)))
        l64 = _relu(conv2d_reference(s64, weights[1].astype(np.float64)))
        r64 = _relu(conv2d_reference(s64, weights[2].astype(np.float64), padding=1))
        c64 = np.concatenate([l64] * 3 if twice else [l64, r64], axis=1)
        want = {"y": conv2d_reference(c64, weights[3].astype(np.float64))}
        if extra:
            windows = np.lib.stride_tricks.sliding_window_view(l64, (3, 3), axis=(2, 3))
            want["pooled"] = windows[:, :, ::2, ::2].max(axis=(4, 5))
        if keep_concat:
            want["cat"] = c64
        return want
    return b.build(outputs), reference


def _run_replays(ctx, graph, reference, batch):
    for seed in range(3):                  # new inputs every run: stale data would show
        xs = random((batch, 9, 11, 13), seed)
        outs = {name: np.full(shape, np.nan, np.float32) for name, shape in graph.outputs.items()}
        ctx.compute(graph, {"x": xs}, outs)
        for name, want in reference(xs).items():
            np.testing.assert_allclose(outs[name], want, rtol=1e-4, atol=1e-4, err_msg=name)
    (program,) = graph._programs
    return program


def _concat(program):
    (index,) = [i for i, c in enumerate(program.steps)
                if c.step.kind == "op" and c.step.label == "concat"]
    return program.steps[index].step, program.bindings.steps[index]


# (block 4, unless it is the host's, in the slow run: the same placement on
# the host's block is the cases of 8, and block 4's fire modules compiled
# drivers of their own, ~12 s of a cold default run)
@pytest.mark.parametrize("block, left, right", [
    (8, 16, 16), (8, 16, 12), (8, 24, 5),
    *(pytest.param(4, left, right, marks=pytest.mark.slow if jitnn.host_block() != 4 else ())
      for left, right in [(4, 7), (8, 8)])])
def test_a_concats_inputs_are_written_into_its_buffer(block, left, right):
    """Whole-block inputs (the last one may end inside a block: its padding
    lanes are the output's) are written in place: the concat's bound call
    copies nothing, each input's step writes at its offset, and explain
    shows the offsets."""
    ctx = jitnn.Context(block=block)
    graph, reference = _fire(ctx, 1, 8, left, right)
    program = _run_replays(ctx, graph, reference, 1)
    step, bound = _concat(program)
    assert step.buffer_place and step.buffer_place[0] == 0
    places = sorted(c.step.buffer_place[0] for c in program.steps
                    if c.step.kind == "op" and c.step.buffer == step.buffer
                    and c.step.buffer_place and c.step.label != "concat")
    assert places == [0, left // block * 11 * 13 * block]
    assert bound and bound.args == ((),)       # nothing left to copy
    text = jitnn.explain(ctx.dispatch(graph, {"x": random((1, 9, 11, 13), 5)})["y"])
    assert "2 value(s) written in place into 1 join(s)" in text
    assert f"{step.buffer}@{places[1]}" in text


@pytest.mark.parametrize("case", ["first not whole blocks", "two images", "read after",
                                  "kept concat", "one input twice"])
def test_a_concat_copies_when_its_inputs_cannot_be_placed(case):
    """An input that is not whole blocks (and not last), two images (an
    input's blocks are not one range of the output), an input read again
    after the concat (another value may take the buffer by then), a concat
    the caller keeps, an input given twice: the concat copies, right."""
    ctx = jitnn.Context(block=8)
    batch, left, right, options = 1, 16, 16, {}
    if case == "first not whole blocks":
        left = 12
    elif case == "two images":
        batch = 2
    elif case == "read after":
        options["extra"] = True
    elif case == "kept concat":
        options["keep_concat"] = True
    else:
        options["twice"] = True
    graph, reference = _fire(ctx, batch, 8, left, right, **options)
    program = _run_replays(ctx, graph, reference, batch)
    step, bound = _concat(program)
    if case == "read after" and all(c.step.buffer_place == () for c in program.steps
                                    if c.step.label != "concat"):
        assert not step.buffer_place
    elif case != "read after":
        assert not step.buffer_place
        assert not any(c.step.buffer_place for c in program.steps)
        assert bound and bound.args != ((),)


def test_nested_concats_and_eager_flushes_are_right():
    """A concat of a concat (the inner one placed, the outer copying it) and
    the same DAG flushed eagerly twice (the second flush reuses the first's
    plan, with its places): the reference's numbers each time."""
    ctx = jitnn.Context(block=8)
    rng = np.random.default_rng(9)
    w = [(rng.standard_normal((16, 9, 1, 1)) * 0.3).astype(np.float32) for _ in range(3)]
    for seed in range(2):
        xs = random((1, 9, 5, 6), seed)
        x = ctx.tensor(xs)
        parts = [jitnn.relu(jitnn.conv2d(x, wi)) for wi in w]
        inner = jitnn.concat(parts[:2], axis=1)
        outer = jitnn.concat([inner, parts[2]], axis=1)
        got = jitnn.conv2d(outer, np.ones((3, 48, 1, 1), np.float32)).numpy()
        x64 = xs.astype(np.float64)
        branches = [_relu(conv2d_reference(x64, wi.astype(np.float64))) for wi in w]
        want = conv2d_reference(np.concatenate(branches, axis=1), np.ones((3, 48, 1, 1)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_concat_kernel_copies_only_what_is_not_in_place():
    """kernels.concat: an input that is already its slice of ``out`` is not
    copied; another input in the same call is; an input that overlaps
    ``out`` elsewhere is refused."""
    from jitnn import layouts
    from jitnn.kernels import concat as K
    out = np.zeros((1, 3, 4, 5, 8), np.float32)
    first = out[:, :2]                       # 16 channels, written in place
    first[...] = layouts.reference_nchw_to_blocked(random((1, 16, 4, 5), 1), 8)
    second = layouts.reference_nchw_to_blocked(random((1, 5, 4, 5), 2), 8)
    kernel, args = K.bind_concat_channels([first, second], [16, 5], out, 1)
    kernel(*args)
    want = np.concatenate([layouts.reference_blocked_to_nchw(first, 16),
                           layouts.reference_blocked_to_nchw(second, 5)], axis=1)
    np.testing.assert_array_equal(layouts.reference_blocked_to_nchw(out, 21), want)
    assert K.bind_concat_channels([out[:, :2], out[:, 2:]], [16, 5], out, 1)[1] == ((),)
    with pytest.raises(ValueError, match="overlaps out"):
        K.bind_concat_channels([out[:, 1:3], second], [16, 5], out, 1)
