"""Elementwise kernels on blocked tensors: activations, binary ops with the
broadcasts CNNs use, batch normalization (inference), and fused chains of
them, each in one pass over memory.

Buffers (float32, C-contiguous; ``cb`` is the channel block, one of 1, 4, 8,
16, 32; ``C_phys = ceil(C / cb) * cb``; lanes past ``C`` are padding):

* input and output:      ``x, out: (N, C_phys // cb, H, W, cb)``. Padding lanes
  of ``x`` are zero; every element of ``out`` is written and its padding lanes
  are stored as zero whatever the ops make of them (sigmoid(0) = 0.5, 0 / 0 =
  NaN, a bias...). ``out`` may be ``x`` itself (in place).
* same-shape operand:    ``y: (N, C_phys // cb, H, W, cb)``, like ``x`` (may be
  ``out`` itself)
* per-channel operand:   ``v: (C_phys,)`` or ``(C,)`` (padded with zeros here),
  broadcast over N, H, W
* per-(n, c) operand:    ``v: (N, C_phys)`` or ``(N, C)``, or the output of
  global pooling ``(N, C_phys // cb, 1, 1, cb)`` (same memory as
  ``(N, C_phys)``), broadcast over H, W
* scalar operand:        a Python number or a 0-d array
* plain arrays (``*_plain`` functions): ``x, out, y``: any shape, C-contiguous,
  no padding; ``y`` the same shape or a scalar. A plain NCHW tensor is also a
  blocked tensor with ``cb = 1``: ``x[..., None]`` is ``(N, C, H, W, 1)``, so the
  blocked functions give plain tensors the per-channel and per-(n, c)
  broadcasts too.

Other numpy broadcasts (rank-3 operands, broadcasting ``x`` itself against a
larger ``y``, ...) are the runtime's job: materialize the broadcast operand
as a same-shape tensor (``np.ascontiguousarray(np.broadcast_to(y, shape))``,
then reorder it like ``x``) and pass it as a same-shape operand.

How it works. Every function here is a *program* run by one engine,
:func:`eltwise_chain`. A program is a list of steps applied to each element:

=============== ========================================= =================
step            meaning                                   built with
=============== ========================================= =================
activation      ``t = act(t)`` (codes of ``epilogue``)    :func:`activation_step`
math            ``t = f(t)`` (codes of ``vmath``: abs,    :func:`math_step`
                exp, log, erf, sin, elu, pow by a
                scalar, ...)
binary          ``t = t op y`` (``y op t`` if reverse)    :func:`binary_step`
affine          ``t = t * a[c] + b[c]`` (one FMA)         :func:`affine_step`
=============== ========================================= =================

Binary ops: add, sub, mul, div, maximum, minimum (NaN from either side), pow
(libm's ``pow`` per element: a scalar loop) and prelu (``t if t >= 0 else t *
y``, the slope ``y``).

The engine works like numexpr: it walks the buffer in *spans* of 512 floats
(2 KiB, a multiple of every channel block, so a span holds whole pixels and
element ``j`` of a span is channel lane ``j % cb``) and runs every step over
one span before moving to the next. The first step reads the span of ``x``,
intermediate results go to a scratch span in L1, and the last step writes
``out`` (padding lanes masked to zero). So a chain of k ops reads ``x`` (and
its same-shape operands) once from memory and writes ``out`` once, instead of
k round trips. Each step is one simple loop that LLVM's loop vectorizer turns
into AVX2 code; the step's kind and op are looked up once per span, not per
element. Per-channel and per-(n, c) operands are expanded once per channel
block into a span-long "lane pattern", so the loops never compute a channel
index. The block size, channel count and program are runtime values, so the
engine compiles once (about 10 s, then cached) for every block size and op.

Parallel over contiguous ranges of (N x channel blocks x chunks of a channel
block's plane), one range per thread; small tensors run serially (a parallel
region costs a few microseconds).

The spec is the ops' float64 references (``jitnn.registry.reference(name)``):
tests/test_eltwise_kernels.py checks every function here against them (a
fused chain against their composition).
"""

from __future__ import annotations

import numbers

import numpy as np
from numba import prange, types
from numba.extending import intrinsic

from ._config import jit, numba_threads
from .epilogue import (ACTIVATIONS, CLAMP, GELU, HARD_SWISH, LEAKY_RELU, NONE, RELU,
                       SIGMOID, SILU, TANH, activate, nan_maximum, nan_minimum)
from .vmath import MATH_OPS, fma, gelu as vector_gelu, math_span, scalar_pow

