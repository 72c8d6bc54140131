"""The ONNX reader (jitnn/onnx/_reader.py) reads each weight from the file
straight into its array; large weights get pages of their own, so that the
plain copy a kernel packs and drops goes back to the system."""

import mmap
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jitnn.onnx._proto import to_array  # noqa: E402
from jitnn.onnx._reader import _OWN_PAGES_BYTES, read_model  # noqa: E402


def _model(weights: dict) -> bytes:
    """A model whose graph adds every weight to an input of its shape."""
    nodes, inputs, outputs = [], [], []
    for name, value in weights.items():
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        inputs.append(helper.make_tensor_value_info(f"x_{name}", elem, value.shape))
        outputs.append(helper.make_tensor_value_info(f"y_{name}", elem, value.shape))
        nodes.append(helper.make_node("Add", [f"x_{name}", name], [f"y_{name}"]))
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _has_own_map(array: np.ndarray) -> bool:
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


@pytest.mark.parametrize("source", ["bytes", "file"])
def test_weights_are_read_exactly_large_ones_into_maps_of_their_own(tmp_path, source):
    rng = np.random.default_rng(3)
    weights = {
        "large": rng.standard_normal((64, 32, 3, 3)).astype(np.float32),     # 72 KiB
        "just_below": rng.standard_normal(_OWN_PAGES_BYTES // 4 - 1).astype(np.float32),
        "just_at": rng.standard_normal(_OWN_PAGES_BYTES // 4).astype(np.float32),
        "small": rng.standard_normal((7, 3)).astype(np.float32),
        "ints": rng.integers(-9, 9, (9000, 3)).astype(np.int64),             # 211 KiB
    }
    data = _model(weights)
    if source == "file":
        path = tmp_path / "m.onnx"
        path.write_bytes(data)
        data = path
    model, arrays = read_model(data)
    got = dict(zip((t.name for t in model.graph.initializer), arrays))
    tensors = {t.name: t for t in model.graph.initializer}
    for name, expected in weights.items():
        array = got[name]
        if expected.nbytes < 256:              # too short to read apart: the proto keeps it
            assert array is None
            np.testing.assert_array_equal(to_array(tensors[name]), expected)
            continue
        assert len(tensors[name].raw_data) == 0
        assert array.dtype == expected.dtype and array.shape == expected.shape
        np.testing.assert_array_equal(array, expected)
        assert array.flags.writeable and array.ctypes.data % 64 == 0
        assert _has_own_map(array) == (expected.nbytes >= _OWN_PAGES_BYTES), name


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_write_into_the_parents_weights():
    """The maps are private (Python's default map is shared with a child)."""
    from jitnn.onnx._reader import _own_pages
    weight = _own_pages((256, 256), np.dtype(np.float32), 256 * 256 * 4)
    weight[:] = 1.0
    child = os.fork()
    if child == 0:
        weight[:] = 2.0
        os._exit(0)
    os.waitpid(child, 0)
    assert (weight == 1.0).all()
