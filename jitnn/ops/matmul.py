"""matmul and gemm, with WebNN's semantics (and numpy's for 1-D operands).

``matmul(a, b)``: operands of rank >= 2 multiply their last two dimensions and
broadcast the others as numpy does (``(12, 1, 128, 64) @ (3, 64, 128)`` gives
``(12, 3, 128, 128)``). Like ``numpy.matmul``, a 1-D ``a`` is a row vector and
a 1-D ``b`` a column vector, and that dimension is dropped from the result
(WebNN itself asks for rank >= 2).

``gemm(a, b, c, alpha, beta, a_transpose, b_transpose)``: rank-2 ``a`` and
``b``, ``alpha * A @ B + beta * C`` with ``C`` broadcast to ``[M, N]``.

Both return a pending, plain-layout Tensor. A Tensor right operand is packed
into the kernel's panel layout once (per transpose flag) and reused by every
later call: pass the same weight Tensor to benefit.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import layouts
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels.buffers import aligned_empty
from ..kernels import matmul as mm
from ..kernels.matmul import gemv as gemv_kernels
from ..limits import real_arg
from ..kernels import epilogue
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import exact
from ..tensor import FLOAT32, Node, Tensor, Value
from ._common import (Binding, as_tensor, context_of, parse_activation, pending, plain_buffer,
                      plain_into_op, value_of)


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The spec: numpy's matmul in float64."""
    return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))


def gemm_reference(a, b, c=None, *, alpha=1.0, beta=1.0, a_transpose=False,
                   b_transpose=False) -> np.ndarray:
    """The spec: ``alpha * op(A) @ op(B) + beta * C`` in float64."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    out = alpha * ((a64.T if a_transpose else a64) @ (b64.T if b_transpose else b64))
    if c is not None:
        out = out + beta * np.asarray(c, np.float64)
    return out


def _packed_b(ctx, b: Tensor, transpose: bool) -> "mm.PackedB":
    """``b`` packed once into the kernel's panels: one matrix (its last two
    dimensions; leading dimensions of size 1, as in ``(1, 1, K, N)``, and a
    1-D column vector are viewed away), the packing kept on ``b``."""
    key = ("matmul_b", transpose)
    packed = b._derived.get(key)
    if packed is not None:
        return packed
    values = plain_buffer(b)     # outside b's lock (see Value._derive)
    if values.ndim == 1:                     # numpy's 1-D right operand: (K,) is (K, 1)
        values = values.reshape(-1, 1)
    elif values.ndim > 2:
        # every caller packs one matrix (a batch of b is read as it is)
        assert math.prod(values.shape[:-2]) == 1, values.shape
        values = values.reshape(values.shape[-2:])

    def pack():
        packed = ctx.launcher.side_work(
            lambda: mm.pack_b(values, b_transpose=transpose, threads=ctx.num_threads))
        ctx.launcher.count(filter_packs=1, filter_pack_bytes=packed.nbytes)
        return packed
    packed = b._derive(key, pack)
    # a graph's weight that nothing else reads is kept packed only (BERT-base:
    # 324 MB less); a reader other than this packing gets it unpacked
    b._drop_plain(lambda: unpacked_b(packed, transpose).reshape(b.shape))
    return packed


def unpacked_b(packed: "mm.PackedB", transpose: bool) -> np.ndarray:
    """The matrix that :func:`mm.pack_b` packed into ``packed`` (one matrix):
    ``(K, N)``, or ``(N, K)`` when it was packed with ``b_transpose``. The
    panels (kernels/matmul/__init__.py): K-block ``[k0, k0 + kcb)`` starts at
    ``k0 * N_pad`` and holds ``N_pad / NR`` panels of ``kcb x NR`` floats."""
    k, n, kc = packed.k, packed.n, packed.kc
    n_pad = -(-n // mm.NR) * mm.NR
    data = packed.data[0]
    out = np.empty((k, n), np.float32)
    for k0 in range(0, k, kc):
        kcb = min(kc, k - k0)
        panels = data[k0 * n_pad:(k0 + kcb) * n_pad].reshape(n_pad // mm.NR, kcb, mm.NR)
        out[k0:k0 + kcb] = panels.transpose(1, 0, 2).reshape(kcb, n_pad)[:, :n]
    return np.ascontiguousarray(out.T) if transpose else out


def _packed_gemv_b(ctx, b: Value, transpose: bool) -> "gemv_kernels.PackedGemvB":
    """``b`` packed once for products of at most ``gemv_kernels.MAX_ROWS`` rows
    (kernels/matmul/gemv.py), the packing kept on ``b`` as :func:`_packed_b`'s."""
    key = ("gemv_b", transpose)
    packed = b._derived.get(key)
    if packed is not None:
        return packed
    values = plain_buffer(b)
    if values.ndim != 2:         # (K,) is (K, 1); (1, 1, K, N) one matrix
        values = values.reshape(-1, 1) if values.ndim == 1 else values.reshape(values.shape[-2:])

    def pack():
        packed = gemv_kernels.pack_gemv_b(values, transpose)
        ctx.launcher.count(filter_packs=1, filter_pack_bytes=packed.nbytes)
        return packed
    packed = b._derive(key, pack)

    def unpacked() -> np.ndarray:
        matrix = packed.unpacked()
        return (np.ascontiguousarray(matrix.T) if transpose else matrix).reshape(b.shape)
    b._drop_plain(unpacked)
    return packed


