"""DQN (TF-Agents DqnAgent: double-Q targets) for Discrete actions; epsilon-greedy actors. On
vector observations its Q-network is categorical (C51: a distribution of the return per action);
on images, and with --atoms 0, a dueling network of expected values."""

from __future__ import annotations

from dataclasses import dataclass

from tf_agents.agents.dqn import dqn_agent
from tf_agents.utils import common

from edge_rl.agents import register
from edge_rl.agents.parts.categorical import C51Agent, CategoricalQNetwork, evenly_spaced_support
from edge_rl.agents.parts.networks import (
    DuelingQNetwork,
    export_model,
    mlp_shapes,
)
from edge_rl.agents.parts.specs import tf_specs
from edge_rl.algorithm import BuiltAgent, SparseGroup, option
from edge_rl.config import TrainConfig
from edge_rl.device.errors import UserError
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.sparse.masks import MaskedAdam
from edge_rl.tf_setup import tf


def learning_rate_schedule(config: TrainConfig):
    """--learning-rate, constant or falling linearly over the run's updates to
    learning_rate_end_fraction of it (counted by the optimizer: it resumes where it was)."""
    end_fraction = config.algo_options["learning_rate_end_fraction"]
    if end_fraction == 1.0:
        return config.learning_rate
    updates = max(1, int((config.steps - config.warmup_steps) * config.updates_per_step))
    return tf.keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, updates, config.learning_rate * end_fraction)


