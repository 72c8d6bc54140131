"""The graph API, WebNN style: build a graph once, dispatch it many times.

    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, 64, 56, 56))
    w = b.constant(w_array)                       # copied now, packed once, reused
    g = b.build({"y": b.relu(b.conv2d(x, w, padding=1))})
    outs = ctx.dispatch(g, {"x": t})              # {"y": pending Tensor}: validated now, lazy
    ctx.compute(g, {"x": x_array}, {"y": y_out})  # synchronous, into the caller's arrays

Every op of the eager API is a builder method with the same arguments, where
tensors are the builder's operands. Shapes are inferred and options validated
when the op is added (the eager op runs on shape-only placeholders, so the
graph and eager ops share one definition and one set of errors). A dispatch
replays the ops on real tensors as pending work: the scheduler then fuses and
plans the whole graph at once, exactly as it does for eager calls. A compute
does that once and then replays the scheduled plan on new inputs (see
jitnn/replay.py): no op is re-dispatched and no pass runs again.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import ops as _ops  # noqa: F401 - registers every op
from . import registry
from .context import Context, default_context
from .errors import JitnnTypeError, JitnnValueError
from .layouts import plain_tag
from .limits import shape_arg
from .tensor import DTYPES, FLOAT32, Node, Tensor, Value, as_array_copy, dtype_arg, host_array


#: the eager ops a builder offers as methods (same names and arguments): every
#: registered op (jitnn/registry.py)
GRAPH_OPS = tuple(op.name for op in registry.ops() if op.builder)


class Operand:
    """A value inside a graph being built: an input, a constant or an op's result."""

    __slots__ = ("_builder", "_index", "_placeholder")

    def __init__(self, builder: "GraphBuilder", index: int, placeholder: Tensor):
        self._builder = builder
        self._index = index
        self._placeholder = placeholder      # shape-only tensor for shape inference

    @property
    def shape(self) -> tuple[int, ...]:
        return self._placeholder.shape

    @property
    def dtype(self) -> np.dtype:
        return self._placeholder.dtype

    def __repr__(self) -> str:
        kind = "" if self.dtype == FLOAT32 else f", dtype={self.dtype}"
        return f"Operand(#{self._index}, shape={self.shape}{kind})"

    def __reduce__(self):
        raise JitnnTypeError("Operand: a graph operand does not pickle on its own; build "
                             "the graph and pickle the Graph")


def _never_run(ctx, node, value, out):
    raise JitnnValueError("GraphBuilder: a graph operand has no values; dispatch the graph")


class _Recorded:
    """One op of a graph: the eager function and its arguments (operands by index)."""

    __slots__ = ("op", "function", "args", "kwargs", "index")

    def __init__(self, op: str, function: Callable, args: tuple, kwargs: dict, index: int):
        self.op, self.function, self.args, self.kwargs, self.index = \
            op, function, args, kwargs, index


def _substitute(value: Any, lookup: Callable[[Any], Any], kind: type = Operand) -> Any:
    """``value`` with every instance of ``kind`` in it, also inside lists,
    tuples and dicts (an op's keyword options: WebNN passes a conv's bias
    operand in its options), replaced by ``lookup(instance)``."""
    if isinstance(value, kind):
        return lookup(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_substitute(v, lookup, kind) for v in value)
    if isinstance(value, dict):
        return {key: _substitute(v, lookup, kind) for key, v in value.items()}
    return value


