"""C51 (Bellemare et al., 2017): DQN whose network predicts, per action, a categorical
distribution of the return over a fixed support of `atoms` values in [v_min, v_max], learned by
cross-entropy against the projected n-step target, with the next action chosen by the online
network (double Q) as edge-rl's DQN does. Everything else is DQN's: its defaults, prioritized
replay, epsilon-greedy actors (on the expected values, as DQN's act on Q) and the loop."""

from __future__ import annotations

from dataclasses import dataclass

from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import network
from tf_agents.utils import common

from edge_rl.agents import register
from edge_rl.agents.dqn import DQN, QLearningOptions, learning_rate_schedule
from edge_rl.agents.parts.categorical import project_onto_support
from edge_rl.agents.parts.networks import dense_stack, export_model, mlp_shapes
from edge_rl.agents.parts.specs import tf_specs
from edge_rl.algorithm import BuiltAgent, SparseGroup, option
from edge_rl.config import TrainConfig
from edge_rl.device.errors import UserError
from edge_rl.sparse.masks import MaskedAdam, dense
from edge_rl.tf_setup import tf


class CategoricalQNetwork(network.Network):
    """Logits over `atoms` return values per action; called, the expected value per action (what
    TF-Agents' greedy and epsilon-greedy policies take the argmax of)."""

    def __init__(self, observation_spec, num_actions: int, hidden: tuple[int, ...],
                 support: tuple[float, ...], sparse: bool = False,
                 name: str = "CategoricalQNetwork"):
        super().__init__(input_tensor_spec=observation_spec, state_spec=(), name=name)
        self.num_actions, self.atoms = num_actions, len(support)
        self.support = tf.constant(support, tf.float32)
        self.trunk = dense_stack(hidden, "q_trunk", sparse)
        self.logits_layer = dense(num_actions * self.atoms, None, "q_logits", sparse)
        # Actors get E[Z] - mean over actions: the argmax of Q, on the scale of the gaps
        self.centered_values = tf.keras.layers.Lambda(self._centered_values, name="centered")

    def _values(self, flat_logits):
        logits = tf.reshape(flat_logits, (-1, self.num_actions, self.atoms))
        return tf.reduce_sum(tf.nn.softmax(logits) * self.support, axis=-1)

    def _centered_values(self, flat_logits):
        values = self._values(flat_logits)
        return values - tf.reduce_mean(values, axis=-1, keepdims=True)

    def logits(self, observations, training=False):
        features = observations
        for layer in self.trunk:
            features = layer(features, training=training)
        flat = self.logits_layer(features, training=training)
        return tf.reshape(flat, (-1, self.num_actions, self.atoms))

    def call(self, observations, step_type=None, network_state=(), training=False):
        logits = self.logits(observations, training=training)
        values = tf.reduce_sum(tf.nn.softmax(logits) * self.support, axis=-1)
        return values, network_state

    @property
    def greedy_layers(self) -> list:
        return [*self.trunk, self.logits_layer, self.centered_values]


class C51Agent(dqn_agent.DqnAgent):
    """TF-Agents' DQN agent (its training step, target updates and policies) with C51's loss."""

    def _loss(self, experience, td_errors_loss_fn=None, gamma=1.0, reward_scale_factor=1.0,
              weights=None, training=False):
        # edge-rl's experience is [batch, 2]: the transition at 0 (n-step reward, and discount
        # gamma^(k-1) or 0), the next observation at 1 (edge_rl.loop.learner.to_trajectory)
        observation, next_observation = experience.observation[:, 0], experience.observation[:, 1]
        action = tf.cast(experience.action[:, 0], tf.int32)
        reward, discount = experience.reward[:, 0], experience.discount[:, 0]
        support = self._q_network.support

        chosen_logits = tf.gather(self._q_network.logits(observation, training=training), action,
                                  batch_dims=1)
        # Double Q: the online network picks the next action, the target network scores it
        next_values, _ = self._q_network(next_observation, training=False)
        next_action = tf.argmax(next_values, axis=-1, output_type=tf.int32)
        next_probabilities = tf.nn.softmax(tf.gather(
            self._target_q_network.logits(next_observation), next_action, batch_dims=1))
        target_values = (reward_scale_factor * reward[:, None]
                         + gamma * discount[:, None] * support[None, :])
        target = tf.stop_gradient(
            project_onto_support(target_values, next_probabilities, support))

        cross_entropy = tf.nn.softmax_cross_entropy_with_logits(labels=target,
                                                                logits=chosen_logits)
        # The priority: KL(target || prediction), cross-entropy less the target's own entropy,
        # which a perfect fit leaves (Hessel et al., 2018, prioritize by this loss)
        entropy = -tf.reduce_sum(target * tf.math.log(target + 1e-8), axis=-1)
        loss = common.aggregate_losses(per_example_loss=cross_entropy, sample_weight=weights,
                                       regularization_loss=self._q_network.losses)
        divergence = tf.maximum(cross_entropy - entropy, 0.0)
        return tf_agent.LossInfo(loss.total_loss, dqn_agent.DqnLossInfo(
            td_loss=cross_entropy, td_error=divergence))


class C51(DQN):
    name = "c51"
    tf_agents_baseline = False  # TF-Agents' own C51 has another network: no framework twin

    @dataclass(frozen=True)
    class Options(QLearningOptions):
        # [-100, 100]: the discounted returns of a reward of at most 1 a step at gamma 0.99,
        # CartPole's and Acrobot's (0 to 100, -100 to 0). Set them to your task's.
        atoms: int = option(51, "Atoms of the Q-network's categorical support.")
        v_min: float = option(-100.0, "The support's lowest return.")
        v_max: float = option(100.0, "The support's highest return.")

        def __post_init__(self):
            super().__post_init__()
            if self.atoms < 2 or not self.v_min < self.v_max:
                raise UserError("--atoms must be >= 2 and --v-min < --v-max")

    def build(self, observation, action, config: TrainConfig) -> BuiltAgent:
        if observation.is_image:
            raise UserError("c51 takes vector observations only, for now (use --algo dqn)")
        options = config.algo_options
        time_step_spec, action_spec = tf_specs(observation, action)
        atoms, low, high = options["atoms"], options["v_min"], options["v_max"]
        support = tuple(low + (high - low) * i / (atoms - 1) for i in range(atoms))
        net = CategoricalQNetwork(time_step_spec.observation, action["n"], config.hidden,
                                  support, config.is_sparse)
        optimizer = MaskedAdam(learning_rate=learning_rate_schedule(config))
        agent = C51Agent(
            time_step_spec,
            action_spec,
            q_network=net,
            optimizer=optimizer,
            target_update_period=options["target_update_period"],
            target_update_tau=options["target_update_tau"],
            gradient_clipping=options["gradient_clipping"],
            gamma=config.gamma,
            train_step_counter=tf.Variable(0, dtype=tf.int64, name="train_step"),
        )
        agent.initialize()
        values = export_model(observation, net.greedy_layers)
        # Forward: online on both observations, target on the next; backward: the loss
        groups = [SparseGroup("q", "actor", [net], [agent._target_q_network], optimizer,
                              passes=(3, 1))]

        def losses(experience):
            return {"q": lambda: agent.loss(experience, training=True, gamma=config.gamma).loss}

        return BuiltAgent(agent, values, "q_values", {"optimizer": optimizer}, net, groups,
                          losses)

    def layer_shapes(self, observation, action, hidden):
        # Only the hidden sizes reach here: the output is the default support's size per action
        return {"actor": mlp_shapes(observation.size, hidden, action["n"] * self.Options().atoms)}


ALGORITHM = register(C51())
