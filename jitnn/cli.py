"""The ``jitnn`` command line: ``jitnn info``, ``jitnn bench``."""

from __future__ import annotations

import argparse
import os
import platform
import sys


def _cpu_model_name() -> str:
    from .bench.harness import cpu_model
    return cpu_model()


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
    from . import _memory
    import llvmlite
    import llvmlite.binding as llvm
    import numba
    import numpy as np

    import jitnn
    from jitnn import tuning
    from jitnn.kernels import _config

    ctx = jitnn.default_context()
    features = llvm.get_host_cpu_features()
    llvm_version = ".".join(str(v) for v in llvm.llvm_version_info)
    from .precompile import cache_status
    status = cache_status()
    cache = (status.directory + ("" if status.writable else " (read-only: used as it is)")
             if status.directory else "none (no writable directory)")
    if status.matches:
        fit = (f"{status.kernels} kernel files built for this CPU ({_config.TARGET_CPU}, "
               f"{_config.TARGET_SIMD}) and these numba settings")
    else:
        fit = "no kernels for this CPU and settings yet (`jitnn warmup` compiles them)"
    if status.others:
        fit += (f"; its root holds {len(status.others)} other configuration(s) (other CPUs, "
                "numba versions, settings or older kernel sources), not used here")
    rows = [
        ("jitnn", jitnn.__version__),
        ("CPU", f"{_cpu_model_name()} ({llvm.get_host_cpu_name()}), "
                f"{os.cpu_count()} logical cores"),
        ("SIMD", _simd_level(features)),
        ("target", f"{_config.TARGET_CPU} with {_config.TARGET_SIMD}: what numba compiles "
                   "for (NUMBA_CPU_NAME=generic: the architecture's baseline)"),
        ("block", f"{ctx.block} float32 channels (layout nChw{ctx.block}c)"),
        ("threads", f"{ctx.num_threads} ({ctx.num_threads_source}); numba's thread pool: "
                    f"{numba.config.NUMBA_NUM_THREADS}"),
        ("threading layer", _config.threading_layer()),
        ("allocator", _memory.status),
        ("numba", f"{numba.__version__}, llvmlite {llvmlite.__version__}, LLVM {llvm_version}"),
        ("numpy", np.__version__),
        ("python", platform.python_version()),
        ("fastmath", ", ".join(sorted(_config.FASTMATH))
         + f"; SLP vectorize {'on' if numba.config.SLP_VECTORIZE else 'off'}"),
        ("kernel cache", cache),
        ("cache size", _human_bytes(status.bytes)),
        ("cache contents", fit),
        ("conv tuning", tuning.status()),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if _config.CACHE_DIR is not None:
        print(f"\nClear the kernel cache with: rm -rf {_config.CACHE_DIR.parent}")
    return 0


def _thread_counts(values: list[str] | None) -> list[int] | None:
    """``--threads 1 --threads 2`` or ``--threads 1,2`` -> ``[1, 2]``."""
    if not values:
        return None
    counts = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part.isdigit() or int(part) < 1:
                raise SystemExit(f"jitnn bench: --threads expects positive integers, got {value!r}")
            if int(part) not in counts:
                counts.append(int(part))
    return counts


def bench(args: argparse.Namespace) -> int:
    import shlex

    from .bench import SUITES, harness

    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in harness.PEERS]
    if unknown:
        raise SystemExit(f"jitnn bench: unknown peer {', '.join(unknown)}; expected a comma "
                         f"list of {', '.join(harness.PEERS)}")
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    command = "jitnn " + shlex.join(args.argv)
    if args.path and args.suite != "model":
        raise SystemExit(f"jitnn bench: a model path goes with the model suite, not {args.suite}")
    batches = [int(b) for b in ",".join(args.batch or []).split(",") if b.strip()] or None
    return harness.bench(suites, _thread_counts(args.threads), peers, args.quick,
                         args.json, args.plot, command,
                         options={"path": args.path, "batches": batches,
                                  "models": [m for m in (args.models or "").split(",") if m],
                                  "memory": args.memory})


