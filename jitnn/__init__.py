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
from .tensor import DTYPES, Tensor, reorder, tensor
from .scheduler import explain
from .graph import Graph, GraphBuilder, Operand
from .show import show_layout
from .precompile import warmup
from . import ops as _ops  # registers every op (jitnn/registry.py)
from . import registry as _registry

# every registered op is jitnn.<name> (the eager op; GraphBuilder.<name> too)
globals().update({_op.name: _op.function for _op in _registry.ops()})

__version__ = "0.1.0"

__all__ = sorted([_op.name for _op in _registry.ops()] + [
    "Context", "Stats", "Tensor", "DTYPES",
    "JitnnError", "JitnnExecutionError", "JitnnTypeError", "JitnnValueError",
    "default_context", "host_block", "read_all", "reorder", "tensor", "__version__",
    "explain", "POLICIES", "Graph", "GraphBuilder", "Operand",
    "show_layout", "warmup",
])
