"""One time step of an LSTM or GRU cell after its recurrent product: the
gate activations and the state update in one pass over the ``B x H`` state,
both directions of a bidirectional cell in the same call (ONNX's
operator formulas with the default activations: sigmoid for the gates, tanh
for the candidate and the output).

Buffers (float32, C-contiguous, flat; ``D`` directions, ``B`` batch entries,
``H`` hidden units; ONNX's gate orders, LSTM ``i, o, f, c``, GRU ``z, r, h``):

* ``x: (rows, D * G * H)``: the input projection of every time step (``G``
  gates; the biases in it). Direction ``d`` of entry ``b`` reads row
  ``first_row[d] + b * entry_rows``, its ``d``-th ``G * H`` columns: the
  step's rows are found by index, no slice of them is copied.
* ``product: (B, D * G * H)``: the recurrent product ``h @ R^T`` of the step
  (a block-diagonal ``R`` for two directions: direction ``d``'s gates in its
  ``d``-th ``G * H`` columns); absent (``has_state = 0``) on a step without a
  previous state, which then counts as zeros.
* LSTM ``state, out: (2, B, D * H)``: ``h`` then ``c``, direction ``d`` of
  entry ``b`` in columns ``d * H`` to ``d * H + H``: ``h`` is the first half,
  the next step's product reads it in place. ``peepholes: (D, 3 H)``
  (``i, o, f``), zeros when the cell has none.
* GRU ``state: (B, D * H)`` (``h``). :func:`gru_reset` writes ``r * h``
  (``out: (B, D * H)``) from a ``product: (B, D * 2 H)`` of ``z, r``, for
  ``linear_before_reset = 0``, whose candidate takes ``(r * h) @ R_h^T``:
  :func:`gru_cell` then reads that ``product`` again and the second product
  ``reset_product: (B, D * H)``. With ``linear_before_reset = 1`` the
  ``product`` is ``(B, D * 3 H)`` and ``recurrent_bias: (D, H)`` is ``Rb_h``,
  added to the candidate's product before ``r`` scales it.

``clip``: the activations' inputs clamped to ``[-clip, clip]`` (inf: none),
peephole terms included; ``input_forget``: ``f = 1 - i``. The sigmoid and
tanh are kernels/epilogue.py's vectorizable ones (numba has no vector math
library): each loop over ``H`` runs in vector registers. Serial: a step's
state is small, the launch and not the arithmetic is what a step costs.
"""

from __future__ import annotations

import numpy as np

from ._config import jit
from .epilogue import SIGMOID, TANH, activate

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)


@jit()
def _sigmoid(v, clip):
    return activate(min(max(v, -clip), clip), SIGMOID, _ZERO, _ZERO)


@jit()
def _tanh(v, clip):
    return activate(min(max(v, -clip), clip), TANH, _ZERO, _ZERO)


@jit()
def _offsets(first_row, entry_rows, d, b, G, D, product_gates, H):
    """Flat offsets of direction ``d`` of entry ``b``: its row of ``x`` (``G``
    gates of ``H``, ``D`` directions to a row), its row of a product of
    ``product_gates`` gates, its row of the ``(B, D * H)`` state."""
    dd, h = np.uint64(d), np.uint64(H)
    xrow = np.uint64(first_row[d] + b * entry_rows) * (np.uint64(D) * G) + dd * G
    prow = np.uint64(b) * np.uint64(D) * product_gates + dd * product_gates
    srow = np.uint64(b) * np.uint64(D) * h + dd * h
    return xrow, prow, srow


