"""MinAtar ([minatar] extra) and Atari ([atari] extra) through make_env: MinAtar's bool planes
as they come, Atari preprocessed as DQN takes it (edge_rl.device.atari); Pong end to end."""

import json
import re
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from conftest import edge_rl, train

from edge_rl.device.envs import LIFE_LOST, describe_env, make_env
from edge_rl.device.errors import UserError
from edge_rl.device.observations import FRAMES, PLANES, ObservationSpec

MINATAR = "MinAtar/Breakout-v1"
BREAKOUT = "ALE/Breakout-v5"


def run(env, actions, seed):
    observations = [env.reset(seed=seed)[0]]
    for action in actions:
        observations.append(env.step(action)[0])
    return np.stack(observations)


def test_minatar_gives_bool_planes_as_they_come():
    pytest.importorskip("minatar")
    with warnings.catch_warnings():
        # registered once: gymnasium warns of each id registered again
        warnings.filterwarnings("error", message=".*Overriding environment")
        observation, action = describe_env(MINATAR)
        env = make_env(MINATAR, seed=3)
    assert observation == ObservationSpec(PLANES, (10, 10, 4))
    assert action == {"kind": "discrete", "n": 3}  # v1: the game's minimal action set
    assert env.observation_space == gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)
    actions = [1, 2, 0, 2, 1, 1, 0, 2] * 5
    planes = run(env, actions, seed=3)
    assert planes.dtype == np.bool_ and planes.shape == (41, 10, 10, 4)
    assert planes.any(axis=(1, 2, 3)).all()  # the paddle, at least, is on every frame
    # the seed fixes MinAtar's own randomness (sticky actions, the ball's start)
    np.testing.assert_array_equal(planes, run(make_env(MINATAR), actions, seed=3))


def test_atari_comes_as_84x84_grayscale_stacks_of_4_channels_last():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    observation, action = describe_env(BREAKOUT)
    assert observation == ObservationSpec(FRAMES, (84, 84, 4), stack=4)  # frames once
    assert action == {"kind": "discrete", "n": 4}
    env = make_env(BREAKOUT, seed=0)
    assert env.observation_space == gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert env.spec.kwargs["frameskip"] == 1  # the wrapper skips, not the env
    assert env.spec.kwargs["repeat_action_probability"] == 0.25  # v5's sticky actions

    actions = [1, 1, 2, 2, 3, 3, 1, 2, 3, 3, 2, 2] * 3  # serves, moves
    frames = run(env, actions, seed=0)
    assert frames.dtype == np.uint8 and frames.shape == (37, 84, 84, 4)
    first = frames[0]
    assert all(np.array_equal(first[..., i], first[..., 3]) for i in range(3))  # reset x 4
    # channels last, oldest first: each stack is the previous one shifted by one frame
    np.testing.assert_array_equal(frames[1:, ..., :3], frames[:-1, ..., 1:])
    assert (frames[1:, ..., 3] != frames[:-1, ..., 3]).any()  # the newest frame changes
    # 4 emulator frames an agent step (plus the no-ops at reset)
    before = env.unwrapped.ale.getEpisodeFrameNumber()
    env.step(0)
    assert env.unwrapped.ale.getEpisodeFrameNumber() - before == 4
    np.testing.assert_array_equal(frames, run(make_env(BREAKOUT), actions, seed=0))


