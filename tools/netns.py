"""Network namespaces as separate hosts, and the processes run in them: the plumbing of
tools/netns_fleet.py. Needs root and iproute2; where namespaces cannot be made, `Skip` says why.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("netns")

EDGE_RL = Path(sys.executable).parent / "edge-rl"
T = TypeVar("T")


class Skip(Exception):
    """This machine cannot run the experiment (not a failure of edge-rl)."""


class CheckFailed(Exception):
    """A check of edge-rl's behaviour failed."""


@dataclass
class Link:
    """One veth pair: the learner's end and one actor's end, each in its namespace."""

    actor_ns: str
    actor_dev: str
    actor_addr: str
    learner_dev: str
    learner_addr: str


@dataclass
class Fleet:
    """The namespaces and processes this run created, so `teardown` removes exactly those."""

    workdir: Path
    namespaces: list[str] = field(default_factory=list)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def tails(self, lines: int = 15) -> str:
        """The last lines of every process's log, for a failure message."""
        parts = []
        for name in self.processes:
            path = self.log_path(name)
            if path.is_file():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(parts)

    def start(self, name: str, namespace: str, args: list[Any]) -> subprocess.Popen:
        """`edge-rl ARGS` inside `namespace`. `ip netns exec` execs the command, so the pid is
        edge-rl's own; a new session keeps a Ctrl-C at the terminal away from it (the script
        decides the order things stop in)."""
        handle = open(self.log_path(name), "ab")
        process = subprocess.Popen(
            ["ip", "netns", "exec", namespace, str(EDGE_RL), *map(str, args)],
            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        handle.close()  # the child has its own copy
        self.processes[name] = process
        log.info("started %s (pid %d) in %s", name, process.pid, namespace)
        return process

    def teardown(self) -> None:
        """Stop every process still running (SIGINT, then SIGKILL), then delete the
        namespaces (which deletes the veth pairs in them)."""
        for name, process in self.processes.items():
            if process.poll() is None:
                log.info("stopping leftover %s (pid %d)", name, process.pid)
                stop(process, signal.SIGINT, timeout=15)
        for namespace in self.namespaces:
            ip("netns", "delete", namespace, check=False)
        self.namespaces.clear()


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise CheckFailed(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def stop(process: subprocess.Popen, sig: int, timeout: float) -> int:
    """Send `sig`, wait up to `timeout` s, then SIGKILL; returns the exit code."""
    if process.poll() is None:
        process.send_signal(sig)
    return wait_or_kill(process, timeout)


def wait_or_kill(process: subprocess.Popen, timeout: float) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def wait_for(condition: Callable[[], T], timeout: float, what: str, fleet: Fleet,
             poll: float = 0.25) -> T:
    """Poll `condition` until it returns something truthy, or fail with the logs' tails."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        dead = [name for name, p in fleet.processes.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(dead)} exited" if dead else f"timed out after {timeout:.0f} s"
            raise CheckFailed(f"{why} waiting for {what}\n{fleet.tails()}")
        time.sleep(poll)


def preflight() -> None:
    """Skip, rather than fail, where namespaces cannot be made."""
    if os.geteuid() != 0:
        raise Skip("needs root to create network namespaces")
    if shutil.which("ip") is None:
        raise Skip("no `ip` command (iproute2)")
    if not EDGE_RL.is_file():
        raise CheckFailed(f"no edge-rl executable next to {sys.executable}")


def build_network(fleet: Fleet, prefix: str) -> tuple[str, list[Link]]:
    """Three namespaces and two veth pairs; returns (learner namespace, the two links)."""
    learner_ns = f"{prefix}-l"
    links = [
        Link(f"{prefix}-a{i}", "to-learner", f"10.231.{i}.2", f"to-actor{i}", f"10.231.{i}.1")
        for i in (1, 2)
    ]
    existing = ip("netns", "list", check=False).stdout.split()
    for namespace in (learner_ns, *(link.actor_ns for link in links)):
        if namespace in existing:
            raise CheckFailed(f"network namespace {namespace} already exists")
        result = ip("netns", "add", namespace, check=False)
        if result.returncode != 0:
            # the usual reason: an unprivileged container cannot mount /run/netns
            raise Skip(f"`ip netns add` failed: {result.stderr.strip()}")
        fleet.namespaces.append(namespace)
        ip("-n", namespace, "link", "set", "lo", "up")  # the learner's status calls use it
    for link in links:
        # Created straight into the namespaces, so the device names never meet in this one.
        result = ip("link", "add", link.learner_dev, "netns", learner_ns, "type", "veth",
                    "peer", "name", link.actor_dev, "netns", link.actor_ns, check=False)
        if result.returncode != 0:
            raise Skip(f"cannot create a veth pair: {result.stderr.strip()}")
        ip("-n", learner_ns, "addr", "add", f"{link.learner_addr}/30", "dev", link.learner_dev)
        ip("-n", link.actor_ns, "addr", "add", f"{link.actor_addr}/30", "dev", link.actor_dev)
        ip("-n", learner_ns, "link", "set", link.learner_dev, "up")
        ip("-n", link.actor_ns, "link", "set", link.actor_dev, "up")
    return learner_ns, links
