"""lstm_cell, gru_cell, gru_reset and lstm_hidden (jitnn/ops/recurrent.py,
kernels/recurrent.py) against a float64 reference written here from ONNX's
LSTM and GRU formulas, one direction and batch entry at a time: H = 1, 3,
7, 9, 17, 48, B = 1 and 3, one and two directions, the projection's rows
read time-major and batch-major, peepholes, clip, input_forget,
linear_before_reset 0 and 1, a first step without a state; the ops' own
references; a replayed graph of steps bound to one call each; bad calls
refused by name. The ONNX lowering onto these ops is tested in
tests/test_onnx_recurrent.py."""

from __future__ import annotations

import numpy as np
import pytest

import jitnn
from jitnn.errors import JitnnValueError
from jitnn.ops import recurrent as ops


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _gates(x, first_row, entry_rows, d, b, gates, hidden):
    """Direction ``d``, entry ``b``: its ``gates`` pre-activations from x's row."""
    row = np.asarray(x, np.float64)[first_row[d] + b * entry_rows]
    return row[d * gates * hidden:(d + 1) * gates * hidden].reshape(gates, hidden)


def lstm_step(x, product, state, peepholes, first_row, entry_rows, directions, batch, clip,
              input_forget):
    """ONNX's LSTM step for each direction and entry, float64: (2, B, D * H)."""
    hidden = x.shape[1] // (4 * directions)
    cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    out = np.zeros((2, batch, directions * hidden))
    for d in range(directions):
        cols = slice(d * hidden, (d + 1) * hidden)
        for b in range(batch):
            g = _gates(x, first_row, entry_rows, d, b, 4, hidden)
            c_prev = np.zeros(hidden)
            if state is not None:
                g = g + np.asarray(product, np.float64)[b, d * 4 * hidden:(d + 1) * 4 * hidden] \
                    .reshape(4, hidden)
                c_prev = np.asarray(state, np.float64)[1, b, cols]
            p = np.zeros((3, hidden)) if peepholes is None else \
                np.asarray(peepholes, np.float64)[d].reshape(3, hidden)
            i = _sigmoid(cl(g[0] + p[0] * c_prev))
            f = 1.0 - i if input_forget else _sigmoid(cl(g[2] + p[2] * c_prev))
            c = f * c_prev + i * np.tanh(cl(g[3]))
            o = _sigmoid(cl(g[1] + p[1] * c))
            out[0, b, cols], out[1, b, cols] = o * np.tanh(c), c
    return out


def gru_step(x, product, state, weight_h, bias_h, first_row, entry_rows, directions, batch,
             clip, linear_before_reset):
    """ONNX's GRU step, float64: the new h, (B, D * H). ``product`` is h @ R^T
    of all three gates; ``weight_h``: R_h^T per direction (for linear_before_reset 0)."""
    hidden = x.shape[1] // (3 * directions)
    cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    out = np.zeros((batch, directions * hidden))
    for d in range(directions):
        cols = slice(d * hidden, (d + 1) * hidden)
        for b in range(batch):
            g = _gates(x, first_row, entry_rows, d, b, 3, hidden)
            h = np.zeros(hidden) if state is None else np.asarray(state, np.float64)[b, cols]
            p = np.zeros((3, hidden)) if state is None else \
                np.asarray(product, np.float64)[b, d * 3 * hidden:(d + 1) * 3 * hidden] \
                .reshape(3, hidden)
            z = _sigmoid(cl(g[0] + p[0]))
            r = _sigmoid(cl(g[1] + p[1]))
            if linear_before_reset:
                n = np.tanh(cl(g[2] + r * (p[2] + bias_h[d])))
            else:
                n = np.tanh(cl(g[2] + (r * h) @ np.asarray(weight_h[d], np.float64)))
            out[b, cols] = (1.0 - z) * n + z * h
    return out


def _rows(layout: int, steps: int, batch: int, directions: int, step: int):
    """first_row, entry_rows of a projection of ``steps`` steps (the second
    direction running backwards), time-major (0) or batch-major (1)."""
    times = [step] + [steps - 1 - step] * (directions - 1)
    return [t if layout else t * batch for t in times], (steps if layout else 1)


CASES = [(h, b, d) for h in (1, 3, 7, 9, 17, 48) for b in (1, 3) for d in (1, 2)]


