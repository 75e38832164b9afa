"""The few interfaces everything else plugs into (in the spirit of Acme's core.py).

    Policy   (device)   act(observations) -> actions               edge_rl.device.Policy
    Actor    (device)   run(): act, explore, batch, send            edge_rl.device.actor.Actor
    Replay   (learner)  insert(batch), sample(n), resize(capacity)  edge_rl.replay.Replay
    Learner  (learner)  train(), publish(), save(), restore()       edge_rl.learner.Learner
    Exchange (learner)  validated batches in, policies out          edge_rl.server.Exchange

The gRPC service (edge_rl.server) is the only thing that knows about the network: the learner
sees an Exchange, a queue of validated batches and a place to put new policies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edge_rl.device.wire import Transitions


class Policy(Protocol):
    def act(self, observations: np.ndarray) -> np.ndarray:
        """Greedy actions for a batch of observations."""


class Actor(Protocol):
    def run(self) -> None:
        """Act until told to stop, sending transitions to a sink and taking new policies."""


class Replay(Protocol):
    def insert(self, actor_key: int, transitions: Transitions) -> None:
        """Append one actor's transitions, in the order they happened."""

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """A uniform minibatch with n-step returns assembled at sample time."""

    def resize(self, capacity: int) -> None:
        """Change the capacity, dropping the oldest transitions if it shrinks."""


class Learner(Protocol):
    def train(self, batch: dict[str, np.ndarray], updates: int) -> Any:
        """`updates` updates on consecutive minibatches of `batch`; returns the last losses."""

    def publish(self, precision: str, calibration: np.ndarray, version: int
                ) -> tuple[bytes, float]:
        """The actor network as a policy file at `precision`, and the seconds it took."""

    def save(self, directory: Path) -> None:
        """Write networks, optimizers and counters under `directory`."""

    def restore(self, directory: Path) -> dict[str, Any]:
        """Read back what `save` wrote."""
