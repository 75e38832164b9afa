"""A streamer for tools/bench_ingest.py: one process standing in for a remote actor.

    python tools/ingest_streamer.py --learner HOST:PORT --actor-id ID --batch-transitions N
                                    [--insert-to HOST:PORT] [--window 8] [--rate R]

It imports only edge_rl.device (as an actor on a board does), says Hello, prints a "ready"
line, reads the start and end times from stdin, inserts valid HalfCheetah-sized batches
(random finite data, increasing seq, 1000-step episodes) with --window in flight, paced to
--rate transitions/s if given, and prints its tally as one JSON line. --insert-to sends the
inserts to another server than the one it said Hello to (the benchmark's no-op Insert).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from edge_rl.device import wire_pb2
from edge_rl.device.client import LearnerClient
from edge_rl.device.wire import PROTOCOL_VERSION, Transitions, to_tensor

OBS_DIM, ACTION_DIM = 17, 6  # HalfCheetah-v5's observation and action sizes
EPISODE_STEPS = 1000  # HalfCheetah's time limit: every episode is truncated at step 999


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learner", required=True, metavar="HOST:PORT")
    parser.add_argument("--insert-to", metavar="HOST:PORT",
                        help="send the inserts here instead (default: --learner)")
    parser.add_argument("--actor-id", required=True)
    parser.add_argument("--incarnation", type=int, default=0)
    parser.add_argument("--batch-transitions", type=int, required=True)
    parser.add_argument("--window", type=int, default=8, help="inserts in flight")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="transitions/s to pace to (0: as fast as acks come back)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpus", type=int, nargs="+",
                        help="run on these CPUs only (os.sched_setaffinity)")
    return parser.parse_args()


def synthetic_transitions(n: int, first: int, rng: np.random.Generator) -> Transitions:
    """n random HalfCheetah transitions from global step `first` on (1000-step episodes)."""
    index = first + np.arange(n)
    action = rng.uniform(-1, 1, (n, ACTION_DIM)).astype(np.float32)
    return Transitions(
        observation=rng.standard_normal((n, OBS_DIM), np.float32),
        action=action,
        deterministic_action=np.clip(action * 0.9, -1, 1),
        reward=rng.standard_normal(n, np.float32),
        next_observation=rng.standard_normal((n, OBS_DIM), np.float32),
        terminated=np.zeros(n, bool),
        truncated=index % EPISODE_STEPS == EPISODE_STEPS - 1,
        episode_id=index // EPISODE_STEPS,
        episode_step=index % EPISODE_STEPS,
    )


class BatchMaker:
    """Serialized TrajectoryBatches that differ only where a real actor's would.

    Protobuf parses concatenated messages as one merged message, so the bulky fields (the
    observations, actions, rewards) are serialized once and each batch only serializes its
    header and its episode bookkeeping (a few hundred bytes) in front of them: a streamer's
    CPU goes to gRPC, as a real actor's would, not to re-encoding the same random numbers."""

    def __init__(self, n: int, run_id: str, actor_id: str, incarnation: int, seed: int):
        self.n, self.run_id, self.actor_id, self.incarnation = n, run_id, actor_id, incarnation
        t = synthetic_transitions(n, 0, np.random.default_rng(seed))
        self.body = wire_pb2.TrajectoryBatch(
            observation=to_tensor(t.observation),
            next_observation=to_tensor(t.next_observation),
            action=to_tensor(t.action),
            deterministic_action=to_tensor(t.deterministic_action),
            reward=to_tensor(t.reward),
            terminated=to_tensor(t.terminated.astype(np.uint8)),
        ).SerializeToString()

    def batch(self, seq: int) -> bytes:
        index = seq * self.n + np.arange(self.n)  # seq-th batch of this incarnation
        step = index % EPISODE_STEPS
        head = wire_pb2.TrajectoryBatch(
            protocol_version=PROTOCOL_VERSION,
            run_id=self.run_id,
            actor_id=self.actor_id,
            incarnation=self.incarnation,
            seq=seq,
            policy_version=0,
            truncated=to_tensor((step == EPISODE_STEPS - 1).astype(np.uint8)),
            episode_id=to_tensor(index // EPISODE_STEPS),
            episode_step=to_tensor(step),
            env_steps=int(index[-1]) + 1,
        )
        return head.SerializeToString() + self.body


@dataclass
class Tally:
    """A streamer's count of the inserts that came back."""

    batch: int  # transitions per batch
    end: float  # acks after this time are not counted
    acked: int = 0  # transitions acked by `end`
    latencies: list[float] = field(default_factory=list)  # seconds from send to ack
    error: str = ""  # the first failed insert's status

    def add(self, sent: float, future, finished: float) -> None:
        if future.exception() is not None:
            self.error = self.error or f"{future.code().name}: {future.details()}"
        elif finished <= self.end:
            self.acked += self.batch
            self.latencies.append(finished - sent)


def stream(args: argparse.Namespace) -> None:
    """One streamer: Hello, wait for the start time on stdin, insert with --window in flight
    until the end time, report on stdout as one JSON line."""
    if args.cpus:
        os.sched_setaffinity(0, args.cpus)
    client = LearnerClient(args.learner, actor_id=args.actor_id, incarnation=args.incarnation,
                           runtime="bench_ingest streamer")
    hello = client.hello_once(timeout=30.0)
    inserts = client
    if args.insert_to:
        inserts = LearnerClient(args.insert_to, actor_id=args.actor_id,
                                incarnation=args.incarnation, runtime="bench_ingest streamer")
    n = args.batch_transitions
    maker = BatchMaker(n, hello.run_id, args.actor_id, args.incarnation,
                       args.seed + args.incarnation)
    print(json.dumps({"ready": True}), flush=True)
    times = json.loads(sys.stdin.readline())
    start, end = times["start"], times["end"]
    tally = Tally(n, end)
    # Acks arrive on gRPC's threads; each hands its finished future to this loop, which keeps
    # the window full (or the pace) and does the counting.
    done: queue.SimpleQueue = queue.SimpleQueue()
    seq, sent, in_flight = hello.next_seq, 0, 0

    time.sleep(max(0.0, start - time.time()))
    cpu_start, cpu_end = time.process_time(), None
    while True:
        now = time.time()
        can_send = not tally.error and now < end and in_flight < args.window
        # paced: batch k leaves no earlier than start + k * n / rate
        due = start + sent * n / args.rate if args.rate > 0 else now
        if can_send and due <= now:
            future = inserts.insert(maker.batch(seq))
            future.add_done_callback(lambda f, t=now: done.put((t, f, time.time())))
            seq, sent, in_flight = seq + 1, sent + 1, in_flight + 1
            continue
        if now >= end and cpu_end is None:
            cpu_end = time.process_time()
        if in_flight == 0 and not can_send:
            break
        try:
            item = done.get(timeout=min(due, end) - now if can_send else None)
        except queue.Empty:
            continue
        in_flight -= 1
        tally.add(*item)
    client.close()
    inserts.close()
    latencies = np.array(tally.latencies or [math.nan]) * 1000
    print(json.dumps({
        "acked_transitions": tally.acked,
        "sent_batches": sent,
        "cpu_seconds": (cpu_end or time.process_time()) - cpu_start,
        "ack_latency_ms_p50": float(np.median(latencies)),
        "ack_latency_ms_p99": float(np.percentile(latencies, 99)),
        "error": tally.error,
        "tensorflow_imported": "tensorflow" in sys.modules,
    }), flush=True)


if __name__ == "__main__":
    stream(parse_args())
