"""The ONNX frontend: run ONNX models on jitnn.

    import jitnn.onnx
    graph = jitnn.onnx.load("resnet50.onnx")                # a jitnn Graph (GraphBuilder-built)
    outs = ctx.dispatch(graph, {"input": x})                # {output name: pending Tensor}
    result = jitnn.onnx.run("resnet50.onnx", {"input": x})  # one-off: {name: numpy array}
    model = jitnn.onnx.prepare("resnet50.onnx")             # graph + ONNX metadata, .run(inputs)

``jitnn.onnx.backend`` is an ``onnx.backend.base.Backend``, so ONNX's backend
test runner can drive jitnn. See docs/onnx.md for the op coverage, what
happens to data types, and the conformance figures.

The ``onnx`` package is optional: models are read without it (jitnn/onnx/
_proto.py decodes the file), and only ``jitnn.onnx.backend`` (ONNX's test
runner API) needs it.
"""

from __future__ import annotations

import os
from collections import ChainMap, Counter
from functools import partial
from typing import Any, Iterable, Mapping

import numpy as np

from ..context import Context, default_context
from ..errors import JitnnError, JitnnTypeError, JitnnValueError
from ..graph import GraphBuilder
from ..scheduler import explain
from ._common import (Const, Converter, LoadTimeValueError, UnsupportedError, jitnn_dtype,
                      onnx_dtype, outer_reads, refused_dtype)
from . import _convert, _convert_einsum, _convert_math, _convert_resize, _patterns, _proto
from . import (_control_flow, _convert_3d, _convert_col2im, _convert_depth_space,
               _convert_grid_sample, _convert_recurrent, _convert_topk, _group_norm)
from ._fold import FOLD, SHAPE_ONLY
from ._validate import check_input_count, ordered_nodes

#: ONNX op type -> handler(converter, inputs, attrs[, outputs]) for run-time tensors
OPS = {**_convert.OPS, **_convert_math.OPS, **_convert_resize.OPS, **_convert_einsum.OPS,
       **_convert_recurrent.OPS, **_convert_3d.OPS, **_convert_grid_sample.OPS,
       **_convert_topk.OPS, **_convert_col2im.OPS, **_convert_depth_space.OPS,
       **_control_flow.OPS, **_group_norm.OPS}
#: the handlers that take the number of outputs the node asks for
MULTI_OUTPUT = (_convert.MULTI_OUTPUT | _convert_math.MULTI_OUTPUT
                | _convert_recurrent.MULTI_OUTPUT | _convert_topk.MULTI_OUTPUT)

#: the ONNX ops the frontend accepts (on run-time tensors, or folded when constant)
SUPPORTED_OPS = tuple(sorted(set(OPS) | set(FOLD)))

__all__ = ["load", "run", "prepare", "explain_model", "OnnxModel", "UnsupportedError",
           "LoadTimeValueError", "SUPPORTED_OPS", "MIN_OPSET", "require_onnx"]

#: a folded constant this large is dropped once the last node that reads it has converted
_DROPPED_BYTES = 1 << 22

#: the oldest default-domain opset the frontend accepts (opset 6 models load
#: where their ops mean the same as in opset 7: the legacy ``broadcast``
#: attribute of the binary ops is honoured)
MIN_OPSET = 6


def require_onnx():
    """The ``onnx`` module, or an ImportError saying how to get it."""
    try:
        import onnx
    except ImportError as error:
        raise ImportError(
            "jitnn.onnx.backend needs the onnx package, which is not installed: pip install onnx "
            "(or pip install 'jitnn[test]')") from error
    return onnx


def _source_name(path_or_model) -> str:
    """How errors name where a model came from."""
    if isinstance(path_or_model, (bytes, bytearray)):
        return f"the given bytes ({len(path_or_model)} bytes)"
    if isinstance(path_or_model, (str, os.PathLike)):
        return repr(os.fspath(path_or_model))
    raise JitnnTypeError(f"onnx: expected a path, bytes or an onnx.ModelProto, got "
                         f"{type(path_or_model).__name__}")


