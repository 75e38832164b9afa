"""The algorithm without edge-rl's loop: one process, one env step, then the updates it allows.

    python tools/sync_reference.py --algo td3 --env HalfCheetah-v5 [--steps 100000]
        [--seed 0] [--out DIR] [--eval-every N] [--eval-episodes N] [--quick]

What it shares with `edge-rl train`: the agent, its networks and hyperparameters (edge-rl's
defaults for the algorithm, resolved by the same code), the replay (n-step targets included),
the exploration (the same schedule and noise) and the greedy evaluation (a policy file of the
current weights, the same episode seeds). What it leaves out is the loop: no actor process, no
gRPC, no quantized policy (the env is stepped with the fp32 network of the newest update) and
no staleness (after each env step, the updates that updates_per_step allows run at once).
So `edge-rl train` against this, on one machine, separates the price of edge-rl's loop from
the algorithm's own behaviour (see docs/learning.md).

Writes OUT/summary.json with the fields the learning-quality driver reads (evaluations,
wall_clock_seconds, stability). Not resumable: an interrupted run starts again.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import edge_rl  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
from edge_rl.agents import get_algorithm
from edge_rl.algorithm import check_action_space, resolve_defaults
from edge_rl.config import TrainConfig
from edge_rl.device.envs import describe_env
from edge_rl.device.evaluate import evaluate
from edge_rl.device.exploration import Explorer
from edge_rl.device.outputs import greedy_actions
from edge_rl.device.policy import Policy
from edge_rl.device.rollout import Rollout
from edge_rl.replay import make_replay, train_from_replay
from edge_rl.runs.best_policy import random_observations
from edge_rl.runs.stability import late_run_stability

log = logging.getLogger("sync_reference")

CALIBRATION_ROWS = 500


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="dqn")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="[default: runs/sync-ENV-ALGO-SEED]")
    parser.add_argument("--eval-every", type=int, help="[default: the algorithm's]")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--config", type=Path, help="A config.json (whole or in part) whose "
                        "hyperparameters to use instead of the algorithm's defaults.")
    parser.add_argument("--quick", action="store_true",
                        help="A few hundred steps, to check that the script runs.")
    return parser.parse_args(argv)


def reference_config(args: argparse.Namespace) -> TrainConfig:
    """edge-rl's config for this algorithm and env, its defaults resolved as `train` does."""
    base = TrainConfig.load(args.config) if args.config else TrainConfig()
    config = base.replace(env=args.env, algo=args.algo, steps=args.steps, seed=args.seed,
                          eval_every=args.eval_every or base.eval_every,
                          eval_episodes=args.eval_episodes, carbon=False)
    if args.quick:
        config = config.replace(steps=600, warmup_steps=200, eval_every=300, eval_episodes=2,
                                batch_size=32)
    return config


def run(args: argparse.Namespace) -> dict:
    from edge_rl.loop.learner import Learner  # imports TensorFlow
    from edge_rl.tf_setup import tf

    factory = get_algorithm(args.algo)
    observation, action = describe_env(args.env)
    check_action_space(factory, args.env, action)
    config = resolve_defaults(factory, reference_config(args), observation, action)
    config.validate()
    out = args.out or Path("runs") / f"sync-{args.env.replace('/', '-')}-{args.algo}-{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    config.save(out / "config.json")

    tf.keras.utils.set_random_seed(config.seed)
    learner = Learner(factory, config, observation, action)
    discrete = action["kind"] == "discrete"
    replay = make_replay(config, observation, action)
    low = high = None
    if not discrete:
        low = np.asarray(action["low"], np.float32)
        high = np.asarray(action["high"], np.float32)
    action_example = np.zeros((), np.int64) if discrete else np.zeros(action["shape"], np.float32)
    rollout = Rollout(config.env, 1, config.seed, 1, action_example)
    explorer = Explorer(factory.exploration(config, 0), learner.metadata("fp32", 0, config.env),
                        np.random.default_rng(config.seed))
    model = learner.built.export_model

    @tf.function
    def network_outputs(observations):
        outputs = model(observations, training=False)
        if isinstance(outputs, (list, tuple)):  # two outputs (squashed_gaussian), as Policy does
            outputs = tf.concat(outputs, axis=-1)
        return outputs

    fallback = random_observations(config.env, CALIBRATION_ROWS, config.seed)
    evaluations: list[dict] = []
    version = 0
    start = time.perf_counter()  # as edge-rl's wall-clock: from the built agent on
    bar = tqdm(total=config.steps, unit="step", dynamic_ncols=True, disable=None,
               desc=f"sync {config.algo} {config.env}")
    for env_steps in range(1, config.steps + 1):
        outputs = network_outputs(rollout.obs).numpy()
        greedy = greedy_actions(learner.built.output_kind, outputs, low, high)
        actions, greedy = explorer(outputs, greedy)
        for batch in rollout.step(actions, greedy):
            replay.insert(0, batch)
        due = math.floor(max(0, env_steps - config.warmup_steps) * config.updates_per_step)
        if due > learner.updates and len(replay):
            train_from_replay(learner, replay, due - learner.updates, config.batch_size,
                              env_steps / config.steps)
        bar.update(1)
        if env_steps % config.eval_every == 0 or env_steps == config.steps:
            version += 1
            rows = replay.recent_observations(CALIBRATION_ROWS)
            with learner.averaged_weights():  # with --average-tau, as edge-rl evaluates
                policy_file, _ = learner.publish("fp32", rows if len(rows) else fallback, version)
            result = evaluate(Policy(policy_file), config.env, episodes=config.eval_episodes)
            evaluations.append({"env_steps": env_steps, "mean": result.mean,
                                "wall_seconds": round(time.perf_counter() - start, 2)})
            bar.set_postfix(eval=f"{result.mean:.1f}")
            log.info("eval at %d steps: return %.1f ± %.1f", env_steps, result.mean, result.std)
    bar.close()
    rollout.close()
    summary = {
        "loop": "sync-reference",
        "algo": config.algo,
        "env": config.env,
        "seed": config.seed,
        "precision": "fp32",  # the env is stepped with the fp32 network itself
        "env_steps": config.steps,
        "updates": learner.updates,
        "wall_clock_seconds": round(time.perf_counter() - start, 2),
        "evaluations": evaluations,
        "stability": late_run_stability([e["mean"] for e in evaluations]),
        "stop_reason": f"reached {config.steps} env steps",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    summary = run(parse_args(argv))
    print(json.dumps({k: v for k, v in summary.items() if k != "evaluations"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
