"""Squeeze-and-excitation blocks found in a plan, run as one kernel launch.

The pattern, as every exporter writes it (MobileNetV3, EfficientNet,
RegNetY, ...)::

    s = global_average_pool2d(x)          # (N, C, 1, 1); or reduce_mean over H, W
    h = conv2d(s, w1, b1) + activation    # 1x1, C -> R (relu, SiLU, ...)
    g = conv2d(h, w2, b2) + gate          # 1x1, R -> C (sigmoid, hard_sigmoid)
    y = mul(x, g)                         # either operand order

with the activations already in the convs' epilogues (the scheduler's
``fuse_epilogues`` and ``fuse_swish`` run first). It becomes one
``squeeze_excite`` node computing ``y`` from ``x`` (kernels/squeeze_excite.py):
four launches fewer per block, and the two 1x1 convs on a 1x1 plane run as
matrix-vector products instead of conv tiles. Only where ``s``, ``h`` and
``g`` are read by nothing else; ``x`` may be (it is not removed).

The scheduler's ``fuse_patterns`` pass calls :func:`match` for each conv2d
step (the conv making ``g``), through the conv2d kind's ``pattern`` hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import layouts
from ..kernels import reduce as reduce_kernels
from ..kernels import squeeze_excite as se_kernels
from ..kernels.buffers import aligned_empty
from ..registry import NodeKind, register_kind
from ..tensor import Node, Value
from ._common import Binding, blocked_buffer, plain_buffer

if TYPE_CHECKING:
    from ..context import Context
    from ..passes import PlanQueries


def _pointwise_on_one_pixel(node: Node | None, value: Value | None) -> bool:
    """A plain 1x1 conv2d (no residual, folded normalization or constant,
    groups or padding) on blocked NCHW data, making a 1x1 plane."""
    if node is None or node.kind != "conv2d":
        return False
    a = node.attrs
    w_shape = layouts.filter_oihw_shape(a["w"]._shape, a["filter_layout"])
    return (a["residual"] is None and a["bn"] is None and not a["affine"] and a["groups"] == 1
            and not a["first_layer"] and a["axes"] == "nchw" and not any(a["padding"])
            and tuple(w_shape[2:]) == (1, 1) and value._shape[2:] == (1, 1))


def _plane_means(pool: Node | None, pooled: Value) -> bool:
    """Whether ``pool`` makes ``pooled`` as the (N, C, 1, 1) means of its
    input's planes: a global average pool, or a mean over H and W kept as 1s
    (timm's SE modules, RegNetY's among them, write ``x.mean((2, 3),
    keepdim=True)``: an ONNX ReduceMean)."""
    if pool is None or len(pool.inputs) != 1:
        return False
    if pool.op == "global_average_pool2d":
        return True
    x = pool.inputs[0]
    # reduced over the spatial axes only (a blocked reduction is never over
    # N or C), all of them: no H or W left above 1
    return (pool.op == "reduce_mean" and pool.kind == "reduce_blocked"
            and pool.attrs["code"] == reduce_kernels.MEAN and not pool.attrs["plain"]
            and pool.attrs["axes"] == "nchw" and x.ndim == 4
            and pooled._shape == tuple(x._shape[:2]) + (1, 1))


def match(node: Node, value: Value, plan: "PlanQueries"):
    """``(y, node)``: the squeeze-and-excitation block whose excite conv is
    ``node`` (making ``value``), as one node computing the block's output
    ``y``, and the values it replaces; or None."""
    if not _pointwise_on_one_pixel(node, value):
        return None
    squeeze_value = node.attrs["x"]
    squeeze = plan.producer(squeeze_value)
    if not _pointwise_on_one_pixel(squeeze, squeeze_value) \
            or plan.only_reader(squeeze_value) is not node:
        return None
    pooled = squeeze.attrs["x"]
    pool = plan.producer(pooled)
    if not _plane_means(pool, pooled) or plan.only_reader(pooled) is not squeeze:
        return None
    x = pool.inputs[0]
    block = node.attrs["block"]
    if x.ndim != 4 or x._axes != "nchw" or layouts.block_of(x._layout) != block \
            or squeeze.attrs["block"] != block or x._shape[1] != node.attrs["out_channels"]:
        return None
    product = plan.only_reader(value)
    steps = None if product is None else product.attrs.get("steps")
    if product is None or product.kind != "eltwise" or not steps or len(steps) != 1 \
            or steps[0][:2] != ("binary", "mul") or len(product.inputs) != 2 \
            or {id(t) for t in product.inputs} != {id(x), id(value)}:
        return None
    end = plan.value_of(product)
    if end._shape != x._shape or end._layout != x._layout:
        return None
    inputs = (x, squeeze.attrs["w"], node.attrs["w"]) + tuple(
        b for b in (squeeze.attrs["bias"], node.attrs["bias"]) if b is not None)
    attrs = {"x": x, "squeeze": squeeze.attrs, "excite": node.attrs, "block": block,
             "channels": x._shape[1]}
    fused = (pool.op, squeeze.label, node.label, product.op)
    flops = pool.flops + squeeze.flops + node.flops + product.flops
    se = Node("squeeze_excite", inputs, kind="squeeze_excite", attrs=attrs,
              run=run_squeeze_excite, fused=fused, flops=flops)
    return end, se, (pooled, squeeze_value, value)


def _matrix(w: Value, layout: str) -> np.ndarray:
    """A 1x1 conv's filter as the ``(out, in)`` matrix."""
    oihw = layouts.filter_as_oihw(plain_buffer(w), layout)
    return oihw.reshape(oihw.shape[0], oihw.shape[1])


