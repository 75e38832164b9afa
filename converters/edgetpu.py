"""Does a TFLite policy file meet the Coral Edge TPU's model requirements? Read the flatbuffer.

    problems = edgetpu_problems(flat)     # [] when it meets Coral's published requirements
    check_edgetpu(flat)                   # the same, raised as one ValueError

`convert(model, "edgetpu", ...)` (edge_rl.converters.tflite) calls `check_edgetpu` on what it
makes. The rules are Coral's "TensorFlow models on the Edge TPU" page
(https://coral.ai/docs/edgetpu/models-intro/, "Model requirements" and "Supported operations"):
  * tensors are quantized to 8 bits (int8 or uint8): no float tensor anywhere, so no float
    QUANTIZE/DEQUANTIZE at the graph's boundary either; the int32 biases of quantized ops and
    int32 constants (axes, shapes) are fine;
  * tensor sizes are constant at compile time (no -1 in a shape signature);
  * activations have 1, 2 or 3 dimensions; one with more may have sizes above 1 only in its 3
    innermost dimensions (a convolution's 4-D filters are weights, not activations);
  * only the operations in Coral's table, each from the Edge TPU runtime version it names (a
    model compiled for runtime 14, the version libedgetpu 16.0 reports, may use all of them).
Quantization per axis (one scale per output channel) is accepted for convolutions, as the
converter makes them and the compiler maps them, but not for FULLY_CONNECTED weights: TFLite
gained per-channel fully-connected kernels years after the last edgetpu_compiler (16.0).

An op the compiler cannot map does not make compilation fail: it and everything after it run
on the CPU. So these are refusals at export time, not guesses about the compiler's output.
`cpu_fallback_notes` lists op limitations from the same table that the compiler may hit
(such as MEAN over a last axis whose size is not a multiple of 4): worth knowing, not errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorflow.lite.python import schema_py_generated as schema

from edge_rl.converters.flatbuffer import TYPE_NAMES, builtin, has_data, read_model, text
from edge_rl.device.runtime import EDGETPU_CUSTOM_OP

_OP = schema.BuiltinOperator
_TYPE = schema.TensorType
OP_NAMES = {value: name for name, value in vars(_OP).items()
            if not name.startswith("_") and isinstance(value, int)}

# The Edge TPU runtime version libedgetpu 16.0 (the last release) reports.
EDGETPU_RUNTIME_VERSION = 14
# Coral's supported operations -> the lowest Edge TPU runtime version that maps them (0: all).
# The op list is the page's; the versions could not be re-read from it (see docs/coral.md).
SUPPORTED_OPS = {
    _OP.ADD: 0, _OP.AVERAGE_POOL_2D: 0, _OP.CONCATENATION: 0, _OP.CONV_2D: 0,
    _OP.DEPTHWISE_CONV_2D: 0, _OP.EXPAND_DIMS: 13, _OP.FULLY_CONNECTED: 0,
    _OP.L2_NORMALIZATION: 0, _OP.LOGISTIC: 0, _OP.UNIDIRECTIONAL_SEQUENCE_LSTM: 14,
    _OP.MAXIMUM: 0, _OP.MAX_POOL_2D: 0, _OP.MEAN: 0, _OP.MINIMUM: 0, _OP.MUL: 0,
    _OP.PACK: 13, _OP.PAD: 0, _OP.PRELU: 13, _OP.QUANTIZE: 13, _OP.REDUCE_MAX: 14,
    _OP.REDUCE_MIN: 14, _OP.RELU: 0, _OP.RELU6: 0, _OP.RELU_N1_TO_1: 0, _OP.RESHAPE: 0,
    _OP.RESIZE_BILINEAR: 0, _OP.RESIZE_NEAREST_NEIGHBOR: 0, _OP.RSQRT: 14, _OP.SLICE: 0,
    _OP.SOFTMAX: 0, _OP.SPACE_TO_DEPTH: 0, _OP.SPLIT: 0, _OP.SQUEEZE: 0,
    _OP.STRIDED_SLICE: 0, _OP.SUB: 0, _OP.SUM: 13, _OP.SQUARED_DIFFERENCE: 14, _OP.TANH: 0,
    _OP.TRANSPOSE: 14, _OP.TRANSPOSE_CONV: 13,
}  # fmt: skip
_EIGHT_BIT = (_TYPE.INT8, _TYPE.UINT8)
_FLOAT = (_TYPE.FLOAT32, _TYPE.FLOAT16, _TYPE.FLOAT64)
_NOT_EIGHT_BIT_QUANTIZED = (_TYPE.INT16, _TYPE.INT4)  # 16x8 activations, 4-bit weights
_PER_AXIS_OK = {_OP.CONV_2D, _OP.DEPTHWISE_CONV_2D, _OP.TRANSPOSE_CONV}
MAX_LISTED = 3  # problems named in check_edgetpu's one-line message


def edgetpu_problems(model_bytes: bytes,
                     runtime_version: int = EDGETPU_RUNTIME_VERSION) -> list[str]:
    """Every way the model's main graph breaks Coral's requirements, one line each; [] if none.

    `runtime_version`: the oldest Edge TPU runtime the model must run on (edgetpu_compiler -m).
    """
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    problems = []
    if len(model.subgraphs) > 1:
        problems.append(f"the model has {len(model.subgraphs)} subgraphs; the Edge TPU "
                        "compiler maps one")
    producers = {int(out): i for i, op in enumerate(graph.operators or [])
                 for out in (op.outputs if op.outputs is not None else [])}

    # operators: in Coral's table, at a runtime version the target has
    for i, op in enumerate(graph.operators or []):
        code = builtin(model, op)
        name = op_name(model, op)
        if code == _OP.CUSTOM:
            if name != EDGETPU_CUSTOM_OP:
                problems.append(f"custom operator {name} (op {i}) is not supported by the "
                                "Edge TPU")
        elif code not in SUPPORTED_OPS:
            problems.append(f"operator {name} (op {i}) is not supported by the Edge TPU")
        elif SUPPORTED_OPS[code] > runtime_version:
            problems.append(f"operator {name} (op {i}) needs Edge TPU runtime "
                            f"{SUPPORTED_OPS[code]}, not {runtime_version}")
        if code == _OP.FULLY_CONNECTED and op.inputs is not None and len(op.inputs) > 1:
            weights = graph.tensors[int(op.inputs[1])]
            if _scale_count(weights) > 1:
                problems.append(f"operator {name} (op {i}) has weights quantized per channel "
                                f"({text(weights.name)!r}); the Edge TPU compiler needs one "
                                "scale per tensor")
        elif code not in _PER_AXIS_OK:
            for index in op.inputs if op.inputs is not None else []:
                if index >= 0 and _scale_count(graph.tensors[int(index)]) > 1:
                    problems.append(f"operator {name} (op {i}) takes tensor "
                                    f"{text(graph.tensors[int(index)].name)!r} quantized per "
                                    "axis, which it has no kernel for on the Edge TPU")

    # the graph's boundary: 8-bit integers in and out
    for kind, indices in (("input", graph.inputs), ("output", graph.outputs)):
        for index in indices if indices is not None else []:
            tensor = graph.tensors[int(index)]
            if tensor.type not in _EIGHT_BIT:
                problems.append(f"graph {kind} {text(tensor.name)!r} is "
                                f"{_type_name(tensor.type)}; the Edge TPU takes int8 or uint8")

    # every tensor: quantized to 8 bits, static, at most 3 dimensions above 1
    for index, tensor in enumerate(graph.tensors or []):
        where = _tensor_label(model, graph, index, producers)
        if tensor.type in _FLOAT:
            problems.append(f"{where} is {_type_name(tensor.type)}; the Edge TPU needs every "
                            "tensor quantized to 8 bits")
        elif tensor.type in _NOT_EIGHT_BIT_QUANTIZED:
            problems.append(f"{where} is {_type_name(tensor.type)}; the Edge TPU computes in "
                            "8 bits")
        elif tensor.type in _EIGHT_BIT and not _scale_count(tensor):
            problems.append(f"{where} is {_type_name(tensor.type)} without quantization "
                            "parameters")
        signature = tensor.shapeSignature
        if signature is not None and any(int(d) < 0 for d in signature):
            problems.append(f"{where} has a dynamic shape {[int(d) for d in signature]}; the "
                            "Edge TPU needs sizes fixed at compile time")
        shape = [int(d) for d in tensor.shape] if tensor.shape is not None else []
        if len(shape) > 3 and any(d > 1 for d in shape[:-3]) and not has_data(model, tensor):
            problems.append(f"{where} has shape {shape}; beyond 3 dimensions only the 3 "
                            "innermost may be larger than 1 on the Edge TPU")
    return problems


def check_edgetpu(model_bytes: bytes, runtime_version: int = EDGETPU_RUNTIME_VERSION) -> None:
    """Raise ValueError (one line, naming the offending operators and tensors) unless the model
    meets the Edge TPU's requirements."""
    problems = edgetpu_problems(model_bytes, runtime_version)
    if not problems:
        return
    shown = "; ".join(problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    raise ValueError("this network cannot run on the Edge TPU: " + shown
                     + (f" (and {more} more)" if more > 0 else ""))


def cpu_fallback_notes(model_bytes: bytes) -> list[str]:
    """Known limitations (Coral's table) of supported ops, that may leave an op and everything
    after it on the CPU; checked for MEAN and SOFTMAX, the ops edge-rl's networks use."""
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    notes = []
    for i, op in enumerate(graph.operators or []):
        code = builtin(model, op)
        if op.inputs is None or not len(op.inputs):
            continue
        shape = [int(d) for d in graph.tensors[int(op.inputs[0])].shape]
        if code == _OP.MEAN and len(op.inputs) > 1 and shape:
            axes = _constant(model, graph.tensors[int(op.inputs[1])])
            last = len(shape) - 1
            reduces_last = axes is not None and any(int(a) % len(shape) == last for a in axes)
            if reduces_last and shape[-1] % 4:
                notes.append(f"operator MEAN (op {i}) averages over a last axis of size "
                             f"{shape[-1]}; the Edge TPU maps such a reduction only when the "
                             "size is a multiple of 4, so the compiler may leave it and the "
                             "ops after it on the CPU")
        elif code == _OP.SOFTMAX and int(np.prod(shape[1:] or [1])) > 16_000:
            notes.append(f"operator SOFTMAX (op {i}) has more than 16,000 inputs, more than "
                         "the Edge TPU maps")
    return notes


def op_names(model_bytes: bytes) -> list[str]:
    """The main graph's operators by name (builtin name, or a custom op's code), in order."""
    model = read_model(model_bytes)
    return [op_name(model, op) for op in model.subgraphs[0].operators or []]


def op_name(model: Any, op: Any) -> str:
    """An operator's builtin name, or a custom op's code."""
    code = builtin(model, op)
    if code == _OP.CUSTOM:
        return text(model.operatorCodes[op.opcodeIndex].customCode) or "CUSTOM"
    return OP_NAMES.get(code, f"builtin {code}")


def _tensor_label(model: Any, graph: Any, index: int, producers: dict[int, int]) -> str:
    """'tensor NAME', and the op that computes it, which is what the user can change."""
    label = f"tensor {text(graph.tensors[index].name)!r}"
    if index in producers:
        op = graph.operators[producers[index]]
        label += (f" (output of operator {op_name(model, op)} "
                  f"(op {producers[index]}))")
    return label


def _scale_count(tensor: Any) -> int:
    q = tensor.quantization
    return 0 if q is None or q.scale is None else len(q.scale)


def _constant(model: Any, tensor: Any) -> np.ndarray | None:
    """An int32 constant tensor's values; None when it is computed or of another type."""
    if tensor.type != _TYPE.INT32 or not tensor.buffer:
        return None
    data = model.buffers[tensor.buffer].data
    return None if data is None or not len(data) else np.frombuffer(bytes(data), np.int32)


def _type_name(tensor_type: int) -> str:
    return TYPE_NAMES.get(tensor_type, f"type {tensor_type}")
