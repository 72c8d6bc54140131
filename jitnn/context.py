"""The CPU context: block size, threads, counters, and the readback pool.

A :class:`Context` owns what the kernels need to know about the machine (the
channel block, the thread count) and counts what happened (:attr:`stats`).
Contexts and their tensors may be used from several threads at once: the
counters sit behind a lock, and numba's thread count is per calling thread,
so every kernel launch sets it first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterable, Sequence

import numba
import numpy as np

from . import layouts
from .errors import JitnnTypeError, JitnnValueError
from .kernels import _config, layout as layout_kernels

if TYPE_CHECKING:
    from .tensor import Tensor


def host_block() -> int:
    """Channels per block for this CPU: 16 with AVX-512, 8 with AVX2, else 4."""
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    if features.get("avx512f", False):
        return 16
    if features.get("avx2", False):
        return 8
    return 4


@dataclasses.dataclass(frozen=True)
class Stats:
    """A snapshot of a context's counters (see :attr:`Context.stats`).

    ``reorders``: activation layout conversions run (plain <-> blocked), the
    tax a blocked layout pays at its boundaries; ``reorder_bytes``: bytes they
    wrote; ``filter_packs`` / ``filter_pack_bytes``: filters packed into the
    kernels' layout (once per filter tensor and block size); ``launches``: kernel
    launches of any kind; ``fused_ops``: ops folded into another op's kernel;
    ``flushes``: times pending work was run for a readback; ``compile_s``:
    seconds of the launches that compiled a kernel or loaded it from the disk
    cache (the first call of each specialization, that run included).
    """

    reorders: int = 0
    reorder_bytes: int = 0
    filter_packs: int = 0
    filter_pack_bytes: int = 0
    launches: int = 0
    fused_ops: int = 0
    flushes: int = 0
    compile_s: float = 0.0


_STAT_FIELDS = tuple(field.name for field in dataclasses.fields(Stats))


class Context:
    """Where tensors live and kernels run: the CPU, with a block size and threads.

    ``num_threads`` defaults to every core numba sees; ``block`` to the host's
    SIMD width in float32 lanes (:func:`host_block`). Both are fixed for the
    context's lifetime.
    """

    def __init__(self, num_threads: int | None = None, block: int | None = None):
        max_threads = numba.config.NUMBA_NUM_THREADS
        if num_threads is None:
            num_threads = max_threads
        if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) \
                or not 1 <= num_threads <= max_threads:
            raise JitnnValueError(
                f"Context: num_threads must be an int from 1 to {max_threads} "
                f"(numba's NUMBA_NUM_THREADS), got {num_threads!r}")
        self.num_threads: int = int(num_threads)
        self.block: int = layouts.check_block(host_block() if block is None else block)
        self._lock = threading.Lock()
        # Plain ints behind a lock (a launch counts in well under a microsecond);
        # ``stats`` hands out an immutable snapshot.
        self._counters: dict[str, float] = dict.fromkeys(_STAT_FIELDS, 0)
        self._pool: ThreadPoolExecutor | None = None
        # numba's workqueue layer is not thread-safe: serialize kernels then.
        self._serialize = _config.threading_layer() == "workqueue"
        self._kernel_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Context(num_threads={self.num_threads}, block={self.block})"

    # --- tensors -----------------------------------------------------------------

    def tensor(self, data: object) -> "Tensor":
        """A Tensor holding a float32 copy of ``data`` (see :func:`jitnn.tensor`)."""
        from .tensor import Tensor
        return Tensor._from_host(self, data)

    # --- counters ----------------------------------------------------------------

    @property
    def stats(self) -> Stats:
        """A snapshot of the counters since creation or :meth:`reset_stats`."""
        with self._lock:
            return Stats(**self._counters)

    def reset_stats(self) -> None:
        with self._lock:
            self._counters = dict.fromkeys(_STAT_FIELDS, 0)

    def _count(self, **increments: float) -> None:
        with self._lock:
            counters = self._counters
            for name, value in increments.items():
                counters[name] += value

    # --- running kernels ---------------------------------------------------------

    def _launch(self, kernel, *args, threads: int | None = None, **options) -> None:
        """Run one kernel with this context's thread count (per calling thread)."""
        numba.set_num_threads(threads or self.num_threads)
        # A numba dispatcher lists its compiled specializations; a Python
        # wrapper around several kernels does not, and is not timed here.
        overloads = getattr(kernel, "overloads", None)
        known = len(overloads) if overloads is not None else 0
        start = time.perf_counter()
        if self._serialize:
            with self._kernel_lock:
                kernel(*args, **options)
        else:
            kernel(*args, **options)
        if overloads is not None and len(overloads) > known:
            # This call compiled the kernel (or loaded it from the disk cache).
            self._count(launches=1, compile_s=time.perf_counter() - start)
        else:
            self._count(launches=1)

    def _reorder(self, kernel, source: np.ndarray, out: np.ndarray,
                 threads: int | None = None) -> np.ndarray:
        """Run a layout-conversion kernel and count it as a reorder."""
        self._launch(kernel, source, out, threads=threads)
        self._count(reorders=1, reorder_bytes=out.nbytes)
        return out

    def _to_blocked(self, plain: np.ndarray, axes: str, block: int | None = None) -> np.ndarray:
        """Reorder a plain 4-D array (logical ``axes`` "nchw" or "nhwc") to
        ``nChw{block}c`` (the context's block by default), counted as a reorder."""
        block = self.block if block is None else block
        nchw = plain.shape if axes == "nchw" else \
            (plain.shape[0], plain.shape[3], plain.shape[1], plain.shape[2])
        out = np.empty(layouts.blocked_shape(nchw, block), np.float32)
        kernel = layout_kernels.nchw_to_blocked if axes == "nchw" \
            else layout_kernels.nhwc_to_blocked
        return self._reorder(kernel, np.ascontiguousarray(plain), out)

    # --- readback ----------------------------------------------------------------

    def _readback_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=max(2, self.num_threads), thread_name_prefix="jitnn-read")
            return self._pool

    def read_all(self, tensors: Sequence["Tensor"],
                 out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        """Read several tensors at once, returning standard-layout arrays in order.

        Every readback starts before any is waited on; the conversions run
        concurrently on the context's threads (each gets its share of them).
        ``out``, if given, has one entry per tensor: an array to fill, or None.
        """
        from .tensor import Tensor
        tensors = list(tensors)
        for index, tensor in enumerate(tensors):
            if not isinstance(tensor, Tensor):
                raise JitnnTypeError(
                    f"read_all: item {index} should be a jitnn.Tensor, got {type(tensor).__name__}")
            if tensor._ctx is not self:
                raise JitnnValueError(
                    f"read_all: item {index} belongs to another context")
        outs = [None] * len(tensors) if out is None else list(out)
        if len(outs) != len(tensors):
            raise JitnnValueError(
                f"read_all: out has {len(outs)} entries but {len(tensors)} tensors were given")
        for index, (tensor, buf) in enumerate(zip(tensors, outs)):
            if buf is not None:
                tensor._check_out(buf, op=f"read_all (item {index})")
        if len(tensors) <= 1:
            return [t.numpy(out=o) for t, o in zip(tensors, outs)]
        # Compute what the tensors need first (once), then convert in parallel.
        for tensor in tensors:
            tensor._materialize()
        share = max(1, self.num_threads // min(len(tensors), self.num_threads))
        pool = self._readback_pool()
        futures = [pool.submit(t._read_into, o, share) for t, o in zip(tensors, outs)]
        return [f.result() for f in futures]

    async def read_async(self, tensor: "Tensor", out: np.ndarray | None = None) -> np.ndarray:
        """Await one readback on the context's readback threads."""
        if out is not None:
            tensor._check_out(out, op="read_async")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readback_pool(), tensor._read_into, out, None)


_default_lock = threading.Lock()
_default: Context | None = None


def default_context() -> Context:
    """The context that module-level functions (``jitnn.tensor``, ops) use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context()
        return _default


def read_all(tensors: Iterable["Tensor"],
             out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
    """Read several tensors in parallel (see :meth:`Context.read_all`)."""
    tensors = list(tensors)
    ctx = tensors[0]._ctx if tensors else default_context()
    return ctx.read_all(tensors, out)
