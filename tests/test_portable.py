"""Every CPU numba supports: the target (numba's, or the user's
NUMBA_CPU_NAME / NUMBA_CPU_FEATURES) picks the block and the register tiles,
and x86-only instructions stay on x86 targets.

The portable path itself (the generic target, 4-float blocks) runs in a
subprocess: tests/portable_check.py, a representative set of ops against
their float64 references. The whole suite on that target is
``NUMBA_CPU_NAME=generic pytest`` (README, Testing).
"""

import json
import os
import pathlib
import subprocess
import sys

import numba
import pytest

from jitnn.kernels import _config, simd

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(args, env_changes: dict, timeout: int = 120) -> str:
    env = {**os.environ, **env_changes}
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        if name not in env_changes:
            env.pop(name, None)
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_the_generic_target_runs_every_op_against_its_reference(portable_check_output):
    # compiles ~60 s of CPU on a cold cache (a directory of its own: the
    # cache is tagged with the target); tests/conftest.py starts it after
    # collection, so it runs beside the other tests
    returncode, out = portable_check_output
    assert returncode == 0, out[-6000:]
    assert "block 4, matmul tile 6 x 8" in out
    assert out.count("\nok ") >= 15 and "portable path: every check passed" in out


_TARGET = """
import json
from jitnn.kernels import _config, matmul
print(json.dumps({"block": _config.HOST_BLOCK, "lanes": _config.VECTOR_LANES,
                  "registers": _config.VECTOR_REGISTERS, "tile": [matmul.MR, matmul.NR],
                  "simd": _config.TARGET_SIMD, "cache": _config.CACHE_DIR.name}))
"""


@pytest.mark.skipif(not _config.TARGET_X86, reason="x86 CPU names")
def test_the_block_and_tiles_follow_the_chosen_target(tmp_path):
    def target(name, features=None):
        env = {"NUMBA_CPU_NAME": name, "JITNN_CACHE_DIR": str(tmp_path)}
        if features is not None:
            env["NUMBA_CPU_FEATURES"] = features
        return json.loads(_run(["-c", _TARGET], env).strip().splitlines()[-1])

    avx2 = "+sse2,+avx,+avx2,+fma"
    avx512 = avx2 + ",+avx512f"
    generic = target("generic")
    assert generic["block"] == generic["lanes"] == 4 and generic["registers"] == 16
    assert generic["tile"] == [6, 8] and generic["simd"].startswith("SSE2")
    haswell = target("haswell", avx2)
    assert haswell["block"] == haswell["lanes"] == 8 and haswell["tile"] == [6, 16]
    xeon = target("sapphirerapids", avx512)
    assert xeon["block"] == xeon["lanes"] == 16 and xeon["tile"] == [14, 32]
    zen4 = target("znver4", avx512)          # AVX-512 at half width: block 8
    assert zen4["block"] == 8 and zen4["lanes"] == 16
    # each target compiles into a directory of its own
    assert len({t["cache"] for t in (generic, haswell, xeon, zen4)}) == 4


_CROSS_COMPILE = """
import sys
import llvmlite.binding as llvm
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
machine = llvm.Target.from_triple("aarch64-unknown-linux-gnu").create_target_machine(
    cpu="generic", features="+neon", reloc="pic", codemodel="default")
module = llvm.parse_assembly(sys.stdin.read())
module.triple = "aarch64-unknown-linux-gnu"
module.data_layout = str(machine.target_data)
print(machine.emit_assembly(module))
"""


@pytest.mark.parametrize("x86", [True, False], ids=["x86", "other"])
def test_stream_fence_is_sfence_on_x86_and_a_fence_elsewhere(monkeypatch, x86):
    monkeypatch.setattr(_config, "TARGET_X86", x86)

    def fenced():
        simd.stream_fence()
    fresh = numba.njit(fenced)       # compiled now, with the patched target
    fresh()                          # (either fence runs on x86)
    ir = fresh.inspect_llvm(fresh.signatures[0])
    assert ("llvm.x86.sse.sfence" in ir) == x86 and ("fence seq_cst" in ir) != x86
    if not x86:
        # the same code compiles for AArch64 (an x86 intrinsic would stop LLVM
        # there): ``dmb ish``
        result = subprocess.run([sys.executable, "-c", _CROSS_COMPILE], input=ir,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "dmb\tish" in result.stdout


def test_kernels_name_x86_intrinsics_only_behind_the_target_check():
    """Every ``llvm.x86.*`` intrinsic in the kernels' sources is simd.py's
    sfence, emitted under ``_config.TARGET_X86`` (the test above)."""
    uses = {path.relative_to(ROOT).as_posix(): path.read_text().count('"llvm.x86.')
            for path in (ROOT / "kernels").rglob("*.py")}
    assert {path: n for path, n in uses.items() if n} == {"kernels/simd.py": 1}
