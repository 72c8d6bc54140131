"""One time step of an LSTM or GRU cell after its recurrent product, in one
pass (kernels/recurrent.py): the gate activations (sigmoid, tanh, tanh:
ONNX's defaults) and the state update of every direction, where the
element-wise lowering takes gate slices and four passes a step.

The ONNX loader (jitnn/onnx/_convert_recurrent.py) runs a step as the
recurrent product ``h @ R^T`` (one ``gemm`` for both directions, on a
block-diagonal ``R``) and one of these ops, which adds the step's rows of
the input projection ``x`` itself (found by index: no slice is copied):

* ``lstm_cell(x, product, state, peepholes)``: the new ``(2, B, D * H)``
  state, ``h`` then ``c`` (a gemm reads ``h``, the first half, in place);
* ``gru_cell(x, product, state, reset_product, recurrent_bias)``: the new
  ``(B, D * H)`` ``h``; ``gru_reset(x, product, state)``: ``r * h``, the
  input of the candidate's product when ``linear_before_reset`` is 0.

``x``: ``(rows, D * G * H)``, direction ``d`` of entry ``b`` reading row
``first_row[d] + b * entry_rows`` (``G`` gates, ONNX's orders: LSTM ``i, o,
f, c``, GRU ``z, r, h``). ``product``: ``(B, D * G * H)`` (GRU with
``linear_before_reset`` 0: ``z, r`` only, ``(B, D * 2 H)``), None with
``state`` None on a step without a previous state (zeros). ``clip``: the
activations' inputs clamped to ``[-clip, clip]``. Plain float32 in and out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from .. import layouts
from ..errors import JitnnValueError
from ..kernels import recurrent as recurrent_kernels
from ..kernels.buffers import aligned_empty
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import Node, Tensor, Value
from ._common import (Binding, as_tensor, context_of, pending, plain_buffer, plain_result,
                      value_of)

if TYPE_CHECKING:
    from ..context import Context


# --- the spec ------------------------------------------------------------------------

def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _step_gates(x, product, first_row, entry_rows: int, directions: int, batch: int,
                gates: int) -> np.ndarray:
    """``(D, B, gates, H)``: the step's rows of ``x`` plus the product, float64."""
    x = np.asarray(x, np.float64)
    width = x.shape[1] // directions
    hidden = width // gates
    rows = np.asarray(first_row)[:, None] + np.arange(batch)[None, :] * entry_rows
    out = np.stack([x[rows[d], d * width:(d + 1) * width] for d in range(directions)])
    if product is not None:
        product = np.asarray(product, np.float64)
        part = product.shape[1] // directions
        out[..., :part] += np.stack([product[:, d * part:(d + 1) * part]
                                     for d in range(directions)])
    return out.reshape(directions, batch, gates, hidden)


def _per_direction(state, directions: int) -> np.ndarray:
    """``(B, D * H)`` as ``(D, B, H)``, float64."""
    state = np.asarray(state, np.float64)
    b, width = state.shape
    return state.reshape(b, directions, width // directions).transpose(1, 0, 2)


def _joined(state: np.ndarray) -> np.ndarray:
    """``(D, B, H)`` as ``(B, D * H)``."""
    d, b, h = state.shape
    return state.transpose(1, 0, 2).reshape(b, d * h)


def _clipped(clip: float | None):
    return (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))


