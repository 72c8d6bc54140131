"""torch.compile(backend="jitnn") against eager PyTorch and torch.compile with inductor
(ResNet-50, MobileNetV2, batch 1).

    python benchmarks/torch.py            # 1 and 2 threads, each in its own process
    python benchmarks/torch.py --quick    # reduced networks at 64 px

A thin wrapper: the suite lives in the package (``jitnn/bench/torch_compile.py``)
and ``jitnn bench torch`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import os
import sys

# This file is named after its suite; run as a script, its folder comes first
# on sys.path and ``import torch`` would find it instead of PyTorch.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from jitnn.bench import harness  # noqa: E402


def main(argv=None):
    return harness.script_main("torch", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
