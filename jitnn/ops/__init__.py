"""The ops: one module per op family, each with its shape inference and
validation, its numpy reference (the spec, plain NCHW, float64) and its
lowering to a kernel. Importing a module registers its ops
(jitnn/registry.py); ``jitnn.<name>`` and ``GraphBuilder.<name>`` are every
registered op."""

from . import (cast, conv2d, conv_transpose2d, eltwise, gather, lrn, matmul,  # noqa: F401
               normalization, pad, pool, reduction, resample, scatter, shape, slice)
from . import logical, math  # noqa: F401 - element-wise math and logic (after eltwise)
from . import attention  # noqa: F401 - fused scaled dot-product attention
from . import rotary  # noqa: F401 - rotary position embedding (Llama's RoPE)
from . import gated  # noqa: F401 - the gated MLP's silu(gate) * up (SwiGLU)
from . import recurrent  # noqa: F401 - an LSTM or GRU step after its recurrent product
from . import group_norm  # noqa: F401 - group normalization (GroupNorm)
