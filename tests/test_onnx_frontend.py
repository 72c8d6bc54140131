"""The ONNX frontend's API (load, prepare, run, errors, the optional import)
and the ops it added (lrn, gather, slice) against their numpy references."""

import subprocess
import sys

import numpy as np
import pytest

import jitnn
from jitnn.ops.gather import gather_reference
from jitnn.ops.lrn import lrn_reference
from jitnn.ops.slice import slice_reference


def test_import_jitnn_does_not_import_onnx():
    code = "import sys, jitnn; assert 'onnx' not in sys.modules, 'onnx imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_onnx_gives_a_clear_error_for_the_backend():
    # models load without onnx (tests/test_onnx_proto.py); ONNX's test-runner API needs it
    code = ("import sys; sys.modules['onnx'] = None\n"
            "try:\n    import jitnn.onnx.backend\n"
            "except ImportError as e:\n    assert 'pip install onnx' in str(e), e\n"
            "else:\n    raise SystemExit('no error')\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn_matches_reference(size):
    x = np.random.default_rng(size).standard_normal((2, 11, 3, 4)).astype(np.float32)
    got = jitnn.lrn(jitnn.tensor(x), size, alpha=0.02, beta=0.6, bias=2.0).numpy()
    np.testing.assert_allclose(got, lrn_reference(x, size, alpha=0.02, beta=0.6, bias=2.0),
                               rtol=1e-5, atol=1e-6)


def test_lrn_on_blocked_input():
    x = np.random.default_rng(0).standard_normal((1, 13, 5, 5)).astype(np.float32)
    blocked = jitnn.reorder(jitnn.tensor(x), f"nChw{jitnn.default_context().block}c")
    np.testing.assert_allclose(jitnn.lrn(blocked, 3).numpy(), lrn_reference(x, 3), rtol=1e-5)


def test_gather_and_slice_match_references():
    x = np.arange(2 * 5 * 3 * 4, dtype=np.float32).reshape(2, 5, 3, 4)
    index = np.array([[4, -1], [0, 2]])
    np.testing.assert_array_equal(jitnn.gather(x, index, 1).numpy(), gather_reference(x, index, 1))
    got = jitnn.slice(x, [0, 1, 0, 1], [2, 2, 3, 2], strides=[1, 2, 1, 2]).numpy()
    np.testing.assert_array_equal(got, slice_reference(x, [0, 1, 0, 1], [2, 2, 3, 2],
                                                       [1, 2, 1, 2]))


def test_gather_and_slice_errors_name_the_op():
    x = jitnn.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(jitnn.JitnnValueError, match="gather: indices must be in"):
        jitnn.gather(x, np.array([3]), 1)
    with pytest.raises(jitnn.JitnnValueError, match="slice: axis 1"):
        jitnn.slice(x, [0, 2], [1, 2])


def test_graph_builder_has_the_new_ops():
    b = jitnn.GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    y = b.slice(b.gather(b.lrn(x, 3), np.array([0, 2, 4]), 1), [0, 0, 0, 0], [1, 3, 2, 2])
    assert y.shape == (1, 3, 2, 2)


# --- the frontend -------------------------------------------------------------

onnx = pytest.importorskip("onnx", reason="the ONNX tests need onnx (in the test extra: pip install -e \".[test]\")")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn.onnx  # noqa: E402


def _small_model(opset=17, batch="N"):
    """conv -> bn -> relu -> global pool -> flatten -> gemm, with the shape
    arithmetic exporters emit (Shape -> Gather -> Unsqueeze -> Concat -> Reshape)."""
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.2,
        "b": rng.standard_normal(16).astype(np.float32),
        "scale": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "bias": rng.standard_normal(16).astype(np.float32),
        "mean": rng.standard_normal(16).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "fc_w": rng.standard_normal((10, 16)).astype(np.float32),
        "fc_b": rng.standard_normal(10).astype(np.float32),
        "zero": np.array(0, np.int64), "minus1": np.array([-1], np.int64),
        "axes0": np.array([0], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n0"], axis=0),
        helper.make_node("Unsqueeze", ["n0", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["p", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), inits


def _reference(x, p):
    from jitnn.ops.conv2d import conv2d_reference
    c = conv2d_reference(x, p["w"], p["b"], strides=2, padding=1)
    n = (c - p["mean"][:, None, None]) / np.sqrt(p["var"][:, None, None] + 1e-5) \
        * p["scale"][:, None, None] + p["bias"][:, None, None]
    f = np.maximum(n, 0).mean(axis=(2, 3))
    return f @ p["fc_w"].T + p["fc_b"]


def test_load_returns_a_graph_that_dispatches():
    model, params = _small_model()
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(model, ctx, input_shapes={"x": (2, 3, 9, 9)})
    assert isinstance(graph, jitnn.Graph)
    assert graph.inputs == {"x": (2, 3, 9, 9)} and graph.outputs == {"y": (2, 10)}
    x = np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)
    y = ctx.dispatch(graph, {"x": x})["y"].numpy()
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)
    # the shape arithmetic was folded: no shape op in the graph
    assert "gather" not in repr(graph) and "concat" not in repr(graph)


def test_filters_are_packed_once_per_graph():
    model, _ = _small_model()
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(model, ctx)            # dynamic batch defaults to 1
    x = np.ones((1, 3, 9, 9), np.float32)
    ctx.dispatch(graph, {"x": x})["y"].numpy()
    packs = ctx.stats.filter_packs
    for _ in range(3):
        ctx.dispatch(graph, {"x": x})["y"].numpy()
    assert ctx.stats.filter_packs == packs


def test_run_replays_the_recorded_program():
    # run() computes into arrays of its own: from the second call on, the
    # recorded program replays, and each call answers its own input
    model, params = _small_model()
    ctx = jitnn.Context()
    prepared = jitnn.onnx.prepare(model, ctx, input_shapes={"x": (3, 3, 9, 9)})
    rng = np.random.default_rng(5)
    results = []
    for call in range(3):
        x = rng.standard_normal((3, 3, 9, 9)).astype(np.float32)
        y = prepared.run({"x": x})["y"]
        np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)
        results.append(y)
        # a compute keeps its graph's program (the lazy path records none)
        assert len(prepared.graph._programs) == 1
    assert ctx.stats.plans_reused == 2
    assert not np.shares_memory(results[1], results[2])


def test_a_model_file_is_read_with_its_weights_in_memory_once(tmp_path):
    # the initializers' raw_data goes from the file straight into the arrays that the
    # graph keeps as its constants: not in the ModelProto, and not copied again
    from onnx import numpy_helper

    from jitnn.onnx import _model_and_weights, _prepare
    from jitnn.onnx._proto import to_array
    model, params = _small_model()
    path = tmp_path / "small.onnx"
    path.write_bytes(model.SerializeToString())
    for source in (str(path), path.read_bytes()):
        proto, _, weights = _model_and_weights(source)
        read = {t.name: w for t, w in zip(proto.graph.initializer, weights)}
        for tensor in model.graph.initializer:
            expected = numpy_helper.to_array(tensor)
            if expected.nbytes >= 256:
                assert read[tensor.name] is not None, tensor.name
            got = read[tensor.name] if read[tensor.name] is not None else to_array(
                next(t for t in proto.graph.initializer if t.name == tensor.name))
            assert got.dtype == expected.dtype and np.array_equal(got, expected), tensor.name
        assert not any(t.raw_data for t, w in zip(proto.graph.initializer, weights)
                       if w is not None)
        ctx = jitnn.Context()
        graph = _prepare(proto, None, ctx, input_shapes={"x": (2, 3, 9, 9)}, constants=None,
                         batch=1, weights=weights).graph
        kept = [t._v._data for t in graph._constants.values()]
        assert any(data is read["w"] for data in kept)       # the conv filter, not a copy
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 9)).astype(np.float32)
    y = jitnn.onnx.run(str(path), {"x": x})["y"]
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)


