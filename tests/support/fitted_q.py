"""A toy algorithm from outside edge-rl, in one file: fitted Q-iteration.

Iteration k regresses Q(s, a) on r + gamma * discount * max_a' Q_k-1(s', a'), where Q_k-1 is
the network as the previous iteration left it (a snapshot taken every `iteration_updates`
updates), one step, plain MLP: no Polyak averaging, no double Q, no dueling head, no n-step
returns (not edge-rl's DQN). It plugs in through
`edge_rl.agents.register`, so `edge-rl train --algo support.fitted_q:fitted-q` (with tests/
on the path) trains it with int8 actors, and export and eval take it like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from tf_agents.agents import data_converter, tf_agent
from tf_agents.networks import network
from tf_agents.policies import q_policy

from edge_rl.agents import register
from edge_rl.agents.parts.networks import export_model, mlp_shapes
from edge_rl.agents.parts.specs import tf_specs
from edge_rl.algorithm import BuiltAgent, option
from edge_rl.config import TrainConfig
from edge_rl.device.errors import UserError
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.tf_setup import tf


class QNetwork(network.Network):
    """observation -> hidden ReLU layers -> one Q-value per action."""

    def __init__(self, observation_spec, actions: int, hidden: tuple[int, ...],
                 name: str = "FittedQNetwork"):
        super().__init__(observation_spec, state_spec=(), name=name)
        self.hidden_layers = [tf.keras.layers.Dense(units, activation="relu")
                              for units in hidden]
        self.head = tf.keras.layers.Dense(actions)

    @property
    def layers_in_order(self) -> list:
        return [*self.hidden_layers, self.head]

    def call(self, observation, step_type=None, network_state=(), training=False):
        x = observation
        for layer in self.layers_in_order:
            x = layer(x)
        return x, network_state


class FittedQAgent(tf_agent.TFAgent):
    def __init__(self, time_step_spec, action_spec, q_network, optimizer, gamma: float,
                 iteration_updates: int):
        tf.Module.__init__(self, name="FittedQ")
        self._q_network = q_network
        q_network.create_variables()
        self._previous = q_network.copy(name="PreviousIteration")
        self._previous.create_variables()
        self._optimizer = optimizer
        self._gamma = gamma
        self._iteration_updates = iteration_updates
        policy = q_policy.QPolicy(time_step_spec, action_spec, q_network)
        super().__init__(time_step_spec, action_spec, policy, policy, train_sequence_length=2,
                         train_step_counter=tf.Variable(0, dtype=tf.int64))
        self._as_transition = data_converter.AsTransition(self.data_context,
                                                          squeeze_time_dim=True)

    def _initialize(self) -> None:
        self._next_iteration()

    def _next_iteration(self) -> None:
        for previous, current in zip(self._previous.variables, self._q_network.variables,
                                     strict=True):
            previous.assign(current)

    def _train(self, experience, weights=None) -> tf_agent.LossInfo:
        time_steps, policy_steps, next_time_steps = self._as_transition(experience)
        next_q, _ = self._previous(next_time_steps.observation)
        target = tf.stop_gradient(next_time_steps.reward + self._gamma
                                  * next_time_steps.discount * tf.reduce_max(next_q, axis=-1))
        variables = self._q_network.trainable_variables
        with tf.GradientTape() as tape:
            q, _ = self._q_network(time_steps.observation, training=True)
            taken = tf.gather(q, policy_steps.action, batch_dims=1)
            loss = tf.reduce_mean(tf.keras.losses.huber(target[:, None], taken[:, None]))
        gradients = tape.gradient(loss, variables)
        self._optimizer.apply_gradients(zip(gradients, variables, strict=True))
        self.train_step_counter.assign_add(1)
        tf.cond(self.train_step_counter % self._iteration_updates == 0,
                lambda: tf.group([p.assign(c) for p, c in zip(
                    self._previous.variables, self._q_network.variables, strict=True)]),
                tf.no_op)
        return tf_agent.LossInfo(loss, ())


class FittedQ:
    name = "fitted-q"
    action_kinds = frozenset({"discrete"})
    defaults = {
        "hidden": (64, 64),
        "learning_rate": 5e-4,
        "batch_size": 64,
        "updates_per_step": 0.25,
        "warmup_steps": 1_000,
        "nstep": 1,
        "eval_every": 2_500,
        "checkpoint_every": 25_000,
    }
    tf_agents_baseline = False

    @dataclass(frozen=True)
    class Options:
        iteration_updates: int = option(250, "Updates per iteration (between snapshots).")
        epsilon_end: float = option(0.05, "Actors' exploration rate after the decay.")
        epsilon_decay_steps: int = option(10_000, "Env steps of linear decay from 1.")

        def __post_init__(self):
            if self.iteration_updates < 1:
                raise UserError("--iteration-updates must be >= 1")

    def build(self, observation, action, config: TrainConfig) -> BuiltAgent:
        if config.is_sparse:
            raise UserError("fitted-q trains dense networks only")
        time_step_spec, action_spec = tf_specs(observation, action)
        net = QNetwork(time_step_spec.observation, action["n"], config.hidden)
        optimizer = tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
        agent = FittedQAgent(time_step_spec, action_spec, net, optimizer, config.gamma,
                             config.algo_options["iteration_updates"])
        agent.initialize()
        return BuiltAgent(agent, export_model(observation, net.layers_in_order),
                          "q_values", {"optimizer": optimizer}, net)

    def layer_shapes(self, observation, action, hidden, options):
        return {"actor": mlp_shapes(observation.size, hidden, action["n"])}

    def exploration(self, config: TrainConfig, actor_index: int) -> ExplorationSettings:
        options = config.algo_options
        return ExplorationSettings(kind="epsilon_greedy", epsilon_start=1.0,
                                   epsilon_end=options["epsilon_end"],
                                   decay_steps=options["epsilon_decay_steps"])


register(FittedQ())
