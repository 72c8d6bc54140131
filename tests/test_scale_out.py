"""docs/scale-out.md's examples, run as they are written: Dask with two
worker processes (default run), Ray Data in a local Ray cluster (slow).

Each example is the code block after a ``<!-- tested: NAME -->`` line; the
test swaps its model constants for tests/workers.py's small ONNX model (a
DenseNet on 3 x 64 x 64 images, 100 classes), runs it as ``__main__`` and
checks its logits against the same model run in this process."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

import jitnn.onnx
from tests import workers

DOC = Path(__file__).resolve().parent.parent / "docs" / "scale-out.md"


def _example(name: str) -> str:
    """The code block under ``<!-- tested: name -->``, with the small model."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- tested: {name} -->\n```python\n(.*?)\n```", text, re.DOTALL)
    assert found, f"docs/scale-out.md has no example tagged {name!r}"
    code = found.group(1)
    constants = re.compile(r'^MODEL, SIZE(.*) = "resnet50.onnx", 224(.*)$', re.MULTILINE)
    assert constants.search(code), f"the {name} example's first line of constants changed"
    return constants.sub(lambda m: f"MODEL, SIZE{m.group(1)} = {workers.MODEL!r}, 64"
                         + m.group(2).replace("1000", "100"), code)


def _run(name: str) -> dict:
    """The example run as ``__main__``; this process's environment restored
    after it (Dask's nanny writes OMP_NUM_THREADS=1 into it, which every later
    test's jitnn.Context() would follow)."""
    namespace = {"__name__": "__main__"}
    environment = dict(os.environ)
    try:
        exec(compile(_example(name), f"docs/scale-out.md ({name})", "exec"), namespace)
    finally:
        os.environ.clear()
        os.environ.update(environment)
    return namespace


def _expected(images: np.ndarray) -> np.ndarray:
    model = jitnn.onnx.prepare(workers.MODEL, batch=len(images))
    return model.run({"input": images})["logits"]


def test_the_dask_example_runs_on_two_worker_processes():
    pytest.importorskip("dask.distributed")
    done = _run("dask")
    expected = _expected(done["images"])
    assert done["logits"].shape == (64, 100)
    np.testing.assert_allclose(done["logits"], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(done["logits_too"], expected, rtol=1e-4, atol=1e-5)


def test_the_stored_model_is_what_the_examples_are_checked_with():
    """The small model itself matches ONNX Runtime's stored output."""
    image, logits = workers.model_case()
    np.testing.assert_allclose(_expected(image), logits, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_the_ray_example_runs_on_two_actors():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    try:
        done = _run("ray")
    finally:
        ray.shutdown()
    assert done["logits"].shape == (64, 100)
    np.testing.assert_allclose(done["logits"], _expected(done["images"]), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_the_scale_out_benchmark_runs_a_tiny_job(tmp_path):
    """benchmarks/scale_out.py on 4 images of the small model: every
    configuration runs and agrees with jitnn in the driver."""
    import json
    import subprocess
    import sys
    pytest.importorskip("dask.distributed")
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "scale_out.py"
    out = tmp_path / "scale.json"
    subprocess.run([sys.executable, str(script), "--quick", "--model", workers.MODEL,
                    "--json", str(out)], check=True, timeout=1800, capture_output=True)
    rows = json.loads(out.read_text())["rows"]
    layouts = {row["layout"] for row in rows}
    assert len(layouts) == 3 and {row["engine"] for row in rows} >= {"jitnn"}
    assert all(row["images_per_s"] > 0 and row["max_rel_err"] < 1e-4 for row in rows)
