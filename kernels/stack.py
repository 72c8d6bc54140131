"""Low-level intrinsics for kernels: stack arrays, prefetch, an atomic counter.

* :func:`stack_empty`: a fixed-size array in the stack frame, for register tiles;
* :func:`prefetch` / :func:`prefetch_write`: cache-line prefetch hints;
* :func:`atomic_add`: an atomic fetch-and-add, for dynamic task scheduling;
* :func:`element_pointer`: a pointer into an array, for views that numba does
  not reference-count (``numba.carray(element_pointer(x, (i, j)), n)``).

Stack arrays.

A register-tiled kernel keeps its accumulators in a small array indexed only
by constant-trip loops. If that array comes from ``np.zeros`` (heap) LLVM
keeps it in memory and the tile stays scalar (about 4 GFLOP/s here); an
``alloca`` of a fixed size lets LLVM's SROA split it into scalars, which the
SLP vectorizer then packs into ymm registers (about 90 GFLOP/s for the 6x16
sgemm tile). Numba has no stack arrays, so this module adds one intrinsic::

    from .stack import stack_empty
    TILE = MR * NR                      # a module-level int: numba sees it as a literal

    @jit()
    def tile_kernel(...):
        acc = numba.carray(stack_empty(TILE, np.float32), (MR, NR))
        for i in range(MR):             # constant trip counts only, so the
            for j in range(NR):         # loops unroll and acc becomes registers
                acc[i, j] = 0

Rules: ``size`` must be a compile-time constant (a literal or a module-level
int); the memory is uninitialized and lives until the enclosing jitted
function returns, so never return the array or store it anywhere. For a
register tile, index it only with constants or constant-trip loop variables:
a runtime index forces the whole array back into memory. With runtime
indices it is a scratch buffer that costs no heap allocation (the matmul
kernels' 64 KiB block of B); keep those small, thread stacks are finite.
"""

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


@intrinsic
def stack_empty(typingctx, size, dtype):
    """``stack_empty(size, np.float32)`` -> pointer to ``size`` uninitialized
    elements in the caller's stack frame (wrap it with ``numba.carray``)."""
    if not isinstance(size, types.IntegerLiteral):
        return None  # numba then reports that the size must be a constant
    count = size.literal_value
    element = dtype.dtype

    def codegen(context, builder, signature, args):
        llvm_element = context.get_data_type(element)
        # In the entry block, where SROA and mem2reg look for allocas; a fixed
        # [count x T] type makes it splittable. Not cgutils.alloca_once: it
        # zero-fills, a 16 KiB memset on every call for a large buffer.
        with builder.goto_entry_block():
            slot = builder.alloca(ir.ArrayType(llvm_element, count))
        return builder.bitcast(slot, llvm_element.as_pointer())

    return types.CPointer(element)(size, dtype), codegen



def _make_prefetch(write):
    def prefetch_generic(typingctx, array, index):
        if not isinstance(array, types.Array) or not isinstance(index, types.BaseTuple):
            return None
        if len(index) != array.ndim:
            return None

        def codegen(context, builder, signature, args):
            array_type, index_type = signature.args
            view = context.make_array(array_type)(context, builder, args[0])
            indices = cgutils.unpack_tuple(builder, args[1], len(index_type))
            indices = [context.cast(builder, value, kind, types.intp)
                       for value, kind in zip(indices, index_type)]
            pointer = cgutils.get_item_pointer2(
                context, builder, data=view.data,
                shape=cgutils.unpack_tuple(builder, view.shape),
                strides=cgutils.unpack_tuple(builder, view.strides),
                layout=array_type.layout, inds=indices,
                wraparound=False, boundscheck=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                "llvm.prefetch.p0")
            # (address, rw, locality 3 = keep in all cache levels, 1 = data)
            builder.call(function, [builder.bitcast(pointer, i8p),
                                    i32(int(write)), i32(3), i32(1)])
            return context.get_dummy_value()

        return types.none(array, index), codegen
    prefetch_generic.__name__ = "prefetch_write" if write else "prefetch"
    return prefetch_generic


#: ``prefetch(array, (i, j, ...))``: hint the CPU to bring the cache line
#: holding ``array[i, j, ...]`` into L1 for reading. No bounds check and no
#: effect on results (a prefetch never faults, even past the end).
prefetch = intrinsic(_make_prefetch(write=False))
#: ``prefetch_write(array, (i, j, ...))``: the same, for a line about to be
#: written (``prefetchw``), e.g. an output tile before the kernel stores it.
prefetch_write = intrinsic(_make_prefetch(write=True))


@intrinsic
def atomic_add(typingctx, array, index, value):
    """``atomic_add(counters, i, v)``: add ``v`` to the int64 ``counters[i]``
    atomically and return the old value (``atomicrmw add``, sequentially
    consistent). Lets the threads of a ``prange`` hand out tasks among
    themselves (dynamic scheduling): numba's own schedule is static, so a
    thread that shares its core with another process would hold up the rest.
    No bounds check."""
    if not (isinstance(array, types.Array) and array.ndim == 1
            and array.dtype == types.int64 and isinstance(index, types.Integer)
            and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        array_type, index_type, value_type = signature.args
        view = context.make_array(array_type)(context, builder, args[0])
        position = context.cast(builder, args[1], index_type, types.intp)
        pointer = cgutils.get_item_pointer2(
            context, builder, data=view.data,
            shape=cgutils.unpack_tuple(builder, view.shape),
            strides=cgutils.unpack_tuple(builder, view.strides),
            layout=array_type.layout, inds=[position],
            wraparound=False, boundscheck=False)
        amount = context.cast(builder, args[2], value_type, types.int64)
        return builder.atomic_rmw("add", pointer, amount, "seq_cst")

    return types.int64(array, index, value), codegen


@intrinsic
def element_pointer(typingctx, array, index):
    """``element_pointer(array, (i, j, ...))`` -> a ``CPointer`` to that
    element, no bounds check. ``numba.carray(element_pointer(x, (i, j0)), n)``
    is then a view of ``x[i, j0:j0 + n]`` that numba does not reference-count:
    slicing ``x`` makes numba increment and decrement the array's reference
    count (two atomic operations, ~40 cycles) wherever it cannot prove them
    redundant, which costs more than the arithmetic on a 6 x 16 tile. The
    caller must keep ``array`` alive and stay inside it."""
    if not isinstance(array, types.Array) or not isinstance(index, types.BaseTuple):
        return None
    if len(index) != array.ndim:
        return None

    def codegen(context, builder, signature, args):
        array_type, index_type = signature.args
        view = context.make_array(array_type)(context, builder, args[0])
        indices = cgutils.unpack_tuple(builder, args[1], len(index_type))
        indices = [context.cast(builder, value, kind, types.intp)
                   for value, kind in zip(indices, index_type)]
        return cgutils.get_item_pointer2(
            context, builder, data=view.data,
            shape=cgutils.unpack_tuple(builder, view.shape),
            strides=cgutils.unpack_tuple(builder, view.strides),
            layout=array_type.layout, inds=indices,
            wraparound=False, boundscheck=False)

    return types.CPointer(array.dtype)(array, index), codegen
