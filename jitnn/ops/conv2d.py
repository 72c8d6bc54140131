"""conv2d: WebNN's 2-D convolution, run on blocked ``nChw{b}c`` data.

``y = act(conv(x, w) + bias)``. Shape inference and validation happen at the
call, before anything runs; the result is a pending Tensor in the blocked
layout (plain under the ``"plain"`` policy), computed when read. A conv fed
by a blocked tensor reads it as it is, so a chain of convs converts layout
once on the way in and once on the way out. The scheduler may fold a following
batch normalization into the filter and bias, and a per-channel constant
multiplied or added after it (a layer scale), and fuse a residual add and an
activation into the kernel's epilogue (see jitnn/scheduler.py). A filter
Tensor is packed once per block size (and folded normalization) and reused by
every later call (pass the same Tensor).
"""

from __future__ import annotations

import functools
import weakref
from typing import NamedTuple

import numpy as np

from .. import layouts, tuning
from ..errors import JitnnValueError
from ..kernels import conv2d as conv_kernels
from ..kernels import epilogue
from ..kernels import layout as layout_kernels
from ..kernels.filter_packing import packed_window_begins
from ..kernels import vmath
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import Token
from ..tensor import Node, Tensor, Value
from ._common import (Binding, as_tensor, blocked_buffer, context_of, frozen_options, int_pair,
                      padding4, parse_activation, pending, plain_buffer, value_of)
from . import squeeze_excite
from .eltwise import batch_norm_scale_shift, operand_sig, resolve_operand


def conv2d_output_size(size: int, kernel: int, stride: int, dilation: int,
                       pad_begin: int, pad_end: int) -> int:
    """WebNN: ``floor((in - ((k - 1) * d + 1) + pad_begin + pad_end) / s) + 1``."""
    return (size - ((kernel - 1) * dilation + 1) + pad_begin + pad_end) // stride + 1


def conv2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *,
                     strides=1, padding=0, dilations=1, groups: int = 1,
                     input_layout: str = "nchw", filter_layout: str = "oihw",
                     activation=None) -> np.ndarray:
    """The spec: a plain float64 numpy convolution with WebNN's semantics."""
    sh, sw = int_pair("conv2d", "strides", strides, 1)
    dh, dw = int_pair("conv2d", "dilations", dilations, 1)
    top, bottom, left, right = padding4("conv2d", padding)
    xs = np.asarray(x, np.float64)
    if input_layout == "nhwc":
        xs = xs.transpose(0, 3, 1, 2)
    ws = layouts.filter_as_oihw(np.asarray(w, np.float64), filter_layout)
    n, c, h, wd = xs.shape
    o, group_in, kh, kw = ws.shape
    oh = conv2d_output_size(h, kh, sh, dh, top, bottom)
    ow = conv2d_output_size(wd, kw, sw, dw, left, right)
    padded = np.zeros((n, c, h + top + bottom, wd + left + right))
    padded[:, :, top:top + h, left:left + wd] = xs
    out = np.zeros((n, o, oh, ow))
    group_out = o // groups
    for g in range(groups):
        xg = padded[:, g * group_in:(g + 1) * group_in]
        wg = ws[g * group_out:(g + 1) * group_out]
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                           j * dw:j * dw + (ow - 1) * sw + 1:sw]
                out[:, g * group_out:(g + 1) * group_out] += np.einsum(
                    "nchw,oc->nohw", patch, wg[:, :, i, j])
    if bias is not None:
        out += np.asarray(bias, np.float64)[None, :, None, None]
    code, p0, p1 = parse_activation("conv2d", activation)
    out = epilogue.activation_reference(out, code, p0, p1)
    return out.transpose(0, 2, 3, 1) if input_layout == "nhwc" else out


def _check_rank4(op: str, name: str, t: Tensor) -> None:
    if t.ndim != 4:
        raise JitnnValueError(f"{op}: {name} must be 4-D, got shape {t.shape}")


