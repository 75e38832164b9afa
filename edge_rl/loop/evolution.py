"""What changes on the training schedule besides the weights: RLx2's n-step switch and replay
checks, and the sparse networks' topology updates; with the networks' accounting they log.

`Training` calls `Evolution.step()` between chunks of updates; each piece runs when its
interval of env steps has passed (and, for topology updates, once learning has started).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edge_rl.config import TrainConfig
from edge_rl.core import ReplayBuffer
from edge_rl.replay.rlx2 import check_buffer, nstep_now

if TYPE_CHECKING:  # the sparse groups and topology are this learner's, not the interface's
    from edge_rl.loop.learner import Learner


def next_multiple(value: int, every: int) -> int:
    return (value // every + 1) * every


class Evolution:
    def __init__(self, config: TrainConfig, learner: Learner, replay: ReplayBuffer, action: dict,
                 writer: Any, state: Any):
        """`state`: the run's RunState, whose env_steps and topology_updates (counted over
        the whole run, saved with each checkpoint) this reads and updates."""
        from edge_rl.tf_setup import tf

        self.tf = tf
        self.config, self.learner, self.replay, self.action = config, learner, replay, action
        self.writer, self.state = writer, state
        env_steps = state.env_steps
        # Env steps between topology updates, per sparse group. prune takes many small steps
        # on every network at once; rigl and set replace connections every interval of each
        # network's own updates (TD3's actor, trained every 2nd update, every 2 intervals).
        if config.topology == "prune":
            self.topology_intervals = {None: max(1, config.topology_interval // 10)}
        else:
            self.topology_intervals = {group.name: config.topology_interval * group.update_period
                                       for group in learner.built.groups}
        self.next_topology = {group: next_multiple(env_steps, interval)
                              for group, interval in self.topology_intervals.items()}
        self.next_buffer_check = next_multiple(env_steps, config.buffer_check_interval)

    def step(self, env_steps: int) -> None:
        """Whatever is due at `env_steps`."""
        config = self.config
        self.replay.nstep = nstep_now(config, env_steps)
        topology = self.learner.topology
        if topology is not None and topology.active(env_steps) and self.learner.updates > 0:
            due = [group for group, at in self.next_topology.items() if env_steps >= at]
            for group in due:
                self.next_topology[group] = next_multiple(env_steps,
                                                          self.topology_intervals[group])
            if due:
                groups = None if due == [None] else due
                self.learner.update_topology(env_steps, self.replay.sample(config.batch_size),
                                             groups)
                by_group = self.state.topology_updates_by_group
                for name in groups or [group.name for group in self.learner.built.groups]:
                    by_group[name] = by_group.get(name, 0) + 1
                # counted per update event; the FLOPs count charges each one every group's
                # dense gradient, a slight overcount when the actor evolves half as often
                self.state.topology_updates += 1
                self.log_networks(env_steps)
        if config.dynamic_buffer and env_steps >= self.next_buffer_check:
            self.next_buffer_check = next_multiple(env_steps, config.buffer_check_interval)
            distance = check_buffer(self.replay, self.learner.greedy_actions, self.action,
                                    config.buffer_threshold, config.buffer_min)
            with self.writer.as_default(step=env_steps):
                self.tf.summary.scalar("replay/policy_distance", distance)

    def network_report(self) -> dict[str, Any]:
        """Sparsity, parameters and FLOPs of the networks so far (edge_rl.sparse.accounting)."""
        from edge_rl.sparse.accounting import network_report

        return network_report(self.learner.built, self.config.batch_size,
                              self.learner.updates, self.state.topology_updates)

    def log_networks(self, env_steps: int) -> None:
        report = self.network_report()
        scalar = self.tf.summary.scalar
        with self.writer.as_default(step=env_steps):
            for name, group in report["groups"].items():
                scalar(f"sparse/{name}_sparsity", group["sparsity"])
                scalar(f"sparse/{name}_nonzero_parameters", group["nonzero_parameters"])
            for layer in report["layers"]:
                scalar(f"sparse_layers/{layer['group']}/{layer['layer']}", layer["sparsity"])
            for name in ("train_flops_vs_dense", "inference_flops_vs_dense"):
                if name in report:
                    scalar(f"sparse/{name}", report[name])

    def log_replay(self, env_steps: int) -> None:
        with self.writer.as_default(step=env_steps):
            self.tf.summary.scalar("replay/capacity", self.replay.capacity)
            self.tf.summary.scalar("replay/size", len(self.replay))
            self.tf.summary.scalar("replay/nstep", self.replay.nstep)
