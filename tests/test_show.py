"""``show_layout``: the offsets it prints are the real layouts' offsets."""

import io
import re

import numpy as np
import pytest

from jitnn import JitnnError
from jitnn.show import show_layout


def _direct_offset(shape, layout, n, c, h, w):
    """Where (n, c, h, w) lives, straight from the layout's definition."""
    N, C, H, W = shape
    if layout == "nchw":
        return ((n * C + c) * H + h) * W + w
    if layout == "nhwc":
        return ((n * H + h) * W + w) * C + c
    block = int(re.fullmatch(r"nChw(\d+)c", layout).group(1))
    blocks = -(-C // block)
    return (((n * blocks + c // block) * H + h) * W + w) * block + c % block


def _logical_grid(text, shape):
    """Parse the logical -> memory section: {(n, c, h, w): offset}."""
    N, C, H, W = shape
    section = text.split("logical -> memory offset")[1].split("memory -> logical")[0]
    found = {}
    lines = section.splitlines()
    for i, line in enumerate(lines):
        heads = [(m.start(), int(m.group(1)), int(m.group(2)))
                 for m in re.finditer(r"n=(\d+) c=(\d+)", line)]
        for start, n, c in heads:
            for h in range(H):
                row = lines[i + 2 + h][start:].split()
                assert row[0] == f"h={h}"
                for w in range(W):
                    found[(n, c, h, w)] = int(row[1 + w])
    return found


def _memory_rows(text):
    """Parse the memory -> logical section: {offset: "n,c,h,w" or "pad"}."""
    section = text.split("memory -> logical")[1].splitlines()[1:]
    cells = {}
    for line in section:
        if not line.strip():
            continue
        parts = line.split()
        start, labels = int(parts[0]), parts[1:-1]
        for k, label in enumerate(labels):
            cells[start + k] = label
    return cells


CASES = [(shape, layout) for shape in ((1, 3, 2, 3), (1, 9, 2, 2), (2, 3, 2, 2))
         for layout in ("nchw", "nhwc", "nChw8c", "nChw4c")]


@pytest.mark.parametrize("shape,layout", CASES)
def test_offsets_match_a_direct_computation(shape, layout):
    text = show_layout(shape, layout, file=io.StringIO())
    grid = _logical_grid(text, shape)
    memory = _memory_rows(text)
    assert len(grid) == int(np.prod(shape))
    for (n, c, h, w), offset in grid.items():
        assert offset == _direct_offset(shape, layout, n, c, h, w), (n, c, h, w)
        assert memory[offset] == f"{n},{c},{h},{w}"


@pytest.mark.parametrize("shape,layout,pads", [
    ((1, 3, 2, 2), "nChw8c", 5 * 4), ((1, 9, 2, 2), "nChw8c", 7 * 4),
    ((1, 3, 2, 2), "nChw4c", 1 * 4), ((1, 9, 1, 3), "nChw4c", 3 * 3),
    ((2, 9, 1, 2), "nChw8c", 2 * 7 * 2), ((1, 8, 2, 2), "nChw8c", 0),
    ((1, 3, 2, 2), "nchw", 0), ((1, 3, 2, 2), "nhwc", 0),
])
def test_padding_lanes_are_marked(shape, layout, pads):
    text = show_layout(shape, layout, file=io.StringIO())
    memory = _memory_rows(text)
    marked = sorted(offset for offset, label in memory.items() if label == "pad")
    assert len(marked) == pads
    if pads:
        block = int(layout[4:-1])
        assert all(offset % block >= shape[1] % block for offset in marked)
        assert "padding lane" in text and f"C = {shape[1]} is padded" in text
        assert f"{len(memory) / np.prod(shape):.2f}x the memory" in text
    else:
        assert "padded" not in text
    assert len(memory) == len(marked) + int(np.prod(shape))


def test_prints_to_file_or_stdout_and_returns_the_text(capsys):
    out = io.StringIO()
    text = show_layout((1, 3, 2, 2), "nChw8c", file=out)
    assert out.getvalue() == text and capsys.readouterr().out == ""
    assert text.startswith("show_layout((1, 3, 2, 2), 'nChw8c')")
    assert "[n, c // 8, h, w, c % 8]" in text and "2.67x" in text
    again = show_layout((1, 3, 2, 2), "nChw8c")
    assert capsys.readouterr().out == again == text
    assert repr(text) == str(text)          # echoes as the drawing in a REPL


@pytest.mark.parametrize("block", [1, 4, 8, 16, 32])
def test_every_block_size(block):
    shape = (1, 5, 2, 2)
    text = show_layout(shape, f"nChw{block}c", file=io.StringIO())
    grid = _logical_grid(text, shape)
    for key, offset in grid.items():
        assert offset == _direct_offset(shape, f"nChw{block}c", *key)


def test_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "layout.png"
    show_layout((1, 9, 2, 2), "nChw8c", file=io.StringIO(), png=path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("shape,layout,message", [
    ((1, 64, 56, 56), "nchw", r"show_layout: expected a small shape .* got \(1, 64, 56, 56\)"),
    ((1, 3, 8, 8), "nChw32c", r"show_layout: expected a small shape .*1024 floats"),
    ((1, 3, 2), "nchw", r"show_layout: expected a 4-D shape .* got \(1, 3, 2\)"),
    ((1, 0, 2, 2), "nchw", r"show_layout: expected every dimension >= 1, got \(1, 0, 2, 2\)"),
    ((1, 3, 2, 2), "nChw3c", r"show_layout: expected layout .* got 'nChw3c'"),
    ((1, 3, 2, 2), "oihw", r"show_layout: expected layout .* got 'oihw'"),
])
def test_errors_name_show_layout_expected_and_got(shape, layout, message):
    with pytest.raises(JitnnError, match=message) as error:
        show_layout(shape, layout, file=io.StringIO())
    assert isinstance(error.value, ValueError)
