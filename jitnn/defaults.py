"""The default context, which module-level calls (``jitnn.tensor``, eager
ops on numpy arrays) use, and the contexts that unpickling makes.

This low module holds only the hook: :mod:`jitnn.context`, which sits above
the ops in the runtime's layers, registers its ``Context`` class here when it
is imported, so that tensors and ops can ask for the default context without
importing the module that imports them.

A context pickles as the arguments it was made with (:func:`unpickled_context`):
the default context arrives as the receiving process's default context, any
other as the one context of that process made by unpickling those arguments,
so a graph and its context pickled apart meet again there.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from .errors import JitnnTypeError

_lock = threading.Lock()
_factory: Callable[[], Any] | None = None
_default: Any = None
#: contexts made by unpickling, by their arguments (alive while someone holds them)
_unpickled: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()


def set_factory(factory: Callable[[], Any]) -> None:
    """Make the default context with ``factory()`` (jitnn.context does this)."""
    global _factory
    _factory = factory


def default_context() -> Any:
    """The context that module-level functions (``jitnn.tensor``, ops) use."""
    global _default
    with _lock:
        if _default is None:
            # (``import jitnn`` imports jitnn.context, which set the factory)
            _default = _factory()
        return _default


def reduce_context(ctx: Any) -> tuple:
    """``Context.__reduce__``: the default context as the receiver's default,
    any other as its arguments, never its caches, threads or tensors; the
    thread count and block only when they were given (``ctx._given``), else
    the receiver's own. A GraphBuilder's shape context does not pickle."""
    if ctx.symbolic:
        raise JitnnTypeError("Context: a GraphBuilder's shape context cannot be pickled")
    if ctx is _default:
        return default_context, ()
    threads_given, block_given = ctx._given
    arguments = dict(num_threads=ctx.num_threads if threads_given else None,
                     block=ctx.block if block_given else None, policy=ctx.policy,
                     max_pending_ops=ctx.max_pending_ops,
                     max_pending_bytes=ctx.max_pending_bytes, conv_algorithm=ctx.conv_algorithm)
    return unpickled_context, (arguments,)


def unpickled_context(arguments: dict) -> Any:
    """The context an unpickled ``Context(**arguments)`` is: made at the first
    unpickle of these arguments in this process, the same one after that.
    Arguments left at None (threads, block) take the receiver's defaults."""
    key = tuple(sorted(arguments.items()))
    with _lock:
        ctx = _unpickled.get(key)
        if ctx is None:
            ctx = _unpickled[key] = _factory(**arguments)
        return ctx
