"""The int8 ranges that mathematics fixes, whatever the calibration data.

`bounded_ranges` finds them: a TANH's input spans [-TANH_INPUT_LIMIT, TANH_INPUT_LIMIT] (beyond
it tanh is within half an int8 output step of +-1), and each elementwise op that only adds,
subtracts or multiplies a constant after a TANH (the scaling to the action bounds) spans the
image of [-1, 1]. Calibrated from data instead, rows on which the policy only ever pushed one
way leave a file that can only act one way. `set_ranges` writes them into a file.
"""

from __future__ import annotations

import math
from typing import Any

from tensorflow.lite.python import schema_py_generated as schema

from edge_rl.converters.flatbuffer import (
    asymmetric_int8,
    builtin,
    constant_values,
    is_int8,
    read_model,
    set_per_tensor,
    tensor_readers,
    write_model,
)

_OP = schema.BuiltinOperator
# Ops whose int8 output has a range of its own (not their input's)
_REQUANTIZING = (_OP.FULLY_CONNECTED, _OP.ADD, _OP.SUB, _OP.MUL)
# tanh(x) is within half of the int8 output step (1/128) of +-1 beyond this input
TANH_INPUT_LIMIT = math.atanh(1.0 - 1.0 / 256.0)


def bounded_ranges(model: Any) -> dict[int, tuple[float, float]]:
    """Int8 tensor index -> (low, high) for the activations whose range follows from a TANH:
    its input, and the chain of elementwise ops with a constant operand after it."""
    graph = model.subgraphs[0]
    consumers = tensor_readers(graph)
    producers = {int(out): op for op in graph.operators for out in op.outputs}
    ranges: dict[int, tuple[float, float]] = {}
    for op in graph.operators:
        if builtin(model, op) != _OP.TANH or not is_int8(graph, int(op.outputs[0])):
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
    if not is_int8(graph, out) or (getattr(op.builtinOptions, "fusedActivationFunction", 0)):
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


def set_ranges(model_bytes: bytes, ranges: dict[int, tuple[float, float]]) -> bytes:
    """`model_bytes` with each listed int8 activation given the (scale, zero point) of its
    range. Only safe for tensors that no FULLY_CONNECTED or CONV reads: their biases are stored
    at their input's scale (`bounded_ranges` gives only such tensors)."""
    if not ranges:
        return model_bytes
    model = read_model(model_bytes)
    graph = model.subgraphs[0]
    for index, (low, high) in ranges.items():
        set_per_tensor(graph.tensors[index].quantization, *asymmetric_int8(low, high))
    return write_model(model)
