"""The learner's gRPC service on loopback: status codes for bad input, dedupe, chunked policies.

No TensorFlow here: the service and the Exchange are plain Python; the learner side of the
Exchange is played by the test (take a batch, mark it inserted, ack it).
"""

import threading
import time

import grpc
import numpy as np
import pytest
from test_wire import transitions

from edge_rl.device import wire_pb2, wire_pb2_grpc
from edge_rl.device.client import LearnerClient
from edge_rl.device.errors import UserError
from edge_rl.device.exploration import ExplorationSettings
from edge_rl.device.link import Link
from edge_rl.device.spool import Spool, read_acked
from edge_rl.device.wire import POLICY_CHUNK_BYTES, PROTOCOL_VERSION, BatchCosts, encode_batch
from edge_rl.transport.exchange import Exchange, LearnerStopping, Ledger, PendingBatch
from edge_rl.transport.replay_log import ReplayLog
from edge_rl.transport.server import LearnerService, RunInfo, start_server


def cartpole_run(run_id: str = "run-1") -> RunInfo:
    """What the service tells actors of a small CartPole run; actor i explores to 0.1 * i."""
    return RunInfo(
        run_id=run_id, env_id="CartPole-v1", algo="dqn", observation_shape=(4,),
        action={"kind": "discrete", "n": 2}, batch_transitions=5, max_in_flight=2,
        lockstep=False, num_envs=1, seed=0,
        exploration=lambda i: ExplorationSettings(kind="epsilon_greedy", epsilon_end=0.1 * i),
    )


@pytest.fixture
def service(tmp_path):
    run = cartpole_run()
    exchange = Exchange(ReplayLog(tmp_path / "log"))
    server, port = start_server(LearnerService(run, exchange), 0, max_workers=8)
    client = LearnerClient(f"127.0.0.1:{port}", "actor-a", incarnation=11)
    stop = threading.Event()

    def learner():  # insert and ack whatever arrives
        while not stop.is_set():
            try:
                pending = exchange.batches.get(timeout=0.05)
            except Exception:
                continue
            exchange.inserted(pending)
            pending.acked.set()

    thread = threading.Thread(target=learner, daemon=True)
    thread.start()
    yield client, exchange, port
    stop.set()
    exchange.stopping.set()
    client.close()
    server.stop(grace=0)


def insert_raw(port, data):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return wire_pb2_grpc.LearnerStub(channel).Insert(
            wire_pb2.InsertRequest(batch=data), timeout=10
        )


def batch_bytes(seq, run_id="run-1", incarnation=11, actor_id="actor-a", costs=None, **kw):
    return encode_batch(transitions(**kw), run_id=run_id, actor_id=actor_id,
                        incarnation=incarnation, seq=seq, policy_version=1, costs=costs)


def test_hello_gives_run_settings_and_rejects_other_protocol_versions(service):
    client, exchange, port = service
    reply = client.hello()
    assert (reply.run_id, reply.env_id, reply.algo) == ("run-1", "CartPole-v1", "dqn")
    assert ExplorationSettings.from_json(reply.exploration_json).kind == "epsilon_greedy"
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        with pytest.raises(grpc.RpcError) as info:
            wire_pb2_grpc.LearnerStub(channel).Hello(
                wire_pb2.HelloRequest(protocol_version=99, actor_id="x"), timeout=5
            )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "99" in info.value.details() and str(PROTOCOL_VERSION) in info.value.details()


def test_bad_batches_get_status_codes_and_the_service_stays_up(service):
    client, exchange, port = service
    client.hello()
    cases = [
        (b"\x08\xff\xff garbage", grpc.StatusCode.INVALID_ARGUMENT),
        (batch_bytes(0, obs_dim=3), grpc.StatusCode.INVALID_ARGUMENT),
        (batch_bytes(0, run_id="other-run"), grpc.StatusCode.FAILED_PRECONDITION),
        (batch_bytes(0, actor_id="stranger"), grpc.StatusCode.FAILED_PRECONDITION),  # no Hello
        # an actor's energy and times are added to the run's: nothing negative or non-finite
        (batch_bytes(0, costs=BatchCosts(joules=-1.0, energy_method="cpu")),
         grpc.StatusCode.INVALID_ARGUMENT),
        (batch_bytes(0, costs=BatchCosts(times={"env": float("nan")})),
         grpc.StatusCode.INVALID_ARGUMENT),
    ]
    for data, code in cases:
        with pytest.raises(grpc.RpcError) as info:
            insert_raw(port, data)
        assert info.value.code() == code, info.value.details()
        assert info.value.details()
    reply = insert_raw(port, batch_bytes(0))  # still serving
    assert reply.seq == 0 and not reply.duplicate


