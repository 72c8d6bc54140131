"""The ONNX frontend refuses broken models and wrong run() inputs with a
jitnn error that names the node, its op and what is wrong (not a KeyError,
protobuf's DecodeError, or a silent guess), and keeps accepting what ONNX
allows: empty optional inputs, initializers that give a graph input its
default, symbolic dims, and (sorted by jitnn) nodes out of order."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX tests need onnx (in the test extra: pip install -e \".[test]\")")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from jitnn.onnx import backend  # noqa: E402


def _model(nodes, inputs, outputs, initializers=None, opset=17):
    """A model from nodes, ``{name: declared shape}`` inputs (float32), output
    names and ``{name: array}`` initializers."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _chain():
    """x -> Relu -> Add(bias) -> Sigmoid -> y, nodes named, with its numpy reference."""
    bias = _x(3, seed=1)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_1"),
             helper.make_node("Add", ["r", "bias"], ["a"], name="add_2"),
             helper.make_node("Sigmoid", ["a"], ["y"], name="sigmoid_3")]

    def reference(x):
        return 1 / (1 + np.exp(-(np.maximum(x, 0) + bias)))
    return nodes, {"bias": bias}, reference


# --- graph structure ----------------------------------------------------------------

def test_undefined_input_names_the_node_the_op_and_the_name():
    nodes, inits, _ = _chain()
    nodes[1].input[0] = "r_typo"
    model = _model(nodes, {"x": [2, 3]}, ["y"], inits)
    with pytest.raises(jitnn.JitnnError,
                       match=r"onnx: node 'add_2' \(Add\): input 'r_typo' is not defined"):
        jitnn.onnx.prepare(model)


def test_unnamed_node_is_named_by_its_position():
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["q"], ["y"])],
                   {"x": [2]}, ["y"])
    with pytest.raises(jitnn.JitnnError, match=r"node #1 \(Relu\): input 'q' is not defined"):
        jitnn.onnx.prepare(model)


def test_unsorted_nodes_are_sorted():
    nodes, inits, reference = _chain()
    model = _model(nodes[::-1], {"x": [2, 3]}, ["y"], inits)
    x = _x(2, 3, seed=2)
    np.testing.assert_allclose(jitnn.onnx.run(model, {"x": x})["y"], reference(x),
                               rtol=1e-5, atol=1e-6)


def test_cycle_is_refused_naming_a_node_on_it():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add_1"),
             helper.make_node("Relu", ["a"], ["b"], name="relu_2"),
             helper.make_node("Sigmoid", ["a"], ["y"], name="sigmoid_3")]
    model = _model(nodes, {"x": [2]}, ["y"])
    with pytest.raises(jitnn.JitnnError, match=r"cycle") as error:
        jitnn.onnx.prepare(model)
    message = str(error.value)
    assert "node 'add_1' (Add)" in message and "node 'relu_2' (Relu)" in message
    assert "sigmoid_3" not in message                     # not on the cycle


def test_node_reading_its_own_output_is_a_cycle():
    model = _model([helper.make_node("Add", ["x", "y"], ["y"], name="self_add")], {"x": [2]}, ["y"])
    with pytest.raises(jitnn.JitnnError, match=r"node 'self_add' \(Add\): .*cycle"):
        jitnn.onnx.prepare(model)


def test_value_written_twice_is_refused():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu_1"),
             helper.make_node("Sigmoid", ["x"], ["y"], name="sigmoid_2")]
    model = _model(nodes, {"x": [2]}, ["y"])
    with pytest.raises(jitnn.JitnnError, match=r"onnx: node 'sigmoid_2' \(Sigmoid\): output 'y' "
                                               r"is also written by node 'relu_1' \(Relu\)"):
        jitnn.onnx.prepare(model)


def test_output_shadowing_a_graph_input_or_initializer_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["x"], name="relu_1")], {"x": [2]}, ["x"])
    with pytest.raises(jitnn.JitnnError,
                       match=r"node 'relu_1' \(Relu\): output 'x' has the name of a graph input"):
        jitnn.onnx.prepare(model)
    model = _model([helper.make_node("Relu", ["x"], ["w"], name="relu_1"),
                    helper.make_node("Add", ["x", "w"], ["y"])], {"x": [2]}, ["y"], {"w": _x(2)})
    with pytest.raises(jitnn.JitnnError, match=r"output 'w' has the name of an initializer"):
        jitnn.onnx.prepare(model)


