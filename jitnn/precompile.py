"""``jitnn.warmup``: compile what a model, the demo or the common networks
need, before they run, in parallel worker processes.

Kernels compile at their first use and are cached on disk
(``jitnn.kernels._config``): the first run of a model pays for its kernels.
``jitnn.warmup(model)`` pays in advance, on every core: each workload runs
once with its kernels skipped (``jitnn.compile_pool.scout``: what it would
compile), and worker processes compile what it found into the cache, with a
progress bar. Later processes load the kernels from the cache. For a
container image or a shared install, run ``jitnn warmup`` at build time.

Workloads: an ONNX model (a path, at batch 1 for symbolic dimensions), or
by default the demo's (``jitnn demo``) and the common networks' (ResNet-50
and MobileNetV2 from ``jitnn.bench.networks``, when their ONNX export is
there or PyTorch can make it), each at the thread counts asked (default:
the default context's, all cores; a count of 1 compiles the serial kernels).
"""

from __future__ import annotations

import dataclasses
import os
import time
import types
from typing import Callable, Iterable, Sequence, TextIO

import numpy as np

from . import compile_pool
from .context import Context, default_context


@dataclasses.dataclass
class WarmupReport:
    """What :func:`warmup` did: the workloads it scouted (and those it
    skipped, with why), the kernel specializations they need that were not
    in the cache, how many of those compiled, what failed, and the seconds
    it took. ``compiled + len(failed) == needed`` unless workers were off."""

    workloads: list[str]
    skipped: list[str]
    needed: int
    compiled: int
    failed: list[str]
    seconds: float
    workers: int

    def __str__(self) -> str:
        text = (f"jitnn warmup: {self.needed} kernels to compile, {self.compiled} compiled "
                f"in {self.seconds:.1f} s ({self.workers} worker processes), for "
                + (", ".join(self.workloads) or "nothing"))
        for line in self.skipped:
            text += f"\n  skipped {line}"
        for line in self.failed:
            text += f"\n  failed {line}"
        return text


def _thread_counts(threads: int | Sequence[int] | None) -> list[int]:
    if threads is None:
        return [default_context().num_threads]
    counts = [threads] if isinstance(threads, int) else list(threads)
    if not counts or any(not isinstance(t, int) or t < 1 for t in counts):
        raise ValueError(f"jitnn.warmup: threads must be a positive int or a list of them, "
                         f"got {threads!r}")
    return list(dict.fromkeys(counts))


def demo_workloads(threads: int, quick: bool = False) -> list[tuple[str, Callable[[], object]]]:
    """The demo's runs (``jitnn demo``: the seed chain and the bottleneck
    block under each policy; ``quick``: its tiny shapes), on ``threads``
    threads."""
    from . import ops as _ops, registry       # (the ops register on import)
    from .bench.workloads import POLICIES, jitnn_forward, parameters, workloads
    jitnn = types.SimpleNamespace(**{op.name: op.function for op in registry.ops()})
    del _ops

    def run(shape, kind, mid, policy):
        x = np.zeros(shape, np.float32)
        ctx = Context(num_threads=threads, policy=policy)
        weights = [(ctx.tensor(w), None if bn is None else [ctx.tensor(v) for v in bn], pad)
                   for w, bn, pad in parameters(kind, shape[1], mid, np)]
        jitnn_forward(jitnn, kind, ctx.tensor(x), weights).numpy(
            out=np.empty(shape, np.float32))

    return [(f"demo {name} {policy} ({threads} threads)",
             lambda shape=shape, kind=kind, mid=mid, policy=policy: run(shape, kind, mid, policy))
            for name, shape, kind, mid in workloads(quick) for policy in POLICIES]


def model_workload(path: str, threads: int) -> tuple[str, Callable[[], object]]:
    """An ONNX model's first run on random inputs (batch 1 for symbolic
    dimensions; zeros for integer inputs: valid indices)."""
    def run():
        from . import onnx as jitnn_onnx
        ctx = Context(num_threads=threads)
        model = jitnn_onnx.prepare(path, ctx)
        rng = np.random.default_rng(0)
        inputs = {name: rng.standard_normal(shape).astype(np.float32)
                  if model.input_dtypes[name] == np.float32
                  else np.zeros(shape, model.input_dtypes[name])
                  for name, shape in model.inputs.items()}
        model.run(inputs)
    return f"{os.path.basename(path)} ({threads} threads)", run


