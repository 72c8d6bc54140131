"""conv2d GFLOP/s: jitnn against PyTorch (oneDNN) and ONNX Runtime, same run.

    python benchmarks/conv2d.py            # 1 and 2 threads, each in its own process
    python benchmarks/conv2d.py --quick    # tiny shapes, a few seconds
    python benchmarks/conv2d.py --batches 1  # batch 1 only

A thin wrapper: the suite lives in the package (``jitnn/bench/conv2d.py``) and
``jitnn bench conv2d`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("conv2d", __doc__, argv, batches=True)


if __name__ == "__main__":
    sys.exit(main())
