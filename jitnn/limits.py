"""The sizes jitnn accepts, and the checks that refuse others at the call.

Every shape, dimension, padding, window, stride, dilation and activation
parameter a user gives goes through these checks before an op records
anything, so a bad one raises a :class:`~jitnn.errors.JitnnError` naming the
op instead of wrapping around in int64, failing inside numpy or numba, or
asking for more memory than any machine has at the next flush.

* :data:`MAX_DIM` (2**31 - 1) bounds each dimension of a tensor and each
  padding, window, stride, dilation and output size: kernels may do their
  index arithmetic in 32 bits, and sums and products of two such values
  (``(k - 1) * d + pad``) then still fit in an int64.
* :data:`MAX_ELEMENTS` (2**38) bounds the element count of a tensor: 2**40
  bytes (1 TiB) of float32, more than numpy or numba could allocate here.
  Counts are Python ints (``math.prod``), which never wrap.
* Activation and op parameters are real numbers; ``NaN`` is refused
  everywhere, infinities where they make no sense (an alpha, an epsilon),
  not for clamp bounds (WebNN's defaults are -inf and +inf).
"""

from __future__ import annotations

import math

import numpy as np

from .errors import JitnnTypeError, JitnnValueError

#: the largest dimension, padding, window, stride, dilation or output size
MAX_DIM: int = 2**31 - 1
#: the most elements one tensor may have (2**40 bytes of float32)
MAX_ELEMENTS: int = 2**38


def is_int(value: object) -> bool:
    """A Python or numpy integer; not a bool, a float or a str."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A real number (not a bool)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def check_max(op: str, name: str, values: tuple[int, ...], given: object) -> None:
    """Refuse ``values`` (a padding, window, stride...) above :data:`MAX_DIM`."""
    if max(values, default=0) > MAX_DIM:
        raise JitnnValueError(f"{op}: {name} must be <= {MAX_DIM} (2**31 - 1), got {given!r}")


def int_arg(op: str, name: str, value: object, minimum: int = 0) -> int:
    """One int in ``[minimum, MAX_DIM]`` (a size, a window), as a Python int."""
    if not is_int(value):
        raise JitnnTypeError(f"{op}: {name} must be an int, got {value!r}")
    if value < minimum:  # type: ignore[operator]
        raise JitnnValueError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    check_max(op, name, (int(value),), value)  # type: ignore[call-overload]
    return int(value)  # type: ignore[call-overload]


def check_shape(op: str, what: str, shape: tuple[int, ...]) -> None:
    """Refuse a shape (non-negative ints) with a dimension above :data:`MAX_DIM`
    or more than :data:`MAX_ELEMENTS` elements."""
    elements = math.prod(shape)
    if elements <= MAX_ELEMENTS and max(shape, default=0) <= MAX_DIM:
        return                                        # the common case, fast
    big = [d for d in shape if d > MAX_DIM]
    if big:
        raise JitnnValueError(f"{op}: {what} {shape} has a dimension of {big[0]}, more than "
                              f"{MAX_DIM} (2**31 - 1)")
    if elements > MAX_ELEMENTS:
        raise JitnnValueError(f"{op}: {what} {shape} has {elements} elements, more than "
                              f"{MAX_ELEMENTS} (2**38, 1 TiB of float32) a tensor may have")


def shape_arg(op: str, name: str, shape: object) -> tuple[int, ...]:
    """A shape the user gave: a sequence of ints >= 0 (numpy integers too; not
    floats, strs or bools) within :data:`MAX_DIM` and :data:`MAX_ELEMENTS`,
    as a tuple of Python ints."""
    items: tuple = ()
    if not isinstance(shape, (str, bytes)):          # "22" is not (2, 2)
        try:
            items = tuple(shape)  # type: ignore[arg-type]
        except TypeError:
            items = (None,)
    if isinstance(shape, (str, bytes)) or not all(map(is_int, items)):
        raise JitnnTypeError(f"{op}: {name} must be a sequence of ints, got {shape!r}")
    dims = tuple(int(d) for d in items)
    if any(d < 0 for d in dims):
        raise JitnnValueError(f"{op}: {name} must be >= 0, got {dims}")
    check_shape(op, name, dims)
    return dims


def real_arg(op: str, name: str, value: object, *, finite: bool = True) -> float:
    """A real number as a float: never NaN, and finite unless ``finite=False``
    (an int too large for a float counts as infinite)."""
    if not is_number(value):
        raise JitnnTypeError(f"{op}: {name} must be a number, got {value!r}")
    overflow = False
    try:
        number = float(value)  # type: ignore[arg-type]
        shown = repr(value)
    except OverflowError:            # an int beyond float's range: its size, not its digits
        number, overflow = math.inf, True
        shown = f"an int of {int(value).bit_length()} bits"  # type: ignore[call-overload]
    if finite and not math.isfinite(number):
        raise JitnnValueError(f"{op}: {name} must be finite, got {shown}")
    if math.isnan(number):
        raise JitnnValueError(f"{op}: {name} must not be NaN")
    if overflow:
        raise JitnnValueError(f"{op}: {name} must be representable as a float, got {shown}")
    return number
