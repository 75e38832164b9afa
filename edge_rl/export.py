"""`edge-rl export`: the best-evaluated actor network of a run, as a verified policy file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from edge_rl.agents import get_algorithm
from edge_rl.agents.base import resolve_defaults
from edge_rl.checkpoint import write_bytes
from edge_rl.config import PRECISIONS, TrainConfig
from edge_rl.device.envs import describe_env
from edge_rl.device.errors import UserError
from edge_rl.device.evaluate import evaluate
from edge_rl.device.policy import Policy
from edge_rl.device.policy_file import read_policy_metadata


def export_run(
    run_dir: Path, precision: str, output: str | None, verify_episodes: int = 5
) -> list[str]:
    """Convert, write and verify; returns the report's lines."""
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}")
    if not run_dir.is_dir():
        raise UserError(f"no run directory at {run_dir}")
    best = run_dir / "best"
    if not (best / "policy.tflite").is_file():
        raise UserError(f"{run_dir} has no evaluated policy yet (train it first)")
    config = TrainConfig.load(run_dir / "config.json")
    factory = get_algorithm(config.algo)
    config = resolve_defaults(factory, config)
    observation_shape, action = describe_env(config.env)

    from edge_rl.converters import compare_policies, convert, verification_report
    from edge_rl.learner import Learner

    learner = Learner(factory, config, observation_shape, action)
    learner.restore_actor(best)
    published = read_policy_metadata((best / "policy.tflite").read_bytes())
    with np.load(best / "observations.npz") as saved:
        calibration, holdout = saved["calibration"], saved["holdout"]
    if len(holdout) == 0:
        holdout = calibration

    def build(p: str) -> bytes:
        meta = learner.metadata(p, published.policy_version, config.env)
        meta = dataclasses.replace(meta, train_step=published.train_step)
        return convert(learner.built.export_model, p, calibration, meta)

    model = build(precision)
    path = Path(output) if output else run_dir / f"policy-{precision}.tflite"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, model)

    reference = Policy(build("fp32")) if precision != "fp32" else Policy(model)
    candidate = Policy(model)
    comparison = compare_policies(reference, candidate, holdout)
    lines = [f"wrote {path}", verification_report(comparison, candidate, reference)]
    if verify_episodes > 0:
        for name, policy in (("fp32", reference), (precision, candidate)):
            result = evaluate(policy, config.env, episodes=verify_episodes)
            lines.append(
                f"greedy return ({name}): {result.mean:.2f} ± {result.std:.2f} "
                f"over {verify_episodes} episodes"
            )
    return lines
