"""A gymnasium env with lives, as Atari has them: a life is lost at steps 3 and 6 (info
"life_lost"), the game ends at step 9; a point a step (registered on import, so
`support.lives_env:Lives-v0` finds it when tests/ is on the path)."""

import gymnasium as gym
import numpy as np


class Lives(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 10.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {"life_lost": self.t in (3, 6)}
        return np.full(1, self.t, np.float32), 1.0, self.t == 9, False, info


gym.register("Lives-v0", entry_point=Lives)