def _uses_gemv(m: int, n: int, k: int, a_transpose: bool) -> bool:
    """A product of a few rows on a packed weight (a classifier at batch 1, a
    decode step) streams the weight once through gemv_kernels: the GEMM's
    packed row path reads four panels' K-blocks at once (four streams 32 KB
    apart) and packs for register tiles that one row cannot fill."""
    return m <= gemv_kernels.MAX_ROWS and not a_transpose and _worth_packing(m, n, k)


def _worth_packing(m: int, n: int, k: int) -> bool:
    # Tiny products take the kernel's direct path, which reads B as it is.
    return m * n * k > mm.DIRECT_MAX_MACS


def matmul(a, b, *, activation=None) -> Tensor:
    """``a @ b`` with numpy's broadcasting of batch dimensions (see the module
    docstring). ``activation`` is fused into the kernel (same names as conv2d)."""
    op = "matmul"
    ctx = context_of(op, a, b)
    a = as_tensor(ctx, a, op, "a")
    b = as_tensor(ctx, b, op, "b")
    for name, t in (("a", a), ("b", b)):
        if t.ndim < 1:
            raise JitnnValueError(f"{op}: {name} must have rank >= 1, got a scalar")
    code, p0, p1 = parse_activation(op, activation)
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    m, k = a_shape[-2:]
    kb, n = b_shape[-2:]
    if k != kb:
        raise JitnnValueError(
            f"{op}: inner dimensions differ: a {a.shape} has {k} columns, b {b.shape} has {kb} rows")
    try:
        # two matrices (the common case) have no batch dimensions to broadcast
        batch = () if len(a_shape) == len(b_shape) == 2 else \
            np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise JitnnValueError(
            f"{op}: batch dimensions {a_shape[:-2]} of a {a.shape} and {b_shape[:-2]} of "
            f"b {b.shape} do not broadcast") from None
    out_shape = tuple(batch) + (m, n)
    if a.ndim == 1:
        out_shape = out_shape[:-2] + (n,)
    if b.ndim == 1:
        out_shape = out_shape[:-1]
    if not batch:
        # Two matrices: the kernel's gemm, with its direct path for tiny products.
        return _matrix_product(ctx, a, b, m, k, n, out_shape, code, p0, p1)
    a_count = math.prod(a_shape[:-2])
    if math.prod(b_shape[:-2]) == 1 and a_count == math.prod(batch) \
            and _uses_gemv(a_count * m, n, k, False):
        # one weight and a few rows in all (a decode step's (1, 1, K) @ (K, N)):
        # one product of a's rows, on the gemv path, with the gemm's fusions
        return _gemm_node(ctx, "matmul", a, b, None, a_count * m, k, n, out_shape, 1.0, 0.0,
                          False, False, code, p0, p1)
    groups = int(np.prod(batch, dtype=np.int64))
    a_count = int(np.prod(a_shape[:-2], dtype=np.int64))
    b_count = int(np.prod(b_shape[:-2], dtype=np.int64))
    # product g reads matrix a_index[g] of a's flattened batch (same for b)
    a_index = np.broadcast_to(np.arange(a_count).reshape(a_shape[:-2]), batch).ravel()
    b_index = np.broadcast_to(np.arange(b_count).reshape(b_shape[:-2]), batch).ravel()
    pack = _worth_packing(m, n, k) and groups > 0
    if groups > 0 and not (pack and b_count == 1):
        # products of two computed operands (linear attention's, an einsum's):
        # into the plan's buffer, one bound call in a replay
        into = _batched_into(a_count, b_count, m, k, n, tuple(a_index.tolist()),
                             tuple(b_index.tolist()), code, float(p0), float(p1))
        return plain_into_op(ctx, op, (a, b), out_shape, into, dtype=FLOAT32)
    # Values, not the caller's handles (a kept handle counts as the caller
    # holding the tensor: its own array every run instead of a reused buffer)
    av, bv = value_of(a), value_of(b)

    def produce() -> np.ndarray:
        out = aligned_empty((groups, m, n))
        # a conv's output may come blocked: matmul reads it back to plain
        # (one reorder, counted) like any op that needs the standard layout
        a3 = plain_buffer(av).reshape(a_count, m, k)
        b3 = _packed_b(ctx, bv, False) if pack and b_count == 1 else None
        if b3 is None:
            b3 = plain_buffer(bv).reshape(b_count, k, n)
        if out.size:
            ctx.launcher.launch(mm.batched_matmul, a3, b3, out, a_index, b_index,
                        activation=code, param0=p0, param1=p1)
        return out.reshape(out_shape)

    return Tensor(ctx, out_shape, layouts.plain_tag(len(out_shape)), producer=produce,
                  inputs=(a, b), op=op)


