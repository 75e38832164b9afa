"""The actor's link to its learner: sends spooled batches, settles them by status, reconnects.

One thread owns the sending. It keeps up to `window` batches in flight, oldest seq first, and
settles each by how the learner answered:

  OK                                        acked: out of the spool, into acked.log
  INVALID_ARGUMENT, RESOURCE_EXHAUSTED      refused for good: out of the spool, counted
  FAILED_PRECONDITION                       say Hello again and resend once (the learner may
                                            have restarted); refused again: out, counted
  UNAVAILABLE, DEADLINE_EXCEEDED, ...       the link is down: everything in flight goes back
                                            to the spool, and Hello is retried with exponential
                                            backoff and jitter until the learner answers
  UNAUTHENTICATED, PERMISSION_DENIED        fatal: this actor may not feed this learner

While the link is down the actor keeps acting (see `wait_for_room`) and the spool absorbs it.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time

import grpc

from edge_rl.device.client import REFUSED, LearnerClient
from edge_rl.device.errors import UserError
from edge_rl.device.spool import Spool

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 15.0
DRAIN_SECONDS = 5.0


def backoff(attempt: int, rng: random.Random, cap: float = BACKOFF_MAX) -> float:
    """Seconds before retry `attempt` (0, 1, ...): doubling to `cap`, times 0.5-1.5 so a fleet
    that lost its learner at once does not come back at once."""
    return min(cap, BACKOFF_FIRST * 2**attempt) * rng.uniform(0.5, 1.5)


class Link:
    def __init__(self, client: LearnerClient, spool: Spool, window: int, session: str,
                 on_version=lambda version: None, max_backoff: float = BACKOFF_MAX):
        self.client = client
        self.max_backoff = max_backoff  # the longest wait between Hellos to a lost learner
        self.spool = spool
        self.window = max(1, window)
        self.session = session
        self.on_version = on_version  # called with the policy version each ack names
        self.connected = True
        self.fatal: str | None = None
        self.stopping = threading.Event()
        self._draining = threading.Event()  # stop() has begun: no new sends, answers awaited
        self._down_since = time.monotonic()
        self._rng = random.Random()
        self._results: queue.Queue = queue.Queue()
        self._in_flight: dict[int, grpc.Future] = {}
        self._unsettled = 0  # sends whose answer is not settled yet, given-up ones too
        self._retried: set[int] = set()  # seqs resent after FAILED_PRECONDITION
        self._room = threading.Condition()
        self._reconnect = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="link", daemon=True)
        self._thread.start()

    # -- called by the actor --------------------------------------------------------------------

    def wake(self) -> None:
        """A new batch is in the spool."""
        self._results.put(None)

    def wait_for_room(self, limit: int | None = None) -> None:
        """Hold the actor while the link is up and `limit` (the window) batches are unacked:
        the learner's delayed acks pace the actor. A down link never holds it."""
        limit = self.window if limit is None else limit
        with self._room:
            self._room.wait_for(lambda: not self.connected or len(self.spool) < limit
                                or self.stopping.is_set() or self.fatal is not None)
        if self.fatal is not None:
            raise UserError(self.fatal)

    def reconnect(self) -> None:
        """Say Hello again: a heartbeat named a new learner process, or could not reach the
        learner (the link counts as down now, not when an in-flight insert times out)."""
        self._reconnect.set()
        self.wake()

    def stop(self, deliver: bool = False) -> None:
        """Send nothing new; wait up to DRAIN_SECONDS for every answer still owed; stop.
        With `deliver` (an actor that ran its --max-steps), first send what is spooled, within
        the same DRAIN_SECONDS: a short run can end before its link sent anything.

        Sends given up on when the link went down are waited for too: a stopping learner
        refuses new batches at once while older ones still wait for their fsync, so a refusal
        can arrive first, and the OK that follows it says the batch is in the learner's replay.
        What was never sent stays in the spool.
        """
        deadline = time.monotonic() + DRAIN_SECONDS
        while deliver and len(self.spool) and self.connected and self.fatal is None \
                and time.monotonic() < deadline:
            self.wake()
            time.sleep(0.05)
        self._draining.set()
        self.wake()
        while self._unsettled and time.monotonic() < deadline and self.fatal is None:
            time.sleep(0.05)
        self.stopping.set()
        self.wake()
        self._thread.join(timeout=5)
        self._notify()

    # -- the sending thread ---------------------------------------------------------------------

    def _notify(self) -> None:
        with self._room:
            self._room.notify_all()

    def _loop(self) -> None:
        try:
            while not self.stopping.is_set():
                if self._reconnect.is_set():
                    self._reconnect.clear()
                    self._link_down("the learner restarted or stopped answering")
                draining = self._draining.is_set()
                if not self.connected and not draining:
                    self._connect()
                    continue
                if not draining:
                    self._fill()
                try:
                    item = self._results.get(timeout=0.5)
                except queue.Empty:
                    continue
                if item is not None:
                    self._settle(*item)
        except UserError as err:
            self.fatal = str(err)
        except Exception as err:  # keep the actor informed instead of dying silently
            log.exception("link thread failed")
            self.fatal = f"link to the learner failed: {err}"
        finally:
            self._notify()

    def _fill(self) -> None:
        for seq in self.spool.unacked():
            if len(self._in_flight) >= self.window:
                return
            if seq in self._in_flight:
                continue
            data = self.spool.read(seq)
            if data is None:
                continue
            future = self.client.insert(data)
            self._in_flight[seq] = future
            self._unsettled += 1
            future.add_done_callback(lambda f, s=seq: self._results.put((s, f)))

    def _settle(self, seq: int, future: grpc.Future) -> None:
        self._unsettled -= 1  # only this thread counts, so stop() can read it without a lock
        error = future.exception()
        if self._in_flight.get(seq) is not future:
            # A send given up on when the link went down. Its OK still counts: the learner
            # may have answered just before it stopped (settling twice is harmless).
            if error is None:
                self.spool.settle(seq, acked=True)
                self._notify()
            return
        del self._in_flight[seq]
        if error is None:
            self.spool.settle(seq, acked=True)
            self._retried.discard(seq)
            self.on_version(future.result().policy_version)
            self._notify()
            return
        code = error.code()
        if code in REFUSED:
            raise UserError(f"learner at {self.client.address} refused: {error.details()}")
        if code == grpc.StatusCode.FAILED_PRECONDITION and seq not in self._retried:
            self._retried.add(seq)
            self._link_down(f"FAILED_PRECONDITION: {error.details()}", quiet=True)
            return
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
                    grpc.StatusCode.FAILED_PRECONDITION):
            log.warning("learner refused batch %d (%s: %s); dropped (%d refused so far)", seq,
                        code.name, error.details(), self.spool.rejected + 1)
            self.spool.settle(seq, acked=False)
            self._retried.discard(seq)
            self._notify()
            return
        # UNAVAILABLE, DEADLINE_EXCEEDED, and any code not named above: keep the batch and
        # try again once the link is back; dropping it would lose data for good.
        self._link_down(f"{code.name}: {error.details()}")

    def _link_down(self, why: str, quiet: bool = False) -> None:
        if self.connected:
            self._down_since = time.monotonic()
            if not quiet:
                log.warning("lost the learner (%s); acting on and spooling", why)
        self.connected = False
        # Not cancelled: an answer already on its way is still settled (see _settle); a send
        # on a dead connection fails by itself once keepalive notices.
        self._in_flight.clear()
        self._notify()

    def _connect(self) -> None:
        """Hello until the learner answers, with backoff; then resend what is spooled."""
        attempt = 0
        while not self._draining.is_set():
            try:
                reply = self.client.hello_once(timeout=5.0)
            except grpc.RpcError as err:
                if err.code() in REFUSED:
                    raise UserError(f"learner at {self.client.address} refused: "
                                    f"{err.details()}") from None
                delay = backoff(attempt, self._rng, self.max_backoff)
                log.debug("hello failed (%s); next try in %.1f s", err.code().name, delay)
                attempt += 1
                self._draining.wait(delay)
                continue
            self.spool.join_run(reply.run_id, reply.next_seq)
            self.session = reply.learner_session
            self.connected = True
            self.on_version(reply.policy_version)
            log.info("learner back after %.1f s; %d batches spooled to resend",
                     time.monotonic() - self._down_since,
                     len(self.spool))
            self._notify()
            return
