"""--average-tau: evaluation and export on a Polyak average of the actor network's weights,
the actors on the current ones."""

import re

import numpy as np
import pytest
from conftest import edge_rl, train
from test_prioritized_replay import minibatches

from edge_rl.config import TrainConfig
from edge_rl.device.errors import UserError

TAU = 0.7  # above 9 / (10 + n) from update 3 on: both steps are tested


def learner_with_average(tau=TAU, replay_priority=0.0, window=0.1):
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.device.observations import vector
    from edge_rl.loop.learner import Learner
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)
    specs = (vector((4,)), {"kind": "discrete", "n": 2})
    factory = get_algorithm("dqn")
    config = resolve_defaults(factory, TrainConfig(steps=10_000, batch_size=8, average_tau=tau,
                                                   average_window=window,
                                                   replay_priority=replay_priority), *specs)
    return Learner(factory, config, *specs)


def weights(learner):
    return [v.numpy().copy() for v in learner.built.actor_network.variables]


@pytest.mark.parametrize("replay_priority, tau, window", [
    (0.0, TAU, 0.1), (0.6, TAU, 0.1),  # the plain and the weighted loop
    (0.0, 0.01, 0.25),  # a longer window: 3 / (4 + n) on every update here
])
def test_the_average_moves_tau_towards_the_weights_after_every_update(replay_priority, tau,
                                                                      window):
    learner = learner_with_average(tau, replay_priority, window)
    train = learner.train_weighted if replay_priority else learner.train
    expected = weights(learner)  # the average starts at the initial weights
    batches = [minibatches(1, seed=0), minibatches(3, seed=1)]
    for batch in batches:  # one update in a call, then three in one call
        train(batch, len(batch["reward"]) // 8)
    # the same updates one at a time on a twin, the average tracked by hand
    twin = learner_with_average(tau, replay_priority, window)
    twin_train = twin.train_weighted if replay_priority else twin.train
    early = 1 / window - 1  # early updates: a larger step, early / (early + 1 + n)
    for batch in batches:
        for k in range(len(batch["reward"]) // 8):
            twin_train({key: value[k * 8:(k + 1) * 8] for key, value in batch.items()}, 1)
            step = max(tau, early / (early + 1 + twin.updates))
            expected = [a + step * (w - a) for a, w in zip(expected, weights(twin), strict=True)]
    current = weights(learner)
    assert all(np.allclose(c, t, atol=1e-6) for c, t in zip(current, weights(twin), strict=True))
    assert not all(np.allclose(c, e, atol=1e-4) for c, e in zip(current, expected, strict=True))
    with learner.averaged_weights():
        averaged = weights(learner)
    assert all(np.allclose(a, e, atol=1e-6) for a, e in zip(averaged, expected, strict=True))
    # and the network has its own weights back, exactly
    assert all(np.array_equal(c, w) for c, w in zip(current, weights(learner), strict=True))


def test_without_averaging_the_network_keeps_its_weights():
    learner = learner_with_average(tau=0.0)
    learner.train(minibatches(2), 2)
    before = weights(learner)
    with learner.averaged_weights():
        inside = weights(learner)
    assert all(np.array_equal(b, i) for b, i in zip(before, inside, strict=True))


@pytest.mark.parametrize("changes, message", [
    ({"average_tau": 1.0}, "--average-tau must be in [0, 1)"),
    ({"average_tau": -0.1}, "--average-tau must be in [0, 1)"),
    ({"average_tau": 0.01, "sparsity": 0.9}, "dense networks only"),
    ({"average_tau": 0.01, "average_window": 0.0}, "--average-window must be in (0, 0.5]"),
    ({"average_tau": 0.01, "average_window": 0.6}, "--average-window must be in (0, 0.5]"),
    ({"average_tau": 0.0, "average_window": 0.25}, "give both"),
])
def test_an_average_no_run_can_take_is_refused(changes, message):
    with pytest.raises(UserError, match=re.escape(message)):
        TrainConfig(**changes).validate()


def test_dqn_averages_dense_vector_networks_by_default(tmp_path):
    """DQN's default on vectors evaluates and exports an average (docs/learning.md, rule 8);
    on images, on sparse networks and their --tiny match, for the other algorithms, for a run
    saved before the average existed and when --average-tau is given, it does not.
    --average-window alone is refused where that leaves no average."""
    import json

    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.device.envs import describe_env
    from edge_rl.device.observations import vector

    dqn, cartpole = get_algorithm("dqn"), vector((4,))
    def resolved_tau(config, observation=cartpole, factory=dqn):
        return resolve_defaults(factory, config, observation).average_tau

    assert resolved_tau(TrainConfig()) == 0.0002
    assert resolved_tau(TrainConfig(average_tau=0.0)) == 0.0
    assert resolved_tau(TrainConfig(average_tau=0.001)) == 0.001
    assert resolved_tau(TrainConfig(sparsity=0.9)) == 0.0
    tiny = resolve_defaults(dqn, TrainConfig(sparsity=0.9, tiny=True), cartpole,
                            {"kind": "discrete", "n": 2})
    assert tiny.topology == "dense" and tiny.average_tau == 0.0
    pixels = describe_env("EdgeRL/BrightPatch-v0")[0]
    assert resolved_tau(TrainConfig(env="EdgeRL/BrightPatch-v0"), pixels) == 0.0
    assert resolved_tau(TrainConfig(algo="td3", env="Pendulum-v1"), None,
                        get_algorithm("td3")) == 0.0
    # a run saved before the average existed evaluated its current weights, and its
    # checkpoints hold no average: resumed or exported, it keeps to that
    saved = resolve_defaults(dqn, TrainConfig(), cartpole).to_dict()
    del saved["average_tau"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert TrainConfig.load(tmp_path).average_tau == 0.0
    resolve_defaults(dqn, TrainConfig(average_window=0.25), cartpole).validate()
    with pytest.raises(UserError, match="give both"):
        resolve_defaults(get_algorithm("td3"), TrainConfig(
            algo="td3", env="Pendulum-v1", average_window=0.25)).validate()


def test_the_cli_refuses_a_bad_average_in_one_line(tmp_path):
    result = edge_rl("train", "--out", tmp_path / "run", "--average-tau", "2")
    assert result.returncode == 2
    assert "--average-tau must be in [0, 1)" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_run_evaluates_and_keeps_the_average_and_resumes_it(tmp_path):
    """A real run with --average-tau: its checkpoint keeps the average; an evaluation keeps the
    averaged weights as the best (what export converts) while the actors' stay current."""
    from edge_rl.loop.train import Training
    from edge_rl.runs.checkpoint import latest_checkpoint
    from edge_rl.tf_setup import tf

    out = tmp_path / "run"
    train(out, "--average-tau", "0.01", "--steps", "3000", "--eval-every", "5000",
          "--eval-episodes", "5", "--no-carbon")
    config = TrainConfig.load(out / "config.json")
    assert config.average_tau == 0.01
    resumed = Training(config.replace(steps=6000), resume=True)
    learner = resumed.learner
    reader = tf.train.load_checkpoint(str(latest_checkpoint(out / "checkpoints") / "agent"))
    saved = [reader.get_tensor(f"averaged_actor/{i}/.ATTRIBUTES/VARIABLE_VALUE")
             for i in range(len(weights(learner)))]
    with learner.averaged_weights():
        restored_average = weights(learner)
    assert all(np.array_equal(a, s) for a, s in zip(restored_average, saved, strict=True))
    resumed.state.env_steps += 400
    assert resumed.train_chunk() > 0
    with learner.averaged_weights():
        average = weights(learner)
    current = weights(learner)
    resumed.state.best = None  # so this evaluation is kept as the best
    resumed.evaluate_now()
    assert all(np.array_equal(c, w) for c, w in zip(current, weights(learner), strict=True))
    learner.restore_actor(out / "best")
    kept = weights(learner)
    assert all(np.allclose(k, a) for k, a in zip(kept, average, strict=True))
    assert not all(np.allclose(k, c) for k, c in zip(kept, current, strict=True))
