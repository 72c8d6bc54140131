"""Benchmark suites shipped with jitnn: ``jitnn bench {reorder,conv2d,matmul,blocks,chain,ops,model,torch,all}``.

Each suite measures jitnn against its peers (PyTorch, ONNX Runtime, OpenVINO,
numpy; those not installed are skipped with a line saying so) in the same run, and
against the peak: the OpenBLAS sgemm rate measured with the same threads.
The shared machinery (timing, threads, machine facts, the peak, tables, JSON,
plot) is in :mod:`jitnn.bench.harness`.

Adding a suite
--------------
Write ``jitnn/bench/<name>.py`` and add one line to :data:`SUITES` below
(``"chain": "jitnn.bench.chain",``); ``jitnn bench <name>`` and ``jitnn bench
all`` then run it. A suite module defines:

``DESCRIPTION: str``
    one line, shown by ``jitnn bench --help`` and above the suite's tables.
``UNIT: str``
    ``"GFLOP/s"`` or ``"GB/s"``.
``PEERS: tuple[str, ...]``
    the peers it can compare with, a subset of ``("torch", "onnxruntime",
    "openvino", "numpy")``; the harness passes on those that were asked for
    (``--peers``) and are installed, and reports the others as skipped.
``measure(run: harness.Run) -> dict``
    runs the measurements in a process whose threads are already set to
    ``run.threads`` (numba, OpenBLAS, torch; ONNX Runtime sessions should use
    ``intra_op_num_threads=run.threads``, OpenVINO ``harness.openvino_runner``). ``run.quick`` asks for tiny shapes
    that run in seconds, ``run.peers`` lists the peers to run, ``run.options``
    holds suite-specific options, ``run.median(fn)`` times a call (median,
    min, max seconds, after warm-up) and ``run.progress(text)`` prints a
    progress line to stderr. Returns ``{"rows": [dict, ...], ...}``: the rows
    must be JSON-serializable; other keys are kept with the run. The harness
    adds ``threads``, ``quick``, ``peers``, ``peak_gflops``, ``machine``,
    ``versions`` and more to this dict.
``render(result: dict) -> list[str]``
    the markdown lines (tables, geomeans) of one thread count; the harness
    prints the command, date, thread count and peak above them
    (:class:`harness.Column` and :func:`harness.markdown_table` help).
``PLOT_COLUMNS: list[tuple]``
    ``(legend, row key)`` or ``(legend, row key, peer)`` pairs that
    ``--plot`` draws as bars per row (labelled by ``row_label(row)`` if the
    module defines it, else ``row["label"]``); or define ``plot(ax,
    result)`` to draw a matplotlib Axes yourself.

Optional: ``summary(results: list[dict]) -> list[str]`` (lines after every
thread count, e.g. the 2-thread speedup), ``COMPILE_PROBE`` (Python source
printing a JSON dict ``{name: seconds}``; run twice in fresh processes with an
empty kernel cache, cold then cached, in full runs) with ``COMPILE_LABEL``.
A suite must not rely on the repository's ``benchmarks/`` folder: it runs
from an installed package.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: name -> module of every suite, in the order ``jitnn bench all`` runs them.
SUITES: dict[str, str] = {
    "reorder": "jitnn.bench.reorder",
    "conv2d": "jitnn.bench.conv2d",
    "matmul": "jitnn.bench.matmul",
    "blocks": "jitnn.bench.blocks",
    "chain": "jitnn.bench.chain",
    "ops": "jitnn.bench.ops",
    "model": "jitnn.bench.model",
    "zoo": "jitnn.bench.zoo_bench",
    "torch": "jitnn.bench.torch_compile",
}


def load(name: str) -> ModuleType:
    """The module of suite ``name``."""
    if name not in SUITES:
        raise ValueError(f"jitnn bench: unknown suite {name!r}, expected one of "
                         f"{', '.join(SUITES)}")
    return importlib.import_module(SUITES[name])


__all__ = ["SUITES", "load"]
