"""Reorder throughput: jitnn's layout kernels against np.copyto and numpy.

    python benchmarks/reorder.py            # 1 and 2 threads, each in its own process
    python benchmarks/reorder.py --quick    # tiny shapes, a few seconds

A thin wrapper: the suite lives in the package (``jitnn/bench/reorder.py``) and
``jitnn bench reorder`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import sys

from jitnn.bench import harness


def main(argv=None):
    return harness.script_main("reorder", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
