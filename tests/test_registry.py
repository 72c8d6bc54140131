"""The op registry (jitnn/registry.py): every op jitnn offers is declared once,
with a reference the tests can look up by name, a builder method, and the
ONNX op types that map to it; the scheduler finds every node kind's role
there."""

import numpy as np
import pytest

import jitnn
from jitnn import registry
from jitnn.graph import GRAPH_OPS
from jitnn.tensor import Node

#: jitnn's ops: the functions of jitnn.__all__ that make tensors from tensors
OPS = sorted(name for name in jitnn.__all__ if callable(getattr(jitnn, name))
             and name not in {"Context", "Stats", "Tensor", "JitnnError", "JitnnExecutionError",
                              "JitnnTypeError", "JitnnValueError", "default_context",
                              "host_block", "read_all", "reorder", "tensor", "explain",
                              "Graph", "GraphBuilder", "Operand", "show_layout", "warmup"})


def test_every_op_is_registered_once_with_its_function():
    names = [op.name for op in registry.ops()]
    assert len(names) == len(set(names))
    assert sorted(names) == OPS
    for op in registry.ops():
        assert op.function is getattr(jitnn, op.name), op.name
        assert callable(op.reference), op.name


def test_every_registered_op_is_a_builder_method():
    for op in registry.ops():
        assert op.name in GRAPH_OPS and hasattr(jitnn.GraphBuilder, op.name), op.name


def test_onnx_names_are_supported_by_the_frontend():
    pytest.importorskip("onnx")
    import jitnn.onnx
    for op in registry.ops():
        for onnx_name in op.onnx:
            assert onnx_name in jitnn.onnx.SUPPORTED_OPS, (op.name, onnx_name)


@pytest.mark.parametrize("name,args,kwargs", [
    ("relu", [np.array([-1.0, 2.0])], {}),
    ("clamp", [np.array([-1.0, 2.0])], {"min_value": 0.0, "max_value": 1.0}),
    ("add", [np.array([1.0, 2.0]), np.array([3.0, 4.0])], {}),
    ("maximum", [np.array([1.0, 5.0]), np.array([3.0, 4.0])], {}),
])
def test_references_are_looked_up_by_name(name, args, kwargs):
    want = {"relu": [0.0, 2.0], "clamp": [0.0, 1.0], "add": [4.0, 6.0], "maximum": [3.0, 5.0]}
    got = registry.reference(name)(*args, **kwargs)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want[name])
    eager = registry.op(name).function(*[a.astype(np.float32) for a in args], **kwargs)
    np.testing.assert_allclose(eager.numpy(), got, rtol=1e-6)


def test_node_kinds_have_roles():
    kinds = {k: registry.kind_of(Node("x", kind=k)) for k in
             ("conv2d", "matmul", "eltwise", "eltwise_plain", "something_new")}
    assert kinds["conv2d"].role == "anchor" and kinds["conv2d"].fold is not None
    assert kinds["matmul"].role == "anchor" and kinds["matmul"].absorb is not None
    assert kinds["eltwise"].role == kinds["eltwise_plain"].role == "elementwise"
    assert kinds["something_new"] is registry.OPAQUE     # run as it is, never fused
    with pytest.raises(ValueError, match="registered already"):
        registry.register_kind(registry.NodeKind("conv2d"))
