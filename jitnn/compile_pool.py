"""Compiling kernels ahead of their first use, in worker processes.

numba compiles a kernel at its first call, one at a time per process, and
holds the GIL while it does: a cold start used one core of two. Here a
workload's kernels are found before they run and compiled by worker
processes, which save them into the shared kernel cache
(``jitnn.kernels._config``); the process that runs the workload then loads
them (a few milliseconds each).

* :func:`scout` runs a callable with jitnn's kernels intercepted: a call of a
  kernel that has no code yet is recorded (what another process needs to
  make the same specialization: its recipe and argument types,
  ``jitnn.kernels._linking``) and skipped, its output left as it was. A
  kernel whose Python returns a value (a table the caller reads) compiles
  and runs as usual. What a scouted run computes is garbage, so it runs on
  contexts and tensors that are thrown away (``jitnn.warmup``'s own, or a
  forked child's).
* :class:`CompilePool` holds worker processes that compile
  :class:`Request` s; :func:`compile_ahead` runs a batch on it and shows a
  progress bar (:class:`Progress`) when compiling takes more than a second.
* :func:`fork_scout`: at a plan's first run in a cold process, a forked
  child scouts the plan's steps while the parent runs them; the pool
  compiles what the child found, last steps first, while the parent
  compiles from the first (jitnn/executor.py); the conv tuner's candidates
  that the formula would not run come after all that (:func:`optional`).

Environment: ``JITNN_COMPILE_WORKERS`` is the number of worker processes
(default: one per core, less the process's own when it compiles too; ``0``
turns ahead-of-time compiling off).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dis
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
from typing import Callable, Iterable, NamedTuple, TextIO

import numba.core.event as numba_event
import numpy as np
from numba.core import dispatcher as _numba_dispatcher
from numba.core import errors as _numba_errors
from numba.core import types as _numba_types

from . import threads
from .kernels import _config, _linking


class Request(NamedTuple):
    """One specialization to compile: the kernel's recipe
    (``_linking.kernel_recipe``), its argument types, and for each argument
    its literal type where it has one (numba asks for literals when the
    kernel calls ``literally`` on it), with a readable name."""

    recipe: tuple
    argtypes: tuple
    literals: tuple
    name: str
    #: only a run of a candidate the run may not keep needs it (the conv
    #: tuner's candidate that the formula would not run, :func:`optional`):
    #: compiled after every needed one
    optional: bool = False


# --- the scout -----------------------------------------------------------------------

_returns_value: dict = {}


def returns_value(function) -> bool:
    """Whether ``function``'s code returns anything but None (its callers may
    read the result): a ``return`` of something other than the constant
    None. (Cached per function.)"""
    found = _returns_value.get(function)
    if found is None:
        found, previous = False, None
        for instruction in dis.get_instructions(function):
            name = instruction.opname
            if name == "RETURN_CONST" and instruction.argval is not None or (
                    name == "RETURN_VALUE" and not (
                        previous is not None and previous.opname == "LOAD_CONST"
                        and previous.argval is None)):
                found = True
                break
            previous = instruction
        _returns_value[function] = found
    return found


def _literal(value):
    try:
        return _numba_types.literal(value) if isinstance(value, (bool, int)) else None
    except Exception:          # numba has no literal type for it
        return None


class _Scout:
    """What a scouted run records (see :func:`scout`)."""

    def __init__(self):
        self.requests: dict[tuple, Request] = {}
        #: depth of :func:`optional` blocks: what they find is optional
        self.optional = 0

    def intercept(self, kernel, args) -> tuple[bool, Callable | None]:
        """``(handled, what to call instead)`` for a call of ``kernel`` with
        ``args`` that has no compiled code in this process (numba calls what
        ``_compile_for_args`` returns with the arguments)."""
        recipe = _linking.kernel_recipe(kernel)
        if recipe is None:
            return False, None
        function = kernel.py_func
        argtypes = tuple(kernel.typeof_pyval(a) for a in args)
        if returns_value(function):
            return False, None          # its caller reads the value: compile and run it
        if argtypes in kernel.overloads or _is_cached(kernel, argtypes):
            return True, _skip
        key = (recipe, argtypes)
        found = self.requests.get(key)
        if found is None:
            self.requests[key] = Request(recipe, argtypes, tuple(_literal(a) for a in args),
                                         function.__qualname__, self.optional > 0)
        elif found.optional and not self.optional:
            # needed after all: it goes where the run first needs it
            del self.requests[key]
            self.requests[key] = found._replace(optional=False)
        return True, _skip


def scouting() -> bool:
    """Whether this thread is in a scouted run (:func:`scout`): its kernels'
    outputs are garbage, so nothing it measures means anything."""
    return getattr(_scouts, "active", None) is not None


@contextlib.contextmanager
def optional(really: bool = True):
    """In a scouted run, the kernels first found inside this block are
    optional (``really``): a run of a candidate the caller may drop (the conv
    tuner runs each candidate once when scouted, and a cold run keeps the
    formula's until the others are compiled). Pools compile them after every
    needed one. Outside a scouted run it does nothing."""
    state = getattr(_scouts, "active", None)
    if state is None or not really:
        yield
        return
    state.optional += 1
    try:
        yield
    finally:
        state.optional -= 1


def ahead_order(requests: list[Request]) -> list[Request]:
    """What a pool compiles ahead while a plan's first run compiles from its
    first step: the needed kernels last found first (the run reaches them
    last), then the optional ones (:func:`optional`) in the order found."""
    return ([r for r in reversed(requests) if not r.optional]
            + [r for r in requests if r.optional])


def _skip(*args, **kws) -> None:
    """What a skipped kernel call runs instead."""


def _is_cached(kernel, argtypes) -> bool:
    """Whether the disk cache holds ``kernel`` for ``argtypes`` (its index
    names it; nothing is loaded)."""
    cache = getattr(kernel, "_cache", None)
    holds = getattr(cache, "holds", None)
    return bool(holds and holds(argtypes, kernel.targetctx))


_scouts = threading.local()
_original_compile_for_args = _numba_dispatcher.Dispatcher._compile_for_args
_patch_lock = threading.Lock()
_patched = 0


#: the pool whose workers compile this process's kernels ahead (a plan's
#: first run, :func:`compile_plan_ahead`), or None
_ahead: "CompilePool | None" = None


def _scouting_compile_for_args(self, *args, **kws):
    """numba's ``Dispatcher._compile_for_args``, for jitnn's kernels first
    through the scout of this thread (:func:`scout`) or the pool's claims
    (:func:`_claim`). (numba calls it again with literal types in place of
    values when a kernel asks for literals: those calls go straight on.)"""
    scout_state = getattr(_scouts, "active", None)
    if not kws and self in _linking.KERNELS and not any(
            isinstance(a, _numba_types.Type) for a in args):
        if scout_state is not None:
            handled, result = scout_state.intercept(self, args)
            if handled:
                return result
        elif _ahead is not None:
            _claim(self, args)
    return _original_compile_for_args(self, *args, **kws)


def _claim(kernel, args) -> None:
    """Before this process compiles ``kernel`` for ``args``: if a worker of
    :data:`_ahead` is compiling it, wait for it (the compile then loads it
    from the cache); if one is about to, take it back."""
    recipe = _linking.kernel_recipe(kernel)
    ahead = _ahead
    if recipe is None or ahead is None:
        return
    key = (recipe, tuple(kernel.typeof_pyval(a) for a in args))
    running = ahead.claim(key)
    if running is not None:
        with contextlib.suppress(Exception):
            running.result(timeout=300)


@contextlib.contextmanager
def _intercepting(state: _Scout):
    """numba's ``Dispatcher._compile_for_args`` (what a call without
    compiled code runs) routed through ``state`` for this thread."""
    global _patched
    with _patch_lock:
        if _patched == 0:
            _numba_dispatcher.Dispatcher._compile_for_args = _scouting_compile_for_args
        _patched += 1
    previous = getattr(_scouts, "active", None)
    _scouts.active = state
    try:
        yield state
    finally:
        _scouts.active = previous
        with _patch_lock:
            _patched -= 1
            if _patched == 0:
                _numba_dispatcher.Dispatcher._compile_for_args = _original_compile_for_args


def scout(run: Callable[[], object]) -> list[Request]:
    """The kernel specializations ``run()`` would compile, in the order it
    first calls them, from a run that skips them (see the module
    docstring). An exception in ``run`` ends the scouting: what it found
    until then is returned."""
    state = _Scout()
    with _intercepting(state), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            run()
        except Exception:            # garbage in, anything out: keep what was found
            if os.environ.get("JITNN_POOL_LOG"):
                import traceback
                traceback.print_exc()
    return list(state.requests.values())


# --- the worker processes ------------------------------------------------------------

def _compile_request(request: Request) -> tuple[str, float, str | None]:
    """In a worker: compile ``request`` into the disk cache (or find it
    there). Returns its name, the CPU seconds spent and an error or None."""
    started = time.process_time()
    try:
        kernel = _linking.find_kernel(request.recipe)
        argtypes = tuple(request.argtypes)
        try:
            kernel.compile(argtypes)
        except _numba_errors.ForceLiteralArg as wanted:
            literal = [request.literals[i] if i in wanted.requested_args else a
                       for i, a in enumerate(argtypes)]
            if any(literal[i] is None for i in wanted.requested_args):
                raise
            kernel.compile(tuple(literal))
    except Exception as error:
        return request.name, time.process_time() - started, f"{type(error).__name__}: {error}"
    return request.name, time.process_time() - started, None


def worker_main() -> None:
    """A worker process (``python -c "...worker_main()" CACHE_DIR``):
    pickled :class:`Request` s on stdin, pickled results on stdout, until
    stdin closes. It refuses to work on another kernel cache than its
    parent's (what it compiled would never be found)."""
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr                # nothing else may write to the results
    requests = sys.stdin.buffer
    same_cache = str(_config.CACHE_DIR) == sys.argv[1]
    while True:
        try:
            request = pickle.load(requests)
        except (EOFError, OSError):
            return                         # the parent is done, or gone
        if same_cache:
            result = _compile_request(request)
        else:
            result = (request.name, 0.0, "the worker's kernel cache is not its parent's")
        try:
            pickle.dump(result, results)
            results.flush()
        except OSError:
            return


