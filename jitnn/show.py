"""See a layout: which logical element sits at which memory offset.

``show_layout((1, 3, 2, 2), "nChw8c")`` prints two views of a small 4-D tensor
``(N, C, H, W)`` stored in ``nchw``, ``nhwc`` or ``nChw{b}c`` (b in 1, 4, 8,
16, 32):

* logical -> memory: for each ``(n, c)`` an H x W grid of the memory offset
  (in floats) where element ``(n, c, h, w)`` lives;
* memory -> logical: the buffer in memory order, one line per run of
  contiguous offsets, each cell the ``(n, c, h, w)`` stored there; ``pad``
  marks a padding lane (a physical channel past C, always zero).

The offsets come from the numpy specification in :mod:`jitnn.layouts`
(``reference_nchw_to_blocked`` applied to an array of element numbers), so
the picture is the real layout, not a re-derivation. ``png=path`` also draws
it with matplotlib: the memory strip colored by channel, padding grey.
"""

from __future__ import annotations

import sys

import numpy as np

from .errors import JitnnTypeError, JitnnValueError
from .layouts import BLOCK_SIZES, block_of, blocked_shape, reference_nchw_to_blocked

#: Largest tensor show_layout draws (logical elements, and floats in memory).
MAX_ELEMENTS = 256
MAX_PHYSICAL = 1024
_LINE_WIDTH = 100


class LayoutText(str):
    """The text :func:`show_layout` returns; echoes as the drawing itself in a REPL."""

    def __repr__(self) -> str:
        return str(self)


def _check(shape, layout) -> tuple[tuple[int, int, int, int], int | None]:
    try:
        dims = tuple(shape)
    except TypeError:
        raise JitnnTypeError(f"show_layout: expected a shape (N, C, H, W), got {shape!r}") from None
    if len(dims) != 4 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                 for d in dims):
        raise JitnnValueError(
            f"show_layout: expected a 4-D shape of integers (N, C, H, W), got {shape!r}")
    dims = tuple(int(d) for d in dims)
    if min(dims) < 1:
        raise JitnnValueError(f"show_layout: expected every dimension >= 1, got {dims}")
    if not isinstance(layout, str):
        raise JitnnTypeError(f"show_layout: expected a layout tag string, got {layout!r}")
    block = block_of(layout)
    if layout not in ("nchw", "nhwc") and block not in BLOCK_SIZES:
        raise JitnnValueError(
            "show_layout: expected layout 'nchw', 'nhwc' or 'nChw{b}c' with b in "
            f"{BLOCK_SIZES}, got {layout!r}")
    count = int(np.prod(dims))
    physical = int(np.prod(blocked_shape(dims, block))) if block else count
    if count > MAX_ELEMENTS or physical > MAX_PHYSICAL:
        raise JitnnValueError(
            f"show_layout: expected a small shape (at most {MAX_ELEMENTS} elements and "
            f"{MAX_PHYSICAL} floats in memory, to fit a screen), got {dims} in {layout}: "
            f"{count} elements, {physical} floats")
    return dims, block


def _memory(dims, layout: str, block: int | None) -> np.ndarray:
    """The buffer of ``layout`` holding element numbers: entry = row-major
    index of (n, c, h, w) in the logical tensor, -1 in padding lanes."""
    ids = np.arange(int(np.prod(dims)), dtype=np.int64).reshape(dims)
    if layout == "nchw":
        return ids.copy()
    if layout == "nhwc":
        return np.ascontiguousarray(ids.transpose(0, 2, 3, 1))
    # padding lanes come out as 0 from the spec: shift ids by one to tell them apart
    return reference_nchw_to_blocked(ids + 1, block) - 1


def _formula(layout: str, block: int | None) -> tuple[str, str]:
    if layout == "nchw":
        return "(N, C, H, W)", "[n, c, h, w]"
    if layout == "nhwc":
        return "(N, H, W, C)", "[n, h, w, c]"
    return (f"(N, ceil(C/{block}), H, W, {block})",
            f"[n, c // {block}, h, w, c % {block}]; lanes past C are zero")


def _side_by_side(blocks: list[list[str]], gap: int = 4) -> list[str]:
    """Lay text blocks out left to right, wrapping at the line width."""
    lines, row, width = [], [], 0
    for block in blocks:
        w = max(len(line) for line in block)
        if row and width + gap + w > _LINE_WIDTH:
            lines += _join(row, gap) + [""]
            row, width = [], 0
        row.append(block)
        width += (gap if width else 0) + w
    if row:
        lines += _join(row, gap)
    return lines


def _join(blocks: list[list[str]], gap: int) -> list[str]:
    widths = [max(len(line) for line in block) for block in blocks]
    height = max(len(block) for block in blocks)
    return [(" " * gap).join((block[i] if i < len(block) else "").ljust(w)
                             for block, w in zip(blocks, widths)).rstrip()
            for i in range(height)]


def _row_length(physical_shape: tuple[int, ...]) -> int:
    """Floats per printed memory line: the innermost axis, times the next
    ones while the line stays at most 8 cells."""
    length = physical_shape[-1]
    for size in reversed(physical_shape[:-1]):
        if length * size > 8:
            break
        length *= size
    return length