@functools.cache
def _batched_into(a_count: int, b_count: int, m: int, k: int, n: int, a_index: tuple,
                  b_index: tuple, code: int, p0: float, p1: float):
    """``into(a, b, out)`` of :func:`plain_into_op`: the batched product of
    plain ``a`` (``a_count`` matrices ``(m, k)``) and ``b`` (``b_count``
    ``(k, n)``), product ``g`` of matrices ``a_index[g]`` and ``b_index[g]``."""
    a_rows, b_rows = np.array(a_index, np.int64), np.array(b_index, np.int64)

    def into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        mm.batched_matmul(a.reshape(a_count, m, k), b.reshape(b_count, k, n),
                          out.reshape(len(a_rows), m, n), a_rows, b_rows, activation=code,
                          param0=p0, param1=p1)
    into.__name__ = into.__qualname__ = "batched_matmul_into"
    return into


def _matrix_product(ctx, a: Tensor, b: Tensor, m: int, k: int, n: int,
                    out_shape: tuple[int, ...], code: int, p0: float, p1: float) -> Tensor:
    return _gemm_node(ctx, "matmul", a, b, None, m, k, n, out_shape, 1.0, 0.0, False, False,
                      code, p0, p1)


#: ops whose result is the first values of their input in row-major order (a
#: view): an LSTM step's state is ``h`` then ``c``, the next product reads ``h``
_LEADING_VIEWS = ("lstm_hidden",)


def _leading(left: np.ndarray, m: int, k: int) -> np.ndarray:
    """``a``'s buffer as the ``(m, k)`` matrix: its first ``m * k`` values when
    the product reads through a leading view (:data:`_LEADING_VIEWS`)."""
    if left.size != m * k:
        left = left.reshape(-1)[:m * k]
    return left.reshape(m, k) if left.ndim != 2 else left


