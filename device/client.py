"""The actor's side of the gRPC link to a learner: channel, credentials and the five calls."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import grpc

from edge_rl.device import wire_pb2, wire_pb2_grpc
from edge_rl.device.errors import UserError
from edge_rl.device.wire import PROTOCOL_VERSION, assemble_policy

log = logging.getLogger(__name__)

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]
# An actor on a flaky link: pings find a dead TCP connection in ~15 s (a cut cable sends no
# RST), and the channel retries every few seconds rather than backing off to gRPC's 2 minutes.
ACTOR_CHANNEL_OPTIONS = CHANNEL_OPTIONS + [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 4_000),
]
# Codes that no retry can fix: this actor may not talk to this learner.
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def read_tokens(path: str | Path) -> list[str]:
    """Every non-empty, non-comment line of a token file is a token."""
    try:
        lines = [line.strip() for line in Path(path).read_text().splitlines()]
    except OSError as err:
        raise UserError(f"cannot read token file {path}: {err.strerror}") from None
    tokens = [line for line in lines if line and not line.startswith("#")]
    if not tokens:
        raise UserError(f"token file {path} holds no token")
    return tokens


def read_token(path: str | Path | None) -> str | None:
    """The token an actor presents: its file's first (None without a file)."""
    return None if path is None else read_tokens(path)[0]


def make_channel(address: str, tls_ca: str | Path | None = None,
                 options: list | None = None) -> grpc.Channel:
    """An insecure channel, or a TLS one that trusts the certificates in `tls_ca`."""
    options = options if options is not None else ACTOR_CHANNEL_OPTIONS
    if tls_ca is None:
        return grpc.insecure_channel(address, options=options)
    try:
        root = Path(tls_ca).read_bytes()
    except OSError as err:
        raise UserError(f"cannot read TLS CA file {tls_ca}: {err.strerror}") from None
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=root),
                               options=options)


class LearnerClient:
    """Hello, policy pulls, batch inserts, heartbeats and status against one learner."""

    def __init__(self, address: str, actor_id: str = "", incarnation: int = 0,
                 runtime: str = "", token: str | None = None, tls_ca: str | Path | None = None):
        self.address = address
        self.actor_id = actor_id
        self.incarnation = incarnation
        self.runtime = runtime
        self.host = socket.gethostname()
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.channel = make_channel(address, tls_ca)
        self.stub = wire_pb2_grpc.LearnerStub(self.channel)

    def hello_once(self, timeout: float = 5.0) -> wire_pb2.HelloReply:
        """One Hello; raises grpc.RpcError when the learner does not answer OK."""
        request = wire_pb2.HelloRequest(
            protocol_version=PROTOCOL_VERSION,
            actor_id=self.actor_id,
            incarnation=self.incarnation,
            runtime=self.runtime,
            host=self.host,
        )
        return self.stub.Hello(request, timeout=timeout, metadata=self.metadata)

    def hello(self, wait_seconds: float | None = None) -> wire_pb2.HelloReply:
        """Introduce this actor, retrying while the learner is unreachable (for ever when
        `wait_seconds` is None); a refusal is a UserError."""
        deadline = None if wait_seconds is None else time.monotonic() + wait_seconds
        delay, announced = 0.5, False
        while True:
            try:
                return self.hello_once()
            except grpc.RpcError as err:
                code = err.code()
                if code in REFUSED or code in (grpc.StatusCode.FAILED_PRECONDITION,
                                               grpc.StatusCode.INVALID_ARGUMENT):
                    raise UserError(f"learner at {self.address} refused: {err.details()}") \
                        from None
                if deadline is not None and time.monotonic() > deadline:
                    raise UserError(
                        f"cannot reach a learner at {self.address}: {err.details()}"
                    ) from None
                if not announced:
                    log.info("waiting for the learner at %s (%s)", self.address, code.name)
                    announced = True
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def fetch_policy(self, have_version: int, timeout: float = 30.0) -> tuple[int, bytes] | None:
        """The newest policy if it is newer than `have_version`, else None."""
        chunks = self.stub.GetPolicy(
            wire_pb2.PolicyRequest(actor_id=self.actor_id, have_version=have_version),
            timeout=timeout, metadata=self.metadata,
        )
        return assemble_policy(chunks)

    def insert(self, batch: bytes, timeout: float = 600.0) -> grpc.Future:
        """Send one serialized TrajectoryBatch; the future resolves to its (maybe delayed) ack."""
        return self.stub.Insert.future(wire_pb2.InsertRequest(batch=batch), timeout=timeout,
                                       metadata=self.metadata)

    def heartbeat(self, timeout: float = 5.0, **fields) -> wire_pb2.HeartbeatReply:
        return self.stub.Heartbeat(
            wire_pb2.HeartbeatRequest(actor_id=self.actor_id, incarnation=self.incarnation,
                                      host=self.host, **fields),
            timeout=timeout, metadata=self.metadata,
        )

    def status(self, timeout: float = 10.0) -> wire_pb2.StatusReply:
        return self.stub.Status(wire_pb2.StatusRequest(), timeout=timeout,
                                metadata=self.metadata)

    def close(self) -> None:
        self.channel.close()


def status_if_up(address: str, token: str | None = None, timeout: float = 5.0,
                 tls_ca: str | Path | None = None) -> wire_pb2.StatusReply | None:
    """The learner's StatusReply, or None while it does not answer (starting, or gone)."""
    client = LearnerClient(address, token=token, tls_ca=tls_ca)
    try:
        return client.status(timeout=timeout)
    except grpc.RpcError:
        return None
    finally:
        client.close()
