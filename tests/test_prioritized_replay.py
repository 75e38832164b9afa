"""Prioritized replay: draws by priority, importance weights, priorities that follow their
transitions through overwrites, drops and checkpoints; and the DQN update that feeds it."""

import numpy as np
import pytest
from conftest import train
from test_replay import batch

from edge_rl.replay.prioritized import BETA_START, PRIORITY_FLOOR, PrioritizedReplay, SumTree

ALPHA = 0.6


def replay_of(capacity, steps, seed=0):
    replay = PrioritizedReplay(capacity, (1,), (), "int64", gamma=0.9, nstep=1, seed=seed,
                               alpha=ALPHA)
    replay.insert(0, batch(1, list(steps), [0.0] * len(steps)))
    return replay


@pytest.mark.parametrize("slots", [1, 5, 64, 1000])
def test_the_sum_tree_finds_what_a_running_sum_finds(slots):
    rng = np.random.default_rng(slots)
    tree = SumTree(slots)
    values = np.zeros(slots)
    for _ in range(20):  # repeated slots in one call: the last value counts
        chosen = rng.integers(0, slots, 7)
        new = rng.choice([0.0, 0.5, 3.0, 10.0], 7)
        tree.set(chosen, new)
        for slot, value in zip(chosen, new, strict=True):
            values[slot] = value
    assert tree.total == pytest.approx(values.sum())
    assert tree.values(np.arange(slots)) == pytest.approx(values)
    if values.sum() == 0:
        return
    running = np.cumsum(values)
    targets = rng.uniform(0, values.sum(), 500)
    assert (tree.find(targets) == np.searchsorted(running, targets, side="right")).all()
    assert values[tree.find(np.asarray([0.0, np.nextafter(values.sum(), 0)]))].min() > 0


def test_new_transitions_are_drawn_evenly_then_by_their_td_errors():
    replay = replay_of(100, range(10))
    counts = np.bincount(replay.sample(10_000)["action"], minlength=10)
    assert counts.min() > 800 and counts.max() < 1200  # all at the max priority: even

    sample = replay.sample(10)
    td_errors = np.where(sample["action"] == 3, 10.0, 0.0)  # one transition's TD error is large
    replay.update_priorities(sample, td_errors)
    # each drawn slot got (|td| + floor)^alpha; undrawn ones keep 1.0
    drawn = np.unique(sample["action"])
    share = np.bincount(replay.sample(20_000)["action"], minlength=10) / 20_000
    priority = np.ones(10)
    priority[drawn] = PRIORITY_FLOOR**ALPHA
    priority[3] = (10 + PRIORITY_FLOOR) ** ALPHA
    assert share == pytest.approx(priority / priority.sum(), abs=0.01)
    assert replay.max_priority == pytest.approx((10 + PRIORITY_FLOOR) ** ALPHA)


def test_importance_weights_undo_the_draw_as_beta_reaches_one():
    replay = replay_of(100, range(4))
    replay.update_priorities({"positions": np.arange(4), "filled_by": np.arange(4)},
                             np.asarray([0.0, 1.0, 3.0, 7.0]))
    p = (np.asarray([0.0, 1.0, 3.0, 7.0]) + PRIORITY_FLOOR) ** ALPHA
    probability = p / p.sum()
    for progress, beta in ((0.0, BETA_START), (0.5, (1 + BETA_START) / 2), (1.0, 1.0)):
        replay.anneal(progress)
        sample = replay.sample(256)
        expected = (4 * probability[sample["action"]]) ** -beta
        assert sample["weights"] == pytest.approx(expected / expected.max(), rel=1e-5)
    # at beta 1, weight x probability is the same for every draw: uniform in expectation
    product = sample["weights"] * probability[sample["action"]]
    assert product == pytest.approx(np.full(256, product[0]), rel=1e-5)


def test_a_priority_update_for_an_overwritten_slot_is_dropped():
    replay = replay_of(4, range(4))
    sample = replay.sample(8)
    replay.insert(0, batch(1, [4, 5], [0.0, 0.0]))  # steps 0 and 1 are overwritten
    replay.update_priorities(sample, np.full(8, 100.0))
    by_step = dict(zip(replay.data["episode_step"][:4].tolist(), replay.priority(np.arange(4)),
                       strict=True))
    assert by_step[4] == by_step[5] == 1.0  # the newcomers keep the max priority they got
    assert by_step[2] == pytest.approx((100 + PRIORITY_FLOOR) ** ALPHA)
    assert replay.max_priority == pytest.approx((100 + PRIORITY_FLOOR) ** ALPHA)


def test_dropped_transitions_are_never_drawn():
    replay = replay_of(100, range(10))
    replay.drop_oldest(6)
    assert set(replay.sample(2000)["action"].tolist()) == {6, 7, 8, 9}


def test_priorities_survive_a_checkpoint(tmp_path):
    replay = replay_of(8, range(8))
    replay.insert(0, batch(1, [8, 9, 10, 11], [0.0] * 4))  # wrapped: the oldest is not slot 0
    sample = replay.sample(8)
    replay.update_priorities(sample, np.arange(8.0))
    replay.anneal(0.5)
    replay.save(tmp_path / "replay.npz")

    restored = PrioritizedReplay(8, (1,), (), "int64", gamma=0.9, nstep=1, seed=1, alpha=ALPHA)
    restored.load(tmp_path / "replay.npz")
    before = dict(zip(replay.data["episode_step"][replay.positions()].tolist(),
                      replay.priority(replay.positions()), strict=True))
    after = dict(zip(restored.data["episode_step"][restored.positions()].tolist(),
                     restored.priority(restored.positions()), strict=True))
    assert after == pytest.approx(before)
    assert (restored.max_priority, restored.beta) == (replay.max_priority, replay.beta)
    # a sample drawn before the save can still update what it drew
    restored.update_priorities({"positions": np.arange(8), "filled_by":
                                restored.filled_by[:8].copy()}, np.zeros(8))
    assert restored.priority(np.arange(8)) == pytest.approx(np.full(8, PRIORITY_FLOOR**ALPHA))


