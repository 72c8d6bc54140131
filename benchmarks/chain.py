"""Op-by-op chains: jitnn's three policies against PyTorch, and the scheduler's overhead.

    python benchmarks/chain.py              # 1 and 2 threads, each in its own process
    python benchmarks/chain.py --quick      # tiny shapes, a few seconds
    python benchmarks/chain.py --threads 1 --json chain.json

The seed chain (3 x conv 3x3 64ch 56x56 + relu) and a ResNet-50 bottleneck
block, under the blocked, eager and plain policies, against PyTorch NCHW and
``to_mkldnn``; and the per-op overhead on tiny tensors. A thin wrapper: the
suite lives in the package (``jitnn/bench/chain.py``) and ``jitnn bench
chain`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("chain", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
