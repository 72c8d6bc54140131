"""Read an ONNX file into jitnn/onnx/_proto.py's messages, its weights once.

The file is walked as a stream down to the initializers: each field of the
model, the graph and the initializer tensors is read and decoded on its own,
and each large ``raw_data`` is read from the file straight into the numpy
array that becomes the constant (64-byte aligned, as the kernels want), never
into a bytes object first. So a model's weights are in memory once while it
converts, and neither onnx nor protobuf is imported. Weights in external files
(``data_location = EXTERNAL``) are read the same way, from files inside the
model's directory only (as onnx refuses others).

What the file does not say truly (truncated, corrupt, not ONNX) raises
:class:`~jitnn.onnx._proto.DecodeError`; the caller names the file.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import numpy as np

from ..kernels.buffers import aligned_empty
from . import _proto
from ._proto import DecodeError, finish, set_field

#: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data (onnx.proto)
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
#: raw_data shorter than this is decoded with its tensor (not worth a read of its own)
_MIN_RAW = 256


class _Source:
    """A binary stream read forward, with the position kept here (no tell())."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self.stream, self.size, self.pos = stream, size, 0

    def read(self, count: int) -> bytes:
        if self.pos + count > self.size:
            raise DecodeError("the file ends inside a field (truncated?)")
        data = self.stream.read(count)
        if len(data) != count:
            raise DecodeError("the file ends inside a field (truncated?)")
        self.pos += count
        return data

    def skip(self, count: int) -> None:
        if self.pos + count > self.size:
            raise DecodeError("the file ends inside a field (truncated?)")
        self.pos += count
        self.stream.seek(self.pos)

    def varint(self) -> int:
        result = shift = 0
        while True:
            byte = self.read(1)[0]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
            if shift > 63:
                raise DecodeError("a varint longer than 10 bytes")

    def value(self, wire: int) -> Any:
        """A field's value, as :func:`jitnn.onnx._proto.read_value` gives it."""
        if wire == 0:
            return self.varint()
        if wire == 2:
            return memoryview(self.read(self.varint()))
        if wire in (1, 5):
            return memoryview(self.read(8 if wire == 1 else 4))
        raise DecodeError(f"wire type {wire} (groups are not ONNX)")


def _walk(source: _Source, message: _proto.Message, end: int,
          special: dict[int, Callable[[int], None]]) -> None:
    """Decode the fields of ``message`` up to offset ``end``, field by field;
    a length-delimited field numbered in ``special`` goes to its handler
    (given the field's end) instead."""
    fields = type(message).FIELDS
    while source.pos < end:
        tag = source.varint()
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise DecodeError("field number 0")
        handler = special.get(number)
        if handler is not None and wire == 2:
            length = source.varint()
            stop = source.pos + length
            if stop > end:
                raise DecodeError(f"a field runs past its {type(message).__name__}")
            handler(stop)
            if source.pos != stop:
                raise DecodeError(f"a field runs past its {type(message).__name__}")
            continue
        value = source.value(wire)
        spec = fields.get(number)
        if spec is not None:
            set_field(message, spec, wire, value)
    if source.pos != end:
        raise DecodeError(f"a field runs past its {type(message).__name__}")
    finish(message)


def _read_model(source: _Source) -> tuple[Any, list]:
    """The model, and per initializer the ``(offset, length)`` of a raw_data
    left in the file (None: decoded with its tensor)."""
    model = _proto.ModelProto()
    spans: list = []

    def tensor(end: int) -> None:
        message = _proto.TensorProto()
        span = None

        def raw_data(stop: int) -> None:
            nonlocal span
            length = stop - source.pos
            if length >= _MIN_RAW:
                span = (source.pos, length)
                source.skip(length)
            else:
                message.raw_data = source.read(length)

        _walk(source, message, end, {_TENSOR_RAW_DATA: raw_data})
        graph.initializer.append(message)
        spans.append(span)

    def read_graph(end: int) -> None:
        nonlocal graph
        graph = _proto.GraphProto()
        spans.clear()
        _walk(source, graph, end, {_GRAPH_INITIALIZER: tensor})
        model.graph = graph

    graph = _proto.GraphProto()
    _walk(source, model, source.size, {_MODEL_GRAPH: read_graph})
    return model, spans


def _plain_dtype(tensor) -> np.dtype | None:
    """The numpy type of ``tensor`` when its raw bytes are that type's array
    on this host (little-endian numbers, bools), else None (to_array's work)."""
    entry = _proto.DATA_TYPES.get(tensor.data_type)
    if entry is None or isinstance(entry[1], str) or entry[1].kind not in "fiub" \
            or sys.byteorder != "little":
        return None
    return entry[1]


