"""From a Dynamo graph to a module that runs its supported parts on jitnn.

For one set of input shapes (:func:`build`):

1. trace the Dynamo graph to aten ops, functional, for inference
   (:func:`trace_aten`: ``make_fx`` of the functionalized graph under
   ``no_grad`` with the decompositions of :data:`DECOMPOSITIONS`; PyTorch's
   python dispatcher turns batch norm into
   ``_native_batch_norm_legit_no_training`` as it does for its own backends);
2. freeze the parameters and buffers (the graph inputs Dynamo marks static)
   as constants, and fold every node computed from constants alone
   (:func:`fold_constants`: a transposed weight, BERT's position ids);
3. partition it with ``CapabilityBasedPartitioner``, asking :class:`Support`,
   which probes each node's conversion on shape-only inputs
   (jitnn/torch_backend/_lowering.py) and keeps the reason of every refusal;
4. build each partition that computes something (not views alone) as one
   jitnn graph (:class:`JitnnPartition`); the other nodes stay in the fx
   graph and run in eager PyTorch.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections import Counter
from typing import Any

import numpy as np
import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ..context import Context
from ..errors import JitnnError, JitnnValueError
from ..graph import Graph, GraphBuilder
from ..scheduler import explain as explain_tensor
from ._lowering import DTYPES, Lowering, Unsupported, supported_targets

log = logging.getLogger("jitnn.torch_backend")

aten = torch.ops.aten

#: aten ops decomposed while tracing: those jitnn lacks whose parts it has
#: (log-softmax as max, sub, exp, sum and log; ...)
DECOMPOSITIONS = torch._decomp.get_decompositions([
    aten._log_softmax, aten.logsumexp, aten.baddbmm, aten.addcmul, aten.addcdiv, aten.mish,
    aten.glu, aten.softplus, aten.hardshrink, aten.softshrink, aten.native_dropout,
    aten.addmv, aten.linalg_vector_norm,
])

#: what was counted since import: ``builds`` (traces turned into modules),
#: ``jitnn_graphs`` (jitnn graphs built), ``fallbacks`` (partitions or graphs
#: that ran in PyTorch after a jitnn error)
counters: Counter = Counter()

_LOGGED: set[str] = set()


def log_once(message: str) -> None:
    """A warning on the ``jitnn.torch_backend`` logger, once per message."""
    if message not in _LOGGED:
        _LOGGED.add(message)
        log.warning(message)


def trace_aten(gm: torch.fx.GraphModule, args: list) -> torch.fx.GraphModule:
    """``gm`` as a functional inference graph of aten ops, traced with fake
    tensors of ``args``' shapes (nothing is computed)."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functionalize

    with torch.no_grad(), enable_python_dispatcher():
        # (a real tensor the graph holds itself, not an input, becomes a constant)
        traced = make_fx(functionalize(gm, remove="mutations"),
                         decomposition_table=DECOMPOSITIONS, tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*args)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return traced


def _mutated(placeholder: torch.fx.Node) -> bool:
    """The graph writes into this input (a batch norm in training mode
    updating its statistics): it cannot be a constant."""
    return any(user.target in (aten.copy_.default, aten.copy.default)
               and user.args and user.args[0] is placeholder for user in placeholder.users)


def freeze(traced: torch.fx.GraphModule, args: list, frozen: set[int]) -> dict[int, torch.Tensor]:
    """Replace the placeholders at positions ``frozen`` (parameters and
    buffers) by constants holding ``args``' tensors; returns those kept
    frozen by position (an input the graph writes into stays an input)."""
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    kept: dict[int, torch.Tensor] = {}
    for position, node in enumerate(placeholders):
        tensor = args[position]
        if position not in frozen or not isinstance(tensor, torch.Tensor) or _mutated(node):
            continue
        name = f"_jitnn_frozen_{position}"
        # detach: a view of the same storage and version counter, so an eager
        # part reads the parameter's values of the moment, and jitnn's packed
        # copies are known stale when its version moves (see CompiledGraph)
        traced.register_buffer(name, tensor.detach(), persistent=False)
        with traced.graph.inserting_before(node):
            constant = traced.graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant)
        traced.graph.erase_node(node)
        kept[position] = tensor
    traced.recompile()
    return kept


def _constant_value(traced: torch.fx.GraphModule, node: Any) -> Any:
    return getattr(traced, node.target) if isinstance(node, torch.fx.Node) else node


