"""aten -> jitnn: one handler per aten op, and the table the partitioner asks.

A handler adds the jitnn ops that compute one aten node to a
:class:`~jitnn.graph.GraphBuilder`. It gets the node's arguments with every
fx node replaced by what it became: a builder :class:`~jitnn.graph.Operand`
(a value computed when the graph runs), a ``torch.Tensor`` (a constant: a
frozen parameter or buffer, or a value folded at build time) or, for a node
of several outputs, a tuple. Sizes come from the traced graph
(``node.meta["val"]``), so a view's ``-1`` or a pooling's output size is
PyTorch's own.

A handler refuses what it cannot compute exactly as PyTorch does by raising
:class:`Unsupported` with the reason; jitnn's own validation (a
``JitnnError`` raised by the op) refuses the rest. The partitioner probes
every node this way on shape-only inputs before anything is built (see
jitnn/torch_backend/_compile.py), so a node either converts or stays in
PyTorch with the reason logged.

:data:`ATEN` maps each aten overload to its handler and the jitnn ops it
uses; only entries whose jitnn ops are all in the op registry
(jitnn/registry.py) are offered (:func:`supported_targets`).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .. import registry
from ..graph import GraphBuilder, Operand

aten = torch.ops.aten

#: torch dtypes a jitnn tensor can hold, by their numpy names (bool is left
#: out: jitnn's booleans are uint8 0/1, and PyTorch's bool ops stay in PyTorch)
DTYPES = {torch.float32: "float32", torch.int64: "int64", torch.int32: "int32",
          torch.uint8: "uint8", torch.int8: "int8"}


class Unsupported(Exception):
    """A node jitnn does not compute as PyTorch does; the message says why."""


def shape_of(node: torch.fx.Node) -> tuple[int, ...]:
    """The traced shape of ``node``'s (first) tensor result."""
    value = node.meta.get("val")
    if isinstance(value, (tuple, list)):
        value = value[0]
    if not isinstance(value, torch.Tensor):
        raise Unsupported(f"{node.name} has no traced tensor shape")
    return tuple(int(d) for d in value.shape)


