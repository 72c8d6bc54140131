"""The default context, which module-level calls (``jitnn.tensor``, eager
ops on numpy arrays) use.

This low module holds only the hook: :mod:`jitnn.context`, which sits above
the ops in the runtime's layers, registers its ``Context`` class here when it
is imported, so that tensors and ops can ask for the default context without
importing the module that imports them.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

_lock = threading.Lock()
_factory: Callable[[], Any] | None = None
_default: Any = None


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
