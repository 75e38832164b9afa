"""edge-rl: fast, cheap deep RL with int8 actors (ActorQ) and sparse networks (RLx2).

    import edge_rl
    summary = edge_rl.train(edge_rl.TrainConfig(env="CartPole-v1", algo="dqn"))

Importing edge_rl does not import TensorFlow: the learner imports it when it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edge_rl.config import TrainConfig

__version__ = "0.1.0"
__all__ = ["TrainConfig", "train", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    pass


def train(config: TrainConfig) -> dict[str, Any]:
    """Train with `config` (learner + local actor processes); returns the run's summary."""
    from edge_rl.train import run_training

    return run_training(config)
