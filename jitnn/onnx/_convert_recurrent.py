"""ONNX LSTM, GRU and RNN as jitnn matmuls and element-wise ops, one time step
after the other (the graph is unrolled over the sequence: shapes are static).

The weights are load-time constants (every exporter writes them as
initializers), arranged once at load time:

1. the input projection of every time step and direction is ONE ``gemm``:
   ``(T * B, I) @ (I, D * gates * H)`` with the biases ``Wb + Rb`` summed
   into its bias (GRU with ``linear_before_reset`` keeps its ``Rbh`` apart);
2. per step, the recurrent product ``h @ R^T`` is a ``gemm`` whose addend is
   the step's slice of that projection (the product starts from nothing on a
   step without a previous state: the first one without ``initial_h``);
3. the gates are slices of it, then the activations and state updates, which
   the scheduler runs as element-wise chains.

Gate orders are ONNX's: LSTM ``i, o, f, c``, GRU ``z, r, h``. ``clip`` clamps
the input of the gate activations (not the cell state before ``h``), as ONNX
Runtime does. ``sequence_lens`` known at load time: steps past a sequence's
length keep its state and write zeros (masks made at load time), and an
empty sequence's Y_h and Y_c are zeros (ONNX Runtime's reading); the reverse
direction starts each sequence at its own last step (its projection rows
gathered once in that order, its outputs gathered back).
"""

from __future__ import annotations

import numpy as np

from ..graph import Operand
from ._common import Const, Converter, need_const, shape_of

#: ONNX op -> (number of gates, default activations of one direction)
_KINDS = {"LSTM": (4, ("Sigmoid", "Tanh", "Tanh")), "GRU": (3, ("Sigmoid", "Tanh")),
          "RNN": (1, ("Tanh",))}

#: activation (lowercase) -> (takes alpha, takes beta, default alpha, default beta)
_ACTIVATIONS = {
    "sigmoid": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0),
    "relu": (False, False, 0.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0), "elu": (True, False, 1.0, 0.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "affine": (True, True, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0),
}


class _Activation:
    """One activation function of the cell, with its alpha and beta."""
    __slots__ = ("name", "alpha", "beta")

    def __init__(self, name: str, alpha: float, beta: float):
        self.name, self.alpha, self.beta = name, alpha, beta

    def __call__(self, cv: Converter, x: Operand) -> Operand:
        name, alpha, beta = self.name, self.alpha, self.beta
        if name in ("sigmoid", "tanh", "relu", "softsign", "softplus"):
            return cv.op(name, x)
        if name == "leakyrelu":
            return cv.op("leaky_relu", x, alpha)
        if name == "elu":
            return cv.op("elu", x, alpha)
        if name == "hardsigmoid":
            return cv.op("hard_sigmoid", x, alpha=alpha, beta=beta)
        if name == "affine":
            return cv.op("linear", x, alpha, beta)
        # scaledtanh: alpha * tanh(beta * x)
        return cv.op("linear", cv.op("tanh", cv.op("linear", x, beta, 0.0)), alpha, 0.0)


def _activations(cv: Converter, attrs, defaults: tuple[str, ...],
                 directions: int) -> list[list[_Activation]]:
    """Per direction the cell's activation functions; ``activation_alpha`` and
    ``activation_beta`` are consumed in order by the functions that take them
    (ONNX Runtime's reading), the others take their ONNX defaults."""
    names = list(attrs.get("activations", defaults * directions))
    if len(names) != len(defaults) * directions:
        raise cv.invalid(f"activations {names}: expected {len(defaults) * directions} "
                         f"({len(defaults)} per direction, {directions} direction(s))")
    alphas = [float(a) for a in attrs.get("activation_alpha", [])]
    betas = [float(b) for b in attrs.get("activation_beta", [])]
    chosen = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise cv.unsupported(f"activation {name!r} (jitnn's recurrent cells take "
                                 "Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid, Elu, Softsign, "
                                 "Softplus, Affine, ScaledTanh)")
        takes_alpha, takes_beta, alpha, beta = _ACTIVATIONS[key]
        if takes_alpha and alphas:
            alpha = alphas.pop(0)
        if takes_beta and betas:
            beta = betas.pop(0)
        chosen.append(_Activation(key, alpha, beta))
    per = len(defaults)
    return [chosen[d * per:(d + 1) * per] for d in range(directions)]