class GraphBuilder:
    """Builds one :class:`Graph` (WebNN's MLGraphBuilder). See the module docstring."""

    def __init__(self, ctx: "Context | None" = None):
        self._ctx = ctx or default_context()
        # A private, never-running context for the placeholders: ops validate
        # and infer shapes on them exactly as on real tensors.
        self._shape_ctx = Context(num_threads=1, block=self._ctx.block)
        self._shape_ctx.symbolic = True
        self._inputs: dict[str, Operand] = {}
        self._constants: dict[int, Tensor] = {}
        self._ops: list[_Recorded] = []
        self._count = 0
        self._built = False

    def __reduce__(self):
        raise JitnnTypeError("GraphBuilder: a builder does not pickle; build the graph and "
                             "pickle the Graph")

    def _check_open(self, what: str) -> None:
        if self._built:
            raise JitnnValueError(
                f"GraphBuilder.{what}: this builder already built its graph (a builder "
                "builds one graph; make a new GraphBuilder)")

    def _operand(self, placeholder: Tensor) -> Operand:
        operand = Operand(self, self._count, placeholder)
        self._count += 1
        return operand

    def _placeholder(self, shape: tuple[int, ...], dtype: np.dtype = FLOAT32) -> Tensor:
        node = Node("input", (), kind="placeholder", run=_never_run)
        return Tensor._wrap(Value(self._shape_ctx, shape, _plain_tag(len(shape)), node=node,
                                  dtype=dtype))

    def input(self, name: str, shape, dtype: object = "float32") -> Operand:
        """A named graph input of ``shape`` and ``dtype`` (float32, or an
        integer type: token ids, masks, indices)."""
        self._check_open("input")
        if not isinstance(name, str) or not name:
            raise JitnnTypeError(f"GraphBuilder.input: name must be a non-empty str, got {name!r}")
        if name in self._inputs:
            raise JitnnValueError(f"GraphBuilder.input: an input named {name!r} exists already")
        # ints only (int(2.7) and int("22") would pass), within jitnn/limits.py's bounds
        dims = shape_arg("GraphBuilder.input", "shape", shape)
        kind = dtype_arg(f"GraphBuilder.input {name!r}", dtype)
        operand = self._operand(self._placeholder(dims, kind))
        self._inputs[name] = operand
        return operand

    def constant(self, array, dtype: object = None) -> Operand:
        """A constant (copied now; a filter is packed once and reused by every
        dispatch), of ``dtype`` or the array's own type (``jitnn.tensor``'s rules)."""
        self._check_open("constant")
        values = as_array_copy(array, "GraphBuilder.constant", dtype)
        real = Tensor._holding(self._ctx, values)
        placeholder = Tensor._holding(self._shape_ctx, values)
        operand = self._operand(placeholder)
        self._constants[operand._index] = real
        return operand

    def _constant_owned(self, array: np.ndarray) -> Operand:
        """:meth:`constant` of an array handed over to the graph: its maker
        (the ONNX frontend, with the initializers it read) never writes it and
        gives it to no one else, so an aligned, C-contiguous array of a jitnn
        type is kept as it is instead of copied (a model's weights are then in
        memory once, not twice, while it loads)."""
        self._check_open("constant")
        if not (isinstance(array, np.ndarray) and array.flags.c_contiguous
                and array.dtype in DTYPES and array.ctypes.data % 64 == 0):
            return self.constant(array)
        real = Tensor._holding(self._ctx, array)
        placeholder = Tensor._holding(self._shape_ctx, array)
        operand = self._operand(placeholder)
        self._constants[operand._index] = real
        return operand

    def _add(self, op: str, *args, **kwargs) -> Operand:
        self._check_open(op)

        def placeholder_of(operand: Operand) -> Tensor:
            if operand._builder is not self:
                raise JitnnValueError(f"GraphBuilder.{op}: an operand from another builder")
            return operand._placeholder

        def shape_of(tensor: Tensor) -> Tensor:
            # A Tensor given as it is: every dispatch reads it (see Graph); shape
            # inference sees a placeholder, like an operand's, not the tensor
            # itself (its op would run on the builder's context)
            if tensor.context is not self._ctx:
                raise JitnnValueError(f"GraphBuilder.{op}: a tensor of another context than "
                                      "the builder's")
            return self._placeholder(tensor.shape, tensor.dtype)

        def for_inference(value: Any) -> Any:
            return _substitute(_substitute(value, shape_of, Tensor), placeholder_of)
        function = registry.op(op).function
        result = function(*for_inference(args), **for_inference(kwargs))
        if isinstance(result, list):         # several outputs (split): an operand each
            operands = [self._operand(r) for r in result]
            self._ops.append(_Recorded(op, function, args, kwargs,
                                       tuple(o._index for o in operands)))
            return operands
        operand = self._operand(result)
        self._ops.append(_Recorded(op, function, args, kwargs, operand._index))
        return operand

    def build(self, outputs: Mapping[str, Operand]) -> "Graph":
        """The immutable graph computing ``outputs`` ({name: operand})."""
        self._check_open("build")
        if not isinstance(outputs, Mapping) or not outputs:
            raise JitnnTypeError("GraphBuilder.build: outputs must be a non-empty dict "
                                 "{name: operand}")
        for name, operand in outputs.items():
            if not isinstance(name, str) or not isinstance(operand, Operand) \
                    or operand._builder is not self:
                raise JitnnTypeError(
                    f"GraphBuilder.build: output {name!r} must map a str to an operand of "
                    f"this builder, got {type(operand).__name__}")
        self._built = True
        _mark_droppable(self._constants, self._ops, outputs)
        graph = Graph(
            self._ctx, inputs={name: op.shape for name, op in self._inputs.items()},
            input_dtypes={name: op.dtype for name, op in self._inputs.items()},
            input_index={name: op._index for name, op in self._inputs.items()},
            constants=dict(self._constants), ops=tuple(self._ops),
            outputs={name: (op._index, op.shape) for name, op in outputs.items()},
            output_dtypes={name: op.dtype for name, op in outputs.items()})
        self._ops, self._constants = [], {}
        return graph


