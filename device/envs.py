"""Gymnasium environments for actors and evaluation, and their specs as plain dicts."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_rl.device.errors import UserError


def make_env(env_id: str, seed: int | None = None):
    """gymnasium.make(env_id) with a one-line error for ids that do not resolve.

    `package.module:EnvId` imports the module first (it registers the env), as gymnasium does.
    """
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except (gym.error.Error, ModuleNotFoundError, ImportError, AttributeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot make env {env_id!r}: {reason}") from None
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


def observation_shape(space) -> tuple[int, ...]:
    """The float32 observation shape an env gives; only Box observations are supported."""
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Box):
        raise UserError(
            f"observation space {type(space).__name__} is not supported (edge-rl needs a Box)"
        )
    return tuple(int(d) for d in space.shape)


def action_spec(space) -> dict[str, Any]:
    """The action space as the dict stored in policy metadata."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise UserError("Discrete action spaces must start at 0")
        return {"kind": "discrete", "n": int(space.n)}
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        low = np.asarray(space.low, np.float64)
        high = np.asarray(space.high, np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise UserError("continuous actions need finite bounds")
        return {
            "kind": "continuous",
            "shape": [int(space.shape[0])],
            "low": low.tolist(),
            "high": high.tolist(),
        }
    raise UserError(f"action space {space} is not supported (need Discrete or a 1-D Box)")


def describe_env(env_id: str) -> tuple[tuple[int, ...], dict[str, Any]]:
    """(observation shape, action spec) of an env id."""
    env = make_env(env_id)
    try:
        return observation_shape(env.observation_space), action_spec(env.action_space)
    finally:
        env.close()
