"""Local actor processes: the device runtime, started fresh (never forked) on loopback.

TensorFlow and gRPC are not fork-safe, so each actor is a new interpreter running
`python -m edge_rl actor`, in its own session (Ctrl-C reaches only the learner, which then
stops them) and told to exit when its parent dies.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)


class LocalActors:
    def __init__(self, count: int, address: str, log_dir: Path, token_file: str | None = None,
                 tls_ca: str | None = None):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []
        self.log_files = []
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for index in range(count):
            log_file = open(log_dir / f"actor-{index}.log", "ab")
            self.log_files.append(log_file)
            command = [
                sys.executable, "-m", "edge_rl", "actor",
                "--learner", address,
                "--actor-id", f"local-{index}",
                "--parent-pid", str(os.getpid()),
            ]
            if token_file:
                command += ["--token-file", token_file]
            if tls_ca:
                command += ["--tls-ca", tls_ca]
            self.processes.append(subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            ))
        log.info("started %d local actor process(es) for %s", count, address)

    def alive(self) -> int:
        return sum(p.poll() is None for p in self.processes)

    def failed(self) -> list[int]:
        """Exit codes of actors that ended with an error."""
        return [p.returncode for p in self.processes if p.poll() not in (None, 0)]

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Wait for the actors to see the learner's stop, then end the ones still running."""
        deadline = time.monotonic() + grace_seconds
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        for p in self.processes:
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self.log_files:
            f.close()
