"""The executor: runs a scheduler plan, step by step, and times each step.

Buffers follow ``plan_buffers``: an intermediate reuses the array of a dead
one; a dead intermediate is released (its value can never be read again: the
scheduler only frees what nobody holds or reads later). The plan keeps only
descriptions and timings once it has run, so ``explain`` on a result never
keeps its inputs alive.

``ctx.compute`` asks :func:`execute` for a :class:`Capture` of the steps
(with their values and nodes) before they are dropped, and runs them again
with :func:`replay` (see jitnn/replay.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np
from numba.core.dispatcher import Dispatcher

from . import compile_pool
from .instrumentation import add_kernel_seconds, kernel_seconds
from .kernels._config import ThreadCountKernel
from .kernels.buffers import aligned_empty
from .errors import JitnnExecutionError
from .ops._common import Binding, ViewBinding, blocked_buffer, plain_buffer
from .plan import Plan, Step, physical_shape
from .registry import kind_of
from .tensor import Node, Value

if TYPE_CHECKING:
    from .context import Context


@dataclasses.dataclass(frozen=True)
class CapturedStep:
    """One step of a plan with what running it again needs (the plan's own
    step keeps its description and gets each run's times)."""

    step: Step
    value: Value
    node: Node | None
    frees: tuple
    shape: tuple[int, ...]         # the value's physical shape (its slot's view)


@dataclasses.dataclass
class Capture:
    """What :func:`execute` saw: the steps, and for each buffer slot its array:
    the arena's views (``Plan.arena``), or for a slot of its own the array
    its first writer made, when that writer is a kernel that writes into the
    buffer it is given (a run again hands it the same array: no allocation)."""

    steps: list[CapturedStep] = dataclasses.field(default_factory=list)
    seeds: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def _out_from_slot(slots: dict[str, np.ndarray], name: str, shape: tuple[int, ...],
                   dtype: np.dtype, place: tuple = ()):
    """A ``shape`` view of the start of the slot's array, as ``dtype`` (a slot
    serves values of its size in bytes or smaller, of any type), or None when
    the slot has no array that fits. ``place``: a value written into a join's
    buffer (``Step.buffer_place``): the view at its offset, the slot made
    whole if no step has made it yet."""
    array = slots.get(name)
    offset = 0
    if place:
        offset, size = place
        if array is None:
            array = slots[name] = aligned_empty((size,), dtype)
    if array is None or not array.flags.c_contiguous:
        return None          # (a join then copies this input, as it would anyway)
    count = math.prod(shape)
    if array.dtype == dtype:
        if array.size < offset + count:
            return None
        return array.reshape(-1)[offset:offset + count].reshape(shape)
    # (an arena slot's bytes, or a slot made for a value of another type)
    item = dtype.itemsize
    if array.nbytes < (offset + count) * item:
        return None
    return array.reshape(-1).view(np.uint8)[offset * item:(offset + count) * item] \
        .view(dtype).reshape(shape)


def arena_slots(plan: Plan) -> dict[str, np.ndarray]:
    """The plan's arena slots (``Plan.arena``): byte views of one new array."""
    if not plan.arena:
        return {}
    arena = aligned_empty((plan.arena_bytes,), np.uint8)
    return {name: arena[offset:offset + size] for name, (offset, size) in plan.arena.items()}


def _owner(array: np.ndarray) -> np.ndarray:
    """The array that owns ``array``'s memory (numpy's ``base`` of a view)."""
    return array if array.base is None else array.base


def _release(dead_values) -> None:
    """Hand the buffers of values nobody reads again back (their slots are reused)."""
    for dead in dead_values:
        dead._data = None
        dead._released = True
        dead._derived.clear()


def run_node(ctx: "Context", node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    """``node.run``; a failure is re-raised naming the op (and the ops fused
    into it) and its output, whatever the kernel's own message said."""
    try:
        return node.run(ctx, node, value, out)
    except JitnnExecutionError:
        raise                              # an inner op's failure, already named
    except Exception as error:
        raise JitnnExecutionError(
            f"{node.label}: failed when run (output shape {value.shape}, inputs "
            f"{[tuple(i.shape) for i in node.inputs]}): {type(error).__name__}: {error}"
        ) from error


def _run_op(ctx: "Context", step, slots: dict[str, np.ndarray], plan: Plan) -> int:
    """Run an op step; returns how many ops it fused (counted per flush)."""
    v = step.value
    node = step.node
    out = _out_from_slot(slots, step.buffer, physical_shape(v), v.dtype,
                         step.buffer_place) if step.buffer else None
    data = run_node(ctx, node, v, out)
    v._data = data
    v._node = None            # drops the references to its inputs
    v._plan = plan
    if step.buffer and data is not out and not step.buffer_place:
        # the slot's array is what the op returned (the view it was given
        # leaves the slot its whole array, for larger values later)
        slots[step.buffer] = data
    _release(step.frees)
    return len(node.fused)


def execute(ctx: "Context", plan: Plan, capture: Capture | None = None) -> None:
    """Run every step of ``plan``; values get their buffers, plan its times.
    With ``capture``, also record what :func:`replay` needs to run it again."""
    slots = arena_slots(plan)
    if capture is not None:
        capture.seeds.update(slots)        # the same arena at every run again
    start = time.perf_counter()
    previous = ctx.launcher.tracing(None)
    fused = 0
    in_kernels = kernel_seconds()           # this thread's time in kernels so far

    def run_step(step) -> None:
        nonlocal fused
        t0 = time.perf_counter()
        ctx.launcher.tracing(step.inner_reorders)
        if step.kind == "reorder" and not step.reorder_block:
            plain_buffer(step.value)
        elif step.kind == "reorder":
            blocked_buffer(ctx, step.value, step.reorder_block, step.reorder_axes)
            # the reorder's own count is in inner_reorders; show it as the step
            step.inner_reorders.clear()
        else:
            first = step.buffer and step.buffer not in slots
            fused += _run_op(ctx, step, slots, plan)
            if capture is not None and first and kind_of(step.node).writes_into_buffer:
                capture.seeds[step.buffer] = slots[step.buffer]
        step.seconds = time.perf_counter() - t0

    # A cold process: a forked child runs the steps ahead without their
    # kernels, and worker processes compile the kernels it finds, the last
    # steps' first, while this one runs (and compiles) from the first
    # (jitnn/compile_pool.py).
    compile_pool.compile_plan_ahead(len(plan.steps),
                                    lambda: [run_step(step) for step in plan.steps])
    try:
        for step in plan.steps:
            run_step(step)
    finally:
        ctx.launcher.tracing(previous)
        if fused:
            ctx.launcher.count(fused_ops=fused)
    plan.seconds = time.perf_counter() - start
    plan.kernel_seconds = kernel_seconds() - in_kernels
    for home, node in plan.memo_homes:     # what the nodes memoized, for the next plan
        home.memo = node.memo
    plan.memo_homes = []
    if capture is not None:
        capture.steps = [CapturedStep(step, step.value, step.node, step.frees,
                                      physical_shape(step.value) if step.buffer else ())
                         for step in plan.steps]
    # keep descriptions only: the values may go (a node's memo may say how
    # its kernel was chosen at this run: a conv's algorithm, jitnn/tuning.py)
    for step in plan.steps:
        notes = getattr(step.node.memo, "notes", None) if step.node is not None else None
        if notes:
            step.notes, step.layouts_in = notes, step.node.memo.layouts
        step.value = step.node = None
        step.frees = ()
    plan.roots = []


class Bindings:
    """What :func:`replay` keeps between the runs of one program so that a
    step runs as one bound kernel call (:class:`jitnn.ops._common.Binding`)
    instead of through its op: per step its binding (None: not bound yet,
    False: never, its arrays change every run), and the arrays that are the
    same at every run. Those are the program's seeds and the views of them
    this replay hands out (a view made anew per run would never match a
    binding), and only those may be bound, with the static Values' arrays
    (the graph's constants, kept by the program's nodes anyway): a binding
    never keeps an array of one run alive for the next. ``dynamic``: ids of the Values remade every
    run (their derived forms, a packed filter of a graph input, are never
    bound)."""

    def __init__(self, steps: int, seeds: dict[str, np.ndarray], dynamic: set[int],
                 inputs: Sequence[Value] = ()):
        self.steps: list = [None] * steps
        self.dynamic = dynamic
        #: the graph's input Values, whose arrays a bound step may take anew at
        #: every run (:class:`InputFedBinding`)
        self.inputs = {id(v) for v in inputs}
        self.stable: dict[int, np.ndarray] = {id(a): a for a in seeds.values()}
        #: the memory owners (``ndarray.base``) of the seeds, the arrays whose
        #: views :meth:`keep_view` may take as stable
        self.owners: dict[int, np.ndarray] = {id(_owner(a)): _owner(a) for a in seeds.values()}
        self.step_views: list = [None] * steps     # per step: the view keep_view took
        self.views: dict[tuple[int, tuple], np.ndarray] = {}
        self.last_views: list = [None] * steps     # per step: (stable array, its view)
        self.misses = [0] * steps
        #: per step with no buffer slot (its value is kept: a graph output), the
        #: array its kernel wrote at the run before, handed to it again
        self.kept: list = [None] * steps
        #: per step, whether its bound call needs no check at the next run
        #: (:meth:`trust`), for the thread count ``trusted_threads``; ``anchors``:
        #: the checked steps whose results trusted steps read
        self.trusted: list[bool] = [False] * steps
        self.trusted_threads = 0
        self.anchors: frozenset[int] = frozenset()
        self.ran_bound: list[bool] = []          # which steps ran bound at the last run

    def kept_out(self, index: int) -> np.ndarray | None:
        """The array step ``index`` wrote last run (None at first): a kept
        value's (no slot), for a kernel that writes into the buffer it is
        given, or a reorder step's copy. A program runs one call at a time and
        its outputs are copied out before the next, so the array is free
        again: the step writes there again (no allocation), and it and the
        steps reading its array may be bound, as an intermediate's are."""
        kept = self.kept[index]
        return kept if kept is not None and kept is not False else None

    def keep(self, index: int, node: Node, data: np.ndarray) -> None:
        """After step ``index`` (no slot) ran: keep the array it wrote, if it
        is its own (not over an input's memory), for :meth:`kept_out`."""
        if self.kept[index] is not None or not kind_of(node).writes_into_buffer:
            return
        own = isinstance(data, np.ndarray) and data.flags.c_contiguous and not any(
            isinstance(v._data, np.ndarray) and np.may_share_memory(data, v._data)
            for v in node.inputs)
        self.kept[index] = data if own else False
        if own:
            self.stable[id(data)] = data

    def keep_reorder(self, index: int, value: Value, made: np.ndarray) -> None:
        """After reorder step ``index`` made ``made`` for ``value`` (its own
        array, not the value's buffer): keep it, stable, for :meth:`kept_out`."""
        own = made.flags.c_contiguous and not np.may_share_memory(made, value._data)
        self.kept[index] = made if own else False
        if own:
            self.stable[id(made)] = made
            # (the views ops make of it are stable too: keep_view)
            self.owners[id(_owner(made))] = _owner(made)

    def keep_view(self, index: int, data: object) -> None:
        """Step ``index``'s result when it is a view of a seed's memory (a
        reshape of a plan's buffer, the same object at every run while its
        input is: ops/shape.py) is stable too, so the steps reading it may be
        bound; kept here (one per step), so the view outlives the run (its
        memory is the seed's anyway)."""
        last = self.step_views[index]
        if data is last or not isinstance(data, np.ndarray) or data.base is None:
            return
        owner = _owner(data)
        if self.owners.get(id(owner)) is owner:
            if last is not None:
                self.stable.pop(id(last), None)
            self.stable[id(data)] = data
            self.step_views[index] = data

    def out_view(self, slots: dict[str, np.ndarray], name: str, shape: tuple[int, ...],
                 dtype: np.dtype, index: int, place: tuple = ()):
        """``_out_from_slot``, the same view object at every run for a stable
        slot; step ``index``'s last (array, view) is tried first."""
        array = slots.get(name)
        last = self.last_views[index]
        if last is not None and last[0] is array:
            return last[1]
        if array is None or self.stable.get(id(array)) is not array:
            return _out_from_slot(slots, name, shape, dtype, place)
        key = (id(array), shape, dtype, place)
        view = self.views.get(key)
        if view is None:
            view = _out_from_slot(slots, name, shape, dtype, place)
            if view is not None:
                self.views[key] = view
                self.stable[id(view)] = view
        if view is not None:
            self.last_views[index] = (array, view)
        return view

    def bind(self, ctx: "Context", index: int, node: Node, data: np.ndarray) -> None:
        """Bind step ``index`` after its node ran and returned ``data``."""
        binder = getattr(node.run, "bind", None)
        binding = binder(ctx, node, data) if binder is not None else None
        stable, inputs, dynamic = self.stable, self.inputs, self.dynamic
        # a read is of a stable array, a graph input's (InputFedBinding) or a
        # static Value's (a constant: its array lives as long as the program)
        if binding is not None and stable.get(id(binding.out)) is binding.out and all(
                stable.get(id(array)) is array or id(value) in inputs
                or id(value) not in dynamic
                for value, array in binding.reads) and not any(
                # (a computed value's blocked copy made by a kept reorder is stable)
                id(value) in dynamic and stable.get(id(form)) is not form
                for value, _, form in binding.derived):
            binding.kernel = compiled_entry(binding.kernel, binding.args, binding.threads)
            if any(id(value) in inputs for value, _ in binding.reads):
                # a graph input's array is the caller's, new at any run
                binding = InputFedBinding.of(binding, inputs)
            if binding is not None:
                self.steps[index] = binding
                return
        self.misses[index] += 1
        if binder is None or self.misses[index] >= 2:
            self.steps[index] = False

    def trust(self, steps: Sequence[CapturedStep], ran_bound: list[bool], threads: int) -> None:
        """After a run: which steps' bound calls the next runs make without
        checking them. A step ran as a plain :class:`Binding` this run, and
        each Value it reads is a constant, the result of such a step, or of
        a bound step checked at every run (one fed a graph input: an anchor):
        then at the next run it reads the same arrays again (those steps
        write the same arrays, by induction from the first), and its check
        would pass. :func:`replay` checks every step of the rest of a run in
        which an anchor did not run bound. Steps reading a reorder's copy or
        a step run through its op are checked as before. (Worked out again
        only when the steps that ran bound or the thread count changed.)"""
        if ran_bound == self.ran_bound and threads == self.trusted_threads:
            return
        self.ran_bound = ran_bound
        made_by = {id(c.value): i for i, c in enumerate(steps) if c.step.kind == "op"}
        dynamic = self.dynamic
        trusted = [False] * len(steps)
        anchors = set()
        for index, binding in enumerate(self.steps):
            if not ran_bound[index] or type(binding) not in _TRUSTABLE:
                continue
            producers = [made_by.get(id(value), -1) for value, _ in binding.reads
                         if id(value) in dynamic]
            if any(id(value) in dynamic for value, _, _ in binding.derived) or any(
                    j < 0 or not (trusted[j] or ran_bound[j]) for j in producers):
                continue
            trusted[index] = True
            anchors.update(j for j in producers if not trusted[j])
        self.trusted, self.trusted_threads = trusted, threads
        self.anchors = frozenset(anchors)


#: the bindings :meth:`Bindings.trust` may trust: their ``valid`` only checks
_TRUSTABLE = (Binding, ViewBinding)


class InputFedBinding:
    """A bound step that reads a graph input (a first-layer conv reads the
    caller's plain image in place): the caller's array may be another one at
    every run, so its place among the kernel's arguments is filled at each
    run, with the array or its flat view as the binder passed it, when the
    new array has the bound one's type (dtype, shape, C order, alignment and
    writeability: the compiled kernel's argument type), else the step runs
    through its op. Everything else is checked as a :class:`Binding` is.
    Between runs it keeps no caller's array (:meth:`forget`)."""

    __slots__ = ("inner", "kernel", "args", "out", "threads", "slots", "template")

    def __init__(self, inner: Binding, slots: list, template: list):
        self.inner = inner
        self.kernel, self.out, self.threads = inner.kernel, inner.out, inner.threads
        self.slots = slots          # (input Value, [(argument index, flat view?)], its type)
        self.template = template    # the arguments, None where an input goes
        self.args: tuple | None = None

    @classmethod
    def of(cls, binding: Binding, inputs: set[int]) -> "InputFedBinding | None":
        """``binding`` with its reads of graph inputs made per run; None when
        an input's array is not among its arguments as itself or its flat view,
        or ``binding`` does work of its own at each run (a subclass's ``valid``:
        the wrapper would skip it)."""
        if type(binding) is not Binding:
            return None
        template = list(binding.args)
        slots, others = [], []
        for value, array in binding.reads:
            if id(value) not in inputs:
                others.append((value, array))
                continue
            places = []
            for i, arg in enumerate(binding.args):
                if arg is array:
                    places.append((i, False))
                elif isinstance(arg, np.ndarray) and arg.base is array and arg.ndim == 1 \
                        and arg.size == array.size:
                    places.append((i, True))
            if not places or not isinstance(array, np.ndarray):
                return None
            for i, _ in places:
                template[i] = None
            slots.append((value, places, _array_type(array)))
        inner = Binding(binding.kernel, tuple(template), tuple(others), binding.derived,
                        binding.out, binding.threads)
        return cls(inner, slots, template)

    def valid(self, ctx: "Context", out: np.ndarray | None) -> bool:
        if not self.inner.valid(ctx, out):
            return False
        args = list(self.template)
        for value, places, kind in self.slots:
            array = value._data
            if not isinstance(array, np.ndarray) or _array_type(array) != kind:
                return False
            for i, flat in places:
                args[i] = array.ravel() if flat else array
        self.args = tuple(args)
        return True

    def forget(self) -> None:
        self.args = None


def _array_type(array: np.ndarray) -> tuple:
    """What a compiled kernel's argument type says of an array (and its shape)."""
    flags = array.flags
    return (array.dtype, array.shape, flags.c_contiguous, flags.aligned, flags.writeable)


def compiled_entry(kernel, args: tuple, threads: int):
    """The compiled function ``kernel(*args)`` runs on ``threads`` threads,
    called directly: numba's dispatcher types every argument at every call
    to pick its compile (1.8 against 3.7-5.3 us per call with 16 arguments,
    a conv driver's size); a bound step's arguments never change type. The
    kernel itself when it is not a numba function or that compile is not
    found (a literal-specialized one)."""
    if isinstance(kernel, ThreadCountKernel):
        kernel = kernel.on_threads(threads)
    if not isinstance(kernel, Dispatcher):
        return kernel
    try:
        signature = tuple(kernel.typeof_pyval(a) for a in args)
    except (TypeError, ValueError):
        return kernel
    compiled = kernel.overloads.get(signature)
    return kernel if compiled is None else compiled.entry_point


def replay(ctx: "Context", plan: Plan, steps: Sequence[CapturedStep],
           seeds: dict[str, np.ndarray], bindings: Bindings | None = None) -> None:
    """Run captured ``steps`` again, as :func:`execute` ran them: the same
    nodes, buffer slots (starting from ``seeds``) and frees. The caller has
    given the plan's inputs new data and cleared everything computed from the
    old (jitnn/replay.py); ``plan`` gets this run's times. Fused-op and flush
    counts are the caller's (one count for the whole run). With
    ``bindings``, a step whose arrays are those of its last run is one bound
    kernel call (:class:`Bindings`)."""
    slots = dict(seeds)
    start = time.perf_counter()
    previous = ctx.launcher.tracing(None)
    bound_calls = 0
    bound_seconds = 0.0
    in_kernels = kernel_seconds()           # this thread's time in kernels so far
    ran_bound = [False] * len(steps)
    # a trusted step (Bindings.trust) is its kernel call alone: no checks, no
    # tracing, a few microseconds a step fewer (a tenth of a small network's
    # time on two threads)
    # (none under the workqueue layer: Bindings.trust records no thread count)
    trusted = bindings.trusted if bindings is not None and \
        bindings.trusted_threads == ctx.num_threads else None
    run_bound = ctx.launcher.run_bound
    clock = time.perf_counter
    try:
        for index, captured in enumerate(steps):
            step = captured.step
            t0 = clock()
            if trusted is not None and trusted[index]:
                binding = bindings.steps[index]
                run_bound(binding.kernel, binding.args)
                step.seconds = seconds = clock() - t0
                bound_seconds += seconds
                bound_calls += 1
                ran_bound[index] = True
                captured.value._data = binding.out
                _release(captured.frees)
                continue
            reorders = step.inner_reorders
            reorders.clear()
            v = captured.value
            if step.kind == "reorder":
                ctx.launcher.tracing(reorders)
                kept = None if bindings is None else bindings.kept_out(index)
                made = blocked_buffer(ctx, v, step.reorder_block, step.reorder_axes, kept) \
                    if step.reorder_block else plain_buffer(v, kept)
                if bindings is not None and kept is None:
                    bindings.keep_reorder(index, v, made)
                reorders.clear()
            else:
                node = captured.node
                if not step.buffer:
                    out = None if bindings is None else bindings.kept_out(index)
                elif bindings is None:
                    out = _out_from_slot(slots, step.buffer, captured.shape, v.dtype,
                                         step.buffer_place)
                else:
                    out = bindings.out_view(slots, step.buffer, captured.shape, v.dtype, index,
                                            step.buffer_place)
                binding = bindings.steps[index] if bindings is not None else None
                if binding and binding.valid(ctx, out):
                    # one kernel call, which runs no reorder: nothing to trace
                    start_call = time.perf_counter()
                    ctx.launcher.run_bound(binding.kernel, binding.args)
                    bound_seconds += time.perf_counter() - start_call
                    if type(binding) is InputFedBinding:
                        binding.forget()         # holds no caller's array between runs
                    bound_calls += 1
                    ran_bound[index] = True
                    data = binding.out
                else:
                    if trusted is not None and index in bindings.anchors:
                        trusted = None         # steps trusting its array check it after all
                    ctx.launcher.tracing(reorders)
                    data = run_node(ctx, node, v, out)
                    if bindings is not None and not step.buffer:
                        bindings.keep(index, node, data)
                    if bindings is not None:
                        bindings.keep_view(index, data)
                    if binding is not False and bindings is not None:
                        bindings.bind(ctx, index, node, data)
                v._data = data
                if step.buffer and data is not out and not step.buffer_place:
                    slots[step.buffer] = data
                _release(captured.frees)
            step.seconds = time.perf_counter() - t0
    finally:
        ctx.launcher.tracing(previous)
        if bound_calls:
            ctx.launcher.count(launches=bound_calls, launch_s=bound_seconds)
            add_kernel_seconds(bound_seconds)
    plan.seconds = time.perf_counter() - start
    plan.kernel_seconds = kernel_seconds() - in_kernels
    if bindings is not None:
        bindings.trust(steps, ran_bound, 0 if ctx.launcher.serialized else ctx.num_threads)
