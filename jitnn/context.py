"""The CPU context: the facade over the runtime's parts.

A :class:`Context` fixes what the kernels need to know about the machine (the
channel block, the thread count, the policy) and holds the parts that act
for it: its :class:`~jitnn.instrumentation.Launcher` (runs and counts
kernels: ``ctx.stats``), the pending queue and its flush (the scheduler plans,
the executor runs), the caches of single-op signatures and of plans, and its
:class:`~jitnn.readback.Readback` threads. Contexts and their tensors may be
used from several threads at once.
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Any, Iterable, Mapping, Sequence

import numba
import numpy as np

from . import defaults, executor, layouts, readback, replay, scheduler, threads
from .errors import JitnnExecutionError, JitnnTypeError, JitnnValueError
from .instrumentation import Launcher, Stats
from .kernels import _config, conv2d as conv_kernels
from .plan import Plan, physical_bytes
from .plan_cache import PlanCache
from .tensor import Tensor, Value

#: ``Context(policy=...)``: how ops run (the numbers are the same; the cost is not)
POLICIES = ("blocked", "eager", "plain")
#: how 3x3 convolutions run (see :class:`Context`)
CONV_ALGORITHMS = conv_kernels.ALGORITHMS


def host_block() -> int:
    """Channels per block for the CPU numba compiles for (the host, unless
    ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` choose another): 16 with AVX-512 (8
    at half width, Zen 4), 8 with AVX2, else 4 (``kernels._config.HOST_BLOCK``)."""
    return _config.HOST_BLOCK


def _positive_int(name: str, value: object, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1 \
            or (maximum is not None and value > maximum):
        expected = f"an int from 1 to {maximum} (numba's NUMBA_NUM_THREADS)" \
            if maximum is not None else "an int >= 1"
        raise JitnnValueError(f"Context: {name} must be {expected}, got {value!r}")
    return int(value)


class Context:
    """Where tensors live and kernels run: the CPU, with a block size and threads.

    ``num_threads`` defaults to ``OMP_NUM_THREADS``, else the CPUs this process
    may run on, at most numba's pool (jitnn/threads.py; ``num_threads_source``
    says which); ``block`` to the host's SIMD width in float32 lanes
    (:func:`host_block`). Both are fixed for the context's lifetime. It
    pickles as its arguments (jitnn/defaults.py).

    ``policy`` says how ops run:

    * ``"blocked"`` (default): ops are recorded and run when a result is read,
      as one scheduled plan: fused (conv2d + batch norm + residual add +
      activation in one kernel; elementwise chains in one pass), data kept
      blocked between ops, converted once at each end;
    * ``"eager"``: each op runs at its call, on blocked data, without fusion;
    * ``"plain"``: each op runs at its call and its result is converted back
      to plain NCHW, as a framework that needs standard layout between ops.

    ``conv_algorithm`` says how 3x3 convolutions with stride 1 run:
    ``"auto"`` (default) uses Winograd F(4x4, 3x3) where it pays, as timed
    on the host at a shape's first run (jitnn/tuning.py), else by formula
    (~10x the direct kernel's rounding error, relative ~1e-5; a NaN or inf
    input pixel turns most of the 4 x 4 output tiles around it NaN),
    ``"direct"`` never, ``"winograd"`` wherever it applies (see
    :func:`jitnn.kernels.conv2d.conv2d_algorithm`); ``jitnn.explain`` shows
    which ran, and whether it was measured.

    Pending work is bounded: past ``max_pending_ops`` recorded ops or
    ``max_pending_bytes`` of pending results, everything the caller still
    holds is computed (an auto-flush).
    """

    #: how many single-op signatures a context keeps (least recently used go first)
    SINGLE_OP_GRAPHS = 512

    def __init__(self, num_threads: int | None = None, block: int | None = None, *,
                 policy: str = "blocked", max_pending_ops: int = 256,
                 max_pending_bytes: int = 2**30, conv_algorithm: str = "auto"):
        default = threads.default_threads() if num_threads is None else None
        self.num_threads: int = _positive_int(
            "num_threads", default.count if default else num_threads,
            numba.config.NUMBA_NUM_THREADS)
        #: where num_threads came from (``jitnn info`` prints it)
        self.num_threads_source: str = default.source if default else "Context(num_threads=...)"
        self.block: int = layouts.check_block(host_block() if block is None else block)
        if policy not in POLICIES:
            raise JitnnValueError(f"Context: policy must be one of {POLICIES}, got {policy!r}")
        self.policy: str = policy
        if conv_algorithm not in CONV_ALGORITHMS:
            raise JitnnValueError(f"Context: conv_algorithm must be one of {CONV_ALGORITHMS}, "
                                  f"got {conv_algorithm!r}")
        self.conv_algorithm: str = conv_algorithm
        self.max_pending_ops = _positive_int("max_pending_ops", max_pending_ops)
        self.max_pending_bytes = _positive_int("max_pending_bytes", max_pending_bytes)
        # whether threads and block were given: a pickle keeps only those (defaults.py)
        self._given = (default is None, block is not None)
        self.launcher = Launcher(self.num_threads)
        self.readback = readback.Readback(self.num_threads)
        #: earlier flushes' plans, by the shape of their pending DAG (an eager
        #: program that records the same ops every call is planned once)
        self.plans = PlanCache()
        #: one flush at a time per context: plans read and rewrite shared nodes
        self.flush_lock = threading.RLock()
        #: per thread: ``active`` while a compute dispatches (it flushes its ops itself)
        self.computing = threading.local()
        #: a GraphBuilder's shape-only context: records nothing, never runs
        self.symbolic = False
        self._lock = threading.Lock()
        # Pending values recorded since the last flush (weak: a result nobody
        # holds or reads may be fused away), and what they add up to.
        self._pending: list = []
        self._pending_bytes = 0
        # validated op signatures by op, shapes, layouts and options (bounded:
        # varying shapes do not grow memory without limit)
        self._signatures: collections.OrderedDict = collections.OrderedDict()

    def __repr__(self) -> str:
        algorithm = "" if self.conv_algorithm == "auto" else \
            f", conv_algorithm={self.conv_algorithm!r}"
        return (f"Context(num_threads={self.num_threads}, block={self.block}, "
                f"policy={self.policy!r}{algorithm})")

    def __reduce__(self):                  # as its arguments (jitnn/defaults.py)
        return defaults.reduce_context(self)

    def __copy__(self) -> "Context":       # a context is a place, not a value
        return self

    def __deepcopy__(self, memo: dict) -> "Context":
        return self

    def tensor(self, data: object, dtype: object = None) -> Tensor:
        """A Tensor holding a copy of ``data`` (see :func:`jitnn.tensor`)."""
        return Tensor._from_host(self, data, dtype)

    @property
    def stats(self) -> Stats:
        """A snapshot of the counters since creation or :meth:`reset_stats`."""
        return self.launcher.stats

    def reset_stats(self) -> None:
        self.launcher.reset_stats()

    def single_op_graph(self, key: tuple, make):
        """``make()`` (validate an op call, infer its shapes) once per key."""
        try:
            found = self._signatures.get(key)
        except TypeError:                   # an unhashable option (a list): no cache
            return make()
        if found is None:
            found = make()
            with self._lock:
                self._signatures[key] = found
                if len(self._signatures) > self.SINGLE_OP_GRAPHS:
                    self._signatures.popitem(last=False)
        else:
            try:
                self._signatures.move_to_end(key)
            except KeyError:                # evicted by another thread meanwhile
                pass
        return found

    # --- pending work ------------------------------------------------------------

    def record(self, value: Value) -> None:
        """A new pending value: run it now (eager, plain) or keep it for the next
        flush, flushing early when the pending work passes its bound (a
        compute's own values are neither: it flushes them at once)."""
        if self.symbolic:
            return
        if self.policy != "blocked":
            self.flush_values([value])
            return
        if getattr(self.computing, "active", False):
            # A compute's own op on this thread: it is flushed as soon as the
            # graph is dispatched, so it is not pending work for anyone else
            # (another thread's flush would split the compute's plan) and does
            # not count towards the bound (an auto-flush in the middle of the
            # dispatch would split it too, and make every value it holds kept).
            return
        nbytes = physical_bytes(value)
        with self._lock:
            self._pending.append(weakref.ref(value))
            self._pending_bytes += nbytes
            over = (len(self._pending) > self.max_pending_ops
                    or self._pending_bytes > self.max_pending_bytes)
        if over:
            # The call that recorded one op too many is innocent if running
            # the pending work fails: the values not computed stay pending
            # (off the queue), and their own read runs them again and raises,
            # naming the op that failed.
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
            self.flush_values(values)

    def flush_values(self, values: list[Value], capture=None) -> Plan | None:
        """Plan and run the pending work behind ``values`` (one flush at a time);
        ``capture``: an :class:`jitnn.executor.Capture` to record the run in."""
        with self.flush_lock:
            values = [v for v in values if v._data is None]
            if not values:
                return None
            plan = scheduler.schedule(self, values)
            executor.execute(self, plan, capture)
            self.launcher.count(flushes=1, plans_reused=int(plan.reused))
        if self._pending:
            with self._lock:  # forget what is done
                alive = [(r, r()) for r in self._pending]
                alive = [(r, v) for r, v in alive if v is not None and v._data is None]
                self._pending = [r for r, _ in alive]
                self._pending_bytes = sum(physical_bytes(v) for _, v in alive)
        return plan

    # --- graphs ------------------------------------------------------------------

    def dispatch(self, graph, inputs: Mapping[str, object]) -> dict[str, Tensor]:
        """Queue ``graph`` on ``inputs`` ({name: Tensor or array}); returns
        ``{name: Tensor}`` at once, pending. Inputs are validated now: an unknown
        or missing name, or a wrong shape or dtype, raises a TypeError naming it."""
        return _graph_method(graph, "_dispatch", "dispatch")(self, inputs)

    def compute(self, graph, inputs: Mapping[str, object],
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
        _graph_method(graph, "_dispatch", "compute")
        replay.check_outputs(graph.outputs, outputs, graph._output_dtypes)
        replay.compute(self, graph, inputs, outputs)
        return dict(outputs)

    # --- readback ----------------------------------------------------------------

    def read_all(self, tensors: Sequence[Tensor],
                 out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        """Read several tensors at once, returning standard-layout arrays in order.

        Every readback starts before any is waited on; the conversions run
        concurrently on the context's threads (each gets its share of them).
        ``out``, if given, has one entry per tensor: an array to fill, or None.
        """
        return readback.read_all(self, tensors, out)

    async def read_async(self, tensor: Tensor, out: np.ndarray | None = None) -> np.ndarray:
        """Await one readback on the context's readback threads."""
        return await readback.read_async(self, tensor, out)


def _graph_method(graph: object, name: str, op: str):
    """``graph``'s method ``name``, or a TypeError when it is not a jitnn Graph
    (checked by what it does: jitnn.graph sits above this module)."""
    method = getattr(graph, name, None)
    if method is None or not hasattr(graph, "outputs"):
        raise JitnnTypeError(f"{op}: expected a jitnn Graph, got {type(graph).__name__}")
    return method


defaults.set_factory(Context)
default_context = defaults.default_context


def read_all(tensors: Iterable[Tensor],
             out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
    """Read several tensors in parallel (see :meth:`Context.read_all`)."""
    tensors = list(tensors)
    ctx: Any = tensors[0]._ctx if tensors else default_context()
    return ctx.read_all(tensors, out)
