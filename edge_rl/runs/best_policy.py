"""The observations a run calibrates on, and the best policy it keeps for `edge-rl export`.

An int8 policy's activation ranges come from its calibration rows, and an activation the rows
never pushed far is clipped where the policy later goes. So the rows are many and varied: the
newest replay (what the actors meet now) and rows spread over the whole replay (what they met
before), both in the checkpoint, so a resumed run publishes the policies it would have.
Export adds the run's held-out rows and the states of fp32 greedy episodes (where the policy
itself goes, which exploration data may miss).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edge_rl.device.envs import make_env
from edge_rl.device.observations import describe_observations
from edge_rl.runs.checkpoint import write_json

RECENT_ROWS = 500  # newest replay observations in the calibration rows
SPREAD_ROWS = 1500  # rows spread evenly over the whole replay
GREEDY_ROWS = 1000  # rows from the states of greedy episodes, at export
HOLDOUT_SIZE = 2000  # newest observations kept with the best policy, beside its calibration


def calibration_observations(replay: Any, fallback: np.ndarray) -> np.ndarray:
    """The rows a learner calibrates its int8 policies on: the newest and spread-out replay
    observations; random-play `fallback` rows too while replay is nearly empty."""
    parts = [replay.recent_observations(RECENT_ROWS), replay.spread_observations(SPREAD_ROWS)]
    if len(replay) < RECENT_ROWS:
        parts.insert(0, fallback)
    return np.concatenate(parts)


def evenly_spaced(rows: np.ndarray, n: int) -> np.ndarray:
    """Up to `n` of `rows`, evenly spaced (first and last kept)."""
    if len(rows) <= n:
        return rows
    return rows[np.linspace(0, len(rows) - 1, n).round().astype(np.int64)]


def random_observations(env_id: str, count: int, seed: int) -> np.ndarray:
    """Observations from random play, to calibrate the first int8 policy before replay fills."""
    env = make_env(env_id, seed=seed)
    kind = describe_observations(env.observation_space).kind
    obs, _ = env.reset(seed=seed)
    rows = []
    for _ in range(count):
        rows.append(kind.as_stored(obs))
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.stack(rows)


def save_best_policy(
    folder: Path,
    model: bytes,
    save_actor: Callable[[Path], None],
    calibration: np.ndarray,
    holdout: np.ndarray,
    record: dict[str, Any],
) -> None:
    """Replace `folder` (RUN_DIR/best) whole: the policy file, the actor's weights (written by
    `save_actor`), the policy's calibration rows and the newest observations (`holdout`), and
    the evaluation `record`."""
    tmp = folder.with_name(".tmp-" + folder.name)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_actor(tmp)
    (tmp / "policy.tflite").write_bytes(model)
    with open(tmp / "observations.npz", "wb") as f:
        np.savez(f, calibration=calibration, holdout=holdout)
    write_json(tmp / "eval.json", record)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
