"""What the ONNX frontend refuses and the smaller forms it takes, in models
built with onnx.helper: 3-D (video) convolutions and pools refused by name
and rank, nodes with missing inputs refused as broken models, constant
folding without numpy's warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, helper, numpy_helper

import jitnn
import jitnn.onnx


def one_node(op: str, inputs: dict, initializers: dict | None = None, opset: int = 17,
             **attrs):
    """A model of one node ``op`` named ``the_node`` reading the graph inputs
    ``{name: shape}`` and the initializers ``{name: array}`` (in that order),
    writing ``y``."""
    initializers = initializers or {}
    node = helper.make_node(op, list(inputs) + list(initializers), ["y"], name="the_node",
                            **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
                      for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op, initializers, attrs, kind", [
    ("Conv", {"w": np.ones((4, 3, 3, 3, 3, 3), np.float32)}, {}, "convolution"),
    ("MaxPool", {}, {"kernel_shape": [2, 2, 2, 2]}, "pooling"),
    ("AveragePool", {}, {"kernel_shape": [2, 2, 2, 2]}, "pooling"),
    ("GlobalAveragePool", {}, {}, "pooling"),
])
def test_4d_convolution_and_pooling_are_refused_by_name(op, initializers, attrs, kind):
    """Rank 6 (3-D ones: tests/test_onnx_conv3d.py)."""
    model = one_node(op, {"x": (1, 3, 4, 8, 8, 8)}, initializers, **attrs)
    with pytest.raises(jitnn.onnx.UnsupportedError,
                       match=rf"{op} \(node 'the_node', opset 17\): 4-D {kind} \(a rank-6 input "
                             r"of shape \(1, 3, 4, 8, 8, 8\)\) is not supported"):
        jitnn.onnx.prepare(model)


def test_a_rank_2_convolution_input_is_a_broken_model():
    model = one_node("Conv", {"x": (3, 8)}, {"w": np.ones((4, 3, 3), np.float32)})
    with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_node' \(Conv\): a rank-2 input "
                       r"of shape \(3, 8\): Conv needs \(N, C, L\), \(N, C, H, W\) or "
                       r"\(N, C, D, H, W\)"):
        jitnn.onnx.prepare(model)


def test_missing_required_inputs_are_a_broken_model():
    """BatchNormalization with its input alone, a Gemm with one operand, a
    required input left empty: refused naming the node, before any handler."""
    for model in (one_node("BatchNormalization", {"x": (1, 3, 4, 4)}),
                  one_node("Gemm", {"a": (2, 3)})):
        with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_node' \(\w+\): \w+ needs "
                           r"at least \d input\(s\), got 1"):
            jitnn.onnx.prepare(model)
    model = one_node("MatMul", {"a": (2, 3)})
    model.graph.node[0].input.insert(0, "")
    with pytest.raises(jitnn.JitnnValueError, match=r"MatMul needs at least 2 input\(s\), got 1"):
        jitnn.onnx.prepare(model)


def test_the_required_input_counts_are_onnx_schemas():
    """jitnn's copy of ``OpSchema.min_input`` (it spares loading onnx.defs'
    every schema, 6.6 MB) against onnx.defs, for every op it converts and every
    opset from the oldest it reads to the newest onnx knows."""
    from onnx import defs

    from jitnn.onnx._validate import min_inputs
    for op in jitnn.onnx.SUPPORTED_OPS:
        for opset in range(jitnn.onnx.MIN_OPSET, defs.onnx_opset_version() + 2):
            try:
                expected = defs.get_schema(op, opset, "").min_input
            except defs.SchemaError:
                expected = 0                    # not an op yet at this opset
            assert min_inputs(op, opset) == expected, (op, opset)


def test_folding_gives_onnx_values_without_numpy_warnings():
    """Log(0) of constants folds to -inf (T5's relative position buckets take
    the log of a distance of 0) without a RuntimeWarning."""
    node = helper.make_node("Log", ["zero"], ["log"])
    add = helper.make_node("Add", ["x", "log"], ["y"])
    graph = helper.make_graph(
        [node, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        converted = jitnn.onnx.prepare(model)
    got = converted.run({"x": np.ones(2, np.float32)})["y"]
    np.testing.assert_array_equal(got, [-np.inf, 1.0])


def test_weight_standardization_folds_at_load_time():
    """NF-Nets' ScaledStdConv2d as exported: the filter standardized by a
    BatchNormalization in training mode over its (1, O, I*K*K) view, then
    scaled, before the Conv: all constants, folded; the Conv runs with the
    standardized filter."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    gain = rng.uniform(0.5, 1.5, (5, 1, 1, 1)).astype(np.float32)
    inits = {"w": w, "flat": np.array([1, 5, -1], np.int64), "shape": np.array(w.shape, np.int64),
             "ones": np.ones(5, np.float32), "zeros": np.zeros(5, np.float32), "gain": gain}
    nodes = [helper.make_node("Reshape", ["w", "flat"], ["w3"]),
             helper.make_node("BatchNormalization", ["w3", "ones", "zeros", "zeros", "ones"],
                              ["standard"], epsilon=1e-6, training_mode=1),
             helper.make_node("Reshape", ["standard", "shape"], ["w4"]),
             helper.make_node("Mul", ["w4", "gain"], ["scaled"]),
             helper.make_node("Conv", ["x", "scaled"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted = jitnn.onnx.prepare(model)
    assert converted.jitnn_ops == 1                      # the conv alone
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    flat = w.reshape(5, -1).astype(np.float64)
    standard = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-6)
    filters = standard.reshape(w.shape) * gain
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    want = np.einsum("nchwij,ocij->nohw", windows, filters)
    np.testing.assert_allclose(converted.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("constant", [True, False])
def test_one_hot_of_constant_and_run_time_indices(constant):
    """OneHot (GC ViT builds its relative position table with one of
    constants): negative indices count from depth, one out of range is all
    off, the new axis anywhere; folded when the indices are constants."""
    indices = np.array([[0, -1, 2], [5, 1, -3]], np.int64)
    values = np.array([-2.0, 7.0], np.float32)
    node = helper.make_node("OneHot", ["indices", "depth", "values"], ["y"], axis=1)
    inits = [numpy_helper.from_array(np.array(4.0, np.float32), "depth"),
             numpy_helper.from_array(values, "values")]
    inputs = []
    if constant:
        inits.append(numpy_helper.from_array(indices, "indices"))
    else:
        inputs.append(helper.make_tensor_value_info("indices", TensorProto.INT64, [2, 3]))
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted = jitnn.onnx.prepare(model)
    got = converted.constant_outputs["y"] if constant else converted.run({"indices": indices})["y"]
    want = np.full((2, 4, 3), -2.0, np.float32)
    for (i, j), k in np.ndenumerate(indices):
        if -4 <= k < 4:
            want[i, k % 4, j] = 7.0
    np.testing.assert_array_equal(got, want)


def test_same_padding_computed_through_clip_folds_at_load_time():
    """timm's "same" padding (NFNet's convs) as exported: the pads computed from
    the input's shape through float arithmetic and a Clip at 0, then a Pad:
    all folded, the Pad's pads known at load time. The fold of a Clip keeps
    ONNX's rules (attributes before opset 11, a missing bound, min > max)."""
    inits = {"idx": np.array([2, 3], np.int64), "k": np.array([4.0, 2.0], np.float32),
             "lo": np.array(0.0, np.float32), "zeros": np.zeros(4, np.int64),
             "order": np.array([2, 3], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "idx"], ["hw"]),
             helper.make_node("Cast", ["hw"], ["hwf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["k", "hwf"], ["short"]),          # (4 - 5, 2 - 3) < 0
             helper.make_node("Mul", ["short", "short"], ["square"]),   # (1, 1)
             helper.make_node("Clip", ["square", "lo", ""], ["pad"]),
             helper.make_node("Cast", ["pad"], ["padi"], to=TensorProto.INT64),
             helper.make_node("ScatterElements", ["zeros", "order", "padi"], ["pads4"]),
             helper.make_node("Concat", ["pads4", "pads4"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted = jitnn.onnx.prepare(model)
    assert converted.jitnn_ops == 1                      # the pad alone
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 3)).astype(np.float32)
    np.testing.assert_array_equal(converted.run({"x": x})["y"],
                                  np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))))
    for opset, inputs, attrs, want in (
            (17, ["a", "lo", "hi"], {}, [-1.0, -1.0, -1.0]),    # min 3 > max -1: max
            (17, ["a", "", "hi"], {}, [-2.0, -1.0, -1.0]),      # no min
            (6, ["a"], {"min": -1.5}, [-1.5, 0.5, 4.0])):       # attributes before opset 11
        clip = helper.make_node("Clip", inputs, ["c"], **attrs)
        add = helper.make_node("Add", ["x", "c"], ["y"])
        graph = helper.make_graph(
            [clip, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.array([-2.0, 0.5, 4.0], np.float32), "a"),
             numpy_helper.from_array(np.array(-1.0, np.float32), "hi"),
             numpy_helper.from_array(np.array(3.0, np.float32), "lo")])
        converted = jitnn.onnx.prepare(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
        assert converted.jitnn_ops == 1                  # the add alone
        np.testing.assert_array_equal(converted.run({"x": np.zeros(3, np.float32)})["y"], want)


@pytest.mark.parametrize("k, dtype", [(0, None), (1, TensorProto.FLOAT), (-2, TensorProto.INT64)])
def test_eye_like_of_a_run_time_tensor_folds_at_load_time(k, dtype):
    """EyeLike reads only its input's shape (XLNet's attention masks): folded
    even when that input is computed at run time, in ``dtype`` or the input's."""
    eye = helper.make_node("EyeLike", ["x"], ["eye"], k=k,
                           **({} if dtype is None else {"dtype": dtype}))
    cast = helper.make_node("Cast", ["eye"], ["eye_float"], to=TensorProto.FLOAT)
    add = helper.make_node("Add", ["x", "eye_float"], ["y"])
    graph = helper.make_graph(
        [eye, cast, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("eye", dtype or TensorProto.FLOAT, None)])
    converted = jitnn.onnx.prepare(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    want = np.eye(3, 5, k)
    assert converted.constant_outputs["eye"].dtype == (np.int64 if dtype == TensorProto.INT64
                                                       else np.float32)
    np.testing.assert_array_equal(converted.constant_outputs["eye"], want)
    np.testing.assert_allclose(converted.run({"x": x})["y"], x + want, rtol=1e-6)
