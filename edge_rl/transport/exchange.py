"""What the learner loop and the gRPC service share: accepted batches, the ledger, the actors.

An accepted batch goes, under one lock, through: the duplicate check (the ledger, plus the
batches accepted but not yet in replay), the replay log (appended, fsync'd later in a group),
and the learner's queue. Doing the three together keeps the log's order and the queue's order
the same, so "replay as of log position P" means exactly the records before P.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field

from edge_rl.core import PolicyExchange
from edge_rl.device.wire import BatchCosts, Transitions
from edge_rl.transport.replay_log import Position, ReplayLog

log = logging.getLogger(__name__)


def replay_key(actor_id: str, incarnation: int) -> int:
    """The replay's stream key of one actor incarnation: stable across learner restarts,
    so an episode is never spliced onto another actor's."""
    digest = hashlib.blake2b(f"{actor_id}\0{incarnation}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@dataclass
class PendingBatch:
    """A validated batch on its way into replay; `acked` is set once the learner lets it go."""

    actor_key: int
    actor_id: str
    seq: int
    transitions: Transitions
    episode_returns: list[float]
    actor_env_steps: int
    policy_version: int = 0  # of the policy that acted
    costs: BatchCosts = field(default_factory=BatchCosts)  # the actor's energy and times
    log_position: Position = (0, 0)  # end of its record in the replay log
    acked: threading.Event = field(default_factory=threading.Event)


class Ledger:
    """Which (actor id, seq) pairs are in replay: per actor, sorted disjoint [start, end) ranges.

    Seqs arrive mostly in order, so an actor's ranges stay few; a rejected batch leaves a gap
    that never closes, which costs one range, not one entry per later seq."""

    def __init__(self, state: dict | None = None):
        self.ranges: dict[str, list[list[int]]] = {}
        for actor, ranges in (state or {}).items():
            if len(ranges) == 2 and isinstance(ranges[0], int):  # older: [prefix, extra]
                prefix, extra = ranges
                self.ranges[actor] = [[0, prefix]] if prefix else []
                for seq in extra:
                    self.add(actor, int(seq))
            else:
                self.ranges[actor] = [[int(a), int(b)] for a, b in ranges]

    def _find(self, ranges: list[list[int]], seq: int) -> int:
        """Index of the last range starting at or before seq (-1 if none)."""
        return bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1

    def __contains__(self, item: tuple[str, int]) -> bool:
        actor_id, seq = item
        ranges = self.ranges.get(actor_id, [])
        i = self._find(ranges, seq)
        return i >= 0 and seq < ranges[i][1]

    def add(self, actor_id: str, seq: int) -> None:
        ranges = self.ranges.setdefault(actor_id, [])
        i = self._find(ranges, seq)
        if i >= 0 and seq < ranges[i][1]:
            return
        joins_left = i >= 0 and ranges[i][1] == seq
        joins_right = i + 1 < len(ranges) and ranges[i + 1][0] == seq + 1
        if joins_left and joins_right:
            ranges[i][1] = ranges[i + 1][1]
            del ranges[i + 1]
        elif joins_left:
            ranges[i][1] = seq + 1
        elif joins_right:
            ranges[i + 1][0] = seq
        else:
            ranges.insert(i + 1, [seq, seq + 1])

    def next_seq(self, actor_id: str) -> int:
        """One past the highest seq in replay from this actor (0 if none)."""
        ranges = self.ranges.get(actor_id)
        return ranges[-1][1] if ranges else 0

    def count(self, actor_id: str) -> int:
        return sum(b - a for a, b in self.ranges.get(actor_id, []))

    def pairs(self) -> set[tuple[str, int]]:
        return {(a, s) for a, ranges in self.ranges.items() for lo, hi in ranges
                for s in range(lo, hi)}

    def state(self) -> dict:
        return {actor: [list(r) for r in ranges] for actor, ranges in self.ranges.items()}


@dataclass
class ActorRecord:
    """What the learner knows about one actor (for `edge-rl status` and the gone check)."""

    actor_id: str
    index: int
    host: str = ""
    incarnation: int = 0
    runtime: str = ""
    last_seen: float = field(default_factory=time.monotonic)
    policy_version: int = 0
    steps_per_second: float = 0.0
    env_steps: int = 0
    batches_spooled: int = 0
    batches_rejected: int = 0
    batches_dropped: int = 0
    gone: bool = False


class LearnerStopping(RuntimeError):
    """A batch offered once the learner has stopped taking them."""


class Exchange(PolicyExchange):
    """Accepted batches for the learner, the ledger, the newest policy and the actor table."""

    def __init__(self, replay_log: ReplayLog, ledger: Ledger | None = None,
                 actor_index: dict[str, int] | None = None):
        self.batches: queue.Queue[PendingBatch] = queue.Queue()
        self.log = replay_log
        self.ledger = ledger or Ledger()
        self.stopping = threading.Event()
        self.session = uuid.uuid4().hex  # a new learner process is a new session
        self.started = time.monotonic()
        self.refused = 0  # Insert calls answered with an error
        self.told_to_stop: set[str] = set()  # actors whose heartbeat said stop
        self._inserts_open = 0
        self.progress = {"env_steps": 0, "updates": 0}  # written by the learner loop
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], PendingBatch] = {}
        self._policy: tuple[int, bytes] = (0, b"")
        self.actors: dict[str, ActorRecord] = {
            actor_id: ActorRecord(actor_id, index, last_seen=0.0, gone=True)
            for actor_id, index in (actor_index or {}).items()
        }

    # -- policies -------------------------------------------------------------------------------

    def put_policy(self, version: int, model: bytes) -> None:
        with self._lock:
            self._policy = (version, model)

    @property
    def policy(self) -> tuple[int, bytes]:
        return self._policy

    # -- actors ---------------------------------------------------------------------------------

    def hello(self, actor_id: str, incarnation: int, host: str, runtime: str) -> ActorRecord:
        """Register (or refresh) an actor; its index, which picks its exploration, is kept for
        the run's lifetime."""
        with self._lock:
            record = self.actors.get(actor_id)
            if record is None:
                record = self.actors[actor_id] = ActorRecord(actor_id, len(self.actors))
            record.host, record.incarnation, record.runtime = host, incarnation, runtime
            record.last_seen, record.gone = time.monotonic(), False
            return record

    def known(self, actor_id: str) -> bool:
        return actor_id in self.actors

    def actor_index(self) -> dict[str, int]:
        return {a: r.index for a, r in self.actors.items()}

    def heartbeat(self, actor_id: str, **fields) -> None:
        record = self.actors.get(actor_id)
        if record is None:
            return
        for name, value in fields.items():
            setattr(record, name, value)
        if record.gone:
            log.info("actor %s is back", actor_id)
        record.last_seen, record.gone = time.monotonic(), False

    def sweep(self, timeout: float) -> None:
        """Mark actors silent for longer than `timeout` seconds as gone."""
        now = time.monotonic()
        for record in list(self.actors.values()):
            if not record.gone and now - record.last_seen > timeout:
                record.gone = True
                log.warning("actor %s (%s) silent for %.0f s: marked gone", record.actor_id,
                            record.host or "unknown host", now - record.last_seen)

    def wait_for_goodbyes(self, timeout: float) -> None:
        """Once `stopping` is set: wait until every Insert is answered and every live actor
        has been told to stop by a heartbeat (or `timeout` passes), so that no actor misses
        an ack or the stop."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = {a for a, r in self.actors.items() if not r.gone}
            if self._inserts_open == 0 and live <= self.told_to_stop:
                return
            time.sleep(0.05)

    @contextlib.contextmanager
    def answering(self):
        """Counts an Insert call while it runs."""
        with self._lock:
            self._inserts_open += 1
        try:
            yield
        finally:
            with self._lock:
                self._inserts_open -= 1

    # -- batches --------------------------------------------------------------------------------

    def submit(self, batch: PendingBatch, payload: bytes) -> tuple[PendingBatch | None, bool]:
        """Accept a batch unless it is a duplicate; returns (the batch whose ack to wait for,
        duplicate). A duplicate already in replay needs no wait (None)."""
        key = (batch.actor_id, batch.seq)
        with self._lock:
            if key in self.ledger:
                return None, True
            if key in self._pending:
                return self._pending[key], True
            if self.stopping.is_set():  # not logged: the actor keeps it for the next session
                raise LearnerStopping("the learner is stopping")
            batch.log_position = self.log.append(payload)
            self._pending[key] = batch
            self.batches.put(batch)
        return batch, False

    def inserted(self, batch: PendingBatch) -> None:
        """Called by the learner once `batch` is in replay (not yet acked)."""
        with self._lock:
            self.ledger.add(batch.actor_id, batch.seq)
            self._pending.pop((batch.actor_id, batch.seq), None)

    def stop_taking(self) -> None:
        """From now on no batch is accepted (`submit` raises LearnerStopping). Under the lock
        that `submit` logs under: a batch is either in the log before the final checkpoint or
        refused, so the checkpoint, the summary and a resumed run count the same steps."""
        with self._lock:
            self.stopping.set()

    def drop_pending(self) -> None:
        """Forget batches the learner will not insert (it is stopping); actors keep them, and
        the log's copy goes into replay on --resume."""
        with self._lock:
            self._pending.clear()
