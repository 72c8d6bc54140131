"""Fixtures shared by the kernel tests."""

import os

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
