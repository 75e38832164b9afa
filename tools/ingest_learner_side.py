"""The learner side of tools/bench_ingest.py: an edge_rl.loop.train.Training (its learner, replay,
ingest and gRPC service; the loop is the benchmark's own) served on 127.0.0.1, plus the no-op
Insert server of the transport-only phase and the timing of the Insert handler's stages one
batch at a time. Imported by bench_ingest.py only: the streamers (tools/ingest_streamer.py)
never load TensorFlow.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from ingest_streamer import ACTION_DIM, OBS_DIM, BatchMaker, synthetic_transitions

from edge_rl.device import wire_pb2

if TYPE_CHECKING:  # names for the type hints only
    import grpc

    from edge_rl.loop.train import Training

ENV_ID = "HalfCheetah-v5"
PREFILL = 50_000  # transitions in replay before the learner is timed


# -- the learner side ----------------------------------------------------------------------------


class TimedInsert:
    """The service's Insert, adding up the CPU time its threads spend inside it (parse,
    validate, submit, and waking up to check for the ack and the fsync), so the report can
    tell the handler's own work from gRPC's Python around it."""

    def __init__(self, insert: Callable[[bytes, grpc.ServicerContext], object]):
        self.insert = insert
        self.lock = threading.Lock()
        self.cpu_seconds = 0.0
        self.calls = 0

    def __call__(self, raw: bytes, context: grpc.ServicerContext) -> object:
        begin = time.thread_time()
        try:
            return self.insert(raw, context)
        finally:
            used = time.thread_time() - begin
            with self.lock:
                self.cpu_seconds += used
                self.calls += 1


@dataclass
class LearnerSide:
    """An edge_rl.loop.train.Training serving on 127.0.0.1, without its actors, evaluations or
    checkpoints, and the benchmark's pieces around it."""

    training: Training
    server: grpc.Server
    port: int
    insert: TimedInsert
    noop_server: grpc.Server  # phase 5's: its Insert acks at once
    noop_port: int
    tmp: tempfile.TemporaryDirectory

    def close(self) -> None:
        self.training.exchange.stop_taking()
        self.server.stop(grace=1.0)
        self.noop_server.stop(grace=1.0)
        self.training.board.close()
        self.training.ingest.close()
        self.tmp.cleanup()


def build_learner_side(args: argparse.Namespace) -> LearnerSide:
    """A Training of TD3 on HalfCheetah-v5 (its defaults), its replay pre-filled, serving on
    127.0.0.1 (a free port) with its Insert timed."""
    import edge_rl  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow's import)
    from edge_rl.config import TrainConfig
    from edge_rl.loop.train import Training

    tmp = tempfile.TemporaryDirectory(prefix="edge-rl-bench-ingest-")
    training = Training(TrainConfig(
        env=ENV_ID, algo="td3", seed=args.seed, out=str(Path(tmp.name) / "run"),
        actors=args.actors, max_in_flight=args.window,
        batch_transitions=args.batch_transitions[0], carbon=False))
    rng = np.random.default_rng(args.seed)
    for first in range(0, PREFILL, 1000):
        training.replay.insert(0, synthetic_transitions(1000, first, rng))
    service = training.service()
    service.Insert = insert = TimedInsert(service.Insert)  # start_server takes it from here
    server, port = training.serve(service)
    noop_server, noop_port = start_noop_server()
    return LearnerSide(training, server, port, insert, noop_server, noop_port, tmp)


def start_noop_server() -> tuple[grpc.Server, int]:
    """A gRPC server with the learner service's Insert (raw bytes in, as LearnerService takes
    them; an empty reply out) that does nothing else: phase 5's transport on its own."""
    from concurrent import futures

    import grpc

    from edge_rl.transport.server import SERVER_OPTIONS, SERVICE

    empty = wire_pb2.InsertReply().SerializeToString()
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Insert": grpc.unary_unary_rpc_method_handler(lambda raw, context: empty),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="noop"),
                         handlers=[handler], options=SERVER_OPTIONS)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


# -- the Insert handler's stages, one batch at a time ----------------------------------------------


def time_stages(side: LearnerSide, n: int, repeats: int) -> dict[str, float]:
    """Median µs per batch of each step an Insert's batch goes through, in this process
    with nothing else running (the learner thread's replay insert included)."""
    from edge_rl.device.wire import decode_batch, validate_batch
    from edge_rl.replay.buffer import Replay

    action = {"kind": "continuous", "shape": [ACTION_DIM]}
    maker = BatchMaker(n, "bench-ingest", "stages", 0, 0)
    payloads = [maker.batch(seq) for seq in range(repeats)]
    requests = [wire_pb2.InsertRequest(batch=p).SerializeToString() for p in payloads]
    replay = Replay(max(PREFILL, n * repeats), (OBS_DIM,), (ACTION_DIM,), "float32", gamma=0.99)
    log_ = side.training.ingest.log

    def median_us(work: Callable[[int], object]) -> float:
        times = []
        for i in range(repeats):
            begin = time.perf_counter()
            work(i)
            times.append(time.perf_counter() - begin)
        return 1e6 * float(np.median(times))

    def parse(i: int) -> bytes:
        request = wire_pb2.InsertRequest()
        request.ParseFromString(requests[i])
        return request.batch

    batches = [decode_batch(p) for p in payloads]
    transitions = [validate_batch(b, (OBS_DIM,), action) for b in batches]
    return {
        "parse InsertRequest": median_us(parse),
        "decode_batch": median_us(lambda i: decode_batch(payloads[i])),
        "validate_batch": median_us(
            lambda i: validate_batch(batches[i], (OBS_DIM,), action)),
        "replay log append (crc32 + write)": median_us(lambda i: log_.append(payloads[i])),
        "Replay.insert (learner loop)": median_us(lambda i: replay.insert(1, transitions[i])),
    }
