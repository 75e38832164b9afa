"""The learner's intake: actors' batches into replay exactly once, durable before acked.

The gRPC service appends each accepted batch to the replay log and queues it (see
`edge_rl.transport.exchange`); here the learner loop moves queued batches into replay,
records them in the ledger and holds their acks until the learner trails the actors by at
most `max_update_lag` updates. A checkpoint saves the replay together with the log position of the
last batch in it; `recover` puts the log's later records back after a restart.
"""

from __future__ import annotations

import logging
import queue
from collections import deque
from collections.abc import Callable
from pathlib import Path

from edge_rl.device import wire_pb2
from edge_rl.device.observations import ObservationSpec
from edge_rl.device.wire import BatchCosts, batch_costs, validate_batch
from edge_rl.replay.buffer import Replay
from edge_rl.transport.exchange import Exchange, Ledger, PendingBatch, replay_key
from edge_rl.transport.replay_log import Position, ReplayLog, read_records

log = logging.getLogger(__name__)


class Ingest:
    """Replay log, exchange and held acks of one learner process."""

    def __init__(self, log_dir: Path, replay: Replay, ledger_state: dict,
                 actor_index: dict[str, int], position: Position, compress_log: bool = False):
        self.replay = replay
        self.log = ReplayLog(log_dir, compress=compress_log)  # frames compress; vectors not
        self.exchange = Exchange(self.log, Ledger(ledger_state), actor_index)
        self.position: Position = tuple(position)  # end of the newest record in replay
        self.held: deque[PendingBatch] = deque()

    def recover(self, observation: ObservationSpec, action: dict,
                account: Callable[[str, BatchCosts], None]) -> tuple[int, int]:
        """Insert the log's records after `position` (a restart's missing tail), telling
        `account` each one's (actor id, costs); returns (batches, transitions) put back."""
        batches = transitions = 0
        ledger = self.exchange.ledger
        for end, payload in read_records(self.log.folder, self.position):
            batch = wire_pb2.TrajectoryBatch()
            try:
                batch.ParseFromString(payload)
                arrays = validate_batch(batch, observation.shape, action, observation.dtype)
                costs = batch_costs(batch)
            except Exception as err:  # accepted once, so this is disk damage
                log.error("replay log record ending at %s is unreadable (%s); skipped", end, err)
                continue
            self.position = end
            if (batch.actor_id, batch.seq) in ledger:
                continue
            self.replay.insert(replay_key(batch.actor_id, batch.incarnation), arrays)
            ledger.add(batch.actor_id, batch.seq)
            account(batch.actor_id, costs)
            if not self.exchange.known(batch.actor_id):
                self.exchange.hello(batch.actor_id, batch.incarnation, "", "")
                self.exchange.actors[batch.actor_id].gone = True
            batches += 1
            transitions += len(arrays)
        return batches, transitions

    def take(self, block: bool, one: bool = False) -> list[PendingBatch]:
        """Move queued batches into replay; their acks are held until `release`."""
        taken = []
        timeout = 0.05 if block else 0.0
        while True:
            try:
                pending = self.exchange.batches.get(timeout=timeout)
            except queue.Empty:
                return taken
            timeout = 0.0
            self.replay.insert(pending.actor_key, pending.transitions)
            self.exchange.inserted(pending)
            self.position = pending.log_position
            self.held.append(pending)
            taken.append(pending)
            if one:
                return taken

    def release(self, can_release) -> None:
        """Let held acks go while `can_release()` says the learner keeps up."""
        while self.held and can_release():
            self.held.popleft().acked.set()

    def release_all(self) -> None:
        """Every batch in replay gets its ack (the learner is stopping; they are in its last
        checkpoint)."""
        self.release(lambda: True)

    def close(self) -> None:
        self.exchange.drop_pending()
        self.log.close()