def fold_constants(traced: torch.fx.GraphModule) -> int:
    """Compute once, in PyTorch, every node whose inputs are all constants
    (not random ones), and make its result a constant; returns how many."""
    folded = 0
    for node in list(traced.graph.nodes):
        if node.op != "call_function" or not node.users:
            continue
        tags = getattr(node.target, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags or node.target is operator.getitem:
            continue
        inputs = node.all_input_nodes
        if any(n.op != "get_attr" for n in inputs):
            continue
        args = torch.fx.node.map_arg(node.args, lambda n: _constant_value(traced, n))
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: _constant_value(traced, n))
        try:
            value = node.target(*args, **kwargs)
        except Exception:                 # noqa: BLE001 - left to run when the graph does
            continue
        if not isinstance(value, torch.Tensor):
            continue
        name = f"_jitnn_folded_{folded}"
        traced.register_buffer(name, value, persistent=False)
        with traced.graph.inserting_before(node):
            constant = traced.graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant)
        traced.graph.erase_node(node)
        folded += 1
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return folded


class Support(OperatorSupportBase):
    """The operator support table: a node is supported when its aten op has
    a handler whose jitnn ops are registered, its tensors have the types
    jitnn computes in, and converting it on shape-only inputs succeeds.
    :attr:`reasons` keeps why each refused node was refused."""

    def __init__(self, traced: torch.fx.GraphModule, ctx: Context):
        self.traced = traced
        self.targets = supported_targets()
        self.reasons: dict[torch.fx.Node, str] = {}
        self._answers: dict[torch.fx.Node, bool] = {}
        self._probe = Lowering(GraphBuilder(ctx), probe=True)

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        found = self._answers.get(node)
        if found is None:
            reason = self._refusal(node)
            if reason is not None:
                self.reasons[node] = reason
            found = self._answers[node] = reason is None
        return found

    def _refusal(self, node: torch.fx.Node) -> str | None:
        if node.op != "call_function":
            return f"a {node.op} node"
        if node.target is operator.getitem:
            source, index = node.args
            if index != 0:
                return f"output {index} of {source.target} (jitnn gives the first only)"
            if not isinstance(source, torch.fx.Node) or \
                    not self.is_node_supported(None, source):
                return f"its source {getattr(source, 'name', source)} stays in PyTorch"
            return None
        entry = self.targets.get(node.target)
        if entry is None:
            return "no jitnn mapping"
        if entry.multi_output and any(user.target is not operator.getitem or user.args[1] != 0
                                      for user in node.users):
            return "an output past the first is used (jitnn gives the first only)"
        arguments = list(enumerate(node.args)) + [(None, v) for v in node.kwargs.values()]
        for position, arg in arguments:
            for item in (arg if isinstance(arg, (list, tuple)) else [arg]):
                if isinstance(item, torch.fx.Node):
                    wrong = _dtype_refusal(item, integers=position in entry.index_args)
                    if wrong:
                        return wrong
        if not entry.multi_output:
            wrong = _dtype_refusal(node, integers=False)
            if wrong:
                return wrong
        return self._probe_refusal(node)

    def _probe_refusal(self, node: torch.fx.Node) -> str | None:
        """Convert ``node`` alone, its run-time inputs as shape-only inputs."""
        lw = self._probe
        made: dict[torch.fx.Node, Any] = {}

        def value(arg: torch.fx.Node) -> Any:
            if arg.op == "get_attr":
                return getattr(self.traced, arg.target)
            if arg not in made:             # one input for a value read twice (x * x)
                meta = arg.meta.get("val")
                if not isinstance(meta, torch.Tensor):
                    raise Unsupported(f"input {arg.name} is not a tensor")
                made[arg] = lw.input(f"{node.name}.{arg.name}", tuple(meta.shape), meta.dtype)
            return made[arg]
        try:
            args = torch.fx.node.map_arg(node.args, value)
            kwargs = torch.fx.node.map_arg(node.kwargs, value)
            lw.lower(node, args, kwargs)
        except (Unsupported, JitnnError) as error:
            return str(error)
        return None


def _dtype_refusal(node: torch.fx.Node, integers: bool) -> str | None:
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return None
    allowed = tuple(DTYPES) if integers else (torch.float32,)
    if meta.dtype not in allowed:
        return f"a {meta.dtype} tensor ({node.name}); jitnn computes in float32"
    if meta.device.type != "cpu":
        return f"a tensor on {meta.device} ({node.name}); jitnn runs on the CPU"
    return None