def test_a_loaded_models_weights_are_kept_packed_only_once_run(tmp_path):
    # a Conv's filter and a MatMul's weight, read from the file into the graph's
    # arrays, let the plain copy go once packed; their numbers come back unpacked
    from onnx import numpy_helper
    rng = np.random.default_rng(4)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    m = rng.standard_normal((96, 80)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["a", "m"], ["z"])]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "packed", [info("x", TensorProto.FLOAT, [1, 8, 9, 9]),
                          info("a", TensorProto.FLOAT, [70, 96])],
        [info("y", TensorProto.FLOAT, [1, 16, 9, 9]), info("z", TensorProto.FLOAT, [70, 80])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(m, "m")])
    path = tmp_path / "packed.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    ctx = jitnn.Context()
    loaded = jitnn.onnx.load(str(path), ctx)
    feed = {"x": rng.standard_normal((1, 8, 9, 9)).astype(np.float32),
            "a": rng.standard_normal((70, 96)).astype(np.float32)}
    out = {"y": np.empty((1, 16, 9, 9), np.float32), "z": np.empty((70, 80), np.float32)}
    for _ in range(2):
        ctx.compute(loaded, feed, out)
    from jitnn.ops.conv2d import conv2d_reference
    np.testing.assert_allclose(out["y"], conv2d_reference(feed["x"], w, padding=1),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["z"], feed["a"].astype(np.float64) @ m, rtol=1e-4, atol=1e-3)
    for name, values in (("w", w), ("m", m)):
        kept = next(t._v for t in loaded._constants.values() if t.shape == values.shape)
        assert kept._data.strides == (0,) * kept.ndim, name
        np.testing.assert_array_equal(kept._materialize(), values)
    # and nothing holds the file's arrays once loading returns, not even a
    # reference cycle waiting for the collector (the converter and its table of
    # ONNX values, every initializer in it: ResNet-50's peak memory 194 -> 284 MB)
    import gc
    from jitnn.onnx._common import Const
    gc.collect()
    gc.disable()
    try:
        again = jitnn.onnx.load(str(path), ctx)
        ctx.compute(again, feed, out)
        # (type(), not isinstance: a dead weak proxy among the objects raises on the latter)
        held = [o for o in gc.get_objects() if type(o) is Const and o.name in ("w", "m")]
    finally:
        gc.enable()
    assert not held


