"""Actor processes live and die with their learner; Ctrl-C ends a run cleanly."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import EDGE_RL

from edge_rl.device.accounting import DEFAULT_CPU_WATTS, cpu_method
from edge_rl.runs.checkpoint import latest_checkpoint

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_long_run(out: Path, actors: int = 2) -> tuple[subprocess.Popen, list[int]]:
    process = subprocess.Popen(
        [EDGE_RL, "train", "--out", str(out), "--steps", "10000000", "--actors", str(actors),
         "--eval-every", "10000000", "--checkpoint-every", "10000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 180
    logs = [out / "logs" / f"actor-{i}.log" for i in range(actors)]
    while time.monotonic() < deadline:
        if all(log.exists() and "acting in" in log.read_text() for log in logs):
            break
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("actors never started acting")
    actor_pids = children(process.pid)
    assert len(actor_pids) == actors
    return process, actor_pids


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def test_ctrl_c_stops_the_actors_and_writes_a_final_checkpoint(tmp_path):
    out = tmp_path / "run"
    process, actor_pids = start_long_run(out)
    time.sleep(3)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    assert summary["steps"] > 0
    # One energy figure for the machine (RAPL where the kernel gives it, else the learner's
    # process tree, its two actors included, each once); local actors report nothing themselves
    energy = summary["energy"]
    assert energy["method"].startswith("learner machine: ") and energy["joules"] > 0
    assert energy["remote_actors_joules"] == 0
    if energy["method"] == f"learner machine: {cpu_method(DEFAULT_CPU_WATTS)}":
        # cpu-seconds x watts cannot exceed every core busy for the whole run
        assert energy["joules"] <= (os.cpu_count() * summary["wall_clock_seconds"]
                                    * DEFAULT_CPU_WATTS * 1.1)
    assert energy["emissions_kg"] == pytest.approx(
        energy["kwh"] * energy["carbon_intensity_g_per_kwh"] / 1000, rel=1e-3)
    assert summary["time_breakdown"]["actors"]["env"] > 0
    assert latest_checkpoint(out / "checkpoints") is not None
    assert wait_gone(actor_pids, 10) == []


def test_actors_die_with_a_killed_learner(tmp_path):
    process, actor_pids = start_long_run(tmp_path / "run")
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert wait_gone(actor_pids, 15) == []
