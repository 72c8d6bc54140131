"""matmul GFLOP/s: jitnn against numpy (OpenBLAS), PyTorch and ONNX Runtime, same run.

    python benchmarks/matmul.py            # 1 and 2 threads, each in its own process
    python benchmarks/matmul.py --quick    # tiny shapes, a few seconds

A thin wrapper: the suite lives in the package (``jitnn/bench/matmul.py``) and
``jitnn bench matmul`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("matmul", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