#: the highest math step code (kernels/vmath.py)
_MATH_LAST = max(MATH_OPS.values())
#: binary op codes
ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, PRELU = range(8)
#: binary op name -> code
BINARY_OPS = {"add": ADD, "sub": SUB, "mul": MUL, "div": DIV,
              "maximum": MAXIMUM, "minimum": MINIMUM, "pow": POW, "prelu": PRELU}

#: step kinds in a compiled program (column 0)
STEP_ACTIVATION, STEP_LANES, STEP_TENSOR, STEP_AFFINE, STEP_MATH = range(5)

#: floats per span: each step runs over one span before the next step starts
#: (2 KiB, so a span of x, two scratch spans, the lane patterns and a
#: span of out all stay in L1)
SPAN = 512
#: most steps in one program (longer chains: run several passes)
MAX_STEPS = 16
#: most same-shape tensor operands in one program
MAX_TENSORS = 4
#: elements per parallel task (a multiple of SPAN): 32 KiB of x
_CHUNK = 16 * SPAN
#: below this many elements run serially
_PARALLEL_MIN = 32768

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_NO_VECTORS = np.zeros(1, np.float32)       # `vectors` of a program without lane operands


# --- pointers -----------------------------------------------------------------

@intrinsic
def _pointer(typingctx, base, offset):
    """``_pointer(array, i)``: the address of ``array.flat[i]`` as a float32
    pointer (C-contiguous arrays; no bounds check); ``_pointer(pointer, i)``:
    ``pointer + i``. The span helpers index such pointers (``p[j]``) rather
    than array slices: a slice is a new array object, and numba counts
    references to it with atomic instructions (a few hundred cycles per span,
    more when two threads share the count), while a pointer is a plain value."""
    if isinstance(base, types.Array) and base.layout == "C" and base.dtype == types.float32:
        def data(context, builder, value):
            return context.make_array(base)(context, builder, value).data
    elif base == types.CPointer(types.float32):
        def data(context, builder, value):
            return value
    else:
        return None
    if not isinstance(offset, types.Integer):
        return None
    signature = types.CPointer(types.float32)(base, types.intp)

    def codegen(context, builder, sig, args):
        return builder.gep(data(context, builder, args[0]), [args[1]])

    return signature, codegen


# --- span helpers: one step over m elements, dst[j] = f(src[j], ...) ----------
#
# Each is a plain loop with one operation (pointers in, see _pointer), which
# LLVM's loop vectorizer turns into AVX2 code. A step never writes the span
# it reads: for ``t[j] = max(t[j], 0)`` in place LLVM emits a *masked store*
# ("store only where t < 0"), which is microcoded and 4x slower on this CPU;
# so steps alternate between two scratch spans.

@jit()
def _copy_span(src, dst, m):
    for j in range(m):
        dst[j] = src[j]


@jit()
def _activation_span(src, dst, m, code, p0, p1):
    """``dst = act(src)``; one loop per activation so each loop body holds one
    (``activate`` folds to it for a constant code)."""
    if code == RELU:
        for j in range(m):
            dst[j] = activate(src[j], RELU, p0, p1)
    elif code == CLAMP:
        for j in range(m):
            dst[j] = activate(src[j], CLAMP, p0, p1)
    elif code == LEAKY_RELU:
        for j in range(m):
            dst[j] = activate(src[j], LEAKY_RELU, p0, p1)
    elif code == SIGMOID:
        for j in range(m):
            dst[j] = activate(src[j], SIGMOID, p0, p1)
    elif code == TANH:
        for j in range(m):
            dst[j] = activate(src[j], TANH, p0, p1)
    elif code == HARD_SWISH:
        for j in range(m):
            dst[j] = activate(src[j], HARD_SWISH, p0, p1)
    elif code == GELU:
        for j in range(m):
            dst[j] = vector_gelu(src[j])            # erf written out: vectorizes
    elif code == SILU:                              # x * sigmoid(x), x read once
        for j in range(m):
            dst[j] = activate(src[j], SILU, p0, p1)
    else:
        _copy_span(src, dst, m)


