"""Matrix products: packed float32 GEMM (Goto/BLIS style) with a fused epilogue.

What the kernels compute, for every product ``g`` of a batch::

    out[g] = act(alpha * A_g @ B_g + beta * C[g] + bias + residual[g])
    A_g = a[a_index[g]]   (or its transpose)     shape (M, K)
    B_g = b[b_index[g]]   (or its transpose)     shape (K, N)

:func:`gemm` is the batch of one product; :func:`batched_matmul` takes a
batch, with index maps so that the runtime can broadcast batch dimensions
without copying (``a_index = [0, 0, 0]`` reuses one matrix for three products).

Buffers (float32, C-contiguous; the Python wrappers check this):

* ``a: (BA, M, K)``, or ``(BA, K, M)`` with ``a_transpose``
* ``b: (BB, K, N)``, or ``(BB, N, K)`` with ``b_transpose``; or a :class:`PackedB`
* ``a_index, b_index: (G,)`` int64: which ``a`` and ``b`` each product reads
* ``out: (G, M, N)``
* ``c: (Gc, Mc, Nc)`` with ``Gc in (1, G)``, ``Mc in (1, M)``, ``Nc in (1, N)``
  (scalar, row, column or full C, shared by the batch or per product);
  ``residual``: the same shapes, added with weight 1; ``(1, 0, 0)`` means none
* ``bias: (N,)``; ``(0,)`` means none
* activation: ``(code, param0, param1)`` from :mod:`.epilogue`

**Register tile.** The packed path computes ``out`` in ``MR x NR`` tiles
(6 x 16 on AVX2: 12 accumulator registers + 2 for a row of B + 1 broadcast of
A = 15 of the 16 ymm registers), each a sum of ``kc`` outer products of a
column of A and a row of B. So that both come from contiguous memory, A and B
are first copied ("packed") into panels::

    A panel (rows i0 .. i0+MR, K-block k0 .. k0+kc):  apanel[p * MR + r] = A[i0 + r, k0 + p]
    B panel (cols j0 .. j0+NR, K-block k0 .. k0+kc):  bpanel[p * NR + c] = B[k0 + p, j0 + c]

Rows past M and columns past N are zero in the panels, so edge tiles run the
same loop and only their store is clipped. A whole packed B is one row of
``packed_b: (BB, K * N_pad)`` with ``N_pad = ceil(N / NR) * NR``: K-block
``[k0, k0 + kc)`` starts at ``k0 * N_pad`` and holds its column panels one
after another, panel ``jp`` at ``k0 * N_pad + jp * kc * NR``
(:class:`PackedB` keeps one, made once by :func:`pack_b`). A is packed the
same way, one row block at a time, into a per-task buffer:
``a_block[(ip - ip_begin) * kc * MR + p * MR + r]``. Transposed operands only
change the order in which packing reads them; nothing is transposed in memory.

**Cache blocking** (:data:`KC`, :data:`MC`, :data:`NC`, derived from the L1d
and L2 sizes; 512, 168, 4080 for AVX2 with a 32 KiB L1d and a 512 KiB L2;
1024, 168, 4064 for AVX-512 with a 32 KiB L1d and a 1 MiB L2): a task owns a
block of at most ``MC`` rows and ``NC`` columns of ``out`` and walks K in
blocks of ``kc = k_block(K)`` (K cut evenly into blocks of at most ``KC``).
For each K-block it packs its rows of A (``MC x KC`` floats, 336 KiB on AVX2,
672 KiB on AVX-512: stays in L2), then for each B panel (``KC x NR``, 32 KiB
on AVX2: stays in L1; 128 KiB on AVX-512: streams from L2) runs the register
tile down the A panels (:func:`_macro_kernel`). Where A's rows are not an
L1 way apart, full row panels are read in place instead of packed
(:func:`a_in_place`), and with a short K-block whose B panels all fit in L2
the tiles run row panel by row panel (:func:`rows_outer`). The first K-block stores the
tiles, later ones add to them, and the last one applies the epilogue in the
registers before its store.

**Paths**, chosen by :func:`_run` from the shape of the product:

* direct (:func:`_direct_columns`): tiny products, products with at most
  ``DIRECT_MAX_ROWS`` rows, and ``K == 0``. No packing of A and no heap
  allocation: B is copied ``SMALL_K`` rows x ``_DIRECT_W`` columns at a time
  into a block on the stack (``block[p * _DIRECT_W + c] = B[k0 + p, j0 + c]``,
  one contiguous run per row of B) and every ``MR x NR`` tile reads A in
  place (:func:`_small_tile`). One-row products are matrix-vector products
  instead (:func:`_gemv_columns`), reading B once, in place.
  :func:`matmul_small` is this path for one plain 2-D product, with the
  fewest arguments (per-call overhead is what matters there).
* packed: everything else, and every product with a :class:`PackedB`.
  One-row products use a one-row kernel on the packed panels that reads A
  in place and keeps its sums in registers through all of K
  (:func:`_row_kernel`).

Each path has a driver of its own (:func:`gemm_driver`: ``"gemv"`` and
``"direct"`` for the direct path with one row or more, ``"row"`` and
``"packed"`` for the packed one), which compiles at its first use: a model
compiles the paths it runs only. A driver runs serially (one thread, or too
little work to pay for waking the others) or as one parallel region in which
the threads take tasks from shared atomic counters: first groups of B panels
to pack, then (product x column block x row block) blocks of ``out`` (direct
path: product x column block). Numba's own ``prange`` schedule is static, so
a thread that shares its core with another process would hold up the
others; with the counters the other threads take over its work.

Modules: this one is the checked Python API and chooses the path;
:mod:`.blocking` holds the tile and cache-block sizes and the unchecked views,
:mod:`.packing` the packing of A and B, :mod:`.tiles` the macro kernel, the
one-row kernel, the direct path and the epilogue, :mod:`.drivers` the drivers
and their tasks.
"""

