"""ONNX LSTM, GRU and RNN (jitnn/onnx/_convert_recurrent.py) against a float64
numpy reference written from ONNX's operator formulas, one batch entry and
time step at a time: the three directions, both layouts, biases, initial
states, peepholes, input_forget, linear_before_reset, clip, the other
activations with their alpha and beta, sequence lengths (an empty sequence's
final state is zeros, as ONNX Runtime gives it), any subset of the outputs,
odd sizes; two LSTMs in a row; one product a step, and with the default
activations one fused cell launch a step more (jitnn/ops/recurrent.py); broken
models refused by name. ONNX's own node tests for these ops run in
tests/test_onnx_conformance.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, helper, numpy_helper

import jitnn
import jitnn.onnx

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


# --- the reference (ONNX's operators.md) ------------------------------------------------

def _activation(name: str, alpha: float | None, beta: float | None):
    """An ONNX activation function in float64 (the ONNX ops' defaults)."""
    name = name.lower()
    if name == "sigmoid":
        return lambda x: 1.0 / (1.0 + np.exp(-x))
    if name == "tanh":
        return np.tanh
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    if name == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * x)
    if name == "hardsigmoid":
        a, b = 0.2 if alpha is None else alpha, 0.5 if beta is None else beta
        return lambda x: np.clip(a * x + b, 0.0, 1.0)
    if name == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * (np.exp(x) - 1.0))
    if name == "softsign":
        return lambda x: x / (1.0 + np.abs(x))
    if name == "softplus":
        return lambda x: np.log1p(np.exp(x))
    if name == "affine":
        a, b = 1.0 if alpha is None else alpha, 0.0 if beta is None else beta
        return lambda x: a * x + b
    if name == "scaledtanh":
        a, b = 1.0 if alpha is None else alpha, 1.0 if beta is None else beta
        return lambda x: a * np.tanh(b * x)
    raise ValueError(name)


TAKES = {"leakyrelu": (True, False), "elu": (True, False), "hardsigmoid": (True, True),
         "affine": (True, True), "scaledtanh": (True, True)}


def _functions(names, alphas, betas):
    """The activations, activation_alpha/beta consumed in order by the
    functions that take them."""
    alphas, betas = list(alphas or []), list(betas or [])
    out = []
    for name in names:
        takes_alpha, takes_beta = TAKES.get(name.lower(), (False, False))
        alpha = alphas.pop(0) if takes_alpha and alphas else None
        beta = betas.pop(0) if takes_beta and betas else None
        out.append(_activation(name, alpha, beta))
    return out