def _is_onnx_model(value) -> bool:
    """An ``onnx.ModelProto`` (told without importing onnx)."""
    return type(value).__name__ == "ModelProto" and hasattr(value, "SerializeToString") \
        and not isinstance(value, _proto.Message)


def _model_and_weights(path_or_model) -> tuple[Any, str | None, list | None]:
    """The model (jitnn/onnx/_proto.py's messages), how errors name where it
    came from (the path, "the given bytes"; None for a model object) and the
    initializers read straight into numpy arrays (jitnn/onnx/_reader.py):
    ``weights[i]`` the array of initializer ``i``, None where the message
    holds its values. An ``onnx.ModelProto`` is serialized and read the same
    way. A file that is not a well-formed ONNX model (truncated, corrupt, not
    ONNX) raises a :class:`JitnnValueError` naming it."""
    from ._reader import read_model
    if isinstance(path_or_model, _proto.ModelProto):
        return path_or_model, None, None
    if _is_onnx_model(path_or_model):
        source, data = None, path_or_model.SerializeToString()
    else:
        source, data = _source_name(path_or_model), path_or_model
    named = source or "the given onnx.ModelProto"
    try:
        model, weights = read_model(data)
    except _proto.DecodeError as error:
        raise JitnnValueError(f"onnx: cannot read {named}: it is not an ONNX model, or it is "
                              f"truncated or corrupt ({error})") from None
    # an empty file decodes as an empty model, a truncated one rarely does
    if not model.HasField("graph"):
        raise JitnnValueError(f"onnx: cannot read {named}: it has no graph (an empty or "
                              "truncated file, or not an ONNX model)")
    return model, source, weights


def _model_proto(path_or_model) -> tuple[Any, str | None]:
    """The model with every initializer's values in its message (the backend
    keeps it, and pickles it), and how errors name its source."""
    model, source, weights = _model_and_weights(path_or_model)
    for tensor, array in zip(model.graph.initializer, weights or ()):
        if array is not None:
            tensor.raw_data = array.tobytes()
    return model, source


def _elem_type(value_info) -> int:
    return value_info.type.tensor_type.elem_type


def _declared_shape(value_info) -> list | None:
    """The declared dims of a graph input: an int for a static dim, the
    dim_param (str) or None for a free one; None when the rank is unknown."""
    shape = value_info.type.tensor_type
    if not shape.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in shape.shape.dim]


def _format_dims(dims) -> str:
    """Declared dims for an error: ``(N, 3, ?)`` (? for a dim with no value or name)."""
    text = ", ".join("?" if d is None or d == 0 else str(d) for d in dims)
    return f"({text},)" if len(dims) == 1 else f"({text})"


def _refuse_non_tensor_inputs(graph) -> None:
    """A sequence, optional or map graph input (given as a list, None, a dict)
    is refused before its value is looked at: jitnn keeps sequences while
    loading only, and runs tensor inputs."""
    initializers = {t.name for t in graph.initializer}
    for info in graph.input:
        kind = next((k for k in ("sequence_type", "optional_type", "map_type")
                     if info.type.HasField(k)), None)
        if kind is not None and info.name not in initializers:
            raise UnsupportedError(f"onnx: input {info.name!r} is an ONNX "
                                   f"{kind.split('_')[0]}: jitnn runs tensor inputs only")


