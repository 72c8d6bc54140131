"""Elementwise ops: binary (add, sub, mul, div, maximum, minimum) with numpy
broadcasting, and unary activations (relu, clamp, sigmoid, tanh, leaky_relu,
hard_swish, gelu) with WebNN's semantics and defaults; the machinery the
other element-wise families share (jitnn/ops/math.py: pow, prelu and the
unary math; jitnn/ops/logical.py).

Data types: float32 runs the kernels below. The binary ops take every jitnn
type, both operands of one type (WebNN); relu takes float32, int8, int32 and
int64, clamp every type. Integer tensors run as numpy code on plain buffers
(jitnn/ops/_typed.py: wrapping around on overflow as numpy and C do; integer
``div`` truncates toward zero, as WebNN says, and ``x / 0`` is 0). Host data
given with a tensor takes the tensor's type (integers must fit it); with no
tensor, host arrays keep their own integer type when they agree, and
anything else is float32.

Each returns a pending Tensor in its main input's layout: a blocked
``nChw{b}c`` input gives a blocked result (same block, padding lanes zero), a
plain input a plain one. Lowering of a binary op, on the operand that already
has the output's shape (the *main* one; the blocked one if both have it):

* the other operand is a scalar (a number, or any size-1 tensor), a per-channel
  vector (``(1, C, 1, 1)``, ``(C, 1, 1)``, ...: only the channel axis is not 1),
  a per-(n, c) block (``(N, C, 1, 1)``, e.g. a global pool's output), or a
  same-shape tensor: one kernel pass, operand passed as it is (a plain
  same-shape operand of a blocked main one is reordered once, counted);
* on a plain main operand, any operand that varies over one contiguous run of
  axes is a per-channel vector of a ``(outer, run, inner)`` view (``(N, C) +
  (C,)``, ``(N, C, H, W) * (N, C, 1, 1)``...) when the run's inner extent is
  long enough to amortize the kernel's per-plane set-up;
* anything else is materialized: broadcast to the output shape with numpy
  (and reordered like the main operand when that one is blocked).
If neither operand has the output's shape (``(N, 1, H, W) + (1, C, 1, 1)``), the
first is broadcast to it in plain layout and the result is plain.
"""

from __future__ import annotations

import functools
import math

from typing import TYPE_CHECKING, Callable, Union

import numpy as np

from .. import layouts
from ..errors import JitnnValueError
from ..kernels import eltwise as eltwise_kernels
from ..kernels.buffers import aligned_empty
from ..kernels import epilogue, vmath
from ..limits import is_int, real_arg
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import FLOAT32, Node, Tensor, Value, exact, to_blocked
from ._common import (ANY_DTYPE, Binding, as_tensor, blocked_buffer, channel_axis,
                      context_of, is_blocked, is_number, pending, plain_buffer, plain_layout,
                      value_of)
from ._typed import (INTEGER_BINARY, NUMPY_BINARY, SIGNED_DTYPES, integer_bounds, integer_op,
                     one_dtype)

if TYPE_CHECKING:
    from ..context import Context

Operand = Union[Tensor, float]

#: WebNN/jitnn binary op names (the kernel's op names; pow and prelu: jitnn/ops/math.py)
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum")

#: below this many elements per plane, a plain per-channel operand is
#: materialized instead: the kernel expands lane operands once per plane (a
#: span-long pattern), which costs more than a broadcast copy for short planes
#: (measured: even at 512 floats, lanes ahead from 1024)
_LANES_MIN_PLANE = eltwise_kernels.SPAN

# --- the spec --------------------------------------------------------------------

def binary_reference(op: str, a, b) -> np.ndarray:
    """``a op b`` with numpy broadcasting, in float64 (IEEE: x / 0 = inf, 0 / 0 = NaN;
    ``pow`` numpy's power, C's ``pow``; ``prelu`` x if x >= 0 else slope x,
    ``a`` the input). Two integer arrays of one type: in that type (wrapping; ``div``
    truncates toward zero, ``x / 0`` is 0; a negative power of an integer
    truncates ``1 / a**-b``)."""
    a, b = np.asarray(a), np.asarray(b)
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu" and a.dtype == b.dtype:
            return np.asarray(INTEGER_BINARY[op](a, b), a.dtype)
        return NUMPY_BINARY[op](a.astype(np.float64), b.astype(np.float64))


