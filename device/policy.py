"""A policy on the device: TFLite bytes + their metadata, turned into actions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_rl.device.policy_file import (
    PolicyFileError,
    PolicyMetadata,
    output_quantization,
    read_policy_metadata,
    unpack_policy,
    verify_model,
)
from edge_rl.device.runtime import Runtime, load_runtime


class Policy:
    """Runs the exported actor network; `act` gives greedy actions, `outputs` the raw ones."""

    def __init__(
        self,
        model: bytes,
        runtime: Runtime | None = None,
        num_threads: int = 1,
    ):
        self.model = unpack_policy(model)
        self.metadata: PolicyMetadata = read_policy_metadata(self.model)
        verify_model(self.model)  # before an interpreter that does not verify can crash on it
        self.runtime = runtime or load_runtime()
        try:
            self._interpreter = self.runtime.interpreter_class(
                model_content=self.model, num_threads=num_threads
            )
            self._interpreter.allocate_tensors()
            inputs = self._interpreter.get_input_details()
            outputs = self._interpreter.get_output_details()
        except (ValueError, RuntimeError) as err:  # UnicodeDecodeError is a ValueError
            message = f"the TFLite runtime cannot load this model: {_first_line(err)}"
            raise PolicyFileError(message) from None
        if len(inputs) != 1 or len(outputs) != 1:
            raise PolicyFileError("a policy network must have exactly one input and one output")
        self._input_index = inputs[0]["index"]
        self._output_index = outputs[0]["index"]
        self._batch = int(inputs[0]["shape"][0])
        meta = self.metadata
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
        self.low = self.high = None
        if meta.action["kind"] == "continuous":
            self.low = np.asarray(meta.action["low"], np.float32)
            self.high = np.asarray(meta.action["high"], np.float32)
        try:  # one run now, so that a network that cannot run fails here and not mid-episode
            self.outputs(np.zeros((self._batch, *meta.observation_shape), np.float32))
        except (ValueError, RuntimeError) as err:
            message = f"the TFLite runtime cannot run this model: {_first_line(err)}"
            raise PolicyFileError(message) from None

    @property
    def version(self) -> int:
        return self.metadata.policy_version

    @property
    def output_quantization(self) -> tuple[float, int]:
        """(scale, zero_point) of the int8 tensor the output is dequantized from; (0.0, 0) if none.

        The scale is an int8 policy's output step: outputs differ from the float network's
        in multiples of it.
        """
        return output_quantization(self.model)

    def outputs(self, observations: np.ndarray) -> np.ndarray:
        """The network's output for a batch of observations, as float32."""
        obs = np.asarray(observations, dtype=np.float32)
        if self._input_multiplier is not None:
            obs = obs * self._input_multiplier
        if obs.shape[0] != self._batch:
            self._interpreter.resize_tensor_input(self._input_index, list(obs.shape))
            self._interpreter.allocate_tensors()
            self._batch = obs.shape[0]
        self._interpreter.set_tensor(self._input_index, obs)
        self._interpreter.invoke()
        return self._interpreter.get_tensor(self._output_index).astype(np.float32, copy=False)

    def greedy(self, outputs: np.ndarray) -> np.ndarray:
        """The noise-free action for each row of network outputs."""
        return greedy_actions(self.metadata.output, outputs, self.low, self.high)

    def act(self, observations: np.ndarray) -> np.ndarray:
        """Greedy actions for a batch of observations (shape [batch, *observation_shape])."""
        return self.greedy(self.outputs(observations))


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def greedy_actions(output_kind: str, outputs: np.ndarray, low: np.ndarray | None,
                   high: np.ndarray | None) -> np.ndarray:
    """The noise-free actions for rows of a policy network's outputs (see PolicyMetadata.output):
    argmax of Q-values, the clipped action, or the squashed Gaussian's mode."""
    if output_kind == "q_values":
        return np.argmax(outputs, axis=-1).astype(np.int64)
    if output_kind == "action":
        return np.clip(outputs, low, high)
    mean = outputs[..., : outputs.shape[-1] // 2]
    return squash_to_bounds(np.tanh(mean), low, high)


def squash_to_bounds(unit: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map values in [-1, 1] onto [low, high]."""
    return (low + (unit + 1.0) * 0.5 * (high - low)).astype(np.float32)


ZIP_MAGIC = b"PK\x03\x04"  # a TF-Agents SavedModel policy (edge_rl.tf_policy); TFLite is not


def load_published(data: bytes, runtime: Runtime | None = None, previous=None):
    """The policy a learner published: a TFLite policy file, or with `--actor-precision
    tf-fp32` (the framework baseline) a TF-Agents SavedModel, which needs TensorFlow here.
    `previous`, the policy it replaces, lets a TF-Agents policy reuse its loaded graph."""
    if bytes(data[:4]) != ZIP_MAGIC:
        return Policy(data, runtime=runtime)
    try:
        from edge_rl.tf_policy import TFAgentsPolicy
    except ImportError as err:
        raise PolicyFileError(
            "the learner publishes TF-Agents policies (--actor-precision tf-fp32, the framework "
            f"baseline); acting with them needs TensorFlow: pip install 'edge-rl[train]' ({err})"
        ) from None
    return TFAgentsPolicy(data, previous)


def load_policy(path: str | Path, runtime: Runtime | None = None, num_threads: int = 1) -> Policy:
    """Load a policy file written by `edge-rl export` (or published by a learner)."""
    path = Path(path)
    if not path.is_file():
        raise PolicyFileError(f"no policy file at {path}")
    return Policy(path.read_bytes(), runtime=runtime, num_threads=num_threads)