def _through_view(a: Value, size: int, leading: bool = True) -> Value:
    """The value behind a pending flatten or reshape ``a`` when its buffer
    already holds ``a``'s values in order, so that the product reads it in
    place: a row-major one (a transformer's ``(1, 197, 768)`` activations
    reshaped to ``(197, 768)``), or a blocked ``(N, C, 1, 1)`` with C a whole
    number of blocks (a global pool's output). The flatten or reshape, a step
    of its own otherwise (a Python call between two kernels, ~40 us in
    MobileNetV2 at batch 1 after the last conv has pushed the interpreter out
    of the caches), does not run at all; and a replayed product reads a
    buffer of the plan, the same array at every run (the reshape's view is
    new at every run), so it can be bound."""
    node = a._node
    if node is None or node.op not in ("flatten", "reshape") + _LEADING_VIEWS \
            or node.kind != "opaque" or len(node.inputs) != 1:
        return a
    source = node.inputs[0]
    if node.op in _LEADING_VIEWS:
        if not leading:
            return a
        # the product reads the first m * k values of the source's buffer
        plain = source._layout == layouts.plain_tag(source.ndim)
        return source if plain and source._dtype == a._dtype and source.size >= size else a
    if source._dtype != a._dtype or source.size != size:
        return a
    if source._layout == layouts.plain_tag(source.ndim):
        # (and through a chain of them: a ViT's attention output reshaped to
        # (1, 197, 768), then to (197, 768))
        return _through_view(source, size, leading)
    block = layouts.block_of(source._layout)
    if block is None or source.ndim != 4:
        return a
    n, c, h, w = source._shape if source._axes == "nchw" else \
        (source._shape[0], source._shape[3], source._shape[1], source._shape[2])
    return source if h * w == 1 and c % block == 0 else a


def _gemm_node(ctx, op: str, a: Tensor, b: Tensor, c: Tensor | None, m: int, k: int, n: int,
               out_shape: tuple[int, ...], alpha: float, beta: float, a_transpose: bool,
               b_transpose: bool, code: int, p0: float, p1: float) -> Tensor:
    """A pending ``act(alpha * op(a) @ op(b) + beta * c)`` (plain ``(M, N)``, viewed as
    ``out_shape``): a node the scheduler may give a bias/residual ``c`` and an
    activation from the ops that follow it."""
    attrs = {"a": _through_view(value_of(a), m * k, not a_transpose), "b": value_of(b),
             "c": value_of(c),
             "alpha": float(alpha),
             "beta": float(beta), "a_transpose": bool(a_transpose),
             "b_transpose": bool(b_transpose), "activation": (code, p0, p1),
             "mkn": (m, k, n)}
    inputs = (attrs["a"], attrs["b"]) + ((attrs["c"],) if c is not None else ())
    # the node's whole description, given its inputs (a, b, then c if given)
    sig = ("gemm", op, attrs["a"]._layout, exact(attrs["alpha"]), exact(attrs["beta"]), attrs["a_transpose"],
           attrs["b_transpose"], code, exact(float(p0)), exact(float(p1)), (m, k, n),
           c is None)
    node = Node(op, inputs, kind="matmul", attrs=attrs, run=run_gemm, flops=2 * m * n * k,
                sig=sig)
    return pending(ctx, out_shape, layouts.plain_tag(len(out_shape)), node)


