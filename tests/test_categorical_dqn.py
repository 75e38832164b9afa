"""DQN's categorical Q-network on vectors (C51, its default there; `--atoms 0`: the dueling one):
its loss against a numpy reading of the paper's projection, what it learns on a one-step problem,
its int8 policy file read by a plain interpreter, and which runs get it."""

import numpy as np
import pytest
from test_prioritized_replay import dqn_learner, minibatches

from edge_rl.device.errors import UserError


def softmax(logits):
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def projected(values, probabilities, support):
    """Each atom's mass split between the two support atoms around it (values clipped to the
    support), as Bellemare et al. (2017), Algorithm 1, write it."""
    delta = support[1] - support[0]
    target = np.zeros_like(probabilities)
    for row, (atoms, masses) in enumerate(zip(values, probabilities, strict=True)):
        for value, mass in zip(np.clip(atoms, support[0], support[-1]), masses, strict=True):
            position = (value - support[0]) / delta
            below, above = int(np.floor(position)), int(np.ceil(position))
            if below == above:
                target[row, below] += mass
            else:
                target[row, below] += mass * (above - position)
                target[row, above] += mass * (position - below)
    return target


def test_the_loss_is_the_cross_entropy_to_the_projected_double_q_target():
    from edge_rl.loop.learner import to_experience

    learner = dqn_learner(v_min=-10.0, v_max=10.0, atoms=11)
    network, target_network = learner.agent._q_network, learner.agent._target_q_network
    for weight in target_network.trainable_weights:  # the target differs from the online net
        weight.assign(weight + np.random.default_rng(1).normal(0, 0.3, weight.shape))
    batch = minibatches(8)  # 64 samples
    batch["reward"] *= 4.0  # some targets past the support's ends
    batch["discount"][::3] = 0.0  # and some ends of episodes
    gamma, support = learner.config.gamma, network.support.numpy()

    online_next = network.logits(batch["next_observation"]).numpy()
    next_action = (softmax(online_next) * support).sum(-1).argmax(-1)
    target_next = softmax(target_network.logits(batch["next_observation"]).numpy())
    target_probabilities = target_next[np.arange(64), next_action]
    assert (next_action != (target_next * support).sum(-1).argmax(-1)).any()  # double Q matters
    values = batch["reward"][:, None] + gamma * batch["discount"][:, None] * support[None, :]
    target = projected(values, target_probabilities, support)
    chosen = network.logits(batch["observation"]).numpy()[np.arange(64), batch["action"]]
    cross_entropy = -(target * np.log(softmax(chosen))).sum(-1)
    entropy = -(target * np.log(np.where(target > 0, target, 1.0))).sum(-1)

    info = learner.agent.loss(to_experience(batch), gamma=gamma).extra
    assert info.td_loss.numpy() == pytest.approx(cross_entropy, rel=1e-4, abs=1e-5)
    # the priority: the KL divergence, which a perfect prediction brings to 0
    assert info.td_error.numpy() == pytest.approx(cross_entropy - entropy, rel=1e-3, abs=1e-4)


def test_it_learns_the_expected_return_of_each_action_between_the_atoms():
    # One step, then the episode ends: action 0 earns 10, action 1 earns 30 (neither on an atom
    # of the default support, -100, -96, ..., 100); the expected values must come to them
    learner = dqn_learner()
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(16, 4)).astype(np.float32)
    for _ in range(60):
        batch = minibatches(10, seed=int(rng.integers(1 << 30)))
        batch["observation"] = observations[rng.integers(0, 16, 80)]
        batch["reward"] = np.where(batch["action"] == 0, 10.0, 30.0).astype(np.float32)
        batch["discount"][:] = 0.0
        batch["weights"][:] = 1.0
        _, divergence = learner.train_weighted(batch, 10)
    values, _ = learner.agent._q_network(observations)
    assert values.numpy()[:, 0] == pytest.approx(10.0, abs=1.5)
    assert values.numpy()[:, 1] == pytest.approx(30.0, abs=1.5)
    assert np.median(divergence) < 0.05


def test_its_int8_file_gives_a_plain_interpreter_the_networks_greedy_actions():
    from ai_edge_litert.interpreter import Interpreter

    from edge_rl.converters.tflite import convert
    from edge_rl.device.policy_file import PolicyMetadata

    learner = dqn_learner()
    rng = np.random.default_rng(2)
    calibration = rng.normal(size=(500, 4)).astype(np.float32)
    meta = PolicyMetadata(env_id="CartPole-v1", algo="dqn", precision="int8", output="q_values",
                          observation_shape=(4,), action={"kind": "discrete", "n": 2})
    flat = convert(learner.built.export_model, "int8", calibration, meta)
    interpreter = Interpreter(model_content=flat)
    interpreter.allocate_tensors()
    # the distribution (softmax, expectation) in float32, after the int8 hidden layer
    kinds = {op["op_name"]: op for op in interpreter._get_ops_details()}
    assert {"SOFTMAX", "SUM"} <= set(kinds)
    observations = rng.normal(size=(300, 4)).astype(np.float32)
    values, _ = learner.agent._q_network(observations)
    fp32_actions = values.numpy().argmax(-1)
    actions = []
    for row in observations:
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], row[None])
        interpreter.invoke()
        actions.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
                       .argmax())
    assert np.mean(np.array(actions) == fp32_actions) >= 0.97  # the export check's bar


@pytest.mark.parametrize("options, flag", [({"atoms": 1}, "--atoms"),
                                           ({"v_min": 5.0, "v_max": 5.0}, "--v-min"),
                                           ({"action_gap": 0.5}, "--action-gap")])
def test_bad_options_are_refused_by_name(options, flag):
    from edge_rl.agents.dqn import DQN

    with pytest.raises(UserError, match=flag):
        DQN.Options(**options)


def test_vectors_get_the_categorical_network_images_and_old_runs_the_dueling_one(tmp_path):
    import json

    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.device.observations import FRAMES, ObservationSpec, vector

    factory = get_algorithm("dqn")
    assert resolve_defaults(factory, TrainConfig(), vector((4,))).algo_options["atoms"] == 51
    images = ObservationSpec(FRAMES, (84, 84))
    assert resolve_defaults(factory, TrainConfig(), images).algo_options["atoms"] == 0
    # a run saved before C51 was DQN's default trained the dueling network: resumed or
    # exported, it must build that network again
    saved = resolve_defaults(factory, TrainConfig(), vector((4,))).to_dict()
    del saved["algo_options"]["atoms"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert TrainConfig.load(tmp_path).algo_options["atoms"] == 0