class AdvantageLearningDdqnAgent(dqn_agent.DdqnAgent):
    """TF-Agents' double DQN with the advantage-learning operator (Baird, 1999; Bellemare et
    al., 2016, "Increasing the Action Gap"): each target is lowered by
    alpha * (max_b Q_target(s, b) - Q_target(s, a)), which leaves the greedy action's value and
    widens the gaps to the others by 1 / (1 - alpha). alpha 0 is plain double DQN."""

    def __init__(self, *args, action_gap: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self._action_gap = action_gap

    def _compute_q_values(self, time_steps, actions, training=False):
        q_values = super()._compute_q_values(time_steps, actions, training=training)
        if self._action_gap == 0.0:
            return q_values
        # Lowering the target by the gap is, in the TD error, raising the prediction by it; the
        # gap comes from the target network, so no gradient flows through it.
        target_q_values, _ = self._target_q_network(time_steps.observation,
                                                    step_type=time_steps.step_type)
        gap = tf.reduce_max(target_q_values, axis=-1) - common.index_with_actions(
            target_q_values, tf.cast(actions, tf.int32))
        return q_values + self._action_gap * tf.stop_gradient(gap)


class DQN:
    name = "dqn"
    action_kinds = frozenset({"discrete"})
    defaults = {
        # 256x256 on vectors since 2026-12-06, by a rule written before its runs: on Acrobot-v1
        # (seeds 1-10) 9 of 10 runs kept within 10% of their best on 80% of their later
        # evaluations, where 64x64 held on 5 of 10 (its runs were still creeping up at 100k,
        # 200k and 300k steps), on last-10-evaluation means 8.1 higher; on CartPole-v1 (seeds
        # 0-9, side by side) 10 of 10 held, as with 64x64, solving it sooner (median 32.5k env
        # steps against 45.1k). The cost: 1.3x the wall-clock, int8 files 5 times larger
        # (181 KB on CartPole) and 7-9 times the multiply-adds a step (docs/learning.md, "A
        # wider network"). --hidden 64,64 for a board with little flash.
        "hidden": (256, 256),
        "learning_rate": 1e-3,
        "batch_size": 64,
        # One update per 4 env steps, each on 64 samples (16 sampled per env step). At one
        # update per step, greedy CartPole returns swung between 500 and ~100 all run long,
        # in lockstep and in the synchronous reference too; a lower learning rate (Q
        # diverged), slower Polyak targets, a decaying learning rate, gradient clipping,
        # 256x256 and batches of 256 did not help (docs/learning.md). With C51 on Acrobot-v1,
        # one a step raised the last-10-evaluation means by 9.2 (seeds 0-9) at 2.3x the
        # wall-clock and held within 10% of the best no more often (0 of 10, this 1 of 10);
        # with the learning rate falling to 1% as well, 4 of 10 at 2.1x: not the bar's 8.
        "updates_per_step": 0.25,
        # The loop's --publish-every 1000 / --max-update-lag 2000 (TrainConfig) stay: at
        # epsilon_end 0.05 less staleness held no better (250/500: 13 of 19 seeds at >= 0.8,
        # 50/100: 6 of 9, lockstep: 1 of 3, against 11 of 14), and costs wall-clock.
        "warmup_steps": 1_000,
        # 3-step, not 5: 5-step targets held on 24 of 32 runs on a busy machine, but on a
        # quiet one on 3 of 6 against 3-step's 5 of 6 side by side (docs/learning.md,
        # "2026-11-25").
        "nstep": 3,
        # Prioritized replay (Schaul et al., 2016: alpha 0.6, beta 0.4 -> 1). CartPole runs
        # that fell had learned to balance the pole and let the cart drift off the track:
        # states a good policy stops visiting, rare in a uniform replay; drawn by their TD
        # errors they stay in the updates. Seeds 0-19, side by side with uniform replay: no
        # run below 0.42 stability and every one at 500, against 7 of 20 at 0.29 or less and
        # 3 that never reached 500 (mean 0.80 against 0.61); at 4 updates per sample
        # (edge_rl.loop.train) seeds 0-9 held 0.84 on average, lowest 0.64, for 1.9x the
        # wall-clock (docs/learning.md, "Prioritized replay").
        "replay_priority": 0.6,
        "eval_every": 2_500,  # greedy DQN returns swing: look often, keep the best
        # Evaluate and export a Polyak average of the weights (the actors explore with the
        # current ones). On Acrobot-v1 it held within 10% of its best on 13 of 20 runs where the
        # current weights of the same runs held on 1 (18 of 30 with ten more seeds; short of the
        # bar's 8 of 10: most runs are still improving at 100k); on CartPole-v1, seeds 10-29
        # side by side, on 20 of 20 against 19 of 20, solving it a median 3.8k env steps later,
        # at 1.07x the wall-clock (docs/learning.md, rule 8). Sparse networks keep 0 (an average
        # of masked weights is not sparse), and images, where it was not measured.
        "average_tau": 0.0002,
        "checkpoint_every": 25_000,
    }
    # 1-step targets on images, as the Nature DQN (Mnih et al., 2015) and the MinAtar paper's
    # DQN (Young & Tian, 2019) use. On EdgeRL/BrightPatch-v0 at 15k env steps (seeds 0-2),
    # every evaluation with 1-step targets scored 16 of 16; with 3-step ones the first were
    # 14.25-15.7, and all ended at 15.95-16 (docs/pixels.md).
    # Uniform replay on images: prioritized replay was measured on CartPole only.
    # The average was measured on vectors only, and so was the wider network: images keep the
    # 64-unit dense layers after their convolutions that docs/pixels.md measured.
    image_defaults = {"nstep": 1, "replay_priority": 0.0, "average_tau": 0.0, "hidden": (64, 64)}
    # Images keep the dueling network of expected values, which docs/pixels.md measured.
    image_options = {"atoms": 0}
    tf_agents_baseline = True
    reports_td_errors = True  # DqnLossInfo.td_error

    @dataclass(frozen=True)
    class Options:
        # Polyak averaging after every update: on CartPole, hard copies every 200-500
        # updates oscillated far more (and copies every update diverged).
        target_update_period: int = option(1, "Updates between target-network updates.")
        target_update_tau: float = option(0.01, "Polyak weight of each target update.")
        epsilon_start: float = option(1.0, "Actors' exploration rate at their first step.")
        # 0.05, not 0.02: CartPole runs that fell had Q-values far past the 100 a return can
        # be worth there (up to ~47,000); with more exploration late in the run the replay
        # keeps the states a near-perfect policy stops visiting. At 0.02, 3 of 8 seeds held
        # >= 80% of their evaluations after first solving it; at 0.05, 11 of 14
        # (docs/learning.md, "2026-11-24").
        epsilon_end: float = option(0.05, "Actors' exploration rate after the decay.")
        epsilon_decay_steps: int = option(10_000, "Env steps (per actor) of linear decay.")
        learning_rate_end_fraction: float = option(
            1.0, "The learning rate falls linearly to this fraction of --learning-rate over "
                 "the run's updates (1: constant).")
        gradient_clipping: float | None = option(
            None, "Clip the gradients' global norm to this (none: no clipping).")
        action_gap: float = option(
            0.0, "Advantage learning's alpha in [0, 1): widen the gaps between actions' values "
                 "(0: plain double DQN; needs --atoms 0).")
        # C51 (Bellemare et al., 2017) on vectors: on CartPole-v1, seeds 0-29 side by side with
        # the dueling network, 29 runs of 30 kept >= 475 on 80% of their evaluations after
        # first solving it, against 20 of 30, by a rule written before seeds 10-29 ran; 1.4x the
        # wall-clock, a 4x larger int8 file (docs/learning.md, "C51"). [-100, 100] holds the
        # discounted returns of a reward of at most 1 a step at gamma 0.99 (CartPole's 0 to
        # 100, Acrobot's -100 to 0): set it to your task's.
        atoms: int = option(51, "Atoms of the categorical Q-network's support (C51); 0: a "
                                "dueling network of expected values (images: 0).")
        v_min: float = option(-100.0, "The support's lowest return.")
        v_max: float = option(100.0, "The support's highest return.")

        def __post_init__(self):
            if not 0.0 <= self.epsilon_end <= 1.0 or not 0.0 <= self.epsilon_start <= 1.0:
                raise UserError("--epsilon-start and --epsilon-end must be in [0, 1]")
            if not 0.0 <= self.action_gap < 1.0:
                raise UserError("--action-gap must be in [0, 1)")
            if self.atoms == 1 or self.atoms < 0 or not self.v_min < self.v_max:
                raise UserError("--atoms must be 0 or >= 2, and --v-min < --v-max")
            if self.atoms and self.action_gap:
                raise UserError("--action-gap needs --atoms 0 (the expected-value network)")
            if self.target_update_period < 1 or not 0.0 < self.target_update_tau <= 1.0:
                raise UserError("--target-update-period must be >= 1 and "
                                "--target-update-tau in (0, 1]")

    def build(self, observation, action, config: TrainConfig) -> BuiltAgent:
        time_step_spec, action_spec = tf_specs(observation, action)
        options = config.algo_options
        optimizer = MaskedAdam(learning_rate=learning_rate_schedule(config))
        common_args = dict(
            optimizer=optimizer,
            target_update_period=options["target_update_period"],
            target_update_tau=options["target_update_tau"],
            gradient_clipping=options["gradient_clipping"],
            gamma=config.gamma,
            train_step_counter=tf.Variable(0, dtype=tf.int64, name="train_step"),
        )
        if options["atoms"]:
            if observation.is_image:
                raise UserError("--atoms (a categorical Q-network) takes vector observations "
                                "only, for now: use --atoms 0 on images")
            net = CategoricalQNetwork(time_step_spec.observation, action["n"], config.hidden,
                                      evenly_spaced_support(options["v_min"], options["v_max"],
                                                            options["atoms"]),
                                      config.is_sparse)
            agent = C51Agent(time_step_spec, action_spec, q_network=net, **common_args)
        else:
            net = DuelingQNetwork(time_step_spec.observation, action["n"], config.hidden,
                                  config.is_sparse, observation=observation)
            agent = AdvantageLearningDdqnAgent(
                time_step_spec, action_spec, q_network=net,
                td_errors_loss_fn=common.element_wise_huber_loss,
                action_gap=options["action_gap"], **common_args)
        agent.initialize()
        # Actors get values centered over the actions (the dueling network's advantages
        # A - mean(A), C51's expected values less their mean): the argmax of Q, on the scale of
        # the gaps between actions, which int8 can resolve (see DuelingQNetwork).
        centered_values = export_model(observation, net.greedy_layers)
        # One network, exported to the actors, so the actor's sparsity applies. Forward: the
        # online network on both observations (double Q) and the target; backward: the loss.
        # (advantage learning: the target also on the first observation)
        forward_passes = 4 if options["action_gap"] else 3
        groups = [SparseGroup("q", "actor", [net], [agent._target_q_network], optimizer,
                              passes=(forward_passes, 1))]

        def losses(experience):
            # gamma given: DqnAgent.loss would otherwise discount by its _loss's default, 1.0
            return {"q": lambda: agent.loss(experience, training=True, gamma=config.gamma).loss}

        return BuiltAgent(agent, centered_values, "q_values", {"optimizer": optimizer}, net,
                          groups, losses)

    def layer_shapes(self, observation, action, hidden, options):
        if options["atoms"]:
            return {"actor": mlp_shapes(observation.size, hidden, action["n"] * options["atoms"])}
        sizes = [observation.size, *hidden[:-1]]  # the trunk's
        trunk = list(zip(sizes[:-1], sizes[1:], strict=True))
        head_in = sizes[-1]
        value = mlp_shapes(head_in, hidden[-1:], 1)
        advantage = mlp_shapes(head_in, hidden[-1:], action["n"])
        return {"actor": trunk + value + advantage}

    def exploration(self, config: TrainConfig, actor_index: int) -> ExplorationSettings:
        options = config.algo_options
        return ExplorationSettings(
            kind="epsilon_greedy",
            epsilon_start=options["epsilon_start"],
            epsilon_end=options["epsilon_end"],
            decay_steps=options["epsilon_decay_steps"],
        )


ALGORITHM = register(DQN())
