"""What the ONNX frontend's parts share: the values while converting
(:class:`Const` for load-time constants, builder operands for run-time
tensors), the :class:`Converter` that holds them, how errors name a node,
and the shape arithmetic of Reshape, Unsqueeze, Squeeze, Slice and Split
that both the handlers (jitnn/onnx/_convert.py) and the folds
(jitnn/onnx/_fold.py) use."""

from __future__ import annotations

import math

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..graph import GraphBuilder, Operand
from ._proto import np_dtype, type_name
from ._shuffle import Origins


class UnsupportedError(JitnnValueError):
    """An ONNX model (an op, an attribute value, a data type) that jitnn cannot run."""


class LoadTimeValueError(UnsupportedError):
    """A value that jitnn needs at load time (a shape, the pads, the scales, ...)
    is computed at run time. ``names``: the node inputs that carry it, so that
    a caller that has their values (``jitnn.onnx.run``, the backend) can give
    them as ``constants=`` and convert again."""

    def __init__(self, message: str, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


#: ONNX integer types jitnn does not keep, and the jitnn type that holds their values
_WIDENED = {np.dtype(np.bool_): np.dtype(np.uint8), np.dtype(np.int16): np.dtype(np.int32),
            np.dtype(np.uint16): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.int64)}
_JITNN_TYPES = tuple(np.dtype(t) for t in (np.float32, np.int32, np.int64, np.uint32, np.int8,
                                           np.uint8))


def jitnn_dtype(dtype) -> np.dtype | None:
    """The jitnn data type that holds the values of numpy ``dtype`` (bool as
    uint8 0/1; int16, uint16 as int32; uint64 as int64), or None for a type
    jitnn has no place for (float16, float64, bfloat16, strings, ...)."""
    dtype = np.dtype(dtype)
    if dtype in _JITNN_TYPES:
        return dtype
    return _WIDENED.get(dtype)