@pytest.mark.parametrize("hidden, batch, directions", CASES)
def test_lstm_cell_matches_the_reference(hidden, batch, directions):
    rng = np.random.default_rng(hidden * 10 + batch + directions)
    steps = 4
    x = rng.standard_normal((steps * batch, directions * 4 * hidden)).astype(np.float32)
    product = rng.standard_normal((batch, directions * 4 * hidden)).astype(np.float32)
    state = rng.standard_normal((2, batch, directions * hidden)).astype(np.float32)
    peepholes = rng.standard_normal((directions, 3 * hidden)).astype(np.float32)
    for k, (layout, peep, clip, forget, first) in enumerate([
            (0, None, None, False, False), (1, peepholes, None, False, False),
            (0, peepholes, 0.6, True, False), (1, None, 0.4, False, True),
            (0, peepholes, None, False, True)]):
        first_row, entry_rows = _rows(layout, steps, batch, directions, k % steps)
        p, s = (None, None) if first else (product, state)
        got = jitnn.lstm_cell(x, p, s, peep, first_row=first_row, entry_rows=entry_rows,
                              directions=directions, batch=batch, clip=clip,
                              input_forget=forget).numpy()
        want = lstm_step(x, p, s, peep, first_row, entry_rows, directions, batch, clip, forget)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=str(k))
        spec = ops.lstm_cell_reference(x, p, s, peep, first_row=first_row,
                                       entry_rows=entry_rows, directions=directions,
                                       batch=batch, clip=clip, input_forget=forget)
        np.testing.assert_allclose(spec, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hidden, batch, directions", CASES)
def test_gru_cell_matches_the_reference(hidden, batch, directions):
    rng = np.random.default_rng(hidden * 10 + batch + directions + 1)
    steps = 3
    x = rng.standard_normal((steps * batch, directions * 3 * hidden)).astype(np.float32)
    product = rng.standard_normal((batch, directions * 3 * hidden)).astype(np.float32)
    state = rng.standard_normal((batch, directions * hidden)).astype(np.float32)
    weight_h = (rng.standard_normal((directions, hidden, hidden)) * 0.5).astype(np.float32)
    bias_h = rng.standard_normal((directions, hidden)).astype(np.float32)
    zr = np.ascontiguousarray(product.reshape(batch, directions, 3, hidden)[:, :, :2]
                              .reshape(batch, -1))
    for k, (layout, clip, lbr, first) in enumerate([
            (0, None, 0, False), (1, 0.5, 0, False), (0, None, 1, False), (1, 0.7, 1, False),
            (0, None, 0, True), (1, 0.3, 1, True)]):
        first_row, entry_rows = _rows(layout, steps, batch, directions, k % steps)
        rows = dict(first_row=first_row, entry_rows=entry_rows, directions=directions)
        want = gru_step(x, product, None if first else state, weight_h, bias_h, first_row,
                        entry_rows, directions, batch, clip, lbr)
        if first:
            got = jitnn.gru_cell(x, None, None, None, bias_h if lbr else None, batch=batch,
                                 clip=clip, linear_before_reset=lbr, **rows).numpy()
        elif lbr:
            got = jitnn.gru_cell(x, product, state, None, bias_h, clip=clip,
                                 linear_before_reset=1, **rows).numpy()
        else:
            scaled = jitnn.gru_reset(x, zr, state, clip=clip, **rows).numpy()
            r = _sigmoid(np.clip(np.stack([_gates(x, first_row, entry_rows, d, b, 3, hidden)[1]
                                           + zr[b, (2 * d + 1) * hidden:(2 * d + 2) * hidden]
                                           for d in range(directions) for b in range(batch)]),
                                 -(clip or np.inf), clip or np.inf))
            h = state.reshape(batch, directions, hidden).transpose(1, 0, 2).reshape(-1, hidden)
            np.testing.assert_allclose(scaled.reshape(batch, directions, hidden)
                                       .transpose(1, 0, 2).reshape(-1, hidden), r * h,
                                       rtol=1e-5, atol=1e-6)
            reset = np.concatenate([scaled[:, d * hidden:(d + 1) * hidden] @ weight_h[d]
                                    for d in range(directions)], axis=1).astype(np.float32)
            got = jitnn.gru_cell(x, zr, state, reset, clip=clip, **rows).numpy()
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(k))