def _read_array(stream: BinaryIO, tensor, offset: int, length: int) -> np.ndarray | None:
    """The tensor's values read from ``stream`` at ``offset`` into a new
    aligned array, or None when the bytes are not simply that array."""
    dtype = _plain_dtype(tensor)
    shape = tuple(int(d) for d in tensor.dims)
    if dtype is None or math.prod(shape) * dtype.itemsize != length:
        return None
    array = _own_pages(shape, dtype, length) if length >= _OWN_PAGES_BYTES else \
        aligned_empty(shape, dtype)
    stream.seek(offset)
    if length and stream.readinto(memoryview(array.reshape(-1)).cast("B")) != length:
        raise DecodeError(f"tensor {tensor.name!r}: the file ends inside its data (truncated?)")
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


def _tensors(graph) -> Iterator[Any]:
    """Every TensorProto of ``graph`` but its initializers: sparse
    initializers' parts, node attributes' tensors, and those of subgraphs."""
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for sparse in ([attribute.sparse_tensor] if attribute.HasField("sparse_tensor")
                           else []) + list(attribute.sparse_tensors):
                yield sparse.values
                yield sparse.indices
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from sub.initializer
                yield from _tensors(sub)


def _external_file(tensor, base_dir: str | None) -> tuple[BinaryIO, int, int]:
    """The open file, offset and length of an external tensor's data; a
    location outside the model's directory (absolute, ``..``, a link out)
    is refused, as onnx refuses it."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    if base_dir is None:
        raise _proto.tensor_error(tensor, f"its data is in the external file {location!r}, "
                                  "which a model given as bytes or as an onnx.ModelProto "
                                  "cannot locate (give the model's path)")
    if not location or os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise _proto.tensor_error(tensor, f"the external data location {location!r} is not "
                                  "a path relative to the model's directory")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise _proto.tensor_error(tensor, f"the external data location {location!r} leaves "
                                  f"the model's directory {base_dir!r}")
    if not os.path.isfile(path):
        raise _proto.tensor_error(tensor, f"its external data file {location!r} does not "
                                  f"exist in {base_dir!r}")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise _proto.tensor_error(tensor, f"external data offset/length {info} are not "
                                  "integers") from None
    stream = open(path, "rb")
    size = os.fstat(stream.fileno()).st_size
    if length is None:
        length = size - offset
    if offset < 0 or length < 0 or offset + length > size:
        stream.close()
        raise _proto.tensor_error(tensor, f"its external data (offset {offset}, length "
                                  f"{length}) lies outside {location!r} ({size} bytes)")
    return stream, offset, length


def _read_external(tensor, base_dir: str | None, as_array: bool) -> np.ndarray | None:
    """Read an external tensor's data: into a new array (``as_array``, when
    its bytes are simply one), else into its raw_data; either way the tensor
    no longer points at the file (as onnx.load leaves it)."""
    stream, offset, length = _external_file(tensor, base_dir)
    with stream:
        array = _read_array(stream, tensor, offset, length) if as_array else None
        if array is None:
            stream.seek(offset)
            data = stream.read(length)
            if len(data) != length:
                raise _proto.tensor_error(tensor, "its external data file ends early")
            tensor.raw_data = data
    for name in ("data_location", "external_data"):
        tensor.__dict__.pop(name, None)
    return array


def read_model(source: Any) -> tuple[Any, list]:
    """``(ModelProto, weights)`` of a path or bytes (jitnn/onnx/_proto.py's
    messages): ``weights[i]`` is initializer ``i``'s array (its raw_data is
    left out of the message), or None where the message holds the values.
    Raises :class:`~jitnn.onnx._proto.DecodeError` for what is not a
    well-formed ONNX model, OSError for a file that cannot be read."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        stream: BinaryIO = io.BytesIO(source)
        size = len(source) if not isinstance(source, memoryview) else source.nbytes
        base_dir = None
    else:
        path = os.fspath(source)
        stream = open(path, "rb")
        size = os.fstat(stream.fileno()).st_size
        base_dir = os.path.dirname(os.path.abspath(path))
    with stream:
        model, spans = _read_model(_Source(stream, size))
        weights: list = []
        for tensor, span in zip(model.graph.initializer, spans):
            array = None
            if tensor.data_location == _proto.EXTERNAL:
                array = _read_external(tensor, base_dir, as_array=True)
            elif span is not None:
                array = _read_array(stream, tensor, *span)
                if array is None:      # not simply an array: to_array reads the bytes
                    stream.seek(span[0])
                    tensor.raw_data = stream.read(span[1])
            weights.append(array)
    for tensor in _tensors(model.graph):
        if tensor.data_location == _proto.EXTERNAL:
            _read_external(tensor, base_dir, as_array=False)
    return model, weights


__all__ = ["read_model"]
