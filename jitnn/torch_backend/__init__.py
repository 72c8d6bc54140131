"""``torch.compile(model, backend="jitnn")``: PyTorch models on jitnn, for inference.

The backend is registered with PyTorch through the ``torch_dynamo_backends``
entry point of jitnn's package metadata (pyproject.toml), so user code needs
no ``import jitnn``::

    model = torch.compile(model, backend="jitnn",
                          options={"num_threads": 2, "policy": "blocked", "explain": False})
    with torch.no_grad():
        y = model(x)

Dynamo hands the backend a graph of torch calls with the parameters and
buffers as inputs; :func:`jitnn_backend` returns a :class:`CompiledGraph`
that, on the first call at a set of input shapes, traces it to aten ops,
freezes the parameters and buffers as constants (jitnn packs filters once),
runs the aten ops jitnn supports as jitnn graphs and leaves the rest to
PyTorch (jitnn/torch_backend/_compile.py; the aten -> jitnn table is in
jitnn/torch_backend/_lowering.py). What fell back, and why, is logged once
on the ``jitnn.torch_backend`` logger. Later calls at the same shapes only
run: a dictionary lookup, a check that no frozen tensor changed, then the
jitnn graphs (``ctx.compute``, which replays their scheduled plans) and the
PyTorch ops between them.

Tensors cross without copies where the layout allows: a contiguous float32
CPU tensor goes in as a numpy view of its memory; each output is computed
into a new array returned as ``torch.from_numpy`` of it.

Options (``torch.compile(..., options={...})``): ``num_threads`` (default:
every core numba sees) and ``policy`` (``"blocked"``, ``"eager"`` or
``"plain"``) pick the jitnn context; ``explain=True`` prints what runs where
when a graph is built, and ``jitnn.explain``'s plan of every jitnn graph at
its first run.

Limits: inference only. When gradients are needed (grad mode on and an
input or parameter requiring grad) the graph runs in eager PyTorch, with a
warning; call the model under ``torch.no_grad()`` or
``torch.inference_mode()``. The outputs carry no autograd history. Frozen
parameters are checked at every call: if one was replaced or changed in
place, the graph is built again from its new values. float32 only (other
tensors stay in PyTorch); an ``embedding``'s indices out of range are
clamped, where PyTorch raises.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import torch

from ._compile import (DECOMPOSITIONS, Built, JitnnPartition, Options, build, context_for,
                       counters, is_static_input, log_once, versions)
from ._lowering import ATEN, supported_targets

#: how many input-shape variants a compiled graph keeps built (least recently used go)
MAX_SHAPES = 8


class CompiledGraph:
    """What :func:`jitnn_backend` returns for one Dynamo graph: a callable
    that builds once per input shapes (bounded by :data:`MAX_SHAPES`) and runs."""

    def __init__(self, gm: torch.fx.GraphModule, frozen: set[int], options: Options):
        self.gm = gm
        self.frozen = frozen
        self.options = options
        self.ctx = context_for(options)
        self._built: OrderedDict[tuple, tuple[Built, list]] = OrderedDict()
        #: the latest build: its module and its report of what runs where
        self.last_build: Built | None = None

    def _key(self, args: tuple) -> tuple:
        # strides too: a trace of views depends on them (Dynamo guards on
        # them as well, but a graph with dynamic shapes may see new ones)
        return tuple((tuple(a.shape), a.stride(), a.dtype) if isinstance(a, torch.Tensor) else a
                     for i, a in enumerate(args) if i not in self.frozen)

    def __call__(self, *args: Any) -> Any:
        key = self._key(args)
        found = self._built.get(key)
        if found is None or not _current(found[1], args):
            found = self._build(key, args)
        else:
            self._built.move_to_end(key)
        built = found[0]
        return built.module(*[args[i] for i in built.runtime_positions])

    def _build(self, key: tuple, args: tuple) -> tuple[Built, list]:
        try:
            built = build(self.gm, list(args), self.frozen, self.ctx, self.options)
        except Exception as error:        # noqa: BLE001 - whatever failed: run it eagerly
            counters["fallbacks"] += 1
            report = (f"jitnn backend: the graph could not be traced and partitioned "
                      f"({type(error).__name__}: {error}); it runs in eager PyTorch")
            log_once(report)
            built = Built(self.gm, {}, list(range(len(args))), report, fell_back=True)
        else:
            if self.options.explain:
                print(built.report)
            elif built.fell_back:
                log_once(built.report)
        self.last_build = built
        found = (built, versions(built.frozen))
        self._built[key] = found
        self._built.move_to_end(key)
        while len(self._built) > MAX_SHAPES:
            self._built.popitem(last=False)
        return found


def _current(frozen: list, args: tuple) -> bool:
    """Every frozen tensor is still the one given at the build, unchanged."""
    for position, tensor, version in frozen:
        given = args[position]
        if given is not tensor or (version >= 0 and given._version != version):
            return False
    return True


def jitnn_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: dict | None = None,
                  mode: str | None = None) -> Callable:
    """The ``torch.compile`` backend (``backend="jitnn"``); ``mode`` is
    accepted and has no effect. See the module docstring."""
    settings = Options.parse(options)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in example_inputs):
        log_once("jitnn backend: gradients are needed here (grad mode is on and an input or "
                 "parameter requires grad); jitnn runs inference only, so this graph runs in "
                 "eager PyTorch. Call the model under torch.no_grad() or "
                 "torch.inference_mode().")
        return gm.forward
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    frozen = {i for i, node in enumerate(placeholders) if is_static_input(node)}
    return CompiledGraph(gm, frozen, settings)


__all__ = ["ATEN", "DECOMPOSITIONS", "CompiledGraph", "JitnnPartition", "MAX_SHAPES", "counters",
           "jitnn_backend", "supported_targets"]