def reference(kind, x, w, r, b=None, lengths=None, h0=None, c0=None, p=None, *,
              direction="forward", layout=0, clip=None, activations=None, alphas=None,
              betas=None, input_forget=0, linear_before_reset=0):
    """Y, Y_h, Y_c (None for GRU and RNN) of ONNX's formulas, in float64."""
    x, w, r = (np.asarray(a, np.float64) for a in (x, w, r))
    if layout:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else np.asarray(h0).transpose(1, 0, 2)
        c0 = None if c0 is None else np.asarray(c0).transpose(1, 0, 2)
    steps, batch, _ = x.shape
    dirs = 2 if direction == "bidirectional" else 1
    hidden = r.shape[-1]
    g = GATES[kind]
    b = np.zeros((dirs, 2 * g * hidden)) if b is None else np.asarray(b, np.float64)
    h0 = np.zeros((dirs, batch, hidden)) if h0 is None else np.asarray(h0, np.float64)
    c0 = np.zeros((dirs, batch, hidden)) if c0 is None else np.asarray(c0, np.float64)
    p = np.zeros((dirs, 3 * hidden)) if p is None else np.asarray(p, np.float64)
    lengths = np.full(batch, steps) if lengths is None else np.asarray(lengths)
    names = activations or DEFAULTS[kind] * dirs
    funcs = _functions(names, alphas, betas)
    per = len(DEFAULTS[kind])
    cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    y = np.zeros((steps, dirs, batch, hidden))
    y_h = np.zeros((dirs, batch, hidden))
    y_c = np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        f, gg, hh = (funcs[d * per:(d + 1) * per] + [None, None])[:3]
        W = np.split(w[d], g)
        R = np.split(r[d], g)
        Wb = np.split(b[d][:g * hidden], g)
        Rb = np.split(b[d][g * hidden:], g)
        Pi, Po, Pf = np.split(p[d], 3)
        reverse = direction == "reverse" or d == 1
        for n in range(batch):
            h, c = h0[d, n], c0[d, n]
            times = range(lengths[n])
            for t in (reversed(times) if reverse else times):
                xt = x[t, n]
                if kind == "LSTM":
                    i = f(cl(xt @ W[0].T + h @ R[0].T + Pi * c + Wb[0] + Rb[0]))
                    if input_forget:
                        ft = 1.0 - i
                    else:
                        ft = f(cl(xt @ W[2].T + h @ R[2].T + Pf * c + Wb[2] + Rb[2]))
                    ct = gg(cl(xt @ W[3].T + h @ R[3].T + Wb[3] + Rb[3]))
                    c = ft * c + i * ct
                    o = f(cl(xt @ W[1].T + h @ R[1].T + Po * c + Wb[1] + Rb[1]))
                    h = o * hh(c)
                elif kind == "GRU":
                    z = f(cl(xt @ W[0].T + h @ R[0].T + Wb[0] + Rb[0]))
                    rt = f(cl(xt @ W[1].T + h @ R[1].T + Wb[1] + Rb[1]))
                    if linear_before_reset:
                        ht = gg(cl(xt @ W[2].T + rt * (h @ R[2].T + Rb[2]) + Wb[2]))
                    else:
                        ht = gg(cl(xt @ W[2].T + (rt * h) @ R[2].T + Rb[2] + Wb[2]))
                    h = (1.0 - z) * ht + z * h
                else:
                    h = f(cl(xt @ W[0].T + h @ R[0].T + Wb[0] + Rb[0]))
                y[t, d, n] = h
            if lengths[n]:          # an empty sequence ends in zeros (ONNX Runtime's reading)
                y_h[d, n], y_c[d, n] = h, c
    if layout:
        return y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), \
            (y_c.transpose(1, 0, 2) if kind == "LSTM" else None)
    return y, y_h, (y_c if kind == "LSTM" else None)


# --- models -----------------------------------------------------------------------------

INPUT_NAMES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def make_case(kind, steps, batch, size, hidden, *, direction="forward", layout=0, bias=True,
              lengths=None, initial_h=False, initial_c=False, peepholes=False,
              run_time_states=True, outputs=("Y", "Y_h", "Y_c"), seed=0, opset=14, **attrs):
    """A one-node model: weights as initializers, X (and the initial states
    when ``run_time_states``) as graph inputs. Returns the model, its feed and
    the reference's arguments."""
    attrs = {k: v for k, v in attrs.items() if v is not None}
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[kind]
    arrays = {
        "X": rng.standard_normal((batch, steps, size) if layout else (steps, batch, size)),
        "W": rng.standard_normal((dirs, g * hidden, size)) * 0.5,
        "R": rng.standard_normal((dirs, g * hidden, hidden)) * 0.5,
    }
    if bias:
        arrays["B"] = rng.standard_normal((dirs, 2 * g * hidden)) * 0.5
    if lengths is not None:
        arrays["sequence_lens"] = np.asarray(lengths, np.int32)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    if initial_h:
        arrays["initial_h"] = rng.standard_normal(state)
    if initial_c:
        arrays["initial_c"] = rng.standard_normal(state)
    if peepholes:
        arrays["P"] = rng.standard_normal((dirs, 3 * hidden)) * 0.5
    arrays = {k: (v if v.dtype.kind == "i" else v.astype(np.float32)) for k, v in arrays.items()}
    used = INPUT_NAMES[:8 if kind == "LSTM" else 6]
    last = max(i for i, n in enumerate(used) if n in arrays)
    node_inputs = [n if n in arrays else "" for n in used[:last + 1]]
    run_time = {"X"} | ({"initial_h", "initial_c"} if run_time_states else set())
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(arrays[n].shape))
              for n in node_inputs if n in run_time and n in arrays]
    inits = [numpy_helper.from_array(arrays[n], n) for n in node_inputs
             if n and n not in run_time]
    names = ["Y", "Y_h", "Y_c"][:3 if kind == "LSTM" else 2]
    node_outputs = [n if n in outputs else "" for n in names]
    while node_outputs and not node_outputs[-1]:
        node_outputs.pop()
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(kind, node_inputs, node_outputs, name="the_cell", hidden_size=hidden,
                            direction=direction, **attrs)
    graph = helper.make_graph([node], "recurrent", inputs,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                               for n in node_outputs if n], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feed = {n: arrays[n] for n in node_inputs if n in run_time and n in arrays}
    ref_args = [arrays.get(n) for n in used]
    ref_kwargs = {"direction": direction, "layout": layout, "clip": attrs.get("clip"),
                  "activations": attrs.get("activations"),
                  "alphas": attrs.get("activation_alpha"), "betas": attrs.get("activation_beta"),
                  "input_forget": attrs.get("input_forget", 0),
                  "linear_before_reset": attrs.get("linear_before_reset", 0)}
    return model, feed, (ref_args, ref_kwargs)


