"""Context and Tensor: copy-in, readback (sync, async, parallel), stats, errors."""

import asyncio
import threading

import numpy as np
import pytest

import jitnn
from jitnn import layouts
from tests.helpers import assert_schedule, random


@pytest.fixture
def ctx():
    return jitnn.Context()


# --- Context ---------------------------------------------------------------------

def test_context_defaults_follow_the_host():
    ctx = jitnn.Context()
    assert ctx.block == jitnn.host_block()
    assert ctx.block in (4, 8, 16)
    assert ctx.num_threads >= 1
    assert jitnn.default_context() is jitnn.default_context()


@pytest.mark.parametrize("block", layouts.BLOCK_SIZES)
def test_block_is_overridable(block):
    assert jitnn.Context(block=block).block == block


@pytest.mark.parametrize("kwargs,message", [
    ({"block": 3}, "block must be one of"),
    ({"block": "8"}, "block must be one of"),
    ({"num_threads": 0}, "num_threads must be"),
    ({"num_threads": 10_000}, "num_threads must be"),
])
def test_bad_context_options(kwargs, message):
    with pytest.raises(jitnn.JitnnValueError, match=message):
        jitnn.Context(**kwargs)


# --- copy-in -----------------------------------------------------------------------

def test_tensor_copies_at_the_call(ctx):
    a = random((2, 3, 4, 5))
    t = ctx.tensor(a)
    a[...] = 7.0
    assert not np.any(t.numpy() == 7.0)


def test_tensor_attributes(ctx):
    t = ctx.tensor(np.zeros((2, 3, 4, 5), np.float32))
    assert t.shape == (2, 3, 4, 5)
    assert t.dtype == np.float32
    assert t.ndim == 4 and t.size == 120
    assert t.layout == "nchw"
    assert ctx.tensor(np.zeros((3, 4))).layout == "nc"
    assert repr(t) == "Tensor(shape=(2, 3, 4, 5), dtype=float32, layout=nchw)"


@pytest.mark.parametrize("data,dtype,expected", [
    (np.array([1.5, 2.25], np.float64), np.float32, [1.5, 2.25]),
    (np.array([1, -2, 3], np.int64), np.int64, [1, -2, 3]),
    (np.array([1, -2, 3], np.int32), np.int32, [1, -2, 3]),
    (np.array([7, 2**32 - 1], np.uint32), np.uint32, [7, 2**32 - 1]),
    (np.array([-128, 127], np.int8), np.int8, [-128, 127]),
    (np.array([0, 255], np.uint8), np.uint8, [0, 255]),
    (np.array([-5, 300], np.int16), np.int32, [-5, 300]),
    (np.array([65535], np.uint16), np.int32, [65535]),
    (np.array([2**40], np.uint64), np.int64, [2**40]),
    (np.array([True, False]), np.uint8, [1, 0]),     # WebNN's booleans
    ([[1, 2], [3, 4]], np.int64, [[1, 2], [3, 4]]),
    ([[1.0, 2], [3, 4]], np.float32, [[1, 2], [3, 4]]),
    (3.0, np.float32, 3.0),
])
def test_host_data_keeps_its_type(ctx, data, dtype, expected):
    t = ctx.tensor(data)
    assert t.dtype == dtype
    read = t.numpy()
    assert read.dtype == dtype
    np.testing.assert_array_equal(read, np.asarray(expected, dtype))
    assert jitnn.tensor(data).dtype == dtype


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint32", "int8", "uint8",
                                   np.float32, np.dtype(np.int64)])
def test_explicit_dtype_converts_by_value(ctx, dtype):
    t = ctx.tensor(np.array([[1.75, -2.25], [3.0, 100.5]]), dtype=dtype)
    assert t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(
        t.numpy(), np.array([[1.75, -2.25], [3.0, 100.5]]).astype(dtype))
    assert repr(t).startswith(f"Tensor(shape=(2, 2), dtype={np.dtype(dtype).name}")


def test_float16_is_refused_with_how_to_convert(ctx):
    half = np.array([0.5, 1.5], np.float16)
    with pytest.raises(TypeError, match="float16 is not a jitnn data type.*dtype='float32'"):
        ctx.tensor(half)
    with pytest.raises(TypeError, match="float16 is not a jitnn data type"):
        ctx.tensor(half, dtype="float16")
    np.testing.assert_array_equal(ctx.tensor(half, dtype="float32").numpy(), [0.5, 1.5])


