"""``torch.compile(backend="jitnn")`` against eager PyTorch and ``torch.compile`` with inductor.

ResNet-50 and MobileNetV2 (the PyTorch definitions of
:mod:`jitnn.bench.networks`, seeded random weights; reduced-width variants
at 64 px with ``--quick``), batch 1, under ``torch.inference_mode`` and
``torch.set_num_threads`` = the thread count. Per row:

* eager ms: the module as it is;
* jitnn ms: ``torch.compile(model, backend=jitnn_backend, options={"num_threads":
  threads})``; "jitnn first s" is its first call (tracing to aten ops,
  packing the filters, compiling kernels not in the kernel cache), "on jitnn"
  how many of the graph's aten ops ran on jitnn;
* inductor ms: ``torch.compile(model)`` with PyTorch's default backend, which
  compiles C++ for the CPU: without a C compiler (or when it fails) the row
  says "unavailable" and why;
* x eager, x inductor: the peer's time over jitnn's (> 1: jitnn faster);
  max rel err: the largest |jitnn - eager| over the largest |eager|.
"""

from __future__ import annotations

import time

from .harness import Column, Run, geomean, markdown_table, ratio

DESCRIPTION = ("torch.compile(backend='jitnn') vs eager PyTorch and torch.compile with "
               "inductor (ResNet-50, MobileNetV2, batch 1)")
UNIT = "ms"
PEERS = ("torch",)

FULL = (("resnet50", {}), ("mobilenetv2", {}))
QUICK = (("resnet50", {"width": 0.25, "size": 64, "layers": (1, 1, 1, 1)}),
         ("mobilenetv2", {"width": 0.25, "size": 64}))


def _compiled_time(run: Run, compiled, x) -> tuple[float, float]:
    """Seconds of the first call (the compile), and the median ms after it."""
    started = time.perf_counter()
    compiled(x)
    first = time.perf_counter() - started
    return first, 1e3 * run.median(lambda: compiled(x))[0]


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:120] if text else ''}"


def measure(run: Run) -> dict:
    if "torch" not in run.peers:
        run.progress("skipped: the suite compares PyTorch backends (pip install 'jitnn[bench]')")
        return {"rows": [], "skipped": "torch not installed or not asked for"}
    import torch

    from ..torch_backend import jitnn_backend
    from . import networks

    rows = []
    for name, options in (QUICK if run.quick else FULL):
        variant = networks.variant_name(name, **options)
        model, size = networks.build(name, **options)
        x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
        row: dict = {"model": variant, "batch": 1, "threads": run.threads}
        with torch.inference_mode():
            run.progress(f"{variant}: eager")
            want = model(x)
            row["eager_ms"] = 1e3 * run.median(lambda: model(x))[0]

            run.progress(f"{variant}: jitnn")
            torch._dynamo.reset()
            graphs = []

            def backend(gm, example_inputs):
                graphs.append(jitnn_backend(gm, example_inputs,
                                            options={"num_threads": run.threads}))
                return graphs[-1]
            fast = torch.compile(model, backend=backend)
            row["jitnn_first_s"], row["jitnn_ms"] = _compiled_time(run, fast, x)
            got = fast(x)
            row["max_rel_err"] = float((got - want).abs().max() / want.abs().max())
            build = getattr(graphs[0], "last_build", None) if graphs else None
            row["on_jitnn"] = f"{build.jitnn_ops} of {build.aten_ops}" if build else "none"

            run.progress(f"{variant}: inductor")
            torch._dynamo.reset()
            try:
                row["inductor_first_s"], row["inductor_ms"] = _compiled_time(
                    run, torch.compile(model), x)
                row["inductor"] = "ok"
            except Exception as error:      # noqa: BLE001 - no C compiler, or it failed
                row["inductor_ms"] = None
                row["inductor"] = f"unavailable ({_one_line(error)})"
                run.progress(f"inductor {row['inductor']}")
            torch._dynamo.reset()
        row["vs_eager"] = ratio(row["eager_ms"], row["jitnn_ms"])
        row["vs_inductor"] = ratio(row["inductor_ms"], row["jitnn_ms"])
        rows.append(row)
    return {"rows": rows}


def row_label(row: dict) -> str:
    return f"{row['model']} b{row['batch']}"


PLOT_COLUMNS = [("jitnn", "jitnn_ms"), ("eager", "eager_ms", "torch"),
                ("inductor", "inductor_ms", "torch")]

COLUMNS = [
    Column("model", lambda r: r["model"], numeric=False),
    Column("batch", lambda r: r["batch"], "d"),
    Column("jitnn ms", lambda r: r["jitnn_ms"], ".2f"),
    Column("eager ms", lambda r: r["eager_ms"], ".2f"),
    Column("inductor ms", lambda r: r["inductor_ms"] if r["inductor_ms"] is not None
           else "unavailable", ".2f"),
    Column("x eager", lambda r: r["vs_eager"], ".2f"),
    Column("x inductor", lambda r: r["vs_inductor"], ".2f"),
    Column("max rel err", lambda r: r["max_rel_err"], ".1e"),
    Column("jitnn first s", lambda r: r["jitnn_first_s"], ".2f"),
    Column("inductor first s", lambda r: r.get("inductor_first_s"), ".1f"),
    Column("on jitnn", lambda r: r["on_jitnn"], numeric=False),
]


def render(result: dict) -> list[str]:
    if not result["rows"]:
        return [f"(nothing measured: {result.get('skipped', 'no rows')})"]
    lines = markdown_table(COLUMNS, result["rows"], result["peers"])
    lines += ["", f"geomean speed vs eager PyTorch: "
                  f"{geomean(r['vs_eager'] for r in result['rows']):.2f}x (> 1: jitnn faster)"]
    if any(r["vs_inductor"] for r in result["rows"]):
        lines.append(f"geomean speed vs inductor: "
                     f"{geomean(r['vs_inductor'] for r in result['rows']):.2f}x")
    lines += [f"inductor on {r['model']}: {r['inductor']}" for r in result["rows"]
              if r["inductor"] != "ok"]
    return lines
