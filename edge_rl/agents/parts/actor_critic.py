"""The BuiltAgent wiring of deterministic actor-critic agents (TD3, D4PG)."""

from __future__ import annotations

from edge_rl.agents.parts.networks import export_model
from edge_rl.algorithm import BuiltAgent, SparseGroup
from edge_rl.device.observations import ObservationSpec


def deterministic_actor_critic(agent, observation: ObservationSpec, actor,
                               actor_optimizer, critic_optimizer,
                               groups: list[SparseGroup]) -> BuiltAgent:
    """The BuiltAgent of an agent whose deterministic `actor` is what actors run (TD3, D4PG),
    and whose `actor_loss(time_steps)` and `critic_loss(time_steps, actions, next_time_steps)`
    are the groups' losses (what RigL grows by)."""

    def losses(experience):
        time_steps, policy_steps, next_time_steps = agent._as_transition(experience)
        return {
            "actor": lambda: agent.actor_loss(time_steps, training=True),
            "critic": lambda: agent.critic_loss(
                time_steps, policy_steps.action, next_time_steps, training=True),
        }

    return BuiltAgent(
        agent,
        export_model(observation, actor.layers),
        "action",
        {"actor_optimizer": actor_optimizer, "critic_optimizer": critic_optimizer},
        actor,
        groups,
        losses,
    )
