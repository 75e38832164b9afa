"""Reading and editing converted TFLite flatbuffers (TensorFlow's schema object API).

Three edits make an int8 policy file act as its float network does, for every TFLite runtime:

* `float_input_layer` computes the first Dense layer in float32 from the raw observation and
  quantizes its output: int8 from the first hidden activation on. An int8 input holds each
  feature on one grid of 256 levels (with per-feature scales kept in metadata only, a runtime
  that fed raw observations acted differently); a steep policy moves its action by several
  percent of its range within one level of an angle (a sparse TD3 Pendulum actor: 2.8% mean
  action error from the input's quantization alone). The layer is features x units: tiny.
* `float_output_stage` computes the last Dense layer, and the ops after it, in float32 from
  the dequantized last hidden activation: the file's outputs (Q-values, actions in the env's
  units) carry no int8 rounding of their own, and no range calibrated for them.
* `integer_input` makes a network that takes uint8 frames (or 0/1 planes) read them without
  a CAST, which TFLite Micro and the Edge TPU lack; at int8 it gives the input the range its
  observation kind fixes, not the calibration data's: each value the input can hold gets an
  int8 level of its own, and a frame brighter than any calibration frame is not clipped.

edge_rl.converters.ranges gives the int8 ranges that mathematics fixes (after a TANH).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils

_OP = schema.BuiltinOperator
TYPE_NAMES = {
    value: name.lower()
    for name, value in vars(schema.TensorType).items()
    if not name.startswith("_") and isinstance(value, int)
}

def read_model(model_bytes: bytes) -> Any:
    """The flatbuffer as TensorFlow's object API (schema_py_generated.ModelT)."""
    read = getattr(flatbuffer_utils, "read_model_from_bytearray", None) or (
        flatbuffer_utils.convert_bytearray_to_object
    )
    model = read(bytearray(model_bytes))
    if any(b.offset and b.offset > 1 for b in model.buffers or []):
        raise ValueError("models with buffers stored outside the flatbuffer are not supported")
    return model


def write_model(model: Any) -> bytes:
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def has_data(model: Any, tensor: Any) -> bool:
    if not tensor.buffer or tensor.buffer >= len(model.buffers):
        return False
    data = model.buffers[tensor.buffer].data
    return data is not None and len(data) > 0


def builtin(model: Any, op: Any) -> int:
    code = model.operatorCodes[op.opcodeIndex]
    return max(code.builtinCode, code.deprecatedBuiltinCode)


def text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value or ""


def asymmetric_int8(low: float, high: float) -> tuple[float, int]:
    """TFLite's int8 activation parameters for values in [low, high] (widened to hold 0)."""
    low, high = min(low, 0.0), max(high, 0.0)
    if high == low:
        return 1.0, -128
    scale = (high - low) / 255.0
    zero_point = int(np.clip(round_half_away(-128 - low / scale), -128, 127))
    return float(np.float32(scale)), zero_point


def round_half_away(x: Any) -> Any:
    """Round half away from zero, as TFLite's quantizer does (numpy rounds half to even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


# -- the float input layer ---------------------------------------------------------------------

def float_input_layer(model_bytes: bytes, kernel: np.ndarray, bias: np.ndarray) -> bytes:
    """`model_bytes` (float32 input, QUANTIZE, then an int8 FULLY_CONNECTED) with that first
    layer computed in float32 from the raw observation, its output quantized after it:
    observation -> FULLY_CONNECTED (float32 `kernel` [features, units] and `bias`) ->
    QUANTIZE -> the rest, unchanged. The first layer's int8 output range is kept."""
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    observation = int(graph.inputs[0])
    ops = graph.operators
    if len(ops) < 2 or builtin(model, ops[0]) != _OP.QUANTIZE \
            or int(ops[0].inputs[0]) != observation \
            or builtin(model, ops[1]) != _OP.FULLY_CONNECTED \
            or int(ops[1].inputs[0]) != int(ops[0].outputs[0]):
        raise ValueError("the network does not start with QUANTIZE and FULLY_CONNECTED")
    quantize, first = ops[0], ops[1]
    hidden = int(first.outputs[0])
    float_hidden, weights, biases = _float_layer(model, hidden, "input_layer", kernel, bias)
    first.inputs = np.array([observation, weights, biases], np.int32)
    first.outputs = np.array([float_hidden], np.int32)
    quantize.inputs = np.array([float_hidden], np.int32)
    quantize.outputs = np.array([hidden], np.int32)
    graph.operators = [first, quantize, *ops[2:]]
    _drop_unused_tensors(model)  # the int8 kernel and bias it replaced
    return write_model(model)


