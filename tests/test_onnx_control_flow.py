"""If, Loop, Scan and the sequence ops, resolved at load time
(jitnn/onnx/_control_flow.py), against ONNX's reference evaluator
(``onnx.reference``) and numpy; and the errors for what cannot be resolved.

The models share their shapes (x: (2, 3, 5) float32) so that the kernels
compile once."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX tests need onnx (in the test extra)")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from jitnn.onnx import LoadTimeValueError, UnsupportedError  # noqa: E402

X = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
FLOAT = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x_input(shape=(2, 3, 5)):
    return helper.make_tensor_value_info("x", FLOAT, list(shape))


def _out(name="y", elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, None)


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value), name))


def _check(model, feed, names=None, rtol=1e-6, atol=1e-6):
    """jitnn.onnx.run against onnx's reference evaluator for the outputs
    ``names`` (default: all); returns jitnn's outputs."""
    want = dict(zip([o.name for o in model.graph.output],
                    ReferenceEvaluator(model).run(None, feed)))
    got = jitnn.onnx.run(model, feed)
    for name in names if names is not None else want:
        expected = want[name]
        assert got[name].shape == np.shape(expected), name
        np.testing.assert_allclose(got[name], expected, rtol=rtol, atol=atol, err_msg=name)
    return got


def _branch(name, op, *operands):
    """A branch graph of one node reading outer-scope values: ``op(operands)``."""
    return helper.make_graph([helper.make_node(op, list(operands), [f"{name}_out"])], name,
                             [], [_out(f"{name}_out")])


@pytest.mark.parametrize("chosen", [True, False])
def test_if_on_a_constant_converts_only_the_chosen_branch(chosen):
    nodes = [_const("cond", np.array(chosen)), _const("two", np.float32(2.0)),
             helper.make_node("If", ["cond"], ["y"],
                              then_branch=_branch("then", "Mul", "x", "two"),
                              else_branch=_branch("else", "Sub", "x", "two"))]
    model = _model(nodes, [_x_input()], [_out()])
    got = _check(model, {"x": X})
    np.testing.assert_array_equal(got["y"], X * 2 if chosen else X - 2)
    # the other branch is not in the graph: one jitnn op
    assert jitnn.onnx.prepare(model).jitnn_ops == 1


@pytest.mark.parametrize("channels", [3, 7])
def test_if_on_a_shape_derived_condition(channels):
    """PyTorch's exports branch on shapes (``if x.shape[1] == 3``): a constant
    once the shapes are fixed."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), _const("one", np.int64(1)),
             _const("three", np.int64(3)), _const("two", np.float32(2.0)),
             helper.make_node("Gather", ["shape", "one"], ["c"]),
             helper.make_node("Equal", ["c", "three"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"],
                              then_branch=_branch("then", "Mul", "x", "two"),
                              else_branch=_branch("else", "Add", "x", "two"))]
    x = np.random.default_rng(1).standard_normal((2, channels, 5)).astype(np.float32)
    model = _model(nodes, [_x_input((2, channels, 5))], [_out()])
    got = _check(model, {"x": x})
    np.testing.assert_array_equal(got["y"], x * 2 if channels == 3 else x + 2)


def test_if_on_a_run_time_condition_is_refused_naming_it():
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             _const("zero", np.float32(0.0)),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["y"],
                              then_branch=_branch("then", "Relu", "x"),
                              else_branch=_branch("else", "Neg", "x"))]
    model = _model(nodes, [_x_input()], [_out()])
    with pytest.raises(LoadTimeValueError, match=r"If .*the condition must be known when the "
                                                 r"model is loaded") as error:
        jitnn.onnx.prepare(model)
    assert error.value.names == ("positive",)
    with pytest.raises(UnsupportedError, match="the condition"):
        jitnn.onnx.run(model, {"x": X})


def test_if_on_a_bool_graph_input_folds_it_when_run():
    """``run`` has the condition's value: it folds the input and converts the branch."""
    nodes = [_const("two", np.float32(2.0)),
             helper.make_node("If", ["cond"], ["y"],
                              then_branch=_branch("then", "Mul", "x", "two"),
                              else_branch=_branch("else", "Sub", "x", "two"))]
    model = _model(nodes, [_x_input(), helper.make_tensor_value_info("cond", TensorProto.BOOL,
                                                                     [])], [_out()])
    with pytest.raises(LoadTimeValueError) as error:
        jitnn.onnx.prepare(model)
    assert error.value.names == ("cond",)
    for cond in (True, False):
        _check(model, {"x": X, "cond": np.array(cond)})


