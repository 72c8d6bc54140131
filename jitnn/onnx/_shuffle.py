"""Channel shuffles as exported, converted as channel gathers.

ShuffleNet (v1 and v2) and others mix the channel groups of ``x: (N, C, H,
W)`` with ``Reshape`` to ``(N, g, C/g, H, W)``, ``Transpose(0, 2, 1, 3, 4)``
and ``Reshape`` back to ``(N, C, H, W)``, and then (v2) ``Split`` or
``Slice`` the result in halves along the channels. Converted one by one,
that reads a blocked tensor back to plain layout, transposes it and blocks
it again. It is a fixed permutation of the channels: converted as one
``gather`` of ``x`` along axis 1 (which stays blocked on blocked data:
kernels/channel_gather.py), and a split or slice of that gather along the
channels as gathers of the picked indices, the permuted tensor never made.

The converter remembers, for each operand its Reshape and Transpose handlers
make, where it came from (:class:`Origins`); the last Reshape of the pattern
looks back two steps.
"""

from __future__ import annotations

import numpy as np

from ..graph import Operand


class Origins:
    """How an operand was made from another: ``("reshape", source, shape)``,
    ``("transpose", source, perm)``, ``("gather", source, indices, axis)`` or
    ``("slice", source, axis, start, stop)`` (a step-1 slice of one axis)."""

    def __init__(self) -> None:
        self._made: dict[int, tuple] = {}

    def note(self, result: Operand, how: str, source: Operand, *details) -> Operand:
        self._made[id(result)] = (result, how, source) + details
        return result

    def of(self, operand: object) -> tuple | None:
        made = self._made.get(id(operand))
        # (the result is kept in the entry, so its id is never reused while noted)
        return made[1:] if made is not None and made[0] is operand else None


def shuffle_indices(origins: Origins, x: object, shape: tuple[int, ...]) -> tuple | None:
    """``(source, indices)`` when reshaping ``x`` to ``shape`` ends a channel
    shuffle of ``source`` (``shape`` is its shape): ``out[:, j] = source[:,
    indices[j]]``; else None."""
    transposed = origins.of(x)
    if transposed is None or transposed[0] != "transpose" or \
            tuple(transposed[2] or ()) != (0, 2, 1, 3, 4):
        return None
    reshaped = origins.of(transposed[1])
    if reshaped is None or reshaped[0] != "reshape":
        return None
    source, split = reshaped[1], tuple(reshaped[2])
    if len(shape) != 4 or tuple(source.shape) != tuple(shape) or len(split) != 5:
        return None
    n, channels, height, width = shape
    groups, per_group = split[1], split[2]
    if split != (n, groups, per_group, height, width) or groups * per_group != channels:
        return None
    # out channel b * g + a is source channel a * (C / g) + b
    return source, np.arange(channels, dtype=np.int64).reshape(groups, per_group).T.reshape(-1)


def gathered_channels(origins: Origins, x: object, axis: int) -> tuple | None:
    """``(source, indices)`` when ``x`` is a channel gather along ``axis``."""
    made = origins.of(x)
    if made is None or made[0] != "gather" or made[3] != axis:
        return None
    return made[1], made[2]