def refused_dtype(dtype) -> str:
    """Why a tensor of ``dtype`` cannot be a jitnn value (for an error)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or "float" in str(dtype):
        return (f"{dtype}: jitnn computes in float32 and does not round silently (convert "
                "the model to float32)")
    return f"{dtype}: not a jitnn data type (float32, int32, int64, uint32, int8, uint8, bool)"


class Const:
    """A value known at load time (numpy array, ONNX dtype kept)."""
    __slots__ = ("array", "name")

    def __init__(self, array, name: str = ""):
        self.array = np.asarray(array)
        self.name = name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def __repr__(self) -> str:
        return f"Const({self.array.dtype}, {self.shape})"


FLOAT_KINDS = "f"


class Converter:
    """Converts one ONNX graph (see :func:`convert`)."""

    def __init__(self, builder: GraphBuilder, opset: int):
        self.b = builder
        self.opset = opset
        self.node = None
        self.index = 0                            # self.node's position in graph.node
        self._operands: dict = {}                 # (id(Const), dtype) -> its builder constant
        self._keep: list[Const] = []              # keep the Consts alive (id keys)
        self.jitnn_ops = 0                        # ops added to the builder
        self.inputs: list = []                    # the node's input values (need_const)
        self.input_names: list[str] = []          # ... and their ONNX names
        self._bools: dict[int, Operand] = {}      # uint8 operands that are ONNX bools
        self.origins = Origins()                  # how reshapes and transposes were made
        self.shared: dict = {}                    # operands several nodes' conversions share
        self.scope: dict = {}                     # the values of the graph being converted
        # converts a subgraph (If, Loop, Scan) with its inputs bound: set by the loader
        self.convert_subgraph = None

    # --- errors ------------------------------------------------------------------

    def where(self) -> str:
        node = self.node
        if node is None:
            return ""
        name = node.name or (node.output[0] if node.output else "?")
        return f"{node.op_type} (node {name!r}, opset {self.opset})"

    def unsupported(self, why: str) -> UnsupportedError:
        return UnsupportedError(f"onnx: {self.where()}: {why}")

    def invalid(self, why: str) -> JitnnValueError:
        """A broken model (not one jitnn cannot run): ``onnx: node 'conv_3' (Conv): why``."""
        return JitnnValueError(f"onnx: {node_label(self.node, self.index)}: {why}")

    # --- values ------------------------------------------------------------------

    def operand(self, value, dtype=None) -> Operand:
        """``value`` as a builder operand (a constant is added once per type):
        a constant keeps its type (bool as uint8, int16 as int32, ...), or is
        converted to ``dtype`` (float32 for the operands of float ops)."""
        if isinstance(value, Operand):
            return value
        if not isinstance(value, Const):
            raise self.unsupported(f"expected a tensor, got {value!r}")
        array = value.array
        own = jitnn_dtype(array.dtype)
        if own is None:
            raise self.unsupported(f"tensor {value.name or '(constant)'!r} is "
                                   + refused_dtype(array.dtype))
        target = own if dtype is None else np.dtype(dtype)
        key = (id(value), target.str)
        cached = self._operands.get(key)
        if cached is not None:
            return cached
        # every Const array is the converter's own (initializers, folds of them, copies
        # of the caller's constants): the graph keeps it without a copy where it can
        if array.dtype == np.bool_ and target == np.uint8:
            operand = self.b._constant_owned(array.astype(np.uint8))
            self._bools[id(operand)] = operand
        else:
            operand = self.b._constant_owned(array if array.dtype == target
                                             else array.astype(target))
        self._operands[key] = operand
        self._keep.append(value)
        return operand

    def float_operand(self, value) -> Operand:
        """``value`` as an operand of a float32 op (a constant converted to float32)."""
        return self.operand(value, np.float32)

    def mark_bool(self, operand: Operand) -> Operand:
        """Record that uint8 ``operand`` holds an ONNX bool (for CastLike and outputs)."""
        self._bools[id(operand)] = operand
        return operand

    def is_bool(self, value) -> bool:
        if isinstance(value, Const):
            return value.array.dtype == np.bool_
        return id(value) in self._bools

    def onnx_type(self, value) -> np.dtype:
        """The ONNX (numpy) type of a value: a constant's own, an operand's
        jitnn type (bool for the uint8 operands that hold ONNX bools)."""
        if isinstance(value, Const):
            return value.array.dtype
        return np.dtype(np.bool_) if self.is_bool(value) else np.dtype(value.dtype)

    def op(self, name: str, *args, **kwargs) -> Operand:
        """Add jitnn op ``name`` to the builder (a jitnn error names the ONNX node)."""
        self.jitnn_ops += 1
        try:
            return getattr(self.b, name)(*args, **kwargs)
        except UnsupportedError:
            raise
        except (JitnnValueError, JitnnTypeError) as error:
            raise UnsupportedError(f"onnx: {self.where()}: {error}") from None

    def scalar_or_operand(self, value, other_rank: int, dtype=np.float32):
        """For a float32 op, a size-1 constant as a Python float (a kernel
        scalar); else ``value`` as an operand of ``dtype`` (None: its own)."""
        if isinstance(value, Const) and value.array.size == 1 and value.array.ndim <= other_rank \
                and value.array.dtype.kind in "fiub" and dtype is not None \
                and np.dtype(dtype) == np.float32:
            return float(value.array.reshape(-1)[0])
        return self.operand(value, dtype)


def node_label(node, index: int) -> str:
    """How validation errors name a node: ``node 'conv_3' (Conv)``; an unnamed
    node by its position in ``graph.node``: ``node #3 (Conv)``."""
    if node.name:
        return f"node {node.name!r} ({node.op_type})"
    return f"node #{index} ({node.op_type})"


def outer_reads(node) -> list[str]:
    """The names that the subgraphs of ``node`` (If's branches, a Loop or Scan
    body, recursively) read from the scopes around them: the node depends on
    their writers as on its inputs."""
    reads: dict[str, None] = {}
    for attribute in node.attribute:
        graphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
        for graph in graphs:
            local = {info.name for info in graph.input} | \
                {tensor.name for tensor in graph.initializer}
            for inner in graph.node:
                for name in [*inner.input, *outer_reads(inner)]:
                    if name and name not in local:
                        reads[name] = None
                local.update(inner.output)
    return list(reads)


def shape_of(value) -> tuple[int, ...]:
    return tuple(value.shape)


def rank_of(value) -> int:
    return len(value.shape)


def ints(value) -> list[int]:
    """A constant 1-D int tensor (or attribute list) as Python ints."""
    if isinstance(value, Const):
        return [int(v) for v in value.array.reshape(-1)]
    return [int(v) for v in value]


def need_const(cv: Converter, value, what: str) -> Const:
    if not isinstance(value, Const):
        names = tuple(name for v, name in zip(cv.inputs, cv.input_names) if v is value)
        raise LoadTimeValueError(
            f"onnx: {cv.where()}: {what} must be known when the model is loaded (a constant "
            "or computed from shapes), but it is computed at run time"
            + (f" (give {names[0]!r} with prepare(..., constants=...) if it is a graph "
               "input)" if names else ""), names)
    return value


