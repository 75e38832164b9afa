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


def predecessors(episode_id: np.ndarray, episode_step: np.ndarray, ended: np.ndarray
                 ) -> np.ndarray:
    """For each row of a batch, the row holding its episode's previous step when that step is
    in the batch and did not end the episode (its next observation is this row's observation);
    -1 otherwise. Rows of several episodes may interleave (an actor steps several envs)."""
    order = np.lexsort((episode_step, episode_id))  # by episode, then step
    episode, step = episode_id[order], episode_step[order]
    follows = (episode[1:] == episode[:-1]) & (step[1:] == step[:-1] + 1) & ~ended[order][:-1]
    previous = np.full(len(order), -1, np.int64)
    previous[order[1:][follows]] = order[:-1][follows]
    return previous


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
    # bool [n]: the step lost a life and the episode goes on (Atari's episodic life): the
    # learner's targets end there, the episode's links and frames do not. None: no row did.
    life_lost: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.life_lost is None:
            self.life_lost = np.zeros(len(self), bool)

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
    frame_stack: int = 1,
) -> bytes:
    """A batch's bytes. `frame_stack`: frames stacked on the observations' last axis, each
    step adding one (edge_rl.device.envs.frame_stack); each is then sent once."""
    t = transitions
    extra = {}
    observation = observation_kind.as_stored(t.observation)
    next_observation = observation_kind.as_stored(t.next_observation)
    if observation_kind.once:  # send only the observations no earlier row's next one gives
        rows = np.flatnonzero(predecessors(t.episode_id, t.episode_step,
                                           t.terminated | t.truncated) < 0)
        channels = observation.shape[-1] // frame_stack if frame_stack > 1 else 0
        # a stacked next observation is the observation shifted by one frame, plus that frame
        if channels and np.array_equal(next_observation[..., :-channels],
                                       observation[..., channels:]):
            next_observation = next_observation[..., -channels:]
            extra["next_frame_channels"] = channels
        observation = observation[rows]
        extra["observation_rows"] = to_tensor(rows.astype(np.int64))
    if np.any(t.life_lost):
        extra["life_lost"] = to_tensor(t.life_lost.astype(np.uint8))
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
        observation=to_tensor(observation),
        next_observation=to_tensor(next_observation),
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


