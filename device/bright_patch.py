"""EdgeRL/BrightPatch-v0: the smallest env that needs a convolutional policy to be learned.

Each step shows a 16x16 grayscale frame (uint8) of dim noise with one bright 4x4 patch at a
random place in one of its four quadrants; the action names a quadrant (0 top-left, 1
top-right, 2 bottom-left, 3 bottom-right) and is paid 1 when it names the patch's. An episode
is 16 frames, so a policy that reads the frame scores 16 and one that guesses 4 on average.

It exists to test the image path end to end in seconds (frames on the wire and in replay, a
CNN learner, int8 files with uint8 input) where Atari would take hours. Made with
`make_env("EdgeRL/BrightPatch-v0")` (edge_rl.device.envs registers it).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "EdgeRL/BrightPatch-v0"
SIDE = 16
PATCH = 4
EPISODE_STEPS = 16
NOISE_MAX = 48  # background pixels are uniform in [0, NOISE_MAX]
PATCH_MIN = 160  # patch pixels are uniform in [PATCH_MIN, 255]


def register() -> None:
    """Make ENV_ID known to gymnasium (again is harmless)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=BrightPatchEnv)


class BrightPatchEnv(gym.Env):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (SIDE, SIDE, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self._quadrant = 0
        self._steps = 0

    def _draw(self) -> np.ndarray:
        rng = self.np_random
        frame = rng.integers(0, NOISE_MAX + 1, (SIDE, SIDE, 1)).astype(np.uint8)
        self._quadrant = int(rng.integers(4))
        half = SIDE // 2
        top = (self._quadrant // 2) * half + int(rng.integers(half - PATCH + 1))
        left = (self._quadrant % 2) * half + int(rng.integers(half - PATCH + 1))
        frame[top:top + PATCH, left:left + PATCH, 0] = rng.integers(PATCH_MIN, 256, (PATCH, PATCH))
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._steps = 0
        return self._draw(), {}

    def step(self, action):
        reward = float(int(action) == self._quadrant)
        self._steps += 1
        return self._draw(), reward, self._steps >= EPISODE_STEPS, False, {}
