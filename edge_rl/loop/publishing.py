"""Publishing the actor network: a new policy version at the actors' precision, offered to
them, and checked against fp32 of the same weights."""

from __future__ import annotations

import time

import numpy as np

from edge_rl import core
from edge_rl.config import TF_BASELINE, TrainConfig
from edge_rl.device.policy import Policy
from edge_rl.device.policy_file import pack_policy
from edge_rl.loop.progress import Board
from edge_rl.runs.best_policy import RECENT_ROWS, calibration_observations, random_observations
from edge_rl.runs.costs import RunCosts
from edge_rl.runs.run_state import RunState, record_policy_version

PUBLISH_XZ_PRESET = 1  # broadcasts: fast; `edge-rl export` packs with the strongest preset


class Publisher:
    """Turns the learner's current weights into the actors' next policy."""

    def __init__(self, config: TrainConfig, learner: core.Learner, replay: core.ReplayBuffer,
                 exchange: core.PolicyExchange, state: RunState, costs: RunCosts, board: Board):
        self.config, self.learner, self.replay, self.exchange = config, learner, replay, exchange
        self.state, self.costs, self.board = state, costs, board
        # random play's observations, calibrating the first policies while replay fills
        self.calibration_fallback = random_observations(config.env, RECENT_ROWS, config.seed)
        self.last_update = learner.updates  # the learner's updates at the last publish
        self.policy_file = b""  # the newest published policy as a policy file
        self.policy_calibration: np.ndarray | None = None  # the rows it was calibrated on

    def updates_since(self) -> int:
        """Learner updates since the last publish."""
        return self.learner.updates - self.last_update

    def calibration(self) -> np.ndarray:
        return calibration_observations(self.replay, self.calibration_fallback)

    def publish(self) -> None:
        """The next version: written down first (versions only grow, also over a crash),
        converted, offered to the actors, its latency and size in TensorBoard."""
        version = self.state.policy_version + 1
        record_policy_version(self.config.run_dir, version)
        baseline = self.config.actor_precision == TF_BASELINE
        with self.costs.learner.part("publishing"):
            start = time.perf_counter()
            # The learner evaluates (and keeps as best) a policy file in every run; the
            # baseline's is fp32, the weights its TF-Agents actors act with.
            calibration = self.calibration()
            model = self.policy_from_weights(calibration, version)
            broadcast = self.learner.publish_tf_agents(version) if baseline else model
            seconds = time.perf_counter() - start
        self.state.policy_version = version
        self.state.policies_published += 1
        self.policy_file = model
        self.policy_calibration = calibration
        self.exchange.put_policy(version, broadcast)
        self.last_update = self.learner.updates
        step = self.state.env_steps
        self.board.scalars(step, {"policy/version": version,
                                  "policy/publish_latency_ms": seconds * 1000,
                                  "policy/bytes": len(broadcast)})
        if not baseline and self.config.actor_precision != "fp32":
            checks = self.check_against_fp32(model, calibration, version)
            self.board.scalars(step, {f"policy/{name}": value for name, value in checks.items()})

    def policy_from_weights(self, calibration: np.ndarray, version: int) -> bytes:
        """The actor network's weights now as the policy file the learner evaluates."""
        baseline = self.config.actor_precision == TF_BASELINE
        model, _ = self.learner.publish(
            "fp32" if baseline else self.config.actor_precision, calibration, version
        )
        if self.config.is_sparse:
            # int8 zeros compress well: sparse policies travel xz-packed (a few ms here)
            model = pack_policy(model, preset=PUBLISH_XZ_PRESET)
        return model

    def evaluated_policy(self) -> bytes:
        """The policy file to evaluate: the last broadcast or, with --average-tau (called
        inside learner.averaged_weights()), the averaged weights at its version and
        calibration."""
        if self.config.average_tau == 0:
            return self.policy_file
        with self.costs.learner.part("publishing"):
            return self.policy_from_weights(self.policy_calibration, self.state.policy_version)

    def check_against_fp32(self, model: bytes, calibration: np.ndarray, version: int
                           ) -> dict[str, float]:
        """The published policy's greedy actions against fp32 of the same weights on the
        newest calibration rows (export's tolerances, edge_rl.converters.verify; no episodes)."""
        from edge_rl.converters import compare_policies
        from edge_rl.converters.verify import tolerance_failures

        with self.costs.learner.part("publishing"):
            fp32, _ = self.learner.publish("fp32", calibration, version)
            rows = self.replay.recent_observations(RECENT_ROWS)
            numbers = compare_policies(Policy(fp32), Policy(model), rows if len(rows) else
                                       calibration)
        found = {"within_export_tolerance": float(not tolerance_failures(numbers))}
        for key in ("agreement", "decisive_agreement", "mean_relative_error"):
            if key in numbers:
                found[key.replace("mean_relative_error", "mean_action_error_of_range")] = \
                    numbers[key]
        return found
