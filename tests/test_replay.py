import numpy as np
import pytest
from support.frames import frame_batches, stacked_frame_batches

from edge_rl.device.wire import Transitions
from edge_rl.replay.buffer import Replay

GAMMA = 0.5


def batch(episode, steps, rewards, terminated_last=False, truncated_last=False, obs_base=0.0):
    n = len(steps)
    obs = np.asarray([[obs_base + s] for s in steps], np.float32)
    terminated = np.zeros(n, bool)
    truncated = np.zeros(n, bool)
    terminated[-1] = terminated_last
    truncated[-1] = truncated_last
    return Transitions(
        observation=obs,
        action=np.asarray(steps, np.int64),
        deterministic_action=np.asarray(steps, np.int64),
        reward=np.asarray(rewards, np.float32),
        next_observation=obs + 1,
        terminated=terminated,
        truncated=truncated,
        episode_id=np.full(n, episode, np.int64),
        episode_step=np.asarray(steps, np.int64),
    )


def sample_all(replay, index_of_step):
    """Sample until every stored transition was seen; map step -> sample row."""
    seen = {}
    for _ in range(200):
        s = replay.sample(64)
        for i in range(64):
            seen[int(s["action"][i])] = {k: v[i] for k, v in s.items()}
    return {step: seen[step] for step in index_of_step}


def test_nstep_returns_cut_at_termination_and_bootstrap_on_truncation():
    replay = Replay(100, (1,), (), "int64", gamma=GAMMA, nstep=3, seed=0)
    # actor 0: steps 0..3, the last terminates; actor 1 interleaves its own episode
    replay.insert(0, batch(7, [0, 1], [1, 2]))
    replay.insert(1, batch(7, [100, 101], [9, 9]))
    replay.insert(0, batch(7, [2, 3], [4, 8], terminated_last=True))
    rows = sample_all(replay, [0, 1, 2, 3])
    assert rows[0]["reward"] == pytest.approx(1 + GAMMA * 2 + GAMMA**2 * 4)
    assert rows[0]["discount"] == pytest.approx(GAMMA**2)
    assert rows[0]["next_observation"][0] == pytest.approx(3.0)  # next obs after step 2
    assert rows[2]["reward"] == pytest.approx(4 + GAMMA * 8)
    assert rows[2]["discount"] == 0.0  # reached a termination: no bootstrap
    assert rows[3]["discount"] == 0.0

    replay2 = Replay(100, (1,), (), "int64", gamma=GAMMA, nstep=3, seed=0)
    replay2.insert(0, batch(1, [0, 1], [1, 1], truncated_last=True))
    replay2.insert(0, batch(2, [0], [5]))  # a new episode must not be spliced on
    rows = sample_all(replay2, [1])
    assert rows[1]["reward"] == pytest.approx(1.0)
    assert rows[1]["discount"] == pytest.approx(1.0)  # truncation bootstraps (gamma^0 here)


def test_a_lost_life_ends_the_targets_but_not_the_episode(tmp_path):
    """Atari's episodic life: a step that lost a life gets no bootstrap and n-step sums stop
    there, yet the episode's links go through it (the next life's frames rebuild from the
    previous life's), and the flag survives a save and a load."""
    lost = batch(7, [0, 1, 2, 3], [1, 2, 4, 8])
    lost.life_lost[1] = True
    replay = Replay(100, (1,), (), "int64", gamma=GAMMA, nstep=3, seed=0)
    replay.insert(0, lost)
    replay.save(tmp_path / "replay.npz")
    loaded = Replay(100, (1,), (), "int64", gamma=GAMMA, nstep=3, seed=0)
    loaded.load(tmp_path / "replay.npz")
    for candidate in (replay, loaded):
        rows = sample_all(candidate, [0, 1, 2])
        assert rows[0]["reward"] == pytest.approx(1 + GAMMA * 2)  # stops at the lost life
        assert rows[0]["discount"] == 0.0
        assert rows[1]["discount"] == 0.0
        assert rows[2]["reward"] == pytest.approx(4 + GAMMA * 8)  # the next life's own sum
        assert rows[2]["discount"] == pytest.approx(GAMMA)
        assert candidate.data["successor"][1] == 2  # the episode goes on through it
    # a replay saved before the flag existed loads with no life lost
    with np.load(tmp_path / "replay.npz") as saved:
        older = {name: saved[name] for name in saved.files if name != "life_lost"}
    np.savez(tmp_path / "older.npz", **older)
    loaded.load(tmp_path / "older.npz")
    assert not loaded.data["life_lost"].any()


