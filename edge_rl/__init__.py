"""edge-rl: fast, cheap deep RL with int8 actors (ActorQ) and sparse networks (RLx2).

    import edge_rl
    summary = edge_rl.train(edge_rl.TrainConfig(env="CartPole-v1", algo="dqn"))

Importing edge_rl does not import TensorFlow: the learner imports it when it starts.
"""

from __future__ import annotations

import os

# TFMOT and tf.keras must see the same Keras classes: legacy Keras (tf-keras 2.15), chosen
# before TensorFlow's first import. Every learner module is under this package, so setting it
# here, before any of them (or TF-Agents) can import TensorFlow, is the one place that holds.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from typing import Any  # noqa: E402

from edge_rl.config import TrainConfig  # noqa: E402

__version__ = "0.1.0"
__all__ = ["TrainConfig", "train", "__version__"]


def train(config: TrainConfig) -> dict[str, Any]:
    """Train with `config` (learner + local actor processes); returns the run's summary."""
    from edge_rl.loop.train import run_training

    return run_training(config)