@jit()
def _binary_span(src, y, dst, m, op, reverse):
    """``dst = src op y``, or ``y op src`` when ``reverse`` (sub, div)."""
    if op == ADD:
        for j in range(m):
            dst[j] = src[j] + y[j]
    elif op == SUB:
        if reverse:
            for j in range(m):
                dst[j] = y[j] - src[j]
        else:
            for j in range(m):
                dst[j] = src[j] - y[j]
    elif op == MUL:
        for j in range(m):
            dst[j] = src[j] * y[j]
    elif op == DIV:
        if reverse:
            for j in range(m):
                dst[j] = y[j] / src[j]
        else:
            for j in range(m):
                dst[j] = src[j] / y[j]
    elif op == MAXIMUM:
        for j in range(m):
            dst[j] = nan_maximum(src[j], y[j])
    elif op == MINIMUM:
        for j in range(m):
            dst[j] = nan_minimum(src[j], y[j])
    elif op == POW:
        if reverse:
            for j in range(m):
                dst[j] = scalar_pow(y[j], src[j])
        else:
            for j in range(m):
                dst[j] = scalar_pow(src[j], y[j])
    elif reverse:  # PRELU, the slope in src
        for j in range(m):
            dst[j] = y[j] if y[j] >= _ZERO else y[j] * src[j]
    else:
        for j in range(m):
            dst[j] = src[j] if src[j] >= _ZERO else src[j] * y[j]


@jit()
def _affine_span(src, a, b, dst, m):
    """``dst = src * a + b`` (one FMA per element, on every target: a folded
    batch norm's ``x * a`` and ``b = -mean * a`` cancel, and two roundings
    were 12 ULP off where one is 6, WPT's tolerance)."""
    for j in range(m):
        dst[j] = fma(src[j], a[j], b[j])


@jit()
def _masked_store_span(src, keep, dst, m):
    """``dst = src`` where ``keep`` is 1, 0 where it is 0 (padding lanes): a
    select, so a NaN or sigmoid(0) computed there never reaches memory."""
    for j in range(m):
        dst[j] = src[j] if keep[j] != _ZERO else _ZERO


@jit()
def _fill_patterns(patterns, keep, program, vectors, n, c0, cb, valid, count):
    """Expand each lane operand for the spans of image ``n``, channel block
    starting at channel ``c0``: element ``j`` of a span is channel
    ``c0 + j % cb`` (a span holds whole pixels), whose value is
    ``vectors[offset + n * n_stride + c * c_stride]``; step ``s`` gets rows
    ``2s`` (and ``2s + 1``, an affine step's bias) of ``patterns``. ``keep[j]``
    is 1 for the ``valid`` real lanes, 0 for padding lanes (filled only when
    there are padding lanes). Only the first ``count`` elements (a multiple
    of ``cb``: the spans of a plane smaller than SPAN are that short).

    One pixel's ``cb`` values are gathered, then copied pixel by pixel (a
    copy of contiguous lanes, which vectorizes): element by element with a
    lane counter, the loop stayed scalar, ~0.6 us a plane, more than a 7 x 7
    plane's own work (DenseNet's batch norms before its convolutions)."""
    if valid < cb:
        for lane in range(cb):
            keep[lane] = _ONE if lane < valid else _ZERO
        for j0 in range(cb, count, cb):
            for lane in range(cb):
                keep[j0 + lane] = keep[lane]
    for s in range(program.shape[0]):
        kind = program[s, 0]
        if kind == STEP_LANES or kind == STEP_AFFINE:
            n_stride, c_stride = program[s, 5], program[s, 6]
            first = program[s, 3] + n * n_stride + c0 * c_stride
            second = program[s, 4] + n * n_stride + c0 * c_stride
            row = patterns[2 * s]
            for lane in range(cb):
                row[lane] = vectors[first + lane * c_stride]
            for j0 in range(cb, count, cb):
                for lane in range(cb):
                    row[j0 + lane] = row[lane]
            if kind == STEP_AFFINE:
                row = patterns[2 * s + 1]
                for lane in range(cb):
                    row[lane] = vectors[second + lane * c_stride]
                for j0 in range(cb, count, cb):
                    for lane in range(cb):
                        row[j0 + lane] = row[lane]


# --- the engine ----------------------------------------------------------------

