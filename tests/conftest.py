"""Fixtures shared by the kernel tests."""

import os
import pathlib
import subprocess
import sys
import tempfile

import numba
import pytest

# Convolutions' algorithms by the formula, not measured on the host
# (jitnn/tuning.py): the tests' expectations (which kernel ran) stay the same
# on every machine and run. tests/test_tuning.py turns measuring on itself.
os.environ.setdefault("JITNN_TUNE", "0")


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
#: other tests, on a core the suite's compiles (one at a time) leave idle.
PORTABLE_TEST = "test_the_generic_target_runs_every_op_against_its_reference"
_ROOT = pathlib.Path(__file__).resolve().parent.parent
_portable_runs: dict = {}


def portable_check_command() -> tuple[list, dict]:
    env = {**os.environ, "NUMBA_CPU_NAME": "generic"}
    env.pop("NUMBA_CPU_FEATURES", None)
    return [sys.executable, "-m", "tests.portable_check"], env


def _start_portable_check() -> None:
    command, env = portable_check_command()
    output = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, cwd=_ROOT, env=env, stdout=output,
                               stderr=subprocess.STDOUT, text=True)
    _portable_runs["run"] = (process, output)


def pytest_collection_finish(session):
    if any(item.name == PORTABLE_TEST for item in session.items):
        try:
            import onnx  # noqa: F401  (the check loads a small ONNX model)
        except ImportError:
            return
        _start_portable_check()


def pytest_sessionfinish(session):
    run = _portable_runs.pop("run", None)
    if run is not None and run[0].poll() is None:
        run[0].kill()
        run[0].wait()


@pytest.fixture
def portable_check_output():
    """What tests/portable_check.py printed and its exit code, from the run
    started after collection (or a run started now, if none was)."""
    pytest.importorskip("onnx")
    if "run" not in _portable_runs:
        _start_portable_check()
    process, output = _portable_runs["run"]
    process.wait(timeout=1800)
    output.seek(0)
    return process.returncode, output.read()
