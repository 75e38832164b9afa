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
* `bounded_ranges` gives the int8 ranges that mathematics fixes, whatever the calibration
  data: a TANH's input spans [-TANH_INPUT_LIMIT, TANH_INPUT_LIMIT] (beyond it tanh is within
  half an int8 output step of +-1), and each elementwise op that only adds, subtracts or
  multiplies a constant after a TANH (the scaling to the action bounds) spans the image of
  [-1, 1]. Calibrated from data instead, rows on which the policy only ever pushed one way
  leave a file that can only act one way. `set_ranges` writes them into a file.
"""

from __future__ import annotations

import math
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
# Ops whose int8 output has a range of its own (not their input's)
_REQUANTIZING = (_OP.FULLY_CONNECTED, _OP.ADD, _OP.SUB, _OP.MUL)
# tanh(x) is within half of the int8 output step (1/128) of +-1 beyond this input
TANH_INPUT_LIMIT = math.atanh(1.0 - 1.0 / 256.0)


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
    if not fc_at or not _is_int8(graph, int(ops[fc_at[-1]].inputs[0])):
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


# -- ranges that mathematics fixes ---------------------------------------------------------------

def bounded_ranges(model: Any) -> dict[int, tuple[float, float]]:
    """Int8 tensor index -> (low, high) for the activations whose range follows from a TANH:
    its input, and the chain of elementwise ops with a constant operand after it."""
    graph = model.subgraphs[0]
    consumers: dict[int, list] = {}
    producers = {int(out): op for op in graph.operators for out in op.outputs}
    for op in graph.operators:
        for index in op.inputs:
            consumers.setdefault(int(index), []).append(op)
    ranges: dict[int, tuple[float, float]] = {}
    for op in graph.operators:
        if builtin(model, op) != _OP.TANH or not _is_int8(graph, int(op.outputs[0])):
            continue
        pre = int(op.inputs[0])
        # only an op that requantizes its output may take another range: a slice or a
        # reshape before the TANH (SAC's head) keeps its input's, or kernels refuse it
        if len(consumers.get(pre, [])) == 1 and pre in producers \
                and builtin(model, producers[pre]) in _REQUANTIZING:
            ranges[pre] = (-TANH_INPUT_LIMIT, TANH_INPUT_LIMIT)
        tensor, low, high = int(op.outputs[0]), -1.0, 1.0
        while len(consumers.get(tensor, [])) == 1:
            step = _affine_image(model, consumers[tensor][0], tensor, low, high)
            if step is None:
                break
            tensor, low, high = step
            ranges[tensor] = (low, high)
    return ranges


def _affine_image(model: Any, op: Any, tensor: int, low: float, high: float
                  ) -> tuple[int, float, float] | None:
    """(output, low, high) of ADD/SUB/MUL of `tensor` in [low, high] with a constant; None
    for any other op."""
    graph = model.subgraphs[0]
    code = builtin(model, op)
    inputs = [int(i) for i in op.inputs]
    if code not in (_OP.ADD, _OP.SUB, _OP.MUL) or len(inputs) != 2 or tensor not in inputs:
        return None
    out = int(op.outputs[0])
    if not _is_int8(graph, out) or (getattr(op.builtinOptions, "fusedActivationFunction", 0)):
        return None
    other = inputs[1] if inputs[0] == tensor else inputs[0]
    values = constant_values(model, other)
    if values is None or inputs[0] == inputs[1]:
        return None
    c_low, c_high = float(values.min()), float(values.max())
    if code == _OP.ADD:
        return out, low + c_low, high + c_high
    if code == _OP.SUB:
        if inputs[0] == tensor:
            return out, low - c_high, high - c_low
        return out, c_low - high, c_high - low
    products = [a * b for a in (low, high) for b in (c_low, c_high)]
    return out, min(products), max(products)


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


def _is_int8(graph: Any, index: int) -> bool:
    return graph.tensors[index].type == schema.TensorType.INT8


def set_ranges(model_bytes: bytes, ranges: dict[int, tuple[float, float]]) -> bytes:
    """`model_bytes` with each listed int8 activation given the (scale, zero point) of its
    range. Only safe for tensors that no FULLY_CONNECTED or CONV reads: their biases are stored
    at their input's scale (`bounded_ranges` gives only such tensors)."""
    if not ranges:
        return model_bytes
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    for index, (low, high) in ranges.items():
        scale, zero_point = asymmetric_int8(low, high)
        quantization = graph.tensors[index].quantization
        quantization.scale = np.array([scale], np.float32)
        quantization.zeroPoint = np.array([zero_point], np.int64)
        quantization.min = quantization.max = None
    return write_model(model)