def lstm_cell_reference(x, product, state, peepholes=None, *, first_row: Sequence[int],
                        entry_rows: int = 1, directions: int = 1, batch: int | None = None,
                        clip: float | None = None, input_forget: bool = False) -> np.ndarray:
    """The new ``(2, B, D * H)`` state of ONNX's LSTM formulas, float64."""
    batch = np.asarray(state).shape[1] if batch is None else batch
    g = _step_gates(x, product, first_row, entry_rows, directions, batch, 4)
    hidden = g.shape[-1]
    cl = _clipped(clip)
    c_prev = np.zeros((directions, batch, hidden)) if state is None else \
        _per_direction(np.asarray(state)[1], directions)
    p = np.zeros((directions, 3 * hidden)) if peepholes is None else \
        np.asarray(peepholes, np.float64)
    p_i, p_o, p_f = (p[:, None, k * hidden:(k + 1) * hidden] for k in range(3))
    i = _sigmoid(cl(g[:, :, 0] + p_i * c_prev))
    f = 1.0 - i if input_forget else _sigmoid(cl(g[:, :, 2] + p_f * c_prev))
    c = f * c_prev + i * np.tanh(cl(g[:, :, 3]))
    o = _sigmoid(cl(g[:, :, 1] + p_o * c))
    return np.stack([_joined(o * np.tanh(c)), _joined(c)])


def gru_reset_reference(x, product, state, *, first_row: Sequence[int], entry_rows: int = 1,
                        directions: int = 1, clip: float | None = None) -> np.ndarray:
    """``r * h`` of ONNX's GRU formulas (``(B, D * H)``), float64."""
    batch = np.asarray(state).shape[0]
    g = _step_gates(x, None, first_row, entry_rows, directions, batch, 3)
    zr = np.asarray(product, np.float64).reshape(batch, directions, 2, -1).transpose(1, 0, 2, 3)
    r = _sigmoid(_clipped(clip)(g[:, :, 1] + zr[:, :, 1]))
    return _joined(r * _per_direction(state, directions))


def gru_cell_reference(x, product, state, reset_product=None, recurrent_bias=None, *,
                       first_row: Sequence[int], entry_rows: int = 1, directions: int = 1,
                       batch: int | None = None, clip: float | None = None,
                       linear_before_reset: bool = False) -> np.ndarray:
    """The new ``h`` (``(B, D * H)``) of ONNX's GRU formulas, float64."""
    batch = np.asarray(state).shape[0] if batch is None else batch
    g = _step_gates(x, None, first_row, entry_rows, directions, batch, 3)
    hidden = g.shape[-1]
    cl = _clipped(clip)
    parts = 3 if linear_before_reset else 2
    p = np.zeros((directions, batch, parts, hidden)) if product is None else \
        np.asarray(product, np.float64).reshape(batch, directions, parts, hidden) \
        .transpose(1, 0, 2, 3)
    h_prev = np.zeros((directions, batch, hidden)) if state is None else \
        _per_direction(state, directions)
    z = _sigmoid(cl(g[:, :, 0] + p[:, :, 0]))
    r = _sigmoid(cl(g[:, :, 1] + p[:, :, 1]))
    if linear_before_reset:
        bias = np.zeros((directions, hidden)) if recurrent_bias is None else \
            np.asarray(recurrent_bias, np.float64)
        n = np.tanh(cl(g[:, :, 2] + r * (p[:, :, 2] + bias[:, None, :])))
    else:
        extra = 0.0 if reset_product is None else _per_direction(reset_product, directions)
        n = np.tanh(cl(g[:, :, 2] + extra))
    return _joined((1.0 - z) * n + z * h_prev)


# --- the ops ---------------------------------------------------------------------------

_GATES = {"lstm_cell": 4, "gru_cell": 3, "gru_reset": 3}


def _float_tensor(ctx, value, op: str, name: str, shape: tuple) -> Tensor | None:
    if value is None:
        return None
    t = as_tensor(ctx, value, op, name)
    if tuple(t.shape) != shape:
        raise JitnnValueError(f"{op}: {name} has shape {tuple(t.shape)}, expected {shape}")
    return t