def _checked(name: str, array: np.ndarray, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if array.dtype != np.dtype(dtype):
        raise BatchError(f"{name}: dtype {array.dtype.name}, expected {dtype}")
    if array.shape != shape:
        raise BatchError(f"{name}: shape {list(array.shape)}, expected {list(shape)}")
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise BatchError(f"{name}: holds non-finite values")
    return array


def validate_batch(
    batch: wire_pb2.TrajectoryBatch,
    observation_shape: tuple[int, ...],
    action: dict,
    observation_dtype: str = VECTOR.stored_dtype,
) -> Transitions:
    """Check a batch against the run's specs (observations stored as their kind stores them,
    edge_rl.device.observations) and return it as arrays, observations rebuilt in full."""
    next_obs = from_tensor(batch.next_observation, "next_observation")
    n = next_obs.shape[0] if next_obs.ndim else -1
    if n <= 0:
        raise BatchError("batch has no transitions")
    channels = batch.next_frame_channels  # 0: whole next observations
    if channels and not (len(observation_shape) >= 2 and channels < observation_shape[-1]
                         and observation_shape[-1] % channels == 0):
        raise BatchError(f"next_frame_channels: {channels} does not divide the observations' "
                         f"last axis {list(observation_shape)}")
    next_shape = ((*observation_shape[:-1], channels) if channels
                  else tuple(observation_shape))
    if action["kind"] == "discrete":
        action_dtype, action_shape = "int64", (n,)
    else:
        action_dtype, action_shape = "float32", (n, *action["shape"])
    next_obs = _checked("next_observation", next_obs, observation_dtype, (n, *next_shape))
    t = Transitions(
        observation=next_obs,  # set below
        next_observation=next_obs,
        action=_checked("action", from_tensor(batch.action, "action"), action_dtype, action_shape),
        deterministic_action=_checked(
            "deterministic_action",
            from_tensor(batch.deterministic_action, "deterministic_action"),
            action_dtype,
            action_shape,
        ),
        reward=_checked("reward", from_tensor(batch.reward, "reward"), "float32", (n,)),
        terminated=_checked(
            "terminated", from_tensor(batch.terminated, "terminated"), "uint8", (n,)
        ).astype(bool),
        truncated=_checked(
            "truncated", from_tensor(batch.truncated, "truncated"), "uint8", (n,)
        ).astype(bool),
        episode_id=_checked(
            "episode_id", from_tensor(batch.episode_id, "episode_id"), "int64", (n,)
        ),
        episode_step=_checked(
            "episode_step", from_tensor(batch.episode_step, "episode_step"), "int64", (n,)
        ),
    )
    if batch.HasField("life_lost"):
        t.life_lost = _checked("life_lost", from_tensor(batch.life_lost, "life_lost"), "uint8",
                               (n,)).astype(bool)
    if channels:
        _rebuild_stacked(batch, t, observation_dtype, observation_shape, channels)
    else:
        t.observation = _observations(batch, t, observation_dtype, observation_shape)
    if action["kind"] == "discrete":
        if np.any(t.action < 0) or np.any(t.action >= action["n"]):
            raise BatchError(f"action: values outside [0, {action['n']})")
    if not all(math.isfinite(r) for r in batch.episode_returns):
        raise BatchError("episode_returns: holds non-finite values")
    return t


def _sent_observations(batch: wire_pb2.TrajectoryBatch, n: int, dtype: str,
                       shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(row numbers, observations) the batch sent: every row's, or `observation_rows`'."""
    rows = np.arange(n)
    if batch.HasField("observation_rows"):
        rows = from_tensor(batch.observation_rows, "observation_rows")
        if rows.dtype != np.int64 or rows.ndim != 1 or (
                len(rows) and (rows[0] < 0 or rows[-1] >= n or np.any(np.diff(rows) <= 0))):
            raise BatchError(f"observation_rows: not ascending int64 row numbers below {n}")
    sent = from_tensor(batch.observation, "observation")
    return rows, _checked("observation", sent, dtype, (len(rows), *shape))


def _observations(batch: wire_pb2.TrajectoryBatch, t: Transitions, dtype: str,
                  shape: tuple[int, ...]) -> np.ndarray:
    """The batch's observations [n, *shape]: as sent, or, where only some rows were
    (`observation_rows`), the others from their episode's previous next_observation."""
    n = len(t)
    rows, sent = _sent_observations(batch, n, dtype, shape)
    if len(rows) == n:
        return sent
    previous = predecessors(t.episode_id, t.episode_step, t.terminated | t.truncated)
    missing = np.ones(n, bool)
    missing[rows] = False
    if np.any(previous[missing] < 0):
        row = int(np.flatnonzero(missing & (previous < 0))[0])
        raise BatchError(f"observation: row {row} is neither sent nor the next observation "
                         "of an earlier row")
    observation = np.empty((n, *shape), dtype)
    observation[rows] = sent
    observation[missing] = t.next_observation[previous[missing]]
    return observation


def _rebuild_stacked(batch: wire_pb2.TrajectoryBatch, t: Transitions, dtype: str,
                     shape: tuple[int, ...], channels: int) -> None:
    """Fill `t`'s observations and next observations from a batch that sent each frame once:
    the observations of `observation_rows`, and each row's newest next frame (in
    t.next_observation). Rows go in episode order, so a row's observation is the next
    observation its previous step has just been given."""
    n = len(t)
    rows, sent = _sent_observations(batch, n, dtype, shape)
    previous = predecessors(t.episode_id, t.episode_step, t.terminated | t.truncated)
    given = dict(zip(rows.tolist(), range(len(rows)), strict=True))
    frames = t.next_observation
    observation = np.empty((n, *shape), dtype)
    next_observation = np.empty((n, *shape), dtype)
    for row in np.lexsort((t.episode_step, t.episode_id)).tolist():
        if row in given:
            observation[row] = sent[given[row]]
        elif previous[row] >= 0:
            observation[row] = next_observation[previous[row]]
        else:
            raise BatchError(f"observation: row {row} is neither sent nor the next "
                             "observation of an earlier row")
        next_observation[row, ..., :-channels] = observation[row, ..., channels:]
        next_observation[row, ..., -channels:] = frames[row]
    t.observation, t.next_observation = observation, next_observation


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