def test_missing_successor_gives_shorter_return():
    replay = Replay(100, (1,), (), "int64", gamma=GAMMA, nstep=3, seed=0)
    replay.insert(0, batch(1, [0, 1], [1, 1]))  # steps 2.. not arrived yet
    rows = sample_all(replay, [0, 1])
    assert rows[0]["reward"] == pytest.approx(1 + GAMMA)
    assert rows[0]["discount"] == pytest.approx(GAMMA)
    assert rows[1]["discount"] == pytest.approx(1.0)


def test_ring_overwrite_never_splices_episodes():
    replay = Replay(4, (1,), (), "int64", gamma=GAMMA, nstep=2, seed=0)
    replay.insert(0, batch(1, [0, 1, 2], [1, 1, 1]))
    replay.insert(0, batch(1, [3, 4, 5], [1, 1, 1]))  # overwrites steps 0 and 1
    assert len(replay) == 4
    rows = sample_all(replay, [2, 3, 4, 5])
    assert rows[2]["reward"] == pytest.approx(1 + GAMMA)
    assert rows[5]["reward"] == pytest.approx(1.0)
    assert set(int(a) for a in replay.data["action"]) == {2, 3, 4, 5}


def test_drop_oldest_keeps_links_and_the_ring_refills():
    replay = Replay(10, (1,), (), "int64", gamma=GAMMA, nstep=2, seed=0)
    replay.insert(0, batch(1, list(range(8)), [1.0] * 8))
    replay.drop_oldest(3)
    assert len(replay) == 5 and replay.capacity == 10
    observations, actions = replay.oldest(2)
    assert observations[:, 0].tolist() == [3.0, 4.0] and actions.tolist() == [3, 4]
    rows = sample_all(replay, [3, 6, 7])
    assert rows[3]["reward"] == pytest.approx(1 + GAMMA)
    assert rows[7]["reward"] == pytest.approx(1.0)
    # the open episode continues, and the ring wraps over the dropped slots
    replay.insert(0, batch(1, list(range(8, 15)), [1.0] * 7))
    assert len(replay) == 10
    assert sorted(int(a) for a in replay.data["action"]) == list(range(5, 15))
    rows = sample_all(replay, [7, 13, 14])
    assert rows[7]["reward"] == pytest.approx(1 + GAMMA)
    assert rows[13]["reward"] == pytest.approx(1 + GAMMA)
    assert rows[14]["reward"] == pytest.approx(1.0)


def test_save_and_load_round_trip(tmp_path):
    replay = Replay(6, (1,), (), "int64", gamma=GAMMA, nstep=2, seed=3)
    replay.insert(0, batch(1, [0, 1, 2, 3], [1, 2, 3, 4]))
    replay.insert(1, batch(5, [0, 1, 2, 3], [1, 2, 3, 4]))  # wraps the ring
    replay.save(tmp_path / "replay.npz")
    restored = Replay(6, (1,), (), "int64", gamma=GAMMA, nstep=2, seed=99)
    restored.load(tmp_path / "replay.npz")
    assert len(restored) == len(replay) == 6
    a, b = replay.sample(32), restored.sample(32)  # same sampler state, same samples
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    # the open episode is still linked after loading: its next transition becomes the
    # successor of its last stored one
    def position(step):
        d = restored.data
        return int(np.flatnonzero((d["actor_key"] == 1) & (d["episode_step"] == step))[0])

    last = position(3)
    assert restored.data["successor"][last] == -1
    restored.insert(1, batch(5, [4], [5]))
    assert restored.data["successor"][last] == position(4)


def link_one_by_one(replay, actor_key, transitions):
    """The successor rule, one transition at a time: the definition `Replay.insert` must
    match (it does the same per episode in numpy)."""
    n = len(transitions)
    positions = (replay.start + replay.size + np.arange(n)) % replay.capacity
    replay.start = (replay.start + max(0, replay.size + n - replay.capacity)) % replay.capacity
    replay.size = min(replay.capacity, replay.size + n)
    d = replay.data
    for name in ("observation", "next_observation", "action", "deterministic_action",
                 "reward", "terminated", "truncated", "episode_id", "episode_step"):
        d[name][positions] = getattr(transitions, name)
    d["actor_key"][positions] = actor_key
    d["successor"][positions] = -1
    for i, position in enumerate(positions.tolist()):
        key = (actor_key, int(transitions.episode_id[i]))
        previous = replay._tails.pop(key, None)
        if previous is not None and replay._holds(previous, key,
                                                  transitions.episode_step[i] - 1):
            d["successor"][previous] = position
        if not (transitions.terminated[i] or transitions.truncated[i]):
            replay._tails[key] = position