def _add_bench_parser(commands) -> None:
    from .bench import SUITES
    from .bench.harness import PEERS

    suite_help = "; ".join(f"{name}: {_suite_description(name)}" for name in SUITES)
    parser = commands.add_parser(
        "bench", help="measure jitnn against its peers and the sgemm peak, print markdown tables",
        description=f"Suites: {suite_help}. Each thread count runs in its own process "
                    "(a --quick run with one thread count runs in this one).")
    parser.add_argument("suite", choices=[*SUITES, "all"], help="which suite (all: every one)")
    parser.add_argument("path", nargs="?", metavar="MODEL.onnx",
                        help="model suite: the ONNX model to time (default: ResNet-50, "
                             "MobileNetV2 and an Inception-style network, random weights)")
    parser.add_argument("--batch", action="append", metavar="N",
                        help="model suite: batch sizes, repeatable or a comma list (default 1,8)")
    parser.add_argument("--threads", action="append", metavar="N",
                        help="thread counts, repeatable or a comma list (default: 1 and all cores)")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"comma list of peers to compare with (default {','.join(PEERS)}); "
                             "those not installed are skipped")
    parser.add_argument("--models", metavar="A,B",
                        help="zoo suite: a comma list of the zoo's models (default: all), any "
                             "timm:NAME / torchvision:NAME classifier at 224 px, or beyond "
                             "(25 such families the zoo lacks)")
    parser.add_argument("--memory", action="store_true",
                        help="zoo suite: also peak memory per model (a process per engine)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: runs in seconds")
    parser.add_argument("--json", metavar="FILE",
                        help="also write every row, the machine facts and the command as JSON")
    parser.add_argument("--plot", metavar="FILE", help="also draw a PNG (needs matplotlib)")
    parser.set_defaults(run=bench)


def demo(args: argparse.Namespace) -> int:
    """``jitnn demo``: the seed chain and a bottleneck under the three policies."""
    from . import demo as demo_module
    demo_module.run(quick=args.quick, threads=args.threads,
                    plot=None if args.no_plot else args.plot)
    return 0


def _add_demo_parser(commands) -> None:
    parser = commands.add_parser(
        "demo", help="what layout costs: op-by-op conv chains under the plain, eager and "
                     "blocked policies, with the blocked plan and a plot")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: runs in seconds")
    parser.add_argument("--plot", default="jitnn-demo.png", metavar="FILE",
                        help="where to draw the plot (default jitnn-demo.png; needs matplotlib)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    parser.set_defaults(run=demo)


def warmup(args: argparse.Namespace) -> int:
    """``jitnn warmup [MODEL.onnx ...]``: compile what the models (default:
    the demo and the common networks) need, in parallel, into the cache."""
    from .precompile import warmup as warm
    report = warm(args.models or None, _thread_counts(args.threads), workers=args.workers)
    print(report)
    return 1 if report.failed else 0


def _add_warmup_parser(commands) -> None:
    parser = commands.add_parser(
        "warmup", help="compile the kernels that ONNX models (default: the demo and the common "
                       "networks) need, in parallel worker processes, into the kernel cache")
    parser.add_argument("models", nargs="*", metavar="MODEL.onnx",
                        help="ONNX models (default: jitnn demo's workloads, ResNet-50 and "
                             "MobileNetV2 when their export is there or PyTorch can make it)")
    parser.add_argument("--threads", action="append", metavar="N",
                        help="thread counts to compile for, repeatable or a comma list "
                             "(default: the default context's; 1 compiles the serial kernels)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: one per core; JITNN_COMPILE_WORKERS)")
    parser.set_defaults(run=warmup)


def explain_model(args: argparse.Namespace) -> int:
    """``jitnn explain MODEL.onnx``: the plan of a model's outputs after running it."""
    from .onnx import explain_model as explain_onnx
    print(explain_onnx(args.model, batch=args.batch, threads=args.threads, policy=args.policy),
          end="")
    return 0


def _add_explain_parser(commands) -> None:
    parser = commands.add_parser(
        "explain", help="run an ONNX model on random inputs and print jitnn.explain of its "
                        "outputs: groups, layouts, reorders, peak memory, time per group")
    parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    parser.add_argument("--batch", type=int, default=1, help="the batch of a dynamic batch "
                                                            "dimension (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    parser.add_argument("--policy", default="blocked", help="blocked (default), plain or eager")
    parser.set_defaults(run=explain_model)


def list_ops(args: argparse.Namespace) -> int:
    """``jitnn ops``: the op table (docs/ops.md's), as markdown."""
    from . import ops as _ops  # noqa: F401 - registers every op
    from . import registry
    print(registry.markdown_table(), end="")
    return 0


def _suite_description(name: str) -> str:
    from .bench import load
    try:
        return load(name).DESCRIPTION
    except (ImportError, AttributeError) as error:  # a broken suite must not break --help
        return f"(cannot load: {error})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jitnn", description="jitnn: CPU neural-network kernels on blocked layouts")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info_parser = commands.add_parser(
        "info", help="the machine, the chosen block and threads, numba and the kernel cache")
    info_parser.set_defaults(run=info)
    _add_demo_parser(commands)
    _add_bench_parser(commands)
    _add_explain_parser(commands)
    _add_warmup_parser(commands)
    ops_parser = commands.add_parser(
        "ops", help="every op: its WebNN and ONNX names, data types, layouts and fusion "
                    "(docs/ops.md's table)")
    ops_parser.set_defaults(run=list_ops)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
