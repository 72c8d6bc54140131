"""Concat of slices of one tensor along the concat's axis, as exporters write
``torch.roll`` (Swin's cyclic shift of the windows): converted as one gather
of the source (jitnn/onnx/_convert.py, ``_slices_of_one``), not the slices
and the concat. Against numpy's roll and float64 references: both axes of a
roll, negative and positive shifts, slices read elsewhere too, pieces in any
order or leaving rows out, and the cases that stay a concat (two sources,
strided slices, a slice cutting two axes)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from tests.helpers import random  # noqa: E402


def _slice(nodes, inits, x, out, axis, start, end, step=None):
    names = [f"{out}_{k}" for k in ("s", "e", "a", "p")]
    inits += [numpy_helper.from_array(np.array([v], np.int64), n)
              for n, v in zip(names, (start, end, axis, 1 if step is None else step))]
    nodes.append(helper.make_node("Slice", [x] + names, [out]))


def _roll(nodes, inits, x, out, axis, size, shift):
    """``torch.roll(x, shift, axis)`` as the TorchScript exporter writes it."""
    s = (-shift) % size
    _slice(nodes, inits, x, out + "_a", axis, s, 2 ** 62)
    _slice(nodes, inits, x, out + "_b", axis, 0, s)
    nodes.append(helper.make_node("Concat", [out + "_a", out + "_b"], [out], axis=axis))


def _run(nodes, inits, x_shape, outputs, extra_inputs=()):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
               for n, s in extra_inputs]
    graph = helper.make_graph(nodes, "roll", inputs, [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feed = {"x": random(x_shape, 1)}
    feed.update((n, random(s, 2)) for n, s in extra_inputs)
    ctx = jitnn.Context(num_threads=1)
    converted = jitnn.onnx.prepare(model, ctx)
    ops = [step.split()[0] for step in _ops(converted)]
    return converted.run(feed), feed, ops


def _ops(converted) -> list[str]:
    """The jitnn ops the model's plan runs (from jitnn.explain's step lines)."""
    feed = {name: np.zeros(shape, np.float32) for name, shape in converted.inputs.items()}
    outs = converted.dispatch(feed)
    lines = []
    for t in outs.values():
        t.numpy()
        text = jitnn.explain(t)
        lines += [line.split(None, 1)[1] for line in text.splitlines()
                  if line.strip()[:1].isdigit() and len(line.split()) > 2]
    return lines


@pytest.mark.parametrize("shifts", [(3, -3), (-2, 5), (0, 1)])
def test_a_roll_on_two_axes_is_two_gathers(shifts):
    """Swin's ``torch.roll(x, (-s, -s), (1, 2))`` on (B, H, W, C): a gather per
    shifted axis, no slice or concat; the values of numpy's roll (the same
    copies)."""
    shape = (2, 9, 10, 5)
    nodes, inits = [], []
    _roll(nodes, inits, "x", "r1", 1, shape[1], shifts[0])
    _roll(nodes, inits, "r1", "y", 2, shape[2], shifts[1])
    got, feed, ops = _run(nodes, inits, shape, ["y"])
    np.testing.assert_array_equal(got["y"], np.roll(feed["x"], shifts, (1, 2)))
    # (a shift of 0 is the whole tensor and an empty slice: no op at all)
    moved = sum(1 for shift in shifts if shift != 0)
    assert "concat" not in ops and "slice" not in ops and ops.count("gather") == moved, ops


def test_slices_read_elsewhere_and_pieces_in_any_order():
    """A slice also read by another node still runs (its own output); three
    pieces out of order, one row left out and one repeated: one gather."""
    shape = (3, 11, 4)
    nodes, inits = [], []
    for name, (start, end) in {"a": (7, 11), "b": (0, 3), "c": (2, 6)}.items():
        _slice(nodes, inits, "x", name, 1, start, end)
    nodes.append(helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=-2))
    nodes.append(helper.make_node("Add", ["b", "w"], ["z"]))
    got, feed, ops = _run(nodes, inits, shape, ["y", "z"], [("w", (3, 3, 4))])
    x = feed["x"].astype(np.float64)
    np.testing.assert_array_equal(got["y"], np.concatenate([x[:, 7:], x[:, :3], x[:, 2:6]], 1))
    np.testing.assert_allclose(got["z"], x[:, :3] + feed["w"], rtol=1e-6)
    assert "concat" not in ops and ops.count("gather") == 1, ops


def test_other_concats_stay_concats():
    """Slices of two sources, a strided slice, a slice of two axes, a slice
    along another axis than the concat's: concats, with their values."""
    shape = (4, 6, 6)
    nodes, inits = [], []
    _slice(nodes, inits, "x", "a", 1, 3, 6)
    _slice(nodes, inits, "w", "b", 1, 0, 3)
    nodes.append(helper.make_node("Concat", ["a", "b"], ["y1"], axis=1))      # two sources
    _slice(nodes, inits, "x", "c", 1, 0, 6, step=2)
    nodes.append(helper.make_node("Concat", ["c", "a"], ["y2"], axis=1))      # strided
    _slice(nodes, inits, "a", "d", 2, 0, 3)
    _slice(nodes, inits, "x", "e", 2, 3, 6)
    nodes.append(helper.make_node("Concat", ["d", "e"], ["y3"], axis=1))      # two axes
    nodes.append(helper.make_node("Concat", ["e", "e"], ["y4"], axis=1))      # other axis
    got, feed, ops = _run(nodes, inits, shape, ["y1", "y2", "y3", "y4"], [("w", shape)])
    x, w = feed["x"], feed["w"]
    np.testing.assert_array_equal(got["y1"], np.concatenate([x[:, 3:], w[:, :3]], 1))
    np.testing.assert_array_equal(got["y2"], np.concatenate([x[:, ::2], x[:, 3:]], 1))
    np.testing.assert_array_equal(got["y3"], np.concatenate([x[:, 3:, :3], x[:, :, 3:]], 1))
    np.testing.assert_array_equal(got["y4"], np.concatenate([x[:, :, 3:]] * 2, 1))
    assert ops.count("concat") == 4 and "gather" not in ops, ops
