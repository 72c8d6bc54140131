"""ONNX handlers of the element-wise math and logic ops, the reductions, the
normalizations and the indexing ops (gathers, scatters, Where, CumSum,
Trilu), each on jitnn ops (see jitnn/onnx/_convert.py for the conventions).

Types: a float op converts a constant operand to float32; an op on
integers (Abs, Neg, Sign, Mod, the comparisons, Where's values, the indices)
keeps the constant's type, or takes the run-time operand's. Comparisons and
logical ops give uint8 0/1 tensors, marked as ONNX bools.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..graph import Operand
from ._common import Const, Converter, ints, need_const, rank_of, shape_of
from ._convert import indices_of, run_time_dtype

UNSIGNED = (np.dtype(np.uint8), np.dtype(np.uint32))


# --- element-wise ------------------------------------------------------------------

def _float_unary(name: str, **fixed) -> Callable:
    """A jitnn op on a float32 tensor (``fixed``: options from attributes,
    ``{jitnn option: (ONNX attribute, default)}``)."""
    def handler(cv: Converter, inputs, attrs):
        options = {key: float(attrs.get(attr, default)) for key, (attr, default) in fixed.items()}
        return [cv.op(name, cv.float_operand(inputs[0]), **options)]
    return handler


def op_abs(cv: Converter, inputs, attrs):
    x = cv.operand(inputs[0])
    return [x if x.dtype in UNSIGNED else cv.op("abs", x)]


def op_neg(cv: Converter, inputs, attrs):
    return [cv.op("neg", cv.operand(inputs[0]))]


def op_sign(cv: Converter, inputs, attrs):
    x = cv.operand(inputs[0])
    if x.dtype in UNSIGNED:          # 0 or 1
        return [cv.op("cast", cv.op("not_equal", x, _zero(cv, x)), x.dtype)]
    return [cv.op("sign", x)]


def op_selu(cv: Converter, inputs, attrs):
    """``gamma * elu(x, alpha)`` (ONNX's defaults: alpha 1.67326..., gamma 1.0507...)."""
    y = cv.op("elu", cv.float_operand(inputs[0]),
              alpha=float(attrs.get("alpha", 1.67326319217681884765625)))
    return [cv.op("mul", y, float(attrs.get("gamma", 1.05070102214813232421875)))]


def op_gelu(cv: Converter, inputs, attrs):
    """Gelu (opset 20): the exact one, or ``approximate="tanh"``."""
    approximate = attrs.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise cv.invalid(f"approximate={approximate!r} (ONNX has 'none' and 'tanh')")
    return [cv.op("gelu", cv.float_operand(inputs[0]), approximate=approximate)]


def op_is_inf(cv: Converter, inputs, attrs):
    x = cv.float_operand(inputs[0])
    positive = bool(attrs.get("detect_positive", 1))
    negative = bool(attrs.get("detect_negative", 1))
    if not positive and not negative:
        return [Const(np.zeros(x.shape, bool))]
    y = cv.op("is_infinite", x)
    if not (positive and negative):
        side = cv.op("greater" if positive else "lesser", x, _zero(cv, x))
        y = cv.op("logical_and", y, side)
    return [cv.mark_bool(y)]


def _zero(cv: Converter, x: Operand) -> Operand:
    return cv.operand(Const(np.zeros((), x.dtype)))


def _same_type(cv: Converter, values, dtype=None) -> list:
    """``values`` as operands of one type: ``dtype``, or the run-time operands'."""
    dtype = dtype or run_time_dtype(cv, *values)
    return [cv.operand(v, dtype) for v in values]


def _bool_op(name: str) -> Callable:
    """A comparison or logical op: a uint8 0/1 result, an ONNX bool."""
    def handler(cv: Converter, inputs, attrs):
        return [cv.mark_bool(cv.op(name, *_same_type(cv, inputs)))]
    return handler


def _scalar_key(v) -> tuple | None:
    """A one-element constant as a hashable (dtype, value), else None."""
    if not isinstance(v, Const) or v.array.size != 1:
        return None
    return (v.array.dtype.str, v.array.shape, v.array.reshape(-1)[0].item())


def op_where(cv: Converter, inputs, attrs):
    condition, a, b = inputs
    # Where(run-time condition, constant, constant) made again from the same
    # condition (each BERT layer turns the one padding mask into its additive
    # mask: Where(mask, 0, -inf)) is the first one's result: one pass, not 12
    consts = (_scalar_key(a), _scalar_key(b))
    key = None if None in consts or isinstance(condition, Const) else \
        ("where", id(condition)) + consts
    if key is not None and key in cv.shared:
        return [cv.shared[key][1]]
    y = _where(cv, condition, a, b)
    if key is not None:
        cv.shared[key] = (condition, y)          # (kept alive: its id stays its own)
    return [y]


def _where(cv: Converter, condition, a, b) -> Operand:
    a_op, b_op = _same_type(cv, (a, b))
    y = cv.op("where", cv.operand(condition, np.uint8), a_op, b_op)
    if cv.is_bool(a) and cv.is_bool(b):
        cv.mark_bool(y)
    return y


def op_pow(cv: Converter, inputs, attrs):
    """``x ** y``: a float ``x`` to a float32 exponent (a size-1 constant is a
    number: exact for 0, +-1, +-2, 3, 4, +-0.5), an integer ``x`` to an integer
    one (in ``x``'s type)."""
    x, y = inputs
    xo = cv.operand(x)
    if xo.dtype == np.float32:
        exponent = cv.scalar_or_operand(y, rank_of(x))
        if isinstance(exponent, Operand) and exponent.dtype != np.float32:
            exponent = cv.op("cast", exponent, np.float32)
        return [cv.op("pow", xo, exponent)]
    if np.dtype(cv.onnx_type(y)).kind == "f":
        # computed in float32 and truncated back (ONNX's reference: numpy's
        # float power cast to the base's type); exact while |x ** y| < 2 ** 24
        power = cv.op("pow", cv.op("cast", xo, np.float32), cv.scalar_or_operand(y, rank_of(x)))
        return [cv.op("cast", power, xo.dtype)]
    exponent = cv.operand(y)
    if exponent.dtype != xo.dtype:
        exponent = cv.op("cast", exponent, xo.dtype)
    return [cv.op("pow", xo, exponent)]


def op_mod(cv: Converter, inputs, attrs):
    """``fmod=1``: C's fmod, ``x - trunc(x / y) * y`` (the sign of x); ``fmod=0``:
    Python's ``%``, the sign of y. Integer ``div`` truncates; a float quotient
    is truncated as ``sign(q) * floor(|q|)`` (exact while |x / y| < 2 ** 24)."""
    a, b = _same_type(cv, inputs)
    fmod = bool(attrs.get("fmod", 0))
    if a.dtype == np.float32:
        quotient = cv.op("div", a, b)
        whole = cv.op("mul", cv.op("sign", quotient), cv.op("floor", cv.op("abs", quotient)))
        # 0 * inf is NaN: a zero quotient (|x| < |y|, y infinite) takes nothing off
        zero = _zero(cv, a)
        taken = cv.op("where", cv.op("equal", whole, zero), zero, cv.op("mul", whole, b))
        remainder = cv.op("sub", a, taken)
    else:
        remainder = cv.op("sub", a, cv.op("mul", cv.op("div", a, b), b))
    if fmod or a.dtype in UNSIGNED:
        return [remainder]
    # a nonzero remainder whose sign differs from the divisor's moves by one divisor
    zero = _zero(cv, a)
    differs = cv.op("not_equal", cv.op("lesser", remainder, zero), cv.op("lesser", b, zero))
    fix = cv.op("logical_and", cv.op("not_equal", remainder, zero), differs)
    return [cv.op("add", remainder, cv.op("where", fix, b, zero))]


# --- reductions --------------------------------------------------------------------

#: ONNX reduction -> (jitnn op, the opset from which the axes are an input)
REDUCTIONS = {
    "ReduceMean": ("reduce_mean", 18), "ReduceSum": ("reduce_sum", 13),
    "ReduceMax": ("reduce_max", 18), "ReduceMin": ("reduce_min", 18),
    "ReduceProd": ("reduce_product", 18), "ReduceL1": ("reduce_l1", 18),
    "ReduceL2": ("reduce_l2", 18), "ReduceLogSum": ("reduce_log_sum", 18),
    "ReduceLogSumExp": ("reduce_log_sum_exp", 18), "ReduceSumSquare": ("reduce_sum_square", 18),
}


def reduce_axes(cv: Converter, inputs, attrs, axes_input_from: int) -> list[int] | None:
    """The axes to reduce (None: all), with ``noop_with_empty_axes``: no axis."""
    if cv.opset >= axes_input_from:
        given = inputs[1] if len(inputs) > 1 else None
        axes = None if given is None else ints(need_const(cv, given, "the axes"))
    else:
        axes = list(attrs["axes"]) if "axes" in attrs else None
    if not axes:
        return [] if attrs.get("noop_with_empty_axes", 0) else None
    return axes


def _reduction(name: str, axes_input_from: int) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        axes = reduce_axes(cv, inputs, attrs, axes_input_from)
        keep = bool(attrs.get("keepdims", 1))
        x = cv.operand(inputs[0])
        empty = _empty_integer_extreme(cv, name, inputs[0], x, axes, keep)
        if empty is not None:
            return [empty]
        return [cv.op(name, x, axes=axes, keep_dimensions=keep)]
    return handler


def _empty_integer_extreme(cv: Converter, name: str, value, x: Operand, axes, keep: bool):
    """An integer (or bool) maximum / minimum over no element: ONNX's identity
    of the op (the type's lowest / highest value; False / True), a constant."""
    if name not in ("reduce_max", "reduce_min") or x.dtype == np.float32:
        return None
    rank = len(x.shape)
    picked = range(rank) if axes is None else {a % rank for a in axes}
    if not picked or any(x.shape[a] for a in picked):
        return None
    shape = tuple(1 if a in picked else d for a, d in enumerate(x.shape) if keep or a not in picked)
    dtype = cv.onnx_type(value)
    if dtype == np.bool_:
        return Const(np.full(shape, name == "reduce_min"))
    info = np.iinfo(dtype)
    return Const(np.full(shape, info.min if name == "reduce_max" else info.max, dtype))


def _arg_reduction(name: str) -> Callable:
    """ArgMax / ArgMin; with ``select_last_index``, the first index of the
    reversed axis counted from the end."""
    def handler(cv: Converter, inputs, attrs):
        x = cv.operand(inputs[0])
        axis = int(attrs.get("axis", 0)) % max(len(x.shape), 1)
        last = bool(attrs.get("select_last_index", 0))
        if last:
            x = cv.op("reverse", x, [axis])
        y = cv.op(name, x, axis, keep_dimensions=bool(attrs.get("keepdims", 1)),
                  output_data_type="int64")
        if last:
            y = cv.op("sub", cv.operand(Const(np.array(x.shape[axis] - 1, np.int64))), y)
        return [y]
    return handler


def op_log_softmax(cv: Converter, inputs, attrs):
    """``x - log(sum(exp(x)))`` over ``axis`` (jitnn's stable reduce_log_sum_exp);
    before opset 13 the input is coerced to 2-D at ``axis`` (default 1)."""
    x = cv.float_operand(inputs[0])
    shape = x.shape
    rank = len(shape)
    if cv.opset >= 13:
        axes = [int(attrs.get("axis", -1)) % max(rank, 1)]
    else:
        axis = int(attrs.get("axis", 1)) % max(rank, 1)
        flat = (int(np.prod(shape[:axis], dtype=np.int64)),
                int(np.prod(shape[axis:], dtype=np.int64)))
        if flat != shape:
            x = cv.op("reshape", x, flat)
        axes = [1]
    y = cv.op("sub", x, cv.op("reduce_log_sum_exp", x, axes=axes, keep_dimensions=True))
    return [y if y.shape == shape else cv.op("reshape", y, shape)]


# --- normalizations ----------------------------------------------------------------

def _normalized_parameter(cv: Converter, value, dims: tuple[int, ...]):
    """LayerNormalization's Scale or B as an operand of the normalized axes'
    sizes ``dims`` (ONNX broadcasts them to those; jitnn takes them whole)."""
    if value is None:
        return None
    if shape_of(value) == dims:
        return cv.float_operand(value)
    if isinstance(value, Const):
        try:
            array = np.broadcast_to(value.array, dims)
        except ValueError:
            raise cv.invalid(f"{value.name or 'a parameter'} of shape {shape_of(value)} does "
                             f"not broadcast to the normalized axes {dims}") from None
        return cv.float_operand(Const(np.ascontiguousarray(array), value.name))
    return cv.op("expand", cv.float_operand(value), list(dims))


def op_layer_normalization(cv: Converter, inputs, attrs, outputs=1):
    """jitnn's layer_normalization over the axes from ``axis`` on; the optional
    Mean and InvStdDev outputs as reductions (mean, 1 / sqrt(variance + eps))."""
    x = cv.float_operand(inputs[0])
    rank = len(x.shape)
    axis = int(attrs.get("axis", -1)) % max(rank, 1)
    axes = list(range(axis, rank))
    dims = tuple(x.shape[axis:])
    epsilon = float(attrs.get("epsilon", 1e-5))
    scale = _normalized_parameter(cv, inputs[1], dims)
    bias = _normalized_parameter(cv, inputs[2] if len(inputs) > 2 else None, dims)
    results = [cv.op("layer_normalization", x, scale, bias, axes=axes, epsilon=epsilon)]
    if outputs > 1:
        mean = cv.op("reduce_mean", x, axes=axes, keep_dimensions=True)
        centered = cv.op("sub", x, mean)
        variance = cv.op("reduce_mean", cv.op("mul", centered, centered), axes=axes,
                         keep_dimensions=True)
        results += [mean, cv.op("reciprocal", cv.op("sqrt", cv.op("add", variance, epsilon)))]
    return results


def op_rms_normalization(cv: Converter, inputs, attrs):
    """RMSNormalization (opset 23): jitnn's rms_normalization over the axes
    from ``axis`` on (the statistic is float64 whatever ``stash_type`` says)."""
    x = cv.float_operand(inputs[0])
    rank = len(x.shape)
    axis = int(attrs.get("axis", -1)) % max(rank, 1)
    dims = tuple(x.shape[axis:])
    return [cv.op("rms_normalization", x, _normalized_parameter(cv, inputs[1], dims),
                  axes=list(range(axis, rank)), epsilon=float(attrs.get("epsilon", 1e-5)))]


def op_instance_normalization(cv: Converter, inputs, attrs):
    """jitnn's instance normalization is 4-D: (N, C, L) runs as (N, C, 1, L),
    (N, C, D1, ..., Dk) as (N, C, D1 * ... * Dk-1, Dk)."""
    x = cv.float_operand(inputs[0])
    shape = x.shape
    if len(shape) < 3:
        raise cv.invalid(f"input of shape {shape}: InstanceNormalization needs (N, C, ...)")
    four = shape if len(shape) == 4 else \
        (shape[0], shape[1], int(np.prod(shape[2:-1], dtype=np.int64)), shape[-1])
    y = cv.op("reshape", x, four) if four != shape else x
    y = cv.op("instance_normalization", y, cv.float_operand(inputs[1]),
              cv.float_operand(inputs[2]), epsilon=float(attrs.get("epsilon", 1e-5)))
    return [cv.op("reshape", y, shape) if four != shape else y]


# --- indexing ----------------------------------------------------------------------

def op_cum_sum(cv: Converter, inputs, attrs):
    axis = int(need_const(cv, inputs[1], "the axis").array.reshape(-1)[0])
    return [cv.op("cumulative_sum", cv.operand(inputs[0]), axis,
                  exclusive=bool(attrs.get("exclusive", 0)),
                  reversed=bool(attrs.get("reverse", 0)))]


def op_trilu(cv: Converter, inputs, attrs):
    k = inputs[1] if len(inputs) > 1 else None
    diagonal = 0 if k is None else int(need_const(cv, k, "k").array.reshape(-1)[0])
    return [cv.op("triangular", cv.operand(inputs[0]), upper=bool(attrs.get("upper", 1)),
                  diagonal=diagonal)]


def op_gather_elements(cv: Converter, inputs, attrs):
    x, indices = inputs
    return [cv.op("gather_elements", cv.operand(x), indices_of(cv, indices),
                  int(attrs.get("axis", 0)))]


def op_gather_nd(cv: Converter, inputs, attrs):
    """GatherND; with ``batch_dims`` b, the batch axes are flattened into one
    and each index row gets its batch number as a first coordinate."""
    x, indices = inputs
    batch = int(attrs.get("batch_dims", 0))
    xo = cv.operand(x)
    if batch == 0:
        return [cv.op("gather_nd", xo, indices_of(cv, indices))]
    lead = shape_of(x)[:batch]
    count = int(np.prod(lead, dtype=np.int64))
    ishape = shape_of(indices)
    k = ishape[-1]
    rows = int(np.prod(ishape[batch:-1], dtype=np.int64))
    grid = np.broadcast_to(np.arange(count).reshape(count, 1, 1), (count, rows, 1))
    if isinstance(indices, Const):
        flat = indices.array.astype(np.int64).reshape(count, rows, k)
        index = np.concatenate([grid, flat], axis=-1)
    else:
        io = cv.operand(indices)
        flat = cv.op("reshape", io, (count, rows, k))
        index = cv.op("concat", [cv.operand(Const(grid.astype(io.dtype))), flat], 2)
    data = cv.op("reshape", xo, (count,) + shape_of(x)[batch:])
    y = cv.op("gather_nd", data, index)
    return [cv.op("reshape", y, lead + ishape[batch:-1] + shape_of(x)[batch + k:])]


def one_hot_depth(cv: Converter, depth) -> int:
    """OneHot's depth, a positive number known at load time (a float is truncated)."""
    value = need_const(cv, depth, "the depth").array.reshape(-1)
    if value.size != 1 or not value[0] >= 1:
        raise cv.invalid(f"depth {value.tolist()} must be one number, at least 1")
    return int(value[0])


def fold_one_hot(cv: Converter, arrays, attrs, outputs):
    """OneHot of constants: ``values[1]`` where an index (negative ones count
    from ``depth``) names the position along the new ``axis``, else ``values[0]``."""
    indices, depth, values = arrays
    depth = one_hot_depth(cv, Const(depth))
    rank = indices.ndim + 1
    axis = int(attrs.get("axis", -1)) % rank
    index = indices.astype(np.int64)
    index = np.where(index < 0, index + depth, index)
    positions = np.arange(depth).reshape((depth,) + (1,) * (rank - 1 - axis))
    hit = np.expand_dims(index, axis) == positions
    return [np.where(hit, values.reshape(-1)[1], values.reshape(-1)[0])]


def op_one_hot(cv: Converter, inputs, attrs):
    """OneHot of run-time indices: a comparison with the positions along the new
    axis (a load-time constant), then ``where`` of the off and on values."""
    indices, depth, values = inputs
    depth = one_hot_depth(cv, depth)
    index = cv.operand(indices)
    if index.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        index = cv.op("cast", index, np.int64)
    rank = len(index.shape) + 1
    axis = int(attrs.get("axis", -1)) % rank
    zero = cv.operand(Const(np.zeros((), index.dtype)))
    wrapped = cv.op("add", index, cv.op("where", cv.op("lesser", index, zero),
                                        cv.operand(Const(np.array(depth, index.dtype))), zero))
    shape = list(index.shape)
    shape.insert(axis, 1)
    positions = np.arange(depth, dtype=index.dtype).reshape(
        (depth,) + (1,) * (rank - 1 - axis))
    hit = cv.op("equal", cv.op("reshape", wrapped, tuple(shape)), cv.operand(Const(positions)))
    pair = need_const(cv, values, "the off and on values").array.reshape(-1)
    dtype = run_time_dtype(cv, values)
    off, on = (cv.operand(Const(np.asarray(v)), dtype) for v in pair[:2])
    y = cv.op("where", hit, on, off)
    if pair.dtype == np.bool_:
        cv.mark_bool(y)
    return [y]


def _index_box(indices, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """``[(start, size)]`` per leading axis when ScatterND's constant ``indices``
    are every position of a box in order (``x[:, :, 1:, 1:] = u`` as PyTorch
    exports it: an index grid of one row per element, hundreds of MB for an
    attention map); else None."""
    if not isinstance(indices, Const) or indices.array.dtype.kind not in "iu":
        return None
    grid = indices.array
    depth = grid.shape[-1] if grid.ndim else 0
    if grid.ndim != depth + 1 or depth == 0 or depth > len(shape):
        return None
    box = []
    for axis in range(depth):
        size = grid.shape[axis]
        first = grid[(0,) * depth + (axis,)] if size else 0
        start = int(first) % shape[axis] if shape[axis] else 0
        if size == 0 or start + size > shape[axis]:
            return None
        line = (start + np.arange(size)).reshape((size,) + (1,) * (depth - 1 - axis))
        # negative indices count from the end
        if not np.array_equal(grid[..., axis] % shape[axis],
                              np.broadcast_to(line, grid.shape[:-1])):
            return None
        box.append((start, size))
    return box


def _replace_box(cv: Converter, x, updates, box: list[tuple[int, int]], axis: int = 0):
    """``x`` with its region ``box`` (``[(start, size)]`` of its leading axes)
    replaced by ``updates`` (of the box's shape): along each axis the rows
    before and after the box concatenated around the inner result (slices and
    concats, no index grid)."""
    if axis == len(box):
        return updates
    start, size = box[axis]
    length = x.shape[axis]

    def part(begin: int, count: int):
        starts, sizes = [0] * len(x.shape), list(x.shape)
        starts[axis], sizes[axis] = begin, count
        return cv.op("slice", x, starts, sizes)

    inner = _replace_box(cv, x if size == length else part(start, size), updates, box, axis + 1)
    parts = ([part(0, start)] if start else []) + [inner] + \
        ([part(start + size, length - start - size)] if start + size < length else [])
    return parts[0] if len(parts) == 1 else cv.op("concat", parts, axis)


def _scatter(name: str) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        reduction = attrs.get("reduction", "none")
        if reduction != "none":
            raise cv.unsupported(f"reduction={reduction!r} (jitnn's scatters replace)")
        x, indices, updates = inputs
        if name == "scatter_nd":
            box = _index_box(indices, shape_of(x))
            if box is not None and shape_of(updates) == \
                    tuple(size for _, size in box) + shape_of(x)[len(box):]:
                return [_replace_box(cv, cv.operand(x), cv.operand(updates, cv.operand(x).dtype),
                                     box)]
        xo = cv.operand(x)
        options = [int(attrs.get("axis", 0))] if name == "scatter_elements" else []
        return [cv.op(name, xo, indices_of(cv, indices), cv.operand(updates, xo.dtype),
                      *options)]
    return handler


#: ONNX op type -> handler, for the ops of this module
OPS: dict[str, Callable] = {
    "Erf": _float_unary("erf"), "Sqrt": _float_unary("sqrt"), "Exp": _float_unary("exp"),
    "Log": _float_unary("log"), "Sin": _float_unary("sin"), "Cos": _float_unary("cos"),
    "Tan": _float_unary("tan"), "Ceil": _float_unary("ceil"), "Floor": _float_unary("floor"),
    "Reciprocal": _float_unary("reciprocal"), "Round": _float_unary("round_even"),
    "Softplus": _float_unary("softplus"), "Softsign": _float_unary("softsign"),
    "Elu": _float_unary("elu", alpha=("alpha", 1.0)), "Selu": op_selu, "Gelu": op_gelu,
    "Abs": op_abs, "Neg": op_neg, "Sign": op_sign, "Pow": op_pow, "Mod": op_mod,
    "IsNaN": lambda cv, inputs, attrs: [cv.mark_bool(cv.op("is_nan",
                                                          cv.float_operand(inputs[0])))],
    "IsInf": op_is_inf,
    "Not": _bool_op("logical_not"), "And": _bool_op("logical_and"),
    "Or": _bool_op("logical_or"), "Xor": _bool_op("logical_xor"),
    "Equal": _bool_op("equal"), "Greater": _bool_op("greater"),
    "GreaterOrEqual": _bool_op("greater_or_equal"), "Less": _bool_op("lesser"),
    "LessOrEqual": _bool_op("lesser_or_equal"), "Where": op_where,
    **{onnx_name: _reduction(name, since) for onnx_name, (name, since) in REDUCTIONS.items()},
    "ArgMax": _arg_reduction("arg_max"), "ArgMin": _arg_reduction("arg_min"),
    "LogSoftmax": op_log_softmax, "LayerNormalization": op_layer_normalization,
    "InstanceNormalization": op_instance_normalization,
    "RMSNormalization": op_rms_normalization,
    "CumSum": op_cum_sum, "Trilu": op_trilu, "GatherElements": op_gather_elements,
    "GatherND": op_gather_nd, "ScatterElements": _scatter("scatter_elements"),
    "ScatterND": _scatter("scatter_nd"), "OneHot": op_one_hot,
}

#: handlers that take the number of outputs the node asks for
MULTI_OUTPUT = {"LayerNormalization"}
