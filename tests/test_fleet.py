"""A learner and two actors in real processes on loopback, killed with SIGKILL and restarted.

At the end, the learner's ledger of inserted (actor id, seq) must equal the union of what the
actors recorded as acked, with no duplicate: nothing acked was lost, nothing was inserted twice.
"""

import json
import signal

import grpc
import pytest
from fleet import (
    acked,
    final_ledger,
    free_port,
    spooled,
    start,
    status,
    stop,
    wait_for,
    write_token,
)

from edge_rl.device import wire_pb2, wire_pb2_grpc
from edge_rl.device.client import LearnerClient
from edge_rl.transport.replay_log import read_records

pytestmark = pytest.mark.slow


def inserted(port, token, actor_id):
    reply = status(port, token)
    if reply is None:
        return 0
    return next((a.batches_inserted for a in reply.actors if a.actor_id == actor_id), 0)


def test_kills_and_restarts_lose_nothing_and_insert_nothing_twice(tmp_path):
    port = free_port()
    token_file, token = write_token(tmp_path)
    run = tmp_path / "run"
    # The run never reaches its budget: the test ends it with Ctrl-C once the actors have
    # delivered to the resumed learner what they spooled while it was down, so nothing here
    # depends on how fast the machine trains. The actors retry at most 1 s apart
    # (--reconnect-max; by default up to 22 s).
    learner_args = ["learner", "--env", "CartPole-v1", "--algo", "dqn", "--port", port,
                    "--token-file", token_file, "--out", run, "--steps", 10**7, "--seed", 0,
                    "--updates-per-step", 1, "--batch-transitions", 32,
                    "--checkpoint-every", 4_000, "--eval-every", 10**9, "--eval-episodes", 2]
    spools = {"a": tmp_path / "spool-a", "b": tmp_path / "spool-b"}
    logs = [tmp_path / "learner.log", tmp_path / "a.log", tmp_path / "b.log"]

    def actor(name):
        return start(["actor", "--learner", f"127.0.0.1:{port}", "--token-file", token_file,
                      "--spool", spools[name], "--actor-id", f"board-{name}",
                      "--reconnect-max", 1],
                     tmp_path / f"{name}.log")

    learner = start(learner_args, logs[0])
    actors = {"a": actor("a"), "b": actor("b")}
    try:
        wait_for(lambda: all(inserted(port, token, f"board-{n}") >= 20 for n in "ab"), 180,
                 "both actors' batches in replay", logs)

        # Who may join: no token, a wrong token, for every kind of call.
        for bad in (None, "x" * 32):
            client = LearnerClient(f"127.0.0.1:{port}", "intruder", 1, token=bad)
            with pytest.raises(grpc.RpcError) as refused:
                client.status()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as refused:
                client.hello_once()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as refused:
                client.insert(b"anything").result()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            client.close()
        stub_channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        with pytest.raises(grpc.RpcError) as refused:
            list(wire_pb2_grpc.LearnerStub(stub_channel).GetPolicy(
                wire_pb2.PolicyRequest(), timeout=5))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stub_channel.close()

        # An actor killed mid-run comes back with its id and goes on with the next seq.
        stop(actors["a"], signal.SIGKILL)
        _, before = acked(spools["a"])
        next_seq = json.loads((spools["a"] / "state.json").read_text())["next_seq"]
        actors["a"] = actor("a")
        wait_for(lambda: any(s >= next_seq for s in acked(spools["a"])[1]), 60,
                 "the restarted actor's new batches acked", logs)
        assert acked(spools["a"])[0] == "board-a"

        # The learner killed mid-run: the actors spool, then deliver to the resumed learner.
        wait_for(lambda: (status(port, token) or wire_pb2.StatusReply()).env_steps >= 10_000,
                 180, "10k env steps", logs)
        stop(learner, signal.SIGKILL)
        during_outage = wait_for(
            lambda: {n: spooled(spools[n]) for n in "ab"}
            if all(len(spooled(spools[n])) >= 5 for n in "ab") else None,
            60, "the actors to spool while the learner is down", logs)
        learner = start(["learner", "--resume", "--out", run, "--port", port], logs[0])
        wait_for(lambda: all(during_outage[n] <= set(acked(spools[n])[1]) for n in "ab"), 180,
                 "the resumed learner to ack what the actors spooled", logs)
        # Ctrl-C: the learner stops taking batches, writes its final checkpoint and tells
        # the actors that the run is over
        assert stop(learner, signal.SIGINT, timeout=120) == 0, logs[0].read_text()[-3000:]
        for name in "ab":  # the learner's last heartbeats told them to stop
            assert actors[name].wait(timeout=30) == 0, logs[1 + "ab".index(name)].read_text()
    finally:
        for process in (learner, *actors.values()):
            stop(process, signal.SIGKILL, timeout=10)

    ledger = final_ledger(run)
    union = set()
    for name in "ab":
        actor_id, seqs = acked(spools[name])
        assert len(seqs) == len(set(seqs)), f"{actor_id} recorded an ack twice"
        union |= {(actor_id, s) for s in seqs}
        # what was spooled while the learner was down reached the resumed learner
        assert {(actor_id, s) for s in during_outage[name]} <= ledger
    assert ledger == union, (
        f"in the ledger but never acked: {sorted(ledger - union)[:5]}; "
        f"acked but not in the ledger: {sorted(union - ledger)[:5]}")
    assert before and max(s for a, s in union if a == "board-a") >= next_seq

    # The replay log holds every batch once (what is left of it after checkpoints).
    records = [(b.actor_id, b.seq) for b in (
        wire_pb2.TrajectoryBatch.FromString(payload)
        for _, payload in read_records(run / "replay-log"))]
    assert records and len(records) == len(set(records))

    # Remote actors (not the learner's children) report their energy and loop times with
    # their batches; the learner adds them to its own machine's figure.
    summary = json.loads((run / "summary.json").read_text())
    energy = summary["energy"]
    assert energy["remote_actors_joules"] > 0 and energy["learner_machine_joules"] > 0
    assert "remote actors: cpu-seconds x 10 W/core" in energy["method"]
    assert energy["joules"] == pytest.approx(
        energy["remote_actors_joules"] + energy["learner_machine_joules"], abs=0.2)
    assert all(summary["time_breakdown"]["actors"][part] > 0 for part in ("inference", "env"))