@pytest.mark.parametrize("dtype", ["float64", "int16", "complex64", "bool", True, "nonsense"])
def test_unknown_dtype_is_refused(ctx, dtype):
    with pytest.raises(TypeError, match="tensor: dtype must be one of float32, int32"):
        ctx.tensor([1, 2], dtype=dtype)


def test_uint64_beyond_int64_is_refused(ctx):
    with pytest.raises(ValueError, match="uint64 values above"):
        ctx.tensor(np.array([2**63], np.uint64))


def test_integer_tensor_reads_into_an_out_of_its_type(ctx):
    t = ctx.tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    out = np.empty((2, 3), np.int32)
    assert t.numpy(out=out) is out
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3))
    with pytest.raises(TypeError, match="out must have dtype int32"):
        t.numpy(out=np.empty((2, 3), np.float32))


def test_float_only_op_refuses_an_integer_tensor_naming_it(ctx):
    t = ctx.tensor(np.arange(6, dtype=np.int32).reshape(1, 6))
    with pytest.raises(TypeError, match=r"sigmoid: x must have dtype float32, got a int32 tensor "
                                        r"\(convert it with jitnn.cast\)"):
        jitnn.sigmoid(t)
    # a host integer array given to a float op converts by value, as before
    np.testing.assert_array_equal(jitnn.leaky_relu(np.array([[-1, 2]]), 0.0).numpy(), [[0, 2]])


def test_float64_is_rounded_to_float32(ctx):
    value = 0.1  # not representable: float32 rounds it
    assert ctx.tensor(np.array([value])).numpy()[0] == np.float32(value)


@pytest.mark.parametrize("data,what", [
    (np.array([1 + 2j]), "complex"),
    (np.array(["a", "b"]), "<U1"),
    (np.array([object()], dtype=object), "object"),
    ([[1, 2], [3]], "cannot make a regular array"),
    ("text", "<U4"),
    (np.zeros(2, dtype="datetime64[s]"), "datetime64"),
])
def test_non_numeric_input_is_rejected(ctx, data, what):
    with pytest.raises(TypeError, match="tensor: expected") as info:
        ctx.tensor(data)
    assert what in str(info.value)
    assert isinstance(info.value, jitnn.JitnnError)


# --- readback ------------------------------------------------------------------------

@pytest.mark.parametrize("block", layouts.BLOCK_SIZES)
@pytest.mark.parametrize("channels", (1, 3, 7, 8, 9, 17, 64))
def test_blocked_tensor_reads_back_in_standard_layout(block, channels):
    ctx = jitnn.Context(block=block)
    x = random((3, channels, 5, 7), seed=channels)
    t = jitnn.reorder(ctx.tensor(x), f"nChw{block}c")
    assert t.layout == f"nChw{block}c"
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(np.asarray(t), x)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    tn = jitnn.reorder(ctx.tensor(nhwc), f"nChw{block}c", axes="nhwc")
    np.testing.assert_array_equal(tn.numpy(), nhwc)
    np.testing.assert_array_equal(jitnn.reorder(tn, "nhwc").numpy(), nhwc)


def test_tensor_buffers_are_cache_line_aligned(ctx):
    # numpy's large arrays start 16 bytes past a cache line; the kernels'
    # 32-byte vector loads and stores would split lines on half of them
    x = ctx.tensor(random((1, 17, 33, 35)))
    w = ctx.tensor(random((9, 17, 3, 3)))
    y = jitnn.relu(jitnn.conv2d(x, w, padding=1))
    pooled = jitnn.max_pool2d(y, (2, 2))
    for t in (x, y, pooled):
        assert t._v._materialize().ctypes.data % 64 == 0, t
    assert jitnn.reorder(x, "nChw8c")._v._materialize().ctypes.data % 64 == 0
    assert x.numpy().ctypes.data % 64 == 0 and y.numpy().ctypes.data % 64 == 0
    np.testing.assert_array_equal(x.numpy(), ctx.tensor(x.numpy()).numpy())


def test_aligned_empty_shapes():
    from jitnn.kernels.conv2d import aligned_empty
    for shape in ((1, 64, 56, 56), (0, 3), 5, np.int64(7), (), [2, 3]):
        a = aligned_empty(shape)
        expected = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
        assert a.shape == expected and a.dtype == np.float32
        assert a.flags.c_contiguous and a.flags.writeable and a.ctypes.data % 64 == 0
    assert aligned_empty((3, 5), np.int64, 128).ctypes.data % 128 == 0


def test_numpy_returns_a_fresh_array_each_time(ctx):
    t = ctx.tensor(random((2, 3)))
    first = t.numpy()
    first[...] = 0
    assert not np.all(t.numpy() == 0)
    assert t.numpy() is not t.numpy()


