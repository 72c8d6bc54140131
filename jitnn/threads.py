"""How many threads a context uses by default, and what a forked child may run.

The default follows what the process was given, not what the machine has:

1. ``OMP_NUM_THREADS`` when it is a positive integer (the first of a nested
   list such as ``"4,2"``): Ray sets it for each task and actor to its CPUs,
   Dask's nanny to 1 in each worker process, and a user who pins a process's
   OpenMP threads expects jitnn to follow;
2. else the CPUs this process may run on (``os.sched_getaffinity``:
   ``taskset``, cgroups' cpusets, a scheduler's pinning), which can be fewer
   than ``os.cpu_count()``;
3. never more than numba's thread pool (``NUMBA_NUM_THREADS``, by default the
   affinity when numba was imported): ``numba.set_num_threads`` cannot go
   beyond it.

:func:`default_threads` returns the count with the reason, which
``Context.num_threads_source`` keeps and ``jitnn info`` prints.

**fork.** numba's ``omp`` threading layer on GNU OpenMP (libgomp, jitnn's
first choice on Linux) cannot start threads in a process forked after the
parent ran a parallel region: numba then kills the child (SIGTERM, "fork()
called from a process already using GNU OpenMP, this is unsafe"). A child
forked from such a process runs every jitnn kernel on one thread instead
(jitnn's kernels enter no OpenMP region on one thread; see
``kernels/_config.py``), with one :class:`RuntimeWarning` that says why. The
``workqueue`` and ``tbb`` layers, and Intel's OpenMP, start their threads
again in the child; nothing changes there. Processes started with
``"spawn"`` or ``"forkserver"`` (multiprocessing, Dask's workers, Ray) are
fresh and run in parallel. The readback threads of every context are
dropped in a forked child too (their threads do not exist there) and start
again at the next parallel readback.
"""

from __future__ import annotations

import os
import warnings
from typing import NamedTuple

import numba
from numba.core import config as numba_config

from .kernels import _config


class ThreadDefault(NamedTuple):
    """A default thread count and where it came from (``jitnn info`` shows it)."""
    count: int
    source: str


#: True in a process forked (at any depth) from one that had loaded numba's
#: threading layer on GNU OpenMP: its kernels then run on one thread
FORKED_FROM_GNU_OPENMP = False

_warned = False


def _openmp_threads() -> tuple[int | None, str | None]:
    """``OMP_NUM_THREADS`` as a count, or None; and the variable's text (None if unset)."""
    text = os.environ.get("OMP_NUM_THREADS")
    if text is None:
        return None, None
    first = text.split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first), text
    return None, text


def affinity_cpus() -> int:
    """How many CPUs this process may run on (``os.sched_getaffinity``, else
    ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):        # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_threads() -> ThreadDefault:
    """The thread count of a context made without ``num_threads``, and why
    (see the module docstring for the order)."""
    if FORKED_FROM_GNU_OPENMP:
        return ThreadDefault(1, "1: this process was forked from one that had run GNU "
                                "OpenMP threads, which cannot start again in a forked child")
    pool = numba_config.NUMBA_NUM_THREADS
    omp, omp_text = _openmp_threads()
    if omp is not None:
        count, source = omp, f"OMP_NUM_THREADS={omp_text}"
    else:
        count = affinity_cpus()
        source = f"the CPU affinity: {count} of {os.cpu_count()} CPUs"
        if omp_text is not None:
            source += f" (OMP_NUM_THREADS={omp_text!r} ignored: not a positive integer)"
    if count > pool:
        source += f", capped at numba's pool of {pool}: " + (
            "NUMBA_NUM_THREADS" if "NUMBA_NUM_THREADS" in os.environ
            else "the CPUs numba could use at its import")
        count = pool
    return ThreadDefault(count, source)


def runnable(wanted: int) -> int:
    """The threads a kernel may really use when ``wanted`` are asked: one in a
    child forked from a GNU OpenMP process (warning once), else ``wanted``."""
    if FORKED_FROM_GNU_OPENMP and wanted > 1:
        _warn_forked()
        return 1
    return wanted


def _warn_forked() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "jitnn: this process was forked from one that had run parallel kernels on GNU "
            "OpenMP, which cannot start threads in a forked child: jitnn runs its kernels "
            "on 1 thread here. Start worker processes with the 'spawn' or 'forkserver' "
            "method (multiprocessing.get_context('spawn')) to run them in parallel.",
            RuntimeWarning, stacklevel=4)


def _uses_gnu_openmp() -> bool:
    """Whether numba's loaded threading layer is OpenMP from GNU's libgomp
    (not fork-safe); False while no layer is loaded."""
    from numba.np.ufunc import parallel
    if not parallel._is_initialized:
        return False
    try:
        if numba.threading_layer() != "omp":
            return False
        from numba.np.ufunc import omppool
    except (ValueError, ImportError):
        return False
    return getattr(omppool, "openmp_vendor", "") == "GNU"


def _after_fork_in_child() -> None:
    global FORKED_FROM_GNU_OPENMP, _warned
    if not FORKED_FROM_GNU_OPENMP and _uses_gnu_openmp():
        FORKED_FROM_GNU_OPENMP = True
        _warned = False
        # the layer is known: a context made here must not run the probe
        # kernel that finds it (a parallel region, which would kill this child)
        if _config._layer is None:
            _config._layer = "omp"


if hasattr(os, "register_at_fork"):          # (no fork on Windows)
    os.register_at_fork(after_in_child=_after_fork_in_child)
