"""The learner: a TF-Agents agent trained in a tf.function, published as TFLite policies."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

from edge_rl.agents.base import AgentFactory, BuiltAgent
from edge_rl.config import TrainConfig
from edge_rl.device.policy_file import PolicyMetadata
from edge_rl.tf_setup import tf


def to_trajectory(batch: dict[str, np.ndarray]) -> trajectory.Trajectory:
    """A sampled minibatch as the [batch, 2] Trajectory TF-Agents' agents train on.

    Element 0 carries the transition (reward, discount); element 1 only the next observation.
    Both step types are MID: episode ends live in `discount` (see edge_rl.replay).
    """
    n = batch["reward"].shape[0]
    mid = np.full((n, 2), int(ts.StepType.MID), np.int32)
    return trajectory.Trajectory(
        step_type=mid,
        observation=np.stack([batch["observation"], batch["next_observation"]], axis=1),
        action=np.stack([batch["action"], batch["action"]], axis=1),
        policy_info=(),
        next_step_type=mid,
        reward=np.stack([batch["reward"], np.zeros(n, np.float32)], axis=1),
        discount=np.stack([batch["discount"], np.ones(n, np.float32)], axis=1),
    )


class Learner:
    """One agent: `step` trains on a minibatch, `publish` exports the actor network."""

    def __init__(
        self,
        factory: AgentFactory,
        config: TrainConfig,
        observation_shape: tuple[int, ...],
        action: dict,
    ):
        self.config = config
        self.observation_shape = tuple(observation_shape)
        self.action = action
        self.built: BuiltAgent = factory.build(self.observation_shape, action, config)
        self.agent = self.built.agent
        self._train = common.function(self.agent.train)
        self._checkpoint = tf.train.Checkpoint(agent=self.agent, **self.built.optimizers)

    @property
    def updates(self) -> int:
        return int(self.agent.train_step_counter.numpy())

    def step(self, batch: dict[str, np.ndarray]) -> Any:
        """One update; returns TF-Agents' LossInfo (tensors: read them only when logging)."""
        return self._train(to_trajectory(batch))

    def metadata(self, precision: str, version: int, env_id: str) -> PolicyMetadata:
        return PolicyMetadata(
            env_id=env_id,
            algo=self.config.algo,
            precision=precision,
            output=self.built.output_kind,
            observation_shape=self.observation_shape,
            action=self.action,
            policy_version=version,
            train_step=self.updates,
        )

    def publish(self, precision: str, calibration: np.ndarray, version: int) -> tuple[bytes, float]:
        """The actor network as a policy file; returns (bytes, seconds the conversion took)."""
        from edge_rl.converters import convert

        start = time.perf_counter()
        model = convert(
            self.built.export_model,
            precision,
            calibration,
            self.metadata(precision, version, self.config.env),
        )
        return model, time.perf_counter() - start

    # -- checkpoints --------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        """Networks (with targets), optimizers and the update counter."""
        self._checkpoint.write(str(directory / "agent"))

    def restore(self, directory: Path) -> None:
        self._checkpoint.read(str(directory / "agent")).assert_existing_objects_matched()

    def save_actor(self, directory: Path) -> None:
        """Only the exported network's weights (what `edge-rl export` needs)."""
        tf.train.Checkpoint(actor=self.built.actor_network).write(str(directory / "actor"))

    def restore_actor(self, directory: Path) -> None:
        status = tf.train.Checkpoint(actor=self.built.actor_network).read(str(directory / "actor"))
        status.expect_partial()