def _check_inputs(graph, inputs: Mapping[str, Any]) -> None:
    """Refuse what ``run`` would otherwise ignore or guess around: names that
    are not inputs of ``graph`` (an ``onnx.GraphProto``) and arrays whose shape
    contradicts a static declared dim (a dim_param, 0 or missing dim matches
    anything, and so does an input declared without a shape)."""
    declared = {info.name: info for info in graph.input}
    unknown = sorted(name for name in inputs if name not in declared)
    if unknown:
        defaults = {t.name for t in graph.initializer}
        names = sorted(name for name in declared if name not in defaults)
        with_default = sorted(name for name in declared if name in defaults)
        raise JitnnTypeError(
            f"onnx: unknown input{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))} (the model's inputs: {names}"
            + (f"; with a default (an initializer): {with_default}" if with_default else "")
            + ")")
    for name, value in inputs.items():
        dims = _declared_shape(declared[name])
        array = np.asarray(value)
        # object arrays (a TensorProto for bfloat16 data...) have no shape to
        # compare: the conversion refuses their dtype with a clearer message
        if dims is None or array.dtype == object:
            continue
        got = array.shape
        if len(got) != len(dims) or any(isinstance(d, int) and d > 0 and d != g
                                        for d, g in zip(dims, got)):
            raise JitnnValueError(f"onnx: input {name!r} has shape {got}, but the model "
                                  f"declares {_format_dims(dims)}")


class OnnxModel:
    """An ONNX model converted for one set of input shapes: the jitnn
    :class:`~jitnn.Graph` (``.graph``) and the ONNX facts around it.

    ``inputs``: ``{name: shape}`` of the run-time inputs (the graph's);
    ``input_dtypes``: ``{name: numpy dtype}`` of those, as the ONNX model
    types them (a bool input is a uint8 graph input; ``run`` takes bools);
    ``outputs``: the ONNX output names in order; ``constant_outputs``: outputs
    known at load time (folded, in their ONNX dtype); ``jitnn_ops``: how many
    jitnn ops the graph has; ``load_time_inputs``: the ONNX inputs whose values
    ``prepare`` fixed (``constants``, initializer defaults), which ``run``
    refuses.
    """

    def __init__(self, ctx, graph, inputs, outputs, constant_outputs, output_dtypes,
                 jitnn_ops: int, opset: int, load_time_inputs: Iterable[str] = (),
                 input_dtypes: Mapping[str, np.dtype] | None = None):
        self.ctx = ctx
        self.input_dtypes = dict(input_dtypes or {name: np.dtype(np.float32) for name in inputs})
        self.load_time_inputs = frozenset(load_time_inputs)
        self.graph = graph
        self.inputs = inputs
        self.outputs = outputs
        self.constant_outputs = constant_outputs
        self.output_dtypes = output_dtypes
        self.jitnn_ops = jitnn_ops
        self.opset = opset

    def __repr__(self) -> str:
        return (f"OnnxModel(opset {self.opset}, inputs={self.inputs}, outputs={self.outputs}, "
                f"{self.jitnn_ops} jitnn ops)")

    def dispatch(self, inputs: Mapping[str, Any]) -> dict:
        """``{output name: pending Tensor}`` of the graph's outputs (constant
        outputs are left out: see ``constant_outputs``)."""
        if self.graph is None:
            return {}
        missing = [name for name in self.graph.inputs if name not in inputs]
        if missing:
            raise JitnnTypeError(f"onnx: missing input {missing[0]!r} (the model's inputs: "
                                 f"{sorted(self.inputs)})")
        feed = {name: self._input_value(name, inputs[name]) for name in self.graph.inputs}
        return self.ctx.dispatch(self.graph, feed)

    def _input_value(self, name: str, value):
        """``value`` for the graph input ``name``: float32 inputs take float32
        arrays (or Tensors); integer and bool inputs take integer or bool
        data (bools become uint8 0/1), never floating-point data."""
        dtype = self.input_dtypes.get(name, np.dtype(np.float32))
        if dtype == np.float32:
            if isinstance(value, np.ndarray) and value.dtype != np.float32:
                raise JitnnTypeError(f"onnx: input {name!r} has dtype {value.dtype}, expected "
                                     "float32")
            return value
        if hasattr(value, "_materialize"):      # a jitnn Tensor: the graph checks its type
            return value
        array = np.asarray(value)
        if array.dtype.kind not in "iub":
            raise JitnnTypeError(f"onnx: input {name!r} is {dtype}, got {array.dtype} data "
                                 f"(give {'bools' if dtype == np.bool_ else 'integers'})")
        if dtype == np.bool_:
            return (array != 0).astype(np.uint8)
        target = jitnn_dtype(dtype)
        if array.dtype != target:
            info = np.iinfo(target)
            if array.size and (int(array.min()) < info.min or int(array.max()) > info.max):
                raise JitnnValueError(f"onnx: input {name!r} ({dtype}) has values outside "
                                      f"{target}'s range, which holds it")
            array = array.astype(target)
        return array

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """``{output name: numpy array}``, in the ONNX outputs' order and dtypes."""
        missing = [name for name in self.inputs if name not in inputs]
        if missing:
            raise JitnnTypeError(f"onnx: missing input {missing[0]!r} (the model's inputs: "
                                 f"{sorted(self.inputs)})")
        # an input run() would ignore is a mistake: a typo, or a value that
        # prepare already folded into the graph
        unknown = sorted(name for name in inputs if name not in self.inputs)
        if unknown:
            folded = [name for name in unknown if name in self.load_time_inputs]
            raise JitnnTypeError(
                f"onnx: unknown input{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))} (the model's inputs: {sorted(self.inputs)}"
                + (f"; fixed when the model was prepared: {folded}, prepare it again to change "
                   "them" if folded else "") + ")")
        arrays: dict[str, np.ndarray] = {}
        if self.graph is not None:
            # compute, not dispatch and read: a graph computed again replays
            # its recorded program (bound kernel calls, the plan's buffers),
            # which the lazy path plans and checks anew at every call
            feed = {name: self._input_value(name, inputs[name]) for name in self.graph.inputs}
            arrays = {name: np.empty(shape, self.graph.output_dtypes[name])
                      for name, shape in self.graph.outputs.items()}
            self.ctx.compute(self.graph, feed, arrays)
        result = {}
        for name in self.outputs:
            if name in self.constant_outputs:
                result[name] = np.array(self.constant_outputs[name])
            else:
                dtype = self.output_dtypes.get(name)
                array = arrays[name]
                if dtype is not None and dtype != array.dtype:
                    array = array != 0 if dtype == np.bool_ else array.astype(dtype)
                result[name] = array
        return result


