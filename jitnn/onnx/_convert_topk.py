"""ONNX TopK on jitnn ops: the indices are a ``top_k_indices`` (a stable sort
of each row: by value, equal values by index, the order ONNX specifies; NaN
counts as the largest value, as in PyTorch's topk), the values a
``gather_elements`` of them. The axis is moved last first (a transpose unless
it is). ``k = 0`` is refused by name (empty outputs). The output is always
sorted (``sorted=0`` allows any order).
"""

from __future__ import annotations

import numpy as np

from ._common import Converter, ints, need_const, rank_of, shape_of


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
    index = cv.op("top_k_indices", moved, k, largest=largest)
    values = cv.op("gather_elements", moved, index, rank - 1)
    if axis != rank - 1:
        back = list(np.argsort(order))
        values, index = cv.op("transpose", values, back), cv.op("transpose", index, back)
    return [values, index][:max(outputs, 1)]


OPS = {"TopK": op_top_k}
MULTI_OUTPUT = set(OPS)
