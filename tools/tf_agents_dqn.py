"""TF-Agents' own standard DQN loop on CartPole-v1: the baseline `edge-rl train` is timed against.

    python tools/tf_agents_dqn.py --seed 0 [--json PATH] [--quick]

The loop of TF-Agents' DQN tutorial: a DynamicStepDriver collects one env step per
iteration with the agent's epsilon-greedy collect policy into a TFUniformReplayBuffer, and
each iteration runs one `agent.train` on a minibatch from the buffer's dataset (driver run
and train step both in `common.function`). What it shares with `edge-rl train`'s DQN
defaults with `--atoms 0 --average-tau 0` (its network on vectors is C51's since 2026-12-04, and
it evaluates a weight average since 2026-12-05): the same network
(edge_rl's DuelingQNetwork, DQN's default width: 256x256 since 2026-12-06, 64x64 before),
DdqnAgent with Huber loss,
Adam 1e-3, gamma 0.99, 3-step targets, Polyak target updates (tau 0.01 every update),
batch 64, 1000 warm-up steps of uniform random actions, epsilon 1 -> edge-rl's epsilon_end
(0.05 since 2026-11-24, 0.02 before) over 10k steps, one update per env step (edge-rl's
default replay is prioritized since 2026-11-25; this one stays uniform, as the tutorial's);
and the
evaluation protocol: every 2500 env steps, 20 greedy
episodes (TF-Agents' greedy policy, through PyTFEagerPolicy with tf.function) on a separate
env, stopping at a mean return of --target-return (475). Wall-clock counts everything from
the start of main() (not the imports), evaluations included; the time spent evaluating is
reported too. The shared settings are read from edge-rl's DQN (its defaults and Options) and
TrainConfig. --quick: 1500 env steps, 2 greedy episodes every 250 (CI runs it).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import edge_rl  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
from edge_rl.tf_setup import tf

# isort: split
from tf_agents.agents.dqn import dqn_agent
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import suite_gym, tf_py_environment
from tf_agents.policies import py_tf_eager_policy, random_tf_policy
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.utils import common

from edge_rl.agents.dqn import ALGORITHM as EDGE_RL_DQN
from edge_rl.agents.parts.networks import DuelingQNetwork
from edge_rl.config import TrainConfig

DEFAULTS = EDGE_RL_DQN.defaults


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100_000, help="env steps at most")
    parser.add_argument("--target-return", type=float, default=475.0)
    parser.add_argument("--eval-every", type=int, default=2_500)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=DEFAULTS["learning_rate"])
    parser.add_argument("--json", metavar="PATH", help="write the result here as JSON")
    parser.add_argument("--quick", action="store_true",
                        help="1500 env steps, 2 greedy episodes every 250 (a check that it runs)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.eval_every, args.eval_episodes = 1_500, 250, 2
    return args


def evaluate(policy, env, episodes: int) -> float:
    """Mean return of `policy` (a py policy) over `episodes` episodes of the py env."""
    returns = []
    for _ in range(episodes):
        time_step = env.reset()
        total = 0.0
        while not time_step.is_last():
            time_step = env.step(policy.action(time_step).action)
            total += float(time_step.reward)
        returns.append(total)
    return float(np.mean(returns))




def main() -> None:
    args = parse_args()
    start = time.perf_counter()
    tf.keras.utils.set_random_seed(args.seed)
    train_env = tf_py_environment.TFPyEnvironment(suite_gym.load("CartPole-v1"))
    eval_env = suite_gym.load("CartPole-v1")
    train_env.pyenv.envs[0].seed(args.seed)
    eval_env.seed(args.seed + 1_000_000)

    nstep, batch_size = DEFAULTS["nstep"], DEFAULTS["batch_size"]
    warmup_steps = DEFAULTS["warmup_steps"]
    train_step = tf.Variable(0, dtype=tf.int64)
    options = EDGE_RL_DQN.Options()  # edge-rl's epsilon schedule and target updates
    epsilon = tf.keras.optimizers.schedules.PolynomialDecay(
        options.epsilon_start, options.epsilon_decay_steps, options.epsilon_end)
    agent = dqn_agent.DdqnAgent(
        train_env.time_step_spec(),
        train_env.action_spec(),
        q_network=DuelingQNetwork(train_env.observation_spec(), 2, DEFAULTS["hidden"]),
        optimizer=tf.keras.optimizers.Adam(learning_rate=args.learning_rate),
        epsilon_greedy=lambda: epsilon(train_step),
        n_step_update=nstep,
        target_update_tau=options.target_update_tau,
        target_update_period=options.target_update_period,
        td_errors_loss_fn=common.element_wise_huber_loss,
        gamma=TrainConfig.gamma,
        train_step_counter=train_step,
    )
    agent.initialize()
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        data_spec=agent.collect_data_spec, batch_size=train_env.batch_size, max_length=100_000
    )
    warmup = dynamic_step_driver.DynamicStepDriver(
        train_env, random_tf_policy.RandomTFPolicy(train_env.time_step_spec(),
                                                   train_env.action_spec()),
        observers=[replay_buffer.add_batch], num_steps=warmup_steps,
    )
    warmup.run()
    collect = dynamic_step_driver.DynamicStepDriver(
        train_env, agent.collect_policy, observers=[replay_buffer.add_batch], num_steps=1
    )
    collect_run = common.function(collect.run)
    train = common.function(agent.train)
    dataset = replay_buffer.as_dataset(
        num_parallel_calls=3, sample_batch_size=batch_size, num_steps=nstep + 1
    ).prefetch(3)
    batches = iter(dataset)
    greedy = py_tf_eager_policy.PyTFEagerPolicy(agent.policy, use_tf_function=True)

    env_steps, eval_seconds, evaluations = warmup_steps, 0.0, []
    time_step, policy_state = None, agent.collect_policy.get_initial_state(train_env.batch_size)
    solved_at = None
    while env_steps < args.steps:
        time_step, policy_state = collect_run(time_step=time_step, policy_state=policy_state)
        env_steps += 1
        experience, _ = next(batches)
        train(experience)
        if env_steps % args.eval_every == 0:
            eval_start = time.perf_counter()
            mean = evaluate(greedy, eval_env, args.eval_episodes)
            eval_seconds += time.perf_counter() - eval_start
            evaluations.append({"env_steps": env_steps, "mean": mean,
                                "wall_seconds": round(time.perf_counter() - start, 2)})
            print(f"{env_steps} steps: greedy return {mean:.1f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
            if mean >= args.target_return:
                solved_at = env_steps
                break
    result = {
        "loop": "tf-agents",
        "seed": args.seed,
        "solved": solved_at is not None,
        "env_steps": env_steps,
        "wall_clock_seconds": round(time.perf_counter() - start, 2),
        "eval_seconds": round(eval_seconds, 2),
        "evaluations": evaluations,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "evaluations"}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
