"""Running kernels and counting what ran: the :class:`Launcher` of a context.

Every kernel call of the runtime goes through a context's launcher: it sets
numba's thread count for the calling thread (numba keeps one per thread),
times the call, and counts it in the context's :class:`Stats` (reorders,
launches, filter packs, compile time). The clocks are per thread: a span's
compile time and kernel time are differences of :func:`compile_seconds` and
:func:`kernel_seconds` taken on the thread that ran it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, TypeVar

import numba
import numba.core.event
import numpy as np

from . import threads
from .kernels import _config

T = TypeVar("T")


class _CompileClock(numba.core.event.Listener):
    """Seconds each thread has spent inside numba's compiler lock: compiling
    a kernel, loading it from the disk cache, or waiting for another thread's
    compile (numba's documented event API, ``"numba:compiler_lock"``).

    A call of a specialization numba already has never takes that lock, so
    the clock stands still while kernels run; a launch's ``compile_s`` is how
    far it moved during the launch. (Counting new specializations of the
    dispatcher a launch called would miss every kernel behind a Python
    wrapper.)"""

    def __init__(self) -> None:
        self._local = threading.local()

    def on_start(self, event) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        if depth == 0:                   # the lock is re-entrant: outermost only
            local.started = time.perf_counter()
        local.depth = depth + 1

    def on_end(self, event) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        if depth == 0:
            # a lock taken before this listener was registered (jitnn imported
            # while another thread compiled): nothing to time, and raising
            # here would break that thread's compile
            return
        local.depth = depth - 1
        if depth == 1:
            local.total = self.seconds() + time.perf_counter() - local.started

    def seconds(self) -> float:
        """This thread's total so far."""
        return getattr(self._local, "total", 0.0)


_COMPILE_CLOCK = _CompileClock()
numba.core.event.register("numba:compiler_lock", _COMPILE_CLOCK)


def compile_seconds() -> float:
    """Seconds the calling thread has spent in numba's compiler so far (see
    :class:`_CompileClock`); differences of it time the compiles of a span."""
    return _COMPILE_CLOCK.seconds()


class _ThreadState(threading.local):
    """Per calling thread: whether an enclosing span times the compiles, and
    the seconds this thread has spent in kernel launches so far (all
    contexts, a replay's bound calls included; its differences time the
    kernels of a plan run, see jitnn/executor.py)."""
    timing_compiles = False
    kernel_s = 0.0


_thread_state = _ThreadState()


def kernel_seconds() -> float:
    """Seconds the calling thread has spent in kernel launches (op kernels and
    reorders, compiles excluded) so far; differences of it time a span's kernels."""
    return _thread_state.kernel_s


def add_kernel_seconds(seconds: float) -> None:
    """Count kernel calls made outside :meth:`Launcher.launch` (a replay's
    bound calls) in :func:`kernel_seconds`."""
    _thread_state.kernel_s += seconds


@dataclasses.dataclass(frozen=True)
class Stats:
    """A snapshot of a context's counters (see ``Context.stats``).

    ``reorders``: activation layout conversions run (plain <-> blocked), the
    tax a blocked layout pays at its boundaries; ``reorder_bytes``: bytes they
    wrote; ``reorder_s``: seconds they took (the reorder tax is this over the
    run's time); ``filter_packs`` / ``filter_pack_bytes``: filters packed into the
    kernels' layout (once per filter tensor and block size); ``launches``: op
    kernels run (conv2d, elementwise, pool, ...; reorders and filter packs are
    counted apart); ``launch_s``: seconds those launches took (each kernel's
    checked wrapper included, its compile not), so that ``launch_s +
    reorder_s`` is the time in kernels and the rest of a run's time is the
    runtime's own (recording, planning, allocating, Python, plain copies in
    and out);
    ``fused_ops``: ops folded into another op's kernel;
    ``flushes``: times pending work was run for a readback; ``plans_reused``:
    flushes that ran an earlier plan, so no scheduler pass ran (a pending
    DAG shaped like an earlier one, jitnn/plan_cache.py, or a ``compute``
    replaying its graph's program, jitnn/replay.py); ``compile_s``:
    seconds numba spent compiling kernels or loading them from the disk cache
    (waiting for another thread's compile included) during this context's
    launches, reorders, filter packing and convolution planning.
    """

    reorders: int = 0
    reorder_bytes: int = 0
    reorder_s: float = 0.0
    filter_packs: int = 0
    filter_pack_bytes: int = 0
    launches: int = 0
    fused_ops: int = 0
    flushes: int = 0
    plans_reused: int = 0
    compile_s: float = 0.0
    launch_s: float = 0.0          # (last: fields are only ever added at the end)


_STAT_FIELDS = tuple(field.name for field in dataclasses.fields(Stats))


class Launcher:
    """Runs a context's kernels on its thread count and counts them.

    Counters are plain numbers behind a lock (a launch counts in well under a
    microsecond); :attr:`stats` hands out an immutable snapshot. numba's
    workqueue threading layer is not thread-safe: kernels run one at a time
    then.
    """

    def __init__(self, num_threads: int):
        self.num_threads = num_threads
        self._lock = threading.Lock()
        self._counters: dict[str, float] = dict.fromkeys(_STAT_FIELDS, 0)
        self._trace = threading.local()
        self._serialize = _config.threading_layer() == "workqueue"
        self._kernel_lock = threading.Lock()

    # --- counters ------------------------------------------------------------------

    @property
    def stats(self) -> Stats:
        with self._lock:
            return Stats(**self._counters)

    def reset_stats(self) -> None:
        with self._lock:
            self._counters = dict.fromkeys(_STAT_FIELDS, 0)

    def count(self, **increments: float) -> None:
        with self._lock:
            counters = self._counters
            for name, value in increments.items():
                counters[name] += value

    # --- kernels -------------------------------------------------------------------

    def launch(self, kernel, *args, threads: int | None = None, counter: str | None = "launches",
               **options) -> None:
        """Run one kernel on this context's thread count (per calling thread),
        counted under ``counter`` (None: not counted; reorders count themselves)."""
        # (written out, not through count(): it runs once per op of every flush)
        compiled_before = _COMPILE_CLOCK.seconds()
        start = time.perf_counter()
        self.run_bound(kernel, args, threads, options)
        seconds = time.perf_counter() - start
        compiled = _COMPILE_CLOCK.seconds() - compiled_before
        in_kernel = seconds - compiled      # (the compile ran inside this span)
        _thread_state.kernel_s += in_kernel
        if compiled and _thread_state.timing_compiles:
            compiled = 0.0                 # an enclosing span counts it
        if counter or compiled:
            with self._lock:
                counters = self._counters
                if counter:
                    counters[counter] += 1
                    counters["launch_s"] += in_kernel
                if compiled:
                    counters["compile_s"] += compiled

    def side_work(self, make: Callable[[], T]) -> T:
        """``make()``: work that runs kernels outside :meth:`launch` (packing
        a filter, planning a convolution), on this context's thread count,
        its numba compiles counted in ``compile_s`` (the launches inside it
        leave theirs to this count)."""
        use_threads(self.num_threads)
        if _thread_state.timing_compiles:
            return make()                  # an enclosing span counts them
        _thread_state.timing_compiles = True
        before = _COMPILE_CLOCK.seconds()
        try:
            return make()
        finally:
            _thread_state.timing_compiles = False
            compiled = _COMPILE_CLOCK.seconds() - before
            if compiled:
                self.count(compile_s=compiled)

    @property
    def serialized(self) -> bool:
        """Whether kernels run one at a time (numba's workqueue layer)."""
        return self._serialize

    def run_bound(self, kernel, args: tuple, threads: int | None = None,
                  options: dict | None = None) -> None:
        """Call ``kernel(*args, **options)`` on ``threads`` (default: this
        context's count) numba threads, uncounted: :meth:`launch` counts its
        calls, a replay its bound calls once per run (jitnn/executor.py)."""
        use_threads(threads or self.num_threads)
        if self._serialize:
            with self._kernel_lock:
                kernel(*args, **(options or {}))
        elif options:
            kernel(*args, **options)
        else:
            kernel(*args)

    def reorder(self, kernel, source: np.ndarray, out: np.ndarray,
                threads: int | None = None) -> np.ndarray:
        """Run a layout-conversion kernel and count it as a reorder."""
        start = time.perf_counter()
        self.launch(kernel, source, out, threads=threads, counter=None)
        seconds = time.perf_counter() - start
        self.count(reorders=1, reorder_bytes=out.nbytes, reorder_s=seconds)
        trace = getattr(self._trace, "reorders", None)
        if trace is not None:
            trace.append((f"reorder {kernel.__name__.replace('_to_', ' -> ')}", out.nbytes,
                          seconds))
        return out

    def tracing(self, reorders: list | None) -> list | None:
        """Collect the reorders this thread runs into ``reorders`` (for explain)
        until the next call; returns the previous collector to restore."""
        previous = getattr(self._trace, "reorders", None)
        self._trace.reorders = reorders
        return previous


def use_threads(wanted: int) -> None:
    """Have numba run this thread's parallel kernels on ``wanted`` threads
    (numba's count is per calling thread; setting it costs ~1.5 us, so only
    when it differs, which the caller's own ``numba.set_num_threads`` may have
    made it)."""
    if threads.FORKED_FROM_GNU_OPENMP:
        wanted = threads.runnable(wanted)   # 1 (jitnn/threads.py: fork)
    if _config.numba_threads() != wanted:
        numba.set_num_threads(wanted)
