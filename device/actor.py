"""The actor: steps envs with the newest policy it has, explores, batches and sends.

One actor steps `num_envs` copies of the env with one batched inference per step. Policy
pulls happen in a background thread, so acting never waits for a policy (except in lockstep
mode, where the actor waits for each ack and for the policy that ack names, which is what
makes a lockstep run reproducible). Inserts are flow-controlled: at most `max_in_flight`
batches wait for their ack; the learner delays acks when the actors run ahead of it.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time

import grpc
import numpy as np

from edge_rl.device.client import LearnerClient
from edge_rl.device.exploration import ExplorationSettings, Explorer
from edge_rl.device.policy import Policy
from edge_rl.device.rollout import Rollout
from edge_rl.device.runtime import load_runtime
from edge_rl.device.wire import Transitions, encode_batch

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
            self._swap(self.client.fetch_policy(self.latest.version))
        return self.latest

    def _swap(self, fetched) -> None:
        if fetched is not None and fetched[0] > self.latest.version:
            self.latest = Policy(fetched[1], runtime=self.runtime)

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


class Actor:
    """Acts in `num_envs` env copies and streams transitions to a learner until told to stop."""

    def __init__(self, client: LearnerClient, max_steps: int | None = None):
        self.client = client
        self.max_steps = max_steps
        self.runtime = load_runtime()
        client.runtime = str(self.runtime)
        self.hello = client.hello()
        self.stop_event = threading.Event()
        self.seq = self.hello.next_seq
        self.in_flight: collections.deque = collections.deque()
        self.env_steps = 0

    def _first_policy(self) -> Policy:
        """Wait for the learner's first policy: there is nothing to act with before it."""
        while not self.stop_event.is_set():
            fetched = self.client.fetch_policy(0)
            if fetched is not None:
                return Policy(fetched[1], runtime=self.runtime)
            time.sleep(0.2)
        raise SystemExit(0)

    def _heartbeats(self, puller: PolicyPuller) -> None:
        last_steps, last_time = 0, time.monotonic()
        while not self.stop_event.wait(1.0):
            now = time.monotonic()
            rate = (self.env_steps - last_steps) / max(now - last_time, 1e-9)
            last_steps, last_time = self.env_steps, now
            try:
                reply = self.client.heartbeat(puller.latest.version, rate)
            except grpc.RpcError:
                continue
            puller.announce(reply.policy_version)
            if reply.stop:
                self.stop_event.set()

    def _send(self, transitions: Transitions, version: int, returns: list[float], puller) -> None:
        data = encode_batch(
            transitions,
            run_id=self.hello.run_id,
            actor_id=self.client.actor_id,
            incarnation=self.client.incarnation,
            seq=self.seq,
            policy_version=version,
            episode_returns=returns,
            env_steps=self.env_steps,
        )
        self.seq += 1
        self.in_flight.append(self.client.insert(data))
        window = 1 if self.hello.lockstep else max(1, self.hello.max_in_flight)
        while len(self.in_flight) >= window or (self.in_flight and self.in_flight[0].done()):
            ack = self.in_flight.popleft().result()  # raises grpc.RpcError on failure
            puller.announce(ack.policy_version)

    def run(self) -> None:
        hello = self.hello
        settings = ExplorationSettings.from_json(hello.exploration_json)
        policy = self._first_policy()
        puller = PolicyPuller(self.client, self.runtime, policy)
        heartbeat = threading.Thread(target=self._heartbeats, args=(puller,), daemon=True)
        heartbeat.start()
        explorer = Explorer(settings, policy.metadata, np.random.default_rng(hello.seed))
        rollout = Rollout(hello.env_id, max(1, hello.num_envs), int(hello.seed),
                          hello.batch_transitions, explorer.random_actions(1)[0])
        log.info("actor %s acting in %s (%d envs) with %s", self.client.actor_id, hello.env_id,
                 len(rollout.envs), self.runtime)
        try:
            while not self.stop_event.is_set():
                if self.max_steps is not None and self.env_steps >= self.max_steps:
                    break
                # The newest policy the puller has: swapping is one reference assignment in
                # the puller's thread, so acting never waits for a download.
                policy = puller.latest
                outputs = policy.outputs(rollout.obs)
                actions, deterministic = explorer(outputs, policy.greedy(outputs))
                batches = rollout.step(actions, deterministic)
                self.env_steps = rollout.env_steps
                for batch in batches:
                    self._send(batch, policy.version, rollout.take_returns(), puller)
                    if hello.lockstep:
                        puller.fetch_now()
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                log.info("learner went away (%s); actor stops", err.code().name)
            else:
                raise
        finally:
            self.stop_event.set()
            puller.stop()
            rollout.close()


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
    actor_id: str,
    incarnation: int | None = None,
    max_steps: int | None = None,
) -> None:
    """Join the learner at `learner` (HOST:PORT) and act until it says stop."""
    client = LearnerClient(learner, actor_id, incarnation or time.time_ns())
    try:
        Actor(client, max_steps=max_steps).run()
    finally:
        client.close()
