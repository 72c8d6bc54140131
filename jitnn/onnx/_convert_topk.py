"""ONNX TopK on jitnn comparisons, reductions and gathers (no sort kernel).

``k = 1`` is an ``arg_max`` / ``arg_min`` (the first index of the extreme
value, as ONNX's ties ask) and a ``gather_elements`` of its value. Otherwise
each element's place in the sorted order is counted: element ``i`` of the
axis comes after every ``j`` whose value beats it (greater, or smaller with
``largest=0``) or ties with it at a lower index, so its place is the number
of such ``j``, a sum over an ``n x n`` comparison (the order ONNX specifies:
by value, equal values by index). The index at place ``p < k`` is then the
sum of ``i`` over the elements whose place is ``p`` (exactly one), and the
values a ``gather_elements`` of those indices. The comparisons run a chunk of
the elements ``i`` at a time (:data:`CHUNK_PAIRS` pairs at most, so that memory
stays bounded); an axis longer than :data:`MAX_AXIS` (``n²`` comparisons) is
refused by name, as is ``k = 0`` (empty outputs). A NaN compares as neither
larger nor smaller than anything (its place is not ONNX's). The output is
always sorted (``sorted=0`` allows any order).
"""

from __future__ import annotations

import numpy as np

from ._common import Const, Converter, ints, need_const, rank_of, shape_of

#: the longest axis TopK ranks by comparing every pair (RT-DETR's 8400 anchors at 640 px)
MAX_AXIS = 16384
#: the most pairs one comparison step holds (its bytes; the float copy of them is 4x)
CHUNK_PAIRS = 1 << 24


def _places(cv: Converter, moved, largest: bool):
    """Each element's place along the last axis of ``moved`` in ONNX's order:
    how many elements beat it or tie with it at a lower index. Compared for
    a chunk of the elements at a time (at most :data:`CHUNK_PAIRS` pairs), the
    chunks' places joined."""
    shape = shape_of(moved)
    lead, n, rank = shape[:-1], shape[-1], len(shape)
    rows = int(np.prod(lead, dtype=np.int64))
    chunk = max(1, min(n, CHUNK_PAIRS // max(rows * n, 1)))
    row = cv.op("reshape", moved, lead + (1, n))                        # element j
    j_index = cv.operand(Const(np.arange(n, dtype=np.float32).reshape(1, n)))
    places = []
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        column = cv.op("reshape", cv.op("slice", moved, (0,) * len(lead) + (start,),
                                        lead + (size,)), lead + (size, 1))   # elements i
        i_index = cv.operand(Const(np.arange(start, start + size, dtype=np.float32)
                                   .reshape(size, 1)))
        beats = cv.op("greater" if largest else "lesser", row, column)
        ties = cv.op("logical_and", cv.op("equal", row, column),
                     cv.op("lesser", j_index, i_index))                 # equal, j < i
        ahead = cv.op("cast", cv.op("logical_or", beats, ties), np.float32)
        places.append(cv.op("reduce_sum", ahead, axes=[rank], keep_dimensions=False))
    return places[0] if len(places) == 1 else cv.op("concat", places, rank - 1)


def op_top_k(cv: Converter, inputs, attrs, outputs: int = 2):
    x = inputs[0]
    if cv.opset < 10:
        k = int(attrs["k"])
    else:
        k = ints(need_const(cv, inputs[1], "k"))
        if len(k) != 1:
            raise cv.invalid(f"k has {len(k)} values: TopK needs one")
        k = k[0]
    rank = rank_of(x)
    if rank == 0:
        raise cv.invalid("a scalar input: TopK needs a tensor of rank 1 or more")
    axis = int(attrs.get("axis", -1)) % rank
    largest = bool(attrs.get("largest", 1))
    n = shape_of(x)[axis]
    if not 0 <= k <= n:
        raise cv.invalid(f"k = {k} for an axis of {n}: TopK needs 0 <= k <= {n}")
    if k == 0:
        raise cv.unsupported("k = 0: jitnn does not make empty tensors")
    xo = cv.operand(x) if cv.onnx_type(x).kind != "f" else cv.float_operand(x)
    # the axis last (a transpose unless it is)
    order = [a for a in range(rank) if a != axis] + [axis]
    moved = xo if axis == rank - 1 else cv.op("transpose", xo, order)
    lead = shape_of(moved)[:-1]
    if k == 1:
        index = cv.op("arg_max" if largest else "arg_min", moved, rank - 1,
                      keep_dimensions=True, output_data_type="int64")
    else:
        if n > MAX_AXIS:
            raise cv.unsupported(f"k = {k} of an axis of {n} values: jitnn ranks by comparing "
                                 f"every pair of an axis of at most {MAX_AXIS} values")
        place = _places(cv, moved, largest)
        places = cv.operand(Const(np.arange(k, dtype=np.float32).reshape(k, 1)))
        at = cv.op("cast", cv.op("equal", cv.op("reshape", place, lead + (1, n)), places),
                   np.float32)                                # (..., k, n): one 1 a row
        positions = cv.operand(Const(np.arange(n, dtype=np.float32)))
        index = cv.op("cast", cv.op("reduce_sum", cv.op("mul", at, positions), axes=[rank],
                                    keep_dimensions=False), np.int64)
    values = cv.op("gather_elements", moved, index, rank - 1)
    if axis != rank - 1:
        back = list(np.argsort(order))
        values, index = cv.op("transpose", values, back), cv.op("transpose", index, back)
    return [values, index][:max(outputs, 1)]


OPS = {"TopK": op_top_k}
MULTI_OUTPUT = set(OPS)
