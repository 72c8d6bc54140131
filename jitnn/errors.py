"""jitnn's exceptions.

Every error jitnn raises on bad input is a :class:`JitnnError`, and also a
``TypeError`` or ``ValueError`` where that fits, so ``except ValueError`` in
user code keeps working. Messages name the operation, what was expected and
what came: ``numpy: out has shape (2, 3) but the tensor's shape is (3, 2)``.
"""

from __future__ import annotations


class JitnnError(Exception):
    """Base class of every error jitnn raises on purpose."""


class JitnnTypeError(JitnnError, TypeError):
    """An argument of the wrong kind: a dtype, an object that is not an array."""


class JitnnValueError(JitnnError, ValueError):
    """An argument of the right kind but a wrong value: shape, option, layout."""