class _Attributes(dict):
    """A node's attributes; a required one that is missing raises a
    JitnnValueError naming the node, instead of a bare KeyError."""

    def __init__(self, cv, items: dict):
        super().__init__(items)
        self._cv = cv

    def __missing__(self, name: str):
        raise self._cv.invalid(f"the required attribute {name!r} is missing")


def prepare(path_or_model, ctx=None, *, input_shapes: Mapping[str, Any] | None = None,
            constants: Mapping[str, Any] | None = None, batch: int = 1) -> OnnxModel:
    """Convert an ONNX model (a path, bytes or ``onnx.ModelProto``) for ``ctx``.

    ``input_shapes``: ``{name: shape}`` for inputs whose declared shape has
    symbolic or unknown dimensions (those default to ``batch`` for the first
    dimension and 1 for the others);
    ``constants``: ``{name: array}`` values of inputs to fold at load time
    like initializers (shape tensors, pads, scales: what jitnn needs at load
    time); the other integer and bool inputs are run-time graph inputs.
    ``input_shapes`` may override static dims too (a batch-1 export run at
    batch 8); :func:`run`, which takes the shapes from its arrays, refuses
    that. Raises :class:`UnsupportedError` naming the op, the node and its
    opset for what jitnn cannot run, and :class:`~jitnn.JitnnValueError` for
    a broken model (an undefined input, a cycle, a value written twice, ...).
    """
    model, source, weights = _model_and_weights(path_or_model)
    return _prepare(model, source, ctx, input_shapes=input_shapes, constants=constants,
                    batch=batch, weights=weights)


