"""Numba settings and the persistent kernel cache."""

import json
import os
import subprocess
import sys

import numba

from jitnn.kernels import _config


def test_codegen_settings():
    assert numba.config.SLP_VECTORIZE == 1
    assert "contract" in _config.FASTMATH and "reassoc" not in _config.FASTMATH
    assert _config.threading_layer() in ("omp", "tbb", "workqueue")


def test_avx512_hosts_get_the_tuning_and_others_keep_numbas_target():
    # without it LLVM 22 turns the matmul tiles into gathers and scatters on
    # AVX-512 (3 GFLOP/s against 80-130) and keeps them on 256-bit registers
    user_chose = any(os.environ.get(name) for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"))
    assert _config.AVX512_TUNED == (_config.HOST_AVX512 and not user_chose)
    if _config.AVX512_TUNED:
        assert numba.config.CPU_FEATURES.endswith("," + _config.AVX512_TUNING)
        assert "_avx512tuned" in _config.CACHE_DIR.name
    elif not user_chose:
        assert numba.config.CPU_FEATURES is None


def test_a_numba_function_made_before_jitnn_is_imported_gets_a_warning():
    code = """
import warnings, numba
@numba.njit
def f(x):
    return x
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from jitnn.kernels import _config
print(_config.AVX512_TUNED, any("cannot tune numba" in str(w.message) for w in caught))
"""
    result = _run(code)
    host_avx512 = _config.HOST_AVX512 and not any(
        os.environ.get(name) for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"))
    assert result.stdout.split() == ["False", str(host_avx512)]


def test_threading_layer_is_not_the_unsafe_fallback_here():
    # On a machine with libgomp (every CI image we use) numba must not have
    # silently fallen back to the slow, thread-unsafe workqueue layer.
    assert _config.threading_layer() in ("omp", "tbb")


def _run(code, **env):
    environment = {**os.environ, **env}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=environment, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


_PROBE = """
import json, warnings, numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from jitnn.kernels import _config, layout
x = np.ones((1, 3, 2, 2), np.float32); out = np.empty((1, 1, 2, 2, 8), np.float32)
layout.nchw_to_blocked(x, out)
# the jitted kernel behind the wrapper: its parallel compile, or its serial
# one on a one-core machine (kernels/_config.py, ThreadCountKernel)
kernel = layout._nchw_to_blocked
hits = sum(sum(k.stats.cache_hits.values()) for k in (kernel.parallel, kernel.serial))
print(json.dumps({"dir": str(_config.CACHE_DIR), "hits": hits,
                  "warnings": [str(w.message) for w in caught], "ok": bool(out.sum() == 12)}))
"""


def test_cache_survives_processes_in_a_tagged_directory(tmp_path):
    first = json.loads(_run(_PROBE, JITNN_CACHE_DIR=str(tmp_path)).stdout)
    second = json.loads(_run(_PROBE, JITNN_CACHE_DIR=str(tmp_path)).stdout)
    assert first["dir"] == second["dir"]
    assert first["dir"].startswith(str(tmp_path))
    tag = os.path.basename(first["dir"])
    assert f"numba-{numba.__version__}" in tag and "_slp1_" in tag and "_fm-" in tag
    assert first["hits"] == 0 and second["hits"] == 1
    assert any(name.endswith(".nbi") for _, _, files in os.walk(first["dir"]) for name in files)
    assert first["ok"] and second["ok"] and not first["warnings"]


def test_no_writable_cache_falls_back_with_one_warning(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = json.loads(_run(_PROBE, JITNN_CACHE_DIR=str(blocker / "cache")).stdout)
    assert result["dir"] == "None"
    assert result["ok"]
    assert len(result["warnings"]) == 1
    assert "no writable kernel cache directory" in result["warnings"][0]
    assert "JITNN_CACHE_DIR" in result["warnings"][0]