def _record(op: str, kind: str, shape: tuple, run, tensors: dict, attrs: dict) -> Tensor:
    """A node of its own kind over ``tensors`` (None: absent), which writes the
    plan's buffer and replays as one bound call."""
    ctx = context_of(op, *[t for t in tensors.values() if t is not None])
    values = {k: value_of(t) for k, t in tensors.items()}
    attrs = dict(attrs, **values)
    inputs = tuple(v for v in values.values() if v is not None)
    present = tuple(k for k, v in values.items() if v is not None)
    sig = (kind, present, tuple((k, v) for k, v in sorted(attrs.items())
                                if k not in values))
    node = Node(op, inputs, kind=kind, attrs=attrs, run=run, sig=sig)
    return pending(ctx, shape, layouts.plain_tag(len(shape)), node)


def _common_args(op: str, x, product, state, first_row, entry_rows: int, directions: int,
                 batch: int | None, state_shape) -> tuple:
    """Checked ``(ctx, x, product, state, first_row, B, H)``."""
    ctx = context_of(op, x, product, state)
    x = as_tensor(ctx, x, op, "x")
    directions = int(directions)
    gates = _GATES[op]
    if directions not in (1, 2) or x.ndim != 2 or x.shape[1] % (gates * directions) \
            or x.shape[1] == 0:
        raise JitnnValueError(f"{op}: x {tuple(x.shape)} must be (rows, directions * {gates} * "
                              f"H) with 1 or 2 directions, got {directions}")
    hidden = x.shape[1] // (gates * directions)
    if state is None and batch is None:
        raise JitnnValueError(f"{op}: batch is needed when there is no state")
    if (state is None) != (product is None):
        raise JitnnValueError(f"{op}: product and state come together (or neither)")
    if batch is None:
        batch = as_tensor(ctx, state, op, "state").shape[-2]
    batch = int(batch)
    first = tuple(int(r) for r in first_row)
    entry_rows = int(entry_rows)
    rows = np.asarray(first)[:, None] + np.arange(batch)[None, :] * entry_rows
    if len(first) != directions or batch < 1 or rows.min() < 0 or rows.max() >= x.shape[0]:
        raise JitnnValueError(f"{op}: first_row {list(first)} (one per direction) + b * "
                              f"{entry_rows} for b < {batch} must be rows of x {tuple(x.shape)}")
    state = _float_tensor(ctx, state, op, "state", state_shape(batch, directions * hidden))
    return ctx, x, first, entry_rows, directions, batch, hidden, state


def lstm_cell(x, product, state, peepholes=None, *, first_row: Sequence[int],
              entry_rows: int = 1, directions: int = 1, batch: int | None = None,
              clip: float | None = None, input_forget: bool = False) -> Tensor:
    """One LSTM step: the new ``(2, B, D * H)`` state, ``h`` then ``c`` (see
    the module docstring)."""
    op = "lstm_cell"
    ctx, x, first, entry_rows, d, b, h, state = _common_args(
        op, x, product, state, first_row, entry_rows, directions, batch,
        lambda n, w: (2, n, w))
    product = _float_tensor(ctx, product, op, "product", (b, d * 4 * h))
    peepholes = _float_tensor(ctx, peepholes, op, "peepholes", (d, 3 * h))
    attrs = {"first_row": first, "entry_rows": entry_rows, "directions": d,
             "clip": None if clip is None else float(clip), "input_forget": bool(input_forget)}
    return _record(op, "lstm_step", (2, b, d * h), run_lstm_step,
                   {"x": x, "product": product, "state": state, "peepholes": peepholes}, attrs)


def gru_reset(x, product, state, *, first_row: Sequence[int], entry_rows: int = 1,
              directions: int = 1, clip: float | None = None) -> Tensor:
    """``r * h`` of a GRU step (``(B, D * H)``; see the module docstring)."""
    op = "gru_reset"
    if state is None:
        raise JitnnValueError(f"{op}: needs a state")
    ctx, x, first, entry_rows, d, b, h, state = _common_args(
        op, x, product, state, first_row, entry_rows, directions, None, lambda n, w: (n, w))
    product = _float_tensor(ctx, product, op, "product", (b, d * 2 * h))
    attrs = {"first_row": first, "entry_rows": entry_rows, "directions": d,
             "clip": None if clip is None else float(clip)}
    return _record(op, "gru_reset", (b, d * h), run_gru_reset,
                   {"x": x, "product": product, "state": state}, attrs)


