"""Random programs: drawing CNN-like op programs, running them on jitnn
(op by op under any policy, or as one graph) and checking every read against
the float64 references. Used by tests/test_random_programs.py (seeded draws),
tests/test_random_bad_calls.py and tests/test_fuzz.py (hypothesis draws).

A program: convolutions (grouped,
depthwise, strided, dilated, with bias and fused activations), transposed
convolutions, batch normalizations right after a conv (which the scheduler
folds) or elsewhere, activations, binary ops with another tensor, a
per-channel vector or a scalar (residual adds), pools, channel concats,
plain-layout ops in between (transpose, reshape, softmax) and a classifier
head (flatten, then gemm or matmul, activations and binary ops on the rows).
It reads some tensors while others are still pending, drops the handles of
others (so their values may be fused away), and reads what is left at the end
with ``read_all``. Channel counts are drawn so that most tensors do not fill
a block.

``draw_program`` takes a seed or a source of draws with numpy Generator's
``choice``/``integers``/``random`` (tests/test_fuzz.py passes one backed by
hypothesis, so failures shrink to small programs).
"""


from __future__ import annotations

import dataclasses

import numpy as np

import jitnn
from jitnn.ops.conv2d import conv2d_output_size, conv2d_reference
from jitnn.ops.conv_transpose2d import conv_transpose2d_reference
from jitnn.ops.matmul import gemm_reference, matmul_reference
from jitnn.ops.eltwise import binary_reference, unary_reference
from jitnn.ops.normalization import batch_normalization_reference, softmax_reference
from jitnn.ops.pool import (average_pool2d_reference, global_average_pool2d_reference,
                            max_pool2d_reference, pool2d_output_size)
from jitnn.ops.shape import (concat_reference, flatten_reference, reshape_reference,
                             transpose_reference)

CHANNELS = (1, 3, 4, 7, 8, 9, 16, 17)
ACTIVATIONS = (None, "relu", "relu6", ("clamp", -0.5, 0.75), ("leaky_relu", 0.2), "sigmoid",
               "tanh", "hard_swish", "gelu")
UNARY = ("relu", "clamp", "sigmoid", "tanh", "leaky_relu", "hard_swish", "gelu")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
#: WebNN's math ops that run inside the blocked element-wise chains (smooth
#: ones: a floor or a sign would turn a rounding difference into a jump)
MATH = ("abs", "neg", "erf", "sin", "softsign", "elu", "hard_sigmoid", "softplus", "linear")
#: ops between convs with blocked kernels of their own; drawn with their
#: options and constants by _draw_between_convs, checked against
#: jitnn.registry.reference(op)
BETWEEN_CONVS = ("reduce_mean", "reduce_max", "layer_normalization",
                 "instance_normalization", "pad", "resample2d")


@dataclasses.dataclass
class Step:
    """One instruction: ``op`` makes tensor ``out`` from tensors ``args``
    (ids) and ``consts`` (arrays); ``read`` compares tensor ``out`` now;
    ``drop`` lets go of its handle."""

    kind: str                      # "op", "read" or "drop"
    out: int
    op: str = ""
    args: tuple = ()
    consts: dict = dataclasses.field(default_factory=dict)
    options: dict = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        if self.kind != "op":
            return f"{self.kind} t{self.out}"
        consts = ", ".join(f"{k}{v.shape if isinstance(v, np.ndarray) else v!r}"
                           for k, v in self.consts.items())
        args = ", ".join(f"t{a}" for a in self.args)
        return f"t{self.out} = {self.op}({args}; {consts}; {self.options})"


@dataclasses.dataclass
class Program:
    seed: int
    inputs: dict                   # id -> shape
    steps: list

    def listing(self) -> str:
        lines = [f"program {self.seed}: inputs " +
                 ", ".join(f"t{i} {s}" for i, s in self.inputs.items())]
        return "\n".join(lines + [f"  {step}" for step in self.steps])


