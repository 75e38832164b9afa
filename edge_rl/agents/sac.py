"""SAC (TF-Agents SacAgent) for continuous actions; actors sample the squashed Gaussian."""

from __future__ import annotations

from tf_agents.agents.sac import sac_agent

from edge_rl.agents.base import BuiltAgent
from edge_rl.agents.networks import SquashedGaussianActor, critic, export_model
from edge_rl.agents.specs import tf_specs
from edge_rl.config import TrainConfig
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.tf_setup import tf


class SAC:
    name = "sac"
    discrete = False
    defaults = {
        "hidden": (256, 256),
        "learning_rate": 3e-4,
        "batch_size": 256,
        "updates_per_step": 1.0,
        "warmup_steps": 5_000,
        "nstep": 1,
        "eval_every": 5_000,
        "checkpoint_every": 25_000,
        "algo_options": {"tau": 0.005},
    }

    def build(self, observation_shape, action, config: TrainConfig) -> BuiltAgent:
        time_step_spec, action_spec = tf_specs(observation_shape, action)
        obs_spec = time_step_spec.observation
        actor = SquashedGaussianActor(obs_spec, action_spec, config.hidden)
        optimizers = {
            name: tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
            for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer")
        }
        agent = sac_agent.SacAgent(
            time_step_spec,
            action_spec,
            critic_network=critic(obs_spec, action_spec, config.hidden, "critic"),
            actor_network=actor,
            target_update_tau=config.algo_options["tau"],
            target_update_period=1,
            td_errors_loss_fn=tf.math.squared_difference,
            gamma=config.gamma,
            train_step_counter=tf.Variable(0, dtype=tf.int64, name="train_step"),
            **optimizers,
        )
        agent.initialize()
        layers = [*actor.hidden_layers, actor.head]
        return BuiltAgent(
            agent, export_model(observation_shape, layers), "mean_log_std", optimizers, actor
        )

    def exploration(self, config: TrainConfig, actor_index: int) -> ExplorationSettings:
        return ExplorationSettings(kind="sac", random_steps=config.warmup_steps // config.actors)


ALGORITHM = SAC()