def _computes(nodes, targets: dict) -> bool:
    """A partition does work (not only views, copies and getitems)."""
    return any(not targets[n.target].movement for n in nodes)


@dataclasses.dataclass
class Options:
    """``torch.compile(..., options={...})`` of the jitnn backend."""

    num_threads: int | None = None
    policy: str = "blocked"
    explain: bool = False

    @classmethod
    def parse(cls, options: dict | None) -> "Options":
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise JitnnValueError(f"jitnn backend: unknown option(s) {unknown}; the options are "
                                  f"{sorted(known)}")
        return cls(**options)


_CONTEXTS: dict[tuple, Context] = {}


def context_for(options: Options) -> Context:
    """One context per (threads, policy), shared by every compiled graph."""
    from ..context import default_context
    if options.num_threads is None and options.policy == "blocked":
        return default_context()
    key = (options.num_threads, options.policy)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = Context(num_threads=options.num_threads, policy=options.policy)
    return _CONTEXTS[key]


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array: a view of its memory when it is
    contiguous (jitnn reads a float32 C-contiguous array in place), else a
    contiguous copy."""
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return tensor.detach().numpy()


class JitnnPartition(torch.nn.Module):
    """One partition of the aten graph, run as a jitnn graph: its run-time
    inputs are read in place where their layout allows, its outputs computed
    into new arrays returned as tensors (``torch.from_numpy``, no copy).

    If jitnn fails on its first run, the partition runs in PyTorch from then on
    (``fallback``, the partition's own fx module), with a warning."""

    def __init__(self, ctx: Context, graph: Graph, inputs: list[tuple[int, str]],
                 outputs: list[str], single: bool, fallback: torch.fx.GraphModule,
                 label: str, explain: bool):
        super().__init__()
        self.ctx, self.graph, self.inputs = ctx, graph, inputs
        self.output_specs = [(name, graph.outputs[name], graph.output_dtypes[name])
                             for name in outputs]
        self.single = single
        self.fallback = fallback
        self.label = label
        self.explain = explain
        self.first_run = True
        self.failed = False

    def forward(self, *args: torch.Tensor) -> Any:
        if self.failed:
            return self.fallback(*args)
        feeds = {name: _array(args[position]) for position, name in self.inputs}
        outs = {name: np.empty(shape, dtype) for name, shape, dtype in self.output_specs}
        if self.first_run:
            self.first_run = False
            try:
                self._first(feeds, outs)
            except JitnnError as error:
                self.failed = True
                counters["fallbacks"] += 1
                log_once(f"jitnn backend: {self.label} failed on jitnn and runs in PyTorch "
                         f"from now on: {error}")
                return self.fallback(*args)
        else:
            self.ctx.compute(self.graph, feeds, outs)
        results = tuple(torch.from_numpy(outs[name]) for name, _, _ in self.output_specs)
        return results[0] if self.single else results

    def _first(self, feeds: dict, outs: dict) -> None:
        if not self.explain:
            self.ctx.compute(self.graph, feeds, outs)
            return
        tensors = self.ctx.dispatch(self.graph, feeds)
        names = list(tensors)
        self.ctx.read_all([tensors[n] for n in names], [outs[n] for n in names])
        print(f"jitnn backend: {self.label}")
        for name in names:
            print(f"output {name}:\n{explain_tensor(tensors[name])}\n")


def _partition_module(traced: torch.fx.GraphModule, call: torch.fx.Node, ctx: Context,
                      label: str, explain: bool) -> JitnnPartition:
    """The jitnn graph of the fused partition that ``call`` (a call_module
    node of ``traced``) runs."""
    sub = getattr(traced, call.target)
    lw = Lowering(GraphBuilder(ctx))
    values: dict[torch.fx.Node, Any] = {}
    inputs: list[tuple[int, str]] = []
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for position, (node, outer) in enumerate(zip(placeholders, call.args)):
        if isinstance(outer, torch.fx.Node) and outer.op == "get_attr":
            values[node] = getattr(traced, outer.target)
            continue
        meta = outer.meta["val"]
        name = f"in{position}"
        values[node] = lw.input(name, tuple(meta.shape), meta.dtype)
        inputs.append((position, name))
    result = None
    for node in sub.graph.nodes:
        if node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, values.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, values.__getitem__)
            values[node] = lw.lower(node, args, kwargs)
        elif node.op == "output":
            result = node.args[0]
    single = not isinstance(result, (tuple, list))
    given = {values[p]._index for p in placeholders if not isinstance(values[p], torch.Tensor)}
    outputs = {}
    for index, node in enumerate([result] if single else result):
        operand = lw.operand(values[node])
        if operand._index in given or isinstance(values[node], torch.Tensor):
            operand = lw.b.identity(operand)       # an output the graph computes itself
        outputs[f"out{index}"] = operand
    graph = lw.b.build(outputs)
    counters["jitnn_graphs"] += 1
    return JitnnPartition(ctx, graph, inputs, list(outputs), single, sub, label, explain)


