"""Atari through the Arcade Learning Environment (`ALE/<Game>-v5`, the [atari] extra), with
the standard DQN preprocessing (Mnih et al. 2015, as Machado et al. 2018 evaluate it):

- the v5 env at one frame a step (`frameskip=1`) and its sticky actions (repeat probability
  0.25) and 108,000-frame episode limit left as v5 has them;
- gymnasium's `AtariPreprocessing`: up to 30 no-op actions at reset, each action repeated 4
  frames with the last two max-pooled, grayscale, resized to 84x84 (INTER_AREA), kept uint8
  (no scaling: the network scales, the int8 file takes the raw bytes); an episode still ends
  at game over, and a step that loses a life says so in its info (`LIFE_LOST`): training
  actors mark it `life_lost` for the learner, whose targets end there, and play on (episodic
  life; the episode and its frames go on), evaluations play whole games;
- the last 4 preprocessed frames as channels, last axis: uint8 (84, 84, 4), the `frames`
  observation kind (edge_rl.device.observations). At reset the stack is the reset frame 4
  times.

Rewards here are the game's own: the learner clips them (TrainConfig.reward_clip, 1 for
`ALE/` ids). `edge_rl.device.envs.make_env` builds these
for every id starting with `ALE/`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from edge_rl.device.envs import LIFE_LOST
from edge_rl.device.errors import UserError

PREFIX = "ALE/"
FRAME_SKIP = 4
NOOP_MAX = 30
SCREEN_SIZE = 84
FRAME_STACK = 4


def register_atari() -> None:
    """Register ale_py's envs with gymnasium; a one-line error without the [atari] extra."""
    try:
        import ale_py
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError as err:
        raise UserError(
            f"Atari envs need ale-py and opencv ({err.name or err} is missing): "
            "pip install 'edge-rl[atari]'"
        ) from None
    gym.register_envs(ale_py)


def preprocess(env: Any) -> Any:
    """`env` (an ALE env made with frameskip=1) as a DQN sees it: uint8 (84, 84, 4)."""
    from gymnasium.wrappers import AtariPreprocessing

    env = AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP,
                             screen_size=SCREEN_SIZE, terminal_on_life_loss=False,
                             grayscale_obs=True, scale_obs=False)
    return ChannelsLastFrameStack(LivesLost(env), FRAME_STACK)


class LivesLost(gym.Wrapper):
    """Marks a step that lost a life without ending the game: info[LIFE_LOST] = True."""

    def __init__(self, env: Any):
        super().__init__(env)
        self.lives = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        info[LIFE_LOST] = lives < self.lives and not (terminated or truncated)
        self.lives = lives
        return obs, reward, terminated, truncated, info


class ChannelsLastFrameStack(gym.Wrapper):
    """The last `size` observations of a 2-D Box env stacked on a new last axis (gymnasium's
    FrameStackObservation stacks on the first); at reset, the reset observation `size` times."""

    def __init__(self, env: Any, size: int):
        super().__init__(env)
        space = env.observation_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 2):
            raise ValueError(f"frames to stack must be a 2-D Box, not {space}")
        self.observation_space = gym.spaces.Box(
            np.repeat(space.low[..., None], size, axis=-1),
            np.repeat(space.high[..., None], size, axis=-1), dtype=space.dtype)
        self.frames: deque[np.ndarray] = deque(maxlen=size)
        self.frame_stack = size  # edge_rl.device.envs.frame_stack reads it

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.frames.extend([np.array(obs)] * self.frames.maxlen)
        return np.stack(self.frames, axis=-1), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(np.array(obs))  # a copy: a wrapper below may reuse its buffer
        return np.stack(self.frames, axis=-1), reward, terminated, truncated, info
