"""What a converted policy file holds: its stored tensors, and the dtypes of its weights and
biases (what tests and `edge-rl export` check a precision by).

    weight_dtypes(flat)   # {"int8", "float32"}: an int8 file with float first and last layers
"""

from __future__ import annotations

from typing import Any

from tensorflow.lite.python import schema_py_generated as schema

from edge_rl.converters.flatbuffer import TYPE_NAMES, builtin, has_data, read_model, text

_OP = schema.BuiltinOperator
# op -> (input index of its weights, input index of its bias or None)
_WEIGHT_OPS = {
    _OP.FULLY_CONNECTED: (1, 2),
    _OP.CONV_2D: (1, 2),
    _OP.DEPTHWISE_CONV_2D: (1, 2),
    _OP.CONV_3D: (1, 2),
    _OP.TRANSPOSE_CONV: (1, 3),
    _OP.BATCH_MATMUL: (1, None),
}
# Ops that only unpack stored weights (fp16 -> fp32, sparse -> dense) on the way to their user.
_UNPACK_OPS = {_OP.DEQUANTIZE, _OP.DENSIFY}


def constant_tensors(model_bytes: bytes) -> dict[str, str]:
    """Name -> numpy dtype name of every tensor with stored data in the main subgraph."""
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    return {
        text(t.name): TYPE_NAMES.get(t.type, str(t.type))
        for t in graph.tensors
        if has_data(model, t)
    }


def weight_dtypes(model_bytes: bytes) -> set[str]:
    """Numpy dtype names of the weight tensors (kernels) stored in the main subgraph.

    Weights are the constant weight inputs of FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D,
    CONV_3D, TRANSPOSE_CONV and BATCH_MATMUL, followed back through DEQUANTIZE (fp16) and
    DENSIFY (sparse) to what is stored. Biases are not included (see `bias_dtypes`: int32 in
    int8 models), nor are other constants such as reduction axes. A model without such ops
    reports all its stored tensors of rank >= 2.
    """
    weights, _ = _weights_and_biases(read_model(model_bytes))
    return weights


def bias_dtypes(model_bytes: bytes) -> set[str]:
    """Numpy dtype names of the stored bias tensors (int32 in an int8 model)."""
    _, biases = _weights_and_biases(read_model(model_bytes))
    return biases


def _weights_and_biases(model: Any) -> tuple[set[str], set[str]]:
    graph = model.subgraphs[0]
    producer = {out: op for op in graph.operators for out in (op.outputs or [])}

    def stored(index: int) -> Any:
        """The stored tensor behind input `index`, or None when it is computed."""
        while index >= 0:
            tensor = graph.tensors[index]
            if has_data(model, tensor):
                return tensor
            op = producer.get(index)
            if op is None or builtin(model, op) not in _UNPACK_OPS or not len(op.inputs):
                return None
            index = int(op.inputs[0])
        return None

    weights: set[str] = set()
    biases: set[str] = set()
    for op in graph.operators:
        slots = _WEIGHT_OPS.get(builtin(model, op))
        if slots is None:
            continue
        inputs = [int(i) for i in op.inputs]
        for slot, found in zip(slots, (weights, biases), strict=True):
            if slot is not None and slot < len(inputs) and (tensor := stored(inputs[slot])):
                found.add(TYPE_NAMES.get(tensor.type, str(tensor.type)))
    if not weights:
        weights = {
            TYPE_NAMES.get(t.type, str(t.type))
            for t in graph.tensors
            if has_data(model, t) and t.shape is not None and len(t.shape) >= 2
        }
    return weights, biases