def _loop_body(nodes, carried, scans, iter_shape=()):
    """A Loop body: inputs (i, cond_in, *carried), outputs (cond_out, *carried, *scans)."""
    inputs = [helper.make_tensor_value_info("i", TensorProto.INT64, list(iter_shape)),
              helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])]
    inputs += [helper.make_tensor_value_info(f"{name}_in", FLOAT, None) for name in carried]
    outputs = [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [])]
    outputs += [_out(f"{name}_out") for name in carried] + [_out(name) for name in scans]
    return helper.make_graph(nodes, "body", inputs, outputs)


@pytest.mark.parametrize("iter_shape", [(), (1,)])
def test_loop_over_a_run_time_carried_tensor_with_scan_outputs(iter_shape):
    """``state = state * 0.5 + x * i`` four times: the carried state and the
    outer-scope ``x`` are run-time tensors, the iteration number a constant (a
    scalar, or 1-D as PyTorch's exports declare it); the scan output stacks
    each iteration's state."""
    body = _loop_body([
        _const("half", np.float32(0.5)),
        helper.make_node("Cast", ["i"], ["i_float"], to=FLOAT),
        helper.make_node("Mul", ["state_in", "half"], ["halved"]),
        helper.make_node("Mul", ["x", "i_float"], ["scaled"]),
        helper.make_node("Add", ["halved", "scaled"], ["state_out"]),
        helper.make_node("Identity", ["state_out"], ["states"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], ["state"], ["states"], iter_shape)
    nodes = [_const("M", np.int64(4)), _const("go", np.array(True)),
             helper.make_node("Loop", ["M", "go", "x"], ["final", "all"], body=body)]
    model = _model(nodes, [_x_input()], [_out("final"), _out("all")])
    # onnx's reference evaluator concatenates the scan output's values (8, 3, 5);
    # ONNX Runtime stacks them along a new first axis, as jitnn does
    got = _check(model, {"x": X}, names=["final"])
    assert got["all"].shape == (4, 2, 3, 5)
    state, states = X.astype(np.float64), []
    for i in range(4):
        state = state * 0.5 + X * i
        states.append(state)
    np.testing.assert_allclose(got["final"], state, rtol=1e-6)
    np.testing.assert_allclose(got["all"], np.stack(states), rtol=1e-6)


def test_loop_stops_when_its_condition_turns_false():
    """A condition computed from the iteration number (``i < 2``): three
    iterations of a trip count of ten, without a trip count as well."""
    body = _loop_body([
        _const("two", np.int64(2)),
        helper.make_node("Less", ["i", "two"], ["cond_out"]),
        helper.make_node("Add", ["state_in", "x"], ["state_out"]),
    ], ["state"], [])
    for trip in ("M", ""):
        nodes = [_const("M", np.int64(10)), _const("go", np.array(True)),
                 helper.make_node("Loop", [trip, "go", "x"], ["y"], body=body)]
        got = _check(_model(nodes, [_x_input()], [_out()]), {"x": X})
        np.testing.assert_allclose(got["y"], 4 * X, rtol=1e-6)


def test_nested_loop_and_if():
    """An outer Loop of 3 whose body branches on its iteration number (If
    ``i == 1``: multiply by 2, else run an inner Loop of 2 that adds x)."""
    inner = _loop_body([
        helper.make_node("Add", ["inner_in", "x"], ["inner_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], ["inner"], [])
    inner.name = "inner"
    then = helper.make_graph([_const("two", np.float32(2.0)),
                              helper.make_node("Mul", ["state_in", "two"], ["doubled"])],
                             "then", [], [_out("doubled")])
    orelse = helper.make_graph([_const("n", np.int64(2)), _const("t", np.array(True)),
                                helper.make_node("Loop", ["n", "t", "state_in"], ["added"],
                                                 body=inner)],
                               "else", [], [_out("added")])
    body = _loop_body([
        _const("one", np.int64(1)),
        helper.make_node("Equal", ["i", "one"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["state_out"], then_branch=then, else_branch=orelse),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], ["state"], [])
    nodes = [_const("M", np.int64(3)), _const("go", np.array(True)),
             helper.make_node("Loop", ["M", "go", "x"], ["y"], body=body)]
    got = _check(_model(nodes, [_x_input()], [_out()]), {"x": X})
    np.testing.assert_allclose(got["y"], ((X + 2 * X) * 2) + 2 * X, rtol=1e-6)


def test_loop_on_a_run_time_condition_is_refused():
    body = _loop_body([
        helper.make_node("Add", ["state_in", "x"], ["state_out"]),
        helper.make_node("ReduceSum", ["state_out"], ["total"], keepdims=0),
        _const("limit", np.float32(10.0)),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
    ], ["state"], [])
    nodes = [_const("M", np.int64(5)), _const("go", np.array(True)),
             helper.make_node("Loop", ["M", "go", "x"], ["y"], body=body)]
    with pytest.raises(UnsupportedError, match=r"Loop .*the loop's condition is computed from "
                                                r"run-time data"):
        jitnn.onnx.prepare(_model(nodes, [_x_input()], [_out()]))


@pytest.mark.parametrize("with_condition", [False, True])
def test_loop_of_too_many_iterations_is_refused(with_condition):
    body = _loop_body([
        _const("one", np.float32(1.0)),
        helper.make_node("Add", ["state_in", "one"], ["state_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], ["state"], [])
    nodes = [_const("M", np.int64(5000)), _const("go", np.array(True)), _const("s", np.float32(0)),
             helper.make_node("Loop", ["M", "go" if with_condition else "", "s"], ["y"],
                              body=body)]
    with pytest.raises(UnsupportedError, match=r"Loop .*more than the 4096"):
        jitnn.onnx.prepare(_model(nodes, [], [_out()]))


def test_loop_of_a_run_time_trip_count_folds_it_when_run():
    """The trip count as a graph input: ``prepare`` names it, ``run`` folds it."""
    body = _loop_body([helper.make_node("Add", ["state_in", "x"], ["state_out"]),
                       helper.make_node("Identity", ["cond_in"], ["cond_out"])], ["state"], [])
    nodes = [_const("go", np.array(True)),
             helper.make_node("Loop", ["M", "go", "x"], ["y"], body=body)]
    model = _model(nodes, [_x_input(), helper.make_tensor_value_info("M", TensorProto.INT64, [])],
                   [_out()])
    with pytest.raises(LoadTimeValueError) as error:
        jitnn.onnx.prepare(model)
    assert error.value.names == ("M",)
    got = _check(model, {"x": X, "M": np.array(3, np.int64)})
    np.testing.assert_allclose(got["y"], 4 * X, rtol=1e-6)


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_with_axes_and_directions(reverse):
    """Scan over axis 2 of x (5 steps; reversed or not), a running sum as its
    state, each step's state times 2 stacked along output axis 1 (reversed or
    not)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "column"], ["sum_out"]), _const("two", np.float32(2)),
         helper.make_node("Mul", ["sum_out", "two"], ["doubled"])], "body",
        [helper.make_tensor_value_info("sum_in", FLOAT, [2, 3]),
         helper.make_tensor_value_info("column", FLOAT, [2, 3])],
        [_out("sum_out"), _out("doubled")])
    nodes = [_const("zero", np.zeros((2, 3), np.float32)),
             helper.make_node("Scan", ["zero", "x"], ["total", "steps"], body=body,
                              num_scan_inputs=1, scan_input_axes=[2],
                              scan_input_directions=[reverse], scan_output_axes=[-1],
                              scan_output_directions=[reverse])]
    # (onnx's reference evaluator scans axis 0 forward only: numpy is the reference here)
    got = jitnn.onnx.run(_model(nodes, [_x_input()], [_out("total"), _out("steps")]), {"x": X})
    order = X[:, :, ::-1] if reverse else X
    running = np.cumsum(order.astype(np.float64), axis=2) * 2
    np.testing.assert_allclose(got["steps"], running[:, :, ::-1] if reverse else running,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["total"], X.sum(axis=2), rtol=1e-6, atol=1e-6)


def test_sequences_of_run_time_tensors():
    """SplitToSequence of a run-time tensor, SequenceInsert, SequenceErase,
    SequenceAt (negative positions), SequenceLength, SequenceConstruct,
    ConcatFromSequence along an axis and stacked along a new one."""
    nodes = [
        _const("one", np.int64(1)), _const("two", np.int64(2)), _const("last", np.int64(-1)),
        _const("first", np.int64(0)),
        helper.make_node("SplitToSequence", ["x"], ["columns"], axis=2, keepdims=0),
        helper.make_node("SequenceErase", ["columns", "first"], ["erased"]),
        helper.make_node("Relu", ["x"], ["relu"]),
        helper.make_node("SplitToSequence", ["relu", "one"], ["rows"], axis=2),
        helper.make_node("SequenceAt", ["rows", "last"], ["row"]),
        helper.make_node("Squeeze", ["row", "two"], ["row2d"]),
        helper.make_node("SequenceInsert", ["erased", "row2d", "one"], ["inserted"]),
        helper.make_node("ConcatFromSequence", ["inserted"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("SequenceLength", ["inserted"], ["length"]),
        helper.make_node("SequenceEmpty", [], ["empty"]),
        helper.make_node("SequenceInsert", ["empty", "x"], ["single"]),
        helper.make_node("SequenceConstruct", ["x", "relu"], ["pair"]),
        helper.make_node("SequenceAt", ["single", "first"], ["only"]),
        helper.make_node("SequenceInsert", ["pair", "only"], ["three"]),
        helper.make_node("ConcatFromSequence", ["three"], ["joined"], axis=1),
    ]
    model = _model(nodes, [_x_input()],
                   [_out("stacked"), _out("length", TensorProto.INT64), _out("joined")])
    got = jitnn.onnx.run(model, {"x": X})   # (onnx's reference evaluator fails on it)
    relu = np.maximum(X, 0)
    want = np.stack([X[:, :, 1], relu[:, :, 4], X[:, :, 2], X[:, :, 3], X[:, :, 4]], axis=-1)
    np.testing.assert_array_equal(got["stacked"], want)
    assert got["length"] == 5
    np.testing.assert_array_equal(got["joined"], np.concatenate([X, relu, X], axis=1))


def test_a_sequence_output_is_refused():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1)]
    output = helper.make_tensor_sequence_value_info("parts", FLOAT, None)
    with pytest.raises(UnsupportedError, match="output 'parts' is an ONNX sequence"):
        jitnn.onnx.prepare(_model(nodes, [_x_input()], [output]))


def test_a_sequence_into_a_tensor_op_is_refused():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1),
             helper.make_node("Relu", ["parts"], ["y"])]
    with pytest.raises(UnsupportedError, match=r"Relu .*an input is an ONNX sequence"):
        jitnn.onnx.prepare(_model(nodes, [_x_input()], [_out()]))


@pytest.mark.parametrize("box", [((0, 2), (1, 2), (1, 4)), ((1, 1), (0, 3), (0, 5))])
def test_scatter_nd_of_a_whole_box_is_slices_and_concats(box):
    """``x[:, 1:, 1:] = u`` as PyTorch exports it: ScatterND with a constant
    grid of every index of the box; run without the grid (no scatter_nd op)."""
    starts, sizes = [b for b, _ in box], [n for _, n in box]
    grid = np.stack(np.meshgrid(*[np.arange(b, b + n) for b, n in box], indexing="ij"), -1)
    u = np.random.default_rng(2).standard_normal(sizes).astype(np.float32)
    nodes = [helper.make_node("ScatterND", ["x", "grid", "u"], ["y"])]
    model = _model(nodes, [_x_input(), helper.make_tensor_value_info("u", FLOAT, sizes)],
                   [_out()], [numpy_helper.from_array(grid.astype(np.int64), "grid")])
    got = _check(model, {"x": X, "u": u})
    want = X.copy()
    want[tuple(slice(b, b + n) for b, n in zip(starts, sizes))] = u
    np.testing.assert_array_equal(got["y"], want)
    graph = jitnn.onnx.load(model, input_shapes={"x": X.shape, "u": u.shape})
    assert "scatter_nd" not in {recorded.op for recorded in graph._ops}


def test_a_sequence_input_is_refused():
    nodes = [helper.make_node("SequenceLength", ["parts"], ["n"])]
    model = _model(nodes, [helper.make_tensor_sequence_value_info("parts", FLOAT, None)],
                   [_out("n", TensorProto.INT64)])
    with pytest.raises(UnsupportedError, match="input 'parts' is an ONNX sequence"):
        jitnn.onnx.run(model, {"parts": [X, X[:1]]})
    with pytest.raises(UnsupportedError, match="input 'parts' is not a tensor"):
        jitnn.onnx.prepare(model)


def test_loop_building_a_sequence_as_pytorch_exports_it():
    """MViT-v2's pooling as TorchScript exports it: a Loop that inserts a
    slice of an outer run-time tensor into a loop-carried sequence at each
    iteration (the slice bounds from the iteration number and a body
    initializer), then ConcatFromSequence; the carried sequence starts empty."""
    body = helper.make_graph(
        [helper.make_node("Add", ["i", "one"], ["end"]),
         helper.make_node("Slice", ["x", "i", "end", "axis"], ["part"]),
         helper.make_node("Relu", ["part"], ["relu"]),
         helper.make_node("SequenceInsert", ["seq_in", "relu"], ["seq_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_in", FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_out", FLOAT, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "one"),
         numpy_helper.from_array(np.array([2], np.int64), "axis")])
    nodes = [_const("M", np.array([5], np.int64)), _const("go", np.array(True)),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
             helper.make_node("Loop", ["M", "go", "empty"], ["parts"], body=body),
             helper.make_node("SequenceErase", ["parts"], ["but_last"]),
             helper.make_node("ConcatFromSequence", ["but_last"], ["y"], axis=2)]
    got = _check(_model(nodes, [_x_input()], [_out()]), {"x": X})
    np.testing.assert_array_equal(got["y"], np.maximum(X[:, :, :4], 0))


def test_split_to_sequence_sizes():
    """SplitToSequence by a list of sizes and by one size (the last piece
    smaller), read back by SequenceLength, SequenceAt and ConcatFromSequence."""
    nodes = [_const("sizes", np.array([2, 3], np.int64)), _const("two", np.int64(2)),
             _const("last", np.int64(-1)),
             helper.make_node("SplitToSequence", ["x", "sizes"], ["halves"], axis=2),
             helper.make_node("ConcatFromSequence", ["halves"], ["joined"], axis=-1),
             helper.make_node("SplitToSequence", ["x", "two"], ["pairs"], axis=-1),
             helper.make_node("SequenceLength", ["pairs"], ["count"]),
             helper.make_node("SequenceAt", ["pairs", "last"], ["tail"])]
    model = _model(nodes, [_x_input()],
                   [_out("joined"), _out("count", TensorProto.INT64), _out("tail")])
    got = _check(model, {"x": X})
    np.testing.assert_array_equal(got["joined"], X)
    assert got["count"] == 3
    np.testing.assert_array_equal(got["tail"], X[:, :, 4:])


def test_a_sequence_position_out_of_range_is_a_broken_model():
    nodes = [_const("three", np.int64(3)),
             helper.make_node("SequenceConstruct", ["x", "x"], ["pair"]),
             helper.make_node("SequenceAt", ["pair", "three"], ["y"])]
    with pytest.raises(jitnn.JitnnValueError, match=r"SequenceAt.*position 3 is outside "
                                                     r"\[-2, 1\] for a sequence of 2 value"):
        jitnn.onnx.prepare(_model(nodes, [_x_input()], [_out()]))


def test_loop_whose_condition_reads_an_integer_input_folds_it_when_run():
    """The condition compares the iteration number with an int64 graph input:
    ``prepare`` refuses it, ``run`` folds the integer input and unrolls."""
    body = _loop_body([
        helper.make_node("Less", ["i", "stop"], ["cond_out"]),
        helper.make_node("Add", ["state_in", "x"], ["state_out"]),
    ], ["state"], [])
    nodes = [_const("go", np.array(True)),
             helper.make_node("Loop", ["", "go", "x"], ["y"], body=body)]
    model = _model(nodes, [_x_input(), helper.make_tensor_value_info("stop", TensorProto.INT64,
                                                                     [])], [_out()])
    with pytest.raises(LoadTimeValueError, match="the loop's condition is computed from "
                                                 "run-time data"):
        jitnn.onnx.prepare(model)
    got = _check(model, {"x": X, "stop": np.array(2, np.int64)})
    np.testing.assert_allclose(got["y"], 4 * X, rtol=1e-6)


def test_a_branch_initializer_is_read_from_the_file(tmp_path):
    """jitnn's reader decodes subgraph attributes with their initializers (a
    raw_data long enough that the main graph's would be read apart)."""
    big = np.linspace(-1, 1, 2 * 3 * 5 * 20, dtype=np.float32).reshape(20, 2, 3, 5)
    then = helper.make_graph([helper.make_node("ReduceSum", ["big", "axes"], ["summed"],
                                               keepdims=0),
                              helper.make_node("Add", ["x", "summed"], ["t"])], "then", [],
                             [_out("t")], [numpy_helper.from_array(big, "big"),
                                           numpy_helper.from_array(np.array([0]), "axes")])
    nodes = [_const("cond", np.array(True)),
             helper.make_node("If", ["cond"], ["y"], then_branch=then,
                              else_branch=_branch("else", "Neg", "x"))]
    path = tmp_path / "branch.onnx"
    onnx.save(_model(nodes, [_x_input()], [_out()]), str(path))
    got = jitnn.onnx.run(str(path), {"x": X})["y"]
    np.testing.assert_allclose(got, X + big.astype(np.float64).sum(axis=0), rtol=1e-6, atol=1e-6)
