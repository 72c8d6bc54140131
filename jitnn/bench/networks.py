"""Real networks with random weights, exported to ONNX: ResNet-50, MobileNetV2
and an Inception-v3-style network (PyTorch definitions, exported with
``torch.onnx.export``, batch a dynamic dimension), plus :func:`bench_model`,
which times an ONNX model on jitnn, ONNX Runtime, OpenVINO and (for these
networks) PyTorch.

    path = export("resnet50")                        # cached .onnx (+ a .json sidecar)
    path = export("mobilenetv2", width=0.25, size=64)  # a reduced variant (fast tests)
    bench_model(path, batch=1, threads=1)            # {"jitnn_ms": ..., "onnxruntime_ms": ...}

The files go to ``$JITNN_NETWORKS_DIR`` or ``~/.cache/jitnn/networks`` (never
the repository). Weights are drawn from a seeded generator (He-normal convs,
random batch-norm statistics, folded into the convs by the exporter as in a
deployed model), so a variant's weights are the same in every process.
``benchmarks/networks.py`` is the command-line wrapper.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

#: name -> the builder's default options
NETWORKS = {
    "resnet50": {"width": 1.0, "size": 224, "layers": (3, 4, 6, 3)},
    "mobilenetv2": {"width": 1.0, "size": 224},
    "inception": {"width": 1.0, "size": 224},
}


def cache_dir() -> str:
    root = os.environ.get("JITNN_NETWORKS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "jitnn", "networks")
    os.makedirs(root, exist_ok=True)
    return root


def _channels(c: int, width: float) -> int:
    return max(8, int(round(c * width / 8)) * 8)


# --- the PyTorch definitions ------------------------------------------------------

def _torch_modules():
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, stride=1, padding=None, groups=1, act="relu"):
        if padding is None:
            padding = (k // 2) if isinstance(k, int) else tuple(v // 2 for v in k)
        layers = [nn.Conv2d(cin, cout, k, stride, padding, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act == "relu":
            layers.append(nn.ReLU(inplace=True))
        elif act == "relu6":
            layers.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*layers)

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, stride):
            super().__init__()
            cout = mid * 4
            self.body = nn.Sequential(conv_bn(cin, mid, 1), conv_bn(mid, mid, 3, stride),
                                      conv_bn(mid, cout, 1, act=None))
            self.down = None if stride == 1 and cin == cout else \
                conv_bn(cin, cout, 1, stride, padding=0, act=None)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            return self.relu(self.body(x) + identity)

    class ResNet50(nn.Module):
        def __init__(self, width=1.0, layers=(3, 4, 6, 3), classes=1000):
            super().__init__()
            c = _channels(64, width)
            self.stem = nn.Sequential(conv_bn(3, c, 7, 2, 3), nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], c
            for stage, count in enumerate(layers):
                mid = _channels(64 * 2 ** stage, width)
                for i in range(count):
                    blocks.append(Bottleneck(cin, mid, 2 if i == 0 and stage > 0 else 1))
                    cin = mid * 4
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.pool(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(x, 1))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act="relu6")]
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act="relu6"),
                       conv_bn(hidden, cout, 1, act=None)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

        def __init__(self, width=1.0, classes=1000):
            super().__init__()
            cin = _channels(32, width)
            last = _channels(1280, max(1.0, width))
            layers = [conv_bn(3, cin, 3, 2, act="relu6")]
            for t, c, n, s in self.SETTINGS:
                cout = _channels(c, width)
                for i in range(n):
                    layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                    cin = cout
            layers.append(conv_bn(cin, last, 1, act="relu6"))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(torch.flatten(x, 1))

    class InceptionA(nn.Module):
        def __init__(self, cin, pool, w):
            super().__init__()
            c = lambda v: _channels(v, w)  # noqa: E731
            self.b1 = conv_bn(cin, c(64), 1)
            self.b5 = nn.Sequential(conv_bn(cin, c(48), 1), conv_bn(c(48), c(64), 5))
            self.b3 = nn.Sequential(conv_bn(cin, c(64), 1), conv_bn(c(64), c(96), 3),
                                    conv_bn(c(96), c(96), 3))
            self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), conv_bn(cin, c(pool), 1))
            self.out = c(64) + c(64) + c(96) + c(pool)

        def forward(self, x):
            return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(x)], 1)

    class InceptionB(nn.Module):
        def __init__(self, cin, w):
            super().__init__()
            c = lambda v: _channels(v, w)  # noqa: E731
            self.b3 = conv_bn(cin, c(384), 3, 2, 0)
            self.bd = nn.Sequential(conv_bn(cin, c(64), 1), conv_bn(c(64), c(96), 3),
                                    conv_bn(c(96), c(96), 3, 2, 0))
            self.bp = nn.MaxPool2d(3, 2)
            self.out = c(384) + c(96) + cin

        def forward(self, x):
            return torch.cat([self.b3(x), self.bd(x), self.bp(x)], 1)

    class InceptionC(nn.Module):
        def __init__(self, cin, c7, w):
            super().__init__()
            c = lambda v: _channels(v, w)  # noqa: E731
            self.b1 = conv_bn(cin, c(192), 1)
            self.b7 = nn.Sequential(conv_bn(cin, c(c7), 1), conv_bn(c(c7), c(c7), (1, 7)),
                                    conv_bn(c(c7), c(192), (7, 1)))
            self.bd = nn.Sequential(conv_bn(cin, c(c7), 1), conv_bn(c(c7), c(c7), (7, 1)),
                                    conv_bn(c(c7), c(c7), (1, 7)), conv_bn(c(c7), c(c7), (7, 1)),
                                    conv_bn(c(c7), c(192), (1, 7)))
            self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), conv_bn(cin, c(192), 1))
            self.out = 4 * c(192)

        def forward(self, x):
            return torch.cat([self.b1(x), self.b7(x), self.bd(x), self.bp(x)], 1)

    class Inception(nn.Module):
        """Inception-v3 in miniature: its stem, two A blocks, the B reduction,
        two C blocks (factorized 1x7 / 7x1 convs), global pool, dropout, FC."""

        def __init__(self, width=1.0, classes=1000):
            super().__init__()
            c = lambda v: _channels(v, width)  # noqa: E731
            self.stem = nn.Sequential(
                conv_bn(3, c(32), 3, 2, 0), conv_bn(c(32), c(32), 3, 1, 0),
                conv_bn(c(32), c(64), 3), nn.MaxPool2d(3, 2),
                conv_bn(c(64), c(80), 1), conv_bn(c(80), c(192), 3, 1, 0), nn.MaxPool2d(3, 2))
            a1 = InceptionA(c(192), 32, width)
            a2 = InceptionA(a1.out, 64, width)
            b = InceptionB(a2.out, width)
            c1 = InceptionC(b.out, 128, width)
            c2 = InceptionC(c1.out, 160, width)
            self.blocks = nn.Sequential(a1, a2, b, c1, c2)
            self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Linear(c2.out, classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1)
            return self.classifier(torch.flatten(x, 1))

    return {"resnet50": ResNet50, "mobilenetv2": MobileNetV2, "inception": Inception}


def _options(name: str, options: dict) -> dict:
    if name not in NETWORKS:
        raise ValueError(f"unknown network {name!r}, expected one of {', '.join(NETWORKS)}")
    merged = dict(NETWORKS[name])
    unknown = set(options) - set(merged)
    if unknown:
        raise ValueError(f"{name}: unknown option(s) {sorted(unknown)}")
    merged.update({k: v for k, v in options.items() if v is not None})
    if "layers" in merged:
        merged["layers"] = tuple(merged["layers"])
    return merged


def build(name: str, **options):
    """The PyTorch module (eval mode, seeded random weights) and its input
    size: ``build("resnet50", width=0.25, size=64)``."""
    import torch
    from torch import nn
    opts = _options(name, options)
    torch.manual_seed(0)
    kwargs = {k: v for k, v in opts.items() if k != "size"}
    model = _torch_modules()[name](**kwargs)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                fan_in = module.in_channels // module.groups * module.kernel_size[0] * \
                    module.kernel_size[1]
                module.weight.normal_(0, (2.0 / fan_in) ** 0.5, generator=generator)
            elif isinstance(module, nn.BatchNorm2d):
                c = module.num_features
                module.weight.uniform_(0.5, 1.0, generator=generator)
                module.bias.normal_(0, 0.1, generator=generator)
                module.running_mean.normal_(0, 0.1, generator=generator)
                module.running_var.uniform_(0.5, 1.5, generator=generator)
                assert module.weight.shape == (c,)
            elif isinstance(module, nn.Linear):
                module.weight.normal_(0, (1.0 / module.in_features) ** 0.5, generator=generator)
                module.bias.normal_(0, 0.1, generator=generator)
    return model.eval(), opts["size"]


def variant_name(name: str, **options) -> str:
    opts = _options(name, options)
    default = NETWORKS[name]
    parts = [name] + [f"{k}{'x'.join(map(str, v)) if isinstance(v, tuple) else v}"
                      for k, v in sorted(opts.items()) if v != default.get(k)]
    return "-".join(parts)


def export(name: str, *, opset: int = 17, force: bool = False, **options) -> str:
    """Export network ``name`` (options: ``width``, ``size``, ``layers`` for
    resnet50) to ``cache_dir()/<variant>.onnx`` once; returns the path. A
    ``.json`` sidecar records the network and options (so :func:`bench_model`
    can rebuild the PyTorch model for the torch column)."""
    import warnings
    opts = _options(name, options)
    path = os.path.join(cache_dir(), variant_name(name, **options) + f"-opset{opset}.onnx")
    if os.path.exists(path) and not force:
        return path
    import torch
    model, size = build(name, **options)
    tmp = path + f".tmp{os.getpid()}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 3, size, size),), tmp, dynamo=False,
                          input_names=["input"], output_names=["logits"], opset_version=opset,
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    os.replace(tmp, path)
    with open(path[:-5] + ".json", "w") as sidecar:
        json.dump({"network": name, "options": {k: list(v) if isinstance(v, tuple) else v
                                                for k, v in opts.items()}}, sidecar)
    return path


def sidecar(path: str) -> dict | None:
    """The network and options recorded next to an exported model, or None."""
    try:
        with open(os.fspath(path)[:-5] + ".json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# --- timing ------------------------------------------------------------------------

def _input_of(path: str, batch: int):
    import numpy as np
    import onnx
    model = onnx.load(path)
    initializers = {t.name for t in model.graph.initializer}
    inputs = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else batch
                for d in info.type.tensor_type.shape.dim]
        inputs[info.name] = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    return model, inputs


def _max_rel_err(ours: dict, theirs: dict) -> float:
    """The largest |ours - theirs| over the largest |theirs|, over the outputs."""
    import numpy as np
    return max(float(np.abs(ours[n] - theirs[n]).max() / max(np.abs(theirs[n]).max(), 1e-30))
               for n in ours)


def bench_model(path: str, batch: int = 1, threads: int = 1, *,
                peers=("onnxruntime", "openvino", "torch"),
                min_time: float = 1.0, min_reps: int = 5, warmup: int = 2,
                check: bool = True) -> dict[str, Any]:
    """Median ms per inference of the ONNX model at ``path`` with ``batch`` and
    ``threads``: jitnn (``jitnn.onnx``, graph built once, inputs copied in and
    outputs read back every call), ONNX Runtime (all graph optimizations,
    ``intra_op_num_threads=threads``, its default spinning), OpenVINO (its
    CPU plugin: ``threads``, latency hint, float32;
    :func:`.harness.openvino_runner`) and PyTorch (when the model has a
    sidecar naming one of :data:`NETWORKS`; ``torch.set_num_threads``).

    The engines take turns: ``min_reps`` rounds, in each every engine in a
    shuffled order runs a burst of ``min_time / min_reps`` seconds after a
    pause of 0.2 s (when ``min_time >= 0.3``: a pool still spinning from the
    engine before would take a core; :func:`.harness.paired_seconds`). An
    engine's time is the median over the rounds of each burst's median call, so a slow spell of a
    shared host falls on every engine alike (timed one after the other, 1 s
    each, MobileNetV2 on 2 threads came out 3.9 or 6.5 ms for jitnn from one
    process to the next, with every engine's time moving the same way).
    With ``check``, jitnn's outputs are compared with ONNX Runtime's
    (``max_rel_err``: max |diff| / max |onnxruntime|) and OpenVINO's
    (``openvino_max_rel_err``)."""
    import numpy as np

    import jitnn
    import jitnn.onnx

    from .harness import paired_seconds

    model, inputs = _input_of(os.fspath(path), batch)
    row: dict[str, Any] = {"model": os.path.basename(os.fspath(path)), "batch": batch,
                           "threads": threads, "jitnn_ms": None, "onnxruntime_ms": None,
                           "openvino_ms": None, "torch_ms": None}
    ctx = jitnn.Context(num_threads=threads)
    prepared = jitnn.onnx.prepare(model, ctx, input_shapes={k: v.shape for k, v in inputs.items()})
    names = list(prepared.graph.outputs)
    outs = {name: np.empty(shape, np.float32) for name, shape in prepared.graph.outputs.items()}

    def run_jitnn():
        ctx.compute(prepared.graph, inputs, outs)
    started = time.perf_counter()
    run_jitnn()
    row["jitnn_first_s"] = time.perf_counter() - started
    ours = {name: outs[name].copy() for name in names}
    engines: dict[str, Callable[[], object]] = {"jitnn": run_jitnn}

    if "onnxruntime" in peers:
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        engines["onnxruntime"] = lambda: session.run(None, inputs)
        if check:
            theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
            row["max_rel_err"] = _max_rel_err(ours, theirs)
    if "openvino" in peers:
        from .harness import openvino_runner
        openvino_run = openvino_runner(model, threads)
        engines["openvino"] = lambda: openvino_run(inputs)
        if check:
            # OpenVINO keeps the graph's output order and names
            theirs = dict(zip([o.name for o in model.graph.output], openvino_run(inputs)))
            row["openvino_max_rel_err"] = _max_rel_err(ours, theirs)
    info = sidecar(os.fspath(path))
    if "torch" in peers and info is not None and info.get("network") in NETWORKS:
        import torch
        torch.set_num_threads(threads)
        net, _ = build(info["network"], **info["options"])
        x = torch.from_numpy(next(iter(inputs.values())))

        def run_torch():
            with torch.inference_mode():
                net(x)
        engines["torch"] = run_torch
    rounds = max(1, min_reps)
    seconds = paired_seconds(engines, rounds=rounds, burst=min_time / rounds, warmup=warmup,
                             pause=0.2 if min_time >= 0.3 else 0.0, median=True)
    for engine, per_round in seconds.items():
        row[f"{engine}_ms"] = 1e3 * float(np.median(per_round))
    for peer in ("onnxruntime", "openvino", "torch"):
        if row[f"{peer}_ms"]:
            # speed relative to the peer: > 1 means jitnn is faster
            row[f"vs_{peer}"] = row[f"{peer}_ms"] / row["jitnn_ms"]
    return row