def run(model, feed):
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))
    return converted.run(feed), converted


def check(kind, steps, batch, size, hidden, **options):
    model, feed, (args, kwargs) = make_case(kind, steps, batch, size, hidden, **options)
    got, converted = run(model, feed)
    want = dict(zip(("Y", "Y_h", "Y_c"), reference(kind, *args, **kwargs)))
    names = [o.name for o in model.graph.output]
    assert sorted(got) == sorted(names)
    for name in names:
        assert got[name].shape == want[name].shape, (name, got[name].shape, want[name].shape)
        # float32 against float64 over a recurrence: 1e-5 of the largest magnitude
        # (without FMA, numba's generic target, two directions of 129 sum to 3e-6 off)
        scale = max(1.0, float(np.abs(want[name]).max(initial=0.0)))
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5 * scale,
                                   err_msg=name)
    return converted


# --- against the reference --------------------------------------------------------------

CASES = [
    # kind, T, B, I, H, options
    ("LSTM", 4, 3, 5, 7, dict(initial_h=True, initial_c=True, peepholes=True)),
    ("LSTM", 1, 1, 5, 1, dict(direction="reverse", layout=1, initial_h=True)),
    ("LSTM", 7, 3, 17, 9, dict(direction="bidirectional", initial_h=True, initial_c=True,
                               run_time_states=False)),
    ("LSTM", 4, 3, 5, 3, dict(clip=0.6, peepholes=True, input_forget=1, initial_c=True)),
    ("LSTM", 4, 1, 5, 17, dict(direction="bidirectional", layout=1, peepholes=True,
                               activations=["HardSigmoid", "LeakyRelu", "ScaledTanh",
                                            "Sigmoid", "Affine", "Softsign"],
                               activation_alpha=[0.3, 0.2, 0.7, 0.9],
                               activation_beta=[0.6, 1.5, 0.1])),
    ("LSTM", 7, 3, 9, 9, dict(direction="bidirectional", initial_h=True, initial_c=True,
                              clip=0.7, activations=["Sigmoid", "Tanh", "Tanh",
                                                     "HardSigmoid", "Relu", "Softsign"])),
    ("LSTM", 4, 3, 5, 7, dict(bias=False, outputs=("Y_c",), initial_h=True)),
    ("LSTM", 7, 3, 5, 7, dict(outputs=("Y_h",), direction="reverse", clip=0.5)),
    ("GRU", 4, 3, 5, 17, dict(initial_h=True)),
    ("GRU", 4, 3, 17, 7, dict(direction="reverse", layout=1, clip=0.4, linear_before_reset=1,
                              initial_h=True)),
    ("GRU", 7, 1, 5, 3, dict(direction="bidirectional", bias=False, linear_before_reset=1,
                             activations=["Relu", "Tanh", "Sigmoid", "Elu"],
                             activation_alpha=[0.5])),
    ("GRU", 1, 3, 5, 1, dict(outputs=("Y",), direction="bidirectional", layout=1,
                             initial_h=True, run_time_states=False)),
    ("RNN", 7, 1, 17, 1, {}),
    ("RNN", 4, 3, 5, 9, dict(direction="bidirectional", layout=1, initial_h=True,
                             activations=["Relu", "Softplus"])),
    ("RNN", 4, 3, 5, 7, dict(direction="reverse", clip=0.3, initial_h=True,
                             run_time_states=False, activations=["LeakyRelu"],
                             activation_alpha=[0.2], outputs=("Y_h",))),
]


