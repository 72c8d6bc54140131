"""Argument handling shared by the ops."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..context import Context, default_context
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import epilogue
from ..tensor import Tensor, as_float32_copy

#: What ``activation=`` accepts: a name, or a (name, *params) tuple.
ACTIVATION_NAMES = ("relu", "relu6", "clamp", "leaky_relu", "sigmoid", "tanh",
                    "hard_swish", "gelu")


def context_of(op: str, *values: object) -> Context:
    """The context of the Tensor arguments (the default one if none is a Tensor)."""
    contexts = {id(v._ctx): v._ctx for v in values if isinstance(v, Tensor)}
    if len(contexts) > 1:
        raise JitnnValueError(f"{op}: the tensors belong to different contexts")
    return next(iter(contexts.values())) if contexts else default_context()


def as_tensor(ctx: Context, value: object, op: str, name: str) -> Tensor:
    """A Tensor argument, or an array-like copied into one."""
    if isinstance(value, Tensor):
        return value
    try:
        return Tensor._from_host(ctx, as_float32_copy(value, op=f"{op}: {name}"))
    except JitnnTypeError as error:
        raise JitnnTypeError(str(error)) from None


def int_pair(op: str, name: str, value: object, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each >= minimum."""
    items = (value, value) if isinstance(value, (int, np.integer)) else value
    try:
        items = tuple(items)
    except TypeError:
        raise JitnnTypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}") from None
    if len(items) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                  for v in items):
        raise JitnnTypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    if min(items) < minimum:
        raise JitnnValueError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    return int(items[0]), int(items[1])


def padding4(op: str, value: object) -> tuple[int, int, int, int]:
    """WebNN padding ``[top, bottom, left, right]`` from an int, an (h, w) pair or 4 ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        items: Sequence = (value,) * 4
    else:
        try:
            items = tuple(value)  # type: ignore[arg-type]
        except TypeError:
            items = ()
        if len(items) == 2:
            items = (items[0], items[0], items[1], items[1])
    if len(items) != 4 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                  for v in items):
        raise JitnnTypeError(
            f"{op}: padding must be an int, an (h, w) pair or [top, bottom, left, right], "
            f"got {value!r}")
    if min(items) < 0:
        raise JitnnValueError(f"{op}: padding must be >= 0, got {value!r}")
    return tuple(int(v) for v in items)  # type: ignore[return-value]


def parse_activation(op: str, activation: object) -> tuple[int, float, float]:
    """``None``, ``"relu"``, ``"relu6"``, ``("clamp", lo, hi)``, ``("leaky_relu", alpha)``,
    ``"sigmoid"``, ``"tanh"``, ``"hard_swish"``, ``"gelu"`` -> (code, param0, param1)."""
    if activation is None:
        return epilogue.NONE, 0.0, 0.0
    name, params = (activation, ()) if isinstance(activation, str) else \
        (activation[0], tuple(activation[1:])) if isinstance(activation, tuple) and activation \
        else (None, ())
    expected = {"clamp": 2, "leaky_relu": 1}
    if name not in ACTIVATION_NAMES:
        raise JitnnValueError(
            f"{op}: activation must be None, one of {ACTIVATION_NAMES}, ('clamp', min, max) "
            f"or ('leaky_relu', alpha), got {activation!r}")
    if name == "relu6":
        name, params = "clamp", (0.0, 6.0)
    if name == "leaky_relu" and not params:
        params = (0.01,)  # WebNN's default alpha
    if len(params) != expected.get(name, 0) or not all(
            isinstance(p, (int, float, np.number)) and not isinstance(p, bool) for p in params):
        raise JitnnValueError(
            f"{op}: activation {name!r} takes {expected.get(name, 0)} number(s), got {activation!r}")
    if name == "clamp" and not params[0] <= params[1]:
        raise JitnnValueError(f"{op}: clamp needs min <= max, got {activation!r}")
    params = tuple(float(p) for p in params) + (0.0, 0.0)
    return epilogue.ACTIVATIONS[name], params[0], params[1]