def _text(dims, layout: str, block: int | None, memory: np.ndarray) -> str:
    n_, c_, h_, w_ = dims
    flat = memory.reshape(-1)
    count = int(np.prod(dims))
    offset = np.empty(count, np.int64)
    real = flat >= 0
    offset[flat[real]] = np.nonzero(real)[0]
    offset = offset.reshape(dims)
    pad = int((~real).sum())
    buffer_axes, formula = _formula(layout, block)
    lines = [f"show_layout({dims}, {layout!r}): buffer {buffer_axes} = {memory.shape}, "
             f"{flat.size} floats",
             f"element (n, c, h, w) at {formula}"]
    if pad:
        lines.append(f"C = {c_} is padded to {memory.shape[1] * block} channels: {pad} padding "
                     f"lanes, {flat.size / count:.2f}x the memory of the logical tensor")
    lines += ["", "logical -> memory offset (floats from the start of the buffer)"]
    cell = len(str(flat.size - 1))
    grids = []
    for n in range(n_):
        for c in range(c_):
            grid = [f"n={n} c={c}"]
            grid.append(" " * 4 + " ".join(f"{'w' + str(w):>{cell}}" for w in range(w_)))
            for h in range(h_):
                grid.append(f"h={h:<2}" + " ".join(f"{offset[n, c, h, w]:>{cell}}"
                                                 for w in range(w_)))
            grids.append(grid)
    lines += _side_by_side(grids)
    lines += ["", "memory -> logical: offset, then the (n,c,h,w) stored at each float, then "
              "the buffer index" + ("; pad = padding lane, always zero" if pad else "")]
    index = np.unravel_index(np.arange(count), dims)
    labels = [",".join(str(int(axis[i])) for axis in index) for i in range(count)]
    width = max(3, max(len(label) for label in labels))
    row = _row_length(memory.shape)
    covered = next(k for k in range(1, memory.ndim + 1)
                   if int(np.prod(memory.shape[memory.ndim - k:])) == row)
    lead = len(str(flat.size - 1))
    for start in range(0, flat.size, row):
        where = np.unravel_index(start, memory.shape)
        head = "[" + ",".join([str(int(i)) for i in where[:len(where) - covered]]
                              + [":"] * covered) + "]"
        cells = [labels[v].center(width) if v >= 0 else "pad".center(width)
                 for v in flat[start:start + row]]
        lines.append(f"{start:>{lead}}  " + " ".join(cells) + f"   {head}")
    return "\n".join(lines) + "\n"


def _draw(dims, layout: str, memory: np.ndarray, path) -> None:
    try:
        import matplotlib
        from matplotlib.figure import Figure  # no pyplot: leaves the user's backend alone
        from matplotlib.patches import Rectangle
    except ImportError:
        raise JitnnValueError("show_layout: png= needs matplotlib, which is not installed "
                              "(pip install matplotlib)") from None
    flat = memory.reshape(-1)
    row = _row_length(memory.shape)
    rows = -(-flat.size // row)
    channels = np.unravel_index(np.maximum(flat, 0), dims)
    cmap = matplotlib.colormaps["tab20" if dims[1] > 10 else "tab10"]
    fig = Figure(figsize=(min(2 + 0.9 * row, 16), min(1.5 + 0.45 * rows, 40)))
    ax = fig.subplots()
    for k, value in enumerate(flat):
        y, x = divmod(k, row)
        if value < 0:
            face, text = "0.85", "pad"
        else:
            n, c, h, w = (int(axis[k]) for axis in channels)
            face, text = cmap(c % cmap.N), f"c{c}\n({n},{h},{w})"
        ax.add_patch(Rectangle((x, -y - 1), 1, 1, facecolor=face, edgecolor="white",
                               hatch="//" if value < 0 else None))
        ax.text(x + 0.5, -y - 0.5, text, ha="center", va="center", fontsize=6)
        if x == 0:
            ax.text(-0.1, -y - 0.5, str(k), ha="right", va="center", fontsize=6)
    ax.set_xlim(-1, row)
    ax.set_ylim(-rows - 0.2, 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{layout} memory of logical {dims}: offsets left, one color per channel "
                 "(c, then (n,h,w)); hatched grey = padding lanes", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def show_layout(shape, layout: str, *, file=None, png=None) -> LayoutText:
    """Draw where each element of a small ``(N, C, H, W)`` tensor sits in
    memory in ``layout`` (``"nchw"``, ``"nhwc"``, ``"nChw8c"``, any block in
    1, 4, 8, 16, 32).

    Prints the text to ``file`` (default stdout) and returns it; ``png`` (a
    path) also saves a matplotlib drawing of the memory colored by channel.
    Raises ``JitnnValueError`` for layouts it does not know and shapes too
    large to read (more than 256 elements or 1024 floats in memory).
    """
    dims, block = _check(shape, layout)
    memory = _memory(dims, layout, block)
    text = LayoutText(_text(dims, layout, block, memory))
    print(text, end="", file=sys.stdout if file is None else file)
    if png is not None:
        _draw(dims, layout, memory, png)
    return text


__all__ = ["show_layout"]
