"""The int8 arithmetic a PolicyPatcher does on a network's weights, in numpy, apart from any
file layout: TFLite's symmetric weight rounding, activation bands, bias correction, and the
two rescalings that leave the float function as it is but spread the int8 grids better.

Weights are a list of (kernel [inputs, units], bias) per weighted layer, as Keras holds them;
`values` maps an fp32 twin tensor to its values over the calibration rows.
"""

from __future__ import annotations

import numpy as np

from edge_rl.converters.flatbuffer import round_half_away
from edge_rl.converters.tflite import input_scales

UNIT_SCALE_FLOOR = 1e-3  # the least a unit is divided by (an empty unit that never fired)


def symmetric_int8(weights: np.ndarray, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, scales): max |w| maps to 127, per output channel or for the whole
    tensor."""
    weights = weights.astype(np.float64)
    if per_channel:  # one scale per output channel: the first axis, for Dense and Conv2D
        scale = np.abs(weights).reshape(len(weights), -1).max(axis=1) / 127.0
    else:
        scale = np.array(np.abs(weights).max() / 127.0)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    shaped = (scale.astype(np.float64).reshape(-1, *[1] * (weights.ndim - 1)) if per_channel
              else float(scale))
    quantized = np.clip(round_half_away(weights / shaped), -127, 127).astype(np.int8)
    return quantized, scale


def covered_range(values: np.ndarray, percentile: float) -> tuple[float, float]:
    """(low, high) of the `percentile` band of `values`."""
    return covered_ranges(values, [percentile])[percentile]


def covered_ranges(values: np.ndarray, percentiles: list[float]
                   ) -> dict[float, tuple[float, float]]:
    """{percentile: (low, high) of that band of `values`} for each of `percentiles`."""
    bounds = np.percentile(values, [q for p in percentiles for q in (100.0 - p, p)])
    return {p: (float(bounds[2 * i]), float(bounds[2 * i + 1]))
            for i, p in enumerate(percentiles)}


def mean_as_int8(values: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Each unit's mean over the rows of `values` as an int8 tensor of that scale holds them."""
    levels = np.clip(round_half_away(values.astype(np.float64) / scale) + zero_point, -128, 127)
    held = (levels - zero_point) * scale
    return held.reshape(-1, held.shape[-1]).mean(axis=0)


def corrected_bias(kernel: np.ndarray, bias: np.ndarray, q_weight: np.ndarray,
                   weight_scale: np.ndarray, input_mean: np.ndarray) -> np.ndarray:
    """`bias` less the mean error that rounding `kernel` [inputs, units] to `q_weight`
    [units, inputs] (times `weight_scale`, per unit or one) makes over the calibration rows,
    whose inputs average `input_mean`. Rounding errors are fixed, not random from row to
    row: a DQN CartPole network's int8 middle layer moved its Q-value gap by -0.16 on average,
    flipping 4.5% of greedy actions on its own (bias correction, Nagel et al. 2019)."""
    shaped = weight_scale.astype(np.float64).reshape(-1, 1) if weight_scale.ndim else \
        float(weight_scale)
    error = q_weight.astype(np.float64) * shaped - kernel.T.astype(np.float64)
    return (bias.astype(np.float64) - error @ input_mean).astype(np.float32)


def balanced_first_activation(weights: list, values: dict, source: int
                              ) -> tuple[list, dict]:
    """`weights` and twin `values` with unit j of the first hidden activation (twin tensor
    `source`) divided by s_j = sqrt(a_j / w_j) (a_j: its largest value over the rows, w_j: the
    largest |weight| of its row in the int8 kernel that reads it), the float layer's column j
    divided and that kernel row multiplied by s_j: the same function (ReLU commutes with a
    positive scale), and the split edge_rl.converters.tflite gives the Edge TPU's input
    features. One int8 range serves all the units: unbalanced, the widest few set its step and
    the narrow rest, which the next layer may weigh heavily, got a handful of levels (a DQN
    CartPole network: the Q-value gap's error from this activation alone 0.2, while a quarter
    of its gaps are under 0.3)."""
    (kernel_0, bias_0), (kernel_1, bias_1) = weights[0], weights[1]
    units = kernel_0.shape[1]
    scales = input_scales(values[source].reshape(-1, units), kernel_1)
    weights = [(kernel_0 / scales, bias_0 / scales), (kernel_1 * scales[:, None], bias_1),
               *weights[2:]]
    return weights, {**values, source: values[source] / scales}


def scaled_units(weights: list, values: dict, k: int, source: int) -> tuple[list, dict]:
    """`weights` and twin `values` with unit j of layer k (output: twin tensor `source`)
    divided by t_j (its kernel column and bias) and the float layer k + 1's kernel row j
    multiplied by t_j: the same function (ReLU commutes with a positive scale). A unit's
    weights and its activation move together here, so nothing is traded as in
    `balanced_first_activation`: with t_j = max(w_j / max w, a_j / max a) (w_j: the largest
    |weight| of the unit's column, a_j: its largest |value| over the rows) no unit's weights or
    activation grow past the widest's, neither shared int8 step grows, and unit j's rounding
    errors, in the float layer's terms, shrink by t_j <= 1. TF 2.15 gives a FULLY_CONNECTED
    kernel one int8 scale; a 98%-sparse Hopper actor's middle-layer units spanned largest
    weights from 3.6 down to under 0.1, the narrow ones' weights left a few int8 levels each."""
    (kernel, bias), (kernel_after, bias_after) = weights[k], weights[k + 1]
    units = kernel.shape[1]
    row = np.abs(kernel).max(axis=0).astype(np.float64)
    active = np.abs(values[source]).reshape(-1, units).max(axis=0).astype(np.float64)
    if row.max() <= 0 or active.max() <= 0:
        return weights, values
    t = np.maximum(np.maximum(row / row.max(), active / active.max()), UNIT_SCALE_FLOOR)
    t = t.astype(np.float32)
    weights = [*weights[:k], (kernel / t, bias / t), (kernel_after * t[:, None], bias_after),
               *weights[k + 2:]]
    return weights, {**values, source: values[source] / t}