def narrow_outputs_first(model_bytes: bytes) -> bytes:
    """`model_bytes` with its graph outputs ordered by their last dimension, narrowest first
    (the converter orders a Keras model's outputs as it likes; a SAC policy's greedy action,
    [batch, dim], must be output 0, before its [batch, 2 * dim] mean and log-std)."""
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    order = sorted((int(i) for i in graph.outputs), key=lambda i: int(graph.tensors[i].shape[-1]))
    if order == [int(i) for i in graph.outputs]:
        return model_bytes
    graph.outputs = np.array(order, np.int32)
    return write_model(model)


# -- the float output stage ---------------------------------------------------------------------

def float_output_stage(model_bytes: bytes, kernel: np.ndarray, bias: np.ndarray) -> bytes:
    """`model_bytes` with its last FULLY_CONNECTED layer, and every op after it, computed in
    float32: ... -> int8 hidden activation -> DEQUANTIZE -> FULLY_CONNECTED (float32 `kernel`
    [units, outputs] and `bias`) -> the ops after it in float32 -> the output. The final
    DEQUANTIZE (and any QUANTIZE between) goes; their constant int8 operands become float32."""
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    ops = list(graph.operators)
    fc_at = [i for i, op in enumerate(ops) if builtin(model, op) == _OP.FULLY_CONNECTED]
    if not fc_at or not is_int8(graph, int(ops[fc_at[-1]].inputs[0])):
        raise ValueError("the network does not end with an int8 FULLY_CONNECTED layer")
    last_at = fc_at[-1]
    last = ops[last_at]
    units = graph.tensors[int(last.inputs[1])].shape
    if tuple(int(d) for d in units) != tuple(np.asarray(kernel).T.shape):
        raise ValueError(f"a kernel of shape {np.asarray(kernel).shape} for a last layer of "
                         f"shape {tuple(units)[::-1]}")
    hidden = int(last.inputs[0])
    float_hidden, weights, biases = _float_layer(model, hidden, "output_layer", kernel, bias)
    dequantize = schema.OperatorT()
    dequantize.opcodeIndex = _opcode_index(model, _OP.DEQUANTIZE)
    dequantize.inputs = np.array([hidden], np.int32)
    dequantize.outputs = np.array([float_hidden], np.int32)
    last.inputs = np.array([float_hidden, weights, biases], np.int32)
    kept = [*ops[:last_at], dequantize, last]
    alias: dict[int, int] = {}  # a dropped (DE)QUANTIZE's input -> its output
    for op in ops[last_at:]:
        for index in op.outputs:
            _make_float(graph.tensors[int(index)])
        if op is last:
            continue
        if builtin(model, op) in (_OP.QUANTIZE, _OP.DEQUANTIZE):
            alias[int(op.inputs[0])] = int(op.outputs[0])
            continue
        op.inputs = np.array([_float_operand(model, int(i)) for i in op.inputs], np.int32)
        kept.append(op)
    for op in kept:  # whoever wrote or read a dropped op's input now uses its output
        op.inputs = np.array([alias.get(int(i), int(i)) for i in op.inputs], np.int32)
        op.outputs = np.array([alias.get(int(i), int(i)) for i in op.outputs], np.int32)
    graph.operators = kept
    _drop_unused_tensors(model)  # the int8 kernel and bias it replaced, and int8 constants
    return write_model(model)


def _float_layer(model: Any, hidden: int, name: str, kernel: np.ndarray, bias: np.ndarray
                 ) -> tuple[int, int, int]:
    """New tensors for a float32 Dense layer beside int8 activation `hidden`: (a float32
    activation of its shape, the kernel [features, units] stored transposed, the bias)."""
    graph = model.subgraphs[0]
    graph.tensors += [
        _activation_like(graph.tensors[hidden], f"_{name}".encode()),
        _constant(model, f"{name}/kernel", np.asarray(kernel, np.float32).T),
        _constant(model, f"{name}/bias", np.asarray(bias, np.float32)),
    ]
    n = len(graph.tensors)
    return n - 3, n - 2, n - 1


def _activation_like(tensor: Any, suffix: bytes) -> Any:
    """A new float32 activation tensor of `tensor`'s shape."""
    new = schema.TensorT()
    new.name = text(tensor.name).encode() + suffix
    new.type = schema.TensorType.FLOAT32
    new.shape = np.array(tensor.shape, np.int32)
    if tensor.shapeSignature is not None:
        new.shapeSignature = np.array(tensor.shapeSignature, np.int32)
    new.buffer = 0
    return new


