"""Read an ONNX file without a second copy of its weights.

``onnx.load`` reads the whole file into one bytes object and parses it into
a ``ModelProto`` whose initializers hold their own copy of every weight
(protobuf copies the bytes into its arena), and ``numpy_helper.to_array``
copies each weight once more: loading a model peaked at three times its
weights before jitnn made its own constants. This module walks the protobuf
wire format of the file instead: every field but the initializers' ``raw_data``
is copied into a small model that protobuf parses, and each ``raw_data`` is
read from the file straight into the numpy array that becomes the constant
(64-byte aligned, as the kernels want). So a model's weights are in memory
once while it converts.

Only what the wire format says is trusted: a file it cannot walk (truncated,
corrupt, not ONNX), weights in external files, or a data type that is not a
plain little-endian numpy type falls back to ``onnx.load`` and
``numpy_helper.to_array``, which say what is wrong as before.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import sys
from typing import Any, BinaryIO

import numpy as np

from ..kernels.buffers import aligned_empty

#: ModelProto.graph, GraphProto.initializer, TensorProto's fields (onnx.proto)
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_RAW_DATA = 1, 2, 9
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14
#: raw_data shorter than this stays in the small model (not worth a read of its own)
_MIN_RAW = 256


class _NotPlain(Exception):
    """The file cannot be walked here (corrupt, external data): use onnx.load."""


def _varint(stream: BinaryIO) -> int:
    result = shift = 0
    while True:
        byte = stream.read(1)
        if not byte:
            raise _NotPlain("truncated varint")
        result |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return result
        shift += 7
        if shift > 63:
            raise _NotPlain("varint too long")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise _NotPlain("truncated field")
    return data


def _fields(stream: BinaryIO, end: int):
    """``(field, wire type, tag bytes)`` of each field up to offset ``end``;
    the caller reads or skips the payload (see :func:`_payload`)."""
    while stream.tell() < end:
        start = stream.tell()
        tag = _varint(stream)
        field, wire = tag >> 3, tag & 7
        if field == 0 or wire in (3, 4, 6, 7):       # groups are not ONNX
            raise _NotPlain("unexpected wire type")
        size = stream.tell() - start
        stream.seek(start)
        yield field, wire, _exactly(stream, size)


def _payload(stream: BinaryIO, wire: int) -> tuple[bytes, int]:
    """The encoded payload of a field whose tag was just read (a LEN field's
    length prefix included), and for a LEN field its length."""
    if wire == 0:
        start = stream.tell()
        _varint(stream)
        size = stream.tell() - start
        stream.seek(start)
        return _exactly(stream, size), 0
    if wire == 1:
        return _exactly(stream, 8), 0
    if wire == 5:
        return _exactly(stream, 4), 0
    length = _varint(stream)
    return _encode_varint(length) + _exactly(stream, length), length


def _tensor(stream: BinaryIO, end: int) -> tuple[bytes, tuple[int, int] | None]:
    """One initializer (a TensorProto ending at ``end``): its fields without a
    large ``raw_data``, and that raw_data's ``(offset, length)`` in the file."""
    kept = bytearray()
    raw = None
    for field, wire, tag in _fields(stream, end):
        if field == _TENSOR_RAW_DATA and wire == 2:
            length = _varint(stream)
            if length >= _MIN_RAW:
                raw = (stream.tell(), length)
                stream.seek(length, io.SEEK_CUR)
                continue
            kept += tag + _encode_varint(length) + _exactly(stream, length)
            continue
        if field in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            raise _NotPlain("external data")
        payload, _ = _payload(stream, wire)
        kept += tag + payload
    if stream.tell() != end:
        raise _NotPlain("a field runs past its tensor")
    return bytes(kept), raw


def _graph(stream: BinaryIO, end: int) -> tuple[bytes, list]:
    """The GraphProto ending at ``end`` without its initializers' raw_data,
    and those raw_data spans in initializer order (None: kept in the proto)."""
    kept = bytearray()
    spans: list = []
    for field, wire, tag in _fields(stream, end):
        if field == _GRAPH_INITIALIZER and wire == 2:
            length = _varint(stream)
            fields, span = _tensor(stream, stream.tell() + length)
            kept += tag + _encode_varint(len(fields)) + fields
            spans.append(span)
            continue
        payload, _ = _payload(stream, wire)
        kept += tag + payload
    if stream.tell() != end:
        raise _NotPlain("a field runs past the graph")
    return bytes(kept), spans


