"""The actor's side of the gRPC link to a learner."""

from __future__ import annotations

import logging
import time

import grpc

from edge_rl.device import wire_pb2, wire_pb2_grpc
from edge_rl.device.errors import UserError
from edge_rl.device.wire import PROTOCOL_VERSION, assemble_policy

log = logging.getLogger(__name__)

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]


class LearnerClient:
    """Hello, policy pulls, batch inserts and heartbeats against one learner."""

    def __init__(self, address: str, actor_id: str, incarnation: int, runtime: str = ""):
        self.address = address
        self.actor_id = actor_id
        self.incarnation = incarnation
        self.runtime = runtime
        self.channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.stub = wire_pb2_grpc.LearnerStub(self.channel)

    def hello(self, wait_seconds: float = 60.0) -> wire_pb2.HelloReply:
        """Introduce this actor; waits up to `wait_seconds` for the learner to come up."""
        request = wire_pb2.HelloRequest(
            protocol_version=PROTOCOL_VERSION,
            actor_id=self.actor_id,
            incarnation=self.incarnation,
            runtime=self.runtime,
        )
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                remaining = max(0.2, min(10.0, deadline - time.monotonic()))
                return self.stub.Hello(request, timeout=remaining, wait_for_ready=True)
            except grpc.RpcError as err:
                code = err.code()
                if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAUTHENTICATED):
                    raise UserError(f"learner at {self.address} refused: {err.details()}") from None
                if time.monotonic() > deadline:
                    raise UserError(
                        f"cannot reach a learner at {self.address}: {err.details()}"
                    ) from None
                time.sleep(0.5)

    def fetch_policy(self, have_version: int, timeout: float = 30.0) -> tuple[int, bytes] | None:
        """The newest policy if it is newer than `have_version`, else None."""
        chunks = self.stub.GetPolicy(
            wire_pb2.PolicyRequest(actor_id=self.actor_id, have_version=have_version),
            timeout=timeout,
        )
        return assemble_policy(chunks)

    def insert(self, batch: bytes, timeout: float = 600.0) -> grpc.Future:
        """Send one serialized TrajectoryBatch; the future resolves to its (maybe delayed) ack."""
        return self.stub.Insert.future(wire_pb2.InsertRequest(batch=batch), timeout=timeout)

    def heartbeat(self, policy_version: int, steps_per_second: float) -> wire_pb2.HeartbeatReply:
        return self.stub.Heartbeat(
            wire_pb2.HeartbeatRequest(
                actor_id=self.actor_id,
                incarnation=self.incarnation,
                policy_version=policy_version,
                steps_per_second=steps_per_second,
            ),
            timeout=10,
        )

    def close(self) -> None:
        self.channel.close()
