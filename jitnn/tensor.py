"""Tensor: an immutable value owned by a Context.

Its data type is float32 (what every compute kernel works in) or one of the
integer types of WebNN: int32, int64, uint32, int8, uint8 (uint8 also holds
booleans: comparisons and logical ops give 0 or 1). float16 is not a jitnn
data type: convert it with ``dtype="float32"``.

A Tensor has a logical shape (what the user sees) and a physical layout (how
its buffer lies in memory now): plain row-major (``"nchw"`` for a 4-D tensor,
``"nc"`` for 2-D, ...) or blocked (``"nChw8c"``). A 4-D tensor also knows
which logical axes it has (``nchw`` or ``nhwc``), so a blocked buffer is read
back in the right order.

A tensor may be *pending*: produced by an op that has not run yet. Reading it
(:meth:`Tensor.numpy`, ``np.asarray``, :meth:`Tensor.read_async`,
``jitnn.read_all``) runs what it needs first. ``repr`` never does.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import layouts
from .defaults import default_context
from .errors import JitnnBufferError, JitnnTypeError, JitnnValueError
from .kernels.buffers import aligned_empty
from .limits import MAX_DIM, check_shape
from .kernels import layout as layout_kernels

if TYPE_CHECKING:
    from .context import Context

FLOAT32 = np.dtype(np.float32)

#: the data types a tensor may have (float32 first: the compute type)
DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in (
    np.float32, np.int32, np.int64, np.uint32, np.int8, np.uint8))
#: their names, as WebNN and ``dtype=`` spell them
DTYPE_NAMES = tuple(d.name for d in DTYPES)

#: numpy dtype kinds that convert to float32 by value: bool, ints, floats.
_NUMERIC_KINDS = "biuf"

#: DLPack's device of every tensor: (kDLCPU, device 0)
_DLPACK_CPU = (1, 0)

#: host integer types jitnn does not keep, and the type that holds each one's values
_WIDENED = {np.dtype(np.int16): np.dtype(np.int32), np.dtype(np.uint16): np.dtype(np.int32),
            np.dtype(np.bool_): np.dtype(np.uint8)}


def dtype_arg(op: str, dtype: object, name: str = "dtype") -> np.dtype:
    """A jitnn data type from a name (``"float32"``, ``"int64"``, WebNN's
    spelling) or a numpy dtype; float16 and anything else is refused."""
    try:
        found = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        found = None
    if found is None or found not in DTYPES or isinstance(dtype, bool):
        extra = (" (float16 is not a jitnn data type: convert the data to float32)"
                 if found == np.float16 else "")
        raise JitnnTypeError(f"{op}: {name} must be one of {', '.join(DTYPE_NAMES)}, "
                             f"got {dtype!r}{extra}")
    return found


def host_array(data: object, op: str = "tensor") -> np.ndarray:
    """``data`` as a numpy array, without a copy where numpy can view it:
    an ndarray as it is; an object with ``__dlpack__`` (a PyTorch, JAX or
    CuPy array, a jitnn Tensor) through ``np.from_dlpack``; anything else
    through ``np.asarray`` (``__array_interface__``, ``__array__``, the buffer
    protocol, nested lists). Callers copy it: a tensor never shares the
    caller's memory. Only real numbers (bool, int, float) pass."""
    if isinstance(data, np.ndarray):
        array = data
    elif hasattr(type(data), "__dlpack__"):
        try:
            array = np.from_dlpack(data)
        except (BufferError, TypeError, ValueError, RuntimeError) as error:
            # another device, a type numpy lacks (bfloat16), a torch tensor
            # that requires grad: the producer's message says which
            kind = type(data)
            raise JitnnTypeError(
                f"{op}: cannot read the {kind.__module__}.{kind.__qualname__} through "
                f"DLPack ({type(error).__name__}: {error})") from None
    else:
        try:
            array = np.asarray(data)
        except (ValueError, TypeError) as error:  # ragged nested sequences
            raise JitnnTypeError(
                f"{op}: expected an array of numbers, got a {type(data).__name__} "
                f"that numpy cannot make a regular array of ({error})") from None
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise JitnnTypeError(
            f"{op}: expected real numbers (bool, int or float), got dtype "
            f"{array.dtype} from a {type(data).__name__}")
    return array


