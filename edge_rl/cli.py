"""The `edge-rl` command line. TensorFlow is imported only inside the commands that need it.

User mistakes (bad flags, unknown envs, missing or corrupt files) print one line and exit 2.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
from tqdm import tqdm

from edge_rl.config import PRECISIONS, TrainConfig
from edge_rl.device.errors import UserError
from edge_rl.sparse import DISTRIBUTIONS, TOPOLOGIES

# Flags of `edge-rl train` that map one-to-one onto TrainConfig fields.
TRAIN_FIELDS = (
    "env", "algo", "steps", "actors", "actor_precision", "publish_every", "seed", "out",
    "target_return", "lockstep", "hidden", "learning_rate", "batch_size", "updates_per_step",
    "warmup_steps", "replay_capacity", "nstep", "num_envs", "batch_transitions",
    "max_in_flight", "eval_every", "eval_episodes", "checkpoint_every", "port", "gamma",
    "sparsity", "critic_sparsity", "topology", "topology_interval", "drop_fraction",
    "topology_end", "distribution", "tiny", "critic_hidden", "rlx2", "delayed_nstep",
    "nstep_delay", "dynamic_buffer", "buffer_check_interval", "buffer_threshold", "buffer_min",
)


class TqdmHandler(logging.Handler):
    """Log lines printed above the progress bar instead of through it."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


def setup_logging(verbose: bool) -> None:
    handler = TqdmHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("absl", "tensorflow", "h5py"):
        logging.getLogger(noisy).setLevel(logging.ERROR)


