"""Checks of an ONNX graph's structure before it is converted: every
input defined, one writer per value, no output shadowing an input, nodes put
in dependency order (or a cycle named), and kernel_shape against the weights."""

from __future__ import annotations

from ..errors import JitnnValueError
from ._common import Converter, node_label, outer_reads, shape_of


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

    # a node with subgraphs (If, Loop, Scan) also runs after the writers of what they read
    implicit = {index: outer_reads(node) for index, node in enumerate(nodes)
                if any(a.HasField("g") or a.graphs for a in node.attribute)}

    def producers(index: int) -> list[int]:
        return [writer[name] for name in [*nodes[index].input, *implicit.get(index, ())]
                if name in writer]

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


#: ``OpSchema.min_input`` of each op jitnn converts, by opset: a number, or
#: ``(since opset, count)`` steps (0 before the op existed: its handler
#: decides). ONNX's own table (``onnx.defs``) costs 6.6 MB of memory to load,
#: every version of every op's schema, for this one number;
#: tests/test_onnx_coverage.py checks this copy against it.
_MIN_INPUTS: dict[str, int | tuple[tuple[int, int], ...]] = {
    "Abs": 1, "Add": 2, "And": 2, "ArgMax": 1, "ArgMin": 1, "AveragePool": 1,
    "BatchNormalization": 5, "Cast": 1, "CastLike": ((1, 0), (15, 2)), "Ceil": 1, "Clip": 1,
    "Col2Im": ((1, 0), (18, 3)), "DepthToSpace": 1,
    "Concat": 1, "Constant": 0, "ConstantOfShape": ((1, 0), (9, 1)), "Conv": 2,
    "ConvTranspose": 2, "ConcatFromSequence": ((1, 0), (11, 1)), "Cos": ((1, 0), (7, 1)),
    "CumSum": ((1, 0), (11, 2)), "Div": 2,
    "Dropout": 1, "Einsum": ((1, 0), (12, 1)), "Elu": 1, "Equal": 2, "Erf": ((1, 0), (9, 1)),
    "Exp": 1, "Expand": ((1, 0), (8, 2)), "EyeLike": ((1, 0), (9, 1)),
    "Flatten": 1, "Floor": 1, "GRU": 3, "Gather": 2,
    "GatherElements": ((1, 0), (11, 2)), "GatherND": ((1, 0), (11, 2)), "Gelu": ((1, 0), (20, 1)),
    "Gemm": ((1, 3), (11, 2)), "GlobalAveragePool": 1, "GlobalMaxPool": 1, "Greater": 2,
    "GridSample": ((1, 0), (16, 2)),
    "GreaterOrEqual": ((1, 0), (12, 2)), "GroupNormalization": ((1, 0), (18, 3)),
    "HardSigmoid": 1, "HardSwish": ((1, 0), (14, 1)),
    "Identity": 1, "If": 1, "InstanceNormalization": 3, "IsInf": ((1, 0), (10, 1)),
    "IsNaN": ((1, 0), (9, 1)), "LRN": 1, "LSTM": 3, "LayerNormalization": ((1, 0), (17, 2)),
    "LeakyRelu": 1,
    "Less": 2, "LessOrEqual": ((1, 0), (12, 2)), "Log": 1, "LogSoftmax": 1,
    "Loop": ((1, 3), (11, 2)), "MatMul": 2, "Max": 1,
    "MaxPool": 1, "Mean": 1, "Min": 1, "Mod": ((1, 0), (10, 2)), "Mul": 2, "Neg": 1, "Not": 1,
    "OneHot": ((1, 0), (9, 3)), "Or": 2, "PRelu": 2, "Pad": ((1, 1), (11, 2)), "Pow": 2,
    "RMSNormalization": ((1, 0), (23, 2)), "RNN": 3, "Range": ((1, 0), (11, 3)),
    "Reciprocal": 1,
    "ReduceL1": 1, "ReduceL2": 1, "ReduceLogSum": 1, "ReduceLogSumExp": 1, "ReduceMax": 1,
    "ReduceMean": 1, "ReduceMin": 1, "ReduceProd": 1, "ReduceSum": 1, "ReduceSumSquare": 1,
    "Relu": 1, "Reshape": ((1, 1), (5, 2)), "Resize": ((1, 0), (10, 2), (11, 3), (13, 1)),
    "Round": ((1, 0), (11, 1)), "Scan": ((1, 0), (8, 2), (9, 1)),
    "ScatterElements": ((1, 0), (11, 3)),
    "ScatterND": ((1, 0), (11, 3)), "Selu": 1, "SequenceAt": ((1, 0), (11, 2)),
    "SequenceConstruct": ((1, 0), (11, 1)), "SequenceEmpty": 0,
    "SequenceErase": ((1, 0), (11, 1)), "SequenceInsert": ((1, 0), (11, 2)),
    "SequenceLength": ((1, 0), (11, 1)), "SplitToSequence": ((1, 0), (11, 1)), "Shape": 1,
    "Sigmoid": 1, "Sign": ((1, 0), (9, 1)),
    "Sin": ((1, 0), (7, 1)), "Size": 1, "Slice": ((1, 1), (10, 3)), "Softmax": 1, "Softplus": 1,
    "Softsign": 1, "SpaceToDepth": 1, "Split": 1, "Sqrt": 1, "Squeeze": 1, "Sub": 2, "Sum": 1,
    "Tan": ((1, 0), (7, 1)), "Tanh": 1, "Tile": ((1, 3), (6, 2)), "TopK": ((1, 1), (10, 2)),
    "Transpose": 1,
    "Trilu": ((1, 0), (14, 1)), "Unsqueeze": ((1, 1), (13, 2)), "Where": ((1, 0), (9, 3)),
    "Xor": 2
}


def min_inputs(op_type: str, opset: int) -> int:
    """How many leading inputs ``op_type`` requires at ``opset`` (0 for an op
    jitnn does not convert: it is refused as unsupported)."""
    steps = _MIN_INPUTS.get(op_type, 0)
    if isinstance(steps, int):
        return steps
    required = 0
    for since, count in steps:             # in opset order: the last one reached holds
        if opset >= since:
            required = count
    return required


def check_input_count(cv: Converter, node) -> None:
    """A node with fewer inputs than its op requires (by ONNX's schema of the
    model's opset) is a broken model: refused naming the node, not left to
    fail inside a handler."""
    required = min_inputs(node.op_type, cv.opset)
    present = len(node.input)
    # Loop's trip count and condition, and Scan-8's sequence_lens, may be left out by
    # name ("") but not by position
    named = 0 if node.op_type in ("Loop", "Scan") else required
    if present < required or any(not name for name in list(node.input)[:named]):
        given = sum(1 for name in node.input if name)
        raise cv.invalid(f"{node.op_type} needs at least {required} input(s), got {given}")
