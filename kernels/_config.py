"""Numba settings for every jitnn kernel, in one place.

Importing this module (every kernel module does, first) applies the settings
before any kernel compiles. They come from measurements on this project's
target (``notes/numba-kernels.md`` in the design documents):

* **SLP vectorization on.** Register tiles are fully unrolled before the loop
  vectorizer runs, so only the SLP vectorizer turns them into AVX2 code
  (3.8 vs 82 GFLOP/s on the conv prototype). Numba turns it off by default.
* **AVX-512 hosts: no gathers or scatters, 512-bit vectors**
  (:data:`AVX512_TUNING`, added to the host's features for numba's CPU
  target, unless ``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES`` is set). With
  AVX-512's masked gathers and scatters legal, LLVM 22 vectorized the matmul
  tile's loops with them, leaving the tile in memory: 3 GFLOP/s against
  73-78 without them on 256-bit vectors and 80-130 on 512-bit ones (Xeon,
  Emerald Rapids, 1 thread, 256-1024 square; OpenBLAS 95-150 in the same
  runs). LLVM's default tuning for these CPUs keeps vectors at 256 bits,
  which halves the FMA rate. numba makes its CPU target once per process,
  at the first numba function: imported after one, jitnn cannot tune it,
  and warns. The setting is numba's, so it applies to the process's other
  numba functions too.
* **Blocks and tiles from the target's vectors.** numba compiles for the host
  unless ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` choose another CPU
  (``NUMBA_CPU_NAME=generic``: the architecture's baseline, SSE2 on x86-64).
  The default block and the matrix products' register tile follow that
  target's vector registers (:data:`VECTOR_LANES`, :data:`VECTOR_REGISTERS`),
  and x86-only instructions are emitted for x86 targets only
  (:data:`TARGET_X86`), so AArch64 (NEON) runs the same kernels on 4-float
  blocks.
* **fastmath = contract without reassoc.** ``contract`` allows FMA; ``reassoc``
  sometimes makes LLVM treat a tile's k loop as a reduction and emit gathers.
  We also leave out ``nnan`` and ``ninf`` so NaN and infinity propagate as IEEE
  says (an activation of ``inf`` is not undefined behaviour).
* **nogil kernels**, so Python threads can run several at once (parallel
  readbacks), and ``error_model='numpy'`` so integer division has no
  Python-style zero check in hot loops.
* **Threading layer chosen on purpose**: OpenMP first (about 1.6 us per
  parallel region here), then TBB; numba's last resort, ``workqueue``, is slow
  and not thread-safe, so :func:`threading_layer` reports it and callers
  serialize parallel kernels when it is the one that loaded.
* **Nothing parallel on one thread.** The reorders, conv drivers (transposed
  ones included), the conv input padding and global average pooling have a
  serial compile (:func:`parallel_kernel`); the other
  drivers call their serial loop directly. On one thread numba's parallel
  compile still enters an OpenMP region and outlines its loop body; the
  serial one ran 4-9 % (reorders) and 1-2 % (convs) faster.
* **A persistent kernel cache** in a directory tagged with everything that
  changes generated code but is not in numba's own cache key: numba and
  llvmlite versions, the target CPU and its features (so a generic build
  does not share files with the native one), the SLP and bounds-check
  flags, the fastmath set and the layout of jitnn's entries. Each kernel
  file's entries are stamped with a hash of the file and of every kernel
  module it imports (:func:`source_stamp`; numba stamps them with the file's
  own time and size, and does not see an edit of a helper in another file),
  so an edit recompiles only what depends on it. Saves lock the index
  between processes (compile workers), and an entry lists the standalone
  kernels its code calls (:mod:`._linking`), which load before it.
  ``JITNN_CACHE_DIR`` overrides the location. A
  read-only directory that already holds this tag's kernels (a shared
  install) is used as it is: kernels it lacks compile and are not saved (one
  warning). When no directory is writable or populated, kernels compile
  without a cache and one warning says so. A damaged cache file (truncated,
  garbage) is ignored (deleted, if the cache is writable) and its kernel
  compiled again, with one warning per process, instead of an unpickling
  error in every process. Clear the cache
  by deleting :data:`CACHE_DIR` (``jitnn info`` prints it).

This module must not import the jitnn runtime: ``kernels`` is a leaf.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
import re
import tempfile
import threading
import time
import types
import warnings
from pathlib import Path

import llvmlite
import llvmlite.binding as _llvm
import numba
import numpy as np
from numba.core import caching as _caching
from numba.core.registry import CPUDispatcher
from numba.np.ufunc import parallel as _numba_parallel

from . import _code_loading, _linking

# --- code generation -------------------------------------------------------

numba.config.SLP_VECTORIZE = 1

#: LLVM tuning for AVX-512 hosts, added to the host's features (see the module
#: docstring): no gathers or scatters, and 512-bit vectors where they fit
AVX512_TUNING = "+prefer-no-gather,+prefer-no-scatter,-prefer-256-bit"
_HOST_FEATURES = _llvm.get_host_cpu_features()
#: the host's SIMD: True where it has 16-lane zmm registers (AVX-512)
HOST_AVX512 = bool(_HOST_FEATURES.get("avx512f", False))
HOST_AVX2 = bool(_HOST_FEATURES.get("avx2", False))
#: LLVM's name for the host CPU (``znver3``, ``sapphirerapids``, ...)
HOST_CPU = _llvm.get_host_cpu_name()

# --- the target: what numba generates code for ------------------------------
# The host, unless the user chose another CPU (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES:
# ``NUMBA_CPU_NAME=generic`` is the architecture's baseline, SSE2 on x86-64).
# The block and the register tiles follow the target's vectors, and
# architecture-specific code (x86's ``sfence``) is emitted only for its own.

#: the architecture numba's JIT compiles for: the process's (``x86_64``, ``aarch64``)
TARGET_ARCH = _llvm.get_process_triple().split("-")[0]
TARGET_X86 = TARGET_ARCH in ("x86_64", "i386", "i486", "i586", "i686")
#: the CPU numba compiles for: ``NUMBA_CPU_NAME`` or the host's
TARGET_CPU: str = numba.config.CPU_NAME or HOST_CPU


def _enabled_features(features: str) -> frozenset[str]:
    """The ``+feature`` names of an LLVM feature string (``"+avx2,-avx512f"``)."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