def _make_float(tensor: Any) -> None:
    if tensor.type in (schema.TensorType.INT8, schema.TensorType.FLOAT32):
        tensor.type = schema.TensorType.FLOAT32
        tensor.quantization = None


def _float_operand(model: Any, index: int) -> int:
    """Op input `index` as a float op reads it: a stored int8 constant becomes a float32 one
    (its dequantized values); activations were made float already; others (axes) stay."""
    if index < 0:
        return index
    graph = model.subgraphs[0]
    tensor = graph.tensors[index]
    if tensor.type != schema.TensorType.INT8:
        return index
    values = constant_values(model, index)
    if values is None:
        raise ValueError(f"int8 tensor {text(tensor.name)!r} feeds the float output stage")
    shape = tuple(int(d) for d in tensor.shape)
    graph.tensors.append(_constant(model, text(tensor.name) + "_float",
                                   values.reshape(shape).astype(np.float32)))
    return len(graph.tensors) - 1


def _opcode_index(model: Any, code: int) -> int:
    for i, opcode in enumerate(model.operatorCodes):
        if max(opcode.builtinCode, opcode.deprecatedBuiltinCode) == code:
            return i
    opcode = schema.OperatorCodeT()
    opcode.builtinCode = code
    opcode.deprecatedBuiltinCode = min(code, 127)
    opcode.version = 1
    model.operatorCodes.append(opcode)
    return len(model.operatorCodes) - 1


def _constant(model: Any, name: str, values: np.ndarray) -> Any:
    """A new float32 tensor holding `values`, its data in a new buffer."""
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(values, np.float32).tobytes(),
                                np.uint8).copy()
    model.buffers.append(buffer)
    tensor = schema.TensorT()
    tensor.name, tensor.type = name.encode(), schema.TensorType.FLOAT32
    tensor.shape = np.array(values.shape, np.int32)
    tensor.buffer = len(model.buffers) - 1
    return tensor


# -- the exact input range of bounded observations ----------------------------------------------

# Ops reading the quantized input that take its scale as it is (they requantize their outputs
# anyway), and those whose int32 bias is stored at the input's scale times the weights'.
_TAKE_ANY_INPUT_SCALE = (_OP.ADD, _OP.SUB, _OP.MUL)
_BIASED = (_OP.CONV_2D, _OP.DEPTHWISE_CONV_2D, _OP.FULLY_CONNECTED)


def integer_input(model_bytes: bytes, value_max: float) -> bytes:
    """`model_bytes` (an integer input, RESHAPEs, a CAST to float32) with the CAST replaced: the
    input is marked scale 1, zero point 0 (a raw value is its real value), and

    - in an int8 file (CAST then QUANTIZE) the QUANTIZE reads the integer input itself and
      writes int8 over [0, value_max], not the calibrated range; the convolutions or Dense
      layers reading it get their int32 biases requantized to match;
    - in a float file a DEQUANTIZE takes the CAST's place.

    Without the CAST a file runs in TFLite Micro (whose CAST takes no uint8) and on the Edge
    TPU (whose compiler leaves the graph on the CPU from the first op it cannot map)."""
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    consumers = tensor_readers(graph)

    def only_reader(index: int) -> Any:
        readers = consumers.get(index, [])
        if len(readers) != 1:
            raise ValueError(f"the network's input path forks at tensor {index}: "
                             "expected RESHAPE, CAST, QUANTIZE")
        return readers[0]

    raw = [int(graph.inputs[0])]  # the integer tensors before the CAST
    op = only_reader(raw[-1])
    while builtin(model, op) == _OP.RESHAPE:
        raw.append(int(op.outputs[0]))
        op = only_reader(raw[-1])
    cast = op
    if builtin(model, cast) != _OP.CAST:
        raise ValueError("the network's input is not cast to float32")
    for index in raw:
        graph.tensors[index].quantization = _quantization(1.0, 0)
    quantize = consumers.get(int(cast.outputs[0]), [None])[0]
    if quantize is None or builtin(model, quantize) != _OP.QUANTIZE:  # a float network
        cast.opcodeIndex = _opcode_index(model, _OP.DEQUANTIZE)
        cast.builtinOptionsType, cast.builtinOptions = 0, None
        return write_model(model)
    quantized = int(quantize.outputs[0])
    q = graph.tensors[quantized].quantization
    old_scale = float(q.scale[0])
    new_scale, zero_point = asymmetric_int8(0.0, float(value_max))
    for reader in consumers.get(quantized, []):
        code = builtin(model, reader)
        if code in _BIASED and len(reader.inputs) > 2 and int(reader.inputs[2]) >= 0:
            _rescale_bias(model, int(reader.inputs[2]), old_scale / new_scale)
        elif code not in _BIASED + _TAKE_ANY_INPUT_SCALE:
            raise ValueError(f"operator {code} reads the quantized input at its own scale")
    set_per_tensor(q, new_scale, zero_point)
    quantize.inputs = np.array([raw[-1]], np.int32)
    graph.operators = [op for op in graph.operators if op is not cast]
    _drop_unused_tensors(model)  # the CAST's float output
    return write_model(model)


