"""Greedy evaluation of a policy file on its env: what `edge-rl eval` and the learner run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from edge_rl.device.envs import make_env
from edge_rl.device.errors import UserError
from edge_rl.device.observations import describe_observations
from edge_rl.device.policy import Policy


@dataclass(frozen=True)
class EvalResult:
    returns: list[float]
    median_latency_us: float
    # every observation the policy acted on, when asked for (calibration, verification)
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
    seed: int = 1_000_000,
    max_episode_steps: int | None = None,
    keep_observations: bool = False,
) -> EvalResult:
    """Run `episodes` greedy episodes; episode i resets with seed + i, so runs compare."""
    env = make_env(env_id or policy.metadata.env_id)
    check_env_matches(policy, env)
    returns, latencies, seen = [], [], []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, steps, done = 0.0, 0, False
            while not done:
                if keep_observations:
                    seen.append(np.asarray(obs, np.float32))
                start = time.perf_counter_ns()
                action = policy.act(obs[None].astype(np.float32))[0]
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
    observations = np.stack(seen) if keep_observations else None
    return EvalResult(returns, float(np.median(latencies)) / 1000.0, observations)