def conv2d(x, w, bias=None, *, strides=1, padding=0, dilations=1, groups: int = 1,
           input_layout: str = "nchw", filter_layout: str = "oihw",
           activation=None) -> Tensor:
    """2-D convolution with WebNN's options; returns a pending, blocked Tensor.

    ``x``: ``(N, C, H, W)`` (``input_layout="nchw"``) or ``(N, H, W, C)``
    (``"nhwc"``). ``w``: ``oihw`` ``(O, C/groups, KH, KW)``, or ``hwio``,
    ``ohwi``, ``ihwo``. ``bias``: ``(O,)``. ``strides``/``dilations``: an int or
    an (h, w) pair; ``padding``: an int, an (h, w) pair or ``[top, bottom,
    left, right]``. ``activation``: None, ``"relu"``, ``"relu6"``,
    ``("clamp", min, max)``, ``("leaky_relu", alpha)``, ``"sigmoid"``, ``"tanh"``,
    ``"hard_swish"`` or ``"gelu"``, fused into the kernel. The output has the
    input's layout convention: ``(N, O, OH, OW)`` or ``(N, OH, OW, O)``.
    """
    op = "conv2d"
    ctx = context_of(op, x, w, bias)
    x = as_tensor(ctx, x, op, "x")
    w = as_tensor(ctx, w, op, "filter")
    bias_t = None if bias is None else as_tensor(ctx, bias, op, "bias")
    # The single-op graph: validation and shape inference, cached per context
    # by everything they depend on (unhashable options just skip the cache).
    key = (op, x.shape, x.layout, x._axes, w.shape, None if bias_t is None else bias_t.shape,
           *frozen_options((strides, padding, dilations, groups, input_layout, filter_layout,
                            activation)))
    info = ctx.single_op_graph(key, lambda: _conv2d_signature(
        ctx, x, w, bias_t, strides, padding, dilations, groups, input_layout, filter_layout,
        activation))
    x_value = value_of(x)
    attrs = dict(info["attrs"], x=x_value, w=value_of(w), bias=value_of(bias_t))
    if info["needs_reorder"]:
        # a plain input the kernel reads blocked: a reorder step (shared)
        attrs["blocked_inputs"] = ((x_value, attrs["block"], input_layout),)
    inputs = (x_value, attrs["w"]) + ((attrs["bias"],) if bias_t is not None else ())
    # info's token: nodes made from one validated signature have the same
    # attrs once their inputs are matched up (plans of such DAGs are reused)
    node = Node(op, inputs, kind="conv2d", attrs=attrs, run=run_conv2d, flops=info["flops"],
                sig=info["token"])
    return pending(ctx, info["shape"], info["layout"], node, axes=input_layout)


def _conv2d_signature(ctx, x: Tensor, w: Tensor, bias_t: Tensor | None, strides, padding,
                      dilations, groups, input_layout: str, filter_layout: str,
                      activation) -> dict:
    """Validate a conv2d call and infer what its node needs (no tensor values)."""
    op = "conv2d"
    if input_layout not in layouts.ACTIVATION_LAYOUTS:
        raise JitnnValueError(f"{op}: input_layout must be 'nchw' or 'nhwc', got {input_layout!r}")
    if filter_layout not in layouts.FILTER_LAYOUTS:
        raise JitnnValueError(
            f"{op}: filter_layout must be one of {layouts.FILTER_LAYOUTS}, got {filter_layout!r}")
    _check_rank4(op, "input x", x)
    _check_rank4(op, "filter w", w)
    sh, sw = int_pair(op, "strides", strides, 1)
    dh, dw = int_pair(op, "dilations", dilations, 1)
    pad = padding4(op, padding)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise JitnnValueError(f"{op}: groups must be an int >= 1, got {groups!r}")
    groups = int(groups)
    code, p0, p1 = parse_activation(op, activation)

    if input_layout == "nchw":
        n, c, h, wd = x.shape
    else:
        n, h, wd, c = x.shape
    o, group_in, kh, kw = layouts.filter_oihw_shape(w.shape, filter_layout)
    shapes = f"(x {x.shape} {input_layout}, w {w.shape} {filter_layout}, groups {groups})"
    if min(x.shape) < 1 or min(w.shape) < 1:
        raise JitnnValueError(f"{op}: empty dimension {shapes}")
    if c % groups or group_in * groups != c:
        raise JitnnValueError(
            f"{op}: input has {c} channels but the filter expects {group_in * groups} {shapes}")
    if o % groups:
        raise JitnnValueError(
            f"{op}: the filter's {o} output channels do not divide into {groups} groups {shapes}")
    oh = conv2d_output_size(h, kh, sh, dh, pad[0], pad[1])
    ow = conv2d_output_size(wd, kw, sw, dw, pad[2], pad[3])
    if oh < 1 or ow < 1:
        raise JitnnValueError(
            f"{op}: the output would be {oh}x{ow}: input {h}x{wd}, kernel {kh}x{kw}, "
            f"strides {(sh, sw)}, dilations {(dh, dw)}, padding {list(pad)}")
    if bias_t is not None and bias_t.shape != (o,):
        raise JitnnValueError(
            f"{op}: bias must have shape ({o},) for {o} output channels, got {bias_t.shape}")

    block = ctx.block
    # A plain NCHW input with fewer channels than a block (an RGB image) is
    # read as it is by the first-layer kernel instead of padded up to a block.
    first_layer = layouts.block_of(x.layout) is None and input_layout == "nchw" and c < block
    needs_reorder = not first_layer and not (
        layouts.block_of(x.layout) == block and x._axes == input_layout)
    attrs = {
        "strides": (sh, sw), "dilations": (dh, dw), "padding": pad, "groups": groups,
        "filter_layout": filter_layout, "in_channels": c, "out_channels": o,
        "first_layer": first_layer, "block": block, "axes": input_layout,
        # what scheduler passes may add: epilogue and folded normalization
        "activation": (code, p0, p1), "residual": None, "bn": None,
        # per-channel constants folded after the normalization: ("mul", "add"
        # or "sub", the eltwise operand description), in order
        "affine": (),
        "blocked_inputs": (),
    }
    out_shape = (n, o, oh, ow) if input_layout == "nchw" else (n, oh, ow, o)
    return {
        "attrs": attrs, "needs_reorder": needs_reorder, "shape": out_shape,
        "flops": 2 * n * o * oh * ow * group_in * kh * kw,
        "token": Token(op),
        # the "plain" policy converts every result back to standard layout
        "layout": layouts.blocked_tag(block) if ctx.policy != "plain" else input_layout,
    }


