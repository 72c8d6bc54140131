"""What the tests run in other processes (multiprocessing's spawn, fork and
forkserver children, Dask and Ray workers): importable functions, since a
spawned child finds a function by its module and name.

``MODEL`` is a small ONNX image model of tests/data/models with its input and
ONNX Runtime's output (``model_case``), so a worker's answer is checked
against ONNX Runtime without either installed."""

from __future__ import annotations

import os
import warnings

import numpy as np

import jitnn

#: a small CNN (convs, batch norms, concat, pools, a Gemm), dynamic batch, 3 x 64 x 64
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "models",
                     "densenet121.onnx")


def model_case() -> tuple[np.ndarray, np.ndarray]:
    """MODEL's stored input (1, 3, 64, 64) and ONNX Runtime's logits for it."""
    with np.load(MODEL.replace(".onnx", ".npz")) as data:
        return data["0.in.input"], data["0.out.logits"]


def small_graph(ctx: "jitnn.Context | None" = None) -> jitnn.Graph:
    """A builder graph of several op kinds: a conv with a Tensor given as its
    bias, an op of two outputs, a numpy constant argument, an integer input."""
    rng = np.random.default_rng(0)
    ctx = ctx or jitnn.default_context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 3, 9, 9))
    ids = b.input("ids", (2, 4), dtype="int64")
    w = b.constant(rng.standard_normal((7, 3, 3, 3)).astype(np.float32))
    bias = ctx.tensor(rng.standard_normal(7).astype(np.float32))
    y = b.relu(b.conv2d(x, w, bias=bias, padding=1))
    low, high = b.split(y, [3, 4], axis=1)
    shift = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    return b.build({"low": b.add(low, shift), "pool": b.max_pool2d(high, window_dimensions=2),
                    "ids": b.mul(b.add(ids, bias.numpy()[:4].astype(np.int64)), ids)})


def small_graph_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((2, 3, 9, 9)).astype(np.float32),
            "ids": rng.integers(-5, 5, (2, 4))}


def run_graph(graph: jitnn.Graph, inputs: dict) -> dict[str, np.ndarray]:
    """Every output of ``graph`` on ``inputs``, on the graph's context."""
    outs = graph.context.dispatch(graph, inputs)
    return {name: t.numpy() for name, t in outs.items()}


def compute_graph(graph: jitnn.Graph, inputs: dict) -> dict[str, np.ndarray]:
    """``ctx.compute`` of ``graph`` on its context, into new arrays."""
    outs = {name: np.empty(shape, graph.output_dtypes[name])
            for name, shape in graph.outputs.items()}
    return graph.context.compute(graph, inputs, outs)


def run_model(model, images: np.ndarray) -> np.ndarray:
    """A prepared ONNX model (``jitnn.onnx.prepare``) on a batch of images."""
    return model.run({"input": images})["logits"]


def run_backend_rep(rep, images: np.ndarray) -> np.ndarray:
    """An ``onnx.backend`` rep (``jitnn.onnx.backend.prepare``) on images."""
    return rep.run([images])[0]


def context_facts(ctx: jitnn.Context) -> tuple:
    """What an unpickled context is in this process."""
    return (ctx.num_threads, ctx.policy, ctx.conv_algorithm, ctx is jitnn.default_context(),
            os.getpid())


def run_here() -> dict:
    """In a child process: the small graph on the default context (in a
    forked child, the parent's, whose readback threads stayed behind) read
    with parallel readbacks, and on a new context; what each computed, the
    new context's threads and why, and the warnings given."""
    inputs = small_graph_inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx = jitnn.default_context()
        graph = small_graph(ctx)
        outs = ctx.dispatch(graph, inputs)
        names = sorted(outs)
        default = dict(zip(names, ctx.read_all([outs[name] for name in names])))
        fresh = jitnn.Context()
        new = run_graph(small_graph(fresh), inputs)
    return {"default": default, "new": new, "threads": fresh.num_threads,
            "source": fresh.num_threads_source, "warnings": [str(w.message) for w in caught]}
