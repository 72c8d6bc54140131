"""Single ops that sit between convolutions: jitnn against ONNX Runtime and PyTorch.

The ops of WebNN that CNNs put between their convolutions (global
reductions over H and W, layer normalization over channels, resampling,
padding) on typical shapes. Each row times one op, three ways, interleaved in
rounds (:meth:`harness.Run.paired`):

* jitnn in-network: the input is a blocked tensor (as a conv leaves it) and
  the result stays in jitnn's layout (computed, not read back): what the op
  costs inside a model;
* jitnn plain: a plain float32 array in, a plain array out
  (``ctx.compute`` of a one-op graph): what a single-op call costs, with the
  layout conversions it needs;
* onnxruntime: a one-node ONNX model (``intra_op_num_threads`` = threads,
  every graph optimization), plain in and out;
* openvino: the same model compiled by OpenVINO for its CPU plugin
  (:func:`harness.openvino_runner`: threads, latency hint, float32);
* torch: the functional op (``inference_mode``), plain in and out.

"x ORT" is ORT's time over jitnn in-network's (> 1: jitnn faster); "x ORT
plain" the same for jitnn plain; "x OV" OpenVINO's over jitnn in-network's.
Layer normalization over channels is ``axes=[1]`` on NCHW for jitnn; ORT,
OpenVINO and PyTorch normalize only trailing axes, so they run it on the same
data in NHWC (what a ConvNeXt export does).
"""

from __future__ import annotations

import statistics

from .harness import Column, Run, geomean, markdown_table, openvino_runner, ratio

DESCRIPTION = ("ops between convs (reduce over H,W; layer norm over C; resample2d x2; pad) vs "
               "ONNX Runtime, OpenVINO and PyTorch single ops")
UNIT = "ms"
PEERS = ("onnxruntime", "openvino", "torch")


def cases(quick: bool) -> list[dict]:
    """``{label, op, shape, ...}``: the op and its WebNN options per row."""
    big, mid, small = ((1, 32, 16, 16), (1, 32, 8, 8), (1, 64, 4, 4)) if quick else \
        ((1, 256, 56, 56), (1, 512, 28, 28), (1, 2048, 7, 7))
    rows = [
        {"label": "reduce_mean H,W", "op": "reduce_mean", "shape": big},
        {"label": "reduce_mean H,W", "op": "reduce_mean", "shape": small},
        {"label": "reduce_max H,W", "op": "reduce_max", "shape": mid},
        {"label": "layer_norm C", "op": "layer_normalization", "shape": big},
        {"label": "layer_norm C", "op": "layer_normalization", "shape": mid},
        {"label": "resample2d x2 nearest", "op": "resample2d", "mode": "nearest-neighbor",
         "shape": mid},
        {"label": "resample2d x2 linear", "op": "resample2d", "mode": "linear", "shape": mid},
        {"label": "pad 1 constant", "op": "pad", "mode": "constant", "shape": big},
        {"label": "pad 1 reflection", "op": "pad", "mode": "reflection", "shape": big},
    ]
    return rows


def _jitnn_call(case: dict, jitnn, x, scale=None, bias=None):
    op = case["op"]
    if op in ("reduce_mean", "reduce_max"):
        return getattr(jitnn, op)(x, axes=[2, 3], keep_dimensions=True)
    if op == "layer_normalization":
        return jitnn.layer_normalization(x, scale=scale, bias=bias, axes=[1], epsilon=1e-5)
    if op == "resample2d":
        return jitnn.resample2d(x, mode=case["mode"], scales=[2.0, 2.0], axes=[2, 3])
    if op == "pad":
        return jitnn.pad(x, [0, 0, 1, 1], [0, 0, 1, 1], mode=case["mode"])
    raise ValueError(op)