@pytest.mark.parametrize("kind, steps, batch, size, hidden, options", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_reference(kind, steps, batch, size, hidden, options):
    check(kind, steps, batch, size, hidden, **options)


@pytest.mark.parametrize("kind, layout, direction, lengths", [
    ("LSTM", 0, "bidirectional", [7, 3, 5]),
    ("GRU", 1, "reverse", [2, 7, 1]),
    ("RNN", 0, "forward", [4, 7, 6]),
    ("LSTM", 1, "reverse", [0, 5, 7]),
])
def test_sequence_lengths(kind, layout, direction, lengths):
    """Steps past a sequence's length write zeros and keep the state; the
    reverse direction starts at each sequence's own last step."""
    check(kind, 7, 3, 5, 7, layout=layout, direction=direction, lengths=lengths,
          initial_h=True, initial_c=kind == "LSTM")


def test_hidden_size_from_the_weights():
    """``hidden_size`` is optional: H is then W's rows over the gates."""
    model, feed, (args, kwargs) = make_case("GRU", 4, 3, 5, 7, direction="bidirectional")
    node = model.graph.node[0]
    node.attribute.remove(next(a for a in node.attribute if a.name == "hidden_size"))
    got, _ = run(model, feed)
    want = reference("GRU", *args, **kwargs)
    np.testing.assert_allclose(got["Y"], want[0], rtol=1e-5, atol=2e-6)


def test_full_sequence_lengths_add_nothing():
    with_lengths = check("LSTM", 4, 3, 5, 7, lengths=[4, 4, 4])
    without = check("LSTM", 4, 3, 5, 7)
    assert with_lengths.jitnn_ops == without.jitnn_ops


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_sizes_sweep(kind, direction, layout):
    for k, (steps, batch, size, hidden) in enumerate([(1, 1, 5, 1), (4, 3, 17, 3),
                                                      (7, 3, 5, 9), (4, 1, 17, 17)]):
        extra = {"linear_before_reset": k % 2} if kind == "GRU" else {}
        check(kind, steps, batch, size, hidden, direction=direction, layout=layout,
              bias=k != 1, initial_h=k % 2 == 1, initial_c=kind == "LSTM" and k >= 2,
              peepholes=kind == "LSTM" and k == 3, clip=0.8 if k == 2 else None, seed=k,
              **extra)


def test_two_lstms_in_a_row():
    """A bidirectional LSTM's Y, its directions joined per step (as Sequencer2D
    and speech models do: Transpose, Reshape), read by a second LSTM."""
    steps, batch, size, hidden, second = 5, 3, 9, 7, 3
    rng = np.random.default_rng(4)
    x = rng.standard_normal((steps, batch, size)).astype(np.float32)
    w1 = (rng.standard_normal((2, 4 * hidden, size)) * 0.5).astype(np.float32)
    r1 = (rng.standard_normal((2, 4 * hidden, hidden)) * 0.5).astype(np.float32)
    b1 = (rng.standard_normal((2, 8 * hidden)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((1, 4 * second, 2 * hidden)) * 0.5).astype(np.float32)
    r2 = (rng.standard_normal((1, 4 * second, second)) * 0.5).astype(np.float32)
    shape = np.array([steps, batch, 2 * hidden], np.int64)
    nodes = [
        helper.make_node("LSTM", ["X", "W1", "R1", "B1"], ["Y1"], hidden_size=hidden,
                         direction="bidirectional"),
        helper.make_node("Transpose", ["Y1"], ["Yt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["Yt", "shape"], ["X2"]),
        helper.make_node("LSTM", ["X2", "W2", "R2"], ["Y2", "Y2_h"], hidden_size=second),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w1, "W1"), (r1, "R1"), (b1, "B1"), (w2, "W2"), (r2, "R2"), (shape, "shape"))]
    graph = helper.make_graph(
        nodes, "two_lstms", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y2", "Y2_h")],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    got, _ = run(model, {"X": x})
    y1 = reference("LSTM", x, w1, r1, b1, direction="bidirectional")[0]
    x2 = y1.transpose(0, 2, 1, 3).reshape(steps, batch, 2 * hidden)
    y2, y2_h, _ = reference("LSTM", x2, w2, r2)
    np.testing.assert_allclose(got["Y2"], y2, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(got["Y2_h"], y2_h, rtol=1e-5, atol=2e-6)


def _plan_steps(converted, feed) -> list[str]:
    plan = jitnn.explain(next(iter(converted.dispatch(feed).values())))
    assert " 0 reorder(s) planned" in plan, plan
    return [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan, re.M)]


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_one_projection_then_one_product_a_step(kind, direction):
    """The input projection of all steps and directions is one gemm; each
    step adds one recurrent product for both directions (GRU: two, the reset
    gate's apart), no layout conversion anywhere."""
    steps = 4
    model, feed, _ = make_case(kind, steps, 3, 5, 7, initial_h=True, outputs=("Y_h",),
                               direction=direction)
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))
    steps_run = _plan_steps(converted, feed)
    products = sum(1 for label in steps_run if label.startswith(("gemm", "matmul")))
    assert products == 1 + steps * (2 if kind == "GRU" else 1), steps_run


@pytest.mark.parametrize("kind, direction, options, per_step", [
    ("LSTM", "forward", dict(peepholes=True, clip=0.5), 2),
    ("LSTM", "bidirectional", dict(initial_c=True, layout=1), 2),
    ("GRU", "reverse", dict(linear_before_reset=1), 2),
    ("GRU", "bidirectional", dict(linear_before_reset=1, layout=1), 2),
    ("GRU", "bidirectional", {}, 4),
])
def test_a_step_is_its_products_and_one_fused_cell(kind, direction, options, per_step):
    """With the default activations a step runs as its recurrent gemm (both
    directions in one) and one fused cell launch (GRU with linear_before_reset
    0: gemm, gru_reset, gemm, gru_cell): one step more adds that many launches."""
    counts = []
    for steps in (4, 5):
        model, feed, (args, kwargs) = make_case(kind, steps, 3, 5, 7, initial_h=True,
                                                direction=direction, **options)
        got, converted = run(model, feed)
        want = reference(kind, *args, **kwargs)
        np.testing.assert_allclose(got["Y"], want[0], rtol=1e-5, atol=2e-6)
        labels = _plan_steps(converted, feed)
        cells = [label for label in labels if label in ("lstm_cell", "gru_cell")]
        assert len(cells) == steps, labels
        counts.append(len(labels))
    assert counts[1] - counts[0] == per_step, counts


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_constant_zero_initial_states_are_no_state(kind):
    """Initial states of zeros given as initializers (as exporters write an
    omitted h0): the first step has no product, and the numbers are those of
    no initial state."""
    steps = 4
    model, feed, (args, kwargs) = make_case(kind, steps, 3, 5, 7, direction="bidirectional",
                                            initial_h=True, initial_c=kind == "LSTM",
                                            run_time_states=False)
    for init in model.graph.initializer:
        if init.name.startswith("initial_"):
            init.CopyFrom(numpy_helper.from_array(
                np.zeros(tuple(init.dims), np.float32), init.name))
    args = [None if k in (5, 6) else a for k, a in enumerate(args)]
    got, converted = run(model, feed)
    want = reference(kind, *args, **kwargs)
    for name, value in zip(("Y", "Y_h", "Y_c"), want):
        if value is not None:
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=2e-6, err_msg=name)
    labels = _plan_steps(converted, feed)
    products = sum(1 for label in labels if label.startswith("gemm"))
    assert products == 1 + (steps - 1) * (1 if kind == "LSTM" else 2), labels
    assert "concat" not in labels[:2], labels


