"""Run configuration: one frozen dataclass, saved as RUN_DIR/config.json with every run.

Fields left at None take the algorithm's default (see `edge_rl.agents.<algo>.DEFAULTS`) when
the run starts; the resolved config is what gets saved, so `--config RUN_DIR/config.json`
re-runs exactly that run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_rl.device.accounting import DEFAULT_CPU_WATTS
from edge_rl.device.errors import UserError
from edge_rl.sparse import DISTRIBUTIONS, TOPOLOGIES

PRECISIONS = ("int8", "fp16", "fp32")
# What actors may explore with: a policy file at one of PRECISIONS, or "tf-fp32", the
# framework baseline: TF-Agents' own fp32 policy run in TensorFlow (edge_rl.tf_policy).
TF_BASELINE = "tf-fp32"
ACTOR_PRECISIONS = (*PRECISIONS, TF_BASELINE)
# What `edge-rl export` writes: PRECISIONS, or "edgetpu", an int8 file for Coral's Edge TPU
# (int8 input and output too). Export only: actors do not explore with it.
EXPORT_PRECISIONS = (*PRECISIONS, "edgetpu")


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's loopback."""
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except (OSError, ValueError):
            return False


def check_listening(host: str, token_file: str | None, tls_cert: str | None,
                    tls_key: str | None, insecure: bool) -> None:
    """A learner's listening settings must be safe: TLS whole, and a token off loopback."""
    if (tls_cert is None) != (tls_key is None):
        raise UserError("TLS needs both --tls-cert and --tls-key")
    if token_file is None and not insecure and not is_loopback(host):
        raise UserError(f"refusing to listen on {host} without --token-file: anyone who "
                        "can reach it could feed this learner (add --insecure if intended)")