class _Conv2dMemo(NamedTuple):
    """What :func:`run_conv2d` keeps on a node between its runs (a replayed
    program, or a flush reusing an earlier plan, runs the same nodes again),
    saving ~10 us of Python per conv (~25 us with a folded batch
    normalization, whose scale and shift it would compute again).
    Valid while the filter and bias Values still hold the same derived forms
    (a Value computed anew drops them and makes new ones), the folded batch
    normalization has the same statistics Values (immutable, so the same
    numbers) and epsilon, the input has the same shape and the thread count
    is the same. Weak references: a memo keeps nothing alive (a filter
    computed per run must not outlive its run)."""
    threads: int
    x_shape: tuple
    filter_key: tuple
    packed: weakref.ref
    bias_key: tuple | None
    bias: weakref.ref | None
    launch: weakref.ref
    blocked: tuple
    plain_result: bool
    #: the folded batch normalization: weak references to its (mean,
    #: variance, scale, bias) Values (None where it has none), then epsilon
    bn: tuple | None
    #: what explain prints for the step once its node is gone (the executor
    #: copies them to the plan's step): the kernel's layouts and the
    #: algorithm's line, as chosen when this launch was planned
    layouts: tuple = ()
    notes: tuple = ()
    #: the folded per-channel constants: weak references to their Values (a
    #: number as it is), see _affine_refs
    affine: tuple = ()


def _bn_refs(bn: tuple | None) -> tuple | None:
    """What a memo keeps of a folded batch normalization (see _Conv2dMemo)."""
    if bn is None:
        return None
    return tuple(None if v is None else weakref.ref(v) for v in bn[:4]) + (bn[4],)


def _same_bn(refs: tuple | None, bn: tuple | None) -> bool:
    if refs is None or bn is None:
        return refs is None and bn is None
    if refs[4] != bn[4]:
        return False
    for ref, v in zip(refs[:4], bn[:4]):
        if (v is None) != (ref is None) or (v is not None and ref() is not v):
            return False
    return True


def _affine_refs(affine: tuple) -> tuple:
    """What a memo keeps of the folded per-channel constants (see _Conv2dMemo)."""
    return tuple((op, weakref.ref(operand[1]) if isinstance(operand[1], Value) else operand[1])
                 for op, operand in affine)


def _same_affine(refs: tuple, affine: tuple) -> bool:
    if len(refs) != len(affine):
        return False
    for (op, ref), (op_now, operand) in zip(refs, affine):
        now = operand[1]
        if op != op_now or (ref() is not now if isinstance(now, Value) else ref != now):
            return False
    return True


def _bias_home(a: dict) -> Value | None:
    """The Value a conv's padded bias is derived on: the filter's when a
    batch normalization or a per-channel constant is folded into it, else
    the bias's own."""
    return a["w"] if a["bn"] is not None or a["affine"] else a["bias"]


