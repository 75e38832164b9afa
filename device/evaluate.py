"""Greedy evaluation of a policy file on its env: what `edge-rl eval` and the learner run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_rl.device.envs import make_env
from edge_rl.device.errors import UserError
from edge_rl.device.observations import describe_observations
from edge_rl.device.policy import Policy

EVAL_SEED = 1_000_000  # episode i of an evaluation resets with EVAL_SEED + i
# Episodes a run's kept policy was not chosen on: the best of many evaluations on the same
# episodes flatters the policy that did best on them, so its return is measured again here.
HELDOUT_SEED = 2_000_000


@dataclass(frozen=True)
class EvalResult:
    returns: list[float]
    median_latency_us: float
    # the observations the policy acted on, when asked for (calibration, verification), in
    # their kind's stored dtype: every one, or evenly spaced ones past KEPT_BYTES
    observations: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def as_dict(self) -> dict:
        return {"mean": self.mean, "std": self.std, "episodes": len(self.returns)}


def check_env_matches(policy: Policy, env) -> None:
    """A policy made for another env's specs is a user mistake, reported in one line."""
    meta = policy.metadata
    observations = describe_observations(env.observation_space)
    if (meta.observation, tuple(meta.observation_shape)) != (observations.kind.name,
                                                             observations.shape):
        raise UserError(
            f"this policy was made for {meta.env_id} ({meta.observation} observations "
            f"{list(meta.observation_shape)}), not for an env with {observations.kind.name} "
            f"observations {list(observations.shape)}"
        )
    space = env.action_space
    if meta.discrete != (getattr(space, "n", None) is not None) or (
        meta.discrete and int(space.n) != int(meta.action["n"])
    ):
        raise UserError(f"this policy was made for {meta.env_id}, whose actions differ: {space}")
    if not meta.discrete and list(space.shape) != list(meta.action["shape"]):
        raise UserError(f"this policy was made for {meta.env_id}, whose actions differ: {space}")


def evaluate(
    policy: Policy,
    env_id: str | None = None,
    episodes: int = 20,
    seed: int = EVAL_SEED,
    max_episode_steps: int | None = None,
    keep_observations: bool = False,
) -> EvalResult:
    """Run `episodes` greedy episodes; episode i resets with seed + i, so runs compare.

    `keep_observations`: also return the observations acted on, all of them while they take
    at most KEPT_BYTES, else every 2nd, 4th, ... of them (an Atari policy that never serves
    plays 27,000 steps an episode, 0.76 GB of (84, 84, 4) frames)."""
    env = make_env(env_id or policy.metadata.env_id)
    check_env_matches(policy, env)
    returns, latencies = [], []
    kept = _Spread(policy.observation_kind.stored_dtype) if keep_observations else None
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, steps, done = 0.0, 0, False
            while not done:
                if kept is not None:
                    kept.add(obs)
                start = time.perf_counter_ns()
                action = policy.act(obs[None])[0]  # in the stored dtype (uint8 frames stay so)
                latencies.append(time.perf_counter_ns() - start)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                steps += 1
                done = terminated or truncated or (
                    max_episode_steps is not None and steps >= max_episode_steps
                )
            returns.append(total)
    finally:
        env.close()
    observations = kept.rows() if kept is not None else None
    return EvalResult(returns, float(np.median(latencies)) / 1000.0, observations)


KEPT_BYTES = 64 << 20  # the most an evaluation keeps of its observations


class _Spread:
    """Observations, copied in `dtype`: all of them until they would take KEPT_BYTES, then
    every other one kept and the stride doubled, so the rows stay evenly spaced."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.kept: list[np.ndarray] = []
        self.stride, self.seen, self.limit = 1, 0, 0

    def add(self, obs: Any) -> None:
        if self.seen % self.stride == 0:
            row = np.array(obs, dtype=self.dtype)
            self.limit = self.limit or max(2, KEPT_BYTES // max(1, row.nbytes))
            self.kept.append(row)
            if len(self.kept) >= self.limit:
                self.kept = self.kept[::2]
                self.stride *= 2
        self.seen += 1

    def rows(self) -> np.ndarray:
        return np.stack(self.kept)
