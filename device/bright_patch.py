"""EdgeRL/BrightPatch-v0: the smallest env that needs a convolutional policy to be learned.

Each step shows a 16x16 grayscale frame (uint8) of dim noise with one bright 4x4 patch at a
random place in one of its four quadrants; the action names a quadrant (0 top-left, 1
top-right, 2 bottom-left, 3 bottom-right) and is paid 1 when it names the patch's. An episode
is 16 frames, cut by a time limit (truncated, not terminated), so a policy that reads the
frame scores 16 and one that guesses 4 on average.

EdgeRL/BrightPatchPoint-v0 shows the same frames to continuous-action algorithms (TD3, SAC,
D4PG): the action is a point (x, y) in [-1, 1]^2, x to the right and y down, and each step pays
1 - (|x - px| + |y - py|) / 2 where (px, py) is the patch's centre on that scale. Pointing at
it scores 16; the frame's centre earns 8.0 on average, uniform random points 5.8.

They exist to test the image path end to end in seconds (frames on the wire and in replay, a
CNN learner, int8 files with uint8 input) where Atari would take hours. Made with
`make_env("EdgeRL/BrightPatch-v0")` (edge_rl.device.envs registers them).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "EdgeRL/BrightPatch-v0"
POINT_ENV_ID = "EdgeRL/BrightPatchPoint-v0"
SIDE = 16
PATCH = 4
EPISODE_STEPS = 16
NOISE_MAX = 48  # background pixels are uniform in [0, NOISE_MAX]
PATCH_MIN = 160  # patch pixels are uniform in [PATCH_MIN, 255]


def register() -> None:
    """Make ENV_ID and POINT_ENV_ID known to gymnasium (again is harmless)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=BrightPatchEnv)
    if POINT_ENV_ID not in gym.registry:
        gym.register(POINT_ENV_ID, entry_point=BrightPatchPointEnv)


class BrightPatchEnv(gym.Env):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (SIDE, SIDE, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self._quadrant = 0
        self._steps = 0
        self._centre = (0.0, 0.0)

    def _draw(self) -> np.ndarray:
        rng = self.np_random
        frame = rng.integers(0, NOISE_MAX + 1, (SIDE, SIDE, 1)).astype(np.uint8)
        self._quadrant = int(rng.integers(4))
        half = SIDE // 2
        top = (self._quadrant // 2) * half + int(rng.integers(half - PATCH + 1))
        left = (self._quadrant % 2) * half + int(rng.integers(half - PATCH + 1))
        frame[top:top + PATCH, left:left + PATCH, 0] = rng.integers(PATCH_MIN, 256, (PATCH, PATCH))
        # the patch's centre, x right and y down, in [-1, 1] (a pixel is 2 / SIDE wide)
        self._centre = ((left + PATCH / 2) * 2 / SIDE - 1, (top + PATCH / 2) * 2 / SIDE - 1)
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._steps = 0
        return self._draw(), {}

    def step(self, action):
        reward = self._reward(action)  # for the frame the action answers, before the next
        self._steps += 1
        # A time limit truncates: nothing in a frame says how many steps are left, so an
        # episode that terminated at its 16th would ask the critic for values the frame
        # cannot predict (up to ~15 apart on the same frame, against action gaps of at most
        # 1). Truncated, targets bootstrap through the limit and a frame's value is the same
        # at every step (docs/pixels.md: TD3 learned and then lost the point env that way).
        return self._draw(), reward, False, self._steps >= EPISODE_STEPS, {}

    def _reward(self, action) -> float:
        return float(int(action) == self._quadrant)


class BrightPatchPointEnv(BrightPatchEnv):
    """The same frames; the action points at the patch (see the module's text)."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _reward(self, action) -> float:
        x, y = np.clip(np.asarray(action, np.float64).reshape(2), -1.0, 1.0)
        centre_x, centre_y = self._centre
        return float(1.0 - (abs(x - centre_x) + abs(y - centre_y)) / 2.0)
