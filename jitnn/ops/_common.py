"""Argument handling shared by the ops."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from .. import layouts
from ..defaults import default_context
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import epilogue
from ..kernels.buffers import aligned_empty
from ..limits import check_max, is_number, real_arg  # noqa: F401 - is_number for the ops
from ..registry import NodeKind, register_kind
from ..tensor import (DTYPES, FLOAT32, Node, Tensor, Value, as_array_copy, as_float32_copy,
                      to_blocked)

if TYPE_CHECKING:
    from ..context import Context

#: What ``activation=`` accepts: a name, or a (name, *params) tuple.
ACTIVATION_NAMES = ("relu", "relu6", "clamp", "leaky_relu", "sigmoid", "tanh",
                    "hard_swish", "gelu")


class Binding:
    """One kernel call of a node, bound to the arrays it ran on, so that a
    replayed program (jitnn/executor.py) runs the node again with a single
    call instead of the op's checks and planning (~6 us of Python per
    convolution, a tenth of a small network's time on two threads).

    Valid while each Value of ``reads`` still holds the same array, each
    ``(value, key, form)`` of ``derived`` still has the same derived form
    (a packed filter, a padded bias), the step writes the same ``out`` and
    the context has the same thread count: then ``kernel(*args)`` is what the
    node's ``run`` would call, and ``out`` what it would return."""

    __slots__ = ("kernel", "args", "reads", "derived", "out", "threads")

    def __init__(self, kernel, args: tuple, reads: tuple, derived: tuple, out: np.ndarray,
                 threads: int):
        self.kernel, self.args, self.reads = kernel, args, reads
        self.derived, self.out, self.threads = derived, out, threads

    def valid(self, ctx: Context, out: np.ndarray | None) -> bool:
        if out is not self.out or ctx.num_threads != self.threads:
            return False
        for value, array in self.reads:
            if value._data is not array:
                return False
        for value, key, form in self.derived:
            if value._derived.get(key) is not form:
                return False
        return True


class ViewBinding(Binding):
    """A step that makes a view of its input (a reshape of a plan's buffer:
    ops/shape.py): nothing to call, and its result is the same view object
    while the input holds the same array. Valid then; it is given no buffer
    (``out`` is not checked)."""

    __slots__ = ()

    def valid(self, ctx: Context, out: np.ndarray | None) -> bool:
        return super().valid(ctx, self.out)


def _no_call() -> None:
    """A view step's kernel: the view is already there."""


def bind_view(ctx: Context, node: Node, result: np.ndarray) -> Binding | None:
    """The view ``result`` of node's plain input, bound to the input's array
    (a blocked input's view is of its readback copy: not bound)."""
    (source,) = node.inputs
    data = source._data
    if is_blocked(source) or not isinstance(data, np.ndarray) \
            or not isinstance(result, np.ndarray) or not np.shares_memory(result, data):
        return None
    return ViewBinding(_no_call, (), ((source, data),), (), result, ctx.num_threads)


def context_of(op: str, *values: object) -> Context:
    """The context of the Tensor arguments (the default one if none is a Tensor)."""
    ctx = None
    for v in values:
        if isinstance(v, Tensor):
            if ctx is None:
                ctx = v._v._ctx
            elif v._v._ctx is not ctx:
                raise JitnnValueError(f"{op}: the tensors belong to different contexts")
    return default_context() if ctx is None else ctx


#: what ``as_tensor``'s ``dtypes`` takes for an op that computes in float32 only
FLOAT_ONLY = (FLOAT32,)
#: ... and for one that takes every jitnn data type
ANY_DTYPE = DTYPES
#: the integer types (indices, masks, and the integer math of WebNN's ops)
INTEGER_DTYPES = tuple(d for d in DTYPES if d.kind in "iu")


def as_tensor(ctx: Context, value: object, op: str, name: str,
              dtypes: tuple = FLOAT_ONLY) -> Tensor:
    """A Tensor argument, or an array-like copied into one (once: the copy
    becomes the tensor's buffer, as in ``ctx.tensor``).

    ``dtypes``: the data types the op takes for this argument. A Tensor of
    another type is refused, naming the op; a host array converts to float32
    when the op computes in float32 only (``FLOAT_ONLY``, the default), else
    keeps its own type (``jitnn.tensor``'s rules) if the op takes it."""
    if isinstance(value, Tensor):
        if value.dtype not in dtypes:
            raise JitnnTypeError(
                f"{op}: {name} must have dtype {_names(dtypes)}, got a {value.dtype} tensor"
                + (" (convert it with jitnn.cast)" if FLOAT32 in dtypes else ""))
        return value
    try:
        if dtypes == FLOAT_ONLY:
            array = as_float32_copy(value, op=f"{op}: {name}")
        else:
            array = as_array_copy(value, op=f"{op}: {name}")
            if array.dtype not in dtypes:
                raise JitnnTypeError(
                    f"{op}: {name} must have dtype {_names(dtypes)}, got {array.dtype} data")
    except JitnnTypeError as error:
        raise JitnnTypeError(str(error)) from None
    return Tensor._holding(ctx, array)


