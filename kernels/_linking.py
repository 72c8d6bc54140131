"""How compiled kernels find each other: standalone kernels, and recipes
that make the same kernel in another process.

**Standalone kernels** (``_config.jit(standalone=True)``). numba links the
code of every function a kernel calls into the kernel's own and runs LLVM's
passes and code generation over all of it again, once per caller, and twice
for a ``prange`` driver (its parallel body is a function of its own, linked
into the driver). A driver's heavy task body (the conv tiles, a GEMM task)
was so compiled three times: alone, in the serial driver and in the parallel
one. A standalone kernel is compiled once. Its callers call it by a name
that is the same in every process (numba's own names carry a per-process
counter), which :func:`make_standalone` gives LLVM's process symbol table
when the kernel is compiled or loaded from the disk cache; a caller's cache
entry lists the standalone kernels its code calls (:func:`dependencies`),
and loading it loads those first (:func:`load_dependencies`), so the name is
always defined when the caller's machine code is linked. The call costs what
a function call costs (the callee is not inlined): meant for functions that
run a task's worth of work per call.

**Recipes** (:func:`kernel_recipe`, :func:`find_kernel`): how another
process makes the same dispatcher: a module-level kernel by its module and
name, a kernel made by a factory (``conv_driver(cb, ci, plain)``) by the
factory and its arguments (:func:`made_by`), the serial or parallel compile
of a ``parallel_kernel`` by its member. Compile workers use them
(``jitnn/compile_pool.py``), and the cache uses them to load a caller's
standalone kernels.

This module must not import the jitnn runtime, nor ``_config``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import weakref

import llvmlite.binding as llvm
from numba.core import cgutils, itanium_mangler
from numba.core.base import OverloadSelector
from numba.core.funcdesc import qualifying_prefix
from numba.core.imputils import impl_ret_new_ref

#: every dispatcher ``_config.jit`` made (the compile workers' scout looks
#: through them; weak: a test's throwaway dispatchers go)
KERNELS: "weakref.WeakSet" = weakref.WeakSet()

# compile results whose machine code a standalone name points at: kept alive
# for the process (numba frees a library with its dispatcher)
_DEFINED: dict[str, object] = {}
_lock = threading.Lock()
_PREFIX = "jitnn.standalone."


class MissingDependency(Exception):
    """A cached kernel calls a standalone kernel that cannot be loaded or
    compiled here: the cached entry is not used (its kernel compiles again)."""


# --- recipes -----------------------------------------------------------------------

def made_by(factory, args: tuple, kernel):
    """Label ``kernel`` (a dispatcher, or a ``parallel_kernel``'s pair) as
    ``factory(*args)``'s product, so another process can make it; returns it."""
    for member in ("serial", "parallel", None):
        dispatcher = getattr(kernel, member, None) if member else kernel
        if hasattr(dispatcher, "py_func"):
            dispatcher._jitnn_recipe = (factory.__module__, factory.__name__, tuple(args),
                                        member)
    return kernel


def kernel_factory(make):
    """``@kernel_factory`` on a function that makes a kernel from a few
    hashable arguments (a block size, a path): each kernel is made once, and
    labelled (:func:`made_by`) so that another process can make it too."""
    made: dict = {}

    @functools.wraps(make)
    def factory(*args):
        kernel = made.get(args)
        if kernel is None:
            kernel = made.setdefault(args, made_by(factory, args, make(*args)))
        return kernel

    factory.made = made
    return factory


def kernel_recipe(dispatcher) -> tuple | None:
    """``(module, name, factory arguments or None, member or None)``: what
    :func:`find_kernel` needs to make ``dispatcher`` again in another
    process; None for a kernel that has none (made in a test, a closure)."""
    recipe = getattr(dispatcher, "_jitnn_recipe", None)
    if recipe is not None:
        return recipe
    function = dispatcher.py_func
    module = sys.modules.get(function.__module__)
    name = function.__name__
    for attribute, member in ((name, None), (name.removesuffix("_serial"), "serial"),
                              (name, "parallel")):
        found = getattr(module, attribute, None)
        if member:
            found = getattr(found, member, None)
        if found is dispatcher:
            return (function.__module__, attribute, None, member)
    return None


def find_kernel(recipe: tuple):
    """The dispatcher a :func:`kernel_recipe` describes, made in this process."""
    module, name, args, member = recipe
    kernel = getattr(importlib.import_module(module), name)
    if args is not None:
        kernel = kernel(*args)
    return getattr(kernel, member) if member else kernel


# --- standalone kernels ----------------------------------------------------------

def standalone_name(fndesc) -> str:
    """The symbol every process gives a standalone kernel's specialization:
    numba's mangled name without its per-process counter."""
    prefix = qualifying_prefix(fndesc.modname, fndesc.qualname)
    return _PREFIX + itanium_mangler.mangle(prefix, fndesc.argtypes,
                                                        abi_tags=fndesc.abi_tags)


def make_standalone(dispatcher, cres) -> None:
    """After ``dispatcher`` compiled or loaded ``cres``: define its standalone
    name, and have numba lower calls to it as calls of that name, without
    linking its code into the caller."""
    fndesc = cres.fndesc
    name = standalone_name(fndesc)
    address = cres.library.get_pointer_to_function(fndesc.llvm_func_name)
    if not address:
        raise RuntimeError(f"jitnn: no machine code for {fndesc.qualname}")
    with _lock:
        _DEFINED[name] = cres
        llvm.add_symbol(name, address)
    recipe = kernel_recipe(dispatcher)
    if recipe is None:
        raise RuntimeError(f"jitnn: the standalone kernel {fndesc.qualname} has no recipe: "
                           "make it a module-level function or label it (made_by, "
                           "kernel_factory); its callers' cache entries load it by its recipe")
    dependency = (recipe, tuple(cres.signature.args), name)

    def call(context, builder, sig, args):
        function_type = context.call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
        callee = cgutils.get_or_insert_function(builder.module, function_type, name)
        status, result = context.call_conv.call_function(
            builder, callee, fndesc.restype, fndesc.argtypes, args)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        library = context.active_code_library
        calls = getattr(library, "_jitnn_standalone", None)
        if calls is None:
            calls = library._jitnn_standalone = set()
        calls.add(dependency)
        return impl_ret_new_ref(context, builder, fndesc.restype, result)

    call.signature = fndesc.argtypes
    call.libs = ()                 # what makes it standalone: nothing linked
    selector = OverloadSelector()
    selector.append(call, call.signature)
    # numba's table of implementations by entry point, which NativeLowering
    # and the cache's load filled with a call that links the library
    dispatcher.targetctx._defns[cres.entry_point] = selector


def dependencies(library) -> list:
    """The standalone kernels that ``library``'s code calls, its linked
    libraries' (a parallel region's body) included: ``(recipe, signature,
    name)`` each."""
    found, seen, todo = set(), set(), [library]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found |= getattr(current, "_jitnn_standalone", set())
        todo.extend(getattr(current, "_linking_libraries", ()))
    return sorted(found, key=repr)


def load_dependencies(calls, entry) -> None:
    """Compile or load each standalone kernel of ``calls`` (a cached
    entry's :func:`dependencies`), so that their names are defined before
    the entry's machine code is linked (LLVM aborts the process on a name it
    cannot find); :class:`MissingDependency` when one cannot be, or when the
    entry's machine code calls a name that ``calls`` does not list."""
    for recipe, signature, name in calls:
        if llvm.address_of_symbol(name):
            continue
        try:
            find_kernel(recipe).compile(signature)
        except Exception as error:
            raise MissingDependency(f"{name}: {type(error).__name__}: {error}") from error
    for name in _names_called(entry):
        if not llvm.address_of_symbol(name):
            raise MissingDependency(name)


def _names_called(entry) -> set[str]:
    """The standalone names in a cached entry's object code (numba's
    ``CompileResult._reduce``: ``(name, "object", (object code, bitcode))``
    first): names in an ELF or Mach-O string table end with a NUL. A kernel
    only ever refers to standalone names, never defines one."""
    try:
        kind, (code, _bitcode) = entry[0][1], entry[0][2]
    except (TypeError, ValueError, IndexError):
        return set()
    names, prefix, start = set(), _PREFIX.encode(), 0
    while kind == "object" and (start := code.find(prefix, start)) >= 0:
        end = code.find(b"\0", start)
        names.add(code[start:end].decode("ascii", "replace"))
        start = end
    return names

