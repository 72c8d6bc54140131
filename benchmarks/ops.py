"""Single ops between convolutions (reduce over H,W; layer norm over C; resample2d; pad)
against ONNX Runtime and PyTorch.

    python benchmarks/ops.py            # 1 and 2 threads, each in its own process
    python benchmarks/ops.py --quick    # tiny shapes, a few seconds

A thin wrapper: the suite lives in the package (``jitnn/bench/ops.py``) and
``jitnn bench ops`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("ops", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
