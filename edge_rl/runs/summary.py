"""summary.json: what a finished run reports (README's run-directory table lists the keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from edge_rl.config import TrainConfig
from edge_rl.runs.costs import RunCosts
from edge_rl.runs.run_state import RunState
from edge_rl.runs.stability import late_run_stability


class FinishedRun(Protocol):
    """What the summary reads of a run that has stopped (edge_rl.loop.train.Training): the
    loop's collaborators, so runs/ needs nothing of the loop's own."""

    config: TrainConfig
    state: RunState
    costs: RunCosts
    stop_reason: str
    clock: Any  # elapsed(), loop_update_rate, startup (edge_rl.loop.progress.RunClock)
    learner: Any  # updates, trace_seconds
    evolution: Any  # network_report()
    replay: Any  # capacity, nstep, len()
    exchange: Any  # policy, ledger, actors, refused
    ingest: Any  # log: bytes_written, syncs


def run_summary(training: FinishedRun, policy_file: Path | None,
                heldout: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's results and costs, from a run that has stopped; `heldout`: the kept policy's
    return on episodes it was not chosen on (Evaluation.on_other_episodes), if measured."""
    seconds = training.clock.elapsed()
    summary = {
        "algo": training.config.algo,
        "env": training.config.env,
        "seed": training.config.seed,
        "sparsity": training.config.sparsity,
        "steps": training.state.env_steps,
        "updates": training.learner.updates,
        "wall_clock_seconds": round(seconds, 2),
        "actor_steps_per_second": round(training.state.env_steps / max(seconds, 1e-9), 1),
        "precision": training.config.actor_precision,
        "policies_published": training.state.policies_published,
        "final_return": training.state.last_eval,
        "best_return": training.state.best,
        # the best of many evaluations on the same episodes flatters the kept policy; this is
        # its return on others
        "best_return_heldout": heldout,
        "policy_file": str(policy_file) if policy_file else None,
        "stop_reason": training.stop_reason,
        "publish_seconds": round(training.costs.learner_seconds()["publishing"], 3),
        "learner_updates_per_second": training.clock.loop_update_rate,
        "topology": training.config.topology,
        "topology_updates": training.state.topology_updates,
        "topology_updates_by_group": training.state.topology_updates_by_group,
        "networks": training.evolution.network_report(),
        "replay_capacity": training.replay.capacity,
        "replay_size": len(training.replay),
        "nstep": training.replay.nstep,
        "policy_bytes": len(training.exchange.policy[1]) if training.exchange.policy else None,
        "evaluations": [{key: e[key] for key in ("env_steps", "wall_seconds", "mean")}
                        for e in training.state.evaluations],
        # whether the policy, once at its best, stayed there (stability.py)
        "stability": late_run_stability([e["mean"] for e in training.state.evaluations]),
        "ingest": {
            "batches_per_actor": {a: training.exchange.ledger.count(a)
                                  for a in training.exchange.actors},
            "inserts_refused": training.exchange.refused,
            "replay_log_bytes": training.ingest.log.bytes_written,
            "replay_log_fsyncs": training.ingest.log.syncs,
        },
        "time_breakdown": training.costs.time_breakdown(),
        # seconds from this session's process start to its first events, and what each trace
        # of the update loop cost (tools/bench_startup.py)
        "startup": {**training.clock.startup, "update_traces": training.learner.trace_seconds},
    }
    energy = training.costs.energy()
    if energy is not None:
        summary["energy"] = energy
    return summary