def test_references_of_the_gru_ops():
    """The ops' own float64 references agree with the one written here."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 2 * 3 * 5))
    product = rng.standard_normal((3, 2 * 3 * 5))
    state = rng.standard_normal((3, 10))
    bias = rng.standard_normal((2, 5))
    rows = dict(first_row=[0, 3], entry_rows=1, directions=2)
    want = gru_step(x, product, state, None, bias, [0, 3], 1, 2, 3, 0.9, 1)
    np.testing.assert_allclose(ops.gru_cell_reference(x, product, state, None, bias, clip=0.9,
                                                      linear_before_reset=True, **rows),
                               want, rtol=1e-12)


def test_a_replayed_sequence_of_steps_is_one_call_a_step():
    """Steps in a graph: a gemm reads each LSTM state's h in place (no copy),
    the replayed run binds every cell to one kernel call, and gives the
    reference's numbers."""
    rng = np.random.default_rng(5)
    steps, batch, hidden, directions = 3, 3, 7, 2
    width = directions * 4 * hidden
    x = rng.standard_normal((steps * batch, width)).astype(np.float32)
    blocks = [rng.standard_normal((hidden, 4 * hidden)).astype(np.float32) * 0.5
              for _ in range(directions)]
    weight = np.zeros((directions * hidden, width), np.float32)
    for d, block in enumerate(blocks):
        weight[d * hidden:(d + 1) * hidden, d * 4 * hidden:(d + 1) * 4 * hidden] = block
    ctx = jitnn.Context(num_threads=1)
    builder = jitnn.GraphBuilder(ctx)
    xo = builder.input("x", x.shape)
    wo = builder.constant(weight)
    state = None
    for s in range(steps):
        first_row, _ = _rows(0, steps, batch, directions, s)
        product = None if state is None else builder.gemm(builder.lstm_hidden(state), wo)
        state = builder.lstm_cell(xo, product, state, first_row=first_row,
                                  directions=directions, batch=batch)
    graph = builder.build({"state": state})
    want, s_ref = None, None
    for s in range(steps):
        first_row, _ = _rows(0, steps, batch, directions, s)
        product = None if s_ref is None else s_ref[0] @ weight.astype(np.float64)
        s_ref = lstm_step(x, product, s_ref, None, first_row, 1, directions, batch, None, False)
    want = s_ref
    out = np.empty(want.shape, np.float32)
    for _ in range(3):
        ctx.compute(graph, {"x": x}, {"state": out})
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    (program,) = graph._programs
    bound = [bool(b) for c, b in zip(program.steps, program.bindings.steps)
             if c.step.kind == "op" and c.node.op == "lstm_cell"]
    assert bound == [True] * steps, bound
    plan = jitnn.explain(ctx.dispatch(graph, {"x": x})["state"])
    labels = [line.split()[1] for line in plan.splitlines() if line[:5].strip().isdigit()]
    assert labels == ["lstm_cell", "gemm", "lstm_cell", "gemm", "lstm_cell"], plan


@pytest.mark.parametrize("call, message", [
    (lambda x: jitnn.lstm_cell(x, None, None, first_row=[0], batch=3), None),
    (lambda x: jitnn.lstm_cell(x, None, None, first_row=[0, 1], directions=2, batch=3),
     r"lstm_cell: x \(9, 28\) must be \(rows, directions \* 4 \* H\)"),
    (lambda x: jitnn.lstm_cell(x, None, None, first_row=[7], batch=3),
     r"lstm_cell: first_row \[7\].* must be rows of x"),
    (lambda x: jitnn.lstm_cell(x, None, None, first_row=[0]),
     "lstm_cell: batch is needed"),
    (lambda x: jitnn.lstm_cell(x, np.zeros((3, 28), np.float32), None, first_row=[0],
                               batch=3), "product and state come together"),
    (lambda x: jitnn.lstm_cell(x, np.zeros((3, 28), np.float32),
                               np.zeros((3, 7), np.float32), first_row=[0]),
     r"lstm_cell: state has shape \(3, 7\), expected \(2, 3, 7\)"),
    (lambda x: jitnn.gru_cell(x[:, :21], np.zeros((3, 14), np.float32),
                              np.zeros((3, 7), np.float32), first_row=[0]),
     "gru_cell: reset_product"),
    (lambda x: jitnn.lstm_hidden(x), r"lstm_hidden: state must be \(2, B, D \* H\)"),
])
def test_bad_calls_are_refused_by_name(call, message):
    x = np.zeros((9, 28), np.float32)
    if message is None:
        assert call(x).numpy().shape == (2, 3, 7)
        return
    with pytest.raises(JitnnValueError, match=message):
        call(x)


def test_lstm_hidden_is_the_first_half_read_in_place_or_not():
    """lstm_hidden read on its own, and by a matmul and a gemm (in place)."""
    rng = np.random.default_rng(8)
    state = rng.standard_normal((2, 3, 14)).astype(np.float32)
    weight = rng.standard_normal((14, 5)).astype(np.float32)
    ctx = jitnn.Context(num_threads=1)
    s = ctx.tensor(state)
    np.testing.assert_array_equal(jitnn.lstm_hidden(s).numpy(), state[0])
    want = state[0].astype(np.float64) @ weight
    for product in (jitnn.matmul(jitnn.lstm_hidden(s), weight),
                    jitnn.gemm(jitnn.lstm_hidden(s), weight)):
        np.testing.assert_allclose(product.numpy(), want, rtol=1e-5, atol=1e-5)