def test_empty_optional_inputs_and_outputs_still_work():
    hi = np.array(0.5, np.float32)
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["c"]),      # no min
             helper.make_node("Dropout", ["c"], ["y", ""])]          # no mask
    model = _model(nodes, {"x": [2, 3]}, ["y"], {"hi": hi})
    x = _x(2, 3, seed=3)
    np.testing.assert_array_equal(jitnn.onnx.run(model, {"x": x})["y"], np.minimum(x, hi))


def test_graph_input_with_an_initializer_takes_it_as_default():
    b = _x(3, seed=4)
    graph_inputs = {"x": [2, 3], "b": [3]}                   # b: also an initializer (old exports)
    model = _model([helper.make_node("Add", ["x", "b"], ["y"])], graph_inputs, ["y"], {"b": b})
    x = _x(2, 3, seed=5)
    np.testing.assert_allclose(jitnn.onnx.run(model, {"x": x})["y"], x + b, rtol=1e-6)
    other = _x(3, seed=6)
    np.testing.assert_allclose(jitnn.onnx.run(model, {"x": x, "b": other})["y"], x + other,
                               rtol=1e-6)
    (y,) = backend.prepare(model).run([x])
    np.testing.assert_allclose(y, x + b, rtol=1e-6)


# --- op checks ----------------------------------------------------------------------

def _reshape_model(target, constant_input=False):
    inits = {"shape": np.array(target, np.int64)}
    if constant_input:
        inits["c"] = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Reshape", ["c" if constant_input else "x", "shape"], ["r"],
                              name="reshape_1"),
             helper.make_node("Add", ["x", "r"] if constant_input else ["r", "r"], ["y"])]
    return _model(nodes, {"x": [2, 3] if not constant_input else target}, ["y"], inits)


@pytest.mark.parametrize("constant_input", [False, True], ids=["runtime", "folded"])
def test_reshape_with_two_minus_ones_is_refused(constant_input):
    with pytest.raises(jitnn.JitnnError, match=r"onnx: node 'reshape_1' \(Reshape\): shape "
                                               r"\[-1, -1\] has more than one -1"):
        jitnn.onnx.prepare(_reshape_model([-1, -1], constant_input),
                           input_shapes={"x": (2, 3)} if constant_input else None)


@pytest.mark.parametrize("target, why", [
    ([4, -1], r"cannot reshape \(2, 3\) \(6 values\) to \[4, -1\]"),
    ([5], r"cannot reshape \(2, 3\) \(6 values\) to \[5\]"),
    ([3, 2, 0], r"shape \[3, 2, 0\] copies \(with 0\) a dim"),
    ([-2, -3], r"shape \[-2, -3\] has a negative dim")], ids=["count", "size", "zero", "negative"])
def test_reshape_to_an_impossible_shape_is_refused(target, why):
    with pytest.raises(jitnn.JitnnError, match=r"node 'reshape_1' \(Reshape\): " + why):
        jitnn.onnx.prepare(_reshape_model(target))


