"""Conv algorithms measured on the host (jitnn/tuning.py) against the formula.

For each model, in one process: the model prepared twice, once with
``JITNN_TUNE=0`` (the formula decides) and once with measuring on into an
empty tuning file of its own; their first runs (the second one measures:
the seconds it spent doing so), then both timed in alternated rounds
(medians of wall times). Then each 3x3 shape that had two candidates,
timed again on its own in 25 alternated rounds of the two kernels (the
calling thread's CPU time, as the tuner measures: medians and minima),
beside the tuner's decision.

    python benchmarks/conv_tuning.py resnet50 --threads 1
    python benchmarks/conv_tuning.py googlenet densenet121 --threads 1 --rounds 15
    python benchmarks/conv_tuning.py path/to/model.onnx --threads 2

A name is a network of ``jitnn.bench.networks`` or a model of the zoo
(``jitnn.bench.zoo``, exported once: needs torch), or a path to an ONNX model.
Kernels should be in the cache already (run the model once first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def _model_path(name: str) -> str:
    if os.path.exists(name):
        return name
    from jitnn.bench import networks, zoo
    if name in networks.NETWORKS:
        return networks.export(name)
    return zoo.export(name)


def _prepare(model, inputs: dict, threads: int, tune: bool):
    import numpy as np

    import jitnn
    import jitnn.onnx
    os.environ["JITNN_TUNE"] = "1" if tune else "0"
    ctx = jitnn.Context(num_threads=threads)
    prepared = jitnn.onnx.prepare(model, ctx,
                                  input_shapes={k: v.shape for k, v in inputs.items()})
    outs = {n: np.empty(s, np.float32) for n, s in prepared.graph.outputs.items()}

    def run() -> None:
        ctx.compute(prepared.graph, inputs, outs)
    started = time.perf_counter()
    run()
    return run, outs, time.perf_counter() - started


def _kernel_times(key: str, threads: int, rounds: int = 25) -> dict:
    """Medians and minima (ms of the calling thread's CPU time) of the two
    algorithms on the shape of ``key``."""
    import numba
    import numpy as np

    from jitnn.kernels import conv2d as ck
    # the key: "<cpu> cb<block> t<threads> float32 conv2d <n>x<c>x<h>x<w> o<outputs> ..."
    shape = key.split(" conv2d ")[1].split()
    n, c, h, w = (int(v) for v in shape[0].split("x"))
    o = int(shape[1][1:])
    block = int(key.split()[1][2:])
    rng = np.random.default_rng(0)
    packed = ck.pack_conv2d_filter(rng.standard_normal((o, c, 3, 3)).astype(np.float32) / 24,
                                   c, 1, block)
    x = ck.aligned_empty((n, -(-c // block), h, w, block))
    x[...] = rng.standard_normal(x.shape)
    y = ck.aligned_empty((n, -(-o // block), h, w, block))
    numba.set_num_threads(threads)
    times: dict[str, list[float]] = {"direct": [], "winograd": []}
    for algorithm in times:
        ck.conv2d_forward(x, packed, y, padding=(1, 1, 1, 1), algorithm=algorithm)
    for _ in range(rounds):
        for algorithm, values in times.items():
            started = time.thread_time()
            ck.conv2d_forward(x, packed, y, padding=(1, 1, 1, 1), algorithm=algorithm)
            values.append(time.thread_time() - started)
    return {a: (1e3 * statistics.median(v), 1e3 * min(v)) for a, v in times.items()}


def run(name: str, threads: int, rounds: int, batch: int) -> None:
    import numpy as np

    from jitnn import tuning
    from jitnn.bench.networks import _input_of
    path = _model_path(name)
    model, inputs = _input_of(path, batch)
    with tempfile.TemporaryDirectory() as directory:
        tuner = tuning.Tuner(os.path.join(directory, tuning.FILE_NAME))
        previous = tuning.use(tuner)
        saved = os.environ.get("JITNN_TUNE")
        try:
            run_formula, out_formula, first_formula = _prepare(model, inputs, threads, False)
            run_tuned, out_tuned, first_tuned = _prepare(model, inputs, threads, True)
        finally:
            tuning.use(previous)
            if saved is None:
                os.environ.pop("JITNN_TUNE", None)
            else:
                os.environ["JITNN_TUNE"] = saved
        decisions = dict(tuner._loaded())
    for each in (run_formula, run_tuned):
        each()
    formula, tuned = [], []
    for i in range(rounds):
        pairs = ((run_formula, formula), (run_tuned, tuned))
        for each, values in (pairs if i % 2 == 0 else pairs[::-1]):
            started = time.perf_counter()
            each()
            values.append(time.perf_counter() - started)
    differ = max(float(np.abs(out_tuned[k] - out_formula[k]).max()
                       / max(float(np.abs(out_formula[k]).max()), 1e-30)) for k in out_formula)
    changed = sum(d.choice != d.formula for d in decisions.values())
    print(f"\n{os.path.basename(path)}, batch {batch}, {threads} thread(s): formula "
          f"{1e3 * statistics.median(formula):.2f} ms, measured {1e3 * statistics.median(tuned):.2f}"
          f" ms (medians of {rounds} alternated runs); first runs {first_formula:.2f} s and "
          f"{first_tuned:.2f} s, of which measuring {tuner.measuring_s:.3f} s; {len(decisions)} "
          f"shape(s) measured, {changed} changed, "
          f"{sum(not d.settled for d in decisions.values())} too noisy to keep; outputs differ "
          f"by {differ:.1e}")
    print("| shape (n x c x h x w, outputs) | tuner: direct / Winograd ms, choice | "
          "alone, 25 rounds: median direct / Winograd | minimum direct / Winograd |")
    print("|---|---|---|---|")
    for key, d in decisions.items():
        alone = _kernel_times(key, threads)
        shape = " ".join(key.split(" conv2d ")[1].split()[:2])
        mark = d.choice if d.settled else f"{d.choice} (noisy: formula)"
        print(f"| {shape} | {1e3 * d.seconds['direct']:.3f} / {1e3 * d.seconds['winograd']:.3f}, "
              f"{mark} | {alone['direct'][0]:.3f} / {alone['winograd'][0]:.3f} | "
              f"{alone['direct'][1]:.3f} / {alone['winograd'][1]:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="network or zoo names, or ONNX paths")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15, help="alternated model runs")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    for name in args.models:
        run(name, args.threads, args.rounds, args.batch)


if __name__ == "__main__":
    main()
