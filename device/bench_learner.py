"""A stand-in learner for `edge-rl bench footprint`: serves one policy file over the wire
protocol (wire.proto) on loopback and acks every valid batch at once. No replay, no updates,
no TensorFlow: it lets a board measure a real `edge-rl actor` process (runtime, env, policy,
gRPC channel and spool) with nothing but the policy file a learner exported.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from concurrent import futures

import grpc

from edge_rl.device import wire_pb2, wire_pb2_grpc
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.device.observations import KINDS as OBSERVATION_KINDS
from edge_rl.device.policy import Policy
from edge_rl.device.wire import (
    PROTOCOL_VERSION,
    BatchError,
    decode_batch,
    policy_chunks,
    validate_batch,
)

log = logging.getLogger(__name__)

# What an actor of `edge-rl train` is told, by default.
BATCH_TRANSITIONS = 64
MAX_IN_FLIGHT = 4


def exploration_for(policy: Policy) -> ExplorationSettings:
    """The exploration an algorithm of the policy's output kind gives its actors."""
    if policy.metadata.discrete:
        return ExplorationSettings(kind="epsilon_greedy")
    if policy.metadata.output in ("squashed_gaussian", "mean_log_std"):
        return ExplorationSettings(kind="sac")
    return ExplorationSettings(kind="gaussian")


class StandInLearner(wire_pb2_grpc.LearnerServicer):
    """The five calls of the Learner service, for actors of one policy file."""

    def __init__(self, policy: Policy, seed: int = 0):
        self.policy = policy
        self.model = policy.model
        self.seed = seed
        self.run_id = "bench-" + secrets.token_hex(4)
        self.session = secrets.token_hex(8)
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self.batches: dict[str, set[int]] = {}  # actor id -> seqs accepted
        self.env_steps: dict[str, int] = {}
        self.refused = 0

    def Hello(self, request, context):
        if request.protocol_version != PROTOCOL_VERSION:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"actor speaks protocol version {request.protocol_version}, "
                          f"this learner speaks version {PROTOCOL_VERSION}")
        with self._lock:
            seqs = self.batches.setdefault(request.actor_id, set())
            next_seq = max(seqs) + 1 if seqs else 0
        meta = self.policy.metadata
        return wire_pb2.HelloReply(
            protocol_version=PROTOCOL_VERSION, run_id=self.run_id, env_id=meta.env_id,
            algo=meta.algo, exploration_json=exploration_for(self.policy).to_json(),
            batch_transitions=BATCH_TRANSITIONS, max_in_flight=MAX_IN_FLIGHT, lockstep=False,
            seed=self.seed, next_seq=next_seq, policy_version=1, num_envs=1,
            learner_session=self.session,
        )

    def GetPolicy(self, request, context):
        if request.have_version < 1:
            yield from policy_chunks(1, self.model)

    def Insert(self, request, context):
        meta = self.policy.metadata
        try:
            batch = decode_batch(request.batch)
            validate_batch(batch, tuple(meta.observation_shape), meta.action,
                           OBSERVATION_KINDS[meta.observation].stored_dtype)
        except BatchError as err:
            with self._lock:
                self.refused += 1
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        with self._lock:
            self.batches.setdefault(batch.actor_id, set()).add(batch.seq)
            self.env_steps[batch.actor_id] = batch.env_steps
        return wire_pb2.InsertReply(seq=batch.seq, policy_version=1)

    def Heartbeat(self, request, context):
        return wire_pb2.HeartbeatReply(policy_version=1, learner_session=self.session)

    def Status(self, request, context):
        with self._lock:
            actors = [wire_pb2.ActorStatus(actor_id=actor, policy_version=1,
                                           batches_inserted=len(seqs),
                                           env_steps=self.env_steps.get(actor, 0))
                      for actor, seqs in self.batches.items()]
            env_steps = sum(self.env_steps.values())
        meta = self.policy.metadata
        return wire_pb2.StatusReply(
            run_id=self.run_id, env_id=meta.env_id, algo=meta.algo, env_steps=env_steps,
            policy_version=1, uptime_seconds=time.monotonic() - self.started, actors=actors,
            batches_refused=self.refused)

    def accepted(self, actor_id: str) -> int:
        """Batches of `actor_id` this learner acked."""
        with self._lock:
            return len(self.batches.get(actor_id, ()))


def serve(learner: StandInLearner, host: str = "127.0.0.1") -> tuple[grpc.Server, int]:
    """Serve `learner` on a free port of `host`; (server, port)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4,
                                                    thread_name_prefix="bench-learner"))
    wire_pb2_grpc.add_LearnerServicer_to_server(learner, server)
    port = server.add_insecure_port(f"{host}:0")
    server.start()
    log.debug("stand-in learner for %s on %s:%d", learner.policy.metadata.env_id, host, port)
    return server, port