def _prepare(model, source: str | None, ctx, *, input_shapes: Mapping[str, Any] | None,
             constants: Mapping[str, Any] | None, batch: int,
             weights: list | None = None) -> OnnxModel:
    """:func:`prepare` of a parsed model; ``source`` names its file in errors;
    ``weights``: the initializers' arrays read apart from the proto (see
    :func:`_model_and_weights`)."""

    ctx = ctx or default_context()
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise UnsupportedError(f"onnx: the model{f' in {source}' if source else ''} imports no "
                               "default-domain (ai.onnx) opset")
    if opset < MIN_OPSET:
        raise UnsupportedError(f"onnx: opset {opset} is older than jitnn supports "
                               f"({MIN_OPSET} and newer; convert it with "
                               "onnx.version_converter)")
    graph = model.graph
    order = ordered_nodes(graph)          # refuses a broken graph before any work
    input_names = {info.name for info in graph.input}
    for option, given in (("input_shapes", input_shapes), ("constants", constants)):
        unknown = sorted(name for name in given or {} if name not in input_names)
        if unknown:
            raise JitnnValueError(f"onnx: {option} names {', '.join(map(repr, unknown))}, not "
                                  f"an input of the model (its inputs: {sorted(input_names)})")
    builder = GraphBuilder(ctx)
    cv = Converter(builder, opset)
    values: dict[str, Any] = {}
    cv.scope, cv.convert_subgraph = values, partial(_convert_subgraph, cv)
    for i, tensor in enumerate(graph.initializer):
        array = None if weights is None else weights[i]
        values[tensor.name] = Const(_proto.to_array(tensor) if array is None else array,
                                    tensor.name)
    input_shapes = dict(input_shapes or {})
    constants = dict(constants or {})
    run_inputs: dict[str, tuple[int, ...]] = {}
    input_dtypes: dict[str, np.dtype] = {}
    for info in graph.input:
        name = info.name
        if name in values and name not in input_shapes and name not in constants:
            continue                       # an initializer listed as an input (opset < 9 style)
        if name in constants:
            # a copy: the graph may keep the array itself (Converter.operand)
            values[name] = Const(np.array(constants[name]), name)
            continue
        code = _elem_type(info)
        if not code:
            raise UnsupportedError(f"onnx: input {name!r} is not a tensor (sequence, optional "
                                   "and map inputs are not supported) or has no data type")
        dtype = onnx_dtype(code)
        held = jitnn_dtype(dtype)
        if held is None:
            raise UnsupportedError(f"onnx: input {name!r} is {refused_dtype(dtype)}")
        if name in input_shapes:
            shape = input_shapes[name]      # builder.input checks it: ints, not int(2.7)
        else:
            shape = tuple(d if isinstance(d, int) and d > 0 else (batch if i == 0 else 1)
                          for i, d in enumerate(_declared_shape(info) or []))
        values[name] = builder.input(name, shape, dtype=held)
        if dtype == np.bool_:
            cv.mark_bool(values[name])
        run_inputs[name] = values[name].shape
        input_dtypes[name] = dtype

    # a large constant that no node left will read is dropped as the conversion goes:
    # folded index grids can be hundreds of MB each (graph outputs are kept; small ones
    # stay, as the patterns read scalars upstream of their nodes, e.g. a mask's fill)
    reads = {index: list(dict.fromkeys(name for name in [*graph.node[index].input,
                                                          *outer_reads(graph.node[index])]
                                       if name)) for index in order}
    pending = Counter(name for names in reads.values() for name in names)
    kept = {info.name for info in graph.output}
    # transformer patterns (attention, GELU, linear + activation, layer norm) convert
    # as fused ops: their nodes are held back and written at once (jitnn/onnx/_patterns.py)
    for index in _patterns.walk(graph, order, values, cv):
        _convert_node(cv, graph.node[index], index, values)
        for name in reads[index]:
            pending[name] -= 1
            value = values.get(name)
            if not pending[name] and name not in kept and isinstance(value, Const) \
                    and value.array.nbytes >= _DROPPED_BYTES:
                del values[name]

    cv.node = None
    outputs: dict[str, Any] = {}
    constant_outputs: dict[str, np.ndarray] = {}
    output_dtypes: dict[str, np.dtype] = {}
    for info in graph.output:
        value = values.get(info.name)
        if value is None:
            raise JitnnValueError(f"onnx: output {info.name!r} is not computed by any node")
        if isinstance(value, _control_flow.Sequence):
            raise UnsupportedError(f"onnx: output {info.name!r} is an ONNX sequence; jitnn "
                                   "keeps sequences while loading only (its outputs are "
                                   "tensors)")
        if isinstance(value, Const):
            constant_outputs[info.name] = value.array
            continue
        code = _elem_type(info)
        dtype = onnx_dtype(code) if code else cv.onnx_type(value)
        held = jitnn_dtype(dtype)
        if held is None:
            raise UnsupportedError(f"onnx: output {info.name!r} is {refused_dtype(dtype)}")
        if held != value.dtype:
            # a value of another type than the model declares: cast it in the graph
            cv.node = None
            if dtype == np.bool_:
                value = cv.op("not_equal", value, np.zeros((), value.dtype))
            else:
                value = cv.op("cast", value, held)
        output_dtypes[info.name] = dtype
        outputs[info.name] = value
    jitnn_graph = builder.build(outputs) if outputs else None
    # break the cycle converter -> convert_subgraph -> converter: it would keep the
    # table of ONNX values, every initializer's plain array in it, until Python's
    # cycle collector ran (after the weights were packed: ResNet-50's peak memory
    # 194 -> 284 MB)
    cv.scope = cv.convert_subgraph = None
    return OnnxModel(ctx, jitnn_graph, run_inputs, [o.name for o in graph.output],
                     constant_outputs, output_dtypes, cv.jitnn_ops, opset,
                     load_time_inputs=input_names - set(run_inputs), input_dtypes=input_dtypes)


