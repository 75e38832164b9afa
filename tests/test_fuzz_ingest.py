"""1,000+ malformed or hostile batches through a real gRPC channel to a training learner.

Each must be refused with its status code (or, for a replayed seq, acked as a duplicate and
dropped); the learner must keep training, and replay must hold none of them.
"""

import signal

import grpc
import numpy as np
import pytest
from fleet import final_ledger, free_port, start, status, stop, wait_for, write_token

from edge_rl.device import wire_pb2
from edge_rl.device.client import LearnerClient
from edge_rl.device.wire import PROTOCOL_VERSION, Transitions, encode_batch, to_tensor
from edge_rl.transport.replay_log import read_records

pytestmark = pytest.mark.slow

INVALID = grpc.StatusCode.INVALID_ARGUMENT
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
TOO_LARGE = grpc.StatusCode.RESOURCE_EXHAUSTED


def cartpole_batch(rng, n=8) -> Transitions:
    action = rng.integers(0, 2, n)
    return Transitions(
        observation=rng.normal(size=(n, 4)).astype(np.float32),
        action=action,
        deterministic_action=action.copy(),
        reward=np.ones(n, np.float32),
        next_observation=rng.normal(size=(n, 4)).astype(np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        episode_id=np.zeros(n, np.int64),
        episode_step=np.arange(n, dtype=np.int64),
    )


def hostile_requests(rng, run_id: str, legit_seq0: bytes):
    """(name, InsertRequest bytes, the codes it may get; "duplicate" for a replayed seq)."""

    def batch(**changes) -> wire_pb2.TrajectoryBatch:
        message = wire_pb2.TrajectoryBatch.FromString(encode_batch(
            cartpole_batch(rng), run_id=run_id, actor_id="fuzzer", incarnation=1,
            seq=int(rng.integers(1, 1 << 40)), policy_version=1))
        for name, value in changes.items():
            if isinstance(value, np.ndarray):
                getattr(message, name).CopyFrom(to_tensor(value))
            elif isinstance(value, wire_pb2.Tensor):
                getattr(message, name).CopyFrom(value)
            elif name == "episode_returns":
                message.episode_returns[:] = value
            else:
                setattr(message, name, value)
        return message

    def insert(message) -> bytes:
        data = message if isinstance(message, bytes) else message.SerializeToString()
        return wire_pb2.InsertRequest(batch=data).SerializeToString()

    bad_floats = [np.nan, np.inf, -np.inf]
    kinds = [
        ("random request bytes",
         lambda: rng.bytes(int(rng.integers(1, 3000))), {INVALID, PRECONDITION}),
        ("random batch bytes",
         lambda: insert(rng.bytes(int(rng.integers(1, 3000)))), {INVALID, PRECONDITION}),
        ("observation of the wrong shape",
         lambda: insert(batch(observation=rng.normal(size=(8, 3)).astype(np.float32))),
         {INVALID}),
        ("fields of different lengths",
         lambda: insert(batch(reward=np.ones(7, np.float32))), {INVALID}),
        ("float64 observations",
         lambda: insert(batch(observation=rng.normal(size=(8, 4)))), {INVALID}),
        ("float actions for a discrete env",
         lambda: insert(batch(action=np.zeros(8, np.float32))), {INVALID}),
        ("action out of range",
         lambda: insert(batch(action=np.full(8, 7, np.int64))), {INVALID}),
        ("non-finite observation",
         lambda: insert(batch(observation=np.full((8, 4), rng.choice(bad_floats), np.float32))),
         {INVALID}),
        ("non-finite reward",
         lambda: insert(batch(reward=np.full(8, rng.choice(bad_floats), np.float32))), {INVALID}),
        ("non-finite episode return",
         lambda: insert(batch(episode_returns=[float(rng.choice(bad_floats))])), {INVALID}),
        ("unknown dtype",
         lambda: insert(batch(observation=wire_pb2.Tensor(dtype="object", shape=[8, 4],
                                                          data=b"\0" * 256))), {INVALID}),
        ("huge claimed shape",
         lambda: insert(batch(observation=wire_pb2.Tensor(
             dtype="float32", shape=[1 << 40, 1 << 40, 4], data=b"\0" * 128))), {INVALID}),
        ("empty batch",
         lambda: insert(batch(observation=np.zeros((0, 4), np.float32))), {INVALID}),
        ("unknown actor",
         lambda: insert(batch(actor_id=f"stranger-{rng.integers(1 << 30)}")), {PRECONDITION}),
        ("unknown run", lambda: insert(batch(run_id="not-this-run")), {PRECONDITION}),
        ("other protocol version",
         lambda: insert(batch(protocol_version=PROTOCOL_VERSION + 1)), {PRECONDITION}),
        ("replayed seq with new content",
         lambda: insert(batch(seq=0)), {"duplicate"}),
        ("replayed seq, same bytes", lambda: insert(legit_seq0), {"duplicate"}),
    ]
    for i in range(1_080):
        name, make, codes = kinds[i % len(kinds)]
        yield name, make(), codes
    # Over the size limits: refused by our check or by gRPC's message limit, either way with
    # RESOURCE_EXHAUSTED and nothing read.
    for size in (65 << 20, 80 << 20):
        yield "huge message", insert(rng.bytes(size)), {TOO_LARGE}


def test_hostile_batches_are_refused_and_never_reach_replay(tmp_path):
    port = free_port()
    token_file, token = write_token(tmp_path)
    run = tmp_path / "run"
    logs = [tmp_path / "learner.log", tmp_path / "actor.log"]
    learner = start(["learner", "--env", "CartPole-v1", "--algo", "dqn", "--port", port,
                     "--token-file", token_file, "--out", run, "--steps", 10**7,
                     "--updates-per-step", 0.25, "--eval-every", 10**9], logs[0])
    actor = start(["actor", "--learner", f"127.0.0.1:{port}", "--token-file", token_file,
                   "--actor-id", "honest"], logs[1])
    metadata = (("authorization", f"Bearer {token}"),)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_send_message_length", 128 << 20)])
    raw_insert = channel.unary_unary("/edge_rl.v1.Learner/Insert",
                                     response_deserializer=wire_pb2.InsertReply.FromString)
    try:
        wait_for(lambda: (status(port, token) or wire_pb2.StatusReply()).learner_updates > 0,
                 180, "the learner's first updates", logs)
        fuzzer = LearnerClient(f"127.0.0.1:{port}", "fuzzer", 1, token=token)
        run_id = fuzzer.hello_once().run_id
        rng = np.random.default_rng(0)
        legit = encode_batch(cartpole_batch(rng), run_id=run_id, actor_id="fuzzer",
                             incarnation=1, seq=0, policy_version=1)
        assert not fuzzer.insert(legit).result().duplicate  # the one batch that belongs
        updates_before = status(port, token).learner_updates

        outcomes = {}
        for name, request, codes in hostile_requests(rng, run_id, legit):
            try:
                reply = raw_insert(request, timeout=30, metadata=metadata)
                outcome = "duplicate" if reply.duplicate else "accepted"
            except grpc.RpcError as err:
                outcome = err.code()
            assert outcome in codes, f"{name}: got {outcome}, expected one of {codes}"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert sum(outcomes.values()) >= 1_000

        # The learner is still up and still training.
        wait_for(lambda: status(port, token).learner_updates > updates_before + 100, 120,
                 "more updates after the fuzzing", logs)
        refused = status(port, token).batches_refused
        assert refused >= sum(n for o, n in outcomes.items() if o not in ("duplicate", TOO_LARGE))
        fuzzer.close()
    finally:
        channel.close()
        assert stop(learner, signal.SIGTERM, timeout=120) == 0, logs[0].read_text()[-3000:]
        stop(actor, timeout=30)

    # Replay holds none of them: the fuzzer has exactly its one batch, byte for byte, and
    # every actor id in the ledger said Hello.
    ledger = final_ledger(run)
    assert {a for a, _ in ledger} == {"honest", "fuzzer"}
    assert {s for a, s in ledger if a == "fuzzer"} == {0}
    fuzzer_records = [payload for _, payload in read_records(run / "replay-log")
                      if wire_pb2.TrajectoryBatch.FromString(payload).actor_id == "fuzzer"]
    assert fuzzer_records == [legit]
