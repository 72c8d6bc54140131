"""ResNet-50, MobileNetV2 and an Inception-style network with random weights,
exported to ONNX, and their timing on jitnn, ONNX Runtime and PyTorch.

The definitions and ``bench_model`` live in ``jitnn.bench.networks`` (so
``jitnn bench model`` works from an installed package); this script exports
the networks to the cache directory (``$JITNN_NETWORKS_DIR`` or
``~/.cache/jitnn/networks``; never the repository) and times them:

    python benchmarks/networks.py                    # export, print the paths
    python benchmarks/networks.py --bench --batch 1 --threads 1
    jitnn bench model                                # the same, as a bench suite
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jitnn.bench.networks import (NETWORKS, bench_model, build, cache_dir,  # noqa: E402,F401
                                  export, sidecar, variant_name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("networks", nargs="*", default=list(NETWORKS), choices=[*NETWORKS, []],
                        metavar="NAME", help=f"which ({', '.join(NETWORKS)}; default all)")
    parser.add_argument("--width", type=float, help="channel width multiplier")
    parser.add_argument("--size", type=int, help="input height and width")
    parser.add_argument("--bench", action="store_true", help="also time each model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    for name in args.networks:
        path = export(name, width=args.width, size=args.size)
        print(path)
        if args.bench:
            print(json.dumps(bench_model(path, args.batch, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