#: (op, argument, position) that reads a constant only to pack it once
#: (jitnn/ops/matmul.py, jitnn/ops/conv2d.py)
_PACKED_ARGUMENTS = {("matmul", "b", 1), ("gemm", "b", 1), ("conv2d", "w", 1)}


def _mark_droppable(constants: dict[int, Tensor], ops: list, outputs: Mapping) -> None:
    """Mark the constants that only a packing argument reads (the weights of
    matmul, gemm and conv2d) droppable: once packed, their plain buffer goes
    (``Value._drop_plain``). A constant read any other way, or an output, stays."""
    other: set[int] = {operand._index for operand in outputs.values()}
    packed: set[int] = set()
    operands: dict[int, Operand] = {}

    def scan(value: Any, as_packed: bool) -> None:
        if isinstance(value, Operand):
            (packed if as_packed else other).add(value._index)
            operands[value._index] = value
        elif isinstance(value, (list, tuple)):
            for item in value:
                scan(item, False)
        elif isinstance(value, dict):
            for item in value.values():
                scan(item, False)
    for recorded in ops:
        for position, arg in enumerate(recorded.args):
            scan(arg, any(recorded.op == op and position == index
                          for op, _, index in _PACKED_ARGUMENTS))
        for name, arg in recorded.kwargs.items():
            scan(arg, any(recorded.op == op and name == keyword
                          for op, keyword, _ in _PACKED_ARGUMENTS))
    for index in packed - other:
        tensor = constants.get(index)
        if tensor is not None:
            tensor._v._droppable = True
            # the operand's placeholder shared the buffer for shape inference, which is
            # over: from now on it gives only the shape and type
            shape_only = operands[index]._placeholder._v
            shape_only._data = np.broadcast_to(np.zeros((), shape_only._dtype), shape_only._shape)


def _builder_method(op: str) -> Callable:
    function = registry.op(op).function

    @functools.wraps(function)
    def method(self: GraphBuilder, *args, **kwargs) -> Operand:
        return self._add(op, *args, **kwargs)
    method.__doc__ = f"Add ``{op}`` to the graph (arguments as ``jitnn.{op}``; tensors are " \
                     f"operands of this builder)."
    return method


