"""The op-by-op workloads of the chain suite and ``jitnn demo`` (the seed
chain and a ResNet-50 bottleneck block), apart from the suite so that
``jitnn.warmup`` can run them: this module imports no jitnn module (the
forward pass takes the ops' namespace, ``jitnn`` or a stand-in)."""

from __future__ import annotations

POLICIES = ("blocked", "eager", "plain")


def workloads(quick: bool):
    """(name, input shape, list of conv specs) with specs (C, O, k, pad, bn)."""
    if quick:
        return [("seed chain (quick)", (1, 16, 14, 14), "seed", 16),
                ("bottleneck (quick)", (1, 32, 14, 14), "bottleneck", 8)]
    return [("seed chain 3x(conv3x3 64ch 56 + relu)", (1, 64, 56, 56), "seed", 64),
            ("ResNet-50 bottleneck 256-64-256 56", (1, 256, 56, 56), "bottleneck", 64)]


def parameters(kind: str, channels: int, mid: int, np):
    rng = np.random.default_rng(0)
    if kind == "seed":
        return [(rng.standard_normal((mid, mid, 3, 3)).astype(np.float32) * 0.05, None, 1)
                for _ in range(3)]
    specs = [(mid, channels, 1, 0), (mid, mid, 3, 1), (channels, mid, 1, 0)]
    params = []
    for o, c, k, pad in specs:
        w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        bn = (rng.standard_normal(o).astype(np.float32) * 0.1,
              (rng.random(o) + 0.5).astype(np.float32),
              (rng.random(o) + 0.5).astype(np.float32),
              rng.standard_normal(o).astype(np.float32) * 0.1)
        params.append((w, bn, pad))
    return params


def jitnn_forward(jitnn, kind, x, params):
    if kind == "seed":
        h = x
        for w, _, pad in params:
            h = jitnn.relu(jitnn.conv2d(h, w, padding=pad))
        return h
    h = x
    for i, (w, bn, pad) in enumerate(params):
        h = jitnn.batch_normalization(jitnn.conv2d(h, w, padding=pad), *bn)
        if i < 2:
            h = jitnn.relu(h)
    return jitnn.relu(jitnn.add(h, x))