import numba
import numpy as np

from ..epilogue import ACTIVATIONS, LAST_ACTIVATION, NONE
from .blocking import _L1D, _L2, KC, MC, MR, NC, NR, VEC, k_block
from .drivers import PATHS, gemm_driver, matmul_small
from .packing import pack_b_parallel, pack_b_serial

__all__ = ["KC", "MC", "MR", "NC", "NR", "PATHS", "VEC", "PackedB", "a_in_place",
           "batched_matmul", "gemm", "gemm_call", "gemm_driver", "k_block", "matmul_small",
           "pack_b", "plan_blocks", "rows_outer"]

#: products with M * N * K up to this many multiply-adds take the direct path
DIRECT_MAX_MACS = 64 ** 3
#: products with at most this many rows take the direct path at any size
#: (packing all of B would cost more than the product), in parallel
DIRECT_MAX_ROWS = 2 * MR
#: below this many multiply-adds one thread is faster than waking the others
#: (measured crossover on 2 cores: between 96^3 and 128^3; a parallel region
#: costs several microseconds, more when the cores are shared)
PARALLEL_MIN_MACS = 1 << 20
#: tasks per thread the parallel driver aims for, so that dynamic scheduling
#: can even out threads that run at different speeds. Not more: each task
#: streams all of its columns of packed B past its rows of A, so smaller row
#: blocks read B more often (256^3 on 2 threads: 2 tasks per thread 150
#: GFLOP/s, 4 per thread 143; 512^3 and 1024^3 the same either way)
_TASKS_PER_THREAD = 2
#: column panels that a column block of a product cut along N keeps at least
#: (see plan_blocks): narrower blocks spend more on packing A than they save
_MIN_SPLIT_PANELS = 4


# --- the Python API ---------------------------------------------------------
#
# Thin checked wrappers: kernels run without bounds checks, so everything a
# kernel indexes is checked here, cheaply, and a mismatch raises ValueError.
# They also pin the argument types (float64 scalars, bool flags, the same
# array kinds) so that each driver compiles exactly once.

_NO_ADDEND = np.zeros((1, 0, 0), np.float32)  # "no C" / "no residual"
_NO_BIAS = np.zeros(0, np.float32)
_NOT_PACKED = np.zeros((0, 0), np.float32)
_FIRST = np.zeros(1, np.int64)  # index map of a batch of one
_NO_B = np.zeros((1, 0, 0), np.float32)  # b when B comes packed
_F32 = np.dtype(np.float32)