def _float_const(cv: Converter, value, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """A load-time input as a float32 array of ``shape`` (refused otherwise)."""
    array = need_const(cv, value, what).array
    if array.dtype.kind != "f":
        raise cv.unsupported(f"{what} is {array.dtype}: jitnn's recurrent cells compute in "
                             "float32")
    if array.shape != shape:
        raise cv.invalid(f"{what} has shape {array.shape}, expected {shape}")
    return array.astype(np.float32)


def _state(cv: Converter, value, what: str, layout: int, directions: int, batch: int,
           hidden: int) -> list:
    """An initial state (``(D, B, H)``, layout 1 ``(B, D, H)``) as one ``(B, H)``
    value per direction; None when not given (zeros)."""
    if value is None:
        return [None] * directions
    expected = (batch, directions, hidden) if layout else (directions, batch, hidden)
    if shape_of(value) != expected:
        raise cv.invalid(f"{what} has shape {shape_of(value)}, expected {expected}")
    if isinstance(value, Const):
        array = value.array.astype(np.float32)
        parts = [array[:, d] if layout else array[d] for d in range(directions)]
        return [cv.operand(Const(np.ascontiguousarray(p))) for p in parts]
    operand = cv.operand(value)
    if operand.dtype != np.float32:
        raise cv.unsupported(f"{what} is {np.dtype(operand.dtype)}: jitnn's recurrent cells "
                             "compute in float32")
    parts = []
    for d in range(directions):
        starts = [0, d, 0] if layout else [d, 0, 0]
        sizes = [batch, 1, hidden] if layout else [1, batch, hidden]
        part = cv.op("slice", operand, starts, sizes) if directions > 1 else operand
        parts.append(cv.op("reshape", part, (batch, hidden)))
    return parts


def _lengths(cv: Converter, value, steps: int, batch: int) -> np.ndarray | None:
    """``sequence_lens`` as load-time ints, None when every sequence is full."""
    if value is None:
        return None
    lengths = need_const(cv, value, "sequence_lens").array
    if lengths.shape != (batch,) or lengths.dtype.kind not in "iu":
        raise cv.invalid(f"sequence_lens has shape {lengths.shape} and type {lengths.dtype}, "
                         f"expected ({batch},) int32")
    lengths = lengths.astype(np.int64)
    if np.any((lengths < 0) | (lengths > steps)):
        raise cv.invalid(f"sequence_lens {lengths.tolist()} must lie in [0, {steps}] (the "
                         "sequence's length)")
    return None if np.all(lengths == steps) else lengths


class _Cell:
    """What the steps of one direction share."""

    def __init__(self, cv: Converter, kind: str, hidden: int, batch: int, clip: float | None,
                 acts: list[_Activation], weights: dict):
        self.cv, self.kind, self.hidden, self.batch = cv, kind, hidden, batch
        self.clip, self.acts = clip, acts
        self.weights = weights        # R^T (GRU: R_zr^T, R_h^T, Rb_h), P, the options
        self._zeros = None

    def slice(self, x: Operand, start: int, size: int) -> Operand:
        """Columns ``[start, start + size)`` of a ``(B, n)`` value."""
        if start == 0 and size == x.shape[1]:
            return x
        return self.cv.op("slice", x, [0, start], [self.batch, size])

    def clipped(self, x: Operand) -> Operand:
        return x if self.clip is None else self.cv.op("clamp", x, -self.clip, self.clip)

    def zeros(self) -> Operand:
        if self._zeros is None:
            self._zeros = self.cv.operand(Const(np.zeros((self.batch, self.hidden), np.float32)))
        return self._zeros

    def product(self, h: Operand | None, weight: Operand, addend) -> Operand | None:
        """``h @ weight + addend`` (one gemm); ``addend`` alone without ``h``."""
        if h is None:
            return addend
        return self.cv.op("gemm", h, weight, addend)


def _lstm_step(cell: _Cell, x_at, h, c):
    """One LSTM step: ``(h, c)``; ``x_at(start, size)``: the step's projection columns."""
    cv, H, weights = cell.cv, cell.hidden, cell.weights
    peepholes = weights.get("P")
    f_act, g_act, h_act = cell.acts
    gates = cell.product(h, weights["R"], x_at(0, 4 * H))
    if peepholes is None:
        gates = cell.clipped(gates)
        pre = [cell.slice(gates, k * H, H) for k in range(4)]
    else:
        # clip after the peephole terms: they are part of the activations' input
        pre = [cell.slice(gates, k * H, H) for k in range(4)]
        if c is not None:
            pre[0] = cv.op("add", pre[0], cv.op("mul", c, peepholes[0]))
            pre[2] = cv.op("add", pre[2], cv.op("mul", c, peepholes[2]))
        pre = [p if k == 1 else cell.clipped(p) for k, p in enumerate(pre)]
    i_pre, o_pre, f_pre, c_pre = pre
    i = f_act(cv, i_pre)
    candidate = cv.op("mul", i, g_act(cv, c_pre))
    if c is None:
        c_new = candidate
    else:
        f = cv.op("sub", 1.0, i) if weights["input_forget"] else f_act(cv, f_pre)
        c_new = cv.op("add", cv.op("mul", f, c), candidate)
    if peepholes is not None:
        o_pre = cell.clipped(cv.op("add", o_pre, cv.op("mul", c_new, peepholes[1])))
    o = f_act(cv, o_pre)
    return cv.op("mul", o, h_act(cv, c_new)), c_new


def _gru_step(cell: _Cell, x_at, h):
    """One GRU step: h."""
    cv, H, weights = cell.cv, cell.hidden, cell.weights
    f_act, g_act = cell.acts
    x_zr, x_h = x_at(0, 2 * H), x_at(2 * H, H)
    zr = cell.clipped(cell.product(h, weights["R_zr"], x_zr))
    z = f_act(cv, cell.slice(zr, 0, H))
    r = f_act(cv, cell.slice(zr, H, H))
    if weights["linear_before_reset"]:
        recurrent = weights["Rb_h"] if h is None else cv.op("gemm", h, weights["R_h"],
                                                            weights["Rb_h"])
        h_pre = cv.op("add", x_h, cv.op("mul", r, recurrent))
    else:
        h_pre = x_h if h is None else cv.op("gemm", cv.op("mul", r, h), weights["R_h"], x_h)
    candidate = g_act(cv, cell.clipped(h_pre))
    kept = cv.op("sub", 1.0, z)
    h_new = cv.op("mul", kept, candidate)
    if h is not None:
        h_new = cv.op("add", h_new, cv.op("mul", z, h))
    return h_new


def _rnn_step(cell: _Cell, x_at, h):
    """One RNN step: h."""
    product = cell.product(h, cell.weights["R"], x_at(0, cell.hidden))
    return cell.acts[0](cell.cv, cell.clipped(product))


def _reverse_order(lengths: np.ndarray, steps: int, batch: int) -> np.ndarray:
    """For the reverse direction with sequences of their own lengths: at step
    ``s`` batch entry ``b`` reads time ``lengths[b] - 1 - s`` (or ``s`` past
    its length, a masked step). ``order[s, b]``: that time."""
    s = np.arange(steps)[:, None]
    return np.where(s < lengths[None, :], lengths[None, :] - 1 - s, s)


def _hidden_size(cv: Converter, attrs, w_shape: tuple[int, ...], gates: int, directions: int,
                 size: int) -> int:
    """H from W's shape ``(D, gates * H, I)``, checked against ``hidden_size``."""
    hidden = w_shape[1] // gates if len(w_shape) == 3 and w_shape[1] % gates == 0 else 0
    given = int(attrs.get("hidden_size", hidden))
    if hidden < 1 or given != hidden:
        wanted = f"{gates} * hidden_size = {gates * given}" if "hidden_size" in attrs \
            else f"{gates} * hidden_size"
        raise cv.invalid(f"W has shape {w_shape}, expected ({directions}, {wanted}, {size})")
    return hidden


def op_recurrent(cv: Converter, inputs, attrs, outputs: int = 1):
    """ONNX LSTM, GRU, RNN (see the module docstring)."""
    kind = cv.node.op_type
    gates, defaults = _KINDS[kind]
    inputs = list(inputs) + [None] * (8 - len(inputs))
    x, w, r, bias, sequence_lens, initial_h = inputs[:6]
    initial_c, peephole = (inputs[6], inputs[7]) if kind == "LSTM" else (None, None)
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise cv.invalid(f"layout {layout}: 0 (sequence first) or 1 (batch first)")
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise cv.invalid(f"direction {direction!r}: forward, reverse or bidirectional")
    directions = 2 if direction == "bidirectional" else 1
    if len(shape_of(x)) != 3:
        raise cv.invalid(f"X has shape {shape_of(x)}, expected (seq_length, batch_size, "
                         "input_size)" + (" (layout 1: batch first)" if layout else ""))
    xo = cv.operand(x)
    if xo.dtype != np.float32:
        raise cv.unsupported(f"X is {np.dtype(xo.dtype)}: jitnn's recurrent cells compute in "
                             "float32")
    steps, batch, size = shape_of(x)
    if layout:
        steps, batch = batch, steps
    hidden = _hidden_size(cv, attrs, shape_of(need_const(cv, w, "W (the input weights)")),
                          gates, directions, size)
    width = gates * hidden
    w_all = _float_const(cv, w, "W (the input weights)", (directions, width, size))
    r_all = _float_const(cv, r, "R (the recurrence weights)", (directions, width, hidden))
    b_all = np.zeros((directions, 2 * width), np.float32) if bias is None else \
        _float_const(cv, bias, "B (the biases)", (directions, 2 * width))
    p_all = None if peephole is None else \
        _float_const(cv, peephole, "P (the peepholes)", (directions, 3 * hidden))
    clip = None if attrs.get("clip") is None else float(attrs["clip"])
    acts = _activations(cv, attrs, defaults, directions)
    lengths = _lengths(cv, sequence_lens, steps, batch)
    options = {"input_forget": int(attrs.get("input_forget", 0)) if kind == "LSTM" else 0,
               "linear_before_reset": int(attrs.get("linear_before_reset", 0))
               if kind == "GRU" else 0}
    for name, value in options.items():
        if value not in (0, 1):
            raise cv.invalid(f"{name} {value}: 0 or 1")
    h_states = _state(cv, initial_h, "initial_h", layout, directions, batch, hidden)
    c_states = _state(cv, initial_c, "initial_c", layout, directions, batch, hidden)

    # the input projection of every step and direction, the biases added once
    projection_bias = b_all[:, :width] + b_all[:, width:]
    if options["linear_before_reset"]:      # Rbh is added inside the reset gate's product
        projection_bias[:, 2 * hidden:] = b_all[:, 2 * hidden:width]
    w_t = np.concatenate([w_all[d].T for d in range(directions)], axis=1)
    projected = cv.op("gemm", cv.op("reshape", xo, (steps * batch, size)),
                      cv.operand(Const(np.ascontiguousarray(w_t))),
                      cv.operand(Const(projection_bias.reshape(-1))))
    wanted = [bool(name) for name in cv.node.output] + [False] * 3
    y_parts, last_h, last_c = [], [], []
    for d in range(directions):
        weights = dict(options)
        r_t = r_all[d].T
        if kind == "GRU":
            weights["R_zr"] = cv.operand(Const(np.ascontiguousarray(r_t[:, :2 * hidden])))
            weights["R_h"] = cv.operand(Const(np.ascontiguousarray(r_t[:, 2 * hidden:])))
            weights["Rb_h"] = cv.operand(Const(b_all[d, width + 2 * hidden:].copy()))
        else:
            weights["R"] = cv.operand(Const(np.ascontiguousarray(r_t)))
        if p_all is not None:
            weights["P"] = [cv.operand(Const(p_all[d, k * hidden:(k + 1) * hidden].copy()))
                            for k in range(3)]
        cell = _Cell(cv, kind, hidden, batch, clip, acts[d], weights)
        reverse = direction == "reverse" or d == 1
        outs, order, h, c = _run_direction(cell, projected, d * width, steps, layout, reverse,
                                           lengths, h_states[d], c_states[d])
        if wanted[0]:
            y_parts.append(_sequence(cv, outs, steps, batch, hidden, layout, reverse, order))
        last_h.append(cell.zeros() if h is None else h)
        last_c.append(cell.zeros() if c is None else c)
    results: list = [None] * (3 if kind == "LSTM" else 2)
    if wanted[0]:
        results[0] = y_parts[0] if directions == 1 else \
            cv.op("concat", y_parts, 2 if layout else 1)
    if wanted[1]:
        results[1] = _final(cv, last_h, batch, hidden, layout)
    if kind == "LSTM" and wanted[2]:
        results[2] = _final(cv, last_c, batch, hidden, layout)
    return results


def _run_direction(cell: _Cell, projected: Operand, column: int, steps: int, layout: int,
                   reverse: bool, lengths: np.ndarray | None, h, c):
    """The steps of one direction: ``(outputs in step order, the reverse
    order of variable lengths or None, final h, final c)``."""
    cv, batch = cell.cv, cell.batch
    # the projection's rows: time-major (layout 0: t * B + b) or batch-major
    # (layout 1: b * T + t); a step's (B, gates * H) block is one slice
    source, order = projected, None
    row_step, first_row = (steps, 1) if layout else (1, batch)
    if reverse and lengths is not None:
        # each sequence from its own last step: the rows gathered in step order once
        order = _reverse_order(lengths, steps, batch)
        entries = np.arange(batch)[None, :]
        index = entries * steps + order if layout else order * batch + entries
        source = cv.op("gather", projected, index.reshape(-1).astype(np.int64), 0)
        row_step, first_row = 1, batch
    outs = []
    for s in range(steps):
        t = steps - 1 - s if reverse and order is None else s

        def x_at(start: int, size: int, row: int = t * first_row) -> Operand:
            return cv.op("slice", source, [row, column + start],
                         [(batch - 1) * row_step + 1, size], strides=[row_step, 1])
        if cell.kind == "LSTM":
            h_new, c_new = _lstm_step(cell, x_at, h, c)
        elif cell.kind == "GRU":
            h_new, c_new = _gru_step(cell, x_at, h), None
        else:
            h_new, c_new = _rnn_step(cell, x_at, h), None
        valid = None if lengths is None else (s < lengths)
        if valid is None or valid.all():
            h, c = h_new, c_new
            outs.append(h_new)
            continue
        # past a sequence's end: its state kept, zeros written
        mask = cv.operand(Const(valid[:, None]))
        h = cv.op("where", mask, h_new, cell.zeros() if h is None else h)
        if c_new is not None:
            c = cv.op("where", mask, c_new, cell.zeros() if c is None else c)
        outs.append(cv.op("where", mask, h_new, cell.zeros()))
    if lengths is not None and not lengths.all():
        # an empty sequence's final state is zeros, not its initial one (ONNX Runtime's)
        ran = cv.operand(Const((lengths > 0)[:, None]))
        h = None if h is None else cv.op("where", ran, h, cell.zeros())
        c = None if c is None else cv.op("where", ran, c, cell.zeros())
    return outs, order, h, c


def _sequence(cv: Converter, outs: list, steps: int, batch: int, hidden: int, layout: int,
              reverse: bool, order: np.ndarray | None) -> Operand:
    """One direction's Y: ``(T, 1, B, H)``, layout 1 ``(B, T, 1, H)``; ``outs``
    are the ``(B, H)`` outputs of its steps in the order they ran."""
    if reverse and order is None:
        outs = outs[::-1]               # step s ran time T - 1 - s
    if order is not None:
        # step order -> time order: time t of entry b ran at the step that read it
        stacked = cv.op("concat", [cv.op("reshape", o, (1, batch, hidden)) for o in outs], 0)
        step_of = np.empty((steps, batch), np.int64)
        for b in range(batch):
            step_of[order[:, b], b] = np.arange(steps)
        times = step_of.T if layout else step_of          # the output's row order
        entries = np.broadcast_to(np.arange(batch)[:, None] if layout
                                  else np.arange(batch)[None, :], times.shape)
        index = (times * batch + entries).reshape(-1)
        flat = cv.op("reshape", stacked, (steps * batch, hidden))
        gathered = cv.op("gather", flat, index, 0)
        return cv.op("reshape", gathered, (batch, steps, 1, hidden) if layout
                     else (steps, 1, batch, hidden))
    if layout:
        return cv.op("concat", [cv.op("reshape", o, (batch, 1, 1, hidden)) for o in outs], 1)
    return cv.op("concat", [cv.op("reshape", o, (1, 1, batch, hidden)) for o in outs], 0)


def _final(cv: Converter, states: list, batch: int, hidden: int, layout: int) -> Operand:
    """Y_h or Y_c: ``(D, B, H)``, layout 1 ``(B, D, H)``."""
    shape = (batch, 1, hidden) if layout else (1, batch, hidden)
    parts = [cv.op("reshape", s, shape) for s in states]
    return parts[0] if len(parts) == 1 else cv.op("concat", parts, 1 if layout else 0)


OPS = {"LSTM": op_recurrent, "GRU": op_recurrent, "RNN": op_recurrent}
MULTI_OUTPUT = set(OPS)
