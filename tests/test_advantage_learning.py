"""DQN's --action-gap (advantage learning): each TD error is plain double DQN's less alpha times
the target network's gap between the best action and the one taken."""

import numpy as np
import pytest

from edge_rl.device.errors import UserError


def dqn_learner(action_gap: float):
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.device.observations import vector
    from edge_rl.loop.learner import Learner
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)  # the same initial weights for every alpha
    specs = (vector((4,)), {"kind": "discrete", "n": 2})
    factory = get_algorithm("dqn")
    config = resolve_defaults(factory, TrainConfig(
        steps=10_000, batch_size=8, algo_options={"action_gap": action_gap}), *specs)
    return Learner(factory, config, *specs)


def test_each_td_error_is_lowered_by_alpha_times_the_target_networks_action_gap():
    from edge_rl.loop.learner import to_experience

    rng = np.random.default_rng(0)
    n = 64
    batch = {"observation": rng.normal(size=(n, 4)).astype(np.float32),
             "next_observation": rng.normal(size=(n, 4)).astype(np.float32),
             "action": rng.integers(0, 2, n),
             "reward": rng.normal(size=n).astype(np.float32),
             "discount": np.ones(n, np.float32)}
    errors = {}
    for alpha in (0.0, 0.5):
        learner = dqn_learner(alpha)
        errors[alpha] = learner.agent.loss(to_experience(batch), gamma=learner.config.gamma
                                           ).extra.td_error.numpy()
    target_q, _ = learner.agent._target_q_network(batch["observation"])
    target_q = target_q.numpy()
    gap = target_q.max(axis=1) - target_q[np.arange(n), batch["action"]]
    assert gap.max() > 1e-3 and (gap == 0).any()  # both kinds of sample are in the batch
    assert errors[0.5] == pytest.approx(errors[0.0] - 0.5 * gap, rel=1e-4, abs=1e-5)


def test_action_gap_must_be_below_one():
    from edge_rl.agents.dqn import DQN

    for alpha in (-0.1, 1.0):
        with pytest.raises(UserError, match="--action-gap"):
            DQN.Options(action_gap=alpha)