def _onnx_model(case: dict, shape):
    """A one-node ONNX model of ``case`` (NHWC for layer normalization)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    n, c, h, w = shape
    op = case["op"]
    inits, extra = [], []
    if op in ("reduce_mean", "reduce_max"):
        name = "ReduceMean" if op == "reduce_mean" else "ReduceMax"
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3]))
        node = helper.make_node(name, ["x", "axes"], ["y"], keepdims=1)
        out_shape = [n, c, 1, 1]
        in_shape = [n, c, h, w]
    elif op == "layer_normalization":
        inits += [helper.make_tensor("scale", TensorProto.FLOAT, [c], np.ones(c).tolist()),
                  helper.make_tensor("bias", TensorProto.FLOAT, [c], np.zeros(c).tolist())]
        node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1,
                                epsilon=1e-5)
        in_shape = out_shape = [n, h, w, c]
    elif op == "resample2d":
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2]))
        mode = "nearest" if case["mode"] == "nearest-neighbor" else "linear"
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode,
                                coordinate_transformation_mode="half_pixel",
                                nearest_mode="round_prefer_floor")
        in_shape, out_shape = [n, c, h, w], [n, c, 2 * h, 2 * w]
    else:
        inits.append(helper.make_tensor("pads", TensorProto.INT64, [8],
                                        [0, 0, 1, 1, 0, 0, 1, 1]))
        mode = "reflect" if case["mode"] == "reflection" else "constant"
        node = helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)
        in_shape, out_shape = [n, c, h, w], [n, c, h + 2, w + 2]
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits + extra)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return onnx._serialize(model) if hasattr(onnx, "_serialize") else model.SerializeToString()


def _torch_call(case: dict, torch, x):
    import torch.nn.functional as F

    op = case["op"]
    if op == "reduce_mean":
        return lambda: x.mean(dim=(2, 3), keepdim=True)
    if op == "reduce_max":
        return lambda: x.amax(dim=(2, 3), keepdim=True)
    if op == "layer_normalization":
        nhwc = x.permute(0, 2, 3, 1).contiguous()
        c = nhwc.shape[-1]
        weight, bias = torch.ones(c), torch.zeros(c)
        return lambda: F.layer_norm(nhwc, (c,), weight, bias, 1e-5)
    if op == "resample2d":
        if case["mode"] == "nearest-neighbor":
            return lambda: F.interpolate(x, scale_factor=2, mode="nearest")
        return lambda: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    mode = "reflect" if case["mode"] == "reflection" else "constant"
    return lambda: F.pad(x, (1, 1, 1, 1), mode=mode)


def measure_case(run: Run, case: dict) -> dict:
    import numpy as np

    import jitnn

    shape = case["shape"]
    ctx = jitnn.Context(num_threads=run.threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    scale = bias = None
    if case["op"] == "layer_normalization":
        scale = ctx.tensor(np.ones(c, np.float32))
        bias = ctx.tensor(np.zeros(c, np.float32))
    blocked = jitnn.reorder(ctx.tensor(x), f"nChw{ctx.block}c")
    blocked.numpy()                                  # materialized, as a conv's output

    def in_network():
        result = _jitnn_call(case, jitnn, blocked, scale, bias)
        result._materialize()                        # computed, left in jitnn's layout

    b = jitnn.GraphBuilder(ctx)
    xin = b.input("x", shape)
    sc = None if scale is None else b.constant(scale.numpy())
    bi = None if bias is None else b.constant(bias.numpy())
    out_operand = _jitnn_call(case, b, xin, sc, bi)
    graph = b.build({"y": out_operand})
    out = np.empty(out_operand.shape, np.float32)

    def plain():
        ctx.compute(graph, {"x": x}, {"y": out})

    functions = {"jitnn": in_network, "jitnn plain": plain}
    # the ONNX peers' input: NHWC for layer normalization (see the docstring)
    feed = {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1))
            if case["op"] == "layer_normalization" else x}
    if "onnxruntime" in run.peers:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = run.threads
        options.inter_op_num_threads = 1
        # ORT's idle workers spin after each run; interleaved with jitnn on 2
        # cores they take the core jitnn's second thread needs for the next
        # call (2-thread reductions measured 2x slower after ORT than alone)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(_onnx_model(case, shape), options,
                                       providers=["CPUExecutionProvider"])
        functions["onnxruntime"] = lambda: session.run(None, feed)
    if "openvino" in run.peers:
        openvino_run = openvino_runner(_onnx_model(case, shape), run.threads)
        functions["openvino"] = lambda: openvino_run(feed)
    if "torch" in run.peers:
        import torch

        torch.set_num_threads(run.threads)
        tx = torch.from_numpy(x)
        call = _torch_call(case, torch, tx)

        def torch_op():
            with torch.inference_mode():
                call()
        functions["torch"] = torch_op
    seconds = run.paired(functions)
    ms = {name: 1e3 * statistics.median(times) for name, times in seconds.items()}
    rounds = list(zip(*seconds.values()))
    names = list(seconds)

    def paired_ratio(peer: str, ours: str) -> float | None:
        if peer not in seconds:
            return None
        i, j = names.index(peer), names.index(ours)
        return statistics.median(r[i] / r[j] for r in rounds)
    return {"label": case["label"], "shape": list(shape), "threads": run.threads,
            "jitnn_ms": ms["jitnn"], "jitnn_plain_ms": ms["jitnn plain"],
            "onnxruntime_ms": ms.get("onnxruntime"), "openvino_ms": ms.get("openvino"),
            "torch_ms": ms.get("torch"),
            "vs_onnxruntime": paired_ratio("onnxruntime", "jitnn"),
            "vs_onnxruntime_plain": paired_ratio("onnxruntime", "jitnn plain"),
            "vs_openvino": paired_ratio("openvino", "jitnn"),
            "vs_torch": paired_ratio("torch", "jitnn")}


def measure(run: Run) -> dict:
    rows = []
    all_cases = cases(run.quick)
    for k, case in enumerate(all_cases):
        rows.append(measure_case(run, case))
        run.progress(f"{k + 1}/{len(all_cases)} {case['label']} "
                     f"{'x'.join(map(str, case['shape']))}: {rows[-1]['jitnn_ms']:.3f} ms")
    return {"rows": rows}


def row_label(row: dict) -> str:
    return f"{row['label']} {'x'.join(map(str, row['shape']))}"


COLUMNS = [
    Column("op", lambda r: r["label"], numeric=False),
    Column("shape", lambda r: "x".join(map(str, r["shape"])), numeric=False),
    Column("jitnn ms", lambda r: r["jitnn_ms"], ".3f"),
    Column("jitnn plain ms", lambda r: r["jitnn_plain_ms"], ".3f"),
    Column("onnxruntime ms", lambda r: r["onnxruntime_ms"], ".3f", peer="onnxruntime"),
    Column("openvino ms", lambda r: r.get("openvino_ms"), ".3f", peer="openvino"),
    Column("torch ms", lambda r: r["torch_ms"], ".3f", peer="torch"),
    Column("x ORT", lambda r: r.get("vs_onnxruntime"), ".2f", peer="onnxruntime"),
    Column("x ORT plain", lambda r: r.get("vs_onnxruntime_plain"), ".2f", peer="onnxruntime"),
    Column("x OV", lambda r: r.get("vs_openvino"), ".2f", peer="openvino"),
    Column("x torch", lambda r: r.get("vs_torch"), ".2f", peer="torch"),
]
PLOT_COLUMNS = [("jitnn", "jitnn_ms"), ("jitnn plain", "jitnn_plain_ms"),
                ("onnxruntime", "onnxruntime_ms", "onnxruntime"),
                ("openvino", "openvino_ms", "openvino"), ("torch", "torch_ms", "torch")]


def render(result: dict) -> list[str]:
    lines = markdown_table(COLUMNS, result["rows"], result["peers"])
    if "onnxruntime" in result["peers"]:
        lines += ["", "geomean speed vs ONNX Runtime: in-network "
                  f"{geomean(r.get('vs_onnxruntime') for r in result['rows']):.2f}x, plain "
                  f"{geomean(r.get('vs_onnxruntime_plain') for r in result['rows']):.2f}x "
                  "(> 1: jitnn faster)"]
    if "openvino" in result["peers"]:
        lines += ["", "geomean speed vs OpenVINO: in-network "
                  f"{geomean(r.get('vs_openvino') for r in result['rows']):.2f}x "
                  "(> 1: jitnn faster)"]
    return lines


__all__ = ["DESCRIPTION", "UNIT", "PEERS", "measure", "render", "ratio"]
