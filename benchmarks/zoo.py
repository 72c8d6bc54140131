"""The model zoo (transformers, modern CNNs, segmentation nets; seeded random
weights) against ONNX Runtime, OpenVINO and PyTorch, with peak memory.

    python benchmarks/zoo.py                    # 1 and 2 threads, each in its own process
    python benchmarks/zoo.py --models resnet50,mobilenetv2 --memory
    python benchmarks/zoo.py --quick            # three small models, a few seconds

A thin wrapper: the suite lives in the package (``jitnn/bench/zoo_bench.py``) and
``jitnn bench zoo`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("zoo", __doc__, argv, models=True)


if __name__ == "__main__":
    sys.exit(main())
