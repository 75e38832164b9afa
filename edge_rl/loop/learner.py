"""The learner: a TF-Agents agent trained in a tf.function, published as TFLite policies."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from edge_rl import core
from edge_rl.algorithm import AgentFactory, BuiltAgent
from edge_rl.config import TrainConfig
from edge_rl.device.observations import ObservationSpec
from edge_rl.device.policy_file import PolicyMetadata
from edge_rl.tf_setup import tf

log = logging.getLogger(__name__)


def to_trajectory(batch: dict[str, np.ndarray], updates: int = 1) -> trajectory.Trajectory:
    """Sampled minibatches as the [updates, batch, 2] Trajectory `Learner` trains on.

    `batch` holds `updates` minibatches one after another. Element 0 of the time axis carries
    the transition (reward, discount); element 1 only the next observation. Both step types
    are MID: episode ends live in `discount` (see edge_rl.replay.buffer).
    """
    n = batch["reward"].shape[0]
    if n % updates:
        raise ValueError(f"{n} transitions do not split into {updates} minibatches")
    mid = np.full((n, 2), int(ts.StepType.MID), np.int32)
    experience = trajectory.Trajectory(
        step_type=mid,
        observation=np.stack([batch["observation"], batch["next_observation"]], axis=1),
        action=np.stack([batch["action"], batch["action"]], axis=1),
        policy_info=(),
        next_step_type=mid,
        reward=np.stack([batch["reward"], np.zeros(n, np.float32)], axis=1),
        discount=np.stack([batch["discount"], np.ones(n, np.float32)], axis=1),
    )
    return tf.nest.map_structure(lambda x: x.reshape(updates, n // updates, *x.shape[1:]),
                                 experience)


def experience_signature(observation: ObservationSpec, action: dict,
                         batch_size: int) -> trajectory.Trajectory:
    """The specs of what `to_trajectory` makes, for any number of updates: one signature, so
    the update loop is traced once whatever the chunk sizes."""
    discrete = action["kind"] == "discrete"

    def spec(shape: tuple[int, ...], dtype) -> tf.TensorSpec:
        return tf.TensorSpec([None, batch_size, 2, *shape], dtype)

    return trajectory.Trajectory(
        step_type=spec((), tf.int32),
        observation=spec(observation.shape, tf.as_dtype(observation.dtype)),
        action=spec(() if discrete else tuple(action["shape"]),
                    tf.int64 if discrete else tf.float32),
        policy_info=(),
        next_step_type=spec((), tf.int32),
        reward=spec((), tf.float32),
        discount=spec((), tf.float32),
    )


def to_experience(batch: dict[str, np.ndarray]) -> trajectory.Trajectory:
    """One sampled minibatch as the [batch, 2] tensors an agent's losses take."""
    return tf.nest.map_structure(lambda x: tf.convert_to_tensor(x[0]), to_trajectory(batch, 1))