def spatial_rank_check(cv: Converter, x) -> int:
    """The rank of a 2-D handler's input: 3 (1-D, run as 2-D with H = 1) or 4
    (rank 5 goes to jitnn/onnx/_convert_3d.py before this); a higher rank is
    refused by name, a rank below 3 is a broken model."""
    r = rank_of(x)
    if r in (3, 4):
        return r
    op = cv.node.op_type if cv.node is not None else ""
    kind = "convolution" if op.startswith("Conv") else "pooling"
    if r > 4:
        raise cv.unsupported(f"{r - 2}-D {kind} (a rank-{r} input of shape {shape_of(x)}) is "
                             "not supported: jitnn runs 1-D, 2-D and 3-D convolutions and pools")
    raise cv.invalid(f"a rank-{r} input of shape {shape_of(x)}: {op or kind} needs (N, C, L), "
                     "(N, C, H, W) or (N, C, D, H, W)")


def onnx_dtype(code: int) -> np.dtype:
    """The numpy dtype of ONNX data type ``code`` (as onnx's helper gives it)."""
    try:
        return np_dtype(code)
    except KeyError:
        raise UnsupportedError(f"onnx: tensor data type {code} has no numpy equivalent") from None
    except ImportError:
        raise UnsupportedError(f"onnx: tensor data type {type_name(code)} needs the ml_dtypes "
                               "package (pip install ml_dtypes)") from None


def reshape_target(cv: Converter, x, inputs, attrs) -> tuple[int, ...]:
    """The output shape of a Reshape of ``x``: 0 copies the input's dim (unless
    ``allowzero``), one -1 is inferred; anything else is a broken model."""
    if cv.opset < 5:
        shape = [int(d) for d in attrs["shape"]]
    else:
        shape = ints(need_const(cv, inputs[1], "the shape input"))
    asked = list(shape)                      # as the model wrote it, for the errors
    in_shape = shape_of(x)
    if shape.count(-1) > 1:
        raise cv.invalid(f"shape {asked} has more than one -1 (only one dim can be inferred)")
    if any(d < -1 for d in shape):
        raise cv.invalid(f"shape {asked} has a negative dim other than -1")
    if attrs.get("allowzero", 0):
        if 0 in shape and -1 in shape:       # the spec forbids it: the -1 is ambiguous
            raise cv.invalid(f"shape {asked} has both 0 and -1 with allowzero=1")
    else:
        if any(d == 0 for d in shape[len(in_shape):]):
            raise cv.invalid(f"shape {asked} copies (with 0) a dim that the input, of shape "
                             f"{in_shape}, does not have")
        shape = [in_shape[i] if d == 0 else d for i, d in enumerate(shape)]
    size = math.prod(in_shape)
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = size // known if known else 0
    if math.prod(shape) != size:
        raise cv.invalid(f"cannot reshape {in_shape} ({size} values) to {asked}")
    return tuple(shape)


def unsqueeze_shape(cv: Converter, x, inputs, attrs) -> tuple[int, ...]:
    axes = ints(need_const(cv, inputs[1], "the axes")) if cv.opset >= 13 else list(attrs["axes"])
    rank = rank_of(x) + len(axes)
    axes = sorted(a % rank for a in axes)
    shape = list(shape_of(x))
    for a in axes:
        shape.insert(a, 1)
    return tuple(shape)


def squeeze_shape(cv: Converter, x, inputs, attrs) -> tuple[int, ...]:
    if cv.opset >= 13:
        axes = ints(need_const(cv, inputs[1], "the axes")) if len(inputs) > 1 and \
            inputs[1] is not None else None
    else:
        axes = list(attrs["axes"]) if "axes" in attrs else None
    shape = shape_of(x)
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = {a % len(shape) for a in axes}
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def slice_index(cv: Converter, x, inputs, attrs) -> tuple[slice, ...]:
    rank = rank_of(x)
    if cv.opset < 10:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = ints(need_const(cv, inputs[1], "the starts"))
        ends = ints(need_const(cv, inputs[2], "the ends"))
        axes = ints(need_const(cv, inputs[3], "the axes")) if len(inputs) > 3 and \
            inputs[3] is not None else list(range(len(starts)))
        steps = ints(need_const(cv, inputs[4], "the steps")) if len(inputs) > 4 and \
            inputs[4] is not None else [1] * len(starts)
    index = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[axis % rank] = slice(start, end, step)
    return tuple(index)


def split_sizes(cv: Converter, x, inputs, attrs, outputs: int, axis: int) -> list[int]:
    if cv.opset >= 13 and len(inputs) > 1 and inputs[1] is not None:
        return ints(need_const(cv, inputs[1], "the split sizes"))
    if "split" in attrs:
        return list(attrs["split"])
    size = shape_of(x)[axis]
    if "num_outputs" in attrs:
        outputs = int(attrs["num_outputs"])
    chunk = -(-size // outputs)
    return [min(chunk, size - i * chunk) for i in range(outputs)]
