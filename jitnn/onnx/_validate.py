"""Checks of an ONNX graph's structure before it is converted: every
input defined, one writer per value, no output shadowing an input, nodes put
in dependency order (or a cycle named), and kernel_shape against the weights."""

from __future__ import annotations

from ..errors import JitnnValueError
from ._common import Converter, node_label, shape_of


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


_SCHEMAS: dict = {}


def check_input_count(cv: Converter, node) -> None:
    """A node with fewer inputs than its op requires (by ONNX's schema of the
    model's opset) is a broken model: refused naming the node, not left to
    fail inside a handler."""
    key = (node.op_type, cv.opset)
    if key not in _SCHEMAS:
        from onnx import defs
        try:
            _SCHEMAS[key] = defs.get_schema(node.op_type, cv.opset, "").min_input
        except defs.SchemaError:
            _SCHEMAS[key] = 0               # an op ONNX does not know: the handlers decide
    required = _SCHEMAS[key]
    present = len(node.input)
    if present < required or any(not name for name in list(node.input)[:required]):
        given = sum(1 for name in node.input if name)
        raise cv.invalid(f"{node.op_type} needs at least {required} input(s), got {given}")

