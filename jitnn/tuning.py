"""Choosing a convolution's algorithm by measuring it on this host, once.

Which algorithm runs a convolution fastest (the direct kernel or Winograd
F(4x4, 3x3)) depends on the CPU: the formula in
``jitnn.kernels.conv2d.conv2d_algorithm`` has thresholds measured on one
machine each. Where a conv shape has more than one candidate
(``jitnn.kernels.conv2d.plan.conv2d_candidates``), the first run of that
shape times each candidate a few times on the real buffers (alternated
rounds, tens of milliseconds per shape), takes the fastest median and keeps
the decision:

* in memory, for the process, and
* in ``tuning.json`` beside the compiled kernels (the kernel cache's
  directory for this CPU and numba: ``jitnn.kernels._config.CACHE_DIR``),
  so later processes start with it. A read-only cache keeps new decisions in
  memory only; a damaged file is ignored, with one warning, and replaced at
  the next decision.

Decisions are keyed by the target CPU, block, thread count, dtype and the
conv's shape and options (:func:`conv2d_key`). A candidate within
:data:`MARGIN` of the formula's choice does not overturn it (timings on a
shared host move by a few per cent), and a faster one overturns it only when
a second set of rounds, judged alone, agrees (another process's burst can
make one set lie; the decision records the medians over both sets). When
a candidate's runs spread widely (its median over :data:`NOISE` times its
fastest: other processes were busy on the cores) the formula stands for this
process and nothing is saved; nothing is measured at all while the load
average says other work shares the cores (:func:`host_busy`).
``JITNN_TUNE=0`` turns measuring off (the formula decides; decisions already
in the file are not used either).
``jitnn.explain`` shows for each conv whether its algorithm was measured and
the timings, ``jitnn info`` the file. A scouted run (kernels skipped, see
``jitnn.compile_pool.scout``) runs each candidate once, so that both are
compiled ahead (the formula's with the run's kernels, the other after them:
``compile_pool.optional``), and decides nothing; a candidate the formula
would not run is timed only once its kernels are compiled (:func:`choose`).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from . import compile_pool, threads
from .kernels import _config

#: the environment variable that turns measuring off ("0")
ENV = "JITNN_TUNE"
#: the file's name in the kernel cache directory
FILE_NAME = "tuning.json"
#: the file's layout; a file of another one is ignored (and replaced)
FORMAT = 1
#: time measured per shape, after one untimed run of each candidate: rounds
#: of every candidate go on until they took this long (at least MIN_ROUNDS,
#: at most MAX_ROUNDS)
BUDGET_S = 0.03
MIN_ROUNDS = 3
MAX_ROUNDS = 9
#: the formula's choice stands unless another candidate's median is this
#: much faster (a shared host's timings move by a few per cent)
MARGIN = 0.03
#: a candidate whose median run took this many times its fastest says the
#: host was busy (other processes on the cores): then the formula stands, for
#: this process only (a later one measures again)
NOISE = 1.3
#: a 1-minute load average above this many runnable threads per usable core
#: says other processes share the cores: nothing is measured then (a run on
#: a 2-core host at load 9 timed Winograd 3x slower than the direct kernel
#: on a shape where it is 2x faster, and the decision was kept)
BUSY_LOAD_PER_CORE = 1.5
#: decisions kept in memory and in the file (the oldest go first)
MAX_DECISIONS = 4096

#: ``clock(candidate, run) -> seconds``: time one ``run()`` of a candidate
#: (tests pass one that decides which candidate wins)
Clock = Callable[[str, Callable[[], None]], float]


def _thread_clock(candidate: str, run: Callable[[], None]) -> float:
    """The calling thread's CPU seconds in ``run()``: on a quiet host its
    wall time (the caller does its share of every kernel), and on a busy one
    not inflated by the slices other processes take (wall times of a 2.6 ms
    kernel on 1 thread read 2.5-16 ms with 10 processes on 2 cores)."""
    started = time.thread_time()
    run()
    return time.thread_time() - started


def host_busy() -> bool:
    """Whether other work shares the cores (the load average: see
    :data:`BUSY_LOAD_PER_CORE`); False where the system has none."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return False
    return load > BUSY_LOAD_PER_CORE * threads.affinity_cpus()


def enabled() -> bool:
    """Whether measuring is on (``JITNN_TUNE`` is not ``0``)."""
    return os.environ.get(ENV, "1").strip() != "0"