def as_float32_copy(data: object, op: str = "tensor") -> np.ndarray:
    """A new C-contiguous float32 array with the values of ``data``.

    float64 is rounded to the nearest float32; integers and bools convert by
    value (exact up to 2**24 in magnitude). Complex numbers, objects, strings
    and ragged nested lists are rejected with a :class:`JitnnTypeError`.
    """
    array = host_array(data, op)
    out = aligned_empty(array.shape)    # 64-byte aligned, as every tensor buffer
    np.copyto(out, array, casting="unsafe")
    return out


def natural_dtype(array: np.ndarray, op: str = "tensor") -> np.dtype:
    """The jitnn data type a host array keeps: floats become float32 (float16
    is refused), bools uint8, int16/uint16 int32, uint64 int64 (if its values
    fit); the other integer types stay."""
    dtype = array.dtype
    if dtype.kind == "f":
        if dtype == np.float16:
            raise JitnnTypeError(
                f"{op}: float16 is not a jitnn data type (jitnn computes in float32); "
                "convert it: jitnn.tensor(data, dtype='float32')")
        return FLOAT32
    if dtype in DTYPES:
        return dtype
    if dtype in _WIDENED:
        return _WIDENED[dtype]
    if dtype == np.uint64:
        if array.size and array.max() > np.iinfo(np.int64).max:
            raise JitnnValueError(f"{op}: uint64 values above 2**63 - 1 do not fit int64, "
                                  "the widest jitnn integer type")
        return np.dtype(np.int64)
    raise JitnnTypeError(f"{op}: dtype {dtype} is not a jitnn data type "
                         f"({', '.join(DTYPE_NAMES)})")


def as_array_copy(data: object, op: str = "tensor", dtype: object = None) -> np.ndarray:
    """A new aligned, C-contiguous array with the values of ``data``, of
    ``dtype`` (converted by value, as numpy's ``astype``) or else of the data's
    own type (:func:`natural_dtype`)."""
    array = host_array(data, op)
    target = natural_dtype(array, op) if dtype is None else dtype_arg(op, dtype)
    out = aligned_empty(array.shape, target)
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(out, array, casting="unsafe")
    return out


#: guards every Value's consumer list (appends and pruning) and the making of
#: a Value's own lock
_CONSUMERS_LOCK = threading.Lock()


class Node:
    """One pending op application: what produces a pending :class:`Value`.

    ``op`` is the op's name (what ``explain`` shows), ``inputs`` the Values it
    reads (the scheduler orders and frees buffers by them), ``attrs`` the
    options a scheduler pass may rewrite (a fused activation, a residual, a
    folded batch normalization), ``fused`` the names of ops folded into it, and
    ``run(ctx, node, value)`` computes the output buffer (in ``value``'s layout).
    A node made from a closure (``Tensor(..., producer=f)``) has ``kind``
    ``"opaque"``: the scheduler runs it as it is and fuses nothing into it.

    ``sig`` (optional, set by the op that records the node): a hashable that
    compares equal only between nodes whose ``op``, ``kind``, ``run``,
    ``flops`` and ``attrs`` are the same once their inputs are matched up
    (``attrs`` hold no Value that is not an input). Flushes of DAGs made of
    such nodes reuse their plans (jitnn/plan_cache.py); a node without one
    is planned anew every time. ``run`` may differ where it is a closure no
    pass copies into another node (an opaque node, a plain broadcast binary
    op): a reused plan runs the node its own flush recorded.
    """

    __slots__ = ("op", "kind", "inputs", "attrs", "run", "fused", "flops", "memo", "sig")

    def __init__(self, op: str, inputs: tuple["Value", ...] = (), *, kind: str = "opaque",
                 attrs: dict | None = None, run: Callable | None = None,
                 fused: tuple[str, ...] = (), flops: int = 0, sig: object = None):
        self.op = op
        self.kind = kind
        self.inputs = tuple(inputs)
        self.attrs = attrs or {}
        self.run = run
        self.fused = fused
        self.flops = flops
        #: what ``run`` may keep between runs of this node (a replayed program
        #: runs the same nodes again); never copied by :meth:`replace`
        self.memo = None
        self.sig = sig

    def replace(self, **changes) -> "Node":
        """A copy with some fields changed (passes never mutate a node in
        place); the copy has no ``memo`` and no ``sig`` (its attrs differ)."""
        fields = {name: getattr(self, name) for name in self.__slots__
                  if name not in ("memo", "sig")}
        fields.update(changes)
        op, inputs = fields.pop("op"), fields.pop("inputs")
        return Node(op, inputs, **fields)

    @property
    def label(self) -> str:
        return " + ".join((self.op,) + self.fused)

    def __repr__(self) -> str:
        return f"Node({self.label}, {len(self.inputs)} inputs)"


