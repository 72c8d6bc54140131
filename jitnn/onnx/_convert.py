"""ONNX graph -> jitnn GraphBuilder: one handler per ONNX op.

Every ONNX value is, while converting, either a :class:`Const` (a numpy array
in its ONNX dtype, known at load time: initializers, ``Constant`` nodes, the
shapes of tensors, and everything computed from those alone) or a builder
:class:`~jitnn.graph.Operand` (a float32 value computed when the graph runs).
A node whose inputs are all constants is folded with numpy (the ``FOLD``
table: this is how the shape arithmetic that exporters emit around
``Reshape``, ``Shape -> Gather -> Unsqueeze -> Concat`` and friends,
disappears); otherwise its handler in ``OPS`` adds jitnn ops to the builder.
Shapes are static in a built graph, so ``Shape`` of an operand is a constant.

A constant becomes a builder constant (``b.constant``) the first time an op
needs it as a tensor, once per ONNX name: every dispatch of the graph then
reuses it, and a filter is packed once.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..graph import GraphBuilder, Operand


class UnsupportedError(JitnnValueError):
    """An ONNX model (an op, an attribute value, a data type) that jitnn cannot run."""


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
        self._operands: dict[int, Operand] = {}   # id(Const) -> its builder constant
        self._keep: list[Const] = []              # keep the Consts alive (id keys)
        self.jitnn_ops = 0                        # ops added to the builder

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

    def operand(self, value) -> Operand:
        """``value`` as a builder operand (a constant is added once)."""
        if isinstance(value, Operand):
            return value
        if not isinstance(value, Const):
            raise self.unsupported(f"expected a tensor, got {value!r}")
        cached = self._operands.get(id(value))
        if cached is not None:
            return cached
        array = value.array
        if array.dtype.kind == "f" and array.dtype != np.float32:
            raise self.unsupported(
                f"tensor {value.name or '(constant)'!r} is {array.dtype}; jitnn computes in "
                "float32 (convert the model to float32)")
        if array.dtype.kind not in "fiub":
            raise self.unsupported(f"tensor {value.name!r} has dtype {array.dtype}")
        operand = self.b.constant(array.astype(np.float32))
        self._operands[id(value)] = operand
        self._keep.append(value)
        return operand

    def op(self, name: str, *args, **kwargs) -> Operand:
        """Add jitnn op ``name`` to the builder (a jitnn error names the ONNX node)."""
        self.jitnn_ops += 1
        try:
            return getattr(self.b, name)(*args, **kwargs)
        except UnsupportedError:
            raise
        except (JitnnValueError, JitnnTypeError) as error:
            raise UnsupportedError(f"onnx: {self.where()}: {error}") from None

    def scalar_or_operand(self, value, other_rank: int):
        """A size-1 constant as a Python float (a kernel scalar), else an operand."""
        if isinstance(value, Const) and value.array.size == 1 and value.array.ndim <= other_rank \
                and value.array.dtype.kind in "fiub":
            return float(value.array.reshape(-1)[0])
        return self.operand(value)


def node_label(node, index: int) -> str:
    """How validation errors name a node: ``node 'conv_3' (Conv)``; an unnamed
    node by its position in ``graph.node``: ``node #3 (Conv)``."""
    if node.name:
        return f"node {node.name!r} ({node.op_type})"
    return f"node #{index} ({node.op_type})"


def ordered_nodes(graph) -> list[int]:
    """The positions of ``graph.node`` in an order that runs every node after
    the writers of its inputs, after checking that the graph is well formed.

    ONNX requires nodes in topological order, but some tools write them
    unsorted; sorting here costs little and the order of a sorted graph is
    kept as it is (depth first, in file order). Raises a
    :class:`JitnnValueError` naming the node, its op and the value for: a
    value written twice, an output named like a graph input or initializer,
    an input that nothing defines, and a cycle.
    """
    nodes = graph.node
    # what a node may read without a writer; a graph input may also have an
    # initializer of its name (old exports): the initializer is its default
    given: dict[str, str] = {t.name: "an initializer" for t in graph.initializer}
    given.update((i.name, "a graph input") for i in graph.input)
    writer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if not name:              # "": an optional output the model does not want
                continue
            if name in given:
                raise JitnnValueError(
                    f"onnx: {node_label(node, index)}: output {name!r} has the name of "
                    f"{given[name]} (every value is written once)")
            if name in writer:
                first = writer[name]
                other = "this node" if first == index else node_label(nodes[first], first)
                raise JitnnValueError(
                    f"onnx: {node_label(node, index)}: output {name!r} is also written by "
                    f"{other} (every value is written once)")
            writer[name] = index
    for index, node in enumerate(nodes):
        for name in node.input:      # "" is an optional input left out: legal
            if name and name not in given and name not in writer:
                raise JitnnValueError(
                    f"onnx: {node_label(node, index)}: input {name!r} is not defined (no node "
                    "writes it, and no graph input or initializer has that name)")

    def producers(index: int) -> list[int]:
        return [writer[name] for name in nodes[index].input if name in writer]

    # iterative depth-first search (deep graphs would exceed Python's recursion
    # limit): a node is appended once all its producers are
    order: list[int] = []
    state: dict[int, str] = {}       # "open" while on the stack, then "done"
    for root in range(len(nodes)):
        if root in state:
            continue
        state[root] = "open"
        stack = [(root, iter(producers(root)))]
        while stack:
            index, pending = stack[-1]
            for producer in pending:
                if state.get(producer) == "done":
                    continue
                if state.get(producer) == "open":
                    path = [i for i, _ in stack]
                    raise _cycle_error(nodes, writer, path[path.index(producer):])
                state[producer] = "open"
                stack.append((producer, iter(producers(producer))))
                break
            else:
                stack.pop()
                state[index] = "done"
                order.append(index)
    return order