def conv2d_key(block: int, threads: int, dtype: str, n: int, c: int, h: int, w: int, o: int,
               kernel: tuple, strides: tuple, dilations: tuple, padding: tuple,
               groups: int, cpu: str | None = None) -> str:
    """A conv decision's key: the CPU numba compiles for, the block, the
    threads, the dtype and the convolution (input ``n x c x h x w``, ``o``
    outputs, kernel, strides, dilations, padding, groups)."""
    def pair(values) -> str:
        return "x".join(str(int(v)) for v in values)
    return (f"{cpu or _config.TARGET_CPU} cb{block} t{threads} {dtype} conv2d "
            f"{n}x{c}x{h}x{w} o{o} k{pair(kernel)} s{pair(strides)} d{pair(dilations)} "
            f"p{pair(padding)} g{groups}")


@dataclass(frozen=True)
class Decision:
    """What was measured for one key: the candidate chosen, each candidate's
    median seconds, and what the formula would have chosen."""

    choice: str
    seconds: Mapping[str, float]
    formula: str
    cpu: str
    #: False: the timings spread too widely to trust (see NOISE); the
    #: formula's choice stands and the decision is not saved
    settled: bool = True

    def describe(self) -> str:
        """``direct 0.612 ms, winograd 0.421 ms``."""
        return ", ".join(f"{name} {1e3 * s:.3f} ms" for name, s in self.seconds.items())

    def as_json(self) -> dict:
        return {"choice": self.choice, "formula": self.formula, "cpu": self.cpu,
                "ms": {name: round(1e3 * s, 4) for name, s in self.seconds.items()}}

    @classmethod
    def from_json(cls, entry: dict) -> "Decision":
        seconds = {str(name): float(ms) / 1e3 for name, ms in entry["ms"].items()}
        choice, formula = str(entry["choice"]), str(entry["formula"])
        if choice not in seconds or not seconds:
            raise ValueError(f"choice {choice!r} was not measured")
        return cls(choice, seconds, formula, str(entry["cpu"]))


class Tuner:
    """Decisions of one file (or of memory only: ``path=None``), measured
    with ``clock``. Safe to use from several threads."""

    def __init__(self, path: Path | str | None, writable: bool = True,
                 clock: Clock | None = None, busy: Callable[[], bool] | None = None):
        self.path = None if path is None else Path(path)
        self.writable = writable and self.path is not None
        self.clock: Clock = clock or _thread_clock
        #: ``busy() -> bool``: measure nothing now (:func:`host_busy`)
        self.busy: Callable[[], bool] = busy or host_busy
        self._decisions: dict[str, Decision] | None = None     # loaded at first use
        self._lock = threading.Lock()
        self._warned = False
        #: seconds this process spent measuring (first runs of the shapes)
        self.measuring_s = 0.0

    # --- the file -------------------------------------------------------------------

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def _read(self) -> dict[str, Decision]:
        """The file's decisions; {} when it is missing, damaged (one warning)
        or of another format."""
        if self.path is None:
            return {}
        try:
            text = self.path.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return {}                      # nothing measured yet (written at the first)
        except OSError as error:
            self._warn(f"jitnn: cannot read the tuning file {self.path} ({error}); "
                       "convolutions are measured again")
            return {}
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not format {FORMAT}")
            return {str(key): Decision.from_json(entry)
                    for key, entry in data["decisions"].items()}
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            self._warn(f"jitnn: ignoring the damaged tuning file {self.path} ({error}); "
                       "convolutions are measured again and the file rewritten")
            return {}

    def _loaded(self) -> dict[str, Decision]:
        if self._decisions is None:
            self._decisions = self._read()
        return self._decisions

    def _save(self) -> None:
        """Write the decisions, merged with what other processes wrote since
        (a whole new file, renamed over the old: a reader never sees half)."""
        if not self.writable:
            return
        merged = {**self._read(), **{key: d for key, d in self._decisions.items()
                                     if d.settled}}
        items = list(merged.items())[-MAX_DECISIONS:]
        data = {"format": FORMAT, "decisions": {key: d.as_json() for key, d in items}}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(temporary, self.path)
        except OSError as error:
            self.writable = False          # read-only: decisions stay in memory
            self._warn(f"jitnn: cannot write the tuning file {self.path} ({error}); "
                       "this process keeps its decisions in memory")
            try:
                temporary.unlink()
            except OSError:
                pass

    # --- decisions ------------------------------------------------------------------

    def lookup(self, key: str) -> Decision | None:
        """The decision for ``key``, if one was measured (here or in the file)."""
        with self._lock:
            return self._loaded().get(key)

    def measure(self, key: str, candidates: Mapping[str, Callable[[], None]],
                formula: str) -> Decision:
        """Run each candidate once untimed (compiles, first touches), then
        in alternated rounds within :data:`BUDGET_S`; decide, keep and save."""
        started = time.perf_counter()
        for run in candidates.values():
            run()
        times: dict[str, list[float]] = {name: [] for name in candidates}
        choice = formula
        for attempt in range(2):
            seconds = self._rounds(candidates, times)      # this set's medians
            fastest = min(seconds, key=seconds.get)
            if formula in seconds and seconds[formula] <= (1 + MARGIN) * seconds[fastest]:
                choice = formula
                break
            # overturning the formula takes a second set of rounds that agrees
            # (another process's burst can make one set lie)
            if attempt and fastest != choice:
                choice = formula
                break
            choice = fastest
        seconds = {name: statistics.median(values) for name, values in times.items()}
        spread = max(statistics.median(values) / max(min(values), 1e-12)
                     for values in times.values())
        settled = spread <= NOISE
        decision = Decision(choice if settled else formula, seconds, formula,
                            _config.TARGET_CPU, settled)
        with self._lock:
            decisions = self._loaded()
            decisions.pop(key, None)
            decisions[key] = decision
            while len(decisions) > MAX_DECISIONS:
                del decisions[next(iter(decisions))]
            if settled:
                self._save()
            self.measuring_s += time.perf_counter() - started
        return decision

    def _rounds(self, candidates: Mapping[str, Callable[[], None]],
                times: dict[str, list[float]]) -> dict[str, float]:
        """One set of alternated rounds, added to ``times``; its medians."""
        spent, rounds = 0.0, 0
        start = {name: len(values) for name, values in times.items()}
        while rounds < MIN_ROUNDS or (rounds < MAX_ROUNDS and spent < BUDGET_S):
            for name, run in candidates.items():
                times[name].append(self.clock(name, run))
                spent += times[name][-1]
            rounds += 1
        return {name: statistics.median(values[start[name]:])
                for name, values in times.items()}

    def summary(self) -> tuple[int, dict[str, int]]:
        """``(decisions, {cpu: decisions})`` of this tuner (the file's and this
        process's)."""
        with self._lock:
            decisions = list(self._loaded().values())
        cpus: dict[str, int] = {}
        for d in decisions:
            cpus[d.cpu] = cpus.get(d.cpu, 0) + 1
        return len(decisions), cpus


