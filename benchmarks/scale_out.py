"""Scale-out throughput: a batch job of images through ResNet-50 (random weights) on jitnn and
ONNX Runtime, as one process using every core's thread and as Dask worker processes of one
thread each (docs/scale-out.md).

    python benchmarks/scale_out.py                  # 64 images in batches of 8, ResNet-50
    python benchmarks/scale_out.py --quick          # 4 images, a reduced ResNet: checks it runs
    python benchmarks/scale_out.py --model M.onnx   # another image model (input N x C x H x W)
    python benchmarks/scale_out.py --json scale.json

With C cores (the CPUs this process may use, or --cores), each engine runs the job as:

* ``1 x C``: this process, one model on C threads (jitnn ``Context(num_threads=C)``, ONNX
  Runtime ``intra_op_num_threads=C``), the batches one after the other;
* ``Dask 1 x C``: one Dask worker process, the model on C threads (the nanny's
  ``OMP_NUM_THREADS`` set to C, which jitnn's default context follows), the same batches;
* ``Dask C x 1``: C Dask worker processes of one thread each (the nanny's default
  ``OMP_NUM_THREADS=1``), the model scattered to each, one task per batch.

Every configuration first runs one batch twice in each process (compiles or loads kernels,
packs filters, reuses the plan; not timed), then the whole job ``--repeats`` times; the table
gives the median job time, images per second and the speed over the engine's own ``1 x C``.
jitnn runs ``jitnn.onnx.prepare(...).run``, as docs/scale-out.md's examples do. Each
configuration's logits are checked against jitnn's in this process. Needs ``dask[distributed]``; ONNX
Runtime is skipped if it is not installed; exporting ResNet-50 needs torch (or give --model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

QUICK_NETWORK = {"width": 0.25, "size": 64, "layers": (1, 1, 1, 1)}
#: untimed runs of one batch in each process first: the first compiles or loads kernels and
#: packs filters, the second runs the reused plan's path (which the timed batches take)
WARMUP_RUNS = 2


class OnnxRuntimeModel:
    """An ONNX Runtime session that pickles as its model path and threads
    (a session does not pickle): each worker makes its own at its first run."""

    def __init__(self, path: str, threads: int):
        self.path, self.threads, self._session = path, threads, None

    def __getstate__(self) -> dict:
        return {"path": self.path, "threads": self.threads, "_session": None}

    def run(self, feed: dict) -> dict:
        if self._session is None:
            import onnxruntime as ort
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            self._session = ort.InferenceSession(self.path, options,
                                                 providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in self._session.get_outputs()],
                        self._session.run(None, feed)))


def classify(images: np.ndarray, model) -> np.ndarray:
    """The first output of ``model`` (jitnn's prepared model or ONNX Runtime's) on a batch."""
    outputs = model.run({"input": images})
    return next(iter(outputs.values()))


def _model_path(args: argparse.Namespace) -> str:
    if args.model:
        return args.model
    from jitnn.bench.networks import export
    return export("resnet50", **(QUICK_NETWORK if args.quick else {}))


def _image_shape(path: str) -> tuple[int, int, int]:
    import onnx
    graph = onnx.load(path, load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    (info,) = [i for i in graph.input if i.name not in initializers]
    if info.name != "input":
        raise SystemExit(f"scale_out: the model's input is {info.name!r}, expected 'input'")
    return tuple(d.dim_value for d in info.type.tensor_type.shape.dim[1:])


def _engines(path: str, batch: int, threads: int, peers: list[str]) -> dict:
    """{engine: its model for ``threads`` threads}, built in this process."""
    import jitnn
    import jitnn.onnx
    engines = {"jitnn": jitnn.onnx.prepare(path, jitnn.Context(num_threads=threads),
                                           batch=batch)}
    if "onnxruntime" in peers:
        engines["onnxruntime"] = OnnxRuntimeModel(path, threads)
    return engines


def _time_job(run_job, repeats: int) -> tuple[float, np.ndarray]:
    seconds, logits = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        logits = run_job()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), logits


def _in_process(path: str, batches: list, threads: int, peers: list[str], repeats: int) -> dict:
    results = {}
    for engine, model in _engines(path, len(batches[0]), threads, peers).items():
        for _ in range(WARMUP_RUNS):
            classify(batches[0], model)
        results[engine] = _time_job(
            lambda: np.concatenate([classify(b, model) for b in batches]), repeats)
    return results


def _on_dask(path: str, batches: list, workers: int, threads: int, peers: list[str],
             repeats: int) -> dict:
    import jitnn
    import jitnn.onnx
    from dask.distributed import Client, LocalCluster
    # The workers inherit this process's OMP_NUM_THREADS, which jitnn's default context
    # follows (Dask's nanny sets it, to 1 by default, only where it is unset, and sets it
    # in this process too): set it here for each cluster, and restore it after.
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    results = {}
    try:
        with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None,
                          processes=True) as cluster, Client(cluster) as client:
            addresses = list(client.scheduler_info()["workers"])
            facts = client.run(lambda: jitnn.default_context().num_threads)
            assert set(facts.values()) == {threads}, f"worker threads {facts}, not {threads}"
            # the driver's default context: each worker's default context unpickles it
            models = {"jitnn": jitnn.onnx.prepare(path, batch=len(batches[0]))}
            if "onnxruntime" in peers:
                models["onnxruntime"] = OnnxRuntimeModel(path, threads)
            for engine, model in models.items():
                shared = client.scatter(model, broadcast=True)
                for _ in range(WARMUP_RUNS):
                    client.gather([client.submit(classify, batches[0], model=shared,
                                                 workers=[a], pure=False) for a in addresses])
                results[engine] = _time_job(lambda: np.concatenate(client.gather(
                    client.map(classify, batches, model=shared, pure=False))), repeats)
                del shared
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, help="images in the job (default 64; 4 quick)")
    parser.add_argument("--batch", type=int, help="images per call (default 8; 2 quick)")
    parser.add_argument("--cores", type=int, help="C (default: the CPUs this process may use)")
    parser.add_argument("--repeats", type=int, help="timed jobs per configuration "
                                                    "(default 3; 1 quick)")
    parser.add_argument("--model", help="an ONNX image model (default: ResNet-50, exported once)")
    parser.add_argument("--peers", default="onnxruntime", help="onnxruntime, or '' for none")
    parser.add_argument("--quick", action="store_true", help="a reduced ResNet, 4 images")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)

    from jitnn.threads import affinity_cpus
    cores = args.cores or affinity_cpus()
    count = args.images or (4 if args.quick else 64)
    batch = args.batch or (2 if args.quick else 8)
    repeats = args.repeats or (1 if args.quick else 3)
    if count % batch:
        raise SystemExit(f"scale_out: --images {count} is not a multiple of --batch {batch}")
    peers = [p for p in args.peers.split(",") if p]
    if "onnxruntime" in peers:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            print("ONNX Runtime is not installed: skipped", file=sys.stderr)
            peers.remove("onnxruntime")
    path = _model_path(args)
    images = np.random.default_rng(0).standard_normal((count, *_image_shape(path)),
                                                      dtype=np.float32)
    batches = np.split(images, count // batch)

    layouts = {f"1 x {cores}": lambda: _in_process(path, batches, cores, peers, repeats),
               f"Dask 1 x {cores}": lambda: _on_dask(path, batches, 1, cores, peers, repeats),
               f"Dask {cores} x 1": lambda: _on_dask(path, batches, cores, 1, peers, repeats)}
    rows, reference = [], None
    for layout, run in layouts.items():
        print(f"{time.strftime('%H:%M:%S')} running {layout} ...", file=sys.stderr)
        for engine, (seconds, logits) in run().items():
            if reference is None:
                reference = logits                  # jitnn, in this process
            error = float(np.abs(logits - reference).max() / np.abs(reference).max())
            rows.append({"engine": engine, "layout": layout, "seconds": seconds,
                         "images_per_s": count / seconds, "max_rel_err": error})
    for row in rows:
        base = next(r for r in rows if r["engine"] == row["engine"])
        row["speedup"] = base["seconds"] / row["seconds"]

    print(f"{os.path.basename(path)}: {count} images in batches of {batch}, {cores} cores, "
          f"median of {repeats} job(s)\n")
    print("| engine | processes x threads | job s | images/s | x own 1 x C | max rel err |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['engine']} | {r['layout']} | {r['seconds']:.3f} | {r['images_per_s']:.1f} "
              f"| {r['speedup']:.2f} | {r['max_rel_err']:.1e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": path, "images": count, "batch": batch, "cores": cores,
                       "repeats": repeats, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