for _name in GRAPH_OPS:
    setattr(GraphBuilder, _name, _builder_method(_name))


def _plain_tag(ndim: int) -> str:
    return plain_tag(ndim)


class Graph:
    """A built graph: its inputs and outputs with their shapes. Immutable;
    run it with ``ctx.dispatch`` (lazy) or ``ctx.compute`` (synchronous).

    ``ctx.compute`` keeps the scheduled plan of this graph for its next calls
    (at most :data:`jitnn.replay.IDLE_PROGRAMS` of them, with their
    intermediate buffers: see jitnn/replay.py); they go with the graph."""

    __slots__ = ("_ctx", "_inputs", "_input_dtypes", "_input_index", "_constants", "_ops",
                 "_outputs", "_output_dtypes", "_programs", "_programs_lock")

    def __init__(self, ctx, inputs, input_index, constants, ops, outputs,
                 input_dtypes=None, output_dtypes=None):
        self._ctx = ctx
        self._inputs = inputs
        self._input_dtypes = input_dtypes or {name: FLOAT32 for name in inputs}
        self._output_dtypes = output_dtypes or {name: FLOAT32 for name in outputs}
        self._input_index = input_index
        self._constants = constants
        self._ops = ops
        self._outputs = outputs
        # compute's replayable programs not in use right now (jitnn/replay.py)
        self._programs: list = []
        self._programs_lock = threading.Lock()

    @property
    def inputs(self) -> dict[str, tuple[int, ...]]:
        return dict(self._inputs)

    @property
    def outputs(self) -> dict[str, tuple[int, ...]]:
        return {name: shape for name, (_, shape) in self._outputs.items()}

    @property
    def input_dtypes(self) -> dict[str, np.dtype]:
        return dict(self._input_dtypes)

    @property
    def output_dtypes(self) -> dict[str, np.dtype]:
        return dict(self._output_dtypes)

    @property
    def context(self) -> "Context":
        """The context the graph was built for (its constants live there)."""
        return self._ctx

    def __repr__(self) -> str:
        ops = ", ".join(r.op for r in self._ops)
        return f"Graph(inputs={self.inputs}, outputs={self.outputs}, ops=[{ops}])"

    # A graph is immutable: a copy is the same graph. It pickles as what built
    # it (its inputs, constants' values, ops with their arguments, outputs) and
    # its context (as the context's arguments: jitnn/defaults.py); never its
    # plans, packed filters or kernels. Unpickling builds it again with a
    # GraphBuilder in the receiver's context, whose kernels come from the disk
    # cache at the first run.
    def __copy__(self) -> "Graph":
        return self

    def __deepcopy__(self, memo: dict) -> "Graph":
        return self

    def __reduce__(self):
        return _unpickle_graph, (_graph_description(self),)

    def _check_inputs(self, ctx: "Context", inputs: Mapping[str, Any], op: str) -> dict:
        """The inputs as Tensors: a Tensor as it is, anything else copied (as
        ``jitnn.tensor`` does), after :meth:`_input_items`'s checks."""
        return {name: item if isinstance(item, Tensor) else Tensor._input_holding(ctx, item)
                for name, item in self._input_items(ctx, inputs, op).items()}

    def _input_items(self, ctx: "Context", inputs: Mapping[str, Any], op: str,
                     borrow_outside: Sequence[np.ndarray] | None = None,
                     ) -> dict[str, "Tensor | np.ndarray"]:
        """Check ``inputs`` (names, dtypes, shapes); a Tensor input is returned
        as it is, anything else as a new float32 copy (later changes to the
        caller's array never leak in).

        ``borrow_outside`` (``ctx.compute``, which reads its inputs only while
        it runs): an input that already is what a copy would be (a float32,
        C-contiguous, aligned, writeable ndarray) and shares no memory with
        any of these arrays (the call's outputs) is returned as it is, to be
        read in place. No plan writes into an input's buffer (only into
        buffers it made), so the caller's array is never changed."""
        if not isinstance(inputs, Mapping):
            raise JitnnTypeError(f"{op}: inputs must be a dict {{name: tensor}}, "
                                 f"got {type(inputs).__name__}")
        unknown = sorted(set(inputs) - set(self._inputs))
        missing = sorted(set(self._inputs) - set(inputs))
        if unknown:
            raise JitnnTypeError(f"{op}: unknown input {unknown[0]!r} (the graph's inputs: "
                                 f"{sorted(self._inputs)})")
        if missing:
            raise JitnnTypeError(f"{op}: missing input {missing[0]!r} (the graph's inputs: "
                                 f"{sorted(self._inputs)})")
        items: dict[str, Tensor | np.ndarray] = {}
        for name, value in inputs.items():
            expected = self._inputs[name]
            dtype = self._input_dtypes[name]
            if isinstance(value, Tensor):
                if value.context is not ctx:
                    raise JitnnTypeError(f"{op}: input {name!r} belongs to another context")
                if value.dtype != dtype:
                    raise JitnnTypeError(f"{op}: input {name!r} must be a {dtype} tensor, "
                                         f"got a {value.dtype} one")
                item: Tensor | np.ndarray = value
            elif borrow_outside is not None and _borrowable(value, borrow_outside, dtype):
                item = value
            else:
                # another dtype converts by value into the input's (float64
                # rounds, ints and bools convert, as jitnn.tensor(..., dtype=)
                # does); floats into an integer input, or a non-numeric
                # array, are refused, naming the input. Any array-like
                # (DLPack, __array__) is read as jitnn.tensor reads it.
                array = host_array(value, f"{op}: input {name!r}")
                if dtype != FLOAT32 and array.dtype.kind == "f":
                    raise JitnnTypeError(f"{op}: input {name!r} is {dtype}, got floating-point "
                                         f"data ({array.dtype})")
                item = as_array_copy(array, f"{op}: input {name!r}", dtype)
            if item.shape != expected:
                raise JitnnTypeError(
                    f"{op}: input {name!r} has shape {item.shape}, expected {expected}")
            items[name] = item
        return items

    def _check_context(self, ctx: "Context", op: str = "dispatch") -> None:
        if ctx is not self._ctx:
            raise JitnnValueError(f"{op}: the graph was built for another context "
                                  "(its constants live there)")

    def _dispatch(self, ctx: "Context", inputs: Mapping[str, Any]) -> dict[str, Tensor]:
        self._check_context(ctx)
        return self._run_ops(ctx, self._check_inputs(ctx, inputs, "dispatch"))

    def _run_ops(self, ctx: "Context", tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Replay the recorded ops on checked input ``tensors`` (pending work);
        the outputs by name."""
        env: dict[int, Tensor] = {self._input_index[n]: t for n, t in tensors.items()}
        env.update(self._constants)

        def lookup(operand: Operand) -> Tensor:
            return env[operand._index]
        for recorded in self._ops:
            result = recorded.function(
                *_substitute(recorded.args, lookup), **_substitute(recorded.kwargs, lookup))
            if isinstance(recorded.index, tuple):          # an op of several outputs
                env.update(zip(recorded.index, result))
            else:
                env[recorded.index] = result
        # only the outputs keep handles: intermediates may be fused away
        return {name: env[index] for name, (index, _) in self._outputs.items()}

    def _fixed_tensors(self) -> list[Tensor]:
        """The tensors every dispatch shares: the constants, and any Tensor
        passed to an op as it is (not an operand)."""
        found = list(self._constants.values())

        def scan(value: Any) -> None:
            if isinstance(value, Tensor):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    scan(item)
            elif isinstance(value, dict):
                for item in value.values():
                    scan(item)
        for recorded in self._ops:
            scan(recorded.args)
            scan(recorded.kwargs)
        return found


def _borrowable(array: object, outputs: Sequence[np.ndarray], dtype: np.dtype = FLOAT32) -> bool:
    """True when ``array`` may be read in place instead of copied: it is a
    ``dtype``, C-contiguous, aligned and writeable ndarray (the kernels are
    compiled for those; a read-only or unaligned one would compile others)
    whose memory does not overlap an output's (an output that is an input, or
    a view of one, is still read while the others are written)."""
    return (isinstance(array, np.ndarray) and array.dtype == dtype
            and array.flags.c_contiguous and array.flags.aligned and array.flags.writeable
            and not any(np.may_share_memory(array, out) for out in outputs))


# --- pickling ---------------------------------------------------------------------

#: the version of :func:`_graph_description`'s format (a pickle of another is refused)
PICKLE_FORMAT = 1


class _OperandRef:
    """An operand in a pickled op's arguments: the index of what it was."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __reduce__(self):
        return _OperandRef, (self.index,)


