"""Whole networks written with ``onnx.helper`` (seeded random weights), in the
form ``torch.onnx.export`` gives them, and a float64 evaluator of the ops they
use, the reference the tests compare jitnn with (no torch or ONNX Runtime
needed).

* :func:`efficientnet_b0`: torchvision's EfficientNet-B0 topology (MBConv
  blocks with squeeze-and-excitation, SiLU as Sigmoid + Mul, batch norms folded
  into the convs as the exporter does), at a width multiplier;
* :func:`csp_block_net`: CSP-Darknet's cross-stage pattern (a 1x1 conv split
  in two halves, bottlenecks on one, the halves concatenated, a 1x1 conv);
* :func:`masked_attention_block`: a BERT-style block on int64 ``input_ids``
  and ``attention_mask`` inputs (embedding Gather, the mask's additive bias,
  softmax attention, LayerNormalization, a classifier and its ArgMax).
"""

from __future__ import annotations

import math

import numpy as np

from jitnn.ops.conv2d import conv2d_reference


class _Builder:
    """Nodes and initializers of one graph, with fresh names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def constant(self, array, prefix: str = "w", dtype=np.float32) -> str:
        """An initializer of ``array`` as ``dtype``; returns its name."""
        from onnx import numpy_helper
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attributes) -> str:
        from onnx import helper
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attributes))
        return out

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1,
             groups: int = 1) -> str:
        """A conv with its batch norm folded in (He-normal weights, a bias)."""
        fan_in = c_in // groups * kernel * kernel
        w = self.rng.standard_normal((c_out, c_in // groups, kernel, kernel)) \
            * math.sqrt(2.0 / fan_in)
        b = self.rng.standard_normal(c_out) * 0.1
        pad = (kernel - 1) // 2
        return self.node("Conv", [x, self.constant(w), self.constant(b, "b")],
                         kernel_shape=[kernel, kernel], strides=[stride, stride],
                         pads=[pad] * 4, group=groups, dilations=[1, 1])

    def silu(self, x: str) -> str:
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def model(self, x_shape: tuple, output: str, output_shape: tuple):
        from onnx import TensorProto, helper
        graph = helper.make_graph(
            self.nodes, "net",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(x_shape))],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(output_shape))],
            self.initializers)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _divisible(channels: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible."""
    value = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return value + divisor if value < 0.9 * channels else value


#: torchvision's EfficientNet-B0 stages: expand ratio, kernel, stride, in, out, layers
B0_STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
             (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
             (6, 3, 1, 192, 320, 1))


def efficientnet_b0(width: float = 1.0, size: int = 224, batch: int = 1, classes: int = 1000,
                    seed: int = 0):
    """EfficientNet-B0 as torchvision builds it, channels scaled by ``width``."""
    b = _Builder(seed)
    stem = _divisible(32 * width)
    x = b.silu(b.conv("input", 3, stem, 3, 2))
    channels = stem
    for expand, kernel, stride, _, out, layers in B0_STAGES:
        out = _divisible(out * width)
        for layer in range(layers):
            block_in = x
            hidden = _divisible(channels * expand)
            h = x if expand == 1 else b.silu(b.conv(x, channels, hidden, 1))
            h = b.silu(b.conv(h, hidden, hidden, kernel, stride if layer == 0 else 1,
                              groups=hidden))
            # squeeze and excitation: global pool, two 1x1 convs, a channel scale
            squeeze = max(1, channels // 4)
            s = b.node("GlobalAveragePool", [h])
            s = b.silu(b.conv(s, hidden, squeeze, 1))
            s = b.node("Sigmoid", [b.conv(s, squeeze, hidden, 1)])
            h = b.node("Mul", [h, s])
            h = b.conv(h, hidden, out, 1)
            if layer > 0 or (stride == 1 and channels == out):
                h = b.node("Add", [h, block_in])
            x, channels = h, out
    head = 4 * channels
    x = b.silu(b.conv(x, channels, head, 1))
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.rng.standard_normal((classes, head)) / math.sqrt(head)
    x = b.node("Gemm", [x, b.constant(w), b.constant(b.rng.standard_normal(classes) * 0.1, "b")],
               transB=1)
    return b.model((batch, 3, size, size), x, (batch, classes))


def csp_block_net(channels: int = 24, size: int = 17, batch: int = 2, blocks: int = 2,
                  seed: int = 0):
    """A CSP-Darknet stage: a stride-2 conv, a 1x1 conv whose output is split
    in two halves, bottlenecks (1x1, 3x3, residual add) on the second, the
    halves concatenated and mixed by a 1x1 conv; LeakyReLU(0.1) after each conv."""
    b = _Builder(seed)

    def conv_act(x, c_in, c_out, kernel, stride=1):
        return b.node("LeakyRelu", [b.conv(x, c_in, c_out, kernel, stride)], alpha=0.1)

    x = conv_act("input", 3, channels, 3, 2)
    x = conv_act(x, channels, 2 * channels, 1)
    split = b.name("split")
    halves = [split + "_a", split + "_b"]
    from onnx import helper
    b.nodes.append(helper.make_node("Split", [x, b.constant([channels, channels], "i", np.int64)],
                                    halves, name=split, axis=1))
    part = halves[1]
    for _ in range(blocks):
        h = conv_act(conv_act(part, channels, channels, 1), channels, channels, 3)
        part = b.node("Add", [h, part])
    x = b.node("Concat", [halves[0], conv_act(part, channels, channels, 1)], axis=1)
    x = conv_act(x, 2 * channels, 2 * channels, 1)
    out_size = (size - 1) // 2 + 1
    return b.model((batch, 3, size, size), x, (batch, 2 * channels, out_size, out_size))


def masked_attention_block(vocab: int = 50, dim: int = 16, seq: int = 7, classes: int = 4,
                           seed: int = 0):
    """One self-attention step as a BERT export writes it, on run-time int64
    ``input_ids`` and ``attention_mask`` (1, seq): the ids pick rows of a
    (vocab, dim) embedding table (Gather), the mask is Cast to float and
    ``(1 - mask) * -10000`` is added to the scores, then Softmax, the
    weighted sum, a residual add, LayerNormalization and a MatMul classifier;
    outputs the float ``logits`` (1, seq, classes) and int64 ``prediction``
    (ArgMax over the classes)."""
    from onnx import TensorProto, helper
    b = _Builder(seed)
    table = b.constant(b.rng.standard_normal((vocab, dim)))
    emb = b.node("Gather", [table, "input_ids"], axis=0)                     # (1, seq, dim)
    mask = b.node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = b.node("Mul", [b.node("Sub", [b.constant(1.0, "one"), mask]),
                          b.constant(-10000.0, "big")])
    bias = b.node("Unsqueeze", [bias, b.constant([1], "axes", np.int64)])   # (1, 1, seq)
    scores = b.node("MatMul", [emb, b.node("Transpose", [emb], perm=[0, 2, 1])])
    scores = b.node("Add", [b.node("Mul", [scores, b.constant(dim ** -0.5, "scale")]), bias])
    attended = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), emb])
    h = b.node("LayerNormalization", [b.node("Add", [attended, emb]),
                                      b.constant(b.rng.uniform(0.5, 1.5, dim), "gamma"),
                                      b.constant(b.rng.standard_normal(dim) * 0.1, "beta")],
               axis=-1, epsilon=1e-5)
    logits = b.node("Add", [b.node("MatMul", [h, b.constant(b.rng.standard_normal(
        (dim, classes)) / math.sqrt(dim))]), b.constant(b.rng.standard_normal(classes), "b")])
    prediction = b.node("ArgMax", [logits], axis=-1, keepdims=0)
    graph = helper.make_graph(
        b.nodes, "attention",
        [helper.make_tensor_value_info(name, TensorProto.INT64, [1, seq])
         for name in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, seq, classes]),
         helper.make_tensor_value_info(prediction, TensorProto.INT64, [1, seq])],
        b.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# --- the float64 reference ---------------------------------------------------

