"""The allocator setting jitnn applies at import (jitnn/_memory.py)."""

import platform
import subprocess
import sys

import pytest

import jitnn
from jitnn import _memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="the setting only applies to glibc")
def test_import_keeps_freed_memory_for_reuse():
    assert _memory.status.startswith("glibc mmap threshold 32 MiB")
    assert _memory.tune_allocator() == _memory.status          # applied once


def test_opt_out_leaves_the_allocator_alone():
    code = "import jitnn, jitnn._memory as m; print(m.status)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"JITNN_MALLOC_TUNING": "0", "PATH": "/usr/bin:/bin"},
                         check=True).stdout
    assert out.strip() == "left alone (JITNN_MALLOC_TUNING=0)"
    assert jitnn.__version__
