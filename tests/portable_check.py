"""jitnn on the portable path: numba's generic CPU target and 4-float blocks.

``NUMBA_CPU_NAME=generic python -m tests.portable_check`` runs a
representative set of ops (every conv2d path, matmul on both its paths,
pooling, a fused element-wise chain, reductions, softmax, concat, the
reorders, a small real ONNX model) on one thread against their float64
references, and prints one line per check. The generic target is the
architecture's baseline (SSE2 on x86-64: 4-float vectors and no FMA, as an
x86 CPU without AVX2 or, for the block and tiles, an AArch64 one with NEON),
so the block is 4 (nChw4c) and the matrix products' register tile 6 x 8.
tests/test_portable.py runs it in a subprocess; the whole suite on this
target is ``NUMBA_CPU_NAME=generic pytest`` (README, Testing).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

# before jitnn: numba reads the target when it is imported
if os.environ.get("NUMBA_CPU_NAME") != "generic":
    sys.exit("tests.portable_check: run it with NUMBA_CPU_NAME=generic")

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from jitnn import registry  # noqa: E402
from jitnn.kernels import _config, matmul as matmul_kernels  # noqa: E402

_started = [time.process_time()]
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "models")


def random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def check(name: str, got, want, tol: float = 2e-5) -> None:
    """``got`` within ``tol`` of ``want`` relative to its largest magnitude."""
    got = got.numpy() if isinstance(got, jitnn.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    scale = max(1.0, float(np.abs(want).max()))
    error = float(np.abs(got.astype(np.float64) - want).max()) / scale
    assert error <= tol, f"{name}: error {error:.2e} relative to {scale:.3g} (> {tol})"
    print(f"ok {name} (error {error:.1e}, {time.process_time() - _started[0]:.1f} s CPU)",
          flush=True)
    _started[0] = time.process_time()


def ref(op: str, *args, **options):
    return registry.reference(op)(*args, **options)


def conv_checks(ctx: jitnn.Context) -> None:
    def conv(name, x, w, *, tol=2e-5, layout=None, context=ctx, **options):
        t = jitnn.conv2d(context.tensor(x), context.tensor(w), **options)
        if layout is not None:
            plan = jitnn.explain(t)
            assert layout in plan, f"{name}: no {layout} in the plan:\n{plan}"
        check(name, t, ref("conv2d", x, w, **options), tol)

    conv("conv2d direct 3x3/2, 7 -> 9 channels", random((2, 7, 11, 9), 1),
         random((9, 7, 3, 3), 2), strides=2, padding=1, layout="OIhw4i4o")
    conv("conv2d first layer (plain input) 7x7/2, 3 -> 8", random((1, 3, 19, 17), 3),
         random((8, 3, 7, 7), 4), strides=2, padding=3)
    conv("conv2d 1x1, 17 -> 9", random((1, 17, 7, 5), 5), random((9, 17, 1, 1), 6))
    conv("conv2d depthwise 3x3, 9 channels", random((1, 9, 9, 7), 7), random((9, 1, 3, 3), 8),
         groups=9, padding=1)
    winograd = jitnn.Context(num_threads=1, conv_algorithm="winograd")
    conv("conv2d Winograd F(4x4, 3x3), 8 -> 12", random((1, 8, 13, 10), 9),
         random((12, 8, 3, 3), 10), padding=1, tol=2e-4, layout="winograd:36OI4i4o",
         context=winograd)


def matmul_checks(ctx: jitnn.Context) -> None:
    for name, (m, k, n) in {"matmul direct 17x33 @ 33x9": (17, 33, 9),
                            "matmul packed 70x130 @ 130x50": (70, 130, 50)}.items():
        a, b = random((m, k), m), random((k, n), n)
        check(name, jitnn.matmul(ctx.tensor(a), ctx.tensor(b)), ref("matmul", a, b))


def other_checks(ctx: jitnn.Context) -> None:
    x = random((2, 9, 11, 10), 13)
    t = ctx.tensor(x)
    pool = {"window_dimensions": (3, 3), "strides": 2, "padding": 1}
    check("max_pool2d 3x3/2", jitnn.max_pool2d(t, **pool), ref("max_pool2d", x, **pool))
    check("average_pool2d 3x3/2", jitnn.average_pool2d(t, **pool),
          ref("average_pool2d", x, **pool))
    y = random((2, 9, 11, 10), 14)
    chain = jitnn.sigmoid(jitnn.add(jitnn.mul(t, ctx.tensor(y)), jitnn.relu(t)))
    check("element-wise chain sigmoid(x * y + relu(x))", chain,
          ref("sigmoid", ref("add", ref("mul", x, y), ref("relu", x))), 1e-6)
    check("reduce_mean over H, W", jitnn.reduce_mean(t, axes=[2, 3], keep_dimensions=True),
          ref("reduce_mean", x, axes=[2, 3], keep_dimensions=True))
    check("softmax over C", jitnn.softmax(t, axis=1), ref("softmax", x, axis=1), 1e-6)
    z = random((2, 7, 11, 10), 15)
    check("concat 9 + 7 channels (unaligned)", jitnn.concat([t, ctx.tensor(z)], axis=1),
          np.concatenate([x, z], axis=1), 0)
    for layout in ("nChw4c", "nChw8c", "nChw16c"):
        check(f"reorder nchw -> {layout} -> nchw", jitnn.reorder(t, layout), x, 0)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    check("reorder nhwc -> nChw4c -> nhwc",
          jitnn.reorder(ctx.tensor(nhwc), "nChw4c", axes="nhwc"), nhwc, 0)


def onnx_check(ctx: jitnn.Context) -> None:
    """The small ShuffleNetV2 of the zoo (depthwise, 1x1, channel shuffle,
    concat, pooling) against ONNX Runtime's outputs stored next to it."""
    stored = np.load(os.path.join(MODELS, "shufflenetv2.npz"))
    feed = {key.split(".", 2)[2]: stored[key] for key in stored.files if key.startswith("0.in.")}
    want = {key.split(".", 2)[2]: stored[key] for key in stored.files if key.startswith("0.out.")}
    model = jitnn.onnx.prepare(os.path.join(MODELS, "shufflenetv2.onnx"), ctx,
                               input_shapes={k: v.shape for k, v in feed.items()})
    got = model.run(feed)
    for name, expected in want.items():
        check(f"ONNX ShuffleNetV2 (small) output {name}", got[name], expected, 1e-3)


def main() -> None:
    ctx = jitnn.Context(num_threads=1)
    print(f"target {_config.TARGET_CPU} ({_config.TARGET_SIMD}), block {ctx.block}, "
          f"matmul tile {matmul_kernels.MR} x {matmul_kernels.NR}", flush=True)
    assert _config.TARGET_CPU == "generic" and ctx.block == jitnn.host_block() == 4
    assert matmul_kernels.VEC == 4 and not _config.AVX512_TUNED
    conv_checks(ctx)
    matmul_checks(ctx)
    other_checks(ctx)
    onnx_check(ctx)
    print("portable path: every check passed", flush=True)


if __name__ == "__main__":
    main()