def exact(number: float) -> tuple:
    """A float as a key part: ``0.0`` and ``-0.0`` compare equal, and hash
    alike, but may give different results."""
    return (number, math.copysign(1.0, number)) if number == 0 else (number,)


class Token:
    """A sig that is equal only to itself: one per validated op signature
    (a key holding it keeps it alive, so no other token takes its identity).

    ``memo``: the memo of the last single-op flush of a node with this
    signature (scheduler's ``_single_op_plan``), which an eager conv then
    finds again instead of planning its launch (~7 us); the op's run
    function checks it before use, as a reused plan's."""

    __slots__ = ("what", "memo")

    def __init__(self, what: str):
        self.what = what
        self.memo: object = None

    def __repr__(self) -> str:
        return f"Token({self.what})"


class Value:
    """The runtime's side of a tensor: its buffer, or the node that makes it.

    A :class:`Tensor` is the user's handle on a Value. Nodes refer to Values,
    never to handles, so whether the user still holds a result is just whether
    its handle is alive (``held``); a pending Value nobody holds may be fused
    away by the scheduler and is then never materialized.
    """

    __slots__ = ("_ctx", "_shape", "_axes", "_layout", "_data", "_node", "_lock",
                 "_derived", "_handle", "_consumers", "_plan", "_released", "_dtype",
                 "_droppable", "_remake", "_graph_input", "__weakref__")

    def __init__(self, ctx: "Context", shape: tuple[int, ...], layout: str,
                 data: np.ndarray | None = None, node: Node | None = None,
                 axes: str = "nchw", dtype: np.dtype = FLOAT32):
        self._ctx = ctx
        # float32, or an integer type (then the layout is plain: only float32
        # is ever blocked)
        self._dtype = dtype if data is None else data.dtype
        self._shape = tuple(map(int, shape))
        # every op's result passes here before it is recorded: one that no
        # memory could hold is refused at the call (jitnn/limits.py). A count
        # from 1 to MAX_DIM bounds every dimension too: the check itself
        # (0.4 us) runs only past that, or for an empty tensor.
        if node is not None and not 0 < math.prod(self._shape) <= MAX_DIM:
            check_shape(node.op, "the result's shape", self._shape)
        self._axes = axes
        self._layout = layout
        self._data = data
        self._node = node
        # made at the first _derive (most values never derive anything)
        self._lock: threading.RLock | None = None
        # Forms derived from this value once and reused: a packed filter per
        # block size, the blocked copy of a plain input. Values are immutable,
        # so these never go stale.
        self._derived: dict = {}
        self._handle: Callable[[], object] | None = None    # weakref to the Tensor
        self._consumers: list = []                         # weakrefs to consumer Values
        self._plan = None                                  # the plan that computed it
        self._released = False                             # buffer handed back for reuse
        # A graph constant that only packing ops read (see Graph) is droppable:
        # once packed, its plain buffer is let go and _remake unpacks it from the
        # packed form for any later reader (_drop_plain)
        self._droppable = False
        self._remake: Callable[[], np.ndarray] | None = None
        # A graph's input, fed anew at every call (a replayed program puts the
        # next call's array in this same Value): no constant to fold into a filter
        self._graph_input = False
        if node is not None:
            me = weakref.ref(self)
            for source in node.inputs:
                source._add_consumer(me)

    # the same read-only vocabulary as Tensor, so ops take either
    shape = property(lambda self: self._shape)
    layout = property(lambda self: self._layout)
    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: math.prod(self._shape))
    dtype = property(lambda self: self._dtype)

    @property
    def held(self) -> bool:
        """True while the user holds a Tensor handle on this value."""
        return self._handle is not None and self._handle() is not None

    def _add_consumer(self, ref: "weakref.ref[Value]") -> None:
        # A constant is read by every dispatch of its graph: drop the dead
        # references whenever the list doubles, so it stays as long as the
        # live ones (amortized O(1); under a lock of its own, no append is
        # lost, and _derive's lock may be held by the caller).
        with _CONSUMERS_LOCK:
            consumers = self._consumers
            consumers.append(ref)
            if len(consumers) >= 16 and len(consumers) & (len(consumers) - 1) == 0:
                consumers[:] = [r for r in consumers if r() is not None]

    def __repr__(self) -> str:
        state = ", pending" if self._data is None else ""
        kind = "" if self._dtype == FLOAT32 else f", {self._dtype}"
        return f"Value({self._shape}, {self._layout}{kind}{state})"

    def _materialize(self) -> np.ndarray:
        """The physical buffer, running the pending work it needs first."""
        data = self._data
        if data is not None:
            return data if self._remake is None else self._remake()
        if self._released:
            raise RuntimeError(  # a scheduler bug, never a silently wrong answer
                f"jitnn internal error: {self!r} was freed by the scheduler but is read")
        self._ctx.flush_values([self])
        return self._data

    def _drop_plain(self, remake: Callable[[], np.ndarray]) -> None:
        """Let go of a droppable constant's buffer, which ``remake()`` makes
        again (from a packed form holding the same numbers): a model's
        weights are then kept once, packed, instead of twice. ``_data`` becomes
        a read-only view of one zero (no memory; the value stays computed);
        readers get the numbers through :meth:`_materialize`, which is how
        the packing ops read their weights."""
        if not self._droppable or self._remake is not None or self._data is None:
            return
        self._remake = remake
        self._data = np.broadcast_to(np.zeros((), self._dtype), self._shape)

    def _derive(self, key: tuple, make: Callable[[], object]) -> object:
        """``make()`` once per key for this value, then the stored result.

        ``make`` runs under this value's lock, so it must not run pending work
        (a flush takes the context's lock, and a flushing thread may be
        waiting for this one): materialize what it reads before calling."""
        value = self._derived.get(key)
        if value is None:
            lock = self._lock
            if lock is None:
                with _CONSUMERS_LOCK:
                    if self._lock is None:
                        # re-entrant: a form may be derived from another form of
                        # the same value (a blocked filter's packing reads its
                        # plain copy first)
                        self._lock = threading.RLock()
                    lock = self._lock
            with lock:
                value = self._derived.get(key)
                if value is None:
                    value = self._derived[key] = make()
        return value

    def _check_out(self, out: object, op: str) -> np.ndarray:
        if not isinstance(out, np.ndarray):
            raise JitnnTypeError(
                f"{op}: out must be a numpy.ndarray, got {type(out).__name__}")
        if out.dtype != self._dtype:
            raise JitnnTypeError(f"{op}: out must have dtype {self._dtype}, got {out.dtype}")
        if out.shape != self._shape:
            raise JitnnValueError(
                f"{op}: out has shape {out.shape} but the tensor's shape is {self._shape}")
        if not out.flags.c_contiguous:
            raise JitnnValueError(
                f"{op}: out must be C-contiguous, got strides {out.strides} "
                f"for shape {out.shape}")
        if not out.flags.writeable:
            raise JitnnValueError(f"{op}: out is read-only")
        return out

    def _read_into(self, out: np.ndarray | None, threads: int | None) -> np.ndarray:
        """One copy from the physical buffer into ``out`` (allocated if None)."""
        data = self._materialize()
        if out is None:
            out = aligned_empty(self._shape, self._dtype)
        if layouts.block_of(self._layout) is None:
            np.copyto(out, data)
            return out
        kernel = layout_kernels.blocked_to_nchw if self._axes == "nchw" \
            else layout_kernels.blocked_to_nhwc
        return self._ctx.launcher.reorder(kernel, data, out, threads=threads)


