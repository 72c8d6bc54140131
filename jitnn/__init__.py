"""jitnn: CPU neural-network kernels on blocked layouts, in pure Python (Numba).

``jitnn.tensor(array)`` copies data in; ops keep it blocked (``nChw8c`` on
AVX2, ``nChw16c`` on AVX-512) between them; ``t.numpy()`` converts back once,
straight into the caller's array. See README.md and docs/design.md.
"""

from . import _memory

_memory.tune_allocator()

from .context import POLICIES, Context, default_context, host_block, read_all
from .instrumentation import Stats
from .errors import JitnnError, JitnnExecutionError, JitnnTypeError, JitnnValueError
from .tensor import Tensor, reorder, tensor
from .scheduler import explain
from .graph import Graph, GraphBuilder, Operand
from .show import show_layout
from .ops import (add, average_pool2d, batch_normalization, clamp, concat, conv2d,
                  conv_transpose2d, div, flatten,
                  gelu, gemm, global_average_pool2d, hard_swish, leaky_relu, matmul, max_pool2d,
                  maximum, minimum, mul, relu, reshape, sigmoid, softmax, sub, tanh, transpose)
from .ops import gather, lrn, slice  # noqa: A004 - WebNN's name

__version__ = "0.1.0"

__all__ = [
    "Context", "Stats", "conv2d", "conv_transpose2d", "gemm", "matmul", "Tensor",
    "add", "sub", "mul", "div", "maximum", "minimum", "relu", "clamp", "sigmoid", "tanh",
    "leaky_relu", "hard_swish", "gelu", "max_pool2d", "average_pool2d", "global_average_pool2d",
    "batch_normalization", "softmax", "reshape", "flatten", "transpose", "concat",
    "lrn", "gather", "slice",
    "JitnnError", "JitnnExecutionError", "JitnnTypeError", "JitnnValueError",
    "default_context", "host_block", "read_all", "reorder", "tensor", "__version__",
    "explain", "POLICIES", "Graph", "GraphBuilder", "Operand",
    "show_layout",
]