def default_workers(compiling_too: bool = False) -> int:
    """Worker processes for ahead-of-time compiles: ``JITNN_COMPILE_WORKERS``,
    else one per core (less one when this process compiles at the same
    time); 0 when there is no writable kernel cache to share."""
    if _config.CACHE_DIR is None or not _config.CACHE_WRITABLE:
        return 0
    configured = os.environ.get("JITNN_COMPILE_WORKERS", "").strip()
    if configured:
        try:
            return max(0, int(configured))
        except ValueError:
            return 0
    cores = threads.affinity_cpus()
    return max(0, cores - 1) if compiling_too else cores


#: a worker process with nothing to compile for this long exits
IDLE_SECONDS = 60.0


class CompilePool:
    """Worker processes that compile :class:`Request` s into the kernel
    cache, first come first served: each started at its first request and
    kept for this process's life, a thread of this process feeding it.
    A worker idle for :data:`IDLE_SECONDS` exits (a later request starts
    another). (Plain subprocesses, not multiprocessing's: its spawned
    children import the main script again, and would run the caller's
    program.)"""

    def __init__(self, workers: int):
        self.workers = workers
        self._queue: list = []
        #: the requests a worker is compiling now, by (recipe, argument types)
        self._running: dict[tuple, concurrent.futures.Future] = {}
        #: what the workers did: CPU seconds of their compiles, requests done
        self.cpu_seconds = 0.0
        self.compiled = 0
        self._ready = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._processes: list = []
        self._closed = False

    def submit(self, request: Request) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._ready:
            self._queue.append((request, future))
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._feed, name="jitnn-compile-worker",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
            self._ready.notify()
        return future

    def _feed(self) -> None:
        """One worker process: start it, then hand it requests one at a time."""
        environment = dict(os.environ, JITNN_COMPILE_WORKERS="0", JITNN_PROGRESS="0")
        # this process's jitnn first on the worker's path (not a directory
        # of the same name in the working directory, which ``-m`` would find)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        start = (f"import sys; sys.path.insert(0, {root!r}); "
                 "from jitnn.compile_pool import worker_main; worker_main()")
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", start, str(_config.CACHE_DIR)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environment)
        except OSError as error:
            self._fail_all(f"cannot start a compile worker: {error}")
            return
        self._processes.append(process)
        while True:
            with self._ready:
                idle_until = time.monotonic() + IDLE_SECONDS
                while not self._queue and not self._closed and time.monotonic() < idle_until:
                    self._ready.wait(timeout=max(0.0, idle_until - time.monotonic()))
                if self._closed or not self._queue:
                    # closed, or idle for long: the worker goes (a later
                    # request starts another)
                    self._threads.remove(threading.current_thread())
                    break
                request, future = self._queue.pop(0)
                key = (request.recipe, request.argtypes)
                if not future.set_running_or_notify_cancel():
                    continue
                self._running[key] = future
            try:
                pickle.dump(request, process.stdin)
                process.stdin.flush()
                result = pickle.load(process.stdout)
            except Exception as error:         # the worker died
                result = (request.name, 0.0, f"the compile worker stopped ({error})")
            with self._ready:
                self._running.pop(key, None)
                self.cpu_seconds += result[1]
                self.compiled += result[2] is None
            future.set_result(result)
            if result[2] and "stopped" in result[2]:
                # a worker that died (a crash in a compile) is not replaced:
                # what is queued fails, and compiles where it is needed
                with self._ready:
                    self._threads.remove(threading.current_thread())
                self._fail_all(result[2])
                break
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            process.stdin.close()                # the worker reads the end and exits
            process.wait(timeout=10)
        with self._ready:
            self._processes.remove(process)

    def _fail_all(self, message: str) -> None:
        with self._ready:
            pending, self._queue = self._queue, []
        for request, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_result((request.name, 0.0, message))

    def claim(self, key: tuple) -> concurrent.futures.Future | None:
        """This process is about to compile ``key`` (``(recipe, argument
        types)``): a queued request for it is dropped (returns None: compile
        it here); one a worker is compiling returns its future (wait for it,
        then load it from the cache)."""
        with self._ready:
            running = self._running.get(key)
            if running is not None:
                return running
            for index, (request, future) in enumerate(self._queue):
                if (request.recipe, request.argtypes) == key:
                    del self._queue[index]
                    future.cancel()
                    break
        return None

    def busy(self) -> bool:
        with self._ready:
            return bool(self._queue or self._running)

    def cancel_pending(self) -> None:
        """Drop the requests no worker has taken yet."""
        with self._ready:
            pending, self._queue = self._queue, []
        for _, future in pending:
            future.cancel()

    def shutdown(self) -> None:
        """Stop the workers (one in the middle of a compile is killed: its
        kernel is not saved, and compiles again when it is needed)."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        self.cancel_pending()
        for process in list(self._processes):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                process.stdin.close()
                process.kill()
                process.wait(timeout=5)        # (its CPU time counts as this process's)


_pools: dict[int, CompilePool] = {}
_pools_lock = threading.Lock()


def pool(workers: int) -> CompilePool:
    """This process's pool of ``workers`` worker processes (made once)."""
    with _pools_lock:
        found = _pools.get(workers)
        if found is None:
            found = _pools[workers] = CompilePool(workers)
        return found