def test_reshape_zero_and_minus_one_still_work():
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])], {"x": [2, 3, 4]}, ["y"],
                   {"shape": np.array([0, -1], np.int64)})
    x = _x(2, 3, 4, seed=7)
    np.testing.assert_array_equal(jitnn.onnx.run(model, {"x": x})["y"], x.reshape(2, 12))


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_kernel_shape_contradicting_the_weights_is_refused(op):
    # Conv weights (M, C, kH, kW), ConvTranspose (C, M, kH, kW)
    w = _x(4, 2, 5, 5, seed=8) if op == "Conv" else _x(2, 4, 5, 5, seed=8)
    node = helper.make_node(op, ["x", "w"], ["y"], name="conv_3", kernel_shape=[3, 3])
    model = _model([node], {"x": [1, 2, 7, 7]}, ["y"], {"w": w})
    with pytest.raises(jitnn.JitnnError, match=rf"^onnx: node 'conv_3' \({op}\): kernel_shape "
                                               r"\[3, 3\] does not match the weights' spatial "
                                               r"dims \(5, 5\)$"):
        jitnn.onnx.prepare(model)


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_kernel_shape_matching_the_weights_still_works(op):
    w = _x(4, 2, 3, 3, seed=9) if op == "Conv" else _x(2, 4, 3, 3, seed=9)
    x = _x(1, 2, 6, 6, seed=10)
    outputs = []
    for attrs in ({"kernel_shape": [3, 3]}, {}):
        node = helper.make_node(op, ["x", "w"], ["y"], **attrs)
        outputs.append(jitnn.onnx.run(_model([node], {"x": [1, 2, 6, 6]}, ["y"], {"w": w}),
                                      {"x": x})["y"])
    np.testing.assert_array_equal(outputs[0], outputs[1])


# --- reading the file ----------------------------------------------------------------

def _file_bytes():
    nodes, inits, _ = _chain()
    return _model(nodes, {"x": [2, 3]}, ["y"], inits).SerializeToString()


@pytest.mark.parametrize("kind", ["truncated", "garbage", "empty"])
def test_unreadable_file_names_the_file(tmp_path, kind):
    data = {"truncated": _file_bytes()[:-9], "garbage": b"\xff\x13not an onnx model\x00" * 4,
            "empty": b""}[kind]
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(data)
    for load in (jitnn.onnx.load, jitnn.onnx.prepare, backend.prepare):
        with pytest.raises(jitnn.JitnnError, match=rf"onnx: cannot read '{path}'"):
            load(str(path))
    with pytest.raises(jitnn.JitnnError, match=rf"onnx: cannot read '{path}'"):
        jitnn.onnx.run(path, {"x": _x(2, 3)})                      # a PathLike too
    with pytest.raises(jitnn.JitnnError, match=r"onnx: cannot read the given bytes"):
        jitnn.onnx.prepare(data)


def test_a_whole_file_reads_from_a_path_and_from_bytes(tmp_path):
    data = _file_bytes()
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    x = _x(2, 3, seed=11)
    y_path = jitnn.onnx.run(str(path), {"x": x})["y"]
    np.testing.assert_array_equal(jitnn.onnx.run(data, {"x": x})["y"], y_path)
    np.testing.assert_array_equal(backend.prepare(data).run([x])[0], y_path)


# --- run() inputs -------------------------------------------------------------------

def test_run_refuses_unknown_input_names():
    nodes, inits, _ = _chain()
    model = _model(nodes, {"x": [2, 3]}, ["y"], inits)
    x = _x(2, 3)
    pattern = r"onnx: unknown input 'x2' \(the model's inputs: \['x'\]\)"
    with pytest.raises(jitnn.JitnnTypeError, match=pattern):
        jitnn.onnx.run(model, {"x": x, "x2": x})
    with pytest.raises(jitnn.JitnnTypeError, match=pattern):
        jitnn.onnx.prepare(model).run({"x": x, "x2": x})
    with pytest.raises(jitnn.JitnnTypeError, match=pattern):
        backend.prepare(model).run({"x": x, "x2": x})
    with pytest.raises(jitnn.JitnnTypeError, match=r"2 inputs given, the model has 1: \['x'\]"):
        backend.prepare(model).run([x, x])
    with pytest.raises(jitnn.JitnnError, match=r"input_shapes names 'x2', not an input"):
        jitnn.onnx.prepare(model, input_shapes={"x2": (2, 3)})


def test_prepared_model_says_which_inputs_were_fixed_at_prepare():
    b = _x(3, seed=12)
    model = _model([helper.make_node("Add", ["x", "b"], ["y"])], {"x": [2, 3], "b": [3]}, ["y"],
                   {"b": b})
    with pytest.raises(jitnn.JitnnTypeError, match=r"unknown input 'b' .*fixed when the model "
                                                   r"was prepared: \['b'\]"):
        jitnn.onnx.prepare(model).run({"x": _x(2, 3), "b": b})


