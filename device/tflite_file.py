"""Bounds-checked reading of TFLite flatbuffers, without TensorFlow or the flatbuffers package.

`verify_model` walks the parts of TFLite's schema (schema.fbs) that hold offsets and checks
that every table, vector and string lies inside the file, before an interpreter that does
not verify (tflite-runtime segfaults on truncated files) sees it. `read_metadata_entries`
finds the model's metadata table; `output_quantization` reads an int8 policy's output step;
`custom_op_names` lists custom operators (an Edge TPU-compiled model has one);
`buffer_span` and `quantization_spans` say where numbers lie, for patching them in place.

One module past ~400 lines, on purpose: the verifier and the readers share the schema's
field indices and one bounds-checked reader, which would otherwise be private names imported
across modules.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from edge_rl.device.errors import PolicyFileError

# Field indices in TFLite's schema.fbs.
_MODEL_OPERATOR_CODES = 1
_MODEL_SUBGRAPHS = 2
_MODEL_BUFFERS = 4
_MODEL_METADATA = 6
_OPERATOR_CODE_DEPRECATED_BUILTIN = 0
_OPERATOR_CODE_CUSTOM = 1
_OPERATOR_CODE_BUILTIN = 3
_SUBGRAPH_TENSORS = 0
_SUBGRAPH_OUTPUTS = 2
_SUBGRAPH_OPERATORS = 3
_OPERATOR_OPCODE_INDEX = 0
_OPERATOR_INPUTS = 1
_OPERATOR_OUTPUTS = 2
_SUBGRAPH_INPUTS = 1
_TENSOR_SHAPE = 0
_TENSOR_TYPE = 1
_TENSOR_BUFFER = 2
_TENSOR_QUANTIZATION = 4
_TENSOR_SPARSITY = 6
_QUANTIZATION_SCALE = 2
_QUANTIZATION_ZERO_POINT = 3
_DEQUANTIZE = 6  # BuiltinOperator
_FULLY_CONNECTED = 9  # BuiltinOperator
_FLOAT32 = 0  # TensorType
_QUANTIZED_TYPES = (3, 7, 9)  # TensorType UINT8, INT16, INT8
# TensorType -> bytes per element, for the types whose stored size follows from the shape.
_TYPE_SIZES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8,
               15: 4, 16: 2}  # fmt: skip
_ZERO_POINT_RANGES = {3: (0, 255), 7: (-32768, 32767), 9: (-128, 127)}
_METADATA_NAME = 0
_METADATA_BUFFER = 1
_BUFFER_DATA = 0
_BUFFER_OFFSET = 1
_BUFFER_SIZE = 2

# Where TFLite's tables (schema.fbs) hold offsets, for `verify_model`. A field is a scalar
# (its struct format), "str" (a string), [x] (a vector of x: a scalar format, "str" or a table
# name), a table name, or ("union", index of the type field, {type: table name}). Fields not
# listed, union members not listed and tables not listed are checked to lie inside their
# table only.
_SCHEMA: dict[str, dict[int, Any]] = {
    "Model": {0: "I", 1: ["OperatorCode"], 2: ["SubGraph"], 3: "str", 4: ["Buffer"], 5: ["i"],
              6: ["Metadata"], 7: ["SignatureDef"]},
    "OperatorCode": {0: "b", 1: "str", 2: "i", 3: "i"},
    "SubGraph": {0: ["Tensor"], 1: ["i"], 2: ["i"], 3: ["Operator"], 4: "str"},
    "Tensor": {0: ["i"], 1: "b", 2: "I", 3: "str", 4: "QuantizationParameters", 5: "?",
               6: "SparsityParameters", 7: ["i"], 8: "?", 9: ["VariantSubType"]},
    "VariantSubType": {0: ["i"], 1: "b", 2: "?"},
    "QuantizationParameters": {0: ["f"], 1: ["f"], 2: ["f"], 3: ["q"], 4: "B",
                               5: ("union", 4, {1: "CustomQuantization"}), 6: "i"},
    "CustomQuantization": {0: ["B"]},
    "SparsityParameters": {0: ["i"], 1: ["i"], 2: ["DimensionMetadata"]},
    "DimensionMetadata": {0: "b", 1: "i", 2: "B", 3: ("union", 2, {1: "Int32Vector",
                          2: "Uint16Vector", 3: "Uint8Vector"}), 4: "B",
                          5: ("union", 4, {1: "Int32Vector", 2: "Uint16Vector",
                                           3: "Uint8Vector"})},
    "Int32Vector": {0: ["i"]},
    "Uint16Vector": {0: ["H"]},
    "Uint8Vector": {0: ["B"]},
    "Operator": {0: "I", 1: ["i"], 2: ["i"], 3: "B",
                 4: ("union", 3, {3: "ConcatEmbeddingsOptions", 17: "ReshapeOptions",
                                  30: "SqueezeOptions", 111: "VarHandleOptions",
                                  115: "BucketizeOptions"}),
                 5: ["B"], 6: "b", 7: ["?"], 8: ["i"], 9: "Q", 10: "Q", 11: "B",
                 12: ("union", 11, {})},
    "ConcatEmbeddingsOptions": {0: "i", 1: ["i"], 2: ["i"]},
    "ReshapeOptions": {0: ["i"]},
    "SqueezeOptions": {0: ["i"]},
    "VarHandleOptions": {0: "str", 1: "str"},
    "BucketizeOptions": {0: ["f"]},
    "Buffer": {0: ["B"], 1: "Q", 2: "Q"},
    "Metadata": {0: "str", 1: "I"},
    "SignatureDef": {0: ["TensorMap"], 1: ["TensorMap"], 2: "str", 4: "I"},
    "TensorMap": {0: "str", 1: "I"},
}  # fmt: skip


class _Reader:
    """Bounds-checked reads of flatbuffer tables, vectors and strings."""

    def __init__(self, buf: bytes):
        self.buf = buf

    def _unpack(self, fmt: str, pos: int) -> int:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.buf):
            raise PolicyFileError("the .tflite file is truncated or corrupt")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def root(self) -> int:
        return self._unpack("<I", 0)

    def field_pos(self, table: int, index: int) -> int:
        """Absolute position of a table's field, or 0 when the field is absent."""
        vtable = table - self._unpack("<i", table)
        vtable_size = self._unpack("<H", vtable)
        slot = 4 + 2 * index
        if slot >= vtable_size:
            return 0
        offset = self._unpack("<H", vtable + slot)
        return table + offset if offset else 0

    def vector(self, table: int, index: int) -> tuple[int, int]:
        """(position of the first element, length) of a vector field; (0, 0) when absent."""
        pos = self.field_pos(table, index)
        if not pos:
            return 0, 0
        start = pos + self._unpack("<I", pos)
        length = self._unpack("<I", start)
        return start + 4, length

    def table_at(self, element_pos: int) -> int:
        return element_pos + self._unpack("<I", element_pos)

    def element(self, start: int, i: int, fmt: str) -> int | float:
        """Element `i` of a vector of scalars that starts at `start`."""
        return self._unpack(fmt, start + struct.calcsize(fmt) * i)

    def subtable(self, table: int, index: int) -> int:
        """Position of a table-valued field, or 0 when the field is absent."""
        pos = self.field_pos(table, index)
        return pos + self._unpack("<I", pos) if pos else 0

    def string(self, table: int, index: int) -> str:
        start, length = self.vector(table, index)
        if start + length > len(self.buf):
            raise PolicyFileError("the .tflite file is truncated or corrupt")
        return self.buf[start : start + length].decode("utf-8", errors="replace")

    def scalar(self, table: int, index: int, fmt: str, default: int = 0) -> int:
        pos = self.field_pos(table, index)
        return self._unpack(fmt, pos) if pos else default


