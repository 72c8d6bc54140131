"""Replaying a graph's scheduled plan: why a repeated ``ctx.compute`` is cheap.

A dispatch replays every recorded op's eager function (with all its
validation), and the scheduler then plans the pending DAG: tens of
microseconds per op, milliseconds per network, paid again at every call,
although nothing about the plan changes between calls of one graph (its
input shapes, its context, hence the block, are fixed; the policy must be
``"blocked"``, checked at each call). So ``ctx.compute`` runs a graph the
normal way once and keeps what the executor ran (a
:class:`jitnn.executor.Capture`): the steps, with their fused nodes and the
Values they read and write. That is a :class:`Program`, cached per (graph,
context, input shapes), which is per graph. A later call checks its inputs as
before (reading a float32 C-contiguous array in place, else copying it; see
``Graph._input_items``), gives them to the program's input Values, runs the
same steps with the same buffer slots (:func:`jitnn.executor.replay`) and
reads the outputs back as ``read_all`` does. ``ctx.stats`` counts the same
reorders, launches, fused ops and flushes as the normal path.

What a program holds, and what it remakes at every run:

* *dynamic* Values, the graph's inputs and every value the plan computes:
  their data and derived forms (blocked or plain copies, packed matmul
  operands) are dropped after each run, so nothing computed from one call's
  inputs reaches the next, and no input or output stays alive between calls;
* *static* Values, the graph's constants (their packed filters stay cached)
  and the tensors made from literal arguments during the recording dispatch;
* the arrays of the plan's reused intermediate buffers (its slots), kept
  between runs so that a run allocates none of them: per program at most the
  plan's peak memory less its outputs; and the array each output's kernel
  wrote (outputs are copied into the caller's arrays before the next run),
  handed to it again. A graph keeps up to :data:`IDLE_PROGRAMS` programs;
  they go when the graph goes.

From its second run on, a step whose arrays are the program's own (its
buffers and constants, the same objects at every run) runs as one kernel
call bound to them at the run before (:class:`jitnn.executor.Bindings`):
a convolution then costs one numba call instead of ~9 us of Python for its
op's checks and planning (a classifier's few-row product too: its packed
weight and bias are derived forms, checked like a conv's filter). Every binding is checked against the step's
Values before it is used; a step whose arrays are new at every run (its
filter is a graph input, or it reads a reordered copy of one) goes through
its op as before. One that reads a graph input's array as it is (a
first-layer conv reads the caller's plain image in place) is bound with that
run's array put in its arguments, when it has the bound one's type
(:class:`jitnn.executor.InputFedBinding`; the binding keeps no caller's
array between runs). A
conv that pads its input first or takes scratch memory is bound as well: those
come from the thread's scratch buffers (kernels.conv2d.padding.BoundScratchRun).
So is a fused attention: its Q, K and V are read in place from the plan's
buffers, and a mask computed at every run (a padding or causal mask) is copied
into a mask buffer of the binding's own before each call
(jitnn.ops.attention.bind_attention). So are the small plain steps that build
a transformer's inputs: the embedding gather by the caller's ids, the
comparisons, logical ops, ``where``, integer math, casts and small integer
reshapes of its padding mask and position ids (numpy calls writing into the
plan's buffers, whose arrays serve values of any data type:
jitnn.ops._common.plain_into_op), a small broadcast add, and a product too
small to pack its weight. A binding may read a constant in place (the
program holds it anyway).

A program serves one call at a time: a call takes an idle program from its
graph, or records a new one if none is idle (two threads computing the same
graph at once each get their own, so no buffer is shared), and gives it back
afterwards. Programs share only the graph's constants, whose derived forms
are made under the value's lock.

When a call takes the normal path (dispatch, schedule, execute, read) and
keeps nothing, and why:

* an input is a ``jitnn.Tensor``: it is used as it is, not copied; it may be
  pending (its own work joins the plan), blocked, or hold derived forms of its
  own, so the plan is not the graph's alone, and a program must not keep the
  caller's tensor alive;
* the context's policy is not ``"blocked"``: ``"eager"`` and ``"plain"`` run
  each op at its call, inside the dispatch, and leave nothing to plan;
* a Tensor the graph's ops were given as it is (not an operand) is still
  pending: its work would join the plan, and a replay would redo it and drop
  its result (nothing is kept; a later call may record once it is computed);
* the recording met a value computed before the plan ran that is neither an
  input nor a tensor the graph holds (an op that read data while it was
  recorded): replaying would reuse it, stale. That call's plan is not kept
  (every call of such a graph takes the normal path).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping

import numpy as np

from . import executor
from .errors import JitnnTypeError, JitnnValueError
from .tensor import Tensor, Value

if TYPE_CHECKING:
    from .context import Context
    from .graph import Graph
    from .plan import Plan

#: programs a graph keeps for its next computes (each holds its buffers)
IDLE_PROGRAMS = 2


class Program:
    """A graph's plan as the executor ran it, ready to run on new inputs (by
    one call at a time)."""

    __slots__ = ("plan", "steps", "seeds", "inputs", "outputs", "dynamic", "fused_ops",
                 "bindings")

    def __init__(self, plan: "Plan | None", capture: executor.Capture,
                 inputs: list[tuple[str, Value]], outputs: list[tuple[str, Value]],
                 dynamic: list[Value]):
        self.plan = plan                      # descriptions; each run's times (None: no work)
        self.steps = capture.steps
        self.seeds = capture.seeds
        self.inputs = inputs                  # (graph input name, its Value)
        self.outputs = outputs                # (graph output name, its Value)
        self.dynamic = dynamic                # remade every run (see the module docstring)
        self.fused_ops = sum(len(c.node.fused) for c in self.steps
                             if c.step.kind == "op" and c.node.fused)
        # steps run as bound kernel calls from the second run on (jitnn/executor.py)
        self.bindings = executor.Bindings(len(self.steps), self.seeds,
                                          {id(v) for v in dynamic}, [v for _, v in inputs])

    def run(self, ctx: "Context", arrays: Mapping[str, "Tensor | np.ndarray"],
            outputs: Mapping[str, np.ndarray]) -> None:
        """Run on checked input arrays ``arrays`` (no Tensor: see :func:`compute`);
        write ``outputs`` (checked)."""
        for name, value in self.inputs:
            value._data = arrays[name]
        try:
            if self.plan is not None:
                executor.replay(ctx, self.plan, self.steps, self.seeds, self.bindings)
                # what _flush and the executor count per flush (launches and
                # reorders count themselves as they run)
                ctx.launcher.count(flushes=1, fused_ops=self.fused_ops, plans_reused=1)
            ctx.readback.read_values([v for _, v in self.outputs],
                             [outputs[name] for name, _ in self.outputs])
        finally:
            _clear(self.dynamic)


def check_outputs(names: Mapping[str, tuple], outputs: object,
                  dtypes: Mapping[str, np.dtype] | None = None) -> None:
    """``compute``'s output arrays: exactly the graph's outputs, each a
    writeable C-contiguous array of its shape and dtype (float32 unless
    ``dtypes`` says), none sharing memory."""
    if not isinstance(outputs, Mapping):
        raise JitnnTypeError(f"compute: outputs must be a dict {{name: array}}, "
                             f"got {type(outputs).__name__}")
    unknown = sorted(set(outputs) - set(names))
    missing = sorted(set(names) - set(outputs))
    if unknown or missing:
        raise JitnnTypeError(
            f"compute: outputs must name exactly the graph's outputs {sorted(names)}; "
            + (f"unknown {unknown[0]!r}" if unknown else f"missing {missing[0]!r}"))
    for name, array in outputs.items():
        dtype = np.dtype(np.float32) if dtypes is None else dtypes[name]
        if not isinstance(array, np.ndarray) or array.dtype != dtype \
                or array.shape != names[name] or not array.flags.c_contiguous \
                or not array.flags.writeable:
            raise JitnnTypeError(
                f"compute: output {name!r} must be a writeable C-contiguous {dtype} array "
                f"of shape {names[name]}, got "
                + (f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray)
                   else type(array).__name__))
    for (other, other_array), (name, array) in itertools.combinations(outputs.items(), 2):
        if np.shares_memory(array, other_array):
            raise JitnnValueError(
                f"compute: outputs {other!r} and {name!r} share memory; each output "
                "needs an array of its own")


def compute(ctx: "Context", graph: "Graph", inputs: Mapping[str, object],
            outputs: Mapping[str, np.ndarray]) -> None:
    """``ctx.compute``'s work once the outputs are checked: replay an idle
    program of ``graph``, or run the normal path (recording a program when
    the call allows one)."""
    graph._check_context(ctx, "compute")
    # dispatch's checks; an input array is read in place where it can be
    # (this call reads it only while it runs), else copied
    items = graph._input_items(ctx, inputs, "compute", borrow_outside=list(outputs.values()))
    if ctx.policy != "blocked" or any(isinstance(item, Tensor) for item in items.values()):
        _run(ctx, graph, items, outputs, record=False)      # see the module docstring
        return
    with graph._programs_lock:
        program = graph._programs.pop() if graph._programs else None
    if program is None:
        program = _run(ctx, graph, items, outputs, record=True)
        if program is None:
            return
    else:
        # On an error the program is dropped (not given back): its state is unknown.
        program.run(ctx, items, outputs)
    with graph._programs_lock:
        if len(graph._programs) < IDLE_PROGRAMS:
            graph._programs.append(program)


@contextlib.contextmanager
def _computing(ctx: "Context") -> Iterator[None]:
    """Ops recorded on this thread meanwhile are this compute's own (see
    ``Context._recorded``)."""
    previous = getattr(ctx.computing, "active", False)
    ctx.computing.active = True
    try:
        yield
    finally:
        ctx.computing.active = previous


def _run(ctx: "Context", graph: "Graph", items: Mapping[str, "Tensor | np.ndarray"],
         outputs: Mapping[str, np.ndarray], record: bool) -> Program | None:
    """The normal path: dispatch, one flush, read into ``outputs``; with
    ``record``, the program that replays this run (None if it may not)."""
    tensors = {name: item if isinstance(item, Tensor) else Tensor._input_holding(ctx, item)
               for name, item in items.items()}
    # then the plan computes values of this call only (see the module docstring)
    record = record and not any(t.pending for t in graph._fixed_tensors())
    with _computing(ctx):
        results = graph._run_ops(ctx, tensors)
    names = list(results)
    roots = [results[name]._v for name in names]
    capture = executor.Capture() if record else None
    plan = ctx.flush_values(roots, capture)
    ctx.readback.read_values(roots, [outputs[name] for name in names])
    if not record:
        return None
    inputs = [(name, tensors[name]._v) for name in graph._inputs]
    return _program(graph, plan, capture, inputs, list(zip(names, roots)))


def _program(graph: "Graph", plan: "Plan | None", capture: executor.Capture,
             inputs: list[tuple[str, Value]], outputs: list[tuple[str, Value]]) -> Program | None:
    """The program of a recorded run, or None when a value it reads is neither
    remade by it nor safe to keep (see the module docstring)."""
    dynamic: dict[int, Value] = {id(v): v for _, v in inputs}
    dynamic.update((id(c.value), c.value) for c in capture.steps if c.step.kind == "op")
    fixed = {id(t._v) for t in graph._fixed_tensors()}
    read = [v for _, v in outputs]
    for c in capture.steps:
        read.extend(c.node.inputs if c.step.kind == "op" else (c.value,))
    for v in read:
        if id(v) in dynamic or id(v) in fixed:
            continue
        # Made during the dispatch without running: a literal argument made a
        # tensor (static). Computed by a flush: from data seen at record time.
        if v._data is None or v._plan is not None:
            _clear(dynamic.values())
            return None
    program = Program(plan, capture, inputs, outputs, list(dynamic.values()))
    _clear(program.dynamic)
    return program


def _clear(values: Iterable[Value]) -> None:
    """Forget what one run computed: data, derived forms, the plan that made it."""
    for v in values:
        v._data = None
        v._derived.clear()
        v._released = True     # read before recomputed: an error, never stale data
        v._plan = None
