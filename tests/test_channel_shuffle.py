"""Channel gathers on blocked data and exported channel shuffles
(kernels/channel_gather.py, jitnn/ops/gather.py, jitnn/onnx/_shuffle.py)."""

import numpy as np
import pytest

import jitnn
from jitnn import layouts
from jitnn.kernels.channel_gather import gather_channels
from tests.helpers import assert_schedule, per_block_and_threads, random


@pytest.mark.parametrize("block", [4, 8, 16, 32])
@pytest.mark.parametrize("channels,picked", [(1, [0, 0]), (3, [2, 0]), (7, [6, 5, 4, 3, 2, 1, 0]),
                                             (9, [8, 0, 4]), (17, list(range(17))[::2] * 2)])
def test_kernel_matches_numpy(block, channels, picked):
    x = random((2, channels, 3, 5), channels)
    out_blocks = -(-len(picked) // block)
    out = np.full((2, out_blocks, 3, 5, block), np.nan, np.float32)
    gather_channels(layouts.reference_nchw_to_blocked(x, block), np.array(picked), out)
    full = out.transpose(0, 1, 4, 2, 3).reshape(2, out_blocks * block, 3, 5)
    np.testing.assert_array_equal(full[:, :len(picked)], x[:, picked])
    assert np.all(full[:, len(picked):] == 0), "padding lanes are not zero"


def test_kernel_refuses_bad_indices_and_buffers():
    xb = np.zeros((1, 2, 3, 3, 8), np.float32)
    with pytest.raises(ValueError, match="indices"):
        gather_channels(xb, np.array([16]), np.zeros((1, 1, 3, 3, 8), np.float32))
    with pytest.raises(ValueError, match="indices"):
        gather_channels(xb, np.array([-1]), np.zeros((1, 1, 3, 3, 8), np.float32))
    with pytest.raises(ValueError, match="shape"):
        gather_channels(xb, np.array([1, 2]), np.zeros((1, 2, 3, 3, 8), np.float32))
    with pytest.raises(ValueError, match="overlap"):
        gather_channels(xb, np.array([1]), xb[:, :1])


@pytest.mark.parametrize("channels", [3, 9, 24])
def test_gather_of_host_channels_on_blocked_data_stays_blocked(channels):
    ctx = jitnn.Context()
    x_np, w_np = random((2, channels, 5, 7), 1), random((channels, channels, 1, 1), 2)
    picked = np.array([channels - 1, 0, -1, channels // 2])
    y = jitnn.gather(jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w_np)), picked, axis=1)
    assert y.layout == layouts.blocked_tag(ctx.block)
    got = jitnn.relu(y)
    del y
    reorders = 1 + (channels >= ctx.block)     # the input in (a first layer reads it plain),
    with assert_schedule(ctx, reorders=reorders):       # the result out; none between
        got.numpy()
    conv = np.einsum("nchw,oc->nohw", x_np.astype(np.float64), w_np[:, :, 0, 0])
    np.testing.assert_allclose(got.numpy(), np.maximum(conv[:, picked], 0), rtol=1e-5, atol=1e-5)


onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn.onnx  # noqa: E402


def _shuffle_model(channels: int, groups: int, tail: str):
    """Conv, channel shuffle (Reshape, Transpose, Reshape), then a Split in
    halves, two Slices, or nothing."""
    n, h, w = 2, 5, 3
    per_group = channels // groups
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Reshape", ["c", "split_shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "shape"], ["s"])]
    half = channels // 2
    inits = {"w": random((channels, channels, 1, 1), 3),
             "split_shape": np.array([n, groups, per_group, h, w], np.int64),
             "shape": np.array([n, channels, h, w], np.int64)}
    if tail == "split":
        nodes.append(helper.make_node("Split", ["s", "sizes"], ["a", "b"], axis=1))
        inits["sizes"] = np.array([half, channels - half], np.int64)
        outputs = {"a": half, "b": channels - half}
    elif tail == "slice":
        nodes += [helper.make_node("Slice", ["s", "s0", "e0", "axes"], ["a"]),
                  helper.make_node("Slice", ["s", "e0", "e1", "axes"], ["b"])]
        inits.update(s0=np.array([0], np.int64), e0=np.array([half], np.int64),
                     e1=np.array([channels], np.int64), axes=np.array([1], np.int64))
        outputs = {"a": half, "b": channels - half}
    else:
        outputs = {"s": channels}
    graph = helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [n, channels, h, w])],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, [n, c, h, w])
         for k, c in outputs.items()],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, inits["w"], outputs


@pytest.mark.parametrize("channels,groups", [(8, 2), (24, 2), (18, 3), (116, 2)])
@pytest.mark.parametrize("tail", ["split", "slice", "none"])
def test_exported_channel_shuffle_runs_as_channel_gathers(channels, groups, tail):
    model, w, outputs = _shuffle_model(channels, groups, tail)
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(model, ctx)
    x = random((2, channels, 5, 3), 4)
    results = ctx.dispatch(graph, {"x": x})
    conv = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0])
    shuffled = conv.reshape(2, groups, channels // groups, 5, 3).transpose(0, 2, 1, 3, 4) \
        .reshape(2, channels, 5, 3)
    want = {"s": shuffled, "a": shuffled[:, :channels // 2], "b": shuffled[:, channels // 2:]}
    for name in outputs:
        np.testing.assert_allclose(results[name].numpy(), want[name], rtol=1e-5, atol=1e-5)
        plan = jitnn.explain(results[name])
        assert "gather" in plan and "transpose" not in plan


@pytest.mark.parametrize("block, threads", per_block_and_threads())
def test_replayed_shuffle_unit_binds_its_concat_and_gathers(threads, block):
    """A ShuffleNet unit (split by gathers, a conv on one half, concat with
    the other, shuffled by a gather) computed again on new inputs: the
    concat and the gathers run as bound calls writing the plan's buffers,
    with numpy's numbers at every run."""
    ctx = jitnn.Context(num_threads=threads, block=block)
    c = 18
    w = random((c // 2, c // 2, 1, 1), 7, 0.3)
    b = jitnn.GraphBuilder(ctx)
    x = b.relu(b.conv2d(b.input("x", (2, c, 5, 7)), b.constant(np.eye(c, dtype=np.float32)
                                                                .reshape(c, c, 1, 1))))
    first = b.gather(x, np.arange(0, c // 2), axis=1)
    second = b.conv2d(b.gather(x, np.arange(c // 2, c), axis=1), b.constant(w))
    joined = b.concat([first, second], 1)
    order = np.arange(c).reshape(2, c // 2).T.reshape(-1)
    graph = b.build({"y": b.relu(b.conv2d(b.gather(joined, order, axis=1),
                                          b.constant(np.eye(c, dtype=np.float32)
                                                     .reshape(c, c, 1, 1))))})
    out = np.empty((2, c, 5, 7), np.float32)
    for seed in range(3):
        data = random((2, c, 5, 7), 20 + seed)
        ctx.compute(graph, {"x": data}, {"y": out})
        xr = np.maximum(data.astype(np.float64), 0)
        conv = np.einsum("nchw,oc->nohw", xr[:, c // 2:], w[:, :, 0, 0])
        want = np.maximum(np.concatenate([xr[:, :c // 2], conv], axis=1)[:, order], 0)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    (program,) = graph._programs
    kinds = [(c_.node.kind, bool(bound), bool(c_.step.buffer)) for c_, bound in
             zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
    for kind in ("concat_channels", "gather_channels"):
        assert (kind, True, True) in kinds, kinds
    assert ("gather_channels", False, True) not in kinds, kinds