class PackedB:
    """A constant right operand, packed once by :func:`pack_b` and reused by
    every product that reads it (weights of a fully connected layer).

    ``data: (BB, K * N_pad)`` float32 in the panel layout of the module
    docstring, cut into K-blocks of ``kc``; ``k``, ``n``: each packed matrix is
    the logical ``(K, N)`` B. It is a snapshot: changing the array it was packed
    from does not change it.
    """

    __slots__ = ("data", "k", "n", "kc")

    def __init__(self, data, k, n, kc):
        self.data, self.k, self.n, self.kc = data, k, n, kc

    @property
    def batch(self):
        """BB, the number of packed matrices."""
        return self.data.shape[0]

    @property
    def shape(self):
        """``(BB, K, N)``: the logical shape of what was packed."""
        return (self.data.shape[0], self.k, self.n)

    @property
    def nbytes(self):
        return self.data.nbytes

    def __repr__(self):
        return f"PackedB(batch={self.batch}, k={self.k}, n={self.n}, kc={self.kc})"


def _fail(op, message):
    raise ValueError(f"{op}: {message}")


def _operand(op, name, x, transpose, ndim):
    """``x`` as a C-contiguous float32 array of rank 3 and its transpose flag.

    A Fortran-ordered matrix (``y.T`` of a C-ordered ``y``) is read as the
    transpose of ``y``, with no copy."""
    if type(x) is not np.ndarray or x.dtype != _F32:
        _fail(op, f"{name} must be a float32 numpy array, got "
                  f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim != ndim:
        _fail(op, f"{name} must have rank {ndim}, got shape {x.shape}")
    transpose = bool(transpose)
    if not x.flags.c_contiguous:
        flipped = x.T if ndim == 2 else x.transpose(0, 2, 1)
        if not flipped.flags.c_contiguous:
            _fail(op, f"{name} must be C-contiguous (or the transpose of a "
                      f"C-contiguous array), got strides {x.strides}")
        x, transpose = flipped, not transpose
    if ndim == 2:
        x = x[None]
    return x, transpose


def _addend(op, name, x, G, M, N):
    """``c`` or ``residual`` as a C-contiguous ``(Gc, Mc, Nc)`` float32 array
    that broadcasts to ``(G, M, N)`` (scalars, rows, columns, matrices)."""
    if x is None:
        return _NO_ADDEND
    x = np.asarray(x, dtype=np.float32)
    if x.ndim > 3:
        _fail(op, f"{name} has shape {x.shape}, which has more than 3 dimensions")
    shape = (1,) * (3 - x.ndim) + x.shape
    target = (G, M, N)
    if any(got not in (1, want) for got, want in zip(shape, target)):
        want = target[1:] if G == 1 else target
        _fail(op, f"{name} of shape {x.shape} does not broadcast to the output {want}")
    return np.ascontiguousarray(x.reshape(shape))


def _bias(op, bias, N):
    if bias is None:
        return _NO_BIAS
    bias = np.ascontiguousarray(bias, dtype=np.float32)
    if bias.shape != (N,):
        _fail(op, f"bias must have shape ({N},), got {bias.shape}")
    return bias


def _activation(op, activation):
    if activation is NONE:
        return NONE
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            _fail(op, f"unknown activation {activation!r}; known: {sorted(ACTIVATIONS)}")
        return ACTIVATIONS[activation]
    code = int(activation)
    if not NONE <= code <= LAST_ACTIVATION:
        _fail(op, f"unknown activation code {code}")
    return code


#: plan_blocks results by (G, M, N, threads): computing one costs about a
#: microsecond, a few percent of a 2-thread 256^3 product's time
_PLANS = {}


def plan_blocks(G, M, N, threads):
    """Row and column blocks per product: ``(m_blocks, n_blocks)``.

    Blocks are at most ``MC`` rows and ``NC`` columns. With several threads,
    products are cut further until there are about ``_TASKS_PER_THREAD``
    tasks per thread: rows first (each row block packs its own A; then
    columns), unless fewer row blocks and more column blocks move less data.
    Each row block streams all of its product's B (``K x N``) past its rows
    and each column block packs all of its A rows (``M x K``), so a cut costs
    about ``m_blocks * N + n_blocks * M`` (times K): a short, wide product
    (a transformer's 128 tokens against a 768 x 2304 weight) is cut along N,
    so that the weight is read once, and each column block keeps all the row
    tiles under each B panel. 2 threads, 8 cold weights in turn, GFLOP/s,
    rows (4 x 1) -> columns (1 x 4): 128 x 2304 x 768 160 -> 201, 128 x 768 x
    768 169 -> 185, 128 x 512 x 512 177 -> 182; 197 x 3072 x 768 208 either
    way. A column block keeps at least :data:`_MIN_SPLIT_PANELS` panels
    (128 x 256 x 512: 4 x 1 164, 2 x 2 175, 1 x 4 154).
    """
    m_panels = -(-M // MR)
    n_panels = -(-N // NR)
    m_blocks = -(-m_panels // (MC // MR))
    n_blocks = -(-n_panels // (NC // NR))
    if threads > 1:
        want = threads * _TASKS_PER_THREAD
        if G * m_blocks * n_blocks < want:
            base_m, base_n = m_blocks, n_blocks
            m_blocks = min(m_panels, max(m_blocks, -(-want // (G * n_blocks))))
            if G * m_blocks * n_blocks < want:
                n_blocks = min(n_panels, max(n_blocks, -(-want // (G * m_blocks))))
            # fewer row blocks, more column blocks, for the same task count
            cost = m_blocks * N + n_blocks * M
            for mb in range(base_m, m_blocks):
                nb = max(base_n, -(-want // (G * mb)))
                if nb <= n_panels // _MIN_SPLIT_PANELS and mb * N + nb * M < cost:
                    m_blocks, n_blocks, cost = mb, nb, mb * N + nb * M
        # With few tasks, a count that the threads divide evenly: 13 equal
        # tasks on 2 threads take 7 rounds, 14 smaller ones take 7 shorter ones.
        while (G * m_blocks * n_blocks) % threads and G * m_blocks * n_blocks < 16 * threads:
            if m_blocks < m_panels:
                m_blocks += 1
            elif n_blocks < n_panels:
                n_blocks += 1
            else:
                break
    return m_blocks, n_blocks


#: bytes of one way of the L1 data cache (64 sets of 64-byte lines on every
#: x86 core jitnn has run on, 32 KiB 8-way and 48 KiB 12-way alike)
_L1_WAY_BYTES = 4096


def a_in_place(a_t: bool, K: int) -> bool:
    """Whether the packed path's full row panels read A in place instead of
    packing it.

    Packing costs the same per row panel whatever N is, so it weighs most on
    products with few columns: 1 thread, AVX-512 (Zen 4), against packing,
    3136 x 96 x 96 651 -> 567 us, 3136 x 384 x 96 2638 -> 2319 us, 784 x 768
    x 192 2404 -> 2103 us; 512^3 the same or better. Not when A is transposed
    (its rows are columns), nor when its row stride is a multiple of an L1 way:
    then a tile's MR rows all fall in one cache set and evict each other
    (1024^3 19.9 -> 25.7 ms, 128 x 3072 x 768 5.6 -> 7.4 ms)."""
    return not a_t and (K * 4) % _L1_WAY_BYTES != 0


def rows_outer(kc: int, panels: int) -> bool:
    """Whether a task runs its tiles row panel by row panel (each A panel of
    ``kc x MR`` read from L1 by all of the task's ``panels`` B panels, which
    come from L2) instead of Goto's order (each B panel in L1 under all the
    A panels): when that A panel fits in half of L1 and those B panels in
    half of L2, as for a short K. A in place, 1 thread, Zen 4: 3136 x 96 x
    384 2550 -> 2253 us, 784 x 192 x 768 2272 -> 2159 us."""
    return kc * MR * 4 <= _L1D // 2 and kc * panels * NR * 4 <= _L2 // 2


def _run(op, a, a_t, b, b_t, a_index, b_index, out, alpha, beta, c, bias,
         residual, activation, param0, param1, threads):
    """Pick the path and call its kernel (operands already checked)."""
    call = _call(op, a, a_t, b, b_t, a_index, b_index, out, alpha, beta, c, bias, residual,
                 activation, param0, param1, threads)
    if call is not None:
        try:  # the drivers raise ValueError when out overlaps an input
            call[0](*call[1])
        except ValueError as error:
            _fail(op, str(error))


def _call(op, a, a_t, b, b_t, a_index, b_index, out, alpha, beta, c, bias,
          residual, activation, param0, param1, threads):
    """The driver :func:`_run` calls and its arguments, ``(kernel, args)``;
    None when there is nothing to compute."""
    G, M, N = out.shape
    K = a.shape[1] if a_t else a.shape[2]
    if G == 0 or M == 0 or N == 0:
        return None
    act = _activation(op, activation)
    alpha, beta, param0, param1 = float(alpha), float(beta), float(param0), float(param1)
    macs = M * N * K
    packed = type(b) is PackedB
    if packed:
        if K == 0:  # nothing to multiply: the direct path writes the epilogue
            b, b_t, packed, b_index = _NO_B, False, False, np.zeros(G, np.int64)
        else:
            kc, b_data, b = b.kc, b.data, _NO_B
    if not packed:
        kc, b_data = k_block(K), _NOT_PACKED
    # the direct path reads B once, in place: for tiny products and few rows
    direct = not packed and (macs <= DIRECT_MAX_MACS or M <= DIRECT_MAX_ROWS or K == 0)
    if macs * G < PARALLEL_MIN_MACS:
        threads = 1
    elif threads is None:
        threads = numba.get_num_threads()
    key = (G, 1 if direct else M, N, threads)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 4096:
            _PLANS.clear()
        plan = _PLANS[key] = plan_blocks(*key)
    m_blocks, n_blocks = plan
    if direct and M == 1:
        # a matrix-vector product streams rows of B: cut it into as few
        # column blocks as there are threads, for long contiguous runs
        n_blocks = min(n_blocks, max(1, -(-threads // G)))
    if direct:
        path = "gemv" if M == 1 and K > 0 else "direct"
    else:
        path = "row" if M == 1 else "packed"
    in_place = a_in_place(a_t, K)
    n_panels = -(-N // NR)
    outer = in_place and rows_outer(kc, -(-n_panels // n_blocks))   # panels a task covers
    return gemm_driver(path).on_threads(threads), (
        a, a_t, b, b_t, b_data, a_index, b_index, out, kc, m_blocks, n_blocks, in_place,
        outer, alpha, beta, c, bias, residual, act, param0, param1, threads)


def _check_out(op, out, shape):
    if type(out) is not np.ndarray or out.dtype != _F32:
        _fail(op, "out must be a float32 numpy array")
    if out.shape != shape:
        _fail(op, f"out has shape {out.shape}, expected {shape}")
    flags = out.flags
    if not flags.c_contiguous or not flags.writeable:
        _fail(op, "out must be C-contiguous and writeable")


def _matrix(op, name, x, transpose):
    """A 2-D operand as a C-contiguous float32 matrix and its transpose flag
    (the fast common case of :func:`_operand`)."""
    if (type(x) is np.ndarray and x.dtype is _F32 and x.ndim == 2
            and x.flags.c_contiguous):
        return x, bool(transpose)
    x, transpose = _operand(op, name, x, transpose, 2)
    return x[0], transpose


def gemm_call(a, b, out, *, alpha=1.0, beta=1.0, c=None, bias=None, residual=None,
              activation=NONE, param0=0.0, param1=0.0, a_transpose=False,
              b_transpose=False, threads=None):
    """The checked arguments of a :func:`gemm` call (the same options):
    ``(kernel, args)`` with ``kernel(*args)`` computing it, or None when there
    is nothing to compute. A replayed plan keeps the pair (one call instead
    of the checks, ~15 us of Python per product); ``c`` and ``residual`` are
    then read from the arrays (or views of them) given here, so they must be
    float32 and C-contiguous for the call to see later values. Raises
    ValueError as :func:`gemm` does; the kernel raises ValueError when
    ``out`` overlaps an input."""
    op = "gemm"
    a2, a_t, b2, b_t, M, K, N, packed = _gemm_operands(op, a, b, out, a_transpose, b_transpose)
    return _call(op, a2[None], a_t, b2 if packed else b2[None], b_t, _FIRST, _FIRST,
                 out[None], alpha, beta, _addend(op, "c", c, 1, M, N),
                 _bias(op, bias, N), _addend(op, "residual", residual, 1, M, N), activation,
                 param0, param1, threads)


def _gemm_operands(op, a, b, out, a_transpose, b_transpose):
    """:func:`gemm`'s operands checked: ``(a2, a_t, b2, b_t, M, K, N, packed)``."""
    a2, a_t = _matrix(op, "a", a, a_transpose)
    M, K = (a2.shape[1], a2.shape[0]) if a_t else a2.shape
    packed = type(b) is PackedB
    if packed:
        if b.batch != 1:
            _fail(op, f"a packed B of {b.batch} matrices needs batched_matmul")
        if b_transpose:
            _fail(op, "b_transpose must be False with a PackedB (pack_b applied it)")
        b2, b_t, Kb, N = b, False, b.k, b.n
    else:
        b2, b_t = _matrix(op, "b", b, b_transpose)
        Kb, N = (b2.shape[1], b2.shape[0]) if b_t else b2.shape
    if Kb != K:
        _fail(op, f"inner dimensions differ: A is ({M}, {K}), B is ({Kb}, {N}) "
                  f"(a {a.shape}{' transposed' if a_transpose else ''}, "
                  f"b {b.shape}{' transposed' if b_transpose else ''})")
    _check_out(op, out, (M, N))
    return a2, a_t, b2, b_t, M, K, N, packed


def gemm(a, b, out, *, alpha=1.0, beta=1.0, c=None, bias=None, residual=None,
         activation=NONE, param0=0.0, param1=0.0, a_transpose=False,
         b_transpose=False, threads=None):
    """``out = act(alpha * A @ B + beta * c + bias + residual)``, float32.

    * ``a``: ``(M, K)``, or ``(K, M)`` with ``a_transpose`` (A = a.T)
    * ``b``: ``(K, N)``, or ``(N, K)`` with ``b_transpose``; or a :class:`PackedB`
      of one matrix (its transpose was settled when it was packed)
    * ``out``: ``(M, N)``, C-contiguous, not overlapping any input
    * ``c``, ``residual``: anything that broadcasts to ``(M, N)`` (scalar, ``(N,)``,
      ``(M, 1)``, ``(M, N)``; converted to float32); ``bias``: ``(N,)``
    * ``activation``: a code (or name) from :mod:`.epilogue`, with ``param0``,
      ``param1``
    * ``threads``: threads to use; None asks numba (``numba.get_num_threads()``)

    ``a``, ``b`` must be float32 and C-contiguous or the transpose of a
    C-contiguous array (read through the flag, no copy). Returns ``out``.
    """
    op = "gemm"
    a2, a_t, b2, b_t, M, K, N, packed = _gemm_operands(op, a, b, out, a_transpose, b_transpose)
    if (M * N * K <= DIRECT_MAX_MACS and not packed and c is None
            and bias is None and residual is None and activation == NONE
            and alpha == 1.0):
        # tiny and plain: the shortest way through (see matmul_small)
        try:
            matmul_small(a2, a_t, b2, b_t, out)
        except ValueError as error:  # the overlap check
            _fail(op, str(error))
        return out
    c3 = _addend(op, "c", c, 1, M, N)
    r3 = _addend(op, "residual", residual, 1, M, N)
    _run(op, a2[None], a_t, b2 if packed else b2[None], b_t, _FIRST, _FIRST,
         out[None], alpha, beta, c3, _bias(op, bias, N), r3, activation, param0,
         param1, threads)
    return out


def _index(op, name, index, count, G):
    if index is None:
        if count == G:
            return np.arange(G, dtype=np.int64)
        if count == 1:
            return np.zeros(G, np.int64)
        _fail(op, f"{name} is needed: {count} matrices for {G} products")
    index = np.ascontiguousarray(index, dtype=np.int64)
    if index.shape != (G,):
        _fail(op, f"{name} must have shape ({G},), got {index.shape}")
    if G and (index.min() < 0 or index.max() >= count):
        _fail(op, f"{name} has values outside [0, {count})")
    if not index.flags.writeable:
        # (a broadcast index raveled is a read-only view: another numba
        # signature, so every driver would compile once more for it)
        index = index.copy()
    return index


def batched_matmul(a, b, out, a_index=None, b_index=None, *, alpha=1.0, beta=1.0,
                   c=None, bias=None, residual=None, activation=NONE, param0=0.0,
                   param1=0.0, a_transpose=False, b_transpose=False, threads=None):
    """``out[g] = act(alpha * A[a_index[g]] @ B[b_index[g]] + beta * c[g] + bias +
    residual[g])`` for every ``g`` of ``out: (G, M, N)``.

    * ``a``: ``(BA, M, K)``, or ``(BA, K, M)`` with ``a_transpose``
    * ``b``: ``(BB, K, N)``, or ``(BB, N, K)`` with ``b_transpose``; or a
      :class:`PackedB` of BB matrices
    * ``a_index``, ``b_index``: ``(G,)`` ints in ``[0, BA)``, ``[0, BB)``; None means
      ``arange(G)`` when there are G matrices, zeros when there is one
    * ``c``, ``residual``: broadcast to ``(G, M, N)``; ``bias``: ``(N,)``

    This is how the runtime broadcasts batch dimensions: flatten each
    operand's batch dimensions and map every output product to the matrices it
    reads. The products run in parallel (product x row block x column block).
    Returns ``out``.
    """
    op = "batched_matmul"
    a3, a_t = _operand(op, "a", a, a_transpose, 3)
    M, K = (a3.shape[2], a3.shape[1]) if a_t else (a3.shape[1], a3.shape[2])
    if type(b) is PackedB:
        if b_transpose:
            _fail(op, "b_transpose must be False with a PackedB (pack_b applied it)")
        b3, b_t, BB, Kb, N = b, False, b.batch, b.k, b.n
    else:
        b3, b_t = _operand(op, "b", b, b_transpose, 3)
        BB = b3.shape[0]
        Kb, N = (b3.shape[2], b3.shape[1]) if b_t else (b3.shape[1], b3.shape[2])
    if Kb != K:
        _fail(op, f"inner dimensions differ: A is (.., {M}, {K}), B is (.., {Kb}, {N}) "
                  f"(a {a.shape}, b {b.shape})")
    if type(out) is not np.ndarray or out.ndim != 3:
        _fail(op, "out must be a float32 array of rank 3 (G, M, N)")
    G = out.shape[0]
    _check_out(op, out, (G, M, N))
    a_index = _index(op, "a_index", a_index, a3.shape[0], G)
    b_index = _index(op, "b_index", b_index, BB, G)
    c3 = _addend(op, "c", c, G, M, N)
    r3 = _addend(op, "residual", residual, G, M, N)
    _run(op, a3, a_t, b3, b_t, a_index, b_index, out, alpha, beta, c3,
         _bias(op, bias, N), r3, activation, param0, param1, threads)
    return out


def pack_b(b, b_transpose=False, threads=None):
    """Pack a constant right operand once: ``b: (K, N)`` or a batch
    ``(BB, K, N)`` (``(N, K)`` / ``(BB, N, K)`` with ``b_transpose``).
    Returns a :class:`PackedB` for :func:`gemm` / :func:`batched_matmul`."""
    op = "pack_b"
    if type(b) is not np.ndarray:
        _fail(op, f"b must be a float32 numpy array, got {type(b).__name__}")
    if b.ndim not in (2, 3):
        _fail(op, f"b must have rank 2 or 3, got shape {b.shape}")
    b3, b_t = _operand(op, "b", b, b_transpose, b.ndim)
    K, N = (b3.shape[2], b3.shape[1]) if b_t else (b3.shape[1], b3.shape[2])
    data = np.empty((b3.shape[0], K * (-(-N // NR)) * NR), np.float32)
    kc = k_block(K)
    if data.size:
        if threads is None:
            threads = numba.get_num_threads() if data.size >= (1 << 18) else 1
        (pack_b_parallel if threads > 1 else pack_b_serial)(b3, b_t, kc, data)
    return PackedB(data, K, N, kc)