class Tensor:
    """An immutable tensor (float32, or an integer type: see :data:`DTYPES`).
    Make one with ``jitnn.tensor(array)``.

    The user's handle on a :class:`Value`. Ops return pending Tensors; reading
    one (:meth:`numpy`, ``np.asarray``, :meth:`read_async`, ``jitnn.read_all``)
    runs the work it needs. ``repr`` never does.
    """

    __slots__ = ("_v", "__weakref__")

    def __init__(self, ctx: "Context", shape: tuple[int, ...], layout: str,
                 data: np.ndarray | None = None,
                 producer: Callable[[], np.ndarray] | None = None,
                 axes: str = "nchw", inputs: tuple = (), op: str = "op",
                 dtype: np.dtype = FLOAT32):
        # Internal: users call ctx.tensor() / jitnn.tensor(). An op passes
        # ``producer`` (a closure computing the buffer) and the ``inputs`` it
        # reads, or builds a Node itself and uses Tensor._wrap.
        node = None
        if data is None:
            if producer is None:
                raise JitnnValueError("Tensor: give data or a producer")
            # no pass looks into an opaque node, and a reused plan runs the
            # node recorded for its flush, so its op names it (see Node.sig)
            node = Node(op, tuple(_value_of(t) for t in inputs),
                        run=lambda ctx_, node_, value_, out_: producer(), sig=("opaque", op))
        value = Value(ctx, shape, layout, data=data, node=node, axes=axes, dtype=dtype)
        self._v = value
        value._handle = weakref.ref(self)
        if node is not None:
            ctx.record(value)

    @classmethod
    def _wrap(cls, value: Value) -> "Tensor":
        """The handle on ``value`` (a Value has at most one live handle)."""
        handle = value._handle() if value._handle is not None else None
        if handle is None:
            handle = object.__new__(cls)
            handle._v = value
            value._handle = weakref.ref(handle)
        return handle

    @classmethod
    def _from_host(cls, ctx: "Context", data: object, dtype: object = None) -> "Tensor":
        if isinstance(data, Tensor):
            if data._v._ctx is ctx and (dtype is None or np.dtype(dtype) == data.dtype):
                return data  # tensors are immutable: sharing is a copy
            data = data.numpy()
        return cls._holding(ctx, as_array_copy(data, "tensor", dtype))

    @classmethod
    def _holding(cls, ctx: "Context", array: np.ndarray) -> "Tensor":
        """A plain Tensor whose buffer is ``array`` itself (no copy: the caller
        made it, or reads it only while a call runs)."""
        return cls(ctx, array.shape, layouts.plain_tag(array.ndim), data=array)

    @classmethod
    def _input_holding(cls, ctx: "Context", array: np.ndarray) -> "Tensor":
        """:meth:`_holding` for a graph input's array, marked as one."""
        tensor = cls._holding(ctx, array)
        tensor._v._graph_input = True
        return tensor

    # --- what it is -------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._v._shape

    @property
    def dtype(self) -> np.dtype:
        return self._v._dtype

    @property
    def ndim(self) -> int:
        return len(self._v._shape)

    @property
    def size(self) -> int:
        return self._v.size

    @property
    def layout(self) -> str:
        """Physical layout: ``"nchw"``, ``"nhwc"``, ``"nChw8c"``, ``"nc"``, ...
        (for a pending tensor, the layout it will have)."""
        return self._v._layout

    @property
    def context(self) -> "Context":
        return self._v._ctx

    @property
    def pending(self) -> bool:
        """True while the op that produces this tensor has not run yet."""
        return self._v._data is None

    def __repr__(self) -> str:
        v = self._v
        state = ", pending" if v._data is None else ""
        return f"Tensor(shape={v._shape}, dtype={v._dtype}, layout={v._layout}{state})"

    # Tensors are immutable values: a copy is the same tensor. A pickle holds
    # the values (a pending tensor is computed first) and the context (as its
    # arguments: jitnn/defaults.py), not the buffer: the receiver gets a plain
    # tensor of the same values in its context of those arguments.
    def __copy__(self) -> "Tensor":
        return self

    def __deepcopy__(self, memo: dict) -> "Tensor":
        return self

    def __reduce__(self):
        value = self._v
        if value._ctx.symbolic:
            raise JitnnTypeError("Tensor: a GraphBuilder's placeholder has no values to "
                                 "pickle; build the graph and pickle the Graph")
        return _unpickle_tensor, (value._ctx, self.numpy(), value._axes)

    # internals the ops and tests reach through the handle
    _ctx = property(lambda self: self._v._ctx)
    _axes = property(lambda self: self._v._axes)
    _layout = property(lambda self: self._v._layout)
    _data = property(lambda self: self._v._data)
    _derived = property(lambda self: self._v._derived)

    def _materialize(self) -> np.ndarray:
        return self._v._materialize()

    def _derive(self, key: tuple, make: Callable[[], object]) -> object:
        return self._v._derive(key, make)

    def _check_out(self, out: object, op: str) -> np.ndarray:
        return self._v._check_out(out, op)

    def _read_into(self, out: np.ndarray | None, threads: int | None) -> np.ndarray:
        return self._v._read_into(out, threads)

    # --- readback -------------------------------------------------------------------

    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """The values in standard (row-major) layout, as an array the caller owns.

        With ``out`` (the tensor's dtype and shape, C-contiguous, writeable) the values
        are written into it with one copy and ``out`` is returned.
        """
        if out is not None:
            self._v._check_out(out, op="numpy")
        return self._v._read_into(out, None)

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    async def read_async(self, out: np.ndarray | None = None) -> np.ndarray:
        """``await t.read_async()``: the readback on a worker thread."""
        return await self._v._ctx.read_async(self, out)

    # --- DLPack (the array API's interchange: np.from_dlpack, torch.from_dlpack) ---

    def __dlpack__(self, *, stream: object = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None
                   ) -> object:
        """A DLPack capsule of the values (``np.from_dlpack(t)``,
        ``torch.from_dlpack(t)``): a pending tensor is computed, and its
        values read into a new standard-layout array whose ``__dlpack__``
        is returned; the capsule keeps that array alive for its consumer.

        The export is always that copy (the tensor's own buffer may be
        blocked, and a tensor is immutable, so it never lends it out):
        ``copy=False`` raises ``BufferError``, as the array API asks of an
        exporter that would have to copy. ``stream`` must be None (CPU) and
        ``dl_device``, if given, the CPU: ``(1, 0)``."""
        if stream is not None:
            raise JitnnBufferError(f"__dlpack__: a jitnn Tensor is on the CPU, which has no "
                                   f"streams; stream must be None, got {stream!r}")
        if copy is False:
            raise JitnnBufferError(
                "__dlpack__: a jitnn Tensor is exported by reading its values into a new "
                "array (its buffer may be blocked, and tensors are immutable), so "
                "copy=False cannot be honoured; pass copy=None or True")
        if dl_device is not None and tuple(dl_device) != _DLPACK_CPU:
            raise JitnnBufferError(f"__dlpack__: a jitnn Tensor is on the CPU {_DLPACK_CPU}, "
                                   f"dl_device {dl_device!r} was asked")
        # (max_version None: a legacy consumer, which numpy gives an unversioned capsule)
        return self.numpy().__dlpack__(max_version=max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: DLPack's CPU device (kDLCPU), device 0."""
        return _DLPACK_CPU


def _unpickle_tensor(ctx: "Context", values: np.ndarray, axes: str) -> Tensor:
    """A pickled tensor in the receiving process: its values, copied into an
    aligned buffer (as every tensor's), plain, with the same logical axes."""
    data = as_array_copy(values, "unpickle")
    layout = axes if data.ndim == 4 else layouts.plain_tag(data.ndim)
    return Tensor(ctx, data.shape, layout, data=data, axes=axes)


def _value_of(t: "Tensor | Value") -> Value:
    return t._v if isinstance(t, Tensor) else t


def tensor(data: object, ctx: "Context | None" = None, dtype: object = None) -> Tensor:
    """A Tensor holding a copy of ``data`` (later changes to ``data`` never
    leak in). Without ``dtype``: floats become float32 (float64 is rounded;
    float16 is refused), integer arrays keep their type (int16 and uint16
    widen to int32, uint64 to int64), bools become uint8 (0/1, WebNN's
    booleans). ``dtype=`` converts by value to one of :data:`DTYPES`.
    Complex, object, string and ragged input raise ``TypeError``."""
    return (ctx or default_context()).tensor(data, dtype=dtype)


def reorder(t: Tensor | np.ndarray, layout: str, *, axes: str | None = None) -> Tensor:
    """The same values as ``t`` in physical layout ``layout``.

    ``layout`` is a blocked tag (``"nChw8c"``, any block in
    ``jitnn.layouts.BLOCK_SIZES``) or the plain tag of ``t``'s rank
    (``"nchw"``/``"nhwc"`` for 4-D). ``axes`` says what the 4 axes of a plain
    ``t`` mean, ``"nchw"`` (default) or ``"nhwc"``, which decides the channel
    axis that gets blocked. Counted in ``ctx.stats`` as a reorder.
    """
    if not isinstance(t, Tensor):
        t = tensor(t)
    ctx = t._ctx
    block = layouts.block_of(layout)
    source_block = layouts.block_of(t._layout)
    if axes is None:
        axes = t._axes
    elif axes not in layouts.ACTIVATION_LAYOUTS:
        raise JitnnValueError(f"reorder: axes must be 'nchw' or 'nhwc', got {axes!r}")
    elif source_block is not None and axes != t._axes:
        raise JitnnValueError(
            f"reorder: the tensor is blocked with axes {t._axes!r}; axes={axes!r} "
            "cannot reinterpret it")
    if block is None:
        plain = layouts.plain_tag(t.ndim)
        if t.ndim == 4 and layout in layouts.ACTIVATION_LAYOUTS:
            plain = axes
        if layout != plain:
            raise JitnnValueError(
                f"reorder: a {t.ndim}-D tensor can be laid out as {plain!r} or "
                f"'nChw{{b}}c' with b in {layouts.BLOCK_SIZES}, got {layout!r}")
        if source_block is None:
            return Tensor(ctx, t.shape, plain, data=t._materialize(), axes=axes)
        return Tensor(ctx, t.shape, plain, data=t.numpy(), axes=axes)
    layouts.check_block(block, op="reorder")
    if t.ndim != 4:
        raise JitnnValueError(
            f"reorder: blocked layout {layout!r} needs a 4-D tensor, got shape {t.shape}")
    if source_block == block:
        return t
    plain = t._materialize() if source_block is None else t.numpy()
    return Tensor(ctx, t.shape, layout, data=to_blocked(ctx, plain, axes, block), axes=axes)


def to_blocked(ctx: "Context", plain: np.ndarray, axes: str, block: int | None = None,
               out: np.ndarray | None = None) -> np.ndarray:
    """Reorder a plain 4-D array (logical ``axes`` "nchw" or "nhwc") to
    ``nChw{block}c`` (the context's block by default), counted as a reorder;
    into ``out`` when given (of that blocked shape, C-contiguous)."""
    block = ctx.block if block is None else block
    nchw = plain.shape if axes == "nchw" else \
        (plain.shape[0], plain.shape[3], plain.shape[1], plain.shape[2])
    if out is None:
        out = aligned_empty(layouts.blocked_shape(nchw, block))
    kernel = layout_kernels.nchw_to_blocked if axes == "nchw" \
        else layout_kernels.nhwc_to_blocked
    return ctx.launcher.reorder(kernel, np.ascontiguousarray(plain), out)
