"""Exploration in numpy, applied on the device to the network's outputs.

The learner tells each actor how to explore (ExplorationSettings, sent as JSON in Hello):
  * epsilon_greedy (DQN): a random action with probability epsilon, which decays linearly
    from epsilon_start to epsilon_end over decay_steps of the actor's own env steps;
  * gaussian (TD3): the deterministic action plus N(0, noise_std * half-range), clipped;
  * sac: a sample of the tanh-squashed Gaussian whose mean and log-std the network outputs
    (its second output; see PolicyMetadata.output).
For the first random_steps env steps of an actor, actions are uniform random (warm-up).
An algorithm that explores otherwise registers its kind with `register_exploration`, on the
learner and on its actors' devices alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from edge_rl.device.outputs import squash_to_bounds

# kind -> (explorer, network outputs, greedy actions) -> the actions taken
EXPLORATIONS: dict[str, Callable[[Explorer, np.ndarray, np.ndarray], np.ndarray]] = {}


def register_exploration(kind: str):
    """Decorator: make the function the exploration of `kind`."""
    def add(explore):
        EXPLORATIONS[kind] = explore
        return explore
    return add

# SAC's log-std is clipped to this range, as TF-Agents' std_clip_transform does.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


@dataclass(frozen=True)
class ExplorationSettings:
    """How one actor explores."""

    kind: str
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    decay_steps: int = 10_000
    noise_std: float = 0.1  # gaussian: fraction of the action's half-range
    random_steps: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ExplorationSettings:
        return cls(**json.loads(text))


class RandomBlock:
    """Random numbers drawn from `rng` in blocks and handed out in slices.

    One call to numpy's generator costs a few microseconds whatever its size; an actor needs a
    handful of numbers per step, so it draws thousands at a time.
    """

    def __init__(self, draw, block: int = 16_384):
        self._draw = draw  # size -> array
        self._block = block
        self._values = draw(block)
        self._used = 0

    def take(self, n: int) -> np.ndarray:
        if self._used + n > len(self._values):
            rest = self._values[self._used:]
            self._values = np.concatenate([rest, self._draw(max(self._block, n))])
            self._used = 0
        out = self._values[self._used:self._used + n]
        self._used += n
        return out


class Explorer:
    """Turns network outputs into (action taken, deterministic action) for a batch."""

    def __init__(self, settings: ExplorationSettings, policy_metadata, rng: np.random.Generator):
        if settings.kind not in EXPLORATIONS:
            raise ValueError(f"unknown exploration kind {settings.kind!r}")
        self.settings = settings
        self.rng = rng
        self.normal = RandomBlock(lambda n: rng.standard_normal(n, dtype=np.float32))
        self.uniform = RandomBlock(lambda n: rng.random(n, dtype=np.float32))
        action = policy_metadata.action
        self.discrete = action["kind"] == "discrete"
        if self.discrete:
            self.num_actions = int(action["n"])
        else:
            self.low = np.asarray(action["low"], np.float32)
            self.high = np.asarray(action["high"], np.float32)
            self.noise_scale = (settings.noise_std * 0.5 * (self.high - self.low)).astype(
                np.float32
            )
        self.steps = 0  # env steps this actor has taken (each row of a batch is one)
        # squashed_gaussian outputs are [greedy action, mean, log-std]: sample from the last two
        self.gaussian_from = 1 if policy_metadata.output == "squashed_gaussian" else 0

    def epsilon(self) -> float:
        s = self.settings
        fraction = min(1.0, self.steps / max(1, s.decay_steps))
        return s.epsilon_start + fraction * (s.epsilon_end - s.epsilon_start)

    def random_actions(self, n: int) -> np.ndarray:
        if self.discrete:
            return self.rng.integers(0, self.num_actions, size=n, dtype=np.int64)
        return self.rng.uniform(self.low, self.high, size=(n, *self.low.shape)).astype(np.float32)

    def __call__(self, outputs: np.ndarray, greedy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = greedy.shape[0]
        warming_up = self.steps < self.settings.random_steps
        self.steps += n
        if warming_up:
            # the uniform policy acted: its action is also the one the replay compares the
            # learner's policy with (RLx2's policy distance, as its code stores it)
            random = self.random_actions(n)
            return random, random
        actions = EXPLORATIONS[self.settings.kind](self, outputs, greedy)
        return actions.astype(greedy.dtype, copy=False), greedy


@register_exploration("epsilon_greedy")
def _epsilon_greedy(explorer: Explorer, outputs: np.ndarray, greedy: np.ndarray) -> np.ndarray:
    n = greedy.shape[0]
    explore = explorer.uniform.take(n) < explorer.epsilon()
    if not explore.any():
        return greedy
    return np.where(explore, explorer.random_actions(n), greedy)


@register_exploration("gaussian")
def _gaussian(explorer: Explorer, outputs: np.ndarray, greedy: np.ndarray) -> np.ndarray:
    noise = explorer.normal.take(greedy.size).reshape(greedy.shape)
    return np.clip(greedy + noise * explorer.noise_scale, explorer.low, explorer.high)


@register_exploration("sac")
def _sac(explorer: Explorer, outputs: np.ndarray, greedy: np.ndarray) -> np.ndarray:
    mean_log_std = outputs[..., explorer.gaussian_from * greedy.shape[-1]:]
    return sac_sample(mean_log_std, explorer.low, explorer.high,
                      explorer.normal.take(greedy.size).reshape(greedy.shape))


def sac_sample(
    mean_log_std: np.ndarray, low: np.ndarray, high: np.ndarray, noise: np.ndarray
) -> np.ndarray:
    """Sample tanh(N(mean, exp(log_std))) scaled to [low, high], as TF-Agents' SAC actor does.

    `noise`: standard normal draws, one per action dimension of each row.
    """
    dim = mean_log_std.shape[-1] // 2
    mean = mean_log_std[..., :dim]
    log_std = np.clip(mean_log_std[..., dim:], LOG_STD_MIN, LOG_STD_MAX)
    pre_tanh = mean + np.exp(log_std) * noise
    return squash_to_bounds(np.tanh(pre_tanh), low, high)
