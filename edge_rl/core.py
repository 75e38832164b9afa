"""The interfaces the training loop and the actors are written against (in the spirit of Acme's
core.py). Each is small; the classes named beside them implement it, and the loop
(edge_rl.loop.train.Training, device.actor.Actor) holds them by these types.

    Learner         train, publish, save/restore          edge_rl.loop.learner.Learner
    ReplayBuffer    insert, sample, len                   edge_rl.replay.buffer.Replay
    PolicyExchange  policies out, actors' batches in      edge_rl.transport.exchange.Exchange
    ActorPolicy     network outputs, greedy actions       edge_rl.device.Policy (LiteRT),
                                                          edge_rl.tf_policy.TFAgentsPolicy
    Worker          run until told to stop                edge_rl.device.actor.Actor

No TensorFlow here: the device side imports this module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from edge_rl.device.wire import Transitions


class Learner(ABC):
    """Trains the networks on replayed minibatches and turns the actor's into policy files."""

    @property
    @abstractmethod
    def updates(self) -> int:
        """Updates made so far, over the whole run (resumes included)."""

    @abstractmethod
    def train(self, batch: dict[str, np.ndarray], updates: int = 1) -> Any:
        """`updates` updates on consecutive minibatches stacked in `batch`; the last loss."""

    @abstractmethod
    def train_weighted(self, batch: dict[str, np.ndarray], updates: int = 1
                       ) -> tuple[Any, np.ndarray]:
        """As `train`, each sample's loss scaled by `batch["weights"]`; also each sample's TD
        error (prioritized replay)."""

    @abstractmethod
    def publish(self, precision: str, calibration: np.ndarray, version: int
                ) -> tuple[bytes, float]:
        """The actor network as a policy file at `precision`, and the seconds it took."""

    @abstractmethod
    def publish_tf_agents(self, version: int) -> bytes:
        """The policy as TF-Agents saves it: the framework baseline's broadcast."""

    @abstractmethod
    def save(self, directory: Path) -> None:
        """Write networks, optimizers and counters under `directory`."""

    @abstractmethod
    def restore(self, directory: Path) -> None:
        """Read back what `save` wrote."""

    @abstractmethod
    def save_actor(self, directory: Path) -> None:
        """Write the exported network's weights alone (the best policy so far)."""

    @abstractmethod
    def averaged_weights(self) -> AbstractContextManager[None]:
        """Within it, the actor network holds the weights evaluation and export use: a Polyak
        average with --average-tau, else its own."""


class ReplayBuffer(ABC):
    """Transitions from every actor, sampled (uniformly, or by priority) with their n-step
    returns."""

    capacity: int  # transitions it can hold
    nstep: int  # the n of the returns `sample` assembles (the loop may change it)
    # True: `sample` draws by priority and adds importance `weights`; the learner's TD errors
    # go back through `update_priorities` (edge_rl.replay.prioritized)
    prioritized: bool = False

    @abstractmethod
    def insert(self, actor_key: int, transitions: Transitions) -> None:
        """Append one actor's transitions, in the order they happened."""

    @abstractmethod
    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """A uniform minibatch, n-step returns assembled at sample time."""

    @abstractmethod
    def recent_observations(self, n: int) -> np.ndarray:
        """The newest `n` observations (int8 calibration)."""

    @abstractmethod
    def oldest(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Observations and the behaviour's actions of the oldest `n` transitions (RLx2's
        policy distance)."""

    @abstractmethod
    def drop_oldest(self, n: int) -> None:
        """Forget the oldest `n` transitions; the capacity stays."""

    @abstractmethod
    def save(self, path: Path) -> None:
        """Write what is stored, and the sampler's state, to `path`."""

    @abstractmethod
    def load(self, path: Path) -> None:
        """Read back what `save` wrote."""

    @abstractmethod
    def __len__(self) -> int:
        """Transitions stored."""


class PolicyExchange(ABC):
    """The learner's side of the transport: the newest policy file for actors to pull, the
    actors it knows and what it has acked of each, and the run's end."""

    progress: dict[str, int]  # the run's env steps and updates, as actors are told them
    actors: dict[str, Any]  # actor id -> its record (host, incarnation, last heard)
    ledger: Any  # the (actor, seq) pairs acked so far (edge_rl.transport.exchange.Ledger)

    @abstractmethod
    def put_policy(self, version: int, model: bytes) -> None:
        """Make `model` the policy actors pull from now on."""

    @property
    @abstractmethod
    def policy(self) -> tuple[int, bytes] | None:
        """(version, file) of the newest policy, None before the first."""

    @abstractmethod
    def sweep(self, timeout: float) -> None:
        """Forget actors not heard from for `timeout` seconds."""

    @abstractmethod
    def stop_taking(self) -> None:
        """Refuse new batches from now on (the run is ending)."""

    @abstractmethod
    def wait_for_goodbyes(self, timeout: float) -> None:
        """Keep answering until every actor has heard the run is over, or `timeout`."""

    @abstractmethod
    def drop_pending(self) -> None:
        """Forget batches that arrived but were not taken (the run has ended)."""

    @abstractmethod
    def actor_index(self) -> dict[str, int]:
        """Actor id -> its index (which picks its exploration), kept for the whole run."""


class ActorPolicy(ABC):
    """A policy file loaded for acting: network outputs, and the greedy action of each row."""

    metadata: Any  # edge_rl.device.policy_file.PolicyMetadata

    @abstractmethod
    def outputs(self, observations: np.ndarray) -> np.ndarray:
        """The network's outputs for a batch of observations."""

    @abstractmethod
    def greedy(self, outputs: np.ndarray) -> np.ndarray:
        """The noise-free action of each row of outputs."""

    def act(self, observations: np.ndarray) -> np.ndarray:
        """Greedy actions for a batch of observations."""
        return self.greedy(self.outputs(observations))


class Worker(ABC):
    """A loop that runs in its own process or thread until told to stop."""

    @abstractmethod
    def run(self) -> None:
        """Work until stopped."""