def _attributes(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _layer_norm(x, scale, bias, axis, epsilon):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * scale + bias


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


#: ONNX Cast targets the evaluator knows (TensorProto codes)
_CAST = {1: np.float64, 6: np.int32, 7: np.int64, 9: np.bool_}


def evaluate(model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``model`` (made of the ops above, and the transformer-style ops
    of the frontend tests) in float64 numpy; integer and bool values stay
    integers and bools."""
    from onnx import numpy_helper
    values = {t.name: numpy_helper.to_array(t).astype(
        np.float64 if t.data_type == 1 else np.int64) for t in model.graph.initializer}
    values.update({k: np.asarray(v) if np.asarray(v).dtype.kind in "iub"
                   else np.asarray(v, np.float64) for k, v in inputs.items()})
    for node in model.graph.node:
        a = _attributes(node)
        args = [values[name] for name in node.input]
        op = node.op_type
        if op == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            result = [conv2d_reference(args[0], args[1], args[2] if len(args) > 2 else None,
                                       strides=tuple(a.get("strides", (1, 1))),
                                       padding=(pads[0], pads[2], pads[1], pads[3]),
                                       groups=a.get("group", 1))]
        elif op == "Sigmoid":
            result = [1 / (1 + np.exp(-args[0]))]
        elif op == "LeakyRelu":
            result = [np.where(args[0] >= 0, args[0], a.get("alpha", 0.01) * args[0])]
        elif op in ("Mul", "Add", "Sub"):
            x, y = args
            result = [x * y if op == "Mul" else x + y if op == "Add" else x - y]
        elif op == "GlobalAveragePool":
            result = [args[0].mean(axis=(2, 3), keepdims=True)]
        elif op == "Flatten":
            result = [args[0].reshape(args[0].shape[0], -1)]
        elif op == "Gemm":
            result = [args[0] @ args[1].T + args[2]]
        elif op == "Concat":
            result = [np.concatenate(args, axis=a["axis"])]
        elif op == "Split":
            result = np.split(args[0], np.cumsum(args[1])[:-1], axis=a["axis"])
        elif op == "Gather":
            result = [np.take(args[0], args[1], axis=a.get("axis", 0))]
        elif op == "Cast":
            result = [args[0].astype(_CAST[a["to"]])]
        elif op == "Unsqueeze":
            result = [np.expand_dims(args[0], tuple(int(i) for i in args[1]))]
        elif op == "Transpose":
            result = [np.transpose(args[0], a.get("perm"))]
        elif op == "MatMul":
            result = [args[0] @ args[1]]
        elif op == "Softmax":
            result = [_softmax(args[0], a.get("axis", -1))]
        elif op == "LayerNormalization":
            result = [_layer_norm(args[0], args[1], args[2], a.get("axis", -1),
                                  a.get("epsilon", 1e-5))]
        elif op == "ArgMax":
            result = [np.expand_dims(np.argmax(args[0], axis=a.get("axis", 0)),
                                     a.get("axis", 0)) if a.get("keepdims", 1)
                      else np.argmax(args[0], axis=a.get("axis", 0))]
        elif op == "Where":
            result = [np.where(*args)]
        elif op == "Not":
            result = [np.logical_not(args[0])]
        else:
            raise NotImplementedError(op)
        values.update(zip(node.output, result))
    return {o.name: values[o.name] for o in model.graph.output}
