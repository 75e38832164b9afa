"""The actor's spool: batches the learner has not acked yet, oldest first, within a byte budget.

With a folder, the spool survives the actor: the folder holds `state.json` (the actor's id,
the run it acts for, its next seq and its counters), one `batches/SEQ.batch` file per unacked
batch, and `acked.log`, one line per batch the learner acked (an audit trail: which of this
actor's seqs the learner holds). A restarted actor takes its id and next seq from there and
sends what is left. Without a folder the same spool lives in memory.

A full spool drops its oldest batches, says so and counts them: an actor cut off for long keeps
its newest experience, which is closest to the current policy.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path

from edge_rl.device.errors import UserError

log = logging.getLogger(__name__)


class Spool:
    def __init__(self, folder: str | Path | None, max_bytes: int):
        self.folder = Path(folder) if folder is not None else None
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._sizes: OrderedDict[int, int] = OrderedDict()  # seq -> bytes, oldest first
        self._memory: dict[int, bytes] = {}
        self.bytes = 0
        self.state = {"actor_id": "", "run_id": "", "next_seq": 0,
                      "acked": 0, "rejected": 0, "dropped": 0}
        if self.folder is not None:
            self._open_folder()

    def _open_folder(self) -> None:
        assert self.folder is not None
        try:
            (self.folder / "batches").mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot use spool folder {self.folder}: {err.strerror}") from None
        state_file = self.folder / "state.json"
        if state_file.is_file():
            try:
                self.state.update(json.loads(state_file.read_text()))
            except ValueError:
                raise UserError(f"{state_file} is damaged; move the spool folder away") from None
        acked = set(read_acked(self.folder))
        for path in sorted((self.folder / "batches").glob("*.batch")):
            seq = int(path.stem)
            if seq in acked:  # settled when the actor was killed: its file outlived the ack
                path.unlink()
                continue
            self._sizes[seq] = path.stat().st_size
            self.bytes += self._sizes[seq]
        for path in (self.folder / "batches").glob("*.tmp"):
            path.unlink()  # a batch the actor was killed while writing: never sent
        if self._sizes:
            self.state["next_seq"] = max(self.state["next_seq"], max(self._sizes) + 1)

    def _save_state(self) -> None:
        if self.folder is None:
            return
        tmp = self.folder / "state.json.tmp"
        tmp.write_text(json.dumps(self.state))
        tmp.replace(self.folder / "state.json")

    def _path(self, seq: int) -> Path:
        assert self.folder is not None
        return self.folder / "batches" / f"{seq:016d}.batch"

    # -- identity -------------------------------------------------------------------------------

    @property
    def actor_id(self) -> str:
        return self.state["actor_id"]

    def claim(self, actor_id: str) -> None:
        """Bind the spool to an actor id (a spool serves one actor, for good)."""
        with self._lock:
            if self.state["actor_id"] and self.state["actor_id"] != actor_id:
                raise UserError(f"spool {self.folder} belongs to actor "
                                f"{self.state['actor_id']!r}; use that --actor-id or another "
                                "--spool")
            self.state["actor_id"] = actor_id
            self._save_state()

    def join_run(self, run_id: str, learner_next_seq: int) -> int:
        """Start or go on acting for `run_id`; batches spooled for another run are dropped
        (no learner will take them). Returns the number dropped."""
        with self._lock:
            stale = 0
            if self.state["run_id"] and self.state["run_id"] != run_id:
                stale = len(self._sizes)
                for seq in list(self._sizes):
                    self._remove(seq)
                self.state["rejected"] += stale
                if stale:
                    log.warning("spool: %d batches of run %s dropped: the learner now runs %s",
                                stale, self.state["run_id"], run_id)
            self.state["run_id"] = run_id
            self.state["next_seq"] = max(self.state["next_seq"], int(learner_next_seq))
            self._save_state()
            return stale

    # -- batches --------------------------------------------------------------------------------

    def next_seq(self) -> int:
        """Take the next sequence number (persisted before any batch carries it)."""
        with self._lock:
            seq = self.state["next_seq"]
            self.state["next_seq"] = seq + 1
            self._save_state()
            return seq

    def add(self, seq: int, data: bytes) -> int:
        """Keep a batch until it is settled; returns how many old batches made room for it."""
        with self._lock:
            dropped = 0
            while self._sizes and self.bytes + len(data) > self.max_bytes:
                self._remove(next(iter(self._sizes)))
                dropped += 1
            if self.folder is not None:
                tmp = self._path(seq).with_suffix(".tmp")
                tmp.write_bytes(data)
                tmp.replace(self._path(seq))
            else:
                self._memory[seq] = data
            self._sizes[seq] = len(data)
            self.bytes += len(data)
            if dropped:
                self.state["dropped"] += dropped
                self._save_state()
        if dropped:
            log.warning("spool full (%.1f MB): dropped the %d oldest batches (%d dropped so far)",
                        self.max_bytes / 1e6, dropped, self.state["dropped"])
        return dropped

    def _remove(self, seq: int) -> None:
        self.bytes -= self._sizes.pop(seq)
        if self.folder is not None:
            self._path(seq).unlink(missing_ok=True)
        else:
            self._memory.pop(seq, None)

    def read(self, seq: int) -> bytes | None:
        """A spooled batch's bytes (None once it is settled or dropped)."""
        with self._lock:
            if seq not in self._sizes:
                return None
            if self.folder is None:
                return self._memory[seq]
            return self._path(seq).read_bytes()

    def settle(self, seq: int, acked: bool) -> None:
        """The learner acked the batch (or refused it for good): it leaves the spool."""
        with self._lock:
            if seq not in self._sizes:
                return
            # The record first, the batch file after: an actor killed in between finds the
            # seq in acked.log on restart and removes its file then (see _open_folder), so
            # an ack is never lost and never recorded twice.
            if self.folder is not None and acked:
                with open(self.folder / "acked.log", "a") as f:
                    f.write(f"{seq}\n")
            self._remove(seq)
            self.state["acked" if acked else "rejected"] += 1
            if self.folder is not None and not acked:
                self._save_state()

    def unacked(self) -> list[int]:
        with self._lock:
            return list(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)

    @property
    def rejected(self) -> int:
        return self.state["rejected"]

    @property
    def dropped(self) -> int:
        return self.state["dropped"]


def read_acked(folder: str | Path) -> list[int]:
    """The seqs an on-disk spool recorded as acked, in the order the acks came."""
    path = Path(folder) / "acked.log"
    if not path.is_file():
        return []
    return [int(line) for line in path.read_text().split()]