def gru_cell(x, product, state, reset_product=None, recurrent_bias=None, *,
             first_row: Sequence[int], entry_rows: int = 1, directions: int = 1,
             batch: int | None = None, clip: float | None = None,
             linear_before_reset: bool = False) -> Tensor:
    """One GRU step: the new ``h``, ``(B, D * H)`` (see the module docstring)."""
    op = "gru_cell"
    ctx, x, first, entry_rows, d, b, h, state = _common_args(
        op, x, product, state, first_row, entry_rows, directions, batch, lambda n, w: (n, w))
    lbr = bool(linear_before_reset)
    product = _float_tensor(ctx, product, op, "product", (b, d * (3 if lbr else 2) * h))
    if (reset_product is not None) != (state is not None and not lbr):
        raise JitnnValueError(f"{op}: reset_product ((r * h) @ R_h^T) is needed exactly when "
                              "there is a state and linear_before_reset is 0")
    reset_product = _float_tensor(ctx, reset_product, op, "reset_product", (b, d * h))
    recurrent_bias = _float_tensor(ctx, recurrent_bias, op, "recurrent_bias", (d, h))
    attrs = {"first_row": first, "entry_rows": entry_rows, "directions": d,
             "clip": None if clip is None else float(clip), "linear_before_reset": lbr}
    return _record(op, "gru_step", (b, d * h), run_gru_step,
                   {"x": x, "product": product, "state": state, "reset_product": reset_product,
                    "recurrent_bias": recurrent_bias}, attrs)


def lstm_hidden_reference(state) -> np.ndarray:
    """``state[0]``: the ``h`` of an LSTM state, float64."""
    return np.asarray(state, np.float64)[0]


def lstm_hidden(state) -> Tensor:
    """The ``h`` half (``(B, D * H)``) of an ``lstm_cell`` state: a view, which
    a following ``gemm`` or ``matmul`` reads in place (no copy, no step)."""
    op = "lstm_hidden"
    ctx = context_of(op, state)
    state = as_tensor(ctx, state, op, "state")
    if state.ndim != 3 or state.shape[0] != 2:
        raise JitnnValueError(f"{op}: state must be (2, B, D * H), got {tuple(state.shape)}")
    shape = tuple(state.shape[1:])
    return plain_result(ctx, shape, lambda data: data[0], state, op)


# --- running and binding ------------------------------------------------------------

def _out(value: Value, out: np.ndarray | None) -> np.ndarray:
    """``out`` (the plan's buffer) when it fits ``value``, else a new array."""
    if out is None or out.shape != value.shape or out.dtype != np.float32 \
            or not out.flags.c_contiguous:
        return aligned_empty(value.shape)
    return out


def _arrays(node: Node, names: tuple) -> dict:
    """The plain buffers of the node's inputs ``names`` (None where absent)."""
    a = node.attrs
    return {k: None if a[k] is None else plain_buffer(a[k]) for k in names}


#: (rows, columns) -> zeros: the peepholes or Rb_h of a cell without them
_ZEROS: dict[tuple[int, int], np.ndarray] = {}


def _zeros(shape: tuple[int, int]) -> np.ndarray:
    """Shared zeros, never written (the same array at every run: a bound call
    holds it; writable, as numba would compile a read-only array's kernel anew)."""
    zeros = _ZEROS.get(shape)
    if zeros is None:
        zeros = _ZEROS.setdefault(shape, np.zeros(shape, np.float32))
    return zeros