@dataclasses.dataclass
class Built:
    """What one trace made: the module to run and the report of what went where."""

    module: torch.fx.GraphModule
    frozen: dict[int, torch.Tensor]
    runtime_positions: list[int]
    report: str
    #: some aten op runs in PyTorch
    fell_back: bool = False
    #: the traced graph's aten ops (getitems aside), and those in jitnn graphs
    aten_ops: int = 0
    jitnn_ops: int = 0


def build(gm: torch.fx.GraphModule, args: list, frozen: set[int], ctx: Context,
          options: Options) -> Built:
    """Trace, freeze, fold, partition and convert ``gm`` for ``args``' shapes."""
    traced = trace_aten(gm, args)
    kept = freeze(traced, args, frozen)
    folded = fold_constants(traced)
    support = Support(traced, ctx)
    partitioner = CapabilityBasedPartitioner(traced, support, allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions()
                  if _computes(p.nodes, support.targets)]
    on_jitnn = {node for p in partitions for node in p.nodes}
    eager_ops = _eager_ops(traced, on_jitnn)
    fused = partitioner.fuse_partitions(partitions, prefix="jitnn_")
    calls = [n for n in fused.graph.nodes if n.op == "call_module"
             and str(n.target).startswith("jitnn_")]
    failed = []
    for index, call in enumerate(calls):
        label = f"partition {index + 1} of {len(calls)} ({call.target})"
        try:
            setattr(fused, call.target, _partition_module(fused, call, ctx, label,
                                                          options.explain))
        except (Unsupported, JitnnError) as error:
            counters["fallbacks"] += 1
            failed.append(f"{call.target}: {error}")
    fused.recompile()
    counters["builds"] += 1
    runtime = [i for i in range(len(args)) if i not in kept]
    total, eager = eager_ops
    return Built(fused, kept, runtime,
                 _report(eager_ops, support.reasons, len(calls), folded, failed),
                 fell_back=bool(eager or failed), aten_ops=total, jitnn_ops=total - len(eager))


def _eager_ops(traced: torch.fx.GraphModule, on_jitnn: set) -> tuple[int, list]:
    """How many aten ops the graph has, and those left to PyTorch (before
    fusing, which moves the partitions' nodes into submodules)."""
    computed = [n for n in traced.graph.nodes
                if n.op == "call_function" and n.target is not operator.getitem]
    return len(computed), [n for n in computed if n not in on_jitnn]


def _report(eager_ops: tuple[int, list], reasons: dict, partitions: int, folded: int,
            failed: list[str]) -> str:
    """What runs where: counts, and each aten op left to PyTorch with why."""
    total, eager = eager_ops
    lines = [f"jitnn backend: {total - len(eager)} of {total} aten op(s) in {partitions} "
             f"jitnn graph(s), {len(eager)} in PyTorch; {folded} folded into constants"]
    why: Counter = Counter()
    for node in eager:
        why[(str(node.target), reasons.get(node, "only views between PyTorch ops"))] += 1
    for (target, reason), count in sorted(why.items()):
        lines.append(f"  in PyTorch: {target} x{count}: {reason}")
    lines += [f"  jitnn failed to build {entry}; it runs in PyTorch" for entry in failed]
    return "\n".join(lines)


def versions(frozen: dict[int, torch.Tensor]) -> list[tuple[int, torch.Tensor, int]]:
    """(position, tensor, version counter) of each frozen tensor."""
    found = []
    for position, tensor in frozen.items():
        try:
            version = tensor._version
        except RuntimeError:           # an inference tensor has no version counter
            version = -1
        found.append((position, tensor, version))
    return found


def is_static_input(node: torch.fx.Node) -> bool:
    """Dynamo marks a parameter or buffer input of its graph static."""
    tensor_dict = node.meta.get("tensor_dict") or {}
    return "_dynamo_static_input_type" in tensor_dict
