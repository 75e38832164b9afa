"""The replay log: every batch the learner accepts, appended to disk before it is acked.

A checkpoint holds the replay as it was at one position of this log; after a crash the learner
restores the checkpoint and inserts the log's records after that position again, so every
batch it acked is back in replay exactly once.

The log is a folder of segment files (`000000000001.log`, ...), each a sequence of records
`[u32 stored length][u32 crc32 of what is stored][stored bytes]`; the length's top bit says
the stored bytes are the payload zlib-compressed. A log made with `compress` (image runs)
stores each payload compressed where that saves a fifth or more: frames compress well (a
batch of Atari stacks, each frame sent once, ~60x at zlib level 1; MinAtar's planes ~20x),
float vectors hardly (stored as they are). Appends go through `os.write` (one
syscall per record: a killed process never leaves half a record in the page cache); a
background thread fsyncs in groups: every fsync covers all the appends made before it
started, so one fsync serves many batches when they arrive fast. `wait_durable` blocks until a
position is fsync'd. A torn record at the end (a crash of the machine mid-write) is cut off when
the log is opened again; records after it were never fsync'd, hence never acked.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

HEADER = struct.Struct("<II")
SEGMENT_BYTES = 64 << 20
MAX_RECORD_BYTES = 1 << 30
COMPRESSED = 1 << 31  # in the length field: the stored bytes are zlib-compressed
COMPRESSION_LEVEL = 1  # ~870 MB/s on Atari batches here; level 6 compresses ~2x more at 1/3
KEEP_IF_BELOW = 0.8  # the compressed form is stored when it is under this share of the raw

Position = tuple[int, int]  # (segment number, byte offset in it); tuples compare in log order


def _segment_name(number: int) -> str:
    return f"{number:012d}.log"


def segments(folder: Path) -> list[int]:
    """Segment numbers in the folder, oldest first."""
    return sorted(int(p.stem) for p in folder.glob("*.log") if p.stem.isdigit())


def read_records(folder: Path, start: Position = (0, 0)) -> Iterator[tuple[Position, bytes]]:
    """(end position, payload) of every whole record from `start` on, in log order.

    Stops at the first torn or corrupt record: nothing after it was ever acknowledged."""
    for number in segments(folder):
        if number < start[0]:
            continue
        with open(folder / _segment_name(number), "rb") as f:
            offset = start[1] if number == start[0] else 0
            f.seek(offset)
            while True:
                header = f.read(HEADER.size)
                if len(header) < HEADER.size:
                    if header:
                        return  # torn header
                    break
                field, crc = HEADER.unpack(header)
                length = field & ~COMPRESSED
                stored = f.read(length) if length <= MAX_RECORD_BYTES else b""
                if len(stored) != length or zlib.crc32(stored) != crc:
                    return
                offset += HEADER.size + length
                yield (number, offset), (zlib.decompress(stored) if field & COMPRESSED
                                         else stored)


class ReplayLog:
    """Append-only, segmented, group-fsync'd log of accepted batches."""

    def __init__(self, folder: Path, segment_bytes: int = SEGMENT_BYTES, compress: bool = False):
        self.folder = Path(folder)
        self.compress = compress
        self.folder.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self._append_lock = threading.Lock()
        self._fd_lock = threading.Lock()  # held while the fd is fsync'd or swapped
        self._durable_changed = threading.Condition()
        self._dirty = threading.Event()
        self._closed = False
        self.syncs = 0
        self.bytes_written = 0
        self._cut_torn_tail()
        # Appends always start a fresh segment: a resumed learner never writes into a file
        # whose tail it has only read.
        existing = segments(self.folder)
        self._segment = (existing[-1] + 1) if existing else 1
        self._fd = self._open(self._segment)
        self._written: Position = (self._segment, 0)
        self._durable: Position = self._written
        self._syncer = threading.Thread(target=self._sync_loop, name="replay-log-sync",
                                        daemon=True)
        self._syncer.start()

    def _open(self, number: int) -> int:
        fd = os.open(self.folder / _segment_name(number), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o644)
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the new file's name is durable too
        finally:
            os.close(dir_fd)
        return fd

    def _cut_torn_tail(self) -> None:
        existing = segments(self.folder)
        if not existing:
            return
        last = existing[-1]
        path = self.folder / _segment_name(last)
        end = 0
        for (_, offset), _ in read_records(self.folder, (last, 0)):
            end = offset
        if path.stat().st_size != end:
            log.warning("replay log: cutting a torn record off the end of %s at byte %d",
                        path.name, end)
            os.truncate(path, end)

    # -- writing --------------------------------------------------------------------------------

    def append(self, payload: bytes) -> Position:
        """Append one record; returns its end position (durable once `wait_durable` says so)."""
        stored, flag = payload, 0
        if self.compress:
            packed = zlib.compress(payload, COMPRESSION_LEVEL)
            if len(packed) < KEEP_IF_BELOW * len(payload):
                stored, flag = packed, COMPRESSED
        record = HEADER.pack(len(stored) | flag, zlib.crc32(stored)) + stored
        with self._append_lock:
            if self._written[1] > 0 and self._written[1] + len(record) > self.segment_bytes:
                self._rotate()
            os.write(self._fd, record)
            self._written = (self._segment, self._written[1] + len(record))
            self.bytes_written += len(record)
            position = self._written
        self._dirty.set()
        return position

    def _rotate(self) -> None:
        with self._fd_lock:
            os.fsync(self._fd)
            os.close(self._fd)
            self._segment += 1
            self._fd = self._open(self._segment)
            durable = self._written
            self._written = (self._segment, 0)
        self._set_durable(durable)

    def _sync_loop(self) -> None:
        while not self._closed:
            self._dirty.wait(timeout=1.0)
            self._dirty.clear()
            with self._fd_lock:
                if self._closed:
                    return
                target = self._written
                if target <= self._durable:
                    continue
                os.fsync(self._fd)
                self.syncs += 1
            self._set_durable(target)

    def _set_durable(self, position: Position) -> None:
        with self._durable_changed:
            if position > self._durable:
                self._durable = position
            self._durable_changed.notify_all()

    @property
    def written(self) -> Position:
        return self._written

    @property
    def durable(self) -> Position:
        return self._durable

    def wait_durable(self, position: Position, timeout: float | None = None) -> bool:
        """Block until everything up to `position` is fsync'd; False on timeout."""
        with self._durable_changed:
            return self._durable_changed.wait_for(lambda: self._durable >= position, timeout)

    def forget_before(self, position: Position) -> None:
        """Delete whole segments that end before `position` (no checkpoint needs them)."""
        for number in segments(self.folder):
            if number < position[0] and number != self._segment:
                (self.folder / _segment_name(number)).unlink(missing_ok=True)

    def close(self) -> None:
        with self._append_lock, self._fd_lock:
            if self._closed:
                return
            os.fsync(self._fd)
            os.close(self._fd)
            self._closed = True
            durable = self._written
        self._set_durable(durable)
        self._dirty.set()