def _cycle_error(nodes, writer: dict[str, int], cycle: list[int]) -> JitnnValueError:
    """The error for ``cycle`` (positions; each node reads an output of the next,
    the last one an output of the first), spelt out value by value."""
    steps = []
    for k, index in enumerate(cycle):
        source = cycle[(k + 1) % len(cycle)]
        value = next(name for name in nodes[index].input if writer.get(name) == source)
        steps.append(f"{node_label(nodes[index], index)} reads {value!r} from")
    start = node_label(nodes[cycle[0]], cycle[0])
    return JitnnValueError(f"onnx: {start}: the nodes form a cycle, so none of them can run "
                           f"first: {' '.join(steps)} {start}")


def check_kernel_shape(cv: Converter, attrs: dict, w) -> None:
    """A ``kernel_shape`` (optional for Conv and ConvTranspose) must repeat the
    weights' spatial dims: jitnn takes the kernel from the weights, so a
    contradicting one is a broken model, not a choice to make silently."""
    if "kernel_shape" not in attrs:
        return
    kernel = [int(k) for k in attrs["kernel_shape"]]
    spatial = shape_of(w)[2:]
    if tuple(kernel) != spatial:
        raise cv.invalid(f"kernel_shape {kernel} does not match the weights' spatial dims "
                         f"{spatial}")


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
        raise cv.unsupported(f"{what} must be known when the model is loaded (a constant or "
                             "computed from shapes), but it is computed at run time")
    return value


def spatial_rank_check(cv: Converter, x, what: str = "input") -> int:
    r = rank_of(x)
    if r not in (3, 4):
        raise cv.unsupported(f"{r - 2}-D {what} (jitnn runs 1-D and 2-D convolutions and pools)")
    return r


# --- padding arithmetic -----------------------------------------------------------

def same_pads(auto_pad: str, size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """ONNX SAME_UPPER / SAME_LOWER: output ceil(size / stride), extra pad at the end / begin."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small = total // 2
    return (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)


def conv_pads(cv: Converter, attrs: dict, spatial: list[int], kernel: list[int],
              strides: list[int], dilations: list[int]) -> list[tuple[int, int]]:
    """Per spatial axis (begin, end) padding from ``pads`` / ``auto_pad``."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    nd = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return [same_pads(auto_pad, spatial[i], kernel[i], strides[i], dilations[i])
                for i in range(nd)]
    if auto_pad == "VALID":
        return [(0, 0)] * nd
    if auto_pad not in ("NOTSET", ""):
        raise cv.unsupported(f"auto_pad {auto_pad!r}")
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    if len(pads) != 2 * nd:
        raise cv.unsupported(f"pads {pads} for {nd} spatial axes")
    return [(pads[i], pads[i + nd]) for i in range(nd)]


def webnn_padding(pads: list[tuple[int, int]]) -> list[int]:
    (top, bottom), (left, right) = pads
    return [top, bottom, left, right]


def to_2d(cv: Converter, x, rank: int):
    """A 1-D (N, C, L) operand as 2-D (N, C, 1, L)."""
    if rank == 4:
        return cv.operand(x)
    n, c, length = shape_of(x)
    return cv.op("reshape", cv.operand(x), (n, c, 1, length))


def from_2d(cv: Converter, y: Operand, rank: int) -> Operand:
    if rank == 4:
        return y
    n, c, _, length = y.shape
    return cv.op("reshape", y, (n, c, length))


def filter_2d(cv: Converter, w, rank: int):
    """A 1-D filter (A, B, K) as (A, B, 1, K); a constant stays a constant."""
    if rank == 4:
        return cv.operand(w)
    if isinstance(w, Const):
        key = ("2d", id(w))
        cached = cv._operands.get(key)   # type: ignore[call-overload]
        if cached is None:
            a, b_, k = w.shape
            cached = cv.operand(Const(w.array.reshape(a, b_, 1, k), w.name))
            cv._operands[key] = cached   # type: ignore[index]
        return cached
    a, b_, k = shape_of(w)
    return cv.op("reshape", cv.operand(w), (a, b_, 1, k))


