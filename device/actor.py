"""The actor: steps envs with the newest policy it has, explores, batches and sends.

One actor steps `num_envs` copies of the env with one batched inference per step. Policy
pulls happen in a background thread, so acting never waits for a policy (except in lockstep
mode, where the actor waits for each ack and for the policy that ack names, which is what
makes a lockstep run reproducible).

Every batch gets the next seq and goes into the spool before it is sent; the link (see
`link.py`) sends, settles and resends. While the link is up, the actor waits when
`max_in_flight` batches are unacked, so the learner's delayed acks pace it; while the link is
down it acts on with its last policy and the spool takes the batches.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import grpc
import numpy as np

from edge_rl.core import Worker
from edge_rl.device.accounting import (
    DEFAULT_CPU_WATTS,
    ProcessEnergy,
    TimeSplit,
    seconds_since_process_start,
)
from edge_rl.device.client import LearnerClient
from edge_rl.device.exploration import ExplorationSettings, Explorer
from edge_rl.device.link import BACKOFF_MAX, Link
from edge_rl.device.observations import VECTOR
from edge_rl.device.policy import Policy, load_published
from edge_rl.device.rollout import Rollout
from edge_rl.device.runtime import load_runtime
from edge_rl.device.spool import Spool
from edge_rl.device.wire import BatchCosts, Transitions, encode_batch

log = logging.getLogger(__name__)


class PolicyPuller:
    """Fetches newer policies in a background thread; the actor swaps them in when ready."""

    def __init__(self, client: LearnerClient, runtime, current: Policy):
        self.client = client
        self.runtime = runtime
        self.latest = current  # read by the actor loop; replaced whole, never mutated
        self._announced = current.version
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="policy-puller", daemon=True)
        self._thread.start()

    def announce(self, version: int) -> None:
        """The learner said a policy `version` exists (in an ack or a heartbeat)."""
        if version > self._announced:
            self._announced = version
            self._wake.set()

    def fetch_now(self) -> Policy:
        """Blocking fetch of an announced newer policy (lockstep); returns the newest policy."""
        if self._announced > self.latest.version:
            try:
                self._swap(self.client.fetch_policy(self.latest.version))
            except grpc.RpcError as err:  # the link is down: act on with what we have
                log.debug("policy pull failed: %s", err.code().name)
        return self.latest

    def _swap(self, fetched) -> None:
        if fetched is not None and fetched[0] > self.latest.version:
            self.latest = load_published(fetched[1], self.runtime, self.latest)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=2.0)
            self._wake.clear()
            if self._stop.is_set() or self._announced <= self.latest.version:
                continue
            try:
                self._swap(self.client.fetch_policy(self.latest.version))
            except grpc.RpcError as err:
                log.debug("policy pull failed: %s", err.details())

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()


class OfflinePace:
    """While the link is down, act no faster than the learner last let this actor act, so the
    spool holds about what the learner would have taken, not what the CPU can produce."""

    def __init__(self):
        self.rate: float | None = None  # steps/s while connected (smoothed)
        self._since: tuple[float, int] | None = None  # (time, env steps) the outage began

    def observe(self, steps_per_second: float) -> None:
        if steps_per_second > 0:
            old = self.rate
            self.rate = steps_per_second if old is None else 0.7 * old + 0.3 * steps_per_second

    def hold(self, connected: bool, env_steps: int) -> None:
        if connected or self.rate is None:
            self._since = None
            return
        now = time.monotonic()
        if self._since is None:
            self._since = (now, env_steps)
            return
        due = self._since[0] + (env_steps - self._since[1]) / self.rate
        if due > now:
            time.sleep(min(due - now, 1.0))


class Actor(Worker):
    """Acts in `num_envs` env copies and streams transitions to a learner until told to stop."""

    def __init__(self, client: LearnerClient, spool: Spool, max_steps: int | None = None,
                 energy: ProcessEnergy | None = None, reconnect_max: float = BACKOFF_MAX):
        self.client = client
        self.spool = spool
        self.max_steps = max_steps
        self.reconnect_max = reconnect_max
        self.runtime = load_runtime()
        client.runtime = str(self.runtime)
        self.hello = client.hello()
        spool.join_run(self.hello.run_id, self.hello.next_seq)
        self.stop_event = threading.Event()
        self.env_steps = 0
        self.pace = OfflinePace()
        self.split = TimeSplit()  # inference / env / transport, reported with each batch
        self.observation_kind = VECTOR  # the env's, once run() has made it
        self.frame_stack = 1  # likewise
        self.energy = energy  # None: this process's energy is counted by its learner
        # (env steps, seconds) from the first action to the end of acting, set when run() ends
        self.acting: tuple[int, float] = (0, 0.0)

    def _first_policy(self) -> Policy:
        """Wait for the learner's first policy: there is nothing to act with before it."""
        while not self.stop_event.is_set():
            try:
                fetched = self.client.fetch_policy(0)
            except grpc.RpcError as err:
                log.debug("first policy pull failed: %s", err.code().name)
                fetched = None
            if fetched is not None:
                return load_published(fetched[1], self.runtime)
            time.sleep(0.2)
        raise SystemExit(0)

    def _heartbeats(self, puller: PolicyPuller, link: Link) -> None:
        last_steps, last_time = 0, time.monotonic()
        while not self.stop_event.wait(1.0):
            now = time.monotonic()
            rate = (self.env_steps - last_steps) / max(now - last_time, 1e-9)
            last_steps, last_time = self.env_steps, now
            try:
                reply = self.client.heartbeat(
                    policy_version=puller.latest.version, steps_per_second=rate,
                    env_steps=self.env_steps, batches_spooled=len(self.spool),
                    batches_rejected=self.spool.rejected, batches_dropped=self.spool.dropped,
                )
            except grpc.RpcError as err:
                if link.connected and err.code() != grpc.StatusCode.UNAUTHENTICATED:
                    link.reconnect()
                continue
            if link.connected:
                self.pace.observe(rate)
            if reply.learner_session != link.session and link.connected:
                link.reconnect()  # a restarted learner: Hello first, then resend
            puller.announce(reply.policy_version)
            if reply.stop:
                log.info("the learner is finishing; actor stops")
                self.stop_event.set()

    def _costs(self) -> BatchCosts:
        if self.energy is None:
            return BatchCosts(times=self.split.take())
        joules, cpu_seconds = self.energy.take()
        return BatchCosts(joules, cpu_seconds, self.energy.method, self.split.take())

    def _send(self, transitions: Transitions, version: int, returns: list[float]) -> None:
        seq = self.spool.next_seq()
        self.spool.add(seq, encode_batch(
            transitions,
            run_id=self.hello.run_id,
            actor_id=self.client.actor_id,
            incarnation=self.client.incarnation,
            seq=seq,
            policy_version=version,
            episode_returns=returns,
            env_steps=self.env_steps,
            costs=self._costs(),
            observation_kind=self.observation_kind,
            frame_stack=self.frame_stack,
        ))

    def run(self) -> None:
        hello = self.hello
        settings = ExplorationSettings.from_json(hello.exploration_json)
        policy = self._first_policy()
        puller = PolicyPuller(self.client, self.runtime, policy)
        window = 1 if hello.lockstep else max(1, hello.max_in_flight)
        link = Link(self.client, self.spool, window, hello.learner_session,
                    on_version=puller.announce, max_backoff=self.reconnect_max)
        heartbeat = threading.Thread(target=self._heartbeats, args=(puller, link), daemon=True)
        heartbeat.start()
        explorer = Explorer(settings, policy.metadata, np.random.default_rng(hello.seed))
        rollout = Rollout(hello.env_id, max(1, hello.num_envs), int(hello.seed),
                          hello.batch_transitions, explorer.random_actions(1)[0])
        self.observation_kind = rollout.kind
        self.frame_stack = rollout.stack
        log.info("actor %s acting in %s (%d envs) with %s; %d batches spooled",
                 self.client.actor_id, hello.env_id, len(rollout.envs), policy.runtime,
                 len(self.spool))
        self.split = TimeSplit()  # the clock starts with the loop, not with the first policy
        first_action = None  # (monotonic time, env steps) of the first action
        try:
            while not self.stop_event.is_set():
                if self.max_steps is not None and self.env_steps >= self.max_steps:
                    break
                # The newest policy the puller has: swapping is one reference assignment in
                # the puller's thread, so acting never waits for a download.
                policy = puller.latest
                outputs = policy.outputs(rollout.obs)
                actions, deterministic = explorer(outputs, policy.greedy(outputs))
                self.split.lap("inference")
                if first_action is None:  # what a board's user waits for
                    first_action = (time.monotonic(), self.env_steps)
                    started = seconds_since_process_start()
                    if started is not None:
                        log.info("first action %.2f s after the process started", started)
                batches = rollout.step(actions, deterministic)
                self.split.lap("env")
                self.env_steps = rollout.env_steps
                for batch in batches:
                    self._send(batch, policy.version, rollout.take_returns())
                    link.wake()
                    if hello.lockstep:  # each ack, and the policy it names, before acting on
                        link.wait_for_room(limit=1)
                        puller.fetch_now()
                if batches:
                    link.wait_for_room()
                self.pace.hold(link.connected, self.env_steps)
                self.split.lap("transport")
        finally:
            self.stop_event.set()
            if first_action is not None:  # acting time, before the link drains
                seconds = time.monotonic() - first_action[0]
                steps = self.env_steps - first_action[1]
                self.acting = (steps, seconds)
                log.info("%d env steps in %.1f s since the first action (%.0f steps/s)",
                         steps, seconds, steps / max(seconds, 1e-9))
            # a run that ended at --max-steps delivers its batches; one told to stop does not wait
            link.stop(deliver=self.max_steps is not None and self.env_steps >= self.max_steps)
            puller.stop()
            rollout.close()
            log.info("actor %s stopped: %d batches acked, %d refused, %d dropped, %d spooled",
                     self.client.actor_id, self.spool.state["acked"], self.spool.rejected,
                     self.spool.dropped, len(self.spool))


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit when its parent (the learner) dies, on Linux."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass

    def watch():
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(1.0)

    if os.getppid() != parent_pid:
        os._exit(0)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_actor(
    learner: str,
    actor_id: str | None = None,
    *,
    spool: str | None = None,
    spool_max_mb: float = 256.0,
    token: str | None = None,
    tls_ca: str | None = None,
    max_steps: int | None = None,
    cpu_watts: float | None = DEFAULT_CPU_WATTS,
    reconnect_max: float = BACKOFF_MAX,
) -> None:
    """Join the learner at `learner` (HOST:PORT) and act until it says stop. With `cpu_watts`
    the actor reports its CPU seconds and their energy at that power per core with each
    batch; None reports none (a local actor, whose learner counts its CPU itself).
    `reconnect_max` caps the wait, in seconds, between tries to reach a lost learner."""
    box = Spool(spool, int(spool_max_mb * 1e6))
    if actor_id is None:
        # an on-disk spool keeps its actor's id over restarts; a memory spool is per process
        actor_id = box.actor_id or (
            f"{socket.gethostname()}-{os.urandom(3).hex()}" if spool is not None
            else f"{socket.gethostname()}-{os.getpid()}"
        )
    box.claim(actor_id)
    client = LearnerClient(learner, actor_id, time.time_ns(), token=token, tls_ca=tls_ca)
    try:
        energy = ProcessEnergy(cpu_watts) if cpu_watts is not None else None
        Actor(client, box, max_steps=max_steps, energy=energy,
              reconnect_max=reconnect_max).run()
    finally:
        client.close()
