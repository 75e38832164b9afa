"""Publish a policy many times for the cost of one conversion: write new weights in place.

A run's actor network keeps its graph for the whole run; only its weights change between
broadcasts. So `PolicyPatcher` converts the network once (the template) and makes each new
policy file by copying the template's bytes and overwriting, at offsets found once:
  * each FULLY_CONNECTED and CONV_2D op's weights and bias: for int8 quantized in numpy the
    way TFLite's quantizer does it (symmetric int8 weights, per tensor or per output channel
    as the template has them; int32 bias at scale input_scale * weight_scale), otherwise cast
    to the stored float type; an image network's 1 / value_max, which the converter folds
    into its first convolution, folded the same way;
  * for int8, every activation's (scale, zero point), from its min and max over the
    calibration observations. The values come from an fp32 twin of the network, patched the
    same way, whose every intermediate tensor is a graph output (so none is computed in place
    and lost); its ops line up one to one with the int8 model's, less the QUANTIZE at the
    input and the DEQUANTIZE at the output;
  * the metadata JSON, written into room the template reserved for it;
  * for int8 networks whose first and last layers are float32 (see
    edge_rl.converters.tflite), their weights and biases as they are; the int8 range of the
    first one's output from the calibration rows.
Ranges that mathematics fixes (a TANH's input, the scaling to the action bounds: see
edge_rl.converters.flatbuffer) stay as the template has them.
None of these change size. A network the patcher cannot reproduce (an op whose quantization
it does not know, a weight folded into another constant) raises NotPatchable when the
patcher is built; callers then convert every time.

    patcher = PolicyPatcher(model, "int8", calibration, metadata)
    flat = patcher.write(calibration, metadata)     # after every round of updates

The numpy arithmetic on the weights (TFLite's rounding, bias correction, the rescalings) is
in edge_rl.converters.int8_weights. This module stays past ~400 lines on purpose: the layout
it finds, the plan of which range each activation takes, and the in-place writes are one
algorithm over one file layout.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils

from edge_rl.converters.flatbuffer import (
    asymmetric_int8,
    builtin,
    read_model,
    round_half_away,
    tensor_readers,
    text,
)
from edge_rl.converters.int8_weights import (
    balanced_first_activation,
    corrected_bias,
    covered_ranges,
    mean_as_int8,
    scaled_units,
    symmetric_int8,
)
from edge_rl.converters.ranges import bounded_ranges
from edge_rl.converters.tflite import attach_metadata, calibration_rows, convert
from edge_rl.device.observations import KINDS as OBSERVATION_KINDS
from edge_rl.device.policy_file import METADATA_NAME, PolicyMetadata
from edge_rl.device.tflite_file import buffer_span, quantization_spans
from edge_rl.tf_setup import tf

_OP = schema.BuiltinOperator
_TYPE = schema.TensorType
# Ops whose int8 output range is calibrated from the data (min and max, widened to hold 0).
_CALIBRATED = {_OP.QUANTIZE, _OP.FULLY_CONNECTED, _OP.CONV_2D, _OP.ADD, _OP.SUB, _OP.MUL,
               _OP.MEAN, _OP.SUM}
# Elementwise ops that the quantizer sometimes gives their first input's range.
_KEEPS_INPUT_RANGE = {_OP.ADD, _OP.SUB, _OP.MUL}
# Ops whose int8 output range TFLite fixes whatever the data (tanh: 1/128, logistic: 1/256).
_FIXED_RANGE = {_OP.TANH, _OP.LOGISTIC, _OP.SOFTMAX, _OP.LOG_SOFTMAX}
_STORED_DTYPES = {_TYPE.FLOAT32: np.float32, _TYPE.FLOAT16: np.float16, _TYPE.INT8: np.int8,
                  _TYPE.INT32: np.int32}
METADATA_SPARE_BYTES = 512  # room for the JSON to grow (versions, train steps) in place
# Int8 files are written several ways and the one that follows the fp32 twin most closely on
# the calibration rows is kept (`_best_int8`); no single way wins on every network:
# * each activation's int8 range covers its calibrated values' COVERED_PERCENTILE band (the
#   rarest beyond clip), or all of them. A sparse TD3 Pendulum actor's first hidden layer
#   reached 9 where most units sit near 0.1: clipped there, 1.2% of the action range lost
#   against 3.7% at full range; a sparse SAC Pendulum actor lost 4.8% clipped, 1.3% not;
COVERED_PERCENTILE = 99.9
# * the first hidden activation's units balanced against the int8 kernel after it
#   (`balanced_first_activation`), or not: balanced, a DQN CartPole network agreed with fp32
#   on 98.0% of its held-out rows against 95.6%; a sparse TD3 Pendulum actor erred by 1.07%
#   of the action range against 0.85%.
BALANCE_FIRST_ACTIVATION = True
# With `scale_units`, in every way the last int8 layer's units are scaled to fill the int8
# grids they share (`scaled_units`), which costs nothing in range: on the holdout rows, a
# 98%-sparse TD3 Hopper actor's mean action error fell from 1.68% to 1.07% of the action range
# (its best, return 3,661; 1.57% to 0.82% at 215k steps), a TD3 InvertedPendulum actor's from
# 0.15% to 0.07%, a 90%-sparse TD3 Pendulum actor's from 0.85% to 0.78%. It is not the
# default: the scaled weights fill more int8 levels, so a sparse file packs less small (a 90%
# sparse actor's xz form 1% larger), and a broadcast's rounding steers its actors' exploration
# (the default DQN CartPole run at seed 0 changed course). `edge-rl export` asks for it when the
# plain int8 file fails its check.
JUDGED_ROWS = 500  # calibration rows the ways are compared (and the bias means taken) on
# Correct each int8 layer's bias for the mean error its rounded weights make (`corrected_bias`).
BIAS_CORRECTION = True
_RELU_OR_NONE = (schema.ActivationFunctionType.NONE, schema.ActivationFunctionType.RELU)
# The layers whose weights the patcher writes, and the op that holds each in the file.
_LAYER_OPS = {tf.keras.layers.Dense: _OP.FULLY_CONNECTED, tf.keras.layers.Conv2D: _OP.CONV_2D}
# Ops whose int8 output takes its input's (scale, zero point) as it is.
_PASSES_INPUT_RANGE = {_OP.RESHAPE}


class NotPatchable(ValueError):
    """The network's TFLite form cannot be reproduced by patching; convert it every time."""