def _walk(stream: BinaryIO, size: int) -> tuple[bytes, list]:
    """The model without its initializers' raw_data, and their spans."""
    kept = bytearray()
    spans = None
    for field, wire, tag in _fields(stream, size):
        if field == _MODEL_GRAPH and wire == 2 and spans is None:
            length = _varint(stream)
            graph, spans = _graph(stream, stream.tell() + length)
            kept += tag + _encode_varint(len(graph)) + graph
            continue
        payload, _ = _payload(stream, wire)
        kept += tag + payload
    if stream.tell() != size or spans is None:
        raise _NotPlain("no graph, or a field runs past the file")
    return bytes(kept), spans


def _array(stream: BinaryIO, tensor, span: tuple[int, int], onnx) -> np.ndarray | None:
    """The initializer's values read from ``span`` into a new aligned array,
    or None when its type is not one numpy reads as it is stored."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, TypeError, ValueError):
        return None
    # bfloat16, float8 and int4 come as other numpy types: to_array unpacks them
    if dtype.kind not in "fiub" or dtype.itemsize * 8 not in (8, 16, 32, 64) or \
            tensor.data_type in _PACKED_TYPES:
        return None
    shape = tuple(int(d) for d in tensor.dims)
    offset, length = span
    if math.prod(shape) * dtype.itemsize != length:
        return None                  # to_array says what is wrong
    array = _own_pages(shape, dtype, length) if length >= _OWN_PAGES_BYTES else \
        aligned_empty(shape, dtype)
    stream.seek(offset)
    if stream.readinto(memoryview(array.reshape(-1)).cast("B")) != length:
        raise _NotPlain("truncated raw_data")
    return array


#: weights this large get pages of their own (at most 6 % rounding to pages)
_OWN_PAGES_BYTES = 64 * 1024


def _own_pages(shape: tuple, dtype: np.dtype, nbytes: int) -> np.ndarray:
    """A new array in an anonymous memory map of its own (page-aligned).

    Most weights are packed into the kernels' layout at the first run and
    their plain copy dropped. From the heap, that freed memory stayed in the
    process (jitnn keeps freed heap memory for reuse: jitnn/_memory.py) while
    the packed copies grew the heap beside it; a map of its own goes back to
    the system when the array goes. MobileNetV2, warm cache, 1 thread: peak
    resident memory above the imports 75 -> 70 MB."""
    # private: Python's default shares the pages with a forked child
    private = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}
    return np.frombuffer(mmap.mmap(-1, nbytes, **private), dtype).reshape(shape)


#: TensorProto data types whose numpy stand-in is not how they are stored
_PACKED_TYPES = frozenset({16, 17, 18, 19, 20, 21, 22, 23, 24, 25})   # bfloat16, float8, (u)int4...


def read_model(source: Any) -> tuple[Any, list | None]:
    """``(ModelProto, weights)`` of a path or bytes: ``weights[i]`` is
    initializer ``i``'s array (its ``raw_data`` is left out of the proto), or
    None where the proto holds the values. Raises :class:`_NotPlain` when
    the file is not walked here (the caller then uses ``onnx.load``)."""
    import onnx
    if sys.byteorder != "little":
        raise _NotPlain("a big-endian host")
    if isinstance(source, (bytes, bytearray)):
        stream: BinaryIO = io.BytesIO(source)
        size = len(source)
    else:
        stream = open(os.fspath(source), "rb")
        size = os.fstat(stream.fileno()).st_size
    with stream:
        stripped, spans = _walk(stream, size)
        try:
            model = onnx.ModelProto.FromString(stripped)
        except Exception as error:      # protobuf's DecodeError: onnx.load says it again
            raise _NotPlain(str(error)) from None
        if len(model.graph.initializer) != len(spans):
            raise _NotPlain("initializers miscounted")
        weights: list = []
        for tensor, span in zip(model.graph.initializer, spans):
            array = None if span is None else _array(stream, tensor, span, onnx)
            if array is None and span is not None:
                # not a plain type: the proto gets its bytes back for to_array
                stream.seek(span[0])
                tensor.raw_data = _exactly(stream, span[1])
            weights.append(array)
    return model, weights


__all__ = ["read_model"]