@pytest.mark.parametrize("shape", [(2, 4), (3, 3), (6,), (2, 3, 1)])
def test_run_refuses_a_shape_contradicting_static_dims(shape):
    nodes, inits, _ = _chain()
    model = _model(nodes, {"x": [2, 3]}, ["y"], inits)
    message = rf"onnx: input 'x' has shape {re_tuple(shape)}, but the model declares \(2, 3\)"
    with pytest.raises(jitnn.JitnnValueError, match=message):
        jitnn.onnx.run(model, {"x": _x(*shape)})
    with pytest.raises(jitnn.JitnnValueError, match=message):
        backend.prepare(model).run([_x(*shape)])


def re_tuple(shape):
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


def test_symbolic_unknown_and_zero_dims_match_anything():
    nodes, inits, reference = _chain()
    x = _x(5, 3, seed=13)
    for declared in (["N", 3], [None, 3], [0, 3], None):   # dim_param, no dim, 0, no shape
        model = _model(nodes, {"x": declared}, ["y"], inits)
        np.testing.assert_allclose(jitnn.onnx.run(model, {"x": x})["y"], reference(x),
                                   rtol=1e-5, atol=1e-6)
    model = _model(nodes, {"x": ["N", 3]}, ["y"], inits)
    with pytest.raises(jitnn.JitnnValueError, match=r"has shape \(5, 4\), but the model declares "
                                                    r"\(N, 3\)"):
        jitnn.onnx.run(model, {"x": _x(5, 4)})


# --- attributes -------------------------------------------------------------------

@pytest.mark.parametrize("node,shape", [
    (helper.make_node("MaxPool", ["x"], ["y"], name="pool_1"), [1, 3, 8, 8]),
    (helper.make_node("Concat", ["x", "x"], ["y"], name="concat_1"), [2, 3]),
    (helper.make_node("Cast", ["x"], ["y"], name="cast_1"), [2, 3]),
])
def test_a_missing_required_attribute_names_the_node(node, shape):
    model = _model([node], {"x": shape}, ["y"])
    with pytest.raises(jitnn.JitnnValueError,
                       match=rf"onnx: node '{node.name}' \({node.op_type}\): the required "
                             r"attribute '\w+' is missing"):
        jitnn.onnx.prepare(model)


def test_a_fold_numpy_refuses_names_the_node():
    # Concat of two constants whose shapes do not fit: folded at load time
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], name="concat_1", axis=0),
             helper.make_node("Add", ["x", "c"], ["y"], name="add_1")]
    model = _model(nodes, {"x": [2, 3]}, ["y"], {"a": _x(1, 3), "b": _x(1, 4)})
    with pytest.raises(jitnn.JitnnValueError, match=r"onnx: node 'concat_1' \(Concat\)"):
        jitnn.onnx.prepare(model)


# --- run-time integer inputs and load-time values ----------------------------------

def test_a_fold_only_op_on_a_run_time_input_names_it():
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill_1")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(jitnn.onnx.LoadTimeValueError,
                       match=r"ConstantOfShape \(node 'fill_1'.*only when its inputs are known"
                       ) as error:
        jitnn.onnx.prepare(model)
    assert error.value.names == ("shape",)
    # run() has the value: the output is a constant
    np.testing.assert_array_equal(jitnn.onnx.run(model, {"shape": np.array([2, 3])})["y"],
                                  np.zeros((2, 3), np.float32))


def test_dispatch_and_run_name_a_missing_input():
    nodes, inits, _ = _chain()
    prepared = jitnn.onnx.prepare(_model(nodes, {"x": [2, 3]}, ["y"], inits))
    for call in (prepared.run, prepared.dispatch):
        with pytest.raises(jitnn.JitnnTypeError, match=r"missing input 'x'"):
            call({})


def test_an_integer_input_out_of_its_jitnn_type_range_is_refused():
    node = helper.make_node("Abs", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.UINT64, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    prepared = jitnn.onnx.prepare(model)
    assert prepared.graph.input_dtypes == {"x": np.int64}      # uint64 held as int64
    with pytest.raises(jitnn.JitnnValueError, match="outside int64's range"):
        prepared.run({"x": np.array([1, 2 ** 63], np.uint64)})
