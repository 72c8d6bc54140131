"""Write the small model files of the zoo to tests/data/models/.

    python benchmarks/make_test_models.py             # every model of jitnn.bench.zoo
    python benchmarks/make_test_models.py bert swin   # some of them

For each model of :data:`jitnn.bench.zoo.MODELS` this writes ``<name>.onnx``,
the reduced variant (``zoo.export(name, small=True)``: reduced width, depth
and resolution, seeded random weights, a few hundred KB), and ``<name>.npz``
with the inputs the test runs it on and ONNX Runtime's outputs for them:
``"<i>.in.<input name>"`` and ``"<i>.out.<output name>"`` for each input
set i (two token inputs for the text models, one image for the others), so
tests/test_onnx_zoo.py runs without torch, and without ONNX Runtime if it
is missing. ONNX Runtime's outputs are checked against the PyTorch model's
before they are written. Needs torch 2.13 (CPU), transformers, timm,
torchvision (``pip install -e ".[models]"``), onnx and onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from jitnn.bench import zoo  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "tests", "data", "models")


def write(name: str, out: str = OUT) -> tuple[str, float]:
    """Export ``name``'s small variant to ``out`` with its inputs and ONNX
    Runtime's outputs; returns the path and ORT's largest relative
    difference to PyTorch."""
    import onnxruntime as ort
    os.makedirs(out, exist_ok=True)
    built = zoo.build(name, small=True)
    path = os.path.join(out, f"{name}.onnx")
    if os.path.exists(path):
        os.remove(path)
    zoo.export(name, small=True, path=path)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    arrays, worst = {}, 0.0
    for i, feed in enumerate(zoo.inputs(name, small=True, built=built)):
        results = session.run(None, feed)
        reference = zoo.run_torch(built, feed)
        scale = float(np.abs(reference).max())
        difference = float(np.abs(results[0] - reference).max()) / scale
        if not difference < 1e-4:
            raise SystemExit(f"{name}: ONNX Runtime differs from PyTorch by {difference:.2e} "
                             "of the largest output: the export is wrong")
        worst = max(worst, difference)
        arrays.update({f"{i}.in.{k}": v for k, v in feed.items()})
        arrays.update({f"{i}.out.{k}": v for k, v in zip(names, results)})
    np.savez_compressed(os.path.join(out, f"{name}.npz"), **arrays)
    return path, worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"models (default all: {', '.join(zoo.MODELS)})")
    parser.add_argument("--out", default=OUT, help="the folder (default tests/data/models)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in zoo.MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; expected {', '.join(zoo.MODELS)}")
    total = 0
    for name in args.names or zoo.MODELS:
        path, difference = write(name, args.out)
        size = os.path.getsize(path) + os.path.getsize(path[:-5] + ".npz")
        total += size
        print(f"{name:18s} {size / 1024:7.0f} KB  ONNX Runtime vs PyTorch {difference:.1e}",
              flush=True)
    print(f"{'total':18s} {total / 1024:7.0f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
