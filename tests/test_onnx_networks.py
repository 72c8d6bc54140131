"""Real networks through the ONNX frontend against ONNX Runtime on the same
input: ResNet-50, MobileNetV2 and an Inception-style network with random
weights (jitnn.bench.networks, exported once to the networks cache). The
reduced-width variants run by default; the full networks are ``slow``."""

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (in the test extra: pip install -e \".[test]\")")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from jitnn import cli  # noqa: E402
from jitnn.bench import harness, networks  # noqa: E402

SMALL = [("resnet50", {"width": 0.25, "size": 64, "layers": (1, 1, 1, 1)}),
         ("mobilenetv2", {"width": 0.25, "size": 64}),
         ("inception", {"width": 0.25, "size": 96})]
FULL = [("resnet50", {}), ("mobilenetv2", {}), ("inception", {})]


def _onnxruntime(path, x):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})[0]


def _check(name, options, batch, threads=None):
    path = networks.export(name, **options)
    size = networks._options(name, options)["size"]
    x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    ctx = jitnn.Context(num_threads=threads)
    graph = jitnn.onnx.load(path, ctx, batch=batch)
    out = np.empty(graph.outputs["logits"], np.float32)
    ctx.compute(graph, {"input": x}, {"logits": out})
    expected = _onnxruntime(path, x)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3 * scale)
    return ctx, graph, x, out


@pytest.mark.parametrize("name,options", SMALL, ids=[n for n, _ in SMALL])
def test_reduced_network_matches_onnxruntime(name, options):
    ctx, graph, x, out = _check(name, options, batch=2)
    # a second dispatch reuses the packed filters and gives the same numbers
    packs = ctx.stats.filter_packs
    again = ctx.dispatch(graph, {"input": x})["logits"].numpy()
    assert ctx.stats.filter_packs == packs
    np.testing.assert_array_equal(again, out)


@pytest.mark.slow
@pytest.mark.parametrize("name,options", FULL, ids=[n for n, _ in FULL])
@pytest.mark.parametrize("batch", [1, 2])
def test_full_network_matches_onnxruntime(name, options, batch):
    _check(name, options, batch)


def test_explain_command_prints_the_plan(capsys):
    name, options = SMALL[1]
    path = networks.export(name, **options)
    assert cli.main(["explain", path, "--threads", "1"]) == 0
    out = capsys.readouterr().out
    for text in ("conv2d + clamp", "conv2d + add", "peak memory", "reorder tax", "nChw"):
        assert text in out, text


def test_bench_model_quick(capsys):
    name, options = SMALL[0]
    path = networks.export(name, **options)
    assert cli.main(["bench", "model", path, "--quick", "--threads", "1", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    openvino = " openvino ms |" if harness.installed("openvino") else ""
    assert f"| model | batch | jitnn ms | onnxruntime ms |{openvino} torch ms |" in out
    row = next(line for line in out.splitlines() if line.startswith("| resnet50"))
    assert "| 2 |" in row
    assert "geomean speed vs ONNX Runtime" in out


def test_bench_model_function_reports_every_column():
    name, options = SMALL[0]
    row = networks.bench_model(networks.export(name, **options), batch=1, threads=1,
                               min_time=0.01, min_reps=2, warmup=1)
    assert row["jitnn_ms"] > 0 and row["onnxruntime_ms"] > 0 and row["torch_ms"] > 0
    assert row["max_rel_err"] < 1e-3
    if harness.installed("openvino"):          # float32, not its bfloat16 default
        assert row["openvino_ms"] > 0 and row["openvino_max_rel_err"] < 1e-4
