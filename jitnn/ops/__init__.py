"""The ops: one module per op family, each with its shape inference and
validation, its numpy reference (the spec, plain NCHW, float64) and its
lowering to a kernel."""

from .conv2d import conv2d
from .matmul import gemm, matmul

__all__ = ["conv2d", "gemm", "matmul"]
