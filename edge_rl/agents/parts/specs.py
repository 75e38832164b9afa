"""TF-Agents specs from the env's observations (kind and shape) and action dict."""

from __future__ import annotations

import numpy as np
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from edge_rl.device.observations import ObservationSpec
from edge_rl.tf_setup import tf


def tf_specs(observation: ObservationSpec, action: dict):
    observation_spec = tensor_spec.TensorSpec(observation.shape, tf.as_dtype(observation.dtype),
                                              name="observation")
    if action["kind"] == "discrete":
        action_spec = tensor_spec.BoundedTensorSpec(
            (), tf.int64, minimum=0, maximum=action["n"] - 1, name="action"
        )
    else:
        action_spec = tensor_spec.BoundedTensorSpec(
            tuple(action["shape"]),
            tf.float32,
            minimum=np.asarray(action["low"], np.float32),
            maximum=np.asarray(action["high"], np.float32),
            name="action",
        )
    return ts.time_step_spec(observation_spec), action_spec
