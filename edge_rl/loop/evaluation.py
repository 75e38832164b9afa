"""Greedy evaluations of the published policy, and the best one kept for `edge-rl export`."""

from __future__ import annotations

import logging
from pathlib import Path

from edge_rl import core
from edge_rl.config import TrainConfig
from edge_rl.device.evaluate import HELDOUT_SEED, EvalResult, evaluate
from edge_rl.device.policy import Policy
from edge_rl.loop.progress import Board, RunClock
from edge_rl.loop.publishing import Publisher
from edge_rl.runs.best_policy import HOLDOUT_SIZE, save_best_policy
from edge_rl.runs.costs import RunCosts
from edge_rl.runs.run_state import RunState
from edge_rl.runs.stability import late_run_stability

log = logging.getLogger(__name__)


class Evaluation:
    """Evaluates what the actors get (the quantized policy, not the fp32 weights) and keeps
    the best in RUN_DIR/best/."""

    def __init__(self, config: TrainConfig, publisher: Publisher, learner: core.Learner,
                 replay: core.ReplayBuffer, state: RunState, costs: RunCosts, board: Board,
                 clock: RunClock):
        self.config, self.publisher, self.learner, self.replay = config, publisher, learner, replay
        self.state, self.costs, self.board, self.clock = state, costs, board, clock

    def evaluate_now(self) -> EvalResult:
        """Publish the current weights and evaluate that quantized policy greedily (with
        --average-tau: the averaged weights, quantized the same way)."""
        self.publisher.publish()  # the actors' next policy: always the current weights
        with self.learner.averaged_weights():  # evaluated and kept as best: the average
            policy = Policy(self.publisher.evaluated_policy())
            with self.costs.learner.part("evaluation"):
                result = evaluate(policy, self.config.env, episodes=self.config.eval_episodes)
            record = {
                **result.as_dict(),
                "env_steps": self.state.env_steps,
                "updates": self.learner.updates,
                "policy_version": policy.version,
                "wall_seconds": self.clock.elapsed(),
            }
            self.state.evaluations.append(record)
            self.clock.mark("first_evaluation")
            self.state.last_eval = record
            if self.state.best is None or record["mean"] > self.state.best["mean"]:
                self.state.best = record
                save_best_policy(self.config.run_dir / "best", policy.model,
                                 self.learner.save_actor, self.publisher.policy_calibration,
                                 self.replay.recent_observations(HOLDOUT_SIZE), record)
        scalars = {"eval/return_mean": result.mean, "eval/return_std": result.std}
        stability = late_run_stability([e["mean"] for e in self.state.evaluations])
        if stability["fraction"] is not None:  # the share of later evaluations at the best
            scalars["eval/late_run_stability"] = stability["fraction"]
        self.board.scalars(self.state.env_steps, scalars)
        averaged = ", the averaged weights" if self.config.average_tau else ""
        log.info("eval at %d steps: return %.1f ± %.1f (policy v%d%s)",
                 self.state.env_steps, result.mean, result.std, policy.version, averaged)
        return result

    def on_other_episodes(self, policy_file: Path) -> dict:
        """The kept policy's greedy return on as many episodes again, started from other seeds
        (HELDOUT_SEED): an estimate of its return that its selection did not favour."""
        policy = Policy(policy_file.read_bytes())
        with self.costs.learner.part("evaluation"):
            result = evaluate(policy, self.config.env, episodes=self.config.eval_episodes,
                              seed=HELDOUT_SEED)
        log.info("the kept policy (v%d) on %d other episodes: return %.1f ± %.1f",
                 policy.version, len(result.returns), result.mean, result.std)
        self.board.scalars(self.state.env_steps, {"eval/kept_policy_other_episodes": result.mean})
        return {**result.as_dict(), "seed": HELDOUT_SEED, "policy_version": policy.version}
