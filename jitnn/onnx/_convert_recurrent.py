"""ONNX LSTM, GRU and RNN as jitnn matmuls and element-wise ops, one time step
after the other (the graph is unrolled over the sequence: shapes are static).

LSTM and GRU with the default activations, every sequence full and one
direction or two of H <= 128 run fused (:func:`_fused_cell`): the input
projection as below, then per step the recurrent ``gemm`` (two directions:
one, on a block-diagonal ``R^T`` of their state side by side) and one
``lstm_cell`` / ``gru_cell`` launch (jitnn/ops/recurrent.py) that reads the
step's projection rows by index and does the gates and the state update of
both directions (GRU with ``linear_before_reset`` 0: ``gemm``,
``gru_reset``, ``gemm``, ``gru_cell``). Load-time initial states of zeros are
no state: the first step has no product. Everything else runs as follows.

The weights are load-time constants (every exporter writes them as
initializers), arranged once at load time:

1. the input projection of every time step and direction is ONE ``gemm``:
   ``(T * B, I) @ (I, D * gates * H)`` with the biases ``Wb + Rb`` summed
   into its bias (GRU with ``linear_before_reset`` keeps its ``Rbh`` apart);
2. per step, the recurrent product ``h @ R^T`` is a ``gemm`` whose addend is
   the step's slice of that projection (the product starts from nothing on a
   step without a previous state: the first one without ``initial_h``);
   both directions of a bidirectional cell run together, as a batched
   ``matmul`` of the ``(2, B, H)`` state, the projection gathered once into
   step order (the reverse direction's rows reversed);
3. the gates are slices of it (two directions: of the product and of the
   step's inputs, added in the chains), then the activations (one pass for
   gates side by side with one function: LSTM's i, o, f, GRU's z, r) and
   the state updates, which the scheduler runs as element-wise chains.

Gate orders are ONNX's: LSTM ``i, o, f, c``, GRU ``z, r, h``. ``clip`` clamps
the input of the gate activations (not the cell state before ``h``), as ONNX
Runtime does. ``sequence_lens`` known at load time: steps past a sequence's
length keep its state and write zeros (masks made at load time), and an
empty sequence's Y_h and Y_c are zeros (ONNX Runtime's reading); the reverse
direction starts each sequence at its own last step (its projection rows
gathered once in that order, its outputs gathered back into time order).
"""

from __future__ import annotations

import numpy as np

from ..graph import Operand
from ._common import Const, Converter, need_const, refused_dtype, shape_of

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
                 directions: int) -> list["_Slot"]:
    """The cell's activation functions, one slot per place (f, g, h) holding
    each direction's; ``activation_alpha`` and ``activation_beta`` are
    consumed in order by the functions that take them (ONNX Runtime's
    reading), the others take their ONNX defaults."""
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
    return [_Slot(chosen[k::per]) for k in range(per)]


class _Slot:
    """One place's activation (f, g or h) of every direction: one op when the
    directions agree, else one per direction on its part of the leading axis."""

    def __init__(self, per_direction: list[_Activation]):
        self.per_direction = per_direction
        first = per_direction[0]
        self.shared = all((a.name, a.alpha, a.beta) == (first.name, first.alpha, first.beta)
                          for a in per_direction)

    def __call__(self, cv: Converter, x: Operand) -> Operand:
        if self.shared:
            return self.per_direction[0](cv, x)
        rest = list(x.shape[1:])
        parts = [act(cv, cv.op("slice", x, [d] + [0] * len(rest), [1] + rest))
                 for d, act in enumerate(self.per_direction)]
        return cv.op("concat", parts, 0)