@dataclass(frozen=True)
class TrainConfig:
    # what to train
    env: str = "CartPole-v1"
    algo: str = "dqn"
    steps: int = 100_000  # env steps, summed over actors
    seed: int = 0
    out: str | None = None  # run directory; default runs/<env>-<algo>-<seed>
    target_return: float | None = None  # stop once the greedy evaluation reaches this

    # actors (ActorQ)
    actors: int = 1
    actor_precision: str = "int8"
    num_envs: int = 1  # env copies per actor, stepped with one batched inference
    batch_transitions: int = 64  # transitions per batch an actor sends
    max_in_flight: int = 4  # unacked batches per actor
    lockstep: bool = False  # one actor, exact updates per transition: repeatable per CPU kind

    # learner (None: the algorithm's default)
    hidden: tuple[int, ...] | None = None
    learning_rate: float | None = None
    batch_size: int | None = None
    gamma: float = 0.99
    updates_per_step: float | None = None  # learner updates per inserted env step
    warmup_steps: int | None = None  # transitions in replay before the first update
    replay_capacity: int | None = None  # None: 1,000,000
    nstep: int | None = None  # n-step returns
    # Each reward clipped to [-reward_clip, reward_clip] in the learner's targets (0: as the env
    # gives it; None: 1 for Atari, ALE/..., as the DQN papers train, else 0). Returns reported
    # and evaluated stay the env's own.
    reward_clip: float | None = None
    # Prioritized replay's alpha (edge_rl.replay.prioritized): samples drawn in proportion to
    # |TD error|^alpha; 0: uniform; None: the algorithm's default. Only algorithms whose
    # updates report TD errors (DQN) take it.
    replay_priority: float | None = None
    max_update_lag: int = 2_000  # updates the learner may trail before acks are delayed

    # broadcasts, evaluation, checkpoints
    publish_every: int = 1_000  # learner updates between policy broadcasts
    eval_every: int | None = None  # env steps between greedy evaluations
    eval_episodes: int = 20
    # Evaluation and export on a Polyak average of the actor network's weights, moved this
    # far towards the current ones after every update (0: the current weights; None: the
    # algorithm's default, 0 for sparse networks). The actors explore with the current
    # weights either way.
    average_tau: float | None = None
    # Early on, while it is the larger step, the average covers about this share of the
    # updates so far: it moves by k / (k + 1 + n) after update n, k = 1 / share - 1.
    average_window: float = 0.1
    checkpoint_every: int | None = None  # env steps between checkpoints
    port: int = 0  # gRPC port; 0 picks a free one

    # serving (`edge-rl learner`: actors on other machines)
    host: str = "127.0.0.1"  # address to listen on; 0.0.0.0 for every interface
    token_file: str | None = None  # file of accepted tokens, one per line
    tls_cert: str | None = None  # PEM certificate and key: TLS instead of plain TCP
    tls_key: str | None = None
    insecure: bool = False  # allow a non-loopback host without tokens
    actor_timeout: float = 15.0  # seconds of silence before an actor counts as gone

    # sparse networks (RigL on TFMOT; see edge_rl.sparse)
    sparsity: float = 0.0  # of the actor (DQN: the Q-network); 0 = dense
    critic_sparsity: float | None = None  # None: the same as sparsity
    topology: str | None = None  # rigl|set|static|prune|dense; None: rigl if sparse, else dense
    topology_interval: int = 10_000  # env steps between topology updates
    drop_fraction: float = 0.5  # zeta at the start; cosine-annealed to 0 at topology_end
    topology_end: int | None = None  # env steps; None: the end of training
    distribution: str = "erk"  # erk | uniform: how sparsity is spread over the layers
    tiny: bool = False  # a dense network with the sparse one's parameter count instead
    critic_hidden: tuple[int, ...] | None = None  # None: hidden (--tiny sets its own)

    # RLx2 value learning (--rlx2 turns on both)
    rlx2: bool = False
    delayed_nstep: bool = False  # n = 1 until nstep_delay env steps, then nstep
    nstep_delay: int | None = None  # None: 0 below 3M steps (SAC: half the run), then 300k
    dynamic_buffer: bool = False  # shrink replay when its oldest data is off-policy
    buffer_check_interval: int | None = None  # env steps between checks; None: steps / 300
    buffer_threshold: float = 0.2  # policy distance above which the oldest 10% go
    buffer_min: int | None = None  # None: steps / 30, at least 2048

    # energy and carbon (see edge_rl.energy)
    carbon: bool = True  # measure the run's energy and CO2 (--no-carbon: off)
    country: str | None = None  # ISO 3166 alpha-3 code of the grid; None: the world average
    cpu_watts: float = DEFAULT_CPU_WATTS  # per busy core, where no power counter measures it

    # the algorithm's own settings (its Options, edge_rl.algorithm): epsilon, noise, ...
    algo_options: dict[str, Any] = field(default_factory=dict)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    @property
    def is_sparse(self) -> bool:
        """Networks are wrapped for pruning (any topology but dense)."""
        return self.topology not in (None, "dense")

    @property
    def critic_layers(self) -> tuple[int, ...] | None:
        return self.critic_hidden or self.hidden

    @property
    def sparsities(self) -> dict[str, float]:
        """Target sparsity per role (see edge_rl.algorithm.SparseGroup)."""
        critic = self.sparsity if self.critic_sparsity is None else self.critic_sparsity
        return {"actor": self.sparsity, "critic": critic}

    @property
    def can_average(self) -> bool:
        """--average-tau can apply: no sparsity given (--tiny's dense match included) and no
        networks wrapped for pruning. An average of masked weights is not sparse: masks change
        as topologies evolve."""
        return not (self.is_sparse or max(self.sparsities.values()) > 0)

    def validate(self) -> None:
        """A one-line UserError for a setting no run can take. Fields still at None (the
        algorithm's defaults, not yet resolved) pass, so a run checks its flags before
        TensorFlow loads and again once resolved (edge_rl.loop.train.prepare)."""
        if self.actor_precision not in ACTOR_PRECISIONS:
            raise UserError(
                f"--actor-precision must be one of {', '.join(ACTOR_PRECISIONS)}, "
                f"not {self.actor_precision!r}"
            )
        if self.actor_precision == TF_BASELINE:  # which algorithms: see resolve_defaults
            if max(self.sparsities.values()) > 0 or self.tiny:
                raise UserError(f"--actor-precision {TF_BASELINE} is the dense baseline: "
                                "drop --sparsity / --tiny")
        check_listening(self.host, self.token_file, self.tls_cert, self.tls_key, self.insecure)
        if self.actors < 0:
            raise UserError("--actors must not be negative")
        if self.actor_timeout <= 0:
            raise UserError("--actor-timeout must be positive")
        positive = ["steps", "num_envs", "batch_transitions", "max_in_flight",
                    "publish_every", "eval_episodes", "replay_capacity", "nstep"]
        for name in positive:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be positive")
        if self.max_update_lag < 0:
            raise UserError("--max-update-lag must not be negative")
        if self.replay_priority is not None and not 0 <= self.replay_priority <= 1:
            raise UserError("--replay-priority must be in [0, 1] (0: uniform replay)")
        if self.reward_clip is not None and not self.reward_clip >= 0:
            raise UserError("--reward-clip must not be negative (0: no clipping)")
        if self.lockstep and self.actors != 1:
            raise UserError("--lockstep runs exactly one actor (drop --actors or set it to 1)")
        if not 0.0 < self.gamma <= 1.0:
            raise UserError("gamma must be in (0, 1]")
        for name, value in self.sparsities.items():
            if not 0.0 <= value < 1.0:
                flag = "--sparsity" if name == "actor" else "--critic-sparsity"
                raise UserError(f"{flag} must be in [0, 1), not {value}")
        if self.topology is not None and self.topology not in TOPOLOGIES:
            raise UserError(f"--topology must be one of {', '.join(TOPOLOGIES)}")
        if self.distribution not in DISTRIBUTIONS:
            raise UserError(f"--distribution must be one of {', '.join(DISTRIBUTIONS)}")
        if not 0.0 <= self.drop_fraction <= 1.0:
            raise UserError("--drop-fraction must be in [0, 1]")
        for name in ("topology_interval", "buffer_check_interval"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be positive")
        if self.average_tau is not None:
            if not 0.0 <= self.average_tau < 1.0:
                raise UserError("--average-tau must be in [0, 1) (0: no averaging)")
            if self.average_tau > 0 and not self.can_average:
                raise UserError("--average-tau averages dense networks only: drop --sparsity")
        if not 0.0 < self.average_window <= 0.5:  # 0.5: every update weighs the same
            raise UserError("--average-window must be in (0, 0.5]")
        if self.average_window != 0.1 and self.average_tau == 0:
            raise UserError("--average-window sets the average of --average-tau, which is 0 "
                            "here: give both")
        if self.buffer_threshold < 0:
            raise UserError("--buffer-threshold must not be negative")
        if not (math.isfinite(self.cpu_watts) and self.cpu_watts >= 0):
            raise UserError("--cpu-watts must be a number >= 0")

    def to_dict(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        for name in ("hidden", "critic_hidden"):
            if getattr(self, name) is not None:
                doc[name] = list(getattr(self, name))
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(doc) - names)
        if unknown:
            raise UserError(f"unknown config keys: {', '.join(unknown)}")
        doc = dict(doc)
        if "replay_priority" not in doc and doc.get("nstep") is not None:
            doc["replay_priority"] = 0.0  # resolved before prioritized replay: it ran uniform
        if "average_tau" not in doc and doc.get("nstep") is not None:
            doc["average_tau"] = 0.0  # resolved before the average: the current weights
        options = doc.get("algo_options") or {}
        if doc.get("algo", "dqn") == "dqn" and doc.get("nstep") is not None and options \
                and "atoms" not in options:  # resolved before C51: its network was dueling
            doc["algo_options"] = {**options, "atoms": 0}
        for name in ("hidden", "critic_hidden"):
            if doc.get(name) is not None:
                doc[name] = tuple(int(h) for h in doc[name])
        return cls(**doc)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise UserError(f"no config file at {path}")
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise UserError(f"{path} is not valid JSON: {err}") from None
        return cls.from_dict(doc)

    @property
    def run_dir(self) -> Path:
        if self.out:
            return Path(self.out)
        safe_env = self.env.replace("/", "_").replace(":", "_")
        return Path("runs") / f"{safe_env}-{self.algo}-{self.seed}"