def test_what_the_fused_cell_does_not_cover_runs_element_wise():
    """Other activations, sequence lengths and two directions of H > 128 keep
    the element-wise lowering (and its numbers)."""
    for kind, hidden, options in [
            ("LSTM", 7, dict(activations=["Sigmoid", "Tanh", "Relu"])),
            ("GRU", 7, dict(lengths=[4, 2, 3])),
            ("LSTM", 129, dict(direction="bidirectional"))]:
        converted = check(kind, 4, 3, 5, hidden, initial_h=True, **options)
        model, feed, _ = make_case(kind, 4, 3, 5, hidden, initial_h=True, **options)
        labels = _plan_steps(converted, feed)
        assert not any(label in ("lstm_cell", "gru_cell") for label in labels), labels


# --- refused ----------------------------------------------------------------------------

def _refusal(kind="LSTM", error=jitnn.JitnnError, **changes):
    model, feed, _ = make_case(kind, 4, 3, 5, 7)
    node = model.graph.node[0]
    for name, value in changes.items():
        if name in ("W", "R", "B"):
            init = next(t for t in model.graph.initializer if t.name == name)
            init.CopyFrom(numpy_helper.from_array(value, name))
        else:
            attr = next((a for a in node.attribute if a.name == name), None)
            if attr is not None:
                node.attribute.remove(attr)
            node.attribute.append(helper.make_attribute(name, value))
    with pytest.raises(error) as caught:
        jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))
    return str(caught.value)