def _float_const(cv: Converter, value, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """A load-time input as a float32 array of ``shape`` (refused otherwise)."""
    array = need_const(cv, value, what).array
    if array.dtype != np.float32:
        raise cv.unsupported(f"{what} is {refused_dtype(array.dtype)}")
    if array.shape != shape:
        raise cv.invalid(f"{what} has shape {array.shape}, expected {shape}")
    return array


def _state(cv: Converter, value, what: str, layout: int, directions: int, batch: int,
           hidden: int):
    """An initial state (``(D, B, H)``, layout 1 ``(B, D, H)``) as the cell
    holds its state: ``(B, H)`` for one direction, ``(D, B, H)`` for two;
    None when not given (zeros)."""
    if value is None:
        return None
    expected = (batch, directions, hidden) if layout else (directions, batch, hidden)
    if shape_of(value) != expected:
        raise cv.invalid(f"{what} has shape {shape_of(value)}, expected {expected}")
    held = (batch, hidden) if directions == 1 else (directions, batch, hidden)
    if isinstance(value, Const):
        array = value.array
        if array.dtype != np.float32:
            raise cv.unsupported(f"{what} is {refused_dtype(array.dtype)}")
        array = array.transpose(1, 0, 2) if layout else array
        return cv.operand(Const(np.ascontiguousarray(array).reshape(held)))
    operand = cv.operand(value)
    if operand.dtype != np.float32:
        raise cv.unsupported(f"{what} is {np.dtype(operand.dtype)}: jitnn's recurrent cells "
                             "compute in float32")
    if layout and directions > 1:
        return cv.op("transpose", operand, [1, 0, 2])
    return operand if operand.shape == held else cv.op("reshape", operand, held)


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
    """What the steps share: the weights (load-time constants, arranged for
    the state's shape: ``(B, H)`` for one direction, ``(D, B, H)`` for two,
    whose products are batched matmuls), the activations and the clip."""

    def __init__(self, cv: Converter, kind: str, hidden: int, batch: int, directions: int,
                 clip: float | None, acts: list[_Slot], weights: dict):
        self.cv, self.kind, self.hidden, self.batch = cv, kind, hidden, batch
        self.directions, self.clip, self.acts = directions, clip, acts
        self.weights = weights        # R^T (GRU: R_zr^T, R_h^T, Rb_h), P, the options
        self._zeros = None

    def slice(self, x: Operand, start: int, size: int) -> Operand:
        """Columns ``[start, start + size)`` (the last axis) of a gates value."""
        lead = list(x.shape[:-1])
        if start == 0 and size == x.shape[-1]:
            return x
        return self.cv.op("slice", x, [0] * len(lead) + [start], lead + [size])

    def clipped(self, x: Operand) -> Operand:
        return x if self.clip is None else self.cv.op("clamp", x, -self.clip, self.clip)

    def zeros(self) -> Operand:
        if self._zeros is None:
            shape = (self.batch, self.hidden) if self.directions == 1 else \
                (self.directions, self.batch, self.hidden)
            self._zeros = self.cv.operand(Const(np.zeros(shape, np.float32)))
        return self._zeros

    def gates(self, h: Operand | None, weight: Operand, x_at):
        """``part(start, size)``: columns ``[start, start + size)`` of ``h @
        weight + x``. One direction: slices of one gemm with ``x`` as its
        addend. Two: the batched matmul's epilogue takes no addend, so each
        part adds its ``x`` columns, an add that joins the element-wise chain
        after it instead of a pass of its own over all the gates."""
        if self.directions == 1 or h is None:
            gates = self.product(h, weight, x_at(0, weight.shape[-1]))
            return lambda start, size: self.slice(gates, start, size)
        product = self.cv.op("matmul", h, weight)
        return lambda start, size: self.cv.op("add", self.slice(product, start, size),
                                              x_at(start, size))

    def product(self, h: Operand | None, weight: Operand, addend) -> Operand | None:
        """``h @ weight + addend`` (one gemm for one direction, a batched
        matmul and an add for two); ``addend`` alone without ``h``."""
        if h is None:
            return addend
        if self.directions == 1:
            return self.cv.op("gemm", h, weight, addend)
        return self.cv.op("add", self.cv.op("matmul", h, weight), addend)


def _lstm_step(cell: _Cell, x_at, h, c):
    """One LSTM step: ``(h, c)``; ``x_at(start, size)``: the step's projection columns."""
    cv, H, weights = cell.cv, cell.hidden, cell.weights
    peepholes = weights.get("P")
    f_act, g_act, h_act = cell.acts
    part = cell.gates(h, weights["R"], x_at)
    if peepholes is None:
        # i, o and f side by side (ONNX's order): one activation pass for the three
        i_o_f = f_act(cv, cell.clipped(part(0, 3 * H)))
        i, o, f = (cell.slice(i_o_f, k * H, H) for k in range(3))
        c_pre = cell.clipped(part(3 * H, H))
    else:
        # clip after the peephole terms: they are part of the activations' input
        i_pre, o_pre, f_pre, c_pre = (part(k * H, H) for k in range(4))
        if c is not None:
            i_pre = cv.op("add", i_pre, cv.op("mul", c, peepholes[0]))
            f_pre = cv.op("add", f_pre, cv.op("mul", c, peepholes[2]))
        c_pre = cell.clipped(c_pre)
        i, f = f_act(cv, cell.clipped(i_pre)), f_act(cv, cell.clipped(f_pre))
    candidate = cv.op("mul", g_act(cv, c_pre), i)
    if c is None:
        c_new = candidate
    else:
        forget = cv.op("sub", 1.0, i) if weights["input_forget"] else f
        c_new = cv.op("add", cv.op("mul", forget, c), candidate)
    if peepholes is not None:
        o = f_act(cv, cell.clipped(cv.op("add", o_pre, cv.op("mul", c_new, peepholes[1]))))
    return cv.op("mul", h_act(cv, c_new), o), c_new


def _gru_step(cell: _Cell, x_at, h):
    """One GRU step: h."""
    cv, H, weights = cell.cv, cell.hidden, cell.weights
    f_act, g_act = cell.acts
    x_zr, x_h = x_at(0, 2 * H), x_at(2 * H, H)
    # z and r side by side: one activation (in the product's epilogue when it can be)
    zr = f_act(cv, cell.clipped(cell.product(h, weights["R_zr"], x_zr)))
    z, r = cell.slice(zr, 0, H), cell.slice(zr, H, H)
    if weights["linear_before_reset"]:
        recurrent = weights["Rb_h"] if h is None else \
            cell.product(h, weights["R_h"], weights["Rb_h"])
        h_pre = cv.op("add", x_h, cv.op("mul", r, recurrent))
    else:
        h_pre = x_h if h is None else cell.product(cv.op("mul", r, h), weights["R_h"], x_h)
    candidate = g_act(cv, cell.clipped(h_pre))
    if h is None:
        return cv.op("mul", cv.op("sub", 1.0, z), candidate)
    # (1 - z) * candidate + z * h as one chain: candidate + z * (h - candidate)
    return cv.op("add", cv.op("mul", cv.op("sub", h, candidate), z), candidate)


def _rnn_step(cell: _Cell, x_at, h):
    """One RNN step: h."""
    product = cell.product(h, cell.weights["R"], x_at(0, cell.hidden))
    return cell.acts[0](cell.cv, cell.clipped(product))


def _step_times(direction: str, lengths: np.ndarray | None, steps: int,
                batch: int) -> np.ndarray:
    """``times[d, s, b]``: the time step that direction ``d`` reads at step
    ``s`` for batch entry ``b``. The reverse direction starts each sequence at
    its own last step; past a sequence's end (a masked step) it reads ``s``."""
    s = np.broadcast_to(np.arange(steps)[:, None], (steps, batch))
    length = np.full(batch, steps) if lengths is None else lengths
    backward = np.where(s < length[None, :], length[None, :] - 1 - s, s)
    return np.stack({"forward": [s], "reverse": [backward],
                     "bidirectional": [s, backward]}[direction])


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


def _per_direction(cv: Converter, array: np.ndarray, directions: int) -> Operand:
    """A ``(D, n)`` constant broadcast against the state: ``(n,)`` or ``(D, 1, n)``."""
    shape = (array.shape[1],) if directions == 1 else (directions, 1, array.shape[1])
    return cv.operand(Const(np.ascontiguousarray(array).reshape(shape)))


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
    h = _state(cv, initial_h, "initial_h", layout, directions, batch, hidden)
    c = _state(cv, initial_c, "initial_c", layout, directions, batch, hidden)
    if _fused(kind, acts, lengths, directions, hidden):
        return _fused_cell(cv, kind, xo, w_all, r_all, b_all, p_all, (h, c),
                           (initial_h, initial_c), clip, options, steps, batch, size, hidden,
                           directions, direction, layout)

    weights = dict(options)
    r_t = r_all.transpose(0, 2, 1)[0] if directions == 1 else r_all.transpose(0, 2, 1)
    if kind == "GRU":
        weights["R_zr"] = cv.operand(Const(np.ascontiguousarray(r_t[..., :2 * hidden])))
        weights["R_h"] = cv.operand(Const(np.ascontiguousarray(r_t[..., 2 * hidden:])))
        weights["Rb_h"] = _per_direction(cv, b_all[:, width + 2 * hidden:], directions)
    else:
        weights["R"] = cv.operand(Const(np.ascontiguousarray(r_t)))
    if p_all is not None:
        weights["P"] = [_per_direction(cv, p_all[:, k * hidden:(k + 1) * hidden], directions)
                        for k in range(3)]
    cell = _Cell(cv, kind, hidden, batch, directions, clip, acts, weights)

    # the input projection of every step and direction, the biases added once
    projection_bias = b_all[:, :width] + b_all[:, width:]
    if options["linear_before_reset"]:      # Rbh is added inside the reset gate's product
        projection_bias[:, 2 * hidden:] = b_all[:, 2 * hidden:width]
    w_t = np.concatenate([w_all[d].T for d in range(directions)], axis=1)
    projected = cv.op("gemm", cv.op("reshape", xo, (steps * batch, size)),
                      cv.operand(Const(np.ascontiguousarray(w_t))),
                      cv.operand(Const(projection_bias.reshape(-1))))
    times = _step_times(direction, lengths, steps, batch)
    x_at = _step_inputs(cell, projected, times, layout, direction == "reverse",
                        lengths is not None)
    outs = []
    for s in range(steps):
        if kind == "LSTM":
            h_new, c_new = _lstm_step(cell, lambda start, n: x_at(s, start, n), h, c)
        elif kind == "GRU":
            h_new, c_new = _gru_step(cell, lambda start, n: x_at(s, start, n), h), None
        else:
            h_new, c_new = _rnn_step(cell, lambda start, n: x_at(s, start, n), h), None
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
    wanted = [bool(name) for name in cv.node.output] + [False] * 3
    results: list = [None] * (3 if kind == "LSTM" else 2)
    if wanted[0]:
        results[0] = _sequence(cell, outs, times, layout)
    for k, state in ((1, h), (2, c)):
        if k < len(results) and wanted[k]:
            results[k] = _final(cell, cell.zeros() if state is None else state, layout)
    return results


#: the largest H whose two directions share one product on a block-diagonal R
#: (twice the arithmetic of a product per direction, which is a launch more and
#: a batched matmul that does not replay as one call)
_BLOCK_DIAGONAL_MAX = 128


def _fused(kind: str, acts: list[_Slot], lengths: np.ndarray | None, directions: int,
           hidden: int) -> bool:
    """Whether the steps run as their products and one fused cell each
    (jitnn/ops/recurrent.py): LSTM and GRU with the default activations, no
    sequence shorter than the input, one direction or two of H <= 128."""
    if kind == "RNN" or lengths is not None \
            or (directions == 2 and hidden > _BLOCK_DIAGONAL_MAX):
        return False
    defaults = [name.lower() for name in _KINDS[kind][1]]
    return all(act.name == name for slot, name in zip(acts, defaults)
               for act in slot.per_direction)


def _block_diagonal(blocks: list[np.ndarray]) -> np.ndarray:
    """The blocks on the diagonal of one matrix, zeros elsewhere."""
    rows, cols = sum(b.shape[0] for b in blocks), sum(b.shape[1] for b in blocks)
    out = np.zeros((rows, cols), np.float32)
    r = c = 0
    for block in blocks:
        out[r:r + block.shape[0], c:c + block.shape[1]] = block
        r, c = r + block.shape[0], c + block.shape[1]
    return out


def _fused_cell(cv: Converter, kind: str, xo: Operand, w_all: np.ndarray, r_all: np.ndarray,
                b_all: np.ndarray, p_all: np.ndarray | None, states: tuple, given: tuple,
                clip: float | None,
                options: dict, steps: int, batch: int, size: int, hidden: int,
                directions: int, direction: str, layout: int) -> list:
    """The steps as ``gemm`` and ``lstm_cell`` (GRU: ``gru_cell``, with
    ``linear_before_reset`` 0 a ``gru_reset`` and a second ``gemm`` before it):
    the state is ``(2, B, D * H)`` (``h`` then ``c``; GRU ``(B, D * H)``), both
    directions of an entry side by side, their products one ``gemm`` on a
    block-diagonal ``R^T``; the cell reads its rows of the input projection
    by index. ``states``: the initial ``h`` and ``c`` as :func:`_state` gives
    them, ``given``: as the node has them (load-time ones are arranged now,
    and all zeros are no state: the first step has no product)."""
    h, c = states
    gates = 4 if kind == "LSTM" else 3
    width, H, D = gates * hidden, hidden, directions
    lbr = bool(options["linear_before_reset"])
    bias = b_all[:, :width] + b_all[:, width:]
    if lbr:                             # Rb_h is added inside the reset gate's product
        bias[:, 2 * H:] = b_all[:, 2 * H:width]
    w_t = np.concatenate([w_all[d].T for d in range(D)], axis=1)
    projected = cv.op("gemm", cv.op("reshape", xo, (steps * batch, size)),
                      cv.operand(Const(np.ascontiguousarray(w_t))),
                      cv.operand(Const(np.ascontiguousarray(bias.reshape(-1)))))

    def recurrent(first: int, count: int) -> Operand:
        """R^T of gates ``first`` to ``first + count``, block-diagonal over directions."""
        blocks = [r_all[d, first * H:(first + count) * H].T for d in range(D)]
        return cv.operand(Const(_block_diagonal(blocks)))

    reverse = direction == "reverse"
    common = {"entry_rows": steps if layout else 1, "directions": D, "clip": clip}

    def first_rows(s: int) -> list[int]:
        """The projection's row of entry 0 for each direction at step ``s``."""
        times = [steps - 1 - s if reverse else s] + [steps - 1 - s] * (D - 1)
        return [t if layout else t * batch for t in times]

    def joined(state):          # (B, H) or (D, B, H) -> (B, D * H)
        if state is None:
            return cv.operand(Const(np.zeros((batch, D * H), np.float32)))
        return state if D == 1 else \
            cv.op("reshape", cv.op("transpose", state, [1, 0, 2]), (batch, D * H))

    def constant(value) -> np.ndarray | None:
        """A load-time initial state as ``(B, D * H)`` (zeros when absent), None
        when it comes at run time."""
        if value is None:
            return np.zeros((batch, D * H), np.float32)
        if not isinstance(value, Const):
            return None
        array = value.array if layout else value.array.transpose(1, 0, 2)
        return np.ascontiguousarray(array, np.float32).reshape(batch, D * H)

    def initial(arrays: list, computed):
        """The first state: None for zeros, a constant, else ``computed()``."""
        if any(a is None for a in arrays):
            return computed()
        if not any(a.any() for a in arrays):
            return None
        return cv.operand(Const(np.ascontiguousarray(np.stack(arrays) if len(arrays) > 1
                                                     else arrays[0])))

    states = []
    if kind == "LSTM":
        state = initial([constant(v) for v in given], lambda: cv.op(
            "concat", [cv.op("reshape", joined(v), (1, batch, D * H)) for v in (h, c)], 0))
        weight = recurrent(0, 4)
        peepholes = None if p_all is None else cv.operand(Const(np.ascontiguousarray(p_all)))
        for s in range(steps):
            product = None if state is None else \
                cv.op("gemm", cv.op("lstm_hidden", state), weight)
            state = cv.op("lstm_cell", projected, product, state, peepholes,
                          first_row=first_rows(s), batch=batch,
                          input_forget=bool(options["input_forget"]), **common)
            states.append(state)
    else:
        state = initial([constant(given[0])], lambda: joined(h))
        # Rb_h (linear_before_reset 0: in the projection's bias)
        recurrent_bias = cv.operand(Const(np.ascontiguousarray(b_all[:, width + 2 * H:]))) \
            if lbr else None
        if lbr:
            weight = recurrent(0, 3)
        else:
            weight, weight_h = recurrent(0, 2), recurrent(2, 1)
        for s in range(steps):
            product = reset = None
            if state is not None:
                product = cv.op("gemm", state, weight)
                if not lbr:
                    scaled = cv.op("gru_reset", projected, product, state,
                                   first_row=first_rows(s), **common)
                    reset = cv.op("gemm", scaled, weight_h)
            state = cv.op("gru_cell", projected, product, state, reset, recurrent_bias,
                          first_row=first_rows(s), batch=batch, linear_before_reset=lbr,
                          **common)
            states.append(state)

    # a state's rows of H values: (part (LSTM: h, c), entry, direction)
    parts = 2 if kind == "LSTM" else 1
    d_index, b_index = np.arange(D)[:, None], np.arange(batch)[None, :]
    per_step = parts * batch * D
    wanted = [bool(name) for name in cv.node.output] + [False] * 3
    results: list = [None] * (3 if kind == "LSTM" else 2)
    if wanted[0]:
        t_index = np.arange(steps)[None, :, None]
        forward = (np.arange(D) == 0)[:, None, None] & (not reverse)
        step_of = np.where(forward, t_index, steps - 1 - t_index)            # (D, T, 1)
        rows = step_of * per_step + b_index[None] * D + d_index[:, :, None]   # (D, T, B)
        order = rows.transpose(2, 1, 0) if layout else rows.transpose(1, 0, 2)
        stacked = cv.op("concat", states, 0) if len(states) > 1 else states[0]
        results[0] = _state_rows(cv, stacked, order, H, order.shape + (H,))
    for k in range(1, len(results)):
        if wanted[k]:
            rows = (k - 1) * batch * D + b_index * D + d_index                  # (D, B)
            order = rows.T if layout else rows
            results[k] = _state_rows(cv, states[-1], order, H, order.shape + (H,))
    return results


def _state_rows(cv: Converter, source: Operand, rows: np.ndarray, hidden: int,
                shape: tuple[int, ...]) -> Operand:
    """Rows ``rows`` (of ``hidden`` values) of ``source`` as ``shape``: the
    whole of it reshaped, a slice of consecutive rows, else one gather."""
    flat = cv.op("reshape", source, (int(np.prod(source.shape)) // hidden, hidden))
    rows = rows.reshape(-1)
    if np.array_equal(rows, rows[0] + np.arange(rows.size)):
        if rows[0] != 0 or rows.size != flat.shape[0]:
            flat = cv.op("slice", flat, [int(rows[0]), 0], [rows.size, hidden])
    else:
        flat = cv.op("gather", flat, rows.astype(np.int64), 0)
    return cv.op("reshape", flat, shape)


def _step_inputs(cell: _Cell, projected: Operand, times: np.ndarray, layout: int,
                 reverse: bool, own_lengths: bool):
    """``x_at(s, start, size)``: columns ``[start, start + size)`` of the gates
    of step ``s``, shaped as the state (``(B, n)``, or ``(D, B, n)``).

    The projection's rows are time-major (layout 0: ``t * B + b``) or
    batch-major (layout 1: ``b * T + t``), each direction's gates side by
    side. One direction reads a step's rows with one (strided) slice; two
    directions, or the reverse one over sequences of their own lengths, read
    the projection gathered once in step order, ``(step, direction, entry)``."""
    cv, batch = cell.cv, cell.batch
    directions, steps = times.shape[0], times.shape[1]
    width = projected.shape[1] // directions
    if directions == 1 and not (reverse and own_lengths):
        row_step, first_row = (steps, 1) if layout else (1, batch)

        def x_at(s: int, start: int, size: int) -> Operand:
            t = steps - 1 - s if reverse else s
            return cv.op("slice", projected, [t * first_row, start],
                         [(batch - 1) * row_step + 1, size], strides=[row_step, 1])
        return x_at
    entries = np.arange(batch)[None, None, :]
    rows = entries * steps + times if layout else times * batch + entries      # (D, T, B)
    index = (rows * directions + np.arange(directions)[:, None, None]).transpose(1, 0, 2)
    source = cv.op("gather", cv.op("reshape", projected, (steps * batch * directions, width)),
                   index.reshape(-1).astype(np.int64), 0)
    if directions == 1:
        def x_at(s: int, start: int, size: int) -> Operand:
            return cv.op("slice", source, [s * batch, start], [batch, size])
        return x_at
    source = cv.op("reshape", source, (steps * directions, batch, width))

    def x_at(s: int, start: int, size: int) -> Operand:
        return cv.op("slice", source, [s * directions, 0, start], [directions, batch, size])
    return x_at


def _sequence(cell: _Cell, outs: list, times: np.ndarray, layout: int) -> Operand:
    """Y: ``(T, D, B, H)``, layout 1 ``(B, T, D, H)``, from the step outputs
    (``(B, H)`` or ``(D, B, H)``, in the order the steps ran): one concat,
    then one gather of the rows into time order, unless they are in it."""
    cv, batch, hidden = cell.cv, cell.batch, cell.hidden
    directions, steps = times.shape[0], times.shape[1]
    # rows (step, direction, entry): the states joined along their first axis
    stacked = cv.op("concat", outs, 0) if len(outs) > 1 else outs[0]
    # step_of[d, t, b]: the step at which direction d computed time t of entry b
    step_of = np.empty_like(times)
    d_index, s_index, b_index = np.indices(times.shape)
    step_of[d_index, times, b_index] = s_index
    rows = (step_of * directions + np.arange(directions)[:, None, None]) * batch \
        + np.arange(batch)[None, None, :]                  # (D, T, B)
    order = rows.transpose(2, 1, 0) if layout else rows.transpose(1, 0, 2)
    shape = (batch, steps, directions, hidden) if layout else (steps, directions, batch, hidden)
    flat = order.reshape(-1)
    if np.array_equal(flat, np.arange(flat.size)):
        return cv.op("reshape", stacked, shape)
    gathered = cv.op("gather", cv.op("reshape", stacked, (flat.size, hidden)),
                     flat.astype(np.int64), 0)
    return cv.op("reshape", gathered, shape)


def _final(cell: _Cell, state: Operand, layout: int) -> Operand:
    """Y_h or Y_c: ``(D, B, H)``, layout 1 ``(B, D, H)``, from the state."""
    cv, batch, hidden, directions = cell.cv, cell.batch, cell.hidden, cell.directions
    if directions == 1:
        return cv.op("reshape", state, (batch, 1, hidden) if layout else (1, batch, hidden))
    return cv.op("transpose", state, [1, 0, 2]) if layout else state


OPS = {"LSTM": op_recurrent, "GRU": op_recurrent, "RNN": op_recurrent}
MULTI_OUTPUT = set(OPS)
