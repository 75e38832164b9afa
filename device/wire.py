"""The wire protocol's helpers: numpy <-> proto tensors, batch validation, policy chunks.

The messages themselves are in wire.proto (stubs: wire_pb2.py, wire_pb2_grpc.py, generated
with grpcio-tools 1.62 by tools/gen_proto.sh).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from edge_rl.device import wire_pb2
from edge_rl.device.accounting import ACTOR_PARTS
from edge_rl.device.observations import VECTOR, ObservationKind

PROTOCOL_VERSION = 1
POLICY_CHUNK_BYTES = 1 << 20  # 1 MiB: well under gRPC's default 4 MB message limit
MAX_BATCH_BYTES = 64 << 20


class BatchError(ValueError):
    """A batch that breaks the contract (shapes, dtypes, non-finite values)."""


class BatchTooLarge(BatchError):
    """A batch over MAX_BATCH_BYTES."""


def to_tensor(array: np.ndarray) -> wire_pb2.Tensor:
    array = np.ascontiguousarray(array)
    return wire_pb2.Tensor(dtype=array.dtype.name, shape=array.shape, data=array.tobytes())


# The dtypes a batch may carry; anything else (object, strings, structs) is refused unread.
WIRE_DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32", "uint8", "bool"})


def from_tensor(tensor: wire_pb2.Tensor, name: str) -> np.ndarray:
    if tensor.dtype not in WIRE_DTYPES:
        raise BatchError(f"{name}: dtype {tensor.dtype[:32]!r} is not one of "
                         f"{', '.join(sorted(WIRE_DTYPES))}")
    dtype = np.dtype(tensor.dtype)
    shape = tuple(tensor.shape)
    # Python integers: a product of huge claimed dims must not wrap around in int64.
    if len(shape) > 8 or any(d < 0 for d in shape) or \
            math.prod(shape) * dtype.itemsize != len(tensor.data):
        raise BatchError(f"{name}: {len(tensor.data)} bytes do not fill shape {list(shape)[:8]}")
    return np.frombuffer(tensor.data, dtype=dtype).reshape(shape)


@dataclass
class Transitions:
    """A batch of one actor's transitions, in the order they happened."""

    observation: np.ndarray  # float32 [n, *obs]
    action: np.ndarray  # int64 [n] or float32 [n, d]
    deterministic_action: np.ndarray
    reward: np.ndarray  # float32 [n]
    next_observation: np.ndarray
    terminated: np.ndarray  # bool [n]
    truncated: np.ndarray  # bool [n]
    episode_id: np.ndarray  # int64 [n]
    episode_step: np.ndarray  # int64 [n]

    def __len__(self) -> int:
        return int(self.reward.shape[0])


def encode_batch(
    transitions: Transitions,
    *,
    run_id: str,
    actor_id: str,
    incarnation: int,
    seq: int,
    policy_version: int,
    episode_returns: Iterable[float] = (),
    env_steps: int = 0,
    costs: BatchCosts | None = None,
    observation_kind: ObservationKind = VECTOR,
) -> bytes:
    t = transitions
    extra = {}
    if costs is not None:
        if costs.energy_method:
            extra["energy"] = wire_pb2.EnergyReport(
                joules=costs.joules, cpu_seconds=costs.cpu_seconds, method=costs.energy_method)
        extra["times"] = wire_pb2.ActorTimes(**costs.times)
    return wire_pb2.TrajectoryBatch(
        **extra,
        protocol_version=PROTOCOL_VERSION,
        run_id=run_id,
        actor_id=actor_id,
        incarnation=incarnation,
        seq=seq,
        policy_version=policy_version,
        observation=to_tensor(observation_kind.as_stored(t.observation)),
        next_observation=to_tensor(observation_kind.as_stored(t.next_observation)),
        action=to_tensor(t.action),
        deterministic_action=to_tensor(t.deterministic_action),
        reward=to_tensor(t.reward.astype(np.float32, copy=False)),
        terminated=to_tensor(t.terminated.astype(np.uint8)),
        truncated=to_tensor(t.truncated.astype(np.uint8)),
        episode_id=to_tensor(t.episode_id.astype(np.int64, copy=False)),
        episode_step=to_tensor(t.episode_step.astype(np.int64, copy=False)),
        episode_returns=list(episode_returns),
        env_steps=env_steps,
    ).SerializeToString()


def decode_batch(data: bytes) -> wire_pb2.TrajectoryBatch:
    """Parse batch bytes; undecodable bytes are a BatchError, not a framework error."""
    if len(data) > MAX_BATCH_BYTES:
        raise BatchTooLarge(f"batch of {len(data)} bytes is over the {MAX_BATCH_BYTES}-byte limit")
    batch = wire_pb2.TrajectoryBatch()
    try:
        batch.ParseFromString(data)
    except Exception:  # protobuf raises DecodeError, or RuntimeWarning-derived errors
        raise BatchError("batch bytes are not a TrajectoryBatch") from None
    return batch


@dataclass
class BatchCosts:
    """What producing a batch cost its actor since the previous one: energy (when measured)
    and seconds per part of the actor's loop."""

    joules: float = 0.0
    cpu_seconds: float = 0.0
    energy_method: str = ""  # "" when the actor did not measure energy
    times: dict[str, float] = field(default_factory=dict)  # ActorTimes' fields


