"""Fixtures shared by the kernel tests."""

import numba
import pytest


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