def _weights(conv: dict, lanes: int, transpose_to: str,
             derived: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's form of one conv's filter and bias (see the kernel's
    buffers), made once per filter and bias Value; ``derived`` gets the
    ``(value, key, form)`` of each (what a :class:`Binding` checks)."""
    w, bias = conv["w"], conv["bias"]
    layout = conv["filter_layout"]
    if transpose_to == "squeeze":            # (C, R): the mean of channel c times row c
        key: tuple = ("se_squeeze", layout)
        matrix = w._derive(key, lambda: np.ascontiguousarray(_matrix(w, layout).T, np.float32))
        width = matrix.shape[1]
    else:                                    # (R, C_phys), zero past C
        def make() -> np.ndarray:
            m = _matrix(w, layout)
            padded = np.zeros((m.shape[1], lanes), np.float32)
            padded[:, :m.shape[0]] = m.T
            return padded
        key = ("se_excite", layout, lanes)
        matrix = w._derive(key, make)
        width = lanes
    if layout == "oihw":
        # a graph's filter that only this block reads is kept in the kernel's form
        # alone, as a conv keeps its packed filter (Value._drop_plain)
        out_channels = w._shape[0]
        w._drop_plain(lambda: np.ascontiguousarray(
            (matrix if transpose_to == "squeeze" else matrix[:, :out_channels]).T
        ).reshape(w._shape))
    if derived is not None:
        derived.append((w, key, matrix))
    if bias is None:
        return matrix, np.zeros(width, np.float32)
    values = plain_buffer(bias)

    def padded_bias() -> np.ndarray:
        out = np.zeros(width, np.float32)
        out[:values.shape[0]] = values
        return out
    padded = bias._derive(("se_bias", width), padded_bias)
    if derived is not None:
        derived.append((bias, ("se_bias", width), padded))
    return matrix, padded


def run_squeeze_excite(ctx: "Context", node: Node, value: Value,
                       out: np.ndarray | None) -> np.ndarray:
    a = node.attrs
    block = a["block"]
    x = blocked_buffer(ctx, a["x"], block, "nchw")
    lanes = x.shape[1] * x.shape[4]
    squeeze, b1 = _weights(a["squeeze"], lanes, "squeeze")
    excite, b2 = _weights(a["excite"], lanes, "excite")
    if out is None:
        out = aligned_empty(x.shape)
    ctx.launcher.launch(se_kernels.squeeze_excite, x, squeeze, b1, a["squeeze"]["activation"],
                        excite, b2, a["excite"]["activation"], a["channels"], out)
    return out


def bind_squeeze_excite(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_squeeze_excite` just made for ``node``
    (which returned ``result``), bound to its arrays (a replayed program runs
    it as one call: jitnn/executor.py); None when ``x`` was reordered for it
    (a blocked copy made at every run)."""
    a = node.attrs
    x = a["x"]
    if x._data is None or layouts.block_of(x._layout) != a["block"] or x._axes != "nchw":
        return None
    lanes = x._data.shape[1] * x._data.shape[4]
    derived: list = []
    squeeze, b1 = _weights(a["squeeze"], lanes, "squeeze", derived)
    excite, b2 = _weights(a["excite"], lanes, "excite", derived)
    kernel, args = se_kernels.bind_squeeze_excite(
        x._data, squeeze, b1, a["squeeze"]["activation"], excite, b2,
        a["excite"]["activation"], a["channels"], result)
    return Binding(kernel, args, ((x, x._data),), tuple(derived), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_squeeze_excite.bind = bind_squeeze_excite


def _inplace_inputs(v: Value, node: Node) -> list[Value]:
    """The block's input may take its output (each plane is averaged before
    any is scaled)."""
    x = node.attrs["x"]
    return [x] if x._shape == v._shape and x._layout == v._layout else []


register_kind(NodeKind("squeeze_excite", writes_into_buffer=True,
                       inplace_inputs=_inplace_inputs))