@jit(standalone=True)
def _chain_tasks(xf, outf, t0, t1, t2, t3, program, params, vectors, geom, first, last):
    """Run tasks ``[first, last)`` of a program (see :func:`eltwise_chain`).

    ``xf``, ``outf`` and the same-shape operands ``t0 .. t3`` (arguments of
    their own, not a tuple, so that a replay can hand a bound call another
    graph input's array in their place): the flat ``(N*CB*H*W*cb,)``
    buffers. ``program``: int64 ``(steps, 7)`` rows ``[kind, binary op or
    activation or math code, reverse, offset or tensor index, second offset,
    n_stride, c_stride]``; ``params``: float32 ``(steps, 2)`` activation and math parameters;
    ``vectors``: every lane operand, concatenated. ``geom``: ``(CB,
    plane_len, cb, channels, chunk, chunks_per_plane, direct)`` where a plane
    is one ``(n, channel block)`` of ``plane_len = H*W*cb`` floats, a task is
    one ``chunk`` (a multiple of SPAN) of one plane, and ``direct`` says the
    last step may write ``out`` itself (out is none of the inputs).

    Per span: the first step reads x, each step writes one half of
    ``scratch`` (the other half than it read), and the last one writes out
    (or the result is stored to out, masked, when the channel block has
    padding lanes).
    """
    CB, plane_len, cb, channels, chunk, chunks_per_plane, direct = geom
    steps = program.shape[0]
    scratch = np.empty((2, SPAN), np.float32)
    keep = np.empty(SPAN, np.float32)
    patterns = np.empty((2 * steps, SPAN), np.float32)
    tensor_data = (_pointer(t0, 0), _pointer(t1, 0), _pointer(t2, 0), _pointer(t3, 0))
    filled = -1                              # the plane the patterns are for
    for task in range(first, last):
        plane = task // chunks_per_plane
        n = plane // CB
        c0 = (plane % CB) * cb
        valid = min(cb, channels - c0)       # real lanes in this channel block
        masked = valid < cb
        if plane != filled:
            _fill_patterns(patterns, keep, program, vectors, n, c0, cb, valid,
                           min(SPAN, plane_len))
            filled = plane
        start = plane * plane_len + (task % chunks_per_plane) * chunk
        end = min(start + chunk, (plane + 1) * plane_len)
        for base in range(start, end, SPAN):
            m = min(SPAN, end - base)
            src = _pointer(xf, base)
            for s in range(steps):
                if s == steps - 1 and direct and not masked:
                    dst = _pointer(outf, base)
                else:
                    dst = _pointer(scratch, (s % 2) * SPAN)
                kind = program[s, 0]
                if kind == STEP_ACTIVATION:
                    _activation_span(src, dst, m, program[s, 1], params[s, 0], params[s, 1])
                elif kind == STEP_MATH:
                    math_span(src, dst, m, program[s, 1], params[s, 0], params[s, 1])
                elif kind == STEP_LANES:
                    _binary_span(src, _pointer(patterns, 2 * s * SPAN), dst, m,
                                 program[s, 1], program[s, 2])
                elif kind == STEP_TENSOR:
                    y = _pointer(tensor_data[program[s, 3]], base)
                    _binary_span(src, y, dst, m, program[s, 1], program[s, 2])
                else:  # STEP_AFFINE
                    _affine_span(src, _pointer(patterns, 2 * s * SPAN),
                                 _pointer(patterns, (2 * s + 1) * SPAN), dst, m)
                src = dst
            if masked:
                _masked_store_span(src, _pointer(keep, 0), _pointer(outf, base), m)
            elif not direct or steps == 0:
                _copy_span(src, _pointer(outf, base), m)


@jit(parallel=True)
def _chain_parallel(xf, outf, t0, t1, t2, t3, program, params, vectors, geom, tasks, groups):
    """The ``prange`` driver: ``groups`` (one per thread) contiguous ranges of
    tasks, so scratch buffers and lane patterns are set up once per range."""
    for g in prange(groups):
        # (int64: a prange index is unsigned, which would be a specialization
        # of _chain_tasks of its own)
        first = np.int64(g) * tasks // groups
        _chain_tasks(xf, outf, t0, t1, t2, t3, program, params, vectors, geom, first,
                     (np.int64(g) + 1) * tasks // groups)


# --- steps and operands (Python) -----------------------------------------------

def _activation_code(activation) -> int:
    code = ACTIVATIONS.get(activation) if isinstance(activation, str) else activation
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)) \
            or not (NONE <= code <= GELU or code == SILU):
        raise ValueError(f"eltwise: unknown activation {activation!r} "
                         f"(expected one of {sorted(ACTIVATIONS)} or a code 0-{GELU} or "
                         f"{SILU} (SiLU))")
    return int(code)


def _op_code(op) -> int:
    code = BINARY_OPS.get(op) if isinstance(op, str) else op
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)) \
            or not ADD <= code <= PRELU:
        raise ValueError(f"eltwise: unknown binary op {op!r} "
                         f"(expected one of {sorted(BINARY_OPS)} or a code 0-{PRELU})")
    return int(code)


def _math_code(op) -> int:
    code = MATH_OPS.get(op) if isinstance(op, str) else op
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)) \
            or not 0 <= code <= _MATH_LAST:
        raise ValueError(f"eltwise: unknown math function {op!r} "
                         f"(expected one of {sorted(MATH_OPS)} or a code 0-{_MATH_LAST})")
    return int(code)


