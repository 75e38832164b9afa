"""The framework baseline (--actor-precision tf-fp32): TF-Agents' policy, broadcast and run."""

import io
import zipfile

import numpy as np
import pytest

from edge_rl.agents import get_algorithm
from edge_rl.algorithm import resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.device import PolicyFileError
from edge_rl.device.envs import describe_env
from edge_rl.device.policy import Policy, load_published
from edge_rl.loop.learner import Learner
from edge_rl.tf_policy import TFAgentsPolicy, unpack_saved_policy
from edge_rl.tf_setup import tf


def learner_for(algo: str, env: str) -> Learner:
    tf.keras.utils.set_random_seed(0)
    factory = get_algorithm(algo)
    observation, action = describe_env(env)
    config = resolve_defaults(factory, TrainConfig(algo=algo, env=env, hidden=(64, 64),
                                                   actor_precision="tf-fp32"))
    return Learner(factory, config, observation, action)


def move_weights(learner: Learner, rng: np.random.Generator) -> None:
    """Change every weight of the acting network, as training would."""
    for layer in learner.built.actor_network.layers:
        layer.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(w.dtype)
                           for w in layer.get_weights()])


@pytest.mark.parametrize("algo, env", [("dqn", "CartPole-v1"), ("td3", "HalfCheetah-v5")])
def test_broadcasts_act_like_the_learner_and_follow_its_updates(algo, env):
    learner = learner_for(algo, env)
    rng = np.random.default_rng(0)
    shape = learner.observation.shape
    observations = rng.normal(size=(64, *shape)).astype(np.float32)

    first = load_published(learner.publish_tf_agents(1))
    assert isinstance(first, TFAgentsPolicy) and first.version == 1
    assert first.metadata.precision == "tf-fp32" and first.metadata.algo == algo
    np.testing.assert_allclose(first.act(observations), learner.greedy_actions(observations),
                               atol=1e-5)

    move_weights(learner, rng)
    expected = learner.greedy_actions(observations)
    second = load_published(learner.publish_tf_agents(2), previous=first)
    assert second.loaded is first.loaded  # the graph is reused; only variables are read
    np.testing.assert_allclose(second.act(observations), expected, atol=1e-5)
    # one row at a time, as an actor with one env steps
    np.testing.assert_allclose(second.act(observations[:1]), expected[:1], atol=1e-5)

    # the learner still evaluates a policy file of the same weights (fp32)
    tflite = Policy(learner.publish("fp32", observations, 2)[0])
    np.testing.assert_allclose(tflite.act(observations), expected, atol=1e-4)


def test_broken_or_hostile_broadcasts_are_refused():
    learner = learner_for("dqn", "CartPole-v1")
    good = learner.publish_tf_agents(1)
    with pytest.raises(PolicyFileError, match="not a readable zip"):
        TFAgentsPolicy(good[: len(good) // 2])

    def rezip(files: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, data in files.items():
                archive.writestr(name, data)
        return buffer.getvalue()

    _, files = unpack_saved_policy(good)
    with pytest.raises(PolicyFileError, match="no edge-rl metadata"):
        TFAgentsPolicy(rezip(files))
    with zipfile.ZipFile(io.BytesIO(good)) as archive:
        everything = {n: archive.read(n) for n in archive.namelist()}
    with pytest.raises(PolicyFileError, match="outside its folder"):
        TFAgentsPolicy(rezip({**everything, "../escape": b"x"}))


def test_the_baseline_is_for_dense_dqn_td3_and_d4pg():
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.device.errors import UserError

    with pytest.raises(UserError, match="cannot run sac's policy"):
        resolve_defaults(get_algorithm("sac"),
                         TrainConfig(algo="sac", env="Pendulum-v1", actor_precision="tf-fp32"))
    for algo in ("dqn", "td3", "d4pg"):
        assert get_algorithm(algo).tf_agents_baseline
    with pytest.raises(UserError, match="dense baseline"):
        TrainConfig(algo="td3", env="Pendulum-v1", actor_precision="tf-fp32",
                    sparsity=0.9).validate()
