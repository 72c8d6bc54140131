"""torch.compile(backend="jitnn") against eager PyTorch and torch.compile with inductor
(ResNet-50, MobileNetV2, batch 1).

    python benchmarks/torch_compile.py            # 1 and 2 threads, each in its own process
    python benchmarks/torch_compile.py --quick    # reduced networks at 64 px

A thin wrapper: the suite lives in the package (``jitnn/bench/torch_compile.py``)
and ``jitnn bench torch`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("torch", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
