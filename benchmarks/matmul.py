"""matmul GFLOP/s: jitnn against numpy (OpenBLAS), PyTorch and ONNX Runtime, same run.

    python benchmarks/matmul.py            # 1 and 2 threads, each in its own process
    python benchmarks/matmul.py --quick    # tiny shapes, a few seconds

A thin wrapper: the suite lives in the package (``jitnn/bench/matmul.py``) and
``jitnn bench matmul`` runs the same thing; see there for what each column means.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from jitnn.bench import harness


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    parser.add_argument("--quick", action="store_true", help="tiny shapes only")
    parser.add_argument("--peers", default=",".join(harness.PEERS),
                        help="comma list of peers (torch, onnxruntime, numpy)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--plot", help="also draw a PNG (needs matplotlib)")
    args = parser.parse_args(argv)
    return harness.bench(["matmul"], [int(t) for t in args.threads.split(",")],
                         [p for p in args.peers.split(",") if p], args.quick, args.json,
                         args.plot, command=shlex.join(["python", "benchmarks/matmul.py", *argv]),
                         options=None)


if __name__ == "__main__":
    sys.exit(main())
