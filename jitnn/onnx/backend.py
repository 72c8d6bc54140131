"""``jitnn.onnx.backend``: an ``onnx.backend.base.Backend`` running models on jitnn,
so that ONNX's backend test runner (``onnx.backend.test.BackendTest``) can drive it.

``prepare(model)`` checks the model and returns a :class:`JitnnRep`; its
``run(inputs)`` converts the model for the shapes of the inputs it gets (a
jitnn graph is built for fixed shapes; one conversion per distinct set of
shapes, cached) and returns the outputs in the model's order. Float inputs
must be float32; integer and bool inputs are run-time graph inputs too,
except those whose values the conversion needs at load time (shape tensors,
pads, Resize's scales...): those are folded, and their values are part of
the cache key.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import JitnnTypeError
from . import (_check_inputs, _model_proto, _prepare_for_values, _refuse_non_tensor_inputs,
               require_onnx)

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
        self._folded: dict = {}          # input shapes -> the inputs folded at load time

    def __getstate__(self) -> dict:
        # a pickle holds the model (its protobuf bytes) and the context (as its
        # arguments: jitnn/defaults.py), not the conversions: the receiving
        # process converts again at its first run, its kernels from the disk cache
        return {**self.__dict__, "_converted": {}, "_folded": {}}

    def converted(self, feed: dict):
        """The :class:`jitnn.onnx.OnnxModel` for these inputs' shapes and types
        (and the values of the inputs folded at load time), cached."""
        shapes = tuple((name, feed[name].dtype.str, feed[name].shape)
                       for name in self.input_names if name in feed)
        folded = self._folded.get(shapes)
        key = None if folded is None else \
            (shapes, tuple(feed[name].tobytes() for name in sorted(folded)))
        model = self._converted.get(key)
        if model is None:
            model, folded = _prepare_for_values(self.model, None, self.ctx, feed)
            self._folded[shapes] = folded
            key = (shapes, tuple(feed[name].tobytes() for name in sorted(folded)))
            self._converted[key] = model
        return model

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        _refuse_non_tensor_inputs(self.model.graph)
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
        if not cls.supports_device(device):
            raise ValueError(f"jitnn runs on the CPU only, not {device!r}")
        # a path, bytes or onnx.ModelProto, read into jitnn's messages (read errors name it)
        model, _ = _model_proto(model)
        return JitnnRep(model, kwargs.get("ctx"))

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs: Any, device: str = "CPU", outputs_info=None,
                 **kwargs: Any) -> tuple:
        """Run one node: a one-node model is made around it (inputs of the
        arrays' types, outputs of the types jitnn computes; opset from ``opset_version`` or the installed onnx's default)."""
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
        # no declared type: the outputs come back in the types jitnn computes
        graph_outputs = [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
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