def activation_step(activation, param0=0.0, param1=0.0):
    """A chain step ``t = act(t)``; ``activation`` is a name or an epilogue code."""
    return ("activation", _activation_code(activation), float(param0), float(param1))


def math_step(function, param0=0.0, param1=0.0):
    """A chain step ``t = f(t)``; ``function`` is a name of ``vmath.MATH_OPS``
    or its code (``param0``: elu's alpha, hard_sigmoid's and linear's alpha
    with ``param1`` their beta, pow's exponent)."""
    return ("math", _math_code(function), float(param0), float(param1))


def binary_step(op, operand, reverse=False):
    """A chain step ``t = t op operand`` (``operand op t`` with ``reverse``).

    ``op``: a name from :data:`BINARY_OPS` or its code. ``operand``: for the
    kernels, any operand of the module docstring (same-shape blocked tensor,
    per-channel vector, per-(n, c), scalar); for the references, its plain
    form (NCHW tensor, ``(C,)``, ``(N, C)``, scalar)."""
    return ("binary", _op_code(op), operand, bool(reverse))


def affine_step(scale, bias):
    """A chain step ``t = t * scale[c] + bias[c]`` (per-channel vectors)."""
    return ("affine", scale, bias)


def _blocked_lanes(v, shape, channels, what):
    """A lane operand as ``(float32 vector, n_stride, c_stride)`` or None if
    ``v`` is not one (then it must be a same-shape tensor)."""
    N, CB, H, W, cb = shape
    c_phys = CB * cb
    if isinstance(v, numbers.Number) or (isinstance(v, np.ndarray) and v.ndim == 0):
        return np.array([v], np.float32), 0, 0
    if not isinstance(v, np.ndarray):
        raise ValueError(f"eltwise: {what} must be a numpy array or a number, got {type(v)}")
    if v.shape == shape:
        return None
    if v.ndim == 5 and v.shape == (N, CB, 1, 1, cb):
        v = v.reshape(N, c_phys)
    if v.ndim == 1 and v.shape[0] in (channels, c_phys):
        padded = np.zeros(c_phys, np.float32)
        padded[:v.shape[0]] = v
        return padded, 0, 1
    if v.ndim == 2 and v.shape[0] == N and v.shape[1] in (channels, c_phys):
        padded = np.zeros((N, c_phys), np.float32)
        padded[:, :v.shape[1]] = v
        return padded.reshape(-1), c_phys, 1
    raise ValueError(
        f"eltwise: {what} has shape {v.shape}; for x {shape} with {channels} channels "
        f"expected the same shape, a per-channel ({channels},) or ({c_phys},), a "
        f"per-(n, c) ({N}, {channels}) or ({N}, {c_phys}) or {(N, CB, 1, 1, cb)}, "
        f"or a scalar")


def _check_array(what, a, shape=None):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"eltwise: {what} must be a float32 numpy array, "
                         f"got {getattr(a, 'dtype', type(a))}")
    if shape is not None and a.shape != tuple(shape):
        raise ValueError(f"eltwise: {what} has shape {a.shape}, expected {tuple(shape)}")
    if not a.flags.c_contiguous:
        raise ValueError(f"eltwise: {what} must be C-contiguous")


def _check_overlap(what, a, out):
    """``a`` may be ``out`` itself (elementwise in place) but not overlap it
    otherwise. Returns whether they share memory."""
    if not np.may_share_memory(a, out):
        return False
    if a.ctypes.data != out.ctypes.data or a.shape != out.shape:
        raise ValueError(f"eltwise: {what} partially overlaps out")
    return True


