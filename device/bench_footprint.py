"""`edge-rl bench footprint`: how big and how quick to start an `edge-rl actor` is.

The actor is the whole process a board runs (runtime, env, policy, gRPC channel and spool),
started fresh for `steps` env steps against either
  * a stand-in learner in this process (edge_rl.device.bench_learner) serving a policy file,
    which acks every batch at once: the actor runs unpaced; or
  * a real learner (`edge-rl learner` elsewhere, or on loopback), whose acks pace it; the
    bench waits for its first policy before the actor starts, so the time to the first action
    is the actor's own.
Reported: the actor's peak resident memory (VmHWM: the child's ru_maxrss from wait4, what GNU
time's "Maximum resident set size" reads), its own log line "first action N s after the
process started" (from /proc, the interpreter's start included), and its steps/s from that
first action until it stops. With --chroot the actor runs inside another root (an arm64 one
under qemu: tools/arm64_check.py), whose figures are qemu's too.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_rl.device.errors import UserError

log = logging.getLogger(__name__)


class BenchFailed(UserError):
    """The measured process failed or missed a target: one line, exit code 1."""

    exit_code = 1


@dataclass
class Footprint:
    env: str
    where: str  # the machine, e.g. "x86_64", or "chroot ROOT"
    learner: str  # "stand-in" or the real learner's HOST:PORT
    steps: int  # env steps the actor was asked for
    peak_rss_mb: float
    first_action_s: float
    steps_per_second: float
    wall_s: float
    batches_accepted: int  # the actor's batches the learner inserted (stand-in: acked)
    learner_updates: int | None  # a real learner's updates after the actor's run

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Chroot:
    """Run the actor inside `root`, as `edge_rl` (the edge-rl command there)."""

    root: Path
    edge_rl: str


def edge_rl_command() -> list[str]:
    """This install's `edge-rl`, as a board's user starts it."""
    script = Path(sys.executable).with_name("edge-rl")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "edge_rl"]


def run_measured(command: list[str], log_path: Path, timeout: float) -> tuple[int | None, float]:
    """Run `command` with its output in `log_path`: (exit code, peak RSS in MB); the exit code
    is None when it ran for more than `timeout` seconds and was killed."""
    with log_path.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            return None, 0.0
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)
    kilobytes = usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1)  # macOS: bytes
    return process.returncode, kilobytes / 1024


def last_line(text: str) -> str:
    """The last line of a log that holds something."""
    return ([line.strip() for line in text.splitlines() if line.strip()] or ["no output"])[-1]


def read_actor_log(text: str) -> tuple[float, float]:
    """(seconds from the process start to its first action, steps/s after it) from an actor's
    log."""
    first = re.search(r"first action ([\d.]+) s after the process started", text)
    rate = re.search(r"since the first action \(([\d.]+) steps/s\)", text)
    if first is None or rate is None:
        raise BenchFailed(f"the actor logged no first action or steps/s: {last_line(text)}")
    return float(first.group(1)), float(rate.group(1))


def wait_for_policy(address: str, token: str | None, tls_ca: str | None,
                    timeout: float) -> str:
    """Until the learner at `address` answers and has published its first policy; its env."""
    from edge_rl.device.client import status_if_up

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = status_if_up(address, token, tls_ca=tls_ca)
        if status is not None and status.policy_version >= 1:
            return status.env_id
        time.sleep(0.5)
    raise UserError(f"the learner at {address} did not answer with a policy in {timeout:.0f} s")


def learner_counts(address: str, token: str | None, tls_ca: str | None, actor_id: str,
                   wait: float = 30.0) -> tuple[int, int]:
    """(the actor's batches in the learner's replay, the learner's updates): once some of the
    batches are there, or as they are after `wait` seconds."""
    from edge_rl.device.client import status_if_up

    deadline = time.monotonic() + wait
    while True:
        status = status_if_up(address, token, tls_ca=tls_ca)
        if status is None:
            raise BenchFailed(f"the learner at {address} stopped answering")
        inserted = sum(a.batches_inserted for a in status.actors if a.actor_id == actor_id)
        if inserted or time.monotonic() > deadline:
            return inserted, status.learner_updates
        time.sleep(0.5)


def measure_footprint(policy_file: str | None = None, learner: str | None = None,
                      token_file: str | None = None, tls_ca: str | None = None,
                      steps: int = 2000, chroot: Chroot | None = None,
                      timeout: float = 600.0, wait: float = 180.0) -> Footprint:
    """One `edge-rl actor` for `steps` env steps, against a stand-in learner serving
    `policy_file` or against the learner at `learner` (HOST:PORT), measured."""
    from edge_rl.device.client import read_token

    if (policy_file is None) == (learner is None):
        raise UserError("give either a POLICY_FILE, which a stand-in learner serves, or "
                        "--learner HOST:PORT, a running learner to join")
    if steps < 1 or timeout <= 0 or wait <= 0:
        raise UserError("--steps, --timeout and --wait must be positive")
    if chroot is not None and not (chroot.root / "tmp").is_dir():
        raise UserError(f"--chroot {chroot.root}: no such root (it needs a tmp/ folder)")
    token = read_token(token_file) if token_file else None
    actor_id = "bench-" + secrets.token_hex(4)
    server = stand_in = None
    if policy_file is not None:
        from edge_rl.device.bench_learner import StandInLearner, serve
        from edge_rl.device.policy import load_policy

        stand_in = StandInLearner(load_policy(policy_file))
        server, port = serve(stand_in)
        learner = f"127.0.0.1:{port}"
        env_id = stand_in.policy.metadata.env_id
    else:
        env_id = wait_for_policy(learner, token, tls_ca, wait)
    work = None
    try:
        # the actor's files lie where it can see them: inside the root when it runs in one
        work = Path(tempfile.mkdtemp(prefix="edge-rl-footprint-",
                                     dir=chroot.root / "tmp" if chroot else None))
        seen = Path("/") / work.relative_to(chroot.root) if chroot else work
        args = ["actor", "--learner", learner, "--actor-id", actor_id, "--spool",
                str(seen / "spool"), "--max-steps", str(steps)]
        if token:
            (work / "token").write_text(token + "\n")
            args += ["--token-file", str(seen / "token")]
        if tls_ca:
            shutil.copy(tls_ca, work / "ca.pem")
            args += ["--tls-ca", str(seen / "ca.pem")]
        command = (["chroot", str(chroot.root), chroot.edge_rl, *args] if chroot
                   else [*edge_rl_command(), *args])
        log.info("an actor for %s takes %d env steps against %s", env_id, steps,
                 "a stand-in learner" if stand_in else learner)
        began = time.monotonic()
        code, peak_mb = run_measured(command, work / "actor.log", timeout)
        wall = time.monotonic() - began
        text = (work / "actor.log").read_text(errors="replace")
        if code != 0:
            raise BenchFailed(f"the actor ran for more than {timeout:g} s: {last_line(text)}"
                              if code is None else f"the actor exited {code}: {last_line(text)}")
        first_s, rate = read_actor_log(text)
        if stand_in is not None:
            accepted, updates = stand_in.accepted(actor_id), None
        else:
            accepted, updates = learner_counts(learner, token, tls_ca, actor_id)
    finally:
        if server is not None:
            server.stop(grace=None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return Footprint(
        env=env_id, where=f"chroot {chroot.root}" if chroot else platform.machine(),
        learner="stand-in" if stand_in else learner, steps=steps, peak_rss_mb=peak_mb,
        first_action_s=first_s, steps_per_second=rate, wall_s=wall,
        batches_accepted=accepted, learner_updates=updates)


def missed_targets(footprint: Footprint, max_rss_mb: float | None,
                   max_first_action_s: float | None) -> list[str]:
    """What the footprint missed: the targets given, and batches that never reached the
    learner."""
    missed = []
    if footprint.batches_accepted == 0:
        missed.append("none of the actor's batches reached the learner")
    if max_rss_mb is not None and footprint.peak_rss_mb >= max_rss_mb:
        missed.append(f"peak RSS {footprint.peak_rss_mb:.1f} MB, target < {max_rss_mb:g} MB")
    if max_first_action_s is not None and footprint.first_action_s >= max_first_action_s:
        missed.append(f"first action after {footprint.first_action_s:.2f} s, target < "
                      f"{max_first_action_s:g} s")
    return missed