def _convert_node(cv: Converter, node, index: int, values) -> None:
    """Convert ``node`` (at ``index`` of its graph): fold it with numpy when
    its inputs are constants, else add its jitnn ops; its outputs' values go
    into ``values`` (a subgraph's scope, whose reads fall through to the
    scopes around it)."""
    cv.node, cv.index = node, index
    if node.domain not in ("", "ai.onnx"):
        raise UnsupportedError(f"onnx: {node.op_type} (node {node.name or node.output[0]!r}, "
                               f"domain {node.domain!r}) is not supported by jitnn: only "
                               "the default ONNX domain is")
    check_input_count(cv, node)
    attrs = _Attributes(cv, {a.name: _attribute(a) for a in node.attribute})
    inputs = []
    for name in node.input:
        if not name:
            inputs.append(None)
        elif name in values:
            inputs.append(values[name])
        else:   # the main graph's names were checked (ordered_nodes); a subgraph's are here
            raise cv.invalid(f"input {name!r} is not defined (no node writes it, and no "
                             "input or initializer of this graph or those around it has "
                             "that name)")
    cv.inputs, cv.input_names = inputs, list(node.input)
    present = [v for v in inputs if v is not None]
    outputs_wanted = len([o for o in node.output])
    op_type = node.op_type
    if op_type not in _control_flow.SEQUENCE_OPS and (op_type in OPS or op_type in FOLD) and any(
            isinstance(v, _control_flow.Sequence) for v in present):
        raise cv.unsupported("an input is an ONNX sequence; only the Sequence* ops, "
                             "ConcatFromSequence, Loop, If and Identity take sequences")
    if op_type in FOLD and (all(isinstance(v, Const) for v in present)
                            or op_type in SHAPE_ONLY):
        arrays = [None if v is None else (v.array if isinstance(v, Const) else
                                           np.empty(v.shape, np.float32)) for v in inputs]
        try:
            # ONNX's values (log(0) = -inf, NaN cast to int...), without numpy's warnings
            with np.errstate(all="ignore"):
                results = [Const(np.asarray(a)) for a in FOLD[op_type](cv, arrays, attrs,
                                                                       outputs_wanted)]
        except (JitnnError, ImportError):
            raise
        except (ValueError, TypeError, IndexError) as error:
            # numpy refusing a fold's inputs: a broken model, named by its node
            raise cv.invalid(f"cannot compute it at load time: {error}") from error
    elif op_type in OPS:
        handler = OPS[op_type]
        if op_type in MULTI_OUTPUT:
            results = handler(cv, inputs, attrs, outputs_wanted)
        else:
            results = handler(cv, inputs, attrs)
    elif op_type in FOLD:
        raise LoadTimeValueError(
            f"onnx: {cv.where()}: jitnn folds {op_type} only when its inputs are known at "
            "load time, but an input is a run-time tensor",
            tuple(name for name, v in zip(node.input, inputs) if v is not None
                  and not isinstance(v, Const)))
    else:
        raise cv.unsupported(f"the op {op_type} is not supported by jitnn (the "
                             "supported ops: jitnn.onnx.SUPPORTED_OPS, docs/onnx.md)")
    if len(results) < len([o for o in node.output if o]):
        raise cv.unsupported(f"{len(node.output)} outputs requested, jitnn gives "
                             f"{len(results)}")
    for name, value in zip(node.output, results):
        if name:
            values[name] = value