def run_gemm(ctx, node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    """Run a (possibly fused) matmul/gemm node with the kernel's epilogue."""
    a = node.attrs
    m, k, n = a["mkn"]
    # the plan's buffer for this value when it has one (a dead
    # intermediate's array: no allocation), else a new array
    dest = out.reshape(m, n) if out is not None and out.size == m * n else \
        aligned_empty((m, n))
    if dest.size == 0:
        return dest.reshape(value.shape)
    left, b = plain_buffer(a["a"]), a["b"]
    if left.ndim != 2 or left.size != m * k:     # numpy's 1-D operands of matmul
        left = _leading(left, m, k)
    if _uses_gemv(m, n, k, a["a_transpose"]):
        kernel, args, _ = _gemv_call(ctx, a, left, dest)
        ctx.launcher.launch(kernel, *args)
        return out if out is not None and out.size == m * n and out.shape == value.shape \
            else dest.reshape(value.shape)
    if _worth_packing(m, n, k):
        right, b_transpose = _packed_b(ctx, b, a["b_transpose"]), False
    else:
        right, b_transpose = plain_buffer(b), a["b_transpose"]
        if right.ndim != 2:
            right = right.reshape(k, n)
    c = None if a["c"] is None else _as_addend(plain_buffer(a["c"]), m, n)
    residual = a.get("residual")
    if residual is not None:
        residual = _as_addend(plain_buffer(residual), m, n)
    code, p0, p1 = a["activation"]
    ctx.launcher.launch(mm.gemm, left, right, dest, alpha=a["alpha"],
                beta=a["beta"] if c is not None else 0.0, c=c, residual=residual,
                activation=code, param0=p0, param1=p1, a_transpose=a["a_transpose"],
                b_transpose=b_transpose)
    # the plan's buffer itself when it has the value's shape: the step after may
    # bind to it (a replayed plan hands out the same view every run)
    return out if out is not None and out.size == m * n and out.shape == value.shape \
        else dest.reshape(value.shape)


def _gemv_call(ctx, a: dict, left: np.ndarray, dest: np.ndarray) -> tuple:
    """The gemv kernel, its arguments and the derived forms they hold
    (``(value, key, form)``: the packed weight, the addends) for a node's
    ``attrs`` ``a``; checked."""
    key = ("gemv_b", a["b_transpose"])
    packed = _packed_gemv_b(ctx, a["b"], a["b_transpose"])
    derived = [(a["b"], key, packed)]
    m, _, n = a["mkn"]
    addends = []
    for v in (a["c"], a.get("residual")):
        if v is None:
            addends.append(None)
            continue
        # the kernel's (1, Mc, Nc) array, kept on the value: a constant's is
        # the same array at every run, so a bound call can hold it
        values = plain_buffer(v)
        form = v._derive(("gemv_addend", m, n), lambda: gemv_kernels.as_addend(
            "c", _as_addend(values, m, n), m, n))
        derived.append((v, ("gemv_addend", m, n), form))
        addends.append(form)
    code, p0, p1 = a["activation"]
    kernel, args = gemv_kernels.gemv_call(
        left, packed, dest, alpha=a["alpha"], beta=a["beta"] if a["c"] is not None else 0.0,
        c=addends[0], residual=addends[1], activation=code, param0=p0, param1=p1,
        threads=ctx.num_threads)
    return kernel, args, tuple(derived)


def bind_gemm(ctx, node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_gemm` just made, bound to its arrays: the
    gemv path's, or the GEMM's (a transformer's linear layers: ~15 us of
    Python per product otherwise), which reads A and a computed residual in
    place, and B packed, or on the direct path (a small product) as it is: a
    constant's or a plan buffer's plain float32 array. None for an operand
    read through a copy and an addend that is not a plain float32 buffer."""
    a = node.attrs
    m, k, n = a["mkn"]
    if result.size != m * n or a["a"]._data is None:
        return None
    left = _leading(plain_buffer(a["a"]), m, k)
    if not np.may_share_memory(left, a["a"]._data):
        return None                       # a copy made at this run (a reorder to plain)
    if _uses_gemv(m, n, k, a["a_transpose"]):
        kernel, args, derived = _gemv_call(ctx, a, left, result.reshape(m, n))
        return Binding(kernel, args, ((a["a"], a["a"]._data),), derived, result,
                       ctx.num_threads)
    reads = [(a["a"], a["a"]._data)]
    if _worth_packing(m, n, k):
        key = ("matmul_b", a["b_transpose"])
        right, b_transpose = _packed_b(ctx, a["b"], a["b_transpose"]), False
        derived = [(a["b"], key, right)]
    else:
        # the direct path reads B as it is, as run_gemm does
        b = a["b"]
        right, b_transpose, derived = b._data, a["b_transpose"], []
        if not isinstance(right, np.ndarray) or right.dtype != np.float32 \
                or not right.flags.c_contiguous or layouts.block_of(b._layout) is not None \
                or b._remake is not None:
            return None
        reads.append((b, right))
        if right.ndim != 2:
            right = right.reshape(k, n)
    addends = []
    for v in (a["c"], a.get("residual")):
        if v is None:
            addends.append(None)
        elif v.held:
            # a constant (a bias: the graph holds it): its (1, Mc, Nc) form
            # kept on the value, as the gemv path's, so the bound call holds
            # the same array (a graph input's is remade every run: not bound)
            values = plain_buffer(v)
            form = v._derive(("gemm_addend", m, n), lambda: np.ascontiguousarray(
                _as_addend(values, m, n), dtype=np.float32))
            derived.append((v, ("gemm_addend", m, n), form))
            addends.append(form)
        else:
            # computed at each run (a skip connection): read in place, so only
            # a plain float32 buffer that the kernel's view shares
            data = v._data
            if not isinstance(data, np.ndarray) or data.dtype != np.float32 \
                    or not data.flags.c_contiguous or layouts.block_of(v._layout) is not None:
                return None
            reads.append((v, data))
            addends.append(_as_addend(data, m, n))
    code, p0, p1 = a["activation"]
    call = mm.gemm_call(left, right, result.reshape(m, n), alpha=a["alpha"],
                        beta=a["beta"] if a["c"] is not None else 0.0, c=addends[0],
                        residual=addends[1], activation=code, param0=p0, param1=p1,
                        a_transpose=a["a_transpose"], b_transpose=b_transpose,
                        threads=ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], tuple(reads), tuple(derived), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_gemm.bind = bind_gemm


def gemm(a, b, c=None, *, alpha: float = 1.0, beta: float = 1.0, a_transpose: bool = False,
         b_transpose: bool = False, activation=None) -> Tensor:
    """``alpha * op(a) @ op(b) + beta * c`` (WebNN gemm); ``a`` and ``b`` rank 2,
    ``c`` broadcast to ``[M, N]`` (a scalar, ``[N]``, ``[M, 1]``, ``[1, N]`` or
    ``[M, N]``). ``activation`` is fused into the kernel's epilogue."""
    op = "gemm"
    ctx = context_of(op, a, b, c)
    a = as_tensor(ctx, a, op, "a")
    b = as_tensor(ctx, b, op, "b")
    for name, t in (("a", a), ("b", b)):
        if t.ndim != 2:
            raise JitnnValueError(f"{op}: {name} must have rank 2, got shape {t.shape}")
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise JitnnValueError(f"{op}: {name} must be a number, got {value!r}")
        real_arg(op, name, value)       # finite: NaN or inf would give NaN or inf outputs
    for name, value in (("a_transpose", a_transpose), ("b_transpose", b_transpose)):
        if not isinstance(value, (bool, np.bool_)):
            raise JitnnTypeError(f"{op}: {name} must be a bool, got {value!r}")
    code, p0, p1 = parse_activation(op, activation)
    m, k = a.shape[::-1] if a_transpose else a.shape
    kb, n = b.shape[::-1] if b_transpose else b.shape
    if k != kb:
        raise JitnnValueError(
            f"{op}: inner dimensions differ: A is ({m}, {k}) and B is ({kb}, {n}) "
            f"(a {a.shape}{', transposed' if a_transpose else ''}; "
            f"b {b.shape}{', transposed' if b_transpose else ''})")
    c_t = None
    if c is not None:
        c_t = as_tensor(ctx, c, op, "c")
        try:
            if c_t.ndim > 2 or np.broadcast_shapes(c_t.shape, (m, n)) != (m, n):
                raise ValueError
        except ValueError:
            raise JitnnValueError(
                f"{op}: c {c_t.shape} does not broadcast to the output shape ({m}, {n})") from None
    return _gemm_node(ctx, op, a, b, c_t, m, k, n, (m, n), alpha, beta, a_transpose,
                      b_transpose, code, p0, p1)


# --- how the scheduler treats a matmul node (jitnn/registry.py) -------------------

def _as_addend(x: np.ndarray, m: int, n: int) -> np.ndarray:
    """A bias or residual of an output viewed with more than two dimensions
    (see ``_fits``) as the kernel's 2-D operand: the whole ``(m, n)`` matrix,
    or a row."""
    if x.ndim <= 2:
        return x
    return x.reshape(m, n) if x.size == m * n else x.reshape(-1)


def _fits(other: Value, shape: tuple[int, ...]) -> bool:
    """Whether ``other`` broadcast to the product's output ``shape`` is an
    addend the kernel takes: on a 2-D output, anything that broadcasts to it;
    on an output viewed with more dimensions (a reshape taken in), the same
    shape or a row (every dimension but the last 1)."""
    if not isinstance(other, Value) or layouts.block_of(other._layout) is not None:
        return False
    if len(shape) == 2 and other.ndim <= 2:
        try:
            return np.broadcast_shapes(other._shape, shape) == shape
        except ValueError:
            return False
    if other._shape == shape:
        return True
    return other.ndim <= len(shape) and all(d == 1 for d in other._shape[:-1]) \
        and other._shape[-1:] in ((1,), (shape[-1],), ())


def _absorb(node: Node, consumer: Node, v: Value, result: Value) -> Node | None:
    """matmul -> add(bias) -> add(residual) -> activation as one gemm launch
    (``act(alpha * A @ B + C + residual)``), in that order only; None if it
    does not fit. A reshape of the plain output between them is taken in
    first (the product writes the reshaped view: exporters put one between a
    linear layer of 3-D activations and its residual add or GELU)."""
    attrs = dict(node.attrs)
    if consumer.op == "reshape" and consumer.kind == "opaque" and consumer.inputs == (v,) \
            and result._dtype == v._dtype and layouts.block_of(result._layout) is None:
        # (not named in the label: no op runs for it)
        return node.replace(attrs={**attrs, "reshaped": True})
    if attrs["activation"][0] != epilogue.NONE:
        return None
    steps = consumer.attrs.get("steps", ())
    if consumer.kind == "eltwise_plain" and consumer.inputs[0] is v and len(steps) == 1 \
            and steps[0][0] == "activation":
        if steps[0][1] == epilogue.GELU and attrs.get("reshaped"):
            # a GELU after the reshape is one the ONNX linear pattern keeps as
            # a pass of its own (jitnn/onnx/_patterns.py: the tanh form, or any
            # with GELU_IN_EPILOGUE off); the erf form it fuses before the
            # reshape, where the 2-D product's epilogue runs it over each tile
            return None
        attrs["activation"] = tuple(steps[0][1:])
        return node.replace(attrs=attrs, fused=node.fused + (consumer.op,))
    if consumer.kind in ("binary_plain", "eltwise_plain") and consumer.attrs.get("op") == "add" \
            and result._shape == v._shape and attrs.get("residual") is None:
        operands = [consumer.attrs["main"], consumer.attrs["other"]]
        if sum(t is v for t in operands) != 1:
            return None
        other = operands[1] if operands[0] is v else operands[0]
        if not _fits(other, v._shape):
            return None
        if attrs["c"] is None:
            attrs["c"], attrs["beta"] = other, 1.0
        else:
            # a second add (the residual after the bias): the kernel's
            # residual operand, added after alpha * A @ B + beta * c
            attrs["residual"] = other
        return node.replace(inputs=node.inputs + (other,), attrs=attrs,
                            fused=node.fused + (consumer.op,))
    return None


register_kind(NodeKind("matmul", role="anchor", writes_into_buffer=True, absorb=_absorb))

register_op(OpDef("matmul", matmul, matmul_reference, webnn="matmul", onnx=("MatMul",),
                  kinds=("matmul",), fusion="anchor: absorbs a bias or residual add and an "
                                           "activation into its epilogue"))
register_op(OpDef("gemm", gemm, gemm_reference, webnn="gemm", onnx=("Gemm",), kinds=("matmul",),
                  fusion="anchor, as matmul"))
