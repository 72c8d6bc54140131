"""ONNX control flow (If, Loop, Scan) and sequences, resolved at load time.

A jitnn graph has static shapes and no control flow, so these ops are taken
apart while the model is converted:

- ``If`` whose condition is known at load time (a constant, shape arithmetic)
  converts only the chosen branch, inline. A run-time condition raises
  :class:`LoadTimeValueError` naming it (``run`` and the backend then fold
  the inputs it comes from).
- ``Loop`` with a trip count and a condition known at load time (constants,
  the iteration number) is unrolled: the body is converted once per
  iteration with that iteration's values bound to its inputs (loop-carried
  values may be run-time tensors), and each scan output is the iterations'
  values stacked along a new first axis (a reshape each and a concat).
- ``Scan`` (opset 9+) is unrolled the same way over its scan inputs' axes.
- An ONNX sequence is a :class:`Sequence`: a Python tuple of values
  (constants or run-time tensors) that the Sequence* ops build and read at
  load time. A sequence graph input or output is refused.

A subgraph sees the values of the scopes around it by name; each conversion
of a body has a scope of its own (``Converter.convert_subgraph``), so the
names an iteration writes do not clash with another's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..graph import Operand
from ._common import (Const, Converter, LoadTimeValueError, ints, need_const, onnx_dtype,
                      rank_of, shape_of)
from ._convert import op_concat

#: the most iterations a Loop or Scan is unrolled to (each one adds its body's ops)
MAX_ITERATIONS = 4096


class Sequence:
    """An ONNX sequence while converting: its values in order (each a
    :class:`Const` or a builder operand), and the element type the model
    gave it (``SequenceEmpty``'s dtype; None when not known)."""
    __slots__ = ("items", "dtype")

    def __init__(self, items, dtype=None):
        self.items = tuple(items)
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Sequence({len(self.items)} values)"


def _sequence(cv: Converter, value, what: str = "the sequence") -> Sequence:
    if not isinstance(value, Sequence):
        raise cv.invalid(f"{what} must be an ONNX sequence, got a tensor")
    return value


def _position(cv: Converter, value, length: int, default: int, allow_end: bool) -> int:
    """A sequence position (negative: from the end) checked against ``length``;
    ``allow_end``: the position just past the last value is valid (insert)."""
    if value is None:
        return default
    array = need_const(cv, value, "the position").array
    if array.size != 1 or array.dtype.kind not in "iu":
        raise cv.invalid(f"the position must be one integer, got {array.dtype} of shape "
                         f"{array.shape}")
    position = int(array.reshape(-1)[0])
    top = length if allow_end else length - 1
    if not -length <= position <= top:
        raise cv.invalid(f"position {position} is outside [{-length}, {top}] for a sequence "
                         f"of {length} value(s)")
    return position + length if position < 0 else position


def _dtype(cv: Converter, value) -> np.dtype:
    return cv.onnx_type(value)


def op_sequence_empty(cv: Converter, inputs, attrs):
    return [Sequence((), onnx_dtype(int(attrs.get("dtype", 1))))]


def op_sequence_construct(cv: Converter, inputs, attrs):
    items = [v for v in inputs if v is not None]
    if any(isinstance(v, Sequence) for v in items):
        raise cv.invalid("the inputs must be tensors, got a sequence")
    types = {_dtype(cv, v).str for v in items}
    if len(types) > 1:
        raise cv.invalid(f"the tensors have different types ({sorted(types)})")
    return [Sequence(items, _dtype(cv, items[0]) if items else None)]


def op_sequence_insert(cv: Converter, inputs, attrs):
    sequence = _sequence(cv, inputs[0])
    value = inputs[1]
    if isinstance(value, Sequence):
        raise cv.invalid("the value inserted must be a tensor, got a sequence")
    if sequence.dtype is not None and np.dtype(sequence.dtype) != _dtype(cv, value):
        raise cv.invalid(f"a {_dtype(cv, value)} tensor inserted into a sequence of "
                         f"{np.dtype(sequence.dtype)}")
    items = list(sequence.items)
    at = _position(cv, inputs[2] if len(inputs) > 2 else None, len(items), len(items), True)
    items.insert(at, value)
    return [Sequence(items, sequence.dtype or _dtype(cv, value))]


def op_sequence_at(cv: Converter, inputs, attrs):
    sequence = _sequence(cv, inputs[0])
    if not sequence.items:
        raise cv.invalid("SequenceAt of an empty sequence")
    return [sequence.items[_position(cv, inputs[1], len(sequence.items), 0, False)]]


def op_sequence_erase(cv: Converter, inputs, attrs):
    sequence = _sequence(cv, inputs[0])
    items = list(sequence.items)
    if not items:
        raise cv.invalid("SequenceErase of an empty sequence")
    del items[_position(cv, inputs[1] if len(inputs) > 1 else None, len(items),
                        len(items) - 1, False)]
    return [Sequence(items, sequence.dtype)]


def op_sequence_length(cv: Converter, inputs, attrs):
    return [Const(np.array(len(_sequence(cv, inputs[0]).items), np.int64))]


def op_concat_from_sequence(cv: Converter, inputs, attrs):
    """The values joined along ``axis``; ``new_axis=1``: stacked along a new axis."""
    sequence = _sequence(cv, inputs[0])
    if not sequence.items:
        raise cv.unsupported("ConcatFromSequence of an empty sequence has no shape to give")
    if "axis" not in attrs:
        raise cv.invalid("the required attribute 'axis' is missing")
    new_axis = int(attrs.get("new_axis", 0))
    axis = int(attrs["axis"])
    rank = rank_of(sequence.items[0]) + (1 if new_axis else 0)
    if not -rank <= axis < rank:
        raise cv.invalid(f"axis {axis} is outside [{-rank}, {rank - 1}]")
    axis %= rank
    shapes = {shape_of(v) for v in sequence.items} if new_axis else \
        {shape_of(v)[:axis] + shape_of(v)[axis + 1:] for v in sequence.items}
    if len(shapes) > 1:
        raise cv.invalid(f"the values' shapes {[shape_of(v) for v in sequence.items]} do not "
                         f"{'stack' if new_axis else 'concatenate'} along axis {axis}")
    if new_axis:
        return [stack(cv, list(sequence.items), axis)]
    if all(isinstance(v, Const) for v in sequence.items):
        return [Const(np.concatenate([v.array for v in sequence.items], axis))]
    return op_concat(cv, list(sequence.items), {"axis": axis})


def op_split_to_sequence(cv: Converter, inputs, attrs):
    """``input`` split along ``axis`` into pieces of the sizes ``split`` gives
    (one size: pieces of that size, the last one smaller); without ``split``,
    pieces of size 1, squeezed unless ``keepdims=1`` (the default)."""
    x = inputs[0]
    rank = rank_of(x)
    axis = int(attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise cv.invalid(f"axis {axis} is outside [{-rank}, {rank - 1}]")
    axis %= rank
    size = shape_of(x)[axis]
    split = inputs[1] if len(inputs) > 1 else None
    squeeze = False
    if split is None:
        sizes = [1] * size
        squeeze = not int(attrs.get("keepdims", 1))
    else:
        given = need_const(cv, split, "the split sizes")
        if given.array.ndim == 0:
            chunk = int(given.array)
            if chunk <= 0:
                raise cv.invalid(f"split size {chunk} must be positive")
            sizes = [min(chunk, size - start) for start in range(0, size, chunk)]
        else:
            sizes = ints(given)
            if any(s < 0 for s in sizes) or sum(sizes) != size:
                raise cv.invalid(f"split sizes {sizes} do not add up to axis {axis}'s {size}")
    pieces, start = [], 0
    for length in sizes:
        pieces.append(take(cv, x, axis, start, length, squeeze))
        start += length
    return [Sequence(pieces, _dtype(cv, x))]


# --- helpers the unrolling shares ---------------------------------------------------


def take(cv: Converter, x, axis: int, start: int, length: int, squeeze: bool):
    """``x[..., start:start + length, ...]`` along ``axis`` (that axis dropped
    when ``squeeze``, ``length`` 1): numpy for a constant, jitnn ops else."""
    shape = list(shape_of(x))
    out = shape[:axis] + ([] if squeeze else [length]) + shape[axis + 1:]
    if isinstance(x, Const):
        return Const(np.ascontiguousarray(
            np.take(x.array, np.arange(start, start + length), axis).reshape(out)))
    y = cv.operand(x)
    if length != shape[axis]:
        starts = [0] * len(shape)
        starts[axis] = start
        sizes = list(shape)
        sizes[axis] = length
        y = cv.op("slice", y, starts, sizes)
    if tuple(out) != tuple(y.shape):
        y = cv.op("reshape", y, tuple(out))
    return y


def stack(cv: Converter, values: list, axis: int):
    """``values`` (one shape) stacked along a new ``axis``: numpy for
    constants, else each reshaped with a 1 at ``axis`` and one concat."""
    if all(isinstance(v, Const) for v in values):
        return Const(np.stack([v.array for v in values], axis))
    shape = list(shape_of(values[0]))
    expanded = tuple(shape[:axis] + [1] + shape[axis:])
    dtype = next(v.dtype for v in values if isinstance(v, Operand))
    parts = [cv.op("reshape", cv.operand(v, dtype), expanded) for v in values]
    if cv.is_bool(values[0]):
        for part in parts:
            cv.mark_bool(part)
    result = parts[0] if len(parts) == 1 else cv.op("concat", parts, axis)
    return cv.mark_bool(result) if cv.is_bool(values[0]) else result


def _counter(body_input, value: int, dtype) -> Const:
    """A scalar for a body's iteration number or condition input; of shape (1,)
    where the body declares it 1-D (PyTorch's exports do, and ONNX Runtime
    then gives it that shape)."""
    tensor = body_input.type.tensor_type
    one_d = tensor.HasField("shape") and len(tensor.shape.dim) == 1
    return Const(np.array([value] if one_d else value, dtype))


def _flag(cv: Converter, value, what: str) -> bool:
    array = need_const(cv, value, what).array
    if array.size != 1:
        raise cv.invalid(f"{what} must hold one value, got shape {array.shape}")
    return bool(array.reshape(-1)[0])


# --- If, Loop, Scan --------------------------------------------------------------


def op_if(cv: Converter, inputs, attrs):
    chosen = _flag(cv, inputs[0], "the condition")
    branch = attrs["then_branch" if chosen else "else_branch"]
    return cv.convert_subgraph(branch, {})


def op_loop(cv: Converter, inputs, attrs):
    """Unrolled: ``M`` (the trip count) and the condition must be known at load
    time at each iteration (either may be left out, not both); the
    loop-carried values may be run-time tensors. A condition computed at run
    time raises :class:`LoadTimeValueError` (``run`` then folds the integer
    inputs, in case it comes from them)."""
    body = attrs["body"]
    trip, cond = (list(inputs) + [None, None])[:2]
    carried = list(inputs[2:])
    body_inputs = list(body.input)
    if len(body_inputs) != len(carried) + 2:
        raise cv.invalid(f"the body has {len(body_inputs)} inputs, the loop gives it "
                         f"{len(carried) + 2} (iteration number, condition, {len(carried)} "
                         "loop-carried values)")
    scan_count = len(body.output) - 1 - len(carried)
    if scan_count < 0:
        raise cv.invalid(f"the body has {len(body.output)} outputs, fewer than the condition "
                         f"and the {len(carried)} loop-carried values")
    limit = None
    if trip is not None:
        array = need_const(cv, trip, "the trip count M").array
        limit = int(array.reshape(-1)[0]) if array.size == 1 else None
        if limit is None:
            raise cv.invalid(f"the trip count M must hold one value, got shape {array.shape}")
    going = True if cond is None else _flag(cv, cond, "the initial condition")
    if limit is None and cond is None:
        raise cv.unsupported("a Loop with neither a trip count nor a condition never ends")
    if cond is None and limit > MAX_ITERATIONS:
        raise cv.unsupported(f"the loop runs {limit} iterations, more than the "
                             f"{MAX_ITERATIONS} iterations jitnn unrolls at load time")
    scans: list[list] = [[] for _ in range(scan_count)]
    iteration = 0
    while going and (limit is None or iteration < limit):
        if iteration == MAX_ITERATIONS:
            raise cv.unsupported(f"the loop runs more than the {MAX_ITERATIONS} iterations "
                                 "jitnn unrolls at load time")
        bound = {body_inputs[0].name: _counter(body_inputs[0], iteration, np.int64),
                 body_inputs[1].name: _counter(body_inputs[1], going, np.bool_)}
        bound.update((info.name, value) for info, value in zip(body_inputs[2:], carried))
        results = cv.convert_subgraph(body, bound)
        if cond is not None:          # without a condition input, the body's is ignored
            if not isinstance(results[0], Const):
                raise LoadTimeValueError(
                    f"onnx: {cv.where()}: the loop's condition is computed from run-time data "
                    "(jitnn unrolls loops at load time, so the condition must follow from "
                    "constants and the iteration number)")
            going = bool(results[0].array.reshape(-1)[0])
        carried = list(results[1:1 + len(carried)])
        for values, value in zip(scans, results[1 + len(carried):]):
            values.append(value)
        iteration += 1
    if scan_count and not iteration:
        raise cv.unsupported("a Loop that runs no iteration has scan outputs of no known shape")
    return carried + [stack(cv, values, 0) for values in scans]


def op_scan(cv: Converter, inputs, attrs):
    """Unrolled over the scan inputs' axes (opset 9+; ``scan_input_axes``,
    ``scan_input_directions``, ``scan_output_axes``, ``scan_output_directions``)."""
    if cv.opset < 9:
        raise cv.unsupported("Scan before opset 9 (its batched form with sequence_lens) is not "
                             "supported: jitnn runs Scan from opset 9")
    body = attrs["body"]
    count = int(attrs["num_scan_inputs"])
    if not 1 <= count <= len(inputs):
        raise cv.invalid(f"num_scan_inputs {count} must be between 1 and the {len(inputs)} "
                         "inputs")
    states = list(inputs[:len(inputs) - count])
    sequences = list(inputs[len(inputs) - count:])
    if any(isinstance(v, Sequence) or v is None for v in sequences):
        raise cv.invalid("the scan inputs must be tensors")
    in_axes = [int(a) % rank_of(x) for a, x in
               zip(attrs.get("scan_input_axes", [0] * count), sequences)]
    in_reverse = [bool(d) for d in attrs.get("scan_input_directions", [0] * count)]
    lengths = {shape_of(x)[axis] for x, axis in zip(sequences, in_axes)}
    if len(lengths) != 1:
        raise cv.invalid(f"the scan inputs have different lengths {sorted(lengths)} along "
                         "their scan axes")
    length = lengths.pop()
    if length > MAX_ITERATIONS:
        raise cv.unsupported(f"the scan runs {length} iterations, more than the "
                             f"{MAX_ITERATIONS} iterations jitnn unrolls at load time")
    body_inputs = list(body.input)
    if len(body_inputs) != len(states) + count:
        raise cv.invalid(f"the body has {len(body_inputs)} inputs, the scan gives it "
                         f"{len(states) + count}")
    scan_count = len(body.output) - len(states)
    scans: list[list] = [[] for _ in range(scan_count)]
    for step in range(length):
        bound = {info.name: value for info, value in zip(body_inputs, states)}
        for info, x, axis, reverse in zip(body_inputs[len(states):], sequences, in_axes,
                                          in_reverse):
            bound[info.name] = take(cv, x, axis, length - 1 - step if reverse else step, 1, True)
        results = cv.convert_subgraph(body, bound)
        states = list(results[:len(states)])
        for values, value in zip(scans, results[len(states):]):
            values.append(value)
    if scan_count and not length:
        raise cv.unsupported("a Scan of no iteration has scan outputs of no known shape")
    out_axes = list(attrs.get("scan_output_axes", [0] * scan_count))
    out_reverse = [bool(d) for d in attrs.get("scan_output_directions", [0] * scan_count)]
    outputs = []
    for values, axis, reverse in zip(scans, out_axes, out_reverse):
        rank = rank_of(values[0]) + 1
        outputs.append(stack(cv, values[::-1] if reverse else values, int(axis) % rank))
    return states + outputs


#: ONNX op type -> handler(converter, inputs, attrs)
OPS: dict[str, Any] = {
    "If": op_if, "Loop": op_loop, "Scan": op_scan,
    "SequenceEmpty": op_sequence_empty, "SequenceConstruct": op_sequence_construct,
    "SequenceInsert": op_sequence_insert, "SequenceAt": op_sequence_at,
    "SequenceErase": op_sequence_erase, "SequenceLength": op_sequence_length,
    "ConcatFromSequence": op_concat_from_sequence, "SplitToSequence": op_split_to_sequence,
}

#: the ops that take or give sequences (every other op refuses a sequence input)
SEQUENCE_OPS = frozenset(OPS) | {"Identity"}