def _convert_subgraph(cv: Converter, graph, bound: Mapping[str, Any]) -> list:
    """Convert a subgraph (an If branch, a Loop or Scan body) into the
    builder: its inputs' values ``bound``, its initializers, and the values of
    the scopes around it readable by name; the names it writes stay in a scope
    of its own (a body converted once per iteration writes them anew each
    time). Returns its outputs' values."""
    scope = ChainMap(dict(bound), cv.scope)
    for tensor in graph.initializer:
        key = ("initializer", id(tensor))
        if key not in cv.shared:          # one Const (and builder constant) per initializer
            cv.shared[key] = (tensor, Const(_proto.to_array(tensor), tensor.name))
        scope[tensor.name] = cv.shared[key][1]
    saved = cv.node, cv.index, cv.inputs, cv.input_names, cv.scope
    cv.scope = scope
    try:
        for index, node in enumerate(graph.node):
            _convert_node(cv, node, index, scope)
        missing = [info.name for info in graph.output if info.name not in scope]
    finally:
        cv.node, cv.index, cv.inputs, cv.input_names, cv.scope = saved
    if missing:
        raise cv.invalid(f"the subgraph's output {missing[0]!r} is not computed by any node")
    return [scope[info.name] for info in graph.output]


def _prepare_for_values(model, source: str | None, ctx, feed: Mapping[str, np.ndarray],
                        weights: list | None = None) -> tuple[OnnxModel, frozenset]:
    """:func:`prepare` for these input arrays (``run``, the backend): every input
    runs at run time, except those that the conversion needs at load time (a
    shape, the pads, Resize's scales...), which it names, and which are then
    folded as ``constants`` with the values given. Returns the model and the
    names folded (the values the conversion depends on)."""
    folded: set[str] = set()
    while True:
        try:
            converted = _prepare(
                model, source, ctx,
                input_shapes={n: np.shape(a) for n, a in feed.items() if n not in folded},
                constants={n: np.asarray(a) for n, a in feed.items() if n in folded}, batch=1,
                weights=weights)
            return converted, frozenset(folded)
        except LoadTimeValueError as error:
            wanted = set(error.names) & set(feed)
            if not wanted <= folded and wanted:
                folded |= wanted
                continue
            # a value computed from an input: fold the integer inputs (shape data)
            integers = {n for n, a in feed.items() if np.asarray(a).dtype.kind in "iub"}
            if integers <= folded:
                raise
            folded |= integers


