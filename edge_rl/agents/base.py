"""What an algorithm provides to the learner, the converter and the device.

An algorithm builds a TF-Agents agent for the run's specs, names the network that is exported
to the actors and what its output means, and says how each actor explores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from edge_rl.config import TrainConfig
from edge_rl.device.errors import UserError
from edge_rl.device.exploration import ExplorationSettings


@dataclass
class BuiltAgent:
    """A TF-Agents agent plus what edge-rl needs around it."""

    agent: Any  # tf_agents.agents.TFAgent
    export_model: Any  # tf.keras.Model: observations -> the output actors act on
    output_kind: str  # "q_values" | "action" | "mean_log_std" (see device.policy_file)
    optimizers: dict[str, Any]  # checkpointed with the agent
    actor_network: Any  # the network whose weights the exported model shares


class AgentFactory(Protocol):
    """One algorithm: DQN, TD3, SAC, ..."""

    name: str
    discrete: bool  # True: Discrete actions only; False: continuous (1-D Box) only
    defaults: dict[str, Any]  # values for TrainConfig fields left at None

    def build(self, observation_shape: tuple[int, ...], action: dict, config: TrainConfig
              ) -> BuiltAgent:
        """A fresh agent for these specs (variables created, train step jit-compiled)."""

    def exploration(self, config: TrainConfig, actor_index: int) -> ExplorationSettings:
        """How actor number `actor_index` explores."""


def check_action_space(factory: AgentFactory, env_id: str, action: dict) -> None:
    """An algorithm that cannot drive this action space is a user mistake."""
    is_discrete = action["kind"] == "discrete"
    if is_discrete != factory.discrete:
        kind = "discrete" if is_discrete else "continuous"
        raise UserError(
            f"{factory.name} cannot drive {env_id}: its actions are {kind}; "
            f"use {'dqn' if is_discrete else 'td3 or sac'}"
        )


def resolve_defaults(factory: AgentFactory, config: TrainConfig) -> TrainConfig:
    """Fill the fields left at None with the algorithm's defaults."""
    changes = {
        name: value for name, value in factory.defaults.items()
        if name != "algo_options" and getattr(config, name) is None
    }
    options = {**factory.defaults.get("algo_options", {}), **config.algo_options}
    return config.replace(**changes, algo_options=options)
