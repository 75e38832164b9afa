"""A policy on the device: TFLite bytes + their metadata, turned into actions.

Inputs and outputs are float32 for the callers whatever the file holds: a fully integer file
(precision "edgetpu": int8 input and output) gets observations quantized with its input's
(scale, zero point) and outputs dequantized with its output's, so exploration and the env
see floats. `delegate="edgetpu"` runs the network through Coral's libedgetpu.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edge_rl.core import ActorPolicy
from edge_rl.device.observations import KINDS as OBSERVATION_KINDS
from edge_rl.device.outputs import greedy_actions, output_count
from edge_rl.device.policy_file import (
    PolicyFileError,
    PolicyMetadata,
    output_quantization,
    output_step,
    read_policy_metadata,
    unpack_policy,
    verify_model,
)
from edge_rl.device.runtime import (
    EDGETPU_CUSTOM_OP,
    EDGETPU_INSTALL_HINT,
    Runtime,
    load_delegate,
    load_runtime,
)
from edge_rl.device.tflite_file import custom_op_names

log = logging.getLogger(__name__)


class Policy(ActorPolicy):
    """Runs the exported actor network; `act` gives greedy actions, `outputs` the raw ones.

    `delegate`: None (the CPU) or a name in edge_rl.device.runtime.DELEGATES ("edgetpu").
    """

    def __init__(
        self,
        model: bytes,
        runtime: Runtime | None = None,
        num_threads: int = 1,
        delegate: str | None = None,
    ):
        self.model = unpack_policy(model)
        self.metadata: PolicyMetadata = read_policy_metadata(self.model)
        verify_model(self.model)  # before an interpreter that does not verify can crash on it
        self.runtime = runtime or load_runtime()
        self.delegate = delegate
        options = {}
        compiled = EDGETPU_CUSTOM_OP in custom_op_names(self.model)
        if delegate is not None:
            options["experimental_delegates"] = [load_delegate(self.runtime, delegate)]
            if delegate == "edgetpu" and not compiled:
                log.warning("this policy was not compiled with edgetpu_compiler (it has no "
                               "%s): every op runs on the CPU", EDGETPU_CUSTOM_OP)
        elif compiled:
            raise PolicyFileError("this policy was compiled for the Edge TPU: run it with "
                                  "--delegate edgetpu")
        try:
            self._interpreter = self.runtime.interpreter_class(
                model_content=self.model, num_threads=num_threads, **options
            )
            self._interpreter.allocate_tensors()
            inputs = self._interpreter.get_input_details()
            outputs = self._interpreter.get_output_details()
        except (ValueError, RuntimeError) as err:  # UnicodeDecodeError is a ValueError
            message = f"the TFLite runtime cannot load this model: {_first_line(err)}"
            if delegate == "edgetpu":
                message += f" (with the Edge TPU delegate; {EDGETPU_INSTALL_HINT})"
            raise PolicyFileError(message) from None
        meta = self.metadata
        n_outputs = output_count(meta.output)
        if len(inputs) != 1 or len(outputs) != n_outputs:
            raise PolicyFileError(f"a {meta.output} policy network must have exactly one input "
                                  f"and {n_outputs} output{'s' if n_outputs > 1 else ''}")
        if n_outputs > 1:  # the greedy action first: its last dimension is the narrower
            outputs = sorted(outputs, key=lambda details: int(details["shape"][-1]))
        self._input_index = inputs[0]["index"]
        self._output_indices = [details["index"] for details in outputs]
        self._batch = int(inputs[0]["shape"][0])
        # a delegate's graph is compiled for its batch size: larger batches go row by row
        self._fixed_batch = delegate is not None and self._batch == 1
        if tuple(int(d) for d in inputs[0]["shape"][1:]) != tuple(meta.observation_shape):
            raise PolicyFileError(
                f"the network takes inputs of shape {list(inputs[0]['shape'][1:])}, the metadata "
                f"says observations have shape {list(meta.observation_shape)}"
            )
        # Format 2 files: the network expects each feature divided by its input scale
        self._input_multiplier = None
        if meta.input_scale is not None:
            self._input_multiplier = (1.0 / np.asarray(meta.input_scale, np.float32)).reshape(
                meta.observation_shape)
        # What the env's observations become before anything else: their kind's stored dtype,
        # which is what the network takes unless its input is quantized.
        self.observation_kind = OBSERVATION_KINDS[meta.observation]
        input_dtype = np.dtype(inputs[0]["dtype"])
        takes_observations = input_dtype == np.dtype(self.observation_kind.stored_dtype)
        # or quantized integers made from float observations (int8 files for the Edge TPU)
        quantized = input_dtype.kind in "iu" and bool(inputs[0]["quantization"][0])
        if not takes_observations and not (quantized
                                           and self.observation_kind.stored_dtype == "float32"):
            raise PolicyFileError(
                f"the network's input is {input_dtype.name}; {meta.observation} observations "
                f"are {self.observation_kind.stored_dtype}")
        # Quantized integer input: observation * multiplier / scale + zero point, rounded and
        # clipped, folded into one factor. Integer output: (q - zero point) * scale.
        self._quantize = self._dequantize = None
        if not takes_observations:
            self._quantize = _quantizer(inputs[0], self._input_multiplier)
            self._input_multiplier = None
        if np.dtype(outputs[0]["dtype"]).kind in "iu":
            scale, zero_point = _tensor_quantization(outputs[0])
            self._dequantize = (np.float32(scale), np.float32(zero_point))
        # each integer output's own (scale, zero point); None for float outputs
        self._dequantize_each = [
            tuple(np.float32(x) for x in _tensor_quantization(details))
            if np.dtype(details["dtype"]).kind in "iu" else None for details in outputs]
        self.low = self.high = None
        if meta.action["kind"] == "continuous":
            self.low = np.asarray(meta.action["low"], np.float32)
            self.high = np.asarray(meta.action["high"], np.float32)
        try:  # one run now, so that a network that cannot run fails here and not mid-episode
            self.outputs(np.zeros((self._batch, *meta.observation_shape),
                                  self.observation_kind.stored_dtype))
        except (ValueError, RuntimeError) as err:
            message = f"the TFLite runtime cannot run this model: {_first_line(err)}"
            raise PolicyFileError(message) from None

    @property
    def version(self) -> int:
        return self.metadata.policy_version

    @property
    def output_quantization(self) -> tuple[float, int]:
        """(scale, zero_point) of the integer tensor the output comes from; (0.0, 0) if none.

        The scale is an int8 policy's output step: outputs differ from the float network's
        in multiples of it.
        """
        if self._dequantize is not None:  # the network's own output is the integer tensor
            scale, zero_point = self._dequantize
            return float(scale), int(zero_point)
        return output_quantization(self.model)

    @property
    def output_step(self) -> float:
        """How far one int8 rounding step moves an output (edge_rl.device.tflite_file's
        output_step); 0.0 for float policies."""
        if self._dequantize is not None:
            return float(self._dequantize[0])
        return output_step(self.model)

    @property
    def input_quantization(self) -> tuple[float, int]:
        """(scale, zero point) of the integer tensor observations are quantized into: the input
        itself (edgetpu files), or what a QUANTIZE op makes of the float input (int8 files
        made before 2026-11-23); (0.0, 0) when a float layer reads them (int8 files since,
        fp32, fp16). The grid is in the units of observations divided by the metadata's
        input_scale, when it has one."""
        details = self._interpreter.get_input_details()[0]
        if np.dtype(details["dtype"]).kind in "iu":
            return _tensor_quantization(details)
        tensors = {t["index"]: t for t in self._interpreter.get_tensor_details()}
        for op in self._interpreter._get_ops_details():
            if op["op_name"] == "QUANTIZE" and self._input_index in list(op["inputs"]):
                scale, zero_point = tensors[int(op["outputs"][0])]["quantization"]
                if scale:
                    return float(scale), int(zero_point)
        return 0.0, 0

    def outputs(self, observations: np.ndarray) -> np.ndarray:
        """The network's output for a batch of observations, as float32; for two-output kinds
        (squashed_gaussian) both, concatenated along the last axis in the kind's order."""
        obs = self.observation_kind.as_stored(observations)
        if self._input_multiplier is not None:
            obs = obs * self._input_multiplier
        elif self._quantize is not None:
            factor, zero_point, dtype, low, high = self._quantize
            obs = np.clip(np.rint(obs * factor) + zero_point, low, high).astype(dtype)
        if obs.shape[0] == self._batch:
            raw = self._run(obs)
        elif self._fixed_batch:
            raw = np.concatenate([self._run(obs[i : i + 1]) for i in range(obs.shape[0])])
        else:
            self._interpreter.resize_tensor_input(self._input_index, list(obs.shape))
            self._interpreter.allocate_tensors()
            self._batch = obs.shape[0]
            raw = self._run(obs)
        return raw

    def _run(self, network_input: np.ndarray) -> np.ndarray:
        self._interpreter.set_tensor(self._input_index, network_input)
        self._interpreter.invoke()
        each = []
        for index, dequantize in zip(self._output_indices, self._dequantize_each, strict=True):
            raw = self._interpreter.get_tensor(index)
            if dequantize is None:
                each.append(raw.astype(np.float32, copy=False))
            else:
                scale, zero_point = dequantize
                each.append((raw.astype(np.float32) - zero_point) * scale)
        return each[0] if len(each) == 1 else np.concatenate(each, axis=-1)

    def greedy(self, outputs: np.ndarray) -> np.ndarray:
        """The noise-free action for each row of network outputs."""
        return greedy_actions(self.metadata.output, outputs, self.low, self.high)