@atexit.register
def _shutdown_pools() -> None:
    log = _debug_log()
    for each in list(_pools.values()):
        if log:
            log(f"pool of {each.workers}: {each.compiled} requests, "
                f"{each.cpu_seconds:.1f} CPU s")
        each.shutdown()


# --- progress ------------------------------------------------------------------------

class Progress:
    """A progress bar on ``out`` (stderr) for compiles that take more than
    ``after`` seconds: redrawn in place on a terminal, otherwise one line
    when it appears and one when it ends."""

    def __init__(self, total: int, what: str, out: TextIO | None = None, after: float = 1.0):
        self.total, self.what, self.done = total, what, 0
        self.out = sys.stderr if out is None else out
        self.after = after
        self.started = time.perf_counter()
        self.shown = False
        self.failed: list[str] = []
        self._tty = bool(getattr(self.out, "isatty", lambda: False)())

    def step(self, name: str = "", error: str | None = None) -> None:
        self.done += 1
        if error:
            self.failed.append(f"{name}: {error}")
        self.update(name)

    def update(self, name: str = "") -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed < self.after:
            return
        if self._tty:
            width = 24
            filled = width * self.done // max(1, self.total)
            line = (f"jitnn: {self.what} [{'#' * filled}{'-' * (width - filled)}] "
                    f"{self.done}/{self.total} {elapsed:5.1f} s {name[:32]}")
            print(f"\r{line:<100}", end="", file=self.out, flush=True)
        elif not self.shown:
            print(f"jitnn: {self.what}: {self.total} kernels ...", file=self.out, flush=True)
        self.shown = True

    def finish(self) -> None:
        if not self.shown:
            return
        elapsed = time.perf_counter() - self.started
        end = "\n" if self._tty else ""
        failed = f", {len(self.failed)} failed" if self.failed else ""
        print(f"{end}jitnn: {self.what}: {self.done} kernels in {elapsed:.1f} s{failed} "
              "(cached for later runs)", file=self.out, flush=True)


