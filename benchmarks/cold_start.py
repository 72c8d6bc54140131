"""Cold start: what compiling jitnn's kernels costs, per kernel and per model.

Every run is a new process whose ``JITNN_CACHE_DIR`` is its own directory under
``--cache-root``: empty for a cold run; a warm run reuses the directory of the
run before it. A sequence of runs shares one directory (ResNet-50 on 1 thread,
then on 2, then MobileNetV2: what each adds to the cache).

    python benchmarks/cold_start.py                          # every sequence
    python benchmarks/cold_start.py resnet50 demo            # some of them
    python benchmarks/cold_start.py resnet50 --variants      # and every kernel variant
    python benchmarks/cold_start.py --json cold.json --cache-root /tmp/cold

Figures per run: wall seconds of the whole process (interpreter start to the
end of the first inference), CPU seconds of the process and its children
(``resource.getrusage``: compile workers included), and the kernel variants
numba compiled in the process itself (``--workers 0`` for all of them:
otherwise worker processes compile some, unseen), each with the CPU seconds
of its compile (thread CPU time inside numba's ``numba:compile`` event, the variants
compiled on the way excluded: a driver's figure is its own typing, lowering
and the LLVM passes over it and the helpers linked into it). CPU seconds are
what a busy host does not inflate; wall seconds need a quiet one.

Workloads: ``demo`` (``jitnn demo`` without its plot), ``resnet50``,
``mobilenetv2`` (``jitnn.bench.networks``, exported to ONNX once: needs
torch the first time), ``bert`` (the small BERT of ``tests/data/models``,
a source checkout only). Threads: the default context's (all cores) unless
a run names them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: name -> runs sharing one cache: (workload, threads or None for the default, cold/warm)
SEQUENCES = {
    "demo": [("demo", None)],
    "resnet50": [("resnet50", None)],
    "resnet50-1t-then-2t": [("resnet50", 1), ("resnet50", 2), ("mobilenetv2", 2)],
    "mobilenetv2": [("mobilenetv2", None)],
    "bert": [("bert", None)],
}


# --- the child: one workload, its compiles recorded ----------------------------------

class _CompileRecorder:
    """Records every numba compile of this process: the function, its
    argument types, and the thread CPU seconds of the compile with the
    compiles nested in it (callees, overloads) and without them."""

    def __init__(self):
        import threading
        self.records: list[dict] = []
        self._local = threading.local()
        self.llvm_cpu = 0.0

    def listener(self):
        import numba.core.event as event
        recorder = self

        class Compiles(event.Listener):
            def on_start(self, ev):
                stack = recorder._stack()
                stack.append([ev.data["dispatcher"], ev.data["args"], time.thread_time(), 0.0])

            def on_end(self, ev):
                stack = recorder._stack()
                dispatcher, args, started, nested = stack.pop()
                cpu = time.thread_time() - started
                if stack:
                    stack[-1][3] += cpu
                function = dispatcher.py_func
                recorder.records.append({
                    "kernel": f"{function.__module__}.{function.__qualname__}",
                    "args": str(tuple(args)),
                    "cpu_s": cpu - nested, "with_callees_s": cpu, "depth": len(stack),
                    # failed: typing asked for literal arguments (numba compiles it
                    # again with them) or an error (numba 0.68's Event.is_failed
                    # says the opposite of its name: read the details)
                    "retyped": getattr(ev, "_exc_details", None) is not None,
                })

        class Llvm(event.Listener):
            def on_start(self, ev):
                recorder._local.llvm_started = time.thread_time()

            def on_end(self, ev):
                recorder.llvm_cpu += time.thread_time() - recorder._local.llvm_started

        return Compiles(), Llvm()

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack


def _input_arrays(path: str):
    import numpy as np
    import onnx
    model = onnx.load(path)
    initializers = {t.name for t in model.graph.initializer}
    inputs = {}
    for info in model.graph.input:
        if info.name not in initializers:
            dims = [d.dim_value or 1 for d in info.type.tensor_type.shape.dim]
            inputs[info.name] = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    return inputs


def _run_workload(workload: str, threads: int | None) -> dict:
    """Run ``workload`` once in this process; returns what it compiled."""
    import numba.core.event as event
    recorder = _CompileRecorder()
    compiles, llvm = recorder.listener()
    event.register("numba:compile", compiles)
    event.register("numba:llvm_lock", llvm)
    import io

    import numpy as np

    import jitnn
    ctx = None
    if workload == "demo":
        from jitnn import demo
        demo.run(threads=threads, plot=None, out=io.StringIO())
    elif workload in ("resnet50", "mobilenetv2"):
        import jitnn.onnx
        from jitnn.bench.networks import export
        path = export(workload)
        inputs = _input_arrays(path)
        ctx = jitnn.Context(num_threads=threads)
        jitnn.onnx.run(path, inputs, ctx)
    elif workload == "bert":
        import jitnn.onnx
        path = os.path.join(ROOT, "tests", "data", "models", "bert.onnx")
        with np.load(path[:-5] + ".npz") as data:
            inputs = {k[len("0.in."):]: data[k] for k in data.files if k.startswith("0.in.")}
        ctx = jitnn.Context(num_threads=threads)
        jitnn.onnx.run(path, inputs, ctx)
    else:
        raise SystemExit(f"cold_start: unknown workload {workload!r}")
    from jitnn.kernels import _config
    kernels = [r for r in recorder.records if r["kernel"].startswith("jitnn.kernels.")]
    return {
        "workload": workload,
        "threads": threads or jitnn.default_context().num_threads,
        "compile_cpu_s": sum(r["cpu_s"] for r in recorder.records),
        "llvm_cpu_s": recorder.llvm_cpu,
        "context_compile_s": None if ctx is None else ctx.stats.compile_s,
        "variants": sum(1 for r in kernels if not r["retyped"]),
        "top_level_variants": sum(1 for r in kernels if not r["retyped"] and r["depth"] == 0),
        "cache_dir": str(_config.CACHE_DIR),
        "records": recorder.records,
    }


# --- the parent: runs, cold and warm, and their tables --------------------------------

def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(workload: str, threads: int | None, cache_dir: str,
             env: dict | None = None) -> dict:
    """One workload in a new process with ``JITNN_CACHE_DIR=cache_dir``."""
    environment = dict(os.environ, JITNN_CACHE_DIR=cache_dir, **(env or {}))
    command = [sys.executable, os.path.abspath(__file__), "--child", workload,
               str(threads or 0)]
    cpu_before = _child_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    wall = time.perf_counter() - started
    cpu = _child_cpu() - cpu_before
    if done.returncode:
        raise SystemExit(f"cold_start: {workload} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(wall_s=wall, process_cpu_s=cpu)
    return result


def run_sequence(name: str, cache_root: str, warm: bool = True,
                 env: dict | None = None) -> list[dict]:
    """The runs of sequence ``name`` on one empty cache directory, then (``warm``)
    its first run again on the filled directory."""
    cache = os.path.join(cache_root, name)
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    results = []
    before = "cold"
    for workload, threads in SEQUENCES[name]:
        result = run_once(workload, threads, cache, env)
        result.update(sequence=name, state=before)
        results.append(result)
        before = f"after {workload} {result['threads']}t"
    if warm:
        workload, threads = SEQUENCES[name][0]
        result = run_once(workload, threads, cache, env)
        result.update(sequence=name, state="warm")
        results.append(result)
    return results


def _kernel_name(record: dict) -> str:
    name = record["kernel"]
    return name[len("jitnn.kernels."):] if name.startswith("jitnn.kernels.") else "numba: " + \
        name.split(".<locals>")[0].rsplit(".", 1)[-1]


def runs_table(results: list[dict]) -> list[str]:
    lines = ["| run | cache | threads | wall s | process CPU s | compile CPU s | of it LLVM | "
             "variants compiled (called from Python) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        share = f"{100 * r['llvm_cpu_s'] / r['compile_cpu_s']:.0f} %" if r["compile_cpu_s"] \
            else "-"
        lines.append(f"| {r['workload']} | {r['state']} | {r['threads']} | {r['wall_s']:.1f} | "
                     f"{r['process_cpu_s']:.1f} | {r['compile_cpu_s']:.1f} | {share} | "
                     f"{r['variants']} ({r['top_level_variants']}) |")
    return lines


def kernels_table(results: list[dict], top: int = 30) -> list[str]:
    """Per kernel function: variants compiled and CPU seconds, one column per run."""
    runs = [r for r in results if r["records"]]
    totals: dict[str, list] = {}
    for column, r in enumerate(runs):
        for record in r["records"]:
            cell = totals.setdefault(_kernel_name(record), [[0, 0.0] for _ in runs])[column]
            cell[0] += 0 if record["retyped"] else 1
            cell[1] += record["cpu_s"]
    header = "| kernel | " + " | ".join(f"{r['workload']} {r['threads']}t {r['state']}"
                                         for r in runs) + " |"
    lines = [header, "|---|" + "---:|" * len(runs)]
    ranked = sorted(totals.items(), key=lambda item: -sum(c[1] for c in item[1]))
    for name, cells in ranked[:top]:
        lines.append(f"| {name} | " + " | ".join(
            f"{n} / {s:.2f} s" if n or s else "" for n, s in cells) + " |")
    rest = ranked[top:]
    if rest:
        lines.append(f"| {len(rest)} others | " + " | ".join(
            f"{sum(c[i][0] for _, c in rest)} / {sum(c[i][1] for _, c in rest):.2f} s"
            for i in range(len(runs))) + " |")
    return lines


def variants_listing(result: dict) -> list[str]:
    lines = [f"{result['workload']} {result['threads']}t {result['state']}: "
             "CPU s (with callees), depth, kernel, argument types"]
    for r in sorted(result["records"], key=lambda r: -r["cpu_s"]):
        lines.append(f"{r['cpu_s']:7.2f} ({r['with_callees_s']:6.2f}) {r['depth']} "
                     f"{'retyped ' if r['retyped'] else ''}{_kernel_name(r)} {r['args'][:160]}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sequences", nargs="*", metavar="NAME",
                        help=f"which sequences ({', '.join(SEQUENCES)}; default all)")
    parser.add_argument("--cache-root", help="where the runs' cache directories go "
                                             "(default: a new temporary directory)")
    parser.add_argument("--no-warm", action="store_true", help="cold runs only")
    parser.add_argument("--variants", action="store_true", help="list every kernel variant")
    parser.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    parser.add_argument("--workers", type=int, default=None,
                        help="JITNN_COMPILE_WORKERS for the runs (0: every kernel compiles in "
                             "the run's own process, where its compile is recorded)")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, threads = args.child
        print(json.dumps(_run_workload(workload, int(threads) or None)))
        return 0
    unknown = [s for s in args.sequences if s not in SEQUENCES]
    if unknown:
        parser.error(f"unknown sequence {unknown[0]!r} (known: {', '.join(SEQUENCES)})")
    root = args.cache_root or tempfile.mkdtemp(prefix="jitnn-cold-")
    results = []
    for name in args.sequences or list(SEQUENCES):
        env = None if args.workers is None else {"JITNN_COMPILE_WORKERS": str(args.workers)}
        results += run_sequence(name, root, warm=not args.no_warm, env=env)
        print(f"{name}: done", file=sys.stderr, flush=True)
    print("\n".join(runs_table(results)) + "\n")
    print("\n".join(kernels_table([r for r in results if r["state"] != "warm"])) + "\n")
    if args.variants:
        for result in results:
            if result["records"]:
                print("\n".join(variants_listing(result)) + "\n")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