def _tensor_quantization(details: dict) -> tuple[float, int]:
    scale, zero_point = details.get("quantization", (0.0, 0))
    if not scale:
        raise PolicyFileError(f"the network's integer tensor {details.get('name')!r} has no "
                              "quantization parameters")
    return float(scale), int(zero_point)


def _quantizer(details: dict, multiplier: np.ndarray | None) -> tuple:
    """(factor, zero point, dtype, low, high) that turn observations into the input tensor."""
    scale, zero_point = _tensor_quantization(details)
    factor = np.float32(1.0 / scale) if multiplier is None else multiplier / np.float32(scale)
    dtype = np.dtype(details["dtype"])
    info = np.iinfo(dtype)
    return factor.astype(np.float32), np.float32(zero_point), dtype, info.min, info.max


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


ZIP_MAGIC = b"PK\x03\x04"  # a TF-Agents SavedModel policy (edge_rl.tf_policy); TFLite is not

# (policy bytes, the policy they replace or None) -> the policy
PublishedLoader = Callable[[bytes, Any], ActorPolicy]
# Published policies that are not TFLite files, by their first bytes. The side that knows the
# format registers its loader (the `edge-rl actor` command registers TF-Agents' zips of
# --actor-precision tf-fp32): nothing here imports the learner's modules or TensorFlow.
PUBLISHED_FORMATS: dict[bytes, PublishedLoader] = {}


