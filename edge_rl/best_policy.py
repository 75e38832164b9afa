"""The observations a run calibrates on, and the best policy it keeps for `edge-rl export`."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edge_rl.checkpoint import write_json
from edge_rl.device.envs import make_env

CALIBRATION_SIZE = 500  # newest replay observations an int8 policy is calibrated on
HOLDOUT_SIZE = 2000  # observations `edge-rl export` checks a converted policy on


def random_observations(env_id: str, count: int, seed: int) -> np.ndarray:
    """Observations from random play, to calibrate the first int8 policy before replay fills."""
    env = make_env(env_id, seed=seed)
    obs, _ = env.reset(seed=seed)
    rows = []
    for _ in range(count):
        rows.append(np.asarray(obs, np.float32))
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.stack(rows)


def save_best_policy(
    folder: Path,
    model: bytes,
    save_actor: Callable[[Path], None],
    observations: np.ndarray,
    record: dict[str, Any],
) -> None:
    """Replace `folder` (RUN_DIR/best) whole: the policy file, the actor's weights (written by
    `save_actor`), calibration and held-out observations, and the evaluation `record`."""
    tmp = folder.with_name(".tmp-" + folder.name)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_actor(tmp)
    (tmp / "policy.tflite").write_bytes(model)
    with open(tmp / "observations.npz", "wb") as f:
        np.savez(f, calibration=observations[:CALIBRATION_SIZE],
                 holdout=observations[CALIBRATION_SIZE:])
    write_json(tmp / "eval.json", record)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