def network_paths() -> tuple[list[str], list[str]]:
    """The common networks' ONNX files, and why any is missing. They are
    exported once by ``jitnn.bench.networks`` (which needs PyTorch), in a
    process of its own (that module runs jitnn's benchmarks, which import
    the package this module is part of)."""
    import subprocess
    import sys
    paths, missing = [], []
    for name in ("resnet50", "mobilenetv2"):
        done = subprocess.run(
            [sys.executable, "-c", "import sys\nfrom jitnn.bench.networks import export\n"
             f"print(export({name!r}))"], capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip():
            paths.append(done.stdout.strip().splitlines()[-1])
        else:
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
            missing.append(f"{name}: its ONNX export needs PyTorch and onnx ({reason})")
    return paths, missing


def warmup(model: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
           threads: int | Sequence[int] | None = None, *, workers: int | None = None,
           out: TextIO | None = None) -> WarmupReport:
    """Compile the kernels that ``model`` (an ONNX path, or several) needs,
    or by default the demo and the common networks, on ``threads`` (an int
    or a list; default the default context's), in ``workers`` worker
    processes (default: one per core) that save them into the kernel cache.
    Shows a progress bar on ``out`` (stderr) when it takes more than a
    second. Returns a :class:`WarmupReport`."""
    started = time.perf_counter()
    counts = _thread_counts(threads)
    workers = compile_pool.default_workers() if workers is None else workers
    skipped: list[str] = []
    if workers <= 0:
        return WarmupReport([], ["everything: no worker processes (JITNN_COMPILE_WORKERS=0, "
                                 "or no writable kernel cache)"], 0, 0, [],
                            time.perf_counter() - started, 0)
    if model is None:
        paths, skipped = network_paths()
        workloads = [w for t in counts for w in demo_workloads(t)]
    else:
        paths = [os.fspath(model)] if isinstance(model, (str, os.PathLike)) else \
            [os.fspath(m) for m in model]
        workloads = []
    workloads += [model_workload(p, t) for p in paths for t in counts]
    return run_workloads(workloads, workers, out, started, skipped)


def run_workloads(workloads: list[tuple[str, Callable[[], object]]], workers: int,
                  out: TextIO | None = None, started: float | None = None,
                  skipped: list[str] | None = None) -> WarmupReport:
    """Scout each workload in this process and compile what they need in
    ``workers`` worker processes, the first workload's kernels while the
    next is scouted. (The scouted runs compute garbage in contexts of their
    own, which are dropped.)"""
    started = time.perf_counter() if started is None else started
    if workers <= 0:
        return WarmupReport([w for w, _ in workloads], list(skipped or []), 0, 0, [],
                            time.perf_counter() - started, 0)
    executor = compile_pool.pool(workers)
    progress = compile_pool.Progress(0, f"warming up ({workers} processes)", out)
    futures, seen = [], set()
    for _, run in workloads:
        for request in compile_pool.scout(run):
            key = (request.recipe, request.argtypes)
            if key not in seen:
                seen.add(key)
                futures.append(executor.submit(request))
                progress.total += 1
        progress.update()
    failed = [f"{name}: {error}" for name, _, error in compile_pool.wait_all(futures, progress)
              if error]
    return WarmupReport([w for w, _ in workloads], list(skipped or []), len(futures),
                        len(futures) - len(failed), failed, time.perf_counter() - started,
                        workers)


# --- the cache, for ``jitnn info`` -------------------------------------------------------

@dataclasses.dataclass
class CacheStatus:
    """Where the kernel cache is and what it holds (``jitnn info``):
    ``directory`` (None without a usable one), whether new kernels are saved
    there, its size, how many kernel files (numba's indexes, one per kernel
    function) it holds, and the other configurations' directories in its
    root (other CPUs, numba versions or settings), which this process does
    not use."""

    directory: str | None
    writable: bool
    bytes: int
    kernels: int
    others: list[str]

    @property
    def matches(self) -> bool:
        """Whether the cache holds kernels built for this CPU and settings."""
        return self.kernels > 0


def cache_status() -> CacheStatus:
    from .kernels import _config
    directory = _config.CACHE_DIR
    if directory is None:
        return CacheStatus(None, False, 0, 0, [])
    kernels = sum(1 for _ in directory.rglob("*.nbi")) if directory.exists() else 0
    others = sorted(p.name for p in directory.parent.glob("numba-*")
                    if p.is_dir() and p != directory)
    return CacheStatus(str(directory), _config.CACHE_WRITABLE, _config.cache_size_bytes(),
                       kernels, others)