def _pair(value: Any, default: int | None = None) -> tuple[int, int]:
    """An aten int[2] argument (one entry repeats; empty: ``default``)."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        if default is None:
            raise Unsupported("an empty size list")
        return default, default
    if len(items) == 1:
        items = items * 2
    if len(items) != 2:
        raise Unsupported(f"{len(items)} spatial sizes (jitnn runs 2-D windows)")
    return int(items[0]), int(items[1])


def _axis(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


class Lowering:
    """Turns aten nodes into ops of one builder, keeping what each became.

    ``probe=True`` (the partitioner's support check): constant tensors of rank
    >= 1 become shape-only inputs instead of copied constants, as nothing is
    built from the probe."""

    def __init__(self, builder: GraphBuilder, probe: bool = False):
        self.b = builder
        self.probe = probe
        self._constants: dict[int, tuple[torch.Tensor, Operand]] = {}
        self._inputs = 0
        #: builder operand index -> (operand, permutation): results of a
        #: transpose, so attention can read the untransposed tensor (``bshd``)
        self.transposed: dict[int, tuple[Operand, tuple[int, ...]]] = {}

    # --- values --------------------------------------------------------------

    def input(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Operand:
        if dtype not in DTYPES:
            raise Unsupported(f"a {dtype} tensor (jitnn holds {', '.join(DTYPES.values())})")
        return self.b.input(name, shape, DTYPES[dtype])

    def operand(self, value: Any) -> Operand:
        """``value`` as a builder operand: a constant tensor becomes a builder
        constant once (copied now, a filter packed once)."""
        if isinstance(value, Operand):
            return value
        if isinstance(value, torch.Tensor):
            found = self._constants.get(id(value))
            if found is not None:
                return found[1]
            if value.dtype not in DTYPES:
                raise Unsupported(f"a {value.dtype} constant")
            if self.probe and value.dim() > 0:
                self._inputs += 1
                made = self.b.input(f"constant{self._inputs}", tuple(value.shape),
                                    DTYPES[value.dtype])
            else:
                made = self.b.constant(value.detach().cpu().contiguous().numpy())
            # keep the tensor alive: its id must not be reused by another one
            self._constants[id(value)] = (value, made)
            return made
        raise Unsupported(f"a {type(value).__name__} where a tensor was expected")

    def number(self, value: Any) -> float | None:
        """A Python number or a one-element constant as a float, else None."""
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dim() == 0:
            return float(value.item())
        return None

    def lower(self, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        """What ``node`` becomes, given its lowered arguments; a tensor result
        is checked against the traced shape (reshaped if only the rank differs)."""
        entry = ATEN.get(node.target)
        if entry is None:
            raise Unsupported(f"no jitnn mapping for {node.target}")
        result = entry.handler(self, node, *args, **kwargs)
        if isinstance(result, Operand):
            expected = shape_of(node)
            if result.shape != expected:
                if math.prod(result.shape) != math.prod(expected):
                    raise Unsupported(f"jitnn's result {result.shape} is not PyTorch's "
                                      f"{expected}")
                result = self.b.reshape(result, expected)
        return result


# --- handlers ------------------------------------------------------------------

def _convolution(lw: Lowering, node, x, w, bias, stride, padding, dilation, transposed,
                 output_padding, groups):
    x = lw.operand(x)
    if len(x.shape) != 4:
        raise Unsupported(f"a {len(x.shape) - 2}-D convolution (jitnn runs 2-D ones)")
    ph, pw = _pair(padding, 0)
    options = dict(strides=_pair(stride, 1), dilations=_pair(dilation, 1),
                   padding=[ph, ph, pw, pw], groups=int(groups))
    bias_operand = None if bias is None else lw.operand(bias)
    if transposed:
        return lw.b.conv_transpose2d(x, lw.operand(w), bias_operand,
                                     output_padding=_pair(output_padding, 0),
                                     filter_layout="iohw", **options)
    return lw.b.conv2d(x, lw.operand(w), bias_operand, **options)


def _matmul(lw: Lowering, node, a, b):
    return lw.b.matmul(lw.operand(a), lw.operand(b))


def _addmm(lw: Lowering, node, bias, a, b, *, beta=1, alpha=1):
    return lw.b.gemm(lw.operand(a), lw.operand(b), lw.operand(bias), alpha=float(alpha),
                     beta=float(beta))


def _unary(name: str, **options) -> Callable:
    def handler(lw: Lowering, node, x):
        return getattr(lw.b, name)(lw.operand(x), **options)
    return handler


def _hardtanh(lw: Lowering, node, x, min_val=-1.0, max_val=1.0):
    return lw.b.clamp(lw.operand(x), float(min_val), float(max_val))


def _clamp(lw: Lowering, node, x, min=None, max=None):  # noqa: A002 - aten's names
    lo, hi = lw.number(min), lw.number(max)
    if (min is not None and lo is None) or (max is not None and hi is None):
        raise Unsupported("tensor bounds")
    return lw.b.clamp(lw.operand(x), -math.inf if lo is None else lo,
                      math.inf if hi is None else hi)


def _clamp_min(lw: Lowering, node, x, bound):
    return _clamp(lw, node, x, min=bound)


def _clamp_max(lw: Lowering, node, x, bound):
    return _clamp(lw, node, x, max=bound)


def _leaky_relu(lw: Lowering, node, x, negative_slope=0.01):
    return lw.b.leaky_relu(lw.operand(x), float(negative_slope))


def _elu(lw: Lowering, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1 or input_scale != 1:
        raise Unsupported("elu with scale or input_scale other than 1")
    return lw.b.elu(lw.operand(x), float(alpha))


def _silu(lw: Lowering, node, x):
    x = lw.operand(x)
    return lw.b.mul(x, lw.b.sigmoid(x))


def _gelu(lw: Lowering, node, x, *, approximate="none"):
    x = lw.operand(x)
    if approximate == "none":
        return lw.b.gelu(x)
    if approximate != "tanh":
        raise Unsupported(f"gelu approximate={approximate!r}")
    # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as PyTorch writes it
    inner = lw.b.add(x, lw.b.mul(lw.b.pow(x, 3.0), 0.044715))
    t = lw.b.tanh(lw.b.mul(inner, math.sqrt(2.0 / math.pi)))
    return lw.b.mul(lw.b.mul(x, 0.5), lw.b.add(t, 1.0))


def _rsqrt(lw: Lowering, node, x):
    return lw.b.reciprocal(lw.b.sqrt(lw.operand(x)))


def _pow(lw: Lowering, node, x, exponent):
    value = lw.number(exponent)
    if value is None:
        raise Unsupported("a tensor exponent")
    return lw.b.pow(lw.operand(x), value)


_COMMUTATIVE = ("add", "mul", "maximum", "minimum")


def _binary_values(lw: Lowering, name: str, a: Any, b: Any):
    """``a <name> b`` where either may be a number (a Python scalar or a
    one-element constant): the number goes second, or the op is rewritten."""
    first, second = lw.number(a), lw.number(b)
    if first is not None and second is None:
        if name in _COMMUTATIVE:
            return getattr(lw.b, name)(lw.operand(b), first)
        if name == "sub":                       # c - x
            return lw.b.linear(lw.operand(b), alpha=-1.0, beta=first)
        if name == "div":                       # c / x
            return lw.b.mul(lw.b.reciprocal(lw.operand(b)), first)
    if second is not None:
        return getattr(lw.b, name)(lw.operand(a), second)
    return getattr(lw.b, name)(lw.operand(a), lw.operand(b))


def _binary(name: str) -> Callable:
    def handler(lw: Lowering, node, a, b, *, alpha=1):
        if alpha != 1:
            scaled = lw.number(b)
            b = scaled * float(alpha) if scaled is not None else \
                lw.b.mul(lw.operand(b), float(alpha))
        return _binary_values(lw, name, a, b)
    return handler


def _plain_binary(name: str) -> Callable:
    def handler(lw: Lowering, node, a, b):
        return _binary_values(lw, name, a, b)
    return handler


def _rsub(lw: Lowering, node, a, b, *, alpha=1):
    """``b - alpha * a``."""
    if alpha != 1:
        a = lw.b.mul(lw.operand(a), float(alpha))
    return _binary_values(lw, "sub", b, a)


def _reduction(name: str) -> Callable:
    def handler(lw: Lowering, node, x, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None and dtype != torch.float32:
            raise Unsupported(f"a {dtype} accumulation")
        x = lw.operand(x)
        rank = len(x.shape)
        if isinstance(dim, int):
            dim = [dim]
        axes = None if not dim else sorted({_axis(int(d), rank) for d in dim})
        return getattr(lw.b, name)(x, axes=axes, keep_dimensions=bool(keepdim))
    return handler


def _reduce_all(name: str) -> Callable:
    def handler(lw: Lowering, node, x, *, dtype=None):
        return _reduction(name)(lw, node, x, None, False, dtype=dtype)
    return handler


def _batch_norm(lw: Lowering, node, x, weight, bias, mean, var, momentum, eps):
    y = lw.b.batch_normalization(
        lw.operand(x), lw.operand(mean), lw.operand(var),
        None if weight is None else lw.operand(weight),
        None if bias is None else lw.operand(bias), epsilon=float(eps), axis=1)
    return (y,)


def _native_batch_norm(lw: Lowering, node, x, weight, bias, mean, var, training, momentum,
                       eps):
    """What batch norm traces to under ``torch.inference_mode`` (where the
    python dispatcher's rewrite into the ``_legit`` ops, an autograd-key
    decomposition, does not run)."""
    if training:
        raise Unsupported("batch norm in training mode")
    return _batch_norm(lw, node, x, weight, bias, mean, var, momentum, eps)


def _layer_norm(lw: Lowering, node, x, normalized_shape, weight, bias, eps):
    x = lw.operand(x)
    rank, count = len(x.shape), len(normalized_shape)
    y = lw.b.layer_normalization(
        x, None if weight is None else lw.operand(weight),
        None if bias is None else lw.operand(bias),
        axes=list(range(rank - count, rank)), epsilon=float(eps))
    return (y,)


def _pool_options(kernel_size, stride, padding, dilation=1) -> dict:
    kernel = _pair(kernel_size)
    ph, pw = _pair(padding, 0)
    return dict(window_dimensions=kernel, strides=_pair(stride) if stride else kernel,
                dilations=_pair(dilation, 1), padding=[ph, ph, pw, pw])


def _max_pool(lw: Lowering, node, x, kernel_size, stride=(), padding=0, dilation=1,
              ceil_mode=False):
    x = lw.operand(x)
    if len(x.shape) != 4:
        raise Unsupported(f"a rank-{len(x.shape)} input (jitnn pools (N, C, H, W))")
    y = lw.b.max_pool2d(x, output_sizes=shape_of(node)[2:],
                        **_pool_options(kernel_size, stride, padding, dilation))
    return (y,)


def _avg_pool(lw: Lowering, node, x, kernel_size, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    x = lw.operand(x)
    if divisor_override is not None:
        raise Unsupported("divisor_override")
    if len(x.shape) != 4:
        raise Unsupported(f"a rank-{len(x.shape)} input (jitnn pools (N, C, H, W))")
    return lw.b.average_pool2d(x, output_sizes=shape_of(node)[2:],
                               count_include_pad=bool(count_include_pad),
                               **_pool_options(kernel_size, stride, padding))


def _adaptive_avg_pool(lw: Lowering, node, x, output_size):
    x = lw.operand(x)
    if len(x.shape) != 4:
        raise Unsupported(f"a rank-{len(x.shape)} input (jitnn pools (N, C, H, W))")
    (h, w), (oh, ow) = x.shape[2:], _pair(output_size)
    if (oh, ow) == (1, 1):
        return lw.b.global_average_pool2d(x)
    if h % oh or w % ow:
        raise Unsupported(f"adaptive pooling of {h}x{w} to {oh}x{ow} (uneven windows)")
    window = (h // oh, w // ow)
    return lw.b.average_pool2d(x, window, strides=window)


def _reshape(lw: Lowering, node, x, *_):
    x = lw.operand(x)
    shape = shape_of(node)
    return x if x.shape == shape else lw.b.reshape(x, shape)


def _transpose_to(lw: Lowering, x: Operand, perm: tuple[int, ...]) -> Operand:
    if perm == tuple(range(len(perm))):
        return x
    source = lw.transposed.get(x._index)
    if source is not None:
        # a transpose of a transpose: one permutation of the first's input
        combined = tuple(source[1][p] for p in perm)
        if combined == tuple(range(len(combined))):
            return source[0]
    y = lw.b.transpose(x, list(perm))
    lw.transposed[y._index] = (x, perm)
    return y


def _permute(lw: Lowering, node, x, dims):
    x = lw.operand(x)
    rank = len(x.shape)
    return _transpose_to(lw, x, tuple(_axis(int(d), rank) for d in dims))


def _transpose(lw: Lowering, node, x, dim0, dim1):
    x = lw.operand(x)
    perm = list(range(len(x.shape)))
    a, b = _axis(int(dim0), len(perm)), _axis(int(dim1), len(perm))
    perm[a], perm[b] = perm[b], perm[a]
    return _transpose_to(lw, x, tuple(perm))


def _t(lw: Lowering, node, x):
    x = lw.operand(x)
    return _transpose_to(lw, x, tuple(reversed(range(len(x.shape)))))


def _expand(lw: Lowering, node, x, size, *, implicit=False):
    x = lw.operand(x)
    shape = shape_of(node)
    return x if x.shape == shape else lw.b.expand(x, list(shape))


def _cat(lw: Lowering, node, tensors, dim=0):
    operands = [lw.operand(t) for t in tensors]
    operands = [o for o in operands if math.prod(o.shape) > 0] or operands[:1]
    if len(operands) == 1:
        return operands[0]
    return lw.b.concat(operands, _axis(int(dim), len(operands[0].shape)))


def _slice(lw: Lowering, node, x, dim=0, start=None, end=None, step=1):
    x = lw.operand(x)
    rank = len(x.shape)
    axis = _axis(int(dim), rank)
    picked = range(*slice(start, end, step).indices(x.shape[axis]))
    if len(picked) == 0:
        raise Unsupported("an empty slice")
    if len(picked) == x.shape[axis]:
        return x
    starts, sizes, strides = [0] * rank, list(x.shape), [1] * rank
    starts[axis], strides[axis] = picked.start, picked.step
    sizes[axis] = (len(picked) - 1) * picked.step + 1
    return lw.b.slice(x, starts, sizes, strides=strides)


def _select(lw: Lowering, node, x, dim, index):
    x = lw.operand(x)
    rank = len(x.shape)
    axis = _axis(int(dim), rank)
    index = int(index) + (x.shape[axis] if index < 0 else 0)
    starts, sizes = [0] * rank, list(x.shape)
    starts[axis], sizes[axis] = index, 1
    return lw.b.reshape(lw.b.slice(x, starts, sizes), shape_of(node))


def _identity(lw: Lowering, node, x, *args, **kwargs):
    return lw.operand(x)


def _to_copy(lw: Lowering, node, x, *, dtype=None, layout=None, device=None,
             pin_memory=None, non_blocking=False, memory_format=None):
    x = lw.operand(x)
    if dtype is not None and DTYPES.get(dtype) != str(x.dtype):
        raise Unsupported(f"a conversion to {dtype}")
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported(f"a copy to {device}")
    return x


def _softmax(lw: Lowering, node, x, dim, half_to_float=False):
    if half_to_float:
        raise Unsupported("half_to_float")
    x = lw.operand(x)
    return lw.b.softmax(x, _axis(int(dim), len(x.shape)))


def _safe_softmax(lw: Lowering, node, x, dim, dtype=None):
    """Softmax, but 0 over a row that is all -inf (attention's math path),
    where softmax gives NaN."""
    if dtype is not None and dtype != torch.float32:
        raise Unsupported(f"a {dtype} softmax")
    x = lw.operand(x)
    axis = _axis(int(dim), len(x.shape))
    empty = lw.b.equal(lw.b.reduce_max(x, axes=[axis], keep_dimensions=True), -math.inf)
    return lw.b.where(empty, 0.0, lw.b.softmax(x, axis))


def _attention(lw: Lowering, q, k, v, mask, dropout_p, is_causal, scale) -> Operand:
    if dropout_p:
        raise Unsupported("attention dropout")
    q, k, v = lw.operand(q), lw.operand(k), lw.operand(v)
    mask_operand = None if mask is None else lw.operand(mask)
    if mask_operand is not None and mask_operand.dtype != np.float32:
        raise Unsupported(f"a {mask_operand.dtype} attention mask (jitnn takes additive float "
                          "masks from PyTorch)")
    options = dict(scale=None if scale is None else float(scale), is_causal=bool(is_causal))
    # q, k and v all transposes (0, 2, 1, 3) of (B, S, H, D) tensors: read those
    # in place (layout "bshd") and give the result transposed back, which the
    # transpose after attention then undoes without a copy
    sources = [lw.transposed.get(t._index) for t in (q, k, v)]
    if len(q.shape) == 4 and all(s is not None and s[1] == (0, 2, 1, 3) for s in sources):
        out = lw.b.scaled_dot_product_attention(*(s[0] for s in sources), mask_operand,
                                                layout="bshd", **options)
        return _transpose_to(lw, out, (0, 2, 1, 3))
    return lw.b.scaled_dot_product_attention(q, k, v, mask_operand, **options)


def _flash_attention(lw: Lowering, node, q, k, v, dropout_p=0.0, is_causal=False, *,
                     attn_mask=None, scale=None):
    return (_attention(lw, q, k, v, attn_mask, dropout_p, is_causal, scale),)


def _sdpa(lw: Lowering, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *,
          scale=None, enable_gqa=False):
    return _attention(lw, q, k, v, attn_mask, dropout_p, is_causal, scale)


def _embedding(lw: Lowering, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False,
               sparse=False):
    if isinstance(indices, torch.Tensor):         # constant indices: checked host integers
        index: Any = indices.detach().cpu().numpy().astype(np.int64)
    else:
        index = lw.operand(indices)
    return lw.b.gather(lw.operand(weight), index, 0)


def _constant_pad(lw: Lowering, node, x, pad, value=0.0):
    x = lw.operand(x)
    rank = len(x.shape)
    begin, end = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):          # PyTorch lists the last axis first
        begin[rank - 1 - i], end[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(begin + end) < 0:
        raise Unsupported("negative padding")
    return lw.b.pad(x, begin, end, mode="constant", value=float(value))


def _getitem(lw: Lowering, node, value, index):
    if index != 0 or not isinstance(value, tuple):
        raise Unsupported(f"output {index} of {node.args[0]} (jitnn gives the first only)")
    return value[0]


@dataclass(frozen=True)
class Entry:
    """How one aten overload runs on jitnn."""

    handler: Callable
    #: the jitnn ops it adds (each must be in the op registry)
    ops: tuple[str, ...]
    #: argument positions that may hold integer tensors (indices); every
    #: other tensor argument, and the result, must be float32
    index_args: tuple[int, ...] = ()
    #: moves or views data only: a partition of these alone stays in PyTorch
    movement: bool = False
    #: returns a tuple, of which jitnn gives the first element only
    multi_output: bool = False


def _entries() -> dict[Any, Entry]:
    table: dict[Any, Entry] = {
        aten.convolution.default: Entry(_convolution, ("conv2d", "conv_transpose2d")),
        aten.mm.default: Entry(_matmul, ("matmul",)),
        aten.bmm.default: Entry(_matmul, ("matmul",)),
        aten.matmul.default: Entry(_matmul, ("matmul",)),
        aten.addmm.default: Entry(_addmm, ("gemm",)),
        aten.relu.default: Entry(_unary("relu"), ("relu",)),
        aten.sigmoid.default: Entry(_unary("sigmoid"), ("sigmoid",)),
        aten.tanh.default: Entry(_unary("tanh"), ("tanh",)),
        aten.hardswish.default: Entry(_unary("hard_swish"), ("hard_swish",)),
        aten.hardsigmoid.default: Entry(_unary("hard_sigmoid", alpha=1.0 / 6.0, beta=0.5),
                                        ("hard_sigmoid",)),
        aten.hardtanh.default: Entry(_hardtanh, ("clamp",)),
        aten.clamp.default: Entry(_clamp, ("clamp",)),
        aten.clamp_min.default: Entry(_clamp_min, ("clamp",)),
        aten.clamp_max.default: Entry(_clamp_max, ("clamp",)),
        aten.leaky_relu.default: Entry(_leaky_relu, ("leaky_relu",)),
        aten.elu.default: Entry(_elu, ("elu",)),
        aten.silu.default: Entry(_silu, ("mul", "sigmoid")),
        aten.gelu.default: Entry(_gelu, ("gelu", "add", "mul", "pow", "tanh")),
        aten.exp.default: Entry(_unary("exp"), ("exp",)),
        aten.log.default: Entry(_unary("log"), ("log",)),
        aten.sqrt.default: Entry(_unary("sqrt"), ("sqrt",)),
        aten.rsqrt.default: Entry(_rsqrt, ("sqrt", "reciprocal")),
        aten.reciprocal.default: Entry(_unary("reciprocal"), ("reciprocal",)),
        aten.neg.default: Entry(_unary("neg"), ("neg",)),
        aten.abs.default: Entry(_unary("abs"), ("abs",)),
        aten.erf.default: Entry(_unary("erf"), ("erf",)),
        aten.pow.Tensor_Scalar: Entry(_pow, ("pow",)),
        aten.rsub.Scalar: Entry(_rsub, ("sub", "linear", "mul")),
        aten.rsub.Tensor: Entry(_rsub, ("sub", "linear", "mul")),
        aten.maximum.default: Entry(_plain_binary("maximum"), ("maximum",)),
        aten.minimum.default: Entry(_plain_binary("minimum"), ("minimum",)),
        aten.mean.dim: Entry(_reduction("reduce_mean"), ("reduce_mean",)),
        aten.mean.default: Entry(_reduce_all("reduce_mean"), ("reduce_mean",)),
        aten.sum.dim_IntList: Entry(_reduction("reduce_sum"), ("reduce_sum",)),
        aten.sum.default: Entry(_reduce_all("reduce_sum"), ("reduce_sum",)),
        aten.amax.default: Entry(_reduction("reduce_max"), ("reduce_max",)),
        aten.amin.default: Entry(_reduction("reduce_min"), ("reduce_min",)),
        aten._native_batch_norm_legit_no_training.default: Entry(
            _batch_norm, ("batch_normalization",), multi_output=True),
        aten.native_batch_norm.default: Entry(_native_batch_norm, ("batch_normalization",),
                                              multi_output=True),
        aten.native_layer_norm.default: Entry(_layer_norm, ("layer_normalization",),
                                              multi_output=True),
        aten.max_pool2d_with_indices.default: Entry(_max_pool, ("max_pool2d",),
                                                    multi_output=True),
        aten.avg_pool2d.default: Entry(_avg_pool, ("average_pool2d",)),
        aten._adaptive_avg_pool2d.default: Entry(
            _adaptive_avg_pool, ("global_average_pool2d", "average_pool2d")),
        aten.adaptive_avg_pool2d.default: Entry(
            _adaptive_avg_pool, ("global_average_pool2d", "average_pool2d")),
        aten._softmax.default: Entry(_softmax, ("softmax",)),
        aten._safe_softmax.default: Entry(_safe_softmax,
                                          ("softmax", "reduce_max", "equal", "where")),
        aten._scaled_dot_product_flash_attention_for_cpu.default: Entry(
            _flash_attention, ("scaled_dot_product_attention", "transpose"),
            multi_output=True),
        aten.scaled_dot_product_attention.default: Entry(
            _sdpa, ("scaled_dot_product_attention", "transpose")),
        aten.embedding.default: Entry(_embedding, ("gather",), index_args=(1,)),
        aten.constant_pad_nd.default: Entry(_constant_pad, ("pad",)),
        operator.getitem: Entry(_getitem, (), movement=True),
    }
    for name in ("add", "sub", "mul", "div"):
        for overload in ("Tensor", "Scalar"):
            handler = _binary(name) if name in ("add", "sub") else _plain_binary(name)
            table[getattr(getattr(aten, name), overload)] = Entry(handler, (name, "mul"))
    movement = {
        aten.view.default: _reshape, aten._unsafe_view.default: _reshape,
        aten.reshape.default: _reshape, aten.unsqueeze.default: _reshape,
        aten.squeeze.default: _reshape, aten.squeeze.dim: _reshape, aten.squeeze.dims: _reshape,
        aten.permute.default: _permute, aten.transpose.int: _transpose, aten.t.default: _t,
        aten.expand.default: _expand, aten.cat.default: _cat, aten.slice.Tensor: _slice,
        aten.select.int: _select, aten.clone.default: _identity, aten.alias.default: _identity,
        aten.detach.default: _identity, aten._to_copy.default: _to_copy,
    }
    ops = {_reshape: ("reshape",), _permute: ("transpose",), _transpose: ("transpose",),
           _t: ("transpose",), _expand: ("expand",), _cat: ("concat",), _slice: ("slice",),
           _select: ("slice", "reshape"), _identity: (), _to_copy: ()}
    for target, handler in movement.items():
        table[target] = Entry(handler, ops[handler], movement=True)
    return table


#: every aten overload jitnn can run, with its handler (see :class:`Entry`)
ATEN: dict[Any, Entry] = _entries()


def supported_targets() -> dict[Any, Entry]:
    """The entries of :data:`ATEN` whose jitnn ops are all registered (the
    operator support table the partitioner starts from)."""
    registered = {op.name for op in registry.ops()}
    return {target: entry for target, entry in ATEN.items() if set(entry.ops) <= registered}
