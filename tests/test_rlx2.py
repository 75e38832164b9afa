"""RLx2's value learning: the delayed multi-step target and the dynamic-capacity replay."""

import numpy as np
import pytest
from test_replay import batch, sample_all

from edge_rl.config import TrainConfig
from edge_rl.device.wire import Transitions
from edge_rl.replay.buffer import Replay
from edge_rl.replay.rlx2 import OLDEST, check_buffer, nstep_now, policy_distance

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


def test_policy_distance_is_per_action_dimension_in_unit_range():
    stored = np.array([[-2.0, 0.0], [2.0, 1.0]], np.float32)
    current = np.array([[2.0, 0.0], [2.0, 0.5]], np.float32)
    # in [-1, 1] units: row 0 is 2 off on the first dimension, row 1 is 1 off on the second;
    # the mean squared gap over the 4 elements, halved (RLx2's mse_loss / 2)
    assert policy_distance(current, stored, ACTION) == pytest.approx((4 + 0 + 0 + 1) / 4 / 2)
    # so a gap of g on every dimension reads g^2 / 2 whatever the action's size
    for dims in (1, 6, 17):
        box = {"kind": "continuous", "shape": [dims], "low": [-1.0] * dims, "high": [1.0] * dims}
        gap = np.full((5, dims), 0.5, np.float32)
        assert policy_distance(gap, np.zeros_like(gap), box) == pytest.approx(0.125)
    discrete = {"kind": "discrete", "n": 3}
    assert policy_distance(np.array([0, 1, 2, 2]), np.array([0, 1, 1, 0]), discrete) == 0.5


def test_dynamic_buffer_drops_the_oldest_keeps_its_capacity_and_refills():
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
    assert distance == pytest.approx(4 / 2)  # every element 2 apart in [-1, 1] units
    assert np.array_equal(seen[0], np.arange(OLDEST))  # measured on the oldest transitions
    assert len(replay) == 4_500 and replay.capacity == 10_000
    assert replay.data["observation"][replay.positions()[0], 0] == 500  # the oldest 10% went
    sizes = []
    for _ in range(6):
        check_buffer(replay, far, ACTION, threshold=0.2, minimum=3_000)
        sizes.append(len(replay))
    # nothing is dropped once the replay holds the minimum or fewer
    assert sizes == [4_050, 3_645, 3_281, 2_953, 2_953, 2_953]
    # new data refills it up to the unchanged capacity, and n-step links still hold
    replay.insert(0, continuous_batch(7_000, 5_000, [-2.0, 0.0]))
    assert len(replay) == 9_953 and replay.capacity == 10_000
    assert replay.data["observation"][replay.positions()[-1], 0] == 11_999
    replay.nstep = 3
    rows = replay.sample(256)
    assert np.allclose(rows["next_observation"][:, 0] - rows["observation"][:, 0], 3)


def test_rlx2_replay_defaults_keep_the_papers_data_and_fit_short_runs():
    """RLx2's replay at 3M env steps: at most 1e6, nothing dropped at 1e5 or fewer, a check
    every 1e4. The minimum is data: 1e5 for any run of 300k or more, a third of a shorter run;
    the check every tenth of the minimum; without the dynamic buffer, 1e6; a flag given wins."""
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults

    def replay(**given):
        config = resolve_defaults(get_algorithm("td3"), TrainConfig(algo="td3", env="Hopper-v5",
                                                                    **given))
        config.validate()
        return config.replay_capacity, config.buffer_min, config.buffer_check_interval

    assert replay(rlx2=True, steps=3_000_000) == (1_000_000, 100_000, 10_000)
    assert replay(rlx2=True, steps=300_000) == (1_000_000, 100_000, 10_000)
    assert replay(rlx2=True, steps=100_000) == (1_000_000, 33_333, 3_333)
    assert replay(dynamic_buffer=True, steps=3_000) == (1_000_000, OLDEST, OLDEST // 10)
    assert replay(steps=100_000) == (1_000_000, 100_000, 10_000)
    assert replay(rlx2=True, steps=100_000, replay_capacity=50_000, buffer_min=5_000) == (
        50_000, 5_000, 500)
    assert replay(rlx2=True, steps=100_000, buffer_check_interval=700)[1:] == (33_333, 700)


def test_rlx2_uses_nstep_targets_from_the_start_below_the_papers_3m_steps():
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults

    def delay(**given):
        config = resolve_defaults(get_algorithm("td3"), TrainConfig(algo="td3", env="Hopper-v5",
                                                                    **given))
        return config.nstep, config.nstep_delay

    assert delay(rlx2=True, steps=100_000) == (3, 0)
    assert delay(rlx2=True, steps=1_000_000) == (3, 0)
    assert delay(rlx2=True, steps=3_000_000) == (3, 300_000)  # the paper's, at its budget
    assert delay(delayed_nstep=True, steps=5_000_000) == (3, 300_000)
    assert delay(rlx2=True, steps=100_000, nstep_delay=10_000) == (3, 10_000)


def test_rlx2_with_sac_waits_half_the_run_below_the_papers_3m_steps():
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults

    def delay(**given):
        config = resolve_defaults(get_algorithm("sac"), TrainConfig(
            algo="sac", env="HalfCheetah-v5", **given))
        return config.nstep, config.nstep_delay

    assert delay(rlx2=True, steps=100_000) == (3, 50_000)
    assert delay(rlx2=True, steps=300_000) == (3, 150_000)
    assert delay(rlx2=True, steps=1_000_000) == (3, 300_000)
    assert delay(rlx2=True, steps=3_000_000) == (3, 300_000)
    assert delay(rlx2=True, steps=300_000, nstep_delay=0) == (3, 0)