class _TensorValues:
    """A Tensor given to an op as it is, in a pickled op's arguments: its
    values (one object per tensor, so a tensor read by several ops stays one)."""

    __slots__ = ("values", "axes")

    def __init__(self, values: np.ndarray, axes: str):
        self.values, self.axes = values, axes

    def __reduce__(self):
        return _TensorValues, (self.values, self.axes)


def _graph_description(graph: Graph) -> dict:
    """What rebuilds ``graph``: plain data, operands as their indices."""
    fixed: dict[int, _TensorValues] = {}

    def tensor_values(tensor: Tensor) -> _TensorValues:
        found = fixed.get(id(tensor))
        if found is None:
            found = fixed[id(tensor)] = _TensorValues(tensor.numpy(), tensor._axes)
        return found

    def encode(value: Any) -> Any:
        value = _substitute(value, lambda operand: _OperandRef(operand._index))
        return _substitute(value, tensor_values, Tensor)

    return {
        "format": PICKLE_FORMAT,
        "context": graph._ctx,
        "inputs": [(name, graph._input_index[name], shape, graph._input_dtypes[name].name)
                   for name, shape in graph._inputs.items()],
        # constants are plain (GraphBuilder.constant): their buffers are the values
        "constants": {index: tensor._materialize() for index, tensor in graph._constants.items()},
        "ops": [(r.op, encode(r.args), encode(r.kwargs), r.index) for r in graph._ops],
        "outputs": {name: index for name, (index, _) in graph._outputs.items()},
    }


