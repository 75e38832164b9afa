"""The run flags `edge-rl train` and `edge-rl learner` share, and how they map onto a
TrainConfig (a saved config, the flags given, the algorithm's own flags)."""

from __future__ import annotations

from pathlib import Path

import click

from edge_rl.config import ACTOR_PRECISIONS, TrainConfig
from edge_rl.device.accounting import DEFAULT_CPU_WATTS
from edge_rl.device.errors import UserError
from edge_rl.sparse import DISTRIBUTIONS, TOPOLOGIES


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


# The run flags `edge-rl train` and `edge-rl learner` share (each maps onto TrainConfig).
RUN_OPTIONS = [
    click.option("--env",
                 help="Gymnasium env id, or package.module:EnvId.  [default: CartPole-v1]"),
    click.option("--algo", help="dqn, td3, sac or d4pg, or MODULE:NAME for an algorithm that "
                 "module registers (edge_rl.agents.register).  [default: dqn]"),
    click.option("--steps", type=int, help="Env steps to train for.  [default: 100000]"),
    click.option("--actors", type=int,
                 help="Local actor processes.  [default: 1; learner: 0]"),
    click.option("--actor-precision", type=click.Choice(ACTOR_PRECISIONS),
                 help="Precision of the policy actors explore with; tf-fp32: TF-Agents' own "
                      "fp32 policy in TensorFlow (the framework baseline).  [default: int8]"),
    click.option("--publish-every", type=int,
                 help="Learner updates between broadcasts.  [default: 1000]"),
    click.option("--max-update-lag", type=int,
                 help="Updates the learner may trail the actors before their batches wait "
                      "for acks.  [default: 2000]"),
    click.option("--seed", type=int, help="Random seed.  [default: 0]"),
    click.option("--out", help="Run directory.  [default: runs/ENV-ALGO-SEED]"),
    click.option("--target-return", type=float,
                 help="Stop once the greedy evaluation reaches this."),
    click.option("--lockstep", is_flag=True, default=None,
                 help="One actor, exact updates per transition: the same run for a seed "
                      "on one kind of CPU."),
    click.option("--hidden", callback=parse_hidden, help="Hidden layer sizes, e.g. 256,256."),
    click.option("--learning-rate", type=float),
    click.option("--batch-size", type=int, help="Learner minibatch size."),
    click.option("--updates-per-step", type=float, help="Learner updates per env step inserted."),
    click.option("--warmup-steps", type=int, help="Env steps before the first update."),
    click.option("--replay-capacity", type=int,
                 help="Transitions replay holds.  [default: 1000000]"),
    click.option("--nstep", type=int,
                 help="n-step returns.  [default: 3 for dqn and --delayed-nstep, 5 for d4pg, "
                      "else 1]"),
    click.option("--gamma", type=float, help="Discount.  [default: 0.99]"),
    click.option("--reward-clip", type=float,
                 help="Clip each reward to [-X, X] in the learner's targets (0: off).  "
                      "[default: 1 for ALE/ envs, else 0]"),
    click.option("--replay-priority", type=float,
                 help="Prioritized replay's alpha: samples drawn by |TD error|^alpha (0: "
                      "uniform; dqn only).  [default: 0.6 for dqn on vectors, else 0]"),
    click.option("--num-envs", type=int, help="Env copies per actor.  [default: 1]"),
    click.option("--batch-transitions", type=int, help="Transitions per batch sent. [default: 64]"),
    click.option("--max-in-flight", type=int, help="Unacked batches per actor.  [default: 4]"),
    click.option("--eval-every", type=int, help="Env steps between greedy evaluations."),
    click.option("--eval-episodes", type=int, help="Episodes per evaluation.  [default: 20]"),
    click.option("--average-tau", type=float,
                 help="Evaluate and export a Polyak average of the weights, moved this far "
                      "towards them after each update (0: the current weights).  [default: "
                      "0.0002 for dqn on dense vector networks, else 0]"),
    click.option("--average-window", type=float,
                 help="With --average-tau: early on, the share of the updates so far the "
                      "average covers, until tau is the larger step.  [default: 0.1]"),
    click.option("--checkpoint-every", type=int, help="Env steps between checkpoints."),
    click.option("--port", type=int, help="gRPC port (0: any free).  [default: 0]"),
    click.option("--sparsity", type=float,
                 help="Sparse networks: the actor's (DQN: the Q-network's) sparsity, e.g. 0.9."),
    click.option("--critic-sparsity", type=float,
                 help="The critics' sparsity.  [default: --sparsity]"),
    click.option("--topology", type=click.Choice(TOPOLOGIES),
                 help="How masks evolve: RigL, SET, a fixed random mask, gradual magnitude pruning "
                      "(TFMOT), or dense.  [default: rigl with a sparsity, else dense]"),
    click.option("--topology-interval", type=int,
                 help="Env steps between topology updates (prune: a tenth).  [default: 10000]"),
    click.option("--drop-fraction", type=float,
                 help="Fraction of active weights replaced at first; cosine to 0.  [default: 0.5]"),
    click.option("--topology-end", type=int,
                 help="Env step of the last topology update.  [default: --steps]"),
    click.option("--distribution", type=click.Choice(DISTRIBUTIONS),
                 help="How sparsity is spread over layers.  [default: erk]"),
    click.option("--tiny", is_flag=True, default=None,
                 help="Train a dense network with the sparse one's parameter count instead."),
    click.option("--critic-hidden", callback=parse_hidden,
                 help="Critic layer sizes.  [default: --hidden]"),
    click.option("--rlx2", is_flag=True, default=None,
                 help="RLx2: --delayed-nstep and --dynamic-buffer."),
    click.option("--delayed-nstep", is_flag=True, default=None,
                 help="1-step TD targets until --nstep-delay, then --nstep (default 3)."),
    click.option("--nstep-delay", type=int,
                 help="Env steps of 1-step targets.  [default: 0 (SAC: half of --steps); "
                      "300000 (RLx2's) from --steps 3000000]"),
    click.option("--dynamic-buffer", is_flag=True, default=None,
                 help="Drop the oldest 10% of replay when it is too off-policy."),
    click.option("--buffer-check-interval", type=int,
                 help="Env steps between policy-distance checks.  [default: a tenth of "
                      "--buffer-min]"),
    click.option("--buffer-threshold", type=float,
                 help="Policy distance above which the oldest 10% of replay go.  "
                      "[default: 0.2]"),
    click.option("--buffer-min", type=int,
                 help="Nothing is dropped from a replay this small.  [default: 100000, at "
                      "most --steps / 3]"),
    click.option("--carbon/--no-carbon", default=None,
                 help="Measure the run's energy and CO2.  [default: on]"),
    click.option("--country",
                 help="ISO 3166 alpha-3 code (FRA, USA, ...) of the grid whose carbon "
                      "intensity applies.  [default: the world average]"),
    click.option("--cpu-watts", type=float,
                 help="Power per busy core where no power counter measures it.  "
                      f"[default: {DEFAULT_CPU_WATTS:g}]"),
]
# An algorithm's own settings (D4PG's --atoms, DQN's --epsilon-end, ...) are declared by the
# algorithm (its Options); click passes them on unparsed, and run_config reads them.
ALGORITHM_FLAGS = {"ignore_unknown_options": True, "allow_extra_args": True}
ALGORITHM_EPILOG = ("Each algorithm's own options (D4PG's --atoms, DQN's --epsilon-end, ...) "
                    "go with these: `edge-rl algorithms` lists them.")
RESUME_OPTION = click.option("--resume", is_flag=True,
                             help="Continue the run in --out from its last checkpoint.")
CONFIG_OPTION = click.option("--config", "config_file", type=click.Path(),
                 help="A saved config.json to re-run; other flags override it.")


def run_options(command):
    """Apply --resume, --config and RUN_OPTIONS to a command."""
    for option in reversed([RESUME_OPTION, CONFIG_OPTION, *RUN_OPTIONS]):
        command = option(command)
    return command


def run_config(resume: bool, config_file: str | None, flags: dict,
               algorithm_args: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """The run's config: a saved one (--config, or the run being resumed) plus the flags, and
    the algorithm's own flags (`algorithm_args`, read by the algorithm's Options)."""
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
    if algorithm_args:
        from edge_rl.agents import get_algorithm
        from edge_rl.algorithm import parse_option_flags

        options = parse_option_flags(get_algorithm(config.algo), list(algorithm_args))
        config = config.replace(algo_options={**config.algo_options, **options})
    return config
