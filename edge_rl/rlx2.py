"""RLx2's value learning: a delayed multi-step TD target and a replay that shrinks when stale.

Sparse networks learn from noisier targets than dense ones; RLx2 (Tan et al., ICLR 2023) keeps
them stable with two changes to where the targets come from:

  * multi-step returns, switched on only after `nstep_delay` env steps (1-step targets first,
    while the policy that gathered the data changes fastest); the n-step assembly itself is in
    edge_rl.replay (rewards cut at episode ends, truncation bootstraps, termination does not,
    gamma^n on the bootstrap);
  * a dynamic-capacity replay: every `buffer_check_interval` env steps, compare the current
    deterministic action with the one the actor stored on the oldest transitions; when that
    policy distance is above `buffer_threshold`, the oldest 10% go (never below `buffer_min`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from edge_rl.config import TrainConfig
from edge_rl.replay import Replay

log = logging.getLogger(__name__)

OLDEST = 2048  # transitions the policy distance is measured on
SHRINK = 0.1  # fraction of the stored transitions dropped when they are too off-policy


def nstep_now(config: TrainConfig, env_steps: int) -> int:
    """The n of the TD target at `env_steps`."""
    if config.delayed_nstep and env_steps < config.nstep_delay:
        return 1
    return config.nstep


def policy_distance(current: np.ndarray, stored: np.ndarray, action: dict) -> float:
    """Mean of |pi(s) - a|^2 / 2 over rows, with actions scaled to [-1, 1].

    For discrete actions, one-hot vectors: the fraction of rows whose greedy action changed."""
    if action["kind"] == "discrete":
        return float(np.mean(current != stored))
    low = np.asarray(action["low"], np.float64)
    high = np.asarray(action["high"], np.float64)

    def scaled(a: np.ndarray) -> np.ndarray:
        return 2.0 * (np.asarray(a, np.float64) - low) / (high - low) - 1.0

    gap = scaled(current) - scaled(stored)
    return float(np.mean(np.sum(gap.reshape(len(gap), -1) ** 2, axis=1) / 2.0))


def check_buffer(replay: Replay, greedy_actions: Callable[[np.ndarray], np.ndarray],
                 action: dict, threshold: float, minimum: int) -> float:
    """Measure the policy distance on the oldest transitions; shrink `replay` if it is over
    `threshold`. Returns the distance."""
    if len(replay) == 0:
        return 0.0
    oldest = replay.positions()[:OLDEST]
    observations = replay.data["observation"][oldest]
    stored = replay.data["deterministic_action"][oldest]
    distance = policy_distance(greedy_actions(observations), stored, action)
    if distance > threshold and len(replay) > minimum:
        capacity = max(minimum, len(replay) - int(SHRINK * len(replay)))
        log.info("replay: policy distance %.3f > %.3f on the oldest %d transitions; "
                 "capacity %d -> %d", distance, threshold, len(oldest), replay.capacity, capacity)
        replay.resize(capacity)
    return distance