@dataclass
class _Stored:
    """A constant tensor's numbers inside the file: where its data and quantization lie."""

    dtype: type
    shape: tuple[int, ...]
    data: tuple[int, int]  # (start, bytes)
    scale: tuple[int, int]  # (start, count) of float32 scales; count 0 if not quantized


@dataclass
class _Weighted:
    """One FULLY_CONNECTED or CONV_2D op and the Keras layer whose kernel and bias it holds."""

    layer: Any
    to_stored: Any  # Keras kernel -> the op's weights, as the file holds them
    weight: _Stored
    bias: _Stored
    input_tensor: int
    output_tensor: int
    activation: int  # the op's fused activation (schema.ActivationFunctionType)


@dataclass
class _Activation:
    """An int8 activation tensor: where its range comes from and where it is stored."""

    tensor: int
    rule: str  # "data" | "input" | "fixed" (the op's own range, kept as the template has it)
    source: int  # "data": the twin tensor whose min and max give the range;
    #              "input": the int8 tensor whose range it takes; "fixed": -1
    scale_at: int  # file offset of its float32 scale
    zero_point_at: int  # file offset of its int64 zero point


class _Layout:
    """Where a converted model keeps what the patcher rewrites."""

    def __init__(self, flat: bytes, layers: list, input_fold: float):
        self.flat = flat
        self.model = read_model(flat)
        self.graph = self.model.subgraphs[0]
        producer = {int(out): op for op in self.graph.operators for out in op.outputs}
        weighted_ops = [op for op in self.graph.operators
                        if builtin(self.model, op) in _LAYER_OPS.values()]
        if len(weighted_ops) != len(layers):
            raise NotPatchable(f"{len(weighted_ops)} FULLY_CONNECTED and CONV_2D ops for "
                               f"{len(layers)} Dense and Conv2D layers")
        self.weighted = []
        for i, (op, layer) in enumerate(zip(weighted_ops, layers, strict=True)):
            if builtin(self.model, op) != _LAYER_OPS[type(layer)]:
                raise NotPatchable(f"{layer.name} is not where the file has its op")
            inputs = [int(i) for i in op.inputs]
            if len(inputs) < 3 or inputs[2] < 0:
                raise NotPatchable(f"the converter dropped the bias of {layer.name}")
            weight = self.stored(inputs[1], producer)
            bias = self.stored(inputs[2], producer)
            activation = getattr(op.builtinOptions, "fusedActivationFunction", 0)
            fold = input_fold if i == 0 else 1.0
            self.weighted.append(_Weighted(layer, _stored_form(layer, fold), weight, bias,
                                           inputs[0], int(op.outputs[0]), activation))
        self.metadata_data = self._metadata_span()

    def stored(self, index: int, producer: dict) -> _Stored:
        """The stored tensor behind op input `index`, through a DEQUANTIZE (fp16 weights)."""
        tensor = self.graph.tensors[index]
        op = producer.get(index)
        if op is not None and builtin(self.model, op) == _OP.DEQUANTIZE:
            index = int(op.inputs[0])
            tensor = self.graph.tensors[index]
        elif op is not None:
            raise NotPatchable(f"tensor {text(tensor.name)!r} is computed, not stored")
        if tensor.type not in _STORED_DTYPES or not tensor.buffer:
            raise NotPatchable(f"tensor {text(tensor.name)!r} has no stored data we can write")
        scale_start, n_scale, _, _ = quantization_spans(self.flat, index)
        return _Stored(
            dtype=_STORED_DTYPES[tensor.type],
            shape=tuple(int(d) for d in tensor.shape),
            data=buffer_span(self.flat, int(tensor.buffer)),
            scale=(scale_start, n_scale),
        )

    def _metadata_span(self) -> tuple[int, int]:
        for entry in self.model.metadata or []:
            if text(entry.name) == METADATA_NAME:
                return buffer_span(self.flat, int(entry.buffer))
        raise NotPatchable("the template has no edge-rl metadata")


