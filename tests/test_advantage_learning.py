"""DQN's --action-gap (advantage learning): each TD error is plain double DQN's less alpha times
the target network's gap between the best action and the one taken."""

import numpy as np
import pytest
from test_prioritized_replay import dqn_learner, minibatches

from edge_rl.device.errors import UserError


def test_each_td_error_is_lowered_by_alpha_times_the_target_networks_action_gap():
    from edge_rl.loop.learner import to_experience

    batch = minibatches(8)  # 64 samples
    errors = {}
    for alpha in (0.0, 0.5):
        learner = dqn_learner(action_gap=alpha, atoms=0)
        errors[alpha] = learner.agent.loss(to_experience(batch), gamma=learner.config.gamma
                                           ).extra.td_error.numpy()
    target_q, _ = learner.agent._target_q_network(batch["observation"])
    target_q = target_q.numpy()
    gap = target_q.max(axis=1) - target_q[np.arange(len(target_q)), batch["action"]]
    assert gap.max() > 1e-3 and (gap == 0).any()  # both kinds of sample are in the batch
    assert errors[0.5] == pytest.approx(errors[0.0] - 0.5 * gap, rel=1e-4, abs=1e-5)


def test_action_gap_must_be_below_one():
    from edge_rl.agents.dqn import DQN

    for alpha in (-0.1, 1.0):
        with pytest.raises(UserError, match="--action-gap"):
            DQN.Options(action_gap=alpha)