def test_a_uniform_replay_checkpoint_resumes_with_even_priorities(tmp_path):
    from edge_rl.replay.buffer import Replay

    uniform = Replay(8, (1,), (), "int64", gamma=0.9, nstep=1, seed=0)
    uniform.insert(0, batch(1, list(range(5)), [0.0] * 5))
    uniform.save(tmp_path / "replay.npz")
    restored = PrioritizedReplay(8, (1,), (), "int64", gamma=0.9, nstep=1, seed=0, alpha=ALPHA)
    restored.load(tmp_path / "replay.npz")
    counts = np.bincount(restored.sample(5000)["action"], minlength=5)
    assert counts.min() > 850


def dqn_learner(algo="dqn", **algo_options):
    """A Learner of `algo` (DQN or a variant of it) on 4 features and 2 actions, batches of 8."""
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.device.observations import vector
    from edge_rl.loop.learner import Learner
    from edge_rl.tf_setup import tf

    tf.keras.utils.set_random_seed(0)  # the same initial weights on every call
    specs = (vector((4,)), {"kind": "discrete", "n": 2})
    factory = get_algorithm(algo)
    config = resolve_defaults(factory, TrainConfig(algo=algo, steps=10_000, batch_size=8,
                                                   replay_priority=ALPHA,
                                                   algo_options=algo_options), *specs)
    return Learner(factory, config, *specs)


def minibatches(updates, size=8, seed=0):
    rng = np.random.default_rng(seed)
    n = updates * size
    return {"observation": rng.normal(size=(n, 4)).astype(np.float32),
            "next_observation": rng.normal(size=(n, 4)).astype(np.float32),
            "action": rng.integers(0, 2, n),
            "reward": rng.normal(size=n).astype(np.float32),
            "discount": np.ones(n, np.float32),
            "weights": rng.uniform(0.5, 1.0, n).astype(np.float32)}


def test_weighted_updates_return_each_samples_td_error_and_heed_the_weights():
    from edge_rl.loop.learner import to_experience

    learner = dqn_learner()
    network = learner.built.actor_network.trainable_weights
    before = [w.numpy().copy() for w in network]
    first = minibatches(1)
    expected = learner.agent.loss(to_experience(first), gamma=learner.config.gamma
                                  ).extra.td_error.numpy()
    first["weights"][:] = 0.0  # no gradient, and Adam's first step from zero moments is 0
    _, td_errors = learner.train_weighted(first, 1)
    assert td_errors == pytest.approx(expected, rel=1e-4, abs=1e-5)  # before the update
    assert all(np.allclose(a, w.numpy(), atol=1e-8) for a, w in zip(before, network, strict=True))

    _, td_errors = learner.train_weighted(minibatches(3, seed=1), 3)
    assert td_errors.shape == (24,) and np.isfinite(td_errors).all()
    assert learner.updates == 4
    assert not all(np.allclose(a, w.numpy()) for a, w in zip(before, network, strict=True))


def test_a_prioritized_run_resumes_with_its_priorities(tmp_path):
    """`edge-rl train --replay-priority`: the run's checkpoint keeps the priorities its updates
    set, and a resumed run trains on by them."""
    from edge_rl.config import TrainConfig
    from edge_rl.loop.train import Training

    out = tmp_path / "run"
    first = train(out, "--replay-priority", str(ALPHA), "--steps", "3000", "--eval-every",
                  "5000", "--eval-episodes", "5", "--no-carbon")
    config = TrainConfig.load(out / "config.json")
    assert config.replay_priority == ALPHA
    resumed = Training(config.replace(steps=6000), resume=True)
    assert isinstance(resumed.replay, PrioritizedReplay)
    assert resumed.learner.updates == first["updates"] > 0
    held = resumed.replay.priority(resumed.replay.positions())
    drawn = held != 1.0  # the initial max priority: set by an update since
    assert drawn.sum() > 100 and held[drawn].std() > 0
    resumed.state.env_steps += 400  # as if 400 more steps had arrived: 100 updates due
    assert resumed.train_chunk() > 0  # and trains on, by them
    assert resumed.learner.updates > first["updates"]


def test_a_config_saved_before_prioritized_replay_resumes_uniform():
    from edge_rl.config import TrainConfig

    assert TrainConfig.from_dict({"nstep": 3}).replay_priority == 0.0  # resolved, older
    assert TrainConfig.from_dict({}).replay_priority is None  # to be resolved: the default


def test_dqn_replays_by_priority_on_vectors_and_uniformly_elsewhere():
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig
    from edge_rl.device.envs import describe_env
    from edge_rl.device.observations import vector

    dqn = get_algorithm("dqn")
    assert resolve_defaults(dqn, TrainConfig(), vector((4,))).replay_priority == 0.6
    pixels = describe_env("EdgeRL/BrightPatch-v0")[0]
    assert resolve_defaults(dqn, TrainConfig(env="EdgeRL/BrightPatch-v0"), pixels
                            ).replay_priority == 0.0
    td3 = TrainConfig(algo="td3", env="Pendulum-v1")
    assert resolve_defaults(get_algorithm("td3"), td3).replay_priority == 0.0