def test_run_and_opset_7():
    model, params = _small_model(opset=7)
    # opset 7 Unsqueeze takes axes as an attribute
    for node in model.graph.node:
        if node.op_type == "Unsqueeze":
            del node.input[1]
            node.attribute.append(helper.make_attribute("axes", [0]))
    x = np.random.default_rng(2).standard_normal((3, 3, 9, 9)).astype(np.float32)
    y = jitnn.onnx.run(model, {"x": x})["y"]
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)


def test_unknown_op_names_op_node_and_opset():
    node = helper.make_node("Det", ["x"], ["y"], name="the_det")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(jitnn.onnx.UnsupportedError, match=r"Det \(node 'the_det', opset 13\): "
                       r"the op Det is not supported"):
        jitnn.onnx.load(model)


def test_float64_model_is_rejected_clearly():
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.DOUBLE, [2])], [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(jitnn.onnx.UnsupportedError, match="float64: jitnn computes in float32"):
        jitnn.onnx.load(model)


def test_backend_runs_a_model():
    from jitnn.onnx import backend
    model, params = _small_model()
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    x = np.random.default_rng(3).standard_normal((1, 3, 9, 9)).astype(np.float32)
    (y,) = backend.run_model(model, [x])
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)
    node = helper.make_node("HardSigmoid", ["a"], ["b"], alpha=0.3, beta=0.4)
    (out,) = backend.run_node(node, [np.linspace(-5, 5, 11, dtype=np.float32)])
    np.testing.assert_allclose(out, np.clip(np.linspace(-5, 5, 11) * 0.3 + 0.4, 0, 1), rtol=1e-6)