def register_published_format(magic: bytes, loader: PublishedLoader) -> None:
    """Make `load_published` hand policies whose bytes start with `magic` to `loader`."""
    PUBLISHED_FORMATS[bytes(magic)] = loader


def load_published(data: bytes, runtime: Runtime | None = None, previous=None,
                   delegate: str | None = None) -> ActorPolicy:
    """The policy a learner published: a TFLite policy file, or one of a registered format
    (register_published_format), e.g. with `--actor-precision tf-fp32` (the framework
    baseline) a TF-Agents SavedModel. `previous`, the policy it replaces, lets such a loader
    reuse what it loaded. `delegate` (TFLite policies only): see Policy."""
    loader = next((load for magic, load in PUBLISHED_FORMATS.items()
                   if bytes(data[:len(magic)]) == magic), None)
    if loader is None and bytes(data[:4]) == ZIP_MAGIC:
        raise PolicyFileError(
            "the learner publishes TF-Agents policies (--actor-precision tf-fp32, the framework "
            "baseline), which this process cannot load: run the actor as `edge-rl actor`, with "
            "TensorFlow installed (pip install 'edge-rl[train]')")
    if loader is None:
        return Policy(data, runtime=runtime, delegate=delegate)
    if delegate is not None:
        raise PolicyFileError(f"the {delegate} delegate runs TFLite policies only, not this "
                              "learner's (e.g. the TF-Agents policies of --actor-precision "
                              "tf-fp32)")
    return loader(data, previous)


def load_policy(path: str | Path, runtime: Runtime | None = None, num_threads: int = 1,
                delegate: str | None = None) -> Policy:
    """Load a policy file written by `edge-rl export` (or published by a learner); `delegate`:
    see Policy."""
    path = Path(path)
    if not path.is_file():
        raise PolicyFileError(f"no policy file at {path}")
    try:
        return Policy(path.read_bytes(), runtime=runtime, num_threads=num_threads,
                      delegate=delegate)
    except PolicyFileError as err:  # which file, for a user who gave several
        raise PolicyFileError(f"{path}: {err}") from None
