"""The ops: one module per op family, each with its shape inference and
validation, its numpy reference (the spec, plain NCHW, float64) and its
lowering to a kernel."""

from .conv2d import conv2d
from .conv_transpose2d import conv_transpose2d
from .gather import gather
from .lrn import lrn
from .slice import slice  # noqa: A004 - WebNN's name
from .eltwise import (add, clamp, div, gelu, hard_swish, leaky_relu, maximum, minimum, mul,
                      relu, sigmoid, sub, tanh)
from .matmul import gemm, matmul
from .normalization import batch_normalization, softmax
from .pool import average_pool2d, global_average_pool2d, max_pool2d
from .shape import concat, flatten, reshape, transpose

__all__ = ["add", "average_pool2d", "batch_normalization", "clamp", "concat", "conv2d",
           "conv_transpose2d", "div",
           "flatten", "gelu", "gemm", "global_average_pool2d", "hard_swish", "leaky_relu",
           "matmul", "max_pool2d", "maximum", "minimum", "mul", "relu", "reshape", "sigmoid",
           "softmax", "sub", "tanh", "transpose", "lrn", "gather", "slice"]
