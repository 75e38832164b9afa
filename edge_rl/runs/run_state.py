"""A run's counters and how they, the learner and the replay go to disk and come back.

A checkpoint folder holds the learner (weights, optimizer), the replay as of one replay-log
position, and state.json (this RunState). Restoring one and putting back the replay log's
records after that position gives the learner everything it acked before a crash.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_rl.runs.checkpoint import write_checkpoint, write_json
from edge_rl.transport.replay_log import Position

POLICY_VERSION_FILE = "policy-version.json"


@dataclass
class RunState:
    """Counters that survive a resume (saved as state.json in each checkpoint)."""

    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    env_steps: int = 0
    policy_version: int = 0
    policies_published: int = 0
    wall_seconds: float = 0.0
    best: dict[str, Any] | None = None  # best greedy evaluation so far
    last_eval: dict[str, Any] | None = None
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    topology_updates: int = 0
    topology_updates_by_group: dict[str, int] = field(default_factory=dict)  # per sparse group
    ledger: dict[str, Any] = field(default_factory=dict)  # (actor id, seq) ranges in replay
    actors: dict[str, int] = field(default_factory=dict)  # actor id -> index
    log_position: Position = (0, 0)  # the replay is as of this replay-log position
    costs: dict[str, Any] = field(default_factory=dict)  # edge_rl.runs.costs.RunCosts.state()


def save_checkpoint(run_dir: Path, state: RunState, learner, replay) -> Position:
    """Write a checkpoint atomically; returns the oldest log position a kept checkpoint needs
    (the log before it can go)."""
    root = run_dir / "checkpoints"

    def write(folder: Path) -> None:
        learner.save(folder)
        replay.save(folder / "replay.npz")
        write_json(folder / "state.json", state.__dict__)

    write_checkpoint(root, f"ckpt-{state.env_steps:012d}", write)
    kept = [json.loads((folder / "state.json").read_text())["log_position"]
            for folder in root.glob("ckpt-*") if (folder / "state.json").is_file()]
    return tuple(min(kept))


def load_checkpoint(run_dir: Path, folder: Path, learner, replay) -> RunState:
    learner.restore(folder)
    replay.load(folder / "replay.npz")
    state = RunState(**json.loads((folder / "state.json").read_text()))
    state.log_position = tuple(state.log_position)
    # Versions only grow, even over a crash that lost publishes made after the checkpoint:
    # actors compare versions to decide what is newer.
    published = run_dir / POLICY_VERSION_FILE
    if published.is_file():
        last = json.loads(published.read_text())["policy_version"]
        state.policy_version = max(state.policy_version, int(last))
    return state


def record_policy_version(run_dir: Path, version: int) -> None:
    write_json(run_dir / POLICY_VERSION_FILE, {"policy_version": version})