def bind_eltwise_chain(x, steps, out, channels, threads: int):
    """:func:`eltwise_chain`'s kernel and arguments on ``threads`` threads,
    ``(kernel, args)``, everything checked (None: an empty ``x``, nothing to
    run). A caller that runs the same chain on the same arrays again calls
    ``kernel(*args)`` (a replayed program: the program's arrays, and the
    operands' lane vectors copied into ``args`` now)."""
    _check_array("x", x)
    if x.ndim != 5:
        raise ValueError(f"eltwise: x must be blocked (N, C_phys // cb, H, W, cb), "
                         f"got shape {x.shape}")
    shape = x.shape
    N, CB, H, W, cb = shape
    _check_array("out", out, shape)
    if cb < 1 or SPAN % cb:
        # (a span's lane patterns hold whole blocks: another width would write past them)
        raise ValueError(f"eltwise: the channel block must divide {SPAN}, got {cb} "
                         f"(x {shape})")
    channels = int(channels)
    if not (CB - 1) * cb < channels <= CB * cb:
        raise ValueError(f"eltwise: {channels} channels do not fit x {shape} "
                         f"(C_phys = {CB * cb} with block {cb})")
    out_is_input = _check_overlap("x", x, out)
    if len(steps) > MAX_STEPS:
        raise ValueError(f"eltwise: {len(steps)} steps, at most {MAX_STEPS} per pass")

    rows, params = [], []         # the program's rows and activation parameters
    pieces, used = [], 0          # lane operands, concatenated into `vectors`
    tensors = []
    for s, step in enumerate(steps):
        kind = step[0]
        if kind == "activation":
            rows.append((STEP_ACTIVATION, _activation_code(step[1]), 0, 0, 0, 0, 0))
            params.append((step[2], step[3]))
            continue
        if kind == "math":
            rows.append((STEP_MATH, _math_code(step[1]), 0, 0, 0, 0, 0))
            params.append((step[2], step[3]))
            continue
        params.append((0.0, 0.0))
        if kind == "binary":
            _, op, operand, reverse = step
            lanes = _blocked_lanes(operand, shape, channels, f"operand of step {s}")
            if lanes is None:
                _check_array(f"operand of step {s}", operand, shape)
                out_is_input |= _check_overlap(f"operand of step {s}", operand, out)
                if len(tensors) == MAX_TENSORS:
                    raise ValueError(f"eltwise: at most {MAX_TENSORS} same-shape operands "
                                     f"per pass")
                rows.append((STEP_TENSOR, _op_code(op), int(reverse), len(tensors), 0, 0, 0))
                tensors.append(operand.reshape(-1))
            else:
                vector, n_stride, c_stride = lanes
                rows.append((STEP_LANES, _op_code(op), int(reverse), used, 0, n_stride,
                             c_stride))
                pieces.append(vector)
                used += vector.size
        elif kind == "affine":
            _, scale, bias = step
            a = _blocked_lanes(scale, shape, channels, f"scale of step {s}")
            b = _blocked_lanes(bias, shape, channels, f"bias of step {s}")
            if a is None or b is None or a[1:] != (0, 1) or b[1:] != (0, 1):
                raise ValueError("eltwise: affine scale and bias must be per-channel vectors")
            rows.append((STEP_AFFINE, 0, 0, used, used + a[0].size, 0, 1))
            pieces += [a[0], b[0]]
            used += a[0].size + b[0].size
        else:
            raise ValueError(f"eltwise: unknown step {step!r}")
    program = np.array(rows, np.int64).reshape(len(steps), 7)
    params = np.array(params, np.float32).reshape(len(steps), 2)
    vectors = np.concatenate(pieces) if pieces else _NO_VECTORS
    xf, outf = x.reshape(-1), out.reshape(-1)
    while len(tensors) < MAX_TENSORS:   # unused slots: any array of the right type
        tensors.append(xf)
    if x.size == 0:
        return None

    plane_len = H * W * cb
    chunk = min(_CHUNK, -(-plane_len // SPAN) * SPAN)
    chunks_per_plane = -(-plane_len // chunk)
    # the last step may write out directly unless out is also an input
    direct = int(not out_is_input)
    geom = (CB, plane_len, cb, channels, chunk, chunks_per_plane, direct)
    tasks = N * CB * chunks_per_plane
    args = (xf, outf, *tensors, program, params, vectors, geom)
    if tasks == 1 or threads == 1 or x.size < _PARALLEL_MIN:
        # one thread: the same tasks in a plain call (no OpenMP region)
        return _chain_tasks, args + (0, tasks)
    return _chain_parallel, args + (tasks, min(tasks, threads))


def eltwise_chain(x, steps, out, channels):
    """``out = steps(x)`` in one pass; ``x, out: (N, C_phys // cb, H, W, cb)``.

    ``steps``: a list of :func:`activation_step`, :func:`math_step`,
    :func:`binary_step` and :func:`affine_step` (at most :data:`MAX_STEPS`, with at most
    :data:`MAX_TENSORS` same-shape operands), applied in order.
    ``channels``: the logical C (padding lanes ``>= C`` are stored as 0).
    ``out`` may be ``x`` or a same-shape operand (in place). Returns ``out``.
    """
    call = bind_eltwise_chain(x, steps, out, channels, numba_threads())
    if call is not None:
        call[0](*call[1])
    return out


# --- the named ops (one- or two-step programs) -----------------------------------

def _with_activation(steps, activation, param0, param1):
    code = _activation_code(activation)
    if code != NONE:
        steps.append(activation_step(code, param0, param1))
    return steps


def eltwise_unary(x, out, channels, activation, param0=0.0, param1=0.0):
    """``out = act(x)`` on blocked ``x, out: (N, C_phys // cb, H, W, cb)``,
    padding lanes re-zeroed (sigmoid(0) = 0.5 must not leak there)."""
    return eltwise_chain(x, [activation_step(activation, param0, param1)], out, channels)


def eltwise_binary(x, y, out, channels, op, activation=NONE, param0=0.0, param1=0.0,
                   reverse=False):
    """``out = act(x op y)`` (``act(y op x)`` with ``reverse``) on blocked ``x, out``.

    ``y``: a same-shape blocked tensor, a per-channel vector ``(C,)`` or
    ``(C_phys,)``, a per-(n, c) ``(N, C)``, ``(N, C_phys)`` or
    ``(N, C_phys // cb, 1, 1, cb)``, or a scalar; the kind follows from its
    shape. ``op``: ``"add"``, ``"sub"``, ``"mul"``, ``"div"``, ``"maximum"``,
    ``"minimum"`` (or the codes).
    """
    steps = [binary_step(op, y, reverse)]
    return eltwise_chain(x, _with_activation(steps, activation, param0, param1), out, channels)


def _plain_view(a):
    return a.reshape(1, 1, a.size, 1, 1)


def eltwise_chain_plain(x, steps, out):
    """``out = steps(x)`` in one pass for plain C-contiguous arrays of one
    shape (any rank, no padding lanes): the blocked engine on a ``(1, 1,
    size, 1, 1)`` view. A binary step's operand is a scalar or an array of
    ``x``'s shape; ``out`` may be ``x`` or such an operand (in place)."""
    call = bind_eltwise_chain_plain(x, steps, out, numba_threads())
    if call is not None:
        call[0](*call[1])
    return out


def bind_eltwise_chain_plain(x, steps, out, threads: int):
    """:func:`eltwise_chain_plain`'s kernel and arguments, as
    :func:`bind_eltwise_chain` gives them."""
    _check_array("x", x)
    _check_array("out", out, x.shape)
    viewed = []
    for s, step in enumerate(steps):
        if step[0] == "binary" and isinstance(step[2], np.ndarray) and step[2].ndim > 0:
            _check_array(f"operand of step {s}", step[2], x.shape)
            step = (step[0], step[1], _plain_view(step[2]), step[3])
        viewed.append(step)
    return bind_eltwise_chain(_plain_view(x), viewed, _plain_view(out), 1, threads)


def eltwise_unary_plain(x, out, activation, param0=0.0, param1=0.0):
    """``out = act(x)`` for plain C-contiguous arrays of any shape (no padding)."""
    return eltwise_chain_plain(x, [activation_step(activation, param0, param1)], out)


def eltwise_binary_plain(x, y, out, op, activation=NONE, param0=0.0, param1=0.0,
                         reverse=False):
    """``out = act(x op y)`` for plain C-contiguous arrays; ``y`` has ``x``'s
    shape or is a scalar (materialize other broadcasts first)."""
    steps = [binary_step(op, y, reverse)]
    return eltwise_chain_plain(x, _with_activation(steps, activation, param0, param1), out)


def batch_norm_fold(mean, variance, scale=None, bias=None, epsilon=1e-5):
    """Fold inference batch normalization into a per-channel affine map.

    ``(x - mean) / sqrt(variance + epsilon) * scale + bias == x * a + b`` with
    ``a = scale / sqrt(variance + epsilon)``, ``b = bias - mean * a``
    (computed in float64, returned as float32 ``(C,)`` arrays). ``scale`` and
    ``bias`` default to 1 and 0. To fold into a preceding conv2d instead:
    ``w'[o] = w[o] * a[o]`` and ``bias'[o] = conv_bias[o] * a[o] + b[o]``.
    """
    mean = np.asarray(mean, np.float64)
    variance = np.asarray(variance, np.float64)
    scale = np.ones_like(mean) if scale is None else np.asarray(scale, np.float64)
    bias = np.zeros_like(mean) if bias is None else np.asarray(bias, np.float64)
    if not (mean.ndim == 1 and mean.shape == variance.shape == scale.shape == bias.shape):
        raise ValueError(f"batch_normalization: mean, variance, scale and bias must be "
                         f"vectors of one length, got {mean.shape}, {variance.shape}, "
                         f"{scale.shape}, {bias.shape}")
    a = scale / np.sqrt(variance + float(epsilon))
    return a.astype(np.float32), (bias - mean * a).astype(np.float32)


@jit(standalone=True)
def _channel_affine_rows(xf, a, b, outf, channels, inner, first, last):
    """Rows ``[first, last)`` of :func:`channel_affine`: row ``r`` is channel
    ``r % channels``'s ``inner`` values."""
    for r in range(first, last):
        scale, shift = a[r % channels], b[r % channels]
        base = np.uint64(r * inner)
        for k in range(np.uint64(inner)):
            outf[base + k] = fma(xf[base + k], scale, shift)


@jit(standalone=True)
def _channel_affine_last(xf, a, b, outf, channels, first, last):
    """Rows ``[first, last)`` of :func:`channel_affine` when the channels are
    the last axis: each row is ``channels`` values, one per channel."""
    for r in range(first, last):
        base = np.uint64(r * channels)
        for c in range(np.uint64(channels)):
            outf[base + c] = fma(xf[base + c], a[c], b[c])


@jit()
def _fold_rows(mean, variance, scale, bias, epsilon, a, b):
    """:func:`batch_norm_fold` into ``a, b`` (float64 maths, float32 results);
    an empty ``scale`` / ``bias`` is 1 / 0."""
    for c in range(a.size):
        s = np.float64(scale[c]) if scale.size else 1.0
        t = np.float64(bias[c]) if bias.size else 0.0
        factor = s / np.sqrt(np.float64(variance[c]) + epsilon)
        a[c] = factor
        b[c] = t - np.float64(mean[c]) * factor


_NO_VECTOR = np.zeros(0, np.float32)


def batch_norm_rows(x, mean, variance, scale, bias, epsilon: float, out, channels: int,
                    inner: int) -> None:
    """A batch normalization of plain ``x, out: (outer, channels, inner)``
    (:func:`channel_affine` after :func:`batch_norm_fold`, in two calls; the
    statistics float32 ``(channels,)``, ``scale`` and ``bias`` None for 1 and 0)."""
    vectors = [_NO_VECTOR if v is None else v for v in (mean, variance, scale, bias)]
    for name, v in zip(("mean", "variance", "scale", "bias"), vectors):
        if not isinstance(v, np.ndarray) or v.dtype != np.float32 or v.ndim != 1 \
                or (v.size != channels and not (v is _NO_VECTOR and name in ("scale", "bias"))):
            raise ValueError(f"batch_normalization: {name} must be a float32 vector of "
                             f"{channels}, got {getattr(v, 'shape', type(v).__name__)}")
    a = np.empty(channels, np.float32)
    b = np.empty(channels, np.float32)
    _fold_rows(*vectors, float(epsilon), a, b)
    channel_affine(x, a, b, out, channels, inner)


def channel_affine(x, a, b, out, channels: int, inner: int) -> None:
    """``out = x * a[c] + b[c]`` (one rounding) on plain C-contiguous float32
    ``x, out: (outer, channels, inner)`` (any shape of that many elements;
    BatchNorm1d of ``(N, C)`` has ``inner = 1``); ``a, b``: float32
    ``(channels,)``. ``out`` may be ``x``."""
    for name, array in (("x", x), ("out", out), ("a", a), ("b", b)):
        if not isinstance(array, np.ndarray) or array.dtype != np.float32 \
                or not array.flags.c_contiguous:
            raise ValueError(f"channel_affine: {name} must be a C-contiguous float32 array")
    channels, inner = int(channels), int(inner)
    if channels < 1 or inner < 1 or x.size % (channels * inner) or out.size != x.size \
            or a.size < channels or b.size < channels:
        raise ValueError(f"channel_affine: x of {x.size} and out of {out.size} elements, "
                         f"a of {a.size} and b of {b.size} do not fit {channels} channels "
                         f"of {inner} values")
    rows = x.size // inner
    if inner == 1:
        _channel_affine_last(x.reshape(-1), a, b, out.reshape(-1), channels, 0,
                             x.size // channels)
    else:
        _channel_affine_rows(x.reshape(-1), a, b, out.reshape(-1), channels, inner, 0, rows)


def batch_normalization(x, a, b, out, channels, activation=NONE, param0=0.0, param1=0.0):
    """``out = act(x * a[c] + b[c])`` on blocked ``x, out: (N, C_phys // cb, H, W, cb)``;
    ``a, b``: ``(C,)`` or ``(C_phys,)`` from :func:`batch_norm_fold`."""
    steps = [affine_step(a, b)]
    return eltwise_chain(x, _with_activation(steps, activation, param0, param1), out, channels)