# --- drawing a program -------------------------------------------------------------

def _draw_conv(rng, shape, channels):
    n, c, h, w = shape
    kernel = int(rng.choice([1, 3, 3, 5])) if min(h, w) >= 5 else int(rng.choice([1, 3]))
    dilation = 2 if kernel == 3 and min(h, w) >= 5 and rng.random() < 0.35 else 1
    stride = 2 if rng.random() < 0.25 else 1
    pad = int(rng.integers(0, kernel // 2 * dilation + 1))
    padding = [pad, int(rng.integers(0, pad + 1)), pad, pad] if rng.random() < 0.2 else pad
    shape4 = padding if isinstance(padding, list) else [padding] * 4
    oh = conv2d_output_size(h, kernel, stride, dilation, shape4[0], shape4[1])
    ow = conv2d_output_size(w, kernel, stride, dilation, shape4[2], shape4[3])
    if oh < 1 or ow < 1:
        return None
    groups, out_channels = 1, int(rng.choice(channels))
    draw = rng.random()
    if draw < 0.2 and c > 1:
        groups = out_channels = c                               # depthwise
    elif draw < 0.3 and c % 2 == 0 and c > 2:
        groups, out_channels = 2, 2 * int(rng.integers(1, 9))   # grouped
    fan_in = c // groups * kernel * kernel
    consts = {"w": (rng.standard_normal((out_channels, c // groups, kernel, kernel))
                    / np.sqrt(fan_in)).astype(np.float32)}
    if rng.random() < 0.5:
        consts["bias"] = (rng.standard_normal(out_channels) * 0.3).astype(np.float32)
    options = dict(strides=stride, padding=padding, dilations=dilation, groups=groups)
    if rng.random() < 0.4:
        options["activation"] = ACTIVATIONS[int(rng.integers(len(ACTIVATIONS)))]
    return "conv2d", consts, options, (n, out_channels, oh, ow)


def _draw_pool(rng, shape):
    n, c, h, w = shape
    op = str(rng.choice(["max_pool2d", "average_pool2d"]))
    window = int(rng.choice([2, 3]))
    stride = int(rng.choice([1, 2]))
    pad = int(rng.integers(0, window // 2 + 1))
    rounding = "ceil" if rng.random() < 0.3 else "floor"
    options = dict(window_dimensions=window, strides=stride, padding=pad, rounding_type=rounding)
    if op == "average_pool2d" and rng.random() < 0.5:
        options["count_include_pad"] = True
    size = [pool2d_output_size(s, window, stride, 1, pad, pad, rounding) for s in (h, w)]
    if min(size) < 1:
        return None
    return op, {}, options, (n, c, *size)


def _draw_conv_transpose(rng, shape, channels):
    n, c, h, w = shape
    kernel, stride = int(rng.choice([2, 3])), int(rng.choice([1, 2]))
    pad = int(rng.integers(0, kernel // 2 + 1))
    out_channels = int(rng.choice(channels))
    consts = {"w": (rng.standard_normal((c, out_channels, kernel, kernel))
                    / np.sqrt(c * kernel)).astype(np.float32)}
    if rng.random() < 0.5:
        consts["bias"] = (rng.standard_normal(out_channels) * 0.3).astype(np.float32)
    size = [(s - 1) * stride + kernel - 2 * pad for s in (h, w)]
    if min(size) < 1 or max(size) > 48:
        return None
    return "conv_transpose2d", consts, dict(strides=stride, padding=pad), (n, out_channels, *size)


def _draw_rows(rng, shape, live, shapes):
    """An op on a 2-D (rows, features) tensor."""
    rows, features = shape
    draw = rng.random()
    if draw < 0.4:
        out = int(rng.choice(CHANNELS))
        consts = {"b": (rng.standard_normal((features, out)) / np.sqrt(features)
                        ).astype(np.float32)}
        if rng.random() < 0.5:
            return "matmul", consts, {}, (rows, out)
        options = {"alpha": float(rng.choice([1.0, 0.5]))}
        if rng.random() < 0.5:
            consts["b"] = np.ascontiguousarray(consts["b"].T)
            options["b_transpose"] = True
        if rng.random() < 0.6:
            consts["c"] = (rng.standard_normal(out) * 0.3).astype(np.float32)
            options["beta"] = float(rng.choice([1.0, 2.0]))
        return "gemm", consts, options, (rows, out)
    if draw < 0.6:
        op = str(rng.choice(UNARY))
        return op, {}, {"clamp": {"min_value": -0.4, "max_value": 0.6},
                        "leaky_relu": {"alpha": 0.1}}.get(op, {}), shape
    if draw < 0.85:
        op = str(rng.choice(["add", "mul", "maximum", "sub"]))
        operand_shape = (1, features) if rng.random() < 0.6 else shape
        consts = {"y": rng.uniform(-1.5, 1.5, operand_shape).astype(np.float32)}
        return op, consts, {"operand_first": bool(rng.random() < 0.3)}, shape
    return "softmax", {}, {"axis": 1}, shape


def _draw_between_convs(rng, shape):
    """One of BETWEEN_CONVS (or a MATH op) on a 4-D ``shape``: (op, consts,
    options, output shape)."""
    n, c, h, w = shape
    op = str(rng.choice(BETWEEN_CONVS + ("math",) * 3))
    if op == "math":
        op = str(rng.choice(MATH))
        options = {"elu": {"alpha": 0.5}, "hard_sigmoid": {"alpha": 0.3, "beta": 0.4},
                   "linear": {"alpha": -1.5, "beta": 0.25}}.get(op, {})
        return op, {}, options, shape
    if op in ("reduce_mean", "reduce_max"):
        keep = bool(rng.random() < 0.7)
        return op, {}, {"axes": [2, 3], "keep_dimensions": keep}, \
            (n, c, 1, 1) if keep else (n, c)
    if op in ("layer_normalization", "instance_normalization"):
        consts = {}
        if rng.random() < 0.7:
            consts = {"scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
                      "bias": (rng.standard_normal(c) * 0.2).astype(np.float32)}
        options = {"axes": [1]} if op == "layer_normalization" else {}
        return op, consts, options, shape
    if op == "pad":
        mode = str(rng.choice(["constant", "edge", "reflection"]))
        if mode == "reflection" and min(h, w) <= 2:     # reflection pads less than the axis
            mode = "edge"
        top, left = int(rng.integers(0, 3)), int(rng.integers(0, 2))
        options = {"beginning_padding": [0, 0, top, left], "ending_padding": [0, 0, 1, 0],
                   "mode": mode}
        if mode == "constant":
            options["value"] = float(rng.choice([0.0, -0.5]))
        return op, {}, options, (n, c, h + top + 1, w + left)
    if h * w > 200:                          # resample: keep the programs small
        return "reduce_max", {}, {"axes": [2, 3], "keep_dimensions": True}, (n, c, 1, 1)
    mode = str(rng.choice(["nearest-neighbor", "linear"]))
    return op, {}, {"mode": mode, "scales": [2.0, 1.5]}, (n, c, 2 * h, (3 * w) // 2)


def draw_program(seed, length: int = 12, large: bool = False) -> Program:
    """A program of ``length`` ops on one or two inputs (N, C, H, W): C (and
    the convolutions' output channels) from CHANNELS and H, W from 5 to 11, or
    ``large``: from 24 to 71 and from 14 to 33 (several register tiles and
    Winograd tile rows per image)."""
    rng = np.random.default_rng(seed) if isinstance(seed, (int, np.integer)) else seed
    n = int(rng.choice([1, 1, 2]))
    channels, sizes = (tuple(range(24, 72)), (14, 34)) if large else (CHANNELS, (5, 12))
    shapes = {0: (n, int(rng.choice(channels)), int(rng.integers(*sizes)),
                  int(rng.integers(*sizes)))}
    if rng.random() < 0.4:
        shapes[1] = (n, int(rng.choice(channels)), *shapes[0][2:])
    inputs = dict(shapes)
    live = list(shapes)
    steps = []
    made = 0
    while made < length:
        next_id = len(shapes)
        x = int(rng.choice(live))
        shape = shapes[x]
        draw = rng.random()
        drawn = None
        args = (x,)
        if len(shape) == 2:
            drawn = _draw_rows(rng, shape, live, shapes)
        elif rng.random() < 0.15:
            drawn = _draw_between_convs(rng, shape)
        elif draw < 0.04:
            drawn = "flatten", {}, {}, (n, shape[1] * shape[2] * shape[3])
        elif draw < 0.08:
            drawn = _draw_conv_transpose(rng, shape, channels)
        elif draw < 0.28:
            drawn = _draw_conv(rng, shape, channels)
        elif draw < 0.40:
            op = str(rng.choice(UNARY))
            options = {"clamp": {"min_value": -0.4, "max_value": 0.6},
                       "leaky_relu": {"alpha": 0.1}}.get(op, {})
            drawn = op, {}, options, shape
        elif draw < 0.58:
            op = str(rng.choice(BINARY))
            same = [t for t in live if shapes[t] == shape]
            form = rng.random()
            if form < 0.45 and op != "div":
                args = (x, int(rng.choice(same)))                   # tensor op tensor
                consts = {}
            else:
                operand_shape = ((1, shape[1], 1, 1) if form < 0.75 else
                                 () if form < 0.9 else shape)
                operand = rng.uniform(0.5, 1.5, operand_shape) * rng.choice([-1, 1],
                                                                        operand_shape)
                consts = {"y": np.asarray(operand, np.float32)}
            options = {"operand_first": bool(rng.random() < 0.3 and op != "div")}
            drawn = op, consts, options, shape
        elif draw < 0.68:
            c = shape[1]
            consts = {"mean": rng.standard_normal(c).astype(np.float32) * 0.3,
                      "variance": rng.uniform(0.5, 2.0, c).astype(np.float32)}
            if rng.random() < 0.6:
                consts["scale"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
                consts["bias"] = rng.standard_normal(c).astype(np.float32) * 0.2
            options = {"activation": "relu"} if rng.random() < 0.3 else {}
            drawn = "batch_normalization", consts, options, shape
        elif draw < 0.78:
            drawn = _draw_pool(rng, shape)
        elif draw < 0.84:
            partners = [t for t in live if shapes[t][0] == n and shapes[t][2:] == shape[2:]]
            y = int(rng.choice(partners))
            args = (x, y)
            drawn = "concat", {}, {}, (n, shape[1] + shapes[y][1], *shape[2:])
        elif draw < 0.88:
            drawn = "global_average_pool2d", {}, {}, (n, shape[1], 1, 1)
        elif draw < 0.92:
            drawn = "transpose", {}, {"permutation": (0, 1, 3, 2)}, \
                (n, shape[1], shape[3], shape[2])
        elif draw < 0.96:
            new = (n, shape[1], shape[2] * shape[3], 1) if shape[3] > 1 else \
                (n, shape[1], 1, shape[2])
            drawn = "reshape", {}, {"new_shape": new}, new
        else:
            drawn = "softmax", {}, {"axis": int(rng.choice([1, 3]))}, shape
        if drawn is None:
            continue
        op, consts, options, out_shape = drawn
        shapes[next_id] = out_shape
        steps.append(Step("op", next_id, op, args, consts, options))
        live.append(next_id)
        made += 1
        after = rng.random()
        if after < 0.15:
            steps.append(Step("read", int(rng.choice(live))))
        elif after < 0.45 and len(live) > 1:
            gone = int(rng.choice(live[:-1]))
            steps.append(Step("drop", gone))
            live.remove(gone)
    # (a source of draws carries the seed of the program's numbers)
    return Program(getattr(rng, "seed", seed), inputs, steps)


# --- running one ------------------------------------------------------------------

def _numbers_for(program: Program, seed: int) -> dict:
    rng = np.random.default_rng([program.seed, seed])
    return {i: rng.standard_normal(shape).astype(np.float32)
            for i, shape in program.inputs.items()}


def reference(step: Step, args: list) -> np.ndarray:
    op, k, options = step.op, step.consts, dict(step.options)
    if op == "conv2d":
        return conv2d_reference(args[0], k["w"], k.get("bias"), **options)
    if op == "conv_transpose2d":
        return conv_transpose2d_reference(args[0], k["w"], k.get("bias"), **options)
    if op == "flatten":
        return flatten_reference(args[0])
    if op == "matmul":
        return matmul_reference(args[0], k["b"])
    if op == "gemm":
        return gemm_reference(args[0], k["b"], k.get("c"), **options)
    if op in UNARY:
        return unary_reference(op, args[0], **options)
    if op in BINARY:
        a, b = (args[0], args[1]) if len(args) == 2 else (args[0], k["y"])
        return binary_reference(op, b, a) if options["operand_first"] else \
            binary_reference(op, a, b)
    if op == "batch_normalization":
        return batch_normalization_reference(args[0], k["mean"], k["variance"], k.get("scale"),
                                             k.get("bias"), **options)
    if op == "max_pool2d":
        return max_pool2d_reference(args[0], **options)
    if op == "average_pool2d":
        return average_pool2d_reference(args[0], **options)
    if op == "global_average_pool2d":
        return global_average_pool2d_reference(args[0])
    if op == "concat":
        return concat_reference(args, 1)
    if op == "transpose":
        return transpose_reference(args[0], options["permutation"])
    if op == "reshape":
        return reshape_reference(args[0], options["new_shape"])
    if op == "softmax":
        return softmax_reference(args[0], options["axis"])
    if op in MATH or op in BETWEEN_CONVS:
        if op == "pad":
            return jitnn.registry.reference(op)(
                args[0], options.pop("beginning_padding"), options.pop("ending_padding"),
                **options)
        return jitnn.registry.reference(op)(args[0], **k, **options)
    raise AssertionError(op)


def call(api, step: Step, args: list, constant=lambda array: array):
    """``step`` through ``api`` (the ``jitnn`` module or a GraphBuilder);
    ``constant`` turns a step's array into what ``api`` takes."""
    op, options = step.op, dict(step.options)
    k = {name: constant(array) if isinstance(array, np.ndarray) else array
         for name, array in step.consts.items()}
    if op in ("conv2d", "conv_transpose2d"):
        return getattr(api, op)(args[0], k["w"], k.get("bias"), **options)
    if op == "matmul":
        return api.matmul(args[0], k["b"])
    if op == "gemm":
        return api.gemm(args[0], k["b"], k.get("c"), **options)
    if op in BINARY:
        first = options.pop("operand_first")
        a, b = (args[0], args[1]) if len(args) == 2 else (args[0], k["y"])
        return getattr(api, op)(b, a) if first else getattr(api, op)(a, b)
    if op == "batch_normalization":
        return api.batch_normalization(args[0], k["mean"], k["variance"], k.get("scale"),
                                       k.get("bias"), **options)
    if op == "concat":
        return api.concat(args, 1)
    if op == "pad":
        return api.pad(args[0], options.pop("beginning_padding"), options.pop("ending_padding"),
                       **options)
    return getattr(api, op)(*args, **k, **options)


def expected_values(program: Program, numbers: dict) -> dict:
    values = dict(numbers)
    for step in program.steps:
        if step.kind == "op":
            values[step.out] = reference(step, [values[a] for a in step.args])
    return values


def _check(program: Program, where: str, tensor_id: int, got, want) -> None:
    want = np.asarray(want)
    scale = 1.0 + float(np.max(np.abs(want), initial=0.0))
    np.testing.assert_allclose(
        got, want, rtol=1e-3, atol=2e-4 * scale,
        err_msg=f"{where}: t{tensor_id} differs\n{program.listing()}")


#: contexts the programs run on: the three policies, and the blocked policy
#: flushing every few ops, with the other block size, and on 1 thread with
#: the direct convolution only
CONTEXTS = {
    "blocked": {},
    "plain": {"policy": "plain"},
    "eager": {"policy": "eager"},
    "blocked-pending3": {"max_pending_ops": 3},
    # the block this host does not pick (8 on AVX-512, else 16)
    "blocked-other-block": {"block": 8 if jitnn.host_block() == 16 else 16},
    "blocked-1thread-direct": {"num_threads": 1, "conv_algorithm": "direct"},
}


def run_eager(program: Program, context: str, ctx: jitnn.Context | None = None,
              between_steps=None) -> None:
    """The program as a framework calls it: op by op, reading as it goes (on
    ``ctx``, else on a new context of kind ``context``). ``between_steps(ctx,
    tensors)``, if given, runs between every two steps with the live tensors
    {id: Tensor}."""
    ctx = ctx or jitnn.Context(**CONTEXTS[context])
    numbers = _numbers_for(program, 0)
    want = expected_values(program, numbers)
    tensors = {i: ctx.tensor(a) for i, a in numbers.items()}
    for index, step in enumerate(program.steps):
        if between_steps is not None and index:
            between_steps(ctx, tensors)
        if step.kind == "op":
            tensors[step.out] = call(jitnn, step, [tensors[a] for a in step.args])
            assert tensors[step.out].shape == want[step.out].shape
        elif step.kind == "drop":
            del tensors[step.out]
        else:
            tensor = tensors[step.out]
            got = tensor.numpy() if index % 2 else np.asarray(tensor)
            _check(program, f"{context}, read", step.out, got, want[step.out])
    ids = sorted(tensors)
    outs = jitnn.read_all([tensors[i] for i in ids])
    for i, got in zip(ids, outs):
        _check(program, f"{context}, read_all", i, got, want[i])
    # a tensor read again gives the same numbers (a second read copies again)
    last = ids[-1]
    np.testing.assert_array_equal(tensors[last].numpy(), outs[-1])


def build_graph(program: Program, ctx: jitnn.Context) -> jitnn.Graph:
    """The program as one graph whose outputs are every tensor the program
    reads or keeps (named ``t<id>``)."""
    builder = jitnn.GraphBuilder(ctx)
    operands = {i: builder.input(f"x{i}", shape) for i, shape in program.inputs.items()}
    kept = set(program.inputs)
    for step in program.steps:
        if step.kind == "op":
            operands[step.out] = call(builder, step, [operands[a] for a in step.args],
                                      constant=builder.constant)
            kept.add(step.out)
        elif step.kind == "drop":
            kept.discard(step.out)
    outputs = {f"t{i}": operands[i] for i in sorted(kept | {s.out for s in program.steps
                                                             if s.kind == "read"})
               if i not in program.inputs}
    return builder.build(outputs)


def run_graph(program: Program, ctx: jitnn.Context | None = None, graph=None,
              calls=(1, 2)) -> None:
    """``ctx.compute`` of the program's graph, once per number in ``calls``
    on new inputs (from the second call on, it replays the plan)."""
    ctx = ctx or jitnn.Context()
    graph = graph or build_graph(program, ctx)
    for call_number in calls:
        numbers = _numbers_for(program, call_number)
        want = expected_values(program, numbers)
        results = {name: np.full(shape, np.nan, np.float32)
                   for name, shape in graph.outputs.items()}
        ctx.compute(graph, {f"x{i}": a for i, a in numbers.items()}, results)
        for name, got in results.items():
            _check(program, f"graph, call {call_number}", int(name[1:]), got,
                   want[int(name[1:])])


