"""What every resumable driver in tools/ shares (actorq_compare, bench_sparse,
learning_quality): a run's folder and what it has written, the loop that makes the
unfinished runs one after another with each one's output appended to its log, Ctrl-C that
stops the current run cleanly (a final checkpoint) so the same command resumes it, and the
options and main they all take. Each driver brings its own plan, its runs' commands and its
report. Standard library only: a driver runs `edge-rl` in subprocesses, never TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("resumable")

EDGE_RL = [sys.executable, "-m", "edge_rl"]


def slug(env_id: str) -> str:
    """An env id as one path component (dm_control/cartpole-balance-v0 has a slash)."""
    return env_id.replace("/", "-")


@dataclass(frozen=True)
class RunFolder:
    """One run of a driver: its setting, its seed and its folder, with its log beside it."""

    setting: Any
    seed: int
    run_dir: Path

    @property
    def log_file(self) -> Path:
        return self.run_dir.with_name(self.run_dir.name + ".log")


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_summary(run_dir: Path) -> dict | None:
    return read_json(run_dir / "summary.json")


def saved_steps(run_dir: Path) -> int | None:
    """--steps of the run as saved in its config.json."""
    return (read_json(run_dir / "config.json") or {}).get("steps")


def checkpoint_steps(run_dir: Path) -> int | None:
    """Env steps of the run's newest whole checkpoint; None if it has none."""
    pointer = run_dir / "checkpoints" / "latest"
    name = pointer.read_text().strip() if pointer.is_file() else ""
    return int(name.rsplit("-", 1)[-1]) if name and (pointer.parent / name).is_dir() else None


def wait_interruptibly(process: subprocess.Popen) -> int:
    """Wait for `process`; Ctrl-C here is passed on to it once per press (the first stops
    it cleanly with a final checkpoint), and KeyboardInterrupt raised once it has exited."""
    interrupted = False
    while True:
        try:
            code = process.wait()
        except KeyboardInterrupt:
            interrupted = True
            log.warning("interrupted: stopping %d cleanly (it writes a checkpoint)", process.pid)
            process.send_signal(signal.SIGINT)
            continue
        if interrupted:
            raise KeyboardInterrupt
        return code


def run_logged(name: str, command: list[str], log_file: Path, resuming: bool) -> bool:
    """Run `command` in the log's folder with its output appended to `log_file`; True if it
    ended with exit code 0. Ctrl-C stops it cleanly (see wait_interruptibly)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log.info("%s %s (log: %s)", "resuming" if resuming else "starting", name, log_file)
    started = time.monotonic()
    with open(log_file, "a") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n")
        out.flush()
        # Its own process group: a terminal's Ctrl-C reaches only this driver, which passes
        # exactly one SIGINT on (a second one would stop edge-rl before its checkpoint). In
        # the log's folder, where MuJoCo's MUJOCO_LOG.TXT then lands.
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, process_group=0,
                                   cwd=log_file.parent)
        code = wait_interruptibly(process)
    seconds = time.monotonic() - started
    if code != 0:
        log.error("%s failed with exit code %d after %.0f s; see %s", name, code, seconds,
                  log_file)
        return False
    log.info("%s finished in %.0f s", name, seconds)
    return True


def run_all(runs: list, max_runs: int | None, status_of: Callable[[Any], str],
            execute_one: Callable[[Any, str], bool]) -> list:
    """Run the unfinished runs in order, at most `max_runs` of them; returns those that
    failed. KeyboardInterrupt goes through once the current run has stopped. `status_of(run)`
    says "done", "resume" or "new"; `execute_one(run, status)` makes it, True if it ended
    well."""
    failed, started = [], 0
    for run in runs:
        status = status_of(run)
        if status == "done":
            continue
        if max_runs is not None and started >= max_runs:
            log.info("--max-runs %d reached: stopping here", max_runs)
            break
        started += 1
        if not execute_one(run, status):
            failed.append(run)
    return failed


def run_until_interrupted(runs: list, max_runs: int | None, status_of: Callable[[Any], str],
                          execute_one: Callable[[Any, str], bool]) -> list | None:
    """run_all, with Ctrl-C (even when started with SIGINT ignored, as a background job) and
    SIGTERM stopping the current run cleanly; None if interrupted."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.default_int_handler)  # raises KeyboardInterrupt
    try:
        return run_all(runs, max_runs, status_of, execute_one)
    except KeyboardInterrupt:
        log.warning("interrupted: run the same command again to resume")
        return None


def add_driver_arguments(parser: argparse.ArgumentParser, out: str, report_flag: str) -> None:
    """The options every resumable driver here shares; `report_flag` (--report-only,
    --table-only) runs nothing and writes the report."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--only", metavar="REGEX", help="Only the runs whose name matches.")
    parser.add_argument("--max-runs", type=int, metavar="N", help="Start at most N runs.")
    parser.add_argument("--dry-run", action="store_true", help="Print the plan and exit.")
    parser.add_argument(report_flag, dest="report_only", action="store_true",
                        help="Run nothing; write the report.")


def drive(runs: list, args: argparse.Namespace, print_plan: Callable[[list], None],
          execute_one: Callable[[Any, str], bool], report: Callable[[list], str],
          report_file: Path) -> int:
    """A resumable driver's main: print the plan; unless --dry-run, make the unfinished runs
    (not with --report-only), then write `report(runs)` to `report_file` and print it. Exit
    status: 2 if nothing matched, 130 if interrupted, 1 if a run failed."""
    if not runs:
        log.error("no run matches --only %r", args.only)
        return 2
    print_plan(runs)
    if args.dry_run:
        return 0
    failed = []
    if not args.report_only:
        failed = run_until_interrupted(runs, args.max_runs, lambda run: run.status(),
                                       execute_one)
        if failed is None:
            return 130
    text = report(runs)
    report_file.parent.mkdir(parents=True, exist_ok=True)
    report_file.write_text(text + "\n")
    print(text)
    for run in failed:
        log.error("failed: %s (log: %s)", run.run_dir.name, run.log_file)
    return 1 if failed else 0
