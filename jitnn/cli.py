"""The ``jitnn`` command line: ``jitnn info``."""

from __future__ import annotations

import argparse
import os
import platform
import sys


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _simd_level(features: dict) -> str:
    for name, flag in (("AVX-512", "avx512f"), ("AVX2 + FMA", "avx2"), ("AVX", "avx"),
                       ("SSE4.2", "sse4.2"), ("NEON", "neon")):
        if features.get(flag, False):
            if flag == "avx2" and not features.get("fma", False):
                return "AVX2"
            return name
    return "none detected"


def _human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


def info(_args: argparse.Namespace) -> int:
    import llvmlite
    import llvmlite.binding as llvm
    import numba
    import numpy as np

    import jitnn
    from jitnn.kernels import _config

    ctx = jitnn.default_context()
    features = llvm.get_host_cpu_features()
    llvm_version = ".".join(str(v) for v in llvm.llvm_version_info)
    cache = str(_config.CACHE_DIR) if _config.CACHE_DIR else "none (no writable directory)"
    rows = [
        ("jitnn", jitnn.__version__),
        ("CPU", f"{_cpu_model_name()} ({llvm.get_host_cpu_name()}), "
                f"{os.cpu_count()} logical cores"),
        ("SIMD", _simd_level(features)),
        ("block", f"{ctx.block} float32 channels (layout nChw{ctx.block}c)"),
        ("threads", f"{ctx.num_threads} (NUMBA_NUM_THREADS={numba.config.NUMBA_NUM_THREADS})"),
        ("threading layer", _config.threading_layer()),
        ("numba", f"{numba.__version__}, llvmlite {llvmlite.__version__}, LLVM {llvm_version}"),
        ("numpy", np.__version__),
        ("python", platform.python_version()),
        ("fastmath", ", ".join(sorted(_config.FASTMATH))
         + f"; SLP vectorize {'on' if numba.config.SLP_VECTORIZE else 'off'}"),
        ("kernel cache", cache),
        ("cache size", _human_bytes(_config.cache_size_bytes())),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if _config.CACHE_DIR is not None:
        print(f"\nClear the kernel cache with: rm -rf {_config.CACHE_DIR.parent}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jitnn", description="jitnn: CPU neural-network kernels on blocked layouts")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info_parser = commands.add_parser(
        "info", help="the machine, the chosen block and threads, numba and the kernel cache")
    info_parser.set_defaults(run=info)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