#: the CPU features numba compiles with: ``NUMBA_CPU_FEATURES`` (empty for
#: ``NUMBA_CPU_NAME=generic``: the baseline) or the host's
TARGET_FEATURES: frozenset[str] = _enabled_features(
    numba.config.CPU_FEATURES if numba.config.CPU_FEATURES is not None
    else _HOST_FEATURES.flatten())
TARGET_AVX512 = TARGET_X86 and "avx512f" in TARGET_FEATURES
TARGET_AVX2 = TARGET_X86 and "avx2" in TARGET_FEATURES
#: the target's SIMD level, as ``jitnn info`` names it
TARGET_SIMD = ("AVX-512" if TARGET_AVX512 else "AVX2" if TARGET_AVX2 else
               "SSE2 (x86-64 baseline)" if TARGET_X86 and "avx" not in TARGET_FEATURES else
               "AVX" if TARGET_X86 else "NEON" if TARGET_ARCH in ("aarch64", "arm64")
               else TARGET_ARCH)
#: float32 lanes in one of the target's vector registers: 16 (AVX-512), 8
#: (AVX2), else 4 (SSE, NEON: a 128-bit register)
VECTOR_LANES = 16 if TARGET_AVX512 else 8 if TARGET_AVX2 else 4
#: vector registers of the target's ISA: 32 (zmm0-31 on AVX-512, v0-31 on
#: AArch64), 16 (ymm or xmm 0-15 on x86 without AVX-512)
VECTOR_REGISTERS = 32 if TARGET_AVX512 or TARGET_ARCH in ("aarch64", "arm64") else 16
#: AVX-512 hosts whose 512-bit instructions run on 256-bit units (AMD Zen 4):
#: there, 8-channel blocks ran whole models faster than 16 (batch 1, models in
#: the same process, two rounds each on 1 and 2 threads; 2026-11-28):
#: ResNet-50 1.21x / 1.31-1.41x, MobileNetV2 1.16-1.42x / 1.27-1.56x,
#: an Inception-style net 0.82-1.15x / 1.06-1.14x
HALF_WIDTH_AVX512 = frozenset({"znver4"})
#: float32 channels per block for the target: one vector register's worth
#: (16, 8, 4), 8 where AVX-512 runs at half width
HOST_BLOCK = 8 if VECTOR_LANES == 16 and TARGET_CPU in HALF_WIDTH_AVX512 else VECTOR_LANES