class Learner(core.Learner):
    """One agent: `step` trains on a minibatch, `publish` exports the actor network."""

    def __init__(
        self,
        factory: AgentFactory,
        config: TrainConfig,
        observation: ObservationSpec,
        action: dict,
    ):
        self.config = config
        self.observation = observation
        self.action = action
        self.built: BuiltAgent = factory.build(observation, action, config)
        self.agent = self.built.agent
        self.topology = None  # edge_rl.sparse.topology.Topology for sparse networks
        if config.is_sparse:
            from edge_rl.sparse.topology import Topology

            self.topology = Topology.build(
                self.built.groups, config.sparsities, config.topology, config.distribution,
                seed=config.seed, drop_fraction=config.drop_fraction,
                end_step=config.topology_end,
            )
        # Several updates per call, looped inside one graph: calling agent.train once per
        # update costs ~0.3-1 ms of Python and dispatch overhead each time on this stack. The
        # number of updates is left open in the signature, so it is traced once per run.
        self._train_many = tf.function(self._train_loop, autograph=False, input_signature=[
            experience_signature(observation, action, config.batch_size)])
        self._train_many_weighted = tf.function(
            self._weighted_train_loop, autograph=False, input_signature=[
                experience_signature(observation, action, config.batch_size),
                tf.TensorSpec([None, config.batch_size], tf.float32)])
        self.trace_seconds: list[float] = []  # per trace of the update loop: its call's time
        self._traces = 0  # Python in _train_loop runs only while TensorFlow traces it
        # --average-tau: a Polyak average of the actor network's weights, moved after every
        # update; evaluation and export swap it in (averaged_weights), the actors never see it.
        self._averaged: list[tf.Variable] = []
        if config.average_tau > 0:
            self._averaged = [tf.Variable(v, trainable=False)
                              for v in self.built.actor_network.variables]
        extra = {"averaged_actor": self._averaged} if self._averaged else {}
        self._checkpoint = tf.train.Checkpoint(agent=self.agent, **self.built.optimizers, **extra)
        self._patchers: dict[str, Any] = {}  # precision -> PolicyPatcher, or None: convert
        self._saved_policy = None  # edge_rl.tf_policy.SavedPolicyWriter, for tf-fp32 actors

    @property
    def updates(self) -> int:
        return int(self.agent.train_step_counter.numpy())

    def train(self, batch: dict[str, np.ndarray], updates: int = 1) -> Any:
        """`updates` updates, on consecutive slices of `batch` (updates x batch_size samples).

        Returns the last one's loss (a tensor: read it only when logging).
        """
        return self._timed(self._train_many, to_trajectory(batch, updates))

    def train_weighted(self, batch: dict[str, np.ndarray], updates: int = 1
                       ) -> tuple[Any, np.ndarray]:
        """As `train`, each sample's loss scaled by `batch["weights"]` (prioritized replay's
        importance weights); also returns each sample's TD error, [updates * batch_size]."""
        loss, td_errors = self._timed(self._train_many_weighted, to_trajectory(batch, updates),
                                      batch["weights"].reshape(updates, -1))
        return loss, td_errors.numpy().reshape(-1)

    def _timed(self, update_loop: Any, *args: Any) -> Any:
        """update_loop(*args), noting the call's time in trace_seconds where it traced."""
        traces, start = self._traces, time.perf_counter()
        result = update_loop(*args)
        if self._traces > traces:
            self.trace_seconds.append(round(time.perf_counter() - start, 3))
        return result

    def _weighted_train_loop(self, experience: trajectory.Trajectory, weights: tf.Tensor
                             ) -> tuple[tf.Tensor, tf.Tensor]:
        """As `_train_loop`, with per-sample weights; gathers each update's TD errors (only
        agents whose loss info carries `td_error`, DQN's, can run it)."""
        self._traces += 1
        count = tf.shape(experience.reward)[0]

        def update(k, loss, td_errors):
            step = tf.nest.map_structure(lambda x: x[k], experience)
            info = self.agent.train(step, weights=weights[k])
            self._move_average()
            return (k + 1, tf.cast(info.loss, tf.float32),
                    td_errors.write(k, tf.cast(info.extra.td_error, tf.float32)))

        _, loss, td_errors = tf.while_loop(
            lambda k, *_: k < count, update,
            (tf.constant(0), 0.0, tf.TensorArray(tf.float32, size=count)))
        return loss, td_errors.stack()

    def _train_loop(self, experience: trajectory.Trajectory) -> Any:
        """experience[k] for k = 0, 1, ...: one agent.train each, in a tf.while_loop.

        Written as a while loop, not a Python loop over tf.range, so the function needs no
        AutoGraph: AutoGraph would also rewrite all of TF-Agents' and Keras' code it reaches,
        which took ~8 s of each run's start here. One agent.train in the body: tracing meets it
        once."""
        self._traces += 1

        def update(k, loss):
            step = tf.nest.map_structure(lambda x: x[k], experience)
            new_loss = self.agent.train(step).loss
            self._move_average()
            return k + 1, tf.cast(new_loss, tf.float32)

        count = tf.shape(experience.reward)[0]
        _, loss = tf.while_loop(lambda k, _: k < count, update, (tf.constant(0), 0.0))
        return loss

    def _move_average(self) -> None:
        """In the update loop, after an update: the averaged weights a step towards the new
        ones. (The graph's automatic control dependencies order each read after the update's
        writes to the same variable.)"""
        if not self._averaged:
            return
        # Early on, a larger step, as tf.train.ExponentialMovingAverage's num_updates takes:
        # k / (k + 1 + n) after update n weighs update i about as i^(k-1), an average over
        # about the last 1 / (k + 1) of the updates (--average-window; 9 / (10 + n) at its
        # 0.1), so the average soon forgets the untrained weights it starts from, until tau
        # is the larger (n = 8,990 at tau 0.001 and window 0.1).
        k = 1.0 / self.config.average_window - 1.0
        updates = tf.cast(self.agent.train_step_counter, tf.float32)
        tau = tf.maximum(self.config.average_tau, k / (k + 1.0 + updates))
        for averaged, weights in zip(self._averaged, self.built.actor_network.variables,
                                     strict=True):
            averaged.assign_add(tau * (weights - averaged))

    @contextlib.contextmanager
    def averaged_weights(self) -> Iterator[None]:
        """Within: the actor network holds the averaged weights (--average-tau; without it,
        its own), so publishing and save_actor write the policy evaluation and export use."""
        if not self._averaged:
            yield
            return
        variables = self.built.actor_network.variables
        current = [v.numpy() for v in variables]
        for weights, averaged in zip(variables, self._averaged, strict=True):
            weights.assign(averaged)
        try:
            yield
        finally:
            for weights, value in zip(variables, current, strict=True):
                weights.assign(value)

    def update_topology(self, env_steps: int, batch: dict[str, np.ndarray],
                        groups: Collection[str] | None = None) -> list:
        """One topology update of the sparse networks of `groups` (None: all; RigL grows by
        the dense gradient of each group's loss on `batch`, one minibatch). Returns the
        changes per layer."""
        from edge_rl.sparse.topology import kernel_gradients

        gradients = None
        if self.topology.method == "rigl":
            losses = self.built.losses(to_experience(batch))
            if groups is not None:
                losses = {name: loss for name, loss in losses.items() if name in groups}
            gradients = kernel_gradients(self.topology, losses)
        return self.topology.update(env_steps, gradients, groups)

    def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
        """The fp32 network's noise-free actions (what an actor stores as deterministic)."""
        from edge_rl.device.outputs import greedy_actions

        outputs = self.built.export_model(self.observation.kind.as_stored(observations),
                                          training=False)
        if isinstance(outputs, (list, tuple)):  # two outputs (squashed_gaussian), as Policy does
            outputs = tf.concat(outputs, axis=-1)
        low = high = None
        if self.action["kind"] == "continuous":
            low = np.asarray(self.action["low"], np.float32)
            high = np.asarray(self.action["high"], np.float32)
        return greedy_actions(self.built.output_kind, outputs.numpy(), low, high)

    def metadata(self, precision: str, version: int, env_id: str) -> PolicyMetadata:
        return PolicyMetadata(
            env_id=env_id,
            algo=self.config.algo,
            precision=precision,
            output=self.built.output_kind,
            observation_shape=self.observation.shape,
            observation=self.observation.kind.name,
            action=self.action,
            policy_version=version,
            train_step=self.updates,
        )

    def publish(self, precision: str, calibration: np.ndarray, version: int) -> tuple[bytes, float]:
        """The actor network as a policy file; returns (bytes, seconds it took to make).

        The first call per precision converts the network (about a second); later calls write
        the new weights into that conversion (milliseconds, see edge_rl.converters.patch).
        """
        from edge_rl.converters import convert
        from edge_rl.converters.patch import NotPatchable, PolicyPatcher

        start = time.perf_counter()
        metadata = self.metadata(precision, version, self.config.env)
        if precision not in self._patchers:
            try:
                self._patchers[precision] = PolicyPatcher(
                    self.built.export_model, precision, calibration, metadata
                )
            except NotPatchable as err:
                log.warning("policies will be converted in full each time (slow): %s", err)
                self._patchers[precision] = None
        patcher = self._patchers[precision]
        if patcher is None:
            model = convert(self.built.export_model, precision, calibration, metadata)
        else:
            model = patcher.write(calibration, metadata)
        return model, time.perf_counter() - start

    def publish_tf_agents(self, version: int) -> bytes:
        """The agent's greedy policy as TF-Agents saves it (the framework baseline's
        broadcast, see edge_rl.tf_policy): saved in full the first time, variables after."""
        from edge_rl.tf_policy import PRECISION, SavedPolicyWriter

        if self._saved_policy is None:
            self._saved_policy = SavedPolicyWriter(self.agent)
        return self._saved_policy.write(self.metadata(PRECISION, version, self.config.env))

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
