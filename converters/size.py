"""How small a sparse int8 policy gets, and how small it could get.

A policy file of a sparse network stores its int8 zeros like any other weight. Two ways to
shrink it that the device runtime can still load: TFLite's own sparse encoding
(`Optimize.EXPERIMENTAL_SPARSITY`), and xz compression of the file (`pack_policy`; the device
unpacks it with the standard library). `entropy_bound_bytes` is about what no lossless encoding of
the same int8 weights can beat (treating the values as independent): for each kernel, which
values are nonzero (log2 of C(size, nonzero)) plus the empirical entropy of the nonzero
values; biases (int32) and scales (float32) counted raw.
"""

from __future__ import annotations

import math

import numpy as np


def _log2_binomial(n: int, k: int) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def fully_connected_weights(model: bytes) -> list[tuple[np.ndarray, int]]:
    """Each FULLY_CONNECTED op's stored weights (int8 or float32, as stored: an int8 file's
    first layer is float32) and its count of bias values and scales, from a policy file."""
    from tensorflow.lite.python import schema_py_generated as schema

    from edge_rl.converters.flatbuffer import builtin, read_model

    tflite = read_model(model)
    graph = tflite.subgraphs[0]
    found = []
    for op in graph.operators:
        if builtin(tflite, op) != schema.BuiltinOperator.FULLY_CONNECTED:
            continue
        tensor = graph.tensors[int(op.inputs[1])]
        data = tflite.buffers[tensor.buffer].data
        stored = {schema.TensorType.INT8: np.int8, schema.TensorType.FLOAT32: np.float32}
        if tensor.type not in stored or data is None or not len(data):
            continue
        scales = tensor.quantization.scale if tensor.quantization else None
        extra = 0 if scales is None else len(scales)  # float32 scales
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            extra += int(np.prod(graph.tensors[int(op.inputs[2])].shape))  # 32-bit bias
        found.append((np.asarray(data, np.uint8).view(stored[tensor.type]), extra))
    return found


def entropy_bound_bytes(model: bytes) -> int:
    """Bytes needed at least to store the weights of an int8 policy file: per kernel, which
    values are nonzero and the empirical entropy of those values (a float32 kernel's: 32 bits
    each); biases and scales (32 bits each) raw. The graph, activation ranges and metadata are
    not counted."""
    bits = 0.0
    for values, extra in fully_connected_weights(model):
        nonzero = values[values != 0]
        bits += _log2_binomial(values.size, nonzero.size)
        if values.dtype == np.float32:
            bits += 32 * nonzero.size
        elif nonzero.size:
            _, counts = np.unique(nonzero, return_counts=True)
            p = counts / nonzero.size
            bits += nonzero.size * float(-(p * np.log2(p)).sum())
        bits += 32 * extra
    return int(math.ceil(bits / 8))


def int8_zero_fractions(model: bytes) -> list[float]:
    """The fraction of zeros in each FULLY_CONNECTED weight tensor of an int8 policy file (int8,
    and float32 for its first layer)."""
    return [float(np.mean(values == 0)) for values, _ in fully_connected_weights(model)]