@jit(standalone=True)
def lstm_step(xf, first_row, entry_rows, product, state, peepholes, out, D, B, H, has_state,
              clip, input_forget):
    """One LSTM step (see the module docstring): ``out`` from ``x``'s rows,
    the ``product`` and the previous ``state``."""
    G = np.uint64(4 * H)
    half = np.uint64(B * D * H)                  # where c starts in a state
    h = np.uint64(H)
    for d in range(D):
        for b in range(B):
            xrow, prow, srow = _offsets(first_row, entry_rows, d, b, G, D, G, H)
            prow_p = np.uint64(d) * np.uint64(3 * H)
            for j in range(H):
                jj = np.uint64(j)
                i_pre = xf[xrow + jj]
                o_pre = xf[xrow + h + jj]
                f_pre = xf[xrow + h + h + jj]
                c_pre = xf[xrow + h + h + h + jj]
                c_prev = _ZERO
                if has_state:
                    i_pre += product[prow + jj]
                    o_pre += product[prow + h + jj]
                    f_pre += product[prow + h + h + jj]
                    c_pre += product[prow + h + h + h + jj]
                    c_prev = state[half + srow + jj]
                i_pre += peepholes[prow_p + jj] * c_prev
                f_pre += peepholes[prow_p + h + h + jj] * c_prev
                i = _sigmoid(i_pre, clip)
                f = _ONE - i if input_forget else _sigmoid(f_pre, clip)
                c = f * c_prev + i * _tanh(c_pre, clip)
                o = _sigmoid(o_pre + peepholes[prow_p + h + jj] * c, clip)
                out[half + srow + jj] = c
                out[srow + jj] = o * activate(c, TANH, _ZERO, _ZERO)


@jit(standalone=True)
def gru_reset(xf, first_row, entry_rows, product, state, out, D, B, H, clip):
    """``r * h`` of a GRU step (``linear_before_reset = 0``), into ``out``."""
    G = np.uint64(3 * H)
    h = np.uint64(H)
    for d in range(D):
        for b in range(B):
            xrow, prow, srow = _offsets(first_row, entry_rows, d, b, G, D, h + h, H)
            for j in range(H):
                jj = np.uint64(j)
                r = _sigmoid(xf[xrow + h + jj] + product[prow + h + jj], clip)
                out[srow + jj] = r * state[srow + jj]


@jit(standalone=True)
def gru_step(xf, first_row, entry_rows, product, reset_product, recurrent_bias, state, out, D,
             B, H, has_state, clip, linear_before_reset):
    """One GRU step (see the module docstring): ``out`` (the new ``h``)."""
    G = np.uint64(3 * H)
    pg = G if linear_before_reset else np.uint64(2 * H)    # the product's gates
    h = np.uint64(H)
    for d in range(D):
        dd = np.uint64(d)
        for b in range(B):
            xrow, prow, srow = _offsets(first_row, entry_rows, d, b, G, D, pg, H)
            for j in range(H):
                jj = np.uint64(j)
                z_pre = xf[xrow + jj]
                r_pre = xf[xrow + h + jj]
                n_pre = xf[xrow + h + h + jj]
                recurrent = recurrent_bias[dd * h + jj]
                h_prev = _ZERO
                if has_state:
                    z_pre += product[prow + jj]
                    r_pre += product[prow + h + jj]
                    h_prev = state[srow + jj]
                    if linear_before_reset:
                        recurrent += product[prow + h + h + jj]
                    else:
                        n_pre += reset_product[srow + jj]
                z = _sigmoid(z_pre, clip)
                if linear_before_reset:
                    n_pre += _sigmoid(r_pre, clip) * recurrent
                n = _tanh(n_pre, clip)
                out[srow + jj] = n + z * (h_prev - n)


def _check(op: str, **arrays) -> None:
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous:
            raise ValueError(f"{op}: {name} must be a C-contiguous float32 numpy array, got "
                             f"{getattr(a, 'dtype', type(a))} {getattr(a, 'shape', '')}")


def _rows(op: str, x: np.ndarray, first_row, entry_rows: int, D: int, B: int,
          width: int) -> np.ndarray:
    """``first_row`` as the kernel's int64 array, every row it leads to checked."""
    first = np.asarray(first_row, np.int64).reshape(-1)
    if x.ndim != 2 or x.shape[1] != D * width or first.shape != (D,):
        raise ValueError(f"{op}: x {x.shape} must be (rows, {D * width}) and first_row "
                         f"{first.tolist()} one row per direction ({D})")
    last = first + (B - 1) * entry_rows
    if B and (min(first.min(), last.min()) < 0 or max(first.max(), last.max()) >= x.shape[0]):
        raise ValueError(f"{op}: rows {first.tolist()} + b * {entry_rows} (b < {B}) are not "
                         f"all rows of x {x.shape}")
    return first