def _attribute(attribute):
    value = _proto.attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def load(path_or_model, ctx=None, *, input_shapes: Mapping[str, Any] | None = None,
         constants: Mapping[str, Any] | None = None, batch: int = 1):
    """The jitnn :class:`~jitnn.Graph` of an ONNX model (see :func:`prepare`
    for the options). Its inputs and outputs keep the ONNX names; run it with
    ``ctx.dispatch(graph, {name: array})`` or ``ctx.compute``. Initializers are
    the graph's constants, read from a file straight into their arrays (packed
    once, reused by every dispatch; a weight only a conv or matmul reads is then
    kept packed only). Outputs
    that the model computes from constants alone are not in the graph (use
    :func:`prepare`, whose ``constant_outputs`` holds them)."""
    model = prepare(path_or_model, ctx, input_shapes=input_shapes, constants=constants,
                    batch=batch)
    if model.graph is None:
        raise JitnnValueError("onnx: every output of this model is a constant; use "
                              "jitnn.onnx.prepare(...).constant_outputs")
    return model.graph


def run(path_or_model, inputs: Mapping[str, Any], ctx=None) -> dict[str, np.ndarray]:
    """Run a model once on ``inputs`` ({name: array}): ``{output name: numpy
    array}``. Float inputs must be float32; integer/bool inputs run at run
    time, unless the conversion needs their values at load time (shape
    tensors, pads...: they are folded then). A name that is not an input
    of the model, or an array whose shape contradicts a static dim the model
    declares, raises a :class:`~jitnn.JitnnError`."""
    if not isinstance(inputs, Mapping):
        raise JitnnTypeError(f"onnx.run: inputs must be a dict {{name: array}}, got "
                             f"{type(inputs).__name__}")
    proto, source, weights = _model_and_weights(path_or_model)
    _refuse_non_tensor_inputs(proto.graph)
    _check_inputs(proto.graph, inputs)
    model, folded = _prepare_for_values(proto, source, ctx, inputs, weights)
    return model.run({name: value for name, value in inputs.items() if name not in folded})


def explain_model(path_or_model, *, batch: int = 1, threads: int | None = None,
                  policy: str = "blocked", runs: int = 2, seed: int = 0) -> str:
    """What ``jitnn explain MODEL.onnx`` prints: the model's facts, then
    ``jitnn.explain`` of each output after ``runs`` dispatches on random
    inputs (the last run's plan: groups, layouts, reorders, peak memory and
    the measured time per group; the first run compiles and packs)."""
    import time


    ctx = Context(num_threads=threads, policy=policy)
    model = prepare(path_or_model, ctx, batch=batch)
    rng = np.random.default_rng(seed)
    inputs = {name: rng.standard_normal(shape).astype(np.float32)
              if model.input_dtypes[name] == np.float32 else
              np.zeros(shape, model.input_dtypes[name])          # integers: valid indices
              for name, shape in model.inputs.items()}
    seconds = []
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        outputs = model.dispatch(inputs)
        ctx.read_all(list(outputs.values()))
        seconds.append(time.perf_counter() - started)
    lines = [f"{model!r}",
             f"context: {ctx.num_threads} thread(s), block {ctx.block}, policy {policy}; "
             f"random inputs {dict(model.inputs)}",
             "run times: " + ", ".join(f"{1e3 * s:.1f} ms" for s in seconds)
             + " (the first compiles kernels and packs filters)", ""]
    for name, tensor in outputs.items():
        lines += [f"output {name!r}:", explain(tensor), ""]
    for name in model.constant_outputs:
        lines.append(f"output {name!r}: a constant (folded at load time)")
    return "\n".join(lines).rstrip() + "\n"
