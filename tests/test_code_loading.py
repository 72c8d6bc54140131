"""Kernels load from the disk cache without numba's compile-time baggage
(kernels/_code_loading.py): no refresh of numba's lowering registries, the
runtime's machine code from the cache, no IR parsed (each entry's linking IR
stays bitcode until a compile links it)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Two kernels in a module of their own: ``outer`` calls ``inner``, so
# compiling ``outer`` links ``inner``'s IR into it.
_KERNELS = textwrap.dedent("""
    from jitnn.kernels._config import jit

    @jit()
    def inner(x):
        return x * 2.0 + 1.0

    @jit()
    def outer(x):
        return inner(x) + inner(x + 1.0)
""")

_PROBE = textwrap.dedent("""
    import json, sys
    import llvmlite.binding as llvm
    parses = []
    _parse = llvm.parse_bitcode
    llvm.parse_bitcode = lambda data: parses.append(len(data)) or _parse(data)
    import numba_code_loading_kernels as k
    from jitnn.kernels import _code_loading
    from numba.core.runtime import nrt
    result = {"inner": k.inner(1.5)}
    library = k.inner.overloads[k.inner.signatures[0]].library
    result["lazy"] = type(library) is _code_loading._CachedCodeLibrary and library._shared_module is None
    result["registries_loaded"] = "numba.np.arraymath" in sys.modules
    result["runtime_cached"] = type(nrt.rtsys.library) is _code_loading._CachedCodeLibrary
    if CALL_OUTER:
        result["outer"] = k.outer(1.5)
    result["inner_hits"] = sum(k.inner.stats.cache_hits.values())
    result["ir_parsed"] = len(parses)
    print(json.dumps(result))
""")


def _run(tmp_path: Path, call_outer: bool) -> dict:
    code = _PROBE.replace("CALL_OUTER", str(call_outer))
    env = {**os.environ, "JITNN_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cached_kernels_load_lean_and_still_link_into_a_new_compile(tmp_path):
    (tmp_path / "numba_code_loading_kernels.py").write_text(_KERNELS)
    first = _run(tmp_path, call_outer=False)      # compiles inner, the runtime's cache file
    assert first["inner"] == 4.0 and first["inner_hits"] == 0
    assert first["registries_loaded"]             # a compile loads everything
    assert not first["runtime_cached"]            # compiled, then saved
    runtime_files = list((tmp_path / "cache").rglob("numba-runtime.nrt"))
    assert len(runtime_files) == 1

    second = _run(tmp_path, call_outer=True)
    assert second["inner"] == 4.0 and second["inner_hits"] == 1
    assert second["lazy"]                         # loaded, its IR not parsed
    assert second["runtime_cached"]
    # outer compiles here: inner's IR is parsed from its bitcode and linked in
    assert second["outer"] == 4.0 + 6.0

    assert second["ir_parsed"] >= 1

    third = _run(tmp_path, call_outer=False)      # nothing compiles: nothing else loads
    assert third["inner"] == 4.0 and third["lazy"] and not third["registries_loaded"]
    assert third["ir_parsed"] == 0                # machine code only, the runtime's too


def test_a_damaged_runtime_file_is_compiled_again(tmp_path):
    (tmp_path / "numba_code_loading_kernels.py").write_text(_KERNELS)
    _run(tmp_path, call_outer=False)
    runtime_file = next((tmp_path / "cache").rglob("numba-runtime.nrt"))
    runtime_file.write_bytes(b"not a pickle")
    again = _run(tmp_path, call_outer=True)
    assert again["inner"] == 4.0 and again["outer"] == 10.0
    assert runtime_file.read_bytes() != b"not a pickle"   # saved over


def test_the_loading_module_is_in_no_kernel_stamp():
    """It generates no code: an edit of it must not recompile every kernel."""
    from jitnn.kernels import _config
    config = Path(_config.__file__).resolve()
    assert (config.parent / "_code_loading.py").is_file()
    assert all(path.name != "_code_loading.py" for path in _config._kernel_imports(config))