def compile_ahead(requests: Iterable[Request], workers: int | None = None,
                  what: str = "compiling kernels", out: TextIO | None = None,
                  show_after: float = 1.0) -> list[tuple[str, float, str | None]]:
    """Compile ``requests`` on ``workers`` worker processes (default
    :func:`default_workers`) and wait; returns ``(name, CPU seconds, error)``
    per request. Shows a :class:`Progress` bar when it takes more than
    ``show_after`` seconds. With no workers, nothing is compiled."""
    requests = list(requests)
    workers = default_workers() if workers is None else workers
    if not requests or workers <= 0:
        return []
    executor = pool(workers)
    progress = Progress(len(requests), f"{what} in {workers} processes", out, show_after)
    return wait_all([executor.submit(r) for r in requests], progress)


def wait_all(futures: list[concurrent.futures.Future],
             progress: Progress) -> list[tuple[str, float, str | None]]:
    """The results of the pool's ``futures`` as they come, ``progress``
    stepped for each and redrawn twice a second."""
    results = []
    pending = set(futures)
    try:
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                try:
                    result = future.result()
                except Exception as error:        # cancelled
                    result = ("?", 0.0, f"{type(error).__name__}: {error}")
                results.append(result)
                progress.step(result[0], result[2])
            progress.update()
    finally:
        progress.finish()
    return results


