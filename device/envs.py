"""Gymnasium environments for actors and evaluation, and their specs as plain dicts."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any

import numpy as np

from edge_rl.device.errors import UserError
from edge_rl.device.observations import ObservationSpec, describe_observations

CONTROL_SUITE = "dm_control/"  # shimmy's namespace: dm_control/<domain>-<task>-v0
EDGE_RL_ENVS = "EdgeRL/"  # edge-rl's own test envs (edge_rl.device.bright_patch)
MINATAR = "MinAtar/"  # MinAtar/<Game>-v1 (the [minatar] extra): bool planes (10, 10, channels)
ATARI = "ALE/"  # ALE/<Game>-v5 (the [atari] extra), preprocessed as DQN does (device/atari.py)
# An env's info says this is true when a step lost a life but did not end the episode (Atari):
# actors mark that step `life_lost` (the learner's targets end there, not the episode) and play
# on (DQN's episodic life).
LIFE_LOST = "life_lost"


def _not_settotalmass(record: logging.LogRecord) -> bool:
    # dm_control's cartpole and cheetah models use a deprecated compiler attribute; MuJoCo
    # warns about it through absl each time such an env is made, which says nothing to a user
    return "settotalmass" not in record.getMessage()


def register_control_suite() -> None:
    """Register the DeepMind Control Suite's envs with gymnasium (shimmy does it on import).

    Nothing here renders, so dm_control is told not to look for an OpenGL backend (on a
    board without a display its search only prints warnings), unless MUJOCO_GL says otherwise.
    """
    os.environ.setdefault("MUJOCO_GL", "disable")
    logging.getLogger("absl").addFilter(_not_settotalmass)
    try:
        import dm_control.suite  # noqa: F401
        import shimmy  # noqa: F401
    except ImportError as err:
        raise UserError(
            f"Control Suite envs need dm_control and shimmy ({err.name or err} is missing): "
            "pip install 'edge-rl[dmc]'"
        ) from None


def register_minatar() -> None:
    """Register MinAtar's envs with gymnasium (minatar.gym.register_envs: importing it is not
    enough under gymnasium 1.x); once, as gymnasium warns of each id registered again."""
    import gymnasium as gym

    try:
        import minatar.gym
    except ImportError as err:
        raise UserError(
            f"MinAtar envs need minatar ({err.name or err} is missing): "
            "pip install 'edge-rl[minatar]'"
        ) from None
    if not any(env_id.startswith(MINATAR) for env_id in gym.registry):
        minatar.gym.register_envs()


def make_env(env_id: str, seed: int | None = None):
    """gymnasium.make(env_id) with a one-line error for ids that do not resolve; dict
    observations (the Control Suite's) come flattened into one float vector; Atari
    (`ALE/...`) comes preprocessed as DQN takes it (edge_rl.device.atari).

    `package.module:EnvId` imports the module first (it registers the env), as gymnasium does.
    """
    import gymnasium as gym

    if env_id.startswith(CONTROL_SUITE):
        register_control_suite()
    if env_id.startswith(EDGE_RL_ENVS):
        from edge_rl.device import bright_patch

        bright_patch.register()
    if env_id.startswith(MINATAR):
        register_minatar()
    atari = env_id.startswith(ATARI)
    if atari:
        from edge_rl.device.atari import register_atari

        register_atari()
    try:
        # Atari steps one frame at a time here: AtariPreprocessing repeats each action
        env = gym.make(env_id, frameskip=1) if atari else gym.make(env_id)
    except (gym.error.Error, ModuleNotFoundError, ImportError, AttributeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot make env {env_id!r}: {reason}") from None
    if atari:
        from edge_rl.device.atari import preprocess

        env = preprocess(env)
    if isinstance(env.observation_space, gym.spaces.Dict):
        # keys in the space's order, which for the Control Suite is the task's own
        env = gym.wrappers.FlattenObservation(env)
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


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


def describe_env(env_id: str) -> tuple[ObservationSpec, dict[str, Any]]:
    """(observations' kind and shape, action spec) of an env id; a one-line error for
    observations no kind handles."""
    env = make_env(env_id)
    try:
        observations = describe_observations(env.observation_space)
        stack = frame_stack(env)
        if stack > 1:
            observations = replace(observations, stack=stack)
        return observations, action_spec(env.action_space)
    finally:
        env.close()


def frame_stack(env: Any) -> int:
    """How many frames an env made by `make_env` stacks on its observations' last axis, each
    step adding one (edge_rl.device.atari's `frame_stack`); 1 for any other env."""
    try:
        return int(env.get_wrapper_attr("frame_stack"))
    except AttributeError:
        return 1
