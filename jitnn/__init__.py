"""jitnn: CPU neural-network kernels on blocked layouts, in pure Python (Numba).

``jitnn.tensor(array)`` copies data in; ops keep it blocked (``nChw8c`` on
AVX2) between them; ``t.numpy()`` converts back once, straight into the
caller's array. See README.md and DESIGN.md.
"""

from .context import Context, Stats, default_context, host_block, read_all
from .errors import JitnnError, JitnnTypeError, JitnnValueError
from .tensor import Tensor, reorder, tensor
from .ops import conv2d, gemm, matmul

__version__ = "0.1.0"

__all__ = [
    "Context", "Stats", "conv2d", "gemm", "matmul", "Tensor", "JitnnError", "JitnnTypeError", "JitnnValueError",
    "default_context", "host_block", "read_all", "reorder", "tensor", "__version__",
]