# --- scouting a plan in a forked child -----------------------------------------------

def fork_scout(run: Callable[[], object], submit: Callable[[list[Request]], None],
               timeout: float = 60.0) -> bool:
    """Scout ``run()`` in a forked child while this process goes on, and hand
    what the child found to ``submit`` (from a background thread, in
    :func:`ahead_order`). The child runs no kernel but the value-returning ones:
    every jitnn dispatcher's compiled code is forgotten there (numba's table
    of it), so each call is intercepted; its output goes nowhere. Returns
    False, doing nothing, where ``os.fork`` is missing."""
    if not hasattr(os, "fork"):
        return False
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:                          # the child: never returns
        os.close(read_end)
        status = 0
        try:
            for kernel in list(_linking.KERNELS):
                kernel._clear()           # numba's C table: every call goes to Python
            # the child runs no parallel region (no kernel runs), so it
            # picks the parent's compiles: those of the parent's thread counts
            threads.FORKED_FROM_GNU_OPENMP = False
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)           # the parent's output is the parent's
            os.dup2(devnull, 2)
            state = _Scout()
            with _intercepting(state), warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                try:
                    run()
                except Exception:
                    pass
            payload = pickle.dumps(list(state.requests.values()))
            log = _debug_log()
            if log:
                log(f"scout child: {len(state.requests)} found in "
                    f"{time.process_time():.2f} CPU s")
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)

    def collect() -> None:
        """Read the child's report until it ends or ``timeout`` passes (a
        child stuck on a lock another thread held at the fork is killed)."""
        import select
        chunks, deadline = [], time.monotonic() + timeout
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([pipe], [], [], left)[0]:
                    chunks = []                    # too slow: drop it
                    with contextlib.suppress(OSError):
                        os.kill(pid, 9)
                    break
                chunk = pipe.read(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        if chunks:
            with contextlib.suppress(Exception):
                submit(ahead_order(pickle.loads(b"".join(chunks))))

    threading.Thread(target=collect, name="jitnn-scout", daemon=True).start()
    return True


# --- when a plan runs for the first time ----------------------------------------------

#: the fewest steps of a plan for which a forked child scouts it
MIN_PLAN_STEPS = 3
#: a process that compiled less than this many seconds ago is cold
COLD_SECONDS = 30.0


class _CompileWatch:
    """numba's compile events in this process (a kernel compiled, not loaded
    from the cache): whether the process is cold, and a progress line while
    it compiles for more than a second (a first run's kernels, one after
    another), drawn by a background thread."""

    def __init__(self):
        self.fresh = True              # no plan has run yet
        self.last_end: float | None = None
        self.compiled = 0
        self.active = 0                # threads compiling now
        self.current = ""
        self.busy_since: float | None = None
        self._depth = threading.local()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def on_start(self, name: str) -> None:
        depth = getattr(self._depth, "value", 0)
        self._depth.value = depth + 1
        if depth:
            return                     # a callee of the kernel being compiled
        with self._lock:
            self.active += 1
            self.current = name
            if self.busy_since is None:
                self.busy_since = time.perf_counter()
            if self._thread is None and os.environ.get("JITNN_PROGRESS", "1") != "0":
                self._thread = threading.Thread(target=self._show, name="jitnn-progress",
                                                daemon=True)
                self._thread.start()

    def on_end(self) -> None:
        depth = max(0, getattr(self._depth, "value", 1) - 1)
        self._depth.value = depth
        if depth == 0:
            with self._lock:
                self.active = max(0, self.active - 1)
                self.compiled += 1
                self.last_end = time.perf_counter()

    def cold(self) -> bool:
        return self.fresh or (self.last_end is not None
                              and time.perf_counter() - self.last_end < COLD_SECONDS)

    def _show(self) -> None:
        ticker = None
        while True:
            time.sleep(0.25)
            try:
                ticker = self._tick(ticker)
            except Exception:             # a progress line must never stop anything
                ticker = None

    def _tick(self, ticker: "_Ticker | None") -> "_Ticker | None":
        """One look at the compiles: draw, finish or leave the line."""
        now = time.perf_counter()
        with self._lock:
            streak = self.active > 0 or (
                self.last_end is not None and now - self.last_end < 0.5)
            if not streak:
                if ticker is not None:
                    ticker.finish()
                ticker, self.busy_since = None, None
            elif self.busy_since is not None and now - self.busy_since > 1.0:
                if ticker is None:
                    ticker = _Ticker(self.compiled)
                ticker.show(self.compiled, self.current, now - self.busy_since)
        return ticker


class _Ticker:
    """The progress line of this process's own compiles (no total known),
    on the current ``sys.stderr`` (a test runner swaps it per test; a
    closed one is skipped)."""

    def __init__(self, compiled_before: int):
        self.before = compiled_before
        self.shown = False
        self.count = 0
        self.seconds = 0.0

    @staticmethod
    def _print(text: str, end: str = "\n") -> None:
        with contextlib.suppress(ValueError, OSError):
            print(text, end=end, file=sys.stderr, flush=True)

    @staticmethod
    def _tty() -> bool:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            return sys.stderr.isatty()
        return False

    def show(self, compiled: int, name: str, seconds: float) -> None:
        self.count, self.seconds = compiled - self.before, seconds
        if self._tty():
            line = (f"jitnn: compiling kernels (first use; cached for later runs): "
                    f"{self.count} done, {seconds:5.1f} s {name[:40]}")
            self._print(f"\r{line:<110}", end="")
        elif not self.shown:
            self._print("jitnn: compiling kernels (first use; cached for later runs) ...")
        self.shown = True

    def finish(self) -> None:
        self._print(f"{chr(10) if self._tty() else ''}jitnn: compiled {self.count} kernels in "
                    f"{self.seconds:.1f} s")


_watch = _CompileWatch()


class _CompileListener(numba_event.Listener):
    """numba's ``numba:compile`` events, for :data:`_watch` (and the debug
    log: ``JITNN_POOL_LOG``)."""

    def __init__(self):
        self._started = threading.local()

    def on_start(self, event) -> None:
        name = event.data["dispatcher"].py_func.__qualname__
        _watch.on_start(name)
        stack = getattr(self._started, "stack", None)
        if stack is None:
            stack = self._started.stack = []
        stack.append((name, time.process_time()))

    def on_end(self, event) -> None:
        _watch.on_end()
        name, started = self._started.stack.pop()
        log = _debug_log() if not self._started.stack else None
        if log:
            log(f"compiled here: {name} {time.process_time() - started:.2f} s")


numba_event.register("numba:compile", _CompileListener())


def compile_plan_ahead(steps: int, run: Callable[[], object]) -> bool:
    """At a plan's first run (``run()`` runs its ``steps`` steps): in a cold
    process (one that has not run a plan yet, or compiled a kernel less than
    :data:`COLD_SECONDS` ago), with worker processes to spare and ``steps``
    at least :data:`MIN_PLAN_STEPS`, scout the plan in a forked child and
    have the pool compile what it finds. Returns whether it did."""
    if getattr(_scouts, "active", None) is not None:
        return False                   # a scouted run: its kernels are skipped anyway
    cold = _watch.cold()
    _watch.fresh = False
    if steps < MIN_PLAN_STEPS or not cold:
        return False
    workers = default_workers(compiling_too=True)
    if workers <= 0:
        return False
    executor = pool(workers)
    _claim_for(executor)

    return fork_scout(run, lambda requests: submit_found(executor, requests))


def submit_found(executor: "CompilePool", requests: list[Request]) -> int:
    """Hand what a plan's scout found (in :func:`ahead_order`) to ``executor``;
    returns how many. Only optional ones (a warm process, whose plan has
    every kernel but a tuner candidate's): none, since a worker started for
    them would cost the run its start-up (a warm ResNet-50 run, 2 threads:
    4.5 CPU s instead of 3.5) and be stopped at the run's exit before it
    compiled anything."""
    log = _debug_log()
    if log:
        log(f"scout found {len(requests)}: {[r.name for r in requests]}")
    if all(r.optional for r in requests):
        return 0
    for request in requests:
        future = executor.submit(request)
        if log:
            future.add_done_callback(lambda f: log(f"worker: {f.result()}"))
    return len(requests)


def _debug_log():
    """A function that appends a line to ``$JITNN_POOL_LOG``, or None."""
    path = os.environ.get("JITNN_POOL_LOG")
    if not path:
        return None
    started = _debug_started

    def log(line: str) -> None:
        with open(path, "a") as out:
            out.write(f"{time.perf_counter() - started:7.2f} {os.getpid()} {line}\n")
    return log


_debug_started = time.perf_counter()


def _claim_for(ahead: CompilePool) -> None:
    """Route this process's compiles through :func:`_claim` (numba's
    ``_compile_for_args`` patched for good: it costs a set lookup on calls
    that compile anyway)."""
    global _ahead, _patched
    with _patch_lock:
        if _ahead is None:
            _patched += 1              # never undone: the pool lives as long
            _numba_dispatcher.Dispatcher._compile_for_args = _scouting_compile_for_args
        _ahead = ahead