def tensor_readers(graph: Any) -> dict[int, list]:
    """Tensor index -> the ops that read it, in execution order."""
    found: dict[int, list] = {}
    for op in graph.operators:
        for index in op.inputs:
            found.setdefault(int(index), []).append(op)
    return found


def _drop_unused_tensors(model: Any) -> None:
    """Remove tensors no op and no graph boundary names, renumbering the references, and empty
    the buffers only they held (the int8 weights a float layer replaced)."""
    graph = model.subgraphs[0]
    used = {int(i) for op in graph.operators for i in (*op.inputs, *op.outputs) if i >= 0}
    used |= {int(i) for i in (*graph.inputs, *graph.outputs)}
    kept = sorted(used)
    new_index = {old: new for new, old in enumerate(kept)}
    kept_buffers = {int(graph.tensors[i].buffer) for i in kept}
    for i, tensor in enumerate(graph.tensors):
        if i not in used and tensor.buffer and int(tensor.buffer) not in kept_buffers:
            model.buffers[int(tensor.buffer)].data = None

    def renumber(indices: Any) -> Any:
        return np.array([new_index[int(i)] if i >= 0 else -1 for i in indices], np.int32)

    graph.tensors = [graph.tensors[i] for i in kept]
    for op in graph.operators:
        op.inputs, op.outputs = renumber(op.inputs), renumber(op.outputs)
    graph.inputs, graph.outputs = renumber(graph.inputs), renumber(graph.outputs)


def _quantization(scale: float, zero_point: int) -> Any:
    q = schema.QuantizationParametersT()
    set_per_tensor(q, scale, zero_point)
    return q


def set_per_tensor(quantization: Any, scale: float, zero_point: int) -> None:
    """One (scale, zero point) for the whole tensor, in place; any recorded range dropped."""
    quantization.scale = np.array([scale], np.float32)
    quantization.zeroPoint = np.array([zero_point], np.int64)
    quantization.min = quantization.max = None


def _rescale_bias(model: Any, index: int, factor: float) -> None:
    """An int32 bias stored at (input scale x weight scale) moved to an input scale `factor`
    times smaller: values multiplied by `factor`, scales divided by it."""
    tensor = model.subgraphs[0].tensors[index]
    if tensor.type != schema.TensorType.INT32 or not has_data(model, tensor):
        raise ValueError(f"bias {text(tensor.name)!r} is not a stored int32 tensor")
    buffer = model.buffers[tensor.buffer]
    values = np.frombuffer(np.asarray(buffer.data, np.uint8).tobytes(), np.int32)
    rescaled = round_half_away(values.astype(np.float64) * factor)
    if np.abs(rescaled).max(initial=0) >= 2**31:
        raise ValueError(f"bias {text(tensor.name)!r} does not fit int32 at the input's range")
    buffer.data = np.frombuffer(rescaled.astype(np.int32).tobytes(), np.uint8).copy()
    tensor.quantization.scale = (np.asarray(tensor.quantization.scale, np.float64)
                                 / factor).astype(np.float32)


def constant_values(model: Any, index: int) -> np.ndarray | None:
    """A stored tensor's values as the kernels see them (dequantized), or None if computed."""
    tensor = model.subgraphs[0].tensors[index]
    if not has_data(model, tensor):
        return None
    raw = np.asarray(model.buffers[tensor.buffer].data, np.uint8).tobytes()
    dtypes = {schema.TensorType.FLOAT32: np.float32, schema.TensorType.INT8: np.int8,
              schema.TensorType.INT32: np.int32, schema.TensorType.FLOAT16: np.float16}
    if tensor.type not in dtypes:
        return None
    values = np.frombuffer(raw, dtypes[tensor.type]).astype(np.float64)
    q = tensor.quantization
    if tensor.type in (schema.TensorType.INT8, schema.TensorType.INT32) and q is not None \
            and q.scale is not None and len(q.scale):
        values = (values - float(q.zeroPoint[0])) * float(q.scale[0])
    return values


def is_int8(graph: Any, index: int) -> bool:
    return graph.tensors[index].type == schema.TensorType.INT8
