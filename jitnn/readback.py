"""Reading tensors back: several readbacks at once on a context's worker threads.

Every readback starts before any is waited on, and each conversion from the
blocked layout runs on its share of the context's threads (ONNX Runtime's
WebNN backend reads its outputs back the same way).
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .errors import JitnnTypeError, JitnnValueError
from .tensor import Tensor, Value

if TYPE_CHECKING:
    from .context import Context


#: every context's Readback, so that a forked child can drop their pools
_READBACKS: "weakref.WeakSet[Readback]" = weakref.WeakSet()


class Readback:
    """A context's readback threads (started on first use)."""

    def __init__(self, num_threads: int):
        self.num_threads = num_threads
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        _READBACKS.add(self)

    def _forget_pool(self) -> None:
        """In a forked child: the pool's threads did not come along (a task
        given to it would wait forever), so the next readback starts a new one."""
        self._lock = threading.Lock()
        self._pool = None

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=max(2, self.num_threads), thread_name_prefix="jitnn-read")
            return self._pool

    def read_values(self, values: Sequence[Value],
                    outs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        """Read ``values`` (computed, or one pending: read flushes it) into
        ``outs`` (checked), several at once on the readback threads."""
        if len(values) <= 1:
            return [v._read_into(o, None) for v, o in zip(values, outs)]
        share = max(1, self.num_threads // min(len(values), self.num_threads))
        pool = self.pool()
        futures = [pool.submit(v._read_into, o, share) for v, o in zip(values, outs)]
        return [f.result() for f in futures]


def read_all(ctx: "Context", tensors: Sequence[Tensor],
             out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
    """``ctx.read_all``: check the tensors and arrays, compute what the
    tensors need (one flush), then convert them in parallel."""
    tensors = list(tensors)
    for index, tensor in enumerate(tensors):
        if not isinstance(tensor, Tensor):
            raise JitnnTypeError(
                f"read_all: item {index} should be a jitnn.Tensor, got {type(tensor).__name__}")
        if tensor._ctx is not ctx:
            raise JitnnValueError(f"read_all: item {index} belongs to another context")
    outs = [None] * len(tensors) if out is None else list(out)
    if len(outs) != len(tensors):
        raise JitnnValueError(
            f"read_all: out has {len(outs)} entries but {len(tensors)} tensors were given")
    for index, (tensor, buf) in enumerate(zip(tensors, outs)):
        if buf is not None:
            tensor._check_out(buf, op=f"read_all (item {index})")
    values = [t._v for t in tensors]
    if len(values) > 1:
        ctx.flush_values(values)
    return ctx.readback.read_values(values, outs)


async def read_async(ctx: "Context", tensor: Tensor,
                     out: np.ndarray | None = None) -> np.ndarray:
    """``ctx.read_async``: one readback awaited on the readback threads."""
    if out is not None:
        tensor._check_out(out, op="read_async")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(ctx.readback.pool(), tensor._read_into, out, None)


def _after_fork_in_child() -> None:
    for readback in list(_READBACKS):
        readback._forget_pool()


if hasattr(os, "register_at_fork"):          # (no fork on Windows)
    os.register_at_fork(after_in_child=_after_fork_in_child)
