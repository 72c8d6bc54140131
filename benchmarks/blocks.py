"""conv2d speed against the channel block, and what padding small C costs.

    python benchmarks/blocks.py             # 1 and 2 threads, each in its own process
    python benchmarks/blocks.py --quick     # tiny shapes, a few seconds

A thin wrapper: the suite lives in the package (``jitnn/bench/blocks.py``) and
``jitnn bench blocks`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("blocks", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