def interleaved_batch(rng, n, envs, state):
    """n transitions of `envs` envs stepping in random turns: episodes end (terminated or
    truncated) at random, now and then a step goes missing, and now and then an ended
    episode's id goes on (as a faulty actor's might: it must not be linked across the end)."""
    episode, step, terminated, truncated = [], [], [], []
    for _ in range(n):
        env = int(rng.integers(envs))
        episode_id, episode_step = state[env]
        r = rng.random()
        episode.append(episode_id)
        step.append(episode_step)
        terminated.append(r < 0.02)
        truncated.append(0.02 <= r < 0.04)
        if r < 0.04 and rng.random() < 0.8:
            state[env] = (state["next"], 0)
            state["next"] += 1
        else:
            state[env] = (episode_id, episode_step + (2 if rng.random() < 0.01 else 1))
    obs = rng.standard_normal((n, 1)).astype(np.float32)
    return Transitions(
        observation=obs, action=np.zeros(n, np.int64), deterministic_action=np.zeros(n, np.int64),
        reward=rng.standard_normal(n).astype(np.float32), next_observation=obs,
        terminated=np.asarray(terminated), truncated=np.asarray(truncated),
        episode_id=np.asarray(episode, np.int64), episode_step=np.asarray(step, np.int64),
    )


@pytest.mark.parametrize("capacity", [37, 500, 20_000])
def test_insert_links_like_one_transition_at_a_time(capacity):
    rng = np.random.default_rng(capacity)
    replay = Replay(capacity, (1,), (), "int64", GAMMA, nstep=3)
    reference = Replay(capacity, (1,), (), "int64", GAMMA, nstep=3)
    states = {actor: {**{env: (env, 0) for env in range(6)}, "next": 6} for actor in (1, 2)}
    for i in range(300):
        actor = 1 + i % 2
        transitions = interleaved_batch(rng, int(rng.integers(1, min(capacity, 300))), 6,
                                        states[actor])
        replay.insert(actor, transitions)
        link_one_by_one(reference, actor, transitions)
        assert replay._tails == reference._tails
        for name in ("successor", "episode_id", "episode_step", "actor_key"):
            np.testing.assert_array_equal(replay.data[name], reference.data[name])
        assert (replay.start, replay.size) == (reference.start, reference.size)


# -- each frame stored once ----------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [10_000, 250])  # 250: the ring wraps many times
def test_frames_stored_once_sample_as_frames_stored_twice(capacity, tmp_path):
    """A replay keeping each frame once gives the same samples as one keeping every
    transition's next frame, through ring overwrites, dropping, a save and a load."""
    def replay(once: bool) -> Replay:
        return Replay(capacity, (16, 16, 1), (), "int64", gamma=0.9, nstep=3, seed=7,
                      observation_dtype="uint8", once=once)

    twice, once = replay(False), replay(True)
    batches = frame_batches(40)
    for i, b in enumerate(batches):
        actor = i % 2  # two actors' batches interleave, each its own episodes
        twice.insert(actor, b)
        once.insert(actor, b)
        if i == 30:
            twice.drop_oldest(100)
            once.drop_oldest(100)
    once.save(tmp_path / "replay.npz")
    loaded = replay(True)
    loaded.load(tmp_path / "replay.npz")
    expected = twice.sample(512)
    for candidate in (once, loaded):
        got = candidate.sample(512)
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert "next_observation" not in once.data


def test_a_frame_costs_one_copy_per_transition_plus_one_per_episode():
    replay = Replay(10_000, (16, 16, 1), (), "int64", gamma=0.9, nstep=1, seed=0,
                    observation_dtype="uint8", once=True)
    batches = frame_batches(30, num_envs=2, batch_size=50)  # batches cut episodes
    for b in batches:
        replay.insert(0, b)
    frame = 16 * 16
    transitions = sum(len(b) for b in batches)
    episodes = sum(int((b.terminated | b.truncated).sum()) for b in batches)
    kept = len(replay.final_observations)
    assert replay.data["observation"].nbytes == replay.capacity * frame
    assert kept <= episodes + 2  # the ended episodes' last frames, and one open tail an env
    assert kept * frame <= transitions * frame / 16 + 2 * frame  # 16-frame episodes