def parse_hidden(ctx, param, value):
    if value is None:
        return None
    try:
        sizes = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter("expected comma-separated layer sizes, e.g. 256,256") from None
    if not sizes or min(sizes) <= 0:
        raise click.BadParameter("layer sizes must be positive")
    return sizes


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edge-rl")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """edge-rl: train RL policies with int8 actors and sparse networks; run them on boards."""
    setup_logging(verbose)


@cli.command()
@click.option("--env", help="Gymnasium env id, or package.module:EnvId.  [default: CartPole-v1]")
@click.option("--algo", help="dqn, td3 or sac.  [default: dqn]")
@click.option("--steps", type=int, help="Env steps to train for.  [default: 100000]")
@click.option("--actors", type=int, help="Local actor processes.  [default: 1]")
@click.option("--actor-precision", type=click.Choice(PRECISIONS),
              help="Precision of the policy actors explore with.  [default: int8]")
@click.option("--publish-every", type=int,
              help="Learner updates between broadcasts.  [default: 1000]")
@click.option("--seed", type=int, help="Random seed.  [default: 0]")
@click.option("--out", help="Run directory.  [default: runs/ENV-ALGO-SEED]")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint.")
@click.option("--config", "config_file", type=click.Path(),
              help="A saved config.json to re-run; other flags override it.")
@click.option("--target-return", type=float, help="Stop once the greedy evaluation reaches this.")
@click.option("--lockstep", is_flag=True, default=None,
              help="One actor, exact updates per transition: reproducible for a seed.")
@click.option("--hidden", callback=parse_hidden, help="Hidden layer sizes, e.g. 256,256.")
@click.option("--learning-rate", type=float)
@click.option("--batch-size", type=int, help="Learner minibatch size.")
@click.option("--updates-per-step", type=float, help="Learner updates per env step inserted.")
@click.option("--warmup-steps", type=int, help="Env steps before the first update.")
@click.option("--replay-capacity", type=int)
@click.option("--nstep", type=int,
              help="n-step returns.  [default: 3 for dqn and --delayed-nstep, else 1]")
@click.option("--gamma", type=float, help="Discount.  [default: 0.99]")
@click.option("--num-envs", type=int, help="Env copies per actor.  [default: 1]")
@click.option("--batch-transitions", type=int, help="Transitions per batch sent. [default: 64]")
@click.option("--max-in-flight", type=int, help="Unacked batches per actor.  [default: 4]")
@click.option("--eval-every", type=int, help="Env steps between greedy evaluations.")
@click.option("--eval-episodes", type=int, help="Episodes per evaluation.  [default: 20]")
@click.option("--checkpoint-every", type=int, help="Env steps between checkpoints.")
@click.option("--port", type=int, help="gRPC port on 127.0.0.1 (0: any free).  [default: 0]")
@click.option("--sparsity", type=float,
              help="Sparse networks: the actor's (DQN: the Q-network's) sparsity, e.g. 0.9.")
@click.option("--critic-sparsity", type=float, help="The critics' sparsity.  [default: --sparsity]")
@click.option("--topology", type=click.Choice(TOPOLOGIES),
              help="How masks evolve: RigL, SET, a fixed random mask, gradual magnitude pruning "
                   "(TFMOT), or dense.  [default: rigl with a sparsity, else dense]")
@click.option("--topology-interval", type=int,
              help="Env steps between topology updates (prune: a tenth).  [default: 10000]")
@click.option("--drop-fraction", type=float,
              help="Fraction of active weights replaced at first; cosine to 0.  [default: 0.5]")
@click.option("--topology-end", type=int,
              help="Env step of the last topology update.  [default: --steps]")
@click.option("--distribution", type=click.Choice(DISTRIBUTIONS),
              help="How sparsity is spread over layers.  [default: erk]")
@click.option("--tiny", is_flag=True, default=None,
              help="Train a dense network with the sparse one's parameter count instead.")
@click.option("--critic-hidden", callback=parse_hidden,
              help="Critic layer sizes.  [default: --hidden]")
@click.option("--rlx2", is_flag=True, default=None,
              help="RLx2: --delayed-nstep and --dynamic-buffer.")
@click.option("--delayed-nstep", is_flag=True, default=None,
              help="1-step TD targets until --nstep-delay, then --nstep (default 3).")
@click.option("--nstep-delay", type=int,
              help="Env steps of 1-step targets.  [default: 10% of --steps]")
@click.option("--dynamic-buffer", is_flag=True, default=None,
              help="Drop the oldest 10% of replay when it is too off-policy.")
@click.option("--buffer-check-interval", type=int,
              help="Env steps between policy-distance checks.  [default: 10000]")
@click.option("--buffer-threshold", type=float,
              help="Policy distance above which replay shrinks.  [default: 0.2]")
@click.option("--buffer-min", type=int,
              help="Replay never shrinks below this.  [default: --replay-capacity / 10]")
def train(resume: bool, config_file: str | None, **flags) -> None:
    """Train a policy: a TF-Agents learner with actors exploring over gRPC."""
    given = {k: v for k, v in flags.items() if v is not None}
    if config_file:
        base = TrainConfig.load(config_file)
    elif resume:
        if "out" not in given:
            raise UserError("--resume needs --out RUN_DIR (the run to continue)")
        base = TrainConfig.load(Path(given["out"]) / "config.json")
    else:
        base = TrainConfig()
    config = base.replace(**given)
    from edge_rl.train import run_training

    summary = run_training(config, resume=resume)
    best = summary["best_return"]
    click.echo(json.dumps(summary, indent=2))
    if best:
        click.echo(
            f"best greedy return {best['mean']:.1f} ± {best['std']:.1f} "
            f"({best['episodes']} episodes); policy: {summary['policy_file']}"
        )


@cli.command()
@click.argument("run_dir", type=click.Path())
@click.option("--int8", "precision", flag_value="int8", help="Full-integer int8 (default).")
@click.option("--fp16", "precision", flag_value="fp16", help="float16 weights.")
@click.option("--fp32", "precision", flag_value="fp32", help="float32.")
@click.option("-o", "--output", type=click.Path(),
              help="Output file.  [default: RUN_DIR/policy-PRECISION.tflite]")
@click.option("--verify-episodes", type=int, default=5, show_default=True,
              help="Greedy episodes to compare the fp32 and exported policies on.")
def export(run_dir: str, precision: str | None, output: str | None, verify_episodes: int) -> None:
    """Export the best-evaluated actor network of a run as a TFLite policy file."""
    from edge_rl.export import export_run

    report = export_run(Path(run_dir), precision or "int8", output, verify_episodes)
    for line in report:
        click.echo(line)


@cli.command(name="eval")
@click.argument("policy_file", type=click.Path())
@click.option("--env", help="Env id.  [default: the one in the policy's metadata]")
@click.option("--episodes", type=int, default=20, show_default=True)
@click.option("--seed", type=int, default=1_000_000, show_default=True,
              help="Episode i resets with seed + i.")
@click.option("--runtime", type=click.Choice(["ai_edge_litert", "tflite_runtime"]),
              help="Force a TFLite runtime.  [default: ai_edge_litert if installed]")
def eval_command(policy_file: str, env: str | None, episodes: int, seed: int,
                 runtime: str | None) -> None:
    """Run a policy file greedily (device runtime only, no TensorFlow)."""
    from edge_rl.device.evaluate import evaluate
    from edge_rl.device.policy import load_policy
    from edge_rl.device.runtime import load_runtime

    if episodes <= 0:
        raise UserError("--episodes must be positive")
    policy = load_policy(policy_file, runtime=load_runtime(runtime))
    meta = policy.metadata
    result = evaluate(policy, env, episodes=episodes, seed=seed)
    click.echo(f"policy: {meta.algo} for {meta.env_id}, {meta.precision}, "
               f"version {meta.policy_version}, trained {meta.train_step} updates")
    click.echo(f"runtime: {policy.runtime}")
    click.echo(f"return: {result.mean:.2f} ± {result.std:.2f} over {episodes} episodes")
    click.echo(f"median inference latency: {result.median_latency_us:.1f} µs")


@cli.command()
@click.option("--learner", required=True, help="HOST:PORT of the learner's gRPC service.")
@click.option("--actor-id", default=None, help="Stable id of this actor.  [default: hostname-pid]")
@click.option("--max-steps", type=int, help="Stop after this many env steps.")
@click.option("--parent-pid", type=int, hidden=True)
def actor(learner: str, actor_id: str | None, max_steps: int | None,
          parent_pid: int | None) -> None:
    """Run one actor against a learner (device runtime only, no TensorFlow)."""
    import os
    import socket

    from edge_rl.device.actor import die_with_parent, run_actor

    if parent_pid is not None:
        die_with_parent(parent_pid)
    try:
        run_actor(learner, actor_id or f"{socket.gethostname()}-{os.getpid()}",
                  max_steps=max_steps)
    except KeyboardInterrupt:
        pass


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.exceptions.Abort:
        click.echo("edge-rl: aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        click.echo(f"edge-rl: error: {err.format_message()}", err=True)
        sys.exit(2)
    except UserError as err:
        click.echo(f"edge-rl: error: {err}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
