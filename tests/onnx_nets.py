"""Small ONNX graphs built node by node with ``onnx.helper``, for the tests of
the frontend's fused patterns (a test module imports no other, so the
builders live here).

* :class:`Net`: float32 initializers and typed inputs, as a model holds them;
* :class:`ReferenceNet`: float64 initializers, so that one graph gives both
  the float32 model jitnn runs and a float64 one for the reference
  (:meth:`ReferenceNet.model`'s ``dtype``);
* :func:`check`: a model run by jitnn against onnx's reference evaluator in
  float64.
"""

from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import jitnn
import jitnn.onnx


class _Nodes:
    """Nodes with fresh names; ``net(op, *inputs, outputs=n, **attrs)`` adds
    one and returns its output's name (a list of ``n`` names when ``n > 1``)."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.count = [], [], [], 0

    def __call__(self, op: str, *inputs: str, outputs: int = 1, **attrs):
        self.count += 1
        names = [f"{op.lower()}{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), names, name=names[0], **attrs))
        return names[0] if outputs == 1 else names


class Net(_Nodes):
    """Nodes, initializers and inputs of one graph, with fresh names."""

    def const(self, array, dtype=np.float32) -> str:
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    def input(self, name: str, shape, elem=TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def model(self, outputs: list[str], opset: int = 17):
        graph = helper.make_graph(
            self.nodes, "net", self.inputs,
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


class ReferenceNet(_Nodes):
    """Nodes, float64 initializers and inputs of one graph, with fresh names
    (float32 for jitnn, float64 for the reference: :meth:`model`). ``inputs``
    holds ``(name, shape, element type or None)``; None takes the model's."""

    def const(self, array, dtype=np.float64) -> str:
        self.count += 1
        self.inits.append((f"c{self.count}", np.asarray(array, dtype)))
        return f"c{self.count}"

    def input(self, name: str, shape) -> str:
        self.inputs.append((name, list(shape), None))
        return name

    def model(self, outputs: list[str], opset: int = 17, dtype=np.float32):
        elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
        inits = [numpy_helper.from_array(a.astype(dtype) if a.dtype == np.float64 else a, n)
                 for n, a in self.inits]
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info(n, t or elem, s)
                                for n, s, t in self.inputs],
            [helper.make_tensor_value_info(o, elem, None) for o in outputs], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


# --- running one against a float64 reference -----------------------------------

def float64_model(model):
    """A copy of ``model`` computing in float64."""
    import onnx
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for i, tensor in enumerate(copy.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32:
            copy.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(array.astype(np.float64), tensor.name))
    for info in copy.graph.input:
        info.type.tensor_type.elem_type = TensorProto.DOUBLE
    return copy


def check(model, feed: dict, tol: float = 2e-5) -> tuple[list[str], list[str]]:
    """jitnn against onnx's reference evaluator in float64: (the plan's step
    labels, the input layout of each conv2d the model converted to)."""
    from onnx.reference import ReferenceEvaluator
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1),
                                   input_shapes={k: v.shape for k, v in feed.items()})
    plan = jitnn.explain(next(iter(converted.dispatch(feed).values())))
    got = converted.run(feed)
    want = ReferenceEvaluator(float64_model(model)).run(
        None, {k: v.astype(np.float64) for k, v in feed.items()})
    for name, value in zip([o.name for o in model.graph.output], want):
        assert got[name].shape == value.shape, name
        err = float(np.abs(got[name] - value).max()) / max(float(np.abs(value).max()), 1e-30)
        assert err < tol, f"{name}: max error {err:.2e} of the largest magnitude"
    labels = [m.group(1) for m in re.finditer(r"^\s+\d+\s+(.+?)\s+\S+ -> \S+", plan,
                                              re.MULTILINE)]
    layouts = [r.kwargs.get("input_layout", "nchw") for r in converted.graph._ops
               if r.op == "conv2d"]
    return labels, layouts
