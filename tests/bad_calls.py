"""Bad calls: for a tensor of a given shape, calls of each op that its
validation must refuse at the call with a :class:`jitnn.JitnnError` (a
ValueError or TypeError) naming the op. Used by tests/test_random_bad_calls.py
and tests/test_fuzz.py.

The kernels run without bounds checks, so every one of these must be caught
by the Python wrappers before a kernel sees it: a wrong channel count, a
window or filter larger than the padded input, a zero stride, a negative
padding, sizes past what an index can hold, shapes that do not broadcast, a
wrong permutation, axis or element count, statistics of the wrong length,
parameters that are NaN, operands of another context or of a non-real dtype,
and readback arrays of the wrong dtype, shape, order or writability.
"""

from __future__ import annotations

import numpy as np
import pytest

import jitnn

F32 = np.float32


def _ones(*shape, dtype=F32):
    return np.ones(shape, dtype)


def _spatial_mismatch(shape):
    """A shape that does not broadcast against ``shape`` (one of its
    dimensions larger than 1 changed; None if it has none)."""
    sizes = [d for d, size in enumerate(shape) if size > 1]
    if not sizes:
        return None
    bad = list(shape)
    bad[sizes[-1]] += 1
    return tuple(bad)


def bad_calls_4d(shape):
    """(op named in the error, call) pairs, each invalid for a 4-D tensor of ``shape``."""
    n, c, h, w = shape
    calls = [
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c + 1, 1, 1))),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, h + 2, w + 2))),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 1, 1), strides=0)),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 1, 1), dilations=(1, 0))),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 3, 3), padding=[1, 1, -1, 1])),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 3, 3), padding=[1, 1, 1])),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 1, 1), _ones(5))),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 1, 1), activation="swish")),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 1, 1), activation=("clamp", 1, 0))),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 1))),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(c + 1, 1, 3, 3), groups=c + 1)),
        ("conv2d", lambda x: jitnn.conv2d(x, _ones(4, c, 1, 1), input_layout="nchw8c")),
        ("conv_transpose2d", lambda x: jitnn.conv_transpose2d(x, _ones(c + 1, 4, 3, 3))),
        ("conv_transpose2d", lambda x: jitnn.conv_transpose2d(x, _ones(c, 4, 3, 3), strides=2,
                                                              output_padding=2)),
        ("max_pool2d", lambda x: jitnn.max_pool2d(x, (h + 2, w + 2))),
        ("max_pool2d", lambda x: jitnn.max_pool2d(x, 2, strides=0)),
        ("max_pool2d", lambda x: jitnn.max_pool2d(x, 2, rounding_type="round")),
        ("average_pool2d", lambda x: jitnn.average_pool2d(x, 3, padding=-1)),
        ("average_pool2d", lambda x: jitnn.average_pool2d(x, 0)),
        ("global_average_pool2d", lambda x: jitnn.global_average_pool2d(x, layout="hwcn")),
        ("batch_normalization", lambda x: jitnn.batch_normalization(x, _ones(c + 1), _ones(c))),
        ("batch_normalization", lambda x: jitnn.batch_normalization(x, _ones(c), _ones(c),
                                                                    axis=4)),
        ("concat", lambda x: jitnn.concat([x, _ones(n, c, h + 1, w)], 1)),
        ("concat", lambda x: jitnn.concat([x, x], 4)),
        ("reshape", lambda x: jitnn.reshape(x, (n, c, h * w + 1))),
        ("transpose", lambda x: jitnn.transpose(x, (0, 0, 1, 2))),
        ("transpose", lambda x: jitnn.transpose(x, (0, 1, 2))),
        ("softmax", lambda x: jitnn.softmax(x, 4)),
        ("clamp", lambda x: jitnn.clamp(x, 1.0, -1.0)),
        ("leaky_relu", lambda x: jitnn.leaky_relu(x, "0.1")),
        ("matmul", lambda x: jitnn.matmul(x, _ones(w + 1, 3))),
        ("add", lambda x: jitnn.add(x, _ones(1, 1, 1, 1, dtype=np.complex64))),
        ("mul", lambda x: jitnn.mul(x, np.array([["a"]]))),
        ("sub", lambda x: jitnn.sub(x, jitnn.Context().tensor(_ones(*shape)))),
        ("numpy", lambda x: x.numpy(out=np.empty(shape, np.float64))),
        ("numpy", lambda x: x.numpy(out=np.empty((n, c, h, w + 1), F32))),
        ("numpy", lambda x: x.numpy(out=np.empty((n, c, h, 2 * w), F32)[..., ::2])),
        ("numpy", lambda x: x.numpy(out=np.broadcast_to(np.empty(1, F32), shape))),
    ]
    mismatch = _spatial_mismatch(shape)
    if mismatch is not None:
        calls.append(("maximum", lambda x: jitnn.maximum(x, _ones(*mismatch))))
    return calls


def bad_calls_2d(shape):
    rows, features = shape
    return [
        ("gemm", lambda x: jitnn.gemm(x, _ones(features + 1, 3))),
        ("gemm", lambda x: jitnn.gemm(x, _ones(features, 3), _ones(rows + 1, 4))),
        ("gemm", lambda x: jitnn.gemm(x, _ones(3, features + 1), b_transpose=True)),
        ("matmul", lambda x: jitnn.matmul(x, _ones(features + 2))),
        ("softmax", lambda x: jitnn.softmax(x, 2)),
        ("reshape", lambda x: jitnn.reshape(x, (rows * features + 1,))),
        ("numpy", lambda x: x.numpy(out=np.empty((rows, features), np.int32))),
    ]


def expect_error(op: str, bad, x, which: str) -> None:
    """``bad(x)`` raises a JitnnError that is a ValueError or TypeError and names ``op``."""
    where = f"bad call {which} ({op}) on {x!r}"
    try:
        bad(x)
    except jitnn.JitnnError as error:
        assert isinstance(error, (ValueError, TypeError)), f"{where}: {error!r}"
        assert f"{op}: " in str(error), f"{where}: the error does not name {op}: {error}"
    else:
        pytest.fail(f"{where}: no error")


