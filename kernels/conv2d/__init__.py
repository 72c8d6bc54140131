"""2-D convolution on blocked ``nChw{cb}c`` tensors, with a fused epilogue.

Computes ``y = act(conv(x, w) + bias + residual)`` with WebNN semantics
(padding ``[top, bottom, left, right]``, strides, dilations, groups; output
size ``floor((in - ((k - 1) * d + 1) + pad_begin + pad_end) / s) + 1``).

Buffers (float32, C-contiguous; ``cb`` is the channel block: 1, 4, 8, 16 or
32, and ``ic_bn = oc_bn = cb``; ``C_phys = ceil(C / cb) * cb``, same for O):

* input, blocked:    ``x: (N, C_phys // cb, H, W, cb)``; padding lanes zero
* input, plain (first-layer path only): ``x: (N, C, H, W)``
* output:            ``y: (N, O_phys // cb, OH, OW, cb)``; every element is
  written (so ``y`` may come from ``np.empty``) and its padding lanes are zero
  whatever the activation does to 0
* bias:              ``bias: (O_phys,)``, padding lanes zero
* residual:          ``residual: (N, O_phys // cb, OH, OW, cb)`` like ``y``;
  it may be ``y`` itself (accumulate in place), never a partial overlap
* packed filters, one layout per path (:func:`pack_conv2d_filter` picks):

  ============ ===================================================== =========
  path         packed filter                                         when
  ============ ===================================================== =========
  direct       ``(O_phys//cb, R, KH, KW, cb, cb)``                   default
               (``OIhw{cb}i{cb}o``, ``filter_packing.pack_filter``):
               ``R = C_phys//cb`` without groups; grouped, the
               longest input-block range of an output block, and
               ``[ob, r]`` is input block ``begins[ob] + r``
               (``filter_packing.packed_window_begins``)
  1x1          same as direct with ``KH = KW = 1``                    1x1
  depthwise    ``(O_phys//cb, KH, KW, cb)``: ``[ob, kh, kw, o]`` is   groups==C>1
               the weight of output channel ``ob*cb + o``
  first_layer  ``(O_phys//cb, 1, KH, KW, C, cb)`` (``OIhw{C}i{cb}o``,  plain
               one input "block" holding all C channels)              input
  ============ ===================================================== =========

Paths: direct (any kernel, strides, dilations, padding, groups), 1x1 (the
same kernel: with one tap it is a GEMM over pixels), first_layer (plain nchw
input read in place: C lanes of stride H*W instead of a blocked input) and
depthwise (its own kernel, vectorized over the channel block). A direct 3x3
filter with stride 1 may instead run Winograd F(4x4, 3x3) (:mod:`.winograd`,
its filter transformed from the direct packing at the first launch): the
``algorithm`` argument and :func:`conv2d_algorithm` decide.

Modules (the public API is this one; the others are its parts):

* :mod:`.plan`: path and algorithm choice, geometry, blocking, the checks;
* :mod:`.geometry`: the records a driver gets, tile shapes, output size;
* :mod:`.direct` (direct and first layer), :mod:`.conv1x1`,
  :mod:`.depthwise`, :mod:`.winograd`: the drivers and their tiles;
* :mod:`.register_tile`: the LLVM IR register tiles they run;
* :mod:`.padding`: the zero-padded input copy and per-thread scratch.

How it is fast (see the design notes on Numba kernels):

* **Register tile.** A tile computes ``P`` output pixels for ``B`` output
  blocks: ``P x B x cb`` accumulators, 6 x 2 x 8 = 12 ymm registers for
  cb 8 on AVX2, plus 2 weight vectors and 1 broadcast = 15 of 16
  (:func:`conv_tile_shape`). A whole tile (all P pixels, whole output blocks)
  runs one of the intrinsics in :mod:`.register_tile` (``conv_tile``,
  ``fma_tile`` for 1x1, ``depthwise_tile``), written in LLVM IR so the
  accumulators stay in registers from the bias load to the store. The same
  steps written in numba, with the accumulators in a fixed-size stack array,
  are the fallback for partial tiles (and a plain input's tile of one output
  block, which LLVM schedules into spills): there LLVM keeps the
  array in memory and every tile stores and reloads it twice (~110 cycles, a
  third of a 1x1 conv over 32 input channels). ``cb`` (and the lanes per
  input block ``ci``) are compile-time constants: one driver per block size,
  built by a factory, whose helpers ask for literals with ``numba.literally``.
* **Row tiles.** With 32 vector registers, a direct tile whose P pixels are
  adjacent in one output row addresses them as one base pointer plus
  constants (:func:`.geometry.row_tile_pixels`: P divides the interior's
  width, so rows hold whole tiles): the offset tables' tile keeps a general
  register per pixel and spills past 6 to 8 pixels. Groups narrower than a
  tile's B blocks (ResNeXt's 8-wide groups on 8-channel blocks) run tiles of
  one block and up to 28 pixels, so that no product is with zeros between
  groups (:func:`.plan.tile_input_share`); the compact grouped filter needs
  it too (it has one window of input blocks a block, shared by a tile).
* **Moved-back last tile.** When a run of pixels (direct: the interior
  region; depthwise: a row's interior columns) does not end on a whole tile,
  its last tile starts ``P`` pixels before the end instead: it recomputes some
  pixels and stores only its own (storing them again would add an in-place
  residual twice), so it runs as a whole tile. The 1x1 path runs a register
  tile of just the leftover pixels instead (its tiles are cheap to vary: at
  7 x 7 the moved-back tile recomputed 5 of 54 pixels).
* **No wraparound checks.** Flat 1-D buffers are indexed with
  ``np.uint64(offset)``: numba adds ``if i < 0: i += n`` to every signed index
  it cannot prove non-negative, which breaks vectorization.
* **Borders without a padded copy.** Interior output pixels (every tap inside
  the input) are numbered row-major over their rectangle and tiled P at a
  time across row ends; they read the input in place. Border pixels (rows and
  columns where a tap falls in the padding) go through the same loop on a
  small zero-padded copy of just their taps; when border pixels are 10 % of
  the output or more (small images) the wrapper pads the whole input once
  instead and every pixel is interior. Depthwise tiles run along rows; its
  border columns are done one pixel at a time with clipped taps, unless the
  interior of a row is narrower than a tile (then the input is padded).
* **Epilogue in registers.** Accumulators start from bias (+ residual);
  relu/clamp (a min/max) is applied before the single store, which writes
  padding lanes as zero. Other activations (leaky_relu, sigmoid, tanh,
  hard_swish, gelu) run right after the store, on the tile still in L1, on
  the real lanes only.
* **Few calls.** A numba call with array arguments updates reference counts
  atomically (cache-line traffic between threads), so one call runs many tiles.
* **Parallel** over (batch x output-block groups x chunks of about one output
  row of pixels). When all weights fit in L2 a task runs every group for its
  pixels, so a tile's input stays in L1 across groups. Grouped convolutions
  read only the input blocks of their groups
  (``filter_packing.group_input_block_ranges``; a tile's B blocks read the
  union; grouped filters are packed compactly, so a tile's B blocks must
  share one range: the plan runs tiles of one block where they would not).
  The 1x1 driver's threads take their tasks from a shared counter; the
  direct and depthwise drivers use numba's static shares of a ``prange``.
  On one thread each driver runs its serial compile (``_config.parallel_kernel``:
  no OpenMP region; 1-2 % faster, and 3-4x quicker to compile).
* **Aligned weights.** Packed filters start on a 64-byte boundary
  (:func:`..buffers.aligned_empty`); callers should allocate x and y the
  same way.
* **What runs is the driver's copy.** A driver's object code embeds the
  helpers it calls, optimized a second time with it, and that copy is what
  runs when the driver comes from the cache. A second pass unrolled the lane
  loop by 2 and spilled the pixel pointers (25 % slower) while the lane stride
  was a runtime value; with the literal 1 it does not. The tests check the
  drivers' assembly for this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from ..buffers import aligned_empty
from ..epilogue import NONE
from ..filter_packing import group_input_block_ranges, pack_filter
from . import plan, winograd
from .geometry import BLOCK_SIZES, conv1x1_tile_shape, conv2d_output_size, conv_tile_shape
from .padding import BoundScratchRun, _pad_input, _scratch_buffer, pad_blocked
from .plan import (ALGORITHMS, PATHS, _blocks, _check_buffer, _Conv2dLaunch, _plan_conv2d,
                   conv2d_algorithm, conv2d_path)

__all__ = ["ALGORITHMS", "BLOCK_SIZES", "PATHS", "BoundScratchRun", "PackedConv2dFilter",
           "aligned_empty",
           "bind_conv2d_launch", "conv1x1_tile_shape", "conv2d_algorithm", "conv2d_flops",
           "conv2d_forward", "conv2d_launch", "conv2d_output_size", "conv2d_path",
           "conv_tile_shape", "pack_conv2d_filter", "pad_blocked", "plan",
           "run_conv2d_launch", "winograd"]


# --- the packed filter ------------------------------------------------------

@dataclass(frozen=True)
class PackedConv2dFilter:
    """A filter packed once for one block size, with what the kernels need.

    ``weights`` has the layout of ``path`` (see the module docstring);
    ``ib_begin``/``ib_end`` (direct, 1x1, first_layer) give each output block
    the input blocks ``[begin, end)`` it reads (grouped: ``weights`` holds a
    window of ``weights.shape[1]`` input blocks per output block that covers
    them, :func:`.filter_packing.packed_window_begins`).
    """
    path: str
    block: int
    in_channels: int
    out_channels: int
    groups: int
    kernel: tuple[int, int]
    weights: np.ndarray
    ib_begin: np.ndarray
    ib_end: np.ndarray
    #: :func:`conv2d_forward`'s launch plans for this filter, by shapes and options
    launches: dict = field(default_factory=dict, compare=False, repr=False)
    #: the Winograd transform of the weights, made by the first launch that needs it
    transformed: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def out_blocks(self) -> int:
        return -(-self.out_channels // self.block)

    @property
    def multiplier(self) -> int:
        """Output channels per input channel (depthwise)."""
        return self.out_channels // self.in_channels


def pack_conv2d_filter(w_oihw, in_channels: int, groups: int, block: int,
                       input_is_plain: bool = False) -> PackedConv2dFilter:
    """Choose the path for this filter and pack it.

    ``w_oihw``: ``(O, in_channels // groups, KH, KW)``, any strides (hwio, ohwi
    and ihwo filters come in as transposed views); cast to float32.
    ``input_is_plain``: the input will be plain ``nchw`` (the first-layer path,
    meant for ``in_channels < block``; it accepts any C). Otherwise depthwise
    when ``groups == in_channels > 1``, 1x1 for 1x1 kernels, else direct.
    """
    w = np.asarray(w_oihw)
    if w.ndim != 4:
        raise ValueError(f"conv2d filter must be 4-D oihw, got shape {w.shape}")
    if block not in BLOCK_SIZES:
        raise ValueError(f"block must be one of {BLOCK_SIZES}, got {block}")
    out_channels, group_in, kh, kw = (int(s) for s in w.shape)
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ValueError(f"groups={groups} must divide in_channels={in_channels} "
                         f"and out_channels={out_channels}")
    if group_in != in_channels // groups:
        raise ValueError(f"filter {w.shape} expects {group_in * groups} input channels "
                         f"with groups={groups}, the input has {in_channels}")
    if min(out_channels, kh, kw) < 1:
        raise ValueError(f"conv2d filter has an empty dimension: {w.shape}")
    if w.dtype != np.float32:
        w = w.astype(np.float32)
    ob = _blocks(out_channels, block)
    path = conv2d_path((kh, kw), in_channels, groups, input_is_plain)
    if path == "first_layer":
        packed = aligned_empty((ob, 1, kh, kw, in_channels, block))
        pack_filter(w, groups, packed)
        begin, end = np.zeros(ob, np.int64), np.ones(ob, np.int64)
    elif path == "depthwise":
        padded = np.zeros((ob * block, kh, kw), np.float32)
        padded[:out_channels] = w[:, 0]
        packed = aligned_empty((ob, kh, kw, block))
        packed[...] = padded.reshape(ob, block, kh, kw).transpose(0, 2, 3, 1)
        begin = end = np.zeros(0, np.int64)
    else:
        # grouped: each output block keeps only its window of input blocks
        # (RegNetX-400MF's 25 groups of 16 channels on 400: 1/25th of the dense
        # block-diagonal filter); without groups the window is every block
        begin, end = group_input_block_ranges(in_channels, out_channels, groups, block, block)
        packed = aligned_empty((ob, int(np.max(end - begin)), kh, kw, block, block))
        pack_filter(w, groups, packed)
    return PackedConv2dFilter(path, block, in_channels, out_channels, groups, (kh, kw),
                              packed, begin, end)


# --- running a convolution ------------------------------------------------------

_MAX_LAUNCHES = 16                   # per filter: shapes x options seen


def conv2d_forward(x, packed: PackedConv2dFilter, out, strides=(1, 1), dilations=(1, 1),
                   padding=(0, 0, 0, 0), bias=None, residual=None, activation=NONE,
                   param0=0.0, param1=0.0, num_threads=None, algorithm="auto"):
    """``out = act(conv(x, w) + bias + residual)``, writing every element of ``out``.

    ``x``: ``(N, C_phys//cb, H, W, cb)``, or ``(N, C, H, W)`` for the
    first_layer path. ``out``: ``(N, O_phys//cb, OH, OW, cb)``. ``bias``:
    ``(O_phys,)`` or ``(O,)`` float32, or None. ``residual``: like ``out`` (may
    be ``out`` itself), or None. ``activation``: a code from
    :mod:`kernels.epilogue` with its two parameters. ``padding`` is
    ``[top, bottom, left, right]``. ``num_threads``: numba's current thread
    count, when the caller knows it (asking numba costs ~1.5 us).
    ``algorithm``: one of :data:`ALGORITHMS` (see :func:`conv2d_algorithm`).
    Raises ValueError on any mismatch (the kernels themselves do not check
    bounds). Returns ``out``.

    The geometry, path choice and blocking are worked out once per shapes and
    options and kept on ``packed`` (a model runs the same convolutions again
    and again: that work cost more than a small convolution); every call
    still checks its arrays. The same as ``run_conv2d_launch(conv2d_launch(...),
    x, out, bias, residual)``.
    """
    launch = conv2d_launch(x, packed, out, strides, dilations, padding, bias is None,
                           residual is None, activation, param0, param1, num_threads,
                           algorithm)
    return _run_conv2d(launch, x, out, bias, residual)


def conv2d_launch(x, packed: PackedConv2dFilter, out, strides=(1, 1), dilations=(1, 1),
                  padding=(0, 0, 0, 0), no_bias=True, no_residual=True, activation=NONE,
                  param0=0.0, param1=0.0, num_threads=None,
                  algorithm="auto") -> _Conv2dLaunch:
    """The launch :func:`conv2d_forward` runs for these shapes and options
    (planned once, then kept on ``packed``): a caller that runs one convolution
    again and again may keep it and call :func:`run_conv2d_launch`."""
    try:
        key = (x.shape, out.shape, _as_key(strides), _as_key(dilations), _as_key(padding),
               bool(no_bias), bool(no_residual), int(activation), float(param0),
               float(param1), algorithm,
               # the 1x1 path's blocking, the depthwise bands and Winograd's
               # chunks (a 3x3 filter's "direct" path) depend on the thread count
               (num_threads or numba.get_num_threads())
               if packed.path in ("1x1", "depthwise", "direct") else 0)
        launch = packed.launches.get(key)
    except (AttributeError, TypeError, ValueError):
        key = launch = None              # malformed: the full checks below say why
    if launch is None:
        launch = _plan_conv2d(x, packed, out, strides, dilations, padding,
                              not no_residual, activation, param0, param1, algorithm)
        if key is not None:
            if len(packed.launches) >= _MAX_LAUNCHES:
                packed.launches.clear()
            packed.launches[key] = launch
    return launch


def _as_key(value):
    return value if isinstance(value, (int, tuple)) else tuple(value)


def _check_array(name, array):
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise ValueError(f"conv2d: {name} must be a float32 numpy array, "
                         f"got {getattr(array, 'dtype', type(array))}")
    if not array.flags.c_contiguous:
        raise ValueError(f"conv2d: {name} must be C-contiguous")


def run_conv2d_launch(launch: _Conv2dLaunch, x, out, bias=None, residual=None):
    """Run a launch from :func:`conv2d_launch` on arrays of the shapes it was
    planned for (checked, with everything else :func:`conv2d_forward` checks
    at every call). Returns ``out``."""
    return _run_conv2d(launch, x, out, bias, residual)


def _run_conv2d(launch: _Conv2dLaunch, x, out, bias, residual):
    """The per-call checks of the arrays (the plan checked everything else for
    these shapes), then the driver."""
    args = _checked_args(launch, x, out, bias, residual)
    if launch.pad_copy is not None:
        args = (_pad_input(args[0], *launch.pad_copy)[0],) + args[1:]
    if launch.scratch:
        args += (_scratch_buffer("winograd", launch.scratch),)
    launch.driver(*args)
    return out


def bind_conv2d_launch(launch: _Conv2dLaunch, x, out, bias=None, residual=None):
    """``(driver, args)``: ``driver(*args)`` runs ``run_conv2d_launch(launch,
    x, out, bias, residual)`` again, for a caller that runs one convolution on
    the same arrays again and again (they are checked here, once; their shapes,
    dtypes and addresses cannot change while the caller holds them). A launch
    that pads the input first or needs scratch memory (Winograd) binds a
    :class:`.padding.BoundScratchRun`: both come from this thread's scratch
    buffers at every run, as in :func:`run_conv2d_launch`."""
    args = _checked_args(launch, x, out, bias, residual)
    if launch.pad_copy is not None or launch.scratch:
        return BoundScratchRun(launch.driver, launch.pad_copy, launch.scratch), args
    return launch.driver, args


def _checked_args(launch: _Conv2dLaunch, x, out, bias, residual) -> tuple:
    """The driver's arguments for these arrays, after every check
    :func:`run_conv2d_launch` makes (x unpadded: the caller pads it)."""
    _check_array("x", x)
    _check_array("out", out)
    if x.shape != launch.x_shape or out.shape != launch.out_shape:
        raise ValueError(f"conv2d: this launch was planned for x {launch.x_shape} and out "
                         f"{launch.out_shape}, got {x.shape} and {out.shape}")
    if np.may_share_memory(x, out):
        raise ValueError("conv2d: out must not overlap x")
    if bias is None:
        bias = launch.zero_bias
    else:
        if not isinstance(bias, np.ndarray) or bias.dtype != np.float32 or bias.ndim != 1:
            raise ValueError("conv2d: bias must be a 1-D float32 array")
        lanes, channels = launch.bias_lanes, launch.out_channels
        if bias.shape[0] == channels and channels != lanes:
            bias = np.concatenate([bias, np.zeros(lanes - channels, np.float32)])
        _check_buffer("bias", bias, (lanes,))
    # (ravel: a view of these C-contiguous arrays, cheaper than reshape)
    yf = out.ravel()
    if residual is not None:
        _check_buffer("residual", residual, out.shape)
        resf = residual.ravel()
        # the same buffer as out (a fused in-place add) or no overlap; two
        # arrays of one shape overlap at the same start iff their first
        # elements do (cheaper than asking for both data pointers)
        if residual is not out and np.may_share_memory(residual, out) and \
                not np.may_share_memory(resf[:1], yf[:1]):
            raise ValueError("conv2d: residual must be out itself or not overlap it")
    else:
        resf = yf
    return (x.ravel(), launch.weights, bias, resf, yf) + launch.tail


def conv2d_flops(packed: PackedConv2dFilter, batch: int, out_h: int, out_w: int) -> int:
    """Multiply-adds x 2 of the logical convolution (for GFLOP/s figures)."""
    KH, KW = packed.kernel
    group_in = packed.in_channels // packed.groups
    return 2 * batch * packed.out_channels * out_h * out_w * group_in * KH * KW