def test_duplicates_are_acked_but_inserted_once(service):
    client, exchange, port = service
    client.hello()
    assert not insert_raw(port, batch_bytes(0)).duplicate
    assert insert_raw(port, batch_bytes(0)).duplicate
    assert not insert_raw(port, batch_bytes(1)).duplicate
    assert ("actor-a", 0) in exchange.ledger and ("actor-a", 1) in exchange.ledger
    assert exchange.ledger.next_seq("actor-a") == 2
    assert client.hello().next_seq == 2  # a restarted actor continues its numbering


def test_a_stopped_learner_refuses_a_batch_without_logging_it(service):
    """Once the learner stops taking batches, none reaches the replay log: its final
    checkpoint, its summary and a resumed run count the same env steps."""
    client, exchange, port = service
    client.hello()
    assert not insert_raw(port, batch_bytes(0)).duplicate
    logged = exchange.log.bytes_written
    exchange.stop_taking()
    with pytest.raises(grpc.RpcError) as info:
        insert_raw(port, batch_bytes(1))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "stopping" in info.value.details()
    # and the Exchange itself, for a request that passed the service's check just before
    with pytest.raises(LearnerStopping):
        exchange.submit(PendingBatch(1, "actor-a", 1, transitions(), [], 5), b"payload")
    assert exchange.log.bytes_written == logged
    assert ("actor-a", 1) not in exchange.ledger and exchange.batches.empty()


