"""``jitnn.onnx.backend``: an ``onnx.backend.base.Backend`` running models on jitnn,
so that ONNX's backend test runner (``onnx.backend.test.BackendTest``) can drive it.

``prepare(model)`` checks the model and returns a :class:`JitnnRep`; its
``run(inputs)`` converts the model for the shapes of the inputs it gets (a
jitnn graph is built for fixed shapes; one conversion per distinct set of
shapes, cached) and returns the outputs in the model's order. Float inputs
must be float32; integer and bool inputs are index or shape tensors, folded
at load time (their values are part of the cache key).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import JitnnTypeError
from . import _check_inputs, _model_proto, require_onnx
from . import prepare as _prepare

require_onnx()

from onnx.backend.base import Backend, BackendRep  # noqa: E402


class JitnnRep(BackendRep):
    """A prepared model: converted to a jitnn graph per input shapes at ``run``."""

    def __init__(self, model, ctx=None):
        self.model = model
        self.ctx = ctx
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in initializers]
        self.output_names = [o.name for o in model.graph.output]
        self._converted: dict = {}

    def _key(self, feed: dict) -> tuple:
        parts = []
        for name in self.input_names:
            array = feed[name]
            if array.dtype.kind in "iub":
                parts.append((name, array.dtype.str, array.shape, array.tobytes()))
            else:
                parts.append((name, array.dtype.str, array.shape))
        return tuple(parts)

    def converted(self, feed: dict):
        """The :class:`jitnn.onnx.OnnxModel` for these inputs' shapes (cached)."""
        key = self._key(feed)
        model = self._converted.get(key)
        if model is None:
            shapes = {n: a.shape for n, a in feed.items() if a.dtype.kind not in "iub"}
            constants = {n: a for n, a in feed.items() if a.dtype.kind in "iub"}
            model = _prepare(self.model, self.ctx, input_shapes=shapes, constants=constants)
            self._converted[key] = model
        return model

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feed = {name: np.asarray(value) for name, value in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):   # zip would drop the extra ones
                raise JitnnTypeError(f"onnx: {len(inputs)} inputs given, the model has "
                                     f"{len(self.input_names)}: {self.input_names}")
            feed = {name: np.asarray(value) for name, value in zip(self.input_names, inputs)}
        _check_inputs(self.model.graph, feed)
        model = self.converted(feed)
        result = model.run({n: a for n, a in feed.items() if n in model.inputs})
        return tuple(result[name] for name in self.output_names)


class JitnnBackend(Backend):
    """ONNX backend API over jitnn (CPU only)."""

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> JitnnRep:
        onnx = require_onnx()
        if not cls.supports_device(device):
            raise ValueError(f"jitnn runs on the CPU only, not {device!r}")
        if not isinstance(model, onnx.ModelProto):   # a path or bytes: read errors name it
            model, _ = _model_proto(model)
        return JitnnRep(model, kwargs.get("ctx"))

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs: Any, device: str = "CPU", outputs_info=None,
                 **kwargs: Any) -> tuple:
        """Run one node: a one-node model is made around it (float32 inputs,
        opset from ``opset_version`` or the installed onnx's default)."""
        onnx = require_onnx()
        from onnx import helper
        if isinstance(inputs, dict):
            arrays = [np.asarray(inputs[name]) for name in node.input if name]
        else:
            arrays = [np.asarray(a) for a in inputs]
        names = [name for name in node.input if name]
        graph_inputs = [helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
            for name, a in zip(names, arrays)]
        graph_outputs = [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                         for name in node.output if name]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().startswith("CPU")


prepare = JitnnBackend.prepare
run_model = JitnnBackend.run_model
run_node = JitnnBackend.run_node
supports_device = JitnnBackend.supports_device
is_compatible = JitnnBackend.is_compatible