def _names(dtypes: tuple) -> str:
    names = [d.name for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def value_of(t: "Tensor | Value | None") -> "Value | None":
    """The runtime Value behind a Tensor handle (nodes refer to Values only, so
    holding a node never looks like the user holding a tensor)."""
    return t._v if isinstance(t, Tensor) else t


def frozen(option: object) -> object:
    """An option as a cache-key part: lists become tuples (their type kept
    apart, so ``[1, 1]`` and ``(1, 1)`` validate the same but key apart)."""
    if isinstance(option, list):
        return ("list",) + tuple(frozen(v) for v in option)
    return option


def frozen_options(options: tuple) -> tuple:
    """An op's options as cache-key parts (:func:`frozen` of each; a tuple
    holding no list, the common case, as it is)."""
    if list in map(type, options):
        return tuple(map(frozen, options))
    return options


def pending(ctx: Context, shape: tuple[int, ...], layout: str, node: Node,
            axes: str = "nchw", dtype: np.dtype = FLOAT32) -> Tensor:
    """A new pending Tensor computed by ``node``, recorded with the context
    (which may run it at once under the eager and plain policies, or flush
    when the pending work passes its bound)."""
    value = Value(ctx, shape, layout, node=node, axes=axes, dtype=np.dtype(dtype))
    handle = Tensor._wrap(value)
    ctx.record(value)
    return handle


def int_pair(op: str, name: str, value: object, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each in ``[minimum, MAX_DIM]`` (jitnn/limits.py)."""
    items = (value, value) if isinstance(value, (int, np.integer)) else value
    try:
        items = tuple(items)
    except TypeError:
        raise JitnnTypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}") from None
    if len(items) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                  for v in items):
        raise JitnnTypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    if min(items) < minimum:
        raise JitnnValueError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    check_max(op, name, items, value)
    return int(items[0]), int(items[1])


def padding4(op: str, value: object) -> tuple[int, int, int, int]:
    """WebNN padding ``[top, bottom, left, right]`` from an int, an (h, w) pair or 4
    ints, each in ``[0, MAX_DIM]`` (jitnn/limits.py)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        items: Sequence = (value,) * 4
    else:
        try:
            items = tuple(value)  # type: ignore[arg-type]
        except TypeError:
            items = ()
        if len(items) == 2:
            items = (items[0], items[0], items[1], items[1])
    if len(items) != 4 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                  for v in items):
        raise JitnnTypeError(
            f"{op}: padding must be an int, an (h, w) pair or [top, bottom, left, right], "
            f"got {value!r}")
    if min(items) < 0:
        raise JitnnValueError(f"{op}: padding must be >= 0, got {value!r}")
    check_max(op, "padding", items, value)
    return tuple(int(v) for v in items)  # type: ignore[return-value]


def parse_activation(op: str, activation: object) -> tuple[int, float, float]:
    """``None``, ``"relu"``, ``"relu6"``, ``("clamp", lo, hi)``, ``("leaky_relu", alpha)``,
    ``"sigmoid"``, ``"tanh"``, ``"hard_swish"``, ``"gelu"`` -> (code, param0, param1)."""
    if activation is None:
        return epilogue.NONE, 0.0, 0.0
    name, params = (activation, ()) if isinstance(activation, str) else \
        (activation[0], tuple(activation[1:])) if isinstance(activation, tuple) and activation \
        else (None, ())
    expected = {"clamp": 2, "leaky_relu": 1}
    if name not in ACTIVATION_NAMES:
        raise JitnnValueError(
            f"{op}: activation must be None, one of {ACTIVATION_NAMES}, ('clamp', min, max) "
            f"or ('leaky_relu', alpha), got {activation!r}")
    if name == "relu6":
        name, params = "clamp", (0.0, 6.0)
    if name == "leaky_relu" and not params:
        params = (0.01,)  # WebNN's default alpha
    if len(params) != expected.get(name, 0) or not all(
            isinstance(p, (int, float, np.number)) and not isinstance(p, bool) for p in params):
        raise JitnnValueError(
            f"{op}: activation {name!r} takes {expected.get(name, 0)} number(s), got {activation!r}")
    # NaN is never a bound or an alpha; clamp's bounds may be infinite (WebNN's
    # defaults), an alpha may not (0 * inf would be NaN)
    names = {"clamp": ("min", "max"), "leaky_relu": ("alpha",)}.get(name, ())
    params = tuple(real_arg(op, f"activation {name!r}: {label}", p, finite=name != "clamp")
                   for label, p in zip(names, params))
    if name == "clamp" and not params[0] <= params[1]:
        raise JitnnValueError(f"{op}: clamp needs min <= max, got {activation!r}")
    params = params + (0.0, 0.0)
    return epilogue.ACTIVATIONS[name], params[0], params[1]


def axis_index(op: str, name: str, axis: object, rank: int, *, end: bool = False) -> int:
    """An axis in ``[-rank, rank)`` (``[-rank, rank]`` with ``end``), as a non-negative int."""
    top = rank + 1 if end else rank
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise JitnnTypeError(f"{op}: {name} must be an int, got {axis!r}")
    if not -rank <= axis < top:
        raise JitnnValueError(
            f"{op}: {name} must be in [{-rank}, {top - 1}] for a rank-{rank} tensor, got {axis}")
    return int(axis) + rank if axis < 0 else int(axis)


# --- physical forms -------------------------------------------------------------

def channel_axis(axes: str) -> int:
    """The logical channel axis of a 4-D tensor with axes ``"nchw"`` or ``"nhwc"``."""
    return 1 if axes == "nchw" else 3


def is_blocked(t: Tensor) -> bool:
    return layouts.block_of(t.layout) is not None


def _plain_view_of_blocked(t: Tensor, data: np.ndarray) -> np.ndarray | None:
    """The blocked buffer as the plain array when their memory orders coincide
    (no padding lanes and no interleaving), else None."""
    if not layouts.same_order_as_plain(t.shape, t._axes, data.shape[4]):
        return None
    return data.reshape(-1)[:t.size].reshape(t.shape)


def plain_buffer(t: Tensor, out: np.ndarray | None = None) -> np.ndarray:
    """``t``'s values as a C-contiguous array of its logical shape (read-only use).

    A plain tensor gives its own buffer. A blocked one gives a view of its
    buffer when the two orders coincide (``(N, C, 1, 1)`` with C a multiple of
    the block, block 1, ...), else a copy made by one reorder (counted in
    ``ctx.stats``), made once per tensor and cached; into ``out`` when given
    (a replay's readback step: the same array at every run).
    """
    data = t._materialize()
    if not is_blocked(t):
        return data
    view = _plain_view_of_blocked(t, data)
    if view is not None:
        return view
    return t._derive(("plain",), lambda: t._read_into(out, None))



def blocked_buffer(ctx: Context, t: Tensor, block: int, axes: str,
                   out: np.ndarray | None = None) -> np.ndarray:
    """``t`` (4-D) as an ``nChw{block}c`` buffer with logical axes ``axes``.

    ``t``'s own buffer when it is laid out so already; otherwise a reorder
    (counted in ``ctx.stats``; a tensor blocked another way is read back to
    plain first), made once per (tensor, block, axes) and cached; into
    ``out`` when given (a replay's reorder step: the same array at every run).
    """
    if layouts.block_of(t.layout) == block and t._axes == axes:
        return t._materialize()
    key = ("blocked", block, axes)
    cached = t._derived.get(key)
    if cached is not None:
        return cached
    plain = plain_buffer(t)          # outside t's lock: it may derive too
    return t._derive(key, lambda: to_blocked(ctx, plain, axes, block, out))


def plain_layout(ndim: int, axes: str = "nchw") -> str:
    """The layout tag of a plain result: ``axes`` for 4-D, else the rank's tag."""
    return axes if ndim == 4 else layouts.plain_tag(ndim)


def plain_result(ctx: Context, shape: tuple[int, ...],
                 compute: Callable[[np.ndarray], np.ndarray], x: Tensor, op: str,
                 axes: str = "nchw", dtype: np.dtype | None = None) -> Tensor:
    """The pending plain result ``compute(values of x)`` (``plain_buffer``), of
    ``dtype`` (``x``'s by default).

    The producer holds ``x``'s Value, not the caller's handle: a handle it
    kept would count as the caller holding ``x``, and ``x`` would be kept (an
    array of its own at every run) instead of a buffer the plan reuses."""
    return plain_op(ctx, op, (x,), shape, compute, axes=axes,
                    dtype=x.dtype if dtype is None else dtype)


def plain_op(ctx: Context, op: str, inputs: Sequence[Tensor], shape: tuple[int, ...],
             compute: Callable[..., np.ndarray], *, dtype: np.dtype = FLOAT32,
             axes: str = "nchw") -> Tensor:
    """The pending plain result ``compute(*plain values of inputs)``, of
    ``shape`` and ``dtype``: an op that runs as numpy code on plain buffers
    (index and shape work, integer math). ``compute`` must return a new
    C-contiguous array of that shape and dtype (it is cast if its dtype
    differs), never one of its inputs' buffers."""
    values = tuple(value_of(t) for t in inputs)
    dtype = np.dtype(dtype)

    def produce() -> np.ndarray:
        result = compute(*(plain_buffer(v) for v in values))
        if result.dtype != dtype or not result.flags.c_contiguous \
                or any(result is v._data for v in values):
            result = np.ascontiguousarray(result, dtype)
            if any(result is v._data for v in values):
                result = result.copy()
        # (the array compute returned when it has the shape: a view it keeps
        # the same at every run stays the same object)
        return result if result.shape == shape else result.reshape(shape)
    result = Tensor(ctx, shape, plain_layout(len(shape), axes), producer=produce, axes=axes,
                    inputs=tuple(inputs), op=op, dtype=dtype)
    node = result._v._node
    if node is not None:                 # (None: the eager policy ran it already)
        # its inputs are read plain: passes.insert_reorders plans the readback
        node.attrs["reads_plain"] = True
    return result


def plain_into_op(ctx: Context, op: str, inputs: Sequence[Tensor], shape: tuple[int, ...],
                  into: Callable[..., None], *, dtype: np.dtype, axes: str = "nchw") -> Tensor:
    """The pending plain result of ``into(*plain values of inputs, out)``,
    which writes it into ``out``, a C-contiguous array of ``shape`` and
    ``dtype`` (a numpy ufunc does: it broadcasts its operands and casts into
    ``out``). Unlike :func:`plain_op`'s, the node writes into the plan's
    buffer, and a replayed plan runs it as one bound call of ``into`` on the
    same arrays (a padding mask's comparisons, ~2 us instead of 10-40 us of
    Python each). ``into`` must not warn (no floating-point errors) and must
    read its operands only."""
    values = tuple(value_of(t) for t in inputs)
    if isinstance(into, np.ufunc):
        into = ufunc_into(into)
    node = Node(op, values, kind="plain_into", attrs={"into": into}, run=run_plain_into,
                sig=("plain_into", op))
    return pending(ctx, shape, plain_layout(len(shape), axes), node, axes=axes, dtype=dtype)


@functools.cache
def ufunc_into(ufunc: np.ufunc) -> Callable[..., None]:
    """``ufunc(*operands, out)`` with ``out`` passed by keyword (numpy's
    maximum and minimum no longer take it by position): an ``into`` function
    of :func:`plain_into_op`, or a bound call's kernel."""
    def into(*arrays: np.ndarray) -> None:
        ufunc(*arrays[:-1], out=arrays[-1])
    into.__name__ = into.__qualname__ = f"{ufunc.__name__}_into"
    return into


def run_plain_into(ctx: Context, node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    """The node of :func:`plain_into_op`, into ``out`` (the plan's buffer) if given."""
    arrays = [plain_buffer(v) for v in node.inputs]
    if out is None or out.dtype != value.dtype or out.shape != value.shape \
            or not out.flags.c_contiguous \
            or any(np.may_share_memory(out, a) for a in arrays):
        out = aligned_empty(value.shape, value.dtype)
    # (counted as a launch: its replayed bound call is one, jitnn/replay.py)
    ctx.launcher.launch(node.attrs["into"], *arrays, out)
    return out


def bind_plain_into(ctx: Context, node: Node, result: np.ndarray) -> Binding | None:
    """The call :func:`run_plain_into` just made, bound to its arrays (a
    replayed program runs it as one call: jitnn/executor.py); None when an
    input was read through a copy other than a blocked one's plain copy (a
    dropped constant made again). A blocked input's plain copy is a derived
    form, the same array at every run when a replay's readback step makes it
    (Bindings.keep_reorder)."""
    arrays, reads, derived = [], [], []
    for v in node.inputs:
        data = v._data
        if not isinstance(data, np.ndarray) or v._remake is not None:
            return None
        if layouts.block_of(v._layout) is not None:
            form = v._derived.get(("plain",))
            if form is None:
                form = plain_buffer(v)      # a view of the buffer: read in place
                if not np.may_share_memory(form, data):
                    return None
                reads.append((v, data))
            else:
                derived.append((v, ("plain",), form))
            arrays.append(form)
            continue
        arrays.append(data)
        reads.append((v, data))
    return Binding(node.attrs["into"], (*arrays, result), tuple(reads), tuple(derived),
                   result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_plain_into.bind = bind_plain_into

register_kind(NodeKind("plain_into", writes_into_buffer=True))
