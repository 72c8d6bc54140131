"""Fused attention: ``scaled_dot_product_attention``, PyTorch's
``F.scaled_dot_product_attention`` as one kernel (kernels/attention.py, flash
attention: the ``Sq x Sk`` score matrix is never written to memory).

``scaled_dot_product_attention(query, key, value, mask=None, *, scale=None,
is_causal=False, layout="bhsd")`` computes, per batch and head::

    softmax(query @ key^T * scale + mask) @ value

Operands (float32; host arrays are converted, integer tensors refused):

* ``layout="bhsd"`` (default): ``query (B, H, Sq, D)``, ``key (B, H, Sk, D)``,
  ``value (B, H, Sk, Dv)``; output ``(B, H, Sq, Dv)``. 3-D operands
  ``(N, S, D)`` (PyTorch's batch of heads, ``N = B * H``) give a 3-D output
  ``(N, Sq, Dv)``.
* ``layout="bshd"``: the head-split layout before the exporters'
  ``Transpose(0, 2, 1, 3)``: ``query (B, Sq, H, D)``, ``key (B, Sk, H, D)``,
  ``value (B, Sk, H, Dv)``; output ``(B, Sq, H, Dv)``, what the
  ``Transpose(0, 2, 1, 3)`` after attention would give. The kernel reads and
  writes these buffers through strides: no transpose is copied. 4-D only.
* ``views`` (``layout="bshd"`` only): ``((column, heads, head_size),) * 3``
  for query, key and value: each operand is then a 3-D ``(B, S, N)`` tensor
  (the same one for all three when Q, K and V are one fused projection) of
  which columns ``[column, column + heads * head_size)`` are the operand's
  ``(B, S, heads, head_size)``, read in place (strided, no copy).
* ``groups`` (grouped-query attention, 4-D only): ``key`` and ``value``
  have ``H / groups`` heads, and query head ``h`` reads key-value head ``h //
  groups`` (transformers' ``repeat_kv`` order), with no repeated copy.
* ``out_layout``: ``"bhsd"`` or ``"bshd"`` (default: ``layout``), the
  output's layout alone: an attention on ``(B, H, S, D)`` operands writes the
  ``(B, S, H, Dv)`` that the exporters' ``Transpose(0, 2, 1, 3)`` before the
  output projection would give, through strides (4-D only).
* ``scale``: a finite number; default ``1 / sqrt(D)``.
* ``mask`` (optional), in the ``(B, H, Sq, Sk)`` terms of the scores
  whatever the layout, broadcast as numpy does (rank <= 4, sizes 1 or the
  scores'): a float32 *additive* mask (BERT's ``(B, 1, 1, Sk)`` of 0 and a
  large negative value, a causal ``(1, 1, Sq, Sk)`` of 0 and ``-inf``, or a
  full one), or a uint8 *boolean* mask (jitnn's and WebNN's booleans; a host
  bool array converts to it): nonzero keeps a key, 0 masks it out. Other
  integer types are refused.
* ``is_causal``: key ``j`` is masked out for query row ``i`` when ``j > i``:
  PyTorch's convention, the diagonal from the top-left corner (with ``Sq <
  Sk`` the last row does not see the last ``Sk - Sq`` keys). It may be given
  together with a mask (PyTorch refuses that; ONNX's Attention applies both,
  and so does jitnn).

**Masked-out rows.** A key dropped by the boolean mask scores ``float32
lowest`` (finite), as in ONNX Runtime's Attention: a row whose every key is
dropped so gets the plain average of ``value`` over all keys, as ONNX
Runtime gives. A row whose every score is ``-inf`` (an additive mask of
``-inf`` on all its keys) is NaN, as ``softmax`` of ``-inf`` everywhere is
in PyTorch and ONNX Runtime; ``nan_to_zero=True`` stores such NaN outputs (and
those of NaN inputs) as 0, the ``Where(IsNaN(x), 0, x)`` guard exporters add,
with no pass of its own. Causal keys are excluded outright (weight 0),
so a causal row never averages keys after it.

**Accuracy.** float32 with float32 accumulators: against float64, about
1e-7 of ``max |value|`` for unit-variance scores at any Sk up to 4096,
1.7e-6 for scores of standard deviation 9 (a score's rounding error scales
with its magnitude); see kernels/attention.py.

**For the ONNX frontend.** The exported pattern ``MatMul(Q, Transpose(K)) ->
Mul/Div(scale) -> [Add(mask) | Where(bool mask, ., -inf)] -> Softmax(-1) ->
MatMul(., V)`` maps to one call ``scaled_dot_product_attention(Q, K, V,
mask, scale=s)``: the transpose of K is implied (pass K itself, ``(.., Sk,
D)``); a ``Div`` by ``d`` is ``scale=1/d``; an ``Add`` mask is passed as the
float tensor it is (any broadcastable shape, no ``Expand`` needed); a
``Where(cond, scores, -inf or min)`` mask is ``cond`` as the boolean mask
(uint8); a ``Trilu``/``LessOrEqual`` causal mask of the ``(Sq, Sk)`` top-left
triangle is ``is_causal=True``. When Q, K and V each come from
``Transpose(0, 2, 1, 3)`` of a ``(B, S, H, D)`` tensor and the output goes
into ``Transpose(0, 2, 1, 3)``, pass the untransposed tensors with
``layout="bshd"`` and use the result in place of the second transpose's.
ONNX's ``Attention`` (opset 23) maps too for 4-D inputs with no past state,
softcap or GQA: ``attn_mask`` as ``mask``, ``is_causal``, ``scale`` (its
default is the same ``1 / sqrt(D)``).

Plain layout: a blocked 4-D operand is read back once. The op records one
node (kind ``"attention"``) that writes into the buffer the plan gives it;
nothing fuses into it.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from .. import layouts
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import attention as attention_kernels
from ..kernels.buffers import aligned_empty
from ..limits import real_arg
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import FLOAT32, Node, Tensor, Value, exact
from ._common import Binding, as_tensor, context_of, is_number, pending, plain_buffer, value_of

_OP = "scaled_dot_product_attention"
_UINT8 = np.dtype(np.uint8)
#: the score a boolean mask gives a dropped key (as ONNX Runtime's Attention)
_LOWEST = float(np.finfo(np.float32).min)
LAYOUTS = ("bhsd", "bshd")


# --- the spec ------------------------------------------------------------------------

def _viewed(array, view) -> np.ndarray:
    """Columns ``[c, c + h * d)`` of a ``(B, S, N)`` array as its ``(B, S, h,
    d)`` operand (a view: the last axis stays contiguous)."""
    c, h, d = view
    return array[:, :, c:c + h * d].reshape(array.shape[:2] + (h, d))


def scaled_dot_product_attention_reference(query, key, value, mask=None, *, scale=None,
                                           is_causal: bool = False, layout: str = "bhsd",
                                           nan_to_zero: bool = False,
                                           views=None, groups: int = 1,
                                           out_layout: str | None = None) -> np.ndarray:
    """``softmax(query @ key^T * scale + mask) @ value`` in float64 (the module
    docstring's rules: a uint8 or bool mask adds ``float32 lowest`` where it
    is 0; ``is_causal`` sets ``-inf`` where ``j > i``)."""
    q, k, v = (np.asarray(x, np.float64) for x in (query, key, value))
    if views is not None:
        q, k, v = (_viewed(x, view) for x, view in zip((q, k, v), views))
    if layout == "bshd":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    if groups > 1:                    # key-value head h // groups for query head h
        k, v = (np.repeat(x, groups, axis=1) for x in (k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype.kind in "bu":
            s = s + np.where(mask != 0, 0.0, _LOWEST)
        else:
            s = s + mask.astype(np.float64)
    if is_causal:
        rows, keys = s.shape[-2:]
        s = np.where(np.arange(keys)[None, :] > np.arange(rows)[:, None], -np.inf, s)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        out = np.matmul(e / e.sum(axis=-1, keepdims=True), v)
    if nan_to_zero:
        out = np.where(np.isnan(out), 0.0, out)
    return out.transpose(0, 2, 1, 3) if (out_layout or layout) == "bshd" else out


# --- the op ----------------------------------------------------------------------------

def _shapes(query: tuple, key: tuple, value: tuple, layout: str, groups: int = 1) -> tuple:
    """``(B, H, Sq, Sk, D, Dv)`` from the operands' shapes (K and V of ``H /
    groups`` heads), checked."""
    ranks = (len(query), len(key), len(value))
    allowed = (3, 4) if layout == "bhsd" else (4,)
    if ranks[0] not in allowed or len(set(ranks)) != 1:
        want = "all 4-D (B, H, S, D) or all 3-D (B*H, S, D)" if layout == "bhsd" else \
            "all 4-D (B, S, H, D)"
        raise JitnnValueError(
            f"{_OP}: query, key and value must be {want} with layout={layout!r}, got "
            f"query {query}, key {key}, value {value}")
    q, k, v = query, key, value
    if len(q) == 3:
        q, k, v = (1,) + q, (1,) + k, (1,) + v
    elif layout == "bshd":
        q, k, v = ((s[0], s[2], s[1], s[3]) for s in (q, k, v))
    names = "(B, H, S, D)" if layout == "bhsd" else "(B, S, H, D)"
    if k[0] != q[0] or k[1] * groups != q[1] or k[3] != q[3]:
        heads = "heads" if groups == 1 else f"heads / {groups} (groups)"
        raise JitnnValueError(
            f"{_OP}: key {key} must have query's batch, {heads} and head size "
            f"(query {query}, layout {names})")
    if v[:3] != k[:3]:
        raise JitnnValueError(
            f"{_OP}: value {value} must have key's batch, heads and sequence length "
            f"(key {key}, layout {names})")
    B, H, Sq, D = q
    Sk, Dv = k[2], v[3]
    if B * H * Sq * Dv and (D == 0 or Sk == 0):
        raise JitnnValueError(
            f"{_OP}: query rows need keys of at least one element: head size {D}, "
            f"{Sk} keys (query {query}, key {key})")
    return B, H, Sq, Sk, D, Dv


def scaled_dot_product_attention(query, key, value, mask=None, *, scale=None,
                                 is_causal: bool = False, layout: str = "bhsd",
                                 nan_to_zero: bool = False, views=None, groups: int = 1,
                                 out_layout: str | None = None) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` per batch and head, as
    one fused kernel (PyTorch's ``F.scaled_dot_product_attention``; see the
    module docstring for the layouts, ``groups``, ``out_layout``, the mask
    kinds, ``is_causal`` and masked-out rows). Returns a pending plain tensor."""
    op = _OP
    ctx = context_of(op, query, key, value, mask)
    query = as_tensor(ctx, query, op, "query")
    key = as_tensor(ctx, key, op, "key")
    value = as_tensor(ctx, value, op, "value")
    if layout not in LAYOUTS:
        raise JitnnValueError(f"{op}: layout must be 'bhsd' or 'bshd', got {layout!r}")
    for name, flag in (("is_causal", is_causal), ("nan_to_zero", nan_to_zero)):
        if not isinstance(flag, (bool, np.bool_)):
            raise JitnnTypeError(f"{op}: {name} must be a bool, got {flag!r}")
    out_layout = layout if out_layout is None else out_layout
    if out_layout not in LAYOUTS:
        raise JitnnValueError(f"{op}: out_layout must be 'bhsd' or 'bshd', got {out_layout!r}")
    if isinstance(groups, (bool, np.bool_)) or not isinstance(groups, (int, np.integer)) \
            or groups < 1:
        raise JitnnTypeError(f"{op}: groups must be an int >= 1, got {groups!r}")
    groups = int(groups)
    views = _views_arg(views, (query, key, value), layout)
    shapes = [t.shape for t in (query, key, value)] if views is None else \
        [t.shape[:2] + view[1:] for t, view in zip((query, key, value), views)]
    if (groups > 1 or out_layout != layout) and len(shapes[0]) != 4:
        raise JitnnValueError(f"{op}: groups and out_layout need 4-D operands, got "
                              f"query {shapes[0]}")
    B, H, Sq, Sk, D, Dv = _shapes(*shapes, layout, groups)
    if scale is None:
        scale = 1.0 / math.sqrt(D) if D else 1.0
    elif not is_number(scale):
        raise JitnnTypeError(f"{op}: scale must be a number or None, got {scale!r}")
    else:
        scale = real_arg(op, "scale", scale)
    m = None
    if mask is not None:
        m = as_tensor(ctx, mask, op, "mask", (FLOAT32, _UINT8))
        scores = (B, H, Sq, Sk) if len(shapes[0]) == 4 else (B * H, Sq, Sk)
        try:
            if m.ndim > len(scores) or np.broadcast_shapes(m.shape, scores) != scores:
                raise ValueError
        except ValueError:
            raise JitnnValueError(
                f"{op}: mask {m.shape} does not broadcast to the scores "
                f"{scores} (batch, heads, query rows, keys)") from None
    if len(shapes[0]) == 3:
        out_shape = (B * H, Sq, Dv)
    elif out_layout == "bshd":
        out_shape = (B, Sq, H, Dv)
    else:
        out_shape = (B, H, Sq, Dv)
    attrs = {"scale": float(scale), "causal": bool(is_causal), "layout": layout,
             "dims": (B, H, Sq, Sk, D, Dv), "masked": m is not None,
             "nan_to_zero": bool(nan_to_zero), "views": views, "groups": groups,
             "out_layout": out_layout}
    inputs = tuple(value_of(t) for t in (query, key, value, m) if t is not None)
    sig = (op, exact(attrs["scale"]), attrs["causal"], layout, attrs["dims"], attrs["masked"],
           attrs["nan_to_zero"], views, groups, out_layout,
           tuple(t.shape for t in (query, key, value)) if views is not None else None)
    node = Node(op, inputs, kind="attention", attrs=attrs, run=run_attention,
                flops=2 * B * H * Sq * Sk * (D + Dv), sig=sig)
    return pending(ctx, out_shape, layouts.plain_tag(len(out_shape)), node)


