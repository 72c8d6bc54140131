"""The ONNX protobuf messages jitnn reads, decoded without the onnx package.

``import onnx`` (and protobuf) cost ~7 MB of resident memory and a few
tenths of a second at every load, for messages jitnn only reads. This module
decodes the protobuf wire format of onnx.proto into plain objects with the
field names of onnx's classes: a repeated field is a list (a tensor's typed
data a numpy array), an enum an int, a missing field reads as its default,
and ``HasField`` says whether a singular field was in the file. What jitnn
does not read (training info, model-local functions, quantization
annotations) is skipped.

:func:`to_array` and :func:`attribute_value` are ``onnx.numpy_helper.to_array``
and ``onnx.helper.get_attribute_value`` on these objects, as ONNX defines
them. Reading a whole file, with its weights straight into aligned arrays,
is jitnn/onnx/_reader.py.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from ..errors import JitnnValueError


class DecodeError(ValueError):
    """The bytes are not a well-formed protobuf message of the expected type."""


def varint(buf, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``buf[pos]`` and the position after it."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos + 1
        shift += 7
        if shift > 63:
            raise DecodeError("a varint longer than 10 bytes")


def _signed(value: int) -> int:
    # int32 and int64 fields: negative values are 10-byte two's complement
    return value - (1 << 64) if value >= 1 << 63 else value


def _packed_varints(data) -> np.ndarray:
    """A packed run of varints as uint64 (vectorized: a tensor's int64_data
    may hold millions)."""
    b = np.frombuffer(data, np.uint8)
    if b.size == 0:
        return np.zeros(0, np.uint64)
    if b[-1] >= 0x80:
        raise DecodeError("a packed varint runs past its field")
    ends = np.flatnonzero(b < 0x80)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    if int((ends - starts).max()) > 9:
        raise DecodeError("a varint longer than 10 bytes")
    shifts = (np.arange(b.size) - np.repeat(starts, ends - starts + 1)) * 7
    # the 7-bit groups do not overlap: their sum is their bitwise or
    groups = (b & 0x7F).astype(np.uint64) << shifts.astype(np.uint64)
    return np.add.reduceat(groups, starts)


# field kinds
_INT, _UINT, _FLOAT, _DOUBLE, _STR, _BYTES = range(6)
#: typed tensor data, kept as numpy arrays: kind -> dtype
_ARRAYS = {"f4": np.dtype("<f4"), "f8": np.dtype("<f8"), "i4": np.dtype(np.int32),
           "i8": np.dtype(np.int64), "u8": np.dtype(np.uint64)}


class Message:
    """A decoded message: fields set from the file are instance attributes,
    the others read as their defaults (a message field as an empty message)."""

    #: field number -> (name, kind, repeated); kind: one of the kinds above,
    #: a key of _ARRAYS, or a Message subclass
    FIELDS: dict[int, tuple[str, Any, bool]] = {}
    _BY_NAME: dict[str, tuple[str, Any, bool]] = {}

    def __init_subclass__(cls) -> None:
        cls._BY_NAME = {spec[0]: spec for spec in cls.FIELDS.values()}

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            if name not in self._BY_NAME:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            setattr(self, name, value)

    def __getattr__(self, name: str) -> Any:
        spec = type(self)._BY_NAME.get(name)
        if spec is None:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        _, kind, repeated = spec
        if repeated:
            value: Any = []
            self.__dict__[name] = value      # a list the caller may append to
            return value
        if isinstance(kind, type):
            return kind()
        return _DEFAULTS[kind]

    def HasField(self, name: str) -> bool:  # protobuf's name: the converter calls it
        spec = type(self)._BY_NAME.get(name)
        if spec is None or spec[2]:
            raise ValueError(f"{type(self).__name__} has no singular field {name!r}")
        return name in self.__dict__

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" if not isinstance(v, (bytes, np.ndarray)) or len(v) < 16
                          else f"{k}=<{len(v)} items>" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({shown})"

    @classmethod
    def decode(cls, data) -> Message:
        """The message of ``data`` (bytes or a memoryview); DecodeError when
        it is not one."""
        view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        message = cls()
        try:
            end = _decode_into(message, view, 0, len(view))
        except IndexError:
            raise DecodeError(f"a {cls.__name__} that ends inside a field") from None
        if end != len(view):
            raise DecodeError(f"a field runs past its {cls.__name__}")
        return message


_DEFAULTS = {_INT: 0, _UINT: 0, _FLOAT: 0.0, _DOUBLE: 0.0, _STR: "", _BYTES: b""}


def read_value(buf, pos: int, wire: int) -> tuple[Any, int]:
    """The value of a field whose tag ends at ``pos``: an int (varint) or a
    memoryview of its bytes (fixed32, fixed64, length-delimited)."""
    if wire == 0:
        return varint(buf, pos)
    if wire == 2:
        length, pos = varint(buf, pos)
        end = pos + length
        if end > len(buf):
            raise DecodeError("a field runs past its message")
        return buf[pos:end], end
    if wire == 5:
        end = pos + 4
    elif wire == 1:
        end = pos + 8
    else:
        raise DecodeError(f"wire type {wire} (groups are not ONNX)")
    if end > len(buf):
        raise DecodeError("a field runs past its message")
    return buf[pos:end], end


def _decode_into(message: Message, buf, pos: int, end: int) -> int:
    fields = type(message).FIELDS
    while pos < end:
        tag, pos = varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise DecodeError("field number 0")
        value, pos = read_value(buf, pos, wire)
        spec = fields.get(number)
        if spec is not None:
            set_field(message, spec, wire, value)
    finish(message)
    return pos


def set_field(message: Message, spec: tuple[str, Any, bool], wire: int, value) -> None:
    """Set (or for a repeated field, extend) the field ``spec`` of ``message``
    from one occurrence in the wire format (see :func:`read_value`)."""
    name, kind, repeated = spec
    fields = message.__dict__
    if isinstance(kind, type):
        if wire != 2:
            raise DecodeError(f"{name}: a message field with wire type {wire}")
        if repeated:
            fields.setdefault(name, []).append(kind.decode(value))
        else:
            fields[name] = kind.decode(value)   # (protobuf would merge a repeat; ONNX has none)
        return
    if kind in _ARRAYS:            # chunks, joined by finish()
        fields.setdefault("_chunks", {}).setdefault(name, []).append(_array_chunk(kind, wire, value))
        return
    if kind in (_STR, _BYTES):
        if wire != 2:
            raise DecodeError(f"{name}: a string field with wire type {wire}")
        data = bytes(value)
        if kind == _STR:
            try:
                data = data.decode()
            except UnicodeDecodeError:
                raise DecodeError(f"{name}: a string that is not UTF-8") from None
        items = [data]
    elif wire == 2:                # a packed repeated scalar
        if not repeated:
            raise DecodeError(f"{name}: a packed run for a singular field")
        items = _packed(kind, value)
    elif kind in (_INT, _UINT):
        if wire != 0:
            raise DecodeError(f"{name}: an integer field with wire type {wire}")
        items = [_signed(value) if kind == _INT else value]
    else:
        if wire != (5 if kind == _FLOAT else 1):
            raise DecodeError(f"{name}: a float field with wire type {wire}")
        items = [struct.unpack("<f" if kind == _FLOAT else "<d", value)[0]]
    if repeated:
        fields.setdefault(name, []).extend(items)
    else:
        fields[name] = items[-1]


def _packed(kind: int, data) -> list:
    if kind == _FLOAT:
        return np.frombuffer(data, "<f4").tolist()
    if kind == _DOUBLE:
        return np.frombuffer(data, "<f8").tolist()
    values = _packed_varints(data)
    return (values.view(np.int64) if kind == _INT else values).tolist()


def _array_chunk(kind: str, wire: int, value) -> np.ndarray:
    dtype = _ARRAYS[kind]
    if kind in ("f4", "f8"):
        size = 4 if kind == "f4" else 8
        if wire not in (2, 5 if size == 4 else 1):
            raise DecodeError(f"float data with wire type {wire}")
        if len(value) % size:
            raise DecodeError("packed floats of a length that is not a multiple of their size")
        return np.frombuffer(value, dtype).copy()
    if wire == 0:
        return np.array([value], np.uint64).view(np.int64).astype(dtype) if kind != "u8" \
            else np.array([value], np.uint64)
    if wire != 2:
        raise DecodeError(f"integer data with wire type {wire}")
    values = _packed_varints(value)
    # int32 values are sign-extended to 64 bits: the low half is the value
    return values if kind == "u8" else values.view(np.int64).astype(dtype)


def finish(message: Message) -> None:
    """Join the typed-data chunks of a tensor decoded in pieces."""
    chunks = message.__dict__.pop("_chunks", None)
    for name, parts in (chunks or {}).items():
        message.__dict__[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)


def _message(name: str, fields: dict) -> type:
    return type(name, (Message,), {"FIELDS": fields, "__module__": __name__})


# onnx.proto (ONNX IR version 11): the fields jitnn reads or keeps
StringStringEntryProto = _message("StringStringEntryProto", {1: ("key", _STR, False),
                                                             2: ("value", _STR, False)})
OperatorSetIdProto = _message("OperatorSetIdProto", {1: ("domain", _STR, False),
                                                     2: ("version", _INT, False)})
Segment = _message("Segment", {1: ("begin", _INT, False), 2: ("end", _INT, False)})
TensorProto = _message("TensorProto", {
    1: ("dims", _INT, True), 2: ("data_type", _INT, False), 3: ("segment", Segment, False),
    4: ("float_data", "f4", True), 5: ("int32_data", "i4", True),
    6: ("string_data", _BYTES, True), 7: ("int64_data", "i8", True), 8: ("name", _STR, False),
    12: ("doc_string", _STR, False), 9: ("raw_data", _BYTES, False),
    13: ("external_data", StringStringEntryProto, True), 14: ("data_location", _INT, False),
    10: ("double_data", "f8", True), 11: ("uint64_data", "u8", True),
    16: ("metadata_props", StringStringEntryProto, True)})
SparseTensorProto = _message("SparseTensorProto", {
    1: ("values", TensorProto, False), 2: ("indices", TensorProto, False),
    3: ("dims", _INT, True)})
Dimension = _message("Dimension", {1: ("dim_value", _INT, False), 2: ("dim_param", _STR, False),
                                   3: ("denotation", _STR, False)})
TensorShapeProto = _message("TensorShapeProto", {1: ("dim", Dimension, True)})
TypeProto = _message("TypeProto", {})
TensorTypeProto = _message("TensorTypeProto", {1: ("elem_type", _INT, False),
                                      2: ("shape", TensorShapeProto, False)})
SequenceTypeProto = _message("SequenceTypeProto", {1: ("elem_type", TypeProto, False)})
MapTypeProto = _message("MapTypeProto", {1: ("key_type", _INT, False), 2: ("value_type", TypeProto, False)})
OptionalTypeProto = _message("OptionalTypeProto", {1: ("elem_type", TypeProto, False)})
SparseTensorTypeProto = _message("SparseTensorTypeProto", {1: ("elem_type", _INT, False),
                                                  2: ("shape", TensorShapeProto, False)})
TypeProto.FIELDS = {1: ("tensor_type", TensorTypeProto, False),
                    4: ("sequence_type", SequenceTypeProto, False),
                    5: ("map_type", MapTypeProto, False),
                    9: ("optional_type", OptionalTypeProto, False),
                    8: ("sparse_tensor_type", SparseTensorTypeProto, False),
                    6: ("denotation", _STR, False)}
TypeProto._BY_NAME = {spec[0]: spec for spec in TypeProto.FIELDS.values()}
ValueInfoProto = _message("ValueInfoProto", {
    1: ("name", _STR, False), 2: ("type", TypeProto, False), 3: ("doc_string", _STR, False),
    4: ("metadata_props", StringStringEntryProto, True)})
GraphProto = _message("GraphProto", {})
AttributeProto = _message("AttributeProto", {
    1: ("name", _STR, False), 21: ("ref_attr_name", _STR, False),
    13: ("doc_string", _STR, False), 20: ("type", _INT, False), 2: ("f", _FLOAT, False),
    3: ("i", _INT, False), 4: ("s", _BYTES, False), 5: ("t", TensorProto, False),
    6: ("g", GraphProto, False), 22: ("sparse_tensor", SparseTensorProto, False),
    14: ("tp", TypeProto, False), 7: ("floats", _FLOAT, True), 8: ("ints", _INT, True),
    9: ("strings", _BYTES, True), 10: ("tensors", TensorProto, True),
    11: ("graphs", GraphProto, True), 23: ("sparse_tensors", SparseTensorProto, True),
    15: ("type_protos", TypeProto, True)})
NodeProto = _message("NodeProto", {
    1: ("input", _STR, True), 2: ("output", _STR, True), 3: ("name", _STR, False),
    4: ("op_type", _STR, False), 7: ("domain", _STR, False), 8: ("overload", _STR, False),
    5: ("attribute", AttributeProto, True), 6: ("doc_string", _STR, False),
    9: ("metadata_props", StringStringEntryProto, True)})
GraphProto.FIELDS = {
    1: ("node", NodeProto, True), 2: ("name", _STR, False),
    5: ("initializer", TensorProto, True), 15: ("sparse_initializer", SparseTensorProto, True),
    10: ("doc_string", _STR, False), 11: ("input", ValueInfoProto, True),
    12: ("output", ValueInfoProto, True), 13: ("value_info", ValueInfoProto, True),
    16: ("metadata_props", StringStringEntryProto, True)}
GraphProto._BY_NAME = {spec[0]: spec for spec in GraphProto.FIELDS.values()}
ModelProto = _message("ModelProto", {
    1: ("ir_version", _INT, False), 8: ("opset_import", OperatorSetIdProto, True),
    2: ("producer_name", _STR, False), 3: ("producer_version", _STR, False),
    4: ("domain", _STR, False), 5: ("model_version", _INT, False),
    6: ("doc_string", _STR, False), 7: ("graph", GraphProto, False),
    14: ("metadata_props", StringStringEntryProto, True)})

#: TensorProto.DataLocation.EXTERNAL
EXTERNAL = 1

#: TensorProto.DataType -> (name, numpy dtype or the ml_dtypes type's name,
#: the typed field that holds the values when raw_data does not)
DATA_TYPES: dict[int, tuple[str, Any, str]] = {
    1: ("FLOAT", np.dtype(np.float32), "float_data"),
    2: ("UINT8", np.dtype(np.uint8), "int32_data"),
    3: ("INT8", np.dtype(np.int8), "int32_data"),
    4: ("UINT16", np.dtype(np.uint16), "int32_data"),
    5: ("INT16", np.dtype(np.int16), "int32_data"),
    6: ("INT32", np.dtype(np.int32), "int32_data"),
    7: ("INT64", np.dtype(np.int64), "int64_data"),
    8: ("STRING", np.dtype(object), "string_data"),
    9: ("BOOL", np.dtype(np.bool_), "int32_data"),
    10: ("FLOAT16", np.dtype(np.float16), "int32_data"),
    11: ("DOUBLE", np.dtype(np.float64), "double_data"),
    12: ("UINT32", np.dtype(np.uint32), "uint64_data"),
    13: ("UINT64", np.dtype(np.uint64), "uint64_data"),
    14: ("COMPLEX64", np.dtype(np.complex64), "float_data"),
    15: ("COMPLEX128", np.dtype(np.complex128), "double_data"),
    16: ("BFLOAT16", "bfloat16", "int32_data"),
    17: ("FLOAT8E4M3FN", "float8_e4m3fn", "int32_data"),
    18: ("FLOAT8E4M3FNUZ", "float8_e4m3fnuz", "int32_data"),
    19: ("FLOAT8E5M2", "float8_e5m2", "int32_data"),
    20: ("FLOAT8E5M2FNUZ", "float8_e5m2fnuz", "int32_data"),
    21: ("UINT4", "uint4", "int32_data"),
    22: ("INT4", "int4", "int32_data"),
    23: ("FLOAT4E2M1", "float4_e2m1fn", "int32_data"),
    24: ("FLOAT8E8M0", "float8_e8m0fnu", "int32_data"),
}
#: the types stored as one value per byte (or two bytes) whose numpy types
#: come from ml_dtypes: raw_data holds them as they are
_ONE_PER_UNIT = frozenset({16, 17, 18, 19, 20, 24})
_FOUR_BIT = frozenset({21, 22, 23})


def type_name(code: int) -> str:
    entry = DATA_TYPES.get(code)
    return entry[0].lower() if entry else f"data type {code}"


def np_dtype(code: int) -> np.dtype:
    """The numpy dtype of TensorProto data type ``code`` (``onnx.helper.
    tensor_dtype_to_np_dtype``); KeyError for a type without one here (the
    2- and 6-bit types), ImportError when it needs ml_dtypes, which is missing."""
    entry = DATA_TYPES.get(code)
    if entry is None:
        raise KeyError(code)
    if isinstance(entry[1], str):
        # onnx's own dependency for these types
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, entry[1]))
    return entry[1]


def tensor_error(tensor, why: str) -> JitnnValueError:
    return JitnnValueError(f"onnx: tensor {tensor.name!r} ({type_name(tensor.data_type)}, "
                           f"dims {list(tensor.dims)}): {why}")


def to_array(tensor) -> np.ndarray:
    """The values of ``tensor`` (a decoded TensorProto, external data already
    read into raw_data), as ``onnx.numpy_helper.to_array`` gives them."""
    if tensor.HasField("segment"):
        raise tensor_error(tensor, "a tensor in segments is not supported (nor by onnx)")
    code = tensor.data_type
    if code == 0:
        raise tensor_error(tensor, "its data type is UNDEFINED")
    if tensor.data_location == EXTERNAL and not tensor.HasField("raw_data"):
        raise tensor_error(tensor, "its data is in an external file that was not read")
    try:
        dtype = np_dtype(code)
    except KeyError:
        raise tensor_error(tensor, "a data type jitnn cannot read") from None
    except ImportError:
        raise tensor_error(tensor, "reading this type needs the ml_dtypes package "
                           "(pip install ml_dtypes)") from None
    dims = tuple(int(d) for d in tensor.dims)
    count = math.prod(dims)
    field = DATA_TYPES[code][2]
    if code == 8:
        return np.asarray([s.decode("utf-8") for s in tensor.string_data]).astype(
            object).reshape(dims)
    if tensor.HasField("raw_data"):
        raw = tensor.raw_data
        if code in _FOUR_BIT:
            return _unpack_4bit(tensor, np.frombuffer(raw, np.uint8), count).view(
                dtype).reshape(dims)
        if len(raw) != count * dtype.itemsize:
            raise tensor_error(tensor, f"raw_data holds {len(raw)} bytes, its dims "
                               f"{count * dtype.itemsize}")
        array = np.frombuffer(raw, dtype.newbyteorder("<") if dtype.kind in "iufc" else dtype)
        return _native(array).reshape(dims)
    data = getattr(tensor, field)
    if field == "int32_data":
        narrow = np.asarray(data, np.int32).view(np.uint32)
        if code in _FOUR_BIT:
            return _unpack_4bit(tensor, narrow.astype(np.uint8), count).view(dtype).reshape(dims)
        stored = np.uint16 if dtype.itemsize == 2 else np.uint8 if dtype.itemsize == 1 else None
        if stored is not None:       # float16, bfloat16, (u)int16, float8, bool, (u)int8: bits
            values = narrow.astype(stored).view(dtype)
        else:
            values = narrow.view(np.int32)
        return _sized(tensor, values, count).reshape(dims)
    if code in (14, 15):
        values = np.asarray(data, np.float32 if code == 14 else np.float64).view(dtype)
    else:
        storage = {"float_data": np.float32, "int64_data": np.int64,
                   "double_data": np.float64, "uint64_data": np.uint64}[field]
        values = np.asarray(data, storage).astype(dtype)
    return _sized(tensor, values, count).reshape(dims)


def _native(array: np.ndarray) -> np.ndarray:
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _sized(tensor, values: np.ndarray, count: int) -> np.ndarray:
    if values.size != count:
        raise tensor_error(tensor, f"{values.size} values for {count} elements")
    return values


def _unpack_4bit(tensor, packed: np.ndarray, count: int) -> np.ndarray:
    """Two 4-bit values a byte, the first in the low nibble (onnx's _unpack_4bit)."""
    if packed.size != (count + 1) // 2:
        raise tensor_error(tensor, f"{packed.size} bytes of 4-bit values for {count} elements")
    out = np.empty(packed.size * 2, np.uint8)
    out[0::2] = packed & 0x0F
    out[1::2] = packed >> 4
    return out[:count]


def attribute_value(attribute) -> Any:
    """``onnx.helper.get_attribute_value``: the value of the attribute's type."""
    if attribute.ref_attr_name:
        raise JitnnValueError(f"onnx: attribute {attribute.name!r} refers to the function "
                              f"attribute {attribute.ref_attr_name!r} (outside a function)")
    kind = attribute.type
    if kind in _ATTRIBUTE_FIELDS:
        value = getattr(attribute, _ATTRIBUTE_FIELDS[kind])
        return list(value) if kind in _REPEATED_KINDS else value
    if kind == 0:
        return None
    raise JitnnValueError(f"onnx: attribute {attribute.name!r} has the unknown type {kind}")


#: AttributeProto.AttributeType -> its field
_ATTRIBUTE_FIELDS = {1: "f", 2: "i", 3: "s", 4: "t", 5: "g", 11: "sparse_tensor", 13: "tp",
                     6: "floats", 7: "ints", 8: "strings", 9: "tensors", 10: "graphs",
                     12: "sparse_tensors", 14: "type_protos"}
_REPEATED_KINDS = frozenset({6, 7, 8, 9, 10, 12, 14})

__all__ = ["AttributeProto", "DecodeError", "GraphProto", "ModelProto", "NodeProto",
           "TensorProto", "TypeProto", "ValueInfoProto", "attribute_value", "np_dtype",
           "to_array", "type_name"]