def _shape(op: str, name: str, a: np.ndarray | None, shape: tuple) -> None:
    if a is not None and a.shape != shape:
        raise ValueError(f"{op}: {name} {a.shape} must be {shape}")


def bind_lstm_step(x, first_row, entry_rows: int, product, state, peepholes, out,
                   directions: int, clip: float | None, input_forget: bool):
    """``(kernel, args)`` of one LSTM step on these arrays, checked once (a
    replayed plan's bound step). ``product`` and ``state`` both None on a
    step without a previous state."""
    op = "lstm_cell"
    D = int(directions)
    B, hw = out.shape[1], out.shape[2]
    H = hw // D
    _check(op, x=x, out=out, peepholes=peepholes,
           **({} if state is None else {"state": state, "product": product}))
    _shape(op, "out", out, (2, B, D * H))
    _shape(op, "state", state, (2, B, D * H))
    _shape(op, "product", product, (B, D * 4 * H))
    _shape(op, "peepholes", peepholes, (D, 3 * H))
    first = _rows(op, x, first_row, entry_rows, D, B, 4 * H)
    has_state = state is not None
    if (state is None) != (product is None):
        raise ValueError(f"{op}: product and state come together (or neither)")
    limit = np.float32(np.inf if clip is None else clip)
    empty = np.zeros(1, np.float32)
    return lstm_step, (x.reshape(-1), first, np.int64(entry_rows),
                       product.reshape(-1) if has_state else empty,
                       state.reshape(-1) if has_state else empty, peepholes.reshape(-1),
                       out.reshape(-1), D, B, H, has_state, limit, bool(input_forget))


def bind_gru_reset(x, first_row, entry_rows: int, product, state, out, directions: int,
                   clip: float | None):
    """``(kernel, args)`` of :func:`gru_reset` on these arrays, checked once."""
    op = "gru_cell"
    D = int(directions)
    B, hw = out.shape
    H = hw // D
    _check(op, x=x, product=product, state=state, out=out)
    _shape(op, "state", state, (B, D * H))
    _shape(op, "product", product, (B, D * 2 * H))
    first = _rows(op, x, first_row, entry_rows, D, B, 3 * H)
    limit = np.float32(np.inf if clip is None else clip)
    return gru_reset, (x.reshape(-1), first, np.int64(entry_rows), product.reshape(-1),
                       state.reshape(-1), out.reshape(-1), D, B, H, limit)


def bind_gru_step(x, first_row, entry_rows: int, product, reset_product, recurrent_bias,
                  state, out, directions: int, clip: float | None, linear_before_reset: bool):
    """``(kernel, args)`` of one GRU step on these arrays, checked once.
    ``product`` and ``state`` both None on a step without a previous state;
    ``reset_product`` given exactly when ``linear_before_reset`` is 0 and
    there is a state."""
    op = "gru_cell"
    D = int(directions)
    B, hw = out.shape
    H = hw // D
    has_state = state is not None
    _check(op, x=x, out=out, recurrent_bias=recurrent_bias,
           **({} if not has_state else {"state": state, "product": product}))
    _shape(op, "state", state, (B, D * H))
    _shape(op, "product", product, (B, D * (3 if linear_before_reset else 2) * H))
    _shape(op, "recurrent_bias", recurrent_bias, (D, H))
    if (state is None) != (product is None) or \
            (reset_product is not None) != (has_state and not linear_before_reset):
        raise ValueError(f"{op}: product and state come together, and reset_product with "
                         "them when linear_before_reset is 0")
    if reset_product is not None:
        _check(op, reset_product=reset_product)
        _shape(op, "reset_product", reset_product, (B, D * H))
    first = _rows(op, x, first_row, entry_rows, D, B, 3 * H)
    limit = np.float32(np.inf if clip is None else clip)
    empty = np.zeros(1, np.float32)
    return gru_step, (x.reshape(-1), first, np.int64(entry_rows),
                      product.reshape(-1) if has_state else empty,
                      empty if reset_product is None else reset_product.reshape(-1),
                      recurrent_bias.reshape(-1), state.reshape(-1) if has_state else empty,
                      out.reshape(-1), D, B, H, has_state, limit, bool(linear_before_reset))