_tuner: Tuner | None = None
_tuner_lock = threading.Lock()


def tuner() -> Tuner:
    """The process's tuner: the kernel cache's ``tuning.json`` (memory only
    without a cache directory)."""
    global _tuner
    with _tuner_lock:
        if _tuner is None:
            directory = _config.CACHE_DIR
            _tuner = Tuner(None if directory is None else directory / FILE_NAME,
                           writable=_config.CACHE_WRITABLE)
        return _tuner


def use(new: Tuner | None) -> Tuner | None:
    """Make ``new`` the process's tuner (None: the default again, made at the
    next use); returns the previous one. For tests and benchmarks."""
    global _tuner
    with _tuner_lock:
        previous, _tuner = _tuner, new
        return previous


def decided(key: str) -> Decision | None:
    """The decision for ``key`` when measuring is on, else None."""
    return tuner().lookup(key) if enabled() else None


def choose(key: str, candidates: Callable[[], Mapping[str, Callable[[], None]]],
           formula: str) -> Decision | None:
    """The decision for ``key``: the one made before, or measured now over
    ``candidates()`` (name -> a run on the real buffers; made only when
    measuring). None (the formula decides) when measuring is off; in a
    scouted run, which runs each candidate once instead, so that all get
    compiled ahead; and while a candidate other than the formula's has no
    compiled code, in this process or in the kernel cache: compiling it here
    would add seconds to this run for a kernel it may not use (a compile
    ahead, ``jitnn warmup`` or another conv that runs it puts it there, and
    a later run measures)."""
    if not enabled():
        return None
    if compile_pool.scouting():
        # the others' kernels are optional: this run keeps the formula's
        # until they are compiled (a cold run does not wait for them)
        for name, run in candidates().items():
            with compile_pool.optional(name != formula):
                run()
        return None
    found = tuner().lookup(key)
    if found is not None:
        return found
    if tuner().busy():
        return None              # the formula, for now: a later run on a quiet host measures
    runs = candidates()
    if len(runs) < 2 or any(compile_pool.scout(run) for name, run in runs.items()
                            if name != formula):
        return None
    return tuner().measure(key, runs, formula)


def status() -> str:
    """``jitnn info``'s line: where the decisions are kept, how many, for
    which CPUs, or that measuring is off."""
    if not enabled():
        return f"off ({ENV}=0): convolutions' algorithms come from the formulas"
    current = tuner()
    count, cpus = current.summary()
    where = "in memory only (no kernel cache directory)" if current.path is None else \
        str(current.path) + ("" if current.writable else
                             " (read-only: new decisions are kept in memory)")
    per_cpu = ", ".join(f"{n} for {cpu}" for cpu, n in sorted(cpus.items()))
    return (f"{where}: {count} conv algorithm decision(s) measured on this host"
            + (f" ({per_cpu})" if per_cpu else "") + f"; {ENV}=0 turns measuring off")
