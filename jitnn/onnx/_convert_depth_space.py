"""ONNX DepthToSpace and SpaceToDepth as a reshape, a transpose and a reshape.

PyTorch's ``pixel_shuffle`` (super-resolution heads: ESPCN, Swin2SR) exports
as DepthToSpace with mode ``CRD``, ``pixel_unshuffle`` as SpaceToDepth.
With block ``b`` and ``x: (N, C, H, W)``, ONNX defines them as:

- DepthToSpace ``DCR`` (the default): ``(N, b, b, C/b², H, W)``, axes
  ``(0, 3, 4, 1, 5, 2)``, to ``(N, C/b², H·b, W·b)``;
- DepthToSpace ``CRD``: ``(N, C/b², b, b, H, W)``, axes ``(0, 1, 4, 2, 5, 3)``;
- SpaceToDepth: ``(N, C, H/b, b, W/b, b)``, axes ``(0, 3, 5, 1, 2, 4)``
  (opset 28's ``CRD`` mode: ``(0, 1, 3, 5, 2, 4)``), to ``(N, C·b², H/b, W/b)``.
"""

from __future__ import annotations

from ._common import Converter, rank_of, shape_of


def _block_of(cv: Converter, x, attrs) -> int:
    if rank_of(x) != 4:
        raise cv.invalid(f"an input of shape {shape_of(x)}: {cv.node.op_type} needs "
                         "(N, C, H, W)")
    if "blocksize" not in attrs or int(attrs["blocksize"]) < 1:
        raise cv.invalid(f"blocksize {attrs.get('blocksize')!r}: {cv.node.op_type} needs a "
                         "positive block size")
    return int(attrs["blocksize"])


def op_depth_to_space(cv: Converter, inputs, attrs):
    x = inputs[0]
    block = _block_of(cv, x, attrs)
    n, c, h, w = shape_of(x)
    mode = attrs.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if c % (block * block):
        raise cv.invalid(f"{c} channels do not divide into blocks of {block} x {block}")
    depth = c // (block * block)
    if mode == "DCR":
        split, axes = (n, block, block, depth, h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        split, axes = (n, depth, block, block, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise cv.invalid(f"mode {mode!r} is not DCR or CRD")
    y = cv.op("transpose", cv.op("reshape", cv.operand(x), split), axes)
    return [cv.op("reshape", y, (n, depth, h * block, w * block))]


def op_space_to_depth(cv: Converter, inputs, attrs):
    x = inputs[0]
    block = _block_of(cv, x, attrs)
    n, c, h, w = shape_of(x)
    if h % block or w % block:
        raise cv.invalid(f"an input of {h} x {w} pixels does not divide into blocks of "
                         f"{block} x {block}")
    mode = attrs.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("DCR", "CRD"):
        raise cv.invalid(f"mode {mode!r} is not DCR or CRD")
    split = (n, c, h // block, block, w // block, block)
    axes = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = cv.op("transpose", cv.op("reshape", cv.operand(x), split), axes)
    return [cv.op("reshape", y, (n, c * block * block, h // block, w // block))]


OPS = {"DepthToSpace": op_depth_to_space, "SpaceToDepth": op_space_to_depth}
