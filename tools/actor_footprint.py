"""How big and how quick to start an `edge-rl actor` is: its peak resident memory and the time
from its start to its first action, against a real learner on loopback.

    python tools/actor_footprint.py                       # x86: checks the targets
    python tools/actor_footprint.py --chroot ROOT         # an actor inside an arm64 root
                                                          # (tools/arm64_check.py does this)

For each env a learner starts (`edge-rl learner`, few updates, no evaluations, so it keeps up)
and one actor joins it with its spool on, under `/usr/bin/time -v`, for --steps env steps.
The actor is the whole process a board would run: runtime, env, policy, gRPC channel and
spool. Reported: VmHWM (time's "Maximum resident set size"), the actor's own "first action
N s after the process started" log line, and its steps/s after that first action. On x86 the
targets are a peak under 100 MB for CartPole-v1 and 130 MB for HalfCheetah-v5 and a first
action within 1 s; --no-targets only reports. Under emulation (--chroot) qemu's own memory
and its translation of every instruction are counted too, so the figures are not a board's.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_rl.device.client import status_if_up

ALGOS = {"CartPole-v1": "dqn", "HalfCheetah-v5": "td3"}
TARGET_MB = {"CartPole-v1": 100.0, "HalfCheetah-v5": 130.0}
TARGET_FIRST_ACTION_S = 1.0
HOST_EDGE_RL = str(Path(sys.executable).with_name("edge-rl"))


@dataclass
class Footprint:
    env: str
    where: str  # "x86_64" or "arm64 (qemu)"
    peak_mb: float
    first_action_s: float
    steps_per_second: float
    wall_s: float
    batches_inserted: int  # the actor's batches in the learner's replay
    learner_updates: int  # updates the learner made on them


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_policy(port: int, token: str, timeout: float) -> None:
    """Until the learner answers and has published its first policy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = status_if_up(f"127.0.0.1:{port}", token)
        if status is not None and status.policy_version >= 1:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the learner on port {port} published no policy in {timeout:.0f} s")


def start_learner(env: str, port: int, token_file: Path, run_dir: Path, log: Path):
    args = [HOST_EDGE_RL, "learner", "--env", env, "--algo", ALGOS[env], "--port", str(port),
            "--token-file", str(token_file), "--out", str(run_dir), "--steps", "1000000000",
            "--updates-per-step", "0.02", "--warmup-steps", "200",
            "--eval-every", "1000000000",
            "--checkpoint-every", "1000000000", "--seed", "0"]
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def measure_actor(command: list[str], log: Path) -> tuple[float, float, float]:
    """Run the actor command under /usr/bin/time -v: (peak MB, first action s, steps/s)."""
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True,
                          timeout=1800)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"the actor exited {done.returncode}; see {log}:\n"
                           + "\n".join(done.stderr.splitlines()[-15:]))
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    first = re.search(r"first action ([\d.]+) s after the process started", done.stderr)
    if peak is None or first is None:
        raise RuntimeError("no peak RSS or first-action line in the actor's output:\n"
                           + "\n".join(done.stderr.splitlines()[-15:]))
    rate = re.search(r"since the first action \(([\d.]+) steps/s\)", done.stderr)
    if rate is None:
        raise RuntimeError("no steps/s line in the actor's output")
    return int(peak.group(1)) / 1024, float(first.group(1)), float(rate.group(1))


def footprint(env: str, steps: int, work: Path, chroot: Path | None,
              chroot_edge_rl: str) -> Footprint:
    port = free_port()
    token = secrets.token_hex(16)
    # the actor's files lie where it can see them: inside the root when it runs in one
    actor_dir = Path(tempfile.mkdtemp(dir=chroot / "tmp")) if chroot else work / "actor"
    actor_dir.mkdir(exist_ok=True)
    (actor_dir / "token").write_text(token + "\n")
    seen = Path("/") / actor_dir.relative_to(chroot) if chroot else actor_dir
    learner = start_learner(env, port, actor_dir / "token", work / f"run-{env}",
                            work / f"learner-{env}.log")
    try:
        wait_for_policy(port, token, timeout=180)
        actor_args = ["actor", "--learner", f"127.0.0.1:{port}", "--token-file",
                      str(seen / "token"), "--spool", str(seen / "spool"),
                      "--max-steps", str(steps)]
        if chroot:
            command = ["chroot", str(chroot), chroot_edge_rl, *actor_args]
            where = "arm64 (qemu)"
        else:
            command = [HOST_EDGE_RL, *actor_args]
            where = "x86_64"
        began = time.monotonic()
        peak_mb, first_s, rate = measure_actor(command, work / f"actor-{env}.log")
        wall = time.monotonic() - began
        # what reached the learner: the actor's batches in its replay, and updates on them
        deadline = time.monotonic() + 30
        while True:
            status = status_if_up(f"127.0.0.1:{port}", token)
            if status is None:
                raise RuntimeError("the learner stopped answering")
            if status.learner_updates > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        inserted = sum(a.batches_inserted for a in status.actors)
        return Footprint(env, where, peak_mb, first_s, rate, wall, inserted,
                         status.learner_updates)
    finally:
        learner.send_signal(signal.SIGTERM)
        try:
            learner.wait(timeout=90)
        except subprocess.TimeoutExpired:
            learner.kill()
        if chroot:
            shutil.rmtree(actor_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    parser.add_argument("--steps", type=int, default=2000, help="Env steps the actor takes.")
    parser.add_argument("--chroot", type=Path, help="Run the actor inside this (arm64) root.")
    parser.add_argument("--chroot-edge-rl", default="/opt/edge-rl/bin/edge-rl",
                        help="The edge-rl command inside --chroot.")
    parser.add_argument("--no-targets", action="store_true",
                        help="Report only; do not fail on the x86 targets.")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    args = parser.parse_args(argv)
    if not Path("/usr/bin/time").is_file():
        print("needs GNU time at /usr/bin/time (Debian: apt-get install time)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="edge-rl-footprint-") as folder:
        results = [footprint(env, args.steps, Path(folder), args.chroot, args.chroot_edge_rl)
                   for env in args.envs]
    failures = []
    print(f"{'env':<16} {'where':<14} {'peak RSS':>9} {'first action':>13} {'steps/s':>8} "
          f"{'batches in replay':>18} {'updates':>8}")
    for r in results:
        print(f"{r.env:<16} {r.where:<14} {r.peak_mb:>6.1f} MB {r.first_action_s:>11.2f} s "
              f"{r.steps_per_second:>8.0f} {r.batches_inserted:>18} {r.learner_updates:>8}")
        if r.batches_inserted == 0 or r.learner_updates == 0:
            failures.append(f"{r.env}: the actor's batches did not reach the learner's replay "
                            f"({r.batches_inserted} batches, {r.learner_updates} updates)")
        if args.chroot is None and not args.no_targets:
            if r.peak_mb >= TARGET_MB[r.env]:
                failures.append(f"{r.env}: peak {r.peak_mb:.1f} MB, target < "
                                f"{TARGET_MB[r.env]:.0f} MB")
            if r.first_action_s >= TARGET_FIRST_ACTION_S:
                failures.append(f"{r.env}: first action after {r.first_action_s:.2f} s, "
                                f"target < {TARGET_FIRST_ACTION_S:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    for failure in failures:
        print("MISSED " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
