"""RLx2's value learning: the delayed multi-step target and the dynamic-capacity replay."""

import numpy as np
import pytest
from test_replay import batch, sample_all

from edge_rl.config import TrainConfig
from edge_rl.device.wire import Transitions
from edge_rl.replay import Replay
from edge_rl.rlx2 import OLDEST, check_buffer, nstep_now, policy_distance

GAMMA = 0.5


def test_delayed_nstep_target_by_hand_across_termination_and_truncation():
    config = TrainConfig(delayed_nstep=True, nstep=3, nstep_delay=1_000)
    assert [nstep_now(config, s) for s in (0, 999, 1_000, 5_000)] == [1, 1, 3, 3]
    assert nstep_now(TrainConfig(nstep=3), 0) == 3  # not delayed: n from the start

    replay = Replay(100, (1,), (), "int64", gamma=GAMMA, nstep=1, seed=0)
    replay.insert(0, batch(1, [0, 1, 2, 3], [1, 2, 4, 8], truncated_last=True))
    replay.insert(0, batch(2, [10, 11, 12], [1, 1, 16], terminated_last=True))
    replay.nstep = nstep_now(config, 500)
    rows = sample_all(replay, [0, 11])
    assert rows[0]["reward"] == 1 and rows[0]["discount"] == 1  # 1-step: gamma^1 bootstrap
    replay.nstep = nstep_now(config, 1_000)
    rows = sample_all(replay, [0, 2, 3, 10, 11])
    # r0 + g r1 + g^2 r2, bootstrapped with gamma^3 (discount carries gamma^(n-1))
    assert rows[0]["reward"] == pytest.approx(1 + 0.5 * 2 + 0.25 * 4)
    assert rows[0]["discount"] == pytest.approx(GAMMA**2)
    assert rows[0]["next_observation"][0] == 3.0
    # cut at the truncation, which still bootstraps (from step 3's next observation)
    assert rows[2]["reward"] == pytest.approx(4 + 0.5 * 8)
    assert rows[2]["discount"] == pytest.approx(GAMMA)
    assert rows[2]["next_observation"][0] == 4.0
    assert rows[3]["reward"] == 8 and rows[3]["discount"] == 1
    # cut at the termination, which does not bootstrap
    assert rows[10]["reward"] == pytest.approx(1 + 0.5 * 1 + 0.25 * 16)
    assert rows[10]["discount"] == 0.0
    assert rows[11]["reward"] == pytest.approx(1 + 0.5 * 16) and rows[11]["discount"] == 0.0


ACTION = {"kind": "continuous", "shape": [2], "low": [-2.0, 0.0], "high": [2.0, 1.0]}


def continuous_batch(n, start, action):
    steps = np.arange(start, start + n)
    return Transitions(
        observation=steps[:, None].astype(np.float32),
        action=np.tile(action, (n, 1)).astype(np.float32),
        deterministic_action=np.tile(action, (n, 1)).astype(np.float32),
        reward=np.zeros(n, np.float32),
        next_observation=steps[:, None].astype(np.float32) + 1,
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        episode_id=np.zeros(n, np.int64),
        episode_step=steps.astype(np.int64),
    )


def test_policy_distance_scales_actions_to_unit_range():
    stored = np.array([[-2.0, 0.0], [2.0, 1.0]], np.float32)
    current = np.array([[2.0, 0.0], [2.0, 0.5]], np.float32)
    # row 0: gap 2 in [-1, 1] units on the first action; row 1: gap 1 on the second
    assert policy_distance(current, stored, ACTION) == pytest.approx((4 / 2 + 1 / 2) / 2)
    discrete = {"kind": "discrete", "n": 3}
    assert policy_distance(np.array([0, 1, 2, 2]), np.array([0, 1, 1, 0]), discrete) == 0.5


def test_dynamic_buffer_shrinks_the_oldest_and_stops_at_its_minimum():
    replay = Replay(10_000, (1,), (2,), "float32", gamma=0.99, nstep=1, seed=0)
    replay.insert(0, continuous_batch(5_000, 0, [-2.0, 0.0]))
    seen = []

    def far(observations):  # the current policy disagrees completely with what was stored
        seen.append(observations[:, 0].copy())
        return np.tile([2.0, 1.0], (len(observations), 1)).astype(np.float32)

    def near(observations):
        return np.tile([-2.0, 0.0], (len(observations), 1)).astype(np.float32)

    assert check_buffer(replay, near, ACTION, threshold=0.2, minimum=3_000) == 0.0
    assert replay.capacity == 10_000 and len(replay) == 5_000
    distance = check_buffer(replay, far, ACTION, threshold=0.2, minimum=3_000)
    assert distance == pytest.approx((4 + 4) / 2)
    assert np.array_equal(seen[0], np.arange(OLDEST))  # measured on the oldest transitions
    assert replay.capacity == len(replay) == 4_500
    assert replay.data["observation"][replay.positions()[0], 0] == 500  # the oldest 10% went
    sizes = []
    for _ in range(6):
        check_buffer(replay, far, ACTION, threshold=0.2, minimum=3_000)
        sizes.append(replay.capacity)
    assert sizes == [4_050, 3_645, 3_281, 3_000, 3_000, 3_000]
    # a shrunk replay keeps working as a ring of its new size
    replay.insert(0, continuous_batch(100, 5_000, [-2.0, 0.0]))
    assert len(replay) == 3_000
    assert replay.data["observation"][replay.positions()[-1], 0] == 5_099


def test_rlx2_replay_defaults_scale_with_the_run_as_the_papers_3m():
    """RLx2's replay at 3M env steps: at most 1e6, never below 1e5, a check every 1e4. A run
    of any length gets the same fractions of it; without the dynamic buffer, 1e6 and no
    scaling; a flag given wins."""
    from edge_rl.agents import get_algorithm
    from edge_rl.agents.base import resolve_defaults

    def replay(**given):
        config = resolve_defaults(get_algorithm("td3"), TrainConfig(algo="td3", env="Hopper-v5",
                                                                    **given))
        config.validate()
        return config.replay_capacity, config.buffer_min, config.buffer_check_interval

    assert replay(rlx2=True, steps=3_000_000) == (1_000_000, 100_000, 10_000)
    assert replay(rlx2=True, steps=300_000) == (100_000, 10_000, 1_000)
    assert replay(rlx2=True, steps=100_000) == (33_333, 3_333, 333)
    assert replay(dynamic_buffer=True, steps=15_000) == (5_000, OLDEST, 50)  # the floor
    assert replay(steps=100_000)[0] == 1_000_000
    assert replay(rlx2=True, steps=100_000, replay_capacity=50_000, buffer_min=5_000) == (
        50_000, 5_000, 333)
