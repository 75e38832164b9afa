"""`edge-rl bench input-quantization`: how an int8 policy's input grid covers an env's
observations, and how much action error it causes.

A policy file whose first operator quantizes the observation (--edgetpu exports: their input
is int8; int8 exports made before 2026-11-23, whose first layer was not yet float32) reads
each feature on one int8 grid: when features of very different ranges share it (angles in
[-1, 1] next to velocities of +-50), the narrow ones get a few levels. Per-feature input
scales (metadata format 2: observations are divided by them first) widen those; the grid
below is in the divided units.

The policy (or, given, the fp32 reference) is rolled out with exploration noise: Gaussian of
`noise` times the action's half-range, or for discrete actions a random one with
probability `noise`. On the observations it saw: each feature's largest |value|, the int8
levels across it and the share of values outside the grid; with a reference, the action error
of the reference fed observations rounded to the grid, and of the policy itself, each against
the reference's actions (mean, p99 and max for continuous actions, the share of differing
actions for discrete ones).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from edge_rl.device.envs import make_env
from edge_rl.device.errors import UserError
from edge_rl.device.evaluate import check_env_matches
from edge_rl.device.policy import Policy, load_policy

INT8_MIN, INT8_MAX = -128, 127


@dataclass
class InputQuantization:
    policy: str
    env_id: str
    observations: int
    scale: float  # of the int8 grid, in units of observations / input_scale
    zero_point: int
    per_feature_scales: bool  # the file divides each feature by its own scale first
    largest: list[float]  # each feature's largest |value| seen
    levels: list[int]  # int8 levels across each feature's range
    clipped: list[float]  # each feature's share of values outside the grid
    # "fp32 fed the int8 input grid" and "the int8 policy" -> their action error
    errors: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def input_grid(policy: Policy) -> tuple[float, int]:
    """(scale, zero point) of the int8 grid the observations are read on; a UserError for a
    policy that reads them in float32."""
    scale, zero_point = policy.input_quantization
    if not scale:
        raise UserError(
            f"this {policy.metadata.precision} policy reads its observations in float32 (an "
            "int8 export's first layer is float32 since 2026-11-23), so it has no input grid "
            "to measure: give an --edgetpu export, or an int8 one made before")
    return scale, zero_point


def rollout(policy: Policy, env_id: str, steps: int, noise: float, seed: int) -> np.ndarray:
    """The observations of `steps` env steps of `policy` with exploration noise."""
    env = make_env(env_id, seed=seed)
    try:
        check_env_matches(policy, env)
        rng = np.random.default_rng(seed)
        space = env.action_space
        observation, _ = env.reset(seed=seed)
        seen = []
        for _ in range(steps):
            action = policy.act(np.asarray(observation, np.float32)[None])[0]
            if policy.metadata.discrete:
                if rng.random() < noise:
                    action = rng.integers(int(space.n))
            else:
                half_range = (space.high - space.low) / 2
                action = np.clip(action + rng.normal(0.0, noise * half_range), space.low,
                                 space.high).astype(np.float32)
            observation, _, terminated, truncated, _ = env.step(action)
            seen.append(np.asarray(observation, np.float32))
            if terminated or truncated:
                observation, _ = env.reset()
    finally:
        env.close()
    return np.stack(seen)


def row_actions(policy: Policy, rows: np.ndarray) -> np.ndarray:
    """The policy's greedy actions, one row at a time (a fixed-batch file's way)."""
    return np.concatenate([policy.act(row[None]) for row in rows.astype(np.float32)])


def action_error(got: np.ndarray, reference: np.ndarray, discrete: bool) -> dict[str, float]:
    if discrete:
        return {"differing": float(np.mean(got != reference))}
    error = np.abs(got - reference)
    return {"mean": float(error.mean()), "p99": float(np.quantile(error, 0.99)),
            "max": float(error.max())}


def measure_input_quantization(path: str | Path, reference_path: str | Path | None = None,
                               env_id: str | None = None, steps: int = 3000,
                               noise: float = 0.2, seed: int = 0) -> InputQuantization:
    """Roll out, then measure the int8 input grid of the policy file at `path` (against the
    fp32 file of the same weights at `reference_path`, when given)."""
    if steps < 1:
        raise UserError("--steps must be positive")
    if not 0 <= noise <= 1:
        raise UserError("--noise must be in [0, 1]")
    policy = load_policy(path)
    scale, zero_point = input_grid(policy)
    meta = policy.metadata
    reference = load_policy(reference_path) if reference_path is not None else None
    if reference is not None and (reference.metadata.observation_shape != meta.observation_shape
                                  or reference.metadata.action != meta.action):
        raise UserError(f"{reference_path} is a policy for other observations or actions "
                        f"than {path}'s")
    env_id = env_id or meta.env_id
    observations = rollout(reference or policy, env_id, steps, noise, seed)
    divisor = np.asarray(meta.input_scale or 1.0, np.float32).reshape(-1)
    flat = observations.reshape(len(observations), -1) / divisor  # in the grid's units
    low, high = (INT8_MIN - zero_point) * scale, (INT8_MAX - zero_point) * scale
    largest = np.abs(flat).max(axis=0)
    result = InputQuantization(
        policy=str(path), env_id=env_id, observations=len(observations), scale=scale,
        zero_point=zero_point, per_feature_scales=meta.input_scale is not None,
        largest=[float(x) for x in largest],
        levels=[int(2 * x / scale) + 1 for x in largest],
        clipped=[float(x) for x in np.mean((flat < low) | (flat > high), axis=0)],
    )
    if reference is not None:
        on_grid = (np.clip(np.round(flat / scale) + zero_point, INT8_MIN, INT8_MAX)
                   - zero_point) * scale * divisor
        expected = row_actions(reference, observations)
        for name, got in (
                ("fp32 fed the int8 input grid",
                 row_actions(reference, on_grid.reshape(observations.shape))),
                ("the int8 policy", row_actions(policy, observations))):
            result.errors[name] = action_error(got, expected, meta.discrete)
    return result