def _unpickle_graph(description: dict) -> Graph:
    """A pickled graph, built again by a GraphBuilder (every op validated and
    its shapes inferred again, as when it was first built)."""
    if description.get("format") != PICKLE_FORMAT:
        raise JitnnValueError(f"Graph: a pickle of format {description.get('format')!r}, this "
                              f"jitnn reads format {PICKLE_FORMAT} (pickle it again with this "
                              "version)")
    ctx = description["context"]
    builder = GraphBuilder(ctx)
    operands: dict[int, Operand] = {}
    tensors: dict[int, Tensor] = {}

    def decode(value: Any) -> Any:
        def tensor_of(values: _TensorValues) -> Tensor:
            if id(values) not in tensors:
                tensors[id(values)] = Tensor._holding(ctx, as_array_copy(values.values, "Graph"))
            return tensors[id(values)]
        value = _substitute(value, lambda ref: operands[ref.index], _OperandRef)
        return _substitute(value, tensor_of, _TensorValues)

    for name, index, shape, dtype in description["inputs"]:
        operands[index] = builder.input(name, shape, dtype)
    for index, values in description["constants"].items():
        operands[index] = builder.constant(values)
    for op, args, kwargs, index in description["ops"]:
        result = builder._add(op, *decode(args), **decode(kwargs))
        if isinstance(index, tuple):                 # an op of several outputs
            operands.update(zip(index, result))
        else:
            operands[index] = result
    return builder.build({name: operands[index]
                          for name, index in description["outputs"].items()})