# --- run-time integer and bool inputs -------------------------------------------

def _attention_inputs(seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 50, (1, 7)).astype(np.int64)
    mask = np.ones((1, 7), np.int64)
    mask[0, rng.integers(3, 7):] = 0                  # padding at the end
    return {"input_ids": ids, "attention_mask": mask}


def _check_attention(got, model, feed):
    from tests.onnx_models import evaluate
    want = evaluate(model, feed)
    logits, prediction = (o.name for o in model.graph.output)
    assert got[logits].dtype == np.float32 and got[prediction].dtype == np.int64
    np.testing.assert_allclose(got[logits], want[logits], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[prediction], want[prediction])


def test_integer_inputs_run_at_run_time():
    from tests.onnx_models import masked_attention_block
    model = masked_attention_block()
    prepared = jitnn.onnx.prepare(model, jitnn.Context())
    assert prepared.inputs == {"input_ids": (1, 7), "attention_mask": (1, 7)}
    assert prepared.input_dtypes == {"input_ids": np.int64, "attention_mask": np.int64}
    first, second = _attention_inputs(1), _attention_inputs(2)
    assert not np.array_equal(first["input_ids"], second["input_ids"])
    for feed in (first, second, first):               # one conversion, different values
        _check_attention(prepared.run(feed), model, feed)
    # the graph itself takes integer arrays (int32 data converts by value)
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(model, ctx)
    assert graph.input_dtypes == {"input_ids": np.int64, "attention_mask": np.int64}
    logits, prediction = (o.name for o in model.graph.output)
    outputs = {logits: np.empty(graph.outputs[logits], np.float32),
               prediction: np.empty(graph.outputs[prediction], np.int64)}
    feed = {name: a.astype(np.int32) for name, a in second.items()}
    ctx.compute(graph, feed, outputs)
    _check_attention(outputs, model, second)


def test_constants_still_fold_an_integer_input_at_load_time():
    from tests.onnx_models import masked_attention_block
    model = masked_attention_block()
    feed = _attention_inputs(3)
    prepared = jitnn.onnx.prepare(model, constants={"attention_mask": feed["attention_mask"]})
    assert list(prepared.inputs) == ["input_ids"]
    _check_attention(prepared.run({"input_ids": feed["input_ids"]}), model, feed)
    with pytest.raises(jitnn.JitnnTypeError, match="fixed when the model was prepared"):
        prepared.run(feed)