@pytest.mark.parametrize(("env_id", "module", "extra"), [
    (MINATAR, "minatar", "minatar"),
    (BREAKOUT, "ale_py", "atari"),
    (BREAKOUT, "cv2", "atari"),  # AtariPreprocessing's resizing
])
def test_without_the_extra_the_error_says_what_to_install(monkeypatch, env_id, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(UserError, match=rf"pip install 'edge-rl\[{extra}\]'") as err:
        make_env(env_id)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_dqn_on_atari_trains_exports_int8_and_edgetpu_and_evaluates(tmp_path):
    """Pong, as every episode of an untrained greedy policy ends there in ~760 steps (one
    that never serves Breakout plays 27,000): the Nature convolutions learn from uint8 stacks
    sent over gRPC, the int8 file takes them as they are, and the device runtime runs it."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    out = tmp_path / "pong"
    summary = train(out, "--env", "ALE/Pong-v5", "--steps", 2000, "--warmup-steps", 1000,
                    "--updates-per-step", 0.05, "--replay-capacity", 5000, "--eval-every", 2000,
                    "--eval-episodes", 1)
    assert summary["updates"] >= 40 and summary["replay_size"] >= 2000
    assert -21.0 <= summary["best_return"]["mean"] <= 21.0
    config = json.loads((out / "config.json").read_text())
    assert config["env"] == "ALE/Pong-v5"
    # each 84x84 frame once on the wire and in replay: not the 4-frame stack of every step
    from edge_rl.device.wire import decode_batch
    from edge_rl.transport.replay_log import read_records

    records = [payload for _, payload in read_records(out / "replay-log")]
    on_disk = sum(f.stat().st_size for f in (out / "replay-log").glob("*.log"))
    assert on_disk < sum(map(len, records)) / 5  # Atari's frames stored compressed
    payload = records[0]
    sent = decode_batch(payload)
    assert sent.next_frame_channels == 1 and sent.next_observation.shape[-1] == 1
    assert len(payload) < 84 * 84 * (sent.next_observation.shape[0] + 4 * 2) + 100_000
    checkpoint = (out / "checkpoints" / "latest").read_text().strip()
    with np.load(out / "checkpoints" / checkpoint / "replay.npz") as replay:
        assert replay["observation"].shape[1:] == (84, 84, 1)

    # the int8 file and the Coral file of the run in one call (one load, one calibration)
    policy_file, coral_file = out / "policy-int8.tflite", out / "policy-edgetpu.tflite"
    result = edge_rl("export", out, "--int8", "--edgetpu", "--verify-episodes", 1)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"wrote {policy_file}" in result.stdout and f"wrote {coral_file}" in result.stdout
    assert "greedy return (int8)" in result.stdout
    assert "greedy return (edgetpu)" in result.stdout

    from edge_rl.device.policy import Policy

    policy = Policy(policy_file.read_bytes())
    assert (policy.metadata.precision, policy.metadata.observation) == ("int8", "frames")
    assert tuple(policy.metadata.observation_shape) == (84, 84, 4)
    assert policy_file.stat().st_size < 400_000  # int8 Nature convs and a 64x64 head
    result = edge_rl("eval", policy_file, "--episodes", 1)
    assert result.returncode == 0, result.stderr[-4000:]
    returned = re.search(r"^return: (\S+) ± \S+ over 1 episodes$", result.stdout, re.M)
    assert returned and -21.0 <= float(returned.group(1)) <= 21.0, result.stdout

    # the Coral file: int8 throughout, and every operator one the Edge TPU maps
    from edge_rl.converters.edgetpu import edgetpu_problems

    assert edgetpu_problems(coral_file.read_bytes()) == []
    result = edge_rl("eval", coral_file, "--episodes", 1)
    assert result.returncode == 0, result.stderr[-4000:]


def test_a_lost_life_is_marked_for_the_learner_and_the_game_goes_on():
    """DQN's episodic life: the step that loses a life goes to the learner marked `life_lost`
    (its targets end there) but not terminated, the actor plays on in the same episode, and
    the episode's return counts every life."""
    import importlib

    from edge_rl.device.rollout import Rollout

    importlib.import_module("support.lives_env")
    rollout = Rollout("support.lives_env:Lives-v0", 1, seed=0, batch_size=9,
                      action_example=np.int64(0))
    batches = []
    while not batches:
        batches = rollout.step(np.zeros(1, np.int64), np.zeros(1, np.int64))
    (game,) = batches
    assert game.life_lost.tolist() == [False, False, True, False, False, True,
                                       False, False, False]
    assert game.terminated.tolist() == [False] * 8 + [True]
    assert game.episode_step.tolist() == list(range(9)) and len(set(game.episode_id)) == 1
    np.testing.assert_array_equal(game.observation[3], game.next_observation[2])  # no reset
    assert rollout.take_returns() == [9.0]


def test_atari_says_when_a_life_is_lost():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    env = make_env("ALE/Breakout-v5", seed=0)
    env.reset(seed=0)
    lost, done = 0, False
    while not done:
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        lost += info[LIFE_LOST]
        done = terminated or truncated
    assert lost == 4  # five lives: four lost, then the game ends with the fifth