def _call(node: Node, arrays: dict, out: np.ndarray) -> tuple:
    """``(kernel, args)`` of the node's step on these arrays."""
    a = node.attrs
    rows = (np.asarray(a["first_row"], np.int64), a["entry_rows"])
    d = a["directions"]
    hidden = out.shape[-1] // d
    if node.kind == "lstm_step":
        peepholes = arrays["peepholes"]
        return recurrent_kernels.bind_lstm_step(
            arrays["x"], *rows, arrays["product"], arrays["state"],
            _zeros((d, 3 * hidden)) if peepholes is None else peepholes, out,
            a["directions"], a["clip"], a["input_forget"])
    if node.kind == "gru_reset":
        return recurrent_kernels.bind_gru_reset(
            arrays["x"], *rows, arrays["product"], arrays["state"], out, a["directions"],
            a["clip"])
    bias = arrays["recurrent_bias"]
    return recurrent_kernels.bind_gru_step(
        arrays["x"], *rows, arrays["product"], arrays["reset_product"],
        _zeros((d, hidden)) if bias is None else bias, arrays["state"], out, a["directions"],
        a["clip"], a["linear_before_reset"])


_INPUTS = {"lstm_step": ("x", "product", "state", "peepholes"),
           "gru_reset": ("x", "product", "state"),
           "gru_step": ("x", "product", "state", "reset_product", "recurrent_bias")}


def _run(ctx: "Context", node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    """The step of a recurrent cell node, into ``out`` (the plan's buffer) if given."""
    out = _out(value, out)
    kernel, args = _call(node, _arrays(node, _INPUTS[node.kind]), out)
    ctx.launcher.launch(kernel, *args)
    return out


def _bind(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`_run` just made, bound to its arrays: constants
    (the peepholes, ``Rb_h``) as forms kept on their values, computed inputs
    read in place."""
    a = node.attrs
    arrays, reads, derived = {}, [], []
    for name in _INPUTS[node.kind]:
        v = a[name]
        if v is None:
            arrays[name] = None
        elif v.held:
            key = ("recurrent_constant", v._shape)
            form = v._derive(key, lambda v=v: np.ascontiguousarray(plain_buffer(v), np.float32))
            derived.append((v, key, form))
            arrays[name] = form
        else:
            data = v._data
            if not isinstance(data, np.ndarray) or data.dtype != np.float32 \
                    or not data.flags.c_contiguous or data.shape != v._shape \
                    or layouts.block_of(v._layout) is not None:
                return None
            reads.append((v, data))
            arrays[name] = data
    kernel, args = _call(node, arrays, result)
    return Binding(kernel, args, tuple(reads), tuple(derived), result, ctx.num_threads)


# one run function per kind: the executor finds each one's binder on it
def run_lstm_step(ctx: "Context", node: Node, value: Value,
                  out: np.ndarray | None) -> np.ndarray:
    return _run(ctx, node, value, out)


def run_gru_reset(ctx: "Context", node: Node, value: Value,
                  out: np.ndarray | None) -> np.ndarray:
    return _run(ctx, node, value, out)


def run_gru_step(ctx: "Context", node: Node, value: Value,
                 out: np.ndarray | None) -> np.ndarray:
    return _run(ctx, node, value, out)


# (the executor asks a node's run function for its binder)
for _runner, _kind in ((run_lstm_step, "lstm_step"), (run_gru_reset, "gru_reset"),
                       (run_gru_step, "gru_step")):
    _runner.bind = _bind
    register_kind(NodeKind(_kind, writes_into_buffer=True))

_FUSION = "fused itself: a recurrent step's gate slices, activations and state update in " \
          "one pass over B x H, both directions in one call"
register_op(OpDef("lstm_cell", lstm_cell, lstm_cell_reference, layouts="plain", fusion=_FUSION))
register_op(OpDef("gru_cell", gru_cell, gru_cell_reference, layouts="plain", fusion=_FUSION))
register_op(OpDef("lstm_hidden", lstm_hidden, lstm_hidden_reference, layouts="plain",
                  fusion="a view: a following gemm or matmul reads it in place"))
register_op(OpDef("gru_reset", gru_reset, gru_reset_reference, layouts="plain",
                  fusion="fused itself: a GRU step's reset gate and r * h in one pass"))
