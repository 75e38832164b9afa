"""RLx2's value learning: a delayed multi-step TD target and a replay that shrinks when stale.

Sparse networks learn from noisier targets than dense ones; RLx2 (Tan et al., ICLR 2023) keeps
them stable with two changes to where the targets come from:

  * multi-step returns, switched on only after `nstep_delay` env steps (1-step targets first,
    while the policy that gathered the data changes fastest); the n-step assembly itself is in
    edge_rl.replay.buffer (rewards cut at episode ends, truncation bootstraps, termination does not,
    gamma^n on the bootstrap);
  * a dynamic-capacity replay: every `buffer_check_interval` env steps, compare the current
    deterministic action with the one the actor stored on the oldest transitions; when that
    policy distance is above `buffer_threshold`, the oldest 10% go (not when the replay holds
    `buffer_min` or fewer). The capacity stays: new data refills the replay, so while the old
    data stays off-policy its size settles where a check's 10% equals one interval's inflow
    (ten intervals of data), and it grows again once the policy settles. This is what RLx2's
    code does (its buffer drops from the old end; its upper bound never moves).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from edge_rl.config import TrainConfig
from edge_rl.core import ReplayBuffer

log = logging.getLogger(__name__)

OLDEST = 2048  # transitions the policy distance is measured on
SHRINK = 0.1  # fraction of the stored transitions dropped when they are too off-policy


def nstep_now(config: TrainConfig, env_steps: int) -> int:
    """The n of the TD target at `env_steps`."""
    if config.delayed_nstep and env_steps < config.nstep_delay:
        return 1
    return config.nstep


def policy_distance(current: np.ndarray, stored: np.ndarray, action: dict) -> float:
    """Mean over rows and action dimensions of (pi(s) - a)^2 / 2, actions scaled to [-1, 1]:
    per dimension, as RLx2's code (a mean squared error over the whole batch, halved), so that
    its threshold 0.2 means the same for a 1-D and a 17-D action.

    For discrete actions: the fraction of rows whose greedy action changed."""
    if action["kind"] == "discrete":
        return float(np.mean(current != stored))
    low = np.asarray(action["low"], np.float64)
    high = np.asarray(action["high"], np.float64)

    def scaled(a: np.ndarray) -> np.ndarray:
        return 2.0 * (np.asarray(a, np.float64) - low) / (high - low) - 1.0

    return float(np.mean((scaled(current) - scaled(stored)) ** 2) / 2.0)


def check_buffer(replay: ReplayBuffer, greedy_actions: Callable[[np.ndarray], np.ndarray],
                 action: dict, threshold: float, minimum: int) -> float:
    """Measure the policy distance on the oldest transitions; drop the oldest 10% of `replay`
    if it is over `threshold` and the replay holds more than `minimum`. Returns the distance."""
    if len(replay) == 0:
        return 0.0
    observations, stored = replay.oldest(OLDEST)
    distance = policy_distance(greedy_actions(observations), stored, action)
    if distance > threshold and len(replay) > minimum:
        dropped = int(SHRINK * len(replay))
        log.info("replay: policy distance %.3f > %.3f on the oldest %d transitions; "
                 "%d of %d dropped", distance, threshold, len(stored), dropped, len(replay))
        replay.drop_oldest(dropped)
    return distance
