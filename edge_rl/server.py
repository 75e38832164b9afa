"""The learner's gRPC service and the Exchange it shares with the learner loop.

The service is the only code that knows about the network. It validates what actors send and
hands the learner a queue of checked batches (`Exchange.batches`); the learner inserts them
into replay and then releases each batch's ack, late when actors run ahead of the updates:
that delay is the flow control. Bad input gets a status code and a message, never an
exception that reaches the learner.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from edge_rl.device import wire_pb2, wire_pb2_grpc
from edge_rl.device.client import CHANNEL_OPTIONS
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.device.wire import (
    PROTOCOL_VERSION,
    BatchError,
    BatchTooLarge,
    Transitions,
    decode_batch,
    policy_chunks,
    validate_batch,
)

log = logging.getLogger(__name__)


@dataclass
class RunInfo:
    """What the service tells actors about the run."""

    run_id: str
    env_id: str
    algo: str
    observation_shape: tuple[int, ...]
    action: dict
    batch_transitions: int
    max_in_flight: int
    lockstep: bool
    num_envs: int
    seed: int
    exploration: Callable[[int], ExplorationSettings]  # actor index -> settings


@dataclass
class PendingBatch:
    """A validated batch waiting for the learner; `acked` is set once it is in replay."""

    actor_key: int
    actor_id: str
    seq: int
    transitions: Transitions
    episode_returns: list[float]
    actor_env_steps: int
    policy_version: int = 0  # of the policy that acted
    acked: threading.Event = field(default_factory=threading.Event)


class Ledger:
    """Which (actor id, seq) pairs are in replay: a contiguous prefix plus stragglers."""

    def __init__(self, state: dict | None = None):
        self.prefix: dict[str, int] = {}  # every seq below this is inserted
        self.extra: dict[str, set[int]] = {}
        for actor_id, (prefix, extra) in (state or {}).items():
            self.prefix[actor_id] = int(prefix)
            self.extra[actor_id] = {int(s) for s in extra}

    def __contains__(self, item: tuple[str, int]) -> bool:
        actor_id, seq = item
        return seq < self.prefix.get(actor_id, 0) or seq in self.extra.get(actor_id, ())

    def add(self, actor_id: str, seq: int) -> None:
        extra = self.extra.setdefault(actor_id, set())
        extra.add(seq)
        prefix = self.prefix.get(actor_id, 0)
        while prefix in extra:
            extra.remove(prefix)
            prefix += 1
        self.prefix[actor_id] = prefix

    def next_seq(self, actor_id: str) -> int:
        return max([self.prefix.get(actor_id, 0), *(s + 1 for s in self.extra.get(actor_id, ()))])

    def state(self) -> dict:
        return {a: [self.prefix[a], sorted(self.extra.get(a, ()))] for a in self.prefix}


class Exchange:
    """What the learner loop and the gRPC service share."""

    def __init__(self, ledger: Ledger | None = None):
        self.batches: queue.Queue[PendingBatch] = queue.Queue()
        self.ledger = ledger or Ledger()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], PendingBatch] = {}
        self._policy: tuple[int, bytes] = (0, b"")
        self._actor_keys: dict[tuple[str, int], int] = {}
        self._actor_index: dict[str, int] = {}
        self.actor_rates: dict[str, tuple[float, float]] = {}  # actor -> (time, steps/s)

    def put_policy(self, version: int, model: bytes) -> None:
        with self._lock:
            self._policy = (version, model)

    @property
    def policy(self) -> tuple[int, bytes]:
        return self._policy

    def actor_key(self, actor_id: str, incarnation: int) -> tuple[int, int]:
        """(replay key, actor index) for an actor; a new incarnation gets a new replay key."""
        with self._lock:
            index = self._actor_index.setdefault(actor_id, len(self._actor_index))
            key = self._actor_keys.setdefault((actor_id, incarnation), len(self._actor_keys))
            return key, index

    def known_key(self, actor_id: str, incarnation: int) -> int | None:
        return self._actor_keys.get((actor_id, incarnation))

    def submit(self, batch: PendingBatch) -> tuple[PendingBatch | None, bool]:
        """Queue a batch unless it is a duplicate; returns (the batch whose ack to wait for,
        duplicate). A batch already in replay needs no wait (None)."""
        key = (batch.actor_id, batch.seq)
        with self._lock:
            if key in self.ledger:
                return None, True
            if key in self._pending:
                return self._pending[key], True
            self._pending[key] = batch
        self.batches.put(batch)
        return batch, False

    def inserted(self, batch: PendingBatch) -> None:
        """Called by the learner once `batch` is in replay (not yet acked)."""
        with self._lock:
            self.ledger.add(batch.actor_id, batch.seq)
            self._pending.pop((batch.actor_id, batch.seq), None)

    def drop_pending(self) -> None:
        """Forget batches the learner will not insert (it is stopping); actors keep them."""
        with self._lock:
            self._pending.clear()


class LearnerService(wire_pb2_grpc.LearnerServicer):
    def __init__(self, run: RunInfo, exchange: Exchange):
        self.run = run
        self.exchange = exchange

    def Hello(self, request, context):
        if request.protocol_version != PROTOCOL_VERSION:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"actor speaks protocol version {request.protocol_version}, "
                f"this learner speaks version {PROTOCOL_VERSION}",
            )
        if not request.actor_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "actor_id is empty")
        _, index = self.exchange.actor_key(request.actor_id, request.incarnation)
        run = self.run
        log.info("actor %s (incarnation %d, %s) joined", request.actor_id, request.incarnation,
                 request.runtime or "unknown runtime")
        return wire_pb2.HelloReply(
            protocol_version=PROTOCOL_VERSION,
            run_id=run.run_id,
            env_id=run.env_id,
            algo=run.algo,
            exploration_json=run.exploration(index).to_json(),
            batch_transitions=run.batch_transitions,
            max_in_flight=run.max_in_flight,
            lockstep=run.lockstep,
            seed=run.seed + 1000 * (index + 1),
            next_seq=self.exchange.ledger.next_seq(request.actor_id),
            policy_version=self.exchange.policy[0],
            num_envs=run.num_envs,
        )

    def GetPolicy(self, request, context):
        version, model = self.exchange.policy
        if version > request.have_version:
            yield from policy_chunks(version, model)

    def Insert(self, request, context):
        try:
            batch = decode_batch(request.batch)
        except BatchError as err:
            status = (grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(err, BatchTooLarge)
                      else grpc.StatusCode.INVALID_ARGUMENT)
            context.abort(status, str(err))
        if batch.protocol_version != PROTOCOL_VERSION:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"batch uses protocol version {batch.protocol_version}, "
                f"this learner speaks version {PROTOCOL_VERSION}",
            )
        if batch.run_id != self.run.run_id:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"unknown run {batch.run_id!r}")
        actor_key = self.exchange.known_key(batch.actor_id, batch.incarnation)
        if actor_key is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"actor {batch.actor_id!r} must say Hello before inserting")
        try:
            transitions = validate_batch(batch, self.run.observation_shape, self.run.action)
        except BatchError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        pending, duplicate = self.exchange.submit(PendingBatch(
            actor_key, batch.actor_id, batch.seq, transitions,
            list(batch.episode_returns), batch.env_steps, batch.policy_version,
        ))
        if pending is not None:
            while not pending.acked.wait(timeout=0.5):
                if self.exchange.stopping.is_set():
                    context.abort(grpc.StatusCode.UNAVAILABLE, "the learner is stopping")
                if not context.is_active():
                    return wire_pb2.InsertReply()
        return wire_pb2.InsertReply(
            seq=batch.seq, duplicate=duplicate, policy_version=self.exchange.policy[0]
        )

    def Heartbeat(self, request, context):
        self.exchange.actor_rates[request.actor_id] = (time.monotonic(), request.steps_per_second)
        return wire_pb2.HeartbeatReply(
            policy_version=self.exchange.policy[0], stop=self.exchange.stopping.is_set()
        )


def start_server(service: LearnerService, port: int, max_workers: int) -> tuple[grpc.Server, int]:
    """Serve on 127.0.0.1:port (0 = any free port); returns (server, port)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        options=CHANNEL_OPTIONS,
    )
    wire_pb2_grpc.add_LearnerServicer_to_server(service, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    if bound == 0:
        from edge_rl.device.errors import UserError

        raise UserError(f"cannot listen on 127.0.0.1:{port} (in use?)")
    server.start()
    return server, bound
