"""The replay log: records come back whole and in order, a torn tail is cut, fsync in groups."""

import os
import threading

import numpy as np

from edge_rl.transport.replay_log import HEADER, ReplayLog, read_records, segments


def test_records_come_back_in_order_from_any_position(tmp_path):
    log = ReplayLog(tmp_path, segment_bytes=100)
    payloads = [bytes([i]) * (10 + i) for i in range(20)]
    ends = [log.append(p) for p in payloads]
    assert log.wait_durable(ends[-1], timeout=10)
    log.close()
    assert len(segments(tmp_path)) > 3  # rotated at 100 bytes
    assert [p for _, p in read_records(tmp_path)] == payloads
    assert [p for _, p in read_records(tmp_path, ends[6])] == payloads[7:]
    assert [end for end, _ in read_records(tmp_path)] == ends


def test_a_torn_tail_is_cut_and_appends_go_on_in_a_new_segment(tmp_path):
    log = ReplayLog(tmp_path)
    for i in range(3):
        log.append(b"batch-%d" % i)
    log.close()
    last = tmp_path / f"{segments(tmp_path)[-1]:012d}.log"
    with open(last, "ab") as f:  # a crash of the machine mid-write: half a record
        f.write(HEADER.pack(100, 0) + b"only part")
    size_before = last.stat().st_size
    reopened = ReplayLog(tmp_path)
    assert last.stat().st_size < size_before
    reopened.append(b"after")
    reopened.close()
    assert [p for _, p in read_records(tmp_path)] == [b"batch-0", b"batch-1", b"batch-2",
                                                       b"after"]


def test_a_corrupt_record_ends_the_readable_log(tmp_path):
    log = ReplayLog(tmp_path)
    log.append(b"good")
    end = log.append(b"flipped")
    log.close()
    path = tmp_path / f"{end[0]:012d}.log"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert [p for _, p in read_records(tmp_path)] == [b"good"]


def test_one_fsync_serves_many_appends(tmp_path):
    log = ReplayLog(tmp_path)
    positions = []

    def writer():
        for _ in range(200):
            positions.append(log.append(os.urandom(2000)))

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert log.wait_durable(max(positions), timeout=30)
    assert log.syncs < 800  # grouped: far fewer fsyncs than appends
    log.close()
    assert len(list(read_records(tmp_path))) == 800


def test_forget_before_keeps_what_a_checkpoint_needs(tmp_path):
    log = ReplayLog(tmp_path, segment_bytes=50)
    ends = [log.append(b"x" * 30) for _ in range(6)]
    log.forget_before(ends[3])
    kept = [p for _, p in read_records(tmp_path, ends[2])]
    assert len(kept) == 3
    log.close()


def test_frames_are_stored_compressed_and_read_back_as_sent(tmp_path):
    """A log made with `compress` (an image run's) keeps what compresses zlib-compressed and
    the rest as it is, and reads every record back byte for byte, next to records an
    uncompressed log wrote."""
    flat = np.zeros(4000, np.uint8).tobytes()  # compresses, as frames do
    noise = np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes()  # not
    plain = ReplayLog(tmp_path)
    plain.append(noise)
    plain.close()
    log = ReplayLog(tmp_path, compress=True)
    for payload in [flat, noise]:
        log.append(payload)
    log.close()
    payloads = [payload for _, payload in read_records(tmp_path)]
    assert payloads == [noise, flat, noise]
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("*.log"))
    assert on_disk < 2 * 4000 + 200  # the flat record went compressed, noise as it was