def run_conv2d(ctx, node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    """Run a (possibly fused) conv2d node: ``act(conv(x, w) + bias + residual)``,
    with a folded batch normalization in ``w`` and ``bias`` if the scheduler
    put one there. ``out``: a blocked buffer to write into, or None."""
    a = node.attrs
    block, axes = a["block"], a["axes"]
    source = a["x"]._materialize() if a["first_layer"] else \
        blocked_buffer(ctx, a["x"], block, axes)
    residual = None if a["residual"] is None else \
        blocked_buffer(ctx, a["residual"], block, axes)
    memo = node.memo
    launch = bias = None
    if memo is not None and memo.threads == ctx.num_threads and \
            memo.x_shape == source.shape and _same_bn(memo.bn, a["bn"]) and \
            _same_affine(memo.affine, a["affine"]):
        packed = memo.packed()
        launch = memo.launch()
        bias = None if memo.bias is None else memo.bias()
        if (packed is None or a["w"]._derived.get(memo.filter_key) is not packed
                or (memo.bias is not None
                    and (bias is None or _bias_home(a)._derived.get(memo.bias_key) is not bias))):
            launch = None
    if launch is None:
        # planning packs the filter (on the context's threads) and may compile
        memo, launch, bias, dest = ctx.launcher.side_work(
            lambda: _plan_run(ctx, node, value, source, out))
    else:
        dest = _destination(memo.blocked, memo.plain_result, out)
    ctx.launcher.launch(conv_kernels.run_conv2d_launch, launch, source, dest, bias, residual)
    if not memo.plain_result:
        return dest
    result = conv_kernels.aligned_empty(value.shape)
    kernel = layout_kernels.blocked_to_nchw if axes == "nchw" else layout_kernels.blocked_to_nhwc
    return ctx.launcher.reorder(kernel, dest, result)


def bind_conv2d(ctx, node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_conv2d` just made for ``node`` (which
    returned ``result``), bound to its arrays (see :class:`Binding`); None when
    a run does more than that call (a result converted to plain layout, an
    input reordered first) or nothing is memoized. (An input padded first, into
    the thread's scratch buffer, is bound: ``BoundScratchRun``.)"""
    memo = node.memo
    a = node.attrs
    # (a folded batch normalization is never bound: a graph input's statistics
    # are new Values at every run, which the binding's checks would not see)
    if memo is None or memo.plain_result or a["bn"] is not None:
        return None
    launch, packed = memo.launch(), memo.packed()
    bias = None if memo.bias is None else memo.bias()
    reads, derived, arrays = [], [], {}
    blocked_key = ("blocked", a["block"], a["axes"])
    for role, value in (("x", a["x"]), ("residual", a["residual"])):
        if value is None:
            continue
        # a first-layer conv reads its x plain; everything else, blocked. (By
        # role, not by Value: a residual that is the conv's own plain x is
        # reordered to blocked at each run, so it cannot be bound.)
        read_in_place = (role == "x" and a["first_layer"]) or (
            layouts.block_of(value.layout) == a["block"] and value._axes == a["axes"])
        if value._data is None:
            return None
        if read_in_place:
            reads.append((value, value._data))
            arrays[role] = value._data
            continue
        # a plain value's blocked copy: a replay's reorder step writes it into
        # the same array at every run (Bindings.keep_reorder), which the
        # binding's check of derived forms confirms
        form = value._derived.get(blocked_key)
        if form is None or (role == "residual" and value is a["x"]):
            return None
        derived.append((value, blocked_key, form))
        arrays[role] = form
    if launch is None or packed is None or (memo.bias is not None and bias is None):
        return None
    bound = conv_kernels.bind_conv2d_launch(launch, arrays["x"], result, bias,
                                            arrays.get("residual"))
    if bound is None:
        return None
    derived.append((a["w"], memo.filter_key, packed))
    if memo.bias is not None:
        derived.append((_bias_home(a), memo.bias_key, bias))
    for _, operand in a["affine"]:
        # a folded constant's vector: a Value remade at every run (a graph
        # input's) has none at the next, and is never bound (executor.Bindings)
        if isinstance(operand[1], Value):
            key = _affine_key(operand, a["out_channels"])
            vector = operand[1]._derived.get(key)
            if vector is None:
                return None
            derived.append((operand[1], key, vector))
    return Binding(bound[0], bound[1], tuple(reads), tuple(derived), result, memo.threads)


# (the executor asks a node's run function for its binder)
run_conv2d.bind = bind_conv2d


def _plan_run(ctx, node: Node, value: Value, source: np.ndarray, out: np.ndarray | None):
    """``(memo, launch, bias, dest)``: the launch and padded bias of a conv2d
    node for this input, the memo that finds them again (kept on the node),
    and the array to write."""
    a = node.attrs
    block = a["block"]
    o = a["out_channels"]
    scale, shift = _folded_scale_shift(a)
    packed, filter_key = _packed_filter(
        ctx, a, None if scale is None else scale.astype(np.float32))
    o_phys = layouts.padded_channels(o, block)
    bias_array = bias_key = None
    if a["bias"] is not None and shift is None and scale is None:
        # padded to whole blocks once per bias tensor (a model runs it again)
        bias_key = ("conv2d_bias", o_phys)
        bias_values = plain_buffer(a["bias"])
        bias_array = a["bias"]._derive(bias_key, lambda: _padded_bias(bias_values, o, o_phys))
    elif shift is not None or a["bias"] is not None:
        # bias * scale + shift, rounded once (a bias-free conv scaled only needs none)
        folded = np.zeros(o, np.float64)
        if a["bias"] is not None:
            folded += a["bias"]._materialize()
        if scale is not None:
            folded *= scale
        if shift is not None:
            folded += shift
        folded_bias = _padded_bias(folded.astype(np.float32), o, o_phys)
        # kept on the filter by its numbers (bounded), for the memo to find
        bias_key = ("conv2d_bn_bias", folded_bias.tobytes())
        bias_array = _derive_fold(a["w"], bias_key, lambda: folded_bias)
    n = value.shape[0]
    oh, ow = (value.shape[2], value.shape[3]) if a["axes"] == "nchw" else value.shape[1:3]
    blocked = (n, o_phys // block, oh, ow, block)
    code, p0, p1 = a["activation"]
    plain_result = layouts.block_of(value.layout) is None
    dest = _destination(blocked, plain_result, out)
    algorithm = ctx.conv_algorithm
    key, candidates, formula = _tuning(node, value)
    if key is not None:
        decision = tuning.choose(key, lambda: _candidate_runs(
            ctx, a, source, packed, blocked, bias_array, candidates), formula)
        if decision is not None:
            algorithm = decision.choice
        if (formula if decision is None else decision.choice) != "winograd":
            _drop_winograd(packed, source.shape)
    launch = conv_kernels.conv2d_launch(
        source, packed, dest, a["strides"], a["dilations"], a["padding"], bias_array is None,
        a["residual"] is None, code, p0, p1, num_threads=ctx.num_threads,
        algorithm=algorithm)
    memo = _Conv2dMemo(ctx.num_threads, source.shape, filter_key, weakref.ref(packed),
                       bias_key, None if bias_key is None else weakref.ref(bias_array),
                       weakref.ref(launch), blocked, plain_result, _bn_refs(a["bn"]),
                       _kernel_layouts(node, value), tuple(_explain(node, value)),
                       _affine_refs(a["affine"]))
    node.memo = memo
    return memo, launch, bias_array, dest


def _affine_key(operand: tuple, channels: int) -> tuple:
    """The key of a folded constant's per-channel vector among its Value's derived forms."""
    return ("conv2d_affine",) + operand_sig(operand) + (channels,)


def _affine_vector(operand: tuple, channels: int) -> np.ndarray:
    """A folded constant (a number, a size-1 Value or a per-channel one) as
    ``channels`` float64 values; a Value's is kept among its derived forms
    (a bound call checks it is still there: the same Value, not remade)."""
    if operand[0] == "number":
        return np.full(channels, float(operand[1]))
    y = operand[1]
    values = resolve_operand(None, operand)     # a number, or (C,) float32 values
    return y._derive(_affine_key(operand, channels),
                     lambda: np.broadcast_to(np.asarray(values, np.float64), (channels,)).copy())


def _folded_scale_shift(a: dict) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The per-output-channel ``(scale, shift)`` (float64, None for 1 and 0)
    that the folded batch normalization and constants apply after the conv:
    ``(conv + bias) * scale + shift`` is what the node computes."""
    scale = shift = None
    if a["bn"] is not None:
        bn_scale, bn_shift = batch_norm_scale_shift(a["bn"])
        scale, shift = bn_scale.astype(np.float64), bn_shift.astype(np.float64)
    for op, operand in a["affine"]:
        vector = _affine_vector(operand, a["out_channels"])
        if op == "mul":
            scale = vector if scale is None else scale * vector
            shift = None if shift is None else shift * vector
        else:
            vector = vector if op == "add" else -vector
            shift = vector if shift is None else shift + vector
    return scale, shift


def _candidate_runs(ctx, a: dict, source: np.ndarray, packed, blocked: tuple,
                    bias: np.ndarray | None, candidates: tuple) -> dict:
    """For jitnn.tuning: each candidate algorithm as a run of this conv on its
    real input, filter and bias, into a scratch output (a residual the conv
    adds in place would be added again at every run, so none is read: it
    costs every candidate the same)."""
    scratch = conv_kernels.aligned_empty(blocked)
    code, p0, p1 = a["activation"]

    def run_of(algorithm: str):
        planned = []                     # at the first run (a transformed filter)

        def run() -> None:
            if not planned:
                planned.append(conv_kernels.conv2d_launch(
                    source, packed, scratch, a["strides"], a["dilations"], a["padding"],
                    bias is None, True, code, p0, p1, num_threads=ctx.num_threads,
                    algorithm=algorithm))
            conv_kernels.run_conv2d_launch(planned[0], source, scratch, bias, None)
        return run
    return {algorithm: run_of(algorithm) for algorithm in candidates}


def _drop_winograd(packed, x_shape: tuple) -> None:
    """After Winograd lost for input ``x_shape``: its launches for that shape,
    and the transformed filter (4x the direct one's bytes) unless a launch for
    another shape still runs Winograd."""
    for key in [k for k, launch in packed.launches.items()
                if launch.path == "winograd" and k[0] == x_shape]:
        del packed.launches[key]
    if not any(launch.path == "winograd" for launch in packed.launches.values()):
        packed.transformed.pop("winograd", None)


def _destination(blocked: tuple, plain_result: bool, out: np.ndarray | None) -> np.ndarray:
    """The blocked array the kernel writes: ``out`` when given and the result
    stays blocked, else a new one."""
    return out if out is not None and not plain_result else conv_kernels.aligned_empty(blocked)


def _padded_bias(bias: np.ndarray, channels: int, lanes: int) -> np.ndarray:
    padded = np.zeros(lanes, np.float32)
    padded[:channels] = bias
    return padded


#: batch-normalization folds a filter Value keeps, of each kind (packed filter,
#: folded bias), the oldest dropped first
MAX_BN_FOLDS = 4


def _derive_fold(w: Value, key: tuple, make):
    """``w._derive(key, make)`` for a form keyed by the numbers of a folded
    batch normalization: statistics passed anew at every call (numpy arrays,
    say) find the form their numbers made before, and statistics that change
    keep at most ``MAX_BN_FOLDS`` forms of ``key[0]``'s kind on ``w``."""
    def make_bounded():
        # (under w's lock, as _derive calls it)
        kind = key[0]
        folds = [k for k in w._derived if type(k) is tuple and k and k[0] == kind]
        for old in folds[:max(0, len(folds) - MAX_BN_FOLDS + 1)]:
            del w._derived[old]
        return make()
    return w._derive(key, make_bounded)


def _packed_filter(ctx, a: dict, bn_scale: np.ndarray | None):
    """The filter in the kernel's layout, packed once per filter tensor and
    configuration (and per folded scale: a batch normalization's and the
    constants', ``bn_scale``), and its key among the filter's derived forms."""
    w = a["w"]
    key = ("conv2d_filter", a["block"], a["filter_layout"], a["groups"], a["in_channels"],
           a["first_layer"])
    if bn_scale is not None:
        # by the scale's numbers, not the statistics' Values: new Values with
        # the same numbers (numpy arrays passed at every call) share the pack
        key = ("conv2d_filter_bn",) + key[1:] + (bn_scale.tobytes(),)

    packed = w._derived.get(key)
    if packed is not None:
        return packed, key
    # read outside the filter's lock (see Value._derive); a filter computed in
    # a blocked layout (another conv's output, say) is read back to plain
    weights = plain_buffer(w)

    def pack():
        oihw = layouts.filter_as_oihw(weights, a["filter_layout"])
        if bn_scale is not None:
            oihw = oihw * bn_scale[:, None, None, None]
        packed = conv_kernels.pack_conv2d_filter(oihw, a["in_channels"], a["groups"],
                                                 a["block"], input_is_plain=a["first_layer"])
        ctx.launcher.count(filter_packs=1, filter_pack_bytes=packed.weights.nbytes)
        return packed
    if bn_scale is not None:
        return _derive_fold(w, key, pack), key
    packed = w._derive(key, pack)
    if a["filter_layout"] == "oihw":
        # a graph's filter that nothing else reads is kept packed only (ResNet-50:
        # 97 MB less); a reader other than this packing gets it unpacked
        w._drop_plain(lambda: unpacked_filter(packed))
    return packed, key


def unpacked_filter(packed: "conv_kernels.PackedConv2dFilter") -> np.ndarray:
    """The ``oihw`` filter ``(O, C // groups, KH, KW)`` that
    ``pack_conv2d_filter`` packed into ``packed``: the inverse of its layouts
    (kernels/filter_packing.py): ``(OB, R, KH, KW, cb, ob)`` (direct, 1x1; with
    groups a window of R input blocks per output block, from
    ``packed_window_begins``), ``(OB, 1, KH, KW, C, ob)`` (first layer) and
    ``(OB, KH, KW, ob)`` (depthwise)."""
    o, c, groups = packed.out_channels, packed.in_channels, packed.groups
    weights = packed.weights
    kh, kw = packed.kernel
    if packed.path == "depthwise":
        flat = weights.transpose(0, 3, 1, 2).reshape(-1, kh, kw)
        return np.ascontiguousarray(flat[:o, None])
    ob, x, _, _, y, b = weights.shape
    # (OB, b, R * y, KH, KW): output channel ob * b + j's weights from input
    # channels window_begin[ob] * y onwards
    windows = weights.transpose(0, 5, 1, 4, 2, 3).reshape(ob, b, x * y, kh, kw)
    if groups == 1:
        return np.ascontiguousarray(windows.reshape(ob * b, x * y, kh, kw)[:o, :c])
    begins = packed_window_begins(packed.ib_begin, -(-c // y), x) * y
    group_in, group_out = c // groups, o // groups
    out = np.empty((o, group_in, kh, kw), np.float32)
    for oc in range(o):
        first = (oc // group_out) * group_in - begins[oc // b]   # in the window
        out[oc] = windows[oc // b, oc % b, first:first + group_in]
    return out


# --- how the scheduler treats a conv2d node (jitnn/registry.py) -------------------

def _tuning(node: Node, v: Value) -> tuple[str | None, tuple, str]:
    """``(key, candidates, formula)`` of conv2d ``node`` making ``v``: the
    algorithms worth timing on this host and the key of that decision
    (jitnn.tuning; key None when there is nothing to choose: one candidate,
    or the context fixes the algorithm), and what the formula runs
    (``kernels.conv2d.conv2d_algorithm``: ``"winograd"`` or the filter's path)."""
    a = node.attrs
    ctx = v._ctx
    return _tuning_of(a["x"]._shape, a["axes"], a["w"]._shape, a["filter_layout"],
                      v._shape, a["strides"], a["dilations"], a["padding"], a["groups"],
                      a["first_layer"], a["block"], ctx.conv_algorithm, ctx.num_threads)


@functools.lru_cache(maxsize=1024)
def _tuning_of(x_shape: tuple, axes: str, w_shape: tuple, filter_layout: str, y_shape: tuple,
               strides: tuple, dilations: tuple, padding: tuple, groups: int,
               first_layer: bool, block: int, conv_algorithm: str,
               threads: int) -> tuple[str | None, tuple, str]:
    """:func:`_tuning` of one conv's shapes and options (asked at every
    scheduling and eager call: cached, 20 us of Python each)."""
    n, c, h, w = x_shape if axes == "nchw" else (x_shape[0], x_shape[3], x_shape[1],
                                                   x_shape[2])
    o, _, kh, kw = layouts.filter_oihw_shape(w_shape, filter_layout)
    out_h, out_w = (y_shape[2], y_shape[3]) if axes == "nchw" else y_shape[1:3]
    path = conv_kernels.conv2d_path((kh, kw), c, groups, first_layer)
    shape = (path, (kh, kw), strides, dilations, groups, c, o, n, out_h, out_w, block)
    formula = conv_kernels.conv2d_algorithm(*shape, conv_algorithm)
    candidates = conv_kernels.plan.conv2d_candidates(*shape)
    if conv_algorithm != "auto" or len(candidates) < 2:
        return None, candidates, formula
    key = tuning.conv2d_key(block, threads, "float32", n, c, h, w, o, (kh, kw), strides,
                            dilations, padding, groups)
    return key, candidates, formula


def conv2d_algorithm(node: Node, v: Value) -> str:
    """What runs conv2d ``node`` (with its fused ops) making ``v``:
    ``"winograd"`` or the packed filter's path, as measured on this host
    (jitnn.tuning) or else by the formula (``kernels.conv2d.conv2d_algorithm``)."""
    key, _, formula = _tuning(node, v)
    decision = None if key is None else tuning.decided(key)
    return formula if decision is None else decision.choice


def _explain(node: Node, v: Value) -> list[str]:
    """explain's line under a conv step: its algorithm, and whether it was
    measured on this host (with the timings) or chosen by the formula."""
    key, candidates, formula = _tuning(node, v)
    ctx = v._ctx
    if ctx.conv_algorithm != "auto":
        return [f"algorithm: {formula} (Context(conv_algorithm={ctx.conv_algorithm!r}))"]
    if key is None:
        return [f"algorithm: {formula} (the only one for this shape)"]
    if not tuning.enabled():
        return [f"algorithm: {formula} by formula ({tuning.ENV}=0: not measured)"]
    decision = tuning.decided(key)
    if decision is None:
        return [f"algorithm: {formula} by formula, not measured yet ({' or '.join(candidates)}: "
                f"timed at a first run that has both compiled)"]
    if not decision.settled:
        return [f"algorithm: {decision.choice} by formula: the host was too busy to measure "
                f"({decision.describe()}, spread too wide; measured again in a new process)"]
    return [f"algorithm: {decision.choice}, measured on this host: {decision.describe()} "
            f"(formula: {decision.formula})"]


def _kernel_layouts(node: Node, v: Value) -> tuple[str, ...]:
    """The layouts the conv's kernel reads: x (plain for a first layer), the
    packed filter (``OIhw8i8o``, or transformed for Winograd:
    ``winograd:36OI8i8o``, the 6 x 6 positions of ``G g Gt``, each an
    ``OI8i8o`` matrix), and a fused residual."""
    a = node.attrs
    b = a["block"]
    tag = layouts.blocked_tag(b)
    x = a["x"]._layout if a["first_layer"] else tag
    ic = a["in_channels"] if a["first_layer"] else b    # first layer: all C at once
    weights = f"OIhw{ic}i{b}o"
    if conv2d_algorithm(node, v) == "winograd":
        weights = f"winograd:{conv_kernels.winograd.POSITIONS}OI{b}i{b}o"
    return (x, weights) + ((tag,) if a["residual"] is not None else ())


def _inplace_inputs(v: Value, node: Node) -> list[Value]:
    """A fused residual's buffer may take the output; never the conv's own
    input (conv2d(h) + h): the kernel reads x around every pixel it writes."""
    residual = node.attrs["residual"]
    if residual is not None and residual._layout == v._layout and residual is not node.attrs["x"]:
        return [residual]
    return []


def _plain_conv(node: Node) -> bool:
    """Nothing in the epilogue yet: no folded normalization, residual or activation."""
    a = node.attrs
    return a["bn"] is None and a["residual"] is None and a["activation"][0] == epilogue.NONE


def _channel_constant(step: tuple, v: Value, result: Value) -> tuple | None:
    """``(op, operand)`` when eltwise ``step`` multiplies ``v`` by, adds to it
    or subtracts from it a constant of one value per channel (a number, a
    size-1 tensor, or one varying along the channel axis only: ``(C, 1, 1)``,
    ``(1, C, 1, 1)``), finite (and a scale nonzero: ``conv * -0.0`` keeps the
    sign of each zero it makes, a filter times it would not); else None.
    Constant: computed before this plan (a graph's constant, a tensor made
    from host data), neither a value this plan computes nor a graph's input
    (fed anew at every call)."""
    kind, op, other, reverse, operand = step if len(step) == 5 else (None,) * 5
    if kind != "binary" or op not in ("mul", "add", "sub") or (op == "sub" and reverse) \
            or result._shape != v._shape or other is v:
        return None
    if operand[0] == "number":
        usable = np.isfinite(operand[1]) and (op != "mul" or operand[1] != 0)
        return (op, operand) if usable else None
    if operand[0] not in ("scalar", "lanes") or (operand[0] == "lanes" and operand[2][0] != 1):
        return None                            # per (n, c), or along another axis
    y = operand[1]
    if y._data is None or y._graph_input:
        return None
    values = plain_buffer(y)
    if not np.isfinite(values).all() or (op == "mul" and not values.all()):
        return None
    return op, operand


def _fold(node: Node, consumer: Node, v: Value, result: Value) -> Node | None:
    """conv2d -> batch_normalization (per channel, inference) as one conv2d with
    the normalization folded into its filter and bias; then a per-channel
    constant multiplied or added (a layer scale: ``gamma * conv(x)``), folded
    into them too (``w[o] * s[o]``, ``bias[o] * s[o] + t[o]``), so that a
    residual add after it fuses into the conv's epilogue."""
    a = node.attrs
    if consumer.kind != "eltwise" or consumer.inputs[0] is not v \
            or len(consumer.attrs["steps"]) != 1:
        return None
    step = consumer.attrs["steps"][0]
    if step[0] != "affine":
        constant = _channel_constant(step, v, result)
        if constant is None or a["residual"] is not None \
                or a["activation"][0] != epilogue.NONE:
            return None
        extra = (constant[1][1],) if constant[1][0] != "number" else ()
        return node.replace(inputs=node.inputs + extra,
                            attrs={**a, "affine": a["affine"] + (constant,)},
                            fused=node.fused + (consumer.op,))
    if not _plain_conv(node) or a["affine"]:
        return None
    bn = step[1]                               # (mean, variance, scale, bias, epsilon)
    if any(t is not None and t._data is None for t in bn[:4]):
        return None                            # statistics not computed yet
    extra = tuple(t for t in bn[:4] if t is not None)
    return node.replace(inputs=node.inputs + extra, attrs={**node.attrs, "bn": bn},
                        fused=node.fused + (consumer.op,))


def _absorb(node: Node, consumer: Node, v: Value, result: Value) -> Node | None:
    """conv2d -> add(same-shape tensor) -> activation as one launch (``act(conv
    + bias + residual)``), in that order only. The activation may be an
    ``activation`` step or ``hard_sigmoid`` (a ``math`` step); SiLU, written
    ``x * sigmoid(x)``, comes as an activation step from the scheduler's
    ``fuse_swish`` pass."""
    if consumer.kind != "eltwise" or len(consumer.attrs["steps"]) != 1:
        return None
    kind, *args = consumer.attrs["steps"][0]
    main = consumer.inputs[0]
    # add commutes: the conv's result may be either operand of the add
    residual = None
    if kind == "binary" and args[0] == "add":
        residual = args[1] if main is v else main if args[1] is v else None
    elif main is not v:
        return None
    attrs = dict(node.attrs)
    inputs = node.inputs
    if kind == "activation" and attrs["activation"][0] == epilogue.NONE:
        attrs["activation"] = tuple(args)
    elif (kind == "math" and args[0] == vmath.MATH_OPS["hard_sigmoid"]
          and attrs["activation"][0] == epilogue.NONE):
        # a squeeze-and-excitation gate: min(max(alpha x + beta, 0), 1)
        attrs["activation"] = (epilogue.HARD_SIGMOID, args[1], args[2])
    elif (residual is not None and attrs["residual"] is None
          and attrs["activation"][0] == epilogue.NONE
          and residual._shape == v._shape and residual._axes == v._axes
          and residual is not v):
        attrs["residual"] = residual
        inputs = inputs + (residual,)
        block = layouts.block_of(v._layout)
        if layouts.block_of(residual._layout) != block:
            attrs["blocked_inputs"] = attrs["blocked_inputs"] + ((residual, block, v._axes),)
    else:
        return None
    return node.replace(inputs=inputs, attrs=attrs, fused=node.fused + (consumer.op,))


register_kind(NodeKind("conv2d", role="anchor", writes_into_buffer=True,
                       kernel_layouts=_kernel_layouts, explain=_explain,
                       inplace_inputs=_inplace_inputs,
                       fold=_fold, absorb=_absorb, pattern=squeeze_excite.match))

register_op(OpDef(
    "conv2d", conv2d, conv2d_reference, webnn="conv2d", onnx=("Conv",), kinds=("conv2d",),
    layouts="reads plain (first layer, C < block) or blocked, writes blocked",
    fusion="anchor: folds a following batch normalization and per-channel constant mul/add "
           "(a layer scale), absorbs a residual add and an activation into its epilogue"))