def unary_reference(op: str, x, *, min_value: float = -np.inf, max_value: float = np.inf,
                    alpha: float = 0.01, approximate: str = "none") -> np.ndarray:
    """WebNN's activations in float64: ``relu`` max(x, 0); ``clamp``
    min(max(x, min_value), max_value); ``sigmoid`` 1 / (1 + e^-x); ``tanh``;
    ``leaky_relu`` x if x >= 0 else alpha x; ``hard_swish`` x max(0, min(6, x + 3)) / 6;
    ``gelu`` 0.5 x (1 + erf(x / sqrt 2)), with ``approximate="tanh"`` 0.5 x (1 +
    tanh(sqrt(2 / pi) (x + 0.044715 x^3))). An integer array (relu, clamp): in
    its own type, clamp's bounds rounded inward to integers of that type."""
    x = np.asarray(x)
    if op == "gelu" and approximate == "tanh":
        # as x / (1 + e^-2u), the same value: 1 + tanh(u) cancels in float64 too for u < -18
        x = x.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
            return x / (1.0 + np.exp(-2.0 * u))
    if x.dtype.kind in "iu":
        if op == "relu":
            return np.maximum(x, np.zeros((), x.dtype))
        lo, hi = integer_bounds(op, x.dtype, min_value, max_value)
        return np.minimum(np.maximum(x, lo), hi)
    code = epilogue.ACTIVATIONS[op]
    p0, p1 = {"clamp": (min_value, max_value), "leaky_relu": (alpha, 0.0)}.get(op, (0.0, 0.0))
    with np.errstate(over="ignore"):
        return epilogue.activation_reference(np.asarray(x, np.float64), code, p0, p1)


# --- the blocked elementwise node (what the scheduler fuses) ----------------------

def eltwise_node(op: str, inputs: tuple[Value, ...], steps: list, channels: int) -> Node:
    """A pending elementwise pass over blocked ``inputs[0]``. ``steps`` (the
    scheduler may concatenate the steps of a chain):

    * ``("activation", code, param0, param1)``;
    * ``("math", code, param0, param1)``: a function of kernels/vmath.py
      (jitnn/ops/math.py's unary ops, pow by a scalar); ``param0`` may be
      an operand description of a size-1 Value (``("scalar", y)``: pow's
      exponent, read when the step runs; ``y`` is then the node's second input);
    * ``("binary", op, other_value_or_None, reverse, operand)``: ``operand``
      describes the kernel operand (scalar, lanes or a same-shape blocked
      buffer; see :func:`resolve_operand`);
    * ``("affine", bn)``: a batch normalization, ``bn`` its ``(mean, variance,
      scale, bias, epsilon)`` (Values or None, then a float), folded into
      per-channel ``(a, b)`` when it runs, or into a preceding conv's filter.

    Steps hold descriptions and Values, never closures: a plan reused for a
    later flush (jitnn/plan_cache.py) gets them with that flush's Values put in.
    """
    size = inputs[0].size
    return Node(op, inputs, kind="eltwise", attrs={"steps": steps, "channels": channels},
                run=run_eltwise, flops=size * len(steps))


