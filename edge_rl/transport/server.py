"""The learner's gRPC service: the only code that knows about the network.

It checks every call's token, validates what actors send and hands the learner checked batches
through the Exchange. An Insert is answered only once its batch is durable in the replay log
and the learner has let it go (late when the actors run ahead of the updates: that delay is
the flow control). Bad input gets a status code and a message, never an exception that
reaches the learner:

  INVALID_ARGUMENT     undecodable bytes, wrong shapes or dtypes, non-finite values
  RESOURCE_EXHAUSTED   a batch over the size limit
  FAILED_PRECONDITION  another protocol version, another run, an actor that has not said Hello
  UNAUTHENTICATED      no token or a wrong one (nothing else is looked at)
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from edge_rl.config import check_listening
from edge_rl.device import wire_pb2
from edge_rl.device.client import CHANNEL_OPTIONS, read_tokens
from edge_rl.device.errors import UserError
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.device.observations import VECTOR
from edge_rl.device.wire import (
    PROTOCOL_VERSION,
    BatchError,
    BatchTooLarge,
    batch_costs,
    decode_batch,
    policy_chunks,
    validate_batch,
)
from edge_rl.transport.exchange import Exchange, LearnerStopping, PendingBatch, replay_key

log = logging.getLogger(__name__)

SERVICE = "edge_rl.v1.Learner"
SERVER_OPTIONS = CHANNEL_OPTIONS + [
    ("grpc.so_reuseport", 0),  # a second learner on the same port fails instead of sharing it
    ("grpc.keepalive_permit_without_calls", 1),  # actors ping to find dead links
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
]


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
    observation_dtype: str = VECTOR.stored_dtype  # as the observations' kind stores them


class LearnerService:
    """The five calls of wire.proto's Learner service."""

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
        if not request.actor_id or len(request.actor_id) > 200:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "actor_id must be 1-200 characters")
        if self.exchange.stopping.is_set():
            # like Insert: an actor whose insert was refused backs off and retries, instead
            # of a new session whose every resend is refused again
            context.abort(grpc.StatusCode.UNAVAILABLE, "the learner is stopping")
        record = self.exchange.hello(request.actor_id, request.incarnation, request.host[:200],
                                     request.runtime[:200])
        run = self.run
        log.info("actor %s (incarnation %d, %s, %s) joined", request.actor_id,
                 request.incarnation, request.host or "unknown host",
                 request.runtime or "unknown runtime")
        return wire_pb2.HelloReply(
            protocol_version=PROTOCOL_VERSION,
            run_id=run.run_id,
            env_id=run.env_id,
            algo=run.algo,
            exploration_json=run.exploration(record.index).to_json(),
            batch_transitions=run.batch_transitions,
            max_in_flight=run.max_in_flight,
            lockstep=run.lockstep,
            seed=run.seed + 1000 * (record.index + 1),
            next_seq=self.exchange.ledger.next_seq(request.actor_id),
            policy_version=self.exchange.policy[0],
            num_envs=run.num_envs,
            learner_session=self.exchange.session,
        )

    def GetPolicy(self, request, context):
        version, model = self.exchange.policy
        if version > request.have_version:
            yield from policy_chunks(version, model)

    def _refuse(self, context, code: grpc.StatusCode, message: str):
        self.exchange.refused += 1
        context.abort(code, message)

    def Insert(self, raw: bytes, context):
        """Takes the request's bytes unparsed (see `_handlers`): anything undecodable is
        INVALID_ARGUMENT from here, not a framework error."""
        with self.exchange.answering():
            return self._insert(raw, context)

    def _insert(self, raw: bytes, context):
        if self.exchange.stopping.is_set():  # nothing new goes in: the actor keeps it
            context.abort(grpc.StatusCode.UNAVAILABLE, "the learner is stopping")
        request = wire_pb2.InsertRequest()
        try:
            request.ParseFromString(raw)
            batch = decode_batch(request.batch)
        except BatchError as err:
            code = (grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(err, BatchTooLarge)
                    else grpc.StatusCode.INVALID_ARGUMENT)
            self._refuse(context, code, str(err))
        except Exception:  # protobuf's DecodeError
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT,
                         "request bytes are not an InsertRequest")
        if batch.protocol_version != PROTOCOL_VERSION:
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION,
                         f"batch uses protocol version {batch.protocol_version}, "
                         f"this learner speaks version {PROTOCOL_VERSION}")
        if batch.run_id != self.run.run_id:
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION,
                         f"unknown run {batch.run_id[:64]!r}")
        if not self.exchange.known(batch.actor_id):
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION,
                         f"actor {batch.actor_id[:64]!r} has not said Hello to this learner")
        try:
            transitions = validate_batch(batch, self.run.observation_shape, self.run.action,
                                         self.run.observation_dtype)
            costs = batch_costs(batch)
        except BatchError as err:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(err))
        try:
            pending, duplicate = self.exchange.submit(PendingBatch(
                replay_key(batch.actor_id, batch.incarnation), batch.actor_id, batch.seq,
                transitions, list(batch.episode_returns), batch.env_steps, batch.policy_version,
                costs,
            ), request.batch)
        except LearnerStopping:  # nothing new goes in: the actor keeps it
            context.abort(grpc.StatusCode.UNAVAILABLE, "the learner is stopping")
        if pending is not None:
            while not pending.acked.wait(timeout=0.5):
                # A stopping learner inserts nothing more: a batch still queued stays with its
                # actor. One already in replay (in the ledger, which no longer changes) is in
                # the final checkpoint and its ack comes (the learner releases them all right
                # after it stops taking): refusing it here would leave it in replay unacked.
                in_replay = (batch.actor_id, batch.seq) in self.exchange.ledger
                if self.exchange.stopping.is_set() and not in_replay:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "the learner is stopping")
                if not context.is_active():
                    return wire_pb2.InsertReply()
            position = pending.log_position
        else:
            position = self.exchange.log.written  # in replay; its record may await its fsync
        while not self.exchange.log.wait_durable(position, timeout=0.5):
            if not context.is_active():
                return wire_pb2.InsertReply()
        return wire_pb2.InsertReply(
            seq=batch.seq, duplicate=duplicate, policy_version=self.exchange.policy[0]
        )

    def Heartbeat(self, request, context):
        stopping = self.exchange.stopping.is_set()
        if stopping:
            self.exchange.told_to_stop.add(request.actor_id)
        self.exchange.heartbeat(
            request.actor_id,
            host=request.host[:200],
            policy_version=request.policy_version,
            steps_per_second=request.steps_per_second,
            env_steps=request.env_steps,
            batches_spooled=request.batches_spooled,
            batches_rejected=request.batches_rejected,
            batches_dropped=request.batches_dropped,
        )
        return wire_pb2.HeartbeatReply(
            policy_version=self.exchange.policy[0],
            stop=stopping,
            learner_session=self.exchange.session,
        )

    def Status(self, request, context):
        exchange, now = self.exchange, time.monotonic()
        actors = [
            wire_pb2.ActorStatus(
                actor_id=r.actor_id, host=r.host, incarnation=r.incarnation,
                policy_version=r.policy_version, steps_per_second=r.steps_per_second,
                seconds_since_seen=now - r.last_seen if r.last_seen else -1.0, gone=r.gone,
                batches_spooled=r.batches_spooled, batches_rejected=r.batches_rejected,
                batches_dropped=r.batches_dropped,
                batches_inserted=exchange.ledger.count(r.actor_id), env_steps=r.env_steps,
            )
            for r in sorted(exchange.actors.values(), key=lambda r: r.index)
        ]
        return wire_pb2.StatusReply(
            run_id=self.run.run_id, env_id=self.run.env_id, algo=self.run.algo,
            env_steps=exchange.progress["env_steps"],
            learner_updates=exchange.progress["updates"],
            policy_version=exchange.policy[0], uptime_seconds=now - exchange.started,
            actors=actors, batches_refused=exchange.refused,
        )


