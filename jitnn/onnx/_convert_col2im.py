"""ONNX Col2Im (opset 18; PyTorch's ``fold``) as a grouped ConvTranspose.

Col2Im sums sliding blocks back into an image: column ``l`` of the input
``(N, C * prod(block), L)`` holds the block whose corner is the ``l``-th
position of the blocks' grid, and each of its values is added at its place
in the block. That is a transposed convolution of the columns viewed as the
grid ``(N, C * prod(block), *grid)`` with a one-hot filter: group ``c``
(``prod(block)`` input channels, one output channel) puts input channel
``c * prod(block) + b`` at block position ``b``. The strides, dilations and
pads are ConvTranspose's; an image row that no block reaches (the grid's
count rounded down) is ConvTranspose's output padding, and reads 0. 1-D,
2-D and 3-D images (VOLO's outlook attention folds 2-D ones); 3-D ones run
as jitnn/onnx/_convert_3d.py's transposed convolutions.
"""

from __future__ import annotations

import numpy as np

from ._common import Const, Converter, ints, need_const, rank_of, shape_of
from ._convert_3d import OPS as SPATIAL_OPS


def op_col2im(cv: Converter, inputs, attrs):
    x = inputs[0]
    image = ints(need_const(cv, inputs[1], "the image shape"))
    block = ints(need_const(cv, inputs[2], "the block shape"))
    nd = len(image)
    if nd > 3:
        raise cv.unsupported(f"a {nd}-D image {image} is not supported: jitnn folds 1-D, 2-D "
                             "and 3-D images")
    if len(block) != nd or rank_of(x) != 3 or nd == 0:
        raise cv.invalid(f"an input of shape {shape_of(x)}, image shape {image} and block "
                         f"shape {block}: Col2Im needs (N, C * prod(block), L) and as many "
                         "block dims as image dims")
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * 2 * nd))
    n, channels_blocks, columns = shape_of(x)
    size = int(np.prod(block))
    grid, output_padding = [], []
    for i in range(nd):
        reach = dilations[i] * (block[i] - 1) + 1
        count = (image[i] + pads[i] + pads[i + nd] - reach) // strides[i] + 1
        grid.append(count)
        output_padding.append(image[i] + pads[i] + pads[i + nd]
                              - ((count - 1) * strides[i] + reach))
    if channels_blocks % size or int(np.prod(grid)) != columns or min(grid) < 1:
        raise cv.invalid(f"an input of shape {shape_of(x)}: image {image}, blocks {block}, "
                         f"strides {strides}, dilations {dilations} and pads {pads} make "
                         f"{max(int(np.prod(grid)), 0)} blocks of {size} values a channel")
    channels = channels_blocks // size
    one_hot = np.eye(size, dtype=np.float32).reshape(size, 1, *block)
    filters = Const(np.tile(one_hot, (channels, 1) + (1,) * nd))
    columns_grid = cv.op("reshape", cv.float_operand(x), (n, channels_blocks, *grid))
    return SPATIAL_OPS["ConvTranspose"](cv, [columns_grid, filters], {
        "strides": strides, "dilations": dilations, "pads": pads,
        "output_padding": output_padding, "group": channels})


OPS = {"Col2Im": op_col2im}
