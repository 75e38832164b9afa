"""Categorical (distributional) values, Bellemare et al. (2017): returns as probabilities over a
fixed, evenly spaced support. D4PG's critic and DQN's Q-network on vectors (C51) predict them;
here are the projection they share and C51's network and loss."""

from __future__ import annotations

import numpy as np
from tf_agents.agents import tf_agent
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import network
from tf_agents.utils import common

from edge_rl.agents.parts.networks import dense_stack
from edge_rl.sparse.masks import dense
from edge_rl.tf_setup import tf


def evenly_spaced_support(v_min: float, v_max: float, atoms: int) -> tf.Tensor:
    """The atoms z_i: `atoms` returns evenly spaced from v_min to v_max, both included."""
    return tf.constant(np.linspace(v_min, v_max, atoms), tf.float32)


def project_onto_support(target_values: tf.Tensor, probabilities: tf.Tensor,
                         support: tf.Tensor) -> tf.Tensor:
    """Project atoms `target_values` [B, M] with `probabilities` [B, M] onto `support` [N]."""
    v_min, v_max = support[0], support[-1]
    delta = support[1] - support[0]
    clipped = tf.clip_by_value(target_values, v_min, v_max)
    # weight[b, i, j]: the share of target atom j that lands on support atom i; it is nonzero
    # only for the (at most two) support atoms within one spacing of the target atom
    distance = tf.abs(clipped[:, None, :] - support[None, :, None])
    weight = tf.clip_by_value(1.0 - distance / delta, 0.0, 1.0)
    return tf.reduce_sum(weight * probabilities[:, None, :], axis=-1)


class CategoricalQNetwork(network.Network):
    """Logits over `atoms` return values per action; called, the expected value per action (what
    TF-Agents' greedy and epsilon-greedy policies take the argmax of)."""

    def __init__(self, observation_spec, num_actions: int, hidden: tuple[int, ...],
                 support: tf.Tensor, sparse: bool = False,
                 name: str = "CategoricalQNetwork"):
        super().__init__(input_tensor_spec=observation_spec, state_spec=(), name=name)
        self.num_actions, self.atoms = num_actions, int(support.shape[0])
        self.support = support
        self.trunk = dense_stack(hidden, "q_trunk", sparse)
        self.logits_layer = dense(num_actions * self.atoms, None, "q_logits", sparse)
        # Actors get E[Z] - mean over actions: the argmax of Q, on the scale of the gaps
        self.centered_values = tf.keras.layers.Lambda(self._centered_values, name="centered")

    def _expected_values(self, logits):
        return tf.reduce_sum(tf.nn.softmax(logits) * self.support, axis=-1)

    def _centered_values(self, flat_logits):
        logits = tf.reshape(flat_logits, (-1, self.num_actions, self.atoms))
        values = self._expected_values(logits)
        return values - tf.reduce_mean(values, axis=-1, keepdims=True)

    def logits(self, observations, training=False):
        features = observations
        for layer in self.trunk:
            features = layer(features, training=training)
        flat = self.logits_layer(features, training=training)
        return tf.reshape(flat, (-1, self.num_actions, self.atoms))

    def call(self, observations, step_type=None, network_state=(), training=False):
        return self._expected_values(self.logits(observations, training=training)), network_state

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