@pytest.mark.parametrize("layout", ["nchw", "nChw8c"])
def test_numpy_out_fills_the_callers_array(ctx, layout):
    x = random((2, 9, 5, 7))
    t = jitnn.reorder(ctx.tensor(x), layout)
    buf = np.full(x.shape, np.nan, np.float32)
    before = ctx.stats.reorder_bytes
    with assert_schedule(ctx, reorders=0 if layout == "nchw" else 1):   # straight into buf
        assert t.numpy(out=buf) is buf
    np.testing.assert_array_equal(buf, x)
    if layout != "nchw":
        assert ctx.stats.reorder_bytes == before + buf.nbytes


@pytest.mark.parametrize("out,error,message", [
    (np.empty((9, 2, 5, 7), np.float32), ValueError, r"out has shape \(9, 2, 5, 7\) but the tensor's shape is \(2, 9, 5, 7\)"),
    (np.empty((2, 9, 5, 7), np.float64), TypeError, "out must have dtype float32, got float64"),
    (np.empty((2, 9, 5, 14), np.float32)[..., ::2], ValueError, "out must be C-contiguous"),
    (np.empty((2, 9, 7, 5), np.float32).transpose(0, 1, 3, 2), ValueError, "C-contiguous"),
    ([[0.0]], TypeError, "out must be a numpy.ndarray, got list"),
])
def test_bad_out_is_rejected_and_left_untouched(ctx, out, error, message):
    t = jitnn.reorder(ctx.tensor(random((2, 9, 5, 7))), "nChw8c")
    snapshot = np.array(out, copy=True) if isinstance(out, np.ndarray) else None
    with pytest.raises(error, match=message) as info:
        t.numpy(out=out)
    assert isinstance(info.value, jitnn.JitnnError)
    if snapshot is not None:
        np.testing.assert_array_equal(out, snapshot)


def test_read_only_out_is_rejected(ctx):
    t = ctx.tensor(random((2, 3)))
    buf = np.empty((2, 3), np.float32)
    buf.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        t.numpy(out=buf)


def test_read_async(ctx):
    x = random((2, 17, 9, 11))
    t = jitnn.reorder(ctx.tensor(x), "nChw8c")
    buf = np.empty(x.shape, np.float32)

    async def main():
        first, second = await asyncio.gather(t.read_async(), t.read_async(out=buf))
        return first, second

    first, second = asyncio.run(main())
    np.testing.assert_array_equal(first, x)
    assert second is buf
    np.testing.assert_array_equal(buf, x)


@pytest.mark.parametrize("count", [1, 2, 5])
def test_read_all_equals_single_reads(ctx, count):
    arrays = [random((2, 3 + 7 * i, 5, 9), seed=i) for i in range(count)]
    tensors = [jitnn.reorder(ctx.tensor(a), "nChw8c") for a in arrays]
    singles = [t.numpy() for t in tensors]
    together = jitnn.read_all(tensors)
    assert len(together) == count
    for single, read, array in zip(singles, together, arrays):
        np.testing.assert_array_equal(read, single)
        np.testing.assert_array_equal(read, array)
    outs = [np.empty(a.shape, np.float32) if i % 2 == 0 else None for i, a in enumerate(arrays)]
    filled = ctx.read_all(tensors, out=outs)
    for i, (read, array) in enumerate(zip(filled, arrays)):
        np.testing.assert_array_equal(read, array)
        if outs[i] is not None:
            assert read is outs[i]


def test_read_all_mixed_plain_and_blocked(ctx):
    a, b = random((4, 5)), random((1, 9, 3, 3))
    ta, tb = ctx.tensor(a), jitnn.reorder(ctx.tensor(b), "nChw8c")
    ra, rb = jitnn.read_all([ta, tb])
    np.testing.assert_array_equal(ra, a)
    np.testing.assert_array_equal(rb, b)


def test_read_all_validates_everything_before_writing(ctx):
    a, b = random((2, 9, 3, 3)), random((2, 9, 3, 3), seed=1)
    ta, tb = (jitnn.reorder(ctx.tensor(v), "nChw8c") for v in (a, b))
    good = np.zeros(a.shape, np.float32)
    with pytest.raises(ValueError, match=r"read_all \(item 1\): out has shape"):
        ctx.read_all([ta, tb], out=[good, np.zeros((1, 1), np.float32)])
    assert np.all(good == 0)
    with pytest.raises(ValueError, match="out has 1 entries but 2 tensors"):
        ctx.read_all([ta, tb], out=[good])
    with pytest.raises(TypeError, match="item 1 should be a jitnn.Tensor, got ndarray"):
        ctx.read_all([ta, b])


