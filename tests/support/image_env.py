"""Gymnasium envs with uint8 frames for observations, as Atari gives, and with clips of frames,
which no observation kind takes (registered on import, so `--env support.image_env:Frames-v0`
finds one when tests/ is on the path)."""

import gymnasium as gym
import numpy as np


class Frames(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (42, 42, 3), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.uint8), {}

    def step(self, action):
        frame = self.np_random.integers(0, 256, self.observation_space.shape, dtype=np.uint8)
        return frame, 0.0, False, False, {}


gym.register("Frames-v0", entry_point=Frames, max_episode_steps=10)


class Clips(Frames):
    observation_space = gym.spaces.Box(0, 255, (2, 42, 42, 3), np.uint8)


gym.register("Clips-v0", entry_point=Clips, max_episode_steps=10)