def run_eltwise(ctx: Context, node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    """Run the steps of a blocked elementwise node in one pass (``out`` may
    be the main input's or a same-shape operand's buffer: in place)."""
    x = node.inputs[0]._materialize()
    kernel_steps = _kernel_steps(ctx, node.attrs["steps"])
    if out is None:
        out = aligned_empty(x.shape)
    ctx.launcher.launch(eltwise_kernels.eltwise_chain, x, kernel_steps, out, node.attrs["channels"])
    return out


class _CopiedOperand(Exception):
    """A same-shape operand the run copied for itself (another layout)."""


def _bound_steps(ctx: Context, node: Node) -> tuple[list, list, list] | None:
    """The kernel steps :func:`run_eltwise` or :func:`run_plain_chain` just
    ran, for a binding: ``(steps, reads, derived)`` (see :class:`Binding`),
    or None when the run made an operand for itself (a copy of a same-shape
    operand in another layout).

    A same-shape operand is read in place: it must be its Value's own array.
    What the run computes from other operands (a batch norm's folded ``a``
    and ``b``, per-channel and scalar values) is copied into the kernel's
    arguments: it is kept as a derived form of the Values it comes from, so
    that a binding on a Value remade at every run (not a constant) is refused
    by the executor, and one whose Value changed is not used."""
    x = node.inputs[0]
    if not isinstance(x._data, np.ndarray):
        return None
    reads: list = [(x, x._data)]
    derived: list = []

    def form_of(values: tuple, key: tuple, make) -> object:
        # kept on each Value it is computed from (the same object)
        form = values[0]._derive(key, make)
        for v in values:
            derived.append((v, key, v._derive(key, lambda: form)))
        return form

    def resolve(operand: tuple) -> object:
        if operand[0] == "number":
            return operand[1]
        y = operand[1]
        if operand[0] in ("plain", "blocked"):          # same shape: read in place
            resolved = resolve_operand(ctx, operand)
            if not isinstance(y._data, np.ndarray) \
                    or not np.may_share_memory(resolved, y._data):
                raise _CopiedOperand
            reads.append((y, y._data))
            return resolved
        # scalar, rows, lanes, broadcast: values the kernel's arguments hold
        # a copy of, computed from y
        return form_of((y,), ("eltwise_operand",) + operand_sig(operand),
                       lambda: resolve_operand(ctx, operand))

    def fold(bn: tuple) -> tuple[np.ndarray, np.ndarray]:
        values = tuple(v for v in bn[:4] if v is not None)
        key = ("eltwise_bn", tuple(v is not None for v in bn[:4]), exact(bn[4]),
               tuple(id(v) for v in values))
        return form_of(values, key, lambda: batch_norm_scale_shift(bn))

    try:
        steps = _kernel_steps(ctx, node.attrs["steps"], resolve, fold)
    except _CopiedOperand:
        return None
    return steps, reads, derived


def bind_eltwise(ctx: Context, node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_eltwise` just made, bound to its arrays (a
    replayed program runs it as one call: jitnn/executor.py), or None."""
    bound = _bound_steps(ctx, node)
    if bound is None:
        return None
    steps, reads, derived = bound
    call = eltwise_kernels.bind_eltwise_chain(node.inputs[0]._data, steps, result,
                                             node.attrs["channels"], ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], tuple(reads), tuple(derived), result, ctx.num_threads)


def bind_plain_chain(ctx: Context, node: Node, result: np.ndarray) -> Binding | None:
    """:func:`bind_eltwise` of a plain elementwise node (:func:`run_plain_chain`)."""
    bound = _bound_steps(ctx, node)
    if bound is None or result.size == 0:
        return None
    steps, reads, derived = bound
    x = node.inputs[0]._data               # read as it is: a plain float32 one only
    if layouts.block_of(node.inputs[0]._layout) is not None or x.dtype != np.float32 \
            or x.shape != result.shape or not x.flags.c_contiguous:
        return None
    call = eltwise_kernels.bind_eltwise_chain_plain(x, steps, result, ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], tuple(reads), tuple(derived), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_eltwise.bind = bind_eltwise


def run_plain_chain(ctx: Context, node: Node, value: Value,
                    out: np.ndarray | None) -> np.ndarray:
    """Run the steps of a plain elementwise node (one op, or a chain the
    scheduler merged) in one pass over plain ``inputs[0]``, the main operand;
    a binary step's operand is a scalar or a same-shape tensor. ``out`` (the
    planned buffer) may be the main input's or a same-shape operand's: in place."""
    x = plain_buffer(node.inputs[0])
    kernel_steps = _kernel_steps(ctx, node.attrs["steps"])
    if out is None:
        out = aligned_empty(x.shape)
    if out.size:
        ctx.launcher.launch(eltwise_kernels.eltwise_chain_plain, x, kernel_steps, out)
    return out


run_plain_chain.bind = bind_plain_chain


def _kernel_steps(ctx: Context, steps: list, resolve: Callable | None = None,
                  fold: Callable | None = None) -> list:
    """A node's steps as the kernel's: operands resolved (``resolve``, default
    :func:`resolve_operand`), batch norms folded (``fold``, default
    :func:`batch_norm_scale_shift`)."""
    if resolve is None:
        def resolve(operand: tuple) -> object:
            return resolve_operand(ctx, operand)
    fold = fold or batch_norm_scale_shift
    kernel_steps = []
    for step in steps:
        if step[0] == "activation":
            kernel_steps.append(eltwise_kernels.activation_step(step[1], step[2], step[3]))
        elif step[0] == "math":
            param0 = step[2] if not isinstance(step[2], tuple) else \
                resolve(step[2])                       # pow's exponent, read now
            kernel_steps.append(eltwise_kernels.math_step(step[1], param0, step[3]))
        elif step[0] == "binary":
            kernel_steps.append(eltwise_kernels.binary_step(step[1], resolve(step[4]), step[3]))
        else:
            kernel_steps.append(eltwise_kernels.affine_step(*fold(step[1])))
    return kernel_steps


# --- operands ----------------------------------------------------------------------

def _shape(v: Operand) -> tuple[int, ...]:
    return v.shape if isinstance(v, (Tensor, Value)) else ()


def _scalar_of(v: Operand) -> float:
    if isinstance(v, (Tensor, Value)):
        return float(plain_buffer(v).reshape(-1)[0])
    return v


def batch_norm_scale_shift(bn: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel ``(a, b)`` of a batch normalization ``(mean, variance,
    scale, bias, epsilon)`` (Values or None, then a float): ``x * a + b``."""
    arrays = [None if v is None else plain_buffer(v) for v in bn[:4]]
    return eltwise_kernels.batch_norm_fold(*arrays, epsilon=bn[4])


# A binary step describes its kernel operand with a tuple, resolved when the
# step runs (Values inside, no closure: see eltwise_node):
#   ("number", x)                          a Python number
#   ("scalar", y)                          the one element of size-1 Value y
#   ("plain", y)                           y's plain buffer (the output's shape)
#   ("blocked", y, block, axes)            y's blocked buffer (the output's shape)
#   ("rows", y)                            y (N or 1, C) blocked like the main
#                                          operand: its buffer as (N, C_phys)
#   ("lanes", y, padded, n, c, ca)         per-channel or per-(n, c) values
#                                          from y (shape ``padded``, rank 4;
#                                          ``ca`` the channel axis)
#   ("broadcast", y, padded, shape, block, axes)
#                                          y broadcast to ``shape`` and blocked

def resolve_operand(ctx: Context, operand: tuple) -> object:
    """The kernel operand a description gives (see above)."""
    kind = operand[0]
    if kind == "number":
        return operand[1]
    y = operand[1]
    if kind == "scalar":
        return _scalar_of(y)
    if kind == "plain":
        return plain_buffer(y)
    if kind == "blocked":
        return blocked_buffer(ctx, y, operand[2], operand[3])
    if kind == "rows":
        data = y._materialize()
        return data.reshape(-1) if data.shape[0] == 1 else data.reshape(data.shape[0], -1)
    if kind == "lanes":
        _, _, padded, n, c, ca = operand
        values = plain_buffer(y)
        if padded[ca] == c and padded[0] in (1, n):
            # already C (or N x C) values in order: no broadcast needed
            return values.reshape(c) if padded[0] == 1 else values.reshape(n, c)
        values = values.reshape(padded)
        index = tuple(slice(None) if i in (0, ca) else 0 for i in range(4))
        values = values[index]                      # (N or 1, C or 1)
        if padded[0] == 1:
            return np.ascontiguousarray(np.broadcast_to(values[0], (c,)), np.float32)
        return np.ascontiguousarray(np.broadcast_to(values, (n, c)), np.float32)
    _, _, padded, shape, block, axes = operand
    return to_blocked(ctx, np.broadcast_to(plain_buffer(y).reshape(padded), shape), axes,
                      block)


def operand_sig(operand: tuple) -> tuple:
    """An operand description for a node's ``sig``: its Value (always the
    node's second input) left out, a number kept with the sign of zero."""
    if operand[0] == "number":
        return ("number",) + exact(operand[1])
    return (operand[0],) + operand[2:]


def _varying_run(shape: tuple[int, ...],
                 out_shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """If ``shape`` (broadcast to ``out_shape``) varies over one contiguous run of
    axes only, ``(outer, run, inner)`` element counts of that split, else None."""
    padded = (1,) * (len(out_shape) - len(shape)) + shape
    varying = [i for i, (s, o) in enumerate(zip(padded, out_shape)) if o != 1 and s == o]
    fixed = [i for i, (s, o) in enumerate(zip(padded, out_shape)) if o != 1 and s != o]
    if not varying:
        return None
    first, last = varying[0], varying[-1]
    if any(first < i < last for i in fixed):
        return None
    return (int(np.prod(out_shape[:first], dtype=np.int64)),
            int(np.prod(out_shape[first:last + 1], dtype=np.int64)),
            int(np.prod(out_shape[last + 1:], dtype=np.int64)))


def _blocked_operand(y: Operand, main: Value, block: int) -> tuple:
    """The description of the kernel operand for ``y`` against the blocked
    main value: a float, a ``(C,)``/``(C_phys,)`` vector, an ``(N, C)``/``(N,
    C_phys)`` block or a same-shape blocked buffer (see :func:`resolve_operand`)."""
    if not isinstance(y, Value):
        return ("number", y)
    if y.size == 1:
        return ("scalar", y)
    shape, axes = main.shape, main._axes
    ca = channel_axis(axes)
    padded = (1,) * (4 - y.ndim) + y.shape
    if padded == shape:
        return ("blocked", y, block, axes)
    varying = {i for i in range(4) if padded[i] != 1}
    n, c = shape[0], shape[ca]
    if varying <= {0, ca}:
        if (is_blocked(y) and y.ndim == 4 and layouts.block_of(y.layout) == block
                and y._axes == axes and y.shape[ca] == c):
            return ("rows", y)
        return ("lanes", y, padded, n, c, ca)
    return ("broadcast", y, padded, shape, block, axes)


def _binary(op: str, a, b, names: tuple[str, str] = ("a", "b"),
            dtypes: tuple = ANY_DTYPE) -> Tensor:
    ctx = context_of(op, a, b)
    dtype, (a, b) = one_dtype(ctx, op, ((names[0], a), (names[1], b)), dtypes)
    if dtype != FLOAT32:
        return integer_op(ctx, op, (a, b), INTEGER_BINARY[op], dtype)
    return binary_float(ctx, op, a, b, names)


def binary_float(ctx: Context, op: str, a: Operand, b: Operand,
                 names: tuple[str, str] = ("a", "b")) -> Tensor:
    """``a op b`` for float32 Tensors or numbers (see the module docstring)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor(ctx, np.float32(a), op, names[0])
    try:
        out_shape = tuple(np.broadcast_shapes(_shape(a), _shape(b)))
    except ValueError:
        raise JitnnValueError(
            f"{op}: the shapes do not broadcast (numpy rules: aligned from the right, each "
            f"pair of dimensions equal or one of them 1): {names[0]} {_shape(a)}, "
            f"{names[1]} {_shape(b)}") from None

    # the main operand has the output's shape; prefer a blocked one, then a
    # pending one (the scheduler merges a chain through main operands only)
    candidates = [(t, reverse) for t, reverse in ((a, False), (b, True))
                  if isinstance(t, Tensor) and t.shape == out_shape]
    candidates.sort(key=lambda pair: (not is_blocked(pair[0]), not pair[0].pending))
    if candidates:
        main, reverse = candidates[0]
        other = a if reverse else b
    else:
        main, reverse, other = None, False, b           # a is broadcast first (below)

    if main is not None and is_blocked(main):
        block = layouts.block_of(main.layout)
        axes = main._axes
        channels = out_shape[channel_axis(axes)]
        other_value = value_of(other) if isinstance(other, Tensor) else None
        # the description holds Values, never the caller's handles
        operand = _blocked_operand(other_value if other_value is not None else other,
                                   value_of(main), block)
        step = ("binary", op, other_value, reverse, operand)
        inputs = (value_of(main),) + ((other_value,) if other_value is not None else ())
        node = eltwise_node(op, inputs, [step], channels)
        # the node's whole description, given its inputs (see Node.sig)
        node.sig = ("binary", op, reverse, operand_sig(operand), True)
        return pending(ctx, out_shape, main.layout, node, axes=axes)

    axes = main._axes if main is not None and main.ndim == 4 else "nchw"
    size = int(np.prod(out_shape, dtype=np.int64))
    # the node holds Values, never the caller's handles (see tensor.Value)
    a_value, b_value = (value_of(t) if isinstance(t, Tensor) else t for t in (a, b))
    main = value_of(main) if main is not None else None
    other = value_of(other) if isinstance(other, Tensor) else other
    # how the other operand is passed: a scalar, lanes of an (outer, run, inner) view, a tensor
    run = None
    if isinstance(other, Value) and other.size != 1 and other.shape != out_shape:
        run = _varying_run(other.shape, out_shape)
        if run is not None and run[2] < _LANES_MIN_PLANE:
            run = None

    # a node the scheduler can fuse into a preceding matmul (bias or residual add)
    attrs = {"op": op, "main": main, "other": other, "reverse": reverse,
             "first": a_value, "second": b_value, "lanes": run}
    if main is not None and (not isinstance(other, Value) or other.size == 1
                             or other.shape == out_shape):
        # a scalar or same-shape operand: a step of a plain chain (the scheduler
        # may merge it with its neighbours), main input first
        if isinstance(other, Value):
            operand = ("plain", other) if other.size != 1 else ("scalar", other)
        else:
            operand = ("number", other)
        attrs["steps"] = [("binary", op, other if isinstance(other, Value) else None,
                           reverse, operand)]
        inputs = (main,) + ((other,) if isinstance(other, Value) else ())
        node = Node(op, inputs, kind="eltwise_plain", attrs=attrs, run=run_plain_chain,
                    flops=size, sig=("binary", op, reverse, operand_sig(operand), False))
    else:
        inputs = tuple(t for t in (a_value, b_value) if isinstance(t, Value))
        # (a pass may fuse the add into a matmul, reading only attrs): the
        # sig covers the attrs
        other_sig = ("value",) if isinstance(other, Value) else exact(other)
        node = Node(op, inputs, kind="binary_plain", attrs=attrs, run=run_binary_plain,
                    flops=size, sig=("binary_plain", op, reverse, main is None, other_sig, run))
    return pending(ctx, out_shape, plain_layout(len(out_shape), axes), node, axes=axes)


def run_binary_plain(ctx: Context, node: Node, value: Value,
                     out: np.ndarray | None) -> np.ndarray:
    """A plain binary op whose other operand broadcasts (or whose first
    operand is broadcast first: neither has the output's shape), into ``out``
    (the plan's buffer) if given."""
    a = node.attrs
    op, main, other, reverse, run = a["op"], a["main"], a["other"], a["reverse"], a["lanes"]
    shape = value.shape
    if main is None:
        x = np.ascontiguousarray(np.broadcast_to(plain_buffer(a["first"]), shape))
    else:
        x = plain_buffer(main)
    if out is None or out.shape != shape or out.dtype != FLOAT32 \
            or not out.flags.c_contiguous:
        out = aligned_empty(shape)
    if out.size == 0:
        return out
    if not isinstance(other, Value) or other.size == 1:
        ctx.launcher.launch(eltwise_kernels.eltwise_binary_plain, x, _scalar_of(other), out, op,
                            reverse=reverse)
    elif run is not None:
        view = (run[0], run[1], run[2], 1, 1)
        vector = np.ascontiguousarray(plain_buffer(other).reshape(-1))
        ctx.launcher.launch(eltwise_kernels.eltwise_binary, x.reshape(view), vector,
                            out.reshape(view), run[1], op, reverse=reverse)
    else:
        y = np.ascontiguousarray(np.broadcast_to(plain_buffer(other), shape))
        ctx.launcher.launch(eltwise_kernels.eltwise_binary_plain, x, y, out, op, reverse=reverse)
    return out


#: the ops whose numpy ufunc gives the kernel's results (IEEE float32, one
#: rounding), and the most elements a bound step computes with it (one
#: thread: numpy's broadcasting instead of a copy per run of the operand)
_NUMPY_BOUND = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
_NUMPY_BOUND_MAX = 1 << 16


def bind_binary_plain(ctx: Context, node: Node, result: np.ndarray) -> Binding | None:
    """:func:`run_binary_plain`'s op as one bound numpy call on the operands'
    own arrays (broadcast by numpy, no copy: a mask added to a (2, 4, 16, 16)
    attention bias), for add, sub, mul and div of small plain float32 arrays;
    else None."""
    a = node.attrs
    ufunc = _NUMPY_BOUND.get(a["op"])
    if ufunc is None or result.size > _NUMPY_BOUND_MAX or result.dtype != FLOAT32:
        return None
    args, reads = [], []
    for v in (a["first"], a["second"]):
        if not isinstance(v, Value):
            args.append(v)                           # a number (float32 arithmetic: NEP 50)
            continue
        data = v._data
        if not isinstance(data, np.ndarray) or data.dtype != FLOAT32 \
                or layouts.block_of(v._layout) is not None or v._remake is not None:
            return None
        args.append(data)
        reads.append((v, data))
    return Binding(_quiet_ufuncs[ufunc], (*args, result), tuple(reads), (), result,
                   ctx.num_threads)


def _quietly(ufunc: np.ufunc):
    def into(a, b, out: np.ndarray) -> None:
        # IEEE's infinities and NaN, as the kernel gives them: no warning
        with np.errstate(all="ignore"):
            ufunc(a, b, out=out)
    into.__name__ = into.__qualname__ = f"{ufunc.__name__}_quietly"
    return into


_quiet_ufuncs = {ufunc: _quietly(ufunc) for ufunc in _NUMPY_BOUND.values()}


# (the executor asks a node's run function for its binder)
run_binary_plain.bind = bind_binary_plain

register_kind(NodeKind("binary_plain", writes_into_buffer=True))


def add(a, b) -> Tensor:
    """``a + b`` with numpy broadcasting (see the module docstring for layouts)."""
    return _binary("add", a, b)


def sub(a, b) -> Tensor:
    """``a - b`` with numpy broadcasting."""
    return _binary("sub", a, b)


def mul(a, b) -> Tensor:
    """``a * b`` with numpy broadcasting."""
    return _binary("mul", a, b)


def div(a, b) -> Tensor:
    """``a / b`` with numpy broadcasting (IEEE: x / 0 = +-inf, 0 / 0 = NaN)."""
    return _binary("div", a, b)


def maximum(a, b) -> Tensor:
    """The elementwise maximum of ``a`` and ``b``, with numpy broadcasting."""
    return _binary("maximum", a, b)


def minimum(a, b) -> Tensor:
    """The elementwise minimum of ``a`` and ``b``, with numpy broadcasting."""
    return _binary("minimum", a, b)


# --- unary -----------------------------------------------------------------------------

def _unary(op: str, x, param0: float = 0.0, param1: float = 0.0) -> Tensor:
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
    return unary_step(ctx, op, x, ("activation", epilogue.ACTIVATIONS[op],
                                   float(param0), float(param1)))


def unary_step(ctx: Context, op: str, x: Tensor, step: tuple,
               scalar: Tensor | None = None) -> Tensor:
    """The pending result of one ``("activation" or "math", code, param0,
    param1)`` step on float32 ``x``, in ``x``'s layout: a blocked ``eltwise``
    node or a plain ``eltwise_plain`` one (both merge into chains). With
    ``scalar`` (a size-1 tensor), ``param0`` is its value, read when the
    step runs (pow's exponent)."""
    kind, code, param0, param1 = step
    inputs = (value_of(x),)
    if scalar is not None:
        step = (kind, code, ("scalar", value_of(scalar)), param1)
        inputs += (value_of(scalar),)
        param0 = ("scalar",)
    else:
        param0 = exact(param0)
    # the node's whole description, given its inputs (see Node.sig)
    blocked = is_blocked(x)
    sig = (kind, op, code, param0, exact(param1), blocked)
    if blocked:
        channels = x.shape[channel_axis(x._axes)]
        node = eltwise_node(op, inputs, [step], channels)
        node.sig = sig
        return pending(ctx, x.shape, x.layout, node, axes=x._axes)

    # a node the scheduler can fuse into a preceding matmul's epilogue (an
    # activation), or merge with its neighbours into one plain pass
    node = Node(op, inputs, kind="eltwise_plain", attrs={"steps": [step]},
                run=run_plain_chain, flops=x.size, sig=sig)
    return pending(ctx, x.shape, x.layout, node, axes=x._axes)


def _bound(op: str, name: str, value: object, default: float) -> float:
    """A clamp bound: a number, maybe infinite (WebNN's defaults are -inf and
    +inf); NaN is no bound (``default``: IEEE's maxNum and minNum ignore a NaN,
    and WebNN's conformance vectors expect that)."""
    if is_number(value) and not is_int(value) and math.isnan(value):  # type: ignore[arg-type]
        return default
    return real_arg(op, name, value, finite=False)


def relu(x) -> Tensor:
    """``max(x, 0)`` (float32, int8, int32, int64)."""
    op = "relu"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", SIGNED_DTYPES)
    if x.dtype != FLOAT32:
        return integer_op(ctx, op, (x,), functools.partial(unary_reference, op), x.dtype)
    return _unary(op, x)


def clamp(x, min_value: float = -np.inf, max_value: float = np.inf) -> Tensor:
    """``min(max(x, min_value), max_value)`` (WebNN: the bounds default to -inf
    and +inf, and ``min_value > max_value`` is an error; a NaN bound is no
    bound, as IEEE's maxNum and minNum take it). Any data type; on an
    integer tensor the bounds are rounded inward to integers and limited to
    the type's range (ints are taken exactly, int64's beyond 2**53 too)."""
    op = "clamp"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    if x.dtype != FLOAT32:
        bounds = [v if is_int(v) else _bound(op, name, v, default)
                  for name, v, default in (("min_value", min_value, -np.inf),
                                           ("max_value", max_value, np.inf))]
        if bounds[0] > bounds[1]:
            raise JitnnValueError(f"{op}: min_value must be <= max_value, got {bounds[0]} > "
                                  f"{bounds[1]}")
        lo, hi = integer_bounds(op, x.dtype, *bounds)
        return integer_op(ctx, op, (x,), lambda data: np.minimum(np.maximum(data, lo), hi),
                          x.dtype)
    lo = _bound(op, "min_value", min_value, -np.inf)
    hi = _bound(op, "max_value", max_value, np.inf)
    if lo > hi:
        raise JitnnValueError(f"{op}: min_value must be <= max_value, got {lo} > {hi}")
    return _unary(op, x, lo, hi)


def sigmoid(x) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return _unary("sigmoid", x)


def tanh(x) -> Tensor:
    """The hyperbolic tangent."""
    return _unary("tanh", x)


def leaky_relu(x, alpha: float = 0.01) -> Tensor:
    """``x if x >= 0 else alpha * x`` (WebNN's default alpha is 0.01)."""
    # a finite alpha: an infinite one makes 0 * alpha NaN
    return _unary("leaky_relu", x, real_arg("leaky_relu", "alpha", alpha))


def hard_swish(x) -> Tensor:
    """``x * max(0, min(6, x + 3)) / 6``."""
    return _unary("hard_swish", x)


#: gelu's ``approximate`` options (PyTorch's and ONNX's names)
GELU_APPROXIMATIONS = ("none", "tanh")


def gelu(x, approximate: str = "none") -> Tensor:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` (the exact form, WebNN's gelu); with
    ``approximate="tanh"`` (PyTorch's and ONNX's option, GPT-2's ``gelu_new``)
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``. The exact
    one also fuses into a conv2d or matmul epilogue; the tanh one is a step of
    the element-wise chain (kernels/vmath.py), merged with its neighbours."""
    if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
        raise JitnnValueError(f"gelu: approximate must be one of {GELU_APPROXIMATIONS}, got "
                              f"{approximate!r}")
    if approximate == "none":
        return _unary("gelu", x)
    ctx = context_of("gelu", x)
    x = as_tensor(ctx, x, "gelu", "x")
    return unary_step(ctx, "gelu", x, ("math", vmath.GELU_TANH, 0.0, 0.0))


# --- how the scheduler treats elementwise nodes (jitnn/registry.py) ---------------

def _inplace_inputs(v: Value, node: Node) -> list[Value]:
    """Any input of the output's shape and layout may take the output."""
    return [s for s in node.inputs if s._shape == v._shape and s._layout == v._layout]


def _merge(node: Node, consumer: Node, v: Value, result: Value) -> Node | None:
    """Two elementwise ops of the same kind (blocked ``eltwise``, or plain
    ``eltwise_plain``: one pass of steps over its first input, activations and
    binary ops with a scalar or same-shape operand), the second reading the
    first's result as its main input only, as one pass over memory, within the
    kernel's limits on steps and tensor operands."""
    if consumer.kind == node.kind:
        consumer = _main_first(consumer, v)
    if consumer.kind != node.kind or consumer.inputs[0] is not v \
            or any(t is v for t in consumer.inputs[1:]) or result._shape != v._shape:
        return None
    steps = node.attrs["steps"] + consumer.attrs["steps"]
    tensors = sum(1 for s in steps if s[0] == "binary" and s[2] is not None
                  and s[2]._shape == v._shape and s[2].size > 1)
    if len(steps) > eltwise_kernels.MAX_STEPS or tensors > eltwise_kernels.MAX_TENSORS:
        return None
    inputs = node.inputs + consumer.inputs[1:]
    if node.kind == "eltwise_plain":
        steps, inputs = _plain_silu(steps, inputs)
    # a merged plain node is a chain, no longer one binary op (its own attrs go)
    changes = {"attrs": {**node.attrs, "steps": steps}} if node.kind == "eltwise" else \
        {"kind": "eltwise_plain", "attrs": {"steps": steps}}
    return node.replace(inputs=inputs, fused=node.fused + (consumer.label,),
                        flops=node.flops + consumer.flops, **changes)


def _plain_silu(steps: list, inputs: tuple) -> tuple[list, tuple]:
    """A plain chain that starts ``sigmoid(x) * x`` (x its main input: SiLU as
    exported, the Mul reading x again) as one SiLU step, x read once: Llama's
    ``silu(gate) * up`` is then a SiLU and a product in one pass over two
    tensors instead of three."""
    if len(steps) < 2 or steps[0][:2] != ("activation", epilogue.SIGMOID):
        return steps, inputs
    x = inputs[0]
    kind, op, other, _, operand = steps[1] if len(steps[1]) == 5 else (None,) * 5
    if kind != "binary" or op != "mul" or other is not x or operand != ("plain", x) \
            or len(inputs) < 2 or inputs[1] is not x:
        return steps, inputs
    return [("activation", epilogue.SILU, 0.0, 0.0)] + steps[2:], (x,) + inputs[2:]


def _main_first(consumer: Node, v: Value) -> Node:
    """A binary step ``other op v`` (``v`` its second input, ``other`` of the
    same shape, plain, or blocked as ``v``) as ``v op other`` with the reverse
    flag flipped, so that a chain can merge through ``v`` (Llama's
    ``silu(gate) * up``, whose product took ``up`` as its main input;
    MobileOne's ``branches + batch_norm(x)``, whose sum took the branches);
    else ``consumer`` as it is."""
    steps = consumer.attrs.get("steps")
    if len(consumer.inputs) != 2 or consumer.inputs[1] is not v or consumer.inputs[0] is v \
            or not steps or len(steps) != 1:
        return consumer
    kind, op, other, reverse, operand = steps[0]
    main = consumer.inputs[0]
    if kind != "binary" or other is not v or main._shape != v._shape:
        return consumer
    if operand == ("plain", v):
        swapped = ("plain", main)
    elif operand[:2] == ("blocked", v) and layouts.block_of(main._layout) == operand[2] \
            and main._axes == operand[3]:
        swapped = ("blocked", main) + operand[2:]
    else:
        return consumer
    return consumer.replace(inputs=(v, main), attrs={
        **consumer.attrs, "steps": [("binary", op, main, not reverse, swapped)]})


def _self_gated(gate: Node, product: Node, x: Value) -> Node | None:
    """``x * sigmoid(x)`` (a sigmoid of ``x`` and a mul of ``x`` by it, either
    order, both of this kind) as one SiLU step on ``x``, for an anchor's
    epilogue to take (the scheduler's ``fuse_swish``)."""
    steps, product_steps = gate.attrs.get("steps"), product.attrs.get("steps")
    if (product.kind != gate.kind or not steps or len(steps) != 1 or not product_steps
            or len(product_steps) != 1 or gate.inputs != (x,) or len(product.inputs) != 2
            or steps[0][:2] != ("activation", epilogue.SIGMOID)
            or product_steps[0][:2] != ("binary", "mul")):
        return None
    a, b = product.inputs
    if not ((a is x and b is not x) or (b is x and a is not x)):
        return None
    return gate.replace(op="silu", attrs={**gate.attrs,
                                          "steps": [("activation", epilogue.SILU, 0.0, 0.0)]})


for _kind in ("eltwise", "eltwise_plain"):
    register_kind(NodeKind(_kind, role="elementwise", writes_into_buffer=True,
                           inplace_inputs=_inplace_inputs, merge=_merge,
                           self_gated=_self_gated))

_BINARY = {"add": ("add", "Add"), "sub": ("sub", "Sub"), "mul": ("mul", "Mul"),
           "div": ("div", "Div"), "maximum": ("max", "Max"), "minimum": ("min", "Min")}
_UNARY = {"relu": ("relu", "Relu"), "clamp": ("clamp", "Clip"), "sigmoid": ("sigmoid", "Sigmoid"),
          "tanh": ("tanh", "Tanh"), "leaky_relu": ("leakyRelu", "LeakyRelu"),
          "hard_swish": ("hardSwish", "HardSwish"), "gelu": ("gelu", "Gelu")}
_DTYPE_NAMES = {"relu": tuple(d.name for d in SIGNED_DTYPES),
                "clamp": tuple(d.name for d in ANY_DTYPE)}
for _name, (_webnn, _onnx) in _BINARY.items():
    register_op(OpDef(_name, globals()[_name], functools.partial(binary_reference, _name),
                      webnn=_webnn, onnx=(_onnx,), kinds=("eltwise", "eltwise_plain",
                                                          "binary_plain"),
                      layouts="float32: blocked or plain, as its input; integers: plain",
                      fusion="elementwise: merges into chains; a residual add into a conv "
                             "or matmul epilogue",
                      dtypes=tuple(d.name for d in ANY_DTYPE)))
for _name, (_webnn, _onnx) in _UNARY.items():
    register_op(OpDef(_name, globals()[_name], functools.partial(unary_reference, _name),
                      webnn=_webnn, onnx=(_onnx,) if _onnx else (),
                      kinds=("eltwise", "eltwise_plain"),
                      layouts="float32: blocked or plain, as its input; integers: plain"
                      if _name in _DTYPE_NAMES else "blocked or plain, as its input",
                      fusion="elementwise: merges into chains and conv/matmul epilogues"
                      + (' (approximate="tanh": into chains only)' if _name == "gelu" else ""),
                      dtypes=_DTYPE_NAMES.get(_name, ("float32",))))
