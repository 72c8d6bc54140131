"""Loading compiled kernels from the disk cache without numba's compile-time
baggage.

A process that finds every kernel it runs in the cache needs only their
machine code, but numba's loading path pays for what compiling would need.
Measured on MobileNetV2 (warm cache, 1 thread, peak resident memory above the
imports' own), three costs, each removed here:

* **The target context's refresh.** Before it loads a cache entry, numba
  refreshes the whole CPU target context: every lowering registry, some 250
  modules, scipy.linalg's BLAS among them (numba checks for it at import).
  28 MB. Loading needs only numba's runtime (NRT): :func:`load_runtime`. A
  compile still refreshes everything first (numba's compiler does it).
* **NRT compiled in every process.** numba builds its runtime's few helper
  functions with LLVM at start-up; that first run of LLVM's optimizer and
  code generator maps 28 MB of the LLVM library's code. Kernels loaded from
  the cache never run either. The runtime's machine code is cached beside
  the kernels (:func:`use_cached_runtime`), as numba caches a kernel's.
* **Each entry's IR parsed and held.** An entry carries the kernel's
  optimized IR, so that a later compile can link it into a caller; numba
  parses it at every load (to list the names it defines) and keeps it: 2-5
  MB of LLVM memory per kernel, and LLVM's bitcode reader, 3.5 MB of its
  code, mapped. jitnn's entries also list those names
  (:func:`defined_symbols`), so the machine code loads without the IR
  (:func:`unserialize`), which stays bitcode until a compile links it.

And an entry's type annotation (numba's typed source as text, 0.1-0.3 MB a
kernel, for ``inspect_types()``) is not kept (:func:`lean_entry`).

This module generates no code: it is left out of the kernels' source stamps
(``_config._LOADING_ONLY``), so an edit here recompiles nothing.

This module must not import the jitnn runtime.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from pathlib import Path

import llvmlite.binding as _llvm
from numba.core import codegen as _codegen
from numba.core.compiler_lock import global_compiler_lock
from numba.core.runtime import nrt as _nrt
from numba.core.runtime import nrtdynmod as _nrtdynmod


def load_runtime(target_context) -> None:
    """What loading machine code from the cache needs of numba: its runtime
    (NRT), whose functions the kernels call."""
    _nrt.rtsys.initialize(target_context)


class _CachedCodeLibrary(_codegen.JITCodeLibrary):
    """A library made from cached machine code; its linking IR stays bitcode
    until a compile links the library into another."""

    _linking_bitcode: bytes

    def _get_module_for_linking(self):
        if self._shared_module is None:
            self._shared_module = _llvm.parse_bitcode(self._linking_bitcode)
        return self._shared_module


def defined_symbols(library) -> tuple[str, ...]:
    """The names ``library`` defines, as numba's engine records them when it
    loads the library (``JitEngine._load_defined_symbols``)."""
    module = library._get_module_for_linking()
    return tuple(sorted(value.name for values in (module.functions, module.global_variables)
                        for value in values if not value.is_declaration))


def unserialize(codegen, serialized: tuple, symbols) -> _CachedCodeLibrary:
    """numba's ``CPUCodeLibrary._unserialize`` of machine code
    (``(name, 'object', (machine code, linking bitcode))``), without parsing
    the bitcode: the names it would have read from it are ``symbols``."""
    name, kind, (machine_code, linking_bitcode) = serialized
    library = codegen.create_library(name)
    library.__class__ = _CachedCodeLibrary
    library._linking_bitcode = linking_bitcode
    library.enable_object_caching()
    library._set_compiled_object(machine_code)
    library._finalize_final_module()       # MCJIT takes the machine code: nothing compiles
    codegen._engine._defined_symbols.update(symbols)
    return library


@contextlib.contextmanager
def machine_code_only(target_context, symbols):
    """While numba rebuilds a cache entry (``CompileResult._rebuild``), its
    library comes from :func:`unserialize`. numba holds its compiler lock
    around a load, so the codegen's method is swapped for this process only
    while the entry loads."""
    codegen = target_context.codegen()
    codegen.unserialize_library = lambda serialized: unserialize(codegen, serialized, symbols)
    try:
        yield
    finally:
        del codegen.unserialize_library


_ANNOTATION_NOT_KEPT = "(loaded from jitnn's kernel cache: the type annotation is not kept)"


def lean_entry(entry: tuple) -> tuple:
    """numba's cache entry (``CompileResult._reduce``'s fields) without its
    type annotation, the seventh."""
    return entry[:6] + (_ANNOTATION_NOT_KEPT,) + entry[7:]


_RUNTIME_FILE = "numba-runtime.nrt"


def use_cached_runtime(cache_dir: Path | None, writable: bool) -> None:
    """Make numba's runtime functions load from ``cache_dir`` (compiled and
    saved there the first time, when ``writable``). Has no effect once the
    runtime is initialized (numba was used before jitnn loaded)."""
    if cache_dir is None or getattr(_nrtdynmod.compile_nrt_functions, "_jitnn", False):
        return
    compile_original = _nrtdynmod.compile_nrt_functions
    path = Path(cache_dir) / _RUNTIME_FILE

    def compile_nrt_functions(ctx):
        codegen = ctx.codegen()
        with contextlib.suppress(Exception):   # missing or damaged: compiled below
            with open(path, "rb") as f:
                serialized, symbols = pickle.load(f)
            return unserialize(codegen, serialized, symbols)
        if not writable:
            return compile_original(ctx)
        # numba's own build, with object caching on so its machine code can be saved
        ir_module, library = _nrtdynmod.create_nrt_module(ctx)
        library.enable_object_caching()
        library.add_ir_module(ir_module)
        library.finalize()
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False) as f:
                pickle.dump((library.serialize_using_object_code(), defined_symbols(library)), f)
            os.replace(f.name, path)
        return library

    compile_nrt_functions._jitnn = True
    with global_compiler_lock:
        if not _nrt.rtsys._init:
            _nrtdynmod.compile_nrt_functions = compile_nrt_functions
