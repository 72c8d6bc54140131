"""jitnn/onnx/_proto.py and _reader.py: ONNX files read without the onnx
package, field by field as onnx's protobuf parse reads them, tensors as
``numpy_helper.to_array`` gives them, external data from the model's directory."""

import glob
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitnn
import jitnn.onnx
from jitnn.errors import JitnnValueError
from jitnn.onnx import _proto
from jitnn.onnx._reader import read_model

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _small_model(external_constant: bool = False):
    """Conv + Relu + a Constant-node bias Add + Reshape (an int64 shape initializer)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    bias = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(bias, "k")),
             helper.make_node("Add", ["r", "k"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["y"])]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array([0, -1], np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


_BLOCKING_FINDER = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "onnx" or name.startswith("google.protobuf") \\
                    or name == "google":
                raise ImportError(f"{name} is blocked in this test")
            return None
    sys.meta_path.insert(0, Block())
""")


def test_a_model_loads_and_runs_where_onnx_and_protobuf_cannot_be_imported(tmp_path):
    model = _small_model()
    path = tmp_path / "small.onnx"
    path.write_bytes(model.SerializeToString())
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype(np.float32)
    expected = jitnn.onnx.run(model, {"x": x})["y"]
    np.save(tmp_path / "x.npy", x)
    code = _BLOCKING_FINDER + textwrap.dedent(f"""
        import numpy as np
        import jitnn.onnx
        x = np.load({str(tmp_path / "x.npy")!r})
        got = jitnn.onnx.run({str(path)!r}, {{"x": x}})["y"]
        graph = jitnn.onnx.load(open({str(path)!r}, "rb").read(), input_shapes={{"x": x.shape}})
        again = jitnn.default_context().dispatch(graph, {{"x": x}})["y"].numpy()
        assert np.array_equal(got, again)
        np.save({str(tmp_path / "got.npy")!r}, got)
        blocked = [m for m in sys.modules if m.split(".")[0] == "onnx" or m.startswith("google")]
        assert not blocked, blocked
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(tmp_path),
                   env={**os.environ, "JITNN_TUNE": "0"})
    got = np.load(tmp_path / "got.npy")
    reference = _conv_reference(x, model)
    np.testing.assert_allclose(expected, reference.reshape(2, -1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, expected)


def _conv_reference(x, model):
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w, b = inits["w"], inits["b"]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    out = np.zeros((x.shape[0], w.shape[0], 6, 6))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 6, j:j + 6], w[:, :, i, j])
    bias = numpy_helper.to_array(model.graph.node[2].attribute[0].t)
    return np.maximum(out + b[None, :, None, None], 0) + bias


def _equal(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
                      and math.isnan(b))


def _same(ours, theirs, where: str) -> None:
    """Every field of ``theirs`` (onnx's parse) that jitnn's message type has
    is in ``ours`` with the same value, presence included."""
    for field in theirs.DESCRIPTOR.fields:
        name = field.name
        if name not in type(ours)._BY_NAME:
            continue
        here = f"{where}.{name}"
        expected, got = getattr(theirs, name), getattr(ours, name)
        repeated = field.is_repeated if hasattr(field, "is_repeated") else \
            field.label == field.LABEL_REPEATED
        if field.message_type is not None:
            if repeated:
                assert len(got) == len(expected), here
                for k, (o, t) in enumerate(zip(got, expected)):
                    _same(o, t, f"{here}[{k}]")
            else:
                assert ours.HasField(name) == theirs.HasField(name), here
                if theirs.HasField(name):
                    _same(got, expected, here)
            continue
        if repeated:
            expected, got = list(expected), list(np.asarray(got).tolist()) \
                if isinstance(got, np.ndarray) else list(got)
            assert len(got) == len(expected), here
            assert all(_equal(a, b) for a, b in zip(got, expected)), here
            continue
        if field.has_presence:
            assert ours.HasField(name) == theirs.HasField(name), here
        assert _equal(got, expected), \
            (here, got if not isinstance(got, bytes) else len(got), expected
             if not isinstance(expected, bytes) else len(expected))


def _model_files() -> list[str]:
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "**", "*.onnx"), recursive=True))
    files += sorted(glob.glob(os.path.join(ROOT, "benchmarks", "**", "*.onnx"), recursive=True))
    return files


@pytest.mark.parametrize("path", _model_files(), ids=os.path.basename)
def test_the_reader_reads_every_kept_model_as_onnx_does(path):
    theirs = onnx.load(path)
    ours, weights = read_model(path)
    # the weights read apart: compared with onnx's values, then left out of the comparison
    for k, (tensor, array) in enumerate(zip(ours.graph.initializer, weights)):
        if array is not None:
            expected = numpy_helper.to_array(theirs.graph.initializer[k])
            assert array.dtype == expected.dtype and np.array_equal(array, expected), tensor.name
            assert array.ctypes.data % 64 == 0
            theirs.graph.initializer[k].ClearField("raw_data")
        else:
            np.testing.assert_array_equal(_proto.to_array(tensor),
                                          numpy_helper.to_array(theirs.graph.initializer[k]))
    _same(ours, theirs, os.path.basename(path))


def test_the_decoder_reads_the_model_files_shipped_with_onnx_as_onnx_does():
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    paths = sorted(glob.glob(os.path.join(data, "*", "*", "model.onnx")))
    assert len(paths) > 50
    for path in paths:
        with open(path, "rb") as file:
            data = file.read()
        _same(_proto.ModelProto.decode(data), onnx.ModelProto.FromString(data), path)


def test_the_decoder_reads_every_attribute_kind_as_onnx_does():
    """Subgraphs (If's branches, a Loop body), sparse tensors, type protos,
    tensor lists, metadata, doc strings, value_info and sequence/map/optional types."""
    scalar = [helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
    branch = helper.make_graph([helper.make_node("Constant", [], ["o"], value_float=1.0)],
                               "then", [], [helper.make_tensor_value_info("o", 1, [])])
    sparse = helper.make_sparse_tensor(helper.make_tensor("v", TensorProto.FLOAT, [2], [1, 2]),
                                       helper.make_tensor("i", TensorProto.INT64, [2], [0, 3]),
                                       [4])
    nodes = [
        helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
        helper.make_node("Constant", [], ["s"], sparse_value=sparse, doc_string="sparse"),
        helper.make_node("X", [], ["z"], domain="custom", graphs=[branch, branch],
                         tensors=[helper.make_tensor("t", TensorProto.INT32, [2], [-1, 7])],
                         sparse_tensors=[sparse], type_protos=[
                             helper.make_sequence_type_proto(helper.make_tensor_type_proto(1, [2])),
                             helper.make_map_type_proto(7, helper.make_tensor_type_proto(1, None)),
                             helper.make_optional_type_proto(helper.make_tensor_type_proto(9, []))],
                         tp=helper.make_tensor_type_proto(1, ["N", None, 3])),
    ]
    graph = helper.make_graph(nodes, "kinds", scalar, [helper.make_tensor_value_info("y", 1, [])],
                              value_info=[helper.make_tensor_value_info("s", 1, [4])],
                              sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("custom", 1)],
                              producer_name="test", doc_string="every kind")
    helper.set_model_props(model, {"key": "value"})
    data = model.SerializeToString()
    ours = _proto.ModelProto.decode(data)
    _same(ours, onnx.ModelProto.FromString(data), "kinds")
    assert ours.graph.node[0].attribute[0].g.node[0].attribute[0].f == 1.0
    assert _proto.attribute_value(ours.graph.node[2].attribute[0])[1].name == "then"


@pytest.mark.slow
def test_the_decoder_reads_onnx_node_test_models_as_onnx_does():
    """ONNX's node test cases (built in memory, 17 s: every op's attributes,
    subgraphs, every data type), each decoded and compared field by field."""
    from tests.onnx_cases import _all_node_cases
    cases = _all_node_cases()
    assert len(cases) > 1000
    for case in cases:
        data = case.model.SerializeToString()
        _same(_proto.ModelProto.decode(data), onnx.ModelProto.FromString(data), case.name)


def _tensors_of_every_type():
    """(name, TensorProto) for every data type, in each way onnx stores it."""
    rng = np.random.default_rng(0)
    cases = []
    for code, (name, dtype, _) in _proto.DATA_TYPES.items():
        if code == TensorProto.STRING:
            values = np.array(["a", "bé", ""], dtype=object)
            cases.append((name, helper.make_tensor(name, code, [3], values.tolist())))
            continue
        np_type = helper.tensor_dtype_to_np_dtype(code)
        raw_values = rng.standard_normal(6) * 5
        if code in (21, 22):                             # int4, uint4
            values = rng.integers(-8 if code == 22 else 0, 8 if code == 22 else 16, 6)
            values = values.astype(np_type)
        elif np.dtype(np_type).kind == "b":
            values = raw_values > 0
        elif np.dtype(np_type).kind in "iu":
            info = np.iinfo(np_type)
            values = rng.integers(max(info.min, -1000), min(info.max, 1000), 6)
            if code == TensorProto.UINT64:
                values = values.astype(np.uint64) + np.uint64(2 ** 63)
            values = np.asarray(values).astype(np_type)
        elif np.dtype(np_type).kind == "c":
            values = (raw_values + 1j * raw_values[::-1]).astype(np_type)
        else:
            values = raw_values.astype(np_type)
        values = values.reshape(2, 3)
        if code == TensorProto.FLOAT:
            values[0, 0] = np.nan
        cases.append((f"{name}-typed", helper.make_tensor(name, code, [2, 3], values)))
        cases.append((f"{name}-raw", helper.make_tensor(
            name, code, [2, 3], numpy_helper.from_array(values).raw_data, raw=True)))
    cases.append(("empty", helper.make_tensor("empty", TensorProto.FLOAT, [0, 3], [])))
    cases.append(("scalar", helper.make_tensor("scalar", TensorProto.INT64, [], [-5])))
    return cases


@pytest.mark.parametrize("case", _tensors_of_every_type(), ids=lambda c: c[0])
def test_every_data_type_and_data_field_reads_as_numpy_helper_does(case):
    _, tensor = case
    ours = _proto.TensorProto.decode(tensor.SerializeToString())
    expected = numpy_helper.to_array(tensor)
    got = _proto.to_array(ours)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype == object:
        assert got.tolist() == expected.tolist()
    else:
        assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_packed_and_unpacked_repeated_fields_and_negative_ints_decode_alike():
    tensor = helper.make_tensor("t", TensorProto.INT64, [4], [-1, 2 ** 62, -(2 ** 63), 0])
    packed = tensor.SerializeToString()
    # the same values unpacked (one varint field each), as older writers did
    unpacked = b"".join([b"\x08\x04", b"\x10\x07", b"\x42\x01t"] + [
        b"\x38" + _varint(v & (2 ** 64 - 1)) for v in (-1, 2 ** 62, -(2 ** 63), 0)])
    for data in (packed, unpacked):
        ours = _proto.TensorProto.decode(data)
        np.testing.assert_array_equal(_proto.to_array(ours), [-1, 2 ** 62, -(2 ** 63), 0])
        assert ours.name == "t" and list(ours.dims) == [4]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


@pytest.mark.parametrize("code", [25, 26, 27, 28, 0, 99])
def test_a_type_jitnn_cannot_read_is_named_with_its_tensor(code):
    tensor = _proto.TensorProto(name="odd", data_type=code, dims=[2], raw_data=b"\x01")
    with pytest.raises(JitnnValueError, match="'odd'"):
        _proto.to_array(tensor)


def test_a_tensor_in_segments_is_refused_by_name():
    tensor = helper.make_tensor("seg", TensorProto.FLOAT, [2], [1.0, 2.0])
    tensor.segment.begin, tensor.segment.end = 0, 2
    with pytest.raises(JitnnValueError, match="'seg'.*segments"):
        _proto.to_array(_proto.TensorProto.decode(tensor.SerializeToString()))


def test_attribute_values_are_onnx_helpers():
    node = helper.make_node("X", [], ["y"], f=1.5, i=-3, s="text", ints=[1, -2],
                            floats=[0.25, 3.0], strings=["a", "b"],
                            t=helper.make_tensor("t", TensorProto.FLOAT, [1], [2.0]),
                            g=helper.make_graph([], "sub", [], []))
    ours = _proto.NodeProto.decode(node.SerializeToString())
    for mine, theirs in zip(ours.attribute, node.attribute):
        got, expected = _proto.attribute_value(mine), helper.get_attribute_value(theirs)
        if hasattr(expected, "DESCRIPTOR"):
            _same(got, expected, mine.name)
        else:
            assert got == expected, mine.name


def _save_external(model, path, **kwargs) -> None:
    model = onnx.ModelProto.FromString(model.SerializeToString())   # save_model changes it
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0, **kwargs)


def test_external_data_is_read_from_the_model_directory(tmp_path):
    model = _small_model()
    x = np.random.default_rng(2).standard_normal((1, 3, 6, 6)).astype(np.float32)
    expected = jitnn.onnx.run(model, {"x": x})["y"]
    path = tmp_path / "ext.onnx"
    _save_external(model, path, convert_attribute=True)
    saved = onnx.load(str(path), load_external_data=False)
    assert saved.graph.initializer[0].data_location == TensorProto.EXTERNAL
    assert saved.graph.node[2].attribute[0].t.data_location == TensorProto.EXTERNAL
    ours, weights = read_model(path)
    assert all(w is not None for w in weights[:2])
    assert weights[0].ctypes.data % 64 == 0
    assert not ours.graph.initializer[0].external_data
    np.testing.assert_array_equal(_proto.to_array(ours.graph.node[2].attribute[0].t),
                                  numpy_helper.to_array(model.graph.node[2].attribute[0].t))
    np.testing.assert_array_equal(jitnn.onnx.run(path, {"x": x})["y"], expected)
    # bytes, and a ModelProto whose external data onnx did not load, have no directory
    for given in (path.read_bytes(), saved):
        with pytest.raises(JitnnValueError, match="model's path"):
            jitnn.onnx.run(given, {"x": x})
    np.testing.assert_array_equal(jitnn.onnx.run(onnx.load(str(path)), {"x": x})["y"], expected)


def _with_location(path, location: str, out) -> None:
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save_model(model, str(out))


def test_external_data_outside_the_model_directory_is_refused(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    _save_external(_small_model(), tmp_path / "m.onnx")     # weights.bin beside, outside inner
    for location in ("../weights.bin", str(tmp_path / "weights.bin")):
        _with_location(tmp_path / "m.onnx", location, inner / "bad.onnx")
        with pytest.raises(JitnnValueError, match="'w'"):
            read_model(inner / "bad.onnx")
    os.symlink(tmp_path / "weights.bin", inner / "link.bin")
    _with_location(tmp_path / "m.onnx", "link.bin", inner / "linked.onnx")
    with pytest.raises(JitnnValueError, match="leaves"):
        read_model(inner / "linked.onnx")


def test_external_data_beyond_its_file_is_refused(tmp_path):
    _save_external(_small_model(), tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    entries = {e.key: e for e in model.graph.initializer[0].external_data}
    entries["offset"].value = str(os.path.getsize(tmp_path / "weights.bin") - 4)
    onnx.save_model(model, str(tmp_path / "far.onnx"))
    with pytest.raises(JitnnValueError, match="'w'.*outside"):
        read_model(tmp_path / "far.onnx")


def test_an_onnx_model_proto_is_still_accepted_and_truncation_is_named(tmp_path):
    model = _small_model()
    x = np.ones((1, 3, 6, 6), np.float32)
    data = model.SerializeToString()
    np.testing.assert_array_equal(jitnn.onnx.run(model, {"x": x})["y"],
                                  jitnn.onnx.run(data, {"x": x})["y"])
    for cut in (len(data) - 3, len(data) // 2, 7):
        with pytest.raises(JitnnValueError, match="given bytes"):
            jitnn.onnx.run(data[:cut], {"x": x})
    assert math.prod(_proto.ModelProto.decode(data).graph.initializer[0].dims) == 8 * 27


def test_a_decoded_model_pickles_and_copies_whole():
    """The backend keeps the model and pickles it (jitnn/onnx/backend.py)."""
    import copy
    import pickle
    model = _small_model()
    ours = _proto.ModelProto.decode(model.SerializeToString())
    for again in (pickle.loads(pickle.dumps(ours)), copy.deepcopy(ours)):
        _same(again, model, "copy")
        assert again.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
        assert not again.graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_value")