def _tune_for_avx512() -> bool:
    """Give numba's CPU target :data:`AVX512_TUNING` on an AVX-512 host, unless
    the user chose the target (``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES``).
    Returns whether the tuning is on. Too late, with a warning, when numba
    compiled something before jitnn was imported (its target is made once)."""
    if not HOST_AVX512 or numba.config.CPU_NAME is not None \
            or numba.config.CPU_FEATURES is not None:
        return False
    from numba.core import registry
    if "_toplevel_target_context" in vars(registry.cpu_target):
        warnings.warn(
            "jitnn: a numba function was made before jitnn was imported, so jitnn cannot "
            "tune numba's target for AVX-512; matrix products may run much slower. "
            "Import jitnn before compiling other numba functions, or set "
            f"NUMBA_CPU_FEATURES to the host's features plus {AVX512_TUNING}.",
            RuntimeWarning, stacklevel=3)
        return False
    numba.config.CPU_NAME = HOST_CPU
    numba.config.CPU_FEATURES = _HOST_FEATURES.flatten() + "," + AVX512_TUNING
    return True


#: whether this process's kernels compile with :data:`AVX512_TUNING`
AVX512_TUNED: bool = _tune_for_avx512()

#: LLVM fast-math flags for every kernel: FMA contraction, no reassociation.
FASTMATH: frozenset[str] = frozenset({"contract", "arcp", "nsz", "afn"})

# The user's explicit NUMBA_THREADING_LAYER wins; otherwise OpenMP, then TBB.
if os.environ.get("NUMBA_THREADING_LAYER", "default").lower() == "default":
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "tbb", "workqueue"]
    numba.config.THREADING_LAYER = "default"


# --- the kernel cache ------------------------------------------------------

_KERNEL_DIR = Path(__file__).resolve().parent


#: the layout of jitnn's cache entries (a data file holds the standalone
#: kernels its code calls, kernels/_linking.py, and the names it defines,
#: kernels/_code_loading.py); part of the directory name
_CACHE_FORMAT = 3


def _settings_tag() -> str:
    """Directory name that changes whenever generated code could change, the
    kernel sources apart (each source file's entries are stamped with the
    sources it depends on: :func:`source_stamp`)."""
    flags = ",".join(sorted(FASTMATH))
    settings = hashlib.sha256(flags.encode()).hexdigest()[:8]
    # the target's features (numba keys its entries on them too, but two
    # targets sharing files would overwrite each other's index)
    target = hashlib.sha256(",".join(sorted(TARGET_FEATURES)).encode()).hexdigest()[:8]
    return (f"numba-{numba.__version__}_llvmlite-{llvmlite.__version__}"
            f"_slp{int(numba.config.SLP_VECTORIZE)}_fm-{settings}"
            f"_{TARGET_CPU}-{target}{'_avx512tuned' if AVX512_TUNED else ''}"
            f"{'_boundscheck' if numba.config.BOUNDSCHECK else ''}"
            f"_v{_CACHE_FORMAT}")


# A kernel's cached code depends on its own source file and on every kernel
# module that file imports, directly or not: numba inlines their helpers and
# intrinsics into it. numba stamps a file's entries with the file's own
# modification time and size only (so an edit elsewhere went unnoticed, and a
# checkout that touched the file threw its entries away); jitnn stamps them
# with a hash of the sources they depend on instead, and an edit in one
# kernel module leaves the entries of the modules that do not import it.

_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.+)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)",
                     re.MULTILINE)
_sources: dict[Path, bytes] = {}
_stamps: dict[Path, str] = {}


def _source(path: Path) -> bytes:
    text = _sources.get(path)
    if text is None:
        text = _sources[path] = path.read_bytes()
    return text


# kernel modules that load machine code and generate none: not in any stamp,
# so an edit of one does not recompile every kernel
_LOADING_ONLY = frozenset({"_code_loading.py"})


