"""The kernel cache survives damaged files and serves a read-only install
(kernels/_config.py: _KernelCache and _find_cache_dir)."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Two layout kernels (quick to compile), each called directly, so each loads
# its own cache entry: ``layout._nchw_to_blocked-*`` and ``layout._blocked_to_nchw-*``
# (their parallel compile, or the serial one on one thread; the task ranges
# they call are standalone kernels with entries of their own). PRELUDE runs
# first (the read-only simulation below).
_PROBE = """
import json, warnings, numpy as np
PRELUDE
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from jitnn.kernels import _config, layout
    x = np.arange(24, dtype=np.float32).reshape(1, 3, 2, 4)
    blocked = np.empty((1, 1, 2, 4, 8), np.float32)
    layout.nchw_to_blocked(x, blocked)
    back = np.empty_like(x)
    layout.blocked_to_nchw(blocked, back)
compiles = [d for k in (layout._nchw_to_blocked, layout._blocked_to_nchw)
            for d in (k.parallel, k.serial)]
print(json.dumps({
    "dir": str(_config.CACHE_DIR), "writable": getattr(_config, "CACHE_WRITABLE", None),
    "hits": sum(sum(d.stats.cache_hits.values()) for d in compiles),
    "misses": sum(sum(d.stats.cache_misses.values()) for d in compiles),
    "warnings": [str(w.message) for w in caught], "ok": bool((back == x).all())}))
"""

# Root writes through permission bits, so there the read-only run makes the
# directory look read-only to the test jitnn and numba use (a temporary file
# in it) by failing that call; the file listing then shows nothing is written.
_SIMULATE_READ_ONLY = """
import tempfile
_temporary_file = tempfile.TemporaryFile
def _read_only(*args, dir=None, **kwargs):
    if dir is not None and str(dir).startswith(ROOT):
        raise PermissionError(13, "read-only (simulated)", str(dir))
    return _temporary_file(*args, dir=dir, **kwargs)
tempfile.TemporaryFile = _read_only
"""


def _probe(cache_root: Path, prelude: str = "") -> dict:
    code = _PROBE.replace("PRELUDE", prelude)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "JITNN_CACHE_DIR": str(cache_root)},
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def populated(tmp_path_factory) -> Path:
    """A cache root that holds the probe's kernels (one cold run)."""
    root = tmp_path_factory.mktemp("populated")
    first = _probe(root)
    assert first["ok"] and first["writable"] is not False and not first["warnings"]
    return root


def _copy(populated: Path, tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    shutil.copytree(populated, root)
    return root


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def test_a_damaged_entry_is_dropped_and_compiled_again_with_one_warning(populated, tmp_path):
    root = _copy(populated, tmp_path)
    [index] = root.rglob("layout._nchw_to_blocked-*.nbi")
    [data] = root.rglob("layout._blocked_to_nchw-*.nbc")
    for damaged in (index, data):
        with open(damaged, "r+b") as f:
            f.truncate(damaged.stat().st_size // 2)

    repaired = _probe(root)
    assert repaired["ok"] and repaired["misses"] == 2
    [warning] = repaired["warnings"]
    assert "damaged kernel-cache file" in warning
    assert os.path.basename(index) in warning or os.path.basename(data) in warning

    # the recompiled kernels replaced both files
    after = _probe(root)
    assert after["ok"] and after["hits"] == 2 and after["misses"] == 0
    assert not after["warnings"]


def test_a_read_only_populated_cache_is_used(populated, tmp_path):
    root = _copy(populated, tmp_path)
    before = _files(root)
    paths = [root, *root.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        [tagged] = [p for p in root.iterdir() if p.is_dir()]
        try:
            tempfile.TemporaryFile(dir=tagged).close()
            prelude = _SIMULATE_READ_ONLY.replace("ROOT", repr(str(root)))   # root
        except OSError:
            prelude = ""
        result = _probe(root, prelude)
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)

    assert result["ok"]
    assert result["dir"] == str(tagged) and result["writable"] is False
    assert result["hits"] == 2 and result["misses"] == 0 and not result["warnings"]
    assert _files(root) == before


def test_a_cached_caller_missing_a_standalone_kernel_compiles_again(tmp_path):
    """A cache entry whose code calls a standalone kernel (kernels/_linking.py)
    that its entry does not list (written here on purpose): loading it would
    leave the call unresolved (LLVM aborts the process), so the entry is
    refused and the caller compiled again, with the right answer."""
    broken = "from jitnn.kernels import _linking\n_linking.dependencies = lambda library: []\n"
    first = _probe(tmp_path, broken)
    assert first["ok"] and first["misses"] == 2
    second = _probe(tmp_path)
    assert second["ok"] and second["misses"] == 2 and not second["warnings"]
    third = _probe(tmp_path)                        # the entries saved again are whole
    assert third["ok"] and third["hits"] == 2 and third["misses"] == 0


def test_entries_are_stamped_with_the_sources_they_import():
    from jitnn.kernels import _config
    kernels = Path(_config.__file__).resolve().parent
    direct = kernels / "conv2d" / "direct.py"
    imported = _config._kernel_imports(direct)
    for name in ("_config.py", "_linking.py", "epilogue.py", "conv2d/register_tile.py",
                 "conv2d/geometry.py"):
        assert kernels / name in imported or any(
            kernels / name in _config._kernel_imports(p) for p in imported), name
    assert kernels / "attention.py" not in imported
    # an edit of attention.py changes attention's stamp, not the conv's
    assert _config.source_stamp(direct) != _config.source_stamp(kernels / "attention.py")
    stamp = _config.source_stamp(direct)
    _config._stamps.pop(direct, None)
    _config._sources[kernels / "attention.py"] = b"# edited\n"
    try:
        assert _config.source_stamp(direct) == stamp
        _config._stamps.pop(kernels / "attention.py", None)
        assert _config.source_stamp(kernels / "attention.py") != stamp
    finally:
        _config._sources.pop(kernels / "attention.py", None)
        _config._stamps.pop(kernels / "attention.py", None)


_TOGETHER = """
import os, time
open(os.path.join(MEET, str(os.getpid())), "w").close()
while len(os.listdir(MEET)) < 2:     # both processes start compiling together
    time.sleep(0.01)
"""


def test_two_cold_processes_compile_each_kernel_once(tmp_path):
    """Two processes that need the same kernels at once, with an empty cache:
    one compiles each, the other waits on its compile lock and loads it
    (kernels/_config.py, _KernelCache.load_overload)."""
    meet = tmp_path / "meet"
    meet.mkdir()
    code = _PROBE.replace("PRELUDE", _TOGETHER.replace("MEET", repr(str(meet))))
    env = {**os.environ, "JITNN_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        results.append(json.loads(out))
    assert all(r["ok"] and not r["warnings"] for r in results)
    # alone, a cold run compiles the probe's 2 kernels (misses) and loads none
    assert sum(r["misses"] for r in results) == 2
    assert sum(r["hits"] for r in results) == 2
    assert (Path(results[0]["dir"]) / "compile-locks").is_dir()


def test_a_compile_lock_is_exclusive_and_gives_up_after_its_wait(tmp_path):
    from jitnn.kernels import _config
    path = tmp_path / "locks" / "k.lock"
    held = _config._try_lock(path, 0.0)
    assert held is not None
    assert _config._try_lock(path, 0.05) is None      # taken: given up after the wait
    held.close()                                       # (a process exiting does this)
    again = _config._try_lock(path, 0.0)
    assert again is not None
    again.close()