def test_stats_count_reorders_and_reset(ctx):
    ctx.reset_stats()
    x = random((1, 9, 4, 4))
    t = jitnn.reorder(ctx.tensor(x), "nChw8c")
    t.numpy()
    stats = ctx.stats
    assert stats.reorders == 2
    assert stats.launches == 0  # reorders are counted apart
    assert stats.reorder_bytes == 1 * 16 * 4 * 4 * 4 + x.nbytes
    ctx.reset_stats()
    assert ctx.stats == jitnn.Stats()


def test_launch_s_times_the_launches_apart_from_their_compile():
    """``launch_s`` grows with each counted launch by the time of its call,
    compile excluded; reorders stay in ``reorder_s``, and a reset clears it."""
    import time

    from jitnn.instrumentation import kernel_seconds
    ctx = jitnn.Context()
    kernel = _fresh_kernel()
    a = np.ones(4, np.float32)

    def slow_launch(b):
        kernel(b)                             # compiles at the first call
        time.sleep(0.02)
    on_this_thread = kernel_seconds()
    ctx.launcher.launch(slow_launch, a)
    first = ctx.stats
    assert first.compile_s > 0 and first.launches == 1
    assert 0.02 <= first.launch_s < 0.02 + 0.5   # the sleep, not the compile
    # the thread's kernel clock (what explain's per-step kernel times come from)
    assert kernel_seconds() - on_this_thread == pytest.approx(first.launch_s)
    start = time.perf_counter()
    ctx.launcher.launch(slow_launch, a)
    elapsed = time.perf_counter() - start
    assert 0.02 <= ctx.stats.launch_s - first.launch_s <= elapsed
    ctx.launcher.launch(slow_launch, a, counter=None)   # uncounted (a reorder counts its own)
    assert ctx.stats.launches == 2 and ctx.stats.launch_s < first.launch_s + elapsed
    ctx.reset_stats()
    jitnn.reorder(ctx.tensor(random((1, 9, 4, 4))), "nChw8c").numpy()
    stats = ctx.stats
    assert stats.reorders == 2 and stats.reorder_s > 0
    assert stats.launches == 0 and stats.launch_s == 0.0


def _fresh_kernel():
    """A numba function compiled at its first call (never cached on disk)."""
    import numba

    @numba.njit(cache=False)
    def double(a):
        for i in range(a.size):
            a[i] *= 2.0
    return double


def test_compile_s_counts_a_kernel_compiled_behind_a_python_wrapper():
    # the runtime launches most kernels through Python wrappers (checks,
    # planning), which numba's dispatcher list does not see
    ctx = jitnn.Context()
    kernel = _fresh_kernel()

    def wrapper(a):
        kernel(a)
    a = np.ones(4, np.float32)
    ctx.launcher.launch(wrapper, a)
    compiled = ctx.stats.compile_s
    assert compiled > 0
    assert ctx.stats.launches == 1
    ctx.launcher.launch(wrapper, a)                   # compiled already: nothing to add
    assert ctx.stats.compile_s == compiled and ctx.stats.launches == 2
    assert np.all(a == 4.0)


def test_the_compile_clock_ignores_a_lock_taken_before_it_listened():
    from numba.core.event import Event, EventStatus

    from jitnn.instrumentation import _CompileClock
    clock = _CompileClock()
    clock.on_end(Event("numba:compiler_lock", EventStatus.END))   # no start seen
    assert clock.seconds() == 0.0
    clock.on_start(Event("numba:compiler_lock", EventStatus.START))
    clock.on_start(Event("numba:compiler_lock", EventStatus.START))   # re-entrant
    clock.on_end(Event("numba:compiler_lock", EventStatus.END))
    assert clock.seconds() == 0.0
    clock.on_end(Event("numba:compiler_lock", EventStatus.END))
    assert clock.seconds() > 0.0


def test_compile_s_counts_a_span_once_with_the_launches_inside_it():
    from jitnn.instrumentation import compile_seconds
    ctx = jitnn.Context()
    outer, inner = _fresh_kernel(), _fresh_kernel()
    a = np.ones(4, np.float32)

    def planning():                           # compiles itself and launches a compile
        outer(a)
        ctx.launcher.launch(lambda b: inner(b), a)
        return "planned"
    before = compile_seconds()
    assert ctx.launcher.side_work(planning) == "planned"
    spent = compile_seconds() - before
    assert spent > 0
    assert ctx.stats.compile_s == pytest.approx(spent)   # not counted twice
    assert ctx.stats.launches == 1