def _views_arg(views, operands: tuple, layout: str) -> tuple | None:
    """``views`` checked against the 3-D ``(B, S, N)`` operands: a tuple of
    three ``(column, heads, head_size)`` of ints, or None."""
    if views is None:
        return None
    try:
        views = tuple(tuple(int(n) for n in view) for view in views)
        ok = len(views) == 3 and all(len(view) == 3 for view in views) and all(
            float(n) == n for view in views for n in view)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise JitnnTypeError(f"{_OP}: views must be three (column, heads, head_size) "
                             f"triples of ints, got {views!r}")
    if layout != "bshd":
        raise JitnnValueError(f"{_OP}: views need layout='bshd', got {layout!r}")
    for name, t, (c, h, d) in zip(("query", "key", "value"), operands, views):
        if t.ndim != 3 or c < 0 or h < 1 or d < 0 or c + h * d > t.shape[2]:
            raise JitnnValueError(
                f"{_OP}: {name} view (column {c}, {h} heads of {d}) must lie in the last "
                f"axis of a 3-D (B, S, N) {name}, got {name} {t.shape}")
    return views


def _bhsd(array: np.ndarray, layout: str) -> np.ndarray:
    """A plain operand as the kernel's logical (B, H, S, D) array (a view)."""
    if array.ndim == 3:
        return array.reshape((1,) + array.shape)
    if layout == "bshd":
        return array.transpose(0, 2, 1, 3)
    return array


