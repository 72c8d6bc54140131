"""Real models from ONNX: BERT, GPT-2, a Llama-style decoder, ViT, ConvNeXt,
EfficientNet-B0, MobileNetV3-Large, RegNetY, DenseNet, ShuffleNetV2, Swin
and DeepLabV3 (jitnn.bench.zoo: the transformers / timm / torchvision
definitions with seeded random weights, exported by torch.onnx.export at
opset 17 with dynamic batch and sequence axes).

The default run loads the reduced variants kept in tests/data/models/
(written by benchmarks/make_test_models.py, each with its inputs and ONNX
Runtime's outputs in a .npz, so neither torch nor ONNX Runtime is needed)
and compares jitnn with ONNX Runtime when it is installed, else with the
stored outputs. The full-size models (``slow``) are built and exported into
the networks cache at test time (torch, transformers, timm, onnxruntime).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (in the test extra: "
                    "pip install -e \".[test]\")")

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from jitnn.bench import zoo  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "models")
SMALL = sorted(name[:-5] for name in os.listdir(DATA) if name.endswith(".onnx"))
HAVE_ORT = importlib.util.find_spec("onnxruntime") is not None


def _stored(name: str) -> list[tuple[dict, dict]]:
    """The input sets of a small model and ONNX Runtime's outputs for them."""
    with np.load(os.path.join(DATA, f"{name}.npz")) as data:
        arrays = {key: data[key] for key in data.files}
    sets = []
    for i in range(len({key.split(".")[0] for key in arrays})):
        part = {kind: {key.split(".", 2)[2]: v for key, v in arrays.items()
                       if key.startswith(f"{i}.{kind}.")} for kind in ("in", "out")}
        sets.append((part["in"], part["out"]))
    return sets


def _onnxruntime(path: str, feed: dict) -> dict:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def _max_relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def _assert_matches(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    """rtol 1e-3, atol 1e-3 of the output's largest magnitude."""
    assert got.shape == expected.shape and got.dtype == expected.dtype, what
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * scale, err_msg=what)


def test_every_model_of_the_zoo_has_a_small_file():
    assert SMALL == sorted(zoo.MODELS)
    total = sum(os.path.getsize(os.path.join(DATA, f)) for f in os.listdir(DATA))
    assert total < 8 * 2 ** 20, f"tests/data/models holds {total / 2 ** 20:.1f} MB"


def test_any_timm_or_torchvision_classifier_is_named_by_its_library():
    """``timm:NAME`` and ``torchvision:NAME`` are full-size benchmark models
    (``jitnn bench zoo --models timm:hgnetv2_b0``) with their own files and
    fingerprints; other prefixes, empty names and small variants are refused."""
    assert zoo.bench_model("timm:hgnetv2_b0").__doc__ == "timm's hgnetv2_b0 at 224 px"
    assert zoo.bench_model("torchvision:mnasnet0_5").__doc__ == \
        "torchvision's mnasnet0_5 at 224 px"
    assert zoo.bench_model("resnet50") is zoo.BENCH_MODELS["resnet50"]
    for name in ("keras:resnet50", "timm:", "hgnetv2_b0"):
        assert zoo.bench_model(name) is None
        with pytest.raises(ValueError, match="timm or torchvision:NAME"):
            zoo.build(name)
    with pytest.raises(ValueError, match="small"):
        zoo.build("timm:hgnetv2_b0", small=True)
    assert zoo.fingerprint("timm:hgnetv2_b0") != zoo.fingerprint("timm:hgnetv2_b1")
    assert len(zoo.BEYOND) == 25 and all(zoo.bench_model(name) for name in zoo.BEYOND)
    from jitnn.bench import zoo_bench
    from jitnn.bench.harness import Run
    run = Run.__new__(Run)
    run.options, run.quick = {"models": ["bert", "beyond"]}, False
    assert zoo_bench._models(run) == ["bert", *zoo.BEYOND]


@pytest.mark.parametrize("name", SMALL)
def test_small_model_matches_onnxruntime(name):
    path = os.path.join(DATA, f"{name}.onnx")
    sets = _stored(name)
    model = jitnn.onnx.prepare(path, input_shapes={k: v.shape for k, v in sets[0][0].items()})
    assert model.jitnn_ops > 0 and not model.constant_outputs
    results = []
    for i, (feed, stored) in enumerate(sets):
        got = model.run(feed)
        expected = _onnxruntime(path, feed) if HAVE_ORT else stored
        assert sorted(got) == sorted(stored)
        for out in stored:
            _assert_matches(got[out], expected[out], f"{name}, input set {i}, {out}")
        results.append(got)
    if name in zoo.TEXT:
        # two token inputs through one converted graph: other ids, other padding
        assert len(sets) == 2
        assert not np.array_equal(sets[0][0]["attention_mask"], sets[1][0]["attention_mask"])
        assert not np.allclose(results[0]["last_hidden_state"], results[1]["last_hidden_state"])


def test_stored_outputs_are_onnxruntimes():
    """The .npz files hold what ONNX Runtime computes (not stale outputs)."""
    if not HAVE_ORT:
        pytest.skip("onnxruntime is not installed")
    for name in SMALL:
        for feed, stored in _stored(name):
            live = _onnxruntime(os.path.join(DATA, f"{name}.onnx"), feed)
            for out, array in stored.items():
                assert _max_relative_error(live[out], array) < 1e-5, name


@pytest.mark.parametrize("name", zoo.TEXT)
def test_padding_is_masked(name):
    """What the ids at padded positions are does not change the hidden states
    of the real tokens (the attention mask reaches every attention), through
    the graph from ``load`` with run-time int64 inputs."""
    feed, _ = _stored(name)[0]
    mask = feed["attention_mask"]
    assert (mask == 0).any()
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(os.path.join(DATA, f"{name}.onnx"), ctx,
                            input_shapes={k: v.shape for k, v in feed.items()})
    other = feed["input_ids"].copy()
    other[mask == 0] = (other[mask == 0] + 7) % 100
    outs = []
    for ids in (feed["input_ids"], other):
        out = np.empty(graph.outputs["last_hidden_state"], np.float32)
        ctx.compute(graph, {"input_ids": ids, "attention_mask": mask},
                    {"last_hidden_state": out})
        outs.append(out)
    real = mask == 1
    np.testing.assert_array_equal(outs[0][real], outs[1][real])
    assert not np.allclose(outs[0][~real], outs[1][~real])


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"building the models needs {', '.join(missing)} "
                    "(pip install -e \".[models]\")")


def _check_against_onnxruntime(name: str, path: str, feeds: list[dict]) -> None:
    model = jitnn.onnx.prepare(path, input_shapes={k: v.shape for k, v in feeds[0].items()})
    for i, feed in enumerate(feeds):
        expected = _onnxruntime(path, feed)
        got = model.run(feed)
        for out, array in expected.items():
            _assert_matches(got[out], array, f"{name}, input set {i}, {out}")


MODEL_LIBRARIES = ("torch", "transformers", "timm", "torchvision", "onnxruntime")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_full_model_matches_onnxruntime(name):
    """The full-size model, exported into the networks cache."""
    _need(*MODEL_LIBRARIES)
    _check_against_onnxruntime(name, zoo.export(name), zoo.inputs(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_dynamo_export_matches_onnxruntime(name):
    """The small model exported by torch's other exporter (torch.export,
    opset 18: other patterns for the same layers)."""
    _need(*MODEL_LIBRARIES, "onnxscript")
    _check_against_onnxruntime(name, zoo.export(name, small=True, dynamo=True),
                               zoo.inputs(name, small=True))