def test_wrong_weight_shapes_are_refused():
    message = _refusal(W=np.zeros((1, 27, 5), np.float32))
    assert "LSTM" in message and "W has shape (1, 27, 5)" in message
    message = _refusal(hidden_size=6)
    assert "LSTM" in message and "hidden_size" in message
    message = _refusal("GRU", R=np.zeros((1, 21, 5), np.float32))
    assert "GRU" in message and "R (the recurrence weights) has shape (1, 21, 5)" in message
    message = _refusal("RNN", B=np.zeros((1, 7), np.float32))
    assert "RNN" in message and "expected (1, 14)" in message
    message = _refusal("GRU", error=jitnn.onnx.UnsupportedError,
                       W=np.zeros((1, 21, 5), np.float64))
    assert "GRU" in message and "W (the input weights) is float64" in message


def test_bad_attributes_are_refused():
    assert "direction 'sideways'" in _refusal(direction="sideways")
    assert "expected 3" in _refusal(activations=["Sigmoid", "Tanh"])
    message = _refusal(error=jitnn.onnx.UnsupportedError, activations=["Sigmoid", "Gelu", "Tanh"])
    assert "activation 'Gelu'" in message


def test_run_time_weights_are_refused_at_load():
    model, feed, _ = make_case("RNN", 4, 3, 5, 7)
    w = next(t for t in model.graph.initializer if t.name == "W")
    model.graph.initializer.remove(w)
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [1, 7, 5]))
    with pytest.raises(jitnn.onnx.LoadTimeValueError, match="RNN .*W .*must be known"):
        jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))


def test_bad_sequence_lengths_are_refused():
    model, feed, _ = make_case("GRU", 4, 3, 5, 7, lengths=[4, 5, 1])
    with pytest.raises(jitnn.JitnnValueError, match=r"GRU.*sequence_lens \[4, 5, 1\]"):
        jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))