def _kernel_imports(path: Path) -> set[Path]:
    """The kernel source files ``path`` imports (relative imports: kernels
    import each other no other way)."""
    found = set()
    for dots, module, names in _IMPORT.findall(_source(path).decode()):
        package = path.parent
        for _ in range(len(dots) - 1):
            package = package.parent
        base = package.joinpath(*module.split(".")) if module else package
        candidates = [base.with_suffix(".py"), base / "__init__.py"]
        if not module:          # ``from . import winograd``: the names are modules
            candidates += [package / f"{name.strip()}.py"
                           for name in names.strip("()").replace("\n", ",").split(",")]
        found.update(c for c in candidates if c.is_file() and _KERNEL_DIR in c.parents
                     and c.name not in _LOADING_ONLY)
    return found


def source_stamp(path) -> str:
    """A hash of kernel source ``path`` and of every kernel source it
    imports, directly or not: the stamp of its cache entries. (A file
    outside the kernels, a test's kernel, depends on all of them.)"""
    path = Path(path).resolve()
    stamp = _stamps.get(path)
    if stamp is None:
        closure, todo = set(), [path]
        if _KERNEL_DIR not in path.parents:
            todo += [p for p in _KERNEL_DIR.rglob("*.py") if p.name not in _LOADING_ONLY]
        while todo:
            current = todo.pop()
            if current not in closure:
                closure.add(current)
                todo.extend(_kernel_imports(current))
        digest = hashlib.sha256()
        for source in sorted(closure):
            name = source.relative_to(_KERNEL_DIR) if _KERNEL_DIR in source.parents else source
            digest.update(name.as_posix().encode() + b"\0")
            digest.update(_source(source))
        stamp = _stamps[path] = digest.hexdigest()[:16]
    return stamp


def _cache_root_candidates() -> list[Path]:
    override = os.environ.get("JITNN_CACHE_DIR")
    if override:
        return [Path(override).expanduser()]
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return [base / "jitnn", Path(tempfile.gettempdir()) / f"jitnn-cache-{os.getuid()}"]


