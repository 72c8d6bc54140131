"""The CPU context: block size, threads, counters, and the readback pool.

A :class:`Context` owns what the kernels need to know about the machine (the
channel block, the thread count) and counts what happened (:attr:`stats`).
Contexts and their tensors may be used from several threads at once: the
counters sit behind a lock, and numba's thread count is per calling thread,
so every kernel launch sets it first.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence, TypeVar

import numba
import numba.core.event
import numpy as np

from . import layouts
from .errors import JitnnExecutionError, JitnnTypeError, JitnnValueError
from .kernels import _config, conv2d as conv_kernels, layout as layout_kernels
from .plan_cache import PlanCache

if TYPE_CHECKING:
    from .graph import Graph
    from .scheduler import Plan
    from .tensor import Tensor, Value

T = TypeVar("T")

#: ``Context(policy=...)``: how ops run (the numbers are the same; the cost is not)
POLICIES = ("blocked", "eager", "plain")
#: how 3x3 convolutions run (see :class:`Context`)
CONV_ALGORITHMS = conv_kernels.ALGORITHMS


def host_block() -> int:
    """Channels per block for this CPU: 16 with AVX-512, 8 with AVX2, else 4."""
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    if features.get("avx512f", False):
        return 16
    if features.get("avx2", False):
        return 8
    return 4


class _CompileClock(numba.core.event.Listener):
    """Seconds each thread has spent inside numba's compiler lock: compiling
    a kernel, loading it from the disk cache, or waiting for another thread's
    compile (numba's documented event API, ``"numba:compiler_lock"``).

    A call of a specialization numba already has never takes that lock, so
    the clock stands still while kernels run; a launch's ``compile_s`` is how
    far it moved during the launch. (Counting the new specializations of the
    dispatcher a launch called, as before, missed every kernel behind a
    Python wrapper: a ResNet-50 on an empty kernel cache showed 0 s of the
    66 s it spent compiling.)"""

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


@dataclasses.dataclass(frozen=True)
class Stats:
    """A snapshot of a context's counters (see :attr:`Context.stats`).

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


class Context:
    """Where tensors live and kernels run: the CPU, with a block size and threads.

    ``num_threads`` defaults to every core numba sees; ``block`` to the host's
    SIMD width in float32 lanes (:func:`host_block`). Both are fixed for the
    context's lifetime.

    ``policy`` says how ops run:

    * ``"blocked"`` (default): ops are recorded and run when a result is read,
      as one scheduled plan: fused (conv2d + batch norm + residual add +
      activation in one kernel; elementwise chains in one pass), data kept
      blocked between ops, converted once at each end;
    * ``"eager"``: each op runs at its call, on blocked data, without fusion;
    * ``"plain"``: each op runs at its call and its result is converted back
      to plain NCHW, as a framework that needs standard layout between ops.

    ``conv_algorithm`` says how 3x3 convolutions with stride 1 run:
    ``"auto"`` (default) uses Winograd F(4x4, 3x3) where it pays (8 or more
    input and output channels: 1.5-3x faster than the direct kernel, with
    ~10x the rounding error, relative ~1e-5; a NaN or inf input pixel turns
    most of the 4 x 4 output tiles around it NaN), ``"direct"`` never,
    ``"winograd"`` wherever it applies (see
    :func:`jitnn.kernels.conv2d.conv2d_algorithm`); ``jitnn.explain`` shows
    which ran.

    Pending work is bounded: past ``max_pending_ops`` recorded ops or
    ``max_pending_bytes`` of pending results, everything the caller still
    holds is computed (an auto-flush).
    """

    def __init__(self, num_threads: int | None = None, block: int | None = None, *,
                 policy: str = "blocked", max_pending_ops: int = 256,
                 max_pending_bytes: int = 2**30, conv_algorithm: str = "auto"):
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
        if policy not in POLICIES:
            raise JitnnValueError(f"Context: policy must be one of {POLICIES}, got {policy!r}")
        self.policy: str = policy
        if conv_algorithm not in CONV_ALGORITHMS:
            raise JitnnValueError(f"Context: conv_algorithm must be one of {CONV_ALGORITHMS}, "
                                  f"got {conv_algorithm!r}")
        self.conv_algorithm: str = conv_algorithm
        for name, limit in (("max_pending_ops", max_pending_ops),
                            ("max_pending_bytes", max_pending_bytes)):
            if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
                raise JitnnValueError(f"Context: {name} must be an int >= 1, got {limit!r}")
        self.max_pending_ops = int(max_pending_ops)
        self.max_pending_bytes = int(max_pending_bytes)
        # Pending values recorded since the last flush (weak: a result nobody
        # holds or reads may be fused away), and what they add up to.
        self._pending: list = []
        self._pending_bytes = 0
        # One flush at a time per context: plans read and rewrite shared nodes.
        self._flush_lock = threading.RLock()
        self._trace = threading.local()
        # per thread: ops recorded by a compute's dispatch, which flushes them itself
        self._computing = threading.local()
        self._symbolic = False      # a GraphBuilder's shape-only context: never runs
        # single-op graphs: an op's validated signature, by op, shapes, layouts
        # and options (bounded: varying shapes do not grow memory without limit)
        self._graphs: collections.OrderedDict = collections.OrderedDict()
        # plans of earlier flushes, by the shape of their pending DAG (an eager
        # program that records the same ops every call is planned once)
        self._plans = PlanCache()
        self._lock = threading.Lock()
        # Plain ints behind a lock (a launch counts in well under a microsecond);
        # ``stats`` hands out an immutable snapshot.
        self._counters: dict[str, float] = dict.fromkeys(_STAT_FIELDS, 0)
        self._pool: ThreadPoolExecutor | None = None
        # numba's workqueue layer is not thread-safe: serialize kernels then.
        self._serialize = _config.threading_layer() == "workqueue"
        self._kernel_lock = threading.Lock()

    def __repr__(self) -> str:
        algorithm = "" if self.conv_algorithm == "auto" else \
            f", conv_algorithm={self.conv_algorithm!r}"
        return (f"Context(num_threads={self.num_threads}, block={self.block}, "
                f"policy={self.policy!r}{algorithm})")

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

    def _launch(self, kernel, *args, threads: int | None = None, _counter: str = "launches",
                **options) -> None:
        """Run one kernel with this context's thread count (per calling thread),
        counted under ``_counter`` (None: not counted; reorders count themselves)."""
        # (written out, not through _count: it runs once per op of every flush)
        compiled_before = _COMPILE_CLOCK.seconds()
        start = time.perf_counter()
        self._run_bound(kernel, args, threads, options)
        seconds = time.perf_counter() - start
        compiled = _COMPILE_CLOCK.seconds() - compiled_before
        in_kernel = seconds - compiled      # (the compile ran inside this span)
        _thread_state.kernel_s += in_kernel
        if compiled and _thread_state.timing_compiles:
            compiled = 0.0                 # an enclosing span counts it
        if _counter or compiled:
            with self._lock:
                counters = self._counters
                if _counter:
                    counters[_counter] += 1
                    counters["launch_s"] += in_kernel
                if compiled:
                    counters["compile_s"] += compiled

    def _side_work(self, make: Callable[[], T]) -> T:
        """``make()``: work that runs kernels outside :meth:`_launch` (packing
        a filter, planning a convolution), on this context's thread count,
        its numba compiles counted in ``compile_s`` (the launches inside it
        leave theirs to this count)."""
        self._use_threads(self.num_threads)
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
                self._count(compile_s=compiled)

    @staticmethod
    def _use_threads(wanted: int) -> None:
        """Have numba run this thread's parallel kernels on ``wanted`` threads
        (numba's count is per calling thread; setting it costs ~1.5 us, so
        only when it differs, which the caller's own ``numba.set_num_threads``
        may have made it)."""
        if _config.numba_threads() != wanted:
            numba.set_num_threads(wanted)

    def _run_bound(self, kernel, args: tuple, threads: int | None = None,
                   options: dict | None = None) -> None:
        """Call ``kernel(*args, **options)`` on ``threads`` (default: this
        context's count) numba threads, uncounted: :meth:`_launch` counts its
        calls, a replay its bound calls once per run (jitnn/executor.py)."""
        self._use_threads(threads or self.num_threads)
        if self._serialize:
            with self._kernel_lock:
                kernel(*args, **(options or {}))
        elif options:
            kernel(*args, **options)
        else:
            kernel(*args)

    def _reorder(self, kernel, source: np.ndarray, out: np.ndarray,
                 threads: int | None = None) -> np.ndarray:
        """Run a layout-conversion kernel and count it as a reorder."""
        start = time.perf_counter()
        self._launch(kernel, source, out, threads=threads, _counter=None)
        seconds = time.perf_counter() - start
        self._count(reorders=1, reorder_bytes=out.nbytes, reorder_s=seconds)
        trace = getattr(self._trace, "reorders", None)
        if trace is not None:
            trace.append((f"reorder {kernel.__name__.replace('_to_', ' -> ')}", out.nbytes,
                          seconds))
        return out

    def _tracing(self, reorders: list | None) -> list | None:
        """Collect the reorders this thread runs into ``reorders`` (for explain)
        until the next call; returns the previous collector to restore."""
        previous = getattr(self._trace, "reorders", None)
        self._trace.reorders = reorders
        return previous

    #: how many single-op graphs a context keeps (least recently used go first)
    SINGLE_OP_GRAPHS = 512

    def _single_op_graph(self, key: tuple, make):
        """``make()`` (validate an op call, infer its shapes) once per key."""
        try:
            found = self._graphs.get(key)
        except TypeError:                   # an unhashable option (a list): no cache
            return make()
        if found is None:
            found = make()
            with self._lock:
                self._graphs[key] = found
                if len(self._graphs) > self.SINGLE_OP_GRAPHS:
                    self._graphs.popitem(last=False)
        else:
            try:
                self._graphs.move_to_end(key)
            except KeyError:                # evicted by another thread meanwhile
                pass
        return found

    # --- pending work ------------------------------------------------------------

    def _recorded(self, value: "Value") -> None:
        """A new pending value: run it now (eager, plain) or keep it for the next
        flush, flushing early when the pending work passes its bound (a
        compute's own values are neither: it flushes them at once)."""
        if self._symbolic:
            return
        if self.policy != "blocked":
            self._flush([value])
            return
        if getattr(self._computing, "active", False):
            # A compute's own op on this thread: it is flushed as soon as the
            # graph is dispatched, so it is not pending work for anyone else
            # (another thread's flush would split the compute's plan) and does
            # not count towards the bound (an auto-flush in the middle of the
            # dispatch would split it too, and make every value it holds kept).
            return
        nbytes = _scheduler().physical_bytes(value)
        with self._lock:
            self._pending.append(weakref.ref(value))
            self._pending_bytes += nbytes
            over = (len(self._pending) > self.max_pending_ops
                    or self._pending_bytes > self.max_pending_bytes)
        if over:
            self._auto_flush()

    def _auto_flush(self) -> None:
        """A flush that the pending bound asked for, from the call that
        recorded one op too many. If running the pending work fails, that
        call is innocent: the error is not raised here. The values that were
        not computed stay pending (off the queue) and their own read runs
        them again and raises, naming the op that failed."""
        try:
            self.flush()
        except JitnnExecutionError:
            pass

    def flush(self) -> None:
        """Compute every pending result the caller still holds (and what they need)."""
        with self._lock:
            refs, self._pending, self._pending_bytes = self._pending, [], 0
        values = [v for v in (ref() for ref in refs)
                  if v is not None and v._data is None and v.held]
        if values:
            self._flush(values)

    def _flush(self, values: list["Value"], capture=None) -> "Plan | None":
        """Plan and run the pending work behind ``values`` (one flush at a time);
        ``capture``: an :class:`jitnn.executor.Capture` to record the run in."""
        with self._flush_lock:
            values = [v for v in values if v._data is None]
            if not values:
                return None
            plan = _scheduler().schedule(self, values)
            _executor().execute(self, plan, capture)
            self._count(flushes=1, plans_reused=int(plan.reused))
        if self._pending:
            with self._lock:  # forget what is done
                alive = [(r, r()) for r in self._pending]
                alive = [(r, v) for r, v in alive if v is not None and v._data is None]
                self._pending = [r for r, _ in alive]
                self._pending_bytes = sum(physical_bytes_of(v) for _, v in alive)
        return plan

    def _to_blocked(self, plain: np.ndarray, axes: str, block: int | None = None) -> np.ndarray:
        """Reorder a plain 4-D array (logical ``axes`` "nchw" or "nhwc") to
        ``nChw{block}c`` (the context's block by default), counted as a reorder."""
        block = self.block if block is None else block
        nchw = plain.shape if axes == "nchw" else \
            (plain.shape[0], plain.shape[3], plain.shape[1], plain.shape[2])
        out = conv_kernels.aligned_empty(layouts.blocked_shape(nchw, block))
        kernel = layout_kernels.nchw_to_blocked if axes == "nchw" \
            else layout_kernels.nhwc_to_blocked
        return self._reorder(kernel, np.ascontiguousarray(plain), out)

    # --- graphs ------------------------------------------------------------------

    def dispatch(self, graph: "Graph", inputs: Mapping[str, object]) -> dict[str, "Tensor"]:
        """Queue ``graph`` on ``inputs`` ({name: Tensor or array}); returns
        ``{name: Tensor}`` at once, pending. Inputs are validated now: an unknown
        or missing name, or a wrong shape or dtype, raises a TypeError naming it."""
        from .graph import Graph
        if not isinstance(graph, Graph):
            raise JitnnTypeError(f"dispatch: expected a jitnn Graph, got {type(graph).__name__}")
        return graph._dispatch(self, inputs)

    def compute(self, graph: "Graph", inputs: Mapping[str, object],
                outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run ``graph`` now and write every output, in standard layout, into the
        caller's array in ``outputs`` ({name: float32 C-contiguous array}).

        Inputs are checked at every call, as by :meth:`dispatch`. A float32,
        C-contiguous, aligned and writeable array that overlaps no output is
        read in place (the call reads it only while it runs, and no plan writes
        into an input); any other input is copied first.
        The first call dispatches the graph and schedules it like any pending
        work; later calls replay that scheduled plan (the same kernel steps,
        fused nodes and buffers, the same ``stats`` counts) on the new inputs,
        without dispatching the ops or running the scheduler's passes again.
        The graph keeps the plan and its intermediate buffers for this (see
        jitnn/replay.py, which also lists when a call takes the first path).
        """
        from .graph import Graph
        from . import replay
        if not isinstance(graph, Graph):
            raise JitnnTypeError(f"compute: expected a jitnn Graph, got {type(graph).__name__}")
        if not isinstance(outputs, Mapping):
            raise JitnnTypeError(f"compute: outputs must be a dict {{name: array}}, "
                                 f"got {type(outputs).__name__}")
        names = graph.outputs
        unknown = sorted(set(outputs) - set(names))
        missing = sorted(set(names) - set(outputs))
        if unknown or missing:
            raise JitnnTypeError(
                f"compute: outputs must name exactly the graph's outputs {sorted(names)}; "
                + (f"unknown {unknown[0]!r}" if unknown else f"missing {missing[0]!r}"))
        for name, array in outputs.items():
            if not isinstance(array, np.ndarray) or array.dtype != np.float32 \
                    or array.shape != names[name] or not array.flags.c_contiguous \
                    or not array.flags.writeable:
                raise JitnnTypeError(
                    f"compute: output {name!r} must be a writeable C-contiguous float32 array "
                    f"of shape {names[name]}, got "
                    + (f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray)
                       else type(array).__name__))
        for (other, other_array), (name, array) in itertools.combinations(outputs.items(), 2):
            if np.shares_memory(array, other_array):
                raise JitnnValueError(
                    f"compute: outputs {other!r} and {name!r} share memory; each output "
                    "needs an array of its own")
        replay.compute(self, graph, inputs, outputs)
        return dict(outputs)

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
        values = [t._v for t in tensors]
        if len(values) > 1:
            # Compute what the tensors need first (one flush), then convert in parallel.
            self._flush(values)
        return self._read_values(values, outs)

    def _read_values(self, values: Sequence["Value"],
                     outs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        """Read ``values`` (computed, or one pending: read flushes it) into
        ``outs`` (checked), several at once on the readback threads."""
        if len(values) <= 1:
            return [v._read_into(o, None) for v, o in zip(values, outs)]
        share = max(1, self.num_threads // min(len(values), self.num_threads))
        pool = self._readback_pool()
        futures = [pool.submit(v._read_into, o, share) for v, o in zip(values, outs)]
        return [f.result() for f in futures]

    async def read_async(self, tensor: "Tensor", out: np.ndarray | None = None) -> np.ndarray:
        """Await one readback on the context's readback threads."""
        if out is not None:
            tensor._check_out(out, op="read_async")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readback_pool(), tensor._read_into, out, None)


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
    """Count kernel calls made outside :meth:`Context._launch` (a replay's
    bound calls) in :func:`kernel_seconds`."""
    _thread_state.kernel_s += seconds


def physical_bytes_of(value: "Value | None") -> int:
    return 0 if value is None else _scheduler().physical_bytes(value)


def _scheduler():
    """jitnn.scheduler (imported on first use: it imports the ops, which import
    this; kept in a global after that, since every recorded op asks for it)."""
    global _scheduler_module
    if _scheduler_module is None:
        from . import scheduler
        _scheduler_module = scheduler
    return _scheduler_module


def _executor():
    global _executor_module
    if _executor_module is None:
        from . import executor
        _executor_module = executor
    return _executor_module


_scheduler_module = None
_executor_module = None


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
