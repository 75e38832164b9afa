"""Batches of frames as an actor sends them, for the image path's tests."""

import numpy as np


def frame_batches(n_batches: int, num_envs: int = 3, batch_size: int = 37):
    """Batches of real rollouts of EdgeRL/BrightPatch-v0 (16-frame episodes), several envs
    interleaved and batches cutting episodes, as an actor sends them."""
    from edge_rl.device.rollout import Rollout

    rollout = Rollout("EdgeRL/BrightPatch-v0", num_envs, seed=3, batch_size=batch_size,
                      action_example=np.int64(0))
    rng = np.random.default_rng(0)
    batches = []
    while len(batches) < n_batches:
        actions = rng.integers(0, 4, num_envs)
        batches += rollout.step(actions, actions)
    rollout.close()
    return batches[:n_batches]


def stacked_frame_batches(n_batches: int, num_envs: int = 3, batch_size: int = 41,
                          seed: int = 1):
    """Batches of 4-frame stacks (edge_rl.device.atari's stacker over 8x8 frames of noise,
    episodes of random length, lives lost at random steps in between), several envs
    interleaved, as an actor sends them."""
    import gymnasium as gym

    from edge_rl.device.atari import ChannelsLastFrameStack

    class Noise(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (8, 8), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.np_random.integers(0, 256, (8, 8), dtype=np.uint8), {}

        def step(self, action):
            frame = self.np_random.integers(0, 256, (8, 8), dtype=np.uint8)
            ends, loses = self.np_random.random(2) < (0.05, 0.1)
            return frame, 1.0, bool(ends), False, {"life_lost": bool(loses and not ends)}

    envs = [ChannelsLastFrameStack(Noise(), 4) for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    observations = np.stack([env.reset(seed=seed * 100 + i)[0] for i, env in enumerate(envs)])
    episode_ids = np.arange(num_envs)
    steps = np.zeros(num_envs, np.int64)
    rows: list[dict] = []
    while len(rows) < n_batches * batch_size:
        for i, env in enumerate(envs):
            action = int(rng.integers(2))
            following, reward, terminated, truncated, info = env.step(action)
            rows.append(dict(observation=observations[i].copy(), action=action, reward=reward,
                             next_observation=following, terminated=terminated,
                             truncated=truncated, life_lost=info["life_lost"],
                             episode_id=episode_ids[i], episode_step=steps[i]))
            steps[i] += 1
            if terminated or truncated:
                following = env.reset()[0]
                episode_ids[i] = episode_ids.max() + 1
                steps[i] = 0
            observations[i] = following
    return [_transitions(rows[k * batch_size:(k + 1) * batch_size]) for k in range(n_batches)]


def _transitions(rows: list[dict]):
    from edge_rl.device.wire import Transitions

    def column(name, dtype):
        return np.asarray([row[name] for row in rows], dtype)

    return Transitions(
        observation=column("observation", np.uint8), action=column("action", np.int64),
        deterministic_action=column("action", np.int64), reward=column("reward", np.float32),
        next_observation=column("next_observation", np.uint8),
        terminated=column("terminated", bool), truncated=column("truncated", bool),
        episode_id=column("episode_id", np.int64), episode_step=column("episode_step", np.int64),
        life_lost=column("life_lost", bool))
