"""The actor's spool: survives a restart, bounded (oldest dropped, counted), one run at a time."""

import pytest

from edge_rl.device.errors import UserError
from edge_rl.device.link import BACKOFF_MAX, backoff
from edge_rl.device.spool import Spool, read_acked


def test_a_restarted_actor_finds_its_id_next_seq_and_unacked_batches(tmp_path):
    spool = Spool(tmp_path, max_bytes=10_000)
    spool.claim("pi-1")
    spool.join_run("run-1", learner_next_seq=0)
    for _ in range(5):
        seq = spool.next_seq()
        spool.add(seq, b"batch %d" % seq)
    spool.settle(0, acked=True)
    spool.settle(1, acked=False)  # refused by the learner for good
    spool.settle(2, acked=True)

    again = Spool(tmp_path, max_bytes=10_000)  # the actor process restarted
    assert again.actor_id == "pi-1"
    assert again.unacked() == [3, 4]
    assert again.read(4) == b"batch 4"
    assert again.next_seq() == 5
    assert again.rejected == 1
    assert read_acked(tmp_path) == [0, 2]
    with pytest.raises(UserError, match="belongs to actor 'pi-1'"):
        again.claim("someone-else")


def test_an_actor_killed_while_settling_an_ack_records_it_once(tmp_path):
    spool = Spool(tmp_path, max_bytes=10_000)
    spool.join_run("run-1", learner_next_seq=0)
    for _ in range(3):
        seq = spool.next_seq()
        spool.add(seq, b"batch %d" % seq)
    spool.settle(0, acked=True)
    # SIGKILL inside settle(1): the ack is in acked.log, the batch file still on disk
    with open(tmp_path / "acked.log", "a") as f:
        f.write("1\n")

    again = Spool(tmp_path, max_bytes=10_000)
    assert again.unacked() == [2]  # seq 1 is not resent, so not acked (and recorded) again
    assert not list((tmp_path / "batches").glob("0000000000000001.*"))
    again.settle(2, acked=True)
    assert read_acked(tmp_path) == [0, 1, 2]


def test_a_full_spool_drops_the_oldest_and_counts_them(tmp_path):
    for folder in (tmp_path, None):  # on disk and in memory alike
        spool = Spool(folder, max_bytes=350)
        spool.join_run("run-1", 0)
        for _ in range(10):
            seq = spool.next_seq()
            spool.add(seq, bytes(100))
        assert spool.unacked() == [7, 8, 9]
        assert spool.dropped == 7
        assert spool.bytes == 300


def test_batches_of_another_run_are_dropped_and_seqs_never_go_back(tmp_path):
    spool = Spool(tmp_path, max_bytes=10_000)
    spool.join_run("run-1", 0)
    for _ in range(3):
        spool.add(spool.next_seq(), b"old")
    assert spool.join_run("run-2", learner_next_seq=0) == 3
    assert spool.unacked() == [] and spool.rejected == 3
    assert spool.next_seq() == 3  # seqs keep growing: no (actor, seq) is ever reused
    spool.join_run("run-2", learner_next_seq=40)  # the learner has seen more of this actor
    assert spool.next_seq() == 40


def test_backoff_doubles_with_jitter_up_to_a_cap():
    import random

    rng = random.Random(0)
    first = [backoff(0, rng) for _ in range(200)]
    assert 0.25 <= min(first) and max(first) <= 0.75 and max(first) - min(first) > 0.2
    assert all(backoff(20, rng) <= 1.5 * BACKOFF_MAX for _ in range(100))
    assert 0.5 * 4 <= backoff(3, rng) <= 1.5 * 4
    # `edge-rl actor --reconnect-max` caps it lower, and its default is this cap
    assert all(0.5 <= backoff(20, rng, cap=1.0) <= 1.5 for _ in range(100))
    from edge_rl.cli import RECONNECT_MAX

    assert RECONNECT_MAX == BACKOFF_MAX
