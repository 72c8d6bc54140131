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


class JitnnExecutionError(JitnnError, RuntimeError):
    """An op that validation accepted failed when its kernel ran (at a flush).

    That is a jitnn bug: validation at the call should have refused the
    input. The message names the op and its output; the kernel's own error is
    the ``__cause__``. Raised from the read (or eager call) that needed the
    op, never from an unrelated call whose auto-flush ran it.
    """


class JitnnBufferError(JitnnError, BufferError):
    """A buffer protocol request jitnn cannot honour: a DLPack export without
    a copy (``t.__dlpack__(copy=False)``), to another device, or on a stream."""
