"""Helpers for the fleet tests: real `edge-rl learner` and `edge-rl actor` processes."""

from __future__ import annotations

import json
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

from conftest import EDGE_RL

from edge_rl.device.client import status_if_up
from edge_rl.device.spool import read_acked
from edge_rl.transport.exchange import Ledger


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_token(folder: Path) -> tuple[Path, str]:
    token = secrets.token_hex(16)
    path = folder / "token"
    path.write_text(token + "\n")
    return path, token


def start(args: list, log: Path) -> subprocess.Popen:
    """An edge-rl command in its own process (and session, so signals reach only it)."""
    handle = open(log, "ab")
    return subprocess.Popen([EDGE_RL, *map(str, args)], stdout=handle, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def stop(process: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 60) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def status(port: int, token: str):
    """The learner's StatusReply, or None while it does not answer."""
    return status_if_up(f"127.0.0.1:{port}", token)


def wait_for(condition, timeout: float, what: str, logs: list[Path] = ()):
    """Poll `condition` until it returns something truthy; fail with the logs' tails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-15:])
                      for p in logs if p.is_file())
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")


def final_ledger(run_dir: Path) -> set[tuple[str, int]]:
    """(actor id, seq) pairs in the replay of the run's latest checkpoint."""
    folder = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    return Ledger(json.loads((folder / "state.json").read_text())["ledger"]).pairs()


def acked(spool: Path) -> tuple[str, list[int]]:
    """(actor id, seqs in acked.log) of an actor's spool."""
    return json.loads((spool / "state.json").read_text())["actor_id"], read_acked(spool)


def spooled(spool: Path) -> set[int]:
    return {int(p.stem) for p in (spool / "batches").glob("*.batch")}
