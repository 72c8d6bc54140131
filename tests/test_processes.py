"""jitnn in several processes: the default thread count follows what the
process was given (``OMP_NUM_THREADS``, the CPU affinity, numba's pool), and
a child started by fork, spawn or forkserver runs jitnn, also after its
parent ran parallel kernels (jitnn/threads.py). Every child has a timeout, so
a hang fails the test instead of stopping the suite."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import jitnn
from jitnn import threads
from tests import workers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: seconds a child may take (a cold kernel cache compiles in it)
CHILD_TIMEOUT = 600


# --- the default thread count -----------------------------------------------------

@pytest.fixture
def process(monkeypatch):
    """``process(omp=..., cpus=..., pool=...)``: make default_threads() see
    that OMP_NUM_THREADS (None: unset), CPU affinity and numba pool."""
    def given(omp: str | None = None, cpus: int = 4, pool: int = 4):
        if omp is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", omp)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)),
                            raising=False)
        monkeypatch.setattr(threads.numba_config, "NUMBA_NUM_THREADS", pool)
        monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
        return threads.default_threads()
    return given


def test_the_default_follows_omp_num_threads_then_the_affinity(process):
    assert process(omp="3") == (3, "OMP_NUM_THREADS=3")
    assert process(omp="2,1") == (2, "OMP_NUM_THREADS=2,1")       # nested: the outer level
    assert process(omp=None, cpus=3).count == 3
    assert "the CPU affinity: 3 of" in process(omp=None, cpus=3).source
    count, source = process(omp="0", cpus=2)
    assert count == 2 and "OMP_NUM_THREADS='0' ignored" in source
    assert process(omp="many", cpus=1).count == 1


def test_the_default_never_exceeds_numbas_pool(process):
    count, source = process(omp="8", cpus=8, pool=2)
    assert count == 2
    assert source == ("OMP_NUM_THREADS=8, capped at numba's pool of 2: the CPUs numba could "
                      "use at its import")
    assert process(omp=None, cpus=8, pool=3).count == 3


def _in_subprocess(code: str, env: dict[str, str], prefix: tuple[str, ...] = ()) -> str:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    environment.update(env)
    result = subprocess.run([*prefix, sys.executable, "-c", code], env=environment, cwd=ROOT,
                            capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert result.returncode == 0, result.stderr
    return result.stdout


_REPORT = """
import jitnn
ctx = jitnn.Context()
print(ctx.num_threads, '|', ctx.num_threads_source)
try:
    print(jitnn.Context(num_threads=2).num_threads)
except jitnn.JitnnValueError as error:
    print(error)
jitnn.cli.main(['info'])
import os
os.environ.pop('OMP_NUM_THREADS')
print(jitnn.Context().num_threads_source)
"""


@pytest.mark.skipif(threads.affinity_cpus() < 2, reason="needs 2 CPUs")
def test_a_process_given_omp_num_threads_takes_it():
    lines = _in_subprocess("import jitnn.cli" + _REPORT, {"OMP_NUM_THREADS": "1"}).splitlines()
    assert lines[0] == "1 | OMP_NUM_THREADS=1"
    assert lines[1] == "2"                                   # asked for: still possible
    assert any(line.startswith("threads") and "1 (OMP_NUM_THREADS=1)" in line
               for line in lines)


@pytest.mark.skipif(shutil.which("taskset") is None or threads.affinity_cpus() < 2,
                    reason="needs taskset and 2 CPUs")
def test_a_process_pinned_to_one_cpu_takes_one_thread():
    cpu = str(min(os.sched_getaffinity(0)))
    lines = _in_subprocess("import jitnn.cli" + _REPORT, {"OMP_NUM_THREADS": "2"},
                           prefix=("taskset", "-c", cpu)).splitlines()
    # numba sized its pool by the affinity: 1, which OMP_NUM_THREADS cannot pass
    assert lines[0] == ("1 | OMP_NUM_THREADS=2, capped at numba's pool of 1: the CPUs numba "
                        "could use at its import")
    assert "num_threads must be an int from 1 to 1 (numba's NUMBA_NUM_THREADS)" in lines[1]
    assert lines[-1] == f"the CPU affinity: 1 of {os.cpu_count()} CPUs"   # OMP_NUM_THREADS unset


# --- fork, spawn, forkserver ------------------------------------------------------

def _run_in_child(method: str) -> dict:
    with multiprocessing.get_context(method).Pool(1) as pool:
        try:
            return pool.apply_async(workers.run_here).get(timeout=CHILD_TIMEOUT)
        except multiprocessing.TimeoutError:
            pytest.fail(f"a {method} child running jitnn did not answer in {CHILD_TIMEOUT} s "
                        "(hung, or was killed)")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_child_runs_jitnn_after_its_parent_did(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    expected = workers.run_here()                 # the parent runs parallel kernels first
    child = _run_in_child(method)
    for where in ("default", "new"):
        for name, values in expected["default"].items():
            np.testing.assert_array_equal(child[where][name], values,
                                          err_msg=f"{method}: {where} {name}")
    if method == "fork" and threads._uses_gnu_openmp():
        # GNU OpenMP cannot start threads in a forked child: one thread, said once
        assert child["threads"] == 1 and "forked" in child["source"]
        if jitnn.default_context().num_threads > 1:
            assert len(child["warnings"]) == 1
            assert "runs its kernels on 1 thread here" in child["warnings"][0]
            assert "'spawn' or 'forkserver'" in child["warnings"][0]
    else:
        assert child["threads"] == threads.default_threads().count
        assert child["warnings"] == []


_FORK_UNDER_LAYER = """
import os, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
import numba, numpy as np, jitnn
from tests import workers
expected = workers.run_here()
layer = numba.threading_layer()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    child = workers.run_here()
    same = all(np.array_equal(child["new"][k], v) for k, v in expected["default"].items())
    os.write(write, f"{{layer}} {{child['threads']}} {{same}}".encode())
    os._exit(0)
os.close(write)
print(os.read(read, 200).decode())
os.waitpid(pid, 0)
"""


@pytest.mark.slow
@pytest.mark.skipif(threads.affinity_cpus() < 2, reason="needs 2 CPUs")
def test_a_forked_child_keeps_its_threads_on_the_workqueue_layer():
    """numba's workqueue layer starts its threads again after a fork: the
    child keeps the default count (only GNU OpenMP is capped)."""
    out = _in_subprocess(_FORK_UNDER_LAYER.format(root=ROOT),
                         {"NUMBA_THREADING_LAYER": "workqueue"})
    assert out.split() == ["workqueue", str(threads.affinity_cpus()), "True"]