def _is_writable(path: Path) -> bool:
    """numba's own test (``_CacheLocator.ensure_cache_path``): make the
    directory and a temporary file in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _holds_kernels(path: Path) -> bool:
    """Whether ``path`` (a tagged directory) already holds compiled kernels."""
    try:
        return any(path.rglob("*.nbi"))
    except OSError:
        return False


def _find_cache_dir() -> tuple[Path | None, bool]:
    """The first candidate that is writable, or read-only but already holds
    this tag's kernels (a shared install: loading needs no writes), and
    whether it is writable."""
    tag = _settings_tag()
    for root in _cache_root_candidates():
        path = root / tag
        if _is_writable(path):
            return path, True
        if _holds_kernels(path):
            return path, False
    return None, False


#: The directory that holds this process's compiled kernels, or None when no
#: writable or populated directory was found (kernels then compile in every
#: process); :data:`CACHE_WRITABLE` says whether new compiles are saved there.
CACHE_DIR: Path | None
CACHE_WRITABLE: bool
CACHE_DIR, CACHE_WRITABLE = _find_cache_dir()
if CACHE_DIR is None:
    warnings.warn(
        "jitnn: no writable kernel cache directory (tried "
        + ", ".join(str(p) for p in _cache_root_candidates())
        + "); kernels will be compiled again in every process. "
        "Set JITNN_CACHE_DIR to a writable directory to keep them.",
        RuntimeWarning, stacklevel=2)
_code_loading.use_cached_runtime(CACHE_DIR, CACHE_WRITABLE)


def cache_size_bytes() -> int:
    """Total size of the files in :data:`CACHE_DIR` (0 without a cache)."""
    if CACHE_DIR is None or not CACHE_DIR.exists():
        return 0
    return sum(p.stat().st_size for p in CACHE_DIR.rglob("*") if p.is_file())


# numba's cache classes, changed for jitnn's kernels only (the user's numba
# functions keep numba's own): the directory is CACHE_DIR, possibly
# read-only, and a damaged file is dropped instead of raised.

_warned: set[str] = set()   # kinds of cache warning given in this process


def _warn_once(kind: str, message: str) -> None:
    # loads and saves run under numba's compiler lock: no lock needed here
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class _KernelCacheLocator(_caching._SourceFileBackedLocatorMixin, _caching._CacheLocator):
    """numba's layout for a user-given cache directory, under :data:`CACHE_DIR`.
    numba's locators refuse a directory they cannot write; this one also
    serves a read-only one for loading."""

    def __init__(self, py_func, py_file: str):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(CACHE_DIR / self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        return source_stamp(self._py_file)

    @classmethod
    def from_function(cls, py_func, py_file: str) -> "_KernelCacheLocator":
        return cls(py_func, py_file)


class _KernelCacheImpl(_caching.CompileResultCacheImpl):
    """numba's entry, with the standalone kernels its code calls
    (kernels/_linking.py), which are loaded before it, and the names its
    code defines (so it loads without its IR: kernels/_code_loading.py)."""

    _locator_classes = [_KernelCacheLocator]

    def reduce(self, cres):
        return (_linking.dependencies(cres.library), super().reduce(cres),
                _code_loading.defined_symbols(cres.library))

    def rebuild(self, target_context, payload):
        calls, entry, symbols = payload
        _linking.load_dependencies(calls, entry)
        with _code_loading.machine_code_only(target_context, symbols):
            cres = super().rebuild(target_context, _code_loading.lean_entry(entry))
        cres.library._jitnn_standalone = set(calls)   # its callers call them too
        return cres


class _KernelCacheFile(_caching.IndexDataCacheFile):
    """numba's index (.nbi) and data (.nbc) files. A damaged one made
    unpickling fail in every later process; it is now dropped, so its kernel
    compiles again and the save replaces it. (Read errors stay numba's: a
    missing file is an empty entry.)"""

    def _load_index(self) -> dict:
        try:
            return super()._load_index()
        except OSError:
            raise
        except Exception as error:   # unpickling damaged bytes can raise almost anything
            self._drop(self._index_path, error)
            return {}

    def _load_data(self, name: str):
        try:
            return super()._load_data(name)
        except OSError:
            raise
        except Exception as error:
            self._drop(self._data_path(name), error)
            return None

    def save(self, key, data) -> None:
        """numba's save, safe with other processes saving into the same
        index (compile workers): under a lock on the index, and the data
        before the index entry that names it. (numba picks a data file name
        unused in the index it read: two processes saving two signatures of
        one kernel at once picked the same name and one's index entry then
        named the other's code.)"""
        with _locked(self._index_path + ".lock"):
            overloads = self._load_index()
            name = overloads.get(key)
            if name is None:
                taken = set(overloads.values())
                name = next(self._data_name(i) for i in itertools.count(1)
                            if self._data_name(i) not in taken)
            self._save_data(name, data)
            if overloads.get(key) != name:
                overloads[key] = name
                self._save_index(overloads)

    @staticmethod
    def _drop(path: str, error: Exception) -> None:
        if CACHE_WRITABLE:   # a shared read-only cache is left as it is
            with contextlib.suppress(OSError):
                os.unlink(path)
        _warn_once("damaged", f"jitnn: ignored the damaged kernel-cache file {path} "
                   f"({type(error).__name__}: {error}); its kernel is compiled again. "
                   "Other damaged files are dropped without a warning.")


class _KernelCache(_caching.FunctionCache):
    """numba's per-function cache with the classes above; on a read-only
    :data:`CACHE_DIR` new compiles are not saved."""

    _impl_class = _KernelCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _KernelCacheFile(self._cache_path, self._impl.filename_base,
                                            self._impl.locator.get_source_stamp())
        # this process's compile locks, held from a miss to the end of the
        # dispatcher's compile (_KernelDispatcher.compile)
        self._compile_locks: dict[str, object] = {}

    def holds(self, sig, target_context) -> bool:
        """Whether the cache's index names an entry for ``sig`` (nothing is
        loaded: a compile worker may have saved it, kernels/_linking.py)."""
        key = self._index_key(sig, target_context.codegen())
        return key in self._cache_file._load_index()

    def load_overload(self, sig, target_context):
        """The cached compile of ``sig``, or None for numba to compile it. On
        a miss this process takes the signature's compile lock first (held
        until the dispatcher's compile ends, :class:`_KernelDispatcher`) and
        looks again: a process that held it has saved the kernel meanwhile
        (two test workers, or Ray or Dask workers starting cold, compiled
        every kernel they shared once each)."""
        # numba's load_overload refreshes the whole target context first, for
        # loading machine code that needs only the runtime (_code_loading.py)
        _code_loading.load_runtime(target_context)
        cres = self._load_or_none(sig, target_context)
        if cres is None and CACHE_WRITABLE and self._lock_compile(sig, target_context):
            cres = self._load_or_none(sig, target_context)
        return cres

    def _load_or_none(self, sig, target_context):
        try:
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except _linking.MissingDependency:
            return None           # compiled again (and saved over the entry)

    def _lock_compile(self, sig, target_context) -> bool:
        """Take ``sig``'s compile lock (a file per signature under
        ``CACHE_DIR/compile-locks``); False if this process holds it already
        or it stayed taken for :data:`COMPILE_LOCK_WAIT_S` (then this process
        compiles too, as without the lock)."""
        key = self._index_key(sig, target_context.codegen())
        name = hashlib.sha256(repr((self._cache_path, self._impl.filename_base, key))
                              .encode()).hexdigest()[:24]
        if name in self._compile_locks:
            return False
        lock = _try_lock(CACHE_DIR / "compile-locks" / f"{name}.lock", COMPILE_LOCK_WAIT_S)
        if lock is None:
            return False
        self._compile_locks[name] = lock
        return True

    def release_compile_locks(self) -> None:
        """Release the compile locks this process took for this kernel."""
        locks = list(self._compile_locks.values())
        self._compile_locks.clear()
        for lock in locks:
            with contextlib.suppress(OSError):
                lock.close()      # closing the file releases its flock

    def save_overload(self, sig, data) -> None:
        if CACHE_WRITABLE:
            super().save_overload(sig, data)
        else:
            _warn_once("read-only", f"jitnn: the kernel cache {CACHE_DIR} is read-only; "
                       "kernels missing from it are compiled in every process.")


@contextlib.contextmanager
def _locked(path: str):
    """An exclusive lock on ``path`` (created) between processes, for as
    long as the block runs; without ``fcntl`` (Windows), no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


#: How long a process waits for another's compile of the same kernel before
#: compiling it itself (a process that dies releases its locks at once).
COMPILE_LOCK_WAIT_S = 300.0


def _try_lock(path: Path, wait_s: float):
    """The open file ``path`` (created) with an exclusive flock on it, taken
    within ``wait_s`` seconds, or None (also without ``fcntl``, on Windows,
    or when the file cannot be made). Closing the file releases the lock."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        path.parent.mkdir(exist_ok=True)
        lock = open(path, "a")
    except OSError:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                return None
            time.sleep(0.02)
        except OSError:
            lock.close()
            return None


class _KernelDispatcher(CPUDispatcher):
    """A jitnn kernel's dispatcher: its compile locks (:class:`_KernelCache`)
    are released when a compile ends, saved, loaded or failed (numba's first
    try of a kernel that asks for literal arguments fails on purpose)."""

    def compile(self, sig):
        try:
            return super().compile(sig)
        finally:
            release = getattr(self._cache, "release_compile_locks", None)
            if release is not None:
                release()


class _StandaloneDispatcher(_KernelDispatcher):
    """A dispatcher whose specializations are standalone kernels
    (kernels/_linking.py)."""

    def add_overload(self, cres) -> None:
        super().add_overload(cres)
        _linking.make_standalone(self, cres)


def jit(parallel: bool = False, cache: bool = True, standalone: bool = False):
    """Compile a kernel with jitnn's settings (see the module docstring).

    ``@jit()`` for serial tiles and helpers, ``@jit(parallel=True)`` for the
    ``prange`` drivers. Serial and parallel variants must be separate Python
    functions: numba's cache would otherwise confuse them.
    ``@jit(standalone=True)``: the kernel's code is not linked into its
    callers, which call it (kernels/_linking.py): for the task bodies that
    drivers call once per task, so that each compiles once, not once more
    per driver and twice per parallel one.
    """
    def decorate(function):
        dispatcher = numba.njit(fastmath=set(FASTMATH), nogil=True, parallel=parallel,
                                error_model="numpy")(function)
        if numba.config.DISABLE_JIT:
            return dispatcher
        if standalone and (type(dispatcher) is not CPUDispatcher or parallel):
            raise TypeError(f"jitnn: {function.__qualname__}: a standalone kernel is a "
                            "serial CPU kernel")
        if cache and CACHE_DIR is not None:
            # what numba's enable_caching() does, with jitnn's cache class
            # (numba.njit(cache=True) would use numba's, in config.CACHE_DIR)
            dispatcher._cache = _KernelCache(function)
        if standalone:
            dispatcher.__class__ = _StandaloneDispatcher   # (methods only: same layout)
        elif type(dispatcher) is CPUDispatcher:
            dispatcher.__class__ = _KernelDispatcher
        _linking.KERNELS.add(dispatcher)
        return dispatcher
    return decorate


# --- threading -------------------------------------------------------------

_thread_count_getter = None


def numba_threads() -> int:
    """numba's thread count for the calling thread. ``numba.get_num_threads``
    costs 1.0 us; the C getter it calls once numba's threads are up, 0.14 us
    (numba's own name for it, not a public one: until the threads are up, or
    when a numba version lacks it, the public function). The getter is looked
    up until found, then kept."""
    global _thread_count_getter
    getter = _thread_count_getter
    if getter is None:
        getter = getattr(_numba_parallel, "_get_num_threads", None)
        if getter is None:
            return numba.get_num_threads()
        _thread_count_getter = getter
    return getter()


class ThreadCountKernel:
    """A ``prange`` kernel compiled twice: with ``parallel=True``, and serial
    (``prange`` is then ``range``), which runs when numba's thread count for
    the calling thread is 1.

    Why: on one thread the parallel compile still enters an OpenMP region
    (~1.2 us per call here, ~2.6 us for a conv driver's 18 arguments) and
    runs its loop body outlined into a separate function, which LLVM
    optimizes apart from the loop around it. On 1 thread the serial compile
    of a reorder ran 4-9 % faster from 1 to 4 MB, of a conv driver 1-2 %
    faster (2026-11-23, benchmarks/RESULTS.md), and it compiles 3-4x
    quicker. Each compile happens at its first call, so a process that
    never runs on one thread never compiles the serial one (one that runs
    on both compiles both). Both run the same loop in the same order; the
    tests check the two compiles of every reorder and conv driver give the
    same bits.

    Call it from Python only (numba cannot call this object from a kernel).
    """

    def __init__(self, function):
        self.parallel = jit(parallel=True)(function)
        # A second Python function with the same code and its own name:
        # numba's cache files are named by qualified name, so the two
        # compiles keep separate entries.
        twin = types.FunctionType(function.__code__, function.__globals__,
                                  function.__name__ + "_serial", function.__defaults__,
                                  function.__closure__)
        twin.__qualname__ = function.__qualname__ + "_serial"
        twin.__doc__ = function.__doc__
        self.serial = jit()(twin)
        functools.update_wrapper(self, function)     # its name and docstring

    def __call__(self, *args):
        kernel = self.serial if numba_threads() == 1 else self.parallel
        return kernel(*args)

    def on_threads(self, threads: int):
        """The compile that runs on ``threads`` threads (for a caller that
        has just asked numba: asking again costs ~0.3 us)."""
        return self.serial if threads == 1 else self.parallel

    def __repr__(self) -> str:
        return f"<jitnn kernel {self.__qualname__} (parallel and serial compiles)>"


def parallel_kernel(function) -> ThreadCountKernel:
    """``@parallel_kernel``: ``@jit(parallel=True)``, plus a serial compile
    for one thread (see :class:`ThreadCountKernel`)."""
    return ThreadCountKernel(function)


@jit(parallel=True)
def _threading_probe(values):
    total = 0.0
    for i in numba.prange(values.shape[0]):
        total += values[i]
    return total


_layer_lock = threading.Lock()
_layer: str | None = None


def threading_layer() -> str:
    """Load numba's threading layer (once) and return its name.

    ``"omp"`` or ``"tbb"`` are thread-safe; ``"workqueue"`` is not, so the
    runtime must not launch two parallel kernels at once with it.
    """
    global _layer
    with _layer_lock:
        if _layer is None:
            _threading_probe(np.ones(4))
            _layer = numba.threading_layer()
            if _layer == "workqueue":
                warnings.warn(
                    "jitnn: numba loaded its 'workqueue' threading layer (OpenMP "
                    "and TBB were not found); parallel kernels will be slower and "
                    "run one at a time. Install libgomp or `pip install tbb`.",
                    RuntimeWarning, stacklevel=2)
        return _layer
