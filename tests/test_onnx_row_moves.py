"""Chains of row moves as one gather (jitnn/onnx/_row_moves.py): Swin's
cyclic shift (a roll on two axes), window partition and their reverse
around a per-token product, against a float64 numpy reference; the plan
runs one gather on each side of a shifted block (no transpose), a block
without shift keeps its two transposes, a chain read elsewhere stays right.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from jitnn.onnx import _row_moves  # noqa: E402
from tests.helpers import random  # noqa: E402


class _Graph:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, array) -> str:
        self.count += 1
        self.inits.append(numpy_helper.from_array(np.asarray(array), f"c{self.count}"))
        return f"c{self.count}"

    def __call__(self, op: str, *inputs: str, **attrs) -> str:
        self.count += 1
        out = f"{op.lower()}{self.count}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def roll(self, x: str, shift: int, axis: int, size: int) -> str:
        """``torch.roll(x, shift, axis)`` as the TorchScript exporter writes it."""
        s = (-shift) % size
        if s == 0:
            return x
        part = [self("Slice", x, self.const([a]), self.const([b]), self.const([axis]))
                for a, b in ((s, 2 ** 62), (0, s))]
        return self("Concat", *part, axis=axis)

    def shape(self, x: str, shape) -> str:
        return self("Reshape", x, self.const(np.array(shape, np.int64)))


def window_block(b: int, h: int, w: int, c: int, window: int, shift: int,
                 elsewhere: bool = False):
    """Swin's shifted-window data movement around a per-token product: (the
    ONNX model, the input, the float64 result(s))."""
    g = _Graph()
    weight = (random((c, c), 3) / np.sqrt(c)).astype(np.float32)
    rows, cols = h // window, w // window
    shifted = g.roll(g.roll("x", -shift, 1, h), -shift, 2, w)
    parts = g.shape(shifted, (b, rows, window, cols, window, c))
    windows = g.shape(g("Transpose", parts, perm=[0, 1, 3, 2, 4, 5]), (-1, window * window, c))
    y = g("MatMul", windows, g.const(weight))
    back = g.shape(g.shape(y, (-1, window, window, c)), (b, rows, cols, window, window, c))
    merged = g.shape(g("Transpose", back, perm=[0, 1, 3, 2, 4, 5]), (b, h, w, c))
    out = g("Add", "x", g.roll(g.roll(merged, shift, 1, h), shift, 2, w))
    outputs = [out] + ([windows] if elsewhere else [])
    graph = helper.make_graph(
        g.nodes, "windows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, h, w, c])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = random((b, h, w, c), 1)
    # float64 reference
    r = np.roll(x.astype(np.float64), (-shift, -shift), (1, 2))
    win = r.reshape(b, rows, window, cols, window, c).transpose(0, 1, 3, 2, 4, 5) \
        .reshape(-1, window * window, c)
    yy = (win @ weight.astype(np.float64)).reshape(b, rows, cols, window, window, c) \
        .transpose(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
    want = [x + np.roll(yy, (shift, shift), (1, 2))] + ([win] if elsewhere else [])
    return model, x, outputs, want


def _run(model, x, threads: int = 1):
    ctx = jitnn.Context(num_threads=threads)
    converted = jitnn.onnx.prepare(model, ctx, input_shapes={"x": x.shape})
    outs = converted.dispatch({"x": x})
    ops = []
    for t in outs.values():
        t.numpy()
        ops += [line.split(None, 2)[1] for line in jitnn.explain(t).splitlines()
                if line.strip()[:1].isdigit() and len(line.split()) > 2]
    return converted.run({"x": x}), ops


@pytest.mark.parametrize("b,h,w,c,window,shift", [
    (1, 14, 14, 8, 7, 3), (2, 6, 9, 5, 3, 1), (3, 4, 4, 16, 2, 1), (1, 12, 6, 3, 3, 2)])
def test_shifted_windows_move_rows_with_one_gather_each_way(b, h, w, c, window, shift):
    model, x, outputs, want = window_block(b, h, w, c, window, shift)
    got, ops = _run(model, x)
    np.testing.assert_allclose(got[outputs[0]], want[0], rtol=1e-5, atol=1e-5)
    assert ops.count("gather") == 2 and "transpose" not in ops, ops


def test_two_threads_and_the_stepwise_conversion_give_the_same_bits(monkeypatch):
    model, x, outputs, want = window_block(2, 14, 7, 12, 7, 3)
    got = [_run(model, x, threads)[0][outputs[0]] for threads in (1, 2)]
    monkeypatch.setattr(_row_moves, "ENABLED", False)
    stepwise, ops = _run(model, x)
    assert ops.count("transpose") == 2 and ops.count("gather") == 4, ops
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[0], stepwise[outputs[0]])


def test_windows_without_shift_keep_their_transposes():
    model, x, outputs, want = window_block(2, 6, 6, 4, 3, 0)
    got, ops = _run(model, x)
    np.testing.assert_allclose(got[outputs[0]], want[0], rtol=1e-5, atol=1e-5)
    assert ops.count("transpose") == 2 and "gather" not in ops, ops


def test_a_chain_read_elsewhere_gives_both_readers_their_values():
    model, x, outputs, want = window_block(2, 6, 9, 5, 3, 1, elsewhere=True)
    got, _ = _run(model, x)
    for name, expected in zip(outputs, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)