def test_a_batch_in_replay_when_the_learner_stops_still_gets_its_ok(tmp_path):
    """The learner stops taking batches, then releases the acks of those in its replay (they
    are in its final checkpoint). An Insert waiting for such an ack must not be refused in
    between, or the batch is in the learner's ledger while its actor never hears it arrived.
    A batch still queued is refused: the actor keeps it."""
    run = cartpole_run()
    exchange = Exchange(ReplayLog(tmp_path / "log"))
    server, port = start_server(LearnerService(run, exchange), 0, max_workers=8)
    client = LearnerClient(f"127.0.0.1:{port}", "actor-a", incarnation=11)
    try:
        client.hello()
        in_replay = client.insert(batch_bytes(0))
        taken = exchange.batches.get(timeout=10)
        exchange.inserted(taken)  # in replay, its ack held
        queued = client.insert(batch_bytes(1))
        deadline = time.monotonic() + 10
        while exchange.batches.empty() and time.monotonic() < deadline:
            time.sleep(0.02)  # batch 1 accepted, never taken
        exchange.stop_taking()
        time.sleep(1.5)  # the waiting Inserts look at `stopping` every 0.5 s
        with pytest.raises(grpc.RpcError) as info:
            queued.result(timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not in_replay.done()
        taken.acked.set()  # the learner releases the acks of what is in its replay
        assert in_replay.result(timeout=10).seq == 0
    finally:
        client.close()
        server.stop(grace=0)
        exchange.log.close()


def test_policies_larger_than_a_message_arrive_whole(service):
    client, exchange, port = service
    assert client.fetch_policy(0) is None
    model = np.random.default_rng(1).bytes(3 * POLICY_CHUNK_BYTES + 5)
    exchange.put_policy(4, model)
    assert client.fetch_policy(0) == (4, model)
    assert client.fetch_policy(4) is None


def test_client_reports_refusals_in_one_line():
    client = LearnerClient("127.0.0.1:1", "a", 1)
    with pytest.raises(UserError, match="cannot reach a learner"):
        client.hello(wait_seconds=0.5)


def test_ledger_state_round_trip():
    ledger = Ledger()
    for seq in (0, 1, 2, 5, 7):
        ledger.add("a", seq)
    restored = Ledger(ledger.state())
    assert [("a", s) in restored for s in range(9)] == [
        True, True, True, False, False, True, False, True, False]
    assert restored.next_seq("a") == 8


def self_signed(folder):
    """A certificate for 127.0.0.1 and its key, made with the openssl command."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", key, "-out", cert, "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


def test_tls_with_tokens(tmp_path):
    run = cartpole_run("run-tls")
    cert, key = self_signed(tmp_path)
    token = "t" * 32
    (tmp_path / "tokens").write_text(f"# one per board\n{'u' * 32}\n{token}\n")
    server, port = start_server(LearnerService(run, Exchange(ReplayLog(tmp_path / "log"))), 0,
                                max_workers=4, token_file=str(tmp_path / "tokens"),
                                tls_cert=str(cert), tls_key=str(key))
    try:
        address = f"127.0.0.1:{port}"
        good = LearnerClient(address, "a", 1, token=token, tls_ca=cert)
        assert good.hello_once().run_id == "run-tls"
        for client in (LearnerClient(address, "a", 1, token="w" * 32, tls_ca=cert),
                       LearnerClient(address, "a", 1, tls_ca=cert)):
            with pytest.raises(grpc.RpcError) as info:
                client.hello_once()
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            client.close()
        plain = LearnerClient(address, "a", 1, token=token)  # no TLS: no connection
        with pytest.raises(grpc.RpcError) as info:
            plain.hello_once(timeout=2)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        plain.close()
        good.close()
    finally:
        server.stop(grace=0)


def test_a_non_loopback_address_needs_a_token(tmp_path):
    with pytest.raises(UserError, match="without --token-file"):
        start_server(None, 0, max_workers=1, host="0.0.0.0")


def test_ledger_reads_the_old_prefix_format_and_keeps_ranges_few():
    old = Ledger({"a": [3, [5, 7]]})
    assert [("a", s) in old for s in range(9)] == [
        True, True, True, False, False, True, False, True, False]
    ledger = Ledger()
    for seq in [*range(0, 100), *range(101, 200)]:  # seq 100 was refused: one gap, two ranges
        ledger.add("a", seq)
    assert ledger.state() == {"a": [[0, 100], [101, 200]]}
    ledger.add("a", 100)
    assert ledger.state() == {"a": [[0, 200]]} and ledger.count("a") == 200


def test_an_ok_that_comes_after_a_refusal_is_still_recorded(tmp_path):
    """A stopping learner refuses a new batch at once while an older one, already in its
    replay, still waits for its fsync: the actor's link sees the refusal first and goes down.
    Stopping, it must still wait for the older batch's OK and record it as acked, or the
    learner's ledger holds a batch its actor believes was never delivered."""
    run = cartpole_run()
    replay_log = ReplayLog(tmp_path / "log")
    exchange = Exchange(replay_log)
    server, port = start_server(LearnerService(run, exchange), 0, max_workers=8)
    client = LearnerClient(f"127.0.0.1:{port}", "actor-a", incarnation=11)
    hello = client.hello()
    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    spool.join_run(hello.run_id, hello.next_seq)
    link = Link(client, spool, window=2, session=hello.learner_session)
    try:
        replay_log._fd_lock.acquire()  # the disk is slow: nothing becomes durable for now
        spool.add(0, batch_bytes(0))
        link.wake()
        pending = exchange.batches.get(timeout=10)
        exchange.inserted(pending)  # in the learner's replay and ledger ...
        pending.acked.set()  # ... and let go; its OK now waits only for the fsync
        exchange.stopping.set()
        spool.add(1, batch_bytes(1))
        link.wake()  # refused at once: "the learner is stopping"
        deadline = time.monotonic() + 10
        while link.connected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not link.connected
        threading.Timer(0.5, replay_log._fd_lock.release).start()
        link.stop()
        assert ("actor-a", 0) in exchange.ledger
        assert spool.unacked() == [1]  # 0 acked; 1 kept for whoever takes it next
        assert 0 in read_acked(tmp_path / "spool")
    finally:
        client.close()
        server.stop(grace=0)
        replay_log.close()