def expand_1d(values: list[int], rank: int, fill: int) -> tuple[int, int]:
    return (fill, values[0]) if rank == 3 else (values[0], values[1])


# --- handlers: ops on run-time tensors --------------------------------------------

def op_conv(cv: Converter, inputs, attrs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    rank = spatial_rank_check(cv, x)
    if rank_of(w) != rank:
        raise cv.unsupported(f"filter rank {rank_of(w)} for input rank {rank}")
    check_kernel_shape(cv, attrs, w)
    nd = rank - 2
    kernel = list(shape_of(w)[2:])
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = conv_pads(cv, attrs, list(shape_of(x)[2:]), kernel, strides, dilations)
    if nd == 1:
        pads = [(0, 0)] + pads
    y = cv.op("conv2d", to_2d(cv, x, rank), filter_2d(cv, w, rank),
              None if bias is None else cv.operand(bias),
              strides=expand_1d(strides, rank, 1), dilations=expand_1d(dilations, rank, 1),
              padding=webnn_padding(pads), groups=int(attrs.get("group", 1)))
    return [from_2d(cv, y, rank)]


def op_conv_transpose(cv: Converter, inputs, attrs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    rank = spatial_rank_check(cv, x)
    check_kernel_shape(cv, attrs, w)
    nd = rank - 2
    spatial = list(shape_of(x)[2:])
    kernel = list(shape_of(w)[2:])
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    output_padding = list(attrs.get("output_padding", [0] * nd))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    output_shape = attrs.get("output_shape")
    if output_shape is not None:
        output_shape = list(output_shape)[-nd:]
    pads = None
    if output_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [spatial[i] * strides[i] for i in range(nd)]
    if output_shape is not None:
        pads, extra = [], []
        for i in range(nd):
            total = (strides[i] * (spatial[i] - 1) + output_padding[i]
                     + (kernel[i] - 1) * dilations[i] + 1 - output_shape[i])
            if total < 0:               # a larger output: the rows past the end
                pads.append((0, 0))
                extra.append(output_padding[i] - total)
                continue
            small = total // 2
            pads.append((small, total - small) if auto_pad == "SAME_UPPER"
                        else (total - small, small))
            extra.append(output_padding[i])
        output_padding = extra
    else:
        pads = conv_pads(cv, {**attrs, "auto_pad": "NOTSET" if auto_pad == "VALID"
                              else auto_pad}, spatial, kernel, strides, dilations)
        if auto_pad == "VALID":
            pads = [(0, 0)] * nd
    if nd == 1:
        pads = [(0, 0)] + pads
    y = cv.op("conv_transpose2d", to_2d(cv, x, rank), filter_2d(cv, w, rank),
              None if bias is None else cv.operand(bias),
              strides=expand_1d(strides, rank, 1), dilations=expand_1d(dilations, rank, 1),
              padding=webnn_padding(pads),
              output_padding=expand_1d(output_padding, rank, 0),
              groups=int(attrs.get("group", 1)), filter_layout="iohw")
    return [from_2d(cv, y, rank)]


def op_gemm(cv: Converter, inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    c_operand = None
    if c is not None and beta != 0.0:
        c_operand = cv.operand(c)
    y = cv.op("gemm", cv.operand(a), cv.operand(b), c_operand, alpha=alpha,
              beta=beta if c_operand is not None else 1.0,
              a_transpose=bool(attrs.get("transA", 0)),
              b_transpose=bool(attrs.get("transB", 0)))
    return [y]


def op_matmul(cv: Converter, inputs, attrs):
    a, b = inputs
    ra, rb = rank_of(a), rank_of(b)
    a_op, b_op = cv.operand(a), cv.operand(b)
    if ra == 1:
        a_op = cv.op("reshape", a_op, (1,) + shape_of(a))
    if rb == 1:
        b_op = cv.op("reshape", b_op, shape_of(b) + (1,))
    y = cv.op("matmul", a_op, b_op)
    if ra == 1 or rb == 1:
        shape = list(y.shape)
        if rb == 1:
            shape.pop(-1)
        if ra == 1:
            shape.pop(-2 if rb != 1 else -1)
        y = cv.op("reshape", y, tuple(shape))
    return [y]


def _unary(name: str) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        return [cv.op(name, cv.operand(inputs[0]))]
    return handler


def op_leaky_relu(cv: Converter, inputs, attrs):
    return [cv.op("leaky_relu", cv.operand(inputs[0]), float(attrs.get("alpha", 0.01)))]


def op_hard_sigmoid(cv: Converter, inputs, attrs):
    """``max(0, min(1, alpha * x + beta))`` = clamp(x * alpha + beta, 0, 1)."""
    x = cv.op("mul", cv.operand(inputs[0]), float(attrs.get("alpha", 0.2)))
    x = cv.op("add", x, float(attrs.get("beta", 0.5)))
    return [cv.op("clamp", x, 0.0, 1.0)]


def op_neg(cv: Converter, inputs, attrs):
    return [cv.op("mul", cv.operand(inputs[0]), -1.0)]


def op_prelu(cv: Converter, inputs, attrs):
    """``x if x >= 0 else slope * x`` = relu(x) + slope * min(x, 0) (exact)."""
    x, slope = inputs
    xo = cv.operand(x)
    slope_v = slope
    if isinstance(slope, Const) and cv.opset < 7 and slope.array.ndim == 1 \
            and rank_of(x) > 2 and slope.array.size == shape_of(x)[1]:
        # opset 6 PRelu: a (C,) slope runs along the channels
        slope_v = Const(slope.array.reshape((-1,) + (1,) * (rank_of(x) - 2)), slope.name)
    negative = cv.op("mul", cv.op("minimum", xo, 0.0), cv.scalar_or_operand(slope_v, rank_of(x)))
    return [cv.op("add", cv.op("relu", xo), negative)]


def op_clip(cv: Converter, inputs, attrs):
    x = cv.operand(inputs[0])
    if cv.opset < 11:
        lo = float(attrs.get("min", -np.inf))
        hi = float(attrs.get("max", np.inf))
        bounds = [lo, hi]
    else:
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            v = inputs[i] if len(inputs) > i else None
            if v is None:
                bounds.append(default)
            elif isinstance(v, Const):
                bounds.append(float(v.array.reshape(-1)[0]))
            else:
                bounds.append(cv.operand(v))
    lo, hi = bounds
    if isinstance(lo, float) and isinstance(hi, float):
        if lo > hi:           # ONNX/numpy: min(max(x, lo), hi) = hi everywhere
            lo = hi
        return [cv.op("clamp", x, lo, hi)]
    y = x
    if not (isinstance(lo, float) and lo == -np.inf):
        y = cv.op("maximum", y, lo)
    if not (isinstance(hi, float) and hi == np.inf):
        y = cv.op("minimum", y, hi)
    return [y]


def _legacy_broadcast(cv: Converter, a, b, attrs):
    """Opset < 7: ``broadcast=1`` aligns B with A from ``axis`` (default: the end)."""
    if cv.opset >= 7 or not attrs.get("broadcast", 0) or "axis" not in attrs:
        return b
    axis = int(attrs["axis"]) % rank_of(a)
    trailing = rank_of(a) - axis - rank_of(b)
    if trailing <= 0:
        return b
    shape = shape_of(b) + (1,) * trailing
    if isinstance(b, Const):
        return Const(b.array.reshape(shape), b.name)
    return cv.op("reshape", cv.operand(b), shape)


COMMUTATIVE = ("add", "mul", "maximum", "minimum")


def _commuted(name: str, a, b):
    """For a commutative op on two same-shape run-time tensors, the later-made
    operand first: the scheduler fuses an add into the conv2d that produces
    the op's first operand, and in a residual block ``x + conv(...)`` the
    conv's result is the later one (exact: these ops commute bit for bit)."""
    if name in COMMUTATIVE and isinstance(a, Operand) and isinstance(b, Operand) \
            and a.shape == b.shape and b._index > a._index:
        return b, a
    return a, b


def _binary(name: str) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        a, b = inputs
        b = _legacy_broadcast(cv, a, b, attrs)
        out_rank = max(rank_of(a), rank_of(b))
        a, b = _commuted(name, cv.scalar_or_operand(a, out_rank), cv.scalar_or_operand(b, out_rank))
        return [cv.op(name, a, b)]
    return handler


def _variadic(name: str, mean: bool = False) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        items = [v for v in inputs if v is not None]
        rank = max(rank_of(v) for v in items)
        operands = [cv.scalar_or_operand(v, rank) for v in items]
        if not isinstance(operands[0], Operand):
            operands[0] = cv.operand(items[0])
        if len(operands) == 1:          # the max/min/sum/mean of one tensor is the tensor
            return [operands[0]]
        y = operands[0]
        for other in operands[1:]:
            y = cv.op(name, *_commuted(name, y, other))
        if mean:
            y = cv.op("div", y, float(len(operands)))
        return [y]
    return handler


def _pool_geometry(cv: Converter, x, attrs, kernel):
    rank = spatial_rank_check(cv, x)
    nd = rank - 2
    spatial = list(shape_of(x)[2:])
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = conv_pads(cv, attrs, spatial, kernel, strides, dilations)
    ceil = bool(attrs.get("ceil_mode", 0))
    out = []
    for i in range(nd):
        span = spatial[i] + pads[i][0] + pads[i][1] - ((kernel[i] - 1) * dilations[i] + 1)
        if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
            size = -(-spatial[i] // strides[i])
        elif ceil:
            size = -(-span // strides[i]) + 1
            # the last window must start inside the input or its begin padding
            if (size - 1) * strides[i] >= spatial[i] + pads[i][0]:
                size -= 1
        else:
            size = span // strides[i] + 1
        out.append(size)
    if nd == 1:
        pads, kernel, strides, dilations, out = ([(0, 0)] + pads, [1] + kernel, [1] + strides,
                                                 [1] + dilations, [1] + out)
    return rank, dict(window_dimensions=tuple(kernel), strides=tuple(strides),
                      dilations=tuple(dilations), padding=webnn_padding(pads),
                      output_sizes=tuple(out))


def op_max_pool(cv: Converter, inputs, attrs, outputs=1):
    if outputs > 1:
        raise cv.unsupported("the Indices output of MaxPool")
    x = inputs[0]
    kernel = list(attrs["kernel_shape"])
    rank, options = _pool_geometry(cv, x, attrs, kernel)
    return [from_2d(cv, cv.op("max_pool2d", to_2d(cv, x, rank), **options), rank)]


def op_average_pool(cv: Converter, inputs, attrs):
    x = inputs[0]
    kernel = list(attrs["kernel_shape"])
    rank, options = _pool_geometry(cv, x, attrs, kernel)
    if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") and \
            attrs.get("count_include_pad", 0):
        raise cv.unsupported("auto_pad SAME with count_include_pad=1")
    y = cv.op("average_pool2d", to_2d(cv, x, rank), **options,
              count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return [from_2d(cv, y, rank)]


def op_global_average_pool(cv: Converter, inputs, attrs):
    x = inputs[0]
    rank = spatial_rank_check(cv, x)
    return [from_2d(cv, cv.op("global_average_pool2d", to_2d(cv, x, rank)), rank)]


def op_global_max_pool(cv: Converter, inputs, attrs):
    x = inputs[0]
    rank = spatial_rank_check(cv, x)
    return [from_2d(cv, cv.op("max_pool2d", to_2d(cv, x, rank)), rank)]


def op_batch_normalization(cv: Converter, inputs, attrs, outputs=1):
    if attrs.get("training_mode", 0) or outputs > 1:
        raise cv.unsupported("training mode (only inference BatchNormalization runs)")
    x, scale, bias, mean, var = inputs[:5]
    channels = shape_of(x)[1]
    for v in (scale, bias, mean, var):
        if shape_of(v) != (channels,):
            raise cv.unsupported(f"statistics of shape {shape_of(v)} (expected ({channels},))")
    return [cv.op("batch_normalization", cv.operand(x), cv.operand(mean), cv.operand(var),
                  cv.operand(scale), cv.operand(bias),
                  epsilon=float(attrs.get("epsilon", 1e-5)), axis=1)]


def op_concat(cv: Converter, inputs, attrs):
    items = [v for v in inputs if v is not None and math.prod(shape_of(v)) > 0] or inputs[:1]
    if len(items) == 1:
        return [cv.operand(items[0])]
    return [cv.op("concat", [cv.operand(v) for v in items], int(attrs["axis"]))]


def op_flatten(cv: Converter, inputs, attrs):
    return [cv.op("flatten", cv.operand(inputs[0]), int(attrs.get("axis", 1)))]


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


def op_reshape(cv: Converter, inputs, attrs):
    x = inputs[0]
    shape = reshape_target(cv, x, inputs, attrs)
    if shape == shape_of(x):
        return [cv.operand(x)]
    return [cv.op("reshape", cv.operand(x), shape)]


def op_transpose(cv: Converter, inputs, attrs):
    perm = attrs.get("perm")
    return [cv.op("transpose", cv.operand(inputs[0]), None if perm is None else list(perm))]


def op_softmax(cv: Converter, inputs, attrs):
    x = cv.operand(inputs[0])
    rank = len(x.shape)
    if cv.opset >= 13:
        return [cv.op("softmax", x, int(attrs.get("axis", -1)))]
    axis = int(attrs.get("axis", 1)) % max(rank, 1)
    if axis == rank - 1:
        return [cv.op("softmax", x, -1)]
    # opset < 13: the input coerced to 2-D at axis, softmax over the second axis
    flat = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    y = cv.op("softmax", cv.op("reshape", x, flat), -1)
    return [cv.op("reshape", y, x.shape)]


def op_lrn(cv: Converter, inputs, attrs):
    return [cv.op("lrn", cv.operand(inputs[0]), int(attrs["size"]),
                  alpha=float(attrs.get("alpha", 1e-4)), beta=float(attrs.get("beta", 0.75)),
                  bias=float(attrs.get("bias", 1.0)))]


def op_dropout(cv: Converter, inputs, attrs, outputs=1):
    x = inputs[0]
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None:
        if not isinstance(training, Const) or bool(training.array):
            ratio = inputs[1] if len(inputs) > 1 else None
            if not (isinstance(ratio, Const) and float(ratio.array) == 0.0):
                raise cv.unsupported("training mode (Dropout runs as the identity)")
    if cv.opset < 7 and attrs.get("is_test", 0) == 0 and cv.opset >= 6:
        pass  # exporters set is_test; inference treats Dropout as the identity either way
    results = [x]
    if outputs > 1:
        results.append(Const(np.ones(shape_of(x), bool)))
    return results


def op_identity(cv: Converter, inputs, attrs):
    return [inputs[0]]


def op_shape(cv: Converter, inputs, attrs):
    shape = np.array(shape_of(inputs[0]), np.int64)
    start, end = attrs.get("start", 0), attrs.get("end")
    return [Const(shape[start:end])]


def op_size(cv: Converter, inputs, attrs):
    return [Const(np.array(math.prod(shape_of(inputs[0])), np.int64))]


def op_unsqueeze(cv: Converter, inputs, attrs):
    x = inputs[0]
    return [cv.op("reshape", cv.operand(x), unsqueeze_shape(cv, x, inputs, attrs))]


def op_squeeze(cv: Converter, inputs, attrs):
    x = inputs[0]
    return [cv.op("reshape", cv.operand(x), squeeze_shape(cv, x, inputs, attrs))]


def op_cast(cv: Converter, inputs, attrs):
    to = onnx_dtype(int(attrs["to"]))
    if to != np.float32:
        raise cv.unsupported(f"Cast of a run-time tensor to {to} (jitnn computes in float32)")
    return [inputs[0]]


def op_gather(cv: Converter, inputs, attrs):
    x, indices = inputs
    indices = need_const(cv, indices, "the indices")
    return [cv.op("gather", cv.operand(x), indices.array.astype(np.int64),
                  int(attrs.get("axis", 0)))]


def op_slice(cv: Converter, inputs, attrs):
    x = inputs[0]
    index = slice_index(cv, x, inputs, attrs)
    y = cv.operand(x)
    shape = shape_of(x)
    starts, sizes, strides, reversed_axes = [], [], [], []
    for axis, s in enumerate(index):
        picked = range(*s.indices(shape[axis]))
        if picked.step < 0:
            reversed_axes.append((axis, picked))
            starts.append(0), sizes.append(shape[axis]), strides.append(1)
        else:
            starts.append(picked.start if len(picked) else 0)
            sizes.append(len(picked))
            strides.append(picked.step)
    if any((b, n, s) != (0, d, 1) for b, n, s, d in zip(starts, sizes, strides, shape)):
        y = cv.op("slice", y, starts, sizes, strides=strides)
    for axis, picked in reversed_axes:
        y = cv.op("gather", y, np.array(list(picked), np.int64), axis)
    return [y]


def op_split(cv: Converter, inputs, attrs, outputs=1):
    x = inputs[0]
    axis = int(attrs.get("axis", 0)) % rank_of(x)
    sizes = split_sizes(cv, x, inputs, attrs, outputs, axis)
    results, start = [], 0
    rank = rank_of(x)
    for size in sizes:
        starts = [0] * rank
        starts[axis] = start
        lengths = list(shape_of(x))
        lengths[axis] = size
        results.append(cv.op("slice", cv.operand(x), starts, lengths))
        start += size
    return results


def op_abs(cv: Converter, inputs, attrs):
    """``|x|`` = max(x, -x) (exact)."""
    x = cv.operand(inputs[0])
    return [cv.op("maximum", x, cv.op("mul", x, -1.0))]


def op_pad(cv: Converter, inputs, attrs):
    """Constant padding as a concat with constant blocks; reflect / edge / wrap
    as a gather of the source rows (both exact); negative pads as a slice."""
    x = inputs[0]
    rank = rank_of(x)
    if cv.opset < 11:
        pads = list(attrs.get("pads", attrs.get("paddings", [0] * 2 * rank)))
        value = float(attrs.get("value", 0.0))
        axes = list(range(rank))
    else:
        pads = ints(need_const(cv, inputs[1], "the pads"))
        value_in = inputs[2] if len(inputs) > 2 else None
        value = 0.0 if value_in is None else \
            float(need_const(cv, value_in, "the constant value").array.reshape(-1)[0])
        axes = ints(need_const(cv, inputs[3], "the axes")) if len(inputs) > 3 and \
            inputs[3] is not None else list(range(rank))
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise cv.unsupported(f"mode {mode!r}")
    count = len(axes)
    y = cv.operand(x)
    for k, axis in enumerate(axes):
        axis %= rank
        begin, end = pads[k], pads[k + count]
        if begin < 0 or end < 0:
            size = y.shape[axis]
            starts = [0] * rank
            lengths = list(y.shape)
            starts[axis] = max(0, -begin)
            lengths[axis] = size - max(0, -begin) - max(0, -end)
            y = cv.op("slice", y, starts, lengths)
            begin, end = max(0, begin), max(0, end)
        if begin == 0 and end == 0:
            continue
        if mode == "constant":
            parts = []
            for amount in (begin, None, end):
                if amount is None:
                    parts.append(y)
                elif amount:
                    shape = list(y.shape)
                    shape[axis] = amount
                    parts.append(cv.operand(Const(np.full(shape, value, np.float32))))
            y = cv.op("concat", parts, axis)
        else:
            index = np.pad(np.arange(y.shape[axis]), (begin, end), mode=mode)
            y = cv.op("gather", y, index.astype(np.int64), axis)
    return [y]


def op_tile(cv: Converter, inputs, attrs):
    """Tile as a gather of repeated rows per axis (exact)."""
    x = inputs[0]
    repeats = ints(need_const(cv, inputs[1], "the repeats"))
    y = cv.operand(x)
    for axis, times in enumerate(repeats):
        if times != 1:
            index = np.tile(np.arange(y.shape[axis]), times)
            y = cv.op("gather", y, index.astype(np.int64), axis)
    return [y]


#: ONNX op type -> handler(converter, inputs, attrs[, outputs]) for run-time tensors
OPS: dict[str, Callable] = {
    "Conv": op_conv, "ConvTranspose": op_conv_transpose, "Gemm": op_gemm, "MatMul": op_matmul,
    "Relu": _unary("relu"), "Sigmoid": _unary("sigmoid"), "Tanh": _unary("tanh"),
    "HardSwish": _unary("hard_swish"), "LeakyRelu": op_leaky_relu,
    "HardSigmoid": op_hard_sigmoid, "Clip": op_clip, "Neg": op_neg, "PRelu": op_prelu,
    "Add": _binary("add"), "Sub": _binary("sub"), "Mul": _binary("mul"), "Div": _binary("div"),
    "Sum": _variadic("add"), "Max": _variadic("maximum"), "Min": _variadic("minimum"),
    "Mean": _variadic("add", mean=True),
    "MaxPool": op_max_pool, "AveragePool": op_average_pool,
    "GlobalAveragePool": op_global_average_pool, "GlobalMaxPool": op_global_max_pool,
    "BatchNormalization": op_batch_normalization, "Concat": op_concat, "Flatten": op_flatten,
    "Reshape": op_reshape, "Transpose": op_transpose, "Softmax": op_softmax, "LRN": op_lrn,
    "Dropout": op_dropout, "Identity": op_identity, "Shape": op_shape, "Size": op_size,
    "Unsqueeze": op_unsqueeze, "Squeeze": op_squeeze, "Cast": op_cast, "Gather": op_gather,
    "Slice": op_slice, "Split": op_split, "Abs": op_abs, "Pad": op_pad, "Tile": op_tile,
}

#: handlers that take the number of outputs the node asks for
MULTI_OUTPUT = {"MaxPool", "BatchNormalization", "Dropout", "Split"}


# --- folding: ops on load-time constants (numpy) ---------------------------------

_ONNX_TO_NUMPY = None


def onnx_dtype(code: int) -> np.dtype:
    global _ONNX_TO_NUMPY
    if _ONNX_TO_NUMPY is None:
        from onnx import helper
        _ONNX_TO_NUMPY = helper
    try:
        return np.dtype(_ONNX_TO_NUMPY.tensor_dtype_to_np_dtype(code))
    except (KeyError, TypeError, ValueError):
        raise UnsupportedError(f"onnx: tensor data type {code} has no numpy equivalent") from None


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


def _fold_numpy(function: Callable) -> Callable:
    def fold(cv, arrays, attrs, outputs):
        return [function(*arrays)]
    return fold


def _fold_div(cv, arrays, attrs, outputs):
    a, b = arrays
    if a.dtype.kind in "iu":
        with np.errstate(divide="ignore"):
            return [np.trunc(a / b).astype(a.dtype)] if a.dtype.kind == "i" else [a // b]
    return [np.divide(a, b)]


def _fold_legacy(function):
    def fold(cv, arrays, attrs, outputs):
        a, b = arrays
        b = _legacy_broadcast(cv, Const(a), Const(b), attrs).array
        return [function(a, b).astype(np.result_type(a, b), copy=False)]
    return fold


def _fold_variadic(function):
    def fold(cv, arrays, attrs, outputs):
        result = arrays[0]
        for other in arrays[1:]:
            result = function(result, other)
        return [result]
    return fold


def _fold_constant(cv, arrays, attrs, outputs):
    from onnx import numpy_helper
    if "value" in attrs:
        return [numpy_helper.to_array(attrs["value"])]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return [np.array(attrs[key], dtype)]
    raise cv.unsupported(f"attributes {sorted(attrs)}")


def _fold_constant_of_shape(cv, arrays, attrs, outputs):
    from onnx import numpy_helper
    value = numpy_helper.to_array(attrs["value"]).reshape(-1)[0] if "value" in attrs \
        else np.float32(0)
    return [np.full(tuple(int(d) for d in arrays[0]), value, dtype=np.asarray(value).dtype)]


def _fold_gather(cv, arrays, attrs, outputs):
    return [np.take(arrays[0], arrays[1].astype(np.int64), axis=int(attrs.get("axis", 0)))]


def _fold_unsqueeze(cv, arrays, attrs, outputs):
    consts = [Const(a) for a in arrays]
    return [arrays[0].reshape(unsqueeze_shape(cv, consts[0], consts, attrs))]


def _fold_squeeze(cv, arrays, attrs, outputs):
    consts = [Const(a) for a in arrays]
    return [arrays[0].reshape(squeeze_shape(cv, consts[0], consts, attrs))]


def _fold_cast(cv, arrays, attrs, outputs):
    return [arrays[0].astype(onnx_dtype(int(attrs["to"])))]


def _fold_slice(cv, arrays, attrs, outputs):
    consts = [None if a is None else Const(a) for a in arrays]
    return [arrays[0][slice_index(cv, consts[0], consts, attrs)]]


def _fold_concat(cv, arrays, attrs, outputs):
    return [np.concatenate(arrays, axis=int(attrs["axis"]))]


def _fold_reshape(cv, arrays, attrs, outputs):
    consts = [Const(a) for a in arrays]
    return [arrays[0].reshape(reshape_target(cv, consts[0], consts, attrs))]


def _fold_shape(cv, arrays, attrs, outputs):
    return [op_shape(cv, [Const(arrays[0])], attrs)[0].array]


def _fold_range(cv, arrays, attrs, outputs):
    start, limit, delta = (a.reshape(()) for a in arrays)
    return [np.arange(start, limit, delta, dtype=np.result_type(start, limit, delta))]


def _fold_split(cv, arrays, attrs, outputs):
    x = arrays[0]
    axis = int(attrs.get("axis", 0)) % x.ndim
    sizes = split_sizes(cv, Const(x), [Const(a) for a in arrays], attrs, outputs, axis)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _fold_expand(cv, arrays, attrs, outputs):
    x, shape = arrays
    return [x * np.ones(tuple(int(d) for d in shape), x.dtype)]


def _fold_transpose(cv, arrays, attrs, outputs):
    perm = attrs.get("perm")
    return [np.transpose(arrays[0], None if perm is None else list(perm))]


def _fold_flatten(cv, arrays, attrs, outputs):
    x = arrays[0]
    axis = int(attrs.get("axis", 1)) % (x.ndim + 1) if x.ndim else 0
    return [x.reshape(math.prod(x.shape[:axis]), -1)]


def _fold_identity(cv, arrays, attrs, outputs):
    return [arrays[0]]


def _fold_where(cv, arrays, attrs, outputs):
    return [np.where(*arrays)]


def _fold_reduce(function):
    def fold(cv, arrays, attrs, outputs):
        x = arrays[0]
        axes = attrs.get("axes")
        if axes is None and len(arrays) > 1 and arrays[1] is not None:
            axes = [int(a) for a in arrays[1]]
        axes = tuple(axes) if axes else None
        return [np.asarray(function(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1))))]
    return fold


FOLD: dict[str, Callable] = {
    "Constant": _fold_constant, "ConstantOfShape": _fold_constant_of_shape,
    "Shape": _fold_shape, "Gather": _fold_gather, "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze, "Cast": _fold_cast, "Slice": _fold_slice, "Concat": _fold_concat,
    "Reshape": _fold_reshape, "Range": _fold_range, "Split": _fold_split,
    "Expand": _fold_expand, "Tile": _fold_numpy(np.tile), "Transpose": _fold_transpose, "Flatten": _fold_flatten,
    "Identity": _fold_identity, "Where": _fold_where,
    "Add": _fold_legacy(np.add), "Sub": _fold_legacy(np.subtract),
    "Mul": _fold_legacy(np.multiply), "Div": _fold_div,
    "Max": _fold_variadic(np.maximum), "Min": _fold_variadic(np.minimum),
    "Sum": _fold_variadic(np.add),
    "Neg": _fold_numpy(np.negative), "Abs": _fold_numpy(np.abs),
    "Floor": _fold_numpy(np.floor), "Ceil": _fold_numpy(np.ceil),
    "Sqrt": _fold_numpy(np.sqrt),
    "Equal": _fold_numpy(np.equal), "Less": _fold_numpy(np.less),
    "Greater": _fold_numpy(np.greater), "Not": _fold_numpy(np.logical_not),
    "And": _fold_numpy(np.logical_and), "Or": _fold_numpy(np.logical_or),
    "ReduceProd": _fold_reduce(np.prod), "ReduceSum": _fold_reduce(np.sum),
    "ReduceMax": _fold_reduce(np.max), "ReduceMin": _fold_reduce(np.min),
}
#: ops folded whatever their inputs: they only read shapes
SHAPE_ONLY = {"Shape", "Size"}
#: ops whose float data folds are exact in any dtype (pure data movement)
# (arithmetic on float constants folds in the constants' dtype, like ONNX Runtime's
# constant folding)

#: the ONNX ops the frontend accepts (on run-time tensors, or folded when constant)
SUPPORTED_OPS = tuple(sorted(set(OPS) | set(FOLD)))
