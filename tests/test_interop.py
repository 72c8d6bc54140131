"""Array interchange: jitnn Tensors out through DLPack (``np.from_dlpack``,
``torch.from_dlpack``), and anything array-like in (``__dlpack__``,
``__array_interface__``, ``__array__``), for every jitnn data type."""

from __future__ import annotations

import numpy as np
import pytest

import jitnn
from jitnn.errors import JitnnBufferError
from tests.helpers import random, typed_data

DTYPE_NAMES = [d.name for d in jitnn.DTYPES]


def _pending(dtype: str) -> tuple[jitnn.Tensor, np.ndarray]:
    """A pending tensor of ``dtype`` (an op's result, not run yet) and its values."""
    values = typed_data((2, 3, 5), dtype, seed=3)
    result = jitnn.transpose(jitnn.tensor(values), permutation=[2, 0, 1])
    assert result.pending
    return result, values.transpose(2, 0, 1)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_numpy_reads_a_pending_tensor_of_every_dtype_through_dlpack(dtype):
    t, expected = _pending(dtype)
    got = np.from_dlpack(t)
    assert got.dtype == dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    assert not t.pending                      # reading computed it
    assert t.__dlpack_device__() == (1, 0)    # kDLCPU


def test_a_blocked_tensor_is_read_back_in_standard_layout():
    x = random((2, 9, 5, 7))
    blocked = jitnn.reorder(jitnn.tensor(x), f"nChw{jitnn.default_context().block}c")
    got = np.from_dlpack(blocked)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, x)


def test_the_exported_array_outlives_the_tensor_and_is_the_consumers_own():
    t = jitnn.tensor(np.arange(6, dtype=np.float32))
    got = np.from_dlpack(t)
    del t
    got[0] = 100.0                           # a new array: writing it changes no tensor
    np.testing.assert_array_equal(got, [100, 1, 2, 3, 4, 5])


def test_dlpack_keywords_of_the_array_api():
    t = jitnn.tensor(np.ones((2, 2), np.int32))
    capsule = t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=True)
    assert "dltensor" in repr(capsule)
    assert "dltensor" in repr(t.__dlpack__())        # a legacy consumer
    np.testing.assert_array_equal(np.from_dlpack(t, copy=True), np.ones((2, 2)))
    with pytest.raises(JitnnBufferError, match=r"copy=False cannot be honoured"):
        t.__dlpack__(copy=False)
    with pytest.raises(BufferError, match=r"stream must be None"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match=r"dl_device \(2, 0\)"):
        t.__dlpack__(dl_device=(2, 0))


# --- into jitnn ----------------------------------------------------------------------

class _InterfaceOnly:
    """An object with only ``__array_interface__`` (as some image libraries)."""

    def __init__(self, array: np.ndarray):
        self._array = array
        self.__array_interface__ = array.__array_interface__


class _ArrayOnly:
    """An object with only ``__array__``."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        return self._array


class _DLPackOnly:
    """An object with only the DLPack methods (np.asarray could not read it)."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


@pytest.mark.parametrize("wrapper", [_InterfaceOnly, _ArrayOnly, _DLPackOnly])
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_tensor_copies_any_array_like(wrapper, dtype):
    values = typed_data((3, 4), dtype, seed=5)
    source = values.copy()
    for make in (jitnn.tensor, jitnn.default_context().tensor):
        t = make(wrapper(source))
        assert t.dtype == dtype
        np.testing.assert_array_equal(t.numpy(), values)
    source[...] = 0                                   # a copy: the tensor keeps its values
    np.testing.assert_array_equal(t.numpy(), values)


def test_a_jitnn_tensor_of_another_context_converts_and_dlpack_round_trips():
    other = jitnn.Context(num_threads=1)
    t = other.tensor(np.arange(4, dtype=np.int64))
    again = jitnn.tensor(_DLPackOnly(np.from_dlpack(t)))
    np.testing.assert_array_equal(again.numpy(), [0, 1, 2, 3])
    assert jitnn.tensor(t).context is jitnn.default_context()


def test_graph_inputs_take_array_likes():
    b = jitnn.GraphBuilder()
    x = b.input("x", (2, 3))
    ids = b.input("ids", (2,), dtype="int64")
    graph = b.build({"y": b.relu(x), "i": b.add(ids, ids)})
    values = random((2, 3))
    outs = jitnn.default_context().dispatch(
        graph, {"x": _DLPackOnly(values), "ids": _ArrayOnly(np.array([1, 2]))})
    np.testing.assert_array_equal(outs["y"].numpy(), np.maximum(values, 0))
    np.testing.assert_array_equal(outs["i"].numpy(), [2, 4])
    with pytest.raises(jitnn.JitnnTypeError, match=r"input 'ids' is int64, got floating"):
        jitnn.default_context().dispatch(graph, {"x": values, "ids": _DLPackOnly(values[0, :2])})


# --- PyTorch ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_torch_reads_a_pending_tensor_of_every_dtype(dtype):
    torch = pytest.importorskip("torch")
    t, expected = _pending(dtype)
    got = torch.from_dlpack(t)
    assert str(got.dtype) == f"torch.{dtype}"
    np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_tensor_reads_torch_tensors_of_every_dtype(dtype):
    torch = pytest.importorskip("torch")
    values = typed_data((2, 3, 4), dtype, seed=7)
    source = torch.from_numpy(values.copy()).permute(2, 0, 1)   # strided, not contiguous
    t = jitnn.tensor(source)
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), values.transpose(2, 0, 1))
    source.zero_()                                    # a copy, as from numpy
    np.testing.assert_array_equal(t.numpy(), values.transpose(2, 0, 1))


def test_torch_types_jitnn_converts_or_refuses():
    torch = pytest.importorskip("torch")
    assert jitnn.tensor(torch.tensor([True, False])).dtype == np.uint8
    assert jitnn.tensor(torch.ones(2, dtype=torch.float64)).dtype == np.float32
    assert jitnn.tensor(torch.ones(2, dtype=torch.int16)).dtype == np.int32
    with pytest.raises(jitnn.JitnnTypeError, match=r"float16 is not a jitnn data type"):
        jitnn.tensor(torch.ones(2, dtype=torch.float16))
    with pytest.raises(jitnn.JitnnTypeError, match=r"cannot read the torch.Tensor through DLPack"):
        jitnn.tensor(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(jitnn.JitnnTypeError, match=r"require gradient, use tensor.detach"):
        jitnn.tensor(torch.ones(2, requires_grad=True))
    np.testing.assert_array_equal(
        jitnn.tensor(torch.ones(2, requires_grad=True).detach()).numpy(), [1, 1])


def test_a_network_output_goes_to_torch_and_back():
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(random((1, 3, 9, 9)))
    w = random((7, 3, 3, 3), seed=1)
    y = jitnn.relu(jitnn.conv2d(jitnn.tensor(x), w, padding=1))      # blocked, pending
    expected = torch.relu(torch.nn.functional.conv2d(x, torch.from_numpy(w), padding=1))
    torch.testing.assert_close(torch.from_dlpack(y), expected, rtol=1e-5, atol=1e-5)