def _model(nodes, inputs, outputs, initializers=None, opset=17):
    """A model from nodes, ``{name: (ONNX type, shape)}`` inputs and outputs."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        initializer=[numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_bool_input_and_outputs():
    nodes = [helper.make_node("Where", ["keep", "x", "zero"], ["kept"]),
             helper.make_node("Not", ["keep"], ["dropped"]),
             helper.make_node("Greater", ["x", "zero"], ["positive"])]
    model = _model(nodes, {"keep": (TensorProto.BOOL, [2, 5]), "x": (TensorProto.FLOAT, [2, 5])},
                   {"kept": (TensorProto.FLOAT, [2, 5]), "dropped": (TensorProto.BOOL, [2, 5]),
                    "positive": (TensorProto.BOOL, [2, 5])},
                   {"zero": np.zeros((), np.float32)})
    prepared = jitnn.onnx.prepare(model)
    assert prepared.input_dtypes["keep"] == np.bool_
    assert prepared.graph.input_dtypes["keep"] == np.uint8    # bools as uint8 0/1
    rng = np.random.default_rng(0)
    for seed in (1, 2):
        keep = np.random.default_rng(seed).random((2, 5)) > 0.5
        x = rng.standard_normal((2, 5)).astype(np.float32)
        got = prepared.run({"keep": keep, "x": x})
        np.testing.assert_array_equal(got["kept"], np.where(keep, x, 0))
        assert got["dropped"].dtype == np.bool_ and got["positive"].dtype == np.bool_
        np.testing.assert_array_equal(got["dropped"], ~keep)
        np.testing.assert_array_equal(got["positive"], x > 0)
    # jitnn.onnx.run takes the bools too
    got = jitnn.onnx.run(model, {"keep": keep, "x": x})
    np.testing.assert_array_equal(got["dropped"], ~keep)


def test_integer_arithmetic_and_cast_at_run_time():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Mul", ["s", "three"], ["t"]),
             helper.make_node("Cast", ["x"], ["truncated"], to=TensorProto.INT32),
             helper.make_node("Cast", ["a"], ["a_float"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["nonzero"], to=TensorProto.BOOL),
             helper.make_node("Mod", ["a", "b"], ["m"])]
    model = _model(nodes, {"a": (TensorProto.INT64, [3, 4]), "b": (TensorProto.INT64, [4]),
                           "x": (TensorProto.FLOAT, [3, 4])},
                   {"t": (TensorProto.INT64, [3, 4]), "truncated": (TensorProto.INT32, [3, 4]),
                    "a_float": (TensorProto.FLOAT, [3, 4]),
                    "nonzero": (TensorProto.BOOL, [3, 4]), "m": (TensorProto.INT64, [3, 4])},
                   {"three": np.array(3, np.int64)})
    prepared = jitnn.onnx.prepare(model)
    rng = np.random.default_rng(4)
    for _ in range(2):
        a = rng.integers(-2 ** 40, 2 ** 40, (3, 4))       # beyond float32's exact integers
        b = rng.integers(-9, 10, 4)
        b[b == 0] = 5
        x = (rng.standard_normal((3, 4)) * 4).astype(np.float32)
        x[0, 0] = 0.0
        got = prepared.run({"a": a, "b": b, "x": x})
        assert got["t"].dtype == np.int64
        np.testing.assert_array_equal(got["t"], (a + b) * 3)
        assert got["truncated"].dtype == np.int32
        np.testing.assert_array_equal(got["truncated"], np.trunc(x).astype(np.int32))
        np.testing.assert_array_equal(got["a_float"], a.astype(np.float32))
        np.testing.assert_array_equal(got["nonzero"], x != 0)
        np.testing.assert_array_equal(got["m"], np.mod(a, b))   # ONNX's fmod=0: Python's %


def test_gather_with_run_time_indices_clamps_out_of_range():
    # ONNX leaves an out-of-range index undefined: jitnn clamps it (never reads outside)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)]
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    model = _model(nodes, {"ids": (TensorProto.INT64, [5])},
                   {"rows": (TensorProto.FLOAT, [5, 3])}, {"table": table})
    got = jitnn.onnx.run(model, {"ids": np.array([0, 3, -1, 7, -9])})["rows"]
    np.testing.assert_array_equal(got, table[[0, 3, 3, 3, 0]])


def test_float_data_for_an_integer_input_is_refused():
    from tests.onnx_models import masked_attention_block
    prepared = jitnn.onnx.prepare(masked_attention_block())
    feed = _attention_inputs(5)
    feed["input_ids"] = feed["input_ids"].astype(np.float32)
    with pytest.raises(jitnn.JitnnTypeError, match="'input_ids' is int64, got float32 data"):
        prepared.run(feed)
    with pytest.raises(jitnn.JitnnTypeError, match="input_ids"):
        prepared.dispatch(feed)


def test_float16_input_and_cast_are_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": (TensorProto.FLOAT16, [2])},
                   {"y": (TensorProto.FLOAT16, [2])})
    with pytest.raises(jitnn.onnx.UnsupportedError, match="input 'x' is float16: jitnn computes"):
        jitnn.onnx.prepare(model)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16, name="c")],
                   {"x": (TensorProto.FLOAT, [2])}, {"y": (TensorProto.FLOAT16, [2])})
    with pytest.raises(jitnn.onnx.UnsupportedError, match=r"Cast \(node 'c'.*to float16"):
        jitnn.onnx.prepare(model)


def test_a_value_needed_at_load_time_is_named_and_folded_by_run():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    model = _model(nodes, {"x": (TensorProto.FLOAT, [2, 6]), "shape": (TensorProto.INT64, [2])},
                   {"y": (TensorProto.FLOAT, None)})
    with pytest.raises(jitnn.onnx.LoadTimeValueError, match="constants=") as error:
        jitnn.onnx.prepare(model)
    assert error.value.names == ("shape",)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    got = jitnn.onnx.run(model, {"x": x, "shape": np.array([3, -1])})["y"]
    np.testing.assert_array_equal(got, x.reshape(3, 4))
    prepared = jitnn.onnx.prepare(model, constants={"shape": np.array([4, 3])})
    np.testing.assert_array_equal(prepared.run({"x": x})["y"], x.reshape(4, 3))
    from jitnn.onnx import backend
    rep = backend.prepare(model)
    for shape in ([3, 4], [6, 2], [3, 4]):          # a conversion per value of the shape
        (y,) = rep.run([x, np.array(shape)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(rep._converted) == 2


# --- Resize ---------------------------------------------------------------------

def _resize_model(x_shape, attrs, scales=None, sizes=None, opset=19):
    inits = {"roi": np.zeros(0, np.float32)}
    names = ["x", "roi", "", ""]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        names[2] = "scales"
    if sizes is not None:
        inits["sizes"] = np.array(sizes, np.int64)
        names[3] = "sizes"
    node = helper.make_node("Resize", names, ["y"], **attrs)
    return _model([node], {"x": (TensorProto.FLOAT, list(x_shape))},
                  {"y": (TensorProto.FLOAT, None)}, inits, opset)


@pytest.mark.parametrize("attrs, scales, sizes, kernel", [
    ({"mode": "linear"}, None, [1, 5, 9, 11], "resample2d"),
    ({"mode": "nearest"}, [1, 1, 2, 3], None, "resample2d"),
    ({"mode": "nearest"}, None, [1, 5, 7, 3], "resample2d"),      # sizes: 9 -> 3
    ({"mode": "linear"}, [1, 1, 1, 1 / 3], None, "gather"),       # 9 / 3 is not 3 in float32
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None,
     [1, 5, 4, 3], "resample2d"),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "floor"}, [1, 1, 2.5, 1.5], None, "gather"),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None,
     [1, 5, 8, 3], "gather"),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, [1, 1, 0.6, 1.8], None,
     "gather"),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.34], None, "gather"),
])
def test_resize_matches_onnx_reference(attrs, scales, sizes, kernel):
    from onnx.reference import ReferenceEvaluator
    model = _resize_model((1, 5, 7, 9), attrs, scales, sizes)
    x = np.random.default_rng(0).standard_normal((1, 5, 7, 9)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    prepared = jitnn.onnx.prepare(model)
    np.testing.assert_allclose(prepared.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
    assert kernel in repr(prepared.graph)


def test_resize_refuses_a_run_time_scale_and_an_integer_input():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up")
    model = _model([node], {"x": (TensorProto.FLOAT, [1, 1, 2, 2]),
                            "scales": (TensorProto.FLOAT, [4])}, {"y": (TensorProto.FLOAT, None)})
    with pytest.raises(jitnn.onnx.LoadTimeValueError, match=r"Resize \(node 'up'.*the scales"):
        jitnn.onnx.prepare(model)
    model = _resize_model((1, 1, 2, 2), {}, [1, 1, 2, 2])
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    with pytest.raises(jitnn.onnx.UnsupportedError, match="int32 input"):
        jitnn.onnx.prepare(model)


# --- reductions: axes as an attribute (before opset 18) or an input -------------

_REDUCE = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max,
           "ReduceProd": np.prod, "ReduceL2": lambda x, **k: np.sqrt(np.sum(x * x, **k)),
           "ReduceLogSumExp": lambda x, **k: np.log(np.sum(np.exp(x), **k))}


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("op", sorted(_REDUCE))
def test_reductions_take_axes_as_the_opset_says(op, opset):
    x = np.random.default_rng(0).uniform(0.5, 1.5, (2, 3, 5)).astype(np.float32)
    as_input = opset >= 18 or op == "ReduceSum"
    for axes, keepdims in (([1], 1), ([0, -1], 0), (None, 1)):
        inits = {"axes": np.array(axes, np.int64)} if as_input and axes else {}
        names = ["x", "axes"] if inits else ["x"]
        attrs = {"keepdims": keepdims}
        if axes and not as_input:
            attrs["axes"] = axes
        node = helper.make_node(op, names, ["y"], **attrs)
        model = _model([node], {"x": (TensorProto.FLOAT, [2, 3, 5])},
                       {"y": (TensorProto.FLOAT, None)}, inits, opset)
        want = _REDUCE[op](x.astype(np.float64), axis=None if axes is None else tuple(axes),
                           keepdims=bool(keepdims))
        np.testing.assert_allclose(jitnn.onnx.run(model, {"x": x})["y"], want, rtol=1e-5)


def test_noop_with_empty_axes_reduces_nothing():
    node = helper.make_node("ReduceSumSquare", ["x"], ["y"], noop_with_empty_axes=1)
    model = _model([node], {"x": (TensorProto.FLOAT, [2, 3])}, {"y": (TensorProto.FLOAT, None)},
                   opset=18)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(jitnn.onnx.run(model, {"x": x})["y"], x * x, rtol=1e-6)


def test_explain_model_gives_integer_inputs_valid_values():
    from tests.onnx_models import masked_attention_block
    text = jitnn.onnx.explain_model(masked_attention_block(), runs=1)
    assert "input_ids" in text and "output" in text


@pytest.mark.parametrize("size,dilation,pads", [
    (5, 6, 6),          # only the centre tap reads input: a 1x1 conv
    (5, 3, 3),          # every tap reads input somewhere: unchanged
    (4, 3, (0, 6)),     # the last row and column of taps read padding only
    (5, 2, 0)])
def test_conv_taps_that_read_only_padding_are_dropped(size, dilation, pads):
    from jitnn.onnx._common import Const
    from jitnn.onnx._convert import _without_dead_taps
    from jitnn.ops.conv2d import conv2d_reference
    from tests.helpers import random
    begin, end = (pads, pads) if isinstance(pads, int) else pads
    w = random((6, 5, 3, 3), 30)
    x = random((2, 5, size, size), 31)
    b = random((6,), 32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], dilations=[dilation, dilation],
                              pads=[begin, begin, end, end])]
    out = (size + begin + end - 2 * dilation - 1) + 1
    model = _model(nodes, {"x": (TensorProto.FLOAT, list(x.shape))},
                   {"y": (TensorProto.FLOAT, [2, 6, out, out])}, {"w": w, "b": b})
    graph = jitnn.onnx.load(model)
    got = jitnn.default_context().dispatch(graph, {"x": x})["y"].numpy()
    want = conv2d_reference(x.astype(np.float64), w, b, dilations=dilation,
                            padding=(begin, end, begin, end))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    pruned, new_pads = _without_dead_taps(Const(w), [size, size], [1, 1], [dilation] * 2,
                                          [(begin, end)] * 2)
    expected = {(5, 6): (1, 1), (5, 3): (3, 3), (4, 3): (2, 2), (5, 2): (3, 3)}
    assert pruned.array.shape[2:] == expected[(size, dilation)]


def test_where_of_one_condition_and_the_same_constants_is_made_once():
    """Each BERT layer turns the one padding mask into its additive mask,
    Where(mask, 0, -inf) with constants of its own: the same constants and
    condition give the first one's result (one where step); other constants
    or another condition are a where of their own."""
    consts = {"zero_a": np.array(0, np.float32), "zero_b": np.array(0, np.float32),
              "low_a": np.array(-np.inf, np.float32), "low_b": np.array(-np.inf, np.float32),
              "one": np.array(1, np.float32)}
    nodes = [helper.make_node("Where", ["keep", "zero_a", "low_a"], ["m1"]),
             helper.make_node("Where", ["keep", "zero_b", "low_b"], ["m2"]),
             helper.make_node("Where", ["keep", "one", "low_b"], ["m3"]),
             helper.make_node("Where", ["other", "zero_b", "low_b"], ["m4"]),
             helper.make_node("Add", ["x", "m1"], ["a1"]),
             helper.make_node("Add", ["a1", "m2"], ["a2"]),
             helper.make_node("Add", ["a2", "m3"], ["a3"]),
             helper.make_node("Add", ["a3", "m4"], ["y"])]
    model = _model(nodes, {"x": (TensorProto.FLOAT, [2, 5]), "keep": (TensorProto.BOOL, [2, 5]),
                           "other": (TensorProto.BOOL, [2, 5])},
                   {"y": (TensorProto.FLOAT, [2, 5])}, consts)
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((2, 5)).astype(np.float32),
            "keep": rng.random((2, 5)) < 0.7, "other": rng.random((2, 5)) < 0.7}
    graph = jitnn.onnx.load(model)
    y = jitnn.default_context().dispatch(graph, feed)["y"]
    assert jitnn.explain(y).count(" where ") == 3, jitnn.explain(y)
    k, o = feed["keep"], feed["other"]
    want = (feed["x"].astype(np.float64) + 2 * np.where(k, 0.0, -np.inf)
            + np.where(k, 1.0, -np.inf) + np.where(o, 0.0, -np.inf))
    np.testing.assert_array_equal(y.numpy(), want.astype(np.float32))


@pytest.mark.parametrize("kernel, pads, batch, c, o", [(1, 0, 1, 1025, 1024),
                                                      (3, 1, 2, 1025, 1024),
                                                      (1, 0, 3, 17, 9)])
def test_a_conv_of_a_pooled_1x1_map_runs_as_a_product(kernel, pads, batch, c, o):
    """A mobile net's head: global pool, a 1x1 conv (or a 3x3 whose only live
    tap is the centre) of the 1 x 1 map with bias, HardSwish: converted to a
    matmul with the bias and activation in its epilogue (no conv2d step) when
    the filter has a million weights or more (a small one, as in a
    squeeze-and-excitation block, stays a conv); the numbers ONNX Runtime's."""
    ort = pytest.importorskip("onnxruntime", reason="compared with ONNX Runtime, a peer of the "
                              "bench extra (pip install -e \".[bench]\")")
    rng = np.random.default_rng(12)
    w = numpy_helper.from_array((rng.standard_normal((o, c, kernel, kernel)) * 0.3)
                                .astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(o).astype(np.float32), "b")
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
             helper.make_node("Conv", ["p", "w", "b"], ["c"], pads=[pads] * 4),
             helper.make_node("HardSwish", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, c, 5, 7))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (batch, o, 1, 1))], [w, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((batch, c, 5, 7)).astype(np.float32)
    prepared = jitnn.onnx.prepare(model)
    got = prepared.run({"x": x})["y"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    text = jitnn.explain(prepared.dispatch({"x": x})["y"])
    steps = [line.split()[1] for line in text.splitlines()
             if line.split() and line.split()[0].isdigit()]
    if c * o * kernel * kernel >= 1 << 20:
        assert "matmul + add + hard_swish" in text and "conv2d" not in steps
    else:
        assert "conv2d" in steps
