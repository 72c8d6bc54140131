"""What every benchmark here shares: timing, machine facts, threads, the peak.

Each thread count runs in its own process, with OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS and NUMBA_NUM_THREADS set before numpy, torch or numba load,
so every library in that process uses the same number of threads.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def median_seconds(function, min_time: float = 0.3, min_reps: int = 5, warmup: int = 2):
    """Median and spread (min, max) of ``function()``'s run time, after warm-up
    calls (compilation is excluded: it happens in the warm-up)."""
    for _ in range(warmup):
        function()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        function()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def machine_facts() -> dict:
    import llvmlite.binding as llvm
    import numba
    import numpy as np
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    features = llvm.get_host_cpu_features()
    return {"date": str(datetime.date.today()), "cpu": model, "cores": os.cpu_count(),
            "simd": "AVX-512" if features.get("avx512f") else "AVX2" if features.get("avx2") else "other",
            "numba": numba.__version__, "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "numpy": np.__version__, "python": platform.python_version()}


def sgemm_peak_gflops(n: int = 1024) -> float:
    """OpenBLAS sgemm rate (numpy) at n x n x n with this process's threads."""
    import numpy as np
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    out = np.empty((n, n), np.float32)
    seconds, _, _ = median_seconds(lambda: np.matmul(a, b, out=out))
    return 2 * n ** 3 / seconds / 1e9


def run_per_thread_count(script: str, threads: list[int], extra_args: list[str]) -> list[dict]:
    """Run ``script --worker --threads T`` in a fresh process per thread count
    and collect the JSON each prints on its last line."""
    results = []
    for count in threads:
        env = {**os.environ, **{name: str(count) for name in THREAD_VARS}}
        done = subprocess.run([sys.executable, script, "--worker", "--threads", str(count),
                               *extra_args], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"{script} failed with {count} thread(s)")
        sys.stderr.write(done.stderr)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return results


def geomean(values) -> float:
    import math
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def compile_times(probe: str) -> dict:
    """Run ``probe`` (Python code printing a JSON dict of seconds) twice in
    fresh processes sharing an empty kernel cache: the first run compiles
    ("cold"), the second loads from the cache ("cached")."""
    import tempfile
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JITNN_CACHE_DIR": cache}
        # cwd=cache: from the repository root, `python -c` would import the
        # source folder jitnn/ (without jitnn.kernels) instead of the install.
        runs = [json.loads(subprocess.run([sys.executable, "-c", probe], env=env, cwd=cache,
                                          capture_output=True, text=True, check=True).stdout)
                for _ in range(2)]
    return {"cold": runs[0], "cached": runs[1]}


def compile_table(compile_info: dict, label: str) -> list[str]:
    """Markdown rows of :func:`compile_times`' result, one per kernel or path."""
    lines = [f"| {label} | cold compile s | load from cache s |", "|---|---:|---:|"]
    for name, cold in compile_info["cold"].items():
        if name != "import_s":
            lines.append(f"| {name} | {cold:.2f} | {compile_info['cached'][name]:.3f} |")
    return lines