@pytest.mark.parametrize("capacity", [100_000, 300])  # 300: the ring wraps many times
def test_stacked_frames_stored_once_rebuild_every_observation(capacity, tmp_path):
    """4-frame stacks keep one frame a transition, and rebuild every observation and next
    observation as stored whole, through ring overwrites, dropping, a save and a load; what
    an overwrite made unknown is never sampled."""
    def replay(once: bool, stack: int) -> Replay:
        return Replay(capacity, (8, 8, 4), (), "int64", gamma=0.9, nstep=3, seed=7,
                      observation_dtype="uint8", once=once, stack=stack)

    whole, stacked = replay(False, 1), replay(True, 4)
    actors = [stacked_frame_batches(30, seed=seed) for seed in (1, 2)]  # two actors' streams
    for i in range(60):
        b = actors[i % 2][i // 2]
        whole.insert(i % 2, b)
        stacked.insert(i % 2, b)
        if i == 40:
            whole.drop_oldest(150)
            stacked.drop_oldest(150)
    assert stacked.data["observation"].shape[1:] == (8, 8, 1)  # a frame, not a stack
    assert not stacked.stacks  # this env's stacks all rebuild from their frames
    stacked.save(tmp_path / "replay.npz")
    loaded = replay(True, 4)
    loaded.load(tmp_path / "replay.npz")
    positions = whole.positions()
    for candidate in (stacked, loaded):
        here = candidate.positions()
        observation, exact = candidate.observations(here)
        np.testing.assert_array_equal(observation[exact],
                                      whole.data["observation"][positions][exact])
        following, next_exact = candidate.next_observations(here)
        np.testing.assert_array_equal(following[next_exact],
                                      whole.data["next_observation"][positions][next_exact])
        # only transitions whose earliest frames the ring overwrote are inexact: a few of
        # the oldest, none where the ring never wrapped (dropped frames stay readable, and a
        # save keeps whole the stacks that reach before what it saves)
        assert exact.all() if capacity > 10_000 else not (~exact)[len(exact) // 10:].any()
    batch = stacked.sample(256)
    truth = {whole.data["observation"][p].tobytes() for p in positions}
    assert all(o.tobytes() in truth for o in batch["observation"])


def test_an_observation_the_frames_would_not_rebuild_is_kept_whole():
    """An env that starts its stacks with zeros, not its first frame repeated: those
    observations are kept whole, and still come back as they were."""
    batch = stacked_frame_batches(1, num_envs=1, batch_size=30)[0]
    starts = batch.episode_step == 0
    batch.observation[starts, ..., :3] = 0  # zero padding before the first frame
    replay = Replay(1000, (8, 8, 4), (), "int64", gamma=0.9, seed=0, observation_dtype="uint8",
                    once=True, stack=4)
    replay.insert(0, batch)
    observation, exact = replay.observations(replay.positions())
    assert exact.all()
    np.testing.assert_array_equal(observation, batch.observation)
    assert len(replay.stacks) >= int(starts.sum())


def test_rewards_are_clipped_in_the_targets_only():
    """Atari's learner clips each reward before the n-step sum; what is stored stays the
    env's (returns are reported from the actors' own sums)."""
    replay = Replay(100, (1,), (), "int64", gamma=GAMMA, nstep=2, seed=0, reward_clip=1.0)
    replay.insert(0, batch(0, [0, 1, 2], [5.0, -3.0, 0.5], terminated_last=True))
    rows = sample_all(replay, [0, 1, 2])
    assert rows[0]["reward"] == pytest.approx(1.0 + GAMMA * -1.0)
    assert rows[1]["reward"] == pytest.approx(-1.0 + GAMMA * 0.5)
    assert rows[2]["reward"] == pytest.approx(0.5)
    assert replay.data["reward"][:3].tolist() == [5.0, -3.0, 0.5]


def test_atari_runs_clip_rewards_by_default_and_others_do_not():
    from edge_rl.agents import get_algorithm
    from edge_rl.algorithm import resolve_defaults
    from edge_rl.config import TrainConfig

    dqn = get_algorithm("dqn")
    assert resolve_defaults(dqn, TrainConfig(env="ALE/Pong-v5")).reward_clip == 1.0
    assert resolve_defaults(dqn, TrainConfig(env="CartPole-v1")).reward_clip == 0.0
    told = TrainConfig(env="ALE/Pong-v5", reward_clip=0.0)
    assert resolve_defaults(dqn, told).reward_clip == 0.0