def run_attention(ctx, node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    """Run the fused kernel into the plan's buffer (or a new array)."""
    dest = _dest(value, out)
    if dest.size == 0:
        return dest
    call = _attention_call(ctx, node, value, dest)[0]
    ctx.launcher.launch(call[0], *call[1])
    return dest


def _dest(value: Value, out: np.ndarray | None) -> np.ndarray:
    """The plan's buffer itself when it has the value's shape: the step after
    may bind to it (a replayed plan hands out the same array every run; a
    reshape is new)."""
    shape = value.shape
    return out if out is not None and out.shape == shape else \
        out.reshape(shape) if out is not None and out.size == math.prod(shape) else \
        aligned_empty(shape)


def _attention_call(ctx, node: Node, value: Value | None, dest: np.ndarray) -> tuple:
    """The kernel call into ``dest`` (non-empty) as ``((kernel, args), operands,
    mask)``: the plain arrays the kernel reads Q, K and V from (in their
    layouts' logical (B, H, S, D) views) and the mask as it reads it (None,
    an array or a RowMask)."""
    a = node.attrs
    layout = a["layout"]
    views = a.get("views")
    if views is None:
        plains = [plain_buffer(t) for t in node.inputs[:3]]
        q, k, v = (_bhsd(x, layout) for x in plains)
    else:                    # strided views of the fused projection: no copies
        plains = [plain_buffer(t) for t in node.inputs[:3]]
        q, k, v = (_bhsd(_viewed(x, view), layout) for x, view in zip(plains, views))
        if node.memo is None:    # explain's line once the node is gone (jitnn/executor.py)
            node.memo = SimpleNamespace(layouts=tuple(t._layout for t in node.inputs),
                                        notes=tuple(_explain(node, value)))
    o = _bhsd(dest, a.get("out_layout", layout))
    # (a mask of rank <= 3 broadcasts to 3-D operands' (1, N, Sq, Sk) as to (N, Sq, Sk))
    mask = _kernel_mask(node.inputs[3], *a["dims"][2:4]) if a["masked"] else None
    call = attention_kernels.attention_call(
        q, k, v, o, mask, scale=a["scale"], causal=a["causal"],
        nan_to_zero=a.get("nan_to_zero", False), groups=a.get("groups", 1),
        threads=ctx.num_threads)
    return call, plains, mask


class _MaskFedBinding(Binding):
    """A bound attention whose mask is computed at every run (its array is
    new at each: BERT's padding mask from the caller's ids, a causal mask
    from the positions): the arguments hold a mask buffer of their own, and
    before each call this run's mask is put into it, converted as the op
    converts it (a per-row one made a RowMask again, its distinct batches
    mapped anew: kernels.attention.rebind_rows). When the mask's type or
    the RowMask's layout (its number of distinct batches) changed, the step
    runs through its op. No array of one run is kept for the next."""

    __slots__ = ("mask", "rows", "keys", "kind")

    def valid(self, ctx, out: np.ndarray | None) -> bool:
        if not super().valid(ctx, out):
            return False
        data = self.mask._data
        dtype, shape, rows = self.kind
        if not isinstance(data, np.ndarray) or data.dtype != dtype or data.shape != shape:
            return False
        if rows:
            # made once per run and mask, as the op makes it: the layers of a
            # model that share one mask (Llama's causal one) convert it once
            form = self.mask._derive(("attention_rows", self.rows, self.keys),
                                     lambda: attention_kernels.row_mask(data, self.rows,
                                                                        self.keys))
            return attention_kernels.rebind_rows(self.args, form)
        np.copyto(self.args[4] if dtype == FLOAT32 else self.args[5], data.reshape(-1))
        return True


def bind_attention(ctx, node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_attention` just made, bound to its arrays
    (~130 us of Python wrapper per step otherwise, a Llama layer's attention
    at 128 tokens): Q, K, V and a computed mask read in place from the
    plan's buffers, a constant mask's kernel form held as a derived form. A
    mask computed at every run that the kernel reads as a RowMask is
    converted again at each call (:class:`_MaskFedBinding`). None when an
    operand is a copy made at this run (a blocked one read back) or read-only
    (the kernel reads a copy of it)."""
    a = node.attrs
    if result.size == 0 or any(t._data is None for t in node.inputs):
        return None
    call, plains, mask = _attention_call(ctx, node, None, result)
    if call is None:
        return None
    args = call[1]
    reads = []
    for t, plain, flat in zip(node.inputs[:3], plains, args[:3]):
        data = t._data
        if not isinstance(data, np.ndarray) or not np.may_share_memory(plain, data) \
                or not np.may_share_memory(flat, data):
            return None                   # a copy made at this run
        if not any(t is r for r, _ in reads):
            reads.append((t, data))
    if not a["masked"]:
        return Binding(call[0], args, tuple(reads), (), result, ctx.num_threads)
    m = node.inputs[3]
    rows, keys = a["dims"][2:4]
    row_mask = type(mask) is attention_kernels.RowMask
    if m.held:
        # a constant: its kernel form (possibly a copy) kept as a derived form
        key = ("attention_rows", rows, keys) if row_mask else ("attention_mask",)
        form = mask if row_mask else m._derive(key, lambda: m._data)
        return Binding(call[0], args, tuple(reads), ((m, key, form),), result,
                       ctx.num_threads)
    data = m._data
    if not isinstance(data, np.ndarray):
        return None
    args = list(args)
    index = 4 if row_mask or data.dtype == FLOAT32 else 5
    args[index] = args[index].copy()       # the binding's own, refilled at every call
    binding = _MaskFedBinding(call[0], tuple(args), tuple(reads), (), result, ctx.num_threads)
    binding.mask, binding.rows, binding.keys = m, rows, keys
    binding.kind = (data.dtype, data.shape, row_mask)
    return binding


# (the executor asks a node's run function for its binder)
run_attention.bind = bind_attention


def _kernel_mask(mask: Value, rows: int, keys: int):
    """The mask as the kernel reads it. One with a value per query row (Swin's
    relative bias and shift mask, a causal mask given as values) is made a
    ``RowMask`` (its row blocks transposed as the kernel's scores are) once
    per Value and kept with its derived forms: a constant mask once per
    model, a computed one once per run; one value per key (BERT's padding
    mask) is read as it is."""
    data = plain_buffer(mask)       # outside the value's lock (see Value._derive)
    if rows == 1 or data.ndim < 2 or data.shape[-2] == 1:
        return data
    return mask._derive(("attention_rows", rows, keys),
                        lambda: attention_kernels.row_mask(data, rows, keys))


def _explain(node: Node, value: Value) -> list[str]:
    views = node.attrs.get("views")
    if views is None:
        return []
    width = node.inputs[0].shape[-1]
    parts = ", ".join(f"{name} {c}:{c + h * d}" for name, (c, h, d) in zip("QKV", views))
    shared = "one" if len(set(map(id, node.inputs[:3]))) == 1 else "their"
    return [f"Q, K and V read in place from {shared} (B, S, {width}) projection "
            f"(columns {parts})"]


register_kind(NodeKind("attention", writes_into_buffer=True, explain=_explain))

register_op(OpDef(
    _OP, scaled_dot_product_attention, scaled_dot_product_attention_reference, webnn=None,
    kinds=("attention",), layouts="plain (bhsd or bshd read in place; a blocked operand is "
                                  "read back once)",
    fusion="fused itself: Q Kᵀ, scale, mask, softmax and · V in one kernel, no score matrix"))
