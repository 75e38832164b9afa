"""The replay stage, between the transport and the learner's updates.

    buffer  Replay: transitions in arrival order, n-step returns assembled at sample time
    prioritized  PrioritizedReplay: Replay drawn by |TD error| (DQN's default on vectors)
    rlx2    RLx2's schedule for it: when the n changes and when the oldest data goes

numpy only; the algorithms' defaults (edge_rl.algorithm) size the replay with rlx2's numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge_rl import core
    from edge_rl.config import TrainConfig
    from edge_rl.device.observations import ObservationSpec
    from edge_rl.replay.buffer import Replay


def make_replay(config: TrainConfig, observation: ObservationSpec, action: dict) -> Replay:
    """The run's replay for its env's observations and actions: uniform, or prioritized where
    `config.replay_priority` (alpha) is above 0."""
    from edge_rl.replay.buffer import Replay
    from edge_rl.replay.prioritized import PrioritizedReplay

    discrete = action["kind"] == "discrete"
    settings = dict(
        capacity=config.replay_capacity,
        observation_shape=observation.shape,
        action_shape=() if discrete else tuple(action["shape"]),
        action_dtype="int64" if discrete else "float32",
        gamma=config.gamma,
        nstep=config.nstep,
        seed=config.seed,
        observation_dtype=observation.dtype,
        once=observation.kind.once,
        stack=observation.stack,
        reward_clip=config.reward_clip,
    )
    if config.replay_priority:
        return PrioritizedReplay(**settings, alpha=config.replay_priority)
    return Replay(**settings)


def train_from_replay(learner: core.Learner, replay: core.ReplayBuffer, updates: int,
                      batch_size: int, progress: float) -> Any:
    """`updates` updates on minibatches sampled from `replay`; returns the last loss.

    A prioritized replay (edge_rl.replay.prioritized) gets its importance-weight exponent for
    the run's `progress` (0 to 1) first, and the TD errors of the updates after."""
    if not replay.prioritized:
        return learner.train(replay.sample(updates * batch_size), updates)
    replay.anneal(progress)
    batch = replay.sample(updates * batch_size)
    loss, td_errors = learner.train_weighted(batch, updates)
    replay.update_priorities(batch, td_errors)
    return loss