class _Verifier:
    """Checks that every table, vector and string the interpreter may read lies in the file."""

    def __init__(self, buf: bytes):
        self.reader = _Reader(buf)
        self.size = len(buf)

    def fail(self) -> None:
        raise PolicyFileError("the .tflite file is truncated or corrupt")

    def table(self, pos: int, name: str | None) -> None:
        read = self.reader._unpack
        vtable = pos - read("<i", pos)
        vtable_size = read("<H", vtable)
        table_size = read("<H", vtable + 2)
        if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > self.size:
            self.fail()
        if table_size < 4 or pos + table_size > self.size:
            self.fail()
        spec = _SCHEMA.get(name or "", {})
        for index in range((vtable_size - 4) // 2):
            offset = read("<H", vtable + 4 + 2 * index)
            if not offset:
                continue
            field = spec.get(index)
            if field is None:  # unknown to this runtime: it only has to lie in the table
                if offset >= table_size:
                    self.fail()
                continue
            scalar = isinstance(field, str) and field != "str" and field not in _SCHEMA
            width = struct.calcsize(field) if scalar else 4
            if offset + width > table_size:
                self.fail()
            if scalar:
                continue
            target = pos + offset + read("<I", pos + offset)
            if field == "str":
                self.string(target)
            elif isinstance(field, list):
                self.vector(target, field[0])
            elif isinstance(field, tuple):
                _, type_index, members = field
                type_offset = self._field_offset(vtable, vtable_size, type_index)
                kind = read("<B", pos + type_offset) if type_offset else 0
                self.table(target, members.get(kind))
            else:
                self.table(target, field)

    def _field_offset(self, vtable: int, vtable_size: int, index: int) -> int:
        slot = 4 + 2 * index
        return self.reader._unpack("<H", vtable + slot) if slot < vtable_size else 0

    def string(self, pos: int) -> None:
        length = self.reader._unpack("<I", pos)
        if pos + 4 + length + 1 > self.size:  # the string and its NUL terminator
            self.fail()

    def vector(self, pos: int, element: str) -> None:
        length = self.reader._unpack("<I", pos)
        is_scalar = element != "str" and element not in _SCHEMA
        width = struct.calcsize(element) if is_scalar else 4
        start = pos + 4
        if start + length * width > self.size:
            self.fail()
        if is_scalar:
            return
        for i in range(length):
            item = self.reader.table_at(start + 4 * i)
            if element == "str":
                self.string(item)
            else:
                self.table(item, element)


def verify_model(model: bytes) -> None:
    """Raise PolicyFileError unless the flatbuffer's tables, vectors and strings all lie in
    `model`, and buffers kept after the flatbuffer (models over 2 GB) do too.

    Some interpreters (tflite-runtime 2.14) do not verify models and crash on truncated files.
    """
    _check_identifier(model)
    verifier = _Verifier(model)
    reader = verifier.reader
    root = reader.root()
    verifier.table(root, "Model")
    buffers, n_buffers = reader.vector(root, _MODEL_BUFFERS)
    sizes = []
    for i in range(n_buffers):
        buffer = reader.table_at(buffers + 4 * i)
        _, data_len = reader.vector(buffer, _BUFFER_DATA)
        offset = reader.scalar(buffer, _BUFFER_OFFSET, "<Q")
        size = reader.scalar(buffer, _BUFFER_SIZE, "<Q")
        if offset > 1 and offset + size > len(model):
            verifier.fail()
        sizes.append(data_len or (size if offset > 1 else 0))
    _, n_codes = reader.vector(root, _MODEL_OPERATOR_CODES)
    graphs, n_graphs = reader.vector(root, _MODEL_SUBGRAPHS)
    for g in range(n_graphs):
        _check_subgraph(reader, reader.table_at(graphs + 4 * g), sizes, n_codes)


def _check_subgraph(reader: _Reader, graph: int, buffer_sizes: list[int], n_codes: int) -> None:
    """The values a corrupt file can hold that crash interpreters rather than fail cleanly:
    tensor, buffer and operator indices out of range, constant data of the wrong size,
    impossible quantization parameters."""

    def corrupt(what: str) -> PolicyFileError:
        return PolicyFileError(f"the .tflite file is corrupt ({what})")

    tensors, n_tensors = reader.vector(graph, _SUBGRAPH_TENSORS)
    for t in range(n_tensors):
        tensor = reader.table_at(tensors + 4 * t)
        kind = reader.scalar(tensor, _TENSOR_TYPE, "<b")
        shape, rank = reader.vector(tensor, _TENSOR_SHAPE)
        dims = [reader.element(shape, d, "<i") for d in range(rank)]
        if any(d < 0 for d in dims):
            raise corrupt("negative tensor dimension")
        buffer = reader.scalar(tensor, _TENSOR_BUFFER, "<I")
        if buffer >= max(len(buffer_sizes), 1):
            raise corrupt("tensor buffer out of range")
        stored = buffer_sizes[buffer] if buffer else 0
        dense = not reader.field_pos(tensor, _TENSOR_SPARSITY)
        if stored and dense and kind in _TYPE_SIZES:
            count = 1
            for d in dims:
                count *= d
            if count * _TYPE_SIZES[kind] != stored:
                raise corrupt("constant tensor data does not match its shape")
        quantization = reader.subtable(tensor, _TENSOR_QUANTIZATION)
        if quantization:
            scales, n_scales = reader.vector(quantization, _QUANTIZATION_SCALE)
            for i in range(n_scales):
                scale = reader.element(scales, i, "<f")
                if not (scale >= 0.0 and scale < float("inf")):
                    raise corrupt("invalid quantization scale")
            low, high = _ZERO_POINT_RANGES.get(kind, (-(2**63), 2**63 - 1))
            zero_points, n_zero_points = reader.vector(quantization, _QUANTIZATION_ZERO_POINT)
            for i in range(n_zero_points):
                if not low <= reader.element(zero_points, i, "<q") <= high:
                    raise corrupt("invalid quantization zero point")

    def check_indices(table: int, index: int, what: str) -> None:
        start, length = reader.vector(table, index)
        for i in range(length):
            if not -1 <= reader.element(start, i, "<i") < n_tensors:
                raise corrupt(f"{what} tensor index out of range")

    check_indices(graph, _SUBGRAPH_INPUTS, "input")
    check_indices(graph, _SUBGRAPH_OUTPUTS, "output")
    operators, n_operators = reader.vector(graph, _SUBGRAPH_OPERATORS)
    for o in range(n_operators):
        op = reader.table_at(operators + 4 * o)
        if reader.scalar(op, _OPERATOR_OPCODE_INDEX, "<I") >= n_codes:
            raise corrupt("operator code out of range")
        check_indices(op, _OPERATOR_INPUTS, "operator input")
        check_indices(op, _OPERATOR_OUTPUTS, "operator output")


def read_metadata_entries(model: bytes) -> dict[str, bytes]:
    """All entries of a .tflite file's metadata table, by name."""
    _check_identifier(model)
    reader = _Reader(model)
    root = reader.root()
    buffers_start, buffers_len = reader.vector(root, _MODEL_BUFFERS)
    meta_start, meta_len = reader.vector(root, _MODEL_METADATA)
    entries = {}
    for i in range(meta_len):
        meta = reader.table_at(meta_start + 4 * i)
        name = reader.string(meta, _METADATA_NAME)
        buffer_index = reader.scalar(meta, _METADATA_BUFFER, "<I")
        if buffer_index >= buffers_len:
            raise PolicyFileError("the .tflite file is corrupt (metadata buffer out of range)")
        buffer = reader.table_at(buffers_start + 4 * buffer_index)
        data_start, data_len = reader.vector(buffer, _BUFFER_DATA)
        if data_len:
            data = model[data_start : data_start + data_len]
        else:  # models over 2 GB keep buffers after the flatbuffer
            offset = reader.scalar(buffer, _BUFFER_OFFSET, "<Q")
            size = reader.scalar(buffer, _BUFFER_SIZE, "<Q")
            data = model[offset : offset + size] if offset > 1 else b""
        if len(data) != max(data_len, 0) and data_len:
            raise PolicyFileError("the .tflite file is truncated or corrupt")
        entries[name] = bytes(data)
    return entries


def output_quantization(model: bytes) -> tuple[float, int]:
    """(scale, zero_point) of the integer tensor that a final DEQUANTIZE turns into the output.

    For an int8 policy this is the output's quantization step; (0.0, 0) when the model's
    output is not dequantized from an int8/uint8/int16 tensor (fp32 and fp16 policies).
    """
    _check_identifier(model)
    reader = _Reader(model)
    root = reader.root()
    graphs, n_graphs = reader.vector(root, _MODEL_SUBGRAPHS)
    if not n_graphs:
        return 0.0, 0
    graph = reader.table_at(graphs)
    outputs, n_outputs = reader.vector(graph, _SUBGRAPH_OUTPUTS)
    if n_outputs != 1:
        return 0.0, 0
    output = reader.element(outputs, 0, "<i")
    tensors, n_tensors = reader.vector(graph, _SUBGRAPH_TENSORS)
    operators, n_operators = reader.vector(graph, _SUBGRAPH_OPERATORS)
    for i in reversed(range(n_operators)):
        op = reader.table_at(operators + 4 * i)
        op_outputs, n_op_outputs = reader.vector(op, _OPERATOR_OUTPUTS)
        if output not in (reader.element(op_outputs, j, "<i") for j in range(n_op_outputs)):
            continue
        builtin = _builtin_code(reader, root, op)
        op_inputs, n_op_inputs = reader.vector(op, _OPERATOR_INPUTS)
        if builtin != _DEQUANTIZE or n_op_inputs < 1:
            return 0.0, 0
        source = reader.element(op_inputs, 0, "<i")
        if not 0 <= source < n_tensors:
            raise PolicyFileError("the .tflite file is corrupt (tensor index out of range)")
        tensor = reader.table_at(tensors + 4 * source)
        quantization = reader.subtable(tensor, _TENSOR_QUANTIZATION)
        if reader.scalar(tensor, _TENSOR_TYPE, "<b") not in _QUANTIZED_TYPES or not quantization:
            return 0.0, 0
        scales, n_scales = reader.vector(quantization, _QUANTIZATION_SCALE)
        zero_points, n_zero_points = reader.vector(quantization, _QUANTIZATION_ZERO_POINT)
        if n_scales != 1:  # absent, or per-channel: no single output step
            return 0.0, 0
        zero_point = reader.element(zero_points, 0, "<q") if n_zero_points else 0
        return float(reader.element(scales, 0, "<f")), int(zero_point)
    return 0.0, 0


def output_step(model: bytes) -> float:
    """How far one int8 rounding step moves an output: the output's quantization scale when a
    final DEQUANTIZE makes it. For a float output stage (a float32 last FULLY_CONNECTED fed by
    the DEQUANTIZE of an int8 activation of scale s; edge_rl.converters.flatbuffer), rounding
    each of the activation's units moves output i by s * ||W_i|| in root mean square, as one
    output step does an int8 output: the largest of those. 0.0 for fp32 and fp16 policies."""
    scale, _ = output_quantization(model)
    if scale:
        return scale
    reader = _Reader(model)
    root = reader.root()
    graphs, n_graphs = reader.vector(root, _MODEL_SUBGRAPHS)
    if not n_graphs:
        return 0.0
    graph = reader.table_at(graphs)
    tensors, n_tensors = reader.vector(graph, _SUBGRAPH_TENSORS)
    operators, n_operators = reader.vector(graph, _SUBGRAPH_OPERATORS)
    ops = [reader.table_at(operators + 4 * i) for i in range(n_operators)]

    def tensor(index: int) -> int:
        if not 0 <= index < n_tensors:
            raise PolicyFileError("the .tflite file is corrupt (tensor index out of range)")
        return reader.table_at(tensors + 4 * index)

    def indices(op: int, field: int) -> list[int]:
        start, n = reader.vector(op, field)
        return [reader.element(start, j, "<i") for j in range(n)]

    last = [op for op in ops if _builtin_code(reader, root, op) == _FULLY_CONNECTED]
    if not last or len(indices(last[-1], _OPERATOR_INPUTS)) < 2:
        return 0.0
    hidden, weights = indices(last[-1], _OPERATOR_INPUTS)[:2]
    feeding = [op for op in ops if hidden in indices(op, _OPERATOR_OUTPUTS)]
    if len(feeding) != 1 or _builtin_code(reader, root, feeding[0]) != _DEQUANTIZE:
        return 0.0
    quantized = tensor(indices(feeding[0], _OPERATOR_INPUTS)[0])
    quantization = reader.subtable(quantized, _TENSOR_QUANTIZATION)
    scales, n_scales = reader.vector(quantization, _QUANTIZATION_SCALE) if quantization \
        else (0, 0)
    weight = tensor(weights)
    if n_scales != 1 or reader.scalar(weight, _TENSOR_TYPE, "<b") != _FLOAT32:
        return 0.0
    shape_start, rank = reader.vector(weight, _TENSOR_SHAPE)
    shape = [reader.element(shape_start, j, "<i") for j in range(rank)]
    start, size = buffer_span(model, reader.scalar(weight, _TENSOR_BUFFER, "<I"))
    if rank != 2 or size != 4 * shape[0] * shape[1]:
        return 0.0
    rows = np.frombuffer(model, np.float32, shape[0] * shape[1], start).reshape(shape)
    norm = float(np.sqrt((rows.astype(np.float64) ** 2).sum(axis=1)).max())
    return float(reader.element(scales, 0, "<f")) * norm


def _builtin_code(reader: _Reader, root: int, op: int) -> int:
    codes, n_codes = reader.vector(root, _MODEL_OPERATOR_CODES)
    code_index = reader.scalar(op, _OPERATOR_OPCODE_INDEX, "<I")
    if code_index >= n_codes:
        raise PolicyFileError("the .tflite file is corrupt (operator code out of range)")
    code = reader.table_at(codes + 4 * code_index)
    return max(reader.scalar(code, _OPERATOR_CODE_DEPRECATED_BUILTIN, "<b"),
               reader.scalar(code, _OPERATOR_CODE_BUILTIN, "<i"))


def custom_op_names(model: bytes) -> list[str]:
    """The custom codes of the model's custom operators (e.g. "edgetpu-custom-op", which
    edgetpu_compiler puts in place of the ops it maps to the Edge TPU)."""
    _check_identifier(model)
    reader = _Reader(model)
    codes, n_codes = reader.vector(reader.root(), _MODEL_OPERATOR_CODES)
    names = []
    for i in range(n_codes):
        code = reader.table_at(codes + 4 * i)
        if reader.field_pos(code, _OPERATOR_CODE_CUSTOM):
            names.append(reader.string(code, _OPERATOR_CODE_CUSTOM))
    return names


def _check_identifier(model: bytes) -> None:
    if len(model) < 8 or model[4:8] != b"TFL3":
        raise PolicyFileError("not a TFLite model (missing the TFL3 identifier)")


def buffer_span(model: bytes, buffer_index: int) -> tuple[int, int]:
    """(start, length in bytes) of a buffer's data inside `model`; (0, 0) when it has none.

    For writing new values of the same size in place (edge_rl.converters.patch).
    """
    reader = _Reader(model)
    buffers, n_buffers = reader.vector(reader.root(), _MODEL_BUFFERS)
    if not 0 <= buffer_index < n_buffers:
        raise PolicyFileError(f"buffer {buffer_index} is out of range")
    return reader.vector(reader.table_at(buffers + 4 * buffer_index), _BUFFER_DATA)


def quantization_spans(model: bytes, tensor_index: int) -> tuple[int, int, int, int]:
    """(scale start, scale count, zero-point start, zero-point count) of a main-graph tensor.

    Scales are float32 and zero points int64; counts are 0 when a vector is absent.
    """
    reader = _Reader(model)
    graphs, n_graphs = reader.vector(reader.root(), _MODEL_SUBGRAPHS)
    if not n_graphs:
        raise PolicyFileError("the model has no subgraph")
    tensors, n_tensors = reader.vector(reader.table_at(graphs), _SUBGRAPH_TENSORS)
    if not 0 <= tensor_index < n_tensors:
        raise PolicyFileError(f"tensor {tensor_index} is out of range")
    quantization = reader.subtable(reader.table_at(tensors + 4 * tensor_index),
                                   _TENSOR_QUANTIZATION)
    if not quantization:
        return 0, 0, 0, 0
    scales = reader.vector(quantization, _QUANTIZATION_SCALE)
    zero_points = reader.vector(quantization, _QUANTIZATION_ZERO_POINT)
    return (*scales, *zero_points)
