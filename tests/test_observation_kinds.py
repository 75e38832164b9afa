"""Observation kinds are a seam: env description, network builder, converter, policy file and
device input each ask the kind, so a new kind (images, next) plugs in without touching them."""

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

from edge_rl.device.errors import PolicyFileError, UserError
from edge_rl.device.observations import (
    FRAMES,
    KINDS,
    PLANES,
    VECTOR,
    ObservationKind,
    ObservationSpec,
    describe_observations,
    register_observation_kind,
)
from edge_rl.device.policy_file import PolicyMetadata

ACTION = {"kind": "discrete", "n": 2}


class ByteVector(ObservationKind):
    """A user's kind: rank-1 uint8 observations, fed to the network as they come."""

    def accepts(self, space) -> bool:
        return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
                and len(space.shape) == 1)


@pytest.fixture
def byte_kind():
    kind = ByteVector("bytes", "uint8")
    # first, so that it is asked before `vector` (which takes any Box of numbers)
    saved = dict(KINDS)
    KINDS.clear()
    register_observation_kind(kind)
    KINDS.update(saved)
    try:
        yield kind
    finally:
        KINDS.clear()
        KINDS.update(saved)


def metadata(observation: str, precision: str = "fp32") -> PolicyMetadata:
    return PolicyMetadata(env_id="Bytes-v0", algo="dqn", precision=precision, output="q_values",
                          observation_shape=(6,), action=ACTION, observation=observation)


def test_the_env_description_asks_the_kinds_in_order(byte_kind):
    floats = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert describe_observations(floats) == ObservationSpec(VECTOR, (3,))
    assert describe_observations(gym.spaces.Box(0, 255, (6,), np.uint8)).kind is byte_kind
    frames = describe_observations(gym.spaces.Box(0, 255, (16, 16, 3), np.uint8))
    assert frames == ObservationSpec(FRAMES, (16, 16, 3)) and frames.is_image
    assert describe_observations(gym.spaces.Box(0, 255, (84, 84), np.uint8)).kind is FRAMES
    planes = describe_observations(gym.spaces.Box(0, 1, (10, 10, 4), np.bool_))
    assert planes == ObservationSpec(PLANES, (10, 10, 4))
    assert PLANES.as_stored(np.ones((10, 10, 4), np.bool_)).dtype == np.uint8
    with pytest.raises(UserError, match="is not supported"):  # a clip of frames
        describe_observations(gym.spaces.Box(0, 255, (2, 16, 16, 3), np.uint8))


def test_policy_metadata_names_the_kind_and_refuses_one_it_does_not_know(byte_kind):
    # a vector policy's document is what runtimes that know only vectors read
    vector_doc = metadata(VECTOR.name).to_json()
    assert b'"observation"' not in vector_doc
    assert PolicyMetadata.from_json(vector_doc).observation == VECTOR.name
    assert PolicyMetadata.from_json(metadata("bytes").to_json()).observation == "bytes"
    unknown = metadata("bytes").to_json().replace(b'"bytes"', b'"point-cloud"')
    with pytest.raises(PolicyFileError, match="unknown kind 'point-cloud'"):
        PolicyMetadata.from_json(unknown)


def test_a_new_kind_reaches_the_network_converter_and_device_input(byte_kind):
    from edge_rl.agents.parts.networks import export_model
    from edge_rl.agents.parts.specs import tf_specs
    from edge_rl.converters import convert
    from edge_rl.converters.tflite import attach_metadata
    from edge_rl.device.policy import Policy
    from edge_rl.tf_setup import tf

    spec = ObservationSpec(byte_kind, (6,))
    time_step_spec, _ = tf_specs(spec, ACTION)
    assert time_step_spec.observation.dtype == tf.uint8
    tf.keras.utils.set_random_seed(0)
    layers = [tf.keras.layers.Lambda(lambda x: tf.cast(x, tf.float32) / 255.0),
              tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(2)]
    model = export_model(spec, layers)
    assert model.inputs[0].dtype == tf.uint8

    policy_file = convert(model, "fp32", None, metadata("bytes"))
    policy = Policy(policy_file)
    frames = np.random.default_rng(0).integers(0, 256, (32, 6)).astype(np.uint8)
    # the device feeds the kind's dtype: uint8 values as they are, no float conversion
    np.testing.assert_allclose(policy.outputs(frames), model(frames).numpy(), atol=1e-5)

    # a file whose metadata says float vectors for a uint8 network is refused, not mis-fed
    mislabelled = attach_metadata(policy_file, replace(metadata("bytes"), observation="vector"))
    with pytest.raises(PolicyFileError, match="input is uint8; vector observations are float32"):
        Policy(mislabelled)
    # int8 for integer observations needs their range: refused for a kind without value_max
    with pytest.raises(ValueError, match="not supported yet"):
        convert(model, "int8", frames, metadata("bytes", "int8"))
