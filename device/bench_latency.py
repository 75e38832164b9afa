"""`edge-rl bench latency`: how long a policy file takes to answer one observation on this
machine, through the device runtime (edge_rl.device.policy), as an actor with one env calls it.

Each call is `Policy.outputs` on a batch of one: the observation set into the interpreter
(quantized first for a fully integer file), `invoke`, the outputs read back as float32.
Observations are random rows of the policy's observation shape (normal for float vectors,
0..value_max for frames and planes): a dense network's time does not depend on the values.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from edge_rl.device.errors import UserError
from edge_rl.device.policy import Policy, load_policy
from edge_rl.device.runtime import load_runtime


@dataclass(frozen=True)
class Latency:
    """Batch-1 inference times of one policy file, in microseconds."""

    policy: str
    bytes: int
    env_id: str
    algo: str
    precision: str
    runtime: str  # module and version, e.g. "ai_edge_litert 1.4.0"
    delegate: str | None
    threads: int
    invokes: int
    warmup: int
    median_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    min_us: float
    max_us: float

    def as_dict(self) -> dict:
        return asdict(self)


def time_invokes(policy: Policy, invokes: int, warmup: int, seed: int = 0) -> np.ndarray:
    """Seconds of each of `invokes` batch-1 calls of `policy.outputs`, after `warmup` untimed
    ones."""
    shape = (min(invokes, 256), 1, *policy.metadata.observation_shape)
    kind = policy.observation_kind
    rng = np.random.default_rng(seed)
    if kind.value_max is None:
        rows = kind.as_stored(rng.standard_normal(shape))
    else:
        rows = kind.as_stored(rng.integers(0, int(kind.value_max) + 1, shape))
    for i in range(warmup):
        policy.outputs(rows[i % len(rows)])
    seconds = np.empty(invokes)
    clock = time.perf_counter_ns
    for i in range(invokes):
        start = clock()
        policy.outputs(rows[i % len(rows)])
        seconds[i] = clock() - start
    return seconds / 1e9


def measure_latency(path: str | Path, threads: int = 1, invokes: int = 1000, warmup: int = 100,
                    runtime: str | None = None, delegate: str | None = None) -> Latency:
    """Load the policy file at `path` with `threads` interpreter threads and time it."""
    if threads < 1:
        raise UserError("--threads must be at least 1")
    if invokes < 1 or warmup < 0:
        raise UserError("--invokes must be positive and --warmup not negative")
    policy = load_policy(path, runtime=load_runtime(runtime), num_threads=threads,
                         delegate=delegate)
    micro = time_invokes(policy, invokes, warmup) * 1e6
    meta = policy.metadata
    return Latency(
        policy=str(path), bytes=Path(path).stat().st_size, env_id=meta.env_id, algo=meta.algo,
        precision=meta.precision, runtime=str(policy.runtime), delegate=delegate,
        threads=threads, invokes=invokes, warmup=warmup,
        median_us=float(np.median(micro)), p90_us=float(np.quantile(micro, 0.9)),
        p99_us=float(np.quantile(micro, 0.99)), mean_us=float(micro.mean()),
        min_us=float(micro.min()), max_us=float(micro.max()),
    )