MAX_BATCH_SECONDS = 86_400.0  # a day between two batches of one actor is already odd
MAX_BATCH_JOULES = 1e9


def batch_costs(batch: wire_pb2.TrajectoryBatch) -> BatchCosts:
    """A batch's energy report and loop times, checked: an actor's numbers are added to the
    run's totals, so they must be finite, not negative and not absurd."""
    values = {
        "energy.joules": (batch.energy.joules, MAX_BATCH_JOULES),
        "energy.cpu_seconds": (batch.energy.cpu_seconds, MAX_BATCH_SECONDS),
        **{f"times.{part}": (getattr(batch.times, part), MAX_BATCH_SECONDS)
           for part in ACTOR_PARTS},
    }
    for name, (value, limit) in values.items():
        if not (math.isfinite(value) and 0.0 <= value <= limit):
            raise BatchError(f"{name}: {value!r} is not in [0, {limit:g}]")
    if len(batch.energy.method) > 64:
        raise BatchError("energy.method: over 64 characters")
    return BatchCosts(
        joules=batch.energy.joules,
        cpu_seconds=batch.energy.cpu_seconds,
        energy_method=batch.energy.method if batch.HasField("energy") else "",
        times={part: getattr(batch.times, part) for part in ACTOR_PARTS}
        if batch.HasField("times") else {},
    )


def validate_batch(
    batch: wire_pb2.TrajectoryBatch,
    observation_shape: tuple[int, ...],
    action: dict,
    observation_dtype: str = VECTOR.stored_dtype,
) -> Transitions:
    """Check a batch against the run's specs (observations stored as their kind stores them,
    edge_rl.device.observations) and return it as arrays."""
    obs = from_tensor(batch.observation, "observation")
    n = obs.shape[0] if obs.ndim else -1
    if n <= 0:
        raise BatchError("batch has no transitions")

    def check(name, array, dtype, shape):
        if array.dtype != np.dtype(dtype):
            raise BatchError(f"{name}: dtype {array.dtype.name}, expected {dtype}")
        if array.shape != shape:
            raise BatchError(f"{name}: shape {list(array.shape)}, expected {list(shape)}")
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise BatchError(f"{name}: holds non-finite values")
        return array

    if action["kind"] == "discrete":
        action_dtype, action_shape = "int64", (n,)
    else:
        action_dtype, action_shape = "float32", (n, *action["shape"])
    t = Transitions(
        observation=check("observation", obs, observation_dtype, (n, *observation_shape)),
        next_observation=check(
            "next_observation",
            from_tensor(batch.next_observation, "next_observation"),
            observation_dtype,
            (n, *observation_shape),
        ),
        action=check("action", from_tensor(batch.action, "action"), action_dtype, action_shape),
        deterministic_action=check(
            "deterministic_action",
            from_tensor(batch.deterministic_action, "deterministic_action"),
            action_dtype,
            action_shape,
        ),
        reward=check("reward", from_tensor(batch.reward, "reward"), "float32", (n,)),
        terminated=check(
            "terminated", from_tensor(batch.terminated, "terminated"), "uint8", (n,)
        ).astype(bool),
        truncated=check(
            "truncated", from_tensor(batch.truncated, "truncated"), "uint8", (n,)
        ).astype(bool),
        episode_id=check("episode_id", from_tensor(batch.episode_id, "episode_id"), "int64", (n,)),
        episode_step=check(
            "episode_step", from_tensor(batch.episode_step, "episode_step"), "int64", (n,)
        ),
    )
    if action["kind"] == "discrete":
        if np.any(t.action < 0) or np.any(t.action >= action["n"]):
            raise BatchError(f"action: values outside [0, {action['n']})")
    if not all(math.isfinite(r) for r in batch.episode_returns):
        raise BatchError("episode_returns: holds non-finite values")
    return t


def policy_chunks(version: int, model: bytes) -> Iterator[wire_pb2.PolicyChunk]:
    """Split a policy file into chunks of at most 1 MiB; the first carries size and sha256."""
    digest = hashlib.sha256(model).hexdigest()
    for start in range(0, max(len(model), 1), POLICY_CHUNK_BYTES):
        first = start == 0
        yield wire_pb2.PolicyChunk(
            version=version,
            total_bytes=len(model) if first else 0,
            sha256=digest if first else "",
            data=model[start : start + POLICY_CHUNK_BYTES],
        )


def assemble_policy(chunks: Iterable[wire_pb2.PolicyChunk]) -> tuple[int, bytes] | None:
    """Join a policy stream; None when the stream was empty (nothing newer)."""
    version, expected, digest, parts = 0, 0, "", []
    for chunk in chunks:
        if not parts:
            version, expected, digest = chunk.version, chunk.total_bytes, chunk.sha256
        parts.append(chunk.data)
    if not parts:
        return None
    model = b"".join(parts)
    if len(model) != expected or hashlib.sha256(model).hexdigest() != digest:
        raise BatchError("policy stream arrived damaged (size or sha256 mismatch)")
    return version, model