def _handlers(service: LearnerService) -> grpc.GenericRpcHandler:
    """The service's method table; Insert gets its request as raw bytes."""
    unary = grpc.unary_unary_rpc_method_handler
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Hello": unary(service.Hello, wire_pb2.HelloRequest.FromString,
                       wire_pb2.HelloReply.SerializeToString),
        "GetPolicy": grpc.unary_stream_rpc_method_handler(
            service.GetPolicy, wire_pb2.PolicyRequest.FromString,
            wire_pb2.PolicyChunk.SerializeToString),
        "Insert": unary(service.Insert, None, wire_pb2.InsertReply.SerializeToString),
        "Heartbeat": unary(service.Heartbeat, wire_pb2.HeartbeatRequest.FromString,
                           wire_pb2.HeartbeatReply.SerializeToString),
        "Status": unary(service.Status, wire_pb2.StatusRequest.FromString,
                        wire_pb2.StatusReply.SerializeToString),
    })


class TokenCheck(grpc.ServerInterceptor):
    """Refuses every call whose `authorization: Bearer TOKEN` is missing or not a known token,
    before its request is even parsed."""

    def __init__(self, tokens: list[str]):
        self.tokens = [t.encode() for t in tokens]

    def _valid(self, metadata) -> bool:
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                given = value[len("Bearer "):].encode()
                # compare against every token, so the time taken says nothing about which
                return any([hmac.compare_digest(given, t) for t in self.tokens])
        return False

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or self._valid(details.invocation_metadata):
            return handler

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

        def refuse_stream(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
            yield  # a generator, as stream handlers are

        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(refuse_stream)
        return grpc.unary_unary_rpc_method_handler(refuse)


def accepted_tokens(path: str | Path) -> list[str]:
    """The tokens a learner accepts: its token file's, each too long to guess."""
    tokens = read_tokens(path)
    if any(len(t) < 16 for t in tokens):
        raise UserError(f"token file {path}: tokens must be at least 16 characters "
                        "(e.g. `python -c 'import secrets; print(secrets.token_hex(16))'`)")
    return tokens


def start_server(
    service: LearnerService,
    port: int,
    max_workers: int,
    host: str = "127.0.0.1",
    token_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    insecure: bool = False,
) -> tuple[grpc.Server, int]:
    """Serve on host:port (0 = any free port); returns (server, port)."""
    check_listening(host, token_file, tls_cert, tls_key, insecure)
    interceptors = [TokenCheck(accepted_tokens(token_file))] if token_file else []
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        handlers=[_handlers(service)],
        interceptors=interceptors,
        options=SERVER_OPTIONS,
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls_cert is not None:
            try:
                pair = (Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())
            except OSError as err:
                raise UserError(f"cannot read {err.filename}: {err.strerror}") from None
            bound = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise UserError(f"cannot listen on {address} (in use, or not this machine's address?)")
    server.start()
    return server, bound