class PolicyPatcher:
    """Converts `model` once at `precision`; `write` makes policy files from its current weights.

    The model's Dense layers are read in `model.layers` order and must be the network's
    FULLY_CONNECTED ops in execution order (a chain of layers, as edge-rl's networks are);
    building checks this against the converted numbers and raises NotPatchable otherwise.
    """

    def __init__(self, model: Any, precision: str, calibration: np.ndarray | None,
                 metadata: PolicyMetadata, scale_units: bool = False):
        self.precision = precision
        self.scale_units = scale_units  # int8: rescale the last int8 layer's units
        self.observation_shape = tuple(int(d) for d in metadata.observation_shape)
        self.layers = [layer for layer in model.layers if type(layer) in _LAYER_OPS]
        # Weights of any other layer (a depthwise convolution, a nested model) would stay as
        # the first conversion had them in every file written, at every precision: refuse.
        for layer in model.layers:
            if layer.weights and type(layer) not in _LAYER_OPS:
                raise NotPatchable(f"{layer.name}: a {type(layer).__name__} layer with weights; "
                                   "the patcher writes only Dense and Conv2D layers' weights")
        if not self.layers or any(not layer.use_bias for layer in self.layers):
            raise NotPatchable("patching needs Dense or Conv2D layers with biases")
        # An image network scales its input by 1 / value_max before its first convolution;
        # the converter folds that into the convolution's weights (checked below)
        value_max = OBSERVATION_KINDS[metadata.observation].value_max
        fold = 1.0 / value_max if value_max and isinstance(
            self.layers[0], tf.keras.layers.Conv2D) else 1.0
        # A bias of exactly zero (as every bias starts) is dropped by the converter, leaving
        # nothing to patch later: convert with nonzero biases, then put the real ones back.
        real = [layer.get_weights() for layer in self.layers]
        rng = np.random.default_rng(0)
        probes = [(kernel, bias + rng.uniform(0.01, 0.02, bias.shape).astype(np.float32))
                  for kernel, bias in real]
        try:
            for layer, weights in zip(self.layers, probes, strict=True):
                layer.set_weights(list(weights))
            template = convert(model, precision, calibration, metadata)
            # an fp32 file is its own twin (the same conversion): a second one took ~0.7 s of
            # every run's first publish (the learner checks each int8 policy against fp32)
            twin = template if precision == "fp32" else convert(
                model, "fp32", None, replace(metadata, precision="fp32"))
        finally:
            for layer, weights in zip(self.layers, real, strict=True):
                layer.set_weights(weights)
        template = attach_metadata(template, metadata, spare_bytes=METADATA_SPARE_BYTES)
        self.layout = _Layout(template, self.layers, fold)
        self.twin = _Layout(_all_tensors_as_outputs(twin), self.layers, fold)
        self._check_numbers(self.layout, probes)
        self._check_numbers(self.twin, probes)
        if precision == "int8":
            self.activations = self._line_up_activations()
            self.balanced = self._balanced_activation()
            self.scaled = self._scaled_units()

    # -- building ------------------------------------------------------------------------------

    def _check_numbers(self, layout: _Layout, probes: list) -> None:
        """Each FULLY_CONNECTED op holds the kernel and bias of the layer matched to it."""
        for dense, (kernel, bias) in zip(layout.weighted, probes, strict=True):
            # Quantized, a weight is within half a step of its float value. So is a bias,
            # except where the file reads integer observations (frames): the converter rounded
            # it at the calibrated input range and integer_input (converters.flatbuffer) rounded
            # it again at [0, value_max], which is as wide or wider, so within one step.
            for stored, expected, steps in ((dense.weight, dense.to_stored(kernel), 0.51),
                                            (dense.bias, bias, 1.01)):
                values = _read(layout.flat, stored)
                if values.shape != expected.shape:
                    raise NotPatchable(f"{dense.layer.name}: stored values of shape "
                                       f"{values.shape} for a variable of shape {expected.shape}")
                if stored.scale[1]:
                    # one scale, or one per output row: shaped to broadcast over the values
                    scales = _read_f32(layout.flat, *stored.scale)
                    scales = scales.reshape(-1, *[1] * (values.ndim - 1))
                    close = np.abs(values * scales - expected) <= steps * scales + 1e-7
                else:
                    close = np.isclose(values.astype(np.float32), expected, rtol=1e-3, atol=1e-6)
                if not close.all():
                    raise NotPatchable(f"{dense.layer.name}: the converted numbers are not the "
                                       "layer's (folded into another constant?)")

    def _line_up_activations(self) -> list[_Activation]:
        """The int8 model's activations in execution order, each with how its range is found
        and where its (scale, zero point) lie in the file."""
        model, graph = self.layout.model, self.layout.graph
        graph_inputs = set(graph.inputs)
        bounded = bounded_ranges(model)
        twin_ops = list(self.twin.graph.operators)
        float_outputs = {int(i): int(self.twin.graph.inputs[0]) for i in graph_inputs}
        plan: list[_Activation] = []
        k = 0
        for op in graph.operators:
            code = builtin(model, op)
            out = int(op.outputs[0])
            if code == _OP.DEQUANTIZE:  # into the float output stage, or the output
                continue
            if code == _OP.QUANTIZE and graph.tensors[int(op.inputs[0])].type != _TYPE.FLOAT32:
                # integer observations (frames), quantized over the kind's fixed range where
                # the twin dequantizes them (converters.flatbuffer.integer_input)
                rule, source = "fixed", -1
                if k < len(twin_ops) and builtin(self.twin.model, twin_ops[k]) == _OP.DEQUANTIZE:
                    k += 1
            elif code == _OP.QUANTIZE and int(op.inputs[0]) in float_outputs:
                rule, source = "data", float_outputs[int(op.inputs[0])]
            elif graph.tensors[out].type != _TYPE.INT8:
                # the float input layer or output stage, or the integer input's own RESHAPEs:
                # no int8 range; what it computes is the twin's same op
                if k >= len(twin_ops) or builtin(self.twin.model, twin_ops[k]) != code:
                    raise NotPatchable("the int8 and fp32 graphs differ op by op")
                float_outputs[out] = int(twin_ops[k].outputs[0])
                k += 1
                continue
            else:
                if k >= len(twin_ops) or builtin(self.twin.model, twin_ops[k]) != code:
                    raise NotPatchable("the int8 and fp32 graphs differ op by op")
                twin_out = int(twin_ops[k].outputs[0])
                k += 1
                if code in _FIXED_RANGE or out in bounded:
                    rule, source = "fixed", -1
                elif code in _PASSES_INPUT_RANGE:
                    rule, source = "input", int(op.inputs[0])
                elif code in _KEEPS_INPUT_RANGE and _same_range(graph, out, int(op.inputs[0])):
                    # The quantizer gave this op its input's range (it does so for some
                    # elementwise ops with a constant operand): do as it did.
                    rule, source = "input", int(op.inputs[0])
                elif code in _CALIBRATED:
                    rule, source = "data", twin_out
                else:
                    raise NotPatchable(f"no int8 range rule for op {code} in the network")
            scale_start, _, zero_point_start, _ = quantization_spans(self.layout.flat, out)
            plan.append(_Activation(out, rule, source, scale_start, zero_point_start))
        return plan

    def _balanced_activation(self) -> int | None:
        """The twin tensor of the first hidden activation when the float input layer computes
        it (ReLU or linear) and an int8 layer reads it: the activation
        `balanced_first_activation` evens out.
        None for other networks."""
        dense = self.layout.weighted
        if len(dense) < 2 or dense[0].weight.dtype != np.float32 \
                or dense[1].weight.dtype != np.int8 or dense[0].activation not in _RELU_OR_NONE:
            return None
        feeding = [a for a in self.activations if a.tensor == dense[1].input_tensor]
        if len(feeding) != 1 or feeding[0].rule != "data":
            return None
        return feeding[0].source

    def _scaled_units(self) -> tuple[int, int] | None:
        """(k, twin tensor) when weighted layer k is the last int8 Dense layer, with one weight
        scale and a ReLU or no activation, and only the float layer after it reads its output
        (through a DEQUANTIZE): the layer whose units `scaled_units` scales. None for other
        networks."""
        dense = self.layout.weighted
        int8 = [k for k, d in enumerate(dense) if d.weight.dtype == np.int8]
        if not int8 or int8[-1] + 1 >= len(dense):
            return None
        k = int8[-1]
        layer, after = dense[k], dense[k + 1]
        if (len(layer.weight.shape) != 2 or layer.weight.scale[1] != 1
                or layer.activation not in _RELU_OR_NONE or after.weight.dtype != np.float32):
            return None
        readers = tensor_readers(self.layout.graph)
        dequantize = readers.get(layer.output_tensor, [])
        if len(dequantize) != 1 or builtin(self.layout.model, dequantize[0]) != _OP.DEQUANTIZE \
                or int(dequantize[0].outputs[0]) != after.input_tensor \
                or len(readers.get(after.input_tensor, [])) != 1 \
                or {layer.output_tensor, after.input_tensor} & set(self.layout.graph.outputs):
            return None
        own = [a for a in self.activations if a.tensor == layer.output_tensor]
        if len(own) != 1 or own[0].rule != "data":
            return None
        return k, own[0].source

    # -- writing -------------------------------------------------------------------------------

    def write(self, calibration: np.ndarray | None, metadata: PolicyMetadata) -> bytes:
        """A policy file for the model's current weights, with `metadata` attached."""
        if metadata.precision != self.precision:
            raise ValueError(f"this patcher writes {self.precision} policies, the metadata "
                             f"says {metadata.precision}")
        weights = [(np.asarray(layer.kernel.numpy(), np.float32),
                    np.asarray(layer.bias.numpy(), np.float32)) for layer in self.layers]
        out = bytearray(self.layout.flat)
        if self.precision == "int8":
            if calibration is None:
                raise ValueError("int8 policies need calibration observations")
            rows = calibration_rows(calibration, self.observation_shape)
            out = self._best_int8(weights, rows, metadata.output)
        else:
            for dense, (kernel, bias) in zip(self.layout.weighted, weights, strict=True):
                _write(out, dense.weight.data, dense.to_stored(kernel).astype(dense.weight.dtype))
                _write(out, dense.bias.data, bias.astype(dense.bias.dtype))
        text = metadata.to_json()
        start, room = self.layout.metadata_data
        if len(text) > room:
            return attach_metadata(bytes(out), metadata)  # rare: rebuild the file this once
        out[start:start + room] = text + b" " * (room - len(text))
        return bytes(out)

    def _best_int8(self, weights: list, rows: np.ndarray, output_kind: str) -> bytearray:
        """The int8 file, written each way listed at COVERED_PERCENTILE, that follows the fp32
        twin most closely on the calibration rows: fewest greedy actions that differ for
        Q-values, else the smallest mean output error."""
        values = self._twin_tensors(weights, rows)
        # the ways are compared on a subset: each costs a run of the file on its rows
        judged = np.linspace(0, len(rows) - 1, min(len(rows), JUDGED_ROWS)).astype(int)
        reference = values[int(self.twin.graph.outputs[0])][judged]
        balancing = [False, True] if BALANCE_FIRST_ACTIVATION and self.balanced is not None \
            else [False]
        percentiles = _percentiles()
        best, best_error = None, None
        bands: dict = {}  # (twin tensor, balanced) -> {percentile: (low, high)}
        for balance in balancing:
            for percentile in percentiles:
                out = bytearray(self.layout.flat)
                self._write_int8(out, weights, values, balance, percentile, bands)
                error = _output_error(bytes(out), rows[judged], reference, output_kind)
                if best_error is None or error < best_error:
                    best, best_error = out, error
        return best

    def _write_int8(self, out: bytearray, weights: list, values: dict, balance: bool,
                    percentile: float, bands: dict) -> None:
        # 1. activation ranges, from the fp32 twin's `values` on the calibration rows
        if balance:
            weights, values = balanced_first_activation(weights, values, self.balanced)
        if self.scale_units and self.scaled is not None:
            weights, values = scaled_units(weights, values, *self.scaled)
        params: dict[int, tuple[float, int]] = {}  # int8 tensor -> (scale, zero point)
        means: dict[int, np.ndarray] = {}  # int8 tensor -> its mean over the rows, per unit
        for a in self.activations:
            if a.rule == "fixed":  # as the template has it
                params[a.tensor] = (float(_read_f32(self.layout.flat, a.scale_at, 1)[0]),
                                    int(np.frombuffer(self.layout.flat, np.int64, 1,
                                                      a.zero_point_at)[0]))
                continue
            if a.rule == "input":
                scale, zero_point = params[a.source]
            else:
                data = values[a.source]
                if (a.source, balance) not in bands:  # one sort for every percentile
                    bands[a.source, balance] = covered_ranges(data, _percentiles())
                scale, zero_point = asymmetric_int8(*bands[a.source, balance][percentile])
                means[a.tensor] = mean_as_int8(data[::max(1, len(data) // JUDGED_ROWS)],
                                               scale, zero_point)
            params[a.tensor] = (scale, zero_point)
            _write(out, (a.scale_at, 4), np.float32([scale]))
            _write(out, (a.zero_point_at, 8), np.int64([zero_point]))
        # 2. weights (symmetric int8) and biases (int32 at input scale x weight scale)
        for dense, (kernel, bias) in zip(self.layout.weighted, weights, strict=True):
            if dense.weight.dtype == np.float32:  # the float input layer or output stage
                _write(out, dense.weight.data, dense.to_stored(kernel))
                _write(out, dense.bias.data, bias)
                continue
            per_channel = dense.weight.scale[1] > 1
            q_weight, weight_scale = symmetric_int8(dense.to_stored(kernel), per_channel)
            # the mean-error correction is a Dense layer's (one input mean per feature)
            if BIAS_CORRECTION and dense.input_tensor in means and kernel.ndim == 2:
                bias = corrected_bias(kernel, bias, q_weight, weight_scale,
                                      means[dense.input_tensor])
            bias_scale = (np.float64(params[dense.input_tensor][0])
                          * weight_scale.astype(np.float64))
            q_bias = round_half_away(bias / bias_scale).astype(np.int64)
            q_bias = np.clip(q_bias, -(2**31) + 1, 2**31 - 1).astype(np.int32)
            _write(out, dense.weight.data, q_weight)
            _write(out, (dense.weight.scale[0], 4 * dense.weight.scale[1]),
                   np.broadcast_to(weight_scale, (dense.weight.scale[1],)).astype(np.float32))
            _write(out, dense.bias.data, q_bias)
            _write(out, (dense.bias.scale[0], 4 * dense.bias.scale[1]),
                   np.broadcast_to(bias_scale, (dense.bias.scale[1],)).astype(np.float32))

    def _twin_tensors(self, weights: list, rows: np.ndarray) -> dict[int, np.ndarray]:
        twin = bytearray(self.twin.flat)
        for dense, (kernel, bias) in zip(self.twin.weighted, weights, strict=True):
            _write(twin, dense.weight.data, dense.to_stored(kernel).astype(np.float32))
            _write(twin, dense.bias.data, bias)
        interpreter = tf.lite.Interpreter(model_content=bytes(twin))
        source = interpreter.get_input_details()[0]
        interpreter.resize_tensor_input(source["index"], list(rows.shape))
        interpreter.allocate_tensors()
        interpreter.set_tensor(source["index"], rows.astype(source["dtype"]))
        interpreter.invoke()
        wanted = {a.source for a in self.activations if a.rule == "data"}
        wanted.add(int(self.twin.graph.outputs[0]))
        return {tensor: interpreter.get_tensor(tensor) for tensor in wanted}


def _percentiles() -> list[float]:
    """The bands activation ranges are tried at: COVERED_PERCENTILE's, and all values."""
    return sorted({COVERED_PERCENTILE, 100.0})


def _output_error(flat: bytes, rows: np.ndarray, reference: np.ndarray,
                  output_kind: str) -> float:
    """How far `flat`'s first output strays from `reference` on `rows`: the fraction of
    greedy actions that differ for Q-values (mean error breaking ties), else the mean error."""
    interpreter = tf.lite.Interpreter(model_content=flat)
    source = interpreter.get_input_details()[0]
    interpreter.resize_tensor_input(source["index"], list(rows.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(source["index"], rows.astype(source["dtype"]))
    interpreter.invoke()
    outputs = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    error = float(np.abs(outputs.astype(np.float64) - reference).mean())
    if output_kind == "q_values":
        differ = float(np.mean(outputs.argmax(axis=-1) != reference.argmax(axis=-1)))
        return differ + 1e-9 * error
    return error


def _same_range(graph: Any, tensor: int, other: int) -> bool:
    a, b = graph.tensors[tensor].quantization, graph.tensors[other].quantization
    return (a is not None and b is not None and a.scale is not None and b.scale is not None
            and np.array_equal(a.scale, b.scale) and np.array_equal(a.zeroPoint, b.zeroPoint))


def policy_file(model: Any, precision: str, calibration: np.ndarray | None,
                metadata: PolicyMetadata, scale_units: bool = False) -> bytes:
    """One policy file as a learner publishes it: written by a PolicyPatcher (its activation
    ranges; `scale_units` as the patcher's) where the network allows, else converted in full."""
    try:
        return PolicyPatcher(model, precision, calibration, metadata,
                             scale_units).write(calibration, metadata)
    except NotPatchable:
        return convert(model, precision, calibration, metadata)


def _stored_form(layer: Any, fold: float) -> Any:
    """Keras kernel -> the weights as TFLite stores them: [units, inputs] for a Dense layer,
    [filters, height, width, channels] for a Conv2D one, times `fold`, a constant factor the
    converter folded into it (an image encoder's 1 / value_max before its first convolution)."""
    if isinstance(layer, tf.keras.layers.Conv2D):
        return lambda kernel: np.transpose(kernel, (3, 0, 1, 2)) * np.float32(fold)
    return lambda kernel: kernel.T * np.float32(fold)


def _all_tensors_as_outputs(flat: bytes) -> bytes:
    """`flat` with every op's output made a graph output, so the interpreter keeps them all."""
    model = read_model(flat)
    graph = model.subgraphs[0]
    outputs = [int(i) for i in graph.outputs]
    outputs += sorted({int(t) for op in graph.operators for t in op.outputs} - set(outputs))
    graph.outputs = np.array(outputs, np.int32)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _read(flat: bytes, stored: _Stored) -> np.ndarray:
    start, size = stored.data
    return np.frombuffer(flat, stored.dtype, size // np.dtype(stored.dtype).itemsize,
                         start).reshape(stored.shape)


def _read_f32(flat: bytes, start: int, count: int) -> np.ndarray:
    return np.frombuffer(flat, np.float32, count, start)


def _write(out: bytearray, span: tuple[int, int], values: np.ndarray) -> None:
    start, size = span
    data = np.ascontiguousarray(values).tobytes()
    if len(data) != size:
        raise ValueError(f"{len(data)} bytes do not fit a slot of {size}")
    out[start:start + size] = data
