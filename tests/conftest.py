"""Fixtures shared by the kernel tests."""

import collections
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numba
import pytest

# Convolutions' algorithms by the formula, not measured on the host
# (jitnn/tuning.py): the tests' expectations (which kernel ran) stay the same
# on every machine and run. tests/test_tuning.py turns measuring on itself.
os.environ.setdefault("JITNN_TUNE", "0")
# Idle OpenMP threads sleep instead of spinning: the suite's kernels are
# short and far apart, and under pytest-xdist the workers' spinning threads
# took the cores from each other's compiles.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject.toml's default): a worker per core, at most 4
    (each compiles its own kernels at first and holds about 1.5 GB)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run the test with numba on 1 thread (the kernels' serial calls and
    compiles) and on 2 (their parallel ones; see kernels/_config.py,
    ThreadCountKernel); numba's count is restored afterwards."""
    if request.param > numba.config.NUMBA_NUM_THREADS:
        pytest.skip(f"numba has fewer than {request.param} threads")
    saved = numba.get_num_threads()
    numba.set_num_threads(request.param)
    yield request.param
    numba.set_num_threads(saved)


@pytest.fixture
def record_calls(monkeypatch):
    """``record_calls(owner, *names)``: wrap each attribute ``names`` of
    ``owner`` (through ``monkeypatch``) so that a call appends its name to the
    returned list, then runs it (which compile of a kernel, or whether the
    parallel driver, ran)."""
    def record(owner, *names):
        calls = []
        for name in names:
            original = getattr(owner, name)
            monkeypatch.setattr(owner, name, lambda *args, name=name, original=original:
                                (calls.append(name), original(*args))[1])
        return calls
    return record


# --- the portable path's check, started in the background ----------------------------

#: tests/test_portable.py's test that runs tests/portable_check.py on numba's
#: generic target: a subprocess that compiles its own kernels (~60 s of CPU
#: from a cold cache) into a cache of its own, so it shares nothing with the
#: rest of the suite. It starts once collection is done and runs beside the
#: other tests; under pytest-xdist the first worker starts it and whichever
#: worker runs the test reads its output from a directory named after the run.
PORTABLE_TEST = "test_the_generic_target_runs_every_op_against_its_reference"
_ROOT = pathlib.Path(__file__).resolve().parent.parent
_portable_started: dict = {}

#: runs the check, then writes its exit code last (the sign that it finished)
_PORTABLE_WRAPPER = """
import os, subprocess, sys
folder = sys.argv[1]
with open(os.path.join(folder, "out.txt"), "w") as out:
    code = subprocess.call(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)
with open(os.path.join(folder, "rc.tmp"), "w") as rc:
    rc.write(str(code))
os.replace(os.path.join(folder, "rc.tmp"), os.path.join(folder, "rc"))
"""


def _portable_folder(config) -> pathlib.Path:
    run = getattr(config, "workerinput", {}).get("testrunuid") or f"pid{os.getpid()}"
    return pathlib.Path(tempfile.gettempdir()) / f"jitnn-portable-check-{run}"


def _start_portable_check(config) -> None:
    folder = _portable_folder(config)
    folder.mkdir(exist_ok=True)
    env = {**os.environ, "NUMBA_CPU_NAME": "generic"}
    env.pop("NUMBA_CPU_FEATURES", None)
    process = subprocess.Popen([sys.executable, "-c", _PORTABLE_WRAPPER, str(folder),
                                sys.executable, "-m", "tests.portable_check"],
                               cwd=_ROOT, env=env)
    _portable_started["process"] = process


def pytest_collection_modifyitems(session, config, items):
    """Files of more tests first (each file's tests keep their order): under
    pytest-xdist each file runs in one worker, handed out in this order, so
    the run does not end with one worker on a large file while the other
    waits (WebNN's 1561 conformance cases sort last by name)."""
    sizes = collections.Counter(item.path for item in items)
    items.sort(key=lambda item: -sizes[item.path])


def pytest_collection_finish(session):
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if worker not in (None, "gw0"):
        return                   # pytest-xdist: every worker collects every test; one starts it
    if any(item.name == PORTABLE_TEST for item in session.items):
        try:
            import onnx  # noqa: F401  (the check loads a small ONNX model)
        except ImportError:
            return
        _start_portable_check(session.config)


def pytest_sessionfinish(session):
    # one process: a check the run no longer needs (interrupted, deselected)
    # is stopped; under xdist another worker may still be waiting for it
    process = _portable_started.pop("process", None)
    if process is not None and not hasattr(session.config, "workerinput"):
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.fixture
def portable_check_output(request):
    """What tests/portable_check.py printed and its exit code, from the run
    started after collection (or a run started now, if none was)."""
    pytest.importorskip("onnx")
    folder = _portable_folder(request.config)
    if not folder.exists():
        _start_portable_check(request.config)
    rc = folder / "rc"
    deadline = time.monotonic() + 1800
    while not rc.exists():
        assert time.monotonic() < deadline, "the portable check did not finish in 30 minutes"
        time.sleep(0.2)
    code, out = int(rc.read_text()), (folder / "out.txt").read_text()
    shutil.rmtree(folder, ignore_errors=True)
    return code, out
