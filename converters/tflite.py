"""Keras actor network -> TFLite policy file (fp32, fp16, int8, edgetpu) with edge-rl's metadata.

    flat = convert(model, "int8", calibration=observations, metadata=meta)
    Path("policy.tflite").write_bytes(flat)

The network must take one float32 input [batch, *observation_shape] and give one float32
output. It is traced with a fixed batch of 1; the device runtime resizes the input for larger
batches (`convert` checks that this works). "int8" quantizes weights and activations with
observations as the representative dataset but keeps float32 input and output, so the device
feeds and reads floats whatever the precision.

An int8 network's input is quantized with one scale for the whole observation, so when its
features have very different ranges (angles in [-1, 1], velocities of +-50) the narrow ones
get a few int8 levels, and a steep policy's action moves by percents of its range within one
level. When the network starts with a Dense layer, "int8" therefore computes that layer in
float32 from the raw observation and quantizes its output (edge_rl.converters.flatbuffer):
int8 from the first hidden activation on, the first layer (features x units) tiny beside the
rest. Any TFLite runtime is then fed the env's raw observations, with nothing in between.

"int8" also computes the last Dense layer, and the ops after it (tanh and the scaling to the
action bounds, or the centring of Q-values), in float32 from the dequantized last hidden
activation: an int8 output adds its rounding straight to the action (a TD3 InvertedPendulum
actor: 0.46% of the action range against 0.28% with the float output stage). The file's
output step (Policy.output_step) is then what one int8 level of that activation moves an
output by.

"edgetpu" cannot keep a float layer (the Edge TPU runs integer ops only, and one CPU op before
them would keep the whole graph on the CPU), so there each feature gets its own scale s_i: the
kernel's row for feature i is multiplied by s_i and the caller divides feature i by s_i (the
metadata's `input_scale`, format 2; docs/coral.md). That trade moves range from the input
into the weights, which the Edge TPU quantizes with one scale per tensor: s_i = feature i's
largest |value| would even out the inputs but leave rows of velocities 50x larger than the
others (measured on walker-stand with int8 weights: the first layer's weights alone then
cost 0.16 of action, against 0.006 unscaled). So s_i balances the two, as SmoothQuant does:
s_i = sqrt(a_i / w_i), with a_i the feature's largest |value| in the calibration rows and
w_i the largest |weight| of its kernel row. The scaled feature and the scaled row then both
span sqrt(a_i * w_i), a feature's share of either int8 grid growing with the most it can add
to the layer's output.

Ranges fixed by mathematics are never taken from data (edge_rl.converters.ranges): a TANH's input
and the scaling of its output to the action bounds. All other activations are calibrated on
the rows given: give many and varied ones (see edge_rl.runs.best_policy).

"edgetpu" is int8 made for Coral's Edge TPU (see edge_rl.converters.edgetpu): int8 input and
output too (no float QUANTIZE/DEQUANTIZE at the boundary: the device quantizes observations
and dequantizes outputs itself), one scale per weight tensor, shapes fixed at batch 1 (the
Edge TPU compiler compiles them in; the batch-resize check is skipped), the per-feature input
scales above, and the result checked against Coral's requirements (ValueError if it fails).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils

from edge_rl.config import EXPORT_PRECISIONS as PRECISIONS  # what a policy file can be
from edge_rl.converters.flatbuffer import (
    float_input_layer,
    float_output_stage,
    integer_input,
    narrow_outputs_first,
    read_model,
    text,
)
from edge_rl.converters.ranges import bounded_ranges, set_ranges
from edge_rl.device.observations import KINDS as OBSERVATION_KINDS
from edge_rl.device.outputs import output_count
from edge_rl.device.policy_file import METADATA_NAME, PolicyMetadata
from edge_rl.tf_setup import tf

# Precisions with int8 weights and activations, calibrated on observations.
INTEGER_PRECISIONS = ("int8", "edgetpu")

# Calibration rows fed to the int8 quantizer, one at a time with batch 1.
MAX_CALIBRATION_ROWS = 3000
# A feature whose calibration range (or kernel row) is narrower than this fraction of the widest
# feature's (row's) is scaled as if it were that wide: a feature that stayed 0, or a row that
# pruning emptied, must not be blown up to the grid.
INPUT_SCALE_FLOOR = 1e-3



def convert(
    model: Any,
    precision: str,
    calibration: np.ndarray | None,
    metadata: PolicyMetadata,
    sparse_encoding: bool = False,
) -> bytes:
    """A TFLite policy file (bytes) for a Keras `model` at `precision`, with `metadata` attached.

    precision: "fp32" (plain), "fp16" (float16 weights), "int8" (int8 weights and
    activations, float32 input and output; needs `calibration`, rows of real observations of
    shape [n, *observation_shape], of which up to MAX_CALIBRATION_ROWS are used) or "edgetpu"
    (int8 throughout, input and output included, for Coral's Edge TPU; needs `calibration`).
    `metadata.precision` must name the same precision. `sparse_encoding` stores weights that
    are mostly zero in TFLite's sparse format. Raises ValueError for bad arguments, and for
    "edgetpu" when the network cannot be made fully integer or breaks the Edge TPU's rules
    (the message names the operator or tensor).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if metadata.precision != precision:
        raise ValueError(
            f"the metadata says precision {metadata.precision!r} but {precision!r} was asked for"
        )
    if precision == "edgetpu" and sparse_encoding:
        raise ValueError("the Edge TPU does not read TFLite's sparse weight encoding")
    obs_shape = tuple(int(d) for d in metadata.observation_shape)
    # the network's input takes observations as their kind stores them (float32 for vectors)
    kind = OBSERVATION_KINDS[metadata.observation]
    obs_dtype = kind.stored_dtype
    # integer observations keep their dtype at an int8 file's input, which maps the kind's
    # fixed range [0, value_max] onto the int8 grid (integer_input); kinds without one
    # would need a stated scale
    if precision in INTEGER_PRECISIONS and obs_dtype != "float32" and kind.value_max is None:
        raise ValueError(f"{precision} conversion of {metadata.observation} observations "
                         f"({obs_dtype}) is not supported yet")
    _check_model(model, obs_shape, metadata.output)
    rows = scales = first = None
    if precision in INTEGER_PRECISIONS:
        if calibration is None:
            raise ValueError(f"{precision} conversion needs calibration observations")
        rows = calibration_rows(calibration, obs_shape)
        first = input_layer(model, obs_shape)
        if first is not None and precision == "edgetpu":  # the caller divides (docs/coral.md)
            scales = input_scales(rows, first.kernel.numpy())
            rows = rows / scales.reshape(obs_shape)
            metadata = replace(metadata, input_scale=tuple(float(x) for x in scales))

    # No AutoGraph: a Keras model's call is graph code as written, and converting Keras' own
    # source to AutoGraph took ~3 s of the run's first conversion here.
    @tf.function(input_signature=[tf.TensorSpec([1, *obs_shape], tf.as_dtype(obs_dtype),
                                                name="observation")], autograph=False)
    def policy(observation):
        return model(observation, training=False)

    # The converter saves the function with an object that holds its variables. A plain module
    # of the model's variables, not the Keras model: saving a Keras model also traces its
    # serving signature through AutoGraph (~3 s of the run's first conversion here).
    holder = tf.Module()
    holder.weights = list(model.variables)
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [policy.get_concrete_function()], holder
    )
    if precision == "fp16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif precision in INTEGER_PRECISIONS:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([row[None].astype(obs_dtype)]
                                                     for row in rows)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        edgetpu = precision == "edgetpu"
        # float observations: int8 for the Edge TPU (the device quantizes them), float
        # otherwise; integer ones (frames) keep their dtype
        converter.inference_input_type = (tf.int8 if edgetpu and obs_dtype == "float32"
                                          else tf.as_dtype(obs_dtype))
        converter.inference_output_type = tf.int8 if edgetpu else tf.float32
    if precision == "edgetpu":
        # One scale per weight tensor. Newer converters quantize Dense kernels per output
        # channel by default, which the last Edge TPU compiler (16.0, 2021) predates.
        converter._experimental_disable_per_channel = True
        converter._experimental_disable_per_channel_quantization_for_dense_layers = True
    if sparse_encoding:
        converter.optimizations = [*converter.optimizations,
                                   tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    # the variables are read when the converter freezes them, so the scaled kernel is only
    # needed for the duration of the conversion
    with scaled_kernel_rows(first, scales), _quiet_stderr():
        flat = _run_converter(converter, precision)
        if output_count(metadata.output) == 2:
            flat = narrow_outputs_first(flat)
        if precision in INTEGER_PRECISIONS:
            flat = set_ranges(flat, bounded_ranges(read_model(flat)))
        if kind.value_max is not None:  # integer observations with a fixed range
            flat = integer_input(flat, kind.value_max)
        if precision == "int8" and first is not None:
            flat = float_input_layer(flat, *_kernel_and_bias(first))
        if precision == "int8" and (last := output_layer(model)) is not None:
            flat = float_output_stage(flat, *_kernel_and_bias(last))
        if precision != "edgetpu":  # an Edge TPU model keeps batch 1: it is compiled in
            _check_batches(flat, obs_shape)
    if precision == "edgetpu":
        from edge_rl.converters.edgetpu import check_edgetpu  # it builds on this module

        check_edgetpu(flat)
    return attach_metadata(flat, metadata)


def _run_converter(converter: Any, precision: str) -> bytes:
    """converter.convert(); for "edgetpu" a failure is a one-line ValueError naming the op."""
    if precision != "edgetpu":
        return converter.convert()
    try:
        return converter.convert()
    except Exception as err:  # ConverterError, RuntimeError from the quantizer, ...
        raise ValueError("the network cannot be converted to a fully integer model: "
                         + _conversion_failure(str(err))) from err


def _conversion_failure(text: str) -> str:
    """The converter's complaint in one line: the TF op it names, else its first line."""
    found = re.search(r"'tf\.(\w+)' op", text) or re.search(r"op: '?(\w+)'?", text)
    if found:
        return f"operator {found.group(1)} has no int8 TFLite kernel"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else "the converter failed"


def input_layer(model: Any, obs_shape: tuple[int, ...]) -> Any:
    """The Dense layer the network starts with, whose kernel rows are the observation's
    features; None when the network starts otherwise (it then keeps one input scale)."""
    if len(obs_shape) != 1:
        return None
    layers = [layer for layer in getattr(model, "layers", [])
              if not isinstance(layer, tf.keras.layers.InputLayer)]
    if not layers or not isinstance(layers[0], tf.keras.layers.Dense):
        return None
    kernel = getattr(layers[0], "kernel", None)
    if kernel is None or tuple(kernel.shape)[0] != obs_shape[0]:
        return None
    return layers[0]


def output_layer(model: Any) -> Any:
    """The Dense layer whose outputs the network's last ops only rearrange (Q-values, action
    means): the last of two or more Dense layers; None otherwise."""
    dense = [layer for layer in getattr(model, "layers", [])
             if isinstance(layer, tf.keras.layers.Dense)]
    return dense[-1] if len(dense) >= 2 else None


def _kernel_and_bias(layer: Any) -> tuple[np.ndarray, np.ndarray]:
    kernel = layer.kernel.numpy()
    bias = layer.bias.numpy() if layer.bias is not None else np.zeros(kernel.shape[1], np.float32)
    return kernel, bias


def input_scales(rows: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Each feature's scale sqrt(a_i / w_i): a_i its largest |value| over calibration `rows`,
    w_i the largest |weight| in its row of the first Dense `kernel` [features, units], each
    floored at INPUT_SCALE_FLOOR of the largest; to 6 significant digits, numbers that the
    metadata's JSON keeps exactly."""
    absmax = _floored(np.abs(rows.reshape(len(rows), -1).astype(np.float64)).max(axis=0))
    rowmax = _floored(np.abs(np.asarray(kernel, np.float64)).max(axis=1))
    scales = np.sqrt(absmax / rowmax)
    return np.array([float(f"{x:.6g}") for x in scales], np.float32)


def _floored(values: np.ndarray) -> np.ndarray:
    return np.maximum(values, max(float(values.max()) * INPUT_SCALE_FLOOR, 1e-6))


@contextlib.contextmanager
def scaled_kernel_rows(layer: Any, scales: np.ndarray | None) -> Iterator[None]:
    """`layer`'s kernel with row i multiplied by scales[i] for the duration; then put back."""
    if layer is None or scales is None:
        yield
        return
    kernel = layer.kernel.numpy()
    layer.kernel.assign(kernel * scales.reshape(-1, 1))
    try:
        yield
    finally:
        layer.kernel.assign(kernel)


def calibration_rows(calibration: np.ndarray, obs_shape: tuple[int, ...]) -> np.ndarray:
    """Up to MAX_CALIBRATION_ROWS finite observations, evenly spaced over `calibration`, as
    float32."""
    obs = np.asarray(calibration)
    integer = np.issubdtype(obs.dtype, np.integer)
    if not integer:
        obs = obs.astype(np.float32, copy=False)
    size = int(np.prod(obs_shape))
    if obs.size == 0 or obs.size % size:
        raise ValueError(
            f"calibration data of shape {obs.shape} does not hold observations of shape {obs_shape}"
        )
    obs = obs.reshape(-1, *obs_shape)
    if not integer:  # integers (frames) are finite; as float32 they would be 4x the memory
        obs = obs[np.isfinite(obs.reshape(len(obs), -1)).all(axis=1)]
    if not len(obs):
        raise ValueError("the calibration data has no finite observations")
    if len(obs) > MAX_CALIBRATION_ROWS:
        obs = obs[np.linspace(0, len(obs) - 1, MAX_CALIBRATION_ROWS).round().astype(int)]
    return np.ascontiguousarray(obs, dtype=np.float32)


def attach_metadata(model_bytes: bytes, metadata: PolicyMetadata, spare_bytes: int = 0) -> bytes:
    """`model_bytes` with edge-rl's metadata entry set to `metadata` (added, or replaced).

    Other metadata entries (min_runtime_version, CONVERSION_METADATA, ...) are kept.
    `spare_bytes` pads the JSON with trailing spaces, room for later versions of it to be
    written in place (see edge_rl.converters.patch).
    """
    model = read_model(model_bytes)
    document = metadata.to_json() + b" " * spare_bytes
    data = np.frombuffer(document, dtype=np.uint8).copy()
    entries = list(model.metadata or [])
    ours = [m for m in entries if text(m.name) == METADATA_NAME]
    if ours and metadata.input_scale is None:
        stored = model.buffers[ours[0].buffer].data
        old = b"" if stored is None else bytes(stored)
        if b'"input_scale"' in old:  # a network built for scaled inputs, fed raw ones: wrong
            raise ValueError("this network takes observations divided by the input scales in "
                             "its metadata; the new metadata must keep them")
    if ours:
        # Reuse the first entry's buffer; empty the buffers of any duplicates.
        model.buffers[ours[0].buffer].data = data
        for extra in ours[1:]:
            model.buffers[extra.buffer].data = None
        entries = [m for m in entries if m not in ours[1:]]
    else:
        buffer = schema.BufferT()
        buffer.data = data
        model.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name = METADATA_NAME
        entry.buffer = len(model.buffers) - 1
        entries.append(entry)
    model.metadata = entries
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _check_model(model: Any, obs_shape: tuple[int, ...], output_kind: str) -> None:
    n_outputs = output_count(output_kind)
    inputs = getattr(model, "inputs", None)
    outputs = getattr(model, "outputs", None)
    if inputs is not None and len(inputs) != 1:
        raise ValueError(f"a policy network must have one input, this one has {len(inputs)}")
    if outputs is not None and len(outputs) != n_outputs:
        raise ValueError(f"a {output_kind} policy network must have {n_outputs} output"
                         f"{'s' if n_outputs > 1 else ''}, this one has {len(outputs)}")
    if inputs:
        shape = tuple(inputs[0].shape)[1:]
        if len(shape) != len(obs_shape) or any(
            d is not None and d != o for d, o in zip(shape, obs_shape, strict=True)
        ):
            raise ValueError(
                f"the network takes inputs of shape {shape}, the metadata says observations "
                f"have shape {obs_shape}"
            )


def _check_batches(flat: bytes, obs_shape: tuple[int, ...]) -> None:
    """The converted network must run on a batch other than 1 after resizing its input."""
    interpreter = tf.lite.Interpreter(model_content=flat)
    details = interpreter.get_input_details()[0]
    index = details["index"]
    try:
        interpreter.resize_tensor_input(index, [2, *obs_shape])
        interpreter.allocate_tensors()
        interpreter.set_tensor(index, np.zeros((2, *obs_shape), details["dtype"]))
        interpreter.invoke()
        out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    except (ValueError, RuntimeError) as err:
        raise ValueError(f"the converted network cannot run batches: {err}") from None
    if out.shape[0] != 2:
        raise ValueError(
            f"the converted network gives outputs of shape {out.shape} for a batch of 2"
        )


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the converter's C++ chatter on fd 2; show it only if conversion fails."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no real stderr (embedded interpreter): nothing to silence
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except Exception as err:
            sys.stderr.flush()
            os.dup2(saved, 2)
            sink.seek(0)
            chatter = sink.read().decode(errors="replace").strip()
            if chatter:
                err.add_note("converter output:\n" + "\n".join(chatter.splitlines()[-40:]))
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