def test_filter_packing_runs_on_the_context_threads_and_counts_its_compiles(monkeypatch):
    import importlib

    import numba
    conv_op = importlib.import_module("jitnn.ops.conv2d")   # the module, not the op
    fresh = _fresh_kernel()
    original = conv_op.conv_kernels.pack_conv2d_filter
    threads_seen = []

    def pack_after_a_compile(*args, **kwargs):
        threads_seen.append(numba.get_num_threads())
        fresh(np.ones(2, np.float32))
        return original(*args, **kwargs)
    monkeypatch.setattr(conv_op.conv_kernels, "pack_conv2d_filter", pack_after_a_compile)
    ctx = jitnn.Context(num_threads=1)
    x = jitnn.reorder(ctx.tensor(random((1, 8, 3, 3))), "nChw8c")
    x_values = x.numpy()
    w = ctx.tensor(random((8, 8, 1, 1)))
    # this thread's numba count left at all threads by another context, and
    # the conv's input already blocked: packing is the first thing it runs
    everything = jitnn.Context(num_threads=numba.config.NUMBA_NUM_THREADS)
    jitnn.reorder(everything.tensor(random((1, 8, 2, 2))), "nChw8c").numpy()
    ctx.reset_stats()
    y = jitnn.conv2d(x, w).numpy()
    np.testing.assert_allclose(y, np.einsum("nchw,oc->nohw", x_values, w.numpy()[:, :, 0, 0]),
                               rtol=1e-5, atol=1e-5)
    assert threads_seen == [1]
    assert ctx.stats.filter_packs == 1
    assert ctx.stats.compile_s > 0


def test_launches_run_on_the_context_threads_whatever_the_caller_set():
    import numba
    ctx = jitnn.Context(num_threads=1)
    seen = []

    def kernel():
        seen.append(numba.get_num_threads())
    ctx.launcher.launch(kernel)
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)   # the caller's own numba work
        ctx.launcher.launch(kernel)
    finally:
        numba.set_num_threads(saved)
    assert seen == [1, 1]


def test_reorder_errors(ctx):
    t = ctx.tensor(random((2, 3)))
    with pytest.raises(ValueError, match="reorder: blocked layout 'nChw8c' needs a 4-D tensor"):
        jitnn.reorder(t, "nChw8c")
    with pytest.raises(ValueError, match="block must be one of"):
        jitnn.reorder(ctx.tensor(random((1, 3, 2, 2))), "nChw3c")
    with pytest.raises(ValueError, match="can be laid out as 'nc'"):
        jitnn.reorder(t, "nchw")


def test_a_context_is_usable_from_several_threads(ctx):
    arrays = [random((2, 11, 13, 9), seed=i) for i in range(8)]
    results, errors = {}, []

    def work(i):
        try:
            for _ in range(5):
                t = jitnn.reorder(ctx.tensor(arrays[i]), "nChw8c")
                results[i] = t.numpy() if i % 2 else ctx.read_all([t, t])[1]
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    # every reorder is counted despite the concurrency: 5 in + 5 or 10 out per thread
    with assert_schedule(ctx, reorders=8 * 5 + 4 * 5 + 4 * 10):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    for i, array in enumerate(arrays):
        np.testing.assert_array_equal(results[i], array)


def test_pending_tensor_repr_does_not_compute(ctx):
    calls = []

    def producer():
        calls.append(1)
        return np.ones((2, 2), np.float32)

    t = jitnn.Tensor(ctx, (2, 2), "nc", producer=producer)
    assert "pending" in repr(t) and t.pending
    assert calls == []
    np.testing.assert_array_equal(t.numpy(), np.ones((2, 2)))
    assert calls == [1] and not t.pending
    t.numpy()
    assert calls == [1]


def test_copies_are_the_same_tensor_and_a_pickle_holds_the_values(ctx):
    import copy
    import pickle
    t = ctx.tensor(np.ones((2, 3), np.float32))
    assert copy.copy(t) is t and copy.deepcopy([t])[0] is t
    pending = jitnn.relu(jitnn.sub(t, 2.0))          # computed by the pickling
    back = pickle.loads(pickle.dumps(pending))
    # (in the context that ctx unpickles as: jitnn/defaults.py)
    assert not back.pending and back.layout == "nc"
    assert back.context is pickle.loads(pickle.dumps(ctx)) is not ctx
    np.testing.assert_array_equal(back.numpy(), np.zeros((2, 3), np.float32))
